/* layout.h -- what a collective is: for each (source, destination) pair, which bytes of the source's
 * input land where in the destination's output, and whether they are copied (gather layouts) or
 * reduced over all sources (reduce layouts). Pure functions of the call; shared by host and device.
 *
 * Gather layouts (AG, A2A, AGV, A2AV): block (s, d) is copied from s's input at send_off(s, d) into
 * d's output at recv_off(d, s), block_bytes(s, d) bytes.
 * Reduce layouts (RS, RSV, AR): shard d is the element-wise reduction over s of s's input at
 * shard_in_off(s, d), written to d's output at shard_out_off(d, d); AllReduce composes a reduce head
 * with a gather tail of the reduced shards (shard_out_off(r, d) on every rank r). */
#ifndef PL_LAYOUT_H
#define PL_LAYOUT_H

#include "pl_defs.h"

/* What every rank tells every peer at the start of a call (the SNAC header), plus the local call. */
typedef struct {
  int coll, dtype, op, mode;
  int world, rank;
  uint64_t esize;
  uint64_t count; /* AR: count; AG: sendcount; RS: recvcount; A2A: per-peer count; AGV: sendcount */
  /* V variants, in elements, arrays of `world`: NULL when unused. */
  const uint64_t *scounts, *sdispls, *rcounts, *rdispls;
  /* 1: the four arrays above are the caller's device pointers (opts.counts_on_device on the CUDA
   * datapath; NULL displacements = prefix sums); the kernel reads them (vcounts.h). */
  int counts_dev;
} pl_call_t;

/* AllReduce shard of rank d: elements [shard_begin(d), shard_begin(d+1)). Shards are multiples of
 * 64 bytes so that chunk boundaries fall on element and vector boundaries. */
PL_HD uint64_t pl_ar_shard_per(uint64_t count, uint64_t esize, int world) {
  uint64_t per = (count + (uint64_t)world - 1) / (uint64_t)world;
  uint64_t align = 64 / esize;
  return (per + align - 1) / align * align;
}
/* Element where shard d begins, given the shard size per (the lean kernel gets per from the host,
 * so that it divides nothing). */
PL_HD uint64_t pl_ar_shard_at(uint64_t per, uint64_t count, int d) {
  uint64_t b = per * (uint64_t)d;
  return b < count ? b : count;
}
PL_HD uint64_t pl_ar_shard_begin(uint64_t count, uint64_t esize, int world, int d) {
  return pl_ar_shard_at(pl_ar_shard_per(count, esize, world), count, d);
}

/* Bytes of the block that s sends to d (gather layouts), from s's point of view when s == c->rank,
 * else from d's point of view (the receiver's counts). */
PL_HD uint64_t pl_gather_bytes_send(const pl_call_t *c, int d) {
  switch (c->coll) {
  case PL_COLL_ALL_GATHER: return c->count * c->esize;
  case PL_COLL_ALL_TO_ALL: return c->count * c->esize;
  case PL_COLL_ALL_GATHER_V: return c->count * c->esize;
  default: return c->scounts[d] * c->esize; /* A2AV */
  }
}
PL_HD uint64_t pl_gather_bytes_recv(const pl_call_t *c, int s) {
  switch (c->coll) {
  case PL_COLL_ALL_GATHER: return c->count * c->esize;
  case PL_COLL_ALL_TO_ALL: return c->count * c->esize;
  default: return c->rcounts[s] * c->esize; /* AGV, A2AV */
  }
}
/* Offset in s's input of the block for d (s == c->rank). */
PL_HD uint64_t pl_gather_send_off(const pl_call_t *c, int d) {
  switch (c->coll) {
  case PL_COLL_ALL_TO_ALL: return (uint64_t)d * c->count * c->esize;
  case PL_COLL_ALL_TO_ALL_V: return c->sdispls[d] * c->esize;
  default: return 0; /* AG, AGV: the whole input goes to everyone */
  }
}
/* Offset in d's output of the block from s (d == c->rank). */
PL_HD uint64_t pl_gather_recv_off(const pl_call_t *c, int s) {
  switch (c->coll) {
  case PL_COLL_ALL_GATHER: case PL_COLL_ALL_TO_ALL: return (uint64_t)s * c->count * c->esize;
  default: return c->rdispls[s] * c->esize;
  }
}
/* AG and AGV send one block to all: it is staged once and read by every peer. */
PL_HD int pl_gather_is_bcast(int coll) {
  return coll == PL_COLL_ALL_GATHER || coll == PL_COLL_ALL_GATHER_V;
}

/* Reduce layouts: shard d's bytes and its offset in every rank's input, and in d's output. */
PL_HD uint64_t pl_shard_bytes(const pl_call_t *c, int d) {
  switch (c->coll) {
  case PL_COLL_REDUCE_SCATTER: return c->count * c->esize;
  case PL_COLL_REDUCE_SCATTER_V: return c->rcounts[d] * c->esize;
  default:
    return (pl_ar_shard_begin(c->count, c->esize, c->world, d + 1) -
            pl_ar_shard_begin(c->count, c->esize, c->world, d)) * c->esize;
  }
}
PL_HD uint64_t pl_shard_in_off(const pl_call_t *c, int d) {
  switch (c->coll) {
  case PL_COLL_REDUCE_SCATTER: return (uint64_t)d * c->count * c->esize;
  case PL_COLL_REDUCE_SCATTER_V: return c->sdispls[d] * c->esize;
  default: return pl_ar_shard_begin(c->count, c->esize, c->world, d) * c->esize;
  }
}
/* Where shard d lands in the output: RS/RSV only on rank d at 0; AR on every rank at its offset. */
PL_HD uint64_t pl_shard_out_off(const pl_call_t *c, int d) {
  return c->coll == PL_COLL_ALL_REDUCE ? pl_shard_in_off(c, d) : 0;
}

#endif
