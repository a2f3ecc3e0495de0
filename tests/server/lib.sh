# Shared by the server test scripts (bash, sourced from the repository
# root after NAME is set to the report's name): GEM, the pass/fail
# counters and the report line tests/run.sh tallies, a temporary
# directory removed on exit together with every server started, curl with
# a JSON body type, jget, the tiny model, start, and the Node
# prerequisites of the SDK suites.
GEM=${GEM:-./gem}
pass=0 fail=0
tmp=$(mktemp -d)
pids=""
cleanup() {
    for p in $pids; do kill "$p" 2>/dev/null; done
    for p in $pids; do wait "$p" 2>/dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "$NAME: FAIL: $*" >&2; }
check() { # description, then a command that must succeed
    local what=$1
    shift
    if "$@"; then ok; else bad "$what"; fi
}
# prints the report and exits with its status
finish() {
    echo "$NAME: $pass passed, $fail failed"
    [ "$fail" = 0 ]
    exit
}
# one check: no server log holds a sanitizer report (when GEM is the ASan build)
no_sanitizer_reports() {
    if grep -l -E "Sanitizer|runtime error" "$tmp"/*.log >/dev/null 2>&1; then
        bad "sanitizer reports: $(grep -h -A5 -E "Sanitizer|runtime error" "$tmp"/*.log | head -40)"
    else
        ok
    fi
}

# every request these tests send declares a JSON body, as the server
# requires of POSTs (the checks of that requirement call curl_bare)
curl_bare() { command curl "$@"; }
curl() { command curl -H 'Content-Type: application/json' "$@"; }

# jget PATH: a field of the JSON on stdin (strings raw, others as JSON)
jget() {
    node -e '
let s = ""; process.stdin.on("data", d => s += d).on("end", () => {
  let v; try { v = JSON.parse(s); } catch (e) { console.log("<not json>"); return; }
  for (const k of process.argv[1].split(".").filter(Boolean)) v = v == null ? undefined : v[k];
  console.log(typeof v === "string" ? v : JSON.stringify(v));
});' "$1"
}

# need_node [DIR PACKAGE]: node on the PATH and, when DIR/node_modules
# lacks PACKAGE, DIR's packages installed from its package-lock.json;
# otherwise a failed report
need_node() {
    command -v node >/dev/null 2>&1 || { bad "node is not installed (.ci/run installs it)"; finish; }
    if [ -n "$1" ] && [ ! -d "$1/node_modules/$2" ]; then
        (cd "$1" && npm ci --no-audit --no-fund --loglevel=error) || { bad "npm ci in $1"; finish; }
    fi
}

# $GEM as an absolute path (node runs it from elsewhere)
gem_abs() { echo "$(cd "$(dirname "$GEM")" && pwd)/$(basename "$GEM")"; }

# M: the synthetic tiny model (tiny_model writes it)
M="$tmp/tiny.gguf"
tiny_model() { $GEM synth --profile gemma4-tiny --type q8_0 --seed 1 -o "$M" >/dev/null 2>&1 || { bad "synth"; finish; }; }

# start NAME ARGS...: starts a server on $M, sets PORT and PID (log in $tmp/NAME.log)
start() {
    local name=$1
    shift
    : >"$tmp/$name.log" # before the server writes it: read at once below
    $GEM serve -m "$M" --port 0 "$@" 2>>"$tmp/$name.log" &
    PID=$!
    pids="$pids $PID"
    PORT=""
    for _ in $(seq 100); do
        PORT=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$tmp/$name.log")
        [ -n "$PORT" ] && grep -q "loaded in" "$tmp/$name.log" && return 0
        sleep 0.1
    done
    bad "server $name did not start: $(cat "$tmp/$name.log")"
    return 1
}
