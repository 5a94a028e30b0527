/* ce_gemm_overlap.cu -- how much an AllGather running beside a GEMM slows the GEMM down, with the
 * collective on the SMs (purlin's SM kernel) and on the copy engines (the ce atom, docs/gpu.md).
 *
 *   purlinrun -n 4 build/examples/ce_gemm_overlap [--gemm N] [--mib M] [--iters I] [--quick]
 *
 * Every rank runs a loop of cuBLAS bf16 GEMMs (N x N x N, f32 accumulation) on one stream while a
 * loop of AllGathers (M MiB per rank) runs on another, and measures, with CUDA events:
 *   gemm alone          the GEMM loop, no collective (all ranks at once, as in the other rows)
 *   ag SM / ag ce       the AllGather loop alone, on each path
 *   gemm || ag SM/ce    the GEMM loop while the AllGather loop runs, and the AllGather per call
 * and prints (rank 0) one table of the slowest rank's times and the GEMM slowdown ratios.
 *
 * Both paths in one communicator: the program sets PURLIN_ATOM=ce before init (overriding the
 * environment), so purlin_all_gather runs on the copy engines; the SM path is the same gather as
 * purlin_all_gather_v with equal counts in device memory (opts.counts_on_device), which the ce
 * atom leaves to the SM kernel of the auto atom (the host does not know device counts, and the
 * copies need sizes on the host). PURLIN_ATOM is read once per process, so two communicators
 * could not differ in it. The buffers come from purlin_mem_alloc: the SM path reads peers' inputs
 * directly (zero copy, its fastest), the ce path stages them.
 *
 * Checked, not assumed: before and after the timed loops, each path's output is compared element
 * by element with what every rank's random input must give (inputs from a hash of the seed, rank
 * and index, always odd; outputs poisoned with an even pattern before the call).
 * The collective stream has the highest priority, the GEMM stream the default one (both paths
 * alike). Ranks may share a GPU under MPS (tests/gpu/mps.sh): the GEMMs then share its SMs too,
 * which the "gemm alone" row includes, since every rank runs its GEMMs in every row. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "purlin.h"

#define CK(call)                                                                                   \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) {                                                                       \
      fprintf(stderr, "rank %d: %s: %s\n", g_rank, #call, cudaGetErrorString(e_));                 \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)
#define PK(call)                                                                                   \
  do {                                                                                             \
    purlin_status_t s_ = (call);                                                                   \
    if (s_ != PURLIN_OK) {                                                                         \
      fprintf(stderr, "rank %d: %s: %s\n  %s\n", g_rank, #call, purlin_status_name(s_),            \
              purlin_comm_last_error(g_comm));                                                     \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)
#define BK(call)                                                                                   \
  do {                                                                                             \
    cublasStatus_t b_ = (call);                                                                    \
    if (b_ != CUBLAS_STATUS_SUCCESS) {                                                             \
      fprintf(stderr, "rank %d: %s: cuBLAS status %d\n", g_rank, #call, (int)b_);                  \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

static int g_rank, g_world;
static purlin_comm_t g_comm;
static cudaStream_t g_sg, g_sc; /* GEMM stream, collective stream */
static cublasHandle_t g_blas;
static int g_gemm_n = 8192, g_iters = 20;
static size_t g_count; /* u32 elements per rank in the AllGather */
static uint32_t *g_send, *g_recv;
static size_t *g_counts_dev;  /* world equal counts, device memory (the SM path) */
static void *g_a, *g_b, *g_c; /* GEMM operands (bf16) */
static unsigned long long *g_bad_dev;
static double *g_stat_dev; /* a few doubles for the max over ranks */
static int g_failed;

enum { PATH_SM = 0, PATH_CE = 1 };
static const char *const k_path[2] = {"SM", "ce"};

/* ---- data ---------------------------------------------------------------------------------- */

__host__ __device__ static uint32_t value_of(uint32_t seed, int rank, size_t i) {
  uint64_t h = (uint64_t)seed * 0x9e3779b97f4a7c15ull ^ (uint64_t)rank << 40 ^ (uint64_t)i;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return (uint32_t)h | 1u; /* odd: never the (even) poison */
}
#define POISON_BYTE 0xa4

__global__ void fill_kernel(uint32_t *p, size_t n, uint32_t seed, int rank) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    p[i] = value_of(seed, rank, i);
}

__global__ void check_kernel(const uint32_t *recv, size_t n, int world, uint32_t seed,
                             unsigned long long *bad) {
  unsigned long long mine = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n * (size_t)world;
       i += (size_t)gridDim.x * blockDim.x)
    if (recv[i] != value_of(seed, (int)(i / n), i % n))
      mine++;
  if (mine)
    atomicAdd(bad, mine);
}

