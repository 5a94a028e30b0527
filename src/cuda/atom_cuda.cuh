/* atom_cuda.cuh -- the GPU atoms: SNAC's datapath on a CTA (see the atom interface at the top of
 * snac/snac.h). A worker group is one CTA; every thread runs SNAC's control flow (the same values
 * everywhere), and the atoms split the data work among the threads.
 *
 * Ordering follows the PTX memory model, as NCCL's and MSCCL++'s proxies-free kernels do: data are
 * plain stores; publish = bar.sync, then one st.release.sys (cumulative over what the CTA wrote
 * before the barrier); await = one thread spins with ld.relaxed.sys, then ld.acquire.sys, then
 * bar.sync (the barrier carries the acquire to the whole CTA). Packets are one 16-byte volatile
 * (relaxed, system scope) store of {data, flag}, polled with 16-byte volatile loads, as in
 * reference/purlin.md section 2 (NCCL's LL protocol splits its flags per 8 bytes instead).
 *
 * Atom 700 (vector ld/st, every architecture): 16-byte loads and stores when source and
 * destination have the same alignment modulo 16, unrolled by 4; otherwise 4-byte or byte loops.
 * Reductions do the element math of dtype.h (pl_opf and the conversions), one accumulator per
 * element fed in rank order, so they give the host datapath's bits (built with --fmad=false). */
#ifndef PL_ATOM_CUDA_CUH
#define PL_ATOM_CUDA_CUH

#include <stdint.h>

#include "cuda/cuda_int.h"
#include "dtype.h"

/* Shared memory of a CTA: the call, my header, and the CTA's sticky error (once set, the CTA
 * returns from SNAC, so it is never reset within a call). */
typedef struct {
  pl_snac_t x;
  uint64_t v[4][PL_MAX_WORLD];
  uint64_t myhdr[PL_HDR_FIXED + 3 * PL_MAX_WORLD];
  int err, err_peer;
  const char *err_what;
} pl_cuda_sh_t;

typedef struct {
  pl_ctrl_t *me;      /* this rank's control block */
  uint64_t epoch;
  uint64_t timeout;   /* ns, from the start of each wait (PURLIN_TIMEOUT_MS) */
  char *scratch;
  const uint64_t *symtab;
  int world;
  pl_cuda_sh_t *sh;
} pl_atom_t;

#define PL_DEV static __device__ __forceinline__

/* ---- PTX helpers (generic addresses) ----------------------------------------------------------- */

