#!/bin/bash
# test_purlinrun.sh PURLINRUN BS_TEST -- the launcher end to end: usage and exit codes, a failing
# rank (named, the others killed), a rank killed by a signal, --timeout, SIGTERM forwarding, a
# torchrun-style job, and that no abstract socket, process or id file is left behind.
set -u
PR=$1
T=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export PURLIN_TIMEOUT_MS=10000
failures=0

fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

now_ms() { date +%s%3N; }

# Every pid recorded in $1 must be gone, and no socket name recorded there may still be open.
check_clean() {
  local rec=$1 what=$2 pid name
  for pid in $(awk '$1 == "pid" {print $2}' "$rec"); do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && fail "$what: rank pid $pid is still alive"
  done
  for name in $(awk '$1 == "sock" {print $2}' "$rec" | sort -u); do
    grep -q "@$name\$" /proc/net/unix && fail "$what: socket @$name is still open"
  done
  return 0
}

# usage, --help, bad arguments
"$PR" --help | grep -q "usage: purlinrun" || fail "--help"
for args in "" "-n" "-n 0 true" "-n x true" "-n 2" "--timeout 0 -n 1 true" "--bogus -n 1 true"; do
  # shellcheck disable=SC2086
  "$PR" $args >/dev/null 2>&1
  rc=$?
  [ $rc -eq 2 ] || fail "purlinrun $args: exit $rc, want 2"
done
"$PR" -n 2 /nonexistent/program 2>"$tmp/err"
rc=$?
[ $rc -eq 127 ] || fail "missing program: exit $rc, want 127"
grep -q "cannot run /nonexistent/program" "$tmp/err" || fail "missing program: no message"

# only the PURLIN_ variables are set, with the right values
"$PR" -n 3 sh -c 'echo "$PURLIN_RANK $PURLIN_WORLD_SIZE $PURLIN_LOCAL_RANK ${#PURLIN_UNIQUE_ID} ${RANK-unset}"' \
  >"$tmp/env" || fail "env listing"
[ "$(sort "$tmp/env" | tr '\n' ,)" = "0 3 0 256 unset,1 3 1 256 unset,2 3 2 256 unset," ] ||
  fail "variables: $(tr '\n' , <"$tmp/env")"

# all ranks succeed
for n in 1 4; do
  "$PR" -n $n "$T" child ok "$tmp/ok$n" || fail "-n $n ok: exit $?"
  [ "$(grep -c ^ready "$tmp/ok$n")" -eq $n ] || fail "-n $n: not every rank got through"
  check_clean "$tmp/ok$n" "-n $n ok"
done

# one rank exits 3: named, the others killed promptly, exit status 3
t0=$(now_ms)
"$PR" -n 3 "$T" child exit:1:3 "$tmp/exit" 2>"$tmp/err"
rc=$?
took=$(($(now_ms) - t0))
[ $rc -eq 3 ] || fail "exit:1:3: exit $rc, want 3"
grep -Eq "purlinrun: rank 1 \(pid [0-9]+\) exited with status 3" "$tmp/err" ||
  fail "exit:1:3: message: $(cat "$tmp/err")"
[ $took -lt 8000 ] || fail "exit:1:3: took $took ms"
check_clean "$tmp/exit" "exit:1:3"

# one rank killed by SIGKILL: 128 + 9
"$PR" -n 2 "$T" child kill:0:9 "$tmp/kill" 2>"$tmp/err"
rc=$?
[ $rc -eq 137 ] || fail "kill:0:9: exit $rc, want 137"
grep -Eq "rank 0 \(pid [0-9]+\) killed by signal 9" "$tmp/err" || fail "kill:0:9: $(cat "$tmp/err")"
check_clean "$tmp/kill" "kill:0:9"

# --timeout: 124, everything killed
t0=$(now_ms)
"$PR" -n 2 --timeout 1 "$T" child hang "$tmp/timeout" 2>/dev/null
rc=$?
took=$(($(now_ms) - t0))
[ $rc -eq 124 ] || fail "--timeout: exit $rc, want 124"
[ $took -lt 6000 ] || fail "--timeout: took $took ms"
check_clean "$tmp/timeout" "--timeout"

# SIGTERM to purlinrun reaches every rank
"$PR" -n 3 "$T" child hang "$tmp/term" 2>/dev/null &
prpid=$!
for _ in $(seq 100); do
  [ -f "$tmp/term" ] && [ "$(grep -c ^ready "$tmp/term")" -eq 3 ] && break
  sleep 0.1
done
[ "$(grep -c ^ready "$tmp/term" 2>/dev/null)" = 3 ] || fail "SIGTERM: the ranks never got ready"
t0=$(now_ms)
kill -TERM $prpid
wait $prpid
rc=$?
took=$(($(now_ms) - t0))
[ $rc -eq 143 ] || fail "SIGTERM: exit $rc, want 143"
[ $took -lt 5000 ] || fail "SIGTERM: took $took ms"
check_clean "$tmp/term" "SIGTERM"

# a torchrun-style job: named rendezvous, no id file left
port=$((20000 + ($$ * 13 + RANDOM) % 40000))
idfile=$("$BASH" -c "'$T' idfile torch-127.0.0.1-$port")
pids=()
for r in 2 1 0; do
  RANK=$r WORLD_SIZE=3 LOCAL_RANK=$r LOCAL_WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    "$T" child ok "$tmp/torch" &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || fail "torchrun-style rank (pid $p) failed"; done
[ "$(grep -c "^ready torchrun" "$tmp/torch")" -eq 3 ] || fail "torchrun-style: not all ranks got through"
[ -e "$idfile" ] && fail "torchrun-style: $idfile is still there"
check_clean "$tmp/torch" "torchrun-style"

[ $failures -eq 0 ] && echo "test_purlinrun: all passed"
exit $((failures > 0))
