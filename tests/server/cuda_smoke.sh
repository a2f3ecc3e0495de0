#!/bin/bash
# gem serve on the CUDA backend (run by hand on the GPU machine; make test
# has no GPU): greedy ids against gem run on the same backend, an SSE
# stream, prefix reuse giving the same answer as a fresh start, and a
# disconnect mid-stream. Needs curl. Prints what it saw; exits 1 on a
# mismatch. BACKEND=cpu runs the same checks on the CPU.
GEM=${GEM:-./gem}
tmp=$(mktemp -d)
trap 'kill $P 2>/dev/null; rm -rf "$tmp"' EXIT
fail=0
$GEM synth --profile gemma4-tiny --type q8_0 --seed 1 -o "$tmp/t.gguf" >/dev/null 2>&1
$GEM serve -m "$tmp/t.gguf" --backend "${BACKEND:-cuda}" --port 0 --test-hooks 2>"$tmp/serve.log" &
P=$!
for _ in $(seq 200); do
    PORT=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$tmp/serve.log")
    [ -n "$PORT" ] && grep -q "loaded in" "$tmp/serve.log" && break
    sleep 0.1
done
U=127.0.0.1:$PORT
head -2 "$tmp/serve.log"
got=$(curl -s -H 'Content-Type: application/json' $U/v1/completions -d '{"prompt":[2,9259,1902],"max_tokens":12,"temperature":0,"return_tokens":true}' | grep -o '"tokens":\[[0-9,]*\]')
want=$($GEM run -m "$tmp/t.gguf" --backend "${BACKEND:-cuda}" --prompt-ids "2 9259 1902" -n 12 --temp 0 --ids 2>/dev/null | tr ' ' ',')
echo "server: $got"
echo "gem run --backend ${BACKEND:-cuda}: [$want]"
[ "$got" = "\"tokens\":[$want]" ] || { echo "MISMATCH: greedy ids"; fail=1; }
curl -sN -H 'Content-Type: application/json' $U/v1/chat/completions -d '{"messages":[{"role":"user","content":"hi"}],"max_tokens":6,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}' >"$tmp/sse"
tail -c 14 "$tmp/sse" | grep -q 'data: \[DONE\]' || { echo "MISMATCH: stream end"; fail=1; }
grep -o '"usage":{[^}]*}' "$tmp/sse" | tail -1
C1='{"messages":[{"role":"system","content":"You are terse and answer in one sentence please."},{"role":"user","content":"Tell me about the history of Paris and its many bridges over the river."}'
curl -s -H 'Content-Type: application/json' $U/v1/chat/completions -d "$C1],\"max_tokens\":8,\"temperature\":0}" >/dev/null
C2="$C1,{\"role\":\"assistant\",\"content\":\"Paris is old.\"},{\"role\":\"user\",\"content\":\"And what about Rome and its fountains and hills?\"}]"
A=$(curl -s -H 'Content-Type: application/json' $U/v1/chat/completions -d "$C2,\"max_tokens\":8,\"temperature\":0}")
B=$(curl -s -H 'Content-Type: application/json' $U/v1/chat/completions -d "$C2,\"max_tokens\":8,\"temperature\":0,\"cache_prompt\":false}")
echo "reuse $(echo "$A" | grep -o '"cached_tokens":[0-9]*'), fresh $(echo "$B" | grep -o '"cached_tokens":[0-9]*')"
[ "$(echo "$A" | grep -o '"content":"[^"]*"')" = "$(echo "$B" | grep -o '"content":"[^"]*"')" ] || { echo "MISMATCH: reuse changed the answer"; fail=1; }
curl -sN --max-time 1 -H 'Content-Type: application/json' $U/v1/completions -d '{"prompt":"Once","stream":true,"temperature":0}' >/dev/null 2>&1
curl -s -H 'Content-Type: application/json' $U/v1/completions -d '{"prompt":"Hi","max_tokens":2}' | grep -q '"completion_tokens":2' || { echo "MISMATCH: after a disconnect"; fail=1; }
grep -q "cancelled: the client left" "$tmp/serve.log" || { echo "MISMATCH: no cancellation"; fail=1; }
kill -TERM $P; wait $P; echo "server exit $?"
grep -E "cancelled|200:" "$tmp/serve.log" | tail -6
[ $fail = 0 ] && echo "cuda_smoke: ok"
exit $fail
