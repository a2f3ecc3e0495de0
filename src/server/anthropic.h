/* The Anthropic Messages API of `gem serve` (POST /v1/messages and
 * /v1/messages/count_tokens): request bodies translated to the chat request
 * the OpenAI layer produces (api.h), and generation events assembled into
 * Anthropic's message body or its SSE event sequence.
 *
 * Pure, like api.c and reply.c (no sockets, no engine), so the translation
 * is unit-tested and fuzzed. A request that passes anth_parse is a
 * validated API_CHAT api_request whose messages and tools are OpenAI-style
 * JSON built from the Anthropic ones, so the renderer sees exactly what the
 * equivalent OpenAI request would give it: system text becomes a system
 * message, tool_use blocks an assistant's tool_calls (the same ids),
 * tool_result blocks role "tool" messages with tool_call_id, thinking blocks
 * reasoning_content. Every field gem cannot honour is refused with a 400
 * that names it. Errors keep api.h's api_error; anth_error_json writes
 * them in Anthropic's shape. */
#ifndef GEM_SERVER_ANTHROPIC_H
#define GEM_SERVER_ANTHROPIC_H

#include <stddef.h>

#include "chat/chat.h"
#include "server/api.h"
#include "util/strbuf.h"

/* Parses and validates a Messages body. count_only: the count_tokens
 * route's body, where max_tokens is not required. */
int anth_parse(const char *body, size_t n, const api_opts *o, int count_only, api_request *r, api_error *e);

/* Anthropic's error type for an HTTP status (400 invalid_request_error,
 * 401 authentication_error, 404 not_found_error, 413 request_too_large,
 * 429 and 503 overloaded_error, 500 api_error, ...). */
const char *anth_error_type(int status);
/* {"type":"error","error":{"type":..,"message":..}} */
void anth_error_json(const api_error *e, strbuf *out);

typedef struct {
    int stream;
    const char *id;    /* "msg_" + hex; tool_use ids reuse the hex part */
    const char *model;
} anth_reply_opts;

typedef struct {
    int input_tokens;  /* the whole prompt; the body reports those not reused apart */
    int cached_tokens; /* prompt tokens reused from the previous request */
    int output_tokens;
} anth_usage;

typedef struct anth_reply anth_reply;

anth_reply *anth_reply_new(const anth_reply_opts *o);
void anth_reply_free(anth_reply *r);
/* Streaming: the message_start event (usage's input counts and 0 output). */
void anth_reply_start(anth_reply *r, const anth_usage *u);
/* One chat parser event: text, thinking or a tool call becomes a content
 * block (consecutive text or thinking extends the open block). */
void anth_reply_event(anth_reply *r, const chat_event *ev);
int anth_reply_n_tool_uses(const anth_reply *r);
/* The end: length (max_tokens reached), or the stop sequence that ended
 * the answer (NULL: none). stop_reason is "tool_use" when the answer made
 * tool calls and ended by itself, then "max_tokens", "stop_sequence",
 * "end_turn". Streaming: the open block's content_block_stop,
 * message_delta and message_stop; otherwise the whole body. */
void anth_reply_finish(anth_reply *r, int length, const char *stop_seq, size_t stop_len, const anth_usage *u);
/* Streaming, after a failure: an error event (the stream ends there). */
void anth_reply_error(anth_reply *r, const api_error *e);
/* The bytes to send (as reply_out in reply.h): the caller sends them and
 * sets len to 0. */
strbuf *anth_reply_out(anth_reply *r);

#endif
