/*
 * purlin_device.cuh -- purlin's public device API: communication inside your own CUDA kernels.
 *
 * A kernel that fuses communication with computation (an AllReduce with the residual add and
 * RMSNorm that follow it, a custom collective) needs four things from the library: where every
 * rank's buffer is, flags to tell peers "ready" and "done", a way to move and reduce bytes, and a
 * clock so that no wait lasts forever. They come in a POD handle, purlin_dev_handle_t (purlin.h),
 * that the host gets once per buffer with purlin_device_handle() and passes to kernels by value.
 * Tutorial and reference: docs/device-api.md.
 *
 * These are the functions purlin's own collectives run on (src/cuda/atom_cuda.cuh calls them; the
 * bodies live in src/cuda/dev_core.cuh): one implementation, not two. Compile with the library's
 * include/ and src/ on the include path (the CMake target purlin_device gives both) and with
 * --fmad=false if the reductions must give purlin's bits.
 *
 * Conventions
 *   - Names carry their cooperation scope: _thread (any one thread), _warp (every thread of a
 *     warp calls it with the same arguments, converged), _block (every thread of the block calls
 *     it with the same arguments; it may contain __syncthreads, so never under a divergent
 *     branch). A _block function that returns a value returns the same value in every thread.
 *   - Memory order is explicit: _release stores and _acquire loads are system scope (.sys), the
 *     scope that orders memory between processes and GPUs; _relaxed is named as such.
 *   - Sizes are in bytes unless a name says count (elements). Flags are uint64_t counters that
 *     only grow; an await is satisfied when the flag is >= the awaited value (wrap-aware).
 *   - Waits return PURLIN_OK, PURLIN_ERR_TIMEOUT (the deadline passed) or PURLIN_ERR_REMOTE (the
 *     communicator was aborted: by purlin_comm_abort, or by a failed purlin collective of any
 *     rank). A deadline is a %globaltimer value in ns (purlin_dev_deadline_thread), or 0 for the
 *     communicator's PURLIN_TIMEOUT_MS counted from the start of the wait.
 *   - Nothing here synchronizes with purlin's own collectives: a kernel that uses the handle and
 *     purlin calls on the same communicator must be ordered with them (one stream).
 *
 * Credits: the packet (8 bytes of data and an 8-byte flag in one 16-byte store) is NCCL's LL
 * protocol idea; the handle of peer pointers and flags passed by value to kernels, and names with
 * their scope and order, follow NVSHMEM and MSCCL++ device handles.
 */
#ifndef PURLIN_DEVICE_CUH
#define PURLIN_DEVICE_CUH

#include <stdint.h>

#include "purlin.h"
#include "cuda/dev_core.cuh"

#define PURLIN_DEV_FN static __device__ __forceinline__

/* ---- clock and deadlines ------------------------------------------------------------------------ */

/** The GPU's global timer (%globaltimer), in ns. The same clock on every GPU of a node only to
 * within its update granularity (about 1 us); use it for deadlines, not for ordering. */
PURLIN_DEV_FN uint64_t purlin_dev_globaltimer_thread(void) { return pl_globaltimer(); }

/** A deadline `timeout_ns` from now (0: the communicator's PURLIN_TIMEOUT_MS), for the waits
 * below. Take one per phase of a kernel: every wait of the phase then shares the same budget. */
PURLIN_DEV_FN uint64_t purlin_dev_deadline_thread(const purlin_dev_handle_t *h,
                                                  uint64_t timeout_ns) {
  return pl_globaltimer() + (timeout_ns ? timeout_ns : h->timeout_ns);
}

/* ---- flags: loads and stores with explicit order -------------------------------------------------- */

/** Store v to *flag with release semantics at system scope: every write this thread made (or
 * observed) before is visible to a thread that reads v with an acquire load. flag may be on any
 * rank (h->flags[r] + i). */
PURLIN_DEV_FN void purlin_dev_store_release_thread(uint64_t *flag, uint64_t v) {
  pl_st_release_sys(flag, v);
}
/** Store v to *flag, relaxed (no ordering of other writes), system scope. */
PURLIN_DEV_FN void purlin_dev_store_relaxed_thread(uint64_t *flag, uint64_t v) {
  pl_st_relaxed_sys(flag, v);
}
/** Load *flag with acquire semantics at system scope: what the writer did before its release store
 * of the value read is visible to this thread afterwards. */
PURLIN_DEV_FN uint64_t purlin_dev_load_acquire_thread(const uint64_t *flag) {
  return pl_ld_acquire_sys(flag);
}
/** Load *flag, relaxed, system scope (for polling; follow with an acquire load before reading the
 * data the flag guards). */
