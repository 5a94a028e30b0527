/* comm.c -- communicators: init (by id or from launcher variables), destroy, abort, errors. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "comm.h"
#include "cuda/cuda_dp.h"
#include "launch_env.h"
#include "log.h"
#include "param.h"
#include "snac/snac_types.h"
#include "tune.h"

static _Thread_local char pl_global_error[PL_ERRLEN];

void pl_set_global_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(pl_global_error, sizeof pl_global_error, fmt, ap);
  va_end(ap);
  PL_ERROR("%s", pl_global_error);
}

purlin_status_t pl_comm_fail(struct purlin_comm *comm, purlin_status_t st, const char *fmt, ...) {
  char buf[PL_ERRLEN - 128];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  pthread_mutex_lock(&comm->lock);
  snprintf(comm->last_error, sizeof comm->last_error, "%.31s: rank %d: %.40s: %s", comm->name,
           comm->rank, purlin_status_name(st), buf);
  pthread_mutex_unlock(&comm->lock);
  PL_ERROR("%s", buf);
  return st;
}

void pl_comm_abort_all(struct purlin_comm *comm, purlin_status_t st, int culprit) {
  comm->aborted = 1;
  if (!comm->async_error) comm->async_error = st;
  /* Host memory only: the CUDA datapath keeps its control blocks in device memory. */
  if (!comm->ws[0]) return;
  uint64_t info = (uint64_t)(comm->rank + 1) | (uint64_t)(culprit + 1) << 16 |
                  (uint64_t)(-(int)st & 0xff) << 32;
  if (comm->datapath == PURLIN_DATAPATH_CUDA) {
    pl_cuda_abort(comm, info);
    return;
  }
  if (comm->datapath != PURLIN_DATAPATH_HOST) return;
  for (int r = 0; r < comm->world; r++) {
    pl_ctrl_t *c = (pl_ctrl_t *)comm->ws[r];
    uint64_t zero = 0; /* the first abort wins: its info names the origin */
    __atomic_compare_exchange_n(&c->abort_info, &zero, info, 0, __ATOMIC_SEQ_CST,
                                __ATOMIC_SEQ_CST);
    __atomic_store_n(&c->abort, 1, __ATOMIC_RELEASE);
    for (int l = 0; l < (int)comm->tune.lanes; l++) { /* every lane's doorbell */
      __atomic_fetch_add(&c->door[l].bell, 1u, __ATOMIC_SEQ_CST);
      syscall(SYS_futex, &c->door[l].bell, 1 /* FUTEX_WAKE */, 0x7fffffff, NULL, NULL, 0);
    }
  }
}

/* What every rank must agree on at init. */
typedef struct {
  int32_t world, datapath;
  uint64_t staging_bytes;
  pl_tune_t tune;
  pl_ws_geom_t geom;
} pl_init_info_t;

static purlin_status_t pl_check_config(const purlin_config_t *cfg) {
  if (!cfg) return PURLIN_OK;
  if (cfg->size != sizeof(purlin_config_t) || cfg->version != PURLIN_CONFIG_VERSION) {
    pl_set_global_error("config: size %zu / version %u do not match this library (%zu / %u): "
                        "initialise it with PURLIN_CONFIG_INIT",
                        cfg->size, cfg->version, sizeof(purlin_config_t), PURLIN_CONFIG_VERSION);
    return PURLIN_ERR_INVALID_ARGUMENT;
  }
  if (cfg->datapath < PURLIN_DATAPATH_AUTO || cfg->datapath > PURLIN_DATAPATH_CUDA) {
    pl_set_global_error("config->datapath: %d is not a purlin_datapath_t", (int)cfg->datapath);
    return PURLIN_ERR_INVALID_ARGUMENT;
  }
  if (cfg->timeout_ms < 0) {
    pl_set_global_error("config->timeout_ms: %d is negative", cfg->timeout_ms);
    return PURLIN_ERR_INVALID_ARGUMENT;
  }
  return PURLIN_OK;
}

static purlin_datapath_t pl_pick_datapath(const purlin_config_t *cfg) {
  if (cfg && cfg->datapath != PURLIN_DATAPATH_AUTO) return cfg->datapath;
  const char *e = pl_param_str(PL_PARAM_DATAPATH);
  if (strcmp(e, "host") == 0) return PURLIN_DATAPATH_HOST;
  if (strcmp(e, "cuda") == 0) return PURLIN_DATAPATH_CUDA;
  return pl_cuda_available() ? PURLIN_DATAPATH_CUDA : PURLIN_DATAPATH_HOST;
}

/* Every rank's pid, and a pidfd for each peer (liveness: host waits, the CUDA watchdog). Before
 * the datapath's init, which starts the CUDA watchdog on these pidfds. */
