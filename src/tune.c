/* tune.c -- codesign tables: the knobs every rank must agree on, per datapath and world size, with
 * environment overrides (PURLIN_LATENCY_MAX_BYTES, PURLIN_ONESHOT_MAX_BYTES,
 * PURLIN_TWOSHOT_MAX_BYTES, PURLIN_PACKET_BYTES, PURLIN_CHUNK_BYTES, PURLIN_LANES,
 * PURLIN_STAGING_BYTES, PURLIN_THREADS, PURLIN_LEAN*, PURLIN_DIRECT*). */
#include <stddef.h>

#include "param.h"
#include "tune.h"

/* One knob into t, from the table or the environment, with the environment's clamps. */
static void pl_tune_set(pl_tune_t *t, int id, int64_t v) {
  const uint64_t u = (uint64_t)v;
  switch (id) {
  case PL_PARAM_LATENCY_MAX_BYTES: t->lat_max = u; break;
  case PL_PARAM_ONESHOT_MAX_BYTES: t->oneshot_max = u; break;
  case PL_PARAM_TWOSHOT_MAX_BYTES: t->twoshot_max = u; break;
  case PL_PARAM_CHUNK_BYTES: t->chunk_max = u; break;
  case PL_PARAM_STAGING_BYTES: t->staging_bytes = u; break;
  case PL_PARAM_LANE_BYTES: t->lane_bytes = u; break;
  case PL_PARAM_POLL_BACKOFF_NS: t->backoff_ns = u; break;
  case PL_PARAM_LEAN: t->lean = v == 2 ? 2 : v != 0; break;
  case PL_PARAM_LEAN_PKTS: t->lean_pkts = u; break;
  case PL_PARAM_LEAN_CTAS: t->lean_ctas = v > 1024 ? 1024 : u; break;
  case PL_PARAM_TINY: t->tiny = v != 0; break;
  case PL_PARAM_TINY_MAX_BYTES: t->tiny_max = u > PL_TINY_MAX_BYTES ? PL_TINY_MAX_BYTES : u; break;
  case PL_PARAM_TINY_WORDS: t->tiny_words = v > 1024 ? 1024 : u; break;
  case PL_PARAM_DIRECT: t->direct = v != 0; break;
  case PL_PARAM_DIRECT_MIN_BYTES: t->direct_min = u; break;
  case PL_PARAM_DIRECT_CTAS: t->direct_ctas = v > 128 ? 128 : u; break;
  case PL_PARAM_DIRECT_CTA_BYTES: t->direct_cta_bytes = u; break;
  case PL_PARAM_DIRECT_UNROLL: t->direct_unroll = v >= 8 ? 8 : 4; break;
  case PL_PARAM_DIRECT_RED_BATCH: t->direct_red_batch = v >= 8 ? 8 : 4; break;
  case PL_PARAM_DIRECT_STREAM: t->direct_stream = v != 0; break;
  case PL_PARAM_DIRECT_PUSH: t->direct_push = v != 0; break;
  case PL_PARAM_DIRECT_QUEUE: t->direct_queue = v != 0; break;
  case PL_PARAM_DIRECT_QUEUE_BYTES:
    t->direct_queue_bytes = u < 4096 ? 4096 : u > ((uint64_t)1 << 40) ? (uint64_t)1 << 40
                                                                      : u / 4096 * 4096;
    break;
  case PL_PARAM_DIRECT_ALIGN: t->direct_align = v >= 128 ? 128 : 16; break;
  case PL_PARAM_DIRECT_A2AV: t->direct_a2av = v != 0; break;
  case PL_PARAM_THREADS: /* every call: a multiple of 32 in 32..512 */
    t->threads = t->lat_threads = v < 32 ? 32 : v > 512 ? 512 : u / 32 * 32;
    break;
  case PL_PARAM_LANES: t->lanes = v > PL_MAX_LANES ? PL_MAX_LANES : u; break;
  default: break;
  }
}

/* The knobs the environment overrides (and the table may set), and the least value that counts
 * as set (the parameter's default below it means "the table": 0 for sizes and counts, -1 for
 * switches). */
