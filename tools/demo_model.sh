#!/bin/sh
# The demo model, end to end (models/README.md records what it produced).
#
#   tools/demo_model.sh data     # corpus from Debian packages -> build/demo (here)
#   tools/demo_model.sh train    # on the GPU machine: build/demo -> build/demo/trained
#   tools/demo_model.sh build    # here: checkpoint -> GGUF f32/q8_0/q4_0, perplexity,
#                                # models/gemma4-demo-q4_0.gguf.gz
#   tools/demo_model.sh mtp-train   # GPU machine: the MTP drafter against the shipped
#                                   # target -> build/demo/mtp (tools/train_demo_mtp.py)
#   tools/demo_model.sh mtp-build   # here: -> GGUF f32/q4_0, models/gemma4-demo-mtp-q4_0.gguf.gz
#
# train needs torch and transformers (the H200 machine; about 4 minutes);
# data and build need only python3, apt-get, dpkg and ./gem. build also runs
# the reference's llama-perplexity when .ref holds it (bench/reference/build.sh).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
d=build/demo
case "${1:-}" in
data)
    make -s gem
    python3 tools/demo_corpus.py "$d" ;;
train)
    python3 tools/train_demo.py "$d" "$d/trained" --steps 1500 --seed 1234 --max-seconds 300 ;;
build)
    make -s gem
    [ -f "$d/trained/demo.safetensors" ] || { echo "no $d/trained/demo.safetensors: run the train step" >&2; exit 1; }
    ./gem synth --profile gemma4-demo --type bf16 --seed 1 -o "$d/template.gguf" >/dev/null
    rm -rf "$d/template" "$d/hf"
    python3 tools/gguf_to_hf.py "$d/template.gguf" "$d/template/gemma4demo"
    python3 tools/demo_assemble.py "$d/trained/demo.safetensors" "$d/template/gemma4demo" "$d/hf/gemma4demo"
    ./gem convert "$d/hf/gemma4demo" -o "$d/demo-f32.gguf" --type f32 --name "gem demo"
    ./gem quantize "$d/demo-f32.gguf" "$d/demo-q8_0.gguf" --type q8_0
    ./gem quantize "$d/demo-f32.gguf" "$d/demo-q4_0.gguf" --type q4_0 --embd-type q4_0
    ref=.ref/llama.cpp/build-cpu/bin/llama-perplexity
    for t in f32 q8_0 q4_0; do
        ./gem perplexity -m "$d/demo-$t.gguf" -f "$d/test.txt" -c 512 --json "$d/gem-ppl-$t.json" | tail -1
        if [ -x "$ref" ]; then
            "$ref" -m "$d/demo-$t.gguf" -f "$d/test.txt" -c 512 -ctk f32 -ctv f32 2>&1 | grep "Final estimate" |
                sed 's/.*Final/reference: Final/' | tee "$d/ref-ppl-$t.txt"
        fi
    done
    mkdir -p models
    gzip -9n -c "$d/demo-q4_0.gguf" > models/gemma4-demo-q4_0.gguf.gz
    sha256sum "$d/trained/demo.safetensors" "$d"/demo-*.gguf models/gemma4-demo-q4_0.gguf.gz ;;
mtp-train)
    make -s data/models/default.gguf
    python3 tools/train_demo_mtp.py "$d" data/models/default.gguf "$d/mtp" --seed 1234 --max-seconds 240 ;;
mtp-build)
    make -s gem
    [ -f "$d/mtp/mtp.safetensors" ] || { echo "no $d/mtp/mtp.safetensors: run the mtp-train step" >&2; exit 1; }
    ./gem synth --profile gemma4-demo-assistant --type bf16 --seed 1 -o "$d/mtp-template.gguf" >/dev/null
    rm -rf "$d/mtp-template" "$d/mtp-hf"
    python3 tools/gguf_to_hf.py "$d/mtp-template.gguf" "$d/mtp-template"
    python3 tools/demo_assemble.py "$d/mtp/mtp.safetensors" "$d/mtp-template" "$d/mtp-hf"
    ./gem convert "$d/mtp-hf" -o "$d/mtp-f32.gguf" --type f32 --name "gem demo drafter"
    ./gem quantize "$d/mtp-f32.gguf" "$d/mtp-q4_0.gguf" --type q4_0 --embd-type q4_0
    mkdir -p models
    gzip -9n -c "$d/mtp-q4_0.gguf" > models/gemma4-demo-mtp-q4_0.gguf.gz
    sha256sum "$d/mtp/mtp.safetensors" "$d"/mtp-*.gguf models/gemma4-demo-mtp-q4_0.gguf.gz ;;
*)
    echo "usage: $0 data|train|build|mtp-train|mtp-build" >&2
    exit 2 ;;
esac
