/* api.c -- the collectives' entry points: check every argument (a clear error, nothing launched),
 * build the call (layout), hand it to the datapath. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "comm.h"
#include "cuda/cuda_dp.h"
#include "dtype.h"
#include "log.h"

const char *pl_coll_name(int coll) {
  static const char *const names[PL_COLL_COUNT] = {
      "all_reduce", "all_gather", "reduce_scatter", "all_to_all",
      "all_gather_v", "reduce_scatter_v", "all_to_all_v"};
  return coll >= 0 && coll < PL_COLL_COUNT ? names[coll] : "?";
}

/* Arguments of one call, as the checks see them. */
typedef struct {
  int coll;
  const void *send;
  void *recv;
  size_t count;
  purlin_dtype_t dtype;
  purlin_op_t op;
  const size_t *scounts, *sdispls, *rcounts, *rdispls;
  void *stream;
  const purlin_opts_t *opts;
} pl_args_t;

typedef struct {
  pl_call_t call;
  uint64_t v[4][PL_MAX_WORLD]; /* scounts, sdispls, rcounts, rdispls */
  uint64_t send_bytes, recv_bytes; /* extent of the buffers touched */
  uint64_t send_lo, recv_lo;       /* first byte touched */
  int in_place;
} pl_checked_t;

#define PL_BAD(comm, ...) pl_comm_fail((comm), PURLIN_ERR_INVALID_ARGUMENT, __VA_ARGS__)

static int pl_mul_ok(uint64_t a, uint64_t b, uint64_t *out) {
  return !__builtin_mul_overflow(a, b, out);
}

static purlin_status_t pl_check_common(purlin_comm_t comm, const pl_args_t *a, pl_checked_t *k) {
  const char *fn = pl_coll_name(a->coll);
  if (comm->aborted)
    return pl_comm_fail(comm, PURLIN_ERR_INVALID_USAGE,
                        "%s: the communicator was aborted by an earlier error; destroy it", fn);
  if (a->stream && comm->datapath == PURLIN_DATAPATH_HOST)
    return PL_BAD(comm, "%s: stream must be NULL on the host datapath (got %p)", fn, a->stream);
  if (a->dtype < 0 || a->dtype >= PURLIN_DTYPE_COUNT)
    return PL_BAD(comm, "%s: dtype %d is not a purlin_dtype_t", fn, (int)a->dtype);
  if (pl_coll_is_reduce(a->coll) && (a->op < 0 || a->op >= PURLIN_OP_COUNT))
    return PL_BAD(comm, "%s: op %d is not a purlin_op_t", fn, (int)a->op);
  purlin_mode_t mode = PURLIN_NONDETERMINISTIC;
  if (a->opts) {
    if (a->opts->size != sizeof(purlin_opts_t) || a->opts->version != PURLIN_OPTS_VERSION)
      return PL_BAD(comm, "%s: opts size %zu / version %u do not match (%zu / %u): use "
                          "PURLIN_OPTS_INIT", fn, a->opts->size, a->opts->version,
                    sizeof(purlin_opts_t), PURLIN_OPTS_VERSION);
    if (a->opts->mode != PURLIN_NONDETERMINISTIC && a->opts->mode != PURLIN_DETERMINISTIC)
      return PL_BAD(comm, "%s: opts->mode %d is not a purlin_mode_t", fn, (int)a->opts->mode);
    mode = a->opts->mode;
  }
  memset(&k->call, 0, sizeof k->call);
  k->call.coll = a->coll;
  k->call.dtype = a->dtype;
  k->call.op = pl_coll_is_reduce(a->coll) ? (int)a->op : 0;
  k->call.mode = mode;
  k->call.world = comm->world;
  k->call.rank = comm->rank;
  k->call.esize = pl_dtype_bytes(a->dtype);
  k->call.count = a->count;
  return PURLIN_OK;
}

