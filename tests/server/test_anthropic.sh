#!/bin/bash
# gem serve's Anthropic Messages API (POST /v1/messages, count_tokens)
# against real server processes on loopback with the tiny model: the SSE
# event sequence byte for byte with curl, stop sequences, errors in
# Anthropic's shape, the API key from x-api-key, cancellation by a client
# that leaves, the queue's 503; then the official @anthropic-ai/sdk
# (tests/server/anthropic/test.mjs, installed from its package-lock.json
# when node_modules is missing). Prints one "test_anthropic: N passed,
# M failed" line, the SDK test's checks included.
NAME=test_anthropic
. tests/server/lib.sh
dir=tests/server/anthropic
need_node
tiny_model

start main --test-hooks --max-body 65536 --alias tiny || finish
U="http://127.0.0.1:$PORT"
MAIN_PID=$PID

# ---- the SSE event sequence, byte for byte (the generated text forced) ----
forced='<|channel>thought\nPlan.<channel|>Hi.<|tool_call>call:get{city:<|\"|>Paris<|\"|>}<tool_call|><|tool_response>'
body='{"model":"tiny","max_tokens":40,"stream":true,"tools":[{"name":"get","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"Weather?"}],"gem_forced_output":"'$forced'"}'
curl -sN -D "$tmp/h" "$U/v1/messages" -d "$body" >"$tmp/sse"
grep -qi "^Content-Type: text/event-stream" "$tmp/h" && ok || bad "stream content type: $(cat "$tmp/h")"
id=$(sed -n 's/.*"id":"\(msg_[0-9a-f]*\)".*/\1/p' "$tmp/sse" | head -1)
[ ${#id} = 20 ] && ok || bad "message id '$id'"
n=$(curl -s "$U/v1/messages/count_tokens" -d "$body" | jget input_tokens)
[ "$n" -gt 10 ] 2>/dev/null && ok || bad "count_tokens: $n"
hex=${id#msg_}
# the prompt was evaluated by count_tokens? no: count_tokens only tokenizes, so nothing is cached
cat >"$tmp/want" <<EOF
event: message_start
data: {"type":"message_start","message":{"id":"$id","type":"message","role":"assistant","model":"tiny","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":$n,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Plan"}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"."}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Hi"}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"."}}

event: content_block_stop
data: {"type":"content_block_stop","index":1}

event: content_block_start
data: {"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_${hex}_0","name":"get","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"city\":\"Paris\"}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":2}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"input_tokens":$n,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":OUT}}

event: message_stop
data: {"type":"message_stop"}

EOF
out=$(sed -n 's/.*"output_tokens":\([0-9]*\)}}$/\1/p' "$tmp/sse" | tail -1)
sed -i "s/OUT/$out/" "$tmp/want"
cmp -s "$tmp/sse" "$tmp/want" && ok || bad "SSE sequence: $(diff "$tmp/want" "$tmp/sse" | head -20)"

# ---- the same request not streamed: the prefix is reused now ----
r=$(curl -s "$U/v1/messages" -d "${body/\"stream\":true,/}")
[ "$(echo "$r" | jget content)" = '[{"type":"thinking","thinking":"Plan.","signature":""},{"type":"text","text":"Hi."},{"type":"tool_use","id":"toolu_'"$(echo "$r" | jget id | cut -c5-)"'_0","name":"get","input":{"city":"Paris"}}]' ] \
    && ok || bad "content blocks: $r"
[ "$(echo "$r" | jget stop_reason)" = tool_use ] && ok || bad "stop_reason tool_use: $r"
u=$(echo "$r" | jget usage)
[ "$(echo "$u" | jget cache_read_input_tokens)" -gt 0 ] && [ $(($(echo "$u" | jget input_tokens) + $(echo "$u" | jget cache_read_input_tokens))) = "$n" ] \
    && ok || bad "usage with a reused prefix: $u (prompt $n)"

# ---- stop reasons ----
r=$(curl -s "$U/v1/messages" -d '{"max_tokens":40,"stop_sequences":["zz","STOP"],"messages":[{"role":"user","content":"x"}],"gem_forced_output":"one STOP two"}')
[ "$(echo "$r" | jget stop_reason)/$(echo "$r" | jget stop_sequence)/$(echo "$r" | jget content.0.text)" = "stop_sequence/STOP/one " ] && ok || bad "stop sequence: $r"
r=$(curl -s "$U/v1/messages" -d '{"max_tokens":3,"temperature":0,"messages":[{"role":"user","content":"x"}]}')
[ "$(echo "$r" | jget stop_reason)/$(echo "$r" | jget stop_sequence)/$(echo "$r" | jget usage.output_tokens)" = "max_tokens/null/3" ] && ok || bad "max_tokens: $r"
r=$(curl -s "$U/v1/messages" -d '{"max_tokens":30,"messages":[{"role":"user","content":"x"}],"gem_forced_output":"Done.<turn|>"}')
[ "$(echo "$r" | jget stop_reason)/$(echo "$r" | jget content)" = 'end_turn/[{"type":"text","text":"Done."}]' ] && ok || bad "end_turn: $r"

# ---- errors in Anthropic's shape ----
r=$(curl -s -w ' %{http_code}' "$U/v1/messages" -d '{"messages":[{"role":"user","content":"x"}]}')
[ "$r" = '{"type":"error","error":{"type":"invalid_request_error","message":"'"'"'max_tokens'"'"' is required"}} 400' ] && ok || bad "max_tokens missing: $r"
r=$(curl -s -w ' %{http_code}' "$U/v1/messages" -d '{"max_tokens":1,"top_logprobs":2,"messages":[{"role":"user","content":"x"}]}')
[ "$r" = '{"type":"error","error":{"type":"invalid_request_error","message":"'"'"'top_logprobs'"'"' is not supported"}} 400' ] && ok || bad "unknown field: $r"
r=$(curl -s -w ' %{http_code}' "$U/v1/messages/batches" -d '{}')
[ "$r" = '{"type":"error","error":{"type":"not_found_error","message":"no route POST /v1/messages/batches"}} 404' ] && ok || bad "404: $r"
r=$(command curl -s -w ' %{http_code}' "$U/v1/messages")
case "$r" in '{"type":"error","error":{"type":"invalid_request_error","message":"method GET is not allowed on /v1/messages"}} 405') ok ;; *) bad "405: $r" ;; esac
r=$(command curl -s -w ' %{http_code}' "$U/v1/messages" -d '{}')
case "$r" in '{"type":"error","error":{"type":"invalid_request_error",'*' 415') ok ;; *) bad "415: $r" ;; esac
r=$(curl -s -w ' %{http_code}' "$U/v1/messages" -d "{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"$(head -c 5000 /dev/zero | tr '\0' 'a' | sed 's/a/a b /g')\"}]}")
case "$r" in *'"type":"invalid_request_error"'*'the context holds'*' 400') ok ;; *) bad "context exceeded: ${r:0:300}" ;; esac

