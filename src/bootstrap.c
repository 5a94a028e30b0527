/* bootstrap.c -- rendezvous of the ranks over abstract Unix-domain sockets.
 *
 * Why abstract sockets: their names vanish with the last descriptor that holds them, so neither a
 * normal exit nor a crash leaves anything in the file system. Why a secret on top of SO_PEERCRED:
 * abstract names are visible to every process of the network namespace; the uid check keeps other
 * users out, the secret keeps out this user's other jobs (a stale rank, a reused name).
 *
 * Protocol (native byte order: every party is on this machine):
 *   joiner -> root   pl_hello_t (JOIN): secret, rank, nranks, its deadline, its listening address
 *   root -> joiners  pl_reply_t, then nranks pl_entry_t (pid + address) or an error text
 *   rank i -> j < i  pl_hello_t (PEER); j answers with its own pl_hello_t (PEER)
 *   collectives      pl_msghdr_t (+ payload, or carrying one fd as SCM_RIGHTS) to every peer
 * Every peer is checked three ways: same uid (SO_PEERCRED), the secret, and the pid that the root
 * saw for that rank. Every wait is a poll() bounded by the caller's deadline.
 */
#include "bootstrap.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "param.h"

#define PL_BS_MAGIC 0x53424c50u /* "PLBS" */
#define PL_BS_VERSION 1
#define PL_SECRET_BYTES 16
#define PL_ADDR_MAX 64 /* "purlin-<uid>-<tag><32 hex>" and its NUL fit with room to spare */
#define PL_ERR_MAX 512
#define PL_MAX_RANKS 4096
#define PL_MAX_PENDING 64  /* connections that have not said hello yet, per listener */
#define PL_PENDING_MS 5000 /* a connection silent for that long is dropped */
#define PL_ROOT_IDLE_MS                                                                            \
  600000                     /* a root nobody joins gives up after max(this, PURLIN_TIMEOUT_MS)    \
                              */
#define PL_ROOT_SEND_MS 5000 /* the root's answers are small: only a stuck rank takes longer */
#define PL_ABORT_MS 200      /* how long a failing rank tries to tell its peers why */

/* The unique id as it lies in purlin_unique_id_t.internal. */
typedef struct {
  uint32_t magic;
  uint16_t version;
  uint16_t flags;
  uint8_t secret[PL_SECRET_BYTES];
  int32_t root_pid; /* the process that listens at addr; 0: unknown */
  char addr[PL_ADDR_MAX];
  char reserved[128 - 28 - PL_ADDR_MAX];
} pl_id_t;
_Static_assert(sizeof(pl_id_t) == sizeof(purlin_unique_id_t), "pl_id_t must fill the unique id");

enum { PL_HELLO_JOIN = 1, PL_HELLO_PEER = 2 };

typedef struct {
  uint32_t magic;
  uint16_t version;
  uint16_t kind;
  uint8_t secret[PL_SECRET_BYTES];
  int32_t rank, nranks;
  int32_t timeout_ms,
      remaining_ms;       /* the joiner's; the root gives up for everyone before it does */
  char addr[PL_ADDR_MAX]; /* JOIN: where this rank listens for its peers */
} pl_hello_t;

typedef struct {
  uint32_t magic;
  int32_t status;
  uint32_t nranks;
  uint32_t len; /* bytes that follow: nranks entries, or the error text */
} pl_reply_t;

typedef struct {
  int32_t pid; /* as the root saw it (SO_PEERCRED); peers check it again */
  char addr[PL_ADDR_MAX];
} pl_entry_t;

/* PL_OP_ABORT: a rank that gave up tells the others why (bytes = length of the text that follows),
 * so that they name the rank that caused it rather than the one that hung up first. */
enum { PL_OP_ALLGATHER = 1, PL_OP_BARRIER = 2, PL_OP_FD = 3, PL_OP_ABORT = 4 };

typedef struct {
  uint32_t magic;
  uint32_t op;
  uint64_t seq;
  uint64_t bytes;
} pl_msghdr_t;

/* One accepted connection (root or mesh) while its hello arrives. */
typedef struct {
  int fd;
  int rank; /* -1 until its hello is accepted */
  pid_t pid;
  size_t got;
  int64_t since;
  pl_hello_t h;
} pl_conn_t;

/* Progress of one collective with one peer. */
typedef struct {
  size_t sent; /* header + payload bytes sent */
  size_t hgot; /* header bytes received */
  size_t got;  /* payload bytes received */
  pl_msghdr_t rh;
  int rfd;      /* the fd received by allgather_fd */
  int quiet;    /* all received, and the peer has nothing more to say in this call */
  size_t asent; /* bytes of the abort notice sent */
} pl_xfer_t;

/* What this rank contributes to one collective. */
typedef struct {
  uint32_t op;
  const char *name;
  pl_msghdr_t sh;
  const char *mine;
  char *all;
  size_t bytes;
  int myfd;
} pl_call_t;

struct pl_bootstrap {
  int rank, nranks, timeout_ms;
  uint64_t seq;
  purlin_status_t broken; /* after a failed collective the byte streams are out of step */
  int *fd;                /* per rank, -1 for this rank */
  pid_t *pid;             /* per rank, as the root saw it */
  pl_xfer_t *xf;
  struct pollfd *pfd;
  int *pidx;
  uint8_t secret[PL_SECRET_BYTES];
  char addr[PL_ADDR_MAX];
  char first_err[PL_ERR_MAX];
  char err[PL_ERR_MAX];
};

static _Thread_local char pl_tls_err[PL_ERR_MAX];

/* ---------------------------------------------------------------------------------------------
 * Small helpers: time, errors, randomness, names.
 * ------------------------------------------------------------------------------------------- */

static int64_t pl_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int pl_left_ms(int64_t deadline) {
  int64_t left = deadline - pl_now_ms();
  if (left < 0)
    return 0;
  return left > INT_MAX ? INT_MAX : (int)left;
}

static void pl_sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
  }
}

__attribute__((format(printf, 3, 4))) static purlin_status_t pl_fail(char *err, purlin_status_t st,
                                                                     const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, PL_ERR_MAX, fmt, ap);
  va_end(ap);
  PL_ERROR("%s", err);
  return st;
}

static int pl_random(void *buf, size_t n) {
  uint8_t *p = buf;
  while (n > 0) {
    ssize_t r = getrandom(p, n, 0);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return -1;
    p += r;
    n -= (size_t)r;
  }
  return 0;
}

static void pl_hex(const uint8_t *in, size_t n, char *out) {
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = digits[in[i] >> 4];
    out[2 * i + 1] = digits[in[i] & 15];
  }
  out[2 * n] = '\0';
}

/* "purlin-<uid>-<tag><32 hex>": the uid keeps users apart in /proc/net/unix, the tag says what it
 * is (r: root, p: a rank's listener, n: a root named by pl_bootstrap_id_from_name). */
static void pl_addr_format(char addr[PL_ADDR_MAX], char tag, const uint8_t bits[16]) {
  char hex[33];
  pl_hex(bits, 16, hex);
  snprintf(addr, PL_ADDR_MAX, "purlin-%u-%c%s", (unsigned)geteuid(), tag, hex);
}

static int pl_random_addr(char addr[PL_ADDR_MAX], char tag) {
  uint8_t bits[16];
  if (pl_random(bits, sizeof bits))
    return -1;
  pl_addr_format(addr, tag, bits);
  return 0;
}

/* Not cryptographic, and need not be: a collision of two job names only makes the second job's
 * root fail to bind; the secret, not the name, keeps others out. */
static void pl_name_hash(const char *name, uint8_t out[16]) {
  uint64_t h[2] = {0xcbf29ce484222325ull, 0x6c62272e07bb0142ull};
  for (int k = 0; k < 2; k++) {
    for (const char *s = name; *s; s++) {
      h[k] ^= (uint8_t)*s;
      h[k] *= 0x100000001b3ull;
    }
    h[k] ^= h[k] >> 29;
    for (int i = 0; i < 8; i++)
      out[8 * k + i] = (uint8_t)(h[k] >> (8 * i));
  }
}

static int pl_secret_eq(const uint8_t *a, const uint8_t *b) {
  unsigned diff = 0; /* no early exit: the time taken must not tell how many bytes matched */
  for (int i = 0; i < PL_SECRET_BYTES; i++)
    diff |= (unsigned)(a[i] ^ b[i]);
  return diff == 0;
}

static int pl_addr_valid(const char *addr) {
  return addr[0] != '\0' && memchr(addr, '\0', PL_ADDR_MAX) != NULL;
}

/* "rank 3" or "ranks 1, 3, 5" (the first 16, then how many in all). */
static void pl_fmt_ranks(char *out, size_t len, const int *ranks, int n) {
  size_t used = (size_t)snprintf(out, len, "%s", n == 1 ? "rank" : "ranks");
  for (int i = 0; i < n && i < 16 && used < len; i++)
    used += (size_t)snprintf(out + used, len - used, "%s %d", i ? "," : "", ranks[i]);
  if (n > 16 && used < len)
    snprintf(out + used, len - used, " ... (%d in all)", n);
}

/* ---------------------------------------------------------------------------------------------
 * Sockets: every descriptor is close-on-exec (a launcher's children must not keep a root's name
 * alive) and nonblocking (every wait is a poll with a deadline).
 * ------------------------------------------------------------------------------------------- */

