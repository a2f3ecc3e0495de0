#!/usr/bin/env python3
"""Writes the float rows the row-quantizer tests use (tests/data/quant/rows.f32):
rows of 256 little-endian f32 values with the patterns that exercise every
branch of the q8_0/q4_0/q4_k/q6_k searches -- all zero, constant, one large
outlier, subnormal and tiny blocks, exact rounding ties, one-signed rows,
mixed magnitudes per sub-block -- plus pseudo-random rows. Deterministic
(fixed seed); the reference quantizes the same file in tools/quant_golden.sh."""
import math, random, struct, sys

N = 256
rng = random.Random(20261202)
rows = []
rows.append([0.0] * N)                                      # all zero
rows.append([0.5] * N)                                      # constant positive
rows.append([-3.25] * N)                                    # constant negative
r = [0.0] * N; r[77] = 1000.0; rows.append(r)               # one outlier in zeros
r = [rng.gauss(0, 0.02) for _ in range(N)]; r[5] = -40.0; r[200] = 55.0; rows.append(r)  # outliers in noise
rows.append([1e-20 * (i % 7 - 3) for i in range(N)])        # tiny (below the q6_k/q4_k eps)
rows.append([1e-40 * (i % 5 - 2) for i in range(N)])        # subnormal
rows.append([(i % 16 - 8) / 8.0 for i in range(N)])         # exact q4_0 grid
rows.append([(k + 0.5) / 127.0 for k in range(-128, 128)])  # q8_0 ties
rows.append([abs(rng.gauss(0, 1)) for _ in range(N)])       # positive only
rows.append([-abs(rng.gauss(0, 1)) for _ in range(N)])      # negative only
rows.append([rng.gauss(0, 10 ** (i // 32 - 4)) for i in range(N)])   # magnitude per 32-block
rows.append([rng.gauss(0, 10 ** (i // 16 % 6 - 3)) for i in range(N)])  # magnitude per 16-block
r = [rng.gauss(0, 1) for _ in range(N)]
for i in range(N):
    if i % 3: r[i] = 0.0
rows.append(r)                                              # sparse
rows.append([float(i % 4) for i in range(N)])               # few levels
rows.append([math.sin(i * 0.1) * 3 + 1 for i in range(N)])  # smooth with an offset
rows.append([60000.0 * ((i * 37) % 19 - 9) / 9 for i in range(N)])  # near the f16 range
r = [0.0] * N
for b in range(8): r[b * 32 + b] = 2.0 ** (b - 4)         # one value per sub-block
rows.append(r)
for _ in range(14):
    s = 10 ** rng.uniform(-3, 1)
    kind = rng.randrange(3)
    if kind == 0: rows.append([rng.gauss(0, s) for _ in range(N)])
    elif kind == 1: rows.append([rng.uniform(-s, s) for _ in range(N)])
    else: rows.append([rng.gauss(s, s) for _ in range(N)])
assert len(rows) == 32
with open(sys.argv[1], "wb") as f:
    for r in rows:
        f.write(struct.pack("<%df" % N, *r))
