/* ce.cu -- the copy-engine atom (PURLIN_ATOM=ce): AllGather, AllToAll and their V variants whose
 * payload moves with cudaMemcpyAsync (the GPU's copy engines), so that no SM touches the data and
 * the collective overlaps with compute (DESIGN.md "Copy engines as an atom"). The idea is NCCL's
 * copy-engine collectives and MSCCL++'s PortChannel: the data path is a DMA engine, the
 * synchronisation is flags in symmetric memory. Reductions keep the SM kernel of the auto atom.
 *
 * One call is one or more sequences (one epoch each), all on the caller's stream:
 *
 *   hdr    one-CTA kernel: SNAC's header packets out and in, SNAC's header check (MISMATCH,
 *          TIMEOUT, abort exactly as the SM kernel) plus the ce checks (every rank runs ce, the
 *          same number of sequences); having every peer's header of this call also means every
 *          peer finished its previous call, so nobody still reads my staging
 *   stage  cudaMemcpyAsync: my blocks into my staging (both halves: one region)
 *   sync   one-CTA kernel: publish "staged" to every peer, wait for every peer's
 *   copy   cudaMemcpyAsync: every peer's block from its staging (through the symmetric mapping)
 *          into recv, and my own block, spread over side streams (fork/join with events)
 *   done   one-CTA kernel: publish "done reading" to every peer, wait for every peer's (so the next
 *          call, on any atom, may overwrite the staging); advances the device epoch
 *
 * The kernels read the epoch from device memory and spin with the library's waits (deadline,
 * abort, sibling failure), so timeouts, abort propagation and CUDA-graph replay work as on the SM
 * path; the copies' addresses do not depend on the epoch (fixed staging, no parity), so a captured
 * graph replays them unchanged. Flags are lane 0's `stage` and `done` of the control block, with
 * the same epoch values as the SM kernel's, so calls on either path interleave freely.
 *
 * Sizes: the staging region holds `cap` = 2 * stg_half bytes. AG/AGV stage one block for all
 * (bcast): a call is ceil(max block / cap) sequences. A2A stages one sub-slot of S = cap / world
 * per destination: ceil(block / S) sequences. A2AV: one sequence (the host knows only its own row
 * and column of the counts, so it cannot know how many sequences the others need); a block above S
 * is refused on every rank at once by the header kernel (UNSUPPORTED: raise PURLIN_STAGING_BYTES).
 * C in CUDA clothing: no classes, no exceptions. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "bootstrap.h"
#include "comm.h"
#include "log.h"
#include "param.h"
}
#include "cuda/ce.h"
#include "cuda/cuda_int.h"
#include "cuda/atom_cuda.cuh"
#include "snac/snac.h"

#define PL_CE_THREADS 128
#define PL_CE_MAX_STREAMS 8
/* Header word 7 (0 on the SM path): tag, sequences of the call, this sequence. */
#define PL_CE_TAG 0xCEull
#define PL_CE_MAX_SEQ ((uint64_t)1 << 24)

enum { PL_CE_HDR = 0, PL_CE_SYNC = 1, PL_CE_DONE = 2 };

typedef struct {
  int step;          /* PL_CE_HDR, PL_CE_SYNC, PL_CE_DONE */
  uint32_t seq, nseq;
  uint64_t slot;     /* A2AV: bytes per destination in the staging (S) */
} pl_ce_step_t;

struct pl_ce {
  pl_cuda_state_t *state;
  uint64_t *hdr;
  pl_cuda_err_t *err;
  int nstreams;
  cudaStream_t side[PL_CE_MAX_STREAMS];
  cudaEvent_t fork, join[PL_CE_MAX_STREAMS];
};

static __device__ uint64_t pl_ce_hdr_word(uint32_t seq, uint32_t nseq) {
  return PL_CE_TAG << 56 | (uint64_t)(nseq & 0xffffff) << 24 | (uint64_t)(seq & 0xffffff);
}

/* ---- device ---------------------------------------------------------------------------------- */

#include "cuda/report.cuh" /* pl_dev_report */

static __device__ int pl_ce_fail(pl_cuda_sh_t *sh, int st, int peer, const char *what) {
  sh->err_peer = peer;
  sh->err_what = what;
  return st;
}

/* The header step: SNAC's header out to every rank and in from every rank (pl_snac_main's first
 * half, without data packets: the plan's lat_max is 0), then the ce checks and SNAC's check. */