static socklen_t pl_sockaddr(struct sockaddr_un *sa, const char *addr) {
  size_t n = strnlen(addr, PL_ADDR_MAX - 1);
  memset(sa, 0, sizeof *sa);
  sa->sun_family = AF_UNIX;
  memcpy(sa->sun_path + 1, addr, n); /* sun_path[0] == 0: abstract, nothing in the file system */
  return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

/* A listening socket, or -errno. */
static int pl_listen(const char *addr) {
  struct sockaddr_un sa;
  socklen_t len = pl_sockaddr(&sa, addr);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -errno;
  if (bind(fd, (struct sockaddr *)&sa, len) < 0 || listen(fd, SOMAXCONN) < 0) {
    int e = errno;
    close(fd);
    return -e;
  }
  return fd;
}

/* A connected socket, or -errno (-ETIMEDOUT once the deadline has passed). */
static int pl_connect(const char *addr, int64_t deadline) {
  struct sockaddr_un sa;
  socklen_t len = pl_sockaddr(&sa, addr);
  for (;;) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
      return -errno;
    if (connect(fd, (struct sockaddr *)&sa, len) == 0)
      return fd;
    int e = errno;
    close(fd);
    if (e == EINTR)
      continue;
    if (e != EAGAIN)
      return -e;
    /* The listener's backlog is full: it is busy with others; its turn comes soon. */
    if (pl_now_ms() >= deadline)
      return -ETIMEDOUT;
    pl_sleep_ms(2);
  }
}

/* 0 when the peer runs as this user and, if pid > 0, is that process. */
static int pl_peer_check(int fd, pid_t pid, struct ucred *cr) {
  socklen_t len = sizeof *cr;
  memset(cr, 0, sizeof *cr);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, cr, &len) < 0)
    return -1;
  if (cr->uid != geteuid())
    return -1;
  /* pid 0: the peer is in a pid namespace we cannot see into; uid and secret must do. */
  if (pid > 0 && cr->pid > 0 && cr->pid != pid)
    return -1;
  return 0;
}

/* 1: ready; 0: the deadline passed; -errno. */
static int pl_wait(int fd, short events, int64_t deadline) {
  for (;;) {
    struct pollfd p = {fd, events, 0};
    int left = pl_left_ms(deadline);
    int r = poll(&p, 1, left);
    if (r > 0)
      return 1;
    if (r == 0 && (left == 0 || pl_now_ms() >= deadline))
      return 0;
    if (r < 0 && errno != EINTR)
      return -errno;
  }
}

/* 0, -ETIMEDOUT, -EPIPE (the peer closed) or -errno. */
static int pl_send_all(int fd, const void *buf, size_t len, int64_t deadline) {
  const char *p = buf;
  while (len > 0) {
    ssize_t n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      len -= (size_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
      return errno == ECONNRESET ? -EPIPE : -errno;
    int w = pl_wait(fd, POLLOUT, deadline);
    if (w <= 0)
      return w == 0 ? -ETIMEDOUT : w;
  }
  return 0;
}

static int pl_recv_all(int fd, void *buf, size_t len, int64_t deadline) {
  char *p = buf;
  while (len > 0) {
    ssize_t n = recv(fd, p, len, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      len -= (size_t)n;
      continue;
    }
    if (n == 0)
      return -EPIPE;
    if (errno == EINTR)
      continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK)
      return errno == ECONNRESET ? -EPIPE : -errno;
    int w = pl_wait(fd, POLLIN, deadline);
    if (w <= 0)
      return w == 0 ? -ETIMEDOUT : w;
  }
  return 0;
}

