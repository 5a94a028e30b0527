/* fault_test -- what the surviving ranks see when a peer fails, and that nothing is left behind.
 *
 *   fault_test SCENARIO [-n N] [--timeout-ms T] [--slack-ms S] [--victim R] [--env-timeout]
 *
 * (--env-timeout: the deadline comes from PURLIN_TIMEOUT_MS, the config's timeout_ms left 0.)
 *
 * Launch: by default the test forks its own N ranks (this process never calls the library: it is
 * a subreaper that watches the ranks, kills them if they hang, and checks for leftover processes,
 * shared memory and socket files afterwards). Rank 0 makes the unique id and passes it to the
 * others through pipes; every rank joins with purlin_comm_init_rank and a config whose timeout_ms
 * is T. Run under purlinrun instead (PURLIN_RANK set) the ranks use purlin_comm_init_env; only the
 * scenarios in which no rank dies make sense there (mismatch*, abort*).
 *
 * Scenarios (the victim is rank N-1 unless --victim says otherwise):
 *   never        the victim joins but never calls; the others get TIMEOUT naming it (or REMOTE from
 * a peer that timed out first) within T + S, not much before T; the victim's own late call fails
 * quickly never_init   the victim never joins; purlin_comm_init_rank gives TIMEOUT within T + S
 *   init_mismatch the victim asks for another staging size: init gives MISMATCH on every rank
 *   kill_before  the victim SIGKILLs itself right before an AllReduce
 *   kill_during  all ranks loop on large AllReduces; the launcher SIGKILLs the victim mid-loop
 *   early_exit   the victim finishes its (empty) part of an AllToAllV, destroys and exits while
 *                two others still move 64 MiB (the sender stopped 150 ms by the launcher meanwhile):
 *                their call succeeds; the next names the victim
 *   abort        the victim calls purlin_comm_abort instead of the AllReduce: the others get REMOTE
 *   abort_thread the victim blocks in an AllReduce and aborts from a second thread
 *   mismatch     every kind of disagreement in turn (collective, count, count vs 0, dtype, op,
 *                mode, AllGatherV/ReduceScatterV/AllToAllV counts, mem_alloc size): every rank
 *                gets MISMATCH, the text names the parameter and both values, and a correct call
 *                afterwards succeeds; mismatch_KIND runs one kind
 * After TIMEOUT/REMOTE: a further call gives INVALID_USAGE and destroy succeeds.
 * Exit 0 when every check passed. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "leftover.h"
#include "purlin.h"

static int g_rank = -1, g_n = 3, g_victim = -1, g_timeout_ms = 3000, g_slack_ms = 5000;
static int g_fail, g_env_timeout;
static const char *g_scen;

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

static void sleep_ms(int ms) {
  struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&t, &t) != 0 && errno == EINTR) {
  }
}

static void failf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("FAIL %s rank %d: ", g_scen, g_rank);
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  fflush(stdout);
  g_fail++;
}
static void infof(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("info %s rank %d: ", g_scen, g_rank);
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  fflush(stdout);
}

/* Does text name rank r ("rank 3", "rank=3", "rank: 3"), case-insensitively? */
static int names_rank(const char *text, int r) {
  for (const char *p = text; (p = strcasestr(p, "rank")) != NULL; p += 4) {
    const char *q = p + 4;
    int skipped = 0;
    while (*q && (*q < '0' || *q > '9') && skipped < 3)
      q++, skipped++;
    if (*q < '0' || *q > '9')
      continue;
    char *end;
    long v = strtol(q, &end, 10);
    if (v == r)
      return 1;
  }
  return 0;
}
static int contains_any(const char *text, const char *const *words) {
  for (; *words; words++)
    if (strcasestr(text, *words))
      return 1;
  return 0;
}

/* A correct AllReduce of int32, checked; 0 when it worked. */
static int good_call(purlin_comm_t comm, int tag) {
  enum { N = 1031 };
  int32_t *s = malloc(N * 4), *r = malloc(N * 4);
  for (int i = 0; i < N; i++) {
    s[i] = (g_rank + 1) * (i + tag);
    r[i] = -1;
  }
  purlin_status_t st = purlin_all_reduce(s, r, N, PURLIN_I32, PURLIN_SUM, comm, NULL, NULL);
  int bad = st != PURLIN_OK;
  if (bad)
    failf("correct all_reduce (tag %d): %s: %s", tag, purlin_status_name(st),
          purlin_comm_last_error(comm));
  for (int i = 0; i < N && !bad; i++) {
    int32_t want = (int32_t)(g_n * (g_n + 1) / 2) * (i + tag);
    if (r[i] != want) {
      failf("correct all_reduce (tag %d): [%d] = %d, want %d", tag, i, r[i], want);
      bad = 1;
    }
  }
  free(s);
  free(r);
  return bad;
}

