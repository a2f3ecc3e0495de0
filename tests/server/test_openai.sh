#!/bin/bash
# gem serve driven by the official openai npm SDK, plus the load test
# (tests/server/openai/test.mjs, which prints the report). Needs node and
# npm; installs the SDK pinned by package-lock.json when node_modules is
# missing.
NAME=test_openai
. tests/server/lib.sh
dir=tests/server/openai
need_node "$dir" openai
tiny_model
node "$dir/test.mjs" "$(gem_abs)" "$M"
