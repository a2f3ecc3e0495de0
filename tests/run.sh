#!/bin/sh
# Runs every test of `make test` and prints one total line,
# "N passed, M failed", last. Each test program reports
# "NAME: N passed, M failed"; a program that crashes or exits non-zero
# without reporting a failure counts as one failure. Fuzzers count one
# check each: no crash, leak or timeout within FUZZ_SECONDS.
#   GEM_SKIP_ASAN=1, GEM_SKIP_FUZZ=1 skip those parts.
cd "$(dirname "$0")/.." || exit 2
total_pass=0 total_fail=0
log=build/test-logs
mkdir -p "$log"

. tests/tally.sh

# a test program runs only while its source is in the tree: a build folder
# that outlived a deleted test would otherwise keep running its old binary
has_src() { [ -f "tests/$1.c" ]; }
for t in build/tests/*/test_*; do
    [ -x "$t" ] && has_src "${t#build/tests/}" && run "${t#build/tests/}" "$t"
done
for t in tests/*/test_*.sh; do
    run "${t#tests/}" "$t"
done

if [ -z "$GEM_SKIP_ASAN" ]; then
    export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1
    for t in build/asan/tests/*/test_*; do
        [ -x "$t" ] && has_src "${t#build/asan/tests/}" && run "asan ${t#build/asan/tests/}" "$t"
    done
    # the server against real connections, under the sanitizers
    [ -x build/asan/gem ] && run "asan server/test_server.sh" env GEM=build/asan/gem tests/server/test_server.sh
fi

if [ -z "$GEM_SKIP_FUZZ" ]; then
    for fz in build/fuzz/*/fuzz_*; do
        [ -x "$fz" ] || continue
        name=${fz#build/fuzz/}
        has_src "$name" || continue
        # a target may ask for less time (tests/NAME.seconds), never more
        own=$(cat "tests/$name.seconds" 2>/dev/null)
        secs=${FUZZ_SECONDS:-60}
        [ -n "$own" ] && [ "$own" -lt "$secs" ] && secs=$own
        corpus="build/fuzz-corpus/$name"
        mkdir -p "$corpus"
        seeds=$(cat "tests/$name.seeds" 2>/dev/null)
        lf="$log/fuzz_$(echo "$name" | tr '/' '_').log"
        mkdir -p build/fuzz-artifacts
        "$fz" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix=build/fuzz-artifacts/ \
            "$corpus" $seeds >"$lf" 2>&1
        rc=$?
        if [ $rc = 0 ]; then
            runs=$(grep -E 'stat::number_of_executed_units' "$lf" | awk '{print $2}')
            echo "fuzz  $name: 1 passed, 0 failed ($runs inputs in ${secs}s)" >>"$lf"
        fi
        account "fuzz $name" $rc "$lf"
    done
fi

echo "$total_pass passed, $total_fail failed"
[ "$total_fail" = 0 ]
