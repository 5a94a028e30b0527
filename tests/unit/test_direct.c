/* Unit test of the direct kernel's arithmetic (src/direct_plan.h, the functions direct.cu calls):
 * a model of one call's staging traffic, byte by byte. For every collective, world, grid, staging
 * half and random (skewed) counts, each rank stages and each rank reads, round by round, with the
 * kernel's plan, pieces, slots and CTA parts; the model checks that
 *  - the rounds cover every block exactly, and every round's slots fit the half without overlap;
 *  - a reader's CTA c reads each byte of a peer's staging in the round that byte was written, and
 *    the byte holds what the reader wants (its source offset in the stager's input; AllReduce:
 *    also each rank's reduced shard, which it writes into its own slot of its staging);
 *  - every byte of a staging half is written and read by one CTA index only, in every round: the
 *    kernel orders CTA c of a stager only with CTA c of its readers (a flag per CTA pair), so a
 *    byte touched by two CTA indices is a race (the one 4603f50 fixed: a smaller last round moved
 *    the parts). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "direct_plan.h"
#include "plan.h" /* pl_hdr_words: the AllToAllV spread's rows are headers */
#include "../expect.h" /* EXPECT: every byte access of the model, every plan property */

static uint64_t rng = 88172645463325252ull;
static uint64_t rnd(uint64_t n) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return n ? rng % n : 0;
}

/* One staging half of the model: per byte, the CTA that owns it (-1: untouched), the round of its
 * last write, the source offset it holds. */
typedef struct {
  uint64_t half;
  int *owner;
  int64_t *round;
  uint64_t *src;
} half_t;

static void touch(half_t *h, uint64_t at, int cta, const char *what) {
  if (h->owner[at] < 0) h->owner[at] = cta;
  EXPECT(h->owner[at] == cta, "%s: staging byte %llu touched by CTAs %d and %d", what,
         (unsigned long long)at, h->owner[at], cta);
}

static const char *names[] = {"AllReduce", "AllGather", "ReduceScatter", "AllToAll",
                              "AllGatherV", "ReduceScatterV", "AllToAllV"};
static const int colls[] = {PL_COLL_ALL_REDUCE, PL_COLL_ALL_GATHER, PL_COLL_REDUCE_SCATTER,
                            PL_COLL_ALL_TO_ALL, PL_COLL_ALL_GATHER_V,
                            PL_COLL_REDUCE_SCATTER_V, PL_COLL_ALL_TO_ALL_V};

/* AllToAllV: rank s sends a2av[s][d] elements to rank d (each rank its own row) */
static uint64_t a2av[PL_MAX_WORLD][PL_MAX_WORLD];

/* Block j of stager s for reader j in round k: its staging offset, bytes and source offset (in
 * s's input), as direct.cu's pl_direct_cin places it; AllReduce: shard j of window k. */
static uint64_t block(const pl_call_t *c, const uint64_t *rc, const uint64_t *sd, uint64_t P,
                      uint64_t R, int j, uint64_t k, uint64_t *off, uint64_t *src) {
  const uint64_t es = c->esize, n = c->count;
  switch (c->coll) {
  case PL_COLL_ALL_GATHER:
  case PL_COLL_ALL_GATHER_V:
    *off = 0;
    *src = k * P;
    return pl_direct_piece((c->coll == PL_COLL_ALL_GATHER ? n : rc[c->rank]) * es, P, k);
  case PL_COLL_ALL_TO_ALL:
  case PL_COLL_REDUCE_SCATTER:
    *off = (uint64_t)j * P;
    *src = (uint64_t)j * n * es + k * P;
    return pl_direct_piece(n * es, P, k);
  case PL_COLL_ALL_TO_ALL_V: { /* the stager's row; its blocks in order in its input */
    uint64_t at = 0;
    for (int d = 0; d < j; d++) at += a2av[c->rank][d];
    *off = (uint64_t)j * P;
    *src = at * es + k * P;
    return pl_direct_piece(a2av[c->rank][j] * es, P, k);
  }
  case PL_COLL_REDUCE_SCATTER_V:
    *off = (uint64_t)j * P;
    *src = sd[j] * es + k * P;
    return pl_direct_piece(rc[j] * es, P, k);
  default: {
    uint64_t base, nk, per;
    pl_direct_window(n, es, c->world, P, R, pl_ar_shard_per(n, es, c->world), k, &base, &nk, &per);
    uint64_t s0 = pl_ar_shard_at(per, nk, j), s1 = pl_ar_shard_at(per, nk, j + 1);
    *off = pl_direct_ar_off(R, P, c->world, es, j, s0);
    *src = (base + s0) * es;
    return (s1 - s0) * es;
  }
  }
}

