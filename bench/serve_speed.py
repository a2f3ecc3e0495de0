#!/usr/bin/env python3
"""Served speed as a client sees it (bench/serve_speed.sh runs it; Python's
standard library only, so it runs on the GPU machine, which has no Node).

client mode: time to first token and the streamed decode rate of an
OpenAI-compatible server (gem serve, llama-server) through POST
/v1/completions with "stream": true. Prompts are token ids (BOS, then ids
from gem bench's generator, seeded per request so no two requests share more
than BOS), greedy, end tokens ignored, the prompt cache off: every request
prefills its whole prompt, as a new agent's does. One warm-up request, then
REPS measured ones, one at a time. Per request: ttft_s, from sending the
request to the first chunk with text; decode_tok_s, (completion tokens - 1)
/ (the chunk that says the finish reason - the first text chunk): every
token counts, also those whose text a chunk holds back or that have none;
the server's own timings when it reports them. The stream is scanned as
text and only the usage chunk parsed: on a small machine the client shares
the cores the server computes on.
    serve_speed.py client URL PROMPT_TOKENS GEN REPS NAME > out.json

summary mode: the medians over every round of serve_speed.sh's files.
    serve_speed.py summary DIR MODEL SHA COMMIT HARDWARE BACKEND KV ROUNDS
"""
import datetime
import http.client
import json
import os
import sys
import time
import urllib.parse

M64 = (1 << 64) - 1


def prompt(n, seed):
    """gem bench's ids (src/cli/bench.c), from a per-request seed"""
    ids, r = [2], (0x9E3779B97F4A7C15 + seed * 0x1000193) & M64
    for _ in range(1, n):
        r = (r * 6364136223846793005 + 1) & M64
        ids.append((r >> 40) % 200000 + 1000)
    return ids


def one(url, n, gen, seed, name):
    u = urllib.parse.urlsplit(url)
    body = json.dumps({"prompt": prompt(n, seed), "max_tokens": gen, "stream": True, "temperature": 0,
                       "ignore_eos": True, "cache_prompt": False, "stream_options": {"include_usage": True}})
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    res = conn.getresponse()
    if res.status != 200:
        raise SystemExit(f"{name}: HTTP {res.status}: {res.read()[:500]!r}")
    first = done = None
    chunks, usage, timings, buf = 0, None, None, b""
    while True:
        part = res.read1(65536)
        if not part:
            break
        now = time.perf_counter()
        buf += part
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            if not ev.startswith(b"data: ") or ev == b"data: [DONE]":
                continue
            if b'"text":"' in ev and b'"text":""' not in ev:
                chunks += 1
                if first is None:
                    first = now
            if done is None and b'"finish_reason":"' in ev:
                done = now
            if b'"usage":{' in ev or b'"timings":{' in ev:
                j = json.loads(ev[6:])
                usage = j.get("usage") or usage
                timings = j.get("timings") or timings
    conn.close()
    ntok = usage["completion_tokens"] if usage else chunks  # no usage: text chunks stand for tokens
    return {"ttft_s": first - t0 if first else None,
            "decode_tok_s": (ntok - 1) / (done - first) if ntok > 1 and first and done and done > first else None,
            "text_chunks": chunks, "completion_tokens": ntok,
            "server_prompt_ms": timings.get("prompt_ms") if timings else None,
            "server_predicted_ms": timings.get("predicted_ms") if timings else None}


def median(v):
    s = sorted(x for x in v if x is not None)
    if not s:
        return None
    return s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2


def client(url, n, gen, reps, name):
    n, gen, reps = int(n), int(gen), int(reps)
    one(url, n, gen, 1000, name)  # warm-up
    runs = [one(url, n, gen, k + 1, name) for k in range(reps)]
    print(json.dumps({"server": name, "url": url, "prompt_tokens": n, "max_tokens": gen, "reps": reps,
                      "ttft_s": median(r["ttft_s"] for r in runs),
                      "decode_tok_s": median(r["decode_tok_s"] for r in runs), "runs": runs}, indent=1))


def summary(d, model, sha, commit, hw, backend, kv, rounds):
    R = range(1, int(rounds) + 1)
    rd = lambda f: json.load(open(os.path.join(d, f))) if os.path.exists(os.path.join(d, f)) else None

    def served(name):
        per = [x for x in (rd(f"serve-{name}-{r}.json") for r in R) if x]
        if not per:
            return None
        runs = [x for p in per for x in p["runs"]]
        return {"server": per[0]["server"], "prompt_tokens": per[0]["prompt_tokens"], "max_tokens": per[0]["max_tokens"],
                "reps_per_round": per[0]["reps"], "rounds": len(per), "ttft_s": median(x["ttft_s"] for x in runs),
                "decode_tok_s": median(x["decode_tok_s"] for x in runs), "runs": runs}

    benches = [rd(f"bench-{r}.json") for r in R]
    b0 = benches[0]
    bench = {"prompt_tokens": b0["prefill"][0]["tokens"], "decode_depth": b0["decode"][0]["depth"],
             "gen": b0["decode"][0]["gen"], "reps_per_round": b0["reps"],
             "ttft_s": median(b["prefill"][0]["ttft_s"] for b in benches),
             "decode_tok_s": median(b["decode"][0]["tok_s"] for b in benches),
             "rounds": [{"ttft_s": b["prefill"][0]["ttft_s"], "prefill_tok_s": b["prefill"][0]["tok_s"],
                         "decode_tok_s": b["decode"][0]["tok_s"], "decode_spread": b["decode"][0]["spread"]}
                        for b in benches]}
    gem, llama = served("gem"), served("llama")
    r = {"what": "served speed (streamed /v1/completions, client-side) against gem bench on the same file; "
                 "rounds of gem bench, gem serve, llama-server; medians over every round",
         "commit": commit, "model": model, "model_sha256": sha, "hardware": hw, "backend": backend,
         "kv_type": kv or "f32", "rounds": int(rounds),
         "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
         "gem_bench": bench, "gem_serve": gem,
         "ratios": {"ttft_served_over_bench": gem["ttft_s"] / bench["ttft_s"],
                    "decode_served_over_bench": gem["decode_tok_s"] / bench["decode_tok_s"]},
         "llama_server": llama}
    if llama:
        r["ratios"]["gem_over_llama_server"] = {"ttft": llama["ttft_s"] / gem["ttft_s"],
                                                "decode": gem["decode_tok_s"] / llama["decode_tok_s"]}
    print(json.dumps(r, indent=1))


if __name__ == "__main__":
    if len(sys.argv) == 7 and sys.argv[1] == "client":
        client(*sys.argv[2:])
    elif len(sys.argv) == 10 and sys.argv[1] == "summary":
        summary(*sys.argv[2:])
    else:
        sys.exit(__doc__)
