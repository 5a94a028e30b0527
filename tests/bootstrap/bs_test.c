/* bs_test -- the bootstrap end to end, with ranks as processes (forked here, the parent hosting the
 * root as purlinrun does) or as threads of one process.
 *
 *   bs_test basic N     allgather of 0 B, 1 B, 4097 B and 1 MiB checked byte by byte, barrier,
 *                       allgather_fd of memfds, at world N; no socket left afterwards
 *   bs_test threads     two groups of 3 ranks as threads of one process, at the same time
 *   bs_test secret      a wrong secret and a silent client are refused and logged; the ranks
 * succeed bs_test nojoin      a rank that never joins: the others time out naming it, in time
 *   bs_test death       a rank that dies after joining: the others get ERR_REMOTE naming it
 *   bs_test stall       a rank that never calls: the first to time out tells the others who
 *   bs_test mismatch    duplicate rank, nranks disagreement, allgather sizes that differ
 *   bs_test named       pl_bootstrap_id_from_name: stale file, late root, file removed, timeout
 *   bs_test child MODE [RECORD]   a rank under purlinrun (see test_purlinrun.sh): MODE is ok, hang,
 *                       exit:R:CODE or kill:R:SIG; RECORD collects pids and socket names
 *   bs_test idfile NAME prints the id file of a rendezvous name
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap.h"
#include "launch_env.h"
#include "purlin.h"

#define TIMEOUT_MS 1500 /* small: the fault tests wait for it */
#define MAX_WORLD 8
#define ADDR_MAX 128

static int g_fail;

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "FAIL %s:%d (pid %d): %s: ", __FILE__, __LINE__, (int)getpid(), #cond);      \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fprintf(stderr, "\n");                                                                       \
      g_fail++;                                                                                    \
    }                                                                                              \
  } while (0)

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Is an abstract socket of that name still open anywhere on this machine? */
static int socket_exists(const char *name) {
  FILE *f = fopen("/proc/net/unix", "r");
  char line[512], want[ADDR_MAX + 2];
  int found = 0;
  snprintf(want, sizeof want, "@%s", name);
  while (f && fgets(line, sizeof line, f)) {
    char *p = strstr(line, want);
    if (p && (p[strlen(want)] == '\n' || p[strlen(want)] == '\0'))
      found = 1;
  }
  if (f)
    fclose(f);
  return found;
}

/* ---------------------------------------------------------------------------------------------
 * Ranks as forked processes: each reads the id from a pipe once the parent has made it, so that no
 * child inherits the root. Each rank may report names (sockets to check afterwards) on `report`.
 * ------------------------------------------------------------------------------------------- */

typedef int (*rank_fn)(const purlin_unique_id_t *id, int rank, int n, int report, void *arg);

typedef struct {
  int n;
  pid_t pid[MAX_WORLD + 2];
  int idpipe[MAX_WORLD + 2];
  int report[2];
} group_t;

static void group_fork(group_t *g, int n, rank_fn fn, void *arg) {
  memset(g, 0, sizeof *g);
  g->n = n;
  if (pipe2(g->report, O_CLOEXEC))
    abort();
  for (int r = 0; r < n; r++) {
    int p[2];
    if (pipe2(p, O_CLOEXEC))
      abort();
    fflush(NULL);
    g->pid[r] = fork();
    if (g->pid[r] == 0) {
      purlin_unique_id_t id;
      close(p[1]);
      close(g->report[0]);
      for (int k = 0; k < r; k++)
        close(g->idpipe[k]);
      ssize_t got = read(p[0], &id, sizeof id);
      close(p[0]);
      int rc = got == (ssize_t)sizeof id ? fn(&id, r, n, g->report[1], arg) : 90;
      close(g->report[1]);
      exit(rc ? rc : g_fail ? 1 : 0);
    }
    close(p[0]);
    g->idpipe[r] = p[1];
  }
  close(g->report[1]);
}

static void group_send_id(group_t *g, const purlin_unique_id_t *id) {
  for (int r = 0; r < g->n; r++) {
    if (write(g->idpipe[r], id, sizeof *id) != (ssize_t)sizeof *id)
      abort();
    close(g->idpipe[r]);
  }
}

/* Wait for every rank; check each exit code against want (-1: any). Then check that none of the
 * socket names the ranks reported (and the root's) is still open. */
