#!/bin/sh
# `gem run --top-logprobs` and `--force-ids` (what bench/logits.py reads) on
# a synthetic gemma4-tiny model: every step's top-20 is sorted (ties by
# id), finite and <= 0, its log-sum-exp <= 0; in greedy decoding the chosen
# id is the argmax and the first entry, and the ids are those of --ids;
# forcing the greedy ids repeats the same lines; forcing other ids takes
# them, with logprobs consistent with the top lists; the scalar reference
# path agrees. No reference needed.
GEM=${GEM:-./gem}
pass=0 fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "test_logits: FAIL: $*" >&2; }

$GEM synth --profile gemma4-tiny --type f32 --seed 3 -o "$tmp/m.gguf" 2>/dev/null || bad "synth"
P=$(printf 'In the beginning God created the heaven and the earth.' | $GEM tokenize -m data/vocab/gemma-4.gguf)
run() { $GEM run -m "$tmp/m.gguf" --prompt-ids "$P" -n 24 --temp 0 --ignore-eos "$@" 2>"$tmp/err"; }

run --top-logprobs 20 >"$tmp/lp" && ok || { bad "--top-logprobs exited $?"; cat "$tmp/err" >&2; }
run --ids >"$tmp/ids" && ok || bad "--ids exited $?"
run --top-logprobs 20 --force-ids "$(cat "$tmp/ids")" >"$tmp/forced" && ok || bad "--force-ids (greedy ids) exited $?"
# other ids: the greedy ids reversed
other=$(tr ' ' '\n' <"$tmp/ids" | sed '1!G;h;$!d' | tr '\n' ' ')
run --top-logprobs 20 --force-ids "$other" >"$tmp/other" && ok || bad "--force-ids (other ids) exited $?"
run --top-logprobs 20 --cpu-ref -n 6 >"$tmp/ref" && ok || bad "--cpu-ref exited $?"

python3 - "$tmp" "$P" <<'PY' && ok || bad "see above"
import json, math, sys
tmp, prompt = sys.argv[1], sys.argv[2].split()
fails = []
def check(cond, msg):
    if not cond:
        fails.append(msg)
def load(name):
    return [json.loads(l) for l in open(f"{tmp}/{name}")]
lp, forced, other, ref = load("lp"), load("forced"), load("other"), load("ref")
ids = [int(x) for x in open(f"{tmp}/ids").read().split()]
check(len(lp) == 24 and len(ids) == 24, f"{len(lp)} lines, {len(ids)} ids, expected 24")
for i, r in enumerate(lp):
    t, v = r["top_ids"], r["top_logprobs"]
    check(r["step"] == i and r["pos"] == len(prompt) + i, f"step {i}: step/pos {r['step']}/{r['pos']}")
    check(len(t) == 20 and len(v) == 20 and len(set(t)) == 20, f"step {i}: top list of {len(t)}/{len(v)}")
    check(all(math.isfinite(x) and x <= 0 for x in v), f"step {i}: a logprob not finite or > 0")
    check(all(v[k] > v[k + 1] or (v[k] == v[k + 1] and t[k] < t[k + 1]) for k in range(19)), f"step {i}: not sorted")
    m = max(v)
    check(m + math.log(sum(math.exp(x - m) for x in v)) <= 1e-6, f"step {i}: logsumexp of the top-20 > 0")
    check(r["id"] == r["argmax"] == t[0] and r["logprob"] == v[0] and not r["forced"], f"step {i}: greedy id is not the argmax")
check([r["id"] for r in lp] == ids, "greedy ids differ from --ids")
check([dict(r, forced=False) for r in forced] == lp and all(r["forced"] for r in forced),
      "forcing the greedy ids changed the lines")
want = ids[::-1]
check([r["id"] for r in other] == want and all(r["forced"] for r in other), "forced ids not taken")
check(other[0] == dict(lp[0], id=want[0], forced=True, logprob=other[0]["logprob"]), "step 0 depends on the forced ids")
for i, r in enumerate(other):
    d = dict(zip(r["top_ids"], r["top_logprobs"]))
    if r["id"] in d:
        check(abs(d[r["id"]] - r["logprob"]) < 1e-9, f"forced step {i}: chosen logprob differs from its top entry")
    else:
        check(r["logprob"] <= r["top_logprobs"][-1], f"forced step {i}: chosen id outside the top-20 but more likely")
for i, r in enumerate(ref):
    check(r["top_ids"][:5] == lp[i]["top_ids"][:5], f"cpu-ref step {i}: top-5 ids differ")
    check(max(abs(a - b) for a, b in zip(r["top_logprobs"], lp[i]["top_logprobs"])) < 1e-4, f"cpu-ref step {i}: logprobs differ")
for f in fails[:10]:
    print("test_logits: FAIL:", f, file=sys.stderr)
sys.exit(1 if fails else 0)
PY

# bad values
$GEM run -m "$tmp/m.gguf" --prompt-ids "$P" --top-logprobs 0 >/dev/null 2>&1; [ $? = 2 ] && ok || bad "--top-logprobs 0 accepted"
$GEM run -m "$tmp/m.gguf" --prompt-ids "$P" --force-ids "x" >/dev/null 2>&1; [ $? = 1 ] && ok || bad "--force-ids x accepted"
$GEM run -m "$tmp/m.gguf" --prompt-ids "$P" --force-ids "999999999" >/dev/null 2>&1; [ $? = 1 ] && ok || bad "--force-ids outside the vocabulary accepted"

echo "test_logits: $pass passed, $fail failed"
[ "$fail" = 0 ]
