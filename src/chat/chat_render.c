/* Gemma 4 chat renderer (see chat.h).
 *
 * Each function mirrors one macro or block of the published template and is
 * named after it; the comments quote the template conditions they
 * implement, so the two can be read side by side. Jinja details that
 * matter for byte equality: `dictsort` compares keys lower-cased and keeps
 * insertion order for ties (a stable sort); `trim` strips JavaScript's
 * whitespace set; numbers print as JavaScript's String(n), integral ones
 * without a fraction; null and missing values print as nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat_int.h"

#define Q "<|\"|>"

/* ---- Jinja helpers ---- */

static int is_js_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0d) || c == 0x20 || c == 0xa0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200a) ||
           c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000 || c == 0xfeff;
}

/* Decodes the code point starting at s[i] (well-formed input assumed; a
 * stray byte counts as itself). */
static uint32_t cp_at(const char *s, size_t n, size_t i, size_t *len) {
    unsigned char b = (unsigned char)s[i];
    size_t l = b < 0x80 ? 1 : b < 0xe0 ? 2 : b < 0xf0 ? 3 : 4;
    if (b >= 0x80 && b < 0xc0) l = 1;
    if (i + l > n) l = 1;
    uint32_t c = l == 1 ? b : l == 2 ? b & 0x1f : l == 3 ? b & 0x0f : b & 0x07;
    for (size_t k = 1; k < l; k++) c = c << 6 | ((unsigned char)s[i + k] & 0x3f);
    *len = l;
    return c;
}

static void js_trim(const char *s, size_t n, size_t *start, size_t *len) {
    size_t a = 0, b = n, l;
    while (a < n && is_js_space(cp_at(s, n, a, &l))) a += l;
    while (b > a) {
        size_t k = b - 1;
        while (k > a && ((unsigned char)s[k] & 0xc0) == 0x80) k--;
        if (!is_js_space(cp_at(s, n, k, &l))) break;
        b = k;
    }
    *start = a;
    *len = b - a;
}

static void put_trimmed(strbuf *o, const char *s, size_t n) {
    size_t a, l;
    js_trim(s, n, &a, &l);
    sb_put(o, s + a, l);
}

static void put_upper(strbuf *o, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        sb_putc(o, c >= 'a' && c <= 'z' ? (char)(c - 32) : c);
    }
}

static int is_str(const json *v) { return v && v->type == JSON_STRING; }
static int is_map(const json *v) { return v && v->type == JSON_OBJECT; }
static int is_arr(const json *v) { return v && v->type == JSON_ARRAY; }

static int key_lower_cmp(const char *a, size_t la, const char *b, size_t lb) {
    size_t n = la < lb ? la : lb;
    for (size_t i = 0; i < n; i++) {
        unsigned char x = (unsigned char)a[i], y = (unsigned char)b[i];
        if (x >= 'A' && x <= 'Z') x += 32;
        if (y >= 'A' && y <= 'Z') y += 32;
        if (x != y) return x < y ? -1 : 1;
    }
    return la < lb ? -1 : la > lb;
}

/* Merge sort of idx[0..n) by key_lower_cmp, stable (a request's object may
 * have 100000 keys, and an insertion sort is quadratic on reversed ones). */
static void dict_msort(const json *m, size_t *idx, size_t *tmp, size_t n) {
    if (n < 2) return;
    const size_t h = n / 2;
    dict_msort(m, idx, tmp, h);
    dict_msort(m, idx + h, tmp, n - h);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) /* the right one first only when strictly less: stable */
        tmp[k++] = key_lower_cmp(m->keys[idx[j]], m->key_lens[idx[j]], m->keys[idx[i]], m->key_lens[idx[i]]) < 0
                       ? idx[j++]
                       : idx[i++];
    while (i < h) tmp[k++] = idx[i++];
    while (j < n) tmp[k++] = idx[j++];
    memcpy(idx, tmp, n * sizeof *idx);
}

