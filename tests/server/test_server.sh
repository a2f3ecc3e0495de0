#!/bin/bash
# gem serve against a real server process on loopback with the tiny model,
# driven by curl (and raw bytes through bash's /dev/tcp): routes and
# headers, the SSE framing byte for byte, determinism against `gem run`,
# prefix reuse, stop strings, heartbeats, the malformed-request corpus
# (tests/server/bad), slow and endless heads, oversized bodies, the API key
# and CORS, and a client that disconnects mid-stream. JSON fields are read
# with node (installed by .ci/run for the SDK test).
NAME=test_server
. tests/server/lib.sh
tiny_model

start main --test-hooks --timeout 1 --max-body 65536 --heartbeat 0 --alias tiny || finish
U="http://127.0.0.1:$PORT"
MAIN_PID=$PID
grep -q "listening on http://127.0.0.1:" "$tmp/main.log" && ok || bad "binds 127.0.0.1 by default"

# ---- routes and headers ----
curl -s -D "$tmp/h" "$U/health" >"$tmp/b"
check "health 200" grep -q "^HTTP/1.1 200 OK" "$tmp/h"
check "health body" grep -qx '{"status":"ok"}' "$tmp/b"
check "health is JSON" grep -qi "^Content-Type: application/json" "$tmp/h"
[ "$(curl -s "$U/v1/models" | jget data.0.id)" = tiny ] && ok || bad "/v1/models id"
[ "$(curl -s "$U/v1/models" | jget object)" = list ] && ok || bad "/v1/models object"
curl -s "$U/props" >"$tmp/props"
[ "$(jget default_generation_settings.n_ctx <"$tmp/props")" = 4096 ] && ok || bad "/props n_ctx"
[ "$(jget model_alias <"$tmp/props")" = tiny ] && ok || bad "/props alias"
[ "$(jget model_path <"$tmp/props")" = "$M" ] && ok || bad "/props model_path"
[ "$(jget modalities <"$tmp/props")" = '{"vision":false,"video":false,"audio":false}' ] && ok || bad "/props modalities"
jget chat_template <"$tmp/props" | grep -q "macro format_parameters" && ok || bad "/props chat_template"
jget build_info <"$tmp/props" | grep -q "^gem 0\." && ok || bad "/props build_info"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$U/nope")" = 404 ] && ok || bad "404"
[ "$(curl -s "$U/nope" | jget error.type)" = not_found_error ] && ok || bad "404 error shape"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$U/v1/chat/completions")" = 405 ] && ok || bad "GET on a POST route: 405"
[ "$(curl -s -o /dev/null -w '%{http_code}' -X DELETE "$U/health")" = 405 ] && ok || bad "DELETE /health: 405"

# tokenize / detokenize
[ "$(curl -s "$U/tokenize" -d '{"content":"Hello world"}' | jget tokens)" = "[9259,1902]" ] && ok || bad "tokenize"
[ "$(curl -s "$U/tokenize" -d '{"content":"Hello world","add_special":true}' | jget tokens)" = "[2,9259,1902]" ] && ok || bad "tokenize add_special"
[ "$(curl -s "$U/tokenize" -d '{"content":"<|turn>","parse_special":true}' | jget tokens)" = "[105]" ] && ok || bad "tokenize special"
[ "$(curl -s "$U/tokenize" -d '{"content":"Hello world","with_pieces":true}' | jget tokens.1.piece)" = " world" ] && ok || bad "tokenize pieces"
[ "$(curl -s "$U/detokenize" -d '{"tokens":[9259,1902]}' | jget content)" = "Hello world" ] && ok || bad "detokenize"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$U/detokenize" -d '{"tokens":[262144]}')" = 400 ] && ok || bad "detokenize out of vocabulary"
# logit_bias: -100 bans the greedy pick (it used to be ignored), +100 makes a token the pick
first=$(curl -s "$U/v1/completions" -d '{"prompt":[2,9259,1902],"max_tokens":1,"temperature":0,"return_tokens":true}' | jget choices.0.tokens.0)
banned=$(curl -s "$U/v1/completions" -d "{\"prompt\":[2,9259,1902],\"max_tokens\":1,\"temperature\":0,\"return_tokens\":true,\"logit_bias\":{\"$first\":-100}}" | jget choices.0.tokens.0)
[ -n "$first" ] && [ "$first" != undefined ] && [ "$banned" != "$first" ] && [ "$banned" != undefined ] && ok || bad "logit_bias -100 on $first: $banned"
forced=$(curl -s "$U/v1/chat/completions" -d '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":3,"temperature":0.9,"seed":4,"logit_bias":{"1902":100}}' | jget choices.0.message.content)
[ "$forced" = " world world world" ] && ok || bad "logit_bias +100 on ' world': '$forced'"
r=$(curl -s -w ' %{http_code}' "$U/v1/completions" -d '{"prompt":"x","logit_bias":{"262144":5}}')
case "$r" in *"'logit_bias' key '262144' is not a token id of this model's vocabulary"*400) ok ;; *) bad "logit_bias out of vocabulary: $r" ;; esac

