/* gpu_test -- end-to-end correctness of the CUDA datapath, on a GPU machine, under purlinrun:
 *
 *   purlinrun -n N gpu_test [--quick] [--big] [--graph] [--seed S]     correctness (default)
 *   purlinrun -n N gpu_test --tiny                                     a few cases (sanitizers)
 *   purlinrun -n N gpu_test --huge                                     256 MiB per call, each
 *                                                                     collective (pools of 256 MiB)
 *   purlinrun -n N gpu_test --device-counts     V counts in device memory: eager, CUDA graph with
 *                                               new counts per replay, MISMATCH between ranks
 *   purlinrun -n N gpu_test --fault mismatch                          MISMATCH on every rank
 *   purlinrun -n N gpu_test --fault kill                              rank N-1 dies mid-call
 *   purlinrun -n N gpu_test --fault kill-gather                       the same in an AllGather
 *   purlinrun -n N gpu_test --fault kill-small                        the same in a 4 KB AllReduce
 *                                                                     (the lean packet kernel)
 *   purlinrun -n N gpu_test --fault leave                             rank N-1 destroys and exits:
 *                                                                     no error, then REMOTE at once
 *   --no-a2av: skip all_to_all_v cases (PURLIN_ATOM=ce with a small PURLIN_STAGING_BYTES refuses
 *   blocks above staging/world; see docs/gpu.md)
 *
 * Every rank picks device PURLIN_LOCAL_RANK % devices (several ranks share a GPU under MPS), runs
 * the same list of cases in lockstep, and checks its whole output buffer element by element: the
 * expected values come from the library's own host reduction (pl_reduce_elems of src/dtype.h, the
 * host datapath's code), fed in rank order, so deterministic results must be equal bit for bit;
 * non-deterministic ones within a tolerance. Bytes of the output buffer that the call must not
 * write keep their sentinel. Inputs are a function of (seed, case, rank, index), so every rank
 * knows every other rank's input without communication.
 *
 * Output: one line per failure (at most 30), then "gpu_test: rank R: P passed, F failed" and exit
 * status 1 on any failure. */
#include <cuda_runtime_api.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dtype.h"
#include "purlin.h"

enum { C_AR, C_AG, C_RS, C_A2A, C_AGV, C_RSV, C_A2AV, C_COUNT };
static const char *const k_coll[C_COUNT] = {"ar", "ag", "rs", "a2a", "agv", "rsv", "a2av"};
static int coll_reduces(int c) { return c == C_AR || c == C_RS || c == C_RSV; }
static int coll_is_v(int c) { return c >= C_AGV; }

/* Buffers: d = cudaMalloc, m = purlin_mem_alloc; u = offset by one element (unaligned); mm:u: the
 * send buffer offset by 1 + rank % 3 elements, so that ranks' blocks differ in alignment (the
 * direct kernel's copies between them take its 16-byte, 4-byte and byte paths). */
/* out:x: even ranks pass purlin_mem_alloc buffers, odd ranks cudaMalloc ones (the direct kernel
 * reads the ones in place, the others' staging). r = cudaMalloc memory registered with
 * purlin_mem_register (peer-mapped by CUDA IPC; each rank's pool at its own offset in its
 * allocation); out:xr: even ranks registered, odd ranks plain cudaMalloc. */
enum {
  B_OUT_DD, B_OUT_MM, B_OUT_DM, B_IN_D, B_IN_M, B_OUT_DD_U, B_OUT_MM_U, B_OUT_X,
  B_OUT_RR, B_IN_R, B_OUT_RR_U, B_OUT_XR, B_COUNT
};
static const char *const k_buf[B_COUNT] = {"out:dd", "out:mm",   "out:dm", "in:d",
                                           "in:m",   "out:dd:u", "out:mm:u", "out:x",
                                           "out:rr", "in:r",     "out:rr:u", "out:xr"};
static int buf_inplace(int b) { return b == B_IN_D || b == B_IN_M || b == B_IN_R; }

typedef struct {
  int coll, dtype, op, mode, buf, vdispl;
  size_t count;
  uint64_t key;
} case_t;
/* V cases added while it is set: the blocks between ranks 0 and 1 have this many elements, the
 * others at most count (0: every block random in [0, 2 count]) */
static size_t g_skew;
static int g_nozero; /* V counts: none zero (every rank's output written by its peers) */

static purlin_comm_t g_comm;
static cudaStream_t g_stream;
static int g_rank, g_world;
static long g_pass, g_fail, g_lines;
static uint64_t g_seed = 1;
static size_t g_pool_bytes;
static char *g_dev[2], *g_sym[2]; /* send-side and recv-side pools */
static char *g_rraw[2], *g_reg[2]; /* cudaMalloc'd, and the registered pools inside them */
static int g_reg_ok;               /* both registered (else one failure, and no "r" cases) */
static char *g_host_got, *g_host_exp, *g_host_in;
static char *g_gen[72]; /* per rank input chunk for the reference */

#define CHUNK 65536 /* elements per reference chunk */
#define SENTINEL 0xA5

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static void fail_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail_line(const char *fmt, ...) {
  g_fail++;
  if (g_lines++ >= 30) return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "gpu_test: rank %d: FAIL ", g_rank);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

#define CK(call)                                                                                   \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) {                                                                       \
      fprintf(stderr, "gpu_test: rank %d: %s: %s\n", g_rank, #call, cudaGetErrorString(e_));      \
      exit(2);                                                                                     \
    }                                                                                              \
  } while (0)
#define PK(call)                                                                                   \
  do {                                                                                             \
    purlin_status_t s_ = (call);                                                                   \
    if (s_ != PURLIN_OK) {                                                                         \
      fprintf(stderr, "gpu_test: rank %d: %s: %s: %s\n", g_rank, #call, purlin_status_name(s_),   \
              purlin_comm_last_error(g_comm));                                                     \
      exit(2);                                                                                     \
    }                                                                                              \
  } while (0)

/* ---- inputs ---------------------------------------------------------------------------------- */

static uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* Element idx of rank r's send buffer. Floats: 24 random mantissa bits in [-2, 2) (sums round, so
 * the order of accumulation shows in the bits); prod: magnitudes in [0.5, 2). */
static void gen_elem(const case_t *c, int r, uint64_t idx, void *out) {
  uint64_t h = mix(c->key ^ mix((uint64_t)r << 48 ^ idx));
  float f = (float)((int64_t)(h >> 40) - (1 << 23)) * (1.0f / (1 << 22));
  if (c->op == PURLIN_PROD) f = (h & 1 ? -1.0f : 1.0f) * (0.5f + (float)(h >> 41) * (1.5f / (1u << 23)));
  switch (c->dtype) {
  case PURLIN_F32: memcpy(out, &f, 4); break;
  case PURLIN_F64: {
    double d = (double)((int64_t)(h >> 11) - (1ll << 52)) / (double)(1ll << 51);
    memcpy(out, &d, 8);
    break;
  }
  case PURLIN_F16: { uint16_t v = pl_f32_to_f16(f); memcpy(out, &v, 2); break; }
  case PURLIN_BF16: { uint16_t v = pl_f32_to_bf16(f); memcpy(out, &v, 2); break; }
  case PURLIN_FP8_E4M3: *(uint8_t *)out = pl_f32_to_e4m3(f); break;
  case PURLIN_FP8_E5M2: *(uint8_t *)out = pl_f32_to_e5m2(f); break;
  default: memcpy(out, &h, pl_dtype_bytes(c->dtype)); break; /* integers: random bits */
  }
}
static void gen_fill(const case_t *c, int r, uint64_t start, size_t n, char *out) {
  size_t es = pl_dtype_bytes(c->dtype);
  for (size_t i = 0; i < n; i++) gen_elem(c, r, start + i, out + i * es);
}

/* ---- layout of a case ------------------------------------------------------------------------ */

typedef struct {
  size_t sc[72][72], sd[72][72]; /* A2AV: rank r's send counts and displacements to p; RSV:
                                    sd[r][j], rank r's sdispls (they differ across ranks) */
  size_t rc[72], rd[72];         /* my recvcounts / rdispls (AGV, A2AV), recvcounts (RSV) */
  size_t vsd[72];                /* RSV: my sdispls (sd[me]) */
  size_t send_elems[72];         /* extent of rank r's input */
  size_t recv_elems;             /* extent of my output */
  size_t in_off;                 /* in place: where my input sits in the recv buffer (elements) */
  size_t out_off;                /* RS/RSV in place: where my output sits in the send buffer */
} lay_t;

static size_t vcount(const case_t *c, int a, int b) {
  uint64_t h = mix(c->key ^ 0x5151 ^ ((uint64_t)a << 20) ^ (uint64_t)b);
  if (g_skew && a != b && a < 2 && b < 2) return g_skew;
  if (h % 5 == 0 && !g_nozero) return 0;
  size_t v = (size_t)(h >> 8) % ((g_skew ? 1 : 2) * c->count + 1);
  return g_nozero && !v ? 1 : v;
}

/* Displacements: prefix sums (vdispl 0, passed as NULL), or blocks in reverse rank order with a
 * one-element gap after each (vdispl 1). */
static void displs(const size_t *cnt, int w, int gapped, size_t *d, size_t *extent) {
  size_t s = 0;
  for (int k = 0; k < w; k++) {
    int i = gapped ? w - 1 - k : k;
    d[i] = s;
    s += cnt[i] + (gapped ? 1 : 0);
  }
  *extent = s;
}

