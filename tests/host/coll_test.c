/* coll_test -- end-to-end correctness of the seven collectives on the host datapath.
 *
 * Run under purlinrun: `purlinrun -n N coll_test [options]`. Every rank builds the same list of
 * cases from the options, runs them in lockstep and checks its own output element by element
 * against the independent reference (ref.c). Inputs are a function of (seed, case, rank, index), so
 * no rank needs another's data to know what it must receive.
 *
 * A case is one collective call:  coll/dtype/op/mode/n=count/buf/u{0,1}/vpat[/sp]
 *   coll   ar ag rs a2a agv rsv a2av
 *   buf    out:ss out:sm out:ms out:mm (send kind, recv kind: s = malloc, m = purlin_mem_alloc),
 *          in:s in:m (in place); out:xx and in:x mix the kinds across ranks (alternating, random
 *          phase, send and recv independently): zero copy with some peers, staging with others
 *   u1     pointers offset by one element from a 256-byte-aligned base
 *   vpat   V variants: rand (random counts with zeros, gapped permuted displacements), skew (one
 *          rank heavy, the rest 0 or 1, NULL displacements), randnull, skewgap, even (every
 *          count equal to n, NULL displacements)
 *   sp     special values: NaN, inf, largest finite, subnormals (saturation and overflow)
 * Checks: status, every output element (bitwise in deterministic mode; NaN matches any NaN; within
 * a tolerance in non-deterministic mode, with inexact elements counted), every byte outside the
 * output (guards before and after, gaps between V blocks, the rest of an in-place buffer), the send
 * buffer unchanged, and for purlin_mem_alloc receive buffers no late writes after the call.
 *
 * Matrices: --matrix pairwise (every pair of values of every two dimensions, per group of
 * collectives to which the dimensions apply), cross (the full product of the lists given), or
 * --case DESC for one case. Extras: --extra b2b (back-to-back mixed calls on one communicator),
 * twocomm (two communicators used alternately), prefix (deterministic results independent of the
 * message size and of the collective), hash (print a hash of deterministic outputs, to compare
 * runs). Output: one line per failure, then "coll_test: N passed, M failed" per rank; exit 1 on any
 * failure. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "purlin.h"
#include "ref.h"

enum { C_AR, C_AG, C_RS, C_A2A, C_AGV, C_RSV, C_A2AV, C_COUNT };
static const char *const k_coll[C_COUNT] = {"ar", "ag", "rs", "a2a", "agv", "rsv", "a2av"};
enum { B_OUT_SS, B_OUT_SM, B_OUT_MS, B_OUT_MM, B_OUT_XX, B_IN_S, B_IN_M, B_IN_X, B_COUNT };
static const char *const k_buf[B_COUNT] = {"out:ss", "out:sm", "out:ms", "out:mm",
                                           "out:xx", "in:s",   "in:m",   "in:x"};
enum { V_RAND, V_SKEW, V_RANDNULL, V_SKEWGAP, V_EVEN, V_COUNT };
static const char *const k_vpat[V_COUNT] = {"rand", "skew", "randnull", "skewgap", "even"};
static const char *const k_mode[2] = {"nd", "det"};

static int coll_reduces(int c) {
  return c == C_AR || c == C_RS || c == C_RSV;
}
static int coll_is_v(int c) {
  return c >= C_AGV;
}
static int buf_inplace(int b) {
  return b >= B_IN_S;
}
static int buf_send_mem(int b) {
  return b == B_OUT_MS || b == B_OUT_MM || b == B_IN_M;
}
static int buf_recv_mem(int b) {
  return b == B_OUT_SM || b == B_OUT_MM || b == B_IN_M;
}
static int buf_mixed(int b) {
  return b == B_OUT_XX || b == B_IN_X;
}
static int vpat_skewed(int v) {
  return v == V_SKEW || v == V_SKEWGAP;
}
static int vpat_gapped(int v) {
  return v == V_RAND || v == V_SKEWGAP;
}

typedef struct {
  int coll, dtype, op, mode, buf, align, vpat, special;
  size_t count;
  uint64_t iter;
  uint64_t genkey; /* 0: derived from the case; else the input generator's key (prefix tests) */
} case_t;

#define GUARD 256

/* ---- run state ------------------------------------------------------------------------------ */

static purlin_comm_t g_comm;
static int g_rank, g_n;
static uint64_t g_seed = 1;
static long g_pass, g_fail, g_inexact, g_lines, g_max_lines = 40;
static int g_verbose, g_sync_mem = 1;
static int g_corrupt; /* self-check of the checker: damage the output, expect failures */
static uint64_t g_hash = 1469598103934665603ull;
static long g_hashed;
static int g_want_hash;

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static void failf(const char *fmt, ...) {
  if (g_lines++ >= g_max_lines)
    return;
  va_list ap;
  va_start(ap, fmt);
  printf("FAIL rank %d: ", g_rank);
  vprintf(fmt, ap);
  printf("\n");
  fflush(stdout);
  va_end(ap);
}

static void describe(const case_t *c, char *s, size_t len) {
  int n = snprintf(s, len, "%s/%s/%s/%s/n=%zu/%s/u%d", k_coll[c->coll], ref_dtype_name(c->dtype),
                   ref_op_name(c->op), k_mode[c->mode], c->count, k_buf[c->buf], c->align);
  if (coll_is_v(c->coll) && n > 0 && (size_t)n < len)
    n += snprintf(s + n, len - (size_t)n, "/%s", k_vpat[c->vpat]);
  if (c->special && n > 0 && (size_t)n < len)
    n += snprintf(s + n, len - (size_t)n, "/sp");
  if (c->iter && n > 0 && (size_t)n < len)
    snprintf(s + n, len - (size_t)n, "/i%" PRIu64, c->iter);
}

static int index_of(const char *const *names, int n, const char *s) {
  for (int i = 0; i < n; i++)
    if (strcmp(names[i], s) == 0)
      return i;
  return -1;
}

/* Parse "coll/dtype/op/mode/n=N/buf/uA[/vpat][/sp][/iK]". */
static int parse_case(const char *desc, case_t *c) {
  char tmp[256], *save = NULL;
  snprintf(tmp, sizeof tmp, "%s", desc);
  memset(c, 0, sizeof *c);
  int field = 0;
  for (char *t = strtok_r(tmp, "/", &save); t; t = strtok_r(NULL, "/", &save), field++) {
    switch (field) {
    case 0:
      c->coll = index_of(k_coll, C_COUNT, t);
      if (c->coll < 0)
        return -1;
      break;
    case 1:
      c->dtype = ref_dtype_from_name(t);
      if (c->dtype < 0)
        return -1;
      break;
    case 2:
      c->op = ref_op_from_name(t);
      if (c->op < 0)
        return -1;
      break;
    case 3:
      c->mode = index_of(k_mode, 2, t);
      if (c->mode < 0)
        return -1;
      break;
    case 4:
      if (strncmp(t, "n=", 2) != 0)
        return -1;
      c->count = strtoull(t + 2, NULL, 10);
      break;
    case 5:
      c->buf = index_of(k_buf, B_COUNT, t);
      if (c->buf < 0)
        return -1;
      break;
    case 6:
      if (t[0] != 'u')
        return -1;
      c->align = atoi(t + 1) != 0;
      break;
    default:
      if (strcmp(t, "sp") == 0)
        c->special = 1;
      else if (t[0] == 'i')
        c->iter = strtoull(t + 1, NULL, 10);
      else if ((c->vpat = index_of(k_vpat, V_COUNT, t)) < 0)
        return -1;
      break;
    }
  }
  return field >= 7 ? 0 : -1;
}

