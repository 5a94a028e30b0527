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

/* ---- reduce, 16-byte vector path --------------------------------------------------------------
 * The scalar loops above issue one narrow load per element and source, with the op switch inside
 * (AllReduce measured ~2 GB/s on an H200). Here each thread owns whole 16-byte vectors: it loads
 * one uint4 per source (the next source's loads issued before the current one is accumulated,
 * several vectors at once, so many loads are in flight), and does per lane exactly what PL_DR_*_
 * do per element: one accumulator fed srcs[0], srcs[1], ... through pl_opf/pl_opd/pl_opi/pl_opu,
 * the AVG division, and the conversions (dtype.h's, or branch-free ones with the same bits). Same
 * bits as pl_reduce_elems. dtype and op are template constants, so the inner loop has no switch.
 * The helpers are __host__ __device__ so that a host test can run them. */
#define PL_RV static __host__ __device__ __forceinline__

/* Unrolled on the device (the lanes then live in registers); host compilers lack the pragma. */
#ifdef __CUDA_ARCH__
#define PL_RV_UNROLL_ _Pragma("unroll")
#else
#define PL_RV_UNROLL_
#endif
/* Bits per element (every dtype's lanes divide a 32-bit word, or are two words). */
#define PL_RV_EB_(dt)                                                                              \
  ((dt) == PURLIN_F64 || (dt) == PURLIN_I64 || (dt) == PURLIN_U64                      ? 64        \
   : (dt) == PURLIN_F32 || (dt) == PURLIN_I32 || (dt) == PURLIN_U32                    ? 32        \
   : (dt) == PURLIN_F16 || (dt) == PURLIN_BF16                                         ? 16        \
                                                                                       : 8)
/* Vectors per thread per pass: at most 32 registers of accumulators (more would spill under
 * __launch_bounds__(512, 1)), at most 4. */
#define PL_RV_ACCW_(eb, accbytes) (32 * 4 / ((128 / (eb)) * (accbytes)))
#define PL_RV_U_(eb, accbytes) (PL_RV_ACCW_(eb, accbytes) > 4 ? 4 : PL_RV_ACCW_(eb, accbytes))

PL_RV uint64_t pl_rv_mask(int eb) { return eb == 64 ? ~0ull : (1ull << eb) - 1; }
/* Lane j of a vector held as 4 words (little-endian, as memory). */
PL_RV uint64_t pl_rv_lane(const uint32_t *w, int eb, int j) {
  if (eb == 64) return (uint64_t)w[2 * j] | (uint64_t)w[2 * j + 1] << 32;
  int per = 32 / eb;
  return (uint64_t)(w[j / per] >> (eb * (j % per))) & pl_rv_mask(eb);
}
PL_RV void pl_rv_set_lane(uint32_t *w, int eb, int j, uint64_t c) {
  if (eb == 64) {
    w[2 * j] = (uint32_t)c;
    w[2 * j + 1] = (uint32_t)(c >> 32);
    return;
  }
  int per = 32 / eb;
  w[j / per] |= (uint32_t)c << (eb * (j % per));
}
/* One element at index i of p, as its code (head and tail). */
PL_RV uint64_t pl_rv_ld1(const void *p, int eb, uint64_t i) {
  switch (eb) {
  case 8: return ((const uint8_t *)p)[i];
  case 16: return ((const uint16_t *)p)[i];
  case 32: return ((const uint32_t *)p)[i];
  default: return ((const uint64_t *)p)[i];
  }
}
PL_RV void pl_rv_st1(void *p, int eb, uint64_t i, uint64_t c) {
  switch (eb) {
  case 8: ((uint8_t *)p)[i] = (uint8_t)c; break;
  case 16: ((uint16_t *)p)[i] = (uint16_t)c; break;
  case 32: ((uint32_t *)p)[i] = (uint32_t)c; break;
  default: ((uint64_t *)p)[i] = c; break;
  }
}
PL_RV double pl_rv_u2d(uint64_t u) {
  union { double d; uint64_t u; } c;
  c.u = u;
  return c.d;
}
PL_RV uint64_t pl_rv_d2u(double d) {
  union { double d; uint64_t u; } c;
  c.d = d;
  return c.u;
}
/* dtype.h's f16/fp8 conversions without branches: dtype.h's pl_small_to_f32/pl_f32_to_small
 * branch per element (subnormals, NaN, overflow), which costs more than the memory traffic here.
 * Same bits for every input (a host test compares all 2^16 / 2^8 codes and all 2^32 floats).
 * In: a normal code is the f32 bits minus the bias difference; a subnormal m * 2^(1-bias-mbits)
 * is (1 + m/2^mbits) * 2^(1-bias) - 2^(1-bias), exact; NaN gives dtype.h's canonical NaN,
 * signed. */
