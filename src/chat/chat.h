/* Chat formats: native renderers of OpenAI-style conversations to a
 * model's prompt text, and streaming parsers of generated text back to
 * reasoning, content and tool calls. The format is chosen per model
 * (chat_format_for_arch, from the file's general.architecture); a zeroed
 * chat_render_opts and chat_parser_new mean Gemma 4, the first format.
 *
 * Gemma 4 (chat_render.c, chat_parse.c): the renderer reproduces the
 * published template
 * (google-gemma-4-31B-it.jinja) byte for byte as a JavaScript Jinja engine
 * (@huggingface/jinja) renders it: keys sorted case-insensitively with ties
 * in insertion order, JavaScript trim and number formatting. Inputs are
 * parsed JSON (util/json.h) so the server can pass request bodies through.
 *
 * The parser is fed text as it is generated (with user-defined tokens such
 * as <|channel> rendered) and reports events; it holds back any text that
 * could still become a marker, so a partial control token never leaks into
 * content, and turns anything malformed into plain content.
 *
 * Qwen3.5 (chat_qwen35.c, chat_qwen35_parse.c): the renderer reproduces
 * Qwen3.5-4B.jinja byte for byte as transformers renders it with Python's
 * jinja2 (Python's str.strip, str() of values, json.dumps for tools and
 * structured arguments); the parser maps <think> blocks to reasoning and
 * <tool_call> blocks (the template's XML-parameter form, or a JSON object)
 * to tool calls, with the same holding back and fallbacks. */
#ifndef GEM_CHAT_CHAT_H
#define GEM_CHAT_CHAT_H

#include <stddef.h>

#include "util/err.h"
#include "util/json.h"
#include "util/strbuf.h"

typedef enum {
    CHAT_FORMAT_GEMMA4 = 0,
    CHAT_FORMAT_QWEN35,
} chat_format;

/* The format of a model architecture (general.architecture); 0, or -1
 * when gem has none for it. */
int chat_format_for_arch(const char *arch, chat_format *out);
const char *chat_format_name(chat_format f);

/* Markers of a format's generated text: reasoning opens and closes with
 * these strings (a grammar or stop-string scan skips what lies between). */
typedef struct {
    const char *reasoning_open, *reasoning_close;
} chat_markers;
const chat_markers *chat_format_markers(chat_format f);

/* Gemma 4's reasoning markers (chat_format_markers(CHAT_FORMAT_GEMMA4)) */
#define CHAT_REASONING_OPEN "<|channel>"
#define CHAT_REASONING_CLOSE "<channel|>"

typedef struct {
    const json *messages;      /* array of {role, content, reasoning_content, tool_calls, ...} */
    const json *tools;         /* array of {type: "function", function: {...}} or NULL */
    int enable_thinking;       /* -1: not given, 0: false, 1: true */
    int add_generation_prompt;
    const char *bos_token;     /* Gemma 4: "<bos>" (Qwen3.5 has none) */
    chat_format format;
} chat_render_opts;

/* What chat_render's error is about: the conversation (messages, including
 * their tool calls) or the tools' declarations (the server names the
 * request's part from it). */
enum { CHAT_RENDER_BAD_MESSAGES = -1, CHAT_RENDER_BAD_TOOLS = -2 };

/* Appends the rendered prompt text. 0, or one of the two codes above with
 * an error naming the offending message or tool (a missing role, a tool
 * call without a name, ...). */
int chat_render(const chat_render_opts *o, strbuf *out, gem_err *err);

/* 1 when the prompt o renders leaves the model inside a reasoning block
 * (Qwen3.5's generation prompt opens <think> unless thinking is off): the
 * parser of its answer then starts in reasoning (chat_parser_in_reasoning). */
int chat_render_opens_reasoning(const chat_render_opts *o);

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

/* A parser of Gemma 4 text; chat_parser_new_format for any format. */
chat_parser *chat_parser_new(chat_event_fn fn, void *ctx);
chat_parser *chat_parser_new_format(chat_format f, chat_event_fn fn, void *ctx);
/* Before the first feed: the text starts inside a reasoning block. */
void chat_parser_in_reasoning(chat_parser *p);
/* Before the first feed: the request's tools (kept, not copied), whose
 * parameter types tell Qwen3.5's parser which values stay strings; NULL:
 * a value that reads as JSON is JSON. Gemma's ignores them. */
void chat_parser_set_tools(chat_parser *p, const json *tools);
void chat_parser_free(chat_parser *p);
/* Returns -1 only when memory runs out. */
int chat_parser_feed(chat_parser *p, const char *text, size_t n);
/* End of generation: releases held text (an unfinished call becomes content). */
int chat_parser_finish(chat_parser *p);
/* 1 once an end marker (Gemma: <turn|>, <|tool_response>; Qwen:
 * <|im_end|>, <|endoftext|>) was seen, or the
 * chat_parser_max_calls-th call; later text is ignored. */
int chat_parser_ended(const chat_parser *p);
/* n > 0: the answer ends after its n-th well-formed tool call (OpenAI's
 * parallel_tool_calls: false is 1); 0: no limit (the default). */
void chat_parser_max_calls(chat_parser *p, int n);

/* Converts Gemma's call arguments ("{key:<|"|>v<|"|>,n:3}") to JSON text.
 * Returns 0, or -1 when the text is not a well-formed argument object. */
int chat_args_to_json(const char *s, size_t n, strbuf *out);

#endif