static purlin_status_t pl_exchange_pids(struct purlin_comm *comm) {
  int32_t mine = (int32_t)getpid(), all[PL_MAX_WORLD];
  purlin_status_t st = pl_bootstrap_allgather(comm->bs, &mine, all, sizeof mine);
  if (st) return pl_comm_fail(comm, st, "init: %s", pl_bootstrap_last_error(comm->bs));
  for (int r = 0; r < comm->world; r++) {
    comm->pids[r] = all[r];
    comm->pidfds[r] = -1;
    if (r != comm->rank) comm->pidfds[r] = (int)syscall(SYS_pidfd_open, comm->pids[r], 0);
  }
  return PURLIN_OK;
}

static purlin_status_t pl_exchange_info(struct purlin_comm *comm, size_t staging) {
  pl_init_info_t mine, *all = calloc((size_t)comm->world, sizeof(*all));
  purlin_status_t st;
  if (!all) return pl_comm_fail(comm, PURLIN_ERR_NO_MEMORY, "init info");
  memset(&mine, 0, sizeof mine);
  mine.world = comm->world;
  mine.datapath = (int32_t)comm->datapath;
  mine.staging_bytes = staging;
  mine.tune = comm->tune;
  mine.geom = comm->geom;
  st = pl_bootstrap_allgather(comm->bs, &mine, all, sizeof mine);
  if (st) {
    st = pl_comm_fail(comm, st, "init: %s", pl_bootstrap_last_error(comm->bs));
    goto out;
  }
  for (int r = 0; r < comm->world; r++) {
    if (all[r].world != comm->world || all[r].datapath != mine.datapath ||
        all[r].staging_bytes != staging || memcmp(&all[r].tune, &mine.tune, sizeof mine.tune) ||
        memcmp(&all[r].geom, &mine.geom, sizeof mine.geom)) {
      st = pl_comm_fail(comm, PURLIN_ERR_MISMATCH,
                        "init: rank %d has nranks %d, datapath %d, staging %llu bytes; rank %d has "
                        "%d, %d, %llu (or other PURLIN_* settings differ)",
                        comm->rank, comm->world, mine.datapath, (unsigned long long)staging, r,
                        all[r].world, all[r].datapath, (unsigned long long)all[r].staging_bytes);
      goto out;
    }
  }
out:
  free(all);
  return st;
}

static purlin_status_t pl_comm_setup(struct purlin_comm *c, const purlin_unique_id_t *id,
                                     const purlin_config_t *cfg) {
  purlin_status_t st;
  c->datapath = pl_pick_datapath(cfg);
  pl_log_set_prefix("rank %d/%d pid %d", c->rank, c->world, (int)getpid());
  st = pl_bootstrap_init(id, c->rank, c->world, c->timeout_ms, &c->bs);
  if (st) return pl_comm_fail(c, st, "init: %s", pl_bootstrap_last_error(NULL));
  pl_tune_get(c->datapath, c->world, &c->tune);
  size_t staging = cfg && cfg->staging_bytes ? cfg->staging_bytes : (size_t)c->tune.staging_bytes;
  if ((st = pl_exchange_pids(c))) return st;
  st = c->datapath == PURLIN_DATAPATH_CUDA ? pl_cuda_init(c, staging) : pl_host_init(c, staging);
  if (st) return st;
  if ((st = pl_exchange_info(c, staging))) return st;
  PL_INFO("communicator ready: %d ranks, %s datapath, %llu bytes of workspace per rank", c->world,
          c->datapath == PURLIN_DATAPATH_CUDA ? "CUDA" : "host", (unsigned long long)c->geom.total);
  return PURLIN_OK;
}

purlin_status_t purlin_comm_init_rank(purlin_comm_t *comm, int nranks, purlin_unique_id_t id,
                                      int rank, const purlin_config_t *config) {
  purlin_status_t st;
  if (!comm) {
    pl_set_global_error("purlin_comm_init_rank: comm (the output) is NULL");
    return PURLIN_ERR_INVALID_ARGUMENT;
  }
  if (nranks < 1 || nranks > PL_MAX_WORLD) {
    pl_set_global_error("purlin_comm_init_rank: nranks %d is outside [1, %d]", nranks,
                        PL_MAX_WORLD);
    return PURLIN_ERR_INVALID_ARGUMENT;
  }
  if (rank < 0 || rank >= nranks) {
    pl_set_global_error("purlin_comm_init_rank: rank %d is outside [0, %d)", rank, nranks);
    return PURLIN_ERR_INVALID_ARGUMENT;
  }
  if ((st = pl_check_config(config))) return st;
  struct purlin_comm *c = calloc(1, sizeof(*c));
  if (!c) return PURLIN_ERR_NO_MEMORY;
  pthread_mutex_init(&c->lock, NULL);
  c->rank = rank;
  c->world = nranks;
  c->local_rank = rank;
  c->device = config ? config->device : -1;
  for (int r = 0; r < PL_MAX_WORLD; r++) c->pidfds[r] = -1;
  c->timeout_ms = config && config->timeout_ms ? config->timeout_ms
                                               : (int)pl_param_int(PL_PARAM_TIMEOUT_MS);
  snprintf(c->name, sizeof c->name, "%s", config && config->name ? config->name : "purlin");
  st = pl_comm_setup(c, &id, config);
  if (st) {
    pl_set_global_error("%s", c->last_error);
    purlin_comm_destroy(c);
    return st;
  }
  *comm = c;
  return PURLIN_OK;
}