/* Indices of an object's keys in `dictsort` order (stable). */
static size_t *dictsort(const json *m) {
    size_t n = m->len;
    size_t *idx = malloc((n ? n : 1) * sizeof *idx), *tmp = malloc((n ? n : 1) * sizeof *tmp);
    if (!idx || !tmp) {
        free(idx);
        free(tmp);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) idx[i] = i;
    dict_msort(m, idx, tmp, n);
    free(tmp);
    return idx;
}

/* `{{ value }}` for a scalar. */
static void put_scalar(strbuf *o, const json *v) {
    if (!v || v->type == JSON_NULL) return;
    if (v->type == JSON_STRING) sb_put(o, v->str, v->len);
    else if (v->type == JSON_BOOL) sb_puts(o, v->boolean ? "true" : "false");
    else if (v->type == JSON_NUMBER) json_num_js(v->num, o);
}

/* macro format_argument(argument, escape_keys=True) */
static int format_argument(strbuf *o, const json *a, int escape_keys) {
    if (is_str(a)) {
        sb_puts(o, Q);
        sb_put(o, a->str, a->len);
        sb_puts(o, Q);
    } else if (a && a->type == JSON_BOOL) {
        sb_puts(o, a->boolean ? "true" : "false");
    } else if (is_map(a)) {
        size_t *idx = dictsort(a);
        if (!idx) return -1;
        sb_putc(o, '{');
        for (size_t i = 0; i < a->len; i++) {
            if (i) sb_putc(o, ',');
            if (escape_keys) sb_puts(o, Q);
            sb_put(o, a->keys[idx[i]], a->key_lens[idx[i]]);
            if (escape_keys) sb_puts(o, Q);
            sb_putc(o, ':');
            if (format_argument(o, a->items[idx[i]], escape_keys)) { free(idx); return -1; }
        }
        sb_putc(o, '}');
        free(idx);
    } else if (is_arr(a)) {
        sb_putc(o, '[');
        for (size_t i = 0; i < a->len; i++) {
            if (i) sb_putc(o, ',');
            if (format_argument(o, a->items[i], escape_keys)) return -1;
        }
        sb_putc(o, ']');
    } else {
        put_scalar(o, a);
    }
    return 0;
}

/* `{{ x | upper }}` needs x defined: the reference engine fails otherwise. */
static int put_type_upper(strbuf *o, const json *type, const char *where, gem_err *err) {
    if (!type) return gem_err_set(err, "%s has no 'type'", where);
    if (is_str(type)) put_upper(o, type->str, type->len);
    else put_scalar(o, type);
    return 0;
}

static int type_is(const json *type, const char *upper_name) {
    if (!is_str(type) || type->len != strlen(upper_name)) return 0;
    for (size_t i = 0; i < type->len; i++) {
        char c = type->str[i];
        if (c >= 'a' && c <= 'z') c = (char)(c - 32);
        if (c != upper_name[i]) return 0;
    }
    return 1;
}

static void put_required_list(strbuf *o, const json *req) {
    sb_puts(o, "required:[");
    for (size_t i = 0; is_arr(req) && i < req->len; i++) {
        if (i) sb_putc(o, ',');
        sb_puts(o, Q);
        put_scalar(o, req->items[i]);
        sb_puts(o, Q);
    }
    sb_putc(o, ']');
}

/* {%- if add_comma %},{%- else -%}{%- set add_comma = true -%}{% endif -%} */
static void comma(strbuf *o, int *add_comma) {
    if (*add_comma) sb_putc(o, ',');
    *add_comma = 1;
}

static int format_parameters(strbuf *o, const json *properties, gem_err *err, int depth);