/* The checks on a survivor after a peer failed. */
static void check_failed_call(purlin_comm_t comm, purlin_status_t st, double ms, int culprit,
                              int allow_early, const char *call_word) {
  const char *txt = purlin_comm_last_error(comm);
  infof("%s after %.0f ms: %s", purlin_status_name(st), ms, txt);
  if (st != PURLIN_ERR_TIMEOUT && st != PURLIN_ERR_REMOTE) {
    failf("got %s, want PURLIN_ERR_TIMEOUT or PURLIN_ERR_REMOTE", purlin_status_name(st));
    return;
  }
  if (ms > g_timeout_ms + g_slack_ms)
    failf("returned after %.0f ms, deadline %d ms + slack %d ms", ms, g_timeout_ms, g_slack_ms);
  if (!allow_early && st == PURLIN_ERR_TIMEOUT && ms < g_timeout_ms * 0.5)
    failf("TIMEOUT after only %.0f ms with a deadline of %d ms", ms, g_timeout_ms);
  if (!names_rank(txt, culprit))
    failf("the error text does not name rank %d: \"%s\"", culprit, txt);
  if (call_word && !strcasestr(txt, call_word))
    failf("the error text does not name the call (%s): \"%s\"", call_word, txt);
  purlin_status_t as = PURLIN_OK;
  if (purlin_comm_get_async_error(comm, &as) != PURLIN_OK)
    failf("purlin_comm_get_async_error failed after the error");
  else if (as == PURLIN_OK)
    infof("async error is still PURLIN_OK after %s", purlin_status_name(st));
}

/* After TIMEOUT/REMOTE the communicator is aborted: calls say INVALID_USAGE, quickly. */
static void check_aborted(purlin_comm_t comm) {
  int32_t x = 1, y = 0;
  double t0 = now_ms();
  purlin_status_t st = purlin_all_reduce(&x, &y, 1, PURLIN_I32, PURLIN_SUM, comm, NULL, NULL);
  double ms = now_ms() - t0;
  if (st != PURLIN_ERR_INVALID_USAGE)
    failf("a call on the aborted communicator gave %s (%s), want PURLIN_ERR_INVALID_USAGE",
          purlin_status_name(st), purlin_comm_last_error(comm));
  if (ms > 1000)
    failf("a call on the aborted communicator took %.0f ms", ms);
  void *p = NULL;
  st = purlin_mem_alloc(comm, 4096, &p);
  if (st == PURLIN_OK)
    failf("purlin_mem_alloc on the aborted communicator succeeded");
}

static void destroy(purlin_comm_t comm) {
  purlin_status_t st = purlin_comm_destroy(comm);
  if (st != PURLIN_OK)
    failf("purlin_comm_destroy: %s", purlin_status_name(st));
}

/* ---- scenarios ---------------------------------------------------------------------------------
 */

static void scen_never(purlin_comm_t comm) {
  if (good_call(comm, 1))
    return;
  int32_t s[64] = {0}, r[64];
  if (g_rank == g_victim) {
    sleep_ms(g_timeout_ms + 1500);
    double t0 = now_ms();
    purlin_status_t st = purlin_all_reduce(s, r, 64, PURLIN_I32, PURLIN_SUM, comm, NULL, NULL);
    double ms = now_ms() - t0;
    infof("the late rank's own call: %s after %.0f ms: %s", purlin_status_name(st), ms,
          purlin_comm_last_error(comm));
    if (st == PURLIN_OK)
      failf("the late rank's call succeeded although its peers gave up");
    if (ms > g_timeout_ms + g_slack_ms)
      failf("the late rank's call took %.0f ms", ms);
    destroy(comm);
    return;
  }
  double t0 = now_ms();
  purlin_status_t st = purlin_all_reduce(s, r, 64, PURLIN_I32, PURLIN_SUM, comm, NULL, NULL);
  check_failed_call(comm, st, now_ms() - t0, g_victim, 0, "reduce");
  check_aborted(comm);
  destroy(comm);
}

