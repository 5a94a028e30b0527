/* bench.c -- the benchmark driver behind testAR testAG testRS testA2A testAGV testRSV testA2AV.
 * One source: the collective comes from the BENCH_COLL compile definition, else from argv[0].
 * Output reads like nccl-tests; every size is checked against a reference regenerated from the
 * inputs (on the GPU on the CUDA datapath, check.cu; on the host otherwise); the speed of light
 * (copy bandwidth, zero-byte all-to-all barrier) is measured in the same run; --baseline nccl runs
 * NCCL beside purlin. See bench/README.md. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

#define MAX_REPEATS 1000

typedef struct {
  size_t min_bytes, max_bytes;
  double factor;
  int iters, warmup, repeats, graph, check, placement; /* placement: 0 oop, 1 ip, 2 both */
  int dtypes[PURLIN_DTYPE_COUNT], ndtypes;
  int ops[PURLIN_OP_COUNT], nops;
  uint64_t seed;
  bench_split_t split; /* --zipf, --split-unit, --pair */
  int det;
  int baseline_nccl;
  int purlin_mem;
  size_t rotate_bytes;
  int rotate_buffers;
  const char *json, *csv;
  int check_on, gen_on; /* where inputs are checked / generated: WHERE_* */
} opts_t;

/* Where the check runs: the host reference (bench_check), the GPU (bench_check_dev), or the GPU's
 * algorithm emulated on the host (bench_check_emul, for tests without a GPU); auto: the GPU on the
 * CUDA datapath, the host otherwise. The inputs likewise (host or device generator). */
enum { WHERE_AUTO, WHERE_HOST, WHERE_DEVICE, WHERE_EMUL };
static const char *const where_names[] = {"auto", "host", "device", "emul"};

static opts_t O = {1024,
                   (size_t)64 << 20,
                   2.0,
                   20,
                   5,
                   5,
                   0,
                   1,
                   2,
                   {PURLIN_BF16},
                   1,
                   {PURLIN_SUM},
                   1,
                   1,
                   {0.125, 16, 0},
                   0,
                   0,
                   0,
                   (size_t)32 << 20,
                   4,
                   NULL,
                   NULL,
                   WHERE_AUTO,
                   WHERE_AUTO};
static int coll;
static int corrupt_env;

/* ---- arguments ---------------------------------------------------------------------------- */
static void usage(const char *prog) {
  printf("usage: %s [minBytes] [maxBytes] [graphLaunches] [runs] [warmup] [seed] [flags]\n"
         "Run under a launcher: purlinrun -n N %s ... (or torchrun, mpirun, srun).\n"
         "  -b, --minbytes SIZE   smallest size (1K, 64M, 1G; default 1K)\n"
         "  -e, --maxbytes SIZE   largest size (default 64M)\n"
         "  -f, --stepfactor F    multiply the size by F (default 2)\n"
         "  -n, --iters N         calls per timed sample = positional `runs` (default 20)\n"
         "  -R, --repeats N       timed samples; the median is reported (default 5)\n"
         "  -w, --warmup N        warm-up calls, or graph launches with -G (default 5)\n"
         "  -G, --graph N         CUDA: capture the N-call loop in a graph, replay it N times per "
         "sample (default 0: eager)\n"
         "  -c, --check 0|1       check every size (default 1)\n"
         "      --check-on W      auto|host|device|emul: where the check runs (auto: device on the "
         "CUDA datapath, else host; emul: the device algorithm on the host)\n"
         "      --gen-on W        auto|host|device: where the inputs are generated (same bits)\n"
         "  -d, --datatype T      f32 f16 bf16 f64 i8 u8 i32 u32 i64 u64 fp8_e4m3 fp8_e5m2, or all "
         "(default bf16)\n"
         "  -o, --op OP           sum prod min max avg, or all (default sum)\n"
         "  -i, --inplace 0|1|2   0 out-of-place only, 1 in-place only, 2 both (default 2)\n"
         "  -z, --seed N          seed of the inputs and of the V splits (default 1)\n"
         "      --zipf S          V variants: Zipf exponent of the splits (default 0.125)\n"
         "      --split-unit BYTES  V variants: the splits in multiples of BYTES (a power of two, "
         ">= 16; default 16)\n"
         "      --pair            AllToAllV: ranks 0 and 1 send each other the size, every other "
         "block is 1 KiB (the direct kernel beside the lean ones)\n"
         "      --mode det|nondet reduction mode (default nondet)\n"
         "      --mem malloc|purlin|reg  buffers from malloc/cudaMalloc, purlin_mem_alloc, or\n"
         "                           cudaMalloc registered with purlin_mem_register (CUDA)\n"
         "      --rotate BYTES    rotate input buffers when a size's buffers fit in BYTES (32M)\n"
         "      --baseline nccl   run NCCL beside purlin (CUDA, one rank per GPU)\n"
         "  -J, --json FILE       write all rows and parameters as JSON\n"
         "      --csv FILE        write all rows as CSV\n"
         "  -h, --help            this text\n"
         "Environment: PURLIN_BENCH_CORRUPT=1 flips one output element before each check (tests);\n"
         "  PURLIN_BENCH_CHECK_ON, PURLIN_BENCH_GEN_ON, PURLIN_BENCH_MODE: defaults of --check-on,\n"
         "  --gen-on, --mode.\n",
         prog, prog);
}

static size_t parse_size(const char *s) {
  char *end;
  double v = strtod(s, &end);
  switch (toupper((unsigned char)*end)) {
  case 'K':
    v *= 1024.0;
    end++;
    break;
  case 'M':
    v *= 1048576.0;
    end++;
    break;
  case 'G':
    v *= 1073741824.0;
    end++;
    break;
  case 'T':
    v *= 1099511627776.0;
    end++;
    break;
  default:
    break;
  }
  if (toupper((unsigned char)*end) == 'B')
    end++;
  if (end == s || *end || v < 0)
    bench_die("bad size '%s' (examples: 1024, 1K, 64M, 1G)", s);
  return (size_t)v;
}

static long parse_int(const char *s, const char *what) {
  char *end;
  long v = strtol(s, &end, 0);
  if (end == s || *end)
    bench_die("bad %s '%s'", what, s);
  return v;
}

