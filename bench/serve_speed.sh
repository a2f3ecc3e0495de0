#!/bin/sh
# Served speed against engine speed on one GGUF: gem bench's prefill of
# PROMPT tokens and its decode at depth PROMPT, gem serve and (when
# LLAMA_SERVER names one) the pinned reference's llama-server, the servers
# measured by the same client (bench/serve_speed.py: streamed
# /v1/completions, token prompts, greedy, end tokens ignored, no prompt
# cache). Both servers stay up; ROUNDS rounds each run gem bench, then the
# client against gem serve, then against llama-server, one at a time, so a
# machine's slow spell falls on all three; medians over every round.
# Writes OUT/serve-speed.json: the measurements, the served/bench ratios
# (time to first token and decode rate), the model's sha256, the commit
# and the hardware.
#   bench/serve_speed.sh MODEL cpu|cuda [PROMPT [GEN [REPS]]]
#   env: LLAMA_SERVER (path), OUT (default bench/results/raw), ROUNDS
#        (default 3), THREADS (CPU: the same -t for every engine; default
#        all cores)
# CUDA runs use f16 K/V caches for every engine (gem --kv-type f16,
# llama-server's default) and llama-server -ngl 99 -fa on.
set -eu
[ $# -ge 2 ] || { echo "usage: bench/serve_speed.sh MODEL cpu|cuda [PROMPT [GEN [REPS]]]" >&2; exit 2; }
case "${OUT:-}" in /* | '') ;; *) OUT="$(pwd)/$OUT" ;; esac
case "$1" in /*) model=$1 ;; *) model="$(pwd)/$1" ;; esac
backend=$2 prompt=${3:-6000} gen=${4:-128} reps=${5:-5}
cd "$(dirname "$0")/.."
case "$backend" in
cpu) kv="" threads=${THREADS:-$(nproc)} ;;
cuda) kv="--kv-type f16" threads=${THREADS:-} ;;
*) echo "serve_speed.sh: backend '$backend': cpu or cuda" >&2; exit 2 ;;
esac
[ -r "$model" ] || { echo "serve_speed.sh: cannot read $model" >&2; exit 2; }
out=${OUT:-bench/results/raw}
mkdir -p "$out"
ctx=$((prompt + gen + 64))
tmp=$(mktemp -d)
tflag=${threads:+-t $threads}
rounds=${ROUNDS:-3}
pids=
trap 'for p in $pids; do kill $p 2>/dev/null; done; rm -rf "$tmp"' EXIT

# wait_up URL PID LOG: until /health answers 200 (a load can take a minute)
wait_up() {
    i=0
    while [ $i -lt 600 ]; do
        [ "$(curl -s -o /dev/null -w '%{http_code}' "$1/health" 2>/dev/null)" = 200 ] && return 0
        kill -0 "$2" 2>/dev/null || { cat "$3" >&2; return 1; }
        sleep 0.5
        i=$((i + 1))
    done
    cat "$3" >&2
    return 1
}
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

gport=$(free_port)
./gem serve -m "$model" --backend "$backend" $kv $tflag --ctx "$ctx" --port "$gport" >"$tmp/gem.log" 2>&1 &
gpid=$!
pids="$gpid"
wait_up "http://127.0.0.1:$gport" $gpid "$tmp/gem.log"
if [ -n "${LLAMA_SERVER:-}" ]; then
    lport=$(free_port)
    case "$backend" in
    cuda) lflags="-ngl 99 -fa on" ;;
    cpu) lflags="-ngl 0 -t $threads" ;;
    esac
    "$LLAMA_SERVER" -m "$model" -c "$ctx" --port "$lport" -np 1 $lflags >"$tmp/llama.log" 2>&1 &
    lpid=$!
    pids="$pids $lpid"
    wait_up "http://127.0.0.1:$lport" $lpid "$tmp/llama.log"
else
    echo "serve_speed.sh: no LLAMA_SERVER: gem alone" >&2
fi
r=1
while [ $r -le "$rounds" ]; do
    ./gem bench -m "$model" --backend "$backend" $kv $tflag --prompt "$prompt" --depth "$prompt" --gen "$gen" \
        --reps "$reps" --json "$tmp/bench-$r.json" >&2
    python3 bench/serve_speed.py client "http://127.0.0.1:$gport" "$prompt" "$gen" "$reps" gem >"$tmp/serve-gem-$r.json"
    [ -n "${LLAMA_SERVER:-}" ] &&
        python3 bench/serve_speed.py client "http://127.0.0.1:$lport" "$prompt" "$gen" "$reps" llama-server >"$tmp/serve-llama-$r.json"
    r=$((r + 1))
done

commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
sha=$(sha256sum "$model" | cut -d' ' -f1)
if [ "$backend" = cuda ]; then
    hw=$(nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.limit,driver_version --format=csv,noheader | head -1)
else
    hw="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, $threads threads"
fi
python3 bench/serve_speed.py summary "$tmp" "$model" "$sha" "$commit" "$hw" "$backend" "${kv#--kv-type }" "$rounds" >"$out/serve-speed.json"
cat "$out/serve-speed.json"
