#!/usr/bin/env python3
"""Logit comparison: per-step top-20 tokens and log-probabilities of gem
against the pinned llama.cpp reference and against the transformers goldens.

Reference mode (per model, per gem variant):
  - the prompt ids are the tokenization of --text (`gem tokenize`, BOS first);
  - the reference is `llama-server -m FILE -ctk f32 -ctv f32 -fa off -np 1`,
    one POST /completion with the ids as the prompt, n_predict N, temperature
    0, ignore_eos, n_probs --lookup (64) and post_sampling_probs false: its
    top_logprobs are then log(softmax) of the raw logits over the full
    vocabulary (server-common.cpp get_token_probabilities), before any
    sampler; ignore_eos only biases the *choice* (EOG ids get -inf), so the
    reference's argmax below is its top_logprobs[0], not its chosen id;
  - gem runs twice: greedy on its own (`gem run --temp 0 --ignore-eos
    --top-logprobs 64`), and teacher-forced along the reference's generated
    ids (`--force-ids`), so step i of both sides is the distribution after
    the same prompt + i tokens. All N steps are compared on the forced run;
    the free run gives the length of the identical greedy prefix (and on it
    must repeat the forced run's numbers).
  - per step, the compared set is the union of both sides' top-20 ids; each
    side's value for an id comes from its own top-64 (the lookup depth), so
    a token in one side's top-20 but just outside the other's top-20 is still
    compared exactly. An id that is in neither side's top-64 on one side is
    counted as unresolved and left out (its gap is then reported as a bound).
  - reported: max and mean |delta logprob| over the compared ids, max
    |delta logprob| of the chosen (reference) token, argmax agreement (gem's
    argmax = the reference's top-1) with the reference's top-2 margin at
    each disagreement, steps compared, identical greedy prefix.

transformers mode (tests/data/hf/*.bin, written by tools/hf_golden.py: the
soft-capped logits of every prompt position, top 16 and 2048 sampled ids):
gem runs the golden's prompt as --prompt-ids ID0 --force-ids ID1.. with
-n n_pos, so step j is position j. The goldens hold logits, not the
normalizer, so what is compared is the logit (gem's logit = logprob + lse)
at the golden's top 16, plus gem's top-20 ids found among the golden's ids,
and the same values relative to the top-1 logit (= the logprob difference
with both normalizers cancelled); argmax agreement uses the golden's top-2
margin (closer than 1e-3: reported as close calls).

usage: bench/logits.py [--steps 128] [--text TEXT] [--threads N]
                       [--model NAME=PATH]... [--variants default,compat-llama]
                       [--no-ref] [--no-hf] [--backend cpu] [--gem PATH] [--note TEXT]... [--out PREFIX]
Default models: gemma4-tiny f32 seed 3 (gem synth) and the demo model
data/models/default.gguf; writes bench/results/logits-cpu-DATE.json and .md.
Needs ./gem (built here) and, for the reference mode, the reference
(bench/reference/build.sh cpu). Standard library only.
"""
import argparse
import datetime
import glob
import hashlib
import json
import os
import re
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.chdir(root)

TOP = 20
DEFAULT_TEXT = ("In the beginning God created the heaven and the earth. And the earth was without form, and void; "
                "and darkness was upon the face of the deep.")
VARIANTS = {"default": [], "compat-llama": ["--compat-llama"]}


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def gem_tokenize(text, model="data/vocab/gemma-4.gguf"):
    """The ids of text under a file's own tokenizer (a Qwen file's differ)."""
    p = subprocess.run(["./gem", "tokenize", "-m", model], input=text, capture_output=True,
                       text=True, check=True)
    return [int(x) for x in p.stdout.split()]


