#!/usr/bin/env python3
"""Renders every conversation DIR/*.json with a Jinja chat template the way
transformers' apply_chat_template does (jinja2's sandboxed environment with
trim_blocks and lstrip_blocks, its tojson without HTML escaping and with
non-ASCII kept, raise_exception) and writes NAME.txt beside each: the
goldens gem's native renderer must equal byte for byte. A render that
raises writes "ERROR: message".

A conversation file holds messages, and optionally tools,
add_generation_prompt (default true) and enable_thinking (passed only when
present, as a template keyword argument).

usage: render_qwen35.py TEMPLATE DIR   (Debian package python3-jinja2)
"""
import json
import os
import sys

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


tmpl_path, folder = sys.argv[1], sys.argv[2]
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
tmpl = env.from_string(open(tmpl_path, encoding="utf-8").read())
n = 0
for f in sorted(os.listdir(folder)):
    if not f.endswith(".json"):
        continue
    conv = json.load(open(os.path.join(folder, f), encoding="utf-8"))
    kw = {"messages": conv["messages"], "tools": conv.get("tools"),
          "add_generation_prompt": conv.get("add_generation_prompt", True)}
    if "enable_thinking" in conv:
        kw["enable_thinking"] = conv["enable_thinking"]
    try:
        out = tmpl.render(**kw)
    except Exception as e:  # the template's own errors and Python's (a bad type)
        out = "ERROR: " + str(e)
    with open(os.path.join(folder, f[:-5] + ".txt"), "w", encoding="utf-8", newline="") as o:
        o.write(out)
    n += 1
print(f"rendered {n} conversations")
