/* Qwen3.5 chat format: the native renderer equals Qwen3.5-4B.jinja rendered
 * by Python's jinja2 on every conversation in tests/data/chat/qwen35
 * (goldens from tools/chat_golden.sh qwen35), failing with the template's
 * message where it raises; the streaming parser turns generated text into
 * reasoning, content and tool calls whatever the chunking, never leaks a
 * partial marker, types arguments by the declared tools, and turns
 * malformed calls into content; the format table. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat.h"
#include "test.h"

#define DIR_GOLDEN "tests/data/chat/qwen35"

static int render_conv(const char *text, size_t n, strbuf *out, gem_err *err) {
    json *conv = json_parse(text, n, err);
    if (!conv) return -1;
    chat_render_opts o = {0};
    o.format = CHAT_FORMAT_QWEN35;
    o.messages = json_get(conv, "messages");
    o.tools = json_get(conv, "tools");
    const json *th = json_get(conv, "enable_thinking");
    o.enable_thinking = th ? json_truthy(th) : -1;
    const json *gp = json_get(conv, "add_generation_prompt");
    o.add_generation_prompt = gp ? json_truthy(gp) : 1;
    int rc = chat_render(&o, out, err);
    json_free(conv);
    return rc;
}

static void test_goldens(void) {
    DIR *d = opendir(DIR_GOLDEN);
    CHECK(d != NULL);
    if (!d) return;
    struct dirent *e;
    int count = 0, errors = 0;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 6 || strcmp(e->d_name + l - 5, ".json")) continue;
        char jp[512], tp[512];
        snprintf(jp, sizeof jp, DIR_GOLDEN "/%s", e->d_name);
        snprintf(tp, sizeof tp, DIR_GOLDEN "/%.*s.txt", (int)(l - 5), e->d_name);
        size_t jn, tn;
        char *js = test_slurp(jp, &jn), *want = test_slurp(tp, &tn);
        CHECKF(js && want, "%s", jp);
        if (js && want) {
            strbuf out = {0};
            gem_err err = {{0}};
            int rc = render_conv(js, jn, &out, &err);
            if (!strncmp(want, "ERROR: ", 7)) { /* the template raises: so must the renderer, saying the same */
                CHECKF(rc != 0 && strstr(err.msg, want + 7), "%s: rc %d, '%s'", jp, rc, err.msg);
                errors++;
            } else {
                CHECKF(rc == 0, "%s: %s", jp, err.msg);
                int same = rc == 0 && out.len == tn && !memcmp(sb_cstr(&out), want, tn);
                if (!same && rc == 0) {
                    size_t i = 0;
                    while (i < tn && i < out.len && want[i] == out.p[i]) i++;
                    fprintf(stderr, "%s differs at byte %zu:\n  want ...%.80s\n  got  ...%.80s\n", jp, i,
                            want + (i > 20 ? i - 20 : 0), sb_cstr(&out) + (i > 20 ? i - 20 : 0));
                }
                CHECKF(same, "%s", jp);
            }
            sb_free(&out);
            count++;
        }
        free(js);
        free(want);
    }
    closedir(d);
    CHECKF(count - errors >= 40, "only %d conversations render", count - errors);
    printf("rendered %d conversations (%d rejected as the template does)\n", count, errors);
}

/* Inputs beyond the template: OpenAI's JSON-text arguments render as the
 * object would; malformed shapes fail with named errors. */
static void test_render_extras(void) {
    const char *as_text = "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":\"\","
                          "\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\": 1.0, \\\"b\\\": [true]}\"}}]}],"
                          "\"add_generation_prompt\":false}";
    strbuf out = {0};
    gem_err err = {{0}};
    CHECK(render_conv(as_text, strlen(as_text), &out, &err) == 0);
    CHECKF(strstr(sb_cstr(&out), "<parameter=a>\n1.0\n</parameter>\n<parameter=b>\n[true]\n</parameter>"), "%s", sb_cstr(&out));
    sb_free(&out);
    const struct {
        const char *conv, *msg;
    } bad[] = {
        {"{\"messages\":{}}", "'messages' must be an array"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],\"tools\":{}}", "'tools' must be an array"},
        {"{\"messages\":[\"hi\"]}", "messages[0] is not an object"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":[{\"kind\":\"x\"}]}]}", "Unexpected item type in content."},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{}}]}]}",
         "messages[1].tool_calls[0] has no function name"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"tool_calls\":[{\"function\":"
         "{\"name\":\"f\",\"arguments\":\"[1]\"}}]}]}",
         "arguments must be an object"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        strbuf o2 = {0};
        gem_err e2 = {{0}};
        int rc = render_conv(bad[i].conv, strlen(bad[i].conv), &o2, &e2);
        CHECKF(rc != 0 && strstr(e2.msg, bad[i].msg), "%s: '%s'", bad[i].conv, e2.msg);
        sb_free(&o2);
    }
}

