/* launch_env.c -- rank, size and rendezvous from the launcher's variables.
 *
 * purlinrun hands every rank the id itself (PURLIN_UNIQUE_ID). The other launchers have no way to
 * pass one, so every rank derives the same rendezvous name from what identifies the job, and rank 0
 * publishes the id under that name (pl_bootstrap_id_from_name). What names the job:
 *   torchrun  "torch-<MASTER_ADDR>-<MASTER_PORT>", plus "-r<TORCHELASTIC_RESTART_COUNT>" when set,
 *             so that an elastic restart does not meet the previous attempt's rendezvous.
 *   Open MPI  PMIX_NAMESPACE (Open MPI 4 and 5: the job's PMIx namespace, unique per mpirun), else
 *             OMPI_MCA_ess_base_jobid, else OMPI_MCA_orte_hnp_uri (Open MPI 3/4: mpirun's own
 *             contact, which holds the job id).
 *   MPICH     PMI_KVSNAME when the process manager sets it; else the Slurm job and step (srun
 *             --mpi=pmi2); else PMI_PORT (hydra -pmi-port: the proxy's contact); else the parent
 *             pid, which under Hydra is the hydra_pmi_proxy shared by all ranks of the job on this
 *             machine (ranks started through a wrapper script each have their own parent and must
 *             use another launcher).
 *   Slurm     "<SLURM_JOB_ID>.<SLURM_STEP_ID>".
 * The bootstrap joins ranks of one machine only; a job that says it spans several (its local size
 * differs from its world size) gets PURLIN_ERR_UNSUPPORTED rather than a timeout.
 */
#include "launch_env.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap.h"

#define PL_NAME_MAX 512

typedef struct {
  const char *launcher;
  const char *rank, *world, *local_rank;
  const char *local_world; /* NULL: the launcher does not say */
  int (*name)(char *name, size_t len, char *err, size_t errlen);
} pl_launcher_t;

__attribute__((format(printf, 4, 5))) static purlin_status_t
pl_env_fail(char *err, size_t errlen, purlin_status_t st, const char *fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return st;
}

__attribute__((format(printf, 3, 4))) static int pl_name_fmt(char *name, size_t len,
                                                             const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(name, len, fmt, ap);
  va_end(ap);
  return n > 0 && (size_t)n < len ? 0 : -1;
}

static int pl_name_torch(char *name, size_t len, char *err, size_t errlen) {
  const char *addr = getenv("MASTER_ADDR"), *port = getenv("MASTER_PORT");
  const char *restart = getenv("TORCHELASTIC_RESTART_COUNT");
  if (!addr || !addr[0] || !port || !port[0]) {
    pl_env_fail(err, errlen, 0, "launch env: RANK is set but MASTER_ADDR or MASTER_PORT is not");
    return -1;
  }
  char *end;
  errno = 0;
  long p = strtol(port, &end, 10);
  if (!isdigit((unsigned char)port[0]) || *end || errno || p < 1 || p > 65535) {
    pl_env_fail(err, errlen, 0, "launch env: MASTER_PORT='%s' is not a port number", port);
    return -1;
  }
  int bad = restart && restart[0] ? pl_name_fmt(name, len, "torch-%s-%ld-r%s", addr, p, restart)
                                  : pl_name_fmt(name, len, "torch-%s-%ld", addr, p);
  if (bad)
    pl_env_fail(err, errlen, 0, "launch env: MASTER_ADDR is too long");
  return bad;
}

static int pl_name_ompi(char *name, size_t len, char *err, size_t errlen) {
  static const char *const vars[] = {"PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid",
                                     "OMPI_MCA_orte_hnp_uri"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *v = getenv(vars[i]);
    if (v && v[0] && pl_name_fmt(name, len, "ompi-%s-%s", vars[i], v) == 0)
      return 0;
  }
  pl_env_fail(err, errlen, 0,
              "launch env: Open MPI variables found, but none of PMIX_NAMESPACE, "
              "OMPI_MCA_ess_base_jobid, OMPI_MCA_orte_hnp_uri names the job (or it is too long)");
  return -1;
}

