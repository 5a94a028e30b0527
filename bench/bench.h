/* bench.h -- the benchmark driver's shared declarations: the table of collectives, the geometry of
 * one call (counts, displacements, what each rank must move), the memory/timing backend (host or
 * CUDA), input generation and checking, and the NCCL baseline. */
#ifndef BENCH_H
#define BENCH_H

#include <stddef.h>
#include <stdint.h>

#include "purlin.h"

#ifndef BENCH_CUDA
#define BENCH_CUDA 0
#endif

/* ---- the table of collectives --------------------------------------------------------------- */
typedef enum { B_AR, B_AG, B_RS, B_A2A, B_AGV, B_RSV, B_A2AV, B_NCOLL } bench_coll_id_t;

typedef struct {
  const char *tool;      /* "testAR": also the executable's name */
  const char *name;      /* "AllReduce" */
  int reduce;            /* takes an op */
  int vlen;              /* variable-length (Zipf splits) */
  double bus_factor_num; /* busbw = algbw * (num * (n-1) / n) */
} bench_coll_t;

extern const bench_coll_t bench_colls[B_NCOLL];

/* One segment of a rank's output: `len` elements at output offset `out`, equal to the input of rank
 * `src` at offset `in` (copy), or to the reduction over all ranks of their inputs at offset `in`.
 */
typedef struct {
  size_t out, in, len;
  int src; /* -1: reduction over all ranks */
} bench_seg_t;

/* The geometry of one call on one rank: a pure function of (collective, size, dtype, world, rank,
 * seed, splits), so every rank can compute every other rank's. */
typedef struct {
  int coll, world, rank;
  size_t esize;
  size_t bytes;       /* S, the size column: the full array (nccl-tests convention) */
  size_t count;       /* the count column: elements of the full array */
  size_t scount;      /* fixed collectives: the count argument of the call */
  size_t send_elems;  /* extent of the send buffer, elements */
  size_t recv_elems;  /* extent of the recv buffer, elements */
  size_t inplace_off; /* in place: AG/AGV input, RS/RSV output offset inside the one buffer */
  size_t *sc, *sd, *rc, *rd; /* V variants: the call's counts and displacements (world each) */
  bench_seg_t *segs;
  int nsegs;
  double move_bytes; /* bytes this rank must receive or read from peers at minimum */
  /* Ranks that share one memory (one GPU under MPS, or the host): the memory traffic the call
   * needs at least, per rank on average, in bytes of a copy ((reads + writes) / 2), out of place:
   * every output byte written once, every input byte the call needs read once (bench_mem_bytes) */
  double mem_bytes;
} bench_geom_t;

/* The V variants' splits: Zipf exponent, in multiples of unit bytes (a power of two >= 16; what
 * rounding leaves to the heaviest part: bench/README.md); pair (AllToAllV only): ranks 0 and 1 send each other
 * the size and every other block is 1 KiB, in place of the Zipf matrix (bench.c, --pair). */
typedef struct {
  double zipf;
  size_t unit;
  int pair;
} bench_split_t;
int bench_geom_make(bench_geom_t *g, int coll, size_t bytes, int dtype, int world, int rank,
                    uint64_t seed, const bench_split_t *sp);
void bench_geom_free(bench_geom_t *g);
/* mem_bytes of a collective on n ranks whose full array (the size column) is S bytes: AllReduce,
 * the gathers, AllToAll(V): S (each rank writes its S-byte output and reads S of inputs);
 * ReduceScatter(V): (n + 1) S / 2n (a rank reads its shard of every input, S, and writes S / n). */
double bench_mem_bytes(int coll, double S, int n);

/* ---- inputs and checking -------------------------------------------------------------------- */
/* Input element i of `rank` for (seed, size, buffer): random, never zero, finite (elem.h's
 * generator; bench_gen_dev writes the same bits on the GPU). */
void bench_gen(void *dst, int dtype, uint64_t seed, int rank, size_t bytes, int buf, size_t first,
               size_t n);
/* Compare a rank's output (read through bench_get) with the host reference, built from the
 * regenerated inputs of all ranks with pl_reduce_elems; return the number of wrong elements.
 * exact: bitwise; else floats within a tolerance of the accumulation order. The reference
 * implementation of the check. */
size_t bench_check(const bench_geom_t *g, const void *out, int dtype, int op, uint64_t seed,
                   int exact);
/* Whether floats are compared within the tolerance (nondet float SUM/AVG/PROD) or bitwise. */
int bench_check_tolerant(const bench_geom_t *g, int dtype, int op, int exact);
/* The device check's algorithm (elem.h, one element at a time) run on the host: what
 * bench_check_dev computes, testable without a GPU. */
