/* purlinrun -- start N ranks of a program on this machine, each with PURLIN_RANK,
 * PURLIN_WORLD_SIZE, PURLIN_LOCAL_RANK and PURLIN_UNIQUE_ID set; this process hosts the rendezvous.
 *
 * The ranks run in one process group of their own, so that one killpg() reaches them and whatever
 * they started (a shell wrapper's python, say); purlinrun forwards SIGINT, SIGTERM, SIGHUP and
 * SIGQUIT to that group. A consequence, as with mpirun: ranks cannot read a terminal. Each rank
 * also gets SIGKILL if purlinrun itself dies (PR_SET_PDEATHSIG), so a killed launcher leaves
 * nothing. Only the PURLIN_* variables are set: RANK, WORLD_SIZE etc. would tell torch it runs
 * under torchrun.
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap.h"
#include "launch_env.h"
#include "purlin.h"

extern char **environ;

#define PL_GRACE_MS 2000 /* between SIGTERM and SIGKILL */

typedef struct {
  int n;
  int timeout_s; /* 0: none */
  char **argv;
} pl_args_t;

typedef struct {
  int n;
  pid_t *pid; /* 0 once reaped */
  char ***envp;
  pid_t pgid;
  int alive;
  int status;         /* the exit status purlinrun will return */
  int failed;         /* a rank failed (or the timeout struck): the rest are being killed */
  int forwarded;      /* a signal was forwarded: the next one escalates to SIGKILL */
  int64_t kill_at;    /* when to send SIGKILL; 0: not scheduled */
  int64_t timeout_at; /* 0: no --timeout */
} pl_run_t;

static void pl_usage(FILE *out) {
  fprintf(out,
          "usage: purlinrun -n N [--timeout SEC] [--] program [args...]\n"
          "       purlinrun --help\n"
          "\n"
          "Start N ranks of `program` on this machine. Each rank gets PURLIN_RANK,\n"
          "PURLIN_WORLD_SIZE, PURLIN_LOCAL_RANK and PURLIN_UNIQUE_ID (purlin_comm_init_env reads\n"
          "them); purlinrun hosts the rendezvous until every rank has joined.\n"
          "\n"
          "  -n, -np N        number of ranks (1 or more)\n"
          "  --timeout SEC    kill all ranks and exit 124 after SEC seconds\n"
          "\n"
          "SIGINT, SIGTERM, SIGHUP and SIGQUIT are forwarded to every rank (a second one sends\n"
          "SIGKILL). When a rank exits non-zero or is killed, purlinrun names it, terminates the\n"
          "others (SIGTERM, then SIGKILL after 2 s) and exits with that rank's status (128 + the\n"
          "signal for a killed rank). Exit status 2: bad arguments.\n");
}

static int pl_parse_pos(const char *s, int *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (!s[0] || *end || errno || v < 1 || v > INT_MAX / 1000)
    return -1;
  *out = (int)v;
  return 0;
}

/* 0: run; 1: --help; 2: bad arguments. */
static int pl_parse_args(int argc, char **argv, pl_args_t *a) {
  memset(a, 0, sizeof *a);
  int i = 1;
  while (i < argc && argv[i][0] == '-') {
    const char *o = argv[i];
    if (!strcmp(o, "--help") || !strcmp(o, "-h"))
      return 1;
    if (!strcmp(o, "--")) {
      i++;
      break;
    }
    int *dst = !strcmp(o, "-n") || !strcmp(o, "-np") ? &a->n
               : !strcmp(o, "--timeout")             ? &a->timeout_s
                                                     : NULL;
    if (!dst) {
      fprintf(stderr, "purlinrun: unknown option '%s'\n", o);
      return 2;
    }
    if (i + 1 >= argc || pl_parse_pos(argv[i + 1], dst)) {
      fprintf(stderr, "purlinrun: %s needs a positive integer\n", o);
      return 2;
    }
    i += 2;
  }
  if (a->n < 1 || i >= argc) {
    fprintf(stderr, "purlinrun: %s\n", a->n < 1 ? "-n N is required" : "no program given");
    return 2;
  }
  a->argv = argv + i;
  return 0;
}

