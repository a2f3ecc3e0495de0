#!/usr/bin/env python3
"""Trains the demo model (profile gemma4-demo) with transformers'
Gemma4ForCausalLM on the corpus of tools/demo_corpus.py. Runs on the GPU
machine (torch, transformers); the rest of the pipeline (tools/demo_model.sh)
runs anywhere.

  train_demo.py DATA_DIR OUT_DIR [--steps N] [--seed S] [--max-seconds T]

DATA_DIR holds train.ids / test.ids (uint32 documents as <bos> text <eos>)
and the two id lists made by demo_model.sh: ppl.ids (test.txt tokenized as
llama-perplexity tokenizes it: <bos> first) and prompt.ids.

Training: AdamW, bf16 autocast, windows of 512 tokens sampled from the
training stream with a seeded generator, an evaluation on test.ids every
100 steps and the best state kept (the corpus is small, the model overfits
late). Embedding rows of tokens that never occur in the corpus are held at
exactly zero, so the exported checkpoint only carries the rows in use and
the GGUF compresses well; zero rows still take part in the softmax, so the
model is trained as it is shipped.

Output: OUT_DIR/demo.safetensors (bf16, HF parameter names; the embedding as
model.embed_tokens.rows plus the int32 model.embed_tokens.ids), and
OUT_DIR/train.json: hyperparameters, loss curve, held-out loss, the
llama-perplexity-style perplexity of the exported (bf16-rounded) weights in
float32 (n_ctx 512, second half of each chunk scored), and the greedy ids
after prompt.ids: the transformers oracle for gem's perplexity and greedy
output on the converted file."""
import argparse
import json
import math
import os
import struct
import time

import numpy as np
import torch
import torch.nn.functional as F

H, FF, L, HEADS, KV_SWA, KV_FULL, WINDOW, CTX = 256, 1024, 6, 4, 2, 1, 256, 1024
VOCAB, BOS, PPL_CTX = 262144, 2, 512


def make_model(attn):
    from transformers import Gemma4ForCausalLM, Gemma4TextConfig
    full = [L - 1]
    cfg = Gemma4TextConfig(
        vocab_size=VOCAB, hidden_size=H, intermediate_size=FF, num_hidden_layers=L, num_attention_heads=HEADS,
        num_key_value_heads=KV_SWA, head_dim=256, sliding_window=WINDOW,
        layer_types=["full_attention" if i in full else "sliding_attention" for i in range(L)],
        final_logit_softcapping=30.0, hidden_size_per_layer_input=0, attention_k_eq_v=True, num_kv_shared_layers=0,
        enable_moe_block=False, use_double_wide_mlp=False, tie_word_embeddings=True, rms_norm_eps=1e-6,
        max_position_embeddings=CTX,
        per_layer_config={f"{i:02d}": {"head_dim": 512, "num_key_value_heads": KV_FULL} for i in full},
        global_head_dim=512, num_global_key_value_heads=KV_FULL, bos_token_id=2, eos_token_id=1, pad_token_id=0)
    model = Gemma4ForCausalLM(cfg)
    model.config._attn_implementation = attn
    for m in model.modules():
        if hasattr(m, "config") and hasattr(m.config, "_attn_implementation"):
            m.config._attn_implementation = attn
    return model


def load_ids(path):
    return torch.from_numpy(np.fromfile(path, dtype="<u4").astype(np.int64))


