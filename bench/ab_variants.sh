#!/bin/sh
# A/B of decode speed between the tree and an older source tree in .prev
# (an ignored folder the caller fills, e.g. git archive REV src Makefile
# data/vocab | tar -x -C .prev), on one GPU machine in one run, in
# A/B/B/A order: gem bench on a synthetic 31B Q4_0, depth 0.
set -u
cd "$(dirname "$0")/.."
(cd .prev && make -j8 CUDA=1 gem >/dev/null 2>&1 && echo A built) &
make -j8 CUDA=1 gem >/dev/null 2>&1 && echo B built
wait
./gem synth --profile gemma4-31b --type q4_0 --embd-type q8_0 -o /tmp/31b.gguf >/dev/null
for v in A B B A; do
    if [ $v = A ]; then g=.prev/gem; else g=./gem; fi
    echo "$v $($g bench -m /tmp/31b.gguf --backend cuda --prompt 64 --gen 64 --depth 0 --reps 3 2>&1 | grep 'decode at')"
done
