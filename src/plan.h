/* plan.h -- the SNAC plan: regime per pair, chunking, slots, groups. A pure function of the call's
 * locally known, agreed arguments (never of what only one rank knows), so that every rank derives
 * the same plan; see docs/snac.md. Shared by host and device. */
#ifndef PL_PLAN_H
#define PL_PLAN_H

#include "layout.h"

/* Header: PL_HDR_FIXED words plus three arrays of `world` words (V counts). One packet per word. */
#define PL_HDR_FIXED 8
PL_HD uint64_t pl_hdr_words(int world) { return PL_HDR_FIXED + 3 * (uint64_t)world; }

/* Geometry of the symmetric workspace; identical on every rank (checked at init). */
typedef struct {
  uint64_t ctrl_bytes; /* pl_ctrl_t, page aligned */
  uint64_t pkt_win;    /* bytes of one packet window (one parity, one source) */
  uint64_t stg_half;   /* bytes of one staging half */
  uint64_t pkt_off, stg_off, total;
} pl_ws_geom_t;

typedef struct {
  uint64_t lat_max;    /* a block (or shard) of at most this many bytes travels as packets */
  int ar_oneshot;      /* AllReduce: push everything to everyone, everyone reduces all */
  uint64_t chunk;      /* K: bytes of one block per round (multiple of 64) */
  uint64_t nslots;     /* rounds resident in one staging half at once */
  uint64_t slot_bytes; /* bytes of one round in the staging half */
  uint64_t nblocks;    /* blocks per slot (1 for AG/AGV, world otherwise) */
  uint64_t seam_off;   /* AllReduce: offset of the reduced chunk (the seam) in a slot */
  int lanes;           /* L: main groups and stager groups of the call (pl_tune_t.lanes) */
} pl_plan_t;

/* Tunables that must agree across ranks; read once per communicator from the tuning table and the
 * environment (tune.c). */
typedef struct {
  uint64_t lat_max;     /* largest packet block, before the window's capacity limit */
  uint64_t oneshot_max; /* largest one-shot AllReduce */
  uint64_t chunk_max;   /* largest K */
  uint64_t lanes;       /* L in 1..PL_MAX_LANES: pipelines per role (threads / CTAs) */
  uint64_t staging_bytes; /* staging memory per rank (both halves), unless the config gives it */
} pl_tune_t;

/* Data bytes a window holds after the header. */
PL_HD uint64_t pl_pkt_capacity(const pl_ws_geom_t *g, int world) {
  uint64_t pkts = g->pkt_win / 16;
  uint64_t h = pl_hdr_words(world);
  return pkts > h ? (pkts - h) * 8 : 0;
}

PL_HD void pl_plan_make(const pl_call_t *c, const pl_ws_geom_t *g, const pl_tune_t *t,
                        pl_plan_t *p) {
  uint64_t cap = pl_pkt_capacity(g, c->world);
  p->lat_max = t->lat_max < cap ? t->lat_max : cap;
  p->ar_oneshot = c->coll == PL_COLL_ALL_REDUCE &&
                  c->count * c->esize <= (t->oneshot_max < cap ? t->oneshot_max : cap);
  p->nblocks = pl_gather_is_bcast(c->coll) ? 1 : (uint64_t)c->world;
  uint64_t per_slot = p->nblocks + (c->coll == PL_COLL_ALL_REDUCE ? 1 : 0);
  /* At least 4 slots in flight when the half allows it; K a multiple of 64 bytes. */
  uint64_t k = g->stg_half / (per_slot * 4) / 64 * 64;
  if (k > t->chunk_max) k = t->chunk_max / 64 * 64;
  if (k < 64) k = 64;
  p->chunk = k;
  p->slot_bytes = per_slot * k;
  p->nslots = g->stg_half / p->slot_bytes;
  p->seam_off = p->nblocks * k;
  p->lanes = t->lanes < 1 ? 1 : t->lanes > PL_MAX_LANES ? PL_MAX_LANES : (int)t->lanes;
}

PL_HD uint64_t pl_rounds(uint64_t bytes, uint64_t chunk) { return (bytes + chunk - 1) / chunk; }

/* Lane l of L owns bytes [pl_lane_lo, pl_lane_hi) of every K-byte chunk (of every block, every
 * round): 16-byte aligned, hence element aligned; a range may be empty (its lane still runs the
 * protocol). Clipped to n, the bytes of a short last chunk. */
PL_HD uint64_t pl_lane_lo(uint64_t K, int l, int L, uint64_t n) {
  uint64_t lo = (K * (uint64_t)l / (uint64_t)L) & ~(uint64_t)15;
  return lo < n ? lo : n;
}
PL_HD uint64_t pl_lane_hi(uint64_t K, int l, int L, uint64_t n) {
  uint64_t hi = l == L - 1 ? K : (K * (uint64_t)(l + 1) / (uint64_t)L) & ~(uint64_t)15;
  return hi < n ? hi : n;
}

#endif
