/* ref.h -- the independent reference of the host end-to-end tests.
 *
 * Nothing here uses the library's conversion or reduction code: narrow floats are decoded with
 * ldexp() from their fields and encoded by a nearest-value search over the sorted table of their
 * finite values (ties to the even code), so a bug in the library's bit tricks cannot hide behind
 * the same bug here. Inputs are a pure function of (key, rank, element index): every rank computes
 * every other rank's input, and so the expected output, without communication. */
#ifndef PURLIN_TEST_REF_H
#define PURLIN_TEST_REF_H

#include <stddef.h>
#include <stdint.h>

/* The test's own numbering follows the public header's enums (checked in ref.c). */
enum {
  REF_F32,
  REF_F16,
  REF_BF16,
  REF_F64,
  REF_I8,
  REF_U8,
  REF_I32,
  REF_U32,
  REF_I64,
  REF_U64,
  REF_E4M3,
  REF_E5M2,
  REF_DTYPE_COUNT
};
enum { REF_SUM, REF_PROD, REF_MIN, REF_MAX, REF_AVG, REF_OP_COUNT };

size_t ref_dtype_size(int dtype);
const char *ref_dtype_name(int dtype);
const char *ref_op_name(int op);
int ref_dtype_from_name(const char *s); /* -1 if unknown */
int ref_op_from_name(const char *s);
int ref_is_float(int dtype); /* f16 bf16 f32 f64 fp8 */

/* Narrow floats (f16 bf16 e4m3 e5m2): decode a code to its exact value; encode an f32 with
 * round-to-nearest-even (f16/bf16: overflow to inf; fp8: saturate to the largest finite value,
 * inf too; NaN to NaN). */
double ref_narrow_decode(int dtype, uint32_t code);
uint32_t ref_narrow_encode(int dtype, float x);
/* The value of one element of a floating dtype as a double (exact). */
double ref_float_value(int dtype, const void *elem);
int ref_elem_is_nan(int dtype, const void *elem);

/* splitmix64 finaliser and a combiner for keys. */
uint64_t ref_mix(uint64_t x);
uint64_t ref_key(uint64_t a, uint64_t b);

/* Input generation: one element of rank `rank` at index `idx`, written to out (dtype's size).
 * Values are never zero. Floats: random mantissas in [-4,4) (ops sum/avg/min/max), in +-[0.5,2)
 * (prod, so that products of 8 ranks stay in range); `special` mixes in NaN, inf, the largest
 * finite values and subnormals so that saturation and overflow are exercised. Integers: all bits
 * random (wrap-around), special: extremes. */
typedef struct {
  uint64_t key;
  int dtype, op, special;
} ref_gen_t;
void ref_gen_elem(const ref_gen_t *g, int rank, uint64_t idx, void *out);
/* The same with the per-rank key precomputed (hot loops). */
uint64_t ref_gen_rank_key(const ref_gen_t *g, int rank);
void ref_gen_elem_rk(const ref_gen_t *g, uint64_t rk, uint64_t idx, void *out);
void ref_gen_fill(const ref_gen_t *g, int rank, uint64_t start, size_t n, void *out);

/* Reduce n values (vals: n elements of dtype, ascending rank order) into out. *tol receives the
 * tolerance a reordering implementation may differ by (0: must be exact; NaN matches NaN). */
void ref_reduce(int dtype, int op, int n, const void *vals, void *out, double *tol);

/* got vs exp: exact (bitwise, except that any NaN matches any NaN) when tol == 0, else for floats
 * |got - exp| <= tol. Returns 1 when they match; *bitwise receives whether the bits are equal. */
int ref_match(int dtype, const void *got, const void *exp, double tol, int *bitwise);

/* "0x3c00(1)" */
void ref_format(int dtype, const void *elem, char *buf, size_t len);

/* FNV-1a over bytes, chained. */
uint64_t ref_hash(uint64_t h, const void *p, size_t n);

#endif