__global__ void fill_bf16_kernel(uint16_t *p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    p[i] = (uint16_t)(0x3c00u | (value_of(seed, 0, i) & 0x7fu)); /* bf16 in [2^-7, 2^-6) */
}

/* ---- steps --------------------------------------------------------------------------------- */

static void all_gather(int path, cudaStream_t s) {
  if (path == PATH_CE) {
    PK(purlin_all_gather(g_send, g_recv, g_count, PURLIN_U32, g_comm, s, NULL));
  } else {
    purlin_opts_t o = PURLIN_OPTS_INIT;
    o.counts_on_device = 1;
    PK(purlin_all_gather_v(g_send, g_count, g_recv, g_counts_dev, NULL, PURLIN_U32, g_comm, s, &o));
  }
}

/* Every rank here before anyone goes on (a tiny AllReduce, then the host waits for it). */
static void barrier(void) {
  PK(purlin_all_reduce(g_stat_dev, g_stat_dev + 8, 1, PURLIN_F64, PURLIN_MAX, g_comm, g_sc, NULL));
  CK(cudaStreamSynchronize(g_sc));
  purlin_status_t ast = PURLIN_OK;
  PK(purlin_comm_get_async_error(g_comm, &ast));
  PK(ast);
}

/* One AllGather on `path` with fresh inputs and a poisoned output, every element checked. */
static void verify(int path, uint32_t seed, const char *when) {
  CK(cudaMemsetAsync(g_recv, POISON_BYTE, g_count * 4 * (size_t)g_world, g_sc));
  fill_kernel<<<1024, 256, 0, g_sc>>>(g_send, g_count, seed, g_rank);
  CK(cudaGetLastError());
  CK(cudaMemsetAsync(g_bad_dev, 0, sizeof *g_bad_dev, g_sc));
  all_gather(path, g_sc);
  check_kernel<<<1024, 256, 0, g_sc>>>(g_recv, g_count, g_world, seed, g_bad_dev);
  CK(cudaGetLastError());
  unsigned long long bad = 0;
  CK(cudaMemcpyAsync(&bad, g_bad_dev, sizeof bad, cudaMemcpyDeviceToHost, g_sc));
  CK(cudaStreamSynchronize(g_sc));
  purlin_status_t ast = PURLIN_OK;
  PK(purlin_comm_get_async_error(g_comm, &ast));
  PK(ast);
  if (bad) {
    printf("rank %d: FAIL: all_gather (%s path, %s): %llu of %zu elements wrong\n", g_rank,
           k_path[path], when, bad, g_count * (size_t)g_world);
    g_failed = 1;
  }
}

static void gemm_loop(int iters) {
  const float alpha = 1.0f, beta = 0.0f;
  int n = g_gemm_n;
  for (int i = 0; i < iters; i++)
    BK(cublasGemmEx(g_blas, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, g_a, CUDA_R_16BF, n, g_b,
                    CUDA_R_16BF, n, &beta, g_c, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F,
                    CUBLAS_GEMM_DEFAULT));
}

static double ms_between(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, a, b));
  return ms;
}

/* The slowest rank's value of each of n doubles. */
static void max_over_ranks(double *v, int n) {
  CK(cudaMemcpy(g_stat_dev, v, sizeof(double) * (size_t)n, cudaMemcpyHostToDevice));
  PK(purlin_all_reduce(g_stat_dev, g_stat_dev + 8, (size_t)n, PURLIN_F64, PURLIN_MAX, g_comm, g_sc,
                       NULL));
  CK(cudaStreamSynchronize(g_sc));
  CK(cudaMemcpy(v, g_stat_dev + 8, sizeof(double) * (size_t)n, cudaMemcpyDeviceToHost));
}

/* Run the GEMM loop (gemm_iters, 0: none) and the AllGather loop (ag_iters on path, 0: none)
 * at once, from a common start; *gemm_ms per GEMM, *ag_ms per AllGather. */
