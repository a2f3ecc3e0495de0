/* Gemma 4 chat format: a native renderer of OpenAI-style conversations to
 * Gemma 4 control-token text, and a streaming parser of generated text back
 * to reasoning, content and tool calls.
 *
 * The renderer reproduces the published template
 * (google-gemma-4-31B-it.jinja) byte for byte as a JavaScript Jinja engine
 * (@huggingface/jinja) renders it: keys sorted case-insensitively with ties
 * in insertion order, JavaScript trim and number formatting. Inputs are
 * parsed JSON (util/json.h) so the server can pass request bodies through.
 *
 * The parser is fed text as it is generated (with user-defined tokens such
 * as <|channel> rendered) and reports events; it holds back any text that
 * could still become a marker, so a partial control token never leaks into
 * content, and turns anything malformed into plain content. */
#ifndef GEM_CHAT_CHAT_H
#define GEM_CHAT_CHAT_H

#include <stddef.h>

#include "util/err.h"
#include "util/json.h"
#include "util/strbuf.h"

/* the reasoning channel's markers in generated text (the parser's) */
#define CHAT_REASONING_OPEN "<|channel>"
#define CHAT_REASONING_CLOSE "<channel|>"

typedef struct {
    const json *messages;      /* array of {role, content, reasoning_content, tool_calls, ...} */
    const json *tools;         /* array of {type: "function", function: {...}} or NULL */
    int enable_thinking;       /* -1: not given, 0: false, 1: true */
    int add_generation_prompt;
    const char *bos_token;     /* "<bos>" */
} chat_render_opts;

/* What chat_render's error is about: the conversation (messages, including
 * their tool calls) or the tools' declarations (the server names the
 * request's part from it). */
enum { CHAT_RENDER_BAD_MESSAGES = -1, CHAT_RENDER_BAD_TOOLS = -2 };

/* Appends the rendered prompt text. 0, or one of the two codes above with
 * an error naming the offending message or tool (a missing role, a tool
 * call without a name, ...). */
int chat_render(const chat_render_opts *o, strbuf *out, gem_err *err);

typedef enum { CHAT_EV_CONTENT, CHAT_EV_REASONING, CHAT_EV_TOOL_CALL } chat_ev_kind;

typedef struct {
    chat_ev_kind kind;
    const char *text;      /* content or reasoning delta */
    size_t len;
    const char *name;      /* tool call: function name */
    const char *arguments; /* tool call: arguments as a JSON object text */
} chat_event;

typedef void (*chat_event_fn)(const chat_event *ev, void *ctx);

typedef struct chat_parser chat_parser;

chat_parser *chat_parser_new(chat_event_fn fn, void *ctx);
void chat_parser_free(chat_parser *p);
/* Returns -1 only when memory runs out. */
int chat_parser_feed(chat_parser *p, const char *text, size_t n);
/* End of generation: releases held text (an unfinished call becomes content). */
int chat_parser_finish(chat_parser *p);
/* 1 once an end marker (<turn|>, <|tool_response>) was seen, or the
 * chat_parser_max_calls-th call; later text is ignored. */
int chat_parser_ended(const chat_parser *p);
/* n > 0: the answer ends after its n-th well-formed tool call (OpenAI's
 * parallel_tool_calls: false is 1); 0: no limit (the default). */
void chat_parser_max_calls(chat_parser *p, int n);

/* Converts Gemma's call arguments ("{key:<|"|>v<|"|>,n:3}") to JSON text.
 * Returns 0, or -1 when the text is not a well-formed argument object. */
int chat_args_to_json(const char *s, size_t n, strbuf *out);

#endif