static void group_wait(group_t *g, const int *want, const char *root_addr) {
  for (int r = 0; r < g->n; r++) {
    int st = 0;
    waitpid(g->pid[r], &st, 0);
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    CHECK(want[r] < 0 || code == want[r], "rank %d exited with %d, want %d", r, code, want[r]);
  }
  char buf[4096];
  ssize_t len = read(g->report[0], buf, sizeof buf - 1);
  close(g->report[0]);
  buf[len > 0 ? len : 0] = '\0';
  for (char *s = strtok(buf, "\n"); s; s = strtok(NULL, "\n"))
    CHECK(!socket_exists(s), "socket @%s is still open after the run", s);
  if (root_addr) {
    for (int i = 0; i < 100 && socket_exists(root_addr); i++)
      sleep_ms(10); /* root thread ends */
    CHECK(!socket_exists(root_addr), "root socket @%s is still open", root_addr);
  }
}

static void report_name(int fd, const char *name) {
  char line[ADDR_MAX + 2];
  int n = snprintf(line, sizeof line, "%s\n", name);
  if (write(fd, line, (size_t)n) != n)
    abort();
}

static void run_group(int n, rank_fn fn, void *arg, const int *want) {
  group_t g;
  purlin_unique_id_t id;
  char root[ADDR_MAX];
  group_fork(&g, n, fn, arg);
  purlin_status_t st = pl_bootstrap_make_id(&id);
  CHECK(st == PURLIN_OK, "make_id: %s", pl_bootstrap_last_error(NULL));
  CHECK(pl_bootstrap_id_addr(&id, root, sizeof root) == 0, "id_addr");
  group_send_id(&g, &id);
  group_wait(&g, want, root);
}

/* ---------------------------------------------------------------------------------------------
 * basic: every collective, checked element by element.
 * ------------------------------------------------------------------------------------------- */

static unsigned char pattern(int rank, size_t i, size_t bytes) {
  return (unsigned char)(rank * 131 + i * 7 + bytes + (i >> 8));
}

static void check_allgather(pl_bootstrap_t *bs, int rank, int n, size_t bytes) {
  unsigned char *mine = malloc(bytes + 1), *all = malloc(bytes * (size_t)n + 1);
  for (size_t i = 0; i < bytes; i++)
    mine[i] = pattern(rank, i, bytes);
  memset(all, 0xee, bytes * (size_t)n + 1);
  purlin_status_t st = pl_bootstrap_allgather(bs, bytes ? mine : NULL, bytes ? all : NULL, bytes);
  CHECK(st == PURLIN_OK, "allgather %zu: %s", bytes, pl_bootstrap_last_error(bs));
  size_t bad = 0;
  for (int r = 0; r < n; r++)
    for (size_t i = 0; i < bytes; i++)
      bad += all[(size_t)r * bytes + i] != pattern(r, i, bytes);
  CHECK(bad == 0, "allgather %zu at world %d: %zu wrong bytes", bytes, n, bad);
  CHECK(all[bytes * (size_t)n] == 0xee, "allgather %zu wrote past the end", bytes);
  free(mine);
  free(all);
}

static void check_inplace(pl_bootstrap_t *bs, int rank, int n) {
  int all[MAX_WORLD];
  for (int r = 0; r < n; r++)
    all[r] = r == rank ? 1000 + rank : -1;
  purlin_status_t st = pl_bootstrap_allgather(bs, &all[rank], all, sizeof(int));
  CHECK(st == PURLIN_OK, "in-place allgather: %s", pl_bootstrap_last_error(bs));
  for (int r = 0; r < n; r++)
    CHECK(all[r] == 1000 + r, "in place: slot %d is %d", r, all[r]);
}

static void check_fds(pl_bootstrap_t *bs, int rank, int n) {
  int mfd = memfd_create("bs_test", MFD_CLOEXEC), fds[MAX_WORLD];
  char text[32];
  int len = snprintf(text, sizeof text, "rank %d", rank);
  CHECK(mfd >= 0 && write(mfd, text, (size_t)len) == len, "memfd");
  purlin_status_t st = pl_bootstrap_allgather_fd(bs, mfd, fds);
  CHECK(st == PURLIN_OK, "allgather_fd: %s", pl_bootstrap_last_error(bs));
  close(mfd);
  for (int r = 0; st == PURLIN_OK && r < n; r++) {
    char got[32] = {0}, want[32];
    snprintf(want, sizeof want, "rank %d", r);
    CHECK(pread(fds[r], got, sizeof got - 1, 0) > 0 && !strcmp(got, want), "fd of rank %d: '%s'", r,
          got);
    CHECK(fcntl(fds[r], F_GETFD) & FD_CLOEXEC, "fd of rank %d is not close-on-exec", r);
    close(fds[r]);
  }
}

