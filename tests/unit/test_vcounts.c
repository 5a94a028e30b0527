/* test_vcounts -- the pure part of V counts read on the device (src/vcounts.h): the kernel runs
 * pl_v_derive on counts read from device memory; here it runs on the host against what
 * api.c's pl_check_v derives for the same counts. */
#include <stdio.h>
#include <string.h>

#include "vcounts.h"

static int g_fail;
#define EXPECT(cond, ...)                                                                          \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      g_fail++;                                                                                    \
      fprintf(stderr, "test_vcounts:%d: ", __LINE__);                                              \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fputc('\n', stderr);                                                                         \
    }                                                                                              \
  } while (0)

static uint64_t v[4][PL_MAX_WORLD];

int main(void) {
  static char buf[1 << 16];
  char *send = buf, *recv = buf + 4096;
  int ip;
  uint64_t sb, rb;
  const char *e;

  /* AGV, NULL displacements: prefix sums; the room (sendcount) bounds recvcounts[rank] */
  memset(v, 0, sizeof v);
  v[2][0] = 3, v[2][1] = 0, v[2][2] = 5;
  e = pl_v_derive(PL_COLL_ALL_GATHER_V, 3, 2, 9, 4, v, 0, 0, send, recv, &ip, &sb, &rb);
  EXPECT(!e, "agv: %s", e);
  EXPECT(v[3][0] == 0 && v[3][1] == 3 && v[3][2] == 3, "agv displs %llu %llu %llu",
         (unsigned long long)v[3][0], (unsigned long long)v[3][1], (unsigned long long)v[3][2]);
  EXPECT(sb == 20 && rb == 32 && !ip, "agv extents %llu %llu in place %d",
         (unsigned long long)sb, (unsigned long long)rb, ip);
  e = pl_v_derive(PL_COLL_ALL_GATHER_V, 3, 2, 4, 4, v, 0, 0, send, recv, &ip, &sb, &rb);
  EXPECT(e && strstr(e, "sendcount"), "agv room: %s", e ? e : "accepted");
  /* AGV in place: send at my block of recv */
  e = pl_v_derive(PL_COLL_ALL_GATHER_V, 3, 2, 5, 4, v, 0, 0, recv + 12, recv, &ip, &sb, &rb);
  EXPECT(!e && ip, "agv in place: %s %d", e ? e : "ok", ip);

  /* RSV, given displacements that overlap */
  memset(v, 0, sizeof v);
  v[2][0] = 4, v[2][1] = 4;
  v[1][0] = 0, v[1][1] = 2;
  e = pl_v_derive(PL_COLL_REDUCE_SCATTER_V, 2, 0, 0, 2, v, 1, 0, send, recv, &ip, &sb, &rb);
  EXPECT(e && strstr(e, "overlap"), "rsv overlap: %s", e ? e : "accepted");
  v[1][1] = 5; /* gapped */
  e = pl_v_derive(PL_COLL_REDUCE_SCATTER_V, 2, 1, 0, 2, v, 1, 0, send, recv, &ip, &sb, &rb);
  EXPECT(!e && sb == 18 && rb == 8, "rsv: %s %llu %llu", e ? e : "ok", (unsigned long long)sb,
         (unsigned long long)rb);
  e = pl_v_derive(PL_COLL_REDUCE_SCATTER_V, 2, 1, 0, 2, v, 1, 0, send, send + 10, &ip, &sb, &rb);
  EXPECT(!e && ip, "rsv in place: %s %d", e ? e : "ok", ip);

  /* A2AV: in place needs equal counts; overflow; NULL buffers; send/recv overlap */
  memset(v, 0, sizeof v);
  v[0][0] = 2, v[0][1] = 3, v[2][0] = 2, v[2][1] = 3;
  e = pl_v_derive(PL_COLL_ALL_TO_ALL_V, 2, 0, 0, 8, v, 0, 0, recv, recv, &ip, &sb, &rb);
  EXPECT(!e && ip && sb == 40 && rb == 40, "a2av in place: %s", e ? e : "ok");
  v[2][1] = 4;
  e = pl_v_derive(PL_COLL_ALL_TO_ALL_V, 2, 0, 0, 8, v, 0, 0, recv, recv, &ip, &sb, &rb);
  EXPECT(e && strstr(e, "in place"), "a2av in place, different counts: %s", e ? e : "accepted");
  e = pl_v_derive(PL_COLL_ALL_TO_ALL_V, 2, 0, 0, 8, v, 0, 0, send, recv + 8, &ip, &sb, &rb);
  EXPECT(e == NULL, "a2av apart: %s", e);
  e = pl_v_derive(PL_COLL_ALL_TO_ALL_V, 2, 0, 0, 8, v, 0, 0, recv + 8, recv, &ip, &sb, &rb);
  EXPECT(e && strstr(e, "overlap"), "a2av overlap: %s", e ? e : "accepted");
  e = pl_v_derive(PL_COLL_ALL_TO_ALL_V, 2, 0, 0, 8, v, 0, 0, NULL, recv, &ip, &sb, &rb);
  EXPECT(e && strstr(e, "send is NULL"), "a2av NULL send: %s", e ? e : "accepted");
  v[1][0] = 0, v[1][1] = ~(uint64_t)0 - 1;
  e = pl_v_derive(PL_COLL_ALL_TO_ALL_V, 2, 0, 0, 8, v, 1, 0, send, recv, &ip, &sb, &rb);
  EXPECT(e && strstr(e, "overflow"), "a2av overflow: %s", e ? e : "accepted");
  /* nothing to move: not in place even when send == recv, and no buffer needed */
  memset(v, 0, sizeof v);
  e = pl_v_derive(PL_COLL_ALL_TO_ALL_V, 2, 0, 0, 8, v, 0, 0, NULL, NULL, &ip, &sb, &rb);
  EXPECT(!e && !ip && !sb && !rb, "a2av empty: %s", e ? e : "ok");

  printf("test_vcounts: %s\n", g_fail ? "FAILED" : "ok");
  return g_fail ? 1 : 0;
}
