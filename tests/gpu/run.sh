#!/usr/bin/env bash
# tests/gpu/run.sh -- on a GPU machine: build the CUDA datapath, run every GPU test, print a table.
#
#   bash tests/gpu/run.sh            (from anywhere; needs nvcc >= 12.x, cmake, an NVIDIA GPU)
#
# Ranks run as processes under purlinrun; with fewer GPUs than ranks they share GPUs under MPS,
# which this script starts (pipe and log directories under /tmp) and stops on exit. NVLink
# multicast stays off. Logs go to build-gpu-run/logs; with $OUT set (the device tool), they end up
# in one tarball $OUT/run-logs.tar.gz beside $OUT/summary.txt (the tool returns few files). Environment:
#   BUILD=dir         build directory (default build-gpu-run)
#   ARCH=90           CMAKE_CUDA_ARCHITECTURES (default: 90)
#   WORLDS="2 3 4 8"  world sizes of the correctness runs
#   SKIP_BUILD=1      reuse an existing build
#   ATOMS="700 800"  atoms forced in the per-atom runs (default: 700 800 900 ce)
#   SANITIZE=1        also compute-sanitizer memcheck and racecheck on a few cases (world 2, no MPS)
#   SANITIZE=only     only those (with SKIP_BUILD=1: a second call on a warm machine)
#   SAN_LIMIT=300     seconds allowed to each sanitizer run
#   LOGS_DIR=dir      where the logs go (default: $BUILD/logs, emptied first)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
ROOT=$PWD
BUILD=${BUILD:-$ROOT/build-gpu-run}
ARCH=${ARCH:-90}
WORLDS=${WORLDS:-"2 3 4 8"}
if [ -n "${LOGS_DIR:-}" ]; then LOGS=$LOGS_DIR; else LOGS=$BUILD/logs; rm -rf "$LOGS"; fi
mkdir -p "$LOGS"
T_START=$(date +%s)

# Never NVLink multicast on these machines.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
export PURLIN_DISABLE_MULTIMEM=1
export PURLIN_PDL=${PURLIN_PDL:-2} # ranks share the GPU under MPS: PDL only on request (docs/gpu.md)
export PURLIN_DATAPATH=cuda

say() { echo "[run.sh $(($(date +%s) - T_START))s] $*"; }

# ---- machine --------------------------------------------------------------------------------------
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(hostname)"
  echo "commit: $(git rev-parse HEAD 2>/dev/null) $(git status --porcelain 2>/dev/null | wc -l) changed files"
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,compute_mode --format=csv 2>&1
  nvidia-smi topo -m 2>&1 | head -20
  nvcc --version 2>&1 | tail -2
} > "$LOGS/machine.txt"
cat "$LOGS/machine.txt"
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "${NGPU:-0}" -lt 1 ]; then
  echo "run.sh: no GPU visible (nvidia-smi -L)"; exit 1
fi

# ---- build ----------------------------------------------------------------------------------------
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  say "building in $BUILD (sm_$ARCH)"
  if ! cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPURLIN_TESTS=ON \
      -DCMAKE_CUDA_ARCHITECTURES="$ARCH" > "$LOGS/configure.log" 2>&1; then
    tail -30 "$LOGS/configure.log"; echo "run.sh: configure failed"; exit 1
  fi
  if ! grep -q "CUDA datapath ON" "$LOGS/configure.log"; then
    echo "run.sh: CMake did not find nvcc (CUDA datapath OFF)"; exit 1
  fi
  if ! cmake --build "$BUILD" -j "$(nproc)" --target purlin purlinrun gpu_test \
      > "$LOGS/build.log" 2>&1; then
    grep -E "error|Error" "$LOGS/build.log" | head -30; echo "run.sh: build failed"; exit 1
  fi
fi
RUN=$BUILD/purlinrun
TEST=$BUILD/tests/gpu/gpu_test
[ -x "$RUN" ] && [ -x "$TEST" ] || { echo "run.sh: $RUN or $TEST missing"; exit 1; }

# ---- MPS ------------------------------------------------------------------------------------------
. "$ROOT/tests/gpu/mps.sh"
[ "${SANITIZE:-0}" = only ] || mps_start mps

# ---- runs -----------------------------------------------------------------------------------------
ROWS=()
# run NAME WORLD SECONDS [env VAR=VAL ...] -- gpu_test args
run() {
  local name=$1 world=$2 secs=$3; shift 3
  local envs=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  local log=$LOGS/$name.w$world.log t0=$(date +%s) rc
  say "$name, world $world: gpu_test $* (limit ${secs}s)"
  env ${envs[@]+"${envs[@]}"} timeout -k 10 $((secs + 15)) "$RUN" -n "$world" --timeout "$secs" "$TEST" "$@" \
    > "$log" 2>&1
  rc=$?
  local dt=$(($(date +%s) - t0))
  local passed failed
  passed=$(grep -Eo 'rank [0-9]+: [0-9]+ passed' "$log" | awk '{s += $3} END {print s + 0}')
  failed=$(grep -Eo '[0-9]+ failed' "$log" | awk '{s += $1} END {print s + 0}')
  local result=PASS
  if [ $rc -ne 0 ] || [ "$failed" -ne 0 ]; then result="FAIL(rc=$rc)"; fi
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && result="TIMEOUT"
  ROWS+=("$(printf '%-16s %5s  %-12s %8s %8s %6ss' "$name" "$world" "$result" "$passed" "$failed" "$dt")")
  if [ "$result" != PASS ]; then
    grep -E 'FAIL|error|ERROR|purlinrun' "$log" | head -15
  fi
  grep -E '^gpu_test: (matrix|graph|mismatch|device counts)|peer killed' "$log" | head -6
}