static void one(int ci, int w, int g, uint64_t half, uint64_t count, int skew) {
  pl_call_t c;
  memset(&c, 0, sizeof c);
  c.coll = colls[ci];
  c.world = w;
  c.esize = (uint64_t)1 << rnd(4);
  c.count = count;
  uint64_t rc[PL_MAX_WORLD], sd[PL_MAX_WORLD], tot = 0;
  for (int d = 0; d < w; d++) {
    rc[d] = skew ? (d == 0 ? count : rnd(count / 4 + 1)) : count;
    sd[d] = tot;
    tot += rc[d];
  }
  uint64_t P = 0, sl = 0, R = 0;
  int ok = pl_direct_plan(&c, rc, half, &P, &sl, &R);
  if (ok && c.coll == PL_COLL_ALL_TO_ALL_V) { /* the device's rounds: the largest block sent */
    uint64_t most = 0;
    for (int q = 0; q < w; q++)
      for (int d = 0; d < w; d++) {
        a2av[q][d] = skew ? (q + d == 1 ? count : rnd(count / 4 + 1)) : count;
        most = a2av[q][d] > most ? a2av[q][d] : most;
      }
    EXPECT(R == 1, "AllToAllV: the host plans one round (%llu)", (unsigned long long)R);
    R = pl_direct_rounds(most * c.esize, P);
  }
  if (!ok) { /* only when the half cannot hold one 128-byte (AllReduce: 64 w) piece per slot */
    EXPECT(half / (c.coll == PL_COLL_ALL_REDUCE ? 64 * (uint64_t)w : 128) /
                   (c.coll == PL_COLL_REDUCE_SCATTER || c.coll == PL_COLL_ALL_TO_ALL ||
                            c.coll == PL_COLL_REDUCE_SCATTER_V || c.coll == PL_COLL_ALL_TO_ALL_V
                        ? (uint64_t)w : 1) == 0,
           "%s w%d half %llu: plan refused", names[ci], w, (unsigned long long)half);
    return;
  }
  const int nslot = c.coll == PL_COLL_ALL_GATHER || c.coll == PL_COLL_ALL_GATHER_V ? 1 : w;
  EXPECT(P % 64 == 0 && (uint64_t)nslot * sl <= half && sl <= P, "%s w%d: piece %llu slot %llu half %llu",
         names[ci], w, (unsigned long long)P, (unsigned long long)sl, (unsigned long long)half);
  /* every rank a stager; rank s's half */
  half_t h = {half, malloc(half * sizeof(int)), malloc(half * sizeof(int64_t)),
              malloc(half * sizeof(uint64_t))};
  for (int s = 0; s < w; s++) {
    c.rank = s;
    for (uint64_t x = 0; x < half; x++) h.owner[x] = -1, h.round[x] = -1;
    uint64_t covered[PL_MAX_WORLD];
    memset(covered, 0, sizeof covered);
    for (uint64_t k = 0; k < R; k++) {
      /* stage: CTA q writes its part of every block for reader j */
      uint64_t prev_end = 0;
      for (int j = 0; j < w; j++) {
        if (nslot == 1 && j > 0) break;
        if (nslot > 1 && j == s) continue; /* its own block or shard: not staged */
        uint64_t off, src, b = block(&c, rc, sd, P, R, j, k, &off, &src);
        EXPECT(b <= sl && off + b <= half, "%s w%d round %llu: block %d of %llu bytes at %llu "
               "(slot %llu, half %llu)", names[ci], w, (unsigned long long)k, j,
               (unsigned long long)b, (unsigned long long)off, (unsigned long long)sl,
               (unsigned long long)half);
        EXPECT(off >= prev_end || j == 0, "%s w%d: slots overlap", names[ci], w);
        prev_end = off + b;
        covered[j] += b;
        uint64_t got = 0;
        for (int q = 0; q < g; q++) {
          uint64_t lo, hi;
          pl_direct_rsplit(R, sl, b, (uint64_t)q, (uint64_t)g, &lo, &hi);
          got += hi - lo;
          for (uint64_t x = lo; x < hi && off + x < half; x++) {
            touch(&h, off + x, q, names[ci]);
            h.round[off + x] = (int64_t)k;
            h.src[off + x] = src + x;
          }
        }
        EXPECT(got == b, "%s w%d g%d round %llu: parts cover %llu of %llu bytes", names[ci], w, g,
               (unsigned long long)k, (unsigned long long)got, (unsigned long long)b);
      }
      /* AllReduce: rank s's reduced shard goes to slot s of its staging (its output not
       * peer-mapped: red_stg), CTA q its part; every peer copies it from there */
      const uint64_t RED = (uint64_t)1 << 62;
      if (c.coll == PL_COLL_ALL_REDUCE) {
        uint64_t off, src, b = block(&c, rc, sd, P, R, s, k, &off, &src);
        for (int q = 0; q < g; q++) {
          uint64_t lo, hi;
          pl_direct_rsplit(R, sl, b, (uint64_t)q, (uint64_t)g, &lo, &hi);
          for (uint64_t x = lo; x < hi && off + x < half; x++) {
            touch(&h, off + x, q, "AllReduce's reduced shard");
            h.round[off + x] = (int64_t)k;
            h.src[off + x] = RED + src + x;
          }
        }
        for (int r = 0; r < w; r++)
          for (int q = 0; q < g && r != s; q++) {
            uint64_t lo, hi;
            pl_direct_rsplit(R, sl, b, (uint64_t)q, (uint64_t)g, &lo, &hi);
            for (uint64_t x = lo; x < hi && off + x < half; x++) {
              touch(&h, off + x, q, "AllReduce's reduced shard");
              if (h.round[off + x] != (int64_t)k || h.src[off + x] != RED + src + x) {
                EXPECT(0, "AllReduce w%d g%d rank %d round %llu: reader %d of the reduced shard, "
                       "byte %llu is stale", w, g, s, (unsigned long long)k, r,
                       (unsigned long long)x);
                x = hi;
              }
            }
          }
      }
      /* read: reader r's CTA q reads its part of its block in s's staging (the same offsets the
       * reader computes: pl_direct_round) */
      for (int r = 0; r < w; r++) {
        if (r == s) continue;
        uint64_t off, src, b = block(&c, rc, sd, P, R, r, k, &off, &src);
        for (int q = 0; q < g; q++) {
          uint64_t lo, hi;
          pl_direct_rsplit(R, sl, b, (uint64_t)q, (uint64_t)g, &lo, &hi);
          for (uint64_t x = lo; x < hi && off + x < half; x++) {
            touch(&h, off + x, q, names[ci]);
            if (h.round[off + x] != (int64_t)k || h.src[off + x] != src + x) {
              EXPECT(0, "%s w%d g%d rank %d round %llu: reader %d byte %llu holds round %lld "
                     "source %llu, wants %llu", names[ci], w, g, s, (unsigned long long)k, r,
                     (unsigned long long)x, (long long)h.round[off + x],
                     (unsigned long long)h.src[off + x], (unsigned long long)(src + x));
              x = hi;
            }
          }
        }
      }
    }
    /* the rounds cover every block exactly */
    for (int j = 0; j < w; j++) {
      if ((nslot == 1 && j > 0) || (nslot > 1 && j == s)) continue;
      uint64_t want = c.coll == PL_COLL_ALL_GATHER_V ? rc[s] * c.esize
                      : c.coll == PL_COLL_REDUCE_SCATTER_V ? rc[j] * c.esize
                      : c.coll == PL_COLL_ALL_TO_ALL_V ? a2av[s][j] * c.esize
                      : c.coll == PL_COLL_ALL_REDUCE ? pl_ar_shard_begin(count, c.esize, w, j + 1) * c.esize -
                                                           pl_ar_shard_begin(count, c.esize, w, j) * c.esize
                                                     : count * c.esize;
      if (c.coll == PL_COLL_ALL_REDUCE && R > 1) { /* windows shard differently: all of them */
        want = 0;
        for (uint64_t k = 0; k < R; k++) {
          uint64_t base, nk, per;
          pl_direct_window(count, c.esize, w, P, R, 0, k, &base, &nk, &per);
          want += (pl_ar_shard_at(per, nk, j + 1) - pl_ar_shard_at(per, nk, j)) * c.esize;
        }
      }
      EXPECT(covered[j] == want, "%s w%d rank %d: block %d staged %llu of %llu bytes", names[ci],
             w, s, j, (unsigned long long)covered[j], (unsigned long long)want);
    }
  }
  if (c.coll == PL_COLL_ALL_REDUCE) { /* the windows cover the vector */
    uint64_t sum = 0;
    for (uint64_t k = 0; k < R; k++) {
      uint64_t base, nk, per;
      pl_direct_window(count, c.esize, w, P, R, pl_ar_shard_per(count, c.esize, w), k, &base, &nk,
                       &per);
      EXPECT(base == sum && nk > 0, "AllReduce w%d: window %llu at %llu", w, (unsigned long long)k,
             (unsigned long long)base);
      sum += nk;
    }
    EXPECT(sum == count, "AllReduce w%d: windows cover %llu of %llu", w, (unsigned long long)sum,
           (unsigned long long)count);
  }
  free(h.owner);
  free(h.round);
  free(h.src);
}