/* 1: the hello is complete; 0: more to come; -1: the peer closed or failed. */
static int pl_conn_feed(pl_conn_t *c) {
  while (c->got < sizeof c->h) {
    ssize_t n = recv(c->fd, (char *)&c->h + c->got, sizeof c->h - c->got, MSG_DONTWAIT);
    if (n > 0) {
      c->got += (size_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return 0;
    return -1;
  }
  return 1;
}

static void pl_hello_fill(pl_hello_t *h, uint16_t kind, const uint8_t *secret, int rank, int nranks,
                          int timeout_ms, int64_t deadline, const char *addr) {
  memset(h, 0, sizeof *h);
  h->magic = PL_BS_MAGIC;
  h->version = PL_BS_VERSION;
  h->kind = kind;
  memcpy(h->secret, secret, PL_SECRET_BYTES);
  h->rank = rank;
  h->nranks = nranks;
  h->timeout_ms = timeout_ms;
  h->remaining_ms = pl_left_ms(deadline);
  if (addr)
    snprintf(h->addr, sizeof h->addr, "%s", addr);
}

/* NULL when the hello is acceptable, else why not (for the log). */
static const char *pl_hello_bad(const pl_hello_t *h, const uint8_t *secret, uint16_t kind) {
  if (h->magic != PL_BS_MAGIC || h->version != PL_BS_VERSION)
    return "not a purlin bootstrap hello of this version";
  if (!pl_secret_eq(h->secret, secret))
    return "wrong secret";
  if (h->kind != kind)
    return "unexpected kind of hello";
  if (h->nranks < 1 || h->nranks > PL_MAX_RANKS)
    return "nranks out of range";
  if (h->rank < 0 || h->rank >= h->nranks)
    return "rank out of range";
  if (kind == PL_HELLO_JOIN && !pl_addr_valid(h->addr))
    return "no valid listening address";
  return NULL;
}

static int pl_id_decode(const purlin_unique_id_t *id, pl_id_t *w) {
  memcpy(w, id, sizeof *w);
  if (w->magic != PL_BS_MAGIC || w->version != PL_BS_VERSION)
    return -1;
  return pl_addr_valid(w->addr) ? 0 : -1;
}

/* ---------------------------------------------------------------------------------------------
 * The root: a thread per id that nobody has to wait for. Every root is in a registry so that a
 * fork() child closes the sockets it inherited (it has no root thread to serve them) and so that
 * the process's exit stops the roots instead of killing them mid-send.
 * ------------------------------------------------------------------------------------------- */

typedef struct pl_root {
  struct pl_root *next;
  int lfd, stopfd;
  uint8_t secret[PL_SECRET_BYTES];
  char addr[PL_ADDR_MAX];
  char path[PATH_MAX]; /* the id file of pl_bootstrap_id_from_name; "" if none */
  int64_t deadline;
  int timeout_ms; /* the timeout that `deadline` stands for, for the message */
  int nranks, njoined, npending, first_rank;
  pl_conn_t *conns;
  struct pollfd *pfd;
  int nconns, cap;
  purlin_status_t status;
  char text[PL_ERR_MAX];
} pl_root_t;

static pthread_mutex_t pl_roots_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pl_roots_cv = PTHREAD_COND_INITIALIZER;
static pl_root_t *pl_roots;
static pthread_once_t pl_roots_once = PTHREAD_ONCE_INIT;

/* Root threads that have ended but are not joined yet. The id's maker does not know them, so the
 * library joins them: when it starts the next root, and at exit (a thread still tearing itself
 * down when the process exits would show as leaked memory). */
typedef struct pl_ended {
  struct pl_ended *next;
  pthread_t tid;
} pl_ended_t;
static pl_ended_t *pl_ended;

static void pl_close_fd(int *fd) {
  if (*fd >= 0)
    close(*fd);
  *fd = -1;
}

/* Caller holds pl_roots_lock (or is a fork child, alone). */
static void pl_root_free(pl_root_t *r) {
  for (int i = 0; i < r->nconns; i++)
    pl_close_fd(&r->conns[i].fd);
  pl_close_fd(&r->lfd);
  pl_close_fd(&r->stopfd);
  free(r->conns);
  free(r->pfd);
  free(r);
}

static void pl_roots_prefork(void) {
  pthread_mutex_lock(&pl_roots_lock);
}

static void pl_roots_postfork_parent(void) {
  pthread_mutex_unlock(&pl_roots_lock);
}

static void pl_roots_postfork_child(void) {
  while (pl_roots) {
    pl_root_t *r = pl_roots;
    pl_roots = r->next;
    pl_root_free(r);
  }
  while (pl_ended) { /* those threads are the parent's: nothing to join here */
    pl_ended_t *e = pl_ended;
    pl_ended = e->next;
    free(e);
  }
  pthread_mutex_unlock(&pl_roots_lock);
}

static void pl_roots_join_ended(void) {
  pthread_mutex_lock(&pl_roots_lock);
  pl_ended_t *e = pl_ended;
  pl_ended = NULL;
  pthread_mutex_unlock(&pl_roots_lock);
  while (e) {
    pl_ended_t *next = e->next;
    pthread_join(e->tid, NULL);
    free(e);
    e = next;
  }
}

static void pl_roots_init(void) {
  pthread_atfork(pl_roots_prefork, pl_roots_postfork_parent, pl_roots_postfork_child);
}

/* At exit: tell every root of this process to answer its joiners and stop, and give them a
 * moment, so that no rank is left waiting on a root that vanished without a word. */
__attribute__((destructor)) static void pl_roots_stop_all(void) {
  pthread_mutex_lock(&pl_roots_lock);
  for (pl_root_t *r = pl_roots; r; r = r->next) {
    uint64_t one = 1;
    ssize_t w = write(r->stopfd, &one, sizeof one);
    (void)w;
  }
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 2;
  while (pl_roots && pthread_cond_timedwait(&pl_roots_cv, &pl_roots_lock, &until) == 0) {
  }
  pthread_mutex_unlock(&pl_roots_lock);
  pl_roots_join_ended();
}

/* Caller holds pl_roots_lock. */
static void pl_root_unlink(pl_root_t *r) {
  for (pl_root_t **p = &pl_roots; *p; p = &(*p)->next) {
    if (*p == r) {
      *p = r->next;
      break;
    }
  }
  pl_root_free(r);
}

/* The root thread's last act: leave the registry and queue itself to be joined. */
static void pl_root_release(pl_root_t *r) {
  pl_ended_t *e = malloc(sizeof *e);
  if (!e)
    pthread_detach(pthread_self()); /* nobody can join it then; better than a leak */
  pthread_mutex_lock(&pl_roots_lock);
  pl_root_unlink(r);
  if (e) {
    e->tid = pthread_self();
    e->next = pl_ended;
    pl_ended = e;
  }
  pthread_cond_broadcast(&pl_roots_cv);
  pthread_mutex_unlock(&pl_roots_lock);
}

static void pl_root_drop(pl_root_t *r, int i) {
  pthread_mutex_lock(&pl_roots_lock);
  if (r->conns[i].rank < 0)
    r->npending--;
  pl_close_fd(&r->conns[i].fd);
  r->conns[i] = r->conns[--r->nconns];
  pthread_mutex_unlock(&pl_roots_lock);
}

static int pl_root_grow(pl_root_t *r) {
  if (r->nconns < r->cap)
    return 0;
  int cap = r->cap ? 2 * r->cap : 16;
  pl_conn_t *c = realloc(r->conns, (size_t)cap * sizeof *c);
  if (!c)
    return -1;
  r->conns = c;
  struct pollfd *p = realloc(r->pfd, (size_t)(cap + 2) * sizeof *p);
  if (!p)
    return -1;
  r->pfd = p;
  r->cap = cap;
  return 0;
}

/* One accept; 1 if a connection was taken, 0 if none is waiting or there is no room now. */
static int pl_root_accept_one(pl_root_t *r) {
  pthread_mutex_lock(&pl_roots_lock); /* a fork must see the new fd in the table, or not at all */
  int fd = -1;
  errno = EAGAIN;
  if (r->npending < PL_MAX_PENDING && pl_root_grow(r) == 0)
    fd = accept4(r->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd >= 0) {
    pl_conn_t *c = &r->conns[r->nconns++];
    memset(c, 0, sizeof *c);
    c->fd = fd;
    c->rank = -1;
    c->since = pl_now_ms();
    r->npending++;
  }
  int e = errno;
  pthread_mutex_unlock(&pl_roots_lock);
  if (fd < 0 && e != EAGAIN && e != EWOULDBLOCK && e != EINTR) {
    PL_WARN("bootstrap root @%s: accept failed: %s", r->addr, strerror(e));
    pl_sleep_ms(10); /* e.g. out of descriptors: do not spin on a listener that stays readable */
  }
  return fd >= 0;
}

static void pl_root_accept(pl_root_t *r) {
  while (pl_root_accept_one(r)) {
    pl_conn_t *c = &r->conns[r->nconns - 1];
    struct ucred cr;
    int bad = pl_peer_check(c->fd, 0, &cr);
    c->pid = cr.pid;
    if (bad) {
      PL_WARN("bootstrap root @%s: refused a connection from pid %d of uid %u: not this user (uid "
              "%u)",
              r->addr, (int)cr.pid, (unsigned)cr.uid, (unsigned)geteuid());
      pl_root_drop(r, r->nconns - 1);
    }
  }
}

static int pl_root_find(const pl_root_t *r, int rank) {
  for (int i = 0; i < r->nconns; i++)
    if (r->conns[i].rank == rank)
      return i;
  return -1;
}

/* A joiner gives up at its own deadline; the root gives up for everyone a little before, so that
 * every rank hears which ranks are missing instead of timing out blind. */
static void pl_root_tighten(pl_root_t *r, const pl_hello_t *h) {
  int left = h->remaining_ms;
  int margin = left / 10 < 200 ? left / 10 : 200;
  int64_t deadline = pl_now_ms() + left - margin;
  if (deadline < r->deadline) {
    r->deadline = deadline;
    r->timeout_ms = h->timeout_ms;
  }
}

/* The hello is valid; does it agree with the others? Disagreement ends the rendezvous for all. */
static void pl_root_admit(pl_root_t *r, pl_conn_t *c) {
  const pl_hello_t *h = &c->h;
  int other = pl_root_find(r, h->rank);
  c->rank = h->rank; /* from here on it is told the outcome, whatever it is */
  r->npending--;
  r->njoined++;
  if (r->nranks == 0) {
    r->nranks = h->nranks;
    r->first_rank = h->rank;
  }
  if (h->nranks != r->nranks) {
    r->status = PURLIN_ERR_MISMATCH;
    snprintf(r->text, sizeof r->text,
             "bootstrap: rank %d (pid %d) says there are %d ranks, but rank %d said %d", h->rank,
             (int)c->pid, h->nranks, r->first_rank, r->nranks);
  } else if (other >= 0) {
    r->status = PURLIN_ERR_MISMATCH;
    snprintf(r->text, sizeof r->text, "bootstrap: two processes joined as rank %d (pids %d and %d)",
             h->rank, (int)r->conns[other].pid, (int)c->pid);
  }
  pl_root_tighten(r, h);
}

static void pl_root_read(pl_root_t *r, int i) {
  pl_conn_t *c = &r->conns[i];
  if (c->rank >= 0) { /* a joined rank has nothing more to say: readable means it hung up */
    r->status = PURLIN_ERR_REMOTE;
    snprintf(r->text, sizeof r->text,
             "bootstrap: rank %d closed its connection to the root before all %d ranks joined "
             "(died?)",
             c->rank, r->nranks);
    return;
  }
  int f = pl_conn_feed(c);
  if (f < 0) {
    if (c->got > 0)
      PL_WARN("bootstrap root @%s: refused a connection from pid %d: it hung up mid-hello", r->addr,
              (int)c->pid);
    else /* a probe of pl_bootstrap_id_from_name, or a rank that gave up */
      PL_TRACE("bootstrap root @%s: pid %d connected and left", r->addr, (int)c->pid);
    pl_root_drop(r, i);
    return;
  }
  if (f == 0)
    return;
  const char *bad = pl_hello_bad(&c->h, r->secret, PL_HELLO_JOIN);
  if (bad) {
    PL_WARN("bootstrap root @%s: refused a connection from pid %d: %s", r->addr, (int)c->pid, bad);
    pl_root_drop(r, i);
    return;
  }
  pl_root_admit(r, c);
}

/* Drop connections that never said hello; the time until the next one expires. */
static int pl_root_expire(pl_root_t *r, int64_t now) {
  int64_t next = INT_MAX;
  for (int i = r->nconns - 1; i >= 0; i--) {
    const pl_conn_t *c = &r->conns[i];
    if (c->rank >= 0)
      continue;
    if (now - c->since >= PL_PENDING_MS) {
      PL_WARN("bootstrap root @%s: dropped a connection from pid %d: no hello within %d ms",
              r->addr, (int)c->pid, PL_PENDING_MS);
      pl_root_drop(r, i);
    } else if (c->since + PL_PENDING_MS - now < next) {
      next = c->since + PL_PENDING_MS - now;
    }
  }
  return (int)next;
}

static void pl_root_timeout(pl_root_t *r) {
  r->status = PURLIN_ERR_TIMEOUT;
  if (r->nranks == 0) {
    snprintf(r->text, sizeof r->text, "bootstrap: no rank joined the root @%s within %d ms",
             r->addr, r->timeout_ms);
    return;
  }
  int *missing = malloc((size_t)r->nranks * sizeof *missing);
  int n = 0;
  for (int k = 0; missing && k < r->nranks; k++)
    if (pl_root_find(r, k) < 0)
      missing[n++] = k;
  char who[256] = "some ranks";
  if (missing)
    pl_fmt_ranks(who, sizeof who, missing, n);
  free(missing);
  snprintf(r->text, sizeof r->text, "bootstrap: %s of %d did not join within %d ms", who, r->nranks,
           r->timeout_ms);
}

static void pl_root_step(pl_root_t *r) {
  int64_t now = pl_now_ms();
  if (now >= r->deadline) {
    pl_root_timeout(r);
    return;
  }
  int wait = pl_root_expire(r, now);
  if (pl_left_ms(r->deadline) < wait)
    wait = pl_left_ms(r->deadline);
  struct pollfd *p = r->pfd;
  p[0] = (struct pollfd){r->stopfd, POLLIN, 0};
  /* With the pending slots full, leave newcomers in the backlog rather than spin on them. */
  p[1] = (struct pollfd){r->lfd, r->npending < PL_MAX_PENDING ? POLLIN : 0, 0};
  for (int i = 0; i < r->nconns; i++)
    p[2 + i] = (struct pollfd){r->conns[i].fd, POLLIN, 0};
  int n = poll(p, (nfds_t)(2 + r->nconns), wait);
  if (n <= 0)
    return;
  if (p[0].revents) {
    r->status = PURLIN_ERR_REMOTE;
    snprintf(r->text, sizeof r->text,
             "bootstrap: the process hosting the root (pid %d) is exiting before all ranks joined",
             (int)getpid());
    return;
  }
  /* Downwards: pl_root_drop moves the last connection into the freed slot, already visited. */
  for (int i = r->nconns - 1; i >= 0 && r->status == PURLIN_OK; i--)
    if (p[2 + i].revents)
      pl_root_read(r, i);
  if (p[1].revents && r->status == PURLIN_OK)
    pl_root_accept(r);
}

static void pl_root_send(pl_root_t *r, const void *msg, size_t len) {
  int64_t deadline = pl_now_ms() + PL_ROOT_SEND_MS;
  for (int i = 0; i < r->nconns; i++) {
    if (r->conns[i].rank < 0)
      continue;
    int e = pl_send_all(r->conns[i].fd, msg, len, deadline);
    if (e) /* that rank is gone or stuck; the others find out when they connect to it */
      PL_INFO("bootstrap root @%s: could not answer rank %d: %s", r->addr, r->conns[i].rank,
              strerror(-e));
  }
}

static void pl_root_answer_ok(pl_root_t *r) {
  size_t len = (size_t)r->nranks * sizeof(pl_entry_t);
  char *msg = calloc(1, sizeof(pl_reply_t) + len);
  if (!msg) {
    r->status = PURLIN_ERR_NO_MEMORY;
    snprintf(r->text, sizeof r->text, "bootstrap: the root ran out of memory");
    return;
  }
  pl_reply_t rep = {PL_BS_MAGIC, PURLIN_OK, (uint32_t)r->nranks, (uint32_t)len};
  memcpy(msg, &rep, sizeof rep);
  pl_entry_t *table = (pl_entry_t *)(msg + sizeof rep);
  for (int i = 0; i < r->nconns; i++) {
    const pl_conn_t *c = &r->conns[i];
    if (c->rank < 0)
      continue;
    table[c->rank].pid = c->pid;
    memcpy(table[c->rank].addr, c->h.addr, PL_ADDR_MAX);
  }
  pl_root_send(r, msg, sizeof rep + len);
  free(msg);
  PL_INFO("bootstrap root @%s: all %d ranks joined", r->addr, r->nranks);
}

static void pl_root_answer_error(pl_root_t *r) {
  size_t len = strlen(r->text);
  char msg[sizeof(pl_reply_t) + PL_ERR_MAX];
  pl_reply_t rep = {PL_BS_MAGIC, r->status, (uint32_t)r->nranks, (uint32_t)len};
  memcpy(msg, &rep, sizeof rep);
  memcpy(msg + sizeof rep, r->text, len);
  if (r->njoined > 0)
    PL_ERROR("%s", r->text);
  else
    PL_INFO("%s", r->text);
  pl_root_send(r, msg, sizeof rep + len);
}

static void *pl_root_main(void *arg) {
  pl_root_t *r = arg;
  while (r->status == PURLIN_OK && !(r->nranks > 0 && r->njoined == r->nranks))
    pl_root_step(r);
  /* The secret file has served its purpose as soon as everyone is in (or never will be). */
  if (r->path[0])
    unlink(r->path);
  for (int i = 0; i < r->nconns; i++)
    if (r->conns[i].rank < 0)
      PL_WARN("bootstrap root @%s: closing a connection from pid %d that never completed its "
              "hello",
              r->addr, (int)r->conns[i].pid);
  if (r->status == PURLIN_OK)
    pl_root_answer_ok(r);
  if (r->status != PURLIN_OK)
    pl_root_answer_error(r);
  pl_root_release(r);
  return NULL;
}

static purlin_status_t pl_root_start(pl_root_t *r, char *err) {
  pthread_once(&pl_roots_once, pl_roots_init);
  pl_roots_join_ended();
  pthread_mutex_lock(&pl_roots_lock);
  r->next = pl_roots;
  pl_roots = r;
  pthread_mutex_unlock(&pl_roots_lock);

  /* The root must never take the process's signals: with them blocked in the application's main
   * thread (signalfd, sigwait), a signal delivered here would run the default action instead. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_t tid;
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = pthread_create(&tid, NULL, pl_root_main, r);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc == 0)
    return PURLIN_OK;
  pthread_mutex_lock(&pl_roots_lock);
  pl_root_unlink(r);
  pthread_mutex_unlock(&pl_roots_lock);
  return pl_fail(err, PURLIN_ERR_SYSTEM, "bootstrap: cannot start the root thread: %s",
                 strerror(rc));
}

static purlin_status_t pl_id_write(const char *path, const pl_id_t *w, char *err);

/* Listen at w->addr, publish the id at path (if any), start the root. The file is written first:
 * a root that gave up at once must find it to remove it. */
static purlin_status_t pl_root_launch(const pl_id_t *w, const char *path, int64_t idle_ms,
                                      char *err) {
  pl_root_t *r = calloc(1, sizeof *r);
  if (!r)
    return pl_fail(err, PURLIN_ERR_NO_MEMORY, "bootstrap: out of memory");
  r->stopfd = -1;
  r->lfd = pl_listen(w->addr);
  if (r->lfd < 0) {
    int e = -r->lfd;
    free(r);
    if (e == EADDRINUSE)
      return pl_fail(err, PURLIN_ERR_INVALID_USAGE,
                     "bootstrap: the rendezvous @%s is in use by another process (another job "
                     "with the same name on this machine?)",
                     w->addr);
    return pl_fail(err, PURLIN_ERR_SYSTEM, "bootstrap: cannot listen at @%s: %s", w->addr,
                   strerror(e));
  }
  r->stopfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (r->stopfd < 0 || pl_root_grow(r)) {
    int e = errno;
    pl_root_free(r);
    return pl_fail(err, PURLIN_ERR_SYSTEM, "bootstrap: cannot set up the root: %s", strerror(e));
  }
  memcpy(r->secret, w->secret, PL_SECRET_BYTES);
  memcpy(r->addr, w->addr, PL_ADDR_MAX);
  snprintf(r->path, sizeof r->path, "%s", path ? path : "");
  r->timeout_ms = idle_ms > INT_MAX ? INT_MAX : (int)idle_ms;
  r->deadline = pl_now_ms() + idle_ms;
  r->first_rank = -1;
  purlin_status_t st = path ? pl_id_write(path, w, err) : PURLIN_OK;
  if (st != PURLIN_OK) {
    pl_root_free(r);
    return st;
  }
  st = pl_root_start(r, err);
  if (st != PURLIN_OK && path)
    unlink(path);
  return st;
}

static void pl_id_new(pl_id_t *w, const char *addr, const uint8_t *secret) {
  memset(w, 0, sizeof *w);
  w->magic = PL_BS_MAGIC;
  w->version = PL_BS_VERSION;
  memcpy(w->secret, secret, PL_SECRET_BYTES);
  w->root_pid = (int32_t)getpid();
  snprintf(w->addr, sizeof w->addr, "%s", addr);
}

purlin_status_t pl_bootstrap_make_id(purlin_unique_id_t *id) {
  pl_tls_err[0] = '\0';
  if (!id)
    return pl_fail(pl_tls_err, PURLIN_ERR_INVALID_ARGUMENT, "bootstrap: make_id: id is NULL");
  uint8_t secret[PL_SECRET_BYTES];
  char addr[PL_ADDR_MAX];
  if (pl_random(secret, sizeof secret) || pl_random_addr(addr, 'r'))
    return pl_fail(pl_tls_err, PURLIN_ERR_SYSTEM, "bootstrap: getrandom failed: %s",
                   strerror(errno));
  pl_id_t w;
  pl_id_new(&w, addr, secret);
  /* make_id has no timeout: the ranks' own deadlines bound the wait once the first one joins. */
  int64_t idle = pl_param_int(PL_PARAM_TIMEOUT_MS);
  if (idle < PL_ROOT_IDLE_MS)
    idle = PL_ROOT_IDLE_MS;
  purlin_status_t st = pl_root_launch(&w, NULL, idle, pl_tls_err);
  if (st == PURLIN_OK)
    memcpy(id, &w, sizeof w);
  return st;
}

/* ---------------------------------------------------------------------------------------------
 * Ids by name: the root publishes the id in a file of a 0700 directory of this user.
 * ------------------------------------------------------------------------------------------- */

static int pl_runtime_dir(char *dir, size_t len) {
  const char *x = getenv("XDG_RUNTIME_DIR");
  int n = x && x[0] == '/' ? snprintf(dir, len, "%s/purlin", x)
                           : snprintf(dir, len, "/tmp/purlin-%u", (unsigned)geteuid());
  return n > 0 && (size_t)n < len ? 0 : -1;
}

static purlin_status_t pl_runtime_dir_check(const char *dir, char *err) {
  if (mkdir(dir, 0700) < 0 && errno != EEXIST)
    return pl_fail(err, PURLIN_ERR_SYSTEM, "bootstrap: cannot create %s: %s", dir, strerror(errno));
  struct stat st;
  if (lstat(dir, &st) < 0)
    return pl_fail(err, PURLIN_ERR_SYSTEM, "bootstrap: cannot stat %s: %s", dir, strerror(errno));
  /* Someone else's directory, or one others may write into, could hand us a forged id. */
  if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077) != 0)
    return pl_fail(err, PURLIN_ERR_INVALID_USAGE,
                   "bootstrap: %s must be a directory of uid %u with mode 0700 (it has uid %u, "
                   "mode %03o): refusing to keep the rendezvous secret there",
                   dir, (unsigned)geteuid(), (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
  return PURLIN_OK;
}

int pl_bootstrap_id_file(const char *name, char *path, size_t len) {
  char dir[PATH_MAX], hex[33];
  uint8_t h[16];
  if (!name || !path || pl_runtime_dir(dir, sizeof dir))
    return -1;
  pl_name_hash(name, h);
  pl_hex(h, 16, hex);
  int n = snprintf(path, len, "%s/id-%s", dir, hex);
  return n > 0 && (size_t)n < len ? 0 : -1;
}

static purlin_status_t pl_id_write(const char *path, const pl_id_t *w, char *err) {
  char tmp[PATH_MAX + 32];
  snprintf(tmp, sizeof tmp, "%s.tmp-%d", path, (int)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0)
    return pl_fail(err, PURLIN_ERR_SYSTEM, "bootstrap: cannot create %s: %s", tmp, strerror(errno));
  ssize_t n = write(fd, w, sizeof *w);
  int e = n == (ssize_t)sizeof *w ? 0 : (n < 0 ? errno : EIO);
  if (close(fd) < 0 && !e)
    e = errno;
  /* rename is atomic: a reader sees no file or the whole id, never half of one */
  if (!e && rename(tmp, path) < 0)
    e = errno;
  if (!e)
    return PURLIN_OK;
  unlink(tmp);
  return pl_fail(err, PURLIN_ERR_SYSTEM, "bootstrap: cannot write %s: %s", path, strerror(e));
}

/* 0: read; -ENOENT: not there yet; -EPERM: not a file of ours; other -errno. */
static int pl_id_read(const char *path, pl_id_t *w) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0)
    return -errno;
  struct stat st;
  int e = fstat(fd, &st) < 0 ? -errno : 0;
  if (!e && (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077) != 0))
    e = -EPERM;
  if (!e && read(fd, w, sizeof *w) != (ssize_t)sizeof *w)
    e = -EIO;
  close(fd);
  return e;
}