/* Fixed-size collectives: extents of send and recv, in place forms. */
static purlin_status_t pl_check_fixed(purlin_comm_t comm, const pl_args_t *a, pl_checked_t *k) {
  const char *fn = pl_coll_name(a->coll);
  uint64_t es = k->call.esize, w = (uint64_t)comm->world, one, all;
  if (!pl_mul_ok(a->count, es, &one) || !pl_mul_ok(one, w, &all))
    return PL_BAD(comm, "%s: count %zu overflows (x %llu bytes x %llu ranks)", fn, a->count,
                  (unsigned long long)es, (unsigned long long)w);
  k->send_bytes = a->coll == PL_COLL_ALL_REDUCE || a->coll == PL_COLL_ALL_GATHER ? one : all;
  k->recv_bytes = a->coll == PL_COLL_ALL_REDUCE || a->coll == PL_COLL_REDUCE_SCATTER ? one : all;
  const char *s = a->send, *r = a->recv;
  if (a->coll == PL_COLL_ALL_GATHER) k->in_place = s == r + comm->rank * one;
  else if (a->coll == PL_COLL_REDUCE_SCATTER) k->in_place = r == s + comm->rank * one;
  else k->in_place = s == r;
  return PURLIN_OK;
}

static purlin_status_t pl_copy_counts(purlin_comm_t comm, const char *fn, const char *name,
                                      const size_t *src, uint64_t *dst) {
  if (!src) return PL_BAD(comm, "%s: %s is NULL", fn, name);
  for (int i = 0; i < comm->world; i++) dst[i] = src[i];
  return PURLIN_OK;
}

/* Displacements (or prefix sums), and the extent they cover; blocks must not overlap. */
static purlin_status_t pl_copy_displs(purlin_comm_t comm, const char *fn, const char *name,
                                      const size_t *src, const uint64_t *counts, uint64_t es,
                                      uint64_t *dst, uint64_t *extent) {
  uint64_t sum = 0, end, bytes;
  *extent = 0;
  for (int i = 0; i < comm->world; i++) {
    dst[i] = src ? src[i] : sum;
    if (__builtin_add_overflow(dst[i], counts[i], &end) || !pl_mul_ok(end, es, &bytes) ||
        __builtin_add_overflow(sum, counts[i], &sum))
      return PL_BAD(comm, "%s: %s[%d] = %llu with count %llu overflows", fn, name, i,
                    (unsigned long long)dst[i], (unsigned long long)counts[i]);
    if (counts[i] && bytes > *extent) *extent = bytes;
  }
  return PURLIN_OK;
}

static purlin_status_t pl_check_disjoint(purlin_comm_t comm, const char *fn, const char *name,
                                         const uint64_t *counts, const uint64_t *displs) {
  for (int i = 0; i < comm->world; i++)
    for (int j = i + 1; j < comm->world; j++)
      if (counts[i] && counts[j] && displs[i] < displs[j] + counts[j] &&
          displs[j] < displs[i] + counts[i])
        return PL_BAD(comm, "%s: %s blocks %d and %d overlap", fn, name, i, j);
  return PURLIN_OK;
}

/* opts.counts_on_device on the CUDA datapath: the counts and displacements are device pointers,
 * read by the kernel at its start (src/vcounts.h derives there what pl_check_v derives here). The
 * host checks what it can without reading them: present, device-accessible. The extents of send
 * and recv are unknown here; the caller guarantees the buffers hold them (docs/api.md). */
static purlin_status_t pl_check_v_dev(purlin_comm_t comm, const pl_args_t *a, pl_checked_t *k) {
  const char *fn = pl_coll_name(a->coll);
  const size_t *p[4] = {a->scounts, a->sdispls, a->rcounts, a->rdispls};
  static const char *const names[4] = {"sendcounts", "sdispls", "recvcounts", "rdispls"};
  purlin_status_t st;
  _Static_assert(sizeof(size_t) == sizeof(uint64_t), "counts are read as 64-bit words");
  if (!a->rcounts) return PL_BAD(comm, "%s: recvcounts is NULL", fn);
  if (a->coll == PL_COLL_ALL_TO_ALL_V && !a->scounts)
    return PL_BAD(comm, "%s: sendcounts is NULL", fn);
  for (int i = 0; i < 4; i++)
    if (p[i] && (st = pl_cuda_check_counts(comm, p[i], fn, names[i]))) return st;
  k->call.counts_dev = 1;
  k->call.scounts = (const uint64_t *)a->scounts;
  k->call.sdispls = (const uint64_t *)a->sdispls;
  k->call.rcounts = (const uint64_t *)a->rcounts;
  k->call.rdispls = (const uint64_t *)a->rdispls;
  /* AGV's sendcount is the room of send (>= recvcounts[rank], checked on the device) */
  k->send_bytes = 0;
  if (a->coll == PL_COLL_ALL_GATHER_V && !pl_mul_ok(a->count, k->call.esize, &k->send_bytes))
    return PL_BAD(comm, "%s: sendcount %zu overflows", fn, a->count);
  k->recv_bytes = 0;
  k->in_place = 0; /* decided on the device */
  return PURLIN_OK;
}

