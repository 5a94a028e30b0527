#!/usr/bin/env bash
# The ctest `python`: make a virtual environment in the build folder, pip install the purlin package
# from ./python (host datapath only: CI has no GPU) with numpy, ml_dtypes and pytest from PyPI, then
# run pytest on tests/python (every collective under purlinrun; torch tests skip without torch).
# Fails loudly when the venv, PyPI or the build fails: it never skips.
#
# Usage: tests/python/run_tests.sh BUILD_DIR [pytest args...]
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:?usage: run_tests.sh BUILD_DIR [pytest args...]}
shift
mkdir -p "$build"
build=$(cd "$build" && pwd)
venv=$build/venv
python=${PURLIN_TEST_PYTHON:-python3}

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

command -v "$python" >/dev/null || fail "$python not found: the Python tests need Python 3.9+"
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv" ||
    fail "'$python -m venv $venv' failed (on Debian: apt-get install python3-venv)"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check)
"${pip[@]}" install -q numpy ml_dtypes pytest ||
  fail "pip could not install numpy, ml_dtypes and pytest: is PyPI reachable?"
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2}
"${pip[@]}" install -q --force-reinstall --no-deps "$root/python" \
  -C cmake.define.PURLIN_CUDA=OFF -C cmake.define.PURLIN_PY_WERROR=ON \
  -C build-dir="$build/skbuild" ||
  fail "pip install ./python failed (the build log is above; pip fetches scikit-build-core from PyPI)"

cd "$root"
rc=0
"$venv/bin/python" -m pytest -p no:cacheprovider -q -rs tests/python "$@" || rc=$?
[ "$rc" -eq 5 ] && fail "pytest collected no tests"
exit "$rc"