static int64_t pl_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int pl_is_ours(const char *var) {
  static const char *const ours[] = {
      "PURLIN_RANK=", "PURLIN_WORLD_SIZE=", "PURLIN_LOCAL_RANK=", "PURLIN_UNIQUE_ID="};
  for (size_t k = 0; k < sizeof ours / sizeof ours[0]; k++)
    if (!strncmp(var, ours[k], strlen(ours[k])))
      return 1;
  return 0;
}

static void pl_free_env(char **envp) {
  if (!envp)
    return;
  for (int k = 0; k < 4; k++)
    free(envp[k]); /* ours come first; the rest belong to environ */
  free(envp);
}

/* Built before any fork: after fork() a child of a threaded process should not allocate. */
static char **pl_make_env(int rank, int n, const char *hex) {
  size_t count = 0;
  while (environ[count])
    count++;
  char **envp = calloc(count + 5, sizeof *envp);
  if (!envp)
    return NULL;
  if (asprintf(&envp[0], "PURLIN_RANK=%d", rank) < 0)
    envp[0] = NULL;
  if (asprintf(&envp[1], "PURLIN_WORLD_SIZE=%d", n) < 0)
    envp[1] = NULL;
  if (asprintf(&envp[2], "PURLIN_LOCAL_RANK=%d", rank) < 0)
    envp[2] = NULL;
  if (asprintf(&envp[3], "PURLIN_UNIQUE_ID=%s", hex) < 0)
    envp[3] = NULL;
  if (!envp[0] || !envp[1] || !envp[2] || !envp[3]) {
    pl_free_env(envp);
    return NULL;
  }
  size_t k = 4;
  for (size_t i = 0; i < count; i++)
    if (!pl_is_ours(environ[i]))
      envp[k++] = environ[i];
  return envp;
}

static void pl_child(const pl_run_t *r, int rank, char **argv, const sigset_t *orig, pid_t parent) {
  setpgid(0, r->pgid); /* both sides call it: whichever runs first wins the race */
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent)
    _exit(127); /* purlinrun died before the line above */
  sigprocmask(SIG_SETMASK, orig, NULL);
  execvpe(argv[0], argv, r->envp[rank]);
  int e = errno;
  dprintf(2, "purlinrun: rank %d: cannot run %s: %s\n", rank, argv[0], strerror(e));
  _exit(127);
}

static void pl_kill_all(pl_run_t *r, int sig) {
  if (r->alive == 0)
    return;
  /* While a rank is unreaped the group id cannot be reused, so killpg cannot hit a stranger. */
  killpg(r->pgid, sig);
  for (int i = 0; i < r->n; i++) /* and each rank, in case it left the group */
    if (r->pid[i] > 0)
      kill(r->pid[i], sig);
}

static void pl_terminate(pl_run_t *r) {
  r->failed = 1;
  pl_kill_all(r, SIGTERM);
  r->kill_at = pl_now_ms() + PL_GRACE_MS;
}

static int pl_spawn(pl_run_t *r, char **argv, const sigset_t *orig) {
  pid_t parent = getpid();
  for (int i = 0; i < r->n; i++) {
    pid_t p = fork();
    if (p < 0) {
      fprintf(stderr, "purlinrun: fork failed for rank %d: %s\n", i, strerror(errno));
      return -1;
    }
    if (p == 0)
      pl_child(r, i, argv, orig, parent);
    if (r->pgid == 0)
      r->pgid = p;
    setpgid(p, r->pgid);
    r->pid[i] = p;
    r->alive++;
  }
  return 0;
}

static void pl_on_exit(pl_run_t *r, int rank, int wstatus) {
  int code = 0;
  if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) != 0) {
    code = WEXITSTATUS(wstatus);
    if (!r->failed)
      fprintf(stderr, "purlinrun: rank %d (pid %d) exited with status %d\n", rank,
              (int)r->pid[rank], code);
  } else if (WIFSIGNALED(wstatus)) {
    code = 128 + WTERMSIG(wstatus);
    if (!r->failed)
      fprintf(stderr, "purlinrun: rank %d (pid %d) killed by signal %d (%s)\n", rank,
              (int)r->pid[rank], WTERMSIG(wstatus), strsignal(WTERMSIG(wstatus)));
  }
  r->pid[rank] = 0;
  r->alive--;
  if (code == 0 || r->failed)
    return;
  r->status = code;
  pl_terminate(r);
}

