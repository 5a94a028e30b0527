/* host_exec.c -- the host datapath: memfd symmetric memory, the host atom's slow paths, and the
 * executor that runs SNAC's worker groups as threads: L lanes per role (pl_tune_t.lanes); the
 * caller runs main lane 0, persistent threads run main lanes 1..L-1 and the L stager lanes. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "comm.h"
#include "host/host_atom.h"
#include "shm.h"
#include "log.h"
#include "param.h"
#include "snac/snac.h"

/* One worker group: main lane or stager lane. Each has its own copy of the call (its lane, its
 * headers, its mismatch record) and its own atom. */
typedef struct {
  struct purlin_comm *comm;
  int lane, stager;
  pl_snac_t x;
  pl_atom_t atom;
  uint64_t *hdr;   /* main: world * hdr words, headers received */
  uint64_t *myhdr; /* main: my header */
  char *scratch;   /* main: world * PL_SNAC_SEG */
  pthread_t thread;
  int started, status;
} pl_host_group_t;

typedef struct pl_host_exec {
  int ws_fd;
  int spin_iters, lanes;
  pl_host_group_t main[PL_MAX_LANES], stage[PL_MAX_LANES];
  /* worker threads: main lanes 1..L-1 (every call), stager lanes 0..L-1 (calls that stage) */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint64_t main_seq, stage_seq; /* jobs posted */
  int main_done, stage_done;    /* workers finished with the current job */
  int quit;
  volatile int call_status; /* first error of the running call, seen by the other groups */
  pl_atom_t *volatile first_failed; /* the group that failed first: its record names the cause */
} pl_host_exec_t;

static uint64_t pl_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static pl_ctrl_t *pl_ctrl(struct purlin_comm *comm, int r) { return (pl_ctrl_t *)comm->ws[r]; }

static long pl_futex(uint32_t *addr, int op, uint32_t val, const struct timespec *ts) {
  return syscall(SYS_futex, addr, op, val, ts, NULL, 0);
}

static void pl_door_ring(pl_door_t *d) {
  __atomic_fetch_add(&d->bell, 1u, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(&d->waiters, __ATOMIC_SEQ_CST)) pl_futex(&d->bell, FUTEX_WAKE, INT_MAX, NULL);
}

/* Lane l's flags are awaited by lane l alone, so a publish wakes only that lane's sleepers; main
 * lane 0 wakes all (every lane awaits its header packets). */
void pl_host_ring(pl_atom_t *a, int peer) {
  pl_ctrl_t *c = pl_ctrl(a->comm, peer);
  if (!a->ring_all) {
    pl_door_ring(&c->door[a->lane]);
    return;
  }
  for (int l = 0; l < a->comm->host->lanes; l++) pl_door_ring(&c->door[l]);
}

void *pl_host_sym(pl_atom_t *a, int peer, uint64_t id, uint64_t off, uint64_t bytes) {
  struct purlin_comm *comm = a->comm;
  if (id < 1 || id > (uint64_t)comm->nsyms || !comm->syms[id - 1].used) return NULL;
  pl_sym_t *s = &comm->syms[id - 1];
  if (off > s->bytes || bytes > s->bytes - off) return NULL;
  return s->base[peer] + off;
}

/* Whether rank `peer`'s process has ended (its pidfd is readable). */
static int pl_peer_ended(struct purlin_comm *comm, int peer) {
  if (peer < 0 || peer >= comm->world || peer == comm->rank || comm->pidfds[peer] < 0) return 0;
  struct pollfd pfd = {comm->pidfds[peer], POLLIN, 0};
  return poll(&pfd, 1, 0) > 0 && pfd.revents;
}

/* Why the running call must stop, or 0: an abort from anywhere, or another group's error. */
static int pl_stop_reason(pl_atom_t *a) {
  pl_ctrl_t *me = pl_ctrl(a->comm, a->comm->rank);
  if (__atomic_load_n(&me->abort, __ATOMIC_ACQUIRE)) return PURLIN_ERR_REMOTE;
  if (__atomic_load_n(&me->err_epoch, __ATOMIC_ACQUIRE) == a->epoch + 1) {
    int st = a->comm->host->call_status;
    return st ? st : PURLIN_ERR_INTERNAL;
  }
  return 0;
}

