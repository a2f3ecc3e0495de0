#!/bin/sh
# gem serve driven by the official openai npm SDK, plus the load test
# (tests/server/openai/test.mjs). Needs node and npm; installs the SDK
# pinned by package-lock.json when node_modules is missing.
GEM=${GEM:-./gem}
dir=tests/server/openai
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! command -v node >/dev/null 2>&1; then
    echo "test_openai: node is not installed (.ci/run installs it)"
    echo "test_openai: 0 passed, 1 failed"
    exit 1
fi
if [ ! -d "$dir/node_modules/openai" ]; then
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error) || { echo "test_openai: 0 passed, 1 failed"; exit 1; }
fi
$GEM synth --profile gemma4-tiny --type q8_0 --seed 1 -o "$tmp/tiny.gguf" >/dev/null 2>&1
node "$dir/test.mjs" "$(cd "$(dirname "$GEM")" && pwd)/$(basename "$GEM")" "$tmp/tiny.gguf"