static int pl_name_mpich(char *name, size_t len, char *err, size_t errlen) {
  const char *kvs = getenv("PMI_KVSNAME"), *port = getenv("PMI_PORT");
  const char *job = getenv("SLURM_JOB_ID"), *step = getenv("SLURM_STEP_ID");
  int bad;
  if (kvs && kvs[0])
    bad = pl_name_fmt(name, len, "mpich-kvs-%s", kvs);
  else if (job && job[0] && step && step[0])
    bad = pl_name_fmt(name, len, "mpich-slurm-%s.%s", job, step);
  else if (port && port[0])
    bad = pl_name_fmt(name, len, "mpich-port-%s", port);
  else
    bad = pl_name_fmt(name, len, "mpich-ppid-%d", (int)getppid());
  if (bad)
    pl_env_fail(err, errlen, 0, "launch env: the MPICH job name is too long");
  return bad;
}

static int pl_name_slurm(char *name, size_t len, char *err, size_t errlen) {
  const char *job = getenv("SLURM_JOB_ID"), *step = getenv("SLURM_STEP_ID");
  if (job && job[0] && step && step[0] && pl_name_fmt(name, len, "slurm-%s.%s", job, step) == 0)
    return 0;
  pl_env_fail(err, errlen, 0,
              "launch env: SLURM_PROCID is set but SLURM_JOB_ID or SLURM_STEP_ID is not (not a "
              "task of an srun step?)");
  return -1;
}

static const pl_launcher_t pl_launchers[] = {
    {"purlinrun", "PURLIN_RANK", "PURLIN_WORLD_SIZE", "PURLIN_LOCAL_RANK", NULL, NULL},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", pl_name_torch},
    {"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE", pl_name_ompi},
    {"mpirun", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", pl_name_mpich},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", NULL, pl_name_slurm},
};

/* 0: *out parsed; 1: not set (and not required); -1: malformed or missing, err says which. */
static int pl_env_int(const char *var, int required, int *out, char *err, size_t errlen) {
  const char *s = getenv(var);
  if (!s) {
    if (required)
      pl_env_fail(err, errlen, 0, "launch env: %s is not set", var);
    return required ? -1 : 1;
  }
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (!isdigit((unsigned char)s[0]) || *end || errno || v > INT_MAX) {
    pl_env_fail(err, errlen, 0, "launch env: %s='%s' is not a non-negative integer", var, s);
    return -1;
  }
  *out = (int)v;
  return 0;
}

static purlin_status_t pl_env_ranks(const pl_launcher_t *l, pl_launch_env_t *env, char *err,
                                    size_t errlen) {
  int local_world = 0;
  if (pl_env_int(l->rank, 1, &env->rank, err, errlen) ||
      pl_env_int(l->world, 1, &env->world, err, errlen))
    return PURLIN_ERR_INVALID_ARGUMENT;
  int lr = pl_env_int(l->local_rank, 0, &env->local_rank, err, errlen);
  int lw = l->local_world ? pl_env_int(l->local_world, 0, &local_world, err, errlen) : 1;
  if (lr < 0 || lw < 0)
    return PURLIN_ERR_INVALID_ARGUMENT;
  if (lr > 0)
    env->local_rank = env->rank;
  if (env->world < 1)
    return pl_env_fail(err, errlen, PURLIN_ERR_INVALID_ARGUMENT,
                       "launch env: %s=%d must be at least 1", l->world, env->world);
  if (env->rank >= env->world)
    return pl_env_fail(err, errlen, PURLIN_ERR_INVALID_ARGUMENT,
                       "launch env: %s=%d must be below %s=%d", l->rank, env->rank, l->world,
                       env->world);
  if (env->local_rank >= env->world)
    return pl_env_fail(err, errlen, PURLIN_ERR_INVALID_ARGUMENT,
                       "launch env: %s=%d must be below %s=%d", l->local_rank, env->local_rank,
                       l->world, env->world);
  if (lw == 0 && local_world != env->world)
    return pl_env_fail(err, errlen, PURLIN_ERR_UNSUPPORTED,
                       "launch env: %s=%d but %s=%d: the job spans several machines, and purlin's "
                       "ranks must share one",
                       l->world, env->world, l->local_world, local_world);
  return PURLIN_OK;
}

