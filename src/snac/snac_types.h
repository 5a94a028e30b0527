/* snac_types.h -- SNAC's shared-memory structures (control block, packets), the call as SNAC sees
 * it, and the header exchanged at the start of every call. No atom needed: see snac.h. */
#ifndef PL_SNAC_TYPES_H
#define PL_SNAC_TYPES_H

#include "dtype.h"
#include "plan.h"

/* The control block of a rank's workspace. Flags in rank p's control block indexed by [lane l]
 * [source rank s] are written by lane l of s only. Each (lane, source)'s flags share one 64-byte
 * line. */
typedef struct {
  uint64_t stage;    /* s staged round k of call e: e*S + k + 1 */
  uint64_t seam;     /* AllReduce: s reduced round k of its shard into its seam */
  uint64_t cons_red; /* s consumed round k of its block in my staging */
  uint64_t cons_gat; /* s consumed round k of my seam */
  uint64_t done;     /* s finished reading my buffers directly (zero copy): e*S + 1 */
  uint64_t pad[3];
} pl_peer_flags_t;

/* Host doorbell of one lane of a rank: lane l's publishers add to bell, its sleepers wait on it
 * (main lane 0 rings every lane's: its header packets are awaited by all lanes). */
typedef struct {
  uint32_t bell, waiters;
  uint32_t pad[14];
} pl_door_t;

typedef struct {
  uint64_t abort;      /* != 0: the communicator is aborted (pl_abort_word) */
  uint64_t abort_info; /* which rank aborted it, why */
  uint64_t pad0[6];
  uint64_t err_epoch;  /* epoch + 1 of a call this rank gave up (mismatch, local error) */
  uint64_t pad1[7];
  pl_door_t door[PL_MAX_LANES]; /* host doorbells, per lane */
  pl_peer_flags_t peer[PL_MAX_LANES][PL_MAX_WORLD];
} pl_ctrl_t;

typedef struct {
  uint64_t data, flag;
} pl_pkt_t;

/* Bytes per segment of a packet reduction, and scratch buffers needed (one per rank). */
#ifndef PL_SNAC_SEG /* a datapath may set its own (CUDA: cuda_int.h) */
#define PL_SNAC_SEG 4096
#endif

/* Header word 0 and flags. */
#define PL_HDR_TAG 0x534eull /* "SN" */
#define PL_HDR_INPLACE 1u
#define PL_HDR_ZC_SEND 2u
#define PL_HDR_ZC_RECV 4u
/* CUDA: this rank runs the call in the direct kernel (direct.cu), which reads every peer's
 * purlin_mem_alloc buffers or its staging: every rank must (pl_snac_hdr_check), but in an
 * AllToAllV, where a rank whose blocks are all packets (pl_hdr_a2av_pkts) may run another kernel:
 * the direct kernel exchanges packets with it */
#define PL_HDR_DIRECT 8u
/* AllToAllV: this rank's rdispls are its recvcounts' exclusive prefix sums, wherever a count is not
 * 0 (the direct kernel's spread writes peers' blocks into its output from the counts alone:
 * direct.cu) */
#define PL_HDR_RPACKED 16u
/* CUDA direct kernel: this rank's tuning does not push (PURLIN_DIRECT_PUSH=0): no rank stores into
 * peers' outputs in this call (direct.cu, pl_direct_peers), so the decision is the headers' alone */
#define PL_HDR_NOPUSH 32u
/* AllGatherV, ReduceScatterV on the CUDA datapath: this rank's counts came from device memory
 * (opts.counts_on_device), so it runs SNAC's kernel: every rank or none (pl_snac_hdr_check), since
 * the others' tiny V kernel carries a signature in its data flags that SNAC's kernel does not
 * write (docs/gpu.md, "The tiny kernel"). AllToAllV mixes kernels by design and never sets it. */
#define PL_HDR_DCOUNTS 64u
/* AllToAllV: some block of this rank's, to or from another rank, is larger than a packet block
 * (pl_hdr_a2av_pkts). Beside a direct-kernel rank only a rank that runs the direct kernel may have
 * one (pl_hdr_mixbits): every kernel's check reads it from word 0 alone. */
#define PL_HDR_BIG 128u