static purlin_status_t pl_check_v(purlin_comm_t comm, const pl_args_t *a, pl_checked_t *k) {
  const char *fn = pl_coll_name(a->coll);
  uint64_t es = k->call.esize, ext;
  purlin_status_t st;
  int w = comm->world, me = comm->rank;
  /* on the host datapath, counts "on the device" are host memory readable now: as below */
  if (a->opts && a->opts->counts_on_device && comm->datapath == PURLIN_DATAPATH_CUDA)
    return pl_check_v_dev(comm, a, k);
  if ((st = pl_copy_counts(comm, fn, "recvcounts", a->rcounts, k->v[2]))) return st;
  if (a->coll == PL_COLL_ALL_TO_ALL_V &&
      (st = pl_copy_counts(comm, fn, "sendcounts", a->scounts, k->v[0])))
    return st;
  if (a->coll == PL_COLL_ALL_GATHER_V) {
    if (a->count != k->v[2][me])
      return PL_BAD(comm, "%s: sendcount %zu differs from recvcounts[%d] = %llu", fn, a->count,
                    me, (unsigned long long)k->v[2][me]);
    if ((st = pl_copy_displs(comm, fn, "rdispls", a->rdispls, k->v[2], es, k->v[3], &ext)))
      return st;
    if ((st = pl_check_disjoint(comm, fn, "recv", k->v[2], k->v[3]))) return st;
    k->recv_bytes = ext;
    k->send_bytes = a->count * es;
    k->in_place = (const char *)a->send == (const char *)a->recv + k->v[3][me] * es;
  } else if (a->coll == PL_COLL_REDUCE_SCATTER_V) {
    if ((st = pl_copy_displs(comm, fn, "sdispls", a->sdispls, k->v[2], es, k->v[1], &ext)))
      return st;
    if ((st = pl_check_disjoint(comm, fn, "send", k->v[2], k->v[1]))) return st;
    k->send_bytes = ext;
    k->recv_bytes = k->v[2][me] * es;
    k->in_place = (const char *)a->recv == (const char *)a->send + k->v[1][me] * es;
  } else {
    uint64_t sext;
    if ((st = pl_copy_displs(comm, fn, "sdispls", a->sdispls, k->v[0], es, k->v[1], &sext)) ||
        (st = pl_copy_displs(comm, fn, "rdispls", a->rdispls, k->v[2], es, k->v[3], &ext)))
      return st;
    if ((st = pl_check_disjoint(comm, fn, "recv", k->v[2], k->v[3]))) return st;
    k->send_bytes = sext;
    k->recv_bytes = ext;
    k->in_place = a->send == a->recv && (sext || ext); /* nothing to move: nothing to overlap */
    if (k->in_place)
      for (int i = 0; i < w; i++)
        if (k->v[0][i] != k->v[2][i] || k->v[1][i] != k->v[3][i])
          return PL_BAD(comm, "%s: in place (send == recv) needs sendcounts == recvcounts and "
                              "sdispls == rdispls; they differ at [%d]", fn, i);
  }
  k->call.scounts = k->v[0];
  k->call.sdispls = k->v[1];
  k->call.rcounts = k->v[2];
  k->call.rdispls = k->v[3];
  return PURLIN_OK;
}

