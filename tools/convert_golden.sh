#!/bin/sh
# Compares gem convert with the pinned reference converter
# (.ref/llama.cpp/convert_hf_to_gguf.py) on tiny Gemma 4 checkpoints made
# from gem-synth models by tools/gguf_to_hf.py. Run it where torch, numpy and
# transformers are installed (the H200 machine; no network needed):
#
#   tools/convert_golden.sh            # prints one line per case and a summary
#
# Cases: f32 / f16 / bf16 output from an f32 checkpoint, the reference's
# "auto" type, a bf16 checkpoint, and a 3-shard Gemma4ForConditionalGeneration
# checkpoint. For each, both GGUFs are written, their SHA-256 compared, and on
# a mismatch tools/gguf_diff.py lists every differing key or tensor. The
# folder is named "gemma4tiny" so the reference's name heuristics reduce to
# general.name "Gemma4Tiny" and general.size_label, which gem also writes.
# Results go to stdout and build/convert-golden/report.txt.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
R=.ref/llama.cpp
[ -f "$R/convert_hf_to_gguf.py" ] || { echo "reference missing: .ref/llama.cpp (bench/reference/build.sh)" >&2; exit 1; }
python3 -c "import torch, numpy, transformers" || { echo "needs torch, numpy and transformers" >&2; exit 1; }
make -s gem
out=build/convert-golden
rm -rf "$out"
mkdir -p "$out"
report=$out/report.txt
: > "$report"
pass=0 fail=0
./gem synth --profile gemma4-tiny --type f32 --seed 3 -o "$out/f32.gguf" 2>/dev/null
./gem synth --profile gemma4-tiny --type bf16 --seed 3 -o "$out/bf16.gguf" 2>/dev/null
mkdir -p "$out/single" "$out/bf16ck" "$out/sharded"
python3 tools/gguf_to_hf.py "$out/f32.gguf" "$out/single/gemma4tiny"
python3 tools/gguf_to_hf.py "$out/bf16.gguf" "$out/bf16ck/gemma4tiny"
python3 tools/gguf_to_hf.py "$out/f32.gguf" "$out/sharded/gemma4tiny" --shards 3 --order layers \
    --arch Gemma4ForConditionalGeneration

run_case() { # NAME DIR OUTTYPE(auto|f32|f16|bf16)
    name=$1 dir=$2 t=$3
    ref=$out/$name.ref.gguf gem=$out/$name.gem.gguf
    if ! python3 "$R/convert_hf_to_gguf.py" "$dir" --outfile "$ref" --outtype "$t" >"$out/$name.ref.log" 2>&1; then
        echo "$name: reference converter failed (see $out/$name.ref.log)" | tee -a "$report"
        tail -5 "$out/$name.ref.log" | tee -a "$report"
        fail=$((fail + 1))
        return
    fi
    set -- ./gem convert "$dir" -o "$gem"
    [ "$t" = auto ] || set -- "$@" --type "$t"
    if ! "$@" 2>"$out/$name.gem.log"; then
        echo "$name: gem convert failed: $(cat "$out/$name.gem.log")" | tee -a "$report"
        fail=$((fail + 1))
        return
    fi
    a=$(sha256sum "$ref" | cut -d' ' -f1)
    b=$(sha256sum "$gem" | cut -d' ' -f1)
    if [ "$a" = "$b" ]; then
        echo "$name: identical ($a)" | tee -a "$report"
        pass=$((pass + 1))
    else
        echo "$name: DIFFERENT (reference $a, gem $b)" | tee -a "$report"
        python3 tools/gguf_diff.py "$ref" "$gem" | tee -a "$report" || true
        fail=$((fail + 1))
    fi
}
run_case f32-to-f32 "$out/single/gemma4tiny" f32
run_case f32-to-f16 "$out/single/gemma4tiny" f16
run_case f32-to-bf16 "$out/single/gemma4tiny" bf16
run_case f32-auto "$out/single/gemma4tiny" auto
run_case bf16-auto "$out/bf16ck/gemma4tiny" auto
run_case sharded-mm-f32 "$out/sharded/gemma4tiny" f32
echo "convert_golden: $pass identical, $fail different" | tee -a "$report"
[ "$fail" = 0 ]
