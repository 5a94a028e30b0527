/* snac.h -- SNAC (Stage, Notify, And Consume): the one protocol that executes every layout, written
 * once in the common subset of C11 and CUDA C. A datapath includes it after defining its atom:
 *
 *   pl_atom_t                                   the worker group's context
 *   int  pl_atom_await(a, flag, value, peer, what)   wait until pl_flag_ready(*flag, value);
 *                                               0, or a negative purlin_status_t
 *   void pl_atom_publish(a, flag, value, peer)  release-store value into a flag of `peer`
 *   void pl_atom_ring(a, peer)                  wake `peer`'s waiters after publishes/packets
 *   void pl_atom_copy(a, dst, src, bytes)       copy within the group
 *   void pl_atom_reduce(a, dst, srcs, n, count, dtype, op, divisor)
 *   void pl_atom_pkt_put(a, dst, src, bytes, flag)  bytes as 16-byte packets (8 data + 8 flag)
 *   int  pl_atom_pkt_get(a, dst, src, bytes, flag, peer, what)  wait for packets, copy the data
 *   int  pl_atom_pkt_get_async(a, dst, src, bytes, flag, peer, what, base)  the same without the
 *                                               group's final barrier; base (in packets) spreads
 *                                               successive calls over different members
 *   int  pl_atom_pkt_sync(a)                    end a series of pkt_get_async: 0, or an error
 *   char *pl_atom_scratch(a, i)                 scratch buffer i (PL_SNAC_SEG bytes each)
 *   const void **pl_atom_srcs(a)                room for a reduction's PL_MAX_WORLD sources
 *   void *pl_atom_sym(a, peer, id, off, bytes)  a peer's peer-accessible buffer, or NULL
 *   int  pl_atom_is_leader(a)                   one member of the group (for scalar work)
 *   void pl_atom_sync(a)                        barrier of the group (after the leader's writes)
 *
 * Memory ordering (docs/snac.md): data is written with plain stores, then the producer publishes a
 * flag with release semantics (system scope); the consumer's await ends with an acquire load of the
 * flag, so it sees the data. Packets carry their flag in the same 16-byte store as their data, so
 * they need no fence: a packet whose flag equals the call's value holds that call's data. */
#ifndef PL_SNAC_H
#define PL_SNAC_H

#include "snac/snac_types.h"

/* A datapath may time SNAC's phases (CUDA: PURLIN_PROFILE); stamp i is the end of phase i. */
#ifndef PL_SNAC_STAMP
#define PL_SNAC_STAMP(a, i) ((void)0)
#endif

/* ---- helpers --------------------------------------------------------------------------------- */

PL_HD void pl_snac_publish_all(pl_atom_t *a, const pl_snac_t *x, uint64_t off, uint64_t v,
                               int self_too) {
  int w = x->c.world, r = x->c.rank;
  for (int i = 0; i < w; i++) {
    int p = (r + i) % w;
    if (p == r && !self_too) continue;
    pl_atom_publish(a, (uint64_t *)((char *)pl_snac_fl(x, p, r) + off), v, p);
    pl_atom_ring(a, p);
  }
}
#define PL_FLAG_OFF(field) offsetof(pl_peer_flags_t, field)

/* This lane's part [*lo, *hi) of a b-byte block that is not chunked (packets, the self copy):
 * 16-byte aligned, so a whole number of packet pairs; the last lane takes the tail. Sender and
 * receiver may split differently (a packet carries its own flag), but the same lane of one rank
 * writes and later overwrites the same part, which keeps in-place calls safe. */
PL_HD void pl_snac_part(const pl_snac_t *x, uint64_t b, uint64_t *lo, uint64_t *hi) {
  pl_part(b, (uint64_t)x->lane, (uint64_t)x->plan.lanes, lo, hi);
}