static int basic_rank(const purlin_unique_id_t *id, int rank, int n, int report, void *arg) {
  pl_bootstrap_t *bs = NULL;
  (void)arg;
  purlin_status_t st = pl_bootstrap_init(id, rank, n, 10 * TIMEOUT_MS, &bs);
  CHECK(st == PURLIN_OK, "init: %s", pl_bootstrap_last_error(NULL));
  if (st)
    return 1;
  report_name(report, pl_bootstrap_self_addr(bs));
  static const size_t sizes[] = {0, 1, 4097, 1 << 20, 3};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
    check_allgather(bs, rank, n, sizes[k]);
  CHECK(pl_bootstrap_barrier(bs) == PURLIN_OK, "barrier: %s", pl_bootstrap_last_error(bs));
  check_inplace(bs, rank, n);
  check_fds(bs, rank, n);
  for (int k = 0; k < 50; k++)
    CHECK(pl_bootstrap_barrier(bs) == PURLIN_OK, "barrier %d", k);
  CHECK(pl_bootstrap_allgather(bs, NULL, NULL, 8) == PURLIN_ERR_INVALID_ARGUMENT, "NULL buffers");
  CHECK(pl_bootstrap_allgather_fd(bs, -1, NULL) == PURLIN_ERR_INVALID_ARGUMENT, "bad fd");
  check_allgather(bs, rank, n, 16); /* refused arguments left it usable */
  pl_bootstrap_destroy(bs);
  return 0;
}

static int test_basic(int n) {
  int want[MAX_WORLD] = {0};
  if (n < 1 || n > MAX_WORLD)
    return 2;
  run_group(n, basic_rank, NULL, want);
  return 0;
}

/* ---------------------------------------------------------------------------------------------
 * threads: several bootstraps in one process at once (what several communicators do).
 * ------------------------------------------------------------------------------------------- */

typedef struct {
  purlin_unique_id_t id;
  int rank, n;
} thread_arg_t;

static void *thread_rank(void *p) {
  thread_arg_t *a = p;
  pl_bootstrap_t *bs = NULL;
  purlin_status_t st = pl_bootstrap_init(&a->id, a->rank, a->n, 10 * TIMEOUT_MS, &bs);
  CHECK(st == PURLIN_OK, "init: %s", pl_bootstrap_last_error(NULL));
  if (st)
    return NULL;
  for (int k = 0; k < 3; k++) {
    check_allgather(bs, a->rank, a->n, 65536 + (size_t)k);
    CHECK(pl_bootstrap_barrier(bs) == PURLIN_OK, "barrier");
  }
  check_fds(bs, a->rank, a->n);
  pl_bootstrap_destroy(bs);
  return NULL;
}

static int test_threads(void) {
  enum { GROUPS = 2, N = 3 };
  thread_arg_t args[GROUPS][N];
  pthread_t tid[GROUPS][N];
  for (int g = 0; g < GROUPS; g++) {
    purlin_unique_id_t id;
    CHECK(pl_bootstrap_make_id(&id) == PURLIN_OK, "make_id");
    for (int r = 0; r < N; r++) {
      args[g][r] = (thread_arg_t){id, r, N};
      pthread_create(&tid[g][r], NULL, thread_rank, &args[g][r]);
    }
  }
  for (int g = 0; g < GROUPS; g++)
    for (int r = 0; r < N; r++)
      pthread_join(tid[g][r], NULL);
  return 0;
}

/* ---------------------------------------------------------------------------------------------
 * secret: impostors are refused (and logged by the root), the real ranks are not disturbed.
 * ------------------------------------------------------------------------------------------- */

