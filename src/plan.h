/* plan.h -- the SNAC plan: regime per pair, chunking, slots, groups. A pure function of the call's
 * locally known, agreed arguments (never of what only one rank knows), so that every rank derives
 * the same plan; see docs/snac.md. Shared by host and device. */
#ifndef PL_PLAN_H
#define PL_PLAN_H

#include "layout.h"

/* Header: PL_HDR_FIXED words plus three arrays of `world` words (V counts). One packet per word. */
#define PL_HDR_FIXED 8
/* The tiny kernel's largest block: its words times its CTAs stay below 2^32 (lean.cu) */
#define PL_TINY_MAX_BYTES (1u << 20)
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
  int ar_twoshot;      /* AllReduce in packets: reduce-scatter pushed (window region 1), every
                          owner reduces its shard and pushes it back (region 2) */
  uint64_t ar_region2; /* two-shot: packet index of region 2 in a source's data window */
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
  uint64_t twoshot_max; /* largest two-shot (packet) AllReduce */
  uint64_t packet_bytes; /* packet window per source and parity (bytes) */
  uint64_t chunk_max;   /* largest K */
  uint64_t lanes;       /* L in 1..PL_MAX_LANES: pipelines per role (threads / CTAs) */
  uint64_t staging_bytes; /* staging memory per rank (both halves), unless the config gives it */
  uint64_t threads;     /* CUDA: threads per CTA of a call that stages (local: need not agree) */
  uint64_t lat_threads; /* CUDA: threads per CTA of a call that stages nothing (packets only) */
  uint64_t lane_bytes;  /* a call of B agreed bytes runs ceil(B / lane_bytes) lanes, at most
                           lanes (0: always lanes); V collectives always run lanes */
  uint64_t backoff_ns;  /* CUDA: sleep between packet polls (local) */
  uint64_t lean;        /* CUDA: calls that move only packets run the lean packet kernel (lean.cu);
                           2: except the V collectives */
  uint64_t lean_pkts;   /* CUDA lean kernel: received packets per thread before adding a CTA */
  uint64_t lean_ctas;   /* CUDA lean kernel: most CTAs of a call */
  uint64_t tiny;        /* CUDA: the lean kernel's small calls run the tiny kernels (lean.cu:
                           one-shot and two-shot AllReduce, ReduceScatter, AllGather, AllToAll,
                           the V collectives) */
  uint64_t tiny_max;    /* CUDA tiny kernel: largest block (bytes; at most PL_TINY_MAX_BYTES) */
  uint64_t tiny_words;  /* CUDA tiny kernels: 8-byte words of the largest block per thread before
                           adding a CTA (up to lean_ctas CTAs) */
  uint64_t direct;      /* CUDA: calls on purlin_mem_alloc buffers above the packet sizes run the
                           direct kernel (direct.cu) */
  uint64_t direct_min;  /* CUDA direct kernel: only calls of at least this many bytes (the
                           nccl-tests size: AllReduce's vector, the gathers' whole output) */
  uint64_t direct_ctas; /* CUDA direct kernel: most CTAs of a call (1..PL_DIRECT_MAX_CTAS) */
  uint64_t direct_cta_bytes; /* CUDA direct kernel: a CTA per this many bytes of the call */
  uint64_t direct_unroll; /* CUDA direct kernel, gathers: 16-byte loads in flight per thread (4 or
                             8; local) */
  uint64_t direct_red_batch; /* CUDA direct kernel, 2-byte reductions (bf16, f16): sources whose
                                loads are in flight together (4 or 8; local) */
  uint64_t direct_stream; /* CUDA direct kernel, gathers: evict-first loads and stores (local) */
  uint64_t direct_queue; /* CUDA direct kernel, one round of the gathers: the CTAs take pieces of
                            direct_queue_bytes from a per-rank counter (else each copies a fixed
                            part of every block; local) */
  uint64_t direct_queue_bytes; /* its pieces (a multiple of 4 KiB) */
  uint64_t direct_align; /* CUDA direct kernel, gathers: each copy's stores aligned to 16 or 128
                            bytes (local) */
  uint64_t direct_push; /* CUDA direct kernel, AllReduce, every output peer-mapped: each rank
                           stores its reduced shard into every output (else every rank reads
                           every peer's reduced shard after a flag exchange); ReduceScatterV,
                           every input and output peer-mapped: each rank reduces a 1/world
                           slice of the shards into their owners' outputs; AllToAllV likewise,
                           with packed rdispls: each rank copies a 1/world part of all blocks
                           (per rank: any rank's 0 turns it off, by its header) */
  uint64_t direct_a2av; /* CUDA: an out-of-place AllToAllV with host counts whose blocks are not
                           all packets runs the direct kernel (else SNAC's), which exchanges
                           packets with the ranks whose blocks are (every rank must agree) */
} pl_tune_t;

