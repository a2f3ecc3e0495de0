#!/bin/sh
# Speculative decoding on gemma4-1b q4_0 (window 128) through the command
# line: gem bench's speculative runs assert that every answer is the plain
# one (replay drafters right always and half the time, a random 1b drafter)
# after a prompt of 200 tokens, so verification wraps the sliding rings; gem
# run with and without the drafter beside the model prints the same ids,
# greedy and sampled; the summary line reports the rounds.
GEM=${GEM:-./gem}
pass=0 fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "test_spec_1b: FAIL: $*" >&2; }

$GEM synth --profile gemma4-1b --type q4_0 --seed 5 -o "$tmp/m.gguf" >/dev/null 2>&1 || bad "synth 1b"
$GEM synth --profile gemma4-1b-assistant --type q4_0 --seed 6 -o "$tmp/mtp-m.gguf" >/dev/null 2>&1 || bad "synth 1b drafter"

# bench exits non-zero when a speculative answer differs from the plain one
if $GEM bench -m "$tmp/m.gguf" --mtp "$tmp/mtp-m.gguf" --prompt 8 --depth 200 --gen 24 --reps 1 --spec 1,0.5 \
    --draft-max 6 >"$tmp/bench" 2>&1; then ok; else bad "bench: $(tail -3 "$tmp/bench")"; fi
grep -q "replay a=1.00 .* 0 rounds" "$tmp/bench" && bad "no rounds ran" || ok
grep -q "mtp gemma4-1b-assistant" "$tmp/bench" && ok || bad "no MTP run: $(cat "$tmp/bench")"

# gem run: the drafter beside the model (mtp-m.gguf) is found by itself
ids="2 1000..1199"
for s in "--temp 0" "--temp 0.9 --seed 7"; do
    a=$($GEM run -m "$tmp/m.gguf" --prompt-ids "$ids" -n 16 $s --ignore-eos --ids --no-mtp 2>/dev/null)
    b=$($GEM run -m "$tmp/m.gguf" --prompt-ids "$ids" -n 16 $s --ignore-eos --ids --draft-max 4 2>"$tmp/err")
    [ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "gem run $s: '$a' vs '$b'"
    grep -q "| mtp: [0-9]* rounds, [0-9]* drafted" "$tmp/err" && ok || bad "summary line: $(cat "$tmp/err")"
done
# bad draft options are refused by name
$GEM run -m "$tmp/m.gguf" -p x --draft-max 1.5 >/dev/null 2>"$tmp/err"
[ $? = 2 ] && grep -q "draft-max wants a whole number of tokens from 0 to 15, not '1.5'" "$tmp/err" && ok || bad "--draft-max 1.5: $(cat "$tmp/err")"
$GEM run -m "$tmp/m.gguf" -p x --mtp >/dev/null 2>"$tmp/err"
[ $? = 2 ] && grep -q "\-\-mtp needs a value" "$tmp/err" && ok || bad "--mtp without a file: $(cat "$tmp/err")"
$GEM run -m "$tmp/m.gguf" -p x --mtp "$tmp/m.gguf" >/dev/null 2>"$tmp/err"
[ $? = 1 ] && grep -q "is a target model (gemma4-1b), not an MTP drafter" "$tmp/err" && ok || bad "target as drafter: $(cat "$tmp/err")"

echo "test_spec_1b: $pass passed, $fail failed"
[ "$fail" = 0 ]
