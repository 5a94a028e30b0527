/* atom_async.cuh -- atoms 800, 900 and 1000: the data movement of atom 700 (atom_cuda.cuh) through
 * shared memory with the asynchronous copy units. Only the movement changes: waits, publishes,
 * packets and the element math of reductions are atom 700's, so reductions give the host
 * datapath's bits (one accumulator per element fed in rank order, built with --fmad=false).
 *
 * Atom 800 (sm_80+, reference/purlin.md section 3; the multistage cp.async main loop of CUTLASS's
 * sm80 GEMMs): a ring of S stages of one 16-byte vector per thread in shared memory, filled with
 * cp.async.cg.shared.global (L2 only, 16 bytes), one commit group per stage, S-1 stages in flight.
 * Copies go global -> shared -> global; reductions take their loads from the same ring, global
 * stage g being source g % n of tile g / n, so every source of every tile streams through it.
 * Each thread only reads back the slots it filled itself, so the ring needs no barrier: the
 * thread's own cp.async.wait_group makes its copies visible to it.
 *
 * Atom 900 (sm_90): copies of at least PL_TMA_MIN_BYTES with 16-byte-aligned ends use the bulk
 * copy engine (TMA, CUTLASS's SM90_BULK_COPY_G2S/S2G): one thread streams chunks with
 * cp.async.bulk global -> shared (completion on an mbarrier, expect_tx), then cp.async.bulk
 * shared -> global (bulk_group, commit/wait_group), S chunks in flight; the other threads are
 * free. Reductions and smaller copies take atom 800's path. The reference measured cp.async 10-12%
 * faster than TMA at 256 KiB - 1 MiB, so where TMA wins here is for the H200 runs to say.
 *
 * Atom 1000 (sm_100): atom 900's code compiled for sm_100 (it cannot run on this project's
 * machines, so it adds nothing the compiler alone could check).
 *
 * Misaligned or small pieces (below PL_ASYNC_MIN_BYTES) fall back to atom 700's loops. Code for an
 * architecture that lacks an instruction (sm_75 in the fatbinary) compiles to atom 700's, and the
 * host never selects an atom the device cannot run (pl_pick_atom, cuda_dp.cu).
 *
 * Use: define PL_CUDA_COPY / PL_CUDA_REDUCE to pl_copy_800 / pl_copy_900 and pl_reduce_800, then
 * include this header (before atom_cuda.cuh: the atom wrappers there call the macros). */
#ifndef PL_ATOM_ASYNC_CUH
#define PL_ATOM_ASYNC_CUH

#ifdef PL_ATOM_CUDA_CUH
#error "include cuda/atom_async.cuh before cuda/atom_cuda.cuh"
#endif

#include <stdint.h>

/* Declared here, defined below: atom_cuda.cuh's pl_dev_copy / pl_dev_reduce call them. */
static __device__ __noinline__ void pl_copy_800(char *dst, const char *src, uint64_t bytes);
static __device__ __noinline__ void pl_copy_900(char *dst, const char *src, uint64_t bytes);
static __device__ __noinline__ void pl_reduce_800(void *dst, const void *const *srcs, int n,
                                                  uint64_t count, int dtype, int op, int divisor);

#include "cuda/atom_cuda.cuh"

/* Stages of the ring: S x 512 threads x 16 bytes = 32 KiB of static shared memory (with the
 * CTA's pl_cuda_sh_t, below the 48 KiB of static shared memory every architecture allows). */
#define PL_ASYNC_STAGES 4
#define PL_ASYNC_SLOT PL_CUDA_THREADS /* vectors per stage */
/* Below this, atom 700's loops: priming the ring costs more than it saves. */
#define PL_ASYNC_MIN_BYTES 4096u
/* Atom 900: bulk copies from this size; chunks of one stage's bytes (8 KiB). */
#define PL_TMA_MIN_BYTES (64u << 10)
#define PL_TMA_CHUNK (PL_ASYNC_SLOT * 16u)