/* The workspace's geometry, the same on both datapaths: control block (ctrl_size bytes, page
 * aligned), packet windows [2 parities][world sources] of pkt_bytes each, two staging halves. */
PL_HD void pl_ws_geom_make(pl_ws_geom_t *g, int world, uint64_t ctrl_size, uint64_t pkt_bytes,
                           uint64_t staging_bytes) {
  uint64_t minwin = (pl_hdr_words(world) + 64) * 16, page = 4095;
  g->ctrl_bytes = (ctrl_size + page) & ~page;
  g->pkt_win = pkt_bytes / 16 * 16;
  if (g->pkt_win < minwin) g->pkt_win = minwin;
  g->stg_half = staging_bytes / 2 / 64 * 64;
  uint64_t minhalf = ((uint64_t)world + 1) * 64 * 2;
  if (g->stg_half < minhalf) g->stg_half = minhalf;
  g->pkt_off = g->ctrl_bytes;
  g->stg_off = (g->pkt_off + 2 * (uint64_t)world * g->pkt_win + page) & ~page;
  g->total = (g->stg_off + 2 * g->stg_half + page) & ~page;
}

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
  /* Two-shot: region 1 holds my shard of the source's input, region 2 the source's reduced shard;
   * shard 0 is the largest (pl_ar_shard_begin). Regions start on 16-byte (2-packet) boundaries. */
  uint64_t sh_pk = c->coll == PL_COLL_ALL_REDUCE && c->world > 1
                       ? (pl_ar_shard_begin(c->count, c->esize, c->world, 1) * c->esize + 15) / 16 * 2
                       : 0;
  p->ar_region2 = sh_pk;
  p->ar_twoshot = c->coll == PL_COLL_ALL_REDUCE && !p->ar_oneshot && c->world > 1 &&
                  c->count * c->esize <= t->twoshot_max && 2 * sh_pk * 8 <= cap;
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
  /* Few lanes for small calls: every lane polls every header, and idle CTAs only add polling.
   * The size must be one every rank knows: the V collectives' is not (A2AV), or not on the host
   * before the kernel reads device counts, so they keep every lane. */
  if (t->lane_bytes && !pl_coll_is_v(c->coll)) {
    uint64_t b = c->count * c->esize * (c->coll == PL_COLL_ALL_REDUCE ? 1 : (uint64_t)c->world);
    uint64_t want = (b + t->lane_bytes - 1) / t->lane_bytes;
    if (want < 1) want = 1;
    if (want < (uint64_t)p->lanes) p->lanes = (int)want;
  }
}

PL_HD uint64_t pl_rounds(uint64_t bytes, uint64_t chunk) { return (bytes + chunk - 1) / chunk; }

/* Part l of L of a b-byte block that is not chunked (packet blocks, the self copy): [*lo, *hi),
 * 16-byte aligned (whole packet pairs), the last part takes the tail. SNAC's lanes and the lean
 * kernel's CTAs split the same way. */
PL_HD void pl_part(uint64_t b, uint64_t l, uint64_t L, uint64_t *lo, uint64_t *hi) {
  *lo = (b * l / L) & ~(uint64_t)15;
  *hi = l == L - 1 ? b : (b * (l + 1) / L) & ~(uint64_t)15;
}

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
