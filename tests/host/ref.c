/* ref.c -- the independent reference: conversions, reduction, input generation, comparison.
 * See ref.h for why this deliberately shares no code or method with src/dtype.h. */
#include "ref.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "purlin.h"

#define SAME_(a, b) _Static_assert((int)REF_##a == (int)PURLIN_##b, "numbering of " #a);
SAME_(F32, F32)
SAME_(F16, F16)
SAME_(BF16, BF16)
SAME_(F64, F64)
SAME_(I8, I8)
SAME_(U8, U8)
SAME_(I32, I32)
SAME_(U32, U32)
SAME_(I64, I64)
SAME_(U64, U64)
SAME_(E4M3, FP8_E4M3)
SAME_(E5M2, FP8_E5M2)
SAME_(DTYPE_COUNT, DTYPE_COUNT)
SAME_(SUM, SUM)
SAME_(PROD, PROD)
SAME_(MIN, MIN)
SAME_(MAX, MAX)
SAME_(AVG, AVG)
SAME_(OP_COUNT, OP_COUNT)
#undef SAME_

static const struct {
  const char *name;
  size_t size;
} g_dtypes[REF_DTYPE_COUNT] = {
    {"f32", 4}, {"f16", 2}, {"bf16", 2}, {"f64", 8}, {"i8", 1},       {"u8", 1},
    {"i32", 4}, {"u32", 4}, {"i64", 8},  {"u64", 8}, {"fp8_e4m3", 1}, {"fp8_e5m2", 1},
};
static const char *const g_ops[REF_OP_COUNT] = {"sum", "prod", "min", "max", "avg"};

size_t ref_dtype_size(int dtype) {
  return dtype >= 0 && dtype < REF_DTYPE_COUNT ? g_dtypes[dtype].size : 0;
}
const char *ref_dtype_name(int dtype) {
  return dtype >= 0 && dtype < REF_DTYPE_COUNT ? g_dtypes[dtype].name : "?";
}
const char *ref_op_name(int op) {
  return op >= 0 && op < REF_OP_COUNT ? g_ops[op] : "?";
}
int ref_dtype_from_name(const char *s) {
  for (int d = 0; d < REF_DTYPE_COUNT; d++)
    if (strcmp(s, g_dtypes[d].name) == 0)
      return d;
  if (strcmp(s, "e4m3") == 0)
    return REF_E4M3;
  if (strcmp(s, "e5m2") == 0)
    return REF_E5M2;
  return -1;
}
int ref_op_from_name(const char *s) {
  for (int o = 0; o < REF_OP_COUNT; o++)
    if (strcmp(s, g_ops[o]) == 0)
      return o;
  return -1;
}
int ref_is_float(int dtype) {
  return dtype == REF_F32 || dtype == REF_F16 || dtype == REF_BF16 || dtype == REF_F64 ||
         dtype == REF_E4M3 || dtype == REF_E5M2;
}
static int is_narrow(int dtype) {
  return dtype == REF_F16 || dtype == REF_BF16 || dtype == REF_E4M3 || dtype == REF_E5M2;
}

/* ---- narrow floats ---------------------------------------------------------------------- */

typedef struct {
  int ebits, mbits, bias, has_inf, sat;
  uint32_t max_code; /* largest finite positive code */
  uint32_t nan_code; /* a positive NaN */
  double unit;       /* 2^-mbits: relative rounding bound */
  double tiny;       /* smallest subnormal */
  double *tab;       /* tab[c] = value of positive code c, c <= max_code (ascending) */
} fmt_t;

static double g_tab_f16[0x7c00], g_tab_bf16[0x7f80], g_tab_e4m3[0x7f], g_tab_e5m2[0x7c];
static fmt_t g_fmt[4] = {
    {5, 10, 15, 1, 0, 0x7bffu, 0x7e00u, 0, 0, g_tab_f16},
    {8, 7, 127, 1, 0, 0x7f7fu, 0x7fc0u, 0, 0, g_tab_bf16},
    {4, 3, 7, 0, 1, 0x7eu, 0x7fu, 0, 0, g_tab_e4m3},
    {5, 2, 15, 1, 1, 0x7bu, 0x7eu, 0, 0, g_tab_e5m2},
};
static int g_fmt_ready;
/* Every code's value, from decode_fields (ldexp): the hot path of the reference reads these. */
static float g_all_f16[65536], g_all_bf16[65536], g_all_e4m3[256], g_all_e5m2[256];
static float *const g_all[4] = {g_all_f16, g_all_bf16, g_all_e4m3, g_all_e5m2};

