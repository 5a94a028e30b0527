/* ref_selftest -- checks the test reference itself (known values, round trips, ties), then
 * cross-checks the library's element conversions and reduction loop (src/dtype.h) against it:
 * every narrow code, every midpoint between neighbouring codes (+-0, 1, 2 f32 ulps), and a few
 * million random f32 bit patterns; pl_reduce_elems() against ref_reduce() for every dtype and op.
 * A disagreement here is either a reference bug or a library bug; the message says which value. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "ref.h"

#include "../expect.h"
#define CHECK EXPECT

static const int k_narrow[4] = {REF_F16, REF_BF16, REF_E4M3, REF_E5M2};

static float f32_of_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static uint32_t bits_of_f32(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static void known_values(void) {
  struct {
    int dtype;
    float x;
    uint32_t code;
  } k[] = {
      {REF_F16, 1.0f, 0x3c00},
      {REF_F16, -2.0f, 0xc000},
      {REF_F16, 65504.0f, 0x7bff},
      {REF_F16, 65519.0f, 0x7bff},
      {REF_F16, 65520.0f, 0x7c00}, /* tie goes to inf (even) */
      {REF_F16, 1e9f, 0x7c00},
      {REF_F16, -INFINITY, 0xfc00},
      {REF_F16, 5.9604645e-8f, 0x0001},
      {REF_F16, 2.9802322e-8f, 0x0000}, /* half the smallest subnormal: tie to even (0) */
      {REF_F16, 1.0f + 0x1p-11f, 0x3c00},
      {REF_F16, 1.0f + 0x3p-11f, 0x3c02},
      {REF_F16, -0.0f, 0x8000},
      {REF_BF16, 1.0f, 0x3f80},
      {REF_BF16, 1.0f + 0x1p-8f, 0x3f80},
      {REF_BF16, 1.0f + 0x3p-8f, 0x3f82},
      {REF_BF16, FLT_MAX, 0x7f80},
      {REF_BF16, 3.3895314e38f, 0x7f7f},
      {REF_E4M3, 1.0f, 0x38},
      {REF_E4M3, 448.0f, 0x7e},
      {REF_E4M3, 464.0f, 0x7e},
      {REF_E4M3, 1e9f, 0x7e},
      {REF_E4M3, INFINITY, 0x7e},
      {REF_E4M3, -INFINITY, 0xfe},
      {REF_E4M3, NAN, 0x7f},
      {REF_E4M3, 0x1p-9f, 0x01},
      {REF_E4M3, 0x1p-10f, 0x00},
      {REF_E4M3, 0x3p-10f, 0x02},
      {REF_E4M3, 1.0625f, 0x38},
      {REF_E4M3, 1.1875f, 0x3a},
      {REF_E5M2, 1.0f, 0x3c},
      {REF_E5M2, 57344.0f, 0x7b},
      {REF_E5M2, 61440.0f, 0x7b},
      {REF_E5M2, INFINITY, 0x7b},
      {REF_E5M2, -1e30f, 0xfb},
      {REF_E5M2, 0x1p-16f, 0x01},
      {REF_E5M2, 1.125f, 0x3c},
      {REF_E5M2, 1.375f, 0x3e},
  };
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
    uint32_t got = ref_narrow_encode(k[i].dtype, k[i].x);
    if (isnan(k[i].x)) {
      CHECK(isnan(ref_narrow_decode(k[i].dtype, got)), "%s NaN -> 0x%x", ref_dtype_name(k[i].dtype),
            got);
    } else {
      CHECK(got == k[i].code, "ref %s(%.9g) = 0x%x, want 0x%x", ref_dtype_name(k[i].dtype),
            (double)k[i].x, got, k[i].code);
    }
  }
  CHECK(ref_narrow_decode(REF_E4M3, 0x7e) == 448.0, "e4m3 max");
  CHECK(isnan(ref_narrow_decode(REF_E4M3, 0xff)), "e4m3 0xff is NaN");
  CHECK(ref_narrow_decode(REF_E4M3, 0x78) == 256.0, "e4m3 0x78 = 256 (no inf)");
  CHECK(isinf(ref_narrow_decode(REF_E5M2, 0x7c)), "e5m2 inf");
  CHECK(ref_narrow_decode(REF_F16, 0x0001) == ldexp(1, -24), "f16 subnormal");
  CHECK(ref_narrow_decode(REF_BF16, 0x0001) == ldexp(1, -133), "bf16 subnormal");
}

/* Every code decodes and re-encodes to itself (NaNs to a NaN). */
static void round_trips(void) {
  for (int k = 0; k < 4; k++) {
    int d = k_narrow[k];
    uint32_t ncodes = ref_dtype_size(d) == 1 ? 256u : 65536u;
    for (uint32_t c = 0; c < ncodes; c++) {
      double v = ref_narrow_decode(d, c);
      uint32_t back = ref_narrow_encode(d, (float)v);
      if (isnan(v)) {
        CHECK(isnan(ref_narrow_decode(d, back)), "%s NaN code 0x%x", ref_dtype_name(d), c);
      } else if (isinf(v) && ref_dtype_size(d) == 1) { /* fp8 saturates inf */
        CHECK(ref_narrow_decode(d, back) == (v > 0 ? 57344.0 : -57344.0), "e5m2 inf -> 0x%x", back);
      } else {
        CHECK(back == c, "%s round trip 0x%x -> %.9g -> 0x%x", ref_dtype_name(d), c, v, back);
      }
    }
  }
}

