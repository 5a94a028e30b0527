/* lean.cu -- the lean packet kernel: SNAC's latency regime (notify: the header and the data
 * packets pushed to every peer; agree: every peer's header checked; consume: every source's
 * packets copied or reduced) for calls that move nothing but packets (pl_lean_takes), as a kernel
 * of its own. Same wire format as SNAC's kernel (header words in packets [0, pl_hdr_words) of the
 * source's window, data after them, two-shot's region 2 at plan.ar_region2, flags
 * pl_snac_val(epoch, step)), the same device epoch, deadlines, abort and error record, the same
 * bits (every reduction in ascending rank order through dtype.h's element math).
 *
 * Why a second kernel: a small call's cost was latency in the generic kernel's control flow, not
 * work (docs/tuning.md, findings 6-8); its 2.4 MB of code (every layout, regime, dtype and op of
 * SNAC, inlined) runs cold from L2 in every launch. This kernel keeps the per-peer numbers in
 * shared arrays computed once, flattens (peer, packet) so that every thread has several loads in
 * flight, reduces in registers (no scratch, no barrier per segment), and pushes two-shot's reduced
 * words straight from registers. Instantiations: per dtype (with the op a runtime value, and with
 * SUM a constant), one for the gathers, each also for the V collectives; their hot paths are a few
 * KB (80-145 KB of SASS each, mostly cold paths kept out of line).
 * The idea of a dedicated small-message kernel follows NCCL's LL protocol kernels and TensorRT-LLM's
 * custom one-shot/two-shot all-reduce kernels; the code is purlin's. */
#include "cuda/atom_cuda.cuh"
#include "snac/snac.h"
#include "cuda/report.cuh"
#include "cuda/acc.cuh"
#include "cuda/lean.h"

/* ---- host side: which calls, how many packets ------------------------------------------------ */

int pl_lean_takes(const pl_snac_t *x) {
  const pl_call_t *c = &x->c;
  const int w = c->world, r = c->rank;
  const uint64_t lat = x->plan.lat_max, es = c->esize;
  if (c->counts_dev) return 0;
  switch (c->coll) {
  case PL_COLL_ALL_REDUCE: return x->plan.ar_oneshot || x->plan.ar_twoshot;
  case PL_COLL_REDUCE_SCATTER:
  case PL_COLL_ALL_GATHER:
  case PL_COLL_ALL_TO_ALL: return c->count * es <= lat;
  case PL_COLL_ALL_GATHER_V:
  case PL_COLL_REDUCE_SCATTER_V: /* every rank's block or shard, known to every rank */
    for (int d = 0; d < w; d++)
      if (c->rcounts[d] * es > lat) return 0;
    return 1;
  case PL_COLL_ALL_TO_ALL_V:
    /* my blocks only: a peer with a larger block elsewhere runs the direct kernel (or SNAC's),
     * which exchanges packet blocks with this one in the same wire format (docs/gpu.md, "The lean
     * packet kernel", "The direct kernel") */
    for (int d = 0; d < w; d++)
      if (d != r && (c->scounts[d] * es > lat || c->rcounts[d] * es > lat)) return 0;
    return 1;
  default: return 0;
  }
}

uint64_t pl_tiny_block_bytes(const pl_snac_t *x) {
  const pl_call_t *c = &x->c;
  if (c->coll == PL_COLL_ALL_REDUCE && x->plan.ar_twoshot) return pl_shard_bytes(c, 0);
  if (pl_coll_is_v(c->coll)) { /* the most of my blocks out (AGV: my input) and in */
    uint64_t m = c->coll == PL_COLL_ALL_GATHER_V ? c->count : 0;
    for (int d = 0; d < c->world; d++) {
      if (c->rcounts[d] > m) m = c->rcounts[d];
      if (c->coll == PL_COLL_ALL_TO_ALL_V && c->scounts[d] > m) m = c->scounts[d];
    }
    return m * c->esize;
  }
  return c->count * c->esize;
}

int pl_tiny_takes(const pl_snac_t *x, uint64_t tiny_max) {
  const pl_call_t *c = &x->c;
  const uint64_t b = pl_tiny_block_bytes(x), es = c->esize;
  if (tiny_max > PL_TINY_MAX_BYTES) tiny_max = PL_TINY_MAX_BYTES;
  if (c->counts_dev) return 0;
  if (pl_coll_is_v(c->coll)) { /* a call the lean kernel takes: every block, my own too */
    for (int d = 0; d < c->world; d++)
      if (c->rcounts[d] * es > tiny_max ||
          (c->coll == PL_COLL_ALL_TO_ALL_V && c->scounts[d] * es > tiny_max))
        return 0;
    return c->coll != PL_COLL_ALL_GATHER_V || c->count * es <= tiny_max;
  }
  if (!c->count || b > tiny_max) return 0;
  switch (c->coll) {
  case PL_COLL_ALL_REDUCE: return x->plan.ar_oneshot || x->plan.ar_twoshot;
  case PL_COLL_REDUCE_SCATTER:
  case PL_COLL_ALL_GATHER:
  case PL_COLL_ALL_TO_ALL: return 1;
  default: return 0;
  }
}

uint64_t pl_lean_work_packets(const pl_snac_t *x) {
  const pl_call_t *c = &x->c;
  const int w = c->world, r = c->rank;
  if (c->coll == PL_COLL_ALL_REDUCE && x->plan.ar_twoshot) /* shard 0 is the largest; two shots */
    return (uint64_t)(w - 1) * ((2 * pl_shard_bytes(c, 0) + 7) / 8);
  if (c->coll == PL_COLL_ALL_REDUCE) return (uint64_t)(w - 1) * ((c->count * c->esize + 7) / 8);
  uint64_t in = 0, out = 0, self = 0;
  for (int d = 0; d < w; d++) {
    if (d == r) continue;
    if (pl_coll_is_reduce(c->coll)) {
      in += (pl_shard_bytes(c, r) + 7) / 8;
      out += (pl_shard_bytes(c, d) + 7) / 8;
    } else {
      in += (pl_gather_bytes_recv(c, d) + 7) / 8;
      out += (pl_gather_bytes_send(c, d) + 7) / 8;
    }
  }
  if (!pl_coll_is_reduce(c->coll)) self = pl_gather_bytes_recv(c, r) / 8; /* a copy, by words */
  return in > out ? (in > self ? in : self) : (out > self ? out : self);
}

/* ---- the kernel ------------------------------------------------------------------------------ */

/* A CTA's shared state: the call's per-peer numbers, computed once by threads 0..world-1. */
typedef struct {
  char *ws[PL_MAX_WORLD];          /* every rank's workspace */
  const char *osrc[PL_MAX_WORLD];  /* my block (shard, vector) for peer d */
  uint64_t ob[PL_MAX_WORLD];       /* its bytes */
  char *idst[PL_MAX_WORLD];        /* where source s's block lands (gathers, two-shot's tail) */
  uint64_t ib[PL_MAX_WORLD];       /* its bytes */
  uint32_t op0[PL_MAX_WORLD], ip0[PL_MAX_WORLD]; /* this CTA's part of those blocks, in packets: */
  uint32_t on[PL_MAX_WORLD], in[PL_MAX_WORLD];   /* [op0, op0 + on) and [ip0, ip0 + in) */
  unsigned omax, imax;             /* the most packets of any peer's part of this CTA */
  pl_call_t c;                     /* V: the call, its count pointers into v */
  uint64_t v[4][PL_MAX_WORLD];     /* V: scounts, sdispls, rcounts, rdispls (the arguments' copies:
                                      generic loads from the parameter space cost ~0.5 us each) */
  uint64_t epoch;
  pl_snac_t x;                     /* the failure path only: the call, for pl_dev_report_x */
  volatile int stop;               /* a wait failed or the headers disagree: data waits stop */
  int err, err_peer, aborted, mis;
  int vlook;                       /* tiny V kernel: a thread is looking at the V counts
                                      (pl_tiny_check: one at a time) */
  unsigned mixsum;                 /* AllToAllV: the headers' word 0 counted (pl_lean_mix) */
  const char *err_what;
} pl_lean_sh_t;

/* This CTA's packets [*p0, *p1) of a b-byte block: pl_snac_part's split with the CTAs as lanes,
 * so that a CTA reads (in place) only what it pushed itself before its barrier. */
PL_DEV void pl_lean_part(uint64_t b, uint64_t *p0, uint64_t *p1) {
  uint64_t lo, hi;
  pl_part(b, blockIdx.x, gridDim.x, &lo, &hi); /* nvcc divides in 32 bits when the operands fit */
  *p0 = lo / 8;
  *p1 = hi > lo ? (hi + 7) / 8 : lo / 8;
}

PL_DEV void pl_lean_fail(pl_lean_sh_t *sh, int st, int peer, const char *what) {
  if (st == PL_WAIT_GROUP) return; /* another thread's failure, or the headers: recorded there */
  if (atomicCAS(&sh->err, 0, st) == 0) {
    sh->err_peer = st == PURLIN_ERR_TIMEOUT ? peer : -1;
    sh->err_what = what;
  }
  atomicExch((int *)&sh->stop, 1); /* several threads may set it: atomics, not a race */
}

/* Cold paths out of line, so that the hot path stays a few KB of straight code: a packet that
 * was not there at the first poll, a word at an unaligned address or past the block's end. */
typedef struct {
  uint64_t data;
  int st; /* 0, or why the wait stopped */
} pl_lean_got_t;
/* Returns by value: a pointer to the caller's word would put the caller's in-flight loads in local
 * memory, and every store there waits for its load (8 load latencies in a row per packet). */
static __device__ __noinline__ pl_lean_got_t pl_lean_wait(const pl_pkt_t *q, uint64_t flag,
                                                          pl_wait_t wt) {
  pl_lean_got_t g;
  g.data = 0;
  g.st = pl_wait_pkt(q, flag, PL_READY_EPOCH, &wt, &g.data);
  return g;
}
/* The stop conditions of a batch of polls (every PL_SPIN_CHECK + 1 rounds): abort, a sibling CTA's
 * failure, this CTA's stop flag, the deadline (0 until the first check sets it). */
typedef struct {
  uint64_t deadline;
  int st;
} pl_lean_chk_t;
static __device__ __noinline__ pl_lean_chk_t pl_lean_check(pl_wait_t wt, uint64_t deadline) {
  pl_lean_chk_t c;
  c.deadline = deadline;
  c.st = pl_wait_check(&wt, &c.deadline);
  return c;
}
/* The tiny kernel's check: pl_lean_check's, then the peers' headers (defined with the kernel). */
static __device__ __noinline__ pl_lean_chk_t pl_tiny_check(pl_wait_t wt, uint64_t deadline,
                                                           const pl_snac_t *X, pl_lean_sh_t *sh);
