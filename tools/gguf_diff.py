#!/usr/bin/env python3
"""Compares two GGUF files: metadata keys (order, type, value), tensor
infos (order, shape, type) and tensor bytes. Prints every difference found
(up to a limit) and exits 1 when there is one.

  gguf_diff.py A.gguf B.gguf [--ignore KEY ...] [--any-order] [--quiet]

--ignore drops keys from both sides; --any-order compares tensors by name
and keys as sets with per-key checks (for outputs whose order legitimately
differs)."""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_py import GGUF  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--ignore", nargs="*", default=[])
    ap.add_argument("--any-order", action="store_true")
    ap.add_argument("--quiet", action="store_true")
    o = ap.parse_args()
    A, B = GGUF(o.a), GGUF(o.b)
    diffs = []
    ka = [k for k in A.kv if k not in o.ignore]
    kb = [k for k in B.kv if k not in o.ignore]
    if not o.any_order and ka != kb:
        diffs.append(f"key order differs:\n  A: {ka}\n  B: {kb}")
    for k in sorted(set(ka) | set(kb)):
        if k not in A.kv or k not in B.kv:
            diffs.append(f"key {k}: only in {'A' if k in A.kv else 'B'}")
        elif A.kv[k] != B.kv[k]:
            ta, va, ea = A.kv[k]
            tb, vb, eb = B.kv[k]
            if (ta, ea) != (tb, eb):
                diffs.append(f"key {k}: type {ta}/{ea} vs {tb}/{eb}")
            elif isinstance(va, list) and len(va) == len(vb):
                i = next(i for i in range(len(va)) if va[i] != vb[i])
                diffs.append(f"key {k}: element {i}: {va[i]!r} vs {vb[i]!r}")
            else:
                sa, sb = repr(va), repr(vb)
                diffs.append(f"key {k}: {sa[:200]} vs {sb[:200]}")
    na = [t[0] for t in A.tensors]
    nb = [t[0] for t in B.tensors]
    if not o.any_order and na != nb:
        diffs.append(f"tensor order differs (first at {next((i for i in range(min(len(na), len(nb))) if na[i] != nb[i]), min(len(na), len(nb)))})")
    ia = {t[0]: t for t in A.tensors}
    ib = {t[0]: t for t in B.tensors}
    for n in na:
        if n not in ib:
            diffs.append(f"tensor {n}: only in A")
            continue
        if ia[n][1:3] != ib[n][1:3]:
            diffs.append(f"tensor {n}: shape/type {ia[n][1:3]} vs {ib[n][1:3]}")
        elif A.tensor_bytes(n) != B.tensor_bytes(n):
            diffs.append(f"tensor {n}: data differs")
    for n in nb:
        if n not in ia:
            diffs.append(f"tensor {n}: only in B")
    if A.alignment != B.alignment:
        diffs.append(f"alignment {A.alignment} vs {B.alignment}")
    for d in diffs[:40]:
        print(d)
    if not o.quiet:
        print(f"gguf_diff: {len(diffs)} difference(s)")
    sys.exit(1 if diffs else 0)


if __name__ == "__main__":
    main()
