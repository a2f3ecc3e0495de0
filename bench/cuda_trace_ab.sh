#!/bin/sh
# A kernel choice against the defaults on one GPU machine, in one run: a
# block trace of a decode step with each (build/gem-trace, laid out by
# bench/cuda_trace.py: the step's length, the time each kernel kind adds,
# the gate/up product's waves), then gem bench decode A/B/B/A at depth 0,
# 8192 and 32768 with f16 KV caches. Synthetic gemma4-31b Q4_0 with a Q8_0
# embedding unless a model is given. Run build/tests/cuda/cuda_ops first: a
# variant is measured once it is correct.
#   bench/cuda_trace_ab.sh VAR=VALUE [VAR=VALUE ...] [-- model.gguf]
#   e.g. bench/cuda_trace_ab.sh GEM_CUDA_NORM_WIDE=0
# Output: the traces' summaries, then one line per bench run.
set -u
cd "$(dirname "$0")/.."
vars=""
M=""
while [ $# -gt 0 ]; do
    case "$1" in
    --) M=${2:-}; break ;;
    *=*) vars="$vars $1" ;;
    *) echo "cuda_trace_ab.sh: expected VAR=VALUE or -- MODEL, got '$1'" >&2; exit 2 ;;
    esac
    shift
done
[ -n "$vars" ] || { echo "usage: bench/cuda_trace_ab.sh VAR=VALUE [...] [-- model.gguf]" >&2; exit 2; }
[ -n "$M" ] || M=${TMPDIR:-/tmp}/gem-variants-31b.gguf
make -s CUDA=1 gem build/gem-trace >/dev/null || exit 1
[ -f "$M" ] || ./gem synth --profile gemma4-31b --type q4_0 --embd-type q8_0 --seed 1 -o "$M" >/dev/null || exit 1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.limit,driver_version --format=csv,noheader 2>/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for side in default variant; do
    set -- X=1
    [ "$side" = variant ] && set -- $vars
    env "$@" GEM_CUDA_TRACE="$tmp/$side.trace" build/gem-trace run -m "$M" --backend cuda --kv-type f16 \
        --prompt-ids 2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17 -n 8 --temp 0 --ids --ignore-eos >/dev/null 2>&1
    echo "== trace, $side ($*)"
    python3 bench/cuda_trace.py "$tmp/$side.trace" --rows 0 --waves mv_q:5376 || exit 1
done
decode() {
    env "$@" ./gem bench -m "$M" --backend cuda --kv-type f16 --prompt 16 --gen 32 --depth 0,8192,32768 --reps 2 2>&1 |
        grep 'decode at' | sed 's/ (median.*//' | tr '\n' ' '
}
for side in default variant variant default; do
    if [ "$side" = variant ]; then echo "$vars: $(decode $vars)"; else echo "defaults: $(decode X=1)"; fi
done