/* Poll the packets of `pend` (a bit per slot u of q/dv/fv) until all carry `flag`: every round
 * reloads every pending packet at once, so packets that arrive together cost one round trip, not
 * one each; with PURLIN_POLL_BACKOFF_NS a __nanosleep between rounds (off by default: finding 14's
 * experiment). On failure: records it (peer: the first pending slot's source sv[u]) and returns from
 * the enclosing function (with the value of the macro's last arguments, if any). hdrs (a constant):
 * the tiny kernels' poll: a packet is ready when its flag equals `flag` (pl_tiny_sig's flags are not
 * ordered), and the check also looks at the peers' headers (pl_tiny_check). */
#define PL_LEAN_POLL_(N, pend, q, dv, fv, sv, flag, wt, sh, what, hdrs, ...)                   \
  do {                                                                                             \
    uint32_t spins_ = 0;                                                                           \
    uint64_t deadline_ = 0;                                                                        \
    while (pend) {                                                                                 \
      _Pragma("unroll") for (int u_ = 0; u_ < (N); u_++) if ((pend) >> u_ & 1u)                   \
          pl_ld_pkt((q)[u_], &(dv)[u_], &(fv)[u_]);                                                \
      _Pragma("unroll") for (int u_ = 0; u_ < (N); u_++) if (((pend) >> u_ & 1u) &&               \
                                                             ((hdrs) ? (fv)[u_] == (flag)          \
                                                                     : pl_ready((fv)[u_], (flag),  \
                                                                                PL_READY_EPOCH)))  \
          (pend) &= ~(1u << u_);                                                                   \
      if ((pend) && (wt)->backoff) __nanosleep((wt)->backoff); /* PURLIN_POLL_BACKOFF_NS */        \
      if ((pend) && (++spins_ & PL_SPIN_CHECK) == 0) {                                             \
        pl_lean_chk_t c_ = (hdrs) ? pl_tiny_check(*(wt), deadline_, X, (sh))                      \
                                  : pl_lean_check(*(wt), deadline_);                               \
        deadline_ = c_.deadline;                                                                   \
        if (c_.st) {                                                                               \
          int peer_ = -1;                                                                          \
          _Pragma("unroll") for (int u_ = 0; u_ < (N); u_++) if (peer_ < 0 && ((pend) >> u_ & 1u)) \
              peer_ = (sv)[u_];                                                                    \
          pl_lean_fail((sh), c_.st, peer_, (what));                                                \
          return __VA_ARGS__;                                                                      \
        }                                                                                          \
      }                                                                                            \
    }                                                                                              \
  } while (0)

static __device__ __noinline__ uint64_t pl_lean_pack_slow(const char *src, uint64_t b,
                                                          uint64_t i) {
  return pl_pkt_pack(src, b, i);
}
static __device__ __noinline__ void pl_lean_unpack_slow(char *dst, uint64_t b, uint64_t i,
                                                        uint64_t d) {
  pl_pkt_unpack(dst, b, i, d);
}
static __device__ __noinline__ void pl_lean_copy(char *dst, const char *src, uint64_t bytes) {
  pl_copy_vec(dst, src, bytes, threadIdx.x, blockDim.x);
}
PL_DEV uint64_t pl_lean_pack(const char *src, uint64_t b, uint64_t i) {
  const char *p = src + 8 * i;
  if (8 * i + 8 <= b && !((uintptr_t)p & 7)) return *(const uint64_t *)p;
  return pl_lean_pack_slow(src, b, i);
}
PL_DEV void pl_lean_unpack(char *dst, uint64_t b, uint64_t i, uint64_t d) {
  char *p = dst + 8 * i;
  if (8 * i + 8 <= b && !((uintptr_t)p & 7)) *(uint64_t *)p = d;
  else pl_lean_unpack_slow(dst, b, i, d);
}

/* The window of source s in rank d's workspace, for this call's parity. */
#define PL_LEAN_WIN(sh, d, s)                                                                      \
  ((pl_pkt_t *)((sh)->ws[d] + X->geom.pkt_off + (par * (uint64_t)w + (uint64_t)(s)) * X->geom.pkt_win))

/* Push this CTA's part of my block for every peer d (osrc[d], ob[d] bytes) into window packets
 * [base + hw ...) of my window at d, four loads in flight per thread. */
PL_DEV void pl_lean_push(const pl_snac_t *X, pl_lean_sh_t *sh, int w, int r, uint64_t par,
                         uint64_t base, uint64_t flag) {
  uint32_t nmax = sh->omax, n = (uint32_t)(w - 1) * nmax, nt = blockDim.x;
  for (uint32_t k0 = threadIdx.x; k0 < n; k0 += 4 * nt) {
    uint64_t v[4];
    pl_pkt_t *q[4];
#pragma unroll
    for (int u = 0; u < 4; u++) {
      uint32_t k = k0 + (uint32_t)u * nt, j = k / nmax, m = k - j * nmax;
      q[u] = NULL;
      if (k >= n) continue;
      int d = r + 1 + (int)j;
      d = d >= w ? d - w : d;
      if (m >= sh->on[d]) continue;
      uint64_t i = sh->op0[d] + m;
      v[u] = pl_lean_pack(sh->osrc[d], sh->ob[d], i);
      q[u] = PL_LEAN_WIN(sh, d, r) + base + i;
    }
#pragma unroll
    for (int u = 0; u < 4; u++)
      if (q[u]) pl_st_pkt(q[u], v[u], flag);
  }
}

/* Receive this CTA's part of every source's block (idst[s], ib[s] bytes) from window packets
 * [base ...) of its window here, PL_LEAN_RECV_UNROLL polls in flight per thread. */
#define PL_LEAN_RECV_UNROLL 8
PL_DEV void pl_lean_recv(const pl_snac_t *X, pl_lean_sh_t *sh, int w, int r, uint64_t par,
                         uint64_t base, uint64_t flag, const pl_wait_t *wt, const char *what) {
  uint32_t nmax = sh->imax, n = (uint32_t)(w - 1) * nmax, nt = blockDim.x;
  for (uint32_t k0 = threadIdx.x; k0 < n; k0 += PL_LEAN_RECV_UNROLL * nt) {
    uint64_t dv[PL_LEAN_RECV_UNROLL], fv[PL_LEAN_RECV_UNROLL], iv[PL_LEAN_RECV_UNROLL];
    int sv[PL_LEAN_RECV_UNROLL];
    const pl_pkt_t *q[PL_LEAN_RECV_UNROLL];
#pragma unroll
    for (int u = 0; u < PL_LEAN_RECV_UNROLL; u++) {
      uint32_t k = k0 + (uint32_t)u * nt, j = k / nmax, m = k - j * nmax;
      q[u] = NULL;
      if (k >= n) continue;
      int s = r + 1 + (int)j;
      s = s >= w ? s - w : s;
      if (m >= sh->in[s]) continue;
      uint64_t i = sh->ip0[s] + m;
      sv[u] = s;
      iv[u] = i;
      q[u] = PL_LEAN_WIN(sh, r, s) + base + i;
      pl_ld_pkt(q[u], &dv[u], &fv[u]);
    }
    uint32_t pend = 0;
#pragma unroll
    for (int u = 0; u < PL_LEAN_RECV_UNROLL; u++)
      if (q[u] && !pl_ready(fv[u], flag, PL_READY_EPOCH)) pend |= 1u << u;
    PL_LEAN_POLL_(PL_LEAN_RECV_UNROLL, pend, q, dv, fv, sv, flag, wt, sh, what, 0);
#pragma unroll
    for (int u = 0; u < PL_LEAN_RECV_UNROLL; u++)
      if (q[u]) pl_lean_unpack(sh->idst[sv[u]], sh->ib[sv[u]], iv[u], dv[u]);
  }
}

/* PURLIN_PROFILE: when thread 0 of CTA 0 had its first packets to reduce (the rest of consume is
 * work). In the shared space by declaration, so that the stamp's store aliases no global access
 * of the loop (a generic pointer to it made the loop reload its shared numbers). */
static __shared__ uint64_t pl_lean_prof_data;

/* Reduce this CTA's part of b bytes into dst: per packet, my input (own) and every source's packet
 * at window packets [base ...), in ascending rank order, all sources' polls in flight at once.
 * Two-shot: the reduced word also goes to every peer at packet base2 + i (flag2). */
template <int DT, int OP>
PL_DEV void pl_lean_reduce(const pl_snac_t *X, pl_lean_sh_t *sh, int w, int r, uint64_t par,
                           const char *own, char *dst, uint64_t b, uint64_t base, uint64_t flag,
                           int push2, uint64_t base2, uint64_t flag2, const pl_wait_t *wt,
                           int stamp) {
  const int op = OP >= 0 ? OP : X->c.op;
  uint64_t p0, p1, nt = blockDim.x;
  pl_lean_part(b, &p0, &p1);
  const char *mywin = sh->ws[r] + X->geom.pkt_off + par * (uint64_t)w * X->geom.pkt_win;
  for (uint64_t i = p0 + threadIdx.x; i < p1; i += nt) {
    uint64_t mine = pl_lean_pack(own, b, i);
    pl_lacc_t acc;
    for (int s0 = 0; s0 < w; s0 += 8) {
      uint64_t dv[8], fv[8];
      const pl_pkt_t *q[8];
      int sv[8];
      uint32_t pend = 0;
#pragma unroll
      for (int u = 0; u < 8; u++) {
        int s = s0 + u;
        sv[u] = s;
        q[u] = (const pl_pkt_t *)(mywin + (uint64_t)s * X->geom.pkt_win) + base + i;
        if (s < w && s != r) {
          pl_ld_pkt(q[u], &dv[u], &fv[u]);
          pend |= 1u << u;
        }
      }
#pragma unroll
      for (int u = 0; u < 8; u++)
        if ((pend >> u & 1u) && pl_ready(fv[u], flag, PL_READY_EPOCH)) pend &= ~(1u << u);
      PL_LEAN_POLL_(8, pend, q, dv, fv, sv, flag, wt, sh, "reduce packets", 0);
      if (stamp) { /* PURLIN_PROFILE: thread 0's first packets are here */
        pl_lean_prof_data = pl_globaltimer();
        stamp = 0;
      }
#pragma unroll
      for (int u = 0; u < 8; u++) {
        int s = s0 + u;
        if (s >= w) break;
        pl_lacc_put<DT>(&acc, s == r ? mine : dv[u], op, s == 0);
      }
    }
    uint64_t out = pl_lacc_get<DT>(&acc, op, w);
    pl_lean_unpack(dst, b, i, out);
    if (push2)
      for (int j = 1; j < w; j++) {
        int d = (r + j) % w;
        pl_st_pkt(PL_LEAN_WIN(sh, d, r) + base2 + i, out, flag2);
      }
  }
}

PL_DEV void pl_lean_mis(pl_lean_sh_t *sh) {
  atomicExch(&sh->mis, 1);
  atomicExch((int *)&sh->stop, 1); /* the data waits stop: a peer that disagrees may not send */
}