/* ---- cp.async (sm_80+) ------------------------------------------------------------------------- */

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define PL_HAVE_CP_ASYNC 1
static __shared__ __align__(128) uint4 pl_async_ring[PL_ASYNC_STAGES * PL_ASYNC_SLOT];
PL_DEV void pl_cp_async16(uint4 *smem, const uint4 *gmem) {
  uint32_t s = (uint32_t)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
}
PL_DEV void pl_cp_async_commit(void) { asm volatile("cp.async.commit_group;" ::: "memory"); }
/* Until at most n of this thread's newest groups are pending (n: a constant). */
#define PL_CP_ASYNC_WAIT(n) asm volatile("cp.async.wait_group %0;" ::"n"(n) : "memory")
#endif

/* ---- copy (atom 800) --------------------------------------------------------------------------- */

static __device__ __noinline__ void pl_copy_800(char *dst, const char *src, uint64_t bytes) {
#ifdef PL_HAVE_CP_ASYNC
  if ((((uintptr_t)dst ^ (uintptr_t)src) & 15) || bytes < PL_ASYNC_MIN_BYTES) {
    pl_copy_700(dst, src, bytes);
    return;
  }
  const int S = PL_ASYNC_STAGES;
  const uint64_t nt = blockDim.x, tid = threadIdx.x;
  uint64_t head = (16 - ((uintptr_t)dst & 15)) & 15, nvec = (bytes - head) / 16;
  const uint4 *s = (const uint4 *)(src + head);
  uint4 *d = (uint4 *)(dst + head), *ring = pl_async_ring + tid;
  uint64_t ntile = (nvec + nt - 1) / nt;
  /* tile t: vector t * nt + tid of this thread, in slot t % S */
  for (int t = 0; t < S - 1; t++) {
    uint64_t i = (uint64_t)t * nt + tid;
    if (i < nvec) pl_cp_async16(ring + t * PL_ASYNC_SLOT, s + i);
    pl_cp_async_commit();
  }
  int slot = 0;
  for (uint64_t t = 0; t < ntile; t++) {
    PL_CP_ASYNC_WAIT(PL_ASYNC_STAGES - 2); /* tile t has landed */
    uint64_t i = t * nt + tid, p = i + (uint64_t)(S - 1) * nt;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (i < nvec) v = ring[slot * PL_ASYNC_SLOT];
    /* tile t + S - 1 into the slot tile t - 1 left (read back in the previous iteration) */
    int pslot = slot == 0 ? S - 1 : slot - 1;
    if (p < nvec) pl_cp_async16(ring + pslot * PL_ASYNC_SLOT, s + p);
    pl_cp_async_commit();
    if (i < nvec) d[i] = v;
    slot = slot == S - 1 ? 0 : slot + 1;
  }
  PL_CP_ASYNC_WAIT(0);
  for (uint64_t i = tid; i < head; i += nt) dst[i] = src[i];
  for (uint64_t i = head + nvec * 16 + tid; i < bytes; i += nt) dst[i] = src[i];
#else
  pl_copy_700(dst, src, bytes);
#endif
}

/* ---- reduce (atoms 800, 900, 1000) -------------------------------------------------------------
 * The element math of PL_RV_DEFINE_ (atom_cuda.cuh) per 16-byte vector, with the vectors of every
 * source arriving through the ring: per element one accumulator, IN(srcs[0]) then OPFN with
 * IN(srcs[1]), IN(srcs[2]), ..., OUT (with the AVG division): the same bits as pl_reduce_elems.
 * dst and every source 16-byte aligned; vectors [0, nvec) here, the elements after them one at a
 * time (PL_RV_ONE_). */
