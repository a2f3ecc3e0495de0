#!/bin/sh
# CUDA benchmark on the GPU machine: synthesizes the benchmark models
# (gemma4-31b Q4_0 with a Q8_0 embedding, gemma4-12b Q4_0) and runs
# `gem bench --backend cuda` on each; JSON per model into $OUT (or
# bench/results/raw) plus the GPU's name and clocks.
#   OUT=... bench/cuda_bench.sh [31b|12b ...]
set -eu
cd "$(dirname "$0")/.."
out=${OUT:-bench/results/raw}
mkdir -p "$out"
tmp=${TMPDIR:-/tmp}
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.limit,driver_version --format=csv,noheader >"$out/gpu.txt" || true
for m in ${*:-31b 12b}; do
    f="$tmp/gem-bench-$m.gguf"
    [ -f "$f" ] || ./gem synth --profile "gemma4-$m" --type q4_0 --embd-type q8_0 -o "$f" >/dev/null
    ./gem bench -m "$f" --backend cuda --prompt 512,2048 --gen 64 --depth 0,8192 --reps 3 \
        --json "$out/cuda-$m-q4_0-$commit.json"
done