/* Is the root of this id alive, and the process that wrote it? A file left by a crashed job
 * names a root that is gone, or a pid that is not the one listening now. */
static int pl_id_fresh(const pl_id_t *w) {
  int fd = pl_connect(w->addr, 0);
  if (fd < 0)
    return 0;
  struct ucred cr;
  int ok = pl_peer_check(fd, w->root_pid, &cr) == 0;
  close(fd);
  return ok;
}

static purlin_status_t pl_id_wait(const char *name, const char *addr, const char *path,
                                  int timeout_ms, pl_id_t *w, char *err) {
  int64_t deadline = pl_now_ms() + timeout_ms;
  for (;;) {
    int e = pl_id_read(path, w);
    if (e == -EPERM)
      return pl_fail(err, PURLIN_ERR_INVALID_USAGE,
                     "bootstrap: %s is not a 0600 file of uid %u: refusing it", path,
                     (unsigned)geteuid());
    if (e == 0 && w->magic == PL_BS_MAGIC && w->version == PL_BS_VERSION &&
        strncmp(w->addr, addr, PL_ADDR_MAX) == 0 && pl_id_fresh(w))
      return PURLIN_OK;
    if (pl_now_ms() >= deadline)
      break;
    pl_sleep_ms(20);
  }
  return pl_fail(err, PURLIN_ERR_TIMEOUT,
                 "bootstrap: rendezvous '%s': the root rank did not publish %s within %d ms (is it "
                 "running, with the same name?)",
                 name, path, timeout_ms);
}