def gem_logprobs(a, model, prompt, n, extra, force=None):
    """gem run --top-logprobs: one record per step."""
    cmd = [a.gem, "run", "-m", model, "--prompt-ids", " ".join(map(str, prompt)), "-n", str(n), "--temp", "0",
           "--ignore-eos", "--top-logprobs", str(a.lookup), "--ctx", str(len(prompt) + n + 16)]
    if a.threads:
        cmd += ["-t", str(a.threads)]
    if a.backend:
        cmd += ["--backend", a.backend]
    if force:
        cmd += ["--force-ids", " ".join(map(str, force))]
    p = subprocess.run(cmd + extra, capture_output=True, text=True)
    if p.returncode:
        sys.exit(f"gem run failed ({p.returncode}): {' '.join(cmd + extra)}\n{p.stderr}")
    recs = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    if len(recs) != n:
        sys.exit(f"gem run: {len(recs)} records, expected {n}")
    return [{"id": r["id"], "argmax": r["argmax"], "lse": r["lse"], "logprob": r["logprob"],
             "top": list(zip(r["top_ids"], r["top_logprobs"]))} for r in recs]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def http(url, body=None, timeout=600):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:  # the server's reason, not only the status (an Exception: the
        # health poll retries on it while the model loads)
        raise RuntimeError(f"{url}: HTTP {e.code}: {e.read()[:500].decode(errors='replace')}") from None


def reference(a, model, prompt, n, log):
    """llama-server /completion: the reference's greedy ids and per-step top
    logprobs (pre-sampling, full vocabulary)."""
    port = free_port()
    cmd = [a.server, "-m", model, "--host", "127.0.0.1", "--port", str(port), "-ctk", "f32", "-ctv", "f32", "-fa", "off",
           "-np", "1", "-c", str(len(prompt) + n + 16), "--no-webui"]
    if a.threads:
        cmd += ["-t", str(a.threads)]
    with open(log, "w") as lf:
        srv = subprocess.Popen(cmd, stdout=lf, stderr=subprocess.STDOUT)
    try:
        t0 = time.time()
        while True:
            if srv.poll() is not None:
                sys.exit(f"llama-server exited ({srv.returncode}), log {log}")
            try:
                if http(f"http://127.0.0.1:{port}/health", timeout=5).get("status") == "ok":
                    break
            except Exception:
                pass
            if time.time() - t0 > 120:
                sys.exit(f"llama-server not ready after 120 s, log {log}")
            time.sleep(0.2)
        props = http(f"http://127.0.0.1:{port}/props")
        r = http(f"http://127.0.0.1:{port}/completion",
                 {"prompt": prompt, "n_predict": n, "temperature": 0, "n_probs": a.lookup, "ignore_eos": True,
                  "post_sampling_probs": False, "cache_prompt": False, "return_tokens": True})
    finally:
        srv.terminate()
        try:
            srv.wait(timeout=30)
        except subprocess.TimeoutExpired:
            srv.kill()
            srv.wait()
    probs = r["completion_probabilities"]
    # llama-server leaves out the record of a token whose bytes are not
    # whole UTF-8 on their own (byte tokens of a small vocabulary): the
    # records are matched to the generated ids in order, and a step without
    # one is {"id": id, "top": None}: it counts for the greedy prefix, not
    # for the compared values.
    toks = r.get("tokens") or [p["id"] for p in probs]
    if len(toks) != n or r.get("tokens_evaluated") != len(prompt):
        sys.exit(f"reference: {len(toks)} steps, {r.get('tokens_evaluated')} prompt tokens evaluated "
                 f"(expected {n}, {len(prompt)})")
    recs, j = [], 0
    for t in toks:
        if j < len(probs) and probs[j]["id"] == t:
            p = probs[j]
            recs.append({"id": t, "logprob": p["logprob"], "top": [(x["id"], x["logprob"]) for x in p["top_logprobs"]]})
            j += 1
        else:
            recs.append({"id": t, "logprob": None, "top": None})
    if j != len(probs):
        sys.exit(f"reference: {len(probs) - j} probability records match no generated token")
    return recs, props.get("build_info", "?")


