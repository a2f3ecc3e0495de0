#!/bin/sh
# The one-token product variants in one run on a GPU machine: build; the
# SASS of the default q4_0 one-token product (k_mv_q), of its
# shared-memory variant (k_mv_q_st) and of bench/cuda_barrier_probe, to
# count the weight loads issued before the first use; cuda_ops (a variant
# is measured only once it equals the default); the boundary probe; then
# gem bench decode at depth 0 and 8192 (f16 KV, prompt 16, 32 steps, 2
# reps) of the defaults and GEM_CUDA_MV_LD=1/2/3, GEM_CUDA_MV_SMALL=1 and
# SMALL with LD=3, forward then in reverse. Synthetic gemma4-31b Q4_0 with
# a Q8_0 embedding unless a model is given.
#   bench/cuda_mv_ab.sh [OUTDIR] [model.gguf]
# Output: a summary on stdout; the SASS, cuda_ops log, probe and bench
# lines under OUTDIR (default $OUT, else /tmp/gem-mv-ab).
set -u
cd "$(dirname "$0")/.." || exit 2
O=${1:-${OUT:-/tmp/gem-mv-ab}}
M=${2:-${TMPDIR:-/tmp}/gem-variants-31b.gguf}
mkdir -p "$O"
make -j16 CUDA=1 gem build/cuda_barrier_probe build/tests/cuda/cuda_ops > "$O/build.log" 2>&1 ||
    { tail -30 "$O/build.log"; exit 1; }
done_flag=$O/.synth-done
rm -f "$done_flag"
if [ -f "$M" ]; then touch "$done_flag"
else (./gem synth --profile gemma4-31b --type q4_0 --embd-type q8_0 --seed 1 -o "$M" >/dev/null 2>&1; touch "$done_flag") &
fi
obj=build/obj-cuda1/src/backend/cuda/cuda_matmul.o
cuobjdump -sass -fun '_Z6k_mv_qILi1ELi1ELi1ELi0EEv6mv_jobPKaPKfPKii' "$obj" > "$O/sass_mv_q4.txt" 2>&1
cuobjdump -sass -fun '_Z9k_mv_q_stILi1ELi1EEv6mv_jobPKaPKfPKii' "$obj" > "$O/sass_mv_q4_st.txt" 2>&1
cuobjdump -sass build/cuda_barrier_probe > "$O/sass_probe.txt" 2>&1
for f in "$O"/sass_*.txt; do
    echo "$f: $(grep -c 'LDG\.' "$f") LDG, $(grep -c 'LDGSTS' "$f") LDGSTS, $(grep -c 'DP4A\|IDP' "$f") dp4a"
done
timeout 240 build/tests/cuda/cuda_ops > "$O/ops.txt" 2>&1
tail -1 "$O/ops.txt"
grep -i "fail" "$O/ops.txt" | head
timeout 150 build/cuda_barrier_probe > "$O/probe.txt" 2>&1
cat "$O/probe.txt"
while [ ! -f "$done_flag" ]; do sleep 1; done
[ -s "$M" ] || { echo "cuda_mv_ab.sh: no model at $M" >&2; exit 1; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.limit,driver_version --format=csv,noheader 2>/dev/null
d() {
    env "$@" ./gem bench -m "$M" --backend cuda --kv-type f16 --prompt 16 --gen 32 --depth 0,8192 --reps 2 2>&1 |
        grep 'decode at' | sed 's/ (median.*//' | tr '\n' ' '
}
for v in X=1 GEM_CUDA_MV_LD=3 GEM_CUDA_MV_SMALL=1 "GEM_CUDA_MV_SMALL=1 GEM_CUDA_MV_LD=3" GEM_CUDA_MV_LD=2 GEM_CUDA_MV_LD=1 \
    GEM_CUDA_MV_LD=1 GEM_CUDA_MV_LD=2 "GEM_CUDA_MV_SMALL=1 GEM_CUDA_MV_LD=3" GEM_CUDA_MV_SMALL=1 GEM_CUDA_MV_LD=3 X=1; do
    echo "$v: $(d $v)"
done | tee "$O/ab.txt"