#ifdef PL_HAVE_CP_ASYNC
#define PL_RA_DEFINE_(NAME, ACC, IN, OPFN, OUT)                                                    \
  template <int DT, int OP>                                                                        \
  static __device__ __noinline__ void NAME(void *dst, const void *const *srcs, int n,              \
                                           uint64_t count, uint64_t nvec, int divisor) {           \
    const int EB = PL_RV_EB_(DT), L = 128 / EB, S = PL_ASYNC_STAGES;                               \
    const uint64_t nt = blockDim.x, tid = threadIdx.x, ntile = (nvec + nt - 1) / nt;               \
    uint4 *ring = pl_async_ring + tid;                                                             \
    uint64_t it = 0; /* issue side: tile it, source is, into slot islot */                         \
    int is = 0, islot = 0, slot = 0;                                                               \
    for (int k = 0; k < S - 1; k++) {                                                              \
      uint64_t i = it * nt + tid;                                                                  \
      if (it < ntile && i < nvec)                                                                  \
        pl_cp_async16(ring + islot * PL_ASYNC_SLOT, (const uint4 *)srcs[is] + i);                  \
      pl_cp_async_commit();                                                                        \
      if (++is == n) is = 0, it++;                                                                 \
      islot = islot == S - 1 ? 0 : islot + 1;                                                      \
    }                                                                                              \
    for (uint64_t t = 0; t < ntile; t++) {                                                         \
      uint64_t i = t * nt + tid;                                                                   \
      ACC acc[L];                                                                                  \
      for (int s = 0; s < n; s++) {                                                                \
        PL_CP_ASYNC_WAIT(PL_ASYNC_STAGES - 2); /* stage (t, s) has landed */                       \
        uint4 r = make_uint4(0, 0, 0, 0);                                                          \
        if (i < nvec) r = ring[slot * PL_ASYNC_SLOT];                                              \
        uint64_t ii = it * nt + tid; /* the next stage into the slot freed last time */            \
        if (it < ntile && ii < nvec)                                                               \
          pl_cp_async16(ring + islot * PL_ASYNC_SLOT, (const uint4 *)srcs[is] + ii);               \
        pl_cp_async_commit();                                                                      \
        if (++is == n) is = 0, it++;                                                               \
        islot = islot == S - 1 ? 0 : islot + 1;                                                    \
        slot = slot == S - 1 ? 0 : slot + 1;                                                       \
        uint32_t w[4] = {r.x, r.y, r.z, r.w};                                                      \
        if (s == 0) {                                                                              \
          PL_RV_UNROLL_ for (int j = 0; j < L; j++) acc[j] = IN(DT, pl_rv_lane(w, EB, j));         \
        } else {                                                                                   \
          PL_RV_UNROLL_ for (int j = 0; j < L; j++)                                                \
            acc[j] = OPFN(OP, acc[j], IN(DT, pl_rv_lane(w, EB, j)));                               \
        }                                                                                          \
      }                                                                                            \
      if (i < nvec) {                                                                              \
        uint32_t w[4] = {0, 0, 0, 0};                                                              \
        PL_RV_UNROLL_ for (int j = 0; j < L; j++)                                                  \
          pl_rv_set_lane(w, EB, j, OUT(DT, OP, acc[j], divisor));                                  \
        ((uint4 *)dst)[i] = make_uint4(w[0], w[1], w[2], w[3]);                                    \
      }                                                                                            \
    }                                                                                              \
    PL_CP_ASYNC_WAIT(0);                                                                           \
    for (uint64_t i = nvec * (uint64_t)L + tid; i < count; i += nt)                                \
      PL_RV_ONE_(i, ACC, IN, OPFN, OUT);                                                           \
  }
PL_RA_DEFINE_(pl_ra_float, float, pl_rv_in_f, pl_opf, pl_rv_out_f)
PL_RA_DEFINE_(pl_ra_f64, double, pl_rv_in_d, pl_opd, pl_rv_out_d)
PL_RA_DEFINE_(pl_ra_sint, int64_t, pl_rv_in_i, pl_opi, pl_rv_out_i)
PL_RA_DEFINE_(pl_ra_uint, uint64_t, pl_rv_in_u, pl_opu, pl_rv_out_u)

