/* direct.cu -- the direct kernel: SNAC's throughput regime as a kernel of its own, for the calls
 * above the packet sizes of AllReduce, AllGather(V), ReduceScatter(V) and out-of-place AllToAll,
 * and (tune.direct_a2av) out-of-place AllToAllV with host counts on the ranks whose blocks are not
 * all packets (docs/gpu.md, "The direct kernel").
 *
 * Stage: nothing where a rank's buffers are peer-mapped (purlin_mem_alloc: zero copy); a rank
 * whose input is not (ordinary cudaMalloc memory) copies what its peers read of it into its
 * staging half, in rounds of at most dpiece bytes per block that fit the half (pl_direct_plan).
 * Notify: CTA 0 pushes this rank's SNAC header (the same words and packets as SNAC's and the lean
 * kernel's, with PL_HDR_DIRECT) into every peer's window; every CTA takes every peer's header from
 * its own window (its arrival: the peer's stream has reached the call, so its input is ready),
 * checks them all (the same verdict as pl_snac_hdr_check, which names the field on a mismatch) and
 * finds each peer's buffers through the device table of purlin_mem_alloc buffers, or its staging.
 * Consume: CTA c of every rank handles part c of every block (pl_direct_rpart: the same split on
 * every rank, the same bytes of a staging slot in every round), 16-byte loads that bypass L1
 * (ld.global.cg), eight in flight per thread for a copy and 2 per source for a reduction:
 *  - AllGather(V), AllToAll: copy part c of every peer's block for me into my output;
 *  - ReduceScatter(V): reduce part c of my shard from every rank's input, in ascending rank order;
 *  - AllReduce: the same for my shard (into my output, and my staging when my output is not
 *    peer-mapped), then a flag per CTA pair (phase 2: "my part c is reduced"), then copy part c of
 *    every peer's reduced shard into mine.
 * Between rounds (some rank stages): CTA c tells CTA c of every peer it has read round k (phase 3)
 * before any rank overwrites its staging with round k + 1, then that round k + 1 is there
 * (phase 1). Done: where a rank's buffers are read in place, CTA c tells CTA c of every peer that
 * it has read everything (phase 3 of the last round) and waits for the same; only then may the
 * caller reuse them. Reductions use acc.cuh's accumulators (the lean kernel's, the same bits).
 *
 * Why a kernel of its own: SNAC's kernel keeps ~32 KiB in flight per CTA in its atoms and runs 2
 * CTAs per lane, so its zero-copy path measured 1.9-3.1x the copy floor at 64 MiB-1 GiB
 * (docs/tuning.md, finding 17); this one keeps 64-128 KiB in flight per CTA on every SM it is
 * given, and its control flow is three flag exchanges per round. The idea of reading peers' user
 * buffers directly follows NCCL's symmetric-memory kernels (ncclCommWindowRegister), and the
 * copy-in of ordinary buffers into a registered staging buffer follows the IPC-based custom
 * all-reduce of vLLM and TensorRT-LLM; the code is purlin's. */
#include "cuda/atom_cuda.cuh"
#include "snac/snac.h"
#include "cuda/report.cuh"
#include "cuda/acc.cuh"
#include "cuda/direct.h"
#include "direct_plan.h"

int pl_direct_coll(int coll, int in_place, int counts_dev) {
  if (counts_dev) return 0;
  switch (coll) {
  case PL_COLL_ALL_REDUCE:
  case PL_COLL_ALL_GATHER:
  case PL_COLL_REDUCE_SCATTER:
  case PL_COLL_ALL_GATHER_V:
  case PL_COLL_REDUCE_SCATTER_V: return 1;
  case PL_COLL_ALL_TO_ALL:
  case PL_COLL_ALL_TO_ALL_V: return !in_place; /* AllToAllV: only with tune.direct_a2av */
  default: return 0;
  }
}

/* copies: 16-byte loads in flight per thread (UNR, a template parameter: 4 or 8 from
 * pl_tune_t.direct_unroll for the gathers; 8 in AllReduce's second phase); CS: the gathers' 16-byte
 * loads and stores with the streaming (evict-first) policy, ld.global.cs / st.global.cs
 * (pl_tune_t.direct_stream; never for AllReduce's second phase, whose loads must bypass L1) */
/* reductions: 16-byte vectors per source per thread, 1 for 1-byte types (16 accumulators per
 * vector: 2 spilled); the sources whose loads are in flight together (the kernel's UNR): 8, or 4
 * for 2-byte types with pl_tune_t.direct_red_batch 4 (at 8 their 2 x 8 vectors and 16 float
 * accumulators spill 12 bytes at 128 registers, tools/ptxas_report.sh; at 4 none) */
#define PL_DIRECT_RED_U(DT) (PL_RV_EB_(DT) == 8 ? 1 : 2)
/* the kernel's UNR for a reduction of b-byte elements with 4 sources loaded together (only
 * 2-byte types have that instantiation: the others keep 8) */
#define PL_DIRECT_RB4_(b) ((b) == 2 ? 4 : 8)

/* AllToAllV's spread (pl_direct_a2av_spread): thread 0's cursor over its rank's parts. */
typedef struct {
  uint64_t g, x1;     /* the part's next element and its end, in the concatenation */
  uint64_t Q, NQ, nx; /* its parts, this rank's (the queue; 0: one fixed part), the next taken */
  int b;              /* a block at or before g's */
} pl_a2av_cur_t;

/* A CTA's shared state: the call's per-peer pointers, computed once by threads 0..world-1. */
typedef struct {
  const char *src[PL_MAX_WORLD];  /* gathers: peer s's block for me (its buffer); reductions: rank
                                     s's input for my shard */
  char *dst[PL_MAX_WORLD];        /* gathers: where block s lands in my output */
  uint64_t bytes[PL_MAX_WORLD];   /* gathers: block s's bytes */
  const char *src2[PL_MAX_WORLD]; /* AllReduce: rank s's reduced shard, in its output */
  char *dst2[PL_MAX_WORLD];       /* AllReduce: where it lands in mine */
  uint64_t bytes2[PL_MAX_WORLD];  /* its bytes */
  char *red_out[PL_MAX_WORLD];    /* reductions: where my reduced shard goes: [0] my output;
                                     AllReduce, my output not peer-mapped: [1] my staging's copy;
                                     AllReduce pushing: [j] rank r + j's output */
  int nred_out;                   /* how many of them */
  uint64_t red_bytes;             /* its bytes */
  const char *cin_src[PL_MAX_WORLD]; /* a staging rank's round: what it copies into its staging */
  char *cin_dst[PL_MAX_WORLD];
  uint64_t cin_bytes[PL_MAX_WORLD];
  const char *psend[PL_MAX_WORLD]; /* rank s's input mapped here (zero copy), else NULL: staged */
  const char *precv[PL_MAX_WORLD]; /* AllReduce, ReduceScatterV, AllToAllV: rank s's output mapped
                                     here, else NULL */
  uint64_t pdispl[PL_MAX_WORLD];   /* RSV, A2AV: my shard's (block's) offset in rank s's input
                                     (its sdispls[r], from its header) */
  unsigned kinds;                 /* pl_direct_peers */
  unsigned char pkt[PL_MAX_WORLD]; /* AllToAllV: rank s runs another kernel, its blocks all packets
                                     (pl_hdr_a2av_pkts): its blocks and mine for it travel as
                                     packets (pl_direct_pkts), never in the rounds */
  uint64_t qm[PL_MAX_WORLD];     /* the piece queue (pl_direct_queue): the pieces of the j-th
                                     peer read, s = r + 1 + j mod world, */
  uint32_t qa[PL_MAX_WORLD];     /* where its block's destination lies past the alignment, */
  int qs[2];                     /* the piece the CTA copies (its peer s, -1: none left) and the */
  uint64_t qlo[2], qhi[2];       /* next one, double-buffered (thread 0 writes one as the CTA
                                     copies the other) */
  const uint64_t *grow[1];         /* ReduceScatterV's spread: its grid's row (the recvcounts), */
  uint64_t gtot[PL_DIRECT_FLAT];   /* its sum; AllToAllV's spread: the rows' sums */
  uint64_t fst[PL_DIRECT_FLAT * PL_DIRECT_FLAT + 1]; /* AllToAllV's spread: its flat grid */
  uint64_t fsd[PL_DIRECT_FLAT * PL_DIRECT_FLAT];     /* (direct_plan.h, pl_flat_step) */
  uint64_t frd[PL_DIRECT_FLAT * PL_DIRECT_FLAT];
  const char *sp_src[2];          /* the piece the CTA copies and the next (thread 0 writes one as */
  char *sp_dst[2];                /* the CTA copies the other) */
  uint64_t sp_bytes[2];
  pl_a2av_cur_t cur;               /* (in shared memory: no registers held across the copies) */
  uint64_t piece, slot, rounds;   /* the call's rounds: the host's plan (pl_direct_plan) when some
                                     rank stages (AllToAllV: its rounds from the headers), else
                                     one round of whole blocks */
  uint64_t v[4][PL_MAX_WORLD];    /* V: scounts, sdispls, rcounts, rdispls (the host's copies) */
  pl_snac_t x;                    /* the call (V pointers into v), for the header and failures */
  uint64_t epoch;
  volatile int stop;              /* a wait failed or the headers disagree: the rest stops */
  int err, err_peer, mis, aborted;
  unsigned misalign;              /* reductions: some pointer is not 16-byte aligned */
  const char *err_what;
  uint64_t pt[2];                 /* PURLIN_PROFILE: thread 0's entry and data start stamps */
} pl_direct_sh_t;

