/* kernel_1000.cu -- SNAC with atom 1000: atom 900's code compiled for sm_100, selected on compute
 * capability 10.x. See atom_async.cuh. */
#define PL_CUDA_COPY pl_copy_900
#define PL_CUDA_REDUCE pl_reduce_800
#include "cuda/atom_async.cuh"
#include "snac/snac.h"

#define PL_CUDA_KERNEL_NAME pl_snac_kernel_1000
#define PL_CUDA_LAUNCH_NAME pl_cuda_launch_1000
#include "cuda/kernel_body.cuh"