static uint64_t case_key(const case_t *c) {
  uint64_t k = ref_key(g_seed, 0xc011);
  int f[8] = {c->coll, c->dtype, c->op, c->mode, c->buf, c->align, c->vpat, c->special};
  for (int i = 0; i < 8; i++)
    k = ref_key(k, (uint64_t)f[i]);
  k = ref_key(k, c->count);
  return ref_key(k, c->iter);
}

/* ---- V counts and displacements --------------------------------------------------------- */

/* AGV/RSV: C[p], the count of rank p's block. A2AV: C[r*n + p], what rank r sends to rank p
 * (symmetric in place). All ranks compute the same. */
static void v_counts(const case_t *c, uint64_t key, size_t *C) {
  int n = g_n, mat = c->coll == C_A2AV;
  size_t s = c->count;
  uint64_t hot = ref_mix(ref_key(key, 999)) % (uint64_t)n;
  for (int r = 0; r < (mat ? n : 1); r++) {
    for (int p = 0; p < n; p++) {
      int a = r, b = p;
      if (mat && buf_inplace(c->buf) && a > b) {
        a = p;
        b = r;
      }
      uint64_t h = ref_mix(ref_key(key, 1000u + (uint64_t)a * 131u + (uint64_t)b));
      size_t v;
      if (s == 0 || c->vpat == V_EVEN) {
        v = s;
      } else if (vpat_skewed(c->vpat)) {
        int heavy = mat ? ((uint64_t)a == hot || (uint64_t)b == hot) : (uint64_t)b == hot;
        v = heavy ? (mat ? 2 * s + h % 3 : s * (size_t)n) : (h % 3 == 0 ? 1 : 0);
      } else {
        v = h % 4 == 0 ? 0 : (size_t)(h % (2 * s + 1));
      }
      C[(size_t)r * (size_t)n + (size_t)p] = v;
    }
  }
}

/* Displacements of rank r for blocks of sizes cnts[p]: exclusive prefix sums, or (gapped) blocks
 * in a random order with random gaps of 0-3 elements. */
static void v_displs(const case_t *c, uint64_t key, int r, int which, const size_t *cnts,
                     size_t *d) {
  int n = g_n;
  if (!vpat_gapped(c->vpat)) {
    size_t off = 0;
    for (int p = 0; p < n; p++) {
      d[p] = off;
      off += cnts[p];
    }
    return;
  }
  int order[256];
  for (int p = 0; p < n; p++)
    order[p] = p;
  uint64_t h = ref_key(ref_key(key, 2000u + (uint64_t)r), (uint64_t)which);
  for (int p = n - 1; p > 0; p--) {
    h = ref_mix(h);
    int q = (int)(h % (uint64_t)(p + 1)), t = order[p];
    order[p] = order[q];
    order[q] = t;
  }
  size_t off = 0;
  for (int k = 0; k < n; k++) {
    h = ref_mix(h);
    off += h % 4;
    d[order[k]] = off;
    off += cnts[order[k]];
  }
}

static size_t extent(const size_t *cnts, const size_t *d, int n) {
  size_t e = 0;
  for (int p = 0; p < n; p++)
    if (cnts[p] && d[p] + cnts[p] > e)
      e = d[p] + cnts[p];
  return e;
}

/* Everything about one rank's side of a case. */
typedef struct {
  size_t send_n, recv_n;     /* out of place: extents in elements */
  size_t buf_n;              /* in place: extent of the one buffer */
  size_t send_off, recv_off; /* in place: offsets of send and recv in it */
  size_t *C;                 /* counts (see v_counts) */
  size_t *cnt, *rcnt;        /* AGV/RSV: recvcounts; A2AV: sendcounts (row), recvcounts (column) */
  size_t *sd, *rd;           /* this rank's displacements (as used) */
  int sd_null, rd_null;      /* pass NULL for them */
} layout_t;

static void layout_free(layout_t *L) {
  free(L->C);
  free(L->cnt);
  free(L->rcnt);
  free(L->sd);
  free(L->rd);
  memset(L, 0, sizeof *L);
}

static void layout_make(const case_t *c, uint64_t key, int r, layout_t *L) {
  int n = g_n;
  size_t s = c->count, un = (size_t)n;
  memset(L, 0, sizeof *L);
  L->C = calloc(un * un, sizeof(size_t));
  L->cnt = calloc(un, sizeof(size_t));
  L->rcnt = calloc(un, sizeof(size_t));
  L->sd = calloc(un, sizeof(size_t));
  L->rd = calloc(un, sizeof(size_t));
  if (!L->C || !L->cnt || !L->rcnt || !L->sd || !L->rd) {
    fprintf(stderr, "out of memory\n");
    exit(2);
  }
  int in = buf_inplace(c->buf);
  size_t ur = (size_t)r;
  switch (c->coll) {
  case C_AR:
    L->send_n = L->recv_n = L->buf_n = s;
    break;
  case C_AG:
    L->send_n = s;
    L->recv_n = L->buf_n = s * un;
    L->send_off = ur * s;
    break;
  case C_RS:
    L->send_n = L->buf_n = s * un;
    L->recv_n = s;
    L->recv_off = ur * s;
    break;
  case C_A2A:
    L->send_n = L->recv_n = L->buf_n = s * un;
    break;
  case C_AGV:
    v_counts(c, key, L->C);
    memcpy(L->cnt, L->C, un * sizeof(size_t));
    v_displs(c, key, r, 1, L->cnt, L->rd);
    L->rd_null = !vpat_gapped(c->vpat);
    L->send_n = L->cnt[r];
    L->recv_n = L->buf_n = extent(L->cnt, L->rd, n);
    L->send_off = L->rd[r];
    break;
  case C_RSV:
    v_counts(c, key, L->C);
    memcpy(L->cnt, L->C, un * sizeof(size_t));
    v_displs(c, key, r, 0, L->cnt, L->sd);
    L->sd_null = !vpat_gapped(c->vpat);
    L->send_n = L->buf_n = extent(L->cnt, L->sd, n);
    L->recv_n = L->cnt[r];
    L->recv_off = L->sd[r];
    break;
  case C_A2AV:
    v_counts(c, key, L->C);
    for (int p = 0; p < n; p++) {
      L->cnt[p] = L->C[ur * un + (size_t)p];
      L->rcnt[p] = L->C[(size_t)p * un + ur];
    }
    v_displs(c, key, r, 0, L->cnt, L->sd);
    if (in)
      memcpy(L->rd, L->sd, un * sizeof(size_t));
    else
      v_displs(c, key, r, 1, L->rcnt, L->rd);
    L->sd_null = L->rd_null = !vpat_gapped(c->vpat);
    L->send_n = extent(L->cnt, L->sd, n);
    L->recv_n = extent(L->rcnt, L->rd, n);
    L->buf_n = L->send_n > L->recv_n ? L->send_n : L->recv_n;
    break;
  }
}

/* ---- buffers ------------------------------------------------------------------------------ */

typedef struct {
  uint8_t *base;
  size_t bytes;
  int mem, borrowed;
} buf_t;

/* An arena of preallocated purlin_mem_alloc buffers, for back-to-back runs. */
typedef struct {
  purlin_comm_t comm;
  buf_t b[2];
} arena_t;

