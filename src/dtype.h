/* dtype.h -- element conversions and reduction operators, shared by the host atom and the GPU atoms
 * so that both datapaths give the same bits. Floating types accumulate in f32 (f64 for f64), integer
 * types exactly in 64 bits with wrap-around at the type's width. Conversions to narrower floats round
 * to nearest even; fp8 saturates to the largest finite value (as PTX cvt.rn.satfinite does). */
#ifndef PL_DTYPE_H
#define PL_DTYPE_H

#include "pl_defs.h"
#include "purlin.h"

#if defined(__CUDACC__)
#define PL_RINTF rintf
#else
#include <math.h>
#define PL_RINTF rintf
#endif

PL_HD uint32_t pl_f2u(float f) {
  union { float f; uint32_t u; } c;
  c.f = f;
  return c.u;
}
PL_HD float pl_u2f(uint32_t u) {
  union { float f; uint32_t u; } c;
  c.u = u;
  return c.f;
}

/* A small float format: mbits mantissa bits, exponent bias, largest finite code (without sign),
 * code of NaN, code of overflow (inf, or max finite when saturating). */
typedef struct {
  int mbits, bias;
  uint32_t max_code, nan_code, ovf_code;
} pl_fmt_t;

PL_HD float pl_small_to_f32(uint32_t code, int ebits, int mbits, int bias, int has_inf,
                            uint32_t nan_code) {
  uint32_t sign = code >> (ebits + mbits) & 1u;
  uint32_t mag = code & ((1u << (ebits + mbits)) - 1u);
  uint32_t e = mag >> mbits, m = mag & ((1u << mbits) - 1u);
  float v;
  if (has_inf && e == (1u << ebits) - 1u) {
    v = m ? pl_u2f(0x7fc00000u) : pl_u2f(0x7f800000u);
  } else if (!has_inf && mag == nan_code) {
    v = pl_u2f(0x7fc00000u);
  } else if (e == 0) { /* subnormal: m * 2^(1 - bias - mbits) */
    v = (float)m * pl_u2f((uint32_t)(127 + 1 - bias - mbits) << 23);
  } else {
    v = pl_u2f(((e - (uint32_t)bias + 127u) << 23) | (m << (23 - mbits)));
  }
  return sign ? -v : v;
}

PL_HD uint32_t pl_f32_to_small(float x, int ebits, int mbits, int bias, pl_fmt_t f) {
  uint32_t u = pl_f2u(x), sign = (u >> 31) << (ebits + mbits), r;
  u &= 0x7fffffffu;
  if (u > 0x7f800000u) return sign | f.nan_code;
  int e = (int)(u >> 23) - 127;
  if (u == 0x7f800000u || e > bias + 1) return sign | f.ovf_code;
  if (e + bias >= 1) {
    uint32_t mant = u & 0x7fffffu;
    int shift = 23 - mbits;
    uint32_t rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1);
    r = ((uint32_t)(e + bias) << mbits) | (mant >> shift);
    if (rem > half || (rem == half && (r & 1u))) r++;
  } else { /* subnormal in the target: scale by an exact power of two, round to nearest even */
    float scaled = pl_u2f(u) * pl_u2f((uint32_t)(127 + bias - 1 + mbits) << 23);
    r = (uint32_t)PL_RINTF(scaled);
  }
  if (r > f.max_code) r = f.ovf_code;
  return sign | r;
}