static int parse_dtype(const char *s) {
  static const struct {
    const char *alias;
    int dt;
  } aliases[] = {
      {"float", PURLIN_F32},     {"half", PURLIN_F16},        {"bfloat16", PURLIN_BF16},
      {"double", PURLIN_F64},    {"int8", PURLIN_I8},         {"uint8", PURLIN_U8},
      {"int32", PURLIN_I32},     {"uint32", PURLIN_U32},      {"int64", PURLIN_I64},
      {"uint64", PURLIN_U64},    {"f8e4m3", PURLIN_FP8_E4M3}, {"f8e5m2", PURLIN_FP8_E5M2},
      {"e4m3", PURLIN_FP8_E4M3}, {"e5m2", PURLIN_FP8_E5M2},   {"fp8", PURLIN_FP8_E4M3}};
  for (int i = 0; i < PURLIN_DTYPE_COUNT; i++)
    if (!strcmp(s, purlin_dtype_name((purlin_dtype_t)i)))
      return i;
  for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
    if (!strcmp(s, aliases[i].alias))
      return aliases[i].dt;
  bench_die("unknown dtype '%s' (f32 f16 bf16 f64 i8 u8 i32 u32 i64 u64 fp8_e4m3 fp8_e5m2 all)", s);
}

static int parse_where(const char *s, const char *what, int emul_ok) {
  for (int i = 0; i < 4; i++)
    if (!strcmp(s, where_names[i]) && (i != WHERE_EMUL || emul_ok))
      return i;
  bench_die("%s is auto, host or device%s, not '%s'", what, emul_ok ? " (or emul)" : "", s);
}

/* det: 1, nondet: 0 */
static int parse_mode(const char *s, const char *what) {
  if (!strcmp(s, "det") || !strcmp(s, "nondet"))
    return !strcmp(s, "det");
  bench_die("%s is det or nondet, not '%s'", what, s);
}

static int parse_op(const char *s) {
  for (int i = 0; i < PURLIN_OP_COUNT; i++)
    if (!strcmp(s, purlin_op_name((purlin_op_t)i)))
      return i;
  bench_die("unknown op '%s' (sum prod min max avg all)", s);
}

static void parse_args(int argc, char **argv) {
  int npos = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (a[0] != '-') {
      switch (npos++) {
      case 0:
        O.min_bytes = parse_size(a);
        break;
      case 1:
        O.max_bytes = parse_size(a);
        break;
      case 2:
        O.graph = (int)parse_int(a, "graphLaunches");
        break;
      case 3:
        O.iters = (int)parse_int(a, "runs");
        break;
      case 4:
        O.warmup = (int)parse_int(a, "warmup");
        break;
      case 5:
        O.seed = (uint64_t)parse_int(a, "seed");
        break;
      default:
        bench_die("too many positional arguments at '%s' (see -h)", a);
      }
      continue;
    }
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      if (B.rank == 0)
        usage(argv[0]);
      exit(0);
    }
#define ARG(s, l)                                                                                  \
  ((!strcmp(a, s) || !strcmp(a, l)) && (i + 1 < argc || (bench_die("%s needs a value", a), 0)))
    if (ARG("-b", "--minbytes"))
      O.min_bytes = parse_size(argv[++i]);
    else if (ARG("-e", "--maxbytes"))
      O.max_bytes = parse_size(argv[++i]);
    else if (ARG("-f", "--stepfactor"))
      O.factor = atof(argv[++i]);
    else if (ARG("-n", "--iters"))
      O.iters = (int)parse_int(argv[++i], "iters");
    else if (ARG("-R", "--repeats"))
      O.repeats = (int)parse_int(argv[++i], "repeats");
    else if (ARG("-w", "--warmup"))
      O.warmup = (int)parse_int(argv[++i], "warmup");
    else if (ARG("-G", "--graph"))
      O.graph = (int)parse_int(argv[++i], "graph launches");
    else if (ARG("-c", "--check"))
      O.check = (int)parse_int(argv[++i], "check");
    else if (ARG("-i", "--inplace"))
      O.placement = (int)parse_int(argv[++i], "-i");
    else if (ARG("-z", "--seed"))
      O.seed = (uint64_t)parse_int(argv[++i], "seed");
    else if (ARG("--zipf", "--zipf"))
      O.split.zipf = atof(argv[++i]);
    else if (ARG("--split-unit", "--split-unit")) {
      O.split.unit = parse_size(argv[++i]);
      if (O.split.unit < 16 || (O.split.unit & (O.split.unit - 1)))
        bench_die("--split-unit %zu: a power of two of at least 16 bytes", O.split.unit);
    } else if (!strcmp(a, "--pair"))
      O.split.pair = 1;
    else if (ARG("--rotate", "--rotate"))
      O.rotate_bytes = parse_size(argv[++i]);
    else if (ARG("-J", "--json"))
      O.json = argv[++i];
    else if (ARG("--csv", "--csv"))
      O.csv = argv[++i];
    else if (ARG("--check-on", "--check-on"))
      O.check_on = parse_where(argv[++i], "--check-on", 1);
    else if (ARG("--gen-on", "--gen-on"))
      O.gen_on = parse_where(argv[++i], "--gen-on", 0);
    else if (ARG("--mode", "--mode"))
      O.det = parse_mode(argv[++i], "--mode");
    else if (ARG("--mem", "--mem")) {
      const char *m = argv[++i];
      if (!strcmp(m, "purlin"))
        O.purlin_mem = 1;
      else if (!strcmp(m, "reg"))
        O.purlin_mem = 2;
      else if (!strcmp(m, "malloc") || !strcmp(m, "cuda"))
        O.purlin_mem = 0;
      else
        bench_die("--mem is malloc, purlin or reg, not '%s'", m);
    } else if (ARG("--baseline", "--baseline")) {
      const char *m = argv[++i];
      if (strcmp(m, "nccl"))
        bench_die("--baseline: only 'nccl' is known, not '%s'", m);
      O.baseline_nccl = 1;
    } else if (ARG("-d", "--datatype")) {
      const char *d = argv[++i];
      O.ndtypes = 0;
      if (!strcmp(d, "all"))
        for (int k = 0; k < PURLIN_DTYPE_COUNT; k++)
          O.dtypes[O.ndtypes++] = k;
      else
        O.dtypes[O.ndtypes++] = parse_dtype(d);
    } else if (ARG("-o", "--op")) {
      const char *d = argv[++i];
      O.nops = 0;
      if (!strcmp(d, "all"))
        for (int k = 0; k < PURLIN_OP_COUNT; k++)
          O.ops[O.nops++] = k;
      else
        O.ops[O.nops++] = parse_op(d);
    } else
      bench_die("unknown argument '%s' (see -h)", a);