/* the `items:{...}` block of an ARRAY parameter */
static int format_items(strbuf *o, const json *items, gem_err *err, int depth) {
    sb_puts(o, "items:{");
    size_t *idx = dictsort(items);
    if (!idx) return gem_err_set(err, "out of memory");
    int first = 0, rc = 0;
    for (size_t i = 0; i < items->len && !rc; i++) {
        const char *k = items->keys[idx[i]];
        const json *v = items->items[idx[i]];
        if (!v || v->type == JSON_NULL) continue; /* {%- if item_value is not none -%} */
        if (first) sb_putc(o, ',');
        first = 1;
        if (!strcmp(k, "properties")) {
            sb_puts(o, "properties:{");
            if (is_map(v)) rc = format_parameters(o, v, err, depth + 1);
            sb_putc(o, '}');
        } else if (!strcmp(k, "required")) {
            put_required_list(o, v);
        } else if (!strcmp(k, "type")) {
            sb_puts(o, "type:");
            if (is_str(v)) {
                sb_puts(o, Q);
                put_upper(o, v->str, v->len);
                sb_puts(o, Q);
            } else if (is_arr(v)) {
                sb_putc(o, '[');
                for (size_t r = 0; r < v->len; r++) {
                    if (r) sb_putc(o, ',');
                    sb_puts(o, Q);
                    if (is_str(v->items[r])) put_upper(o, v->items[r]->str, v->items[r]->len);
                    sb_puts(o, Q);
                }
                sb_putc(o, ']');
            } else {
                rc = format_argument(o, v, 1);
            }
        } else {
            sb_put(o, k, items->key_lens[idx[i]]);
            sb_putc(o, ':');
            rc = format_argument(o, v, 1) ? gem_err_set(err, "out of memory") : 0;
        }
    }
    free(idx);
    sb_putc(o, '}');
    return rc;
}

/* macro format_parameters(properties, required) */
static int format_parameters(strbuf *o, const json *properties, gem_err *err, int depth) {
    static const char *const standard[] = {"description", "type", "properties", "required", "nullable"};
    if (depth > JSON_MAX_DEPTH) return gem_err_set(err, "tool parameters nest too deeply");
    size_t *idx = dictsort(properties);
    if (!idx) return gem_err_set(err, "out of memory");
    int found_first = 0, rc = 0;
    for (size_t i = 0; i < properties->len && !rc; i++) {
        const char *key = properties->keys[idx[i]];
        const json *value = properties->items[idx[i]];
        int standard_key = 0;
        for (size_t s = 0; s < 5; s++) standard_key |= !strcmp(key, standard[s]);
        if (standard_key) continue;
        if (found_first) sb_putc(o, ',');
        found_first = 1;
        sb_put(o, key, properties->key_lens[idx[i]]);
        sb_puts(o, ":{");
        int add_comma = 0;
        const json *desc = json_get(value, "description");
        const json *type = json_get(value, "type");
        char where[160];
        snprintf(where, sizeof where, "tool parameter '%.100s'", key);
        if (json_truthy(desc)) {
            sb_puts(o, "description:" Q);
            put_scalar(o, desc);
            sb_puts(o, Q);
            add_comma = 1;
        }
        if (!type) { rc = gem_err_set(err, "%s has no 'type'", where); break; }
        if (type_is(type, "STRING")) {
            const json *en = json_get(value, "enum");
            if (json_truthy(en)) {
                comma(o, &add_comma);
                sb_puts(o, "enum:");
                if (format_argument(o, en, 1)) { rc = gem_err_set(err, "out of memory"); break; }
            }
        } else if (type_is(type, "ARRAY")) {
            const json *items = json_get(value, "items");
            if (is_map(items) && items->len) {
                comma(o, &add_comma);
                if ((rc = format_items(o, items, err, depth))) break;
            }
        }
        if (json_truthy(json_get(value, "nullable"))) {
            comma(o, &add_comma);
            sb_puts(o, "nullable:true");
        }
        if (type_is(type, "OBJECT")) {
            const json *props = json_get(value, "properties");
            if (is_map(props)) {
                comma(o, &add_comma);
                sb_puts(o, "properties:{");
                if ((rc = format_parameters(o, props, err, depth + 1))) break;
                sb_putc(o, '}');
            } else if (is_map(value)) {
                /* {%- elif value is mapping -%}: the template formats the
                 * parameter itself as its properties */
                comma(o, &add_comma);
                sb_puts(o, "properties:{");
                if ((rc = format_parameters(o, value, err, depth + 1))) break;
                sb_putc(o, '}');
            }
            const json *req = json_get(value, "required");
            if (json_truthy(req)) {
                comma(o, &add_comma);
                put_required_list(o, req);
            }
        }
        comma(o, &add_comma);
        sb_puts(o, "type:" Q);
        if ((rc = put_type_upper(o, type, where, err))) break;
        sb_puts(o, Q "}");
    }
    free(idx);
    return rc;
}