static __device__ int pl_ce_hdr(pl_atom_t *a, pl_cuda_sh_t *sh, const pl_ce_step_t *q) {
  pl_snac_t *x = &sh->x;
  int w = x->c.world, r = x->c.rank, st;
  uint64_t *myhdr = sh->myhdr;
  pl_snac_hdr_build(x, myhdr);
  __syncthreads();
  if (threadIdx.x == 0) myhdr[7] = pl_ce_hdr_word(q->seq, q->nseq);
  __syncthreads();
  pl_snac_push(a, x, myhdr);
  for (int i = 0; i < w; i++) {
    int s = (r + i) % w;
    st = pl_atom_pkt_get_async(a, pl_snac_hdr(x, s), pl_snac_win(x, r, s), pl_hdr_words(w) * 8,
                               pl_snac_val(x, 0), s, "the call's header (ce)",
                               (uint64_t)i * pl_hdr_words(w));
    if (st) return st;
  }
  if ((st = pl_atom_pkt_sync(a))) return st;
  /* Fatal, not MISMATCH: ranks that disagree here enqueued different numbers of sequences (or a
   * different protocol), so their epochs part; every rank sees every header: the same verdict. */
  for (int s = 0; s < w; s++) {
    uint64_t h7 = pl_snac_hdr(x, s)[7];
    if (h7 >> 56 != PL_CE_TAG)
      return pl_ce_fail(sh, PURLIN_ERR_INVALID_USAGE, s,
                        "a rank ran the SM kernel for a ce call (counts_on_device?)");
    if (h7 != pl_snac_hdr(x, 0)[7])
      return pl_ce_fail(sh, PURLIN_ERR_INVALID_USAGE, s,
                        "ce: ranks split the call differently (counts differ)");
  }
  if ((st = pl_snac_hdr_check(x))) return st;
  if (x->c.coll == PL_COLL_ALL_TO_ALL_V) /* sendcounts of every rank: all see the same */
    for (int s = 0; s < w; s++)
      for (int d = 0; d < w; d++)
        if (pl_snac_hdr(x, s)[PL_HDR_FIXED + d] * x->c.esize > q->slot)
          return pl_ce_fail(sh, PURLIN_ERR_UNSUPPORTED, s,
                            "ce a2av block > staging/world: raise PURLIN_STAGING_BYTES");
  return 0;
}

/* Publish `field` to every peer, then wait for every peer's. */
static __device__ int pl_ce_meet(pl_atom_t *a, pl_snac_t *x, uint64_t off, const char *what) {
  int w = x->c.world, r = x->c.rank, st;
  uint64_t v = pl_snac_val(x, 0);
  pl_snac_publish_all(a, x, off, v, 0);
  for (int i = 1; i < w; i++) {
    int s = (r + i) % w;
    st = pl_atom_await(a, (const uint64_t *)((const char *)pl_snac_fl(x, r, s) + off), v, s, what);
    if (st) return st;
  }
  return 0;
}

__global__ void __launch_bounds__(PL_CE_THREADS, 1)
    pl_ce_kernel(const __grid_constant__ pl_cuda_args_t args, const pl_ce_step_t q) {
  __shared__ pl_cuda_sh_t sh;
  __shared__ uint64_t hdr_sh[PL_CUDA_SH_HDR_WORDS];
  __shared__ int skip;
  const uint64_t *src = (const uint64_t *)&args.x;
  uint64_t *dst = (uint64_t *)&sh.x;
  for (unsigned i = threadIdx.x; i < sizeof(pl_snac_t) / 8; i += blockDim.x) dst[i] = src[i];
  for (unsigned i = threadIdx.x; i < 4 * PL_MAX_WORLD; i += blockDim.x)
    (&sh.v[0][0])[i] = (&args.v[0][0])[i];
  __syncthreads();
  if (threadIdx.x == 0) {
    sh.x.epoch = *(volatile uint64_t *)&args.state->epoch;
    sh.x.lane = 0;
    pl_dev_sh_setup(&sh, &args, hdr_sh); /* lane 0's headers */
    pl_ctrl_t *me = pl_snac_ctrl(&sh.x, sh.x.c.rank);
    /* 1: aborted (a kernel queued behind a failure must not run); 2: this rank gave this call up
     * (MISMATCH or a failure in an earlier step): the later steps only advance the epoch */
    skip = pl_ld_acquire_sys(&me->abort) != 0                                       ? 1
           : q.step != PL_CE_HDR && pl_ld_acquire_sys(&me->err_epoch) == sh.x.epoch + 1 ? 2
                                                                                  : 0;
  }
  __syncthreads();
  pl_atom_t a;
  memset(&a, 0, sizeof a); /* fields this kernel does not know of stay 0 */
  a.me = pl_snac_ctrl(&sh.x, sh.x.c.rank);
  a.epoch = sh.x.epoch;
  a.timeout = args.timeout_ns;
  a.scratch = args.scratch;
  a.symtab = args.symtab;
  a.world = sh.x.c.world;
  a.sh = &sh;
  a.prof = NULL;
  int st = 0;
  if (skip == 1) st = q.step == PL_CE_HDR ? PURLIN_ERR_REMOTE : 0;
  else if (!skip && q.step == PL_CE_HDR) st = pl_ce_hdr(&a, &sh, &q);
  else if (!skip && q.step == PL_CE_SYNC)
    st = pl_ce_meet(&a, &sh.x, PL_FLAG_OFF(stage), "staged data (ce)");
  else if (!skip) st = pl_ce_meet(&a, &sh.x, PL_FLAG_OFF(done), "readers of my staging (ce)");
  __syncthreads();
  if (threadIdx.x == 0) {
    if (st) pl_dev_report(&args, &sh, st);
    if (q.step == PL_CE_DONE) {
      __threadfence();
      *(volatile uint64_t *)&args.state->epoch = sh.x.epoch + 1;
    }
  }
}