#undef ARG
  }
  if (O.min_bytes == 0)
    O.min_bytes = 1;
  if (O.max_bytes < O.min_bytes)
    O.max_bytes = O.min_bytes;
  if (O.iters < 1 || O.repeats < 1 || O.repeats > MAX_REPEATS || O.warmup < 0 || O.graph < 0)
    bench_die("need iters >= 1, 1 <= repeats <= %d, warmup >= 0, graph >= 0", MAX_REPEATS);
  if (O.placement < 0 || O.placement > 2)
    bench_die("-i is 0, 1 or 2");
  if (!bench_colls[coll].reduce)
    O.nops = 1, O.ops[0] = PURLIN_SUM;
}

/* auto -> device on the CUDA datapath, host otherwise; device needs the CUDA datapath. */
static void resolve_where(void) {
  int dev = B.cuda && BENCH_CUDA;
  if (O.check_on == WHERE_AUTO)
    O.check_on = dev ? WHERE_DEVICE : WHERE_HOST;
  if (O.gen_on == WHERE_AUTO)
    O.gen_on = dev ? WHERE_DEVICE : WHERE_HOST;
  if (!dev && (O.check_on == WHERE_DEVICE || O.gen_on == WHERE_DEVICE))
    bench_die("--check-on/--gen-on device need the CUDA datapath (this run is on the host "
              "datapath%s)",
              BENCH_CUDA ? "" : ", and the bench was built without CUDA");
}

static int coll_from_name(const char *argv0) {
#ifdef BENCH_COLL
  (void)argv0;
  return BENCH_COLL;
#else
  const char *base = strrchr(argv0, '/');
  base = base ? base + 1 : argv0;
  for (int c = 0; c < B_NCOLL; c++)
    if (!strcmp(base, bench_colls[c].tool))
      return c;
  fprintf(stderr, "bench: run as one of testAR testAG testRS testA2A testAGV testRSV testA2AV\n");
  exit(2);
#endif
}

/* ---- buffers ------------------------------------------------------------------------------ */
#define MAX_BUFS 8
static void *sendb[MAX_BUFS], *recvb[MAX_BUFS];
static int nbufs_alloc;

static size_t *sweep;
static int nsizes;

static void make_sweep(void) {
  sweep = malloc(sizeof(size_t) * 256);
  for (double s = (double)O.min_bytes; s <= (double)O.max_bytes && nsizes < 256;) {
    sweep[nsizes++] = (size_t)s;
    double next = O.factor > 1 ? s * O.factor : s + 1e300;
    if ((size_t)next <= (size_t)s)
      break;
    s = next;
  }
}

static int fits_rotation(const bench_geom_t *g) {
  return (g->send_elems + g->recv_elems) * g->esize <= O.rotate_bytes;
}

/* Allocate once: buffer 0 for the largest size, buffers 1.. for sizes that rotate. The sizes are
 * maxima over every rank, so that purlin_mem_alloc (collective) gets the same size everywhere. */
static void alloc_buffers(void) {
  size_t s0 = 0, r0 = 0, s1 = 0, r1 = 0;
  for (int d = 0; d < O.ndtypes; d++)
    for (int k = 0; k < nsizes; k++)
      for (int r = 0; r < B.world; r++) {
        bench_geom_t g;
        if (bench_geom_make(&g, coll, sweep[k], O.dtypes[d], B.world, r, O.seed, &O.split))
          bench_die("out of memory");
        size_t sb = g.send_elems * g.esize, rb = g.recv_elems * g.esize;
        if (sb > s0)
          s0 = sb;
        if (rb > r0)
          r0 = rb;
        if (fits_rotation(&g)) {
          if (sb > s1)
            s1 = sb;
          if (rb > r1)
            r1 = rb;
        }
        bench_geom_free(&g);
      }
  nbufs_alloc = s1 + r1 > 0 ? O.rotate_buffers : 1;
  for (int b = 0; b < nbufs_alloc; b++) {
    sendb[b] = bench_alloc(b ? s1 : s0);
    recvb[b] = bench_alloc(b ? r1 : r0);
  }
}

/* ---- one call ----------------------------------------------------------------------------- */
typedef struct {
  const bench_geom_t *g;
  int dtype, op, inplace, nbufs, nccl;
  purlin_opts_t opts;
} call_t;

static void pointers(const call_t *c, int b, void **send, void **recv, void **out) {
  const bench_geom_t *g = c->g;
  char *s = sendb[b], *r = recvb[b];
  size_t off = g->inplace_off * g->esize;
  *send = s, *recv = r, *out = r;
  if (!c->inplace)
    return;
  if (coll == B_RS || coll == B_RSV)
    *recv = *out = s + off;
  else if (coll == B_AG || coll == B_AGV)
    *send = r + off;
  else
    *send = r;
}

static purlin_status_t purlin_call(const call_t *c, const void *s, void *r) {
  const bench_geom_t *g = c->g;
  purlin_dtype_t t = (purlin_dtype_t)c->dtype;
  purlin_op_t o = (purlin_op_t)c->op;
  purlin_comm_t m = B.comm;
  switch (coll) {
  case B_AR:
    return purlin_all_reduce(s, r, g->scount, t, o, m, B.stream, &c->opts);
  case B_AG:
    return purlin_all_gather(s, r, g->scount, t, m, B.stream, &c->opts);
  case B_RS:
    return purlin_reduce_scatter(s, r, g->scount, t, o, m, B.stream, &c->opts);
  case B_A2A:
    return purlin_all_to_all(s, r, g->scount, t, m, B.stream, &c->opts);
  case B_AGV:
    return purlin_all_gather_v(s, g->rc[g->rank], r, g->rc, g->rd, t, m, B.stream, &c->opts);
  case B_RSV:
    return purlin_reduce_scatter_v(s, r, g->rc, g->sd, t, o, m, B.stream, &c->opts);
  default:
    return purlin_all_to_all_v(s, g->sc, g->sd, r, g->rc, g->rd, t, m, B.stream, &c->opts);
  }
}