PL_RV float pl_rv_small_to_f32(uint32_t code, int ebits, int mbits, int bias, int has_inf,
                               uint32_t nan_code) {
  uint32_t sign = (code >> (ebits + mbits) & 1u) << 31, mag = code & ((1u << (ebits + mbits)) - 1u);
  uint32_t emax = (1u << ebits) - 1u, nrm = (mag << (23 - mbits)) + ((uint32_t)(127 - bias) << 23);
  uint32_t one = (uint32_t)(127 + 1 - bias) << 23; /* 2^(1-bias), the smallest normal */
  uint32_t sub = pl_f2u(pl_u2f((mag << (23 - mbits)) + one) - pl_u2f(one));
  uint32_t r = mag >> mbits ? nrm : sub;
  if (has_inf && mag >> mbits == emax) r = mag & ((1u << mbits) - 1u) ? 0x7fc00000u : 0x7f800000u;
  if (!has_inf && mag == nan_code) r = 0x7fc00000u;
  return pl_u2f(sign | r);
}
/* Out: a normal result rounds to nearest even by adding half an ulp less one plus the kept lsb; a
 * subnormal one by adding C, whose ulp is the target's subnormal step (f32 addition rounds to
 * nearest even), then subtracting C's bits; then overflow and NaN codes as dtype.h. */
PL_RV uint32_t pl_rv_f32_to_small(float x, int ebits, int mbits, int bias, uint32_t max_code,
                                  uint32_t nan_code, uint32_t ovf_code) {
  uint32_t u = pl_f2u(x), sign = (u >> 31) << (ebits + mbits);
  int sh = 23 - mbits;
  u &= 0x7fffffffu;
  uint32_t minnorm = (uint32_t)(127 + 1 - bias) << 23;
  uint32_t c = (uint32_t)(127 + 24 - bias - mbits) << 23;
  uint32_t half = (1u << (sh - 1)) - 1u + ((u >> sh) & 1u);
  uint32_t rn = (u - ((uint32_t)(127 - bias) << 23) + half) >> sh;
  uint32_t rs = pl_f2u(pl_u2f(u) + pl_u2f(c)) - c;
  uint32_t r = u < minnorm ? rs : rn;
  if (r > max_code) r = ovf_code;
  if (u > 0x7f800000u) r = nan_code;
  return sign | r;
}
PL_RV float pl_rv_f16_in(uint32_t c) { return pl_rv_small_to_f32(c, 5, 10, 15, 1, 0); }
PL_RV uint32_t pl_rv_f16_out(float x) {
  return pl_rv_f32_to_small(x, 5, 10, 15, 0x7bffu, 0x7e00u, 0x7c00u);
}
PL_RV float pl_rv_e4m3_in(uint32_t c) { return pl_rv_small_to_f32(c, 4, 3, 7, 0, 0x7fu); }
PL_RV uint32_t pl_rv_e4m3_out(float x) {
  return pl_rv_f32_to_small(x, 4, 3, 7, 0x7eu, 0x7fu, 0x7eu);
}
PL_RV float pl_rv_e5m2_in(uint32_t c) { return pl_rv_small_to_f32(c, 5, 2, 15, 1, 0); }
PL_RV uint32_t pl_rv_e5m2_out(float x) {
  return pl_rv_f32_to_small(x, 5, 2, 15, 0x7bu, 0x7eu, 0x7bu);
}

