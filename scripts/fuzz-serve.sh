#!/usr/bin/env bash
# A bounded schema-driven fuzz run of `colibri serve` against docs/openapi.yaml (schemathesis,
# pinned in .ci/run): a live server on the shipped default model gets valid and invalid requests
# for every operation; no 5xx, every answer documented and valid against the description, invalid
# input refused, and the server still alive, answering /health and exiting 0 on SIGTERM after.
# About a minute on 2 cores; it prints the requests sent, the statuses seen and the time.
#
#   scripts/fuzz-serve.sh
#   COLIBRI_BIN=/path/to/colibri FUZZ_EXAMPLES=100 FUZZ_SEED=7 scripts/fuzz-serve.sh
#
# COLIBRI_BIN: the binary (default target/release/colibri); FUZZ_EXAMPLES: cases per operation
# and phase (default 25); FUZZ_SEED: the generation seed (default 1); FUZZ_REPORT_DIR: where the
# HAR of every exchange goes (default a new temporary directory).
set -euo pipefail
cd "$(dirname "$0")/.."
export COLIBRI_BIN="${COLIBRI_BIN:-$PWD/target/release/colibri}"
if [ ! -x "$COLIBRI_BIN" ]; then
    echo "fuzz-serve: $COLIBRI_BIN is missing: cargo build --release, or set COLIBRI_BIN" >&2
    exit 2
fi
exec python3 scripts/openapi/fuzz_serve.py
