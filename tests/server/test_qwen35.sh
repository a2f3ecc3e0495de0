#!/bin/bash
# gem serve on a Qwen3.5 hybrid (the qwen35-tiny profile, CPU): the Qwen3.5
# chat template and answer parser through /v1/chat/completions, streaming
# and not (<think> to reasoning_content, starting inside the thought the
# generation prompt opens; thinking off; a <tool_call> block to an OpenAI
# tool call), the profile in /v1/models and /props, prefix reuse across
# turns through the turn checkpoint (the same answer as without the cache),
# two slots answering at once as one alone does, and the refusals of what
# the family lacks (the CUDA backend, --mtp) before anything is loaded.
NAME=test_qwen35
. tests/server/lib.sh
$GEM synth --profile qwen35-tiny --type f32 --seed 1 -o "$M" >/dev/null 2>&1 || { bad "synth"; finish; }

start main --test-hooks --parallel 2 --heartbeat 0 -t 2 || finish
U="http://127.0.0.1:$PORT"

check "/v1/models names the profile" test "$(curl -s "$U/v1/models" | jget data.0.meta.profile)" = qwen35-tiny
check "/props names the profile" test "$(curl -s "$U/props" | jget profile)" = qwen35-tiny

# ---- the template and the parser ----
chat() { curl -s "$U/v1/chat/completions" -d "$1"; }
r=$(chat '{"messages":[{"role":"user","content":"hi"}],"gem_forced_output":"I think.\n</think>\n\nHello there"}')
check "reasoning_content from <think>: $r" test "$(echo "$r" | jget choices.0.message.reasoning_content)" = "I think."
check "content after </think>: $r" test "$(echo "$r" | jget choices.0.message.content)" = "Hello there"
check "finish stop" test "$(echo "$r" | jget choices.0.finish_reason)" = stop

curl -sN "$U/v1/chat/completions" -d '{"messages":[{"role":"user","content":"hi"}],"stream":true,"gem_forced_output":"I think.\n</think>\n\nHello there"}' >"$tmp/sse"
node -e '
const s = require("fs").readFileSync(process.argv[1], "utf8");
if (!s.endsWith("data: [DONE]\n\n")) throw new Error("does not end with [DONE]");
const js = s.split("\n\n").filter(e => e.startsWith("data: {")).map(e => JSON.parse(e.slice(6)));
const reasoning = js.map(j => j.choices[0]?.delta?.reasoning_content || "").join("");
const content = js.map(j => j.choices[0]?.delta?.content || "").join("");
if (reasoning !== "I think." || content !== "Hello there") throw new Error(`reasoning ${reasoning} content ${content}`);
const fin = js.filter(j => j.choices.length && j.choices[0].finish_reason);
if (fin.length !== 1 || fin[0].choices[0].finish_reason !== "stop") throw new Error("finish");
' "$tmp/sse" && ok || bad "streamed reasoning and content: $(head -c 600 "$tmp/sse")"

# thinking off: the template closes the thought itself, the answer is content
r=$(chat '{"messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":{"enable_thinking":false},"gem_forced_output":"Hello"}')
check "thinking off: content: $r" test "$(echo "$r" | jget choices.0.message.content)" = "Hello"
check "thinking off: no reasoning: $r" test "$(echo "$r" | jget choices.0.message.reasoning_content)" = undefined

# a stop string inside the thought the prompt opened does not end the answer
r=$(chat '{"messages":[{"role":"user","content":"hi"}],"stop":["stop"],"gem_forced_output":"I stop here.\n</think>\n\nHello stop there"}')
check "stop string skipped in the thought: $r" test "$(echo "$r" | jget choices.0.message.reasoning_content)" = "I stop here."
check "stop string ends the content: $r" test "$(echo "$r" | jget choices.0.message.content)" = "Hello"