int pl_host_await_slow(pl_atom_t *a, const uint64_t *flag, uint64_t value, int peer,
                       const char *what) {
  struct purlin_comm *comm = a->comm;
  pl_ctrl_t *me = pl_ctrl(comm, comm->rank);
  pl_door_t *door = &me->door[a->lane];
  int spins = comm->host->spin_iters, st;
  for (int i = 0; i < spins; i++) {
    if (pl_flag_ready(__atomic_load_n(flag, __ATOMIC_ACQUIRE), value)) return 0;
    if ((i & 63) == 63) sched_yield();
  }
  uint64_t next_check = 0, deadline = pl_now_ns() + (uint64_t)comm->timeout_ms * 1000000ull;
  for (;;) {
    if ((st = pl_stop_reason(a))) return st;
    __atomic_fetch_add(&door->waiters, 1u, __ATOMIC_SEQ_CST);
    uint32_t bell = __atomic_load_n(&door->bell, __ATOMIC_SEQ_CST);
    if (pl_flag_ready(__atomic_load_n(flag, __ATOMIC_ACQUIRE), value)) {
      __atomic_fetch_sub(&door->waiters, 1u, __ATOMIC_SEQ_CST);
      return 0;
    }
    struct timespec ts = {0, 20 * 1000 * 1000};
    pl_futex(&door->bell, FUTEX_WAIT, bell, &ts);
    __atomic_fetch_sub(&door->waiters, 1u, __ATOMIC_SEQ_CST);
    if (pl_flag_ready(__atomic_load_n(flag, __ATOMIC_ACQUIRE), value)) return 0;
    /* An abort names its culprit: look at it before blaming an ended process, which may be a
     * survivor that already handled this very error and exited. */
    if ((st = pl_stop_reason(a))) return st;
    uint64_t now = pl_now_ns();
    if (now >= next_check) { /* at most every 20 ms: liveness and deadline */
      next_check = now + 20 * 1000 * 1000;
      /* Only the awaited rank's end is an error, and only if its flag is still not there: a
       * peer may finish its part of the last call, destroy and exit while this rank still waits
       * on a slower one (its memfds stay mapped here). A waiter on the ended rank, if any, aborts
       * the communicator for everyone. The flag is read again after the pidfd: every store of
       * an ended process is visible. */
      if (pl_peer_ended(comm, peer)) {
        if (pl_flag_ready(__atomic_load_n(flag, __ATOMIC_ACQUIRE), value)) return 0;
        a->err_peer = peer;
        a->err_what = "died (its process ended)";
        return PURLIN_ERR_REMOTE;
      }
      if (now >= deadline) {
        a->err_peer = peer;
        a->err_what = what;
        return PURLIN_ERR_TIMEOUT;
      }
    }
  }
}

/* ---- symmetric memory ------------------------------------------------------------------------ */

static size_t pl_page_round(size_t b) { return (b + 4095) & ~(size_t)4095; }

purlin_status_t pl_host_mem_alloc(struct purlin_comm *comm, size_t bytes, void **ptr) {
  int id, fd = -1;
  size_t mapped = pl_page_round(bytes);
  purlin_status_t st;
  for (id = 0; id < comm->nsyms && comm->syms[id].used; id++) {
  }
  if (id == comm->nsyms) {
    pl_sym_t *n = realloc(comm->syms, sizeof(*n) * (size_t)(comm->nsyms + 1));
    if (!n) return pl_comm_fail(comm, PURLIN_ERR_NO_MEMORY, "purlin_mem_alloc: table");
    comm->syms = n;
    memset(&comm->syms[comm->nsyms++], 0, sizeof(*n));
  }
  if ((st = pl_memfd(comm, "purlin-mem", mapped, &fd))) return st;
  pl_sym_t *s = &comm->syms[id];
  st = pl_map_all(comm, fd, mapped, s->base);
  close(fd);
  if (st) return st;
  s->bytes = bytes;
  s->mapped = mapped;
  s->used = 1;
  *ptr = s->base[comm->rank];
  return PURLIN_OK;
}

purlin_status_t pl_host_mem_free(struct purlin_comm *comm, void *ptr) {
  for (int i = 0; i < comm->nsyms; i++) {
    pl_sym_t *s = &comm->syms[i];
    if (!s->used || s->base[comm->rank] != ptr) continue;
    for (int r = 0; r < comm->world; r++) munmap(s->base[r], s->mapped);
    memset(s, 0, sizeof(*s));
    return PURLIN_OK;
  }
  return pl_comm_fail(comm, PURLIN_ERR_INVALID_ARGUMENT,
                      "purlin_mem_free: ptr %p was not returned by purlin_mem_alloc", ptr);
}

