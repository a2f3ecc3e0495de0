#!/usr/bin/env python3
"""Writes the chat-format test conversations (tests/data/chat/NN-name.json).
Each is an OpenAI-style request body: messages, optional tools,
optional enable_thinking, optional add_generation_prompt (default true).
The goldens (.txt) come from tools/chat-golden/render.mjs."""
import json
import os
import sys

out = sys.argv[1]
os.makedirs(out, exist_ok=True)

W = {"type": "function", "function": {"name": "get_weather", "description": "Get the current weather for a city.",
     "parameters": {"type": "object", "properties": {
         "city": {"type": "string", "description": "City name, e.g. Paris"},
         "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Temperature unit"}},
         "required": ["city"]}}}
SEARCH = {"type": "function", "function": {"name": "search", "description": "Search the web.",
          "parameters": {"type": "object", "properties": {
              "query": {"type": "string", "description": "What to look for"},
              "max_results": {"type": "integer", "description": "At most this many"},
              "safe": {"type": "boolean"}}, "required": ["query"]}}}
NESTED = {"type": "function", "function": {"name": "create_event", "description": "Create a calendar event.",
          "parameters": {"type": "object", "properties": {
              "title": {"type": "string"},
              "when": {"type": "object", "description": "Start and end", "properties": {
                  "start": {"type": "string", "description": "ISO time"},
                  "end": {"type": "string"}}, "required": ["start"]},
              "attendees": {"type": "array", "description": "People", "items": {"type": "object", "properties": {
                  "email": {"type": "string"}, "optional": {"type": "boolean"}}, "required": ["email"]}},
              "tags": {"type": "array", "items": {"type": "string"}},
              "priority": {"type": "number", "nullable": True},
              "kind": {"type": "string", "enum": ["meeting", "call", "focus"]}},
              "required": ["title", "when"]}}}
NOPARAM = {"type": "function", "function": {"name": "get_time", "description": "Current time."}}
RESP = {"type": "function", "function": {"name": "lookup", "description": "Look up a record.",
        "parameters": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]},
        "response": {"description": "The record", "type": "object"}}}

U = lambda t: {"role": "user", "content": t}
A = lambda t: {"role": "assistant", "content": t}
S = lambda t: {"role": "system", "content": t}


def call(id_, name, args):
    return {"id": id_, "type": "function", "function": {"name": name, "arguments": args}}


