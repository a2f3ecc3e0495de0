#!/bin/bash
# Structured output validated by ajv (tests/server/schema/test.mjs, which
# prints the report): the 65 tool-like schemas of
# tests/data/grammar/schemas.json as response_format json_schema and as
# tool parameters under tool_choice "required", on a random model (the
# synthetic tiny one) and a trained one (the demo model). Needs node and
# npm; installs ajv pinned by package-lock.json when node_modules is
# missing.
NAME=test_schemas
. tests/server/lib.sh
dir=tests/server/schema
need_node "$dir" ajv
tiny_model
node "$dir/test.mjs" "$(gem_abs)" "random=$M" "trained=data/models/default.gguf"
