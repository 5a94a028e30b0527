/* direct.h -- the direct kernel (direct.cu): the throughput regime above the packet sizes. Every
 * rank's CTA c reads part c of what it receives from each peer (a copy for the gathers, an N-to-1
 * reduction for the reductions): straight from the peer's purlin_mem_alloc buffer, or from the
 * peer's staging, where the peer copied it first when its buffer is not peer-mapped. CUDA C++ only
 * (included by cuda_dp.cu). */
#ifndef PL_CUDA_DIRECT_H
#define PL_CUDA_DIRECT_H

#include "cuda/cuda_int.h"

#define PL_DIRECT_THREADS 512   /* threads of every CTA (__launch_bounds__(512, 1)) */
#define PL_DIRECT_MAX_CTAS 128  /* most CTAs of a call: the flag table's rows */
/* The flag table in every rank's piece of the symmetric allocation args->dflags: slot [c][s]
 * (uint64) is written only by CTA c of rank s, with pl_direct_val(e, k, p) when, in round k of
 * call e, it has staged its part (p = 1), reduced its part of its shard (AllReduce, p = 2), read
 * everything it reads of this rank's buffers or staging (p = 3). */
#define PL_DIRECT_FLAG_BYTES ((size_t)PL_DIRECT_MAX_CTAS * PL_MAX_WORLD * 8)
/* A call runs in rounds of at most 2^PL_DIRECT_ROUND_BITS - 1 (pl_direct_plan) */
#define PL_DIRECT_ROUND_BITS 20

/* 1 when the direct kernel can run this collective at all (host counts; AllToAll out of place:
 * in place, a rank would overwrite the blocks its peers are still reading). AllToAllV is not
 * taken: a rank knows only its own blocks' sizes, so ranks could disagree on the regime. */
int pl_direct_coll(int coll, int in_place, int counts_dev);
/* The rounds of a call (host counts; rcounts: the V collectives' recvcounts) with a staging half
 * of half bytes: *piece, the bytes of one block (AllReduce: of the vector) per round, so that what
 * a rank stages of a round fits the half; *slot, the staging bytes of one block (shard) in a
 * round; *rounds. Returns 0 when the half is too small for it
 * (the call runs SNAC's kernel). The same on every rank: every rank knows these numbers. */
int pl_direct_plan(const pl_call_t *c, const uint64_t *rcounts, uint64_t half, uint64_t *piece,
                   uint64_t *slot, uint64_t *rounds);
/* Launch the direct kernel for args (grid CTAs, the same on every rank) on s. */
cudaError_t pl_cuda_direct_launch(const pl_cuda_args_t *args, int grid, cudaStream_t s);

#endif
