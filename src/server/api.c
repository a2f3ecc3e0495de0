/* OpenAI request bodies to generation requests (see api.h).
 *
 * Validation is explicit field by field: a field of the wrong type or out
 * of range is an error naming it, never silently ignored, and options gem
 * cannot honour (JSON response formats, image parts, suffix, best_of,
 * legacy functions, audio, predicted outputs, web search) are refused
 * rather than dropped. Fields that change nothing gem computes are
 * ignored, as OpenAI clients send many (user, metadata, store, ...). */
#include "server/api.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat.h"

#define INVALID "invalid_request_error"

int api_fail(api_error *e, int status, const char *type, const char *param, const char *code, const char *fmt, ...) {
    if (!e) return -1;
    e->status = status;
    snprintf(e->type, sizeof e->type, "%s", type ? type : INVALID);
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    snprintf(e->code, sizeof e->code, "%s", code ? code : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}

void api_error_json(const api_error *e, strbuf *out) {
    sb_puts(out, "{\"error\":{\"message\":");
    json_quote(e->message, strlen(e->message), out);
    sb_puts(out, ",\"type\":");
    json_quote(e->type, strlen(e->type), out);
    sb_puts(out, ",\"param\":");
    if (e->param[0]) json_quote(e->param, strlen(e->param), out);
    else sb_puts(out, "null");
    sb_puts(out, ",\"code\":");
    if (e->code[0]) json_quote(e->code, strlen(e->code), out);
    else sb_puts(out, "null");
    sb_puts(out, "}}");
}

const char *api_type_name(const json *v) {
    static const char *const names[] = {"null", "a boolean", "a number", "a string", "an array", "an object"};
    return names[v->type];
}

int api_bad_type(api_error *e, const char *param, const char *want, const json *v) {
    return api_fail(e, 400, INVALID, param, NULL, "'%s' must be %s, not %s", param, want, api_type_name(v));
}

json *api_parse_body(const char *body, size_t n, const char *packed, api_error *e) {
    if (!n) {
        api_fail(e, 400, INVALID, NULL, NULL, "the request body is empty; send a JSON object");
        return NULL;
    }
    gem_err err = {{0}};
    json_limits lim = {API_MAX_JSON_VALUES, packed, 0};
    json *root = json_parse_limited(body, n, &lim, &err);
    if (!root && lim.over)
        api_fail(e, 400, INVALID, NULL, "too_many_values",
                 "the request body holds more than %d JSON values, the most gem accepts (a list of token ids counts "
                 "as one)",
                 API_MAX_JSON_VALUES);
    else if (!root)
        api_fail(e, 400, INVALID, NULL, "invalid_json", "invalid JSON in the request body: %s", err.msg);
    return root;
}

/* Present and not null. */
static const json *field(const json *o, const char *key) {
    const json *v = json_get(o, key);
    return v && v->type != JSON_NULL ? v : NULL;
}

/* 1 when present (value in *out), 0 when absent or null, -1 on error. */
/* A string field, or NULL when absent, not a string, or holding a NUL
 * (a C string compare would stop there: "text\u0000json" read as "text"). */
static const char *api_str(const json *o, const char *key) {
    const json *v = json_get(o, key);
    return v && v->type == JSON_STRING && strlen(v->str) == v->len ? v->str : NULL;
}

static int get_num(const json *o, const char *key, double lo, double hi, int integer, double *out, api_error *e) {
    const json *v = field(o, key);
    if (!v) return 0;
    if (v->type != JSON_NUMBER) return api_bad_type(e, key, integer ? "an integer" : "a number", v);
    /* the range first: a huge number (1e400, 2e19) is out of range, not "not an integer" */
    if (!(v->num >= lo && v->num <= hi))
        return api_fail(e, 400, INVALID, key, NULL, "'%s' must be between %g and %g, not %g", key, lo, hi, v->num);
    if (integer && !v->is_int) return api_fail(e, 400, INVALID, key, NULL, "'%s' must be an integer", key);
    *out = v->num;
    return 1;
}

static int get_bool(const json *o, const char *key, int *out, api_error *e) {
    const json *v = field(o, key);
    if (!v) return 0;
    if (v->type != JSON_BOOL) return api_bad_type(e, key, "a boolean", v);
    *out = v->boolean;
    return 1;
}

static int parse_stop(const json *root, api_request *r, api_error *e) {
    const json *v = field(root, "stop");
    if (!v) return 0;
    const json *one[1] = {v};
    const json *const *items = one;
    size_t n = 1;
    if (v->type == JSON_ARRAY) {
        items = (const json *const *)v->items;
        n = v->len;
        if (n > API_MAX_STOP)
            return api_fail(e, 400, INVALID, "stop", NULL, "'stop' has %zu strings; at most %d are allowed", n, API_MAX_STOP);
    } else if (v->type != JSON_STRING) {
        return api_bad_type(e, "stop", "a string or an array of strings", v);
    }
    for (size_t i = 0; i < n; i++) {
        if (items[i]->type != JSON_STRING) return api_bad_type(e, "stop", "a string or an array of strings", items[i]);
        if (items[i]->len == 0 || items[i]->len > API_MAX_STOP_LEN)
            return api_fail(e, 400, INVALID, "stop", NULL, "each stop string must have 1 to %d bytes", API_MAX_STOP_LEN);
        r->stop[r->n_stop] = items[i]->str;
        r->stop_len[r->n_stop++] = items[i]->len;
    }
    return 0;
}

/* logit_bias: {"token id": bias}, bias in [-100, 100] (OpenAI's range;
 * -100 bans the token) */
static int parse_bias(const json *root, const api_opts *o, api_request *r, api_error *e) {
    const json *v = field(root, "logit_bias");
    if (!v || v->type == JSON_NULL) return 0;
    if (v->type != JSON_OBJECT) return api_bad_type(e, "logit_bias", "an object of token ids to numbers", v);
    if (v->len > API_MAX_BIAS)
        return api_fail(e, 400, INVALID, "logit_bias", NULL, "'logit_bias' has %zu entries; at most %d are allowed",
                        v->len, API_MAX_BIAS);
    if (!v->len) return 0;
    r->bias_ids = malloc(v->len * sizeof *r->bias_ids);
    r->bias = malloc(v->len * sizeof *r->bias);
    if (!r->bias_ids || !r->bias) return api_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    for (size_t i = 0; i < v->len; i++) {
        const char *k = v->keys[i];
        char *end = NULL;
        /* a decimal id as written by JSON clients: no sign, no leading zero
         * (so one token has one spelling and one entry) */
        const int digits = k[0] >= '0' && k[0] <= '9' && (k[0] != '0' || v->key_lens[i] == 1) && v->key_lens[i] <= 10;
        const long id = digits ? strtol(k, &end, 10) : -1;
        if (id < 0 || !end || *end || (size_t)(end - k) != v->key_lens[i] || id > INT32_MAX)
            return api_fail(e, 400, INVALID, "logit_bias", NULL,
                            "'logit_bias' key '%.*s' is not a token id (a decimal number without sign or leading zero)",
                            (int)(v->key_lens[i] < 40 ? v->key_lens[i] : 40), k);
        if (o && o->n_vocab && (uint32_t)id >= o->n_vocab)
            return api_fail(e, 400, INVALID, "logit_bias", NULL,
                            "'logit_bias' key '%ld' is not a token id of this model's vocabulary (%u tokens)", id,
                            o->n_vocab);
        const json *b = v->items[i];
        if (b->type != JSON_NUMBER || !(b->num >= -100 && b->num <= 100))
            return api_fail(e, 400, INVALID, "logit_bias", NULL, "'logit_bias' value for token %ld must be a number "
                            "from -100 to 100", id);
        r->bias_ids[i] = (int32_t)id;
        r->bias[i] = (float)b->num;
    }
    r->sampling.bias_ids = r->bias_ids;
    r->sampling.bias = r->bias;
    r->sampling.n_bias = (int)v->len;
    return 0;
}

static int parse_common(const json *root, const api_opts *o, api_request *r, api_error *e) {
    const json *v;
    double x;
    int rc;
    if ((v = field(root, "model")) && v->type != JSON_STRING) return api_bad_type(e, "model", "a string", v);
    r->model = v ? v->str : NULL;
    if (get_bool(root, "stream", &r->stream, e) < 0) return -1;
    if ((v = field(root, "stream_options"))) {
        if (v->type != JSON_OBJECT) return api_bad_type(e, "stream_options", "an object", v);
        const json *u = field(v, "include_usage");
        if (u && u->type != JSON_BOOL) return api_bad_type(e, "stream_options.include_usage", "a boolean", u);
        r->include_usage = u && u->boolean;
    }
    gem_sampling *s = &r->sampling;
    if ((rc = get_num(root, "temperature", 0, 2, 0, &x, e)) < 0) return -1;
    if (rc) s->temp = (float)x;
    if ((rc = get_num(root, "top_p", 0, 1, 0, &x, e)) < 0) return -1;
    if (rc) s->top_p = (float)x;
    if ((rc = get_num(root, "top_k", 0, 1e9, 1, &x, e)) < 0) return -1;
    if (rc) s->top_k = (int)x;
    if ((rc = get_num(root, "min_p", 0, 1, 0, &x, e)) < 0) return -1;
    if (rc) s->min_p = (float)x;
    if ((rc = get_num(root, "presence_penalty", -2, 2, 0, &x, e)) < 0) return -1;
    if (rc) s->presence_penalty = (float)x;
    if ((rc = get_num(root, "frequency_penalty", -2, 2, 0, &x, e)) < 0) return -1;
    if (rc) s->frequency_penalty = (float)x;
    if ((rc = get_num(root, "repeat_penalty", 0.01, 100, 0, &x, e)) < 0) return -1;
    if (rc) s->repeat_penalty = (float)x;
    /* the integers a JSON number holds exactly enough to call one (json.c's is_int) */
    if ((rc = get_num(root, "seed", -9.2e18, 9.2e18, 1, &x, e)) < 0) return -1;
    if (rc) {
        s->seed = x < 0 ? (uint64_t)(int64_t)x : (uint64_t)x;
        r->seed_given = 1;
    }
    r->max_tokens = -1;
    if ((rc = get_num(root, "max_tokens", 1, 1e9, 1, &x, e)) < 0) return -1;
    if (rc) r->max_tokens = (long)x;
    if ((rc = get_num(root, "max_completion_tokens", 1, 1e9, 1, &x, e)) < 0) return -1;
    if (rc) r->max_tokens = (long)x;
    r->n = 1;
    if ((rc = get_num(root, "n", 1, 1e9, 1, &x, e)) < 0) return -1;
    if (rc && x > API_MAX_N)
        return api_fail(e, 400, INVALID, "n", NULL, "'n' must be at most %d: the choices are generated one after another",
                        API_MAX_N);
    if (rc) r->n = (int)x;
    if (parse_stop(root, r, e)) return -1;
    if (parse_bias(root, o, r, e)) return -1;
    r->cache_prompt = 1;
    if (get_bool(root, "cache_prompt", &r->cache_prompt, e) < 0) return -1;
    if (get_bool(root, "ignore_eos", &r->ignore_eos, e) < 0) return -1;
    if ((v = field(root, "gem_forced_output"))) {
        if (!o || !o->allow_forced_output)
            return api_fail(e, 400, INVALID, "gem_forced_output", NULL,
                            "'gem_forced_output' is a test hook; the server was not started with --test-hooks");
        if (v->type != JSON_STRING) return api_bad_type(e, "gem_forced_output", "a string", v);
        r->forced_output = v->str;
        r->forced_output_len = v->len;
    }
    return 0;
}

/* ---- chat ---- */

static int is_role(const char *r) {
    return !strcmp(r, "system") || !strcmp(r, "developer") || !strcmp(r, "user") || !strcmp(r, "assistant") ||
           !strcmp(r, "tool");
}

static int check_parts(const json *c, size_t i, api_error *e) {
    char p[64];
    for (size_t j = 0; j < c->len; j++) {
        const json *part = c->items[j];
        snprintf(p, sizeof p, "messages[%zu].content[%zu]", i, j);
        if (part->type != JSON_OBJECT) return api_bad_type(e, p, "an object", part);
        const char *type = api_str(part, "type");
        if (!type) return api_fail(e, 400, INVALID, p, NULL, "'%s' has no 'type' string", p);
        if (strcmp(type, "text"))
            return api_fail(e, 400, INVALID, p, NULL, "'%s' is a '%.40s' part; this model takes text parts only", p,
                            type);
        const json *t = json_get(part, "text");
        if (!t || t->type != JSON_STRING) return api_fail(e, 400, INVALID, p, NULL, "'%s' has no 'text' string", p);
    }
    return 0;
}

/* Assistant tool calls: names checked, string arguments (what OpenAI
 * clients send) parsed into objects so the renderer writes Gemma's syntax. */
static int check_tool_calls(json *tc, size_t i, api_error *e) {
    char p[80];
    snprintf(p, sizeof p, "messages[%zu].tool_calls", i);
    if (tc->type != JSON_ARRAY) return api_bad_type(e, p, "an array", tc);
    if (tc->len > API_MAX_TOOL_CALLS)
        return api_fail(e, 400, INVALID, p, NULL, "'%s' has %zu calls; at most %d are allowed", p, tc->len,
                        API_MAX_TOOL_CALLS);
    for (size_t c = 0; c < tc->len; c++) {
        snprintf(p, sizeof p, "messages[%zu].tool_calls[%zu]", i, c);
        json *call = tc->items[c];
        if (call->type != JSON_OBJECT) return api_bad_type(e, p, "an object", call);
        const char *type = api_str(call, "type");
        if (json_get(call, "type") && (!type || strcmp(type, "function")))
            return api_fail(e, 400, INVALID, p, NULL, "'%s.type' must be \"function\"", p);
        json *fn = json_get(call, "function");
        if (!fn || fn->type != JSON_OBJECT) return api_fail(e, 400, INVALID, p, NULL, "'%s' has no 'function' object", p);
        const json *name = json_get(fn, "name");
        if (!name || name->type != JSON_STRING || !name->len)
            return api_fail(e, 400, INVALID, p, NULL, "'%s.function.name' must be a non-empty string", p);
        json *args = json_get(fn, "arguments");
        if (!args || args->type == JSON_NULL) continue;
        if (args->type == JSON_STRING) {
            json *parsed = json_parse(args->str, args->len, NULL);
            if (!parsed || parsed->type != JSON_OBJECT) {
                json_free(parsed);
                return api_fail(e, 400, INVALID, p, NULL, "'%s.function.arguments' is not a JSON object text", p);
            }
            if (json_set(fn, "arguments", parsed)) return api_fail(e, 500, "server_error", NULL, NULL, "out of memory");
        } else if (args->type != JSON_OBJECT) {
            return api_fail(e, 400, INVALID, p, NULL, "'%s.function.arguments' must be a string or an object", p);
        }
    }
    return 0;
}

static int check_messages(json *msgs, api_error *e) {
    if (!msgs) return api_fail(e, 400, INVALID, "messages", NULL, "'messages' is required");
    if (msgs->type != JSON_ARRAY) return api_bad_type(e, "messages", "an array", msgs);
    if (!msgs->len) return api_fail(e, 400, INVALID, "messages", NULL, "'messages' must not be empty");
    char p[64];
    for (size_t i = 0; i < msgs->len; i++) {
        json *m = msgs->items[i];
        snprintf(p, sizeof p, "messages[%zu]", i);
        if (m->type != JSON_OBJECT) return api_bad_type(e, p, "an object", m);
        const json *role = json_get(m, "role");
        snprintf(p, sizeof p, "messages[%zu].role", i);
        if (!role) return api_fail(e, 400, INVALID, p, NULL, "'%s' is required", p);
        if (role->type != JSON_STRING) return api_bad_type(e, p, "a string", role);
        if (strlen(role->str) != role->len) /* "user\u0000x" is no role */
            return api_fail(e, 400, INVALID, p, NULL,
                            "'%s' contains a NUL character; the roles are system, developer, user, assistant and tool", p);
        if (!is_role(role->str))
            return api_fail(e, 400, INVALID, p, NULL,
                            "'%s' is '%.40s'; the roles are system, developer, user, assistant and tool", p, role->str);
        int assistant = !strcmp(role->str, "assistant");
        const json *c = field(m, "content");
        snprintf(p, sizeof p, "messages[%zu].content", i);
        if (!c) {
            if (!assistant) return api_fail(e, 400, INVALID, p, NULL, "'%s' is required for role '%s'", p, role->str);
        } else if (c->type == JSON_ARRAY) {
            if (check_parts(c, i, e)) return -1;
        } else if (c->type != JSON_STRING) {
            return api_bad_type(e, p, "a string or an array of parts", c);
        }
        json *tc = json_get(m, "tool_calls");
        if (tc && tc->type != JSON_NULL) {
            if (!assistant) {
                snprintf(p, sizeof p, "messages[%zu].tool_calls", i);
                return api_fail(e, 400, INVALID, p, NULL, "'%s' is only allowed on assistant messages", p);
            }
            if (check_tool_calls(tc, i, e)) return -1;
        }
        const json *rc = field(m, "reasoning_content");
        snprintf(p, sizeof p, "messages[%zu].reasoning_content", i);
        if (rc && rc->type != JSON_STRING) return api_bad_type(e, p, "a string", rc);
    }
    return 0;
}

static int name_ok(const json *n) {
    if (!n || n->type != JSON_STRING || !n->len || n->len > 128) return 0;
    for (size_t i = 0; i < n->len; i++) {
        char c = n->str[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
              c == '.'))
            return 0;
    }
    return 1;
}

