#!/bin/sh
# Checks src/tok/unicode_tab.c (tools/gen_unicode_tab.py) against the
# pinned reference's Unicode flags on all code points
# (bench/reference/build.sh cpu first).
. "$(dirname "$0")/ref_env.sh"
cc -O2 -Isrc tools/ref_unicode_flags.c src/tok/unicode_tab.c -L$bin -l:libllama.so.0 -Wl,-rpath,"$root/$bin" -o "$tmp/ref_unicode"
"$tmp/ref_unicode"
