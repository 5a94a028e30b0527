/*
 * purlin.h -- the public host API of purlin, plain C11 (no CUDA header needed).
 *
 * purlin moves and reduces data across the ranks of one scale-up domain: the GPUs of one
 * NVLink/NVSwitch server, or processes on one machine through the host datapath. Every collective is
 * one launch on the caller's stream (GPU) or one synchronous call (host datapath).
 *
 * Conventions
 *   - Counts are in elements, never bytes. Offsets ("displacements") are in elements.
 *   - Output parameters come last and are written only on success.
 *   - Every function returns a purlin_status_t; purlin_comm_last_error() gives the text of the
 *     last error on a communicator (what, which rank, which argument, which call).
 *   - Bad arguments are refused before anything is launched or changed: the communicator stays
 *     usable. A peer that dies or never arrives gives PURLIN_ERR_TIMEOUT / PURLIN_ERR_REMOTE, after
 *     which the communicator is aborted and must be destroyed. Ranks that disagree on a call get
 *     PURLIN_ERR_MISMATCH on every rank, and the communicator stays usable.
 *   - Host datapath: `stream` must be NULL; calls are synchronous and return when this rank's part of
 *     the collective is complete (its output is written and its input may be reused).
 */
#ifndef PURLIN_H
#define PURLIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PURLIN_VERSION_MAJOR 0
#define PURLIN_VERSION_MINOR 1
#define PURLIN_VERSION_PATCH 0
/** The version as one integer: major * 10000 + minor * 100 + patch. */
#define PURLIN_VERSION \
  (PURLIN_VERSION_MAJOR * 10000 + PURLIN_VERSION_MINOR * 100 + PURLIN_VERSION_PATCH)

/* ---------------------------------------------------------------------------------------------
 * Status codes: one table gives the enum, the names and the strings.
 * X(NAME, value, "description")
 * ------------------------------------------------------------------------------------------- */
#define PURLIN_STATUS_MAP(X)                                                                       \
  X(OK, 0, "success")                                                                              \
  X(ERR_INVALID_ARGUMENT, -1, "invalid argument")                                                 \
  X(ERR_INVALID_USAGE, -2, "invalid usage (wrong order of calls, or communicator aborted)")       \
  X(ERR_MISMATCH, -3, "ranks disagree on the arguments of a collective")                          \
  X(ERR_TIMEOUT, -4, "a peer did not answer within the deadline (PURLIN_TIMEOUT_MS)")             \
  X(ERR_REMOTE, -5, "a peer failed, died or aborted")                                              \
  X(ERR_SYSTEM, -6, "a system call failed")                                                        \
  X(ERR_CUDA, -7, "a CUDA call failed")                                                            \
  X(ERR_NO_MEMORY, -8, "out of memory")                                                            \
  X(ERR_UNSUPPORTED, -9, "not supported on this datapath or build")                               \
  X(ERR_INTERNAL, -10, "internal error (a bug in purlin)")

typedef enum {
#define PURLIN_STATUS_ENUM_(name, value, text) PURLIN_##name = value,
  PURLIN_STATUS_MAP(PURLIN_STATUS_ENUM_)
#undef PURLIN_STATUS_ENUM_
} purlin_status_t;

/** The name of a status ("PURLIN_ERR_TIMEOUT"); "PURLIN_UNKNOWN_STATUS" for other values. */
const char *purlin_status_name(purlin_status_t status);
/** A one-line description of a status; never NULL. */
const char *purlin_status_string(purlin_status_t status);

/* ---------------------------------------------------------------------------------------------
 * Element types and reduction operators.
 * X(NAME, suffix, bytes)
 * ------------------------------------------------------------------------------------------- */
#define PURLIN_DTYPE_MAP(X)                                                                        \
  X(F32, f32, 4)                                                                                   \
  X(F16, f16, 2)                                                                                   \
  X(BF16, bf16, 2)                                                                                 \
  X(F64, f64, 8)                                                                                   \
  X(I8, i8, 1)                                                                                     \
  X(U8, u8, 1)                                                                                     \
  X(I32, i32, 4)                                                                                   \
  X(U32, u32, 4)                                                                                   \
  X(I64, i64, 8)                                                                                   \
  X(U64, u64, 8)                                                                                   \
  X(FP8_E4M3, fp8_e4m3, 1)                                                                         \
  X(FP8_E5M2, fp8_e5m2, 1)