big=$(head -c 70000 /dev/zero | tr '\0' 'a')
r=$(curl -s -w ' %{http_code}' "$U/v1/messages" -d "{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"$big\"}]}")
case "$r" in '{"type":"error","error":{"type":"request_too_large",'*' 413') ok ;; *) bad "413: ${r:0:300}" ;; esac

# ---- a client that leaves mid-stream cancels its request ----
curl -sN --max-time 1 "$U/v1/messages" -d '{"max_tokens":4000,"stream":true,"temperature":0,"messages":[{"role":"user","content":"Once upon a time"}]}' >"$tmp/cut" 2>/dev/null
t0=$(date +%s%N)
r=$(curl -s --max-time 10 "$U/v1/messages" -d '{"max_tokens":2,"messages":[{"role":"user","content":"Hi"}]}')
t1=$(date +%s%N)
[ "$(echo "$r" | jget usage.output_tokens)" = 2 ] && [ $(((t1 - t0) / 1000000)) -lt 2000 ] && ok \
    || bad "the engine was not freed after a disconnect: $(((t1 - t0) / 1000000)) ms: $r"
grep -q "/v1/messages cancelled: the client left" "$tmp/main.log" && ok || bad "no cancellation logged"
grep -q '^event: content_block_delta' "$tmp/cut" && ok || bad "nothing streamed before the disconnect"