/* ---- the worker threads ---------------------------------------------------------------------- */

static void pl_call_error(struct purlin_comm *comm, int st, pl_atom_t *a);

static int pl_group_run(pl_host_group_t *g) {
  int st = g->stager ? pl_snac_stage(&g->atom, &g->x) : pl_snac_main(&g->atom, &g->x, g->myhdr);
  if (st) pl_call_error(g->comm, st, &g->atom);
  return st;
}

static void *pl_worker_main(void *arg) {
  pl_host_group_t *g = arg;
  pl_host_exec_t *h = g->comm->host;
  uint64_t *seq = g->stager ? &h->stage_seq : &h->main_seq;
  int *done = g->stager ? &h->stage_done : &h->main_done;
  uint64_t seen = 0;
  pthread_mutex_lock(&h->mu);
  for (;;) {
    while (*seq == seen && !h->quit) pthread_cond_wait(&h->cv, &h->mu);
    if (h->quit) break;
    seen = *seq;
    pthread_mutex_unlock(&h->mu);
    g->status = pl_group_run(g);
    pthread_mutex_lock(&h->mu);
    ++*done;
    pthread_cond_broadcast(&h->cv);
  }
  pthread_mutex_unlock(&h->mu);
  return NULL;
}

/* ---- init / fini ----------------------------------------------------------------------------- */

static void pl_geom(struct purlin_comm *comm, size_t staging_bytes) {
  pl_ws_geom_make(&comm->geom, comm->world, sizeof(pl_ctrl_t), comm->tune.packet_bytes,
                  staging_bytes);
}

purlin_status_t pl_host_init(struct purlin_comm *comm, size_t staging_bytes) {
  pl_host_exec_t *h = calloc(1, sizeof(*h));
  purlin_status_t st;
  if (!h) return pl_comm_fail(comm, PURLIN_ERR_NO_MEMORY, "host datapath state");
  comm->host = h;
  h->ws_fd = -1;
  pthread_mutex_init(&h->mu, NULL);
  pthread_cond_init(&h->cv, NULL);
  h->spin_iters = (int)pl_param_int(PL_PARAM_SPIN_ITERS);
  h->lanes = comm->tune.lanes < 1 ? 1 : comm->tune.lanes > PL_MAX_LANES ? PL_MAX_LANES
                                                                        : (int)comm->tune.lanes;
  pl_geom(comm, staging_bytes);
  size_t hw = pl_hdr_words(comm->world);
  for (int l = 0; l < h->lanes; l++) {
    pl_host_group_t *m = &h->main[l], *s = &h->stage[l];
    m->comm = s->comm = comm;
    m->lane = s->lane = l;
    s->stager = 1;
    m->hdr = calloc((size_t)comm->world * hw, 8);
    m->myhdr = calloc(hw, 8);
    m->scratch = malloc((size_t)comm->world * PL_SNAC_SEG);
    if (!m->hdr || !m->myhdr || !m->scratch)
      return pl_comm_fail(comm, PURLIN_ERR_NO_MEMORY, "host datapath buffers");
  }
  if ((st = pl_memfd(comm, "purlin-ws", comm->geom.total, &h->ws_fd))) return st;
  if ((st = pl_map_all(comm, h->ws_fd, comm->geom.total, comm->ws))) return st;
  close(h->ws_fd);
  h->ws_fd = -1;
  for (int l = 0; l < 2 * h->lanes; l++) {
    pl_host_group_t *g = l < h->lanes ? &h->stage[l] : &h->main[l - h->lanes];
    if (g == &h->main[0]) continue; /* the caller's */
    if (pthread_create(&g->thread, NULL, pl_worker_main, g) != 0)
      return pl_comm_fail(comm, PURLIN_ERR_SYSTEM, "starting the worker threads");
    g->started = 1;
  }
  return PURLIN_OK;
}