/* Rank s's header words 0 (a) and 1 (n, the count; V: not compared here) against mine: the
 * fields, the count, a direct peer or one whose counts are in device memory (these kernels are
 * neither). AllToAllV takes a direct peer: it exchanges this rank's blocks, all packets, as packets
 * (direct.cu, pl_direct_pkts). */
#define PL_LEAN_HDR_SHARED (0xffffffffffffull | (uint64_t)(PL_HDR_DIRECT | PL_HDR_DCOUNTS) << 48)
PL_DEV int pl_lean_hdr_differs(uint64_t a, uint64_t n, uint64_t myh0, uint64_t count, int v) {
  const uint64_t m = v && (myh0 >> 16 & 0xff) == PL_COLL_ALL_TO_ALL_V
                         ? PL_LEAN_HDR_SHARED & ~((uint64_t)PL_HDR_DIRECT << 48)
                         : PL_LEAN_HDR_SHARED;
  return ((a ^ myh0) & m) || (!v && n != count);
}

/* AllToAllV: rank s's header word 0 (a) counted toward the call's mix (pl_hdr_mixbits), by one of
 * n threads that each take one rank's; the last to arrive finds whether a direct-kernel rank stands
 * beside one with a large block that runs another kernel: MISMATCH, as pl_snac_hdr_check's verdict
 * on every rank (the direct ranks stop at once, and would never send this rank its packets). No
 * barrier: one shared counter of arrivals (bits 0-7), direct ranks (8-15), the others (16-). */
PL_DEV void pl_lean_mix(pl_lean_sh_t *sh, uint64_t a, unsigned n) {
  const unsigned b = pl_hdr_mixbits(a), add = 1u + (b & 1u) * 256u + (b >> 1) * 65536u;
  const unsigned t = atomicAdd(&sh->mixsum, add) + add;
  if ((t & 255u) == n && (t >> 8 & 255u) && (t >> 16)) pl_lean_mis(sh);
}

/* Peer s's header says it reads some peer's buffers directly (zero copy: a SNAC-kernel rank in an
 * AllToAllV whose other blocks are staged): it returns only after every peer's `done` in every
 * lane (pl_snac_zc_exit). This rank reads no peer's buffers: done at once. */
static __device__ __noinline__ void pl_lean_zc_done(const pl_snac_t *X, pl_lean_sh_t *sh, int s,
                                                    int r, uint64_t f1) {
  pl_ctrl_t *ctl = (pl_ctrl_t *)sh->ws[s];
  for (int l = 0; l < X->plan.lanes; l++) pl_st_release_sys(&ctl->peer[l][r].done, f1);
}

/* Word q of my header as this kernel pushes it: SNAC's words 0 (h0), 1 (count), 6 (world) and, in
 * a V collective, the counts (pl_hdr_vword); the zero-copy words stay 0 (this kernel never reads a
 * peer's buffer). */
template <int V>
PL_DEV uint64_t pl_lean_hdr_word(const pl_call_t *c, uint64_t h0, int w, uint32_t q) {
  return q == 0   ? h0
         : q == 1 ? c->count
         : q == 6 ? (uint64_t)w
         : V && q >= PL_HDR_FIXED ? pl_hdr_vword(c, (int)q - PL_HDR_FIXED)
                                  : 0;
}

/* Word q (>= 1) of rank s's header (mine: what I pushed), awaited in my window; 0 after a failure
 * (then recorded in *st, and the caller stops). look: not awaited (*st = PL_LEAN_NOT_YET if not
 * there yet: positive, unlike the errors, and neither PL_WAIT_SIBLING nor PL_WAIT_GROUP). */
#define PL_LEAN_NOT_YET 3
PL_DEV uint64_t pl_lean_hword(const pl_snac_t *X, pl_lean_sh_t *sh, int w, int r, uint64_t par,
                              int s, int q, uint64_t f1, const pl_wait_t &wt, int *st, int look) {
  if (s == r) return pl_lean_hdr_word<1>(&sh->c, 0, w, (uint32_t)q);
  const pl_pkt_t *p = PL_LEAN_WIN(sh, r, s) + q;
  uint64_t v, f;
  pl_ld_pkt(p, &v, &f);
  if (pl_ready(f, f1, PL_READY_EPOCH)) return v;
  if (look) {
    *st = PL_LEAN_NOT_YET;
    return 0;
  }
  pl_lean_got_t g = pl_lean_wait(p, f1, wt);
  if (g.st) {
    *st = g.st;
    pl_lean_fail(sh, g.st, s, "the call's header");
  }
  return g.data;
}

/* The V counts of every rank's header, every thread a share of the pairs, as pl_snac_hdr_check
 * (which words, which pairs; the verdict's text comes from that function on the failure path):
 * AGV, RSV: every rank's recvcounts equal mine, AGV: rank s's sendcount is recvcounts[s];
 * A2AV: what s sends d is what d receives from s, for every pair (not only mine: every rank must
 * reach the same verdict). look: one thread, no waits: the pairs whose words have come (the tiny
 * kernel's polls, pl_tiny_check). */
static __device__ __noinline__ void pl_lean_vcheck(const pl_snac_t *X, pl_lean_sh_t *sh, int w,
                                                   int r, uint64_t par, uint64_t f1,
                                                   pl_wait_t wt, int look) {
  const int coll = sh->c.coll, a2av = coll == PL_COLL_ALL_TO_ALL_V;
  const uint32_t uw = (uint32_t)w, n = uw * uw + (coll == PL_COLL_ALL_GATHER_V ? uw : 0);
  for (uint32_t k = look ? 0 : threadIdx.x; k < n && !sh->stop; k += look ? 1 : blockDim.x) {
    int st = 0, s, i;
    uint64_t a, b;
    if (k < uw * uw) {
      s = (int)(k / uw);
      i = (int)(k - (uint32_t)s * uw);
      a = pl_lean_hword(X, sh, w, r, par, s, PL_HDR_FIXED + i, f1, wt, &st, look);
      b = a2av ? pl_lean_hword(X, sh, w, r, par, i, PL_HDR_FIXED + 2 * w + s, f1, wt, &st, look)
               : sh->c.rcounts[i];
    } else {
      s = (int)(k - uw * uw);
      a = pl_lean_hword(X, sh, w, r, par, s, 1, f1, wt, &st, look);
      b = sh->c.rcounts[s];
    }
    if (st == PL_LEAN_NOT_YET) continue; /* look: not there yet */
    if (st) return;
    if (a != b) pl_lean_mis(sh);
  }
}

/* CTA 0's thread 0, on MISMATCH: every rank's whole header (mine as I pushed it: no zero copy)
 * into the arguments' header buffer (lane 0's slot), then SNAC's own check names the field, so
 * every rank of either kernel reports the same verdict. Returns MISMATCH, or why a header did not
 * come. */
static __device__ __noinline__ int pl_lean_verdict(const pl_cuda_args_t *args, pl_lean_sh_t *sh,
                                                   uint64_t epoch) {
  pl_snac_t *x = &sh->x;
  const int w = x->c.world, r = x->c.rank;
  const uint64_t hw = pl_hdr_words(w), par = epoch & 1, f1 = epoch * PL_EPOCH_STRIDE + 1;
  x->hdr = args->hdr;
  x->zc_send = x->zc_recv = 0;
  x->sym_send[0] = x->sym_send[1] = x->sym_recv[0] = x->sym_recv[1] = 0;
  pl_snac_hdr_build(x, pl_snac_hdr(x, r));
  pl_ctrl_t *me = (pl_ctrl_t *)x->ws[r];
  pl_wait_t wt = {&me->abort, &me->err_epoch, epoch + 1, NULL, args->timeout_ns, 0,
                  args->backoff_ns};
  for (int s = 0; s < w; s++)
    for (uint64_t q = 0; s != r && q < hw; q++) {
      const pl_pkt_t *p = (const pl_pkt_t *)(x->ws[r] + x->geom.pkt_off +
                                             (par * (uint64_t)w + (uint64_t)s) * x->geom.pkt_win);
      int st = pl_wait_pkt(p + q, f1, PL_READY_EPOCH, &wt, &pl_snac_hdr(x, s)[q]);
      if (st) {
        sh->err_peer = st == PURLIN_ERR_TIMEOUT ? s : -1;
        sh->err_what = "the call's header";
        return st;
      }
    }
  if (!pl_snac_hdr_check(x)) pl_snac_mis(x, "header", -1, 0, 0, 0, 0); /* not reached */
  return PURLIN_ERR_MISMATCH;
}

/* Thread 0 of a failed CTA: the call as pl_dev_report_x reads it, the verdict, the report. */
static __device__ __noinline__ void pl_lean_report(const pl_cuda_args_t *args, pl_lean_sh_t *sh,
                                                   int st, uint64_t epoch) {
  const uint64_t *s = (const uint64_t *)&args->x;
  uint64_t *d = (uint64_t *)&sh->x;
  for (unsigned i = 0; i < sizeof(pl_snac_t) / 8; i++) d[i] = s[i];
  sh->x.epoch = epoch;
  sh->x.lane = (int)blockIdx.x;
  if (pl_coll_is_v(sh->x.c.coll)) sh->x.c = sh->c; /* the V counts' pointers set */
  /* every CTA stops; CTA 0 (lane 0) records the verdict */
  if (st == PURLIN_ERR_MISMATCH && blockIdx.x == 0) st = pl_lean_verdict(args, sh, epoch);
  pl_dev_report_x(args, &sh->x, sh->err_peer, sh->err_what, st);
}

/* Peer d's blocks of a ReduceScatter(V) (reduce) or of a gather collective: my block for d (osrc,
 * ob bytes) and where d's block for me lands (idst, ib), as layout.h places them. */
PL_DEV void pl_lean_peer_blocks(pl_lean_sh_t *sh, const pl_snac_t *X, const pl_call_t *c, int d,
                                int reduce) {
  if (reduce) {
    sh->osrc[d] = X->send + pl_shard_in_off(c, d);
    sh->ob[d] = pl_shard_bytes(c, d);
    sh->idst[d] = X->recv + pl_shard_out_off(c, d);
    sh->ib[d] = pl_shard_bytes(c, d);
  } else {
    sh->osrc[d] = X->send + pl_gather_send_off(c, d);
    sh->ob[d] = pl_gather_bytes_send(c, d);
    sh->idst[d] = X->recv + pl_gather_recv_off(c, d);
    sh->ib[d] = pl_gather_bytes_recv(c, d);
  }
}

/* Thread 0 of every CTA, after the CTA's barrier: the call's status (a failure reported), the
 * profile (prof_t: PURLIN_PROFILE's stamps, or NULL), and the last CTA to end advances the device
 * epoch. */
