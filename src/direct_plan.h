/* direct_plan.h -- the direct kernel's arithmetic that the host plans with and the device runs
 * (src/cuda/direct.cu; docs/gpu.md, "The direct kernel"): the rounds of a call, the pieces of a
 * block per round, AllReduce's staging slots, and the split of a block among the CTAs. Pure (C11
 * and CUDA C), so that the unit tests check the same functions the kernel calls. */
#ifndef PL_DIRECT_PLAN_H
#define PL_DIRECT_PLAN_H

#include "layout.h"

/* A call runs in rounds of at most 2^PL_DIRECT_ROUND_BITS - 1 (pl_direct_plan) */
#define PL_DIRECT_ROUND_BITS 20

/* Rounds of P-byte pieces of a len-byte block (at least one). */
PL_HD uint64_t pl_direct_rounds(uint64_t len, uint64_t P) {
  return len ? (len + P - 1) / P : 1;
}

/* The rounds of a call (host counts; rcounts: the V collectives' recvcounts) with a staging half
 * of half bytes: *piece, the bytes of one block (AllReduce: of the vector) per round, so that what
 * a rank stages of a round fits the half (AllGather(V): one block, the half; AllToAll(V),
 * ReduceScatter(V): a slot per peer, half / world; AllReduce: a window of whole 64-byte shards);
 * *slot, the staging bytes of one block (shard) in a round; *rounds. Returns 0 when the half is
 * too small for it, or the rounds too many (the call runs SNAC's kernel). The same on every rank:
 * every rank knows these numbers. */
PL_HD int pl_direct_plan(const pl_call_t *c, const uint64_t *rcounts, uint64_t half,
                         uint64_t *piece, uint64_t *slot, uint64_t *rounds) {
  const uint64_t es = c->esize, w = (uint64_t)c->world;
  uint64_t P = half / 128 * 128, len = c->count * es;
  switch (c->coll) {
  case PL_COLL_ALL_REDUCE: P = half / (w * 64) * (w * 64); break; /* whole shards of 64 bytes */
  case PL_COLL_ALL_GATHER: break;
  case PL_COLL_ALL_TO_ALL:
  case PL_COLL_REDUCE_SCATTER: P = half / w / 128 * 128; break; /* a slot per peer */
  case PL_COLL_ALL_TO_ALL_V: /* a slot per peer; the rounds are the device's (pl_direct_rounds of
                                the largest block of any rank, from the headers) */
    P = half / w / 128 * 128;
    len = 0;
    break;
  case PL_COLL_ALL_GATHER_V:
  case PL_COLL_REDUCE_SCATTER_V:
    if (c->coll == PL_COLL_REDUCE_SCATTER_V) P = half / w / 128 * 128;
    len = 0;
    for (int d = 0; d < c->world; d++)
      if (rcounts[d] * es > len) len = rcounts[d] * es;
    break;
  default: return 0;
  }
  if (!P) return 0;
  uint64_t R = pl_direct_rounds(len, P);
  if (R >= ((uint64_t)1 << PL_DIRECT_ROUND_BITS)) return 0;
  *piece = P;
  *slot = c->coll == PL_COLL_ALL_REDUCE ? P / w : P;
  *rounds = R;
  return 1;
}

/* Bytes of round k's piece of a len-byte block (pieces of P bytes). */
PL_HD uint64_t pl_direct_piece(uint64_t len, uint64_t P, uint64_t k) {
  uint64_t lo = k * P;
  return len > lo ? (len - lo < P ? len - lo : P) : 0;
}

/* CTA c of g's bytes [*lo, *hi) of a b-byte block: 128-byte aligned (L2 lines), so that no CTA's
 * part shares a line with another's; the last CTA takes the tail. */
PL_HD void pl_direct_split(uint64_t b, uint64_t c, uint64_t g, uint64_t *lo, uint64_t *hi) {
  uint64_t l = (b * c / g) & ~(uint64_t)127, h = c == g - 1 ? b : (b * (c + 1) / g) & ~(uint64_t)127;
  *lo = l < b ? l : b;
  *hi = h < *lo ? *lo : h;
}

/* CTA c of g's part of a round's b-byte piece of a block whose staging slot holds sl bytes: with
 * several rounds, its part of the slot (the same bytes of the slot in every round, so a CTA
 * overwrites only what its peers' same CTA has read), clipped to the piece; with one, its part of
 * the piece. (Splitting each round's piece instead moved the parts in a smaller last round: a CTA
 * overwrote staging another CTA of a peer had not read yet; docs/tuning.md, finding 18.) */
PL_HD void pl_direct_rsplit(uint64_t rounds, uint64_t sl, uint64_t b, uint64_t c, uint64_t g,
                            uint64_t *lo, uint64_t *hi) {
  pl_direct_split(rounds > 1 ? sl : b, c, g, lo, hi);
  if (*hi > b) *hi = b;
  if (*lo > *hi) *lo = *hi;
}

