/* Anthropic Messages requests and responses (see anthropic.h).
 *
 * The request is checked field by field against an allow-list at every
 * level (the body, each message, each content block, each tool), so a
 * field gem would silently drop is refused by name instead. The OpenAI
 * messages are built as a new JSON tree; subtrees that pass through
 * unchanged (a tool_use's input, a tool's input_schema) are moved out of
 * the parsed body rather than copied. Both trees live in the request's
 * root, which api_request_free releases.
 *
 * Content blocks of the response are numbered in the order the chat parser
 * reports them: consecutive text (or thinking) extends the open block, any
 * change of kind closes it, and each tool call is a block of its own. */
#include "server/anthropic.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/reply.h"
#include "util/json.h"

#define INVALID "invalid_request_error"

/* ---- errors ---- */

const char *anth_error_type(int status) {
    switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429:
    case 503:
    case 529: return "overloaded_error";
    case 504: return "timeout_error";
    default: return status >= 500 ? "api_error" : INVALID;
    }
}

void anth_error_json(const api_error *e, strbuf *out) {
    const char *t = anth_error_type(e->status);
    sb_puts(out, "{\"type\":\"error\",\"error\":{\"type\":");
    json_quote(t, strlen(t), out);
    sb_puts(out, ",\"message\":");
    json_quote(e->message, strlen(e->message), out);
    sb_puts(out, "}}");
}

/* ---- request ---- */

static int oom(api_error *e) { return api_fail(e, 500, "server_error", NULL, NULL, "out of memory"); }

/* Present and not null. */
static const json *field(const json *o, const char *key) {
    const json *v = json_get(o, key);
    return v && v->type != JSON_NULL ? v : NULL;
}

/* A string without NUL bytes (which a C string compare would stop at), or NULL. */
static const char *cstr(const json *v) { return v && v->type == JSON_STRING && strlen(v->str) == v->len ? v->str : NULL; }

/* Every key of object o is in the NULL-ended list allowed; else a 400
 * naming the first other one (where = the object's own name, "" for the
 * body). */
static int only_keys(const json *o, const char *const *allowed, const char *where, const char *why, api_error *e) {
    for (size_t i = 0; i < o->len; i++) {
        const char *k = o->keys[i];
        int ok = strlen(k) == o->key_lens[i];
        if (ok) {
            ok = 0;
            for (const char *const *a = allowed; *a && !ok; a++) ok = !strcmp(*a, k);
        }
        if (!ok) {
            const int kl = (int)(o->key_lens[i] < 60 ? o->key_lens[i] : 60);
            return where[0] ? api_fail(e, 400, INVALID, where, NULL, "'%s.%.*s' is not supported%s", where, kl, k, why)
                            : api_fail(e, 400, INVALID, NULL, NULL, "'%.*s' is not supported%s", kl, k, why);
        }
    }
    return 0;
}

/* Detaches o[key] from the parsed body (a null takes its place), so the
 * built tree can own it without a copy. */
static json *take(json *o, const char *key) {
    for (size_t i = 0; i < o->len; i++)
        if (o->key_lens[i] == strlen(key) && !memcmp(o->keys[i], key, o->key_lens[i])) {
            json *null = json_new(JSON_NULL), *v = o->items[i];
            if (!null) return NULL;
            o->items[i] = null;
            return v;
        }
    return NULL;
}

/* tool names and ids: Anthropic's ^[a-zA-Z0-9_-]+$ (names up to 128
 * bytes, as api.c allows; '.' too, which OpenAI names may hold) */
static int word_ok(const json *v, size_t max) {
    if (!v || v->type != JSON_STRING || !v->len || v->len > max) return 0;
    for (size_t i = 0; i < v->len; i++) {
        const char c = v->str[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
              c == '.'))
            return 0;
    }
    return 1;
}

static int get_num(const json *o, const char *key, double lo, double hi, int integer, double *out, api_error *e) {
    const json *v = field(o, key);
    if (!v) return 0;
    if (v->type != JSON_NUMBER) return api_bad_type(e, key, integer ? "an integer" : "a number", v);
    if (!(v->num >= lo && v->num <= hi))
        return api_fail(e, 400, INVALID, key, NULL, "'%s' must be between %g and %g, not %g", key, lo, hi, v->num);
    if (integer && !v->is_int) return api_fail(e, 400, INVALID, key, NULL, "'%s' must be an integer", key);
    *out = v->num;
    return 1;
}

/* cache_control is a caching hint: gem reuses the longest cached prefix of
 * every request by itself, so the hint changes nothing and is accepted
 * (clients such as Claude Code mark their blocks with it). */
static const char *const text_keys[] = {"type", "text", "cache_control", "citations", NULL};

