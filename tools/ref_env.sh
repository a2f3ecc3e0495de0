# Sourced by the scripts that use the pinned reference: sets root (the
# repository), R (the reference checkout), bin (its CPU binaries) and tmp
# (a scratch folder removed on exit), and fails early when it is not built.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
R=.ref/llama.cpp
bin=$R/build-cpu/bin
[ -x "$bin/llama-bench" ] || { echo "reference missing: run bench/reference/build.sh cpu" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
