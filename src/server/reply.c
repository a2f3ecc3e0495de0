/* Response assembly and stop strings (see reply.h).
 *
 * Chunks are written by hand with json_quote rather than built as json
 * trees: they are small, their field order is fixed, and one is written per
 * generated token. Tool call ids are "call_" + the response id's suffix +
 * the call's number in the response (counted over its choices), unique
 * within the server's lifetime because response ids are.
 *
 * Log-probability entries are written as JSON when they arrive, into the
 * pending lists a chunk or a choice takes (and empties). */
#include "server/reply.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/json.h"
#include "util/utf8.h"

typedef struct {
    char *name, *args;
} tool_call;

struct reply {
    reply_opts o;
    strbuf out;
    strbuf content, reasoning; /* not streaming */
    tool_call *calls;
    int n_calls, cap_calls;
    int32_t *tokens;
    size_t n_tokens, cap_tokens;
    strbuf tmp;
    int choice;    /* the current choice's index */
    int call_base; /* tool calls of the earlier choices */
    strbuf body_choices; /* not streaming: the ended choices' JSON, comma-separated */
    /* log-probability entries not yet written out, lp_n of them: a chat's
     * content list, or a completion's four legacy arrays */
    strbuf lp_content, lp_tokens, lp_values, lp_top, lp_offsets;
    int lp_n;
};

void utf8_sanitize(const char *s, size_t n, strbuf *out) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, run = 0;
    while (i < n) {
        unsigned char b = p[i];
        size_t len = b < 0x80 ? 1 : b >= 0xc2 && b <= 0xdf ? 2 : b >= 0xe0 && b <= 0xef ? 3 : b >= 0xf0 && b <= 0xf4 ? 4 : 0;
        if (len && (len == 1 || (i + len <= n && utf8_valid(s + i, len)))) {
            i += len;
            run += len;
            continue;
        }
        sb_put(out, s + i - run, run);
        run = 0;
        sb_puts(out, "\xef\xbf\xbd");
        i++;
    }
    sb_put(out, s + i - run, run);
}

reply *reply_new(const reply_opts *o) {
    reply *r = calloc(1, sizeof *r);
    if (r) r->o = *o;
    return r;
}

void reply_free(reply *r) {
    if (!r) return;
    for (int i = 0; i < r->n_calls; i++) {
        free(r->calls[i].name);
        free(r->calls[i].args);
    }
    free(r->calls);
    free(r->tokens);
    sb_free(&r->out);
    sb_free(&r->content);
    sb_free(&r->reasoning);
    sb_free(&r->tmp);
    sb_free(&r->body_choices);
    sb_free(&r->lp_content);
    sb_free(&r->lp_tokens);
    sb_free(&r->lp_values);
    sb_free(&r->lp_top);
    sb_free(&r->lp_offsets);
    free(r);
}

strbuf *reply_out(reply *r) { return &r->out; }
int reply_n_tool_calls(const reply *r) { return r->n_calls; }

static void put_str(strbuf *o, const char *s) { json_quote(s, strlen(s), o); }

/* The fields every chunk and body start with. */
static void put_envelope(reply *r, const char *object) {
    strbuf *o = &r->out;
    sb_puts(o, "{\"id\":");
    put_str(o, r->o.id);
    sb_puts(o, ",\"object\":");
    put_str(o, object);
    sb_printf(o, ",\"created\":%lld,\"model\":", r->o.created);
    put_str(o, r->o.model);
    if (r->o.fingerprint) {
        sb_puts(o, ",\"system_fingerprint\":");
        put_str(o, r->o.fingerprint);
    }
}

static const char *chunk_object(const reply *r) {
    return r->o.kind == API_CHAT ? "chat.completion.chunk" : "text_completion";
}

/* A log-probability as JSON: finite, or null (NAN: no value). */
static void put_logprob(strbuf *o, double v) {
    if (isfinite(v)) sb_printf(o, "%.9g", v);
    else sb_puts(o, "null");
}

/* The "logprobs" member's value: the pending entries (emptied), or null
 * when not asked for, or when a chunk has none. */
