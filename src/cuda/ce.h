/* ce.h -- the copy-engine atom (PURLIN_ATOM=ce, ce.cu), as cuda_dp.cu sees it: gather collectives
 * whose payload moves with cudaMemcpyAsync (copy engines), no SM touching it. CUDA C++ only. */
#ifndef PL_CUDA_CE_H
#define PL_CUDA_CE_H

#include "cuda/cuda_int.h"
#include "layout.h"
#include "purlin.h"

struct purlin_comm;
struct pl_ce;

/* Collective, at init, after the workspace is mapped and zeroed: every rank says whether it asked
 * for the ce atom (`on`); all must agree (INVALID_USAGE naming the ranks otherwise). When on, makes
 * the side streams and events the copies fork onto; *out is NULL when off. */
purlin_status_t pl_ce_init(struct purlin_comm *comm, int on, pl_cuda_state_t *state, uint64_t *hdr,
                           pl_cuda_err_t *err, struct pl_ce **out);
void pl_ce_fini(struct pl_ce *ce);

/* Does the ce atom run this call? Gather collectives with host counts (device counts: the host
 * does not know the sizes the copies need, so the SM kernel runs them). */
int pl_ce_takes(const pl_call_t *call);

/* Enqueue the call on `stream` (args: the call as pl_cuda_run filled it up to the plan: x.c with
 * host V arrays, send, recv, in_place, ws, geom). Advances comm->epoch by the number of
 * sequences. Run with the communicator's device current. */
purlin_status_t pl_ce_run(struct purlin_comm *comm, struct pl_ce *ce, pl_cuda_args_t *args,
                          void *stream);

#endif