static const struct {
  int id;
  int64_t min;
} k_knobs[] = {
    {PL_PARAM_LATENCY_MAX_BYTES, 1}, {PL_PARAM_ONESHOT_MAX_BYTES, 1},
    {PL_PARAM_TWOSHOT_MAX_BYTES, 1}, {PL_PARAM_CHUNK_BYTES, 1},
    {PL_PARAM_STAGING_BYTES, 1},     {PL_PARAM_LANE_BYTES, 1},
    {PL_PARAM_POLL_BACKOFF_NS, 0},   {PL_PARAM_LEAN, 0},
    {PL_PARAM_LEAN_PKTS, 1},         {PL_PARAM_LEAN_CTAS, 1},
    {PL_PARAM_TINY, 0},              {PL_PARAM_TINY_MAX_BYTES, 1},
    {PL_PARAM_TINY_WORDS, 1},
    {PL_PARAM_DIRECT, 0},            {PL_PARAM_DIRECT_MIN_BYTES, 1},
    {PL_PARAM_DIRECT_CTAS, 1},       {PL_PARAM_DIRECT_CTA_BYTES, 1},
    {PL_PARAM_DIRECT_UNROLL, 1},     {PL_PARAM_DIRECT_STREAM, 0},
    {PL_PARAM_DIRECT_PUSH, 0},       {PL_PARAM_DIRECT_A2AV, 0},
    {PL_PARAM_DIRECT_RED_BATCH, 1},  {PL_PARAM_DIRECT_QUEUE, 0},
    {PL_PARAM_DIRECT_QUEUE_BYTES, 1}, {PL_PARAM_DIRECT_ALIGN, 1},
    {PL_PARAM_THREADS, 1},           {PL_PARAM_LANES, 1},
};

/* The CUDA table measured by a sweep (tools/gpu_sweep.sh, tools/tune_table.py): rows
 * PL_TUNE_ROW(world, knob, value) in PL_TUNE_TABLE (tests build tune.c with a table of their own).
 * The first, empty row keeps the array valid when the table has none. */
#ifndef PL_TUNE_TABLE
#define PL_TUNE_TABLE "tune_cuda_table.h"
#endif
static const struct {
  int world, id;
  int64_t v;
} k_cuda_table[] = {
    {0, 0, 0},
#define PL_TUNE_ROW(w, knob, value) {(w), PL_PARAM_##knob, (int64_t)(value)},
#include PL_TUNE_TABLE
#undef PL_TUNE_ROW
};