/* Code -> accumulator and accumulator -> code (after the AVG division), per family. */
PL_RV float pl_rv_in_f(int dt, uint64_t c) {
  switch (dt) {
  case PURLIN_F16: return pl_rv_f16_in((uint32_t)c);
  case PURLIN_BF16: return pl_bf16_to_f32((uint16_t)c);
  case PURLIN_FP8_E4M3: return pl_rv_e4m3_in((uint32_t)c);
  case PURLIN_FP8_E5M2: return pl_rv_e5m2_in((uint32_t)c);
  default: return pl_u2f((uint32_t)c);
  }
}
PL_RV uint64_t pl_rv_out_f(int dt, int op, float acc, int divisor) {
  if (op == PURLIN_AVG) acc = acc / (float)divisor;
  switch (dt) {
  case PURLIN_F16: return pl_rv_f16_out(acc);
  case PURLIN_BF16: return pl_f32_to_bf16(acc);
  case PURLIN_FP8_E4M3: return pl_rv_e4m3_out(acc);
  case PURLIN_FP8_E5M2: return pl_rv_e5m2_out(acc);
  default: return pl_f2u(acc);
  }
}
PL_RV double pl_rv_in_d(int dt, uint64_t c) { return pl_rv_u2d(c); }
PL_RV uint64_t pl_rv_out_d(int dt, int op, double acc, int divisor) {
  if (op == PURLIN_AVG) acc = acc / (double)divisor;
  return pl_rv_d2u(acc);
}
/* Signed: the element sign-extended, as PL_DR_SINT_'s int64_t acc = (T)x; (T)acc is the low eb bits
 * sign-extended again. */
PL_RV int64_t pl_rv_sext(uint64_t c, int eb) {
  return eb == 8 ? (int64_t)(int8_t)c : eb == 32 ? (int64_t)(int32_t)c : (int64_t)c;
}
PL_RV int64_t pl_rv_in_i(int dt, uint64_t c) { return pl_rv_sext(c, PL_RV_EB_(dt)); }
PL_RV uint64_t pl_rv_out_i(int dt, int op, int64_t acc, int divisor) {
  int eb = PL_RV_EB_(dt);
  if (op == PURLIN_AVG) acc = pl_avg_i(pl_rv_sext((uint64_t)acc, eb), divisor);
  return (uint64_t)acc & pl_rv_mask(eb);
}
PL_RV uint64_t pl_rv_in_u(int dt, uint64_t c) { return c; }
PL_RV uint64_t pl_rv_out_u(int dt, int op, uint64_t acc, int divisor) {
  uint64_t m = pl_rv_mask(PL_RV_EB_(dt));
  if (op == PURLIN_AVG) acc = pl_avg_u(acc & m, divisor);
  return acc & m;
}

/* Loads U vectors of source p into X (4 words each); vectors past nvec load nothing. */
#define PL_RV_LOAD_(X, p)                                                                          \
  do {                                                                                             \
    const uint4 *q_ = (const uint4 *)((const char *)(p) + hb);                                     \
    PL_RV_UNROLL_ for (int u_ = 0; u_ < U; u_++) {                                                 \
      uint64_t i_ = v0 + (uint64_t)u_ * nt;                                                        \
      uint4 r_ = i_ < nvec ? q_[i_] : make_uint4(0, 0, 0, 0);                                      \
      X[u_][0] = r_.x;                                                                             \
      X[u_][1] = r_.y;                                                                             \
      X[u_][2] = r_.z;                                                                             \
      X[u_][3] = r_.w;                                                                             \
    }                                                                                              \
  } while (0)
/* Element i alone, as PL_DR_*_ do it (head and tail). */
#define PL_RV_ONE_(i, ACC, IN, OPFN, OUT)                                                          \
  do {                                                                                             \
    ACC x_ = IN(DT, pl_rv_ld1(srcs[0], EB, i));                                                    \
    for (int s_ = 1; s_ < n; s_++) x_ = OPFN(OP, x_, IN(DT, pl_rv_ld1(srcs[s_], EB, i)));          \
    pl_rv_st1(dst, EB, i, OUT(DT, OP, x_, divisor));                                               \
  } while (0)