PURLIN_DEV_FN uint64_t purlin_dev_load_relaxed_thread(const uint64_t *flag) {
  return pl_ld_relaxed_sys(flag);
}

/* ---- publish / await ----------------------------------------------------------------------------- */

/** Publish: store v to *flag, release, system scope, by this thread. Orders this thread's earlier
 * writes only; to publish what a whole block wrote use purlin_dev_publish_block. */
PURLIN_DEV_FN void purlin_dev_publish_thread(uint64_t *flag, uint64_t v) {
  pl_st_release_sys(flag, v);
}
/** Publish what the warp wrote: __syncwarp, then lane 0 stores v with release (cumulative: the
 * warp's writes before the call are visible to whoever acquires v). */
PURLIN_DEV_FN void purlin_dev_publish_warp(uint64_t *flag, uint64_t v) {
  __syncwarp();
  if ((threadIdx.x & 31) == 0) pl_st_release_sys(flag, v);
}
/** Publish what the block wrote: __syncthreads, then thread 0 stores v with release (cumulative
 * over every write the block made before the call; the argument is in docs/snac.md). */
PURLIN_DEV_FN void purlin_dev_publish_block(uint64_t *flag, uint64_t v) {
  __syncthreads();
  if (threadIdx.x == 0) pl_st_release_sys(flag, v);
}

/* The stop conditions of a user wait: the communicator's abort word, the deadline. */
PURLIN_DEV_FN pl_wait_t purlin_dev_wait_spec_(const purlin_dev_handle_t *h, uint64_t deadline) {
  pl_wait_t w = {h->abort, NULL, 0, NULL, h->timeout_ns, deadline, 0};
  return w;
}

/** Wait until *flag >= v (wrap-aware), then acquire it (system scope): afterwards this thread sees
 * what the publisher wrote before publishing v. Polls with relaxed loads; checks the abort word
 * and the deadline every 256 polls. Returns PURLIN_OK, PURLIN_ERR_TIMEOUT or PURLIN_ERR_REMOTE. */
PURLIN_DEV_FN int purlin_dev_await_thread(const purlin_dev_handle_t *h, const uint64_t *flag,
                                          uint64_t v, uint64_t deadline) {
  pl_wait_t w = purlin_dev_wait_spec_(h, deadline);
  return pl_wait_flag(flag, v, PL_READY_GE, &w);
}
/** purlin_dev_await_thread by lane 0, then __syncwarp: the whole warp sees the publisher's writes.
 * Returns the status in every lane. */
PURLIN_DEV_FN int purlin_dev_await_warp(const purlin_dev_handle_t *h, const uint64_t *flag,
                                        uint64_t v, uint64_t deadline) {
  int st = 0;
  if ((threadIdx.x & 31) == 0) st = purlin_dev_await_thread(h, flag, v, deadline);
  st = __shfl_sync(0xffffffffu, st, 0);
  __syncwarp();
  return st;
}
/** purlin_dev_await_thread by thread 0, then __syncthreads: the whole block sees the publisher's
 * writes. Returns the status in every thread. */
PURLIN_DEV_FN int purlin_dev_await_block(const purlin_dev_handle_t *h, const uint64_t *flag,
                                         uint64_t v, uint64_t deadline) {
  int st = 0;
  if (threadIdx.x == 0) st = purlin_dev_await_thread(h, flag, v, deadline);
  if (!__syncthreads_or(st != 0)) return PURLIN_OK;
  return __syncthreads_or(st == PURLIN_ERR_REMOTE) ? PURLIN_ERR_REMOTE : PURLIN_ERR_TIMEOUT;
}

/** Barrier of all ranks on flag slot `slot` (the caller owns slots slot .. slot + world - 1 of
 * every rank's flags): thread i < world of the block publishes v to rank i's slot + rank, then
 * the block waits for every rank's v in its own slots. Every rank's block calls it with the same
 * v, which must grow from one use to the next (e.g. the launch's sequence + 1). Publishes what the
 * block wrote before (release), acquires what every rank's block wrote. */
PURLIN_DEV_FN int purlin_dev_barrier_block(const purlin_dev_handle_t *h, uint64_t slot,
                                           uint64_t v, uint64_t deadline) {
  int st = 0;
  __syncthreads();
  for (int r = threadIdx.x; r < h->world; r += blockDim.x)
    pl_st_release_sys(h->flags[r] + slot + h->rank, v);
  for (int r = threadIdx.x; r < h->world && !st; r += blockDim.x)
    st = purlin_dev_await_thread(h, h->flags[h->rank] + slot + r, v, deadline);
  if (!__syncthreads_or(st != 0)) return PURLIN_OK;
  return __syncthreads_or(st == PURLIN_ERR_REMOTE) ? PURLIN_ERR_REMOTE : PURLIN_ERR_TIMEOUT;
}

