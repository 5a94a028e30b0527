#!/usr/bin/env bash
# tools/ptxas_report.sh -- no GPU needed: compile the CUDA sources for sm_90 with ptxas -v and print,
# per kernel entry and per out-of-line device function, its registers, stack frame and spills
# (issue 5: "SASS: no local-memory spills"). The lines with spills last, with a count.
#   bash tools/ptxas_report.sh                  # every src/cuda/*.cu
#   bash tools/ptxas_report.sh src/cuda/direct.cu
set -uo pipefail
cd "$(dirname "$0")/.."
NVCC=${NVCC:-nvcc}
command -v "$NVCC" > /dev/null || { echo "ptxas_report: no $NVCC" >&2; exit 2; }
FILES=${*:-$(ls src/cuda/*.cu)}
OUTF=$(mktemp)
for f in $FILES; do
  "$NVCC" -O2 --generate-code=arch=compute_90,code=sm_90 --fmad=false -DPURLIN_BUILD=1 \
    -DPURLIN_HAVE_CUDA=1 -D_GNU_SOURCE -Iinclude -Isrc -Xptxas -v -c "$f" -o /dev/null 2>&1 |
    awk -v file="$(basename "$f")" '
      /Compiling entry function/ { match($0, /function '"'"'[^'"'"']*'"'"'/); name = substr($0, RSTART + 10, RLENGTH - 11); entry[name] = 1 }
      /Function properties for/ { n = $0; sub(/.*Function properties for /, "", n); name = n }
      /bytes stack frame/ { gsub(/^ +/, ""); frame[name] = $0 }
      /Used [0-9]+ registers/ { match($0, /Used [0-9]+ registers/); regs[name] = substr($0, RSTART + 5, RLENGTH - 15) }
      END { for (k in frame) printf "%s\t%s\t%s\t%s\t%s\n", file, (k in entry ? "kernel" : "func"), (k in regs ? regs[k] : "-"), frame[k], k }'
done > "$OUTF"
demangle() { if command -v c++filt > /dev/null; then c++filt; else cat; fi; }
sort "$OUTF" | demangle | awk -F'\t' '{printf "%-12s %-6s %4s regs  %-62s %s\n", $1, $2, $3, $4, $5}' | cut -c1-220
echo "== with spills"
grep -vE "0 bytes spill stores, 0 bytes spill loads" "$OUTF" | sort | demangle |
  awk -F'\t' '{printf "%-12s %-6s %4s regs  %-62s %s\n", $1, $2, $3, $4, $5}' | cut -c1-220
echo "$(grep -cvE "0 bytes spill stores, 0 bytes spill loads" "$OUTF") of $(wc -l < "$OUTF") entries and functions spill"
rm -f "$OUTF"