typedef enum {
#define PURLIN_DTYPE_ENUM_(name, suffix, bytes) PURLIN_##name,
  PURLIN_DTYPE_MAP(PURLIN_DTYPE_ENUM_)
#undef PURLIN_DTYPE_ENUM_
  PURLIN_DTYPE_COUNT
} purlin_dtype_t;

/** Bytes per element of a dtype; 0 for an invalid dtype. */
size_t purlin_dtype_size(purlin_dtype_t dtype);
/** Short name of a dtype ("bf16"); "invalid" for an invalid dtype. */
const char *purlin_dtype_name(purlin_dtype_t dtype);

/*
 * Reduction operators. Floating types (f16 bf16 fp8 f32) accumulate in f32 and f64 in f64; integer
 * types accumulate exactly with wrap-around at the type's width. AVG is SUM divided by the number of
 * ranks (integer division, truncating toward zero, for integer types). MIN/MAX ignore a NaN operand
 * unless both are NaN (IEEE minNum/maxNum). fp8 results saturate to the largest finite value.
 */
#define PURLIN_OP_MAP(X)                                                                           \
  X(SUM, sum)                                                                                      \
  X(PROD, prod)                                                                                    \
  X(MIN, min)                                                                                      \
  X(MAX, max)                                                                                      \
  X(AVG, avg)

typedef enum {
#define PURLIN_OP_ENUM_(name, suffix) PURLIN_##name,
  PURLIN_OP_MAP(PURLIN_OP_ENUM_)
#undef PURLIN_OP_ENUM_
  PURLIN_OP_COUNT
} purlin_op_t;

/** Short name of an op ("sum"); "invalid" for an invalid op. */
const char *purlin_op_name(purlin_op_t op);

/*
 * Reduction modes, chosen per call.
 * DETERMINISTIC: every output element is one accumulator fed in ascending rank order, whatever the
 *   size, regime, chunking or world layout: the same inputs give the same bits on every rank, every
 *   run, every message size, on the host datapath and on the GPU.
 * NONDETERMINISTIC (default): the order of accumulation may vary between calls and sizes.
 */
typedef enum { PURLIN_NONDETERMINISTIC = 0, PURLIN_DETERMINISTIC = 1 } purlin_mode_t;

/* ---------------------------------------------------------------------------------------------
 * Communicator configuration. Initialise with PURLIN_CONFIG_INIT, then change fields; a field left
 * at its "default" value takes the PURLIN_* environment setting (see `purlin-info`), then the
 * built-in default. `size` and `version` let the struct grow without breaking callers.
 * ------------------------------------------------------------------------------------------- */
typedef enum {
  PURLIN_DATAPATH_AUTO = 0, /* the GPU datapath when a GPU is usable, else the host datapath */
  PURLIN_DATAPATH_HOST = 1, /* ranks are processes, memory is host memory (memfd) */
  PURLIN_DATAPATH_CUDA = 2  /* ranks drive GPUs; memory is device memory */
} purlin_datapath_t;

#define PURLIN_CONFIG_VERSION 1
typedef struct {
  size_t size;              /* sizeof(purlin_config_t), set by PURLIN_CONFIG_INIT */
  unsigned version;         /* PURLIN_CONFIG_VERSION, set by PURLIN_CONFIG_INIT */
  purlin_datapath_t datapath; /* default PURLIN_DATAPATH_AUTO (env PURLIN_DATAPATH) */
  int device;               /* CUDA device ordinal; -1: local rank modulo the number of devices */
  int timeout_ms;           /* deadline of every wait; 0: env PURLIN_TIMEOUT_MS */
  size_t staging_bytes;     /* staging memory per rank; 0: env PURLIN_STAGING_BYTES */
  const char *name;         /* label used in logs and errors; NULL: "purlin" */
} purlin_config_t;

#define PURLIN_CONFIG_INIT                                                                         \
  { sizeof(purlin_config_t), PURLIN_CONFIG_VERSION, PURLIN_DATAPATH_AUTO, -1, 0, 0, NULL }

