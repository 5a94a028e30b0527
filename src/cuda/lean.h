/* lean.h -- the lean packet kernel (lean.cu): SNAC's latency regime for calls that move nothing
 * but packets, in a kernel of its own. CUDA C++ only (included by cuda_dp.cu). */
#ifndef PL_CUDA_LEAN_H
#define PL_CUDA_LEAN_H

#include "cuda/cuda_int.h"

/* Largest CTA of the lean kernel. */
#define PL_LEAN_THREADS 256 /* __launch_bounds__: up to 255 registers (all polls in flight) */

/* 1 when every block of the call travels as packets and the lean kernel can run it: host counts,
 * and a plan that puts every block in the latency regime. A pure function of the plan and the
 * agreed arguments, so every rank decides the same, except in AllToAllV, where a rank decides from
 * its own blocks: a rank with a staged block elsewhere runs SNAC's kernel, which exchanges packet
 * blocks with this one in the same wire format (header with every V word, windows, flags, zero
 * copy's `done` published to it). */
int pl_lean_takes(const pl_snac_t *x);
/* 1 when a call the lean kernel takes runs the tiny kernel instead: a one-shot or two-shot
 * AllReduce, a ReduceScatter, AllGather or AllToAll, with host counts and blocks
 * (pl_tiny_block_bytes) of at most tiny_max bytes (and PL_TINY_MAX_BYTES), or a V collective whose
 * every block is (AllToAllV: this rank's, as the lean kernel decides; its peers may run the lean
 * or SNAC kernel, all in one wire format). Otherwise a pure function of the plan and the agreed
 * arguments. */
int pl_tiny_takes(const pl_snac_t *x, uint64_t tiny_max);
/* The tiny kernel's largest block: count * esize, two-shot's first shard, or a V collective's
 * largest block this rank sends or receives. */
uint64_t pl_tiny_block_bytes(const pl_snac_t *x);
/* The tiny V kernel's numbers in args (tv_words, tv_sig, tv_check, tv_fast), from this rank's
 * counts. */
void pl_tinyv_args(const pl_snac_t *x, pl_cuda_args_t *a);
/* The call's work on this rank in packets, for the grid: the most of the packets it receives
 * (every source's, both shots of a two-shot AllReduce), the packets it pushes, and its own block's
 * 8-byte words (AllToAllV's may be of any size: it is a copy, not a packet block). */
uint64_t pl_lean_work_packets(const pl_snac_t *x);
/* 1 when the lean kernel's code for the current device was compiled for sm_90+ (it has the
 * griddepcontrol instructions programmatic dependent launch needs), not JIT-compiled from older
 * PTX. */
int pl_lean_pdl_built(void);
/* Launch the lean kernel for args (grid CTAs of `threads`) on s; pdl: with programmatic
 * dependent launch (the kernel may start before the stream's previous kernel has finished). */
cudaError_t pl_cuda_lean_launch(const pl_cuda_args_t *args, int grid, int threads, int pdl,
                                cudaStream_t s);
/* The same for the tiny kernel (a call pl_tiny_takes). */
cudaError_t pl_cuda_tiny_launch(const pl_cuda_args_t *args, int grid, int threads, int pdl,
                                cudaStream_t s);

#endif
