#!/usr/bin/env bash
# The Python package on the GPU machine, in one call: build and install it (with the CUDA datapath,
# sm_90 only: quick) into the machine's python3 (whose image has torch, numpy, ml_dtypes, pytest,
# scikit-build-core, cmake and ninja: nothing is fetched), then
#   quickstart.py under purlinrun and under torchrun (f32 and bf16, CUDA tensors),
#   pytest tests/python: host datapath (numpy, torch CPU) and the cuda suite (all seven collectives
#   against torch.distributed/gloo in bf16 and f32, CUDA graph capture and replay, device counts,
#   streams, peer memory, torch.compile, CuPy, deterministic GPU == host bits).
# Ranks share the GPU(s) under MPS. Prints a short table last.
#
# Usage (repository root): bash tests/python/gpu.sh [ranks]      (default 4; logs under $OUT)
set -uo pipefail
cd "$(dirname "$0")/../.."
n=${1:-4}
out=${OUT:-/tmp/purlin-python-gpu}
mkdir -p "$out"
# NVLink multicast must stay off on these machines.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PURLIN_DISABLE_MULTIMEM=1
export CUDA_MPS_PIPE_DIRECTORY=/tmp/purlin-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/purlin-mps-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
mps=0
if command -v nvidia-cuda-mps-control >/dev/null && nvidia-cuda-mps-control -d; then mps=1; fi
cleanup() { [ "$mps" = 1 ] && echo quit | nvidia-cuda-mps-control; }
trap cleanup EXIT

declare -a rows
step() { # step NAME command...
  local name=$1 t0 rc
  shift
  t0=$(date +%s)
  "$@" >"$out/$name.log" 2>&1
  rc=$?
  rows+=("$(printf '%-26s %-5s %4ss' "$name" "$([ $rc = 0 ] && echo ok || echo FAIL:$rc)" \
    $(($(date +%s) - t0)))")
  tail -n 25 "$out/$name.log"
  return $rc
}

nvidia-smi -L
python3 -c 'import torch; print("torch", torch.__version__, "devices", torch.cuda.device_count())'
step install python3 -m pip install --no-build-isolation --no-deps --force-reinstall ./python \
  -C cmake.define.CMAKE_CUDA_ARCHITECTURES=90 -C build-dir=/tmp/purlin-skbuild -v
run=$(python3 -c 'import os, purlin; print(os.path.join(os.path.dirname(purlin.__file__), "purlinrun"))')
step quickstart-purlinrun-f32 "$run" -n "$n" --timeout 150 python3 quickstart.py
step quickstart-purlinrun-bf16 "$run" -n "$n" --timeout 150 python3 quickstart.py --dtype bfloat16
step quickstart-torchrun-f32 timeout 150 torchrun --nproc-per-node "$n" quickstart.py
step quickstart-host-numpy env PURLIN_DATAPATH=host "$run" -n "$n" python3 quickstart.py --numpy
PURLIN_TEST_LAUNCH_TIMEOUT=150 PURLIN_TEST_CUDA_WORLD=$n step pytest python3 -m pytest -q -rs -p no:cacheprovider tests/python
echo
echo "purlin python on $(nvidia-smi -L | head -1 | cut -d'(' -f1), $n ranks, MPS=$mps, $(date -u +%F)"
printf '%s\n' "${rows[@]}"