static purlin_status_t pl_check_buffers(purlin_comm_t comm, const pl_args_t *a, pl_checked_t *k) {
  const char *fn = pl_coll_name(a->coll);
  uint64_t es = k->call.esize;
  if (k->send_bytes && !a->send) return PL_BAD(comm, "%s: send is NULL (%llu bytes to read)", fn,
                                               (unsigned long long)k->send_bytes);
  if (k->recv_bytes && !a->recv) return PL_BAD(comm, "%s: recv is NULL (%llu bytes to write)", fn,
                                               (unsigned long long)k->recv_bytes);
  if ((uintptr_t)a->send % es || (uintptr_t)a->recv % es)
    return PL_BAD(comm, "%s: %s %p is not aligned to its %llu-byte elements", fn,
                  (uintptr_t)a->send % es ? "send" : "recv",
                  (uintptr_t)a->send % es ? a->send : (const void *)a->recv,
                  (unsigned long long)es);
  uintptr_t s0 = (uintptr_t)a->send, r0 = (uintptr_t)a->recv;
  if (!k->in_place && k->send_bytes && k->recv_bytes && s0 < r0 + k->recv_bytes &&
      r0 < s0 + k->send_bytes)
    return PL_BAD(comm, "%s: send [%p, +%llu) and recv [%p, +%llu) overlap and are not the "
                        "in-place form", fn, a->send, (unsigned long long)k->send_bytes, a->recv,
                  (unsigned long long)k->recv_bytes);
  return PURLIN_OK;
}

static purlin_status_t pl_collective(purlin_comm_t comm, const pl_args_t *a) {
  pl_checked_t k;
  purlin_status_t st;
  if (!comm) {
    pl_set_global_error("%s: comm is NULL", pl_coll_name(a->coll));
    return PURLIN_ERR_INVALID_ARGUMENT;
  }
  memset(&k, 0, sizeof k);
  if ((st = pl_check_common(comm, a, &k))) return st;
  st = pl_coll_is_v(a->coll) ? pl_check_v(comm, a, &k) : pl_check_fixed(comm, a, &k);
  if (st || (st = pl_check_buffers(comm, a, &k))) return st;
  PL_TRACE("%s #%llu count %zu dtype %s op %s mode %d%s", pl_coll_name(a->coll),
           (unsigned long long)comm->epoch, a->count, purlin_dtype_name(a->dtype),
           purlin_op_name(a->op), (int)k.call.mode, k.in_place ? " in place" : "");
  if (comm->datapath == PURLIN_DATAPATH_CUDA)
    return pl_cuda_run(comm, &k.call, a->send, a->recv, k.in_place, a->stream);
  return pl_host_run(comm, &k.call, a->send, a->recv, k.in_place);
}

purlin_status_t purlin_all_reduce(const void *send, void *recv, size_t count, purlin_dtype_t dtype,
                                  purlin_op_t op, purlin_comm_t comm, void *stream,
                                  const purlin_opts_t *opts) {
  pl_args_t a = {PL_COLL_ALL_REDUCE, send, recv, count, dtype, op, NULL, NULL, NULL, NULL,
                 stream, opts};
  return pl_collective(comm, &a);
}

purlin_status_t purlin_all_gather(const void *send, void *recv, size_t sendcount,
                                  purlin_dtype_t dtype, purlin_comm_t comm, void *stream,
                                  const purlin_opts_t *opts) {
  pl_args_t a = {PL_COLL_ALL_GATHER, send, recv, sendcount, dtype, PURLIN_SUM, NULL, NULL, NULL,
                 NULL, stream, opts};
  return pl_collective(comm, &a);
}

purlin_status_t purlin_reduce_scatter(const void *send, void *recv, size_t recvcount,
                                      purlin_dtype_t dtype, purlin_op_t op, purlin_comm_t comm,
                                      void *stream, const purlin_opts_t *opts) {
  pl_args_t a = {PL_COLL_REDUCE_SCATTER, send, recv, recvcount, dtype, op, NULL, NULL, NULL, NULL,
                 stream, opts};
  return pl_collective(comm, &a);
}

purlin_status_t purlin_all_to_all(const void *send, void *recv, size_t count, purlin_dtype_t dtype,
                                  purlin_comm_t comm, void *stream, const purlin_opts_t *opts) {
  pl_args_t a = {PL_COLL_ALL_TO_ALL, send, recv, count, dtype, PURLIN_SUM, NULL, NULL, NULL, NULL,
                 stream, opts};
  return pl_collective(comm, &a);
}