static int buf_get(purlin_comm_t comm, buf_t *b, int mem, size_t bytes, arena_t *arena, int slot) {
  memset(b, 0, sizeof *b);
  b->mem = mem;
  b->bytes = bytes;
  if (mem && arena) {
    if (arena->b[slot].bytes < bytes) {
      failf("arena too small (%zu < %zu)", arena->b[slot].bytes, bytes);
      return -1;
    }
    b->base = arena->b[slot].base;
    b->borrowed = 1;
    return 0;
  }
  if (mem) {
    void *p = NULL;
    purlin_status_t st = purlin_mem_alloc(comm, bytes, &p);
    if (st != PURLIN_OK) {
      failf("purlin_mem_alloc(%zu): %s: %s", bytes, purlin_status_name(st),
            purlin_comm_last_error(comm));
      return -1;
    }
    if (((uintptr_t)p & 255u) != 0)
      failf("purlin_mem_alloc returned %p, not 256-byte aligned", p);
    b->base = p;
    return 0;
  }
  b->base = aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (!b->base) {
    fprintf(stderr, "out of memory (%zu bytes)\n", bytes);
    exit(2);
  }
  return 0;
}

static void buf_put(purlin_comm_t comm, buf_t *b) {
  if (!b->base || b->borrowed)
    return;
  if (b->mem) {
    purlin_status_t st = purlin_mem_free(comm, b->base);
    if (st != PURLIN_OK)
      failf("purlin_mem_free: %s: %s", purlin_status_name(st), purlin_comm_last_error(comm));
  } else {
    free(b->base);
  }
  b->base = NULL;
}

/* ---- one case ------------------------------------------------------------------------------ */

typedef struct {
  uint8_t **keep; /* when set: a malloc'd copy of the recv payload (prefix tests) */
  size_t *keep_n;
  arena_t *arena; /* preallocated mem buffers */
  int no_sync;    /* skip the late-write check */
} run_opts_t;

static int g_fatal; /* the communicator is aborted: stop */

static purlin_status_t call_coll(const case_t *c, purlin_comm_t comm, const void *send, void *recv,
                                 const layout_t *L) {
  purlin_opts_t o = PURLIN_OPTS_INIT;
  o.mode = c->mode ? PURLIN_DETERMINISTIC : PURLIN_NONDETERMINISTIC;
  /* host datapath: counts "on the device" are host memory readable when the call runs */
  o.counts_on_device = getenv("COLL_TEST_COUNTS_ON_DEVICE") != NULL;
  purlin_dtype_t dt = (purlin_dtype_t)c->dtype;
  purlin_op_t op = (purlin_op_t)c->op;
  switch (c->coll) {
  case C_AR:
    return purlin_all_reduce(send, recv, c->count, dt, op, comm, NULL, &o);
  case C_AG:
    return purlin_all_gather(send, recv, c->count, dt, comm, NULL, &o);
  case C_RS:
    return purlin_reduce_scatter(send, recv, c->count, dt, op, comm, NULL, &o);
  case C_A2A:
    return purlin_all_to_all(send, recv, c->count, dt, comm, NULL, &o);
  case C_AGV:
    return purlin_all_gather_v(send, L->cnt[g_rank], recv, L->cnt, L->rd_null ? NULL : L->rd, dt,
                               comm, NULL, &o);
  case C_RSV:
    return purlin_reduce_scatter_v(send, recv, L->cnt, L->sd_null ? NULL : L->sd, dt, op, comm,
                                   NULL, &o);
  default:
    return purlin_all_to_all_v(send, L->cnt, L->sd_null ? NULL : L->sd, recv, L->rcnt,
                               L->rd_null ? NULL : L->rd, dt, comm, NULL, &o);
  }
}

/* Expected content of the receive side. exp is an image of the receive allocation (initialised
 * with its content before the call), out points into it where recv points into the allocation.
 * kind[i] = 1 marks reduced elements (compared with ref_match and tol[i]). */
static void expect(const case_t *c, uint64_t key, const ref_gen_t *g, const layout_t *L,
                   uint8_t *out, uint8_t *kind, double *tol, size_t out_base) {
  int n = g_n, me = g_rank;
  size_t es = ref_dtype_size(c->dtype), s = c->count, un = (size_t)n;
  uint8_t vals[8 * 256];
  layout_t Lr;
  switch (c->coll) {
  case C_AR:
  case C_RS:
  case C_RSV: {
    size_t cnt = c->coll == C_RSV ? L->cnt[me] : s;
    size_t *start = calloc(un, sizeof(size_t));
    for (int r = 0; r < n; r++) {
      if (c->coll == C_AR)
        start[r] = 0;
      else if (c->coll == C_RS)
        start[r] = (size_t)me * s;
      else {
        layout_make(c, key, r, &Lr);
        start[r] = Lr.sd[me];
        layout_free(&Lr);
      }
    }
    uint64_t rk[256];
    for (int r = 0; r < n; r++)
      rk[r] = ref_gen_rank_key(g, r);
    for (size_t i = 0; i < cnt; i++) {
      for (int r = 0; r < n; r++)
        ref_gen_elem_rk(g, rk[r], start[r] + i, vals + (size_t)r * es);
      ref_reduce(c->dtype, c->op, n, vals, out + i * es, &tol[out_base + i]);
      kind[out_base + i] = 1;
    }
    free(start);
    break;
  }
  case C_AG:
    for (int r = 0; r < n; r++)
      ref_gen_fill(g, r, 0, s, out + (size_t)r * s * es);
    break;
  case C_A2A:
    for (int r = 0; r < n; r++)
      ref_gen_fill(g, r, (size_t)me * s, s, out + (size_t)r * s * es);
    break;
  case C_AGV:
    for (int r = 0; r < n; r++)
      ref_gen_fill(g, r, 0, L->cnt[r], out + L->rd[r] * es);
    break;
  case C_A2AV:
    for (int r = 0; r < n; r++) {
      layout_make(c, key, r, &Lr);
      ref_gen_fill(g, r, Lr.sd[me], L->C[(size_t)r * un + (size_t)me], out + L->rd[r] * es);
      layout_free(&Lr);
    }
    break;
  }
}

/* Compare the receive allocation with its expected image; report differences. */
static int check_recv(const case_t *c, const char *desc, const uint8_t *got, const uint8_t *exp,
                      size_t bytes, size_t pay_off, size_t pay_n, const uint8_t *kind,
                      const double *tol, const char *what) {
  size_t es = ref_dtype_size(c->dtype);
  int exact_needed = c->mode == 1;
  if (memcmp(got, exp, bytes) == 0)
    return 0;
  long bad = 0;
  for (size_t b = 0; b < bytes; b++) { /* bytes outside the payload */
    if (b >= pay_off && b < pay_off + pay_n * es) {
      b = pay_off + pay_n * es - 1;
      continue;
    }
    if (got[b] != exp[b]) {
      if (bad++ < 4)
        failf("%s: %s: byte %+ld from recv start overwritten: 0x%02x, want 0x%02x", desc, what,
              (long)b - (long)pay_off, got[b], exp[b]);
    }
  }
  long inexact = 0;
  for (size_t i = 0; i < pay_n; i++) {
    const uint8_t *gp = got + pay_off + i * es, *ep = exp + pay_off + i * es;
    int bitwise = memcmp(gp, ep, es) == 0, ok = bitwise;
    if (!bitwise && kind && kind[i])
      ok = ref_match(c->dtype, gp, ep, exact_needed ? 0 : tol[i], &bitwise);
    if (ok && !bitwise)
      inexact++;
    if (!ok) {
      if (bad++ < 6) {
        char a[64], e[64];
        ref_format(c->dtype, gp, a, sizeof a);
        ref_format(c->dtype, ep, e, sizeof e);
        failf("%s: %s index %zu: got %s, expected %s", desc, what, i, a, e);
      }
    }
  }
  g_inexact += inexact;
  if (bad > 6)
    failf("%s: %s: %ld differences in all", desc, what, bad);
  return bad ? 1 : 0;
}

