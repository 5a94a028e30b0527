#!/usr/bin/env bash
# On the GPU machine, in one short call: build (sm_90), start MPS, check correctness at worlds 4 and 8
# (gpu_test --quick, graph replay) for each lane count in LANES, then time AllReduce/AllGather/
# ReduceScatter at world 8 for each lane count (1K..64M, graph mode, checked). One tarball under $OUT.
#   LANES="1 8" bash tools/gpu_quick.sh
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD BUILD=${BUILD:-$PWD/build-gpu-run} OUTD=${OUT:-/tmp/purlin-quick} LANES=${LANES:-"1 8"}
R=$OUTD/quick && mkdir -p "$R"
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
export PURLIN_DISABLE_MULTIMEM=1 PURLIN_DATAPATH=cuda
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=90 \
  > "$R/configure.log" 2>&1 &&
  cmake --build "$BUILD" -j "$(nproc)" --target purlinrun gpu_test testAR testAG testRS \
    > "$R/build.log" 2>&1 || { grep -E "error" "$R/build.log" | head -20; exit 1; }
{ date -u +%FT%TZ; git rev-parse HEAD 2>/dev/null; nvidia-smi -L; } > "$R/machine.txt"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/pl-mps/pipe CUDA_MPS_LOG_DIRECTORY=/tmp/pl-mps/log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d && trap 'echo quit | nvidia-cuda-mps-control' EXIT
sleep 1
{
for l in $LANES; do
  for w in 4 8; do
    PURLIN_LANES=$l timeout -k 5 90 "$BUILD/purlinrun" -n $w "$BUILD/tests/gpu/gpu_test" --quick --graph \
      > "$R/test.l$l.w$w.log" 2>&1
    echo "lanes $l world $w gpu_test rc=$? $(grep -Eo '[0-9]+ passed, [0-9]+ failed' "$R/test.l$l.w$w.log" | awk '{p+=$1; f+=$3} END {print p" passed "f" failed"}') $(grep -Eo 'graph: .*' "$R/test.l$l.w$w.log" | head -1)"
  done
  for t in ${TOOLS:-testAR testAG testRS}; do
    PURLIN_LANES=$l timeout -k 5 60 "$BUILD/purlinrun" -n 8 "$BUILD/bench/$t" -b 1K -e 64M -f 8 -G 5 -n 10 \
      -R 3 -w 2 -i 0 -J "$R/$t.l$l.w8.json" > "$R/$t.l$l.w8.txt" 2>&1
    echo "lanes $l $t w8 rc=$? $(grep -E 'Avg bus|Out of bounds' "$R/$t.l$l.w8.txt" | tr -s ' ' | tr '\n' ' ')"
    grep -E '^ +(1024|1048576|67108864) ' "$R/$t.l$l.w8.txt"
  done
done
} 2>&1 | tee "$R/summary.txt"
tar -C "$OUTD" -czf "$OUTD/quick.tar.gz" quick && rm -rf "$R"
