/* host_atom.h -- the host atom: SNAC's datapath on CPUs. Ranks are processes; memory is memfd
 * shared memory; a worker group is a thread. Waits spin briefly, then sleep on the target rank's
 * doorbell futex, so that many ranks on few cores do not steal each other's time. */
#ifndef PL_HOST_ATOM_H
#define PL_HOST_ATOM_H

#include <stdint.h>
#include <string.h>

#include "dtype.h"
#include "layout.h"
#include "plan.h"

struct purlin_comm;
struct pl_snac_ctx_;

typedef struct {
  struct purlin_comm *comm;
  const void *x;          /* the pl_snac_t of the call */
  uint64_t epoch;
  char *scratch;          /* world * PL_SNAC_SEG bytes */
  int lane;               /* doorbell this group sleeps on */
  int ring_all;           /* main lane 0: ring every lane's doorbell (all lanes await its header) */
  int err_peer;           /* set by a failed wait */
  const char *err_what;
  const void *srcs[PL_MAX_WORLD]; /* a reduction's sources (pl_atom_srcs) */
} pl_atom_t;

/* Out of line (host_exec.c): the slow path of a wait, with deadline, liveness and abort checks. */
int pl_host_await_slow(pl_atom_t *a, const uint64_t *flag, uint64_t value, int peer,
                       const char *what);
void pl_host_ring(pl_atom_t *a, int peer);
void *pl_host_sym(pl_atom_t *a, int peer, uint64_t id, uint64_t off, uint64_t bytes);

static inline int pl_atom_await(pl_atom_t *a, const uint64_t *flag, uint64_t value, int peer,
                                const char *what) {
  if (pl_flag_ready(__atomic_load_n(flag, __ATOMIC_ACQUIRE), value)) return 0;
  return pl_host_await_slow(a, flag, value, peer, what);
}
static inline void pl_atom_publish(pl_atom_t *a, uint64_t *flag, uint64_t value, int peer) {
  (void)a;
  (void)peer;
  __atomic_store_n(flag, value, __ATOMIC_RELEASE);
}
static inline void pl_atom_ring(pl_atom_t *a, int peer) { pl_host_ring(a, peer); }
static inline void pl_atom_copy(pl_atom_t *a, void *dst, const void *src, uint64_t bytes) {
  (void)a;
  if (bytes && dst != src) memmove(dst, src, bytes);
}
static inline void pl_atom_reduce(pl_atom_t *a, void *dst, const void *const *srcs, int n,
                                  uint64_t count, int dtype, int op, int divisor) {
  (void)a;
  pl_reduce_elems(dst, srcs, n, count, dtype, op, divisor);
}
/* Data first, then the flag with release: a reader that sees the flag sees the data. */
static inline void pl_atom_pkt_put(pl_atom_t *a, void *dstv, const void *src, uint64_t bytes,
                                   uint64_t flag) {
  uint64_t *dst = (uint64_t *)dstv;
  (void)a;
  for (uint64_t i = 0; i * 8 < bytes; i++) {
    uint64_t d = 0, n = bytes - i * 8 < 8 ? bytes - i * 8 : 8;
    memcpy(&d, (const char *)src + i * 8, n);
    dst[2 * i] = d;
    __atomic_store_n(&dst[2 * i + 1], flag, __ATOMIC_RELEASE);
  }
}
static inline int pl_atom_pkt_get(pl_atom_t *a, void *dst, const void *srcv, uint64_t bytes,
                                  uint64_t flag, int peer, const char *what) {
  const uint64_t *src = (const uint64_t *)srcv;
  for (uint64_t i = 0; i * 8 < bytes; i++) {
    int st = pl_atom_await(a, &src[2 * i + 1], flag, peer, what);
    if (st) return st;
    uint64_t n = bytes - i * 8 < 8 ? bytes - i * 8 : 8;
    memcpy((char *)dst + i * 8, &src[2 * i], n);
  }
  return 0;
}
/* One host thread per group: nothing to spread, nothing to wait for at the end. */
static inline int pl_atom_pkt_get_async(pl_atom_t *a, void *dst, const void *src, uint64_t bytes,
                                        uint64_t flag, int peer, const char *what, uint64_t base) {
  (void)base;
  return pl_atom_pkt_get(a, dst, src, bytes, flag, peer, what);
}
static inline int pl_atom_pkt_sync(pl_atom_t *a) {
  (void)a;
  return 0;
}
static inline const void **pl_atom_srcs(pl_atom_t *a) { return a->srcs; }
static inline char *pl_atom_scratch(pl_atom_t *a, int i) {
  return a->scratch + (size_t)i * 4096;
}
static inline void *pl_atom_sym(pl_atom_t *a, int peer, uint64_t id, uint64_t off,
                                uint64_t bytes) {
  return pl_host_sym(a, peer, id, off, bytes);
}
/* The group is one thread: nothing to wait for. */
static inline void pl_atom_sync(pl_atom_t *a) { (void)a; }
static inline int pl_atom_is_leader(pl_atom_t *a) {
  (void)a;
  return 1;
}

#endif
