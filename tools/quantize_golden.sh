#!/bin/sh
# Regenerates tests/data/quantize/sha256.txt: for every case in cases.txt,
# the SHA-256 and size of the file the pinned reference's llama-quantize
# writes from the same synthetic input. Needs the reference built
# (bench/reference/build.sh cpu).
. "$(dirname "$0")/ref_env.sh"
make -s gem CUDA=0
out=tests/data/quantize/sha256.txt
: > "$out.new"
grep -v '^#' tests/data/quantize/cases.txt | while read -r name stype seed qtype etype profile; do
    [ -n "$name" ] || continue
    profile=${profile:-gemma4-tiny}
    in="$tmp/$profile-$stype-$seed.gguf"
    [ -f "$in" ] || ./gem synth --profile "$profile" --type "$stype" --seed "$seed" -o "$in" 2>/dev/null
    set -- "$bin/llama-quantize"
    [ "$etype" = - ] || set -- "$@" --token-embedding-type "$etype"
    "$@" "$in" "$tmp/out.gguf" "$(echo "$qtype" | tr a-z A-Z)" 2 >"$tmp/log" 2>&1 || { cat "$tmp/log"; exit 1; }
    echo "$name $(sha256sum "$tmp/out.gguf" | cut -d' ' -f1) $(stat -c %s "$tmp/out.gguf")" >> "$out.new"
    rm -f "$tmp/out.gguf"
done
mv "$out.new" "$out"
cat "$out"
