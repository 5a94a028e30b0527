#!/usr/bin/env bash
# On the GPU machine, in one short call: build (sm_90), start MPS, then for each knob setting in
# CONFIGS (space-separated; each a comma-separated list of PURLIN_* assignments, "-" for the
# defaults): check correctness at each world in WORLDS (gpu_test --quick, graph replay), run the
# fault tests in FAULTS (gpu_test --fault F, world 3), and time TOOLS at world BW (B..E, graph
# mode, every size checked); the tests run for the first config only unless TEST_ALL=1. Prints a short table last; logs and JSON in one tarball under $OUT.
# BUILD_TOOLS: more targets to build (for later calls with SKIP_BUILD=1).
#   CONFIGS="- LEAN=0" WORLDS="8 3" FAULTS="mismatch kill-small" TOOLS="testAR testA2A" \
#     E=1M bash tools/gpu_quick.sh
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD BUILD=${BUILD:-$PWD/build-gpu-run} OUTD=${OUT:-/tmp/purlin-quick}
CONFIGS=${CONFIGS:--} WORLDS=${WORLDS:-"4 8"} FAULTS=${FAULTS:-} BW=${BW:-8}
TOOLS=${TOOLS:-"testAR testAG testRS"} B=${B:-1K} E=${E:-64M} F=${F:-8}
R=$OUTD/quick && mkdir -p "$R"
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
export PURLIN_DISABLE_MULTIMEM=1 PURLIN_DATAPATH=cuda
export PURLIN_PDL=${PURLIN_PDL:-2} # ranks share the GPU under MPS: PDL only on request (docs/gpu.md)
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DPURLIN_TESTS=ON > "$R/configure.log" 2>&1 &&
    cmake --build "$BUILD" -j "$(nproc)" --target purlinrun gpu_test $TOOLS ${BUILD_TOOLS:-} \
      > "$R/build.log" 2>&1 || { grep -E "error" "$R/build.log" | head -20; exit 1; }
fi
{ date -u +%FT%TZ; git rev-parse HEAD 2>/dev/null; git status --porcelain | wc -l; nvidia-smi -L; } \
  > "$R/machine.txt"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/pl-mps/pipe CUDA_MPS_LOG_DIRECTORY=/tmp/pl-mps/log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d && trap 'echo quit | nvidia-cuda-mps-control' EXIT
sleep 1
ROWS=()
first=1
for cfg in $CONFIGS; do
  envs=()
  [ "$cfg" != - ] && for kv in ${cfg//,/ }; do envs+=("PURLIN_$kv"); done
  tag=${cfg//[=,]/_}
  [ "$first" = 1 ] || [ "${TEST_ALL:-0}" = 1 ] || { TW="" TF=""; }
  for w in ${TW-$WORLDS}; do
    env ${envs[@]+"${envs[@]}"} timeout -k 5 120 "$BUILD/purlinrun" -n "$w" \
      "$BUILD/tests/gpu/gpu_test" --quick --graph > "$R/test.$tag.w$w.log" 2>&1
    rc=$?
    ROWS+=("$(printf '%-18s test w%-2s rc=%-3s %s' "$cfg" "$w" "$rc" "$(grep -Eo '[0-9]+ passed, [0-9]+ failed' \
      "$R/test.$tag.w$w.log" | awk '{p+=$1; f+=$3} END {print p" passed "f" failed"}')")")
  done
  for f in ${TF-$FAULTS}; do
    env ${envs[@]+"${envs[@]}"} PURLIN_TIMEOUT_MS=5000 timeout -k 5 60 "$BUILD/purlinrun" -n 3 \
      "$BUILD/tests/gpu/gpu_test" --fault "$f" > "$R/fault-$f.$tag.log" 2>&1
    rc=$?
    ROWS+=("$(printf '%-18s fault %-11s rc=%-3s %s' "$cfg" "$f" "$rc" "$(grep -Eo 'mismatch reported: .{0,70}|peer killed: [A-Z_]+ after [0-9.]+ s|after the peer left: [A-Z_]+ in [0-9.]+ s|FAIL.{0,70}' \
      "$R/fault-$f.$tag.log" | head -1)")")
  done
  for t in $TOOLS; do
    env ${envs[@]+"${envs[@]}"} timeout -k 5 90 "$BUILD/purlinrun" -n "$BW" "$BUILD/bench/$t" \
      -b "$B" -e "$E" -f "$F" -G 5 -n 10 -R 3 -w 2 -i 0 ${ARGS:-} -J "$R/$t.$tag.w$BW.json" \
      > "$R/$t.$tag.w$BW.txt" 2>&1
    rc=$?
    ROWS+=("$(printf '%-18s %-8s w%s rc=%-3s %s' "$cfg" "$t" "$BW" "$rc" "$(grep -E 'Avg bus|Out of bounds' \
      "$R/$t.$tag.w$BW.txt" | tr -s ' ' | tr '\n' ' ' | cut -c1-90)")")
  done
  first=0
done
# time (us, out of place) per size, one column per config
for t in $(ls "$R" | sed -nE 's/^(test[A-Za-z0-9]+)\..*\.json$/\1/p' | sort -u); do
  cols=()
  for cfg in $CONFIGS; do cols+=("$cfg" "$R/$t.${cfg//[=,]/_}.w$BW.json"); done
  python3 tools/times_table.py "$t w$BW" "${cols[@]}"
done > "$R/times.txt" 2>&1
# the floors beside the rows (AllReduce: the ideal one-shot), and PURLIN_PROFILE's phases (rank 0)
for f in "$R"/test*.txt; do
  [ -f "$f" ] || continue
  grep -hE "^# Ideal|zero-byte all-to-all barrier|^purlin profile: rank 0/" "$f" |
    sed -E "s/.*copy bandwidth ([0-9.]+ GB.s).*barrier ([0-9.]+ us).*/copy \1, barrier \2/;
      s/ \(bench.floor.cu: [^)]*\)//; s|^|$(basename "$f" .txt): |" | cut -c1-400
done > "$R/floors.txt"
# PURLIN_PROFILE's direct-kernel lines, the means over every rank (rank 0's alone are above)
python3 tools/dprof_table.py "$R"/test*.txt > "$R/dprof.txt" 2>&1
{ cat "$R/machine.txt"; for row in "${ROWS[@]}"; do echo "$row"; done
  cat "$R/times.txt" "$R/floors.txt" "$R/dprof.txt"; } | tee "$R/summary.txt"
tar -C "$OUTD" -czf "$OUTD/quick.tar.gz" quick && cp "$R/summary.txt" "$OUTD/summary.txt" && rm -rf "$R"
