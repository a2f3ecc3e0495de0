#!/bin/sh
# The gem executable: exit statuses and messages of inspect and synth, the
# malformed corpus rejected by `gem inspect` with its named reason, and a
# synthetic model accepted.
GEM=${GEM:-./gem}
pass=0 fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "test_cli: FAIL: $*" >&2; }

# expect STATUS SUBSTRING -- command...
expect() {
    want_rc=$1 want_msg=$2
    shift 3
    "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ "$rc" != "$want_rc" ]; then bad "$* exited $rc, expected $want_rc"; return; fi
    if [ -n "$want_msg" ] && ! grep -qF -- "$want_msg" "$tmp/out" "$tmp/err"; then
        bad "$*: output lacks '$want_msg'"; return
    fi
    ok
}

expect 2 "usage: gem COMMAND" -- $GEM
expect 2 "unknown command 'frobnicate'" -- $GEM frobnicate
expect 0 "inspect FILE" -- $GEM help
expect 0 "gem 0." -- $GEM version
expect 0 "cpu: available" -- $GEM devices
expect 2 "usage: gem inspect" -- $GEM inspect
expect 2 "unknown option '--bogus'" -- $GEM inspect --bogus x.gguf
expect 1 "cannot open" -- $GEM inspect "$tmp/missing.gguf"
expect 1 "not a regular file" -- $GEM inspect "$tmp"
expect 2 "unknown profile" -- $GEM synth --profile gemma4-99b --type q4_0 -o "$tmp/x.gguf"
expect 2 "unknown type" -- $GEM synth --profile gemma4-tiny --type q9_9 -o "$tmp/x.gguf"
expect 2 "--seed needs" -- $GEM synth --profile gemma4-tiny --type q4_0 --seed -3 -o "$tmp/x.gguf"
expect 2 "missing value" -- $GEM synth --profile gemma4-tiny --type
expect 2 "usage: gem synth" -- $GEM synth --profile gemma4-tiny
expect 1 "matrix type q5_0 is not allowed" -- $GEM synth --profile gemma4-tiny --type q5_0 -o "$tmp/x.gguf"
expect 1 "embedding type q5_0 is not allowed" -- $GEM synth --profile gemma4-tiny --type q4_0 --embd-type q5_0 -o "$tmp/x.gguf"
expect 1 "not a Gemma 4 vocabulary" -- $GEM synth --profile gemma4-tiny --type q4_0 --vocab tests/data/malformed/55_model_other_arch.gguf -o "$tmp/x.gguf"
[ ! -e "$tmp/x.gguf" ] && ok || bad "a failed synth left its output behind"

# every malformed file is rejected by inspect, naming its reason
while IFS="$(printf '\t')" read -r name level reason; do
    expect 1 "$reason" -- $GEM inspect "tests/data/malformed/$name"
done < tests/data/malformed/EXPECTED

# a synthetic model of each small profile and type is accepted
for t in q4_0 q8_0 f16; do
    expect 0 "" -- $GEM synth --profile gemma4-tiny --type $t --seed 3 -o "$tmp/tiny-$t.gguf"
    expect 0 "verdict:       OK: supported (gemma4-tiny)" -- $GEM inspect "$tmp/tiny-$t.gguf"