static int wrong_secret_rank(const purlin_unique_id_t *id, int rank, int n, int report, void *arg) {
  purlin_unique_id_t bad = *id;
  pl_bootstrap_t *bs = NULL;
  (void)rank, (void)report, (void)arg;
  bad.internal[8] ^= 0x5a; /* a byte of the secret (after magic, version, flags) */
  int64_t t0 = now_ms();
  purlin_status_t st = pl_bootstrap_init(&bad, 1, n - 2, TIMEOUT_MS, &bs);
  CHECK(st != PURLIN_OK, "an id with a wrong secret was accepted");
  CHECK(now_ms() - t0 < TIMEOUT_MS, "refusal took %lld ms", (long long)(now_ms() - t0));
  pl_bootstrap_destroy(bs);
  return 0;
}

/* Connects to the root, says 3 bytes and nothing more: the root must neither wait for it nor
 * count it, and must close it once the real ranks are through. */
static int silent_client(const purlin_unique_id_t *id, int rank, int n, int report, void *arg) {
  char addr[ADDR_MAX];
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  (void)rank, (void)n, (void)report, (void)arg;
  pl_bootstrap_id_addr(id, addr, sizeof addr);
  memcpy(sa.sun_path + 1, addr, strlen(addr));
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(addr));
  CHECK(connect(fd, (struct sockaddr *)&sa, len) == 0, "connect: %s", strerror(errno));
  CHECK(send(fd, "abc", 3, MSG_NOSIGNAL) == 3, "send");
  struct timeval tv = {5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char c;
  CHECK(recv(fd, &c, 1, 0) == 0, "the root did not close a silent connection");
  close(fd);
  return 0;
}

typedef struct {
  int n;
} secret_arg_t;

static int secret_rank(const purlin_unique_id_t *id, int rank, int n, int report, void *arg) {
  const secret_arg_t *a = arg;
  if (rank == n - 2)
    return wrong_secret_rank(id, rank, n, report, arg);
  if (rank == n - 1)
    return silent_client(id, rank, n, report, arg);
  sleep_ms(300); /* let the impostors go first */
  return basic_rank(id, rank, a->n, report, NULL);
}

