/* kernel_800.cu -- SNAC with atom 800: copies and the loads of reductions through a cp.async ring in
 * shared memory (sm_80+). See atom_async.cuh. */
#define PL_CUDA_COPY pl_copy_800
#define PL_CUDA_REDUCE pl_reduce_800
#include "cuda/atom_async.cuh"
#include "snac/snac.h"

#define PL_CUDA_KERNEL_NAME pl_snac_kernel_800
#define PL_CUDA_LAUNCH_NAME pl_cuda_launch_800
#include "cuda/kernel_body.cuh"