/* This lane's part of a packet block of b bytes from src into the window dst (flag `flag`). */
PL_HD void pl_snac_pkt_push(pl_atom_t *a, const pl_snac_t *x, pl_pkt_t *dst, const char *src,
                            uint64_t b, uint64_t flag) {
  uint64_t lo, hi;
  pl_snac_part(x, b, &lo, &hi);
  if (hi > lo) pl_atom_pkt_put(a, dst + lo / 8, src + lo, hi - lo, flag);
}

/* Where s's block for me lives when s lets peers read its input directly. */
PL_HD const char *pl_snac_zc_src(pl_atom_t *a, const pl_snac_t *x, int s, uint64_t off,
                                 uint64_t bytes) {
  const uint64_t *h = pl_snac_hdr(x, s);
  return (const char *)pl_atom_sym(a, s, h[2], h[3] + off, bytes);
}
PL_HD int pl_snac_zc(const pl_snac_t *x, int s, unsigned flag) {
  return (int)(pl_snac_hdr(x, s)[0] >> 48 & flag);
}

/* ---- stage: the stager group ----------------------------------------------------------------- */

/* Bytes of my block for d that go through staging (0: none, or packets, or zero copy). */
PL_HD uint64_t pl_snac_staged_out(const pl_snac_t *x, int d) {
  const pl_call_t *c = &x->c;
  if (d == c->rank || x->zc_send) return 0;
  if (pl_coll_is_reduce(c->coll)) {
    if (pl_snac_reduce_lat(x, d)) return 0;
    return pl_shard_bytes(c, d);
  }
  uint64_t b = pl_gather_bytes_send(c, d);
  return pl_snac_gather_lat(x, b) ? 0 : b;
}
PL_HD const char *pl_snac_out_src(const pl_snac_t *x, int d) {
  const pl_call_t *c = &x->c;
  return x->send + (pl_coll_is_reduce(c->coll) ? pl_shard_in_off(c, d) : pl_gather_send_off(c, d));
}

PL_HD uint64_t pl_snac_stage_rounds(const pl_snac_t *x) {
  uint64_t r = 0;
  for (int d = 0; d < x->c.world; d++) {
    uint64_t k = pl_rounds(pl_snac_staged_out(x, d), x->plan.chunk);
    if (k > r) r = k;
  }
  return r;
}

/* The most rounds any block of this call needs (flag steps must stay below PL_EPOCH_STRIDE). */
PL_HD uint64_t pl_snac_max_rounds(const pl_snac_t *x) {
  const pl_call_t *c = &x->c;
  uint64_t m = 0, b;
  for (int d = 0; d < c->world; d++) {
    b = pl_coll_is_reduce(c->coll) ? pl_shard_bytes(c, d) : pl_gather_bytes_send(c, d);
    if (pl_rounds(b, x->plan.chunk) > m) m = pl_rounds(b, x->plan.chunk);
    if (!pl_coll_is_reduce(c->coll)) {
      b = pl_gather_bytes_recv(c, d);
      if (pl_rounds(b, x->plan.chunk) > m) m = pl_rounds(b, x->plan.chunk);
    }
  }
  return m;
}

/* The stager of lane x->lane: this lane's part of every chunk, flow control on its flags. */
PL_HD int pl_snac_stage(pl_atom_t *a, pl_snac_t *x) {
  const pl_call_t *c = &x->c;
  int w = c->world, r = c->rank, bcast = pl_gather_is_bcast(c->coll);
  uint64_t K = x->plan.chunk, R = pl_snac_stage_rounds(x);
  for (uint64_t k = 0; k < R; k++) {
    if (k >= x->plan.nslots) { /* flow control: the slot's previous round must be consumed */
      uint64_t old = k - x->plan.nslots;
      for (int d = 0; d < w; d++) {
        if (pl_rounds(pl_snac_staged_out(x, d), K) <= old) continue;
        int st = pl_atom_await(a, &pl_snac_fl(x, r, d)->cons_red, pl_snac_val(x, old), d,
                               "consumption of staged data");
        if (st) return st;
      }
    }
    char *slot = pl_snac_slot(x, r, k);
    for (int d = 0; d < w; d++) {
      uint64_t b = pl_snac_staged_out(x, d);
      if (k * K >= b) continue;
      uint64_t n = b - k * K < K ? b - k * K : K, lo, hi;
      pl_snac_lane(x, n, &lo, &hi);
      pl_atom_copy(a, slot + (bcast ? 0 : (uint64_t)d * K) + lo,
                   pl_snac_out_src(x, d) + k * K + lo, hi - lo);
      if (bcast) break;
    }
    pl_snac_publish_all(a, x, PL_FLAG_OFF(stage), pl_snac_val(x, k), 1);
  }
  return 0;
}