/* This CTA's part of round k's b-byte piece of a block (pl_direct_rsplit with the call's slot). */
PL_DEV void pl_direct_rpart(const pl_direct_sh_t *sh, uint64_t b, uint64_t *lo, uint64_t *hi) {
  pl_direct_rsplit(sh->rounds, sh->slot, b, blockIdx.x, gridDim.x, lo, hi);
}

PL_DEV void pl_direct_fail(pl_direct_sh_t *sh, int st, int peer, const char *what) {
  if (st == PL_WAIT_GROUP) return; /* another thread's failure: recorded there */
  if (atomicCAS(&sh->err, 0, st) == 0) {
    sh->err_peer = st == PURLIN_ERR_TIMEOUT ? peer : -1;
    sh->err_what = what;
  }
  atomicExch((int *)&sh->stop, 1);
}

/* Copy bytes from src to dst with the CTA's threads, every load through L2 only (a peer's output
 * read after its flag must not hit a line this SM cached earlier): 16-byte vectors, UNROLL in
 * flight per thread, when dst and src agree modulo 16; else aligned 16-byte loads shifted into
 * aligned 16-byte stores (pl_direct_copy_shift). */
#define PL_DIRECT_LOOP_(UNR, CS, T, d, s, n, tid, nt)                                              \
  do {                                                                                             \
    const T *s_ = (const T *)(s);                                                                  \
    T *d_ = (T *)(d);                                                                              \
    uint64_t n_ = (n), nt_ = (nt), i_ = (tid);                                                     \
    for (; i_ + ((UNR) - 1) * nt_ < n_; i_ += (UNR) * nt_) {                 \
      T v_[(UNR)];                                                                      \
      _Pragma("unroll") for (int u_ = 0; u_ < (UNR); u_++) v_[u_] =                     \
          (CS) ? __ldcs(s_ + i_ + (uint64_t)u_ * nt_) : __ldcg(s_ + i_ + (uint64_t)u_ * nt_);      \
      _Pragma("unroll") for (int u_ = 0; u_ < (UNR); u_++) {                                       \
        if (CS) __stcs(d_ + i_ + (uint64_t)u_ * nt_, v_[u_]);                                      \
        else d_[i_ + (uint64_t)u_ * nt_] = v_[u_];                                                 \
      }                                                                                            \
    }                                                                                              \
    for (; i_ < n_; i_ += nt_) d_[i_] = __ldcg(s_ + i_);                                           \
  } while (0)

/* The same, its last pass predicated instead of a tail loop of one vector at a time (which paid a
 * load latency per vector when a CTA's part is not a multiple of UNR x 8 KiB): the gathers' copy.
 * (In the reduction kernels, which inline the copy twice, it put them over their register cap:
 * ptxas -v; their copies are the staging's and AllReduce's second phase.) */
#define PL_DIRECT_PLOOP_(UNR, CS, T, d, s, n, tid, nt)                                             \
  do {                                                                                             \
    const T *s_ = (const T *)(s);                                                                  \
    T *d_ = (T *)(d);                                                                              \
    uint64_t n_ = (n), nt_ = (nt), i_ = (tid);                                                     \
    for (; i_ < n_; i_ += (UNR) * nt_) {                                                           \
      T v_[(UNR)];                                                                                 \
      _Pragma("unroll") for (int u_ = 0; u_ < (UNR); u_++) if (i_ + (uint64_t)u_ * nt_ < n_)      \
          v_[u_] = (CS) ? __ldcs(s_ + i_ + (uint64_t)u_ * nt_) : __ldcg(s_ + i_ + (uint64_t)u_ * nt_); \
      _Pragma("unroll") for (int u_ = 0; u_ < (UNR); u_++) if (i_ + (uint64_t)u_ * nt_ < n_) {    \
        if (CS) __stcs(d_ + i_ + (uint64_t)u_ * nt_, v_[u_]);                                      \
        else d_[i_ + (uint64_t)u_ * nt_] = v_[u_];                                                 \
      }                                                                                            \
    }                                                                                              \
  } while (0)

/* Word j of the 16 bytes at byte a (0..15) of the 32 bytes A:B (Q = a / 4, shift 8 (a % 4)). */
#define PL_DIRECT_W_(A, B, k) ((k) == 0 ? (A).x : (k) == 1 ? (A).y : (k) == 2 ? (A).z : (k) == 3 ? (A).w \
                               : (k) == 4 ? (B).x : (k) == 5 ? (B).y : (k) == 6 ? (B).z : (B).w)
template <int Q>
PL_DEV uint4 pl_direct_shift(uint4 A, uint4 B, uint32_t sh) {
  return make_uint4(__funnelshift_r(PL_DIRECT_W_(A, B, Q), PL_DIRECT_W_(A, B, Q + 1), sh),
                    __funnelshift_r(PL_DIRECT_W_(A, B, Q + 1), PL_DIRECT_W_(A, B, Q + 2), sh),
                    __funnelshift_r(PL_DIRECT_W_(A, B, Q + 2), PL_DIRECT_W_(A, B, Q + 3), sh),
                    __funnelshift_r(PL_DIRECT_W_(A, B, Q + 3), PL_DIRECT_W_(A, B, Q + 4), sh));
}
/* n 16-byte vectors to the aligned d from s, which lies a bytes past the aligned sa (a != 0):
 * vector i is bytes a.. of the aligned pair sa[i], sa[i + 1] (both hold bytes of the source, so
 * neither load leaves its allocation); 4 vectors (8 loads) in flight per thread. */
template <int Q>
static __device__ __noinline__ void pl_direct_copy_shift(uint4 *d, const uint4 *sa, uint32_t a,
                                                         uint64_t n) {
  const uint64_t nt = blockDim.x;
  const uint32_t sh = 8 * (a & 3);
  uint64_t i = threadIdx.x;
  for (; i + 3 * nt < n; i += 4 * nt) {
    uint4 A[4], B[4];
#pragma unroll
    for (int u = 0; u < 4; u++) {
      A[u] = __ldcg(sa + i + u * nt);
      B[u] = __ldcg(sa + i + u * nt + 1);
    }
#pragma unroll
    for (int u = 0; u < 4; u++) d[i + u * nt] = pl_direct_shift<Q>(A[u], B[u], sh);
  }
  for (; i < n; i += nt) d[i] = pl_direct_shift<Q>(__ldcg(sa + i), __ldcg(sa + i + 1), sh);
}

/* PRED: PL_DIRECT_PLOOP_ (the gathers), else PL_DIRECT_LOOP_; am: the stores' alignment (16, or
 * 128 for the gathers with PURLIN_DIRECT_ALIGN=128: up to 127 first bytes one per thread, then
 * every warp's 512-byte store fills 4 whole lines, where a destination 16 bytes past a line's
 * start spans 5 with a partial sector at each end; the loads are then as misaligned instead) */
template <int UNR, int CS, int PRED = 0>
PL_DEV void pl_direct_copy(char *dst, const char *src, uint64_t bytes, uint32_t am = 16) {
  if (!bytes) return;
  uint64_t tid = threadIdx.x, nt = blockDim.x;
  uint64_t head = (am - ((uintptr_t)dst & (am - 1))) & (am - 1);
  if (head > bytes) head = bytes;
  uint64_t body = (bytes - head) / 16;
  for (uint64_t t = tid; t < head; t += nt) dst[t] = (char)__ldcg((const signed char *)src + t);
  uint32_t a = (uint32_t)((uintptr_t)(src + head) & 15);
  if (a) { /* dst and src differ modulo 16: aligned loads, funnel shifts, aligned stores */
    uint4 *d = (uint4 *)(dst + head);
    const uint4 *sa = (const uint4 *)(src + head - a);
    switch (a >> 2) {
    case 0: pl_direct_copy_shift<0>(d, sa, a, body); break;
    case 1: pl_direct_copy_shift<1>(d, sa, a, body); break;
    case 2: pl_direct_copy_shift<2>(d, sa, a, body); break;
    default: pl_direct_copy_shift<3>(d, sa, a, body); break;
    }
  } else if (PRED) {
    PL_DIRECT_PLOOP_(UNR, CS, uint4, dst + head, src + head, body, tid, nt);
  } else {
    PL_DIRECT_LOOP_(UNR, CS, uint4, dst + head, src + head, body, tid, nt);
  }
  uint64_t t = head + 16 * body + tid;
  if (t < bytes) dst[t] = (char)__ldcg((const signed char *)src + t);
}

/* Word i (8 bytes, fewer at the end) of a reduction's input at any alignment, through L2. */
PL_DEV uint64_t pl_direct_word(const char *p, uint64_t bytes, uint64_t i) {
  uint64_t n = bytes - 8 * i < 8 ? bytes - 8 * i : 8, d = 0;
  p += 8 * i;
  if (n == 8 && !((uintptr_t)p & 7)) return __ldcg((const unsigned long long *)p);
  for (uint64_t k = 0; k < n; k++) d |= (uint64_t)__ldcg((const unsigned char *)p + k) << (8 * k);
  return d;
}

/* Reduce bytes [lo, hi) of my shard from every rank's input (sh->src[s] + lo, s ascending) into
 * every sh->red_out[j] + lo. Fast path: every pointer 16-byte aligned, U vectors per source per thread,
 * sources S at a time (all S loads issued before the first is used); else word by word. Out of
 * line: inlined into the round loop it spilled (ptxas -v). */