static double decode_fields(const fmt_t *f, uint32_t code) {
  uint32_t width = (uint32_t)(f->ebits + f->mbits);
  uint32_t sign = (code >> width) & 1u;
  uint32_t mag = code & ((1u << width) - 1u);
  uint32_t e = mag >> f->mbits, m = mag & ((1u << f->mbits) - 1u);
  uint32_t emax = (1u << f->ebits) - 1u;
  double v;
  if (f->has_inf && e == emax) {
    v = m ? NAN : INFINITY;
  } else if (!f->has_inf && mag == f->nan_code) {
    v = NAN;
  } else if (e == 0) {
    v = ldexp((double)m, 1 - f->bias - f->mbits);
  } else {
    v = ldexp((double)((1u << f->mbits) + m), (int)e - f->bias - f->mbits);
  }
  return sign ? -v : v;
}

static void fmt_init(void) {
  if (g_fmt_ready)
    return;
  for (int i = 0; i < 4; i++) {
    fmt_t *f = &g_fmt[i];
    for (uint32_t c = 0; c <= f->max_code; c++)
      f->tab[c] = decode_fields(f, c);
    f->unit = ldexp(1.0, -f->mbits);
    f->tiny = ldexp(1.0, 1 - f->bias - f->mbits);
    uint32_t ncodes = 1u << (f->ebits + f->mbits + 1);
    for (uint32_t c = 0; c < ncodes; c++)
      g_all[i][c] = (float)decode_fields(f, c);
  }
  g_fmt_ready = 1;
}

static fmt_t *fmt_of(int dtype) {
  fmt_init();
  switch (dtype) {
  case REF_F16:
    return &g_fmt[0];
  case REF_BF16:
    return &g_fmt[1];
  case REF_E4M3:
    return &g_fmt[2];
  case REF_E5M2:
    return &g_fmt[3];
  default:
    return NULL;
  }
}

double ref_narrow_decode(int dtype, uint32_t code) {
  return decode_fields(fmt_of(dtype), code);
}

/* The code of the two candidates lo < hi nearest to a: closer wins, a tie goes to the even code. */
static uint32_t pick(double a, double vlo, uint32_t clo, double vhi, uint32_t chi) {
  double mid = (vlo + vhi) / 2; /* exact: both have few significant bits */
  if (a < mid)
    return clo;
  if (a > mid)
    return chi;
  return (clo & 1u) ? chi : clo;
}

uint32_t ref_narrow_encode(int dtype, float x) {
  const fmt_t *f = fmt_of(dtype);
  uint32_t width = (uint32_t)(f->ebits + f->mbits);
  uint32_t inf_code = ((1u << f->ebits) - 1u) << f->mbits;
  if (isnan(x))
    return f->nan_code;
  uint32_t sign = signbit(x) ? 1u << width : 0u;
  double a = fabs((double)x);
  const double *t = f->tab;
  uint32_t top = f->max_code, code;
  if (isinf(a)) {
    code = f->sat ? top : inf_code;
  } else if (a >= t[top]) {
    if (a == t[top] || f->sat) {
      code = top;
    } else { /* IEEE overflow: the next value up would be 2^(emax+1), encoded as inf */
      double next = 2 * t[top] - t[top - 1];
      code = a >= next ? inf_code : pick(a, t[top], top, next, top + 1u);
      if (code == top + 1u)
        code = inf_code;
    }
  } else { /* smallest hi with t[hi] >= a */
    uint32_t lo = 0, hi = top;
    while (lo < hi) {
      uint32_t mid = lo + (hi - lo) / 2;
      if (t[mid] >= a)
        hi = mid;
      else
        lo = mid + 1;
    }
    code = (t[hi] == a) ? hi : pick(a, t[hi - 1], hi - 1, t[hi], hi);
  }
  return sign | code;
}

static uint32_t load_bits(int dtype, const void *p) {
  if (ref_dtype_size(dtype) == 1)
    return *(const uint8_t *)p;
  uint16_t v;
  memcpy(&v, p, 2);
  return v;
}
static void store_bits(int dtype, uint32_t code, void *p) {
  if (ref_dtype_size(dtype) == 1) {
    *(uint8_t *)p = (uint8_t)code;
  } else {
    uint16_t v = (uint16_t)code;
    memcpy(p, &v, 2);
  }
}

