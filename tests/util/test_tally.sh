#!/bin/sh
# tests/tally.sh, which every test run's total rests on: account() reads
# the last "N passed, M failed" of a log with or without a name before the
# counts (a bare line once stopped tests/cuda/run.sh with dash's "Illegal
# number"), counts a non-zero exit without a reported failure as one, and
# a log without a count line as nothing passed.
cd "$(dirname "$0")/../.." || exit 2
pass=0 fail=0
check() { # description condition...
    d=$1; shift
    if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "test_tally: FAILED: $d" >&2; fi
}
tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT
log=$tmp
. tests/tally.sh

case_of() { # name rc "log text" want_pass want_fail verdict_prefix
    total_pass=0 total_fail=0
    printf '%s\n' "$3" >"$tmp/l.log"
    out=$(account "$1" "$2" "$tmp/l.log"; echo "= $total_pass $total_fail")
    got=$(echo "$out" | sed -n 's/^= //p')
    check "$1: totals '$got', want '$4 $5'" [ "$got" = "$4 $5" ]
    first=$(echo "$out" | head -1)
    case "$first" in
    "$6"*) check "$1: verdict" true ;;
    *) check "$1: verdict '$first', want '$6...'" false ;;
    esac
}
case_of named 0 "test_x: 826 passed, 0 failed" 826 0 "ok    named (826 checks)"
case_of bare 0 "1 passed, 0 failed" 1 0 "ok    bare (1 checks)"
case_of last 0 "a: 1 passed, 0 failed
progress 5 of 9
b: 12 passed, 3 failed" 12 3 "FAIL  last (3 failed"
case_of bare-failed 1 "0 passed, 1 failed" 0 1 "FAIL  bare-failed (1 failed"
case_of crashed 139 "t: 40 passed, 0 failed
Segmentation fault" 40 1 "FAIL  crashed (1 failed"
case_of silent 0 "no counts here" 0 0 "ok    silent (0 checks)"
case_of silent-crash 2 "" 0 1 "FAIL  silent-crash (1 failed"
case_of progress 0 "cuda_ops: matmul done (550 passed, 0 failed, 15.1 s)" 550 0 "ok    progress (550 checks)"
case_of crashed-in-progress 134 "cuda_ops: matmul done (550 passed, 0 failed, 15.1 s)
Aborted" 550 1 "FAIL  crashed-in-progress (1 failed"
case_of words-after 0 "t: 3 passed, 0 failed (1 failed retry)" 3 0 "ok    words-after (3 checks)"
case_of digits-in-name 0 "fuzz  server/fuzz_http2: 1 passed, 0 failed (5 inputs in 3s)" 1 0 "ok    digits-in-name (1 checks)"

echo "test_tally: $pass passed, $fail failed"
[ "$fail" = 0 ]
