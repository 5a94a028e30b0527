/* fused_allreduce_rmsnorm.cu -- AllReduce fused with the residual add and RMSNorm that follow it in
 * a transformer layer, written with purlin's device API (include/purlin_device.cuh), against the
 * unfused path: purlin_all_reduce, then an add kernel, then an RMSNorm kernel.
 *
 *   purlinrun -n 4 build/examples/fused_allreduce_rmsnorm [--iters N] [--quick]
 *
 * Per rank: x (tokens x hidden, bf16, different on every rank), residual and weight (the same on
 * every rank, as in tensor parallelism). Both paths compute
 *     a = AllReduce_sum(x)            one f32 accumulator per element, ranks in ascending order
 *     h = bf16(a + residual)          -> residual_out
 *     out = bf16(h * rsqrt(mean(h^2) + eps) * weight)
 * with the same arithmetic in the same order (the AllReduce of purlin's deterministic mode, the
 * same row reduction for mean(h^2)), so the outputs must be equal bit for bit. Each size is checked
 * on random inputs with poisoned outputs, then timed (CUDA events, one stream). Two fused kernels:
 *   oneshot: every rank reduces every row from all ranks' x, adds, normalizes (one read of every
 *            peer's whole x; barriers at the start and the end);
 *   twoshot: rank r reduces, adds and normalizes its slice of the rows, writes them to its own
 *            output, then copies the other ranks' rows from theirs (a flag per row).
 * The table prints the unfused time, the faster fused one, and the ratio. Ranks may share a GPU
 * (under MPS): the grid is bounded so that every rank's blocks fit on the GPU at once. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "purlin.h"
#include "purlin_device.cuh"

#define NT 512            /* threads per block, in the RMSNorm kernel and in the fused kernels */
#define MAX_HIDDEN 8192
#define MAX_TOKENS 512
#define EPS 1e-6f
/* user flag slots (every rank's flags): start barrier, end barrier, one flag per row */
#define SLOT_START 0
#define SLOT_END (SLOT_START + PURLIN_DEV_MAX_RANKS)
#define SLOT_ROW (SLOT_END + PURLIN_DEV_MAX_RANKS)

#define CK(call)                                                                                   \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) {                                                                       \
      fprintf(stderr, "rank %d: %s: %s\n", g_rank, #call, cudaGetErrorString(e_));               \
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

static int g_rank;
static purlin_comm_t g_comm;

/* ---- the row math, shared by the unfused and the fused kernels --------------------------------- */

__device__ __forceinline__ float bf(uint16_t v) { return pl_bf16_to_f32(v); }

/* sum over i < hidden of f32(h[i])^2, in a fixed order for a block of NT threads: per thread in
 * index order, then a fixed tree. Every thread gets the sum. */
__device__ float row_sumsq_block(const uint16_t *h, int hidden) {
  __shared__ float part[NT / 32];
  float s = 0.f;
  for (int i = threadIdx.x; i < hidden; i += NT) s += bf(h[i]) * bf(h[i]);
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x / 32] = s;
  __syncthreads();
  float t = 0.f;
  for (int k = 0; k < NT / 32; k++) t += part[k];
  __syncthreads(); /* part may be reused by the next row */
  return t;
}

/* h (row of residual_out) -> out */
__device__ void rmsnorm_row_block(const uint16_t *h, const uint16_t *w, uint16_t *out, int hidden) {
  float r = rsqrtf(row_sumsq_block(h, hidden) / (float)hidden + EPS);
  for (int i = threadIdx.x; i < hidden; i += NT) out[i] = pl_f32_to_bf16(bf(h[i]) * r * bf(w[i]));
}

/* ---- unfused: purlin_all_reduce, then these two --------------------------------------------------- */

__global__ void add_kernel(const uint16_t *a, const uint16_t *res, uint16_t *h, size_t n) {
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += stride)
    h[i] = pl_f32_to_bf16(bf(a[i]) + bf(res[i]));
}
__global__ void __launch_bounds__(NT) rmsnorm_kernel(const uint16_t *h, const uint16_t *w,
                                                     uint16_t *out, int tokens, int hidden) {
  for (int t = blockIdx.x; t < tokens; t += gridDim.x)
    rmsnorm_row_block(h + (size_t)t * hidden, w, out + (size_t)t * hidden, hidden);
}

/* ---- fused ------------------------------------------------------------------------------------------ */

/* The buffer behind the handle, on every rank: [x][out][residual_out], region bytes apart. */
typedef struct {
  const uint16_t *res, *w;
  int tokens, hidden;
  uint64_t region; /* bytes */
} args_t;

