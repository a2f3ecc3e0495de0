/* Qwen3.5 chat renderer (see chat.h).
 *
 * Mirrors data/templates/Qwen3.5-4B.jinja as transformers renders it with
 * Python's jinja2; each function names the template part it implements,
 * so the two read side by side. Python details that matter for byte
 * equality: `trim` is str.strip() (Python's white space set), printing a
 * value is str() (True, None, 1.0, integers with all their digits),
 * `tojson` is json.dumps with ", " and ": " and non-ASCII kept
 * (util/json.h's Python renderings), split/rstrip/lstrip are Python's.
 *
 * Where the template would raise, the renderer fails with the template's
 * message. Two inputs go beyond it, as OpenAI requests need: tool-call
 * arguments given as a JSON text (the wire format) are parsed first, and a
 * content part's non-string text prints as JSON rather than Python repr. */
#include <stdlib.h>
#include <string.h>

#include "chat/chat_int.h"

#define TOOLS_INTRO "# Tools\n\nYou have access to the following functions:\n\n<tools>"
#define TOOLS_RULES                                                                                                 \
    "\n</tools>\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n"         \
    "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n"        \
    "<parameter=example_parameter_2>\nThis is the value for the second parameter\nthat can span\nmultiple lines\n"  \
    "</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n- Function calls MUST follow the specified " \
    "format: an inner <function=...></function> block must be nested within <tool_call></tool_call> XML tags\n"     \
    "- Required parameters MUST be specified\n- You may provide optional reasoning for your function call in "      \
    "natural language BEFORE the function call, but NOT after\n- If there is no function call available, answer "   \
    "the question like normal with your current knowledge and do not tell the user about function calls\n"          \
    "</IMPORTANT>"

/* ---- Python string helpers ---- */

/* str.isspace() code points */
static int py_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

/* The code point at s[i] (a stray byte counts as itself) and its length. */
static uint32_t cp_at(const char *s, size_t n, size_t i, size_t *len) {
    unsigned char b = (unsigned char)s[i];
    size_t l = b < 0x80 ? 1 : b < 0xc0 ? 1 : b < 0xe0 ? 2 : b < 0xf0 ? 3 : 4;
    if (i + l > n) l = 1;
    uint32_t c = l == 1 ? b : l == 2 ? b & 0x1fu : l == 3 ? b & 0x0fu : b & 0x07u;
    for (size_t k = 1; k < l; k++) c = c << 6 | ((unsigned char)s[i + k] & 0x3f);
    *len = l;
    return c;
}

/* str.strip(): [*a, *a + *l) of s[0..n) */
static void py_strip(const char *s, size_t n, size_t *a, size_t *l) {
    size_t i = 0, e = n, k;
    while (i < n && py_space(cp_at(s, n, i, &k))) i += k;
    while (e > i) {
        size_t j = e - 1;
        while (j > i && ((unsigned char)s[j] & 0xc0) == 0x80) j--;
        if (!py_space(cp_at(s, n, j, &k)) || j + k != e) break;
        e = j;
    }
    *a = i;
    *l = e - i;
}

/* A string slice. */
typedef struct {
    const char *p;
    size_t n;
} str;

static str strip(str s) {
    size_t a, l;
    py_strip(s.p, s.n, &a, &l);
    return (str){s.p + a, l};
}

static str lstrip_nl(str s) {
    while (s.n && s.p[0] == '\n') s.p++, s.n--;
    return s;
}

static str rstrip_nl(str s) {
    while (s.n && s.p[s.n - 1] == '\n') s.n--;
    return s;
}

static const char *find(str s, const char *m) { return memmem(s.p, s.n, m, strlen(m)); }

/* The last occurrence of m in s, or NULL. */
static const char *find_last(str s, const char *m) {
    const char *last = NULL;
    for (const char *h = find(s, m); h; h = find((str){h + 1, (size_t)(s.p + s.n - h - 1)}, m)) last = h;
    return last;
}

static int is_type(const json *v, json_type t) { return v && v->type == t; }

/* ---- template parts ---- */

/* macro render_content(content, do_vision_count, is_system_content) */
static int render_content(strbuf *o, const json *content, int is_system, size_t mi, gem_err *err) {
    if (!content || content->type == JSON_NULL) return 0;
    if (content->type == JSON_STRING) {
        sb_put(o, content->str, content->len);
        return 0;
    }
    if (content->type != JSON_ARRAY) return gem_err_set(err, "messages[%zu]: Unexpected content type.", mi);
    for (size_t i = 0; i < content->len; i++) {
        const json *item = content->items[i];
        if (!is_type(item, JSON_OBJECT))
            return gem_err_set(err, "messages[%zu].content[%zu]: Unexpected item type in content.", mi, i);
        const char *type = json_get_str(item, "type");
        if (json_get(item, "image") || json_get(item, "image_url") || (type && !strcmp(type, "image"))) {
            if (is_system) return gem_err_set(err, "System message cannot contain images.");
            sb_puts(o, "<|vision_start|><|image_pad|><|vision_end|>");
        } else if (json_get(item, "video") || (type && !strcmp(type, "video"))) {
            if (is_system) return gem_err_set(err, "System message cannot contain videos.");
            sb_puts(o, "<|vision_start|><|video_pad|><|vision_end|>");
        } else if (json_get(item, "text")) {
            json_str_py(json_get(item, "text"), o);
        } else {
            return gem_err_set(err, "messages[%zu].content[%zu]: Unexpected item type in content.", mi, i);
        }
    }
    return 0;
}

