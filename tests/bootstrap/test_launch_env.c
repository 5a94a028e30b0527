/* test_launch_env -- rank, size and rendezvous from the variables of purlinrun, torchrun, Open MPI,
 * MPICH and Slurm: good values, precedence, malformed values (named in the error), jobs that span
 * machines, the hex form of ids, and that a named rendezvous leaves no file behind. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap.h"
#include "launch_env.h"

static int g_fail;

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                              \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fprintf(stderr, "\n");                                                                       \
      g_fail++;                                                                                    \
    }                                                                                              \
  } while (0)

static const char *const g_vars[] = {"PURLIN_RANK",
                                     "PURLIN_WORLD_SIZE",
                                     "PURLIN_LOCAL_RANK",
                                     "PURLIN_UNIQUE_ID",
                                     "RANK",
                                     "WORLD_SIZE",
                                     "LOCAL_RANK",
                                     "LOCAL_WORLD_SIZE",
                                     "MASTER_ADDR",
                                     "MASTER_PORT",
                                     "TORCHELASTIC_RESTART_COUNT",
                                     "OMPI_COMM_WORLD_RANK",
                                     "OMPI_COMM_WORLD_SIZE",
                                     "OMPI_COMM_WORLD_LOCAL_RANK",
                                     "OMPI_COMM_WORLD_LOCAL_SIZE",
                                     "PMIX_NAMESPACE",
                                     "OMPI_MCA_ess_base_jobid",
                                     "OMPI_MCA_orte_hnp_uri",
                                     "PMI_RANK",
                                     "PMI_SIZE",
                                     "MPI_LOCALRANKID",
                                     "MPI_LOCALNRANKS",
                                     "PMI_KVSNAME",
                                     "PMI_PORT",
                                     "SLURM_PROCID",
                                     "SLURM_NTASKS",
                                     "SLURM_LOCALID",
                                     "SLURM_JOB_ID",
                                     "SLURM_STEP_ID",
                                     "SLURM_STEP_NUM_NODES"};

static void reset(void) {
  for (size_t i = 0; i < sizeof g_vars / sizeof g_vars[0]; i++)
    unsetenv(g_vars[i]);
}

/* setenv for NAME=VALUE pairs, NULL-terminated. */
__attribute__((sentinel)) static void set(const char *first, ...) {
  va_list ap;
  va_start(ap, first);
  for (const char *kv = first; kv; kv = va_arg(ap, const char *)) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s", kv);
    char *eq = strchr(buf, '=');
    *eq = '\0';
    setenv(buf, eq + 1, 1);
  }
  va_end(ap);
}

/* 300 ms: long enough for a root that is there, short for the test of one that never comes. */
static purlin_status_t read_env_within(int ms, pl_launch_env_t *env, char *err, size_t len) {
  memset(env, 0x7f, sizeof *env);
  return pl_launch_env_read(ms, env, err, len);
}

static purlin_status_t read_env(pl_launch_env_t *env, char *err, size_t len) {
  return read_env_within(300, env, err, len);
}

/* Expect a failure with `status` whose text contains `want`. */
static void expect_fail(purlin_status_t status, const char *want, int line) {
  pl_launch_env_t env;
  char err[512];
  purlin_status_t st = read_env(&env, err, sizeof err);
  if (st != status || !strstr(err, want))
    fprintf(stderr, "FAIL line %d: got %d '%s', want %d containing '%s'\n", line, (int)st, err,
            (int)status, want),
        g_fail++;
}
#define EXPECT_FAIL(status, want) expect_fail(status, want, __LINE__)

static void test_hex(void) {
  purlin_unique_id_t id, back;
  char hex[257];
  for (size_t i = 0; i < sizeof id.internal; i++)
    id.internal[i] = (char)(i * 37 + 5);
  pl_id_to_hex(&id, hex);
  CHECK(strlen(hex) == 256, "hex length %zu", strlen(hex));
  CHECK(pl_id_from_hex(hex, &back) == 0 && !memcmp(&id, &back, sizeof id), "round trip");
  for (char *p = hex; *p; p++)
    if (*p >= 'a')
      *p = (char)(*p - 'a' + 'A');
  CHECK(pl_id_from_hex(hex, &back) == 0 && !memcmp(&id, &back, sizeof id), "upper case");
  hex[100] = 'g';
  CHECK(pl_id_from_hex(hex, &back) == -1, "a non-hex digit was accepted");
  CHECK(pl_id_from_hex("abcd", &back) == -1, "a short id was accepted");
  CHECK(pl_id_from_hex(NULL, &back) == -1, "NULL");
}

