#!/usr/bin/env python3
"""transformers logit oracle for gem (run on the GPU machine, where
transformers and torch are installed).

Reads an F32 Gemma 4 GGUF written by `gem synth`, builds the same model as
Gemma4ForCausalLM (float32, eager attention) from it, evaluates the prompt
ids and writes a compact golden that gem's tests compare with:

  magic "GEMHF1\\0\\0", u32 n_pos, u32 n_sub, u32 n_top,
  i32 prompt[n_pos], i32 sub_ids[n_sub],
  per position: i32 argmax, f32 max, f32 margin (top-2),
                f32 logits[n_sub] (at sub_ids), i32 top_ids[n_top], f32 top[n_top]

usage: hf_golden.py MODEL.gguf OUT.bin ID ID ...
"""
import struct
import sys

import numpy as np
import torch

GGUF_TYPES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def read_gguf(path):
    data = open(path, "rb").read()
    pos = 0

    def u32():
        nonlocal pos
        v = struct.unpack_from("<I", data, pos)[0]
        pos += 4
        return v

    def u64():
        nonlocal pos
        v = struct.unpack_from("<Q", data, pos)[0]
        pos += 8
        return v

    def string():
        nonlocal pos
        n = u64()
        s = data[pos:pos + n]
        pos += n
        return s.decode("utf-8", "replace")

    def value(t):
        nonlocal pos
        if t == 8:
            return string()
        if t == 9:
            et, n = u32(), u64()
            return [value(et) for _ in range(n)] if et == 8 or n < 4096 else skip_array(et, n)
        size = GGUF_TYPES[t]
        fmt = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}[t]
        v = struct.unpack_from(fmt, data, pos)[0]
        pos += size
        return v

    def skip_array(et, n):
        nonlocal pos
        pos += GGUF_TYPES[et] * n
        return None

    assert data[:4] == b"GGUF"
    pos = 4
    u32()
    n_t, n_kv = u64(), u64()
    kv = {}
    for _ in range(n_kv):
        k = string()
        kv[k] = value(u32())
    infos = []
    for _ in range(n_t):
        name = string()
        nd = u32()
        ne = [u64() for _ in range(nd)]
        ty = u32()
        off = u64()
        infos.append((name, ne, ty, off))
    align = kv.get("general.alignment", 32)
    base = (pos + align - 1) // align * align
    tensors = {}
    for name, ne, ty, off in infos:
        n = int(np.prod(ne))
        tensors[name] = dequant(data, ty, n, base + off, name).reshape(list(reversed(ne)))  # torch: [out, in]
    return kv, tensors


