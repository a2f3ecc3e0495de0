#!/bin/bash
# gem serve's prompt cache (--cache-ram, src/server/pcache.c) on the tiny
# model with more conversations than slots:
#  - greedy answers are the same with the cache as without it, six
#    three-turn conversations at once on two slots, and with it the later
#    turns continue their parked states (hits, cached tokens);
#  - a conversation whose slot was taken continues from its parked state
#    (the whole earlier prompt cached), one evicted for room does not;
#    the bytes held stay within the bound, the least recently used state
#    goes first, and /metrics and /props report it;
#  - a request that shares only the prompt of a parked state (a branch)
#    copies it; the state stays for its own conversation;
#  - bad --cache-ram values are refused with a message naming the flag;
#    --cache-ram 0 turns it off (/props null, the load line says so).
NAME=test_pcache
. tests/server/lib.sh
need_node
tiny_model

# bad values, before any model is read
for v in -1 abc 1.5 "" 4294967296; do
    out=$($GEM serve -m "$M" --cache-ram "$v" 2>&1)
    rc=$?
    [ $rc = 2 ] && echo "$out" | grep -q -- "--cache-ram" && ok || bad "--cache-ram '$v': rc $rc: $out"
done
out=$($GEM serve -m "$M" --cache-ram 2>&1)
[ $? = 2 ] && echo "$out" | grep -q -- "--cache-ram" && ok || bad "--cache-ram without a value: $out"

# convs URL N TURNS OUT: N conversations at once, each TURNS completions
# (the next prompt: the last one, its answer and more words), greedy;
# OUT gets every answer and its cached tokens as JSON
convs() {
    node -e '
const [url, n, turns, out] = process.argv.slice(1);
const words = i => Array.from({length: 14}, (_, k) => "w" + ((k * 7 + i * 13) % 50)).join(" ");
async function conv(i) {
  let prompt = "conversation " + i + " " + words(i), rows = [];
  for (let t = 0; t < +turns; t++) {
    const r = await fetch(url + "/v1/completions", {method: "POST", headers: {"Content-Type": "application/json"},
      body: JSON.stringify({prompt, max_tokens: 10, temperature: 0, ignore_eos: true})});
    const j = await r.json();
    const text = j.choices[0].text;
    rows.push({text, prompt_tokens: j.usage.prompt_tokens, cached: j.usage.prompt_tokens_details.cached_tokens});
    prompt += text + " then " + words(i + t + 1);
  }
  return rows;
}
Promise.all(Array.from({length: +n}, (_, i) => conv(i))).then(all =>
  require("fs").writeFileSync(out, JSON.stringify(all)));' "$@"
}

start plain --heartbeat 0 --parallel 2 --cache-ram 0 || finish
UP="http://127.0.0.1:$PORT"
grep -q "prompt cache off" "$tmp/plain.log" && ok || bad "the load line says the cache is off"
[ "$(curl -s "$UP/props" | jget prompt_cache)" = null ] && ok || bad "/props prompt_cache with --cache-ram 0"
curl -s "$UP/metrics" | grep -q gem_prompt_cache && bad "/metrics shows a cache that is off" || ok
start cached --heartbeat 0 --parallel 2 --cache-ram 64 || finish
UC="http://127.0.0.1:$PORT"
grep -q "prompt cache up to 64 MiB of host memory" "$tmp/cached.log" && ok || bad "the load line names the bound"

convs "$UP" 6 3 "$tmp/plain.json"
convs "$UC" 6 3 "$tmp/cached.json"
node -e '
const fs = require("fs");
const a = JSON.parse(fs.readFileSync(process.argv[1])), b = JSON.parse(fs.readFileSync(process.argv[2]));
let same = 0, diff = [], cachedA = 0, cachedB = 0, later = 0;
for (let i = 0; i < a.length; i++)
  for (let t = 0; t < a[i].length; t++) {
    if (a[i][t].text === b[i][t].text) same++; else diff.push(i + "/" + t);
    if (t > 0) { cachedA += a[i][t].cached; cachedB += b[i][t].cached; later += b[i][t].prompt_tokens; }
  }
console.log(same, diff.join(",") || "-", cachedA, cachedB, later);' "$tmp/plain.json" "$tmp/cached.json" >"$tmp/cmp"
read -r same diffs cached_plain cached_pool later <"$tmp/cmp"
[ "$same" = 18 ] && ok || bad "answers differ with the cache (conversation/turn): $diffs"
# the later turns' prompts: most of each is the earlier prompt and answer
[ "$cached_pool" -gt $((later / 2)) ] 2>/dev/null && ok ||
    bad "with the cache $cached_pool of $later later-turn prompt tokens cached"
