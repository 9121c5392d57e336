#!/usr/bin/env bash
# The C side of colibri, end to end. Assumes `cargo build --release` was done.
#
#   scripts/test-c.sh [plain] [asan] [valgrind] [install]      (default: all four, in that order)
#
# plain     build c_examples/*.c with -std=c99 -Wall -Wextra -Werror -pedantic and run them,
#           checking their outputs: greedy text/ids equal `target/release/colibri run --temp 0
#           --ignore-eos` (and the argmax of `colibri logits`, and a statically linked build),
#           streaming ends where it should and says why (token limit; a stop string, never
#           printed, as `colibri run --stop`), two threads equal one, routing traces equal
#           `colibri run --debug-routing`, sequences decoded together (colibri_infer_batch) equal
#           each decoded alone, embeddings (colibri_embed) equal transformers' pooled hidden states, the MoE layer equals its scalar reference, and the HTTP teaching
#           server answers good and hostile requests with the documented JSON and status codes
#           (finish_reason from the library, stop strings included) while staying up.
# asan      the same programs built with -fsanitize=address,undefined (leak detection on).
# valgrind  the plain builds under valgrind (memcheck, leak check): no errors, nothing
#           definitely or indirectly lost.
# install   cmake build + install into a temporary prefix, moved elsewhere (relocatable), then
#           C programs built with pkg-config (shared; static via colibri-static.pc; static via
#           `pkg-config --static` against a static-only prefix), the examples' Makefile, and a
#           CMake consumer with find_package(colibri) and with add_subdirectory(colibri).
#
# Tools: cc, curl, python3 (standard library only), valgrind, pkg-config, cmake, make, readelf
# (scripts/ci-deps.sh installs the missing ones on Debian/Ubuntu).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
# cargo's output: CARGO_TARGET_DIR (relative to the repository root) or target/.
TARGET=${CARGO_TARGET_DIR:-target}
case $TARGET in /*) ;; *) TARGET=$ROOT/$TARGET ;; esac
REL=$TARGET/release
COLIBRI=$REL/colibri
START=$SECONDS

PHASES=("$@")
[ ${#PHASES[@]} -gt 0 ] || PHASES=(plain asan valgrind install)
for p in "${PHASES[@]}"; do
    case $p in plain | asan | valgrind | install) ;; *) echo "unknown phase '$p' (plain|asan|valgrind|install)" >&2; exit 2 ;; esac
done

say() { printf '== %s\n' "$*"; }
ok() { printf '   ok  %s\n' "$*"; }
fail() {
    printf 'FAIL: %s\n' "$*" >&2
    exit 1
}

for tool in cc curl python3 pkg-config cmake make readelf valgrind timeout; do
    command -v "$tool" >/dev/null || fail "$tool not found (scripts/ci-deps.sh installs it)"
done
[ -x "$COLIBRI" ] && [ -f "$REL/libcolibri.so" ] && [ -f "$REL/libcolibri.a" ] ||
    fail "run 'cargo build --release' first"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/colibri-c.XXXXXX")
SERVER_PID=
cleanup() {
    local rc=$?
    if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; fi
    if [ $rc -eq 0 ]; then rm -rf "$WORK"; else echo "(work files kept in $WORK)" >&2; fi
}
trap cleanup EXIT

VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
# The ABI version has one definition, the header's; the library's SONAME is libcolibri.so.$ABI.
ABI=$(sed -n 's/^#define COLIBRI_ABI_VERSION \([0-9][0-9]*\)$/\1/p' include/colibri.h)
[ -n "$ABI" ] || fail "COLIBRI_ABI_VERSION not found in include/colibri.h"
SO=libcolibri.so.$ABI
# The system libraries of libcolibri.a: one list, in CMakeLists.txt (from rustc's native-static-libs).
NATIVE_LIBS=$(sed -n 's/^set(COLIBRI_NATIVE_STATIC_LIBS \(.*\))$/\1/p' CMakeLists.txt | sed 's/\([^ ]*\)/-l\1/g')
[ -n "$NATIVE_LIBS" ] || fail "COLIBRI_NATIVE_STATIC_LIBS not found in CMakeLists.txt"
STRICT=(-std=c99 -Wall -Wextra -Werror -pedantic)
EXAMPLES=(version generate stream threads fork batch embed routing_trace moe_layer http_server state)

# ----------------------------------------------------------------------------------------------
say "setup in $WORK"
Q=$WORK/q.colibri
M=$WORK/m.colibri
"$COLIBRI" convert tests/fixtures/models/qwen2_moe_shared -o "$Q" >"$WORK/convert.log" 2>&1 || fail "convert: $(cat "$WORK/convert.log")"
"$COLIBRI" convert tests/fixtures/models/mixtral_gqa -o "$M" >"$WORK/convert.log" 2>&1 || fail "convert: $(cat "$WORK/convert.log")"
# The library as an install lays it out: the file under its SONAME plus the development symlink.
mkdir -p "$WORK/lib"
cp "$REL/libcolibri.so" "$WORK/lib/$SO"
ln -s "$SO" "$WORK/lib/libcolibri.so"
cp "$REL/libcolibri.a" "$WORK/lib/libcolibri.a"

# The build tree works as it is: a program linked against target/release (which records the
# SONAME) finds libcolibri.so.$ABI there through its rpath, no install and no LD_LIBRARY_PATH.
say "a program linked against the build tree runs"
cc "${STRICT[@]}" -I"$ROOT/include" c_examples/version.c -L"$REL" -Wl,-rpath,"$REL" -lcolibri -lm -pthread \
    -o "$WORK/version-buildtree" || fail "cannot link c_examples/version.c against $REL"
readelf -d "$WORK/version-buildtree" | grep NEEDED | grep -qF "[$SO]" || fail "the program does not record $SO"
env -u LD_LIBRARY_PATH "$WORK/version-buildtree" >"$WORK/version-buildtree.out" 2>&1 \
    || fail "a program linked against $REL does not start: $(cat "$WORK/version-buildtree.out")"

build_examples() { # OUT_DIR EXTRA_CFLAGS...
    local out=$1 e
    shift
    mkdir -p "$out"
    for e in "${EXAMPLES[@]}"; do
        cc "${STRICT[@]}" "$@" -I"$ROOT/include" "c_examples/$e.c" -L"$WORK/lib" -Wl,-rpath,"$WORK/lib" \
            -lcolibri -lm -pthread -o "$out/$e" || fail "cannot compile c_examples/$e.c ($*)"
    done
}

# JSON assertions on a response body: key=value (a number, a word, a comma-separated id list
# for "tokens", or @FILE: the file's text without its final newline, as `colibri run` prints it),
# or error=PARAM|null for the documented error object, or lacks=@FILE: the text does not contain
# the file's text (a stop string).
cat >"$WORK/jcheck.py" <<'EOF'
import json, sys
body = open(sys.argv[1], "rb").read()
try:
    d = json.loads(body)
except ValueError as e:
    sys.exit(f"not JSON ({e}): {body[:300]!r}")
for spec in sys.argv[2:]:
    key, _, want = spec.partition("=")
    if key == "lacks":
        frag = open(want[1:], encoding="utf-8").read()
        if not frag or frag in d.get("text", ""):
            sys.exit(f"the text {d.get('text')!r} contains {frag!r}")
        continue
    if key == "error":  # error=<param>|null : the documented error object
        e = d.get("error")
        ok = isinstance(e, dict) and isinstance(e.get("message"), str) and e.get("message") \
            and e.get("type") in ("invalid_request_error", "server_error") and "code" in e \
            and e["code"] is None and e.get("param") == (None if want == "null" else want)
        if not ok or set(d) != {"error"}:
            sys.exit(f"bad error object (want param {want}): {d}")
        continue
    if key not in d:
        sys.exit(f"missing {key}: {d}")
    got = d[key]
    if want.startswith("@"):
        exp = open(want[1:], "rb").read()
        exp = exp[:-1] if exp.endswith(b"\n") else exp
        exp = exp.decode("utf-8")
    elif key == "tokens":
        exp = [int(t) for t in want.split(",") if t]
    elif want.lstrip("-").isdigit():
        exp = int(want)
    else:
        exp = want
    if got != exp:
        sys.exit(f"{key}: got {got!r}, want {exp!r}")
if "text" in d:  # a success body has exactly the documented fields
    want_keys = {"text", "tokens", "prompt_tokens", "completion_tokens", "finish_reason"}
    if set(d) != want_keys or d["completion_tokens"] != len(d["tokens"]):
        sys.exit(f"bad response shape: {d}")
EOF
jcheck() { python3 "$WORK/jcheck.py" "$@"; }

# Greedy ids checked against the engine's logits: row r of `colibri logits` over prompt+generated
# ids predicts id r+1, so generated id i must be the argmax of row n_prompt-1+i (ties: lowest id).
cat >"$WORK/argmax.py" <<'EOF'
import ast, struct, subprocess, sys
colibri, model, out, npy = sys.argv[1:5]
lines = open(out).read().split("\n")
prompt = [int(t) for t in lines[0].split()[1:]]
ids = [int(t) for t in lines[1].split()[1:]]
subprocess.run([colibri, "logits", "-m", model, "--tokens", ",".join(map(str, prompt + ids)), "-o", npy],
               check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
raw = open(npy, "rb").read()
assert raw[:6] == b"\x93NUMPY"
hlen = struct.unpack("<H", raw[8:10])[0] if raw[6] == 1 else struct.unpack("<I", raw[8:12])[0]
start = (10 if raw[6] == 1 else 12) + hlen
hdr = ast.literal_eval(raw[(10 if raw[6] == 1 else 12):start].decode("latin1"))
assert hdr["descr"] == "<f4" and not hdr["fortran_order"], hdr
rows, vocab = hdr["shape"]
vals = struct.unpack(f"<{rows * vocab}f", raw[start:start + 4 * rows * vocab])
for i, want in enumerate(ids):
    row = vals[(len(prompt) - 1 + i) * vocab:(len(prompt) + i) * vocab]
    best = max(range(vocab), key=lambda j: (row[j], -j))
    if best != want:
        sys.exit(f"generated id {i} is {want}, the logits' argmax is {best}")
EOF

# Reference outputs of the Rust CLI.
cli_greedy() { # MODEL PROMPT N OUT
    "$COLIBRI" run -m "$1" -p "$2" -n "$3" --temp 0 --ignore-eos >"$4" 2>/dev/null || fail "colibri run -m $1 -p '$2' failed"
}
cli_trace() { # MODEL PROMPT N OUT [run options...]: the --debug-routing lines without the token text
    local model=$1 prompt=$2 n=$3 out=$4
    shift 4
    "$COLIBRI" run -m "$model" -p "$prompt" -n "$n" --temp 0 --ignore-eos --debug-routing "$@" 2>&1 >/dev/null |
        grep '^token\[' | sed -E 's/^(token\[[0-9]+\]) ".*" layer /\1 layer /' >"$out"
}
PROMPTS=("Hello" "The quick brown fox")
i=0
for model in Q M; do
    for prompt in "${PROMPTS[@]}"; do
        cli_greedy "${!model}" "$prompt" 16 "$WORK/ref.$model.$i.txt"
        i=$((i + 1))
    done
    i=0
done
cli_greedy "$Q" "Hello" 8 "$WORK/ref.Q.hello8.txt"

# A sampled generation that ends with an end-of-sequence token within 50 tokens (for
# finish_reason "stop"), found with the CLI.
EOS_SEED=
for seed in $(seq 0 60); do
    "$COLIBRI" run -m "$Q" -p Hello -n 50 --temp 2 --top-k 0 --top-p 1 --min-p 0 --seed "$seed" \
        >"$WORK/ref.eos.txt" 2>"$WORK/ref.eos.err"
    if grep -q 'stop: end of sequence' "$WORK/ref.eos.err"; then
        EOS_SEED=$seed
        EOS_TOKENS=$(sed -n 's/.*generation: \([0-9]*\) tokens.*/\1/p' "$WORK/ref.eos.err")
        break
    fi
