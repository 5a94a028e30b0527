/* dev.c -- where the bench's buffers live and how calls are timed: host memory and clock_gettime on
 * the host datapath; device memory, CUDA events and (with -G) CUDA graph replay on the CUDA
 * datapath. Bookkeeping (max of times over ranks, sums of wrong counts, id exchange) goes through
 * purlin itself. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

#if BENCH_CUDA
#include <cuda_runtime_api.h>
#define CU(call)                                                                                   \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess)                                                                         \
      bench_die("%s: %s", #call, cudaGetErrorString(e_));                                          \
  } while (0)
#endif

bench_env_t B = {NULL, 0, 1, 0, 0, -1, NULL, NULL};

#define SCRATCH_BYTES ((size_t)64 << 10)

void bench_die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "bench rank %d: ", B.rank);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  fflush(stdout);
  exit(2);
}

void *bench_alloc(size_t bytes) {
  void *p = NULL;
  if (bytes < 256)
    bytes = 256;
  if (B.use_purlin_mem == 1) {
    BENCH_OK(purlin_mem_alloc(B.comm, bytes, &p));
    return p;
  }
#if BENCH_CUDA
  if (B.cuda) {
    CU(cudaMalloc(&p, bytes));
    if (B.use_purlin_mem == 2) BENCH_OK(purlin_mem_register(B.comm, p, bytes));
    return p;
  }
#endif
  if (B.use_purlin_mem == 2) bench_die("--mem reg needs the CUDA datapath");
  p = aligned_alloc(256, (bytes + 255) & ~(size_t)255);
  if (!p)
    bench_die("out of host memory (%zu bytes)", bytes);
  memset(p, 0, bytes); /* touch every page before timing */
  return p;
}

void bench_free(void *p) {
  if (!p)
    return;
  if (B.use_purlin_mem == 1) {
    purlin_mem_free(B.comm, p);
    return;
  }
#if BENCH_CUDA
  if (B.cuda) {
    if (B.use_purlin_mem == 2) purlin_mem_deregister(B.comm, p);
    cudaFree(p);
    return;
  }
#endif
  free(p);
}

void bench_put(void *dst, const void *src, size_t bytes) {
#if BENCH_CUDA
  if (B.cuda) {
    /* on our (non-blocking) stream, so that it is ordered with the collectives */
    CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, (cudaStream_t)B.stream));
    CU(cudaStreamSynchronize((cudaStream_t)B.stream));
    return;
  }
#endif
  memcpy(dst, src, bytes);
}

void bench_get(void *dst, const void *src, size_t bytes) {
#if BENCH_CUDA
  if (B.cuda) {
    CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, (cudaStream_t)B.stream));
    CU(cudaStreamSynchronize((cudaStream_t)B.stream));
    return;
  }
#endif
  memcpy(dst, src, bytes);
}

void bench_fill(void *dst, int byte, size_t bytes) {
#if BENCH_CUDA
  if (B.cuda) {
    CU(cudaMemsetAsync(dst, byte, bytes, (cudaStream_t)B.stream));
    CU(cudaStreamSynchronize((cudaStream_t)B.stream));
    return;
  }
#endif
  memset(dst, byte, bytes);
}

void bench_sync(void) {
#if BENCH_CUDA
  if (B.cuda)
    CU(cudaStreamSynchronize((cudaStream_t)B.stream));
#endif
}

/* ---- bookkeeping through purlin ------------------------------------------------------------- */
void bench_allreduce_host(void *vals, size_t count, purlin_dtype_t dtype, purlin_op_t op) {
  size_t bytes = count * purlin_dtype_size(dtype);
  if (!B.cuda) {
    BENCH_OK(purlin_all_reduce(vals, vals, count, dtype, op, B.comm, NULL, NULL));
    return;
  }
  if (bytes > SCRATCH_BYTES)
    bench_die("bookkeeping all_reduce of %zu bytes is too large", bytes);
  bench_put(B.scratch, vals, bytes);
  BENCH_OK(purlin_all_reduce(B.scratch, B.scratch, count, dtype, op, B.comm, B.stream, NULL));
  bench_sync();
  bench_get(vals, B.scratch, bytes);
}

