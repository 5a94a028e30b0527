/* Unit tests of the pure parts: conversions, AllReduce shards, plans, the header verdict. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "plan.h"
#include "snac/snac_types.h"
#include "tune.h"

#include "../expect.h"

/* Every finite code decodes and re-encodes to itself; midpoints round to even. */
static void test_roundtrip(const char *name, int bits, float (*dec)(uint32_t),
                           uint32_t (*enc)(float)) {
  int n = 0;
  for (uint32_t c = 0; c < (1u << bits); c++) {
    float v = dec(c);
    if (isinf(v)) continue; /* fp8 saturates inf to the largest finite value, checked below */
    if (isnan(v)) {
      EXPECT(isnan(dec(enc(v))), "%s: NaN code %#x re-encodes to non-NaN", name, c);
      continue;
    }
    uint32_t back = enc(v);
    if (v == 0 && back != c && dec(back) == 0) continue; /* -0 / +0 */
    EXPECT(back == c, "%s: code %#x (%g) re-encodes to %#x", name, c, (double)v, back);
    uint32_t next = c + 1;
    float w = next < (1u << bits) ? dec(next) : NAN;
    if (!isnan(w) && !isinf(w) && !isinf(v) && (c & ((1u << (bits - 1)) - 1)) != 0 &&
        fabsf(w) > fabsf(v) && (w > 0) == (v > 0)) {
      float mid = v / 2 + w / 2; /* exact in f32 for these formats */
      uint32_t m = enc(mid);
      uint32_t even = (c & 1) ? next : c;
      EXPECT(m == even, "%s: midpoint %g of %#x,%#x encodes to %#x, want %#x", name, (double)mid,
             c, next, m, even);
      n++;
    }
  }
  EXPECT(n > 0, "%s: no midpoints checked", name);
}
static float dec_f16(uint32_t c) { return pl_f16_to_f32((uint16_t)c); }
static uint32_t enc_f16(float x) { return pl_f32_to_f16(x); }
static float dec_bf16(uint32_t c) { return pl_bf16_to_f32((uint16_t)c); }
static uint32_t enc_bf16(float x) { return pl_f32_to_bf16(x); }
static float dec_e4m3(uint32_t c) { return pl_e4m3_to_f32((uint8_t)c); }
static uint32_t enc_e4m3(float x) { return pl_f32_to_e4m3(x); }
static float dec_e5m2(uint32_t c) { return pl_e5m2_to_f32((uint8_t)c); }
static uint32_t enc_e5m2(float x) { return pl_f32_to_e5m2(x); }

static void test_saturation(void) {
  EXPECT(pl_e4m3_to_f32(pl_f32_to_e4m3(1e6f)) == 448.0f, "e4m3 saturates to 448");
  EXPECT(pl_e4m3_to_f32(pl_f32_to_e4m3(-INFINITY)) == -448.0f, "e4m3 -inf saturates to -448");
  EXPECT(pl_e5m2_to_f32(pl_f32_to_e5m2(INFINITY)) == 57344.0f, "e5m2 inf saturates");
  EXPECT(isinf(pl_f16_to_f32(pl_f32_to_f16(1e6f))), "f16 overflows to inf");
  EXPECT(pl_e4m3_to_f32(pl_f32_to_e4m3(464.0f)) == 448.0f, "e4m3 464 rounds to 448");
}

static void test_shards(void) {
  for (int w = 1; w <= 9; w++)
    for (uint64_t es = 1; es <= 8; es *= 2)
      for (uint64_t count = 0; count < 400; count += 7) {
        uint64_t prev = 0;
        for (int d = 0; d <= w; d++) {
          uint64_t b = pl_ar_shard_begin(count, es, w, d);
          EXPECT(b >= prev && b <= count, "shards ordered w%d es%llu count%llu", w,
                 (unsigned long long)es, (unsigned long long)count);
          EXPECT(d == 0 || b == count || (b * es) % 64 == 0, "shard %d aligned", d);
          prev = b;
        }
        EXPECT(pl_ar_shard_begin(count, es, w, 0) == 0 && prev == count, "shards cover");
      }
}

