#!/usr/bin/env bash
# Tests the Go binding (go/colibri) against the build tree: builds libcolibri, writes temporary
# colibri.pc / colibri-static.pc files pointing at include/ and target/release (under
# $CARGO_TARGET_DIR when set), converts the test fixture, runs gofmt, go vet and
# go test -race, then builds a program in a module of its own the way go/README.md says (a
# replace directive to this checkout) and runs it without LD_LIBRARY_PATH.
#
#   go/test.sh                              # links libcolibri.so (the usual case)
#   COLIBRI_GO_LINK=static go/test.sh       # -tags colibri_static: links libcolibri.a
#   GO=/usr/lib/go-1.19/bin/go go/test.sh   # a given toolchain (default: go on PATH,
#                                           # else /usr/local/go/bin/go)
#   COLIBRI_SKIP_BUILD=1 go/test.sh         # reuse target/release as it is
#   CARGO_TARGET_DIR=/tmp/t go/test.sh      # cargo's output (and the library tested) in /tmp/t
#
# Extra arguments go to `go test` (e.g. -run TestInfo -v).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"

GO="${GO:-$(command -v go || true)}"
if [ -z "$GO" ] && [ -x /usr/local/go/bin/go ]; then GO=/usr/local/go/bin/go; fi
if [ -z "$GO" ]; then
	echo "go/test.sh: no Go toolchain (install golang-go or set GO=/path/to/go)" >&2
	exit 1
fi
command -v pkg-config >/dev/null || { echo "go/test.sh: pkg-config is required" >&2; exit 1; }
echo "== Go: $("$GO" version)"

if [ "${COLIBRI_SKIP_BUILD:-0}" != 1 ]; then
	echo "== cargo build --release"
	cargo build --release
