#!/usr/bin/env python3
"""transformers oracle for gem's MTP drafter (run on the GPU machine, where
transformers and torch are installed; the models are tiny and run on its CPU).

Reads two F32 GGUFs written by `gem synth`: a gemma4-tiny target, built as
Gemma4ForCausalLM, and a gemma4-tiny-assistant, built as
Gemma4AssistantForCausalLM (float32, eager attention). The target evaluates
the prompt once and returns its shared KV states (the last sliding and the
last full layer's keys and values, what the drafter's layers read) and its
final hidden states (after the output norm). For each position p the
drafter then runs at q_len 1 on (prompt[p], hidden after p-1) at position
p over the target's keys before p (step 1), and again on (step 1's argmax,
step 1's h_next) at the same position (step 2), in two variants:

  variant 0: the keys [0, p) as they are: transformers' own masks choose
             what the sliding layers see (its bidirectional sliding mask,
             |q - kv| <= W flipped onto the past, keeps the last W+1 keys:
             [p-W-1, p));
  variant 1: the sliding layers' keys cut to [p-W+1, p) first (W the
             window): what llama.cpp and gem let a query at p see.

Below the window both are the same input. The golden:

  magic "GEMMTP1\\0", u32 n_prompt, n_rec, n_sub, n_top, n_h, window,
  i32 prompt[n_prompt], i32 sub_ids[n_sub],
  per record: i32 variant, pos, step, token, argmax, f32 max, f32 margin (top-2),
              f32 logits[n_sub] (at sub_ids), i32 top_ids[n_top], f32 top[n_top],
              f32 h_next max |x|, f32 h_next sum, f32 h_next[0..n_h)

It also prints (and writes to INFO, when given) the evidence for the
window question: the mask transformers builds, a third variant with the
sliding keys cut to [p-W, p), and what a real assisted generate() hands the
drafter (positions, KV lengths, embedding scale, which hidden state).

usage: hf_golden_mtp.py TARGET.gguf ASSISTANT.gguf OUT.bin [--info FILE]
                        [--hf-target DIR] [--hf-assistant DIR] --pos P,P,... ID ID ...
(--hf-*: gguf_to_hf.py exports of the same files, loaded with
from_pretrained and checked against the models built here)
"""
import argparse
import inspect
import json
import os
import struct
import sys
import traceback

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_golden import read_gguf  # noqa: E402

INFO = []


def say(*a):
    s = " ".join(str(x) for x in a)
    print(s, flush=True)
    INFO.append(s)


LAYER = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
         "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
         "self_attn.k_norm": "attn_k_norm", "post_attention_layernorm": "post_attention_norm",
         "pre_feedforward_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
         "mlp.down_proj": "ffn_down", "post_feedforward_layernorm": "post_ffw_norm",
         "layer_scalar": "layer_output_scale"}


def gguf_name(k):
    """HF parameter name -> GGUF tensor name (None when unknown)."""
    if k in ("model.embed_tokens.weight", "lm_head.weight"):
        return "token_embd.weight"
    if k == "model.norm.weight":
        return "output_norm.weight"
    if k in ("pre_projection.weight", "post_projection.weight"):
        return "nextn." + k
    if k.startswith("model.layers."):
        il, sub = k[len("model.layers."):].split(".", 1)
        sub = sub[:-len(".weight")] if sub.endswith(".weight") else sub
        if sub in LAYER:
            return f"blk.{il}.{LAYER[sub]}.weight"
    return None


def text_config(kv, arch, assistant):
    from transformers import Gemma4TextConfig
    k = lambda s: kv[f"{arch}.{s}"]  # noqa: E731
    L = k("block_count")
    swa = k("attention.sliding_window_pattern")
    kvh = k("attention.head_count_kv")
    full = [i for i in range(L) if not swa[i]]
    extra = {"num_kv_shared_layers": L, "final_logit_softcapping": None, "vocab_size_per_layer_input": 0} \
        if assistant else {"num_kv_shared_layers": 0, "final_logit_softcapping": 30.0}
    return Gemma4TextConfig(
        vocab_size=262144, hidden_size=k("embedding_length"), intermediate_size=k("feed_forward_length"),
        num_hidden_layers=L, num_attention_heads=k("attention.head_count"), num_key_value_heads=kvh[0],
        head_dim=256, sliding_window=k("attention.sliding_window"),
        layer_types=["sliding_attention" if s else "full_attention" for s in swa], hidden_size_per_layer_input=0,
        attention_k_eq_v=True, enable_moe_block=False, use_double_wide_mlp=False, tie_word_embeddings=True,
        rms_norm_eps=1e-6, max_position_embeddings=k("context_length"),
        per_layer_config={f"{i:02d}": {"head_dim": 512, "num_key_value_heads": kvh[i]} for i in full},
        global_head_dim=512, num_global_key_value_heads=kvh[full[0]], **extra)