/* ---- notify: packets and header -------------------------------------------------------------- */

PL_HD void pl_snac_push(pl_atom_t *a, pl_snac_t *x, const uint64_t *myhdr) {
  const pl_call_t *c = &x->c;
  int w = c->world, r = c->rank;
  uint64_t flag = pl_snac_val(x, 0);
  for (int i = 0; i < w; i++) {
    int d = (r + i) % w;
    if (x->lane == 0) pl_atom_pkt_put(a, pl_snac_win(x, d, r), myhdr, pl_hdr_words(w) * 8, flag);
    if (d != r) { /* data packets: every lane pushes its part */
      const char *src = x->send;
      uint64_t b = 0;
      if (c->coll == PL_COLL_ALL_REDUCE && x->plan.ar_oneshot) {
        b = c->count * c->esize;
      } else if (pl_coll_is_reduce(c->coll)) { /* RS(V) in packets, or two-shot's first shot */
        if (pl_snac_reduce_lat(x, d)) {
          src += pl_shard_in_off(c, d);
          b = pl_shard_bytes(c, d);
        }
      } else {
        b = pl_gather_bytes_send(c, d);
        if (pl_snac_gather_lat(x, b)) src += pl_gather_send_off(c, d);
        else b = 0;
      }
      pl_snac_pkt_push(a, x, pl_snac_win_data(x, d, r), src, b, flag);
    }
    pl_atom_ring(a, d);
  }
}

/* ---- consume --------------------------------------------------------------------------------- */

/* Reduce `bytes` into dst from every source's packets (from packet win_pk of its data window on)
 * and my own input at in_off, in rank order; in segments of PL_SNAC_SEG through scratch. */
PL_HD int pl_snac_pkt_reduce(pl_atom_t *a, pl_snac_t *x, uint64_t in_off, uint64_t win_pk,
                             char *dst, uint64_t bytes) {
  const pl_call_t *c = &x->c;
  int w = c->world, r = c->rank;
  const void **srcs = pl_atom_srcs(a);
  for (uint64_t o = 0; o < bytes; o += PL_SNAC_SEG) {
    uint64_t n = bytes - o < PL_SNAC_SEG ? bytes - o : PL_SNAC_SEG;
    uint64_t base = 0;
    for (int s = 0; s < w; s++) { /* every source's packets at once, one barrier */
      if (s == r) {
        if (pl_atom_is_leader(a)) srcs[s] = x->send + in_off + o; /* read after the barrier */
        continue;
      }
      char *buf = pl_atom_scratch(a, s);
      int st = pl_atom_pkt_get_async(a, buf, pl_snac_win_data(x, r, s) + win_pk + o / 8, n,
                                     pl_snac_val(x, 0), s, "reduce packets", base);
      if (st) return st;
      base += (n + 7) / 8;
      if (pl_atom_is_leader(a)) srcs[s] = buf;
    }
    int st = pl_atom_pkt_sync(a);
    if (st) return st;
    pl_atom_reduce(a, dst + o, srcs, w, n / c->esize, c->dtype, c->op, w);
  }
  return 0;
}

PL_HD int pl_snac_await_stage(pl_atom_t *a, pl_snac_t *x, int s, uint64_t k) {
  return pl_atom_await(a, &pl_snac_fl(x, x->c.rank, s)->stage, pl_snac_val(x, k), s,
                       "staged data");
}