def dequant(data, ty, n, off, name):
    """f32 values of a tensor of type ty (F32, F16, BF16, Q8_0, Q4_0: what
    gem synth, convert and quantize write for these oracles)."""
    if ty == 0:
        return np.frombuffer(data, dtype=np.float32, count=n, offset=off)
    if ty == 1:
        return np.frombuffer(data, dtype="<f2", count=n, offset=off).astype(np.float32)
    if ty == 30:
        u = np.frombuffer(data, dtype="<u2", count=n, offset=off).astype(np.uint32) << 16
        return u.view(np.float32)
    if ty in (2, 8):  # Q4_0: f16 d + 16 nibble bytes; Q8_0: f16 d + 32 int8
        bs = 18 if ty == 2 else 34
        blk = np.frombuffer(data, dtype=np.uint8, count=n // 32 * bs, offset=off).reshape(-1, bs)
        d = blk[:, :2].copy().view("<f2").astype(np.float32)
        if ty == 2:
            qs = blk[:, 2:]
            q = np.concatenate([(qs & 15).astype(np.int8) - 8, (qs >> 4).astype(np.int8) - 8], axis=1)
        else:
            q = blk[:, 2:].view(np.int8)
        return (q.astype(np.float32) * d).reshape(-1)
    raise AssertionError(f"{name}: tensor type {ty} is not supported by this oracle")


def main():
    path, out = sys.argv[1], sys.argv[2]
    ids = [int(x) for x in sys.argv[3:]]
    kv, t = read_gguf(path)
    from transformers import Gemma4ForCausalLM, Gemma4TextConfig

    L = kv["gemma4.block_count"]
    swa = kv["gemma4.attention.sliding_window_pattern"]
    kvh = kv["gemma4.attention.head_count_kv"]
    full = [i for i in range(L) if not swa[i]]
    layer_types = ["sliding_attention" if s else "full_attention" for s in swa]
    cfg = Gemma4TextConfig(
        vocab_size=262144, hidden_size=kv["gemma4.embedding_length"], intermediate_size=kv["gemma4.feed_forward_length"],
        num_hidden_layers=L, num_attention_heads=kv["gemma4.attention.head_count"],
        num_key_value_heads=kvh[0], head_dim=256, sliding_window=kv["gemma4.attention.sliding_window"],
        layer_types=layer_types, final_logit_softcapping=30.0, hidden_size_per_layer_input=0,
        attention_k_eq_v=True, num_kv_shared_layers=0, enable_moe_block=False, use_double_wide_mlp=False,
        tie_word_embeddings=True, rms_norm_eps=1e-6, max_position_embeddings=kv["gemma4.context_length"],
        per_layer_config={f"{i:02d}": {"head_dim": 512, "num_key_value_heads": kvh[i]} for i in full},
        global_head_dim=512, num_global_key_value_heads=kvh[full[0]])
    torch.manual_seed(0)
    model = Gemma4ForCausalLM(cfg).to(torch.float32)
    model.config._attn_implementation = "eager"
    for m in model.modules():
        if hasattr(m, "config") and hasattr(m.config, "_attn_implementation"):
            m.config._attn_implementation = "eager"
    names = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
             "self_attn.k_norm": "attn_k_norm", "post_attention_layernorm": "post_attention_norm",
             "pre_feedforward_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down", "post_feedforward_layernorm": "post_ffw_norm", "layer_scalar": "layer_output_scale"}
    sd = model.state_dict()
    used, missing = set(), []
    with torch.no_grad():
        for k, v in sd.items():
            g = None
            if k.endswith("embed_tokens.weight"):
                g = "token_embd.weight"
            elif k.endswith("model.norm.weight") or k == "norm.weight":
                g = "output_norm.weight"
            elif ".layers." in k:
                rest = k.split(".layers.", 1)[1]
                il, sub = rest.split(".", 1)
                sub = sub[:-len(".weight")] if sub.endswith(".weight") else sub
                if sub in names:
                    g = f"blk.{il}.{names[sub]}.weight"
            if g is None or g not in t:
                missing.append(k)
                continue
            src = torch.from_numpy(t[g].copy()).reshape(v.shape)
            v.copy_(src)
            used.add(g)
    print("hf params without a gguf source:", missing)
    print("gguf tensors not used:", sorted(set(t) - used))
    for k, v in model.named_buffers():
        if "embed_scale" in k:
            print(k, float(v.reshape(-1)[0]))
    model.eval()
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float().numpy()
    n_pos = logits.shape[0]
    sub = np.arange(0, 262144, 128, dtype=np.int32)
    n_top = 16
    with open(out, "wb") as f:
        f.write(b"GEMHF1\0\0")
        f.write(struct.pack("<III", n_pos, len(sub), n_top))
        f.write(np.asarray(ids, dtype=np.int32).tobytes())
        f.write(sub.tobytes())
        for p in range(n_pos):
            l = logits[p]
            top = np.argsort(-l, kind="stable")[:n_top].astype(np.int32)
            f.write(struct.pack("<iff", int(top[0]), float(l[top[0]]), float(l[top[0]] - l[top[1]])))
            f.write(l[sub].astype(np.float32).tobytes())
            f.write(top.tobytes())
            f.write(l[top].astype(np.float32).tobytes())
    margins = [float(np.sort(logits[p])[-1] - np.sort(logits[p])[-2]) for p in range(n_pos)]
    print(f"wrote {out}: {n_pos} positions, logit range [{logits.min():.3f}, {logits.max():.3f}], "
          f"min top-2 margin {min(margins):.5f}")


if __name__ == "__main__":
    main()