def eager(model):
    model.config._attn_implementation = "eager"
    for m in model.modules():
        if hasattr(m, "config") and hasattr(m.config, "_attn_implementation"):
            m.config._attn_implementation = "eager"


def load(model, t, what):
    missing, used = [], set()
    with torch.no_grad():
        for k, v in model.state_dict().items():
            g = gguf_name(k)
            if g is None or g not in t:
                missing.append(k)
                continue
            v.copy_(torch.from_numpy(t[g].copy()).reshape(v.shape))
            used.add(g)
    say(f"{what}: hf params without a gguf source: {missing}")
    say(f"{what}: gguf tensors not used: {sorted(set(t) - used)}")
    assert not missing and set(t) - used <= {"rope_freqs.weight"}, what


def describe(model, what):
    say(f"== {what}: state_dict ==")
    for k, v in model.state_dict().items():
        say(f"  {k} {list(v.shape)} {str(v.dtype).replace('torch.', '')}")
    say(f"== {what}: config.to_dict() ==")
    say(json.dumps(model.config.to_dict(), indent=1, default=str, sort_keys=True))


def build(kv, t, assistant):
    from transformers import Gemma4AssistantConfig, Gemma4AssistantForCausalLM, Gemma4ForCausalLM
    arch = "gemma4-assistant" if assistant else "gemma4"
    tc = text_config(kv, arch, assistant)
    torch.manual_seed(0)
    if assistant:
        cfg = Gemma4AssistantConfig(text_config=tc, backbone_hidden_size=kv[f"{arch}.embedding_length_out"],
                                    use_ordered_embeddings=False)
        model = Gemma4AssistantForCausalLM(cfg).to(torch.float32)
    else:
        model = Gemma4ForCausalLM(tc).to(torch.float32)
    eager(model)
    load(model, t, arch)
    return model.eval()


def source(obj, name):
    try:
        say(f"== source: {name} ==")
        say(inspect.getsource(obj))
    except Exception as e:  # noqa: BLE001 (evidence only)
        say(f"(no source for {name}: {e})")