static void test_purlinrun(void) {
  purlin_unique_id_t id;
  char hex[257], err[512];
  pl_launch_env_t env;
  memset(&id, 0x42, sizeof id);
  pl_id_to_hex(&id, hex);
  reset();
  EXPECT_FAIL(PURLIN_ERR_INVALID_USAGE, "no launcher variables");
  set("PURLIN_RANK=2", "PURLIN_WORLD_SIZE=4", "PURLIN_LOCAL_RANK=1", NULL);
  setenv("PURLIN_UNIQUE_ID", hex, 1);
  set("RANK=0", "WORLD_SIZE=1", NULL); /* purlinrun wins */
  purlin_status_t st = read_env(&env, err, sizeof err);
  CHECK(st == PURLIN_OK, "%s", err);
  CHECK(env.rank == 2 && env.world == 4 && env.local_rank == 1, "%d %d %d", env.rank, env.world,
        env.local_rank);
  CHECK(!strcmp(env.launcher, "purlinrun") && !memcmp(&env.id, &id, sizeof id), "%s", env.launcher);
  unsetenv("PURLIN_LOCAL_RANK");
  CHECK(read_env(&env, err, sizeof err) == PURLIN_OK && env.local_rank == 2, "default local rank");
  set("PURLIN_RANK=abc", NULL);
  EXPECT_FAIL(PURLIN_ERR_INVALID_ARGUMENT, "PURLIN_RANK='abc'");
  set("PURLIN_RANK=-1", NULL);
  EXPECT_FAIL(PURLIN_ERR_INVALID_ARGUMENT, "PURLIN_RANK='-1'");
  set("PURLIN_RANK=4", NULL);
  EXPECT_FAIL(PURLIN_ERR_INVALID_ARGUMENT, "PURLIN_RANK=4 must be below PURLIN_WORLD_SIZE=4");
  set("PURLIN_RANK=0", "PURLIN_WORLD_SIZE=0", NULL);
  EXPECT_FAIL(PURLIN_ERR_INVALID_ARGUMENT, "PURLIN_WORLD_SIZE=0 must be at least 1");
  set("PURLIN_WORLD_SIZE=2x", NULL);
  EXPECT_FAIL(PURLIN_ERR_INVALID_ARGUMENT, "PURLIN_WORLD_SIZE='2x'");
  set("PURLIN_WORLD_SIZE=99999999999", NULL);
  EXPECT_FAIL(PURLIN_ERR_INVALID_ARGUMENT, "PURLIN_WORLD_SIZE='99999999999'");
  set("PURLIN_WORLD_SIZE=2", "PURLIN_LOCAL_RANK=7", NULL);
  EXPECT_FAIL(PURLIN_ERR_INVALID_ARGUMENT, "PURLIN_LOCAL_RANK=7");
  unsetenv("PURLIN_LOCAL_RANK");
  set("PURLIN_UNIQUE_ID=xyz", NULL);
  EXPECT_FAIL(PURLIN_ERR_INVALID_ARGUMENT, "PURLIN_UNIQUE_ID");
  unsetenv("PURLIN_UNIQUE_ID");
  EXPECT_FAIL(PURLIN_ERR_INVALID_ARGUMENT, "PURLIN_UNIQUE_ID is not");
  CHECK(pl_launch_env_read(0, &env, err, sizeof err) == PURLIN_ERR_INVALID_ARGUMENT, "timeout 0");
  CHECK(pl_launch_env_read(100, NULL, NULL, 0) == PURLIN_ERR_INVALID_ARGUMENT, "NULL env");
}

/* A one-rank job of a named rendezvous: read, join, and the id file must be gone. */
static void expect_named(const char *launcher, const char *name) {
  pl_launch_env_t env;
  char err[512], path[4096];
  pl_bootstrap_t *bs = NULL;
  /* Long: the root started here gives up after this, and valgrind makes everything slow. */
  purlin_status_t st = read_env_within(20000, &env, err, sizeof err);
  CHECK(st == PURLIN_OK && !strcmp(env.launcher, launcher), "%s: %d %s", launcher, (int)st, err);
  if (st)
    return;
  CHECK(env.rank == 0 && env.world == 1 && env.local_rank == 0, "%s ranks", launcher);
  CHECK(pl_bootstrap_id_file(name, path, sizeof path) == 0, "id file");
  CHECK(access(path, F_OK) == 0, "%s: %s was not published", launcher, path);
  st = pl_bootstrap_init(&env.id, 0, 1, 2000, &bs);
  CHECK(st == PURLIN_OK, "%s: init: %s", launcher, pl_bootstrap_last_error(NULL));
  pl_bootstrap_destroy(bs);
  CHECK(access(path, F_OK) != 0, "%s: %s is still there", launcher, path);
}

