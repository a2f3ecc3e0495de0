#!/bin/sh
# Greedy parity with the pinned llama.cpp reference: for every golden in
# tests/data/parity (written by tools/ref_parity.sh), synthesize the same
# model, run gem greedily from the same prompt ids and require all 128
# generated ids to be identical. The long prompts are over three sliding
# windows, so prefill and decode both cross the ring. Each golden is also
# run with --compat-llama, which reproduces the reference's fp16 GELU table
# (the one place its CPU arithmetic departs from the model definition).
GEM=${GEM:-./gem}
pass=0 fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for f in tests/data/parity/gemma4-*.txt; do
    base=$(basename "$f" .txt)
    prof=$(echo "$base" | sed -E 's/^(gemma4-[a-z0-9]+)-.*/\1/')
    type=$(echo "$base" | sed -E 's/^gemma4-[a-z0-9]+-([a-z0-9_]+)-seed.*/\1/')
    seed=$(echo "$base" | sed -E 's/.*-seed([0-9]+)-.*/\1/')
    model="$tmp/$prof-$type-$seed.gguf"
    [ -f "$model" ] || $GEM synth --profile "$prof" --type "$type" --seed "$seed" -o "$model" 2>/dev/null
    prompt=$(sed -n 's/^prompt: //p' "$f")
    want=$(sed -n 's/^reference: //p' "$f")
    got=$($GEM run -m "$model" --prompt-ids "$prompt" -n 128 --temp 0 --ignore-eos --ids --compat-llama 2>"$tmp/err")
    if [ "$got" = "$want" ]; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1))
        echo "test_parity: FAIL $base" >&2
        python3 - "$got" "$want" <<'PY' >&2 || true
import sys
a, b = sys.argv[1].split(), sys.argv[2].split()
n = 0
while n < min(len(a), len(b)) and a[n] == b[n]:
    n += 1
print(f"  identical for {n} of {len(b)} tokens")
PY
        cat "$tmp/err" >&2
    fi
done
echo "test_parity: $pass passed, $fail failed"
[ "$fail" = 0 ]