/* macro format_function_declaration(tool_data) */
static int format_function_declaration(strbuf *o, const json *tool, size_t ti, gem_err *err) {
    const json *fn = json_get(tool, "function");
    if (!is_map(fn)) return gem_err_set(err, "tools[%zu] has no 'function' object", ti);
    const json *name = json_get(fn, "name");
    if (!is_str(name) || !name->len) return gem_err_set(err, "tools[%zu].function has no 'name'", ti);
    sb_puts(o, "declaration:");
    put_scalar(o, name);
    sb_puts(o, "{description:" Q);
    put_scalar(o, json_get(fn, "description"));
    sb_puts(o, Q);
    const json *params = json_get(fn, "parameters");
    if (json_truthy(params)) {
        sb_puts(o, ",parameters:{");
        const json *props = json_get(params, "properties");
        if (json_truthy(props)) {
            sb_puts(o, "properties:{");
            if (!is_map(props)) return gem_err_set(err, "tools[%zu] parameters.properties is not an object", ti);
            if (format_parameters(o, props, err, 0)) return gem_err_wrap(err, "tools[%zu] ('%s')", ti, name->str);
            sb_puts(o, "},");
        }
        const json *req = json_get(params, "required");
        if (json_truthy(req)) {
            put_required_list(o, req);
            sb_putc(o, ',');
        }
        const json *type = json_get(params, "type");
        if (json_truthy(type)) {
            sb_puts(o, "type:" Q);
            put_type_upper(o, type, "parameters", err);
            sb_puts(o, Q "}");
        }
    }
    const json *resp = fn && is_map(fn) ? json_get(fn, "response") : NULL;
    if (resp) {
        sb_puts(o, ",response:{");
        const json *rd = json_get(resp, "description");
        if (json_truthy(rd)) {
            sb_puts(o, "description:" Q);
            put_scalar(o, rd);
            sb_puts(o, Q ",");
        }
        const json *rt = json_get(resp, "type");
        if (type_is(rt, "OBJECT")) {
            sb_puts(o, "type:" Q);
            put_upper(o, rt->str, rt->len);
            sb_puts(o, Q "}");
        }
    }
    sb_putc(o, '}');
    return 0;
}

/* macro strip_thinking(text): drop <|channel>...<channel|> blocks, trim */
static void strip_thinking(strbuf *o, const char *s, size_t n) {
    strbuf tmp = {0};
    const char *end = s + n, *p = s;
    for (;;) {
        const char *close = memmem(p, (size_t)(end - p), "<channel|>", 10);
        const char *part_end = close ? close : end;
        const char *open = memmem(p, (size_t)(part_end - p), "<|channel>", 10);
        sb_put(&tmp, p, (size_t)((open ? open : part_end) - p));
        if (!close) break;
        p = close + 10;
    }
    put_trimmed(o, tmp.p ? tmp.p : "", tmp.len);
    sb_free(&tmp);
}

