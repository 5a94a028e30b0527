/* device_bcast.cu -- a collective of your own from purlin's device primitives: a broadcast from a
 * root, the one docs/device-api.md builds step by step, then checked element by element for every
 * root and several sizes, and timed.
 *
 *   purlinrun -n 4 build/examples/device_bcast
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "purlin.h"
#include "purlin_device.cuh"

/* ---- the collective (docs/device-api.md) ---------------------------------------------------------- */

#define BCAST_READY 4096 /* flag slot: "root's buffer holds the data" */
#define BCAST_DONE 4097  /* flag slots BCAST_DONE + r: "rank r has finished reading it" */

/* Every rank's buffer (h.peer[r], h.bytes) ends up with the bytes of root's. */
__global__ void bcast_kernel(const __grid_constant__ purlin_dev_handle_t h, int root) {
  uint64_t seq = purlin_dev_seq_begin_thread(&h), v = seq + 1; /* grows, same on every rank */
  uint64_t deadline = purlin_dev_deadline_thread(&h, 0);       /* PURLIN_TIMEOUT_MS from now */
  /* 1. root: the data were written before this launch; tell every rank (release, system scope) */
  if (h.rank == root && blockIdx.x == 0)
    for (int r = threadIdx.x; r < h.world; r += blockDim.x)
      purlin_dev_publish_thread(h.flags[r] + BCAST_READY, v);
  /* 2. the others: wait for root's flag (acquire), then pull this block's share of root's buffer */
  if (h.rank != root) {
    if (purlin_dev_await_block(&h, h.flags[h.rank] + BCAST_READY, v, deadline)) return;
    uint64_t per = (h.bytes / gridDim.x + 16) & ~(uint64_t)15, off = per * blockIdx.x;
    if (off < h.bytes)
      purlin_dev_copy_block((char *)h.peer[h.rank] + off, (const char *)h.peer[root] + off,
                            h.bytes - off < per ? h.bytes - off : per);
  }
  /* 3. the last block of each rank says "done reading"; root waits for all, so that nothing it
   *    writes into its buffer after this launch can reach a reader of this one */
  if (purlin_dev_seq_end_block(&h, seq)) {
    if (threadIdx.x == 0) purlin_dev_publish_thread(h.flags[root] + BCAST_DONE + h.rank, v);
    if (h.rank == root)
      for (int r = threadIdx.x; r < h.world; r += blockDim.x)
        (void)purlin_dev_await_thread(&h, h.flags[root] + BCAST_DONE + r, v, deadline);
  }
}

/* ---- the test ------------------------------------------------------------------------------------- */

#define CK(call)                                                                                   \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) {                                                                       \
      fprintf(stderr, "rank %d: %s: %s\n", rank, #call, cudaGetErrorString(e_));                   \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)
#define PK(call)                                                                                   \
  do {                                                                                             \
    purlin_status_t s_ = (call);                                                                   \
    if (s_ != PURLIN_OK) {                                                                         \
      fprintf(stderr, "rank %d: %s: %s\n  %s\n", rank, #call, purlin_status_name(s_),              \
              purlin_comm_last_error(comm));                                                       \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

static unsigned char pat(size_t i, int root, size_t bytes) {
  return (unsigned char)(i * 131u + (size_t)root * 17u + bytes * 7u + (i >> 13));
}

int main(void) {
  int rank = 0, world = 0, ndev = 0;
  purlin_comm_t comm = NULL;
  const char *lr = getenv("PURLIN_LOCAL_RANK");
  CK(cudaGetDeviceCount(&ndev));
  CK(cudaSetDevice((lr ? atoi(lr) : 0) % ndev));
  PK(purlin_comm_init_env(&comm, NULL));
  PK(purlin_comm_rank(comm, &rank));
  PK(purlin_comm_size(comm, &world));
  const size_t sizes[] = {1, 15, 4096, (1u << 20) + 3, 64u << 20};
  const size_t maxb = 64u << 20;
  const int grid = 16;
  char *buf = NULL;
  unsigned char *host = (unsigned char *)malloc(maxb);
  PK(purlin_mem_alloc(comm, maxb, (void **)&buf));
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  size_t checked = 0, bad = 0;
  if (rank == 0)
    printf("device_bcast: world %d, grid %d x 512\n%12s %6s %10s %10s %s\n", world, grid, "bytes",
           "root", "us", "GB/s", "check");
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    size_t bytes = sizes[k];
    purlin_dev_handle_t h;
    PK(purlin_device_handle(comm, buf, bytes, &h));
    for (int root = 0; root < world; root++) {
      for (size_t i = 0; i < bytes; i++) host[i] = rank == root ? pat(i, root, bytes) : 0xee;
      /* on the kernel's stream: a cudaMemcpy from pageable memory may return before its DMA
       * lands, and the legacy stream does not order a non-blocking one */
      CK(cudaMemcpyAsync(buf, host, bytes, cudaMemcpyHostToDevice, st));
      CK(cudaStreamSynchronize(st));
      bcast_kernel<<<grid, 512, 0, st>>>(h, root);
      CK(cudaStreamSynchronize(st));
      CK(cudaMemcpy(host, buf, bytes, cudaMemcpyDeviceToHost));
      size_t wrong = 0;
      for (size_t i = 0; i < bytes; i++) wrong += host[i] != pat(i, root, bytes);
      checked += bytes;
      bad += wrong;
      if (wrong)
        printf("rank %d: %zu bytes from root %d: FAIL: %zu wrong\n", rank, bytes, root, wrong);
      /* time 20 broadcasts (every rank reloads nothing: the data are already everywhere) */
      const int iters = 20;
      CK(cudaEventRecord(e0, st));
      for (int i = 0; i < iters; i++) bcast_kernel<<<grid, 512, 0, st>>>(h, root);
      CK(cudaEventRecord(e1, st));
      CK(cudaEventSynchronize(e1));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      double us = ms * 1000.0 / iters;
      if (rank == 0 && (root == 0 || root == world - 1))
        printf("%12zu %6d %10.2f %10.2f %s\n", bytes, root, us, bytes / us / 1e3,
               wrong ? "FAIL" : "ok");
    }
  }
  purlin_status_t as = PURLIN_OK;
  PK(purlin_comm_get_async_error(comm, &as));
  printf("rank %d: device_bcast: %s (%zu bytes checked, %zu wrong)\n", rank,
         bad || as ? "FAIL" : "PASS", checked, bad);
  PK(purlin_mem_free(comm, buf));
  purlin_comm_destroy(comm);
  free(host);
  return bad || as ? 1 : 0;
}