purlin_status_t purlin_all_gather_v(const void *send, size_t sendcount, void *recv,
                                    const size_t *recvcounts, const size_t *rdispls,
                                    purlin_dtype_t dtype, purlin_comm_t comm, void *stream,
                                    const purlin_opts_t *opts) {
  pl_args_t a = {PL_COLL_ALL_GATHER_V, send, recv, sendcount, dtype, PURLIN_SUM, NULL, NULL,
                 recvcounts, rdispls, stream, opts};
  return pl_collective(comm, &a);
}

purlin_status_t purlin_reduce_scatter_v(const void *send, void *recv, const size_t *recvcounts,
                                        const size_t *sdispls, purlin_dtype_t dtype,
                                        purlin_op_t op, purlin_comm_t comm, void *stream,
                                        const purlin_opts_t *opts) {
  pl_args_t a = {PL_COLL_REDUCE_SCATTER_V, send, recv, 0, dtype, op, NULL, sdispls, recvcounts,
                 NULL, stream, opts};
  return pl_collective(comm, &a);
}

purlin_status_t purlin_all_to_all_v(const void *send, const size_t *sendcounts,
                                    const size_t *sdispls, void *recv, const size_t *recvcounts,
                                    const size_t *rdispls, purlin_dtype_t dtype,
                                    purlin_comm_t comm, void *stream, const purlin_opts_t *opts) {
  pl_args_t a = {PL_COLL_ALL_TO_ALL_V, send, recv, 0, dtype, PURLIN_SUM, sendcounts, sdispls,
                 recvcounts, rdispls, stream, opts};
  return pl_collective(comm, &a);
}

/* ---- peer-accessible memory ------------------------------------------------------------------ */

int pl_sym_find(const struct purlin_comm *comm, const void *p, size_t bytes, uint64_t *id,
                uint64_t *off) {
  uintptr_t q = (uintptr_t)p;
  for (int i = 0; i < comm->nsyms; i++) {
    const pl_sym_t *s = &comm->syms[i];
    uintptr_t b = (uintptr_t)s->base[comm->rank];
    /* q - b < bytes, not <=: a pointer just past one range (the start of the next one, back to
     * back, as PyTorch's allocator hands them out) belongs to the next, never to this one */
    if (s->used && q >= b && q - b < s->bytes && bytes <= s->bytes - (q - b)) {
      *id = (uint64_t)i + 1;
      *off = q - b;
      return 1;
    }
  }
  return 0;
}

purlin_status_t purlin_mem_alloc(purlin_comm_t comm, size_t bytes, void **ptr) {
  if (!comm) {
    pl_set_global_error("purlin_mem_alloc: comm is NULL");
    return PURLIN_ERR_INVALID_ARGUMENT;
  }
  if (!ptr) return PL_BAD(comm, "purlin_mem_alloc: ptr (the output) is NULL");
  if (bytes == 0) return PL_BAD(comm, "purlin_mem_alloc: bytes is 0");
  if (bytes > ((size_t)1 << 48)) return PL_BAD(comm, "purlin_mem_alloc: bytes %zu is too large",
                                               bytes);
  if (comm->aborted)
    return pl_comm_fail(comm, PURLIN_ERR_INVALID_USAGE,
                        "purlin_mem_alloc: the communicator was aborted; destroy it");
  uint64_t mine = bytes, all[PL_MAX_WORLD];
  purlin_status_t st = pl_bootstrap_allgather(comm->bs, &mine, all, sizeof mine);
  if (st) return pl_comm_fail(comm, st, "purlin_mem_alloc: %s", pl_bootstrap_last_error(comm->bs));
  for (int r = 0; r < comm->world; r++)
    if (all[r] != mine)
      return pl_comm_fail(comm, PURLIN_ERR_MISMATCH,
                          "purlin_mem_alloc: ranks disagree on bytes: rank %d has %zu, rank %d has "
                          "%llu", comm->rank, bytes, r, (unsigned long long)all[r]);
  if (comm->datapath == PURLIN_DATAPATH_CUDA) return pl_cuda_mem_alloc(comm, bytes, ptr);
  return pl_host_mem_alloc(comm, bytes, ptr);
}