static void layout(const case_t *c, lay_t *L) {
  int w = g_world, me = g_rank;
  size_t n = c->count;
  memset(L, 0, sizeof(*L));
  switch (c->coll) {
  case C_AR:
    for (int r = 0; r < w; r++) L->send_elems[r] = n;
    L->recv_elems = n;
    break;
  case C_AG:
    for (int r = 0; r < w; r++) L->send_elems[r] = n;
    L->recv_elems = n * w;
    L->in_off = n * me;
    break;
  case C_RS:
    for (int r = 0; r < w; r++) L->send_elems[r] = n * w;
    L->recv_elems = n;
    L->out_off = n * me;
    break;
  case C_A2A:
    for (int r = 0; r < w; r++) L->send_elems[r] = n * w;
    L->recv_elems = n * w;
    break;
  case C_AGV:
    for (int r = 0; r < w; r++) L->rc[r] = vcount(c, r, 0);
    displs(L->rc, w, c->vdispl, L->rd, &L->recv_elems);
    for (int r = 0; r < w; r++) L->send_elems[r] = L->rc[r];
    L->in_off = L->rd[me];
    break;
  case C_RSV: /* vdispl: even ranks' shards reversed with gaps, odd ranks' prefix sums (passed),
                 so that a rank that reads a peer's shard must use that peer's sdispls */
    for (int r = 0; r < w; r++) L->rc[r] = vcount(c, r, 0);
    for (int r = 0; r < w; r++)
      displs(L->rc, w, c->vdispl && r % 2 == 0, L->sd[r], &L->send_elems[r]);
    memcpy(L->vsd, L->sd[me], sizeof L->vsd);
    L->recv_elems = L->rc[me];
    L->out_off = L->vsd[me];
    break;
  case C_A2AV: {
    int sym = buf_inplace(c->buf); /* in place needs sendcounts == recvcounts: symmetric counts */
    for (int r = 0; r < w; r++) {
      for (int p = 0; p < w; p++)
        L->sc[r][p] = sym ? vcount(c, r < p ? r : p, r < p ? p : r) : vcount(c, r, p);
      displs(L->sc[r], w, c->vdispl, L->sd[r], &L->send_elems[r]);
    }
    for (int r = 0; r < w; r++) L->rc[r] = L->sc[r][me];
    if (sym) {
      memcpy(L->rd, L->sd[me], sizeof L->rd);
      L->recv_elems = L->send_elems[me];
    } else {
      displs(L->rc, w, c->vdispl, L->rd, &L->recv_elems);
    }
    break;
  }
  }
}

/* ---- expected output ------------------------------------------------------------------------- */

/* exp[j] for j < n = reduce over r of input_r[start_r + j] (start_r: starts[r], or start when
 * starts is NULL), by pl_reduce_elems (rank order). */
static void ref_reduce(const case_t *c, const size_t *starts, size_t start, size_t n, char *exp) {
  size_t es = pl_dtype_bytes(c->dtype);
  const void *srcs[72];
  for (size_t o = 0; o < n; o += CHUNK) {
    size_t k = n - o < CHUNK ? n - o : CHUNK;
    for (int r = 0; r < g_world; r++) {
      gen_fill(c, r, (starts ? starts[r] : start) + o, k, g_gen[r]);
      srcs[r] = g_gen[r];
    }
    pl_reduce_elems(exp + o * es, srcs, g_world, k, c->dtype, c->op, g_world);
  }
}

/* The whole output buffer: the blocks the call writes over what was there before (the sentinel,
 * and in place my own input, which gaps between V blocks keep). */
static void expected(const case_t *c, const lay_t *L, char *exp, const char *my_input) {
  size_t es = pl_dtype_bytes(c->dtype), n = c->count;
  int w = g_world, me = g_rank;
  memset(exp, SENTINEL, L->recv_elems * es);
  if (my_input && !coll_reduces(c->coll))
    memcpy(exp + L->in_off * es, my_input, L->send_elems[me] * es);
  switch (c->coll) {
  case C_AR: ref_reduce(c, NULL, 0, n, exp); break;
  case C_RS: ref_reduce(c, NULL, n * me, n, exp); break;
  case C_RSV: {
    size_t st[72];
    for (int r = 0; r < w; r++) st[r] = L->sd[r][me];
    ref_reduce(c, st, 0, L->rc[me], exp);
    break;
  }
  case C_AG:
    for (int r = 0; r < w; r++) gen_fill(c, r, 0, n, exp + n * r * es);
    break;
  case C_A2A:
    for (int r = 0; r < w; r++) gen_fill(c, r, n * me, n, exp + n * r * es);
    break;
  case C_AGV:
    for (int r = 0; r < w; r++) gen_fill(c, r, 0, L->rc[r], exp + L->rd[r] * es);
    break;
  case C_A2AV:
    for (int r = 0; r < w; r++) gen_fill(c, r, L->sd[r][me], L->rc[r], exp + L->rd[r] * es);
    break;
  }
}

static double float_value(int dtype, const void *p) {
  switch (dtype) {
  case PURLIN_F32: { float f; memcpy(&f, p, 4); return f; }
  case PURLIN_F64: { double d; memcpy(&d, p, 8); return d; }
  case PURLIN_F16: { uint16_t v; memcpy(&v, p, 2); return pl_f16_to_f32(v); }
  case PURLIN_BF16: { uint16_t v; memcpy(&v, p, 2); return pl_bf16_to_f32(v); }
  case PURLIN_FP8_E4M3: return pl_e4m3_to_f32(*(const uint8_t *)p);
  case PURLIN_FP8_E5M2: return pl_e5m2_to_f32(*(const uint8_t *)p);
  default: return 0;
  }
}
static int is_float(int dtype) {
  return dtype == PURLIN_F32 || dtype == PURLIN_F64 || dtype == PURLIN_F16 ||
         dtype == PURLIN_BF16 || dtype == PURLIN_FP8_E4M3 || dtype == PURLIN_FP8_E5M2;
}
/* Non-deterministic sums may round differently: a few units of the format's precision, scaled by
 * the largest partial sum (|inputs| < 2). */
static double tolerance(const case_t *c) {
  double eps = c->dtype == PURLIN_F64 ? 0x1p-52 : c->dtype == PURLIN_F32 ? 0x1p-23
               : c->dtype == PURLIN_F16 ? 0x1p-10 : c->dtype == PURLIN_BF16 ? 0x1p-7
               : c->dtype == PURLIN_FP8_E4M3 ? 0x1p-3 : 0x1p-2;
  return 4.0 * eps * 2.0 * g_world;
}

static void describe(const case_t *c, char *buf, size_t len) {
  snprintf(buf, len, "%s/%s/%s/%s/n=%zu/%s%s%s", k_coll[c->coll], purlin_dtype_name(c->dtype),
           coll_reduces(c->coll) ? purlin_op_name(c->op) : "-", c->mode ? "det" : "nd", c->count,
           k_buf[c->buf], coll_is_v(c->coll) ? (c->vdispl ? "/gapped" : "/null") : "",
           g_skew ? "/skew01" : "");
}

static int compare(const case_t *c, const lay_t *L, const char *got, const char *exp,
                   size_t lo, size_t hi) {
  size_t es = pl_dtype_bytes(c->dtype);
  int bad = 0;
  int reduced = coll_reduces(c->coll);
  double tol = tolerance(c);
  for (size_t i = lo; i < hi; i++) {
    const char *g = got + i * es, *e = exp + i * es;
    if (!memcmp(g, e, es)) continue;
    if (reduced && !c->mode && is_float(c->dtype) &&
        (c->op == PURLIN_SUM || c->op == PURLIN_AVG) &&
        fabs(float_value(c->dtype, g) - float_value(c->dtype, e)) <= tol)
      continue;
    if (!bad) {
      char d[160];
      uint64_t gv = 0, ev = 0;
      memcpy(&gv, g, es);
      memcpy(&ev, e, es);
      describe(c, d, sizeof d);
      fail_line("%s: element %zu of %zu: got 0x%" PRIx64 ", expected 0x%" PRIx64, d, i,
                L->recv_elems, gv, ev);
    }
    bad++;
  }
  return bad;
}

/* ---- one case -------------------------------------------------------------------------------- */

static purlin_status_t launch(const case_t *c, const lay_t *L, const void *s, void *r,
                              purlin_opts_t *o, cudaStream_t st) {
  size_t cnt[72], d1[72], d2[72], cnt2[72];
  int w = g_world;
  switch (c->coll) {
  case C_AR: return purlin_all_reduce(s, r, c->count, c->dtype, c->op, g_comm, st, o);
  case C_AG: return purlin_all_gather(s, r, c->count, c->dtype, g_comm, st, o);
  case C_RS: return purlin_reduce_scatter(s, r, c->count, c->dtype, c->op, g_comm, st, o);
  case C_A2A: return purlin_all_to_all(s, r, c->count, c->dtype, g_comm, st, o);
  case C_AGV:
    for (int i = 0; i < w; i++) cnt[i] = L->rc[i], d1[i] = L->rd[i];
    return purlin_all_gather_v(s, L->rc[g_rank], r, cnt, c->vdispl ? d1 : NULL, c->dtype, g_comm,
                               st, o);
  case C_RSV:
    for (int i = 0; i < w; i++) cnt[i] = L->rc[i], d1[i] = L->vsd[i];
    return purlin_reduce_scatter_v(s, r, cnt, c->vdispl ? d1 : NULL, c->dtype, c->op, g_comm, st,
                                   o);
  default:
    for (int i = 0; i < w; i++)
      cnt[i] = L->sc[g_rank][i], d1[i] = L->sd[g_rank][i], cnt2[i] = L->rc[i], d2[i] = L->rd[i];
    return purlin_all_to_all_v(s, cnt, c->vdispl ? d1 : NULL, r, cnt2, c->vdispl ? d2 : NULL,
                               c->dtype, g_comm, st, o);
  }
}