/* The split that 4603f50 replaced (each round's piece split on its own) breaks the one-CTA rule
 * whenever the last piece is smaller: the model must see it. */
static int old_split_races(void) {
  const uint64_t sl = 4096, g = 3, b_last = 1000;
  for (uint64_t q = 0; q < g; q++) {
    uint64_t lo, hi, flo, fhi;
    pl_direct_split(b_last, q, g, &lo, &hi);
    pl_direct_split(sl, q, g, &flo, &fhi);
    if (hi > lo && (lo < flo || hi > fhi)) return 1;
  }
  return 0;
}

/* ReduceScatterV's spread cuts one row of blocks (the shards): its grid (direct_plan.h). */
static pl_grid_t one_row(const uint64_t **row, uint64_t *tot, const uint64_t *counts, int w) {
  *row = counts;
  *tot = 0;
  for (int j = 0; j < w; j++) *tot += counts[j];
  pl_grid_t g = {row, tot, 0, 1, w};
  return g;
}

/* The spread's cuts (pl_direct_spread_cut): the Q parts partition the concatenation in order,
 * each cut within v elements of q T / Q, and every cut inside a block sits a multiple of v
 * elements from the block's start. */
static void check_cuts(const pl_grid_t *g, uint64_t Q, uint64_t v, const char *what) {
  const uint64_t T = pl_grid_total(g);
  uint64_t prev = 0;
  EXPECT(pl_direct_spread_cut(g, 0, Q, v) == 0, "%s: part 0 starts at 0", what);
  EXPECT(pl_direct_spread_cut(g, Q, Q, v) == T, "%s: the last part ends at T", what);
  for (uint64_t q = 1; q <= Q; q++) {
    uint64_t c = pl_direct_spread_cut(g, q, Q, v), x = T / Q * q + T % Q * q / Q, st = 0;
    EXPECT(c >= prev, "%s: cut %llu (%llu) before cut %llu", what, (unsigned long long)q,
           (unsigned long long)c, (unsigned long long)(q - 1));
    EXPECT(c <= x && x - c < v, "%s: cut %llu at %llu, %llu from q T / Q", what,
           (unsigned long long)q, (unsigned long long)c, (unsigned long long)(x - c));
    int inside = q == Q;
    for (int i = 0; i < g->nrows && !inside; i++)
      for (int j = 0; j < g->cols && !inside; st += g->rows[i][g->off + (uint64_t)j++]) {
        const uint64_t n = g->rows[i][g->off + (uint64_t)j];
        if (c >= st && c < st + n) inside = (c - st) % v == 0;
        else if (c == st) inside = 1;
      }
    EXPECT(inside, "%s: cut %llu (%llu) not at a multiple of %llu in its block", what,
           (unsigned long long)q, (unsigned long long)c, (unsigned long long)v);
    prev = c;
  }
}