size_t bench_check_emul(const bench_geom_t *g, const void *out, int dtype, int op, uint64_t seed,
                        int exact);
/* Flip a high bit of one element of a rank's output, in the buffer (PURLIN_BENCH_CORRUPT). */
void bench_corrupt(const bench_geom_t *g, void *out);
struct bench_elem_ctx;
void bench_elem_ctx_init(struct bench_elem_ctx *c, const bench_geom_t *g, int dtype, int op,
                         uint64_t seed, int exact);
/* CUDA (check.cu): the generator and the check on the GPU, on B.stream; both synchronise. */
void bench_gen_dev(void *dst, int dtype, uint64_t seed, int rank, size_t bytes, int buf,
                   size_t first, size_t n);
size_t bench_check_dev(const bench_geom_t *g, const void *out, int dtype, int op, uint64_t seed,
                       int exact);

/* ---- memory and timing backend ----------------------------------------------------------------
 */
typedef struct {
  purlin_comm_t comm;
  int rank, world;
  int cuda;           /* the communicator runs on the CUDA datapath */
  int use_purlin_mem; /* --mem purlin (1), --mem reg (2: cudaMalloc + purlin_mem_register) */
  int device;
  void *stream;  /* cudaStream_t, or NULL */
  void *scratch; /* device scratch for bookkeeping collectives (CUDA) */
} bench_env_t;

extern bench_env_t B;

void *bench_alloc(size_t bytes);
void bench_free(void *p);
void bench_put(void *dst, const void *src, size_t bytes); /* host -> buffer */
void bench_get(void *dst, const void *src, size_t bytes); /* buffer -> host */
void bench_fill(void *dst, int byte, size_t bytes);
void bench_sync(void);
double bench_now_us(void); /* CLOCK_MONOTONIC, microseconds */
void bench_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
#define BENCH_OK(call)                                                                             \
  do {                                                                                             \
    purlin_status_t st_ = (call);                                                                  \
    if (st_ != PURLIN_OK)                                                                          \
      bench_die("%s: %s: %s", #call, purlin_status_name(st_), purlin_comm_last_error(B.comm));     \
  } while (0)

/* Bookkeeping collectives on host values, through purlin (staged through device memory on CUDA). */
void bench_allreduce_host(void *vals, size_t count, purlin_dtype_t dtype, purlin_op_t op);
void bench_allgather_host(const void *mine, void *all, size_t bytes_each);
void bench_barrier(void);

/* One call of something timed: i is the call's index (for buffer rotation). Returns 0 on success.
 */
typedef int (*bench_call_fn)(void *arg, int i);

/* Time `iters` calls of fn on this rank, `repeats` times: per-call microseconds into us[repeats].
 * graph > 0 (CUDA): capture the iters calls in a graph once and replay it `graph` times per repeat.
 * A barrier precedes every repeat; `warmup` calls (graph launches) come first. */
int bench_time(bench_call_fn fn, void *arg, int iters, int repeats, int warmup, int graph,
               double *us);
/* CUDA: the zero-byte all-to-all barrier floor, a kernel independent of purlin (floor.cu): median
 * per-call us in graph replay, max over ranks; fat = with 4 KiB kernel arguments. */
double bench_floor_barrier_us(int fat, int iters, int repeats, int warmup, int graph);
/* CUDA: the ideal one-shot AllReduce of `bytes` of bf16 on `ctas` CTAs (floor.cu: the latency
 * regime's datapath without purlin's control; pad: after pad passes over ~16 KB of straight-line code), median per call in graph replay, max over ranks;
 * -1 if its checked call got a wrong element on any rank. */
double bench_floor_ideal_ar_us(size_t bytes, int ctas, int pad, int iters, int repeats, int warmup,
                               int graph);
/* Copy bandwidth of this rank (bytes copied per second), all ranks copying at once. */
double bench_copy_bw(size_t bytes, int repeats);

/* Device of this rank (CUDA builds): local rank modulo the number of devices; -1 without a GPU. */
int bench_pick_device(void);
int bench_cuda_setup(void); /* after init on the CUDA datapath: stream, scratch */
void bench_cuda_teardown(void);
/* An identifier of this rank's GPU (PCI bus id), "" without CUDA. */
void bench_gpu_id(char *buf, size_t len);

/* ---- NCCL baseline (dlopen at run time) ------------------------------------------------------ */
/* Load libnccl.so.2 and create a communicator over the same ranks. Returns 0, or -1 with err set.
 */
int bench_nccl_open(char *err, size_t len);
int bench_nccl_launch(const bench_geom_t *g, const void *send, void *recv, int dtype, int op);
int bench_nccl_supports_inplace(int coll);
const char *bench_nccl_last_error(void);
int bench_nccl_version(void);
void bench_nccl_close(void);

#endif
