/* comm.h -- the communicator (internal). */
#ifndef PL_COMM_H
#define PL_COMM_H

#include <pthread.h>
#include <stdarg.h>
#include <sys/types.h>

#include "bootstrap.h"
#include "plan.h"
#include "purlin.h"

#define PL_ERRLEN 1024

/* A peer-mapped buffer: mapped at base[r] here for every rank r. */
enum { PL_SYM_ALLOC = 0, PL_SYM_REG = 1 };
typedef struct {
  char *base[PL_MAX_WORLD];
  size_t bytes, mapped;
  int used;
  int kind; /* PL_SYM_ALLOC: purlin_mem_alloc; PL_SYM_REG: purlin_mem_register (CUDA IPC) */
} pl_sym_t;

struct pl_host_exec; /* host/host.h */
struct pl_cuda_dp;   /* cuda/cuda_dp.cu */

struct purlin_comm {
  int rank, world, local_rank;
  purlin_datapath_t datapath;
  int timeout_ms;
  char name[32];
  pl_bootstrap_t *bs;
  pid_t pids[PL_MAX_WORLD];
  int pidfds[PL_MAX_WORLD];

  pl_ws_geom_t geom;
  pl_tune_t tune;
  char *ws[PL_MAX_WORLD]; /* every rank's workspace, mapped here */
  uint64_t epoch;         /* calls launched so far; the same on every rank */

  pl_sym_t *syms;
  int nsyms;

  struct pl_host_exec *host;
  struct pl_cuda_dp *cuda; /* CUDA datapath (cuda/cuda_dp.h) */
  int device;              /* CUDA device; -1 until chosen */

  pthread_mutex_t lock; /* guards last_error */
  char last_error[PL_ERRLEN];
  char last_error_copy[PL_ERRLEN];
  int aborted;                 /* after TIMEOUT/REMOTE/abort: must be destroyed */
  purlin_status_t async_error; /* first fatal error */
};

/* Record an error on the communicator (and log it once, at ERROR); returns `st`. */
purlin_status_t pl_comm_fail(struct purlin_comm *comm, purlin_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Mark the communicator aborted with `st` and tell every peer (abort word + wake). */
void pl_comm_abort_all(struct purlin_comm *comm, purlin_status_t st, int culprit);

/* Thread-local text of the last error not tied to a communicator (init failures). */
void pl_set_global_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Name of a collective ("all_reduce"). */
const char *pl_coll_name(int coll);

/* Symmetric memory: find the buffer holding [p, p+bytes) (id >= 1, offset), 0 if none. */
int pl_sym_find(const struct purlin_comm *comm, const void *p, size_t bytes, uint64_t *id,
                uint64_t *off);

/* Host datapath (host/). */
purlin_status_t pl_host_init(struct purlin_comm *comm, size_t staging_bytes);
void pl_host_fini(struct purlin_comm *comm);
struct pl_snac_call;
purlin_status_t pl_host_run(struct purlin_comm *comm, const pl_call_t *call, const void *send,
                            void *recv, int in_place);
purlin_status_t pl_host_mem_alloc(struct purlin_comm *comm, size_t bytes, void **ptr);
purlin_status_t pl_host_mem_free(struct purlin_comm *comm, void *ptr);

#endif