/* ---- host ------------------------------------------------------------------------------------ */

purlin_status_t pl_ce_init(struct purlin_comm *comm, int on, pl_cuda_state_t *state, uint64_t *hdr,
                           pl_cuda_err_t *err, struct pl_ce **out) {
  int32_t mine[2] = {on ? 1 : 0, 0}, all[PL_MAX_WORLD][2];
  struct pl_ce *ce = NULL;
  char why[160] = "";
  *out = NULL;
  if (on) {
    ce = (struct pl_ce *)calloc(1, sizeof(*ce));
    if (!ce) {
      mine[1] = PURLIN_ERR_NO_MEMORY;
      snprintf(why, sizeof why, "out of memory");
    } else {
      int64_t n = pl_param_int(PL_PARAM_CE_STREAMS);
      if (n > comm->world - 1) n = comm->world - 1;
      if (n > PL_CE_MAX_STREAMS) n = PL_CE_MAX_STREAMS;
      ce->nstreams = n < 1 ? 1 : (int)n;
      ce->state = state;
      ce->hdr = hdr;
      ce->err = err;
      cudaError_t e = cudaEventCreateWithFlags(&ce->fork, cudaEventDisableTiming);
      for (int i = 0; i < ce->nstreams && e == cudaSuccess; i++) {
        e = cudaStreamCreateWithFlags(&ce->side[i], cudaStreamNonBlocking);
        if (e == cudaSuccess) e = cudaEventCreateWithFlags(&ce->join[i], cudaEventDisableTiming);
      }
      if (e != cudaSuccess) {
        mine[1] = PURLIN_ERR_CUDA;
        snprintf(why, sizeof why, "side streams: %s", cudaGetErrorString(e));
        (void)cudaGetLastError();
      }
    }
  }
  purlin_status_t st = pl_bootstrap_allgather(comm->bs, mine, all, sizeof mine);
  if (st) {
    pl_ce_fini(ce);
    return pl_comm_fail(comm, st, "init: copy-engine atom: %s", pl_bootstrap_last_error(comm->bs));
  }
  for (int r = 0; r < comm->world && !st; r++) {
    if (all[r][1])
      st = pl_comm_fail(comm, (purlin_status_t)all[r][1],
                        "init: copy-engine atom: rank %d failed%s%s", r,
                        r == comm->rank ? ": " : " (see its error)", r == comm->rank ? why : "");
    else if (all[r][0] != mine[0])
      st = pl_comm_fail(comm, PURLIN_ERR_INVALID_USAGE,
                        "init: PURLIN_ATOM: rank %d %s the copy-engine atom (ce), rank %d %s; "
                        "gather collectives need the same atom family on every rank: set "
                        "PURLIN_ATOM=ce on all ranks or on none",
                        comm->rank, mine[0] ? "uses" : "does not use", r,
                        all[r][0] ? "does" : "does not");
  }
  if (st) {
    pl_ce_fini(ce);
    return st;
  }
  if (ce)
    PL_INFO("copy-engine atom (ce) on: gather collectives by cudaMemcpyAsync, %d side streams; "
            "reductions and device-count calls on the SM kernel", ce->nstreams);
  *out = ce;
  return PURLIN_OK;
}

