#!/bin/sh
# Run on the GPU machine (it has transformers and torch): synthesizes the
# tiny models the parity test uses and writes transformers goldens into
# $OUT (or ./build/hf). Copy the results into tests/data/hf/.
set -eu
out=${OUT:-build/hf}
mkdir -p "$out"
make -s gem CUDA=0 >/dev/null
python3 -c "import transformers, torch; print('transformers', transformers.__version__, 'torch', torch.__version__)"
long=$(cat tests/data/parity/prompt-long.txt | ./gem tokenize -m data/vocab/gemma-4.gguf)
for seed in 21 22; do
    ./gem synth --profile gemma4-tiny --type f32 --seed $seed -o /tmp/hf-tiny-$seed.gguf 2>/dev/null
    python3 tools/hf_golden.py /tmp/hf-tiny-$seed.gguf "$out/gemma4-tiny-f32-seed$seed-long.bin" $long
done