done
expect 0 "embedding:     q6_k" -- sh -c "$GEM synth --profile gemma4-tiny --type q4_0 --embd-type q6_k -o $tmp/q6.gguf && $GEM inspect $tmp/q6.gguf"
expect 0 "tensor types:  f32 44" -- $GEM inspect "$tmp/tiny-q4_0.gguf"
expect 0 "key gemma4.attention.sliding_window              32" -- $GEM inspect --keys "$tmp/tiny-q4_0.gguf"
expect 0 "tensor blk.5.attn_q.weight" -- $GEM inspect --tensors "$tmp/tiny-q4_0.gguf"
expect 0 "context:       4096" -- $GEM inspect "$tmp/tiny-q4_0.gguf"
# --ctx-train: the context_length written (tests at depth past 32K)
expect 0 "context:       40000" -- sh -c "$GEM synth --profile gemma4-tiny --type q4_0 --ctx-train 40000 -o $tmp/ctx.gguf && $GEM inspect $tmp/ctx.gguf"
expect 2 "--ctx-train needs" -- $GEM synth --profile gemma4-tiny --type q4_0 --ctx-train 0 -o "$tmp/x.gguf"
expect 0 "tokenizer:     262144 tokens, bos 2, eos 1" -- $GEM inspect "$tmp/tiny-q4_0.gguf"
# --ctx: the KV plan, each kind per layer and in all (tiny: 5 sliding
# layers of 2 KV heads in rings of 32 + 16, 1 full layer of 1 KV head)
expect 0 "kv plan:       context 4096 tokens, --kv-type f16-full" -- \
    $GEM inspect "$tmp/tiny-q4_0.gguf" --ctx 4096 --kv-type f16-full
for line in "  sliding:     5 layers x 48 ring slots (window 32 + 16) x 2 kv heads x 256 dims, K and V f32: 192.00 KiB (196608 bytes) per layer, 960.00 KiB (983040 bytes) in all" \
            "  full:        1 layer x 4096 positions x 1 kv heads x 512 dims, K and V f16: 8.00 MiB (8388608 bytes) per layer, 8.00 MiB (8388608 bytes) in all" \
            "  kv caches:   8.94 MiB (9371648 bytes)" "  checkpoint:  " "  weights:     "; do
    if grep -qF -- "$line" "$tmp/out"; then ok; else bad "gem inspect --ctx 4096 --kv-type f16-full lacks '$line'"; fi
done
expect 0 "  kv caches:   16.94 MiB (17760256 bytes)" -- $GEM inspect "$tmp/tiny-q4_0.gguf" --ctx 4096
# a Qwen3.5 file's plan: its attention caches are all full-context, f16 halves them
$GEM synth --profile qwen35-small --type q8_0 -o "$tmp/qs.gguf" >/dev/null 2>&1
expect 0 "K and V f16: 16.00 MiB (16777216 bytes) in all" -- $GEM inspect "$tmp/qs.gguf" --ctx 4096 --kv-type f16-full
expect 0 "K and V f32: 32.00 MiB (33554432 bytes) in all" -- $GEM inspect "$tmp/qs.gguf" --ctx 4096
expect 0 "recurrent:   2.34 MiB (2451456 bytes)" -- $GEM inspect "$tmp/qs.gguf" --ctx 4096
expect 0 "  kv caches:   8.47 MiB (8880128 bytes)" -- $GEM inspect "$tmp/tiny-q4_0.gguf" --ctx 4096 --kv-type f16
expect 0 "activations: 2.94 MiB (3081220 bytes) for prompt tiles of 64 tokens" -- \
    $GEM inspect "$tmp/tiny-q4_0.gguf" --ctx 100 --tile 64
expect 1 "kv plan:       REFUSED: a context of 4097 exceeds the model's trained context of 4096" -- \
    $GEM inspect "$tmp/tiny-q4_0.gguf" --ctx 4097
expect 2 "--kv-type plans a context: give --ctx N too" -- $GEM inspect "$tmp/tiny-q4_0.gguf" --kv-type f16
expect 2 "--kv-type wants f32, f16 or f16-full, not 'f4'" -- $GEM inspect "$tmp/tiny-q4_0.gguf" --ctx 64 --kv-type f4
expect 2 "bad value for --ctx" -- $GEM inspect "$tmp/tiny-q4_0.gguf" --ctx 0
# a vocabulary `gem run` refuses is no "OK" for inspect either: byte token
# <0x41> renamed <0xZ1> (same length, so the file stays well formed)
python3 -c "import sys; d = open(sys.argv[1], 'rb').read(); i = d.index(b'<0x41>')
open(sys.argv[2], 'wb').write(d[:i] + b'<0xZ1>' + d[i + 6:])" "$tmp/tiny-q4_0.gguf" "$tmp/badtok.gguf"
expect 1 "REJECTED: tokenizer: $tmp/badtok.gguf: token 303 is a byte token (type 6) but its text is not <0xHH>" -- \
    $GEM inspect "$tmp/badtok.gguf"