#define PL_RA_OPS_(NAME, DT)                                                                       \
  switch (op) {                                                                                    \
  case PURLIN_SUM: NAME<DT, PURLIN_SUM>(dst, srcs, n, count, nvec, divisor); return 1;             \
  case PURLIN_PROD: NAME<DT, PURLIN_PROD>(dst, srcs, n, count, nvec, divisor); return 1;           \
  case PURLIN_MIN: NAME<DT, PURLIN_MIN>(dst, srcs, n, count, nvec, divisor); return 1;             \
  case PURLIN_MAX: NAME<DT, PURLIN_MAX>(dst, srcs, n, count, nvec, divisor); return 1;             \
  case PURLIN_AVG: NAME<DT, PURLIN_AVG>(dst, srcs, n, count, nvec, divisor); return 1;             \
  default: return 0;                                                                               \
  }

/* 1 when the ring did the whole reduction; 0 when it does not apply (a pointer not 16-byte
 * aligned, a small piece, an unknown dtype or op). The same answer in every thread. */
PL_DEV int pl_ra_reduce(void *dst, const void *const *srcs, int n, uint64_t count, int dtype,
                        int op, int divisor) {
  uint64_t es = pl_dtype_bytes(dtype);
  if (!es || n < 1 || count * es < PL_ASYNC_MIN_BYTES || ((uintptr_t)dst & 15)) return 0;
  for (int s = 0; s < n; s++)
    if ((uintptr_t)srcs[s] & 15) return 0;
  uint64_t nvec = count * es / 16;
  switch (dtype) {
  case PURLIN_F32: PL_RA_OPS_(pl_ra_float, PURLIN_F32)
  case PURLIN_F16: PL_RA_OPS_(pl_ra_float, PURLIN_F16)
  case PURLIN_BF16: PL_RA_OPS_(pl_ra_float, PURLIN_BF16)
  case PURLIN_FP8_E4M3: PL_RA_OPS_(pl_ra_float, PURLIN_FP8_E4M3)
  case PURLIN_FP8_E5M2: PL_RA_OPS_(pl_ra_float, PURLIN_FP8_E5M2)
  case PURLIN_F64: PL_RA_OPS_(pl_ra_f64, PURLIN_F64)
  case PURLIN_I8: PL_RA_OPS_(pl_ra_sint, PURLIN_I8)
  case PURLIN_I32: PL_RA_OPS_(pl_ra_sint, PURLIN_I32)
  case PURLIN_I64: PL_RA_OPS_(pl_ra_sint, PURLIN_I64)
  case PURLIN_U8: PL_RA_OPS_(pl_ra_uint, PURLIN_U8)
  case PURLIN_U32: PL_RA_OPS_(pl_ra_uint, PURLIN_U32)
  case PURLIN_U64: PL_RA_OPS_(pl_ra_uint, PURLIN_U64)
  default: return 0;
  }
}
#endif

static __device__ __noinline__ void pl_reduce_800(void *dst, const void *const *srcs, int n,
                                                  uint64_t count, int dtype, int op, int divisor) {
#ifdef PL_HAVE_CP_ASYNC
  if (pl_ra_reduce(dst, srcs, n, count, dtype, op, divisor)) return;
#endif
  pl_reduce_700(dst, srcs, n, count, dtype, op, divisor);
}

/* ---- copy (atoms 900, 1000): the bulk copy engine ------------------------------------------------ */

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
static __shared__ __align__(8) uint64_t pl_tma_bar[PL_ASYNC_STAGES];

PL_DEV uint32_t pl_smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

/* Chunk k of [0, bytes) (bytes a multiple of 16): load it into slot k % S, with its bytes as
 * the mbarrier's expected transaction count. */