/* Per-call options. NULL means all defaults. Initialise with PURLIN_OPTS_INIT. */
#define PURLIN_OPTS_VERSION 1
typedef struct {
  size_t size;          /* sizeof(purlin_opts_t) */
  unsigned version;     /* PURLIN_OPTS_VERSION */
  purlin_mode_t mode;   /* reduction mode, default PURLIN_NONDETERMINISTIC */
  int counts_on_device; /* V variants: counts/displacements are in device memory (capturable) */
} purlin_opts_t;

#define PURLIN_OPTS_INIT { sizeof(purlin_opts_t), PURLIN_OPTS_VERSION, PURLIN_NONDETERMINISTIC, 0 }

/* ---------------------------------------------------------------------------------------------
 * Communicators
 * ------------------------------------------------------------------------------------------- */
typedef struct purlin_comm *purlin_comm_t;

/** Opaque rendezvous token: made once (usually by rank 0) and given to every rank. */
typedef struct {
  char internal[128];
} purlin_unique_id_t;

/**
 * Make a unique id. The calling process hosts the rendezvous (a Unix-domain socket with a random
 * name and a random secret) until every rank of the communicator has joined, so it must stay alive
 * until then. Only processes of the same user that present the id's secret may join.
 * Errors: INVALID_ARGUMENT (id NULL), SYSTEM.
 */
purlin_status_t purlin_get_unique_id(purlin_unique_id_t *id);

/**
 * Create a communicator of `nranks` ranks; this process is `rank` (0 <= rank < nranks). Collective:
 * every rank calls it with the same id and nranks. `config` may be NULL (defaults).
 * Errors: INVALID_ARGUMENT (NULL, rank/nranks out of range, bad config), TIMEOUT (a rank never
 * joined), MISMATCH (ranks disagree on nranks or datapath), SYSTEM, NO_MEMORY, CUDA.
 */
purlin_status_t purlin_comm_init_rank(purlin_comm_t *comm, int nranks, purlin_unique_id_t id,
                                      int rank, const purlin_config_t *config);

/**
 * Create a communicator from launcher variables: purlinrun (PURLIN_RANK, PURLIN_WORLD_SIZE,
 * PURLIN_UNIQUE_ID), torchrun (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), Open MPI /
 * MPICH (OMPI_COMM_WORLD_*, PMI_*) and Slurm (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID).
 * Errors: as purlin_comm_init_rank, and INVALID_USAGE when no launcher variables are found.
 */
purlin_status_t purlin_comm_init_env(purlin_comm_t *comm, const purlin_config_t *config);

/**
 * Destroy a communicator: waits for nothing remote, unmaps and frees all its memory (buffers from
 * purlin_mem_alloc included). Safe after an error or abort. NULL is accepted (no-op).
 */
purlin_status_t purlin_comm_destroy(purlin_comm_t comm);

/**
 * Abort a communicator: every wait of every rank on it returns PURLIN_ERR_REMOTE soon after
 * (naming this rank). May be called from another thread while a collective runs. The communicator
 * must then be destroyed.
 */
purlin_status_t purlin_comm_abort(purlin_comm_t comm);

/** The first asynchronous error of the communicator (PURLIN_OK when none), into *status. */
purlin_status_t purlin_comm_get_async_error(purlin_comm_t comm, purlin_status_t *status);

/**
 * The text of the last error on this communicator, in this thread's or any thread's last call:
 * what failed, which rank, which call, which argument and its value. "" when none. Never NULL; the
 * pointer stays valid until the next call on the communicator.
 */
const char *purlin_comm_last_error(purlin_comm_t comm);

/** Rank of this process in the communicator, into *rank. */
purlin_status_t purlin_comm_rank(purlin_comm_t comm, int *rank);
/** Number of ranks of the communicator, into *nranks. */
purlin_status_t purlin_comm_size(purlin_comm_t comm, int *nranks);
/** The datapath the communicator runs on (HOST or CUDA), into *datapath. */
purlin_status_t purlin_comm_datapath(purlin_comm_t comm, purlin_datapath_t *datapath);