void bench_allgather_host(const void *mine, void *all, size_t bytes_each) {
  size_t total = bytes_each * (size_t)B.world;
  if (!B.cuda) {
    BENCH_OK(purlin_all_gather(mine, all, bytes_each, PURLIN_U8, B.comm, NULL, NULL));
    return;
  }
  if (total > SCRATCH_BYTES)
    bench_die("bookkeeping all_gather of %zu bytes is too large", total);
  char *s = B.scratch;
  bench_put(s + bytes_each * (size_t)B.rank, mine, bytes_each);
  BENCH_OK(purlin_all_gather(s + bytes_each * (size_t)B.rank, s, bytes_each, PURLIN_U8, B.comm,
                             B.stream, NULL));
  bench_sync();
  bench_get(all, s, total);
}

/* A zero-byte all-to-all: every rank tells every peer it has arrived and waits for all of them. */
static void barrier_enqueue(void) {
  BENCH_OK(purlin_all_to_all(NULL, NULL, 0, PURLIN_U8, B.comm, B.stream, NULL));
}

void bench_barrier(void) {
  barrier_enqueue();
  bench_sync();
}

/* ---- timing -------------------------------------------------------------------------------- */
double bench_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static int time_host(bench_call_fn fn, void *arg, int iters, int repeats, int warmup, double *us) {
  for (int i = 0; i < warmup; i++)
    if (fn(arg, i))
      return -1;
  for (int r = 0; r < repeats; r++) {
    bench_barrier();
    double t0 = bench_now_us();
    for (int i = 0; i < iters; i++)
      if (fn(arg, i))
        return -1;
    us[r] = (bench_now_us() - t0) / iters;
  }
  return 0;
}

#if BENCH_CUDA
static int time_cuda(bench_call_fn fn, void *arg, int iters, int repeats, int warmup, int graph,
                     double *us) {
  cudaStream_t s = (cudaStream_t)B.stream;
  cudaEvent_t e0, e1;
  cudaGraph_t g = NULL;
  cudaGraphExec_t ge = NULL;
  int rc = 0;
  CU(cudaEventCreate(&e0));
  CU(cudaEventCreate(&e1));
  if (graph > 0) {
    CU(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < iters && !rc; i++)
      rc = fn(arg, i);
    cudaError_t ce = cudaStreamEndCapture(s, &g);
    if (rc)
      goto out;
    if (ce != cudaSuccess)
      bench_die("graph capture: %s", cudaGetErrorString(ce));
    CU(cudaGraphInstantiateWithFlags(&ge, g, 0));
    for (int w = 0; w < warmup; w++)
      CU(cudaGraphLaunch(ge, s));
  } else {
    for (int i = 0; i < warmup && !rc; i++)
      rc = fn(arg, i);
    if (rc)
      goto out;
  }
  CU(cudaStreamSynchronize(s));
  for (int r = 0; r < repeats && !rc; r++) {
    barrier_enqueue(); /* on the stream: the ranks' GPUs start together */
    CU(cudaEventRecord(e0, s));
    if (graph > 0)
      for (int k = 0; k < graph; k++)
        CU(cudaGraphLaunch(ge, s));
    else
      for (int i = 0; i < iters && !rc; i++)
        rc = fn(arg, i);
    CU(cudaEventRecord(e1, s));
    CU(cudaEventSynchronize(e1));
    float ms = 0;
    CU(cudaEventElapsedTime(&ms, e0, e1));
    us[r] = (double)ms * 1e3 / ((double)iters * (graph > 0 ? graph : 1));
  }
out:
  if (ge)
    cudaGraphExecDestroy(ge);
  if (g)
    cudaGraphDestroy(g);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return rc;
}
#endif

int bench_time(bench_call_fn fn, void *arg, int iters, int repeats, int warmup, int graph,
               double *us) {
#if BENCH_CUDA
  if (B.cuda)
    return time_cuda(fn, arg, iters, repeats, warmup, graph, us);
#endif
  (void)graph;
  return time_host(fn, arg, iters, repeats, warmup, us);
}

/* Per sample, every rank copies at once (after a barrier) and the sample is the slowest rank's
 * time; the floor is the best sample. (The best sample per rank, then the slowest rank, was not
 * "all at once": ranks sharing one GPU's memory reach its copy engines in a different order each
 * sample, and each rank's best was a sample where it went first. At world 8 on one H200 that gave
 * 8 x 530 GB/s of copies, 8.5 TB/s of memory traffic, twice what HBM moves.) */