purlin_status_t pl_bootstrap_id_from_name(const char *name, int is_root, int timeout_ms,
                                          purlin_unique_id_t *id) {
  pl_tls_err[0] = '\0';
  if (!name || !name[0] || !id || timeout_ms <= 0)
    return pl_fail(pl_tls_err, PURLIN_ERR_INVALID_ARGUMENT,
                   "bootstrap: id_from_name: needs a name, an id and a timeout > 0 (name %s, "
                   "timeout_ms %d)",
                   name ? name : "NULL", timeout_ms);
  char dir[PATH_MAX], path[PATH_MAX], addr[PL_ADDR_MAX];
  uint8_t h[16];
  pl_name_hash(name, h);
  pl_addr_format(addr, 'n', h);
  if (pl_runtime_dir(dir, sizeof dir) || pl_bootstrap_id_file(name, path, sizeof path))
    return pl_fail(pl_tls_err, PURLIN_ERR_INVALID_USAGE, "bootstrap: XDG_RUNTIME_DIR too long");
  purlin_status_t st = pl_runtime_dir_check(dir, pl_tls_err);
  if (st)
    return st;
  pl_id_t w;
  if (!is_root) {
    st = pl_id_wait(name, addr, path, timeout_ms, &w, pl_tls_err);
  } else {
    uint8_t secret[PL_SECRET_BYTES];
    if (pl_random(secret, sizeof secret))
      return pl_fail(pl_tls_err, PURLIN_ERR_SYSTEM, "bootstrap: getrandom failed: %s",
                     strerror(errno));
    pl_id_new(&w, addr, secret);
    w.flags = 1; /* named */
    /* The file is written once the socket listens, so that a reader can check it is fresh. */
    st = pl_root_launch(&w, path, timeout_ms, pl_tls_err);
  }
  if (st == PURLIN_OK)
    memcpy(id, &w, sizeof w);
  return st;
}

/* ---------------------------------------------------------------------------------------------
 * Joining: the root's table of addresses, then a full mesh. Rank i connects to every j < i and
 * accepts every j > i. Connecting never waits for the other side (the kernel queues it in the
 * listener's backlog), so this cannot deadlock.
 * ------------------------------------------------------------------------------------------- */

static purlin_status_t pl_io_fail(pl_bootstrap_t *b, int e, int peer, const char *what) {
  if (e == -ETIMEDOUT)
    return pl_fail(b->err, PURLIN_ERR_TIMEOUT, "bootstrap: rank %d of %d: %s within %d ms", b->rank,
                   b->nranks, what, b->timeout_ms);
  if (e == -EPIPE && peer >= 0)
    return pl_fail(b->err, PURLIN_ERR_REMOTE,
                   "bootstrap: rank %d closed its bootstrap connection (died?) while rank %d "
                   "waited for: %s",
                   peer, b->rank, what);
  if (e == -EPIPE)
    return pl_fail(b->err, PURLIN_ERR_REMOTE,
                   "bootstrap: rank %d of %d: the root closed the connection without an answer "
                   "(the id's secret was refused, or the process that made the id is exiting)",
                   b->rank, b->nranks);
  return pl_fail(b->err, PURLIN_ERR_SYSTEM, "bootstrap: rank %d of %d: %s: %s", b->rank, b->nranks,
                 what, strerror(-e));
}

static purlin_status_t pl_join_connect(pl_bootstrap_t *b, const pl_id_t *w, int64_t deadline,
                                       int *out) {
  int fd = pl_connect(w->addr, deadline);
  if (fd == -ETIMEDOUT)
    return pl_io_fail(b, fd, -1, "the root accepted no connection");
  if (fd < 0)
    return pl_fail(b->err, PURLIN_ERR_REMOTE,
                   "bootstrap: rank %d of %d: no root listens at @%s (%s): the process that made "
                   "the id has exited, or its root gave up",
                   b->rank, b->nranks, w->addr, strerror(-fd));
  struct ucred cr;
  if (pl_peer_check(fd, w->root_pid, &cr)) {
    close(fd);
    return pl_fail(b->err, PURLIN_ERR_SYSTEM,
                   "bootstrap: rank %d: @%s is held by pid %d of uid %u, not by pid %d of uid "
                   "%u: refusing to send it the secret",
                   b->rank, w->addr, (int)cr.pid, (unsigned)cr.uid, (int)w->root_pid,
                   (unsigned)geteuid());
  }
  *out = fd;
  return PURLIN_OK;
}

static purlin_status_t pl_join_table(pl_bootstrap_t *b, int fd, int64_t deadline,
                                     pl_entry_t *table) {
  pl_reply_t rep;
  int e = pl_recv_all(fd, &rep, sizeof rep, deadline);
  if (e)
    return pl_io_fail(b, e, -1, "no answer from the root (ranks missing?)");
  if (rep.magic != PL_BS_MAGIC)
    return pl_fail(b->err, PURLIN_ERR_INTERNAL, "bootstrap: garbled answer from the root");
  if (rep.status != PURLIN_OK) {
    char text[PL_ERR_MAX];
    size_t len = rep.len < sizeof text - 1 ? rep.len : sizeof text - 1;
    e = pl_recv_all(fd, text, len, deadline);
    text[e ? 0 : len] = '\0';
    purlin_status_t st = rep.status > 0 || rep.status < PURLIN_ERR_INTERNAL
                             ? PURLIN_ERR_INTERNAL
                             : (purlin_status_t)rep.status;
    return pl_fail(b->err, st, "%s", text[0] ? text : "bootstrap: the root refused the rendezvous");
  }
  if (rep.nranks != (uint32_t)b->nranks || rep.len != (uint32_t)b->nranks * sizeof *table)
    return pl_fail(b->err, PURLIN_ERR_INTERNAL, "bootstrap: the root's table has the wrong size");
  e = pl_recv_all(fd, table, rep.len, deadline);
  if (e)
    return pl_io_fail(b, e, -1, "the root's table of addresses");
  for (int j = 0; j < b->nranks; j++)
    if (!pl_addr_valid(table[j].addr))
      return pl_fail(b->err, PURLIN_ERR_INTERNAL, "bootstrap: the root's table is garbled");
  return PURLIN_OK;
}

static purlin_status_t pl_join(pl_bootstrap_t *b, const pl_id_t *w, int64_t deadline,
                               pl_entry_t *table) {
  int fd = -1;
  purlin_status_t st = pl_join_connect(b, w, deadline, &fd);
  if (st)
    return st;
  pl_hello_t h;
  pl_hello_fill(&h, PL_HELLO_JOIN, b->secret, b->rank, b->nranks, b->timeout_ms, deadline, b->addr);
  int e = pl_send_all(fd, &h, sizeof h, deadline);
  st = e ? pl_io_fail(b, e, -1, "the hello to the root") : pl_join_table(b, fd, deadline, table);
  close(fd);
  if (st == PURLIN_OK && strncmp(table[b->rank].addr, b->addr, PL_ADDR_MAX) != 0)
    st = pl_fail(b->err, PURLIN_ERR_INTERNAL, "bootstrap: the root's table lost rank %d", b->rank);
  return st;
}

static purlin_status_t pl_mesh_connect_lower(pl_bootstrap_t *b, const pl_entry_t *table,
                                             int64_t deadline) {
  char what[96];
  for (int j = 0; j < b->rank; j++) {
    int fd = pl_connect(table[j].addr, deadline);
    snprintf(what, sizeof what, "a connection to rank %d", j);
    if (fd == -ETIMEDOUT)
      return pl_io_fail(b, fd, j, what);
    if (fd < 0)
      return pl_fail(b->err, PURLIN_ERR_REMOTE,
                     "bootstrap: rank %d does not listen any more (%s): died? (seen by rank %d)", j,
                     strerror(-fd), b->rank);
    b->fd[j] = fd;
    struct ucred cr;
    if (pl_peer_check(fd, b->pid[j], &cr))
      return pl_fail(b->err, PURLIN_ERR_SYSTEM,
                     "bootstrap: rank %d's address is held by pid %d of uid %u, not by pid %d: "
                     "refusing it",
                     j, (int)cr.pid, (unsigned)cr.uid, (int)b->pid[j]);
    pl_hello_t h;
    pl_hello_fill(&h, PL_HELLO_PEER, b->secret, b->rank, b->nranks, b->timeout_ms, deadline, NULL);
    int e = pl_send_all(fd, &h, sizeof h, deadline);
    if (e)
      return pl_io_fail(b, e, j, what);
  }
  return PURLIN_OK;
}

/* Checks the peer hello of connection c; on success it becomes b->fd[rank]. */
static int pl_mesh_take(pl_bootstrap_t *b, pl_conn_t *c) {
  const char *bad = pl_hello_bad(&c->h, b->secret, PL_HELLO_PEER);
  int j = c->h.rank;
  if (!bad && (c->h.nranks != b->nranks || j <= b->rank || b->fd[j] >= 0))
    bad = "unexpected rank or nranks";
  if (!bad && b->pid[j] > 0 && c->pid > 0 && c->pid != b->pid[j])
    bad = "not the process that joined the root as that rank";
  if (bad) {
    PL_WARN("bootstrap: rank %d refused a connection from pid %d: %s", b->rank, (int)c->pid, bad);
    return -1;
  }
  b->fd[j] = c->fd;
  c->fd = -1;
  return j;
}