/* a text block: its text (NULL after an error) */
static const json *text_block(const json *b, const char *p, api_error *e) {
    if (only_keys(b, text_keys, p, "", e)) return NULL;
    const json *t = json_get(b, "text");
    if (!t || t->type != JSON_STRING) {
        if (t) api_bad_type(e, p, "a text block with a string 'text'", t);
        else api_fail(e, 400, INVALID, p, NULL, "'%s.text' is required", p);
        return NULL;
    }
    const json *c = field(b, "citations");
    if (c && !(c->type == JSON_ARRAY && !c->len)) {
        api_fail(e, 400, INVALID, p, NULL, "'%s.citations' is not supported", p);
        return NULL;
    }
    return t;
}

/* {"type":"text","text":s} for an OpenAI content array */
static int push_text_part(json *parts, const char *s, size_t n) {
    json *part = json_new(JSON_OBJECT);
    if (!part || json_set(part, "type", json_new_str("text", 4)) || json_set(part, "text", json_new_str(s, n))) {
        json_free(part);
        return -1;
    }
    return json_push(parts, part);
}

/* A block type gem refuses, with why; NULL when it is not one of those. */
static const char *refused_block(const char *type) {
    static const char *const media[] = {"image", "document", "search_result", "container_upload", NULL};
    for (const char *const *m = media; *m; m++)
        if (!strcmp(type, *m)) return "is not supported: gem reads text only";
    if (!strcmp(type, "redacted_thinking")) return "is not supported: gem never produces one";
    if (!strcmp(type, "server_tool_use") || strstr(type, "_tool_result"))
        return "is not supported: gem runs no server tools";
    return NULL;
}

static int unknown_block(const char *type, const char *p, api_error *e) {
    const char *why = refused_block(type);
    if (why) return api_fail(e, 400, INVALID, p, NULL, "'%s' is a block of type '%.40s', which %s", p, type, why);
    return api_fail(e, 400, INVALID, p, NULL, "'%s.type' '%.40s' is not a content block gem knows", p, type);
}

static json *message(const char *role) {
    json *m = json_new(JSON_OBJECT);
    if (m && json_set(m, "role", json_new_str(role, strlen(role)))) {
        json_free(m);
        return NULL;
    }
    return m;
}

/* tool_result content: a string, or text blocks (an OpenAI content array). */
static json *tool_result_content(json *b, const char *p, api_error *e) {
    const json *is_err = field(b, "is_error");
    char q[96];
    snprintf(q, sizeof q, "%s.is_error", p);
    if (is_err && is_err->type != JSON_BOOL) {
        api_bad_type(e, q, "a boolean", is_err);
        return NULL;
    }
    /* Gemma's tool responses have no error flag: an error result says so
     * in its text, where the model reads it */
    const int error = is_err && is_err->boolean;
    static const char prefix[] = "Error: ";
    const json *c = field(b, "content");
    snprintf(q, sizeof q, "%s.content", p);
    if (!c || c->type == JSON_STRING) {
        strbuf s = {0};
        if (error) sb_puts(&s, prefix);
        if (c) sb_put(&s, c->str, c->len);
        json *v = s.failed ? NULL : json_new_str(s.p ? s.p : "", s.len);
        sb_free(&s);
        if (!v) oom(e);
        return v;
    }
    if (c->type != JSON_ARRAY) {
        api_bad_type(e, q, "a string or an array of text blocks", c);
        return NULL;
    }
    json *parts = json_new(JSON_ARRAY);
    if (!parts || (error && push_text_part(parts, prefix, sizeof prefix - 1))) goto fail_oom;
    for (size_t k = 0; k < c->len; k++) {
        const json *blk = c->items[k];
        char bp[128];
        snprintf(bp, sizeof bp, "%s[%zu]", q, k);
        if (blk->type != JSON_OBJECT) {
            api_bad_type(e, bp, "an object", blk);
            goto fail;
        }
        const char *type = cstr(json_get(blk, "type"));
        if (!type || strcmp(type, "text")) {
            if (type) unknown_block(type, bp, e);
            else api_fail(e, 400, INVALID, bp, NULL, "'%s.type' must be a string", bp);
            goto fail;
        }
        const json *t = text_block(blk, bp, e);
        if (!t) goto fail;
        if (push_text_part(parts, t->str, t->len)) goto fail_oom;
    }
    return parts;
fail_oom:
    oom(e);
fail:
    json_free(parts);
    return NULL;
}

