/* cuda_dp.cu -- the CUDA datapath's host side: driver entry points, symmetric memory (cuMem VMM
 * allocations exported as POSIX file descriptors, passed over the bootstrap, mapped by every rank:
 * this works between processes on one GPU under MPS and across GPUs), init and fini, the launch of
 * one call, and the reading of the device's error record.
 *
 * The CUDA runtime is linked statically and the driver is reached only through
 * cudaGetDriverEntryPointByVersion (as NCCL's cudawrap reaches it through cuGetProcAddress), so the
 * library loads and runs its host datapath where libcuda.so.1 is missing. Written in the C subset
 * of CUDA C++ (no exceptions, no RTTI, no standard C++ library). */
#include <cuda.h>
#include <cuda_runtime.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

extern "C" {
#include "bootstrap.h"
#include "comm.h"
#include "log.h"
#include "param.h"
#include "shm.h"
}
#include "cuda/cuda_dp.h"
#include "cuda/cuda_int.h"
#include "cuda/ce.h"
#include "cuda/lean.h"
#include "cuda/direct.h"
#include "cuda/atom_cuda.cuh" /* snac.h needs an atom; the host only uses its pure functions */
#include "snac/snac.h"

static_assert(sizeof(pl_cuda_args_t) <= 4000, "kernel arguments must stay below 4 KiB");

/* The device API's flags area on each rank (purlin_device_handle): a private header (launch
 * sequence, block count) in the first 64 bytes, then the user flags. */
#define PL_DEV_FLAGS_BYTES 65536

/* ---- driver entry points ---------------------------------------------------------------------- */

#define PL_CU_FNS(X)                                                                               \
  X(cuGetErrorString)                                                                              \
  X(cuDeviceGet)                                                                                   \
  X(cuDeviceGetAttribute)                                                                          \
  X(cuMemGetAllocationGranularity)                                                                 \
  X(cuMemCreate)                                                                                   \
  X(cuMemRelease)                                                                                  \
  X(cuMemExportToShareableHandle)                                                                  \
  X(cuMemImportFromShareableHandle)                                                                \
  X(cuMemAddressReserve)                                                                           \
  X(cuMemAddressFree)                                                                              \
  X(cuMemMap)                                                                                      \
  X(cuMemUnmap)                                                                                    \
  X(cuMemSetAccess)                                                                                \
  X(cuMemGetAddressRange)

static struct {
#define PL_CU_FIELD_(f) decltype(&::f) f;
  PL_CU_FNS(PL_CU_FIELD_)
#undef PL_CU_FIELD_
} pl_cu;

static pthread_once_t pl_cu_once = PTHREAD_ONCE_INIT;
static int pl_cu_ok;
static char pl_cu_why[256];

static void pl_cu_load(void) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n < 1) {
    snprintf(pl_cu_why, sizeof pl_cu_why, "no CUDA device: %s",
             e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    (void)cudaGetLastError();
    return;
  }
#define PL_CU_LOAD_(f)                                                                             \
  {                                                                                                \
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;                        \
    void *p = NULL;                                                                                \
    e = cudaGetDriverEntryPointByVersion(#f, &p, 12000, cudaEnableDefault, &q);                    \
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || !p) {                              \
      snprintf(pl_cu_why, sizeof pl_cu_why, "driver entry point %s not found (%s)", #f,            \
               cudaGetErrorString(e));                                                             \
      (void)cudaGetLastError();                                                                    \
      return;                                                                                      \
    }                                                                                              \
    memcpy(&pl_cu.f, &p, sizeof p);                                                                \
  }
  PL_CU_FNS(PL_CU_LOAD_)
#undef PL_CU_LOAD_
  pl_cu_ok = 1;
}

extern "C" int pl_cuda_available(void) {
  pthread_once(&pl_cu_once, pl_cu_load);
  return pl_cu_ok;
}

static const char *pl_cu_str(CUresult r) {
  const char *s = NULL;
  if (pl_cu.cuGetErrorString) pl_cu.cuGetErrorString(r, &s);
  return s ? s : "unknown CUDA driver error";
}

#define PL_RT(comm, call, what)                                                                    \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess)                                                                         \
      return pl_comm_fail((comm), PURLIN_ERR_CUDA, "%s: %s (%s)", (what), cudaGetErrorString(e_), \
                          #call);                                                                  \
  } while (0)
