/* kernel_700.cu -- SNAC with atom 700 (vector loads and stores; every architecture). */
#include "cuda/atom_cuda.cuh"
#include "snac/snac.h"

#define PL_CUDA_KERNEL_NAME pl_snac_kernel_700
#define PL_CUDA_LAUNCH_NAME pl_cuda_launch_700
#include "cuda/kernel_body.cuh"