static void put_logprobs(reply *r, strbuf *o) {
    if (!r->o.logprobs || (r->o.stream && !r->lp_n)) {
        sb_puts(o, "null");
        return;
    }
    if (r->o.kind == API_CHAT) {
        sb_puts(o, "{\"content\":[");
        sb_put(o, r->lp_content.p, r->lp_content.len);
        sb_puts(o, "],\"refusal\":null}");
    } else {
        sb_puts(o, "{\"tokens\":[");
        sb_put(o, r->lp_tokens.p, r->lp_tokens.len);
        sb_puts(o, "],\"token_logprobs\":[");
        sb_put(o, r->lp_values.p, r->lp_values.len);
        sb_puts(o, "],\"top_logprobs\":[");
        sb_put(o, r->lp_top.p, r->lp_top.len);
        sb_puts(o, "],\"text_offset\":[");
        sb_put(o, r->lp_offsets.p, r->lp_offsets.len);
        sb_puts(o, "]}");
    }
    r->lp_content.len = r->lp_tokens.len = r->lp_values.len = r->lp_top.len = r->lp_offsets.len = 0;
    r->lp_n = 0;
}

/* data: {envelope, "choices":[{"index":i, <choice>, "logprobs":..,
 * "finish_reason":..}]} for one streamed event. choice is the JSON of the
 * delta (chat) or text (completion) member, without braces. */
static void put_chunk(reply *r, const char *choice, const char *finish) {
    strbuf *o = &r->out;
    sb_puts(o, "data: ");
    put_envelope(r, chunk_object(r));
    sb_printf(o, ",\"choices\":[{\"index\":%d,", r->choice);
    sb_puts(o, choice);
    sb_puts(o, ",\"logprobs\":");
    put_logprobs(r, o);
    sb_puts(o, ",\"finish_reason\":");
    if (finish) put_str(o, finish);
    else sb_puts(o, "null");
    sb_puts(o, "}]");
    if (r->o.include_usage) sb_puts(o, ",\"usage\":null");
    sb_puts(o, "}\n\n");
}

void reply_start(reply *r) {
    if (!r->o.stream || r->o.kind != API_CHAT) return;
    put_chunk(r, "\"delta\":{\"role\":\"assistant\",\"content\":\"\"}", NULL);
}

static void stream_text(reply *r, const char *field, const char *s, size_t n) {
    strbuf *t = &r->tmp;
    t->len = 0;
    strbuf clean = {0};
    utf8_sanitize(s, n, &clean);
    if (r->o.kind == API_CHAT) sb_printf(t, "\"delta\":{\"%s\":", field);
    else sb_puts(t, "\"text\":");
    json_quote(clean.p ? clean.p : "", clean.len, t);
    if (r->o.kind == API_CHAT) sb_putc(t, '}');
    sb_free(&clean);
    put_chunk(r, sb_cstr(t), NULL);
}

void reply_text(reply *r, const char *s, size_t n) {
    if (!n) return;
    if (r->o.stream) stream_text(r, "content", s, n);
    else utf8_sanitize(s, n, &r->content);
}

void reply_reasoning(reply *r, const char *s, size_t n) {
    if (!n) return;
    if (r->o.stream) stream_text(r, "reasoning_content", s, n);
    else utf8_sanitize(s, n, &r->reasoning);
}

static void put_call(reply *r, strbuf *o, int i, int with_index) {
    sb_puts(o, "{");
    if (with_index) sb_printf(o, "\"index\":%d,", i);
    const char *dash = strchr(r->o.id, '-');
    sb_printf(o, "\"id\":\"call_%s_%d\",\"type\":\"function\",\"function\":{\"name\":", dash ? dash + 1 : r->o.id,
              r->call_base + i);
    put_str(o, r->calls[i].name);
    sb_puts(o, ",\"arguments\":");
    put_str(o, r->calls[i].args);
    sb_puts(o, "}}");
}

void reply_tool_call(reply *r, const char *name, const char *arguments) {
    if (r->n_calls == r->cap_calls) {
        int c = r->cap_calls ? 2 * r->cap_calls : 4;
        tool_call *nc = realloc(r->calls, (size_t)c * sizeof *nc);
        if (!nc) {
            r->out.failed = 1;
            return;
        }
        r->calls = nc;
        r->cap_calls = c;
    }
    strbuf n = {0}, a = {0};
    utf8_sanitize(name, strlen(name), &n);
    utf8_sanitize(arguments, strlen(arguments), &a);
    r->calls[r->n_calls].name = strdup(sb_cstr(&n));
    r->calls[r->n_calls].args = strdup(sb_cstr(&a));
    sb_free(&n);
    sb_free(&a);
    int i = r->n_calls++;
    if (!r->calls[i].name || !r->calls[i].args) r->out.failed = 1;
    if (!r->o.stream || r->out.failed) return;
    /* one chunk per call: index, id, type, name and the whole arguments */
    strbuf *t = &r->tmp;
    t->len = 0;
    sb_puts(t, "\"delta\":{\"tool_calls\":[");
    put_call(r, t, i, 1);
    sb_puts(t, "]}");
    put_chunk(r, sb_cstr(t), NULL);
}