/* One Anthropic message appended to out as one or more OpenAI messages. */
static int convert_message(json *m, size_t i, json *out, api_error *e) {
    char p[96];
    snprintf(p, sizeof p, "messages[%zu]", i);
    if (m->type != JSON_OBJECT) return api_bad_type(e, p, "an object", m);
    static const char *const msg_keys[] = {"role", "content", NULL};
    if (only_keys(m, msg_keys, p, "", e)) return -1;
    const json *rv = json_get(m, "role");
    const char *role = cstr(rv);
    snprintf(p, sizeof p, "messages[%zu].role", i);
    if (!rv) return api_fail(e, 400, INVALID, p, NULL, "'%s' is required", p);
    if (!role || (strcmp(role, "user") && strcmp(role, "assistant")))
        return api_fail(e, 400, INVALID, p, NULL, "'%s' must be \"user\" or \"assistant\"", p);
    const int assistant = !strcmp(role, "assistant");
    json *c = json_get(m, "content");
    snprintf(p, sizeof p, "messages[%zu].content", i);
    if (!c) return api_fail(e, 400, INVALID, p, NULL, "'%s' is required", p);
    if (c->type == JSON_STRING) {
        json *o = message(role);
        if (!o || json_push(out, o) || json_set(o, "content", json_new_str(c->str, c->len))) return oom(e);
        return 0;
    }
    if (c->type != JSON_ARRAY) return api_bad_type(e, p, "a string or an array of content blocks", c);
    if (!c->len) return api_fail(e, 400, INVALID, p, NULL, "'%s' must not be empty", p);
    /* user: text blocks gather into one user message; each tool_result is
     * a tool message of its own, in place. assistant: text, thinking and
     * tool_use blocks make one message. */
    json *parts = NULL, *calls = NULL;
    strbuf thought = {0};
    int n_thought = 0;
    for (size_t k = 0; k < c->len; k++) {
        json *b = c->items[k];
        char bp[128];
        snprintf(bp, sizeof bp, "messages[%zu].content[%zu]", i, k);
        if (b->type != JSON_OBJECT) {
            api_bad_type(e, bp, "an object", b);
            goto fail;
        }
        const json *tv = json_get(b, "type");
        const char *type = cstr(tv);
        if (!type) {
            if (tv) api_bad_type(e, bp, "a block with a string 'type'", tv);
            else api_fail(e, 400, INVALID, bp, NULL, "'%s.type' is required", bp);
            goto fail;
        }
        if (!strcmp(type, "text")) {
            const json *t = text_block(b, bp, e);
            if (!t) goto fail;
            if (!parts && !(parts = json_new(JSON_ARRAY))) goto fail_oom;
            if (push_text_part(parts, t->str, t->len)) goto fail_oom;
        } else if (!strcmp(type, "tool_result") && !assistant) {
            static const char *const keys[] = {"type", "tool_use_id", "content", "is_error", "cache_control", NULL};
            if (only_keys(b, keys, bp, "", e)) goto fail;
            const json *id = json_get(b, "tool_use_id");
            if (!word_ok(id, 256)) {
                api_fail(e, 400, INVALID, bp, NULL,
                         "'%s.tool_use_id' must be the id of a tool_use (letters, digits, '_' and '-')", bp);
                goto fail;
            }
            if (parts) { /* text before a result: a user message of its own, first */
                json *u = message("user");
                if (!u || json_push(out, u)) goto fail_oom;
                const int rc = json_set(u, "content", parts);
                parts = NULL;
                if (rc) goto fail_oom;
            }
            json *t = message("tool");
            if (!t || json_push(out, t) || json_set(t, "tool_call_id", json_new_str(id->str, id->len))) goto fail_oom;
            json *body = tool_result_content(b, bp, e);
            if (!body) goto fail;
            if (json_set(t, "content", body)) goto fail_oom;
        } else if (!strcmp(type, "tool_use") && assistant) {
            static const char *const keys[] = {"type", "id", "name", "input", "cache_control", NULL};
            if (only_keys(b, keys, bp, "", e)) goto fail;
            const json *id = json_get(b, "id"), *name = json_get(b, "name"), *input = json_get(b, "input");
            if (!word_ok(id, 256)) {
                api_fail(e, 400, INVALID, bp, NULL, "'%s.id' must be a non-empty string of letters, digits, '_' and '-'", bp);
                goto fail;
            }
            if (!word_ok(name, 128)) {
                api_fail(e, 400, INVALID, bp, NULL, "'%s.name' must be 1 to 128 letters, digits, '_', '-' or '.'", bp);
                goto fail;
            }
            if (!input || input->type != JSON_OBJECT) {
                api_fail(e, 400, INVALID, bp, NULL, "'%s.input' must be an object", bp);
                goto fail;
            }
            if (!calls && !(calls = json_new(JSON_ARRAY))) goto fail_oom;
            if (calls->len >= API_MAX_TOOL_CALLS) {
                api_fail(e, 400, INVALID, p, NULL, "'%s' has more than %d tool_use blocks", p, API_MAX_TOOL_CALLS);
                goto fail;
            }
            json *call = json_new(JSON_OBJECT), *fn;
            /* each node joins its parent before it is filled: a failure leaves nothing unowned */
            if (!call || json_push(calls, call) || json_set(call, "id", json_new_str(id->str, id->len)) ||
                json_set(call, "type", json_new_str("function", 8)) || !(fn = json_new(JSON_OBJECT)) ||
                json_set(call, "function", fn) || json_set(fn, "name", json_new_str(name->str, name->len)) ||
                json_set(fn, "arguments", take(b, "input")))
                goto fail_oom;
        } else if (!strcmp(type, "thinking") && assistant) {
            static const char *const keys[] = {"type", "thinking", "signature", NULL};
            if (only_keys(b, keys, bp, "", e)) goto fail;
            const json *t = json_get(b, "thinking"), *sig = field(b, "signature");
            if (!t || t->type != JSON_STRING) {
                api_fail(e, 400, INVALID, bp, NULL, "'%s.thinking' must be a string", bp);
                goto fail;
            }
            if (sig && sig->type != JSON_STRING) {
                api_fail(e, 400, INVALID, bp, NULL, "'%s.signature' must be a string", bp);
                goto fail;
            }
            if (n_thought++) sb_putc(&thought, '\n');
            sb_put(&thought, t->str, t->len);
        } else if (!strcmp(type, "tool_result") || !strcmp(type, "tool_use") || !strcmp(type, "thinking")) {
            api_fail(e, 400, INVALID, bp, NULL, "'%s' is a block of type '%s', which only %s messages may hold", bp, type,
                     assistant ? "user" : "assistant");
            goto fail;
        } else {
            unknown_block(type, bp, e);
            goto fail;
        }
    }
    if (assistant) {
        json *a = message("assistant");
        if (!a) goto fail_oom;
        if (json_push(out, a)) goto fail_oom;
        if (parts && json_set(a, "content", parts)) {
            parts = NULL;
            goto fail_oom;
        }
        parts = NULL;
        if (n_thought && (thought.failed || json_set(a, "reasoning_content", json_new_str(sb_cstr(&thought), thought.len))))
            goto fail_oom;
        if (calls && json_set(a, "tool_calls", calls)) {
            calls = NULL;
            goto fail_oom;
        }
        calls = NULL;
    } else if (parts) {
        json *u = message("user");
        if (!u || json_push(out, u)) goto fail_oom;
        const int rc = json_set(u, "content", parts);
        parts = NULL;
        if (rc) goto fail_oom;
    }
    sb_free(&thought);
    return 0;
fail_oom:
    oom(e);
fail:
    json_free(parts);
    json_free(calls);
    sb_free(&thought);
    return -1;
}

