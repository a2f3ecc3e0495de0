/* Streaming parser of generated Qwen3.5 text (see chat.h).
 *
 * States: content, reasoning (between <think> and </think>, or from the
 * start when the prompt opened the block), a tool call (held whole until
 * </tool_call>), ended. As in Gemma's parser, text is emitted up to the
 * first marker and a tail that could still grow into one is held; a call
 * that does not parse becomes content with its markers.
 *
 * White space: the template writes "<think>\n" + reasoning + "\n</think>\n\n"
 * + content + "\n\n<tool_call>..." and trims both parts when it renders a
 * history, so the parser drops white space at the start of a part and
 * holds trailing white space until text follows it (dropped before a
 * marker and at the end): reasoning and content come out as the template
 * would render them back.
 *
 * A call is the template's XML form
 *   <function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n...</function>
 * (VALUE loses the one newline on each side the template adds) or a JSON
 * object {"name": ..., "arguments": {...}}. The template prints a string
 * argument raw and anything else as JSON (Python's True/False/None for
 * scalars), so a value stays a string when the request's tool declares the
 * parameter a string; otherwise a value that reads as JSON (or as Python's
 * True, False, None) is that value, and anything else is a string. */
#include <stdlib.h>
#include <string.h>

#include "chat/chat_int.h"

#define M_THINK "<think>"
#define M_THINK_END "</think>"
#define M_CALL "<tool_call>"
#define M_CALL_END "</tool_call>"
#define M_IM_END "<|im_end|>"
#define M_EOT "<|endoftext|>"

enum { S_CONTENT, S_REASONING, S_CALL, S_ENDED = CHAT_ST_ENDED };

void chat_parser_in_reasoning(chat_parser *p) {
    if (p->format == CHAT_FORMAT_QWEN35 && p->st == S_CONTENT) {
        p->st = S_REASONING;
        p->skip_ws = 1;
    }
}

static int is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

/* Emits s[0..n) of a part, dropping leading white space after a part
 * opened and holding trailing white space until text follows it. */
static void emit_part(chat_parser *p, chat_ev_kind k, const char *s, size_t n) {
    if (!n) return; /* s may be NULL: nothing pending */
    if (p->skip_ws) {
        while (n && is_ws(*s)) s++, n--;
        if (!n) return;
        p->skip_ws = 0;
    }
    size_t t = n;
    while (t && is_ws(s[t - 1])) t--;
    if (t) {
        chat_emit(p, k, p->ws.p, p->ws.len);
        p->ws.len = 0;
        chat_emit(p, k, s, t);
    }
    sb_put(&p->ws, s + t, n - t);
}

/* A part ends at a marker: its held white space goes. */
static void end_part(chat_parser *p) {
    p->ws.len = 0;
    p->skip_ws = 1;
}

/* ---- calls ---- */

static const char *trim(const char *s, size_t *n) {
    while (*n && is_ws(*s)) s++, (*n)--;
    while (*n && is_ws(s[*n - 1])) (*n)--;
    return s;
}

static int starts(const char *s, size_t n, const char *m) {
    size_t l = strlen(m);
    return n >= l && !memcmp(s, m, l);
}

/* Whether the request's tool `name` declares parameter `key` a string. */
static int declared_string(const json *tools, const char *name, const char *key, size_t klen) {
    for (size_t i = 0; tools && tools->type == JSON_ARRAY && i < tools->len; i++) {
        const json *fn = json_get(tools->items[i], "function");
        const char *fname = json_get_str(fn, "name");
        if (!fname || strcmp(fname, name)) continue;
        const json *props = json_get(json_get(fn, "parameters"), "properties");
        for (size_t k = 0; props && props->type == JSON_OBJECT && k < props->len; k++) {
            if (props->key_lens[k] != klen || memcmp(props->keys[k], key, klen)) continue;
            const json *ty = json_get(props->items[k], "type");
            if (ty && ty->type == JSON_STRING) return !strcmp(ty->str, "string");
            for (size_t j = 0; ty && ty->type == JSON_ARRAY && j < ty->len; j++)
                if (ty->items[j]->type == JSON_STRING && !strcmp(ty->items[j]->str, "string")) return 1;
            return 0;
        }
    }
    return 0;
}

/* One parameter value as JSON text (see the file comment). */
static void put_value(strbuf *o, const char *v, size_t n, int as_string) {
    if (!as_string) {
        gem_err err;
        json *j = n ? json_parse(v, n, &err) : NULL;
        if (j) {
            json_dump(j, o);
            json_free(j);
            return;
        }
        if (n == 4 && !memcmp(v, "True", 4)) { sb_puts(o, "true"); return; }
        if (n == 5 && !memcmp(v, "False", 5)) { sb_puts(o, "false"); return; }
        if (n == 4 && !memcmp(v, "None", 4)) { sb_puts(o, "null"); return; }
    }
    json_quote(v, n, o);
}

