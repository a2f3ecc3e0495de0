#!/usr/bin/env python3
"""MTP acceptance against the reference on one target + drafter pair: gem
serve --mtp and llama-server --spec-type draft-mtp, same files, greedy, the
same fixed draft count k (gem --draft-max k --draft-fixed, llama.cpp
--spec-draft-n-max k), prompts cut from a held-out text. Standard library
only.

  mtp_ref.py --gem ./gem --ref .ref/llama.cpp/build-cpu/bin/llama-server
             -m TARGET.gguf --mtp DRAFTER.gguf --text FILE [--k 3] [--prompts 24]
             [--n 64] [--threads 2] [--ngl N] [--backend cpu|cuda] [--json OUT]

Acceptance counts are comparable only where both greedy answers are the
same text (the targets' own arithmetic may part at a near-tie: gem's rows
are not llama.cpp's), so each prompt records whether they are; the summary
sums drafted and accepted over the prompts where they are. Both servers
run one at a time, each alone on the machine."""
import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def wait_up(url, proc, what):
    for _ in range(600):
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited ({proc.returncode}) before it was ready")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except Exception:  # noqa: BLE001 (not up yet)
            pass
        time.sleep(0.2)
    raise SystemExit(f"{what} did not come up")


def prompts_from(path, n):
    lines = [l.strip() for l in open(path, encoding="utf-8") if len(l.strip()) > 80]
    step = max(1, len(lines) // n)
    return [" ".join(l.split()[:12]) for l in lines[::step][:n]]


def run_server(cmd, url, what, env, fn):
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        wait_up(url, proc, what)
        return fn()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def pair_args(ap, port):
    """The options of a run over one pair and held-out prompts (this script
    and mtp_proposals.py)."""
    ap.add_argument("--ref", required=True)
    ap.add_argument("-m", required=True)
    ap.add_argument("--mtp", required=True)
    ap.add_argument("--text", required=True)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=24)
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--port", type=int, default=port)


def ref_env(ref):
    """The environment the reference server runs in: its libraries beside it."""
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.path.dirname(os.path.abspath(ref)) + ":" + env.get("LD_LIBRARY_PATH", "")
    return env


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gem", required=True)
    pair_args(ap, 18291)
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--ngl", type=int, default=0)
    ap.add_argument("--json")
    a = ap.parse_args()
    prompts = prompts_from(a.text, a.prompts)
    env = ref_env(a.ref)
    url = f"http://127.0.0.1:{a.port}"

    def ask_gem(mtp):
        out = []
        for p in prompts:
            r = post(url + "/v1/completions", {"prompt": p, "max_tokens": a.n, "temperature": 0})
            t = r.get("timings", {})
            out.append({"text": r["choices"][0]["text"], "draft_n": t.get("draft_n", 0),
                        "draft_n_accepted": t.get("draft_n_accepted", 0), "ms": t.get("predicted_ms")})
        return out

    def ask_ref():
        out = []
        for p in prompts:
            r = post(url + "/completion", {"prompt": p, "n_predict": a.n, "temperature": 0, "cache_prompt": False})
            t = r.get("timings", {})
            out.append({"text": r["content"], "draft_n": t.get("draft_n", 0),
                        "draft_n_accepted": t.get("draft_n_accepted", 0), "ms": t.get("predicted_ms")})
        return out

    port = ["--port", str(a.port)]
    gem_cmd = [a.gem, "serve", "-m", a.m, "--backend", a.backend, "-t", str(a.threads), "--ctx", "1024"] + port
    ref_cmd = [a.ref, "-m", a.m, "-c", "1024", "-t", str(a.threads), "-ngl", str(a.ngl), "-np", "1"] + port
    k = str(a.k)
    res = {
        "gem_plain": run_server(gem_cmd, url, "gem serve", env, lambda: ask_gem(False)),
        "gem_mtp": run_server(gem_cmd + ["--mtp", a.mtp, "--draft-max", k, "--draft-fixed"], url, "gem serve --mtp",
                              env, lambda: ask_gem(True)),
        "ref_plain": run_server(ref_cmd, url, "llama-server", env, ask_ref),
        "ref_mtp": run_server(ref_cmd + ["--spec-type", "draft-mtp", "-md", a.mtp, "--spec-draft-n-max", k,
                                         "-ngld", str(a.ngl)], url, "llama-server draft-mtp", env, ask_ref),
    }
    rows, same = [], {"prompts": 0, "gem_drafted": 0, "gem_accepted": 0, "ref_drafted": 0, "ref_accepted": 0,
                      "equal_counts": 0}
    for i, p in enumerate(prompts):
        g, gm, r, rm = (res[x][i] for x in ("gem_plain", "gem_mtp", "ref_plain", "ref_mtp"))
        row = {"prompt": p, "gem_mtp_equals_plain": g["text"] == gm["text"],
               "ref_mtp_equals_plain": r["text"] == rm["text"], "gem_equals_ref": g["text"] == r["text"],
               "gem": [gm["draft_n"], gm["draft_n_accepted"]], "ref": [rm["draft_n"], rm["draft_n_accepted"]]}
        rows.append(row)
        if row["gem_equals_ref"] and row["ref_mtp_equals_plain"] and row["gem_mtp_equals_plain"]:
            same["prompts"] += 1
            same["gem_drafted"] += gm["draft_n"]
            same["gem_accepted"] += gm["draft_n_accepted"]
            same["ref_drafted"] += rm["draft_n"]
            same["ref_accepted"] += rm["draft_n_accepted"]
            same["equal_counts"] += row["gem"] == row["ref"]
    speed = {}
    for x in res:
        ms = sum(o["ms"] or 0 for o in res[x])
        toks = a.n * len(prompts)
        speed[x] = round(toks / (ms / 1000), 2) if ms else None
    out = {"k": a.k, "n": a.n, "prompts": len(prompts), "target": a.m, "drafter": a.mtp, "backend": a.backend,
           "where_answers_equal": same,
           "gem_mtp_equals_plain_all": all(r["gem_mtp_equals_plain"] for r in rows),
           "ref_mtp_equals_plain_all": all(r["ref_mtp_equals_plain"] for r in rows),
           "decode_tok_s_from_server_timings": speed, "rows": rows}
    print(json.dumps({k: v for k, v in out.items() if k != "rows"}, indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    if not out["gem_mtp_equals_plain_all"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
