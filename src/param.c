/* param.c -- every PURLIN_* environment setting: parsed once into a snapshot, read lock-free.
 *
 * The settings in force live in a snapshot: the first read builds one (pthread_once) and
 * pl_param_reload() builds a fresh one and swaps it in atomically. Old snapshots are never freed,
 * so a string returned by pl_param_str() stays valid for the life of the process even across a
 * reload, and readers need no lock. Reloads are for tests, so the memory kept is negligible.
 *
 * Logging and settings depend on each other: the log level is the setting PURLIN_DEBUG, and a
 * malformed setting is reported with PL_WARN. To keep that from recursing, building a snapshot
 * never logs and pl_param_str() never logs; only pl_param_int() reports a malformed value (once per
 * snapshot), and the log module reads only STR settings, which cannot be malformed. */
#include "param.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

typedef enum { PL_KIND_INT, PL_KIND_SIZE, PL_KIND_STR } pl_param_kind_t;

typedef struct {
  const char *name;
  pl_param_kind_t kind;
  const char *def;
  const char *doc;
} pl_param_desc_t;

static const pl_param_desc_t g_desc[PL_PARAM_COUNT] = {
#define PL_PARAM_DESC_(id, kind, def, doc) {"PURLIN_" #id, PL_KIND_##kind, def, doc},
    PL_PARAM_TABLE(PL_PARAM_DESC_)
#undef PL_PARAM_DESC_
};

typedef struct pl_param_snap {
  struct pl_param_snap *prev;        /* the snapshot this one replaced; kept alive on purpose */
  int64_t value[PL_PARAM_COUNT];     /* INT and SIZE: the value in force */
  const char *text[PL_PARAM_COUNT];  /* the value in force as text: env copy or the default */
  char *env[PL_PARAM_COUNT];         /* copy of the environment's value; NULL when unset or "" */
  unsigned char bad[PL_PARAM_COUNT]; /* env[] is set but malformed: the default is in force */
  atomic_int warned[PL_PARAM_COUNT]; /* the malformed value has been reported */
} pl_param_snap_t;

static pl_param_snap_t g_first;
static _Atomic(pl_param_snap_t *) g_cur;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t g_reload_mu = PTHREAD_MUTEX_INITIALIZER;

int pl_parse_size(const char *s, uint64_t *out) {
  if (s == NULL || out == NULL)
    return -1;
  const char *p = s;
  while (isspace((unsigned char)*p))
    p++;
  if (!isdigit((unsigned char)*p))
    return -1; /* empty, sign, or garbage */
  uint64_t v = 0;
  for (; isdigit((unsigned char)*p); p++) {
    unsigned d = (unsigned)(*p - '0');
    if (v > (UINT64_MAX - d) / 10)
      return -1;
    v = v * 10 + d;
  }
  static const char units[] = "KMGT"; /* 2^10, 2^20, 2^30, 2^40 */
  const char *u = *p != '\0' ? strchr(units, toupper((unsigned char)*p)) : NULL;
  unsigned shift = u != NULL ? 10u * (unsigned)(u - units + 1) : 0;
  if (shift != 0) {
    p++;
    if (toupper((unsigned char)p[0]) == 'I' && toupper((unsigned char)p[1]) == 'B') {
      p += 2;
    } else if (toupper((unsigned char)*p) == 'B') {
      p++;
    }
  } else if (toupper((unsigned char)*p) == 'B') {
    p++;
  }
  while (isspace((unsigned char)*p))
    p++;
  if (*p != '\0')
    return -1;
  if (shift != 0 && v > (UINT64_MAX >> shift))
    return -1;
  *out = v << shift;
  return 0;
}

/* A decimal integer, optionally signed, with optional surrounding blanks; 0 or -1. */
static int parse_int(const char *s, int64_t *out) {
  char *end = NULL;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (end == s || errno == ERANGE)
    return -1;
  while (isspace((unsigned char)*end))
    end++;
  if (*end != '\0')
    return -1;
  *out = (int64_t)v;
  return 0;
}

static int parse_value(pl_param_kind_t kind, const char *s, int64_t *out) {
  if (kind == PL_KIND_INT)
    return parse_int(s, out);
  uint64_t v = 0;
  if (pl_parse_size(s, &v) != 0 || v > (uint64_t)INT64_MAX)
    return -1;
  *out = (int64_t)v;
  return 0;
}