static void measure(int gemm_iters, int path, int ag_iters, double *gemm_ms, double *ag_ms) {
  cudaEvent_t start, g0, g1, c0, c1;
  CK(cudaEventCreate(&start));
  CK(cudaEventCreate(&g0));
  CK(cudaEventCreate(&g1));
  CK(cudaEventCreate(&c0));
  CK(cudaEventCreate(&c1));
  barrier();
  CK(cudaEventRecord(start, g_sc));
  CK(cudaStreamWaitEvent(g_sg, start, 0));
  CK(cudaEventRecord(g0, g_sg));
  CK(cudaEventRecord(c0, g_sc));
  if (gemm_iters)
    gemm_loop(gemm_iters);
  for (int i = 0; i < ag_iters; i++)
    all_gather(path, g_sc);
  CK(cudaEventRecord(g1, g_sg));
  CK(cudaEventRecord(c1, g_sc));
  CK(cudaStreamSynchronize(g_sg));
  CK(cudaStreamSynchronize(g_sc));
  purlin_status_t ast = PURLIN_OK;
  PK(purlin_comm_get_async_error(g_comm, &ast));
  PK(ast);
  *gemm_ms = gemm_iters ? ms_between(g0, g1) / gemm_iters : 0;
  *ag_ms = ag_iters ? ms_between(c0, c1) / ag_iters : 0;
  cudaEventDestroy(start);
  cudaEventDestroy(g0);
  cudaEventDestroy(g1);
  cudaEventDestroy(c0);
  cudaEventDestroy(c1);
}