# ---- determinism against gem run ----
want=$($GEM run -m "$M" --prompt-ids "2 9259 1902" -n 12 --temp 0 --ids 2>/dev/null | tr ' ' ',')
got=$(curl -s "$U/v1/completions" -d '{"prompt":[2,9259,1902],"max_tokens":12,"temperature":0,"return_tokens":true}' | jget choices.0.tokens)
[ "$got" = "[$want]" ] && ok || bad "greedy ids differ from gem run: [$want] vs $got"
want=$($GEM run -m "$M" -p "Hello world" -n 12 --temp 0 2>/dev/null)
got=$(curl -s "$U/v1/completions" -d '{"prompt":"Hello world","max_tokens":12,"temperature":0}' | jget choices.0.text)
[ "$got" = "$want" ] && ok || bad "greedy text differs from gem run: '$want' vs '$got'"
want=$($GEM run -m "$M" -p "Hi there" -n 10 --temp 0 --chat 2>/dev/null)
got=$(curl -s "$U/v1/chat/completions" -d '{"messages":[{"role":"user","content":"Hi there"}],"max_tokens":10,"temperature":0}' | jget choices.0.message.content)
[ "$got" = "$want" ] && ok || bad "greedy chat differs from gem run --chat: '$want' vs '$got'"
a=$(curl -s "$U/v1/completions" -d '{"prompt":"Once","max_tokens":10,"temperature":1,"seed":42}' | jget choices.0.text)
b=$(curl -s "$U/v1/completions" -d '{"prompt":"Once","max_tokens":10,"temperature":1,"seed":42,"cache_prompt":false}' | jget choices.0.text)
[ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "same seed, different text: '$a' vs '$b'"
r=$(curl -s "$U/v1/completions" -d '{"prompt":"Once","max_tokens":5,"temperature":0.7,"top_k":5,"top_p":0.5,"min_p":0.1,"presence_penalty":1,"frequency_penalty":1,"seed":1}')
[ "$(echo "$r" | jget usage.completion_tokens)" = 5 ] && [ "$(echo "$r" | jget choices.0.finish_reason)" = length ] && ok || bad "sampling options: $r"

# ---- prefix reuse: the same answers as a fresh start, with the cache counted ----
conv1='{"messages":[{"role":"system","content":"You are a terse assistant that answers in one short sentence."},{"role":"user","content":"Tell me about the history of the city of Paris and its bridges."}],"max_tokens":8,"temperature":0}'
r1=$(curl -s "$U/v1/chat/completions" -d "$conv1")
ans=$(echo "$r1" | jget choices.0.message.content | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>process.stdout.write(JSON.stringify(s.replace(/\n$/,""))))')
conv2='{"messages":[{"role":"system","content":"You are a terse assistant that answers in one short sentence."},{"role":"user","content":"Tell me about the history of the city of Paris and its bridges."},{"role":"assistant","content":'"$ans"'},{"role":"user","content":"And of Rome, with its many fountains and hills?"}],"max_tokens":8,"temperature":0'
r2=$(curl -s "$U/v1/chat/completions" -d "$conv2}")
r2fresh=$(curl -s "$U/v1/chat/completions" -d "$conv2,\"cache_prompt\":false}")
p1=$(echo "$r1" | jget usage.prompt_tokens)
c2=$(echo "$r2" | jget usage.prompt_tokens_details.cached_tokens)
[ -n "$c2" ] && [ "$c2" -ge $((p1 - 7)) ] && [ "$c2" -gt 32 ] && ok || bad "second turn reused $c2 of the first prompt's $p1 tokens"
[ "$(echo "$r2fresh" | jget usage.prompt_tokens_details.cached_tokens)" = 0 ] && ok || bad "cache_prompt false still reused"
[ "$(echo "$r2" | jget choices.0.message.content)" = "$(echo "$r2fresh" | jget choices.0.message.content)" ] && ok || bad "prefix reuse changed the answer"
# identical replay after a different conversation: restored, same answer
r3=$(curl -s "$U/v1/chat/completions" -d "$conv2}")
[ "$(echo "$r3" | jget choices.0.message.content)" = "$(echo "$r2" | jget choices.0.message.content)" ] && ok || bad "replay changed the answer"
other='{"messages":[{"role":"user","content":"Something else entirely."}],"max_tokens":8,"temperature":0}'
o1=$(curl -s "$U/v1/chat/completions" -d "$other")
[ "$(echo "$o1" | jget usage.prompt_tokens_details.cached_tokens)" -lt 3 ] && ok || bad "a different conversation reused the cache"
o2=$(curl -s "$U/v1/chat/completions" -d "$other")
[ "$(echo "$o1" | jget choices.0.message.content)" = "$(echo "$o2" | jget choices.0.message.content)" ] && ok || bad "identical replay differs"
[ "$(echo "$o2" | jget usage.prompt_tokens_details.cached_tokens)" -gt 0 ] && ok || bad "identical replay reused nothing"

# ---- stop strings and max_tokens ----
full=$(curl -s "$U/v1/completions" -d '{"prompt":"x","max_tokens":20,"gem_forced_output":"alpha beta gamma delta"}')
[ "$(echo "$full" | jget choices.0.text)" = "alpha beta gamma delta" ] && ok || bad "forced output: $full"
[ "$(echo "$full" | jget choices.0.finish_reason)" = stop ] && ok || bad "forced output ends with stop"
r=$(curl -s "$U/v1/completions" -d '{"prompt":"x","max_tokens":20,"gem_forced_output":"alpha beta gamma delta","stop":["zzz","gam"]}')
[ "$(echo "$r" | jget choices.0.text)" = "alpha beta " ] && [ "$(echo "$r" | jget choices.0.finish_reason)" = stop ] && ok || bad "stop string: $r"
r=$(curl -s "$U/v1/completions" -d '{"prompt":"x","max_tokens":2,"gem_forced_output":"alpha beta gamma delta"}')
[ "$(echo "$r" | jget choices.0.finish_reason)" = length ] && [ "$(echo "$r" | jget usage.completion_tokens)" = 2 ] && ok || bad "max_tokens: $r"
# ignore_eos: the forced text's end token is an ordinary token and drawn
# tokens follow it up to max_tokens (forced: 4 tokens, then the end token)
r=$(curl -s "$U/v1/completions" -d '{"prompt":"x","max_tokens":9,"ignore_eos":true,"gem_forced_output":"alpha beta gamma delta"}')
[ "$(echo "$r" | jget choices.0.finish_reason)" = length ] && [ "$(echo "$r" | jget usage.completion_tokens)" = 9 ] &&
    echo "$r" | jget choices.0.text | grep -q "^alpha beta gamma delta" && ok || bad "ignore_eos: $r"

# ---- SSE framing, byte for byte ----
curl -sN -D "$tmp/sh" "$U/v1/chat/completions" -d '{"messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true},"gem_forced_output":"<|channel>thought\nhm<channel|>Hello there"}' >"$tmp/sse"
check "SSE status" grep -q "^HTTP/1.1 200 OK" "$tmp/sh"
check "SSE content type" grep -qi "^Content-Type: text/event-stream" "$tmp/sh"
check "SSE no-cache" grep -qi "^Cache-Control: no-cache" "$tmp/sh"
check "SSE chunked" grep -qi "^Transfer-Encoding: chunked" "$tmp/sh"
node -e '
const s = require("fs").readFileSync(process.argv[1], "utf8");
if (!s.endsWith("data: [DONE]\n\n")) throw new Error("does not end with [DONE]");
const ev = s.split("\n\n").filter(Boolean);
for (const e of ev) if (!/^(data: |: )/.test(e) || e.includes("\n")) throw new Error("bad event " + JSON.stringify(e));
const js = ev.filter(e => e.startsWith("data: ")).slice(0, -1).map(e => JSON.parse(e.slice(6)));
const ids = new Set(js.map(j => j.id));
if (ids.size !== 1 || !/^chatcmpl-/.test([...ids][0])) throw new Error("ids " + [...ids]);
if (js[0].choices[0].delta.role !== "assistant") throw new Error("first chunk has no role");
const reasoning = js.map(j => j.choices[0]?.delta?.reasoning_content || "").join("");
const content = js.map(j => j.choices[0]?.delta?.content || "").join("");
if (reasoning !== "hm" || content !== "Hello there") throw new Error(`reasoning ${reasoning} content ${content}`);
const fin = js.filter(j => j.choices.length && j.choices[0].finish_reason);
if (fin.length !== 1 || fin[0].choices[0].finish_reason !== "stop") throw new Error("finish");
const last = js[js.length - 1];
if (last.choices.length !== 0 || last.usage.completion_tokens < 3) throw new Error("usage chunk");
if (js.slice(0, -1).some(j => j.usage !== null)) throw new Error("usage must be null before the last chunk");
' "$tmp/sse" && ok || bad "SSE events: $(head -c 600 "$tmp/sse")"
# parallel_tool_calls: false: the answer ends after its first call
two='<|tool_call>call:a{x:1}<tool_call|><|tool_call>call:b{}<tool_call|>'
tools='"tools":[{"type":"function","function":{"name":"a","parameters":{"type":"object"}}},{"type":"function","function":{"name":"b","parameters":{"type":"object"}}}]'
r=$(curl -s "$U/v1/chat/completions" -d "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],$tools,\"parallel_tool_calls\":false,\"gem_forced_output\":\"$two\"}")
[ "$(echo "$r" | jget choices.0.message.tool_calls.length)" = 1 ] && [ "$(echo "$r" | jget choices.0.message.tool_calls.0.function.name)" = a ] &&
    [ "$(echo "$r" | jget choices.0.finish_reason)" = tool_calls ] && ok || bad "parallel_tool_calls false: $r"
r=$(curl -s "$U/v1/chat/completions" -d "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],$tools,\"gem_forced_output\":\"$two\"}")
[ "$(echo "$r" | jget choices.0.message.tool_calls.length)" = 2 ] && ok || bad "parallel tool calls: $r"
# a stop string is not looked for inside the thought: "think" there is
# reasoning, the first "think" after it ends the answer
r=$(curl -s "$U/v1/chat/completions" -d '{"messages":[{"role":"user","content":"hi"}],"stop":["think"],"gem_forced_output":"<|channel>thought\nI think so<channel|>We think alike"}')
[ "$(echo "$r" | jget choices.0.message.reasoning_content)" = "I think so" ] && [ "$(echo "$r" | jget choices.0.message.content)" = "We " ] &&
    [ "$(echo "$r" | jget choices.0.finish_reason)" = stop ] && ok || bad "stop inside the thought: $r"
# the thought's tokens, markers included, are the usage's reasoning tokens (7 here)
[ "$(echo "$r" | jget usage.completion_tokens_details.reasoning_tokens)" = 7 ] && ok || bad "reasoning_tokens: $(echo "$r" | jget usage)"
# completions stream: text chunks, then finish, then [DONE]
curl -sN "$U/v1/completions" -d '{"prompt":"x","stream":true,"gem_forced_output":"one two"}' >"$tmp/sse2"
node -e '
const s = require("fs").readFileSync(process.argv[1], "utf8");
const ev = s.split("\n\n").filter(Boolean);
if (ev[ev.length - 1] !== "data: [DONE]") throw new Error("no DONE");
const js = ev.slice(0, -1).map(e => JSON.parse(e.slice(6)));
if (js.some(j => j.object !== "text_completion")) throw new Error("object");
if (js.map(j => j.choices[0].text).join("") !== "one two") throw new Error("text");
if (js[js.length - 1].choices[0].finish_reason !== "stop") throw new Error("finish");
' "$tmp/sse2" && ok || bad "completion SSE: $(cat "$tmp/sse2")"
# heartbeats: SSE comments during a long prefill, before the first data event
ids=$(node -e 'console.log(JSON.stringify(Array.from({length: 300}, (_, i) => 1000 + i)))')
curl -sN "$U/v1/completions" -d '{"prompt":'"$ids"',"stream":true,"max_tokens":2}' >"$tmp/hb"
[ "$(head -c 10 "$tmp/hb")" = ": prefill" ] && ok || bad "no heartbeat comment first: $(head -c 100 "$tmp/hb")"
[ "$(grep -c '^: prefill$' "$tmp/hb")" -ge 3 ] && ok || bad "fewer than 3 heartbeats over 5 prompt tiles"

# ---- logprobs, n > 1, prompt lists, echo ----
# chat logprobs: one entry per generated token (the end token not listed),
# top_logprobs entries sorted most likely first, every logprob <= 0, the
# token's logprob the same number as its entry in the top list; greedy: the
# token is the top one
lpchat='{"messages":[{"role":"user","content":"Hi"}],"max_tokens":6,"logprobs":true,"top_logprobs":3'
node_lp_chat='
const r = JSON.parse(require("fs").readFileSync(0, "utf8")), greedy = process.argv[1] === "1", k = +process.argv[2];
const c = r.choices[0].logprobs.content;
if (r.choices[0].logprobs.refusal !== null) throw new Error("refusal");
if (c.length !== r.usage.completion_tokens) throw new Error(`${c.length} entries for ${r.usage.completion_tokens} tokens`);
for (const e of c) {
  if (!(e.logprob <= 0) || e.top_logprobs.length !== k) throw new Error("entry " + JSON.stringify(e));
  if (Buffer.from(e.bytes).toString("utf8") !== e.token) throw new Error("bytes " + JSON.stringify(e));
  for (let i = 1; i < e.top_logprobs.length; i++)
    if (!(e.top_logprobs[i].logprob <= e.top_logprobs[i - 1].logprob)) throw new Error("not sorted " + JSON.stringify(e));
  const same = e.top_logprobs.find(t => t.token === e.token);
  if (same && same.logprob !== e.logprob) throw new Error("top entry differs " + JSON.stringify(e));
  if (greedy && (e.top_logprobs[0].token !== e.token || e.top_logprobs[0].logprob !== e.logprob)) throw new Error("greedy not top-1 " + JSON.stringify(e));
  if (!(e.logprob <= e.top_logprobs[0].logprob)) throw new Error("above the top " + JSON.stringify(e));
}
console.log(JSON.stringify(c));'
g=$(curl -s "$U/v1/chat/completions" -d "$lpchat,\"temperature\":0}" | node -e "$node_lp_chat" 1 3) && ok || bad "chat logprobs, greedy: $g"
sampled=$(curl -s "$U/v1/chat/completions" -d "$lpchat,\"temperature\":1,\"seed\":3}" | node -e "$node_lp_chat" 0 3) && ok || bad "chat logprobs, sampled: $sampled"
r=$(curl -s "$U/v1/chat/completions" -d '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":3,"logprobs":true}')
[ "$(echo "$r" | jget choices.0.logprobs.content.0.top_logprobs)" = "[]" ] && ok || bad "logprobs without top_logprobs: $r"
[ "$(curl -s "$U/v1/chat/completions" -d '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":2}' | jget choices.0.logprobs)" = null ] && ok || bad "logprobs null when not asked"
# forced text: its tokens in order, each listed once (the tool call's and
# the reasoning channel's tokens too)
r=$(curl -s "$U/v1/chat/completions" -d '{"messages":[{"role":"user","content":"Hi"}],"logprobs":true,"top_logprobs":2,"gem_forced_output":"<|channel>thought\nhm<channel|>Hello there"}')
[ "$(echo "$r" | node -e 'const r = JSON.parse(require("fs").readFileSync(0, "utf8")); console.log(r.choices[0].logprobs.content.map(e => e.token).join(""))')" = "<|channel>thought
hm<channel|>Hello there" ] && ok || bad "forced tokens' logprobs: $r"
# a stream lists the same entries as the whole answer, once each, in order
curl -sN "$U/v1/chat/completions" -d "$lpchat,\"temperature\":1,\"seed\":3,\"stream\":true}" >"$tmp/lps"
node -e '
const s = require("fs").readFileSync(process.argv[1], "utf8");
const js = s.split("\n\n").filter(e => e.startsWith("data: {")).map(e => JSON.parse(e.slice(6)));
const got = js.flatMap(j => j.choices[0].logprobs ? j.choices[0].logprobs.content : []);
if (JSON.stringify(got) !== process.argv[2]) throw new Error("stream " + JSON.stringify(got) + " vs " + process.argv[2]);
for (const j of js) if (j.choices[0].logprobs && !j.choices[0].logprobs.content.length) throw new Error("empty list in a chunk");
' "$tmp/lps" "$sampled" && ok || bad "chat logprobs stream: $(head -c 800 "$tmp/lps")"
# completions (legacy): tokens spell the text, offsets count its
# characters, top_logprobs hold up to logprobs + 1 entries with the token's
node_lp_cmpl='
const r = JSON.parse(require("fs").readFileSync(0, "utf8")), greedy = process.argv[1] === "1", k = +process.argv[2];
const ch = r.choices[0], lp = ch.logprobs;
if (lp.tokens.length !== r.usage.completion_tokens) throw new Error("count");
let off = 0;
for (let i = 0; i < lp.tokens.length; i++) {
  const top = lp.top_logprobs[i], vals = Object.values(top);
  if (!(lp.token_logprobs[i] <= 0) || top[lp.tokens[i]] !== lp.token_logprobs[i]) throw new Error("token " + i);
  if (vals.length < k || vals.length > k + 1) throw new Error("top size " + i);
  if (greedy && Math.max(...vals) !== lp.token_logprobs[i]) throw new Error("greedy not top-1 at " + i);
  if (lp.text_offset[i] !== off) throw new Error(`offset ${i}: ${lp.text_offset[i]} vs ${off}`);
  off += [...lp.tokens[i]].length;
}
if (process.argv[3] && lp.tokens.join("") !== ch.text) throw new Error("tokens do not spell the text");'
curl -s "$U/v1/completions" -d '{"prompt":"Hello world","max_tokens":6,"temperature":0,"logprobs":2}' | node -e "$node_lp_cmpl" 1 2 && ok || bad "completion logprobs, greedy"
curl -s "$U/v1/completions" -d '{"prompt":"x","logprobs":0,"gem_forced_output":"one two three"}' | node -e "$node_lp_cmpl" 0 0 1 && ok || bad "completion logprobs, forced"
curl -sN "$U/v1/completions" -d '{"prompt":"x","logprobs":1,"stream":true,"gem_forced_output":"one two three"}' >"$tmp/lps2"
node -e '
const s = require("fs").readFileSync(process.argv[1], "utf8");
const js = s.split("\n\n").filter(e => e.startsWith("data: {")).map(e => JSON.parse(e.slice(6)));
const toks = js.flatMap(j => j.choices[0].logprobs ? j.choices[0].logprobs.tokens : []);
if (toks.join("") !== "one two three") throw new Error(JSON.stringify(toks));
const offs = js.flatMap(j => j.choices[0].logprobs ? j.choices[0].logprobs.text_offset : []);
if (JSON.stringify(offs) !== "[0,3,7]") throw new Error("offsets " + offs);
' "$tmp/lps2" && ok || bad "completion logprobs stream: $(head -c 800 "$tmp/lps2")"
# n: independent answers drawn with seed + i (choice 0 is the n = 1
# answer), the same again for the same request; usage counts the prompt
# once; the later samples reuse the prompt (the server logs what each kept)
nreq='{"messages":[{"role":"system","content":"You are a terse assistant that answers in one short sentence."},{"role":"user","content":"Name a colour."}],"max_tokens":6,"temperature":1,"seed":11'
one=$(curl -s "$U/v1/chat/completions" -d "$nreq}")
r1=$(curl -s "$U/v1/chat/completions" -d "$nreq,\"n\":3}")
r2=$(curl -s "$U/v1/chat/completions" -d "$nreq,\"n\":3}")
two=$(curl -s "$U/v1/chat/completions" -d "${nreq/\"seed\":11/\"seed\":12}}")
echo "$r1" | node -e '
const r = JSON.parse(require("fs").readFileSync(0, "utf8")), one = JSON.parse(process.argv[1]), two = JSON.parse(process.argv[2]);
const c = r.choices;
if (c.length !== 3 || c.some((x, i) => x.index !== i)) throw new Error("indexes");
if (c[0].message.content !== one.choices[0].message.content) throw new Error("choice 0 is not the n = 1 answer");
if (c[1].message.content !== two.choices[0].message.content) throw new Error("choice 1 is not the seed + 1 answer");
if (r.usage.prompt_tokens !== one.usage.prompt_tokens) throw new Error("prompt counted more than once");
' "$one" "$two" && ok || bad "n 3: $r1"
[ "$r1" != "" ] && [ "$(echo "$r1" | jget choices)" = "$(echo "$r2" | jget choices)" ] && ok || bad "n 3 twice differs"
[ "$(echo "$r1" | jget usage.completion_tokens)" = 18 ] || [ "$(echo "$r1" | jget choices.0.finish_reason)$(echo "$r1" | jget choices.1.finish_reason)$(echo "$r1" | jget choices.2.finish_reason)" != lengthlengthlength ] && ok || bad "n 3 usage: $(echo "$r1" | jget usage)"
pt=$(echo "$r1" | jget usage.prompt_tokens)
# each later sample re-evaluates at most the generation prompt from the
# last turn start on (<|turn>model\n and the empty thought: 7 tokens here)
awk -v pt="$pt" '/chat\/completions choice [12]: prompt/ { if ($8 == pt && $10 + 0 >= pt - 7) n++ } END { exit n >= 4 ? 0 : 1 }' "$tmp/main.log" && ok || bad "n 3 samples did not reuse the prompt: $(grep 'choice' "$tmp/main.log" | tail -6)"
# a stream: each choice's chunks carry its index, with its own finish
curl -sN "$U/v1/chat/completions" -d "$nreq,\"n\":3,\"stream\":true}" >"$tmp/ns"
node -e '
const s = require("fs").readFileSync(process.argv[1], "utf8"), want = JSON.parse(process.argv[2]);
const js = s.split("\n\n").filter(e => e.startsWith("data: {")).map(e => JSON.parse(e.slice(6)));
for (let i = 0; i < 3; i++) {
  const mine = js.filter(j => j.choices[0].index === i);
  const text = mine.map(j => j.choices[0].delta.content || "").join("");
  if (text !== want.choices[i].message.content) throw new Error(`choice ${i}: ${text}`);
  if (mine.filter(j => j.choices[0].finish_reason).length !== 1) throw new Error("finish " + i);
  if (mine[0].choices[0].delta.role !== "assistant") throw new Error("role " + i);
}
' "$tmp/ns" "$r1" && ok || bad "n 3 stream: $(head -c 800 "$tmp/ns")"
# completions: n and prompt lists, choice index = prompt x n + sample
a=$(curl -s "$U/v1/completions" -d '{"prompt":"Hello world","max_tokens":5,"temperature":0}' | jget choices.0.text)
b=$(curl -s "$U/v1/completions" -d '{"prompt":[2,9259],"max_tokens":5,"temperature":0}' | jget choices.0.text)
r=$(curl -s "$U/v1/completions" -d '{"prompt":["Hello world","Hello world"],"max_tokens":5,"temperature":0,"n":2}')
[ "$(echo "$r" | jget choices.length)" = 4 ] && [ "$(echo "$r" | jget choices.3.index)" = 3 ] && [ "$(echo "$r" | jget choices.2.text)" = "$a" ] &&
    [ "$(echo "$r" | jget choices.1.text)" = "$a" ] && ok || bad "prompt list of strings, n 2: $r"
r=$(curl -s "$U/v1/completions" -d '{"prompt":[[2,9259],[2,9259,1902]],"max_tokens":5,"temperature":0}')
[ "$(echo "$r" | jget choices.0.text)" = "$b" ] && [ "$(echo "$r" | jget choices.1.text)" = "$a" ] && [ "$(echo "$r" | jget usage.prompt_tokens)" = 5 ] &&
    ok || bad "prompt list of id lists: $r"
r=$(curl -s -w ' %{http_code}' "$U/v1/completions" -d '{"prompt":["Hello",[2,9259]]}')
case "$r" in *"(element 1 is an array)"*'"param":"prompt"'*400) ok ;; *) bad "mixed prompt list: $r" ;; esac
r=$(curl -s -w ' %{http_code}' "$U/v1/completions" -d '{"prompt":[[2],[2,262144]]}')
case "$r" in *"'prompt[1][1]' is not a token id below 262144"*400) ok ;; *) bad "prompt list id out of vocabulary: $r" ;; esac
# echo: the prompt's text first; with logprobs its tokens first, the first
# with null
r=$(curl -s "$U/v1/completions" -d '{"prompt":"Hello world","max_tokens":5,"temperature":0,"echo":true}')
[ "$(echo "$r" | jget choices.0.text)" = "Hello world$a" ] && ok || bad "echo: $r"
[ "$(curl -s "$U/v1/completions" -d '{"prompt":[2,9259,1902],"max_tokens":5,"temperature":0,"echo":true}' | jget choices.0.text)" = "Hello world$a" ] && ok || bad "echo of ids"
r=$(curl -s "$U/v1/completions" -d '{"prompt":"Hello world","max_tokens":5,"temperature":0,"echo":true,"logprobs":1,"n":2}')
echo "$r" | node -e '
const r = JSON.parse(require("fs").readFileSync(0, "utf8")), a = process.argv[1];
for (const ch of r.choices) {
  const lp = ch.logprobs;
  if (ch.text !== "Hello world" + a) throw new Error("text");
  if (JSON.stringify(lp.tokens.slice(0, 3)) !== JSON.stringify(["<bos>", "Hello", " world"])) throw new Error("tokens " + lp.tokens);
  if (lp.token_logprobs[0] !== null || lp.top_logprobs[0] !== null || !(lp.token_logprobs[1] < 0)) throw new Error("first");
  if (lp.tokens.length !== 3 + r.usage.completion_tokens / 2) throw new Error("count");
  if (JSON.stringify(lp.text_offset.slice(0, 4)) !== "[0,0,5,11]") throw new Error("offsets " + lp.text_offset);
  if (lp.tokens.join("") !== "<bos>" + ch.text) throw new Error("spelling");
}
if (JSON.stringify(r.choices[0].logprobs) !== JSON.stringify(r.choices[1].logprobs)) throw new Error("greedy choices differ");
' "$a" && ok || bad "echo with logprobs: $r"
# the echoed " world" is scored as the model scores it when generated
# after the same tokens (forced)
e=$(echo "$r" | jget choices.0.logprobs.token_logprobs.2)
f=$(curl -s "$U/v1/completions" -d '{"prompt":[2,9259],"logprobs":1,"gem_forced_output":" world"}' | jget choices.0.logprobs.token_logprobs.0)
node -e 'process.exit(Math.abs(process.argv[1] - process.argv[2]) < 1e-4 ? 0 : 1)' -- "$e" "$f" && ok || bad "echo logprob $e vs generated $f"