template <int DT, int OP, int S>
static __device__ __noinline__ void pl_direct_reduce(pl_direct_sh_t *sh, int w, int op, uint64_t lo,
                                                    uint64_t hi) {
  const uint64_t tid = threadIdx.x, nt = blockDim.x, b = hi - lo;
  constexpr int U = PL_DIRECT_RED_U(DT);
  const int nout = sh->nred_out;
  char *dst = sh->red_out[0] + lo; /* in a register: a loop over red_out alone measured ~3% slower
                                      in ReduceScatter (one output) */
  uint64_t nvec = sh->misalign ? 0 : b / 16, done = 16 * nvec;
  for (uint64_t i0 = tid; i0 < nvec; i0 += U * nt) {
    pl_lacc_t acc[U][2];
    for (int s0 = 0; s0 < w; s0 += S) {
      uint4 v[S][U];
#pragma unroll
      for (int u = 0; u < S; u++)
        if (s0 + u < w) {
          const uint4 *p = (const uint4 *)(sh->src[s0 + u] + lo);
#pragma unroll
          for (int k = 0; k < U; k++)
            if (i0 + k * nt < nvec) v[u][k] = __ldcg(p + i0 + k * nt);
        }
#pragma unroll
      for (int u = 0; u < S; u++)
        if (s0 + u < w) {
#pragma unroll
          for (int k = 0; k < U; k++) {
            uint64_t w0 = (uint64_t)v[u][k].y << 32 | v[u][k].x;
            uint64_t w1 = (uint64_t)v[u][k].w << 32 | v[u][k].z;
            pl_lacc_put<DT>(&acc[k][0], w0, op, s0 + u == 0);
            pl_lacc_put<DT>(&acc[k][1], w1, op, s0 + u == 0);
          }
        }
    }
#pragma unroll
    for (int k = 0; k < U; k++)
      if (i0 + k * nt < nvec) {
        uint64_t w0 = pl_lacc_get<DT>(&acc[k][0], op, w), w1 = pl_lacc_get<DT>(&acc[k][1], op, w);
        uint4 o = make_uint4((uint32_t)w0, (uint32_t)(w0 >> 32), (uint32_t)w1, (uint32_t)(w1 >> 32));
        ((uint4 *)dst)[i0 + k * nt] = o;
        for (int j = 1; j < nout; j++) ((uint4 *)(sh->red_out[j] + lo))[i0 + k * nt] = o;
      }
  }
  /* the rest (all of it when misaligned): word by word */
  const uint64_t rb = b - done, nw = (rb + 7) / 8;
  for (uint64_t j = tid; j < nw; j += nt) {
    pl_lacc_t acc;
    for (int s = 0; s < w; s++)
      pl_lacc_put<DT>(&acc, pl_direct_word(sh->src[s] + lo + done, rb, j), op, s == 0);
    uint64_t o = pl_lacc_get<DT>(&acc, op, w);
    for (int q = 0; q < nout; q++) pl_pkt_unpack(sh->red_out[q] + lo + done, rb, j, o);
  }
}

/* The direct flag of CTA c in rank q's table, written by rank s. */
PL_DEV uint64_t *pl_direct_flag(const pl_cuda_args_t *a, int q, int s) {
  return (uint64_t *)(a->dflags + (uint64_t)q * a->dflags_stride) +
         (uint64_t)blockIdx.x * PL_MAX_WORLD + (uint64_t)s;
}

/* Flag exchange of this CTA with CTA c of every peer: thread t < world publishes v into peer t's
 * table, then waits until peer t has published v (or more) into mine. */
PL_DEV void pl_direct_sync(const pl_cuda_args_t *a, pl_direct_sh_t *sh, int w, int r, uint64_t v,
                           const pl_wait_t *wt, const char *what) {
  __syncthreads(); /* this CTA's accesses of the phase are done before any flag goes out */
  int t = threadIdx.x;
  if (t < w && t != r && !sh->pkt[t] && !sh->stop) {
    pl_st_release_sys(pl_direct_flag(a, t, r), v);
    int st = pl_wait_flag(pl_direct_flag(a, r, t), v, PL_READY_GE, wt);
    if (st) pl_direct_fail(sh, st, t, what);
  }
  __syncthreads();
}

/* Peer s's buffer (id, offset) in the device table of purlin_mem_alloc buffers, mapped here;
 * NULL if there is none. */
PL_DEV const char *pl_direct_peer(const pl_cuda_args_t *a, int w, int s, uint64_t id,
                                  uint64_t off) {
  if (!id || id > PL_CUDA_MAX_SYMS) return NULL;
  const uint64_t *e = a->symtab + (id - 1) * (1 + (uint64_t)w);
  return e[1 + s] ? (const char *)e[1 + s] + off : NULL;
}

/* Rank q's staging half of this call (its window, mapped here). */
PL_DEV char *pl_direct_stg(const pl_cuda_args_t *a, const pl_direct_sh_t *sh, int q) {
  const pl_snac_t *X = &a->x;
  return X->ws[q] + X->geom.stg_off + (sh->epoch & 1) * X->geom.stg_half;
}

/* AllReduce, round k: the window's elements from *base, its count *nk, its shard size *per
 * (pl_direct_window). */
PL_DEV void pl_direct_win(const pl_cuda_args_t *a, const pl_direct_sh_t *sh, uint64_t k,
                          uint64_t *base, uint64_t *nk, uint64_t *per) {
  const pl_call_t *c = &a->x.c;
  pl_direct_window(c->count, c->esize, c->world, sh->piece, sh->rounds, a->ar_per, k, base, nk,
                   per);
}

/* AllReduce: the offset of shard j (its first element s0) in a staging half (pl_direct_ar_off). */
PL_DEV uint64_t pl_direct_ar_slot(const pl_cuda_args_t *a, const pl_direct_sh_t *sh, int j,
                                  uint64_t s0) {
  return pl_direct_ar_off(sh->rounds, sh->piece, a->x.c.world, a->x.c.esize, j, s0);
}

/* Thread j, a rank that stages its input (its send buffer is not peer-mapped): round k's copy of
 * what peers read of it, from its send buffer into its staging half. Every block (shard) j that
 * peer j reads lands at slot j (j * dpiece; AllReduce: pl_direct_ar_slot; the gathers: one
 * block, my send, at slot 0, thread 0). */
PL_DEV void pl_direct_cin(const pl_cuda_args_t *a, pl_direct_sh_t *sh, int w, int r, int j,
                          uint64_t k) {
  const pl_snac_t *X = &a->x;
  const pl_call_t *c = &sh->x.c;
  const uint64_t es = c->esize, n = c->count, P = sh->piece, lo = k * P;
  char *stg = pl_direct_stg(a, sh, r);
  const char *src = X->send;
  char *dst = stg;
  uint64_t b = 0;
  switch (c->coll) {
  case PL_COLL_ALL_GATHER:
  case PL_COLL_ALL_GATHER_V:
    if (j == 0) {
      b = pl_direct_piece((c->coll == PL_COLL_ALL_GATHER ? n : c->rcounts[r]) * es, P, k);
      src += lo;
    }
    break;
  case PL_COLL_ALL_TO_ALL:
  case PL_COLL_REDUCE_SCATTER:
    if (j != r) {
      b = pl_direct_piece(n * es, P, k);
      src += (uint64_t)j * n * es + lo;
      dst += (uint64_t)j * P;
    }
    break;
  case PL_COLL_REDUCE_SCATTER_V:
  case PL_COLL_ALL_TO_ALL_V:
    if (j != r && !sh->pkt[j]) {
      const uint64_t *cnt = c->coll == PL_COLL_ALL_TO_ALL_V ? c->scounts : c->rcounts;
      b = pl_direct_piece(cnt[j] * es, P, k);
      src += c->sdispls[j] * es + lo;
      dst += (uint64_t)j * P;
    }
    break;
  default: { /* AllReduce: shard j of the window */
    uint64_t base, nk, per;
    pl_direct_win(a, sh, k, &base, &nk, &per);
    if (j != r) {
      uint64_t s0 = pl_ar_shard_at(per, nk, j), s1 = pl_ar_shard_at(per, nk, j + 1);
      b = (s1 - s0) * es;
      src += (base + s0) * es;
      dst += pl_direct_ar_slot(a, sh, j, s0);
    }
  }
  }
  sh->cin_src[j] = src;
  sh->cin_dst[j] = dst;
  sh->cin_bytes[j] = b;
}

/* Threads 0..world-1 after the headers agree: thread s finds rank s's buffers (h: its header):
 * mapped here when it says so (zero copy), else its staging is read. Sets sh->kinds. Returns 0,
 * or 1 when a buffer a peer offers is not in this rank's table. */
