/* quickstart.c -- every collective once, checked, one line each; then a short latency/bandwidth
 * table. Run under a launcher: `purlinrun -n 4 quickstart` (or torchrun / mpirun).
 * Inputs are small integers in f32 so that every order of summation gives the exact answer. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "purlin.h"

#define CHECK(call)                                                                                \
  do {                                                                                             \
    purlin_status_t st_ = (call);                                                                  \
    if (st_ != PURLIN_OK) {                                                                        \
      fprintf(stderr, "rank %d: %s failed: %s\n  %s\n", rank, #call, purlin_status_name(st_),     \
              purlin_comm_last_error(comm));                                                       \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

static int rank, world;
static purlin_comm_t comm;

static float val(int r, size_t i) { return (float)((r * 7 + (int)(i % 13) * 3) % 17 - 8); }

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int report(const char *name, size_t wrong, size_t n) {
  int ok = wrong == 0;
  if (rank == 0 || !ok)
    printf("rank %d  %-17s %8zu elements  %s\n", rank, name, n, ok ? "OK" : "WRONG");
  if (!ok) printf("rank %d  %s: %zu wrong elements\n", rank, name, wrong);
  return ok;
}

static int run_checks(size_t n) {
  size_t W = (size_t)world, wrong = 0, ok = 1;
  float *in = malloc(sizeof(float) * n * W), *out = malloc(sizeof(float) * n * W);
  size_t *counts = malloc(sizeof(size_t) * W * 2), *displs = counts + W;
  for (size_t i = 0; i < n * W; i++) in[i] = val(rank, i);

  memset(out, 0xff, sizeof(float) * n);
  CHECK(purlin_all_reduce(in, out, n, PURLIN_F32, PURLIN_SUM, comm, NULL, NULL));
  for (size_t i = 0; i < n; i++) {
    float e = 0;
    for (int r = 0; r < world; r++) e += val(r, i);
    wrong += out[i] != e;
  }
  ok &= report("all_reduce", wrong, n);

  wrong = 0;
  memset(out, 0xff, sizeof(float) * n * W);
  CHECK(purlin_all_gather(in, out, n, PURLIN_F32, comm, NULL, NULL));
  for (size_t i = 0; i < n * W; i++) wrong += out[i] != val((int)(i / n), i % n);
  ok &= report("all_gather", wrong, n * W);

  wrong = 0;
  memset(out, 0xff, sizeof(float) * n);
  CHECK(purlin_reduce_scatter(in, out, n, PURLIN_F32, PURLIN_MAX, comm, NULL, NULL));
  for (size_t i = 0; i < n; i++) {
    float e = -INFINITY;
    for (int r = 0; r < world; r++) e = fmaxf(e, val(r, rank * n + i));
    wrong += out[i] != e;
  }
  ok &= report("reduce_scatter", wrong, n);

  wrong = 0;
  memset(out, 0xff, sizeof(float) * n * W);
  CHECK(purlin_all_to_all(in, out, n, PURLIN_F32, comm, NULL, NULL));
  for (size_t i = 0; i < n * W; i++) wrong += out[i] != val((int)(i / n), rank * n + i % n);
  ok &= report("all_to_all", wrong, n * W);

  /* V variants: rank r contributes (r + 1) * n / world elements. */
  size_t total = 0;
  for (size_t r = 0; r < W; r++) {
    counts[r] = (r + 1) * n / W;
    displs[r] = total;
    total += counts[r];
  }
  wrong = 0;
  memset(out, 0xff, sizeof(float) * total);
  CHECK(purlin_all_gather_v(in, counts[rank], out, counts, NULL, PURLIN_F32, comm, NULL, NULL));
  for (size_t r = 0; r < W; r++)
    for (size_t i = 0; i < counts[r]; i++) wrong += out[displs[r] + i] != val((int)r, i);
  ok &= report("all_gather_v", wrong, total);

  wrong = 0;
  memset(out, 0xff, sizeof(float) * counts[rank]);
  CHECK(purlin_reduce_scatter_v(in, out, counts, NULL, PURLIN_F32, PURLIN_SUM, comm, NULL, NULL));
  for (size_t i = 0; i < counts[rank]; i++) {
    float e = 0;
    for (int r = 0; r < world; r++) e += val(r, displs[rank] + i);
    wrong += out[i] != e;
  }
  ok &= report("reduce_scatter_v", wrong, counts[rank]);

  /* AllToAllV: every pair exchanges counts[min(s,d)] elements (symmetric, as the check needs). */
  size_t *sc = malloc(sizeof(size_t) * W * 4), *sd = sc + W, *rc = sc + 2 * W, *rd = sc + 3 * W;
  size_t so = 0, ro = 0;
  for (size_t p = 0; p < W; p++) {
    sc[p] = counts[p < (size_t)rank ? p : (size_t)rank];
    rc[p] = sc[p];
    sd[p] = so;
    rd[p] = ro;
    so += sc[p];
    ro += rc[p];
  }
  wrong = 0;
  memset(out, 0xff, sizeof(float) * ro);
  CHECK(purlin_all_to_all_v(in, sc, sd, out, rc, rd, PURLIN_F32, comm, NULL, NULL));
  for (size_t s = 0; s < W; s++) {
    /* rank s sent me its block at its own displacement for me: the sum of its counts before me */
    size_t off = 0;
    for (int p = 0; p < rank; p++) off += counts[(size_t)p < s ? (size_t)p : s];
    for (size_t i = 0; i < rc[s]; i++) wrong += out[rd[s] + i] != val((int)s, off + i);
  }
  ok &= report("all_to_all_v", wrong, ro);
  free(sc);
  free(counts);
  free(in);
  free(out);
  return (int)ok;
}

