/* check.cu -- the bench's inputs and checks on the GPU: the host's generator and check (elem.h,
 * compiled for the device; --fmad=false, so the same bits and the same roundings), so that a 1 GiB
 * size is generated and checked in milliseconds instead of regenerating every rank's inputs on the
 * host. Each output segment is one grid-stride launch: a thread regenerates the expected element
 * (one input, or the reduction over all ranks in rank order), compares it with the output in place
 * and counts; warps add their counts into one device counter. */
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "bench.h"
}
#include "elem.h"

#define CK(call)                                                                                   \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess)                                                                         \
      bench_die("%s: %s", #call, cudaGetErrorString(e_));                                          \
  } while (0)

#define BENCH_THREADS 256

static __global__ void bench_gen_kernel(void *dst, uint64_t key, size_t first, size_t n, int dtype,
                                        size_t esize) {
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    bench_store_bits(dst, esize, i, bench_gen_bits(key, first + i, dtype));
}

static __global__ void bench_check_kernel(bench_elem_ctx_t c, const void *out, bench_seg_t seg,
                                          size_t esize, unsigned long long *wrong) {
  size_t stride = (size_t)gridDim.x * blockDim.x;
  unsigned long long mine = 0;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < seg.len; i += stride)
    mine += (unsigned long long)bench_seg_elem_wrong(
        &c, seg.src, seg.in + i, bench_load_bits(out, esize, seg.out + i), esize);
  for (int d = 16; d > 0; d /= 2)
    mine += __shfl_down_sync(0xffffffffu, mine, d);
  if ((threadIdx.x & 31) == 0 && mine)
    atomicAdd(wrong, mine);
}

static int bench_blocks(size_t n) {
  static int sms;
  if (!sms) {
    int dev = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  }
  size_t want = (n + BENCH_THREADS - 1) / BENCH_THREADS, cap = (size_t)sms * 8;
  return (int)(want < cap ? (want ? want : 1) : cap);
}

extern "C" void bench_gen_dev(void *dst, int dtype, uint64_t seed, int rank, size_t bytes, int buf,
                              size_t first, size_t n) {
  cudaStream_t s = (cudaStream_t)B.stream;
  if (!n)
    return;
  bench_gen_kernel<<<bench_blocks(n), BENCH_THREADS, 0, s>>>(
      dst, bench_gen_key(seed, rank, bytes, buf), first, n, dtype, pl_dtype_bytes(dtype));
  CK(cudaGetLastError());
  CK(cudaStreamSynchronize(s));
}

extern "C" size_t bench_check_dev(const bench_geom_t *g, const void *out, int dtype, int op,
                                  uint64_t seed, int exact) {
  static unsigned long long *counter; /* device, one per process, freed at exit */
  cudaStream_t s = (cudaStream_t)B.stream;
  bench_elem_ctx_t c;
  unsigned long long wrong = 0;
  if (!counter)
    CK(cudaMalloc(&counter, sizeof *counter));
  bench_elem_ctx_init(&c, g, dtype, op, seed, exact);
  CK(cudaMemsetAsync(counter, 0, sizeof *counter, s));
  for (int k = 0; k < g->nsegs; k++) {
    if (!g->segs[k].len)
      continue;
    bench_check_kernel<<<bench_blocks(g->segs[k].len), BENCH_THREADS, 0, s>>>(c, out, g->segs[k],
                                                                              g->esize, counter);
    CK(cudaGetLastError());
  }
  CK(cudaMemcpyAsync(&wrong, counter, sizeof wrong, cudaMemcpyDeviceToHost, s));
  CK(cudaStreamSynchronize(s));
  return (size_t)wrong;
}