PL_DEV int pl_direct_peers(const pl_cuda_args_t *a, pl_direct_sh_t *sh, const uint64_t *h, int w,
                           int r, int s) {
  const pl_call_t *c = &sh->x.c;
  const uint64_t f = h[0] >> 48;
  const int ar = c->coll == PL_COLL_ALL_REDUCE, a2av = c->coll == PL_COLL_ALL_TO_ALL_V;
  if (sh->pkt[s]) { /* (bit 4: some peer exchanges packets, so the spread is off) */
    sh->psend[s] = sh->precv[s] = NULL;
    atomicOr(&sh->kinds, 16u);
    /* a SNAC-kernel peer that offers zero copy returns after every peer's `done` in every lane
     * (pl_snac_zc_exit); this rank reads none of its buffers: done at once (pl_lean_zc_done) */
    if (blockIdx.x == 0 && (f & (PL_HDR_ZC_SEND | PL_HDR_ZC_RECV))) {
      pl_ctrl_t *ctl = (pl_ctrl_t *)a->x.ws[s];
      for (int l = 0; l < a->x.plan.lanes; l++)
        pl_st_release_sys(&ctl->peer[l][r].done, sh->epoch * PL_EPOCH_STRIDE + 1);
    }
    return 0;
  }
  const int pr = ar || a2av || c->coll == PL_COLL_REDUCE_SCATTER_V; /* outputs peers may write */
  const int zsf = (f & PL_HDR_ZC_SEND) != 0, mapped = (f & PL_HDR_ZC_RECV) != 0;
  /* (ReduceScatterV, AllToAllV: a rank that receives nothing needs no output, so it counts as
   * mapped; AllToAllV: one that sends nothing needs no input, so it counts as zero copy: what s
   * receives and sends, from its header's counts) */
  uint64_t got = 0, sent = 0;
  for (int i = 0; a2av && !(zsf && mapped) && i < w; i++) { /* (only where a flag is missing) */
    got |= h[PL_HDR_FIXED + 2 * w + i];
    sent |= h[PL_HDR_FIXED + i];
  }
  const int zs = zsf || (a2av && !sent);
  const int zr = pr && (mapped || (!ar && !(a2av ? got : c->rcounts[s])));
  sh->psend[s] = NULL;
  sh->precv[s] = NULL;
  sh->pdispl[s] = c->coll == PL_COLL_REDUCE_SCATTER_V || c->coll == PL_COLL_ALL_TO_ALL_V
                     ? h[PL_HDR_FIXED + w + r] * c->esize : 0;
  if (s != r) {
    if (zsf && !(sh->psend[s] = pl_direct_peer(a, w, s, h[2], h[3]))) return 1;
    if (zr && mapped && !(sh->precv[s] = pl_direct_peer(a, w, s, h[4], h[5]))) return 1;
  }
  /* bit 0: some rank stages (its input, or AllReduce's reduced shard); bit 1: some rank's buffers
   * are read or written in place (its call may return only when every peer is done with them);
   * bit 2: some rank's AllReduce, ReduceScatterV or AllToAllV output is not peer-mapped (else
   * every rank pushes: pl_direct_push), or some rank's tuning does not push (its header's
   * PL_HDR_NOPUSH: the decision is the headers' alone, whatever each rank's environment); bit 3:
   * AllToAllV, some rank's rdispls are not its recvcounts' prefix sums (PL_HDR_RPACKED); bit 4
   * (above): AllToAllV, some rank exchanges packets (sh->pkt) */
  atomicOr(&sh->kinds, (!zs || (ar && !zr) ? 1u : 0u) | (zsf || (zr && mapped) ? 2u : 0u) |
                           ((pr && !zr) || (f & PL_HDR_NOPUSH) ? 4u : 0u) |
                           (a2av && !(f & PL_HDR_RPACKED) ? 8u : 0u));
  return 0;
}

/* AllReduce pushes when every rank's output is peer-mapped (kinds from pl_direct_peers, the same
 * on every rank): each rank writes its reduced shard straight into every rank's output, so there
 * is no second phase (a flag exchange, then every rank reading every peer's reduced shard). Per
 * rank the call reads its inputs and writes its outputs once: 2 S of memory traffic instead of
 * (3 - 1 / world) S on one GPU; over NVLink, one flag exchange fewer per round. Safe in place
 * too: shard j's bytes of every buffer are read and written only by rank j, whose CTA c reads its
 * part c from every input before it writes that part anywhere; the final flag exchange ("done")
 * tells every rank that its peers' writes into its output have landed. The idea is the one of
 * NCCL's symmetric-memory kernels and TensorRT-LLM's two-shot all-reduce (the reduced shard
 * stored to every peer); the code is purlin's. */
PL_DEV int pl_direct_push(int coll, unsigned kinds, int w) {
  return coll == PL_COLL_ALL_REDUCE               ? !(kinds & 4u)
         : coll == PL_COLL_REDUCE_SCATTER_V ? !(kinds & 5u)  /* pl_direct_spread */
         : coll == PL_COLL_ALL_TO_ALL_V && !(kinds & 29u) && w <= PL_DIRECT_FLAT; /* pl_direct_a2av_spread */
}

/* ReduceScatterV spread over the ranks, when every rank's input and output is peer-mapped
 * (pl_direct_push; one round): with skewed recvcounts the rank with the largest shard read the
 * most (Zipf 0.125 at world 8: ~1.18x the mean), so instead rank r reduces slice r of the
 * concatenated shards (pl_direct_spread_cut: T / world elements each, whoever owns them) and
 * stores each owner's piece into that owner's output. Every rank reads and writes the same
 * bytes; the sum of every element is taken in ascending rank order as before (the same bits).
 * Each piece of a shard (owner j, elements [g0, g1) of the concatenation) is split among the
 * CTAs as a block of its own; rank s's input holds it at its sdispls[j] (its header). In place:
 * only rank r reads or writes the elements of its slice, CTA c its part of each piece, sources
 * before stores (pl_direct_reduce); the "done" exchange tells the owners. The idea is AllReduce's
 * push (above) applied to the V shards; the code is purlin's. */
template <int DT, int OP, int S>
static __device__ __noinline__ void pl_direct_spread(const pl_cuda_args_t *a, pl_direct_sh_t *sh,
                                                     const uint64_t *hdr, const uint64_t *my,
                                                     int w, int r) {
  const pl_call_t *c = &sh->x.c;
  const uint64_t es = c->esize, hw = pl_hdr_words(w), v = es >= 16 ? 1 : 16 / es;
  const int op = OP >= 0 ? OP : c->op;
  if (threadIdx.x == 0) { /* one row: the shards */
    uint64_t T = 0;
    for (int j = 0; j < w; j++) T += c->rcounts[j];
    sh->grow[0] = c->rcounts;
    sh->gtot[0] = T;
  }
  __syncthreads();
  const pl_grid_t g = {sh->grow, sh->gtot, 0, 1, w};
  const uint64_t a0 = pl_direct_spread_cut(&g, (uint64_t)r, (uint64_t)w, v);
  const uint64_t a1 = pl_direct_spread_cut(&g, (uint64_t)r + 1, (uint64_t)w, v);
  uint64_t st = 0, g0, g1;
  for (int j = 0; j < w; st += c->rcounts[j++]) {
    if (!pl_direct_spread_piece(a0, a1, st, c->rcounts[j], &g0, &g1)) continue;
    const uint64_t off = (g0 - st) * es;
    __syncthreads(); /* every thread is done with the previous piece's pointers */
    if (threadIdx.x == 0) {
      unsigned mis = 0;
      for (int s = 0; s < w; s++) {
        const uint64_t *h = s == r ? my : hdr + (uint64_t)s * hw;
        sh->src[s] = (s == r ? a->x.send : sh->psend[s]) + h[PL_HDR_FIXED + w + j] * es + off;
        mis |= (unsigned)((uintptr_t)sh->src[s] & 15);
      }
      sh->red_out[0] = (j == r ? a->x.recv : (char *)sh->precv[j]) + off;
      sh->nred_out = 1;
      sh->misalign = mis | (unsigned)((uintptr_t)sh->red_out[0] & 15);
    }
    __syncthreads();
    uint64_t lo, hi;
    pl_direct_split((g1 - g0) * es, blockIdx.x, gridDim.x, &lo, &hi);
    pl_direct_reduce<DT, OP, S>(sh, w, op, lo, hi);
  }
}

/* AllToAllV spread over the ranks, when every rank's input and output is peer-mapped, every
 * rank's rdispls are its recvcounts' prefix sums and the world is at most PL_DIRECT_FLAT
 * (pl_direct_push; one round): with skewed counts the rank that receives most copied the most
 * (Zipf 0.125 at world 8: ~1.2x the mean), and on one GPU every rank's traffic shares one memory.
 * Instead the blocks (s, d), what rank s sends rank d, are cut in row-major order into equal
 * parts (pl_flat_cut; every rank knows every count from the headers), rank r's share the same
 * whichever way its CTAs take it: CTA c of rank r copies part r G + c of world G, or (the piece
 * queue, PURLIN_DIRECT_QUEUE) the CTAs take parts r NQ + i of world NQ from the counter, NQ this
 * rank's share in parts of about a->dqueue bytes. A piece (a part's run in one block) goes from
 * rank s's input at its sdispls[d] into rank d's output at rdispls[s] = what ranks 0..s-1 send d.
 * The grid is in shared memory (direct_plan.h, pl_flat_step), so that thread 0 finds the next
 * piece with a binary search as its CTA copies one (one barrier a piece); the walk over the
 * headers it replaced made the CTA wait ~2 us a part (finding 34). Never in place (the direct
 * kernel runs AllToAllV out of place only); the "done" exchange tells every rank that its peers'
 * writes into its output have landed. The idea is ReduceScatterV's spread (above); the code is
 * purlin's. */

/* Thread 0: the spread's next piece into buffer k of sh (none left: 0 bytes), from the part's
 * cursor, or the next part's (the queue: it asks for the one after as it starts one). */
