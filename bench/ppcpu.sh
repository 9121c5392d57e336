#!/usr/bin/env bash
# CPU ms per prefill token at one thread: `perf stat -e task-clock` of a bench with 5 passes of P
# tokens minus one with 1 (the difference: 4 passes, without load and warm-up).
# usage: bench/ppcpu.sh P llama F.gguf      (llama-bench from $LLAMA_BIN, default /work/llama/build/bin)
#        bench/ppcpu.sh P BIN F.colibri      (BIN: a colibri binary)
set -e
llama=${LLAMA_BIN:-/work/llama/build/bin}
export LD_LIBRARY_PATH=$llama OMP_WAIT_POLICY=passive
p=$1; kind=$2; f=$3
tc() { perf stat -x, -e task-clock "$@" 2>&1 >/dev/null | grep task-clock | cut -d, -f1; }
if [ "$kind" = llama ]; then
  a=$(tc "$llama/llama-bench" -m "$f" -t 1 -r 1 --poll 0 -p "$p" -n 0)
  b=$(tc "$llama/llama-bench" -m "$f" -t 1 -r 5 --poll 0 -p "$p" -n 0)
else
  a=$(tc "$kind" bench -m "$f" -t 1 -r 1 --no-probe -p "$p" -n 0)
  b=$(tc "$kind" bench -m "$f" -t 1 -r 5 --no-probe -p "$p" -n 0)
fi
python3 -c "print(f'$(basename "$kind") $(basename "$f") pp$p {($b-$a)/(4*$p):.3f} ms/token')"