# ---- the API key: x-api-key or Authorization, 401 in Anthropic's shape ----
start auth --api-key s3cret || finish
A="http://127.0.0.1:$PORT"
msg='{"max_tokens":1,"messages":[{"role":"user","content":"x"}]}'
r=$(curl -s -w ' %{http_code}' "$A/v1/messages" -d "$msg")
[ "$r" = '{"type":"error","error":{"type":"authentication_error","message":"invalid or missing API key: send the header '"'"'x-api-key: KEY'"'"'"}} 401' ] && ok || bad "no key: $r"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$A/v1/messages" -H 'x-api-key: wrong' -d "$msg")" = 401 ] && ok || bad "wrong x-api-key"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$A/v1/messages" -H 'x-api-key: s3cret' -d "$msg")" = 200 ] && ok || bad "x-api-key"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$A/v1/messages" -H 'Authorization: Bearer s3cret' -d "$msg")" = 200 ] && ok || bad "Bearer on /v1/messages"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$A/v1/messages/count_tokens" -H 'x-api-key: s3cret' -d "$msg")" = 200 ] && ok || bad "x-api-key on count_tokens"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$A/v1/models" -H 'x-api-key: s3cret')" = 200 ] && ok || bad "x-api-key on an OpenAI route"
[ "$(curl -s "$A/v1/chat/completions" -d '{"messages":[]}' | jget error.code)" = invalid_api_key ] && ok || bad "OpenAI routes keep OpenAI's 401"
kill $PID

# ---- the queue: a full one answers 503 overloaded_error; a waiting stream gets comments ----
start queue --queue 1 --heartbeat 0.3 || finish
Q="http://127.0.0.1:$PORT"
long='{"max_tokens":400,"temperature":0,"messages":[{"role":"user","content":"Once"}]}'
curl -s "$Q/v1/messages" -d "$long" >"$tmp/long1" &
lp=$!
sleep 0.3
curl -sN "$Q/v1/messages" -d '{"max_tokens":2,"stream":true,"messages":[{"role":"user","content":"Hi"}]}' >"$tmp/queued" &
qp=$!
sleep 0.3
r=$(curl -s -D "$tmp/h503" -w ' %{http_code}' "$Q/v1/messages" -d "$msg")
case "$r" in '{"type":"error","error":{"type":"overloaded_error","message":"the server is busy'*' 503') ok ;; *) bad "full queue: $r" ;; esac
grep -qi "^Retry-After: 1" "$tmp/h503" && ok || bad "503 without Retry-After"
wait $qp $lp
[ "$(head -c 9 "$tmp/queued")" = ": queued" ] && ok || bad "no ': queued' comment first: $(head -c 80 "$tmp/queued")"
tail -c 60 "$tmp/queued" | grep -q 'event: message_stop' && ok || bad "queued stream did not finish: $(tail -c 200 "$tmp/queued")"
[ "$(jget usage.output_tokens <"$tmp/long1")" = 400 ] && ok || bad "the long request"
kill $PID

kill -0 $MAIN_PID 2>/dev/null && ok || bad "the server died"
no_sanitizer_reports

# ---- the official SDK ----
need_node "$dir" @anthropic-ai/sdk
node "$dir/test.mjs" "$(gem_abs)" "$M" >"$tmp/sdk" 2>&1
rc=$?
cat "$tmp/sdk"
line=$(grep -E '^test_anthropic_sdk: [0-9]+ passed, [0-9]+ failed$' "$tmp/sdk" | tail -1)
if [ -z "$line" ]; then
    bad "the SDK test did not report (exit $rc)"
else
    p=$(echo "$line" | sed -E 's/.*: ([0-9]+) passed.*/\1/')
    f=$(echo "$line" | sed -E 's/.*passed, ([0-9]+) failed/\1/')
    pass=$((pass + p)) fail=$((fail + f))
    [ $rc = 0 ] || [ "$f" != 0 ] || bad "the SDK test exited $rc"
fi
finish