/* system: a string or text blocks, one system message (blocks joined by a
 * blank line: the Gemma template renders a system message's string only) */
static int convert_system(const json *s, json *out, api_error *e) {
    if (s->type != JSON_STRING && s->type != JSON_ARRAY) return api_bad_type(e, "system", "a string or an array of text blocks", s);
    strbuf t = {0};
    if (s->type == JSON_STRING) sb_put(&t, s->str, s->len);
    for (size_t k = 0; s->type == JSON_ARRAY && k < s->len; k++) {
        const json *b = s->items[k];
        char bp[64];
        snprintf(bp, sizeof bp, "system[%zu]", k);
        const char *type = b->type == JSON_OBJECT ? cstr(json_get(b, "type")) : NULL;
        const json *tx = NULL;
        if (b->type != JSON_OBJECT) api_bad_type(e, bp, "a text block", b);
        else if (!type || strcmp(type, "text")) api_fail(e, 400, INVALID, bp, NULL, "'%s' must be a text block", bp);
        else tx = text_block(b, bp, e);
        if (!tx) {
            sb_free(&t);
            return -1;
        }
        if (k) sb_puts(&t, "\n\n");
        sb_put(&t, tx->str, tx->len);
    }
    int rc = 0;
    if (t.failed) {
        rc = oom(e);
    } else if (t.len) { /* an empty system prompt is none */
        json *m = message("system");
        if (!m || json_push(out, m) || json_set(m, "content", json_new_str(t.p, t.len))) rc = oom(e);
    }
    sb_free(&t);
    return rc;
}

static int convert_tools(json *tools, json *out, api_error *e) {
    if (tools->type != JSON_ARRAY) return api_bad_type(e, "tools", "an array", tools);
    for (size_t i = 0; i < tools->len; i++) {
        json *t = tools->items[i];
        char p[48];
        snprintf(p, sizeof p, "tools[%zu]", i);
        if (t->type != JSON_OBJECT) return api_bad_type(e, p, "an object", t);
        const json *type = field(t, "type");
        if (type && (!cstr(type) || strcmp(type->str, "custom")))
            return api_fail(e, 400, INVALID, p, NULL,
                            "'%s.type' %s%.40s%s is not supported: gem runs custom tools only (name, description, "
                            "input_schema), no server tools",
                            p, cstr(type) ? "'" : "", cstr(type) ? type->str : "", cstr(type) ? "'" : "");
        static const char *const keys[] = {"type", "name", "description", "input_schema", "cache_control", NULL};
        if (only_keys(t, keys, p, "", e)) return -1;
        const json *name = json_get(t, "name"), *d = field(t, "description"), *schema = json_get(t, "input_schema");
        if (!word_ok(name, 128))
            return api_fail(e, 400, INVALID, p, NULL, "'%s.name' must be 1 to 128 letters, digits, '_', '-' or '.'", p);
        if (d && d->type != JSON_STRING) return api_fail(e, 400, INVALID, p, NULL, "'%s.description' must be a string", p);
        if (!schema || schema->type != JSON_OBJECT)
            return api_fail(e, 400, INVALID, p, NULL, "'%s.input_schema' must be an object (a JSON schema)", p);
        json *o = json_new(JSON_OBJECT), *fn;
        if (!o || json_push(out, o) || json_set(o, "type", json_new_str("function", 8)) ||
            !(fn = json_new(JSON_OBJECT)) || json_set(o, "function", fn) ||
            json_set(fn, "name", json_new_str(name->str, name->len)) ||
            (d && json_set(fn, "description", json_new_str(d->str, d->len))) ||
            json_set(fn, "parameters", take(t, "input_schema")))
            return oom(e);
    }
    return 0;
}

