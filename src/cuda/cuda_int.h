/* cuda_int.h -- what the CUDA datapath's host code (cuda_dp.cu) and its kernels (kernel_*.cu)
 * share: the kernel's argument block, the device-resident state, the error record. CUDA C++ only
 * (included by .cu files). */
#ifndef PL_CUDA_INT_H
#define PL_CUDA_INT_H

#include <cuda_runtime.h>

/* Packet reductions go through scratch in segments of this many bytes per source: one segment
 * costs two barriers, so larger than the host's (a segment is 8 packets per thread at 256). */
#define PL_SNAC_SEG 32768
#include "snac/snac_types.h"

/* Most threads of one worker group (CTA); a call may launch fewer (pl_tune_t.threads). */
#ifndef PL_CUDA_THREADS
#define PL_CUDA_THREADS 512
#endif
/* Received headers kept in shared memory up to this many words (8 KiB: worlds up to 17). */
#define PL_CUDA_SH_HDR_WORDS 1024
/* Capacity of the device table of purlin_mem_alloc buffers. */
#define PL_CUDA_MAX_SYMS 1024
/* A CTA stopped because another CTA of its call failed (not an error of its own). */
#define PL_CUDA_STOP_SIBLING 1

/* Profile phases: launch gap (previous call's end to this one's start), prologue, notify (header
 * and packets pushed), agree (headers received and checked), consume, epilogue. */
#define PL_PROF_N 6
/* Per communicator, in device memory. The epoch lives here, not in kernel arguments, so that a
 * captured CUDA graph replays correctly (reference/purlin.md section 2). */
typedef struct {
  uint64_t epoch;      /* calls this rank's kernels have completed; advanced by the last CTA */
  uint32_t exit_count; /* CTAs of the running call that have finished */
  int32_t err_claim;   /* the first fatal error wins the error record (atomicCAS here, in device
                          memory: atomics on mapped host memory are not portable) */
  uint32_t pad[12];
  /* PURLIN_PROFILE=1: main lane 0's thread 0 stamps %globaltimer at the phase boundaries of every
   * call and adds the deltas here (docs/tuning.md); printed at destroy */
  uint64_t prof_last_exit;        /* end of the previous call */
  uint64_t prof_calls;             /* calls that started within PL_PROF_GAP_NS of the previous one's
                                     end: back to back in a graph or stream; the host's pauses,
                                     and the waits for late peers after them, would swamp the mean */
  uint64_t prof_sum[PL_PROF_N];   /* ns: the gap and the phases, summed over those calls */
  uint64_t prof_seen;             /* every call that succeeded */
  uint64_t prof_data;             /* ns: a lean reduction's consume until thread 0's first packets
                                     (of sources 0-7) were all there (the rest is work), summed */
  uint64_t prof_data_calls;       /* the calls prof_data sums */
  /* the direct kernel's calls by what the headers said (sh.kinds, bits 0-4: some rank stages, in
   * place, no push, AllToAllV rdispls not packed, AllToAllV packet peers), counted by CTA 0's
   * thread 0 */
  uint32_t dkinds[32];
  /* the direct kernel's CTAs (PURLIN_PROFILE; pl_direct_prof): the running call's stamps, every
   * CTA's thread 0 folding its own in with atomics (PL_DPROF_*: a minimum kept as the maximum of
   * its complement, so that 0 is the empty value), then added to dsum by the call's last CTA */
  uint64_t dcur[7];
  uint64_t dsum[9]; /* ns summed over calls (PL_DPROF_*'s report order), [0]: the calls */
  /* the direct kernel's piece queue (pl_direct_queue): the next piece of the running call, taken
   * by every CTA with atomicAdd, zeroed by the call's last CTA */
  unsigned long long dq;
} pl_cuda_state_t;
/* dcur: ~first CTA's entry, ~first data start, last data start, ~first data end, last data end,
 * the CTAs' data times summed, the longest */
enum { PL_DPROF_T0, PL_DPROF_D0F, PL_DPROF_D0L, PL_DPROF_D1F, PL_DPROF_D1L, PL_DPROF_SUM,
       PL_DPROF_MAX };
#define PL_PROF_GAP_NS 100000ull

/* The device's error record, in mapped pinned host memory so that the host reads it without a
 * synchronisation. Fields are written first, then the status (or mis_seq) after a system fence. */
