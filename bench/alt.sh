#!/usr/bin/env bash
# Alternate llama-bench (spinning, then --poll 0) and colibri bench(es) with the same arguments, one
# round after another; prints each test row from its test column on (works with and without the
# "cpu ms/tok" column). LLAMA_BIN: llama.cpp binaries (default /work/llama/build/bin).
# usage: bench/alt.sh ROUNDS F.gguf "COLIBRI_BIN:F.colibri ..." -- BENCH ARGS
set -e
export LD_LIBRARY_PATH=${LLAMA_BIN:-/work/llama/build/bin}
rounds=$1; g=$2; cs=$3; shift 3; [ "$1" = "--" ] && shift
cells='{for(i=1;i<=NF;i++) if ($i ~ /^ *(pp|tg)[0-9]/) {s=""; for(j=i;j<NF;j++) s=s "|" $j; print n s; break}}'
for r in $(seq $rounds); do
  echo "== round $r load $(cut -d' ' -f1 /proc/loadavg)"
  [ "$g" != "-" ] && ${LLAMA_BIN:-/work/llama/build/bin}/llama-bench -m $g "$@" 2>/dev/null | grep -E "^\| .*(pp|tg)[0-9]" | awk -F'|' -v n="llama spin " "$cells"
  [ "$g" != "-" ] && ${LLAMA_BIN:-/work/llama/build/bin}/llama-bench -m $g --poll 0 "$@" 2>/dev/null | grep -E "^\| .*(pp|tg)[0-9]" | awk -F'|' -v n="llama poll0" "$cells"
  for c in $cs; do b=${c%%:*}; f=${c#*:}; $b bench -m $f "$@" 2>/dev/null | grep -E "^\| .*(pp|tg)[0-9]" | awk -F'|' -v n="$(basename $b)" "$cells"; done
done
