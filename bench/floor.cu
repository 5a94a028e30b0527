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

/* A zeroed device allocation of `bytes`, mapped at every rank (CUDA IPC, handles exchanged over
 * purlin's host bookkeeping collectives): peers[p] is rank p's, peers[B.rank] mine. */
static char *floor_alloc_mapped(size_t bytes, char **peers) {
  if (B.world > FLOOR_MAX) bench_die("floor: world %d > %d", B.world, FLOOR_MAX);
  char *mine;
  FCU(cudaMalloc((void **)&mine, bytes));
  FCU(cudaMemset(mine, 0, bytes));
  FCU(cudaDeviceSynchronize());
  cudaIpcMemHandle_t h, all[FLOOR_MAX];
  FCU(cudaIpcGetMemHandle(&h, mine));
  bench_allgather_host(&h, all, sizeof h);
  for (int p = 0; p < B.world; p++) {
    if (p == B.rank) peers[p] = mine;
    else FCU(cudaIpcOpenMemHandle((void **)&peers[p], all[p], cudaIpcMemLazyEnablePeerAccess));
  }
  return mine;
}

static void floor_setup(void) {
  if (floor_ready) return;
  memset(&F, 0, sizeof F);
  char *peers[FLOOR_MAX];
  uint64_t *mine = (uint64_t *)floor_alloc_mapped(4096, peers);
  for (int p = 0; p < B.world; p++) F.a.peers[p] = (uint64_t *)peers[p];
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

/* The median of every sample's maximum over ranks (every rank calls this). */
static double floor_median_max(double *us, int repeats) {
  bench_allreduce_host(us, (size_t)repeats, PURLIN_F64, PURLIN_MAX);
  for (int i = 1; i < repeats; i++) /* insertion sort, then the median */
    for (int j = i; j > 0 && us[j] < us[j - 1]; j--) {
      double t = us[j];
      us[j] = us[j - 1];
      us[j - 1] = t;
    }
  return us[repeats / 2];
}

/* Median per-call time of the flag barrier in graph replay (fat: 4 KiB arguments); every rank
 * calls this at the same time. The result is the maximum over ranks. */
extern "C" double bench_floor_barrier_us(int fat, int iters, int repeats, int warmup, int graph) {
  double us[64];
  if (repeats > 64) repeats = 64;
  floor_setup();
  if (bench_time(floor_fn, fat ? (void *)&F : NULL, iters, repeats, warmup, graph, us))
    bench_die("floor: the barrier kernel failed: %s", cudaGetErrorString(cudaGetLastError()));
  return floor_median_max(us, repeats);
}

/* ---- the ideal one-shot AllReduce: the small AllReduce's datapath alone ------------------------
 * What purlin's latency regime does at its core, and nothing else: every rank stores its whole
 * bf16 vector as 16-byte packets (8 bytes of data, 8 of flag, the flag in the same store) into its
 * slot of every peer's window, and reduces the vector from its own input and every peer's packets
 * in rank order (float accumulation). No header, no abort or deadline, no error path, no tuning:
 * the cost of purlin's kernel above this is its control. Windows are double-buffered by call
 * parity (a peer one call ahead writes the other half), the flag is the call number. CTA c takes
 * a c-th part of the words; the last CTA to finish advances the call number. */

#define IDEAL_MAX_BYTES (256 * 1024)

typedef struct {
  char *win[FLOOR_MAX];  /* rank p's packet window ([2][world][words] packets), mapped here */
  const uint64_t *in;    /* my input, words 8-byte words (4 bf16 each) */
  uint64_t *out;         /* my output */
  uint64_t *count;       /* calls completed by this rank */
  unsigned *exitc;       /* CTAs of this call that finished */
  uint32_t words;
  int rank, world;
  int pad_reps; /* passes over the PAD code */
} ideal_args_t;

static __device__ __forceinline__ void ideal_add4(float *a, uint64_t x) {
  for (int k = 0; k < 4; k++) a[k] += __uint_as_float((uint32_t)(x >> (16 * k) & 0xffff) << 16);
}

/* PAD: ~16 KB of straight-line code first, run pad_reps times (four independent xorshift-multiply
 * chains, kept by a store that never happens), to show what running that much code cold costs: a
 * kernel's instructions come from L2 in a launch where this SM's instruction caches do not hold
 * them, and under MPS every rank's process has its own copy of the code. The second pass runs
 * warm: (2 passes - 1 pass) is the code's execution; (1 pass - none) minus that is its fetch. */
template <int PAD>
static __global__ void ideal_ar_kernel(const __grid_constant__ ideal_args_t a) {
  __shared__ uint64_t sv;
  if (PAD) {
    uint32_t x0 = threadIdx.x + 1, x1 = x0 * 3u, x2 = x0 * 5u, x3 = x0 * 7u;
#pragma unroll 1
    for (int rep = 0; rep < a.pad_reps; rep++)
#pragma unroll
      for (int k = 0; k < 80; k++) {
        x0 = (x0 ^ (x0 >> 7)) * 0x9e3779b1u;
        x1 = (x1 ^ (x1 >> 9)) * 0x85ebca6bu;
        x2 = (x2 ^ (x2 >> 11)) * 0xc2b2ae35u;
        x3 = (x3 ^ (x3 >> 13)) * 0x27d4eb2fu;
      }
    if ((x0 ^ x1 ^ x2 ^ x3) == 0x2545f491u && a.words == 0) a.out[0] = x0;
  }
  if (threadIdx.x == 0) sv = *(volatile uint64_t *)a.count + 1;
  __syncthreads();
  const uint64_t f = sv, par = f & 1;
  const int w = a.world, r = a.rank;
  const uint32_t nt = blockDim.x, tid = threadIdx.x;
  const uint32_t lo = (uint32_t)((uint64_t)a.words * blockIdx.x / gridDim.x);
  const uint32_t hi = (uint32_t)((uint64_t)a.words * (blockIdx.x + 1) / gridDim.x), n = hi - lo;
  const uint64_t slot = (uint64_t)a.words * 16; /* one source's packets */
  for (uint32_t k = tid; k < (uint32_t)(w - 1) * n; k += nt) {
    uint32_t j = k / n, i = lo + k - j * n;
    int d = r + 1 + (int)j;
    d = d >= w ? d - w : d;
    char *q = a.win[d] + (par * (uint64_t)w + (uint64_t)r) * slot + (uint64_t)i * 16;
    asm volatile("st.volatile.v2.u64 [%0], {%1, %2};" ::"l"(q), "l"(a.in[i]), "l"(f));
  }
  const char *mine = a.win[r] + par * (uint64_t)w * slot;
  for (uint32_t i = lo + tid; i < hi; i += nt) {
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    for (int s0 = 0; s0 < w; s0 += 8) {
      uint64_t dv[8], fv[8];
#pragma unroll
      for (int u = 0; u < 8; u++) {
        int s = s0 + u;
        fv[u] = f;
        dv[u] = 0;
        if (s < w && s != r)
          asm volatile("ld.volatile.v2.u64 {%0, %1}, [%2];"
                       : "=l"(dv[u]), "=l"(fv[u])
                       : "l"(mine + (uint64_t)s * slot + (uint64_t)i * 16));
      }
#pragma unroll
      for (int u = 0; u < 8; u++) {
        int s = s0 + u;
        while (fv[u] != f)
          asm volatile("ld.volatile.v2.u64 {%0, %1}, [%2];"
                       : "=l"(dv[u]), "=l"(fv[u])
                       : "l"(mine + (uint64_t)s * slot + (uint64_t)i * 16));
        if (s < w) ideal_add4(acc, s == r ? a.in[i] : dv[u]);
      }
    }
    uint64_t o = 0;
    for (int k = 0; k < 4; k++) o |= (uint64_t)(__float_as_uint(acc[k]) >> 16) << (16 * k);
    a.out[i] = o;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    if (gridDim.x == 1) {
      *(volatile uint64_t *)a.count = f;
    } else {
      __threadfence();
      if (atomicAdd(a.exitc, 1u) == gridDim.x - 1) {
        *a.exitc = 0;
        *(volatile uint64_t *)a.count = f;
      }
    }
  }
}

static ideal_args_t IA;
static int ideal_ready;

typedef struct {
  uint32_t bytes;
  int ctas, pad;
} ideal_cfg_t;

static int ideal_fn(void *arg, int i) {
  (void)i;
  const ideal_cfg_t *c = (const ideal_cfg_t *)arg;
  ideal_args_t a = IA;
  a.words = c->bytes / 8;
  a.pad_reps = c->pad;
  if (c->pad) ideal_ar_kernel<1><<<c->ctas, 256, 0, (cudaStream_t)B.stream>>>(a);
  else ideal_ar_kernel<0><<<c->ctas, 256, 0, (cudaStream_t)B.stream>>>(a);
  return cudaGetLastError() == cudaSuccess ? 0 : -1;
}

/* bf16 of a small integer in [-2, 2]: any sum of up to FLOOR_MAX of them is exact in float and
 * in bf16 (|sum| <= 144 < 256) */
static uint16_t ideal_val(int rank, uint32_t e) {
  float v = (float)((int)((e * 7u + (uint32_t)rank * 3u) % 5u) - 2);
  uint32_t u;
  memcpy(&u, &v, 4);
  return (uint16_t)(u >> 16);
}

static void ideal_setup(void) {
  if (ideal_ready) return;
  memset(&IA, 0, sizeof IA);
  /* the windows, flag 0: no call's */
  floor_alloc_mapped(2 * (size_t)B.world * (IDEAL_MAX_BYTES / 8) * 16, IA.win);
  uint16_t *h = (uint16_t *)malloc(IDEAL_MAX_BYTES);
  if (!h) bench_die("floor: out of memory");
  for (uint32_t e = 0; e < IDEAL_MAX_BYTES / 2; e++) h[e] = ideal_val(B.rank, e);
  FCU(cudaMalloc((void **)&IA.in, IDEAL_MAX_BYTES));
  FCU(cudaMemcpy((void *)IA.in, h, IDEAL_MAX_BYTES, cudaMemcpyHostToDevice));
  free(h);
  FCU(cudaMalloc((void **)&IA.out, IDEAL_MAX_BYTES));
  FCU(cudaMalloc((void **)&IA.count, 64));
  FCU(cudaMemset(IA.count, 0, 64));
  IA.exitc = (unsigned *)(IA.count + 1);
  FCU(cudaDeviceSynchronize());
  IA.rank = B.rank;
  IA.world = B.world;
  ideal_ready = 1;
}

/* Median per-call time (max over ranks) of the ideal one-shot AllReduce of `bytes` (a multiple of
 * 8, at most 256 KiB) on `ctas` CTAs of 256 threads (pad: ~16 KB of code run first, pad times:
 * the kernel's PAD), in graph replay; every rank calls this at the
 * same time. Then one checked call: returns -1 if any rank's output has a wrong element. */
extern "C" double bench_floor_ideal_ar_us(size_t bytes, int ctas, int pad, int iters,
                                          int repeats, int warmup, int graph) {
  double us[64];
  if (repeats > 64) repeats = 64;
  if (bytes > IDEAL_MAX_BYTES || bytes % 8) bench_die("floor: ideal AllReduce of %zu bytes", bytes);
  ideal_setup();
  ideal_cfg_t cfg = {(uint32_t)bytes, ctas, pad};
  FCU(cudaMemset(IA.out, 0xff, bytes)); /* poisoned: NaNs */
  if (bench_time(ideal_fn, &cfg, iters, repeats, warmup, graph, us))
    bench_die("floor: the ideal AllReduce failed: %s", cudaGetErrorString(cudaGetLastError()));
  FCU(cudaStreamSynchronize((cudaStream_t)B.stream));
  uint16_t *h = (uint16_t *)malloc(bytes);
  if (!h) bench_die("floor: out of memory");
  FCU(cudaMemcpy(h, IA.out, bytes, cudaMemcpyDeviceToHost));
  int bad = 0;
  for (uint32_t e = 0; e < bytes / 2; e++) {
    float want = 0, got;
    for (int p = 0; p < B.world; p++) {
      uint32_t u = (uint32_t)ideal_val(p, e) << 16;
      float v;
      memcpy(&v, &u, 4);
      want += v;
    }
    uint32_t u = (uint32_t)h[e] << 16;
    memcpy(&got, &u, 4);
    bad += got != want;
  }
  free(h);
  bench_allreduce_host(&bad, 1, PURLIN_I32, PURLIN_MAX);
  double t = floor_median_max(us, repeats);
  return bad ? -1 : t;
}