PL_DEV void pl_lean_end(const pl_cuda_args_t *args, pl_lean_sh_t *sh, uint64_t epoch,
                        const uint64_t *prof_t) {
  int st = sh->aborted ? PURLIN_ERR_REMOTE : sh->err ? sh->err : sh->mis ? PURLIN_ERR_MISMATCH : 0;
  if (sh->mis && (!sh->err || sh->err == PL_CUDA_STOP_SIBLING)) st = PURLIN_ERR_MISMATCH;
  if (st) pl_lean_report(args, sh, st, epoch);
  if (prof_t && !st && !sh->aborted) /* SNAC's phases */
    pl_dev_prof_add(args->state, prof_t, pl_lean_prof_data);
  if (gridDim.x == 1) {
    *(volatile uint64_t *)&args->state->epoch = epoch + 1;
  } else {
    __threadfence();
    if (atomicAdd(&args->state->exit_count, 1u) == gridDim.x - 1) {
      args->state->exit_count = 0;
      *(volatile uint64_t *)&args->state->epoch = epoch + 1;
    }
  }
}

/* DT: the reduction's dtype (AllReduce, ReduceScatter(V)), -1 for the gathers (AllGather(V),
 * AllToAll(V)); V: a V collective (its counts from the arguments' copies, every header word, the
 * V checks), compiled out of the others; OP: the reduction's op as a constant (SUM), -1: the
 * call's (a runtime op puts a switch per element into the reduction's code). */
template <int DT, int V, int OP>
__global__ void __launch_bounds__(PL_LEAN_THREADS, 1)
    pl_lean_kernel(const __grid_constant__ pl_cuda_args_t args) {
  __shared__ pl_lean_sh_t sh;
  __shared__ uint64_t prof_t[PL_PROF_N];
  const int prof = args.prof && blockIdx.x == 0 && threadIdx.x == 0; /* PURLIN_PROFILE */
  const pl_snac_t *X = &args.x;
  const pl_call_t *c = V ? &sh.c : &X->c; /* sh.c: set by thread 0 below, read after the barrier */
  const int w = X->c.world, r = X->c.rank, coll = X->c.coll, tid = threadIdx.x;
  const int ar = DT >= 0 && coll == PL_COLL_ALL_REDUCE, two = ar && X->plan.ar_twoshot;
  const uint64_t hw = pl_hdr_words(w), nt = blockDim.x;
  /* prologue: the wait for the stream's previous kernel (programmatic dependent launch: this
   * kernel may have started before it ended), the epoch and the abort word (two warps,
   * overlapped), the per-peer numbers (docs/tuning.md, finding 15: computing them before the
   * wait went with slower gathers, cause not isolated) */
  if (args.pdl & PL_PDL_WAIT) pl_grid_dep_wait(); /* every thread: no global access before it */
  if (prof) {
    pl_lean_prof_data = 0;
    prof_t[0] = pl_globaltimer();
  }
  if (tid == 0) {
    sh.epoch = *(volatile uint64_t *)&args.state->epoch;
    sh.stop = 0;
    sh.err = 0;
    sh.err_peer = -1;
    sh.err_what = NULL;
    sh.mis = 0;
    sh.omax = sh.imax = 0;
    if (V) { /* the host's copies are in the arguments (x.c's pointers there are NULL) */
      sh.mixsum = 0;
      sh.c = X->c;
      sh.c.scounts = sh.v[0];
      sh.c.sdispls = sh.v[1];
      sh.c.rcounts = sh.v[2];
      sh.c.rdispls = sh.v[3];
    }
  }
  if (V && tid < w)
    for (int k = 0; k < 4; k++) sh.v[k][tid] = args.v[k][tid];
  if (tid == (nt > 32 ? 32 : 0))
    sh.aborted = pl_ld_acquire_sys(&((const pl_ctrl_t *)X->ws[r])->abort) != 0;
  __syncthreads();
  if (tid < w) {
    int d = tid;
    sh.ws[d] = X->ws[d];
    if (ar) { /* layout.h's shards from the host's shard size: no division here */
      const uint64_t n = c->count, es = c->esize;
      const uint64_t b0 = pl_ar_shard_at(args.ar_per, n, d);
      const uint64_t b1 = pl_ar_shard_at(args.ar_per, n, d + 1);
      int one = X->plan.ar_oneshot;
      sh.osrc[d] = X->send + (one ? 0 : b0 * es);
      sh.ob[d] = one ? n * es : (b1 - b0) * es;
      sh.idst[d] = X->recv + b0 * es; /* two-shot's tail */
      sh.ib[d] = (b1 - b0) * es;
    } else {
      pl_lean_peer_blocks(&sh, X, c, d, DT >= 0); /* ReduceScatter(V), the gathers */
    }
    uint64_t p0, p1;
    pl_lean_part(sh.ob[d], &p0, &p1);
    sh.op0[d] = (uint32_t)p0;
    sh.on[d] = (uint32_t)(p1 - p0);
    if (d != r) atomicMax(&sh.omax, (unsigned)(p1 - p0));
    pl_lean_part(sh.ib[d], &p0, &p1);
    sh.ip0[d] = (uint32_t)p0;
    sh.in[d] = (uint32_t)(p1 - p0);
    if (d != r) atomicMax(&sh.imax, (unsigned)(p1 - p0));
  }
  __syncthreads();
  if (prof) prof_t[1] = pl_globaltimer();
  const uint64_t epoch = sh.epoch, par = epoch & 1;
  const uint64_t f1 = epoch * PL_EPOCH_STRIDE + 1, f2 = f1 + 1;
  pl_ctrl_t *me = (pl_ctrl_t *)sh.ws[r];
  const uint64_t myh0 = pl_hdr_word0(c, X->in_place ? PL_HDR_INPLACE : 0);
  pl_wait_t wd = {&me->abort, &me->err_epoch, epoch + 1, (const volatile int *)&sh.stop,
                  args.timeout_ns, 0, args.backoff_ns};
  pl_wait_t wh = wd;
  wh.group = NULL; /* a header wait ends only with its header (or abort, deadline): the verdict
                      needs every rank's */
  if (!sh.aborted) {
    /* notify: CTA 0 pushes the header (SNAC's words: 0, count, world; zero copy never), every
     * CTA its part of every data block */
    if (blockIdx.x == 0)
      for (uint32_t k = tid; k < (uint32_t)((w - 1) * hw); k += nt) {
        uint32_t j = k / (uint32_t)hw, q = k - j * (uint32_t)hw;
        int d = r + 1 + (int)j;
        d = d >= w ? d - w : d;
        pl_st_pkt(PL_LEAN_WIN(&sh, d, r) + q, pl_lean_hdr_word<V>(c, myh0, w, q), f1);
      }
    pl_lean_push(X, &sh, w, r, par, hw, f1);
    if (DT < 0) { /* my own block, this CTA's part (never past my recv block: pl_snac_self) */
      uint64_t p0, p1, b = sh.ob[r] < sh.ib[r] ? sh.ob[r] : sh.ib[r];
      pl_lean_part(b, &p0, &p1);
      uint64_t lo = 8 * p0, hi = 8 * p1 < b ? 8 * p1 : b;
      if (hi > lo && sh.osrc[r] != sh.idst[r]) pl_lean_copy(sh.idst[r] + lo, sh.osrc[r] + lo, hi - lo);
    }
    __syncthreads(); /* in place: this CTA's reads of its input are done before it overwrites */
    if (tid == 0 && (args.pdl & PL_PDL_RELEASE)) /* this CTA's packets are out: the stream's */
      pl_grid_dep_launch(); /* next kernel may start its prologue (it waits for our end) */
    if (prof) prof_t[2] = pl_globaltimer();
    /* agree: threads 0..world-1 take every rank's header first; a difference stops the data
     * waits (a peer that disagrees may never send what this rank awaits) */
    if (tid < w) {
      uint64_t a = myh0, n = c->count;
      int st = 0;
      if (tid != r) {
        const pl_pkt_t *q = PL_LEAN_WIN(&sh, r, tid);
        uint64_t fa, fn;
        pl_ld_pkt(q, &a, &fa);
        pl_ld_pkt(q + 1, &n, &fn);
        if (!pl_ready(fa, f1, PL_READY_EPOCH)) {
          pl_lean_got_t g = pl_lean_wait(q, f1, wh);
          st = g.st;
          a = g.data;
        }
        if (!st && !pl_ready(fn, f1, PL_READY_EPOCH)) {
          pl_lean_got_t g = pl_lean_wait(q + 1, f1, wh);
          st = g.st;
          n = g.data;
        }
      }
      if (st) pl_lean_fail(&sh, st, tid, "the call's header");
      else if (pl_lean_hdr_differs(a, n, myh0, c->count, V)) pl_lean_mis(&sh);
      else if (V && blockIdx.x == 0 && tid != r && (a >> 48 & (PL_HDR_ZC_SEND | PL_HDR_ZC_RECV)))
        pl_lean_zc_done(X, &sh, tid, r, f1);
      if (V && c->coll == PL_COLL_ALL_TO_ALL_V && !st) pl_lean_mix(&sh, a, (unsigned)w);
    }
    if (V) pl_lean_vcheck(X, &sh, w, r, par, f1, wh, 0); /* the V counts, as SNAC's check */
    if (prof) prof_t[3] = pl_globaltimer(); /* thread 0: rank 0's header taken */
    /* consume */
    if constexpr (DT < 0) {
      pl_lean_recv(X, &sh, w, r, par, hw, f1, &wd, "packets");
    } else {
      /* what I reduce is what I send myself (osrc/ob of the prologue): the whole vector
       * (one-shot) or my shard; it lands at my shard's place (RS: 0), one-shot's at 0 */
      char *dst = ar && X->plan.ar_oneshot ? X->recv : sh.idst[r];
      pl_lean_reduce<DT, OP>(X, &sh, w, r, par, sh.osrc[r], dst, sh.ob[r], hw, f1, two,
                             hw + X->plan.ar_region2, f2, &wd, prof);
      if (two)
        pl_lean_recv(X, &sh, w, r, par, hw + X->plan.ar_region2, f2, &wd,
                     "reduced shard packets");
    }
  }
  __syncthreads();
  if (prof) prof_t[4] = pl_globaltimer();
  if (tid == 0) pl_lean_end(&args, &sh, epoch, prof ? prof_t : NULL);
}

/* ---- the tiny kernel ------------------------------------------------------------------------
 * The small calls of the fixed collectives (one-shot and two-shot AllReduce, ReduceScatter,
 * AllGather, AllToAll, every block at most tune.tiny_max bytes): the lean kernel's wire format
 * (header packets [0, hw), data packets from hw, two-shot's region 2 at hw + plan.ar_region2,
 * flags f1 and f2), with an executed path of a few KB. A small call's cost above the ideal
 * datapath is mostly code run cold (docs/tuning.md, finding 23: ~0.18 us per KB executed), so this
 * kernel keeps only what such a call needs: no per-peer tables (block k of a call is at k * stride,
 * its bytes from one formula, pl_tiny_bytes), no 64-bit divisions, no header phase: the data
 * flags carry the call's signature (pl_tiny_sig), and a peer that disagrees is found by the polls'
 * slow path (pl_tiny_check), and each thread pushes, then consumes, the same words [lo, hi) of its
 * CTA's part of every block, so that in place it reads every word before it overwrites it without
 * a barrier. The reduction is acc.cuh's, in ascending rank order: the lean kernel's bits. The idea
 * of a minimal one-shot / two-shot kernel follows TensorRT-LLM's and vLLM's custom all-reduce; the
 * code is purlin's. */