static void scen_kill_before(purlin_comm_t comm) {
  if (good_call(comm, 2))
    return;
  int32_t s[64] = {0}, r[64];
  if (g_rank == g_victim)
    raise(SIGKILL);
  double t0 = now_ms();
  purlin_status_t st = purlin_all_reduce(s, r, 64, PURLIN_I32, PURLIN_SUM, comm, NULL, NULL);
  check_failed_call(comm, st, now_ms() - t0, g_victim, 1, "reduce");
  check_aborted(comm);
  destroy(comm);
}

static void scen_kill_during(purlin_comm_t comm) {
  if (good_call(comm, 3))
    return;
  size_t count = 4u << 20; /* 16 MiB of f32 per call: many chunks */
  float *s = malloc(count * 4), *r = malloc(count * 4);
  for (size_t i = 0; i < count; i++)
    s[i] = 1.0f;
  /* Tell the launcher we are in the loop (it kills the victim after a moment). */
  printf("ready %d\n", g_rank);
  fflush(stdout);
  purlin_status_t st = PURLIN_OK;
  double ms = 0;
  int it;
  for (it = 0; it < 100000 && st == PURLIN_OK; it++) {
    double t0 = now_ms();
    st = purlin_all_reduce(s, r, count, PURLIN_F32, PURLIN_SUM, comm, NULL, NULL);
    ms = now_ms() - t0;
  }
  infof("failed in call %d of the loop", it);
  check_failed_call(comm, st, ms, g_victim, 1, "reduce");
  check_aborted(comm);
  destroy(comm);
  free(s);
  free(r);
}

/* The victim takes no part in the data of the last call (an AllToAllV in which it sends and
 * receives nothing), so it finishes first, destroys and exits while rank 0 still streams 64 MiB to
 * rank 1 through 64 KiB of staging; the launcher then stops the sender for 150 ms (SIGSTOP), so
 * that the receiver's wait outlasts a futex slice and checks liveness. The survivors' call must succeed (a peer that ended after its
 * part is not an error: only the awaited peer's end is) and be correct; the next call then gets
 * REMOTE naming the victim. */
static void early_exit_pair(int *src, int *dst) {
  *src = g_victim == 0 ? 1 : 0;
  *dst = g_victim == g_n - 1 ? g_n - 2 : g_n - 1;
  if (*dst == *src)
    *dst = (*src + 1) % g_n;
}

static void scen_early_exit(purlin_comm_t comm) {
  if (good_call(comm, 4))
    return;
  size_t count = 16u << 20, sc[64] = {0}, rc[64] = {0};
  int src, dst;
  early_exit_pair(&src, &dst);
  if (g_rank == src)
    sc[dst] = count;
  if (g_rank == dst)
    rc[src] = count;
  int32_t *s = malloc(count * 4), *r = malloc(count * 4);
  for (size_t i = 0; i < count; i++) {
    s[i] = (int32_t)(i * 2654435761u) ^ g_rank;
    r[i] = -7;
  }
  double t0 = now_ms();
  purlin_status_t st = purlin_all_to_all_v(s, sc, NULL, r, rc, NULL, PURLIN_I32, comm, NULL, NULL);
  infof("all_to_all_v: %s after %.1f ms", purlin_status_name(st), now_ms() - t0);
  if (st != PURLIN_OK)
    failf("all_to_all_v: %s: %s", purlin_status_name(st), purlin_comm_last_error(comm));
  if (g_rank == g_victim) {
    destroy(comm);
    free(s);
    free(r);
    return;
  }
  if (st == PURLIN_OK && g_rank == dst) {
    size_t bad = 0;
    for (size_t i = 0; i < count; i++)
      bad += r[i] != ((int32_t)(i * 2654435761u) ^ src);
    if (bad)
      failf("all_to_all_v: %zu of %zu elements wrong", bad, count);
  }
  if (st == PURLIN_OK) { /* the victim has gone: the next call names it */
    int32_t x[64] = {0}, y[64];
    t0 = now_ms();
    st = purlin_all_reduce(x, y, 64, PURLIN_I32, PURLIN_SUM, comm, NULL, NULL);
    check_failed_call(comm, st, now_ms() - t0, g_victim, 1, "reduce");
  }
  destroy(comm);
  free(s);
  free(r);
}