static int is_fatal(purlin_status_t st) {
  return st == PURLIN_ERR_TIMEOUT || st == PURLIN_ERR_REMOTE || st == PURLIN_ERR_INVALID_USAGE ||
         st == PURLIN_ERR_INTERNAL || st == PURLIN_ERR_SYSTEM;
}

/* Whether rank r's send (which 0) or receive/in-place (which 1) buffer is a purlin_mem_alloc one.
 */
static int kind_mem(const case_t *c, int r, int which) {
  if (!buf_mixed(c->buf))
    return which ? buf_recv_mem(c->buf) : buf_send_mem(c->buf);
  uint64_t phase = ref_mix(ref_key(case_key(c), 0x31u + (uint64_t)which));
  return (int)(((uint64_t)r + phase) & 1u);
}

/* One buffer slot. Mixed kinds: purlin_mem_alloc is collective, so every rank allocates the mem
 * buffer; a rank whose own kind is malloc keeps it aside (spare) and uses a malloc'd one. */
static int slot_get(purlin_comm_t comm, buf_t *use, buf_t *spare, int mixed, int mine_mem,
                    size_t bytes, arena_t *arena, int slot) {
  if (!mixed)
    return buf_get(comm, use, mine_mem, bytes, arena, slot);
  if (buf_get(comm, mine_mem ? use : spare, 1, bytes, arena, slot))
    return -1;
  return mine_mem ? 0 : buf_get(comm, use, 0, bytes, NULL, slot);
}
static void slot_put(purlin_comm_t comm, buf_t *use, buf_t *spare) {
  if (!g_fatal) {
    buf_put(comm, use);
    buf_put(comm, spare);
  } else {
    if (!use->mem && !use->borrowed)
      free(use->base);
  }
}

static int run_case(purlin_comm_t comm, const case_t *c, const run_opts_t *ro) {
  char desc[160];
  describe(c, desc, sizeof desc);
  double t_start = now_s(), t_call = 0;
  size_t es = ref_dtype_size(c->dtype);
  uint64_t key = case_key(c);
  ref_gen_t g = {c->genkey ? c->genkey : ref_key(key, 0x9e), c->dtype, c->op, c->special};
  int in = buf_inplace(c->buf), me = g_rank, failed = 0;
  layout_t L, Lr;
  layout_make(c, key, me, &L);

  /* Allocation sizes: purlin_mem_alloc wants the same size on every rank. */
  size_t max_send = 0, max_recv = 0, max_buf = 0;
  for (int r = 0; r < g_n; r++) {
    layout_make(c, key, r, &Lr);
    if (Lr.send_n > max_send)
      max_send = Lr.send_n;
    if (Lr.recv_n > max_recv)
      max_recv = Lr.recv_n;
    if (Lr.buf_n > max_buf)
      max_buf = Lr.buf_n;
    layout_free(&Lr);
  }
  size_t lead = GUARD + (c->align ? es : 0);
  buf_t sb = {0}, rb = {0}, sspare = {0}, rspare = {0};
  size_t rbytes, sbytes = 0;
  int mixed = buf_mixed(c->buf);
  arena_t *arena = ro ? ro->arena : NULL;
  if (in) {
    rbytes = 2 * GUARD + (max_buf + 1) * es;
    if (slot_get(comm, &rb, &rspare, mixed, kind_mem(c, me, 1), rbytes, arena, 1))
      goto out;
  } else {
    sbytes = 2 * GUARD + (max_send + 1) * es;
    rbytes = 2 * GUARD + (max_recv + 1) * es;
    if (slot_get(comm, &sb, &sspare, mixed, kind_mem(c, me, 0), sbytes, arena, 0))
      goto out;
    if (slot_get(comm, &rb, &rspare, mixed, kind_mem(c, me, 1), rbytes, arena, 1))
      goto out;
  }

  /* Poison, inputs, pointers. */
  uint8_t *send, *recv;
  size_t pay_off, pay_n; /* the payload of the receive allocation: recv (out) or the buffer (in) */
  memset(rb.base, 0xA5, rbytes);
  if (in) {
    uint8_t *buf = rb.base + lead;
    switch (c->coll) {
    case C_AG:
    case C_AGV:
      ref_gen_fill(&g, me, 0, L.send_n, buf + L.send_off * es);
      break;
    default:
      ref_gen_fill(&g, me, 0, L.buf_n, buf);
      break; /* AR A2A RS RSV A2AV */
    }
    send = buf + L.send_off * es;
    recv = buf + L.recv_off * es;
    pay_off = lead;
    pay_n = L.buf_n;
  } else {
    memset(sb.base, 0xA5, sbytes);
    send = sb.base + lead;
    recv = rb.base + lead;
    ref_gen_fill(&g, me, 0, L.send_n, send);
    pay_off = lead;
    pay_n = L.recv_n;
    /* NULL is allowed for a buffer with no elements. */
    if (!sb.mem && L.send_n == 0)
      send = NULL;
    if (!rb.mem && L.recv_n == 0)
      recv = NULL;
  }

  /* Expected image of the receive allocation. */
  uint8_t *exp = malloc(rbytes), *ssnap = NULL;
  uint8_t *kind = calloc(pay_n + 1, 1);
  double *tol = calloc(pay_n + 1, sizeof(double));
  if (!exp || !kind || !tol) {
    fprintf(stderr, "out of memory\n");
    exit(2);
  }
  memcpy(exp, rb.base, rbytes);
  {
    size_t out_elem = in ? (c->coll == C_RS || c->coll == C_RSV ? L.recv_off : 0) : 0;
    expect(c, key, &g, &L, exp + pay_off + out_elem * es, kind, tol, out_elem);
  }
  if (!in) {
    ssnap = malloc(sbytes);
    memcpy(ssnap, sb.base, sbytes);
  }

  t_call = now_s();
  purlin_status_t st = call_coll(c, comm, send, recv, &L);
  t_call = now_s() - t_call;
  if (st != PURLIN_OK) {
    failf("%s: status %s: %s", desc, purlin_status_name(st), purlin_comm_last_error(comm));
    failed = 1;
    if (is_fatal(st))
      g_fatal = 1;
    goto done;
  }
  if (!in) { /* the input is intact, and may be reused at once */
    if (memcmp(sb.base, ssnap, sbytes) != 0) {
      size_t b = 0;
      while (sb.base[b] == ssnap[b])
        b++;
      failf("%s: send buffer modified at byte %+ld from send start", desc, (long)b - (long)lead);
      failed = 1;
    }
    memset(sb.base, 0x5A, sbytes);
  }
  if (g_corrupt && rbytes > 0) { /* --corrupt K: 1 payload element, 2 guard before, 3 after */
    size_t at = g_corrupt == 1   ? (pay_n ? pay_off + (pay_n / 2) * es : 0)
                : g_corrupt == 2 ? pay_off - 1
                                 : pay_off + pay_n * es;
    rb.base[at] ^= 0x10;
  }
  failed |= check_recv(c, desc, rb.base, exp, rbytes, pay_off, pay_n, kind, tol, "recv");
  if (g_want_hash && c->mode == 1 && (!ro || !ro->keep)) {
    g_hash = ref_hash(g_hash, rb.base + pay_off, pay_n * es);
    g_hashed++;
  }
  if (ro && ro->keep) {
    *ro->keep = malloc(pay_n * es + 1);
    memcpy(*ro->keep, rb.base + pay_off, pay_n * es);
    *ro->keep_n = pay_n;
  }
  /* Late writes: once every rank has returned from the call (a small AllReduce later), a
   * purlin_mem_alloc receive buffer must still hold exactly what this rank saw at its return. */
  int any_recv_mem = 0; /* the same decision on every rank */
  for (int r = 0; r < g_n; r++)
    any_recv_mem |= kind_mem(c, r, 1);
  if (any_recv_mem && g_sync_mem && !(ro && ro->no_sync)) {
    uint32_t one = 1, sum = 0;
    purlin_status_t s2 = purlin_all_reduce(&one, &sum, 1, PURLIN_U32, PURLIN_SUM, comm, NULL, NULL);
    if (s2 != PURLIN_OK || sum != (uint32_t)g_n) {
      failf("%s: sync all_reduce: %s (sum %u): %s", desc, purlin_status_name(s2), sum,
            purlin_comm_last_error(comm));
      failed = 1;
      if (is_fatal(s2))
        g_fatal = 1;
    } else if (!failed && rb.mem) {
      failed |= check_recv(c, desc, rb.base, exp, rbytes, pay_off, pay_n, kind, tol,
                           "recv after all ranks returned (late write)");
    }
  }
done:
  free(exp);
  free(ssnap);
  free(kind);
  free(tol);
out:
  slot_put(comm, &sb, &sspare); /* the send slot, then the receive slot, on every rank */
  slot_put(comm, &rb, &rspare);
  layout_free(&L);
  if (g_verbose && g_rank == 0) {
    char kinds[300] = "";
    if (mixed) {
      size_t k = 0;
      for (int r = 0; r < g_n && k + 8 < sizeof kinds; r++)
        k += (size_t)snprintf(kinds + k, sizeof kinds - k, " r%d:%c%c", r,
                              in ? '-' : (kind_mem(c, r, 0) ? 'm' : 's'),
                              kind_mem(c, r, 1) ? 'm' : 's');
    }
    printf("case %s: call %.1f ms, case %.1f ms%s%s\n", desc, t_call * 1e3,
           (now_s() - t_start) * 1e3, mixed ? ", buffer kinds (send,recv):" : "", kinds);
  }
  if (failed)
    g_fail++;
  else
    g_pass++;
  return failed;
}