def compare_step(g, r):
    """One step: union of both top-20 sets, values from each side's top-64."""
    gd, rd = dict(g["top"]), dict(r["top"])
    ids = [t for t, _ in g["top"][:TOP]] + [t for t, _ in r["top"][:TOP] if t not in dict(g["top"][:TOP])]
    diffs, rel, unresolved, bound = [], [], 0, 0.0
    anchor = r["top"][0][0]  # the reference's top-1: both normalizers cancel in differences to it
    for t in ids:
        if t in gd and t in rd:
            diffs.append(abs(gd[t] - rd[t]))
            if anchor in gd:
                rel.append(abs((gd[t] - gd[anchor]) - (rd[t] - rd[anchor])))
        else:
            unresolved += 1
            # the missing side's value is at most its lookup-depth floor
            have, floor = (gd[t], r["top"][-1][1]) if t in gd else (rd[t], g["top"][-1][1])
            bound = max(bound, have - floor)
    return diffs, rel, unresolved, bound


def compare_ref(g_forced, g_free, ref):
    n = len(ref)
    worst, total, count, unresolved, bound, worst_rel, total_rel, count_rel = 0.0, 0.0, 0, 0, 0.0, 0.0, 0.0, 0
    worst_step = -1
    chosen_worst = 0.0
    agree, disagreements = 0, []
    missing = 0
    for i in range(n):
        g, r = g_forced[i], ref[i]
        assert g["id"] == r["id"]
        if r["top"] is None:  # the reference gave no record for this step
            missing += 1
            continue
        d, rl, u, b = compare_step(g, r)
        if d and max(d) > worst:
            worst, worst_step = max(d), i
        total += sum(d)
        count += len(d)
        worst_rel = max([worst_rel] + rl)
        total_rel += sum(rl)
        count_rel += len(rl)
        unresolved += u
        bound = max(bound, b)
        gd = dict(g["top"])
        chosen_worst = max(chosen_worst, abs(g["logprob"] - r["logprob"]))
        r_top = r["top"][0][0]
        if g["argmax"] == r_top:
            agree += 1
        else:
            rd = dict(r["top"])
            disagreements.append({"step": i, "gem_argmax": g["argmax"], "ref_argmax": r_top,
                                  "ref_margin": r["top"][0][1] - rd.get(g["argmax"], r["top"][-1][1]),
                                  "gem_margin": g["top"][0][1] - gd.get(r_top, g["top"][-1][1])})
    prefix = 0
    while prefix < n and g_free[prefix]["id"] == ref[prefix]["id"]:
        prefix += 1
    # on the common prefix the free run and the forced run saw the same tokens
    same = all(g_free[i]["top"] == g_forced[i]["top"] for i in range(prefix))
    return {"steps": n, "steps_without_reference_record": missing, "max_abs_dlogprob": worst, "max_at_step": worst_step,
            "mean_abs_dlogprob": total / count if count else None, "values_compared": count,
            "max_abs_dlogprob_rel_top1": worst_rel, "mean_abs_dlogprob_rel_top1": total_rel / count_rel if count_rel else None,
            "unresolved": unresolved, "unresolved_gap_bound": bound, "max_abs_dlogprob_chosen": chosen_worst,
            "argmax_agree": agree, "argmax_disagreements": disagreements, "greedy_prefix_identical": prefix,
            "free_run_equals_forced_on_prefix": same}


def read_golden(path):
    raw = open(path, "rb").read()
    assert raw[:6] == b"GEMHF1", path
    n_pos, n_sub, n_top = struct.unpack_from("<III", raw, 8)
    off = 20
    ids = list(struct.unpack_from(f"<{n_pos}i", raw, off))
    off += 4 * n_pos
    sub = list(struct.unpack_from(f"<{n_sub}i", raw, off))
    off += 4 * n_sub
    pos = []
    for _ in range(n_pos):
        am, mx, margin = struct.unpack_from("<iff", raw, off)
        off += 12
        lsub = struct.unpack_from(f"<{n_sub}f", raw, off)
        off += 4 * n_sub
        tids = struct.unpack_from(f"<{n_top}i", raw, off)
        off += 4 * n_top
        tl = struct.unpack_from(f"<{n_top}f", raw, off)
        off += 4 * n_top
        vals = dict(zip(sub, lsub))
        vals.update(zip(tids, tl))
        pos.append({"argmax": am, "max": mx, "margin": margin, "top": list(zip(tids, tl)), "vals": vals})
    assert off == len(raw), f"{path}: {len(raw) - off} trailing bytes"
    return ids, pos