# ---- tool calls ----
tools='"tools":[{"type":"function","function":{"name":"get_weather","description":"Weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]'
r=$(curl -s "$U/v1/chat/completions" -d '{"messages":[{"role":"user","content":"Weather in Paris?"}],'"$tools"',"gem_forced_output":"<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|><|tool_response>"}')
[ "$(echo "$r" | jget choices.0.finish_reason)" = tool_calls ] && ok || bad "tool call finish: $r"
[ "$(echo "$r" | jget choices.0.message.tool_calls.0.function.arguments)" = '{"city":"Paris"}' ] && ok || bad "tool call arguments: $r"
[ "$(echo "$r" | jget choices.0.message.content)" = null ] && ok || bad "tool call content must be null"
r=$(curl -s "$U/v1/chat/completions" -d '{"messages":[{"role":"user","content":"Weather?"}],'"$tools"',"tool_choice":{"type":"function","function":{"name":"get_weather"}},"gem_forced_output":"<|tool_call>call:get_weather{city:<|\"|>Oslo<|\"|>}<tool_call|>"}')
[ "$(echo "$r" | jget choices.0.message.tool_calls.0.function.name)" = get_weather ] && ok || bad "named tool_choice: $r"
# tool_choice constrains the answer to calls of the declared tools with
# arguments following their schemas (a grammar): a forced answer outside
# it is refused, and the random model's own answers are well-formed calls
r=$(curl -s "$U/v1/chat/completions" -d '{"messages":[{"role":"user","content":"Weather?"}],'"$tools"',"tool_choice":"required","gem_forced_output":"Sunny."}')
case "$r" in *"is not allowed by the output grammar"*) ok ;; *) bad "a forced answer outside the grammar: $r" ;; esac
for seed in 1 2 3 4 5; do
    r=$(curl -s "$U/v1/chat/completions" -d '{"messages":[{"role":"user","content":"Weather?"}],'"$tools"',"tool_choice":"required","temperature":1,"seed":'$seed',"max_tokens":400}')
    echo "$r" | node -e '
