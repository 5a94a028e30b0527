/* atom_cuda.cuh -- the GPU atoms: SNAC's datapath on a CTA (see the atom interface at the top of
 * snac/snac.h). A worker group is one CTA; every thread runs SNAC's control flow (the same values
 * everywhere), and the atoms split the data work among the threads.
 *
 * Ordering follows the PTX memory model, as NCCL's and MSCCL++'s proxies-free kernels do: data are
 * plain stores; publish = bar.sync, then one st.release.sys (cumulative over what the CTA wrote
 * before the barrier); await = one thread spins with ld.relaxed.sys, then ld.acquire.sys, then
 * bar.sync (the barrier carries the acquire to the whole CTA). Packets are one 16-byte volatile
 * (relaxed, system scope) store of {data, flag}, polled with 16-byte volatile loads, as in
 * reference/purlin.md section 2 (NCCL's LL protocol splits its flags per 8 bytes instead).
 *
 * Atom 700 (vector ld/st, every architecture): 16-byte loads and stores when source and
 * destination have the same alignment modulo 16, unrolled by 4; otherwise 4-byte or byte loops.
 * Reductions do the element math of dtype.h (pl_opf and the conversions), one accumulator per
 * element fed in rank order, so they give the host datapath's bits (built with --fmad=false). */
#ifndef PL_ATOM_CUDA_CUH
#define PL_ATOM_CUDA_CUH

#include <stdint.h>

#include "cuda/cuda_int.h"
#include "dtype.h"
#include "purlin_device.cuh" /* the public device API: atom 700 is built from it */

/* Shared memory of a CTA: the call, my header, and the CTA's sticky error (once set, the CTA
 * returns from SNAC, so it is never reset within a call). */
typedef struct {
  pl_snac_t x;
  uint64_t v[4][PL_MAX_WORLD];
  uint64_t myhdr[PL_HDR_FIXED + 3 * PL_MAX_WORLD];
  const void *srcs[PL_MAX_WORLD]; /* a reduction's sources (pl_atom_srcs) */
  int err, err_peer;
  const char *err_what;
} pl_cuda_sh_t;

typedef struct {
  pl_ctrl_t *me;      /* this rank's control block */
  uint64_t epoch;
  uint64_t timeout;   /* ns, from the start of each wait (PURLIN_TIMEOUT_MS) */
  uint32_t backoff;   /* ns between packet polls (PURLIN_POLL_BACKOFF_NS) */
  char *scratch;
  const uint64_t *symtab;
  int world;
  pl_cuda_sh_t *sh;
  uint64_t *prof;     /* PURLIN_PROFILE, main lane 0 only: the call's phase stamps; else NULL */
} pl_atom_t;
/* SNAC's phase boundaries (snac.h), for PURLIN_PROFILE */
#ifdef __CUDA_ARCH__
#define PL_SNAC_STAMP(a, i)                                                                        \
  do {                                                                                             \
    if ((a)->prof && threadIdx.x == 0) (a)->prof[i] = pl_globaltimer();                          \
  } while (0)
#else
#define PL_SNAC_STAMP(a, i) ((void)0) /* the host pass of SNAC's __host__ __device__ code */
#endif

#define PL_DEV static __device__ __forceinline__

/* PTX helpers (pl_ld_acquire_sys, pl_st_release_sys, pl_st_pkt, pl_globaltimer, ...), the wait
 * loop, the copy and reduce bodies: src/cuda/dev_core.cuh, behind the public device API. */

/* ---- waits ------------------------------------------------------------------------------------- */

/* A SNAC wait stops on an abort from anywhere (REMOTE), when the other CTA of this call failed
 * (PL_CUDA_STOP_SIBLING), or at its deadline (TIMEOUT), counted from the start of each wait as on
 * the host datapath; packet waits also stop quietly once another thread of the CTA failed. */
static_assert(PL_WAIT_SIBLING == PL_CUDA_STOP_SIBLING, "one code for a sibling's failure");
PL_DEV pl_wait_t pl_dev_wait_spec(pl_atom_t *a, int group) {
  pl_wait_t w = {&a->me->abort, &a->me->err_epoch, a->epoch + 1,
                 group ? (const volatile int *)&a->sh->err : NULL, a->timeout, 0, a->backoff};
  return w;
}
/* Why a spinning thread must stop, or 0 (*deadline is 0 until the first check, which sets it). */
PL_DEV int pl_dev_stop(pl_atom_t *a, uint64_t *deadline) {
  pl_wait_t w = pl_dev_wait_spec(a, 0);
  return pl_wait_check(&w, deadline);
}
/* Record the CTA's error (first one wins) with the peer and the wait it concerns. */
PL_DEV void pl_dev_fail(pl_atom_t *a, int st, int peer, const char *what) {
  if (atomicCAS(&a->sh->err, 0, st) == 0) {
    a->sh->err_peer = st == PURLIN_ERR_TIMEOUT ? peer : -1;
    a->sh->err_what = what;
  }
}

