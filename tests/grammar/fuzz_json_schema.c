/* libFuzzer target: JSON Schema compilation and matching. The first byte
 * picks the mode ('j' JSON syntax, 'g' Gemma syntax, 't' the schema as a
 * tool's parameters, 'r' JSON syntax behind the reasoning prefix; others
 * by value), the rest is parsed as JSON and compiled. A compiled grammar
 * is walked byte by byte (a pseudo-random allowed byte each step, closing
 * bytes preferred later so walks end); a finished text must parse
 * (json_parse, chat_args_to_json, the chat parser) and validate against
 * the schema. Never a crash, a leak, or a sentence the schema refuses. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat.h"
#include "grammar/grammar.h"
#include "schema_check.h"

typedef struct {
    const json *params;
    int calls;
} calls_ctx;

static void on_event(const chat_event *ev, void *ctx) {
    calls_ctx *c = ctx;
    if (ev->kind != CHAT_EV_TOOL_CALL) {
        if (ev->len) abort(); /* the grammar allows no text around calls */
        return;
    }
    c->calls++;
    json *v = json_parse(ev->arguments, strlen(ev->arguments), NULL);
    if (!v || (c->params && !sc_valid(c->params, c->params, v))) abort();
    json_free(v);
}

static void check_value(const json *schema, const char *p, size_t n, int gemma) {
    strbuf js = {0};
    if (gemma) {
        if (chat_args_to_json(p, n, &js)) abort();
        p = js.p;
        n = js.len;
    }
    json *v = json_parse(p, n, NULL);
    if (!v) abort();
    if (schema && !sc_valid(schema, schema, v)) abort();
    json_free(v);
    sb_free(&js);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int mode = data[0] == 'j' ? 0 : data[0] == 'g' ? 1 : data[0] == 't' ? 2 : data[0] == 'r' ? 3 : data[0] % 4;
    gem_err err;
    json *schema = json_parse((const char *)data + 1, size - 1, &err);
    if (!schema) return 0;
    json *tools = NULL;
    gram *g = NULL;
    if (mode == 2) {
        strbuf t = {0};
        sb_puts(&t, "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":");
        json_dump(schema, &t);
        sb_puts(&t, "}}]");
        tools = json_parse(t.p, t.len, NULL);
        sb_free(&t);
        if (tools) g = gram_tool_calls(tools, NULL, 2, &err);
    } else {
        g = gram_json_schema(schema, mode == 1, &err);
        if (g && mode == 3) {
            gram *r = gram_with_reasoning(g, &err);
            gram_free(g);
            g = r;
        }
    }
    if (!g) {
        if (!err.msg[0]) abort(); /* a refusal always says why */
        json_free(schema);
        json_free(tools);
        return 0;
    }
    /* a walk: one allowed byte at a time */
    uint64_t h = 0x9e3779b97f4a7c15ull ^ size;
    for (size_t i = 0; i < size; i++) h = (h ^ data[i]) * 0x100000001b3ull;
    gram_state *s = gram_state_new(g), *probe = gram_state_new(g);
    if (!s || !probe) abort();
    strbuf out = {0};
    int finished = 0;
    for (int step = 0; step < 400; step++) {
        h = h * 6364136223846793005ull + 1442695040888963407ull;
        if (gram_state_done(s) && (gram_state_ended(s) || (h >> 60) < 4)) {
            finished = 1;
            break;
        }
        uint8_t allowed[256], closing[256];
        int na = 0, nc = 0;
        for (int b = 0; b < 256; b++) {
            char ch = (char)b;
            if (gram_state_copy(probe, s)) abort();
            if (gram_state_feed(probe, &ch, 1) == 0) {
                allowed[na++] = (uint8_t)b;
                if (strchr("\"}]>:|<", b) && b) closing[nc++] = (uint8_t)b;
            }
        }
        if (!na) abort(); /* a dead end: every state must lead somewhere */
        uint8_t b = nc && step > 40 && (h >> 33) % 4 ? closing[(h >> 20) % (uint64_t)nc] : allowed[(h >> 20) % (uint64_t)na];
        char ch = (char)b;
        if (gram_state_feed(s, &ch, 1)) abort();
        sb_putc(&out, ch);
    }
    if (finished) {
        const char *p = out.p ? out.p : "";
        size_t n = out.len;
        if (mode == 2) {
            const json *params = json_get(json_get(tools->items[0], "function"), "parameters");
            calls_ctx cc = {params, 0};
            chat_parser *cp = chat_parser_new(on_event, &cc);
            chat_parser_max_calls(cp, 2);
            chat_parser_feed(cp, p, n);
            chat_parser_finish(cp);
            chat_parser_free(cp);
            if (cc.calls < 1) abort();
        } else {
            if (mode == 3 && n >= 10 && !memcmp(p, "<|channel>", 10)) {
                const char *e = memmem(p, n, "<channel|>", 10);
                if (!e) abort();
                n -= (size_t)(e + 10 - p);
                p = e + 10;
            }
            int any = schema->type == JSON_NULL || (schema->type == JSON_OBJECT && schema->len == 0);
            check_value(any ? NULL : schema, p, n, mode == 1);
        }
    }
    sb_free(&out);
    gram_state_free(s);
    gram_state_free(probe);
    gram_free(g);
    json_free(schema);
    json_free(tools);
    return 0;
}
