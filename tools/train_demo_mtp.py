#!/usr/bin/env python3
"""Trains the MTP drafter of the demo model (profile gemma4-demo-assistant)
with transformers' Gemma4AssistantForCausalLM against the shipped demo
target (models/gemma4-demo-q4_0.gguf.gz, dequantized: the drafter learns
the target gem runs). GPU machine (torch, transformers); the rest of the
pipeline (tools/demo_mtp.sh) runs anywhere.

  train_demo_mtp.py DATA_DIR TARGET.gguf OUT_DIR [--steps N] [--seed S]
                    [--max-seconds T] [--unroll K]

DATA_DIR holds train.ids / test.ids (tools/demo_corpus.py).

What one training row is (the pitfalls of ../shared/docs/mtp.md):
  - the drafter at position p takes [E_target[x_p] * sqrt(D) ; h_{p-1}]
    (the target's final-norm hidden state of the position before), as gem's
    round does after the target produced x_p;
  - its layers read the target's last sliding / full layer keys and values
    of positions before p only: full layer [0, p), sliding layers
    [p-W+1, p) (what gem and llama.cpp let a drafter query see), passed as
    explicit per-type masks (the stock masks of a q_len > 1 call leak);
  - K steps unrolled at the same position: step k feeds the corpus token
    x_{p+k-1} and step k-1's projected state, and is scored against the
    target's distribution at position p+k-1 (distillation: acceptance is
    agreement with the target, not with the corpus).
Both vocabularies hold exactly zero rows for tokens the corpus never uses
(the target was trained so; the drafter is kept so), so logits are computed
over the rows in use and the zero rows enter each softmax as one term
log(n_zero): exact, and 8x less memory than the whole vocabulary.

Before training, the batched masked forward is checked against transformers'
own one-position call (q_len 1, keys cut to the same windows) at several
positions; a mismatch stops the run.

Output: OUT_DIR/mtp.safetensors (bf16, HF parameter names; the embedding as
model.embed_tokens.rows + int32 model.embed_tokens.ids, as train_demo.py
writes it) and OUT_DIR/train.json (settings, curve, per-step agreement with
the target's argmax on test.ids)."""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_golden import read_gguf  # noqa: E402
from hf_golden_mtp import build, text_config  # noqa: E402
from train_demo import load_ids, save_safetensors  # noqa: E402

VOCAB = 262144
# the gemma4-demo-assistant profile's metadata (gem synth --profile
# gemma4-demo-assistant; gem convert checks the exported folder against it)
ASST_KV = {"gemma4-assistant.block_count": 4, "gemma4-assistant.context_length": 1024,
           "gemma4-assistant.embedding_length": 128, "gemma4-assistant.feed_forward_length": 512,
           "gemma4-assistant.attention.head_count": 4, "gemma4-assistant.attention.head_count_kv": [2, 2, 2, 1],
           "gemma4-assistant.attention.sliding_window": 256,
           "gemma4-assistant.attention.sliding_window_pattern": [True, True, True, False],
           "gemma4-assistant.embedding_length_out": 256}


def make_drafter(dev):
    from transformers import Gemma4AssistantConfig, Gemma4AssistantForCausalLM
    tc = text_config(ASST_KV, "gemma4-assistant", True)
    cfg = Gemma4AssistantConfig(text_config=tc, backbone_hidden_size=ASST_KV["gemma4-assistant.embedding_length_out"],
                                use_ordered_embeddings=False)
    m = Gemma4AssistantForCausalLM(cfg).to(dev)
    return m


def set_attn(model, impl):
    model.config._attn_implementation = impl
    for mod in model.modules():
        if hasattr(mod, "config") and hasattr(mod.config, "_attn_implementation"):
            mod.config._attn_implementation = impl


def window_masks(T, W, dev, impl, B):
    """Per-type masks [B, 1, T, T] for queries at positions 0..T-1 over the
    target's keys 0..T-1: full [0, p), sliding [p-W+1, p). Position 0 has no
    past; it may see key 0 so its row stays finite (it is never scored)."""
    p = torch.arange(T, device=dev)[:, None]
    k = torch.arange(T, device=dev)[None, :]
    full = k < p
    sl = full & (k > p - W)
    full[0, 0] = sl[0, 0] = True
    out = {}
    for name, m in (("full_attention", full), ("sliding_attention", sl)):
        m = m[None, None].expand(B, 1, T, T)
        if impl != "sdpa":
            m = torch.zeros(m.shape, device=dev).masked_fill(~m, torch.finfo(torch.float32).min)
        out[name] = m
    return out


