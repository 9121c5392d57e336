#!/usr/bin/env bash
# Runs every test of the project: formatting, lints, the Rust unit and integration tests
# (library, CLI, C ABI), then the C examples (plain, ASan/UBSan, valgrind, CMake/pkg-config
# install), the Python binding, colibri serve against its OpenAPI description (conformance and a
# bounded schemathesis fuzz run) and the Go binding — all against one release build.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== cargo clippy -D warnings"
cargo clippy --workspace --all-targets -- -D warnings

echo "== code shape: no import cycles, no file over 600 lines, no function over 80 (scripts/check-shape.py)"
python3 scripts/check-shape.py

echo "== the fuzz crate still builds against the library (fuzz/, its own workspace; cargo check)"
CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/fuzz-check" cargo check --locked --manifest-path fuzz/Cargo.toml --bins

echo "== the library without its optional features (no tokenizer, chat template or grammar): clippy, and a linked build"
cargo clippy -p colibri --no-default-features --all-targets -- -D warnings
cargo build -p colibri --lib --no-default-features

echo "== cargo build --release (reused by every suite below)"
cargo build --release

echo "== cargo test (release)"
cargo test --workspace --release

# The oracle and engine tests again on every other kernel path this CPU can run (the default run
# above used the best one). The kernel unit tests already cover every path in one process. The
# oracle and batch tests are the library's (tests/); engine_cli and quantize_roundtrip the CLI's.
for path in generic avx2 avx512; do
    case $path in
        avx2) needs=avx2 ;;
        avx512) needs=avx512_vnni ;;
        *) needs= ;;
    esac
    if [ -n "$needs" ] && ! grep -qw "$needs" /proc/cpuinfo; then
        echo "== SKIPPED: the $path kernel path's oracle tests (this CPU lacks $needs; they ran only where it has it)"
        continue
    fi
    echo "== oracle tests with COLIBRI_CPU=$path"
    COLIBRI_CPU=$path cargo test --release -p colibri --test oracle --test batch --test block_dtypes --test recurrent --test kquant_r8 --test session_copy
    COLIBRI_CPU=$path cargo test --release -p colibri-cli --test engine_cli --test quantize_roundtrip
done
# The AMX path (COLIBRI_CPU=amx, the default where it runs; its bf16 prefill GEMM and its
# attention over bf16 KV caches on AMX-BF16 tiles). Both run on every CPU through the tile model
# (kernel unit tests above); the hardware tiles only here.
if grep -qw amx_bf16 /proc/cpuinfo; then
    echo "== amx: the hardware tile kernels (GEMM, attention) against the model, then the oracle tests with COLIBRI_CPU=amx"
    cargo test --release -p colibri --lib amx_hardware -- --ignored
    COLIBRI_CPU=amx cargo test --release -p colibri --test oracle --test batch --test block_dtypes --test recurrent --test kquant_r8 --test session_copy
    COLIBRI_CPU=amx cargo test --release -p colibri-cli --test engine_cli --test quantize_roundtrip
else
    echo "== SKIPPED: amx: hardware kernel not run (this CPU has no amx_bf16; the AMX GEMM ran on the tile model only, and COLIBRI_CPU=amx falls back to the best path)"
fi
echo "== the oracle and engine tests with every reused step buffer handed out as NaN (COLIBRI_POISON_BUFFERS=1: a value read before it is written reaches the logits)"
COLIBRI_POISON_BUFFERS=1 cargo test --release -p colibri --test oracle --test batch --test recurrent --test embeddings --test kquant_r8
COLIBRI_POISON_BUFFERS=1 cargo test --release -p colibri-cli --test engine_cli --test quantize_roundtrip
echo "== quantised-engine tests with float activations (W8A16/W4A16, COLIBRI_QUANT_ACT=float)"
COLIBRI_QUANT_ACT=float cargo test --release -p colibri-cli --test quantize_roundtrip

if [ -x scripts/test-c.sh ]; then
    echo "== C examples"
    scripts/test-c.sh
fi

echo "== Python binding (the source tree, then the wheel in a fresh virtual environment)"
scripts/test-python.sh

echo "== colibri serve against its OpenAPI description (docs/openapi.yaml, scripts/openapi)"
(cd scripts/openapi && python3 -m pytest -q -p no:cacheprovider) # $COLIBRI_BIN, else target/release

echo "== schema-driven fuzz of colibri serve (scripts/fuzz-serve.sh)"
scripts/fuzz-serve.sh

if [ -x scripts/test-go.sh ]; then
    echo "== Go binding"
    scripts/test-go.sh
fi