static __device__ __noinline__ void pl_direct_a2av_take(const pl_cuda_args_t *a,
                                                        pl_direct_sh_t *sh, int w, int r, int k,
                                                        uint64_t v) {
  pl_a2av_cur_t *c = &sh->cur;
  const int nb = w * w;
  const uint64_t *st = sh->fst, es = sh->x.c.esize;
  uint64_t g1;
  sh->sp_bytes[k] = 0;
  int more = pl_flat_next(st, nb, c->x1, &c->b, c->g, &g1);
  while (!more && c->nx < c->NQ) {
    const uint64_t q = (uint64_t)r * c->NQ + c->nx;
    c->nx = atomicAdd(&a->state->dq, 1ull); /* used at the next part */
    pl_flat_part(st, nb, q, c->Q, v, &c->g, &c->x1, &c->b);
    more = pl_flat_next(st, nb, c->x1, &c->b, c->g, &g1);
  }
  if (!more) return;
  const int b = c->b, s = b / w, d = b - s * w;
  const uint64_t off = c->g - st[b];
  sh->sp_src[k] = (s == r ? a->x.send : sh->psend[s]) + (sh->fsd[b] + off) * es;
  sh->sp_dst[k] = (d == r ? a->x.recv : (char *)sh->precv[d]) + (sh->frd[b] + off) * es;
  sh->sp_bytes[k] = (g1 - c->g) * es;
  c->g = g1;
}

template <int UNR, int CS>
PL_DEV void pl_direct_a2av_spread(const pl_cuda_args_t *a, pl_direct_sh_t *sh,
                                  const uint64_t *hdr, const uint64_t *my, int w, int r) {
  const uint64_t es = sh->x.c.esize, hw = pl_hdr_words(w), v = es >= 16 ? 1 : 16 / es;
  const int tid = threadIdx.x, nb = w * w;
  if (tid < nb) { /* block (s, d): rank s's sendcounts[d] and sdispls[d], in its header */
    const int s = tid / w;
    const uint64_t *h = s == r ? my : hdr + (uint64_t)s * hw;
    sh->fst[tid] = h[PL_HDR_FIXED + tid - s * w];
    sh->fsd[tid] = h[PL_HDR_FIXED + w + tid - s * w];
  }
  __syncthreads();
  if (tid < 2 * w) pl_flat_step(sh->fst, sh->frd, sh->gtot, w, 0, tid);
  __syncthreads();
  if (tid < w) pl_flat_step(sh->fst, sh->frd, sh->gtot, w, 1, tid);
  __syncthreads();
  if (tid == 0) {
    pl_a2av_cur_t c = {0, 0, 0, 0, 0, 0};
    const uint64_t G = gridDim.x;
    if (a->dqueue) { /* an empty first part: the take below starts part nx */
      c.NQ = pl_flat_nparts(sh->fst, nb, r, w, v, es, a->dqueue);
      c.Q = (uint64_t)w * (c.NQ ? c.NQ : 1);
      c.nx = atomicAdd(&a->state->dq, 1ull);
    } else {
      c.Q = (uint64_t)w * G;
      pl_flat_part(sh->fst, nb, (uint64_t)r * G + blockIdx.x, c.Q, v, &c.g, &c.x1, &c.b);
    }
    sh->cur = c;
    pl_direct_a2av_take(a, sh, w, r, 0, v);
  }
  for (int k = 0;; k ^= 1) {
    __syncthreads(); /* buffer k is written; every thread is done with buffer k ^ 1 */
    const uint64_t n = sh->sp_bytes[k];
    if (!n) break;
    pl_direct_copy<UNR, CS, 1>(sh->sp_dst[k], sh->sp_src[k], n, a->dalign);
    if (tid == 0) pl_direct_a2av_take(a, sh, w, r, k ^ 1, v);
  }
}

/* Thread s, round k: what this rank reads of rank s (its buffer, mapped here, or its staging) and
 * where it goes (push: pl_direct_push). */
template <int RED>
PL_DEV void pl_direct_round(const pl_cuda_args_t *a, pl_direct_sh_t *sh, int w, int r, int s,
                            uint64_t k, int push) {
  const pl_snac_t *X = &a->x;
  const pl_call_t *c = &sh->x.c;
  const uint64_t es = c->esize, n = c->count, P = sh->piece, lo = k * P;
  const char *send = s == r ? X->send : sh->psend[s]; /* NULL: s stages */
  const char *stg = pl_direct_stg(a, sh, s);
  unsigned mis = 0;
  if (!RED) {
    /* AllToAllV: my block in rank s's input at its sdispls[r] (its header), mine at my sdispls[r] */
    const int a2av = c->coll == PL_COLL_ALL_TO_ALL_V, v = a2av || c->coll == PL_COLL_ALL_GATHER_V;
    const int a2a = a2av || c->coll == PL_COLL_ALL_TO_ALL;
    if (sh->pkt[s]) { /* (pl_direct_pkts) */
      sh->src[s] = sh->dst[s] = NULL;
      sh->bytes[s] = 0;
      return;
    }
    uint64_t off = a2av ? (s == r ? c->sdispls[r] * es : sh->pdispl[s])
                   : a2a ? (uint64_t)r * n * es : 0;
    sh->bytes[s] = pl_direct_piece((v ? c->rcounts[s] : n) * es, P, k);
    sh->src[s] = send ? send + off + lo : stg + (a2a ? (uint64_t)r * P : 0);
    sh->dst[s] = X->recv + (v ? c->rdispls[s] * es : (uint64_t)s * n * es) + lo;
    return;
  }
  if (c->coll == PL_COLL_ALL_REDUCE) {
    uint64_t base, nk, per;
    pl_direct_win(a, sh, k, &base, &nk, &per);
    const uint64_t b0 = pl_ar_shard_at(per, nk, r), b1 = pl_ar_shard_at(per, nk, r + 1);
    const uint64_t s0 = pl_ar_shard_at(per, nk, s), s1 = pl_ar_shard_at(per, nk, s + 1);
    sh->src[s] = send ? send + (base + b0) * es : stg + pl_direct_ar_slot(a, sh, r, b0);
    if (s == r) {
      char *stg_out = X->zc_recv ? NULL : pl_direct_stg(a, sh, r) + pl_direct_ar_slot(a, sh, r, b0);
      sh->red_out[0] = X->recv + (base + b0) * es;
      sh->red_bytes = (b1 - b0) * es;
      sh->nred_out = push ? w : stg_out ? 2 : 1;
      if (!push && stg_out) sh->red_out[1] = stg_out;
      mis |= (unsigned)((uintptr_t)sh->red_out[0] & 15) | (unsigned)((uintptr_t)stg_out & 15);
    } else if (push) { /* rank s's output at my shard, in slot (s - r) mod w */
      char *o = (char *)sh->precv[s] + (base + b0) * es;
      sh->red_out[s > r ? s - r : s - r + w] = o;
      mis |= (unsigned)((uintptr_t)o & 15);
    } else {
      sh->src2[s] = sh->precv[s] ? sh->precv[s] + (base + s0) * es : stg + pl_direct_ar_slot(a, sh, s, s0);
      sh->dst2[s] = X->recv + (base + s0) * es;
      sh->bytes2[s] = (s1 - s0) * es;
    }
  } else {
    /* RS: shard r at r * count in everyone's input; RSV: at rank s's own sdispls[r] (its header) */
    const int rs = c->coll == PL_COLL_REDUCE_SCATTER;
    const uint64_t off = rs ? (uint64_t)r * n * es : s == r ? c->sdispls[r] * es : sh->pdispl[s];
    sh->src[s] = send ? send + off + lo : stg + (uint64_t)r * P;
    if (s == r) {
      sh->red_out[0] = X->recv + lo;
      sh->nred_out = 1;
      sh->red_bytes = pl_direct_piece((rs ? n : c->rcounts[r]) * es, P, k);
      mis |= (unsigned)((uintptr_t)sh->red_out[0] & 15);
    }
  }
  mis |= (unsigned)((uintptr_t)sh->src[s] & 15);
  if (mis) atomicOr(&sh->misalign, 1u);
}

/* The value of flag phase p (1 staged, 2 AllReduce's shard reduced, 3 read) of round k of call
 * e: grows with e, k and p on every slot. */
PL_DEV uint64_t pl_direct_val(uint64_t e, uint64_t k, int p) {
  return ((e << PL_DIRECT_ROUND_BITS) + k) * 4 + (uint64_t)p;
}

/* A staging rank's round k: this CTA copies part c of every piece its peers read from it. */
PL_DEV void pl_direct_stage(const pl_cuda_args_t *a, pl_direct_sh_t *sh, int w, int r,
                            uint64_t k) {
  if ((int)threadIdx.x < w) pl_direct_cin(a, sh, w, r, (int)threadIdx.x, k);
  __syncthreads();
  for (int j = 0; j < w; j++) {
    uint64_t lo, hi;
    pl_direct_rpart(sh, sh->cin_bytes[j], &lo, &hi);
    pl_direct_copy<8, 0>(sh->cin_dst[j] + lo, sh->cin_src[j] + lo, hi - lo);
  }
}

/* AllToAllV's round 0, after the headers: out of line (a third copy of the staging loop inlined
 * put the gather kernels over their register cap: 12 bytes of spills, ptxas -v). */
