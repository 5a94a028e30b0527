/* test_log -- PURLIN_DEBUG logging: level parsing, the line format and prefix, PURLIN_DEBUG_FILE
 * with %h/%p, nothing written below the level, whole lines under concurrent writers, errno
 * preserved.
 *
 * The level is read once per process, so every case runs in a forked child with its own
 * environment; the parent never calls into the library. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "log.h"

static int g_failures;
static char g_dir[64];
static char g_host[256];

#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);                              \
      g_failures++;                                                                                \
    }                                                                                              \
  } while (0)

typedef int (*child_fn)(void *arg);

static pid_t spawn(const char *debug, const char *file, child_fn fn, void *arg) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    if (debug != NULL) {
      setenv("PURLIN_DEBUG", debug, 1);
    } else {
      unsetenv("PURLIN_DEBUG");
    }
    if (file != NULL) {
      setenv("PURLIN_DEBUG_FILE", file, 1);
    } else {
      unsetenv("PURLIN_DEBUG_FILE");
    }
    _exit(fn(arg));
  }
  return pid;
}

/* The child's exit status, or -1 if it did not exit normally. */
static int reap(pid_t pid) {
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
    return -1;
  return WEXITSTATUS(status);
}

static int run(const char *debug, const char *file, child_fn fn, void *arg, pid_t *pid_out) {
  pid_t pid = spawn(debug, file, fn, arg);
  if (pid_out != NULL)
    *pid_out = pid;
  return reap(pid);
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return NULL;
  size_t cap = 1 << 16, len = 0;
  char *buf = malloc(cap);
  size_t n;
  while ((n = fread(buf + len, 1, cap - len - 1, f)) > 0) {
    len += n;
    if (cap - len < 2)
      buf = realloc(buf, cap *= 2);
  }
  fclose(f);
  buf[len] = '\0';
  return buf;
}

static int count_lines(const char *s) {
  int n = 0;
  for (; *s; s++)
    n += *s == '\n';
  return n;
}

static int count_substr(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = strstr(hay, needle); p != NULL; p = strstr(p + 1, needle))
    n++;
  return n;
}

/* Does `line` read "<head><digits> <tail>\n"? */
static int line_is(const char *line, const char *head, const char *tail) {
  size_t h = strlen(head);
  if (strncmp(line, head, h) != 0)
    return 0;
  const char *p = line + h;
  if (*p < '0' || *p > '9')
    return 0;
  while (*p >= '0' && *p <= '9')
    p++;
  if (*p++ != ' ')
    return 0;
  size_t t = strlen(tail);
  return strncmp(p, tail, t) == 0 && p[t] == '\n';
}

/* ---- level parsing ---- */

static int child_level(void *arg) {
  (void)arg;
  int fd = open("/dev/null", O_WRONLY); /* the report of a bad level is tested below */
  if (fd >= 0)
    dup2(fd, STDERR_FILENO);
  return (int)pl_log_level();
}

static void test_levels(void) {
  static const struct {
    const char *env; /* NULL: unset */
    int want;
  } cases[] = {
      {NULL, PL_LOG_ERROR},    {"", PL_LOG_ERROR},      {"NONE", PL_LOG_NONE},
      {"none", PL_LOG_NONE},   {"ERROR", PL_LOG_ERROR}, {"error", PL_LOG_ERROR},
      {"WARN", PL_LOG_WARN},   {"Warn", PL_LOG_WARN},   {"INFO", PL_LOG_INFO},
      {"info", PL_LOG_INFO},   {"TRACE", PL_LOG_TRACE}, {"tRaCe", PL_LOG_TRACE},
      {"0", PL_LOG_NONE},      {"1", PL_LOG_ERROR},     {"2", PL_LOG_WARN},
      {"3", PL_LOG_INFO},      {"4", PL_LOG_TRACE},     {" info ", PL_LOG_INFO},
      {"5", PL_LOG_ERROR},     {"-1", PL_LOG_ERROR},    {"garbage", PL_LOG_ERROR},
      {"INFOX", PL_LOG_ERROR}, {"IN", PL_LOG_ERROR},    {"01", PL_LOG_ERROR},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    int got = run(cases[i].env, NULL, child_level, NULL, NULL);
    if (got != cases[i].want) {
      fprintf(stderr, "FAIL PURLIN_DEBUG=%s%s%s: level %d, want %d\n", cases[i].env ? "\"" : "",
              cases[i].env ? cases[i].env : "(unset)", cases[i].env ? "\"" : "", got,
              cases[i].want);
      g_failures++;
    }
  }
}

