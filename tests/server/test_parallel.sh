#!/bin/bash
# gem serve --parallel N on the tiny model: requests sent at once get the
# answers they get one at a time (greedy and seeded sampling), the decode
# steps were batched (/metrics), /slots and /props show the slots, and a
# conversation's next request goes back to the slot that holds its prefix
# while other prompts take the idle slots.
NAME=test_parallel
. tests/server/lib.sh
need_node
tiny_model

start one --heartbeat 0 || finish
U1="http://127.0.0.1:$PORT"
start three --heartbeat 0 --parallel 3 --queue 8 || finish
U3="http://127.0.0.1:$PORT"
grep -q "3 slots" "$tmp/three.log" && ok || bad "the load line names the slots"

# six requests: greedy and seeded sampling, prompts of different lengths
body() { # i
    local i=$1 words="" w
    for w in $(seq $((3 + i * 9))); do words="$words w$((w * 7 + i))"; done
    if [ $((i % 2)) = 0 ]; then
        printf '{"prompt":"%s","max_tokens":%d,"temperature":0,"ignore_eos":true}' "$words" $((16 + i))
    else
        printf '{"prompt":"%s","max_tokens":%d,"temperature":0.9,"top_k":40,"seed":%d,"ignore_eos":true}' "$words" \
            $((16 + i)) $((100 + i))
    fi
}
for i in 0 1 2 3 4 5; do curl -s "$U1/v1/completions" -d "$(body $i)" | jget choices.0.text >"$tmp/alone$i"; done
clients=""
for i in 0 1 2 3 4 5; do
    curl -s "$U3/v1/completions" -d "$(body $i)" | jget choices.0.text >"$tmp/together$i" &
    clients="$clients $!"
done
wait $clients
for i in 0 1 2 3 4 5; do
    if [ -s "$tmp/alone$i" ] && cmp -s "$tmp/alone$i" "$tmp/together$i"; then ok; else
        bad "request $i: '$(head -c 80 "$tmp/together$i")' at once, '$(head -c 80 "$tmp/alone$i")' alone"
    fi
done
m=$(curl -s "$U3/metrics")
steps=$(echo "$m" | sed -n 's/^gem_decode_steps_total \([0-9]*\)$/\1/p')
rows=$(echo "$m" | sed -n 's/^gem_decode_step_rows_total \([0-9]*\)$/\1/p')
[ -n "$steps" ] && [ "$steps" -gt 0 ] && [ "$rows" -gt "$steps" ] && ok || bad "no batched steps: $steps steps, $rows rows"
echo "$m" | grep -q '^gem_slots 3$' && ok || bad "/metrics gem_slots"
[ "$(curl -s "$U3/props" | jget total_slots)" = 3 ] && ok || bad "/props total_slots"
[ "$(curl -s "$U3/slots" | jget length)" = 3 ] && ok || bad "/slots lists 3 slots"
[ "$(curl -s "$U3/slots" | jget 2.id)" = 2 ] && ok || bad "/slots ids"

# prefix routing: a conversation comes back to its slot after two other
# prompts took the idle ones
start route --heartbeat 0 --parallel 3 || finish
U="http://127.0.0.1:$PORT"
long=""
for w in $(seq 60); do long="$long l$w"; done
n1=$(curl -s "$U/v1/completions" -d '{"prompt":"'"$long"'","max_tokens":4,"temperature":0}' | jget usage.prompt_tokens)
curl -s "$U/v1/completions" -d '{"prompt":"other one","max_tokens":4,"temperature":0}' >/dev/null
curl -s "$U/v1/completions" -d '{"prompt":"other two","max_tokens":4,"temperature":0}' >/dev/null
c=$(curl -s "$U/v1/completions" -d '{"prompt":"'"$long"' and more","max_tokens":4,"temperature":0}' |
    jget usage.prompt_tokens_details.cached_tokens)
[ -n "$n1" ] && [ "$c" -ge $((n1 - 1)) ] 2>/dev/null && ok || bad "the conversation's slot: $c of $n1 tokens cached"
busy=$(curl -s "$U/slots" | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).filter(x=>x.n_cached_tokens>0).length))')
[ "$busy" = 3 ] && ok || bad "three slots hold prompts ($busy)"

no_sanitizer_reports
finish