void pl_ce_fini(struct pl_ce *ce) {
  if (!ce) return;
  for (int i = 0; i < PL_CE_MAX_STREAMS; i++) {
    if (ce->side[i]) cudaStreamDestroy(ce->side[i]);
    if (ce->join[i]) cudaEventDestroy(ce->join[i]);
  }
  if (ce->fork) cudaEventDestroy(ce->fork);
  (void)cudaGetLastError();
  free(ce);
}

int pl_ce_takes(const pl_call_t *call) {
  return !call->counts_dev && !pl_coll_is_reduce(call->coll);
}

typedef struct {
  char *dst;
  const char *src;
  uint64_t n;
} pl_ce_copy_t;

/* The copies, in stream order on s: on s itself, or forked over the side streams and joined back
 * (events: capturable, so a graph gets the same fork and join). 0 or the first CUDA error; the
 * join is enqueued even after an error so that a capture stays well formed. */
static cudaError_t pl_ce_copies(struct pl_ce *ce, const pl_ce_copy_t *cp, int n, cudaStream_t s) {
  cudaError_t first = cudaSuccess, e;
#define PL_CE_KEEP_(call)                                                                          \
  if ((e = (call)) != cudaSuccess && first == cudaSuccess) first = e
  int ns = ce->nstreams < n ? ce->nstreams : n;
  if (ns <= 1) {
    for (int i = 0; i < n; i++)
      PL_CE_KEEP_(cudaMemcpyAsync(cp[i].dst, cp[i].src, cp[i].n, cudaMemcpyDefault, s));
    return first;
  }
  PL_CE_KEEP_(cudaEventRecord(ce->fork, s));
  for (int k = 0; k < ns; k++) PL_CE_KEEP_(cudaStreamWaitEvent(ce->side[k], ce->fork, 0));
  for (int i = 0; i < n; i++)
    PL_CE_KEEP_(
        cudaMemcpyAsync(cp[i].dst, cp[i].src, cp[i].n, cudaMemcpyDefault, ce->side[i % ns]));
  for (int k = 0; k < ns; k++) {
    PL_CE_KEEP_(cudaEventRecord(ce->join[k], ce->side[k]));
    PL_CE_KEEP_(cudaStreamWaitEvent(s, ce->join[k], 0));
  }
#undef PL_CE_KEEP_
  return first;
}

static uint64_t pl_ce_min(uint64_t a, uint64_t b) { return a < b ? a : b; }
static uint64_t pl_ce_max_u64(uint64_t a, uint64_t b) { return a > b ? a : b; }
/* Bytes of piece j (pieces of P bytes) of a block of b bytes. */
static uint64_t pl_ce_piece(uint64_t b, uint64_t j, uint64_t P) {
  return b > j * P ? pl_ce_min(P, b - j * P) : 0;
}

