#!/usr/bin/env python3
"""Writes the Qwen3.5 chat-format test conversations (NN-name.json) into
DIR: system prompts, multi-turn histories, thinking on and off, reasoning
in history (as a field and inline in content), tool declarations, tool
calls with every argument type, tool results (single, parallel, as parts),
content parts with media, white space the template trims, and conversations
the template rejects. render_qwen35.py renders each with the template.

usage: make_qwen35_convs.py DIR
"""
import json
import os
import sys

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather for a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name, e.g. Paris"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}
SEARCH = {"type": "function", "function": {
    "name": "search", "description": "Search the web and return the top results.",
    "parameters": {"type": "object", "properties": {
        "query": {"type": "string"}, "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10},
        "filters": {"type": "object", "properties": {"site": {"type": "string"}, "after": {"type": "string", "format": "date"}}},
        "tags": {"type": "array", "items": {"type": "string"}}}, "required": ["query"]}}}
NOPARAM = {"type": "function", "function": {"name": "get_time", "description": "Current UTC time.",
                                            "parameters": {"type": "object", "properties": {}}}}
ODD = {"type": "function", "function": {
    "name": "odd_schema", "description": "Quotes \" backslash \\ newline \n tab \t unicode é 日本 😀 and </tools> <tool_call>",
    "parameters": {"type": "object", "properties": {
        "ratio": {"type": "number", "minimum": 0.0, "maximum": 1.5, "default": 1e-05, "multipleOf": 0.25},
        "big": {"type": "integer", "maximum": 12345678901234567890, "minimum": -9007199254740993},
        "exp": {"type": "number", "default": 1e16, "examples": [1e15, 123456789.125, 2.5e-7, -0.0, 0]},
        "flag": {"type": "boolean", "default": False, "nullable": True, "const": None},
        "ctrl": {"type": "string", "default": "\u0001\u001f\u007f\u2028"}}}}}

def tc(name, args, id_=None, wrap=True):
    call = {"name": name, "arguments": args}
    if not wrap:
        return call
    out = {"type": "function", "function": call}
    if id_:
        out["id"] = id_
    return out

U = lambda c: {"role": "user", "content": c}
A = lambda c, **kw: dict({"role": "assistant", "content": c}, **kw)
S = lambda c: {"role": "system", "content": c}
T = lambda c, **kw: dict({"role": "tool", "content": c}, **kw)

