/* Response assembly for `gem serve`: generated text, reasoning and tool
 * calls to OpenAI's chat.completion / text_completion bodies, or to their
 * SSE chunk streams.
 *
 * Pure (no sockets, no engine), so the shapes are unit-tested with
 * synthetic events. When streaming, every event becomes one SSE event in
 * the outbox at once (the server sends it after each token); otherwise the
 * reply accumulates and reply_finish writes the whole body. Text is
 * sanitised to UTF-8 on the way in (a byte the model produced that is not
 * part of a valid character becomes U+FFFD), so every body is valid JSON.
 *
 * Several choices (n > 1, completion prompt lists) are written one after
 * another: reply_next ends one and begins the next (a stream's chunks carry
 * their choice's index; a body lists them in order). */
#ifndef GEM_SERVER_REPLY_H
#define GEM_SERVER_REPLY_H

#include <stddef.h>
#include <stdint.h>

#include "server/api.h"
#include "util/strbuf.h"

typedef struct {
    api_kind kind;
    int stream, include_usage, return_tokens;
    const char *id;          /* "chatcmpl-..." or "cmpl-..." */
    const char *model;
    const char *fingerprint; /* system_fingerprint */
    long long created;
    int logprobs;            /* choices carry log-probabilities (reply_logprob) */
} reply_opts;

typedef struct {
    int prompt_tokens, completion_tokens;
    int reasoning_tokens; /* of the completion tokens, the reasoning channel's (markers included) */
    int cached_tokens;   /* prompt tokens reused from the previous request */
    double prompt_ms;    /* evaluating the new prompt tokens */
    double predicted_ms; /* first to last generated token */
    int spec;            /* the server has a drafter: draft_n / draft_n_accepted are reported */
    long draft_n, draft_n_accepted;
} reply_usage;

typedef struct reply reply;

reply *reply_new(const reply_opts *o);
void reply_free(reply *r);

/* Stream of a chat: the first chunk (role "assistant"). */
void reply_start(reply *r);
void reply_text(reply *r, const char *s, size_t n); /* content (chat) or text (completion) */
void reply_reasoning(reply *r, const char *s, size_t n);
void reply_tool_call(reply *r, const char *name, const char *arguments);
void reply_token(reply *r, int32_t id); /* recorded when return_tokens */
int reply_n_tool_calls(const reply *r);

/* A token's raw bytes (special tokens spelled out) and its natural-log
 * probability. */
typedef struct {
    const char *text;
    size_t len;
    double logprob;
} reply_alt;

/* One listed token: a chat's logprobs.content entry, or one position of a
 * completion's legacy arrays. */
typedef struct {
    reply_alt tok;        /* logprob NAN: none (an echoed prompt's first token) */
    const reply_alt *top; /* the n_top most likely tokens, most likely first */
    int n_top;
    long text_offset;     /* completions: characters of the choice's text before the token */
} reply_lp;

/* Lists a token. Streaming: it goes out with the next chunk (the one that
 * carries its text, or a later one); otherwise with its choice. A chat's
 * entry lists top exactly; a completion's top_logprobs object also holds
 * the token itself (OpenAI's "up to logprobs + 1"), each text once. */
void reply_logprob(reply *r, const reply_lp *e);

/* finish: "stop" or "length"; a chat that made tool calls and stopped
 * finishes with "tool_calls". Streaming: the final chunk, the usage chunk
 * when asked for, and "data: [DONE]". Otherwise the whole JSON body. */
void reply_finish(reply *r, const char *finish, const reply_usage *u);

/* Ends the current choice with finish (as reply_finish does, without the
 * usage and the body's end) and begins the next one, its index one higher
 * (a chat stream: with its role chunk). */
void reply_next(reply *r, const char *finish);

/* The bytes to send: SSE events (streaming) or the body (after finish).
 * The caller sends them and sets len to 0. */
strbuf *reply_out(reply *r);


/* Appends s as UTF-8 with every byte that is not part of a valid character
 * replaced by U+FFFD. */
void utf8_sanitize(const char *s, size_t n, strbuf *out);

#endif