static purlin_status_t pl_env_slurm_nodes(char *err, size_t errlen) {
  int nodes = 1;
  if (pl_env_int("SLURM_STEP_NUM_NODES", 0, &nodes, err, errlen) < 0)
    return PURLIN_ERR_INVALID_ARGUMENT;
  if (nodes > 1)
    return pl_env_fail(err, errlen, PURLIN_ERR_UNSUPPORTED,
                       "launch env: SLURM_STEP_NUM_NODES=%d: the step spans several machines, and "
                       "purlin's ranks must share one",
                       nodes);
  return PURLIN_OK;
}

static purlin_status_t pl_env_id(const pl_launcher_t *l, int timeout_ms, pl_launch_env_t *env,
                                 char *err, size_t errlen) {
  if (!l->name) {
    const char *hex = getenv("PURLIN_UNIQUE_ID");
    if (!hex)
      return pl_env_fail(err, errlen, PURLIN_ERR_INVALID_ARGUMENT,
                         "launch env: PURLIN_RANK is set but PURLIN_UNIQUE_ID is not");
    if (pl_id_from_hex(hex, &env->id))
      return pl_env_fail(err, errlen, PURLIN_ERR_INVALID_ARGUMENT,
                         "launch env: PURLIN_UNIQUE_ID is not 256 hex digits");
    return PURLIN_OK;
  }
  char name[PL_NAME_MAX];
  if (l->name(name, sizeof name, err, errlen))
    return PURLIN_ERR_INVALID_ARGUMENT;
  purlin_status_t st = pl_bootstrap_id_from_name(name, env->rank == 0, timeout_ms, &env->id);
  if (st != PURLIN_OK)
    pl_env_fail(err, errlen, st, "launch env (%s): %s", l->launcher, pl_bootstrap_last_error(NULL));
  return st;
}

purlin_status_t pl_launch_env_read(int timeout_ms, pl_launch_env_t *env, char *err, size_t errlen) {
  if (err && errlen)
    err[0] = '\0';
  if (!env || timeout_ms <= 0)
    return pl_env_fail(err, errlen, PURLIN_ERR_INVALID_ARGUMENT, "launch env: %s",
                       env ? "timeout_ms must be > 0" : "env is NULL");
  const pl_launcher_t *l = NULL;
  for (size_t i = 0; !l && i < sizeof pl_launchers / sizeof pl_launchers[0]; i++)
    if (getenv(pl_launchers[i].rank))
      l = &pl_launchers[i];
  if (!l)
    return pl_env_fail(err, errlen, PURLIN_ERR_INVALID_USAGE,
                       "launch env: no launcher variables (PURLIN_RANK, RANK, "
                       "OMPI_COMM_WORLD_RANK, PMI_RANK or SLURM_PROCID) are set");
  pl_launch_env_t e;
  memset(&e, 0, sizeof e);
  snprintf(e.launcher, sizeof e.launcher, "%s", l->launcher);
  purlin_status_t st = pl_env_ranks(l, &e, err, errlen);
  if (st == PURLIN_OK && l->name == pl_name_slurm)
    st = pl_env_slurm_nodes(err, errlen);
  if (st == PURLIN_OK)
    st = pl_env_id(l, timeout_ms, &e, err, errlen);
  if (st == PURLIN_OK)
    *env = e;
  return st;
}

void pl_id_to_hex(const purlin_unique_id_t *id, char hex[257]) {
  static const char digits[] = "0123456789abcdef";
  const unsigned char *p = (const unsigned char *)id->internal;
  for (size_t i = 0; i < sizeof id->internal; i++) {
    hex[2 * i] = digits[p[i] >> 4];
    hex[2 * i + 1] = digits[p[i] & 15];
  }
  hex[2 * sizeof id->internal] = '\0';
}

static int pl_hex_digit(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

int pl_id_from_hex(const char *hex, purlin_unique_id_t *id) {
  purlin_unique_id_t out;
  if (!hex || !id || strlen(hex) != 2 * sizeof out.internal)
    return -1;
  for (size_t i = 0; i < sizeof out.internal; i++) {
    int hi = pl_hex_digit(hex[2 * i]), lo = pl_hex_digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0)
      return -1;
    out.internal[i] = (char)(hi << 4 | lo);
  }
  *id = out;
  return 0;
}