fi
# cargo's output directory: CARGO_TARGET_DIR (relative to the repository root) or target/.
target="${CARGO_TARGET_DIR:-target}"
case "$target" in /*) ;; *) target="$repo/$target" ;; esac
rel="$target/release"

tmp="$(mktemp -d "${TMPDIR:-/tmp}/colibri-go.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/lib" "$tmp/pkgconfig"

version="$(sed -n 's/^#define COLIBRI_VERSION_[A-Z]* \([0-9]*\)$/\1/p' include/colibri.h | paste -sd. -)"

# The library's SONAME is libcolibri.so.<ABI> (COLIBRI_ABI_VERSION of the header) but cargo
# writes only libcolibri.so: give the linker (libcolibri.so) and the loader (libcolibri.so.<ABI>)
# their names in a private directory.
abi="$(sed -n 's/^#define COLIBRI_ABI_VERSION \([0-9]*\)$/\1/p' include/colibri.h)"
if [ -z "$abi" ]; then
	echo "go/test.sh: no COLIBRI_ABI_VERSION in include/colibri.h" >&2
	exit 1
fi
ln -s "$rel/libcolibri.so" "$tmp/lib/libcolibri.so"
ln -s "$rel/libcolibri.so" "$tmp/lib/libcolibri.so.$abi"
cat >"$tmp/pkgconfig/colibri.pc" <<PC
Name: colibri
Description: colibri build tree ($repo)
Version: $version
Libs: -L$tmp/lib -Wl,-rpath,$tmp/lib -lcolibri
Cflags: -I$repo/include
PC
# For -tags colibri_static: libcolibri.a and the system libraries it needs
# (rustc --print native-static-libs).
cat >"$tmp/pkgconfig/colibri-static.pc" <<PC
Name: colibri-static
Description: colibri build tree ($repo), linked statically
Version: $version
Libs: -L$rel -l:libcolibri.a -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc
Cflags: -I$repo/include
PC
# No LD_LIBRARY_PATH: test binaries find libcolibri.so.<ABI> through the rpath the .pc file's
# Libs give (as the installed colibri.pc does), and LD_LIBRARY_PATH would take precedence.
unset LD_LIBRARY_PATH
export PKG_CONFIG_PATH="$tmp/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
# Go 1.19's build cache does not hash pkg-config's output: a package built against an earlier
# .pc file (another temporary directory, the other link mode) would be reused and fail to
# link. Put the .pc files' checksum into CGO_CFLAGS, which the cache does hash.
export CGO_CFLAGS="${CGO_CFLAGS:--O2 -g} -DCOLIBRI_GO_PC_CKSUM=$(cat "$tmp"/pkgconfig/*.pc | cksum | cut -d' ' -f1)"

tags=()
pc=colibri
if [ "${COLIBRI_GO_LINK:-dynamic}" = static ]; then
	tags=(-tags colibri_static)
	pc=colibri-static
fi
echo "== pkg-config $pc: $(pkg-config --modversion $pc) | $(pkg-config --cflags --libs $pc)"

echo "== colibri convert (qwen2_moe_shared fixture)"
if ! out="$("$rel/colibri" convert tests/fixtures/models/qwen2_moe_shared -o "$tmp/q.colibri" 2>&1)"; then
	echo "$out" >&2
	exit 1
fi
export COLIBRI_TEST_MODEL="$tmp/q.colibri"
export COLIBRI_BIN="$rel/colibri"
export COLIBRI_FIXTURE="$repo/tests/fixtures/models/qwen2_moe_shared"
export CGO_ENABLED=1
export GOPROXY=off # the module has no dependencies: never reach for the network

cd go/colibri
echo "== gofmt"
gofmt="$(dirname "$GO")/gofmt"
[ -x "$gofmt" ] || gofmt=gofmt
unformatted="$("$gofmt" -l .)"
if [ -n "$unformatted" ]; then
	echo "gofmt would change: $unformatted" >&2
	exit 1
fi
echo "== go vet (both link modes)"
"$GO" vet ./...
"$GO" vet -tags colibri_static ./...
echo "== go test -race ${tags[*]:-}"
# -count=1: Go's test cache cannot see a rebuilt libcolibri.
"$GO" test -race -count=1 ${tags[@]+"${tags[@]}"} "$@" ./...

echo "== a module of its own using the binding (go/README.md's replace directive), run without LD_LIBRARY_PATH"
app="$tmp/app"
mkdir -p "$app"
cat >"$app/main.go" <<'GO'
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/colibri-llm/colibri/go/colibri"
)

func main() {
	m, err := colibri.Open(os.Args[1], colibri.WithThreads(1))
	if err != nil {
		panic(err)
	}
	defer m.Close()
	s, err := m.NewSession()
	if err != nil {
		panic(err)
	}
	defer s.Close()
	p := colibri.DefaultGenerateParams()
	p.Temperature, p.MaxTokens, p.IgnoreEOS = 0, 4, true
	res, err := s.Generate(context.Background(), []int32{1, 2, 3}, p, nil)
	if err != nil {
		panic(err)
	}
	fmt.Println(colibri.Version(), len(res.Tokens), res.Finish)
}
GO
(
	cd "$app"
	"$GO" mod init example.com/app >/dev/null 2>&1
	"$GO" mod edit -require=github.com/colibri-llm/colibri/go/colibri@v0.0.0 \
		-replace=github.com/colibri-llm/colibri/go/colibri="$repo/go/colibri"
	"$GO" build ${tags[@]+"${tags[@]}"} -o app .
	if [ "$pc" = colibri ] && ! readelf -d app | grep -Eq '(RUNPATH|RPATH).*'"$tmp/lib"; then
		echo "the program has no rpath to $tmp/lib" >&2
		exit 1
	fi
	out="$(env -u LD_LIBRARY_PATH ./app "$COLIBRI_TEST_MODEL")"
	[ "$out" = "$version 4 length" ] || { echo "the program printed: $out" >&2; exit 1; }
	echo "   $out"
)
