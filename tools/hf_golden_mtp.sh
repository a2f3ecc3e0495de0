#!/bin/sh
# Run on the GPU machine (it has transformers and torch): synthesizes the
# tiny target and drafter tests/model/test_hf_mtp.c uses (same profiles and
# seeds), exports both with gguf_to_hf.py (the oracle checks that the
# exports load as the models it builds) and writes the transformers golden
# for the drafter, and the evidence it printed, into $OUT (or ./build/hf).
# Copy the .bin into tests/data/hf/.
set -eu
out=${OUT:-build/hf}
mkdir -p "$out"
make -s -j"$(nproc)" gem CUDA=0 >/dev/null
python3 -c "import transformers, torch; print('transformers', transformers.__version__, 'torch', torch.__version__)"
# the first 70 tokens of the long parity prompt: over two sliding windows
ids=$(./gem tokenize -m data/vocab/gemma-4.gguf <tests/data/parity/prompt-long.txt | cut -d' ' -f1-70)
tmp=${TMPDIR:-/tmp}/hf-mtp
mkdir -p "$tmp"
./gem synth --profile gemma4-tiny --type f32 --seed 31 -o "$tmp/target.gguf" 2>/dev/null
./gem synth --profile gemma4-tiny-assistant --type f32 --seed 32 -o "$tmp/assistant.gguf" 2>/dev/null
python3 tools/gguf_to_hf.py "$tmp/target.gguf" "$tmp/target-hf"
python3 tools/gguf_to_hf.py "$tmp/assistant.gguf" "$tmp/assistant-hf"
# positions below the window (32), at its edge, and past it
python3 tools/hf_golden_mtp.py "$tmp/target.gguf" "$tmp/assistant.gguf" "$out/gemma4-tiny-mtp-f32-seed31-32.bin" \
    --info "$out/mtp-evidence.txt" --hf-target "$tmp/target-hf" --hf-assistant "$tmp/assistant-hf" \
    --pos 1,8,20,31,32,33,47,63,64,65,69 $ids