const r = JSON.parse(require("fs").readFileSync(0, "utf8")), c = r.choices[0];
if (c.finish_reason !== "tool_calls" || c.message.content !== null) throw new Error("not a call");
const a = JSON.parse(c.message.tool_calls[0].function.arguments);
if (c.message.tool_calls[0].function.name !== "get_weather" || typeof a.city !== "string") throw new Error("arguments");
' && ok || bad "tool_choice required, seed $seed: $r"
done
# a call to a function the request did not declare is an error, not a call
r=$(curl -s "$U/v1/chat/completions" -d '{"messages":[{"role":"user","content":"Weather?"}],'"$tools"',"gem_forced_output":"<|tool_call>call:rm_rf{}<tool_call|>"}')
case "$r" in *"the model called the function"*"rm_rf"*"do not declare"*) ok ;; *) bad "undeclared function: $r" ;; esac
# response_format: the answer is JSON of the schema
r=$(curl -s "$U/v1/chat/completions" -d '{"messages":[{"role":"user","content":"Data?"}],"temperature":1,"seed":4,"max_tokens":600,"response_format":{"type":"json_schema","json_schema":{"name":"n","schema":{"type":"object","properties":{"k":{"enum":["a","b"]},"v":{"type":"integer"}},"required":["k","v"],"additionalProperties":false}}}}')
echo "$r" | node -e '
const r = JSON.parse(require("fs").readFileSync(0, "utf8")), o = JSON.parse(r.choices[0].message.content);
if (!["a", "b"].includes(o.k) || !Number.isInteger(o.v) || Object.keys(o).length !== 2) throw new Error("schema");
if (r.choices[0].finish_reason !== "stop") throw new Error("finish");
' && ok || bad "response_format json_schema: $r"
code=$(curl -s -o "$tmp/err" -w '%{http_code}' "$U/v1/chat/completions" -H 'Content-Type: application/json' -d '{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"schema":{"type":"string","pattern":"a"}}}}')
[ "$code" = 400 ] && grep -q 'response_format.json_schema.schema: \\"pattern\\" is not supported' "$tmp/err" && ok || bad "unsupported schema: $code $(cat "$tmp/err")"