static void pl_reap(pl_run_t *r) {
  int wstatus;
  pid_t p;
  while ((p = waitpid(-1, &wstatus, WNOHANG)) > 0) {
    for (int i = 0; i < r->n; i++)
      if (r->pid[i] == p)
        pl_on_exit(r, i, wstatus);
  }
}

static void pl_on_signal(pl_run_t *r, int sig) {
  if (sig == SIGCHLD) {
    pl_reap(r);
    return;
  }
  if (r->forwarded) {
    fprintf(stderr, "purlinrun: second signal %d: killing all ranks\n", sig);
    pl_kill_all(r, SIGKILL);
    return;
  }
  r->forwarded = 1;
  pl_kill_all(r, sig);
}

static void pl_on_deadline(pl_run_t *r, int64_t now) {
  if (r->kill_at && now >= r->kill_at) {
    pl_kill_all(r, SIGKILL);
    r->kill_at = 0;
  }
  if (r->timeout_at && now >= r->timeout_at) {
    fprintf(stderr, "purlinrun: timeout: killing all ranks\n");
    r->timeout_at = 0;
    r->status = 124;
    pl_terminate(r);
  }
}

static void pl_wait_all(pl_run_t *r, const sigset_t *set) {
  pl_reap(r); /* a rank may have died before we started to wait */
  while (r->alive > 0) {
    int64_t now = pl_now_ms(), next = now + 3600 * 1000;
    if (r->kill_at && r->kill_at < next)
      next = r->kill_at;
    if (r->timeout_at && r->timeout_at < next)
      next = r->timeout_at;
    int64_t ms = next > now ? next - now : 0;
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    siginfo_t info;
    int sig = sigtimedwait(set, &info, &ts);
    if (sig > 0)
      pl_on_signal(r, sig);
    pl_on_deadline(r, pl_now_ms());
  }
}

static int pl_run(const pl_args_t *a, const sigset_t *set, const sigset_t *orig) {
  pl_run_t r = {.n = a->n};
  purlin_unique_id_t id;
  char hex[257];
  int rc = 1;
  r.pid = calloc((size_t)a->n, sizeof *r.pid);
  r.envp = calloc((size_t)a->n, sizeof *r.envp);
  if (!r.pid || !r.envp)
    goto out;
  purlin_status_t st = purlin_get_unique_id(&id);
  if (st != PURLIN_OK) {
    fprintf(stderr, "purlinrun: cannot make the rendezvous: %s: %s\n", purlin_status_string(st),
            pl_bootstrap_last_error(NULL));
    goto out;
  }
  pl_id_to_hex(&id, hex);
  for (int i = 0; i < a->n; i++)
    if (!(r.envp[i] = pl_make_env(i, a->n, hex)))
      goto out;
  if (a->timeout_s)
    r.timeout_at = pl_now_ms() + (int64_t)a->timeout_s * 1000;
  if (pl_spawn(&r, a->argv, orig)) {
    r.status = 1;
    pl_terminate(&r);
  }
  pl_wait_all(&r, set);
  rc = r.status;
out:
  for (int i = 0; r.envp && i < a->n; i++)
    pl_free_env(r.envp[i]);
  free(r.envp);
  free(r.pid);
  return rc;
}

int main(int argc, char **argv) {
  pl_args_t a;
  int p = pl_parse_args(argc, argv, &a);
  if (p) {
    pl_usage(p == 1 ? stdout : stderr);
    return p == 1 ? 0 : 2;
  }
  /* Blocked before the rendezvous thread starts, so that it inherits the mask and only
   * sigtimedwait below ever takes these signals. */
  sigset_t set, orig;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  sigaddset(&set, SIGQUIT);
  sigprocmask(SIG_BLOCK, &set, &orig);
  return pl_run(&a, &set, &orig);
}
