/* The OpenAI-compatible request layer of `gem serve`: request bodies to
 * validated generation requests, and errors in OpenAI's shape.
 *
 * Everything here is pure (no sockets, no engine), so the mapping can be
 * fuzzed and unit-tested. A request that passes api_parse is fully
 * validated: types, ranges, roles, content parts, tools and tool_choice; a
 * failure fills an api_error with the 4xx status, the OpenAI error type, the
 * offending parameter and a message that names it. The parsed body stays
 * alive inside the request (messages and tools are passed to the chat
 * renderer as they are). */
#ifndef GEM_SERVER_API_H
#define GEM_SERVER_API_H

#include <stddef.h>
#include <stdint.h>

#include "chat/chat.h"
#include "engine/sampler.h"
#include "grammar/grammar.h"
#include "util/json.h"
#include "util/strbuf.h"

typedef struct {
    int status;        /* 400, 401, 404, ... */
    char type[32];     /* invalid_request_error, not_found_error, server_error, ... */
    char param[64];    /* the offending request field, "" when none */
    char code[48];     /* a machine-readable code, "" when none */
    char message[512];
} api_error;

/* Fills e and returns -1. param and code may be NULL. */
int api_fail(api_error *e, int status, const char *type, const char *param, const char *code, const char *fmt, ...)
    GEM_PRINTF(6, 7);

/* "null", "a boolean", ..., "an object": v's JSON type for messages. */
const char *api_type_name(const json *v);
/* A 400 "'param' must be WANT, not TYPE" about v; returns -1. */
int api_bad_type(api_error *e, const char *param, const char *want, const json *v);

/* {"error":{"message":..,"type":..,"param":..,"code":..}} */
void api_error_json(const api_error *e, strbuf *out);

typedef enum { API_CHAT, API_COMPLETION } api_kind;
typedef enum { API_TOOLS_AUTO, API_TOOLS_NONE, API_TOOLS_REQUIRED, API_TOOLS_NAMED } api_tool_choice;
enum { API_JSON_OBJECT = 1, API_JSON_SCHEMA = 2 };

#define API_MAX_STOP 16
#define API_MAX_STOP_LEN 256
/* tool calls of one assistant message: the renderer pairs each following
 * tool message with them, so their product must stay bounded */
#define API_MAX_TOOL_CALLS 128

typedef struct {
    int allow_forced_output; /* accept the test-only field "gem_forced_output" */
    uint32_t n_vocab;        /* token ids (logit_bias keys) must be below it; 0: unchecked */
    int n_ctx;               /* the context: longer token id lists are refused before they are copied; 0: unchecked */
    chat_format format;      /* the model's chat format (0: Gemma 4), which api_render uses */
} api_opts;

/* Values a request body may hold (json_parse_limited): what a parse may
 * allocate stays near API_MAX_JSON_VALUES nodes, whatever the body. A list
 * of token ids (completions' prompt, detokenize's tokens) is packed and
 * counts as one. */
#define API_MAX_JSON_VALUES (1 << 18)

/* A request body parsed within API_MAX_JSON_VALUES, integer arrays under
 * the top-level member `packed` packed (NULL: none); NULL with e filled (an
 * empty body, invalid JSON, too many values: 400). */
json *api_parse_body(const char *body, size_t n, const char *packed, api_error *e);

#define API_MAX_BIAS 1024 /* logit_bias entries */
/* choices: n per prompt, and n times the prompts of a completion request
 * (every choice is generated in turn on the one session) */
#define API_MAX_N 8
#define API_MAX_CHOICES 64
#define API_MAX_TOP_LOGPROBS 20      /* chat top_logprobs (OpenAI's bound) */
#define API_MAX_LEGACY_LOGPROBS 5    /* completions logprobs (OpenAI's bound) */

/* One completion prompt: text, or token ids (ids != NULL). */
typedef struct {
    const char *text;
    size_t len;
    int32_t *ids; /* owned */
    size_t n_ids;
} api_prompt;

typedef struct {
    api_kind kind;
    json *root; /* the parsed body; owns everything below that points into it */
    /* chat */
    const json *messages;
    const json *tools;       /* NULL when absent, empty or tool_choice is "none" */
    api_tool_choice tool_choice;
    const char *tool_name;   /* API_TOOLS_NAMED */
    int enable_thinking;     /* -1 not given */
    chat_format format;      /* api_opts.format: how api_render renders it */
    int single_call;         /* parallel_tool_calls: false (at most one call per answer) */
    /* completion: one prompt per entry (a list gives several), each text
     * or token ids; choice index = prompt index x n + sample */
    api_prompt *prompts;     /* owned */
    size_t n_prompts;
    int return_tokens;
    int echo;                /* the prompt's text begins each choice's text */
    /* common */
    const char *model;       /* as given, or NULL */
    int stream, include_usage;
    gem_sampling sampling;
    int seed_given;
    int n;                   /* choices per prompt, sample i drawn with seed + i */
    int logprobs;            /* each generated token's log-probability is returned */
    int top_logprobs;        /* and its top_logprobs most likely alternatives */
    long max_tokens;         /* -1: until the context ends */
    const char *stop[API_MAX_STOP];
    size_t stop_len[API_MAX_STOP];
    int n_stop;
    int32_t *bias_ids;       /* owned: logit_bias, in sampling.bias_ids/bias */
    float *bias;
    int cache_prompt;        /* reuse the cached prefix (default 1) */
    int ignore_eos;          /* end tokens are ordinary tokens (llama.cpp's field; benchmarks) */
    /* response_format: 0 text, API_JSON_OBJECT, or API_JSON_SCHEMA with
     * json_schema.schema in schema (NULL when it has none: any object) */
    int json_mode;
    const json *schema;
    const char *forced_output; /* test hook: the text to "generate" instead of sampling */
    size_t forced_output_len;
} api_request;

/* Parses and validates a request body of the given kind. */
int api_parse(api_kind kind, const char *body, size_t n, const api_opts *o, api_request *r, api_error *e);
void api_request_free(api_request *r);

/* The prompt text of a chat request in the model's format (api_opts.format
 * at parse; Gemma 4's with its BOS). */
int api_render(const api_request *r, strbuf *prompt, api_error *e);
/* 1 when that prompt leaves the answer inside a reasoning block (Qwen3.5's
 * generation prompt opens <think>): its parser starts there. */
int api_opens_reasoning(const api_request *r);

/* The grammar the answer must follow (structured output), or NULL in *out
 * when nothing constrains it: tool_choice "required" or a named tool
 * (the tool-call text of gram_tool_calls: only the request's tools, their
 * arguments following their parameters' schemas; one call with
 * parallel_tool_calls false), else response_format json_object or
 * json_schema (its schema, in JSON). With thinking enabled an optional
 * thought comes first. A schema the compiler cannot honour exactly is a
 * 400 naming the keyword and its path. 0, or -1 with e filled. */
int api_grammar(const api_request *r, gram **out, api_error *e);

/* POST /tokenize {"content": str, "add_special": bool, "parse_special": bool,
 * "with_pieces": bool} (llama.cpp's fields and defaults). */
typedef struct {
    json *root;
    const char *content;
    size_t content_len;
    int add_special, parse_special, with_pieces;
} api_tokenize;
int api_parse_tokenize(const char *body, size_t n, api_tokenize *t, api_error *e);

/* POST /detokenize {"tokens": [ids]}; ids are checked against o->n_vocab,
 * and at most o->n_ctx of them are taken (0: any number). */
int api_parse_detokenize(const char *body, size_t n, const api_opts *o, int32_t **ids, size_t *n_ids, api_error *e);

#endif
