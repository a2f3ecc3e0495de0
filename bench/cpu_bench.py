#!/usr/bin/env python3
"""CPU speed, gem against the pinned llama.cpp reference, side by side in one
run on this machine: prompt processing and decode tok/s on synthetic
gemma4-1b files (Q4_0 and Q8_0 matrices, Q8_0 embedding; a K-quant mix such
as q4_k_m: a bf16 synth quantized by gem quantize, byte-identical to
llama-quantize's, with its q6_k tied embedding), same file, same
thread count, greedy, EOS ignored; both measured in-process after a warm-up
(`gem bench` and `llama-bench`: each prompt length from an empty context,
decode from depth 0). Order A/B/B/A per repetition (A/B/C/C/B/A with
--gem-base), medians reported with the paired ratio per test. Peak RSS of
gem is measured with /usr/bin/time. Writes bench/results/cpu-DATE.json (or
--out) and prints a markdown table.

usage: bench/cpu_bench.py [--profile gemma4-1b] [--reps 3] [--threads 2] [--prompt 64[,N..]] [--gen 32]
                          [--types q4_0,q8_0] [--gem-base PATH] [--gem-tile T] [--out FILE]
  --prompt 8,64,512   several prompt lengths (prompt tiles; gem's engine
                      evaluates a prompt in tiles of 64 tokens, llama-bench
                      in one batch of up to 512)
  --gem-tile T        gem's prompt tile (gem bench --tile), e.g. 512 for one
                      512-row product per matrix like llama-bench's batch
  --types q4_0,q4_k_m synth types, or gem quantize types (q4_k_m, q5_k_m, ...)
  --gem-base PATH     a second gem binary (an older build) measured in the
                      same interleaving: before/after numbers from one run
Needs the reference (bench/reference/build.sh cpu) and ./gem.
"""
import argparse
import datetime
import hashlib
import json
import os
import re
import statistics
import subprocess
import sys

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.chdir(root)
ap = argparse.ArgumentParser()
ap.add_argument("--reps", type=int, default=3)
ap.add_argument("--profile", default="gemma4-1b", help="gem synth profile of the files (e.g. qwen35-small)")
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--prompt", default="64")
ap.add_argument("--gen", type=int, default=32)
ap.add_argument("--types", default="q4_0,q8_0")
ap.add_argument("--dir", default="build/bench")
ap.add_argument("--gem-base", default=None)
ap.add_argument("--gem-tile", type=int, default=0)
ap.add_argument("--out", default=None)
a = ap.parse_args()
prompts = [int(p) for p in a.prompt.split(",")]
bench_bin = ".ref/llama.cpp/build-cpu/bin/llama-bench"
if not os.path.exists(bench_bin):
    sys.exit("reference missing: run bench/reference/build.sh cpu")
subprocess.run(["make", "-s", "gem"], check=True)
os.makedirs(a.dir, exist_ok=True)
tests = [f"pp{p}" for p in prompts] + [f"tg{a.gen}"]


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def run_gem(model, binary="./gem"):
    # `gem bench` measures like llama-bench: in one process, after one
    # warm-up run (mapped weights faulted in), each prompt from an empty
    # context, decode from depth 0 with greedy single-token steps
    out = os.path.join(a.dir, "gem-bench.json")
    cmd = ["/usr/bin/time", "-f", "RSS %M", binary, "bench", "-m", model, "--prompt", a.prompt, "--gen",
           str(a.gen), "--depth", "0", "--reps", "1", "-t", str(a.threads), "--json", out]
    if a.gem_tile:
        cmd += ["--tile", str(a.gem_tile)]
    p = subprocess.run(cmd, capture_output=True, text=True, check=True)
    r = json.load(open(out))
    res = {f"pp{x['tokens']}": x["tok_s"] for x in r["prefill"]}
    res[f"tg{a.gen}"] = r["decode"][0]["tok_s"]
    res["ttft_s"] = {f"pp{x['tokens']}": x["ttft_s"] for x in r["prefill"]}
    res["rss_kib"] = int(re.search(r"RSS (\d+)", p.stderr).group(1))
    return res


def run_ref(model):
    cmd = [bench_bin, "-m", model, "-p", a.prompt, "-n", str(a.gen), "-t", str(a.threads), "-r", "1", "-o", "json"]
    p = subprocess.run(cmd, capture_output=True, text=True, check=True)
    out = {}
    for r in json.loads(p.stdout):
        key = f"pp{r['n_prompt']}" if r["n_prompt"] > 0 else f"tg{r['n_gen']}"
        out[key] = r["avg_ts"]
    return out


