/* floor.cu -- the small-size speed of light, independent of purlin's datapath: a zero-byte
 * all-to-all barrier in one kernel. Every rank release-stores a counter into its slot of every
 * peer's flag array (peer memory mapped with CUDA IPC, handles exchanged over purlin's host
 * bookkeeping collectives) and one thread per peer spins with acquire loads until that peer's
 * counter arrives. The counter lives in device memory and the kernel advances it, so the calls
 * captured in a graph replay any number of times (the same trick as purlin's device epochs).
 *
 * Two variants are timed: "flags" (arguments of ~600 bytes) is the floor; "flags, 4 KiB args"
 * pads the arguments to purlin's kernel-argument size, to show what argument upload costs. */
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

extern "C" {
#include "bench.h"
}

#define FLOOR_MAX 72

typedef struct {
  uint64_t *peers[FLOOR_MAX]; /* peer p's flag array (world words), mapped here */
  uint64_t *mine;             /* my flag array: slot p is written by p */
  uint64_t *count;            /* calls completed by this rank (device memory) */
  int rank, world;
} floor_args_t;

typedef struct {
  floor_args_t a;
  char pad[4000 - sizeof(floor_args_t)];
} floor_fat_args_t;

static __device__ __forceinline__ void floor_barrier(const floor_args_t *a) {
  __shared__ uint64_t v;
  if (threadIdx.x == 0) v = *(volatile uint64_t *)a->count + 1;
  __syncthreads();
  int p = threadIdx.x;
  if (p < a->world) {
    asm volatile("st.release.sys.u64 [%0], %1;" ::"l"(a->peers[p] + a->rank), "l"(v) : "memory");
    uint64_t f;
    do {
      asm volatile("ld.acquire.sys.u64 %0, [%1];" : "=l"(f) : "l"(a->mine + p) : "memory");
    } while (f < v);
  }
  __syncthreads();
  if (threadIdx.x == 0) *(volatile uint64_t *)a->count = v;
}

static __global__ void floor_kernel(const __grid_constant__ floor_args_t a) { floor_barrier(&a); }
static __global__ void floor_fat_kernel(const __grid_constant__ floor_fat_args_t a) {
  floor_barrier(&a.a);
}

static floor_fat_args_t F;
static int floor_ready;

#define FCU(call)                                                                                  \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) bench_die("floor: %s: %s", #call, cudaGetErrorString(e_));              \
  } while (0)

static void floor_setup(void) {
  if (floor_ready) return;
  if (B.world > FLOOR_MAX) bench_die("floor: world %d > %d", B.world, FLOOR_MAX);
  memset(&F, 0, sizeof F);
  uint64_t *mine;
  FCU(cudaMalloc((void **)&mine, 4096));
  FCU(cudaMemset(mine, 0, 4096));
  FCU(cudaDeviceSynchronize());
  cudaIpcMemHandle_t h, all[FLOOR_MAX];
  FCU(cudaIpcGetMemHandle(&h, mine));
  bench_allgather_host(&h, all, sizeof h);
  for (int p = 0; p < B.world; p++) {
    if (p == B.rank) F.a.peers[p] = mine;
    else FCU(cudaIpcOpenMemHandle((void **)&F.a.peers[p], all[p], cudaIpcMemLazyEnablePeerAccess));
  }
  F.a.mine = mine;
  F.a.count = mine + FLOOR_MAX; /* same allocation, past the flags */
  F.a.rank = B.rank;
  F.a.world = B.world;
  floor_ready = 1;
}

static int floor_fn(void *arg, int i) {
  (void)i;
  cudaStream_t s = (cudaStream_t)B.stream;
  if (arg) floor_fat_kernel<<<1, 128, 0, s>>>(F);
  else floor_kernel<<<1, 128, 0, s>>>(F.a);
  return cudaGetLastError() == cudaSuccess ? 0 : -1;
}

/* Median per-call time of the flag barrier in graph replay (fat: 4 KiB arguments); every rank
 * calls this at the same time. The result is the maximum over ranks. */
extern "C" double bench_floor_barrier_us(int fat, int iters, int repeats, int warmup, int graph) {
  double us[64];
  if (repeats > 64) repeats = 64;
  floor_setup();
  if (bench_time(floor_fn, fat ? (void *)&F : NULL, iters, repeats, warmup, graph, us))
    bench_die("floor: the barrier kernel failed: %s", cudaGetErrorString(cudaGetLastError()));
  bench_allreduce_host(us, (size_t)repeats, PURLIN_F64, PURLIN_MAX);
  for (int i = 1; i < repeats; i++) /* insertion sort, then the median */
    for (int j = i; j > 0 && us[j] < us[j - 1]; j--) {
      double t = us[j];
      us[j] = us[j - 1];
      us[j - 1] = t;
    }
  return us[repeats / 2];
}