# same options, same bytes
$GEM synth --profile gemma4-tiny --type q4_0 --seed 3 -t 1 -o "$tmp/again.gguf" 2>/dev/null
cmp -s "$tmp/again.gguf" "$tmp/tiny-q4_0.gguf" && ok || bad "synth is not deterministic"
# an unquantized model keeps its embedding unquantized
expect 0 "embedding:     f16" -- $GEM inspect "$tmp/tiny-f16.gguf"

# tokenize: the interface external checks use
V=data/vocab/gemma-4.gguf
expect 0 "2 9259 1902" -- sh -c "printf 'Hello world' | $GEM tokenize -m $V"
expect 0 "9259 1902" -- sh -c "printf 'Hello world' | $GEM tokenize -m $V --no-bos"
[ "$(printf 'Hello world' | $GEM tokenize -m $V)" = "2 9259 1902" ] && ok || bad "tokenize output is not exactly one line of ids"
[ "$(printf '<|turn>' | $GEM tokenize -m $V --no-bos --special)" = "105" ] && ok || bad "--special"
[ "$(printf '<|turn>' | $GEM tokenize -m $V --no-bos)" != "105" ] && ok || bad "control tokens parsed without --special"
[ "$(printf '2 9259 1902' | $GEM tokenize -m $V --detok)" = "Hello world" ] && ok || bad "--detok"
[ "$(printf '[2, 105, 9259]' | $GEM tokenize -m $V --detok --special)" = "<bos><|turn>Hello" ] && ok || bad "--detok --special"
printf 'Grüße, 世界! 🎉\n\n  x' > "$tmp/t.txt"
[ "$($GEM tokenize -m $V --no-bos < "$tmp/t.txt" | $GEM tokenize -m $V --detok)" = "$(cat "$tmp/t.txt")" ] && ok || bad "round trip"
expect 1 "out of the vocabulary" -- sh -c "echo 262144 | $GEM tokenize -m $V --detok"
expect 1 "reads token ids" -- sh -c "echo 'hello' | $GEM tokenize -m $V --detok"
expect 1 "missing tokenizer.ggml.model" -- sh -c "echo hi | $GEM tokenize -m tests/data/seeds/valid_small.gguf"
expect 1 "cannot open" -- sh -c "echo hi | $GEM tokenize -m $tmp/none.gguf"
expect 2 "usage: gem tokenize" -- $GEM tokenize
expect 0 "2 9259 1902" -- sh -c "printf 'Hello world' | $GEM tokenize -m $tmp/tiny-q8_0.gguf"

# run: greedy ids on one line, errors named
M="$tmp/tiny-q8_0.gguf"
ids=$($GEM run -m "$M" --prompt-ids "2 9259 1902" -n 8 --temp 0 --ids 2>/dev/null)
[ "$(echo "$ids" | wc -w)" = 8 ] && ok || bad "run --ids did not print 8 ids: $ids"
[ "$ids" = "$($GEM run -m "$M" -p "Hello world" -n 8 --temp 0 --ids 2>/dev/null)" ] && ok || bad "-p and --prompt-ids disagree"
# -tp N: N in-process shards, the same greedy ids as one on this model
# (test_shard holds the sharded arithmetic); bad counts and absent GPUs refused
[ "$ids" = "$($GEM run -m "$M" -tp 2 -p "Hello world" -n 8 --temp 0 --ids 2>/dev/null)" ] && ok || bad "-tp 2 and one shard disagree"
expect 2 "-tp takes a whole number of devices, 1 to 8: '0'" -- $GEM run -m "$M" -tp 0 -p hi -n 1
expect 2 "error: --gpus 2: " -- $GEM run -m "$M" --gpus 2 -p hi -n 1
expect 2 "--gpus needs --backend cuda" -- $GEM bench -m "$M" --gpus 1 --backend cpu
# -f FILE: the file's text is the prompt, one trailing newline dropped
printf 'Hello world\n' > "$tmp/prompt.txt"
[ "$ids" = "$($GEM run -m "$M" -f "$tmp/prompt.txt" -n 8 --temp 0 --ids 2>/dev/null)" ] && ok || bad "-f and -p disagree"
expect 1 "-f: $tmp/none.txt: cannot open" -- $GEM run -m "$M" -f "$tmp/none.txt" -n 1
expect 2 "give one of -p, -f and --prompt-ids" -- $GEM run -m "$M" -f "$tmp/prompt.txt" -p x -n 1
printf 'a\000b' > "$tmp/nul.txt"
expect 1 "holds a NUL byte" -- $GEM run -m "$M" -f "$tmp/nul.txt" -n 1
# id ranges A..B expand in place
[ "$($GEM run -m "$M" --prompt-ids "2,3..6,9" -n 4 --temp 0 --ids 2>/dev/null)" = \
  "$($GEM run -m "$M" --prompt-ids "2 3 4 5 6 9" -n 4 --temp 0 --ids 2>/dev/null)" ] && ok || bad "--prompt-ids range 3..6"