/* <function=NAME>...</function> to name and arguments; 0 or -1. */
static int parse_xml_call(const json *tools, const char *s, size_t n, strbuf *name, strbuf *args) {
    if (!starts(s, n, "<function=")) return -1;
    const char *end = s + n, *q = s + 10;
    const char *gt = memchr(q, '>', (size_t)(end - q));
    if (!gt || gt == q) return -1;
    for (const char *c = q; c < gt; c++) /* a name is one word of printable text */
        if ((unsigned char)*c <= ' ' || *c == '<') return -1;
    sb_put(name, q, (size_t)(gt - q));
    const char *fname = sb_cstr(name);
    q = gt + 1;
    sb_putc(args, '{');
    for (int first = 1;; first = 0) {
        while (q < end && is_ws(*q)) q++;
        if (q == end) break; /* a missing </function> is forgiven */
        if (starts(q, (size_t)(end - q), "</function>")) {
            q += 11;
            while (q < end && is_ws(*q)) q++;
            if (q != end) return -1;
            break;
        }
        if (!starts(q, (size_t)(end - q), "<parameter=")) return -1;
        const char *key = q + 11;
        const char *kend = memchr(key, '>', (size_t)(end - key));
        if (!kend || kend == key) return -1;
        for (const char *c = key; c < kend; c++)
            if (*c == '\n' || *c == '<') return -1;
        const char *v = kend + 1;
        const char *vend = memmem(v, (size_t)(end - v), "</parameter>", 12);
        if (!vend) return -1;
        q = vend + 12;
        /* the template's "\n" on each side of the value */
        if (v < vend && *v == '\n') v++;
        if (vend > v && vend[-1] == '\n') vend--;
        if (!first) sb_putc(args, ',');
        json_quote(key, (size_t)(kend - key), args);
        sb_putc(args, ':');
        put_value(args, v, (size_t)(vend - v), declared_string(tools, fname, key, (size_t)(kend - key)));
    }
    sb_putc(args, '}');
    return 0;
}

/* {"name": ..., "arguments": {...} or a JSON text of one}; 0 or -1. */
static int parse_json_call(const char *s, size_t n, strbuf *name, strbuf *args) {
    gem_err err;
    json *j = json_parse(s, n, &err), *inner = NULL;
    const char *nm = json_get_str(j, "name");
    const json *a = json_get(j, "arguments");
    if (a && a->type == JSON_STRING) a = inner = json_parse(a->str, a->len, &err);
    int rc = -1;
    if (nm && *nm && (!a || a->type == JSON_OBJECT)) {
        sb_puts(name, nm);
        if (a) json_dump(a, args);
        else sb_puts(args, "{}");
        rc = 0;
    }
    json_free(inner);
    json_free(j);
    return rc;
}

/* The body of a call (between the markers) to a tool-call event; 0 or -1. */
static int emit_call(chat_parser *p, const char *s, size_t n) {
    s = trim(s, &n);
    strbuf name = {0}, args = {0};
    int rc = n && s[0] == '{' ? parse_json_call(s, n, &name, &args) : parse_xml_call(p->tools, s, n, &name, &args);
    if (!rc && (name.failed || args.failed)) rc = -1;
    if (!rc) {
        chat_event ev = {CHAT_EV_TOOL_CALL, NULL, 0, sb_cstr(&name), sb_cstr(&args)};
        p->fn(&ev, p->ctx);
    }
    sb_free(&name);
    sb_free(&args);
    return rc;
}

static const char *const content_markers[] = {M_THINK, M_CALL, M_IM_END, M_EOT};
static const char *const reasoning_markers[] = {M_THINK_END, M_IM_END, M_EOT};
static const char *const call_markers[] = {M_CALL_END, M_IM_END, M_EOT};

static void end(chat_parser *p) {
    p->st = S_ENDED;
    p->ws.len = 0;
}

void chat_qwen35_step(chat_parser *p, int final) {
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
            const chat_ev_kind k = p->st == S_CONTENT ? CHAT_EV_CONTENT : CHAT_EV_REASONING;
            const char *const *mk = p->st == S_CONTENT ? content_markers : reasoning_markers;
            const int nm = p->st == S_CONTENT ? 4 : 3;
            at = n ? chat_find_first(s, n, mk, nm, &which) : -1;
            if (at < 0) {
                size_t hold = final ? 0 : chat_held_suffix(s, n, mk, nm);
                emit_part(p, k, s, n - hold);
                chat_consume(p, n - hold);
                if (final) p->ws.len = 0; /* trailing white space of the answer */
                return;
            }
            emit_part(p, k, s, (size_t)at);
            const char *m = mk[which];
            chat_consume(p, (size_t)at + strlen(m));
            end_part(p);
            if (!strcmp(m, M_IM_END) || !strcmp(m, M_EOT)) end(p);
            else if (!strcmp(m, M_THINK)) p->st = S_REASONING;
            else if (!strcmp(m, M_CALL)) p->st = S_CALL;
            else p->st = S_CONTENT; /* </think> */
            break;
        }
        case S_CALL:
            at = n ? chat_find_first(s, n, call_markers, 3, &which) : -1;
            if (at < 0) {
                if (final) { /* unfinished call: its text is content */
                    chat_emit(p, CHAT_EV_CONTENT, M_CALL, strlen(M_CALL));
                    chat_emit(p, CHAT_EV_CONTENT, s, n);
                    chat_consume(p, n);
                }
                return;
            }
            if (which == 0 && emit_call(p, s, (size_t)at) == 0) {
                chat_consume(p, (size_t)at + strlen(M_CALL_END));
                if (++p->calls == p->max_calls) end(p);
                else p->st = S_CONTENT;
                end_part(p);
                break;
            }
            /* malformed, or cut short by an end marker: raw text as content */
            chat_emit(p, CHAT_EV_CONTENT, M_CALL, strlen(M_CALL));
            if (which == 0) {
                chat_emit(p, CHAT_EV_CONTENT, s, (size_t)at + strlen(M_CALL_END));
                chat_consume(p, (size_t)at + strlen(M_CALL_END));
                p->st = S_CONTENT;
                end_part(p);
            } else {
                chat_emit(p, CHAT_EV_CONTENT, s, (size_t)at);
                end(p);
            }
            break;
        }
    }
}
