#!/bin/sh
# Regenerates tests/data/quant/: blocks made by the pinned reference's
# llama-quantize from a gem-written F32 model, and the reference's own
# dequantization of them. Needs the reference built (bench/reference/build.sh cpu).
. "$(dirname "$0")/ref_env.sh"
make -s gem CUDA=0 >/dev/null; o=build/obj-cuda0/src
cc -O2 -Isrc -o "$tmp/patch_tensor" tools/patch_tensor.c $o/gguf/gguf.o $o/util/utf8.o \
   $o/quant/quant.o $o/util/err.o -lm; make -s gem
cc -O2 -I$R/ggml/include -o "$tmp/ref_dequant" tools/ref_dequant.c -L$bin -lggml-base -Wl,-rpath,"$root/$bin"
./gem synth --profile gemma4-tiny --type f32 --seed 7 -o "$tmp/in.gguf" 2>/dev/null
"$tmp/patch_tensor" "$tmp/in.gguf" blk.0.attn_q.weight
mkdir -p tests/data/quant
for t in Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K_S Q5_K_S Q6_K F16 BF16; do
    "$bin/llama-quantize" --pure "$tmp/in.gguf" "$tmp/$t.gguf" $t >/dev/null 2>&1
    name=$(echo $t | tr 'A-Z' 'a-z' | sed 's/_s$//')
    "$tmp/ref_dequant" "$tmp/$t.gguf" blk.0.attn_q.weight 32 "tests/data/quant/$name"
done
# the F32 input rows themselves (for conversion and, later, quantizer checks)
"$tmp/ref_dequant" "$tmp/in.gguf" blk.0.attn_q.weight 32 tests/data/quant/input
rm -f tests/data/quant/input.blocks
# row-quantizer goldens: the reference's quantization of special-pattern rows
# and of the synthetic input rows (tests/quant/test_quantize.c)
cc -O2 -I$R/ggml/include -o "$tmp/ref_quant" tools/ref_quant.c -L$bin -lggml-base -Wl,-rpath,"$root/$bin"
python3 tools/quant_rows.py tests/data/quant/rows.f32
"$tmp/ref_quant" tests/data/quant/rows.f32 tests/data/quant/rows
"$tmp/ref_quant" tests/data/quant/input.f32 tests/data/quant/input