expect 1 "ranges A..B with B >= A" -- $GEM run -m "$M" --prompt-ids "6..3" -n 1
expect 1 "ranges A..B with B >= A" -- $GEM run -m "$M" --prompt-ids "2..x" -n 1
# at most 4M ids in all, however many ranges: the count stays an int
expect 1 "exceed the context of" -- $GEM run -m "$M" --prompt-ids "0..2097151 0..2097151" -n 1
expect 1 "at most 4194304 in all" -- $GEM run -m "$M" --prompt-ids "0..2097151 0..2097152" -n 1
expect 1 "at most 4194304 in all" -- $GEM run -m "$M" --prompt-ids "0..4194304" -n 1
[ "$($GEM run -m "$M" -p "Hi" -n 6 --temp 0.8 --seed 5 --ids 2>/dev/null)" = "$($GEM run -m "$M" -p "Hi" -n 6 --temp 0.8 --seed 5 --ids 2>/dev/null)" ] && ok || bad "seeded sampling is not deterministic"
expect 0 "decode" -- $GEM run -m "$M" -p "Hi" -n 4 --temp 0
expect 2 "unknown option '--frob'" -- $GEM run -m "$M" -p x --frob
expect 2 "bad value for --temp" -- $GEM run -m "$M" -p x --temp hot
expect 1 "exceed the context of 16" -- $GEM run -m "$M" -p "a b c d e f g" -n 10 --ctx 16
# a context past the model's trained one is refused, not capped
expect 1 "a context of 4097 exceeds the model's trained context of 4096" -- $GEM run -m "$M" -p x -n 1 --ctx 4097
expect 0 "" -- $GEM run -m "$M" -p x -n 1 --ctx 4096
expect 1 "cannot open" -- $GEM run -m "$tmp/none.gguf" -p x
expect 1 "unknown backend 'tpu'" -- $GEM run -m "$M" -p x --backend tpu
# --kv-type: a bad value names the choices; f16 and f16-full are CUDA
# options, refused on the CPU before anything is loaded
expect 2 "gem run: error: --kv-type wants f32, f16 or f16-full, not 'f8'" -- $GEM run -m "$M" -p x --kv-type f8
expect 2 "gem bench: error: --kv-type wants f32, f16 or f16-full, not 'q8'" -- $GEM bench -m "$M" --kv-type q8
expect 2 "gem serve: error: --kv-type wants f32, f16 or f16-full, not 'f16full'" -- $GEM serve -m "$M" --kv-type f16full
expect 1 "--kv-type f16: backend 'cpu' keeps its KV caches in f32 (f16 caches are a CUDA option)" -- \
    $GEM run -m "$M" -p x --kv-type f16
expect 1 "--kv-type f16-full: backend 'cpu' keeps its KV caches in f32" -- $GEM run -m "$M" -p x --kv-type f16-full
expect 1 "--kv-type f16-full: backend 'cpu' keeps its KV caches in f32" -- \
    $GEM serve -m "$M" --port 0 --kv-type f16-full
