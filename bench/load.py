#!/usr/bin/env python3
"""Concurrent-clients load benchmark for any OpenAI-compatible server
(gem serve --parallel N, llama-server -np N, vLLM, ...). Standard library
only, so it runs wherever Python 3.8+ does.

Each client runs its own multi-turn chat: a system prompt and a first user
message of realistic length, then TURNS turns, each streaming the answer
(stream: true, include_usage) and appending it with the next user message,
so servers that reuse a session's cache across turns show it. Every
client's texts are its own (seeded), so nothing is shared by accident.

Measured per answer: time to first token (the first streamed delta of
content or reasoning), generated tokens (the usage chunk; else one per
delta), the stream's tokens/s after its first token, and the prompt and
cached tokens the server reports (usage.prompt_tokens_details.cached_tokens
or llama-server's timings.cache_n). Per run: aggregate generated tokens/s
over the wall time, TTFT p50/p95, per-stream tokens/s p50.

  bench/load.py --url http://127.0.0.1:8080 --clients 1,4,16,32 --turns 3 \\
      --max-tokens 128 --words 300 --json out.json [--ignore-eos]

--ignore-eos sends ignore_eos: true (gem and llama-server honour it) so
random or synthetic models produce exactly --max-tokens tokens.
"""
import argparse
import json
import random
import statistics
import sys
import threading
import time
import urllib.request

WORDS = ("the of and to in is was for on that with as by at from his her they it be this have which had not are "
         "but were one all their there been has when who will more no if out so said what up its about into than "
         "them can only other new some could time these two may then first any like now my over such our man me "
         "even most made after also did many before must through back years where much your way well down should "
         "because each just those people how too little state good very make world still own see men work long get "
         "here between both life being under never day same another know while last might us great old year off "
         "come since against go came right used take three function variable return class module error value "
         "request server cache token model batch kernel memory thread queue stream").split()


