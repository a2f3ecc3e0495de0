#!/usr/bin/env python3
"""Transformers goldens for gem's Qwen3.5 model (tests/model/test_qwen35_hf.c).

Builds a tiny random Qwen3.5 model with transformers' own classes
(Qwen3_5Config / Qwen3_5ForConditionalGeneration, the class the published
27B uses) whose text tower has the shape of gem's `qwen35-tiny` profile,
saves it as a Hugging Face folder, and writes the float32 logits of every
position of a fixed id prompt. Self-contained: no network, no tokenizer
(the prompt is ids), fixed seed, float32 on the CPU with the pure-torch
Gated DeltaNet, conv and norm paths (the fused kernels of
flash-linear-attention / causal-conv1d are switched off when installed).

Run from the repository root on a machine with PyTorch and transformers
(written against 5.17):

    python3 tests/data/qwen35/make_goldens.py

It writes, next to itself (under 2 MB in all):
    hf-tiny/config.json, hf-tiny/model.safetensors   the checkpoint
    logits-tiny.bin                                   the goldens
logits-tiny.bin: b"GEMQ35G1", u32 n_pos, u32 n_vocab, i32 ids[n_pos],
f32 logits[n_pos][n_vocab] (little-endian).
"""
import json
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.join(HERE, "hf-tiny")
OUT_BIN = os.path.join(HERE, "logits-tiny.bin")
SEED = 20260521
N_POS = 130  # three 64-token Gated DeltaNet chunks (the last partial); 3 tiles of 48 in the test

# gem's qwen35-tiny profile (src/model/qwen35.c): keep in step with it
TEXT = dict(
    vocab_size=512,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=4,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=64,
    linear_conv_kernel_dim=4,
    linear_key_head_dim=64,
    linear_value_head_dim=64,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    rms_norm_eps=1e-6,
    max_position_embeddings=4096,
    tie_word_embeddings=False,
    layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
    rope_parameters={
        "rope_type": "default",
        "rope_theta": 10000000.0,
        "partial_rotary_factor": 0.25,
        "mrope_section": [2, 3, 3],
        "mrope_interleaved": True,
    },
)
# the smallest vision tower the class accepts: its weights are dropped by the
# converter, it only has to exist so the checkpoint has the real layout
VISION = dict(
    depth=1,
    hidden_size=16,
    intermediate_size=32,
    num_heads=2,
    patch_size=2,
    temporal_patch_size=2,
    spatial_merge_size=2,
    out_hidden_size=64,
    num_position_embeddings=16,
)


def die(msg):
    print("make_goldens.py: FAILED: " + msg, file=sys.stderr)
    sys.exit(1)


