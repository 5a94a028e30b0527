/* kernel_body.cuh -- the one kernel of a call, for the atom included before it (see kernel_700.cu).
 * With L = plan.lanes, CTAs 0..L-1 run SNAC's main group of lanes 0..L-1 (notify, agree, consume);
 * CTAs L..2L-1, launched when the call stages anything, run the stager of lanes 0..L-1, all
 * concurrently (all 2L CTAs must be resident at once: they wait on each other through peers).
 * The call's epoch comes from device memory and the last CTA to finish advances it, so kernel
 * arguments are the same on every replay of a captured graph (the idea of reference/purlin.md
 * section 2, with one counter per rank instead of one per CTA slot). */
#ifndef PL_CUDA_KERNEL_NAME
#error "define PL_CUDA_KERNEL_NAME and PL_CUDA_LAUNCH_NAME, include the atom and snac/snac.h first"
#endif

#include "vcounts.h"

#ifndef PL_CUDA_KERNEL_BODY_ONCE
#define PL_CUDA_KERNEL_BODY_ONCE
/* Device counts (x.c.counts_dev, opts.counts_on_device), thread 0: sh->v holds the counts (and the
 * displacements given) read from the caller's device memory, and x.c points at sh->v. Derives
 * what the host derives from host counts (api.c's pl_check_v, cuda_dp.cu's pl_cuda_run):
 * displacements, argument checks, in place, zero copy of send, the rounds limit. Every CTA of
 * the call reaches the same verdict. 0, or a fatal status with sh->err_what set. */
static __device__ int pl_dev_vcounts(const pl_cuda_args_t *args, pl_cuda_sh_t *sh, int have_sd,
                                     int have_rd) {
  pl_snac_t *x = &sh->x;
  const pl_call_t *c = &x->c;
  uint64_t sb, rb;
  int ip;
  const char *why = pl_v_derive(c->coll, c->world, c->rank, c->count, c->esize, sh->v, have_sd,
                                have_rd, x->send, x->recv, &ip, &sb, &rb);
  sh->err_peer = c->rank;
  if (why) {
    sh->err_what = why;
    return PURLIN_ERR_INVALID_ARGUMENT;
  }
  x->in_place = ip;
  if (c->coll == PL_COLL_ALL_GATHER_V) x->c.count = sh->v[2][c->rank]; /* sendcount: the room */
  /* zero copy, as pl_cuda_run decides it for host counts: AllToAll in place must stage */
  if (args->zc_avail && sb && sb <= args->zc_avail && !(c->coll == PL_COLL_ALL_TO_ALL_V && ip))
    x->zc_send = 1;
  if (pl_snac_max_rounds(x) >= PL_EPOCH_STRIDE - 2) {
    sh->err_what = "a block needs > 2^24 rounds: raise PURLIN_STAGING_BYTES";
    return PURLIN_ERR_UNSUPPORTED;
  }
  sh->err_peer = -1;
  return 0;
}
#endif

#include "cuda/report.cuh"

__global__ void __launch_bounds__(PL_CUDA_THREADS, 1)
    PL_CUDA_KERNEL_NAME(const __grid_constant__ pl_cuda_args_t args) {
  __shared__ pl_cuda_sh_t sh;
  __shared__ uint64_t hdr_sh[PL_CUDA_SH_HDR_WORDS];
  __shared__ int aborted, vst;
  __shared__ uint64_t prof_t[PL_PROF_N];
  if (args.prof && threadIdx.x == 0) prof_t[0] = pl_globaltimer();
  const uint64_t *src = (const uint64_t *)&args.x;
  uint64_t *dst = (uint64_t *)&sh.x;
  for (unsigned i = threadIdx.x; i < sizeof(pl_snac_t) / 8; i += blockDim.x) dst[i] = src[i];
  for (unsigned i = threadIdx.x; i < 4 * PL_MAX_WORLD; i += blockDim.x)
    (&sh.v[0][0])[i] = (&args.v[0][0])[i];
  __syncthreads();
  if (sh.x.c.counts_dev) { /* the caller's V counts, read from device memory (x.c: its pointers) */
    unsigned w = (unsigned)sh.x.c.world;
    for (unsigned i = threadIdx.x; i < 4 * w; i += blockDim.x) {
      const uint64_t *q = i < w       ? sh.x.c.scounts
                          : i < 2 * w ? sh.x.c.sdispls
                          : i < 3 * w ? sh.x.c.rcounts
                                      : sh.x.c.rdispls;
      sh.v[i / w][i % w] = q ? q[i % w] : 0;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    int lanes = sh.x.plan.lanes;
    sh.x.epoch = *(volatile uint64_t *)&args.state->epoch;
    sh.x.lane = (int)blockIdx.x < lanes ? (int)blockIdx.x : (int)blockIdx.x - lanes;
    int have_sd = sh.x.c.sdispls != NULL, have_rd = sh.x.c.rdispls != NULL;
    pl_dev_sh_setup(&sh, &args, hdr_sh);
    vst = sh.x.c.counts_dev ? pl_dev_vcounts(&args, &sh, have_sd, have_rd) : 0;
  }
  /* A kernel queued behind a call that failed must not run: a peer that timed out may still be
   * reading the staging this call would overwrite. Read by another warp than thread 0's, so that
   * its latency overlaps the epoch's. */
  if (threadIdx.x == (blockDim.x > 32 ? 32u : 0u))
    aborted = pl_ld_acquire_sys(&pl_snac_ctrl(&sh.x, sh.x.c.rank)->abort) != 0;
  __syncthreads();
  pl_atom_t a;
  a.me = pl_snac_ctrl(&sh.x, sh.x.c.rank);
  a.epoch = sh.x.epoch;
  a.timeout = args.timeout_ns;
  a.backoff = args.backoff_ns;
  a.scratch = args.scratch + (uint64_t)sh.x.lane * sh.x.c.world * PL_SNAC_SEG;
  a.symtab = args.symtab;
  a.world = sh.x.c.world;
  a.sh = &sh;
  a.prof = args.prof && blockIdx.x == 0 ? prof_t : NULL;
  PL_SNAC_STAMP(&a, 1);
  int st = aborted                              ? PURLIN_ERR_REMOTE
           : vst                                ? vst
           : (int)blockIdx.x < sh.x.plan.lanes ? pl_snac_main(&a, &sh.x, sh.myhdr)
                                               : pl_snac_stage(&a, &sh.x);
  __syncthreads();
  if (threadIdx.x == 0) {
    if (st) pl_dev_report(&args, &sh, st);
    __threadfence();
    if (atomicAdd(&args.state->exit_count, 1u) == gridDim.x - 1) {
      args.state->exit_count = 0;
      *(volatile uint64_t *)&args.state->epoch = sh.x.epoch + 1;
    }
    if (a.prof && !st) pl_dev_prof_add(args.state, prof_t, 0);
  }
}

cudaError_t PL_CUDA_LAUNCH_NAME(const pl_cuda_args_t *args, int grid, int threads,
                               cudaStream_t s) {
  PL_CUDA_KERNEL_NAME<<<grid, threads, 0, s>>>(*args);
  return cudaGetLastError();
}