# ---- the malformed-request corpus: status and message, and the server keeps serving ----
while IFS="$(printf '\t')" read -r file route status want; do
    case "$file" in ''|'#'*) continue ;; esac
    code=$(curl -s -o "$tmp/err" -w '%{http_code}' "$U$route" -H 'Content-Type: application/json' --data-binary "@tests/server/bad/$file")
    if [ "$code" != "$status" ]; then bad "bad/$file: status $code, expected $status: $(cat "$tmp/err")"; continue; fi
    node -e 'const e = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")).error;
      if (typeof e.message !== "string" || typeof e.type !== "string" || !("param" in e) || !("code" in e)) process.exit(1);
      if (!e.message.includes(process.argv[2])) { console.error(e.message); process.exit(1); }' "$tmp/err" "$want" \
        && ok || bad "bad/$file: error lacks '$want': $(cat "$tmp/err")"
done < tests/server/bad/EXPECTED
# a prompt longer than the context
long=$(node -e 'console.log(JSON.stringify({messages: [{role: "user", content: "hello ".repeat(5000)}]}))')
r=$(curl -s -w ' %{http_code}' "$U/v1/chat/completions" -d "$long")
case "$r" in *context_length_exceeded*400) ok ;; *) bad "long prompt: ${r:0:300}" ;; esac
# an oversized body: 413 before it is read
head -c 70000 /dev/zero | tr '\0' 'a' >"$tmp/big"
[ "$(curl -s -o "$tmp/err" -w '%{http_code}' "$U/v1/completions" --data-binary "@$tmp/big")" = 413 ] && ok || bad "oversized body"
grep -q "request body too large" "$tmp/err" && ok || bad "413 message"

# browser drive-by guards: a POST body must be declared JSON (a page can
# send text/plain or a form without a preflight), and a loopback server
# answers only loopback Host names (DNS rebinding) unless --allow-host
r=$(curl_bare -s -w ' %{http_code}' "$U/v1/completions" -H 'Content-Type: text/plain' -d '{"prompt":"Hi","max_tokens":2}')
case "$r" in *"must be sent with 'Content-Type: application/json', not 'text/plain'"*415) ok ;; *) bad "text/plain POST: $r" ;; esac
r=$(curl_bare -s -w ' %{http_code}' "$U/v1/chat/completions" -d '{"messages":[{"role":"user","content":"Hi"}]}')
case "$r" in *"not 'application/x-www-form-urlencoded'"*415) ok ;; *) bad "form POST: $r" ;; esac
r=$(curl_bare -s -w ' %{http_code}' "$U/tokenize" -H 'Content-Type:' -d '{"content":"Hi"}')
case "$r" in *"(the header is missing)"*415) ok ;; *) bad "POST without Content-Type: $r" ;; esac
r=$(curl_bare -s "$U/tokenize" -H 'Content-Type: Application/JSON; charset=utf-8' -d '{"content":"Hello world"}' | jget tokens)
[ "$r" = "[9259,1902]" ] && ok || bad "JSON with a charset: $r"
r=$(curl -s -w ' %{http_code}' "$U/v1/models" -H 'Host: attacker.example')
case "$r" in *"Host 'attacker.example' is not allowed"*"--allow-host"*403) ok ;; *) bad "foreign Host: $r" ;; esac
[ "$(curl -s -o /dev/null -w '%{http_code}' "$U/health" -H 'Host: 127.0.0.1.attacker.example')" = 403 ] && ok || bad "a name that starts like 127."
curl -s -D "$tmp/h403" -o /dev/null "$U/health" -H 'Host: attacker.example'
grep -q "^HTTP/1.1 403 Forbidden" "$tmp/h403" && ok || bad "403 status line: $(head -1 "$tmp/h403")"
# the Content-Type check is the body routes': elsewhere the route's own answer
[ "$(curl_bare -s -o /dev/null -w '%{http_code}' -X POST "$U/nope" -H 'Content-Type: text/plain' -d x)" = 404 ] && ok || bad "POST to no route with text/plain"
for h in "localhost:$PORT" "127.0.0.1" "[::1]:$PORT" "LOCALHOST"; do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "$U/v1/models" -H "Host: $h")" = 200 ] && ok || bad "loopback Host $h"
done
[ "$(curl -s -o /dev/null -w '%{http_code}' "$U/health" -H 'Host: localhost:80x')" = 403 ] && ok || bad "Host with a bad port"

# raw requests: framing errors, timeouts, endless heads
raw() { # bytes, seconds to wait for the answer[, more bytes sent after 0.5 s]
    exec 3<>"/dev/tcp/127.0.0.1/$PORT"
    printf '%b' "$1" >&3
    if [ -n "$3" ]; then sleep 0.5; printf '%b' "$3" >&3; fi
    timeout "$2" cat <&3 >"$tmp/raw" 2>/dev/null
    exec 3<&-
}
raw 'GET /health HTTP/2.0\r\n\r\n' 3
grep -q "^HTTP/1.1 505" "$tmp/raw" && ok || bad "HTTP/2.0: $(head -1 "$tmp/raw")"
raw 'NONSENSE\r\n\r\n' 3
grep -q "^HTTP/1.1 400" "$tmp/raw" && ok || bad "garbage request line: $(head -1 "$tmp/raw")"
raw 'POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n' 3
grep -q "^HTTP/1.1 501" "$tmp/raw" && ok || bad "gzip request body: $(head -1 "$tmp/raw")"
raw 'POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n' 3
grep -q "^HTTP/1.1 400" "$tmp/raw" && ok || bad "Content-Length with Transfer-Encoding: $(head -1 "$tmp/raw")"
# a chunked body, arriving in two parts
raw 'POST /tokenize HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n7\r\n{"conte\r\n' 3 '10;x=1\r\nnt":"Hello world\r\n2\r\n"}\r\n0\r\n\r\n'
grep -q '{"tokens":\[9259,1902\]}' "$tmp/raw" && ok || bad "chunked request: $(cat "$tmp/raw")"
# curl streams a body from stdin chunked
[ "$(printf '{"content":"Hello world"}' | curl -s "$U/tokenize" -H 'Transfer-Encoding: chunked' --data-binary @- | jget tokens)" = "[9259,1902]" ] && ok || bad "curl chunked upload"
# HEAD: the head a GET gets, no body, so the next response on the connection is read whole
raw 'HEAD /health HTTP/1.1\r\nHost: localhost\r\n\r\nHEAD /v1/completions HTTP/1.1\r\nHost: localhost\r\n\r\nGET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n' 3
[ "$(grep -c '^HTTP/1.1 200' "$tmp/raw")" = 2 ] && grep -q '^HTTP/1.1 405' "$tmp/raw" &&
    [ "$(grep -o '{"status":"ok"}' "$tmp/raw" | wc -l)" = 1 ] && [ "$(grep -c '"error"' "$tmp/raw")" = 0 ] &&
    tail -c 15 "$tmp/raw" | grep -q '{"status":"ok"}' && ok || bad "HEAD: $(cat "$tmp/raw")"
