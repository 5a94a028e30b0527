#!/usr/bin/env bash
# The test command: build everything (the CUDA code too when nvcc is present) and run ctest.
# Usage: tools/test.sh [build-dir] [extra ctest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
build=${1:-build}
shift || true
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j "$(nproc)"
cd "$build"
ctest --output-on-failure --timeout 600 -j "$(nproc)" "$@"