class UsedHead(torch.nn.Module):
    """The tied head over the embedding rows in use only."""

    def __init__(self, emb, used):
        super().__init__()
        self.emb, self.used = emb, used

    def forward(self, x):
        return F.linear(x, self.emb.weight[self.used])


def target_pass(target, x, used_w):
    """The target over windows x [B, T]: final-norm hidden states, its shared
    caches, and logits over the rows in use (soft-capped, f32)."""
    with torch.no_grad():
        out = target.model(input_ids=x, use_cache=False, return_shared_kv_states=True)
        h = out.last_hidden_state.float()
        logits = torch.tanh((h @ used_w.T) / 30.0) * 30.0
    return h, {k: (v[0], v[1]) for k, v in out.shared_kv_states.items()}, logits


def drafter_steps(asst, emb_t, x, h, skv, masks, K):
    """K unrolled steps at every position: a list of (logits over used rows, valid rows)."""
    B, T = x.shape
    asst.create_attention_masks = lambda *a, **k: masks
    pos = torch.arange(T, device=x.device)[None].expand(B, T)
    hprev = torch.cat([torch.zeros_like(h[:, :1]), h[:, :-1]], 1)  # h_{p-1}
    outs = []
    for k in range(1, K + 1):
        idx = (pos + k - 1).clamp(max=T - 1)
        tok = torch.gather(x, 1, idx)
        inp = torch.cat([emb_t(tok), hprev.to(emb_t.weight.dtype)], -1)
        o = asst(inputs_embeds=inp, position_ids=pos, shared_kv_states=skv)
        valid = (pos >= 1) & (pos + k - 1 <= T - 1)
        outs.append((o.logits, idx, valid))
        hprev = o.last_hidden_state
    return outs


def soft_ce(dl, tl, n_zero):
    """Cross-entropy of the drafter's distribution against the target's, both
    over the rows in use plus n_zero tokens whose logit is exactly 0."""
    lz = math.log(n_zero)
    pad = lambda l: torch.cat([l, torch.full_like(l[..., :1], lz)], -1)  # noqa: E731
    lse_d = torch.logsumexp(pad(dl), -1, keepdim=True)
    lse_t = torch.logsumexp(pad(tl), -1, keepdim=True)
    pt = torch.exp(tl - lse_t)
    p0 = torch.exp(lz - lse_t)
    return -(pt * (dl - lse_d)).sum(-1) + p0[..., 0] * lse_d[..., 0]


def check_parity(target, asst, emb_t, used_w, ids, W, dev, say):
    """The batched masked call against transformers' own q_len-1 call with the
    keys cut to the same windows (float32, eager, no TF32)."""
    set_attn(asst, "eager")
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    x = ids[None, :400].to(dev)
    h, skv, _ = target_pass(target, x, used_w)
    masks = window_masks(x.shape[1], W, dev, "eager", 1)
    with torch.no_grad():
        outs = drafter_steps(asst, emb_t, x, h, skv, masks, 2)
        del asst.create_attention_masks  # back to transformers' own masks
        worst = 0.0
        for p in (1, 7, 100, 255, 256, 257, 300, 398):
            hp = h[0, p - 1]
            for k in (1, 2):
                s0 = max(0, p - W + 1)
                kv = {"sliding_attention": tuple(t[:, :, s0:p] for t in skv["sliding_attention"]),
                      "full_attention": tuple(t[:, :, :p] for t in skv["full_attention"])}
                tok = x[0, p + k - 1]
                inp = torch.cat([emb_t(tok.view(1, 1)), hp.view(1, 1, -1)], -1)
                o = asst(inputs_embeds=inp, position_ids=torch.tensor([[p]], device=dev), shared_kv_states=kv)
                ref = o.logits[0, 0, :]
                mine = outs[k - 1][0][0, p]
                d = float((ref - mine).abs().max() / (ref.abs().max() + 1e-6))
                say(f"  p={p} step {k}: relative max |diff| {d:.3g} (max |logit| {float(ref.abs().max()):.3g})")
                worst = max(worst, d)
                hp = o.last_hidden_state[0, 0]
    torch.backends.cuda.matmul.allow_tf32 = tf32
    say(f"parity: batched masked drafter vs transformers q_len-1 calls: worst relative max |diff| {worst:.3g}")
    if worst > 1e-3:
        raise SystemExit("the batched drafter does not match transformers' one-position calls")
    return worst