typedef struct {
    strbuf content, reasoning, calls;
    int n_calls;
} collected;

static void collect(const chat_event *ev, void *ctx) {
    collected *c = ctx;
    if (ev->kind == CHAT_EV_CONTENT) sb_put(&c->content, ev->text, ev->len);
    else if (ev->kind == CHAT_EV_REASONING) sb_put(&c->reasoning, ev->text, ev->len);
    else {
        gem_err err;
        json *v = json_parse(ev->arguments, strlen(ev->arguments), &err);
        CHECKF(v && v->type == JSON_OBJECT, "arguments '%s' are not a JSON object", ev->arguments);
        json_free(v);
        sb_printf(&c->calls, "%s%s%s", c->n_calls ? ";" : "", ev->name, ev->arguments);
        c->n_calls++;
    }
}

typedef struct {
    int in_reasoning, max_calls;
    const json *tools;
} parse_opts;

/* Feeds text in chunks of `step` bytes (0: all at once) and compares. */
static int parse_case(const parse_opts *po, const char *text, size_t step, const char *content, const char *reasoning,
                      const char *calls, int want_ended) {
    collected c = {{0}, {0}, {0}, 0};
    chat_parser *p = chat_parser_new_format(CHAT_FORMAT_QWEN35, collect, &c);
    if (po->in_reasoning) chat_parser_in_reasoning(p);
    if (po->max_calls) chat_parser_max_calls(p, po->max_calls);
    chat_parser_set_tools(p, po->tools);
    size_t n = strlen(text);
    if (!step) step = n ? n : 1;
    for (size_t i = 0; i < n; i += step) chat_parser_feed(p, text + i, i + step > n ? n - i : step);
    const int ended = chat_parser_ended(p);
    chat_parser_finish(p);
    int ok = !strcmp(sb_cstr(&c.content), content) && !strcmp(sb_cstr(&c.reasoning), reasoning) &&
             !strcmp(sb_cstr(&c.calls), calls) && (want_ended < 0 || ended == want_ended);
    if (!ok)
        fprintf(stderr, "parse (step %zu) of '%s':\n  content '%s'\n  reasoning '%s'\n  calls '%s'\n  ended %d\n", step,
                text, sb_cstr(&c.content), sb_cstr(&c.reasoning), sb_cstr(&c.calls), ended);
    chat_parser_free(p);
    sb_free(&c.content);
    sb_free(&c.reasoning);
    sb_free(&c.calls);
    return ok;
}

static void check(const parse_opts *po, const char *text, const char *content, const char *reasoning, const char *calls,
                  int ended) {
    int ok = 1;
    for (size_t step = 0; step <= 13 && ok; step++) ok = parse_case(po, text, step, content, reasoning, calls, ended);
    CHECKF(ok, "%s", text);
}