purlin_status_t pl_ce_run(struct purlin_comm *comm, struct pl_ce *ce, pl_cuda_args_t *args,
                          void *stream) {
  pl_snac_t *x = &args->x;
  const pl_call_t *c = &x->c;
  cudaStream_t s = (cudaStream_t)stream;
  int w = c->world, me = c->rank, bcast = pl_gather_is_bcast(c->coll);
  pl_plan_make(&x->c, &x->geom, &comm->tune, &x->plan);
  x->plan.lat_max = 0; /* no data packets: only the header travels as packets */
  x->zc_send = x->zc_recv = 0;
  memset(x->sym_send, 0, sizeof x->sym_send);
  memset(x->sym_recv, 0, sizeof x->sym_recv);
  uint64_t cap = 2 * x->geom.stg_half; /* both halves: nobody else uses them during the call */
  uint64_t P = bcast ? cap : cap / (uint64_t)w / 64 * 64;
  uint64_t most = 0;
  for (int d = 0; d < w; d++) {
    most = pl_ce_max_u64(most, pl_gather_bytes_recv(c, d));
    most = pl_ce_max_u64(most, pl_gather_bytes_send(c, d));
  }
  uint64_t nseq = c->coll == PL_COLL_ALL_TO_ALL_V ? 1 : most ? (most + P - 1) / P : 1;
  if (c->coll == PL_COLL_ALL_TO_ALL_V && most > P)
    PL_WARN("%s: a block of %llu bytes exceeds the copy-engine atom's per-peer staging of %llu "
            "bytes (PURLIN_STAGING_BYTES / world): every rank will fail this call; raise "
            "PURLIN_STAGING_BYTES", pl_coll_name(c->coll), (unsigned long long)most,
            (unsigned long long)P);
  if (nseq >= PL_CE_MAX_SEQ)
    return pl_comm_fail(comm, PURLIN_ERR_UNSUPPORTED,
                        "%s: %llu bytes per block need %llu copy-engine sequences of %llu bytes "
                        "(at most %llu): raise PURLIN_STAGING_BYTES", pl_coll_name(c->coll),
                        (unsigned long long)most, (unsigned long long)nseq,
                        (unsigned long long)P, (unsigned long long)(PL_CE_MAX_SEQ - 1));
  args->state = ce->state;
  args->hdr = ce->hdr;
  args->err = ce->err;
  args->scratch = NULL; /* no packet reductions here */
  args->symtab = NULL;  /* no zero copy here */
  args->timeout_ns = (uint64_t)comm->timeout_ms * 1000000ull;
  args->prof = 0;
  args->zc_avail = 0;
  char *stg_me = x->ws[me] + x->geom.stg_off;
  pl_ce_copy_t cp[PL_MAX_WORLD + 1];
  pl_ce_step_t q;
  memset(&q, 0, sizeof q);
  q.nseq = (uint32_t)nseq;
  q.slot = P;
  cudaError_t e = cudaSuccess;
  const char *what = "";
  for (uint64_t j = 0; j < nseq && e == cudaSuccess; j++) {
    int n = 0;
    q.seq = (uint32_t)j;
    q.step = PL_CE_HDR;
    what = "header kernel";
    pl_ce_kernel<<<1, PL_CE_THREADS, 0, s>>>(*args, q);
    if ((e = cudaGetLastError()) != cudaSuccess) break;
    /* my blocks for the others into my staging (after the header: nobody reads it any more) */
    for (int i = 1; i < w; i++) {
      int d = (me + i) % w;
      uint64_t b = pl_ce_piece(pl_gather_bytes_send(c, d), j, P);
      if (!b) continue;
      cp[n].dst = stg_me + (bcast ? 0 : (uint64_t)d * P);
      cp[n].src = x->send + pl_gather_send_off(c, d) + j * P;
      cp[n++].n = b;
      if (bcast) break;
    }
    what = "staging copies";
    if ((e = pl_ce_copies(ce, cp, n, s)) != cudaSuccess) break;
    q.step = PL_CE_SYNC;
    what = "sync kernel";
    pl_ce_kernel<<<1, PL_CE_THREADS, 0, s>>>(*args, q);
    if ((e = cudaGetLastError()) != cudaSuccess) break;
    /* every peer's block for me from its staging, and my own */
    n = 0;
    for (int i = 0; i < w; i++) {
      int src_rank = (me + i) % w;
      uint64_t b = pl_gather_bytes_recv(c, src_rank);
      if (src_rank == me) b = pl_ce_min(b, pl_gather_bytes_send(c, me));
      b = pl_ce_piece(b, j, P);
      if (!b) continue;
      cp[n].dst = x->recv + pl_gather_recv_off(c, src_rank) + j * P;
      cp[n].src = src_rank == me
                      ? x->send + pl_gather_send_off(c, me) + j * P
                      : x->ws[src_rank] + x->geom.stg_off + (bcast ? 0 : (uint64_t)me * P);
      if (cp[n].dst == cp[n].src) continue; /* in place */
      cp[n++].n = b;
    }
    what = "copies from peers";
    if ((e = pl_ce_copies(ce, cp, n, s)) != cudaSuccess) break;
    q.step = PL_CE_DONE;
    what = "done kernel";
    pl_ce_kernel<<<1, PL_CE_THREADS, 0, s>>>(*args, q);
    if ((e = cudaGetLastError()) != cudaSuccess) break;
    comm->epoch++;
  }
  if (e != cudaSuccess)
    return pl_comm_fail(comm, PURLIN_ERR_CUDA,
                        "%s: copy-engine atom: %s on device %d failed: %s%s (the communicator's "
                        "ranks may now disagree on the call count: destroy it)",
                        pl_coll_name(c->coll), what, comm->device, cudaGetErrorString(e),
                        e == cudaErrorNoKernelImageForDevice
                            ? " (rebuild with this GPU in CMAKE_CUDA_ARCHITECTURES)"
                            : "");
  return PURLIN_OK;
}
