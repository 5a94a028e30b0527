/* cuda_dp.h -- the CUDA datapath as the rest of the library sees it: plain C, no CUDA header.
 * Built from src/cuda/ when nvcc is present; src/cuda_stub.c answers PURLIN_ERR_UNSUPPORTED
 * otherwise. Every function sets the communicator's last error (pl_comm_fail) when it fails. */
#ifndef PL_CUDA_DP_H
#define PL_CUDA_DP_H

#include <stddef.h>

#include "layout.h"
#include "purlin.h"

#ifdef __cplusplus
extern "C" {
#endif

struct purlin_comm;

/* 1 when the CUDA driver loads and at least one device is visible; cheap after the first call. */
int pl_cuda_available(void);

/* Pick the device (comm->device if >= 0, else local_rank % devices; stored in comm->device), check that every pair of ranks can
 * reach each other's memory, allocate and map the symmetric workspace (control blocks, packet
 * windows, staging) on every rank, zeroed. Collective. Errors: CUDA, UNSUPPORTED (no VMM or no
 * POSIX fd export), SYSTEM (bootstrap), NO_MEMORY. */
purlin_status_t pl_cuda_init(struct purlin_comm *comm, size_t staging_bytes);
/* Wait for this rank's work on the device, unmap and free everything. Safe after a failed init. */
void pl_cuda_fini(struct purlin_comm *comm);

/* Launch one call on `stream` (a cudaStream_t; NULL: the legacy default stream). Asynchronous:
 * errors found on the device (TIMEOUT, REMOTE, MISMATCH) are recorded there and reported by a later
 * call or by pl_cuda_async_error. Returns a fatal error recorded by an earlier call, if any,
 * without launching. Capturable in a CUDA graph. */
purlin_status_t pl_cuda_run(struct purlin_comm *comm, const pl_call_t *call, const void *send,
                            void *recv, int in_place, void *stream);

/* opts.counts_on_device: `p` (V counts or displacements, argument `name` of `fn`) must be readable
 * by this communicator's device (device, managed, or mapped pinned host memory).
 * INVALID_ARGUMENT otherwise. Enqueues nothing (allowed during stream capture). */
purlin_status_t pl_cuda_check_counts(struct purlin_comm *comm, const void *p, const char *fn,
                                     const char *name);

/* Peer-accessible device memory (cuMem, exported as POSIX fds, mapped by every rank). Collective;
 * the caller has checked that every rank asks for the same size. */
purlin_status_t pl_cuda_mem_alloc(struct purlin_comm *comm, size_t bytes, void **ptr);
/* Frees a purlin_mem_alloc buffer, or closes a registered range's peer mappings. */
purlin_status_t pl_cuda_mem_free(struct purlin_comm *comm, void *ptr);
/* purlin_mem_register: every rank's [ptr, +bytes) of ordinary device memory mapped by every rank
 * (CUDA IPC of its allocation), or all fail. Collective; checks every rank's arguments itself. */
purlin_status_t pl_cuda_mem_register(struct purlin_comm *comm, void *ptr, size_t bytes);
/* purlin_mem_deregister, after the caller checked that every rank names the same registration:
 * waits for this rank's device, then for every rank's (a bootstrap barrier: no peer still reads
 * the memory when any rank returns), then closes the peer mappings. */
purlin_status_t pl_cuda_mem_deregister(struct purlin_comm *comm, void *ptr);

/* The device-side error record: a fatal error (TIMEOUT, REMOTE, INTERNAL; sticky, marks the
 * communicator aborted) or else a MISMATCH not yet reported (reported once). PURLIN_OK if none.
 * Reads pinned host memory: no synchronisation, so it sees only calls that have finished. */
purlin_status_t pl_cuda_async_error(struct purlin_comm *comm);

/* purlin_comm_abort on the CUDA datapath: write the abort word into every rank's control block
 * (through a private stream, so it lands even while this rank's kernel spins). */
void pl_cuda_abort(struct purlin_comm *comm, unsigned long long abort_info);

#ifdef __cplusplus
}
#endif
#endif