static void pl_mesh_missing(const pl_bootstrap_t *b, int lo, int hi, char *who, size_t len) {
  int *missing = malloc((size_t)b->nranks * sizeof *missing);
  int n = 0;
  for (int j = lo; missing && j < hi; j++)
    if (b->fd[j] < 0)
      missing[n++] = j;
  snprintf(who, len, "some ranks");
  if (missing)
    pl_fmt_ranks(who, len, missing, n);
  free(missing);
}

static void pl_mesh_accept_new(pl_bootstrap_t *b, int lfd, pl_conn_t *pend, int *np) {
  while (*np < PL_MAX_PENDING) {
    int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0)
      return;
    pl_conn_t *c = &pend[*np];
    memset(c, 0, sizeof *c);
    c->fd = fd;
    struct ucred cr;
    int bad = pl_peer_check(fd, 0, &cr);
    c->pid = cr.pid;
    if (!bad) {
      ++*np;
      continue;
    }
    PL_WARN("bootstrap: rank %d refused a connection from pid %d of uid %u: not this user", b->rank,
            (int)cr.pid, (unsigned)cr.uid);
    pl_close_fd(&c->fd);
  }
}

/* Poll the listener and the connections not yet identified; take (and answer) those whose hello
 * is good: only the answer tells the connecting rank that this one is genuine too. */
static purlin_status_t pl_mesh_accept_step(pl_bootstrap_t *b, int lfd, pl_conn_t *pend, int *np,
                                           int *have, int64_t deadline) {
  struct pollfd p[PL_MAX_PENDING + 1];
  p[0] = (struct pollfd){lfd, *np < PL_MAX_PENDING ? POLLIN : 0, 0}; /* full: leave them queued */
  for (int i = 0; i < *np; i++)
    p[1 + i] = (struct pollfd){pend[i].fd, POLLIN, 0};
  if (poll(p, (nfds_t)(1 + *np), pl_left_ms(deadline)) <= 0)
    return PURLIN_OK;
  pl_hello_t me;
  pl_hello_fill(&me, PL_HELLO_PEER, b->secret, b->rank, b->nranks, b->timeout_ms, deadline, NULL);
  for (int i = *np - 1; i >= 0; i--) {
    if (!p[1 + i].revents)
      continue;
    int f = pl_conn_feed(&pend[i]);
    if (f == 0)
      continue;
    int j = f > 0 ? pl_mesh_take(b, &pend[i]) : -1;
    pl_close_fd(&pend[i].fd);
    pend[i] = pend[--*np];
    if (j < 0)
      continue;
    ++*have;
    int e = pl_send_all(b->fd[j], &me, sizeof me, deadline);
    if (e)
      return pl_io_fail(b, e, j, "the answer to its hello");
  }
  if (p[0].revents)
    pl_mesh_accept_new(b, lfd, pend, np);
  return PURLIN_OK;
}

static purlin_status_t pl_mesh_accept_higher(pl_bootstrap_t *b, int lfd, int64_t deadline) {
  pl_conn_t pend[PL_MAX_PENDING];
  int np = 0, have = 0, want = b->nranks - 1 - b->rank;
  purlin_status_t st = PURLIN_OK;
  while (have < want && st == PURLIN_OK) {
    if (pl_now_ms() >= deadline) {
      char who[256];
      pl_mesh_missing(b, b->rank + 1, b->nranks, who, sizeof who);
      st = pl_fail(b->err, PURLIN_ERR_TIMEOUT,
                   "bootstrap: rank %d of %d: no connection from %s within %d ms", b->rank,
                   b->nranks, who, b->timeout_ms);
      break;
    }
    st = pl_mesh_accept_step(b, lfd, pend, &np, &have, deadline);
  }
  for (int i = 0; i < np; i++)
    pl_close_fd(&pend[i].fd);
  return st;
}

static purlin_status_t pl_mesh_check_answer(pl_bootstrap_t *b, const pl_conn_t *c, int j) {
  const char *bad = pl_hello_bad(&c->h, b->secret, PL_HELLO_PEER);
  if (!bad && (c->h.rank != j || c->h.nranks != b->nranks))
    bad = "unexpected rank or nranks";
  if (!bad)
    return PURLIN_OK;
  return pl_fail(b->err, PURLIN_ERR_SYSTEM, "bootstrap: rank %d's answer to rank %d is bad: %s", j,
                 b->rank, bad);
}

/* Read the answers of the lower ranks to this rank's hellos; pl_conn_t only tracks the bytes. */
static purlin_status_t pl_mesh_await_lower(pl_bootstrap_t *b, pl_conn_t *lo, int64_t deadline) {
  purlin_status_t st = PURLIN_OK;
  int left = b->rank;
  while (left > 0 && st == PURLIN_OK) {
    int n = 0;
    for (int j = 0; j < b->rank; j++) {
      if (lo[j].got == sizeof lo[j].h)
        continue;
      b->pfd[n] = (struct pollfd){b->fd[j], POLLIN, 0};
      b->pidx[n++] = j;
    }
    if (pl_now_ms() >= deadline) {
      char who[256];
      pl_fmt_ranks(who, sizeof who, b->pidx, n);
      return pl_fail(b->err, PURLIN_ERR_TIMEOUT,
                     "bootstrap: rank %d of %d: no answer from %s within %d ms", b->rank, b->nranks,
                     who, b->timeout_ms);
    }
    if (poll(b->pfd, (nfds_t)n, pl_left_ms(deadline)) <= 0)
      continue;
    for (int k = 0; k < n && st == PURLIN_OK; k++) {
      int j = b->pidx[k];
      if (!b->pfd[k].revents)
        continue;
      lo[j].fd = b->fd[j];
      int f = pl_conn_feed(&lo[j]);
      if (f < 0)
        st = pl_io_fail(b, -EPIPE, j, "its answer to this rank's hello");
      if (f > 0) {
        st = pl_mesh_check_answer(b, &lo[j], j);
        left--;
      }
    }
  }
  return st;
}

static purlin_status_t pl_mesh(pl_bootstrap_t *b, int lfd, const pl_entry_t *table,
                               int64_t deadline) {
  for (int j = 0; j < b->nranks; j++)
    b->pid[j] = table[j].pid;
  purlin_status_t st = pl_mesh_connect_lower(b, table, deadline);
  if (st == PURLIN_OK)
    st = pl_mesh_accept_higher(b, lfd, deadline);
  if (st != PURLIN_OK || b->rank == 0)
    return st;
  pl_conn_t *lo = calloc((size_t)b->rank, sizeof *lo);
  if (!lo)
    return pl_fail(b->err, PURLIN_ERR_NO_MEMORY, "bootstrap: out of memory");
  st = pl_mesh_await_lower(b, lo, deadline);
  free(lo);
  return st;
}

static pl_bootstrap_t *pl_bs_new(int rank, int nranks, int timeout_ms, const pl_id_t *w) {
  pl_bootstrap_t *b = calloc(1, sizeof *b);
  if (!b)
    return NULL;
  b->rank = rank;
  b->nranks = nranks;
  b->timeout_ms = timeout_ms;
  memcpy(b->secret, w->secret, PL_SECRET_BYTES);
  b->fd = malloc((size_t)nranks * sizeof *b->fd);
  b->pid = calloc((size_t)nranks, sizeof *b->pid);
  b->xf = calloc((size_t)nranks, sizeof *b->xf);
  b->pfd = calloc((size_t)nranks, sizeof *b->pfd);
  b->pidx = calloc((size_t)nranks, sizeof *b->pidx);
  if (!b->fd || !b->pid || !b->xf || !b->pfd || !b->pidx) {
    free(b->fd);
    b->fd = NULL;
    pl_bootstrap_destroy(b);
    return NULL;
  }
  for (int j = 0; j < nranks; j++)
    b->fd[j] = -1;
  return b;
}

static purlin_status_t pl_bs_connect(pl_bootstrap_t *b, const pl_id_t *w, int64_t deadline) {
  purlin_status_t st;
  if (pl_random_addr(b->addr, 'p'))
    return pl_fail(b->err, PURLIN_ERR_SYSTEM, "bootstrap: getrandom failed: %s", strerror(errno));
  int lfd = pl_listen(b->addr);
  if (lfd < 0)
    return pl_fail(b->err, PURLIN_ERR_SYSTEM, "bootstrap: rank %d cannot listen: %s", b->rank,
                   strerror(-lfd));
  pl_entry_t *table = malloc((size_t)b->nranks * sizeof *table);
  if (!table) {
    st = pl_fail(b->err, PURLIN_ERR_NO_MEMORY, "bootstrap: out of memory");
    goto out_listen;
  }
  st = pl_join(b, w, deadline, table);
  if (st == PURLIN_OK)
    st = pl_mesh(b, lfd, table, deadline);
  free(table);
out_listen:
  close(lfd); /* the mesh is built: nobody else may connect, and the name must go */
  return st;
}

