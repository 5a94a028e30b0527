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
/* Flag values of one call are epoch * PL_EPOCH_STRIDE + (step + 1); compared wrap-aware. */
#define PL_EPOCH_STRIDE ((uint64_t)1 << 32)

/* a >= b for counters that grow and may wrap around 2^64. */
PL_HD int pl_seq_ge(uint64_t a, uint64_t b) { return (int64_t)(a - b) >= 0; }

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