/* The root runs in this process: catch its log in a memfd to check that it said why it refused. */
static int test_secret(void) {
  secret_arg_t a = {3};
  int want[MAX_WORLD] = {0};
  int saved = dup(2), mfd = memfd_create("log", 0);
  fflush(stderr);
  dup2(mfd, 2);
  run_group(a.n + 2, secret_rank, &a, want);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  char log[16384] = {0};
  ssize_t len = pread(mfd, log, sizeof log - 1, 0);
  close(mfd);
  if (len > 0)
    fwrite(log, 1, (size_t)len, stderr);
  CHECK(strstr(log, "refused a connection") && strstr(log, "wrong secret"),
        "the root did not log the wrong secret (PURLIN_DEBUG=WARN?)");
  CHECK(strstr(log, "never completed its hello"), "the root did not log the silent client");
  return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Faults: a rank that never joins, a rank that dies, ranks that disagree.
 * ------------------------------------------------------------------------------------------- */

static int nojoin_rank(const purlin_unique_id_t *id, int rank, int n, int report, void *arg) {
  pl_bootstrap_t *bs = NULL;
  (void)report, (void)arg;
  if (rank == n - 1)
    return 0; /* never joins */
  int64_t t0 = now_ms();
  purlin_status_t st = pl_bootstrap_init(id, rank, n, TIMEOUT_MS, &bs);
  int64_t took = now_ms() - t0;
  char want[64];
  snprintf(want, sizeof want, "rank %d of %d did not join within %d ms", n - 1, n, TIMEOUT_MS);
  CHECK(st == PURLIN_ERR_TIMEOUT, "init gave %d", (int)st);
  CHECK(strstr(pl_bootstrap_last_error(NULL), want), "error '%s' lacks '%s'",
        pl_bootstrap_last_error(NULL), want);
  CHECK(took <= TIMEOUT_MS + 500 && took >= TIMEOUT_MS / 2, "gave up after %lld ms",
        (long long)took);
  return 0;
}

static int test_nojoin(void) {
  int want[4] = {0, 0, 0, 0};
  run_group(4, nojoin_rank, NULL, want);
  return 0;
}

static int death_rank(const purlin_unique_id_t *id, int rank, int n, int report, void *arg) {
  pl_bootstrap_t *bs = NULL;
  (void)report, (void)arg;
  purlin_status_t st = pl_bootstrap_init(id, rank, n, TIMEOUT_MS, &bs);
  CHECK(st == PURLIN_OK, "init: %s", pl_bootstrap_last_error(NULL));
  if (st)
    return 1;
  CHECK(pl_bootstrap_barrier(bs) == PURLIN_OK, "barrier: %s", pl_bootstrap_last_error(bs));
  if (rank == n - 1)
    _exit(0); /* dies without a word */
  size_t bytes = 1 << 20;
  char *mine = calloc(1, bytes), *all = calloc((size_t)n, bytes);
  int64_t t0 = now_ms();
  st = pl_bootstrap_allgather(bs, mine, all, bytes);
  char want[96];
  snprintf(want, sizeof want, "rank %d closed its bootstrap connection (died?)", n - 1);
  CHECK(st == PURLIN_ERR_REMOTE, "allgather after a death gave %d: %s", (int)st,
        pl_bootstrap_last_error(bs));
  CHECK(strstr(pl_bootstrap_last_error(bs), want), "'%s' lacks '%s'", pl_bootstrap_last_error(bs),
        want);
  CHECK(now_ms() - t0 < TIMEOUT_MS, "noticed the death after %lld ms", (long long)(now_ms() - t0));
  st = pl_bootstrap_barrier(bs);
  CHECK(st == PURLIN_ERR_REMOTE && strstr(pl_bootstrap_last_error(bs), "unusable"),
        "a call after the failure: %d %s", (int)st, pl_bootstrap_last_error(bs));
  free(mine);
  free(all);
  pl_bootstrap_destroy(bs);
  return 0;
}

static int test_death(void) {
  int want[3] = {0, 0, 0};
  run_group(3, death_rank, NULL, want);
  return 0;
}

/* Rank 2 joins but never calls; rank 1 calls late. Rank 0 times out first and tells rank 1 why, so
 * rank 1 hears of rank 2 before its own deadline. */
static int stall_rank(const purlin_unique_id_t *id, int rank, int n, int report, void *arg) {
  pl_bootstrap_t *bs = NULL;
  (void)report, (void)arg;
  purlin_status_t st = pl_bootstrap_init(id, rank, n, TIMEOUT_MS, &bs);
  CHECK(st == PURLIN_OK, "init: %s", pl_bootstrap_last_error(NULL));
  if (st)
    return 1;
  if (rank == 2) {
    sleep_ms(TIMEOUT_MS + 1000);
    pl_bootstrap_destroy(bs);
    return 0;
  }
  if (rank == 1)
    sleep_ms(TIMEOUT_MS / 3);
  int64_t t0 = now_ms();
  char all[3 * 64], mine[64] = {0};
  st = pl_bootstrap_allgather(bs, mine, all, sizeof mine);
  const char *err = pl_bootstrap_last_error(bs);
  int64_t took = now_ms() - t0;
  CHECK(strstr(err, "rank 2 did not take part within"), "rank %d: '%s'", rank, err);
  if (rank == 0)
    CHECK(st == PURLIN_ERR_TIMEOUT && took >= TIMEOUT_MS - 50, "%d %lld", st, (long long)took);
  if (rank == 1)
    CHECK(st == PURLIN_ERR_REMOTE && strstr(err, "rank 0 gave up") && took < TIMEOUT_MS,
          "rank 1: %d after %lld ms: %s", (int)st, (long long)took, err);
  pl_bootstrap_destroy(bs);
  return 0;
}

static int test_stall(void) {
  int want[3] = {0, 0, 0};
  run_group(3, stall_rank, NULL, want);
  return 0;
}

typedef enum { MIS_DUP_RANK, MIS_NRANKS, MIS_BYTES } mis_kind_t;

static int mismatch_rank(const purlin_unique_id_t *id, int rank, int n, int report, void *arg) {
  mis_kind_t kind = *(const mis_kind_t *)arg;
  pl_bootstrap_t *bs = NULL;
  (void)report;
  int my_rank = kind == MIS_DUP_RANK ? 0 : rank;
  int my_n = kind == MIS_NRANKS && rank == 1 ? n + 1 : n;
  purlin_status_t st = pl_bootstrap_init(id, my_rank, my_n, TIMEOUT_MS, &bs);
  const char *err = pl_bootstrap_last_error(NULL);
  if (kind == MIS_DUP_RANK) {
    CHECK(st == PURLIN_ERR_MISMATCH && strstr(err, "two processes joined as rank 0"), "dup: %s",
          err);
  } else if (kind == MIS_NRANKS) {
    CHECK(st == PURLIN_ERR_MISMATCH && strstr(err, "ranks"), "nranks: %d %s", (int)st, err);
  } else {
    CHECK(st == PURLIN_OK, "init: %s", err);
    char buf[64] = {0}, all[128];
    if (st == PURLIN_OK)
      st = pl_bootstrap_allgather(bs, buf, all, rank ? 16 : 8);
    CHECK(st == PURLIN_ERR_MISMATCH && strstr(pl_bootstrap_last_error(bs), "bytes"), "bytes: %d %s",
          (int)st, pl_bootstrap_last_error(bs));
  }
  pl_bootstrap_destroy(bs);
  return 0;
}

static int test_mismatch(void) {
  int want[2] = {0, 0};
  for (mis_kind_t k = MIS_DUP_RANK; k <= MIS_BYTES; k++)
    run_group(2, mismatch_rank, &k, want);
  return 0;
}

/* ---------------------------------------------------------------------------------------------
 * named: what torchrun, mpirun and Slurm use.
 * ------------------------------------------------------------------------------------------- */

static char g_name[128];

static int named_rank(const purlin_unique_id_t *unused, int rank, int n, int report, void *arg) {
  purlin_unique_id_t id;
  char path[4096];
  (void)unused, (void)arg;
  if (rank == 0)
    sleep_ms(300); /* the others must wait for the file, past the stale one */
  purlin_status_t st = pl_bootstrap_id_from_name(g_name, rank == 0, 10 * TIMEOUT_MS, &id);
  CHECK(st == PURLIN_OK, "id_from_name: %s", pl_bootstrap_last_error(NULL));
  char root[ADDR_MAX];
  pl_bootstrap_id_addr(&id, root, sizeof root);
  if (rank == 0)
    report_name(report, root);
  if (st == PURLIN_OK)
    st = basic_rank(&id, rank, n, report, NULL);
  pl_bootstrap_id_file(g_name, path, sizeof path);
  CHECK(access(path, F_OK) != 0, "%s is still there after init", path);
  return st;
}

/* A file left by a crashed job: a root of the same name that was SIGKILLed after publishing. */
static void make_stale_file(const char *path) {
  int p[2];
  if (pipe(p))
    abort();
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    purlin_unique_id_t id;
    int ok = pl_bootstrap_id_from_name(g_name, 1, 10 * TIMEOUT_MS, &id) == PURLIN_OK;
    if (write(p[1], &ok, sizeof ok) != (ssize_t)sizeof ok)
      abort();
    for (;;)
      pause();
  }
  int ok = 0;
  CHECK(read(p[0], &ok, sizeof ok) == (ssize_t)sizeof ok && ok, "the crashing root failed");
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  close(p[0]);
  close(p[1]);
  CHECK(access(path, F_OK) == 0, "the crashed root left no file at %s", path);
}

