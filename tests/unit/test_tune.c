/* test_tune -- the tuning table (src/tune.c): the measured CUDA rows (a table of the test's own,
 * tests/unit/test_tune_rows.h) apply to their world only, on the CUDA datapath only, with the
 * environment's clamps; the environment overrides them; the packet windows follow the values in
 * force. */
#include <stdio.h>
#include <stdlib.h>

#include "param.h"
#include "tune.h"
#include "../expect.h"

static void get(purlin_datapath_t dp, int world, pl_tune_t *t) {
  pl_param_reload();
  pl_tune_get(dp, world, t);
}

/* The CUDA knobs at a world with the n environment settings kv (name, value), then without them. */
static void get_env(int world, pl_tune_t *t, const char *kv[][2], int n) {
  for (int i = 0; i < n; i++) setenv(kv[i][0], kv[i][1], 1);
  get(PURLIN_DATAPATH_CUDA, world, t);
  for (int i = 0; i < n; i++) unsetenv(kv[i][0]);
}

int main(void) {
  pl_tune_t t8, t4, t3, t2, h8, e8;
  get(PURLIN_DATAPATH_CUDA, 2, &t2); /* no rows: the rules */
  get(PURLIN_DATAPATH_CUDA, 8, &t8);
  get(PURLIN_DATAPATH_CUDA, 4, &t4);
  get(PURLIN_DATAPATH_CUDA, 3, &t3);
  get(PURLIN_DATAPATH_HOST, 8, &h8);
  EXPECT(t2.direct_ctas == 64 && t2.lanes == 32 && t2.threads == 512 && t2.direct_a2av == 1,
         "world 2 (no rows): direct_ctas %llu lanes %llu threads %llu a2av %llu",
         (unsigned long long)t2.direct_ctas, (unsigned long long)t2.lanes,
         (unsigned long long)t2.threads, (unsigned long long)t2.direct_a2av);
  EXPECT(t8.direct_ctas == 32 && t8.lanes == 4, "world 8 rows: direct_ctas %llu lanes %llu",
         (unsigned long long)t8.direct_ctas, (unsigned long long)t8.lanes);
  EXPECT(t8.threads == 512 && t8.lat_max == 256 * 1024, "world 8: rows of world 4 leaked");
  EXPECT(t4.threads == 96 && t4.lat_threads == 96, "world 4 THREADS 100: %llu/%llu, want 96 (the "
         "environment's rounding)", (unsigned long long)t4.threads,
         (unsigned long long)t4.lat_threads);
  EXPECT(t4.lat_max == 1048576 && t4.direct_ctas == 64, "world 4: lat_max %llu direct_ctas %llu",
         (unsigned long long)t4.lat_max, (unsigned long long)t4.direct_ctas);
  /* the packet windows follow the table's lat_max: 2 x 1 MiB (one-shot's 2 x 64 KiB and two-shot's
   * 4 (1 MiB / 4 + 64) are smaller), plus 4 KiB, in pages; world 8 keeps two-shot's */
  EXPECT(t4.packet_bytes == (2 * 1048576 + 4096 + 4095) / 4096 * 4096, "world 4 packet_bytes %llu",
         (unsigned long long)t4.packet_bytes);
  EXPECT(t8.packet_bytes == (4 * (1048576 / 8 + 64) + 4096 + 4095) / 4096 * 4096,
         "world 8 packet_bytes %llu", (unsigned long long)t8.packet_bytes);
  EXPECT(t3.direct_a2av == 0 && t3.lanes == 21, "world 3: DIRECT_A2AV row (a2av %llu lanes %llu)",
         (unsigned long long)t3.direct_a2av, (unsigned long long)t3.lanes);
  EXPECT(h8.direct_ctas == 0 && h8.lanes == 1, "host datapath: CUDA rows applied (direct_ctas %llu "
         "lanes %llu)", (unsigned long long)h8.direct_ctas, (unsigned long long)h8.lanes);
  /* the environment wins over a row, and a value of "the table" leaves the row */
  const char *ctas[][2] = {{"PURLIN_DIRECT_CTAS", "16"}, {"PURLIN_DIRECT_STREAM", "-1"}};
  get_env(8, &e8, ctas, 2);
  EXPECT(e8.direct_ctas == 16 && e8.lanes == 4 && e8.direct_stream == 0,
         "world 8, PURLIN_DIRECT_CTAS=16: direct_ctas %llu lanes %llu stream %llu",
         (unsigned long long)e8.direct_ctas, (unsigned long long)e8.lanes,
         (unsigned long long)e8.direct_stream);
  const char *table[][2] = {{"PURLIN_DIRECT_CTAS", "0"}}; /* 0: the table */
  get_env(8, &e8, table, 1);
  EXPECT(e8.direct_ctas == 32, "world 8, PURLIN_DIRECT_CTAS=0: %llu, want the row's 32",
         (unsigned long long)e8.direct_ctas);
  /* the piece queue and the stores' alignment: on by default (finding 33), and their clamps */
  EXPECT(e8.direct_queue == 1 && e8.direct_queue_bytes == 128 * 1024 && e8.direct_align == 128,
         "world 8: queue %llu of %llu bytes, align %llu", (unsigned long long)e8.direct_queue,
         (unsigned long long)e8.direct_queue_bytes, (unsigned long long)e8.direct_align);
  const char *queue[][2] = {{"PURLIN_DIRECT_QUEUE", "0"}, {"PURLIN_DIRECT_QUEUE_BYTES", "100000"},
                            {"PURLIN_DIRECT_ALIGN", "64"}};
  get_env(8, &e8, queue, 3);
  EXPECT(e8.direct_queue == 0 && e8.direct_queue_bytes == 98304 && e8.direct_align == 16,
         "PURLIN_DIRECT_QUEUE=0, _BYTES=100000, ALIGN=64: queue %llu of %llu, align %llu",
         (unsigned long long)e8.direct_queue, (unsigned long long)e8.direct_queue_bytes,
         (unsigned long long)e8.direct_align);
  const char *small[][2] = {{"PURLIN_DIRECT_QUEUE_BYTES", "1000"}};
  get_env(8, &e8, small, 1);
  EXPECT(e8.direct_queue_bytes == 4096, "PURLIN_DIRECT_QUEUE_BYTES=1000: %llu, want 4096",
         (unsigned long long)e8.direct_queue_bytes);
  printf("test_tune: %s (%lld checks, %lld failures)\n", pl_failures ? "FAIL" : "ok", pl_checks,
         pl_failures);
  return pl_failures != 0;
}