# RFC 9112 3.2: an HTTP/1.1 request without a Host header, or with two, is refused
raw 'GET /health HTTP/1.1\r\nConnection: close\r\n\r\n' 3
grep -q "^HTTP/1.1 400" "$tmp/raw" && grep -q "no Host header (HTTP/1.1 requires one)" "$tmp/raw" && ok || bad "HTTP/1.1 without Host: $(cat "$tmp/raw")"
raw 'GET /health HTTP/1.1\r\nHost: localhost\r\nHost: evil.example\r\n\r\n' 3
grep -q "^HTTP/1.1 400" "$tmp/raw" && grep -q "more than one Host header" "$tmp/raw" && ok || bad "two Host headers: $(cat "$tmp/raw")"
raw 'GET /health HTTP/1.0\r\n\r\n' 3
grep -q '{"status":"ok"}' "$tmp/raw" && ok || bad "HTTP/1.0 without Host: $(cat "$tmp/raw")"
raw 'GET /health HTTP/1.1\r\nHost: localhost\r\nBad Header: y\r\n\r\n' 3
grep -q "^HTTP/1.1 400" "$tmp/raw" && ok || bad "bad header name: $(head -1 "$tmp/raw")"
raw 'GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n' 3
grep -q '{"status":"ok"}' "$tmp/raw" && ok || bad "raw health"
t0=$(date +%s%N)
raw 'GET /health HTTP/1.1\r\nHost: localhost\r\nX-Slow: ' 5
t1=$(date +%s%N)
grep -q "^HTTP/1.1 408" "$tmp/raw" && ok || bad "slow head: no 408: $(head -1 "$tmp/raw")"
[ $(((t1 - t0) / 1000000)) -lt 4000 ] && ok || bad "slow head took $(((t1 - t0) / 1000000)) ms to time out"
raw "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"prompt\":" 5
grep -q "^HTTP/1.1 408" "$tmp/raw" && ok || bad "slow body: no 408"
endless=$(head -c 20000 /dev/zero | tr '\0' 'a')
raw "GET /health HTTP/1.1\r\nX-Endless: $endless" 5
grep -q "^HTTP/1.1 431" "$tmp/raw" && ok || bad "endless head: no 431: $(head -1 "$tmp/raw")"
# keep-alive: two requests on one connection, pipelined
raw 'GET /health HTTP/1.1\r\nHost: localhost\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n' 3
[ "$(grep -o 'HTTP/1.1 200' "$tmp/raw" | wc -l)" = 2 ] && ok || bad "pipelined keep-alive requests"
# an HTTP/1.0 stream: no chunked coding, the end of the stream closes the connection
raw 'POST /v1/completions HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: 61\r\n\r\n{"prompt":"x","stream":true,"gem_forced_output":"one two"}   ' 5
grep -q "^HTTP/1.1 200" "$tmp/raw" && ! grep -qi "^Transfer-Encoding" "$tmp/raw" && grep -qi "^Connection: close" "$tmp/raw" \
    && [ "$(tail -c 14 "$tmp/raw")" = "$(printf 'data: [DONE]\n\n')" ] && ok || bad "HTTP/1.0 stream: $(cat "$tmp/raw")"
# Expect: 100-continue (the body follows the interim answer)
raw 'POST /tokenize HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 15\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n' 3 '{"content":"a"}'
grep -q "^HTTP/1.1 100 Continue" "$tmp/raw" && grep -q '"tokens":\[' "$tmp/raw" && ok || bad "100-continue"

# ---- a client that leaves mid-stream cancels its request ----
curl -sN --max-time 1 "$U/v1/completions" -d '{"prompt":"Once upon a time","stream":true,"temperature":0}' >"$tmp/cut" 2>/dev/null
t0=$(date +%s%N)
r=$(curl -s --max-time 10 "$U/v1/completions" -d '{"prompt":"Hi","max_tokens":2}')
t1=$(date +%s%N)
[ "$(echo "$r" | jget usage.completion_tokens)" = 2 ] && ok || bad "request after a disconnect: $r"
[ $(((t1 - t0) / 1000000)) -lt 2000 ] && ok || bad "the engine was not freed: next request took $(((t1 - t0) / 1000000)) ms"
grep -q "cancelled: the client left" "$tmp/main.log" && ok || bad "no cancellation logged"
grep -c '^data: ' "$tmp/cut" | grep -qv '^0$' && ok || bad "nothing streamed before the disconnect"
# a client that leaves during a long prefill: cancelled within a prompt tile
ids=$(node -e 'console.log(JSON.stringify(Array.from({length: 4000}, (_, i) => 1000 + (i * 7919) % 200000)))')
curl -sN --max-time 0.5 "$U/v1/completions" -d '{"prompt":'"$ids"',"stream":true,"max_tokens":4}' >/dev/null 2>&1
t0=$(date +%s%N)
r=$(curl -s --max-time 10 "$U/v1/completions" -d '{"prompt":"Hi","max_tokens":2}')
t1=$(date +%s%N)
[ "$(echo "$r" | jget usage.completion_tokens)" = 2 ] && [ $(((t1 - t0) / 1000000)) -lt 1500 ] && ok \
    || bad "prefill not cancelled: the next request took $(((t1 - t0) / 1000000)) ms: $r"
grep -q "cancelled: the client left (prompt 4000 tokens, 0 cached, 0 generated)" "$tmp/main.log" && ok || bad "prefill cancellation not logged"
# a client that leaves during a non-streamed request
curl -s --max-time 1 "$U/v1/completions" -d '{"prompt":"Once upon a time","temperature":0}' >/dev/null 2>&1
sleep 0.3
[ "$(grep -c 'cancelled: the client left' "$tmp/main.log")" -ge 3 ] && ok || bad "non-streamed request not cancelled"
kill -0 $MAIN_PID 2>/dev/null && ok || bad "the server died"
[ "$(curl -s "$U/health")" = '{"status":"ok"}' ] && ok || bad "health after the corpus"
# a client that half-closes after sending (nc -N) is treated as gone, and the log says so (its
# request waits behind a long one, so the half-close arrives while it is queued; one that
# half-closes just before its request runs is logged as 499 by run_job, a race no test here
# can place deterministically)
before=$(grep -c "cancelled: the client left while queued" "$tmp/main.log")
curl -s "$U/v1/completions" -d '{"prompt":"Once","max_tokens":300,"temperature":0}' >/dev/null &
busy=$!
sleep 0.3
python3 -c '
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
b = b"{\"prompt\":\"Hi\",\"max_tokens\":2}"
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(b), b))
s.shutdown(socket.SHUT_WR)
s.settimeout(5)
try:
    while s.recv(4096): pass
except OSError: pass
' "$PORT"
wait $busy
[ "$(grep -c "cancelled: the client left while queued" "$tmp/main.log")" -gt "$before" ] && ok || bad "half-closed client not logged"

# ---- the Host guard follows the address bound: 0x7f.0.0.1 is 127.0.0.1 ----
start hexhost --host 0x7f.0.0.1 || finish
[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/health" -H 'Host: attacker.example')" = 403 ] && ok || bad "loopback bound as 0x7f.0.0.1: foreign Host served"
kill $PID

# ---- --allow-host: names a loopback server accepts beside its own ----
start allow --allow-host my.box,other.box || finish
for h in "my.box:$PORT" "OTHER.box" "localhost"; do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/v1/models" -H "Host: $h")" = 200 ] && ok || bad "--allow-host: Host $h"
done
[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/v1/models" -H "Host: box")" = 403 ] && ok || bad "--allow-host: a name not in the list"
kill $PID
$GEM serve -m "$M" --port 0 --allow-host 'a b' >"$tmp/o" 2>&1
[ $? = 2 ] && grep -q "bad value for --allow-host" "$tmp/o" && ok || bad "--allow-host with a space: $(cat "$tmp/o")"