static int parse_tool_choice(const json *tc, api_request *r, const json *tools, api_error *e) {
    if (tc->type != JSON_OBJECT) return api_bad_type(e, "tool_choice", "an object", tc);
    static const char *const keys[] = {"type", "name", "disable_parallel_tool_use", NULL};
    if (only_keys(tc, keys, "tool_choice", "", e)) return -1;
    const char *type = cstr(json_get(tc, "type"));
    const json *dp = field(tc, "disable_parallel_tool_use");
    if (dp && dp->type != JSON_BOOL) return api_bad_type(e, "tool_choice.disable_parallel_tool_use", "a boolean", dp);
    r->single_call = dp && dp->boolean;
    if (type && !strcmp(type, "auto")) r->tool_choice = API_TOOLS_AUTO;
    else if (type && !strcmp(type, "any")) r->tool_choice = API_TOOLS_REQUIRED;
    else if (type && !strcmp(type, "none")) r->tool_choice = API_TOOLS_NONE;
    else if (type && !strcmp(type, "tool")) r->tool_choice = API_TOOLS_NAMED;
    else
        return api_fail(e, 400, INVALID, "tool_choice", NULL,
                        "'tool_choice.type' must be \"auto\", \"any\", \"tool\" or \"none\"");
    if (r->tool_choice == API_TOOLS_NAMED) {
        const json *name = json_get(tc, "name");
        if (!word_ok(name, 128))
            return api_fail(e, 400, INVALID, "tool_choice", NULL, "'tool_choice.name' must name a tool of 'tools'");
        r->tool_name = name->str;
    } else if (field(tc, "name")) {
        return api_fail(e, 400, INVALID, "tool_choice", NULL, "'tool_choice.name' is only allowed with type \"tool\"");
    }
    if ((r->tool_choice == API_TOOLS_REQUIRED || r->tool_choice == API_TOOLS_NAMED) && (!tools || !tools->len))
        return api_fail(e, 400, INVALID, "tool_choice", NULL, "'tool_choice' asks for a tool call but 'tools' is empty");
    if (r->tool_choice == API_TOOLS_NAMED) {
        for (size_t i = 0; i < tools->len; i++)
            if (!strcmp(json_get_str(json_get(tools->items[i], "function"), "name"), r->tool_name)) return 0;
        return api_fail(e, 400, INVALID, "tool_choice", NULL, "'tool_choice' names '%.60s', which is not in 'tools'",
                        r->tool_name);
    }
    return 0;
}

static int parse_thinking(const json *t, api_request *r, api_error *e) {
    if (t->type != JSON_OBJECT) return api_bad_type(e, "thinking", "an object", t);
    static const char *const keys[] = {"type", "budget_tokens", NULL};
    if (only_keys(t, keys, "thinking", "", e)) return -1;
    const char *type = cstr(json_get(t, "type"));
    double b;
    if (type && !strcmp(type, "enabled")) {
        /* the budget is not enforced apart: max_tokens bounds thinking and answer together */
        const int rc = get_num(t, "budget_tokens", 1, 1e9, 1, &b, e);
        if (rc < 0) return api_fail(e, 400, INVALID, "thinking", NULL, "'thinking.budget_tokens' must be a positive integer");
        if (!rc) return api_fail(e, 400, INVALID, "thinking", NULL, "'thinking.budget_tokens' is required");
        r->enable_thinking = 1;
    } else if (type && !strcmp(type, "disabled")) {
        if (field(t, "budget_tokens"))
            return api_fail(e, 400, INVALID, "thinking", NULL, "'thinking.budget_tokens' is only allowed when enabled");
        r->enable_thinking = 0;
    } else {
        return api_fail(e, 400, INVALID, "thinking", NULL, "'thinking.type' must be \"enabled\" or \"disabled\"");
    }
    return 0;
}