static int call_fn(void *arg, int i) {
  const call_t *c = arg;
  void *s, *r, *out;
  pointers(c, i % c->nbufs, &s, &r, &out);
  if (c->nccl) {
    if (bench_nccl_launch(c->g, s, r, c->dtype, c->op))
      bench_die("NCCL: %s", bench_nccl_last_error());
    return 0;
  }
  purlin_status_t st = purlin_call(c, s, r);
  if (st)
    bench_die("%s: %s: %s", bench_colls[coll].name, purlin_status_name(st),
              purlin_comm_last_error(B.comm));
  return 0;
}

static int barrier_fn(void *arg, int i) {
  (void)arg, (void)i;
  purlin_status_t st = purlin_all_to_all(NULL, NULL, 0, PURLIN_U8, B.comm, B.stream, NULL);
  if (st)
    bench_die("barrier: %s: %s", purlin_status_name(st), purlin_comm_last_error(B.comm));
  return 0;
}

/* Write this rank's inputs of buffer b (for its placement), generated from (seed, rank, size, b).
 */
static void fill_inputs(const call_t *c, int b) {
  void *s, *r, *out;
  pointers(c, b, &s, &r, &out);
  size_t n = c->g->send_elems, es = c->g->esize, chunk = (size_t)1 << 20;
#if BENCH_CUDA
  if (O.gen_on == WHERE_DEVICE) {
    bench_gen_dev(s, c->dtype, O.seed, B.rank, c->g->bytes, b, 0, n);
    return;
  }
#endif
  if (!B.cuda) {
    bench_gen(s, c->dtype, O.seed, B.rank, c->g->bytes, b, 0, n);
    return;
  }
  char *tmp = malloc(chunk * es);
  if (!tmp)
    bench_die("out of host memory");
  for (size_t off = 0; off < n; off += chunk) {
    size_t L = n - off < chunk ? n - off : chunk;
    bench_gen(tmp, c->dtype, O.seed, B.rank, c->g->bytes, b, off, L);
    bench_put((char *)s + off * es, tmp, L * es);
  }
  free(tmp);
}

static double median(double *v, int n) {
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
      double t = v[j];
      v[j] = v[j - 1];
      v[j - 1] = t;
    }
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Time one placement of one implementation: the median over repeats of the max over ranks. */
static double time_call(call_t *c) {
  double us[MAX_REPEATS];
  bench_time(call_fn, c, O.iters, O.repeats, O.warmup, O.graph, us);
  bench_allreduce_host(us, (size_t)O.repeats, PURLIN_F64, PURLIN_MAX);
  return median(us, O.repeats);
}

static double check_s; /* this rank's seconds in checks (compare, not the call), for the footer */

/* Poison the output, rewrite the inputs of buffer 0, run once, compare on every rank; the sum of
 * the wrong elements over ranks. PURLIN_BENCH_CORRUPT: rank 0 flips one element of its output
 * buffer first (purlin's calls only), whichever check then reads it. */
static uint64_t check_call(call_t *c) {
  void *s, *r, *out;
  pointers(c, 0, &s, &r, &out);
  bench_fill(out, 0xff, c->g->recv_elems * c->g->esize); /* NaN in every float type */
  fill_inputs(c, 0);
  bench_barrier();
  call_fn(c, 0);
  bench_sync();
  int exact = O.det || !bench_colls[coll].reduce;
  if (corrupt_env && B.rank == 0 && !c->nccl)
    bench_corrupt(c->g, out);
  double t0 = bench_now_us();
  uint64_t wrong;
  if (O.check_on == WHERE_EMUL)
    wrong = bench_check_emul(c->g, out, c->dtype, c->op, O.seed, exact);
#if BENCH_CUDA
  else if (O.check_on == WHERE_DEVICE)
    wrong = bench_check_dev(c->g, out, c->dtype, c->op, O.seed, exact);
#endif
  else
    wrong = bench_check(c->g, out, c->dtype, c->op, O.seed, exact);
  check_s += (bench_now_us() - t0) * 1e-6;
  bench_allreduce_host(&wrong, 1, PURLIN_U64, PURLIN_SUM);
  return wrong;
}

/* ---- rows --------------------------------------------------------------------------------- */
typedef struct {
  int ran;
  double us, algbw, busbw, xfloor;
  long long wrong; /* -1: not checked */
  double nccl_us;  /* 0: not run */
  long long nccl_wrong;
} cell_t;

typedef struct {
  size_t bytes, count;
  int dtype, op;
  double floor_us;
  double move_floor_us; /* the floor from the bytes a rank moves, whatever the memory */
  cell_t cell[2]; /* out-of-place, in-place */
} row_t;

static row_t *rows;
static int nrows, cap_rows;
static double copy_bw, barrier_us;
/* Every rank's buffers are in one memory (ranks on one GPU under MPS, or host ranks of one
 * machine): the floor is that memory's traffic (geometry's mem_bytes), not the bytes a rank
 * receives (move_bytes: the bound where each rank has its own memory and a link between them). */
static int mem_shared;

/* 1 when every rank runs on the same host and device (bench_gpu_id), agreed by every rank. */
static int all_in_one_memory(void) {
  char me[96], host[64] = "?", gpu[32];
  gethostname(host, sizeof host);
  host[sizeof host - 1] = 0;
  bench_gpu_id(gpu, sizeof gpu);
  memset(me, 0, sizeof me);
  snprintf(me, sizeof me, "%s|%s", host, B.cuda ? gpu : "host");
  char *all = malloc(sizeof me * (size_t)B.world);
  if (!all)
    bench_die("out of host memory");
  bench_allgather_host(me, all, sizeof me);
  int same = 1;
  for (int r = 1; r < B.world; r++)
    same &= !strcmp(all, all + (size_t)r * sizeof me);
  free(all);
  return same;
}
/* CUDA: purlin's own zero-byte all-to-all, and the flag barrier with 4 KiB kernel arguments
 * (bench/floor.cu), printed beside the floor; 0 on the host datapath. */