# ---- the queue: heartbeats while waiting, a waiting client that leaves frees its place ----
# one thread: the long requests must outlast the waiting clients below on
# a fast machine too (the demo model decodes 400 tokens in under 0.9 s on
# two threads of a 2-core VM, about when the leaving client's place is
# checked)
start queue --queue 1 --heartbeat 0.3 --threads 1 || finish
Q="http://127.0.0.1:$PORT"
curl -s "$Q/v1/completions" -d '{"prompt":"Once","max_tokens":400,"temperature":0}' >"$tmp/long1" &
lp=$!
sleep 0.3
curl -sN "$Q/v1/completions" -d '{"prompt":"Hi","max_tokens":2,"stream":true}' >"$tmp/queued"
[ "$(head -c 9 "$tmp/queued")" = ": queued" ] && ok || bad "no ': queued' comment first: $(head -c 80 "$tmp/queued")"
tail -c 14 "$tmp/queued" | grep -q "data: \[DONE\]" && ok || bad "queued stream did not finish"
wait $lp
curl -s "$Q/v1/completions" -d '{"prompt":"Once","max_tokens":1000,"temperature":0,"ignore_eos":true}' >"$tmp/long2" &
lp=$!
sleep 0.3
curl -s --max-time 0.6 "$Q/v1/completions" -d '{"prompt":"Hi","max_tokens":2}' >/dev/null 2>&1
# the server notices at a heartbeat write (0.3 s apart; the first write
# after the close may still succeed): up to 3 s on a loaded machine
i=0
until grep -q "cancelled: the client left while queued" "$tmp/queue.log" || [ $i -ge 30 ]; do sleep 0.1; i=$((i + 1)); done
grep -q "cancelled: the client left while queued" "$tmp/queue.log" && ok || bad "a waiting client that left was not dropped"
r=$(curl -s -w ' %{http_code}' "$Q/v1/completions" -d '{"prompt":"Hi","max_tokens":2}')
case "$r" in *' 200') ok ;; *) bad "the place of a client that left was not freed: $r" ;; esac
wait $lp
[ "$(jget usage.completion_tokens <"$tmp/long2")" = 1000 ] && ok || bad "the long request"

# ---- API key and CORS ----
start auth --api-key s3cret --cors http://example.test || finish
A="http://127.0.0.1:$PORT"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$A/health")" = 200 ] && ok || bad "health needs no key"
for route in /v1/models /props; do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "$A$route")" = 401 ] && ok || bad "$route without a key"
done
r=$(curl -s -w ' %{http_code}' "$A/v1/chat/completions" -H 'Authorization: Bearer wrong' -d '{"messages":[{"role":"user","content":"x"}],"max_tokens":1}')
case "$r" in *'"type":"invalid_request_error"'*'"code":"invalid_api_key"'*' 401') ok ;; *) bad "wrong key: $r" ;; esac
[ "$(curl -s -o /dev/null -w '%{http_code}' "$A/v1/completions" -H 'Authorization: Bearer s3cret' -d '{"prompt":"x","max_tokens":1}')" = 200 ] && ok || bad "right key"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$A/v1/completions" -H 'Authorization: Bearer s3cret2' -d '{"prompt":"x","max_tokens":1}')" = 401 ] && ok || bad "key with a suffix"
# without the key a request is refused on its head: no 100 Continue, its body never read
raw 'POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5000000\r\nExpect: 100-continue\r\n\r\n{"prompt"' 3
grep -q "^HTTP/1.1 401" "$tmp/raw" && ! grep -q "100 Continue" "$tmp/raw" && ok || bad "401 on the head: $(head -c 300 "$tmp/raw")"
grep -q "401: no valid API key (refused on the head, body not read)" "$tmp/auth.log" && ok || bad "early 401 not logged"
# a client that writes its whole 5 MB body before reading (no Expect) still reads the 401, not a broken pipe
python3 -c '
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
n = 5000000
try:
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % n + b"a" * n)
except OSError as e:
    print("send failed:", e); sys.exit(1)
s.settimeout(5)
print(s.recv(64).decode(errors="replace").split("\r\n")[0])
' "$PORT" >"$tmp/o" 2>&1
grep -q "^HTTP/1.1 401" "$tmp/o" && ok || bad "401 to a client sending its whole body: $(cat "$tmp/o")"
curl -s -D "$tmp/ch" -o /dev/null "$A/v1/models" -H 'Authorization: Bearer s3cret'
grep -qi "^Access-Control-Allow-Origin: http://example.test" "$tmp/ch" && ok || bad "CORS origin header"
curl -s -D "$tmp/ch" -o /dev/null -X OPTIONS "$A/v1/chat/completions" -H 'Origin: http://example.test' -H 'Access-Control-Request-Method: POST'
grep -q "^HTTP/1.1 204" "$tmp/ch" && grep -qi "^Access-Control-Allow-Headers: Authorization, Content-Type" "$tmp/ch" && ok || bad "CORS preflight"
kill $PID
# the key from a file (its first line) or from GEM_API_KEY, not the command line
printf '\357\273\277  f1le-key  \nsecond line\n' >"$tmp/key"
start keyfile --api-key-file "$tmp/key" || finish
[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/v1/models" -H 'Authorization: Bearer f1le-key')" = 200 ] && ok || bad "--api-key-file key"
[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/v1/models")" = 401 ] && ok || bad "--api-key-file: no key"
grep -q "f1le-key" /proc/$PID/cmdline && bad "the key is on the command line" || ok
kill $PID
GEM_API_KEY=env-key start envkey || finish
[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/v1/models" -H 'Authorization: Bearer env-key')" = 200 ] && ok || bad "GEM_API_KEY key"
[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/v1/models" -H 'Authorization: Bearer other')" = 401 ] && ok || bad "GEM_API_KEY: wrong key"
kill $PID
printf '\n' >"$tmp/empty"
for f in "--api-key-file $tmp/empty:the API key from $tmp/empty is empty" "--api-key-file $tmp/none:cannot open" \
         "--api-key k --api-key-file $tmp/key:--api-key and --api-key-file both given"; do
    $GEM serve -m "$M" --port 0 ${f%%:*} >"$tmp/o" 2>&1
    [ $? != 0 ] && grep -q -- "${f#*:}" "$tmp/o" && ok || bad "${f%%:*}: $(head -c 300 "$tmp/o")"
done
# --help explains every option of the synopsis
$GEM serve --help >"$tmp/help" 2>&1
[ $? = 0 ] && ok || bad "gem serve --help exit status"
for opt in $($GEM serve --frob 2>&1 | grep -v 'unknown option' | grep -o -- '--[a-z-]*' | sort -u); do
    grep -q -- "$opt " "$tmp/help" && ok || bad "gem serve --help does not explain $opt"
done

# ---- speculative decoding (--mtp) ----
# a random drafter: the answer is the plain server's; timings count the
# drafts (llama-server's draft_n / draft_n_accepted); /props names it
MA="$tmp/mtp.gguf"
if $GEM synth --profile gemma4-tiny-assistant --type q8_0 --seed 2 -o "$MA" >/dev/null 2>&1; then
    start mtp --mtp "$MA" --draft-max 4 || finish
    S="http://127.0.0.1:$PORT"
    body='{"prompt":"The quick brown fox","max_tokens":24,"temperature":0,"ignore_eos":true}'
    curl -s "$S/v1/completions" -d "$body" >"$tmp/mtp_r"
    curl -s "$U/v1/completions" -d "$body" >"$tmp/plain_r"
    [ -n "$(jget choices.0.text <"$tmp/mtp_r")" ] && [ "$(jget choices.0.text <"$tmp/mtp_r")" = "$(jget choices.0.text <"$tmp/plain_r")" ] &&
        ok || bad "mtp answer differs: $(head -c 300 "$tmp/mtp_r") vs $(head -c 300 "$tmp/plain_r")"
    n=$(jget timings.draft_n <"$tmp/mtp_r")
    [ "${n:-0}" -gt 0 ] 2>/dev/null && [ -n "$(jget timings.draft_n_accepted <"$tmp/mtp_r")" ] && ok || bad "mtp timings: $(head -c 400 "$tmp/mtp_r")"
    [ "$(jget timings.draft_n <"$tmp/plain_r")" = undefined ] && ok || bad "draft_n without a drafter"
    [ "$(curl -s "$S/props" | jget mtp.profile)" = gemma4-tiny-assistant ] && ok || bad "/props mtp"
    [ "$(curl -s "$U/props" | jget mtp)" = null ] && ok || bad "/props mtp without a drafter"
    kill $PID
    # a drafter that does not fit, and bad draft options
    $GEM serve -m "$M" --port 0 --mtp "$M" >"$tmp/o" 2>&1
    [ $? = 1 ] && grep -q "is a target model (gemma4-tiny), not an MTP drafter" "$tmp/o" && ok || bad "mtp mismatch: $(head -c 300 "$tmp/o")"
    $GEM serve -m "$M" --port 0 --draft-max 99 >"$tmp/o" 2>&1
    [ $? = 2 ] && grep -q "draft-max wants a whole number of tokens from 0 to 15" "$tmp/o" && ok || bad "--draft-max 99"
    $GEM serve -m "$M" --port 0 --draft-p-prod 1.5 >"$tmp/o" 2>&1
    [ $? = 2 ] && grep -q -- "--draft-p-prod wants a probability in \[0, 1\], not '1.5'" "$tmp/o" && ok || bad "--draft-p-prod 1.5: $(cat "$tmp/o")"
