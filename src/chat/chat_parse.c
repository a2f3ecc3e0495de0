/* Streaming parser of generated Gemma 4 text (see chat.h).
 *
 * Text accumulates in a pending buffer. In content and reasoning states the
 * buffer is emitted up to the first marker, and whatever tail could still
 * grow into a marker (a suffix that is a proper prefix of one) is held until
 * the next feed or the finish. A tool call is held whole until its closing
 * marker and then converted; if it does not parse, its raw text becomes
 * content. End markers stop the parser: anything after them is ignored. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat_int.h"

#define M_CHANNEL_OPEN CHAT_REASONING_OPEN
#define M_CHANNEL_CLOSE CHAT_REASONING_CLOSE
#define M_CALL_OPEN "<|tool_call>"
#define M_CALL_CLOSE "<tool_call|>"
#define M_TURN_END "<turn|>"
#define M_TOOL_RESPONSE "<|tool_response>"
#define M_QUOTE "<|\"|>"
#define MAX_CHANNEL_HEADER 64

enum { S_CONTENT, S_HEADER, S_REASONING, S_CALL, S_ENDED = CHAT_ST_ENDED };

/* ---- Gemma argument syntax to JSON ---- */

typedef struct {
    const char *s;
    size_t n, i;
    int depth;
} argp;

static void ws(argp *a) {
    while (a->i < a->n && (a->s[a->i] == ' ' || a->s[a->i] == '\n' || a->s[a->i] == '\t' || a->s[a->i] == '\r')) a->i++;
}

static int at_quote(const argp *a) { return a->n - a->i >= 5 && !memcmp(a->s + a->i, M_QUOTE, 5); }

static int quoted(argp *a, strbuf *o) {
    a->i += 5;
    const char *end = memmem(a->s + a->i, a->n - a->i, M_QUOTE, 5);
    if (!end) return -1;
    json_quote(a->s + a->i, (size_t)(end - (a->s + a->i)), o);
    a->i = (size_t)(end - a->s) + 5;
    return 0;
}

static int value(argp *a, strbuf *o);

static int object(argp *a, strbuf *o) {
    a->i++; /* '{' */
    sb_putc(o, '{');
    ws(a);
    if (a->i < a->n && a->s[a->i] == '}') {
        a->i++;
        sb_putc(o, '}');
        return 0;
    }
    for (int first = 1;; first = 0) {
        ws(a);
        if (!first) sb_putc(o, ',');
        if (at_quote(a)) {
            if (quoted(a, o)) return -1;
        } else {
            size_t k = a->i;
            while (k < a->n && !strchr(":,{}[] \n\t\r", a->s[k]) && !(a->n - k >= 5 && !memcmp(a->s + k, M_QUOTE, 5))) k++;
            if (k == a->i) return -1;
            json_quote(a->s + a->i, k - a->i, o);
            a->i = k;
        }
        ws(a);
        if (a->i >= a->n || a->s[a->i] != ':') return -1;
        a->i++;
        sb_putc(o, ':');
        if (value(a, o)) return -1;
        ws(a);
        if (a->i >= a->n) return -1;
        char c = a->s[a->i++];
        if (c == '}') break;
        if (c != ',') return -1;
    }
    sb_putc(o, '}');
    return 0;
}

static int array(argp *a, strbuf *o) {
    a->i++; /* '[' */
    sb_putc(o, '[');
    ws(a);
    if (a->i < a->n && a->s[a->i] == ']') {
        a->i++;
        sb_putc(o, ']');
        return 0;
    }
    for (int first = 1;; first = 0) {
        if (!first) sb_putc(o, ',');
        if (value(a, o)) return -1;
        ws(a);
        if (a->i >= a->n) return -1;
        char c = a->s[a->i++];
        if (c == ']') break;
        if (c != ',') return -1;
    }
    sb_putc(o, ']');
    return 0;
}

static int number(argp *a, strbuf *o) {
    size_t k = a->i;
    if (k < a->n && a->s[k] == '-') k++;
    size_t digits = k;
    while (k < a->n && a->s[k] >= '0' && a->s[k] <= '9') k++;
    if (k == digits) return -1;
    if (k < a->n && a->s[k] == '.') {
        size_t f = ++k;
        while (k < a->n && a->s[k] >= '0' && a->s[k] <= '9') k++;
        if (k == f) return -1;
    }
    if (k < a->n && (a->s[k] == 'e' || a->s[k] == 'E')) {
        k++;
        if (k < a->n && (a->s[k] == '+' || a->s[k] == '-')) k++;
        size_t e = k;
        while (k < a->n && a->s[k] >= '0' && a->s[k] <= '9') k++;
        if (k == e) return -1;
    }
    char buf[64];
    if (k - a->i >= sizeof buf) return -1;
    memcpy(buf, a->s + a->i, k - a->i);
    buf[k - a->i] = 0;
    double d = strtod(buf, NULL);
    if (!isfinite(d)) return -1;
    json_num_js(d, o);
    a->i = k;
    return 0;
}

static int value(argp *a, strbuf *o) {
    if (++a->depth > JSON_MAX_DEPTH) return -1;
    ws(a);
    int rc = -1;
    if (a->i >= a->n) rc = -1;
    else if (at_quote(a)) rc = quoted(a, o);
    else if (a->s[a->i] == '{') rc = object(a, o);
    else if (a->s[a->i] == '[') rc = array(a, o);
    else if (a->n - a->i >= 4 && !memcmp(a->s + a->i, "true", 4)) { sb_puts(o, "true"); a->i += 4; rc = 0; }
    else if (a->n - a->i >= 5 && !memcmp(a->s + a->i, "false", 5)) { sb_puts(o, "false"); a->i += 5; rc = 0; }
    else if (a->n - a->i >= 4 && !memcmp(a->s + a->i, "null", 4)) { sb_puts(o, "null"); a->i += 4; rc = 0; }
    else rc = number(a, o);
    a->depth--;
    return rc;
}

