#!/bin/sh
# Conversion and quantization throughput on this machine, gem against the
# pinned reference where the reference can run here:
#   - gem quantize vs llama-quantize, same f32 input, same thread count,
#     for q8_0, q4_0, q4_k, q5_k and q6_k (A/B order alternating per type); the
#     two outputs must have the same SHA-256;
#   - gem convert of a Hugging Face checkpoint (exported from the same model
#     by tools/gguf_to_hf.py) to f32, bf16 and f16 (the reference converter
#     needs torch/numpy, absent here: gem only).
# Throughput is input bytes read per second of wall time (page cache warm).
#   PROFILE=gemma4-1b THREADS=2 bench/convert_bench.sh
# Writes bench/results/convert-DATE.json. Needs bench/reference/build.sh cpu.
. "$(dirname "$0")/../tools/ref_env.sh"
PROFILE=${PROFILE:-gemma4-1b}
THREADS=${THREADS:-2}
make -s gem
in=$tmp/in.gguf
./gem synth --profile "$PROFILE" --type f32 --seed 11 -o "$in" 2>/dev/null
cat "$in" > /dev/null
now() { date +%s.%N; }
results=$tmp/results.txt
: > "$results"
i=0
for t in q8_0 q4_0 q4_k q5_k q6_k; do
    T=$(echo $t | tr a-z A-Z)
    for who in gem ref; do
        # alternate which side goes first
        [ $((i % 2)) = 1 ] && who=$( [ $who = gem ] && echo ref || echo gem )
        t0=$(now)
        if [ $who = gem ]; then
            ./gem quantize "$in" "$tmp/$who.gguf" --type $t -t "$THREADS" 2>/dev/null
        else
            "$bin/llama-quantize" "$in" "$tmp/$who.gguf" $T "$THREADS" >/dev/null 2>&1
        fi
        t1=$(now)
        echo "quantize $t $who $(echo "$t1 - $t0" | bc) $(sha256sum "$tmp/$who.gguf" | cut -d' ' -f1)" >> "$results"
    done
    rm -f "$tmp/gem.gguf" "$tmp/ref.gguf"
    i=$((i + 1))
done
python3 tools/gguf_to_hf.py "$in" "$tmp/hf"
cat "$tmp/hf/model.safetensors" > /dev/null
for t in f32 bf16 f16; do
    t0=$(now)
    ./gem convert "$tmp/hf" -o "$tmp/conv.gguf" --type $t -t "$THREADS" 2>/dev/null
    t1=$(now)
    echo "convert $t gem $(echo "$t1 - $t0" | bc) -" >> "$results"
    rm -f "$tmp/conv.gguf"
done
date=$(date -u +%Y-%m-%d)
dirty=$(git diff --quiet && echo false || echo true)
out=bench/results/convert-$date.json
python3 - "$results" "$out" "$(stat -c %s "$in")" "$(stat -c %s "$tmp/hf/model.safetensors")" <<PY
import json, sys
rows = [l.split() for l in open(sys.argv[1])]
in_bytes, st_bytes = int(sys.argv[3]), int(sys.argv[4])
q = {}
for kind, t, who, secs, sha in rows:
    if kind != "quantize":
        continue
    q.setdefault(t, {})[who] = {"seconds": float(secs), "mb_per_s": round(in_bytes / float(secs) / 1e6, 1), "sha256": sha}
for t, d in q.items():
    d["identical"] = d["gem"]["sha256"] == d["ref"]["sha256"]
    d["ratio"] = round(d["ref"]["seconds"] / d["gem"]["seconds"], 2)
c = {t: {"seconds": float(secs), "mb_per_s": round(st_bytes / float(secs) / 1e6, 1)}
     for kind, t, who, secs, sha in rows if kind == "convert"}
res = {
    "benchmark": "gem quantize vs llama-quantize (same f32 input and threads), gem convert from safetensors; input bytes per wall second, page cache warm, one run each",
    "commit": "$(git rev-parse HEAD)",
    "dirty": "$dirty" == "true",
    "cpu": "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')",
    "threads": int("$THREADS"),
    "compiler": "$(${CC:-cc} --version | head -1)",
    "reference": "$(cat .ref/VERSION-cpu 2>/dev/null | tr '\n' ' ' || echo 'llama.cpp v0.5.0')",
    "model": "$PROFILE f32 (gem synth seed 11)",
    "input_bytes": in_bytes,
    "safetensors_bytes": st_bytes,
    "quantize": q,
    "convert": c,
}
json.dump(res, open(sys.argv[2], "w"), indent=1)
for t, d in q.items():
    print(f"quantize {t}: gem {d['gem']['mb_per_s']} MB/s, reference {d['ref']['mb_per_s']} MB/s ({d['ratio']}x), identical: {d['identical']}")
for t, d in c.items():
    print(f"convert {t}: gem {d['mb_per_s']} MB/s")
PY
echo "wrote $out"
