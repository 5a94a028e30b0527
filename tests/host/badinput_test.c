/* badinput_test -- bad input to every public function: the right status, a last-error text that
 * names the argument, output parameters untouched, nothing launched, and the communicator still
 * usable afterwards (a correct, checked AllReduce after every bad call; bad calls made by one rank
 * only must not desynchronise the others).
 *
 * Run under purlinrun (any world size): `purlinrun -n 3 badinput_test`. Every rank makes the same
 * sequence of calls, so a bad call that (wrongly) launched something would show up as a hang
 * (bounded by PURLIN_TIMEOUT_MS), a wrong status or a wrong result of the next correct call.
 * Prints one line per failure and "badinput_test: N checks, M failed" per rank. */
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <unistd.h>

#include "purlin.h"

static purlin_comm_t g_comm;
static int g_rank, g_n;
static long g_checks, g_fail;
static const char *g_what = "";

static void failf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("FAIL rank %d: %s: ", g_rank, g_what);
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  fflush(stdout);
  g_fail++;
}

static int any_word(const char *text, const char *words) { /* words: "a|b|c" */
  char tmp[256], *save = NULL;
  snprintf(tmp, sizeof tmp, "%s", words);
  for (char *w = strtok_r(tmp, "|", &save); w; w = strtok_r(NULL, "|", &save))
    if (strcasestr(text, w))
      return 1;
  return 0;
}

/* A correct AllReduce, checked: the communicator works and the ranks are in step. */
static void good_call(void) {
  static int tag = 1;
  enum { N = 67 };
  int64_t s[N], r[N];
  tag++;
  for (int i = 0; i < N; i++) {
    s[i] = (int64_t)(g_rank + 1) * (i + tag);
    r[i] = -1;
  }
  purlin_status_t st = purlin_all_reduce(s, r, N, PURLIN_I64, PURLIN_SUM, g_comm, NULL, NULL);
  if (st != PURLIN_OK) {
    failf("the correct call after it failed: %s: %s", purlin_status_name(st),
          purlin_comm_last_error(g_comm));
    printf("badinput_test: stopping: the communicator is not usable\n");
    exit(1);
  }
  for (int i = 0; i < N; i++)
    if (r[i] != (int64_t)g_n * (g_n + 1) / 2 * (i + tag)) {
      failf("the correct call after it gave a wrong result at %d: %lld", i, (long long)r[i]);
      break;
    }
}

/* Check one status; words: what the text must mention (NULL: no text check). */
static void expect(purlin_status_t got, purlin_status_t want, purlin_comm_t comm,
                   const char *words) {
  g_checks++;
  const char *txt = purlin_comm_last_error(comm);
  if (txt == NULL) {
    failf("purlin_comm_last_error returned NULL");
    txt = "";
  }
  if (got != want) {
    failf("got %s, want %s (text: \"%s\")", purlin_status_name(got), purlin_status_name(want), txt);
    return;
  }
  if (want != PURLIN_OK && words && comm && !any_word(txt, words))
    failf("%s, but the text does not name %s: \"%s\"", purlin_status_name(got), words, txt);
}
static void expect_either(purlin_status_t got, purlin_status_t a, purlin_status_t b) {
  g_checks++;
  if (got != a && got != b)
    failf("got %s, want %s or %s", purlin_status_name(got), purlin_status_name(a),
          purlin_status_name(b));
}

/* ---- collectives: a valid call per collective, then one argument made bad at a time -----------
 */

enum { C_AR, C_AG, C_RS, C_A2A, C_AGV, C_RSV, C_A2AV, C_COUNT };
static const char *const k_coll[C_COUNT] = {"all_reduce",  "all_gather",   "reduce_scatter",
                                            "all_to_all",  "all_gather_v", "reduce_scatter_v",
                                            "all_to_all_v"};

typedef struct {
  const void *send;
  void *recv;
  size_t count;                    /* count / sendcount / recvcount */
  const size_t *scounts, *rcounts; /* V: sendcounts (A2AV), recvcounts */
  const size_t *sdispls, *rdispls;
  purlin_dtype_t dtype;
  purlin_op_t op;
  purlin_comm_t comm;
  void *stream;
  const purlin_opts_t *opts;
} args_t;

