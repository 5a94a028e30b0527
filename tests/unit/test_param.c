/* test_param -- PURLIN_* settings: size parsing, defaults, environment overrides, malformed values
 * (warned once, default used), reload, the printed table, concurrent reads during reloads. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "param.h"

static int g_failures;

#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);                              \
      g_failures++;                                                                                \
    }                                                                                              \
  } while (0)

static char g_log_path[256];

static void test_parse_size_good(void) {
  static const struct {
    const char *s;
    uint64_t want;
  } cases[] = {
      {"0", 0},
      {"1", 1},
      {"4096", 4096},
      {"4096B", 4096},
      {"64K", 64ull << 10},
      {"64k", 64ull << 10},
      {"64KB", 64ull << 10},
      {"64KiB", 64ull << 10},
      {"64kib", 64ull << 10},
      {"1M", 1ull << 20},
      {"4MiB", 4ull << 20},
      {"3G", 3ull << 30},
      {"2T", 2ull << 40},
      {"0K", 0},
      {" 8K ", 8ull << 10},
      {"007", 7},
      {"18446744073709551615", UINT64_MAX},
      {"16777215T", 16777215ull << 40},
      {"17179869183G", 17179869183ull << 30},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    uint64_t v = 12345;
    int rc = pl_parse_size(cases[i].s, &v);
    if (rc != 0 || v != cases[i].want) {
      fprintf(stderr, "FAIL pl_parse_size(\"%s\"): rc %d value %llu, want 0 and %llu\n", cases[i].s,
              rc, (unsigned long long)v, (unsigned long long)cases[i].want);
      g_failures++;
    }
  }
}

static void test_parse_size_bad(void) {
  static const char *const bad[] = {
      "",
      " ",
      "abc",
      "K",
      "-1",
      "-4K",
      "+4K",
      "1.5M",
      "1X",
      "1KK",
      "1iB",
      "1 K",
      "4K4",
      "0x10",
      "1e3",
      "1KBB",
      "1Ki",
      "4 096",
      "18446744073709551616", /* 2^64 */
      "99999999999999999999999999",
      "16777216T",    /* 2^64 */
      "17179869184G", /* 2^64 */
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    uint64_t v = 777;
    int rc = pl_parse_size(bad[i], &v);
    if (rc != -1 || v != 777) {
      fprintf(stderr, "FAIL pl_parse_size(\"%s\"): rc %d value %llu, want -1 and untouched\n",
              bad[i], rc, (unsigned long long)v);
      g_failures++;
    }
  }
  uint64_t v = 0;
  CHECK(pl_parse_size(NULL, &v) == -1);
  CHECK(pl_parse_size("1", NULL) == -1);
}

static void unset_all(void) {
  for (int i = 0; i < PL_PARAM_COUNT; i++) {
    if (i == PL_PARAM_DEBUG || i == PL_PARAM_DEBUG_FILE)
      continue; /* the log of this test */
    unsetenv(pl_param_name((pl_param_id_t)i));
  }
}