results = {}
for t in a.types.split(","):
    model = f"{a.dir}/{a.profile}-{t}.gguf"
    if not os.path.exists(model) and t in ("q4_0", "q8_0", "f16", "bf16", "f32"):
        subprocess.run(["./gem", "synth", "--profile", a.profile, "--type", t, "--seed", "1", "-o", model], check=True,
                       capture_output=True)
    elif not os.path.exists(model):  # a quantize type: from a bf16 synth
        src = f"{a.dir}/{a.profile}-bf16.gguf"
        if not os.path.exists(src):
            subprocess.run(["./gem", "synth", "--profile", a.profile, "--type", "bf16", "--seed", "1", "-o", src],
                           check=True, capture_output=True)
        subprocess.run(["./gem", "quantize", src, model, "--type", t, "-t", str(a.threads)], check=True,
                       capture_output=True)
    run_gem(model)  # warm-up: page cache and CPU clocks
    run_ref(model)
    g, r, gb = [], [], []
    for _ in range(a.reps):
        g.append(run_gem(model))
        if a.gem_base:
            gb.append(run_gem(model, a.gem_base))
        r.append(run_ref(model))
        r.append(run_ref(model))
        if a.gem_base:
            gb.append(run_gem(model, a.gem_base))
        g.append(run_gem(model))
    med = lambda xs, k: statistics.median(x[k] for x in xs)
    res = {
        "model_sha256": sha256(model),
        "gem": g, "reference": r,
        "gem_median": {k: med(g, k) for k in tests},
        "gem_peak_rss_mib": max(x["rss_kib"] for x in g) / 1024,
        "reference_median": {k: med(r, k) for k in tests},
    }
    res["ratio"] = {k: res["gem_median"][k] / res["reference_median"][k] for k in tests}
    if a.gem_base:
        res["gem_base"] = gb
        res["gem_base_median"] = {k: med(gb, k) for k in tests}
        res["ratio_base"] = {k: res["gem_base_median"][k] / res["reference_median"][k] for k in tests}
        res["gem_over_base"] = {k: res["gem_median"][k] / res["gem_base_median"][k] for k in tests}
    results[t] = res

commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
dirty = subprocess.run(["git", "diff", "--quiet"]).returncode != 0
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
doc = {
    "benchmark": f"CPU prompt ({a.prompt} tokens) and decode ({a.gen} tokens) speed, {a.profile} synthetic, greedy; "
                 "gem bench vs llama-bench",
    "date": datetime.date.today().isoformat(), "commit": commit, "dirty": dirty, "backend": "cpu",
    "threads": a.threads, "cpu": cpu, "nproc": os.cpu_count(),
    "compiler": subprocess.run(["cc", "--version"], capture_output=True, text=True).stdout.splitlines()[0],
    "reference": "llama.cpp v0.5.0 (node-llama-cpp@3.22.1), llama-bench, CPU build " +
                 ("GGML_NATIVE=OFF" if "GGML_NATIVE:BOOL=OFF" in open(".ref/llama.cpp/build-cpu/CMakeCache.txt").read()
                  else "GGML_NATIVE"),
    "gem_base": a.gem_base, "gem_tile": a.gem_tile or "engine default (64)",
    "reps": a.reps, "order": ("A/B/C/C/B/A (gem, gem base, reference)" if a.gem_base else "A/B/B/A") +
    " per repetition after one warm-up each", "results": results,
}
out = a.out or f"bench/results/cpu-{doc['date']}.json"
json.dump(doc, open(out, "w"), indent=1)
head = "| model | test | gem tok/s | ref tok/s | ratio |" + (" gem base tok/s | base ratio |" if a.gem_base else "")
print(head)
print("|---" * (head.count("|") - 1) + "|")
for t, v in results.items():
    for k in tests:
        line = (f"| {a.profile} {t} | {k} | {v['gem_median'][k]:.1f} | {v['reference_median'][k]:.1f} | "
                f"{v['ratio'][k]:.2f}x |")
        if a.gem_base:
            line += f" {v['gem_base_median'][k]:.1f} | {v['ratio_base'][k]:.2f}x |"
        print(line)
    print(f"| {a.profile} {t} | gem peak RSS | {v['gem_peak_rss_mib']:.0f} MiB | | |" + (" | |" if a.gem_base else ""))
print(f"wrote {out}")