/* One family's reduction, run by thread tid of nt: the nvec vectors from element h (16-byte
 * aligned in dst and every source), U per pass, nt apart so that a warp's loads coalesce; a holds
 * the source being accumulated, b the next one, already loading. Elements [0, h) and past the
 * vectors go one at a time. Not inlined: one copy per dtype/op, with its own register budget. */
#define PL_RV_DEFINE_(NAME, ACC, IN, OPFN, OUT)                                                    \
  template <int DT, int OP>                                                                        \
  static __host__ __device__ __noinline__ void NAME(void *dst, const void *const *srcs, int n,     \
                                                    uint64_t count, uint64_t h, uint64_t nvec,     \
                                                    int divisor, uint64_t tid, uint64_t nt) {      \
    const int EB = PL_RV_EB_(DT), L = 128 / EB, U = PL_RV_U_(EB, (int)sizeof(ACC));                \
    const uint64_t hb = h * (EB / 8), tail = h + nvec * (uint64_t)L;                               \
    for (uint64_t v0 = tid; v0 < nvec; v0 += U * nt) {                                             \
      uint32_t a[U][4], b[U][4] = {{0}};                                                           \
      ACC acc[U][L];                                                                               \
      PL_RV_LOAD_(a, srcs[0]);                                                                     \
      if (n > 1) PL_RV_LOAD_(b, srcs[1]);                                                          \
      PL_RV_UNROLL_ for (int u = 0; u < U; u++)                                                    \
        PL_RV_UNROLL_ for (int j = 0; j < L; j++) acc[u][j] = IN(DT, pl_rv_lane(a[u], EB, j));     \
      for (int s = 1; s < n; s++) {                                                                \
        PL_RV_UNROLL_ for (int u = 0; u < U; u++)                                                  \
          PL_RV_UNROLL_ for (int k = 0; k < 4; k++) a[u][k] = b[u][k];                             \
        if (s + 1 < n) PL_RV_LOAD_(b, srcs[s + 1]);                                                \
        PL_RV_UNROLL_ for (int u = 0; u < U; u++)                                                  \
          PL_RV_UNROLL_ for (int j = 0; j < L; j++)                                                \
            acc[u][j] = OPFN(OP, acc[u][j], IN(DT, pl_rv_lane(a[u], EB, j)));                      \
      }                                                                                            \
      PL_RV_UNROLL_ for (int u = 0; u < U; u++) {                                                  \
        uint64_t i = v0 + (uint64_t)u * nt;                                                        \
        if (i < nvec) {                                                                            \
          uint32_t w[4] = {0, 0, 0, 0};                                                            \
          PL_RV_UNROLL_ for (int j = 0; j < L; j++)                                                \
            pl_rv_set_lane(w, EB, j, OUT(DT, OP, acc[u][j], divisor));                             \
          ((uint4 *)((char *)dst + hb))[i] = make_uint4(w[0], w[1], w[2], w[3]);                   \
        }                                                                                          \
      }                                                                                            \
    }                                                                                              \
    for (uint64_t i = tid; i < h; i += nt) PL_RV_ONE_(i, ACC, IN, OPFN, OUT);                      \
    for (uint64_t i = tail + tid; i < count; i += nt) PL_RV_ONE_(i, ACC, IN, OPFN, OUT);           \
  }
PL_RV_DEFINE_(pl_rv_float, float, pl_rv_in_f, pl_opf, pl_rv_out_f)
PL_RV_DEFINE_(pl_rv_f64, double, pl_rv_in_d, pl_opd, pl_rv_out_d)
PL_RV_DEFINE_(pl_rv_sint, int64_t, pl_rv_in_i, pl_opi, pl_rv_out_i)
PL_RV_DEFINE_(pl_rv_uint, uint64_t, pl_rv_in_u, pl_opu, pl_rv_out_u)

/* Where the vector path applies: dst and every source at the same offset modulo 16, a multiple of
 * the element size (so the vectors start at the same element h everywhere). Every thread computes
 * the same answer. Returns h, or -1. */
