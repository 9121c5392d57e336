#!/usr/bin/env bash
# Digest of everything a build computes on the oracle fixtures, for checking that a refactor
# leaves results bit-identical: `scripts/bitcheck.sh OLD_BIN old.txt; scripts/bitcheck.sh
# NEW_BIN new.txt; diff old.txt new.txt` (empty diff = same bits).
#
# For every fixture, every storage type (f32, bf16, f16, q8r8, q4r8, row-major q8 and q4) and
# every kernel path this CPU runs (COLIBRI_CPU=generic|avx2, int8 and float activations for the
# quantised files), it records the sha256 of:
#   - the converted .colibri file,
#   - teacher-forced logits over the fixture's input_ids (16 rows: matrix-vector strategy),
#   - logits over input_ids three times (48 rows: the blocked GEMM / int8 prefill),
#   - 24 tokens of greedy and of seeded sampled generation with Gumbel routing (decode path).
# Plus the same for the shipped default model.
set -euo pipefail
BIN=$(realpath "$1")
OUT=$(realpath -m "$2")
cd "$(dirname "$0")/.."
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
: > "$OUT"

paths=(generic)
grep -qw avx2 /proc/cpuinfo && paths+=(avx2)
# An older build answers COLIBRI_CPU=avx512 with its best path (and a note): the digests of two
# builds are compared path by path, so pass BITCHECK_PATHS to compare only the paths both have.
grep -qw avx512_vnni /proc/cpuinfo && paths+=(avx512)
[ -n "${BITCHECK_PATHS:-}" ] && read -r -a paths <<< "$BITCHECK_PATHS"

digest() { sha256sum | cut -c1-16; }
fail() { echo "bitcheck: $*" >&2; exit 1; }

# logits LABEL TAG MODEL IDS: digest of the .npy written (a fresh file: a failed run cannot reuse
# the previous one).
logits() {
    rm -f "$WORK/l.npy"
    "$BIN" logits -m "$3" --tokens "$4" -o "$WORK/l.npy" -t 2 2>"$WORK/err" || fail "$1 $2: $(cat "$WORK/err")"
    echo "$1 $2 $(digest < "$WORK/l.npy")" >> "$OUT"
}

# text LABEL TAG MODEL ARGS...: digest of the generated text (never empty).
text() {
    local label=$1 tag=$2 model=$3 out
    shift 3
    out=$("$BIN" run -m "$model" -p "In the beginning" -n 24 --ignore-eos -t 2 "$@" 2>"$WORK/err") ||
        fail "$label $tag: $(cat "$WORK/err")"
    [ -n "$out" ] || fail "$label $tag: no text generated"
    echo "$label $tag $(printf '%s' "$out" | digest)" >> "$OUT"
}

record() { # record LABEL MODEL IDS
    local label=$1 model=$2 ids=$3 path act
    for path in "${paths[@]}"; do
        for act in int8 float; do
            export COLIBRI_CPU=$path COLIBRI_QUANT_ACT=$act
            logits "$label" "$path $act logits16" "$model" "$ids"
            logits "$label" "$path $act logits48" "$model" "$ids,$ids,$ids"
            text "$label" "$path $act greedy" "$model" --temp 0
            text "$label" "$path $act sampled" "$model" --seed 7 --routing gumbel
        done
    done
    unset COLIBRI_CPU COLIBRI_QUANT_ACT
}

for dir in tests/fixtures/models/*/; do
    name=$(basename "$dir")
    ids=$(python3 -c "import json,sys; print(','.join(map(str, json.load(open(sys.argv[1]))['input_ids'])))" \
        "$dir/oracle/meta.json")
    for kind in f32 bf16 f16 q8r8 q4r8 q8 q4; do
        case $kind in
            f32|bf16|f16) args=(--dtype "$kind") ;;
            q8r8) args=(--quantize q8) ;;
            q4r8) args=(--quantize w4a16) ;;
            q8) args=(--quantize q8 --no-interleave) ;;
            q4) args=(--quantize w4a16 --no-interleave) ;;
        esac
        file="$WORK/$name-$kind.colibri"
        "$BIN" convert "$dir" -o "$file" "${args[@]}" --no-progress >/dev/null 2>"$WORK/err" ||
            fail "convert $name $kind: $(cat "$WORK/err")"
        # The metadata holds the conversion date: digest from the tensor table to the end.
        echo "$name $kind file $(python3 -c "import struct,sys; b=open(sys.argv[1],'rb').read(); \
sys.stdout.buffer.write(b[struct.unpack_from('<Q', b, 0x38)[0]:])" "$file" | digest)" >> "$OUT"
        record "$name-$kind" "$file" "$ids"
        rm -f "$file"
    done
done
record default models/default.colibri "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16"
echo "$(wc -l < "$OUT") digests written to $OUT"