/* Row t: a = AllReduce(x[t]) into shared memory (purlin_dev_reduce_peers_block: f32, rank order),
 * then h = a + residual -> residual_out, then RMSNorm -> out (in this rank's buffer). */
__device__ void fused_row_block(const purlin_dev_handle_t *h, const args_t *a, int t) {
  __shared__ __align__(16) uint16_t row[MAX_HIDDEN];
  uint64_t rb = (uint64_t)a->hidden * 2, off = (uint64_t)t * rb;
  char *mine = (char *)h->peer[h->rank];
  uint16_t *out = (uint16_t *)(mine + a->region + off);
  uint16_t *hres = (uint16_t *)(mine + 2 * a->region + off);
  purlin_dev_reduce_peers_block(h, row, off, a->hidden, PURLIN_BF16, PURLIN_SUM);
  __syncthreads();
  const uint16_t *res = a->res + (uint64_t)t * a->hidden;
  for (int i = threadIdx.x; i < a->hidden; i += NT) {
    uint16_t v = pl_f32_to_bf16(bf(row[i]) + bf(res[i]));
    row[i] = v; /* each thread rewrites only its own elements: no barrier needed before */
    hres[i] = v;
  }
  __syncthreads();
  rmsnorm_row_block(row, a->w, out, a->hidden);
  __syncthreads(); /* row is reused by the next row of this block */
}

__global__ void __launch_bounds__(NT)
    fused_oneshot(const __grid_constant__ purlin_dev_handle_t h, const args_t a) {
  uint64_t seq = purlin_dev_seq_begin_thread(&h), v = seq + 1;
  /* every rank's x is in place (written before this launch) */
  if (purlin_dev_barrier_block(&h, SLOT_START, v, 0)) return; /* timeout/abort: give up */
  for (int t = blockIdx.x; t < a.tokens; t += gridDim.x) fused_row_block(&h, &a, t);
  /* the last block of this rank waits until every rank has finished reading our x */
  if (purlin_dev_seq_end_block(&h, seq)) (void)purlin_dev_barrier_block(&h, SLOT_END, v, 0);
}

__global__ void __launch_bounds__(NT)
    fused_twoshot(const __grid_constant__ purlin_dev_handle_t h, const args_t a) {
  uint64_t seq = purlin_dev_seq_begin_thread(&h), v = seq + 1;
  int w = h.world, per = (a.tokens + w - 1) / w, lo = h.rank * per;
  int hi = lo + per < a.tokens ? lo + per : a.tokens;
  uint64_t rb = (uint64_t)a.hidden * 2;
  if (purlin_dev_barrier_block(&h, SLOT_START, v, 0)) return;
  /* my rows, then a flag per row on every rank: "row t of out and residual_out is in my buffer" */
  for (int t = lo + blockIdx.x; t < hi; t += gridDim.x) {
    fused_row_block(&h, &a, t);
    __syncthreads();
    for (int r = threadIdx.x; r < w; r += NT)
      purlin_dev_publish_thread(h.flags[r] + SLOT_ROW + t, v);
  }
  /* the other ranks' rows, from their buffers into mine */
  char *mine = (char *)h.peer[h.rank];
  for (int t = blockIdx.x; t < a.tokens; t += gridDim.x) {
    int owner = t / per;
    if (owner == h.rank) continue;
    if (purlin_dev_await_block(&h, h.flags[h.rank] + SLOT_ROW + t, v, 0)) break;
    const char *src = (const char *)h.peer[owner];
    uint64_t off = (uint64_t)t * rb;
    purlin_dev_copy_block(mine + a.region + off, src + a.region + off, rb);
    purlin_dev_copy_block(mine + 2 * a.region + off, src + 2 * a.region + off, rb);
  }
  /* no end barrier: every peer read our x before publishing the rows we copied, and it reads our
   * rows before its next launch passes the start barrier, which needs ours */
  (void)purlin_dev_seq_end_block(&h, seq);
}

/* ---- host ------------------------------------------------------------------------------------------- */

static uint32_t rng_u32(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(*s >> 33);
}
/* a bf16 in about [-2, 2) */
static uint16_t rnd_bf16(uint64_t *s) {
  float f = ((float)(rng_u32(s) & 0xffff) / 32768.f - 1.f) * 2.f;
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)(u >> 16);
}

