#!/usr/bin/env bash
# Builds the llama.cpp tools colibri's benchmarks and GGUF fixtures are made with, from the
# llama-cpp-python sdist on PyPI (which vendors llama.cpp's source, its convert_hf_to_gguf.py
# and gguf-py): llama-quantize, llama-perplexity and llama-bench. Not run by CI.
#
#   tools/build_llama_cpp.sh [DIR]     # default /work/llama; prints the source and bin folders
set -euo pipefail
dir=${1:-/work/llama}
version=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
mkdir -p "$dir"
cd "$dir"
src="$dir/llama_cpp_python-$version/vendor/llama.cpp"
if [ ! -d "$src" ]; then
    python3 -m pip download --no-deps --no-binary :all: "llama-cpp-python==$version" -d "$dir"
    tar xzf "llama_cpp_python-$version.tar.gz"
fi
cmake -S "$src" -B "$dir/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF >/dev/null
cmake --build "$dir/build" -j"$(nproc)" --target llama-quantize llama-perplexity llama-bench
echo "source: $src"
echo "bin:    $dir/build/bin"