#define BENCH_COPY_SAMPLES 16
double bench_copy_bw(size_t bytes, int repeats) {
  double t_us[BENCH_COPY_SAMPLES], best = 1e300;
  if (repeats > BENCH_COPY_SAMPLES)
    repeats = BENCH_COPY_SAMPLES;
#if BENCH_CUDA
  if (B.cuda) {
    void *a, *b;
    cudaEvent_t e0, e1;
    cudaStream_t s = (cudaStream_t)B.stream;
    CU(cudaMalloc(&a, bytes));
    CU(cudaMalloc(&b, bytes));
    CU(cudaMemsetAsync(a, 1, bytes, s));
    CU(cudaMemsetAsync(b, 2, bytes, s));
    CU(cudaEventCreate(&e0));
    CU(cudaEventCreate(&e1));
    CU(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s));
    for (int r = 0; r < repeats; r++) {
      barrier_enqueue();
      CU(cudaEventRecord(e0, s));
      CU(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s));
      CU(cudaEventRecord(e1, s));
      CU(cudaEventSynchronize(e1));
      float ms = 0;
      CU(cudaEventElapsedTime(&ms, e0, e1));
      t_us[r] = (double)ms * 1e3;
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaFree(a);
    cudaFree(b);
    bench_allreduce_host(t_us, (size_t)repeats, PURLIN_F64, PURLIN_MAX);
    for (int r = 0; r < repeats; r++)
      best = t_us[r] < best ? t_us[r] : best;
    return (double)bytes / (best * 1e-6);
  }
#endif
  char *a = malloc(bytes), *b = malloc(bytes);
  if (!a || !b)
    bench_die("out of host memory for the copy test");
  memset(a, 1, bytes);
  memset(b, 2, bytes);
  for (int r = 0; r < repeats; r++) {
    bench_barrier();
    double t0 = bench_now_us();
    memcpy(b, a, bytes);
    double t = bench_now_us() - t0;
    /* keep the copy observable so that it is not optimised away */
    if (b[bytes / 2] != 1)
      bench_die("memcpy test failed");
    t_us[r] = t;
  }
  free(a);
  free(b);
  bench_allreduce_host(t_us, (size_t)repeats, PURLIN_F64, PURLIN_MAX);
  for (int r = 0; r < repeats; r++)
    best = t_us[r] < best ? t_us[r] : best;
  return (double)bytes / (best * 1e-6);
}

/* ---- devices ------------------------------------------------------------------------------- */
int bench_pick_device(void) {
#if BENCH_CUDA
  static const char *const vars[] = {
      "PURLIN_LOCAL_RANK", "LOCAL_RANK",    "OMPI_COMM_WORLD_LOCAL_RANK",
      "MPI_LOCALRANKID",   "SLURM_LOCALID", NULL};
  int ndev = 0, lr = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev <= 0) {
    cudaGetLastError();
    return -1;
  }
  for (int i = 0; vars[i]; i++) {
    const char *v = getenv(vars[i]);
    if (v && *v) {
      lr = atoi(v);
      break;
    }
  }
  int dev = lr % ndev;
  if (cudaSetDevice(dev) != cudaSuccess)
    return -1;
  return dev;
#else
  return -1;
#endif
}

int bench_cuda_setup(void) {
#if BENCH_CUDA
  cudaStream_t s;
  CU(cudaSetDevice(B.device));
  CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  B.stream = s;
  CU(cudaMalloc(&B.scratch, SCRATCH_BYTES));
  return 0;
#else
  return -1;
#endif
}

void bench_cuda_teardown(void) {
#if BENCH_CUDA
  if (B.scratch)
    cudaFree(B.scratch);
  if (B.stream)
    cudaStreamDestroy((cudaStream_t)B.stream);
  B.scratch = B.stream = NULL;
#endif
}

void bench_gpu_id(char *buf, size_t len) {
  buf[0] = 0;
#if BENCH_CUDA
  if (B.device >= 0 && cudaDeviceGetPCIBusId(buf, (int)len, B.device) != cudaSuccess)
    buf[0] = 0;
#else
  (void)len;
#endif
}