static void scen_abort(purlin_comm_t comm) {
  if (good_call(comm, 4))
    return;
  int32_t s[64] = {0}, r[64];
  if (g_rank == g_victim) {
    /* This rank's good call can end while a peer's is still reading this rank's data, and an
     * abort then fails that peer's good call (seen once, under a loaded CI machine): give them
     * time to end it. No collective can tell, since the last one has the same tail. */
    sleep_ms(100);
    purlin_status_t st = purlin_comm_abort(comm);
    if (st != PURLIN_OK)
      failf("purlin_comm_abort: %s", purlin_status_name(st));
    check_aborted(comm);
    sleep_ms(500); /* let the others see it before this process goes away */
    destroy(comm);
    return;
  }
  double t0 = now_ms();
  purlin_status_t st = purlin_all_reduce(s, r, 64, PURLIN_I32, PURLIN_SUM, comm, NULL, NULL);
  double ms = now_ms() - t0;
  check_failed_call(comm, st, ms, g_victim, 1, "reduce");
  if (st != PURLIN_ERR_REMOTE)
    failf("after an abort: %s, want PURLIN_ERR_REMOTE", purlin_status_name(st));
  if (ms > g_slack_ms)
    failf("an abort took %.0f ms to be seen (it should not wait for the deadline)", ms);
  check_aborted(comm);
  destroy(comm);
}

static void *abort_later(void *arg) {
  sleep_ms(300);
  purlin_status_t st = purlin_comm_abort((purlin_comm_t)arg);
  if (st != PURLIN_OK)
    failf("purlin_comm_abort from a second thread: %s", purlin_status_name(st));
  return NULL;
}

static void scen_abort_thread(purlin_comm_t comm) {
  if (good_call(comm, 5))
    return;
  int32_t s[64] = {0}, r[64];
  if (g_rank == g_victim) { /* blocks in the call (the others come late), aborts from a thread */
    pthread_t t;
    pthread_create(&t, NULL, abort_later, comm);
    double t0 = now_ms();
    purlin_status_t st = purlin_all_reduce(s, r, 64, PURLIN_I32, PURLIN_SUM, comm, NULL, NULL);
    double ms = now_ms() - t0;
    pthread_join(t, NULL);
    infof("own call during the abort: %s after %.0f ms: %s", purlin_status_name(st), ms,
          purlin_comm_last_error(comm));
    if (st == PURLIN_OK)
      failf("the call being aborted succeeded");
    if (ms > g_slack_ms)
      failf("the call being aborted took %.0f ms", ms);
    check_aborted(comm);
    sleep_ms(500);
    destroy(comm);
    return;
  }
  sleep_ms(1000);
  double t0 = now_ms();
  purlin_status_t st = purlin_all_reduce(s, r, 64, PURLIN_I32, PURLIN_SUM, comm, NULL, NULL);
  double ms = now_ms() - t0;
  check_failed_call(comm, st, ms, g_victim, 1, "reduce");
  if (ms > g_slack_ms)
    failf("an abort took %.0f ms to be seen", ms);
  check_aborted(comm);
  destroy(comm);
}

/* ---- mismatches
 * ---------------------------------------------------------------------------------- */

enum {
  M_COLL,
  M_COLL2,
  M_COUNT,
  M_COUNT0,
  M_DTYPE,
  M_OP,
  M_MODE,
  M_AGV,
  M_RSV,
  M_A2AV,
  M_A2AV_SELF,
  M_MEM,
  M_KINDS
};
static const char *const k_mkind[M_KINDS] = {"coll", "coll2", "count", "count0",    "dtype", "op",
                                             "mode", "agv",   "rsv",   "a2av", "a2av_self", "mem"};

/* One disagreement; every rank must return MISMATCH with a text that names the parameter (one of
 * `words`) and, when given, both values. */