static void spread(int w, uint64_t v, int zeros) {
  uint64_t counts[PL_MAX_WORLD], tot;
  const uint64_t *row;
  for (int j = 0; j < w; j++)
    counts[j] = zeros && rnd(3) == 0 ? 0 : rnd(4) == 0 ? rnd(8) : rnd(1u << (4 + rnd(16)));
  pl_grid_t g = one_row(&row, &tot, counts, w);
  check_cuts(&g, (uint64_t)w, v, "spread");
}

/* The spread's loops as direct.cu runs them (pl_direct_spread: rank r's slice, each shard's piece
 * [g0, g1) at off bytes into the shard, split among g CTAs): every element of every shard is
 * reduced by exactly one (rank, CTA), every piece starts 16 bytes into its shard times k, every
 * CTA part is whole elements. */
static void spread_cover(int w, uint64_t es, uint64_t g) {
  uint64_t counts[PL_MAX_WORLD], T = 0, v = 16 / es, tot;
  const uint64_t *row;
  for (int j = 0; j < w; j++) {
    counts[j] = rnd(4) == 0 ? 0 : rnd(2) ? rnd(40) : rnd(6000);
    T += counts[j];
  }
  const pl_grid_t gr = one_row(&row, &tot, counts, w);
  unsigned char *hit = calloc(T + 1, 1);
  if (!hit) return;
  for (int r = 0; r < w; r++) {
    const uint64_t a0 = pl_direct_spread_cut(&gr, (uint64_t)r, (uint64_t)w, v);
    const uint64_t a1 = pl_direct_spread_cut(&gr, (uint64_t)r + 1, (uint64_t)w, v);
    uint64_t st = 0, g0, g1;
    for (int j = 0; j < w; st += counts[j++]) {
      if (!pl_direct_spread_piece(a0, a1, st, counts[j], &g0, &g1)) continue;
      const uint64_t off = (g0 - st) * es;
      EXPECT(off % 16 == 0, "spread: piece of shard %d at byte %llu", j, (unsigned long long)off);
      for (uint64_t c = 0; c < g; c++) {
        uint64_t lo, hi;
        pl_direct_split((g1 - g0) * es, c, g, &lo, &hi);
        EXPECT(lo % es == 0 && hi % es == 0, "spread: CTA part not whole elements");
        for (uint64_t b = lo; b < hi; b += es) hit[g0 + b / es]++;
      }
    }
  }
  for (uint64_t i = 0; i < T; i++)
    EXPECT(hit[i] == 1, "spread: element %llu of %llu reduced %d times (world %d, %llu CTAs)",
           (unsigned long long)i, (unsigned long long)T, hit[i], w, (unsigned long long)g);
  free(hit);
}

