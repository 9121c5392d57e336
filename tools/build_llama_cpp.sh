#!/usr/bin/env bash
# Builds the llama.cpp peer colibri's benchmarks and GGUF fixtures are made with (never part of
# CI): llama-bench, llama-quantize and llama-perplexity, with shared libggml-base / libllama for
# the fixture scripts that call llama.cpp's own quantiser and tokenizer through ctypes.
#
# Source: the llama.cpp vendored inside the llama-cpp-python sdist on PyPI (the only registry this
# machine reaches), fetched with pip and unpacked into DIR (default /work/llama, or $LLAMACPP_DIR):
#
#   DIR/llama_cpp_python-VERSION/vendor/llama.cpp   the llama.cpp tree (convert_hf_to_gguf.py, gguf-py/)
#   DIR/llama.cpp                                    symlink to it
#   DIR/build/bin                                    the tools and the shared libraries
#   DIR/BUILD_INFO                                   version, commit, cmake flags (written last: "done")
#
#   tools/build_llama_cpp.sh [DIR]    # idempotent; FORCE=1 rebuilds; prints the source and bin folders
#
# Env: LLAMACPP_DIR, LLAMA_CPP_PYTHON_VERSION (default 0.3.36), PYTHON (default python3; with
# INSTALL_GGUF_PY=1 it also gets gguf-py installed from the tree), JOBS (default: nproc). The
# x86 SIMD flags are chosen from this CPU's and recorded (GGML_NATIVE=OFF); AMX stays off: llama.cpp
# never asks the kernel for the tile permission. Heavy steps run under `nice -n 10`.
set -euo pipefail

dir=${1:-${LLAMACPP_DIR:-/work/llama}}
version=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
python=${PYTHON:-python3}
jobs=${JOBS:-$(nproc)}
src="$dir/llama_cpp_python-$version/vendor/llama.cpp"
bin="$dir/build/bin"

built() {
    [[ -f "$dir/BUILD_INFO" ]] && for t in llama-bench llama-quantize llama-perplexity; do [[ -x "$bin/$t" ]] || return 1; done
}

fetch_source() {
    mkdir -p "$dir"
    if [[ ! -d "$src" ]]; then
        local tarball="$dir/llama_cpp_python-$version.tar.gz"
        [[ -f "$tarball" ]] || "$python" -m pip download --no-deps --no-binary :all: "llama-cpp-python==$version" -d "$dir"
        tar -xzf "$tarball" -C "$dir"
    fi
    # The sdist keeps the submodule's `.git` file, whose target is not shipped: cmake would then
    # depend on a git index that never exists and re-run itself forever.
    rm -f "$src/.git"
    ln -sfn "$src" "$dir/llama.cpp"
}

# The llama.cpp commit this sdist vendors (its CHANGELOG says "update llama.cpp to ...@HASH").
vendored_commit() {
    awk -v v="## [$version]" '$0==v {on=1; next} /^## \[/ {on=0} on' "$dir/llama_cpp_python-$version/CHANGELOG.md" \
        | grep -o 'llama.cpp@[0-9a-f]*' | head -1 | cut -d@ -f2 | cut -c1-7
}

simd_flags() {
    local flags out="-DGGML_NATIVE=OFF"
    flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
    has() { grep -qw "$1" <<<"$flags"; }
    for f in avx avx2 fma f16c; do
        has "$f" && out+=" -DGGML_${f^^}=ON" || out+=" -DGGML_${f^^}=OFF"
    done
    local v=OFF
    has avx512f && v=ON
    out+=" -DGGML_AVX512=$v -DGGML_AVX512_VNNI=$v -DGGML_AVX512_BF16=$v -DGGML_AVX512_VBMI=$v"
    echo "$out -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
}

build() {
    local simd commit t0=$SECONDS gen=()
    simd=$(simd_flags)
    commit=$(vendored_commit || true)
    command -v ninja >/dev/null && gen=(-G Ninja)
    echo "== llama.cpp ${commit:-unknown} from llama-cpp-python $version; cmake flags: $simd"
    # shellcheck disable=SC2086  # $simd is a list of flags
    nice -n 10 cmake -S "$src" -B "$dir/build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release $simd \
        -DBUILD_SHARED_LIBS=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TOOLS=ON -DGGML_OPENMP=ON \
        -DLLAMA_BUILD_COMMIT="${commit:-unknown}" >/dev/null
    nice -n 10 cmake --build "$dir/build" --config Release -j "$jobs" --target llama-bench llama-quantize llama-perplexity
    if [[ "${INSTALL_GGUF_PY:-0}" == 1 ]]; then
        "$python" -m pip install --quiet -e "$src/gguf-py"
    fi
    {
        echo "llama-cpp-python $version (vendor/llama.cpp ${commit:-unknown})"
        echo "cmake: -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON $simd"
        echo "build_seconds: $((SECONDS - t0)) (jobs=$jobs, nice 10)"
        echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(lscpu | sed -n 's/^Model name: *//p' | head -1)"
    } >"$dir/BUILD_INFO"
}

if [[ "${FORCE:-0}" == 1 ]] || ! built; then
    fetch_source
    build
fi
cat "$dir/BUILD_INFO"
echo "source: $src"
echo "bin:    $bin"
