#!/usr/bin/env bash
# The Python binding's suites against the release build (scripts/test-all.sh builds it first):
#   1. the package of the source tree (python/colibri) with the library in target/release;
#   2. the wheel `pip install ./python` makes: python/setup.py runs cargo in the same target
#      directory (a no-op after the release build: nothing compiles twice) and puts the library
#      inside the package. The wheel must be platform-tagged (never py3-none-any) and carry
#      colibri/libcolibri.so.1; it is installed into a fresh virtual environment (pip fetches
#      setuptools, pytest, numpy, jsonschema and openai from PyPI) and the suite runs against it without
#      COLIBRI_LIB_PATH.
#
#   scripts/test-python.sh                  # both
#   COLIBRI_SKIP_WHEEL=1 scripts/test-python.sh   # the source tree only
#   CARGO_TARGET_DIR=/tmp/t scripts/test-python.sh # cargo's output (and the library) in /tmp/t
#
# Extra arguments go to both pytest runs (e.g. -k completion).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
target="${CARGO_TARGET_DIR:-target}"
case "$target" in /*) ;; *) target="$repo/$target" ;; esac
export CARGO_TARGET_DIR="$target"

echo "== Python binding: the source tree's package, library from $target/release"
(cd python && COLIBRI_LIB_PATH="$target/release" python3 -m pytest -q -p no:cacheprovider "$@")

[ "${COLIBRI_SKIP_WHEEL:-0}" = 1 ] && exit 0

tmp="$(mktemp -d "${TMPDIR:-/tmp}/colibri-wheel.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
echo "== Python wheel: a fresh virtual environment"
if ! python3 -m venv "$tmp/venv" 2>/dev/null; then
	# Debian's python3 without python3-venv: virtualenv from PyPI makes the same.
	python3 -m pip install -q virtualenv
	python3 -m virtualenv -q "$tmp/venv"
fi
py="$tmp/venv/bin/python"

echo "== Python wheel: pip wheel ./python (cargo build --release in $target)"
"$py" -m pip wheel -q --no-deps -w "$tmp/dist" ./python
whl="$(ls "$tmp"/dist/colibri-*.whl)"
echo "   $(basename "$whl") ($(du -h "$whl" | cut -f1))"
case "$(basename "$whl")" in
*-py3-none-any.whl)
	echo "the wheel is tagged for any platform but carries a native library" >&2
	exit 1
	;;
esac
# The listing goes to a file first: `grep -q` stops reading at its match, and the listing's
# broken pipe would then fail the pipeline (pipefail).
"$py" -m zipfile -l "$whl" >"$tmp/listing"
grep -q '^colibri/libcolibri\.so\.1 ' "$tmp/listing" || {
	echo "the wheel has no colibri/libcolibri.so.1" >&2
	exit 1
}

echo "== Python wheel: install it, run the suite against the installed package"
# (jsonschema and openai: the grammar and tools tests validate through them.)
"$py" -m pip install -q "$whl" pytest numpy jsonschema openai
# (test_serve_openai tests `colibri serve`, not the package: it ran in the first suite.)
(cd "$tmp" && env -u COLIBRI_LIB_PATH COLIBRI_TEST_INSTALLED=1 \
	"$py" -m pytest -q -p no:cacheprovider "$repo/python/tests" \
	--ignore="$repo/python/tests/test_serve_openai.py" "$@")
