/* Chat formats (see chat.h): the table of formats, dispatch to each
 * format's renderer and parser step, and the parser lifecycle and
 * streaming helpers they share (chat_int.h). */
#include <stdlib.h>
#include <string.h>

#include "chat/chat_int.h"

static const struct {
    const char *name;
    chat_markers markers;
} formats[] = {
    [CHAT_FORMAT_GEMMA4] = {"gemma4", {CHAT_REASONING_OPEN, CHAT_REASONING_CLOSE}},
    [CHAT_FORMAT_QWEN35] = {"qwen35", {"<think>", "</think>"}},
};

int chat_format_for_arch(const char *arch, chat_format *out) {
    /* the architectures whose published templates gem renders */
    static const struct {
        const char *arch;
        chat_format f;
    } by_arch[] = {{"gemma4", CHAT_FORMAT_GEMMA4}, {"qwen35", CHAT_FORMAT_QWEN35}, {"qwen35moe", CHAT_FORMAT_QWEN35}};
    for (size_t i = 0; arch && i < sizeof by_arch / sizeof by_arch[0]; i++)
        if (!strcmp(arch, by_arch[i].arch)) {
            *out = by_arch[i].f;
            return 0;
        }
    return -1;
}

const char *chat_format_name(chat_format f) { return formats[f].name; }
const chat_markers *chat_format_markers(chat_format f) { return &formats[f].markers; }

int chat_render(const chat_render_opts *o, strbuf *out, gem_err *err) {
    switch (o->format) {
    case CHAT_FORMAT_QWEN35: return chat_qwen35_render(o, out, err);
    case CHAT_FORMAT_GEMMA4: break;
    }
    return chat_gemma4_render(o, out, err);
}

int chat_render_opens_reasoning(const chat_render_opts *o) {
    return o->format == CHAT_FORMAT_QWEN35 && o->add_generation_prompt && o->enable_thinking != 0;
}

/* ---- parser ---- */

chat_parser *chat_parser_new_format(chat_format f, chat_event_fn fn, void *ctx) {
    chat_parser *p = calloc(1, sizeof *p);
    if (p) {
        p->format = f;
        p->fn = fn;
        p->ctx = ctx;
    }
    return p;
}

chat_parser *chat_parser_new(chat_event_fn fn, void *ctx) { return chat_parser_new_format(CHAT_FORMAT_GEMMA4, fn, ctx); }

void chat_parser_free(chat_parser *p) {
    if (!p) return;
    sb_free(&p->pend);
    sb_free(&p->ws);
    free(p);
}

void chat_parser_max_calls(chat_parser *p, int n) { p->max_calls = n; }
void chat_parser_set_tools(chat_parser *p, const json *tools) { p->tools = tools; }
int chat_parser_ended(const chat_parser *p) { return p->st == CHAT_ST_ENDED; }

static void step(chat_parser *p, int final) {
    switch (p->format) {
    case CHAT_FORMAT_QWEN35: chat_qwen35_step(p, final); return;
    case CHAT_FORMAT_GEMMA4: break;
    }
    chat_gemma4_step(p, final);
}

int chat_parser_feed(chat_parser *p, const char *text, size_t n) {
    if (p->st == CHAT_ST_ENDED) return 0;
    sb_put(&p->pend, text, n);
    if (p->pend.failed) return -1;
    step(p, 0);
    return p->pend.failed || p->ws.failed ? -1 : 0;
}

int chat_parser_finish(chat_parser *p) {
    step(p, 1);
    return p->pend.failed || p->ws.failed ? -1 : 0;
}

void chat_emit(chat_parser *p, chat_ev_kind k, const char *s, size_t n) {
    if (!n) return;
    chat_event ev = {k, s, n, NULL, NULL};
    p->fn(&ev, p->ctx);
}

void chat_consume(chat_parser *p, size_t n) {
    if (!n) return;
    memmove(p->pend.p, p->pend.p + n, p->pend.len - n);
    p->pend.len -= n;
    if (p->pend.p) p->pend.p[p->pend.len] = 0;
}

long chat_find_first(const char *s, size_t n, const char *const *markers, int nm, int *which) {
    long best = -1;
    for (int i = 0; i < nm; i++) {
        const char *h = memmem(s, n, markers[i], strlen(markers[i]));
        if (h && (best < 0 || h - s < best)) {
            best = h - s;
            *which = i;
        }
    }
    return best;
}

size_t chat_held_suffix(const char *s, size_t n, const char *const *markers, int nm) {
    size_t best = 0;
    for (int i = 0; i < nm; i++) {
        size_t ml = strlen(markers[i]);
        for (size_t k = ml - 1; k > best; k--) {
            if (k <= n && !memcmp(s + n - k, markers[i], k)) {
                best = k;
                break;
            }
        }
    }
    return best;
}
