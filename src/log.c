/* log.c -- PURLIN_DEBUG logging.
 *
 * Every line is formatted into one buffer and written with one write() call on a descriptor opened
 * with O_APPEND (or stderr), so lines from several threads and processes never interleave. Lines
 * are capped at PIPE_BUF bytes, the size up to which a write to a pipe is atomic too.
 *
 * The level and the file are read once (pthread_once) from PURLIN_DEBUG and PURLIN_DEBUG_FILE. A
 * level that does not parse, or a file that cannot be opened, is reported after the initialisation
 * has finished (never inside it: reporting logs, and logging needs the initialisation). Logging
 * preserves errno, so that callers can log on an error path before they read errno. */
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "param.h"

#define PL_LOG_LINE_MAX PIPE_BUF
#define PL_LOG_PREFIX_MAX 256
#define PL_LOG_PATH_MAX 4096

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static atomic_int g_level = PL_LOG_ERROR;
static int g_fd = STDERR_FILENO;
static char g_host[HOST_NAME_MAX + 1];

/* Problems found during the initialisation, reported once after it. */
static atomic_int g_report_pending;
static char g_bad_level[64];
static char g_bad_file[PL_LOG_PATH_MAX];
static int g_bad_file_errno;

static pthread_mutex_t g_prefix_mu = PTHREAD_MUTEX_INITIALIZER;
static char g_prefix[PL_LOG_PREFIX_MAX]; /* "" until pl_log_set_prefix: then "<host>:<pid>" */

static const char *const g_level_names[] = {"NONE", "ERROR", "WARN", "INFO", "TRACE"};

/* "NONE".."TRACE" in any case or "0".."4", with optional surrounding blanks; -1 otherwise. */
static int parse_level(const char *s) {
  while (*s == ' ' || *s == '\t')
    s++;
  size_t n = strlen(s);
  while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n'))
    n--;
  if (n == 1 && s[0] >= '0' && s[0] <= '4')
    return s[0] - '0';
  for (int i = PL_LOG_NONE; i <= PL_LOG_TRACE; i++) {
    if (strlen(g_level_names[i]) == n && strncasecmp(s, g_level_names[i], n) == 0)
      return i;
  }
  return -1;
}

/* Copy `pattern` into `out` with %h -> host, %p -> pid, %% -> %; -1 if it does not fit. */
static int expand_path(const char *pattern, char *out, size_t cap) {
  size_t o = 0;
  char pid[24];
  snprintf(pid, sizeof(pid), "%ld", (long)getpid());
  for (const char *p = pattern; *p != '\0'; p++) {
    const char *add = NULL;
    char one[2] = {*p, '\0'};
    if (p[0] == '%' && p[1] == 'h') {
      add = g_host;
    } else if (p[0] == '%' && p[1] == 'p') {
      add = pid;
    } else if (p[0] == '%' && p[1] == '%') {
      add = "%";
    }
    if (add != NULL) {
      p++;
    } else {
      add = one;
    }
    size_t n = strlen(add);
    if (o + n >= cap)
      return -1;
    memcpy(out + o, add, n);
    o += n;
  }
  out[o] = '\0';
  return 0;
}

static void open_file(const char *pattern) {
  char path[PL_LOG_PATH_MAX];
  if (expand_path(pattern, path, sizeof(path)) != 0) {
    snprintf(g_bad_file, sizeof(g_bad_file), "%s", pattern);
    g_bad_file_errno = ENAMETOOLONG;
    return;
  }
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    snprintf(g_bad_file, sizeof(g_bad_file), "%s", path);
    g_bad_file_errno = errno;
    return;
  }
  g_fd = fd;
}

