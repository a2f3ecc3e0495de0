# Sourced by tests/run.sh and tests/cuda/run.sh (after `cd` to the
# repository root, with $log set): the per-program tally of "N passed,
# M failed" lines. A program that exits non-zero without reporting a
# failure counts as one failure.
total_pass=0 total_fail=0

account() { # name rc logfile
    line=$(grep -E '[0-9]+ passed, [0-9]+ failed' "$3" | tail -1)
    # both counts from the line's last "N passed, M failed", with or
    # without a "name: " before them
    p=$(echo "$line" | sed -E 's/^(.*[^0-9])?([0-9]+) passed, [0-9]+ failed.*/\2/')
    f=$(echo "$line" | sed -E 's/.*passed, ([0-9]+) failed.*/\1/')
    [ -z "$line" ] && p=0 f=0
    if [ "$2" != 0 ] && [ "$f" = 0 ]; then f=1; fi
    total_pass=$((total_pass + p)) total_fail=$((total_fail + f))
    if [ "$f" = 0 ]; then echo "ok    $1 ($p checks)"; else echo "FAIL  $1 ($f failed, log $3)"; tail -20 "$3"; fi
}

run() { # name command...
    name=$1; shift
    lf="$log/$(echo "$name" | tr '/ ()' '____').log"
    "$@" >"$lf" 2>&1
    account "$name" $? "$lf"
}
