#!/usr/bin/env bash
# CPU ms per decoded token at one thread: `perf stat -e task-clock` of a bench decoding 48 tokens
# minus one decoding 16 (the difference: start-up, loading and the prompt cancel out).
# colibri bench runs an untimed warm-up and then the timed run (-r 1): 2 × 32 tokens apart;
# llama-bench's warm-up decodes one token: 32 apart.
# usage: bench/tgcpu.sh llama F.gguf [extra llama-bench args]   (llama-bench from $LLAMA_BIN, default /work/llama/build/bin)
#        bench/tgcpu.sh BIN F.colibri [extra colibri bench args] (BIN: a colibri binary)
set -eo pipefail
llama=${LLAMA_BIN:-/work/llama/build/bin}
export LD_LIBRARY_PATH=$llama OMP_WAIT_POLICY=passive
kind=$1; f=$2; shift 2
# task-clock ms of one command; fails (and so does the script) if the command or perf does.
tc() {
  local out
  out=$(perf stat -x, -e task-clock "$@" 2>&1 >/dev/null) || { echo "tgcpu: failed: $*" >&2; echo "$out" | tail -3 >&2; return 1; }
  echo "$out" | grep task-clock | cut -d, -f1
}
if [ "$kind" = llama ]; then
  a=$(tc "$llama/llama-bench" -m "$f" -t 1 -r 1 --poll 0 -p 0 -n 16 "$@")
  b=$(tc "$llama/llama-bench" -m "$f" -t 1 -r 1 --poll 0 -p 0 -n 48 "$@")
  tokens=32
else
  a=$(tc "$kind" bench -m "$f" -t 1 -r 1 --no-probe -p 0 -n 16 "$@")
  b=$(tc "$kind" bench -m "$f" -t 1 -r 1 --no-probe -p 0 -n 48 "$@")
  tokens=64
fi
[ -n "$a" ] && [ -n "$b" ] || { echo "tgcpu: no task-clock figure (is perf installed?)" >&2; exit 1; }
python3 -c "print(f'$(basename "$kind") $(basename "$f") tg {($b-$a)/$tokens:.2f} ms/token')"
