#!/bin/sh
# Tokenizer encode throughput, gem against the pinned reference, on the same
# machine in one run (A/B/B/A, best of 3 passes each, both in-process and
# excluding vocabulary load): the golden corpus as one text, and a 10 MB line
# without newlines (the linear-time check). The vocabulary is gemma4 (the
# default) or qwen35, each with its own golden corpus. Writes
# bench/results/tok-encode-DATE.json (gemma4) or
# tok-encode-qwen35-DATE.json. Needs bench/reference/build.sh cpu.
. "$(dirname "$0")/../tools/ref_env.sh"
case ${1:-gemma4} in
gemma4) vocab=data/vocab/gemma-4.gguf corpus_gz=tests/data/tok/corpus.inp.gz name=tok-encode ;;
qwen35) vocab=data/vocab/qwen35.gguf corpus_gz=tests/data/tok/qwen35-corpus.inp.gz name=tok-encode-qwen35 ;;
*) echo "usage: bench/tok_bench.sh [gemma4|qwen35]" >&2; exit 1 ;;
esac
make -s gem
cc -O2 -I$R/include -I$R/ggml/include tools/ref_tokenize.c -L$bin -lllama -Wl,-rpath,"$root/$bin" -o "$tmp/ref"
gzip -dc $corpus_gz > "$tmp/corpus.txt"
python3 -c "
import random; r = random.Random(1)
w = open('$tmp/corpus.txt', encoding='utf-8', errors='replace').read().split()
out = []; n = 0
while n < 10_000_000:
    x = r.choice(w); out.append(x); n += len(x.encode()) + 1
open('$tmp/line.txt', 'w').write(' '.join(out))"
run() { # input -> "gem_json ref_json" A/B/B/A
    g1=$(./gem tokenize -m $vocab --bench 3 < "$1")
    r1=$("$tmp/ref" $vocab "$1" bench 3)
    r2=$("$tmp/ref" $vocab "$1" bench 3)
    g2=$(./gem tokenize -m $vocab --bench 3 < "$1")
    echo "{\"gem\": [$g1, $g2], \"reference\": [$r1, $r2]}"
}
corpus=$(run "$tmp/corpus.txt")
line=$(run "$tmp/line.txt")
date=$(date -u +%Y-%m-%d)
# read the tree state before writing the result file (writing it dirties the tree)
dirty=$(git diff --quiet && echo false || echo true)
out=bench/results/$name-$date.json
cat > "$out" <<JSON
{
  "benchmark": "tokenizer encode throughput (no BOS, no special parsing), best of 3 passes, A/B/B/A",
  "commit": "$(git rev-parse HEAD)",
  "dirty": $dirty,
  "backend": "cpu (single thread)",
  "cpu": "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')",
  "compiler": "$(${CC:-cc} --version | head -1)",
  "reference": "$(cat .ref/VERSION-cpu 2>/dev/null | tr '\n' ' ' || echo 'llama.cpp v0.5.0')",
  "vocab_sha256": "$(sha256sum $vocab | cut -d' ' -f1)",
  "corpus": $corpus,
  "line_10mb": $line
}
JSON
python3 - "$out" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for k in ("corpus", "line_10mb"):
    g = max(x["mb_per_s"] for x in d[k]["gem"]); r = max(x["mb_per_s"] for x in d[k]["reference"])
    same = len({x["tokens"] for x in d[k]["gem"] + d[k]["reference"]}) == 1
    print(f"{k}: gem {g:.2f} MB/s, reference {r:.2f} MB/s, ratio {g / r:.2f}x, same token count: {same}")
PY
echo "wrote $out"