static int test_named(void) {
  char path[4096];
  int want[3] = {0, 0, 0};
  snprintf(g_name, sizeof g_name, "bs_test-%d-%lld", (int)getpid(), (long long)now_ms());
  CHECK(pl_bootstrap_id_file(g_name, path, sizeof path) == 0, "id_file");
  /* No root at all: a non-root gives up in time, naming the file. */
  purlin_unique_id_t id;
  memset(&id, 0, sizeof id);
  int64_t t0 = now_ms();
  purlin_status_t st = pl_bootstrap_id_from_name(g_name, 0, 300, &id);
  CHECK(st == PURLIN_ERR_TIMEOUT && strstr(pl_bootstrap_last_error(NULL), path), "no root: %s",
        pl_bootstrap_last_error(NULL));
  CHECK(now_ms() - t0 < 1000, "no root: gave up after %lld ms", (long long)(now_ms() - t0));
  make_stale_file(path);
  group_t g;
  group_fork(&g, 3, named_rank, NULL);
  group_send_id(&g, &id); /* unused by the ranks; it only releases them */
  group_wait(&g, want, NULL);
  CHECK(access(path, F_OK) != 0, "%s is still there", path);
  CHECK(pl_bootstrap_id_from_name("", 0, 100, &id) == PURLIN_ERR_INVALID_ARGUMENT, "empty name");
  return 0;
}