/* A mismatch found in the headers: parameter, index (-1 for scalars), two ranks and their values. */
typedef struct {
  const char *param;
  int index, rank_a, rank_b;
  uint64_t val_a, val_b;
} pl_mismatch_t;

/* One call as SNAC sees it. Filled by the datapath; `hdr` points to world * pl_hdr_words words. */
typedef struct {
  pl_call_t c;
  pl_plan_t plan;
  pl_ws_geom_t geom;
  uint64_t epoch;
  const char *send;
  char *recv;
  int in_place;
  int zc_send, zc_recv;              /* this rank's buffers may be read directly by peers */
  uint64_t sym_send[2], sym_recv[2]; /* (id, offset) of those buffers */
  char *ws[PL_MAX_WORLD];            /* every rank's workspace, mapped here */
  uint64_t *hdr;                     /* headers received, [world][pl_hdr_words(world)] */
  pl_mismatch_t mismatch;
  int err_peer;                      /* the rank a failed wait was waiting for */
  int lane;                          /* this group's lane, 0..plan.lanes-1 */
} pl_snac_t;

PL_HD pl_ctrl_t *pl_snac_ctrl(const pl_snac_t *x, int r) { return (pl_ctrl_t *)x->ws[r]; }
/* This lane's flags, in rank r's control block, written by source s. */
PL_HD pl_peer_flags_t *pl_snac_fl(const pl_snac_t *x, int r, int s) {
  return &pl_snac_ctrl(x, r)->peer[x->lane][s];
}
/* This lane's part [*lo, *hi) of a chunk of n bytes (n <= K). */
PL_HD void pl_snac_lane(const pl_snac_t *x, uint64_t n, uint64_t *lo, uint64_t *hi) {
  *lo = pl_lane_lo(x->plan.chunk, x->lane, x->plan.lanes, n);
  *hi = pl_lane_hi(x->plan.chunk, x->lane, x->plan.lanes, n);
}
PL_HD uint64_t pl_snac_val(const pl_snac_t *x, uint64_t step) {
  return x->epoch * PL_EPOCH_STRIDE + step + 1;
}
/* Packet window of source s in rank r's workspace, for this call's parity. */
PL_HD pl_pkt_t *pl_snac_win(const pl_snac_t *x, int r, int s) {
  uint64_t parity = x->epoch & 1;
  return (pl_pkt_t *)(x->ws[r] + x->geom.pkt_off +
                      (parity * (uint64_t)x->c.world + (uint64_t)s) * x->geom.pkt_win);
}
PL_HD pl_pkt_t *pl_snac_win_data(const pl_snac_t *x, int r, int s) {
  return pl_snac_win(x, r, s) + pl_hdr_words(x->c.world);
}
/* Slot of round k in rank r's staging half of this call. */
PL_HD char *pl_snac_slot(const pl_snac_t *x, int r, uint64_t k) {
  uint64_t parity = x->epoch & 1;
  return x->ws[r] + x->geom.stg_off + parity * x->geom.stg_half +
         (k % x->plan.nslots) * x->plan.slot_bytes;
}
PL_HD uint64_t *pl_snac_hdr(const pl_snac_t *x, int s) {
  return x->hdr + (uint64_t)s * pl_hdr_words(x->c.world);
}
PL_HD uint64_t pl_snac_flag_val(uint64_t f) { return f; }

/* Does the pair travel as packets? Both ends decide from numbers both know. */
PL_HD int pl_snac_gather_lat(const pl_snac_t *x, uint64_t bytes) {
  return bytes <= x->plan.lat_max;
}
PL_HD int pl_snac_reduce_lat(const pl_snac_t *x, int d) {
  if (x->c.coll == PL_COLL_ALL_REDUCE) return x->plan.ar_oneshot || x->plan.ar_twoshot;
  return pl_shard_bytes(&x->c, d) <= x->plan.lat_max;
}

/* ---- header ---------------------------------------------------------------------------------- */

/* Header word 0: tag, collective, dtype, op, mode, flags (PL_HDR_*). */
PL_HD uint64_t pl_hdr_word0(const pl_call_t *c, uint64_t flags) {
  return PL_HDR_TAG | (uint64_t)c->coll << 16 | (uint64_t)c->dtype << 24 | (uint64_t)c->op << 32 |
         (uint64_t)c->mode << 40 | flags << 48;
}