static void one_mismatch(purlin_comm_t comm, int kind, int odd) {
  enum { C = 100 };
  int me = g_rank, n = g_n, is_odd = me == odd;
  size_t big = (size_t)C * (size_t)n * 4 + 64;
  double *s = calloc(big, 8), *r = calloc(big, 8);
  size_t *cnt = calloc((size_t)n, sizeof(size_t)), *cnt2 = calloc((size_t)n, sizeof(size_t));
  purlin_opts_t o = PURLIN_OPTS_INIT;
  purlin_status_t st = PURLIN_OK;
  const char *words[6] = {NULL};
  const char *v1 = NULL, *v2 = NULL;
  char b1[32], b2[32];
  for (int p = 0; p < n; p++)
    cnt[p] = cnt2[p] = 5 + (size_t)p;
  if (kind == M_A2AV || kind == M_A2AV_SELF) /* r sends p 5 + r + p: sendcounts == peers' recvcounts */
    for (int p = 0; p < n; p++)
      cnt[p] = cnt2[p] = 5 + (size_t)me + (size_t)p;
  double t0 = now_ms();
  switch (kind) {
  case M_COLL: /* AllReduce against AllGather of the same count */
    words[0] = "coll";
    words[1] = "all_gather";
    words[2] = "all_reduce";
    words[3] = "allgather";
    words[4] = "allreduce";
    st = is_odd ? purlin_all_gather(s, r, C, PURLIN_F32, comm, NULL, NULL)
                : purlin_all_reduce(s, r, C, PURLIN_F32, PURLIN_SUM, comm, NULL, NULL);
    break;
  case M_COLL2: /* ReduceScatter against AllToAll */
    words[0] = "coll";
    words[1] = "reduce_scatter";
    words[2] = "all_to_all";
    words[3] = "reducescatter";
    words[4] = "alltoall";
    st = is_odd ? purlin_all_to_all(s, r, C, PURLIN_F32, comm, NULL, NULL)
                : purlin_reduce_scatter(s, r, C, PURLIN_F32, PURLIN_SUM, comm, NULL, NULL);
    break;
  case M_COUNT:
    words[0] = "count";
    st = purlin_all_reduce(s, r, is_odd ? C + 1 : C, PURLIN_F32, PURLIN_SUM, comm, NULL, NULL);
    snprintf(b1, sizeof b1, "%d", C);
    snprintf(b2, sizeof b2, "%d", C + 1);
    v1 = b1;
    v2 = b2;
    break;
  case M_COUNT0: /* a rank with nothing to do must still agree */
    words[0] = "count";
    st = purlin_all_gather(s, r, is_odd ? 0 : C, PURLIN_F32, comm, NULL, NULL);
    break;
  case M_DTYPE:
    words[0] = "dtype";
    words[1] = "type";
    st = purlin_all_reduce(s, r, C, is_odd ? PURLIN_F16 : PURLIN_F32, PURLIN_SUM, comm, NULL, NULL);
    break;
  case M_OP:
    words[0] = "op";
    st = purlin_all_reduce(s, r, C, PURLIN_F32, is_odd ? PURLIN_MAX : PURLIN_SUM, comm, NULL, NULL);
    break;
  case M_MODE:
    words[0] = "mode";
    words[1] = "determin";
    o.mode = is_odd ? PURLIN_DETERMINISTIC : PURLIN_NONDETERMINISTIC;
    st = purlin_all_reduce(s, r, C, PURLIN_F32, PURLIN_SUM, comm, NULL, &o);
    break;
  case M_AGV: /* the odd rank thinks another rank sends one element more */
    words[0] = "count";
    if (is_odd)
      cnt[(odd + 1) % n] += 1;
    st = purlin_all_gather_v(s, cnt[me], r, cnt, NULL, PURLIN_F64, comm, NULL, NULL);
    break;
  case M_RSV:
    words[0] = "count";
    if (is_odd)
      cnt[(odd + 1) % n] += 3;
    st = purlin_reduce_scatter_v(s, r, cnt, NULL, PURLIN_F64, PURLIN_SUM, comm, NULL, NULL);
    break;
  case M_A2AV: /* the odd rank sends one element more to its neighbour than it expects */
    words[0] = "count";
    if (is_odd)
      cnt[(odd + 1) % n] += 1;
    st = purlin_all_to_all_v(s, cnt, NULL, r, cnt2, NULL, PURLIN_F64, comm, NULL, NULL);
    break;
  case M_A2AV_SELF: { /* the odd rank sends itself one element more than it receives from itself:
                        MISMATCH, and its own block must not spill past its recvcount (the copy to
                        itself happens before the headers are checked) */
    words[0] = "count";
    size_t off = 0;
    for (int p = 0; p < me; p++) off += cnt2[p];
    if (is_odd) cnt[me] += 1;
    for (size_t i = 0; i < big; i++) s[i] = 1.0;
    st = purlin_all_to_all_v(s, cnt, NULL, r, cnt2, NULL, PURLIN_F64, comm, NULL, NULL);
    if (r[off + cnt2[me]] != 0.0)
      failf("a2av_self: rank %d wrote past its own block (element %zu of recv)", me,
            off + cnt2[me]);
    break;
  }
  case M_MEM: {
    words[0] = "byte";
    words[1] = "size";
    void *p = NULL;
    st = purlin_mem_alloc(comm, is_odd ? 8192 : 4096, &p);
    if (st == PURLIN_OK) {
      failf("mem_alloc with different sizes succeeded");
      purlin_mem_free(comm, p);
    }
    break;
  }
  }
  double ms = now_ms() - t0;
  const char *txt = purlin_comm_last_error(comm);
  if (n == 1) {
    /* one rank cannot disagree with itself */
  } else {
    if (st != PURLIN_ERR_MISMATCH) {
      failf("%s: got %s (%s), want PURLIN_ERR_MISMATCH", k_mkind[kind], purlin_status_name(st),
            txt);
    } else {
      infof("%s: MISMATCH after %.0f ms: %s", k_mkind[kind], ms, txt);
      if (!contains_any(txt, words))
        failf("%s: the text does not name the parameter (%s...): \"%s\"", k_mkind[kind], words[0],
              txt);
      if (v1 && (!strstr(txt, v1) || !strstr(txt, v2)))
        failf("%s: the text does not give both values (%s, %s): \"%s\"", k_mkind[kind], v1, v2,
              txt);
      if (ms > g_timeout_ms + g_slack_ms)
        failf("%s: MISMATCH took %.0f ms", k_mkind[kind], ms);
    }
  }
  free(s);
  free(r);
  free(cnt);
  free(cnt2);
}