done
[ -n "$EOS_SEED" ] || fail "no seed in 0..60 ends with EOS on the qwen2 fixture"

# Stop strings: two characters from the middle of a greedy reference text, and that text cut
# before their first occurrence (with the final newline `colibri run` prints): what a generation
# asked to stop there must return, the stop string itself never part of it.
cat >"$WORK/stopcut.py" <<'EOF'
import sys
ref, stop_out, cut_out = sys.argv[1:4]
t = open(ref, encoding="utf-8").read()
t = t[:-1] if t.endswith("\n") else t
for i in range(len(t) // 2, len(t) - 1):
    s = t[i:i + 2]
    if all(c.isprintable() and c != "\ufffd" for c in s) and s.strip() == s:
        break
else:
    sys.exit(f"no stop string candidate in {t!r}")
open(stop_out, "w", encoding="utf-8").write(s)
open(cut_out, "w", encoding="utf-8").write(t[:t.find(s)] + "\n")
EOF
python3 "$WORK/stopcut.py" "$WORK/ref.Q.0.txt" "$WORK/http.stop" "$WORK/http.cut.txt" || fail "no stop string for HTTP"
python3 -c 'import json, sys; sys.stdout.write(json.dumps({"prompt": "Hello", "max_tokens": 16, "temperature": 0,
    "ignore_eos": True, "stop": open(sys.argv[1], encoding="utf-8").read()}))' "$WORK/http.stop" >"$WORK/http-stop.json"