/* Where the case's send and recv buffers are (in place: the same buffer at the right offsets). */
static void buffers(const case_t *c, const lay_t *L, char **send, char **recv, char **base,
                    size_t *base_elems) {
  size_t es = pl_dtype_bytes(c->dtype);
  int x = c->buf == B_OUT_X && g_rank % 2 == 0;
  int mem = c->buf == B_OUT_MM || c->buf == B_IN_M || c->buf == B_OUT_MM_U || x;
  int reg = c->buf == B_OUT_RR || c->buf == B_IN_R || c->buf == B_OUT_RR_U ||
            (c->buf == B_OUT_XR && g_rank % 2 == 0);
  char *sbuf = reg ? g_reg[0] : mem ? g_sym[0] : g_dev[0];
  char *rbuf = reg ? g_reg[1]
               : (c->buf == B_OUT_MM || c->buf == B_OUT_DM || c->buf == B_IN_M ||
                  c->buf == B_OUT_MM_U || x) ? g_sym[1] : g_dev[1];
  if (c->buf == B_OUT_DD_U) sbuf += es, rbuf += es;
  if (c->buf == B_OUT_MM_U || c->buf == B_OUT_RR_U) sbuf += es * (size_t)(1 + g_rank % 3), rbuf += es;
  if (!buf_inplace(c->buf)) {
    *send = sbuf;
    *recv = rbuf;
    *base = rbuf;
    *base_elems = L->recv_elems;
    return;
  }
  if (c->coll == C_RS || c->coll == C_RSV) { /* the output is my slice of the input */
    *send = rbuf;
    *recv = rbuf + L->out_off * es;
    *base = rbuf;
    *base_elems = L->send_elems[g_rank];
  } else { /* the input is my slice of the output */
    *recv = rbuf;
    *send = rbuf + L->in_off * es;
    *base = rbuf;
    *base_elems = L->recv_elems;
  }
}

/* --device-counts: V counts and displacements in device memory (opts.counts_on_device). The
 * words of a case: [0] sendcounts, [1] sdispls, [2] recvcounts, [3] rdispls (72 each). */
#define DCW 72
static int g_devcounts;   /* eager V cases pass their counts in device memory */
static size_t *g_cnt_dev; /* 4 * DCW words of device memory */
static int g_perturb;     /* mismatch test: the last rank adds 1 to its recvcounts[0] */
static int g_no_a2av;     /* --no-a2av */

static void dev_counts_fill(const case_t *c, const lay_t *L, size_t h[4][DCW]) {
  memset(h, 0, sizeof(size_t) * 4 * DCW);
  for (int i = 0; i < g_world; i++) {
    if (c->coll == C_A2AV) h[0][i] = L->sc[g_rank][i], h[1][i] = L->sd[g_rank][i];
    if (c->coll == C_RSV) h[1][i] = L->vsd[i];
    h[2][i] = L->rc[i];
    h[3][i] = L->rd[i];
  }
  if (g_perturb && g_rank == g_world - 1) h[2][0]++;
}

/* A V collective with its counts at dbuf (device memory); AGV's sendcount is the room of send
 * (elements), at least recvcounts[rank]. */
static purlin_status_t launch_dev(const case_t *c, const void *s, void *r, size_t room,
                                  purlin_opts_t *o, cudaStream_t st, size_t *dbuf) {
  size_t *sc = dbuf, *sd = dbuf + DCW, *rc = dbuf + 2 * DCW, *rd = dbuf + 3 * DCW;
  o->counts_on_device = 1;
  switch (c->coll) {
  case C_AGV:
    return purlin_all_gather_v(s, room, r, rc, c->vdispl ? rd : NULL, c->dtype, g_comm, st, o);
  case C_RSV:
    return purlin_reduce_scatter_v(s, r, rc, c->vdispl ? sd : NULL, c->dtype, c->op, g_comm, st,
                                   o);
  default:
    return purlin_all_to_all_v(s, sc, c->vdispl ? sd : NULL, r, rc, c->vdispl ? rd : NULL,
                               c->dtype, g_comm, st, o);
  }
}

static void run_case(const case_t *c) {
  lay_t *L = malloc(sizeof(lay_t));
  size_t es = pl_dtype_bytes(c->dtype);
  char *send, *recv, *base, d[160];
  size_t base_elems;
  purlin_opts_t o = PURLIN_OPTS_INIT;
  o.mode = c->mode ? PURLIN_DETERMINISTIC : PURLIN_NONDETERMINISTIC;
  layout(c, L);
  buffers(c, L, &send, &recv, &base, &base_elems);
  describe(c, d, sizeof d);
  size_t my_in = L->send_elems[g_rank];
  if ((base_elems + 4) * es > g_pool_bytes || (my_in + 4) * es > g_pool_bytes) {
    fprintf(stderr, "gpu_test: case %s does not fit the pool\n", d);
    exit(2);
  }
  /* sentinel everywhere, then my input */
  CK(cudaMemsetAsync(base, SENTINEL, base_elems * es, g_stream));
  gen_fill(c, g_rank, 0, my_in, g_host_in);
  CK(cudaMemcpyAsync(send, g_host_in, my_in * es, cudaMemcpyHostToDevice, g_stream));
  purlin_status_t st;
  if (g_devcounts && coll_is_v(c->coll)) {
    size_t h[4][DCW];
    dev_counts_fill(c, L, h);
    CK(cudaMemcpyAsync(g_cnt_dev, h, sizeof h, cudaMemcpyHostToDevice, g_stream));
    st = launch_dev(c, send, recv, L->rc[g_rank], &o, g_stream, g_cnt_dev);
  } else {
    st = launch(c, L, send, recv, &o, g_stream);
  }
  CK(cudaStreamSynchronize(g_stream));
  purlin_status_t ast = PURLIN_OK;
  purlin_comm_get_async_error(g_comm, &ast);
  if (st || ast) {
    fail_line("%s: status %s, async %s: %s", d, purlin_status_name(st), purlin_status_name(ast),
              purlin_comm_last_error(g_comm));
    if (ast == PURLIN_ERR_TIMEOUT || ast == PURLIN_ERR_REMOTE) exit(1);
    free(L);
    return;
  }
  /* check: the output; in place RS/RSV only the output slice (the rest is my input) */
  CK(cudaMemcpy(g_host_got, recv, L->recv_elems * es, cudaMemcpyDeviceToHost));
  expected(c, L, g_host_exp, buf_inplace(c->buf) ? g_host_in : NULL);
  int bad = compare(c, L, g_host_got, g_host_exp, 0, L->recv_elems);
  if (bad) {
    if (bad > 1) fprintf(stderr, "gpu_test: rank %d:   (%d elements differ in %s)\n", g_rank, bad, d);
  } else {
    g_pass++;
  }
  free(L);
}

/* ---- the matrix ------------------------------------------------------------------------------ */

static uint64_t g_case_no;
static void add(int coll, int dtype, int op, int mode, size_t count, int buf, int vdispl) {
  case_t c = {coll, dtype, op, mode, buf, vdispl, count, 0};
  if (g_no_a2av && coll == C_A2AV) return;
  if (!g_reg_ok && (buf == B_OUT_RR || buf == B_IN_R || buf == B_OUT_RR_U || buf == B_OUT_XR))
    return;
  c.key = mix(g_seed * 1000003 + ++g_case_no);
  run_case(&c);
}