#define PL_CU(comm, call, what)                                                                    \
  do {                                                                                             \
    CUresult r_ = (call);                                                                          \
    if (r_ != CUDA_SUCCESS)                                                                        \
      return pl_comm_fail((comm), r_ == CUDA_ERROR_OUT_OF_MEMORY ? PURLIN_ERR_NO_MEMORY            \
                                                                 : PURLIN_ERR_CUDA,                \
                          "%s: %s (%s)", (what), pl_cu_str(r_), #call);                            \
  } while (0)

/* ---- state ------------------------------------------------------------------------------------ */

/* One symmetric allocation: every rank's piece mapped at va + r * size. */
typedef struct {
  CUmemGenericAllocationHandle h[PL_MAX_WORLD];
  CUdeviceptr va;
  size_t size;
  int nmapped; /* ranks 0 .. nmapped-1 are mapped */
  int reserved;
  /* a registered range instead (purlin_mem_register): rank r's allocation as cudaIpcOpenMemHandle
   * opened it here (NULL: this rank's own, or a rank of this process) */
  void *ipc[PL_MAX_WORLD];
} pl_vmm_t;

struct pl_cuda_dp {
  int device, atom;
  CUdevice cudev;
  pl_cuda_launch_fn launch;
  pl_vmm_t ws;
  pl_vmm_t uflags;           /* user flags of the device API (purlin_device_handle) */
  pl_vmm_t dflags;           /* the direct kernel's flag tables (direct.h) */
  pl_vmm_t *syms;            /* PL_CUDA_MAX_SYMS, by sym id - 1 */
  pl_cuda_state_t *state;    /* device */
  uint64_t *hdr;             /* device */
  char *scratch;             /* device */
  uint64_t *symtab;          /* device, PL_CUDA_MAX_SYMS * (1 + world) words */
  pl_cuda_err_t *err_host;   /* pinned, mapped */
  pl_cuda_err_t *err_dev;
  uint32_t mis_seen;
  int fatal_seen;
  cudaStream_t abort_stream;
  /* liveness watchdog (pl_cuda_watch): a thread polling the peers' pidfds */
  pthread_t watch;
  int watch_on, watch_pipe[2];
  int dead[PL_MAX_WORLD]; /* set by the watchdog (atomics): that rank's process has ended */
  int dead_rank;          /* the first rank seen dead (ended without its exit mark), -1 */
  int left_rank;          /* the first rank that ended after its exit mark, -1 */
  char *bye[PL_MAX_WORLD]; /* every rank's exit mark page (pl_bye_create), host memory */
  int ce_on;              /* PURLIN_ATOM=ce asked for (pl_pick_atom) */
  struct pl_ce *ce;       /* the copy-engine atom for gather collectives (ce.cu); NULL: off */
  /* programmatic dependent launch of the lean kernel: the device can (sm_90+); the fewest SMs of
   * any rank's GPU and the most ranks on one GPU (MPS; pl_check_peers); the previous lean
   * launch's grid */
  int pdl_cap, sms, ranks_here, last_lean_grid;
};

/* The atoms built into this library, oldest first, with the compute capability (x100) each
 * needs (docs/gpu.md, "Atoms"). */
static const struct {
  int atom, min_cc;
  pl_cuda_launch_fn launch;
} pl_atoms[] = {{700, 0, pl_cuda_launch_700},
                {800, 800, pl_cuda_launch_800},
                {900, 900, pl_cuda_launch_900},
                {1000, 1000, pl_cuda_launch_1000}};

/* Run with comm->device current; restores the caller's device. */
typedef struct {
  int saved;
} pl_devguard_t;
static void pl_dev_enter(struct purlin_comm *comm, pl_devguard_t *g) {
  g->saved = -1;
  if (cudaGetDevice(&g->saved) != cudaSuccess) g->saved = -1;
  if (g->saved != comm->device) cudaSetDevice(comm->device);
}
static void pl_dev_leave(struct purlin_comm *comm, const pl_devguard_t *g) {
  if (g->saved >= 0 && g->saved != comm->device) cudaSetDevice(g->saved);
}

/* Every rank reports its status; all fail if one did (naming it), so that no rank goes on alone
 * into a collective step that the failed rank will never take. */
static purlin_status_t pl_agree(struct purlin_comm *comm, purlin_status_t mine, const char *what) {
  int32_t me = (int32_t)mine, all[PL_MAX_WORLD];
  purlin_status_t st = pl_bootstrap_allgather(comm->bs, &me, all, sizeof me);
  if (st) return pl_comm_fail(comm, st, "%s: %s", what, pl_bootstrap_last_error(comm->bs));
  if (mine) return mine;
  for (int r = 0; r < comm->world; r++)
    if (all[r])
      return pl_comm_fail(comm, (purlin_status_t)all[r], "%s: rank %d failed (see its error)",
                          what, r);
  return PURLIN_OK;
}

/* ---- symmetric memory ------------------------------------------------------------------------- */

static void pl_vmm_free(struct pl_cuda_dp *dp, pl_vmm_t *v, int world) {
  for (int r = 0; r < v->nmapped; r++) pl_cu.cuMemUnmap(v->va + (CUdeviceptr)r * v->size, v->size);
  for (int r = 0; r < world; r++)
    if (v->h[r]) pl_cu.cuMemRelease(v->h[r]);
  if (v->reserved) pl_cu.cuMemAddressFree(v->va, v->size * (size_t)world);
  memset(v, 0, sizeof(*v));
}

/* A registered range's peer mappings, closed (each open counted once by CUDA). */
static void pl_ipc_close(pl_vmm_t *v, int world) {
  for (int r = 0; r < world; r++)
    if (v->ipc[r]) {
      (void)cudaIpcCloseMemHandle(v->ipc[r]);
      v->ipc[r] = NULL;
    }
  (void)cudaGetLastError();
}

/* A table slot's mappings released, whichever kind it holds (a registered range's IPC mappings, a
 * purlin_mem_alloc buffer's cuMem ones). */
static void pl_sym_release(struct pl_cuda_dp *dp, pl_vmm_t *v, int world, int rank) {
  pl_ipc_close(v, world);
  if (v->reserved || v->h[rank]) pl_vmm_free(dp, v, world);
}

/* This rank's part: create, export. */
static purlin_status_t pl_vmm_local(struct purlin_comm *comm, pl_vmm_t *v, size_t bytes,
                                    int *fd) {
  struct pl_cuda_dp *dp = comm->cuda;
  CUmemAllocationProp prop;
  size_t g = 0;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dp->cudev;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  PL_CU(comm, pl_cu.cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
        "symmetric memory: granularity");
  size_t unit = (size_t)2 << 20; /* the same on every rank, whatever its granularity */
  if (g > unit) unit = (g + unit - 1) / unit * unit;
  v->size = (bytes + unit - 1) / unit * unit;
  PL_CU(comm, pl_cu.cuMemCreate(&v->h[comm->rank], v->size, &prop, 0),
        "symmetric memory: cuMemCreate");
  PL_CU(comm,
        pl_cu.cuMemExportToShareableHandle(fd, v->h[comm->rank],
                                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
        "symmetric memory: export as a file descriptor");
  return PURLIN_OK;
}

/* Import every peer's piece and map all of them here, readable and writable by this device. */
static purlin_status_t pl_vmm_map(struct purlin_comm *comm, pl_vmm_t *v, int *fds) {
  struct pl_cuda_dp *dp = comm->cuda;
  int w = comm->world;
  CUmemAccessDesc acc;
  memset(&acc, 0, sizeof acc);
  acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  acc.location.id = dp->cudev;
  acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  PL_CU(comm, pl_cu.cuMemAddressReserve(&v->va, v->size * (size_t)w, 0, 0, 0),
        "symmetric memory: reserving address space");
  v->reserved = 1;
  for (int r = 0; r < w; r++) {
    if (r != comm->rank) {
      CUresult cr = pl_cu.cuMemImportFromShareableHandle(
          &v->h[r], (void *)(uintptr_t)fds[r], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
      if (cr != CUDA_SUCCESS)
        return pl_comm_fail(comm, PURLIN_ERR_CUDA, "symmetric memory: importing rank %d's memory: %s",
                            r, pl_cu_str(cr));
    }
    CUdeviceptr at = v->va + (CUdeviceptr)r * v->size;
    CUresult cr = pl_cu.cuMemMap(at, v->size, 0, v->h[r], 0);
    if (cr != CUDA_SUCCESS)
      return pl_comm_fail(comm, PURLIN_ERR_CUDA, "symmetric memory: mapping rank %d's memory: %s",
                          r, pl_cu_str(cr));
    v->nmapped = r + 1;
    cr = pl_cu.cuMemSetAccess(at, v->size, &acc, 1);
    if (cr != CUDA_SUCCESS)
      return pl_comm_fail(comm, PURLIN_ERR_CUDA,
                          "symmetric memory: access from rank %d's GPU to rank %d's memory: %s",
                          comm->rank, r, pl_cu_str(cr));
  }
  return PURLIN_OK;
}

/* Collective: every rank ends with every rank's `bytes` mapped (v->va + r * v->size), or all
 * fail. */
static purlin_status_t pl_vmm_create(struct purlin_comm *comm, pl_vmm_t *v, size_t bytes) {
  int fd = -1, fds[PL_MAX_WORLD];
  purlin_status_t st;
  memset(v, 0, sizeof(*v));
  st = pl_agree(comm, pl_vmm_local(comm, v, bytes, &fd), "symmetric memory");
  if (st) {
    if (fd >= 0) close(fd);
    pl_vmm_free(comm->cuda, v, comm->world);
    return st;
  }
  st = pl_bootstrap_allgather_fd(comm->bs, fd, fds);
  close(fd);
  if (st) {
    pl_vmm_free(comm->cuda, v, comm->world);
    return pl_comm_fail(comm, st, "symmetric memory: passing file descriptors: %s",
                        pl_bootstrap_last_error(comm->bs));
  }
  purlin_status_t mine = pl_vmm_map(comm, v, fds);
  for (int r = 0; r < comm->world; r++) close(fds[r]);
  st = pl_agree(comm, mine, "symmetric memory");
  if (st) pl_vmm_free(comm->cuda, v, comm->world);
  return st;
}

/* ---- init / fini ------------------------------------------------------------------------------ */

/* The workspace's geometry, as the host datapath's (host_exec.c): control block, packet windows
 * [2 parities][world sources], two staging halves. */
static void pl_cuda_geom(struct purlin_comm *comm, size_t staging_bytes) {
  pl_ws_geom_make(&comm->geom, comm->world, sizeof(pl_ctrl_t), comm->tune.packet_bytes,
                  staging_bytes);
}

typedef struct {
  char bus[32];
  unsigned char uuid[16];
  int32_t major, minor, sms;
} pl_gpu_id_t;

/* Every pair of ranks must reach each other's memory: the same GPU, or peer access. */
static purlin_status_t pl_check_peers(struct purlin_comm *comm) {
  pl_gpu_id_t mine, all[PL_MAX_WORLD];
  cudaDeviceProp prop;
  purlin_status_t st = PURLIN_OK;
  memset(&mine, 0, sizeof mine);
  PL_RT(comm, cudaGetDeviceProperties(&prop, comm->device), "init: device properties");
  PL_RT(comm, cudaDeviceGetPCIBusId(mine.bus, sizeof mine.bus, comm->device), "init: PCI bus id");
  memcpy(mine.uuid, &prop.uuid, sizeof mine.uuid);
  mine.major = prop.major;
  mine.minor = prop.minor;
  mine.sms = prop.multiProcessorCount;
  st = pl_bootstrap_allgather(comm->bs, &mine, all, sizeof mine);
  if (st) return pl_comm_fail(comm, st, "init: %s", pl_bootstrap_last_error(comm->bs));
  purlin_status_t local = PURLIN_OK;
  /* the most ranks on one GPU and the fewest SMs of any rank's GPU: every rank computes the same
   * (pl_cuda_residency uses them for knobs every rank must agree on) */
  struct pl_cuda_dp *dp = comm->cuda;
  dp->ranks_here = 1;
  dp->sms = mine.sms;
  for (int r = 0; r < comm->world; r++) {
    int n = 0;
    for (int q = 0; q < comm->world; q++) n += !memcmp(all[r].uuid, all[q].uuid, sizeof mine.uuid);
    if (n > dp->ranks_here) dp->ranks_here = n;
    if (all[r].sms < dp->sms) dp->sms = all[r].sms;
  }
  for (int r = 0; r < comm->world && !local; r++) {
    if (!memcmp(all[r].uuid, mine.uuid, sizeof mine.uuid)) continue;
    int ord = -1, can = 0;
    if (cudaDeviceGetByPCIBusId(&ord, all[r].bus) != cudaSuccess) {
      (void)cudaGetLastError();
      local = pl_comm_fail(comm, PURLIN_ERR_UNSUPPORTED,
                           "init: rank %d's GPU (%s) is not visible to rank %d (GPU %s): "
                           "CUDA_VISIBLE_DEVICES must show every rank's GPU to every rank",
                           r, all[r].bus, comm->rank, mine.bus);
    } else if (cudaDeviceCanAccessPeer(&can, comm->device, ord) != cudaSuccess || !can) {
      (void)cudaGetLastError();
      local = pl_comm_fail(comm, PURLIN_ERR_UNSUPPORTED,
                           "init: rank %d (GPU %s) cannot access the memory of rank %d (GPU %s): "
                           "no peer access between these GPUs",
                           comm->rank, mine.bus, r, all[r].bus);
    }
  }
  return pl_agree(comm, local, "init: peer access");
}

/* Every CTA of every rank's call must be resident at once: a CTA that waits for a peer's CTA
 * which has no SM left waits until the deadline (ranks share a GPU under MPS; kernels run one CTA
 * per SM at their register use). SNAC's kernel runs 2 CTAs per lane, the lean kernel up to
 * lean_ctas: clamp both to the SMs of the GPU with the most ranks (the same on every rank). */
static void pl_cuda_residency(struct purlin_comm *comm) {
  struct pl_cuda_dp *dp = comm->cuda;
  uint64_t per = (uint64_t)dp->sms / (uint64_t)(dp->ranks_here > 0 ? dp->ranks_here : 1);
  uint64_t lanes = per / 2 < 1 ? 1 : per / 2, ctas = per < 1 ? 1 : per;
  if (comm->tune.lanes > lanes) {
    PL_WARN("lanes %llu: %d ranks share a GPU of %d SMs, so at most %llu lanes (2 CTAs each) "
            "stay resident; using %llu", (unsigned long long)comm->tune.lanes, dp->ranks_here,
            dp->sms, (unsigned long long)lanes, (unsigned long long)lanes);
    comm->tune.lanes = lanes;
  }
  uint64_t dmax = per < 1 ? 1 : per > PL_DIRECT_MAX_CTAS ? PL_DIRECT_MAX_CTAS : per;
  if (comm->tune.direct_ctas > dmax || comm->tune.direct_ctas < 1) {
    if (comm->tune.direct_ctas > dmax && pl_param_int(PL_PARAM_DIRECT_CTAS) > 0)
      PL_WARN("direct CTAs %llu: %d ranks share a GPU of %d SMs; using %llu",
              (unsigned long long)comm->tune.direct_ctas, dp->ranks_here, dp->sms,
              (unsigned long long)dmax);
    comm->tune.direct_ctas = dmax;
  }
  if (comm->tune.lean_ctas > ctas) {
    PL_WARN("lean CTAs %llu: %d ranks share a GPU of %d SMs; using %llu",
            (unsigned long long)comm->tune.lean_ctas, dp->ranks_here, dp->sms,
            (unsigned long long)ctas);
    comm->tune.lean_ctas = ctas;
  }
}

/* PURLIN_ATOM=auto: the newest atom for the compute capability (1000 on 10.x only: later
 * generations get 900's code, JIT-compiled from the newest PTX). A forced atom the device cannot
 * run logs a WARN and falls back to auto's choice: atoms differ only in how bytes move, so ranks
 * with different atoms still agree. "ce" keeps auto's atom for the SM kernel and turns the
 * copy-engine atom on for gather collectives (ce.cu; every rank must, checked by pl_ce_init). */
static int pl_pick_atom(struct purlin_comm *comm, int major, int minor) {
  const char *want = pl_param_str(PL_PARAM_ATOM);
  int cc = major * 100 + minor * 10, n = (int)(sizeof pl_atoms / sizeof pl_atoms[0]), pick = 0;
  for (int i = 0; i < n; i++)
    if (pl_atoms[i].min_cc <= cc && (pl_atoms[i].atom != 1000 || cc < 1100)) pick = i;
  if (want[0] && strcmp(want, "auto") != 0) {
    int req = atoi(want), found = -1; /* "ce" -> 0 */
    for (int i = 0; i < n; i++)
      if (pl_atoms[i].atom == req) found = i;
    if (!strcmp(want, "ce"))
      comm->cuda->ce_on = 1;
    else if (found < 0)
      PL_WARN("PURLIN_ATOM=%s: no such atom (700, 800, 900, 1000, ce); using atom %d", want,
              pl_atoms[pick].atom);
    else if (pl_atoms[found].min_cc > cc)
      PL_WARN("PURLIN_ATOM=%s: needs compute capability %d.%d, device %d is sm_%d%d; using atom %d",
              want, pl_atoms[found].min_cc / 100, pl_atoms[found].min_cc / 10 % 10, comm->device,
              major, minor, pl_atoms[pick].atom);
    else
      pick = found;
  }
  comm->cuda->launch = pl_atoms[pick].launch;
  return pl_atoms[pick].atom;
}

static void pl_cuda_watch_start(struct purlin_comm *comm);
static void pl_cuda_watch_stop(struct purlin_comm *comm);
static purlin_status_t pl_bye_create(struct purlin_comm *comm);
#define PL_BYE_BYTES 4096 /* one page: a rank's exit mark (pl_bye_create) */
static purlin_status_t pl_cuda_broken(struct purlin_comm *comm);

extern "C" purlin_status_t pl_cuda_init(struct purlin_comm *comm, size_t staging_bytes) {
  purlin_status_t st;
  pl_devguard_t g;
  int ndev = 0, v = 0, fdok = 0;
  cudaDeviceProp prop;
  if (!pl_cuda_available())
    return pl_comm_fail(comm, PURLIN_ERR_UNSUPPORTED, "init: CUDA datapath unavailable: %s",
                        pl_cu_why);
  struct pl_cuda_dp *dp = (struct pl_cuda_dp *)calloc(1, sizeof(*dp));
  if (!dp) return pl_comm_fail(comm, PURLIN_ERR_NO_MEMORY, "init: CUDA datapath state");
  comm->cuda = dp;
  dp->syms = (pl_vmm_t *)calloc(PL_CUDA_MAX_SYMS, sizeof(pl_vmm_t));
  if (!dp->syms) return pl_comm_fail(comm, PURLIN_ERR_NO_MEMORY, "init: CUDA datapath state");
  PL_RT(comm, cudaGetDeviceCount(&ndev), "init: counting devices");
  if (comm->device < 0) comm->device = comm->local_rank % ndev;
  dp->device = comm->device;
  pl_dev_enter(comm, &g);
  (void)cudaGetLastError();
  st = PURLIN_OK;
  do {
    /* local checks first; every rank then learns whether all passed (pl_agree), so that a rank
     * that fails here does not leave the others waiting in a collective step */
    cudaError_t e = cudaSuccess;
    CUresult cr = CUDA_SUCCESS;
    if (comm->device >= ndev) {
      st = pl_comm_fail(comm, PURLIN_ERR_INVALID_ARGUMENT,
                        "init: config->device %d, but only %d devices are visible", comm->device,
                        ndev);
    } else if ((e = cudaSetDevice(comm->device)) != cudaSuccess) {
      st = pl_comm_fail(comm, PURLIN_ERR_CUDA, "init: cudaSetDevice(%d): %s", comm->device,
                        cudaGetErrorString(e));
    }
    if (st) {
      st = pl_agree(comm, st, "init: CUDA device");
      break;
    }
    cr = pl_cu.cuDeviceGet(&dp->cudev, comm->device);
    if (cr == CUDA_SUCCESS)
      cr = pl_cu.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                                      dp->cudev);
    if (cr == CUDA_SUCCESS)
      cr = pl_cu.cuDeviceGetAttribute(
          &fdok, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dp->cudev);
    if (cr != CUDA_SUCCESS) {
      st = pl_comm_fail(comm, PURLIN_ERR_CUDA, "init: device attributes: %s", pl_cu_str(cr));
    } else if (!v || !fdok) {
      st = pl_comm_fail(comm, PURLIN_ERR_UNSUPPORTED,
                        "init: device %d lacks %s", comm->device,
                        !v ? "virtual memory management (cuMem)"
                           : "POSIX file descriptor export of cuMem memory");
    }
    st = pl_agree(comm, st, "init: CUDA device");
    if (st) break;
    if ((st = pl_check_peers(comm))) break;
    e = cudaGetDeviceProperties(&prop, comm->device);
    if (e != cudaSuccess) {
      st = pl_comm_fail(comm, PURLIN_ERR_CUDA, "init: %s", cudaGetErrorString(e));
      break;
    }
    dp->atom = pl_pick_atom(comm, prop.major, prop.minor);
    pl_cuda_residency(comm);
    {
      /* PDL: sm_90+ and a lean kernel built for it (a compute_80 PTX JIT-compiled here has no
       * griddepcontrol); 1: only with one rank per GPU (under MPS an early CTA parked in
       * griddepcontrol.wait, ours or a user kernel's after ours, can keep a peer's kernel from
       * its SM); 2: also when ranks share a GPU (benchmarks under MPS) */
      int64_t want = pl_param_int(PL_PARAM_PDL);
      dp->pdl_cap = prop.major >= 9 && pl_lean_pdl_built() &&
                    (want >= 2 || (want == 1 && dp->ranks_here == 1));
    }
    pl_cuda_geom(comm, staging_bytes);
    if ((st = pl_vmm_create(comm, &dp->ws, comm->geom.total))) break;
    if ((st = pl_vmm_create(comm, &dp->uflags, PL_DEV_FLAGS_BYTES))) break;
    if ((st = pl_vmm_create(comm, &dp->dflags, PL_DIRECT_FLAG_BYTES))) break;
    for (int r = 0; r < comm->world; r++)
      comm->ws[r] = (char *)(uintptr_t)(dp->ws.va + (CUdeviceptr)r * dp->ws.size);
    /* one header array per main lane (each CTA reads every header into its own) */
    size_t hdr_bytes = (size_t)comm->world * pl_hdr_words(comm->world) * 8 *
                       (size_t)comm->tune.lanes; /* 1..PL_MAX_LANES (pl_tune_get) */
    size_t tab_bytes = (size_t)PL_CUDA_MAX_SYMS * (1 + (size_t)comm->world) * 8;
    purlin_status_t local = PURLIN_OK;
#define PL_TRY_(call)                                                                              \
  if (!local && (e = (call)) != cudaSuccess)                                                       \
    local = pl_comm_fail(comm, e == cudaErrorMemoryAllocation ? PURLIN_ERR_NO_MEMORY               \
                                                              : PURLIN_ERR_CUDA,                   \
                         "init: %s: %s", #call, cudaGetErrorString(e));
    PL_TRY_(cudaMemset(comm->ws[comm->rank], 0, comm->geom.total))
    PL_TRY_(cudaMemset((void *)(uintptr_t)(dp->uflags.va + (CUdeviceptr)comm->rank * dp->uflags.size), 0,
                       PL_DEV_FLAGS_BYTES))
    PL_TRY_(cudaMemset((void *)(uintptr_t)(dp->dflags.va + (CUdeviceptr)comm->rank * dp->dflags.size), 0,
                       PL_DIRECT_FLAG_BYTES))
    PL_TRY_(cudaMalloc((void **)&dp->state, sizeof(pl_cuda_state_t)))
    PL_TRY_(cudaMemset(dp->state, 0, sizeof(pl_cuda_state_t)))
    PL_TRY_(cudaMalloc((void **)&dp->hdr, hdr_bytes))
    PL_TRY_(cudaMalloc((void **)&dp->scratch,
                       (size_t)comm->tune.lanes * (size_t)comm->world * PL_SNAC_SEG))
    PL_TRY_(cudaMalloc((void **)&dp->symtab, tab_bytes))
    PL_TRY_(cudaMemset(dp->symtab, 0, tab_bytes))
    PL_TRY_(cudaHostAlloc((void **)&dp->err_host, sizeof(pl_cuda_err_t),
                          cudaHostAllocMapped | cudaHostAllocPortable))
    if (!local) memset(dp->err_host, 0, sizeof(pl_cuda_err_t));
    PL_TRY_(cudaHostGetDevicePointer((void **)&dp->err_dev, dp->err_host, 0))
    PL_TRY_(cudaStreamCreateWithFlags(&dp->abort_stream, cudaStreamNonBlocking))
    PL_TRY_(cudaDeviceSynchronize())
#undef PL_TRY_
    /* every workspace is zeroed before any rank may write into a peer's */
    if ((st = pl_agree(comm, local, "init: CUDA buffers"))) break;
    if ((st = pl_ce_init(comm, dp->ce_on, dp->state, dp->hdr, dp->err_dev, &dp->ce))) break;
    if ((st = pl_bye_create(comm))) break;
    PL_INFO("CUDA datapath: device %d (%s, sm_%d%d), atom %d, workspace %llu bytes mapped x %d",
            comm->device, prop.name, prop.major, prop.minor, dp->atom,
            (unsigned long long)dp->ws.size, comm->world);
  } while (0);
  if (!st) pl_cuda_watch_start(comm);
  pl_dev_leave(comm, &g);
  return st;
}

extern "C" void pl_cuda_fini(struct purlin_comm *comm) {
  struct pl_cuda_dp *dp = comm->cuda;
  pl_devguard_t g;
  if (!dp) return;
  pl_dev_enter(comm, &g);
  cudaDeviceSynchronize(); /* nothing of ours may run on memory about to go */
  (void)cudaGetLastError();
  /* this rank's part of every call is done: its exit from now on is not a death (pl_cuda_watch);
   * the watchdog ran until here, so that a peer dying under our last kernel still aborts it */
  if (dp->bye[comm->rank])
    __atomic_store_n((uint32_t *)(void *)dp->bye[comm->rank], 1u, __ATOMIC_RELEASE);
  pl_cuda_watch_stop(comm);
  pl_ce_fini(dp->ce);
  dp->ce = NULL;
  pl_cuda_state_t ps;
  const int prof = pl_param_int(PL_PARAM_PROFILE) > 0 && dp->state &&
                   cudaMemcpy(&ps, dp->state, sizeof ps, cudaMemcpyDeviceToHost) == cudaSuccess;
  if (prof && ps.prof_seen) {
    double n = ps.prof_calls ? (double)ps.prof_calls : 1.0, t = 0;
    for (int i = 0; i < PL_PROF_N; i++) t += (double)ps.prof_sum[i];
    fprintf(stderr,
            "purlin profile: rank %d/%d: %llu of %llu calls back to back (within 100 us of the "
            "previous), mean us per call: launch gap %.2f, prologue %.2f, notify %.2f, agree %.2f, "
            "consume %.2f (lean reductions: thread 0's first packets after %.2f), epilogue %.2f; "
            "period %.2f\n",
            comm->rank, comm->world, (unsigned long long)ps.prof_calls,
            (unsigned long long)ps.prof_seen, ps.prof_sum[0] / n / 1e3, ps.prof_sum[1] / n / 1e3,
            ps.prof_sum[2] / n / 1e3, ps.prof_sum[3] / n / 1e3, ps.prof_sum[4] / n / 1e3,
            ps.prof_data / (ps.prof_data_calls ? (double)ps.prof_data_calls : 1.0) / 1e3,
            ps.prof_sum[5] / n / 1e3, t / n / 1e3);
  }
  if (prof) {
    char b[256];
    int o = 0;
    for (int k = 0; k < 32; k++)
      if (ps.dkinds[k] && o < (int)sizeof b - 24)
        o += snprintf(b + o, sizeof b - (size_t)o, " %d:%u", k, ps.dkinds[k]);
    if (o)
      fprintf(stderr, "purlin profile: rank %d/%d: direct kernel calls by kinds (bit 0: a rank "
              "stages, 1: in place, 2: no push, 3: AllToAllV rdispls not packed, 4: AllToAllV packet "
              "peers):%s\n",
              comm->rank, comm->world, b);
  }
  if (prof && ps.dsum[0]) {
    const double n = (double)ps.dsum[0] * 1e3;
    fprintf(stderr, "purlin profile: rank %d/%d: direct kernel, %llu calls, mean us: entry to the "
            "first CTA's data %.2f, data start skew %.2f, data span %.2f, CTA data mean %.2f, "
            "first CTA done %.2f, longest CTA %.2f, last data end to exit %.2f, kernel %.2f\n",
            comm->rank, comm->world, (unsigned long long)ps.dsum[0], ps.dsum[1] / n,
            ps.dsum[2] / n, ps.dsum[3] / n, ps.dsum[4] / n, ps.dsum[5] / n, ps.dsum[6] / n,
            ps.dsum[7] / n, ps.dsum[8] / n);
  }
  (void)cudaGetLastError();
  for (int i = 0; i < PL_CUDA_MAX_SYMS && dp->syms; i++)
    pl_sym_release(dp, &dp->syms[i], comm->world, comm->rank);
  pl_vmm_free(dp, &dp->ws, comm->world);
  pl_vmm_free(dp, &dp->uflags, comm->world);
  pl_vmm_free(dp, &dp->dflags, comm->world);
  for (int r = 0; r < PL_MAX_WORLD; r++) comm->ws[r] = NULL;
  cudaFree(dp->state);
  cudaFree(dp->hdr);
  cudaFree(dp->scratch);
  cudaFree(dp->symtab);
  if (dp->err_host) cudaFreeHost(dp->err_host);
  if (dp->abort_stream) cudaStreamDestroy(dp->abort_stream);
  (void)cudaGetLastError();
  pl_dev_leave(comm, &g);
  for (int r = 0; r < comm->world; r++)
    if (dp->bye[r]) munmap(dp->bye[r], PL_BYE_BYTES);
  free(dp->syms);
  free(dp);
  comm->cuda = NULL;
}

/* ---- peer-accessible memory ------------------------------------------------------------------- */

static purlin_status_t pl_symtab_put(struct purlin_comm *comm, int id) {
  struct pl_cuda_dp *dp = comm->cuda;
  uint64_t e[1 + PL_MAX_WORLD];
  size_t n = 1 + (size_t)comm->world;
  const pl_sym_t *s = &comm->syms[id];
  memset(e, 0, sizeof e);
  if (s->used) {
    e[0] = s->bytes;
    for (int r = 0; r < comm->world; r++) e[1 + r] = (uint64_t)(uintptr_t)s->base[r];
  }
  PL_RT(comm, cudaMemcpy(dp->symtab + (size_t)id * n, e, n * 8, cudaMemcpyHostToDevice),
        "peer-mapped buffers: writing the device table");
  return PURLIN_OK;
}

/* The lowest free entry of comm->syms (grown by one if all are used), the same on every rank as
 * long as every rank allocates, registers and frees in the same order; -1 (the error recorded)
 * when all PL_CUDA_MAX_SYMS are taken. */
static int pl_sym_slot(struct purlin_comm *comm, const char *what) {
  int id;
  for (id = 0; id < comm->nsyms && comm->syms[id].used; id++) {
  }
  if (id >= PL_CUDA_MAX_SYMS) {
    pl_comm_fail(comm, PURLIN_ERR_NO_MEMORY, "%s: more than %d buffers allocated and registered "
                 "at once", what, PL_CUDA_MAX_SYMS);
    return -1;
  }
  if (id == comm->nsyms) {
    pl_sym_t *n = (pl_sym_t *)realloc(comm->syms, sizeof(*n) * (size_t)(comm->nsyms + 1));
    if (!n) {
      pl_comm_fail(comm, PURLIN_ERR_NO_MEMORY, "%s: table", what);
      return -1;
    }
    comm->syms = n;
    memset(&comm->syms[comm->nsyms++], 0, sizeof(*n));
  }
  return id;
}

/* What one rank offers in purlin_mem_register's exchange. */
typedef struct {
  int32_t st;           /* this rank's verdict on its own arguments (0: fine) */
  int32_t id;           /* the table slot it will use (the same everywhere, or the tables drifted) */
  int32_t device;       /* its CUDA device (an ordinal: compared only within one process) */
  uint64_t bytes, ptr;  /* its arguments */
  uint64_t off;         /* ptr's offset in its allocation */
  cudaIpcMemHandle_t h; /* its allocation, for CUDA IPC */
} pl_reg_offer_t;

/* This rank's half of purlin_mem_register: its arguments checked, its allocation exported. */
static purlin_status_t pl_reg_local(struct purlin_comm *comm, void *ptr, size_t bytes,
                                    pl_reg_offer_t *o) {
  const char *fn = "purlin_mem_register";
  cudaPointerAttributes at;
  CUdeviceptr base = 0;
  size_t size = 0;
  memset(o, 0, sizeof(*o));
  o->bytes = bytes;
  o->ptr = (uint64_t)(uintptr_t)ptr;
  o->device = comm->device;
  if (!ptr) return pl_comm_fail(comm, PURLIN_ERR_INVALID_ARGUMENT, "%s: ptr is NULL", fn);
  if (bytes == 0) return pl_comm_fail(comm, PURLIN_ERR_INVALID_ARGUMENT, "%s: bytes is 0", fn);
  if (cudaPointerGetAttributes(&at, ptr) != cudaSuccess || at.type != cudaMemoryTypeDevice) {
    (void)cudaGetLastError();
    return pl_comm_fail(comm, PURLIN_ERR_INVALID_ARGUMENT,
                        "%s: ptr %p is not device memory (cudaMalloc, PyTorch's allocator)", fn,
                        ptr);
  }
  if (at.device != comm->device)
    return pl_comm_fail(comm, PURLIN_ERR_INVALID_ARGUMENT,
                        "%s: ptr %p is memory of device %d, this rank's device is %d", fn, ptr,
                        at.device, comm->device);
  CUresult cr = pl_cu.cuMemGetAddressRange(&base, &size, (CUdeviceptr)(uintptr_t)ptr);
  if (cr != CUDA_SUCCESS)
    return pl_comm_fail(comm, PURLIN_ERR_INVALID_ARGUMENT, "%s: ptr %p: no allocation: %s", fn,
                        ptr, pl_cu_str(cr));
  o->off = (uint64_t)((uintptr_t)ptr - (uintptr_t)base);
  if (bytes > size - o->off)
    return pl_comm_fail(comm, PURLIN_ERR_INVALID_ARGUMENT,
                        "%s: [%p, +%zu) runs past the end of its allocation (%zu bytes from %p)",
                        fn, ptr, bytes, size, (void *)(uintptr_t)base);
  uintptr_t q = (uintptr_t)ptr;
  for (int i = 0; i < comm->nsyms; i++) {
    const pl_sym_t *s = &comm->syms[i];
    uintptr_t b = (uintptr_t)s->base[comm->rank];
    if (s->used && q < b + s->bytes && b < q + bytes)
      return pl_comm_fail(comm, PURLIN_ERR_INVALID_ARGUMENT,
                          "%s: [%p, +%zu) overlaps %s [%p, +%zu)", fn, ptr, bytes,
                          s->kind == PL_SYM_REG ? "a registered range" :
                                                  "a purlin_mem_alloc buffer (peer-mapped already)",
                          (void *)b, s->bytes);
  }
  cudaError_t e = cudaIpcGetMemHandle(&o->h, (void *)(uintptr_t)base);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return pl_comm_fail(comm, PURLIN_ERR_UNSUPPORTED,
                        "%s: ptr %p: CUDA IPC cannot export its allocation (%s); cudaMalloc memory "
                        "can, cuMem memory (PyTorch's expandable segments) cannot: use "
                        "purlin_mem_alloc or leave it unregistered (staged)", fn, ptr,
                        cudaGetErrorString(e));
  }
  return PURLIN_OK;
}

extern "C" purlin_status_t pl_cuda_mem_register(struct purlin_comm *comm, void *ptr,
                                                size_t bytes) {
  const char *fn = "purlin_mem_register";
  struct pl_cuda_dp *dp = comm->cuda;
  pl_reg_offer_t me, all[PL_MAX_WORLD];
  pl_devguard_t g;
  pl_dev_enter(comm, &g);
  int id = pl_sym_slot(comm, fn);
  purlin_status_t st = id < 0 ? PURLIN_ERR_NO_MEMORY : pl_reg_local(comm, ptr, bytes, &me);
  if (id < 0) memset(&me, 0, sizeof me);
  me.st = (int32_t)st;
  me.id = id;
  purlin_status_t bs = pl_bootstrap_allgather(comm->bs, &me, all, sizeof me);
  if (bs) {
    pl_dev_leave(comm, &g);
    return pl_comm_fail(comm, bs, "%s: %s", fn, pl_bootstrap_last_error(comm->bs));
  }
  if (!st)
    for (int r = 0; r < comm->world && !st; r++) {
      if (all[r].st)
        st = pl_comm_fail(comm, (purlin_status_t)all[r].st, "%s: rank %d failed (see its error)",
                          fn, r);
      else if (all[r].bytes != bytes)
        st = pl_comm_fail(comm, PURLIN_ERR_MISMATCH,
                          "%s: ranks disagree on bytes: rank %d has %zu, rank %d has %llu", fn,
                          comm->rank, bytes, r, (unsigned long long)all[r].bytes);
      else if (all[r].id != id)
        st = pl_comm_fail(comm, PURLIN_ERR_MISMATCH,
                          "%s: the ranks' tables of peer-mapped buffers differ (rank %d would use "
                          "slot %d, rank %d slot %d): allocate, register and free in the same "
                          "order on every rank", fn, comm->rank, id, r, (int)all[r].id);
    }
  if (st) {
    pl_dev_leave(comm, &g);
    return st;
  }
  /* every peer's allocation mapped here: a rank of this process on this device by its own pointer
   * (one address space; CUDA IPC refuses a handle of its own process), the others through CUDA
   * IPC */
  pl_vmm_t *v = &dp->syms[id];
  pl_sym_t *s = &comm->syms[id];
  memset(v, 0, sizeof(*v));
  memset(s, 0, sizeof(*s));
  pid_t self = getpid();
  for (int r = 0; r < comm->world && !st; r++) {
    if (r == comm->rank || (comm->pids[r] == self && all[r].device == comm->device)) {
      s->base[r] = (char *)(uintptr_t)all[r].ptr;
      continue;
    }
    if (comm->pids[r] == self) {
      st = pl_comm_fail(comm, PURLIN_ERR_UNSUPPORTED,
                        "%s: rank %d is in this process on another GPU (%d, this rank's is %d): "
                        "registration needs ranks of one process on one GPU, or one process per "
                        "GPU", fn, r, all[r].device, comm->device);
      break;
    }
    void *p = NULL;
    cudaError_t e = cudaIpcOpenMemHandle(&p, all[r].h, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      st = pl_comm_fail(comm, PURLIN_ERR_CUDA, "%s: mapping rank %d's memory (CUDA IPC): %s", fn,
                        r, cudaGetErrorString(e));
      break;
    }
    v->ipc[r] = p;
    s->base[r] = (char *)p + all[r].off;
  }
  if (!st) {
    s->bytes = bytes;
    s->used = 1;
    s->kind = PL_SYM_REG;
    st = pl_symtab_put(comm, id);
  }
  st = pl_agree(comm, st, fn);
  if (st) {
    memset(s, 0, sizeof(*s));
    (void)pl_symtab_put(comm, id);
    pl_ipc_close(v, comm->world);
  }
  pl_dev_leave(comm, &g);
  return st;
}

extern "C" purlin_status_t pl_cuda_mem_deregister(struct purlin_comm *comm, void *ptr) {
  /* no kernel of this rank still reads a peer's memory (pl_cuda_mem_free synchronizes the
   * device), then this rank's mappings of its peers' memory are closed; the barrier comes last,
   * so that when any rank returns (and may cudaFree its memory) every importer has closed it:
   * CUDA leaves a free before the importers' close undefined */
  purlin_status_t st2 = pl_cuda_mem_free(comm, ptr);
  purlin_status_t st = pl_bootstrap_barrier(comm->bs);
  if (st)
    return pl_comm_fail(comm, st, "purlin_mem_deregister: %s", pl_bootstrap_last_error(comm->bs));
  return st2;
}

extern "C" purlin_status_t pl_cuda_mem_alloc(struct purlin_comm *comm, size_t bytes, void **ptr) {
  struct pl_cuda_dp *dp = comm->cuda;
  pl_devguard_t g;
  purlin_status_t st;
  int id = pl_sym_slot(comm, "purlin_mem_alloc");
  if (id < 0) return PURLIN_ERR_NO_MEMORY;
  pl_dev_enter(comm, &g);
  st = pl_vmm_create(comm, &dp->syms[id], bytes);
  if (!st) {
    pl_sym_t *s = &comm->syms[id];
    pl_vmm_t *v = &dp->syms[id];
    for (int r = 0; r < comm->world; r++)
      s->base[r] = (char *)(uintptr_t)(v->va + (CUdeviceptr)r * v->size);
    s->bytes = bytes;
    s->mapped = v->size;
    s->used = 1;
    if ((st = pl_symtab_put(comm, id))) {
      memset(s, 0, sizeof(*s));
      pl_vmm_free(dp, v, comm->world);
    } else {
      *ptr = s->base[comm->rank];
    }
  }
  pl_dev_leave(comm, &g);
  return st;
}

extern "C" purlin_status_t pl_cuda_mem_free(struct purlin_comm *comm, void *ptr) {
  struct pl_cuda_dp *dp = comm->cuda;
  pl_devguard_t g;
  for (int i = 0; i < comm->nsyms; i++) {
    pl_sym_t *s = &comm->syms[i];
    if (!s->used || s->base[comm->rank] != ptr) continue;
    pl_dev_enter(comm, &g);
    cudaDeviceSynchronize(); /* no kernel of ours may still read it */
    (void)cudaGetLastError();
    memset(s, 0, sizeof(*s));
    purlin_status_t st = dp ? pl_symtab_put(comm, i) : PURLIN_OK;
    if (dp) pl_sym_release(dp, &dp->syms[i], comm->world, comm->rank);
    pl_dev_leave(comm, &g);
    return st;
  }
  return pl_comm_fail(comm, PURLIN_ERR_INVALID_ARGUMENT,
                      "purlin_mem_free: ptr %p was not returned by purlin_mem_alloc", ptr);
}

/* ---- errors recorded on the device ------------------------------------------------------------ */

static purlin_status_t pl_cuda_fatal(struct purlin_comm *comm) {
  struct pl_cuda_dp *dp = comm->cuda;
  const pl_cuda_err_t *e = dp->err_host;
  purlin_status_t st = (purlin_status_t)e->status;
  __atomic_thread_fence(__ATOMIC_ACQUIRE);
  comm->aborted = 1;
  if (!comm->async_error) comm->async_error = st;
  if (dp->fatal_seen) return st;
  dp->fatal_seen = 1;
  const char *coll = pl_coll_name(e->coll);
  unsigned long long call = (unsigned long long)e->call;
  if (st == PURLIN_ERR_TIMEOUT)
    return pl_comm_fail(comm, st, "%s (call #%llu): timed out after %d ms waiting for rank %d (%s)",
                        coll, call, comm->timeout_ms, e->peer, e->what);
  if (st == PURLIN_ERR_REMOTE) {
    uint64_t info = e->abort_info;
    int who = (int)(info & 0xffff) - 1, culprit = (int)(info >> 16 & 0xffff) - 1;
    int why = -(int)(info >> 32 & 0xff);
    char blame[48] = "";
    if (culprit >= 0) snprintf(blame, sizeof blame, " on rank %d", culprit);
    if (why == PURLIN_ERR_REMOTE && who == culprit && who >= 0 && who < comm->world)
      return pl_comm_fail(comm, st,
                          "%s (call #%llu): rank %d (pid %d) died: its process ended while the "
                          "communicator was in use",
                          coll, call, who, (int)comm->pids[who]);
    return pl_comm_fail(comm, st, "%s (call #%llu): rank %d aborted the communicator (%s%s)", coll,
                        call, who, purlin_status_name((purlin_status_t)why), blame);
  }
  return pl_comm_fail(comm, st, "%s (call #%llu): failed on the device (%s, rank %d)", coll, call,
                      e->what, e->peer);
}

extern "C" purlin_status_t pl_cuda_async_error(struct purlin_comm *comm) {
  struct pl_cuda_dp *dp = comm->cuda;
  if (!dp || !dp->err_host) return PURLIN_OK;
  const pl_cuda_err_t *e = dp->err_host;
  if (e->status) return pl_cuda_fatal(comm);
  purlin_status_t bst = pl_cuda_broken(comm);
  if (bst) return bst;
  uint32_t seq = e->mis_seq;
  if (seq == dp->mis_seen) return PURLIN_OK;
  __atomic_thread_fence(__ATOMIC_ACQUIRE);
  dp->mis_seen = seq;
  char idx[32] = "";
  if (e->mis_index >= 0) snprintf(idx, sizeof idx, "[%d]", e->mis_index);
  return pl_comm_fail(comm, PURLIN_ERR_MISMATCH,
                      "%s (call #%llu): ranks disagree on %s%s: rank %d has %llu, rank %d has %llu",
                      pl_coll_name(e->mis_coll), (unsigned long long)e->mis_call, e->mis_param, idx,
                      e->mis_rank_a, (unsigned long long)e->mis_val_a, e->mis_rank_b,
                      (unsigned long long)e->mis_val_b);
}

extern "C" void pl_cuda_abort(struct purlin_comm *comm, unsigned long long abort_info) {
  struct pl_cuda_dp *dp = comm->cuda;
  pl_devguard_t g;
  static const uint64_t one = 1;
  if (!dp || !comm->ws[0]) return;
  uint64_t info = abort_info;
  pl_dev_enter(comm, &g);
  for (int r = 0; r < comm->world; r++) {
    pl_ctrl_t *c = (pl_ctrl_t *)comm->ws[r];
    /* not into a dead rank's memory: under MPS it went with the process, and a copy there would
     * poison this process's CUDA context */
    if (__atomic_load_n(&dp->dead[r], __ATOMIC_ACQUIRE)) continue;
    cudaMemcpyAsync(&c->abort_info, &info, 8, cudaMemcpyHostToDevice, dp->abort_stream);
    cudaMemcpyAsync(&c->abort, &one, 8, cudaMemcpyHostToDevice, dp->abort_stream);
  }
  cudaStreamSynchronize(dp->abort_stream);
  (void)cudaGetLastError();
  pl_dev_leave(comm, &g);
}

/* ---- exit marks -------------------------------------------------------------------------------
 * A pidfd says that a process ended, not whether it died: a rank may finish its part of the last
 * call, destroy its communicator and exit while a peer's last kernel still runs (the host
 * datapath's waits tell the two apart by the awaited flag; the watchdog cannot see flags). So
 * each rank shares one host page (a memfd every rank maps) whose first word pl_cuda_fini sets once
 * this rank's work on the device is done. Host memory, because it stays readable in every mapping
 * after its process ended (under MPS a peer's device memory does not), and only its owner writes
 * it (a write into a peer that is exiting could poison the writer's CUDA context). */
/* Whether rank r has set its exit mark (0 without marks). */
static int pl_bye_set(const struct pl_cuda_dp *dp, int r) {
  return dp->bye[r] &&
         __atomic_load_n((const uint32_t *)(const void *)dp->bye[r], __ATOMIC_ACQUIRE);
}

static purlin_status_t pl_bye_create(struct purlin_comm *comm) {
  struct pl_cuda_dp *dp = comm->cuda;
  int fd = -1;
  purlin_status_t st = pl_agree(comm, pl_memfd(comm, "purlin-exit-mark", PL_BYE_BYTES, &fd),
                                "init: exit mark");
  if (!st) st = pl_agree(comm, pl_map_all(comm, fd, PL_BYE_BYTES, dp->bye),
                         "init: exit mark");
  if (fd >= 0) close(fd);
  return st;
}

/* ---- liveness watchdog ------------------------------------------------------------------------
 * A kernel cannot see a peer process die: without help, survivors wait for its flags until their
 * deadline (PURLIN_TIMEOUT_MS). This thread polls the peers' pidfds (the host datapath checks them
 * in its waits) and, when one becomes readable, raises the abort word of every live rank with the
 * dead rank as the culprit, so that every survivor's kernel stops within microseconds and reports
 * REMOTE naming the dead rank (NCCL's proxy thread watches its peers' sockets for the same end). */
static void *pl_cuda_watch(void *arg) {
  struct purlin_comm *comm = (struct purlin_comm *)arg;
  struct pl_cuda_dp *dp = comm->cuda;
  struct pollfd pfd[PL_MAX_WORLD + 1];
  int who[PL_MAX_WORLD + 1], n = 0;
  pfd[n].fd = dp->watch_pipe[0];
  pfd[n].events = POLLIN;
  who[n++] = -1;
  for (int r = 0; r < comm->world; r++)
    if (r != comm->rank && comm->pidfds[r] >= 0) {
      pfd[n].fd = comm->pidfds[r];
      pfd[n].events = POLLIN;
      who[n++] = r;
    }
  for (;;) {
    int k = poll(pfd, (nfds_t)n, -1);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 || pfd[0].revents) return NULL; /* stopped by pl_cuda_watch_stop */
    for (int i = 1; i < n; i++)
      if (pfd[i].revents) __atomic_store_n(&dp->dead[who[i]], 1, __ATOMIC_RELEASE);
    for (int i = 1; i < n; i++) { /* ended after its exit mark: left, not dead */
      int d = who[i];
      if (!pfd[i].revents || !pl_bye_set(dp, d))
        continue;
      int none = -1;
      __atomic_compare_exchange_n(&dp->left_rank, &none, d, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
      PL_INFO("rank %d (pid %d) destroyed its communicator and exited", d, (int)comm->pids[d]);
      pfd[i].fd = -1; /* poll skips it from now on */
      pfd[i].revents = 0;
    }
    for (int i = 1; i < n; i++)
      if (pfd[i].revents) {
        int d = who[i];
        __atomic_store_n(&dp->dead_rank, d, __ATOMIC_RELEASE);
        PL_WARN("rank %d (pid %d) has died: aborting the communicator", d, (int)comm->pids[d]);
        pl_cuda_abort(comm, (unsigned long long)(d + 1) | (unsigned long long)(d + 1) << 16 |
                                (unsigned long long)(-PURLIN_ERR_REMOTE & 0xff) << 32);
        return NULL; /* the communicator is aborted: nothing more to watch */
      }
  }
}

static void pl_cuda_watch_start(struct purlin_comm *comm) {
  struct pl_cuda_dp *dp = comm->cuda;
  dp->dead_rank = -1;
  dp->left_rank = -1;
  if (comm->world < 2 || pipe(dp->watch_pipe) != 0) return;
  if (pthread_create(&dp->watch, NULL, pl_cuda_watch, comm) != 0) {
    close(dp->watch_pipe[0]);
    close(dp->watch_pipe[1]);
    PL_WARN("no liveness watchdog (pthread_create failed): a dead peer is seen at the deadline");
    return;
  }
  dp->watch_on = 1;
}

static void pl_cuda_watch_stop(struct purlin_comm *comm) {
  struct pl_cuda_dp *dp = comm->cuda;
  if (!dp->watch_on) return;
  char c = 1;
  if (write(dp->watch_pipe[1], &c, 1) != 1) PL_WARN("watchdog: cannot wake it: %s", strerror(errno));
  pthread_join(dp->watch, NULL);
  close(dp->watch_pipe[0]);
  close(dp->watch_pipe[1]);
  dp->watch_on = 0;
}

/* After a CUDA call failed in this process: if the context is broken (a sticky error, as when a
 * dead peer's memory vanished under a running kernel under MPS), the communicator is unusable;
 * name the dead peer if there is one. 0 if the context is fine. */
static purlin_status_t pl_cuda_broken(struct purlin_comm *comm) {
  struct pl_cuda_dp *dp = comm->cuda;
  cudaError_t e = cudaStreamQuery(dp->abort_stream);
  if (e == cudaSuccess || e == cudaErrorNotReady) return PURLIN_OK;
  comm->aborted = 1;
  int d = __atomic_load_n(&dp->dead_rank, __ATOMIC_ACQUIRE);
  if (d < 0) d = __atomic_load_n(&dp->left_rank, __ATOMIC_ACQUIRE);
  if (d < 0) { /* the fault can come while the dead process is still exiting: give it 3 s */
    struct pollfd p[PL_MAX_WORLD];
    int who[PL_MAX_WORLD], n = 0;
    for (int r = 0; r < comm->world; r++)
      if (r != comm->rank && comm->pidfds[r] >= 0) {
        p[n].fd = comm->pidfds[r];
        p[n].events = POLLIN;
        p[n].revents = 0;
        who[n++] = r;
      }
    if (n && poll(p, (nfds_t)n, 3000) > 0)
      for (int i = 0; i < n && d < 0; i++)
        if (p[i].revents) d = who[i];
  }
  if (!comm->async_error) comm->async_error = d >= 0 ? PURLIN_ERR_REMOTE : PURLIN_ERR_CUDA;
  int clean = d >= 0 && pl_bye_set(dp, d);
  if (d >= 0)
    return pl_comm_fail(comm, PURLIN_ERR_REMOTE,
                        "rank %d (pid %d) %s, and this process's CUDA context failed with it (%s: "
                        "under MPS an ended process's memory is unmapped everywhere); the context "
                        "is unusable: end this process%s",
                        d, (int)comm->pids[d],
                        clean ? "destroyed its communicator and exited while this rank still read "
                                "its memory"
                              : "died",
                        cudaGetErrorString(e),
                        clean ? " (synchronise the ranks before destroying under MPS)" : "");
  return pl_comm_fail(comm, PURLIN_ERR_CUDA, "the CUDA context failed (%s); it is unusable",
                      cudaGetErrorString(e));
}

/* ---- one call --------------------------------------------------------------------------------- */

extern "C" purlin_status_t pl_cuda_check_counts(struct purlin_comm *comm, const void *p,
                                                const char *fn, const char *name) {
  cudaPointerAttributes at;
  memset(&at, 0, sizeof at);
  cudaError_t e = cudaPointerGetAttributes(&at, p);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return pl_comm_fail(comm, PURLIN_ERR_INVALID_ARGUMENT,
                        "%s: %s %p (opts.counts_on_device) is not device memory: %s", fn, name, p,
                        cudaGetErrorString(e));
  }
  if (at.type == cudaMemoryTypeManaged ||
      (at.type == cudaMemoryTypeHost && at.devicePointer == p))
    return PURLIN_OK;
  if (at.type == cudaMemoryTypeDevice && at.device == comm->device) return PURLIN_OK;
  if (at.type == cudaMemoryTypeDevice)
    return pl_comm_fail(comm, PURLIN_ERR_INVALID_ARGUMENT,
                        "%s: %s %p (opts.counts_on_device) is on device %d, not on the "
                        "communicator's device %d", fn, name, p, at.device, comm->device);
  return pl_comm_fail(comm, PURLIN_ERR_INVALID_ARGUMENT,
                      "%s: %s %p (opts.counts_on_device) is %s, not readable by device %d: "
                      "pass device (or managed, or mapped pinned) memory, or clear "
                      "counts_on_device", fn, name, p,
                      at.type == cudaMemoryTypeHost ? "pinned host memory not mapped at that "
                                                      "address"
                                                    : "host memory",
                      comm->device);
}

extern "C" purlin_status_t pl_cuda_run(struct purlin_comm *comm, const pl_call_t *call,
                                       const void *send, void *recv, int in_place, void *stream) {
  struct pl_cuda_dp *dp = comm->cuda;
  pl_devguard_t g;
  pl_cuda_args_t args;
  pl_snac_t *x = &args.x;
  if (dp->err_host->status) return pl_cuda_fatal(comm);
  int dead = __atomic_load_n(&dp->dead_rank, __ATOMIC_ACQUIRE);
  if (dead >= 0) {
    comm->aborted = 1;
    if (!comm->async_error) comm->async_error = PURLIN_ERR_REMOTE;
    return pl_comm_fail(comm, PURLIN_ERR_REMOTE, "%s: rank %d (pid %d) died: the communicator is "
                        "aborted", pl_coll_name(call->coll), dead, (int)comm->pids[dead]);
  }
  int left = __atomic_load_n(&dp->left_rank, __ATOMIC_ACQUIRE);
  if (left >= 0) /* launches nothing: no call can complete without that rank */
    return pl_comm_fail(comm, PURLIN_ERR_REMOTE, "%s: rank %d (pid %d) destroyed its communicator "
                        "and exited: no call of this communicator can complete; destroy it",
                        pl_coll_name(call->coll), left, (int)comm->pids[left]);
  memset(&args, 0, sizeof args);
  x->c = *call;
  /* device counts: x->c keeps the caller's device pointers; the kernel reads them (vcounts.h) */
  int dcounts = call->counts_dev;
  if (pl_coll_is_v(call->coll) && !dcounts) {
    const uint64_t *v[4] = {call->scounts, call->sdispls, call->rcounts, call->rdispls};
    for (int k = 0; k < 4; k++)
      if (v[k]) memcpy(args.v[k], v[k], sizeof(uint64_t) * (size_t)call->world);
  }
  if (!dcounts) {
    x->c.scounts = args.v[0]; /* host copies for the plan below; the device points at its own */
    x->c.sdispls = args.v[1];
    x->c.rcounts = args.v[2];
    x->c.rdispls = args.v[3];
  }
  x->geom = comm->geom;
  x->send = (const char *)send;
  x->recv = (char *)recv;
  x->in_place = in_place;
  memcpy(x->ws, comm->ws, sizeof(x->ws));
  if (dp->ce && pl_ce_takes(call)) { /* PURLIN_ATOM=ce: copy engines move the data (ce.cu) */
    pl_dev_enter(comm, &g);
    purlin_status_t cst = pl_ce_run(comm, dp->ce, &args, stream);
    pl_dev_leave(comm, &g);
    return cst;
  }
  pl_plan_make(&x->c, &x->geom, &comm->tune, &x->plan);
  /* Zero copy, as on the host datapath (host_exec.c): AllToAll in place must stage. */
  int a2a = call->coll == PL_COLL_ALL_TO_ALL || call->coll == PL_COLL_ALL_TO_ALL_V;
  if (dcounts && pl_param_int(PL_PARAM_ZERO_COPY)) {
    /* the extent read from send is known on the device only: offer the buffer's room there */
    uint64_t id, off;
    if (send && pl_sym_find(comm, send, 0, &id, &off) && comm->syms[id - 1].bytes > off) {
      x->sym_send[0] = id;
      x->sym_send[1] = off;
      args.zc_avail = comm->syms[id - 1].bytes - off;
    }
  } else if (pl_param_int(PL_PARAM_ZERO_COPY) && !(a2a && in_place)) {
    uint64_t in_bytes = 0;
    for (int d = 0; d < call->world; d++) {
      uint64_t e = pl_coll_is_reduce(call->coll)
                       ? pl_shard_in_off(&x->c, d) + pl_shard_bytes(&x->c, d)
                       : pl_gather_send_off(&x->c, d) + pl_gather_bytes_send(&x->c, d);
      if (e > in_bytes) in_bytes = e;
    }
    if (in_bytes && pl_sym_find(comm, send, in_bytes, &x->sym_send[0], &x->sym_send[1]))
      x->zc_send = 1;
    if (call->coll == PL_COLL_ALL_REDUCE && call->count &&
        pl_sym_find(comm, recv, call->count * call->esize, &x->sym_recv[0], &x->sym_recv[1]))
      x->zc_recv = 1;
  }
  /* AllToAllV on the direct kernel (tune.direct_a2av): every out-of-place call with host counts
   * whose blocks are not all packets. A rank knows only its own row and column of the counts, so
   * each rank decides for itself: one whose blocks are all packets runs the lean or tiny kernel
   * (pl_lean_takes), and the direct kernel exchanges packets with it (direct.cu, pl_direct_pkts);
   * the headers tell the direct ranks which peers those are. */
  uint64_t dpiece = 0, dslot = 0, drounds = 0; /* the direct kernel's plan (below) */
  /* (send != recv, not !in_place: a rank with nothing to move is "out of place" for the copies,
   * but its in-place peers do not take this kernel, so neither may it) */
  const int a2av_direct = call->coll == PL_COLL_ALL_TO_ALL_V && comm->tune.direct &&
                          comm->tune.direct_a2av && send != recv && !dcounts &&
                          !pl_lean_takes(x) &&
                          pl_direct_plan(call, args.v[2], x->geom.stg_half, &dpiece, &dslot,
                                         &drounds);
  /* (device counts: checked there; the direct AllToAllV: the device plans its rounds, and fails
   * on every rank alike when there are too many) */
  if (!dcounts && !a2av_direct && pl_snac_max_rounds(x) >= PL_EPOCH_STRIDE - 2)
    return pl_comm_fail(comm, PURLIN_ERR_UNSUPPORTED,
                        "%s: a block needs more than 2^24 rounds of %llu bytes: raise "
                        "PURLIN_STAGING_BYTES", pl_coll_name(call->coll),
                        (unsigned long long)x->plan.chunk);
  /* main lanes, then stager lanes when anything is staged */
  /* (device counts: unknown here, so always; a stager with nothing to stage returns at once) */
  int stages = dcounts || pl_snac_stage_rounds(x) > 0;
  int grid = x->plan.lanes * (stages ? 2 : 1);
  /* threads: a call that only moves packets runs its control flow in fewer warps (the fixed
   * cost of a small call is mostly that control flow, per warp: docs/tuning.md) */
  int threads = (int)(stages ? comm->tune.threads : comm->tune.lat_threads);
  /* Calls that move only packets run the lean packet kernel (lean.cu): one CTA per
   * threads * lean_pkts packets of work, at most lean_ctas; at least a thread per rank (threads
   * 0..world-1 compute the per-peer numbers and take the headers) */
  int lean = comm->tune.lean && !(comm->tune.lean == 2 && pl_coll_is_v(call->coll)) &&
             !a2av_direct && pl_lean_takes(x);
  if (lean) {
    threads = threads > PL_LEAN_THREADS ? PL_LEAN_THREADS : threads;
    if (threads < call->world) threads = (call->world + 31) / 32 * 32; /* <= 96 <= PL_LEAN_THREADS */
    uint64_t per = (uint64_t)threads * (comm->tune.lean_pkts ? comm->tune.lean_pkts : 4);
    uint64_t want = (pl_lean_work_packets(x) + per - 1) / per;
    uint64_t most = comm->tune.lean_ctas ? comm->tune.lean_ctas : (uint64_t)x->plan.lanes;
    grid = want < 1 ? 1 : want > most ? (int)most : (int)want;
  }
  /* Of those, the small calls run the tiny kernels (lean.cu, the same wire format): a CTA per
   * threads * tiny_words words of the largest block, at most lean_ctas */
  const int tiny = lean && comm->tune.tiny && pl_tiny_takes(x, comm->tune.tiny_max);
  if (tiny && pl_coll_is_v(call->coll)) pl_tinyv_args(x, &args);
  if (tiny) {
    uint64_t per = (uint64_t)threads * (comm->tune.tiny_words ? comm->tune.tiny_words : 1);
    uint64_t want = ((pl_tiny_block_bytes(x) + 7) / 8 + per - 1) / per;
    uint64_t most = comm->tune.lean_ctas ? comm->tune.lean_ctas : (uint64_t)x->plan.lanes;
    grid = want < 1 ? 1 : want > most ? (int)most : (int)want;
  }
  /* Calls of the collectives the direct kernel runs that the lean kernel does not take run the
   * direct kernel (direct.cu): every rank's CTA c reads part c of its peers' purlin_mem_alloc
   * buffers, or of their staging where a peer's buffer is not peer-mapped (that peer copies its
   * input there first); a CTA per direct_cta_bytes of the call, at most direct_ctas, in rounds
   * that fit a staging half (pl_direct_plan). Everything it depends on is the same on every rank
   * (the call's counts, the tuning, the staging size), so every rank takes it or none. */
  int direct = 0;
  if (!lean && comm->tune.direct && pl_direct_coll(call->coll, in_place, dcounts) &&
      (call->coll == PL_COLL_ALL_TO_ALL_V
           ? a2av_direct /* planned above */
           : pl_direct_plan(call, args.v[2], x->geom.stg_half, &dpiece, &dslot, &drounds))) {
    uint64_t S = call->count * call->esize; /* nccl-tests' size */
    if (call->coll == PL_COLL_ALL_GATHER_V || call->coll == PL_COLL_REDUCE_SCATTER_V)
      for (int d = (int)(S = 0); d < call->world; d++) S += args.v[2][d] * call->esize;
    else if (call->coll != PL_COLL_ALL_REDUCE)
      S *= (uint64_t)call->world;
    if (S >= comm->tune.direct_min || a2av_direct) {
      uint64_t per = comm->tune.direct_cta_bytes ? comm->tune.direct_cta_bytes : 1;
      /* AllToAllV: every rank's grid the same (CTA c pairs with CTA c of every peer) */
      uint64_t want = a2av_direct ? comm->tune.direct_ctas : (S + per - 1) / per;
      direct = 1;
      grid = want < 1 ? 1 : want > comm->tune.direct_ctas ? (int)comm->tune.direct_ctas : (int)want;
      threads = PL_DIRECT_THREADS;
    }
  }
  /* ReduceScatterV on the direct kernel: its output peer-mapped too, so that it may spread the
   * reduction over the ranks (direct.cu, pl_direct_spread; only where every rank's input and
   * output is, which the headers tell every rank alike) */
  if (direct && call->coll == PL_COLL_REDUCE_SCATTER_V && x->zc_send && comm->tune.direct_push &&
      args.v[2][call->rank] &&
      pl_sym_find(comm, recv, args.v[2][call->rank] * call->esize, &x->sym_recv[0],
                  &x->sym_recv[1]))
    x->zc_recv = 1;
  /* AllToAllV on the direct kernel likewise (pl_direct_a2av_spread: every rank's input and output
   * peer-mapped, every rank's rdispls packed; every rank on one GPU: args.dpush below), its
   * output's extent from its recv counts */
  const int a2av_spread = comm->tune.direct_push && dp->ranks_here == comm->world;
  if (direct && call->coll == PL_COLL_ALL_TO_ALL_V && a2av_spread) {
    uint64_t out_bytes = 0; /* (a rank that sends nothing counts as zero copy: pl_direct_peers) */
    for (int s = 0; s < call->world; s++)
      if (args.v[2][s] && (args.v[3][s] + args.v[2][s]) * call->esize > out_bytes)
        out_bytes = (args.v[3][s] + args.v[2][s]) * call->esize;
    if (out_bytes && pl_sym_find(comm, recv, out_bytes, &x->sym_recv[0], &x->sym_recv[1]))
      x->zc_recv = 1;
  }
  PL_TRACE("%s: count %llu: %s kernel, %d CTAs of %d threads", pl_coll_name(call->coll),
           (unsigned long long)call->count,
           direct ? "direct" : tiny ? "tiny" : lean ? "lean packet" : "SNAC",
           grid, threads);
  if (!dcounts) x->c.scounts = x->c.sdispls = x->c.rcounts = x->c.rdispls = NULL;
  args.state = dp->state;
  args.hdr = dp->hdr;
  args.scratch = dp->scratch;
  args.symtab = dp->symtab;
  args.err = dp->err_dev;
  args.timeout_ns = (uint64_t)comm->timeout_ms * 1000000ull;
  args.prof = pl_param_int(PL_PARAM_PROFILE) > 0;
  args.backoff_ns = (uint32_t)comm->tune.backoff_ns;
  args.ar_per = call->coll == PL_COLL_ALL_REDUCE
                    ? pl_ar_shard_per(call->count, call->esize, call->world) : 0;
  args.dflags = (char *)(uintptr_t)dp->dflags.va;
  args.dflags_stride = dp->dflags.size;
  args.dunroll = (int)comm->tune.direct_unroll;
  args.dredb = (int)comm->tune.direct_red_batch;
  args.dstream = (int)comm->tune.direct_stream;
  args.dqueue = comm->tune.direct_queue ? comm->tune.direct_queue_bytes : 0;
  args.dalign = (uint32_t)comm->tune.direct_align;
  /* AllToAllV's push is its spread (direct.cu, pl_direct_a2av_spread): a rank copies blocks
   * between two other ranks, which on separate GPUs crosses its links twice where the receiver's
   * own read crosses one; so only where every rank shares one GPU's memory (ranks_here: the same
   * on every rank) */
  args.dpush = call->coll == PL_COLL_ALL_TO_ALL_V ? a2av_spread : (int)comm->tune.direct_push;
  args.dpiece = dpiece;
  args.dslot = dslot;
  args.drounds = drounds;
  pl_dev_enter(comm, &g);
  /* Programmatic dependent launch (sm_90+): this kernel may start while the stream's previous
   * kernel finishes (a lean kernel lets its dependents start once its packets are pushed); it
   * waits for that kernel's completion before its first access of memory (docs/gpu.md). Only
   * while this call's and the previous one's CTAs of every rank on this GPU fit its SMs at once
   * (one CTA per SM): a rank's early CTAs must never keep a peer's kernel from its SMs. And only
   * for one-CTA calls: with several CTAs it measured slower (docs/tuning.md, finding 15); only a
   * one-CTA call releases its dependents early. (last_lean_grid is this communicator's: another
   * communicator on the same stream is covered by pdl_cap's one rank per GPU by default.) */
  int one = lean && grid == 1 && dp->pdl_cap;
  int pdl = one && (int64_t)(1 + dp->last_lean_grid) * dp->ranks_here <= dp->sms;
  if (lean) dp->last_lean_grid = grid;
  args.pdl = (pdl ? PL_PDL_WAIT : 0) | (one ? PL_PDL_RELEASE : 0);
  cudaError_t e = direct ? pl_cuda_direct_launch(&args, grid, (cudaStream_t)stream)
                  : tiny ? pl_cuda_tiny_launch(&args, grid, threads, pdl, (cudaStream_t)stream)
                  : lean ? pl_cuda_lean_launch(&args, grid, threads, pdl, (cudaStream_t)stream)
                         : dp->launch(&args, grid, threads, (cudaStream_t)stream);
  pl_dev_leave(comm, &g);
  comm->epoch++;
  if (e != cudaSuccess)
    return pl_comm_fail(comm, PURLIN_ERR_CUDA, "%s: kernel launch on device %d failed: %s%s",
                        pl_coll_name(call->coll), comm->device, cudaGetErrorString(e),
                        e == cudaErrorNoKernelImageForDevice
                            ? " (rebuild with this GPU in CMAKE_CUDA_ARCHITECTURES)"
                            : "");
  return PURLIN_OK;
}

/* ---- device handles (include/purlin_device.cuh) ---------------------------------------------- */

extern "C" purlin_status_t purlin_device_handle(purlin_comm_t comm, void *buf, size_t bytes,
                                                purlin_dev_handle_t *handle) {
  purlin_dev_handle_t h;
  uint64_t id = 0, off = 0;
  if (!comm) {
    pl_set_global_error("purlin_device_handle: comm is NULL");
    return PURLIN_ERR_INVALID_ARGUMENT;
  }
  if (!handle)
    return pl_comm_fail(comm, PURLIN_ERR_INVALID_ARGUMENT,
                        "purlin_device_handle: handle (the output) is NULL");
  if (comm->datapath != PURLIN_DATAPATH_CUDA || !comm->cuda || !comm->cuda->uflags.va)
    return pl_comm_fail(comm, PURLIN_ERR_UNSUPPORTED,
                        "purlin_device_handle: needs the CUDA datapath");
  if (comm->aborted)
    return pl_comm_fail(comm, PURLIN_ERR_INVALID_USAGE,
                        "purlin_device_handle: the communicator was aborted; destroy it");
  if ((buf || bytes) && (!buf || !pl_sym_find(comm, buf, bytes, &id, &off)))
    return pl_comm_fail(comm, PURLIN_ERR_INVALID_ARGUMENT,
                        "purlin_device_handle: [%p, +%zu) is not inside a buffer from "
                        "purlin_mem_alloc or a range from purlin_mem_register of this "
                        "communicator", buf, bytes);
  const pl_vmm_t *f = &comm->cuda->uflags;
  memset(&h, 0, sizeof h);
  h.rank = comm->rank;
  h.world = comm->world;
  h.bytes = buf ? bytes : 0;
  for (int r = 0; r < comm->world; r++) {
    if (buf) h.peer[r] = comm->syms[id - 1].base[r] + off;
    h.flags[r] = (uint64_t *)(uintptr_t)(f->va + (CUdeviceptr)r * f->size + 64);
  }
  h.nflags = (PL_DEV_FLAGS_BYTES - 64) / 8;
  h.seq = (uint64_t *)(uintptr_t)(f->va + (CUdeviceptr)comm->rank * f->size);
  h.seq_count = (uint32_t *)(h.seq + 1);
  h.abort = &((const pl_ctrl_t *)comm->ws[comm->rank])->abort;
  h.timeout_ns = (uint64_t)comm->timeout_ms * 1000000ull;
  *handle = h;
  return PURLIN_OK;
}