"$COLIBRI" run -m "$Q" -p "Hello world" -n 8 --temp 0 --stop $'\n' >"$WORK/ref.stream.Q" 2>/dev/null
python3 "$WORK/stopcut.py" "$WORK/ref.stream.Q" "$WORK/stream.stop" "$WORK/stream.cut.txt" || fail "no stop string for stream.c"
STREAM_STOP=$(cat "$WORK/stream.stop")
"$COLIBRI" run -m "$Q" -p "Hello world" -n 8 --temp 0 --stop "$STREAM_STOP" >"$WORK/ref.stream.stop" 2>/dev/null
cmp -s "$WORK/ref.stream.stop" "$WORK/stream.cut.txt" || fail "colibri run --stop '$STREAM_STOP' does not cut the text there"

# A sampled generation that ends at the first newline, its stop string (seed found with the CLI).
NL_SEED=
for seed in $(seq 0 40); do
    "$COLIBRI" run -m "$Q" -p "Hello world" -n 200 --temp 1.5 --seed "$seed" --stop $'\n' \
        >"$WORK/ref.nl.txt" 2>"$WORK/ref.nl.err"
    if grep -q 'stop: stop string' "$WORK/ref.nl.err"; then
        NL_SEED=$seed
        break
    fi
done
[ -n "$NL_SEED" ] || fail "colibri run never stopped at a newline with seeds 0..40"
"$COLIBRI" run -m "$Q" -p Hello -n 12 --seed 5 >"$WORK/ref.sampled.txt" 2>"$WORK/ref.sampled.err"
SAMPLED_FINISH=length
grep -q 'stop: end of sequence' "$WORK/ref.sampled.err" && SAMPLED_FINISH=stop

say "build (plain: -O2; asan: -O1 -fsanitize=address,undefined)"
build_examples "$WORK/plain" -O2 -g
# generate.c once more against the static archive (+ the system libraries rustc names).
# shellcheck disable=SC2086
cc "${STRICT[@]}" -O2 -I"$ROOT/include" c_examples/generate.c "$WORK/lib/libcolibri.a" $NATIVE_LIBS \
    -o "$WORK/plain/generate_static" || fail "cannot link generate.c statically"
readelf -d "$WORK/plain/generate_static" | grep -q 'libcolibri' && fail "generate_static depends on libcolibri.so"
build_examples "$WORK/asan" -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
ok "${#EXAMPLES[@]} examples (+ static generate) compile warning-free, twice"

# ----------------------------------------------------------------------------------------------
# One suite, run plainly, under sanitizers and under valgrind. RUN is the command prefix.
MODE=
BIN=
RUN=()

run_prog() { # NAME ARGS... : run a program of the suite, stdout to $WORK/out, stderr to $WORK/err
    local name=$1
    shift
    local rc=0
    timeout 900 "${RUN[@]}" "$BIN/$name" "$@" >"$WORK/out" 2>"$WORK/err" || rc=$?
    if [ $rc -ne 0 ]; then
        cat "$WORK/err" >&2
        fail "[$MODE] $name $* exited with $rc"
    fi
    if [ "$MODE" = asan ] && grep -qE 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$WORK/err"; then
        cat "$WORK/err" >&2
        fail "[$MODE] $name $*: sanitizer report"
    fi
}

same_file() { # GOT WANT WHAT
    cmp -s "$1" "$2" || {
        echo "--- got:" >&2
        od -c "$1" | head -n 10 >&2
        echo "--- want:" >&2
        od -c "$2" | head -n 10 >&2
        fail "[$MODE] $3"
    }
}

# --- the HTTP cases: run twice, first only counting connections (the server exits after that many).
H_PHASE=count
H_COUNT=0
PORT=
http() { # NAME WANT_STATUS JCHECK_SPEC|- -- CURL_ARGS...
    H_COUNT=$((H_COUNT + 1))
    [ "$H_PHASE" = run ] || return 0
    local name=$1 want=$2 spec=$3 code
    shift 4
    code=$(curl -s -m 300 -o "$WORK/h.body" -D "$WORK/h.head" -w '%{http_code}' "$@" || true)
    [ "$code" = "$want" ] || fail "[$MODE] http $name: status $code, want $want: $(head -c 300 "$WORK/h.body" 2>/dev/null)"
    if [ "$spec" != - ]; then
        # shellcheck disable=SC2086
        jcheck "$WORK/h.body" $spec || fail "[$MODE] http $name: body check failed"
    fi
}
raw() { # NAME WANT_STATUS|none BYTES(printf %b) : a bare TCP connection
    H_COUNT=$((H_COUNT + 1))
    [ "$H_PHASE" = run ] || return 0
    local name=$1 want=$2 line
    line=$(timeout 300 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$0" || exit 1
        printf "%b" "$1" >&3 || exit 0
        [ "$2" = none ] && exit 0
        head -c 200 <&3 | head -n 1' "$PORT" "$3" "$want" | tr -d '\r') || true
    if [ "$want" = none ]; then return 0; fi
    case $line in "HTTP/1.1 $want "*) ;; *) fail "[$MODE] raw $name: got '$line', want status $want" ;; esac
}

