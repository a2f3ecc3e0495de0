#!/bin/sh
# gem quantize against the pinned llama-quantize: every case of
# tests/data/quantize/cases.txt must give a file with the reference's
# SHA-256 (goldens by tools/quantize_golden.sh), whatever the thread count;
# bad input is refused with a clear message and leaves no output behind.
GEM=${GEM:-./gem}
pass=0 fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ok() { pass=$((pass + 1)); }
ko() { fail=$((fail + 1)); echo "test_quantize: FAIL $*" >&2; }

while read -r name stype seed qtype etype profile; do
    case "$name" in ''|'#'*) continue ;; esac
    want=$(awk -v n="$name" '$1 == n { print $2 }' tests/data/quantize/sha256.txt)
    profile=${profile:-gemma4-tiny}
    in="$tmp/$stype-$seed.gguf"
    [ "$profile" = gemma4-tiny ] || in="$tmp/$profile-$stype-$seed.gguf"
    [ -f "$in" ] || $GEM synth --profile "$profile" --type "$stype" --seed "$seed" -o "$in" 2>/dev/null
    set -- $GEM quantize "$in" "$tmp/out.gguf" --type "$qtype"
    [ "$etype" = - ] || set -- "$@" --embd-type "$etype"
    threads="2"
    [ "$name" = f32-q4_k ] && threads="1 2 3" # the output never depends on the split
    for t in $threads; do
        rm -f "$tmp/out.gguf"
        "$@" -t "$t" 2>"$tmp/err" || cat "$tmp/err" >&2
        got=$(sha256sum "$tmp/out.gguf" 2>/dev/null | cut -d' ' -f1)
        if [ -n "$want" ] && [ "$got" = "$want" ]; then ok; else ko "$name -t $t: sha256 $got, reference $want"; fi
    done
done < tests/data/quantize/cases.txt

# expect_fail NAME MESSAGE-FRAGMENT EXIT-STATUS ARGS...: fails with that
# message and status, and removes any partial output.
expect_fail() {
    what=$1 msg=$2 status=$3
    shift 3
    rm -f "$tmp/bad.gguf"
    $GEM quantize "$@" 2>"$tmp/err"
    rc=$?
    if [ "$rc" = "$status" ] && grep -qF -- "$msg" "$tmp/err" && [ ! -e "$tmp/bad.gguf" ]; then ok; else
        ko "$what: exit $rc, stderr: $(cat "$tmp/err")"
    fi
}
f32=$tmp/f32-3.gguf
expect_fail "unknown type" "unknown type (q8_0, q4_0, q4_k_m (q4_k), q4_k_s, q5_k_m (q5_k), q5_k_s, q6_k): q3_k" 2 \
    "$f32" "$tmp/bad.gguf" --type q3_k
expect_fail "unknown embedding type" "unknown embedding type: q9" 2 "$f32" "$tmp/bad.gguf" --type q8_0 --embd-type q9
expect_fail "embedding type gem cannot make" "embedding type q2_k cannot be produced" 1 "$f32" "$tmp/bad.gguf" --type q8_0 --embd-type q2_k
expect_fail "missing type" "usage: gem quantize" 2 "$f32" "$tmp/bad.gguf"
expect_fail "bad thread count" "-t needs a thread count" 2 "$f32" "$tmp/bad.gguf" --type q8_0 -t 0
expect_fail "not gemma 4" "not a supported Gemma 4 model" 1 tests/data/seeds/valid_small.gguf "$tmp/bad.gguf" --type q8_0
expect_fail "vocabulary only" "not a supported Gemma 4 model" 1 data/vocab/gemma-4.gguf "$tmp/bad.gguf" --type q8_0
expect_fail "missing input" "cannot open" 1 "$tmp/none.gguf" "$tmp/bad.gguf" --type q8_0
expect_fail "already quantized" "tensor 'token_embd.weight' is already quantized (q8_0)" 1 \
    "$tmp/q8_0-5.gguf" "$tmp/bad.gguf" --type q4_0
cp "$f32" "$tmp/same.gguf"
$GEM quantize "$tmp/same.gguf" "$tmp/same.gguf" --type q8_0 2>"$tmp/err"
if [ $? = 1 ] && grep -q "the output would overwrite the input" "$tmp/err" && cmp -s "$f32" "$tmp/same.gguf"; then ok; else ko "in place"; fi
rm -f "$tmp/same.gguf"

