/* check_parity.c -- the device check's element code (bench/elem.h, run by bench/check.cu on the
 * GPU) against the host reference check (bench_check: bench_gen + pl_reduce_elems + its own
 * tolerance), without a GPU: for every collective, dtype, op and mode (bitwise / tolerant), an
 * output equal to the expected values with a third of its elements moved by up to 20 units in the
 * last place must get the same wrong count from bench_check and from bench_check_emul (the kernel's
 * per-element code in a host loop). Near the tolerance boundary, so the two tolerance computations
 * must agree element by element, not just on gross corruption. */
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"
#include "elem.h"

static size_t one_case(int coll, int dt, int op, int exact, uint64_t *rng, size_t *wrong) {
  bench_geom_t g;
  bench_elem_ctx_t c;
  const uint64_t seed = 7;
  if (bench_geom_make(&g, coll, 40000, dt, 5, 2, seed, &(bench_split_t){0.5, 16, 0}))
    bench_die("out of memory");
  unsigned char *out = calloc(g.recv_elems + 1, g.esize);
  if (!out)
    bench_die("out of memory");
  bench_elem_ctx_init(&c, &g, dt, op, seed, exact);
  for (int s = 0; s < g.nsegs; s++) {
    const bench_seg_t *sg = &g.segs[s];
    for (size_t i = 0; i < sg->len; i++) {
      double asum;
      uint64_t e = sg->src >= 0 ? bench_gen_bits(c.key[sg->src], sg->in + i, dt)
                                : bench_reduce_bits(&c, sg->in + i, &asum);
      *rng = bench_mix64(*rng);
      if (*rng % 3 == 0)
        e += (uint64_t)((int64_t)((*rng >> 8) % 41) - 20);
      bench_store_bits(out, g.esize, sg->out + i, e);
    }
  }
  size_t h = bench_check(&g, out, dt, op, seed, exact);
  size_t m = bench_check_emul(&g, out, dt, op, seed, exact);
  if (h != m)
    printf("MISMATCH %s %s %s %s: host %zu, device code %zu\n", bench_colls[coll].tool,
           purlin_dtype_name((purlin_dtype_t)dt), purlin_op_name((purlin_op_t)op),
           exact ? "bitwise" : "tolerant", h, m);
  *wrong += h;
  free(out);
  bench_geom_free(&g);
  return h != m;
}

int main(void) {
  size_t bad = 0, cases = 0, wrong = 0;
  uint64_t rng = 12345;
  for (int coll = 0; coll < B_NCOLL; coll++)
    for (int dt = 0; dt < PURLIN_DTYPE_COUNT; dt++)
      for (int op = 0; op < PURLIN_OP_COUNT; op++)
        for (int exact = 0; exact < 2; exact++) {
          if (!bench_colls[coll].reduce && op)
            continue;
          bad += one_case(coll, dt, op, exact, &rng, &wrong);
          cases++;
        }
  printf("check_parity: %zu cases, %zu mismatches, %zu wrong elements counted alike\n", cases, bad,
         wrong);
  return bad || !wrong ? 1 : 0;
}
