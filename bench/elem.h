/* elem.h -- the bench's element math, written once for the host (C11) and the GPU (CUDA C): the
 * input generator and the check of one output element. colls.c (the host generator and the host
 * emulation of the device check) and check.cu (the device generator and the device check) both
 * compile it, so the GPU regenerates exactly the host's inputs.
 *
 * Bit-identical on both sides by construction: the generator is integer arithmetic (a counter-based
 * hash of (seed, rank, size, buffer, index)) followed by one integer-to-float conversion (round to
 * nearest even on both) and a multiplication by a power of two (exact), so no a*b+c exists that a
 * compiler could contract into an FMA; the reduction is dtype.h's element math (pl_opf, the
 * conversions), the same as pl_reduce_elems, one accumulator per element in rank order; check.cu is
 * compiled with --fmad=false so that the tolerance arithmetic rounds like the host's too. */
#ifndef BENCH_ELEM_H
#define BENCH_ELEM_H

#include <math.h>

#include "dtype.h"

#define BENCH_MAX_WORLD PL_MAX_WORLD

/* ---- the generator --------------------------------------------------------------------------- */
PL_HD uint64_t bench_mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* The key of one input array: (seed, rank, size in bytes, buffer index). */
PL_HD uint64_t bench_gen_key(uint64_t seed, int rank, size_t bytes, int buf) {
  uint64_t k = bench_mix64(seed);
  k = bench_mix64(k ^ (uint64_t)(rank + 1) * 0xd6e8feb86659fd93ull);
  k = bench_mix64(k ^ (uint64_t)bytes);
  return bench_mix64(k ^ (uint64_t)(buf + 1) * 0xa0761d6478bd642full);
}

PL_HD uint64_t bench_f64_bits(double d) {
  union {
    double d;
    uint64_t u;
  } c;
  c.d = d;
  return c.u;
}
PL_HD double bench_bits_f64(uint64_t u) {
  union {
    double d;
    uint64_t u;
  } c;
  c.u = u;
  return c.d;
}

/* Element idx of the array with this key, as the bits of the stored type (low bytes). Random,
 * never zero, finite; floats have a magnitude in [0.25, 2) and a random sign, so no op overflows.
 * The magnitude (2^24 + 7m) / 2^26 (m < 2^24; f64: (2^53 + 7m) / 2^55, m < 2^53) is one rounding
 * of an integer below 2^27 (2^56), the same on every compiler and device. */
PL_HD uint64_t bench_gen_bits(uint64_t key, size_t idx, int dtype) {
  uint64_t h = bench_mix64(key + (uint64_t)idx * 0x9e3779b97f4a7c15ull);
  uint64_t bits = h ? h : 1;
  if (dtype == PURLIN_F64) {
    double d = (double)((1ull << 53) + 7ull * (h >> 11)) * 0x1p-55;
    return bench_f64_bits((h & 1) ? -d : d);
  }
  float f = (float)(uint32_t)(16777216u + 7u * (uint32_t)(h >> 40)) * 0x1p-26f;
  if (h & 1)
    f = -f;
  switch (dtype) {
  case PURLIN_F32:
    return pl_f2u(f);
  case PURLIN_F16:
    return pl_f32_to_f16(f);
  case PURLIN_BF16:
    return pl_f32_to_bf16(f);
  case PURLIN_FP8_E4M3:
    return pl_f32_to_e4m3(f);
  case PURLIN_FP8_E5M2:
    return pl_f32_to_e5m2(f);
  case PURLIN_I8:
  case PURLIN_U8:
    return (uint8_t)((bits >> 8) | 1);
  case PURLIN_I32:
  case PURLIN_U32:
    return (uint32_t)((bits >> 16) | 1);
  default:
    return bits | 1; /* i64, u64 */
  }
}

