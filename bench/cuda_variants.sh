#!/bin/sh
# The CUDA backend's kernel choices side by side on one GPU machine, in
# one run (A/B/B/A where it matters), on a synthetic 31B Q4_0 with a Q8_0
# embedding: prefill 2048 for the product kernels (default k_mm_w,
# GEM_CUDA_MMH=2 k_mm_h) and the geglu with the down product's f16
# activations in one launch (GEM_CUDA_GEGLU_F16=1); decode at depth 0 and
# 8192 for the one-token
# attention kernel (GEM_CUDA_ATTN_DEC=1: k_attn_dec, with its first cache
# rows read early: GEM_CUDA_KV_EARLY=1; the combine in its last block:
# GEM_CUDA_DEC_FUSE=1), early weight loads
# in the one-token products and norms (GEM_CUDA_MV_EARLY=1,
# GEM_CUDA_NORM_EARLY=1), the value pairs
# (GEM_CUDA_ATTN_V2) and the row split, with f32 and f16 KV caches
# (GEM_CUDA_PDL=1, the default, first and last). Run
# build/tests/cuda/cuda_ops first: a variant is measured only once it is
# correct. Output: one line per run (gem bench's own lines).
#   bench/cuda_variants.sh [model.gguf]
set -u
cd "$(dirname "$0")/.."
M=${1:-${TMPDIR:-/tmp}/gem-variants-31b.gguf}
[ -f "$M" ] || ./gem synth --profile gemma4-31b --type q4_0 --embd-type q8_0 --seed 1 -o "$M" >/dev/null || exit 1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.limit,driver_version --format=csv,noheader 2>/dev/null
prefill() { ./gem bench -m "$M" --backend cuda --prompt 2048 --gen 1 --depth 0 --reps 2 2>&1 | grep 'prefill '; }
for v in 3 2 2 3; do echo "GEM_CUDA_MMH=$v: $(GEM_CUDA_MMH=$v prefill)"; done
for v in 0 1 1 0; do echo "GEM_CUDA_GEGLU_F16=$v: $(GEM_CUDA_GEGLU_F16=$v prefill)"; done
# decode KV_TYPE [VAR=VALUE ...]
decode() {
    kv=$1
    shift
    env "$@" ./gem bench -m "$M" --backend cuda --kv-type "$kv" --prompt 16 --gen 32 --depth 0,8192 --reps 2 2>&1 |
        grep 'decode at' | tr '\n' ' '
}
ALL="GEM_CUDA_ATTN_DEC=1 GEM_CUDA_KV_EARLY=1 GEM_CUDA_DEC_FUSE=1 GEM_CUDA_MV_EARLY=1 GEM_CUDA_NORM_EARLY=1"
for v in "f32 GEM_CUDA_PDL=1" "f32 GEM_CUDA_ATTN_DEC=1" "f32 GEM_CUDA_ATTN_DEC=1 GEM_CUDA_KV_EARLY=1" \
         "f32 GEM_CUDA_ATTN_DEC=1 GEM_CUDA_DEC_FUSE=1" "f32 GEM_CUDA_MV_EARLY=1" "f32 GEM_CUDA_NORM_EARLY=1" \
         "f32 $ALL" "f32 GEM_CUDA_PDL=1" \
         "f16 GEM_CUDA_PDL=1" "f16 GEM_CUDA_ATTN_DEC=1" "f16 GEM_CUDA_ATTN_V2=1" "f16 $ALL"; do
    # shellcheck disable=SC2086 # $v is a KV type and a list of assignments
    echo "--kv-type $v: $(decode $v)"
done