static uint32_t lib_encode(int d, float x) {
  switch (d) {
  case REF_F16:
    return pl_f32_to_f16(x);
  case REF_BF16:
    return pl_f32_to_bf16(x);
  case REF_E4M3:
    return pl_f32_to_e4m3(x);
  default:
    return pl_f32_to_e5m2(x);
  }
}
static float lib_decode(int d, uint32_t c) {
  switch (d) {
  case REF_F16:
    return pl_f16_to_f32((uint16_t)c);
  case REF_BF16:
    return pl_bf16_to_f32((uint16_t)c);
  case REF_E4M3:
    return pl_e4m3_to_f32((uint8_t)c);
  default:
    return pl_e5m2_to_f32((uint8_t)c);
  }
}

static long g_conv_checked, g_conv_bad;
static void cmp_encode(int d, float x) {
  uint32_t want = ref_narrow_encode(d, x), got = lib_encode(d, x);
  g_conv_checked++;
  int ok = got == want || (isnan(ref_narrow_decode(d, got)) && isnan(ref_narrow_decode(d, want)));
  if (!ok)
    g_conv_bad++;
  CHECK(ok, "library %s encode of %.9g (0x%08x): got 0x%x, reference 0x%x", ref_dtype_name(d),
        (double)x, bits_of_f32(x), got, want);
}

static void cross_check_conversions(void) {
  for (int k = 0; k < 4; k++) {
    int d = k_narrow[k];
    uint32_t ncodes = ref_dtype_size(d) == 1 ? 256u : 65536u;
    for (uint32_t c = 0; c < ncodes; c++) { /* decode */
      double v = ref_narrow_decode(d, c);
      float got = lib_decode(d, c);
      CHECK((isnan(v) && isnan(got)) || (double)got == v, "library %s decode 0x%x: %.9g, want %.9g",
            ref_dtype_name(d), c, (double)got, v);
    }
    for (uint32_t c = 0; c + 1 < ncodes; c++) { /* midpoints of neighbours and around them */
      double a = ref_narrow_decode(d, c), b = ref_narrow_decode(d, c + 1);
      if (!isfinite(a) || !isfinite(b) || fabs(b) < fabs(a) || (c & 0x7fffu) == 0x7fffu)
        continue;
      float mid = (float)((a + b) / 2);
      uint32_t mb = bits_of_f32(mid);
      for (int dd = -2; dd <= 2; dd++) {
        float x = f32_of_bits(mb + (uint32_t)dd);
        if (!isnan(x))
          cmp_encode(d, x);
      }
    }
    uint64_t s = 12345u + (uint64_t)d;
    for (int i = 0; i < 1000000; i++) { /* random bit patterns, every exponent */
      s = ref_mix(s);
      cmp_encode(d, f32_of_bits((uint32_t)s));
    }
    static const float extra[] = {INFINITY, -INFINITY, NAN,          FLT_MAX,  -FLT_MAX,
                                  0.0f,     -0.0f,     FLT_TRUE_MIN, 448.0f,   449.0f,
                                  463.9f,   464.0f,    480.0f,       57344.0f, 61439.0f,
                                  61440.0f, 65504.0f,  65519.99f,    65520.0f};
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++)
      cmp_encode(d, extra[i]);
  }
  printf("ref_selftest: %ld library conversions checked, %ld differ\n", g_conv_checked, g_conv_bad);
}

static void cross_check_reduce(void) {
  long bad = 0, checked = 0;
  for (int d = 0; d < REF_DTYPE_COUNT; d++) {
    for (int op = 0; op < REF_OP_COUNT; op++) {
      for (int special = 0; special <= 1; special++) {
        for (int n = 1; n <= 8; n++) {
          ref_gen_t g = {ref_key(77u, (uint64_t)(d * 100 + op * 10 + special)), d, op, special};
          size_t es = ref_dtype_size(d);
          enum { COUNT = 500 };
          uint8_t in[8][COUNT * 8], out[COUNT * 8], vals[8 * 8], want[8];
          const void *srcs[8];
          for (int r = 0; r < n; r++) {
            ref_gen_fill(&g, r, 0, COUNT, in[r]);
            srcs[r] = in[r];
          }
          pl_reduce_elems(out, srcs, n, COUNT, d, op, n);
          for (size_t i = 0; i < COUNT; i++) {
            double tol;
            int bitwise;
            for (int r = 0; r < n; r++)
              memcpy(vals + (size_t)r * es, in[r] + i * es, es);
            ref_reduce(d, op, n, vals, want, &tol);
            checked++;
            int ok = ref_match(d, out + i * es, want, 0, &bitwise);
            if (!ok) {
              char a[64], b[64], x0[64], x1[64];
              bad++;
              ref_format(d, out + i * es, a, sizeof a);
              ref_format(d, want, b, sizeof b);
              ref_format(d, vals, x0, sizeof x0);
              ref_format(d, vals + es, x1, sizeof x1);
              CHECK(
                  ok,
                  "library reduce %s %s n=%d special=%d [%zu]: got %s, reference %s (x0 %s x1 %s)",
                  ref_dtype_name(d), ref_op_name(op), n, special, i, a, b, x0, n > 1 ? x1 : "-");
            }
          }
        }
      }
    }
  }
  printf("ref_selftest: %ld library reductions checked, %ld differ\n", checked, bad);
}

int main(int argc, char **argv) {
  int lib = !(argc > 1 && strcmp(argv[1], "--ref-only") == 0);
  known_values();
  round_trips();
  if (lib) {
    cross_check_conversions();
    cross_check_reduce();
  }
  printf("ref_selftest: %s (%lld failures)\n", pl_failures ? "FAILED" : "ok", pl_failures);
  return pl_failures ? 1 : 0;
}