/* ---------------------------------------------------------------------------------------------
 * Collectives. In place when send == recv (AllReduce, AllToAll) or when send is the rank's own
 * slice of recv (AllGather: send == recv + rank*sendcount; ReduceScatter: recv == send +
 * rank*recvcount). Other overlaps of send and recv are refused. `stream` is a cudaStream_t (GPU)
 * or NULL (host datapath). `opts` may be NULL.
 * Every collective errors with INVALID_ARGUMENT on bad input (NULL buffer with a non-zero count,
 * count overflow, bad dtype or op, overlapping buffers), MISMATCH when ranks disagree, TIMEOUT and
 * REMOTE when a peer fails; INVALID_USAGE on an aborted communicator.
 * ------------------------------------------------------------------------------------------- */

/** recv[i] = op over ranks of send[i], for i < count, on every rank. */
purlin_status_t purlin_all_reduce(const void *send, void *recv, size_t count, purlin_dtype_t dtype,
                                  purlin_op_t op, purlin_comm_t comm, void *stream,
                                  const purlin_opts_t *opts);

/** recv[r*sendcount + i] = send of rank r [i]: recv holds nranks*sendcount elements. */
purlin_status_t purlin_all_gather(const void *send, void *recv, size_t sendcount,
                                  purlin_dtype_t dtype, purlin_comm_t comm, void *stream,
                                  const purlin_opts_t *opts);

/** recv[i] = op over ranks of send[rank*recvcount + i]: send holds nranks*recvcount elements. */
purlin_status_t purlin_reduce_scatter(const void *send, void *recv, size_t recvcount,
                                      purlin_dtype_t dtype, purlin_op_t op, purlin_comm_t comm,
                                      void *stream, const purlin_opts_t *opts);

/** recv[r*count + i] = send of rank r [rank*count + i]: both hold nranks*count elements. */
purlin_status_t purlin_all_to_all(const void *send, void *recv, size_t count, purlin_dtype_t dtype,
                                  purlin_comm_t comm, void *stream, const purlin_opts_t *opts);

/**
 * AllGatherV: recv[rdispls[r] + i] = send of rank r [i], i < recvcounts[r]. sendcount must equal
 * recvcounts[rank]; recvcounts must be the same on every rank (MISMATCH otherwise). rdispls NULL:
 * exclusive prefix sums of recvcounts.
 */
purlin_status_t purlin_all_gather_v(const void *send, size_t sendcount, void *recv,
                                    const size_t *recvcounts, const size_t *rdispls,
                                    purlin_dtype_t dtype, purlin_comm_t comm, void *stream,
                                    const purlin_opts_t *opts);

/**
 * ReduceScatterV: recv[i] = op over ranks of send[sdispls[rank] + i], i < recvcounts[rank].
 * recvcounts must be the same on every rank. sdispls NULL: exclusive prefix sums of recvcounts.
 */
purlin_status_t purlin_reduce_scatter_v(const void *send, void *recv, const size_t *recvcounts,
                                        const size_t *sdispls, purlin_dtype_t dtype,
                                        purlin_op_t op, purlin_comm_t comm, void *stream,
                                        const purlin_opts_t *opts);

/**
 * AllToAllV: rank r sends sendcounts[p] elements from send + sdispls[p] to rank p, which receives
 * them at recv + rdispls[r]. sendcounts[p] on rank r must equal recvcounts[r] on rank p (MISMATCH
 * otherwise). Displacements NULL: exclusive prefix sums of the counts. In place (send == recv)
 * requires sendcounts == recvcounts and sdispls == rdispls.
 */
purlin_status_t purlin_all_to_all_v(const void *send, const size_t *sendcounts,
                                    const size_t *sdispls, void *recv, const size_t *recvcounts,
                                    const size_t *rdispls, purlin_dtype_t dtype,
                                    purlin_comm_t comm, void *stream, const purlin_opts_t *opts);

/* ---------------------------------------------------------------------------------------------
 * Peer-accessible memory. Collectives whose buffers come from here skip staging (zero copy).
 * ------------------------------------------------------------------------------------------- */

/**
 * Allocate `bytes` of memory that every peer of the communicator can read and write (host datapath:
 * shared memory; GPU: cuMem memory mapped by every peer). Collective: every rank calls it, in the
 * same order, with the same size (MISMATCH otherwise). The pointer is 256-byte aligned.
 * Errors: INVALID_ARGUMENT (bytes 0, ptr NULL), NO_MEMORY, SYSTEM, CUDA, MISMATCH.
 */