http_cases() {
    local url="http://127.0.0.1:$PORT/generate" j=(-H 'Content-Type: application/json')
    # Good requests.
    http greedy 200 "text=@$WORK/ref.Q.0.txt tokens=${HELLO_IDS// /,} prompt_tokens=$HELLO_NPROMPT completion_tokens=16 finish_reason=length" -- \
        "${j[@]}" "$url" -d '{"prompt": "Hello", "max_tokens": 16, "temperature": 0, "ignore_eos": true}'
    http sampled-defaults 200 "text=@$WORK/ref.sampled.txt finish_reason=$SAMPLED_FINISH" -- \
        "${j[@]}" "$url" -d '{"prompt": "Hello", "max_tokens": 12, "seed": 5}'
    http eos 200 "text=@$WORK/ref.eos.txt finish_reason=stop completion_tokens=$((EOS_TOKENS - 1))" -- "${j[@]}" "$url" \
        -d "{\"prompt\": \"Hello\", \"max_tokens\": 50, \"temperature\": 2, \"top_k\": 0, \"top_p\": 1, \"min_p\": 0, \"seed\": $EOS_SEED}"
    # The server runs with a 64-token context: 64 - 4 prompt tokens + 1 (the last is not fed back).
    http context 200 "finish_reason=context completion_tokens=$((64 - HELLO_NPROMPT + 1))" -- "${j[@]}" "$url" \
        -d '{"prompt": "Hello", "max_tokens": 100000000000000000000000, "temperature": 0, "ignore_eos": true}'
    http zero-tokens 200 "tokens= completion_tokens=0 finish_reason=length text=" -- "${j[@]}" "$url" \
        -d '{"prompt": "Hello", "max_tokens": 0}'
    http unknown-fields 200 "completion_tokens=2" -- "${j[@]}" "$url" \
        -d '{"x": "s\"\\\/\b\f\n\r\t\u00e9", "y": -2.5e3, "z": true, "w": false, "v": null, "prompt": "Hello", "max_tokens": 2, "stream": true}'
    http seed-max 200 "completion_tokens=1" -- "${j[@]}" "$url" -d '{"prompt": "Hello", "max_tokens": 1, "seed": 18446744073709551615}'
    http null-is-default 200 "completion_tokens=1" -- "${j[@]}" "$url" -d '{"prompt": "Hello", "max_tokens": 1, "temperature": null, "stop": null}'
    # A stop string ends the generation (finish_reason "stop") and is not in the text.
    http stop-string 200 "text=@$WORK/http.cut.txt finish_reason=stop lacks=@$WORK/http.stop" -- "${j[@]}" "$url" \
        --data-binary "@$WORK/http-stop.json"
    http unicode-prompt 200 "completion_tokens=3" -- "${j[@]}" "$url" \
        --data-binary '{"prompt": "caf\u00e9 \ud83d\ude00 \"q\" \u0000 — ü", "max_tokens": 3, "temperature": 0}'
    http query-string 200 "completion_tokens=1" -- "${j[@]}" "$url?verbose=1" -d '{"prompt": "Hello", "max_tokens": 1}'
    http duplicate-key-last-counts 200 "completion_tokens=1" -- "${j[@]}" "$url" -d '{"max_tokens": 5, "prompt": "Hello", "max_tokens": 1}'
    http duplicate-unknown 200 "completion_tokens=1" -- "${j[@]}" "$url" -d '{"n": 1, "n": 2, "prompt": "Hello", "max_tokens": 1}'
    # Routing and methods.
    http not-found 404 "error=null" -- "${j[@]}" "http://127.0.0.1:$PORT/nope" -d '{"prompt": "x"}'
    http root 404 "error=null" -- "http://127.0.0.1:$PORT/"
    http sub-path 404 "error=null" -- "${j[@]}" "$url/x" -d '{"prompt": "x"}'
    http get 405 "error=null" -- "$url"
    http put 405 "error=null" -- -X PUT "${j[@]}" "$url" -d '{"prompt": "x"}'
    http delete 405 "error=null" -- -X DELETE "$url"
    http head 405 - -- -I "$url"
    grep -qi '^Allow: POST' "$WORK/h.head" 2>/dev/null || [ "$H_PHASE" = count ] || fail "[$MODE] 405 without Allow: POST"
    # Web pages: a text/plain body (what a no-cors fetch sends) and a foreign Origin are refused.
    http text-plain 415 "error=null" -- "$url" -H 'Content-Type: text/plain' -d '{"prompt": "Hello", "max_tokens": 1}'
    http no-content-type 415 "error=null" -- "$url" -H 'Content-Type:' -d '{"prompt": "Hello", "max_tokens": 1}'
    http foreign-origin 403 "error=null" -- "${j[@]}" -H 'Origin: http://evil.example' "$url" -d '{"prompt": "Hello", "max_tokens": 1}'
    # Bodies that are not a JSON object, or not JSON.
    http not-json 400 "error=null" -- "${j[@]}" "$url" -d 'prompt=Hello'
    http empty-body 400 "error=null" -- "${j[@]}" "$url" -H 'Content-Length: 0' -X POST
    http array 400 "error=null" -- "${j[@]}" "$url" -d '[{"prompt": "x"}]'
    http string 400 "error=null" -- "${j[@]}" "$url" -d '"Hello"'
    http truncated 400 "error=null" -- "${j[@]}" "$url" -d '{"prompt": "Hello", "max_tokens": 1'
    http trailing-comma 400 "error=null" -- "${j[@]}" "$url" -d '{"prompt": "Hello",}'
    http trailing-garbage 400 "error=null" -- "${j[@]}" "$url" -d '{"prompt": "Hello"} {}'
    http bare-key 400 "error=null" -- "${j[@]}" "$url" -d '{prompt: "Hello"}'
    http single-quotes 400 "error=null" -- "${j[@]}" "$url" -d "{'prompt': 'Hello'}"
    http bad-escape 400 "error=null" -- "${j[@]}" "$url" -d '{"prompt": "a\qb"}'
    http lone-surrogate 400 "error=null" -- "${j[@]}" "$url" -d '{"prompt": "a\ud800b"}'
    http bad-number 400 "error=null" -- "${j[@]}" "$url" -d '{"prompt": "x", "max_tokens": 1-2}'
    http lone-minus 400 "error=null" -- "${j[@]}" "$url" -d '{"prompt": "x", "max_tokens": -}'
    http nan 400 "error=null" -- "${j[@]}" "$url" -d '{"prompt": "x", "temperature": NaN}'
    http invalid-utf8 400 "error=prompt" -- "${j[@]}" "$url" --data-binary "@$WORK/invalid-utf8.json"
    http stop-invalid-utf8 400 "error=null" -- "${j[@]}" "$url" --data-binary "@$WORK/stop-invalid-utf8.json"
    http control-char 400 "error=null" -- "${j[@]}" "$url" --data-binary "@$WORK/control-char.json"
    http nul-byte 400 "error=null" -- "${j[@]}" "$url" --data-binary "@$WORK/nul-byte.json"
    # A flat object only: nested values are refused, however deep.
    http deep-nesting 400 "error=null" -- "${j[@]}" "$url" --data-binary "@$WORK/deep.json"
    http nested 400 "error=null" -- "${j[@]}" "$url" --data-binary "@$WORK/nested.json"
    # Fields of the wrong type or out of range.
    http missing-prompt 400 "error=prompt" -- "${j[@]}" "$url" -d '{"max_tokens": 3}'
    http prompt-number 400 "error=prompt" -- "${j[@]}" "$url" -d '{"prompt": 5}'
    http prompt-null 400 "error=prompt" -- "${j[@]}" "$url" -d '{"prompt": null}'
    http prompt-array 400 "error=null" -- "${j[@]}" "$url" -d '{"prompt": ["Hello"]}'
    http prompt-empty 400 "error=prompt" -- "${j[@]}" "$url" -d '{"prompt": ""}'
    http prompt-too-long 400 "error=prompt" -- "${j[@]}" "$url" --data-binary "@$WORK/long-prompt.json"
    http max-tokens-negative 400 "error=max_tokens" -- "${j[@]}" "$url" -d '{"prompt": "x", "max_tokens": -1}'
    http max-tokens-fraction 400 "error=max_tokens" -- "${j[@]}" "$url" -d '{"prompt": "x", "max_tokens": 1.5}'
    http max-tokens-tiny 400 "error=max_tokens" -- "${j[@]}" "$url" -d '{"prompt": "x", "max_tokens": 1e-400}'
    http max-tokens-float 400 "error=max_tokens" -- "${j[@]}" "$url" -d '{"prompt": "x", "max_tokens": 2.0}'
    http max-tokens-exponent 400 "error=max_tokens" -- "${j[@]}" "$url" -d '{"prompt": "x", "max_tokens": 1e2}'
    http max-tokens-string 400 "error=max_tokens" -- "${j[@]}" "$url" -d '{"prompt": "x", "max_tokens": "5"}'
    http temperature-negative 400 "error=temperature" -- "${j[@]}" "$url" -d '{"prompt": "x", "temperature": -0.5}'
    http temperature-string 400 "error=temperature" -- "${j[@]}" "$url" -d '{"prompt": "x", "temperature": "hot"}'
    http temperature-huge 400 "error=temperature" -- "${j[@]}" "$url" -d '{"prompt": "x", "temperature": 1e999}'
    http top-k-negative 400 "error=top_k" -- "${j[@]}" "$url" -d '{"prompt": "x", "top_k": -3}'
    http top-k-bool 400 "error=top_k" -- "${j[@]}" "$url" -d '{"prompt": "x", "top_k": true}'
    http top-p-zero 400 "error=top_p" -- "${j[@]}" "$url" -d '{"prompt": "x", "top_p": 0}'
    http top-p-above-one 400 "error=top_p" -- "${j[@]}" "$url" -d '{"prompt": "x", "top_p": 1.00000001}'
    http top-p-tiny-ok 200 "completion_tokens=1" -- "${j[@]}" "$url" -d '{"prompt": "Hello", "top_p": 1e-30, "max_tokens": 1}'
    http min-p-above-one 400 "error=min_p" -- "${j[@]}" "$url" -d '{"prompt": "x", "min_p": 1.5}'
    http min-p-negative 400 "error=min_p" -- "${j[@]}" "$url" -d '{"prompt": "x", "min_p": -0.1}'
    http repetition-penalty-zero 400 "error=repetition_penalty" -- "${j[@]}" "$url" -d '{"prompt": "x", "repetition_penalty": 0}'
    http seed-negative 400 "error=seed" -- "${j[@]}" "$url" -d '{"prompt": "x", "seed": -1}'
    http seed-too-big 400 "error=seed" -- "${j[@]}" "$url" -d '{"prompt": "x", "seed": 18446744073709551616}'
    http seed-fraction 400 "error=seed" -- "${j[@]}" "$url" -d '{"prompt": "x", "seed": 0.5}'
    http ignore-eos-number 400 "error=ignore_eos" -- "${j[@]}" "$url" -d '{"prompt": "x", "ignore_eos": 1}'
    http ignore-eos-string 400 "error=ignore_eos" -- "${j[@]}" "$url" -d '{"prompt": "x", "ignore_eos": "true"}'
    http stop-number 400 "error=stop" -- "${j[@]}" "$url" -d '{"prompt": "x", "stop": 5}'
    # Framing and size.
    http huge-body 413 "error=null" -- "${j[@]}" "$url" --data-binary "@$WORK/huge.json"
    http chunked 400 "error=null" -- "${j[@]}" -H 'Transfer-Encoding: chunked' "$url" -d '{"prompt": "Hello"}'
    raw huge-length 413 'POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999999999\r\n\r\n{}'
    raw length-not-a-number 400 'POST /generate HTTP/1.1\r\nContent-Length: twelve\r\n\r\n{}'
    raw length-negative 400 'POST /generate HTTP/1.1\r\nContent-Length: -5\r\n\r\n{}'
    raw length-conflict 400 'POST /generate HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}'
    raw no-length 400 'POST /generate HTTP/1.1\r\nHost: x\r\n\r\n'
    raw header-too-large 431 "GET /generate HTTP/1.1\r\nX-Big: $(head -c 20000 /dev/zero | tr '\0' a)\r\n\r\n"
    # Header lines the server does not read are ignored; these requests then lack a Content-Length.
    raw header-no-colon 400 'POST /generate HTTP/1.1\r\nthis is not a header\r\n\r\n'
    raw header-folding 400 'POST /generate HTTP/1.1\r\nX-A: 1\r\n  folded\r\n\r\n'
    raw bad-version 400 'POST /generate HTTP/9.9\r\n\r\n'
    raw no-version 400 'GET /generate\r\n\r\n'
    raw garbage 400 'GARBAGE\r\n\r\n'
    raw binary 400 '\x00\x01\x02\xff\xfe\xfd\x80\r\n\r\n'
    raw binary-no-end 400 '\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n'
    raw bare-lf 200 'POST /generate HTTP/1.0\nContent-Type: application/json\nContent-Length: 36\n\n{"prompt": "Hello", "max_tokens": 1}'
    raw connect-and-close none ''
    raw half-request none 'POST /generate HTTP/1.1\r\nContent-Length: 100\r\n\r\n{"prompt": '
    # Still alive and still right.
    http greedy-again 200 "text=@$WORK/ref.Q.0.txt tokens=${HELLO_IDS// /,} finish_reason=length" -- \
        "${j[@]}" "$url" -d '{"prompt": "Hello", "max_tokens": 16, "temperature": 0, "ignore_eos": true}'
}

