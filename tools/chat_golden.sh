#!/bin/sh
# Regenerates the chat-format goldens for the formats named (gemma4,
# qwen35; default both). gemma4: writes the conversations
# (tools/chat-golden/make_convs.py) and renders each with the published
# Gemma 4 template through the npm package @huggingface/jinja. qwen35:
# writes tests/data/chat/qwen35 (make_qwen35_convs.py) and renders with
# Qwen3.5-4B.jinja through Python's jinja2 as transformers sets it up
# (render_qwen35.py; Debian package python3-jinja2).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
for f in ${@:-gemma4 qwen35}; do
    case $f in
    gemma4)
        cd "$root/tools/chat-golden"
        [ -d node_modules/@huggingface/jinja ] || npm install --silent
        cd "$root"
        rm -f tests/data/chat/*.json tests/data/chat/*.txt
        python3 tools/chat-golden/make_convs.py tests/data/chat
        node tools/chat-golden/render.mjs data/templates/google-gemma-4-31B-it.jinja tests/data/chat
        ;;
    qwen35)
        cd "$root"
        rm -f tests/data/chat/qwen35/*.json tests/data/chat/qwen35/*.txt
        python3 tools/chat-golden/make_qwen35_convs.py tests/data/chat/qwen35
        python3 tools/chat-golden/render_qwen35.py data/templates/Qwen3.5-4B.jinja tests/data/chat/qwen35
        ;;
    *) echo "unknown format $f (gemma4, qwen35)" >&2; exit 1 ;;
    esac
done