/* render_content(...)|trim, into buf (reset first); the slice is in buf */
static int content_trimmed(strbuf *buf, const json *content, int is_system, size_t mi, str *out, gem_err *err) {
    buf->len = 0;
    if (render_content(buf, content, is_system, mi, err)) return -1;
    *out = strip((str){sb_cstr(buf), buf->len});
    return 0;
}

/* {{- '<parameter=' + args_name + '>\n' }}...{{- '\n</parameter>\n' }} for every argument */
static int render_arguments(strbuf *o, const json *args, size_t mi, size_t ci, gem_err *err) {
    json *parsed = NULL;
    if (is_type(args, JSON_STRING)) { /* the wire format: a JSON text */
        gem_err perr;
        parsed = json_parse(args->str, args->len, &perr);
        args = parsed;
    }
    if (!is_type(args, JSON_OBJECT)) {
        json_free(parsed);
        return gem_err_set(err, "messages[%zu].tool_calls[%zu]: arguments must be an object", mi, ci);
    }
    for (size_t i = 0; i < args->len; i++) {
        const json *v = args->items[i];
        sb_puts(o, "<parameter=");
        sb_put(o, args->keys[i], args->key_lens[i]);
        sb_puts(o, ">\n");
        if (is_type(v, JSON_OBJECT) || is_type(v, JSON_ARRAY)) json_dump_py(v, o);
        else json_str_py(v, o);
        sb_puts(o, "\n</parameter>\n");
    }
    json_free(parsed);
    return 0;
}

/* {%- if message.tool_calls and ... %}{%- for tool_call in message.tool_calls %} */
static int render_tool_calls(strbuf *o, const json *calls, str content, size_t mi, gem_err *err) {
    if (is_type(calls, JSON_STRING) && calls->len)
        return gem_err_set(err, "messages[%zu].tool_calls must be an array", mi);
    if (!is_type(calls, JSON_ARRAY)) return 0; /* a mapping or a scalar is skipped */
    for (size_t c = 0; c < calls->len; c++) {
        const json *call = calls->items[c];
        if (is_type(call, JSON_OBJECT) && json_get(call, "function")) call = json_get(call, "function");
        const json *name = is_type(call, JSON_OBJECT) ? json_get(call, "name") : NULL;
        if (!is_type(name, JSON_STRING))
            return gem_err_set(err, "messages[%zu].tool_calls[%zu] has no function name", mi, c);
        if (c) sb_puts(o, "\n<tool_call>\n<function=");
        else if (strip(content).n) sb_puts(o, "\n\n<tool_call>\n<function=");
        else sb_puts(o, "<tool_call>\n<function=");
        sb_put(o, name->str, name->len);
        sb_puts(o, ">\n");
        const json *args = json_get(call, "arguments");
        if (args && render_arguments(o, args, mi, c, err)) return -1;
        sb_puts(o, "</function>\n</tool_call>");
    }
    return 0;
}

/* the assistant branch: reasoning from the field or split out of content */
static int render_assistant(strbuf *o, const json *m, str content, int after_query, size_t mi, gem_err *err) {
    str reasoning = {"", 0};
    const json *rc = json_get(m, "reasoning_content");
    if (is_type(rc, JSON_STRING)) {
        reasoning = (str){rc->str, rc->len};
    } else if (find(content, "</think>")) {
        /* content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') */
        const char *close = find(content, "</think>");
        str before = rstrip_nl((str){content.p, (size_t)(close - content.p)});
        const char *open = find_last(before, "<think>");
        if (open) before = (str){open + 7, (size_t)(before.p + before.n - open - 7)};
        reasoning = lstrip_nl(before);
        /* content.split('</think>')[-1].lstrip('\n') */
        const char *last = find_last(content, "</think>");
        content = lstrip_nl((str){last + 8, (size_t)(content.p + content.n - last - 8)});
    }
    reasoning = strip(reasoning);
    sb_puts(o, "<|im_start|>assistant\n");
    if (after_query) {
        sb_puts(o, "<think>\n");
        sb_put(o, reasoning.p, reasoning.n);
        sb_puts(o, "\n</think>\n\n");
    }
    sb_put(o, content.p, content.n);
    const json *calls = json_get(m, "tool_calls");
    if (json_truthy(calls) && render_tool_calls(o, calls, content, mi, err)) return -1;
    sb_puts(o, "<|im_end|>\n");
    return 0;
}

