#!/bin/sh
# Where a one-token kernel's time goes inside it: Nsight Compute on the
# first COUNT launches of the kernels matching REGEX in a decode run
# (default: the first six one-token products, k_mv_q, among them the first
# layer's q/k/v (grid 2048 for the 31B), o (1344), gate/up (5376) and down
# (2688), told apart by launch__grid_size; with -k k_attn_tc -p 32768 -c 60
# the first decode step's attention of every layer after a 32768-token
# prompt, the full layers' among them by their grid); with the defaults and
# with each VAR=VALUE set given; serialized (no launch overlap: the
# kernel's own ramp, steady state and tail). Reports duration, DRAM
# throughput, achieved occupancy, issue activity, the warp stall reasons and
# L1 traffic, the numbers that say whether a block's life is latency, issue
# or L1 bound. Needs ncu with hardware counters (Firecracker machines: the
# device library's KINDS.md) and the clocks left alone (--clock-control
# none). Synthetic gemma4-31b Q4_0 with a Q8_0 embedding unless a model is
# given.
#   bench/cuda_ncu_mv.sh [-k REGEX] [-p PROMPT] [-c COUNT] [VAR=VALUE[,VAR=VALUE...] ...] [-- model.gguf]
#   e.g. bench/cuda_ncu_mv.sh GEM_CUDA_MV_STAGGER=0 GEM_CUDA_MV_SPLIT=0,GEM_CUDA_MV_STAGGER=0
#        bench/cuda_ncu_mv.sh -k k_attn_tc -p 32768 -c 60 GEM_CUDA_ATTN_DEC=2
# Output: per set, a CSV header and rows of the profiled kernels: ID, kernel
# name and the metrics.
set -u
cd "$(dirname "$0")/.."
sets="X=1"
M=""
kern=k_mv_q
prompt=16
count=6
while [ $# -gt 0 ]; do
    case "$1" in
    --) M=${2:-}; break ;;
    -k) kern=${2:?}; shift ;;
    -p) prompt=${2:?}; shift ;;
    -c) count=${2:?}; shift ;;
    *=*) sets="$sets $1" ;;
    *) echo "cuda_ncu_mv.sh: expected -k REGEX, -p PROMPT, -c COUNT, VAR=VALUE[,VAR=VALUE...] or -- MODEL, got '$1'" >&2; exit 2 ;;
    esac
    shift
done
[ -n "$M" ] || M=${TMPDIR:-/tmp}/gem-variants-31b.gguf
command -v ncu >/dev/null || { echo "cuda_ncu_mv.sh: ncu is not on the PATH" >&2; exit 1; }
make -s CUDA=1 gem >/dev/null || exit 1
[ -f "$M" ] || ./gem synth --profile gemma4-31b --type q4_0 --embd-type q8_0 --seed 1 -o "$M" >/dev/null || exit 1
metrics=launch__grid_size,gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum
metrics=$metrics,sm__warps_active.avg.pct_of_peak_sustained_active,sm__inst_executed.sum
metrics=$metrics,smsp__issue_active.avg.pct_of_peak_sustained_active
metrics=$metrics,smsp__average_warp_latency_issue_stalled_long_scoreboard.ratio
metrics=$metrics,smsp__average_warp_latency_issue_stalled_lg_throttle.ratio
metrics=$metrics,smsp__average_warp_latency_issue_stalled_barrier.ratio
metrics=$metrics,smsp__average_warp_latency_issue_stalled_wait.ratio
metrics=$metrics,smsp__average_warp_latency_issue_stalled_math_pipe_throttle.ratio
metrics=$metrics,l1tex__t_bytes.sum,l1tex__t_sector_hit_rate.pct,lts__t_bytes.sum,lts__t_sector_hit_rate.pct
# ncu's raw page also lists ~400 device attributes per row: keep the
# kernel's name and the metrics asked for (a cut at a fixed width lost
# them with nvcc 13's ncu); the units row (its first field empty) stays,
# and metrics in base units (--print-units base) so no column rescales
pick='
import csv, sys
want = ["ID", "Kernel Name"] + sys.argv[1].split(",")
rows = list(csv.reader(sys.stdin))
if not rows or rows[0][:1] != ["ID"]:
    sys.exit("cuda_ncu_mv.sh: no ncu CSV rows (no kernel matched, or ncu failed)")
missing = [k for k in want if k not in rows[0]]
if missing:
    print("cuda_ncu_mv.sh: not in ncu output: " + ", ".join(missing), file=sys.stderr)
idx = [rows[0].index(k) for k in want if k in rows[0]]
w = csv.writer(sys.stdout, lineterminator="\n")
for r in rows:
    w.writerow([r[i] if i < len(r) else "" for i in idx])
'
for s in $sets; do
    echo "== $s"
    # the prompt runs on the prefill kernels (f16 caches, as gem bench
    # --kv-type f16), then the first steps' one-token kernels
    env $(echo "$s" | tr ',' ' ') ncu --clock-control none --kernel-name "regex:$kern" --launch-count "$count" \
        --metrics "$metrics" --csv --page raw --print-units base \
        ./gem run -m "$M" --backend cuda --kv-type f16 --ctx $((prompt + 64)) --prompt-ids "2..$((prompt + 1))" -n 2 \
        --temp 0 --ids --ignore-eos 2>&1 | grep -E '^"(ID|[0-9]|",)' | python3 -c "$pick" "$metrics"
done