/* Header word PL_HDR_FIXED + i, i in [0, 3 world): the V counts (AGV, RSV: recvcounts at [0, w);
 * A2AV: sendcounts at [0, w), recvcounts at [2w, 3w); RSV, A2AV: sdispls at [w, 2w), read by zero
 * copy), 0 elsewhere. Shared by both kernels' headers (the lean kernel pushes it word by word). */
PL_HD uint64_t pl_hdr_vword(const pl_call_t *c, int i) {
  const int w = c->world, k = i >= 2 * w ? 2 : i >= w ? 1 : 0, d = i - k * w; /* (no division) */
  switch (c->coll) {
  case PL_COLL_ALL_GATHER_V: return k == 0 ? c->rcounts[d] : 0;
  case PL_COLL_REDUCE_SCATTER_V: return k == 0 ? c->rcounts[d] : k == 1 ? c->sdispls[d] : 0;
  case PL_COLL_ALL_TO_ALL_V: return k == 0 ? c->scounts[d] : k == 1 ? c->sdispls[d] : c->rcounts[d];
  default: return 0;
  }
}

/* AllToAllV: are rank q's blocks to and from every other rank all packets (at most lat bytes of
 * es-byte elements), from its header h? Such a rank runs the lean or tiny kernel (pl_lean_takes:
 * the same rule), or SNAC's, which sends every block of at most lat bytes as packets too
 * (pl_snac_gather_lat), so a direct-kernel rank exchanges packets with it (direct.cu). */
PL_HD int pl_hdr_a2av_pkts(const uint64_t *h, int w, int q, uint64_t es, uint64_t lat) {
  for (int d = 0; d < w; d++)
    if (d != q && (h[PL_HDR_FIXED + d] * es > lat || h[PL_HDR_FIXED + 2 * w + d] * es > lat))
      return 0;
  return 1;
}

/* AllToAllV mixes kernels: bit 0, the rank of header word 0 h0 runs the direct kernel; bit 1, it
 * does not and has a block larger than a packet block (PL_HDR_BIG). A call whose ranks' bits
 * together make 3 is a MISMATCH ("direct kernel"): the direct kernel exchanges only packets with
 * the ranks that run another kernel. */
PL_HD unsigned pl_hdr_mixbits(uint64_t h0) {
  const uint64_t f = h0 >> 48;
  return (f & PL_HDR_DIRECT) ? 1u : (f & PL_HDR_BIG) ? 2u : 0u;
}

PL_HD void pl_snac_hdr_build(const pl_snac_t *x, uint64_t *h) {
  const pl_call_t *c = &x->c;
  int w = c->world;
  uint64_t flags = (x->in_place ? PL_HDR_INPLACE : 0) | (x->zc_send ? PL_HDR_ZC_SEND : 0) |
                   (x->zc_recv ? PL_HDR_ZC_RECV : 0) |
                   (c->counts_dev && (c->coll == PL_COLL_ALL_GATHER_V ||
                                      c->coll == PL_COLL_REDUCE_SCATTER_V)
                        ? PL_HDR_DCOUNTS
                        : 0);
  if (c->coll == PL_COLL_ALL_TO_ALL_V && c->rdispls && c->rcounts) {
    uint64_t p = 0;
    int packed = 1;
    for (int i = 0; i < w; p += c->rcounts[i++]) packed &= !c->rcounts[i] || c->rdispls[i] == p;
    if (packed) flags |= PL_HDR_RPACKED;
  }
  h[0] = pl_hdr_word0(c, flags);
  h[1] = c->count;
  h[2] = x->sym_send[0];
  h[3] = x->sym_send[1];
  h[4] = x->sym_recv[0];
  h[5] = x->sym_recv[1];
  h[6] = (uint64_t)w;
  h[7] = 0;
  for (int i = 0; i < 3 * w; i++) h[PL_HDR_FIXED + i] = pl_hdr_vword(c, i);
  if (c->coll == PL_COLL_ALL_TO_ALL_V &&
      !pl_hdr_a2av_pkts(h, w, c->rank, c->esize, x->plan.lat_max))
    h[0] |= (uint64_t)PL_HDR_BIG << 48;
}