typedef struct {
  int world, grid, ranks_per_gpu;
  char *sym;        /* purlin_mem_alloc: [x][out][residual_out] */
  uint16_t *ar;     /* purlin_mem_alloc: the unfused AllReduce's output */
  uint16_t *res, *w, *ref_out, *ref_hres;
  purlin_dev_handle_t h;
  cudaStream_t st;
  purlin_opts_t opts;
  uint64_t region;
} ctx_t;

static void run_unfused(ctx_t *c, int tokens, int hidden) {
  size_t n = (size_t)tokens * hidden;
  PK(purlin_all_reduce(c->sym, c->ar, n, PURLIN_BF16, PURLIN_SUM, g_comm, c->st, &c->opts));
  unsigned blocks = (unsigned)((n + 511) / 512 < 1024 ? (n + 511) / 512 : 1024);
  add_kernel<<<blocks, 512, 0, c->st>>>(c->ar, c->res, c->ref_hres, n);
  rmsnorm_kernel<<<tokens, NT, 0, c->st>>>(c->ref_hres, c->w, c->ref_out, tokens, hidden);
}
static void run_fused(ctx_t *c, int two, int tokens, int hidden) {
  args_t a = {c->res, c->w, tokens, hidden, c->region};
  int rows = two ? (tokens + c->world - 1) / c->world : tokens;
  int grid = rows < c->grid ? rows : c->grid;
  if (grid < 1) grid = 1;
  if (two) fused_twoshot<<<grid, NT, 0, c->st>>>(c->h, a);
  else fused_oneshot<<<grid, NT, 0, c->st>>>(c->h, a);
}
static float time_us(ctx_t *c, int which, int tokens, int hidden, int iters) {
  cudaEvent_t e0, e1;
  float ms = 0;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (int i = 0; i < 5 + iters; i++) {
    if (i == 5) CK(cudaEventRecord(e0, c->st)); /* after 5 warm-up runs */
    if (which) run_fused(c, which - 1, tokens, hidden);
    else run_unfused(c, tokens, hidden);
  }
  CK(cudaEventRecord(e1, c->st));
  CK(cudaEventSynchronize(e1));
  CK(cudaEventElapsedTime(&ms, e0, e1));
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  return ms * 1000.f / (float)iters;
}