static void bench(void) {
  static const size_t sizes[] = {8 << 10, 64 << 10, 1 << 20, 16 << 20};
  if (rank == 0) printf("\n%10s %12s %12s %12s\n", "bytes", "AR time(us)", "algbw(GB/s)",
                        "busbw(GB/s)");
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    size_t n = sizes[k] / sizeof(float);
    float *a = malloc(sizes[k]), *b = malloc(sizes[k]);
    for (size_t i = 0; i < n; i++) a[i] = val(rank, i);
    int iters = sizes[k] >= (1 << 20) ? 5 : 50;
    CHECK(purlin_all_reduce(a, b, n, PURLIN_F32, PURLIN_SUM, comm, NULL, NULL));
    double t0 = now_us();
    for (int i = 0; i < iters; i++)
      CHECK(purlin_all_reduce(a, b, n, PURLIN_F32, PURLIN_SUM, comm, NULL, NULL));
    double us = (now_us() - t0) / iters, algbw = sizes[k] / us / 1e3;
    if (rank == 0)
      printf("%10zu %12.1f %12.3f %12.3f\n", sizes[k], us, algbw,
             algbw * 2.0 * (world - 1) / world);
    free(a);
    free(b);
  }
}

int main(void) {
  purlin_datapath_t dp;
  if (purlin_comm_init_env(&comm, NULL) != PURLIN_OK) {
    fprintf(stderr, "quickstart: %s\n(run it under a launcher: purlinrun -n 4 quickstart)\n",
            purlin_comm_last_error(NULL));
    return 1;
  }
  purlin_comm_rank(comm, &rank);
  purlin_comm_size(comm, &world);
  purlin_comm_datapath(comm, &dp);
  if (rank == 0)
    printf("purlin quickstart: %d ranks on the %s datapath\n", world,
           dp == PURLIN_DATAPATH_CUDA ? "CUDA" : "host");
  int ok = run_checks(1000) & run_checks(200000);
  if (ok) bench();
  purlin_comm_destroy(comm);
  if (rank == 0) printf("%s\n", ok ? "quickstart: all collectives OK" : "quickstart: FAILED");
  return ok ? 0 : 1;
}