else
    bad "synth assistant"
fi

# ---- startup errors ----
$GEM serve -m "$tmp/missing.gguf" --port 0 >"$tmp/o" 2>&1
rc=$?
[ $rc = 1 ] && grep -q "gem serve: error: .*cannot open" "$tmp/o" && ok || bad "missing model: rc $rc $(cat "$tmp/o")"
$GEM serve -m "$M" --port 99999 >"$tmp/o" 2>&1
[ $? = 2 ] && grep -q "bad value for --port" "$tmp/o" && ok || bad "bad port"
$GEM serve -m "$M" --frob >"$tmp/o" 2>&1
[ $? = 2 ] && grep -q "unknown option '--frob'" "$tmp/o" && ok || bad "unknown option"
# --queue 0 would refuse every request (503 even when idle); counts are whole numbers
$GEM serve -m "$M" --port 0 --ctx 8192 >"$tmp/o" 2>&1
[ $? = 1 ] && grep -q "a context of 8192 exceeds the model's trained context of 4096" "$tmp/o" && ok || bad "--ctx past the trained context: $(head -c 300 "$tmp/o")"
for f in "--queue 0" "--queue 1.5" "--max-conns 2.5" "--threads 1.5" "--ctx 100.5" "--max-body 2048.5"; do
    $GEM serve -m "$M" --port 0 $f >"$tmp/o" 2>&1
    [ $? = 2 ] && grep -q "bad value for ${f% *}" "$tmp/o" && ok || bad "$f accepted: $(head -c 200 "$tmp/o")"
done

# /metrics (Prometheus text) and /slots (llama-server's shape) after the
# requests above
curl_bare -s -D "$tmp/h" "$U/metrics" >"$tmp/m"
grep -qi "^content-type: text/plain; version=0.0.4" "$tmp/h" && ok || bad "/metrics content type: $(cat "$tmp/h")"
n200=$(sed -n 's/^gem_requests_total{status="200"} \([0-9]*\)$/\1/p' "$tmp/m")
n400=$(sed -n 's/^gem_requests_total{status="400"} \([0-9]*\)$/\1/p' "$tmp/m")
gen=$(sed -n 's/^gem_generated_tokens_total \([0-9]*\)$/\1/p' "$tmp/m")
[ "${n200:-0}" -gt 10 ] && [ "${n400:-0}" -gt 5 ] && [ "${gen:-0}" -gt 10 ] && ok || bad "/metrics counts: 200 $n200, 400 $n400, tokens $gen"
grep -q '^gem_time_to_first_token_seconds_bucket{le="+Inf"} [1-9]' "$tmp/m" && grep -q '^gem_requests_queued 0$' "$tmp/m" && ok || bad "/metrics histogram and gauges: $(head -c 600 "$tmp/m")"
before=$n200
curl -s "$U/v1/completions" -d '{"prompt":"Hi","max_tokens":2}' >/dev/null
after=$(curl_bare -s "$U/metrics" | sed -n 's/^gem_requests_total{status="200"} \([0-9]*\)$/\1/p')
[ "$after" = $((before + 1)) ] && ok || bad "/metrics after one more request: $before then $after"
r=$(curl_bare -s "$U/slots")
echo "$r" | node -e '
const s = JSON.parse(require("fs").readFileSync(0, "utf8"));
if (!Array.isArray(s) || s.length !== 1 || s[0].id !== 0 || s[0].is_processing !== false || s[0].n_ctx !== 4096 || !(s[0].n_cached_tokens > 0)) throw new Error("shape");
' && ok || bad "/slots: $r"

# SIGTERM stops the server cleanly
kill -TERM $MAIN_PID
wait $MAIN_PID
rc=$?
[ $rc = 0 ] && ok || bad "SIGTERM exit status $rc"

# SIGTERM during a stream: it ends with an error event and [DONE], never
# cut; a request waiting behind it gets 503; with --shutdown-grace a short
# answer finishes normally
start term --heartbeat 0 || finish
curl -sN "http://127.0.0.1:$PORT/v1/completions" -d '{"prompt":"x","max_tokens":100000,"n":8,"ignore_eos":true,"stream":true}' >"$tmp/term1" &
c1=$!
sleep 1
curl -s -o "$tmp/term2" -w '%{http_code}' "http://127.0.0.1:$PORT/v1/completions" -d '{"prompt":"y","max_tokens":4}' >"$tmp/term2code" &
c2=$!
sleep 0.5
kill -TERM $PID
wait $PID
rc=$?
wait $c1 $c2
[ $rc = 0 ] && ok || bad "SIGTERM during a stream: exit status $rc"
tail -c 300 "$tmp/term1" | grep -q "the server is shutting down" && [ "$(tail -c 14 "$tmp/term1" | tr -d '\r\n')" = "data: [DONE]" ] && ok || bad "the stream's end after SIGTERM: $(tail -c 400 "$tmp/term1")"
[ "$(cat "$tmp/term2code")" = 503 ] && grep -q "shutting down" "$tmp/term2" && ok || bad "the queued request after SIGTERM: $(cat "$tmp/term2code") $(cat "$tmp/term2")"
# (150 tokens: about 1.5 s, 7 s under ASan; 600 took 29 s there, past the grace)
start grace --heartbeat 0 --shutdown-grace 20 || finish
curl -sN "http://127.0.0.1:$PORT/v1/completions" -d '{"prompt":"x","max_tokens":150,"ignore_eos":true,"stream":true}' >"$tmp/grace" &
c1=$!
sleep 0.3
kill -TERM $PID
wait $PID
wait $c1
grep -q '"finish_reason":"length"' "$tmp/grace" && ! grep -q "shutting down" "$tmp/grace" && [ "$(tail -c 14 "$tmp/grace" | tr -d '\r\n')" = "data: [DONE]" ] && ok || bad "a stream within the grace period: $(tail -c 400 "$tmp/grace")"
# a second SIGTERM (or SIGINT) during the grace period ends it at once:
# the stream gets its error event and [DONE], the server exits promptly
start grace2 --heartbeat 0 --shutdown-grace 20 || finish
curl -sN "http://127.0.0.1:$PORT/v1/completions" -d '{"prompt":"x","max_tokens":100000,"n":8,"ignore_eos":true,"stream":true}' >"$tmp/grace2" &
c1=$!
sleep 0.5
kill -TERM $PID
sleep 0.5
t0=$(date +%s%N)
kill -INT $PID
wait $PID
rc=$?
t1=$(date +%s%N)
wait $c1
[ $rc = 0 ] && [ $(((t1 - t0) / 1000000)) -lt 3000 ] && ok || bad "a second signal: exit status $rc after $(((t1 - t0) / 1000000)) ms"
tail -c 300 "$tmp/grace2" | grep -q "the server is shutting down" && [ "$(tail -c 14 "$tmp/grace2" | tr -d '\r\n')" = "data: [DONE]" ] && ok || bad "the stream's end after a second signal: $(tail -c 400 "$tmp/grace2")"
grep -q "a second signal ended the shutdown grace period" "$tmp/grace2.log" && ok || bad "the second signal not logged: $(tail -3 "$tmp/grace2.log")"

no_sanitizer_reports
finish
