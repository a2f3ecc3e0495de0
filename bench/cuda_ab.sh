#!/bin/sh
# Kernel choices against the defaults on one GPU machine, in one run:
# gem bench decode (f16 KV caches, depths 0, 8192 and 32768, 2 reps each)
# with the defaults, then each setting in the order given, then each again
# in reverse order, then the defaults again (drift weighs on all alike).
# A setting is one argument of VAR=VALUE pairs separated by spaces.
# Synthetic gemma4-31b Q4_0 with a Q8_0 embedding unless -m names a model.
# Run build/tests/cuda/cuda_ops first: a variant is measured once it is
# correct.
#   bench/cuda_ab.sh [-m model.gguf] [-d DEPTHS] SETTING [SETTING ...]
#   e.g. bench/cuda_ab.sh GEM_CUDA_MV_STAGGER=0 "GEM_CUDA_NORM_WIDE=0 GEM_CUDA_ATTN_FUSE=0"
# Output: one line per bench run (gem bench's decode lines).
set -u
cd "$(dirname "$0")/.." || exit 2
M=""
depths=0,8192,32768
while [ $# -gt 0 ]; do
    case "$1" in
    -m) M=${2:-}; shift 2 ;;
    -d) depths=${2:-}; shift 2 ;;
    *) break ;;
    esac
done
[ $# -gt 0 ] || { echo "usage: bench/cuda_ab.sh [-m model.gguf] [-d DEPTHS] SETTING [SETTING ...]" >&2; exit 2; }
for s in "$@"; do
    for v in $s; do
        case "$v" in
        *=*) ;;
        *) echo "cuda_ab.sh: a setting is VAR=VALUE pairs, got '$v' in '$s'" >&2; exit 2 ;;
        esac
    done
done
[ -n "$M" ] || M=${TMPDIR:-/tmp}/gem-variants-31b.gguf
make -s CUDA=1 gem >/dev/null || exit 1
[ -f "$M" ] || ./gem synth --profile gemma4-31b --type q4_0 --embd-type q8_0 --seed 1 -o "$M" >/dev/null || exit 1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.limit,driver_version --format=csv,noheader 2>/dev/null
decode() {
    # shellcheck disable=SC2086 # a setting is split into its pairs on purpose
    env $1 ./gem bench -m "$M" --backend cuda --kv-type f16 --prompt 16 --gen 32 --depth "$depths" --reps 2 2>&1 |
        grep 'decode at' | sed 's/ (median.*//' | tr '\n' ' '
}
echo "defaults: $(decode X=1)"
for s in "$@"; do echo "$s: $(decode "$s")"; done
i=$#
while [ "$i" -gt 0 ]; do
    eval "s=\${$i}"
    echo "$s: $(decode "$s")"
    i=$((i - 1))
done
echo "defaults: $(decode X=1)"