typedef struct {
  volatile int32_t status; /* fatal status, 0 if none; written last */
  int32_t pad0;
  int32_t peer, coll;
  uint64_t call;           /* the device epoch of the failed call */
  uint64_t abort_info;     /* REMOTE: the abort word's info (who aborted, why) */
  char what[64];
  /* the latest MISMATCH (the communicator stays usable) */
  volatile uint32_t mis_seq; /* incremented after the fields below are written */
  int32_t mis_index, mis_rank_a, mis_rank_b, mis_coll, pad;
  uint64_t mis_val_a, mis_val_b, mis_call;
  char mis_param[32];
} pl_cuda_err_t;

/* The kernel's argument block (by value, < 4 KiB). x.epoch, x.hdr and the V pointers of x.c are
 * filled on the device. */
typedef struct {
  pl_snac_t x;
  uint64_t v[4][PL_MAX_WORLD]; /* scounts, sdispls, rcounts, rdispls (V collectives) */
  pl_cuda_state_t *state;
  uint64_t *hdr;               /* lanes * world * pl_hdr_words(world): headers received, per lane */
  char *scratch;               /* lanes * world * PL_SNAC_SEG bytes: world segments per main lane */
  const uint64_t *symtab;      /* PL_CUDA_MAX_SYMS entries of (1 + world) words: bytes, bases */
  pl_cuda_err_t *err;          /* device pointer of the pinned error record */
  uint64_t timeout_ns;
  int prof;                    /* PURLIN_PROFILE */
  uint32_t backoff_ns;         /* PURLIN_POLL_BACKOFF_NS */
  uint64_t zc_avail;           /* device counts (x.c.counts_dev): send lies in the purlin_mem_alloc
                                  buffer x.sym_send with this many bytes from it; the kernel turns
                                  zero copy on when the extent it derives fits (0: no) */
  uint64_t ar_per;             /* AllReduce: elements per shard (pl_ar_shard_per), so that the lean
                                  kernel's prologue divides nothing */
  int pdl;                     /* lean kernel: PL_PDL_* bits */
  char *dflags;                /* direct kernel: rank q's flag table at dflags + q * dflags_stride
                                  (direct.h) */
  uint64_t dflags_stride;
  int dunroll;                 /* direct kernel, gathers: 16-byte loads in flight per thread */
  int dredb;                   /* direct kernel, 2-byte reductions: sources loaded together */
  int dstream;                 /* direct kernel, gathers: streaming loads and stores */
  uint64_t dqueue;             /* direct kernel, one round of the gathers: the piece queue's
                                  pieces (bytes; 0: a fixed part of every block per CTA) */
  uint32_t dalign;             /* direct kernel, gathers: stores aligned to 16 or 128 bytes */
  int dpush;                   /* direct kernel: AllReduce and ReduceScatterV push, AllToAllV
                                  spreads (only where every rank shares one GPU), where every
                                  output is mapped; the headers' PL_HDR_NOPUSH decide */
  uint64_t dpiece, dslot, drounds; /* direct kernel: pl_direct_plan */
  uint64_t tv_sig;             /* tiny V kernel (pl_tinyv_args): AllGatherV, ReduceScatterV: the
                                  call's signature in the data flags (0: AllToAllV, plain flags) */
  uint32_t tv_words;           /* tiny V kernel: 8-byte words of the call's largest block */
  int tv_check;                /* tiny V kernel: CTA 0 checks the headers after the data */
  int tv_fast;                 /* tiny V kernel: every buffer, place and block 8-byte aligned */
} pl_cuda_args_t;
#define PL_PDL_WAIT 1    /* launched with programmatic dependent launch: griddepcontrol.wait */
#define PL_PDL_RELEASE 2 /* the stream's next lean kernel may be: release it early */

/* One launcher per atom (kernel_<atom>.cu). */
typedef cudaError_t (*pl_cuda_launch_fn)(const pl_cuda_args_t *args, int grid, int threads,
                                         cudaStream_t s);
cudaError_t pl_cuda_launch_700(const pl_cuda_args_t *args, int grid, int threads, cudaStream_t s);
cudaError_t pl_cuda_launch_800(const pl_cuda_args_t *args, int grid, int threads, cudaStream_t s);
cudaError_t pl_cuda_launch_900(const pl_cuda_args_t *args, int grid, int threads, cudaStream_t s);
cudaError_t pl_cuda_launch_1000(const pl_cuda_args_t *args, int grid, int threads, cudaStream_t s);

#endif