static int child_error_line(void *arg) {
  (void)arg;
  PL_ERROR("after the bad level");
  return 0;
}

/* A level that does not parse is reported (at ERROR, the level then in force) and ERROR applies. */
static void test_bad_level_reported(void) {
  char path[128];
  snprintf(path, sizeof(path), "%s/badlevel.log", g_dir);
  CHECK(run("loud", path, child_error_line, NULL, NULL) == 0);
  char *log = slurp(path);
  CHECK(log != NULL);
  if (log == NULL)
    return;
  CHECK(count_lines(log) == 2);
  CHECK(count_substr(log, "ERROR log.c:") == 1 && count_substr(log, "PURLIN_DEBUG=\"loud\"") == 1);
  CHECK(count_substr(log, "after the bad level\n") == 1);
  free(log);
}

/* ---- format, prefix, file name ---- */

static int child_format(void *arg) {
  (void)arg;
  pl_log_set_prefix("%s:%d rank %d/%d", "myhost", 42, 3, 8);
  PL_INFO("hello %d", 7);
  PL_TRACE("hidden trace");
  PL_WARN("warned");
  PL_ERROR("error %s", "x");
  PL_ERROR("ends with a newline\n");
  pl_log_set_prefix(NULL); /* back to the default */
  PL_ERROR("default again");
  return 0;
}

static void test_format(void) {
  char pattern[128];
  snprintf(pattern, sizeof(pattern), "%s/log_%%h_%%p_%%%%.txt", g_dir);
  pid_t pid = 0;
  CHECK(run("INFO", pattern, child_format, NULL, &pid) == 0);
  char path[512];
  snprintf(path, sizeof(path), "%s/log_%s_%ld_%%.txt", g_dir, g_host, (long)pid);
  char *log = slurp(path);
  CHECK(log != NULL);
  if (log == NULL) {
    fprintf(stderr, "  no file %s\n", path);
    return;
  }
  CHECK(count_lines(log) == 5);
  const char *l1 = log;
  const char *l2 = l1 ? strchr(l1, '\n') + 1 : NULL;
  const char *l3 = l2 && *l2 ? strchr(l2, '\n') + 1 : NULL;
  const char *l4 = l3 && *l3 ? strchr(l3, '\n') + 1 : NULL;
  const char *l5 = l4 && *l4 ? strchr(l4, '\n') + 1 : NULL;
  CHECK(line_is(l1, "purlin myhost:42 rank 3/8 INFO test_log.c:", "hello 7"));
  CHECK(l2 && line_is(l2, "purlin myhost:42 rank 3/8 WARN test_log.c:", "warned"));
  CHECK(l3 && line_is(l3, "purlin myhost:42 rank 3/8 ERROR test_log.c:", "error x"));
  CHECK(l4 && line_is(l4, "purlin myhost:42 rank 3/8 ERROR test_log.c:", "ends with a newline"));
  char head[512];
  snprintf(head, sizeof(head), "purlin %s:%ld ERROR test_log.c:", g_host, (long)pid);
  CHECK(l5 && line_is(l5, head, "default again"));
  CHECK(strstr(log, "hidden trace") == NULL);
  if (g_failures)
    fprintf(stderr, "log was:\n%s", log);
  free(log);
}

/* ---- nothing below the level ---- */