expect 1 "--kv-type f16-full: backend 'cpu' keeps its KV caches in f32" -- $GEM bench -m "$M" --kv-type f16-full
expect 0 "" -- $GEM run -m "$M" -p x -n 2 --kv-type f32
# gem bench: every depth reported (the depth is filled once, runs continue)
expect 0 "decode at depth      4" -- $GEM bench -m "$M" --prompt 8 --gen 2 --depth 0,4 --reps 2
# its JSON record names the command, the hardware and the time
expect 0 "" -- $GEM bench -m "$M" --prompt 8 --gen 2 --depth 0 --reps 1 --json "$tmp/b.json"
for key in '"command": "gem bench -m ' '"env": "' '"hardware": "' '"date": "20' '"kv_type": "f32"' '"decode": [' \
           '"peak_rss_bytes": '; do
    if grep -qF -- "$key" "$tmp/b.json"; then ok; else bad "gem bench --json lacks $key"; fi
done
# the drafter's stop bounds are probabilities
expect 2 "--draft-p-prod wants a probability in [0, 1], not 'x'" -- $GEM run -m "$M" -p x --draft-p-prod x
expect 2 "--draft-p-min wants a probability in [0, 1], not '-0.5'" -- $GEM run -m "$M" -p x --draft-p-min -0.5
# --verify-cost: a verification of 2 .. draft-max + 1 rows per depth, in decode steps
expect 0 "verify  3 rows" -- $GEM bench -m "$M" --prompt 8 --gen 12 --depth 0 --reps 1 --draft-max 2 --verify-cost --json "$tmp/v.json"
n=$(grep -o '"verify_rows": [0-9]*' "$tmp/v.json" | tr -d ' ' | tr '\n' ' ')
[ "$n" = '"verify_rows":2 "verify_rows":3 ' ] && ok || bad "gem bench --verify-cost JSON rows: $n"
# --parallel N,..: N streams at once, aggregate against one stream, in the JSON too
expect 0 "parallel  2 streams at depth      0" -- $GEM bench -m "$M" --prompt 8 --gen 4 --depth 0 --reps 1 --parallel 2 --json "$tmp/p.json"
grep -qF '"streams": 2, "depth": 0, "gen": 4' "$tmp/p.json" && ok || bad "gem bench --parallel JSON lacks its row"
expect 2 "bad value '0' for --parallel" -- $GEM bench -m "$M" --parallel 0
# gem profile: per-op device times need a backend that has them
expect 1 "backend 'cpu' has no per-op timings (gem profile needs --backend cuda)" -- $GEM profile -m "$M"
expect 2 "usage: gem profile" -- $GEM profile --depth 3
expect 2 "bad value 'x' for --rows" -- $GEM profile -m "$M" --rows x
# and the kernel choices in force (GEM_CUDA_* variables; this one is inert on the CPU)
expect 0 "" -- env GEM_CUDA_ATTN_DEC=2 $GEM bench -m "$M" --prompt 8 --gen 2 --depth 0 --reps 1 --json "$tmp/b.json"
if grep -qE '"env": "[^"]*GEM_CUDA_ATTN_DEC=2' "$tmp/b.json"; then ok; else bad "gem bench --json lacks the GEM_CUDA_ variables"; fi
# no silent fallback: without nvcc at build time, or without a GPU at run time,
# --backend cuda is an error that says which
devs=$($GEM devices 2>&1)
case "$devs" in
*"cuda: compiled in; no usable"*)
    expect 1 "backend 'cuda': no usable CUDA device" -- $GEM run -m "$M" -p x --backend cuda ;;
*"cuda: not compiled"*|*"cuda: not in this build"*)
    expect 1 "backend 'cuda' is not in this build" -- $GEM run -m "$M" -p x --backend cuda ;;
