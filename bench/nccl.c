/* nccl.c -- the NCCL baseline, loaded at run time (dlopen "libnccl.so.2") so that purlin never
 * depends on NCCL. The few NCCL types needed are declared here (values of NCCL's public ABI).
 * NCCL runs the same sizes, buffers and timing as purlin; its unique id travels through purlin. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

typedef struct ncclComm *ncclComm_t;
typedef struct {
  char internal[128];
} ncclUniqueId;
typedef int ncclResult_t; /* an enum: 0 = ncclSuccess */

static struct {
  void *lib;
  ncclComm_t comm;
  int version;
  char err[512];
  ncclResult_t (*GetUniqueId)(ncclUniqueId *);
  ncclResult_t (*CommInitRank)(ncclComm_t *, int, ncclUniqueId, int);
  ncclResult_t (*CommDestroy)(ncclComm_t);
  ncclResult_t (*GetVersion)(int *);
  const char *(*GetErrorString)(ncclResult_t);
  ncclResult_t (*AllReduce)(const void *, void *, size_t, int, int, ncclComm_t, void *);
  ncclResult_t (*AllGather)(const void *, void *, size_t, int, ncclComm_t, void *);
  ncclResult_t (*ReduceScatter)(const void *, void *, size_t, int, int, ncclComm_t, void *);
  ncclResult_t (*Reduce)(const void *, void *, size_t, int, int, int, ncclComm_t, void *);
  ncclResult_t (*Send)(const void *, size_t, int, int, ncclComm_t, void *);
  ncclResult_t (*Recv)(void *, size_t, int, int, ncclComm_t, void *);
  ncclResult_t (*GroupStart)(void);
  ncclResult_t (*GroupEnd)(void);
} N;

/* ncclDataType_t and ncclRedOp_t values, indexed by purlin's enums */
static const int nccl_dtype[PURLIN_DTYPE_COUNT] = {
    [PURLIN_F32] = 7, [PURLIN_F16] = 6, [PURLIN_BF16] = 9,      [PURLIN_F64] = 8,
    [PURLIN_I8] = 0,  [PURLIN_U8] = 1,  [PURLIN_I32] = 2,       [PURLIN_U32] = 3,
    [PURLIN_I64] = 4, [PURLIN_U64] = 5, [PURLIN_FP8_E4M3] = 10, [PURLIN_FP8_E5M2] = 11};
static const int nccl_op[PURLIN_OP_COUNT] = {
    [PURLIN_SUM] = 0, [PURLIN_PROD] = 1, [PURLIN_MAX] = 2, [PURLIN_MIN] = 3, [PURLIN_AVG] = 4};

const char *bench_nccl_last_error(void) {
  return N.err;
}
int bench_nccl_version(void) {
  return N.version;
}

static int nccl_fail(ncclResult_t r, const char *what) {
  snprintf(N.err, sizeof N.err, "%s: %s (%d)", what,
           N.GetErrorString ? N.GetErrorString(r) : "error", r);
  return -1;
}

/* Resolve one symbol into a function pointer without a cast between object and function pointers.
 */
static int sym(void *fnptr, const char *name) {
  void *p = dlsym(N.lib, name);
  if (!p) {
    snprintf(N.err, sizeof N.err, "libnccl.so.2 has no %s", name);
    return -1;
  }
  memcpy(fnptr, &p, sizeof p);
  return 0;
}

static int nccl_load(void) {
  N.lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!N.lib) {
    snprintf(N.err, sizeof N.err,
             "NCCL not found: dlopen(\"libnccl.so.2\"): %s "
             "(install NCCL or add it to LD_LIBRARY_PATH)",
             dlerror());
    return -1;
  }
  if (sym(&N.GetUniqueId, "ncclGetUniqueId") || sym(&N.CommInitRank, "ncclCommInitRank") ||
      sym(&N.CommDestroy, "ncclCommDestroy") || sym(&N.GetVersion, "ncclGetVersion") ||
      sym(&N.GetErrorString, "ncclGetErrorString") || sym(&N.AllReduce, "ncclAllReduce") ||
      sym(&N.AllGather, "ncclAllGather") || sym(&N.ReduceScatter, "ncclReduceScatter") ||
      sym(&N.Reduce, "ncclReduce") || sym(&N.Send, "ncclSend") || sym(&N.Recv, "ncclRecv") ||
      sym(&N.GroupStart, "ncclGroupStart") || sym(&N.GroupEnd, "ncclGroupEnd"))
    return -1;
  N.GetVersion(&N.version);
  return 0;
}

/* All ranks agree on failure: any rank's failure is everyone's. */
static int agree(int failed) {
  int32_t f = failed;
  bench_allreduce_host(&f, 1, PURLIN_I32, PURLIN_MAX);
  return f;
}