/* macro format_tool_response_block(tool_name, response) */
static int format_tool_response_block(strbuf *o, const char *name, size_t nlen, const json *resp) {
    sb_puts(o, "<|tool_response>response:");
    sb_put(o, name, nlen);
    if (is_map(resp)) {
        sb_putc(o, '{');
        size_t *idx = dictsort(resp);
        if (!idx) return -1;
        for (size_t i = 0; i < resp->len; i++) {
            sb_put(o, resp->keys[idx[i]], resp->key_lens[idx[i]]);
            sb_putc(o, ':');
            if (format_argument(o, resp->items[idx[i]], 0)) { free(idx); return -1; }
            if (i + 1 < resp->len) sb_putc(o, ',');
        }
        free(idx);
        sb_putc(o, '}');
    } else {
        sb_puts(o, "{value:");
        if (format_argument(o, resp, 0)) return -1;
        sb_putc(o, '}');
    }
    sb_puts(o, "<tool_response|>");
    return 0;
}

static const char *role_of(const json *m) { return json_get_str(m, "role"); }

/* content of a message: string or list of parts */
static void render_content(strbuf *o, const json *content, int model, const char **prev_type) {
    if (is_str(content)) {
        if (model) strip_thinking(o, content->str, content->len);
        else put_trimmed(o, content->str, content->len);
    } else if (is_arr(content)) {
        for (size_t i = 0; i < content->len; i++) {
            const json *item = content->items[i];
            const char *type = json_get_str(item, "type");
            if (!type) continue;
            if (!strcmp(type, "text")) {
                const json *t = json_get(item, "text");
                if (is_str(t)) {
                    if (model) strip_thinking(o, t->str, t->len);
                    else put_trimmed(o, t->str, t->len);
                }
            } else if (!strcmp(type, "image")) {
                sb_puts(o, "<|image|>");
                *prev_type = "image";
            } else if (!strcmp(type, "audio")) {
                sb_puts(o, "<|audio|>");
                *prev_type = "audio";
            } else if (!strcmp(type, "video")) {
                sb_puts(o, "<|video|>");
                *prev_type = "video";
            }
        }
    }
}

static int render_tool_calls(strbuf *o, const json *calls, size_t mi, gem_err *err) {
    for (size_t c = 0; c < calls->len; c++) {
        const json *fn = json_get(calls->items[c], "function");
        const json *name = json_get(fn, "name");
        if (!is_str(name)) return gem_err_set(err, "messages[%zu].tool_calls[%zu] has no function name", mi, c);
        sb_puts(o, "<|tool_call>call:");
        sb_put(o, name->str, name->len);
        sb_putc(o, '{');
        const json *args = json_get(fn, "arguments");
        if (is_map(args)) {
            size_t *idx = dictsort(args);
            if (!idx) return gem_err_set(err, "out of memory");
            for (size_t i = 0; i < args->len; i++) {
                if (i) sb_putc(o, ',');
                sb_put(o, args->keys[idx[i]], args->key_lens[idx[i]]);
                sb_putc(o, ':');
                format_argument(o, args->items[idx[i]], 0);
            }
            free(idx);
        } else if (is_str(args)) {
            sb_put(o, args->str, args->len);
        }
        sb_puts(o, "}<tool_call|>");
    }
    return 0;
}

