/* kernel_900.cu -- SNAC with atom 900: large copies on the bulk copy engine (TMA), the rest as atom 800
 * (sm_90). See atom_async.cuh. */
#define PL_CUDA_COPY pl_copy_900
#define PL_CUDA_REDUCE pl_reduce_800
#include "cuda/atom_async.cuh"
#include "snac/snac.h"

#define PL_CUDA_KERNEL_NAME pl_snac_kernel_900
#define PL_CUDA_LAUNCH_NAME pl_cuda_launch_900
#include "cuda/kernel_body.cuh"
