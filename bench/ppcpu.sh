#!/usr/bin/env bash
# CPU ms per prefill token at one thread: `perf stat -e task-clock` of a bench with 5 passes of P
# tokens minus one with 1 (the difference: 4 passes, without load and warm-up).
# usage: bench/ppcpu.sh P llama F.gguf      (llama-bench from $LLAMA_BIN, default /work/llama/build/bin)
#        bench/ppcpu.sh P BIN F.colibri      (BIN: a colibri binary)
set -eo pipefail
llama=${LLAMA_BIN:-/work/llama/build/bin}
export LD_LIBRARY_PATH=$llama OMP_WAIT_POLICY=passive
p=$1; kind=$2; f=$3
# task-clock ms of one command; fails (and so does the script) if the command or perf does.
tc() {
  local out
  out=$(perf stat -x, -e task-clock "$@" 2>&1 >/dev/null) || { echo "ppcpu: failed: $*" >&2; echo "$out" | tail -3 >&2; return 1; }
  echo "$out" | grep task-clock | cut -d, -f1
}
if [ "$kind" = llama ]; then
  a=$(tc "$llama/llama-bench" -m "$f" -t 1 -r 1 --poll 0 -p "$p" -n 0)
  b=$(tc "$llama/llama-bench" -m "$f" -t 1 -r 5 --poll 0 -p "$p" -n 0)
else
  a=$(tc "$kind" bench -m "$f" -t 1 -r 1 --no-probe -p "$p" -n 0)
  b=$(tc "$kind" bench -m "$f" -t 1 -r 5 --no-probe -p "$p" -n 0)
fi
[ -n "$a" ] && [ -n "$b" ] || { echo "ppcpu: no task-clock figure (is perf installed?)" >&2; exit 1; }
python3 -c "print(f'$(basename "$kind") $(basename "$f") pp$p {($b-$a)/(4*$p):.3f} ms/token')"