static void test_defaults(void) {
  unset_all();
  pl_param_reload();
  CHECK(strcmp(pl_param_name(PL_PARAM_TIMEOUT_MS), "PURLIN_TIMEOUT_MS") == 0);
  CHECK(strcmp(pl_param_name(PL_PARAM_STAGING_BYTES), "PURLIN_STAGING_BYTES") == 0);
  CHECK(pl_param_int(PL_PARAM_TIMEOUT_MS) == 120000);
  CHECK(pl_param_int(PL_PARAM_STAGING_BYTES) == 0);
  CHECK(pl_param_int(PL_PARAM_PACKET_BYTES) == 0); /* default: the tuning table */
  CHECK(pl_param_int(PL_PARAM_CHUNK_BYTES) == 0);
  CHECK(pl_param_int(PL_PARAM_SPIN_ITERS) == 2000);
  CHECK(pl_param_int(PL_PARAM_DISABLE_MULTIMEM) == 1);
  CHECK(strcmp(pl_param_str(PL_PARAM_DATAPATH), "auto") == 0);
  CHECK(strcmp(pl_param_str(PL_PARAM_STAGING_BYTES), "0") == 0);
  /* Every INT/SIZE default in the table parses (a bad default would read as 0 and warn). */
#define CHECK_DEFAULT_(id, kind, def, doc)                                                         \
  if (strcmp(#kind, "STR") != 0) {                                                                 \
    int64_t v_ = pl_param_int(PL_PARAM_##id);                                                      \
    uint64_t w_ = 0;                                                                               \
    if (strcmp(#kind, "SIZE") == 0) {                                                              \
      CHECK(pl_parse_size(def, &w_) == 0 && (uint64_t)v_ == w_);                                   \
    } else {                                                                                       \
      CHECK(v_ == strtoll(def, NULL, 10));                                                         \
    }                                                                                              \
  }
  PL_PARAM_TABLE(CHECK_DEFAULT_)
#undef CHECK_DEFAULT_
  /* Out-of-range ids are harmless. */
  CHECK(pl_param_int((pl_param_id_t)PL_PARAM_COUNT) == 0);
  CHECK(pl_param_int((pl_param_id_t)-1) == 0);
  CHECK(pl_param_str((pl_param_id_t)PL_PARAM_COUNT) != NULL);
  CHECK(pl_param_int(PL_PARAM_DATAPATH) == 0); /* a STR setting has no integer value */
}

static void test_env_and_reload(void) {
  unset_all();
  pl_param_reload();
  setenv("PURLIN_PACKET_BYTES", "128K", 1);
  setenv("PURLIN_TIMEOUT_MS", "5000", 1);
  setenv("PURLIN_DATAPATH", "host", 1);
  setenv("PURLIN_SPIN_ITERS", "-3", 1);
  /* Cached: nothing changes until a reload. */
  CHECK(pl_param_int(PL_PARAM_PACKET_BYTES) == 0); /* default: the tuning table */
  CHECK(pl_param_int(PL_PARAM_TIMEOUT_MS) == 120000);
  CHECK(strcmp(pl_param_str(PL_PARAM_DATAPATH), "auto") == 0);
  const char *old_datapath = pl_param_str(PL_PARAM_DATAPATH);
  pl_param_reload();
  CHECK(pl_param_int(PL_PARAM_PACKET_BYTES) == 128 << 10);
  CHECK(strcmp(pl_param_str(PL_PARAM_PACKET_BYTES), "128K") == 0);
  CHECK(pl_param_int(PL_PARAM_TIMEOUT_MS) == 5000);
  CHECK(pl_param_int(PL_PARAM_SPIN_ITERS) == -3);
  CHECK(strcmp(pl_param_str(PL_PARAM_DATAPATH), "host") == 0);
  CHECK(strcmp(old_datapath, "auto") == 0); /* strings from before a reload stay valid */
  /* The environment's value is copied: changing it later changes nothing until a reload. */
  setenv("PURLIN_DATAPATH", "cuda", 1);
  CHECK(strcmp(pl_param_str(PL_PARAM_DATAPATH), "host") == 0);
  pl_param_reload();
  CHECK(strcmp(pl_param_str(PL_PARAM_DATAPATH), "cuda") == 0);
  /* Set but empty counts as unset. */
  setenv("PURLIN_TIMEOUT_MS", "", 1);
  pl_param_reload();
  CHECK(pl_param_int(PL_PARAM_TIMEOUT_MS) == 120000);
  /* Back to defaults after unset + reload. */
  unset_all();
  pl_param_reload();
  CHECK(pl_param_int(PL_PARAM_PACKET_BYTES) == 0); /* default: the tuning table */
  CHECK(strcmp(pl_param_str(PL_PARAM_DATAPATH), "auto") == 0);
}

static char *read_file(const char *path) {
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return calloc(1, 1);
  static char buf[1 << 16];
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  return strdup(buf);
}

static int count_substr(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = strstr(hay, needle); p != NULL; p = strstr(p + 1, needle))
    n++;
  return n;
}

static void test_malformed(void) {
  unset_all();
  setenv("PURLIN_TIMEOUT_MS", "12abc", 1);
  setenv("PURLIN_SPIN_ITERS", "99999999999999999999", 1); /* overflows int64 */
  setenv("PURLIN_STAGING_BYTES", "-4K", 1);
  setenv("PURLIN_PACKET_BYTES", "8388608T", 1); /* 2^63: does not fit an int64 */
  setenv("PURLIN_CHUNK_BYTES", "1.5M", 1);
  pl_param_reload();
  for (int round = 0; round < 3; round++) {
    CHECK(pl_param_int(PL_PARAM_TIMEOUT_MS) == 120000);
    CHECK(pl_param_int(PL_PARAM_SPIN_ITERS) == 2000);
    CHECK(pl_param_int(PL_PARAM_STAGING_BYTES) == 0);
    CHECK(pl_param_int(PL_PARAM_PACKET_BYTES) == 0); /* default: the tuning table */
    CHECK(pl_param_int(PL_PARAM_CHUNK_BYTES) == 0);
  }
  CHECK(strcmp(pl_param_str(PL_PARAM_TIMEOUT_MS), "120000") == 0); /* the default is in force */
  /* Each malformed value was reported exactly once, naming the variable and the value. */
  char *log = read_file(g_log_path);
  CHECK(count_substr(log, "PURLIN_TIMEOUT_MS=\"12abc\"") == 1);
  CHECK(count_substr(log, "PURLIN_SPIN_ITERS=\"99999999999999999999\"") == 1);
  CHECK(count_substr(log, "PURLIN_STAGING_BYTES=\"-4K\"") == 1);
  CHECK(count_substr(log, "PURLIN_PACKET_BYTES=\"8388608T\"") == 1);
  CHECK(count_substr(log, "PURLIN_CHUNK_BYTES=\"1.5M\"") == 1);
  CHECK(count_substr(log, " WARN ") == 5);
  if (g_failures)
    fprintf(stderr, "log was:\n%s", log);
  free(log);
  unset_all();
  pl_param_reload();
}

static void test_print(void) {
  unset_all();
  setenv("PURLIN_PACKET_BYTES", "256K", 1);
  setenv("PURLIN_TIMEOUT_MS", "oops", 1);
  pl_param_reload();
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  CHECK(f != NULL);
  if (f == NULL)
    return;
  pl_param_print(f);
  fclose(f);

  CHECK(strncmp(text, "NAME ", 5) == 0);
  CHECK(strstr(text, "VALUE") && strstr(text, "DEFAULT") && strstr(text, "SOURCE") &&
        strstr(text, "DOC"));
  /* Every setting has a row; the DOC column starts at the same place in every row. */
  const char *header_doc = strstr(text, "DOC");
  long doc_col = header_doc ? (long)(header_doc - text) : -1;
#define CHECK_ROW_(id, kind, def, doc)                                                             \
  {                                                                                                \
    const char *row_ = strstr(text, "\nPURLIN_" #id " ");                                          \
    CHECK(row_ != NULL);                                                                           \
    if (row_ != NULL) {                                                                            \
      row_++;                                                                                      \
      const char *end_ = strchr(row_, '\n');                                                       \
      const char *d_ = strstr(row_, doc);                                                          \
      CHECK(d_ != NULL && end_ != NULL && d_ < end_ && d_ - row_ == doc_col);                      \
    }                                                                                              \
  }
  PL_PARAM_TABLE(CHECK_ROW_)
#undef CHECK_ROW_
  int rows = count_substr(text, "\nPURLIN_");
  CHECK(rows == PL_PARAM_COUNT);
  /* Values and sources. */
  const char *pb = strstr(text, "\nPURLIN_PACKET_BYTES ");
  CHECK(pb != NULL && strstr(pb, " 256K ") && strstr(pb, " 0 ") && strstr(pb, " env "));
  CHECK(pb != NULL && strstr(pb, " env ") < strchr(pb + 1, '\n'));
  const char *to = strstr(text, "\nPURLIN_TIMEOUT_MS ");
  CHECK(to != NULL && strstr(to, " default ") < strchr(to + 1, '\n'));
  CHECK(strstr(text, "PURLIN_TIMEOUT_MS=\"oops\" is malformed") != NULL);
  if (g_failures)
    fprintf(stderr, "table was:\n%s", text);
  free(text);
  unset_all();
  pl_param_reload();
}

static atomic_int g_stop;

static void *reader(void *arg) {
  (void)arg;
  long bad = 0;
  while (!atomic_load(&g_stop)) {
    if (pl_param_int(PL_PARAM_PACKET_BYTES) != 32 << 10)
      bad++;
    if (strcmp(pl_param_str(PL_PARAM_DATAPATH), "host") != 0)
      bad++;
  }
  return (void *)bad;
}

static void test_concurrent_reload(void) {
  unset_all();
  setenv("PURLIN_PACKET_BYTES", "32K", 1);
  setenv("PURLIN_DATAPATH", "host", 1);
  pl_param_reload();
  pthread_t t[4];
  for (int i = 0; i < 4; i++)
    CHECK(pthread_create(&t[i], NULL, reader, NULL) == 0);
  for (int i = 0; i < 200; i++)
    pl_param_reload();
  atomic_store(&g_stop, 1);
  for (int i = 0; i < 4; i++) {
    void *bad = NULL;
    pthread_join(t[i], &bad);
    CHECK(bad == NULL);
  }
  unset_all();
  pl_param_reload();
}

int main(void) {
  /* The log of this process goes to a file, at WARN, so that warnings can be counted. */
  snprintf(g_log_path, sizeof(g_log_path), "/tmp/purlin_test_param_%ld.log", (long)getpid());
  unlink(g_log_path);
  setenv("PURLIN_DEBUG", "WARN", 1);
  setenv("PURLIN_DEBUG_FILE", g_log_path, 1);
  unset_all();
  CHECK(pl_log_level() == PL_LOG_WARN);

  test_parse_size_good();
  test_parse_size_bad();
  test_defaults();
  test_env_and_reload();
  test_malformed();
  test_print();
  test_concurrent_reload();

  unlink(g_log_path);
  if (g_failures) {
    fprintf(stderr, "test_param: %d failure(s)\n", g_failures);
    return 1;
  }
  printf("test_param: ok\n");
  return 0;
}