int main(int argc, char **argv) {
  size_t mib = 64;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--gemm") && i + 1 < argc)
      g_gemm_n = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--mib") && i + 1 < argc)
      mib = (size_t)atoi(argv[++i]);
    else if (!strcmp(argv[i], "--iters") && i + 1 < argc)
      g_iters = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--quick"))
      g_gemm_n = 4096, mib = 16, g_iters = 10;
    else {
      fprintf(stderr, "usage: ce_gemm_overlap [--gemm N] [--mib M] [--iters I] [--quick]\n");
      return 2;
    }
  }
  if (g_gemm_n < 64 || g_gemm_n % 64 || mib < 1 || g_iters < 1) {
    fprintf(stderr, "ce_gemm_overlap: --gemm must be a positive multiple of 64, --mib and --iters "
                    "positive\n");
    return 2;
  }
  /* the copy-engine atom for purlin_all_gather (see the top of this file) */
  setenv("PURLIN_ATOM", "ce", 1);
  const char *lr = getenv("PURLIN_LOCAL_RANK");
  if (!lr)
    lr = getenv("PURLIN_RANK");
  int ndev = 0;
  CK(cudaGetDeviceCount(&ndev));
  int dev = (lr ? atoi(lr) : 0) % ndev;
  CK(cudaSetDevice(dev));
  purlin_config_t cfg = PURLIN_CONFIG_INIT;
  cfg.datapath = PURLIN_DATAPATH_CUDA;
  cfg.device = dev;
  cfg.name = "ce_gemm_overlap";
  purlin_status_t st = purlin_comm_init_env(&g_comm, &cfg);
  if (st) {
    fprintf(stderr, "ce_gemm_overlap: init: %s: %s\n", purlin_status_name(st),
            purlin_comm_last_error(NULL));
    return 1;
  }
  PK(purlin_comm_rank(g_comm, &g_rank));
  PK(purlin_comm_size(g_comm, &g_world));
  CK(cudaStreamCreateWithFlags(&g_sg, cudaStreamNonBlocking));
  /* the collective's stream at the highest priority (as NCCL advises for its streams): a
   * kernel waiting behind the GEMM's pending CTAs would otherwise start only at the GEMM's last
   * wave, for the SM kernel and for ce's one-CTA flag kernels alike */
  int prio_lo = 0, prio_hi = 0;
  CK(cudaDeviceGetStreamPriorityRange(&prio_lo, &prio_hi));
  CK(cudaStreamCreateWithPriority(&g_sc, cudaStreamNonBlocking, prio_hi));
  BK(cublasCreate(&g_blas));
  BK(cublasSetStream(g_blas, g_sg));

  g_count = mib * ((size_t)1 << 20) / 4;
  PK(purlin_mem_alloc(g_comm, g_count * 4, (void **)&g_send));
  PK(purlin_mem_alloc(g_comm, g_count * 4 * (size_t)g_world, (void **)&g_recv));
  size_t *hc = (size_t *)malloc(sizeof(size_t) * (size_t)g_world);
  for (int r = 0; r < g_world; r++)
    hc[r] = g_count;
  CK(cudaMalloc((void **)&g_counts_dev, sizeof(size_t) * (size_t)g_world));
  CK(cudaMemcpy(g_counts_dev, hc, sizeof(size_t) * (size_t)g_world, cudaMemcpyHostToDevice));
  free(hc);
  CK(cudaMalloc((void **)&g_bad_dev, sizeof *g_bad_dev));
  CK(cudaMalloc((void **)&g_stat_dev, 16 * sizeof(double)));
  CK(cudaMemset(g_stat_dev, 0, 16 * sizeof(double)));
  size_t nn = (size_t)g_gemm_n * g_gemm_n;
  CK(cudaMalloc(&g_a, nn * 2));
  CK(cudaMalloc(&g_b, nn * 2));
  CK(cudaMalloc(&g_c, nn * 2));
  fill_bf16_kernel<<<1024, 256, 0, g_sg>>>((uint16_t *)g_a, nn, 11u + (uint32_t)g_rank);
  fill_bf16_kernel<<<1024, 256, 0, g_sg>>>((uint16_t *)g_b, nn, 23u + (uint32_t)g_rank);
  CK(cudaGetLastError());
  CK(cudaStreamSynchronize(g_sg));

  /* correctness first, both paths */
  verify(PATH_SM, 1, "before timing");
  verify(PATH_CE, 2, "before timing");
  /* warm up: cuBLAS picks its kernel, both paths run once more */
  gemm_loop(2);
  CK(cudaStreamSynchronize(g_sg));
  double t[7], dummy;
  measure(0, PATH_SM, 3, &dummy, &t[1]);
  measure(0, PATH_CE, 3, &dummy, &t[2]);

  /* alone */
  measure(g_iters, PATH_SM, 0, &t[0], &dummy);
  measure(0, PATH_SM, 10, &dummy, &t[1]);
  measure(0, PATH_CE, 10, &dummy, &t[2]);
  max_over_ranks(t, 3);
  /* concurrent: enough AllGathers to cover the GEMM loop (the same count on every rank: it is a
   * collective; from the slowest rank's times) */
  int ag_iters[2];
  for (int p = 0; p < 2; p++) {
    double n = t[0] * g_iters / t[1 + p];
    ag_iters[p] = n < 2 ? 2 : n > 2000 ? 2000 : (int)n + 1;
  }
  measure(g_iters, PATH_SM, ag_iters[PATH_SM], &t[3], &t[4]);
  measure(g_iters, PATH_CE, ag_iters[PATH_CE], &t[5], &t[6]);
  max_over_ranks(t + 3, 4);
  /* the outputs after the timed loops are still right */
  verify(PATH_SM, 3, "after timing");
  verify(PATH_CE, 4, "after timing");

  double bytes = (double)g_count * 4 * g_world; /* gathered per rank per call */
  double flops = 2.0 * g_gemm_n * (double)g_gemm_n * g_gemm_n;
  if (g_rank == 0) {
    printf("ce_gemm_overlap: %d ranks, %d devices, GEMM %dx%dx%d bf16 x %d, AllGather %zu MiB per "
           "rank (u32), slowest rank's times\n",
           g_world, ndev, g_gemm_n, g_gemm_n, g_gemm_n, g_iters, mib);
    printf("%-22s %12s %12s %14s\n", "run", "GEMM ms", "GEMM TFLOP/s", "AG ms (GB/s)");
    printf("%-22s %12.3f %12.1f %14s\n", "gemm alone", t[0], flops / t[0] / 1e9, "-");
    printf("%-22s %12s %12s %7.3f (%5.0f)\n", "ag SM alone", "-", "-", t[1], bytes / t[1] / 1e6);
    printf("%-22s %12s %12s %7.3f (%5.0f)\n", "ag ce alone", "-", "-", t[2], bytes / t[2] / 1e6);
    printf("%-22s %12.3f %12.1f %7.3f (%5.0f)\n", "gemm || ag SM", t[3], flops / t[3] / 1e9, t[4],
           bytes / t[4] / 1e6);
    printf("%-22s %12.3f %12.1f %7.3f (%5.0f)\n", "gemm || ag ce", t[5], flops / t[5] / 1e9, t[6],
           bytes / t[6] / 1e6);
    printf("GEMM slowdown: SM atom %.3fx, ce atom %.3fx (AllGathers per loop: SM %d, ce %d)\n",
           t[3] / t[0], t[5] / t[0], ag_iters[PATH_SM], ag_iters[PATH_CE]);
  }
  printf("rank %d: %s\n", g_rank, g_failed ? "FAIL" : "PASS");
  barrier();
  cublasDestroy(g_blas);
  PK(purlin_mem_free(g_comm, g_send));
  PK(purlin_mem_free(g_comm, g_recv));
  cudaFree(g_counts_dev);
  cudaFree(g_bad_dev);
  cudaFree(g_stat_dev);
  cudaFree(g_a);
  cudaFree(g_b);
  cudaFree(g_c);
  purlin_comm_destroy(g_comm);
  return g_failed;
}