static void log_init(void) {
  if (gethostname(g_host, sizeof(g_host)) != 0)
    snprintf(g_host, sizeof(g_host), "unknown");
  g_host[sizeof(g_host) - 1] = '\0';
  char *dot = strchr(g_host, '.');
  if (dot != NULL && dot != g_host)
    *dot = '\0'; /* the short name, as in most tools' logs */

  const char *lv = pl_param_str(PL_PARAM_DEBUG);
  int level = parse_level(lv);
  if (level < 0) {
    snprintf(g_bad_level, sizeof(g_bad_level), "%s", lv);
    level = PL_LOG_ERROR;
  }
  const char *file = pl_param_str(PL_PARAM_DEBUG_FILE);
  if (level > PL_LOG_NONE && file[0] != '\0')
    open_file(file); /* no empty files at level NONE */
  atomic_store(&g_level, level);
  if (g_bad_level[0] != '\0' || g_bad_file[0] != '\0')
    atomic_store(&g_report_pending, 1);
}

static void report_init_problems(void) {
  if (g_bad_level[0] != '\0') {
    pl_log_write(PL_LOG_ERROR, __FILE__, __LINE__,
                 "PURLIN_DEBUG=\"%s\" is not a level (NONE, ERROR, WARN, INFO, TRACE or 0..4); "
                 "using ERROR",
                 g_bad_level);
  }
  if (g_bad_file[0] != '\0') {
    pl_log_write(PL_LOG_ERROR, __FILE__, __LINE__,
                 "cannot open PURLIN_DEBUG_FILE \"%s\": %s; logging to stderr", g_bad_file,
                 strerror(g_bad_file_errno));
  }
}

pl_log_level_t pl_log_level(void) {
  int saved_errno = errno;
  pthread_once(&g_once, log_init);
  if (atomic_load_explicit(&g_report_pending, memory_order_relaxed) &&
      atomic_exchange(&g_report_pending, 0)) {
    report_init_problems();
  }
  errno = saved_errno;
  return (pl_log_level_t)atomic_load_explicit(&g_level, memory_order_relaxed);
}

void pl_log_set_prefix(const char *fmt, ...) {
  char buf[PL_LOG_PREFIX_MAX] = "";
  if (fmt != NULL) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
  }
  pthread_mutex_lock(&g_prefix_mu);
  memcpy(g_prefix, buf, sizeof(g_prefix));
  pthread_mutex_unlock(&g_prefix_mu);
}

/* The prefix in force; the default is computed per line so that a forked child shows its pid. */
static void get_prefix(char *out, size_t cap) {
  pthread_mutex_lock(&g_prefix_mu);
  snprintf(out, cap, "%s", g_prefix);
  pthread_mutex_unlock(&g_prefix_mu);
  if (out[0] == '\0')
    snprintf(out, cap, "%s:%ld", g_host, (long)getpid());
}

static const char *base_name(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash != NULL ? slash + 1 : path;
}

static void write_all(int fd, const char *buf, size_t len) {
  while (len > 0) {
    ssize_t n = write(fd, buf, len);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return; /* nowhere left to report it */
    }
    buf += n;
    len -= (size_t)n;
  }
}

void pl_log_write(pl_log_level_t level, const char *file, int line, const char *fmt, ...) {
  if (level <= PL_LOG_NONE || level > PL_LOG_TRACE || level > pl_log_level())
    return;
  int saved_errno = errno;
  char prefix[PL_LOG_PREFIX_MAX];
  get_prefix(prefix, sizeof(prefix));

  /* Room for the text and its '\n'; snprintf's NUL takes the last byte. */
  char buf[PL_LOG_LINE_MAX + 1];
  const size_t cap = PL_LOG_LINE_MAX - 1;
  int head = snprintf(buf, cap + 1, "purlin %s %s %s:%d ", prefix, g_level_names[level],
                      base_name(file != NULL ? file : "?"), line);
  size_t len = head < 0 ? 0 : ((size_t)head > cap ? cap : (size_t)head);
  if (len < cap && fmt != NULL) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + len, cap + 1 - len, fmt, ap);
    va_end(ap);
    if (n > 0) {
      if ((size_t)n > cap - len) {
        len = cap;
        memcpy(buf + cap - 3, "...", 3); /* mark the cut */
      } else {
        len += (size_t)n;
      }
    }
  }
  while (len > 0 && buf[len - 1] == '\n')
    len--; /* one line, whatever the message ends with */
  buf[len++] = '\n';
  write_all(g_fd, buf, len);
  errno = saved_errno;
}