/* Gather layouts: copy every peer's block for me into my output, round by round. */
/* Offset, in s's input, of s's block for me (zero copy reads it there). */
PL_HD uint64_t pl_snac_zc_gather_off(const pl_snac_t *x, int s) {
  const pl_call_t *c = &x->c;
  if (c->coll == PL_COLL_ALL_TO_ALL) return (uint64_t)c->rank * c->count * c->esize;
  if (c->coll == PL_COLL_ALL_TO_ALL_V)
    return pl_snac_hdr(x, s)[PL_HDR_FIXED + c->world + c->rank] * c->esize;
  return 0;
}

/* Gather layouts: copy every peer's block for me into my output. Packets first (they wait on no
 * stager); then round by round, every source in each round, so that every rank's progress only
 * depends on earlier rounds (source after source could deadlock through flow control). Zero-copy
 * sources go round by round too: in place, round k may only overwrite what my stager has staged. */
PL_HD int pl_snac_gather(pl_atom_t *a, pl_snac_t *x) {
  const pl_call_t *c = &x->c;
  int w = c->world, r = c->rank, bcast = pl_gather_is_bcast(c->coll), st;
  uint64_t K = x->plan.chunk, R = 0, base = 0;
  for (int i = 1; i < w; i++) { /* every source's packets at once, one barrier */
    int s = (r + i) % w;
    uint64_t b = pl_gather_bytes_recv(c, s);
    if (!b) continue;
    if (pl_snac_gather_lat(x, b)) { /* this lane's part */
      uint64_t lo, hi;
      pl_snac_part(x, b, &lo, &hi);
      if (hi <= lo) continue;
      st = pl_atom_pkt_get_async(a, x->recv + pl_gather_recv_off(c, s) + lo,
                                 pl_snac_win_data(x, r, s) + lo / 8, hi - lo, pl_snac_val(x, 0), s,
                                 "packets", base);
      if (st) return st;
      base += (hi - lo + 7) / 8;
    } else if (pl_rounds(b, K) > R) {
      R = pl_rounds(b, K);
    }
  }
  if (base && (st = pl_atom_pkt_sync(a))) return st;
  for (uint64_t k = 0; k < R; k++) {
    for (int i = 1; i < w; i++) {
      int s = (r + i) % w, zc = pl_snac_zc(x, s, PL_HDR_ZC_SEND);
      uint64_t b = pl_gather_bytes_recv(c, s);
      if (!b || pl_snac_gather_lat(x, b) || k * K >= b) continue;
      /* in place: my stager must have staged what this round overwrites */
      if (x->in_place && k < pl_rounds(pl_snac_staged_out(x, s), K) &&
          (st = pl_snac_await_stage(a, x, r, k)))
        return st;
      uint64_t n = b - k * K < K ? b - k * K : K, lo, hi;
      pl_snac_lane(x, n, &lo, &hi);
      const char *src;
      if (zc) {
        src = pl_snac_zc_src(a, x, s, pl_snac_zc_gather_off(x, s) + k * K + lo, hi - lo);
        if (!src) return PURLIN_ERR_INTERNAL;
      } else {
        if ((st = pl_snac_await_stage(a, x, s, k))) return st;
        src = pl_snac_slot(x, s, k) + (bcast ? 0 : (uint64_t)r * K) + lo;
      }
      pl_atom_copy(a, x->recv + pl_gather_recv_off(c, s) + k * K + lo, src, hi - lo);
      if (!zc) {
        pl_atom_publish(a, &pl_snac_fl(x, s, r)->cons_red, pl_snac_val(x, k), s);
        pl_atom_ring(a, s);
      }
    }
  }
  return 0;
}

