#!/usr/bin/env bash
# The main job: build, then run every collective across all local GPUs, or 4 host ranks when there
# is no GPU, checked, one line each, then a short latency/bandwidth table.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)"
n=4
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  n=$(nvidia-smi -L | wc -l)
fi
exec build/purlinrun -n "${N:-$n}" build/quickstart