static double purlin_barrier_us, fat_barrier_us;
/* The AllReduce tool on CUDA: the ideal one-shot AllReduce (floor.cu) at a few sizes and CTA
 * counts, printed under the speed of light (a bound on what the latency regime's control costs) */
#define N_IDEAL 10
static const struct {
  size_t bytes;
  int ctas, pad;
} ideal_cfg[N_IDEAL] = {{8192, 1, 0},  {8192, 2, 0},   {8192, 4, 0},  {8192, 8, 0},
                        {8192, 1, 1},  {8192, 1, 2},   {8192, 8, 1},  {65536, 4, 0},
                        {65536, 16, 0}, {262144, 16, 0}};
static double ideal_us[N_IDEAL];
static int ideal_run;

static void run_row(size_t bytes, int dtype, int op, row_t *row) {
  bench_geom_t g;
  if (bench_geom_make(&g, coll, bytes, dtype, B.world, B.rank, O.seed, &O.split))
    bench_die("out of memory");
  memset(row, 0, sizeof *row);
  row->bytes = g.bytes;
  row->count = g.count;
  row->dtype = dtype;
  row->op = op;
  row->floor_us = fmax(barrier_us, (mem_shared ? g.mem_bytes : g.move_bytes) / copy_bw * 1e6);
  row->move_floor_us = fmax(barrier_us, g.move_bytes / copy_bw * 1e6);
  double factor = bench_colls[coll].bus_factor_num * (B.world - 1) / B.world;
  for (int ip = 0; ip < 2; ip++) {
    cell_t *cl = &row->cell[ip];
    cl->wrong = cl->nccl_wrong = -1;
    if (O.placement != 2 && O.placement != ip)
      continue;
    call_t c = {&g, dtype, op, ip, fits_rotation(&g) ? nbufs_alloc : 1, 0, PURLIN_OPTS_INIT};
    c.opts.mode = O.det ? PURLIN_DETERMINISTIC : PURLIN_NONDETERMINISTIC;
    for (int b = 0; b < c.nbufs; b++)
      fill_inputs(&c, b);
    cl->ran = 1;
    cl->us = time_call(&c);
    cl->algbw = (double)g.bytes / (cl->us * 1e3);
    cl->busbw = cl->algbw * factor;
    cl->xfloor = cl->us / row->floor_us;
    if (O.check)
      cl->wrong = (long long)check_call(&c);
    if (O.baseline_nccl && (!ip || bench_nccl_supports_inplace(coll))) {
      c.nccl = 1;
      for (int b = 0; b < c.nbufs; b++)
        fill_inputs(&c, b);
      cl->nccl_us = time_call(&c);
      if (O.check)
        cl->nccl_wrong = (long long)check_call(&c);
    }
  }
  bench_geom_free(&g);
}

/* ---- output ------------------------------------------------------------------------------- */
static void print_header(const char *tool, int datapath) {
  char line[160], host[64] = "?", gpu[32];
  gethostname(host, sizeof host);
  host[sizeof host - 1] = 0;
  bench_gpu_id(gpu, sizeof gpu);
  snprintf(line, sizeof line, "#  Rank %2d Pid %7d on %12s device %2d %s", B.rank, (int)getpid(),
           host, B.device, B.cuda ? gpu : "[host]");
  char *all = malloc(sizeof line * (size_t)B.world);
  bench_allgather_host(line, all, sizeof line);
  if (B.rank) {
    free(all);
    return;
  }
  printf("# purlin %s (%s): minBytes %zu maxBytes %zu step: %g(factor) warmup: %d iters: %d "
         "repeats: %d graph: %d check: %d (on %s, inputs on %s)\n",
         tool, bench_colls[coll].name, O.min_bytes, O.max_bytes, O.factor, O.warmup, O.iters,
         O.repeats, O.graph, O.check, where_names[O.check_on], where_names[O.gen_on]);
  printf("# ranks: %d  datapath: %s  memory: %s  mode: %s  seed: %llu%s", B.world,
         datapath == PURLIN_DATAPATH_CUDA ? "cuda" : "host",
         O.purlin_mem == 2 ? "cudaMalloc, registered"
         : O.purlin_mem    ? "purlin_mem_alloc"
                           : (B.cuda ? "cudaMalloc" : "malloc"),
         O.det ? "det" : "nondet", (unsigned long long)O.seed,
         !B.cuda && O.graph ? "  (graph launches ignored: host datapath)" : "");
  if (bench_colls[coll].vlen && !(O.split.pair && coll == B_A2AV))
    printf("  zipf: %g  split unit: %zu B", O.split.zipf, O.split.unit);
  if (O.split.pair && coll == B_A2AV)
    printf("  splits: pair (ranks 0 and 1 send each other the size, other blocks 1 KiB)");
  printf("\n# timing: %s; time = max over ranks, median of %d repeats of %d calls%s\n",
         B.cuda ? (O.graph ? "CUDA graph replay, events" : "CUDA events") : "clock_gettime",
         O.repeats, O.iters, O.graph && B.cuda ? " (x graph launches)" : "");
  printf("#\n");
  for (int r = 0; r < B.world; r++)
    printf("%s\n", all + (size_t)r * sizeof line);
  free(all);
  printf("#\n# Speed of light: copy bandwidth %.2f GB/s (%s of 64 MiB, all ranks at once, slowest "
         "rank of the best sample; x %d ranks x 2 = %.2f TB/s of memory traffic), zero-byte "
         "all-to-all barrier %.2f us%s\n",
         copy_bw / 1e9, B.cuda ? "cudaMemcpyAsync device-to-device" : "memcpy", B.world,
         copy_bw * 2 * B.world / 1e12, barrier_us,
         B.cuda ? " (flag barrier kernel, graph replay)" : " (purlin all_to_all of 0 bytes)");
  if (B.cuda)
    printf("# Beside it: the same barrier with 4 KiB kernel arguments %.2f us; purlin's zero-byte "
           "all_to_all %.2f us%s\n",
           fat_barrier_us, purlin_barrier_us,
           purlin_barrier_us < 0 ? " (not run: PURLIN_PROFILE is set)" : "");
  if (ideal_run) {
    printf("# Ideal one-shot AllReduce bf16 (bench/floor.cu: packets to every peer, rank-order sum, "
           "no header or checks; size/CTAs, +padN: after N passes over 16 KB of code; -1: a wrong element), us:");
    for (int i = 0; i < N_IDEAL; i++)
      printf(" %zuK/%d%s%.0d %.2f", ideal_cfg[i].bytes >> 10, ideal_cfg[i].ctas,
             ideal_cfg[i].pad ? "+pad" : "", ideal_cfg[i].pad, ideal_us[i]);
    printf("\n");
  }
  if (mem_shared)
    printf("# floor(us) = max(barrier, memory traffic per rank / copy bandwidth): every rank is in "
           "one memory, so its traffic is the bound (each output byte written once, each input "
           "byte needed read once, in bytes of a copy); x floor = time / floor (the JSON's "
           "move_floor_us: from the bytes a rank receives, the bound of separate memories)\n");
  else
    printf("# floor(us) = max(barrier, bytes a rank must move / copy bandwidth); x floor = time / "
           "floor\n");
  if (O.baseline_nccl)
    printf("# baseline: NCCL %d (NCCL_NVLS_ENABLE=0); vsNCCL = NCCL time / purlin time\n",
           bench_nccl_version());
  printf("#\n");
  const char *nb = O.baseline_nccl ? "  nccl(us)  vsNCCL" : "";
  printf("# %10s %12s %8s %6s %9s | %9s %8s %8s %6s %7s%s | %9s %8s %8s %6s %7s%s\n", "", "", "",
         "", "", "out-of-place", "", "", "", "", O.baseline_nccl ? "                  " : "",
         "in-place", "", "", "", "", O.baseline_nccl ? "                  " : "");
  printf("# %10s %12s %8s %6s %9s | %9s %8s %8s %6s %7s%s | %9s %8s %8s %6s %7s%s\n", "size",
         "count", "type", "redop", "floor", "time", "algbw", "busbw", "#wrong", "x floor", nb,
         "time", "algbw", "busbw", "#wrong", "x floor", nb);
  printf("# %10s %12s %8s %6s %9s | %9s %8s %8s %6s %7s%s | %9s %8s %8s %6s %7s%s\n", "(B)",
         "(elements)", "", "", "(us)", "(us)", "(GB/s)", "(GB/s)", "", "",
         O.baseline_nccl ? "                  " : "", "(us)", "(GB/s)", "(GB/s)", "", "",
         O.baseline_nccl ? "                  " : "");
  fflush(stdout);
}