/* ---- launch sequence ------------------------------------------------------------------------------
 * A kernel that uses flags needs a value that grows from one launch to the next and is the same on
 * every rank. Passing it as a kernel argument breaks CUDA graphs (a replay reuses the captured
 * argument), so, as purlin's own epoch, it lives in device memory: each rank counts the launches of
 * kernels that end with purlin_dev_seq_end_block. Every rank must launch the same sequence of such
 * kernels, ordered on one stream. One counter per communicator, shared by all its handles. */

/** This launch's sequence number (0 for the first): the launches completed so far. Read it at the
 * start of the kernel, in any thread; flag values derived from it (e.g. seq + 1) grow per launch. */
PURLIN_DEV_FN uint64_t purlin_dev_seq_begin_thread(const purlin_dev_handle_t *h) {
  return *(volatile const uint64_t *)h->seq;
}
/** End of the launch, by every block, once the block is done (it calls __syncthreads first): the
 * last block of the grid to get here advances the sequence to seq + 1. Returns 1 in every thread
 * of that last block (every other block of the grid has finished its work then), 0 elsewhere. */
PURLIN_DEV_FN int purlin_dev_seq_end_block(const purlin_dev_handle_t *h, uint64_t seq) {
  int last = 0;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    unsigned nblocks = gridDim.x * gridDim.y * gridDim.z;
    if (atomicAdd(h->seq_count, 1u) == nblocks - 1) {
      __threadfence();
      *h->seq_count = 0;
      *(volatile uint64_t *)h->seq = seq + 1;
      last = 1;
    }
  }
  return __syncthreads_or(last);
}

/* ---- copy ---------------------------------------------------------------------------------------- */

/** Copy `bytes` from src to dst, split among the block's threads: 16-byte vectors when dst and src
 * agree modulo 16 (unrolled by 4, loads in flight), else 4-byte words, else bytes. Either pointer may
 * be a peer's (h->peer[r]). No barrier at the end: __syncthreads (or publish_block) before other
 * threads read dst. dst and src must not overlap unless equal. */
PURLIN_DEV_FN void purlin_dev_copy_block(void *dst, const void *src, uint64_t bytes) {
  pl_copy_vec((char *)dst, (const char *)src, bytes, threadIdx.x, blockDim.x);
}
/** As purlin_dev_copy_block, split among the 32 lanes of the calling warp. */
PURLIN_DEV_FN void purlin_dev_copy_warp(void *dst, const void *src, uint64_t bytes) {
  pl_copy_vec((char *)dst, (const char *)src, bytes, threadIdx.x & 31, 32);
}
/** As purlin_dev_copy_block, by this thread alone. */
PURLIN_DEV_FN void purlin_dev_copy_thread(void *dst, const void *src, uint64_t bytes) {
  pl_copy_vec((char *)dst, (const char *)src, bytes, 0, 1);
}

/* ---- N-to-1 reduce ------------------------------------------------------------------------------- */

/** dst[i] = srcs[0][i] op srcs[1][i] op ... op srcs[n-1][i], for i < count elements of dtype, split
 * among the block's threads. Floating types accumulate in f32 (f64 for F64) fed in ascending s, one
 * accumulator per element, then round once to dtype; integers in 64 bits, wrapping at the type's
 * width; PURLIN_AVG divides the sum by `divisor` (usually n). These are purlin's deterministic
 * AllReduce bits (with --fmad=false), for srcs in rank order, whatever the split. 16-byte vectors
 * when dst and every source have the same address modulo 16; element loops otherwise. dst may be
 * one of the sources (same address), not a partial overlap. No barrier at the end. */
PURLIN_DEV_FN void purlin_dev_reduce_block(void *dst, const void *const *srcs, int n,
                                           uint64_t count, purlin_dtype_t dtype, purlin_op_t op,
                                           int divisor) {
  pl_reduce_vec(dst, srcs, n, count, (int)dtype, (int)op, divisor, threadIdx.x, blockDim.x);
}
/** As purlin_dev_reduce_block, split among the 32 lanes of the calling warp. */
PURLIN_DEV_FN void purlin_dev_reduce_warp(void *dst, const void *const *srcs, int n,
                                          uint64_t count, purlin_dtype_t dtype, purlin_op_t op,
                                          int divisor) {
  pl_reduce_vec(dst, srcs, n, count, (int)dtype, (int)op, divisor, threadIdx.x & 31, 32);
}
/** As purlin_dev_reduce_block, by this thread alone. */
PURLIN_DEV_FN void purlin_dev_reduce_thread(void *dst, const void *const *srcs, int n,
                                            uint64_t count, purlin_dtype_t dtype, purlin_op_t op,
                                            int divisor) {
  pl_reduce_vec(dst, srcs, n, count, (int)dtype, (int)op, divisor, 0, 1);
}
/** The AllReduce of elements [offset, offset + count) of the handle's buffer: dst[i] = op over
 * ranks 0, 1, ..., world-1 (ascending) of rank r's buffer at byte offset + i * size, split among
 * the block's threads (purlin_dev_reduce_block over h->peer[0..world-1]; AVG divides by world).
 * The caller must know every rank's data is there (an await or barrier first) and that no rank
 * overwrites it until every reader is done. No barrier at the end. */