if [ "${SANITIZE:-0}" != only ]; then
for w in $WORLDS; do
  case $w in
    2) run correct "$w" 150 -- --big --graph ;;
    4) run correct "$w" 150 -- --graph ;;
    8) run correct "$w" 180 -- --quick --big --graph ;;
    *) run correct "$w" 150 -- --quick --graph ;;
  esac
done
# every atom, forced (docs/gpu.md "Atoms"), at one small world; ce runs the gather collectives on
# the copy engines and the reductions on the auto atom's SM kernel
for a in ${ATOMS:-700 800 900 ce}; do
  run "atom-$a" 4 150 PURLIN_ATOM="$a" PURLIN_DEBUG=INFO -- --quick --graph
done
# ce_on NAME WORLD: the run's log must show the copy-engine atom on at init on every rank (not a
# silent fallback to the SM kernel)
ce_on() {
  local log=$LOGS/$1.w$2.log n
  n=$(grep -c 'copy-engine atom (ce) on' "$log" 2>/dev/null)
  if [ "${n:-0}" -ne "$2" ]; then
    ROWS+=("$(printf '%-16s %5s  %-12s %8s %8s %6s' "$1:ce-on" "$2" "FAIL" 0 1 -)")
    echo "run.sh: $1: the copy-engine atom was on for ${n:-0} of $2 ranks"
  else
    ROWS+=("$(printf '%-16s %5s  %-12s %8s %8s %6s' "$1:ce-on" "$2" "PASS" "$n" 0 -)")
  fi
}
case " ${ATOMS:-700 800 900 ce} " in
  *" ce "*)
    ce_on atom-ce 4
    # tiny staging (1 MiB): gathers split into several sequences; all_to_all_v refuses blocks
    # above staging/world on the ce atom, so it is left out here
    run atom-ce-split 4 150 PURLIN_ATOM=ce PURLIN_STAGING_BYTES=1M PURLIN_DEBUG=INFO -- \
      --quick --graph --no-a2av
    ce_on atom-ce-split 4
    run mismatch-ce 3 60 PURLIN_ATOM=ce PURLIN_DEBUG=INFO -- --fault mismatch
    ce_on mismatch-ce 3
    run kill-ce 3 60 PURLIN_ATOM=ce PURLIN_TIMEOUT_MS=5000 -- --fault kill-gather
    ;;
esac
run huge 4 300 -- --huge   # 256 MiB per call, every element checked
run mismatch 3 60 -- --fault mismatch
run device-counts 4 150 -- --device-counts   # V counts in device memory: eager, graph, MISMATCH
run kill 3 60 PURLIN_TIMEOUT_MS=5000 -- --fault kill
run kill-small 3 60 PURLIN_TIMEOUT_MS=5000 -- --fault kill-small   # the lean packet kernel
run kill 8 60 PURLIN_TIMEOUT_MS=5000 -- --fault kill
run leave 3 60 PURLIN_TIMEOUT_MS=5000 -- --fault leave   # a clean exit is not a death
if BUILD=$BUILD OUT=$LOGS ARCH=$ARCH bash "$ROOT/tests/gpu/examples.sh"; then ex=PASS; else ex=FAIL; fi; ROWS+=("$(printf '%-16s %5s  %-12s %8s %8s %6s' examples 2,4 "$ex" - - -)")
fi

# compute-sanitizer does not run under MPS: optional, after the daemon is gone (ranks time-slice).
[ "${SANITIZE:-0}" = only ] || mps_stop
if [ "${SANITIZE:-0}" != 0 ] && command -v compute-sanitizer >/dev/null; then
  REAL_TEST=$TEST
  for tool in memcheck racecheck; do
    TEST=$LOGS/sanitize-$tool.sh
    printf '#!/bin/sh\nexec compute-sanitizer --tool %s --error-exitcode 3 %s "$@"\n' "$tool" \
      "$REAL_TEST" > "$TEST"
    chmod +x "$TEST"
    run "$tool" 2 "${SAN_LIMIT:-300}" PURLIN_TIMEOUT_MS=60000 -- --tiny
  done
  TEST=$REAL_TEST
fi

# ---- summary --------------------------------------------------------------------------------------
{
  echo
  echo "purlin GPU tests: $(head -3 "$LOGS/machine.txt" | tr '\n' ' ')"
  echo "GPUs: $NGPU, MPS: $( [ -d "$LOGS/mps" ] && echo used || echo not used ), logs: $LOGS"
  printf '%-16s %5s  %-12s %8s %8s %7s\n' run world result passed failed time
  for r in "${ROWS[@]}"; do echo "$r"; done
  echo "total $(($(date +%s) - T_START)) s"
} | tee "$LOGS/summary.txt"
if [ -n "${OUT:-}" ]; then
  mps_stop
  tar -C "$LOGS" -czf "$OUT/run-logs.tar.gz" . && cp "$LOGS/summary.txt" "$OUT/summary.txt"
fi
! grep -qE 'FAIL|TIMEOUT' "$LOGS/summary.txt"
