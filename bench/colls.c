/* colls.c -- the table of collectives: geometry of a call (counts, displacements, Zipf splits, the
 * segments of each rank's output, the bytes each rank must move), input generation and the check
 * against a host reference built from the regenerated inputs of all ranks. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "dtype.h"
#include "elem.h"

const bench_coll_t bench_colls[B_NCOLL] = {
    [B_AR] = {"testAR", "AllReduce", 1, 0, 2.0},
    [B_AG] = {"testAG", "AllGather", 0, 0, 1.0},
    [B_RS] = {"testRS", "ReduceScatter", 1, 0, 1.0},
    [B_A2A] = {"testA2A", "AllToAll", 0, 0, 1.0},
    [B_AGV] = {"testAGV", "AllGatherV", 0, 1, 1.0},
    [B_RSV] = {"testRSV", "ReduceScatterV", 1, 1, 1.0},
    [B_A2AV] = {"testA2AV", "AllToAllV", 0, 1, 1.0},
};

/* ---- inputs: elem.h's counter-based generator, so any element can be regenerated on its own, on
 * the host or (check.cu) on the GPU, with the same bits ---------------------------------------- */
static uint64_t mix64(uint64_t x) {
  return bench_mix64(x);
}

void bench_gen(void *dst, int dtype, uint64_t seed, int rank, size_t bytes, int buf, size_t first,
               size_t n) {
  uint64_t key = bench_gen_key(seed, rank, bytes, buf);
  size_t es = pl_dtype_bytes(dtype);
  for (size_t j = 0; j < n; j++)
    bench_store_bits(dst, es, j, bench_gen_bits(key, first + j, dtype));
}

