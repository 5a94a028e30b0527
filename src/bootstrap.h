/* bootstrap.h -- rendezvous of the ranks over Unix-domain sockets: unique id, allgather, barrier,
 * file-descriptor passing. Only processes of the same user that present the id's secret may join.
 */
#ifndef PL_BOOTSTRAP_H
#define PL_BOOTSTRAP_H

#include <stddef.h>
#include "purlin.h"

typedef struct pl_bootstrap pl_bootstrap_t;

/* Make an id (random abstract socket name + random 128-bit secret) and start, in this process, the
 * root that hands every joining rank the addresses of the others. The root is a thread of its own
 * (nobody needs to join it) that ends once nranks ranks have joined (or after the timeout). */
purlin_status_t pl_bootstrap_make_id(purlin_unique_id_t *id);

/* Deterministic id for launchers without a way to pass one (torchrun, mpirun, Slurm): every rank
 * calls it with the same `name` (e.g. "torch-<addr>-<port>"); the rank with is_root != 0 starts the
 * root and writes the secret into a file in a 0700 directory of this user; the others wait for that
 * file (up to timeout_ms) and read it. The file is removed once every rank has joined. */
purlin_status_t pl_bootstrap_id_from_name(const char *name, int is_root, int timeout_ms,
                                          purlin_unique_id_t *id);

/* Join: connect to the root, present the secret, learn the peers, connect to every peer. Every rank
 * of the group must call it; fails with PURLIN_ERR_TIMEOUT (naming the missing ranks) after
 * timeout_ms. On success *bs is set. */
purlin_status_t pl_bootstrap_init(const purlin_unique_id_t *id, int rank, int nranks,
                                  int timeout_ms, pl_bootstrap_t **bs);

/* all[r*bytes .. (r+1)*bytes) = rank r's `mine`. Fails with TIMEOUT/REMOTE naming the rank. */
purlin_status_t pl_bootstrap_allgather(pl_bootstrap_t *bs, const void *mine, void *all,
                                       size_t bytes);
purlin_status_t pl_bootstrap_barrier(pl_bootstrap_t *bs);
/* Every rank passes one open fd; fds[r] becomes this process's fd for rank r's (fds[rank] is a dup
 * of myfd). The caller closes them. */
purlin_status_t pl_bootstrap_allgather_fd(pl_bootstrap_t *bs, int myfd, int *fds);
/* Close every socket. NULL is accepted. */
void pl_bootstrap_destroy(pl_bootstrap_t *bs);
/* The text of the last error (which rank, what), "" if none. With bs == NULL: the text of the last
 * failed pl_bootstrap_make_id / _id_from_name / _init of the calling thread (these have no bs to
 * hold it). Errors are also logged with PL_ERROR where they are decided. */
const char *pl_bootstrap_last_error(const pl_bootstrap_t *bs);

/* For tests and debugging: the abstract socket name (without the leading NUL; "@name" in
 * /proc/net/unix) that this rank listened on during init (closed once the mesh is built, but
 * connections accepted from it keep showing the name until they close). */
const char *pl_bootstrap_self_addr(const pl_bootstrap_t *bs);
/* The root's abstract socket name in an id, into addr; 0, or -1 if the id is not valid. */
int pl_bootstrap_id_addr(const purlin_unique_id_t *id, char *addr, size_t len);
/* The file in which pl_bootstrap_id_from_name(name, ...) publishes the id:
 * $XDG_RUNTIME_DIR/purlin/id-<hash> or /tmp/purlin-<uid>/id-<hash>. 0, or -1 if too long. */
int pl_bootstrap_id_file(const char *name, char *path, size_t len);

#endif
