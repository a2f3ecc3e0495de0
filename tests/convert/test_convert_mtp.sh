#!/bin/sh
# gem convert of MTP drafters: a gem-synth gemma4-tiny-assistant exported as
# a Hugging Face Gemma4AssistantForCausalLM checkpoint (tools/gguf_to_hf.py)
# converts back to the synth file: every key, type, value and key order
# (the reference converter's Gemma4AssistantModel: the target's keys under
# gemma4-assistant., then embedding_length_out and nextn_predict_layers),
# every tensor's bytes, the tensor order (rope_freqs, the text model, then
# the top-level post_projection and pre_projection as nextn.*); only
# general.size_label is new, and the file passes the contract (gem
# inspect). Also: three shards in layer order, f32 to f16, the ordered-
# embedding tensors the reference strips, and the refusals.
GEM=${GEM:-./gem}
pass=0 fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ok() { pass=$((pass + 1)); }
ko() { fail=$((fail + 1)); echo "test_convert_mtp: FAIL $*" >&2; }
same() { # NAME A B [gguf_diff options]
    what=$1 a=$2 b=$3
    shift 3
    if python3 tools/gguf_diff.py "$a" "$b" "$@" >"$tmp/diff" 2>&1; then ok; else ko "$what: $(cat "$tmp/diff")"; fi
}
for t in f32 f16; do
    $GEM synth --profile gemma4-tiny-assistant --type $t --seed 3 -o "$tmp/$t.gguf" 2>/dev/null || ko "synth $t"
done
name() { echo "gem synth gemma4-tiny-assistant $1 seed 3"; }

# 1. single file, f32 kept: the synth file back, key and tensor order included
python3 tools/gguf_to_hf.py "$tmp/f32.gguf" "$tmp/hf" || ko "export"
python3 - "$tmp/hf" <<'PY' && ok || ko "HF names and config"
import json, os, struct, sys
d = sys.argv[1]
cfg = json.load(open(os.path.join(d, "config.json")))
t = cfg["text_config"]
assert cfg["architectures"] == ["Gemma4AssistantForCausalLM"] and cfg["model_type"] == "gemma4_assistant", cfg
assert cfg["backbone_hidden_size"] == 256 and t["num_kv_shared_layers"] == t["num_hidden_layers"] == 4, cfg
assert t["layer_types"] == ["sliding_attention"] * 3 + ["full_attention"] and t["final_logit_softcapping"] is None
with open(os.path.join(d, "model.safetensors"), "rb") as f:
    names = [k for k in json.loads(f.read(struct.unpack("<Q", f.read(8))[0])) if k != "__metadata__"]
assert "pre_projection.weight" in names and "post_projection.weight" in names, names
assert not [n for n in names if "k_proj" in n or "v_proj" in n or "k_norm" in n or "lm_head" in n], names
assert len(names) == 48, len(names)
PY
$GEM convert "$tmp/hf" -o "$tmp/c.gguf" --type f32 --name "$(name f32)" 2>"$tmp/err" || ko "convert f32: $(cat "$tmp/err")"
same "f32 round trip" "$tmp/f32.gguf" "$tmp/c.gguf" --ignore general.size_label
$GEM inspect "$tmp/c.gguf" >"$tmp/insp" 2>&1 && grep -q "verdict: *OK: supported (gemma4-tiny-assistant)" "$tmp/insp" && ok ||
    ko "inspect: $(cat "$tmp/insp")"

# 2. three shards in layer order: the same content, tensors shard by shard
python3 tools/gguf_to_hf.py "$tmp/f32.gguf" "$tmp/hfs" --shards 3 --order layers
$GEM convert "$tmp/hfs" -o "$tmp/c.gguf" --type f32 --name "$(name f32)" -t 3 2>"$tmp/err" || ko "convert shards: $(cat "$tmp/err")"
same "sharded round trip (content)" "$tmp/f32.gguf" "$tmp/c.gguf" --ignore general.size_label --any-order