void pl_host_fini(struct purlin_comm *comm) {
  pl_host_exec_t *h = comm->host;
  if (!h) return;
  pthread_mutex_lock(&h->mu);
  h->quit = 1;
  pthread_cond_broadcast(&h->cv);
  pthread_mutex_unlock(&h->mu);
  for (int l = 0; l < PL_MAX_LANES; l++) {
    if (h->main[l].started) pthread_join(h->main[l].thread, NULL);
    if (h->stage[l].started) pthread_join(h->stage[l].thread, NULL);
    free(h->main[l].hdr);
    free(h->main[l].myhdr);
    free(h->main[l].scratch);
  }
  for (int r = 0; r < comm->world; r++)
    if (comm->ws[r]) munmap(comm->ws[r], comm->geom.total);
  if (h->ws_fd >= 0) close(h->ws_fd);
  pthread_mutex_destroy(&h->mu);
  pthread_cond_destroy(&h->cv);
  free(h);
  comm->host = NULL;
}

/* ---- one call -------------------------------------------------------------------------------- */

/* The group's copy of the call (its lane, its headers) and its atom. */
static void pl_group_setup(pl_host_group_t *g, const pl_snac_t *proto) {
  g->x = *proto;
  g->x.lane = g->lane;
  g->x.hdr = g->hdr;
  g->status = 0;
  memset(&g->atom, 0, sizeof(g->atom));
  g->atom.comm = g->comm;
  g->atom.x = &g->x;
  g->atom.epoch = proto->epoch;
  g->atom.scratch = g->scratch;
  g->atom.lane = g->lane;
  g->atom.ring_all = !g->stager && g->lane == 0;
  g->atom.err_peer = -1;
}

/* The other groups must stop too: note the error and wake everyone of this rank. */
static void pl_call_error(struct purlin_comm *comm, int st, pl_atom_t *a) {
  pl_host_exec_t *h = comm->host;
  if (__sync_bool_compare_and_swap(&h->call_status, 0, st)) h->first_failed = a;
  __atomic_store_n(&pl_ctrl(comm, comm->rank)->err_epoch, a->epoch + 1, __ATOMIC_RELEASE);
  for (int l = 0; l < h->lanes; l++) pl_door_ring(&pl_ctrl(comm, comm->rank)->door[l]);
}

static purlin_status_t pl_report(struct purlin_comm *comm, int st, const pl_atom_t *a) {
  const pl_snac_t *x = (const pl_snac_t *)a->x;
  const char *coll = pl_coll_name(x->c.coll);
  unsigned long long callno = (unsigned long long)x->epoch;
  if (st == PURLIN_ERR_MISMATCH) {
    const pl_mismatch_t *m = &x->mismatch;
    char idx[32] = "";
    if (m->index >= 0) snprintf(idx, sizeof idx, "[%d]", m->index);
    return pl_comm_fail(comm, st,
                        "%s (call #%llu): ranks disagree on %s%s: rank %d has %" PRIu64
                        ", rank %d has %" PRIu64,
                        coll, callno, m->param, idx, m->rank_a, m->val_a, m->rank_b, m->val_b);
  }
  if (st == PURLIN_ERR_TIMEOUT) {
    pl_comm_abort_all(comm, st, a->err_peer);
    return pl_comm_fail(comm, st, "%s (call #%llu): timed out after %d ms waiting for rank %d (%s)",
                        coll, callno, comm->timeout_ms, a->err_peer, a->err_what);
  }
  if (st == PURLIN_ERR_REMOTE) {
    pl_ctrl_t *me = pl_ctrl(comm, comm->rank);
    uint64_t info = __atomic_load_n(&me->abort_info, __ATOMIC_ACQUIRE);
    if (a->err_peer >= 0) { /* we saw the death ourselves */
      pl_comm_abort_all(comm, st, a->err_peer);
      return pl_comm_fail(comm, st, "%s (call #%llu): rank %d (pid %d) %s", coll, callno,
                          a->err_peer, (int)comm->pids[a->err_peer], a->err_what);
    }
    comm->aborted = 1;
    if (!comm->async_error) comm->async_error = st;
    int who = (int)(info & 0xffff) - 1, culprit = (int)(info >> 16 & 0xffff) - 1;
    int why = -(int)(info >> 32 & 0xff);
    char blame[48] = "";
    if (culprit >= 0) snprintf(blame, sizeof blame, " on rank %d", culprit);
    return pl_comm_fail(comm, st, "%s (call #%llu): rank %d aborted the communicator (%s%s)",
                        coll, callno, who, purlin_status_name((purlin_status_t)why), blame);
  }
  pl_comm_abort_all(comm, (purlin_status_t)st, comm->rank);
  return pl_comm_fail(comm, st, "%s (call #%llu): internal error %d (a peer's buffer could not be "
                      "resolved); the communicator is aborted", coll, callno, st);
}

