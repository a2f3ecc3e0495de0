/* libFuzzer target: the Anthropic Messages layer (server/anthropic.h). The
 * first byte picks what the rest is: a Messages body ('r'), a count_tokens
 * body ('c'), or generated text ('g') run through the chat parser into the
 * Anthropic reply, streamed and not. Errors must carry a 4xx/5xx status and
 * serialize to valid JSON; accepted requests must render (or fail with a
 * 400); every body and every SSE event's data must be valid JSON, each
 * event named by an `event:` line that matches its data's type. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat.h"
#include "fuzz_checks.h"
#include "server/anthropic.h"
#include "util/utf8.h"

/* "event: NAME\ndata: {"type":"NAME",...}\n\n", each */
static void check_sse(const strbuf *s) {
    const char *p = s->p, *end = s->p + s->len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p)), *e = memmem(p, (size_t)(end - p), "\n\n", 2);
        if (!nl || !e || nl >= e || memcmp(p, "event: ", 7) || memcmp(nl + 1, "data: ", 6)) abort();
        const char *d = nl + 7;
        json *v = json_parse(d, (size_t)(e - d), NULL);
        const char *type = json_get_str(v, "type");
        if (!type || strlen(type) != (size_t)(nl - p - 7) || memcmp(type, p + 7, strlen(type))) abort();
        json_free(v);
        p = e + 2;
    }
}

static void on_ev(const chat_event *ev, void *ctx) { anth_reply_event(ctx, ev); }

static void generated(const char *s, size_t n) {
    for (int stream = 0; stream < 2; stream++) {
        anth_reply_opts o = {stream, "msg_0123", "m"};
        anth_reply *r = anth_reply_new(&o);
        chat_parser *p = chat_parser_new(on_ev, r);
        const anth_usage u = {5, 2, 3};
        anth_reply_start(r, &u);
        for (size_t i = 0; i < n; i += 3) chat_parser_feed(p, s + i, n - i < 3 ? n - i : 3);
        chat_parser_finish(p);
        anth_reply_finish(r, n % 3 == 0, n % 3 == 1 ? s : NULL, n % 3 == 1 ? n / 2 : 0, &u);
        strbuf *out = anth_reply_out(r);
        if (stream) check_sse(out);
        else fz_check_json(out->p, out->len);
        if (!utf8_valid(out->p, out->len)) abort();
        chat_parser_free(p);
        anth_reply_free(r);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!size) return 0;
    const char *b = (const char *)data + 1;
    size_t n = size - 1;
    api_error e = {0};
    api_opts ao = {1, 262144, 64, CHAT_FORMAT_GEMMA4};
    switch (data[0]) {
    case 'r':
    case 'c': {
        api_request r;
        if (anth_parse(b, n, &ao, data[0] == 'c', &r, &e)) {
            fz_check_error(&e, anth_error_json);
        } else {
            if (r.kind != API_CHAT || !r.messages || (data[0] == 'r' && r.max_tokens < 1)) abort();
            fz_check_chat(&r, anth_error_json);
        }
        api_request_free(&r);
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
