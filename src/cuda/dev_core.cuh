/* dev_core.cuh -- the bodies of purlin's device primitives, shared by the public device API
 * (include/purlin_device.cuh, what users call in their own kernels) and the library's GPU atoms
 * (atom_cuda.cuh, which call the public API): one implementation, not two. Every function here takes
 * the cooperating threads explicitly (thread tid of nt), so the public _thread, _warp and _block
 * variants and the atoms are the same code with a different split.
 *
 * Ordering follows the PTX memory model, as NCCL's and MSCCL++'s kernels do: data are plain stores;
 * a publish is one st.release.sys (cumulative over what the group wrote before its barrier); an await
 * spins with ld.relaxed.sys, then one ld.acquire.sys. Packets are one 16-byte volatile (relaxed,
 * system scope) store of {data, flag}, polled with 16-byte volatile loads (NCCL's LL protocol idea,
 * with the flag in the same 16-byte store: reference/purlin.md section 2).
 *
 * Reductions do the element math of dtype.h (pl_opf and the conversions), one accumulator per
 * element fed in rank order, so they give the host datapath's bits when built with --fmad=false.
 * CUDA C++ only; C in CUDA clothing (templates only to instantiate dtype/op). */
#ifndef PL_DEV_CORE_CUH
#define PL_DEV_CORE_CUH

#include <stdint.h>

#include "dtype.h"

#define PL_DC static __device__ __forceinline__

/* ---- PTX helpers (generic addresses) ----------------------------------------------------------- */

