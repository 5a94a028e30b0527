#!/usr/bin/env bash
# On the GPU machine: build (sm_90), start MPS, run the seven benchmark tools at the given world
# sizes (ranks as processes sharing the GPU), 1K..1G in graph mode: checked up to 64M, timing only
# above (the check regenerates every rank's inputs on the host). Everything goes into one tarball
# under $OUT (the device tool returns at most 8 files) and a summary is printed last.
#   WORLDS="8 4" BUDGET=540 bash tools/gpu_bench.sh
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD BUILD=${BUILD:-$PWD/build-gpu-run} OUTD=${OUT:-/tmp/purlin-bench}
WORLDS=${WORLDS:-"8 4"} BUDGET=${BUDGET:-540} T0=$(date +%s)
R=$OUTD/bench && mkdir -p "$R"
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
export PURLIN_DISABLE_MULTIMEM=1 PURLIN_DATAPATH=cuda
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DPURLIN_TESTS=OFF > "$R/configure.log" 2>&1 &&
  cmake --build "$BUILD" -j "$(nproc)" > "$R/build.log" 2>&1 || { tail -20 "$R/build.log"; exit 1; }
{ date -u +%FT%TZ; git rev-parse HEAD; git status --porcelain | wc -l; nvidia-smi -L; } > "$R/machine.txt"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/pl-mps/pipe CUDA_MPS_LOG_DIRECTORY=/tmp/pl-mps/log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d && trap 'echo quit | nvidia-cuda-mps-control' EXIT
sleep 1
for w in $WORLDS; do
  for t in testAR testAG testRS testA2A testAGV testRSV testA2AV; do
    for range in "-b 1K -e 64M -f 4 -c 1" "-b 256M -e 1G -f 4 -c 0"; do
      left=$((BUDGET - ($(date +%s) - T0)))
      [ $left -lt 15 ] && { echo "budget spent: skip $t w$w $range"; continue; }
      tag=$t.w$w.$( [[ $range == *"-c 1"* ]] && echo small || echo large)
      timeout -k 5 $(( left < 60 ? left : 60 )) "$BUILD/purlinrun" -n "$w" "$BUILD/bench/$t" $range \
        -G 5 -n 10 -R 3 -w 2 -i 0 -J "$R/$tag.json" > "$R/$tag.txt" 2>&1
      echo "$tag rc=$? $(grep -E 'Avg bus|Out of bounds|Time over' "$R/$tag.txt" | tr -s ' ' | tr '\n' ' ')"
    done
  done
done | tee "$R/summary.txt"
tar -C "$OUTD" -czf "$OUTD/bench.tar.gz" bench && rm -rf "$R"