static int check_tools(const json *root, api_request *r, api_error *e) {
    const json *tools = field(root, "tools");
    char p[64];
    if (tools) {
        if (tools->type != JSON_ARRAY) return api_bad_type(e, "tools", "an array", tools);
        for (size_t i = 0; i < tools->len; i++) {
            const json *t = tools->items[i];
            snprintf(p, sizeof p, "tools[%zu]", i);
            if (t->type != JSON_OBJECT) return api_bad_type(e, p, "an object", t);
            const char *type = api_str(t, "type");
            if (!type || strcmp(type, "function"))
                return api_fail(e, 400, INVALID, p, NULL, "'%s.type' must be \"function\"", p);
            const json *fn = json_get(t, "function");
            if (!fn || fn->type != JSON_OBJECT)
                return api_fail(e, 400, INVALID, p, NULL, "'%s' has no 'function' object", p);
            if (!name_ok(json_get(fn, "name")))
                return api_fail(e, 400, INVALID, p, NULL,
                                "'%s.function.name' must be 1 to 128 letters, digits, '_', '-' or '.'", p);
            const json *d = field(fn, "description");
            if (d && d->type != JSON_STRING)
                return api_fail(e, 400, INVALID, p, NULL, "'%s.function.description' must be a string", p);
            const json *params = field(fn, "parameters");
            if (params && params->type != JSON_OBJECT)
                return api_fail(e, 400, INVALID, p, NULL, "'%s.function.parameters' must be an object", p);
        }
        if (tools->len) r->tools = tools;
    }
    const json *tc = field(root, "tool_choice");
    if (!tc) return 0;
    if (tc->type == JSON_STRING && strlen(tc->str) != tc->len) {
        return api_fail(e, 400, INVALID, "tool_choice", NULL, "'tool_choice' contains a NUL character");
    } else if (tc->type == JSON_STRING) {
        if (!strcmp(tc->str, "auto")) r->tool_choice = API_TOOLS_AUTO;
        else if (!strcmp(tc->str, "none")) r->tool_choice = API_TOOLS_NONE;
        else if (!strcmp(tc->str, "required")) r->tool_choice = API_TOOLS_REQUIRED;
        else
            return api_fail(e, 400, INVALID, "tool_choice", NULL,
                            "'tool_choice' is '%.40s'; it must be \"none\", \"auto\", \"required\" or a function", tc->str);
    } else if (tc->type == JSON_OBJECT) {
        const char *type = api_str(tc, "type");
        const char *name = api_str(json_get(tc, "function"), "name");
        /* a tool's name as tools[] must spell it (name_ok: no NUL, which strcmp would stop at) */
        if (!type || strcmp(type, "function") || !name || !name_ok(json_get(json_get(tc, "function"), "name")))
            return api_fail(e, 400, INVALID, "tool_choice", NULL,
                            "'tool_choice' must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
        r->tool_choice = API_TOOLS_NAMED;
        r->tool_name = name;
    } else {
        return api_bad_type(e, "tool_choice", "a string or an object", tc);
    }
    if (r->tool_choice == API_TOOLS_NONE) {
        r->tools = NULL; /* the model is not told about tools it may not call */
        return 0;
    }
    if ((r->tool_choice == API_TOOLS_REQUIRED || r->tool_choice == API_TOOLS_NAMED) && !r->tools)
        return api_fail(e, 400, INVALID, "tool_choice", NULL, "'tool_choice' asks for a tool call but 'tools' is empty");
    if (r->tool_choice == API_TOOLS_NAMED) {
        for (size_t i = 0; i < r->tools->len; i++) {
            const char *n = api_str(json_get(r->tools->items[i], "function"), "name");
            if (n && !strcmp(n, r->tool_name)) return 0;
        }
        return api_fail(e, 400, INVALID, "tool_choice", NULL, "'tool_choice' names '%.60s', which is not in 'tools'",
                        r->tool_name);
    }
    return 0;
}

/* response_format: text, json_object, or json_schema (api_grammar compiles
 * it); chat and completions alike */
static int parse_response_format(const json *root, api_request *r, api_error *e) {
    const json *rf = field(root, "response_format");
    if (rf) {
        const json *t = rf->type == JSON_OBJECT ? json_get(rf, "type") : NULL;
        if (!t || t->type != JSON_STRING) return api_bad_type(e, "response_format", "an object with a 'type'", rf);
        if (strlen(t->str) == t->len && !strcmp(t->str, "json_object")) {
            r->json_mode = API_JSON_OBJECT;
        } else if (strlen(t->str) == t->len && !strcmp(t->str, "json_schema")) {
            const json *js = json_get(rf, "json_schema");
            if (!js || js->type != JSON_OBJECT)
                return api_bad_type(e, "response_format.json_schema", "an object with a 'schema'", js ? js : rf);
            const json *name = json_get(js, "name"), *strict = json_get(js, "strict");
            if (name && name->type != JSON_STRING) return api_bad_type(e, "response_format.json_schema.name", "a string", name);
            if (strict && strict->type != JSON_BOOL && strict->type != JSON_NULL)
                return api_bad_type(e, "response_format.json_schema.strict", "a boolean", strict);
            r->schema = json_get(js, "schema");
            if (r->schema && r->schema->type != JSON_OBJECT && r->schema->type != JSON_BOOL)
                return api_bad_type(e, "response_format.json_schema.schema", "an object", r->schema);
            r->json_mode = API_JSON_SCHEMA;
        } else if (strlen(t->str) != t->len || strcmp(t->str, "text")) {
            return api_fail(e, 400, INVALID, "response_format", NULL,
                            "'response_format' type '%.40s' is not supported (text, json_object or json_schema)",
                            t->str);
        }
    }
    return 0;
}

static int parse_chat(json *root, api_request *r, api_error *e) {
    if (check_messages(json_get(root, "messages"), e)) return -1;
    r->messages = json_get(root, "messages");
    if (check_tools(root, r, e)) return -1;
    r->enable_thinking = -1;
    const json *kw = field(root, "chat_template_kwargs");
    if (kw) {
        if (kw->type != JSON_OBJECT) return api_bad_type(e, "chat_template_kwargs", "an object", kw);
        const json *t = field(kw, "enable_thinking");
        if (t && t->type != JSON_BOOL) return api_bad_type(e, "chat_template_kwargs.enable_thinking", "a boolean", t);
        if (t) r->enable_thinking = t->boolean;
    }
    const json *eff = field(root, "reasoning_effort");
    if (eff) {
        if (eff->type != JSON_STRING) return api_bad_type(e, "reasoning_effort", "a string", eff);
        if (strlen(eff->str) != eff->len) /* a NUL inside: none of the words */
            return api_fail(e, 400, INVALID, "reasoning_effort", NULL,
                            "'reasoning_effort' must be none, minimal, low, medium or high");
        if (!strcmp(eff->str, "none") || !strcmp(eff->str, "minimal")) r->enable_thinking = 0;
        else if (!strcmp(eff->str, "low") || !strcmp(eff->str, "medium") || !strcmp(eff->str, "high"))
            r->enable_thinking = 1;
        else
            return api_fail(e, 400, INVALID, "reasoning_effort", NULL,
                            "'reasoning_effort' must be none, minimal, low, medium or high");
    }
    const json *ptc = field(root, "parallel_tool_calls");
    if (ptc && ptc->type != JSON_BOOL) return api_bad_type(e, "parallel_tool_calls", "a boolean", ptc);
    r->single_call = ptc && !ptc->boolean;
    /* logprobs: true lists each generated token's log-probability (with
     * top_logprobs alternatives); top_logprobs alone is an error, as OpenAI
     * answers it */
    if (get_bool(root, "logprobs", &r->logprobs, e) < 0) return -1;
    double x;
    int rc = get_num(root, "top_logprobs", 0, API_MAX_TOP_LOGPROBS, 1, &x, e);
    if (rc < 0) return -1;
    if (rc && !r->logprobs)
        return api_fail(e, 400, INVALID, "top_logprobs", NULL, "'top_logprobs' needs 'logprobs': true");
    if (rc) r->top_logprobs = (int)x;
    /* OpenAI fields gem does not honour: refused by name, never ignored */
    static const char *const unsupported[][2] = {
        {"functions", "'functions' is not supported: send 'tools'"},
        {"function_call", "'function_call' is not supported: send 'tool_choice'"},
        {"audio", "'audio' is not supported: text only"},
        {"prediction", "'prediction' (predicted outputs) is not supported"},
        {"web_search_options", "'web_search_options' is not supported"},
    };
    for (size_t i = 0; i < sizeof unsupported / sizeof unsupported[0]; i++) {
        const json *u = field(root, unsupported[i][0]);
        if (u && u->type != JSON_NULL) return api_fail(e, 400, INVALID, unsupported[i][0], NULL, "%s", unsupported[i][1]);
    }
    const json *mod = field(root, "modalities");
    if (mod && mod->type != JSON_NULL) {
        if (mod->type != JSON_ARRAY) return api_bad_type(e, "modalities", "an array", mod);
        for (size_t i = 0; i < mod->len; i++)
            if (mod->items[i]->type != JSON_STRING || strcmp(mod->items[i]->str, "text"))
                return api_fail(e, 400, INVALID, "modalities", NULL, "'modalities' other than \"text\" are not supported");
    }
    if (parse_response_format(root, r, e)) return -1;
    return 0;
}

/* ---- completions ---- */

#define PROMPT_FORMS "a string, an array of strings, an array of token ids or an array of token id arrays"

/* A token id list (ids already known to be an array; packed when every
 * element is an int32 integer). One the context cannot hold is refused
 * before its ids are copied. */
static int parse_ids(const json *a, const char *param, const api_opts *o, api_prompt *p, api_error *e) {
    if (!a->len) return api_fail(e, 400, INVALID, "prompt", NULL, "'%s' must not be empty", param);
    if (o->n_ctx > 0 && a->len >= (size_t)o->n_ctx)
        return api_fail(e, 400, INVALID, "prompt", "context_length_exceeded",
                        "%s has %zu tokens; the context holds %d (start the server with a larger --ctx)",
                        strcmp(param, "prompt") ? param : "the prompt", a->len, o->n_ctx);
    if (!(p->ids = malloc(a->len * sizeof *p->ids))) return api_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    p->n_ids = a->len;
    for (size_t i = 0; i < a->len; i++) {
        const json *id = a->ints ? NULL : a->items[i];
        if (a->ints ? a->ints[i] < 0 : id->type != JSON_NUMBER || !id->is_int || id->num < 0 || id->num > INT32_MAX)
            return api_fail(e, 400, INVALID, "prompt", NULL, "'%s' must be an array of token ids (element %zu is not)",
                            param, i);
        p->ids[i] = a->ints ? a->ints[i] : (int32_t)id->num;
    }
    return 0;
}

/* prompt: a string, an id list, or a list of either (one prompt each);
 * a list is all strings or all id lists, never a mix. */
static int parse_prompts(const json *p, const api_opts *o, api_request *r, api_error *e) {
    if (!p) return api_fail(e, 400, INVALID, "prompt", NULL, "'prompt' is required");
    if (p->type != JSON_STRING && p->type != JSON_ARRAY) return api_bad_type(e, "prompt", PROMPT_FORMS, p);
    if (p->type == JSON_ARRAY && !p->len) return api_fail(e, 400, INVALID, "prompt", NULL, "'prompt' must not be empty");
    /* one prompt: a string or ids; else a list of prompts */
    const int one = p->type == JSON_STRING || p->ints || p->items[0]->type == JSON_NUMBER;
    const size_t n = one ? 1 : p->len;
    if (n > API_MAX_CHOICES)
        return api_fail(e, 400, INVALID, "prompt", NULL, "'prompt' has %zu prompts; at most %d are allowed", n,
                        API_MAX_CHOICES);
    if ((size_t)r->n * n > API_MAX_CHOICES)
        return api_fail(e, 400, INVALID, "prompt", NULL, "%zu prompts with n %d make %zu choices; at most %d are allowed",
                        n, r->n, (size_t)r->n * n, API_MAX_CHOICES);
    if (!(r->prompts = calloc(n, sizeof *r->prompts))) return api_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    r->n_prompts = n;
    if (one && p->type == JSON_STRING) {
        r->prompts[0].text = p->str;
        r->prompts[0].len = p->len;
        return 0;
    }
    if (one) return parse_ids(p, "prompt", o, &r->prompts[0], e);
    const int strings = p->items[0]->type == JSON_STRING;
    char name[32];
    for (size_t i = 0; i < n; i++) {
        const json *it = p->items[i];
        snprintf(name, sizeof name, "prompt[%zu]", i);
        if (strings && it->type == JSON_STRING) {
            r->prompts[i].text = it->str;
            r->prompts[i].len = it->len;
        } else if (!strings && it->type == JSON_ARRAY) {
            if (parse_ids(it, name, o, &r->prompts[i], e)) return -1;
        } else {
            return api_fail(e, 400, INVALID, "prompt", NULL, "'prompt' must be %s (element %zu is %s)", PROMPT_FORMS, i,
                            api_type_name(it));
        }
    }
    return 0;
}

static int parse_completion(json *root, const api_opts *o, api_request *r, api_error *e) {
    if (parse_prompts(field(root, "prompt"), o, r, e)) return -1;
    if (get_bool(root, "echo", &r->echo, e) < 0) return -1;
    if (field(root, "suffix")) return api_fail(e, 400, INVALID, "suffix", NULL, "'suffix' is not supported");
    /* legacy logprobs: how many alternatives per token (0 lists the chosen
     * token's alone) */
    double x;
    int rc = get_num(root, "logprobs", 0, API_MAX_LEGACY_LOGPROBS, 1, &x, e);
    if (rc < 0) return -1;
    if (rc) {
        r->logprobs = 1;
        r->top_logprobs = (int)x;
    }
    if (field(root, "top_logprobs"))
        return api_fail(e, 400, INVALID, "top_logprobs", NULL,
                        "'top_logprobs' is a chat field; completions take 'logprobs': the number of alternatives");
    rc = get_num(root, "best_of", 1, 1e9, 1, &x, e);
    if (rc < 0) return -1;
    if (rc && x != 1) return api_fail(e, 400, INVALID, "best_of", NULL, "'best_of' must be 1");
    if (get_bool(root, "return_tokens", &r->return_tokens, e) < 0) return -1;
    if (parse_response_format(root, r, e)) return -1;
    return 0;
}

int api_parse(api_kind kind, const char *body, size_t n, const api_opts *o, api_request *r, api_error *e) {
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->enable_thinking = -1;
    r->sampling = gem_sampling_default();
    /* gem's sampling defaults, the same as gem run and gem chat */
    r->sampling.temp = 0.8f;
    r->sampling.top_k = 64;
    r->sampling.top_p = 0.95f;
    /* a completion's token id lists are packed (no node per id) */
    if (!(r->root = api_parse_body(body, n, kind == API_COMPLETION ? "prompt" : NULL, e))) return -1;
    if (r->root->type != JSON_OBJECT)
        return api_fail(e, 400, INVALID, NULL, "invalid_json", "the request body must be a JSON object, not %s",
                        api_type_name(r->root));
    r->format = o->format;
    if (parse_common(r->root, o, r, e)) return -1;
    return kind == API_CHAT ? parse_chat(r->root, r, e) : parse_completion(r->root, o, r, e);
}

void api_request_free(api_request *r) {
    json_free(r->root);
    for (size_t i = 0; i < r->n_prompts; i++) free(r->prompts[i].ids);
    free(r->prompts);
    free(r->bias_ids);
    free(r->bias);
    memset(r, 0, sizeof *r);
}

int api_opens_reasoning(const api_request *r) {
    const chat_render_opts ro = {r->messages, r->tools, r->enable_thinking, 1, "<bos>", r->format};
    return chat_render_opens_reasoning(&ro);
}

int api_render(const api_request *r, strbuf *prompt, api_error *e) {
    gem_err err = {{0}};
    chat_render_opts ro = {r->messages, r->tools, r->enable_thinking, 1, "<bos>", r->format};
    /* the renderer also reads the tools' declarations: name the part its error is about */
    const int rc = chat_render(&ro, prompt, &err);
    if (rc) return api_fail(e, 400, INVALID, rc == CHAT_RENDER_BAD_TOOLS ? "tools" : "messages", NULL, "%s", err.msg);
    if (prompt->failed) return api_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    return 0;
}

int api_grammar(const api_request *r, gram **out, api_error *e) {
    *out = NULL;
    gem_err err = {{0}};
    gram *g = NULL;
    const char *param;
    if (r->kind == API_CHAT && (r->tool_choice == API_TOOLS_REQUIRED || r->tool_choice == API_TOOLS_NAMED)) {
        param = "tools";
        g = gram_tool_calls(r->tools, r->tool_choice == API_TOOLS_NAMED ? r->tool_name : NULL, r->single_call ? 1 : 0,
                            &err);
    } else if (r->json_mode) {
        param = "response_format";
        /* a json_schema without a schema, or the schema true: any object */
        const json *sc = r->json_mode == API_JSON_SCHEMA && r->schema && r->schema->type == JSON_OBJECT ? r->schema : NULL;
        if (r->json_mode == API_JSON_SCHEMA && r->schema && r->schema->type == JSON_BOOL && !r->schema->boolean)
            return api_fail(e, 400, INVALID, "response_format", NULL,
                            "response_format.json_schema.schema is false: no answer can follow it");
        g = gram_json_schema(sc, GRAM_SYNTAX_JSON, &err);
    } else {
        return 0;
    }
    if (!g)
        return api_fail(e, 400, INVALID, param, NULL, "%s%s", !strcmp(param, "tools") ? "" : "response_format.json_schema.",
                        err.msg);
    if (r->kind == API_CHAT && r->enable_thinking == 1) { /* the thought before the constrained part */
        gram *t = gram_with_reasoning(g, &err);
        gram_free(g);
        if (!t) return api_fail(e, 400, INVALID, param, NULL, "%s", err.msg);
        g = t;
    }
    *out = g;
    return 0;
}

int api_parse_tokenize(const char *body, size_t n, api_tokenize *t, api_error *e) {
    memset(t, 0, sizeof *t);
    t->parse_special = 1;
    if (!(t->root = api_parse_body(body, n, NULL, e))) return -1;
    if (t->root->type != JSON_OBJECT)
        return api_fail(e, 400, INVALID, NULL, "invalid_json", "the request body must be a JSON object");
    const json *c = json_get(t->root, "content");
    if (!c) return api_fail(e, 400, INVALID, "content", NULL, "'content' is required");
    if (c->type != JSON_STRING) return api_bad_type(e, "content", "a string", c);
    t->content = c->str;
    t->content_len = c->len;
    if (get_bool(t->root, "add_special", &t->add_special, e) < 0) return -1;
    if (get_bool(t->root, "parse_special", &t->parse_special, e) < 0) return -1;
    if (get_bool(t->root, "with_pieces", &t->with_pieces, e) < 0) return -1;
    return 0;
}

int api_parse_detokenize(const char *body, size_t n, const api_opts *o, int32_t **ids, size_t *n_ids, api_error *e) {
    *ids = NULL;
    *n_ids = 0;
    json *root = api_parse_body(body, n, "tokens", e);
    if (!root) return -1;
    int rc = -1;
    const json *t = json_get(root, "tokens");
    if (root->type != JSON_OBJECT) api_fail(e, 400, INVALID, NULL, "invalid_json", "the request body must be a JSON object");
    else if (!t) api_fail(e, 400, INVALID, "tokens", NULL, "'tokens' is required");
    else if (t->type != JSON_ARRAY) api_bad_type(e, "tokens", "an array", t);
    /* the text grows with the ids (up to 48 bytes each, more once quoted):
     * no more of them than a context holds */
    else if (o->n_ctx > 0 && t->len > (size_t)o->n_ctx)
        api_fail(e, 400, INVALID, "tokens", "context_length_exceeded",
                 "'tokens' has %zu ids; at most %d (the context) are detokenized", t->len, o->n_ctx);
    else if (!(*ids = malloc((t->len ? t->len : 1) * sizeof **ids))) api_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    else {
        rc = 0;
        for (size_t i = 0; i < t->len; i++) {
            const json *v = t->ints ? NULL : t->items[i];
            const int ok = t->ints ? t->ints[i] >= 0 && (uint32_t)t->ints[i] < o->n_vocab
                                   : v->type == JSON_NUMBER && v->is_int && v->num >= 0 && v->num < o->n_vocab;
            if (!ok) {
                rc = api_fail(e, 400, INVALID, "tokens", NULL, "'tokens[%zu]' is not a token id below %u", i, o->n_vocab);
                break;
            }
            (*ids)[i] = t->ints ? t->ints[i] : (int32_t)v->num;
        }
        *n_ids = t->len;
    }
    if (rc) {
        free(*ids);
        *ids = NULL;
        *n_ids = 0;
    }
    json_free(root);
    return rc;
}