PL_DEV uint64_t pl_ld_relaxed_sys(const uint64_t *p) {
  uint64_t v;
  asm volatile("ld.relaxed.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
PL_DEV uint64_t pl_ld_acquire_sys(const uint64_t *p) {
  uint64_t v;
  asm volatile("ld.acquire.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
PL_DEV void pl_st_release_sys(uint64_t *p, uint64_t v) {
  asm volatile("st.release.sys.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
PL_DEV void pl_st_relaxed_sys(uint64_t *p, uint64_t v) {
  asm volatile("st.relaxed.sys.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
PL_DEV void pl_st_pkt(void *p, uint64_t data, uint64_t flag) {
  asm volatile("st.volatile.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(data), "l"(flag) : "memory");
}
PL_DEV void pl_ld_pkt(const void *p, uint64_t *data, uint64_t *flag) {
  uint64_t d, f;
  asm volatile("ld.volatile.v2.u64 {%0, %1}, [%2];" : "=l"(d), "=l"(f) : "l"(p) : "memory");
  *data = d;
  *flag = f;
}
PL_DEV uint64_t pl_globaltimer(void) {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/* ---- waits ------------------------------------------------------------------------------------- */

/* Why a spinning thread must stop, or 0: an abort from anywhere (REMOTE), the other CTA of this
 * call failed (PL_CUDA_STOP_SIBLING), or the wait's deadline passed (TIMEOUT). *deadline is 0
 * until the first check, which sets it: deadlines count from the start of each wait, as on the
 * host datapath. */
PL_DEV int pl_dev_stop(const pl_atom_t *a, uint64_t *deadline) {
  if (pl_ld_relaxed_sys(&a->me->abort)) return PURLIN_ERR_REMOTE;
  if (pl_ld_relaxed_sys(&a->me->err_epoch) == a->epoch + 1) return PL_CUDA_STOP_SIBLING;
  uint64_t now = pl_globaltimer();
  if (!*deadline) *deadline = now + a->timeout;
  else if (now >= *deadline) return PURLIN_ERR_TIMEOUT;
  return 0;
}
/* Record the CTA's error (first one wins) with the peer and the wait it concerns. */
PL_DEV void pl_dev_fail(pl_atom_t *a, int st, int peer, const char *what) {
  if (atomicCAS(&a->sh->err, 0, st) == 0) {
    a->sh->err_peer = st == PURLIN_ERR_TIMEOUT ? peer : -1;
    a->sh->err_what = what;
  }
}
#define PL_SPIN_CHECK 255u /* polls between two checks of abort, sibling and clock */

PL_DEV int pl_dev_await(pl_atom_t *a, const uint64_t *flag, uint64_t value, int peer,
                         const char *what) {
  if (threadIdx.x == 0) {
    uint32_t n = 0;
    uint64_t deadline = 0;
    int st = 0;
    while (!pl_flag_ready(pl_ld_relaxed_sys(flag), value)) {
      if ((++n & PL_SPIN_CHECK) == 0 && (st = pl_dev_stop(a, &deadline)) != 0) break;
    }
    if (st) pl_dev_fail(a, st, peer, what);
    else (void)pl_ld_acquire_sys(flag);
  }
  __syncthreads();
  return a->sh->err;
}

PL_DEV void pl_dev_publish(pl_atom_t *a, uint64_t *flag, uint64_t value, int peer) {
  __syncthreads();
  if (threadIdx.x == 0) pl_st_release_sys(flag, value);
}
PL_DEV int pl_dev_is_leader(pl_atom_t *a) { return threadIdx.x == 0; }

PL_DEV void *pl_dev_sym(pl_atom_t *a, int peer, uint64_t id, uint64_t off, uint64_t bytes) {
  if (id < 1 || id > PL_CUDA_MAX_SYMS) return NULL;
  const uint64_t *e = a->symtab + (id - 1) * (uint64_t)(1 + a->world);
  uint64_t size = e[0];
  if (!size || off > size || bytes > size - off) return NULL;
  return (char *)e[1 + peer] + off;
}

/* ---- copy (atom 700) --------------------------------------------------------------------------- */

/* Elements of T from s to d, split among the CTA's threads, unrolled by 4 for loads in flight. */
#define PL_COPY_LOOP_(T, d, s, n)                                                                  \
  do {                                                                                             \
    const T *s_ = (const T *)(s);                                                                  \
    T *d_ = (T *)(d);                                                                              \
    uint64_t n_ = (n), nt_ = blockDim.x, i_ = threadIdx.x;                                         \
    for (; i_ + 3 * nt_ < n_; i_ += 4 * nt_) {                                                     \
      T v0 = s_[i_], v1 = s_[i_ + nt_], v2 = s_[i_ + 2 * nt_], v3 = s_[i_ + 3 * nt_];              \
      d_[i_] = v0;                                                                                 \
      d_[i_ + nt_] = v1;                                                                           \
      d_[i_ + 2 * nt_] = v2;                                                                       \
      d_[i_ + 3 * nt_] = v3;                                                                       \
    }                                                                                              \
    for (; i_ < n_; i_ += nt_) d_[i_] = s_[i_];                                                    \
  } while (0)

PL_DEV void pl_copy_700(char *dst, const char *src, uint64_t bytes) {
  uintptr_t rel = (uintptr_t)dst ^ (uintptr_t)src;
  uint64_t w = (rel & 15) == 0 ? 16 : (rel & 3) == 0 ? 4 : 1;
  uint64_t head = (w - ((uintptr_t)dst & (w - 1))) & (w - 1);
  if (head > bytes) head = bytes;
  uint64_t body = (bytes - head) / w * w;
  for (uint64_t i = threadIdx.x; i < head; i += blockDim.x) dst[i] = src[i];
  if (w == 16) PL_COPY_LOOP_(uint4, dst + head, src + head, body / 16);
  else if (w == 4) PL_COPY_LOOP_(uint32_t, dst + head, src + head, body / 4);
  else PL_COPY_LOOP_(unsigned char, dst + head, src + head, body);
  for (uint64_t i = head + body + threadIdx.x; i < bytes; i += blockDim.x) dst[i] = src[i];
}

#ifndef PL_CUDA_COPY
#define PL_CUDA_COPY pl_copy_700
#endif

/* The group's copy; ends with a barrier, since SNAC may read what another thread wrote. dst and
 * src do not overlap unless equal (SNAC never copies between overlapping distinct ranges). */
PL_DEV void pl_dev_copy(pl_atom_t *a, void *dst, const void *src, uint64_t bytes) {
  if (bytes && dst != src) PL_CUDA_COPY((char *)dst, (const char *)src, bytes);
  __syncthreads();
}

/* ---- reduce (atom 700) ------------------------------------------------------------------------- */

/* dtype.h's PL_REDUCE_*_ loops with the elements split among the threads: per element the same
 * operations in the same order, so the same bits as pl_reduce_elems on the host. */
#define PL_DR_FLOAT_(T, LOAD, STORE)                                                               \
  for (uint64_t i = threadIdx.x; i < count; i += blockDim.x) {                                     \
    float acc = LOAD(((const T *)srcs[0])[i]);                                                     \
    for (int s = 1; s < n; s++) acc = pl_opf(op, acc, LOAD(((const T *)srcs[s])[i]));              \
    if (op == PURLIN_AVG) acc = acc / (float)divisor;                                              \
    ((T *)dst)[i] = STORE(acc);                                                                    \
  }
#define PL_DR_F64_()                                                                               \
  for (uint64_t i = threadIdx.x; i < count; i += blockDim.x) {                                     \
    double acc = ((const double *)srcs[0])[i];                                                     \
    for (int s = 1; s < n; s++) acc = pl_opd(op, acc, ((const double *)srcs[s])[i]);               \
    if (op == PURLIN_AVG) acc = acc / (double)divisor;                                             \
    ((double *)dst)[i] = acc;                                                                      \
  }
#define PL_DR_SINT_(T)                                                                             \
  for (uint64_t i = threadIdx.x; i < count; i += blockDim.x) {                                     \
    int64_t acc = ((const T *)srcs[0])[i];                                                         \
    for (int s = 1; s < n; s++) acc = pl_opi(op, acc, ((const T *)srcs[s])[i]);                    \
    if (op == PURLIN_AVG) acc = pl_avg_i((int64_t)(T)acc, divisor);                                \
    ((T *)dst)[i] = (T)acc;                                                                        \
  }
#define PL_DR_UINT_(T)                                                                             \
  for (uint64_t i = threadIdx.x; i < count; i += blockDim.x) {                                     \
    uint64_t acc = ((const T *)srcs[0])[i];                                                        \
    for (int s = 1; s < n; s++) acc = pl_opu(op, acc, ((const T *)srcs[s])[i]);                   \
    if (op == PURLIN_AVG) acc = pl_avg_u((uint64_t)(T)acc, divisor);                               \
    ((T *)dst)[i] = (T)acc;                                                                        \
  }

PL_DEV void pl_reduce_700(void *dst, const void *const *srcs, int n, uint64_t count, int dtype,
                          int op, int divisor) {
  switch (dtype) {
  case PURLIN_F32: PL_DR_FLOAT_(float, pl_load_f32_, pl_store_f32_) break;
  case PURLIN_F16: PL_DR_FLOAT_(uint16_t, pl_f16_to_f32, pl_f32_to_f16) break;
  case PURLIN_BF16: PL_DR_FLOAT_(uint16_t, pl_bf16_to_f32, pl_f32_to_bf16) break;
  case PURLIN_FP8_E4M3: PL_DR_FLOAT_(uint8_t, pl_e4m3_to_f32, pl_f32_to_e4m3) break;
  case PURLIN_FP8_E5M2: PL_DR_FLOAT_(uint8_t, pl_e5m2_to_f32, pl_f32_to_e5m2) break;
  case PURLIN_F64: PL_DR_F64_() break;
  case PURLIN_I8: PL_DR_SINT_(int8_t) break;
  case PURLIN_I32: PL_DR_SINT_(int32_t) break;
  case PURLIN_I64: PL_DR_SINT_(int64_t) break;
  case PURLIN_U8: PL_DR_UINT_(uint8_t) break;
  case PURLIN_U32: PL_DR_UINT_(uint32_t) break;
  case PURLIN_U64: PL_DR_UINT_(uint64_t) break;
  default: break;
  }
}

#ifndef PL_CUDA_REDUCE
#define PL_CUDA_REDUCE pl_reduce_700
#endif

/* Ends with a barrier: SNAC copies the result (the seam) or reuses the scratch next. */
PL_DEV void pl_dev_reduce(pl_atom_t *a, void *dst, const void *const *srcs, int n,
                           uint64_t count, int dtype, int op, int divisor) {
  PL_CUDA_REDUCE(dst, srcs, n, count, dtype, op, divisor);
  __syncthreads();
}

/* ---- packets ----------------------------------------------------------------------------------- */

/* Packet i carries bytes [8i, 8i+8) of src (zero-padded at the end) and the flag, in one store. */
PL_DEV void pl_dev_pkt_put(pl_atom_t *a, void *dst, const void *src, uint64_t bytes,
                            uint64_t flag) {
  uint64_t np = (bytes + 7) / 8;
  for (uint64_t i = threadIdx.x; i < np; i += blockDim.x) {
    const unsigned char *p = (const unsigned char *)src + 8 * i;
    uint64_t n = bytes - 8 * i < 8 ? bytes - 8 * i : 8, d = 0;
    if (n == 8 && ((uintptr_t)p & 7) == 0) d = *(const uint64_t *)p;
    else
      for (uint64_t j = 0; j < n; j++) d |= (uint64_t)p[j] << (8 * j);
    pl_st_pkt((char *)dst + 16 * i, d, flag);
  }
}

/* Every thread waits for its own packets; ends with a barrier (the data are read by others). */
PL_DEV int pl_dev_pkt_get(pl_atom_t *a, void *dst, const void *src, uint64_t bytes,
                           uint64_t flag, int peer, const char *what) {
  uint64_t np = (bytes + 7) / 8;
  for (uint64_t i = threadIdx.x; i < np; i += blockDim.x) {
    uint64_t d, f, deadline = 0;
    uint32_t spins = 0;
    int st = 0;
    for (;;) {
      pl_ld_pkt((const char *)src + 16 * i, &d, &f);
      if (pl_flag_ready(f, flag)) break;
      if ((++spins & PL_SPIN_CHECK) == 0 && ((st = pl_dev_stop(a, &deadline)) != 0 || a->sh->err))
        break;
    }
    if (st) pl_dev_fail(a, st, peer, what);
    if (st || a->sh->err) break;
    unsigned char *q = (unsigned char *)dst + 8 * i;
    uint64_t n = bytes - 8 * i < 8 ? bytes - 8 * i : 8;
    if (n == 8 && ((uintptr_t)q & 7) == 0) *(uint64_t *)q = d;
    else
      for (uint64_t j = 0; j < n; j++) q[j] = (unsigned char)(d >> (8 * j));
  }
  __syncthreads();
  return a->sh->err;
}

/* ---- the atom interface of snac.h ------------------------------------------------------------
 * SNAC's functions are __host__ __device__ (one header for both datapaths); these wrappers give
 * them something to call in the host pass of nvcc, where they are never run. */
#ifdef __CUDA_ARCH__
#define PL_ATOM_CALL(dev_call, host_value) return dev_call
#else
#define PL_ATOM_CALL(dev_call, host_value) return host_value
#endif
#define PL_ATOM static __host__ __device__ __forceinline__

PL_ATOM int pl_atom_await(pl_atom_t *a, const uint64_t *flag, uint64_t value, int peer,
                          const char *what) {
  PL_ATOM_CALL(pl_dev_await(a, flag, value, peer, what), PURLIN_ERR_INTERNAL);
}
PL_ATOM void pl_atom_publish(pl_atom_t *a, uint64_t *flag, uint64_t value, int peer) {
  PL_ATOM_CALL(pl_dev_publish(a, flag, value, peer), (void)0);
}
PL_ATOM void pl_atom_ring(pl_atom_t *a, int peer) {}
PL_ATOM int pl_atom_is_leader(pl_atom_t *a) { PL_ATOM_CALL(pl_dev_is_leader(a), 1); }
PL_ATOM char *pl_atom_scratch(pl_atom_t *a, int i) { return a->scratch + (size_t)i * PL_SNAC_SEG; }
PL_ATOM void *pl_atom_sym(pl_atom_t *a, int peer, uint64_t id, uint64_t off, uint64_t bytes) {
  PL_ATOM_CALL(pl_dev_sym(a, peer, id, off, bytes), NULL);
}
PL_ATOM void pl_atom_copy(pl_atom_t *a, void *dst, const void *src, uint64_t bytes) {
  PL_ATOM_CALL(pl_dev_copy(a, dst, src, bytes), (void)0);
}
PL_ATOM void pl_atom_reduce(pl_atom_t *a, void *dst, const void *const *srcs, int n,
                            uint64_t count, int dtype, int op, int divisor) {
  PL_ATOM_CALL(pl_dev_reduce(a, dst, srcs, n, count, dtype, op, divisor), (void)0);
}
PL_ATOM void pl_atom_pkt_put(pl_atom_t *a, void *dst, const void *src, uint64_t bytes,
                             uint64_t flag) {
  PL_ATOM_CALL(pl_dev_pkt_put(a, dst, src, bytes, flag), (void)0);
}
PL_ATOM int pl_atom_pkt_get(pl_atom_t *a, void *dst, const void *src, uint64_t bytes,
                            uint64_t flag, int peer, const char *what) {
  PL_ATOM_CALL(pl_dev_pkt_get(a, dst, src, bytes, flag, peer, what), PURLIN_ERR_INTERNAL);
}

#endif
