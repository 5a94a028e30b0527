/* p2p.cu -- the speed of light between the GPUs of one machine (issue 8's topology step), in one
 * process that drives every GPU:
 *   - peer access: cudaDeviceCanAccessPeer for every ordered pair (a matrix of 1/0);
 *   - copy bandwidth: cudaMemcpyPeerAsync of BYTES from GPU i to GPU j (the copy engines, as
 *     nvbandwidth's device-to-device CE test), best of REPS, for every ordered pair; and GPU 0
 *     copying to all others at once (what one GPU can push);
 *   - flag round trip: a kernel on GPU i stores a counter into GPU j's memory (st.release.sys),
 *     a kernel on GPU j waits for it (ld.acquire.sys) and answers into GPU i's memory; the mean
 *     time of one store -> poll -> reply, over ROUNDS, for the pairs (0, j).
 * Exit status 0 when every pair has peer access, 1 when some pair lacks it (the table says which),
 * 2 on a CUDA error. Usage: p2p [bytes] [reps] [rounds]; defaults 256 MiB, 3, 10000.
 * Never uses NVLink multicast. */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define P2P_MAX 16

#define CK(call)                                                                                   \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) {                                                                       \
      fprintf(stderr, "p2p: %s: %s (line %d)\n", #call, cudaGetErrorString(e_), __LINE__);          \
      exit(2);                                                                                     \
    }                                                                                              \
  } while (0)

/* One side of the ping-pong: rank 0 (the initiator) stores k and waits for the answer k; rank 1
 * waits for k and answers it. `out` is the peer's flag, `in` mine. */
__global__ void p2p_pingpong(uint64_t *out, const uint64_t *in, int initiator, int rounds,
                             unsigned long long *ns) {
  unsigned long long t0, t1;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  for (uint64_t k = 1; k <= (uint64_t)rounds; k++) {
    if (initiator) asm volatile("st.release.sys.u64 [%0], %1;" ::"l"(out), "l"(k) : "memory");
    uint64_t v;
    do {
      asm volatile("ld.acquire.sys.u64 %0, [%1];" : "=l"(v) : "l"(in) : "memory");
    } while (v < k);
    if (!initiator) asm volatile("st.release.sys.u64 [%0], %1;" ::"l"(out), "l"(k) : "memory");
  }
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
  *ns = t1 - t0;
}

static double copy_gbs(int src, int dst, void *const *buf, size_t bytes, int reps) {
  cudaStream_t s;
  cudaEvent_t e0, e1;
  CK(cudaSetDevice(src));
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  CK(cudaMemcpyPeerAsync(buf[2 * dst + 1], dst, buf[2 * src], src, bytes, s)); /* warm up */
  float best = 1e30f;
  for (int r = 0; r < reps; r++) {
    CK(cudaEventRecord(e0, s));
    CK(cudaMemcpyPeerAsync(buf[2 * dst + 1], dst, buf[2 * src], src, bytes, s));
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    best = ms < best ? ms : best;
  }
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  CK(cudaStreamDestroy(s));
  return (double)bytes / (best * 1e-3) / 1e9;
}

/* GPU 0 copies `bytes` to every other GPU at once, one stream each: its aggregate GB/s. */
static double fanout_gbs(int n, void *const *buf, size_t bytes) {
  cudaStream_t s[P2P_MAX];
  cudaEvent_t e0, e1[P2P_MAX];
  CK(cudaSetDevice(0));
  CK(cudaEventCreate(&e0));
  for (int j = 1; j < n; j++) {
    CK(cudaStreamCreateWithFlags(&s[j], cudaStreamNonBlocking));
    CK(cudaEventCreate(&e1[j]));
  }
  CK(cudaEventRecord(e0, s[1]));
  for (int j = 2; j < n; j++) CK(cudaStreamWaitEvent(s[j], e0, 0));
  for (int j = 1; j < n; j++) {
    CK(cudaMemcpyPeerAsync(buf[2 * j + 1], j, buf[0], 0, bytes, s[j]));
    CK(cudaEventRecord(e1[j], s[j]));
  }
  float most = 0;
  for (int j = 1; j < n; j++) {
    float ms;
    CK(cudaEventSynchronize(e1[j]));
    CK(cudaEventElapsedTime(&ms, e0, e1[j]));
    most = ms > most ? ms : most;
  }
  for (int j = 1; j < n; j++) {
    CK(cudaEventDestroy(e1[j]));
    CK(cudaStreamDestroy(s[j]));
  }
  CK(cudaEventDestroy(e0));
  return (double)bytes * (n - 1) / (most * 1e-3) / 1e9;
}

