#!/usr/bin/env python3
"""Lays out one decode step from a CUDA block trace (build/gem-trace with
GEM_CUDA_TRACE=FILE; the format is written by trace_write in
src/backend/cuda/cuda_backend.cu).

Every block of an annotated kernel left three times (start, release from its
grid dependency wait, end), its SM, block index, grid size and launch id. The
blocks of one launch are grouped; the last complete one-token step (from an
embedding launch of one block to the argmax or top-k that ends it) is printed
kernel by kernel: when it started (relative to the step), how long its blocks
waited for the kernel before it, how long it ran after that, and how much it
added past the end of the kernels before it (the critical path). Then the
time added per kernel kind over the step.

  python3 bench/cuda_trace.py FILE [--rows N] [--waves KIND[:BLOCKS] ...]

--waves prints, for the last launch of KIND (with BLOCKS blocks) in the step,
how many of its blocks were released, ended and active in each microsecond
after its release: how the waves of a product come and go.
"""
import argparse
import collections
import struct
import sys


def read_trace(path):
    with open(path, "rb") as f:
        data = f.read()
    end = data.find(b"\n\n")
    if not data.startswith(b"gem-cuda-trace 1\n") or end < 0:
        sys.exit("%s: not a gem CUDA block trace" % path)
    head = dict(line.split(" ", 1) for line in data[:end].decode().splitlines())
    kinds = head["kinds"].split(",")
    size = int(head["record_bytes"])
    if size != 48:
        sys.exit("%s: records of %d bytes, this reader knows 48" % (path, size))
    body = data[end + 2:]
    recs = []
    for (t0, t1, t2, grid, kind, block, blocks, sm) in struct.iter_unpack("<QQQQIIII", body[size:]):
        if t2:
            recs.append((t0, t1, t2, grid, kind, block, blocks, sm))
    return kinds, int(head["records"]), recs


def launches(kinds, recs):
    # A CUDA graph's replays run its kernels under the grid ids of the
    # first replay, so one id holds the blocks of many launches: the k-th
    # newest record of each block index belongs to the k-th newest launch
    # (launches of one graph node never overlap in time). Counting from the
    # newest keeps the launches the ring cut short at the oldest end. The
    # key also holds the kind and the grid size, so ids reused by other
    # launches (another graph, a later capture) never merge two kernels.
    by_launch = collections.defaultdict(list)
    seen = collections.Counter()
    for r in sorted(recs, key=lambda r: -r[0]):
        key = (r[3], r[4], r[6], r[5])
        k = seen[key]
        seen[key] += 1
        by_launch[(r[3], r[4], r[6], k)].append(r)
    out = []
    for rs in by_launch.values():
        blocks = rs[0][6]
        if len(rs) != blocks:  # partly overwritten in the ring
            continue
        start = min(r[0] for r in rs)
        rel = [r[1] for r in rs if r[1]]
        release = min(rel) if rel else start
        life = sorted(r[2] - max(r[0], r[1]) for r in rs)
        out.append(dict(kind=kinds[rs[0][4]] if rs[0][4] < len(kinds) else str(rs[0][4]), blocks=blocks, start=start,
                        release=release, end=max(r[2] for r in rs), life50=life[len(life) // 2], life_max=life[-1],
                        sms=len(set(r[7] for r in rs)), recs=rs))
    out.sort(key=lambda x: x["start"])
    return out


def last_step(ls):
    starts = [i for i, x in enumerate(ls) if x["kind"] == "embed" and x["blocks"] == 1]
    for a, b in zip(reversed(starts), [len(ls)] + list(reversed(starts))[:-1]):
        seg = ls[a:b]
        for j, x in enumerate(seg):
            if x["kind"] in ("argmax_final", "topk_final"):
                return seg[:j + 1]
    return None


def waves(x):
    base = x["release"]
    nb = int((x["end"] - base) / 1000) + 2
    rel, end, act = [0] * nb, [0] * nb, [0] * nb
    for r in x["recs"]:
        s = max(r[1], r[0], base)
        a, b = int((s - base) / 1000), int((r[2] - base) / 1000)
        rel[a] += 1
        end[b] += 1
        for t in range(a, b + 1):
            act[t] += 1
    fmt = lambda v: " ".join("%4d" % i for i in v)
    print("%s, %d blocks, %.2f us from release to end; blocks per microsecond after release:" %
          (x["kind"], x["blocks"], (x["end"] - base) / 1e3))
    print("  us       " + fmt(range(nb)))
    print("  released " + fmt(rel))
    print("  ended    " + fmt(end))
    print("  active   " + fmt(act))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--rows", type=int, default=40, help="kernels of the step to list (default 40)")
    ap.add_argument("--waves", action="append", default=[], metavar="KIND[:BLOCKS]")
    a = ap.parse_args()
    kinds, written, recs = read_trace(a.trace)
    ls = launches(kinds, recs)
    print("%d block records written, %d in the ring, %d complete launches" % (written, len(recs), len(ls)))
    step = last_step(ls)
    if not step:
        sys.exit("no complete one-token step in the trace (run a few decode steps: gem run -n 8)")
    base = step[0]["start"]
    print("last complete one-token step: %d launches, %.1f us from its first start to its last end" %
          (len(step), (max(x["end"] for x in step) - base) / 1e3))
    print("%-18s %6s %9s %8s %8s %8s %8s %8s" % ("kernel", "blocks", "start", "wait", "run", "added", "life50",
                                                  "lifemax"))
    done = base
    added = collections.defaultdict(float)
    count = collections.Counter()
    for i, x in enumerate(step):
        add = max(0, x["end"] - done)
        added[(x["kind"], x["blocks"])] += add / 1e3
        count[(x["kind"], x["blocks"])] += 1
        if i < a.rows:
            print("%-18s %6d %9.2f %8.2f %8.2f %8.2f %8.2f %8.2f" %
                  (x["kind"], x["blocks"], (x["start"] - base) / 1e3, (x["release"] - x["start"]) / 1e3,
                   (x["end"] - x["release"]) / 1e3, add / 1e3, x["life50"] / 1e3, x["life_max"] / 1e3))
        done = max(done, x["end"])
    print("time added past the kernels before, per kernel kind and grid (us per step):")
    for k, v in sorted(added.items(), key=lambda kv: -kv[1]):
        print("  %-18s %6d blocks %4d launches %9.1f" % (k[0], k[1], count[k], v))
    for w in a.waves:
        kind, _, blocks = w.partition(":")
        cand = [x for x in step if x["kind"] == kind and (not blocks or x["blocks"] == int(blocks))]
        if not cand:
            print("--waves %s: no such launch in the step" % w)
            continue
        waves(cand[-1])


if __name__ == "__main__":
    main()