/* Fused variant `two` against the reference already in ref_out/ref_hres: bytes that differ. */
static size_t check(ctx_t *c, int two, int tokens, int hidden, uint16_t *hbuf) {
  size_t n = (size_t)tokens * hidden, bad = 0;
  CK(cudaMemsetAsync(c->sym + c->region, 0xff, 2 * c->region, c->st)); /* poison: bf16 NaN */
  CK(cudaStreamSynchronize(c->st));
  run_fused(c, two, tokens, hidden);
  CK(cudaStreamSynchronize(c->st));
  purlin_status_t as = PURLIN_OK;
  PK(purlin_comm_get_async_error(g_comm, &as));
  for (int k = 0; k < 2; k++) {
    const uint16_t *got = (const uint16_t *)(c->sym + (k + 1) * c->region);
    CK(cudaMemcpy(hbuf, got, n * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hbuf + n, k ? c->ref_hres : c->ref_out, n * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++) bad += hbuf[i] != hbuf[n + i];
  }
  return bad;
}

int main(int argc, char **argv) {
  int iters = 200, quick = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--quick")) quick = 1;
  }
  const char *lr = getenv("PURLIN_LOCAL_RANK");
  int ndev = 0, sms = 0, occ = 0;
  CK(cudaGetDeviceCount(&ndev));
  int dev = (lr ? atoi(lr) : 0) % ndev;
  CK(cudaSetDevice(dev));
  PK(purlin_comm_init_env(&g_comm, NULL));
  ctx_t c;
  memset(&c, 0, sizeof c);
  PK(purlin_comm_rank(g_comm, &g_rank));
  PK(purlin_comm_size(g_comm, &c.world));
  c.ranks_per_gpu = (c.world + ndev - 1) / ndev;
  /* every rank's blocks must be resident at once (they wait on each other) */
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, fused_oneshot, NT, 0));
  int occ2 = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ2, fused_twoshot, NT, 0));
  if (occ2 < occ) occ = occ2;
  c.grid = sms * (occ > 0 ? occ : 1) / c.ranks_per_gpu / 2; /* half: room for purlin's own CTAs */
  if (c.grid < 1) c.grid = 1;
  c.region = (uint64_t)MAX_TOKENS * MAX_HIDDEN * 2;
  size_t maxn = (size_t)MAX_TOKENS * MAX_HIDDEN;
  PK(purlin_mem_alloc(g_comm, 3 * c.region, (void **)&c.sym));
  PK(purlin_mem_alloc(g_comm, maxn * 2, (void **)&c.ar));
  PK(purlin_device_handle(g_comm, c.sym, 3 * c.region, &c.h));
  CK(cudaMalloc((void **)&c.res, maxn * 2));
  CK(cudaMalloc((void **)&c.w, MAX_HIDDEN * 2));
  CK(cudaMalloc((void **)&c.ref_out, maxn * 2));
  CK(cudaMalloc((void **)&c.ref_hres, maxn * 2));
  CK(cudaStreamCreateWithFlags(&c.st, cudaStreamNonBlocking));
  purlin_opts_t o = PURLIN_OPTS_INIT;
  o.mode = PURLIN_DETERMINISTIC;
  c.opts = o;
  uint16_t *hbuf = (uint16_t *)malloc(maxn * 2 * 2);
  if (!hbuf) return 1;

  const int hiddens[2] = {4096, 8192};
  size_t bad_total = 0;
  if (g_rank == 0)
    printf("fused AllReduce + residual add + RMSNorm, bf16, world %d, %d GPU(s), grid %d x %d, "
           "%d iterations\n%6s %6s %12s %12s %12s %8s %8s %s\n",
           c.world, ndev, c.grid, NT, iters, "hidden", "tokens", "unfused_us", "oneshot_us",
           "twoshot_us", "fused_us", "ratio", "check");
  for (int hi = 0; hi < 2; hi++) {
    int hidden = hiddens[hi];
    for (int tokens = 1; tokens <= MAX_TOKENS; tokens *= quick ? 8 : 2) {
      size_t n = (size_t)tokens * hidden;
      uint64_t sx = 0x9e3779b97f4a7c15ull * (uint64_t)(g_rank + 1) + (uint64_t)n;
      uint64_t sr = 0x2545f4914f6cdd1dull + (uint64_t)n; /* the same on every rank */
      for (size_t i = 0; i < n; i++) hbuf[i] = rnd_bf16(&sx);
      CK(cudaMemcpy(c.sym, hbuf, n * 2, cudaMemcpyHostToDevice));
      for (size_t i = 0; i < n; i++) hbuf[i] = rnd_bf16(&sr);
      CK(cudaMemcpy(c.res, hbuf, n * 2, cudaMemcpyHostToDevice));
      for (int i = 0; i < hidden; i++) hbuf[i] = rnd_bf16(&sr);
      CK(cudaMemcpy(c.w, hbuf, hidden * 2, cudaMemcpyHostToDevice));
      /* reference, with poisoned outputs */
      CK(cudaMemset(c.ar, 0xff, n * 2));
      CK(cudaMemset(c.ref_out, 0xff, n * 2));
      CK(cudaMemset(c.ref_hres, 0xff, n * 2));
      /* pageable copies and memsets on the legacy stream may still be landing: the kernels run
       * on a non-blocking stream, and peers read c.sym once this rank's first kernel runs */
      CK(cudaDeviceSynchronize());
      run_unfused(&c, tokens, hidden);
      CK(cudaStreamSynchronize(c.st));
      size_t bad1 = check(&c, 0, tokens, hidden, hbuf), bad2 = check(&c, 1, tokens, hidden, hbuf);
      bad_total += bad1 + bad2;
      if (bad1 || bad2)
        printf("rank %d: hidden %d tokens %d: FAIL: %zu (oneshot), %zu (twoshot) elements differ\n",
               g_rank, hidden, tokens, bad1, bad2);
      float tu = time_us(&c, 0, tokens, hidden, iters);
      float t1 = time_us(&c, 1, tokens, hidden, iters);
      float t2 = time_us(&c, 2, tokens, hidden, iters);
      float tf = t1 < t2 ? t1 : t2;
      if (g_rank == 0)
        printf("%6d %6d %12.2f %12.2f %12.2f %8.2f %8.2f %s\n", hidden, tokens, tu, t1, t2, tf,
               tu / tf, bad1 || bad2 ? "FAIL" : "bitwise-equal");
      fflush(stdout);
    }
  }
  purlin_status_t as = PURLIN_OK;
  PK(purlin_comm_get_async_error(g_comm, &as));
  printf("rank %d: fused_allreduce_rmsnorm: %s (%zu differing elements, async status %s)\n", g_rank,
         bad_total || as ? "FAIL" : "PASS", bad_total, purlin_status_name(as));
  purlin_mem_free(g_comm, c.ar);
  purlin_mem_free(g_comm, c.sym);
  purlin_comm_destroy(g_comm);
  free(hbuf);
  return bad_total || as ? 1 : 0;
}