static void test_plan(void) {
  pl_tune_t t = {16384, 16384, 65536, 65536, 1 << 20, 1, 4 << 20, 0, 0, 0, 0, 0, 0, 0, 0,
                 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  for (int w = 1; w <= PL_MAX_WORLD; w++)
    for (uint64_t half = (uint64_t)(w + 1) * 128; half < (64u << 20); half *= 3) {
      pl_ws_geom_t g = {4096, 65536, half, 4096, 0, 0};
      for (int coll = 0; coll < PL_COLL_COUNT; coll++) {
        pl_call_t c;
        pl_plan_t p;
        memset(&c, 0, sizeof c);
        c.coll = coll;
        c.world = w;
        c.esize = 2;
        c.count = 1000;
        pl_plan_make(&c, &g, &t, &p);
        EXPECT(p.chunk % 64 == 0 && p.chunk >= 64, "chunk multiple of 64");
        EXPECT(p.nslots >= 1 && p.nslots * p.slot_bytes <= half, "slots fit w%d half%llu", w,
               (unsigned long long)half);
        EXPECT(p.lat_max <= pl_pkt_capacity(&g, w), "packets fit the window");
      }
    }
}

/* The tuning tables agree with the workspace they size, at every world: a block of exactly the
 * packet limit fits the packet window (so the plan keeps the table's limit, and the CUDA lean kernel
 * takes such calls), one-shot and two-shot AllReduce at their limits are planned as such, and on
 * CUDA every rank's lean CTAs fit one GPU under MPS (world x CTAs <= 128, or one CTA). */
static void test_tune_tables(void) {
  static const purlin_datapath_t dps[] = {PURLIN_DATAPATH_HOST, PURLIN_DATAPATH_CUDA};
  for (int k = 0; k < 2; k++)
    for (int w = 1; w <= PL_MAX_WORLD; w++) {
      pl_tune_t t;
      pl_tune_get(dps[k], w, &t);
      pl_ws_geom_t g;
      pl_ws_geom_make(&g, w, sizeof(pl_ctrl_t), t.packet_bytes, t.staging_bytes);
      pl_call_t c;
      pl_plan_t p;
      memset(&c, 0, sizeof c);
      c.world = w;
      c.esize = 2;
      c.dtype = PURLIN_BF16;
      c.coll = PL_COLL_ALL_TO_ALL;
      c.count = t.lat_max / 2;
      pl_plan_make(&c, &g, &t, &p);
      EXPECT(p.lat_max == t.lat_max, "datapath %d world %d: the packet window holds %llu of the "
             "table's %llu bytes per block", k, w, (unsigned long long)p.lat_max,
             (unsigned long long)t.lat_max);
      c.coll = PL_COLL_ALL_REDUCE;
      c.count = t.oneshot_max / 2;
      pl_plan_make(&c, &g, &t, &p);
      EXPECT(p.ar_oneshot, "datapath %d world %d: AllReduce of oneshot_max is not one-shot", k, w);
      c.count = t.twoshot_max / 2;
      pl_plan_make(&c, &g, &t, &p);
      EXPECT(w == 1 || t.twoshot_max <= t.oneshot_max || p.ar_twoshot,
             "datapath %d world %d: AllReduce of twoshot_max is not two-shot", k, w);
      if (dps[k] == PURLIN_DATAPATH_CUDA)
        EXPECT(t.lean && t.lean_ctas >= 1 && (t.lean_ctas == 1 || t.lean_ctas * (uint64_t)w <= 128),
               "world %d: %llu lean CTAs per rank", w, (unsigned long long)t.lean_ctas);
    }
}

static void test_verdict(void) {
  enum { W = 4 };
  uint64_t hdr[W][PL_HDR_FIXED + 3 * W];
  pl_snac_t x;
  memset(&x, 0, sizeof x);
  x.c.world = W;
  x.hdr = &hdr[0][0];
  for (int s = 0; s < W; s++) {
    memset(hdr[s], 0, sizeof hdr[s]);
    hdr[s][0] = PL_HDR_TAG | (uint64_t)PL_COLL_ALL_TO_ALL_V << 16;
    hdr[s][6] = W;
    for (int d = 0; d < W; d++) {
      hdr[s][PL_HDR_FIXED + d] = (uint64_t)(s * 10 + d);         /* s sends s*10+d to d */
      hdr[s][PL_HDR_FIXED + 2 * W + d] = (uint64_t)(d * 10 + s); /* s expects d*10+s from d */
    }
  }
  EXPECT(pl_snac_hdr_check(&x) == 0, "consistent A2AV headers pass");
  hdr[2][PL_HDR_FIXED + 1] = 99; /* rank 2 sends 99 to rank 1, which expects 21 */
  EXPECT(pl_snac_hdr_check(&x) == PURLIN_ERR_MISMATCH, "A2AV mismatch found");
  EXPECT(x.mismatch.rank_a == 2 && x.mismatch.rank_b == 1 && x.mismatch.val_a == 99 &&
             x.mismatch.val_b == 21, "mismatch names ranks 2 and 1 and both values");
  hdr[2][PL_HDR_FIXED + 1] = 21;
  hdr[3][0] = PL_HDR_TAG | (uint64_t)PL_COLL_ALL_TO_ALL_V << 16 | (uint64_t)PURLIN_BF16 << 24;
  EXPECT(pl_snac_hdr_check(&x) == PURLIN_ERR_MISMATCH && !strcmp(x.mismatch.param, "dtype") &&
             x.mismatch.rank_b == 3, "dtype mismatch names rank 3");
  /* AllReduce: rank 1's count differs and made it take the direct kernel: named as the count */
  for (int s = 0; s < W; s++) {
    memset(hdr[s], 0, sizeof hdr[s]);
    hdr[s][0] = PL_HDR_TAG | (uint64_t)PL_COLL_ALL_REDUCE << 16;
    hdr[s][1] = 1000;
    hdr[s][6] = W;
  }
  EXPECT(pl_snac_hdr_check(&x) == 0, "consistent AllReduce headers pass");
  hdr[1][0] |= (uint64_t)PL_HDR_DIRECT << 48;
  hdr[1][1] = 1u << 20;
  EXPECT(pl_snac_hdr_check(&x) == PURLIN_ERR_MISMATCH && !strcmp(x.mismatch.param, "count") &&
             x.mismatch.rank_b == 1 && x.mismatch.val_b == 1u << 20,
         "a count that also changed the kernel is named as the count (got %s)", x.mismatch.param);
  hdr[1][1] = 1000;
  EXPECT(pl_snac_hdr_check(&x) == PURLIN_ERR_MISMATCH && !strcmp(x.mismatch.param, "direct kernel") &&
             x.mismatch.rank_a == 1 && x.mismatch.val_a == 1 && x.mismatch.rank_b == 0 &&
             x.mismatch.val_b == 0,
         "only the kernel differs: named as the direct kernel, rank 1 with, rank 0 without (got %s "
         "%d %llu %d %llu)", x.mismatch.param, x.mismatch.rank_a,
         (unsigned long long)x.mismatch.val_a, x.mismatch.rank_b,
         (unsigned long long)x.mismatch.val_b);
  /* AllGatherV whose counts agree, in device memory on rank 2 only (SNAC's kernel there, the tiny
   * V kernel's signed flags elsewhere): named counts_on_device; AllToAllV may mix them */
  uint64_t rc[W], sd[W] = {0, 5, 10, 15};
  for (int i = 0; i < W; i++) rc[i] = 5;
  for (int coll = 0; coll < 2; coll++) {
    x.c.coll = coll ? PL_COLL_ALL_TO_ALL_V : PL_COLL_ALL_GATHER_V;
    x.c.count = 5;
    x.c.scounts = x.c.rcounts = rc;
    x.c.sdispls = x.c.rdispls = sd;
    for (int s = 0; s < W; s++) {
      x.c.counts_dev = s == 2;
      pl_snac_hdr_build(&x, hdr[s]);
    }
    x.c.counts_dev = 0;
    if (coll)
      EXPECT(pl_snac_hdr_check(&x) == 0, "AllToAllV with device counts on one rank passes (got %s)",
             x.mismatch.param ? x.mismatch.param : "");
    else
      EXPECT(pl_snac_hdr_check(&x) == PURLIN_ERR_MISMATCH &&
                 !strcmp(x.mismatch.param, "counts_on_device") && x.mismatch.rank_b == 2 &&
                 x.mismatch.val_a == 0 && x.mismatch.val_b == 1,
             "AllGatherV with device counts on rank 2 only: named counts_on_device (got %s)",
             x.mismatch.param ? x.mismatch.param : "");
  }
}

/* AllToAllV mixes kernels: ranks 0 and 1 exchange large blocks and run the direct kernel, ranks 2
 * and 3 have packets only (at most lat_max bytes to and from every other rank) and run another; a
 * rank without PL_HDR_DIRECT that has a large block is a MISMATCH naming it, on every rank alike. */
enum { MIX_W = 4 };
static uint64_t mix_hdr[MIX_W][PL_HDR_FIXED + 3 * MIX_W];
static void mix_build(uint64_t m[MIX_W][MIX_W], unsigned direct) {
  for (int s = 0; s < MIX_W; s++) {
    memset(mix_hdr[s], 0, sizeof mix_hdr[s]);
    mix_hdr[s][0] = PL_HDR_TAG | (uint64_t)PL_COLL_ALL_TO_ALL_V << 16 |
                    (uint64_t)(direct >> s & 1u ? PL_HDR_DIRECT : 0) << 48;
    mix_hdr[s][6] = MIX_W;
    for (int d = 0; d < MIX_W; d++) {
      mix_hdr[s][PL_HDR_FIXED + d] = m[s][d];             /* sendcounts */
      mix_hdr[s][PL_HDR_FIXED + 2 * MIX_W + d] = m[d][s]; /* recvcounts */
    }
    if (!pl_hdr_a2av_pkts(mix_hdr[s], MIX_W, s, 2, 1000)) /* as pl_snac_hdr_build sets it */
      mix_hdr[s][0] |= (uint64_t)PL_HDR_BIG << 48;
  }
}
static void test_a2av_mix(void) {
  pl_snac_t x;
  memset(&x, 0, sizeof x);
  x.c.world = MIX_W;
  x.c.esize = 2;
  x.plan.lat_max = 1000; /* bytes: 500 elements */
  x.hdr = &mix_hdr[0][0];
  uint64_t m[MIX_W][MIX_W]; /* m[s][d]: elements s sends d */
  for (int s = 0; s < MIX_W; s++)
    for (int d = 0; d < MIX_W; d++) m[s][d] = (s < 2 && d < 2 && s != d) ? 400000 : 100 + 7 * s + d;
  m[2][2] = 900000; /* a rank's own block is not exchanged: it does not count */
  mix_build(m, 3u);
  EXPECT(pl_hdr_a2av_pkts(mix_hdr[2], MIX_W, 2, 2, 1000) == 1 &&
             pl_hdr_a2av_pkts(mix_hdr[0], MIX_W, 0, 2, 1000) == 0,
         "rank 2's blocks are packets (its own not counted), rank 0's are not");
  EXPECT(pl_snac_hdr_check(&x) == 0, "direct ranks 0, 1 with packet ranks 2, 3 pass (got %s)",
         x.mismatch.param ? x.mismatch.param : "");
  EXPECT(pl_hdr_mixbits(mix_hdr[0][0]) == 1u && pl_hdr_mixbits(mix_hdr[2][0]) == 0u,
         "mix bits: rank 0 direct, rank 2 packets only");
  /* pl_snac_hdr_build sets PL_HDR_BIG from the call's own counts (rank 0's and rank 2's rows) */
  for (int q = 0; q < 3; q += 2) {
    uint64_t sc[MIX_W], rc[MIX_W], dz[MIX_W] = {0, 0, 0, 0}, hb[PL_HDR_FIXED + 3 * MIX_W];
    for (int d = 0; d < MIX_W; d++) {
      sc[d] = m[q][d];
      rc[d] = m[d][q];
    }
    pl_snac_t y = x;
    y.c.coll = PL_COLL_ALL_TO_ALL_V;
    y.c.rank = q;
    y.c.scounts = sc;
    y.c.rcounts = rc;
    y.c.sdispls = y.c.rdispls = dz;
    pl_snac_hdr_build(&y, hb);
    EXPECT(!(hb[0] >> 48 & PL_HDR_BIG) == (q == 2), "rank %d's built header: BIG %d", q,
           (int)(hb[0] >> 48 & PL_HDR_BIG));
  }
  mix_build(m, 0u);
  EXPECT(pl_snac_hdr_check(&x) == 0, "no direct rank (SNAC's kernel) passes");
  m[3][0] = 600; /* rank 3 sends rank 0 a large block, and runs no direct kernel */
  mix_build(m, 3u);
  EXPECT(pl_snac_hdr_check(&x) == PURLIN_ERR_MISMATCH && !strcmp(x.mismatch.param, "direct kernel") &&
             x.mismatch.rank_a == 0 && x.mismatch.val_a == 1 && x.mismatch.rank_b == 3 &&
             x.mismatch.val_b == 0,
         "rank 3 with a large block sent, no direct kernel: named against rank 0 (got %s %d %d)",
         x.mismatch.param ? x.mismatch.param : "", x.mismatch.rank_a, x.mismatch.rank_b);
  m[3][0] = 100 + 21;
  m[3][2] = 600; /* rank 2 receives a large block from rank 3 */
  mix_build(m, 3u);
  EXPECT(pl_hdr_a2av_pkts(mix_hdr[2], MIX_W, 2, 2, 1000) == 0, "a large block received counts");
  EXPECT(pl_snac_hdr_check(&x) == PURLIN_ERR_MISMATCH && x.mismatch.rank_b == 2,
         "rank 2 receiving a large block, no direct kernel: named first (got rank %d)",
         x.mismatch.rank_b);
  mix_build(m, 15u);
  EXPECT(pl_snac_hdr_check(&x) == 0, "every rank direct passes");
}

/* pl_hdr_vword (no division) against the words as the header defines them (k = i / w), every V
 * collective, every world */
static void test_vword(void) {
  static uint64_t v[4][PL_MAX_WORLD];
  for (int k = 0; k < 4; k++)
    for (int d = 0; d < PL_MAX_WORLD; d++) v[k][d] = 1000u * (uint64_t)k + (uint64_t)d + 1;
  pl_call_t c;
  memset(&c, 0, sizeof c);
  c.scounts = v[0];
  c.sdispls = v[1];
  c.rcounts = v[2];
  c.rdispls = v[3];
  const int colls[3] = {PL_COLL_ALL_GATHER_V, PL_COLL_REDUCE_SCATTER_V, PL_COLL_ALL_TO_ALL_V};
  int bad = 0;
  for (int j = 0; j < 3; j++)
    for (int w = 1; w <= PL_MAX_WORLD; w++) {
      c.coll = colls[j];
      c.world = w;
      for (int i = 0; i < 3 * w; i++) {
        const int k = i / w, d = i % w;
        const uint64_t want = colls[j] == PL_COLL_ALL_TO_ALL_V     ? v[k][d]
                              : k == 0                             ? v[2][d]
                              : colls[j] == PL_COLL_REDUCE_SCATTER_V && k == 1 ? v[1][d]
                                                                   : 0;
        bad += pl_hdr_vword(&c, i) != want;
      }
    }
  EXPECT(!bad, "pl_hdr_vword: %d words differ from the header's definition", bad);
}

int main(void) {
  test_roundtrip("f16", 16, dec_f16, enc_f16);
  test_roundtrip("bf16", 16, dec_bf16, enc_bf16);
  test_roundtrip("e4m3", 8, dec_e4m3, enc_e4m3);
  test_roundtrip("e5m2", 8, dec_e5m2, enc_e5m2);
  test_saturation();
  test_vword();
  test_shards();
  test_plan();
  test_tune_tables();
  test_verdict();
  test_a2av_mix();
  printf("test_layout: %s (%lld failures)\n", pl_failures ? "FAILED" : "ok", pl_failures);
  return pl_failures != 0;
}
