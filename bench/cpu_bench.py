#!/usr/bin/env python3
"""CPU speed, gem against the pinned llama.cpp reference, side by side in one
run on this machine: prompt processing and decode tok/s on synthetic
gemma4-1b files (Q4_0 and Q8_0 matrices, Q8_0 embedding), same file, same
thread count, greedy, EOS ignored; both measured in-process after a warm-up
(`gem bench` and `llama-bench`: prompt from an empty context, decode from
depth 0). Order A/B/B/A per repetition, medians reported with the paired
ratio. Peak RSS of gem is measured with /usr/bin/time. Writes bench/results/cpu-DATE.json and prints a
markdown table.

usage: bench/cpu_bench.py [--reps 3] [--threads 2] [--prompt 64] [--gen 32]
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
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--prompt", type=int, default=64)
ap.add_argument("--gen", type=int, default=32)
ap.add_argument("--types", default="q4_0,q8_0")
ap.add_argument("--dir", default="build/bench")
a = ap.parse_args()
bench_bin = ".ref/llama.cpp/build-cpu/bin/llama-bench"
if not os.path.exists(bench_bin):
    sys.exit("reference missing: run bench/reference/build.sh cpu")
subprocess.run(["make", "-s", "gem"], check=True)
os.makedirs(a.dir, exist_ok=True)
ids = " ".join(str(1000 + i) for i in range(a.prompt))


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def run_gem(model):
    # `gem bench` measures like llama-bench: in one process, after one
    # warm-up run (mapped weights faulted in), prompt from an empty context,
    # decode from depth 0 with greedy single-token steps
    out = os.path.join(a.dir, "gem-bench.json")
    cmd = ["/usr/bin/time", "-f", "RSS %M", "./gem", "bench", "-m", model, "--prompt", str(a.prompt), "--gen",
           str(a.gen), "--depth", "0", "--reps", "1", "-t", str(a.threads), "--json", out]
    p = subprocess.run(cmd, capture_output=True, text=True, check=True)
    r = json.load(open(out))
    rss = int(re.search(r"RSS (\d+)", p.stderr).group(1))
    return {"pp": r["prefill"][0]["tok_s"], "ttft": r["prefill"][0]["ttft_s"], "tg": r["decode"][0]["tok_s"],
            "rss_kib": rss}


def run_ref(model):
    cmd = [bench_bin, "-m", model, "-p", str(a.prompt), "-n", str(a.gen), "-t", str(a.threads), "-r", "1", "-o", "json"]
    p = subprocess.run(cmd, capture_output=True, text=True, check=True)
    rows = json.loads(p.stdout)
    out = {}
    for r in rows:
        key = "pp" if r["n_prompt"] > 0 else "tg"
        out[key] = r["avg_ts"]
    return out


results = {}
for t in a.types.split(","):
    model = f"{a.dir}/gemma4-1b-{t}.gguf"
    if not os.path.exists(model):
        subprocess.run(["./gem", "synth", "--profile", "gemma4-1b", "--type", t, "--seed", "1", "-o", model], check=True,
                       capture_output=True)
    run_gem(model)  # warm-up: page cache and CPU clocks
    run_ref(model)
    g, r = [], []
    for _ in range(a.reps):
        g.append(run_gem(model))
        r.append(run_ref(model))
        r.append(run_ref(model))
        g.append(run_gem(model))
    med = lambda xs, k: statistics.median(x[k] for x in xs)
    results[t] = {
        "model_sha256": sha256(model),
        "gem": g, "reference": r,
        "gem_median": {"pp_tok_s": med(g, "pp"), "tg_tok_s": med(g, "tg"), "ttft_s": med(g, "ttft"),
                       "peak_rss_mib": max(x["rss_kib"] for x in g) / 1024},
        "reference_median": {"pp_tok_s": med(r, "pp"), "tg_tok_s": med(r, "tg")},
    }
    results[t]["ratio"] = {"pp": results[t]["gem_median"]["pp_tok_s"] / results[t]["reference_median"]["pp_tok_s"],
                           "tg": results[t]["gem_median"]["tg_tok_s"] / results[t]["reference_median"]["tg_tok_s"]}

commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
dirty = subprocess.run(["git", "diff", "--quiet"]).returncode != 0
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
doc = {
    "benchmark": f"CPU prompt ({a.prompt} tokens) and decode ({a.gen} tokens) speed, gemma4-1b synthetic, greedy; gem bench vs llama-bench",
    "date": datetime.date.today().isoformat(), "commit": commit, "dirty": dirty, "backend": "cpu",
    "threads": a.threads, "cpu": cpu, "nproc": os.cpu_count(),
    "compiler": subprocess.run(["cc", "--version"], capture_output=True, text=True).stdout.splitlines()[0],
    "reference": "llama.cpp v0.5.0 (node-llama-cpp@3.22.1), llama-bench, CPU build GGML_NATIVE",
    "reps": a.reps, "order": "A/B/B/A per repetition after one warm-up each", "results": results,
}
out = f"bench/results/cpu-{doc['date']}.json"
json.dump(doc, open(out, "w"), indent=1)
print(f"| model | gem prompt tok/s | ref prompt tok/s | ratio | gem decode tok/s | ref decode tok/s | ratio | gem peak RSS |")
print("|---|---|---|---|---|---|---|---|")
for t, v in results.items():
    print(f"| gemma4-1b {t} | {v['gem_median']['pp_tok_s']:.1f} | {v['reference_median']['pp_tok_s']:.1f} | "
          f"{v['ratio']['pp']:.2f}x | {v['gem_median']['tg_tok_s']:.1f} | {v['reference_median']['tg_tok_s']:.1f} | "
          f"{v['ratio']['tg']:.2f}x | {v['gem_median']['peak_rss_mib']:.0f} MiB |")
print(f"wrote {out}")
