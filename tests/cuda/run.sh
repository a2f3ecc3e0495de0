#!/bin/sh
# make test-cuda: the CUDA backend against the CPU backend, on a machine
# with an NVIDIA GPU. Op-level checks (build/tests/cuda/cuda_ops), then the
# model-level checks of cuda_model on synthetic models: the tiny profile in
# q8_0, q4_0, f32 and f16, gemma4-1b in f32 and q4_0 (prompts of three
# sliding windows and more), and synthetic gemma4-12b in f16 and q4_0
# (GEM_CUDA_SKIP_12B=1 skips those: 24 and 7 GB on disk).
# Ends with the tally line "N passed, M failed".
cd "$(dirname "$0")/../.." || exit 2
log=build/test-logs/cuda
mkdir -p "$log"
. tests/tally.sh
# the model checks' measurements go to the terminal too
run_model() { run "$@"; grep '^cuda_model: ' "$lf" | grep -v passed; }

run cuda_ops build/tests/cuda/cuda_ops
run "cuda_ops (tensor-core prefill)" env GEM_CUDA_MMA=1 build/tests/cuda/cuda_ops
tmp=${TMPDIR:-/tmp}/gem-cuda-test.$$
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
for spec in "tiny q8_0 1 int8" "tiny q4_0 2 int8" "tiny f32 3 strict" "tiny f16 4 strict" "1b f32 5 strict" \
            "1b q4_0 6 int8"; do
    set -- $spec
    ./gem synth --profile "gemma4-$1" --type "$2" --seed "$3" -o "$tmp/m.gguf" >/dev/null
    if [ "$1" = 1b ]; then len=300; else len=100; fi # both over three sliding windows
    run_model "cuda_model $1 $2" build/tests/cuda/cuda_model "$tmp/m.gguf" $len 128 "$4"
done
./gem synth --profile gemma4-1b --type q4_0 --seed 6 -o "$tmp/m.gguf" >/dev/null
run_model "cuda_model 1b q4_0 (tensor-core prefill)" env GEM_CUDA_MMA=1 build/tests/cuda/cuda_model "$tmp/m.gguf" 300 64 int8
if [ -z "$GEM_CUDA_SKIP_12B" ]; then
    # the CPU side reads the whole model per greedy step: f16 (24 GB) gets 48
    for spec in "f16 7 strict 48" "q4_0 4 int8 128"; do
        set -- $spec
        ./gem synth --profile gemma4-12b --type "$1" --seed "$2" -o "$tmp/m.gguf" >/dev/null
        run_model "cuda_model 12b $1" build/tests/cuda/cuda_model "$tmp/m.gguf" 40 "$4" "$3"
    done
fi
rm -f "$tmp/m.gguf"
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" = 0 ]