static void print_cell(const cell_t *c) {
  if (!c->ran) {
    printf(" | %9s %8s %8s %6s %7s", "-", "-", "-", "-", "-");
    if (O.baseline_nccl)
      printf(" %9s %7s", "-", "-");
    return;
  }
  char w[24];
  if (c->wrong < 0)
    snprintf(w, sizeof w, "N/A");
  else
    snprintf(w, sizeof w, "%lld", c->wrong);
  printf(" | %9.2f %8.3f %8.3f %6s %7.2f", c->us, c->algbw, c->busbw, w, c->xfloor);
  if (O.baseline_nccl) {
    if (c->nccl_us > 0)
      printf(" %9.2f %7.2f", c->nccl_us, c->nccl_us / c->us);
    else
      printf(" %9s %7s", "n/a", "-");
  }
}

static void print_row(const row_t *r) {
  printf("  %10zu %12zu %8s %6s %9.2f", r->bytes, r->count,
         purlin_dtype_name((purlin_dtype_t)r->dtype),
         bench_colls[coll].reduce ? purlin_op_name((purlin_op_t)r->op) : "none", r->floor_us);
  print_cell(&r->cell[0]);
  print_cell(&r->cell[1]);
  printf("\n");
  fflush(stdout);
}

static void json_cell(FILE *f, const char *name, const cell_t *c) {
  fprintf(f, "\"%s\": ", name);
  if (!c->ran) {
    fprintf(f, "null");
    return;
  }
  fprintf(f,
          "{\"time_us\": %.4f, \"algbw_GBs\": %.4f, \"busbw_GBs\": %.4f, \"wrong\": %lld, "
          "\"x_floor\": %.4f",
          c->us, c->algbw, c->busbw, c->wrong, c->xfloor);
  if (c->nccl_us > 0)
    fprintf(f, ", \"nccl_time_us\": %.4f, \"nccl_wrong\": %lld, \"vs_nccl\": %.4f", c->nccl_us,
            c->nccl_wrong, c->nccl_us / c->us);
  fprintf(f, "}");
}

extern char **environ;

/* The PURLIN_* environment in force, as a JSON object (names without the prefix): the settings a
 * sweep varied (tools/tune_table.py reads them back). */
static void json_purlin_env(FILE *f) {
  int n = 0;
  fprintf(f, "\"purlin_env\": {");
  for (char **e = environ; e && *e; e++) {
    const char *kv = *e, *eq = strchr(kv, '=');
    if (strncmp(kv, "PURLIN_", 7) || !eq) continue;
    fprintf(f, "%s\"%.*s\": \"", n++ ? ", " : "", (int)(eq - kv - 7), kv + 7);
    for (const char *c = eq + 1; *c; c++) {
      if (*c == '"' || *c == '\\') fputc('\\', f);
      if ((unsigned char)*c >= 0x20) fputc(*c, f);
    }
    fputc('"', f);
  }
  fprintf(f, "}");
}