double ref_float_value(int dtype, const void *elem) {
  if (dtype == REF_F32) {
    float f;
    memcpy(&f, elem, 4);
    return f;
  }
  if (dtype == REF_F64) {
    double d;
    memcpy(&d, elem, 8);
    return d;
  }
  fmt_init();
  uint32_t c = load_bits(dtype, elem);
  switch (dtype) {
  case REF_F16:
    return g_all_f16[c];
  case REF_BF16:
    return g_all_bf16[c];
  case REF_E4M3:
    return g_all_e4m3[c];
  default:
    return g_all_e5m2[c];
  }
}

int ref_elem_is_nan(int dtype, const void *elem) {
  return ref_is_float(dtype) && isnan(ref_float_value(dtype, elem));
}

/* ---- integers ------------------------------------------------------------------------- */

static int is_signed_int(int dtype) {
  return dtype == REF_I8 || dtype == REF_I32 || dtype == REF_I64;
}
/* The element widened to 64 bits (sign-extended for signed types). */
static uint64_t load_int(int dtype, const void *p) {
  switch (dtype) {
  case REF_I8:
    return (uint64_t)(int64_t) * (const int8_t *)p;
  case REF_U8:
    return *(const uint8_t *)p;
  case REF_I32: {
    int32_t v;
    memcpy(&v, p, 4);
    return (uint64_t)(int64_t)v;
  }
  case REF_U32: {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
  }
  default: {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
  }
  }
}
/* Truncate to the type's width (then sign-extend for signed types). */
static uint64_t wrap_int(int dtype, uint64_t v) {
  switch (dtype) {
  case REF_I8:
    return (uint64_t)(int64_t)(int8_t)(v & 0xffu);
  case REF_U8:
    return v & 0xffu;
  case REF_I32:
    return (uint64_t)(int64_t)(int32_t)(v & 0xffffffffu);
  case REF_U32:
    return v & 0xffffffffu;
  default:
    return v;
  }
}
static void store_int(int dtype, uint64_t v, void *p) {
  size_t n = ref_dtype_size(dtype);
  for (size_t i = 0; i < n; i++)
    ((uint8_t *)p)[i] = (uint8_t)(v >> (8 * i)); /* little endian */
}

/* ---- random ------------------------------------------------------------------------------- */

uint64_t ref_mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
uint64_t ref_key(uint64_t a, uint64_t b) {
  return ref_mix(a ^ ref_mix(b + 0x632be59bd9b4e019ull));
}

static void gen_narrow(const ref_gen_t *g, uint64_t h, uint64_t h2, void *out) {
  const fmt_t *f = fmt_of(g->dtype);
  uint32_t width = (uint32_t)(f->ebits + f->mbits);
  uint32_t sign = (uint32_t)(h & 1u) << width;
  uint32_t m = (uint32_t)(h >> 8) & ((1u << f->mbits) - 1u);
  int e;
  if (g->special && h2 % 4 == 0) {
    uint32_t code;
    switch ((h2 >> 8) % 7) {
    case 0:
      code = f->max_code;
      break;
    case 1:
      code = f->max_code - 1u;
      break;
    case 2:
      code = f->nan_code;
      break;
    case 3:
      code = f->has_inf ? ((1u << f->ebits) - 1u) << f->mbits : f->max_code;
      break;
    case 4:
      code = 1u;
      break; /* smallest subnormal */
    case 5:
      code = (1u << f->mbits) - 1u;
      break; /* largest subnormal */
    default:
      code = f->max_code - (uint32_t)((h2 >> 16) % (1u << f->mbits));
      break;
    }
    store_bits(g->dtype, sign | code, out);
    return;
  }
  if (g->special) { /* any normal exponent */
    uint32_t emax_normal = (1u << f->ebits) - (f->has_inf ? 2u : 1u);
    e = 1 + (int)((h >> 1) % emax_normal) - f->bias;
  } else if (g->op == REF_PROD) {
    e = -(int)((h >> 1) & 1u);
  } else {
    e = (int)((h >> 1) % 5) - 3;
  }
  uint32_t code = (uint32_t)(e + f->bias) << f->mbits | m;
  if (!f->has_inf && code == f->nan_code)
    code--; /* e4m3: exponent 15 with m = 7 is NaN */
  store_bits(g->dtype, sign | code, out);
}