static int parse_stop(const json *v, api_request *r, api_error *e) {
    if (v->type != JSON_ARRAY) return api_bad_type(e, "stop_sequences", "an array of strings", v);
    if (v->len > API_MAX_STOP)
        return api_fail(e, 400, INVALID, "stop_sequences", NULL, "'stop_sequences' has %zu strings; at most %d are allowed",
                        v->len, API_MAX_STOP);
    for (size_t i = 0; i < v->len; i++) {
        const json *s = v->items[i];
        if (s->type != JSON_STRING) return api_bad_type(e, "stop_sequences", "an array of strings", s);
        if (!s->len || s->len > API_MAX_STOP_LEN)
            return api_fail(e, 400, INVALID, "stop_sequences", NULL, "each stop sequence must have 1 to %d bytes",
                            API_MAX_STOP_LEN);
        r->stop[r->n_stop] = s->str;
        r->stop_len[r->n_stop++] = s->len;
    }
    return 0;
}

/* root of the request: {"body": the parsed body, "messages": [...], "tools": [...]} */
int anth_parse(const char *body, size_t n, const api_opts *o, int count_only, api_request *r, api_error *e) {
    memset(r, 0, sizeof *r);
    r->kind = API_CHAT;
    r->format = o->format;
    r->n = 1; /* one answer (Anthropic has no n) */
    r->enable_thinking = -1;
    r->cache_prompt = 1;
    r->sampling = gem_sampling_default();
    /* gem's sampling defaults, as for the OpenAI routes */
    r->sampling.temp = 0.8f;
    r->sampling.top_k = 64;
    r->sampling.top_p = 0.95f;
    r->max_tokens = -1;
    json *b = api_parse_body(body, n, NULL, e);
    if (!b) return -1;
    if (!(r->root = json_new(JSON_OBJECT))) {
        json_free(b);
        return oom(e);
    }
    json *msgs = json_new(JSON_ARRAY), *tools = json_new(JSON_ARRAY);
    /* json_set owns what it is given, set or not (NULL: nothing to own) */
    const int set_m = json_set(r->root, "messages", msgs), set_t = json_set(r->root, "tools", tools);
    if (json_set(r->root, "body", b) || set_m || set_t) return oom(e);
    if (b->type != JSON_OBJECT)
        return api_fail(e, 400, INVALID, NULL, NULL, "the request body must be a JSON object, not %s", api_type_name(b));
    static const char *const keys[] = {"model", "max_tokens", "messages", "system", "metadata", "stop_sequences",
                                       "stream", "temperature", "top_p", "top_k", "tools", "tool_choice",
                                       "thinking", "gem_forced_output", NULL};
    if (only_keys(b, keys, "", "", e)) return -1;
    const json *v;
    double x;
    int rc;
    if ((v = field(b, "model")) && !cstr(v)) return api_bad_type(e, "model", "a string", v);
    r->model = v ? v->str : NULL;
    if ((rc = get_num(b, "max_tokens", 1, 1e9, 1, &x, e)) < 0) return -1;
    if (rc) r->max_tokens = (long)x;
    else if (!count_only) return api_fail(e, 400, INVALID, "max_tokens", NULL, "'max_tokens' is required");
    if ((v = field(b, "stream"))) {
        if (v->type != JSON_BOOL) return api_bad_type(e, "stream", "a boolean", v);
        r->stream = v->boolean;
    }
    if ((rc = get_num(b, "temperature", 0, 1, 0, &x, e)) < 0) return -1;
    if (rc) r->sampling.temp = (float)x;
    if ((rc = get_num(b, "top_p", 0, 1, 0, &x, e)) < 0) return -1;
    if (rc) r->sampling.top_p = (float)x;
    if ((rc = get_num(b, "top_k", 0, 1e9, 1, &x, e)) < 0) return -1;
    if (rc) r->sampling.top_k = (int)x;
    if ((v = field(b, "stop_sequences")) && parse_stop(v, r, e)) return -1;
    /* metadata (user_id) annotates the request for the provider's records: nothing gem computes */
    if ((v = field(b, "metadata")) && v->type != JSON_OBJECT) return api_bad_type(e, "metadata", "an object", v);
    if ((v = field(b, "thinking")) && parse_thinking(v, r, e)) return -1;
    if ((v = field(b, "gem_forced_output"))) {
        if (!o || !o->allow_forced_output)
            return api_fail(e, 400, INVALID, "gem_forced_output", NULL,
                            "'gem_forced_output' is a test hook; the server was not started with --test-hooks");
        if (v->type != JSON_STRING) return api_bad_type(e, "gem_forced_output", "a string", v);
        r->forced_output = v->str;
        r->forced_output_len = v->len;
    }
    if ((v = field(b, "system")) && convert_system(v, msgs, e)) return -1;
    json *m = json_get(b, "messages");
    if (!m) return api_fail(e, 400, INVALID, "messages", NULL, "'messages' is required");
    if (m->type != JSON_ARRAY) return api_bad_type(e, "messages", "an array", m);
    if (!m->len) return api_fail(e, 400, INVALID, "messages", NULL, "'messages' must not be empty");
    for (size_t i = 0; i < m->len; i++)
        if (convert_message(m->items[i], i, msgs, e)) return -1;
    /* a final assistant message asks Anthropic to continue it (prefill);
     * the renderer closes every assistant turn, so gem cannot */
    if (!strcmp(json_get_str(m->items[m->len - 1], "role"), "assistant"))
        return api_fail(e, 400, INVALID, "messages", NULL,
                        "'messages[%zu]' is an assistant message: continuing a prefilled answer is not supported; "
                        "end with a user message",
                        m->len - 1);
    json *t = json_get(b, "tools");
    if (t && t->type != JSON_NULL && convert_tools(t, tools, e)) return -1;
    r->messages = msgs;
    r->tools = tools->len ? tools : NULL;
    if ((v = field(b, "tool_choice")) && parse_tool_choice(v, r, r->tools, e)) return -1;
    if (r->tool_choice == API_TOOLS_NONE) r->tools = NULL; /* the model is not told about tools it may not call */
    return 0;
}

