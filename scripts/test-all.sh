#!/usr/bin/env bash
# Runs every test of the project: formatting, lints, the Rust unit and integration tests
# (library + CLI). C, Python and Go suites join here as their bindings land.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== cargo clippy -D warnings"
cargo clippy --workspace --all-targets -- -D warnings

echo "== cargo test (release build, reused by every suite)"
cargo test --workspace --release