/* ---- case lists ---------------------------------------------------------------------------- */

typedef struct {
  int colls[C_COUNT], ncoll;
  int dtypes[REF_DTYPE_COUNT], ndtype;
  int ops[REF_OP_COUNT], nop;
  int modes[2], nmode;
  size_t sizes[64];
  int nsize;
  int bufs[B_COUNT], nbuf;
  int aligns[2], nalign;
  int vpats[V_COUNT], nvpat;
  int special, iters;
} lists_t;

typedef struct {
  case_t *v;
  size_t n, cap;
} caselist_t;

static void push(caselist_t *l, const case_t *c) {
  if (l->n == l->cap) {
    l->cap = l->cap ? 2 * l->cap : 256;
    l->v = realloc(l->v, l->cap * sizeof(case_t));
    if (!l->v)
      exit(2);
  }
  l->v[l->n++] = *c;
}

/* Dimensions of the pairwise generator. */
enum { D_COLL, D_DTYPE, D_OP, D_MODE, D_SIZE, D_BUF, D_ALIGN, D_VPAT, D_COUNT };

/* Greedy all-pairs covering array (AETG style): each new row starts from an uncovered pair and
 * fills the other dimensions with the value covering the most uncovered pairs; the best of several
 * random candidates is kept. Deterministic for a given seed, so every rank builds the same list. */
static size_t pairwise(const int *nv, int k, uint64_t seed, int (*rows)[D_COUNT], size_t maxrows) {
  uint8_t *cov[D_COUNT][D_COUNT] = {{0}};
  long uncovered = 0;
  for (int i = 0; i < k; i++)
    for (int j = i + 1; j < k; j++) {
      cov[i][j] = calloc((size_t)nv[i] * (size_t)nv[j], 1);
      uncovered += nv[i] * nv[j];
    }
  uint64_t h = ref_mix(seed);
  size_t nrows = 0;
  while (uncovered > 0 && nrows < maxrows) {
    int best[D_COUNT], cand[D_COUNT], best_score = -1;
    for (int t = 0; t < 24; t++) {
      for (int d = 0; d < k; d++)
        cand[d] = -1;
      /* a random uncovered pair */
      h = ref_mix(h);
      long pick = (long)(h % (uint64_t)uncovered), seen = 0;
      for (int i = 0; i < k && cand[0] == -1 && seen <= pick; i++)
        for (int j = i + 1; j < k && seen <= pick; j++)
          for (int a = 0; a < nv[i] && seen <= pick; a++)
            for (int b = 0; b < nv[j] && seen <= pick; b++)
              if (!cov[i][j][a * nv[j] + b] && seen++ == pick) {
                cand[i] = a;
                cand[j] = b;
              }
      int order[D_COUNT], no = 0;
      for (int d = 0; d < k; d++)
        if (cand[d] < 0)
          order[no++] = d;
      for (int x = no - 1; x > 0; x--) {
        h = ref_mix(h);
        int y = (int)(h % (uint64_t)(x + 1)), tmp = order[x];
        order[x] = order[y];
        order[y] = tmp;
      }
      for (int x = 0; x < no; x++) {
        int d = order[x], bestv = 0, bests = -1;
        h = ref_mix(h);
        int off = (int)(h % (uint64_t)nv[d]);
        for (int vv = 0; vv < nv[d]; vv++) {
          int v = (vv + off) % nv[d], sc = 0;
          for (int e = 0; e < k; e++) {
            if (e == d || cand[e] < 0)
              continue;
            int i = e < d ? e : d, j = e < d ? d : e, a = e < d ? cand[e] : v,
                b = e < d ? v : cand[e];
            sc += !cov[i][j][a * nv[j] + b];
          }
          if (sc > bests) {
            bests = sc;
            bestv = v;
          }
        }
        cand[d] = bestv;
      }
      int score = 0;
      for (int i = 0; i < k; i++)
        for (int j = i + 1; j < k; j++)
          score += !cov[i][j][cand[i] * nv[j] + cand[j]];
      if (score > best_score) {
        best_score = score;
        memcpy(best, cand, sizeof best);
      }
    }
    for (int i = 0; i < k; i++)
      for (int j = i + 1; j < k; j++) {
        uint8_t *p = &cov[i][j][best[i] * nv[j] + best[j]];
        if (!*p) {
          *p = 1;
          uncovered--;
        }
      }
    memcpy(rows[nrows++], best, sizeof best);
  }
  for (int i = 0; i < k; i++)
    for (int j = i + 1; j < k; j++)
      free(cov[i][j]);
  return nrows;
}

