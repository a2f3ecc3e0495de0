#!/bin/sh
# The CUDA backend's kernel choices side by side on one GPU machine, in
# one run (A/B/B/A), on a synthetic 31B Q4_0 with a Q8_0 embedding:
# prefill 2048 for the product kernels (default k_mm_w, GEM_CUDA_MMH=2
# k_mm_h); decode at depth 0, 8192 and 32768 for the one-token attention
# kernels (default GEM_CUDA_ATTN_DEC=3: k_attn_tc on the tensor cores
# for f16 caches, the staged k_attn_dec for f32 ones; 2: the staged
# k_attn_dec for both; 1: k_attn_dec reading into registers; 0:
# k_attn_split), with f32 and f16 KV caches; then, with f16 caches, the
# one-token products' staggered first wave (default) against
# GEM_CUDA_MV_STAGGER=0, and the one-token norms on 256 threads
# (GEM_CUDA_NORM_WIDE=0), the q/k/v norm+rope as its own launch before the
# attention (GEM_CUDA_ATTN_FUSE=0), unsplit one-token rows
# (GEM_CUDA_MV_SPLIT=0) and plain launches (GEM_CUDA_PDL=0).
# Run build/tests/cuda/cuda_ops first: a variant is
# measured only once it is correct. Output: one line per run (gem bench's
# own lines).
#   bench/cuda_variants.sh [model.gguf]
set -u
cd "$(dirname "$0")/.."
M=${1:-${TMPDIR:-/tmp}/gem-variants-31b.gguf}
[ -f "$M" ] || ./gem synth --profile gemma4-31b --type q4_0 --embd-type q8_0 --seed 1 -o "$M" >/dev/null || exit 1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.limit,driver_version --format=csv,noheader 2>/dev/null
prefill() { ./gem bench -m "$M" --backend cuda --prompt 2048 --gen 1 --depth 0 --reps 2 2>&1 | grep 'prefill '; }
for v in 1 2 2 1; do echo "GEM_CUDA_MMH=$v: $(GEM_CUDA_MMH=$v prefill)"; done
# decode KV_TYPE [VAR=VALUE ...]
decode() {
    kv=$1
    shift
    env "$@" ./gem bench -m "$M" --backend cuda --kv-type "$kv" --prompt 16 --gen 32 --depth 0,8192,32768 --reps 2 2>&1 |
        grep 'decode at' | sed 's/ (median.*//' | tr '\n' ' '
}
for v in 2 1 0 1 2; do echo "--kv-type f32 GEM_CUDA_ATTN_DEC=$v: $(decode f32 GEM_CUDA_ATTN_DEC=$v)"; done
for v in 3 2 1 0 1 2 3; do echo "--kv-type f16 GEM_CUDA_ATTN_DEC=$v: $(decode f16 GEM_CUDA_ATTN_DEC=$v)"; done
for v in "X=1" GEM_CUDA_MV_STAGGER=0 GEM_CUDA_NORM_WIDE=0 GEM_CUDA_ATTN_FUSE=0 GEM_CUDA_MV_SPLIT=0 GEM_CUDA_PDL=0 \
    GEM_CUDA_PDL=0 GEM_CUDA_MV_SPLIT=0 GEM_CUDA_ATTN_FUSE=0 GEM_CUDA_NORM_WIDE=0 GEM_CUDA_MV_STAGGER=0 "X=1"; do
    echo "--kv-type f16 $v: $(decode f16 $v)"
done