@torch.no_grad()
def evaluate(target, asst, emb_t, used, used_w, test, W, K, n_zero, dev, seq, impl):
    """Mean loss per step and agreement with the target's argmax: per step
    (the step's argmax equals the target's, given the corpus prefix) and
    chained (steps 1..k all agree: what greedy verification accepts)."""
    asst.eval()
    offs = list(range(0, len(test) - seq - 1, seq))
    loss = [0.0] * K
    agree = [0] * K
    chain = [0] * K
    rows = [0] * K
    for i in range(0, len(offs), 16):
        x = torch.stack([test[o:o + seq] for o in offs[i:i + 16]]).to(dev)
        h, skv, tl = target_pass(target, x, used_w)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            outs = drafter_steps(asst, emb_t, x, h, skv, window_masks(seq, W, dev, impl, x.shape[0]), K)
        ok = None
        for k, (dl, idx, valid) in enumerate(outs):
            t = torch.gather(tl, 1, idx[..., None].expand(-1, -1, tl.shape[-1]))
            l = soft_ce(dl.float(), t, n_zero)
            v1 = valid & (torch.arange(seq, device=dev)[None] + K - 1 <= seq - 1)  # rows every step can score
            loss[k] += float(l[v1].sum())
            a = (dl.argmax(-1) == t.argmax(-1)) & valid
            ok = a if ok is None else (ok & a)
            agree[k] += int(a[v1].sum())
            chain[k] += int(ok[v1].sum())
            rows[k] += int(v1.sum())
    asst.train()
    return ([loss[k] / max(1, rows[k]) for k in range(K)], [agree[k] / rows[k] for k in range(K)],
            [chain[k] / rows[k] for k in range(K)])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("target")
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--unroll", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--max-seconds", type=float, default=240)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    dev = "cuda"
    torch.manual_seed(a.seed)
    torch.backends.cuda.matmul.allow_tf32 = True
    log = []

    def say(s):
        print(s, flush=True)
        log.append(s)

    train, test = load_ids(os.path.join(a.data, "train.ids")), load_ids(os.path.join(a.data, "test.ids"))
    kv, t = read_gguf(a.target)
    target = build(kv, t, False).to(dev)  # float32, eager: the oracle's target
    for p in target.parameters():
        p.requires_grad_(False)
    W = kv["gemma4.attention.sliding_window"]
    emb_t = target.model.embed_tokens  # scales by sqrt(D) itself
    # the rows in use: those of the shipped target's embedding
    used = (target.model.embed_tokens.weight.abs().sum(1) > 0).nonzero().flatten()
    n_zero = VOCAB - len(used)
    used_w = target.model.embed_tokens.weight[used].float()
    say(f"target {a.target}: {len(used)} embedding rows in use, window {W}")

    asst = make_drafter(dev)
    with torch.no_grad():
        keep = torch.zeros(VOCAB, 1, device=dev)
        keep[used] = 1.0
        asst.model.embed_tokens.weight.mul_(keep)
    asst.lm_head = UsedHead(asst.model.embed_tokens, used)
    parity = check_parity(target, asst, emb_t, used_w, test, W, dev, say)

    impl = "sdpa"
    try:
        set_attn(asst, impl)
        x = train[:64].view(1, -1).to(dev)
        h, skv, _ = target_pass(target, x, used_w)
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            drafter_steps(asst, emb_t, x, h, skv, window_masks(64, W, dev, impl, 1), 1)
    except Exception as e:  # noqa: BLE001
        say(f"sdpa failed ({e}); eager attention")
        impl = "eager"
        set_attn(asst, impl)

    params = [p for n, p in asst.named_parameters()]
    decay = [p for n, p in asst.named_parameters() if p.dim() >= 2 and "embed" not in n]
    other = [p for n, p in asst.named_parameters() if not (p.dim() >= 2 and "embed" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    warm = 100

    def lr_at(s):
        if s < warm:
            return a.lr * (s + 1) / warm
        q = (s - warm) / max(1, a.steps - warm)
        return a.lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(1.0, q))))

    gen = torch.Generator().manual_seed(a.seed)
    train_dev = train.to(dev)
    weights = [1.0 / k for k in range(1, a.unroll + 1)]  # earlier steps gate the later ones
    curve, best, best_state, best_step = [], -1.0, None, -1
    t0 = time.time()
    step = 0
    for step in range(a.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        off = torch.randint(0, len(train) - a.seq - 1, (a.batch,), generator=gen).to(dev)
        x = train_dev[off[:, None] + torch.arange(a.seq, device=dev)[None, :]]
        h, skv, tl = target_pass(target, x, used_w)
        masks = window_masks(a.seq, W, dev, impl, a.batch)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            outs = drafter_steps(asst, emb_t, x, h, skv, masks, a.unroll)
        loss = 0.0
        for k, (dl, idx, valid) in enumerate(outs):
            tk = torch.gather(tl, 1, idx[..., None].expand(-1, -1, tl.shape[-1]))
            loss = loss + weights[k] * soft_ce(dl.float()[valid], tk[valid], n_zero).mean()
        loss = loss / sum(weights)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        with torch.no_grad():
            asst.model.embed_tokens.weight.mul_(keep)
        if step % 200 == 199 or step == a.steps - 1:
            el, ag, ch = evaluate(target, asst, emb_t, used, used_w, test, W, a.unroll, n_zero, dev, a.seq, impl)
            sec = time.time() - t0
            curve.append({"step": step + 1, "train_loss": round(float(loss), 4),
                          "test_loss": [round(v, 4) for v in el], "agree": [round(v, 4) for v in ag],
                          "chain": [round(v, 4) for v in ch], "seconds": round(sec, 1)})
            say(json.dumps(curve[-1]))
            score = sum(ch)  # expected drafted tokens accepted per round of K
            if score > best:
                best, best_step = score, step + 1
                best_state = {k: v.detach().clone() for k, v in asst.state_dict().items()}
            if sec > a.max_seconds:
                break
    train_seconds = time.time() - t0
    if best_state is None:
        raise SystemExit("no evaluation ran (--steps too small): nothing to export")
    asst.load_state_dict(best_state)
    # the shipped weights are bf16: score exactly those
    with torch.no_grad():
        for p in asst.parameters():
            p.copy_(p.to(torch.bfloat16).float())
    el, ag, ch = evaluate(target, asst, emb_t, used, used_w, test, W, a.unroll, n_zero, dev, a.seq, impl)
    tensors = {}
    for k, v in asst.state_dict().items():
        if k.startswith("lm_head"):
            continue
        if k == "model.embed_tokens.weight":
            tensors["model.embed_tokens.ids"] = used.to(torch.int32)
            tensors["model.embed_tokens.rows"] = v[used].to(torch.bfloat16)
        else:
            tensors[k] = v.to(torch.bfloat16)
    save_safetensors(os.path.join(a.out, "mtp.safetensors"), tensors)
    import transformers
    info = {"seed": a.seed, "steps_run": step + 1, "batch": a.batch, "seq": a.seq, "lr": a.lr, "warmup": warm,
            "unroll": a.unroll, "step_weights": weights, "weight_decay": 0.1, "attention": impl,
            "train_seconds": round(train_seconds, 1), "best_step": best_step, "parity_rel": parity,
            "test_bf16": {"loss": el, "agree": ag, "chain": ch, "expected_accepted_of_k": sum(ch)},
            "curve": curve, "tensors": sorted(tensors), "torch": torch.__version__,
            "transformers": transformers.__version__, "gpu": torch.cuda.get_device_name(0), "log": log}
    with open(os.path.join(a.out, "train.json"), "w") as f:
        json.dump(info, f, indent=1)
    print(json.dumps({k: v for k, v in info.items() if k not in ("curve", "log", "tensors")}))


if __name__ == "__main__":
    main()