def compare_hf(g, gold):
    worst = worst_rel = 0.0
    worst_step = -1
    count = unresolved = agree = close = 0
    disagreements = []
    for j, (gs, h) in enumerate(zip(g, gold)):
        gl = {t: lp + gs["lse"] for t, lp in gs["top"]}  # gem's logits from its top-64
        g_top1 = gs["top"][0][1] + gs["lse"]
        h_top1 = h["top"][0][1]
        ids = [t for t, _ in h["top"]] + [t for t, _ in gs["top"][:TOP] if t in h["vals"]]
        for t in dict.fromkeys(ids):
            if t not in gl:
                unresolved += 1
                continue
            d = abs(gl[t] - h["vals"][t])
            if d > worst:
                worst, worst_step = d, j
            worst_rel = max(worst_rel, abs((gl[t] - g_top1) - (h["vals"][t] - h_top1)))
            count += 1
        if gs["argmax"] == h["argmax"]:
            agree += 1
        elif h["margin"] <= 1e-3:
            close += 1
        else:
            disagreements.append({"pos": j, "gem_argmax": gs["argmax"], "hf_argmax": h["argmax"], "hf_margin": h["margin"]})
    return {"positions": len(gold), "max_abs_dlogit": worst, "max_at_pos": worst_step,
            "max_abs_dlogprob_rel_top1": worst_rel, "values_compared": count, "unresolved": unresolved,
            "argmax_agree": agree, "argmax_close_calls": close, "argmax_disagreements": disagreements}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=128)
    ap.add_argument("--text", default=DEFAULT_TEXT)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--lookup", type=int, default=64, help="depth of each side's list used to find the other's ids")
    ap.add_argument("--model", action="append", default=[], help="NAME=PATH (default: tiny synth seed 3 and the demo model)")
    ap.add_argument("--variants", default="default,compat-llama")
    ap.add_argument("--no-ref", action="store_true")
    ap.add_argument("--no-hf", action="store_true")
    ap.add_argument("--backend", default="")
    ap.add_argument("--gem", default="./gem", help="the gem executable (default ./gem, built first)")
    ap.add_argument("--server", default=".ref/llama.cpp/build-cpu/bin/llama-server")
    ap.add_argument("--note", action="append", default=[], help="a finding to record with the results (repeatable)")
    ap.add_argument("--out", default="", help="output prefix (default bench/results/logits-BACKEND-DATE)")
    a = ap.parse_args()
    if a.lookup < TOP:
        sys.exit(f"--lookup must be at least {TOP}")
    if a.gem == "./gem":
        subprocess.run(["make", "-s", "gem"], check=True)
    tmp = tempfile.mkdtemp(prefix="gem-logits-")
    variants = a.variants.split(",")

    models = []
    if a.model:
        for m in a.model:
            name, _, path = m.partition("=")
            models.append((name, path, None))
    else:
        tiny = os.path.join(tmp, "gemma4-tiny-f32-seed3.gguf")
        subprocess.run(["./gem", "synth", "--profile", "gemma4-tiny", "--type", "f32", "--seed", "3", "-o", tiny],
                       check=True, capture_output=True)
        if not os.path.exists("data/models/default.gguf"):
            subprocess.run(["make", "data/models/default.gguf"], check=True)
        models = [("gemma4-tiny f32 seed 3 (gem synth)", tiny, "./gem synth --profile gemma4-tiny --type f32 --seed 3"),
                  ("demo model (data/models/default.gguf, q4_0)", "data/models/default.gguf", None)]
        # the demo model's other exports, where tools/demo_model.sh left them:
        # they separate quantized-kernel arithmetic from the rest
        for t in ("f32", "q8_0"):
            if os.path.exists(f"build/demo/demo-{t}.gguf"):
                models.append((f"demo model {t} (build/demo/demo-{t}.gguf)", f"build/demo/demo-{t}.gguf", None))

    prompt = gem_tokenize(a.text)
    doc = {"benchmark": "per-step top-20 log-probabilities, gem vs llama.cpp (llama-server /completion, n_probs, "
                        "F32 KV, flash attention off) and vs transformers goldens",
           "date": datetime.date.today().isoformat(),
           "commit": subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip(),
           "dirty": subprocess.run(["git", "diff", "--quiet"]).returncode != 0,
           "backend": a.backend or "cpu",
           "cpu": next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?"),
           "nproc": os.cpu_count(), "threads": a.threads or os.cpu_count(),
           "top": TOP, "lookup": a.lookup, "steps": a.steps, "text": a.text, "prompt_ids": prompt,
           "method": ("reference: llama-server greedy with n_probs (pre-sampling log-softmax of the full vocabulary); "
                      "gem teacher-forced along the reference's ids (--force-ids) for all steps, and greedy on its own "
                      "for the identical-prefix count; per step the union of both top-20 sets, each side's value from "
                      "its own top-%d; argmax = gem's vs the reference's top-1 (pre-EOG-bias)" % a.lookup),
           "notes": a.note, "reference": [], "transformers": []}

    if not a.no_ref:
        if not os.path.exists(a.server):
            sys.exit("reference missing: run bench/reference/build.sh cpu (or --no-ref)")
        for name, path, how in models:
            prompt = gem_tokenize(a.text, path)  # the file's own tokenizer (a Gemma file's: doc's prompt_ids)
            ref, build = reference(a, path, prompt, a.steps, os.path.join(tmp, "server.log"))
            doc["reference_build"] = build
            ref_ids = [r["id"] for r in ref]
            for v in variants:
                forced = gem_logprobs(a, path, prompt, len(ref), VARIANTS[v], force=ref_ids)
                free = gem_logprobs(a, path, prompt, len(ref), VARIANTS[v])
                res = compare_ref(forced, free, ref)
                res.update({"model": name, "file": path if how is None else how, "model_sha256": sha256(path),
                            "prompt_ids": prompt,
                            "gem_variant": v, "reference_ids": ref_ids, "gem_free_ids": [g["id"] for g in free]})
                doc["reference"].append(res)
                print(f"ref  {name} [{v}]: max |dlogprob| {res['max_abs_dlogprob']:.3g} (mean "
                      f"{res['mean_abs_dlogprob']:.3g}, {res['unresolved']} unresolved), rel. top-1 "
                      f"{res['max_abs_dlogprob_rel_top1']:.3g}, argmax {res['argmax_agree']}/"
                      f"{res['steps']}, greedy prefix {res['greedy_prefix_identical']}/{res['steps']}", flush=True)

    if not a.no_hf:
        for gpath in sorted(glob.glob("tests/data/hf/gemma4-tiny-f32-seed*-long.bin")):
            seed = int(re.search(r"seed(\d+)", gpath).group(1))
            model = os.path.join(tmp, f"gemma4-tiny-f32-seed{seed}.gguf")
            subprocess.run(["./gem", "synth", "--profile", "gemma4-tiny", "--type", "f32", "--seed", str(seed), "-o",
                            model], check=True, capture_output=True)
            ids, gold = read_golden(gpath)
            for v in variants:
                g = gem_logprobs(a, model, ids[:1], len(ids), VARIANTS[v], force=ids[1:])
                res = compare_hf(g, gold)
                res.update({"golden": gpath, "model": f"gemma4-tiny f32 seed {seed} (gem synth)",
                            "model_sha256": sha256(model), "gem_variant": v})
                doc["transformers"].append(res)
                print(f"hf   {gpath} [{v}]: max |dlogit| {res['max_abs_dlogit']:.3g}, rel-top1 "
                      f"{res['max_abs_dlogprob_rel_top1']:.3g}, argmax {res['argmax_agree']}/{res['positions']} "
                      f"({res['argmax_close_calls']} close calls)", flush=True)
            os.remove(model)

    for name, path, how in models:
        if how is not None:
            os.remove(path)
    os.rmdir(tmp) if not os.listdir(tmp) else None

    out = a.out or f"bench/results/logits-{doc['backend']}-{doc['date']}"
    json.dump(doc, open(out + ".json", "w"), indent=1)
    md = render(doc, out + ".json")
    open(out + ".md", "w").write(md)
    print(md)
    print(f"wrote {out}.json and {out}.md")