static void gen_wide(const ref_gen_t *g, uint64_t h, uint64_t h2, void *out) {
  int is64 = g->dtype == REF_F64;
  int mbits = is64 ? 52 : 23;
  double sign = (h & 1u) ? -1.0 : 1.0;
  uint64_t m = h2 & ((1ull << mbits) - 1u);
  double v;
  int e;
  if (g->special && (h >> 40) % 4 == 0) {
    switch ((h >> 44) % 6) {
    case 0:
      v = is64 ? DBL_MAX : FLT_MAX;
      break;
    case 1:
      v = NAN;
      break;
    case 2:
      v = INFINITY;
      break;
    case 3:
      v = is64 ? DBL_TRUE_MIN : FLT_TRUE_MIN;
      break;
    case 4:
      v = is64 ? ldexp(1.0 + (double)m / ldexp(1.0, 52), 1023)
               : ldexp((double)(m | (1ull << 23)), 127 - 23);
      break;
    default:
      v = 65504.0 + (double)((h >> 50) % 64);
      break; /* around the f16 range */
    }
    v *= sign;
  } else {
    if (g->special) {
      e = is64 ? (int)((h >> 1) % 2046) - 1022 : (int)((h >> 1) % 254) - 126;
    } else if (g->op == REF_PROD) {
      e = -(int)((h >> 1) & 1u);
    } else {
      e = (int)((h >> 1) % 5) - 3;
    }
    v = sign * ldexp((double)(m | (1ull << mbits)), e - mbits);
  }
  if (is64) {
    memcpy(out, &v, 8);
  } else {
    float f = (float)v; /* exact: v has 24 significant bits and an f32 exponent */
    memcpy(out, &f, 4);
  }
}

static void gen_int(const ref_gen_t *g, uint64_t h, uint64_t h2, void *out) {
  uint64_t v = h2;
  if (g->special && h % 3 == 0) {
    int s = is_signed_int(g->dtype);
    unsigned bits = (unsigned)ref_dtype_size(g->dtype) * 8u;
    uint64_t umax = bits == 64 ? ~0ull : (1ull << bits) - 1u;
    switch ((h >> 8) % 5) {
    case 0:
      v = s ? umax >> 1 : umax;
      break; /* max */
    case 1:
      v = s ? (umax >> 1) + 1u : 1u;
      break; /* min (signed), 1 */
    case 2:
      v = umax;
      break; /* -1 / max */
    case 3:
      v = s ? (umax >> 1) - 1u : umax - 1u;
      break;
    default:
      v = 2u;
      break;
    }
  }
  if (wrap_int(g->dtype, v) == 0)
    v = 1u;
  store_int(g->dtype, v, out);
}

uint64_t ref_gen_rank_key(const ref_gen_t *g, int rank) {
  return ref_key(g->key, (uint64_t)rank);
}

void ref_gen_elem_rk(const ref_gen_t *g, uint64_t rk, uint64_t idx, void *out) {
  uint64_t h = ref_mix(rk + idx * 0x9e3779b97f4a7c15ull);
  uint64_t h2 = ref_mix(h ^ 0x5851f42d4c957f2dull);
  if (is_narrow(g->dtype))
    gen_narrow(g, h, h2, out);
  else if (ref_is_float(g->dtype))
    gen_wide(g, h, h2, out);
  else
    gen_int(g, h, h2, out);
}

void ref_gen_elem(const ref_gen_t *g, int rank, uint64_t idx, void *out) {
  ref_gen_elem_rk(g, ref_gen_rank_key(g, rank), idx, out);
}

void ref_gen_fill(const ref_gen_t *g, int rank, uint64_t start, size_t n, void *out) {
  size_t es = ref_dtype_size(g->dtype);
  uint64_t rk = ref_gen_rank_key(g, rank);
  for (size_t i = 0; i < n; i++)
    ref_gen_elem_rk(g, rk, start + i, (uint8_t *)out + i * es);
}

/* ---- reduction ---------------------------------------------------------------------------- */

static float op_f32(int op, float a, float b) {
  switch (op) {
  case REF_PROD:
    return a * b;
  case REF_MIN:
    return fminf(a, b);
  case REF_MAX:
    return fmaxf(a, b);
  default:
    return a + b;
  }
}
static double op_f64(int op, double a, double b) {
  switch (op) {
  case REF_PROD:
    return a * b;
  case REF_MIN:
    return fmin(a, b);
  case REF_MAX:
    return fmax(a, b);
  default:
    return a + b;
  }
}