PL_HD int pl_snac_mis(pl_snac_t *x, const char *param, int index, int ra, uint64_t va, int rb,
                      uint64_t vb) {
  x->mismatch.param = param;
  x->mismatch.index = index;
  x->mismatch.rank_a = ra;
  x->mismatch.val_a = va;
  x->mismatch.rank_b = rb;
  x->mismatch.val_b = vb;
  return PURLIN_ERR_MISMATCH;
}

PL_HD const char *pl_snac_field_name(int f) {
  return f == 0 ? "collective" : f == 1 ? "dtype" : f == 2 ? "op" : "mode";
}

/* The verdict is a function of all headers, which every rank holds: every rank reaches the same
 * verdict, so all return MISMATCH together and no rank waits for data that will not come. */
PL_HD int pl_snac_hdr_check(pl_snac_t *x) {
  int w = x->c.world, coll;
  const uint64_t *h0 = pl_snac_hdr(x, 0);
  for (int s = 0; s < w; s++) {
    const uint64_t *h = pl_snac_hdr(x, s);
    if ((h[0] & 0xffff) != PL_HDR_TAG || h[6] != (uint64_t)w)
      return pl_snac_mis(x, "header", -1, 0, h0[0], s, h[0]);
    for (int f = 0; f < 4; f++) {
      uint64_t a = h0[0] >> (16 + 8 * f) & 0xff, b = h[0] >> (16 + 8 * f) & 0xff;
      if (a != b) return pl_snac_mis(x, pl_snac_field_name(f), -1, 0, a, s, b);
    }
  }
  coll = (int)(h0[0] >> 16 & 0xff);
  for (int s = 0; s < w; s++) {
    const uint64_t *h = pl_snac_hdr(x, s);
    if (!pl_coll_is_v(coll) && h[1] != h0[1]) return pl_snac_mis(x, "count", -1, 0, h0[1], s, h[1]);
    if (coll == PL_COLL_ALL_GATHER_V || coll == PL_COLL_REDUCE_SCATTER_V) {
      for (int i = 0; i < w; i++)
        if (h[PL_HDR_FIXED + i] != h0[PL_HDR_FIXED + i])
          return pl_snac_mis(x, "recvcounts", i, 0, h0[PL_HDR_FIXED + i], s, h[PL_HDR_FIXED + i]);
    }
    if (coll == PL_COLL_ALL_GATHER_V && h[1] != h0[PL_HDR_FIXED + s])
      return pl_snac_mis(x, "sendcount", s, 0, h0[PL_HDR_FIXED + s], s, h[1]);
  }
  if (coll == PL_COLL_ALL_TO_ALL_V) {
    for (int s = 0; s < w; s++)
      for (int d = 0; d < w; d++) {
        uint64_t sent = pl_snac_hdr(x, s)[PL_HDR_FIXED + d];
        uint64_t expect = pl_snac_hdr(x, d)[PL_HDR_FIXED + 2 * w + s];
        if (sent != expect) return pl_snac_mis(x, "sendcounts/recvcounts", d, s, sent, d, expect);
      }
  }
  /* AllGatherV, ReduceScatterV: counts in device memory on every rank or on none */
  for (int s = 0; s < w; s++) {
    uint64_t a = h0[0] >> 48 & PL_HDR_DCOUNTS, b = pl_snac_hdr(x, s)[0] >> 48 & PL_HDR_DCOUNTS;
    if (a != b) return pl_snac_mis(x, "counts_on_device", -1, 0, a != 0, s, b != 0);
  }
  /* the direct kernel's wire format, every rank or none: last, so that a count that differs (and
   * made one rank take the direct kernel) is named as the count. AllToAllV: beside the first rank
   * q that runs it, no rank that does not may have a block larger than a packet block
   * (pl_hdr_mixbits) */
  int q = -1;
  for (int s = 0; s < w && q < 0; s++)
    if (pl_snac_hdr(x, s)[0] >> 48 & PL_HDR_DIRECT) q = s;
  for (int s = 0; s < w && q >= 0; s++) {
    const uint64_t a = pl_snac_hdr(x, s)[0];
    if (!(a >> 48 & PL_HDR_DIRECT) && (coll != PL_COLL_ALL_TO_ALL_V || pl_hdr_mixbits(a) == 2u))
      return pl_snac_mis(x, "direct kernel", -1, q, 1, s, 0);
  }
  return 0;
}

#endif