*) ;; # a GPU machine: make test-cuda covers the backend
esac
case "$devs" in
*"cuda: compiled in"*)
    # the kernel choices (GEM_CUDA_*): a bad value or a misspelt name is
    # named before any device is looked for, never measured as the defaults
    expect 1 "backend 'cuda': GEM_CUDA_ATTN_DEC=7: expected an integer from 0 to 3 (unset: 3)" -- \
        env GEM_CUDA_ATTN_DEC=7 $GEM run -m "$M" -p x --backend cuda
    expect 1 "GEM_CUDA_MMA=yes: expected 0 or 1 (unset: 1)" -- env GEM_CUDA_MMA=yes $GEM run -m "$M" -p x --backend cuda
    expect 1 "GEM_CUDA_MV_LEVELS=65: expected an integer from 2 to 64" -- \
        env GEM_CUDA_MV_LEVELS=65 $GEM bench -m "$M" --backend cuda --prompt 8 --gen 2
    expect 1 "unknown setting GEM_CUDA_MV_SPLT in the environment" -- \
        env GEM_CUDA_MV_SPLT=0 $GEM run -m "$M" -p x --backend cuda
    # the persistent layer kernel's settings are gone (measured and dropped)
    expect 1 "unknown setting GEM_CUDA_TAIL in the environment" -- \
        env GEM_CUDA_TAIL=2 $GEM run -m "$M" -p x --backend cuda
    # so are the switches that never won (docs/cuda.md: removed experiments)
    for v in GEM_CUDA_REST GEM_CUDA_MV_LD GEM_CUDA_ATTN_BAR1 GEM_CUDA_QKV_EARLY GEM_CUDA_FULL_SPLITS; do
        expect 1 "unknown setting $v in the environment (GEM_CUDA_* names: see docs/cuda.md)" -- \
            env $v=1 $GEM run -m "$M" -p x --backend cuda
    done
    # the CPU backend reads none of them
    expect 0 "" -- env GEM_CUDA_ATTN_DEC=7 GEM_CUDA_MV_SPLT=1 $GEM run -m "$M" -p x -n 2 ;;
esac
expect 0 "" -- $GEM run -m "$M" -p "Hi" -n 4 --chat --temp 0

expect 2 "bad value for --temp" -- $GEM chat -m "$M" --temp warm
# chat: history, /reset, /quit; Ctrl-C stops an answer and the chat goes on
out=$(printf 'Hello\n/reset\nAgain\n/quit\n' | $GEM chat -m "$M" -n 4 --temp 0 2>&1)
[ "$(printf '%s' "$out" | grep -c '^> ')" -ge 3 ] && ok || bad "chat did not answer: $out"
( (printf 'hi\n'; sleep 4; printf 'again\n'; sleep 2; printf '/quit\n') | $GEM chat -m "$M" -n 1000000 --temp 0 > "$tmp/chat.txt" 2>&1 &
  pid=$!; sleep 2; kill -INT $pid; wait $pid; echo "exit $?" >> "$tmp/chat.txt" ) 2>/dev/null
grep -q '\[stopped\]' "$tmp/chat.txt" && grep -q 'exit 0' "$tmp/chat.txt" && ok || bad "Ctrl-C did not stop the answer cleanly"

# gem bench sizes its context for every run: the shortest settings give a
# finite prefill rate and every decode step (a run one token short used to
# print "inf tok/s" or fail without a message)
out=$($GEM bench -m "$M" --prompt 8 --gen 2 --depth 0 --reps 1 2>&1)
case "$out" in *inf*|*error*) bad "bench at the smallest settings: $out" ;;
*"prefill      8 tokens:"*"decode at depth      0:"*) ok ;; *) bad "bench output: $out" ;; esac

# prompts at depth (llama-bench -p P -d D): each run restores the filled
# context and evaluates exactly P tokens (bench checks it: a run that
# reused its predecessor's turn checkpoint timed nothing)
out=$($GEM bench -m "$M" --prompt 16 --gen 2 --depth 0,48 --reps 2 --json "$tmp/bd.json" 2>&1)
case "$out" in *inf*|*error*) bad "bench at depth: $out" ;;
*"prefill     16 tokens at depth     48:"*"decode at depth     48:"*) ok ;; *) bad "bench at depth output: $out" ;; esac
grep -q '"tokens": 16, "depth": 48' "$tmp/bd.json" && ok || bad "bench --json has no prefill at depth 48: $(cat "$tmp/bd.json")"