purlin_status_t purlin_mem_free(purlin_comm_t comm, void *ptr) {
  if (!comm) {
    pl_set_global_error("purlin_mem_free: comm is NULL");
    return PURLIN_ERR_INVALID_ARGUMENT;
  }
  if (!ptr) return PURLIN_OK;
  uint64_t id, off;
  if (!pl_sym_find(comm, ptr, 0, &id, &off) || off != 0)
    return PL_BAD(comm, "purlin_mem_free: ptr %p was not returned by purlin_mem_alloc", ptr);
  if (comm->syms[id - 1].kind == PL_SYM_REG)
    return PL_BAD(comm, "purlin_mem_free: ptr %p was registered by purlin_mem_register, not "
                        "allocated: purlin_mem_deregister it (and free it yourself)", ptr);
  /* Collective: no rank unmaps while a peer may still read it in a call of its own. */
  purlin_status_t st = pl_bootstrap_barrier(comm->bs);
  if (st) pl_comm_fail(comm, st, "purlin_mem_free: %s", pl_bootstrap_last_error(comm->bs));
  if (comm->datapath == PURLIN_DATAPATH_CUDA) {
    purlin_status_t st2 = pl_cuda_mem_free(comm, ptr);
    return st ? st : st2;
  }
  pl_host_mem_free(comm, ptr);
  return st;
}

purlin_status_t purlin_mem_register(purlin_comm_t comm, void *ptr, size_t bytes) {
  if (!comm) {
    pl_set_global_error("purlin_mem_register: comm is NULL");
    return PURLIN_ERR_INVALID_ARGUMENT;
  }
  if (comm->aborted)
    return pl_comm_fail(comm, PURLIN_ERR_INVALID_USAGE,
                        "purlin_mem_register: the communicator was aborted; destroy it");
  if (comm->datapath != PURLIN_DATAPATH_CUDA)
    return pl_comm_fail(comm, PURLIN_ERR_UNSUPPORTED,
                        "purlin_mem_register: needs the CUDA datapath (on the host datapath, "
                        "peer-accessible memory comes from purlin_mem_alloc)");
  /* ptr, bytes and the memory itself are checked there, on every rank at once: a bad argument on
   * one rank fails every rank, naming it, instead of leaving the others in the exchange */
  return pl_cuda_mem_register(comm, ptr, bytes);
}

purlin_status_t purlin_mem_deregister(purlin_comm_t comm, void *ptr) {
  if (!comm) {
    pl_set_global_error("purlin_mem_deregister: comm is NULL");
    return PURLIN_ERR_INVALID_ARGUMENT;
  }
  /* Collective: every rank names the same registration (its id; 0 for NULL), a rank whose ptr is
   * not one says so (~0) instead of leaving its peers in the exchange. */
  uint64_t id = 0, off = 0, all[PL_MAX_WORLD];
  const uint64_t bad = ~(uint64_t)0;
  if (ptr && (!pl_sym_find(comm, ptr, 0, &id, &off) || off != 0 ||
              comm->syms[id - 1].kind != PL_SYM_REG))
    id = bad;
  purlin_status_t st = pl_bootstrap_allgather(comm->bs, &id, all, sizeof id);
  if (st)
    return pl_comm_fail(comm, st, "purlin_mem_deregister: %s", pl_bootstrap_last_error(comm->bs));
  if (id == bad)
    return PL_BAD(comm, "purlin_mem_deregister: ptr %p is not a pointer that purlin_mem_register "
                        "registered", ptr);
  for (int r = 0; r < comm->world; r++)
    if (all[r] == bad)
      return pl_comm_fail(comm, PURLIN_ERR_INVALID_ARGUMENT,
                          "purlin_mem_deregister: rank %d passed a pointer that is not registered "
                          "(see its error)", r);
  for (int r = 0; r < comm->world; r++)
    if (all[r] != id)
      return pl_comm_fail(comm, PURLIN_ERR_MISMATCH,
                          "purlin_mem_deregister: ranks disagree on the registration: rank %d "
                          "deregisters registration #%llu (%p), rank %d #%llu (0: NULL)",
                          comm->rank, (unsigned long long)id, ptr, r, (unsigned long long)all[r]);
  if (!ptr) return PURLIN_OK;
  return pl_cuda_mem_deregister(comm, ptr);
}
