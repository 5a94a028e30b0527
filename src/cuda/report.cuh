/* report.cuh -- a CTA's shared state at the start of a call (pl_dev_sh_setup), and thread 0 of a
 * failed CTA recording the failure where the host reads it and aborting
 * every rank on a fatal error: shared by the SNAC kernel (kernel_body.cuh) and the copy-engine
 * atom's flag kernels (ce.cu). Include after the atom (atom_cuda.cuh) and snac/snac.h. */
#ifndef PL_CUDA_REPORT_CUH
#define PL_CUDA_REPORT_CUH

/* Thread 0, at a kernel's start, once sh->x holds the call: where lane sh->x.lane keeps the
 * received headers (shared memory when they fit, world <= 17: SNAC reads them often, and global
 * loads cost ~0.5 us each), the V counts' pointers into sh->v, and a clear error record. */
static __device__ void pl_dev_sh_setup(pl_cuda_sh_t *sh, const pl_cuda_args_t *args,
                                       uint64_t *hdr_sh) {
  pl_snac_t *x = &sh->x;
  uint64_t hw = (uint64_t)x->c.world * pl_hdr_words(x->c.world);
  x->hdr = hw <= PL_CUDA_SH_HDR_WORDS ? hdr_sh : args->hdr + (uint64_t)x->lane * hw;
  x->c.scounts = sh->v[0];
  x->c.sdispls = sh->v[1];
  x->c.rcounts = sh->v[2];
  x->c.rdispls = sh->v[3];
  sh->err = 0;
  sh->err_peer = -1;
  sh->err_what = NULL;
}

/* Thread 0, after a failure of this CTA: record it where the host reads it, stop the other CTAs,
 * and on a fatal error abort every rank (as pl_comm_abort_all does on the host). x: the call
 * (c, lane, epoch, ws, mismatch); err_peer, err_what: the failed wait's peer and what it awaited. */
static __device__ void pl_dev_report_x(const pl_cuda_args_t *args, const pl_snac_t *x,
                                       int err_peer, const char *err_what, int st) {
  pl_cuda_err_t *e = args->err;
  int w = x->c.world, r = x->c.rank;
  pl_ctrl_t *me = pl_snac_ctrl(x, r);
  if (st == PL_CUDA_STOP_SIBLING) return;
  if (st == PURLIN_ERR_MISMATCH) {
    if (x->lane) return; /* every main lane reaches the same verdict: lane 0 records it */
    const char *p = x->mismatch.param;
    int i = 0;
    for (; p && p[i] && i < (int)sizeof e->mis_param - 1; i++) e->mis_param[i] = p[i];
    e->mis_param[i] = 0;
    e->mis_index = x->mismatch.index;
    e->mis_rank_a = x->mismatch.rank_a;
    e->mis_rank_b = x->mismatch.rank_b;
    e->mis_val_a = x->mismatch.val_a;
    e->mis_val_b = x->mismatch.val_b;
    e->mis_call = x->epoch;
    e->mis_coll = x->c.coll;
    __threadfence_system();
    e->mis_seq = e->mis_seq + 1;
    __threadfence_system();
    pl_st_release_sys(&me->err_epoch, x->epoch + 1);
    return;
  }
  if (atomicCAS(&args->state->err_claim, 0, 1) == 0) {
    const char *p = err_what;
    int i = 0;
    for (; p && p[i] && i < (int)sizeof e->what - 1; i++) e->what[i] = p[i];
    e->what[i] = 0;
    e->peer = err_peer;
    e->coll = x->c.coll;
    e->call = x->epoch;
    e->abort_info = pl_ld_acquire_sys(&me->abort_info);
    __threadfence_system();
    e->status = st;
    __threadfence_system();
  }
  pl_st_release_sys(&me->err_epoch, x->epoch + 1);
  if (st == PURLIN_ERR_REMOTE) return; /* someone else aborted: every rank knows already */
  uint64_t info = (uint64_t)(r + 1) | (uint64_t)(err_peer + 1) << 16 |
                  (uint64_t)(-st & 0xff) << 32;
  for (int i = 0; i < w; i++) {
    pl_ctrl_t *c = pl_snac_ctrl(x, (r + i) % w);
    atomicCAS_system((unsigned long long *)&c->abort_info, 0ull, (unsigned long long)info);
    pl_st_release_sys(&c->abort, 1);
  }
}
/* The same for a CTA whose shared state is a pl_cuda_sh_t (SNAC's kernel, ce.cu's). */
static __device__ void pl_dev_report(const pl_cuda_args_t *args, pl_cuda_sh_t *sh, int st) {
  pl_dev_report_x(args, &sh->x, sh->err_peer, sh->err_what, st);
}

/* PURLIN_PROFILE, thread 0 of the stamping CTA after a call that succeeded: t[0..4] are the
 * call's start and the ends of its prologue, notify, agree and consume. Only a call that started
 * within PL_PROF_GAP_NS of the previous call's end counts (back to back, as in graph replay: an
 * eager call after a host pause waits for its peers to arrive, which is not its cost): its gap
 * since that end and its phases are added to the device state; every call counts in prof_seen.
 * data: when the lean kernel's thread 0 had its first packets of consume (0: not stamped). */
static __device__ __noinline__ void pl_dev_prof_add(pl_cuda_state_t *ps, const uint64_t *t,
                                                    uint64_t data) {
  uint64_t end = pl_globaltimer(), prev = ps->prof_last_exit;
  ps->prof_seen++;
  ps->prof_last_exit = end;
  if (!prev || t[0] <= prev || t[0] - prev >= PL_PROF_GAP_NS) return;
  ps->prof_sum[0] += t[0] - prev;
  for (int i = 1; i < PL_PROF_N - 1; i++) ps->prof_sum[i] += t[i] - t[i - 1];
  ps->prof_sum[PL_PROF_N - 1] += end - t[PL_PROF_N - 2];
  if (data >= t[3] && data <= t[4]) {
    ps->prof_data += data - t[3];
    ps->prof_data_calls++;
  }
  ps->prof_calls++;
}

#endif
