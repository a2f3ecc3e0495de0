#!/usr/bin/env python3
"""The reference's MTP proposals on one target + drafter pair, for
tests/model/test_mtp_ref.c: llama-server --spec-type draft-mtp (greedy,
fixed draft count k) on prompts cut from a held-out text, its debug log
read for every round's root and the drafter's top-3 candidates with their
probabilities at each draft step. Standard library only.

  mtp_proposals.py --ref .ref/llama.cpp/build-cpu/bin/llama-server
                   -m TARGET.gguf --mtp DRAFTER.gguf --text FILE
                   [--k 3] [--prompts 24] [--n 64] [--threads 2] -o OUT.json

Per prompt: ids, the prompt's tokens (the server's own tokenization, BOS
included) followed by the reference's greedy answer; rounds, each {"pos":
P, "root": id, "steps": [[id0, p0, id1, p1, id2, p2], ...]}: the root token
goes to position P (the cache holds positions 0..P-1) and step i proposes
the token of position P + 1 + i. The log lines parsed are common/
speculative.cpp's "draft candidate" lines (LOG_DBG, before the p_min
check, so every step is there) and tools/server's "generate_draft" line
that closes a round."""
import argparse
import json
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mtp_ref import pair_args, post, prompts_from, ref_env, run_server  # noqa: E402

CAND = re.compile(r"draft candidate\s+(\d+), pos\s+(\d+):\s+(\d+) \(\s*([0-9.]+)\)")
ROUND = re.compile(r"generate_draft: id=(\d+), #tokens=(\d+), #draft=(\d+), pos_next=(\d+)")
REQ = re.compile(r"launch_slot_|new prompt|slot launch", re.I)


def parse(log):
    """The log's rounds in order: (pos, root, steps)."""
    rounds, steps = [], {}
    for line in log.splitlines():
        m = CAND.search(line)
        if m:
            k, i, tok, p = int(m[1]), int(m[2]), int(m[3]), float(m[4])
            steps.setdefault(i, [None] * 6)
            steps[i][2 * k], steps[i][2 * k + 1] = tok, p
            continue
        m = ROUND.search(line)
        if m:
            rounds.append({"pos": int(m[4]), "root": int(m[1]), "n_draft": int(m[3]),
                           "steps": [steps[i] for i in sorted(steps)]})
            steps = {}
    return rounds


def main():
    ap = argparse.ArgumentParser()
    pair_args(ap, 18292)
    ap.add_argument("-o", required=True)
    a = ap.parse_args()
    prompts = prompts_from(a.text, a.prompts)
    env = ref_env(a.ref)
    url = f"http://127.0.0.1:{a.port}"
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        logf = os.path.join(tmp, "server.log")
        cmd = [a.ref, "-m", a.m, "-c", "1024", "-t", str(a.threads), "-ngl", "0", "-np", "1", "--port", str(a.port),
               "--spec-type", "draft-mtp", "-md", a.mtp, "--spec-draft-n-max", str(a.k), "-ngld", "0",
               "--verbose", "--log-file", logf]

        def ask():
            for p in prompts:
                done = os.path.getsize(logf)
                ids = post(url + "/tokenize", {"content": p, "add_special": True})["tokens"]
                r = post(url + "/completion", {"prompt": p, "n_predict": a.n, "temperature": 0, "cache_prompt": False,
                                               "return_tokens": True})
                with open(logf, encoding="utf-8", errors="replace") as f:
                    f.seek(done)
                    rounds = parse(f.read())
                t = r.get("timings", {})
                out.append({"prompt": p, "ids": ids + r["tokens"], "n_prompt": len(ids), "rounds": rounds,
                            "draft_n": t.get("draft_n", 0), "draft_n_accepted": t.get("draft_n_accepted", 0)})

        run_server(cmd, url, "llama-server draft-mtp", env, ask)
    res = {"what": "llama.cpp draft-mtp proposals (bench/mtp_proposals.py)", "k": a.k, "n": a.n,
           "target": os.path.basename(a.m), "drafter": os.path.basename(a.mtp), "prompts": out}
    with open(a.o, "w") as f:
        json.dump(res, f, separators=(",", ":"))
    n_rounds = sum(len(p["rounds"]) for p in out)
    print(f"{len(out)} prompts, {n_rounds} rounds -> {a.o}")


if __name__ == "__main__":
    main()