void pl_tune_get(purlin_datapath_t datapath, int world, pl_tune_t *t) {
  /* Host datapath: packets cost a flag per 8 bytes, so they pay only for small blocks; chunks
   * large enough to amortise a wake-up. */
  t->lat_max = 16 * 1024;
  t->oneshot_max = world <= 4 ? 16 * 1024 : 8 * 1024;
  /* Two-shot packet AllReduce above one-shot: on the host it runs the same SNAC path, kept small
   * (CI exercises it); the GPU's limit is measured (docs/tuning.md). */
  t->twoshot_max = 64 * 1024;
  t->chunk_max = 256 * 1024;
  /* Lanes: independent pipelines per role (host: threads; GPU: CTAs, 2 L per call). 1 on both
   * datapaths for now; the CUDA value is to be set from measurements on the GPU. */
  t->lanes = 1;
  t->staging_bytes = 4u << 20;
  t->threads = 0; /* CUDA only */
  t->lat_threads = 0;
  t->lane_bytes = 0;
  t->backoff_ns = 0;
  t->lean = 0; /* CUDA only */
  t->lean_pkts = 0;
  t->lean_ctas = 0;
  t->tiny = 0;
  t->tiny_max = 0;
  t->tiny_words = 0;
  t->direct = 0; /* CUDA only */
  t->direct_min = 0;
  t->direct_ctas = 0;
  t->direct_cta_bytes = 0;
  t->direct_unroll = 8;
  t->direct_red_batch = 4; /* finding 21: 1-4% faster than 8 (bf16), no spills */
  t->direct_stream = 0;
  t->direct_push = 0;
  t->direct_a2av = 0;
  t->direct_queue = 0;
  t->direct_queue_bytes = 256 * 1024;
  t->direct_align = 16;
  if (datapath == PURLIN_DATAPATH_CUDA) {
    /* H200, ranks under MPS (bench/results/2026-12-03-h200-tuning): per-round synchronisation
     * dominates, so few large rounds win: 8 lanes and 1.8-4 MiB chunks made AllReduce 32 MiB at
     * world 8 8x faster than 1 lane and 58 KiB. Lanes: 2 L CTAs per rank must stay resident with
     * every other rank's on one GPU (2 L world <= 128 of 132 SMs), all that allows (finding 29:
     * 32 lanes at world 2 instead of 16 made AllToAllV 64 MiB-1 GiB on SNAC's kernel 1.7x faster,
     * 21 at world 3 1.1x). Staging: 128 MiB per rank (issue budget: <= 144 MiB at world 8). */
    t->lanes = world <= 2 ? PL_MAX_LANES : (uint64_t)(64 / world);
    t->chunk_max = 4u << 20;
    t->staging_bytes = 128u << 20;
    t->twoshot_max = 1u << 20;
    t->threads = 512;
    t->lat_threads = 256;
    /* lane_bytes stays 0 (every lane): fewer lanes for small calls was 1.1-1.4x slower at 2 KiB-
     * 256 KiB (bench/results/2026-12-03-h200-twoshot, run 2): lanes share the packet work */
    t->lean = 1;
    t->lean_pkts = 4;
    /* With the lean packet kernel (docs/tuning.md, finding 9; bench/results/2026-12-03-h200-lean,
     * run 2, world 8): packet blocks up to 256 KiB beat staging 3.1-4.4x at 256 KiB-1 MiB calls
     * (AllToAll 1 MiB 132.6 -> 43.4 us); one-shot AllReduce up to 64 KiB beats two-shot (16 KiB
     * 25.3 -> 16.3 us) */
    t->lat_max = 256 * 1024;
    t->oneshot_max = 64 * 1024; /* finding 26, on the tiny kernel: one-shot against two-shot,
                                   32 KiB 9.3 / 10.0 us, 64 KiB 10.6 / 10.6, 128 KiB 15.5 / 10.9 */
    /* Lean CTAs per call: every rank's must fit the GPU at once under MPS (world * CTAs <= 128
     * of 132 SMs), at most 16 (measured: 16 at world 8 made AllReduce 1 MiB 90 -> 62 us,
     * AllToAll 2 MiB 74 -> 48 us against 8; bench/results/2026-12-03-h200-lean, run 3) */
    t->lean_ctas = 128 / (uint64_t)world > 16 ? 16 : 128 / (uint64_t)world;
    if (t->lean_ctas < 1) t->lean_ctas = 1;
    /* The tiny kernels (docs/tuning.md, finding 26): the lean kernel's small calls on kernels
     * whose executed path is a few KB; a CTA per 256 words of a block (the ideal one-shot
     * AllReduce's best at 8 KiB: 4 CTAs; 512 words: 8 KiB 8.5 us against 7.8), blocks up to 128
     * KiB (the gathers' 1 MiB calls at world 8 1.4-1.6x faster than on the lean kernel; two-shot's
     * shards, so AllReduce up to 1 MiB at world 8) */
    t->tiny = 1;
    t->tiny_max = 128 * 1024;
    t->tiny_words = 1;
    /* The direct kernel (docs/tuning.md, findings 17-18): every call of the collectives it runs
     * that the lean kernel does not take, on any buffers; as many CTAs as stay resident with
     * every rank's (clamped in pl_cuda_residency), at most 64, one per 256 KiB of the call */
    t->direct = 1;
    t->direct_min = 0;
    t->direct_ctas = 64;
    t->direct_cta_bytes = 256 * 1024;
    /* AllReduce on peer-mapped outputs: push the reduced shard (docs/tuning.md, finding 19) */
    t->direct_push = 1;
    /* AllToAllV: a rank whose blocks are not all packets runs the direct kernel, which exchanges
     * packets with the ranks whose blocks are (docs/tuning.md, finding 30) */
    t->direct_a2av = 1;
    /* One round of the gathers: pieces of 128 KiB from a counter, stores aligned to 128 bytes
     * (docs/tuning.md, finding 33: AllGather(V) 64 MiB-1 GiB 1.4-1.7x faster on one GPU, where
     * the ranks then read each block at about the same time and share it in L2; AllToAllV 1.0-
     * 1.2x; AllToAll unchanged) */
    t->direct_queue = 1;
    t->direct_queue_bytes = 128 * 1024;
    t->direct_align = 128;
  }
  /* the measured table (tools/tune_table.py from a sweep), over the rules above */
  if (datapath == PURLIN_DATAPATH_CUDA)
    for (size_t i = 0; i < sizeof k_cuda_table / sizeof k_cuda_table[0]; i++)
      if (k_cuda_table[i].world == world) pl_tune_set(t, k_cuda_table[i].id, k_cuda_table[i].v);
  /* the environment's overrides (the packet windows' below: they follow from these) */
  for (size_t i = 0; i < sizeof k_knobs / sizeof k_knobs[0]; i++) {
    int64_t v = pl_param_int((pl_param_id_t)k_knobs[i].id);
    if (v >= k_knobs[i].min) pl_tune_set(t, k_knobs[i].id, v);
  }
  /* Packet windows: the latency blocks, one-shot's whole vector and two-shot's two regions (each
   * a shard: a world-th of the vector, as packets of twice its bytes), plus room for the header. */
  uint64_t pw = 2 * t->lat_max, two = 4 * (t->twoshot_max / (uint64_t)(world > 1 ? world : 1) + 64);
  if (2 * t->oneshot_max > pw) pw = 2 * t->oneshot_max;
  if (two > pw) pw = two;
  t->packet_bytes = (pw + 4096 + 4095) / 4096 * 4096;
  int64_t v;
  if ((v = pl_param_int(PL_PARAM_PACKET_BYTES)) > 0) t->packet_bytes = (uint64_t)v;
}
