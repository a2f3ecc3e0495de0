/* Chat format: the native renderer equals the published template rendered
 * by a real Jinja engine on every conversation in tests/data/chat (goldens
 * from tools/chat-golden), rejects malformed conversations with named
 * errors; the streaming parser turns generated text into reasoning, content
 * and tool calls whatever the chunking, never leaks a partial control
 * token, and turns malformed output into content. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chat/chat.h"
#include "gguf/gguf.h"
#include "test.h"
#include "tok/tok.h"

static int render_conv(const char *text, size_t n, strbuf *out, gem_err *err) {
    json *conv = json_parse(text, n, err);
    if (!conv) return -1;
    chat_render_opts o = {0};
    o.messages = json_get(conv, "messages");
    o.tools = json_get(conv, "tools");
    const json *th = json_get(conv, "enable_thinking");
    o.enable_thinking = th ? json_truthy(th) : -1;
    const json *gp = json_get(conv, "add_generation_prompt");
    o.add_generation_prompt = gp ? json_truthy(gp) : 1;
    o.bos_token = "<bos>";
    int rc = chat_render(&o, out, err);
    json_free(conv);
    return rc;
}

static void test_goldens(void) {
    DIR *d = opendir("tests/data/chat");
    CHECK(d != NULL);
    if (!d) return;
    struct dirent *e;
    int count = 0;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 6 || strcmp(e->d_name + l - 5, ".json")) continue;
        char jp[512], tp[512];
        snprintf(jp, sizeof jp, "tests/data/chat/%s", e->d_name);
        snprintf(tp, sizeof tp, "tests/data/chat/%.*s.txt", (int)(l - 5), e->d_name);
        size_t jn, tn;
        char *js = test_slurp(jp, &jn), *want = test_slurp(tp, &tn);
        CHECKF(js && want, "%s", jp);
        if (js && want) {
            strbuf out = {0};
            gem_err err = {{0}};
            int rc = render_conv(js, jn, &out, &err);
            CHECKF(rc == 0, "%s: %s", jp, err.msg);
            int same = rc == 0 && out.len == tn && !memcmp(sb_cstr(&out), want, tn);
            if (!same && rc == 0) {
                size_t i = 0;
                while (i < tn && i < out.len && want[i] == out.p[i]) i++;
                fprintf(stderr, "%s differs at byte %zu:\n  want ...%.80s\n  got  ...%.80s\n", jp, i,
                        want + (i > 20 ? i - 20 : 0), sb_cstr(&out) + (i > 20 ? i - 20 : 0));
            }
            CHECKF(same, "%s", jp);
            sb_free(&out);
            count++;
        }
        free(js);
        free(want);
    }
    closedir(d);
    CHECKF(count >= 40, "only %d conversations", count);
    printf("rendered %d conversations\n", count);
}

/* want_rc: which part the error is about (CHAT_RENDER_BAD_MESSAGES or
 * CHAT_RENDER_BAD_TOOLS: the server's 'param' comes from it) */
static void expect_render_error(int want_rc, const char *conv, const char *want) {
    strbuf out = {0};
    gem_err err = {{0}};
    int rc = render_conv(conv, strlen(conv), &out, &err);
    CHECKF(rc == want_rc, "%s: returned %d, not %d", conv, rc, want_rc);
    CHECK_ERR(err.msg, want);
    sb_free(&out);
}