http_test_files() {
    printf '{"prompt": "a\xffb"}' >"$WORK/invalid-utf8.json"
    printf '{"prompt": "Hello", "stop": "a\xffb"}' >"$WORK/stop-invalid-utf8.json"
    printf '{"prompt": "a\tb"}' >"$WORK/control-char.json"
    printf '{"prompt": "a\x00b"}' >"$WORK/nul-byte.json"
    python3 -c 'import sys; sys.stdout.write("{\"prompt\": \"x\", \"a\": " + "[" * 20000 + "]" * 20000 + "}")' >"$WORK/deep.json"
    python3 -c 'import sys; sys.stdout.write("{\"a\": " + "[{\"b\": " * 30 + "1" + "}]" * 30 + ", \"prompt\": \"Hello\", \"max_tokens\": 1}")' >"$WORK/nested.json"
    python3 -c 'import sys; sys.stdout.write("{\"prompt\": \"" + "word " * 300 + "\"}")' >"$WORK/long-prompt.json"
    python3 -c 'import sys; sys.stdout.write("{\"prompt\": \"" + "a" * (2 << 20) + "\"}")' >"$WORK/huge.json"
}

suite() { # MODE
    MODE=$1
    local t0=$SECONDS n i model prompt
    case $MODE in
    plain) BIN=$WORK/plain RUN=() ;;
    asan)
        BIN=$WORK/asan RUN=(env ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:exitcode=86
            UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1)
        ;;
    valgrind)
        # COLIBRI_CPU=generic: once the library picks SIMD kernels at run time, valgrind 3.19
        # (no AVX-512) must get the portable path.
        BIN=$WORK/plain RUN=(env COLIBRI_CPU=generic valgrind --error-exitcode=99 --leak-check=full
            --errors-for-leak-kinds=definite,indirect --show-leak-kinds=definite,indirect
            "--log-file=$WORK/valgrind.%p.log")
        rm -f "$WORK"/valgrind.*.log
        ;;
    esac
    say "suite: $MODE"

    run_prog version
    grep -q "^colibri $VERSION (ABI $ABI)$" "$WORK/out" || fail "[$MODE] version: $(cat "$WORK/out")"
    ok "version"

    # generate.c == colibri run --temp 0 --ignore-eos (text), ids == static build == logits argmax.
    for model in Q M; do
        i=0
        for prompt in "${PROMPTS[@]}"; do
            run_prog generate "${!model}" "$prompt" 16
            tail -n +3 "$WORK/out" >"$WORK/gen.text"
            same_file "$WORK/gen.text" "$WORK/ref.$model.$i.txt" "generate $model '$prompt': text differs from colibri run"
            [ "$(sed -n 2p "$WORK/out" | wc -w)" = 17 ] || fail "[$MODE] generate: not 16 ids"
            if [ "$MODE" = plain ]; then
                "$WORK/plain/generate_static" "${!model}" "$prompt" 16 >"$WORK/out.static"
                same_file "$WORK/out.static" "$WORK/out" "generate $model '$prompt': static build differs"
                python3 "$WORK/argmax.py" "$COLIBRI" "${!model}" "$WORK/out" "$WORK/logits.npy" ||
                    fail "[$MODE] generate $model '$prompt': ids are not the logits' argmax"
            fi
            if [ "$model" = Q ] && [ $i = 0 ]; then
                HELLO_IDS=$(sed -n 's/^ids: //p' "$WORK/out")
                HELLO_NPROMPT=$(sed -n 1p "$WORK/out" | wc -w)
                HELLO_NPROMPT=$((HELLO_NPROMPT - 1))
            fi
            i=$((i + 1))
        done
    done
    ok "generate: text == colibri run (2 models x 2 prompts)$([ "$MODE" = plain ] && echo '; ids == static build == logits argmax')"

    # stream.c: the library ends generation after K tokens (greedy), at the default stop string
    # (a newline; sampled) and at a given one, and says why; a stop string is never printed.
    for model in Q M; do
        run_prog stream "${!model}" "Hello world" 8
        grep -q '^stream: finish_reason length after 8 tokens$' "$WORK/err" || fail "[$MODE] stream: $(cat "$WORK/err")"
        "$COLIBRI" run -m "${!model}" -p "Hello world" -n 8 --temp 0 --stop $'\n' >"$WORK/ref.stream" 2>/dev/null
        same_file "$WORK/out" "$WORK/ref.stream" "stream $model (8 tokens) differs from colibri run -n 8"
    done
    run_prog stream "$Q" "Hello world" 200 1.5 "$NL_SEED"
    grep -q '^stream: finish_reason stop after [0-9]* tokens$' "$WORK/err" ||
        fail "[$MODE] stream: no stop at the newline: $(cat "$WORK/err")"
    [ "$(wc -l <"$WORK/out")" = 1 ] || fail "[$MODE] stream: the newline stop string was printed"
    same_file "$WORK/out" "$WORK/ref.nl.txt" "stream (newline stop) differs from colibri run --stop"
    run_prog stream "$Q" "Hello world" 8 0 0 "$STREAM_STOP"
    grep -q '^stream: finish_reason stop after [0-9]* tokens$' "$WORK/err" ||
        fail "[$MODE] stream: no stop at '$STREAM_STOP': $(cat "$WORK/err")"
    same_file "$WORK/out" "$WORK/stream.cut.txt" "stream: stop string '$STREAM_STOP': not the text before it"
    ok "stream: finish_reason length after K tokens; stop at a newline and at '$STREAM_STOP', not printed; == colibri run"

    # threads.c: both concurrent sessions equal the single-thread references.
    run_prog threads "$Q" 16 3
    grep -q '^thread 0: 3 rounds equal to the reference (16 tokens each)$' "$WORK/out" &&
        grep -q '^thread 1: 3 rounds equal to the reference (16 tokens each)$' "$WORK/out" ||
        fail "[$MODE] threads: $(cat "$WORK/out")"
    [ "$(sed -n 's/^reference\[0\] ids: //p' "$WORK/out")" = "$HELLO_IDS" ] || fail "[$MODE] threads: reference differs from generate"
    run_prog threads "$M" 8 2
    ok "threads: 2 threads x 3 rounds == single thread (== generate)"

    # state.c: a session saved to a file and loaded into a fresh one continues with the same
    # logits; a damaged file is refused and changes nothing; a session copied in memory
    # continues with the same logits.
    for model in Q M; do
        run_prog state "${!model}" "$WORK/$model.state"
        grep -q '^state: restored session continues identically ([0-9]* tokens)$' "$WORK/out" &&
            grep -q '^state: a copied session continues identically ([0-9]* tokens)$' "$WORK/out" ||
            fail "[$MODE] state $model: $(cat "$WORK/out" "$WORK/err")"
    done
    ok "state: save, load into a fresh session, identical continuation; a damaged file refused, nothing changed; an in-memory copy continues identically, a too small or NULL one refused"

    # fork.c: a forward pass, fork(), then one in the child (which must finish) and the parent.
    # The child inherits the memory of the parent's worker threads but not the threads (about
    # 2.4 KB each, which nothing in it can free): leak checkers are told exactly that allocation
    # site (the workers' start in colibri::threads), for this program only.
    local run=("${RUN[@]}")
    case $MODE in
    asan) RUN=("${run[@]/%exitcode=86/exitcode=86:fast_unwind_on_malloc=0}" "LSAN_OPTIONS=suppressions=$WORK/fork.lsan") ;;
    valgrind) RUN=("${run[@]}" --num-callers=50 "--suppressions=$WORK/fork.supp") ;;
    esac
    for spec in "Q 2" "M"; do
        set -- $spec
        run_prog fork "${!1}" ${2:-}
        grep -q '^fork: parent and child reproduced the logits after fork()$' "$WORK/out" || fail "[$MODE] fork $1: $(cat "$WORK/out")"
    done
    RUN=("${run[@]}")
    ok "fork: after a forward pass, the child (own worker threads) and the parent reproduce the logits"

    # batch.c: three prompts decoded together with colibri_infer_batch == each alone through
    # colibri_generate (checked by the program) == generate.c's ids.
    for model in Q M; do
        run_prog batch "${!model}" 16 "${PROMPTS[@]}" "And the LORD said unto Moses"
        grep -q '^batch: 3 sequences x 16 tokens equal to colibri_generate$' "$WORK/out" ||
            fail "[$MODE] batch $model: $(cat "$WORK/out" "$WORK/err")"
        [ "$(grep -c '^\[[0-2]\] ids:\( [0-9]*\)\{16\}$' "$WORK/out")" = 3 ] || fail "[$MODE] batch $model: not 3 x 16 ids"
        if [ "$model" = Q ]; then
            [ "$(sed -n 's/^\[0\] ids: //p' "$WORK/out")" = "$HELLO_IDS" ] || fail "[$MODE] batch: 'Hello' ids differ from generate"
        fi
    done
    ok "batch: 3 sequences (prompts of different lengths) decoded together == colibri_generate alone (2 models)"

    # embed.c: colibri_embed of each fixture's oracle prompt == transformers' final-normed hidden
    # states (oracle/hidden_f32.npy) pooled the same way, within 1e-4 of max|v|; a text too.
    for spec in "Q qwen2_moe_shared" "M mixtral_gqa"; do
        set -- $spec
        local fx=tests/fixtures/models/$2 ids
        ids=$(python3 -c 'import json, sys; print(",".join(map(str, json.load(open(sys.argv[1]))["input_ids"])))' "$fx/oracle/meta.json")
        for pooling in mean last cls; do
            run_prog embed "${!1}" "$pooling" "ids:$ids" "Hello world"
            python3 scripts/check_embedding.py "$fx/oracle/hidden_f32.npy" "$pooling" "$WORK/out" ||
                fail "[$MODE] embed $2 $pooling: $(cat "$WORK/out")"
        done
    done
    ok "embed: colibri_embed == transformers' hidden states pooled mean/last/cls (2 models), unit norms"

    # routing_trace.c == colibri run --debug-routing, top-k and Gumbel.
    for spec in "Q 7 2" "M 3 1"; do
        set -- $spec
        run_prog routing_trace "${!1}" "Hello world" 6 "$2" "$3"
        grep -q '^== gumbel rerun with seed' "$WORK/out" || fail "[$MODE] routing_trace: no rerun line"
        grep -q '^== colibri_generate: the same 6 tokens' "$WORK/out" || fail "[$MODE] routing_trace: no colibri_generate line"
        sed -n '/^== topk/,/^== gumbel seed/p' "$WORK/out" | grep '^token\[' >"$WORK/trace.topk"
        sed -n '/^== gumbel seed/,/^== gumbel rerun/p' "$WORK/out" | grep '^token\[' >"$WORK/trace.gumbel"
        [ -s "$WORK/trace.topk" ] && [ -s "$WORK/trace.gumbel" ] || fail "[$MODE] routing_trace: empty trace"
        cli_trace "${!1}" "Hello world" 6 "$WORK/ref.trace.topk"
        cli_trace "${!1}" "Hello world" 6 "$WORK/ref.trace.gumbel" --routing gumbel --seed "$2" --moe-top-k "$3"
        same_file "$WORK/trace.topk" "$WORK/ref.trace.topk" "routing_trace $1: top-k trace differs from --debug-routing"
        same_file "$WORK/trace.gumbel" "$WORK/ref.trace.gumbel" "routing_trace $1: Gumbel trace differs from --debug-routing"
    done
    ok "routing_trace: top-k and Gumbel (seed, moe_top_k) traces == colibri run --debug-routing; generate's == infer's"

    run_prog moe_layer
    grep -q 'all match the scalar reference' "$WORK/out" || fail "[$MODE] moe_layer: $(cat "$WORK/out")"
    ok "moe_layer: $(sed 's/^moe_layer: //' "$WORK/out")"

    # http_server.c: start it for exactly the number of connections the cases make.
    H_PHASE=count H_COUNT=0 PORT=0
    http_cases
    local n_cases=$H_COUNT
    timeout 1800 "${RUN[@]}" "$BIN/http_server" "$Q" 0 "$n_cases" 64 >"$WORK/srv.out" 2>"$WORK/srv.err" &
    SERVER_PID=$!
    for _ in $(seq 1 600); do
        PORT=$(sed -n 's/^listening on \([0-9]*\)$/\1/p' "$WORK/srv.out")
        [ -n "$PORT" ] && break
        kill -0 "$SERVER_PID" 2>/dev/null || break
        sleep 0.1
    done
    [ -n "$PORT" ] || fail "[$MODE] http_server did not start: $(cat "$WORK/srv.err")"
    H_PHASE=run H_COUNT=0
    http_cases
    local rc=0
    wait "$SERVER_PID" || rc=$?
    SERVER_PID=
    [ $rc -eq 0 ] || { cat "$WORK/srv.err" >&2; fail "[$MODE] http_server exited with $rc after $n_cases connections"; }
    if [ "$MODE" = asan ] && grep -qE 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$WORK/srv.err"; then
        cat "$WORK/srv.err" >&2
        fail "[$MODE] http_server: sanitizer report"
    fi
    ok "http_server: $n_cases connections (good, stop string, hostile, malformed, oversized) answered as documented; clean exit"

    if [ "$MODE" = valgrind ]; then
        local logs=("$WORK"/valgrind.*.log)
        echo "   valgrind: ${#logs[@]} processes; summary lines:"
        grep -h 'ERROR SUMMARY' "${logs[@]}" | sed 's/^==[0-9]*== /     /' | sort | uniq -c
        grep -h -E 'definitely lost:|indirectly lost:|All heap blocks were freed' "${logs[@]}" | sed 's/^==[0-9]*== /     /' | sort | uniq -c
        # Belt and braces next to --error-exitcode: every process summarised, none with errors.
        [ "$(grep -l 'ERROR SUMMARY: 0 errors' "${logs[@]}" | wc -l)" = ${#logs[@]} ] ||
            fail "[$MODE] a process has valgrind errors (see $WORK/valgrind.*.log)"
    fi
    ok "$MODE suite: $((SECONDS - t0)) s"
}

# ----------------------------------------------------------------------------------------------
install_checks() {
    local t0=$SECONDS
    say "install: cmake build + install, pkg-config and CMake consumers"
    local build=$WORK/cmake-build prefix=$WORK/prefix moved=$WORK/elsewhere/colibri
    cmake -S "$ROOT" -B "$build" >"$WORK/cmake.log" 2>&1 || { cat "$WORK/cmake.log" >&2; fail "cmake configure"; }
    cmake --build "$build" >>"$WORK/cmake.log" 2>&1 || { cat "$WORK/cmake.log" >&2; fail "cmake --build"; }
    cmake --install "$build" --prefix "$prefix" >>"$WORK/cmake.log" 2>&1 || { cat "$WORK/cmake.log" >&2; fail "cmake --install"; }
    for f in include/colibri.h "lib/$SO" lib/libcolibri.a lib/pkgconfig/colibri.pc \
        lib/pkgconfig/colibri-static.pc lib/cmake/colibri/colibriConfig.cmake lib/cmake/colibri/colibriConfigVersion.cmake; do
        [ -f "$prefix/$f" ] && [ ! -L "$prefix/$f" ] || fail "install: $f missing (or a symlink)"
    done
    [ "$(readlink "$prefix/lib/libcolibri.so")" = "$SO" ] || fail "install: lib/libcolibri.so is not a symlink to $SO"
    readelf -d "$prefix/lib/$SO" | grep SONAME | grep -qF "[$SO]" || fail "install: the SONAME is not $SO"
    cmp -s "$prefix/include/colibri.h" include/colibri.h || fail "install: header differs"
    # Relocatable: everything must work from where the tree is moved to.
    mkdir -p "$(dirname "$moved")"
    mv "$prefix" "$moved"
    ok "installed include/, lib/$SO + symlink, lib/libcolibri.a, pkgconfig, cmake; tree moved"

    export PKG_CONFIG_PATH=$moved/lib/pkgconfig
    pkg-config --exists colibri colibri-static || fail "pkg-config cannot find colibri"
    [ "$(pkg-config --modversion colibri)" = "$VERSION" ] || fail "pkg-config version"
    local want_private
    want_private=$(echo "$NATIVE_LIBS")
    [ "$(pkg-config --variable=libdir colibri)" -ef "$moved/lib" ] || fail "pkg-config libdir is not the moved lib/"
    pkg-config --static --libs colibri | grep -q -- "-lcolibri $want_private" || fail "Libs.private: $(pkg-config --static --libs colibri)"

    local ref_ids ref_text=$WORK/ref.Q.0.txt out=$WORK/inst
    mkdir -p "$out"
    "$WORK/plain/generate" "$Q" Hello 16 >"$WORK/ref.gen"
    check_generate() { # PROGRAM WHAT
        "$1" "$Q" Hello 16 >"$WORK/inst.out" || fail "install: $2 failed to run"
        same_file "$WORK/inst.out" "$WORK/ref.gen" "install: $2: ids/text differ from the in-tree build"
        tail -n +3 "$WORK/inst.out" | cmp -s - "$ref_text" || fail "install: $2: text differs from colibri run"
    }
    MODE=install

    # No rpath of its own: colibri.pc's Libs give one (…/lib/pkgconfig/../../lib), so it runs
    # without LD_LIBRARY_PATH.
    # shellcheck disable=SC2046
    cc "${STRICT[@]}" c_examples/generate.c $(pkg-config --cflags --libs colibri) -o "$out/gen_shared"
    readelf -d "$out/gen_shared" | grep 'NEEDED' | grep -qF "[$SO]" || fail "install: shared build does not need $SO"
    readelf -d "$out/gen_shared" | grep -E 'RUNPATH|RPATH' | grep -qF "$moved/lib" ||
        fail "install: colibri.pc gives no rpath to the installed lib/"
    check_generate "$out/gen_shared" "pkg-config shared"
    # shellcheck disable=SC2046
    cc "${STRICT[@]}" c_examples/generate.c $(pkg-config --cflags --libs colibri-static) -o "$out/gen_static"
    ! readelf -d "$out/gen_static" | grep -q libcolibri || fail "install: colibri-static build needs libcolibri.so"
    check_generate "$out/gen_static" "pkg-config static (colibri-static.pc)"
    # A static-only prefix (a firmware sysroot): plain `pkg-config --static` picks the archive.
    cp -a "$moved" "$WORK/static-only"
    rm "$WORK/static-only/lib/libcolibri.so" "$WORK/static-only/lib/$SO"
    # shellcheck disable=SC2046
    cc "${STRICT[@]}" c_examples/generate.c $(PKG_CONFIG_PATH=$WORK/static-only/lib/pkgconfig pkg-config --cflags --static --libs colibri) \
        -o "$out/gen_static_only"
    check_generate "$out/gen_static_only" "pkg-config --static (static-only prefix)"
    ok "pkg-config: shared, static (colibri-static.pc), --static on a static-only prefix: greedy == colibri run"

    make -s -C c_examples O="$out/make" >"$WORK/make.log" 2>&1 || { cat "$WORK/make.log" >&2; fail "make -C c_examples"; }
    check_generate "$out/make/generate" "c_examples/Makefile"
    make -s -C c_examples O="$out/make-static" STATIC=1 >"$WORK/make.log" 2>&1 || { cat "$WORK/make.log" >&2; fail "make STATIC=1"; }
    check_generate "$out/make-static/generate" "c_examples/Makefile STATIC=1"
    "$out/make/moe_layer" >/dev/null || fail "install: make-built moe_layer"
    ok "c_examples/Makefile (pkg-config): shared and STATIC=1"
    unset PKG_CONFIG_PATH

    cmake -S c_examples -B "$WORK/consumer" -DCMAKE_PREFIX_PATH="$moved" >"$WORK/consumer.log" 2>&1 &&
        cmake --build "$WORK/consumer" >>"$WORK/consumer.log" 2>&1 || { cat "$WORK/consumer.log" >&2; fail "find_package consumer"; }
    check_generate "$WORK/consumer/generate" "find_package(colibri) colibri::colibri"
    check_generate "$WORK/consumer/generate_static" "find_package(colibri) colibri::colibri_static"
    ! readelf -d "$WORK/consumer/generate_static" | grep -q libcolibri || fail "colibri::colibri_static needs libcolibri.so"
    ok "CMake find_package(colibri): colibri::colibri and colibri::colibri_static"

    cmake -S c_examples -B "$WORK/consumer-sub" -DCOLIBRI_SOURCE_DIR="$ROOT" >"$WORK/consumer.log" 2>&1 &&
        cmake --build "$WORK/consumer-sub" >>"$WORK/consumer.log" 2>&1 || { cat "$WORK/consumer.log" >&2; fail "add_subdirectory consumer"; }
    check_generate "$WORK/consumer-sub/generate" "add_subdirectory(colibri) colibri::colibri"
    check_generate "$WORK/consumer-sub/generate_static" "add_subdirectory(colibri) colibri::colibri_static"
    ok "CMake add_subdirectory(colibri): colibri::colibri and colibri::colibri_static"

    scripts/licenses.sh --check >"$WORK/licenses.log" 2>&1 || { cat "$WORK/licenses.log" >&2; fail "docs/THIRD-PARTY-LICENSES.md is stale: run scripts/licenses.sh"; }
    ok "docs/THIRD-PARTY-LICENSES.md matches the dependency graph and libcolibri.a"
    ok "install checks: $((SECONDS - t0)) s"
}

http_test_files
printf 'leak:colibri::threads::Pool::build\n' >"$WORK/fork.lsan"
cat >"$WORK/fork.supp" <<'EOF'
{
   a forked child inherits the memory of the parent's worker threads, not the threads
   Memcheck:Leak
   match-leak-kinds: definite,indirect
   ...
   fun:*colibri::threads::*build*
}
EOF
HELLO_IDS=
HELLO_NPROMPT=
for phase in "${PHASES[@]}"; do
    case $phase in
    plain | asan | valgrind)
        if [ -z "$HELLO_IDS" ] && [ "$phase" != plain ]; then
            # The HTTP checks need generate's ids: take them from a plain run.
            "$WORK/plain/generate" "$Q" Hello 16 >"$WORK/out"
            HELLO_IDS=$(sed -n 's/^ids: //p' "$WORK/out")
            HELLO_NPROMPT=$(($(sed -n 1p "$WORK/out" | wc -w) - 1))
        fi
        suite "$phase"
        ;;
    install) install_checks ;;
    esac
done
say "all C checks passed (${PHASES[*]}) in $((SECONDS - START)) s"