static void write_json(const char *path, const char *tool, int datapath, long long wrong,
                       double avg_busbw) {
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "bench: cannot write %s\n", path);
    return;
  }
  char host[64] = "?";
  gethostname(host, sizeof host);
  host[sizeof host - 1] = 0;
  fprintf(f, "{\n  \"tool\": \"%s\", \"collective\": \"%s\", \"host\": \"%s\",\n", tool,
          bench_colls[coll].name, host);
  fprintf(f,
          "  \"params\": {\"ranks\": %d, \"datapath\": \"%s\", \"memory\": \"%s\", \"mode\": "
          "\"%s\", \"min_bytes\": %zu, \"max_bytes\": %zu, \"factor\": %g, \"iters\": %d, "
          "\"repeats\": %d, \"warmup\": %d, \"graph\": %d, \"check\": %d, \"check_on\": \"%s\", "
          "\"gen_on\": \"%s\", \"seed\": %llu, "
          "\"zipf\": %g, \"split_unit\": %zu, \"pair\": %d, \"baseline\": \"%s\", \"nccl_version\": %d, ",
          B.world, datapath == PURLIN_DATAPATH_CUDA ? "cuda" : "host",
          O.purlin_mem == 2 ? "reg" : O.purlin_mem ? "purlin" : "malloc", O.det ? "det" : "nondet", O.min_bytes, O.max_bytes,
          O.factor, O.iters, O.repeats, O.warmup, O.graph, O.check, where_names[O.check_on],
          where_names[O.gen_on], (unsigned long long)O.seed, O.split.zipf, O.split.unit, O.split.pair,
          O.baseline_nccl ? "nccl" : "none", O.baseline_nccl ? bench_nccl_version() : 0);
  json_purlin_env(f);
  fprintf(f, "},\n");
  fprintf(f,
          "  \"speed_of_light\": {\"copy_GBs\": %.4f, \"barrier_us\": %.4f, "
          "\"barrier_4k_args_us\": %.4f, \"purlin_barrier_us\": %.4f, \"floor_model\": \"%s\"},\n",
          copy_bw / 1e9, barrier_us, fat_barrier_us, purlin_barrier_us,
          mem_shared ? "memory" : "move");
  if (ideal_run) {
    fprintf(f, "  \"ideal_oneshot_ar\": [");
    for (int i = 0; i < N_IDEAL; i++)
      fprintf(f, "%s{\"bytes\": %zu, \"ctas\": %d, \"pad\": %d, \"us\": %.4f}", i ? ", " : "",
              ideal_cfg[i].bytes, ideal_cfg[i].ctas, ideal_cfg[i].pad, ideal_us[i]);
    fprintf(f, "],\n");
  }
  fprintf(f, "  \"busbw_factor\": %.6f,\n",
          bench_colls[coll].bus_factor_num * (B.world - 1) / B.world);
  fprintf(f, "  \"rows\": [\n");
  for (int i = 0; i < nrows; i++) {
    const row_t *r = &rows[i];
    fprintf(f,
            "    {\"bytes\": %zu, \"count\": %zu, \"type\": \"%s\", \"redop\": \"%s\", "
            "\"floor_us\": %.4f, \"move_floor_us\": %.4f, ",
            r->bytes, r->count, purlin_dtype_name((purlin_dtype_t)r->dtype),
            bench_colls[coll].reduce ? purlin_op_name((purlin_op_t)r->op) : "none", r->floor_us,
            r->move_floor_us);
    json_cell(f, "out_of_place", &r->cell[0]);
    fprintf(f, ", ");
    json_cell(f, "in_place", &r->cell[1]);
    fprintf(f, "}%s\n", i + 1 < nrows ? "," : "");
  }
  fprintf(f, "  ],\n  \"wrong\": %lld, \"avg_busbw_GBs\": %.4f\n}\n", wrong, avg_busbw);
  fclose(f);
}

static void write_csv(const char *path) {
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "bench: cannot write %s\n", path);
    return;
  }
  fprintf(f, "collective,ranks,bytes,count,type,redop,floor_us,placement,time_us,algbw_GBs,"
             "busbw_GBs,wrong,x_floor,nccl_time_us\n");
  for (int i = 0; i < nrows; i++)
    for (int ip = 0; ip < 2; ip++) {
      const row_t *r = &rows[i];
      const cell_t *c = &r->cell[ip];
      if (!c->ran)
        continue;
      fprintf(f, "%s,%d,%zu,%zu,%s,%s,%.4f,%s,%.4f,%.4f,%.4f,%lld,%.4f,%.4f\n",
              bench_colls[coll].name, B.world, r->bytes, r->count,
              purlin_dtype_name((purlin_dtype_t)r->dtype),
              bench_colls[coll].reduce ? purlin_op_name((purlin_op_t)r->op) : "none", r->floor_us,
              ip ? "in" : "out", c->us, c->algbw, c->busbw, c->wrong, c->xfloor, c->nccl_us);
    }
  fclose(f);
}

