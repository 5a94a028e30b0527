#!/bin/sh
# Run a bench command that must catch corrupted output: it must exit non-zero AND report a non-zero
# wrong count in its footer (so that a crash or a refusal does not pass for a detected error).
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
if [ "$rc" -eq 0 ]; then
  echo "expect_wrong: the bench exited 0 although its output was corrupted" >&2
  exit 1
fi
if ! printf '%s\n' "$out" | grep -Eq '^# Out of bounds values : [1-9][0-9]* FAILED'; then
  echo "expect_wrong: no non-zero '# Out of bounds values' line (exit $rc)" >&2
  exit 1
fi
echo "expect_wrong: corruption detected (exit $rc)"
exit 0