static void scen_mismatch(purlin_comm_t comm, const char *only) {
  if (good_call(comm, 6))
    return;
  int odds[3] = {g_n - 1, 0, g_n / 2}, tag = 10;
  for (int k = 0; k < M_KINDS; k++) {
    if (only && strcmp(only, k_mkind[k]) != 0)
      continue;
    for (int oi = 0; oi < (only ? 3 : 1); oi++) {
      one_mismatch(comm, k, odds[oi]);
      if (good_call(comm, tag++)) {
        failf("the communicator is not usable after a %s mismatch", k_mkind[k]);
        return;
      }
    }
  }
  /* A mem_alloc after the mem mismatch must work too. */
  void *p = NULL;
  purlin_status_t st = purlin_mem_alloc(comm, 4096, &p);
  if (st != PURLIN_OK)
    failf("mem_alloc after the mismatches: %s", purlin_status_name(st));
  else if ((st = purlin_mem_free(comm, p)) != PURLIN_OK)
    failf("mem_free: %s", purlin_status_name(st));
  destroy(comm);
}

/* ---- ranks
 * --------------------------------------------------------------------------------------- */

static int run_rank(purlin_comm_t comm) {
  if (strcmp(g_scen, "never") == 0)
    scen_never(comm);
  else if (strcmp(g_scen, "kill_before") == 0)
    scen_kill_before(comm);
  else if (strcmp(g_scen, "kill_during") == 0)
    scen_kill_during(comm);
  else if (strcmp(g_scen, "early_exit") == 0)
    scen_early_exit(comm);
  else if (strcmp(g_scen, "abort") == 0)
    scen_abort(comm);
  else if (strcmp(g_scen, "abort_thread") == 0)
    scen_abort_thread(comm);
  else if (strcmp(g_scen, "mismatch") == 0)
    scen_mismatch(comm, NULL);
  else if (strncmp(g_scen, "mismatch_", 9) == 0)
    scen_mismatch(comm, g_scen + 9);
  else {
    failf("unknown scenario");
    destroy(comm);
  }
  return g_fail ? 1 : 0;
}