/* ---- loads and stores of one element as bits ------------------------------------------------- */
PL_HD uint64_t bench_load_bits(const void *p, size_t esize, size_t i) {
  switch (esize) {
  case 1:
    return ((const uint8_t *)p)[i];
  case 2:
    return ((const uint16_t *)p)[i];
  case 4:
    return ((const uint32_t *)p)[i];
  default:
    return ((const uint64_t *)p)[i];
  }
}
PL_HD void bench_store_bits(void *p, size_t esize, size_t i, uint64_t v) {
  switch (esize) {
  case 1:
    ((uint8_t *)p)[i] = (uint8_t)v;
    break;
  case 2:
    ((uint16_t *)p)[i] = (uint16_t)v;
    break;
  case 4:
    ((uint32_t *)p)[i] = (uint32_t)v;
    break;
  default:
    ((uint64_t *)p)[i] = v;
    break;
  }
}

PL_HD int bench_is_float(int dtype) {
  return dtype == PURLIN_F32 || dtype == PURLIN_F64 || dtype == PURLIN_F16 ||
         dtype == PURLIN_BF16 || dtype == PURLIN_FP8_E4M3 || dtype == PURLIN_FP8_E5M2;
}

/* A float type's stored bits as f32 (f64 as double); 0 for integers. */
PL_HD float bench_bits_f32(uint64_t b, int dtype) {
  switch (dtype) {
  case PURLIN_F32:
    return pl_u2f((uint32_t)b);
  case PURLIN_F16:
    return pl_f16_to_f32((uint16_t)b);
  case PURLIN_BF16:
    return pl_bf16_to_f32((uint16_t)b);
  case PURLIN_FP8_E4M3:
    return pl_e4m3_to_f32((uint8_t)b);
  case PURLIN_FP8_E5M2:
    return pl_e5m2_to_f32((uint8_t)b);
  default:
    return 0.0f;
  }
}
PL_HD double bench_bits_double(uint64_t b, int dtype) {
  return dtype == PURLIN_F64 ? bench_bits_f64(b) : (double)bench_bits_f32(b, dtype);
}
PL_HD uint64_t bench_f32_bits(float f, int dtype) {
  switch (dtype) {
  case PURLIN_F32:
    return pl_f2u(f);
  case PURLIN_F16:
    return pl_f32_to_f16(f);
  case PURLIN_BF16:
    return pl_f32_to_bf16(f);
  case PURLIN_FP8_E4M3:
    return pl_f32_to_e4m3(f);
  default:
    return pl_f32_to_e5m2(f);
  }
}
/* Sign-extend (or not) an integer type's bits to 64. */
PL_HD int64_t bench_bits_sint(uint64_t b, int dtype) {
  switch (dtype) {
  case PURLIN_I8:
    return (int8_t)(uint8_t)b;
  case PURLIN_I32:
    return (int32_t)(uint32_t)b;
  default:
    return (int64_t)b;
  }
}

/* ---- the check of one element ---------------------------------------------------------------- */
/* What the check of one output needs besides the geometry: the key of buffer 0 of every rank. */
typedef struct bench_elem_ctx {
  uint64_t key[BENCH_MAX_WORLD];
  int n, dtype, op;
  int tolerant; /* nondet float SUM/AVG/PROD: within the accumulation-order tolerance */
} bench_elem_ctx_t;

/* The reduction over all ranks of input element idx, as pl_reduce_elems computes it (one
 * accumulator fed in rank order: f32 for floats, f64 for f64, 64-bit integers with wrap-around,
 * AVG divided by n), as the stored type's bits; *asum = sum over ranks of |input| (floats). */