purlin_status_t pl_bootstrap_init(const purlin_unique_id_t *id, int rank, int nranks,
                                  int timeout_ms, pl_bootstrap_t **bs) {
  pl_tls_err[0] = '\0';
  pl_id_t w;
  if (!id || !bs)
    return pl_fail(pl_tls_err, PURLIN_ERR_INVALID_ARGUMENT, "bootstrap: init: %s is NULL",
                   id ? "bs" : "id");
  if (nranks < 1 || nranks > PL_MAX_RANKS || rank < 0 || rank >= nranks || timeout_ms <= 0)
    return pl_fail(pl_tls_err, PURLIN_ERR_INVALID_ARGUMENT,
                   "bootstrap: init: rank %d, nranks %d, timeout_ms %d: need 0 <= rank < nranks "
                   "<= %d and timeout_ms > 0",
                   rank, nranks, timeout_ms, PL_MAX_RANKS);
  if (pl_id_decode(id, &w))
    return pl_fail(pl_tls_err, PURLIN_ERR_INVALID_ARGUMENT,
                   "bootstrap: init: not a unique id of this purlin version");
  pl_bootstrap_t *b = pl_bs_new(rank, nranks, timeout_ms, &w);
  if (!b)
    return pl_fail(pl_tls_err, PURLIN_ERR_NO_MEMORY, "bootstrap: out of memory");
  purlin_status_t st = pl_bs_connect(b, &w, pl_now_ms() + timeout_ms);
  if (st != PURLIN_OK) {
    snprintf(pl_tls_err, sizeof pl_tls_err, "%s", b->err);
    pl_bootstrap_destroy(b);
    return st;
  }
  PL_INFO("bootstrap: rank %d of %d connected to all peers", rank, nranks);
  *bs = b;
  return PURLIN_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Collectives: every rank sends its part to every other and receives theirs, all at once and
 * nonblocking, so a payload larger than the socket buffers cannot deadlock two ranks that both
 * send first. Each message starts with a header so that ranks that disagree find out.
 * ------------------------------------------------------------------------------------------- */

static const char *pl_op_name(uint32_t op) {
  switch (op) {
  case PL_OP_ALLGATHER:
    return "allgather";
  case PL_OP_BARRIER:
    return "barrier";
  case PL_OP_FD:
    return "allgather_fd";
  default:
    return "an unknown call";
  }
}

static purlin_status_t pl_peer_gone(pl_bootstrap_t *b, const pl_call_t *c, int j, int e) {
  if (e == 0 || e == EPIPE || e == ECONNRESET)
    return pl_fail(b->err, PURLIN_ERR_REMOTE,
                   "bootstrap %s: rank %d closed its bootstrap connection (died?)", c->name, j);
  return pl_fail(b->err, PURLIN_ERR_SYSTEM, "bootstrap %s: connection to rank %d: %s", c->name, j,
                 strerror(e));
}

/* Rank j's abort notice: its header is in b->xf[j].rh, its text follows. */
static purlin_status_t pl_abort_read(pl_bootstrap_t *b, const pl_call_t *c, int j) {
  char text[PL_ERR_MAX];
  size_t len = b->xf[j].rh.bytes < sizeof text ? (size_t)b->xf[j].rh.bytes : sizeof text - 1;
  int e = pl_recv_all(b->fd[j], text, len, pl_now_ms() + PL_ABORT_MS);
  text[e ? 0 : len] = '\0';
  return pl_fail(b->err, PURLIN_ERR_REMOTE, "bootstrap %s: rank %d gave up: %s", c->name, j,
                 text[0] ? text : "(no reason came)");
}

static purlin_status_t pl_hdr_check(pl_bootstrap_t *b, const pl_call_t *c, int j) {
  const pl_msghdr_t *h = &b->xf[j].rh;
  if (h->magic != PL_BS_MAGIC)
    return pl_fail(b->err, PURLIN_ERR_INTERNAL, "bootstrap %s: garbage from rank %d", c->name, j);
  if (h->op == PL_OP_ABORT)
    return pl_abort_read(b, c, j);
  if (h->op != c->op)
    return pl_fail(b->err, PURLIN_ERR_MISMATCH,
                   "bootstrap: rank %d called %s while rank %d called %s", j, pl_op_name(h->op),
                   b->rank, c->name);
  if (h->bytes != c->bytes)
    return pl_fail(b->err, PURLIN_ERR_MISMATCH,
                   "bootstrap %s: rank %d contributes %llu bytes, rank %d %zu bytes", c->name, j,
                   (unsigned long long)h->bytes, b->rank, c->bytes);
  if (h->seq != b->seq)
    return pl_fail(b->err, PURLIN_ERR_MISMATCH,
                   "bootstrap %s: rank %d is at its call #%llu, rank %d at #%llu", c->name, j,
                   (unsigned long long)h->seq, b->rank, (unsigned long long)b->seq);
  if (c->op == PL_OP_FD && b->xf[j].rfd < 0)
    return pl_fail(b->err, PURLIN_ERR_SYSTEM,
                   "bootstrap allgather_fd: no descriptor came with rank %d's message (out of "
                   "descriptors?)",
                   j);
  return PURLIN_OK;
}

/* Send what the socket takes of this rank's message to j: 0, or the errno that ended it. */
static int pl_xfer_push(pl_bootstrap_t *b, const pl_call_t *c, int j) {
  pl_xfer_t *x = &b->xf[j];
  const size_t hs = sizeof c->sh;
  while (x->sent < hs + c->bytes) {
    struct iovec iov[2];
    int n = 0;
    if (x->sent < hs)
      iov[n++] = (struct iovec){(char *)&c->sh + x->sent, hs - x->sent};
    size_t off = x->sent < hs ? 0 : x->sent - hs;
    if (c->bytes > off)
      iov[n++] = (struct iovec){(char *)c->mine + off, c->bytes - off};
    union {
      char buf[CMSG_SPACE(sizeof(int))];
      struct cmsghdr align;
    } u;
    struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)n};
    if (c->op == PL_OP_FD && x->sent == 0) { /* the fd rides on the header's first byte */
      memset(&u, 0, sizeof u);
      m.msg_control = u.buf;
      m.msg_controllen = sizeof u.buf;
      struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
      cm->cmsg_level = SOL_SOCKET;
      cm->cmsg_type = SCM_RIGHTS;
      cm->cmsg_len = CMSG_LEN(sizeof(int));
      memcpy(CMSG_DATA(cm), &c->myfd, sizeof(int));
    }
    ssize_t s = sendmsg(b->fd[j], &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (s > 0) {
      x->sent += (size_t)s;
      continue;
    }
    if (s < 0 && errno == EINTR)
      continue;
    if (s < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return 0;
    return s < 0 ? errno : EPIPE;
  }
  return 0;
}

static purlin_status_t pl_xfer_send(pl_bootstrap_t *b, const pl_call_t *c, int j) {
  int e = pl_xfer_push(b, c, j);
  return e ? pl_peer_gone(b, c, j, e) : PURLIN_OK;
}

/* Keep the first descriptor that arrives with rank j's header; close any other. */
static void pl_take_fds(pl_xfer_t *x, struct msghdr *m) {
  for (struct cmsghdr *cm = CMSG_FIRSTHDR(m); cm; cm = CMSG_NXTHDR(m, cm)) {
    if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
      continue;
    size_t n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t k = 0; k < n; k++) {
      int fd;
      memcpy(&fd, CMSG_DATA(cm) + k * sizeof(int), sizeof fd);
      if (x->rfd < 0)
        x->rfd = fd;
      else
        close(fd);
    }
  }
}