static void gen_pairwise(const lists_t *Ls, caselist_t *out) {
  /* Groups in which every dimension applies to every collective. */
  static const int groups[4][3] = {
      {C_AR, C_RS, -1}, {C_RSV, -1, -1}, {C_AG, C_A2A, -1}, {C_AGV, C_A2AV, -1}};
  for (int gi = 0; gi < 4; gi++) {
    int colls[3], nc = 0;
    for (int x = 0; x < 3 && groups[gi][x] >= 0; x++)
      for (int y = 0; y < Ls->ncoll; y++)
        if (Ls->colls[y] == groups[gi][x])
          colls[nc++] = groups[gi][x];
    if (nc == 0)
      continue;
    int red = coll_reduces(colls[0]), v = coll_is_v(colls[0]);
    int nv[D_COUNT] = {nc,        Ls->ndtype, red ? Ls->nop : 1, Ls->nmode,
                       Ls->nsize, Ls->nbuf,   Ls->nalign,        v ? Ls->nvpat : 1};
    enum { MAXROWS = 4096 };
    int(*rows)[D_COUNT] = calloc(MAXROWS, sizeof *rows);
    size_t nr = pairwise(nv, D_COUNT, ref_key(g_seed, (uint64_t)gi), rows, MAXROWS);
    { /* verify the covering property independently of the generator */
      long need = 0, have = 0;
      for (int i = 0; i < D_COUNT; i++)
        for (int j = i + 1; j < D_COUNT; j++)
          for (int x = 0; x < nv[i]; x++)
            for (int y = 0; y < nv[j]; y++) {
              need++;
              for (size_t r = 0; r < nr; r++)
                if (rows[r][i] == x && rows[r][j] == y) {
                  have++;
                  break;
                }
            }
      if (g_rank == 0)
        printf("coll_test: pairwise group %s%s%s: %zu rows cover %ld of %ld value pairs\n",
               k_coll[colls[0]], nc > 1 ? "," : "", nc > 1 ? k_coll[colls[1]] : "", nr, have, need);
      if (have != need) {
        failf("pairwise generator left %ld pairs uncovered", need - have);
        g_fail++;
      }
    }
    for (size_t r = 0; r < nr; r++) {
      for (int it = 0; it < Ls->iters; it++) {
        case_t c = {0};
        c.coll = colls[rows[r][D_COLL]];
        c.dtype = Ls->dtypes[rows[r][D_DTYPE]];
        c.op = red ? Ls->ops[rows[r][D_OP]] : REF_SUM;
        c.mode = Ls->modes[rows[r][D_MODE]];
        c.count = Ls->sizes[rows[r][D_SIZE]];
        c.buf = Ls->bufs[rows[r][D_BUF]];
        c.align = Ls->aligns[rows[r][D_ALIGN]];
        c.vpat = v ? Ls->vpats[rows[r][D_VPAT]] : 0;
        c.special = Ls->special;
        c.iter = (uint64_t)it;
        push(out, &c);
      }
    }
    free(rows);
  }
}

static void gen_cross(const lists_t *Ls, caselist_t *out) {
  for (int a = 0; a < Ls->ncoll; a++) {
    int coll = Ls->colls[a], red = coll_reduces(coll), v = coll_is_v(coll);
    for (int b = 0; b < Ls->ndtype; b++)
      for (int o = 0; o < (red ? Ls->nop : 1); o++)
        for (int m = 0; m < Ls->nmode; m++)
          for (int s = 0; s < Ls->nsize; s++)
            for (int bu = 0; bu < Ls->nbuf; bu++)
              for (int al = 0; al < Ls->nalign; al++)
                for (int vp = 0; vp < (v ? Ls->nvpat : 1); vp++)
                  for (int it = 0; it < Ls->iters; it++) {
                    case_t c = {0};
                    c.coll = coll;
                    c.dtype = Ls->dtypes[b];
                    c.op = red ? Ls->ops[o] : REF_SUM;
                    c.mode = Ls->modes[m];
                    c.count = Ls->sizes[s];
                    c.buf = Ls->bufs[bu];
                    c.align = Ls->aligns[al];
                    c.vpat = v ? Ls->vpats[vp] : 0;
                    c.special = Ls->special;
                    c.iter = (uint64_t)it;
                    push(out, &c);
                  }
  }
}

/* ---- extras -------------------------------------------------------------------------------- */

static void random_case(uint64_t *h, case_t *c, size_t maxcount) {
  static const size_t sizes[] = {0, 1, 2, 7, 64, 255, 1001, 4099};
  *h = ref_mix(*h);
  uint64_t x = *h;
  memset(c, 0, sizeof *c);
  c->coll = (int)(x % C_COUNT);
  x /= C_COUNT;
  c->dtype = (int)(x % REF_DTYPE_COUNT);
  x /= REF_DTYPE_COUNT;
  c->op = coll_reduces(c->coll) ? (int)(x % REF_OP_COUNT) : REF_SUM;
  x /= REF_OP_COUNT;
  c->mode = (int)(x % 2);
  x /= 2;
  c->buf = (int)(x % B_COUNT);
  x /= B_COUNT;
  c->align = (int)(x % 2);
  x /= 2;
  c->vpat = coll_is_v(c->coll) ? (int)(x % V_COUNT) : 0;
  x /= V_COUNT;
  c->count = x % 3 == 0 ? (size_t)(ref_mix(x) % (maxcount + 1)) : sizes[(x / 3) % 8];
  if (c->count > maxcount)
    c->count = maxcount;
  c->iter = *h & 0xffffu;
}

static int arena_make(purlin_comm_t comm, arena_t *a, size_t maxcount) {
  size_t bytes = 2 * GUARD + ((2 * maxcount + 4) * (size_t)g_n * 2 + 8 * (size_t)g_n + 1) * 8;
  memset(a, 0, sizeof *a);
  a->comm = comm;
  for (int i = 0; i < 2; i++) {
    if (buf_get(comm, &a->b[i], 1, bytes, NULL, 0))
      return -1;
  }
  return 0;
}
static void arena_drop(arena_t *a) {
  for (int i = 0; i < 2; i++)
    buf_put(a->comm, &a->b[i]);
}

static void extra_b2b(long calls) {
  enum { MAXC = 5000 };
  arena_t ar;
  if (arena_make(g_comm, &ar, MAXC))
    return;
  run_opts_t ro = {0};
  ro.arena = &ar;
  ro.no_sync = 1;
  uint64_t h = ref_key(g_seed, 0xb2b);
  double t0 = now_s();
  for (long i = 0; i < calls && !g_fatal; i++) {
    case_t c;
    random_case(&h, &c, MAXC);
    run_case(g_comm, &c, &ro);
  }
  if (g_rank == 0)
    printf("coll_test: b2b: %ld mixed calls in %.2f s\n", calls, now_s() - t0);
  if (!g_fatal)
    arena_drop(&ar);
}

