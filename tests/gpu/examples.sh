#!/usr/bin/env bash
# tests/gpu/examples.sh -- on a GPU machine: build the device-API examples and run them at worlds 2
# and 4 (ranks share GPUs under MPS when there are fewer GPUs than ranks), print a table.
#
#   bash tests/gpu/examples.sh          (from anywhere; needs nvcc, cmake, an NVIDIA GPU)
#
# examples/device_bcast.cu: the tutorial's broadcast (docs/device-api.md), every byte checked.
# examples/fused_allreduce_rmsnorm.cu: AllReduce + residual add + RMSNorm fused with the device API
# against purlin_all_reduce + add + RMSNorm kernels: bitwise equal, and the time of each.
# examples/ce_gemm_overlap.cu: cuBLAS GEMMs beside AllGathers on the SM kernel and on the copy
# engines (PURLIN_ATOM=ce), every output element checked; the GEMM slowdown of each (also at one
# rank per GPU when there are several GPUs).
# Environment:
#   BUILD=dir        build directory (default build-gpu-run, shared with run.sh)
#   ARCH=90          CMAKE_CUDA_ARCHITECTURES
#   WORLDS="2 4"     world sizes
#   SKIP_BUILD=1     reuse an existing build
#   OUT=dir          logs (default $BUILD/logs)
# If an MPS daemon is already running for this shell (CUDA_MPS_PIPE_DIRECTORY set and answering,
# as when run.sh calls this script), it is used; otherwise one is started and stopped here.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
BUILD=${BUILD:-$ROOT/build-gpu-run}
ARCH=${ARCH:-90}
WORLDS=${WORLDS:-"2 4"}
LOGS=${OUT:-$BUILD/logs}
mkdir -p "$LOGS"
T_START=$(date +%s)

export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
export PURLIN_DISABLE_MULTIMEM=1
export PURLIN_DATAPATH=cuda

say() { echo "[examples.sh $(($(date +%s) - T_START))s] $*"; }

NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "${NGPU:-0}" -lt 1 ]; then
  echo "examples.sh: no GPU visible (nvidia-smi -L)"; exit 1
fi

# ---- build ----------------------------------------------------------------------------------------
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  say "building the examples in $BUILD (sm_$ARCH)"
  if ! cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_CUDA_ARCHITECTURES="$ARCH" > "$LOGS/examples-configure.log" 2>&1; then
    tail -30 "$LOGS/examples-configure.log"; echo "examples.sh: configure failed"; exit 1
  fi
  if ! cmake --build "$BUILD" -j "$(nproc)" --target purlin purlinrun device_bcast \
      fused_allreduce_rmsnorm ce_gemm_overlap > "$LOGS/examples-build.log" 2>&1; then
    grep -E "error|Error" "$LOGS/examples-build.log" | head -30; echo "examples.sh: build failed"; exit 1
  fi
fi
RUN=$BUILD/purlinrun
for x in "$RUN" "$BUILD/examples/device_bcast" "$BUILD/examples/fused_allreduce_rmsnorm" \
    "$BUILD/examples/ce_gemm_overlap"; do
  [ -x "$x" ] || { echo "examples.sh: $x missing"; exit 1; }
done

# ---- MPS (as run.sh: pipe and log directories under /tmp, quit on exit) ---------------------------
. "$ROOT/tests/gpu/mps.sh"
if [ -n "${CUDA_MPS_PIPE_DIRECTORY:-}" ] && echo get_server_list | nvidia-cuda-mps-control >/dev/null 2>&1; then
  say "using the running MPS daemon ($CUDA_MPS_PIPE_DIRECTORY)"
else
  mps_start examples-mps
fi

# ---- runs -----------------------------------------------------------------------------------------
ROWS=()
# run NAME WORLD SECONDS -- program args
run() {
  local name=$1 world=$2 secs=$3; shift 4
  local log=$LOGS/example-$name.w$world.log t0=$(date +%s) rc
  say "$name, world $world (limit ${secs}s)"
  timeout -k 10 $((secs + 15)) "$RUN" -n "$world" --timeout "$secs" "$BUILD/examples/$name" "$@" \
    > "$log" 2>&1
  rc=$?
  local dt=$(($(date +%s) - t0))
  local passed failed result=PASS
  passed=$(grep -c ": PASS" "$log")
  failed=$(grep -c "FAIL" "$log")
  if [ $rc -ne 0 ] || [ "$failed" -ne 0 ] || [ "$passed" -ne "$world" ]; then result="FAIL(rc=$rc)"; fi
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && result="TIMEOUT"
  ROWS+=("$(printf '%-24s %5s  %-12s %6s %6s %6ss' "$name" "$world" "$result" "$passed" "$failed" "$dt")")
  # the example's own table (rank 0), then any failure
  grep -vE '^rank [0-9]+: .*(PASS)' "$log" | grep -vE '^\[purlinrun' | head -40
}

for w in $WORLDS; do
  run device_bcast "$w" 120 --
  run fused_allreduce_rmsnorm "$w" 300 --
  run ce_gemm_overlap "$w" 300 --
done
# one rank per GPU (the worlds above share GPUs under MPS when there are fewer GPUs than ranks)
if [ "$NGPU" -gt 1 ] && ! echo " $WORLDS " | grep -q " $NGPU "; then
  run ce_gemm_overlap "$NGPU" 300 --
fi

# ---- summary --------------------------------------------------------------------------------------
{
  echo
  echo "purlin device-API examples: $(date -u +%Y-%m-%dT%H:%M:%SZ) $(git rev-parse --short HEAD 2>/dev/null)"
  echo "GPUs: $NGPU, logs: $LOGS (example-*.log)"
  printf '%-24s %5s  %-12s %6s %6s %7s\n' example world result ranks failed time
  for r in "${ROWS[@]}"; do echo "$r"; done
  echo "total $(($(date +%s) - T_START)) s"
} | tee "$LOGS/examples-summary.txt"
! grep -qE 'FAIL|TIMEOUT' "$LOGS/examples-summary.txt"