int main(int argc, char **argv) {
  const char *tool;
  coll = coll_from_name(argv[0]);
  tool = bench_colls[coll].tool;
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char *ce = getenv("PURLIN_BENCH_CORRUPT");
  corrupt_env = ce && *ce && strcmp(ce, "0");
  const char *we = getenv("PURLIN_BENCH_CHECK_ON");
  if (we && *we)
    O.check_on = parse_where(we, "PURLIN_BENCH_CHECK_ON", 1);
  we = getenv("PURLIN_BENCH_GEN_ON");
  if (we && *we)
    O.gen_on = parse_where(we, "PURLIN_BENCH_GEN_ON", 0);
  we = getenv("PURLIN_BENCH_MODE");
  if (we && *we)
    O.det = parse_mode(we, "PURLIN_BENCH_MODE");
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      usage(argv[0]);
      return 0;
    }
  parse_args(argc, argv);

  purlin_config_t cfg = PURLIN_CONFIG_INIT;
  B.device = bench_pick_device();
  if (B.device >= 0)
    cfg.device = B.device;
  purlin_status_t st = purlin_comm_init_env(&B.comm, &cfg);
  if (st) {
    fprintf(stderr, "%s: purlin_comm_init_env: %s: %s\n(run under a launcher: purlinrun -n N %s)\n",
            tool, purlin_status_name(st), purlin_comm_last_error(B.comm), argv[0]);
    return 2;
  }
  purlin_datapath_t dp;
  BENCH_OK(purlin_comm_rank(B.comm, &B.rank));
  BENCH_OK(purlin_comm_size(B.comm, &B.world));
  BENCH_OK(purlin_comm_datapath(B.comm, &dp));
  B.cuda = dp == PURLIN_DATAPATH_CUDA;
  B.use_purlin_mem = 0;
  if (B.cuda && !BENCH_CUDA)
    bench_die("the communicator is on the CUDA datapath, but this bench "
              "was built without CUDA");
  if (B.cuda)
    bench_cuda_setup();
  else
    B.device = -1;
  resolve_where();

  make_sweep();
  if (O.baseline_nccl) {
    char err[600];
    if (bench_nccl_open(err, sizeof err)) {
      if (B.rank == 0)
        fprintf(stderr, "%s: refusing to run: %s\n", tool, err);
      purlin_comm_destroy(B.comm);
      return 3;
    }
  }
  B.use_purlin_mem = O.purlin_mem;
  alloc_buffers();
  B.use_purlin_mem = 0;

  /* speed of light, measured now, on every rank at once */
  double t = 1.0 / bench_copy_bw((size_t)64 << 20, 5);
  bench_allreduce_host(&t, 1, PURLIN_F64, PURLIN_MAX);
  copy_bw = 1.0 / t;
  mem_shared = all_in_one_memory();
  {
    /* at least 20 calls x 5 repeats after 5 warm-up calls, whatever -n -R -w say: it is cheap, and
     * the first calls of a communicator pay for its setup */
    double us[MAX_REPEATS];
    int it = O.iters > 20 ? O.iters : 20, rep = O.repeats > 5 ? O.repeats : 5;
    /* With PURLIN_PROFILE on the GPU, purlin's zero-byte all_to_all (~1000 calls) is not run, so
     * that the profile printed at exit covers the rows' calls (it is not the floor there). Read as
     * the library reads it (an integer above 0) and agreed, since every rank must make the same
     * calls. */
    const char *pe = getenv("PURLIN_PROFILE");
    int profiling = B.cuda && pe && strtol(pe, NULL, 0) > 0;
    bench_allreduce_host(&profiling, 1, PURLIN_I32, PURLIN_MAX);
    /* GPU: always in graph replay (launch overhead is not the floor of a captured call) */
    if (!profiling) {
      bench_time(barrier_fn, NULL, it, rep, O.warmup > 5 ? O.warmup : 5, O.graph ? O.graph : 10,
                 us);
      bench_allreduce_host(us, (size_t)rep, PURLIN_F64, PURLIN_MAX);
      barrier_us = median(us, rep);
    }
#if BENCH_CUDA
    /* GPU: the floor is a barrier kernel independent of purlin (bench/floor.cu); purlin's own
     * zero-byte all-to-all is printed beside it */
    if (B.cuda) {
      purlin_barrier_us = profiling ? -1 : barrier_us;
      int gl = O.graph ? O.graph : 10, wu = O.warmup > 5 ? O.warmup : 5;
      barrier_us = bench_floor_barrier_us(0, it, rep, wu, gl);
      fat_barrier_us = bench_floor_barrier_us(1, it, rep, wu, gl);
      ideal_run = coll == B_AR && B.world > 1;
      for (int i = 0; ideal_run && i < N_IDEAL; i++)
        ideal_us[i] = bench_floor_ideal_ar_us(ideal_cfg[i].bytes, ideal_cfg[i].ctas,
                                              ideal_cfg[i].pad, it, rep, wu, gl);
    }
#endif
  }
  print_header(tool, dp);

  long long wrong = 0, nccl_wrong = 0;
  double sum_busbw = 0, sum_log_floor = 0, sum_log_nccl = 0;
  int nbus = 0, nnccl = 0;
  for (int d = 0; d < O.ndtypes; d++)
    for (int o = 0; o < O.nops; o++)
      for (int k = 0; k < nsizes; k++) {
        if (nrows == cap_rows) {
          cap_rows = cap_rows ? 2 * cap_rows : 64;
          rows = realloc(rows, sizeof(row_t) * (size_t)cap_rows);
          if (!rows)
            bench_die("out of memory");
        }
        row_t *r = &rows[nrows++];
        run_row(sweep[k], O.dtypes[d], O.ops[o], r);
        for (int ip = 0; ip < 2; ip++) {
          const cell_t *c = &r->cell[ip];
          if (!c->ran)
            continue;
          if (c->wrong > 0)
            wrong += c->wrong;
          if (c->nccl_wrong > 0)
            nccl_wrong += c->nccl_wrong;
          sum_busbw += c->busbw;
          sum_log_floor += log(c->xfloor);
          nbus++;
          if (c->nccl_us > 0)
            sum_log_nccl += log(c->nccl_us / c->us), nnccl++;
        }
        if (B.rank == 0)
          print_row(r);
      }
  double avg = nbus ? sum_busbw / nbus : 0;
  double check_max = check_s;
  bench_allreduce_host(&check_max, 1, PURLIN_F64, PURLIN_MAX);
  if (B.rank == 0) {
    printf("# Out of bounds values : %lld %s\n", wrong, wrong ? "FAILED" : "OK");
    printf("# Avg bus bandwidth    : %g\n", avg);
    if (O.check)
      printf("# Check time           : %.2f s on %s (slowest rank, comparisons only)\n", check_max,
             where_names[O.check_on]);
    if (nbus)
      printf("# Time over floor      : %.2fx (geometric mean)\n", exp(sum_log_floor / nbus));
    if (O.baseline_nccl) {
      printf("# NCCL out of bounds values : %lld %s\n", nccl_wrong, nccl_wrong ? "FAILED" : "OK");
      if (nnccl)
        printf("# vsNCCL (NCCL time / purlin time) : %.2fx (geometric mean)\n",
               exp(sum_log_nccl / nnccl));
    }
    printf("#\n");
    if (O.json)
      write_json(O.json, tool, dp, wrong, avg);
    if (O.csv)
      write_csv(O.csv);
    fflush(stdout);
  }
  /* No rank leaves before rank 0 has written everything: a launcher stops the others as soon as one
   * rank exits with a failure status. */
  bench_barrier();
  if (O.baseline_nccl)
    bench_nccl_close();
  B.use_purlin_mem = O.purlin_mem;
  for (int b = 0; b < nbufs_alloc; b++) {
    bench_free(sendb[b]);
    bench_free(recvb[b]);
  }
  B.use_purlin_mem = 0;
  bench_cuda_teardown();
  purlin_comm_destroy(B.comm);
  free(rows);
  free(sweep);
  return wrong ? 1 : 0;
}
