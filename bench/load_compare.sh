#!/bin/sh
# gem serve --parallel N against llama-server -np N on the same GGUF, one
# after the other in one run, each measured by bench/load.py with the same
# clients (so the ratio is side by side). Writes $OUT/load-gem.json,
# $OUT/load-llama.json and the servers' logs.
#   MODEL=file.gguf LLAMA_SERVER=path [N=4] [CLIENTS=1,4,16] [TURNS=3]
#   [WORDS=120] [MAXTOK=64] [CTX=4096 per slot] [THINKING=on|off] [GEM_ARGS=...] [LLAMA_ARGS=...]
#   [OUT=dir] bench/load_compare.sh
# Without LLAMA_SERVER only gem runs. GEM_ARGS / LLAMA_ARGS add backend
# flags (e.g. "--backend cuda --kv-type f16" and "-ngl 99 -fa on").
# llama-server's -c is the slots' total (CTX x N), gem's --ctx per slot.
set -eu
cd "$(dirname "$0")/.."
: "${MODEL:?MODEL=file.gguf}"
N=${N:-4}
CLIENTS=${CLIENTS:-1,4,16}
TURNS=${TURNS:-3}
WORDS=${WORDS:-120}
MAXTOK=${MAXTOK:-64}
CTX=${CTX:-4096}
OUT=${OUT:-bench/results/raw}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
pids=""
trap 'for p in $pids; do kill $p 2>/dev/null; done' EXIT

wait_health() { # url
    i=0
    while [ $i -lt 600 ]; do
        $PY -c "import sys, urllib.request as u; sys.exit(b'\"ok\"' not in u.urlopen(sys.argv[1], timeout=2).read())" \
            "$1/health" 2>/dev/null && return 0
        sleep 0.5
        i=$((i + 1))
    done
    echo "load_compare.sh: $1 did not come up" >&2
    return 1
}

load() { # label url
    $PY bench/load.py --url "$2" --clients "$CLIENTS" --turns "$TURNS" --words "$WORDS" --max-tokens "$MAXTOK" \
        --ignore-eos ${THINKING:+--thinking $THINKING} --label "$1" --json "$OUT/load-$1.json"
}

# shellcheck disable=SC2086 # the ARGS are word lists
./gem serve -m "$MODEL" --ctx "$CTX" --parallel "$N" --port 18411 ${GEM_ARGS:-} 2>"$OUT/gem-serve.log" &
pids="$!"
wait_health http://127.0.0.1:18411
load gem http://127.0.0.1:18411
kill $pids
wait 2>/dev/null || true
pids=""
if [ -n "${LLAMA_SERVER:-}" ]; then
    LD_LIBRARY_PATH="$(dirname "$LLAMA_SERVER"):${LD_LIBRARY_PATH:-}" "$LLAMA_SERVER" -m "$MODEL" -c $((CTX * N)) \
        -np "$N" --port 18412 ${LLAMA_ARGS:-} 2>"$OUT/llama-serve.log" >/dev/null &
    pids="$!"
    wait_health http://127.0.0.1:18412
    load llama http://127.0.0.1:18412
fi