static void test_torchrun(int port) {
  char name[128], p[32];
  reset();
  snprintf(p, sizeof p, "%d", port);
  set("RANK=0", "WORLD_SIZE=1", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=1", "MASTER_ADDR=127.0.0.1",
      NULL);
  EXPECT_FAIL(PURLIN_ERR_INVALID_ARGUMENT, "MASTER_PORT");
  set("MASTER_PORT=http", NULL);
  EXPECT_FAIL(PURLIN_ERR_INVALID_ARGUMENT, "MASTER_PORT='http'");
  setenv("MASTER_PORT", p, 1);
  snprintf(name, sizeof name, "torch-127.0.0.1-%d", port);
  expect_named("torchrun", name);
  set("TORCHELASTIC_RESTART_COUNT=3", NULL);
  snprintf(name, sizeof name, "torch-127.0.0.1-%d-r3", port);
  expect_named("torchrun", name);
  set("WORLD_SIZE=4", "LOCAL_WORLD_SIZE=2", NULL);
  EXPECT_FAIL(PURLIN_ERR_UNSUPPORTED, "LOCAL_WORLD_SIZE=2");
  set("RANK=1", "WORLD_SIZE=2", "LOCAL_WORLD_SIZE=2", NULL); /* rank 0 never comes */
  EXPECT_FAIL(PURLIN_ERR_TIMEOUT, "did not publish");
  set("LOCAL_RANK=x", NULL);
  EXPECT_FAIL(PURLIN_ERR_INVALID_ARGUMENT, "LOCAL_RANK='x'");
}

static void test_mpi(int job) {
  char v[64], name[128];
  reset();
  set("OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=1", "OMPI_COMM_WORLD_LOCAL_RANK=0", NULL);
  EXPECT_FAIL(PURLIN_ERR_INVALID_ARGUMENT, "PMIX_NAMESPACE");
  snprintf(v, sizeof v, "prterun-test-%d@1", job);
  setenv("PMIX_NAMESPACE", v, 1);
  snprintf(name, sizeof name, "ompi-PMIX_NAMESPACE-%s", v);
  expect_named("mpirun", name);
  set("OMPI_COMM_WORLD_SIZE=3", "OMPI_COMM_WORLD_LOCAL_SIZE=1", NULL);
  EXPECT_FAIL(PURLIN_ERR_UNSUPPORTED, "OMPI_COMM_WORLD_LOCAL_SIZE=1");
  reset();
  set("PMI_RANK=0", "PMI_SIZE=1", "MPI_LOCALRANKID=0", NULL);
  snprintf(v, sizeof v, "kvs_%d_0", job);
  setenv("PMI_KVSNAME", v, 1);
  snprintf(name, sizeof name, "mpich-kvs-%s", v);
  expect_named("mpirun", name);
  set("PMI_SIZE=one", NULL);
  EXPECT_FAIL(PURLIN_ERR_INVALID_ARGUMENT, "PMI_SIZE='one'");
}

static void test_slurm(int job) {
  char v[64], name[128];
  reset();
  set("SLURM_PROCID=0", "SLURM_NTASKS=1", "SLURM_LOCALID=0", "SLURM_STEP_ID=0", NULL);
  EXPECT_FAIL(PURLIN_ERR_INVALID_ARGUMENT, "SLURM_JOB_ID");
  snprintf(v, sizeof v, "%d", job);
  setenv("SLURM_JOB_ID", v, 1);
  snprintf(name, sizeof name, "slurm-%d.0", job);
  expect_named("slurm", name);
  set("SLURM_STEP_NUM_NODES=2", NULL);
  EXPECT_FAIL(PURLIN_ERR_UNSUPPORTED, "SLURM_STEP_NUM_NODES=2");
  set("SLURM_STEP_NUM_NODES=1", "SLURM_PROCID=1", NULL);
  EXPECT_FAIL(PURLIN_ERR_INVALID_ARGUMENT, "SLURM_PROCID=1 must be below SLURM_NTASKS=1");
}

int main(void) {
  /* Names unique to this run: tests may run side by side, and a name must not meet another's. */
  int uniq = (int)getpid() * 7 + (int)(time(NULL) % 1000);
  test_hex();
  test_purlinrun();
  test_torchrun(20000 + uniq % 40000);
  test_mpi(uniq);
  test_slurm(uniq);
  if (g_fail)
    fprintf(stderr, "test_launch_env: %d failure(s)\n", g_fail);
  return g_fail ? 1 : 0;
}
