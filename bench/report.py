#!/usr/bin/env python3
"""Regenerates the README's performance section from the newest committed
results in bench/results/ (never typed by hand). The section sits between
the markers <!-- perf:begin --> and <!-- perf:end -->."""
import glob
import json
import os
import re

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.chdir(root)


def newest(pattern):
    files = sorted(glob.glob(pattern))
    return files[-1] if files else None


def stamp(f):
    """The date part of a result's name (e.g. 2026-12-04b), for ordering files of different kinds."""
    m = re.search(r"(\d{4}-\d{2}-\d{2}[a-z]?)\.json$", f or "")
    return m.group(1) if m else ""


lines = []


def gbs_cell(gbs, peak):
    """Achieved GB/s and its share of the peak the run recorded (gem bench
    takes it from the card: 4800 on an H200, 3350 on an H100 SXM)."""
    if not gbs:
        return "-"
    return f"{gbs:.0f} ({100 * gbs / peak:.1f}% of {peak:.0f})" if peak else f"{gbs:.0f}"


# CUDA: the newest same-call record (gem bench and llama-bench on the same
# files in one device call) stands for the GPU when it is newer than the
# A/B harness's and the per-model files, which then are left out
samecall = newest("bench/results/cuda-samecall-*.json")
if samecall:
    d = json.load(open(samecall))
    lines += [f"CUDA, {d['hardware']}: gem bench and the pinned reference's llama-bench on the same synthetic GGUF "
              f"files {d.get('run', 'in one device call')}, batch 1, greedy, f16 KV caches, medians (`{samecall}`, commit "
              f"{d['commit'].split()[0]}; commands: `{d['commands']}`):", "",
              "| model | prefill 2048 tok/s | llama.cpp | ratio | decode depth 0 tok/s | llama.cpp | ratio | "
              "GB/s (of the card's peak) | depth 8192 | llama.cpp | depth 32768 | llama.cpp | GPU memory |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, m in d["models"].items():
        g, r = m["gem"], m["llama_bench"]
        pf = {x["tokens"]: x["tok_s"] for x in g["prefill"]}
        dc = {x["depth"]: x for x in g["decode"]}
        rp, rd = r.get("pp2048@0", {}).get("avg_ts"), {k: r.get(f"tg64@{k}", {}).get("avg_ts") for k in (0, 8192, 32768)}
        cell = lambda v: f"{v:.1f}" if v else "-"
        ratio = lambda a, b: f"{a / b:.2f}x" if a and b else "-"
        d0 = dc.get(0, {})
        lines.append(f"| {name.split(',')[0]} | {cell(pf.get(2048))} | {cell(rp)} | {ratio(pf.get(2048), rp)} | "
                     f"{cell(d0.get('tok_s'))} | {cell(rd[0])} | {ratio(d0.get('tok_s'), rd[0])} | "
                     f"{gbs_cell(d0.get('weight_gbs'), g.get('peak_gbs'))} | "
                     f"{cell(dc.get(8192, {}).get('tok_s'))} | {cell(rd[8192])} | "
                     f"{cell(dc.get(32768, {}).get('tok_s'))} | {cell(rd[32768])} | "
                     f"{g['peak_device_bytes'] / 2**30:.1f} GiB |")
    lines.append("")
skip_cuda = lambda f: samecall and stamp(f) <= stamp(samecall)
# A/B comparisons (bench/ab): one table per backend, newest file of each
for backend in ("cuda", "cpu"):
    ab = newest(f"bench/results/ab-{backend}-*.json")
    if not ab or (backend == "cuda" and skip_cuda(ab)):
        continue
    d = json.load(open(ab))
    st = d["settings"]
    hw = d["hardware"].get("gpu", {}).get("name") or d["hardware"]["cpu"]
    lines += [f"{backend.upper()} A/B, {hw}: gem vs llama.cpp ({d['reference'].split(';')[0]}) in one run, "
              f"A/B/B/A, {st['reps']} repetitions after a warm-up, medians; prompt {st['prompt']} tokens, "
              f"{st['gen']} decode steps per depth, KV cache gem {st.get('gem_kv_type', 'f32').upper()} / "
              f"llama.cpp F16 (`{ab}`, report `{ab[:-5]}.md`"
              + (f", plot `{d['png']}`" if d.get("png") else "") + f", commit {d['commit'][:10]}):", "",
              "| model | figure | gem | llama.cpp | gem / llama.cpp |", "|---|---|---|---|---|"]
    for m in d["models"]:
        figs = [(f"prefill {st['prompt']} tok/s", m["prefill_tok_s"], "%.1f"),
                ("time to first token s", m["ttft_s"], "%.3f")]
        figs += [(f"decode tok/s, depth {k}", v, "%.2f") for k, v in m["decode_tok_s"].items()]
        for name, f, fmt in figs:
            lines.append(f"| {m['name']} | {name} | {fmt % f['gem']['median']} | {fmt % f['ref']['median']} | "
                         f"{f['ratio']:.2f}x |")
        if m.get("gem_peak_device_bytes"):  # on a GPU the host RSS only counts the mapped file
            lines.append(f"| {m['name']} | gem peak GPU memory | {m['gem_peak_device_bytes'] / 2**30:.2f} GiB | | |")
        elif m.get("gem_peak_rss_bytes"):
            lines.append(f"| {m['name']} | gem peak resident set | {m['gem_peak_rss_bytes'] / 2**20:.0f} MiB | | |")
    lines.append("")
# the older CPU harness (bench/cpu_bench.py), only while no A/B report exists
cpu = None if newest("bench/results/ab-cpu-*.json") else newest("bench/results/cpu-2*.json")
if cpu:
    d = json.load(open(cpu))
    lines += [f"CPU, {d['cpu']} ({d['nproc']} cores, {d['threads']} threads), gem vs llama.cpp v0.5.0 in one run "
              f"({d['order']}, median of {d['reps']} pairs; `{cpu}`, commit {d['commit'][:10]}):", "",
              "| model | gem prompt tok/s | ref prompt tok/s | ratio | gem decode tok/s | ref decode tok/s | ratio | gem peak RSS |",
              "|---|---|---|---|---|---|---|---|"]
    for t, v in d["results"].items():
        g, r = v["gem_median"], v["reference_median"]
        lines.append(f"| gemma4-1b {t} | {g['pp_tok_s']:.1f} | {r['pp_tok_s']:.1f} | {v['ratio']['pp']:.2f}x | "
                     f"{g['tg_tok_s']:.1f} | {r['tg_tok_s']:.1f} | {v['ratio']['tg']:.2f}x | {g['peak_rss_mib']:.0f} MiB |")
    lines.append("")
# tokenizer encode speed: Gemma's SentencePiece BPE (tok-encode-DATE) and
# Qwen3.5's byte-level BPE (tok-encode-qwen35-DATE), the newest of each
for pattern, title, corpus in (("bench/results/tok-encode-2*.json", "Tokenizer encode throughput", "4.4 MB golden corpus"),
                               ("bench/results/tok-encode-qwen35-*.json", "Qwen3.5 byte-level BPE encode throughput",
                                "5.4 MB golden corpus")):
    tok = newest(pattern)
    if not tok:
        continue
    d = json.load(open(tok))
    lines.append(f"{title} (`{tok}`, commit {d['commit'][:10]}):")
    lines.append("")
    lines.append("| input | gem MB/s | reference MB/s | ratio |")
    lines.append("|---|---|---|---|")
    for k, name in (("corpus", corpus), ("line_10mb", "10 MB line, no newlines")):
        g = max(x["mb_per_s"] for x in d[k]["gem"])
        r = max(x["mb_per_s"] for x in d[k]["reference"])
        lines.append(f"| {name} | {g:.2f} | {r:.2f} | {g / r:.1f}x |")
    lines.append("")
conv = newest("bench/results/convert-*.json")
if conv:
    d = json.load(open(conv))
    lines.append(f"Quantization and conversion of {d['model']} ({d['input_bytes'] / 1e9:.1f} GB), {d['threads']} threads, "
                 f"input MB read per second (`{conv}`, commit {d['commit'][:10]}):")
    lines.append("")
    lines.append("| step | gem MB/s | reference MB/s | ratio | same bytes |")
    lines.append("|---|---|---|---|---|")
    for t, v in d["quantize"].items():
        lines.append(f"| quantize {t} | {v['gem']['mb_per_s']:.0f} | {v['ref']['mb_per_s']:.0f} | {v['ratio']:.2f}x | "
                     f"{'yes' if v['identical'] else 'NO'} |")
    for t, v in d["convert"].items():
        lines.append(f"| convert safetensors to {t} | {v['mb_per_s']:.0f} | (needs torch) | | |")
    lines.append("")
cuda = [f for f in (newest(f"bench/results/cuda-{m}-*.json") for m in ("31b-q4_0", "31b-q8_0", "12b-q4_0"))
        if f and not skip_cuda(f)]
if cuda:
    lines.append("CUDA, synthetic models (Q8_0 embedding), `gem bench`, medians; llama.cpp columns: the "
                 "pinned reference's llama-bench on the same file in the same call where the file records it "
                 "(`reference`), else -:")
    lines.append("")
    lines.append("| model | prefill 512 tok/s | prefill 2048 tok/s | llama.cpp prefill 2048 | decode depth 0 tok/s | "
                 "llama.cpp decode | GB/s (of the card's peak) | decode depth 8192 tok/s | GPU memory | hardware | "
                 "file, commit |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|---|")
    for f in cuda:
        d = json.load(open(f))
        pf = {p["tokens"]: p["tok_s"] for p in d["prefill"]}
        dc = {x["depth"]: x for x in d["decode"]}
        d0 = dc.get(0, {})
        d8 = dc.get(8192)
        mem = f"{d['peak_device_bytes'] / 2**30:.1f} GiB" if d.get("peak_device_bytes") else "-"
        ref = d.get("reference", {})
        fmt = lambda v, f: f % v if v else "-"
        lines.append(f"| {f.split('cuda-')[1].rsplit('-2026', 1)[0]} | {fmt(pf.get(512), '%.0f')} | "
                     f"{fmt(pf.get(2048), '%.0f')} | {fmt(ref.get('prefill_2048_tok_s'), '%.0f')} | "
                     f"{d0.get('tok_s', 0):.1f} | {fmt(ref.get('decode_tok_s'), '%.1f')} | "
                     f"{gbs_cell(d0.get('weight_gbs'), d.get('peak_gbs'))} | "
                     f"{'%.1f' % d8['tok_s'] if d8 else '-'} | {mem} | {d.get('hardware', '-')} | "
                     f"`{f}`, {d.get('commit', '-')} |")
    lines.append("")
for f in sorted(glob.glob("bench/results/*synth*.json")):
    d = json.load(open(f))
    lines.append(f"`gem synth` 31B Q4_0 on the H200 machine: {d['file_bytes'] / 1e9:.1f} GB in {d['wall_seconds']} s "
                 f"(`{f}`); weight-read roofline {d['weight_read_roofline_tok_s_at_4p8_TBps']} tok/s at 4.8 TB/s.")
    lines.append("")
# served speed (bench/serve_speed.sh): the newest file per backend
rows = []
for backend in ("cuda", "cpu"):
    f = newest(f"bench/results/serve-speed-{backend}-*.json")
    if not f:
        continue
    d = json.load(open(f))
    b, g, r, l = d["gem_bench"], d["gem_serve"], d["ratios"], d.get("llama_server")
    lm = lambda k, fmt: fmt % l[k] if l and l.get(k) else "-"
    rows.append(f"| {os.path.basename(d['model'])} | {d['hardware'].split(',')[0]} | {b['prompt_tokens']} | "
                f"{b['ttft_s']:.3f} | {g['ttft_s']:.3f} | {r['ttft_served_over_bench']:.3f} | {lm('ttft_s', '%.3f')} | "
                f"{b['decode_tok_s']:.1f} | {g['decode_tok_s']:.1f} | {r['decode_served_over_bench']:.3f} | "
                f"{lm('decode_tok_s', '%.1f')} | `{f}`, {d['commit']} |")
if rows:
    lines += ["Served speed: `gem serve` through streamed `/v1/completions` (one client, token prompts, greedy, "
              "no prompt cache, time to first token and decode rate as the client sees them) against `gem bench` "
              "on the same file, and the pinned reference's llama-server measured the same way in the same run "
              "(`bench/serve_speed.sh`; medians):", "",
              "| model | hardware | prompt | bench TTFT s | served TTFT s | served / bench | llama-server TTFT s | "
              "bench decode tok/s | served decode tok/s | served / bench | llama-server decode tok/s | file, commit |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"] + rows + [""]
# speculative decoding (gem bench --spec/--mtp): of the cuda-*-31b-* files
# that hold a fixed-k run and a cost-policy run of the same model, the one
# whose fixed-k run is newest (its bench "date")
spec_files = [(json.load(open(g)).get("spec_31b_fixed_k8", {}).get("date", ""), g)
              for g in glob.glob("bench/results/cuda-*-31b-*.json")
              if "spec_31b_fixed_k8" in json.load(open(g))]
f = max(spec_files)[1] if spec_files else None
if f:
    d = json.load(open(f))
    runs = {"k = 8 fixed": d.get("spec_31b_fixed_k8", {}), "cost policy": d.get("spec_31b_policy", {})}
    cells = {}
    for mode, r in runs.items():
        for x in r.get("speculative", []):
            who = "plain" if x["drafter"] == "none" else (f"replay a = {x['p_right']:g}" if x["drafter"] == "replay"
                                                           else "random 31B drafter (0% accepted)")
            cells.setdefault(who, {})[(mode, x["depth"])] = x
    depths = sorted({x["depth"] for r in runs.values() for x in r.get("speculative", [])})
    cols = [(m, dp) for dp in depths for m in runs]
    hw = runs["k = 8 fixed"].get("hardware", "").split(",")[0].replace("cuda:0 ", "")
    lines += [f"Speculative decoding, {hw}: synthetic 31B Q4_0 (q8_0 embedding), f16 caches, 128 greedy tokens, "
              "answers asserted identical to plain decoding; tok/s and speed-up over plain in the same run; "
              "replay a: a test drafter right with probability a (`" + f + "`, `docs/spec.md`):", "",
              "| drafter | " + " | ".join(f"depth {0 if dp <= 1 else dp}, {m}" for m, dp in cols) + " |",
              "|---|" + "---|" * len(cols)]
    for who, row in cells.items():
        cs = []
        for c in cols:
            x = row.get(c)
            cs.append("-" if not x else f"{x['tok_s']:.1f}" + ("" if who == "plain" else f" ({x['speedup']:.2f}x)"))
        lines.append(f"| {who} | " + " | ".join(cs) + " |")
    note = d.get("table_note")
    lines += ["", note, ""] if note else [""]
# many clients at once (bench/load.py against gem serve --parallel N): the newest file
f = newest("bench/results/serve-parallel-31b-*.json")
if f:
    d = json.load(open(f))
    one = {r["clients"]: r for r in d.get("parallel1", [])}
    fmt = lambda v, f_: (f_ % v) if v is not None else "-"  # noqa: E731
    lines += [f"Many clients at once, {d['hardware'].split(',')[0]}: `gem serve --parallel 16` on a synthetic 31B "
              "Q4_0, each client a 2-turn streaming chat (64-token answers), measured by `bench/load.py`; the "
              f"one-slot server beside it (`{f}`, {d['commit'].split()[0]}):", "",
              "| clients | aggregate tok/s | TTFT p50 s | TTFT p95 s | per-stream tok/s p50 | one slot: aggregate tok/s | "
              "one slot: TTFT p50 s |", "|---|---|---|---|---|---|---|"]
    for r in d["parallel16"]:
        o = one.get(r["clients"], {})
        lines.append(f"| {r['clients']} | {r['aggregate_tok_s']:.1f} | {fmt(r['ttft_p50_s'], '%.3f')} | "
                     f"{fmt(r['ttft_p95_s'], '%.3f')} | {fmt(r['stream_tok_s_p50'], '%.1f')} | "
                     f"{fmt(o.get('aggregate_tok_s'), '%.1f')} | {fmt(o.get('ttft_p50_s'), '%.3f')} |")
    lines += [""]
# gem serve --parallel 16 against llama-server -np 16 on the same GPU (bench/load_compare.sh): the newest file
f = newest("bench/results/serve-parallel16-31b-*.json")
if f:
    d = json.load(open(f))
    lines += [f"gem serve --parallel 16 against llama-server -np 16 (the reference, `-ngl 99 -fa on --jinja`), "
              f"{d['card'].split(',')[0]}: synthetic 31B Q4_0, f16 caches, each client a 2-turn streaming chat "
              f"(a 300-word first message, 128-token answers), measured by `bench/load.py` one server after the "
              f"other in one device call (`{f}`, {d['commit'].split()[0]}):", "",
              "| clients | gem tok/s | llama-server tok/s | ratio | TTFT p50 s gem / llama | TTFT p95 s gem / llama | "
              "per-stream tok/s p50 gem / llama |", "|---|---|---|---|---|---|---|"]
    for r in d["table"]:
        lines.append(f"| {r['clients']} | {r['gem_tok_s']:.1f} | {r['llama_tok_s']:.1f} | {r['ratio']:.2f}x | "
                     f"{r['gem_ttft_p50']:.2f} / {r['llama_ttft_p50']:.2f} | {r['gem_ttft_p95']:.2f} / "
                     f"{r['llama_ttft_p95']:.2f} | {r['gem_stream_p50']:.1f} / {r['llama_stream_p50']:.1f} |")
    lines += [""] + [n for n in d.get("notes", [])[:1]] + [""]
# The rows of one bench/cpu_bench.py --gem-base file: model and type, test,
# gem, the build before, the reference, both ratios (lead: leading cells).
def cpu_paired_rows(d, lead):
    prof = d["benchmark"].split(", ")[1].split(" synthetic")[0] if ", " in d["benchmark"] else ""
    return [f"{lead}| {prof} {t} | {k} | {r['gem_median'][k]:.1f} | {r['gem_base_median'][k]:.1f} | "
            f"{r['reference_median'][k]:.1f} | {r['ratio'][k]:.2f}x | {r['ratio_base'][k]:.2f}x |"
            for t, r in d["results"].items() for k in r["gem_median"]]


# CPU weights packed at load (bench/cpu_bench.py --gem-base: gem, the build before, the reference in one run)
packed = sorted(glob.glob("bench/results/cpu-packed-*.json"))
if packed:
    d0 = json.load(open(packed[-1]))
    lines += [f"CPU, {d0['cpu']}, {d0['threads']} threads: gem with weights packed into its sixteen-row panels at load, "
              "against the build before and llama-bench in one run (`bench/cpu_bench.py --gem-base`), A/B/C/C/B/A, "
              f"{d0['reps']} repetitions, medians (" + ", ".join(f"`{f}`" for f in packed) + "):", "",
              "| model | test | gem tok/s | before | llama.cpp | ratio | before: ratio |", "|---|---|---|---|---|---|---|"]
    for f in packed:
        lines += cpu_paired_rows(json.load(open(f)), "")
    lines += [""]
# CPU one-token q4_0 products with the nibbles split in registers (the same paired run)
fused = sorted(glob.glob("bench/results/cpu-fused-*.json"))
if fused:
    d0 = json.load(open(fused[-1]))
    lines += [f"Then one-token products that make each block's codes in registers and use them at once, instead of "
              f"unpacking chunks of a panel to the stack first (CPU, {d0['cpu']}, {d0['threads']} threads, each change "
              f"in its own paired run against the build before it and llama-bench, medians: "
              + ", ".join(f"`{f}`" for f in fused) + "):", "",
              "| change | model | test | gem tok/s | before | llama.cpp | ratio | before: ratio |",
              "|---|---|---|---|---|---|---|---|"]
    for f in fused:
        d = json.load(open(f))
        lines += cpu_paired_rows(d, f"| {d.get('change', '')} ")
    lines += [""]
readme = open("README.md").read()
section = "<!-- perf:begin -->\n" + "\n".join(lines) + "<!-- perf:end -->"
if "<!-- perf:begin -->" in readme:
    readme = re.sub(r"<!-- perf:begin -->.*<!-- perf:end -->", lambda m: section, readme, flags=re.S)
else:
    readme = readme.replace("## CLI", "## Performance\n\nGenerated by `bench/report.py` from `bench/results/`.\n\n" + section + "\n\n## CLI", 1)
open("README.md", "w").write(readme)
print("README performance section updated")