/* AllToAllV's spread as direct.cu runs it (pl_direct_a2av_spread): rows are headers (rank s's
 * sendcounts at words PL_HDR_FIXED.., its sdispls after them), the flat grid is made from them in
 * pl_flat_step's two steps, and every part of rank r (fixed: r G + c of world G; the queue: r NQ
 * + i of world NQ, NQ from a piece size of its own) is walked with pl_flat_next, each piece
 * copied from s's input at sd[b] into d's output at rd[b], as pl_direct_a2av_take finds them.
 * The flat cuts equal the grid's (pl_direct_spread_cut, an independent walk of the header rows);
 * every element of every block is copied by exactly one (rank, part); every element of every
 * rank's output (packed: its recvcounts' prefix sums) is written exactly once, from the block
 * element that belongs there; every piece starts a multiple of 16 bytes into its block. */
static void a2av_spread_cover(int w, uint64_t es, uint64_t G, int queue) {
  const uint64_t hw = pl_hdr_words(w), v = 16 / es;
  const int nb = w * w;
  uint64_t *h = calloc((size_t)(w * hw), sizeof *h), tot[PL_MAX_WORLD], out[PL_MAX_WORLD];
  uint64_t st[PL_DIRECT_FLAT * PL_DIRECT_FLAT + 1], sd[PL_DIRECT_FLAT * PL_DIRECT_FLAT],
      rd[PL_DIRECT_FLAT * PL_DIRECT_FLAT], ftot[PL_DIRECT_FLAT];
  const uint64_t *rows[PL_MAX_WORLD];
  if (!h) return;
  for (int s = 0; s < w; s++) { /* sendcounts, then sdispls: the blocks in a random order */
    uint64_t *hs = h + (uint64_t)s * hw, at = 0;
    int perm[PL_MAX_WORLD];
    for (int d = 0; d < w; d++) perm[d] = d;
    for (int d = w - 1; d > 0; d--) {
      int k = (int)rnd((uint64_t)d + 1), t = perm[d];
      perm[d] = perm[k];
      perm[k] = t;
    }
    for (int d = 0; d < w; d++)
      hs[PL_HDR_FIXED + d] = rnd(4) == 0 ? 0 : rnd(2) ? rnd(40) : rnd(3000);
    for (int k = 0; k < w; k++) {
      hs[PL_HDR_FIXED + w + perm[k]] = at;
      at += hs[PL_HDR_FIXED + perm[k]] + rnd(3);
    }
    rows[s] = hs;
    tot[s] = 0;
    for (int d = 0; d < w; d++) tot[s] += hs[PL_HDR_FIXED + d];
  }
  for (int d = 0; d < w; d++) {
    out[d] = 0;
    for (int s = 0; s < w; s++) out[d] += rows[s][PL_HDR_FIXED + d];
  }
  for (int b = 0; b < nb; b++) { /* as the kernel's threads b load them, then its two steps */
    st[b] = rows[b / w][PL_HDR_FIXED + b % w];
    sd[b] = rows[b / w][PL_HDR_FIXED + w + b % w];
  }
  for (int t = 0; t < 2 * w; t++) pl_flat_step(st, rd, ftot, w, 0, t);
  for (int t = w - 1; t >= 0; t--) pl_flat_step(st, rd, ftot, w, 1, t);
  const pl_grid_t g = {rows, tot, PL_HDR_FIXED, w, w};
  const uint64_t T = pl_grid_total(&g);
  check_cuts(&g, (uint64_t)w * G, v, "a2av spread");
  EXPECT(st[nb] == T, "a2av spread: flat total %llu, want %llu", (unsigned long long)st[nb],
         (unsigned long long)T);
  for (uint64_t Q = 1; Q <= (uint64_t)w * G; Q += 1 + rnd(5))
    for (uint64_t q = 0; q <= Q; q++)
      EXPECT(pl_flat_cut(st, nb, q, Q, v) == pl_direct_spread_cut(&g, q, Q, v),
             "a2av spread: flat cut %llu of %llu at %llu, the grid's at %llu", (unsigned long long)q,
             (unsigned long long)Q, (unsigned long long)pl_flat_cut(st, nb, q, Q, v),
             (unsigned long long)pl_direct_spread_cut(&g, q, Q, v));
  /* each block element's mark, and each output element's source: (s, its element in s's input) */
  uint64_t obase[PL_MAX_WORLD + 1] = {0};
  for (int d = 0; d < w; d++) obase[d + 1] = obase[d] + out[d];
  unsigned char *hit = calloc(T + 1, 1), *ohit = calloc(obase[w] + 1, 1);
  uint64_t *osrc = calloc(obase[w] + 1, sizeof *osrc);
  if (!hit || !ohit || !osrc) goto done;
  for (int r = 0; r < w; r++) {
    /* with the piece queue (queue: some ranks, at random, each with a piece size of its own),
     * rank r's CTAs take parts r NQ + i of world NQ instead: its share is still cut(r, world)..
     * cut(r + 1, world) */
    const int qr = queue && rnd(2);
    uint64_t NQ = 0;
    if (qr) {
      const uint64_t dq = 16 * (1 + rnd(300));
      NQ = pl_flat_nparts(st, nb, r, w, v, es, dq);
    }
    const uint64_t np = qr ? NQ : G, Q = (uint64_t)w * (np ? np : 1);
    for (uint64_t c = 0; c < np; c++) {
      const uint64_t q = (uint64_t)r * np + c;
      uint64_t x0, x1, g1;
      int b;
      pl_flat_part(st, nb, q, Q, v, &x0, &x1, &b);
      for (uint64_t x = x0; pl_flat_next(st, nb, x1, &b, x, &g1); x = g1) {
        const int s = b / w, d = b % w;
        const uint64_t b0 = st[b];
        EXPECT(x >= b0 && g1 <= st[b + 1] && g1 <= x1 && g1 > x, "a2av spread: piece outside its part");
        EXPECT((x - b0) * es % 16 == 0, "a2av spread: piece of block (%d, %d) at byte %llu", s, d,
               (unsigned long long)((x - b0) * es));
        for (uint64_t e = x; e < g1; e++) {
          hit[e]++;
          const uint64_t o = obase[d] + rd[b] + (e - b0);
          EXPECT(rd[b] + (e - b0) < out[d], "a2av spread: write past rank %d's output", d);
          if (rd[b] + (e - b0) >= out[d]) continue;
          ohit[o]++;
          osrc[o] = (uint64_t)s << 40 | (sd[b] + (e - b0));
        }
      }
    }
  }
  for (uint64_t e = 0; e < T; e++)
    EXPECT(hit[e] == 1, "a2av spread: element %llu of %llu copied %d times (world %d, %llu CTAs)",
           (unsigned long long)e, (unsigned long long)T, hit[e], w, (unsigned long long)G);
  /* the reference: rank d's output, packed, holds rank s's block for d at s's sdispls[d] */
  for (int d = 0; d < w; d++) {
    uint64_t at = 0;
    for (int s = 0; s < w; s++)
      for (uint64_t e = 0; e < rows[s][PL_HDR_FIXED + d]; e++, at++) {
        const uint64_t o = obase[d] + at, want = (uint64_t)s << 40 | (rows[s][PL_HDR_FIXED + w + d] + e);
        EXPECT(ohit[o] == 1 && osrc[o] == want,
               "a2av spread: rank %d's output element %llu written %d times, from %llx (want %llx)",
               d, (unsigned long long)at, ohit[o], (unsigned long long)osrc[o],
               (unsigned long long)want);
      }
  }
done:
  free(hit);
  free(ohit);
  free(osrc);
  free(h);
}