purlin_status_t purlin_comm_init_env(purlin_comm_t *comm, const purlin_config_t *config) {
  pl_launch_env_t env;
  char err[256] = "";
  purlin_status_t st;
  if (!comm) {
    pl_set_global_error("purlin_comm_init_env: comm (the output) is NULL");
    return PURLIN_ERR_INVALID_ARGUMENT;
  }
  if ((st = pl_check_config(config))) return st;
  int timeout = config && config->timeout_ms ? config->timeout_ms
                                             : (int)pl_param_int(PL_PARAM_TIMEOUT_MS);
  st = pl_launch_env_read(timeout, &env, err, sizeof err);
  if (st) {
    pl_set_global_error("purlin_comm_init_env: %s", err[0] ? err : "no launcher variables found");
    return st;
  }
  st = purlin_comm_init_rank(comm, env.world, env.id, env.rank, config);
  if (st == PURLIN_OK) (*comm)->local_rank = env.local_rank;
  return st;
}

purlin_status_t purlin_comm_destroy(purlin_comm_t comm) {
  if (!comm) return PURLIN_OK;
  for (int i = 0; i < comm->nsyms; i++)
    if (comm->syms[i].used) {
      if (comm->datapath == PURLIN_DATAPATH_CUDA)
        pl_cuda_mem_free(comm, comm->syms[i].base[comm->rank]);
      else
        pl_host_mem_free(comm, comm->syms[i].base[comm->rank]);
    }
  free(comm->syms);
  if (comm->datapath == PURLIN_DATAPATH_CUDA)
    pl_cuda_fini(comm);
  else
    pl_host_fini(comm);
  for (int r = 0; r < PL_MAX_WORLD; r++)
    if (comm->pidfds[r] >= 0) close(comm->pidfds[r]);
  pl_bootstrap_destroy(comm->bs);
  pthread_mutex_destroy(&comm->lock);
  free(comm);
  return PURLIN_OK;
}

purlin_status_t purlin_comm_abort(purlin_comm_t comm) {
  if (!comm) {
    pl_set_global_error("purlin_comm_abort: comm is NULL");
    return PURLIN_ERR_INVALID_ARGUMENT;
  }
  pl_comm_abort_all(comm, PURLIN_ERR_REMOTE, -1);
  pl_comm_fail(comm, PURLIN_ERR_REMOTE, "purlin_comm_abort: aborted by the application");
  return PURLIN_OK;
}

purlin_status_t purlin_comm_get_async_error(purlin_comm_t comm, purlin_status_t *status) {
  if (!comm || !status) {
    if (comm) return pl_comm_fail(comm, PURLIN_ERR_INVALID_ARGUMENT,
                                  "purlin_comm_get_async_error: status is NULL");
    pl_set_global_error("purlin_comm_get_async_error: comm is NULL");
    return PURLIN_ERR_INVALID_ARGUMENT;
  }
  purlin_status_t st = comm->async_error;
  if (!st && comm->datapath == PURLIN_DATAPATH_CUDA) st = pl_cuda_async_error(comm);
  if (!st && comm->ws[comm->rank] && comm->datapath == PURLIN_DATAPATH_HOST &&
      __atomic_load_n(&((pl_ctrl_t *)comm->ws[comm->rank])->abort, __ATOMIC_ACQUIRE))
    st = PURLIN_ERR_REMOTE;
  *status = st;
  return PURLIN_OK;
}

const char *purlin_comm_last_error(purlin_comm_t comm) {
  if (!comm) return pl_global_error;
  pthread_mutex_lock(&comm->lock);
  memcpy(comm->last_error_copy, comm->last_error, sizeof comm->last_error);
  pthread_mutex_unlock(&comm->lock);
  return comm->last_error_copy;
}

#define PL_COMM_GETTER(fn, type, field)                                                            \
  purlin_status_t fn(purlin_comm_t comm, type *out) {                                              \
    if (!comm || !out) {                                                                           \
      pl_set_global_error(#fn ": %s is NULL", comm ? "the output" : "comm");                       \
      return PURLIN_ERR_INVALID_ARGUMENT;                                                          \
    }                                                                                              \
    *out = comm->field;                                                                            \
    return PURLIN_OK;                                                                              \
  }
PL_COMM_GETTER(purlin_comm_rank, int, rank)
PL_COMM_GETTER(purlin_comm_size, int, world)
PL_COMM_GETTER(purlin_comm_datapath, purlin_datapath_t, datapath)

purlin_status_t purlin_get_unique_id(purlin_unique_id_t *id) {
  if (!id) {
    pl_set_global_error("purlin_get_unique_id: id is NULL");
    return PURLIN_ERR_INVALID_ARGUMENT;
  }
  return pl_bootstrap_make_id(id);
}