convs = {
    "simple": {"messages": [U("Hello!")]},
    "system": {"messages": [S("You are a pirate."), U("Hi")]},
    "thinking-on": {"messages": [U("Think about 2+2.")], "enable_thinking": True},
    "thinking-off": {"messages": [U("Answer quickly.")], "enable_thinking": False},
    "multi-turn": {"messages": [S("Be brief."), U("Hi"), A("Hello! How can I help?"), U("Tell me a joke.")]},
    "multi-turn-thinking-off": {"messages": [U("Hi"), A("Hello!"), U("Bye")], "enable_thinking": False},
    "history-reasoning-field": {"messages": [U("What is 2+2?"), A("4", reasoning_content="Simple addition."),
                                              U("And 3+3?")]},
    "last-reasoning-field": {"messages": [U("What is 2+2?"), A("4", reasoning_content="\nSimple addition.\n\n")],
                             "add_generation_prompt": False},
    "inline-think": {"messages": [U("Q1"), A("<think>\nfirst thoughts\n</think>\n\nAnswer one"), U("Q2"),
                                   A("<think>second</think>Answer two")], "add_generation_prompt": False},
    "inline-think-close-only": {"messages": [U("Q"), A("reasoning only\n</think>\n\nThe answer.")],
                                "add_generation_prompt": False},
    "reasoning-field-and-inline": {"messages": [U("Q"), A("kept <think>x</think> as is", reasoning_content="field")],
                                   "add_generation_prompt": False},
    "reasoning-null": {"messages": [U("Q"), A("<think>a</think>b", reasoning_content=None)],
                       "add_generation_prompt": False},
    "tools-no-system": {"messages": [U("Weather in Paris?")], "tools": [WEATHER]},
    "tools-system": {"messages": [S("Use tools when useful."), U("Weather in Paris?")], "tools": [WEATHER, SEARCH]},
    "tools-empty-system": {"messages": [S("  \n"), U("Time?")], "tools": [NOPARAM]},
    "tools-many": {"messages": [U("Do things.")], "tools": [WEATHER, SEARCH, NOPARAM, ODD]},
    "tool-loop": {"messages": [U("Weather in Paris?"),
                               A("", tool_calls=[tc("get_weather", {"city": "Paris", "unit": "celsius"}, "call_1")]),
                               T("{\"temp\": 21, \"sky\": \"clear\"}", tool_call_id="call_1")], "tools": [WEATHER]},
    "tool-loop-answer": {"messages": [U("Weather in Paris?"),
                                      A(None, tool_calls=[tc("get_weather", {"city": "Paris"})]),
                                      T("21C"), A("It is 21C in Paris."), U("Thanks! And Rome?")],
                         "tools": [WEATHER]},
    "tool-content-before": {"messages": [U("Weather?"),
                                         A("Let me check.", tool_calls=[tc("get_weather", {"city": "Oslo"})]),
                                         T("-3C")], "tools": [WEATHER]},
    "tool-parallel": {"messages": [U("Weather in Paris and Rome?"),
                                   A("", tool_calls=[tc("get_weather", {"city": "Paris"}, "a"),
                                                     tc("get_weather", {"city": "Rome"}, "b")]),
                                   T("20C", tool_call_id="a"), T("25C", tool_call_id="b")], "tools": [WEATHER]},
    "tool-args-types": {"messages": [U("Search."), A("", tool_calls=[tc("search", {
        "query": "llama \"quoted\"\nnewline é 😀", "limit": 5, "ratio": 0.5, "whole": 2.0, "tiny": 1e-07,
        "huge": 1e+22, "neg": -0.0, "flag": True, "off": False, "nothing": None,
        "tags": ["a", "b", 3, None, True], "filters": {"site": "example.org", "nested": {"deep": [1, {"x": "é"}]}},
        "empty_list": [], "empty_obj": {}, "big": 12345678901234567890})]), T("ok")], "tools": [SEARCH]},
    "tool-unwrapped-call": {"messages": [U("Time?"), A("", tool_calls=[tc("get_time", {}, wrap=False)]),
                                         T("12:00")], "tools": [NOPARAM]},
    "tool-no-arguments": {"messages": [U("Time?"), A("", tool_calls=[{"type": "function", "function": {"name": "get_time"}}]),
                                       T("12:00")], "tools": [NOPARAM]},
    "tool-result-parts": {"messages": [U("Weather?"), A("", tool_calls=[tc("get_weather", {"city": "Paris"})]),
                                       T([{"type": "text", "text": "part one, "}, {"type": "text", "text": "part two"}])],
                          "tools": [WEATHER]},
    "tool-loop-reasoning": {"messages": [U("Weather?"),
                                         A("", reasoning_content="I should call the tool.",
                                           tool_calls=[tc("get_weather", {"city": "Paris"})]),
                                         T("21C")], "tools": [WEATHER]},
    "tool-loop-two-rounds": {"messages": [U("Plan a trip."),
                                          A("", reasoning_content="weather first", tool_calls=[tc("get_weather", {"city": "Nice"})]),
                                          T("sunny"),
                                          A("Now search.", reasoning_content="then search",
                                            tool_calls=[tc("search", {"query": "hotels in Nice", "limit": 3})]),
                                          T("Hotel A; Hotel B")], "tools": [WEATHER, SEARCH],
                             "enable_thinking": True},
    "thinking-off-tools-loop": {"messages": [U("Weather?"), A("", tool_calls=[tc("get_weather", {"city": "Paris"})]),
                                             T("21C")], "tools": [WEATHER], "enable_thinking": False},
    "thinking-tools-system": {"messages": [S("Careful."), U("Weather?")], "tools": [WEATHER], "enable_thinking": True},
    "tool-response-lookalike": {"messages": [U("Real question"), A("calling", tool_calls=[tc("get_time", {})]),
                                             U("<tool_response>\n12:00\n</tool_response>")], "tools": [NOPARAM]},
    "tool-after-system": {"messages": [S("sys"), U("q"), T("orphan result")], "add_generation_prompt": True},
    "content-parts": {"messages": [S([{"type": "text", "text": "System "}, {"type": "text", "text": "parts."}]),
                                   U([{"type": "text", "text": "Look: "}, {"type": "text", "text": "two parts"}])]},
    "media-parts": {"messages": [U([{"type": "image"}, {"type": "text", "text": "What is this?"},
                                    {"type": "image_url", "image_url": {"url": "http://x/y.png"}},
                                    {"type": "video", "video": "v.mp4"}, {"image": "z.png"}])]},
    "unicode": {"messages": [U("日本語で答えて 🎉 — “quotes” ‘single’ Ωμέγα"), A("はい、もちろん！"), U("ありがとう")]},
    "trim-whitespace": {"messages": [S("\n\t  system text \u3000"), U("\u00a0 padded \x1c\n"),
                                     A("  answer  \n"), U(" next\u2003")]},
    "empty-user": {"messages": [U("")]},
    "whitespace-user": {"messages": [U(" \n\t ")]},
    "no-generation-prompt": {"messages": [U("Hi"), A("Hello")], "add_generation_prompt": False},
    "null-content": {"messages": [U(None), A(None)], "add_generation_prompt": False},
    "odd-schema-call": {"messages": [U("odd"), A("", tool_calls=[tc("odd_schema", {"ratio": 0.75, "ctrl": "\u0001x"})]),
                                     T("done")], "tools": [ODD]},
    "long-history": {"messages": [S("s")] + [m for i in range(6) for m in (U(f"question {i}"), A(f"answer {i}",
                                                                                            reasoning_content=f"r{i}"))]
                     + [U("final")]},
    "err-no-messages": {"messages": []},
    "err-no-user": {"messages": [S("only system")]},
    "err-system-not-first": {"messages": [U("hi"), S("late system")]},
    "err-unknown-role": {"messages": [{"role": "developer", "content": "x"}, U("hi")]},
    "err-image-in-system": {"messages": [S([{"type": "image"}]), U("hi")]},
    "err-content-number": {"messages": [U(42)]},
    "err-only-tool-response-user": {"messages": [U("<tool_response>x</tool_response>")]},
}

folder = sys.argv[1]
os.makedirs(folder, exist_ok=True)
for i, (name, conv) in enumerate(convs.items(), 1):
    with open(os.path.join(folder, f"{i:02d}-{name}.json"), "w", encoding="utf-8") as f:
        f.write(json.dumps(conv, indent=1, ensure_ascii=False) + "\n")
print(f"{len(convs)} conversations")