static void matrix(int quick, int big) {
  static const int dtypes[] = {PURLIN_F32, PURLIN_BF16, PURLIN_F16, PURLIN_FP8_E4M3, PURLIN_I32};
  /* 1 element, odd sizes, the packet/stage boundary of the default tuning (16 KiB per block),
   * several chunks and both staging halves of the 4 MiB default */
  static const size_t small[] = {1, 3, 33, 1000, 4099};
  static const size_t mid[] = {20000, 100003, 300007, 1500000}; /* 100003: two-shot AllReduce */
  double t0 = now_s();
  for (int coll = 0; coll < C_COUNT; coll++)
    for (int di = 0; di < 5; di++)
      for (int op = 0; op < (coll_reduces(coll) ? 2 : 1); op++)
        for (int mode = 0; mode < (coll_reduces(coll) ? 2 : 1); mode++) {
          int o = op ? PURLIN_MAX : PURLIN_SUM;
          for (size_t si = 0; si < sizeof small / sizeof small[0]; si++)
            for (int b = 0; b < B_COUNT; b++) {
              if (quick && (b + (int)si + di) % 3) continue;
              add(coll, dtypes[di], o, mode, small[si], b, (int)(si + b) & 1);
            }
          if (di > 2 && quick) continue;
          for (size_t si = 0; si < sizeof mid / sizeof mid[0]; si++) {
            size_t n = mid[si] / (coll == C_AR ? 1 : g_world);
            add(coll, dtypes[di], o, mode, n, (int)(si + di + mode) % B_COUNT, (int)si & 1);
          }
        }
  /* the other ops and dtypes */
  static const int ops[] = {PURLIN_PROD, PURLIN_MIN, PURLIN_AVG};
  for (int k = 0; k < 3; k++)
    for (int coll = 0; coll < C_COUNT; coll++)
      if (coll_reduces(coll)) {
        add(coll, PURLIN_F32, ops[k], 1, 5000, k % B_COUNT, 0);
        add(coll, PURLIN_I32, ops[k], 1, 777, (k + 1) % B_COUNT, 1);
        add(coll, PURLIN_BF16, ops[k], 0, 40000, (k + 2) % B_COUNT, 0);
      }
  static const int more[] = {PURLIN_F64, PURLIN_U8, PURLIN_I8, PURLIN_I64, PURLIN_U32,
                             PURLIN_U64, PURLIN_FP8_E5M2};
  for (int k = 0; k < 7; k++)
    for (int coll = 0; coll < C_COUNT; coll++)
      add(coll, more[k], k & 1 ? PURLIN_MAX : PURLIN_SUM, 1, 3001 + (size_t)k, (k + coll) % B_COUNT,
          k & 1);
  /* AllToAllV whose only large blocks are between ranks 0 and 1 (800 KB), every other block
   * small: at world >= 3 ranks 0 and 1 run the direct kernel (SNAC's in place, or with
   * PURLIN_DIRECT_A2AV=0) and the others the lean kernel in the same call, exchanging packets
   * (zero copy between ranks 0 and 1 on "mm" buffers).
   * AGV and RSV with small counts run the lean kernel on every rank. */
  g_skew = 400000;
  for (int b = 0; b < B_COUNT; b++) add(C_A2AV, PURLIN_BF16, PURLIN_SUM, 0, 700, b, b & 1);
  g_skew = 0;
  /* The direct kernel (above the packet sizes; zero copy on purlin_mem_alloc buffers, staged on
   * the others, mixed across ranks): every collective it takes, out of place, in place,
   * unaligned, three dtypes, both modes. With a small PURLIN_STAGING_BYTES they run in rounds. */
  static const int dbufs[] = {B_OUT_MM, B_IN_M, B_OUT_MM_U, B_OUT_DD, B_IN_D, B_OUT_DD_U,
                              B_OUT_DM, B_OUT_X, B_OUT_RR, B_IN_R, B_OUT_RR_U, B_OUT_XR};
  for (int coll = 0; coll < C_COUNT; coll++)
    for (int b = 0; b < (int)(sizeof dbufs / sizeof dbufs[0]); b++) {
      /* (in place: not direct; AllToAllV: SNAC's kernel with PURLIN_DIRECT_A2AV=0) */
      if ((coll == C_A2A || coll == C_A2AV) && buf_inplace(dbufs[b])) continue;
      size_t n = 1500000 / (coll == C_AR ? 1 : g_world) + 17;
      add(coll, PURLIN_BF16, PURLIN_SUM, 0, n, dbufs[b], b & 1);
      add(coll, PURLIN_F32, PURLIN_SUM, 1, n / 2 + 3, dbufs[b], (b + 1) & 1);
      if (coll_reduces(coll)) add(coll, PURLIN_I32, PURLIN_MAX, 1, n / 3, dbufs[b], 0);
      if (coll_reduces(coll) && b == 0) {
        add(coll, PURLIN_FP8_E4M3, PURLIN_SUM, 1, n, dbufs[b], 0);
        add(coll, PURLIN_F64, PURLIN_AVG, 1, n / 4, dbufs[b], 0);
        add(coll, PURLIN_U8, PURLIN_MIN, 1, n, dbufs[b], 0);
      }
    }
  /* ReduceScatterV spread over the ranks (direct.cu, pl_direct_spread: every rank's input and
   * output peer-mapped; no count zero, so that every rank's output is written by its peers): out
   * of place, in place, unaligned, with the ranks' sdispls different (vdispl 1) and not */
  g_nozero = 1;
  static const int sbufs[] = {B_OUT_MM, B_IN_M, B_OUT_MM_U, B_OUT_RR, B_IN_R, B_OUT_RR_U};
  for (int b = 0; b < (int)(sizeof sbufs / sizeof sbufs[0]); b++) {
    size_t n = 1500000 / g_world + 17;
    add(C_RSV, PURLIN_BF16, PURLIN_SUM, 0, n, sbufs[b], 1);
    add(C_RSV, PURLIN_F32, PURLIN_SUM, 1, n / 2 + 3, sbufs[b], b & 1);
    add(C_RSV, PURLIN_I32, PURLIN_MAX, 1, n / 3, sbufs[b], 1);
    add(C_RSV, PURLIN_F64, PURLIN_AVG, 1, n / 4, sbufs[b], 0);
  }
  g_nozero = 0;
  /* back-to-back without checking in between is covered by the graph test; here: large */
  if (big) {
    size_t n64 = ((size_t)64 << 20) / 4; /* 64 MiB of f32 per buffer */
    add(C_AR, PURLIN_F32, PURLIN_SUM, 1, n64, B_OUT_DD, 0);
    add(C_AR, PURLIN_BF16, PURLIN_SUM, 0, n64 * 2, B_IN_M, 0);
    add(C_AR, PURLIN_F32, PURLIN_SUM, 1, n64, B_OUT_MM, 0);
    add(C_AG, PURLIN_BF16, PURLIN_SUM, 0, n64 * 2 / g_world, B_OUT_MM, 0);
    add(C_RS, PURLIN_F32, PURLIN_SUM, 1, n64 / g_world, B_IN_M, 0);
    add(C_A2A, PURLIN_BF16, PURLIN_SUM, 0, n64 * 2 / g_world, B_OUT_MM, 0);
    add(C_AG, PURLIN_F32, PURLIN_SUM, 0, n64 / g_world, B_OUT_DD, 0);
    add(C_RS, PURLIN_BF16, PURLIN_SUM, 1, n64 * 2 / g_world, B_OUT_DD, 0);
    add(C_A2A, PURLIN_F32, PURLIN_SUM, 0, n64 / g_world, B_IN_D, 0);
  }
  if (g_rank == 0)
    printf("gpu_test: matrix: %" PRIu64 " cases in %.1f s\n", g_case_no, now_s() - t0);
}

/* 256 MiB per call (issue 3's largest size): every non-V collective once and AllReduce in both
 * modes, staged and zero copy, every element against the reference as everywhere else. */
static void huge(void) {
  size_t n = ((size_t)256 << 20) / 4; /* f32 elements in 256 MiB */
  add(C_AR, PURLIN_F32, PURLIN_SUM, 1, n, B_OUT_DD, 0);
  add(C_AR, PURLIN_BF16, PURLIN_SUM, 0, n * 2, B_IN_M, 0);
  add(C_AG, PURLIN_BF16, PURLIN_SUM, 0, n * 2 / g_world, B_OUT_DD, 0);
  add(C_RS, PURLIN_F32, PURLIN_SUM, 1, n / g_world, B_OUT_MM, 0);
  add(C_A2A, PURLIN_F32, PURLIN_SUM, 0, n / g_world, B_OUT_DD, 0);
  add(C_A2AV, PURLIN_BF16, PURLIN_SUM, 0, n / (2 * (size_t)g_world), B_OUT_DD, 1);
  if (g_rank == 0) printf("gpu_test: huge: %" PRIu64 " cases of 256 MiB\n", g_case_no);
}

/* A few cases of every collective, both regimes, staged and zero copy: for compute-sanitizer. */
static void tiny(void) {
  for (int coll = 0; coll < C_COUNT; coll++) {
    size_t big = 30000 / (coll == C_AR ? 1 : g_world);
    add(coll, PURLIN_F32, PURLIN_SUM, 1, 33, B_OUT_DD, 1);
    add(coll, PURLIN_BF16, PURLIN_SUM, 1, 5 * big, B_OUT_DD, 0);
    add(coll, PURLIN_F32, PURLIN_MAX, 0, big, B_IN_M, 1);
    add(coll, PURLIN_BF16, PURLIN_SUM, 1, big, B_OUT_XR, 0);
  }
}

/* ---- CUDA graph: 128 calls captured once, replayed 100 times --------------------------------- */

/* sym: inputs and outputs in the purlin_mem_alloc pools (1) or the registered cudaMalloc pools (2)
 * (zero copy: the direct kernel for the calls above the packet sizes), 32 calls. */