static purlin_status_t call(int coll, const args_t *a) {
  switch (coll) {
  case C_AR:
    return purlin_all_reduce(a->send, a->recv, a->count, a->dtype, a->op, a->comm, a->stream,
                             a->opts);
  case C_AG:
    return purlin_all_gather(a->send, a->recv, a->count, a->dtype, a->comm, a->stream, a->opts);
  case C_RS:
    return purlin_reduce_scatter(a->send, a->recv, a->count, a->dtype, a->op, a->comm, a->stream,
                                 a->opts);
  case C_A2A:
    return purlin_all_to_all(a->send, a->recv, a->count, a->dtype, a->comm, a->stream, a->opts);
  case C_AGV:
    return purlin_all_gather_v(a->send, a->count, a->recv, a->rcounts, a->rdispls, a->dtype,
                               a->comm, a->stream, a->opts);
  case C_RSV:
    return purlin_reduce_scatter_v(a->send, a->recv, a->rcounts, a->sdispls, a->dtype, a->op,
                                   a->comm, a->stream, a->opts);
  default:
    return purlin_all_to_all_v(a->send, a->scounts, a->sdispls, a->recv, a->rcounts, a->rdispls,
                               a->dtype, a->comm, a->stream, a->opts);
  }
}
static int reduces(int coll) {
  return coll == C_AR || coll == C_RS || coll == C_RSV;
}
static int is_v(int coll) {
  return coll >= C_AGV;
}

enum { C = 10 };
static uint8_t *g_s, *g_r; /* big enough for any baseline call (8-byte elements) */
static size_t *g_cnt, *g_displ, *g_zero, *g_bigdispl;

static args_t baseline(int coll) {
  args_t a;
  memset(&a, 0, sizeof a);
  a.send = g_s;
  a.recv = g_r;
  a.count = C;
  a.scounts = g_cnt;
  a.rcounts = g_cnt;
  a.dtype = PURLIN_F64;
  a.op = PURLIN_SUM;
  a.comm = g_comm;
  (void)coll;
  return a;
}