# chat reuses its history: each turn's prompt repeats the last one up to its
# generation prompt (which, like the answer, is rendered differently once
# it is history), and the engine keeps exactly that much; so turn 3 reuses
# turn 2's prompt less the generation prompt's tokens (P1 - R2 of them)
D=data/models/default.gguf
printf 'Hello there\nWhat is your name?\nTell me a story\n' | $GEM chat -m "$D" -n 12 --temp 0 >"$tmp/turns.txt" 2>&1
turn() { sed -n "s/.*\[turn $1: prompt \([0-9]*\) tokens, \([0-9]*\) reused.*/\1 \2/p" "$tmp/turns.txt"; }
set -- $(turn 1) $(turn 2) $(turn 3)
if [ $# = 6 ] && [ "$2" = 0 ] && [ "$4" -gt 0 ] && [ "$6" = $(($3 - ($1 - $4))) ] && [ "$6" -gt "$4" ]; then ok
else bad "chat turns did not reuse their history as expected (P1 R1 P2 R2 P3 R3: $*): $(cat "$tmp/turns.txt")"; fi

# --draft-fixed keeps its count: the running-product stop's default is off
# with it (3 drafts in every round but a last, shorter one); the same run
# with the bound asked for stops some rounds early
fixed_counts() { $GEM run -m "$D" -p "The history of the city" -n 48 --temp 0 --ignore-eos --draft-max 3 --draft-fixed "$@" 2>&1 |
    sed -n 's/.*mtp: \([0-9]*\) rounds, \([0-9]*\) drafted.*/\1 \2/p'; }
set -- $(fixed_counts)
[ $# = 2 ] && [ "$2" -ge $((3 * ($1 - 1))) ] && ok || bad "--draft-fixed: $1 rounds drafted $2"
set -- $(fixed_counts --draft-p-prod 0.5)
[ $# = 2 ] && [ "$2" -lt $((3 * ($1 - 1))) ] && ok || bad "--draft-fixed --draft-p-prod 0.5: $1 rounds drafted $2"

# structured output: the answer is the schema's JSON (a const has exactly
# one), --json-object any object; a bad file or schema is refused by name
printf '{"type":"object","properties":{"ok":{"const":true}},"required":["ok"],"additionalProperties":false}' >"$tmp/s.json"
out=$($GEM run -m "$D" -p "The history of the city" -n 40 --temp 0.8 --seed 5 --json-schema "$tmp/s.json" 2>/dev/null)
[ "$out" = '{"ok":true}' ] && ok || bad "--json-schema: '$out'"
# (the demo model writes a long key: -n 12 makes the answer close in time)
out=$($GEM run -m "$D" -p "Data:" -n 12 --temp 0 --json-object 2>/dev/null)
node -e 'const v = JSON.parse(process.argv[1]); if (typeof v !== "object" || Array.isArray(v)) process.exit(1)' "$out" && ok || bad "--json-object: '$out'"
expect 1 "$tmp/missing.json: cannot open" -- $GEM run -m "$D" -p x --json-schema "$tmp/missing.json"
printf '{"type":"string","pattern":"a+"}' >"$tmp/p.json"
expect 1 "$tmp/p.json: schema: \"pattern\" is not supported" -- $GEM run -m "$D" -p x --json-schema "$tmp/p.json"
printf '{"type":' >"$tmp/b.json"
expect 1 "$tmp/b.json: " -- $GEM run -m "$D" -p x --json-schema "$tmp/b.json"
expect 0 "constrained decode (any JSON object)" -- $GEM bench -m "$D" --prompt 4 --depth 8 --gen 16 --reps 1 --json-object

echo "test_cli: $pass passed, $fail failed"
[ "$fail" = 0 ]