/* The piece queue (pl_direct_qpieces, pl_direct_qrange, pl_direct_qpiece): n blocks of random
 * bytes (some empty), destinations a bytes past the alignment, QB-byte pieces. Every byte of every
 * block is in exactly one piece; every cut but a block's start is at a multiple of QB of its
 * destination; the pieces come level by level, and two consecutive pieces of one block only where
 * no other block has a piece at that level; past the last piece, none. */
static void queue_cover(int n, uint64_t QB, uint32_t am) {
  uint64_t b[PL_MAX_WORLD], a[PL_MAX_WORLD], m[PL_MAX_WORLD], tot = 0, N = 0;
  unsigned char *hit[PL_MAX_WORLD];
  for (int j = 0; j < n; j++) {
    b[j] = rnd(4) == 0 ? 0 : rnd(2) ? 1 + rnd(3 * QB) : 1 + rnd(40 * QB);
    a[j] = rnd(am);
    m[j] = pl_direct_qpieces(b[j], a[j], QB);
    hit[j] = calloc(b[j] + 1, 1);
    tot += b[j];
    N += m[j];
  }
  uint64_t seen = 0, lastk = 0;
  int lastj = -1;
  for (uint64_t i = 0; i < N; i++) {
    int j = -1;
    uint64_t k = 0, lo, hi;
    EXPECT(pl_direct_qpiece(m, n, i, &j, &k), "queue: piece %llu of %llu missing",
           (unsigned long long)i, (unsigned long long)N);
    if (j < 0 || j >= n || k >= m[j]) {
      EXPECT(0, "queue: piece %llu is block %d's %llu", (unsigned long long)i, j,
             (unsigned long long)k);
      continue;
    }
    pl_direct_qrange(b[j], a[j], QB, k, &lo, &hi);
    EXPECT(lo < hi && hi <= b[j], "queue: block %d piece %llu is [%llu, %llu) of %llu", j,
           (unsigned long long)k, (unsigned long long)lo, (unsigned long long)hi,
           (unsigned long long)b[j]);
    EXPECT(lo == 0 || (lo + a[j]) % QB == 0, "queue: cut at %llu, destination %llu past the line",
           (unsigned long long)lo, (unsigned long long)a[j]);
    EXPECT(i == 0 || k >= lastk, "queue: piece %llu goes back a level", (unsigned long long)i);
    if (i && j == lastj) {
      int others = 0;
      for (int q = 0; q < n; q++) others += q != j && m[q] > k;
      EXPECT(!others, "queue: pieces %llu, %llu both of block %d", (unsigned long long)i - 1,
             (unsigned long long)i, j);
    }
    for (uint64_t x = lo; x < hi && hi <= b[j]; x++) hit[j][x]++;
    seen += hi > lo ? hi - lo : 0;
    lastj = j;
    lastk = k;
  }
  int j;
  uint64_t k;
  EXPECT(!pl_direct_qpiece(m, n, N, &j, &k) && !pl_direct_qpiece(m, n, N + rnd(100), &j, &k),
         "queue: a piece past the last");
  EXPECT(seen == tot, "queue: %llu bytes in pieces, %llu in blocks", (unsigned long long)seen,
         (unsigned long long)tot);
  for (int q = 0; q < n; q++) {
    for (uint64_t x = 0; x < b[q]; x++)
      if (hit[q][x] != 1) {
        EXPECT(0, "queue: block %d byte %llu in %d pieces", q, (unsigned long long)x, hit[q][x]);
        break;
      }
    free(hit[q]);
  }
}