/* Fill a zeroed snapshot from the environment. Must not log (see the top of the file). */
static void snap_fill(pl_param_snap_t *s) {
  int saved_errno = errno;
  for (int i = 0; i < PL_PARAM_COUNT; i++) {
    const pl_param_desc_t *d = &g_desc[i];
    atomic_init(&s->warned[i], 0);
    s->text[i] = d->def;
    if (d->kind != PL_KIND_STR && parse_value(d->kind, d->def, &s->value[i]) != 0) {
      s->value[i] = 0; /* a bad default in the table; tests catch it */
    }
    const char *e = getenv(d->name);
    if (e == NULL || e[0] == '\0')
      continue; /* set but empty counts as unset */
    s->env[i] = strdup(e);
    if (s->env[i] == NULL)
      continue; /* out of memory: the default */
    int64_t v = 0;
    if (d->kind == PL_KIND_STR) {
      s->text[i] = s->env[i];
    } else if (parse_value(d->kind, s->env[i], &v) == 0) {
      s->value[i] = v;
      s->text[i] = s->env[i];
    } else {
      s->bad[i] = 1;
    }
  }
  errno = saved_errno;
}

static void first_load(void) {
  snap_fill(&g_first);
  atomic_store_explicit(&g_cur, &g_first, memory_order_release);
}

static pl_param_snap_t *snap_get(void) {
  pl_param_snap_t *s = atomic_load_explicit(&g_cur, memory_order_acquire);
  if (s != NULL)
    return s;
  pthread_once(&g_once, first_load);
  return atomic_load_explicit(&g_cur, memory_order_acquire);
}

void pl_param_reload(void) {
  pthread_once(&g_once, first_load);
  pl_param_snap_t *s = calloc(1, sizeof(*s));
  if (s == NULL) {
    PL_WARN("pl_param_reload: out of memory; the settings stay as they were");
    return;
  }
  snap_fill(s);
  pthread_mutex_lock(&g_reload_mu);
  s->prev = atomic_load_explicit(&g_cur, memory_order_relaxed);
  atomic_store_explicit(&g_cur, s, memory_order_release);
  pthread_mutex_unlock(&g_reload_mu);
}

static int valid_id(pl_param_id_t id) {
  return (int)id >= 0 && (int)id < PL_PARAM_COUNT;
}

int64_t pl_param_int(pl_param_id_t id) {
  if (!valid_id(id) || g_desc[id].kind == PL_KIND_STR)
    return 0;
  pl_param_snap_t *s = snap_get();
  if (s->bad[id] && !atomic_exchange(&s->warned[id], 1)) {
    PL_WARN("%s=\"%s\" is not a valid %s; using the default %s", g_desc[id].name, s->env[id],
            g_desc[id].kind == PL_KIND_INT ? "integer" : "size (such as 4096, 64K, 4MiB)",
            g_desc[id].def);
  }
  return s->value[id];
}

const char *pl_param_str(pl_param_id_t id) {
  if (!valid_id(id))
    return "";
  return snap_get()->text[id];
}

const char *pl_param_name(pl_param_id_t id) {
  if (!valid_id(id))
    return "PURLIN_INVALID";
  return g_desc[id].name;
}

/* Empty strings print as "" so that the column is never blank. */
static const char *shown(const char *s) {
  return s[0] != '\0' ? s : "\"\"";
}

static int max_int(int a, int b) {
  return a > b ? a : b;
}

void pl_param_print(FILE *out) {
  if (out == NULL)
    return;
  const pl_param_snap_t *s = snap_get();
  int wname = (int)strlen("NAME"), wval = (int)strlen("VALUE"), wdef = (int)strlen("DEFAULT");
  int wsrc = (int)strlen("default");
  for (int i = 0; i < PL_PARAM_COUNT; i++) {
    wname = max_int(wname, (int)strlen(g_desc[i].name));
    wval = max_int(wval, (int)strlen(shown(s->text[i])));
    wdef = max_int(wdef, (int)strlen(shown(g_desc[i].def)));
  }
  fprintf(out, "%-*s  %-*s  %-*s  %-*s  %s\n", wname, "NAME", wval, "VALUE", wdef, "DEFAULT", wsrc,
          "SOURCE", "DOC");
  for (int i = 0; i < PL_PARAM_COUNT; i++) {
    const char *src = (s->env[i] != NULL && !s->bad[i]) ? "env" : "default";
    fprintf(out, "%-*s  %-*s  %-*s  %-*s  %s\n", wname, g_desc[i].name, wval, shown(s->text[i]),
            wdef, shown(g_desc[i].def), wsrc, src, g_desc[i].doc);
  }
  for (int i = 0; i < PL_PARAM_COUNT; i++) {
    if (s->bad[i]) {
      fprintf(out, "note: %s=\"%s\" is malformed; the default is in force\n", g_desc[i].name,
              s->env[i]);
    }
  }
}