convs = {
    "simple": {"messages": [U("Hello!")]},
    "system": {"messages": [S("You are a helpful assistant."), U("Hi")]},
    "developer": {"messages": [{"role": "developer", "content": "Answer tersely."}, U("What is 2+2?")]},
    "thinking-on": {"messages": [U("Why is the sky blue?")], "enable_thinking": True},
    "thinking-off": {"messages": [U("Why is the sky blue?")], "enable_thinking": False},
    "multi-turn": {"messages": [U("Hi"), A("Hello! How can I help?"), U("Tell me a joke."), A("Why did the chicken cross the road?"), U("Why?")]},
    "history-reasoning": {"messages": [U("2+2?"), {"role": "assistant", "content": "4", "reasoning_content": "simple sum"}, U("and 3+3?")], "enable_thinking": True},
    "history-channel-stripped": {"messages": [U("q"), A("<|channel>thought\nlet me think<channel|>The answer is 7."), U("again")]},
    "tool-weather": {"messages": [U("Weather in Paris?")], "tools": [W]},
    "tool-nested": {"messages": [U("Book a meeting tomorrow 10am with ann@example.com")], "tools": [NESTED]},
    "tool-search": {"messages": [U("Find news")], "tools": [SEARCH]},
    "tool-noparams": {"messages": [U("What time is it?")], "tools": [NOPARAM]},
    "tool-response-decl": {"messages": [U("Get record 5")], "tools": [RESP]},
    "tools-many": {"messages": [S("Use tools when useful."), U("Weather and news for Rome")], "tools": [W, SEARCH, NOPARAM]},
    "tool-loop": {"messages": [U("Weather in Paris?"),
                               {"role": "assistant", "content": None, "tool_calls": [call("c1", "get_weather", {"city": "Paris"})]},
                               {"role": "tool", "tool_call_id": "c1", "content": "{\"temp\": 21, \"sky\": \"clear\"}"}],
                  "tools": [W]},
    "tool-loop-reasoning": {"messages": [U("Weather in Paris?"),
                                         {"role": "assistant", "content": "", "reasoning_content": "I should call the weather tool.",
                                          "tool_calls": [call("c1", "get_weather", {"city": "Paris", "unit": "celsius"})]},
                                         {"role": "tool", "tool_call_id": "c1", "content": "21 C"}],
                            "tools": [W], "enable_thinking": True},
    "tool-loop-two-rounds": {"messages": [U("Weather in Paris then Rome"),
                                          {"role": "assistant", "tool_calls": [call("a", "get_weather", {"city": "Paris"})]},
                                          {"role": "tool", "tool_call_id": "a", "content": "sunny"},
                                          {"role": "assistant", "tool_calls": [call("b", "get_weather", {"city": "Rome"})]},
                                          {"role": "tool", "tool_call_id": "b", "content": "rain"},
                                          A("Paris is sunny and Rome is rainy."), U("Thanks!")],
                             "tools": [W]},
    "tool-parallel": {"messages": [U("Weather in Paris and Oslo"),
                                   {"role": "assistant", "content": None, "tool_calls": [
                                       call("p", "get_weather", {"city": "Paris"}), call("o", "get_weather", {"city": "Oslo"})]},
                                   {"role": "tool", "tool_call_id": "o", "content": "snow"},
                                   {"role": "tool", "tool_call_id": "p", "content": "sun"}],
                      "tools": [W]},
    "tool-result-parts": {"messages": [U("x"), {"role": "assistant", "tool_calls": [call("k", "search", {"query": "x"})]},
                                       {"role": "tool", "tool_call_id": "k", "content": [{"type": "text", "text": "part one, "}, {"type": "text", "text": "part two"}]}],
                          "tools": [SEARCH]},
    "tool-legacy-responses": {"messages": [U("x"), {"role": "assistant", "tool_calls": [call("k", "get_time", {})],
                                                    "tool_responses": [{"name": "get_time", "response": {"time": "10:00"}}]}],
                              "tools": [NOPARAM]},
    "tool-args-string": {"messages": [U("x"), {"role": "assistant", "tool_calls": [call("k", "search", "query:<|\"|>raw<|\"|>")]},
                                      {"role": "tool", "tool_call_id": "k", "content": "ok"}], "tools": [SEARCH]},
    "tool-args-types": {"messages": [U("x"), {"role": "assistant", "tool_calls": [call("k", "create_event", {
        "title": "Sync", "when": {"start": "2026-12-03T10:00", "end": None}, "attendees": [{"email": "a@b.c", "optional": False}],
        "priority": 1.0, "score": -2.5, "tiny": 1e-7, "big": 12345678901, "tags": [], "nested": {"Z": 1, "a": [1, [2, {"q": "w"}]]}})]},
        {"role": "tool", "tool_call_id": "k", "content": "created"}], "tools": [NESTED]},
    "unicode": {"messages": [S("\u00a0 Sé amable. 日本語で答えて。\u3000\n"), U("こんにちは 🌸 שלום مرحبا Привет 👨‍👩‍👧"), A("こんにちは！😊"), U("ça va? ½ ∑")]},
    "empty-user": {"messages": [U("")]},
    "whitespace-user": {"messages": [U("  \n\t  ")]},
    "content-parts": {"messages": [{"role": "user", "content": [{"type": "text", "text": "Look: "}, {"type": "image"}, {"type": "text", "text": " what is it?"}]}]},
    "media-parts": {"messages": [{"role": "user", "content": [{"type": "audio"}, {"type": "text", "text": "transcribe"}, {"type": "video"}]}]},
    "assistant-continuation": {"messages": [U("Start"), A("Part one."), A("Part two."), U("Go on")]},
    "no-generation-prompt": {"messages": [U("Hi"), A("Hello")], "add_generation_prompt": False},
    "tool-no-id": {"messages": [U("x"), {"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "get_time", "arguments": {}}}]},
                                {"role": "tool", "content": "10:00"}], "tools": [NOPARAM]},
    "tool-name-only": {"messages": [U("x"), {"role": "assistant", "tool_calls": [call("z", "get_time", {})]},
                                    {"role": "tool", "name": "get_time", "tool_call_id": "other", "content": "10:00"}], "tools": [NOPARAM]},
    "thinking-tools-system": {"messages": [S("Be careful."), U("Weather?")], "tools": [W], "enable_thinking": True},
    "case-sort": {"messages": [U("x")], "tools": [{"type": "function", "function": {"name": "f", "description": "sorting",
        "parameters": {"type": "object", "properties": {"b": {"type": "string"}, "A": {"type": "string"}, "a": {"type": "integer"},
                                                        "_z": {"type": "boolean"}, "10": {"type": "number"}, "B": {"type": "string"}}}}}]},
    "params-no-type": {"messages": [U("x")], "tools": [{"type": "function", "function": {"name": "g", "description": "quirk",
        "parameters": {"properties": {"q": {"type": "string"}}, "required": ["q"]}}}]},
    "object-no-properties": {"messages": [U("x")], "tools": [{"type": "function", "function": {"name": "h", "description": "obj",
        "parameters": {"type": "object", "properties": {"opts": {"type": "object", "description": "free form", "extra": {"type": "string"}}}}}}]},
    "args-quoting": {"messages": [U("x"), {"role": "assistant", "tool_calls": [call("q", "search", {"query": "say \"hi\"\nthen <b>bye</b> {x:1}"})]},
                                 {"role": "tool", "tool_call_id": "q", "content": "line1\nline2"}], "tools": [SEARCH]},
    "developer-thinking": {"messages": [{"role": "developer", "content": "Think first."}, U("Prove sqrt(2) is irrational.")], "enable_thinking": True},
    "tool-then-content": {"messages": [U("x"), {"role": "assistant", "content": "Here you go.", "tool_calls": [call("t", "get_time", {})]},
                                       {"role": "tool", "tool_call_id": "t", "content": "10:00"}, U("thanks")], "tools": [NOPARAM]},
    "description-unicode": {"messages": [U("x")], "tools": [{"type": "function", "function": {"name": "t\u00e9l\u00e9phone", "description": "Appelle «quelqu'un» — 📞 \"vite\"",
        "parameters": {"type": "object", "properties": {"num\u00e9ro": {"type": "string", "description": "Num\u00e9ro \"E.164\""}}, "required": ["num\u00e9ro"]}}}]},
    "deep-nesting": {"messages": [U("x")], "tools": [{"type": "function", "function": {"name": "deep", "description": "d",
        "parameters": {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "array", "items": {
            "type": "object", "properties": {"c": {"type": "object", "properties": {"d": {"type": "string", "enum": ["x", "y"]}}, "required": ["d"]}}}}}}}}}}]},
    "thinking-off-tools-loop": {"messages": [U("time?"), {"role": "assistant", "tool_calls": [call("t", "get_time", {})]},
                                             {"role": "tool", "tool_call_id": "t", "content": "10:00"}, A("It is 10:00."), U("and now?")],
                                "tools": [NOPARAM], "enable_thinking": False},
    "reasoning-field": {"messages": [U("q"), {"role": "assistant", "reasoning": "use the tool", "tool_calls": [call("r", "get_time", {})]},
                                     {"role": "tool", "tool_call_id": "r", "content": "9:00"}], "tools": [NOPARAM], "enable_thinking": True},
    "system-only-thinking": {"messages": [S("  spaced system  "), U(" spaced user ")], "enable_thinking": True},
}

for i, (name, conv) in enumerate(convs.items(), 1):
    with open(os.path.join(out, f"{i:02d}-{name}.json"), "w", encoding="utf-8") as f:
        json.dump(conv, f, ensure_ascii=False, indent=1)
print(f"wrote {len(convs)} conversations")