static const char *role_of(const json *m) { return json_get_str(m, "role"); }

static int role_is(const json *m, const char *r) {
    const char *x = role_of(m);
    return x && !strcmp(x, r);
}

/* the system block opening the prompt, with or without tools */
static int render_system(strbuf *o, const json *messages, const json *tools, strbuf *buf, gem_err *err) {
    const int sys = role_is(messages->items[0], "system");
    str content = {"", 0};
    if (sys && content_trimmed(buf, json_get(messages->items[0], "content"), 1, 0, &content, err)) return -1;
    if (tools) {
        sb_puts(o, "<|im_start|>system\n" TOOLS_INTRO);
        for (size_t t = 0; t < tools->len; t++) {
            sb_putc(o, '\n');
            json_dump_py(tools->items[t], o);
        }
        sb_puts(o, TOOLS_RULES);
        if (content.n) {
            sb_puts(o, "\n\n");
            sb_put(o, content.p, content.n);
        }
        sb_puts(o, "<|im_end|>\n");
    } else if (sys) {
        sb_puts(o, "<|im_start|>system\n");
        sb_put(o, content.p, content.n);
        sb_puts(o, "<|im_end|>\n");
    }
    return 0;
}

int chat_qwen35_render(const chat_render_opts *opt, strbuf *o, gem_err *err) {
    const json *messages = opt->messages, *tools = opt->tools;
    if (!is_type(messages, JSON_ARRAY)) return gem_err_set(err, "'messages' must be an array");
    if (tools && tools->type != JSON_NULL && !is_type(tools, JSON_ARRAY)) {
        gem_err_set(err, "'tools' must be an array");
        return CHAT_RENDER_BAD_TOOLS;
    }
    if (!json_truthy(tools)) tools = NULL;
    if (!messages->len) return gem_err_set(err, "No messages provided.");
    for (size_t i = 0; i < messages->len; i++) {
        const json *m = messages->items[i];
        if (!is_type(m, JSON_OBJECT)) return gem_err_set(err, "messages[%zu] is not an object", i);
        if (!role_is(m, "system") && !role_is(m, "user") && !role_is(m, "assistant") && !role_is(m, "tool"))
            return gem_err_set(err, "messages[%zu]: Unexpected message role.", i);
    }
    strbuf buf = {0};
    int rc = -1;
    if (render_system(o, messages, tools, &buf, err)) goto done;
    /* ns.last_query_index: the last user message that is not a wrapped
     * tool response */
    long last_query = -1;
    for (size_t k = messages->len; k-- > 0 && last_query < 0;) {
        const json *m = messages->items[k];
        if (!role_is(m, "user")) continue;
        str c;
        if (content_trimmed(&buf, json_get(m, "content"), 0, k, &c, err)) goto done;
        int wrapped = c.n >= 15 && !memcmp(c.p, "<tool_response>", 15) && c.n >= 16 &&
                      !memcmp(c.p + c.n - 16, "</tool_response>", 16);
        if (!wrapped) last_query = (long)k;
    }
    if (last_query < 0) {
        gem_err_set(err, "No user query found in messages.");
        goto done;
    }
    for (size_t i = 0; i < messages->len; i++) {
        const json *m = messages->items[i];
        str content;
        if (content_trimmed(&buf, json_get(m, "content"), 0, i, &content, err)) goto done;
        if (role_is(m, "system")) {
            if (i) {
                gem_err_set(err, "messages[%zu]: System message must be at the beginning.", i);
                goto done;
            }
        } else if (role_is(m, "user")) {
            sb_puts(o, "<|im_start|>user\n");
            sb_put(o, content.p, content.n);
            sb_puts(o, "<|im_end|>\n");
        } else if (role_is(m, "assistant")) {
            if (render_assistant(o, m, content, (long)i > last_query, i, err)) goto done;
        } else { /* tool */
            if (i && !role_is(messages->items[i - 1], "tool")) sb_puts(o, "<|im_start|>user");
            sb_puts(o, "\n<tool_response>\n");
            sb_put(o, content.p, content.n);
            sb_puts(o, "\n</tool_response>");
            if (i + 1 == messages->len || !role_is(messages->items[i + 1], "tool")) sb_puts(o, "<|im_end|>\n");
        }
    }
    if (opt->add_generation_prompt) {
        sb_puts(o, "<|im_start|>assistant\n");
        sb_puts(o, opt->enable_thinking == 0 ? "<think>\n\n</think>\n\n" : "<think>\n");
    }
    rc = 0;
    if (o->failed || buf.failed) rc = gem_err_set(err, "out of memory rendering the conversation");
done:
    sb_free(&buf);
    return rc;
}
