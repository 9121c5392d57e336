#!/usr/bin/env bash
# Alternate llama-bench (spinning, then --poll 0) and colibri bench(es) with the same arguments, one
# round after another; prints each test row from its test column on (works with and without the
# "cpu ms/tok" column). LLAMA_BIN: llama.cpp binaries (default /work/llama/build/bin).
# usage: bench/alt.sh ROUNDS F.gguf "COLIBRI_BIN:F.colibri ..." -- BENCH ARGS
# REPLACE=1: before each round, evict every file of the round from the page cache and read it
# back, so that each round places the engines' files in memory afresh (on a VM a file's pages can
# read a third slower than another file's, and stay so until evicted: one placement would bias
# every round alike; docs/performance.md, "Where a file's pages lie").
set -e
export LD_LIBRARY_PATH=${LLAMA_BIN:-/work/llama/build/bin}
rounds=$1; g=$2; cs=$3; shift 3; [ "$1" = "--" ] && shift
cells='{for(i=1;i<=NF;i++) if ($i ~ /^ *(pp|tg)[0-9]/) {s=""; for(j=i;j<NF;j++) s=s "|" $j; print n s; break}}'
# Evict the named files from the page cache (POSIX_FADV_DONTNEED), then read each back in full.
replace() {
  [ $# -gt 0 ] || return 0
  python3 -c 'import os, sys
for f in sys.argv[1:]:
    fd = os.open(f, os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd)' "$@"
  cat "$@" > /dev/null
}
for r in $(seq $rounds); do
  if [ "${REPLACE:-0}" = 1 ]; then
    files=(); [ "$g" != "-" ] && files+=("$g"); for c in $cs; do files+=("${c#*:}"); done
    replace "${files[@]}"
  fi
  echo "== round $r load $(cut -d' ' -f1 /proc/loadavg)"
  [ "$g" != "-" ] && ${LLAMA_BIN:-/work/llama/build/bin}/llama-bench -m $g "$@" 2>/dev/null | grep -E "^\| .*(pp|tg)[0-9]" | awk -F'|' -v n="llama spin " "$cells"
  [ "$g" != "-" ] && ${LLAMA_BIN:-/work/llama/build/bin}/llama-bench -m $g --poll 0 "$@" 2>/dev/null | grep -E "^\| .*(pp|tg)[0-9]" | awk -F'|' -v n="llama poll0" "$cells"
  for c in $cs; do b=${c%%:*}; f=${c#*:}; $b bench -m $f "$@" 2>/dev/null | grep -E "^\| .*(pp|tg)[0-9]" | awk -F'|' -v n="$(basename $b)" "$cells"; done
done