PL_DC uint64_t pl_ld_relaxed_sys(const uint64_t *p) {
  uint64_t v;
  asm volatile("ld.relaxed.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
PL_DC uint64_t pl_ld_acquire_sys(const uint64_t *p) {
  uint64_t v;
  asm volatile("ld.acquire.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
PL_DC void pl_st_release_sys(uint64_t *p, uint64_t v) {
  asm volatile("st.release.sys.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
PL_DC void pl_st_relaxed_sys(uint64_t *p, uint64_t v) {
  asm volatile("st.relaxed.sys.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
/* Packets order themselves (the flag travels in the data's store), so their asm has no memory
 * clobber: the compiler may issue the next source load before this store, instead of paying one
 * load latency per packet store (docs/tuning.md, finding 8). Flags keep their clobbers. */
PL_DC void pl_st_pkt(void *p, uint64_t data, uint64_t flag) {
  asm volatile("st.volatile.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(data), "l"(flag));
}
PL_DC void pl_ld_pkt(const void *p, uint64_t *data, uint64_t *flag) {
  uint64_t d, f;
  asm volatile("ld.volatile.v2.u64 {%0, %1}, [%2];" : "=l"(d), "=l"(f) : "l"(p));
  *data = d;
  *flag = f;
}
/* Programmatic dependent launch (sm_90+; nothing on older GPUs, where kernels never overlap):
 * wait until the stream's previous kernel has completed and its memory is visible (at once when
 * this kernel was not launched early), and let the stream's next kernel start early. The idea is
 * NVIDIA's (CUDA programming guide, "Programmatic Dependent Launch"); TensorRT-LLM's all-reduce
 * kernels use it the same way. */
PL_DC void pl_grid_dep_wait(void) {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
PL_DC void pl_grid_dep_launch(void) {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
PL_DC uint64_t pl_globaltimer(void) {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/* ---- copy -------------------------------------------------------------------------------------- */

/* Elements of T from s to d, split among the CTA's threads, unrolled by 4 for loads in flight. */
#define PL_COPY_LOOP_(T, d, s, n, tid, nt)                                                         \
  do {                                                                                             \
    const T *s_ = (const T *)(s);                                                                  \
    T *d_ = (T *)(d);                                                                              \
    uint64_t n_ = (n), nt_ = (nt), i_ = (tid);                                                     \
    for (; i_ + 3 * nt_ < n_; i_ += 4 * nt_) {                                                     \
      T v0 = s_[i_], v1 = s_[i_ + nt_], v2 = s_[i_ + 2 * nt_], v3 = s_[i_ + 3 * nt_];              \
      d_[i_] = v0;                                                                                 \
      d_[i_ + nt_] = v1;                                                                           \
      d_[i_ + 2 * nt_] = v2;                                                                       \
      d_[i_ + 3 * nt_] = v3;                                                                       \
    }                                                                                              \
    for (; i_ < n_; i_ += nt_) d_[i_] = s_[i_];                                                    \
  } while (0)

/* bytes from src to dst, split among nt threads (this is thread tid): 16-byte vectors when dst and
 * src agree modulo 16, else 4-byte words, else bytes. */
PL_DC void pl_copy_vec(char *dst, const char *src, uint64_t bytes, uint64_t tid, uint64_t nt) {
  uintptr_t rel = (uintptr_t)dst ^ (uintptr_t)src;
  uint64_t w = (rel & 15) == 0 ? 16 : (rel & 3) == 0 ? 4 : 1;
  uint64_t head = (w - ((uintptr_t)dst & (w - 1))) & (w - 1);
  if (head > bytes) head = bytes;
  uint64_t body = (bytes - head) / w * w;
  for (uint64_t i = tid; i < head; i += nt) dst[i] = src[i];
  if (w == 16) PL_COPY_LOOP_(uint4, dst + head, src + head, body / 16, tid, nt);
  else if (w == 4) PL_COPY_LOOP_(uint32_t, dst + head, src + head, body / 4, tid, nt);
  else PL_COPY_LOOP_(unsigned char, dst + head, src + head, body, tid, nt);
  for (uint64_t i = head + body + tid; i < bytes; i += nt) dst[i] = src[i];
}

/* ---- reduce: scalar loops ---------------------------------------------------------------------- */

/* dtype.h's PL_REDUCE_*_ loops with the elements split among the threads: per element the same
 * operations in the same order, so the same bits as pl_reduce_elems on the host. */
#define PL_DR_FLOAT_(T, LOAD, STORE)                                                               \
  for (uint64_t i = tid; i < count; i += nt) {                                                     \
    float acc = LOAD(((const T *)srcs[0])[i]);                                                     \
    for (int s = 1; s < n; s++) acc = pl_opf(op, acc, LOAD(((const T *)srcs[s])[i]));              \
    if (op == PURLIN_AVG) acc = acc / (float)divisor;                                              \
    ((T *)dst)[i] = STORE(acc);                                                                    \
  }
#define PL_DR_F64_()                                                                               \
  for (uint64_t i = tid; i < count; i += nt) {                                                     \
    double acc = ((const double *)srcs[0])[i];                                                     \
    for (int s = 1; s < n; s++) acc = pl_opd(op, acc, ((const double *)srcs[s])[i]);               \
    if (op == PURLIN_AVG) acc = acc / (double)divisor;                                             \
    ((double *)dst)[i] = acc;                                                                      \
  }
#define PL_DR_SINT_(T)                                                                             \
  for (uint64_t i = tid; i < count; i += nt) {                                                     \
    int64_t acc = ((const T *)srcs[0])[i];                                                         \
    for (int s = 1; s < n; s++) acc = pl_opi(op, acc, ((const T *)srcs[s])[i]);                    \
    if (op == PURLIN_AVG) acc = pl_avg_i((int64_t)(T)acc, divisor);                                \
    ((T *)dst)[i] = (T)acc;                                                                        \
  }
#define PL_DR_UINT_(T)                                                                             \
  for (uint64_t i = tid; i < count; i += nt) {                                                     \
    uint64_t acc = ((const T *)srcs[0])[i];                                                        \
    for (int s = 1; s < n; s++) acc = pl_opu(op, acc, ((const T *)srcs[s])[i]);                    \
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

/* dst[i] = op over s < n of srcs[s][i] (ascending s), i < count, split among nt threads (this is
 * thread tid); AVG divides by divisor. The 16-byte vector path when the pointers allow. */
PL_DC void pl_reduce_vec(void *dst, const void *const *srcs, int n, uint64_t count, int dtype,
                         int op, int divisor, uint64_t tid, uint64_t nt) {
  /* 16-byte vectors when the pointers allow (uniform: the same answer in every thread). */
  if (pl_rv_reduce(dst, srcs, n, count, dtype, op, divisor, tid, nt)) return;
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

/* ---- waits -------------------------------------------------------------------------------------
 * One spin loop for every wait of the library and of the public API. A wait polls with relaxed
 * loads and, every PL_SPIN_CHECK + 1 polls, checks its stop conditions; once the value is there it
 * acquires it with one ld.acquire.sys. */
#define PL_SPIN_CHECK 255u /* polls between two checks of abort, sibling and clock */

/* Readiness of a flag holding f for a wait on v. */
#define PL_READY_GE 0    /* f >= v, wrap-aware: monotonic counters (public flags) */
#define PL_READY_EQ 1    /* f == v (public packets, as NCCL's LL) */
#define PL_READY_EPOCH 2 /* pl_flag_ready (SNAC's epoch-windowed flags) */
PL_DC int pl_ready(uint64_t f, uint64_t v, int mode) {
  return mode == PL_READY_EPOCH ? pl_flag_ready(f, v) : mode == PL_READY_EQ ? f == v
                                                                          : (int64_t)(f - v) >= 0;
}

/* Stop conditions of a wait; NULL pointers are not checked. */
typedef struct {
  const uint64_t *abort;     /* non-zero: stop with PURLIN_ERR_REMOTE */
  const uint64_t *sibling;   /* == sibling_val: stop with PL_WAIT_SIBLING */
  uint64_t sibling_val;
  const volatile int *group; /* non-zero: another thread of the group failed: PL_WAIT_GROUP */
  uint64_t timeout;          /* ns, counted from the first check, when deadline is 0 */
  uint64_t deadline;         /* %globaltimer ns; 0: first check + timeout */
  uint32_t backoff;          /* packet waits: ns of __nanosleep between polls after the first
                                few (0: spin); thousands of spinning threads slow the writers */
} pl_wait_t;
#define PL_WAIT_SIBLING 1 /* positive: not an error of this wait's own */
#define PL_WAIT_GROUP 2

PL_DC int pl_wait_check(const pl_wait_t *w, uint64_t *deadline) {
  if (w->abort && pl_ld_relaxed_sys(w->abort)) return PURLIN_ERR_REMOTE;
  if (w->sibling && pl_ld_relaxed_sys(w->sibling) == w->sibling_val) return PL_WAIT_SIBLING;
  uint64_t now = pl_globaltimer();
  if (!*deadline) *deadline = now + w->timeout;
  else if (now >= *deadline) return PURLIN_ERR_TIMEOUT;
  if (w->group && *w->group) return PL_WAIT_GROUP;
  return 0;
}

/* One thread: wait until *flag is ready for value, then acquire it. 0, or why it stopped. */
PL_DC int pl_wait_flag(const uint64_t *flag, uint64_t value, int mode, const pl_wait_t *w) {
  uint32_t n = 0;
  uint64_t deadline = w->deadline;
  int st;
  while (!pl_ready(pl_ld_relaxed_sys(flag), value, mode))
    if ((++n & PL_SPIN_CHECK) == 0 && (st = pl_wait_check(w, &deadline)) != 0) return st;
  (void)pl_ld_acquire_sys(flag);
  return 0;
}

/* One thread: wait until the packet at p carries flag `value`; its data into *data. The data come
 * from the same 16-byte load as the flag, so no acquire is needed. */
PL_DC int pl_wait_pkt(const void *p, uint64_t value, int mode, const pl_wait_t *w,
                      uint64_t *data) {
  uint32_t n = 0;
  uint64_t deadline = w->deadline, d, f;
  int st;
  for (;;) {
    pl_ld_pkt(p, &d, &f);
    if (pl_ready(f, value, mode)) break;
    if ((++n & PL_SPIN_CHECK) == 0 && (st = pl_wait_check(w, &deadline)) != 0) return st;
#if __CUDA_ARCH__ >= 700
    if (w->backoff && n > 2) __nanosleep(w->backoff);
#endif
  }
  *data = d;
  return 0;
}

/* ---- packets ----------------------------------------------------------------------------------- */

/* Bytes [8i, 8i + 8) of src (fewer at the end, zero-padded) as one word. */
PL_DC uint64_t pl_pkt_pack(const void *src, uint64_t bytes, uint64_t i) {
  const unsigned char *p = (const unsigned char *)src + 8 * i;
  uint64_t n = bytes - 8 * i < 8 ? bytes - 8 * i : 8, d = 0;
  if (n == 8 && ((uintptr_t)p & 7) == 0) return *(const uint64_t *)p;
  for (uint64_t j = 0; j < n; j++) d |= (uint64_t)p[j] << (8 * j);
  return d;
}
PL_DC void pl_pkt_unpack(void *dst, uint64_t bytes, uint64_t i, uint64_t d) {
  unsigned char *q = (unsigned char *)dst + 8 * i;
  uint64_t n = bytes - 8 * i < 8 ? bytes - 8 * i : 8;
  if (n == 8 && ((uintptr_t)q & 7) == 0) *(uint64_t *)q = d;
  else
    for (uint64_t j = 0; j < n; j++) q[j] = (unsigned char)(d >> (8 * j));
}
/* Packet i (16 bytes at dst + 16i) carries bytes [8i, 8i + 8) of src and the flag, one store each;
 * split among nt threads. */
PL_DC void pl_pkt_put(void *dst, const void *src, uint64_t bytes, uint64_t flag, uint64_t tid,
                      uint64_t nt) {
  uint64_t np = (bytes + 7) / 8, i = tid;
  char *q = (char *)dst;
  /* four words loaded before four stores: the stores are volatile asm, which no load may cross,
   * so one word at a time would pay a full load latency per packet */
  for (; i + 3 * nt < np; i += 4 * nt) {
    uint64_t d0 = pl_pkt_pack(src, bytes, i), d1 = pl_pkt_pack(src, bytes, i + nt);
    uint64_t d2 = pl_pkt_pack(src, bytes, i + 2 * nt), d3 = pl_pkt_pack(src, bytes, i + 3 * nt);
    pl_st_pkt(q + 16 * i, d0, flag);
    pl_st_pkt(q + 16 * (i + nt), d1, flag);
    pl_st_pkt(q + 16 * (i + 2 * nt), d2, flag);
    pl_st_pkt(q + 16 * (i + 3 * nt), d3, flag);
  }
  for (; i < np; i += nt) pl_st_pkt(q + 16 * i, pl_pkt_pack(src, bytes, i), flag);
}

/* Packets i, i + nt, i + 2 nt, ... (i = first) of src, waited for (flag, mode) and unpacked into
 * dst (bytes in all). Four polls in flight per thread: a packet that is already there costs no
 * round trip of its own. 0, or why a wait stopped. */
PL_DC int pl_pkt_get_part(void *dst, const void *src, uint64_t bytes, uint64_t flag, int mode,
                          const pl_wait_t *w, uint64_t first, uint64_t nt) {
  uint64_t np = (bytes + 7) / 8;
  const char *p = (const char *)src;
  for (uint64_t i = first; i < np; i += 4 * nt) {
    uint64_t d[4], f[4];
#pragma unroll
    for (int k = 0; k < 4; k++)
      if (i + k * nt < np) pl_ld_pkt(p + 16 * (i + k * nt), &d[k], &f[k]);
#pragma unroll
    for (int k = 0; k < 4; k++) {
      if (i + k * nt >= np) break;
      if (!pl_ready(f[k], flag, mode)) {
        int st = pl_wait_pkt(p + 16 * (i + k * nt), flag, mode, w, &d[k]);
        if (st) return st;
      }
      pl_pkt_unpack(dst, bytes, i + k * nt, d[k]);
    }
  }
  return 0;
}

#endif
