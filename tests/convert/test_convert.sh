#!/bin/sh
# gem convert round trips: gem-synth models exported as Hugging Face
# checkpoints (tools/gguf_to_hf.py: single file, three shards in layer order,
# Gemma4ForConditionalGeneration nesting) convert back to the original GGUF:
# every key, type, value and key order, every tensor's bytes, tensor order
# as the reference converter gives it (rope_freqs, then shard by shard in
# name order); only general.size_label is new. f32 checkpoints converted to
# f16/bf16 equal the f16/bf16 synth files of the same seed (same rounding).
# Malformed checkpoints are refused with clear messages and leave no output.
GEM=${GEM:-./gem}
pass=0 fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ok() { pass=$((pass + 1)); }
ko() { fail=$((fail + 1)); echo "test_convert: FAIL $*" >&2; }
same() { # NAME A B [gguf_diff options]
    what=$1 a=$2 b=$3
    shift 3
    if python3 tools/gguf_diff.py "$a" "$b" "$@" >"$tmp/diff" 2>&1; then ok; else ko "$what: $(cat "$tmp/diff")"; fi
}
for t in f32 f16 bf16; do
    $GEM synth --profile gemma4-tiny --type $t --seed 3 -o "$tmp/$t.gguf" 2>/dev/null || ko "synth $t"
done
name() { echo "gem synth gemma4-tiny $1 seed 3"; }

# 1. single file, f32 kept
python3 tools/gguf_to_hf.py "$tmp/f32.gguf" "$tmp/hf32"
$GEM convert "$tmp/hf32" -o "$tmp/c.gguf" --type f32 --name "$(name f32)" 2>"$tmp/err" || ko "convert f32: $(cat "$tmp/err")"
same "f32 round trip" "$tmp/f32.gguf" "$tmp/c.gguf" --ignore general.size_label
label=$(python3 -c "import sys; sys.path.insert(0, 'tools'); from gguf_py import GGUF; print(GGUF(sys.argv[1]).value('general.size_label'))" "$tmp/c.gguf")
[ "$label" = 75M ] && ok || ko "size label $label"
# the default name is the folder name in title case
$GEM convert "$tmp/hf32" -o "$tmp/c.gguf" --type f32 -t 1 2>/dev/null
n=$(python3 -c "import sys; sys.path.insert(0, 'tools'); from gguf_py import GGUF; print(GGUF(sys.argv[1]).value('general.name'))" "$tmp/c.gguf")
[ "$n" = Hf32 ] && ok || ko "default name '$n'"

# 2. three shards in layer order, multimodal nesting with a vision tensor
python3 tools/gguf_to_hf.py "$tmp/f32.gguf" "$tmp/hfs" --shards 3 --order layers --arch Gemma4ForConditionalGeneration
$GEM convert "$tmp/hfs" -o "$tmp/c.gguf" --type f32 --name "$(name f32)" -t 3 2>"$tmp/err" || ko "convert shards: $(cat "$tmp/err")"
same "sharded round trip (content)" "$tmp/f32.gguf" "$tmp/c.gguf" --ignore general.size_label --any-order
python3 - "$tmp/hfs" "$tmp/c.gguf" <<'PY' && ok || ko "sharded tensor order"
import json, os, re, sys
sys.path.insert(0, "tools")
from gguf_py import GGUF
from gguf_to_hf import LAYER
back = {v: k for k, v in LAYER.items()}
d = sys.argv[1]
wm = json.load(open(os.path.join(d, "model.safetensors.index.json")))["weight_map"]
want = ["rope_freqs.weight"]
for shard in sorted(set(wm.values())):
    for n in sorted(k for k in wm if wm[k] == shard):
        if "vision" in n:
            continue
        n = n.replace("language_model.", "")
        if n == "model.embed_tokens.weight": want.append("token_embd.weight")
        elif n == "model.norm.weight": want.append("output_norm.weight")
        else:
            m = re.fullmatch(r"model\.layers\.(\d+)\.(.+)", n)
            want.append(f"blk.{m.group(1)}.{back[m.group(2)]}.weight")
got = [t[0] for t in GGUF(sys.argv[2]).tensors]
sys.exit(0 if got == want else 1)
PY

