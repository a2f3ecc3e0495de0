#!/bin/sh
# Structured output validated by ajv (tests/server/schema/test.mjs): the
# 65 tool-like schemas of tests/data/grammar/schemas.json as
# response_format json_schema and as tool parameters under tool_choice
# "required", on a random model (the synthetic tiny one) and a trained one
# (the demo model). Needs node and npm; installs ajv pinned by
# package-lock.json when node_modules is missing.
GEM=${GEM:-./gem}
dir=tests/server/schema
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! command -v node >/dev/null 2>&1; then
    echo "test_schemas: node is not installed (.ci/run installs it)"
    echo "test_schemas: 0 passed, 1 failed"
    exit 1
fi
if [ ! -d "$dir/node_modules/ajv" ]; then
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error) || { echo "test_schemas: 0 passed, 1 failed"; exit 1; }
fi
$GEM synth --profile gemma4-tiny --type q8_0 --seed 1 -o "$tmp/tiny.gguf" >/dev/null 2>&1
node "$dir/test.mjs" "$(cd "$(dirname "$GEM")" && pwd)/$(basename "$GEM")" "random=$tmp/tiny.gguf" "trained=data/models/default.gguf"