static void reduce_float(int dtype, int op, int n, const void *vals, void *out, double *tol) {
  size_t es = ref_dtype_size(dtype);
  const uint8_t *v = vals;
  double absacc = 0, unit, tiny;
  int nonfinite = 0;
  if (dtype == REF_F64) {
    double acc = 0;
    for (int r = 0; r < n; r++) {
      double x = ref_float_value(dtype, v + (size_t)r * es);
      nonfinite |= !isfinite(x);
      acc = r == 0 ? x : op_f64(op, acc, x);
      absacc = r == 0 ? fabs(x) : (op == REF_PROD ? absacc * fabs(x) : absacc + fabs(x));
    }
    if (op == REF_AVG)
      acc = acc / (double)n;
    memcpy(out, &acc, 8);
    nonfinite |= !isfinite(acc);
    unit = ldexp(1.0, -52);
    tiny = DBL_TRUE_MIN;
  } else {
    float acc = 0;
    for (int r = 0; r < n; r++) {
      double xd = ref_float_value(dtype, v + (size_t)r * es);
      float x = (float)xd; /* exact for every narrow format */
      nonfinite |= !isfinite(xd);
      acc = r == 0 ? x : op_f32(op, acc, x);
      absacc = r == 0 ? fabs(xd) : (op == REF_PROD ? absacc * fabs(xd) : absacc + fabs(xd));
    }
    if (op == REF_AVG)
      acc = acc / (float)n;
    nonfinite |= !isfinite(acc);
    if (dtype == REF_F32) {
      memcpy(out, &acc, 4);
      unit = ldexp(1.0, -23);
      tiny = FLT_TRUE_MIN;
    } else {
      const fmt_t *f = fmt_of(dtype);
      store_bits(dtype, ref_narrow_encode(dtype, acc), out);
      unit = f->unit;
      tiny = f->tiny;
    }
  }
  if (op == REF_MIN || op == REF_MAX || nonfinite) {
    *tol = 0;
  } else {
    if (op == REF_AVG)
      absacc /= n;
    *tol = (n + 2) * unit * absacc + 2 * tiny;
  }
}

static void reduce_int(int dtype, int op, int n, const void *vals, void *out) {
  size_t es = ref_dtype_size(dtype);
  int s = is_signed_int(dtype);
  uint64_t acc = 0;
  for (int r = 0; r < n; r++) {
    uint64_t x = load_int(dtype, (const uint8_t *)vals + (size_t)r * es);
    if (r == 0) {
      acc = x;
      continue;
    }
    switch (op) {
    case REF_PROD:
      acc *= x;
      break;
    case REF_MIN:
      if (s ? (int64_t)x < (int64_t)acc : x < acc)
        acc = x;
      break;
    case REF_MAX:
      if (s ? (int64_t)x > (int64_t)acc : x > acc)
        acc = x;
      break;
    default:
      acc += x;
      break;
    }
  }
  if (op == REF_AVG) {
    uint64_t w = wrap_int(dtype, acc);
    acc = s ? (uint64_t)((int64_t)w / (int64_t)n) : w / (uint64_t)n;
  }
  store_int(dtype, acc, out);
}

void ref_reduce(int dtype, int op, int n, const void *vals, void *out, double *tol) {
  *tol = 0;
  if (ref_is_float(dtype))
    reduce_float(dtype, op, n, vals, out, tol);
  else
    reduce_int(dtype, op, n, vals, out);
}

int ref_match(int dtype, const void *got, const void *exp, double tol, int *bitwise) {
  size_t es = ref_dtype_size(dtype);
  *bitwise = memcmp(got, exp, es) == 0;
  if (*bitwise)
    return 1;
  if (!ref_is_float(dtype))
    return 0;
  double g = ref_float_value(dtype, got), e = ref_float_value(dtype, exp);
  if (isnan(g) && isnan(e))
    return 1;
  if (tol <= 0 || !isfinite(g) || !isfinite(e))
    return 0;
  return fabs(g - e) <= tol;
}

void ref_format(int dtype, const void *elem, char *buf, size_t len) {
  size_t es = ref_dtype_size(dtype);
  uint64_t bits = 0;
  for (size_t i = 0; i < es; i++)
    bits |= (uint64_t)((const uint8_t *)elem)[i] << (8 * i);
  if (ref_is_float(dtype)) {
    snprintf(buf, len, "0x%0*" PRIx64 "(%.9g)", (int)(2 * es), bits, ref_float_value(dtype, elem));
  } else if (is_signed_int(dtype)) {
    snprintf(buf, len, "0x%0*" PRIx64 "(%" PRId64 ")", (int)(2 * es), bits,
             (int64_t)load_int(dtype, elem));
  } else {
    snprintf(buf, len, "0x%0*" PRIx64 "(%" PRIu64 ")", (int)(2 * es), bits, bits);
  }
}

uint64_t ref_hash(uint64_t h, const void *p, size_t n) {
  const uint8_t *b = p;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) { /* 8 bytes at a time, then the tail */
    uint64_t w;
    memcpy(&w, b + i, 8);
    h = (h ^ w) * 0x100000001b3ull;
  }
  for (; i < n; i++)
    h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}
