#!/usr/bin/env bash
# tools/gpu_sweep.sh -- on the GPU machine: sweep tuning knobs with the benchmark tools, one call.
# Builds (sm_90), starts MPS, then for every world in WORLDS, every tool in TOOLS and every knob
# setting in CONFIGS (space-separated; each a comma-separated list of PURLIN_* assignments, "-" for
# the defaults) runs the tool (graph replay, every size checked) and keeps its JSON. Prints one line
# per (world, tool, config): busbw at a few sizes and the geometric mean of time over floor; then
# bench/sweep_pick.py, if python3 is there, the best config per size, and tools/tune_table.py's
# table ($OUT/tune_cuda_table.h) with its report. One tarball under $OUT.
# A setting may name the tools it concerns: "ONESHOT_MAX_BYTES=32K@testAR" (tools joined by "+").
# PRESET=table: the knobs that pick a regime or an atom, each tool where it acts, 8 KiB-1 GiB,
# the seven tools (about 70 runs per world and memory kind: one world per call); MEM=purlin
# (purlin_mem_alloc buffers, default) or MEM=malloc.
#   CONFIGS="LANES=4 LANES=8,CHUNK_BYTES=1M" TOOLS="testAR" WORLDS="8" bash tools/gpu_sweep.sh
#   PRESET=table WORLDS=8 bash tools/gpu_sweep.sh; PRESET=table WORLDS=8 MEM=malloc SKIP_BUILD=1 ...
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD BUILD=${BUILD:-$PWD/build-gpu-run} OUTD=${OUT:-/tmp/purlin-sweep}
if [ "${PRESET:-}" = table ]; then
  G="testAR+testAG+testRS+testA2A+testAGV+testRSV" # the direct kernel's
  CONFIGS=${CONFIGS:-"- LATENCY_MAX_BYTES=128K LATENCY_MAX_BYTES=512K ONESHOT_MAX_BYTES=32K@testAR
    ONESHOT_MAX_BYTES=128K@testAR TWOSHOT_MAX_BYTES=512K@testAR TWOSHOT_MAX_BYTES=2M@testAR
    LEAN_CTAS=8 LEAN_PKTS=2 LEAN_PKTS=8 DIRECT_CTA_BYTES=128K@$G DIRECT_CTA_BYTES=1M@$G
    DIRECT_CTAS=8@$G DIRECT_UNROLL=4@testAG+testA2A+testAGV DIRECT_STREAM=1@testAG+testA2A+testAGV
    DIRECT_RED_BATCH=4@testAR+testRS+testRSV DIRECT_A2AV=0@testA2AV"}
  TOOLS=${TOOLS:-"testAR testAG testRS testA2A testAGV testRSV testA2AV"}
  B=${B:-8K} E=${E:-1G} F=${F:-4}
  [ "${MEM:-purlin}" = purlin ] && ARGS="${ARGS:-} --mem purlin"
fi
CONFIGS=${CONFIGS:--} TOOLS=${TOOLS:-"testAR testAG testRS"} WORLDS=${WORLDS:-8}
B=${B:-1K} E=${E:-64M} F=${F:-8} LIMIT=${LIMIT:-60}
R=$OUTD/sweep && mkdir -p "$R"
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
export PURLIN_DISABLE_MULTIMEM=1 PURLIN_DATAPATH=cuda
export PURLIN_PDL=${PURLIN_PDL:-2} # as gpu_quick.sh and gpu_ab.sh: ranks share the GPU under MPS
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=90 \
    > "$R/configure.log" 2>&1 &&
    cmake --build "$BUILD" -j "$(nproc)" --target purlinrun $TOOLS > "$R/build.log" 2>&1 ||
    { grep -E "error" "$R/build.log" | head -20; exit 1; }
fi
{ date -u +%FT%TZ; git rev-parse HEAD 2>/dev/null; git status --porcelain | wc -l; nvidia-smi -L; } \
  > "$R/machine.txt"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/pl-mps/pipe CUDA_MPS_LOG_DIRECTORY=/tmp/pl-mps/log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d && trap 'echo quit | nvidia-cuda-mps-control' EXIT
sleep 1
one() { # world tool config: one bench run, its JSON, a summary line
  local w=$1 t=$2 cfg=$3 envs=() tag rc bw gm
  [ "$cfg" != - ] && for kv in ${cfg//,/ }; do envs+=("PURLIN_$kv"); done
  tag="w$w.$t.${cfg//[=,]/_}${MEM:+.$MEM}"
  env ${envs[@]+"${envs[@]}"} timeout -k 5 "$LIMIT" "$BUILD/purlinrun" -n "$w" "$BUILD/bench/$t" \
    -b "$B" -e "$E" -f "$F" -G 5 -n 10 -R 3 -w 2 -i 0 ${ARGS:-} -J "$R/$tag.json" \
    > "$R/$tag.txt" 2>&1 < /dev/null
  rc=$?
  bw=$(awk '$1 ~ /^[0-9]+$/ && ($1 == 8192 || $1 == 65536 || $1 == 1048576 || $1 == 8388608 ||
       $1 == 67108864) {printf "%s ", $8}' "$R/$tag.txt")
  gm=$(grep -Eo 'Time over floor *: *[0-9.]+' "$R/$tag.txt" | grep -Eo '[0-9.]+$')
  echo "$w $t $cfg rc=$rc | $bw| ${gm:-?}"
}
{
  echo "# world tool config rc | busbw GB/s at 8K 64K 1M 8M 64M | geomean x floor"
  for w in $WORLDS; do
    for t in $TOOLS; do
      for c in $CONFIGS; do
        cfg=${c%%@*}
        [ "$cfg" != "$c" ] && [[ "+${c#*@}+" != *"+$t+"* ]] && continue # not one of its tools
        one "$w" "$t" "$cfg"
      done
    done
  done
} 2>&1 | tee "$R/summary.txt"
[ -f bench/sweep_pick.py ] && python3 bench/sweep_pick.py "$R"/*.json 2>&1 | tee "$R/pick.txt"
# the table: per world, the configs that beat tune.c's rules (src/tune_cuda_table.h: copy it there
# from $OUT and commit it with this tarball), and every size a config beat the choice by > 10%;
# a choice of several settings that no run measured together runs once more, every tool, and the
# table is made again with it
python3 tools/tune_table.py --unmeasured "$R/unmeasured.txt" "$R" > /dev/null 2>&1
while read -r w cfg; do
  [ -n "$cfg" ] && for t in $TOOLS; do one "$w" "$t" "$cfg"; done
done < "$R/unmeasured.txt" 2>&1 | tee -a "$R/summary.txt"
python3 tools/tune_table.py --out "$R/tune_cuda_table.h" "$R" 2>&1 | tee "$R/table.txt" &&
  cp "$R/tune_cuda_table.h" "$OUTD/tune_cuda_table.h"
tar -C "$OUTD" -czf "$OUTD/sweep.tar.gz" sweep && rm -rf "$R"