PL_HD float pl_f16_to_f32(uint16_t h) { return pl_small_to_f32(h, 5, 10, 15, 1, 0); }
PL_HD uint16_t pl_f32_to_f16(float x) {
  pl_fmt_t f = {10, 15, 0x7bffu, 0x7e00u, 0x7c00u};
  return (uint16_t)pl_f32_to_small(x, 5, 10, 15, f);
}
PL_HD float pl_bf16_to_f32(uint16_t b) { return pl_u2f((uint32_t)b << 16); }
PL_HD uint16_t pl_f32_to_bf16(float x) {
  uint32_t u = pl_f2u(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
PL_HD float pl_e4m3_to_f32(uint8_t c) { return pl_small_to_f32(c, 4, 3, 7, 0, 0x7fu); }
PL_HD uint8_t pl_f32_to_e4m3(float x) {
  pl_fmt_t f = {3, 7, 0x7eu, 0x7fu, 0x7eu};
  return (uint8_t)pl_f32_to_small(x, 4, 3, 7, f);
}
PL_HD float pl_e5m2_to_f32(uint8_t c) { return pl_small_to_f32(c, 5, 2, 15, 1, 0); }
PL_HD uint8_t pl_f32_to_e5m2(float x) {
  pl_fmt_t f = {2, 15, 0x7bu, 0x7eu, 0x7bu};
  return (uint8_t)pl_f32_to_small(x, 5, 2, 15, f);
}

/* minNum/maxNum: a NaN operand is ignored unless both are NaN. */
PL_HD float pl_minf(float a, float b) { return a != a ? b : (b != b ? a : (b < a ? b : a)); }
PL_HD float pl_maxf(float a, float b) { return a != a ? b : (b != b ? a : (b > a ? b : a)); }
PL_HD double pl_mind(double a, double b) { return a != a ? b : (b != b ? a : (b < a ? b : a)); }
PL_HD double pl_maxd(double a, double b) { return a != a ? b : (b != b ? a : (b > a ? b : a)); }

PL_HD float pl_opf(int op, float a, float b) {
  switch (op) {
  case PURLIN_PROD: return a * b;
  case PURLIN_MIN: return pl_minf(a, b);
  case PURLIN_MAX: return pl_maxf(a, b);
  default: return a + b; /* SUM, AVG */
  }
}
PL_HD double pl_opd(int op, double a, double b) {
  switch (op) {
  case PURLIN_PROD: return a * b;
  case PURLIN_MIN: return pl_mind(a, b);
  case PURLIN_MAX: return pl_maxd(a, b);
  default: return a + b;
  }
}
PL_HD int64_t pl_opi(int op, int64_t a, int64_t b) {
  switch (op) {
  case PURLIN_PROD: return (int64_t)((uint64_t)a * (uint64_t)b);
  case PURLIN_MIN: return b < a ? b : a;
  case PURLIN_MAX: return b > a ? b : a;
  default: return (int64_t)((uint64_t)a + (uint64_t)b);
  }
}
PL_HD uint64_t pl_opu(int op, uint64_t a, uint64_t b) {
  switch (op) {
  case PURLIN_PROD: return a * b;
  case PURLIN_MIN: return b < a ? b : a;
  case PURLIN_MAX: return b > a ? b : a;
  default: return a + b;
  }
}

/* Element-wise dst[i] = op over s < n of srcs[s][i] (ascending s), i < count, divided by `divisor`
 * when op is AVG. One accumulator per element: the order is the rank order whatever the caller's
 * chunking, so the bits never depend on size or regime. dst may alias srcs[s]. */
#define PL_REDUCE_FLOAT_(T, LOAD, STORE)                                                           \
  for (size_t i = 0; i < count; i++) {                                                             \
    float acc = LOAD(((const T *)srcs[0])[i]);                                                     \
    for (int s = 1; s < n; s++) acc = pl_opf(op, acc, LOAD(((const T *)srcs[s])[i]));              \
    if (op == PURLIN_AVG) acc = acc / (float)divisor;                                              \
    ((T *)dst)[i] = STORE(acc);                                                                    \
  }
#define PL_REDUCE_WIDE_(T, ACC, OPFN, DIV)                                                         \
  for (size_t i = 0; i < count; i++) {                                                             \
    ACC acc = (ACC)((const T *)srcs[0])[i];                                                        \
    for (int s = 1; s < n; s++) acc = OPFN(op, acc, (ACC)((const T *)srcs[s])[i]);                 \
    if (op == PURLIN_AVG) acc = DIV(acc, divisor);                                                 \
    ((T *)dst)[i] = (T)acc;                                                                        \
  }
#define PL_IDENT_(x) (x)
#define PL_DIVD_(a, d) ((a) / (double)(d))
/* Integer AVG: the sum wrapped to the type, then divided in the type's signedness. */
#define PL_DIVI_(T) (int64_t)(T)
PL_HD int64_t pl_avg_i(int64_t sum_wrapped, int divisor) { return sum_wrapped / divisor; }
PL_HD uint64_t pl_avg_u(uint64_t sum_wrapped, int divisor) { return sum_wrapped / (uint64_t)divisor; }

#define PL_REDUCE_SINT_(T)                                                                         \
  for (size_t i = 0; i < count; i++) {                                                             \
    int64_t acc = ((const T *)srcs[0])[i];                                                         \
    for (int s = 1; s < n; s++) acc = pl_opi(op, acc, ((const T *)srcs[s])[i]);                    \
    if (op == PURLIN_AVG) acc = pl_avg_i((int64_t)(T)acc, divisor);                                \
    ((T *)dst)[i] = (T)acc;                                                                        \
  }
#define PL_REDUCE_UINT_(T)                                                                         \
  for (size_t i = 0; i < count; i++) {                                                             \
    uint64_t acc = ((const T *)srcs[0])[i];                                                        \
    for (int s = 1; s < n; s++) acc = pl_opu(op, acc, ((const T *)srcs[s])[i]);                   \
    if (op == PURLIN_AVG) acc = pl_avg_u((uint64_t)(T)acc, divisor);                               \
    ((T *)dst)[i] = (T)acc;                                                                        \
  }

PL_HD float pl_load_f32_(float x) { return x; }
PL_HD float pl_store_f32_(float x) { return x; }

/* The reference loop used by the host atom (and by GPU code for tails). */
PL_HD void pl_reduce_elems(void *dst, const void *const *srcs, int n, size_t count, int dtype,
                           int op, int divisor) {
  switch (dtype) {
  case PURLIN_F32: PL_REDUCE_FLOAT_(float, pl_load_f32_, pl_store_f32_) break;
  case PURLIN_F16: PL_REDUCE_FLOAT_(uint16_t, pl_f16_to_f32, pl_f32_to_f16) break;
  case PURLIN_BF16: PL_REDUCE_FLOAT_(uint16_t, pl_bf16_to_f32, pl_f32_to_bf16) break;
  case PURLIN_FP8_E4M3: PL_REDUCE_FLOAT_(uint8_t, pl_e4m3_to_f32, pl_f32_to_e4m3) break;
  case PURLIN_FP8_E5M2: PL_REDUCE_FLOAT_(uint8_t, pl_e5m2_to_f32, pl_f32_to_e5m2) break;
  case PURLIN_F64: PL_REDUCE_WIDE_(double, double, pl_opd, PL_DIVD_) break;
  case PURLIN_I8: PL_REDUCE_SINT_(int8_t) break;
  case PURLIN_I32: PL_REDUCE_SINT_(int32_t) break;
  case PURLIN_I64: PL_REDUCE_SINT_(int64_t) break;
  case PURLIN_U8: PL_REDUCE_UINT_(uint8_t) break;
  case PURLIN_U32: PL_REDUCE_UINT_(uint32_t) break;
  case PURLIN_U64: PL_REDUCE_UINT_(uint64_t) break;
  default: break;
  }
}

PL_HD size_t pl_dtype_bytes(int dtype) {
  switch (dtype) {
  case PURLIN_F64: case PURLIN_I64: case PURLIN_U64: return 8;
  case PURLIN_F32: case PURLIN_I32: case PURLIN_U32: return 4;
  case PURLIN_F16: case PURLIN_BF16: return 2;
  case PURLIN_I8: case PURLIN_U8: case PURLIN_FP8_E4M3: case PURLIN_FP8_E5M2: return 1;
  default: return 0;
  }
}

#endif