static void graph_test(int sym) {
  enum { MAXCALL = 128, NCFG = 8, REPLAYS = 100 };
  const int NCALL = sym ? 32 : MAXCALL;
  case_t cfg[NCFG] = {
      {C_AR, PURLIN_F32, PURLIN_SUM, 1, B_OUT_DD, 0, 1000, 0},
      {C_AR, PURLIN_BF16, PURLIN_SUM, 1, B_OUT_DD, 0, 70000, 0},
      {C_AR, PURLIN_F32, PURLIN_MAX, 1, B_OUT_DD, 0, 300000, 0},
      {C_AG, PURLIN_BF16, PURLIN_SUM, 1, B_OUT_DD, 0, 20000, 0},
      {C_RS, PURLIN_F32, PURLIN_SUM, 1, B_OUT_DD, 0, 50000, 0},
      {C_A2A, PURLIN_I32, PURLIN_SUM, 1, B_OUT_DD, 0, 3000, 0},
      {C_AGV, PURLIN_F16, PURLIN_SUM, 1, B_OUT_DD, 1, 2000, 0},
      {C_RSV, PURLIN_F32, PURLIN_SUM, 1, B_OUT_DD, 0, 9000, 0},
  };
  lay_t *L = malloc(sizeof(lay_t) * NCFG);
  size_t out_off[MAXCALL], out_bytes[NCFG], in_off[NCFG], total = 0, in_total = 0;
  char *inputs, *outputs, *exp_all;
  for (int k = 0; k < NCFG; k++) {
    cfg[k].key = mix(g_seed * 7919 + (uint64_t)k);
    layout(&cfg[k], &L[k]);
    size_t es = pl_dtype_bytes(cfg[k].dtype);
    out_bytes[k] = (L[k].recv_elems * es + 255) / 256 * 256;
    in_off[k] = in_total;
    in_total += (L[k].send_elems[g_rank] * es + 255) / 256 * 256;
  }
  for (int i = 0; i < NCALL; i++) {
    out_off[i] = total;
    total += out_bytes[i % NCFG];
  }
  if (sym && (in_total + 256 > g_pool_bytes || total + 256 > g_pool_bytes)) {
    fail_line("graph (%s buffers): %zu + %zu bytes do not fit the pools",
              sym == 2 ? "registered" : "purlin_mem_alloc", in_total, total);
    free(L);
    return;
  }
  if (sym) {
    inputs = sym == 2 ? g_reg[0] : g_sym[0];
    outputs = sym == 2 ? g_reg[1] : g_sym[1];
  } else {
    CK(cudaMalloc((void **)&inputs, in_total + 256));
    CK(cudaMalloc((void **)&outputs, total + 256));
  }
  char *host = malloc(total), *exp = malloc(total);
  exp_all = exp;
  for (int k = 0; k < NCFG; k++) {
    size_t es = pl_dtype_bytes(cfg[k].dtype);
    gen_fill(&cfg[k], g_rank, 0, L[k].send_elems[g_rank], g_host_in);
    CK(cudaMemcpy(inputs + in_off[k], g_host_in, L[k].send_elems[g_rank] * es,
                  cudaMemcpyHostToDevice));
  }
  for (int i = 0; i < NCALL; i++) {
    int k = i % NCFG;
    expected(&cfg[k], &L[k], exp_all + out_off[i], NULL);
    memset(exp_all + out_off[i] + L[k].recv_elems * pl_dtype_bytes(cfg[k].dtype), SENTINEL,
           out_bytes[k] - L[k].recv_elems * pl_dtype_bytes(cfg[k].dtype));
  }
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  purlin_opts_t o = PURLIN_OPTS_INIT;
  o.mode = PURLIN_DETERMINISTIC;
  CK(cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeThreadLocal));
  CK(cudaMemsetAsync(outputs, SENTINEL, total, g_stream));
  for (int i = 0; i < NCALL; i++) {
    int k = i % NCFG;
    purlin_status_t st = launch(&cfg[k], &L[k], inputs + in_off[k], outputs + out_off[i], &o,
                                g_stream);
    if (st) {
      fail_line("graph: capturing call %d: %s: %s", i, purlin_status_name(st),
                purlin_comm_last_error(g_comm));
      exit(1);
    }
  }
  CK(cudaStreamEndCapture(g_stream, &graph));
  CK(cudaGraphInstantiate(&exec, graph, 0));
  double t0 = now_s();
  int bad_replays = 0;
  for (int rep = 0; rep < REPLAYS; rep++) {
    CK(cudaGraphLaunch(exec, g_stream));
    CK(cudaStreamSynchronize(g_stream));
    purlin_status_t ast = PURLIN_OK;
    purlin_comm_get_async_error(g_comm, &ast);
    if (ast) {
      fail_line("graph: replay %d: %s: %s", rep, purlin_status_name(ast),
                purlin_comm_last_error(g_comm));
      exit(1);
    }
    CK(cudaMemcpy(host, outputs, total, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int i = 0; i < NCALL; i++) {
      int k = i % NCFG;
      if (memcmp(host + out_off[i], exp_all + out_off[i], out_bytes[k])) {
        if (!bad) {
          char d[160];
          describe(&cfg[k], d, sizeof d);
          fail_line("graph: replay %d, call %d (%s): output differs", rep, i, d);
          compare(&cfg[k], &L[k], host + out_off[i], exp_all + out_off[i], 0, L[k].recv_elems);
        }
        bad++;
      }
    }
    if (bad) bad_replays++;
    else g_pass++;
  }
  if (g_rank == 0)
    printf("gpu_test: graph%s: %d calls x %d replays in %.2f s, %d bad replays\n",
           sym == 2 ? " (registered buffers)" : sym ? " (purlin_mem_alloc buffers)" : "", NCALL, REPLAYS, now_s() - t0, bad_replays);
  /* eager calls still agree on the epoch after the replays */
  add(C_AR, PURLIN_F32, PURLIN_SUM, 1, 12345, B_OUT_DD, 0);
  add(C_AG, PURLIN_BF16, PURLIN_SUM, 1, 100000, B_OUT_MM, 0);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  if (!sym) {
    cudaFree(inputs);
    cudaFree(outputs);
  }
  free(host);
  free(exp);
  free(L);
}

/* ---- purlin_mem_register's refusals -------------------------------------------------------- */

/* One collective step of reg_errors: the status this rank expects and the text its error must
 * hold; the communicator stays usable. */
static void reg_expect(const char *what, purlin_status_t got, purlin_status_t want,
                       const char *text) {
  const char *e = purlin_comm_last_error(g_comm);
  if (got != want || (text && !strstr(e, text)))
    fail_line("register: %s: got %s (%s), want %s with \"%s\"", what, purlin_status_name(got),
              got ? e : "", purlin_status_name(want), text ? text : "");
  else
    g_pass++;
}

/* Bad arguments on one rank fail every rank (naming it) and register nothing; a range registered
 * and deregistered again; purlin_mem_free refuses a registered pointer. The room after g_reg[0]
 * in its allocation (at least 7168 bytes) is the spare range. */
static void reg_errors(void) {
  char *spare = g_reg[0] + g_pool_bytes, host[64];
  purlin_status_t st;
  /* rank 0 passes host memory */
  st = purlin_mem_register(g_comm, g_rank ? spare : host, 1024);
  reg_expect("host memory on rank 0", st, PURLIN_ERR_INVALID_ARGUMENT,
             g_rank ? "rank 0 failed" : "not device memory");
  /* the last rank a different size */
  st = purlin_mem_register(g_comm, spare, g_rank == g_world - 1 ? 512 : 1024);
  reg_expect("bytes differ", st, g_world > 1 ? PURLIN_ERR_MISMATCH : PURLIN_OK,
             g_world > 1 ? "disagree on bytes" : NULL);
  if (g_world == 1) PK(purlin_mem_deregister(g_comm, spare));
  /* past the end of the allocation, inside a registered range, inside purlin_mem_alloc memory */
  st = purlin_mem_register(g_comm, spare, 8192);
  reg_expect("past the end", st, PURLIN_ERR_INVALID_ARGUMENT, "past the end of its allocation");
  st = purlin_mem_register(g_comm, g_reg[0] + 4096, 1024);
  reg_expect("overlap", st, PURLIN_ERR_INVALID_ARGUMENT, "overlaps a registered range");
  st = purlin_mem_register(g_comm, g_sym[0], 1024);
  reg_expect("purlin_mem_alloc memory", st, PURLIN_ERR_INVALID_ARGUMENT, "purlin_mem_alloc");
  st = purlin_mem_register(g_comm, NULL, 1024);
  reg_expect("NULL", st, PURLIN_ERR_INVALID_ARGUMENT, "ptr is NULL");
  /* a good one; then rank 0 deregisters a pointer that is not one */
  PK(purlin_mem_register(g_comm, spare, 1024));
  st = purlin_mem_deregister(g_comm, g_rank ? spare : spare + 16);
  reg_expect("deregister a wrong pointer on rank 0", st, PURLIN_ERR_INVALID_ARGUMENT,
             g_rank ? "rank 0 passed a pointer" : "not a pointer that purlin_mem_register");
  st = purlin_mem_free(g_comm, spare);
  reg_expect("purlin_mem_free of a registered pointer", st, PURLIN_ERR_INVALID_ARGUMENT,
             "purlin_mem_deregister");
  PK(purlin_mem_deregister(g_comm, spare));
  /* registered again after its deregistration: the entry and the peers' mappings were released */
  PK(purlin_mem_register(g_comm, spare, 1024));
  PK(purlin_mem_deregister(g_comm, spare));
  if (g_rank == 0) printf("gpu_test: register: refusals checked\n");
}

/* ---- V counts in device memory (--device-counts) -------------------------------------------- */

/* Eager: every V collective with counts in device memory, NULL and given displacements, latency
 * and throughput sizes, staged and zero copy, in place and not. */
static void devcounts_eager(void) {
  static const size_t sizes[] = {1, 33, 1000, 4099, 300007, 1500000};
  static const int bufs[] = {B_OUT_DD, B_OUT_MM, B_IN_D, B_IN_M, B_OUT_DD_U, B_OUT_DM, B_OUT_RR,
                             B_IN_R};
  static const int dtypes[] = {PURLIN_F32, PURLIN_BF16, PURLIN_I32};
  double t0 = now_s();
  uint64_t n0 = g_case_no;
  g_devcounts = 1;
  for (int coll = C_AGV; coll <= C_A2AV; coll++)
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
      for (size_t b = 0; b < sizeof bufs / sizeof bufs[0]; b++) {
        size_t n = sizes[si] >= 300007 ? sizes[si] / g_world : sizes[si];
        int k = (int)(si + b);
        add(coll, dtypes[k % 3], k % 2 ? PURLIN_MAX : PURLIN_SUM, k % 2, n, bufs[b], k % 2);
      }
  g_devcounts = 0;
  if (g_rank == 0)
    printf("gpu_test: device counts: %" PRIu64 " eager cases in %.1f s\n", g_case_no - n0,
           now_s() - t0);
}

/* CUDA graph: the three V collectives (NULL and given displacements) captured once with their
 * counts in device buffers; before each replay new counts are written into the same buffers
 * (and new inputs), and every element of every output is checked. */