static int child_main(int rank, int id_in, int id_out) {
  g_rank = rank;
  purlin_unique_id_t id;
  if (rank == 0) {
    purlin_status_t st = purlin_get_unique_id(&id);
    if (st != PURLIN_OK) {
      failf("purlin_get_unique_id: %s", purlin_status_name(st));
      return 1;
    }
    for (int r = 1; r < g_n; r++)
      if (write(id_out, &id, sizeof id) != (ssize_t)sizeof id)
        return 1;
  } else if (read(id_in, &id, sizeof id) != (ssize_t)sizeof id) {
    failf("no unique id from rank 0");
    return 1;
  }
  purlin_config_t cfg = PURLIN_CONFIG_INIT;
  cfg.datapath = PURLIN_DATAPATH_HOST;
  cfg.timeout_ms = g_timeout_ms;
  cfg.staging_bytes = 64 << 10;
  if (g_env_timeout)
    cfg.timeout_ms = 0;                       /* PURLIN_TIMEOUT_MS, set by the launcher, rules */
  if (strcmp(g_scen, "init_mismatch") == 0) { /* ranks disagree on the staging size */
    purlin_comm_t comm = (purlin_comm_t)(uintptr_t)0x99;
    cfg.staging_bytes = (size_t)(64 + 64 * (rank == g_victim)) << 10;
    double t0 = now_ms();
    purlin_status_t st = purlin_comm_init_rank(&comm, g_n, id, rank, &cfg);
    double ms = now_ms() - t0;
    infof("init with a different staging size on rank %d: %s after %.0f ms", g_victim,
          purlin_status_name(st), ms);
    if (g_n > 1 && st != PURLIN_ERR_MISMATCH)
      failf("init gave %s, want PURLIN_ERR_MISMATCH", purlin_status_name(st));
    if (ms > g_timeout_ms + g_slack_ms)
      failf("init returned after %.0f ms", ms);
    if (st != PURLIN_OK && comm != (purlin_comm_t)(uintptr_t)0x99)
      failf("init failed but wrote *comm");
    if (st == PURLIN_OK)
      destroy(comm);
    return g_fail ? 1 : 0;
  }
  if (strcmp(g_scen, "never_init") == 0) {
    if (rank == g_victim) {
      sleep_ms(g_timeout_ms + 1000);
      return 0;
    }
    purlin_comm_t comm = NULL;
    double t0 = now_ms();
    purlin_status_t st = purlin_comm_init_rank(&comm, g_n, id, rank, &cfg);
    double ms = now_ms() - t0;
    infof("init without the victim: %s after %.0f ms", purlin_status_name(st), ms);
    if (st != PURLIN_ERR_TIMEOUT && st != PURLIN_ERR_REMOTE)
      failf("init gave %s, want PURLIN_ERR_TIMEOUT", purlin_status_name(st));
    if (ms > g_timeout_ms + g_slack_ms)
      failf("init returned after %.0f ms", ms);
    if (comm != NULL)
      failf("init failed but wrote *comm");
    return g_fail ? 1 : 0;
  }
  purlin_comm_t comm = NULL;
  purlin_status_t st = purlin_comm_init_rank(&comm, g_n, id, rank, &cfg);
  if (st != PURLIN_OK) {
    failf("purlin_comm_init_rank: %s", purlin_status_name(st));
    return 1;
  }
  return run_rank(comm);
}

/* Leftovers created during the scenario and still there (and held by no live process). */
static void check_leftovers(const lo_snap_t *before) {
  pid_t kids[64];
  int nk = lo_children(getpid(), kids, 64);
  for (int i = 0; i < nk && i < 64; i++) {
    char comm[64];
    lo_comm(kids[i], comm, sizeof comm);
    failf("leftover process %d (%s) after the ranks ended", (int)kids[i], comm);
    kill(kids[i], SIGKILL);
  }
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
  for (int attempt = 0; attempt < 2; attempt++) {
    lo_snap_t after;
    lo_snapshot(&after);
    int found = 0;
    for (size_t i = 0; i < after.n; i++) {
      if (lo_contains(before, after.name[i]))
        continue;
      pid_t h = lo_holder(after.name[i]);
      if (h > 0)
        continue; /* someone else's run, still in use */
      found++;
      if (attempt == 1)
        failf("left behind: %s", after.name[i]);
    }
    lo_free(&after);
    if (!found)
      break;
    sleep_ms(1000); /* a concurrent run may be between creating and using it */
  }
}