static void test_parser(void) {
    const parse_opts plain = {0}, think = {1, 0, NULL};
    /* the generation prompt opened <think>: reasoning first, white space
     * around both parts dropped as the template trims them */
    check(&think, "\nLet me think.\nStep two.\n</think>\n\nThe answer is 4.\n", "The answer is 4.",
          "Let me think.\nStep two.", "", 0);
    check(&think, "no close yet", "", "no close yet", "", 0);
    check(&plain, "Hello  world \n", "Hello  world", "", "", 0);
    check(&plain, "<think>\nr\n</think>\n\nc", "c", "r", "", 0);
    check(&plain, "a<|im_end|>ignored", "a", "", "", 1);
    check(&think, "r<|endoftext|>", "", "r", "", 1);
    /* the template's XML call, content before it, two calls */
    check(&plain,
          "Checking.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
          "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_time>\n"
          "</function>\n</tool_call>",
          "Checking.", "", "get_weather{\"city\":\"Paris\",\"days\":3};get_time{}", 0);
    /* values: JSON where it reads as JSON, Python's literals, multi-line strings */
    check(&plain,
          "<tool_call>\n<function=f>\n<parameter=o>\n{\"k\": [1, 2.5, null]}\n</parameter>\n<parameter=b>\nTrue\n"
          "</parameter>\n<parameter=n>\nNone\n</parameter>\n<parameter=s>\nline one\nline two\n</parameter>\n"
          "<parameter=e>\n\n</parameter>\n</function>\n</tool_call>",
          "", "", "f{\"o\":{\"k\":[1,2.5,null]},\"b\":true,\"n\":null,\"s\":\"line one\\nline two\",\"e\":\"\"}", 0);
    /* a declared string stays a string */
    gem_err err;
    const char *decl = "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
                       "\"properties\":{\"zip\":{\"type\":\"string\"},\"n\":{\"type\":[\"integer\",\"null\"]},"
                       "\"u\":{\"type\":[\"string\",\"null\"]}}}}}]";
    json *tools = json_parse(decl, strlen(decl), &err);
    CHECK(tools != NULL);
    const parse_opts typed = {0, 0, tools};
    check(&typed,
          "<tool_call>\n<function=f>\n<parameter=zip>\n2134\n</parameter>\n<parameter=n>\n7\n</parameter>\n"
          "<parameter=u>\ntrue\n</parameter>\n<parameter=other>\n7\n</parameter>\n</function>\n</tool_call>",
          "", "", "f{\"zip\":\"2134\",\"n\":7,\"u\":\"true\",\"other\":7}", 0);
    json_free(tools);
    /* the JSON form (Qwen3's), arguments as an object or a JSON text */
    check(&plain, "<tool_call>\n{\"name\": \"g\", \"arguments\": {\"x\": \"y\"}}\n</tool_call>", "", "",
          "g{\"x\":\"y\"}", 0);
    check(&plain, "<tool_call>{\"name\": \"g\", \"arguments\": \"{\\\"x\\\": 1}\"}</tool_call>", "", "", "g{\"x\":1}", 0);
    /* malformed calls are content, markers included */
    check(&plain, "<tool_call>\n<function=bad name>\n</function>\n</tool_call>after",
          "<tool_call>\n<function=bad name>\n</function>\n</tool_call>after", "", "", 0);
    check(&plain, "<tool_call>\n{\"name\": 3}\n</tool_call>", "<tool_call>\n{\"name\": 3}\n</tool_call>", "", "", 0);
    check(&plain, "<tool_call>\n<function=f>\n<parameter=x>\nunclosed", "<tool_call>\n<function=f>\n<parameter=x>\nunclosed",
          "", "", 0);
    check(&plain, "<tool_call>\n<function=f>\n<|im_end|>", "<tool_call>\n<function=f>\n", "", "", 1);
    /* partial markers are held, never leaked, and released at the end */
    check(&plain, "a <tool_ca", "a <tool_ca", "", "", 0);
    check(&think, "r </thi", "", "r </thi", "", 0);
    check(&plain, "x <thinking> y", "x <thinking> y", "", "", 0);
    /* parallel_tool_calls: false ends the answer after its first call */
    const parse_opts one = {0, 1, NULL};
    check(&one, "<tool_call>\n<function=a>\n</function>\n</tool_call>\n<tool_call>\n<function=b>\n</function>\n</tool_call>",
          "", "", "a{}", 1);
}

/* A rendered assistant turn parses back to the message it came from. */
static void test_round_trip(void) {
    const char *conv = "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":\"Sure.\","
                       "\"reasoning_content\":\"Think it over.\",\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":"
                       "{\"city\":\"Paris\",\"n\":2,\"tags\":[\"a\",\"b\"],\"opt\":{\"deep\":true}}}}]}],"
                       "\"add_generation_prompt\":false}";
    strbuf out = {0};
    gem_err err = {{0}};
    CHECK(render_conv(conv, strlen(conv), &out, &err) == 0);
    const char *gen = strstr(sb_cstr(&out), "<|im_start|>assistant\n<think>\n");
    CHECK(gen != NULL);
    if (gen) {
        const parse_opts think = {1, 0, NULL};
        CHECK(parse_case(&think, gen + strlen("<|im_start|>assistant\n<think>\n"), 3, "Sure.", "Think it over.",
                         "f{\"city\":\"Paris\",\"n\":2,\"tags\":[\"a\",\"b\"],\"opt\":{\"deep\":true}}", 1));
    }
    sb_free(&out);
}

static void test_formats(void) {
    chat_format f = CHAT_FORMAT_GEMMA4;
    CHECK(chat_format_for_arch("qwen35", &f) == 0 && f == CHAT_FORMAT_QWEN35);
    CHECK(chat_format_for_arch("gemma4", &f) == 0 && f == CHAT_FORMAT_GEMMA4);
    CHECK(chat_format_for_arch("llama", &f) == -1 && chat_format_for_arch(NULL, &f) == -1);
    CHECK(!strcmp(chat_format_name(CHAT_FORMAT_QWEN35), "qwen35"));
    CHECK(!strcmp(chat_format_markers(CHAT_FORMAT_QWEN35)->reasoning_open, "<think>"));
    CHECK(!strcmp(chat_format_markers(CHAT_FORMAT_GEMMA4)->reasoning_close, CHAT_REASONING_CLOSE));
    chat_render_opts o = {0};
    o.format = CHAT_FORMAT_QWEN35;
    o.add_generation_prompt = 1;
    o.enable_thinking = -1;
    CHECK(chat_render_opens_reasoning(&o));
    o.enable_thinking = 0;
    CHECK(!chat_render_opens_reasoning(&o));
    o.enable_thinking = 1;
    o.format = CHAT_FORMAT_GEMMA4;
    CHECK(!chat_render_opens_reasoning(&o));
}

int main(void) {
    test_goldens();
    test_render_extras();
    test_parser();
    test_round_trip();
    test_formats();
    return test_report("test_chat_qwen35");
}