/* purlin_dev_await_block with SNAC's stop conditions and epoch-windowed flags (pl_flag_ready):
 * thread 0 spins, the barrier carries the acquire and any error to the CTA. */
PL_DEV int pl_dev_await(pl_atom_t *a, const uint64_t *flag, uint64_t value, int peer,
                         const char *what) {
  if (threadIdx.x == 0) {
    pl_wait_t w = pl_dev_wait_spec(a, 0);
    int st = pl_wait_flag(flag, value, PL_READY_EPOCH, &w);
    if (st) pl_dev_fail(a, st, peer, what);
  }
  __syncthreads();
  return a->sh->err;
}

PL_DEV void pl_dev_publish(pl_atom_t *a, uint64_t *flag, uint64_t value, int peer) {
  purlin_dev_publish_block(flag, value);
}
PL_DEV int pl_dev_is_leader(pl_atom_t *a) { return threadIdx.x == 0; }

PL_DEV void *pl_dev_sym(pl_atom_t *a, int peer, uint64_t id, uint64_t off, uint64_t bytes) {
  if (id < 1 || id > PL_CUDA_MAX_SYMS) return NULL;
  const uint64_t *e = a->symtab + (id - 1) * (uint64_t)(1 + a->world);
  uint64_t size = e[0];
  if (!size || off > size || bytes > size - off) return NULL;
  return (char *)e[1 + peer] + off;
}

/* ---- copy (atom 700) --------------------------------------------------------------------------- */

/* The public block copy (16-byte vectors when source and destination agree modulo 16, unrolled by
 * 4; else 4-byte words, else bytes). */
PL_DEV void pl_copy_700(char *dst, const char *src, uint64_t bytes) {
  purlin_dev_copy_block(dst, src, bytes);
}

#ifndef PL_CUDA_COPY
#define PL_CUDA_COPY pl_copy_700
#endif

/* The group's copy; ends with a barrier, since SNAC may read what another thread wrote. dst and
 * src do not overlap unless equal (SNAC never copies between overlapping distinct ranges). */
PL_DEV void pl_dev_copy(pl_atom_t *a, void *dst, const void *src, uint64_t bytes) {
  if (bytes && dst != src) PL_CUDA_COPY((char *)dst, (const char *)src, bytes);
  __syncthreads();
}

/* ---- reduce (atom 700) ------------------------------------------------------------------------- */

/* The public block reduce: per element the operations of pl_reduce_elems in the same order (16-byte
 * vectors when the pointers allow), so the same bits as the host datapath. */
PL_DEV void pl_reduce_700(void *dst, const void *const *srcs, int n, uint64_t count, int dtype,
                          int op, int divisor) {
  purlin_dev_reduce_block(dst, srcs, n, count, (purlin_dtype_t)dtype, (purlin_op_t)op, divisor);
}

#ifndef PL_CUDA_REDUCE
#define PL_CUDA_REDUCE pl_reduce_700
#endif

/* Ends with a barrier: SNAC copies the result (the seam) or reuses the scratch next. */
PL_DEV void pl_dev_reduce(pl_atom_t *a, void *dst, const void *const *srcs, int n,
                           uint64_t count, int dtype, int op, int divisor) {
  PL_CUDA_REDUCE(dst, srcs, n, count, dtype, op, divisor);
  __syncthreads();
}

/* ---- packets ----------------------------------------------------------------------------------- */

/* Packet i carries bytes [8i, 8i+8) of src (zero-padded at the end) and the flag, in one store. */
PL_DEV void pl_dev_pkt_put(pl_atom_t *a, void *dst, const void *src, uint64_t bytes,
                            uint64_t flag) {
  purlin_dev_pkt_put_block(dst, src, bytes, flag);
}

/* purlin_dev_pkt_get_block with SNAC's stop conditions: every thread waits for its own packets;
 * ends with a barrier (the data are read by others). */
PL_DEV int pl_dev_pkt_get(pl_atom_t *a, void *dst, const void *src, uint64_t bytes,
                           uint64_t flag, int peer, const char *what) {
  pl_wait_t w = pl_dev_wait_spec(a, 1);
  int st = pl_pkt_get_part(dst, src, bytes, flag, PL_READY_EPOCH, &w, threadIdx.x, blockDim.x);
  if (st && st != PL_WAIT_GROUP) pl_dev_fail(a, st, peer, what);
  __syncthreads();
  return a->sh->err;
}

/* pkt_get without the final barrier, its packets spread from member `base` on, so that a series
 * of calls (one per source) has every member poll a different packet, all sources at once; errors
 * are recorded in the CTA's sticky error, which pl_dev_pkt_sync returns after its barrier. */