# Non-finite weights are refused (the reference checks every row it reads):
# the last tensor of a synth file is output_norm.weight (1024 bytes), just
# after blk.5.attn_q.weight.
patch() { # FILE OFFSET-FROM-END FLOAT
    python3 -c "
import struct, sys
with open(sys.argv[1], 'r+b') as f:
    f.seek(-int(sys.argv[2]), 2); f.write(struct.pack('<f', float(sys.argv[3])))" "$@"
}
cp "$f32" "$tmp/nan.gguf" && patch "$tmp/nan.gguf" 4 nan
expect_fail "NaN in a norm" "tensor 'output_norm.weight' has invalid data" 1 "$tmp/nan.gguf" "$tmp/bad.gguf" --type q8_0
cp "$f32" "$tmp/inf.gguf" && patch "$tmp/inf.gguf" 1028 -inf
expect_fail "inf in a matrix" "tensor 'blk.5.attn_q.weight' has invalid data (a non-finite value or scale in row 2047)" 1 \
    "$tmp/inf.gguf" "$tmp/bad.gguf" --type q4_k
# a finite value whose q8_0 scale overflows f16 (1e10 / 127 > 65504)
cp "$f32" "$tmp/big.gguf" && patch "$tmp/big.gguf" 1028 1e10
expect_fail "scale overflow" "tensor 'blk.5.attn_q.weight': quantized data validation failed" 1 \
    "$tmp/big.gguf" "$tmp/bad.gguf" --type q8_0

# K-quant files (the Q4_K_M mix: q4_k, q6_k and q5_k tensors) pass the
# contract and run: the fast path (integer k-quant kernels on 8-bit
# activations) gives the same ids whatever the thread count, and along
# those ids the scalar reference path (dequantize, f32 dots) gives nearly
# the same log-probabilities (the kernels' own error bounds are
# tests/backend/test_cpu_kernels.c's; this random model's flat logits
# move by up to about 0.1 under the activation rounding, as with q4_0)
$GEM quantize "$f32" "$tmp/q4k.gguf" --type q4_k 2>/dev/null
if $GEM inspect "$tmp/q4k.gguf" >/dev/null 2>&1; then ok; else ko "q4_k output refused by gem inspect"; fi
kq() { $GEM run -m "$tmp/q4k.gguf" --prompt-ids "2 100 200" -n 8 --temp 0 "$@" 2>/dev/null; }
a=$(kq --ids -t 2)
b=$(kq --ids -t 1)
if [ -n "$a" ] && [ "$a" = "$b" ] && [ "$(echo $a | wc -w)" = 8 ]; then ok; else ko "q4_k run: '$a' with 2 threads, '$b' with 1"; fi
kq --top-logprobs 1 --force-ids "$a" >"$tmp/fast.lp"
kq --top-logprobs 1 --force-ids "$a" --cpu-ref >"$tmp/ref.lp"
if python3 - "$tmp/fast.lp" "$tmp/ref.lp" <<'PY'; then ok; else ko "q4_k: fast and reference log-probabilities differ"; fi
import json, sys
f, r = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
d = [abs(a["logprob"] - b["logprob"]) for a, b in zip(f, r)]
sys.exit(0 if len(f) == len(r) == 8 and max(d) < 0.25 else (print(d, file=sys.stderr) or 1))
PY

# gem synth --type q4_k_m draws the tensor types gem quantize --type q4_k_m
# (the reference's) gives the same profile: the Gemma tiny profile, whose
# manifest order (blk.1, blk.10, blk.2, ...) is not the layer order the mix
# counts attn_v in, and a Qwen3.5 hybrid (attn_qkv and attn_v, an untied
# head)
types() { $GEM inspect "$1" --tensors | awk '$1 == "tensor" { print $2, $3 }' | sort; }
for profile in gemma4-tiny qwen35-small; do
    $GEM synth --profile $profile --type f32 --seed 4 -o "$tmp/mf.gguf" 2>/dev/null &&
        $GEM quantize "$tmp/mf.gguf" "$tmp/mq.gguf" --type q4_k_m 2>/dev/null &&
        $GEM synth --profile $profile --type q4_k_m --seed 4 -o "$tmp/ms.gguf" 2>/dev/null
    types "$tmp/mq.gguf" >"$tmp/tq.txt"
    types "$tmp/ms.gguf" >"$tmp/ts.txt"
    if [ -s "$tmp/tq.txt" ] && cmp -s "$tmp/tq.txt" "$tmp/ts.txt" && grep -q " q6_k" "$tmp/ts.txt"; then ok; else
        ko "synth q4_k_m $profile: tensor types differ from gem quantize's"
        diff "$tmp/tq.txt" "$tmp/ts.txt" | head -5 >&2
    fi
done

echo "test_quantize: $pass passed, $fail failed"
[ "$fail" = 0 ]