/* Where bytes [lo, hi) of round k of source s's contribution to shard d are (s != me). */
PL_HD const char *pl_snac_reduce_src(pl_atom_t *a, pl_snac_t *x, int s, int d, uint64_t k,
                                     uint64_t lo, uint64_t hi) {
  const pl_call_t *c = &x->c;
  uint64_t K = x->plan.chunk;
  if (pl_snac_zc(x, s, PL_HDR_ZC_SEND)) {
    uint64_t off = c->coll == PL_COLL_REDUCE_SCATTER_V
                       ? pl_snac_hdr(x, s)[PL_HDR_FIXED + c->world + d] * c->esize
                       : pl_shard_in_off(c, d);
    return pl_snac_zc_src(a, x, s, off + k * K + lo, hi - lo);
  }
  return pl_snac_slot(x, s, k) + (uint64_t)d * K + lo;
}

/* Reduce bytes [lo, hi) of round k of my shard (this lane's part) from every rank's
 * contribution, in rank order, into dst (the round's output; the part lands at dst + lo). */
PL_HD int pl_snac_reduce_round(pl_atom_t *a, pl_snac_t *x, uint64_t k, char *dst, uint64_t lo,
                               uint64_t hi) {
  const pl_call_t *c = &x->c;
  int w = c->world, r = c->rank, st;
  uint64_t K = x->plan.chunk;
  const void **srcs = pl_atom_srcs(a);
  for (int s = 0; s < w; s++) {
    const void *src;
    if (s == r) {
      src = x->send + pl_shard_in_off(c, r) + k * K + lo;
    } else {
      if (!pl_snac_zc(x, s, PL_HDR_ZC_SEND) && (st = pl_snac_await_stage(a, x, s, k))) return st;
      src = pl_snac_reduce_src(a, x, s, r, k, lo, hi);
      if (!src) return PURLIN_ERR_INTERNAL;
    }
    if (pl_atom_is_leader(a)) srcs[s] = src; /* one writer; read after the barrier below */
  }
  pl_atom_sync(a);
  pl_atom_reduce(a, dst + lo, srcs, w, (hi - lo) / c->esize, c->dtype, c->op, w);
  for (int s = 0; s < w; s++) {
    if (s == r || pl_snac_zc(x, s, PL_HDR_ZC_SEND)) continue;
    pl_atom_publish(a, &pl_snac_fl(x, s, r)->cons_red, pl_snac_val(x, k), s);
    pl_atom_ring(a, s);
  }
  return 0;
}

/* AllReduce tail, round k: copy every other rank's reduced chunk k of its shard (the seam). */
PL_HD int pl_snac_seam_gather(pl_atom_t *a, pl_snac_t *x, uint64_t k) {
  const pl_call_t *c = &x->c;
  int w = c->world, r = c->rank, st;
  uint64_t K = x->plan.chunk;
  for (int i = 1; i < w; i++) {
    int d = (r + i) % w;
    uint64_t b = pl_shard_bytes(c, d);
    if (k * K >= b) continue;
    uint64_t n = b - k * K < K ? b - k * K : K, lo, hi;
    pl_snac_lane(x, n, &lo, &hi);
    st = pl_atom_await(a, &pl_snac_fl(x, r, d)->seam, pl_snac_val(x, k), d, "reduced seam");
    if (st) return st;
    uint64_t out = pl_shard_out_off(c, d) + k * K + lo;
    const char *src;
    if (pl_snac_zc(x, d, PL_HDR_ZC_RECV)) {
      const uint64_t *h = pl_snac_hdr(x, d);
      src = (const char *)pl_atom_sym(a, d, h[4], h[5] + out, hi - lo);
      if (!src) return PURLIN_ERR_INTERNAL;
    } else {
      src = pl_snac_slot(x, d, k) + x->plan.seam_off + lo;
    }
    pl_atom_copy(a, x->recv + out, src, hi - lo);
    if (!pl_snac_zc(x, d, PL_HDR_ZC_RECV)) {
      pl_atom_publish(a, &pl_snac_fl(x, d, r)->cons_gat, pl_snac_val(x, k), d);
      pl_atom_ring(a, d);
    }
  }
  return 0;
}