/* ---- Zipf splits --------------------------------------------------------------------------- */
static void shuffle(int *perm, int n, uint64_t key) {
  for (int i = 0; i < n; i++)
    perm[i] = i;
  for (int i = n - 1; i > 0; i--) {
    key = mix64(key);
    int j = (int)(key % (uint64_t)(i + 1)), t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
}

/* Split `units` over k bins with weights w (largest remainder, ties to the lower bin). */
static void split_units(size_t units, int k, const double *w, size_t *out) {
  double sum = 0, *frac = malloc(sizeof(double) * (size_t)k);
  size_t given = 0;
  for (int i = 0; i < k; i++)
    sum += w[i];
  for (int i = 0; i < k; i++) {
    double t = (double)units * w[i] / sum;
    out[i] = (size_t)floor(t);
    frac[i] = t - (double)out[i];
    given += out[i];
  }
  while (given < units) {
    int best = 0;
    for (int i = 1; i < k; i++)
      if (frac[i] > frac[best])
        best = i;
    out[best]++;
    frac[best] = -1;
    given++;
  }
  free(frac);
}

/* counts[r] for AGV/RSV: Zipf weights 1/(k+1)^s over a random permutation of the ranks, in
 * multiples of ub bytes, summing to `elems` (the remainder below ub bytes goes to the heaviest). */
static void zipf_counts(size_t *counts, int n, size_t elems, size_t esize, uint64_t key, double s,
                        size_t ub) {
  int *perm = malloc(sizeof(int) * (size_t)n);
  double *w = malloc(sizeof(double) * (size_t)n);
  size_t unit = ub / esize, *u = malloc(sizeof(size_t) * (size_t)n);
  shuffle(perm, n, key);
  for (int k = 0; k < n; k++)
    w[perm[k]] = 1.0 / pow((double)(k + 1), s);
  split_units(elems / unit, n, w, u);
  for (int r = 0; r < n; r++)
    counts[r] = u[r] * unit;
  if (n > 0) counts[perm[0]] += elems % unit; /* n > 0 always; says so to -O2 flow analysis */
  free(perm);
  free(w);
  free(u);
}

/* AllToAllV: a symmetric matrix m[src*n + dst] (so that in place works: sendcounts == recvcounts),
 * Zipf weights over a random permutation of the n(n+1)/2 unordered pairs, in multiples of ub bytes,
 * summing to n * elems (elems = the average a rank sends). */
static void zipf_matrix(size_t *m, int n, size_t elems, size_t esize, uint64_t key, double s,
                        size_t ub) {
  int np = n * (n + 1) / 2, *perm = malloc(sizeof(int) * (size_t)np), hr = 0;
  double *w = malloc(sizeof(double) * (size_t)np), sum = 0, hw = -1;
  size_t unit = ub / esize, total = (size_t)n * elems, units = total / unit, given = 0;
  memset(m, 0, sizeof(size_t) * (size_t)n * (size_t)n);
  shuffle(perm, np, key);
  for (int k = 0; k < np; k++)
    w[perm[k]] = 1.0 / pow((double)(k + 1), s);
  for (int r = 0, b = 0; r < n; r++)
    for (int p = r; p < n; p++, b++)
      sum += w[b] * (r == p ? 1.0 : 2.0);
  for (int r = 0, b = 0; r < n; r++)
    for (int p = r; p < n; p++, b++) {
      double t = (double)units * w[b] * (r == p ? 1.0 : 2.0) / sum;
      size_t c = r == p ? (size_t)floor(t) : (size_t)floor(t / 2);
      m[(size_t)r * n + p] = m[(size_t)p * n + r] = c * unit;
      given += r == p ? c : 2 * c;
      if (r == p && w[b] > hw)
        hw = w[b], hr = r;
    }
  /* the heaviest diagonal pair takes what rounding left (a rank's copy to itself) */
  m[(size_t)hr * n + hr] += (units - given) * unit + total % unit;
  free(perm);
  free(w);
}

static size_t prefix(size_t *d, const size_t *c, int n) {
  size_t s = 0;
  for (int i = 0; i < n; i++) {
    d[i] = s;
    s += c[i];
  }
  return s;
}

/* AllToAllV --pair: ranks 0 and 1 send each other `elems` each and every other block (a rank's own
 * included) is 1 KiB: an MoE step with two hot experts, in which ranks 2.. have packet blocks only
 * and run the lean kernels beside the direct kernel of ranks 0 and 1 (docs/gpu.md, "The tiny
 * kernel"). */
static void pair_matrix(size_t *m, int n, size_t elems, size_t esize) {
  for (int i = 0; i < n * n; i++)
    m[i] = 1024 / esize;
  if (n >= 2)
    m[1] = m[(size_t)n] = elems;
}

int bench_geom_make(bench_geom_t *g, int coll, size_t bytes, int dtype, int world, int rank,
                    uint64_t seed, const bench_split_t *sp) {
  size_t es = pl_dtype_bytes(dtype), n = (size_t)world, E = bytes / es;
  memset(g, 0, sizeof *g);
  g->coll = coll;
  g->world = world;
  g->rank = rank;
  g->esize = es;
  g->segs = calloc(n, sizeof(bench_seg_t));
  size_t *v = calloc(4 * n, sizeof(size_t));
  if (!g->segs || !v)
    return -1;
  g->sc = v, g->sd = v + n, g->rc = v + 2 * n, g->rd = v + 3 * n;
  uint64_t key = mix64(seed ^ mix64(bytes) ^ 0x5a17f00dull);
  if (!bench_colls[coll].vlen) {
    size_t c = coll == B_AR ? E : E / n;
    if (c == 0)
      c = 1;
    g->scount = c;
    g->count = coll == B_AR ? c : c * n;
    g->bytes = g->count * es;
  } else {
    if (E < n)
      E = n;
    g->count = E;
    g->bytes = E * es;
  }
  double S = (double)g->bytes, moved = (double)(n - 1) / (double)n * S, a2av_mem = 0;
  size_t c = g->scount, me = (size_t)rank;
  switch (coll) {
  case B_AR:
    g->send_elems = g->recv_elems = c;
    g->segs[0] = (bench_seg_t){0, 0, c, -1};
    g->nsegs = 1;
    g->move_bytes = 2 * moved;
    break;
  case B_AG:
  case B_A2A:
    g->send_elems = coll == B_AG ? c : c * n;
    g->recv_elems = c * n;
    g->inplace_off = coll == B_AG ? me * c : 0;
    for (size_t r = 0; r < n; r++)
      g->segs[r] = (bench_seg_t){r * c, coll == B_AG ? 0 : me * c, c, (int)r};
    g->nsegs = world;
    g->move_bytes = moved;
    break;
  case B_RS:
    g->send_elems = c * n;
    g->recv_elems = c;
    g->inplace_off = me * c;
    g->segs[0] = (bench_seg_t){0, me * c, c, -1};
    g->nsegs = 1;
    g->move_bytes = moved;
    break;
  case B_AGV:
  case B_RSV: {
    zipf_counts(g->rc, world, E, es, key, sp->zipf, sp->unit);
    prefix(coll == B_AGV ? g->rd : g->sd, g->rc, world);
    size_t *d = coll == B_AGV ? g->rd : g->sd, cmax = 0, cmin = SIZE_MAX;
    for (size_t r = 0; r < n; r++) {
      if (g->rc[r] > cmax)
        cmax = g->rc[r];
      if (g->rc[r] < cmin)
        cmin = g->rc[r];
    }
    if (coll == B_AGV) {
      g->send_elems = g->rc[me];
      g->recv_elems = E;
      g->inplace_off = d[me];
      for (size_t r = 0; r < n; r++)
        g->segs[r] = (bench_seg_t){d[r], 0, g->rc[r], (int)r};
      g->nsegs = world;
      g->move_bytes = (double)((E - cmin) * es); /* the rank with the smallest own part */
    } else {
      g->send_elems = E;
      g->recv_elems = g->rc[me];
      g->inplace_off = d[me];
      g->segs[0] = (bench_seg_t){0, d[me], g->rc[me], -1};
      g->nsegs = 1;
      g->move_bytes = (double)((n - 1) * cmax * es); /* the rank with the largest block */
    }
    break;
  }
  case B_A2AV: {
    size_t *m = malloc(sizeof(size_t) * n * n), *sdp = malloc(sizeof(size_t) * n);
    if (!m || !sdp)
      return -1;
    if (sp->pair)
      pair_matrix(m, world, E, es);
    else
      zipf_matrix(m, world, E, es, key, sp->zipf, sp->unit);
    for (size_t p = 0; p < n; p++) {
      g->sc[p] = m[me * n + p];
      g->rc[p] = m[p * n + me];
    }
    g->send_elems = prefix(g->sd, g->sc, world);
    g->recv_elems = prefix(g->rd, g->rc, world);
    double worst = 0;
    for (size_t r = 0; r < n; r++) {
      double in = 0;
      for (size_t p = 0; p < n; p++)
        in += p == r ? 0 : (double)m[p * n + r];
      if (in > worst)
        worst = in;
    }
    g->move_bytes = worst * (double)es;
    double total = 0; /* the matrix's elements: n S with the Zipf splits, less with --pair */
    for (size_t i = 0; i < n * n; i++)
      total += (double)m[i];
    a2av_mem = total * (double)es / (double)n; /* the traffic per rank, on average */
    for (size_t r = 0; r < n; r++) {
      /* rank r sends to me from its own displacement for me: the sum of its row before me */
      size_t off = 0;
      for (size_t p = 0; p < me; p++)
        off += m[r * n + p];
      g->segs[r] = (bench_seg_t){g->rd[r], off, g->rc[r], (int)r};
    }
    g->nsegs = world;
    free(m);
    free(sdp);
    break;
  }
  default:
    return -1;
  }
  g->mem_bytes = coll == B_A2AV ? a2av_mem : bench_mem_bytes(coll, S, world);
  return 0;
}

double bench_mem_bytes(int coll, double S, int n) {
  return coll == B_RS || coll == B_RSV ? (double)(n + 1) * S / (2.0 * n) : S;
}

void bench_geom_free(bench_geom_t *g) {
  free(g->segs);
  free(g->sc);
  memset(g, 0, sizeof *g);
}

/* ---- checking ------------------------------------------------------------------------------- */
static double to_double(const void *p, int dtype, size_t i) {
  switch (dtype) {
  case PURLIN_F32:
    return ((const float *)p)[i];
  case PURLIN_F64:
    return ((const double *)p)[i];
  case PURLIN_F16:
    return pl_f16_to_f32(((const uint16_t *)p)[i]);
  case PURLIN_BF16:
    return pl_bf16_to_f32(((const uint16_t *)p)[i]);
  case PURLIN_FP8_E4M3:
    return pl_e4m3_to_f32(((const uint8_t *)p)[i]);
  case PURLIN_FP8_E5M2:
    return pl_e5m2_to_f32(((const uint8_t *)p)[i]);
  default:
    return 0;
  }
}

static int is_float(int dtype) {
  return dtype == PURLIN_F32 || dtype == PURLIN_F64 || dtype == PURLIN_F16 ||
         dtype == PURLIN_BF16 || dtype == PURLIN_FP8_E4M3 || dtype == PURLIN_FP8_E5M2;
}

#define CHUNK ((size_t)1 << 15)

int bench_check_tolerant(const bench_geom_t *g, int dtype, int op, int exact) {
  return !exact && bench_colls[g->coll].reduce && is_float(dtype) && op != PURLIN_MIN &&
         op != PURLIN_MAX;
}

size_t bench_check(const bench_geom_t *g, const void *out, int dtype, int op, uint64_t seed,
                   int exact) {
  int n = g->world, reduce = bench_colls[g->coll].reduce;
  size_t es = g->esize, wrong = 0;
  int tolerant = bench_check_tolerant(g, dtype, op, exact);
  double eacc = dtype == PURLIN_F64 ? 0x1p-53 : 0x1p-24, eout = bench_eps_out(dtype); /* elem.h */
  unsigned char *got = malloc(CHUNK * es), *exp = malloc(CHUNK * es);
  unsigned char *src = reduce ? malloc(CHUNK * es * (size_t)n) : NULL;
  const void **srcs = malloc(sizeof(void *) * (size_t)n);
  if (!got || !exp || !srcs || (reduce && !src))
    bench_die("check: out of host memory");
  for (int r = 0; r < n; r++)
    srcs[r] = src ? src + (size_t)r * CHUNK * es : NULL;
  for (int s = 0; s < g->nsegs; s++) {
    const bench_seg_t *sg = &g->segs[s];
    for (size_t off = 0; off < sg->len; off += CHUNK) {
      size_t L = sg->len - off < CHUNK ? sg->len - off : CHUNK;
      bench_get(got, (const char *)out + (sg->out + off) * es, L * es);
      if (sg->src >= 0) {
        bench_gen(exp, dtype, seed, sg->src, g->bytes, 0, sg->in + off, L);
      } else {
        for (int r = 0; r < n; r++)
          bench_gen((void *)srcs[r], dtype, seed, r, g->bytes, 0, sg->in + off, L);
        pl_reduce_elems(exp, (const void *const *)srcs, n, L, dtype, op, n);
      }
      for (size_t i = 0; i < L; i++) {
        if (!memcmp(got + i * es, exp + i * es, es))
          continue;
        if (tolerant) {
          double a = 0, ref = to_double(exp, dtype, i), v = to_double(got, dtype, i);
          if (op == PURLIN_PROD)
            a = fabs(ref);
          else
            for (int r = 0; r < n; r++)
              a += fabs(to_double(srcs[r], dtype, i));
          if (op == PURLIN_AVG)
            a /= n;
          double tacc = n * eacc * a, tol = tacc + 2 * eout * (fabs(ref) + tacc);
          if (fabs(v - ref) <= tol)
            continue;
        }
        wrong++;
      }
    }
  }
  free(got);
  free(exp);
  free(src);
  free(srcs);
  return wrong;
}

/* ---- the device check's element code, on the host ------------------------------------------- */
void bench_elem_ctx_init(bench_elem_ctx_t *c, const bench_geom_t *g, int dtype, int op,
                         uint64_t seed, int exact) {
  memset(c, 0, sizeof *c);
  if (g->world > BENCH_MAX_WORLD)
    bench_die("check: world %d above %d", g->world, BENCH_MAX_WORLD);
  for (int r = 0; r < g->world; r++)
    c->key[r] = bench_gen_key(seed, r, g->bytes, 0);
  c->n = g->world;
  c->dtype = dtype;
  c->op = op;
  c->tolerant = bench_check_tolerant(g, dtype, op, exact);
}

size_t bench_check_emul(const bench_geom_t *g, const void *out, int dtype, int op, uint64_t seed,
                        int exact) {
  bench_elem_ctx_t c;
  size_t es = g->esize, wrong = 0;
  unsigned char *got = malloc(CHUNK * es);
  if (!got)
    bench_die("check: out of host memory");
  bench_elem_ctx_init(&c, g, dtype, op, seed, exact);
  for (int s = 0; s < g->nsegs; s++) {
    const bench_seg_t *sg = &g->segs[s];
    for (size_t off = 0; off < sg->len; off += CHUNK) {
      size_t L = sg->len - off < CHUNK ? sg->len - off : CHUNK;
      bench_get(got, (const char *)out + (sg->out + off) * es, L * es);
      for (size_t i = 0; i < L; i++)
        wrong += (size_t)bench_seg_elem_wrong(&c, sg->src, sg->in + off + i,
                                              bench_load_bits(got, es, i), es);
    }
  }
  free(got);
  return wrong;
}

void bench_corrupt(const bench_geom_t *g, void *out) {
  for (int s = 0; s < g->nsegs; s++) {
    const bench_seg_t *sg = &g->segs[s];
    if (!sg->len)
      continue;
    size_t L = sg->len < CHUNK ? sg->len : CHUNK;
    unsigned char *p = (unsigned char *)out + (sg->out + L / 2) * g->esize + g->esize - 1, b;
    bench_get(&b, p, 1);
    b ^= 0x40; /* a high bit of one element: exponent or top bits, never within a tolerance */
    bench_put(p, &b, 1);
    return;
  }
}
