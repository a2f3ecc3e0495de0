#!/bin/sh
# Builds the pinned llama.cpp reference (release v0.5.0, carried by the npm
# package node-llama-cpp@3.22.1) into the ignored folder .ref/ and records
# what was built in .ref/VERSION. Nothing of it is ever committed.
#
#   bench/reference/build.sh cpu     # this machine (about 20 minutes on 2 cores)
#   bench/reference/build.sh cuda    # sm_90a; needs nvcc, not a GPU: built here,
#                                    # static, so bin/llama-bench can be carried
#                                    # to the H200 machine (about 90 min on 2 cores)
set -eu
kind=${1:-cpu}
root=$(cd "$(dirname "$0")/../.." && pwd)
ref="$root/.ref"
mkdir -p "$ref"
cd "$ref"
if [ ! -d llama.cpp ]; then
    if [ ! -f node-llama-cpp-3.22.1.tgz ]; then npm pack node-llama-cpp@3.22.1 >/dev/null; fi
    tar xzf node-llama-cpp-3.22.1.tgz
    git clone -q package/llama/gitRelease.bundle llama.cpp
fi
cd llama.cpp
targets="llama-bench llama-completion llama-server llama-tokenize llama-perplexity llama-quantize"
case "$kind" in
cpu)
    cmake -B build-cpu -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=Release >/dev/null
    cmake --build build-cpu -j"$(nproc)" --target $targets >/dev/null
    bin=build-cpu/bin ;;
cuda)
    cmake -B build-cuda -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DLLAMA_CURL=OFF \
          -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF \
          -DLLAMA_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=Release >/dev/null
    cmake --build build-cuda -j"$(nproc)" --target ${CUDA_TARGETS:-llama-bench} >/dev/null
    bin=build-cuda/bin ;;
*) echo "usage: $0 cpu|cuda" >&2; exit 2 ;;
esac
{
    echo "package: node-llama-cpp@3.22.1 (llama/gitRelease.bundle)"
    echo "commit: $(git rev-parse HEAD)"
    echo "kind: $kind"
    echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
} > "$ref/VERSION-$kind"
echo "reference built in $ref/llama.cpp/$bin"
