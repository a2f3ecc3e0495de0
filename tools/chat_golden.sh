#!/bin/sh
# Regenerates the chat-format goldens: writes the conversations
# (tools/chat-golden/make_convs.py) and renders each with the published
# Gemma 4 template through the npm package @huggingface/jinja.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root/tools/chat-golden"
[ -d node_modules/@huggingface/jinja ] || npm install --silent
cd "$root"
rm -f tests/data/chat/*.json tests/data/chat/*.txt
python3 tools/chat-golden/make_convs.py tests/data/chat
node tools/chat-golden/render.mjs data/templates/google-gemma-4-31B-it.jinja tests/data/chat
