#!/bin/sh
# bench/cuda_trace.py on traces written here in the format of trace_write
# (src/backend/cuda/cuda_backend.cu; no GPU needed): three one-token steps
# of known kernels and times; the last complete step is laid out with its
# exact duration, per-kernel start / wait / run / added times, per-kind
# totals and a product's per-microsecond waves; a launch cut by the ring is
# left out, also when a graph's replays reuse their grid ids, when the cut
# falls inside a replayed step and when the replays run under ids other
# kernels had; a file that is not a trace and a trace without a complete
# step are refused with their reasons. Also: the kind names that trace
# files carry (CT_NAMES) match the CT_* enumeration, in order.
pass=0 fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "test_cuda_trace: FAIL: $*" >&2; }

python3 - "$tmp" src/backend/cuda/cuda_common.h <<'PY' && ok || bad "writing the traces or the kind names (see above)"
import re, struct, sys
tmp, header = sys.argv[1], open(sys.argv[2]).read()
enum = re.search(r"enum \{\s*(CT_EMBED.*?)CT_COUNT", header, re.S).group(1)
ids = [n.strip().split("=")[0].strip() for n in enum.split(",") if n.strip()]
names = "".join(re.findall(r'"([^"]*)"', re.search(r"#define CT_NAMES(.*?)\n\n", header, re.S).group(1))).split(",")
want = ["-"] + [i[3:].lower() for i in ids]
if names != want:
    sys.exit("CT_NAMES %s does not match the enumeration %s" % (names, want))
K = {k: i for i, k in enumerate(names)}
CAP = 1 << 21

def write(path, launches, cut=0, replay=0, shift=0):
    recs, t, gid = [], 1_000_000, 1
    for i, (kind, blocks, dur) in enumerate(launches):
        if replay and i > replay:  # a graph's replays: its launches' grid ids again
            gid = 2 + (i - 1 + shift) % replay  # shift: ids another kernel had before
        for b in range(blocks):  # thirds of the blocks end at dur/3, 2dur/3, dur after release
            recs.append((t, t + 500, t + 500 + dur * (1 + b % 3) // 3, gid, K[kind], b, blocks, b % 132))
        t, gid = t + 500 + dur, gid + 1
    recs = recs[cut:]
    head = "gem-cuda-trace 1\nkinds %s\nrecords %d\ncapacity %d\nrecord_bytes 48\n\n" % (",".join(names), len(recs), CAP)
    body = bytearray(48 * CAP)
    struct.pack_into("<I", body, 0, len(recs))
    for i, r in enumerate(recs):
        struct.pack_into("<QQQQIIII", body, 48 * (i + 1), *r)
    open(path, "wb").write(head.encode() + bytes(body))

step = [("embed", 1, 3000), ("rmsnorm4", 1, 3000), ("mv_q", 2048, 15000), ("attn_tc", 512, 3000),
        ("mv_q", 5376, 30000), ("argmax_part", 64, 3000), ("argmax_final", 1, 3000)]
# the first launch's first blocks overwritten in the ring
write(tmp + "/t.bin", [("mv_q", 5376, 30000)] + step * 3, cut=10)
# the same, the steps after the first replayed from a graph
write(tmp + "/replay.bin", [("mv_q", 5376, 30000)] + step * 3, cut=10, replay=len(step))
# replayed, the ring cut inside the second step (a replay): its embed, norm
# and the first 100 blocks of its 2048-block product are gone
first = 5376 + sum(b for _, b, _ in step)
write(tmp + "/replaycut.bin", [("mv_q", 5376, 30000)] + step * 3, cut=first + 2 + 100, replay=len(step))
# replayed under ids the first step gave other kernels (another kind, another
# grid size: the 512-block attention under the 2048-block product's id)
write(tmp + "/reuse.bin", [("mv_q", 5376, 30000)] + step * 3, cut=10, replay=len(step), shift=1)
write(tmp + "/nostep.bin", [("mv_q", 2048, 15000)] * 3)
open(tmp + "/other.bin", "wb").write(b"GGUF\x03\x00\x00\x00")
PY

for t in t replay replaycut reuse; do
    python3 bench/cuda_trace.py "$tmp/$t.bin" --waves mv_q:2048 >"$tmp/out" 2>&1 && ok || bad "cuda_trace.py $t exited $?: $(cat "$tmp/out")"
    expect() { grep -qF -- "$1" "$tmp/out" && ok || bad "$t: missing: $1"; }
    # 3 steps of 7 launches complete; the cut launch is not (replaycut: the
    # second step's last 4 and the third step)
    if [ $t = replaycut ]; then expect "11 complete launches"; else expect "21 complete launches"; fi
    # a launch of d us: released 0.5 us after its start, the next starts at
    # 0.5 + d; a one-block launch ends d / 3 after release (its block 0): the
    # step's last launch starts at 60 us and ends at 61.5
    expect "last complete one-token step: 7 launches, 61.5 us"
    # starts at 7 (after 3.5 + 3.5); the launch before ended at 5 (3.5 + 0.5 + 1)
    expect "mv_q                 2048      7.00     0.50    15.00    17.50    10.00    15.00"
    expect "mv_q                 5376     26.00     0.50    30.00    30.50    20.00    30.00"
    expect "  mv_q                 5376 blocks    1 launches      30.5"
    expect "mv_q, 2048 blocks, 15.00 us from release to end"
    expect "  ended       0    0    0    0    0  683    0    0    0    0  683    0    0    0    0  682    0"
done

python3 bench/cuda_trace.py "$tmp/nostep.bin" >"$tmp/out" 2>&1
[ $? != 0 ] && grep -q "no complete one-token step" "$tmp/out" && ok || bad "a trace without a step: $(cat "$tmp/out")"
python3 bench/cuda_trace.py "$tmp/other.bin" >"$tmp/out" 2>&1
[ $? != 0 ] && grep -q "not a gem CUDA block trace" "$tmp/out" && ok || bad "a GGUF file: $(cat "$tmp/out")"

echo "test_cuda_trace: $pass passed, $fail failed"
[ "$fail" = 0 ]