/* Two-shot AllReduce, once this lane's part [lo, hi) of my shard is reduced into recv: push it
 * to every peer (region 2 of my window there, flag step 1), then receive this lane's part of every
 * peer's reduced shard (the idea of NCCL's and TensorRT-LLM's two-shot all-reduce, in packets). */
PL_HD int pl_snac_twoshot_tail(pl_atom_t *a, pl_snac_t *x, uint64_t lo, uint64_t hi) {
  const pl_call_t *c = &x->c;
  int w = c->world, r = c->rank, st;
  uint64_t flag = pl_snac_val(x, 1), base = 0, r2 = x->plan.ar_region2;
  const char *mine = x->recv + pl_shard_out_off(c, r);
  for (int i = 1; i < w; i++) {
    int d = (r + i) % w;
    if (hi > lo) pl_atom_pkt_put(a, pl_snac_win_data(x, d, r) + r2 + lo / 8, mine + lo, hi - lo, flag);
    pl_atom_ring(a, d);
  }
  for (int i = 1; i < w; i++) {
    int s = (r + i) % w;
    uint64_t l2, h2;
    pl_snac_part(x, pl_shard_bytes(c, s), &l2, &h2);
    if (h2 <= l2) continue;
    st = pl_atom_pkt_get_async(a, x->recv + pl_shard_out_off(c, s) + l2,
                               pl_snac_win_data(x, r, s) + r2 + l2 / 8, h2 - l2, flag, s,
                               "reduced shard packets", base);
    if (st) return st;
    base += (h2 - l2 + 7) / 8;
  }
  return pl_atom_pkt_sync(a);
}

/* Reduce layouts (RS, RSV, and AllReduce as reduce head + gather tail with the seam between). */
PL_HD int pl_snac_reduce(pl_atom_t *a, pl_snac_t *x) {
  const pl_call_t *c = &x->c;
  int w = c->world, r = c->rank, ar = c->coll == PL_COLL_ALL_REDUCE, st;
  uint64_t K = x->plan.chunk, R = 0;
  if (pl_snac_reduce_lat(x, r)) { /* packets: this lane's part of what I reduce */
    int one = ar && x->plan.ar_oneshot;
    uint64_t b = one ? c->count * c->esize : pl_shard_bytes(c, r), lo, hi;
    uint64_t in = one ? 0 : pl_shard_in_off(c, r), out = one ? 0 : pl_shard_out_off(c, r);
    pl_snac_part(x, b, &lo, &hi);
    if (hi > lo && (st = pl_snac_pkt_reduce(a, x, in + lo, lo / 8, x->recv + out + lo, hi - lo)))
      return st;
    return ar && x->plan.ar_twoshot ? pl_snac_twoshot_tail(a, x, lo, hi) : 0;
  }
  for (int d = 0; d < w; d++) {
    uint64_t k = pl_rounds(pl_shard_bytes(c, d), K);
    if ((ar || d == r) && k > R) R = k;
  }
  uint64_t mine = pl_shard_bytes(c, r);
  int seam = ar && w > 1 && !x->zc_recv;
  for (uint64_t k = 0; k < R; k++) {
    if (k * K < mine) {
      char *out = x->recv + pl_shard_out_off(c, r) + k * K;
      uint64_t n = mine - k * K < K ? mine - k * K : K, lo, hi;
      pl_snac_lane(x, n, &lo, &hi);
      if ((st = pl_snac_reduce_round(a, x, k, out, lo, hi))) return st;
      if (seam) {
        if (k >= x->plan.nslots) { /* the seam slot's previous round must be gathered */
          for (int s = 0; s < w; s++) {
            if (s == r) continue;
            st = pl_atom_await(a, &pl_snac_fl(x, r, s)->cons_gat,
                               pl_snac_val(x, k - x->plan.nslots), s, "consumption of the seam");
            if (st) return st;
          }
        }
        pl_atom_copy(a, pl_snac_slot(x, r, k) + x->plan.seam_off + lo, out + lo, hi - lo);
      }
      if (ar) pl_snac_publish_all(a, x, PL_FLAG_OFF(seam), pl_snac_val(x, k), 0);
    }
    if (ar && (st = pl_snac_seam_gather(a, x, k))) return st;
  }
  return 0;
}