def save_safetensors(path, tensors):
    """The safetensors layout (8-byte header length, JSON header, data),
    written by hand so the file needs no extra package to produce."""
    names = {torch.bfloat16: "BF16", torch.float32: "F32", torch.int32: "I32"}
    header, blobs, off = {}, [], 0
    for k, t in tensors.items():
        t = t.detach().contiguous().cpu()
        b = t.view(torch.uint8).numpy().tobytes() if t.dtype == torch.bfloat16 else t.numpy().tobytes()
        header[k] = {"dtype": names[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)


@torch.no_grad()
def eval_stream(model, ids, seq, dev):
    model.eval()
    tot, n = 0.0, 0
    offs = list(range(0, len(ids) - seq - 1, seq))
    for i in range(0, len(offs), 16):
        x = torch.stack([ids[o:o + seq + 1] for o in offs[i:i + 16]]).to(dev)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(input_ids=x[:, :-1]).logits
        tot += F.cross_entropy(logits.float().reshape(-1, VOCAB), x[:, 1:].reshape(-1), reduction="sum").item()
        n += x.shape[0] * seq
    model.train()
    return tot / n


@torch.no_grad()
def llama_style_ppl(model, ids, dev):
    """llama-perplexity's method: chunks of n_ctx tokens, the first set to
    <bos>, logits of positions n_ctx/2 .. n_ctx-2 scored against the next
    token; float32 throughout."""
    model.eval()
    nll, cnt = 0.0, 0
    first = PPL_CTX // 2
    for c in range(len(ids) // PPL_CTX):
        x = ids[c * PPL_CTX:(c + 1) * PPL_CTX].clone()
        x[0] = BOS
        x = x.to(dev)
        logits = model(input_ids=x[None]).logits[0].double()
        lp = torch.log_softmax(logits[first:PPL_CTX - 1], dim=-1)
        nll -= lp.gather(1, x[first + 1:, None]).sum().item()
        cnt += PPL_CTX - 1 - first
    return math.exp(nll / cnt), cnt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--max-seconds", type=float, default=330)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    dev = "cuda"
    torch.manual_seed(a.seed)
    train, test = load_ids(os.path.join(a.data, "train.ids")), load_ids(os.path.join(a.data, "test.ids"))
    ppl_ids = load_ids(os.path.join(a.data, "ppl.ids"))
    prompt = load_ids(os.path.join(a.data, "prompt.ids"))
    used = torch.unique(torch.cat([train, test, ppl_ids, prompt, torch.tensor([0, 1, 2])]))
    keep = torch.zeros(VOCAB, 1, device=dev)
    keep[used.to(dev)] = 1.0

    try:  # sdpa is faster; eager is the fallback should this version lack it for Gemma 4
        model = make_model("sdpa").to(dev)
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            model(input_ids=train[:8].to(dev)[None])
    except Exception as e:  # noqa: BLE001
        print("sdpa failed (%s); using eager attention" % e, flush=True)
        model = make_model("eager").to(dev)
    emb = model.model.embed_tokens.weight
    with torch.no_grad():
        emb.mul_(keep)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "embed" not in n]
    other = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "embed" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
    warm = 100

    def lr_at(s):
        if s < warm:
            return a.lr * (s + 1) / warm
        p = (s - warm) / max(1, a.steps - warm)
        return a.lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(1.0, p))))

    gen = torch.Generator().manual_seed(a.seed)
    train_dev = train.to(dev)
    curve, best, best_state, best_step = [], float("inf"), None, -1
    t0 = time.time()
    step = 0
    for step in range(a.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        off = torch.randint(0, len(train) - a.seq - 1, (a.batch,), generator=gen).to(dev)
        idx = off[:, None] + torch.arange(a.seq + 1, device=dev)[None, :]
        xy = train_dev[idx]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(input_ids=xy[:, :-1]).logits
        loss = F.cross_entropy(logits.float().reshape(-1, VOCAB), xy[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        with torch.no_grad():
            emb.mul_(keep)
        if step % 100 == 99 or step == a.steps - 1:
            ev = eval_stream(model, test, a.seq, dev)
            el = time.time() - t0
            curve.append({"step": step + 1, "train_loss": round(loss.item(), 4), "test_loss": round(ev, 4),
                          "seconds": round(el, 1)})
            print(json.dumps(curve[-1]), flush=True)
            if ev < best:
                best, best_step = ev, step + 1
                best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
            if el > a.max_seconds:
                break
    train_seconds = time.time() - t0
    model.load_state_dict(best_state)
    # the shipped weights are bf16: evaluate exactly those, in float32
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).float())
    model32 = make_model("eager").to(dev)
    model32.load_state_dict(model.state_dict())
    ppl, scored = llama_style_ppl(model32, ppl_ids, dev)
    with torch.no_grad():
        x = prompt.to(dev)[None]
        out = []
        for _ in range(64):
            nxt = int(model32(input_ids=x).logits[0, -1].argmax())
            out.append(nxt)
            x = torch.cat([x, torch.tensor([[nxt]], device=dev)], dim=1)
    tensors = {}
    for k, v in model.state_dict().items():
        if k.endswith("embed_tokens.weight"):
            tensors["model.embed_tokens.ids"] = used.to(torch.int32)
            tensors["model.embed_tokens.rows"] = v[used.to(dev)].to(torch.bfloat16)
        elif not k.startswith("lm_head"):
            tensors[k] = v.to(torch.bfloat16)
    save_safetensors(os.path.join(a.out, "demo.safetensors"), tensors)
    info = {"seed": a.seed, "steps_run": step + 1, "batch": a.batch, "seq": a.seq, "lr": a.lr, "warmup": warm,
            "weight_decay": 0.1, "train_seconds": round(train_seconds, 1), "best_step": best_step,
            "best_test_loss": round(best, 4), "embedding_rows_used": int(len(used)),
            "ppl_transformers_f32": {"n_ctx": PPL_CTX, "tokens_scored": scored, "ppl": ppl},
            "greedy_after_prompt": out, "curve": curve,
            "torch": torch.__version__, "gpu": torch.cuda.get_device_name(0)}
    import transformers
    info["transformers"] = transformers.__version__
    with open(os.path.join(a.out, "train.json"), "w") as f:
        json.dump(info, f, indent=1)
    print(json.dumps({k: v for k, v in info.items() if k != "curve"}))


if __name__ == "__main__":
    main()