def render(doc, jpath):
    L = [f"# Logit comparison, {doc['backend'].upper()} ({doc['date']})", "",
         f"Generated by `bench/logits.py` (`{jpath}`). gem commit `{doc['commit'][:10]}`"
         f"{' (with uncommitted changes)' if doc['dirty'] else ''}, {doc['cpu']} ({doc['nproc']} cores, "
         f"{doc['threads']} threads); reference llama.cpp {doc.get('reference_build', '')} (v0.5.0).", "",
         f"Prompt: {len(doc['prompt_ids'])} ids (`gem tokenize` of \"{doc['text']}\"), {doc['steps']} greedy steps, "
         "EOS ignored. gem `default` is its normal path, `compat-llama` reproduces the reference's fp16 GELU table.", ""]
    if doc["reference"]:
        L += ["## gem vs llama.cpp (llama-server /completion, n_probs, F32 KV cache)", "",
              "Each step compares the union of both sides' top-20 ids (each side's value from its own top-"
              f"{doc['lookup']}); gem is teacher-forced along the reference's greedy ids, so all steps see the same "
              "prefix. *rel. top-1*: the same differences after subtracting each side's logprob of the reference's "
              "top-1 token, which cancels the normalizers: the reference sums the softmax denominator of 262144 "
              "terms in float32 (server-common.cpp get_token_probabilities), which shifts all its logprobs of a step "
              "by up to a few 1e-3 on a peaked distribution (gem's log-sum-exp is in double). *chosen*: the "
              "logprob of the token taken. *argmax*: gem's argmax = the reference's top-1. *prefix*: steps for which "
              "gem's own greedy run chose the same ids.", "",
              "| model | gem | steps | max abs dlogprob (top-20) | mean | max rel. top-1 | mean rel. top-1 | chosen | "
              "argmax agree | identical prefix | unresolved |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in doc["reference"]:
            L.append(f"| {r['model']} | {r['gem_variant']} | {r['steps']} | {r['max_abs_dlogprob']:.2e} | "
                     f"{r['mean_abs_dlogprob']:.2e} | {r['max_abs_dlogprob_rel_top1']:.2e} | "
                     f"{r['mean_abs_dlogprob_rel_top1']:.2e} | {r['max_abs_dlogprob_chosen']:.2e} | "
                     f"{r['argmax_agree']}/{r['steps']} | {r['greedy_prefix_identical']}/{r['steps']} | "
                     f"{r['unresolved']} |")
        L.append("")
    if doc["transformers"]:
        L += ["## gem vs transformers goldens (tests/data/hf, Gemma4ForCausalLM float32 eager)", "",
              "The goldens hold the soft-capped logits of every prompt position (top 16 and 2048 sampled ids), not "
              "the normalizer: compared are the logits (gem's = logprob + its log-sum-exp) at the golden's top 16 "
              "and at gem's top-20 ids the golden holds, and the same relative to the top-1 logit (= the logprob "
              "difference with both normalizers cancelled). gem is forced along the golden's prompt, one step per "
              "position. Close calls: golden top-2 margin <= 1e-3.", "",
              "| golden | gem | positions | max abs dlogit | max abs dlogprob rel. top-1 | argmax agree | close calls |",
              "|---|---|---|---|---|---|---|"]
        for r in doc["transformers"]:
            L.append(f"| `{os.path.basename(r['golden'])}` | {r['gem_variant']} | {r['positions']} | "
                     f"{r['max_abs_dlogit']:.2e} | {r['max_abs_dlogprob_rel_top1']:.2e} | "
                     f"{r['argmax_agree']}/{r['positions']} | {r['argmax_close_calls']} |")
        L.append("")
    if doc.get("notes"):
        L += ["## Notes", ""] + [f"- {n}" for n in doc["notes"]] + [""]
    files = []
    for r in doc["reference"] + doc["transformers"]:
        if (r["model"], r["model_sha256"]) not in files:
            files.append((r["model"], r["model_sha256"]))
    L += ["Model files (SHA-256):", ""] + [f"- {m}: `{h}`" for m, h in files]
    return "\n".join(L) + "\n"


if __name__ == "__main__":
    main()