/* Self block of a gather layout: my own input to my own output. */
PL_HD void pl_snac_self(pl_atom_t *a, pl_snac_t *x) {
  const pl_call_t *c = &x->c;
  int r = c->rank;
  if (pl_coll_is_reduce(c->coll)) return;
  /* what I send myself and what I receive from myself differ only in a mismatched AllToAllV,
   * which the header check reports after this copy: never past my own block */
  uint64_t b = pl_gather_bytes_send(c, r), rb = pl_gather_bytes_recv(c, r), lo, hi;
  if (rb < b) b = rb;
  const char *src = x->send + pl_gather_send_off(c, r);
  char *dst = x->recv + pl_gather_recv_off(c, r);
  pl_snac_part(x, b, &lo, &hi);
  if (hi > lo && src != dst) pl_atom_copy(a, dst + lo, src + lo, hi - lo); /* this lane's part */
}

/* Zero copy: readers tell the owner they are done; the owner returns only after all have. */
PL_HD int pl_snac_zc_exit(pl_atom_t *a, pl_snac_t *x) {
  int w = x->c.world, r = x->c.rank, st;
  for (int s = 0; s < w; s++)
    if (s != r && pl_snac_zc(x, s, PL_HDR_ZC_SEND | PL_HDR_ZC_RECV)) {
      pl_atom_publish(a, &pl_snac_fl(x, s, r)->done, pl_snac_val(x, 0), s);
      pl_atom_ring(a, s);
    }
  if (!x->zc_send && !x->zc_recv) return 0;
  for (int s = 0; s < w; s++) {
    if (s == r) continue;
    st = pl_atom_await(a, &pl_snac_fl(x, r, s)->done, pl_snac_val(x, 0), s,
                       "readers of my buffers");
    if (st) return st;
  }
  return 0;
}

/* The main group of lane x->lane: notify (lane 0: the header; every lane: its part of every packet
 * block), check agreement (every lane, from its own copy of the headers: the same verdict),
 * consume this lane's part of every chunk and packet block (docs/snac.md, "Lanes"). */
PL_HD int pl_snac_main(pl_atom_t *a, pl_snac_t *x, uint64_t *myhdr) {
  int w = x->c.world, r = x->c.rank, st;
  /* the header is lane 0's (built by one member: two members building it at once could each
   * zero a word the other had already filled); data packets every lane's */
  if (x->lane == 0 && pl_atom_is_leader(a)) pl_snac_hdr_build(x, myhdr);
  pl_atom_sync(a);
  pl_snac_push(a, x, myhdr);
  pl_snac_self(a, x);
  PL_SNAC_STAMP(a, 2);
  for (int i = 0; i < w; i++) { /* every rank's header at once, one barrier */
    int s = (r + i) % w;
    st = pl_atom_pkt_get_async(a, pl_snac_hdr(x, s), pl_snac_win(x, r, s), pl_hdr_words(w) * 8,
                               pl_snac_val(x, 0), s, "the call's header",
                               (uint64_t)i * pl_hdr_words(w));
    if (st) return st;
  }
  if ((st = pl_atom_pkt_sync(a))) return st;
  if ((st = pl_snac_hdr_check(x))) return st;
  PL_SNAC_STAMP(a, 3);
  st = pl_coll_is_reduce(x->c.coll) ? pl_snac_reduce(a, x) : pl_snac_gather(a, x);
  if (st) return st;
  st = pl_snac_zc_exit(a, x);
  PL_SNAC_STAMP(a, 4);
  return st;
}

#endif