static __device__ __noinline__ void pl_direct_stage_late(const pl_cuda_args_t *a, pl_direct_sh_t *sh,
                                                         int w, int r) {
  pl_direct_stage(a, sh, w, r, 0);
}

/* Thread 0, AllToAllV with some rank staging: the rounds of the largest block any direct rank sends
 * another (its own included: a rank copies its own block round by round too) from every header (h:
 * the peers', my: mine), the same on every direct rank. Out of line (a cold path of thread 0). */
static __device__ __noinline__ void pl_direct_a2av_rounds(pl_direct_sh_t *sh, const uint64_t *h,
                                                          const uint64_t *my, int w, int r) {
  const uint64_t hw = pl_hdr_words(w);
  uint64_t most = 0;
  for (int q = 0; q < w; q++) {
    if (sh->pkt[q]) continue; /* (packets: never in the rounds; the same on every direct rank) */
    const uint64_t *hq = q == r ? my : h + (uint64_t)q * hw;
    for (int d = 0; d < w; d++)
      if (!sh->pkt[d] && hq[PL_HDR_FIXED + d] > most) most = hq[PL_HDR_FIXED + d];
  }
  sh->rounds = pl_direct_rounds(most * sh->x.c.esize, sh->piece);
  if (sh->rounds >= ((uint64_t)1 << PL_DIRECT_ROUND_BITS)) {
    sh->rounds = 1;
    pl_direct_fail(sh, PURLIN_ERR_UNSUPPORTED, -1,
                   "AllToAllV's largest block: too many rounds of the staging (raise "
                   "PURLIN_STAGING_BYTES)");
  }
}

/* AllToAllV with packet peers (sh->pkt: ranks whose blocks are all packets run the lean, tiny or
 * SNAC kernel): every thread of the grid a share of their packets, in their wire format (packet i,
 * in the sender's slot of the receiver's window after the header, carries bytes [8i, 8i + 8) of
 * the block and the flag f1). !get: my block for each, into its window; get: its block for me,
 * awaited in mine and unpacked into my output. Such a rank's blocks to and from every rank are
 * packets, so every rank that runs this kernel takes it the same way; its header has no zero
 * copy, so the spread is off (kinds bit 4). Out of line: a cold path of large calls. */
static __device__ __noinline__ void pl_direct_pkts(const pl_cuda_args_t *a, pl_direct_sh_t *sh,
                                                   int w, int r, uint64_t f1, int get,
                                                   pl_wait_t wt) {
  const pl_snac_t *X = &a->x;
  const pl_call_t *c = &sh->x.c;
  const uint64_t es = c->esize, par = sh->epoch & 1, hw = pl_hdr_words(w);
  const uint64_t nt = (uint64_t)blockDim.x * gridDim.x, t = blockIdx.x * (uint64_t)blockDim.x +
                                                             threadIdx.x;
  for (int s = 0; s < w && !sh->stop; s++) {
    if (!sh->pkt[s]) continue;
    if (!get) {
      char *win = X->ws[s] + X->geom.pkt_off + (par * (uint64_t)w + (uint64_t)r) * X->geom.pkt_win;
      pl_pkt_put(win + 16 * hw, X->send + c->sdispls[s] * es, c->scounts[s] * es, f1, t, nt);
    } else {
      const char *win = X->ws[r] + X->geom.pkt_off + (par * (uint64_t)w + (uint64_t)s) *
                                                         X->geom.pkt_win;
      int st = pl_pkt_get_part(X->recv + c->rdispls[s] * es, win + 16 * hw, c->rcounts[s] * es, f1,
                               PL_READY_EPOCH, &wt, t, nt);
      if (st) pl_direct_fail(sh, st, s, "its packets");
    }
  }
}

/* Thread 0 of a failed CTA: the verdict on a mismatch (SNAC's check names the field; the other
 * CTAs stop without recording), the report. */
static __device__ __noinline__ void pl_direct_report(const pl_cuda_args_t *a, pl_direct_sh_t *sh,
                                                     uint64_t *hdr, const uint64_t *my, int st) {
  if (st == PURLIN_ERR_MISMATCH && blockIdx.x == 0) {
    const int w = sh->x.c.world;
    const uint64_t hw = pl_hdr_words(w);
    for (uint64_t q = 0; q < hw; q++) hdr[(uint64_t)sh->x.c.rank * hw + q] = my[q];
    sh->x.hdr = hdr;
    if (!pl_snac_hdr_check(&sh->x)) pl_snac_mis(&sh->x, "header", -1, 0, 0, 0, 0); /* not reached */
  }
  pl_dev_report_x(a, &sh->x, sh->err_peer, sh->err_what, st);
}

/* The j-th peer this rank reads in the queue's order: r + 1 + j mod world. */
PL_DEV int pl_direct_qpeer(int w, int r, int j) {
  return r + 1 + j < w ? r + 1 + j : r + 1 + j - w;
}

/* Thread 0: piece i of the queue into buffer b of sh (its peer s, -1 past the last, and bytes). */
PL_DEV void pl_direct_qtake(const pl_cuda_args_t *a, pl_direct_sh_t *sh, int w, int r,
                            uint64_t i, int b) {
  int j;
  uint64_t k;
  sh->qs[b] = -1;
  if (!pl_direct_qpiece(sh->qm, w, i, &j, &k)) return;
  const int s = pl_direct_qpeer(w, r, j);
  pl_direct_qrange(sh->bytes[s], sh->qa[j], a->dqueue, k, &sh->qlo[b], &sh->qhi[b]);
  sh->qs[b] = s;
}

/* The gathers' round of whole blocks with the piece queue (PURLIN_DIRECT_QUEUE; direct_plan.h,
 * pl_direct_qpiece): the CTAs take pieces of a->dqueue bytes of the peers' blocks from this rank's
 * counter (pl_cuda_state_t.dq, zeroed by the call's last CTA), thread 0 asking for the next one as
 * the CTA starts a piece (its latency under the copy), one barrier per piece. With parts fixed
 * per CTA, the CTAs' ends spread over a third of the data time on equal parts (finding 32); from a
 * counter, the CTAs the memory serves faster take more. Safe with zero copy: "done" (CTA c of
 * every peer) comes after all of a rank's CTAs, whichever read what. The idea is dynamic
 * scheduling by an atomic work counter, as in persistent GEMM kernels' tile schedulers (CUTLASS's
 * stream-K) and NCCL's work FIFO; the code is purlin's. */
template <int UNR, int CS>
PL_DEV void pl_direct_queue(const pl_cuda_args_t *a, pl_direct_sh_t *sh, int w, int r) {
  const int tid = threadIdx.x;
  unsigned long long *ctr = &a->state->dq;
  if (tid < w) {
    const int s = pl_direct_qpeer(w, r, tid);
    const int mine = sh->src[s] == sh->dst[s]; /* my own block, in place */
    sh->qa[tid] = (uint32_t)((uintptr_t)sh->dst[s] & (a->dalign - 1));
    sh->qm[tid] = mine ? 0 : pl_direct_qpieces(sh->bytes[s], sh->qa[tid], a->dqueue);
  }
  __syncthreads();
  if (tid == 0) pl_direct_qtake(a, sh, w, r, atomicAdd(ctr, 1ull), 0);
  for (int b = 0;; b ^= 1) {
    __syncthreads(); /* buffer b is written; every thread is done with buffer b ^ 1 */
    const int s = sh->qs[b];
    if (s < 0) break;
    const uint64_t lo = sh->qlo[b], hi = sh->qhi[b];
    unsigned long long nx = 0;
    if (tid == 0) nx = atomicAdd(ctr, 1ull); /* used after the copy */
    pl_direct_copy<UNR, CS, 1>(sh->dst[s] + lo, sh->src[s] + lo, hi - lo, a->dalign);
    if (tid == 0) pl_direct_qtake(a, sh, w, r, nx, b ^ 1);
  }
}

/* Round k's reads: copies (the gathers), my shard's reduction and (AllReduce, unless it pushes)
 * the copies of every peer's reduced shard. */
template <int DT, int OP, int UNR, int CS>
PL_DEV void pl_direct_consume(const pl_cuda_args_t *a, pl_direct_sh_t *sh, int w, int r,
                              uint64_t k, const pl_wait_t *wd, int push) {
  uint64_t lo, hi;
  if constexpr (DT < 0) {
    if (a->dqueue && !(sh->kinds & 1u)) { /* one round, no rank stages (a staged part is there
                                               for the same CTA of a peer only: phase 1) */
      pl_direct_queue<UNR, CS>(a, sh, w, r);
      return;
    }
    for (int j = 0; j < w; j++) { /* CTA c starts at peer r + 1 + c: the peers' reads spread */
      int s = (r + 1 + (int)blockIdx.x + j) % w;
      if (sh->src[s] == sh->dst[s]) continue; /* my own block, in place */
      pl_direct_rpart(sh, sh->bytes[s], &lo, &hi);
      pl_direct_copy<UNR, CS, 1>(sh->dst[s] + lo, sh->src[s] + lo, hi - lo, a->dalign);
    }
  } else {
    pl_direct_rpart(sh, sh->red_bytes, &lo, &hi);
    const int op = OP >= 0 ? OP : a->x.c.op;
    pl_direct_reduce<DT, OP, UNR>(sh, w, op, lo, hi); /* UNR: the sources loaded together */
    if (a->x.c.coll == PL_COLL_ALL_REDUCE && !push) {
      pl_direct_sync(a, sh, w, r, pl_direct_val(sh->epoch, k, 2), wd, "its reduced shard");
      for (int j = 0; j < w - 1 && !sh->stop; j++) { /* every peer once, from r + 1 + c */
        int s = (r + 1 + ((int)blockIdx.x + j) % (w - 1)) % w;
        pl_direct_rpart(sh, sh->bytes2[s], &lo, &hi);
        pl_direct_copy<8, 0>(sh->dst2[s] + lo, sh->src2[s] + lo, hi - lo);
      }
    }
  }
}