int chat_gemma4_render(const chat_render_opts *opt, strbuf *o, gem_err *err) {
    const json *messages = opt->messages, *tools = opt->tools;
    if (!is_arr(messages)) return gem_err_set(err, "'messages' must be an array");
    if (tools && tools->type != JSON_NULL && !is_arr(tools)) {
        gem_err_set(err, "'tools' must be an array");
        return CHAT_RENDER_BAD_TOOLS;
    }
    for (size_t i = 0; i < messages->len; i++) {
        const json *m = messages->items[i];
        if (!is_map(m)) return gem_err_set(err, "messages[%zu] is not an object", i);
        const char *r = role_of(m);
        if (!r) return gem_err_set(err, "messages[%zu] has no 'role' string", i);
        if (strcmp(r, "system") && strcmp(r, "developer") && strcmp(r, "user") && strcmp(r, "assistant") &&
            strcmp(r, "tool"))
            return gem_err_set(err, "messages[%zu] has unknown role '%.40s' (system, developer, user, assistant, tool)", i, r);
        const json *c = json_get(m, "content");
        if (c && c->type != JSON_NULL && !is_str(c) && !is_arr(c))
            return gem_err_set(err, "messages[%zu].content must be a string or an array of parts", i);
        const json *tc = json_get(m, "tool_calls");
        if (tc && tc->type != JSON_NULL && !is_arr(tc)) return gem_err_set(err, "messages[%zu].tool_calls must be an array", i);
    }
    int thinking = opt->enable_thinking > 0;
    const char *prev_type = NULL; /* ns.prev_message_type */
    size_t start = 0;             /* loop_messages = messages[start:] */
    sb_puts(o, opt->bos_token ? opt->bos_token : "");
    if (!messages->len && !thinking && !json_truthy(tools)) return gem_err_set(err, "no messages");
    const char *r0 = messages->len ? role_of(messages->items[0]) : "";
    int first_system = !strcmp(r0, "system") || !strcmp(r0, "developer");
    if (thinking || json_truthy(tools) || first_system) {
        sb_puts(o, "<|turn>system\n");
        if (thinking) {
            sb_puts(o, "<|think|>\n");
            prev_type = "think";
        }
        if (first_system) {
            const json *c = json_get(messages->items[0], "content");
            if (is_str(c)) put_trimmed(o, c->str, c->len);
            start = 1;
        }
        if (json_truthy(tools)) {
            for (size_t t = 0; t < tools->len; t++) {
                sb_puts(o, "<|tool>");
                strbuf decl = {0};
                int rc = format_function_declaration(&decl, tools->items[t], t, err);
                if (!rc) put_trimmed(o, decl.p ? decl.p : "", decl.len);
                sb_free(&decl);
                if (rc) return CHAT_RENDER_BAD_TOOLS;
                sb_puts(o, "<tool|>");
            }
            prev_type = "tool";
        }
        sb_puts(o, "<turn|>\n");
    }
    size_t n = messages->len;
    long last_user = -1;
    for (size_t i = start; i < n; i++)
        if (!strcmp(role_of(messages->items[i]), "user")) last_user = (long)(i - start);

    for (size_t i = start; i < n; i++) {
        const json *m = messages->items[i];
        const char *r = role_of(m);
        if (!strcmp(r, "tool")) continue;
        size_t li = i - start; /* loop.index0 */
        prev_type = NULL;
        int model = !strcmp(r, "assistant");
        /* continuation: the previous non-tool message was also assistant */
        const char *prev_role = NULL;
        for (size_t j = i; j-- > start;) {
            if (strcmp(role_of(messages->items[j]), "tool")) {
                prev_role = role_of(messages->items[j]);
                break;
            }
        }
        if (!(model && prev_role && !strcmp(prev_role, "assistant"))) {
            sb_puts(o, "<|turn>");
            sb_puts(o, model ? "model" : r);
            sb_putc(o, '\n');
        }
        const json *calls = json_get(m, "tool_calls");
        const json *thought = json_get(m, "reasoning");
        if (!json_truthy(thought)) thought = json_get(m, "reasoning_content");
        if (json_truthy(thought) && (long)li > last_user && json_truthy(calls)) {
            sb_puts(o, "<|channel>thought\n");
            put_scalar(o, thought);
            sb_puts(o, "\n<channel|>");
        }
        if (json_truthy(calls)) {
            if (render_tool_calls(o, calls, i, err)) return -1;
            prev_type = "tool_call";
        }
        int tr_out = 0;
        const json *legacy = json_get(m, "tool_responses");
        if (json_truthy(legacy)) {
            for (size_t k = 0; is_arr(legacy) && k < legacy->len; k++) {
                const json *tr = legacy->items[k];
                const json *tn = json_get(tr, "name");
                const char *name = is_str(tn) ? tn->str : "unknown";
                if (format_tool_response_block(o, name, strlen(name), json_get(tr, "response")))
                    return gem_err_set(err, "out of memory");
                tr_out = 1;
                prev_type = "tool_response";
            }
        } else if (json_truthy(calls)) {
            /* each call's id and name looked up once: json_get walks an
             * object's keys, and a lookup per tool message would make a
             * request with many keys and many messages quadratic */
            const json **cids = malloc((calls->len ? calls->len : 1) * sizeof *cids),
                       **cnames = malloc((calls->len ? calls->len : 1) * sizeof *cnames);
            if (!cids || !cnames) {
                free(cids);
                free(cnames);
                return gem_err_set(err, "out of memory");
            }
            for (size_t c = 0; c < calls->len; c++) {
                cids[c] = json_get(calls->items[c], "id");
                cnames[c] = json_get(json_get(calls->items[c], "function"), "name");
            }
            /* forward-scan consecutive role:tool messages */
            for (size_t k = i + 1; k < n && !strcmp(role_of(messages->items[k]), "tool"); k++) {
                const json *follow = messages->items[k];
                const json *fname = json_get(follow, "name");
                strbuf nm = {0};
                if (fname) put_scalar(&nm, fname);
                else sb_puts(&nm, "unknown");
                const json *fid = json_get(follow, "tool_call_id");
                for (size_t c = 0; c < calls->len; c++) {
                    const json *cid = cids[c];
                    /* tc.get('id') == follow.get('tool_call_id'): a missing key reads as null */
                    int cnull = !cid || cid->type == JSON_NULL, fnull = !fid || fid->type == JSON_NULL;
                    int same = (cnull && fnull) ||
                               (!cnull && !fnull && cid->type == fid->type &&
                                ((cid->type == JSON_STRING && cid->len == fid->len && !memcmp(cid->str, fid->str, cid->len)) ||
                                 (cid->type == JSON_NUMBER && cid->num == fid->num) ||
                                 (cid->type == JSON_BOOL && cid->boolean == fid->boolean)));
                    if (same) {
                        nm.len = 0;
                        put_scalar(&nm, cnames[c]);
                    }
                }
                const json *body = json_get(follow, "content");
                int rc;
                if (is_arr(body)) {
                    strbuf txt = {0};
                    for (size_t pi = 0; pi < body->len; pi++) {
                        const json *part = body->items[pi];
                        const char *ty = json_get_str(part, "type");
                        if (ty && !strcmp(ty, "text")) put_scalar(&txt, json_get(part, "text"));
                    }
                    json *s = json_new_str(txt.p ? txt.p : "", txt.len);
                    rc = s ? format_tool_response_block(o, sb_cstr(&nm), nm.len, s) : -1;
                    json_free(s);
                    sb_free(&txt);
                } else {
                    rc = format_tool_response_block(o, sb_cstr(&nm), nm.len, body);
                }
                sb_free(&nm);
                if (rc) {
                    free(cids);
                    free(cnames);
                    return gem_err_set(err, "out of memory");
                }
                tr_out = 1;
                prev_type = "tool_response";
            }
            free(cids);
            free(cnames);
        }
        render_content(o, json_get(m, "content"), model, &prev_type);
        if (prev_type && !strcmp(prev_type, "tool_call") && !tr_out) {
            sb_puts(o, "<|tool_response>");
        } else if (!(tr_out && !json_truthy(json_get(m, "content")))) {
            sb_puts(o, "<turn|>\n");
        }
    }
    if (opt->add_generation_prompt) {
        if (!prev_type || (strcmp(prev_type, "tool_response") && strcmp(prev_type, "tool_call"))) {
            sb_puts(o, "<|turn>model\n");
            if (!thinking) sb_puts(o, "<|channel>thought\n<channel|>");
        }
    }
    if (o->failed) return gem_err_set(err, "out of memory rendering the conversation");
    return 0;
}
