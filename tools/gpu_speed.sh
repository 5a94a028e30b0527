#!/usr/bin/env bash
# On the GPU machine, in one call (about 6 minutes on one H100): issue 5's measurements of the
# working tree, side by side with commit OLD where it changed something.
#   ab:  build both (gpu_ab.sh), gpu_test --quick --graph at worlds 8 and 3 with the default staging
#        and with PURLIN_STAGING_BYTES=4M, then the seven bench tools on purlin_mem_alloc buffers
#        (zero copy), 64 MiB-1 GiB, worlds 8, 4 and 2, old and new;
#   det: deterministic against non-deterministic mode (reductions, zero copy, world 8);
#   stg: ordinary cudaMalloc buffers (staged), default staging against PURLIN_STAGING_BYTES=512M
#        (4x), world 8;
#   lat: 8 KiB-256 KiB, every tool, world 8, graph replay (the latency criteria);
#   rsv: ReduceScatterV spread over the ranks (the default) against PURLIN_DIRECT_PUSH=0, zero
#        copy, world 8 (ReduceScatter beside it: its push knob does nothing);
#   rb: the direct reductions with 4 sources' loads in flight (PURLIN_DIRECT_RED_BATCH=4: bf16
#        without spills) against 8, zero copy, world 8, after gpu_test at world 8 with it;
#   build: new's build only (for the later parts on a fresh machine);
#   tests: new's build and gpu_test runs only (one 8 KiB AllReduce row), when device time is short;
#   prof: PURLIN_PROFILE's phases of AllReduce and AllToAll at 8 KiB only (the means mix a run's
#        sizes), world 8, with the default lean CTAs and with one (where a small call's time goes);
#   a2sp: the direct AllToAllV's spread over the ranks (the default)
#        against PURLIN_DIRECT_PUSH=0, zero copy, world 8 (AllToAll beside it);
#   reg: cudaMalloc buffers registered with purlin_mem_register (zero copy through CUDA IPC),
#        64 MiB-1 GiB, world 8: against stg's staged rows and the purlin_mem_alloc rows;
#   w4, w2: the seven tools on purlin_mem_alloc buffers, 64 MiB-1 GiB, at world 4 / 2;
#   kinds: the direct kernel's calls by what the headers said (PURLIN_PROFILE's kinds line):
#        does AllToAllV / ReduceScatterV spread, on purlin_mem_alloc buffers, 64 MiB, world 8;
#   tiny: the tiny kernel (lean.cu): build, gpu_test at worlds 8 and 3 and the mismatch and
#        kill-small faults with it, every tool at 8 KiB-256 KiB with it and PURLIN_TINY=0 (world 8);
#   tinyb: AllReduce 8 KiB-1 MiB with it, PURLIN_TINY=0 and one-shot only to 32 KiB; AllGather,
#        ReduceScatter, AllToAll 8 KiB-1 MiB with it, PURLIN_TINY=0 and its blocks only to 64 KiB;
#   tinyv: the tiny V kernel against OLD's (both built, gpu_test at worlds 8 and 3, AllGatherV,
#        ReduceScatterV, AllToAllV and AllGather at 8 KiB-256 KiB, world 8), then the faults;
#   lanes2: SNAC's kernel at world 2 (AllToAllV with PURLIN_DIRECT_A2AV=0) with 16 lanes (the
#        table before finding 29) against the table's 32, ReduceScatterV beside it (the direct
#        kernel: unchanged), zero copy, 64 MiB-1 GiB;
#   a2av: AllToAllV by default (the direct kernel where a rank's blocks are not all packets) against
#        PURLIN_DIRECT_A2AV=0 (SNAC's kernel there): zero copy at worlds 8, 4, 2, ordinary buffers
#        at world 8, 8 KiB-256 KiB at 8;
#   final: build, gpu_test at worlds 3, 2, 4 and the faults, every tool at 8 KiB-256 KiB (world 8);
#   lanes3: the same at world 3: 16 lanes against the table's 21 (what residency allows);
#   dprof: the direct kernel's CTAs (PURLIN_PROFILE's direct line: data start skew and span, a
#        CTA's mean and longest data time, the wait after the data), every collective at 64 MiB
#        (the gathers also with PURLIN_DIRECT_PUSH=0: AllToAllV without its spread) and the
#        gathers at 1 GiB, zero copy, world 8 (one size per run: the means are per call);
#   pair: AllToAllV with --pair (ranks 0 and 1 send each other the size, every other block 1 KiB:
#        ranks 2.. on the lean kernels beside the direct kernel of 0 and 1) against
#        PURLIN_DIRECT_A2AV=0 (SNAC's kernel on ranks 0 and 1), zero copy, world 8, 64 MiB-1 GiB;
#   unit: the V collectives with Zipf splits in multiples of 4 KiB (--split-unit 4K: every block
#        128-byte aligned) beside the default 16 bytes, zero copy, world 8, 64 MiB-1 GiB;
#   queue: the gathers and AllToAll(V) with PURLIN_DIRECT_QUEUE (256 KiB and 128 KiB pieces),
#        PURLIN_DIRECT_ALIGN=128 and both against the defaults, zero copy, world 8, 64 MiB-1 GiB;
#        then gpu_test at worlds 8 and 3 with both and with 4 KiB pieces (after a part that built);
#   qab: the defaults against PURLIN_DIRECT_QUEUE=0,PURLIN_DIRECT_ALIGN=16 (finding 33's change),
#        every tool, zero copy, 64 MiB-1 GiB, worlds 8, 4, 2;
#   qsz: the queue's pieces, 64 KiB-512 KiB, AllGatherV and AllToAllV, zero copy, world 8;
#   qtests: gpu_test at worlds 8 and 3 and the faults with the defaults (after a part that built);
#   a2ax: AllToAll(V) with 8 and 12 CTAs, 4 loads in flight, streaming, against the defaults,
#        zero copy, world 8, 64 MiB-1 GiB;
#   flat: AllToAllV's spread on the flat grid (finding 34) against OLD's walk: both built (every
#        tool, for later parts), gpu_test at worlds 8 and 3, AllToAllV and AllToAll old and new
#        and new with 256 KiB and 64 KiB pieces, zero copy, world 8, 64 MiB-1 GiB;
#   flat1: flat's short form, when device time is short: the working tree alone (its build, gpu_test
#        at world 8), AllToAllV and AllToAll with the defaults, 256 KiB pieces and
#        PURLIN_DIRECT_PUSH=0 (AllToAllV without the spread), zero copy, world 8, 64 MiB-1 GiB;
#   atomx: SNAC's kernel (PURLIN_DIRECT=0) with atom 900 (bulk copies, TMA), 800 (cp.async) and
#        700 (ld/st): which atom moves AllToAll's bytes fastest, zero copy, world 8, 64 MiB-1 GiB;
#   zipf0: the V collectives with even splits (--zipf 0: AllToAll's and AllGather's geometry on
#        the V code), zero copy, world 8, 64 MiB-1 GiB (their Zipf rows: part unit16, or w8 of ab).
# (ab also runs the tests with PURLIN_DIRECT_A2AV=0 at both stagings.)
# Every size of every run is checked on the GPU. Each part's summary goes to stdout and
# $OUT/summary.txt as it ends, its logs into $OUT/all.tar (gzipped at the end).
#   OLD=1a0a80e bash tools/gpu_speed.sh
#   PARTS="det lat" bash tools/gpu_speed.sh   # after a call that built (same machine): no build
#   PARTS="new a2avl lat det stg a2avs" bash tools/gpu_speed.sh   # short of device time: no OLD
set -uo pipefail
cd "$(dirname "$0")/.."
D=${OUT:-/tmp/purlin-speed} OLD=${OLD:-HEAD}
PARTS=${PARTS:-"ab det stg lat rb rsv a2av"}
ALL="testAR testAG testRS testA2A testAGV testRSV testA2AV"
mkdir -p "$D"
q() { # part env... : gpu_quick.sh on the build gpu_ab.sh made
  local n=$1
  shift
  env OUT="$D/$n" BUILD=/tmp/pl-bnew SKIP_BUILD=1 TW= TF= BW=8 "$@" timeout -k 5 150 \
    bash tools/gpu_quick.sh > "$D/$n.txt" 2>&1
  rm -f "$D/$n/summary.txt"
}
show() { # part: its summary to stdout and summary.txt, its files into all.tar (so that a call cut
  # off at its time limit still returns every finished part: the device tool returns at most 8 files)
  local f=$1
  { echo "== $f"
    if [ "$f" = ab ]; then grep -E "^test |rc=[1-9]|skipped|FAIL" "$D/ab.txt"; sed -n '/time us/,$p' "$D/ab.txt"
    else grep -vE "^$" "$D/$f.txt" | tail -60; fi; } | tee -a "$D/summary.txt"
  (cd "$D" && tar -rf all.tar --exclude=all.tar --exclude=summary.txt . &&
    find . -mindepth 1 -not -name all.tar -not -name summary.txt -delete)
}
PARTS=$(for p in $PARTS; do if [ "$p" = a2av ]; then echo a2av8 a2avl a2avs a2av4 a2av2; else echo "$p"; fi; done)
for p in $PARTS; do
  case $p in
  ab) env OUT="$D" OLD="$OLD" WORLDS="8 3" TOOLS="$ALL" BWS="8 4 2" \
        TEST_ENVS="- STAGING_BYTES=4M DIRECT_A2AV=0 DIRECT_A2AV=0,STAGING_BYTES=4M" \
        B=64M E=1G F=4 ARGS="--mem purlin" ROUNDS=1 BUDGET=${BUDGET:-300} timeout -k 5 420 \
        bash tools/gpu_ab.sh > "$D/ab.txt" 2>&1 ;;
  new) # ab without OLD, when device time is short: build, tests at both settings, the tools at world 8
    env OUT="$D/new" BUILD=/tmp/pl-bnew CONFIGS="- DIRECT_A2AV=0,STAGING_BYTES=4M" TEST_ALL=1 \
      WORLDS="8 3" TOOLS="$ALL" B=64M E=1G F=4 ARGS="--mem purlin" BW=8 timeout -k 5 330 \
      bash tools/gpu_quick.sh > "$D/new.txt" 2>&1; rm -f "$D/new/summary.txt" ;;
  tiny) # the tiny kernel: build, gpu_test at worlds 8 and 3 (and the mismatch and kill faults) with
    # it, then every tool at 8 KiB-256 KiB (world 8, graph replay) with it and with PURLIN_TINY=0
    env OUT="$D/tiny" BUILD=/tmp/pl-bnew CONFIGS="- TINY=0" WORLDS="8 3" \
      FAULTS="mismatch kill-small" TOOLS="$ALL" B=8K E=256K F=2 BW=8 \
      timeout -k 5 480 bash tools/gpu_quick.sh > "$D/tiny.txt" 2>&1
    rm -f "$D/tiny/summary.txt" ;;
  tinyv) # the tiny V kernel against OLD's: both built, gpu_test at worlds 8 and 3, the V tools
    # and AllGather at 8 KiB-256 KiB (world 8, graph replay, old then new), the faults
    env OUT="$D/tinyv" OLD="$OLD" WORLDS="8 3" TOOLS="testAGV testRSV testA2AV testAG" B=8K \
      E=256K F=2 ROUNDS=1 timeout -k 5 420 bash tools/gpu_ab.sh > "$D/tinyv.txt" 2>&1
    env OUT="$D/tinyvf" BUILD=/tmp/pl-bnew SKIP_BUILD=1 WORLDS=" " FAULTS="mismatch kill-small" \
      TOOLS=testAGV B=8K E=8K BW=8 timeout -k 5 120 bash tools/gpu_quick.sh >> "$D/tinyv.txt" 2>&1
    rm -f "$D/tinyv/summary.txt" "$D/tinyvf/summary.txt" ;;
  final) # a session's final tree: build, gpu_test at worlds 3, 2 and 4 with the faults, every tool
    # at 8 KiB-256 KiB (world 8, graph replay: the latency criteria)
    env OUT="$D/final" BUILD=/tmp/pl-bnew CONFIGS="-" WORLDS="3 2 4" FAULTS="mismatch kill-small" \
      TOOLS="$ALL" B=8K E=256K F=2 BW=8 timeout -k 5 420 bash tools/gpu_quick.sh > "$D/final.txt" 2>&1
    rm -f "$D/final/summary.txt" ;;
  tinyb) # the tiny kernel's sizes: AllReduce 8 KiB-1 MiB with it, with PURLIN_TINY=0 and with
    # one-shot only to 32 KiB; the gathers 8 KiB-1 MiB with it, PURLIN_TINY=0 and its blocks only
    # to 64 KiB (world 8; after a part that built)
    q tinyar CONFIGS="- TINY=0 ONESHOT_MAX_BYTES=32768" TOOLS=testAR B=8K E=1M F=2
    show tinyar
    q tinyg CONFIGS="- TINY=0 TINY_MAX_BYTES=65536" TOOLS="testAG testRS testA2A" B=8K E=1M F=2
    p=tinyg ;;
  tests) # new's build and tests only (no tools): the correctness of a change, when device time is short
    env OUT="$D/tests" BUILD=/tmp/pl-bnew CONFIGS="- STAGING_BYTES=4M DIRECT_A2AV=0" TEST_ALL=1 \
      WORLDS="8 3" FAULTS="mismatch kill-small" TOOLS=testAR B=8K E=8K BUILD_TOOLS="$ALL" BW=8 \
      timeout -k 5 480 \
      bash tools/gpu_quick.sh > "$D/tests.txt" 2>&1
    rm -f "$D/tests/summary.txt" ;;
  qtests) # gpu_test at worlds 8 and 3 and the mismatch and kill faults, the defaults only
    env OUT="$D/qtests" BUILD=/tmp/pl-bnew SKIP_BUILD=1 WORLDS="8 3" FAULTS="mismatch kill-small" \
      CONFIGS=- TOOLS=testAR B=8K E=8K BW=8 timeout -k 5 240 bash tools/gpu_quick.sh \
      > "$D/qtests.txt" 2>&1
    rm -f "$D/qtests/summary.txt" ;;
  build) # the build alone (a fresh machine, before parts that skip it), one 8 KiB AllReduce row
    env OUT="$D/build" BUILD=/tmp/pl-bnew WORLDS=" " TOOLS=testAR B=8K E=8K BUILD_TOOLS="$ALL" \
      BW=8 timeout -k 5 300 bash tools/gpu_quick.sh > "$D/build.txt" 2>&1
    rm -f "$D/build/summary.txt" ;;
  det) q det CONFIGS="- BENCH_MODE=det" TOOLS="testAR testRS testRSV" B=64M E=1G F=4 \
         ARGS="--mem purlin" ;;
  stg) q stg CONFIGS="- STAGING_BYTES=512M" TOOLS="testAR testAG testRS testA2A testAGV testRSV" \
         B=64M E=1G F=4 ;;
  lat) q lat CONFIGS="-" TOOLS="$ALL" B=8K E=256K F=2 ;;
  rsv) q rsv CONFIGS="- DIRECT_PUSH=0" TOOLS="testRSV testRS" B=64M E=1G F=4 ARGS="--mem purlin" ;;
  prof) q prof CONFIGS="PROFILE=1 PROFILE=1,LEAN_CTAS=1" TOOLS="testAR testA2A" B=8K E=8K F=2 ;;
  rb) q rb CONFIGS="DIRECT_RED_BATCH=4 -" TW=8 TOOLS="testAR testRS testRSV" B=64M E=1G F=4 \
        ARGS="--mem purlin" ;;
  reg) q reg CONFIGS="-" TOOLS="testAR testAG testRS testA2A testAGV testRSV" B=64M E=1G F=4 \
        ARGS="--mem reg" ;;
  w4|w2) q "$p" CONFIGS="-" TOOLS="$ALL" B=64M E=1G F=4 ARGS="--mem purlin" BW="${p#w}" ;;
  kinds) q kinds CONFIGS="PROFILE=1" TOOLS="testA2AV testRSV testAR" B=64M E=64M \
          ARGS="--mem purlin" ;;
  a2sp) q a2sp CONFIGS="- DIRECT_PUSH=0" TOOLS="testA2AV testA2A" B=64M \
         E=1G F=4 ARGS="--mem purlin" ;;
  lanes3) q lanes3 CONFIGS="DIRECT_A2AV=0,LANES=16 DIRECT_A2AV=0" TOOLS=testA2AV B=64M E=1G F=4 \
            ARGS="--mem purlin" BW=3 ;;
  lanes2) q lanes2 CONFIGS="DIRECT_A2AV=0,LANES=16 DIRECT_A2AV=0" TOOLS="testA2AV testRSV" B=64M E=1G F=4 ARGS="--mem purlin" \
            BW=2 ;;
  a2av8) q a2av8 CONFIGS="- DIRECT_A2AV=0" TOOLS=testA2AV B=64M E=1G F=4 ARGS="--mem purlin" ;;
  a2avl) q a2avl CONFIGS="- DIRECT_A2AV=0" TOOLS=testA2AV B=8K E=256K F=2 ;;
  a2avs) q a2avs CONFIGS="- DIRECT_A2AV=0" TOOLS=testA2AV B=64M E=1G F=4 ;;
  a2av4) q a2av4 CONFIGS="- DIRECT_A2AV=0" TOOLS=testA2AV B=64M E=1G F=4 ARGS="--mem purlin" BW=4 ;;
  a2av2) q a2av2 CONFIGS="- DIRECT_A2AV=0" TOOLS=testA2AV B=64M E=1G F=4 ARGS="--mem purlin" BW=2 ;;
  dprof) q dprof64 CONFIGS="PROFILE=1 PROFILE=1,DIRECT_PUSH=0" TOOLS="testA2A testA2AV testAG testAGV" \
           B=64M E=64M ARGS="--mem purlin"
    show dprof64
    q dprof64r CONFIGS="PROFILE=1" TOOLS="testRS testRSV testAR" B=64M E=64M ARGS="--mem purlin"
    show dprof64r
    q dprof1g CONFIGS="PROFILE=1" TOOLS="testA2A testA2AV testAG testAGV" B=1G E=1G \
      ARGS="--mem purlin"
    p=dprof1g ;;
  pair) q pair CONFIGS="- DIRECT_A2AV=0" TOOLS=testA2AV B=64M E=1G F=4 ARGS="--mem purlin --pair" ;;
  unit) q unit CONFIGS="-" TOOLS="testAGV testA2AV testRSV" B=64M E=1G F=4 \
          ARGS="--mem purlin --split-unit 4K"
    show unit
    q unit16 CONFIGS="-" TOOLS="testAGV testA2AV testRSV" B=64M E=1G F=4 ARGS="--mem purlin"
    p=unit16 ;;
  queue) # the piece queue and the aligned stores (finding 33): the gathers and AllToAll(V) with the
    # defaults, the queue (256 KiB, 128 KiB pieces), the stores aligned, both (64 MiB-1 GiB, zero
    # copy, world 8), then gpu_test at worlds 8 and 3 with both and with 4 KiB pieces
    for t in "testAG testA2A" "testAGV testA2AV"; do
      n=queue${t// /}
      q "$n" CONFIGS="- DIRECT_QUEUE=1 DIRECT_QUEUE=1,DIRECT_QUEUE_BYTES=128K DIRECT_ALIGN=128 \
        DIRECT_QUEUE=1,DIRECT_ALIGN=128" TOOLS="$t" B=64M E=1G F=4 ARGS="--mem purlin"
      show "$n"
    done
    env OUT="$D/qtest" BUILD=/tmp/pl-bnew SKIP_BUILD=1 TEST_ALL=1 WORLDS="8 3" \
      CONFIGS="DIRECT_QUEUE=1,DIRECT_ALIGN=128 DIRECT_QUEUE=1,DIRECT_QUEUE_BYTES=4K" \
      TOOLS=testAR B=8K E=8K BW=8 timeout -k 5 300 bash tools/gpu_quick.sh > "$D/qtest.txt" 2>&1
    rm -f "$D/qtest/summary.txt"
    p=qtest ;;
  qab) # the defaults (the queue of 128 KiB pieces, stores aligned to 128 bytes) against both off,
    # every tool, zero copy, 64 MiB-1 GiB, worlds 8, 4, 2
    p=
    for w in ${QAB_WORLDS:-8 4 2}; do # (QAB_WORLDS=8: world 8 only)
      [ -z "$p" ] || show "$p"
      q qab$w CONFIGS="- DIRECT_QUEUE=0,DIRECT_ALIGN=16" TOOLS="$ALL" B=64M E=1G F=4 \
        ARGS="--mem purlin" BW=$w
      p=qab$w
    done ;;
  qsz) # the queue's pieces: AllGatherV and AllToAllV (its spread: parts of one piece) at
    # 64 KiB, 128 KiB (the default), 256 KiB and 512 KiB, zero copy, world 8, 64 MiB-1 GiB
    q qsz CONFIGS="DIRECT_QUEUE_BYTES=64K - DIRECT_QUEUE_BYTES=256K DIRECT_QUEUE_BYTES=512K" \
      TOOLS="testAGV testA2AV" B=64M E=1G F=4 ARGS="--mem purlin" ;;
  a2ax) # AllToAll(V) with the queue: fewer CTAs, 4 loads in flight, streaming (tuning.md Next 1)
    q a2ax CONFIGS="- DIRECT_CTAS=8 DIRECT_CTAS=12 DIRECT_UNROLL=4 DIRECT_STREAM=1" \
      TOOLS="testA2A testA2AV" B=64M E=1G F=4 ARGS="--mem purlin" ;;
  flat) env OUT="$D/flat" OLD="$OLD" WORLDS="8 3" TOOLS="testA2AV testA2A" BUILD_TOOLS="$ALL" \
          VARIANTS="DIRECT_QUEUE_BYTES=256K DIRECT_QUEUE_BYTES=64K" B=64M E=1G F=4 \
          ARGS="--mem purlin" ROUNDS=1 timeout -k 5 420 bash tools/gpu_ab.sh > "$D/flat.txt" 2>&1 ;;
  flat1) env OUT="$D/flat1" BUILD=/tmp/pl-bnew CONFIGS="- DIRECT_QUEUE_BYTES=256K DIRECT_PUSH=0" \
           WORLDS=8 TOOLS="testA2AV testA2A" B=64M E=1G F=4 ARGS="--mem purlin" BW=8 \
           timeout -k 5 300 bash tools/gpu_quick.sh > "$D/flat1.txt" 2>&1
    rm -f "$D/flat1/summary.txt" ;;
  atomx) q atomx CONFIGS="DIRECT=0 DIRECT=0,ATOM=800 DIRECT=0,ATOM=700" TOOLS=testA2A B=64M E=1G F=4 \
           ARGS="--mem purlin" ;;
  zipf0) q zipf0 CONFIGS="-" TOOLS="testA2AV testAGV testRSV" B=64M E=1G F=4 \
           ARGS="--mem purlin --zipf 0" ;;
  *) echo "unknown part $p" >&2; exit 2 ;;
  esac
  show "$p"
done
gzip -f "$D/all.tar"