static int launcher_main(void) {
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  if (g_env_timeout) { /* before any library call: settings are read once per process */
    char t[32];
    snprintf(t, sizeof t, "%d", g_timeout_ms);
    setenv("PURLIN_TIMEOUT_MS", t, 1);
  }
  lo_snap_t before;
  lo_snapshot(&before);
  int idp[2], outp[2];
  if (pipe(idp) != 0 || pipe(outp) != 0)
    return 2;
  pid_t pids[64];
  int kill_during = strcmp(g_scen, "kill_during") == 0;
  double t0 = now_ms();
  for (int r = 0; r < g_n; r++) {
    pids[r] = fork();
    if (pids[r] == 0) {
      close(outp[0]);
      if (kill_during)
        dup2(outp[1], 1); /* "ready" lines come back through the pipe */
      int rc = child_main(r, idp[0], idp[1]);
      fflush(stdout);
      _exit(rc);
    }
  }
  close(idp[0]);
  close(idp[1]);
  close(outp[1]);
  if (kill_during) { /* wait until all are in the loop, let them run, then kill the victim */
    FILE *f = fdopen(outp[0], "r");
    char line[1024];
    int ready = 0;
    while (ready < g_n && fgets(line, sizeof line, f)) {
      if (strncmp(line, "ready", 5) == 0)
        ready++;
      else
        fputs(line, stdout);
    }
    sleep_ms(400);
    printf("launcher: SIGKILL to rank %d (pid %d) after %d ranks were ready\n", g_victim,
           (int)pids[g_victim], ready);
    fflush(stdout);
    kill(pids[g_victim], SIGKILL);
    while (fgets(line, sizeof line, f))
      fputs(line, stdout);
    fclose(f);
  } else {
    close(outp[0]);
  }
  /* Reap with a deadline: nothing may hang. */
  int left = g_n, rc = 0;
  double limit = 3.0 * g_timeout_ms + 2.0 * g_slack_ms + 10000;
  while (left > 0) {
    int status;
    pid_t p = waitpid(-1, &status, WNOHANG);
    if (p == 0) {
      if (now_ms() - t0 > limit) {
        g_rank = -1;
        failf("ranks still running after %.0f ms: killing them (a hang)", limit);
        for (int r = 0; r < g_n; r++)
          if (pids[r] > 0)
            kill(pids[r], SIGKILL);
        limit = 1e18;
      }
      sleep_ms(20);
      continue;
    }
    if (p < 0)
      break;
    int r = -1;
    for (int k = 0; k < g_n; k++)
      if (pids[k] == p)
        r = k;
    if (r < 0)
      continue; /* an orphan reparented to us */
    pids[r] = -1;
    left--;
    if (r == g_victim && strcmp(g_scen, "early_exit") == 0) {
      int src, dst;
      early_exit_pair(&src, &dst);
      if (pids[src] > 0 && kill(pids[src], SIGSTOP) == 0) {
        printf("launcher: rank %d exited; rank %d stopped for 150 ms\n", r, src);
        fflush(stdout);
        sleep_ms(150);
        kill(pids[src], SIGCONT);
      }
    }
    int victim_killed = r == g_victim && (strncmp(g_scen, "kill", 4) == 0);
    if (victim_killed) {
      if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL) {
        printf("FAIL %s: the victim rank %d was not killed (status 0x%x)\n", g_scen, r, status);
        rc = 1;
      }
    } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      printf("FAIL %s: rank %d ended with %s %d\n", g_scen, r,
             WIFSIGNALED(status) ? "signal" : "status",
             WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
      rc = 1;
    }
  }
  g_rank = -1;
  check_leftovers(&before);
  lo_free(&before);
  if (g_fail)
    rc = 1;
  printf("fault_test %s: %s (%d ranks, %.1f s)\n", g_scen, rc ? "FAILED" : "ok", g_n,
         (now_ms() - t0) / 1e3);
  return rc;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc < 2) {
    fprintf(stderr,
            "usage: fault_test SCENARIO [-n N] [--timeout-ms T] [--slack-ms S] [--victim R]\n");
    return 2;
  }
  g_scen = argv[1];
  for (int i = 2; i < argc; i += 2) {
    if (strcmp(argv[i], "--env-timeout") == 0) {
      g_env_timeout = 1;
      i--;
      continue;
    }
    if (i + 1 >= argc)
      break;
    if (strcmp(argv[i], "-n") == 0)
      g_n = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--timeout-ms") == 0)
      g_timeout_ms = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--slack-ms") == 0)
      g_slack_ms = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--victim") == 0)
      g_victim = atoi(argv[i + 1]);
    else {
      fprintf(stderr, "fault_test: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if (getenv("PURLIN_RANK")) { /* under purlinrun */
    purlin_comm_t comm = NULL;
    const char *t = getenv("PURLIN_TIMEOUT_MS");
    if (t)
      g_timeout_ms = atoi(t);
    purlin_status_t st = purlin_comm_init_env(&comm, NULL);
    if (st != PURLIN_OK) {
      printf("fault_test: purlin_comm_init_env: %s\n", purlin_status_name(st));
      return 1;
    }
    purlin_comm_rank(comm, &g_rank);
    purlin_comm_size(comm, &g_n);
    if (g_victim < 0)
      g_victim = g_n - 1;
    int rc = run_rank(comm);
    printf("fault_test %s rank %d: %s\n", g_scen, g_rank, rc ? "FAILED" : "ok");
    return rc;
  }
  if (g_n < 1 || g_n > 64)
    return 2;
  if (g_victim < 0)
    g_victim = g_n - 1;
  return launcher_main();
}
