/* vcounts.h -- V counts read where the call runs (opts.counts_on_device on the CUDA datapath): the
 * kernel reads counts and displacements from device memory at its start and derives here what the
 * host derives in api.c (pl_check_v) when counts live in host memory: default displacements
 * (exclusive prefix sums), overflow and overlap checks, the extents of send and recv, the in-place
 * form. Pure functions in the common subset of C11 and CUDA C (PL_HD); the host unit test
 * (tests/unit/test_vcounts.c) runs them too. */
#ifndef PL_VCOUNTS_H
#define PL_VCOUNTS_H

#include "layout.h"

/* Displacements d (computed as prefix sums of cnt when !have), and the byte extent they cover.
 * NULL, or why not (a short constant string, < 64 characters). */
PL_HD const char *pl_v_displs(uint64_t *d, const uint64_t *cnt, int have, int w, uint64_t es,
                              uint64_t *extent) {
  uint64_t sum = 0;
  *extent = 0;
  for (int i = 0; i < w; i++) {
    if (!have) d[i] = sum;
    uint64_t end = d[i] + cnt[i];
    if (end < d[i] || (es && end > ~(uint64_t)0 / es) || sum + cnt[i] < sum)
      return "a displacement + count overflows";
    sum += cnt[i];
    if (cnt[i] && end * es > *extent) *extent = end * es;
  }
  return 0;
}

/* 1 when two non-empty blocks overlap. */
PL_HD int pl_v_overlap(const uint64_t *cnt, const uint64_t *d, int w) {
  for (int i = 0; i < w; i++)
    for (int j = i + 1; j < w; j++)
      if (cnt[i] && cnt[j] && d[i] < d[j] + cnt[j] && d[j] < d[i] + cnt[i]) return 1;
  return 0;
}

/* v = {scounts, sdispls, rcounts, rdispls} in elements, counts filled; sdispls / rdispls filled
 * when have_sd / have_rd. Completes the displacements, checks them, and sets the extents of send
 * and recv (bytes) and the in-place form, as pl_check_v does on the host. count: AGV's sendcount,
 * which with device counts is the room of send in elements (a graph captures it once): this rank
 * sends recvcounts[rank] <= count elements (the caller then sets c->count to that). NULL, or why
 * not (< 64 characters). */
PL_HD const char *pl_v_derive(int coll, int world, int rank, uint64_t count, uint64_t es,
                              uint64_t (*v)[PL_MAX_WORLD], int have_sd, int have_rd,
                              const char *send, const char *recv, int *in_place,
                              uint64_t *send_bytes, uint64_t *recv_bytes) {
  int w = world, me = rank;
  uint64_t ext = 0, sext = 0, s0 = (uint64_t)(uintptr_t)send, r0 = (uint64_t)(uintptr_t)recv;
  const char *e;
  *in_place = 0;
  *send_bytes = *recv_bytes = 0;
  if (coll == PL_COLL_ALL_GATHER_V) {
    if (v[2][me] > count) return "recvcounts[rank] exceeds sendcount (send's room)";
    if ((e = pl_v_displs(v[3], v[2], have_rd, w, es, &ext))) return e;
    if (pl_v_overlap(v[2], v[3], w)) return "recv blocks overlap (recvcounts, rdispls)";
    *recv_bytes = ext;
    *send_bytes = v[2][me] * es;
    *in_place = s0 == r0 + v[3][me] * es;
  } else if (coll == PL_COLL_REDUCE_SCATTER_V) {
    if ((e = pl_v_displs(v[1], v[2], have_sd, w, es, &ext))) return e;
    if (pl_v_overlap(v[2], v[1], w)) return "send blocks overlap (recvcounts, sdispls)";
    *send_bytes = ext;
    *recv_bytes = v[2][me] * es;
    *in_place = r0 == s0 + v[1][me] * es;
  } else {
    if ((e = pl_v_displs(v[1], v[0], have_sd, w, es, &sext))) return e;
    if ((e = pl_v_displs(v[3], v[2], have_rd, w, es, &ext))) return e;
    if (pl_v_overlap(v[2], v[3], w)) return "recv blocks overlap (recvcounts, rdispls)";
    *send_bytes = sext;
    *recv_bytes = ext;
    *in_place = s0 == r0 && (sext || ext);
    if (*in_place)
      for (int i = 0; i < w; i++)
        if (v[0][i] != v[2][i] || v[1][i] != v[3][i])
          return "in place needs sendcounts/sdispls == recv's";
  }
  if (*send_bytes && !send) return "send is NULL but has bytes to read";
  if (*recv_bytes && !recv) return "recv is NULL but has bytes to write";
  if (!*in_place && *send_bytes && *recv_bytes && s0 < r0 + *recv_bytes &&
      r0 < s0 + *send_bytes)
    return "send and recv overlap, not in the in-place form";
  return 0;
}

#endif