static int child_all_levels(void *arg) {
  (void)arg;
  PL_ERROR("msg-ERROR");
  PL_WARN("msg-WARN");
  PL_INFO("msg-INFO");
  PL_TRACE("msg-TRACE");
  pl_log_write(PL_LOG_NONE, __FILE__, __LINE__, "msg-NONE");      /* never a line */
  pl_log_write(PL_LOG_TRACE, __FILE__, __LINE__, "direct-TRACE"); /* direct calls check too */
  return 0;
}

static void test_threshold(void) {
  static const char *const names[] = {"NONE", "ERROR", "WARN", "INFO", "TRACE"};
  for (int level = 0; level <= 4; level++) {
    char path[128];
    snprintf(path, sizeof(path), "%s/threshold_%d.log", g_dir, level);
    CHECK(run(names[level], path, child_all_levels, NULL, NULL) == 0);
    char *log = slurp(path);
    if (level == 0) {
      CHECK(log == NULL); /* at NONE the file is not even created */
      free(log);
      continue;
    }
    CHECK(log != NULL);
    if (log == NULL)
      continue;
    CHECK(count_lines(log) == level + (level == 4));
    CHECK(strstr(log, "msg-NONE") == NULL);
    CHECK(count_substr(log, "direct-TRACE") == (level == 4));
    for (int l = 1; l <= 4; l++) {
      char marker[32], tag[32];
      snprintf(marker, sizeof(marker), "msg-%s\n", names[l]);
      snprintf(tag, sizeof(tag), " %s test_log.c:", names[l]);
      int want = l <= level ? 1 : 0;
      int tags = want + (l == 4 && level == 4); /* the direct TRACE line */
      if (count_substr(log, marker) != want || count_substr(log, tag) != tags) {
        fprintf(stderr, "FAIL level %s: %s written %d times, want %d\n", names[level], names[l],
                count_substr(log, marker), want);
        g_failures++;
      }
    }
    free(log);
  }
}

/* ---- whole lines from many threads and processes ---- */

enum { WRITERS = 4, LINES = 400, PROCS = 3 };

static void *writer(void *arg) {
  int id = (int)(long)arg;
  char payload[301];
  memset(payload, 'a' + id, 300);
  payload[300] = '\0';
  for (int i = 0; i < LINES; i++)
    PL_INFO("w%d %s end", id, payload);
  return NULL;
}

static int child_threads(void *arg) {
  (void)arg;
  pthread_t t[WRITERS];
  for (int i = 0; i < WRITERS; i++) {
    if (pthread_create(&t[i], NULL, writer, (void *)(long)i) != 0)
      return 1;
  }
  for (int i = 0; i < WRITERS; i++)
    pthread_join(t[i], NULL);
  return 0;
}

static void test_whole_lines(void) {
  char path[128];
  snprintf(path, sizeof(path), "%s/shared.log", g_dir);
  pid_t pids[PROCS];
  for (int p = 0; p < PROCS; p++)
    pids[p] = spawn("INFO", path, child_threads, NULL);
  for (int p = 0; p < PROCS; p++)
    CHECK(reap(pids[p]) == 0);
  char *log = slurp(path);
  CHECK(log != NULL);
  if (log == NULL)
    return;
  CHECK(count_lines(log) == PROCS * WRITERS * LINES);
  int bad = 0;
  for (char *line = log; *line; line = strchr(line, '\n') + 1) {
    char *nl = strchr(line, '\n');
    if (nl == NULL) {
      bad++;
      break;
    }
    *nl = '\0';
    const char *w = strstr(line, " INFO test_log.c:");
    const char *payload = w ? strstr(w, " w") : NULL;
    int ok = strncmp(line, "purlin ", 7) == 0 && w != NULL && payload != NULL && nl - line >= 4 &&
             strcmp(nl - 4, " end") == 0 && strlen(payload) == 4 + 300 + 4;
    if (ok) {
      char c = payload[4];
      for (int i = 0; i < 300 && ok; i++)
        ok = payload[4 + i] == c;
    }
    bad += !ok;
    *nl = '\n';
  }
  CHECK(bad == 0);
  free(log);
}