/* ---- response ---- */

typedef enum { BLOCK_NONE, BLOCK_TEXT, BLOCK_THINKING } block_kind;

struct anth_reply {
    anth_reply_opts o;
    strbuf out;
    strbuf content; /* not streaming: the finished blocks, comma-separated */
    strbuf open;    /* not streaming: the open block's text so far */
    block_kind kind; /* the open block */
    int n_blocks;    /* blocks started so far (the open one included) */
    int n_tools;
    strbuf tmp;
};

anth_reply *anth_reply_new(const anth_reply_opts *o) {
    anth_reply *r = calloc(1, sizeof *r);
    if (r) r->o = *o;
    return r;
}

void anth_reply_free(anth_reply *r) {
    if (!r) return;
    sb_free(&r->out);
    sb_free(&r->content);
    sb_free(&r->open);
    sb_free(&r->tmp);
    free(r);
}

strbuf *anth_reply_out(anth_reply *r) { return &r->out; }
int anth_reply_n_tool_uses(const anth_reply *r) { return r->n_tools; }

static void put_str(strbuf *o, const char *s) { json_quote(s, strlen(s), o); }

/* event: NAME / data: {"type":NAME,<rest>} */
static void event(anth_reply *r, const char *name, const char *rest) {
    strbuf *o = &r->out;
    sb_printf(o, "event: %s\ndata: {\"type\":\"%s\"%s%s}\n\n", name, name, rest[0] ? "," : "", rest);
}

static void put_usage(strbuf *o, const anth_usage *u, int output) {
    const int cached = u->cached_tokens < u->input_tokens ? u->cached_tokens : u->input_tokens;
    sb_printf(o,
              "\"usage\":{\"input_tokens\":%d,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":%d,"
              "\"output_tokens\":%d}",
              u->input_tokens - cached, cached, output);
}

/* the message object up to its content (streaming: empty content, no stop yet) */
static void put_message_head(anth_reply *r, strbuf *o) {
    sb_puts(o, "{\"id\":");
    put_str(o, r->o.id);
    sb_puts(o, ",\"type\":\"message\",\"role\":\"assistant\",\"model\":");
    put_str(o, r->o.model);
}

void anth_reply_start(anth_reply *r, const anth_usage *u) {
    if (!r->o.stream) return;
    strbuf *t = &r->tmp;
    t->len = 0;
    sb_puts(t, "\"message\":");
    put_message_head(r, t);
    sb_puts(t, ",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,");
    put_usage(t, u, 0);
    sb_putc(t, '}');
    event(r, "message_start", sb_cstr(t));
}

/* Closes the open text or thinking block. */
static void close_block(anth_reply *r) {
    if (r->kind == BLOCK_NONE) return;
    if (r->o.stream) {
        r->tmp.len = 0;
        sb_printf(&r->tmp, "\"index\":%d", r->n_blocks - 1);
        event(r, "content_block_stop", sb_cstr(&r->tmp));
    } else {
        strbuf *c = &r->content;
        if (c->len) sb_putc(c, ',');
        if (r->kind == BLOCK_TEXT) sb_puts(c, "{\"type\":\"text\",\"text\":");
        else sb_puts(c, "{\"type\":\"thinking\",\"thinking\":");
        json_quote(sb_cstr(&r->open), r->open.len, c);
        /* gem's thinking carries no signature: an empty one keeps clients'
         * types whole, and the block may be sent back as it is */
        sb_puts(c, r->kind == BLOCK_TEXT ? "}" : ",\"signature\":\"\"}");
        r->open.len = 0;
    }
    r->kind = BLOCK_NONE;
}

static void text_event(anth_reply *r, block_kind kind, const char *s, size_t n) {
    if (!n) return;
    if (r->kind != kind) {
        close_block(r);
        r->kind = kind;
        r->n_blocks++;
        if (r->o.stream) {
            r->tmp.len = 0;
            sb_printf(&r->tmp, "\"index\":%d,\"content_block\":%s", r->n_blocks - 1,
                      kind == BLOCK_TEXT ? "{\"type\":\"text\",\"text\":\"\"}"
                                         : "{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}");
            event(r, "content_block_start", sb_cstr(&r->tmp));
        }
    }
    if (!r->o.stream) {
        utf8_sanitize(s, n, &r->open);
        return;
    }
    strbuf clean = {0};
    utf8_sanitize(s, n, &clean);
    r->tmp.len = 0;
    sb_printf(&r->tmp, "\"index\":%d,\"delta\":{\"type\":\"%s\",\"%s\":", r->n_blocks - 1,
              kind == BLOCK_TEXT ? "text_delta" : "thinking_delta", kind == BLOCK_TEXT ? "text" : "thinking");
    json_quote(sb_cstr(&clean), clean.len, &r->tmp);
    sb_putc(&r->tmp, '}');
    if (clean.failed) r->out.failed = 1;
    sb_free(&clean);
    event(r, "content_block_delta", sb_cstr(&r->tmp));
}