static void check_coll(int coll) {
  char what[96];
  size_t es = 8, n = (size_t)g_n, me = (size_t)g_rank;
  args_t a;
  purlin_opts_t o;
  const char *name = k_coll[coll];
#define CASE(desc)                                                                                 \
  snprintf(what, sizeof what, "%s: %s", name, desc), g_what = what, a = baseline(coll)

  CASE("valid baseline");
  expect(call(coll, &a), PURLIN_OK, g_comm, NULL);

  CASE("comm NULL");
  a.comm = NULL;
  expect(call(coll, &a), PURLIN_ERR_INVALID_ARGUMENT, NULL, NULL);

  CASE("send NULL with a non-zero count");
  a.send = NULL;
  expect(call(coll, &a), PURLIN_ERR_INVALID_ARGUMENT, g_comm, "send");
  good_call();

  CASE("recv NULL with a non-zero count");
  a.recv = NULL;
  expect(call(coll, &a), PURLIN_ERR_INVALID_ARGUMENT, g_comm, "recv");
  good_call();

  CASE("send and recv NULL with count 0 (allowed)");
  a.send = NULL;
  a.recv = NULL;
  a.count = 0;
  a.scounts = a.rcounts = g_zero;
  expect(call(coll, &a), PURLIN_OK, g_comm, NULL);

  if (!is_v(coll)) {
    CASE("count * element size overflows size_t");
    a.count = SIZE_MAX / es + 1;
    expect(call(coll, &a), PURLIN_ERR_INVALID_ARGUMENT, g_comm, "count|overflow");
    good_call();
    CASE("count SIZE_MAX");
    a.count = SIZE_MAX;
    expect(call(coll, &a), PURLIN_ERR_INVALID_ARGUMENT, g_comm, "count|overflow");
    good_call();
    if (coll != C_AR && g_n > 1) {
      CASE("count * element size * nranks overflows size_t");
      a.count = SIZE_MAX / (es * n) + 1;
      expect(call(coll, &a), PURLIN_ERR_INVALID_ARGUMENT, g_comm, "count|overflow");
      good_call();
    }
  } else {
    CASE("displacement + count overflows size_t");
    if (coll == C_AGV)
      a.rdispls = g_bigdispl;
    else if (coll == C_RSV)
      a.sdispls = g_bigdispl;
    else
      a.rdispls = g_bigdispl;
    expect(call(coll, &a), PURLIN_ERR_INVALID_ARGUMENT, g_comm, "displ|overflow|count");
    good_call();
  }

  static const int bad_dtypes[] = {99, -1, PURLIN_DTYPE_COUNT};
  for (int i = 0; i < 3; i++) {
    CASE("invalid dtype");
    a.dtype = (purlin_dtype_t)bad_dtypes[i];
    expect(call(coll, &a), PURLIN_ERR_INVALID_ARGUMENT, g_comm, "dtype|type");
    good_call();
  }
  if (reduces(coll)) {
    static const int bad_ops[] = {99, -1, PURLIN_OP_COUNT};
    for (int i = 0; i < 3; i++) {
      CASE("invalid op");
      a.op = (purlin_op_t)bad_ops[i];
      expect(call(coll, &a), PURLIN_ERR_INVALID_ARGUMENT, g_comm, "op");
      good_call();
    }
  }

  CASE("opts.size 0");
  o = (purlin_opts_t)PURLIN_OPTS_INIT;
  o.size = 0;
  a.opts = &o;
  expect(call(coll, &a), PURLIN_ERR_INVALID_ARGUMENT, g_comm, "opts|size");
  good_call();
  CASE("opts.size too small");
  o = (purlin_opts_t)PURLIN_OPTS_INIT;
  o.size = sizeof(purlin_opts_t) - 1;
  a.opts = &o;
  expect(call(coll, &a), PURLIN_ERR_INVALID_ARGUMENT, g_comm, "opts|size");
  good_call();
  CASE("opts.version 0");
  o = (purlin_opts_t)PURLIN_OPTS_INIT;
  o.version = 0;
  a.opts = &o;
  expect(call(coll, &a), PURLIN_ERR_INVALID_ARGUMENT, g_comm, "opts|version");
  good_call();
  CASE("opts.version 99");
  o = (purlin_opts_t)PURLIN_OPTS_INIT;
  o.version = 99;
  a.opts = &o;
  expect(call(coll, &a), PURLIN_ERR_INVALID_ARGUMENT, g_comm, "opts|version");
  good_call();
  CASE("opts.mode 7");
  o = (purlin_opts_t)PURLIN_OPTS_INIT;
  o.mode = (purlin_mode_t)7;
  a.opts = &o;
  expect(call(coll, &a), PURLIN_ERR_INVALID_ARGUMENT, g_comm, "mode");
  good_call();
  CASE("opts.mode -1");
  o = (purlin_opts_t)PURLIN_OPTS_INIT;
  o.mode = (purlin_mode_t)-1;
  a.opts = &o;
  expect(call(coll, &a), PURLIN_ERR_INVALID_ARGUMENT, g_comm, "mode");
  good_call();
  CASE("valid opts, deterministic");
  o = (purlin_opts_t)PURLIN_OPTS_INIT;
  o.mode = PURLIN_DETERMINISTIC;
  a.opts = &o;
  expect(call(coll, &a), PURLIN_OK, g_comm, NULL);

  CASE("non-NULL stream on the host datapath");
  a.stream = (void *)(uintptr_t)0x1000;
  expect(call(coll, &a), PURLIN_ERR_INVALID_ARGUMENT, g_comm, "stream");
  good_call();

  /* Overlaps that are not the in-place form. */
  static const char *const overlap_words = "overlap|in place|in-place|alias";
  CASE("overlapping send and recv (not in place)");
  switch (coll) {
  case C_AR:
  case C_A2A:
  case C_A2AV:
    a.send = g_s;
    a.recv = g_s + es;
    break;
  case C_AG:
    a.recv = g_s;
    a.send = g_s + (me * C + 1) * es;
    break;
  case C_RS:
    a.send = g_s;
    a.recv = g_s + (me * C + 1) * es;
    break;
  case C_AGV:
    a.recv = g_s;
    a.send = g_s + (g_displ[me] + 1) * es;
    break;
  case C_RSV:
    a.send = g_s;
    a.recv = g_s + (g_displ[me] + 1) * es;
    break;
  }
  expect(call(coll, &a), PURLIN_ERR_INVALID_ARGUMENT, g_comm, overlap_words);
  good_call();
  if (coll == C_AGV || coll == C_RSV) { /* every rank's displacement is > 0 here */
    CASE("send == recv where in place means the rank's block");
    a.send = g_s;
    a.recv = g_s;
    if (coll == C_AGV)
      a.rdispls = g_displ;
    else
      a.sdispls = g_displ;
    expect(call(coll, &a), PURLIN_ERR_INVALID_ARGUMENT, g_comm, overlap_words);
  }
  good_call();

  CASE("in place (valid)");
  switch (coll) {
  case C_AR:
  case C_A2A:
  case C_A2AV:
    a.send = g_s;
    a.recv = g_s;
    break;
  case C_AG:
    a.recv = g_s;
    a.send = g_s + me * C * es;
    break;
  case C_RS:
    a.send = g_s;
    a.recv = g_s + me * C * es;
    break;
  case C_AGV:
    a.recv = g_s;
    a.send = g_s + g_displ[me] * es;
    a.rdispls = g_displ;
    break;
  case C_RSV:
    a.send = g_s;
    a.recv = g_s + g_displ[me] * es;
    a.sdispls = g_displ;
    break;
  }
  expect(call(coll, &a), PURLIN_OK, g_comm, NULL);

  if (is_v(coll)) {
    CASE("recvcounts NULL");
    a.rcounts = NULL;
    expect(call(coll, &a), PURLIN_ERR_INVALID_ARGUMENT, g_comm, "recvcounts|counts");
    good_call();
    if (coll == C_A2AV) {
      CASE("sendcounts NULL");
      a.scounts = NULL;
      expect(call(coll, &a), PURLIN_ERR_INVALID_ARGUMENT, g_comm, "sendcounts|counts");
      good_call();
      CASE("in place with different displacements");
      a.send = g_s;
      a.recv = g_s;
      a.sdispls = NULL;
      a.rdispls = g_displ;
      if (g_n > 1 || g_displ[0] != 0) {
        expect(call(coll, &a), PURLIN_ERR_INVALID_ARGUMENT, g_comm, overlap_words);
        good_call();
      }
    }
    if (coll == C_AGV) {
      CASE("sendcount != recvcounts[rank]");
      a.count = C + 1;
      expect(call(coll, &a), PURLIN_ERR_INVALID_ARGUMENT, g_comm, "sendcount");
      good_call();
    }
  }

  /* A bad call on one rank only: the others skip it, then everyone makes a correct call. */
  CASE("bad dtype on the last rank only");
  if (g_rank == g_n - 1) {
    a.dtype = (purlin_dtype_t)42;
    expect(call(coll, &a), PURLIN_ERR_INVALID_ARGUMENT, g_comm, "dtype|type");
  }
  good_call();
  CASE("NULL send on rank 0 only");
  if (g_rank == 0) {
    a.send = NULL;
    expect(call(coll, &a), PURLIN_ERR_INVALID_ARGUMENT, g_comm, "send");
  }
  good_call();
#undef CASE
}