/* ---- long lines, errno, unusable file ---- */

static int child_long(void *arg) {
  (void)arg;
  static char big[10000];
  memset(big, 'x', sizeof(big) - 1);
  PL_ERROR("%s", big);
  PL_ERROR("short");
  return 0;
}

static void test_long_line(void) {
  char path[128];
  snprintf(path, sizeof(path), "%s/long.log", g_dir);
  CHECK(run("ERROR", path, child_long, NULL, NULL) == 0);
  char *log = slurp(path);
  CHECK(log != NULL);
  if (log == NULL)
    return;
  CHECK(count_lines(log) == 2);
  char *nl = strchr(log, '\n');
  CHECK(nl != NULL && nl - log + 1 <= PIPE_BUF && nl - log > 3 && strncmp(nl - 3, "...", 3) == 0);
  CHECK(nl != NULL && strstr(nl + 1, " short\n") != NULL);
  free(log);
}

static int child_errno(void *arg) {
  (void)arg;
  errno = ENOENT;
  PL_ERROR("first line initialises the log");
  if (errno != ENOENT)
    return 1;
  errno = EAGAIN;
  PL_TRACE("not written");
  PL_ERROR("written: %s", strerror(errno));
  return errno == EAGAIN ? 0 : 2;
}

static void test_errno(void) {
  char path[128];
  snprintf(path, sizeof(path), "%s/errno.log", g_dir);
  CHECK(run("ERROR", path, child_errno, NULL, NULL) == 0);
  char *log = slurp(path);
  CHECK(log != NULL && count_lines(log) == 2);
  CHECK(log != NULL && strstr(log, strerror(EAGAIN)) != NULL);
  free(log);
}

static char g_stderr_path[128];

static int child_bad_file(void *arg) {
  (void)arg;
  int fd = open(g_stderr_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0 || dup2(fd, STDERR_FILENO) < 0)
    return 3;
  PL_ERROR("to stderr instead");
  return 0;
}

static void test_bad_file(void) {
  snprintf(g_stderr_path, sizeof(g_stderr_path), "%s/stderr.txt", g_dir);
  CHECK(run("ERROR", "/nonexistent-dir/purlin.log", child_bad_file, NULL, NULL) == 0);
  char *err = slurp(g_stderr_path);
  CHECK(err != NULL);
  if (err == NULL)
    return;
  CHECK(count_lines(err) == 2);
  CHECK(strstr(err, "cannot open PURLIN_DEBUG_FILE \"/nonexistent-dir/purlin.log\"") != NULL);
  CHECK(strstr(err, " to stderr instead\n") != NULL);
  free(err);
}

static void remove_dir(void) {
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_dir);
  if (system(cmd) != 0)
    fprintf(stderr, "warning: could not remove %s\n", g_dir);
}

int main(void) {
  snprintf(g_dir, sizeof(g_dir), "/tmp/purlin_test_log_XXXXXX");
  if (mkdtemp(g_dir) == NULL) {
    perror("mkdtemp");
    return 1;
  }
  if (gethostname(g_host, sizeof(g_host)) != 0)
    snprintf(g_host, sizeof(g_host), "unknown");
  g_host[sizeof(g_host) - 1] = '\0';
  char *dot = strchr(g_host, '.');
  if (dot != NULL && dot != g_host)
    *dot = '\0';

  test_levels();
  test_bad_level_reported();
  test_format();
  test_threshold();
  test_whole_lines();
  test_long_line();
  test_errno();
  test_bad_file();

  if (g_failures) {
    fprintf(stderr, "test_log: %d failure(s); files kept in %s\n", g_failures, g_dir);
    return 1;
  }
  remove_dir();
  printf("test_log: ok\n");
  return 0;
}