PURLIN_DEV_FN void purlin_dev_reduce_peers_block(const purlin_dev_handle_t *h, void *dst,
                                                 uint64_t offset, uint64_t count,
                                                 purlin_dtype_t dtype, purlin_op_t op) {
  const void *srcs[PURLIN_DEV_MAX_RANKS];
  for (int r = 0; r < h->world; r++) srcs[r] = (const char *)h->peer[r] + offset;
  pl_reduce_vec(dst, srcs, h->world, count, (int)dtype, (int)op, h->world, threadIdx.x,
                blockDim.x);
}

/* ---- packets (NCCL's LL idea) ------------------------------------------------------------------------
 * A packet is 16 bytes: 8 bytes of data and an 8-byte flag, written by one 16-byte store and read by
 * one 16-byte load, so a reader that sees the flag sees the data: no fence, no second round trip.
 * The cost is half the bandwidth; packets are for small messages. The writer must not overwrite a
 * packet with a later flag before the reader has read it (alternate two buffers by sequence parity,
 * as purlin does). Packets must be 16-byte aligned. */
typedef struct {
  uint64_t data, flag;
} purlin_dev_pkt_t;

/** One packet {data, flag}: one 16-byte volatile store (relaxed, system scope). */
PURLIN_DEV_FN void purlin_dev_pkt_store_thread(purlin_dev_pkt_t *p, uint64_t data, uint64_t flag) {
  pl_st_pkt(p, data, flag);
}
/** One packet: one 16-byte volatile load of {data, flag}. */
PURLIN_DEV_FN void purlin_dev_pkt_load_thread(const purlin_dev_pkt_t *p, uint64_t *data,
                                              uint64_t *flag) {
  pl_ld_pkt(p, data, flag);
}
/** Wait until the packet's flag equals `flag` (exact: a packet holds one message at a time), then
 * its data into *data. Checks the abort word and the deadline every 256 polls. Returns PURLIN_OK,
 * PURLIN_ERR_TIMEOUT or PURLIN_ERR_REMOTE. */
PURLIN_DEV_FN int purlin_dev_pkt_await_thread(const purlin_dev_handle_t *h,
                                              const purlin_dev_pkt_t *p, uint64_t flag,
                                              uint64_t deadline, uint64_t *data) {
  pl_wait_t w = purlin_dev_wait_spec_(h, deadline);
  return pl_wait_pkt(p, flag, PL_READY_EQ, &w, data);
}
/** Send `bytes` of src as ceil(bytes / 8) packets at dst (16 bytes per 8 data bytes, the last one
 * zero-padded), each carrying `flag`; split among the block's threads. dst is usually in a peer's
 * memory (h->peer[r] + offset). */
PURLIN_DEV_FN void purlin_dev_pkt_put_block(void *dst, const void *src, uint64_t bytes,
                                            uint64_t flag) {
  pl_pkt_put(dst, src, bytes, flag, threadIdx.x, blockDim.x);
}
/** Receive what purlin_dev_pkt_put_block sent: every thread waits for its own packets (flag equal
 * to `flag`) and writes their data to dst. Ends with __syncthreads, so the block may read dst.
 * Returns PURLIN_OK, PURLIN_ERR_TIMEOUT or PURLIN_ERR_REMOTE in every thread (on an error, dst is
 * partly written). */
PURLIN_DEV_FN int purlin_dev_pkt_get_block(const purlin_dev_handle_t *h, void *dst,
                                           const void *src, uint64_t bytes, uint64_t flag,
                                           uint64_t deadline) {
  pl_wait_t w = purlin_dev_wait_spec_(h, deadline);
  int st = pl_pkt_get_part(dst, src, bytes, flag, PL_READY_EQ, &w, threadIdx.x, blockDim.x);
  if (!__syncthreads_or(st != 0)) return PURLIN_OK;
  return __syncthreads_or(st == PURLIN_ERR_REMOTE) ? PURLIN_ERR_REMOTE : PURLIN_ERR_TIMEOUT;
}

#endif /* PURLIN_DEVICE_CUH */