static void extra_twocomm(long calls) {
  /* The second communicator: rank 0 makes an id, everyone gets it through an AllGather on the
   * first one, then joins with purlin_comm_init_rank and its own config. */
  purlin_unique_id_t id;
  memset(&id, 0, sizeof id);
  if (g_rank == 0) {
    purlin_status_t st = purlin_get_unique_id(&id);
    if (st != PURLIN_OK) {
      failf("twocomm: purlin_get_unique_id: %s", purlin_status_name(st));
      g_fail++;
      return;
    }
  }
  uint8_t *all = calloc((size_t)g_n, sizeof id);
  purlin_status_t st = purlin_all_gather(&id, all, sizeof id, PURLIN_U8, g_comm, NULL, NULL);
  if (st != PURLIN_OK) {
    failf("twocomm: all_gather of the id: %s: %s", purlin_status_name(st),
          purlin_comm_last_error(g_comm));
    g_fail++;
    free(all);
    return;
  }
  memcpy(&id, all, sizeof id);
  free(all);
  purlin_config_t cfg = PURLIN_CONFIG_INIT;
  cfg.datapath = PURLIN_DATAPATH_HOST;
  cfg.staging_bytes = 16 << 10;
  cfg.name = "second";
  purlin_comm_t b = NULL;
  st = purlin_comm_init_rank(&b, g_n, id, g_rank, &cfg);
  if (st != PURLIN_OK) {
    failf("twocomm: purlin_comm_init_rank: %s", purlin_status_name(st));
    g_fail++;
    return;
  }
  int r = -1, n = -1;
  purlin_datapath_t dp = PURLIN_DATAPATH_AUTO;
  if (purlin_comm_rank(b, &r) != PURLIN_OK || r != g_rank || purlin_comm_size(b, &n) != PURLIN_OK ||
      n != g_n || purlin_comm_datapath(b, &dp) != PURLIN_OK || dp != PURLIN_DATAPATH_HOST) {
    failf("twocomm: second communicator reports rank %d size %d datapath %d", r, n, (int)dp);
    g_fail++;
  }
  uint64_t h = ref_key(g_seed, 0x2c0);
  double t0 = now_s();
  /* purlin_mem_alloc buffers of the first communicator, used in calls on the second: they are
   * not the second one's symmetric memory, so it must stage (or otherwise cope), never misread. */
  arena_t foreign;
  int have_foreign = arena_make(g_comm, &foreign, 3000) == 0;
  run_opts_t fro = {0};
  fro.arena = &foreign;
  fro.no_sync = 1;
  for (long i = 0; i < calls && !g_fatal; i++) {
    case_t c;
    random_case(&h, &c, 3000);
    if (i % 10 == 9)
      c.count = 70000; /* beyond the second communicator's staging */
    run_case(i % 2 ? b : g_comm, &c, (i % 4 == 3 && have_foreign && c.count <= 3000) ? &fro : NULL);
  }
  if (have_foreign && !g_fatal)
    arena_drop(&foreign);
  if (g_rank == 0)
    printf("coll_test: twocomm: %ld calls alternating in %.2f s\n", calls, now_s() - t0);
  st = purlin_comm_destroy(b);
  if (st != PURLIN_OK) {
    failf("twocomm: destroy: %s", purlin_status_name(st));
    g_fail++;
  }
}

/* Deterministic mode: the bits of an element never depend on the size of the call, its regime or
 * the collective. AllReduce of count m must equal the first m elements of AllReduce of count L over
 * the same inputs; ReduceScatter(V) of count s must equal this rank's slice of AllReduce(n*s). */
static void extra_prefix(size_t large) {
  static const int dts[] = {REF_F32, REF_F16, REF_BF16, REF_F64, REF_E4M3, REF_E5M2, REF_I32};
  static const int ops[] = {REF_SUM, REF_PROD, REF_AVG};
  static const int bufs[] = {B_OUT_SS, B_IN_M, B_OUT_MM};
  size_t ms[] = {1, 7, 1001, 4099, large / 2 + 1, large};
  for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++)
      for (size_t bi = 0; bi < sizeof bufs / sizeof bufs[0]; bi++) {
        uint64_t gk = ref_key(ref_key(g_seed, 0x9f1), d * 16 + o);
        case_t c = {0};
        c.coll = C_AR;
        c.dtype = dts[d];
        c.op = ops[o];
        c.mode = 1;
        c.buf = bufs[bi];
        c.genkey = gk;
        uint8_t *full = NULL, *part = NULL;
        size_t fn = 0, pn = 0, es = ref_dtype_size(c.dtype);
        run_opts_t ro = {&full, &fn, NULL, 0};
        c.count = large;
        run_case(g_comm, &c, &ro);
        if (!full || g_fatal)
          return;
        ro.keep = &part;
        ro.keep_n = &pn;
        for (size_t k = 0; k + 1 < sizeof ms / sizeof ms[0]; k++) {
          c.count = ms[k];
          part = NULL;
          run_case(g_comm, &c, &ro);
          if (part && memcmp(part, full, ms[k] * es) != 0) {
            char desc[160];
            describe(&c, desc, sizeof desc);
            failf("%s: AllReduce of %zu elements differs from the first %zu of one of %zu", desc,
                  ms[k], ms[k], large);
            g_fail++;
          }
          free(part);
        }
        /* ReduceScatter / ReduceScatterV of s = large / n per rank against the AllReduce. */
        size_t s = large / (size_t)g_n;
        case_t a = c;
        a.count = s * (size_t)g_n;
        uint8_t *arr = NULL;
        ro.keep = &arr;
        ro.keep_n = &pn;
        run_case(g_comm, &a, &ro);
        for (int which = 0; which < 2 && arr; which++) {
          case_t rs = c;
          rs.coll = which ? C_RSV : C_RS;
          rs.count = s;
          rs.vpat = V_EVEN; /* every count s, prefix displacements: the RS layout */
          rs.iter = 7;      /* another case key: the inputs come from genkey all the same */
          uint8_t *got = NULL;
          ro.keep = &got;
          run_case(g_comm, &rs, &ro);
          if (got) {
            size_t off = buf_inplace(rs.buf) ? (size_t)g_rank * s : 0;
            if (memcmp(got + off * es, arr + (size_t)g_rank * s * es, s * es) != 0) {
              char desc[160];
              describe(&rs, desc, sizeof desc);
              failf("%s: ReduceScatter slice differs from AllReduce of %zu elements", desc,
                    a.count);
              g_fail++;
            }
          }
          free(got);
        }
        free(arr);
        free(full);
        if (g_fatal)
          return;
      }
}

/* ---- main ---------------------------------------------------------------------------------- */

static void usage(void) {
  fprintf(stderr,
          "usage: coll_test [--matrix pairwise|cross|none] [--coll L] [--dtype L] [--op L]\n"
          "       [--mode L] [--size L] [--buf L] [--align L] [--vpat L] [--special] [--iters K]\n"
          "       [--large N] [--seed S] [--case DESC]... [--extra b2b|twocomm|prefix|hash]...\n"
          "       [--calls N] [--max-lines N] [--no-sync] [--verbose]\n"
          "lists are comma separated; 'all' for every value; sizes may say 'large'\n");
  exit(2);
}