/* The piece queue (PURLIN_DIRECT_QUEUE; direct.cu, pl_direct_queue): in a round of whole blocks,
 * a rank's CTAs take its reads one piece at a time from a counter, so that a CTA that the memory
 * serves faster takes more pieces and the CTAs end together (docs/tuning.md, finding 33). A
 * b-byte block whose destination lies a bytes past a multiple of the alignment is cut at its
 * destination's multiples of QB: piece 0 is bytes [0, QB - a), piece k [k QB - a, (k + 1) QB - a),
 * so that no two CTAs store into one line (a < QB). Its pieces: */
PL_HD uint64_t pl_direct_qpieces(uint64_t b, uint64_t a, uint64_t QB) {
  return b ? pl_direct_rounds(b + a, QB) : 0;
}

/* Piece k's bytes [*lo, *hi) of that block. */
PL_HD void pl_direct_qrange(uint64_t b, uint64_t a, uint64_t QB, uint64_t k, uint64_t *lo,
                            uint64_t *hi) {
  const uint64_t e = (k + 1) * QB - a;
  *lo = k ? k * QB - a : 0;
  *hi = e < b ? e : b;
}

/* Piece i of the queue over n blocks of m[j] pieces each (in the order the rank reads its peers),
 * level by level: level L holds piece L of every block of more than L pieces, in order, so that
 * consecutive pieces come from different peers (over NVLink, the reads spread over the links) and
 * there are sum m[j] in all. Sets the block *j and its piece *k; returns 0 past the last. */
PL_HD int pl_direct_qpiece(const uint64_t *m, int n, uint64_t i, int *j, uint64_t *k) {
  uint64_t lvl = 0;
  for (;;) {
    uint64_t nx = ~(uint64_t)0, c = 0;
    for (int q = 0; q < n; q++)
      if (m[q] > lvl) {
        c++;
        if (m[q] < nx) nx = m[q];
      }
    if (!c) return 0;
    if (i < (nx - lvl) * c) { /* levels lvl..nx-1 hold c pieces each */
      uint64_t t = i % c;
      *k = lvl + i / c;
      for (int q = 0; q < n; q++)
        if (m[q] > lvl && t-- == 0) {
          *j = q;
          return 1;
        }
    }
    i -= (nx - lvl) * c;
    lvl = nx;
  }
}

/* The spread over the ranks (direct.cu: ReduceScatterV's pl_direct_spread, AllToAllV's
 * pl_direct_a2av_spread) cuts the concatenation of a grid of blocks in row-major order: block (i, j),
 * i < nrows, j < cols, holds rows[i][off + j] elements; rtot[i] is the sum of row i (so that a cut
 * skips whole rows). ReduceScatterV: one row, the recvcounts (shard j). AllToAllV cuts its flat
 * grid (below) the same way; the unit test checks it against this one of header rows (row s: rank
 * s's sendcounts, block (s, d) what s sends d). */
typedef struct {
  const uint64_t *const *rows;
  const uint64_t *rtot;
  uint64_t off;
  int nrows, cols;
} pl_grid_t;

PL_HD uint64_t pl_grid_total(const pl_grid_t *g) {
  uint64_t T = 0;
  for (int i = 0; i < g->nrows; i++) T += g->rtot[i];
  return T;
}

/* Where part q of Q of the concatenation starts, in elements (q >= Q: the total T): floor(q T /
 * Q), moved down to a multiple of v elements from the start of the block it falls in (v: elements
 * per 16 bytes, so that a part's piece of a block starts 16-byte aligned where the block does).
 * Every part is within v elements of T / Q; the cuts never decrease with q; the same on every
 * rank (every rank knows every count). */
PL_HD uint64_t pl_direct_spread_cut(const pl_grid_t *g, uint64_t q, uint64_t Q, uint64_t v) {
  const uint64_t T = pl_grid_total(g);
  if (q >= Q) return T;
  const uint64_t x = T / Q * q + T % Q * q / Q;
  uint64_t st = 0;
  for (int i = 0; i < g->nrows; i++) {
    if (x >= st + g->rtot[i]) {
      st += g->rtot[i];
      continue;
    }
    for (int j = 0; j < g->cols; j++) {
      const uint64_t n = g->rows[i][g->off + (uint64_t)j];
      if (x < st + n) return st + (x - st) / v * v;
      st += n;
    }
  }
  return T;
}

/* The piece [*g0, *g1) of the shard at elements [st, st + n) of the concatenation that the slice
 * [a0, a1) holds; returns 0 when it holds none. */
PL_HD int pl_direct_spread_piece(uint64_t a0, uint64_t a1, uint64_t st, uint64_t n, uint64_t *g0,
                                 uint64_t *g1) {
  *g0 = a0 > st ? a0 : st;
  *g1 = a1 < st + n ? a1 : st + n;
  return *g1 > *g0;
}

/* AllToAllV's spread on a flat grid (direct.cu, pl_direct_a2av_spread), worlds up to
 * PL_DIRECT_FLAT: block b = s world + d (what rank s sends rank d, row-major) starts at element
 * st[b] of the concatenation (st[world^2] = T), at sd[b] of rank s's input (its sdispls[d]) and at
 * rd[b] of rank d's output (what ranks before s send d). In shared memory, so that a cut is a
 * binary search and a piece a few reads, where the grid's walk read the headers (finding 34). */