static void tool_event(anth_reply *r, const char *name, const char *arguments) {
    close_block(r);
    const int i = r->n_tools++;
    r->n_blocks++;
    strbuf nm = {0}, args = {0};
    utf8_sanitize(name, strlen(name), &nm);
    /* the parser's arguments are a JSON object text; anything else would
     * break the body, so it becomes an empty input */
    json *parsed = json_parse(arguments, strlen(arguments), NULL);
    if (parsed && parsed->type == JSON_OBJECT) sb_puts(&args, arguments);
    else sb_puts(&args, "{}");
    json_free(parsed);
    const char *hex = strchr(r->o.id, '_');
    strbuf *t = &r->tmp;
    t->len = 0;
    if (r->o.stream) sb_printf(t, "\"index\":%d,\"content_block\":", r->n_blocks - 1);
    else if (r->content.len) sb_putc(&r->content, ',');
    strbuf *blk = r->o.stream ? t : &r->content;
    sb_printf(blk, "{\"type\":\"tool_use\",\"id\":\"toolu_%s_%d\",\"name\":", hex ? hex + 1 : r->o.id, i);
    json_quote(sb_cstr(&nm), nm.len, blk);
    sb_puts(blk, ",\"input\":");
    sb_puts(blk, r->o.stream ? "{}" : sb_cstr(&args));
    sb_putc(blk, '}');
    if (nm.failed || args.failed) r->out.failed = 1;
    if (r->o.stream) {
        /* the whole input in one input_json_delta: the parser reports a call once it is complete */
        event(r, "content_block_start", sb_cstr(t));
        t->len = 0;
        sb_printf(t, "\"index\":%d,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":", r->n_blocks - 1);
        json_quote(sb_cstr(&args), args.len, t);
        sb_putc(t, '}');
        event(r, "content_block_delta", sb_cstr(t));
        t->len = 0;
        sb_printf(t, "\"index\":%d", r->n_blocks - 1);
        event(r, "content_block_stop", sb_cstr(t));
    }
    sb_free(&nm);
    sb_free(&args);
}

void anth_reply_event(anth_reply *r, const chat_event *ev) {
    if (ev->kind == CHAT_EV_CONTENT) text_event(r, BLOCK_TEXT, ev->text, ev->len);
    else if (ev->kind == CHAT_EV_REASONING) text_event(r, BLOCK_THINKING, ev->text, ev->len);
    else tool_event(r, ev->name, ev->arguments);
}

void anth_reply_finish(anth_reply *r, int length, const char *stop_seq, size_t stop_len, const anth_usage *u) {
    close_block(r);
    const char *reason = r->n_tools && !length ? "tool_use" : length ? "max_tokens" : stop_seq ? "stop_sequence" : "end_turn";
    if (strcmp(reason, "stop_sequence")) stop_seq = NULL;
    strbuf seq = {0};
    if (stop_seq) {
        strbuf clean = {0};
        utf8_sanitize(stop_seq, stop_len, &clean);
        json_quote(sb_cstr(&clean), clean.len, &seq);
        sb_free(&clean);
    } else {
        sb_puts(&seq, "null");
    }
    strbuf *t = &r->tmp;
    t->len = 0;
    if (r->o.stream) {
        sb_printf(t, "\"delta\":{\"stop_reason\":\"%s\",\"stop_sequence\":%s},", reason, sb_cstr(&seq));
        put_usage(t, u, u->output_tokens);
        event(r, "message_delta", sb_cstr(t));
        event(r, "message_stop", "");
    } else {
        strbuf *o = &r->out;
        put_message_head(r, o);
        sb_puts(o, ",\"content\":[");
        sb_put(o, r->content.p, r->content.len);
        sb_printf(o, "],\"stop_reason\":\"%s\",\"stop_sequence\":%s,", reason, sb_cstr(&seq));
        put_usage(o, u, u->output_tokens);
        sb_putc(o, '}');
        if (r->content.failed || r->open.failed) o->failed = 1;
    }
    if (seq.failed || t->failed) r->out.failed = 1;
    sb_free(&seq);
}

void anth_reply_error(anth_reply *r, const api_error *e) {
    strbuf *o = &r->out;
    sb_puts(o, "event: error\ndata: ");
    anth_error_json(e, o);
    sb_puts(o, "\n\n");
}