static purlin_status_t pl_xfer_recv_hdr(pl_bootstrap_t *b, const pl_call_t *c, int j) {
  pl_xfer_t *x = &b->xf[j];
  while (x->hgot < sizeof x->rh) {
    union {
      char buf[CMSG_SPACE(4 * sizeof(int))];
      struct cmsghdr align;
    } u;
    struct iovec iov = {(char *)&x->rh + x->hgot, sizeof x->rh - x->hgot};
    struct msghdr m = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
    ssize_t s = recvmsg(b->fd[j], &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (s > 0) {
      pl_take_fds(x, &m);
      x->hgot += (size_t)s;
      continue;
    }
    if (s < 0 && errno == EINTR)
      continue;
    if (s < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return PURLIN_OK;
    return pl_peer_gone(b, c, j, s < 0 ? errno : 0);
  }
  if (x->rfd >= 0 && c->op != PL_OP_FD) { /* nobody should send one: do not keep it open */
    pl_close_fd(&x->rfd);
  }
  return pl_hdr_check(b, c, j);
}

static purlin_status_t pl_xfer_recv(pl_bootstrap_t *b, const pl_call_t *c, int j) {
  pl_xfer_t *x = &b->xf[j];
  if (x->hgot < sizeof x->rh) {
    purlin_status_t st = pl_xfer_recv_hdr(b, c, j);
    if (st != PURLIN_OK || x->hgot < sizeof x->rh)
      return st;
  }
  char *dst = c->all + (size_t)j * c->bytes;
  while (x->got < c->bytes) {
    ssize_t s = recv(b->fd[j], dst + x->got, c->bytes - x->got, MSG_DONTWAIT);
    if (s > 0) {
      x->got += (size_t)s;
      continue;
    }
    if (s < 0 && errno == EINTR)
      continue;
    if (s < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return PURLIN_OK;
    return pl_peer_gone(b, c, j, s < 0 ? errno : 0);
  }
  return PURLIN_OK;
}

static int pl_xfer_recv_done(const pl_xfer_t *x, const pl_call_t *c) {
  return x->hgot == sizeof x->rh && x->got == c->bytes;
}

static purlin_status_t pl_exchange_timeout(pl_bootstrap_t *b, const pl_call_t *c) {
  int n = 0, sending = 0;
  for (int j = 0; j < b->nranks; j++) {
    if (j == b->rank)
      continue;
    if (!pl_xfer_recv_done(&b->xf[j], c))
      b->pidx[n++] = j;
  }
  if (n == 0) { /* everything arrived, but some rank does not read what this one sends */
    sending = 1;
    for (int j = 0; j < b->nranks; j++)
      if (j != b->rank && b->xf[j].sent < sizeof c->sh + c->bytes)
        b->pidx[n++] = j;
  }
  char who[256];
  pl_fmt_ranks(who, sizeof who, b->pidx, n);
  return pl_fail(b->err, PURLIN_ERR_TIMEOUT,
                 "bootstrap %s: %s did not %s within %d ms (seen by rank %d)", c->name, who,
                 sending ? "read this rank's data" : "take part", b->timeout_ms, b->rank);
}

/* Rank j's whole message is here; is there more? An abort notice ends the call. Anything else
 * (its hang-up after its last call, its next call's header) is for later: stop watching it. */
static purlin_status_t pl_xfer_peek(pl_bootstrap_t *b, const pl_call_t *c, int j) {
  pl_xfer_t *x = &b->xf[j];
  ssize_t s = recv(b->fd[j], &x->rh, sizeof x->rh, MSG_PEEK | MSG_DONTWAIT);
  if (s < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
    return PURLIN_OK;
  x->quiet = 1;
  if (s != (ssize_t)sizeof x->rh || x->rh.magic != PL_BS_MAGIC || x->rh.op != PL_OP_ABORT)
    return PURLIN_OK;
  if (recv(b->fd[j], &x->rh, sizeof x->rh, MSG_DONTWAIT) != (ssize_t)sizeof x->rh)
    return pl_peer_gone(b, c, j, errno);
  return pl_abort_read(b, c, j);
}

/* Fill b->pfd / b->pidx with the peers to watch; the number of them that still have something to
 * send or to receive goes to *work (the others are only watched for an abort notice). */
static int pl_exchange_pending(pl_bootstrap_t *b, const pl_call_t *c, int *work) {
  int n = 0;
  *work = 0;
  for (int j = 0; j < b->nranks; j++) {
    if (j == b->rank)
      continue;
    short ev = 0;
    int done = pl_xfer_recv_done(&b->xf[j], c);
    if (b->xf[j].sent < sizeof c->sh + c->bytes)
      ev |= POLLOUT;
    if (!done || !b->xf[j].quiet)
      ev |= POLLIN;
    if (ev & POLLOUT || !done)
      ++*work;
    if (!ev)
      continue;
    b->pfd[n] = (struct pollfd){b->fd[j], ev, 0};
    b->pidx[n++] = j;
  }
  return n;
}

static purlin_status_t pl_exchange_one(pl_bootstrap_t *b, const pl_call_t *c, int k) {
  short re = b->pfd[k].revents;
  int j = b->pidx[k];
  purlin_status_t st = PURLIN_OK;
  if (re & (POLLOUT | POLLERR | POLLHUP))
    st = pl_xfer_send(b, c, j);
  if (st != PURLIN_OK || !(re & (POLLIN | POLLERR | POLLHUP)))
    return st;
  return pl_xfer_recv_done(&b->xf[j], c) ? pl_xfer_peek(b, c, j) : pl_xfer_recv(b, c, j);
}

static purlin_status_t pl_exchange_run(pl_bootstrap_t *b, const pl_call_t *c, int64_t deadline) {
  int n, work;
  while ((n = pl_exchange_pending(b, c, &work)) > 0 && work > 0) {
    if (pl_now_ms() >= deadline)
      return pl_exchange_timeout(b, c);
    if (poll(b->pfd, (nfds_t)n, pl_left_ms(deadline)) < 0 && errno != EINTR)
      return pl_fail(b->err, PURLIN_ERR_SYSTEM, "bootstrap %s: poll: %s", c->name, strerror(errno));
    for (int k = 0; k < n; k++) {
      purlin_status_t st = pl_exchange_one(b, c, k);
      if (st != PURLIN_OK)
        return st;
    }
  }
  return PURLIN_OK;
}

/* Tell every peer why this rank gives up, after the rest of the message it was sending them (a
 * notice is only read as one on a message boundary). Best effort, and brief. */
static void pl_abort_notify(pl_bootstrap_t *b, const pl_call_t *c) {
  char msg[sizeof(pl_msghdr_t) + PL_ERR_MAX];
  size_t tlen = strnlen(b->err, PL_ERR_MAX - 1), total = sizeof c->sh + c->bytes;
  pl_msghdr_t h = {PL_BS_MAGIC, PL_OP_ABORT, b->seq, tlen};
  memcpy(msg, &h, sizeof h);
  memcpy(msg + sizeof h, b->err, tlen);
  size_t len = sizeof h + tlen;
  int64_t deadline = pl_now_ms() + PL_ABORT_MS;
  for (;;) {
    int n = 0;
    for (int j = 0; j < b->nranks; j++) {
      if (j == b->rank || b->xf[j].asent >= len)
        continue;
      b->pfd[n] = (struct pollfd){b->fd[j], POLLOUT, 0};
      b->pidx[n++] = j;
    }
    if (n == 0 || pl_now_ms() >= deadline)
      return;
    if (poll(b->pfd, (nfds_t)n, pl_left_ms(deadline)) < 0 && errno != EINTR)
      return;
    for (int k = 0; k < n; k++) {
      pl_xfer_t *x = &b->xf[b->pidx[k]];
      int fd = b->pfd[k].fd;
      if (!b->pfd[k].revents)
        continue;
      int e = x->sent < total ? pl_xfer_push(b, c, b->pidx[k]) : 0;
      ssize_t s = 0;
      if (!e && x->sent >= total)
        s = send(fd, msg + x->asent, len - x->asent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (s > 0)
        x->asent += (size_t)s;
      if (e || (s < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
        x->asent = len; /* that peer is gone: nothing to tell it */
    }
  }
}

static purlin_status_t pl_exchange(pl_bootstrap_t *b, pl_call_t *c) {
  b->seq++;
  c->sh = (pl_msghdr_t){PL_BS_MAGIC, c->op, b->seq, c->bytes};
  for (int j = 0; j < b->nranks; j++)
    b->xf[j] = (pl_xfer_t){.rfd = -1};
  purlin_status_t st = pl_exchange_run(b, c, pl_now_ms() + b->timeout_ms);
  if (st != PURLIN_OK) { /* the streams are out of step now: every later call must fail */
    b->broken = st;
    snprintf(b->first_err, sizeof b->first_err, "%s", b->err);
    for (int j = 0; j < b->nranks; j++)
      pl_close_fd(&b->xf[j].rfd);
    pl_abort_notify(b, c);
  }
  return st;
}

static purlin_status_t pl_usable(pl_bootstrap_t *b, const char *call) {
  if (!b->broken)
    return PURLIN_OK;
  return pl_fail(b->err, b->broken,
                 "bootstrap %s: unusable after an earlier error (destroy it): %s", call,
                 b->first_err);
}

purlin_status_t pl_bootstrap_allgather(pl_bootstrap_t *bs, const void *mine, void *all,
                                       size_t bytes) {
  if (!bs)
    return pl_fail(pl_tls_err, PURLIN_ERR_INVALID_ARGUMENT, "bootstrap allgather: bs is NULL");
  if (bytes && (!mine || !all))
    return pl_fail(bs->err, PURLIN_ERR_INVALID_ARGUMENT,
                   "bootstrap allgather: %s is NULL with %zu bytes", mine ? "all" : "mine", bytes);
  if (bytes > SIZE_MAX / (size_t)bs->nranks)
    return pl_fail(bs->err, PURLIN_ERR_INVALID_ARGUMENT,
                   "bootstrap allgather: %zu bytes times %d ranks overflows", bytes, bs->nranks);
  purlin_status_t st = pl_usable(bs, "allgather");
  if (st)
    return st;
  if (bytes)
    memmove((char *)all + (size_t)bs->rank * bytes, mine, bytes);
  pl_call_t c = {.op = PL_OP_ALLGATHER,
                 .name = "allgather",
                 .mine = mine,
                 .all = all,
                 .bytes = bytes,
                 .myfd = -1};
  return pl_exchange(bs, &c);
}

purlin_status_t pl_bootstrap_barrier(pl_bootstrap_t *bs) {
  if (!bs)
    return pl_fail(pl_tls_err, PURLIN_ERR_INVALID_ARGUMENT, "bootstrap barrier: bs is NULL");
  purlin_status_t st = pl_usable(bs, "barrier");
  if (st)
    return st;
  pl_call_t c = {.op = PL_OP_BARRIER, .name = "barrier", .myfd = -1};
  return pl_exchange(bs, &c);
}

purlin_status_t pl_bootstrap_allgather_fd(pl_bootstrap_t *bs, int myfd, int *fds) {
  if (!bs)
    return pl_fail(pl_tls_err, PURLIN_ERR_INVALID_ARGUMENT, "bootstrap allgather_fd: bs is NULL");
  if (!fds || myfd < 0 || fcntl(myfd, F_GETFD) < 0)
    return pl_fail(bs->err, PURLIN_ERR_INVALID_ARGUMENT, "bootstrap allgather_fd: %s (myfd %d)",
                   fds ? "myfd is not open" : "fds is NULL", myfd);
  purlin_status_t st = pl_usable(bs, "allgather_fd");
  if (st)
    return st;
  int own = fcntl(myfd, F_DUPFD_CLOEXEC, 0);
  if (own < 0)
    return pl_fail(bs->err, PURLIN_ERR_SYSTEM, "bootstrap allgather_fd: dup: %s", strerror(errno));
  pl_call_t c = {.op = PL_OP_FD, .name = "allgather_fd", .myfd = myfd};
  st = pl_exchange(bs, &c);
  if (st != PURLIN_OK) {
    close(own);
    return st;
  }
  for (int j = 0; j < bs->nranks; j++)
    fds[j] = j == bs->rank ? own : bs->xf[j].rfd;
  return PURLIN_OK;
}

void pl_bootstrap_destroy(pl_bootstrap_t *bs) {
  if (!bs)
    return;
  for (int j = 0; bs->fd && j < bs->nranks; j++)
    pl_close_fd(&bs->fd[j]);
  free(bs->fd);
  free(bs->pid);
  free(bs->xf);
  free(bs->pfd);
  free(bs->pidx);
  free(bs);
}

const char *pl_bootstrap_last_error(const pl_bootstrap_t *bs) {
  return bs ? bs->err : pl_tls_err;
}

const char *pl_bootstrap_self_addr(const pl_bootstrap_t *bs) {
  return bs ? bs->addr : "";
}

int pl_bootstrap_id_addr(const purlin_unique_id_t *id, char *addr, size_t len) {
  pl_id_t w;
  if (!id || !addr || pl_id_decode(id, &w))
    return -1;
  int n = snprintf(addr, len, "%s", w.addr);
  return n >= 0 && (size_t)n < len ? 0 : -1;
}
