#!/bin/sh
# make test-cuda: the CUDA backend against the CPU backend, on a machine
# with an NVIDIA GPU. Op-level checks (build/tests/cuda/cuda_ops), then the
# model-level checks of cuda_model on synthetic models: the tiny profile in
# q8_0, q4_0 and f32 (prompts of 100 tokens, three sliding windows), and a
# synthetic gemma4-12b q4_0 (GEM_CUDA_SKIP_12B=1 skips it: 7 GB on disk).
# Ends with the tally line "N passed, M failed".
cd "$(dirname "$0")/../.." || exit 2
log=build/test-logs/cuda
mkdir -p "$log"
total_pass=0 total_fail=0
account() { # name rc logfile
    line=$(grep -E '[0-9]+ passed, [0-9]+ failed' "$3" | tail -1)
    p=$(echo "$line" | sed -E 's/.* ([0-9]+) passed.*/\1/')
    f=$(echo "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')
    [ -z "$line" ] && p=0 f=0
    if [ "$2" != 0 ] && [ "$f" = 0 ]; then f=1; fi
    total_pass=$((total_pass + p)) total_fail=$((total_fail + f))
    if [ "$f" = 0 ]; then echo "ok    $1 ($p checks)"; else echo "FAIL  $1 ($f failed, log $3)"; tail -20 "$3"; fi
    grep '^cuda_model: ' "$3" | grep -v passed
}
run() { name=$1; shift; lf="$log/$(echo "$name" | tr '/ ' '__').log"; "$@" >"$lf" 2>&1; account "$name" $? "$lf"; }

run cuda_ops build/tests/cuda/cuda_ops
tmp=${TMPDIR:-/tmp}/gem-cuda-test.$$
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
for spec in "q8_0 1" "q4_0 2" "f32 3"; do
    set -- $spec
    ./gem synth --profile gemma4-tiny --type "$1" --seed "$2" -o "$tmp/tiny-$1.gguf" >/dev/null
    run "cuda_model tiny $1" build/tests/cuda/cuda_model "$tmp/tiny-$1.gguf" 100 128
done
if [ -z "$GEM_CUDA_SKIP_12B" ]; then
    ./gem synth --profile gemma4-12b --type q4_0 --seed 4 -o "$tmp/12b.gguf" >/dev/null
    run "cuda_model 12b q4_0" build/tests/cuda/cuda_model "$tmp/12b.gguf" 40 128
    rm -f "$tmp/12b.gguf"
fi
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" = 0 ]