int bench_nccl_open(char *err, size_t len) {
  N.err[0] = 0;
  if (!B.cuda) {
    snprintf(err, len,
             "--baseline nccl needs the CUDA datapath (this run is on the host datapath)");
    return -1;
  }
  /* NCCL refuses two ranks on one GPU ("Duplicate GPU detected"): say so before it does. */
  char id[32], *ids = malloc(sizeof id * (size_t)B.world);
  memset(id, 0, sizeof id);
  bench_gpu_id(id, sizeof id);
  bench_allgather_host(id, ids, sizeof id);
  for (int a = 0; a < B.world; a++)
    for (int b = a + 1; b < B.world; b++)
      if (!strncmp(ids + a * sizeof id, ids + b * sizeof id, sizeof id)) {
        snprintf(err, len,
                 "--baseline nccl: ranks %d and %d share GPU %.32s, and NCCL forbids "
                 "two ranks on one GPU; run one rank per GPU, or compare against the "
                 "floor columns instead",
                 a, b, ids + a * sizeof id);
        free(ids);
        return -1;
      }
  free(ids);
  int bad = nccl_load();
  if (agree(bad)) {
    snprintf(err, len, "%s", bad ? N.err : "NCCL could not be loaded on another rank");
    return -1;
  }
  /* NVLink multicast (NVLS) must never run on these machines. */
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  ncclUniqueId uid, *all = malloc(sizeof uid * (size_t)B.world);
  memset(&uid, 0, sizeof uid);
  ncclResult_t r = 0;
  if (B.rank == 0 && (r = N.GetUniqueId(&uid)) != 0)
    nccl_fail(r, "ncclGetUniqueId");
  if (agree(r != 0)) {
    snprintf(err, len, "%s", r ? N.err : "ncclGetUniqueId failed on rank 0");
    free(all);
    return -1;
  }
  bench_allgather_host(&uid, all, sizeof uid);
  uid = all[0];
  free(all);
  r = N.CommInitRank(&N.comm, B.world, uid, B.rank);
  if (r)
    nccl_fail(r, "ncclCommInitRank");
  if (agree(r != 0)) {
    snprintf(err, len, "%s", r ? N.err : "ncclCommInitRank failed on another rank");
    return -1;
  }
  return 0;
}

int bench_nccl_supports_inplace(int coll) {
  return coll != B_A2A && coll != B_A2AV;
}

int bench_nccl_launch(const bench_geom_t *g, const void *send, void *recv, int dtype, int op) {
  int t = nccl_dtype[dtype], o = nccl_op[op], n = g->world, me = g->rank;
  size_t es = g->esize;
  const char *s = send;
  char *d = recv;
  void *st = B.stream;
  ncclResult_t r = 0;
  switch (g->coll) {
  case B_AR:
    r = N.AllReduce(send, recv, g->scount, t, o, N.comm, st);
    break;
  case B_AG:
    r = N.AllGather(send, recv, g->scount, t, N.comm, st);
    break;
  case B_RS:
    r = N.ReduceScatter(send, recv, g->scount, t, o, N.comm, st);
    break;
  default: {
    /* the V variants and AllToAll as grouped point-to-point (and rooted reductions for RSV) */
    int inplace = (const void *)send == (const void *)recv ||
                  (g->coll == B_AGV && s == d + g->inplace_off * es);
    N.GroupStart();
    for (int p = 0; p < n && !r; p++) {
      size_t c = g->scount;
      switch (g->coll) {
      case B_A2A:
        r = N.Send(s + (size_t)p * c * es, c, t, p, N.comm, st);
        if (!r)
          r = N.Recv(d + (size_t)p * c * es, c, t, p, N.comm, st);
        break;
      case B_AGV:
        if (inplace && p == me)
          break;
        if (g->rc[me])
          r = N.Send(s, g->rc[me], t, p, N.comm, st);
        if (!r && g->rc[p])
          r = N.Recv(d + g->rd[p] * es, g->rc[p], t, p, N.comm, st);
        break;
      case B_RSV:
        if (g->rc[p])
          r = N.Reduce(s + g->sd[p] * es, d, g->rc[p], t, o, p, N.comm, st);
        break;
      case B_A2AV:
        if (g->sc[p])
          r = N.Send(s + g->sd[p] * es, g->sc[p], t, p, N.comm, st);
        if (!r && g->rc[p])
          r = N.Recv(d + g->rd[p] * es, g->rc[p], t, p, N.comm, st);
        break;
      default:
        break;
      }
    }
    ncclResult_t r2 = N.GroupEnd();
    if (!r)
      r = r2;
  }
  }
  return r ? nccl_fail(r, bench_colls[g->coll].name) : 0;
}

void bench_nccl_close(void) {
  if (N.comm)
    N.CommDestroy(N.comm);
  N.comm = NULL;
  /* the library stays loaded: NCCL's threads may outlive the communicator */
}
