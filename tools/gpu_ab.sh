#!/usr/bin/env bash
# On the GPU machine, in one call: an A/B of the working tree against commit OLD, measured side by
# side. Builds both (OLD in a git worktree; both builds at once), checks the new one (gpu_test
# --quick --graph at the worlds in WORLDS), then runs the bench TOOLS at world BW (B..E, graph
# replay, every size checked) alternating old, new, old, new (ROUNDS pairs), then each tool once
# more with PURLIN_PROFILE=1 on the new build when PROFILE=1; VARIANTS="PDL=0 LEAN_CTAS=8,PDL=0"
# adds runs of the new build with those PURLIN_* settings to every round; BWS="8 4 2" runs the
# bench at each of those worlds (default BW); ARGS are the bench tools' own (--mem purlin).
# Prints a table of us per size, one column per run, and the last run's x floor; logs in one
# tarball under $OUT.
#   OLD=d344594 TOOLS="testAR testA2A" B=1K E=64K F=8 bash tools/gpu_ab.sh
#   OLD=HEAD BWS="8 4 2" B=64M E=1G F=16 ARGS="--mem purlin" WORLDS=8 bash tools/gpu_ab.sh
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD OUTD=${OUT:-/tmp/purlin-ab} OLD=${OLD:?OLD=<commit>}
TOOLS=${TOOLS:-"testAR testA2A"} B=${B:-1K} E=${E:-64K} F=${F:-8} BW=${BW:-8} ROUNDS=${ROUNDS:-2}
BWS=${BWS:-$BW}
WORLDS=${WORLDS:-"8 3"}
R=$OUTD/ab && mkdir -p "$R"
T0=$SECONDS # BUDGET: seconds after which the remaining bench runs are skipped (the tables still print)
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
export PURLIN_DISABLE_MULTIMEM=1 PURLIN_DATAPATH=cuda
export PURLIN_PDL=${PURLIN_PDL:-2} # ranks share the GPU under MPS: PDL only on request (docs/gpu.md)
git worktree add -f /tmp/pl-old "$OLD" > "$R/worktree.log" 2>&1 || { cat "$R/worktree.log"; exit 1; }
build() { # build SRC DIR TARGETS...
  local src=$1 dir=$2; shift 2
  cmake -S "$src" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DPURLIN_TESTS=ON > "$dir.configure.log" 2>&1 &&
    cmake --build "$dir" -j 8 --target purlinrun "$@" > "$dir.build.log" 2>&1
}
build "$ROOT" /tmp/pl-bnew gpu_test $TOOLS ${BUILD_TOOLS:-} & pn=$! # (BUILD_TOOLS: for later calls)
build /tmp/pl-old /tmp/pl-bold $TOOLS & po=$!
wait $pn; rn=$?; wait $po; ro=$?
cp /tmp/pl-bnew.build.log "$R/build-new.log"; cp /tmp/pl-bold.build.log "$R/build-old.log"
[ $rn = 0 ] && [ $ro = 0 ] || { grep -E "error" "$R"/build-*.log | head -20; exit 1; }
echo "built at $((SECONDS - T0)) s" >> "$R/build-new.log"
{ date -u +%FT%TZ; echo "new: $(git rev-parse HEAD) + $(git status --porcelain | wc -l) changed"
  echo "old: $(git -C /tmp/pl-old rev-parse HEAD)"; nvidia-smi -L; } > "$R/machine.txt"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/pl-mps/pipe CUDA_MPS_LOG_DIRECTORY=/tmp/pl-mps/log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d && trap 'echo quit | nvidia-cuda-mps-control' EXIT
sleep 1
ROWS=()
# TEST_ENVS="- STAGING_BYTES=4M": the tests once per PURLIN_* setting ("-": the defaults)
for te in ${TEST_ENVS:--}; do
  tenv=()
  [ "$te" != - ] && for kv in ${te//,/ }; do tenv+=("PURLIN_$kv"); done
  for w in $WORLDS; do
    env ${tenv[@]+"${tenv[@]}"} timeout -k 5 120 /tmp/pl-bnew/purlinrun -n "$w" \
      /tmp/pl-bnew/tests/gpu/gpu_test --quick --graph > "$R/test.${te//[=,]/_}.w$w.log" 2>&1
    ROWS+=("test $te w$w rc=$? $(grep -Eo '[0-9]+ passed, [0-9]+ failed' "$R/test.${te//[=,]/_}.w$w.log" |
      awk '{p+=$1; f+=$3} END {print p" passed "f" failed"}')")
  done
done
echo "tested at $((SECONDS - T0)) s" >> "$R/machine.txt"
runs=()
for i in $(seq 1 "$ROUNDS"); do
  runs+=("old$i" "new$i")
  for v in ${VARIANTS:-}; do runs+=("$v#$i"); done
done
[ "${PROFILE:-0}" = 1 ] && runs+=(prof)
for bw in $BWS; do
  for t in $TOOLS; do
    for run in "${runs[@]}"; do
      if [ -n "${BUDGET:-}" ] && [ $((SECONDS - T0)) -gt "$BUDGET" ]; then
        ROWS+=("w$bw $run $t skipped: past BUDGET=$BUDGET s"); continue
      fi
      bd=/tmp/pl-bnew envs=()
      case $run in
      old*) bd=/tmp/pl-bold ;;
      prof) envs=(PURLIN_PROFILE=1) ;;
      *'#'*) v=${run%%#*}; for kv in ${v//,/ }; do envs+=("PURLIN_$kv"); done ;;
      esac
      env ${envs[@]+"${envs[@]}"} ${ENVS:-} timeout -k 5 90 "$bd/purlinrun" -n "$bw" "$bd/bench/$t" \
        -b "$B" -e "$E" -f "$F" -G 5 -n 10 -R 3 -w 2 -i 0 ${ARGS:-} -J "$R/$t.$run.w$bw.json" \
        > "$R/$t.$run.w$bw.txt" 2>&1
      rc=$?
      ROWS+=("w$bw $run $t rc=$rc $(grep -E 'Out of bounds' "$R/$t.$run.w$bw.txt" | tr -s ' ')")
    done
  done
done
echo "bench done at $((SECONDS - T0)) s" >> "$R/machine.txt"
printf '%s\n' "${ROWS[@]}" | tee "$R/summary.txt"
# us per size (out of place), one column per run
for bw in $BWS; do
  for t in $TOOLS; do
    cols=()
    for run in "${runs[@]}"; do cols+=("$run" "$R/$t.$run.w$bw.json"); done
    python3 tools/times_table.py "$t w$bw" "${cols[@]}"
  done
done | tee -a "$R/summary.txt"
grep -h "purlin profile" "$R"/*.prof.w*.txt 2>/dev/null | sed -E 's/.*rank ([0-9]+).*mean us per call: /r\1 /' \
  | sort | head -40 | tee -a "$R/summary.txt"
if [ "${SASS:-0}" = 1 ] && command -v cuobjdump > /dev/null; then
  f=$(find /tmp/pl-bnew -name 'lean.cu.o' | head -1)
  [ -n "$f" ] && cuobjdump -sass "$f" > "$R/lean-sass.txt" 2>&1
  cuobjdump -res-usage "$f" > "$R/lean-res.txt" 2>&1
fi
cat "$R/machine.txt"
grep -h "FAIL" "$R"/test.*.log 2>/dev/null | head -10
tar -C "$OUTD" -czf "$OUTD/ab.tar.gz" ab && rm -rf "$R"
git worktree remove --force /tmp/pl-old > /dev/null 2>&1