# 3. f32 checkpoint to f16 (the reference's "auto" for f32) and to bf16
$GEM convert "$tmp/hf32" -o "$tmp/c.gguf" --name "$(name f16)" 2>/dev/null
same "f32 -> f16 (auto)" "$tmp/f16.gguf" "$tmp/c.gguf" --ignore general.size_label
$GEM convert "$tmp/hf32" -o "$tmp/c.gguf" --type bf16 --name "$(name bf16)" 2>/dev/null
same "f32 -> bf16" "$tmp/bf16.gguf" "$tmp/c.gguf" --ignore general.size_label
# 4. a bf16 checkpoint stays bf16 by default
python3 tools/gguf_to_hf.py "$tmp/bf16.gguf" "$tmp/hfb"
$GEM convert "$tmp/hfb" -o "$tmp/c.gguf" --name "$(name bf16)" 2>/dev/null
same "bf16 round trip (auto)" "$tmp/bf16.gguf" "$tmp/c.gguf" --ignore general.size_label
rm -f "$tmp/c.gguf"

# ---- refusals ----
expect_fail() { # WHAT MESSAGE STATUS DIR [options]
    what=$1 msg=$2 status=$3 dir=$4
    shift 4
    rm -f "$tmp/bad.gguf"
    $GEM convert "$dir" -o "$tmp/bad.gguf" "$@" 2>"$tmp/err"
    rc=$?
    if [ "$rc" = "$status" ] && grep -qF -- "$msg" "$tmp/err" && [ ! -e "$tmp/bad.gguf" ]; then ok; else
        ko "$what: exit $rc, stderr: $(cat "$tmp/err")"
    fi
}
# a copy of the single-file checkpoint to damage: mk links the weights,
# mkc copies them (for the cases that edit the safetensors file)
mk() { rm -rf "$tmp/x"; mkdir "$tmp/x"; cp "$tmp/hf32"/*.json "$tmp/x/"; ln "$tmp/hf32/model.safetensors" "$tmp/x/"; }
mkc() { mk; rm "$tmp/x/model.safetensors"; cp "$tmp/hf32/model.safetensors" "$tmp/x/"; }
edit_json() { # FILE PYTHON-EXPR-ON-d
    python3 -c "import json, sys; d = json.load(open(sys.argv[1])); $2; json.dump(d, open(sys.argv[1], 'w'))" "$1"
}
patch_header() { # FILE OLD NEW (same length)
    python3 -c "
import struct, sys
p, old, new = sys.argv[1], sys.argv[2].encode(), sys.argv[3].encode()
assert len(old) == len(new)
with open(p, 'r+b') as f:
    n = struct.unpack('<Q', f.read(8))[0]; h = f.read(n)
    assert old in h, old
    f.seek(8); f.write(h.replace(old, new, 1))" "$@"
}
$GEM convert "$tmp/hf32" 2>"$tmp/err"
[ $? = 2 ] && grep -q "usage: gem convert HF_DIR -o FILE.gguf" "$tmp/err" && ok || ko "usage"
expect_fail "missing value" "missing value for: --name" 2 "$tmp/hf32" --name
expect_fail "bad type" "--type must be f32, bf16 or f16: q8_0" 2 "$tmp/hf32" --type q8_0
expect_fail "not a folder" "not a folder" 1 "$tmp/none"
mk; rm "$tmp/x/config.json"
expect_fail "no config" "config.json: cannot open" 1 "$tmp/x"
mk; edit_json "$tmp/x/config.json" "d['architectures'] = ['LlamaForCausalLM']"
expect_fail "other architecture" "unsupported architecture 'LlamaForCausalLM' (gem converts Gemma4ForCausalLM" 1 "$tmp/x"
mk; edit_json "$tmp/x/config.json" "d['num_experts'] = 128"
expect_fail "MoE" "Gemma 4 MoE (num_experts 128) is not supported" 1 "$tmp/x"
mk; edit_json "$tmp/x/config.json" "d['hidden_size_per_layer_input'] = 256"
expect_fail "per-layer embeddings" "Gemma 4 E2B/E4B (per-layer embeddings) is not supported" 1 "$tmp/x"
mk; edit_json "$tmp/x/config.json" "d['hidden_size'] = 300"
expect_fail "no profile" "6 layers of width 300 match no supported Gemma 4 profile" 1 "$tmp/x"
mk; edit_json "$tmp/x/config.json" "del d['layer_types']"
expect_fail "no layer types" "'layer_types' must list one type per layer (6)" 1 "$tmp/x"
mkc; patch_header "$tmp/x/model.safetensors" '"shape":[1024,256]' '"shape":[256,1024]'
expect_fail "shape mismatch" "tensor 'model.layers.0.self_attn.q_proj.weight' (blk.0.attn_q.weight) has shape [1024, 256] in GGUF order, profile gemma4-tiny needs [256, 1024]" 1 "$tmp/x"
mkc; patch_header "$tmp/x/model.safetensors" '"model.layers.0.mlp.up_proj.weight":{"dtype":"F32"' '"model.layers.0.mlp.up_proj.weight":{"dtype":"I32"'
expect_fail "wrong dtype" "tensor 'model.layers.0.mlp.up_proj.weight' has dtype I32 (gem converts F32, F16 and BF16)" 1 "$tmp/x"
mkc; patch_header "$tmp/x/model.safetensors" 'model.layers.0.mlp.up_proj.weight' 'model.layers.0.mlp.xx_proj.weight'
expect_fail "unknown tensor" "tensor 'model.layers.0.mlp.xx_proj.weight' is not part of a dense Gemma 4 text model" 1 "$tmp/x"
mkc; patch_header "$tmp/x/model.safetensors" 'model.layers.5.self_attn.q_norm.weight' 'model.layers.5.self_attn.v_norm.weight'
expect_fail "unknown norm" "tensor 'model.layers.5.self_attn.v_norm.weight' is not part" 1 "$tmp/x"
mkc; truncate -s -100 "$tmp/x/model.safetensors"
expect_fail "truncated shard" "model.safetensors: safetensors header: tensor 'model.norm.weight': data_offsets" 1 "$tmp/x"
mkc; printf 'short' > "$tmp/x/model.safetensors"
expect_fail "no header" "not a safetensors file (5 bytes, no header length)" 1 "$tmp/x"
mk; rm "$tmp/x/tokenizer.json"
expect_fail "no tokenizer" "tokenizer.json: cannot open" 1 "$tmp/x"
mk; edit_json "$tmp/x/tokenizer.json" "d['model']['type'] = 'Unigram'"
expect_fail "other tokenizer" "not a byte-fallback BPE tokenizer" 1 "$tmp/x"
mk; edit_json "$tmp/x/config.json" "d['rms_norm_eps'] = 1e-5"
expect_fail "outside the contract" "does not meet the Gemma 4 contract" 1 "$tmp/x" --type f32
# shards: one missing, an index naming a path outside the folder
rm -rf "$tmp/y"; cp -r "$tmp/hfs" "$tmp/y"; rm "$tmp/y/model-00002-of-00003.safetensors"
expect_fail "missing shard" "model-00002-of-00003.safetensors: cannot open" 1 "$tmp/y"
rm -rf "$tmp/y"; cp -r "$tmp/hfs" "$tmp/y"
edit_json "$tmp/y/model.safetensors.index.json" "d['weight_map']['model.language_model.norm.weight'] = '../model.safetensors'"
expect_fail "index path" "is not a file name in the folder" 1 "$tmp/y"
rm -rf "$tmp/y"; cp -r "$tmp/hfs" "$tmp/y"
edit_json "$tmp/y/model.safetensors.index.json" "d['weight_map']['model.language_model.extra.weight'] = 'model-00001-of-00003.safetensors'"
expect_fail "index lists a tensor no shard has" "tensor 'model.language_model.extra.weight' of model.safetensors.index.json is in no shard" 1 "$tmp/y"
rm -rf "$tmp/y"; cp -r "$tmp/hfs" "$tmp/y"
edit_json "$tmp/y/model.safetensors.index.json" "del d['weight_map']['model.language_model.norm.weight']"
expect_fail "shard has a tensor the index lacks" "tensor 'model.language_model.norm.weight' is not in model.safetensors.index.json" 1 "$tmp/y"
rm -rf "$tmp/x" "$tmp/y"
$GEM convert "$tmp/hf32" -o "$tmp/nodir/out.gguf" 2>"$tmp/err"
[ $? = 1 ] && grep -q "cannot create" "$tmp/err" && ok || ko "unwritable output"

echo "test_convert: $pass passed, $fail failed"
[ "$fail" = 0 ]