/* A call's blocks: block k (k < world) holds bytes [k bstr, k bstr + bcap) of a tb-byte whole,
 * clipped to it. The fixed collectives' blocks are all b bytes (tb = world b, bstr = bcap = b);
 * two-shot's are the shards (tb: the vector, bstr = bcap = ar_per elements), the last ones shorter
 * or empty. */
typedef struct {
  uint64_t tb, bstr, bcap;
} pl_tiny_geo_t;
PL_DEV uint64_t pl_tiny_bytes(pl_tiny_geo_t g, int k) {
  const uint64_t o = (uint64_t)k * g.bstr;
  return o >= g.tb ? 0 : g.tb - o < g.bcap ? g.tb - o : g.bcap;
}

/* The call's signature in the tiny kernels' data flags (flag ^ sig; the V kernel's is made from it
 * by pl_tinyv_args): the fields of header word 0 that every rank must share
 * (PL_LEAN_HDR_SHARED, pl_lean_hdr_differs' mask) and the count, mixed (splitmix64's
 * finalizer), the top bit set (a flag of the lean and SNAC kernels, and 0, never has it). A peer
 * whose call differs writes packets that never look ready here (and reads none of mine as
 * ready): its waits end in the polls' slow path, which compares the headers (pl_tiny_check), so
 * the data carry the verdict and no thread awaits a header after them. Every rank receives from
 * every peer in these collectives, so every rank checks every peer's call. */
PL_HD uint64_t pl_tiny_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
PL_HD uint64_t pl_tiny_sig(uint64_t h0, uint64_t count) {
  return pl_tiny_mix((h0 & PL_LEAN_HDR_SHARED) ^ (count * 0x9e3779b97f4a7c15ull)) | 1ull << 63;
}

static __device__ __noinline__ pl_lean_chk_t pl_tiny_check(pl_wait_t wt, uint64_t deadline,
                                                           const pl_snac_t *X, pl_lean_sh_t *sh) {
  pl_lean_chk_t c = pl_lean_check(wt, deadline);
  if (c.st) return c;
  const int w = X->c.world, r = X->c.rank, v = pl_coll_is_v(X->c.coll);
  const uint64_t par = sh->epoch & 1, f1 = sh->epoch * PL_EPOCH_STRIDE + 1;
  const uint64_t myh0 = pl_hdr_word0(&X->c, X->in_place ? PL_HDR_INPLACE : 0);
  unsigned mix = 0; /* AllToAllV: the mix of the headers come so far (pl_lean_mix) */
  for (int s = 0; s < w; s++) {
    if (s == r) continue;
    const pl_pkt_t *q = PL_LEAN_WIN(sh, r, s);
    uint64_t a, fa, n, fn;
    pl_ld_pkt(q, &a, &fa);
    pl_ld_pkt(q + 1, &n, &fn);
    if (pl_ready(fa, f1, PL_READY_EPOCH)) mix |= pl_hdr_mixbits(a);
    if ((pl_ready(fa, f1, PL_READY_EPOCH) && pl_ready(fn, f1, PL_READY_EPOCH) &&
         pl_lean_hdr_differs(a, n, myh0, X->c.count, v)) ||
        (mix == 3u && X->c.coll == PL_COLL_ALL_TO_ALL_V)) {
      pl_lean_mis(sh); /* stops every wait of this CTA; CTA 0 names the field at its end */
      break;
    }
  }
  /* the V counts that have come (w^2 pairs: one thread of the CTA at a time) */
  if (v && !sh->mis && atomicCAS(&sh->vlook, 0, 1) == 0) {
    pl_lean_vcheck(X, sh, w, r, par, f1, wt, 1);
    atomicExch(&sh->vlook, 0);
  }
  if (sh->mis) c.st = PL_WAIT_GROUP;
  return c;
}

/* Word i of my block for every peer d (at send + d * sstr), as a packet at base + 16 i of my window
 * at d: a word at an unaligned address or at a block's end (the cold path, out of line). */
static __device__ __noinline__ void pl_tiny_push_slow(const pl_snac_t *X, pl_lean_sh_t *sh, int w,
                                                      int r, pl_tiny_geo_t g, uint64_t sstr,
                                                      uint64_t base, uint64_t flag, uint32_t i) {
  for (int j = 1; j < w; j++) {
    const int d = r + j < w ? r + j : r + j - w;
    const uint64_t bd = pl_tiny_bytes(g, d);
    if (8 * (uint64_t)i < bd)
      pl_st_pkt(sh->ws[d] + base + 16 * (uint64_t)i,
                pl_pkt_pack(X->send + (uint64_t)d * sstr, bd, i), flag);
  }
}

/* Push words [lo, hi) of my block for every peer. fast: every block's word i whole and aligned
 * (al: the buffers and strides are 8-byte aligned; bmin: the smallest block's bytes), one test per
 * word, not one per packet; every load in flight before the first store. */
PL_DEV void pl_tiny_push(const pl_snac_t *X, pl_lean_sh_t *sh, int w, int r, pl_tiny_geo_t g,
                         uint64_t sstr, uint64_t base, uint64_t flag, uint32_t lo, uint32_t hi,
                         int al, uint64_t bmin) {
  for (uint32_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    if (!al || 8 * (uint64_t)i + 8 > bmin) {
      pl_tiny_push_slow(X, sh, w, r, g, sstr, base, flag, i);
      continue;
    }
    for (int j0 = 1; j0 < w; j0 += 8) {
      uint64_t v[8];
#pragma unroll
      for (int u = 0; u < 8; u++) {
        const int d = r + j0 + u < w ? r + j0 + u : r + j0 + u - w;
        if (j0 + u < w) v[u] = *(const uint64_t *)(X->send + (uint64_t)d * sstr + 8 * (uint64_t)i);
      }
#pragma unroll
      for (int u = 0; u < 8; u++) {
        const int d = r + j0 + u < w ? r + j0 + u : r + j0 + u - w;
        if (j0 + u < w) pl_st_pkt(sh->ws[d] + base + 16 * (uint64_t)i, v[u], flag);
      }
    }
  }
}

/* The tiny kernels' batch of polls, in the enclosing function: packet i of sources s0..s0+7
 * (source s's window at mywin + s * win) for which HAVE (an expression of s) holds, every load in
 * flight at once, then polled until each carries flag (equality: the tiny kernels' flags). Declares
 * dv (the data) and got (a bit per source loaded); a failed wait returns from the enclosing
 * function with the last argument (empty in a void one). */
#define PL_TINY_POLL8_(mywin, win, i, s0, flag, wt, sh, HAVE, ...)                                 \
  uint64_t dv[8], fv[8];                                                                           \
  const pl_pkt_t *q[8];                                                                            \
  int sv[8];                                                                                       \
  uint32_t pend = 0;                                                                               \
  _Pragma("unroll") for (int u = 0; u < 8; u++) {                                                  \
    const int s = (s0) + u;                                                                        \
    sv[u] = s;                                                                                     \
    q[u] = (const pl_pkt_t *)((mywin) + (uint64_t)s * (win)) + (i);                                \
    if (HAVE) {                                                                                    \
      pl_ld_pkt(q[u], &dv[u], &fv[u]);                                                             \
      pend |= 1u << u;                                                                             \
    }                                                                                              \
  }                                                                                                \
  const uint32_t got = pend;                                                                       \
  _Pragma("unroll") for (int u = 0; u < 8; u++) if ((pend >> u & 1u) && fv[u] == (flag))          \
      pend &= ~(1u << u);                                                                          \
  PL_LEAN_POLL_(8, pend, q, dv, fv, sv, flag, wt, sh, "packets", 1, __VA_ARGS__)

/* Word i of every source's block, from packet i at mywin + s * win (source s's window here).
 * RED: reduce them with my own block's (own, br bytes; sources in rank order) into dst, and with
 * push2 push the result to every peer (two-shot: packet i at base2 + 16 i of my window there,
 * flag2). Else: unpack source s's to dst + s * rstr, and my own (own, unless NULL) to
 * dst + r * rstr. FAST: the word is whole and aligned in every block (else each block's bytes
 * decide, pl_tiny_bytes). 0 when a wait failed (recorded). */
template <int DT, int OP, int RED, int FAST>
PL_DEV int pl_tiny_word(const pl_snac_t *X, pl_lean_sh_t *sh, int w, int r, uint32_t i,
                        const char *mywin, pl_tiny_geo_t g, uint64_t br, const char *own,
                        char *dst, uint64_t rstr, uint64_t flag, int push2, uint64_t base2,
                        uint64_t flag2, const pl_wait_t *wt) {
  const int op = OP >= 0 ? OP : X->c.op;
  const uint64_t win = X->geom.pkt_win, o = 8 * (uint64_t)i;
  uint64_t mine = 0;
  if (RED || own) mine = FAST ? *(const uint64_t *)(own + o) : pl_pkt_pack(own, br, i);
  pl_lacc_t acc;
  for (int s0 = 0; s0 < w; s0 += 8) {
    PL_TINY_POLL8_(mywin, win, i, s0, flag, wt, sh,
                   s < w && s != r && (RED || FAST || o < pl_tiny_bytes(g, s)), 0);
#pragma unroll
    for (int u = 0; u < 8; u++) {
      const int s = s0 + u;
      if (s >= w) break;
      if constexpr (RED) {
        pl_lacc_put<DT>(&acc, s == r ? mine : dv[u], op, s == 0);
      } else if (got >> u & 1u) {
        char *d = dst + (uint64_t)s * rstr;
        if (FAST) *(uint64_t *)(d + o) = dv[u];
        else pl_pkt_unpack(d, pl_tiny_bytes(g, s), i, dv[u]);
      }
    }
  }
  if constexpr (RED) {
    const uint64_t out = pl_lacc_get<DT>(&acc, op, w);
    if (FAST) *(uint64_t *)(dst + o) = out;
    else pl_pkt_unpack(dst, br, i, out);
    if (push2)
      for (int j = 1; j < w; j++) {
        const int d = r + j < w ? r + j : r + j - w;
        pl_st_pkt(sh->ws[d] + base2 + 16 * (uint64_t)i, out, flag2);
      }
  } else {
    char *at = dst + (uint64_t)r * rstr;
    if (own && own != at && (FAST || o < br)) {
      if (FAST) *(uint64_t *)(at + o) = mine;
      else pl_pkt_unpack(at, br, i, mine);
    }
  }
  return 1;
}
/* The same for a word that is not whole and aligned everywhere: out of line (cold). */
template <int DT, int OP, int RED>
static __device__ __noinline__ int pl_tiny_word_slow(const pl_snac_t *X, pl_lean_sh_t *sh, int w,
                                                     int r, uint32_t i, const char *mywin,
                                                     pl_tiny_geo_t g, uint64_t br, const char *own,
                                                     char *dst, uint64_t rstr, uint64_t flag,
                                                     int push2, uint64_t base2, uint64_t flag2,
                                                     pl_wait_t wt) {
  /* (the wait by value: a pointer would keep the caller's in local memory) */
  return pl_tiny_word<DT, OP, RED, 0>(X, sh, w, r, i, mywin, g, br, own, dst, rstr, flag, push2,
                                      base2, flag2, &wt);
}

