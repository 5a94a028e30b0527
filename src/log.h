/* log.h -- PURLIN_DEBUG logging with a per-rank prefix. */
#ifndef PL_LOG_H
#define PL_LOG_H

#include <stdarg.h>

typedef enum {
  PL_LOG_NONE = 0,  /* PURLIN_DEBUG unset or NONE */
  PL_LOG_ERROR = 1, /* ERROR: errors decided by this rank (default) */
  PL_LOG_WARN = 2,  /* WARN */
  PL_LOG_INFO = 3,  /* INFO: init, plan choices, sizes */
  PL_LOG_TRACE = 4  /* TRACE: every call and wait */
} pl_log_level_t;

/* Current level, parsed once from PURLIN_DEBUG (NONE/ERROR/WARN/INFO/TRACE or 0..4). */
pl_log_level_t pl_log_level(void);

/* Set the prefix of this process's lines, e.g. "host:1234 rank 3/8". */
void pl_log_set_prefix(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Write one line "purlin <prefix> LEVEL file:line message" to stderr (or PURLIN_DEBUG_FILE, where
 * %h is replaced by the host name and %p by the pid) if level <= pl_log_level(). */
void pl_log_write(pl_log_level_t level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define PL_LOG(level, ...)                                                                         \
  do {                                                                                             \
    if ((level) <= pl_log_level()) pl_log_write((level), __FILE__, __LINE__, __VA_ARGS__);         \
  } while (0)
#define PL_ERROR(...) PL_LOG(PL_LOG_ERROR, __VA_ARGS__)
#define PL_WARN(...) PL_LOG(PL_LOG_WARN, __VA_ARGS__)
#define PL_INFO(...) PL_LOG(PL_LOG_INFO, __VA_ARGS__)
#define PL_TRACE(...) PL_LOG(PL_LOG_TRACE, __VA_ARGS__)

#endif