static void test_render_errors(void) {
    const int M = CHAT_RENDER_BAD_MESSAGES, T = CHAT_RENDER_BAD_TOOLS;
    expect_render_error(M, "{\"messages\": 3}", "'messages' must be an array");
    expect_render_error(M, "{\"messages\": []}", "no messages");
    expect_render_error(M, "{\"messages\": [7]}", "messages[0] is not an object");
    expect_render_error(M, "{\"messages\": [{\"content\": \"x\"}]}", "messages[0] has no 'role' string");
    expect_render_error(M, "{\"messages\": [{\"role\": \"wizard\", \"content\": \"x\"}]}", "unknown role 'wizard'");
    expect_render_error(M, "{\"messages\": [{\"role\": \"user\", \"content\": 5}]}",
                        "messages[0].content must be a string");
    expect_render_error(T, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": [{\"function\": {}}]}",
                        "tools[0].function has no 'name'");
    expect_render_error(T,
                        "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": [{\"function\": "
                        "{\"name\": \"f\", \"parameters\": {\"type\": \"object\", \"properties\": "
                        "{\"p\": {\"description\": \"no type\"}}}}}]}",
                        "tool parameter 'p' has no 'type'");
    expect_render_error(M, "{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": [{\"function\": {}}]}]}",
                        "messages[0].tool_calls[0] has no function name");
    expect_render_error(M, "{\"messages\": [{\"role\": \"tool\", \"content\": {\"a\": 1}}]}",
                        "messages[0].content must be a string");
    expect_render_error(T, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": 3}",
                        "'tools' must be an array");
}

/* Renders the conversation in b into out (checked to succeed); returns the
 * CPU seconds it took. */
static double render_timed(const strbuf *b, strbuf *out) {
    gem_err err = {{0}};
    const double t0 = test_cpu_now();
    const int rc = render_conv(b->p, b->len, out, &err);
    const double dt = test_cpu_now() - t0;
    CHECKF(rc == 0, "%s", err.msg);
    return dt;
}

/* An assistant call's arguments object of 100000 keys in reverse order:
 * rendered in dictsort order, in time linear-log (an insertion sort took a
 * 28 s here; CPU time of this thread, bound for a slow CI machine). */
static void test_dictsort_large(void) {
    enum { N = 100000 };
    strbuf b = {0};
    sb_puts(&b, "{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": [{\"function\": {\"name\": \"f\", "
                "\"arguments\": {");
    for (int i = N - 1; i >= 0; i--) sb_printf(&b, "\"k%06d\": %d%s", i, i, i ? ", " : "");
    sb_puts(&b, "}}}]}]}");
    strbuf out = {0};
    const double dt = render_timed(&b, &out);
    CHECKF(dt < 2.0, "rendering %d keys took %.2f s", N, dt);
    const char *a = strstr(sb_cstr(&out), "k000000"), *z = strstr(sb_cstr(&out), "k099999"),
               *m = strstr(sb_cstr(&out), "k050000");
    CHECK(a && m && z && a < m && m < z);
    sb_free(&out);
    sb_free(&b);
}

/* One call object of 200000 keys (its id last) and 60000 tool messages
 * answering it: each tool message once looked the call's id up again, a
 * walk of all its keys (7.4 s here, 53 s for a 7.9 MiB request); now linear. */
static void test_tool_pairing_large(void) {
    enum { KEYS = 200000, MSGS = 60000 };
    strbuf b = {0};
    sb_puts(&b, "{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": [{");
    for (int i = 0; i < KEYS; i++) sb_printf(&b, "\"x%06d\": 0, ", i);
    sb_puts(&b, "\"function\": {\"name\": \"f\", \"arguments\": {}}, \"id\": \"c1\"}]}");
    for (int i = 0; i < MSGS; i++) sb_puts(&b, ", {\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": \"r\"}");
    sb_puts(&b, "]}");
    strbuf out = {0};
    const double dt = render_timed(&b, &out);
    CHECKF(dt < 2.0, "pairing %d tool messages with a call of %d keys took %.2f s", MSGS, KEYS, dt);
    sb_free(&out);
    sb_free(&b);
}

/* ---- parser ---- */

typedef struct {
    strbuf content, reasoning, calls;
    int n_calls;
} collected;

static void collect(const chat_event *ev, void *ctx) {
    collected *c = ctx;
    if (ev->kind == CHAT_EV_CONTENT) sb_put(&c->content, ev->text, ev->len);
    else if (ev->kind == CHAT_EV_REASONING) sb_put(&c->reasoning, ev->text, ev->len);
    else {
        sb_printf(&c->calls, "%s%s%s", c->n_calls ? ";" : "", ev->name, ev->arguments);
        c->n_calls++;
    }
}

/* Feeds text in chunks of `step` bytes (0: all at once) and compares. */
static int parse_case(const char *text, size_t step, const char *content, const char *reasoning, const char *calls) {
    collected c = {{0}, {0}, {0}, 0};
    chat_parser *p = chat_parser_new(collect, &c);
    size_t n = strlen(text);
    if (!step) step = n ? n : 1;
    for (size_t i = 0; i < n; i += step) chat_parser_feed(p, text + i, i + step > n ? n - i : step);
    chat_parser_finish(p);
    int ok = !strcmp(sb_cstr(&c.content), content) && !strcmp(sb_cstr(&c.reasoning), reasoning) &&
             !strcmp(sb_cstr(&c.calls), calls);
    if (!ok)
        fprintf(stderr, "parse (step %zu) of '%s':\n  content '%s'\n  reasoning '%s'\n  calls '%s'\n", step, text,
                sb_cstr(&c.content), sb_cstr(&c.reasoning), sb_cstr(&c.calls));
    chat_parser_free(p);
    sb_free(&c.content);
    sb_free(&c.reasoning);
    sb_free(&c.calls);
    return ok;
}

static void check_all_steps(const char *text, const char *content, const char *reasoning, const char *calls) {
    int ok = 1;
    for (size_t step = 0; step <= 13 && ok; step++) ok = parse_case(text, step, content, reasoning, calls);
    CHECKF(ok, "%s", text);
}

/* chat_parser_max_calls(1) (parallel_tool_calls: false): the answer ends
 * after its first well-formed call, whatever follows, at every split; a
 * malformed call does not count */
static void test_parser_single_call(void) {
    const char *two = "<|tool_call>call:a{x:1}<tool_call|><|tool_call>call:b{}<tool_call|>tail";
    const char *bad_first = "<|tool_call>call:f{a:}<tool_call|><|tool_call>call:b{}<tool_call|>";
    int ok = 1;
    for (size_t step = 1; step <= 13 && ok; step++)
        for (int t = 0; t < 2 && ok; t++) {
            const char *text = t ? bad_first : two;
            collected c = {{0}, {0}, {0}, 0};
            chat_parser *p = chat_parser_new(collect, &c);
            chat_parser_max_calls(p, 1);
            const size_t n = strlen(text);
            for (size_t i = 0; i < n; i += step) chat_parser_feed(p, text + i, i + step > n ? n - i : step);
            chat_parser_finish(p);
            ok = t ? !strcmp(sb_cstr(&c.calls), "b{}") && chat_parser_ended(p)
                   : !strcmp(sb_cstr(&c.calls), "a{\"x\":1}") && !strcmp(sb_cstr(&c.content), "") && chat_parser_ended(p);
            if (!ok) fprintf(stderr, "single call (step %zu): calls '%s' content '%s'\n", step, sb_cstr(&c.calls), sb_cstr(&c.content));
            chat_parser_free(p);
            sb_free(&c.content), sb_free(&c.reasoning), sb_free(&c.calls);
        }
    CHECK(ok);
}

static void test_parser(void) {
    check_all_steps("Hello world", "Hello world", "", "");
    check_all_steps("<|channel>thought\nLet me think.<channel|>The answer is 4.", "The answer is 4.", "Let me think.", "");
    check_all_steps("<|channel>thought\n<channel|>Direct.", "Direct.", "", "");
    check_all_steps("<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>,unit:<|\"|>celsius<|\"|>}<tool_call|><|tool_response>",
                    "", "", "get_weather{\"city\":\"Paris\",\"unit\":\"celsius\"}");
    check_all_steps("<|channel>thought\nneed tool<channel|><|tool_call>call:f{a:1,b:-2.5,c:true,d:false,e:null,"
                    "f:[1,<|\"|>x<|\"|>,{g:{}}],h:{i:<|\"|>a,b}<|\"|>}}<tool_call|>",
                    "", "need tool", "f{\"a\":1,\"b\":-2.5,\"c\":true,\"d\":false,\"e\":null,\"f\":[1,\"x\",{\"g\":{}}],\"h\":{\"i\":\"a,b}\"}}");
    check_all_steps("<|tool_call>call:a{}<tool_call|><|tool_call>call:b{x:<|\"|>line\nbreak \"q\"<|\"|>}<tool_call|>", "", "",
                    "a{};b{\"x\":\"line\\nbreak \\\"q\\\"\"}");
    /* text around markers, and '<' that is not a marker */
    check_all_steps("a < b and <|not a marker> <b>", "a < b and <|not a marker> <b>", "", "");
    check_all_steps("x<turn|>ignored", "x", "", "");
    /* malformed calls become content */
    check_all_steps("<|tool_call>call:f{a:}<tool_call|>after", "<|tool_call>call:f{a:}<tool_call|>after", "", "");
    check_all_steps("<|tool_call>oops<tool_call|>", "<|tool_call>oops<tool_call|>", "", "");
    check_all_steps("<|tool_call>call:f{a:1", "<|tool_call>call:f{a:1", "", "");
    /* unterminated thought is reasoning */
    check_all_steps("<|channel>thought\nhalf", "", "half", "");
    /* a partial marker at the very end is released as text */
    check_all_steps("tail <|chan", "tail <|chan", "", "");
    /* nothing that could become a marker is emitted early */
    collected c = {{0}, {0}, {0}, 0};
    chat_parser *p = chat_parser_new(collect, &c);
    chat_parser_feed(p, "abc<|tool_", 10);
    CHECK(!strcmp(sb_cstr(&c.content), "abc"));
    chat_parser_feed(p, "call>call:z{}<tool_call|>", 25);
    CHECK(!strcmp(sb_cstr(&c.content), "abc") && c.n_calls == 1);
    chat_parser_free(p);
    sb_free(&c.content);
    sb_free(&c.calls);
}

static void test_args(void) {
    strbuf o = {0};
    CHECK(chat_args_to_json("{}", 2, &o) == 0 && !strcmp(sb_cstr(&o), "{}"));
    o.len = 0;
    const char *a = "{<|\"|>quoted key<|\"|>:1e3,n:-0.5}";
    CHECK(chat_args_to_json(a, strlen(a), &o) == 0 && !strcmp(sb_cstr(&o), "{\"quoted key\":1000,\"n\":-0.5}"));
    const char *bad[] = {"", "{", "{a}", "{a:}", "{a:1,}", "{:1}", "{a:tru}", "{a:<|\"|>x}", "{a:[1,}", "{a:1}x", "[1]"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        o.len = 0;
        CHECKF(chat_args_to_json(bad[i], strlen(bad[i]), &o) == -1, "accepted '%s'", bad[i]);
    }
    sb_free(&o);
}

/* Generated text arrives token by token: tokenize a model answer (markers as
 * their special tokens), then feed each token's rendered piece. */
static void test_token_by_token(void) {
    gem_err err = {{0}};
    gguf_file *f = gguf_open("data/vocab/gemma-4.gguf", &err);
    tok *t = f ? tok_load(f, &err) : NULL;
    CHECKF(t != NULL, "%s", err.msg);
    if (!t) { gguf_close(f); return; }
    const char *gen = "<|channel>thought\nThe user wants Paris weather; call the tool.<channel|>"
                      "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>,days:3,detail:{hourly:true,fields:[<|\"|>temp<|\"|>,<|\"|>wind<|\"|>]}}<tool_call|>"
                      "<|tool_response>";
    tok_ids ids = {0};
    CHECK(!tok_encode(t, gen, strlen(gen), 0, 1, &ids));
    int marker_tokens = 0;
    for (size_t i = 0; i < ids.n; i++) marker_tokens += ids.v[i] == 100 || ids.v[i] == 48 || ids.v[i] == 52;
    CHECKF(marker_tokens == 8, "%d", marker_tokens); /* <|channel>, <|tool_call>, six <|"|> */
    collected c = {{0}, {0}, {0}, 0};
    chat_parser *p = chat_parser_new(collect, &c);
    for (size_t i = 0; i < ids.n; i++) {
        if (tok_is_eog(t, ids.v[i])) break; /* the engine stops at <|tool_response> */
        size_t len;
        const char *piece = tok_piece(t, ids.v[i], 0, &len);
        CHECK(!chat_parser_feed(p, piece, len));
        /* nothing emitted so far may contain a marker fragment */
        CHECK(!strstr(sb_cstr(&c.content), "<|") && !strstr(sb_cstr(&c.reasoning), "<|") &&
              !strstr(sb_cstr(&c.reasoning), "channel"));
    }
    chat_parser_finish(p);
    CHECKF(!strcmp(sb_cstr(&c.reasoning), "The user wants Paris weather; call the tool."), "%s", sb_cstr(&c.reasoning));
    CHECK(!strcmp(sb_cstr(&c.content), ""));
    CHECKF(!strcmp(sb_cstr(&c.calls), "get_weather{\"city\":\"Paris\",\"days\":3,\"detail\":{\"hourly\":true,\"fields\":[\"temp\",\"wind\"]}}"),
           "%s", sb_cstr(&c.calls));
    chat_parser_free(p);
    sb_free(&c.content);
    sb_free(&c.reasoning);
    sb_free(&c.calls);
    tok_ids_free(&ids);
    tok_free(t);
    gguf_close(f);
}

int main(void) {
    test_dictsort_large();
    test_tool_pairing_large();
    test_goldens();
    test_render_errors();
    test_parser();
    test_parser_single_call();
    test_args();
    test_token_by_token();
    return test_report("test_chat");
}