purlin_status_t pl_host_run(struct purlin_comm *comm, const pl_call_t *call, const void *send,
                            void *recv, int in_place) {
  pl_host_exec_t *h = comm->host;
  pl_snac_t proto, *x = &proto;
  memset(x, 0, sizeof(*x));
  x->c = *call;
  x->geom = comm->geom;
  x->epoch = comm->epoch;
  x->send = (const char *)send;
  x->recv = (char *)recv;
  x->in_place = in_place;
  memcpy(x->ws, comm->ws, sizeof(x->ws));
  pl_plan_make(&x->c, &x->geom, &comm->tune, &x->plan);
  /* Zero copy: a buffer inside purlin_mem_alloc memory may be read by peers directly. AllToAll in
   * place must stage: its peers would read what this rank overwrites. */
  int a2a = call->coll == PL_COLL_ALL_TO_ALL || call->coll == PL_COLL_ALL_TO_ALL_V;
  if (pl_param_int(PL_PARAM_ZERO_COPY) && !(a2a && in_place)) {
    uint64_t in_bytes = 0;
    for (int d = 0; d < call->world; d++) {
      uint64_t e = pl_coll_is_reduce(call->coll) ? pl_shard_in_off(call, d) + pl_shard_bytes(call, d)
                                                 : pl_gather_send_off(call, d) +
                                                       pl_gather_bytes_send(call, d);
      if (e > in_bytes) in_bytes = e;
    }
    if (in_bytes && pl_sym_find(comm, send, in_bytes, &x->sym_send[0], &x->sym_send[1]))
      x->zc_send = 1;
    if (call->coll == PL_COLL_ALL_REDUCE && call->count &&
        pl_sym_find(comm, recv, call->count * call->esize, &x->sym_recv[0], &x->sym_recv[1]))
      x->zc_recv = 1;
  }
  if (pl_snac_max_rounds(x) >= PL_EPOCH_STRIDE - 2)
    return pl_comm_fail(comm, PURLIN_ERR_UNSUPPORTED,
                        "%s: a block needs more than 2^24 rounds of %llu bytes: raise "
                        "PURLIN_STAGING_BYTES", pl_coll_name(call->coll),
                        (unsigned long long)x->plan.chunk);
  h->call_status = 0;
  h->first_failed = NULL;
  int L = h->lanes, stager = pl_snac_stage_rounds(x) > 0;
  x->plan.lanes = L; /* equal to the plan's (same clamp of the same tune.lanes); the groups built */
  for (int l = 0; l < L; l++) {
    pl_group_setup(&h->main[l], x);
    if (stager) pl_group_setup(&h->stage[l], x);
  }
  pl_atom_t *a0 = &h->main[0].atom;
  /* A peer may have aborted while this rank was between calls: waits that are satisfied at once
   * never look at the abort word, so look before starting. */
  if (__atomic_load_n(&pl_ctrl(comm, comm->rank)->abort, __ATOMIC_ACQUIRE))
    return pl_report(comm, PURLIN_ERR_REMOTE, a0);
  if (stager || L > 1) {
    pthread_mutex_lock(&h->mu);
    if (L > 1) {
      h->main_done = 0;
      h->main_seq++;
    }
    if (stager) {
      h->stage_done = 0;
      h->stage_seq++;
    }
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
  }
  int st = pl_group_run(&h->main[0]);
  if (stager || L > 1) {
    pthread_mutex_lock(&h->mu);
    while (h->main_done < L - 1 || (stager && h->stage_done < L))
      pthread_cond_wait(&h->cv, &h->mu);
    pthread_mutex_unlock(&h->mu);
    for (int l = 0; l < L; l++)
      if (h->main[l].status || (stager && h->stage[l].status)) st = st ? st : PURLIN_ERR_INTERNAL;
  }
  comm->epoch++;
  if (!st) return PURLIN_OK;
  return pl_report(comm, h->call_status, h->first_failed ? h->first_failed : a0);
}
