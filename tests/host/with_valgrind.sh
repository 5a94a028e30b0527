#!/bin/sh
# with_valgrind.sh COMMAND... -- run COMMAND when valgrind is installed, else exit 77 (ctest: skipped).
if ! command -v valgrind >/dev/null 2>&1; then
  echo "valgrind not installed: skipped"
  exit 77
fi
exec "$@"