/* ---------------------------------------------------------------------------------------------
 * child: one rank under purlinrun (or torchrun-like variables), driven by test_purlinrun.sh.
 * ------------------------------------------------------------------------------------------- */

__attribute__((format(printf, 2, 3))) static void record(const char *file, const char *fmt, ...) {
  if (!file)
    return;
  char line[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  int fd = open(file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd >= 0 && write(fd, line, (size_t)n) != n)
    abort();
  if (fd >= 0)
    close(fd);
}

static void child_act(const char *mode, int rank) {
  int r, v;
  if (!strcmp(mode, "hang")) {
    for (;;)
      pause();
  }
  if (sscanf(mode, "exit:%d:%d", &r, &v) == 2) {
    if (rank == r)
      exit(v);
    for (;;)
      pause(); /* purlinrun must end us */
  }
  if (sscanf(mode, "kill:%d:%d", &r, &v) == 2) {
    if (rank == r)
      raise(v);
    for (;;)
      pause();
  }
}

static int child_main(const char *mode, const char *file) {
  pl_launch_env_t env;
  char err[512], root[ADDR_MAX];
  pl_bootstrap_t *bs = NULL;
  record(file, "pid %d\n", (int)getpid());
  purlin_status_t st = pl_launch_env_read(10 * TIMEOUT_MS, &env, err, sizeof err);
  CHECK(st == PURLIN_OK, "launch env: %s", err);
  if (st)
    return 1;
  CHECK(!getenv("RANK") || strcmp(env.launcher, "purlinrun"), "purlinrun must not set RANK");
  if (pl_bootstrap_id_addr(&env.id, root, sizeof root) == 0)
    record(file, "sock %s\n", root);
  st = pl_bootstrap_init(&env.id, env.rank, env.world, 10 * TIMEOUT_MS, &bs);
  CHECK(st == PURLIN_OK, "init: %s", pl_bootstrap_last_error(NULL));
  if (st)
    return 1;
  record(file, "sock %s\n", pl_bootstrap_self_addr(bs));
  check_allgather(bs, env.rank, env.world, 1000);
  CHECK(pl_bootstrap_barrier(bs) == PURLIN_OK, "barrier");
  record(file, "ready %s %d\n", env.launcher, env.rank);
  child_act(mode, env.rank);
  pl_bootstrap_destroy(bs);
  return g_fail ? 1 : 0;
}

int main(int argc, char **argv) {
  const char *t = argc > 1 ? argv[1] : "";
  signal(SIGPIPE, SIG_DFL); /* the bootstrap must be safe without ignoring SIGPIPE */
  if (!strcmp(t, "child") && argc >= 3)
    return child_main(argv[2], argc > 3 ? argv[3] : NULL);
  if (!strcmp(t, "idfile") && argc == 3) {
    char path[4096];
    if (pl_bootstrap_id_file(argv[2], path, sizeof path))
      return 1;
    printf("%s\n", path);
    return 0;
  }
  setenv("PURLIN_DEBUG", "WARN", 0); /* the secret test reads the root's warnings */
  int rc = 2;
  if (!strcmp(t, "basic") && argc == 3)
    rc = test_basic(atoi(argv[2]));
  if (!strcmp(t, "threads"))
    rc = test_threads();
  if (!strcmp(t, "secret"))
    rc = test_secret();
  if (!strcmp(t, "nojoin"))
    rc = test_nojoin();
  if (!strcmp(t, "death"))
    rc = test_death();
  if (!strcmp(t, "stall"))
    rc = test_stall();
  if (!strcmp(t, "mismatch"))
    rc = test_mismatch();
  if (!strcmp(t, "named"))
    rc = test_named();
  if (rc == 2) {
    fprintf(stderr,
            "usage: bs_test basic N | threads | secret | nojoin | death | stall | mismatch | "
            "named | child MODE [FILE] | idfile NAME\n");
    return 2;
  }
  if (g_fail)
    fprintf(stderr, "bs_test %s: %d failure(s)\n", t, g_fail);
  return g_fail ? 1 : rc;
}