int main(void) {
  const int worlds[] = {2, 3, 4, 5, 8};
  const int grids[] = {1, 3, 7, 64};
  for (int ci = 0; ci < 7; ci++)
    for (int wi = 0; wi < 5; wi++)
      for (int gi = 0; gi < 4; gi++)
        for (int t = 0; t < 4; t++) {
          int w = worlds[wi];
          uint64_t half = (uint64_t)(1 + rnd(8)) * 512 * (uint64_t)w + 64 * rnd(64);
          uint64_t count = 1 + rnd(t < 2 ? half / 2 : 6 * half); /* one round, several */
          one(ci, w, grids[gi], half, count, ci >= 4 && (t & 1));
        }
  EXPECT(old_split_races(), "the model does not see the replaced split's race");
  for (int t = 0; t < 20000; t++)
    spread(1 + (int)rnd(PL_MAX_WORLD), (uint64_t)1 << rnd(5), t & 1);
  for (int t = 0; t < 3000; t++)
    spread_cover(1 + (int)rnd(t < 2000 ? 8 : PL_MAX_WORLD), (uint64_t)1 << rnd(4), 1 + rnd(70));
  for (int t = 0; t < 400; t++)
    a2av_spread_cover(1 + (int)rnd(t < 300 ? 8 : PL_DIRECT_FLAT), (uint64_t)1 << rnd(4),
                      1 + rnd(t < 300 ? 70 : 8), t & 1);
  for (int t = 0; t < 3000; t++)
    queue_cover(1 + (int)rnd(PL_MAX_WORLD), 4096 * (1 + rnd(4)), rnd(2) ? 128 : 16);
  printf("test_direct: %s (%lld checks, %lld failures)\n", pl_failures ? "FAIL" : "ok", pl_checks, pl_failures);
  return pl_failures != 0;
}
