#!/usr/bin/env bash
# Build the llama.cpp peer used by bench/compare.py (never part of CI).
#
# Source: the llama.cpp vendored inside the llama-cpp-python sdist on PyPI (the only registry this
# machine reaches). Fetched with pip, unpacked, built with cmake into a cache directory:
#
#   $LLAMACPP_DIR (default /work/peers/llama.cpp)
#     src/        the unpacked sdist (vendor/llama.cpp is the llama.cpp tree)
#     build/      cmake build dir; build/bin/llama-bench and build/bin/llama-quantize
#     llama.cpp   symlink to src/.../vendor/llama.cpp (convert_hf_to_gguf.py, gguf-py/)
#     BUILD_INFO  version, cmake flags, build time (written last: its presence means "done")
#
# Idempotent: if BUILD_INFO exists and both binaries are there, nothing is done (FORCE=1 rebuilds).
#
# Env: LLAMACPP_DIR, LLAMACPP_PY_VERSION (default 0.3.36), PYTHON (default /work/venv/bin/python),
#      JOBS (default 2), FORCE=1. Heavy steps run under `nice -n 10`.
set -euo pipefail

LLAMACPP_DIR="${LLAMACPP_DIR:-/work/peers/llama.cpp}"
VERSION="${LLAMACPP_PY_VERSION:-0.3.36}"
PYTHON="${PYTHON:-/work/venv/bin/python}"
JOBS="${JOBS:-2}"

# --- already built? -------------------------------------------------------------------------------
is_built() {
    [[ -f "$LLAMACPP_DIR/BUILD_INFO" && -x "$LLAMACPP_DIR/build/bin/llama-bench" \
        && -x "$LLAMACPP_DIR/build/bin/llama-quantize" ]]
}

# --- fetch and unpack the sdist -------------------------------------------------------------------
fetch_source() {
    local dl="$LLAMACPP_DIR/download"
    mkdir -p "$dl" "$LLAMACPP_DIR/src"
    if ! ls "$dl"/llama_cpp_python-"$VERSION".tar.gz >/dev/null 2>&1; then
        echo "== pip download llama-cpp-python==$VERSION (sdist)"
        "$PYTHON" -m pip download --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$dl"
    fi
    local tarball
    tarball=$(ls "$dl"/llama_cpp_python-"$VERSION".tar.gz)
    local top="$LLAMACPP_DIR/src/llama_cpp_python-$VERSION"
    if [[ ! -d "$top/vendor/llama.cpp" ]]; then
        echo "== unpack $tarball"
        tar -xzf "$tarball" -C "$LLAMACPP_DIR/src"
    fi
    # The sdist keeps the submodule's `.git` file ("gitdir: ../../.git/modules/...") whose target is not
    # shipped: cmake then depends on a git index that never exists and ninja re-runs cmake forever.
    [[ -f "$top/vendor/llama.cpp/.git" ]] && rm -f "$top/vendor/llama.cpp/.git"
    ln -sfn "$top/vendor/llama.cpp" "$LLAMACPP_DIR/llama.cpp"
}

# --- the llama.cpp commit this sdist vendors (its CHANGELOG says "update llama.cpp to ...@HASH") ---
vendored_commit() {
    local top="$LLAMACPP_DIR/src/llama_cpp_python-$VERSION"
    awk -v v="## [$VERSION]" '$0==v {on=1; next} /^## \[/ {on=0} on' "$top/CHANGELOG.md" \
        | grep -o 'llama.cpp@[0-9a-f]*' | head -1 | cut -d@ -f2 | cut -c1-7
}

# --- choose the x86 SIMD flags from what this CPU reports ----------------------------------------
# GGML_NATIVE=OFF so the binary's ISA is explicit and recorded. AMX stays OFF always: llama.cpp never
# asks the kernel for the AMX tile permission (arch_prctl ARCH_REQ_XCOMP_PERM).
simd_flags() {
    local flags
    flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
    local relevant
    relevant=$(tr ' ' '\n' <<<"$flags" | grep -E '^(avx|avx2|fma|f16c|avx512[a-z0-9_]*|amx[a-z0-9_]*)$' | sort -u | tr '\n' ' ')
    echo "== CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores" >&2
    echo "== CPU SIMD flags: ${relevant:-none}" >&2
    local out="-DGGML_NATIVE=OFF"
    has() { grep -qw "$1" <<<"$flags"; }
    has avx && out+=" -DGGML_AVX=ON" || out+=" -DGGML_AVX=OFF"
    has avx2 && out+=" -DGGML_AVX2=ON" || out+=" -DGGML_AVX2=OFF"
    has fma && out+=" -DGGML_FMA=ON" || out+=" -DGGML_FMA=OFF"
    has f16c && out+=" -DGGML_F16C=ON" || out+=" -DGGML_F16C=OFF"
    if has avx512f; then
        out+=" -DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON -DGGML_AVX512_VBMI=ON"
    else
        out+=" -DGGML_AVX512=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF -DGGML_AVX512_VBMI=OFF"
    fi
    out+=" -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
    echo "$out"
}

# --- configure and build only the two tools the harness runs -------------------------------------
build() {
    local src="$LLAMACPP_DIR/llama.cpp" bdir="$LLAMACPP_DIR/build"
    local simd commit
    simd=$(simd_flags)
    commit=$(vendored_commit)
    echo "== vendored llama.cpp commit: ${commit:-unknown}"
    local gen=()
    command -v ninja >/dev/null && gen=(-G Ninja)
    echo "== cmake flags: $simd"
    # shellcheck disable=SC2086  # $simd is a list of flags
    nice -n 10 cmake -S "$src" -B "$bdir" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release $simd \
        -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TOOLS=ON -DGGML_OPENMP=ON \
        -DLLAMA_BUILD_COMMIT="${commit:-unknown}"
    local t0=$SECONDS
    nice -n 10 cmake --build "$bdir" --config Release -j "$JOBS" --target llama-bench llama-quantize
    BUILD_SECONDS=$((SECONDS - t0))
    SIMD="$simd"
}

# --- install the converter's python package (gguf) into the venv --------------------------------
install_gguf_py() {
    echo "== pip install -e $LLAMACPP_DIR/llama.cpp/gguf-py"
    "$PYTHON" -m pip install --quiet -e "$LLAMACPP_DIR/llama.cpp/gguf-py"
}

# --- record what was built (marks the build as complete) -----------------------------------------
write_info() {
    local commit=""
    # the sdist has no .git; llama-bench prints the commit it was configured with
    commit=$("$LLAMACPP_DIR/build/bin/llama-bench" --version 2>&1 | head -3 | tr '\n' ' ' || true)
    {
        echo "llama-cpp-python $VERSION (vendor/llama.cpp)"
        echo "$commit"
        echo "cmake: -DCMAKE_BUILD_TYPE=Release $SIMD"
        echo "build_seconds: $BUILD_SECONDS (jobs=$JOBS, nice 10, llama-bench + llama-quantize)"
        echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    } >"$LLAMACPP_DIR/BUILD_INFO"
    cat "$LLAMACPP_DIR/BUILD_INFO"
}

main() {
    if [[ "${FORCE:-0}" != 1 ]] && is_built; then
        echo "llama.cpp already built in $LLAMACPP_DIR (FORCE=1 to rebuild):"
        cat "$LLAMACPP_DIR/BUILD_INFO"
        return 0
    fi
    fetch_source
    build
    install_gguf_py
    write_info
}

main "$@"