static int parse_list(const char *arg, const char *const *names, int nnames, int *out,
                      int (*byname)(const char *)) {
  char tmp[512], *save = NULL;
  int n = 0;
  if (strcmp(arg, "all") == 0) {
    for (int i = 0; i < nnames; i++)
      out[n++] = i;
    return n;
  }
  snprintf(tmp, sizeof tmp, "%s", arg);
  for (char *t = strtok_r(tmp, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    int v = byname ? byname(t) : index_of(names, nnames, t);
    if (v < 0) {
      fprintf(stderr, "coll_test: unknown value '%s'\n", t);
      usage();
    }
    out[n++] = v;
  }
  return n;
}
static int mode_by_name(const char *s) {
  return index_of(k_mode, 2, s);
}
static int align_by_name(const char *s) {
  return strcmp(s, "0") == 0 ? 0 : strcmp(s, "1") == 0 ? 1 : -1;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  lists_t Ls;
  memset(&Ls, 0, sizeof Ls);
  const char *size_arg = "0,1,7,1001,large";
  size_t large = 300000;
  const char *matrix = "pairwise";
  const char *cases[64];
  int ncases = 0;
  const char *extras[8];
  int nextras = 0;
  long calls = 1000;
  Ls.ncoll = parse_list("all", k_coll, C_COUNT, Ls.colls, NULL);
  Ls.ndtype = REF_DTYPE_COUNT;
  for (int i = 0; i < REF_DTYPE_COUNT; i++)
    Ls.dtypes[i] = i;
  Ls.nop = REF_OP_COUNT;
  for (int i = 0; i < REF_OP_COUNT; i++)
    Ls.ops[i] = i;
  Ls.nmode = parse_list("all", k_mode, 2, Ls.modes, NULL);
  Ls.nbuf = parse_list("all", k_buf, B_COUNT, Ls.bufs, NULL);
  Ls.nalign = 2;
  Ls.aligns[0] = 0;
  Ls.aligns[1] = 1;
  Ls.nvpat = parse_list("all", k_vpat, V_COUNT, Ls.vpats, NULL);
  Ls.iters = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define ARG(name) (strcmp(a, name) == 0 && v && (i++, 1))
    if (ARG("--matrix"))
      matrix = v;
    else if (ARG("--coll"))
      Ls.ncoll = parse_list(v, k_coll, C_COUNT, Ls.colls, NULL);
    else if (ARG("--dtype")) {
      if (strcmp(v, "all") == 0) {
        Ls.ndtype = REF_DTYPE_COUNT;
        for (int d = 0; d < REF_DTYPE_COUNT; d++)
          Ls.dtypes[d] = d;
      } else if (strcmp(v, "float") == 0) {
        static const int fl[] = {REF_F32, REF_F16, REF_BF16, REF_F64, REF_E4M3, REF_E5M2};
        Ls.ndtype = 6;
        memcpy(Ls.dtypes, fl, sizeof fl);
      } else {
        Ls.ndtype = parse_list(v, NULL, 0, Ls.dtypes, ref_dtype_from_name);
      }
    } else if (ARG("--op")) {
      if (strcmp(v, "all") == 0) {
        Ls.nop = REF_OP_COUNT;
        for (int o = 0; o < REF_OP_COUNT; o++)
          Ls.ops[o] = o;
      } else {
        Ls.nop = parse_list(v, NULL, 0, Ls.ops, ref_op_from_name);
      }
    } else if (ARG("--mode"))
      Ls.nmode = parse_list(v, NULL, 0, Ls.modes, mode_by_name);
    else if (ARG("--size"))
      size_arg = v;
    else if (ARG("--buf"))
      Ls.nbuf = parse_list(v, k_buf, B_COUNT, Ls.bufs, NULL);
    else if (ARG("--align"))
      Ls.nalign = parse_list(v, NULL, 0, Ls.aligns, align_by_name);
    else if (ARG("--vpat"))
      Ls.nvpat = parse_list(v, k_vpat, V_COUNT, Ls.vpats, NULL);
    else if (ARG("--iters"))
      Ls.iters = atoi(v);
    else if (ARG("--large"))
      large = strtoull(v, NULL, 10);
    else if (ARG("--seed"))
      g_seed = strtoull(v, NULL, 10);
    else if (ARG("--case")) {
      if (ncases < 64)
        cases[ncases++] = v;
    } else if (ARG("--extra")) {
      if (nextras < 8)
        extras[nextras++] = v;
    } else if (ARG("--calls"))
      calls = atol(v);
    else if (ARG("--max-lines"))
      g_max_lines = atol(v);
    else if (strcmp(a, "--special") == 0)
      Ls.special = 1;
    else if (strcmp(a, "--no-sync") == 0)
      g_sync_mem = 0;
    else if (ARG("--corrupt"))
      g_corrupt = atoi(v);
    else if (strcmp(a, "--verbose") == 0)
      g_verbose = 1;
    else
      usage();
#undef ARG
  }
  { /* sizes */
    char tmp[512], *save = NULL;
    snprintf(tmp, sizeof tmp, "%s", size_arg);
    for (char *t = strtok_r(tmp, ",", &save); t && Ls.nsize < 64; t = strtok_r(NULL, ",", &save))
      Ls.sizes[Ls.nsize++] = strcmp(t, "large") == 0 ? large : (size_t)strtoull(t, NULL, 10);
  }
  if (Ls.iters < 1)
    Ls.iters = 1;

  double t0 = now_s();
  purlin_status_t st = purlin_comm_init_env(&g_comm, NULL);
  if (st != PURLIN_OK) {
    printf("coll_test: purlin_comm_init_env: %s (run under purlinrun)\n", purlin_status_name(st));
    return 1;
  }
  if (purlin_comm_rank(g_comm, &g_rank) != PURLIN_OK ||
      purlin_comm_size(g_comm, &g_n) != PURLIN_OK) {
    printf("coll_test: purlin_comm_rank/size failed\n");
    return 1;
  }
  if (g_n > 256) {
    printf("coll_test: world too large for this test\n");
    return 1;
  }

  caselist_t list = {0};
  if (strcmp(matrix, "pairwise") == 0)
    gen_pairwise(&Ls, &list);
  else if (strcmp(matrix, "cross") == 0)
    gen_cross(&Ls, &list);
  else if (strcmp(matrix, "none") != 0)
    usage();
  for (int i = 0; i < ncases; i++) {
    case_t c;
    if (parse_case(cases[i], &c) != 0) {
      fprintf(stderr, "coll_test: bad case '%s'\n", cases[i]);
      usage();
    }
    push(&list, &c);
  }
  for (int i = 0; i < nextras; i++)
    if (strcmp(extras[i], "hash") == 0)
      g_want_hash = 1;
  if (g_rank == 0)
    printf("coll_test: world %d, %zu cases (%s), extras %d, seed %" PRIu64 "\n", g_n, list.n,
           matrix, nextras, g_seed);
  for (size_t i = 0; i < list.n && !g_fatal; i++)
    run_case(g_comm, &list.v[i], NULL);
  free(list.v);
  for (int i = 0; i < nextras && !g_fatal; i++) {
    if (strcmp(extras[i], "b2b") == 0)
      extra_b2b(calls);
    else if (strcmp(extras[i], "twocomm") == 0)
      extra_twocomm(calls / 5 > 0 ? calls / 5 : 1);
    else if (strcmp(extras[i], "prefix") == 0)
      extra_prefix(large);
    else if (strcmp(extras[i], "hash") == 0)
      continue;
    else
      usage();
  }
  if (g_want_hash)
    printf("coll_test: det-hash rank %d: %016" PRIx64 " over %ld outputs\n", g_rank, g_hash,
           g_hashed);
  if (g_inexact)
    printf("coll_test: info: rank %d: %ld non-deterministic elements within tolerance but not "
           "bitwise equal to the reference\n",
           g_rank, g_inexact);
  st = purlin_comm_destroy(g_comm);
  if (st != PURLIN_OK) {
    printf("FAIL rank %d: purlin_comm_destroy: %s\n", g_rank, purlin_status_name(st));
    g_fail++;
  }
  printf("coll_test: %ld passed, %ld failed (rank %d of %d, %.1f s)%s\n", g_pass, g_fail, g_rank,
         g_n, now_s() - t0, g_fatal ? " -- stopped: communicator aborted" : "");
  return g_fail ? 1 : 0;
}