[ "$cached_pool" -gt "$cached_plain" ] 2>/dev/null && ok ||
    bad "the cache kept $cached_pool tokens, none kept $cached_plain"
m=$(curl -s "$UC/metrics")
hits=$(echo "$m" | sed -n 's/^gem_prompt_cache_hits_total \([0-9]*\)$/\1/p')
[ -n "$hits" ] && [ "$hits" -gt 0 ] && ok || bad "no prompt cache hits: '$hits'"

# the bound: every state parked here is 47 tokens (36 + 11 evaluated of
# 12 generated), 1155324 bytes on the tiny model: 3 MiB holds two
start small --heartbeat 0 --parallel 2 --cache-ram 3 || finish
U="http://127.0.0.1:$PORT"
P="one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen"
ask() { # conversation, extra words: prints the cached tokens
    curl -s "$U/v1/completions" -d '{"prompt":"'"$1 $P $P$2"'","max_tokens":12,"temperature":0,"ignore_eos":true}' |
        jget usage.prompt_tokens_details.cached_tokens
}
within() { # the bytes held against the bound
    local b
    b=$(curl -s "$U/props" | jget prompt_cache.bytes)
    [ -n "$b" ] && [ "$b" -le 3145728 ] 2>/dev/null && ok || bad "$1: $b bytes held, more than 3 MiB"
}
for c in a b c d e; do ask $c "" >/dev/null; within "after $c"; done
# a and b parked, then c, for which a was evicted: [b c]
[ "$(curl -s "$U/props" | jget prompt_cache.entries)" = 2 ] && ok || bad "two entries: $(curl -s "$U/props" | jget prompt_cache)"
[ "$(curl -s "$U/props" | jget prompt_cache.bytes)" = 2310648 ] && ok || bad "two states' bytes: $(curl -s "$U/props" | jget prompt_cache)"
c=$(ask c " and more")
[ "$c" -ge 36 ] 2>/dev/null && ok || bad "conversation c continued its parked state: $c cached"
within "after c again"
c=$(ask a " and more")
[ "$c" -le 1 ] 2>/dev/null && ok || bad "conversation a was evicted, yet $c cached"
within "after a again"
m=$(curl -s "$U/metrics")
ev=$(echo "$m" | sed -n 's/^gem_prompt_cache_evictions_total \([0-9]*\)$/\1/p')
[ -n "$ev" ] && [ "$ev" -ge 2 ] && ok || bad "evictions: '$ev'"
echo "$m" | grep -q '^gem_prompt_cache_limit_bytes 3145728$' && ok || bad "/metrics limit"
[ "$(curl -s "$U/props" | jget prompt_cache.limit_bytes)" = 3145728 ] && ok || bad "/props limit"

# a branch: a request that shares only the prompt of a parked state (not
# its answer) copies that state, which stays for its own conversation
start branch --heartbeat 0 --cache-ram 64 || finish
U="http://127.0.0.1:$PORT"
X=""
for w in $(seq 40); do X="$X s$w"; done
ask_json() { # prompt [more]: the response to prompt + more, 40 tokens
    curl -s "$U/v1/completions" -d "$(node -e 'console.log(JSON.stringify({prompt: process.argv[1] + (process.argv[2] || ""),
        max_tokens: 40, temperature: 0, ignore_eos: true}))' "$1" "$2")"
}
r=$(ask_json "$X")
nx=$(echo "$r" | jget usage.prompt_tokens)
ans=$(echo "$r" | jget choices.0.text)
ask_json "something unrelated entirely" >/dev/null
r=$(ask_json "$X" " but z1 z2 z3 z4 z5")
cz=$(echo "$r" | jget usage.prompt_tokens_details.cached_tokens)
[ "$cz" -ge $((nx - 1)) ] 2>/dev/null && ok || bad "the branch: $cz cached of the shared $nx"
[ "$(curl -s "$U/props" | jget prompt_cache.entries)" = 2 ] && ok || bad "the branched state stays beside the unrelated one"
r=$(ask_json "$X" "$ans and more")
cx=$(echo "$r" | jget usage.prompt_tokens_details.cached_tokens)
[ "$cx" -ge "$nx" ] 2>/dev/null && ok || bad "the copied state's own conversation: $cx cached of its first $nx"

no_sanitizer_reports
finish