# 2b. the full layers' shape as transformers 5 saves it: per_layer_config
# only (no global_head_dim / num_global_key_value_heads), keys unpadded
rm -rf "$tmp/p"; mkdir "$tmp/p"; cp "$tmp/hf"/*.json "$tmp/p/"; ln "$tmp/hf/model.safetensors" "$tmp/p/"
python3 -c "
import json, sys
d = json.load(open(sys.argv[1])); t = d['text_config']
del t['global_head_dim'], t['num_global_key_value_heads']
t['per_layer_config'] = {'3': {'head_dim': 512, 'num_key_value_heads': 1}}
json.dump(d, open(sys.argv[1], 'w'))" "$tmp/p/config.json"
$GEM convert "$tmp/p" -o "$tmp/c.gguf" --type f32 --name "$(name f32)" 2>"$tmp/err" || ko "convert per_layer_config: $(cat "$tmp/err")"
same "per_layer_config round trip" "$tmp/f32.gguf" "$tmp/c.gguf" --ignore general.size_label
rm -rf "$tmp/p"

# 3. f32 checkpoint to f16 (the reference's "auto" for f32)
$GEM convert "$tmp/hf" -o "$tmp/c.gguf" --name "$(name f16)" 2>/dev/null
same "f32 -> f16 (auto)" "$tmp/f16.gguf" "$tmp/c.gguf" --ignore general.size_label

# 4. the E2B/E4B drafters' ordered-embedding tensors are dropped, as the
# reference's converter drops them (it runs the dense head)
# with_tensors DIR NAME:DTYPE:D0xD1 ...: the single-file checkpoint plus zero tensors
with_tensors() {
    d=$1
    shift
    rm -rf "$d"; mkdir "$d"; cp "$tmp/hf"/*.json "$d/"
    python3 - "$tmp/hf/model.safetensors" "$d/model.safetensors" "$@" <<'PY'
import json, struct, sys
sys.path.insert(0, "tools")
from gguf_to_hf import write_safetensors
with open(sys.argv[1], "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    h = json.loads(f.read(n))
    data = f.read()
items = [(k, v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]])
         for k, v in h.items() if k != "__metadata__"]
for spec in sys.argv[3:]:
    name, dt, shape = spec.split(":")
    shape = [int(x) for x in shape.split("x")]
    n = 8 if dt == "I64" else 4
    for x in shape:
        n *= x
    items.append((name, dt, shape, bytes(n)))
write_safetensors(sys.argv[2], sorted(items))
PY
}
with_tensors "$tmp/m" masked_embedding.centroids.weight:F32:4x128 masked_embedding.token_ordering:I64:8
$GEM convert "$tmp/m" -o "$tmp/c.gguf" --type f32 --name "$(name f32)" 2>"$tmp/err" || ko "convert masked: $(cat "$tmp/err")"
same "masked_embedding dropped" "$tmp/f32.gguf" "$tmp/c.gguf" --ignore general.size_label
rm -f "$tmp/c.gguf"

# ---- refusals ----
expect_fail() { # WHAT MESSAGE DIR
    what=$1 msg=$2 dir=$3
    rm -f "$tmp/bad.gguf"
    $GEM convert "$dir" -o "$tmp/bad.gguf" --type f32 2>"$tmp/err"
    rc=$?
    if [ "$rc" = 1 ] && grep -qF -- "$msg" "$tmp/err" && [ ! -e "$tmp/bad.gguf" ]; then ok; else
        ko "$what: exit $rc, stderr: $(cat "$tmp/err")"
    fi
}
mk() { rm -rf "$tmp/x"; mkdir "$tmp/x"; cp "$tmp/hf"/*.json "$tmp/x/"; ln "$tmp/hf/model.safetensors" "$tmp/x/"; }
edit_json() { # FILE PYTHON-EXPR-ON-d
    python3 -c "import json, sys; d = json.load(open(sys.argv[1])); $2; json.dump(d, open(sys.argv[1], 'w'))" "$1"
}
mk; edit_json "$tmp/x/config.json" "d['text_config']['num_kv_shared_layers'] = 2"
expect_fail "partly shared" "num_kv_shared_layers 2: a Gemma 4 assistant shares all 4 layers" "$tmp/x"
mk; edit_json "$tmp/x/config.json" "del d['backbone_hidden_size']"
expect_fail "no backbone width" "missing 'backbone_hidden_size'" "$tmp/x"
mk; edit_json "$tmp/x/config.json" "d['backbone_hidden_size'] = 512"
expect_fail "no profile" "4 layers of width 128 for a target of width 512 match no supported Gemma 4 assistant profile" "$tmp/x"
mk; edit_json "$tmp/x/config.json" "del d['text_config']['global_head_dim'], d['text_config']['per_layer_config']"
expect_fail "no full-layer head size" "missing 'global_head_dim'" "$tmp/x"
mk; edit_json "$tmp/x/config.json" "d['use_ordered_embeddings'] = True"
expect_fail "ordered embeddings" "use_ordered_embeddings (the E2B/E4B drafters' sparse head) is not supported" "$tmp/x"
# a key projection (transformers ignores it in a shared layer; gem's drafter has none)
with_tensors "$tmp/x" model.layers.0.self_attn.k_proj.weight:F32:512x128
expect_fail "key projection" "is not in the gemma4-tiny-assistant manifest (a drafter's attention reads the target's caches" "$tmp/x"
rm -rf "$tmp/x" "$tmp/m"

echo "test_convert_mtp: $pass passed, $fail failed"
[ "$fail" = 0 ]