PL_DEV void pl_tma_load(char *ring, const char *src, uint64_t bytes, uint64_t k) {
  int b = (int)(k % PL_ASYNC_STAGES);
  uint64_t off = k * PL_TMA_CHUNK;
  uint32_t n = (uint32_t)(bytes - off < PL_TMA_CHUNK ? bytes - off : PL_TMA_CHUNK);
  uint32_t bar = pl_smem_u32(&pl_tma_bar[b]);
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(n)
               : "memory");
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(pl_smem_u32(ring + (uint64_t)b * PL_TMA_CHUNK)),
      "l"(src + off), "r"(n), "r"(bar)
      : "memory");
}

/* One thread: [0, bytes) of src to dst through S chunk slots of shared memory. Both ends and
 * bytes 16-byte aligned. */
PL_DEV void pl_tma_copy_thread(char *dst, const char *src, uint64_t bytes) {
  const int S = PL_ASYNC_STAGES;
  char *ring = (char *)pl_async_ring;
  uint64_t nchunk = (bytes + PL_TMA_CHUNK - 1) / PL_TMA_CHUNK;
  for (int b = 0; b < S; b++)
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(pl_smem_u32(&pl_tma_bar[b]))
                 : "memory");
  /* the mbarriers' initialisation, the ring's last generic-proxy use (atom 800's path) and the
   * sources written with generic stores (ours, or a peer's acquired by the await before) must be
   * visible to the async proxy */
  asm volatile("fence.proxy.async;" ::: "memory");
  for (uint64_t k = 0; k < nchunk && k < (uint64_t)S; k++) pl_tma_load(ring, src, bytes, k);
  for (uint64_t k = 0; k < nchunk; k++) {
    int b = (int)(k % S);
    uint32_t bar = pl_smem_u32(&pl_tma_bar[b]), parity = (uint32_t)(k / S) & 1u, done = 0;
    while (!done)
      asm volatile("{\n\t.reg .pred p;\n\t"
                   "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                   "selp.u32 %0, 1, 0, p;\n\t}"
                   : "=r"(done)
                   : "r"(bar), "r"(parity)
                   : "memory");
    uint64_t off = k * PL_TMA_CHUNK;
    uint32_t n = (uint32_t)(bytes - off < PL_TMA_CHUNK ? bytes - off : PL_TMA_CHUNK);
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst + off),
                 "r"(pl_smem_u32(ring + (uint64_t)b * PL_TMA_CHUNK)), "r"(n)
                 : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    if (k + S < nchunk) {
      /* slot b is free once the store just issued has read it */
      asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
      pl_tma_load(ring, src, bytes, k + S);
    }
  }
  /* the stores complete, and visible to the generic proxy: the publish that follows the copy
   * (bar.sync, then this thread's st.release.sys) covers them */
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  asm volatile("fence.proxy.async;" ::: "memory");
  for (int b = 0; b < S; b++)
    asm volatile("mbarrier.inval.shared::cta.b64 [%0];" ::"r"(pl_smem_u32(&pl_tma_bar[b]))
                 : "memory");
}
#endif

static __device__ __noinline__ void pl_copy_900(char *dst, const char *src, uint64_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (((uintptr_t)dst & 15) || ((uintptr_t)src & 15) || bytes < PL_TMA_MIN_BYTES) {
    pl_copy_800(dst, src, bytes);
    return;
  }
  uint64_t body = bytes & ~(uint64_t)15;
  /* Thread 0 drives the engine (it also publishes after the copy's barrier); the others copy
   * the last < 16 bytes. */
  if (threadIdx.x == 0) pl_tma_copy_thread(dst, src, body);
  for (uint64_t i = body + threadIdx.x; i < bytes; i += blockDim.x) dst[i] = src[i];
#else
  pl_copy_800(dst, src, bytes);
#endif
}

#endif