def print_sources():
    import transformers.masking_utils as mu
    from transformers import Gemma4AssistantForCausalLM
    source(Gemma4AssistantForCausalLM.forward, "Gemma4AssistantForCausalLM.forward")
    source(Gemma4AssistantForCausalLM.create_attention_masks, "Gemma4AssistantForCausalLM.create_attention_masks")
    for n in ("create_bidirectional_sliding_window_mask", "sliding_window_bidirectional_overlay",
              "sliding_window_bidirectional_mask_function", "sliding_window_overlay", "create_bidirectional_mask"):
        if hasattr(mu, n):
            source(getattr(mu, n), "masking_utils." + n)
    try:
        import transformers.generation.candidate_generator as cg
        source(cg.SinglePositionMultiTokenCandidateGenerator, "SinglePositionMultiTokenCandidateGenerator")
    except Exception as e:  # noqa: BLE001
        say(f"(no candidate generator: {e})")
    try:
        import transformers.cache_utils as cu
        source(cu.DynamicSlidingWindowLayer.update, "DynamicSlidingWindowLayer.update")
    except Exception as e:  # noqa: BLE001
        say(f"(no sliding cache layer: {e})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("target")
    ap.add_argument("assistant")
    ap.add_argument("out")
    ap.add_argument("--info")
    ap.add_argument("--hf-target")
    ap.add_argument("--hf-assistant")
    ap.add_argument("--pos", required=True)
    ap.add_argument("ids", nargs="+", type=int)
    a = ap.parse_args()
    ids = a.ids
    positions = [int(x) for x in a.pos.split(",")]
    import transformers
    say("transformers", transformers.__version__, "torch", torch.__version__)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    try:
        print_sources()
    except Exception:  # noqa: BLE001
        say(traceback.format_exc())

    tkv, tt = read_gguf(a.target)
    akv, at = read_gguf(a.assistant)
    target = build(tkv, tt, False)
    asst = build(akv, at, True)
    describe(asst, "Gemma4AssistantForCausalLM")
    W = akv["gemma4-assistant.attention.sliding_window"]
    D = tkv["gemma4.embedding_length"]

    # the target once over the prompt: final hidden states (after the norm)
    # and the last sliding / full layer's keys and values for every position
    pre_norm = {}
    hook = target.model.norm.register_forward_hook(lambda m, i, o: pre_norm.__setitem__("x", i[0].detach()))
    with torch.no_grad():
        out = target.model(input_ids=torch.tensor([ids]), use_cache=False, return_shared_kv_states=True)
        logits = target(input_ids=torch.tensor([ids]), use_cache=False).logits[0]
    hook.remove()
    hid = out.last_hidden_state[0]
    skv = {k: (v[0].detach(), v[1].detach()) for k, v in out.shared_kv_states.items()}
    say("target shared_kv_states:", {k: [list(v[0].shape), list(v[1].shape)] for k, v in skv.items()})
    with torch.no_grad():
        head = torch.tanh(hid @ target.lm_head.weight.T / 30.0) * 30.0
    say(f"target logits vs softcap(head(last_hidden_state)): max |diff| {float((head - logits).abs().max()):.3g}")
    emb = target.model.embed_tokens

    def draft(p, tok, h, variant, model=asst):
        s0 = {0: 0, 1: max(0, p - W + 1), 2: max(0, p - W)}[variant]
        kv = {"sliding_attention": tuple(x[:, :, s0:p] for x in skv["sliding_attention"]),
              "full_attention": tuple(x[:, :, :p] for x in skv["full_attention"])}
        x = torch.cat([emb(torch.tensor([[tok]])), h.reshape(1, 1, -1)], dim=-1)
        with torch.no_grad():
            o = model(inputs_embeds=x, position_ids=torch.tensor([[p]]), shared_kv_states=kv)
        return o.logits[0, 0].float(), o.last_hidden_state[0, 0].float()

    # ---- the golden ----
    sub = np.arange(0, 262144, 512, dtype=np.int32)
    n_top, n_h = 16, 16
    recs = []
    for p in positions:
        assert 1 <= p < len(ids)
        for variant in (0, 1):
            tok, h = ids[p], hid[p - 1]
            for step in (1, 2):
                lg, hn = draft(p, tok, h, variant)
                l = lg.numpy()
                top = np.argsort(-l, kind="stable")[:n_top].astype(np.int32)
                hv = hn.numpy()
                recs.append((variant, p, step, tok, l, top, hv))
                tok, h = int(top[0]), hn
    with open(a.out, "wb") as f:
        f.write(b"GEMMTP1\0")
        f.write(struct.pack("<6I", len(ids), len(recs), len(sub), n_top, n_h, W))
        f.write(np.asarray(ids, dtype=np.int32).tobytes())
        f.write(sub.tobytes())
        for variant, p, step, tok, l, top, hv in recs:
            f.write(struct.pack("<5i", variant, p, step, tok, int(top[0])))
            f.write(struct.pack("<ff", float(l[top[0]]), float(l[top[0]] - l[top[1]])))
            f.write(l[sub].astype(np.float32).tobytes())
            f.write(top.tobytes())
            f.write(l[top].astype(np.float32).tobytes())
            f.write(struct.pack("<ff", float(np.abs(hv).max()), float(hv.sum())))
            f.write(hv[:n_h].astype(np.float32).tobytes())
    say(f"wrote {a.out}: {len(recs)} records, {os.path.getsize(a.out)} bytes")
    for variant, p, step, tok, l, top, hv in recs:
        say(f"  v{variant} p={p:3d} step {step} tok {tok:6d} -> argmax {int(top[0]):6d} max {l[top[0]]:.4f} "
            f"margin {l[top[0]] - l[top[1]]:.5f} h_next max|x| {np.abs(hv).max():.4f}")

    # ---- evidence: which sliding keys does transformers' drafter see? ----
    try:
        say("== window: variant 0 (transformers' mask over [0,p)) against [p-W+1,p) and [p-W,p) ==")
        for p in positions:
            l0, _ = draft(p, ids[p], hid[p - 1], 0)
            l1, _ = draft(p, ids[p], hid[p - 1], 1)
            l2, _ = draft(p, ids[p], hid[p - 1], 2)
            say(f"  p={p:3d}: |v0 - keys[p-W+1,p)| {float((l0 - l1).abs().max()):.3g}   "
                f"|v0 - keys[p-W,p)| {float((l0 - l2).abs().max()):.3g}")
        p = max(positions)
        with torch.no_grad():
            x = asst.pre_projection(torch.cat([emb(torch.tensor([[ids[p]]])), hid[p - 1].reshape(1, 1, -1)], -1))
            kv = {k: tuple(t[:, :, :p] for t in v) for k, v in skv.items()}
            masks = asst.create_attention_masks(x, None, kv)
        for kind, m in masks.items():
            if m is None:
                say(f"  mask {kind} at p={p} (kv_len {p}): None (every key)")
                continue
            row = m[0, 0, 0]
            allowed = (row if row.dtype == torch.bool else row == 0).nonzero().flatten().tolist()
            say(f"  mask {kind} at p={p} (kv_len {p}): {len(allowed)} keys allowed, "
                f"positions {allowed[0] if allowed else None}..{allowed[-1] if allowed else None}")
    except Exception:  # noqa: BLE001
        say(traceback.format_exc())

    # ---- evidence: what a real assisted generate() gives the drafter ----
    try:
        calls = []
        orig = asst.forward

        def spy(*args, **kw):
            x = kw.get("inputs_embeds")
            pk = kw.get("shared_kv_states") or {}
            calls.append({"pos": kw["position_ids"].flatten().tolist() if kw.get("position_ids") is not None else None,
                          "x": x.detach().clone() if x is not None else None,
                          "kv": {k: list(v[0].shape) for k, v in pk.items()},
                          "mask": None if kw.get("attention_mask") is None else list(kw["attention_mask"].shape)})
            return orig(*args, **kw)

        asst.forward = spy
        n0 = 40
        with torch.no_grad():
            g = target.generate(torch.tensor([ids[:n0]]), assistant_model=asst, max_new_tokens=4, do_sample=False)
        asst.forward = orig
        new = g[0, n0:].tolist()
        say(f"== assisted generate() from {n0} prompt tokens: new tokens {new}, {len(calls)} drafter calls ==")
        with torch.no_grad():
            full = torch.tensor([ids[:n0] + new])
            pre_norm.clear()
            hook = target.model.norm.register_forward_hook(lambda m, i, o: pre_norm.__setitem__("x", i[0].detach()))
            ref = target.model(input_ids=full, use_cache=False)
            hook.remove()
        post, pre = ref.last_hidden_state[0], pre_norm["x"][0]
        E = emb.weight
        for c in calls[:6]:
            x = c["x"][0, 0]
            e, h = x[:D], x[D:]
            tok = int(((E * emb.embed_scale.to(E.dtype) - e).abs().max(dim=1).values).argmin())
            scaled = float((E[tok] * D ** 0.5 - e).abs().max())
            raw = float((E[tok] - e).abs().max())
            # the hidden state the drafter was given: post-norm or pre-norm, and of which position
            dpost = [(float((post[i] - h).abs().max()), i) for i in range(post.shape[0])]
            dpre = [(float((pre[i] - h).abs().max()), i) for i in range(pre.shape[0])]
            say(f"  call: position_ids {c['pos']}, shared kv {c['kv']}, attention_mask {c['mask']}, token {tok} "
                f"(|x_emb - E*sqrt(D)| {scaled:.3g}, |x_emb - E| {raw:.3g}), "
                f"h nearest post-norm hidden: pos {min(dpost)[1]} diff {min(dpost)[0]:.3g}; "
                f"nearest pre-norm: pos {min(dpre)[1]} diff {min(dpre)[0]:.3g}")
    except Exception:  # noqa: BLE001
        say(traceback.format_exc())

    # ---- the gguf_to_hf.py exports load as these models ----
    from transformers import Gemma4AssistantForCausalLM, Gemma4ForCausalLM
    for cls, d, mine in ((Gemma4AssistantForCausalLM, a.hf_assistant, asst), (Gemma4ForCausalLM, a.hf_target, target)):
        if not d:
            continue
        try:
            m, info = cls.from_pretrained(d, output_loading_info=True, dtype=torch.float32,
                                          attn_implementation="eager")
            m.eval()
            say(f"== from_pretrained({d}) as {cls.__name__}: loading info {info}")
            if cls is Gemma4AssistantForCausalLM:
                describe(m, "from_pretrained " + cls.__name__)
                p = max(positions)
                l_mine, _ = draft(p, ids[p], hid[p - 1], 0)
                l_exp, _ = draft(p, ids[p], hid[p - 1], 0, model=m)
                say(f"  export vs built: max |logit diff| at p={p}: {float((l_mine - l_exp).abs().max()):.3g}")
            else:
                with torch.no_grad():
                    le = m(input_ids=torch.tensor([ids]), use_cache=False).logits[0]
                say(f"  export vs built: max |logit diff| {float((le - logits).abs().max()):.3g}")
        except Exception:  # noqa: BLE001
            say(traceback.format_exc())
    if a.info:
        with open(a.info, "w") as f:
            f.write("\n".join(INFO) + "\n")


if __name__ == "__main__":
    main()
