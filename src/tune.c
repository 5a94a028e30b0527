/* tune.c -- codesign tables: the knobs every rank must agree on, per datapath and world size, with
 * environment overrides (PURLIN_LATENCY_MAX_BYTES, PURLIN_ONESHOT_MAX_BYTES, PURLIN_CHUNK_BYTES,
 * PURLIN_LANES). */
#include "param.h"
#include "tune.h"

void pl_tune_get(purlin_datapath_t datapath, int world, pl_tune_t *t) {
  /* Host datapath: packets cost a flag per 8 bytes, so they pay only for small blocks; chunks
   * large enough to amortise a wake-up. */
  t->lat_max = 16 * 1024;
  t->oneshot_max = world <= 4 ? 16 * 1024 : 8 * 1024;
  t->chunk_max = 256 * 1024;
  /* Lanes: independent pipelines per role (host: threads; GPU: CTAs, 2 L per call). 1 on both
   * datapaths for now; the CUDA value is to be set from measurements on the GPU. */
  t->lanes = 1;
  (void)datapath;
  int64_t v;
  if ((v = pl_param_int(PL_PARAM_LATENCY_MAX_BYTES)) > 0) t->lat_max = (uint64_t)v;
  if ((v = pl_param_int(PL_PARAM_ONESHOT_MAX_BYTES)) > 0) t->oneshot_max = (uint64_t)v;
  if ((v = pl_param_int(PL_PARAM_CHUNK_BYTES)) > 0) t->chunk_max = (uint64_t)v;
  if ((v = pl_param_int(PL_PARAM_LANES)) > 0)
    t->lanes = v > PL_MAX_LANES ? PL_MAX_LANES : (uint64_t)v;
}
