#!/bin/sh
# Served speed against engine speed on one GGUF: gem bench's prefill of
# PROMPT tokens and its decode at depth PROMPT, then gem serve and (when
# LLAMA_SERVER names one) the pinned reference's llama-server, each measured
# by the same client (bench/serve_speed.mjs: streamed /v1/completions, token
# prompts, greedy, end tokens ignored, no prompt cache), one at a time on
# the same machine. Writes OUT/serve-speed.json: the three measurements, the
# served/bench ratios (time to first token and decode rate), the model's
# sha256, the commit and the hardware.
#   bench/serve_speed.sh MODEL cpu|cuda [PROMPT [GEN [REPS]]]
#   env: LLAMA_SERVER (path), OUT (default bench/results/raw), THREADS (CPU:
#        the same -t for every engine; default all cores)
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
pid=
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; rm -rf "$tmp"' EXIT
tflag=${threads:+-t $threads}

# gem bench: the same lengths through the engine alone
./gem bench -m "$model" --backend "$backend" $kv $tflag --prompt "$prompt" --depth "$prompt" --gen "$gen" \
    --reps "$reps" --json "$tmp/bench.json" >&2

# wait_up URL LOG: until /health answers 200 (a load can take a minute)
wait_up() {
    i=0
    while [ $i -lt 600 ]; do
        [ "$(curl -s -o /dev/null -w '%{http_code}' "$1/health" 2>/dev/null)" = 200 ] && return 0
        kill -0 $pid 2>/dev/null || { cat "$2" >&2; return 1; }
        sleep 0.5
        i=$((i + 1))
    done
    cat "$2" >&2
    return 1
}
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

port=$(free_port)
./gem serve -m "$model" --backend "$backend" $kv $tflag --ctx "$ctx" --port "$port" >"$tmp/gem.log" 2>&1 &
pid=$!
wait_up "http://127.0.0.1:$port" "$tmp/gem.log"
node bench/serve_speed.mjs "http://127.0.0.1:$port" "$prompt" "$gen" "$reps" gem >"$tmp/serve-gem.json"
kill $pid
wait $pid 2>/dev/null || true
pid=

if [ -n "${LLAMA_SERVER:-}" ]; then
    port=$(free_port)
    case "$backend" in
    cuda) lflags="-ngl 99 -fa on" ;;
    cpu) lflags="-ngl 0 -t $threads" ;;
    esac
    "$LLAMA_SERVER" -m "$model" -c "$ctx" --port "$port" -np 1 $lflags >"$tmp/llama.log" 2>&1 &
    pid=$!
    wait_up "http://127.0.0.1:$port" "$tmp/llama.log"
    node bench/serve_speed.mjs "http://127.0.0.1:$port" "$prompt" "$gen" "$reps" llama-server >"$tmp/serve-llama.json"
    kill $pid
    wait $pid 2>/dev/null || true
    pid=
else
    echo "serve_speed.sh: no LLAMA_SERVER: gem alone" >&2
fi

commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
sha=$(sha256sum "$model" | cut -d' ' -f1)
if [ "$backend" = cuda ]; then
    hw=$(nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.limit,driver_version --format=csv,noheader | head -1)
else
    hw="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, $threads threads"
fi
node -e '
const fs = require("fs");
const [dir, model, sha, commit, hw, backend, kv] = process.argv.slice(1);
const rd = (f) => fs.existsSync(`${dir}/${f}`) ? JSON.parse(fs.readFileSync(`${dir}/${f}`, "utf8")) : null;
const bench = rd("bench.json"), gem = rd("serve-gem.json"), llama = rd("serve-llama.json");
const ttft = bench.prefill[0].ttft_s, dec = bench.decode[0].tok_s;
const r = {
  what: "served speed (streamed /v1/completions, client-side) against gem bench on the same file",
  commit, model, model_sha256: sha, hardware: hw, backend, kv_type: kv || "f32",
  date: new Date().toISOString(),
  gem_bench: { prompt_tokens: bench.prefill[0].tokens, ttft_s: ttft, prefill_tok_s: bench.prefill[0].tok_s,
               decode_depth: bench.decode[0].depth, decode_tok_s: dec },
  gem_serve: gem,
  ratios: { ttft_served_over_bench: gem.ttft_s / ttft, decode_served_over_bench: gem.decode_tok_s / dec },
  llama_server: llama,
};
if (llama) r.ratios.gem_over_llama_server = { ttft: llama.ttft_s / gem.ttft_s, decode: gem.decode_tok_s / llama.decode_tok_s };
console.log(JSON.stringify(r, null, 1));
' "$tmp" "$model" "$sha" "$commit" "$hw" "$backend" "${kv#--kv-type }" >"$out/serve-speed.json"
cat "$out/serve-speed.json"
