/* libFuzzer target: the server's request mapping and response assembly.
 * The first byte picks what the rest is: a chat request body ('c'), a
 * completion body ('p'), a tokenize or detokenize body ('t', 'd'), or
 * generated text ('g') to run through the stop filter, the chat parser and
 * the reply builders (chat and completions, with log-probability entries
 * and two choices). Errors must carry a 4xx/5xx status and serialize to
 * valid JSON; accepted chat requests must render (or fail with 400); every
 * reply body and SSE event must be valid JSON. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat.h"
#include "engine/stop.h"
#include "fuzz_checks.h"
#include "server/api.h"
#include "server/reply.h"
#include "util/utf8.h"


/* Each "data: " event of an SSE stream is JSON, or [DONE] last. */
static void check_sse(const strbuf *s) {
    const char *p = s->p, *end = s->p + s->len;
    while (p < end) {
        const char *e = memmem(p, (size_t)(end - p), "\n\n", 2);
        if (!e || memcmp(p, "data: ", 6)) abort();
        if (!(e - p - 6 == 6 && !memcmp(p + 6, "[DONE]", 6))) fz_check_json(p + 6, (size_t)(e - p - 6));
        p = e + 2;
    }
}

static void on_ev(const chat_event *ev, void *ctx) {
    reply *r = ctx;
    if (ev->kind == CHAT_EV_CONTENT) reply_text(r, ev->text, ev->len);
    else if (ev->kind == CHAT_EV_REASONING) reply_reasoning(r, ev->text, ev->len);
    else reply_tool_call(r, ev->name, ev->arguments);
}

typedef struct {
    chat_parser *p;
} sink;

static void to_parser(const char *p, size_t n, void *ctx) { chat_parser_feed(((sink *)ctx)->p, p, n); }

static void generated(const char *s, size_t n) {
    static const char *const stops[] = {"STOP", "<end>"};
    static const size_t lens[] = {4, 5};
    for (int mode = 0; mode < 4; mode++) {
        /* chat, then completions with logprobs: every 3-byte piece is a
         * "token" with the bytes as its text, listed before its text; the
         * input's first half is choice 0, the rest choice 1 */
        const int stream = mode & 1, chat = mode < 2;
        reply_opts o = {chat ? API_CHAT : API_COMPLETION, stream, 1, 0, "chatcmpl-x", "m", "gem", 1, 1};
        reply *r = reply_new(&o);
        sink k = {chat_parser_new(on_ev, r)};
        stopper st = {.stop = stops, .len = lens, .n = 2, .skip_open = CHAT_REASONING_OPEN, .skip_close = CHAT_REASONING_CLOSE};
        reply_start(r);
        for (size_t i = 0; i < n; i += 3) {
            const size_t m = n - i < 3 ? n - i : 3;
            reply_alt top[2] = {{s + i, m, -0.5}, {s, n < 2 ? n : 2, -1.5}};
            reply_lp e = {{s + i, m, i ? -0.25 : NAN}, top, i % 2 ? 2 : 0, (long)i};
            reply_logprob(r, &e);
            if (!chat) {
                reply_text(r, s + i, m);
            } else {
                stopper_feed(&st, s + i, m, to_parser, &k);
            }
            if (i < n / 2 && i + 3 >= n / 2) {
                if (chat) { /* text the stopper holds goes to the next choice's parser */
                    chat_parser_finish(k.p);
                    chat_parser_free(k.p);
                    k.p = chat_parser_new(on_ev, r);
                }
                reply_next(r, "stop");
            }
        }
        stopper_flush(&st, to_parser, &k);
        chat_parser_finish(k.p);
        reply_usage u = {.prompt_tokens = 1, .completion_tokens = 2};
        reply_finish(r, n % 2 ? "stop" : "length", &u);
        if (stream) check_sse(reply_out(r));
        else fz_check_json(reply_out(r)->p, reply_out(r)->len);
        if (!utf8_valid(reply_out(r)->p, reply_out(r)->len)) abort();
        stopper_free(&st);
        chat_parser_free(k.p);
        reply_free(r);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!size) return 0;
    const char *b = (const char *)data + 1;
    size_t n = size - 1;
    api_error e = {0};
    api_opts ao = {1, 262144, 64, CHAT_FORMAT_GEMMA4};
    switch (data[0]) {
    case 'c':
    case 'p': {
        api_request r;
        const int parsed = !api_parse(data[0] == 'c' ? API_CHAT : API_COMPLETION, b, n, &ao, &r, &e);
        if (!parsed) {
            fz_check_error(&e, api_error_json);
        } else if (r.kind == API_CHAT) {
            fz_check_chat(&r, api_error_json);
        } else {
            /* a parsed completion has 1 to API_MAX_CHOICES prompts, each text or non-empty ids */
            if (!r.n_prompts || r.n_prompts * (size_t)r.n > API_MAX_CHOICES) abort();
            for (size_t i = 0; i < r.n_prompts; i++)
                if (r.prompts[i].ids ? !r.prompts[i].n_ids : !r.prompts[i].text) abort();
        }
        /* n, top_logprobs and logprobs within their ranges, and consistent */
        if (parsed && (r.n < 1 || r.n > API_MAX_N || r.top_logprobs < 0 || r.top_logprobs > API_MAX_TOP_LOGPROBS ||
                       (r.top_logprobs && !r.logprobs)))
            abort();
        api_request_free(&r);
        break;
    }
    case 't': {
        api_tokenize t;
        if (api_parse_tokenize(b, n, &t, &e)) fz_check_error(&e, api_error_json);
        else if (!t.content) abort();
        json_free(t.root);
        break;
    }
    case 'd': {
        int32_t *ids;
        size_t k;
        const api_opts dao = {0, 1000, 64, CHAT_FORMAT_GEMMA4};
        if (api_parse_detokenize(b, n, &dao, &ids, &k, &e)) fz_check_error(&e, api_error_json);
        else
            for (size_t i = 0; i < k; i++)
                if (ids[i] < 0 || ids[i] >= 1000) abort();
        free(ids);
        break;
    }
    case 'g':
        generated(b, n);
        break;
    default:
        break;
    }
    return 0;
}