/* Consume words [lo, hi) of every source's block, from packets at base + i of its window here
 * (pl_tiny_word; al: the buffers and strides are 8-byte aligned). */
template <int DT, int OP, int RED>
PL_DEV void pl_tiny_consume(const pl_snac_t *X, pl_lean_sh_t *sh, int w, int r, uint64_t par,
                            uint32_t lo, uint32_t hi, pl_tiny_geo_t g, const char *own, char *dst,
                            uint64_t rstr, uint64_t base, uint64_t flag, int push2,
                            uint64_t base2, uint64_t flag2, const pl_wait_t *wt, int al) {
  const uint64_t br = pl_tiny_bytes(g, r), bmin = RED ? br : pl_tiny_bytes(g, w - 1);
  const char *mywin =
      sh->ws[r] + X->geom.pkt_off + par * (uint64_t)w * X->geom.pkt_win + base * 16;
  for (uint32_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    int ok;
    if (al && 8 * (uint64_t)i + 8 <= bmin)
      ok = pl_tiny_word<DT, OP, RED, 1>(X, sh, w, r, i, mywin, g, br, own, dst, rstr, flag, push2,
                                        base2, flag2, wt);
    else if (RED && 8 * (uint64_t)i >= br)
      continue; /* past my shard (two-shot) */
    else
      ok = pl_tiny_word_slow<DT, OP, RED>(X, sh, w, r, i, mywin, g, br, own, dst, rstr, flag,
                                          push2, base2, flag2, *wt);
    if (!ok) return;
  }
}

/* The tiny kernels' prologue, before their first barrier: thread 0 the epoch and the CTA's state
 * (V: the call, its count pointers into the copies), one thread of warp 1 the abort word, threads
 * 0..world-1 the workspaces (V: and the host's copies of the counts, from the arguments). */
template <int V>
PL_DEV void pl_tiny_begin(const pl_cuda_args_t *args, pl_lean_sh_t *sh) {
  const pl_snac_t *X = &args->x;
  const int w = X->c.world, r = X->c.rank, tid = threadIdx.x;
  if (args->pdl & PL_PDL_WAIT) pl_grid_dep_wait(); /* every thread: no global access before it */
  if (tid == 0) {
    sh->epoch = *(volatile uint64_t *)&args->state->epoch;
    sh->stop = 0;
    sh->err = 0;
    sh->err_peer = -1;
    sh->err_what = NULL;
    sh->mis = 0;
    sh->omax = sh->imax = 0;
    sh->vlook = 0;
    if (V) {
      sh->mixsum = 0;
      sh->c = X->c;
      sh->c.scounts = sh->v[0];
      sh->c.sdispls = sh->v[1];
      sh->c.rcounts = sh->v[2];
      sh->c.rdispls = sh->v[3];
    }
  }
  if (tid == (blockDim.x > 32 ? 32 : 0))
    sh->aborted = pl_ld_acquire_sys(&((const pl_ctrl_t *)X->ws[r])->abort) != 0;
  if (tid < w) {
    sh->ws[tid] = X->ws[tid];
    if (V)
      for (int k = 0; k < 4; k++) sh->v[k][tid] = args->v[k][tid];
  }
}

/* Word q of my header in the tiny V kernel of collective COLL: pl_lean_hdr_word's (SNAC's
 * pl_hdr_vword for the V counts) with the collective a constant, from the shared copies of the
 * counts. */
template <int COLL>
PL_DEV uint64_t pl_tinyv_hword(const pl_lean_sh_t *sh, uint64_t h0, uint64_t count, int w,
                               uint32_t q) {
  if (q < PL_HDR_FIXED) return q == 0 ? h0 : q == 1 ? count : q == 6 ? (uint64_t)w : 0;
  const uint32_t i = q - PL_HDR_FIXED, uw = (uint32_t)w, k = i >= 2 * uw ? 2 : i >= uw ? 1 : 0;
  const uint32_t d = i - k * uw;
  if (COLL == PL_COLL_ALL_TO_ALL_V) return sh->v[k][d]; /* scounts, sdispls, rcounts */
  if (COLL == PL_COLL_REDUCE_SCATTER_V && k == 1) return sh->v[1][d]; /* sdispls */
  return k == 0 ? sh->v[2][d] : 0;                                     /* recvcounts */
}

/* CTA 0 of a tiny kernel: every word of my header (a verdict reads them all; V: the counts too) to
 * every peer, as packet q of my window there (mine: that window's offset in a workspace). COLL: the
 * V collective (pl_tinyv_hword), -1 for the fixed ones. */
template <int COLL>
PL_DEV void pl_tiny_hdr_push(const pl_call_t *c, pl_lean_sh_t *sh, int w, int r, uint64_t mine,
                             uint64_t hw, uint64_t myh0, uint64_t f1) {
  for (uint32_t q = threadIdx.x; q < (uint32_t)hw; q += blockDim.x) {
    const uint64_t v = COLL < 0 ? pl_lean_hdr_word<0>(c, myh0, w, q)
                                : pl_tinyv_hword<COLL>(sh, myh0, c->count, w, q);
#pragma unroll 1 /* one warp of one CTA runs it: code size, not issue, is its cost */
    for (int j = 1; j < w; j++) {
      const int d = r + j < w ? r + j : r + j - w;
      pl_st_pkt(sh->ws[d] + mine + 16 * (uint64_t)q, v, f1);
    }
  }
}

/* DT: the reduction's dtype (AllReduce, ReduceScatter), -1 for AllGather and AllToAll; OP: the op
 * as a constant (SUM), -1: the call's; TWO: two-shot AllReduce (its own instantiations: with
 * one-shot's, its code made one-shot's 8 KiB call 0.9 us slower, finding 26). */
template <int DT, int OP, int TWO>
__global__ void __launch_bounds__(PL_LEAN_THREADS, 1)
    pl_tiny_kernel(const __grid_constant__ pl_cuda_args_t args) {
  __shared__ pl_lean_sh_t sh;
  const pl_snac_t *X = &args.x;
  const int w = X->c.world, r = X->c.rank, tid = threadIdx.x;
  pl_tiny_begin<0>(&args, &sh);
  /* my block for peer d at send + d * sstr (one-shot AllReduce, AllGather: the same for all),
   * source s's lands at recv + s * rstr (one-shot AllReduce, ReduceScatter: mine, at recv) */
  const int coll = X->c.coll;
  const uint64_t b = X->c.count * X->c.esize, hw = pl_hdr_words(w);
  pl_tiny_geo_t g;
  uint64_t sstr, rstr;
  if (TWO) { /* (instantiated for the reductions only) */
    g.tb = b;
    g.bstr = g.bcap = sstr = rstr = args.ar_per * X->c.esize;
  } else {
    g.tb = (uint64_t)w * b;
    g.bstr = g.bcap = b;
    sstr = coll == PL_COLL_ALL_TO_ALL || coll == PL_COLL_REDUCE_SCATTER ? b : 0;
    rstr = coll == PL_COLL_ALL_TO_ALL || coll == PL_COLL_ALL_GATHER ? b : 0;
  }
  /* this CTA's words [lo, hi) of every block (32-bit: PL_TINY_MAX_BYTES keeps words * grid below
   * 2^32); block 0 is the largest */
  const uint32_t n = (uint32_t)((pl_tiny_bytes(g, 0) + 7) / 8);
  const uint32_t lo = n * blockIdx.x / gridDim.x, hi = n * (blockIdx.x + 1) / gridDim.x;
  const int al = !(((uintptr_t)X->send | (uintptr_t)X->recv | sstr | rstr) & 7);
  const uint64_t myh0 = pl_hdr_word0(&X->c, X->in_place ? PL_HDR_INPLACE : 0);
  __syncthreads();
  const uint64_t epoch = sh.epoch, par = epoch & 1, f1 = epoch * PL_EPOCH_STRIDE + 1;
  const uint64_t mine = X->geom.pkt_off + (par * (uint64_t)w + (uint64_t)r) * X->geom.pkt_win;
  pl_ctrl_t *me = (pl_ctrl_t *)sh.ws[r];
  pl_wait_t wd = {&me->abort, &me->err_epoch, epoch + 1, (const volatile int *)&sh.stop,
                  args.timeout_ns, 0, args.backoff_ns};
  if (!sh.aborted) {
    /* notify: CTA 0 the header (SNAC's words 0, count and world, the rest 0: every rank's whole
     * header is what a verdict reads), every CTA its words of my block for every peer */
    if (blockIdx.x == 0) pl_tiny_hdr_push<-1>(&X->c, &sh, w, r, mine, hw, myh0, f1);
    const uint64_t sig = pl_tiny_sig(myh0, X->c.count), fs = f1 ^ sig, f2s = (f1 + 1) ^ sig;
    pl_tiny_push(X, &sh, w, r, g, sstr, mine + hw * 16, fs, lo, hi, al, pl_tiny_bytes(g, w - 1));
    if (tid == 0 && (args.pdl & PL_PDL_RELEASE)) /* one CTA: its packets are out (no barrier: */
      pl_grid_dep_launch(); /* the dependents wait for this kernel's end before any access) */
    /* consume: the gathers' blocks; a reduction's (two-shot: then the reduced shards); no header
     * phase: the flags carry the call's signature (pl_tiny_sig) */
    const char *own = X->send + (uint64_t)r * sstr;
    if constexpr (DT < 0) {
      pl_tiny_consume<DT, OP, 0>(X, &sh, w, r, par, lo, hi, g, own, X->recv, rstr, hw, fs, 0, 0, 0,
                                 &wd, al);
    } else {
      const uint64_t r2 = hw + X->plan.ar_region2;
      pl_tiny_consume<DT, OP, 1>(X, &sh, w, r, par, lo, hi, g, own, X->recv + (uint64_t)r * rstr,
                                 0, hw, fs, TWO, mine + r2 * 16, f2s, &wd, al);
      if constexpr (TWO)
        pl_tiny_consume<DT, OP, 0>(X, &sh, w, r, par, lo, hi, g, NULL, X->recv, rstr, r2, f2s, 0,
                                   0, 0, &wd, al);
    }
  }
  __syncthreads();
  if (tid == 0) pl_lean_end(&args, &sh, epoch, NULL);
}

