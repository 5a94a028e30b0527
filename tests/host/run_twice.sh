#!/bin/sh
# run_twice.sh COMMAND... -- run a coll_test command (with --extra hash) twice and require that
# both runs pass and that every rank's hash of its deterministic outputs is the same in both runs.
out1=$("$@") || { echo "$out1"; echo "run_twice: first run failed"; exit 1; }
out2=$("$@") || { echo "$out2"; echo "run_twice: second run failed"; exit 1; }
h1=$(printf '%s\n' "$out1" | grep 'det-hash' | sort)
h2=$(printf '%s\n' "$out2" | grep 'det-hash' | sort)
printf '%s\n' "$h1"
if [ -z "$h1" ]; then echo "run_twice: no hashes printed"; exit 1; fi
if [ "$h1" != "$h2" ]; then
  echo "run_twice: deterministic outputs differ between runs:"
  printf '%s\n' "$h2"
  exit 1
fi
echo "run_twice: identical deterministic outputs in both runs"