static void devcounts_graph(void) {
  enum { NV = 6, REPLAYS = 12 };
  static const size_t sizes[] = {1000, 20000, 3, 0, 300007, 77, 4099, 150000};
  const size_t nsz = sizeof sizes / sizeof sizes[0];
  lay_t *L = malloc(sizeof(lay_t));
  size_t room_in[NV] = {0}, room_out[NV] = {0}, agv_room[NV] = {0};
  /* the buffers must hold every replay's extents: size them from all replays' layouts */
  for (int rep = 0; rep < REPLAYS; rep++)
    for (int i = 0; i < NV; i++) {
      case_t k = {C_AGV + i / 2, PURLIN_F32, PURLIN_SUM, 1, B_OUT_DD, i % 2, 0, 0};
      k.count = sizes[(size_t)(rep + i) % nsz] / (sizes[(size_t)(rep + i) % nsz] > 5000 ? g_world : 1);
      k.key = mix(g_seed * 104729 + (uint64_t)rep * 16 + (uint64_t)i);
      layout(&k, L);
      size_t in = L->send_elems[g_rank] * 4, out = L->recv_elems * 4;
      if (in > room_in[i]) room_in[i] = in;
      if (out > room_out[i]) room_out[i] = out;
      if (k.coll == C_AGV && L->rc[g_rank] > agv_room[i]) agv_room[i] = L->rc[g_rank];
    }
  char *in[NV], *out[NV];
  size_t *dcnt;
  CK(cudaMalloc((void **)&dcnt, sizeof(size_t) * 4 * DCW * NV));
  for (int i = 0; i < NV; i++) {
    CK(cudaMalloc((void **)&in[i], room_in[i] + 256));
    CK(cudaMalloc((void **)&out[i], room_out[i] + 256));
  }
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  purlin_opts_t o = PURLIN_OPTS_INIT;
  o.mode = PURLIN_DETERMINISTIC;
  /* global mode, as torch.cuda.graph captures: the launch may make no unsafe CUDA call */
  CK(cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < NV; i++) {
    case_t k = {C_AGV + i / 2, PURLIN_F32, PURLIN_SUM, 1, B_OUT_DD, i % 2, 0, 0};
    purlin_status_t st = launch_dev(&k, in[i], out[i], agv_room[i], &o, g_stream,
                                    dcnt + (size_t)i * 4 * DCW);
    if (st) {
      fail_line("device counts graph: capturing call %d: %s: %s", i, purlin_status_name(st),
                purlin_comm_last_error(g_comm));
      exit(1);
    }
  }
  CK(cudaStreamEndCapture(g_stream, &graph));
  CK(cudaGraphInstantiate(&exec, graph, 0));
  int bad_replays = 0;
  for (int rep = 0; rep < REPLAYS; rep++) {
    case_t k[NV];
    for (int i = 0; i < NV; i++) {
      case_t t = {C_AGV + i / 2, PURLIN_F32, PURLIN_SUM, 1, B_OUT_DD, i % 2, 0, 0};
      t.count = sizes[(size_t)(rep + i) % nsz] / (sizes[(size_t)(rep + i) % nsz] > 5000 ? g_world : 1);
      t.key = mix(g_seed * 104729 + (uint64_t)rep * 16 + (uint64_t)i);
      k[i] = t;
      layout(&k[i], L);
      size_t h[4][DCW];
      dev_counts_fill(&k[i], L, h);
      CK(cudaMemcpy(dcnt + (size_t)i * 4 * DCW, h, sizeof h, cudaMemcpyHostToDevice));
      gen_fill(&k[i], g_rank, 0, L->send_elems[g_rank], g_host_in);
      CK(cudaMemcpy(in[i], g_host_in, L->send_elems[g_rank] * 4, cudaMemcpyHostToDevice));
      CK(cudaMemset(out[i], SENTINEL, room_out[i] + 256));
    }
    CK(cudaDeviceSynchronize());
    CK(cudaGraphLaunch(exec, g_stream));
    CK(cudaStreamSynchronize(g_stream));
    purlin_status_t ast = PURLIN_OK;
    purlin_comm_get_async_error(g_comm, &ast);
    if (ast) {
      fail_line("device counts graph: replay %d: %s: %s", rep, purlin_status_name(ast),
                purlin_comm_last_error(g_comm));
      exit(1);
    }
    int bad = 0;
    for (int i = 0; i < NV; i++) {
      layout(&k[i], L);
      CK(cudaMemcpy(g_host_got, out[i], room_out[i] + 256, cudaMemcpyDeviceToHost));
      expected(&k[i], L, g_host_exp, NULL);
      /* past this replay's extent the sentinel stays */
      memset(g_host_exp + L->recv_elems * 4, SENTINEL, room_out[i] + 256 - L->recv_elems * 4);
      if (memcmp(g_host_got, g_host_exp, room_out[i] + 256)) {
        char d[160];
        describe(&k[i], d, sizeof d);
        fail_line("device counts graph: replay %d, call %d (%s): output differs", rep, i, d);
        compare(&k[i], L, g_host_got, g_host_exp, 0, (room_out[i] + 256) / 4);
        bad++;
      }
    }
    if (bad) bad_replays++;
    else g_pass++;
  }
  if (g_rank == 0)
    printf("gpu_test: device counts: graph of %d V calls, %d replays with new counts, %d bad\n",
           NV, REPLAYS, bad_replays);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  for (int i = 0; i < NV; i++) cudaFree(in[i]), cudaFree(out[i]);
  cudaFree(dcnt);
  free(L);
}

/* Ranks disagree on device counts: the last rank adds one to its recvcounts[0]; every rank gets
 * MISMATCH (found in the SNAC header on the device), and the communicator stays usable. */
static void devcounts_mismatch(void) {
  if (g_world < 2) return;
  for (int coll = C_AGV; coll <= C_A2AV; coll++) {
    size_t n = coll == C_A2AV ? 20000 : 300; /* throughput and latency */
    case_t c = {coll, PURLIN_F32, PURLIN_SUM, 1, B_OUT_DD, coll == C_RSV, n, 0};
    c.key = mix(g_seed * 7 + (uint64_t)coll);
    lay_t *L = malloc(sizeof(lay_t));
    layout(&c, L);
    size_t h[4][DCW];
    g_perturb = 1;
    dev_counts_fill(&c, L, h);
    g_perturb = 0;
    CK(cudaMemcpyAsync(g_cnt_dev, h, sizeof h, cudaMemcpyHostToDevice, g_stream));
    purlin_opts_t o = PURLIN_OPTS_INIT;
    purlin_status_t st = launch_dev(&c, g_dev[0], g_dev[1], L->rc[g_rank] + 1, &o, g_stream,
                                    g_cnt_dev), ast = PURLIN_OK;
    CK(cudaStreamSynchronize(g_stream));
    purlin_comm_get_async_error(g_comm, &ast);
    if (st != PURLIN_OK || ast != PURLIN_ERR_MISMATCH) {
      fail_line("device counts mismatch (%s): launch %s, async %s (expected OK, MISMATCH): %s",
                k_coll[coll], purlin_status_name(st), purlin_status_name(ast),
                purlin_comm_last_error(g_comm));
    } else {
      g_pass++;
      if (g_rank == 0)
        printf("gpu_test: device counts mismatch reported: %s\n", purlin_comm_last_error(g_comm));
    }
    free(L);
    /* still usable */
    g_devcounts = 1;
    add(coll, PURLIN_F32, PURLIN_SUM, 1, 1000, B_OUT_DD, 0);
    g_devcounts = 0;
  }
}

/* ---- faults ---------------------------------------------------------------------------------- */

/* V counts that disagree (host counts, small blocks: the lean or tiny kernel on every rank): the
 * last rank perturbs recvcounts[0]. Every rank must report MISMATCH naming SNAC's field for it, and
 * the communicator stays usable. zero: rank 1's blocks are empty on every rank (the tiny kernel
 * then checks the headers after the data: a rank may receive from no one whose call differs). */
static int vmismatch1(int coll, int zero) {
  size_t c[72], rc[72], n = 100;
  for (int i = 0; i < g_world; i++) c[i] = rc[i] = n;
  for (int i = 0; zero && i < g_world; i++) /* (A2AV: rank 1 sends and receives nothing) */
    if (i == 1 || (coll == C_A2AV && g_rank == 1)) c[i] = rc[i] = 0;
  if (g_rank == g_world - 1) rc[0] = n + 1;
  purlin_status_t st, ast = PURLIN_OK;
  const char *want = coll == C_A2AV ? "sendcounts/recvcounts" : "recvcounts";
  if (coll == C_AGV) /* (my sendcount is my recvcount, as every rank agrees) */
    st = purlin_all_gather_v(g_dev[0], zero && g_rank == 1 ? 0 : n, g_dev[1], rc, NULL, PURLIN_F32,
                             g_comm, g_stream, NULL);
  else if (coll == C_RSV)
    st = purlin_reduce_scatter_v(g_dev[0], g_dev[1], rc, NULL, PURLIN_F32, PURLIN_SUM, g_comm,
                                 g_stream, NULL);
  else
    st = purlin_all_to_all_v(g_dev[0], c, NULL, g_dev[1], rc, NULL, PURLIN_F32, g_comm, g_stream,
                             NULL);
  CK(cudaStreamSynchronize(g_stream));
  purlin_comm_get_async_error(g_comm, &ast);
  const char *msg = purlin_comm_last_error(g_comm);
  if (st != PURLIN_OK || ast != PURLIN_ERR_MISMATCH || !strstr(msg, want)) {
    fail_line("mismatch (%s counts): launch %s, async %s (expected OK, MISMATCH naming %s): %s",
              k_coll[coll], purlin_status_name(st), purlin_status_name(ast), want, msg);
    return 1;
  }
  if (g_rank == 0) printf("gpu_test: mismatch reported: %s\n", msg);
  add(coll, PURLIN_F32, PURLIN_SUM, 1, 500, B_OUT_DD, 1);
  return 0;
}
static int vmismatch(int coll) {
  return vmismatch1(coll, 0) || vmismatch1(coll, 1);
}

/* AllGatherV or ReduceScatterV whose counts agree but sit in device memory on the last rank only
 * (SNAC's kernel there, the tiny V kernel on the others): every rank must report MISMATCH naming
 * counts_on_device (PL_HDR_DCOUNTS), not time out, and the communicator stays usable. */
static int vmixed(int coll) {
  size_t rc[72], n = 100;
  for (int i = 0; i < g_world; i++) rc[i] = n;
  purlin_opts_t o = PURLIN_OPTS_INIT;
  const size_t *cnt = rc;
  if (g_rank == g_world - 1) {
    size_t h[4][DCW];
    memset(h, 0, sizeof h);
    for (int i = 0; i < g_world; i++) h[2][i] = n; /* recvcounts; displacements NULL */
    CK(cudaMemcpy(g_cnt_dev, h, sizeof h, cudaMemcpyHostToDevice));
    o.counts_on_device = 1;
    cnt = g_cnt_dev + 2 * DCW;
  }
  purlin_status_t st, ast = PURLIN_OK;
  if (coll == C_AGV)
    st = purlin_all_gather_v(g_dev[0], n, g_dev[1], cnt, NULL, PURLIN_F32, g_comm, g_stream, &o);
  else
    st = purlin_reduce_scatter_v(g_dev[0], g_dev[1], cnt, NULL, PURLIN_F32, PURLIN_SUM, g_comm,
                                 g_stream, &o);
  CK(cudaStreamSynchronize(g_stream));
  purlin_comm_get_async_error(g_comm, &ast);
  const char *msg = purlin_comm_last_error(g_comm);
  if (st != PURLIN_OK || ast != PURLIN_ERR_MISMATCH || !strstr(msg, "counts_on_device")) {
    fail_line("mismatch (%s, counts on the device on one rank): launch %s, async %s (expected OK, "
              "MISMATCH naming counts_on_device): %s",
              k_coll[coll], purlin_status_name(st), purlin_status_name(ast), msg);
    return 1;
  }
  if (g_rank == 0) printf("gpu_test: mismatch reported: %s\n", msg);
  add(coll, PURLIN_F32, PURLIN_SUM, 1, 500, B_OUT_DD, 1);
  return 0;
}

