#!/usr/bin/env python3
"""Logit drift of the f16 KV modes against f32 caches, at depth.

For each depth D: a prompt of about D tokens (the start of --text, cut by
characters and re-tokenized: the exact count is reported), then STEPS
greedy steps with f32 caches (`gem run --temp 0 --ignore-eos
--top-logprobs K`), then the same prompt with `--kv-type f16` and
`--kv-type f16-full`, teacher-forced along the f32 run's ids
(`--force-ids`), so step i of every run is the distribution after the same
prompt + i tokens. Per step, over the union of the two runs' top-20 ids
that both runs list in their top K: the largest |delta logprob|, the
|delta logprob| of the forced (f32-chosen) token, and whether the argmax
agrees. Reported per mode and depth: max and mean of both, argmax
agreement out of STEPS.

  bench/kv_drift.py -m model.gguf --depth 8192,32768 [--steps 128]
      [--backend cuda] [--text FILE] [--json OUT]

--ctx-train N runs a copy of the model whose context_length key is
raised to N (the bytes of the u32 value patched, nothing else): the demo
model was trained at 1024 tokens, and gem refuses a context past a file's
trained one. Past training the predictions mean little as text, but the
f16 caches' difference from f32 caches in the same computation is what is
measured.

--text defaults to the repository's docs (docs/*.md and README.md,
repeated until long enough): plain English and code, not the model's
training text.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GEM = os.path.join(ROOT, "gem")
TOP = 64  # the lookup depth: an id in one run's top 20 is found in the other's top 64


def sh(args):
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode:
        sys.exit("kv_drift: %s failed (%d): %s" % (" ".join(args[:6]), r.returncode, r.stderr.strip()[-2000:]))
    return r.stdout


def n_tokens(model, path):
    with open(path, "rb") as f:
        r = subprocess.run([GEM, "tokenize", "-m", model], stdin=f, capture_output=True, text=True)
    if r.returncode:
        sys.exit("kv_drift: gem tokenize failed: " + r.stderr.strip())
    return len(r.stdout.split())


def prompt_file(model, text, depth, tmp):
    """A prefix of text of about depth tokens (within 1%), written to a file."""
    path = os.path.join(tmp, "prompt-%d.txt" % depth)
    lo, hi = 1, len(text)
    chars = min(len(text), depth * 4)
    for _ in range(12):
        with open(path, "w", encoding="utf-8") as f:
            f.write(text[:chars])
        n = n_tokens(model, path)
        if abs(n - depth) <= depth // 100:
            return path, n
        if n < depth:
            lo = chars
        else:
            hi = chars
        chars = max(lo + 1, min(hi - 1, int(chars * depth / max(n, 1))))
    return path, n


def patched(model, ctx_train, tmp):
    """A copy of model with its <arch>.context_length (a u32) set to ctx_train
    (the whole file is read: meant for small models such as the demo's)."""
    with open(model, "rb") as f:
        data = bytearray(f.read())
    key = b".context_length"
    at = data.find(key)
    # the key string (u64 length, then the bytes) is followed by its type
    # (u32, 4 = UINT32) and the value
    if at < 0 or int.from_bytes(data[at + len(key):at + len(key) + 4], "little") != 4:
        sys.exit("kv_drift: %s: no u32 context_length key to patch" % model)
    data[at + len(key) + 4:at + len(key) + 8] = ctx_train.to_bytes(4, "little")
    path = os.path.join(tmp, "ctx%d-%s" % (ctx_train, os.path.basename(model)))
    with open(path, "wb") as f:
        f.write(data)
    return path


def run(model, prompt, steps, backend, kv, ctx, force=None):
    args = [GEM, "run", "-m", model, "-f", prompt, "-n", str(steps), "--temp", "0", "--ignore-eos",
            "--top-logprobs", str(TOP), "--backend", backend, "--kv-type", kv, "--ctx", str(ctx), "--no-mtp"]
    if force:
        args += ["--force-ids", " ".join(map(str, force))]
    return [json.loads(l) for l in sh(args).splitlines() if l.startswith("{")]


def compare(base, other):
    steps = min(len(base), len(other))
    worst_top, worst_forced, sum_top, sum_forced, agree = 0.0, 0.0, 0.0, 0.0, 0
    for a, b in zip(base[:steps], other[:steps]):
        la = dict(zip(a["top_ids"], a["top_logprobs"]))
        lb = dict(zip(b["top_ids"], b["top_logprobs"]))
        ids = set(a["top_ids"][:20]) | set(b["top_ids"][:20])
        d = [abs(la[i] - lb[i]) for i in ids if i in la and i in lb]
        top = max(d) if d else 0.0
        forced = abs(a["logprob"] - b["logprob"])
        worst_top, worst_forced = max(worst_top, top), max(worst_forced, forced)
        sum_top += top
        sum_forced += forced
        agree += a["argmax"] == b["argmax"]
    return {"steps": steps, "max_abs_dlogprob_top20": round(worst_top, 4),
            "mean_max_abs_dlogprob_top20": round(sum_top / max(steps, 1), 5),
            "max_abs_dlogprob_forced": round(worst_forced, 4),
            "mean_abs_dlogprob_forced": round(sum_forced / max(steps, 1), 5),
            "argmax_agree": "%d/%d" % (agree, steps)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--depth", default="8192,32768")
    ap.add_argument("--steps", type=int, default=128)
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--text")
    ap.add_argument("--json")
    ap.add_argument("--ctx-train", type=int)
    a = ap.parse_args()
    if a.text:
        text = open(a.text, encoding="utf-8", errors="replace").read()
    else:
        parts = [open(p, encoding="utf-8").read() for p in sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))]
        text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read() + "\n".join(parts)
    depths = [int(d) for d in a.depth.split(",")]
    while len(text) < max(depths) * 6:
        text += "\n\n" + text
    out = {"model": a.model, "backend": a.backend, "steps": a.steps, "method": __doc__.split("\n\n")[1].replace("\n", " "),
           "depths": []}
    with tempfile.TemporaryDirectory() as tmp:
        if a.ctx_train:
            a.model = patched(a.model, a.ctx_train, tmp)
            out["ctx_train_patched"] = a.ctx_train
        for depth in depths:
            path, n = prompt_file(a.model, text, depth, tmp)
            ctx = n + a.steps + 64
            base = run(a.model, path, a.steps, a.backend, "f32", ctx)
            ids = [s["id"] for s in base]
            row = {"depth_tokens": n}
            for kv in ("f16", "f16-full"):
                row[kv] = compare(base, run(a.model, path, a.steps, a.backend, kv, ctx, force=ids))
            print("depth %d: %s" % (n, json.dumps(row)), flush=True)
            out["depths"].append(row)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