PL_DEV int pl_dev_pkt_get_async(pl_atom_t *a, void *dst, const void *src, uint64_t bytes,
                                uint64_t flag, int peer, const char *what, uint64_t base) {
  pl_wait_t w = pl_dev_wait_spec(a, 1);
  uint32_t nt = blockDim.x, first = (threadIdx.x + nt - (uint32_t)(base % nt)) % nt;
  int st = pl_pkt_get_part(dst, src, bytes, flag, PL_READY_EPOCH, &w, first, nt);
  if (st && st != PL_WAIT_GROUP) pl_dev_fail(a, st, peer, what);
  return 0;
}
PL_DEV int pl_dev_pkt_sync(pl_atom_t *a) {
  __syncthreads();
  return a->sh->err;
}

/* ---- the atom interface of snac.h ------------------------------------------------------------
 * SNAC's functions are __host__ __device__ (one header for both datapaths); these wrappers give
 * them something to call in the host pass of nvcc, where they are never run. */
#ifdef __CUDA_ARCH__
#define PL_ATOM_CALL(dev_call, host_value) return dev_call
#else
#define PL_ATOM_CALL(dev_call, host_value) return host_value
#endif
#define PL_ATOM static __host__ __device__ __forceinline__

PL_ATOM int pl_atom_await(pl_atom_t *a, const uint64_t *flag, uint64_t value, int peer,
                          const char *what) {
  PL_ATOM_CALL(pl_dev_await(a, flag, value, peer, what), PURLIN_ERR_INTERNAL);
}
PL_ATOM void pl_atom_publish(pl_atom_t *a, uint64_t *flag, uint64_t value, int peer) {
  PL_ATOM_CALL(pl_dev_publish(a, flag, value, peer), (void)0);
}
PL_ATOM void pl_atom_ring(pl_atom_t *a, int peer) {}
PL_ATOM int pl_atom_is_leader(pl_atom_t *a) { PL_ATOM_CALL(pl_dev_is_leader(a), 1); }
/* A barrier of the group (the CTA): what one member wrote to shared memory is seen by all. */
PL_ATOM void pl_atom_sync(pl_atom_t *a) {
#ifdef __CUDA_ARCH__
  __syncthreads();
#endif
}
/* Every thread writes the same pointers, and a barrier separates a reduction's reads from the
 * next writes, so one array in shared memory serves the CTA (per-thread arrays spilled). */
PL_ATOM const void **pl_atom_srcs(pl_atom_t *a) { return a->sh->srcs; }
PL_ATOM char *pl_atom_scratch(pl_atom_t *a, int i) { return a->scratch + (size_t)i * PL_SNAC_SEG; }
PL_ATOM void *pl_atom_sym(pl_atom_t *a, int peer, uint64_t id, uint64_t off, uint64_t bytes) {
  PL_ATOM_CALL(pl_dev_sym(a, peer, id, off, bytes), NULL);
}
PL_ATOM void pl_atom_copy(pl_atom_t *a, void *dst, const void *src, uint64_t bytes) {
  PL_ATOM_CALL(pl_dev_copy(a, dst, src, bytes), (void)0);
}
PL_ATOM void pl_atom_reduce(pl_atom_t *a, void *dst, const void *const *srcs, int n,
                            uint64_t count, int dtype, int op, int divisor) {
  PL_ATOM_CALL(pl_dev_reduce(a, dst, srcs, n, count, dtype, op, divisor), (void)0);
}
PL_ATOM void pl_atom_pkt_put(pl_atom_t *a, void *dst, const void *src, uint64_t bytes,
                             uint64_t flag) {
  PL_ATOM_CALL(pl_dev_pkt_put(a, dst, src, bytes, flag), (void)0);
}
PL_ATOM int pl_atom_pkt_get_async(pl_atom_t *a, void *dst, const void *src, uint64_t bytes,
                                  uint64_t flag, int peer, const char *what, uint64_t base) {
  PL_ATOM_CALL(pl_dev_pkt_get_async(a, dst, src, bytes, flag, peer, what, base),
               PURLIN_ERR_INTERNAL);
}
PL_ATOM int pl_atom_pkt_sync(pl_atom_t *a) { PL_ATOM_CALL(pl_dev_pkt_sync(a), PURLIN_ERR_INTERNAL); }
PL_ATOM int pl_atom_pkt_get(pl_atom_t *a, void *dst, const void *src, uint64_t bytes,
                            uint64_t flag, int peer, const char *what) {
  PL_ATOM_CALL(pl_dev_pkt_get(a, dst, src, bytes, flag, peer, what), PURLIN_ERR_INTERNAL);
}

#endif
