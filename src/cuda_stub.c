/* cuda_stub.c -- the CUDA datapath's entry points in a build without nvcc: nothing is available,
 * every call answers PURLIN_ERR_UNSUPPORTED. */
#include "cuda/cuda_dp.h"

#ifndef PURLIN_HAVE_CUDA
#include "comm.h"

int pl_cuda_available(void) { return 0; }

purlin_status_t pl_cuda_init(struct purlin_comm *comm, size_t staging_bytes) {
  (void)staging_bytes;
  return pl_comm_fail(comm, PURLIN_ERR_UNSUPPORTED,
                      "init: the CUDA datapath is not in this build (built without nvcc)");
}
void pl_cuda_fini(struct purlin_comm *comm) { (void)comm; }
purlin_status_t pl_cuda_run(struct purlin_comm *comm, const pl_call_t *call, const void *send,
                            void *recv, int in_place, void *stream) {
  (void)call, (void)send, (void)recv, (void)in_place, (void)stream;
  return pl_comm_fail(comm, PURLIN_ERR_UNSUPPORTED, "the CUDA datapath is not in this build");
}
purlin_status_t pl_cuda_check_counts(struct purlin_comm *comm, const void *p, const char *fn,
                                     const char *name) {
  (void)p, (void)fn, (void)name;
  return pl_comm_fail(comm, PURLIN_ERR_UNSUPPORTED, "the CUDA datapath is not in this build");
}
purlin_status_t pl_cuda_mem_alloc(struct purlin_comm *comm, size_t bytes, void **ptr) {
  (void)bytes, (void)ptr;
  return pl_comm_fail(comm, PURLIN_ERR_UNSUPPORTED, "the CUDA datapath is not in this build");
}
purlin_status_t pl_cuda_mem_free(struct purlin_comm *comm, void *ptr) {
  (void)ptr;
  return pl_comm_fail(comm, PURLIN_ERR_UNSUPPORTED, "the CUDA datapath is not in this build");
}
purlin_status_t pl_cuda_mem_register(struct purlin_comm *comm, void *ptr, size_t bytes) {
  (void)ptr, (void)bytes;
  return pl_comm_fail(comm, PURLIN_ERR_UNSUPPORTED, "the CUDA datapath is not in this build");
}
purlin_status_t pl_cuda_mem_deregister(struct purlin_comm *comm, void *ptr) {
  (void)ptr;
  return pl_comm_fail(comm, PURLIN_ERR_UNSUPPORTED, "the CUDA datapath is not in this build");
}
purlin_status_t pl_cuda_async_error(struct purlin_comm *comm) {
  (void)comm;
  return PURLIN_OK;
}
void pl_cuda_abort(struct purlin_comm *comm, unsigned long long abort_info) {
  (void)comm, (void)abort_info;
}
purlin_status_t purlin_device_handle(purlin_comm_t comm, void *buf, size_t bytes,
                                     purlin_dev_handle_t *handle) {
  (void)buf, (void)bytes, (void)handle;
  if (!comm) {
    pl_set_global_error("purlin_device_handle: comm is NULL");
    return PURLIN_ERR_INVALID_ARGUMENT;
  }
  return pl_comm_fail(comm, PURLIN_ERR_UNSUPPORTED,
                      "purlin_device_handle: the CUDA datapath is not in this build");
}
#else
typedef int pl_cuda_stub_unused_t; /* ISO C wants a non-empty translation unit */
#endif