int chat_args_to_json(const char *s, size_t n, strbuf *out) {
    argp a = {s, n, 0, 0};
    ws(&a);
    if (a.i >= n || s[a.i] != '{') return -1;
    size_t mark = out->len;
    if (object(&a, out)) {
        out->len = mark;
        return -1;
    }
    ws(&a);
    if (a.i != n) {
        out->len = mark;
        return -1;
    }
    return out->failed ? -1 : 0;
}

/* A whole "call:NAME{...}" (without the markers) to a tool-call event. */
static int emit_call(chat_parser *p, const char *s, size_t n) {
    if (n < 6 || memcmp(s, "call:", 5)) return -1;
    const char *brace = memchr(s + 5, '{', n - 5);
    if (!brace || brace == s + 5) return -1;
    size_t name_len = (size_t)(brace - (s + 5));
    for (size_t i = 0; i < name_len; i++)
        if (strchr(" \n\t:,}[]<>", s[5 + i])) return -1;
    strbuf args = {0}, name = {0};
    int rc = chat_args_to_json(brace, (size_t)(s + n - brace), &args);
    if (!rc) {
        sb_put(&name, s + 5, name_len);
        chat_event ev = {CHAT_EV_TOOL_CALL, NULL, 0, sb_cstr(&name), sb_cstr(&args)};
        p->fn(&ev, p->ctx);
    }
    sb_free(&args);
    sb_free(&name);
    return rc;
}

static const char *const content_markers[] = {M_CHANNEL_OPEN, M_CALL_OPEN, M_TURN_END, M_TOOL_RESPONSE};
static const char *const reasoning_markers[] = {M_CHANNEL_CLOSE, M_TURN_END, M_TOOL_RESPONSE};
static const char *const call_markers[] = {M_CALL_CLOSE, M_TURN_END, M_TOOL_RESPONSE};
static const char *const header_markers[] = {"\n", M_CHANNEL_CLOSE};

/* Processes as much of the pending text as is final. */
void chat_gemma4_step(chat_parser *p, int final) {
    for (;;) {
        char *s = p->pend.p;
        size_t n = p->pend.len;
        int which = -1;
        long at;
        switch (p->st) {
        case S_ENDED:
            p->pend.len = 0;
            return;
        case S_CONTENT:
        case S_REASONING: {
            chat_ev_kind k = p->st == S_CONTENT ? CHAT_EV_CONTENT : CHAT_EV_REASONING;
            const char *const *mk = p->st == S_CONTENT ? content_markers : reasoning_markers;
            int nm = p->st == S_CONTENT ? 4 : 3;
            at = n ? chat_find_first(s, n, mk, nm, &which) : -1;
            if (at < 0) {
                size_t hold = final ? 0 : chat_held_suffix(s, n, mk, nm);
                chat_emit(p, k, s, n - hold);
                chat_consume(p, n - hold);
                return;
            }
            chat_emit(p, k, s, (size_t)at);
            const char *m = mk[which];
            chat_consume(p, (size_t)at + strlen(m));
            if (!strcmp(m, M_TURN_END) || !strcmp(m, M_TOOL_RESPONSE)) p->st = S_ENDED;
            else if (!strcmp(m, M_CHANNEL_OPEN)) p->st = S_HEADER;
            else if (!strcmp(m, M_CALL_OPEN)) p->st = S_CALL;
            else p->st = S_CONTENT; /* <channel|> closes reasoning */
            break;
        }
        case S_HEADER:
            at = n ? chat_find_first(s, n, header_markers, 2, &which) : -1;
            if (at < 0) {
                if (n > MAX_CHANNEL_HEADER) { p->st = S_REASONING; break; } /* no header: all reasoning */
                if (final) {
                    chat_emit(p, CHAT_EV_REASONING, s, n);
                    chat_consume(p, n);
                }
                return;
            }
            if (which == 0) { /* "thought\n": the channel name is dropped */
                chat_consume(p, (size_t)at + 1);
                p->st = S_REASONING;
            } else { /* "<|channel><channel|>": an empty channel */
                chat_consume(p, (size_t)at + strlen(M_CHANNEL_CLOSE));
                p->st = S_CONTENT;
            }
            break;
        case S_CALL:
            at = n ? chat_find_first(s, n, call_markers, 3, &which) : -1;
            if (at < 0) {
                if (final) { /* unfinished call: its text is content */
                    chat_emit(p, CHAT_EV_CONTENT, M_CALL_OPEN, strlen(M_CALL_OPEN));
                    chat_emit(p, CHAT_EV_CONTENT, s, n);
                    chat_consume(p, n);
                }
                return;
            }
            if (which == 0 && emit_call(p, s, (size_t)at) == 0) {
                chat_consume(p, (size_t)at + strlen(M_CALL_CLOSE));
                p->st = ++p->calls == p->max_calls ? S_ENDED : S_CONTENT;
                break;
            }
            /* malformed, or cut short by an end marker: raw text as content */
            chat_emit(p, CHAT_EV_CONTENT, M_CALL_OPEN, strlen(M_CALL_OPEN));
            if (which == 0) {
                chat_emit(p, CHAT_EV_CONTENT, s, (size_t)at + strlen(M_CALL_CLOSE));
                chat_consume(p, (size_t)at + strlen(M_CALL_CLOSE));
                p->st = S_CONTENT;
            } else {
                chat_emit(p, CHAT_EV_CONTENT, s, (size_t)at);
                p->st = S_ENDED;
            }
            break;
        }
    }
}