/* ---- everything else --------------------------------------------------------------------------
 */

static void check_tables(void) {
  g_what = "status names and strings";
#define ST_(name, value, text)                                                                     \
  g_checks++;                                                                                      \
  if (strcmp(purlin_status_name(PURLIN_##name), "PURLIN_" #name) != 0)                             \
    failf("purlin_status_name(%d) = %s", value, purlin_status_name(PURLIN_##name));                \
  if (purlin_status_string(PURLIN_##name) == NULL || !purlin_status_string(PURLIN_##name)[0])      \
    failf("purlin_status_string(%d) empty", value);
  PURLIN_STATUS_MAP(ST_)
#undef ST_
  static const int bad_status[] = {1, -11, 12345, -99999};
  for (int i = 0; i < 4; i++) {
    g_checks++;
    purlin_status_t s = (purlin_status_t)bad_status[i];
    if (strcmp(purlin_status_name(s), "PURLIN_UNKNOWN_STATUS") != 0)
      failf("purlin_status_name(%d) = %s", bad_status[i], purlin_status_name(s));
    if (purlin_status_string(s) == NULL)
      failf("purlin_status_string(%d) is NULL", bad_status[i]);
  }
  g_what = "dtype sizes and names";
  static const struct {
    const char *name;
    size_t size;
  } dt[PURLIN_DTYPE_COUNT] = {{"f32", 4}, {"f16", 2}, {"bf16", 2},     {"f64", 8},
                              {"i8", 1},  {"u8", 1},  {"i32", 4},      {"u32", 4},
                              {"i64", 8}, {"u64", 8}, {"fp8_e4m3", 1}, {"fp8_e5m2", 1}};
  for (int d = 0; d < PURLIN_DTYPE_COUNT; d++) {
    g_checks++;
    if (purlin_dtype_size((purlin_dtype_t)d) != dt[d].size)
      failf("purlin_dtype_size(%d) = %zu, want %zu", d, purlin_dtype_size((purlin_dtype_t)d),
            dt[d].size);
    if (strcmp(purlin_dtype_name((purlin_dtype_t)d), dt[d].name) != 0)
      failf("purlin_dtype_name(%d) = %s, want %s", d, purlin_dtype_name((purlin_dtype_t)d),
            dt[d].name);
  }
  static const int bad_dt[] = {-1, PURLIN_DTYPE_COUNT, 99};
  for (int i = 0; i < 3; i++) {
    g_checks++;
    if (purlin_dtype_size((purlin_dtype_t)bad_dt[i]) != 0)
      failf("purlin_dtype_size(%d) is not 0", bad_dt[i]);
    if (strcmp(purlin_dtype_name((purlin_dtype_t)bad_dt[i]), "invalid") != 0)
      failf("purlin_dtype_name(%d) = %s", bad_dt[i], purlin_dtype_name((purlin_dtype_t)bad_dt[i]));
    if (strcmp(purlin_op_name((purlin_op_t)bad_dt[i]), "invalid") != 0)
      failf("purlin_op_name(%d) = %s", bad_dt[i], purlin_op_name((purlin_op_t)bad_dt[i]));
  }
  static const char *const ops[] = {"sum", "prod", "min", "max", "avg"};
  for (int o = 0; o < PURLIN_OP_COUNT; o++) {
    g_checks++;
    if (strcmp(purlin_op_name((purlin_op_t)o), ops[o]) != 0)
      failf("purlin_op_name(%d) = %s", o, purlin_op_name((purlin_op_t)o));
  }
  g_what = "purlin_get_version";
  int v = -1;
  expect(purlin_get_version(NULL), PURLIN_ERR_INVALID_ARGUMENT, NULL, NULL);
  expect(purlin_get_version(&v), PURLIN_OK, NULL, NULL);
  if (v != PURLIN_VERSION)
    failf("version %d, header says %d", v, PURLIN_VERSION);
  g_what = "purlin_get_unique_id";
  expect(purlin_get_unique_id(NULL), PURLIN_ERR_INVALID_ARGUMENT, NULL, NULL);
}

static void check_init_rank(void) {
  purlin_unique_id_t id;
  purlin_comm_t c = (purlin_comm_t)(uintptr_t)0x5a5a;
  purlin_config_t cfg = PURLIN_CONFIG_INIT;
  cfg.timeout_ms = 3000;
  g_what = "purlin_get_unique_id (for init tests)";
  expect(purlin_get_unique_id(&id), PURLIN_OK, NULL, NULL);
  static const struct {
    const char *what;
    int nranks, rank;
  } bad[] = {{"nranks 0", 0, 0},       {"nranks -1", -1, 0},    {"rank -1", 2, -1},
             {"rank == nranks", 2, 2}, {"rank > nranks", 2, 7}, {"nranks huge", 1 << 30, 0}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    g_what = bad[i].what;
    c = (purlin_comm_t)(uintptr_t)0x5a5a;
    purlin_status_t st = purlin_comm_init_rank(&c, bad[i].nranks, id, bad[i].rank, &cfg);
    if (bad[i].nranks == (1 << 30))
      expect_either(st, PURLIN_ERR_INVALID_ARGUMENT, PURLIN_ERR_UNSUPPORTED);
    else
      expect(st, PURLIN_ERR_INVALID_ARGUMENT, NULL, NULL);
    if (c != (purlin_comm_t)(uintptr_t)0x5a5a)
      failf("*comm written although init failed");
  }
  g_what = "init_rank comm NULL";
  expect(purlin_comm_init_rank(NULL, 1, id, 0, &cfg), PURLIN_ERR_INVALID_ARGUMENT, NULL, NULL);
  struct {
    const char *what;
    purlin_config_t cfg;
  } badcfg[6];
  for (int i = 0; i < 6; i++)
    badcfg[i].cfg = (purlin_config_t)PURLIN_CONFIG_INIT;
  badcfg[0].what = "config.size 0";
  badcfg[0].cfg.size = 0;
  badcfg[1].what = "config.size too small";
  badcfg[1].cfg.size = sizeof(purlin_config_t) - 8;
  badcfg[2].what = "config.version 0";
  badcfg[2].cfg.version = 0;
  badcfg[3].what = "config.version 99";
  badcfg[3].cfg.version = 99;
  badcfg[4].what = "config.datapath 99";
  badcfg[4].cfg.datapath = (purlin_datapath_t)99;
  badcfg[5].what = "config.timeout_ms negative";
  badcfg[5].cfg.timeout_ms = -5;
  for (int i = 0; i < 6; i++) {
    g_what = badcfg[i].what;
    c = (purlin_comm_t)(uintptr_t)0x5a5a;
    badcfg[i].cfg.timeout_ms = i == 5 ? -5 : 3000;
    expect(purlin_comm_init_rank(&c, 1, id, 0, &badcfg[i].cfg), PURLIN_ERR_INVALID_ARGUMENT, NULL,
           NULL);
    if (c != (purlin_comm_t)(uintptr_t)0x5a5a)
      failf("*comm written although init failed");
  }
  /* A one-rank communicator of this process alone, from its own id: valid. */
  g_what = "one-rank communicator from purlin_get_unique_id";
  purlin_unique_id_t id1;
  expect(purlin_get_unique_id(&id1), PURLIN_OK, NULL, NULL);
  c = NULL;
  cfg.datapath = PURLIN_DATAPATH_HOST;
  purlin_status_t st = purlin_comm_init_rank(&c, 1, id1, 0, &cfg);
  expect(st, PURLIN_OK, NULL, NULL);
  if (st == PURLIN_OK) {
    double x[3] = {1, 2, 3}, y[3] = {0};
    expect(purlin_all_reduce(x, y, 3, PURLIN_F64, PURLIN_SUM, c, NULL, NULL), PURLIN_OK, c, NULL);
    if (y[0] != 1 || y[1] != 2 || y[2] != 3)
      failf("one-rank all_reduce gave %g %g %g", y[0], y[1], y[2]);
    expect(purlin_comm_destroy(c), PURLIN_OK, NULL, NULL);
  }
}

/* purlin_comm_init_env with broken launcher variables, each in a child process. */
static void env_child(const char *what, const char *const *set, purlin_status_t want, int clear) {
  g_what = what;
  g_checks++;
  fflush(stdout);
  pid_t p = fork();
  if (p == 0) {
    alarm(20);
    if (clear) {
      static const char *const vars[] = {"PURLIN_RANK",
                                         "PURLIN_WORLD_SIZE",
                                         "PURLIN_LOCAL_RANK",
                                         "PURLIN_UNIQUE_ID",
                                         "RANK",
                                         "WORLD_SIZE",
                                         "LOCAL_RANK",
                                         "MASTER_ADDR",
                                         "MASTER_PORT",
                                         "OMPI_COMM_WORLD_RANK",
                                         "OMPI_COMM_WORLD_SIZE",
                                         "OMPI_COMM_WORLD_LOCAL_RANK",
                                         "PMI_RANK",
                                         "PMI_SIZE",
                                         "MPI_LOCALRANKID",
                                         "SLURM_PROCID",
                                         "SLURM_NTASKS",
                                         "SLURM_LOCALID",
                                         "SLURM_JOB_ID",
                                         "SLURM_STEP_ID",
                                         NULL};
      for (int i = 0; vars[i]; i++)
        unsetenv(vars[i]);
    }
    for (int i = 0; set && set[i]; i += 2)
      setenv(set[i], set[i + 1], 1);
    setenv("PURLIN_TIMEOUT_MS", "3000", 1);
    purlin_comm_t c = (purlin_comm_t)(uintptr_t)0x77;
    purlin_status_t st = purlin_comm_init_env(&c, NULL);
    int ok = st == want && c == (purlin_comm_t)(uintptr_t)0x77;
    if (!ok)
      printf("FAIL rank %d: %s: init_env gave %s (comm %s), want %s\n", g_rank, what,
             purlin_status_name(st), c == (purlin_comm_t)(uintptr_t)0x77 ? "untouched" : "written",
             purlin_status_name(want));
    fflush(stdout);
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  waitpid(p, &status, 0);
  if (!WIFEXITED(status))
    failf("child died (signal %d)", WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  else if (WEXITSTATUS(status) != 0)
    g_fail++;
}

static void check_init_env(void) {
  g_what = "init_env comm NULL";
  expect(purlin_comm_init_env(NULL, NULL), PURLIN_ERR_INVALID_ARGUMENT, NULL, NULL);
  env_child("init_env without launcher variables", NULL, PURLIN_ERR_INVALID_USAGE, 1);
  const char *id = getenv("PURLIN_UNIQUE_ID");
  if (!id)
    return;
  const char *const rank_abc[] = {"PURLIN_RANK", "abc", NULL};
  env_child("init_env PURLIN_RANK=abc", rank_abc, PURLIN_ERR_INVALID_ARGUMENT, 0);
  const char *const rank_big[] = {"PURLIN_RANK", "7", "PURLIN_WORLD_SIZE", "2", NULL};
  env_child("init_env PURLIN_RANK >= PURLIN_WORLD_SIZE", rank_big, PURLIN_ERR_INVALID_ARGUMENT, 0);
  const char *const rank_neg[] = {"PURLIN_RANK", "-1", NULL};
  env_child("init_env PURLIN_RANK=-1", rank_neg, PURLIN_ERR_INVALID_ARGUMENT, 0);
  const char *const size0[] = {"PURLIN_RANK", "0", "PURLIN_WORLD_SIZE", "0", NULL};
  env_child("init_env PURLIN_WORLD_SIZE=0", size0, PURLIN_ERR_INVALID_ARGUMENT, 0);
  const char *const badid[] = {"PURLIN_UNIQUE_ID", "zz-not-hex", NULL};
  env_child("init_env PURLIN_UNIQUE_ID malformed", badid, PURLIN_ERR_INVALID_ARGUMENT, 0);
}

static void check_comm_queries(void) {
  int v = -77;
  purlin_datapath_t dp = (purlin_datapath_t)-77;
  purlin_status_t as = (purlin_status_t)-77;
  g_what = "comm_rank";
  expect(purlin_comm_rank(NULL, &v), PURLIN_ERR_INVALID_ARGUMENT, NULL, NULL);
  expect(purlin_comm_rank(g_comm, NULL), PURLIN_ERR_INVALID_ARGUMENT, g_comm, NULL);
  if (v != -77)
    failf("rank written on failure");
  g_what = "comm_size";
  expect(purlin_comm_size(NULL, &v), PURLIN_ERR_INVALID_ARGUMENT, NULL, NULL);
  expect(purlin_comm_size(g_comm, NULL), PURLIN_ERR_INVALID_ARGUMENT, g_comm, NULL);
  if (v != -77)
    failf("size written on failure");
  g_what = "comm_datapath";
  expect(purlin_comm_datapath(NULL, &dp), PURLIN_ERR_INVALID_ARGUMENT, NULL, NULL);
  expect(purlin_comm_datapath(g_comm, NULL), PURLIN_ERR_INVALID_ARGUMENT, g_comm, NULL);
  if (dp != (purlin_datapath_t)-77)
    failf("datapath written on failure");
  expect(purlin_comm_datapath(g_comm, &dp), PURLIN_OK, g_comm, NULL);
  if (dp != PURLIN_DATAPATH_HOST)
    failf("datapath %d, want HOST", (int)dp);
  g_what = "get_async_error";
  expect(purlin_comm_get_async_error(NULL, &as), PURLIN_ERR_INVALID_ARGUMENT, NULL, NULL);
  expect(purlin_comm_get_async_error(g_comm, NULL), PURLIN_ERR_INVALID_ARGUMENT, g_comm, NULL);
  expect(purlin_comm_get_async_error(g_comm, &as), PURLIN_OK, g_comm, NULL);
  if (as != PURLIN_OK)
    failf("async error %s on a healthy communicator", purlin_status_name(as));
  g_what = "last_error(NULL)";
  g_checks++;
  if (purlin_comm_last_error(NULL) == NULL)
    failf("returned NULL");
  g_what = "comm_abort(NULL)";
  expect(purlin_comm_abort(NULL), PURLIN_ERR_INVALID_ARGUMENT, NULL, NULL);
  g_what = "comm_destroy(NULL)";
  expect(purlin_comm_destroy(NULL), PURLIN_OK, NULL, NULL);
  good_call();
}

static void check_mem(void) {
  void *p = (void *)(uintptr_t)0x33;
  g_what = "mem_alloc comm NULL";
  expect(purlin_mem_alloc(NULL, 4096, &p), PURLIN_ERR_INVALID_ARGUMENT, NULL, NULL);
  g_what = "mem_alloc 0 bytes";
  expect(purlin_mem_alloc(g_comm, 0, &p), PURLIN_ERR_INVALID_ARGUMENT, g_comm, "bytes|size");
  good_call();
  g_what = "mem_alloc ptr NULL";
  expect(purlin_mem_alloc(g_comm, 4096, NULL), PURLIN_ERR_INVALID_ARGUMENT, g_comm, "ptr");
  good_call();
  g_what = "mem_alloc SIZE_MAX";
  purlin_status_t st = purlin_mem_alloc(g_comm, SIZE_MAX, &p);
  g_checks++;
  if (st == PURLIN_OK)
    failf("succeeded");
  else if (st != PURLIN_ERR_INVALID_ARGUMENT && st != PURLIN_ERR_NO_MEMORY)
    failf("gave %s, want INVALID_ARGUMENT or NO_MEMORY", purlin_status_name(st));
  good_call();
  if (p != (void *)(uintptr_t)0x33)
    failf("*ptr written on failure");
  g_what = "mem_alloc 0 bytes on rank 0 only";
  if (g_rank == 0)
    expect(purlin_mem_alloc(g_comm, 0, &p), PURLIN_ERR_INVALID_ARGUMENT, g_comm, "bytes|size");
  good_call();

  g_what = "mem_alloc valid";
  void *m = NULL;
  expect(purlin_mem_alloc(g_comm, 1 << 16, &m), PURLIN_OK, g_comm, NULL);
  if (!m)
    return;
  if ((uintptr_t)m & 255u)
    failf("pointer %p is not 256-byte aligned", m);
  memset(m, g_rank, 1 << 16);
  purlin_dev_handle_t dh;
  g_what = "device_handle comm NULL";
  expect(purlin_device_handle(NULL, m, 4096, &dh), PURLIN_ERR_INVALID_ARGUMENT, NULL, NULL);
  g_what = "device_handle on the host datapath";
  expect(purlin_device_handle(g_comm, m, 4096, &dh), PURLIN_ERR_UNSUPPORTED, g_comm, "CUDA");
  good_call();
  void *heap = malloc(4096);
  int stack_var = 0;
  g_what = "mem_free comm NULL";
  expect(purlin_mem_free(NULL, m), PURLIN_ERR_INVALID_ARGUMENT, NULL, NULL);
  g_what = "mem_free of malloc'd memory";
  expect(purlin_mem_free(g_comm, heap), PURLIN_ERR_INVALID_ARGUMENT, g_comm,
         "ptr|pointer|purlin_mem_alloc");
  good_call();
  g_what = "mem_free of a stack address";
  expect(purlin_mem_free(g_comm, &stack_var), PURLIN_ERR_INVALID_ARGUMENT, g_comm,
         "ptr|pointer|purlin_mem_alloc");
  good_call();
  g_what = "mem_free of an interior pointer";
  expect(purlin_mem_free(g_comm, (char *)m + 256), PURLIN_ERR_INVALID_ARGUMENT, g_comm,
         "ptr|pointer|purlin_mem_alloc");
  good_call();
  g_what = "mem_free NULL";
  expect(purlin_mem_free(g_comm, NULL), PURLIN_OK, g_comm, NULL);
  g_what = "mem_free valid";
  expect(purlin_mem_free(g_comm, m), PURLIN_OK, g_comm, NULL);
  g_what = "mem_free twice";
  expect(purlin_mem_free(g_comm, m), PURLIN_ERR_INVALID_ARGUMENT, g_comm,
         "ptr|pointer|purlin_mem_alloc");
  good_call();
  g_what = "mem_register comm NULL";
  expect(purlin_mem_register(NULL, heap, 4096), PURLIN_ERR_INVALID_ARGUMENT, NULL, NULL);
  g_what = "mem_register on the host datapath";
  expect(purlin_mem_register(g_comm, heap, 4096), PURLIN_ERR_UNSUPPORTED, g_comm, "CUDA");
  good_call();
  g_what = "mem_deregister comm NULL";
  expect(purlin_mem_deregister(NULL, heap), PURLIN_ERR_INVALID_ARGUMENT, NULL, NULL);
  g_what = "mem_deregister of memory never registered (every rank)";
  expect(purlin_mem_deregister(g_comm, heap), PURLIN_ERR_INVALID_ARGUMENT, g_comm,
         "ptr|pointer|purlin_mem_register");
  good_call();
  g_what = "mem_deregister of purlin_mem_alloc memory (every rank)";
  expect(purlin_mem_alloc(g_comm, 4096, &m), PURLIN_OK, g_comm, NULL);
  expect(purlin_mem_deregister(g_comm, m), PURLIN_ERR_INVALID_ARGUMENT, g_comm,
         "ptr|pointer|purlin_mem_register");
  good_call();
  expect(purlin_mem_free(g_comm, m), PURLIN_OK, g_comm, NULL);
  g_what = "mem_deregister NULL (every rank)";
  expect(purlin_mem_deregister(g_comm, NULL), PURLIN_OK, g_comm, NULL);
  free(heap);
  g_what = "mem_alloc after the bad frees";
  expect(purlin_mem_alloc(g_comm, 4096, &m), PURLIN_OK, g_comm, NULL);
  expect(purlin_mem_free(g_comm, m), PURLIN_OK, g_comm, NULL);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  check_tables();
  check_init_env(); /* before this process joins: children only */
  purlin_status_t st = purlin_comm_init_env(&g_comm, NULL);
  if (st != PURLIN_OK) {
    printf("badinput_test: purlin_comm_init_env: %s (run under purlinrun)\n",
           purlin_status_name(st));
    return 1;
  }
  purlin_comm_rank(g_comm, &g_rank);
  purlin_comm_size(g_comm, &g_n);
  size_t n = (size_t)g_n;
  g_s = aligned_alloc(256, (n * C * 4 + 64) * 8);
  g_r = aligned_alloc(256, (n * C * 4 + 64) * 8);
  memset(g_s, 0, (n * C * 4 + 64) * 8);
  g_cnt = calloc(n, sizeof(size_t));
  g_zero = calloc(n, sizeof(size_t));
  g_displ = calloc(n, sizeof(size_t));
  g_bigdispl = calloc(n, sizeof(size_t));
  for (size_t p = 0; p < n; p++) {
    g_cnt[p] = C;
    g_displ[p] = (n - 1 - p) * (C + 2) + 1; /* reversed order, gaps */
    g_bigdispl[p] = SIZE_MAX - 3;
  }
  check_init_rank();
  check_comm_queries();
  for (int c = 0; c < C_COUNT; c++)
    check_coll(c);
  check_mem();
  g_what = "destroy";
  expect(purlin_comm_destroy(g_comm), PURLIN_OK, NULL, NULL);
  printf("badinput_test: %ld checks, %ld failed (rank %d of %d)\n", g_checks, g_fail, g_rank, g_n);
  return g_fail ? 1 : 0;
}