def main():
    try:
        import torch
        import transformers
    except Exception as e:  # noqa: BLE001
        die("needs torch and transformers: %r" % (e,))
    print("python", sys.version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__)
    if not transformers.__version__.startswith("5."):
        print("warning: written against transformers 5.17, running", transformers.__version__)
    for name in ("Qwen3_5Config", "Qwen3_5ForConditionalGeneration"):
        if not hasattr(transformers, name):
            die("transformers %s has no %s" % (transformers.__version__, name))
    try:
        import transformers.models.qwen3_5.modeling_qwen3_5 as M
    except Exception as e:  # noqa: BLE001
        die("cannot import transformers.models.qwen3_5.modeling_qwen3_5: %r" % (e,))
    for fn in ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule"):
        if not hasattr(M, fn):
            die("modeling_qwen3_5 has no %s" % fn)
    # the pure-torch paths: the fused kernels are not float32-exact. In
    # transformers 5.x the module's causal_conv1d_fn / causal_conv1d_update
    # are its own torch functions (a hub kernel replaces them only where
    # one is installed and enabled, and this machine has no network):
    # only names bound to an imported fused kernel are cleared.
    os.environ.setdefault("USE_HUB_KERNELS", "0")
    for name in ("causal_conv1d_fn", "causal_conv1d_update", "chunk_gated_delta_rule",
                 "fused_recurrent_gated_delta_rule", "FusedRMSNormGated"):
        f = getattr(M, name, None)
        mod = getattr(f, "__module__", "") or ""
        if f is not None and (mod.startswith("fla") or mod.startswith("causal_conv1d")):
            setattr(M, name, None)
        print("modeling_qwen3_5.%s: %r (module %s)" % (name, f, mod))
    if hasattr(M, "is_fast_path_available"):
        M.is_fast_path_available = False

    torch.manual_seed(SEED)
    cfg = transformers.Qwen3_5Config(text_config=dict(TEXT), vision_config=dict(VISION), tie_word_embeddings=False)
    tc = cfg.text_config
    for k, v in TEXT.items():
        if k in ("rope_parameters",):
            continue
        if getattr(tc, k, None) != v:
            die("text_config.%s is %r, wanted %r" % (k, getattr(tc, k, None), v))
    cls = transformers.Qwen3_5ForConditionalGeneration
    try:
        model = cls._from_config(cfg, dtype=torch.float32, attn_implementation="eager")
    except TypeError:  # transformers before the dtype rename
        model = cls._from_config(cfg, torch_dtype=torch.float32, attn_implementation="eager")
    model = model.float()
    model.eval()

    # deterministic weights of useful magnitudes (the init's tiny ones would
    # make every logit near zero and the comparison meaningless)
    g = torch.Generator().manual_seed(SEED)

    def uni(shape, lo, hi):
        return torch.rand(shape, generator=g, dtype=torch.float32) * (hi - lo) + lo

    n_gdn = 0
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if name.endswith("A_log"):
                p.copy_(torch.log(uni(p.shape, 0.1, 1.0)))
                n_gdn += 1
            elif name.endswith("dt_bias"):
                p.copy_(uni(p.shape, -1.0, 0.0))
            elif "conv1d" in name and "linear_attn" in name:
                p.copy_(uni(p.shape, -0.5, 0.5))
            elif name.endswith("linear_attn.norm.weight"):
                p.copy_(uni(p.shape, 0.75, 1.25))  # plain weight
            elif name.endswith("norm.weight"):
                p.copy_(uni(p.shape, -0.25, 0.25))  # zero-centred: used as 1 + w
            elif p.dim() >= 2:
                a = (3.0 / p.shape[-1]) ** 0.5
                p.copy_(uni(p.shape, -a, a))
            else:
                p.copy_(uni(p.shape, -0.1, 0.1))
    if n_gdn != 3:
        die("expected 3 Gated DeltaNet layers, found %d A_log parameters" % n_gdn)
    # the torch paths in every GDN layer (attributes bound at construction)
    for mod in model.modules():
        if hasattr(mod, "chunk_gated_delta_rule"):
            mod.chunk_gated_delta_rule = M.torch_chunk_gated_delta_rule
            mod.recurrent_gated_delta_rule = M.torch_recurrent_gated_delta_rule
            if hasattr(mod, "causal_conv1d_fn"):
                mod.causal_conv1d_fn = None
            if hasattr(M, "Qwen3_5RMSNormGated") and not isinstance(mod.norm, M.Qwen3_5RMSNormGated):
                die("the GDN norm is %s, not the torch Qwen3_5RMSNormGated" % type(mod.norm).__name__)

    ids = torch.randint(0, TEXT["vocab_size"], (1, N_POS), generator=g)
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=False)
    logits = out.logits.float()
    if tuple(logits.shape) != (1, N_POS, TEXT["vocab_size"]):
        die("logits have shape %s" % (tuple(logits.shape),))
    if not torch.isfinite(logits).all():
        die("non-finite logits")
    print("logits: max |x| %.3f, std %.3f" % (logits.abs().max().item(), logits.std().item()))
    # the token-by-token recurrent path agrees (a check of the oracle itself)
    with torch.no_grad():
        half = model(input_ids=ids[:, :N_POS // 2], use_cache=False).logits
    d = (half - logits[:, :N_POS // 2]).abs().max().item()
    print("prefix consistency: max |diff| %.3g" % d)
    if d > 1e-4:
        die("the model's logits depend on the prompt's suffix (%g): not causal?" % d)

    os.makedirs(OUT_DIR, exist_ok=True)
    model.save_pretrained(OUT_DIR, safe_serialization=True)
    for extra in ("generation_config.json",):
        pth = os.path.join(OUT_DIR, extra)
        if os.path.exists(pth):
            os.remove(pth)
    st = os.path.join(OUT_DIR, "model.safetensors")
    if not os.path.exists(st):
        die("save_pretrained wrote no single model.safetensors: %s" % os.listdir(OUT_DIR))
    from safetensors import safe_open
    with safe_open(st, "pt") as f:
        names = sorted(f.keys())
        for n in names:
            if not (n.startswith("model.language_model.") or n.startswith("model.visual.") or n == "lm_head.weight"):
                die("unexpected tensor name in the checkpoint: %s" % n)
        conv = [n for n in names if n.endswith("linear_attn.conv1d.weight")]
        if not conv or tuple(f.get_slice(conv[0]).get_shape()) != (512, 1, 4):
            die("conv1d weight %s has shape %s" % (conv[:1], conv and f.get_slice(conv[0]).get_shape()))
    with open(os.path.join(OUT_DIR, "config.json")) as fh:
        saved = json.load(fh)
    if saved.get("architectures") != ["Qwen3_5ForConditionalGeneration"]:
        die("config.json architectures: %r" % saved.get("architectures"))

    with open(OUT_BIN, "wb") as fh:
        fh.write(b"GEMQ35G1")
        fh.write(struct.pack("<II", N_POS, TEXT["vocab_size"]))
        fh.write(struct.pack("<%di" % N_POS, *ids[0].tolist()))
        fh.write(logits[0].contiguous().numpy().astype("<f4").tobytes())
    total = sum(os.path.getsize(os.path.join(OUT_DIR, x)) for x in os.listdir(OUT_DIR)) + os.path.getsize(OUT_BIN)
    print("wrote %s (%s) and %s: %d bytes in all" % (OUT_DIR, ", ".join(sorted(os.listdir(OUT_DIR))), OUT_BIN, total))
    if total > 2 * 1000 * 1000:
        die("the goldens take %d bytes, more than the 2 MB budget" % total)


if __name__ == "__main__":
    main()
