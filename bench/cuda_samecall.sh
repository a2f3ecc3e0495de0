#!/bin/sh
# gem bench against the pinned llama.cpp reference (llama-bench) on the
# same synthetic GGUF files in one device call: batch 1, greedy, f16 KV
# for both (llama-bench -fa 1 -ngl 99 keeps its default F16 cache; gem
# --kv-type f16), prompt 2048, 64 decode steps at each depth, REPS
# repetitions each (gem: median after a warm-up; llama-bench: its mean and
# samples). One JSON per model and side, the models' sha256 and the GPU's
# clocks, packed into $OUT/samecall.tar after each model (the device
# returns only a few files per call; a run cut short keeps the models
# done); a results file in bench/results/ combines them.
#   LLAMA_BENCH=path OUT=dir bench/cuda_samecall.sh [31b-q4_0 31b-q8_0 12b-q4_0 ...]
# Without LLAMA_BENCH (or with a path that is not executable) only gem
# runs, and the script says so. DEPTHS (default 0,8192,32768) and REPS
# (default 2) override the settings. A relative OUT is taken from the
# directory the script was started in.
set -eu
case "${OUT:-}" in /* | '') ;; *) OUT="$(pwd)/$OUT" ;; esac
cd "$(dirname "$0")/.."
models=${*:-31b-q4_0 31b-q8_0 12b-q4_0}
for spec in $models; do # every name checked before the first model is made
    case "$spec" in
    31b-q4_0 | 31b-q8_0 | 12b-q4_0 | 12b-q8_0) ;;
    *) echo "cuda_samecall.sh: unknown model '$spec' (31b-q4_0, 31b-q8_0, 12b-q4_0 or 12b-q8_0)" >&2; exit 2 ;;
    esac
done
out=${OUT:-bench/results/raw}
depths=${DEPTHS:-0,8192,32768}
reps=${REPS:-2}
mkdir -p "$out"
tmp=${TMPDIR:-/tmp}
lb=${LLAMA_BENCH:-}
if [ -n "$lb" ] && [ ! -x "$lb" ]; then
    echo "cuda_samecall.sh: LLAMA_BENCH=$lb is not an executable; gem alone" >&2
    lb=
fi
[ -n "$lb" ] || echo "cuda_samecall.sh: no llama-bench: gem alone" >&2
git rev-parse --short HEAD >"$out/commit.txt" 2>/dev/null || echo unknown >"$out/commit.txt"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.limit,driver_version --format=csv,noheader \
    >"$out/gpu.txt" || true
(cd "$out" && rm -f samecall.tar && tar -cf samecall.tar commit.txt gpu.txt)
for spec in $models; do
    profile=${spec%-*} type=${spec#*-}
    m="$tmp/gem-samecall-$spec.gguf"
    # always made anew: a file left by a run cut short may be partial
    ./gem synth --profile "gemma4-$profile" --type "$type" --embd-type q8_0 --seed 1 -o "$m" >/dev/null
    sha256sum "$m" | cut -d' ' -f1 >"$out/$spec.sha256"
    ./gem bench -m "$m" --backend cuda --kv-type f16 --prompt 2048 --gen 64 --depth "$depths" --reps "$reps" \
        --json "$out/gem-$spec.json"
    if [ -n "$lb" ]; then
        "$lb" -m "$m" -p 2048 -n 64 -d "$depths" -r "$reps" -fa 1 -ngl 99 -o json >"$out/llama-$spec.json"
    fi
    rm -f "$m" # the next model's space (24 GB for 31B Q8_0)
    (cd "$out" && tar -rf samecall.tar "$spec.sha256" "gem-$spec.json" $([ -n "$lb" ] && echo "llama-$spec.json") &&
        rm -f "$spec.sha256" "gem-$spec.json" "llama-$spec.json")
done