#define PL_DIRECT_FLAT 16

/* The tables from the counts (st[b] = block b's count, rd unset on entry), in two steps of
 * threads t < 2 world (step 0) and s < world (step 1), a barrier between: step 0, t < world: row
 * t's total into tot[t]; t >= world: column d = t - world's exclusive prefix into rd. Step 1: row
 * s's exclusive prefix in place, from the rows before it; the last row writes st[world^2] = T. */
PL_HD void pl_flat_step(uint64_t *st, uint64_t *rd, uint64_t *tot, int w, int step, int t) {
  uint64_t acc = 0;
  if (step == 0 && t < w) {
    for (int d = 0; d < w; d++) acc += st[t * w + d];
    tot[t] = acc;
  } else if (step == 0) {
    for (int s = 0, d = t - w; s < w; s++) {
      rd[s * w + d] = acc;
      acc += st[s * w + d];
    }
  } else {
    for (int s = 0; s < t; s++) acc += tot[s];
    for (int d = 0; d < w; d++) {
      const uint64_t n = st[t * w + d];
      st[t * w + d] = acc;
      acc += n;
    }
    if (t == w - 1) st[w * w] = acc;
  }
}

/* The block that holds element x < st[nb] of the concatenation: the last with st[b] <= x (it is
 * not empty: the next starts past x). */
PL_HD int pl_flat_block(const uint64_t *st, int nb, uint64_t x) {
  int lo = 0, hi = nb - 1;
  while (lo < hi) {
    const int m = (lo + hi + 1) / 2;
    if (st[m] <= x) lo = m;
    else hi = m - 1;
  }
  return lo;
}

/* pl_direct_spread_cut on the flat grid (the same cuts: the unit test compares them). */
PL_HD uint64_t pl_flat_cut(const uint64_t *st, int nb, uint64_t q, uint64_t Q, uint64_t v) {
  const uint64_t T = st[nb];
  if (q >= Q) return T;
  const uint64_t x = T / Q * q + T % Q * q / Q;
  if (x >= T) return T;
  const uint64_t b0 = st[pl_flat_block(st, nb, x)];
  return b0 + (x - b0) / v * v;
}

/* Part q of Q parts of the flat grid: its first element *g, its end *x1, and *b, the block that
 * holds *g (nb when the part is empty). */
PL_HD void pl_flat_part(const uint64_t *st, int nb, uint64_t q, uint64_t Q, uint64_t v,
                        uint64_t *g, uint64_t *x1, int *b) {
  *g = pl_flat_cut(st, nb, q, Q, v);
  *x1 = pl_flat_cut(st, nb, q + 1, Q, v);
  *b = *g < *x1 ? pl_flat_block(st, nb, *g) : nb;
}

/* The parts of about qb bytes (es-byte elements) of rank r's share (part r of world). */
PL_HD uint64_t pl_flat_nparts(const uint64_t *st, int nb, int r, int w, uint64_t v, uint64_t es,
                              uint64_t qb) {
  const uint64_t share = pl_flat_cut(st, nb, (uint64_t)r + 1, (uint64_t)w, v) -
                         pl_flat_cut(st, nb, (uint64_t)r, (uint64_t)w, v);
  return (share * es + qb - 1) / qb;
}

/* The next piece of a part that ends at x1, from its cursor *g (elements before it are done) and
 * *b (a block at or before *g's): the block *b that holds *g, and the piece's end *g1. Returns 0
 * when the part has no piece left. */
PL_HD int pl_flat_next(const uint64_t *st, int nb, uint64_t x1, int *b, uint64_t g, uint64_t *g1) {
  if (g >= x1) return 0;
  while (*b < nb && st[*b + 1] <= g) ++*b; /* past empty blocks and the ones before g */
  if (*b >= nb) return 0;
  *g1 = st[*b + 1] < x1 ? st[*b + 1] : x1;
  return 1;
}

/* AllReduce: the offset in a staging half of shard j of a window (its first element s0): the
 * window's own layout with one round, else a slot of piece / world bytes per shard (the same in
 * every round, the last window's smaller shards too). */
PL_HD uint64_t pl_direct_ar_off(uint64_t rounds, uint64_t piece, int world, uint64_t esize,
                                int j, uint64_t s0) {
  return rounds == 1 ? s0 * esize : (uint64_t)j * (piece / (uint64_t)world);
}

/* AllReduce, round k of a count-element call in windows of piece bytes: the window's first
 * element *base, its count *nk and its shard size *per (pl_ar_shard_per of the window, so one
 * window is the whole call's sharding; per1: the call's, for one round). */
PL_HD void pl_direct_window(uint64_t count, uint64_t esize, int world, uint64_t piece,
                            uint64_t rounds, uint64_t per1, uint64_t k, uint64_t *base,
                            uint64_t *nk, uint64_t *per) {
  const uint64_t M = piece / esize;
  *base = k * M;
  *nk = count - *base < M ? count - *base : M;
  *per = rounds == 1 ? per1 : pl_ar_shard_per(*nk, esize, world);
}

#endif