/* PURLIN_PROFILE, thread 0 of every CTA at the end of its data (its CTA done with it): its entry,
 * data start (sh->pt) and end into the call's stamps (pl_cuda_state_t.dcur). */
static __device__ __noinline__ void pl_direct_prof(pl_cuda_state_t *ps, const pl_direct_sh_t *sh) {
  unsigned long long *c = (unsigned long long *)ps->dcur;
  const uint64_t d1 = pl_globaltimer(), t0 = sh->pt[0], d0 = sh->pt[1];
  atomicMax(c + PL_DPROF_T0, ~t0);
  atomicMax(c + PL_DPROF_D0F, ~d0);
  atomicMax(c + PL_DPROF_D0L, d0);
  atomicMax(c + PL_DPROF_D1F, ~d1);
  atomicMax(c + PL_DPROF_D1L, d1);
  atomicAdd(c + PL_DPROF_SUM, d1 - d0);
  atomicMax(c + PL_DPROF_MAX, d1 - d0);
}

/* The call's last CTA (every other CTA's stamps are in, before its exit count): the call's phases
 * into dsum (a call that failed is not counted), the stamps cleared for the next call. */
static __device__ __noinline__ void pl_direct_prof_fold(pl_cuda_state_t *ps, unsigned G, int st) {
  volatile uint64_t *c = ps->dcur;
  uint64_t *d = ps->dsum;
  const uint64_t t1 = pl_globaltimer(), t0 = ~c[PL_DPROF_T0], d0f = ~c[PL_DPROF_D0F];
  const uint64_t d0l = c[PL_DPROF_D0L], d1f = ~c[PL_DPROF_D1F], d1l = c[PL_DPROF_D1L];
  if (!st && d1l) {
    d[0]++;
    d[1] += d0f - t0;                 /* entry to the first CTA's data: headers, agreement */
    d[2] += d0l - d0f;                /* the CTAs' data start skew */
    d[3] += d1l - d0f;                /* the data span: first start to last end */
    d[4] += c[PL_DPROF_SUM] / G;      /* a CTA's data time, the mean */
    d[5] += d1f - d0f;                /* the first CTA done */
    d[6] += c[PL_DPROF_MAX];          /* the longest CTA */
    d[7] += t1 - d1l;                 /* the last data end to the exit: packets, the done wait */
    d[8] += t1 - t0;                  /* the kernel */
  }
  for (int i = 0; i < 7; i++) c[i] = 0;
}

/* DT: the reduction's dtype (AllReduce, ReduceScatter(V)), -1 for the gathers; OP: the op as a
 * constant (SUM), -1: the call's; UNR, CS: the gathers' loads in flight per thread, streaming. */