/* Mean us of one round trip between GPU a (initiator) and GPU b. */
static double round_trip_us(int a, int b, uint64_t *const *flag, int rounds) {
  unsigned long long *ns[2];
  int dev[2] = {a, b};
  for (int i = 0; i < 2; i++) {
    CK(cudaSetDevice(dev[i]));
    CK(cudaMemset(flag[dev[i]], 0, 8));
    CK(cudaDeviceSynchronize()); /* both flags are 0 before either kernel stores */
    CK(cudaMallocHost((void **)&ns[i], sizeof **ns));
  }
  for (int i = 0; i < 2; i++) { /* the responder first: the initiator's first store finds it */
    int me = dev[1 - i], peer = dev[i];
    CK(cudaSetDevice(me));
    p2p_pingpong<<<1, 1>>>(flag[peer], flag[me], me == a, rounds, ns[1 - i]);
    CK(cudaGetLastError());
  }
  for (int i = 0; i < 2; i++) {
    CK(cudaSetDevice(dev[i]));
    CK(cudaDeviceSynchronize());
  }
  double us = (double)*ns[0] / 1e3 / rounds;
  for (int i = 0; i < 2; i++) CK(cudaFreeHost(ns[i]));
  return us;
}

int main(int argc, char **argv) {
  size_t bytes = argc > 1 ? strtoull(argv[1], NULL, 0) : (size_t)256 << 20;
  int reps = argc > 2 ? atoi(argv[2]) : 3, rounds = argc > 3 ? atoi(argv[3]) : 10000, n = 0;
  CK(cudaGetDeviceCount(&n));
  if (n > P2P_MAX) n = P2P_MAX;
  printf("p2p: %d GPUs, copies of %zu bytes (best of %d), %d round trips per pair\n", n, bytes,
         reps, rounds);
  int can[P2P_MAX][P2P_MAX], missing = 0;
  printf("\npeer access (row: from, column: to)\n     ");
  for (int j = 0; j < n; j++) printf(" %3d", j);
  printf("\n");
  for (int i = 0; i < n; i++) {
    printf("%3d: ", i);
    for (int j = 0; j < n; j++) {
      can[i][j] = 1;
      if (i != j) CK(cudaDeviceCanAccessPeer(&can[i][j], i, j));
      missing += !can[i][j];
      printf(" %3s", i == j ? "-" : can[i][j] ? "1" : "0");
    }
    printf("\n");
  }
  if (n < 2 || missing) {
    printf("p2p: %s\n", n < 2 ? "one GPU: nothing between GPUs to measure"
                              : "some pairs lack peer access (0 above): purlin refuses them");
    return n < 2 ? 0 : 1;
  }
  void *buf[2 * P2P_MAX];     /* per GPU: a source and a destination of `bytes` */
  uint64_t *flag[P2P_MAX];    /* per GPU: the word its peer stores into */
  for (int i = 0; i < n; i++) {
    CK(cudaSetDevice(i));
    for (int j = 0; j < n; j++)
      if (j != i) CK(cudaDeviceEnablePeerAccess(j, 0));
    CK(cudaMalloc(&buf[2 * i], bytes));
    CK(cudaMalloc(&buf[2 * i + 1], bytes));
    CK(cudaMemset(buf[2 * i], 1, bytes));
    CK(cudaMalloc((void **)&flag[i], 8));
  }
  printf("\ncopy engine GB/s, one copy at a time (row: from, column: to)\n     ");
  for (int j = 0; j < n; j++) printf(" %6d", j);
  printf("\n");
  double lo = 1e30, hi = 0;
  for (int i = 0; i < n; i++) {
    printf("%3d: ", i);
    for (int j = 0; j < n; j++) {
      if (i == j) {
        printf(" %6s", "-");
        continue;
      }
      double g = copy_gbs(i, j, buf, bytes, reps);
      lo = g < lo ? g : lo;
      hi = g > hi ? g : hi;
      printf(" %6.1f", g);
    }
    printf("\n");
  }
  double fan = fanout_gbs(n, buf, bytes);
  printf("\nGPU 0 to the %d others at once: %.1f GB/s in all\n", n - 1, fan);
  printf("\nflag round trip (store -> poll -> reply), us\n");
  double rt_hi = 0;
  for (int j = 1; j < n; j++) {
    double us = round_trip_us(0, j, flag, rounds);
    rt_hi = us > rt_hi ? us : rt_hi;
    printf("  0 <-> %d: %.2f\n", j, us);
  }
  printf("\np2p summary: %d GPUs, every pair peer-accessible; copy %.1f-%.1f GB/s per pair, "
         "%.1f GB/s fan-out from GPU 0; round trip <= %.2f us\n",
         n, lo, hi, fan, rt_hi);
  for (int i = 0; i < n; i++) {
    CK(cudaSetDevice(i));
    CK(cudaFree(buf[2 * i]));
    CK(cudaFree(buf[2 * i + 1]));
    CK(cudaFree(flag[i]));
  }
  return 0;
}