purlin_status_t purlin_mem_alloc(purlin_comm_t comm, size_t bytes, void **ptr);

/** Free memory from purlin_mem_alloc. Collective. NULL is accepted. */
purlin_status_t purlin_mem_free(purlin_comm_t comm, void *ptr);

/**
 * Register `bytes` of ordinary device memory at `ptr` (cudaMalloc, PyTorch's caching allocator)
 * so that every peer maps it (CUDA IPC): collectives whose buffers lie inside a registered range
 * skip staging (zero copy), as on purlin_mem_alloc buffers, and purlin_device_handle accepts it.
 * Collective: every rank calls it, in the same order, with the same `bytes` (MISMATCH otherwise);
 * each rank passes its own pointer (any offset inside its allocation). Blocking, not capturable;
 * register once and reuse. Deregister (collective) before the memory is freed: a peer may read
 * it until then. CUDA datapath only.
 * Errors: INVALID_ARGUMENT (ptr NULL, bytes 0, not device memory of this rank's GPU, the range
 * past the end of its allocation, or overlapping a registered or purlin_mem_alloc range; on any
 * rank: every rank fails, naming it), UNSUPPORTED (host datapath; memory that CUDA IPC cannot
 * export, such as cuMem / expandable-segment allocations), MISMATCH, CUDA, NO_MEMORY (more than
 * 1024 buffers registered and allocated at once).
 */
purlin_status_t purlin_mem_register(purlin_comm_t comm, void *ptr, size_t bytes);

/**
 * Deregister a range registered by purlin_mem_register at `ptr` (the same pointer). Collective:
 * every rank deregisters the same registration (MISMATCH otherwise); waits for this rank's work
 * on the device, then unmaps the peers' memory. NULL is accepted (no-op on every rank).
 */
purlin_status_t purlin_mem_deregister(purlin_comm_t comm, void *ptr);

/* ---------------------------------------------------------------------------------------------
 * Device handles: communication inside the caller's own kernels (include/purlin_device.cuh,
 * docs/device-api.md). CUDA datapath only.
 * ------------------------------------------------------------------------------------------- */

#define PURLIN_DEV_MAX_RANKS 72

/**
 * What a kernel needs to reach every rank of a communicator: plain data, passed to kernels by
 * value (about 1.2 KiB). Valid until the buffer is freed or the communicator destroyed. Read by
 * the functions of purlin_device.cuh; the fields are documented so that kernels may use them too.
 */
typedef struct {
  int32_t rank, world;
  uint64_t bytes;                         /* bytes of the buffer on each rank (0: no buffer) */
  void *peer[PURLIN_DEV_MAX_RANKS];       /* the buffer of rank r, mapped here; [rank] is ours */
  uint64_t *flags[PURLIN_DEV_MAX_RANKS];  /* rank r's user flags, mapped here: nflags words, zero
                                             at init, shared by every handle of the communicator */
  uint64_t nflags;
  uint64_t *seq;                          /* this rank's launch sequence (purlin_dev_seq_*) */
  uint32_t *seq_count;                    /* blocks of the running launch that have ended */
  const uint64_t *abort;                  /* this rank's abort word: non-zero once aborted */
  uint64_t timeout_ns;                    /* PURLIN_TIMEOUT_MS, in ns */
} purlin_dev_handle_t;

/**
 * Fill *handle for `bytes` of purlin_mem_alloc memory, or of a range registered with
 * purlin_mem_register, at `buf` (any address inside a buffer, with
 * the range inside it; buf NULL and bytes 0: flags only). peer[r] is the same offset in rank r's
 * buffer. Local: no communication, any rank may call it at any time. Errors: INVALID_ARGUMENT
 * (comm or handle NULL; buf not from purlin_mem_alloc of this communicator, or the range past its
 * end), UNSUPPORTED (host datapath), INVALID_USAGE (aborted communicator).
 */
purlin_status_t purlin_device_handle(purlin_comm_t comm, void *buf, size_t bytes,
                                     purlin_dev_handle_t *handle);

/** The library's version (PURLIN_VERSION) into *version. */
purlin_status_t purlin_get_version(int *version);

#ifdef __cplusplus
}
#endif
#endif /* PURLIN_H */