# the template's XML tool call
tools='"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]'
r=$(chat "{\"messages\":[{\"role\":\"user\",\"content\":\"weather?\"}],$tools,\"gem_forced_output\":\"Let me check.\\n</think>\\n\\n<tool_call>\\n<function=get_weather>\\n<parameter=city>\\nParis\\n</parameter>\\n</function>\\n</tool_call>\"}")
check "tool call name: $r" test "$(echo "$r" | jget choices.0.message.tool_calls.0.function.name)" = get_weather
check "tool call arguments: $r" test "$(echo "$r" | jget choices.0.message.tool_calls.0.function.arguments)" = '{"city":"Paris"}'
check "finish tool_calls" test "$(echo "$r" | jget choices.0.finish_reason)" = tool_calls

# ---- prefix reuse across turns ----
t1='{"role":"user","content":"Tell me a story."}'
r1=$(chat "{\"messages\":[$t1],\"chat_template_kwargs\":{\"enable_thinking\":false},\"temperature\":0,\"max_tokens\":12}")
a1=$(echo "$r1" | jget choices.0.message.content)
msgs="[$t1,{\"role\":\"assistant\",\"content\":$(node -e 'console.log(JSON.stringify(process.argv[1]))' "$a1")},{\"role\":\"user\",\"content\":\"And then?\"}]"
body="{\"messages\":$msgs,\"chat_template_kwargs\":{\"enable_thinking\":false},\"temperature\":0,\"max_tokens\":12"
r2=$(chat "$body}")
r3=$(chat "$body,\"cache_prompt\":false}")
c2=$(echo "$r2" | jget usage.prompt_tokens_details.cached_tokens)
check "turn 2 reuses turn 1's prompt ($c2 tokens): $r2" test "${c2:-0}" -gt 20
check "turn 3 without the cache evaluates everything" test "$(echo "$r3" | jget usage.prompt_tokens_details.cached_tokens)" = 0
check "the reused turn answers as a fresh evaluation" test "$(echo "$r2" | jget choices.0.message.content)" = "$(echo "$r3" | jget choices.0.message.content)"

# ---- two slots at once: each answer is the one it gets alone ----
q1='{"messages":[{"role":"user","content":"one"}],"temperature":0,"max_tokens":16,"cache_prompt":false}'
q2='{"messages":[{"role":"user","content":"two"}],"temperature":0,"max_tokens":16,"cache_prompt":false}'
alone1=$(chat "$q1" | jget choices.0.message.reasoning_content)
alone2=$(chat "$q2" | jget choices.0.message.reasoning_content)
chat "$q1" >"$tmp/p1" &
chat "$q2" >"$tmp/p2"
wait $!
check "slot answers at once equal alone" test "$(jget choices.0.message.reasoning_content <"$tmp/p1")|$(jget choices.0.message.reasoning_content <"$tmp/p2")" = "$alone1|$alone2"
check "the answers differ (the check can fail)" test "$alone1" != "$alone2"

# ---- refusals before loading ----
# a backend without the Gated DeltaNet ops is refused by the model, before
# anything loads
out=$($GEM serve -m "$M" --port 0 --backend metal 2>&1)
check "metal refused: $out" grep -qF "backend 'metal' cannot run qwen35-tiny (Qwen3.5, qwen35) yet: it has no Gated DeltaNet ops (conv_silu, gated_delta, ...); use --backend cpu or cuda" <<<"$out"
# cuda has them, within its head dims: the tiny profile's 64-wide
# attention heads are refused by name, GPU or not
out=$($GEM serve -m "$M" --port 0 --backend cuda 2>&1)
check "cuda refused for tiny's heads: $out" grep -qF "backend 'cuda' cannot run qwen35-tiny: its attention heads are 64 wide and CUDA attention takes multiples of 128; use --backend cpu" <<<"$out"
out=$($GEM serve -m "$M" --port 0 --mtp data/models/mtp-default.gguf 2>&1)
check "--mtp refused: $out" grep -qF -- "--mtp: qwen35-tiny (qwen35) has no MTP drafter support yet: speculative decoding runs on Gemma 4 models only" <<<"$out"
no_sanitizer_reports
finish