template <int DT, int OP, int UNR, int CS>
__global__ void __launch_bounds__(PL_DIRECT_THREADS, 1)
    pl_direct_kernel(const __grid_constant__ pl_cuda_args_t args) {
  __shared__ pl_direct_sh_t sh;
  __shared__ uint64_t hdr_sh[PL_CUDA_SH_HDR_WORDS];   /* the peers' headers, when they fit */
  __shared__ uint64_t my[PL_HDR_FIXED + 3 * PL_MAX_WORLD]; /* mine */
  const pl_snac_t *X = &args.x;
  const int w = X->c.world, r = X->c.rank, tid = threadIdx.x, nt = blockDim.x;
  const int coll = X->c.coll;
  const uint64_t hw = pl_hdr_words(w);
  /* else lane 0's slot of the arguments' header array: every CTA writes the same words there */
  uint64_t *hdr = (uint64_t)w * hw <= PL_CUDA_SH_HDR_WORDS ? hdr_sh : args.hdr;
  /* prologue: the call into shared memory (its V counts from the arguments' copies), the epoch,
   * the abort word */
  {
    const uint64_t *s = (const uint64_t *)X;
    uint64_t *d = (uint64_t *)&sh.x;
    for (unsigned i = tid; i < sizeof(pl_snac_t) / 8; i += nt) d[i] = s[i];
  }
  if (pl_coll_is_v(coll))
    for (int k = tid; k < 4 * w; k += nt) sh.v[k / w][k % w] = args.v[k / w][k % w];
  for (int k = tid; k < PL_MAX_WORLD; k += nt) sh.pkt[k] = 0;
  if (tid == 0) {
    sh.epoch = *(volatile uint64_t *)&args.state->epoch;
    sh.stop = sh.err = sh.mis = 0;
    sh.err_peer = -1;
    sh.err_what = NULL;
    sh.misalign = 0;
    sh.kinds = 0;
    sh.piece = args.dpiece;
    sh.slot = args.dslot;
    sh.rounds = args.drounds;
    sh.aborted = pl_ld_acquire_sys(&((const pl_ctrl_t *)X->ws[r])->abort) != 0;
    if (args.prof) sh.pt[0] = pl_globaltimer();
  }
  __syncthreads();
  const uint64_t epoch = sh.epoch, par = epoch & 1, f1 = epoch * PL_EPOCH_STRIDE + 1;
  if (tid == 0) {
    sh.x.epoch = epoch;
    sh.x.lane = (int)blockIdx.x; /* CTA 0 records a mismatch's verdict (pl_dev_report_x) */
    sh.x.c.scounts = sh.v[0];
    sh.x.c.sdispls = sh.v[1];
    sh.x.c.rcounts = sh.v[2];
    sh.x.c.rdispls = sh.v[3];
    pl_snac_hdr_build(&sh.x, my);
    my[0] |= (uint64_t)(PL_HDR_DIRECT | (args.dpush ? 0u : PL_HDR_NOPUSH)) << 48;
  }
  __syncthreads();
  const int stager = !X->zc_send; /* my input is read in my staging */
  pl_ctrl_t *me = (pl_ctrl_t *)X->ws[r];
  pl_wait_t wd = {&me->abort, &me->err_epoch, epoch + 1, (const volatile int *)&sh.stop,
                  args.timeout_ns, 0, args.backoff_ns};
  pl_wait_t wh = wd;
  wh.group = NULL; /* a header wait ends only with its header: the verdict needs every rank's */
  if (!sh.aborted) {
    /* notify: CTA 0 pushes my header into my window at every peer */
    const uint32_t nh = (uint32_t)(w - 1) * (uint32_t)hw;
    if (blockIdx.x == 0)
      for (uint32_t k = tid; k < nh; k += nt) {
        uint32_t j = k / (uint32_t)hw, q = k - j * (uint32_t)hw;
        int d = r + 1 + (int)j;
        d = d >= w ? d - w : d;
        pl_pkt_t *win = (pl_pkt_t *)(X->ws[d] + X->geom.pkt_off +
                                     (par * (uint64_t)w + (uint64_t)r) * X->geom.pkt_win);
        pl_st_pkt(win + q, my[q], f1);
      }
    /* stage: a rank whose input is not peer-mapped copies round 0 of it into its staging half
     * (free: every peer has finished the call that last used it, the one before the previous);
     * AllToAllV after the headers: its rounds, and with them the CTAs' split of a slot
     * (pl_direct_rsplit), are known only then */
    if (stager && coll != PL_COLL_ALL_TO_ALL_V) pl_direct_stage(&args, &sh, w, r, 0);
    /* every peer's header, from its window here (every CTA: each needs the peers' arrival) */
    for (uint32_t k = tid; k < nh; k += nt) {
      uint32_t j = k / (uint32_t)hw, q = k - j * (uint32_t)hw;
      int s = r + 1 + (int)j;
      s = s >= w ? s - w : s;
      const pl_pkt_t *win = (const pl_pkt_t *)(X->ws[r] + X->geom.pkt_off +
                                               (par * (uint64_t)w + (uint64_t)s) * X->geom.pkt_win);
      uint64_t v = 0;
      int st = pl_wait_pkt(win + q, f1, PL_READY_EPOCH, &wh, &v);
      if (st) pl_direct_fail(&sh, st, s, "the call's header");
      hdr[(uint64_t)s * hw + q] = v;
    }
    /* (every decision that leads to a barrier is taken on __syncthreads_or's uniform answer) */
    int stop = __syncthreads_or(sh.stop);
    /* agree: what pl_snac_hdr_check checks, every thread a share (a difference: the verdict
     * names it on the failure path). AllToAllV: a rank that runs another kernel must have packets
     * only (no PL_HDR_BIG: pl_hdr_mixbits), and exchanges them (sh.pkt, pl_direct_pkts) */
    if (!stop) {
      const uint32_t uw = (uint32_t)w, a2av = DT < 0 && coll == PL_COLL_ALL_TO_ALL_V,
                     vc = a2av || coll == PL_COLL_ALL_GATHER_V || coll == PL_COLL_REDUCE_SCATTER_V;
      for (uint32_t k = tid; k < uw + (vc ? uw * uw : 0); k += nt) {
        int bad;
        if (k < uw) {
          const uint64_t *h = k == (uint32_t)r ? my : hdr + (uint64_t)k * hw;
          const int other = !(h[0] >> 48 & PL_HDR_DIRECT);
          bad = ((h[0] ^ my[0]) & 0xffffffffffffull) || h[6] != (uint64_t)w ||
                (!vc && h[1] != my[1]) ||
                (coll == PL_COLL_ALL_GATHER_V && h[1] != my[PL_HDR_FIXED + k]) ||
                (other && !(a2av && pl_hdr_mixbits(h[0]) == 0u));
          if (a2av && other) sh.pkt[k] = 1;
        } else if (a2av) { /* what s sends d is what d receives from s, every pair */
          uint32_t s = (k - uw) / uw, d = (k - uw) - s * uw;
          const uint64_t *hs = s == (uint32_t)r ? my : hdr + (uint64_t)s * hw;
          const uint64_t *hd = d == (uint32_t)r ? my : hdr + (uint64_t)d * hw;
          bad = hs[PL_HDR_FIXED + d] != hd[PL_HDR_FIXED + 2 * uw + s];
        } else {
          uint32_t s = (k - uw) / uw, i = (k - uw) - s * uw;
          bad = s != (uint32_t)r && hdr[(uint64_t)s * hw + PL_HDR_FIXED + i] != my[PL_HDR_FIXED + i];
        }
        if (bad) {
          atomicExch(&sh.mis, 1);
          atomicExch((int *)&sh.stop, 1);
        }
      }
    }
    stop = __syncthreads_or(sh.stop);
    const int mis = sh.mis; /* uniform: set before that barrier only */
    if (!stop && tid < w) {
      int bad = pl_direct_peers(&args, &sh, tid == r ? my : hdr + (uint64_t)tid * hw, w, r, tid);
      if (bad) pl_direct_fail(&sh, PURLIN_ERR_INTERNAL, tid, "a peer's purlin_mem_alloc buffer");
    }
    stop = __syncthreads_or(sh.stop);
    const unsigned kinds = sh.kinds; /* uniform: every rank derives it from the same headers */
    if (args.prof && blockIdx.x == 0 && tid == 0) atomicAdd(&args.state->dkinds[kinds & 31u], 1u);
    /* the same on every rank: from the headers alone (PL_HDR_NOPUSH) */
    const int push = (DT >= 0 || coll == PL_COLL_ALL_TO_ALL_V) && pl_direct_push(coll, kinds, w);
    /* no rank stages: one round of whole blocks (the host planned rounds that fit a staging half,
     * not knowing the peers' buffers; in rounds, a CTA's part is a fixed range of a slot, so a block
     * smaller than the slot fell to a few CTAs: AllGatherV and ReduceScatterV with Zipf blocks ran
     * at 1.3-1.9x the floor) */
    if (!(kinds & 1)) {
      if (tid == 0) {
        sh.piece = (uint64_t)1 << 62;
        sh.slot = sh.piece;
        sh.rounds = 1;
      }
      __syncthreads();
    } else if (DT < 0 && coll == PL_COLL_ALL_TO_ALL_V && !stop) { /* (a gather: not compiled into
                                                                    the reduction kernels) */
      /* AllToAllV staged: its rounds from the headers (the host knows only its own row) */
      if (tid == 0) pl_direct_a2av_rounds(&sh, hdr, my, w, r);
      stop = __syncthreads_or(sh.stop);
      /* round 0 of my input, with the split every reader uses (staged before the rounds were
       * known, a block smaller than the slot was split by its own size in round 0 and by the
       * slot's in the readers' CTAs: CTA c read what another CTA wrote, unordered) */
      if (stager && !stop) pl_direct_stage_late(&args, &sh, w, r);
    }
    if (args.prof && tid == 0) sh.pt[1] = pl_globaltimer();
    /* my blocks for the packet peers first: they wait for nothing else */
    if ((kinds & 16u) && !stop) pl_direct_pkts(&args, &sh, w, r, f1, 0, wd);
    const uint64_t R = sh.rounds;
    /* one round: no rank stages */
    const int spread = push && (coll == PL_COLL_REDUCE_SCATTER_V || coll == PL_COLL_ALL_TO_ALL_V);
    if (spread) {
      if constexpr (DT >= 0) {
        if (!stop) pl_direct_spread<DT, OP, UNR>(&args, &sh, hdr, my, w, r);
      } else {
        if (!stop) pl_direct_a2av_spread<UNR, CS>(&args, &sh, hdr, my, w, r);
      }
    } else {
      for (uint64_t k = 0; k < R && !stop; k++) {
        if (k > 0) {
          /* round k reuses the staging: every peer has read round k - 1's */
          if (kinds & 1) pl_direct_sync(&args, &sh, w, r, pl_direct_val(epoch, k - 1, 3), &wd,
                                        "its reads of my staging");
          stop = __syncthreads_or(sh.stop); /* a failed wait: no peer's reads are known done */
          if (stop) break;
          if (stager) pl_direct_stage(&args, &sh, w, r, k);
        }
        /* a rank that stages: its part c of round k is there (zero copy everywhere: the header) */
        if (kinds & 1) pl_direct_sync(&args, &sh, w, r, pl_direct_val(epoch, k, 1), &wd,
                                      "its staged input");
        if (tid < w) pl_direct_round<(DT >= 0)>(&args, &sh, w, r, tid, k, push);
        stop = __syncthreads_or(sh.stop);
        if (stop) break;
        /* consume */
        pl_direct_consume<DT, OP, UNR, CS>(&args, &sh, w, r, k, &wd, push);
        stop = __syncthreads_or(sh.stop);
      }
    }
    if (args.prof) { /* (uniform) */
      __syncthreads();
      if (tid == 0 && !stop) pl_direct_prof(args.state, &sh);
    }
    /* the packet peers' blocks for me, there long since */
    if ((kinds & 16u) && !stop) pl_direct_pkts(&args, &sh, w, r, f1, 1, wd);
    /* done: every peer has read what it reads of my buffers (a mismatch skips it on every rank;
     * staging alone needs none: the call after next reuses it, when every peer has finished this
     * one) */
    if (!mis && (kinds & 2))
      pl_direct_sync(&args, &sh, w, r, pl_direct_val(epoch, R - 1, 3), &wd,
                     "its reads of my buffers");
  }
  __syncthreads();
  if (tid == 0) {
    int st = sh.aborted ? PURLIN_ERR_REMOTE : sh.err ? sh.err : sh.mis ? PURLIN_ERR_MISMATCH : 0;
    if (sh.mis && (!sh.err || sh.err == PL_CUDA_STOP_SIBLING)) st = PURLIN_ERR_MISMATCH;
    if (st) pl_direct_report(&args, &sh, hdr, my, st);
    if (gridDim.x == 1) {
      if (args.prof) pl_direct_prof_fold(args.state, 1u, st);
      args.state->dq = 0;
      *(volatile uint64_t *)&args.state->epoch = epoch + 1;
    } else {
      __threadfence();
      if (atomicAdd(&args.state->exit_count, 1u) == gridDim.x - 1) {
        if (args.prof) {
          __threadfence();
          pl_direct_prof_fold(args.state, gridDim.x, st);
        }
        args.state->exit_count = 0;
        args.state->dq = 0; /* every CTA is done with the piece queue */
        *(volatile uint64_t *)&args.state->epoch = epoch + 1;
      }
    }
  }
}

template <int DT, int OP, int UNR, int CS>
static cudaError_t pl_direct_go(const pl_cuda_args_t *args, int grid, cudaStream_t s) {
  pl_direct_kernel<DT, OP, UNR, CS><<<grid, PL_DIRECT_THREADS, 0, s>>>(*args);
  cudaError_t e = cudaGetLastError();
  return e;
}

/* A reduction's kernel: SUM as a constant, any other op the call's. */
template <int DT, int UNR>
static cudaError_t pl_direct_go_red(const pl_cuda_args_t *args, int sum, int grid, cudaStream_t s) {
  return sum ? pl_direct_go<DT, PURLIN_SUM, UNR, 0>(args, grid, s)
             : pl_direct_go<DT, -1, UNR, 0>(args, grid, s);
}

cudaError_t pl_cuda_direct_launch(const pl_cuda_args_t *args, int grid, cudaStream_t s) {
  int dt = pl_coll_is_reduce(args->x.c.coll) ? args->x.c.dtype : -1;
  int sum = args->x.c.op == PURLIN_SUM;
  switch (dt) {
#define PL_DIRECT_CASE_(name, suffix, bytes)                                                       \
  case PURLIN_##name:                                                                              \
    if (args->dredb == 4) /* 2-byte types: 4 sources loaded together (the others: 8 anyway) */   \
      return pl_direct_go_red<PURLIN_##name, PL_DIRECT_RB4_(bytes)>(args, sum, grid, s);          \
    return pl_direct_go_red<PURLIN_##name, 8>(args, sum, grid, s);
    PURLIN_DTYPE_MAP(PL_DIRECT_CASE_)
#undef PL_DIRECT_CASE_
  default:
    if (args->dunroll == 4 && args->dstream) return pl_direct_go<-1, -1, 4, 1>(args, grid, s);
    if (args->dunroll == 4) return pl_direct_go<-1, -1, 4, 0>(args, grid, s);
    if (args->dstream) return pl_direct_go<-1, -1, 8, 1>(args, grid, s);
    return pl_direct_go<-1, -1, 8, 0>(args, grid, s);
  }
}
