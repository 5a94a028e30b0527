/* pl_defs.h -- definitions shared by host and device code (C11 and CUDA C). */
#ifndef PL_DEFS_H
#define PL_DEFS_H

#include <stddef.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define PL_HD static __host__ __device__ __forceinline__
#else
#define PL_HD static inline
#endif

#define PL_MAX_WORLD 72
/* Lanes: independent SNAC pipelines per role (main, stager) of one call; see docs/snac.md. */
#define PL_MAX_LANES 32
/* Flag values of call e are e * PL_EPOCH_STRIDE + (step + 1), step < PL_EPOCH_STRIDE - 1. */
#define PL_EPOCH_STRIDE ((uint64_t)1 << 24)

/* Is a flag holding `flag` ready for a wait on `value`? It is when it holds this call's value or a
 * later step of this call, or a value of the next call (a peer may be one call ahead). Anything
 * else is stale: written by an older call, however long ago (a flag may stay untouched for any
 * number of calls), so a plain wrap-aware ">=" would not do. Unsigned arithmetic relative to the
 * call's base keeps this right when the 64-bit counters wrap. */
PL_HD int pl_flag_ready(uint64_t flag, uint64_t value) {
  uint64_t base = value & ~(PL_EPOCH_STRIDE - 1);
  uint64_t f = flag - base;
  return f >= value - base && f < 2 * PL_EPOCH_STRIDE;
}

typedef enum {
  PL_COLL_ALL_REDUCE,
  PL_COLL_ALL_GATHER,
  PL_COLL_REDUCE_SCATTER,
  PL_COLL_ALL_TO_ALL,
  PL_COLL_ALL_GATHER_V,
  PL_COLL_REDUCE_SCATTER_V,
  PL_COLL_ALL_TO_ALL_V,
  PL_COLL_COUNT
} pl_coll_t;

PL_HD int pl_coll_is_reduce(int coll) {
  return coll == PL_COLL_ALL_REDUCE || coll == PL_COLL_REDUCE_SCATTER ||
         coll == PL_COLL_REDUCE_SCATTER_V;
}
PL_HD int pl_coll_is_v(int coll) { return coll >= PL_COLL_ALL_GATHER_V; }

#endif