PL_HD uint64_t bench_reduce_bits(const bench_elem_ctx_t *c, size_t idx, double *asum) {
  int n = c->n, dt = c->dtype, op = c->op;
  double a = 0;
  uint64_t b0 = bench_gen_bits(c->key[0], idx, dt);
  if (dt == PURLIN_F64) {
    double acc = bench_bits_f64(b0);
    a = fabs(acc);
    for (int r = 1; r < n; r++) {
      double x = bench_bits_f64(bench_gen_bits(c->key[r], idx, dt));
      a += fabs(x);
      acc = pl_opd(op, acc, x);
    }
    if (op == PURLIN_AVG)
      acc = acc / (double)n;
    *asum = a;
    return bench_f64_bits(acc);
  }
  if (bench_is_float(dt)) {
    float acc = bench_bits_f32(b0, dt);
    a = fabs((double)acc);
    for (int r = 1; r < n; r++) {
      float x = bench_bits_f32(bench_gen_bits(c->key[r], idx, dt), dt);
      a += fabs((double)x);
      acc = pl_opf(op, acc, x);
    }
    if (op == PURLIN_AVG)
      acc = acc / (float)n;
    *asum = a;
    return bench_f32_bits(acc, dt);
  }
  *asum = 0;
  if (dt == PURLIN_I8 || dt == PURLIN_I32 || dt == PURLIN_I64) {
    int64_t acc = bench_bits_sint(b0, dt);
    for (int r = 1; r < n; r++)
      acc = pl_opi(op, acc, bench_bits_sint(bench_gen_bits(c->key[r], idx, dt), dt));
    if (op == PURLIN_AVG) /* the sum wrapped to the type, divided in the type's signedness */
      acc = pl_avg_i(bench_bits_sint((uint64_t)acc, dt), n);
    return (uint64_t)acc;
  }
  uint64_t mask = dt == PURLIN_U8 ? 0xffull : dt == PURLIN_U32 ? 0xffffffffull : ~0ull;
  uint64_t acc = b0;
  for (int r = 1; r < n; r++)
    acc = pl_opu(op, acc, bench_gen_bits(c->key[r], idx, dt));
  if (op == PURLIN_AVG)
    acc = pl_avg_u(acc & mask, n);
  return acc;
}

/* unit roundoff of the stored type */
PL_HD double bench_eps_out(int dtype) {
  switch (dtype) {
  case PURLIN_F64:
    return 0x1p-53;
  case PURLIN_F32:
    return 0x1p-24;
  case PURLIN_F16:
    return 0x1p-11;
  case PURLIN_BF16:
    return 0x1p-8;
  case PURLIN_FP8_E4M3:
    return 0x1p-4;
  default:
    return 0x1p-3; /* e5m2 */
  }
}

/* Is `got` wrong, against `exp` (both the stored type's bits)? Bitwise, unless tolerant: then
 * |got - ref| <= n eps_acc A + 2 eps_out (|ref| + n eps_acc A), A = asum (AVG: / n; PROD: |ref|)
 * (bench/README.md, "Checking"). NaN (the poison) is never within a tolerance. */
PL_HD int bench_elem_wrong(const bench_elem_ctx_t *c, uint64_t got, uint64_t exp, size_t esize,
                           int tolerant, double asum) {
  uint64_t mask = esize >= 8 ? ~0ull : (1ull << (8 * esize)) - 1;
  if (((got ^ exp) & mask) == 0)
    return 0;
  if (!tolerant)
    return 1;
  int n = c->n, dt = c->dtype;
  double eacc = dt == PURLIN_F64 ? 0x1p-53 : 0x1p-24, eout = bench_eps_out(dt);
  double ref = bench_bits_double(exp, dt), v = bench_bits_double(got, dt);
  double a = c->op == PURLIN_PROD ? fabs(ref) : asum;
  if (c->op == PURLIN_AVG)
    a /= n;
  double tacc = n * eacc * a, tol = tacc + 2 * eout * (fabs(ref) + tacc);
  return !(fabs(v - ref) <= tol);
}

/* The check of element i of one segment of the output (bench_seg_t: src >= 0 copies that rank's
 * input element in + i; src < 0 reduces all ranks' element in + i): 1 if got is wrong. */
PL_HD int bench_seg_elem_wrong(const bench_elem_ctx_t *c, int src, size_t in_idx, uint64_t got,
                               size_t esize) {
  double asum = 0;
  if (src >= 0)
    return bench_elem_wrong(c, got, bench_gen_bits(c->key[src], in_idx, c->dtype), esize, 0, 0);
  uint64_t exp = bench_reduce_bits(c, in_idx, &asum);
  return bench_elem_wrong(c, got, exp, esize, c->tolerant, asum);
}

#endif
