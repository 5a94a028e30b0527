/* direct.h -- the direct kernel (direct.cu): the throughput regime above the packet sizes. Every
 * rank's CTA c reads part c of what it receives from each peer (a copy for the gathers, an N-to-1
 * reduction for the reductions): straight from the peer's purlin_mem_alloc buffer, or from the
 * peer's staging, where the peer copied it first when its buffer is not peer-mapped. CUDA C++ only
 * (included by cuda_dp.cu). */
#ifndef PL_CUDA_DIRECT_H
#define PL_CUDA_DIRECT_H

#include "cuda/cuda_int.h"
#include "direct_plan.h" /* pl_direct_plan, the rounds and parts */

#define PL_DIRECT_THREADS 512   /* threads of every CTA (__launch_bounds__(512, 1)) */
#define PL_DIRECT_MAX_CTAS 128  /* most CTAs of a call: the flag table's rows */
/* The flag table in every rank's piece of the symmetric allocation args->dflags: slot [c][s]
 * (uint64) is written only by CTA c of rank s, with pl_direct_val(e, k, p) when, in round k of
 * call e, it has staged its part (p = 1), reduced its part of its shard (AllReduce, p = 2), read
 * everything it reads of this rank's buffers or staging (p = 3). */
#define PL_DIRECT_FLAG_BYTES ((size_t)PL_DIRECT_MAX_CTAS * PL_MAX_WORLD * 8)

/* 1 when the direct kernel can run this collective at all (host counts; AllToAll out of place:
 * in place, a rank would overwrite the blocks its peers are still reading). AllToAllV is not
 * taken: a rank knows only its own blocks' sizes, so ranks could disagree on the regime. */
int pl_direct_coll(int coll, int in_place, int counts_dev);
/* Launch the direct kernel for args (grid CTAs, the same on every rank) on s. */
cudaError_t pl_cuda_direct_launch(const pl_cuda_args_t *args, int grid, cudaStream_t s);

#endif
