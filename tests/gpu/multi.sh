#!/usr/bin/env bash
# tests/gpu/multi.sh -- issue 8's run on a machine with several GPUs of one host (one rank per GPU),
# in as few device calls as the 10-minute limit allows: each call runs the PHASES it is given and
# leaves one tarball under $OUT (multi-<phases>.tar.gz) and a summary printed last.
#
#   PHASES="topo correct" bash tests/gpu/multi.sh        (first call: build, topology, correctness)
#   PHASES="nccl" SKIP_BUILD=1 bash tests/gpu/multi.sh   (next call, same warm machine)
#   PHASES="tune" SKIP_BUILD=1 bash tests/gpu/multi.sh
#
# Phases:
#   topo     nvidia-smi topo -m; tests/gpu/p2p (peer access of every pair, copy-engine GB/s of every
#            pair and GPU 0's fan-out, flag round trips): this machine's speed of light
#   correct  tests/gpu/run.sh at WORLDS (default 2..number of GPUs: ranks i -> GPU i, so worlds
#            3, 5, 6, 7 use the first GPUs), every collective, both modes, graph replay, faults,
#            forced atoms, examples
#   nccl     the seven bench tools at world NGPU beside NCCL (--baseline nccl, NCCL_NVLS_ENABLE=0),
#            B..E (default 1K..1G), graph replay, bf16 reductions, every size checked on the GPU;
#            bench/plot.py: table.md with NCCL time / purlin time per size and its geometric means
#            over 1 KiB-512 KiB and 1 MiB-1 GiB, and plot.png (when matplotlib is there)
#   tune     tools/gpu_sweep.sh over lanes and chunk at worlds 2, 4, NGPU (TUNE_CONFIGS)
# Environment: BUILD (default build-gpu-run), WORLDS, B, E, TOOLS, BUDGET (seconds for the nccl
# phase's runs, default 500), SKIP_BUILD=1. NVLink multicast stays off everywhere.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
ROOT=$PWD BUILD=${BUILD:-$PWD/build-gpu-run} OUTD=${OUT:-/tmp/purlin-multi}
PHASES=${PHASES:-"topo correct"} T0=$(date +%s)
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
export PURLIN_DISABLE_MULTIMEM=1 PURLIN_DATAPATH=cuda
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
[ "${NGPU:-0}" -ge 1 ] || { echo "multi.sh: no GPU visible"; exit 1; }
TAG=$(echo "$PHASES" | tr ' ' '-')
R=$OUTD/multi-$TAG && rm -rf "$R" && mkdir -p "$R"
say() { echo "[multi.sh $(($(date +%s) - T0))s] $*"; }
{
  date -u +%FT%TZ
  echo "commit: $(git rev-parse HEAD 2>/dev/null) $(git status --porcelain 2>/dev/null | wc -l) changed files"
  nvidia-smi -L
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv
} > "$R/machine.txt" 2>&1
SUMMARY=()

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  say "building in $BUILD (sm_90)"
  if ! { cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPURLIN_TESTS=ON \
           -DCMAKE_CUDA_ARCHITECTURES=90 && cmake --build "$BUILD" -j "$(nproc)"; } \
       > "$R/build.log" 2>&1; then
    grep -E "error" "$R/build.log" | head -20; echo "multi.sh: build failed"; exit 1
  fi
fi

# NCCL for --baseline nccl: the system's, else the one pip installed beside torch
if ! ldconfig -p 2>/dev/null | grep -q libnccl.so.2; then
  d=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' \
      2>/dev/null)
  [ -n "$d" ] && [ -e "$d/libnccl.so.2" ] && export LD_LIBRARY_PATH=$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi

for phase in $PHASES; do
  case $phase in
  topo)
    say "topology"
    nvidia-smi topo -m > "$R/topo.txt" 2>&1
    timeout 300 "$BUILD/tests/gpu/p2p" > "$R/p2p.txt" 2>&1
    SUMMARY+=("topo: p2p rc=$? $(grep '^p2p summary' "$R/p2p.txt" || tail -1 "$R/p2p.txt")")
    ;;
  correct)
    w=2 ws=""
    while [ $w -le "$NGPU" ]; do ws="$ws $w"; w=$((w + 1)); done
    say "correctness at worlds ${WORLDS:-$ws}"
    OUT="" LOGS_DIR=$R/run SKIP_BUILD=1 BUILD=$BUILD WORLDS="${WORLDS:-$ws}" \
      bash tests/gpu/run.sh > "$R/run.log" 2>&1
    SUMMARY+=("correct: run.sh rc=$?")
    [ -f "$R/run/summary.txt" ] && SUMMARY+=("$(sed -n '/^run /,$p' "$R/run/summary.txt")")
    ;;
  nccl)
    say "beside NCCL at world $NGPU"
    budget=${BUDGET:-500} start=$(date +%s)
    for t in ${TOOLS:-testAR testAG testRS testA2A testAGV testRSV testA2AV}; do
      left=$((budget - ($(date +%s) - start)))
      [ $left -lt 30 ] && { SUMMARY+=("nccl: $t skipped (budget spent)"); continue; }
      timeout -k 5 $left "$BUILD/purlinrun" -n "$NGPU" "$BUILD/bench/$t" -b "${B:-1K}" \
        -e "${E:-1G}" -f 2 -G 5 -n 10 -R 3 -w 2 --baseline nccl -J "$R/$t.w$NGPU.json" \
        > "$R/$t.w$NGPU.txt" 2>&1
      SUMMARY+=("nccl: $t rc=$? $(grep -E 'Out of bounds|vsNCCL' "$R/$t.w$NGPU.txt" | tr -s ' ' |
        tr '\n' ' ')")
    done
    ls "$R"/*.json > /dev/null 2>&1 &&
      python3 bench/plot.py "$R"/*.json --table "$R/table.md" -o "$R/plot.png" > "$R/plot.log" 2>&1
    [ -f "$R/table.md" ] && SUMMARY+=("$(sed -n '/geometric mean/,$p' "$R/table.md")")
    ;;
  tune)
    say "tuning sweep"
    for w in 2 4 "$NGPU"; do
      [ "$w" -le "$NGPU" ] || continue
      OUT=$R/tune-w$w SKIP_BUILD=1 BUILD=$BUILD WORLDS=$w LIMIT=60 \
        CONFIGS="${TUNE_CONFIGS:-- LANES=4 LANES=8 CHUNK_BYTES=1M CHUNK_BYTES=2M}" \
        bash tools/gpu_sweep.sh > "$R/tune-w$w.log" 2>&1
      SUMMARY+=("tune: world $w rc=$?")
    done
    ;;
  *) echo "multi.sh: unknown phase $phase"; exit 2 ;;
  esac
done

{
  echo
  echo "purlin multi-GPU run ($PHASES): $(head -2 "$R/machine.txt" | tr '\n' ' ')"
  echo "GPUs: $NGPU; files: $OUTD/multi-$TAG.tar.gz"
  for s in "${SUMMARY[@]}"; do echo "$s"; done
  echo "total $(($(date +%s) - T0)) s"
} | tee "$R/summary.txt"
tar -C "$OUTD" -czf "$OUTD/multi-$TAG.tar.gz" "multi-$TAG" && cp "$R/summary.txt" "$OUTD/summary-$TAG.txt"