/* AllToAllV whose only large blocks are between ranks 0 and 1, with rank 1's counts in device
 * memory (SNAC's kernel there, which speaks neither the direct kernel's rounds nor its packets for
 * large blocks), rank 0 on the direct kernel and the others on the tiny kernel: every rank must
 * report MISMATCH naming the direct kernel, not time out (rank 0 stops at once and never sends
 * the others their packets: they find it from the headers' PL_HDR_DIRECT and PL_HDR_BIG), and the
 * communicator stays usable. World >= 3. */
static int a2avmixed(void) {
  size_t sc[72], sd[72], rc[72], rd[72], ps = 0, pr = 0;
  for (int i = 0; i < g_world; i++) {
    sc[i] = rc[i] = g_rank < 2 && i < 2 && i != g_rank ? 300000 : 100; /* 1.2 MB: not packets */
    sd[i] = ps;
    rd[i] = pr;
    ps += sc[i];
    pr += rc[i];
  }
  purlin_opts_t o = PURLIN_OPTS_INIT;
  const size_t *s0 = sc, *s1 = sd, *r0 = rc, *r1 = rd;
  if (g_rank == 1) {
    size_t h[4][DCW];
    memset(h, 0, sizeof h);
    for (int i = 0; i < g_world; i++) {
      h[0][i] = sc[i];
      h[1][i] = sd[i];
      h[2][i] = rc[i];
      h[3][i] = rd[i];
    }
    CK(cudaMemcpy(g_cnt_dev, h, sizeof h, cudaMemcpyHostToDevice));
    o.counts_on_device = 1;
    s0 = g_cnt_dev;
    s1 = g_cnt_dev + DCW;
    r0 = g_cnt_dev + 2 * DCW;
    r1 = g_cnt_dev + 3 * DCW;
  }
  purlin_status_t st = purlin_all_to_all_v(g_dev[0], s0, s1, g_dev[1], r0, r1, PURLIN_F32, g_comm,
                                           g_stream, &o), ast = PURLIN_OK;
  CK(cudaStreamSynchronize(g_stream));
  purlin_comm_get_async_error(g_comm, &ast);
  const char *msg = purlin_comm_last_error(g_comm);
  if (st != PURLIN_OK || ast != PURLIN_ERR_MISMATCH || !strstr(msg, "direct kernel")) {
    fail_line("mismatch (AllToAllV, large blocks, counts on the device on rank 1): launch %s, "
              "async %s (expected OK, MISMATCH naming the direct kernel): %s",
              purlin_status_name(st), purlin_status_name(ast), msg);
    return 1;
  }
  if (g_rank == 0) printf("gpu_test: mismatch reported: %s\n", msg);
  add(C_A2AV, PURLIN_F32, PURLIN_SUM, 1, 500, B_OUT_DD, 1);
  return 0;
}

static int fault_mismatch(void) {
  size_t n = 1000 + (g_rank == g_world - 1 ? 1 : 0);
  purlin_status_t st = purlin_all_reduce(g_dev[0], g_dev[1], n, PURLIN_F32, PURLIN_SUM, g_comm,
                                         g_stream, NULL), ast = PURLIN_OK;
  CK(cudaStreamSynchronize(g_stream));
  purlin_comm_get_async_error(g_comm, &ast);
  if (st != PURLIN_OK || ast != PURLIN_ERR_MISMATCH) {
    fail_line("mismatch: launch %s, async %s (expected OK, MISMATCH): %s", purlin_status_name(st),
              purlin_status_name(ast), purlin_comm_last_error(g_comm));
    return 1;
  }
  if (g_rank == 0) printf("gpu_test: mismatch reported: %s\n", purlin_comm_last_error(g_comm));
  /* reported once; the communicator stays usable */
  add(C_AR, PURLIN_F32, PURLIN_SUM, 1, 5000, B_OUT_DD, 0);
  add(C_RS, PURLIN_BF16, PURLIN_SUM, 1, 300000 / g_world, B_OUT_DD, 0);
  /* a dtype mismatch in a throughput-size call */
  st = purlin_all_reduce(g_dev[0], g_dev[1], 1 << 20, g_rank == 0 ? PURLIN_F32 : PURLIN_I32,
                         PURLIN_SUM, g_comm, g_stream, NULL);
  CK(cudaStreamSynchronize(g_stream));
  purlin_comm_get_async_error(g_comm, &ast);
  if (st != PURLIN_OK || ast != PURLIN_ERR_MISMATCH) {
    fail_line("mismatch (dtype): launch %s, async %s: %s", purlin_status_name(st),
              purlin_status_name(ast), purlin_comm_last_error(g_comm));
    return 1;
  }
  add(C_A2A, PURLIN_F32, PURLIN_SUM, 1, 70000, B_OUT_DD, 0);
  /* a gather collective (PURLIN_ATOM=ce: the copy-engine atom's header kernel finds it) */
  st = purlin_all_gather(g_dev[0], g_dev[1], 1000 + (g_rank == g_world - 1 ? 1 : 0), PURLIN_F32,
                         g_comm, g_stream, NULL);
  CK(cudaStreamSynchronize(g_stream));
  purlin_comm_get_async_error(g_comm, &ast);
  if (st != PURLIN_OK || ast != PURLIN_ERR_MISMATCH) {
    fail_line("mismatch (all_gather count): launch %s, async %s: %s", purlin_status_name(st),
              purlin_status_name(ast), purlin_comm_last_error(g_comm));
    return 1;
  }
  add(C_AG, PURLIN_BF16, PURLIN_SUM, 1, 300000 / g_world, B_OUT_DD, 0);
  add(C_AGV, PURLIN_F32, PURLIN_SUM, 1, 5000, B_OUT_MM, 1);
  /* a count mismatch in the direct kernel's sizes, rank 0 on purlin_mem_alloc buffers, the others
   * on cudaMalloc ones (unless PURLIN_DIRECT=0: SNAC's kernel) */
  {
    int m = g_rank == 0;
    size_t n1 = ((size_t)1 << 20) + (g_rank == g_world - 1 ? 64 : 0);
    st = purlin_all_reduce(m ? g_sym[0] : g_dev[0], m ? g_sym[1] : g_dev[1], n1, PURLIN_F32,
                           PURLIN_SUM, g_comm, g_stream, NULL);
    CK(cudaStreamSynchronize(g_stream));
    purlin_comm_get_async_error(g_comm, &ast);
    const char *msg = purlin_comm_last_error(g_comm);
    if (st != PURLIN_OK || ast != PURLIN_ERR_MISMATCH || !strstr(msg, "count")) {
      fail_line("mismatch (direct kernel, count): launch %s, async %s (expected OK, MISMATCH "
                "naming count): %s", purlin_status_name(st), purlin_status_name(ast), msg);
      return 1;
    }
    if (g_rank == 0) printf("gpu_test: mismatch reported: %s\n", msg);
    add(C_AR, PURLIN_BF16, PURLIN_SUM, 1, 1500000, B_OUT_X, 0);
  }
  for (int coll = C_AGV; coll <= C_A2AV; coll++)
    if (!(g_no_a2av && coll == C_A2AV) && vmismatch(coll)) return 1;
  if (vmixed(C_AGV) || vmixed(C_RSV)) return 1;
  if (!g_no_a2av && g_world >= 3 && a2avmixed()) return 1;
  g_pass++;
  return 0;
}

/* The call of fault_kill: a large AllReduce, or (gather) an AllGather of 16 MiB in all. */
static purlin_status_t kill_call(int gather, size_t n) {
  if (gather)
    return purlin_all_gather(g_dev[0], g_dev[1], ((size_t)16 << 20) / 4 / (size_t)g_world,
                             PURLIN_F32, g_comm, g_stream, NULL);
  return purlin_all_reduce(g_dev[0], g_dev[1], n, PURLIN_F32, PURLIN_SUM, g_comm, g_stream, NULL);
}

/* Rank world-1 launches a large AllReduce (or AllGather, or with small: a 4000-byte AllReduce, which
 * the lean packet kernel runs; it may complete before the rank exits, the next one cannot) and exits at once (its kernel dies with
 * it). The others must see REMOTE naming it within PURLIN_TIMEOUT_MS (plus slack), and later calls
 * must refuse. */