/* ---- the tiny V kernel ----------------------------------------------------------------------
 * The V collectives' small calls (AllGatherV, ReduceScatterV, AllToAllV: the calls the lean kernel
 * takes, with blocks of at most tune.tiny_max bytes) in the fixed tiny kernel's shape: one barrier
 * (the prologue's), no per-peer tables (every thread reads peer d's count and displacement from the
 * arguments as it reaches d: the same d for every thread of the CTA, a broadcast), the CTAs split
 * the words of the call's largest block (args.tv_words, the host's), and each thread pushes, then
 * consumes, the same words of every block, so that in place it reads every word before it
 * overwrites it (in-place AllToAllV has equal send and receive blocks; AllGatherV's and
 * ReduceScatterV's own block is never a peer's). The agreement (docs/gpu.md, "The tiny kernel"):
 * - AllGatherV and ReduceScatterV whose every count is non-zero: the data flags carry the call's
 *   signature, recvcounts included (args.tv_sig): every rank receives from every peer, so every
 *   rank sees every peer's call, and CTA 0 receives word 0 of every block: a peer whose call
 *   differs never looks ready there, and the polls' slow path names it (pl_tiny_check).
 * - AllToAllV, and AllGatherV or ReduceScatterV with a zero count (a rank that receives from no
 *   one would not see a disagreement): CTA 0 checks the headers after the data (word 0 and every
 *   pair of V counts, pl_lean_vcheck's), their words loaded before the data waits. AllToAllV keeps
 *   the lean kernel's plain flags: its peers may run the lean or SNAC kernel (pl_lean_takes).
 * DT: ReduceScatterV's dtype, -1 for AllGatherV and AllToAllV; OP as the fixed tiny kernel's; COLL:
 * the collective (a constant: AllGatherV's push is one load per word for every peer). */

/* My block for peer d (its bytes in *b): AllGatherV my whole input; AllToAllV sendcounts[d] at
 * sdispls[d]; ReduceScatterV shard d (recvcounts[d]) at sdispls[d]. v: the counts (the arguments'
 * in the fast path: a broadcast load, every thread at the same d; the shared copies in the slow
 * path, which gets no reference to the arguments). */
template <int COLL>
PL_DEV const char *pl_tinyv_src(const uint64_t (*v)[PL_MAX_WORLD], const pl_snac_t *X, int d,
                                uint64_t *b) {
  const uint64_t es = X->c.esize;
  if (COLL == PL_COLL_ALL_GATHER_V) {
    *b = X->c.count * es;
    return X->send;
  }
  *b = v[COLL == PL_COLL_ALL_TO_ALL_V ? 0 : 2][d] * es;
  return X->send + v[1][d] * es;
}
/* Where source s's block lands, and its bytes (AllGatherV, AllToAllV: recvcounts[s] at
 * rdispls[s]). */
PL_DEV char *pl_tinyv_dst(const uint64_t (*v)[PL_MAX_WORLD], const pl_snac_t *X, int s,
                          uint64_t *b) {
  *b = v[2][s] * X->c.esize;
  return X->recv + v[3][s] * X->c.esize;
}

/* Push words [lo, hi) of my block for every peer, each as packet i at base + 16 i of my window
 * there (while it has that word), 8 peers' loads in flight before their stores. FAST: every
 * block 8-byte aligned and of whole words (args.tv_fast): plain loads, no test per word. */
template <int COLL, int FAST>
PL_DEV void pl_tinyv_push(const uint64_t (*v)[PL_MAX_WORLD], const pl_snac_t *X, pl_lean_sh_t *sh,
                          int w, int r, uint64_t base, uint64_t flag, uint32_t lo, uint32_t hi) {
  for (uint32_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    const uint64_t o = 8 * (uint64_t)i;
    for (int j0 = 1; j0 < w; j0 += 8) {
      uint64_t x[8];
      uint32_t m = 0;
#pragma unroll
      for (int u = 0; u < 8; u++) {
        if (j0 + u >= w) break;
        const int d = r + j0 + u < w ? r + j0 + u : r + j0 + u - w;
        uint64_t b;
        const char *p = pl_tinyv_src<COLL>(v, X, d, &b);
        if (o < b) {
          x[u] = FAST ? *(const uint64_t *)(p + o) : pl_pkt_pack(p, b, i);
          m |= 1u << u;
        }
      }
#pragma unroll
      for (int u = 0; u < 8; u++) {
        const int d = r + j0 + u < w ? r + j0 + u : r + j0 + u - w;
        if (m >> u & 1u) pl_st_pkt(sh->ws[d] + base + 16 * (uint64_t)i, x[u], flag);
      }
    }
  }
}
template <int COLL>
static __device__ __noinline__ void pl_tinyv_push_slow(const pl_snac_t *X, pl_lean_sh_t *sh, int w,
                                                       int r, uint64_t base, uint64_t flag,
                                                       uint32_t lo, uint32_t hi) {
  pl_tinyv_push<COLL, 0>(sh->v, X, sh, w, r, base, flag, lo, hi);
}

/* AllGatherV, AllToAllV: words [lo, hi) of every source's block, packet i of its window here
 * (mywin + s * win), unpacked where it lands; my own block's word i copied (unless in place).
 * FAST as pl_tinyv_push's. */
template <int COLL, int FAST>
PL_DEV void pl_tinyv_gather(const uint64_t (*v)[PL_MAX_WORLD], const pl_snac_t *X,
                            pl_lean_sh_t *sh, int w, int r, const char *mywin, uint64_t flag,
                            uint32_t lo, uint32_t hi, const pl_wait_t *wt) {
  const uint64_t win = X->geom.pkt_win;
  uint64_t bs, bd;
  const char *ps = pl_tinyv_src<COLL>(v, X, r, &bs);
  char *pd = pl_tinyv_dst(v, X, r, &bd);
  if (bd < bs) bs = bd; /* (never past my recv block: pl_snac_self) */
  for (uint32_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    const uint64_t o = 8 * (uint64_t)i;
    if (ps != pd && o < bs) {
      if (FAST) *(uint64_t *)(pd + o) = *(const uint64_t *)(ps + o);
      else pl_pkt_unpack(pd, bs, i, pl_pkt_pack(ps, bs, i));
    }
    for (int s0 = 0; s0 < w; s0 += 8) {
      PL_TINY_POLL8_(mywin, win, i, s0, flag, wt, sh,
                     s < w && s != r && o < v[2][s] * X->c.esize, );
#pragma unroll
      for (int u = 0; u < 8; u++)
        if (got >> u & 1u) {
          uint64_t b;
          char *d = pl_tinyv_dst(v, X, s0 + u, &b);
          if (FAST) *(uint64_t *)(d + o) = dv[u];
          else pl_pkt_unpack(d, b, i, dv[u]);
        }
    }
  }
}
template <int COLL>
static __device__ __noinline__ void pl_tinyv_gather_slow(const pl_snac_t *X, pl_lean_sh_t *sh,
                                                         int w, int r, const char *mywin,
                                                         uint64_t flag, uint32_t lo, uint32_t hi,
                                                         pl_wait_t wt) {
  pl_tinyv_gather<COLL, 0>(sh->v, X, sh, w, r, mywin, flag, lo, hi, &wt);
}

/* Word q of rank s's header, loaded now (mine: as I push it, ready), for a check after the data. */
template <int COLL>
PL_DEV void pl_tinyv_peek(const pl_snac_t *X, pl_lean_sh_t *sh, int w, int r, uint64_t par, int s,
                          uint32_t q, uint64_t f1, uint64_t *v, uint64_t *f) {
  if (s == r) {
    *v = pl_tinyv_hword<COLL>(sh, 0, X->c.count, w, q);
    *f = f1;
  } else {
    pl_ld_pkt(PL_LEAN_WIN(sh, r, s) + q, v, f);
  }
}

