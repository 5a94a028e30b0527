/* param.h -- every PURLIN_* environment setting, in one table with its default and its doc.
 * `purlin-info` prints the table with the values in force. */
#ifndef PL_PARAM_H
#define PL_PARAM_H

#include <stdint.h>
#include <stdio.h>

/* X(id, kind, default, doc); the variable is "PURLIN_" #id. kinds: INT (decimal), SIZE (bytes, with
 * optional K/M/G suffix, powers of 1024), STR. */
#define PL_PARAM_TABLE(X)                                                                          \
  X(DEBUG, STR, "ERROR", "log level: NONE, ERROR, WARN, INFO, TRACE (or 0..4)")                    \
  X(DEBUG_FILE, STR, "", "log file instead of stderr; %h = host name, %p = pid")                   \
  X(TIMEOUT_MS, INT, "120000", "deadline of every wait, in milliseconds")                          \
  X(DATAPATH, STR, "auto", "auto, host or cuda")                                                   \
  X(STAGING_BYTES, SIZE, "0", "staging memory per rank (two halves); 0: tuning table")             \
  X(PACKET_BYTES, SIZE, "0", "packet window per peer and parity; 0: from the tuning table")       \
  X(CHUNK_BYTES, SIZE, "0", "throughput chunk per block and round; 0: from the tuning table")      \
  X(LATENCY_MAX_BYTES, SIZE, "0", "largest per-peer block sent as packets; 0: tuning table")       \
  X(ONESHOT_MAX_BYTES, SIZE, "0", "largest AllReduce done one-shot (full push); 0: tuning table") \
  X(TWOSHOT_MAX_BYTES, SIZE, "0", "largest two-shot packet AllReduce (1: never); 0: tuning table") \
  X(LANE_BYTES, SIZE, "0", "CUDA: one lane per this many bytes of a call, up to LANES; 0: table") \
  X(POLL_BACKOFF_NS, INT, "-1", "CUDA: ns of sleep between packet polls (0: spin); -1: table")     \
  X(THREADS, INT, "0", "CUDA threads per CTA for every call (32..512); 0: tuning table")         \
  X(LANES, INT, "0", "lanes per role; 0: tuning table")                                          \
  X(LEAN, INT, "-1", "CUDA: packet-only calls run the lean packet kernel (1; 2: not the V collectives) or SNAC's (0); -1: table") \
  X(LEAN_PKTS, INT, "0", "CUDA lean kernel: packets per thread before adding a CTA; 0: table")   \
  X(LEAN_CTAS, INT, "0", "CUDA lean kernel: most CTAs per call; 0: table")                       \
  X(TINY, INT, "-1", "CUDA: the lean kernel's calls with blocks up to TINY_MAX_BYTES (AllReduce, ReduceScatter, AllGather, AllToAll, the V collectives) run the tiny kernels (1) or the lean kernel (0); -1: table") \
  X(TINY_MAX_BYTES, SIZE, "0", "CUDA tiny kernel: largest block (at most 1 MiB); 0: table")       \
  X(TINY_WORDS, INT, "0", "CUDA tiny kernel: 8-byte words of a block per thread before adding a CTA; 0: table") \
  X(DIRECT, INT, "-1", "CUDA: calls above the packet sizes (but in-place AllToAll(V), device counts, AllToAllV with PURLIN_DIRECT_A2AV=0) run the direct kernel (1) or SNAC's kernel (0); -1: table") \
  X(DIRECT_MIN_BYTES, SIZE, "0", "CUDA direct kernel: smallest call (nccl-tests bytes) it takes; 0: table") \
  X(DIRECT_CTAS, INT, "0", "CUDA direct kernel: most CTAs per call (1..128); 0: table")         \
  X(DIRECT_CTA_BYTES, SIZE, "0", "CUDA direct kernel: one CTA per this many bytes of a call; 0: table") \
  X(DIRECT_UNROLL, INT, "0", "CUDA direct kernel, gathers: 16-byte loads in flight per thread (4 or 8); 0: table") \
  X(DIRECT_RED_BATCH, INT, "0", "CUDA direct kernel, 2-byte reductions: sources whose loads are in flight together (4: no spills, or 8); 0: table") \
  X(DIRECT_STREAM, INT, "-1", "CUDA direct kernel, gathers: evict-first (streaming) loads and stores (1) or not (0); -1: table") \
  X(DIRECT_QUEUE, INT, "-1", "CUDA direct kernel, one round of the gathers (no rank stages): the CTAs take pieces of DIRECT_QUEUE_BYTES from a counter (1) or each copies a fixed part of every block (0); -1: table") \
  X(DIRECT_QUEUE_BYTES, SIZE, "0", "CUDA direct kernel: the piece queue's pieces (a multiple of 4 KiB); 0: table") \
  X(DIRECT_ALIGN, INT, "0", "CUDA direct kernel, gathers: align each copy's stores to 16 or 128 bytes; 0: table") \
  X(DIRECT_PUSH, INT, "-1", "CUDA direct kernel, AllReduce, ReduceScatterV and AllToAllV on peer-mapped buffers: each rank stores into the peers' outputs (1: AllReduce's shard into every output; ReduceScatterV: a 1/world slice of the shards, whoever owns them; AllToAllV with packed rdispls: a 1/world part of all blocks) or only into its own (0; any rank's 0 turns it off for the call); -1: table") \
  X(DIRECT_A2AV, INT, "-1", "CUDA: an out-of-place AllToAllV with host counts whose blocks are not all packets runs the direct kernel, which exchanges packets with the ranks whose blocks are (1), or SNAC's kernel (0); every rank must agree; -1: table") \
  X(PDL, INT, "1", "CUDA lean kernel: programmatic dependent launch on sm_90+ with one rank per GPU (2: also when ranks share a GPU; 0: off)") \
  X(SPIN_ITERS, INT, "2000", "host datapath: polls of a flag before blocking on a futex")         \
  X(ZERO_COPY, INT, "1", "read peers' purlin_mem_alloc buffers directly (0: always stage)")       \
  X(DISABLE_MULTIMEM, INT, "1", "never use NVLink multicast (must stay 1 on shared machines)")    \
  X(ATOM, STR, "auto", "GPU atom: auto, 700, 800, 900, 1000, ce")                               \
  X(CE_STREAMS, INT, "4", "atom ce: side streams a call's copies are spread over (1: caller's)") \
  X(PROFILE, INT, "0", "CUDA: time SNAC's phases per call, print the means at destroy")

typedef enum {
#define PL_PARAM_ENUM_(id, kind, def, doc) PL_PARAM_##id,
  PL_PARAM_TABLE(PL_PARAM_ENUM_)
#undef PL_PARAM_ENUM_
      PL_PARAM_COUNT
} pl_param_id_t;

/* The value of an INT or SIZE setting (environment if set and valid, else the default). A value
 * that does not parse is reported once with PL_WARN and the default is used. Cached after first use;
 * pl_param_reload() re-reads the environment (tests). */
int64_t pl_param_int(pl_param_id_t id);
/* The value of a STR setting; never NULL. */
const char *pl_param_str(pl_param_id_t id);
/* The environment variable's name ("PURLIN_TIMEOUT_MS"). */
const char *pl_param_name(pl_param_id_t id);
/* Print the table: name, value in force, default, source (env/default), doc. */
void pl_param_print(FILE *out);
void pl_param_reload(void);
/* Parse a size such as "64K", "1M", "4096"; 0 on success, -1 if malformed. */
int pl_parse_size(const char *s, uint64_t *out);

#endif
