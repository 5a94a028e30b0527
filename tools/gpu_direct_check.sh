#!/usr/bin/env bash
# On the GPU machine, in one call (about 8 minutes): the direct kernel's checks and timings
# (docs/gpu.md, "The direct kernel"; bench/results/2026-12-04-h200-direct/README.md):
#   t:  build; gpu_test --quick --graph at worlds 8 and 3 with the default staging and with
#       PURLIN_STAGING_BYTES=4M (several rounds per call); testRSV (Zipf) at
#       64 MiB-1 GiB, world 8, both stagings (every size checked on the GPU); the faults mismatch,
#       kill, kill-small and leave (world 3);
#   s8: the six direct collectives on cudaMalloc buffers (staged copy-in), world 8, 1 MiB-512 MiB;
#   z8: the same on purlin_mem_alloc buffers (zero copy).
# Each part's summary goes to $OUT/<part>.txt, everything into $OUT/all.tar.gz (few files: the
# device tool returns at most 8).
#   bash tools/gpu_direct_check.sh
#   PARTS="s4 s2 z4 z2" bash tools/gpu_direct_check.sh   # worlds 4 and 2, 64 MiB-1 GiB (with t:
#                                                         # built; without: SKIP_BUILD=1 first)
set -uo pipefail
cd "$(dirname "$0")/.."
D=${OUT:-/tmp/purlin-direct} Q=/tmp/purlin-direct-q
mkdir -p "$D" "$Q"
T="testAR testAG testRS testA2A testAGV testRSV"
PARTS=${PARTS:-"t s8 z8"}
q() { # part cap-seconds env...
  local n=$1 cap=$2
  shift 2
  env OUT="$Q/$n" "$@" timeout -k 5 "$cap" bash tools/gpu_quick.sh > "$Q/$n.txt" 2>&1
  tail -40 "$Q/$n.txt" | grep -v '^$' > "$D/$n.txt"
}
sb=${SKIP_BUILD:-0}
for p in $PARTS; do
  case $p in
  t) q t 420 SKIP_BUILD="$sb" CONFIGS="- STAGING_BYTES=4M" TEST_ALL=1 WORLDS="8 3" FAULTS="mismatch kill kill-small leave" \
       TOOLS=testRSV BW=8 B=64M E=1G F=4 ;;
  s8) q s8 130 SKIP_BUILD="$sb" TW= TF= TOOLS="$T" BW=8 B=1M E=1G F=8 ;;
  z8) q z8 130 SKIP_BUILD="$sb" TW= TF= TOOLS="$T" BW=8 B=1M E=1G F=8 ARGS="--mem purlin" ;;
  s4 | s2) q "$p" 130 SKIP_BUILD="$sb" TW= TF= TOOLS="$T" BW="${p#s}" B=64M E=1G F=4 ;;
  z4 | z2) q "$p" 130 SKIP_BUILD="$sb" TW= TF= TOOLS="$T" BW="${p#z}" B=64M E=1G F=4 ARGS="--mem purlin" ;;
  *) echo "unknown part $p" >&2; exit 2 ;;
  esac
  sb=1 # built by the first part
done
{ grep -h "FAIL" "$Q"/*/quick/test.*.log 2>/dev/null # a part cut off by its cap left its logs
  for f in "$Q"/*/quick.tar.gz; do tar -xzOf "$f" --wildcards 'quick/test.*.log' 2>/dev/null; done |
    grep "FAIL"; } | head -20 > "$D/fails.txt"
tar -C "$Q" -czf "$D/all.tar.gz" .
for p in $PARTS; do echo "== $p"; cat "$D/$p.txt"; done