template <int DT, int OP, int COLL>
__global__ void __launch_bounds__(PL_LEAN_THREADS, 1)
    pl_tinyv_kernel(const __grid_constant__ pl_cuda_args_t args) {
  __shared__ pl_lean_sh_t sh;
  const pl_snac_t *X = &args.x;
  const int w = X->c.world, r = X->c.rank, tid = threadIdx.x;
  pl_tiny_begin<1>(&args, &sh);
  /* this CTA's words [lo, hi) of every block (32-bit: tiny_max) */
  const uint32_t n = args.tv_words;
  const uint32_t lo = n * blockIdx.x / gridDim.x, hi = n * (blockIdx.x + 1) / gridDim.x;
  const uint64_t hw = pl_hdr_words(w);
  const uint64_t myh0 = pl_hdr_word0(&X->c, X->in_place ? PL_HDR_INPLACE : 0);
  const int chk = args.tv_check && blockIdx.x == 0;
  const uint32_t uw = (uint32_t)w, npairs = uw * uw + (COLL == PL_COLL_ALL_GATHER_V ? uw : 0);
  __syncthreads();
  const uint64_t epoch = sh.epoch, par = epoch & 1, f1 = epoch * PL_EPOCH_STRIDE + 1;
  const uint64_t mine = X->geom.pkt_off + (par * (uint64_t)w + (uint64_t)r) * X->geom.pkt_win;
  pl_ctrl_t *me = (pl_ctrl_t *)sh.ws[r];
  pl_wait_t wd = {&me->abort, &me->err_epoch, epoch + 1, (const volatile int *)&sh.stop,
                  args.timeout_ns, 0, args.backoff_ns};
  if (!sh.aborted) {
    /* notify: CTA 0 the whole header (the V counts too), every CTA its words of every block */
    if (blockIdx.x == 0) pl_tiny_hdr_push<COLL>(&X->c, &sh, w, r, mine, hw, myh0, f1);
    const uint64_t fs = f1 ^ args.tv_sig; /* (AllToAllV: f1) */
    if (args.tv_fast) pl_tinyv_push<COLL, 1>(args.v, X, &sh, w, r, mine + hw * 16, fs, lo, hi);
    else pl_tinyv_push_slow<COLL>(X, &sh, w, r, mine + hw * 16, fs, lo, hi);
    if (tid == 0 && (args.pdl & PL_PDL_RELEASE)) pl_grid_dep_launch();
    /* chk: the header words CTA 0 checks after its data, loaded now: check kt < world word 0 of
     * rank kt's, check kt pair kt of pl_lean_vcheck (word qa of rank ps's header against word qb
     * of rank pt's, or my count pb). Check kt runs on thread blockDim - 1 - kt where this CTA's
     * threads from hi - lo on have no data word (the check then overlaps the others' data waits:
     * AllToAllV 8 KiB 8.3 -> 7.5 us), else on thread kt (the last threads there measured 0.5 us
     * slower at 64-128 KiB) */
    const uint32_t kt = hi - lo + npairs <= blockDim.x ? blockDim.x - 1 - (uint32_t)tid : tid;
    const int hchk = chk && kt < uw && (int)kt != r, pair = chk && kt < npairs;
    uint64_t ha = 0, fa = f1, pa = 0, fpa = f1, pb = 0, fpb = f1;
    int ps = 0, pt = -1;
    uint32_t pqa = 0, pqb = 0;
    if (hchk) pl_ld_pkt(PL_LEAN_WIN(&sh, r, (int)kt), &ha, &fa);
    if (pair) {
      if (kt < uw * uw) {
        ps = (int)(kt / uw);
        const int i = (int)kt - ps * w;
        pqa = PL_HDR_FIXED + (uint32_t)i;
        if (COLL == PL_COLL_ALL_TO_ALL_V) {
          pt = i;
          pqb = PL_HDR_FIXED + 2 * uw + (uint32_t)ps;
        } else {
          pb = sh.v[2][i];
        }
      } else { /* AllGatherV: rank ps's sendcount */
        ps = (int)(kt - uw * uw);
        pqa = 1;
        pb = sh.v[2][ps];
      }
      pl_tinyv_peek<COLL>(X, &sh, w, r, par, ps, pqa, f1, &pa, &fpa);
      if (pt >= 0) pl_tinyv_peek<COLL>(X, &sh, w, r, par, pt, pqb, f1, &pb, &fpb);
    }
    /* consume */
    const char *mywin = sh.ws[r] + X->geom.pkt_off + par * (uint64_t)w * X->geom.pkt_win + hw * 16;
    if constexpr (DT < 0) {
      if (args.tv_fast) pl_tinyv_gather<COLL, 1>(args.v, X, &sh, w, r, mywin, fs, lo, hi, &wd);
      else pl_tinyv_gather_slow<COLL>(X, &sh, w, r, mywin, fs, lo, hi, wd);
    } else { /* my shard: every source's block for me has its bytes */
      uint64_t br;
      const char *own = pl_tinyv_src<COLL>(args.v, X, r, &br);
      const pl_tiny_geo_t g = {~0ull, 0, br};
      const int al = !(((uintptr_t)own | (uintptr_t)X->recv) & 7);
      pl_tiny_consume<DT, OP, 1>(X, &sh, w, r, par, lo, hi, g, own, X->recv, 0, hw, fs, 0, 0, 0,
                                 &wd, al);
    }
    if (chk) { /* agree, after the data (a failed or stopped wait: the verdict is made) */
      pl_wait_t wh = wd;
      wh.group = NULL; /* a header wait ends only with its header (or abort, deadline) */
      int st = 0;
      if (hchk && !sh.stop) {
        if (!pl_ready(fa, f1, PL_READY_EPOCH)) {
          pl_lean_got_t gh = pl_lean_wait(PL_LEAN_WIN(&sh, r, (int)kt), f1, wh);
          st = gh.st;
          ha = gh.data;
        }
        if (st) pl_lean_fail(&sh, st, (int)kt, "the call's header");
        else if (pl_lean_hdr_differs(ha, 0, myh0, 0, 1)) pl_lean_mis(&sh);
        else if ((ha >> 48 & (PL_HDR_ZC_SEND | PL_HDR_ZC_RECV)))
          pl_lean_zc_done(X, &sh, (int)kt, r, f1); /* a SNAC-kernel peer awaits it (AllToAllV) */
        if (COLL == PL_COLL_ALL_TO_ALL_V && !st) pl_lean_mix(&sh, ha, uw - 1);
      }
      if (pair && !st && !sh.stop) {
        if (!pl_ready(fpa, f1, PL_READY_EPOCH))
          pa = pl_lean_hword(X, &sh, w, r, par, ps, (int)pqa, f1, wh, &st, 0);
        if (!st && pt >= 0 && !pl_ready(fpb, f1, PL_READY_EPOCH))
          pb = pl_lean_hword(X, &sh, w, r, par, pt, (int)pqb, f1, wh, &st, 0);
        if (!st && pa != pb) pl_lean_mis(&sh);
      }
      if (npairs > blockDim.x) /* (more pairs than threads: all of them, as the lean kernel) */
        pl_lean_vcheck(X, &sh, w, r, par, f1, wh, 0);
    }
  }
  __syncthreads();
  if (tid == 0) pl_lean_end(&args, &sh, epoch, NULL);
}

/* One kernel, with programmatic dependent launch when pdl (the attribute), else plainly. */
static cudaError_t pl_lean_go(void (*k)(const pl_cuda_args_t), const pl_cuda_args_t *args,
                              int grid, int threads, int pdl, cudaStream_t s) {
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.gridDim = dim3((unsigned)grid);
  cfg.blockDim = dim3((unsigned)threads);
  cfg.dynamicSmemBytes = 0;
  cfg.stream = s;
  cfg.attrs = at;
  cfg.numAttrs = pdl ? 1 : 0;
  cudaError_t e = cudaLaunchKernelEx(&cfg, k, *args);
  (void)cudaGetLastError(); /* returned here, not left for the next launch's check */
  return e;
}

int pl_lean_pdl_built(void) {
  cudaFuncAttributes a;
  if (cudaFuncGetAttributes(&a, pl_lean_kernel<-1, 0, -1>) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return a.ptxVersion >= 90 && a.binaryVersion >= 90;
}

cudaError_t pl_cuda_lean_launch(const pl_cuda_args_t *args, int grid, int threads, int pdl,
                                cudaStream_t s) {
  int dt = pl_coll_is_reduce(args->x.c.coll) ? args->x.c.dtype : -1;
  int v = pl_coll_is_v(args->x.c.coll);
  int sum = args->x.c.op == PURLIN_SUM;
  switch (dt) {
#define PL_LEAN_CASE_(name, suffix, bytes)                                                         \
  case PURLIN_##name:                                                                              \
    return pl_lean_go(v && sum ? pl_lean_kernel<PURLIN_##name, 1, PURLIN_SUM>                      \
                      : v      ? pl_lean_kernel<PURLIN_##name, 1, -1>                              \
                      : sum    ? pl_lean_kernel<PURLIN_##name, 0, PURLIN_SUM>                      \
                               : pl_lean_kernel<PURLIN_##name, 0, -1>,                             \
                      args, grid, threads, pdl, s);
    PURLIN_DTYPE_MAP(PL_LEAN_CASE_)
#undef PL_LEAN_CASE_
  default:
    return pl_lean_go(v ? pl_lean_kernel<-1, 1, -1> : pl_lean_kernel<-1, 0, -1>, args, grid,
                      threads, pdl, s);
  }
}

cudaError_t pl_cuda_tiny_launch(const pl_cuda_args_t *args, int grid, int threads, int pdl,
                                cudaStream_t s) {
  const int sum = args->x.c.op == PURLIN_SUM;
  const int two = args->x.c.coll == PL_COLL_ALL_REDUCE && args->x.plan.ar_twoshot;
  const int reduce = pl_coll_is_reduce(args->x.c.coll);
  if (args->x.c.coll == PL_COLL_ALL_GATHER_V)
    return pl_lean_go(pl_tinyv_kernel<-1, -1, PL_COLL_ALL_GATHER_V>, args, grid, threads, pdl, s);
  if (args->x.c.coll == PL_COLL_ALL_TO_ALL_V)
    return pl_lean_go(pl_tinyv_kernel<-1, -1, PL_COLL_ALL_TO_ALL_V>, args, grid, threads, pdl, s);
  if (args->x.c.coll == PL_COLL_REDUCE_SCATTER_V) switch (args->x.c.dtype) {
#define PL_TINYV_CASE_(name, suffix, bytes)                                                        \
  case PURLIN_##name:                                                                              \
    return pl_lean_go(sum ? pl_tinyv_kernel<PURLIN_##name, PURLIN_SUM, PL_COLL_REDUCE_SCATTER_V>   \
                          : pl_tinyv_kernel<PURLIN_##name, -1, PL_COLL_REDUCE_SCATTER_V>,          \
                      args, grid, threads, pdl, s);
      PURLIN_DTYPE_MAP(PL_TINYV_CASE_)
#undef PL_TINYV_CASE_
    default: return cudaErrorInvalidValue; /* (not reached: every dtype has a case) */
    }
  switch (reduce ? args->x.c.dtype : -1) {
#define PL_TINY_CASE_(name, suffix, bytes)                                                         \
  case PURLIN_##name:                                                                              \
    return pl_lean_go(two && sum ? pl_tiny_kernel<PURLIN_##name, PURLIN_SUM, 1>                    \
                      : two      ? pl_tiny_kernel<PURLIN_##name, -1, 1>                            \
                      : sum      ? pl_tiny_kernel<PURLIN_##name, PURLIN_SUM, 0>                    \
                                 : pl_tiny_kernel<PURLIN_##name, -1, 0>,                           \
                      args, grid, threads, pdl, s);
    PURLIN_DTYPE_MAP(PL_TINY_CASE_)
#undef PL_TINY_CASE_
  default: return pl_lean_go(pl_tiny_kernel<-1, -1, 0>, args, grid, threads, pdl, s);
  }
}

void pl_tinyv_args(const pl_snac_t *x, pl_cuda_args_t *a) {
  const pl_call_t *c = &x->c;
  const int w = c->world, agv = c->coll == PL_COLL_ALL_GATHER_V;
  const uint64_t es = c->esize;
  a->tv_words = (uint32_t)((pl_tiny_block_bytes(x) + 7) / 8); /* (at most PL_TINY_MAX_BYTES / 8) */
  /* fast: the buffers, every block's place and bytes, 8-byte multiples */
  uint64_t odd = (uintptr_t)x->send | (uintptr_t)x->recv | (agv ? c->count * es : 0);
  for (int d = 0; d < w; d++) {
    if (c->coll != PL_COLL_ALL_GATHER_V) odd |= c->sdispls[d] * es;
    if (c->coll == PL_COLL_ALL_TO_ALL_V) odd |= c->scounts[d] * es;
    if (c->coll != PL_COLL_REDUCE_SCATTER_V) odd |= c->rdispls[d] * es;
    odd |= c->rcounts[d] * es;
  }
  a->tv_fast = !(odd & 7);
  a->tv_sig = 0;
  a->tv_check = 1;
  if (c->coll == PL_COLL_ALL_TO_ALL_V) return; /* (plain flags: SNAC's, the lean and the direct kernel's) */
  a->tv_check = 0; /* (unless a count is 0: a rank receiving from no one sees no signature) */
  /* the fields of header word 0 every rank shares, AllGatherV's "my sendcount is my recvcount"
   * (api.c already refuses host counts without it: kept so that the signature covers all that
   * pl_snac_hdr_check compares), then every recvcount: equal on every rank whose call agrees */
  uint64_t z = pl_tiny_sig(pl_hdr_word0(c, 0), agv && c->count != c->rcounts[c->rank]);
  for (int d = 0; d < w; d++) {
    z = pl_tiny_mix(z ^ (c->rcounts[d] * 0x9e3779b97f4a7c15ull));
    if (!c->rcounts[d]) a->tv_check = 1;
  }
  a->tv_sig = z | 1ull << 63;
}