PL_RV int64_t pl_rv_head(void *dst, const void *const *srcs, int n, uint64_t count, int dtype) {
  uint64_t es = pl_dtype_bytes(dtype), m = (uintptr_t)dst & 15;
  if (!es || n < 1 || m % es) return -1;
  for (int s = 0; s < n; s++)
    if (((uintptr_t)srcs[s] & 15) != m) return -1;
  uint64_t h = ((16 - m) & 15) / es;
  return (int64_t)(h < count ? h : count);
}

#define PL_RV_OPS_(NAME, DT, ...)                                                                  \
  switch (op) {                                                                                    \
  case PURLIN_SUM: NAME<DT, PURLIN_SUM>(__VA_ARGS__); return 1;                                    \
  case PURLIN_PROD: NAME<DT, PURLIN_PROD>(__VA_ARGS__); return 1;                                  \
  case PURLIN_MIN: NAME<DT, PURLIN_MIN>(__VA_ARGS__); return 1;                                    \
  case PURLIN_MAX: NAME<DT, PURLIN_MAX>(__VA_ARGS__); return 1;                                    \
  case PURLIN_AVG: NAME<DT, PURLIN_AVG>(__VA_ARGS__); return 1;                                    \
  default: return 0;                                                                               \
  }

/* The vector path for thread tid of nt: 1 when it did the whole reduction, 0 when it does not
 * apply (misaligned, unknown dtype or op: the scalar loops run instead). Not inlined: SNAC calls
 * the reduce atom from two places, and 60 inlined call sites pushed the kernel into spills. */
/* (inline: no unused-function warning in translation units that never reduce) */
static inline __host__ __device__ __noinline__ int pl_rv_reduce(void *dst, const void *const *srcs,
                                                               int n, uint64_t count, int dtype,
                                                               int op, int divisor, uint64_t tid,
                                                               uint64_t nt) {
  int64_t hs = pl_rv_head(dst, srcs, n, count, dtype);
  if (hs < 0) return 0;
  uint64_t h = (uint64_t)hs, nvec = (count - h) * pl_dtype_bytes(dtype) / 16;
#define PL_RV_ARGS_ dst, srcs, n, count, h, nvec, divisor, tid, nt
  switch (dtype) {
  case PURLIN_F32: PL_RV_OPS_(pl_rv_float, PURLIN_F32, PL_RV_ARGS_)
  case PURLIN_F16: PL_RV_OPS_(pl_rv_float, PURLIN_F16, PL_RV_ARGS_)
  case PURLIN_BF16: PL_RV_OPS_(pl_rv_float, PURLIN_BF16, PL_RV_ARGS_)
  case PURLIN_FP8_E4M3: PL_RV_OPS_(pl_rv_float, PURLIN_FP8_E4M3, PL_RV_ARGS_)
  case PURLIN_FP8_E5M2: PL_RV_OPS_(pl_rv_float, PURLIN_FP8_E5M2, PL_RV_ARGS_)
  case PURLIN_F64: PL_RV_OPS_(pl_rv_f64, PURLIN_F64, PL_RV_ARGS_)
  case PURLIN_I8: PL_RV_OPS_(pl_rv_sint, PURLIN_I8, PL_RV_ARGS_)
  case PURLIN_I32: PL_RV_OPS_(pl_rv_sint, PURLIN_I32, PL_RV_ARGS_)
  case PURLIN_I64: PL_RV_OPS_(pl_rv_sint, PURLIN_I64, PL_RV_ARGS_)
  case PURLIN_U8: PL_RV_OPS_(pl_rv_uint, PURLIN_U8, PL_RV_ARGS_)
  case PURLIN_U32: PL_RV_OPS_(pl_rv_uint, PURLIN_U32, PL_RV_ARGS_)
  case PURLIN_U64: PL_RV_OPS_(pl_rv_uint, PURLIN_U64, PL_RV_ARGS_)
  default: return 0;
  }
#undef PL_RV_ARGS_
}

PL_DEV void pl_reduce_700(void *dst, const void *const *srcs, int n, uint64_t count, int dtype,
                          int op, int divisor) {
  /* 16-byte vectors when the pointers allow (uniform: the same answer in every thread). */
  if (pl_rv_reduce(dst, srcs, n, count, dtype, op, divisor, threadIdx.x, blockDim.x)) return;
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