void reply_token(reply *r, int32_t id) {
    if (!r->o.return_tokens) return;
    if (r->n_tokens == r->cap_tokens) {
        size_t c = r->cap_tokens ? 2 * r->cap_tokens : 64;
        int32_t *t = realloc(r->tokens, c * sizeof *t);
        if (!t) {
            r->out.failed = 1;
            return;
        }
        r->tokens = t;
        r->cap_tokens = c;
    }
    r->tokens[r->n_tokens++] = id;
}

static void put_usage(strbuf *o, const reply_usage *u) {
    sb_printf(o,
              "\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d,"
              "\"prompt_tokens_details\":{\"cached_tokens\":%d},"
              "\"completion_tokens_details\":{\"reasoning_tokens\":%d}},"
              "\"timings\":{\"cache_n\":%d,\"prompt_n\":%d,\"prompt_ms\":%.3f,\"predicted_n\":%d,\"predicted_ms\":%.3f}",
              u->prompt_tokens, u->completion_tokens, u->prompt_tokens + u->completion_tokens, u->cached_tokens,
              u->reasoning_tokens,
              u->cached_tokens, u->prompt_tokens - u->cached_tokens, u->prompt_ms, u->completion_tokens,
              u->predicted_ms);
    /* llama-server's shape: inside timings, whenever the server has a drafter */
    if (u->spec && !o->failed && o->len && o->p[o->len - 1] == '}') {
        o->len--; /* reopen the timings object */
        sb_printf(o, ",\"draft_n\":%ld,\"draft_n_accepted\":%ld}", u->draft_n, u->draft_n_accepted);
    }
}

static void put_tokens(reply *r, strbuf *o) {
    if (!r->o.return_tokens) return;
    sb_puts(o, ",\"tokens\":[");
    for (size_t i = 0; i < r->n_tokens; i++) sb_printf(o, i ? ",%d" : "%d", r->tokens[i]);
    sb_putc(o, ']');
}

/* A token's text as a JSON string (sanitised) and its bytes as a list. */
static void put_token_text(reply *r, strbuf *o, const char *p, size_t n) {
    strbuf *t = &r->tmp;
    t->len = 0;
    utf8_sanitize(p, n, t);
    json_quote(t->p ? t->p : "", t->len, o);
}

static void put_bytes(strbuf *o, const char *p, size_t n) {
    sb_putc(o, '[');
    for (size_t i = 0; i < n; i++) sb_printf(o, i ? ",%u" : "%u", (unsigned)(unsigned char)p[i]);
    sb_putc(o, ']');
}

/* A completion's top_logprobs object gets each key once: a key already
 * written begins with '{' or ',' then the quoted text (quotes inside a key
 * are escaped, so this spelling never occurs inside another key). */
static int has_key(const strbuf *o, size_t from, const char *quoted, size_t n) {
    for (size_t i = from; i + 1 + n < o->len; i++)
        if ((o->p[i] == '{' || o->p[i] == ',') && !memcmp(o->p + i + 1, quoted, n) && o->p[i + 1 + n] == ':') return 1;
    return 0;
}

static void put_top_key(reply *r, strbuf *o, size_t from, const reply_alt *a) {
    strbuf q = {0};
    put_token_text(r, &q, a->text, a->len);
    if (!q.failed && !has_key(o, from, q.p, q.len)) {
        if (o->len > from + 1) sb_putc(o, ',');
        sb_put(o, q.p, q.len);
        sb_putc(o, ':');
        put_logprob(o, a->logprob);
    }
    sb_free(&q);
}