def text(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


def percentile(xs, q):
    if not xs:
        return None
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def stream_chat(url, body, timeout):
    """One streamed chat completion: (ttft, t_end, n_tokens, usage, timings, error)."""
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.monotonic()
    ttft, deltas, usage, timings, parts = None, 0, None, None, []
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            for raw in r:
                line = raw.decode("utf-8", "replace").strip()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                ev = json.loads(data)
                if ev.get("usage"):
                    usage = ev["usage"]
                if ev.get("timings"):
                    timings = ev["timings"]
                for ch in ev.get("choices") or []:
                    d = ch.get("delta") or {}
                    piece = (d.get("content") or "") + (d.get("reasoning_content") or "")
                    if piece:
                        if ttft is None:
                            ttft = time.monotonic() - t0
                        deltas += 1
                        parts.append(d.get("content") or "")
    except Exception as e:  # noqa: BLE001 - any failure is reported per answer
        return None, time.monotonic() - t0, 0, None, None, "".join(parts), str(e)
    n = usage.get("completion_tokens", deltas) if usage else deltas
    return ttft, time.monotonic() - t0, n, usage, timings, "".join(parts), None


def client(idx, a, results, start_evt):
    rng = random.Random(a.seed * 1000 + idx)
    msgs = [{"role": "system", "content": text(rng, a.words // 3)},
            {"role": "user", "content": text(rng, a.words)}]
    start_evt.wait()
    for turn in range(a.turns):
        body = {"model": a.model, "messages": msgs, "max_tokens": a.max_tokens, "temperature": a.temperature,
                "stream": True, "stream_options": {"include_usage": True}}
        if a.ignore_eos:
            body["ignore_eos"] = True
        if a.thinking:
            body["chat_template_kwargs"] = {"enable_thinking": a.thinking == "on"}
        t_start = time.monotonic()
        ttft, dt, n, usage, timings, answer, err = stream_chat(a.url, body, a.timeout)
        row = {"client": idx, "turn": turn, "start": t_start, "end": t_start + dt, "ttft_s": ttft, "tokens": n,
               "error": err}
        if usage:
            row["prompt_tokens"] = usage.get("prompt_tokens")
            det = usage.get("prompt_tokens_details") or {}
            if "cached_tokens" in det:
                row["cached_tokens"] = det["cached_tokens"]
        if timings and "cache_n" in timings and "cached_tokens" not in row:
            row["cached_tokens"] = timings["cache_n"]
        if ttft is not None and n > 1 and dt > ttft:
            row["stream_tok_s"] = (n - 1) / (dt - ttft)
        results.append(row)
        if err:
            return
        msgs.append({"role": "assistant", "content": answer})
        msgs.append({"role": "user", "content": text(rng, a.words // 2)})


def decode_counters(url):
    """gem's batched-step counters from /metrics (steps, rows), or None for
    servers without them: a run's mean batch is the rows over the steps."""
    try:
        with urllib.request.urlopen(url + "/metrics", timeout=5) as r:
            body = r.read().decode("utf-8", "replace")
    except Exception:  # noqa: BLE001 - a server without /metrics
        return None
    got = {}
    for line in body.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] in ("gem_decode_steps_total", "gem_decode_step_rows_total"):
            got[parts[0]] = float(parts[1])
    return got if len(got) == 2 else None


def run(a, n_clients):
    results, start_evt = [], threading.Event()
    c0 = decode_counters(a.url)
    th = [threading.Thread(target=client, args=(i, a, results, start_evt)) for i in range(n_clients)]
    for t in th:
        t.start()
    t0 = time.monotonic()
    start_evt.set()
    for t in th:
        t.join()
    wall = time.monotonic() - t0
    ok = [r for r in results if not r["error"]]
    ttft = [r["ttft_s"] for r in ok if r["ttft_s"] is not None]
    stream = [r["stream_tok_s"] for r in ok if "stream_tok_s" in r]
    gen = sum(r["tokens"] for r in ok)
    later = [r for r in ok if r["turn"] > 0 and r.get("prompt_tokens") and "cached_tokens" in r]
    out = {"clients": n_clients, "answers": len(ok), "errors": len(results) - len(ok), "wall_s": round(wall, 3),
           "generated_tokens": gen, "aggregate_tok_s": round(gen / wall, 2) if wall > 0 else None,
           "ttft_p50_s": percentile(ttft, 0.5), "ttft_p95_s": percentile(ttft, 0.95),
           "ttft_max_s": max(ttft) if ttft else None, "stream_tok_s_p50": percentile(stream, 0.5),
           "reuse_after_turn1": (round(sum(r["cached_tokens"] for r in later) / sum(r["prompt_tokens"] for r in later), 4)
                                 if later else None),
           "first_error": next((r["error"] for r in results if r["error"]), None)}
    c1 = decode_counters(a.url) if c0 else None
    if c1:
        steps = c1["gem_decode_steps_total"] - c0["gem_decode_steps_total"]
        rows = c1["gem_decode_step_rows_total"] - c0["gem_decode_step_rows_total"]
        out["decode_steps"] = int(steps)
        out["mean_batch_rows"] = round(rows / steps, 2) if steps > 0 else None
    if a.rows:
        out["rows"] = sorted(results, key=lambda r: (r["client"], r["turn"]))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--model", default="default")
    ap.add_argument("--clients", default="1,4,16,32", help="comma-separated concurrent client counts")
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--words", type=int, default=300, help="words in a first user message")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--ignore-eos", action="store_true")
    ap.add_argument("--thinking", choices=["on", "off"],
                    help="send chat_template_kwargs.enable_thinking (servers differ in their default: say it)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--rows", action="store_true", help="keep every answer's measurements in the JSON")
    ap.add_argument("--label", default="", help="a name for this server in the JSON")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()
    runs = []
    for n in [int(x) for x in a.clients.split(",") if x]:
        r = run(a, n)
        runs.append(r)
        fmt = lambda v, f="%.3f": (f % v) if v is not None else "-"  # noqa: E731
        print("%-10s clients %3d: %6s tok/s aggregate, TTFT p50 %s s p95 %s s, stream p50 %s tok/s, reuse %s, "
              "%d answers, %d errors" % (a.label, n, fmt(r["aggregate_tok_s"], "%.1f"), fmt(r["ttft_p50_s"]),
                                         fmt(r["ttft_p95_s"]), fmt(r["stream_tok_s_p50"], "%.1f"),
                                         fmt(r["reuse_after_turn1"]), r["answers"], r["errors"])
              + ("" if r.get("mean_batch_rows") is None else
                 ", %d batched steps of %.2f rows" % (r["decode_steps"], r["mean_batch_rows"])), flush=True)
    res = {"label": a.label, "url": a.url, "turns": a.turns, "words": a.words, "max_tokens": a.max_tokens,
           "temperature": a.temperature, "ignore_eos": a.ignore_eos, "thinking": a.thinking, "runs": runs}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    return 1 if any(r["errors"] for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