static int fault_kill(int timeout_ms, int gather, int small) {
  size_t n = small ? 1000 : ((size_t)32 << 20) / 4;
  add(C_AR, PURLIN_F32, PURLIN_SUM, 1, 1000, B_OUT_DD, 0); /* all alive */
  if (gather) add(C_AG, PURLIN_F32, PURLIN_SUM, 1, 1000, B_OUT_DD, 0);
  if (g_rank == g_world - 1) {
    kill_call(gather, n);
    usleep(2000);
    fprintf(stderr, "gpu_test: rank %d: exiting mid-call (fault injection)\n", g_rank);
    _exit(0);
  }
  double t0 = now_s();
  purlin_status_t st = PURLIN_OK, ast = PURLIN_OK;
  cudaError_t ce = cudaSuccess;
  for (int i = 0; i < 4 && !st && !ast && ce == cudaSuccess; i++) {
    st = kill_call(gather, n);
    /* under MPS the dead rank's memory may vanish under the running kernel: a CUDA error here,
     * which purlin must then explain (the dead rank named, the context declared unusable) */
    ce = cudaStreamSynchronize(g_stream);
    purlin_comm_get_async_error(g_comm, &ast);
  }
  if (ce != cudaSuccess)
    printf("gpu_test: rank %d: CUDA reported: %s\n", g_rank, cudaGetErrorString(ce));
  double dt = now_s() - t0;
  purlin_status_t got = ast ? ast : st;
  printf("gpu_test: rank %d: peer killed: %s after %.2f s: %s\n", g_rank, purlin_status_name(got),
         dt, purlin_comm_last_error(g_comm));
  /* REMOTE: the watchdog saw the death (or, under MPS, the fault it caused was explained);
   * TIMEOUT would mean that no pidfd was watched (as before 2026-12-05: the watchdog started
   * before the pidfds were opened) */
  if (got != PURLIN_ERR_REMOTE || dt > timeout_ms / 1000.0 + 5) {
    fail_line("kill: got %s after %.2f s (expected REMOTE within %d ms + 5 s)",
              purlin_status_name(got), dt, timeout_ms);
    return 1;
  }
  st = purlin_all_reduce(g_dev[0], g_dev[1], 10, PURLIN_F32, PURLIN_SUM, g_comm, g_stream, NULL);
  if (st == PURLIN_OK) {
    fail_line("kill: a call after the abort was accepted");
    return 1;
  }
  g_pass++;
  return 0;
}

/* Rank world-1 makes one call with the others, destroys its communicator and exits (a clean exit:
 * its part of every call is done). The others give its process 1.5 s to end, then: no error may be
 * recorded (the watchdog must tell this from a death by the rank's exit mark, not abort), and a
 * call must be refused at once, launching nothing, with REMOTE naming the rank that left. Fails
 * if the watchdog watches no pidfd (a call is launched) or takes the exit for a death (REMOTE
 * "died" recorded). */
static int fault_leave(void) {
  add(C_AR, PURLIN_F32, PURLIN_SUM, 1, 1000, B_OUT_DD, 0);
  if (g_rank == g_world - 1) {
    purlin_comm_destroy(g_comm);
    printf("gpu_test: rank %d: destroyed and leaving\n", g_rank);
    fflush(stdout);
    _exit(g_fail ? 1 : 0);
  }
  usleep(1500 * 1000);
  purlin_status_t ast = PURLIN_OK;
  purlin_comm_get_async_error(g_comm, &ast);
  if (ast != PURLIN_OK) {
    fail_line("leave: async error %s after a peer's clean exit (expected OK): %s",
              purlin_status_name(ast), purlin_comm_last_error(g_comm));
    return 1;
  }
  char want[64];
  snprintf(want, sizeof want, "rank %d (pid", g_world - 1);
  double t0 = now_s();
  purlin_status_t st = purlin_all_reduce(g_dev[0], g_dev[1], 1000, PURLIN_F32, PURLIN_SUM, g_comm,
                                         g_stream, NULL);
  CK(cudaStreamSynchronize(g_stream));
  double dt = now_s() - t0;
  const char *msg = purlin_comm_last_error(g_comm);
  printf("gpu_test: rank %d: after the peer left: %s in %.3f s: %s\n", g_rank,
         purlin_status_name(st), dt, msg);
  if (st != PURLIN_ERR_REMOTE || !strstr(msg, want) || !strstr(msg, "destroyed its communicator") ||
      dt > 0.5) {
    fail_line("leave: a call after rank %d left gave %s in %.3f s (expected REMOTE at once "
              "naming it as destroyed): %s", g_world - 1, purlin_status_name(st), dt, msg);
    return 1;
  }
  g_pass++;
  return 0;
}

/* ---- main ------------------------------------------------------------------------------------ */

int main(int argc, char **argv) {
  int quick = 0, big = 0, graph = 0, tiny_only = 0, devcounts = 0, huge_only = 0;
  const char *fault = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) quick = 1;
    else if (!strcmp(argv[i], "--big")) big = 1;
    else if (!strcmp(argv[i], "--graph")) graph = 1;
    else if (!strcmp(argv[i], "--tiny")) tiny_only = 1;
    else if (!strcmp(argv[i], "--huge")) huge_only = 1;
    else if (!strcmp(argv[i], "--device-counts")) devcounts = 1;
    else if (!strcmp(argv[i], "--no-a2av")) g_no_a2av = 1;
    else if (!strcmp(argv[i], "--seed") && i + 1 < argc) g_seed = strtoull(argv[++i], NULL, 0);
    else if (!strcmp(argv[i], "--fault") && i + 1 < argc) fault = argv[++i];
    else {
      fprintf(stderr, "usage: gpu_test [--quick|--tiny|--huge|--device-counts] [--big] [--graph] "
                      "[--seed S] [--no-a2av] [--fault mismatch|kill|kill-gather|kill-small|leave]\n");
      return 2;
    }
  }
  const char *lr = getenv("PURLIN_LOCAL_RANK");
  if (!lr) lr = getenv("PURLIN_RANK");
  int ndev = 0;
  CK(cudaGetDeviceCount(&ndev));
  int dev = (lr ? atoi(lr) : 0) % ndev;
  CK(cudaSetDevice(dev));
  purlin_config_t cfg = PURLIN_CONFIG_INIT;
  cfg.datapath = PURLIN_DATAPATH_CUDA;
  cfg.device = dev;
  cfg.name = "gpu_test";
  double t0 = now_s();
  purlin_status_t st = purlin_comm_init_env(&g_comm, &cfg);
  if (st) {
    fprintf(stderr, "gpu_test: init: %s: %s\n", purlin_status_name(st), purlin_comm_last_error(NULL));
    return 2;
  }
  purlin_comm_rank(g_comm, &g_rank);
  purlin_comm_size(g_comm, &g_world);
  purlin_datapath_t dp;
  purlin_comm_datapath(g_comm, &dp);
  if (dp != PURLIN_DATAPATH_CUDA) {
    fprintf(stderr, "gpu_test: the communicator is not on the CUDA datapath\n");
    return 2;
  }
  CK(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
  g_pool_bytes = huge_only ? ((size_t)256 << 20) + 4096
                 : big     ? ((size_t)64 << 20) + 4096
                           : ((size_t)24 << 20) + 4096;
  for (int k = 0; k < 2; k++) {
    CK(cudaMalloc((void **)&g_dev[k], g_pool_bytes));
    PK(purlin_mem_alloc(g_comm, g_pool_bytes, (void **)&g_sym[k]));
    /* the registered pool starts at a different offset of each rank's allocation, and the
     * allocation has room after it (reg_errors) */
    CK(cudaMalloc((void **)&g_rraw[k], g_pool_bytes + 8192));
    g_reg[k] = g_rraw[k] + 256 * (size_t)(1 + g_rank % 4);
  }
  /* a registration that fails (every rank alike) is one failure; the other cases still run */
  g_reg_ok = 1;
  for (int k = 0; k < 2 && g_reg_ok; k++) {
    purlin_status_t rs = purlin_mem_register(g_comm, g_reg[k], g_pool_bytes);
    if (rs) {
      fail_line("purlin_mem_register of the pool: %s: %s", purlin_status_name(rs),
                purlin_comm_last_error(g_comm));
      if (k) PK(purlin_mem_deregister(g_comm, g_reg[0]));
      g_reg_ok = 0;
    }
  }
  g_host_got = malloc(g_pool_bytes);
  g_host_exp = malloc(g_pool_bytes);
  g_host_in = malloc(g_pool_bytes);
  for (int r = 0; r < g_world; r++) g_gen[r] = malloc((size_t)CHUNK * 8);
  CK(cudaMalloc((void **)&g_cnt_dev, sizeof(size_t) * 4 * DCW));
  if (g_rank == 0)
    printf("gpu_test: %d ranks, %d devices, init %.2f s\n", g_world, ndev, now_s() - t0);
  int rc = 0;
  if (fault && !strcmp(fault, "mismatch")) {
    rc = fault_mismatch();
  } else if (fault && !strcmp(fault, "leave")) {
    rc = fault_leave();
    purlin_comm_destroy(g_comm); /* frees the purlin_mem_alloc buffers (a free is not collective) */
    printf("gpu_test: rank %d: %ld passed, %ld failed\n", g_rank, g_pass, g_fail);
    return rc || g_fail ? 1 : 0;
  } else if (fault && (!strcmp(fault, "kill") || !strcmp(fault, "kill-gather") ||
                       !strcmp(fault, "kill-small"))) {
    const char *t = getenv("PURLIN_TIMEOUT_MS");
    rc = fault_kill(t ? atoi(t) : 120000, !strcmp(fault, "kill-gather"),
                    !strcmp(fault, "kill-small"));
    printf("gpu_test: rank %d: %ld passed, %ld failed\n", g_rank, g_pass, g_fail);
    fflush(stdout);
    _exit(rc || g_fail ? 1 : 0); /* the communicator is aborted; skip the collective frees */
  } else if (devcounts) {
    devcounts_eager();
    devcounts_graph();
    devcounts_mismatch();
  } else if (tiny_only) {
    tiny();
  } else if (huge_only) {
    huge();
  } else {
    if (g_reg_ok) reg_errors();
    matrix(quick, big);
    if (graph) {
      graph_test(0);
      graph_test(1);
      if (g_reg_ok) graph_test(2);
    }
  }
  for (int k = 0; k < 2 && !(fault && !strncmp(fault, "kill", 4)); k++) { /* after a death: aborted */
    PK(purlin_mem_free(g_comm, g_sym[k]));
    if (g_reg_ok) PK(purlin_mem_deregister(g_comm, g_reg[k]));
    cudaFree(g_dev[k]);
    cudaFree(g_rraw[k]);
  }
  purlin_comm_destroy(g_comm);
  printf("gpu_test: rank %d: %ld passed, %ld failed (%.1f s)\n", g_rank, g_pass, g_fail,
         now_s() - t0);
  return rc || g_fail ? 1 : 0;
}
