/* shm.c -- shared host memory between the ranks (shm.h). */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bootstrap.h"
#include "comm.h"
#include "shm.h"

purlin_status_t pl_map_all(struct purlin_comm *comm, int myfd, size_t bytes, char **bases) {
  int fds[PL_MAX_WORLD];
  purlin_status_t st = pl_bootstrap_allgather_fd(comm->bs, myfd, fds);
  if (st) return pl_comm_fail(comm, st, "exchanging shared memory: %s",
                              pl_bootstrap_last_error(comm->bs));
  for (int r = 0; r < comm->world; r++) {
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fds[r], 0);
    close(fds[r]);
    fds[r] = -1;
    if (p == MAP_FAILED) {
      st = pl_comm_fail(comm, PURLIN_ERR_SYSTEM, "mapping rank %d's memory (%zu bytes): %s", r,
                        bytes, strerror(errno));
      for (int q = r + 1; q < comm->world; q++) close(fds[q]);
      for (int q = 0; q < r; q++) {
        munmap(bases[q], bytes);
        bases[q] = NULL;
      }
      return st;
    }
    bases[r] = (char *)p;
  }
  return PURLIN_OK;
}

purlin_status_t pl_memfd(struct purlin_comm *comm, const char *what, size_t bytes, int *fd) {
  int f = memfd_create(what, MFD_CLOEXEC);
  if (f < 0) return pl_comm_fail(comm, PURLIN_ERR_SYSTEM, "memfd_create: %s", strerror(errno));
  if (ftruncate(f, (off_t)bytes) != 0) {
    close(f);
    return pl_comm_fail(comm, PURLIN_ERR_NO_MEMORY, "ftruncate(%zu): %s", bytes, strerror(errno));
  }
  *fd = f;
  return PURLIN_OK;
}