void reply_logprob(reply *r, const reply_lp *e) {
    if (!r->o.logprobs) return;
    if (r->o.kind == API_CHAT) {
        strbuf *o = &r->lp_content;
        if (r->lp_n) sb_putc(o, ',');
        sb_puts(o, "{\"token\":");
        put_token_text(r, o, e->tok.text, e->tok.len);
        sb_puts(o, ",\"logprob\":");
        put_logprob(o, e->tok.logprob);
        sb_puts(o, ",\"bytes\":");
        put_bytes(o, e->tok.text, e->tok.len);
        sb_puts(o, ",\"top_logprobs\":[");
        for (int i = 0; i < e->n_top; i++) {
            sb_puts(o, i ? ",{\"token\":" : "{\"token\":");
            put_token_text(r, o, e->top[i].text, e->top[i].len);
            sb_puts(o, ",\"logprob\":");
            put_logprob(o, e->top[i].logprob);
            sb_puts(o, ",\"bytes\":");
            put_bytes(o, e->top[i].text, e->top[i].len);
            sb_putc(o, '}');
        }
        sb_puts(o, "]}");
    } else {
        const char *sep = r->lp_n ? "," : "";
        sb_puts(&r->lp_tokens, sep);
        put_token_text(r, &r->lp_tokens, e->tok.text, e->tok.len);
        sb_puts(&r->lp_values, sep);
        put_logprob(&r->lp_values, e->tok.logprob);
        sb_puts(&r->lp_top, sep);
        if (isnan(e->tok.logprob)) {
            sb_puts(&r->lp_top, "null");
        } else {
            const size_t from = r->lp_top.len;
            sb_putc(&r->lp_top, '{');
            for (int i = 0; i < e->n_top; i++) put_top_key(r, &r->lp_top, from, &e->top[i]);
            put_top_key(r, &r->lp_top, from, &e->tok);
            sb_putc(&r->lp_top, '}');
        }
        sb_printf(&r->lp_offsets, "%s%ld", sep, e->text_offset);
    }
    r->lp_n++;
}

/* Ends the current choice: its final chunk, or its JSON in the body's list;
 * the next choice starts empty. */
static void end_choice(reply *r, const char *finish) {
    if (r->o.kind == API_CHAT && r->n_calls && !strcmp(finish, "stop")) finish = "tool_calls";
    if (r->o.stream) {
        strbuf *t = &r->tmp;
        t->len = 0;
        if (r->o.kind == API_CHAT) sb_puts(t, "\"delta\":{}");
        else sb_puts(t, "\"text\":\"\"");
        put_tokens(r, t);
        put_chunk(r, sb_cstr(t), finish);
    } else {
        strbuf *o = &r->body_choices;
        sb_printf(o, "%s{\"index\":%d,", r->choice ? "," : "", r->choice);
        if (r->o.kind == API_CHAT) {
            sb_puts(o, "\"message\":{\"role\":\"assistant\",\"content\":");
            if (r->n_calls && !r->content.len) sb_puts(o, "null");
            else json_quote(sb_cstr(&r->content), r->content.len, o);
            if (r->reasoning.len) {
                sb_puts(o, ",\"reasoning_content\":");
                json_quote(r->reasoning.p, r->reasoning.len, o);
            }
            if (r->n_calls) {
                sb_puts(o, ",\"tool_calls\":[");
                for (int i = 0; i < r->n_calls; i++) {
                    if (i) sb_putc(o, ',');
                    put_call(r, o, i, 0);
                }
                sb_putc(o, ']');
            }
            sb_putc(o, '}');
        } else {
            sb_puts(o, "\"text\":");
            json_quote(sb_cstr(&r->content), r->content.len, o);
            put_tokens(r, o);
        }
        sb_puts(o, ",\"logprobs\":");
        put_logprobs(r, o);
        sb_puts(o, ",\"finish_reason\":");
        put_str(o, finish);
        sb_putc(o, '}');
        if (o->failed) r->out.failed = 1;
    }
    for (int i = 0; i < r->n_calls; i++) {
        free(r->calls[i].name);
        free(r->calls[i].args);
    }
    r->call_base += r->n_calls;
    r->n_calls = 0;
    r->n_tokens = 0;
    r->content.len = r->reasoning.len = 0;
}

void reply_next(reply *r, const char *finish) {
    end_choice(r, finish);
    r->choice++;
    reply_start(r);
}

void reply_finish(reply *r, const char *finish, const reply_usage *u) {
    end_choice(r, finish);
    strbuf *o = &r->out;
    if (r->o.stream) {
        if (r->o.include_usage) {
            sb_puts(o, "data: ");
            put_envelope(r, chunk_object(r));
            sb_puts(o, ",\"choices\":[],");
            put_usage(o, u);
            sb_puts(o, "}\n\n");
        }
        sb_puts(o, "data: [DONE]\n\n");
        return;
    }
    put_envelope(r, r->o.kind == API_CHAT ? "chat.completion" : "text_completion");
    sb_puts(o, ",\"choices\":[");
    sb_put(o, r->body_choices.p, r->body_choices.len);
    sb_puts(o, "],");
    put_usage(o, u);
    sb_putc(o, '}');
}
