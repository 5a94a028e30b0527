/* shm.h -- shared host memory between the ranks: a memfd each, passed over the bootstrap and
 * mapped by every rank (the host datapath's workspace and purlin_mem_alloc buffers; the CUDA
 * datapath's exit marks). Host memory stays readable in every mapping after its owner ended. */
#ifndef PL_SHM_H
#define PL_SHM_H

#include <stddef.h>

#include "purlin.h"

#ifdef __cplusplus
extern "C" {
#endif

struct purlin_comm;

/* A memfd of `bytes` (named `what`) in *fd. SYSTEM or NO_MEMORY, with the last error set. */
purlin_status_t pl_memfd(struct purlin_comm *comm, const char *what, size_t bytes, int *fd);
/* Collective: every rank passes its memfd; bases[r] gets rank r's `bytes`, mapped read-write.
 * Does not close myfd. On failure nothing stays mapped. */
purlin_status_t pl_map_all(struct purlin_comm *comm, int myfd, size_t bytes, char **bases);

#ifdef __cplusplus
}
#endif
#endif
