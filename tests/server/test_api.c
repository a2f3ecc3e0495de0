/* The server's request mapping (api.h) and response assembly (reply.h):
 * every validation error with its status, parameter and message; tool
 * choice rendering; response bodies and SSE chunks built from synthetic
 * generation events (including the chat parser's reasoning and tool calls);
 * stop strings; UTF-8 sanitising. */
#include "server/api.h"
#include "server/reply.h"

#include <math.h>

#include "chat/chat.h"
#include "test.h"

static api_opts hooks_off = {0, 0, 0, CHAT_FORMAT_GEMMA4}, hooks_on = {1, 0, 0, CHAT_FORMAT_GEMMA4};

static int parse(api_kind k, const char *body, api_request *r, api_error *e) {
    return api_parse(k, body, strlen(body), &hooks_off, r, e);
}

/* the request fails with status, param and a message containing want */
static void expect_bad(api_kind k, const char *body, int status, const char *param, const char *want) {
    api_request r;
    api_error e = {0};
    int rc = parse(k, body, &r, &e);
    CHECKF(rc == -1 && e.status == status, "%s: rc %d status %d (%s)", body, rc, e.status, e.message);
    CHECKF(!strcmp(e.param, param), "%s: param '%s', want '%s'", body, e.param, param);
    CHECK_ERR(e.message, want);
    CHECK(!strcmp(e.type, "invalid_request_error"));
    api_request_free(&r);
}

static void test_chat_valid(void) {
    api_request r;
    api_error e = {0};
    const char *body = "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},"
                       "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hi\"}]}],"
                       "\"temperature\":0.5,\"top_p\":0.9,\"top_k\":40,\"min_p\":0.05,\"presence_penalty\":1.5,"
                       "\"frequency_penalty\":-0.5,\"seed\":-3,\"max_tokens\":7,\"max_completion_tokens\":9,"
                       "\"stop\":[\"a\",\"bc\"],\"stream\":true,\"stream_options\":{\"include_usage\":true},"
                       "\"user\":\"ignored\",\"n\":1,\"logprobs\":false,\"response_format\":{\"type\":\"text\"},"
                       "\"chat_template_kwargs\":{\"enable_thinking\":true},\"cache_prompt\":false,\"ignore_eos\":true}";
    CHECK(parse(API_CHAT, body, &r, &e) == 0);
    CHECK(!strcmp(r.model, "m"));
    CHECK(r.messages && r.messages->len == 2);
    CHECK(r.sampling.temp == 0.5f && r.sampling.top_p == 0.9f && r.sampling.top_k == 40);
    CHECK(r.sampling.min_p == 0.05f && r.sampling.presence_penalty == 1.5f && r.sampling.frequency_penalty == -0.5f);
    CHECK(r.seed_given && r.sampling.seed == (uint64_t)(int64_t)-3);
    CHECK(r.max_tokens == 9); /* max_completion_tokens wins */
    CHECK(r.n_stop == 2 && r.stop_len[1] == 2 && !memcmp(r.stop[1], "bc", 2));
    CHECK(r.stream && r.include_usage && !r.cache_prompt && r.ignore_eos);
    CHECK(r.enable_thinking == 1 && !r.tools && r.tool_choice == API_TOOLS_AUTO);
    strbuf p = {0};
    CHECK(api_render(&r, &p, &e) == 0);
    CHECK(!strcmp(sb_cstr(&p), "<bos><|turn>system\n<|think|>\nbe brief<turn|>\n<|turn>user\nhi<turn|>\n<|turn>model\n"));
    gram *g = (gram *)&r; /* overwritten: nothing constrains a text answer */
    CHECK(api_grammar(&r, &g, &e) == 0 && g == NULL);
    sb_free(&p);
    api_request_free(&r);

    /* defaults: gem's sampling, no limit, prompt reuse on */
    CHECK(parse(API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":\"END\"}", &r, &e) == 0);
    CHECK(r.sampling.temp == 0.8f && r.sampling.top_k == 64 && r.sampling.top_p == 0.95f && !r.seed_given);
    CHECK(r.max_tokens == -1 && r.cache_prompt == 1 && !r.ignore_eos && !r.stream && r.n_stop == 1 && r.enable_thinking == -1);
    api_request_free(&r);

    /* reasoning_effort turns thinking off or on */
    CHECK(parse(API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"reasoning_effort\":\"none\"}", &r, &e) == 0);
    CHECK(r.enable_thinking == 0);
    api_request_free(&r);

    /* assistant history with tool calls whose arguments are a JSON string */
    body = "{\"messages\":[{\"role\":\"user\",\"content\":\"w?\"},{\"role\":\"assistant\",\"content\":null,"
           "\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"get\",\"arguments\":"
           "\"{\\\"city\\\":\\\"Paris\\\"}\"}}]},{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"sunny\"}],"
           "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get\",\"parameters\":{\"type\":\"object\"}}}]}";
    CHECK(parse(API_CHAT, body, &r, &e) == 0);
    CHECK(r.tools && r.tools->len == 1);
    CHECK(api_render(&r, &p, &e) == 0);
    CHECKF(strstr(sb_cstr(&p), "<|tool_call>call:get{city:<|\"|>Paris<|\"|>}<tool_call|>") != NULL, "%s", sb_cstr(&p));
    CHECK(strstr(sb_cstr(&p), "<|tool>declaration:get{") != NULL);
    sb_free(&p);
    api_request_free(&r);
}

/* A tools declaration the renderer refuses is reported against 'tools' */
static void test_render_tools_error(void) {
    api_request r;
    api_error e = {0};
    strbuf p = {0};
    const char *body = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\","
                       "\"function\":{\"name\":\"f\",\"parameters\":{\"properties\":[1,2]}}}]}";
    CHECK(parse(API_CHAT, body, &r, &e) == 0);
    CHECK(api_render(&r, &p, &e) == -1 && e.status == 400 && !strcmp(e.param, "tools"));
    CHECK_ERR(e.message, "parameters.properties is not an object");
    api_request_free(&r);
    sb_free(&p);
}

/* api_grammar refuses the request with a 400 naming param; the message contains want */
static void expect_grammar_bad(const char *body, const char *param, const char *want) {
    api_request r;
    api_error e = {0};
    gram *g = NULL;
    CHECKF(parse(API_CHAT, body, &r, &e) == 0, "%s: %s", body, e.message);
    CHECKF(api_grammar(&r, &g, &e) == -1 && e.status == 400 && !g, "%s: not refused", body);
    CHECKF(!strcmp(e.param, param), "%s: param '%s', want '%s'", body, e.param, param);
    CHECKF(strstr(e.message, want) != NULL, "%s: message '%s' lacks '%s'", body, e.message, want);
    api_request_free(&r);
}

/* response_format: json_object and json_schema (strict or not) compile to
 * grammars of JSON text; thinking puts an optional thought first */
static void test_response_format(void) {
    const char *u = "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]";
    char body[1024];
    api_request r;
    api_error e = {0};
    gram *g = NULL;
    snprintf(body, sizeof body, "{%s,\"response_format\":{\"type\":\"json_object\"}}", u);
    CHECK(parse(API_CHAT, body, &r, &e) == 0 && r.json_mode == API_JSON_OBJECT);
    CHECK(api_grammar(&r, &g, &e) == 0 && g);
    if (g) {
        gram_state *st = gram_state_new(g);
        CHECK(st && gram_state_feed(st, "[1]", 3) == -1);
        CHECK(st && gram_state_feed(st, "{\"a\":[1,{}]}", 12) == 0 && gram_state_ended(st));
        gram_state_free(st);
    }
    gram_free(g);
    api_request_free(&r);
    snprintf(body, sizeof body,
             "{%s,\"chat_template_kwargs\":{\"enable_thinking\":true},\"response_format\":{\"type\":\"json_schema\","
             "\"json_schema\":{\"name\":\"n\",\"strict\":true,\"schema\":{\"type\":\"object\",\"properties\":{"
             "\"k\":{\"enum\":[\"a\",\"b\"]}},\"required\":[\"k\"],\"additionalProperties\":false}}}}",
             u);
    CHECK(parse(API_CHAT, body, &r, &e) == 0 && r.json_mode == API_JSON_SCHEMA && r.schema);
    CHECK(api_grammar(&r, &g, &e) == 0 && g);
    if (g) {
        const char *ans = "<|channel>thought\nhm<channel|>{\"k\":\"b\"}";
        gram_state *st = gram_state_new(g);
        CHECK(st && gram_state_feed(st, ans, strlen(ans)) == 0 && gram_state_ended(st));
        gram_state_free(st);
        st = gram_state_new(g);
        CHECK(st && gram_state_feed(st, "{\"k\":\"c\"}", 9) == -1);
        gram_state_free(st);
    }
    gram_free(g);
    api_request_free(&r);
    /* completions take it too */
    CHECK(parse(API_COMPLETION, "{\"prompt\":\"x\",\"response_format\":{\"type\":\"json_object\"}}", &r, &e) == 0);
    CHECK(r.json_mode == API_JSON_OBJECT && api_grammar(&r, &g, &e) == 0 && g);
    gram_free(g);
    api_request_free(&r);
    snprintf(body, sizeof body,
             "{%s,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"n\",\"schema\":"
             "{\"type\":\"object\",\"properties\":{\"d\":{\"type\":\"string\",\"format\":\"email\"}}}}}}",
             u);
    expect_grammar_bad(body, "response_format", "response_format.json_schema.schema.properties.d");
    snprintf(body, sizeof body, "{%s,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":false}}}", u);
    expect_grammar_bad(body, "response_format", "schema is false");
    snprintf(body, sizeof body, "{%s,\"response_format\":{\"type\":\"json_schema\"}}", u);
    expect_bad(API_CHAT, body, 400, "response_format.json_schema", "must be an object with a 'schema'");
    snprintf(body, sizeof body, "{%s,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":[]}}}", u);
    expect_bad(API_CHAT, body, 400, "response_format.json_schema.schema", "must be an object");
    snprintf(body, sizeof body, "{%s,\"response_format\":{\"type\":\"yaml\"}}", u);
    expect_bad(API_CHAT, body, 400, "response_format", "'response_format' type 'yaml' is not supported");
}

static void test_tool_choice(void) {
    const char *tools = "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"d\","
                        "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}}]";
    char body[1024];
    api_request r;
    api_error e = {0};
    strbuf p = {0};
    gram *g = NULL;
    /* required: a grammar of calls to the declared tools (the answer is a
     * call: "<|tool_call>call:get_weather{...}"), never free text */
    snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],%s,\"tool_choice\":\"required\"}", tools);
    CHECK(parse(API_CHAT, body, &r, &e) == 0 && r.tool_choice == API_TOOLS_REQUIRED);
    CHECK(api_render(&r, &p, &e) == 0 && api_grammar(&r, &g, &e) == 0 && g != NULL);
    if (g) {
        gram_state *st = gram_state_new(g);
        const char *call = "<|tool_call>call:get_weather{city:<|\"|>Oslo<|\"|>}<tool_call|>";
        CHECK(st && gram_state_feed(st, "Sure", 4) == -1);
        CHECK(st && gram_state_feed(st, call, strlen(call)) == 0 && gram_state_done(st));
        gram_state_free(st);
        st = gram_state_new(g);
        CHECK(st && gram_state_feed(st, "<|tool_call>call:get_time{", 26) == -1); /* not declared */
        gram_state_free(st);
    }
    gram_free(g);
    api_request_free(&r);
    p.len = 0;
    /* named: that function only; parallel_tool_calls false: one call */
    snprintf(body, sizeof body,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],%s,\"parallel_tool_calls\":false,"
             "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}}",
             tools);
    CHECK(parse(API_CHAT, body, &r, &e) == 0 && r.tool_choice == API_TOOLS_NAMED);
    CHECK(api_render(&r, &p, &e) == 0 && api_grammar(&r, &g, &e) == 0 && g != NULL);
    if (g) {
        gram_state *st = gram_state_new(g);
        const char *call = "<|tool_call>call:get_weather{}<tool_call|>";
        CHECK(st && gram_state_feed(st, call, strlen(call)) == 0 && gram_state_done(st));
        CHECK(st && gram_state_feed(st, "<|tool_call>", 12) == -1); /* a second call */
        gram_state_free(st);
    }
    gram_free(g);
    api_request_free(&r);
    p.len = 0;
    snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],%s,\"tool_choice\":\"none\"}", tools);
    CHECK(parse(API_CHAT, body, &r, &e) == 0 && r.tool_choice == API_TOOLS_NONE && !r.tools);
    CHECK(api_render(&r, &p, &e) == 0 && !strstr(sb_cstr(&p), "declaration"));
    CHECK(api_grammar(&r, &g, &e) == 0 && !g);
    api_request_free(&r);
    sb_free(&p);
    /* a tool whose parameters the grammar cannot honour exactly: refused at once */
    expect_grammar_bad("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"required\","
                       "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
                       "\"properties\":{\"p\":{\"type\":\"string\",\"pattern\":\"^a\"}}}}}]}",
                       "tools", "\"pattern\" is not supported");
    snprintf(body, sizeof body,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],%s,"
             "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"other\"}}}",
             tools);
    expect_bad(API_CHAT, body, 400, "tool_choice", "names 'other', which is not in 'tools'");
    expect_bad(API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"required\"}", 400,
               "tool_choice", "'tools' is empty");
    snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],%s,\"tool_choice\":\"maybe\"}", tools);
    expect_bad(API_CHAT, body, 400, "tool_choice", "'tool_choice' is 'maybe'");
}

static void test_chat_errors(void) {
    expect_bad(API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}", 400, "", "invalid JSON in the request body");
    expect_bad(API_CHAT, "[1,2]", 400, "", "must be a JSON object, not an array");
    expect_bad(API_CHAT, "{\"a\":\"\xff\"}", 400, "", "invalid JSON");
    expect_bad(API_CHAT, "{}", 400, "messages", "'messages' is required");
    expect_bad(API_CHAT, "{\"messages\":{}}", 400, "messages", "'messages' must be an array, not an object");
    expect_bad(API_CHAT, "{\"messages\":[]}", 400, "messages", "'messages' must not be empty");
    expect_bad(API_CHAT, "{\"messages\":[3]}", 400, "messages[0]", "must be an object, not a number");
    expect_bad(API_CHAT, "{\"messages\":[{\"content\":\"x\"}]}", 400, "messages[0].role", "is required");
    expect_bad(API_CHAT, "{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", 400, "messages[0].role",
               "'messages[0].role' is 'wizard'; the roles are system, developer, user, assistant and tool");
    expect_bad(API_CHAT, "{\"messages\":[{\"role\":7,\"content\":\"x\"}]}", 400, "messages[0].role", "must be a string");
    expect_bad(API_CHAT, "{\"messages\":[{\"role\":\"user\"}]}", 400, "messages[0].content", "is required for role 'user'");
    expect_bad(API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":5}]}", 400, "messages[0].content",
               "must be a string or an array of parts, not a number");
    expect_bad(API_CHAT,
               "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":\"x\"}}]}]}",
               400, "messages[0].content[0]", "is a 'image_url' part; this model takes text parts only");
    expect_bad(API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]}", 400,
               "messages[0].content[0]", "has no 'text' string");
    expect_bad(API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"tool_calls\":[]}]}", 400,
               "messages[0].tool_calls", "only allowed on assistant messages");
    expect_bad(API_CHAT,
               "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":\"[1]\"}}]}]}",
               400, "messages[0].tool_calls[0]", "arguments' is not a JSON object text");
    expect_bad(API_CHAT, "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{}}]}]}", 400,
               "messages[0].tool_calls[0]", "function.name' must be a non-empty string");
    { /* API_MAX_TOOL_CALLS + 1 calls: the renderer pairs each tool message with every call */
        strbuf b = {0};
        sb_puts(&b, "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[");
        for (int c = 0; c <= API_MAX_TOOL_CALLS; c++)
            sb_printf(&b, "%s{\"id\":\"c%d\",\"function\":{\"name\":\"f\",\"arguments\":{}}}", c ? "," : "", c);
        sb_puts(&b, "]}]}");
        expect_bad(API_CHAT, sb_cstr(&b), 400, "messages[0].tool_calls", "has 129 calls; at most 128 are allowed");
        sb_free(&b);
    }
    const char *m = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],";
    char b[512];
#define BAD(extra, param, want)                      \
    snprintf(b, sizeof b, "%s%s}", m, extra);        \
    expect_bad(API_CHAT, b, 400, param, want)
    BAD("\"temperature\":\"hot\"", "temperature", "'temperature' must be a number, not a string");
    BAD("\"temperature\":2.5", "temperature", "'temperature' must be between 0 and 2, not 2.5");
    BAD("\"top_p\":-0.1", "top_p", "between 0 and 1");
    BAD("\"top_k\":1.5", "top_k", "'top_k' must be an integer");
    BAD("\"presence_penalty\":3", "presence_penalty", "between -2 and 2");
    BAD("\"max_tokens\":0", "max_tokens", "'max_tokens' must be between 1 and");
    BAD("\"max_tokens\":\"5\"", "max_tokens", "must be an integer, not a string");
    BAD("\"seed\":1.5", "seed", "'seed' must be an integer");
    /* strings with a NUL inside are not what strcmp reads them as */
    expect_bad(API_CHAT, "{\"messages\":[{\"role\":\"user\\u0000x\",\"content\":\"x\"}]}", 400, "messages[0].role",
               "contains a NUL character; the roles are system");
    BAD("\"response_format\":{\"type\":\"text\\u0000json_object\"}", "response_format", "response_format");
    BAD("\"reasoning_effort\":\"low\\u0000x\"", "reasoning_effort", "must be none, minimal");
    BAD("\"tool_choice\":\"auto\\u0000x\"", "tool_choice", "contains a NUL character");
    BAD("\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"f\\u0000zz\"}}", "tool_choice",
        "'tool_choice' must be {");
    /* out of range is said before "not an integer" (a number this large is never exact) */
    BAD("\"seed\":1.8e19", "seed", "'seed' must be between -9.2e+18 and 9.2e+18");
    BAD("\"max_tokens\":1e400", "max_tokens", "'max_tokens' must be between 1 and 1e+09, not inf");
    BAD("\"n\":9", "n", "'n' must be at most 8: the choices are generated one after another");
    BAD("\"n\":0", "n", "'n' must be between 1 and 1e+09, not 0");
    BAD("\"n\":2.5", "n", "'n' must be an integer");
    BAD("\"stream\":\"yes\"", "stream", "'stream' must be a boolean");
    BAD("\"stream_options\":[]", "stream_options", "must be an object");
    BAD("\"stop\":5", "stop", "a string or an array of strings");
    BAD("\"stop\":[\"\"]", "stop", "1 to 256 bytes");
    BAD("\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\",\"j\",\"k\",\"l\",\"m\",\"n\",\"o\",\"p\",\"q\"]",
        "stop", "at most 16");
    BAD("\"logprobs\":1", "logprobs", "'logprobs' must be a boolean, not a number");
    BAD("\"logprobs\":true,\"top_logprobs\":21", "top_logprobs", "'top_logprobs' must be between 0 and 20, not 21");
    BAD("\"logprobs\":true,\"top_logprobs\":-1", "top_logprobs", "'top_logprobs' must be between 0 and 20, not -1");
    BAD("\"logprobs\":true,\"top_logprobs\":1.5", "top_logprobs", "'top_logprobs' must be an integer");
    BAD("\"logprobs\":false,\"top_logprobs\":2", "top_logprobs", "'top_logprobs' needs 'logprobs': true");
    BAD("\"tools\":{}", "tools", "'tools' must be an array");
    BAD("\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"bad name\"}}]", "tools[0]", "letters, digits");
    BAD("\"tools\":[{\"type\":\"retrieval\"}]", "tools[0]", "must be \"function\"");
    BAD("\"model\":3", "model", "'model' must be a string");
    BAD("\"chat_template_kwargs\":{\"enable_thinking\":1}", "chat_template_kwargs.enable_thinking", "a boolean");
    BAD("\"reasoning_effort\":\"max\"", "reasoning_effort", "none, minimal, low, medium or high");
    BAD("\"gem_forced_output\":\"x\"", "gem_forced_output", "not started with --test-hooks");
#undef BAD
    api_request r;
    api_error e = {0};
    CHECK(api_parse(API_CHAT, "", 0, &hooks_off, &r, &e) == -1 && e.status == 400);
    CHECK_ERR(e.message, "the request body is empty");
    api_request_free(&r);
    const char *hook = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"gem_forced_output\":\"abc\"}";
    CHECK(api_parse(API_CHAT, hook, strlen(hook), &hooks_on, &r, &e) == 0);
    CHECK(r.forced_output_len == 3 && !memcmp(r.forced_output, "abc", 3));
    api_request_free(&r);
}

static void test_completion(void) {
    api_request r;
    api_error e = {0};
    CHECK(parse(API_COMPLETION, "{\"prompt\":\"Hello\",\"max_tokens\":4,\"return_tokens\":true}", &r, &e) == 0);
    CHECK(r.n_prompts == 1 && r.prompts[0].len == 5 && !memcmp(r.prompts[0].text, "Hello", 5) && !r.prompts[0].ids &&
          r.return_tokens);
    CHECK(r.n == 1 && !r.echo && !r.logprobs && !r.top_logprobs);
    api_request_free(&r);
    CHECK(parse(API_COMPLETION, "{\"prompt\":[\"one\"]}", &r, &e) == 0 && r.n_prompts == 1 && r.prompts[0].len == 3);
    api_request_free(&r);
    CHECK(parse(API_COMPLETION, "{\"prompt\":[2,9259,1902]}", &r, &e) == 0);
    CHECK(r.n_prompts == 1 && r.prompts[0].n_ids == 3 && r.prompts[0].ids[0] == 2 && r.prompts[0].ids[2] == 1902);
    api_request_free(&r);
    expect_bad(API_COMPLETION, "{}", 400, "prompt", "'prompt' is required");
    expect_bad(API_COMPLETION, "{\"prompt\":[]}", 400, "prompt", "'prompt' must not be empty");
    expect_bad(API_COMPLETION, "{\"prompt\":[1,-2]}", 400, "prompt", "'prompt' must be an array of token ids (element 1 is not)");
    expect_bad(API_COMPLETION, "{\"prompt\":{}}", 400, "prompt",
               "'prompt' must be a string, an array of strings, an array of token ids or an array of token id arrays, "
               "not an object");
    expect_bad(API_COMPLETION, "{\"prompt\":\"x\",\"best_of\":3}", 400, "best_of", "'best_of' must be 1");
    expect_bad(API_COMPLETION, "{\"prompt\":\"x\",\"suffix\":\"y\"}", 400, "suffix", "'suffix' is not supported");
    expect_bad(API_COMPLETION, "{\"prompt\":\"x\",\"echo\":1}", 400, "echo", "'echo' must be a boolean, not a number");
    CHECK(parse(API_COMPLETION, "{\"prompt\":\"x\",\"echo\":true}", &r, &e) == 0 && r.echo == 1);
    api_request_free(&r);
}

/* prompt lists: one prompt per string or id list, in order; never mixed */
static void test_prompt_lists(void) {
    api_request r;
    api_error e = {0};
    CHECK(parse(API_COMPLETION, "{\"prompt\":[\"ab\",\"\",\"cde\"],\"n\":2}", &r, &e) == 0);
    CHECK(r.n_prompts == 3 && r.n == 2 && r.prompts[0].len == 2 && !memcmp(r.prompts[0].text, "ab", 2));
    CHECK(r.prompts[1].text && r.prompts[1].len == 0 && r.prompts[2].len == 3 && !r.prompts[2].ids);
    api_request_free(&r);
    CHECK(parse(API_COMPLETION, "{\"prompt\":[[2,5],[7]]}", &r, &e) == 0);
    CHECK(r.n_prompts == 2 && r.prompts[0].n_ids == 2 && r.prompts[0].ids[1] == 5 && r.prompts[1].n_ids == 1 &&
          r.prompts[1].ids[0] == 7);
    api_request_free(&r);
    expect_bad(API_COMPLETION, "{\"prompt\":[\"a\",[1]]}", 400, "prompt",
               "'prompt' must be a string, an array of strings, an array of token ids or an array of token id arrays "
               "(element 1 is an array)");
    expect_bad(API_COMPLETION, "{\"prompt\":[[1],\"a\"]}", 400, "prompt", "(element 1 is a string)");
    expect_bad(API_COMPLETION, "{\"prompt\":[1,\"a\"]}", 400, "prompt", "'prompt' must be an array of token ids (element 1 is not)");
    expect_bad(API_COMPLETION, "{\"prompt\":[null]}", 400, "prompt", "(element 0 is null)");
    expect_bad(API_COMPLETION, "{\"prompt\":[[1],[]]}", 400, "prompt", "'prompt[1]' must not be empty");
    expect_bad(API_COMPLETION, "{\"prompt\":[[1],[2,1.5]]}", 400, "prompt",
               "'prompt[1]' must be an array of token ids (element 1 is not)");
    /* the bounds: 64 choices in all */
    char body[1024] = "{\"prompt\":[";
    for (int i = 0; i < 65; i++) strcat(body, i ? ",\"a\"" : "\"a\"");
    strcat(body, "]}");
    expect_bad(API_COMPLETION, body, 400, "prompt", "'prompt' has 65 prompts; at most 64 are allowed");
    expect_bad(API_COMPLETION, "{\"prompt\":[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\"],\"n\":8}", 400, "prompt",
               "9 prompts with n 8 make 72 choices; at most 64 are allowed");
}

/* logprobs and top_logprobs (chat), legacy logprobs (completions), n */
static void test_logprobs_n(void) {
    api_request r;
    api_error e = {0};
    const char *chat = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true,\"top_logprobs\":20,\"n\":8}";
    CHECK(parse(API_CHAT, chat, &r, &e) == 0 && r.logprobs == 1 && r.top_logprobs == 20 && r.n == 8);
    api_request_free(&r);
    chat = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true}";
    CHECK(parse(API_CHAT, chat, &r, &e) == 0 && r.logprobs == 1 && r.top_logprobs == 0 && r.n == 1);
    api_request_free(&r);
    CHECK(parse(API_COMPLETION, "{\"prompt\":\"x\",\"logprobs\":5,\"n\":3}", &r, &e) == 0);
    CHECK(r.logprobs == 1 && r.top_logprobs == 5 && r.n == 3);
    api_request_free(&r);
    CHECK(parse(API_COMPLETION, "{\"prompt\":\"x\",\"logprobs\":0}", &r, &e) == 0 && r.logprobs == 1 && r.top_logprobs == 0);
    api_request_free(&r);
    CHECK(parse(API_COMPLETION, "{\"prompt\":\"x\",\"logprobs\":null}", &r, &e) == 0 && !r.logprobs);
    api_request_free(&r);
    expect_bad(API_COMPLETION, "{\"prompt\":\"x\",\"logprobs\":6}", 400, "logprobs", "'logprobs' must be between 0 and 5, not 6");
    expect_bad(API_COMPLETION, "{\"prompt\":\"x\",\"logprobs\":true}", 400, "logprobs",
               "'logprobs' must be an integer, not a boolean");
    expect_bad(API_COMPLETION, "{\"prompt\":\"x\",\"logprobs\":1.5}", 400, "logprobs", "'logprobs' must be an integer");
    expect_bad(API_COMPLETION, "{\"prompt\":\"x\",\"logprobs\":2,\"top_logprobs\":2}", 400, "top_logprobs",
               "'top_logprobs' is a chat field; completions take 'logprobs': the number of alternatives");
    expect_bad(API_COMPLETION, "{\"prompt\":\"x\",\"n\":9}", 400, "n", "'n' must be at most 8");
}

/* logit_bias: token-id keys within the vocabulary, values in [-100, 100],
 * handed to the sampler; anything else is a 400 naming the field */
static void test_logit_bias(void) {
    api_request r;
    api_error e = {0};
    api_opts vo = {0, 1000, 0, CHAT_FORMAT_GEMMA4};
    const char *ok = "{\"prompt\":\"x\",\"logit_bias\":{\"528\":-100,\"7\":2.5}}";
    CHECK(api_parse(API_COMPLETION, ok, strlen(ok), &vo, &r, &e) == 0);
    CHECK(r.sampling.n_bias == 2 && r.sampling.bias_ids[0] == 528 && r.sampling.bias[0] == -100.0f &&
          r.sampling.bias_ids[1] == 7 && r.sampling.bias[1] == 2.5f);
    api_request_free(&r);
    CHECK(parse(API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logit_bias\":{}}", &r, &e) == 0 &&
          r.sampling.n_bias == 0);
    api_request_free(&r);
    expect_bad(API_COMPLETION, "{\"prompt\":\"x\",\"logit_bias\":{\"12x\":1}}", 400, "logit_bias", "key '12x' is not a token id");
    expect_bad(API_COMPLETION, "{\"prompt\":\"x\",\"logit_bias\":{\"-3\":1}}", 400, "logit_bias", "key '-3' is not a token id");
    expect_bad(API_COMPLETION, "{\"prompt\":\"x\",\"logit_bias\":{\"3\":101}}", 400, "logit_bias", "from -100 to 100");
    expect_bad(API_COMPLETION, "{\"prompt\":\"x\",\"logit_bias\":{\"3\":\"1\"}}", 400, "logit_bias", "from -100 to 100");
    expect_bad(API_COMPLETION, "{\"prompt\":\"x\",\"logit_bias\":[1]}", 400, "logit_bias", "an object of token ids");
    const char *big = "{\"prompt\":\"x\",\"logit_bias\":{\"1000\":1}}";
    CHECK(api_parse(API_COMPLETION, big, strlen(big), &vo, &r, &e) == -1 && strstr(e.message, "of this model's vocabulary"));
    api_request_free(&r);
}

/* parallel_tool_calls (false: one call per answer) and the OpenAI fields
 * gem does not honour, refused by name */
static void test_unsupported_fields(void) {
    api_request r;
    api_error e = {0};
    const char *msg = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]";
    char body[256];
    snprintf(body, sizeof body, "%s,\"parallel_tool_calls\":false}", msg);
    CHECK(parse(API_CHAT, body, &r, &e) == 0 && r.single_call == 1);
    api_request_free(&r);
    snprintf(body, sizeof body, "%s,\"parallel_tool_calls\":true,\"modalities\":[\"text\"],\"top_logprobs\":null}", msg);
    CHECK(parse(API_CHAT, body, &r, &e) == 0 && r.single_call == 0);
    api_request_free(&r);
    static const char *const cases[][3] = {
        {",\"parallel_tool_calls\":0}", "parallel_tool_calls", "a boolean"},
        {",\"top_logprobs\":3}", "top_logprobs", "'top_logprobs' needs 'logprobs': true"},
        {",\"functions\":[]}", "functions", "send 'tools'"},
        {",\"function_call\":\"auto\"}", "function_call", "send 'tool_choice'"},
        {",\"audio\":{}}", "audio", "text only"},
        {",\"prediction\":{}}", "prediction", "predicted outputs"},
        {",\"web_search_options\":{}}", "web_search_options", "not supported"},
        {",\"modalities\":[\"text\",\"audio\"]}", "modalities", "other than \"text\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(body, sizeof body, "%s%s", msg, cases[i][0]);
        expect_bad(API_CHAT, body, 400, cases[i][1], cases[i][2]);
    }
}

static void test_tokenize_requests(void) {
    api_tokenize t;
    api_error e = {0};
    const char *b = "{\"content\":\"hi\",\"with_pieces\":true}";
    CHECK(api_parse_tokenize(b, strlen(b), &t, &e) == 0);
    CHECK(t.content_len == 2 && t.with_pieces && t.parse_special && !t.add_special);
    json_free(t.root);
    b = "{\"content\":3}";
    CHECK(api_parse_tokenize(b, strlen(b), &t, &e) == -1 && !strcmp(e.param, "content"));
    json_free(t.root);
    int32_t *ids;
    size_t n;
    const api_opts o = {0, 100, 4, CHAT_FORMAT_GEMMA4};
    b = "{\"tokens\":[2,5]}";
    CHECK(api_parse_detokenize(b, strlen(b), &o, &ids, &n, &e) == 0 && n == 2 && ids[1] == 5);
    free(ids);
    b = "{\"tokens\":[2,100]}";
    CHECK(api_parse_detokenize(b, strlen(b), &o, &ids, &n, &e) == -1 && !ids);
    CHECK_ERR(e.message, "'tokens[1]' is not a token id below 100");
    b = "{\"tokens\":[2,1.5]}"; /* not packed: read as nodes */
    CHECK(api_parse_detokenize(b, strlen(b), &o, &ids, &n, &e) == -1 && !ids);
    CHECK_ERR(e.message, "'tokens[1]' is not a token id below 100");
    b = "{\"tokens\":\"x\"}";
    CHECK(api_parse_detokenize(b, strlen(b), &o, &ids, &n, &e) == -1);
    CHECK_ERR(e.message, "'tokens' must be an array");
    /* more ids than the context: refused before they are copied */
    b = "{\"tokens\":[1,2,3,4,5]}";
    CHECK(api_parse_detokenize(b, strlen(b), &o, &ids, &n, &e) == -1 && !ids && !strcmp(e.code, "context_length_exceeded"));
    CHECK_ERR(e.message, "'tokens' has 5 ids; at most 4 (the context) are detokenized");
    b = "{\"tokens\":[1,2,3,4]}";
    CHECK(api_parse_detokenize(b, strlen(b), &o, &ids, &n, &e) == 0 && n == 4);
    free(ids);
}

/* Request bodies within API_MAX_JSON_VALUES, token id lists packed: a
 * prompt of ids past the context refused before its ids are copied */
static void test_body_bounds(void) {
    api_request r;
    api_error e = {0};
    const api_opts o = {0, 1000, 8, CHAT_FORMAT_GEMMA4};
    strbuf b = {0};
    sb_puts(&b, "{\"prompt\":[");
    for (int i = 0; i < 300000; i++) sb_puts(&b, i ? ",7" : "7"); /* more ids than values allowed: one packed list */
    sb_puts(&b, "]}");
    CHECK(api_parse(API_COMPLETION, b.p, b.len, &o, &r, &e) == -1 && e.status == 400 && !strcmp(e.code, "context_length_exceeded"));
    CHECK_ERR(e.message, "the prompt has 300000 tokens; the context holds 8 (start the server with a larger --ctx)");
    CHECK(r.n_prompts == 1 && !r.prompts[0].ids);
    api_request_free(&r);
    const char *lst = "{\"prompt\":[[1,2],[1,2,3,4,5,6,7,8,9]]}";
    CHECK(api_parse(API_COMPLETION, lst, strlen(lst), &o, &r, &e) == -1 && !strcmp(e.code, "context_length_exceeded"));
    CHECK_ERR(e.message, "prompt[1] has 9 tokens; the context holds 8");
    api_request_free(&r);
    const char *fits = "{\"prompt\":[1,2,3,4,5,6,7]}";
    CHECK(api_parse(API_COMPLETION, fits, strlen(fits), &o, &r, &e) == 0 && r.prompts[0].n_ids == 7 && r.prompts[0].ids[6] == 7);
    api_request_free(&r);
    /* any other list of that length is nodes, past the value bound */
    b.len = 0;
    sb_puts(&b, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":[");
    for (int i = 0; i < 300000; i++) sb_puts(&b, i ? ",7" : "7");
    sb_puts(&b, "]}");
    CHECK(api_parse(API_CHAT, b.p, b.len, &o, &r, &e) == -1 && e.status == 400 && !strcmp(e.code, "too_many_values"));
    CHECK_ERR(e.message, "the request body holds more than 262144 JSON values");
    api_request_free(&r);
    sb_free(&b);
}

static void test_error_json(void) {
    api_error e;
    strbuf o = {0};
    api_fail(&e, 400, NULL, "messages", "context_length_exceeded", "too \"long\"");
    api_error_json(&e, &o);
    CHECK(!strcmp(sb_cstr(&o), "{\"error\":{\"message\":\"too \\\"long\\\"\",\"type\":\"invalid_request_error\","
                               "\"param\":\"messages\",\"code\":\"context_length_exceeded\"}}"));
    o.len = 0;
    api_fail(&e, 401, "invalid_request_error", NULL, NULL, "no");
    api_error_json(&e, &o);
    CHECK(!strcmp(sb_cstr(&o), "{\"error\":{\"message\":\"no\",\"type\":\"invalid_request_error\",\"param\":null,\"code\":null}}"));
    sb_free(&o);
}

/* ---- replies ---- */

static reply_opts chat_opts(int stream, int usage) {
    reply_opts o = {API_CHAT, stream, usage, 0, "chatcmpl-abc", "tiny", "gem 0.1.0", 1700000000, 0};
    return o;
}

static void on_ev(const chat_event *ev, void *ctx) {
    reply *r = ctx;
    if (ev->kind == CHAT_EV_CONTENT) reply_text(r, ev->text, ev->len);
    else if (ev->kind == CHAT_EV_REASONING) reply_reasoning(r, ev->text, ev->len);
    else reply_tool_call(r, ev->name, ev->arguments);
}

static json *parse_body(reply *r) {
    strbuf *o = reply_out(r);
    json *v = json_parse(o->p, o->len, NULL);
    CHECKF(v != NULL, "not JSON: %s", sb_cstr(o));
    return v;
}

static void test_reply_chat(void) {
    reply_opts o = chat_opts(0, 0);
    reply *r = reply_new(&o);
    chat_parser *p = chat_parser_new(on_ev, r);
    const char *gen = "<|channel>thought\nLet me think.<channel|>Sure.<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}"
                      "<tool_call|><|tool_call>call:get_time{}<tool_call|>";
    /* fed a byte at a time, as the slowest stream would */
    for (size_t i = 0; gen[i]; i++) chat_parser_feed(p, gen + i, 1);
    chat_parser_finish(p);
    reply_usage u = {.prompt_tokens = 10, .completion_tokens = 20, .reasoning_tokens = 6, .cached_tokens = 4, .prompt_ms = 1.0, .predicted_ms = 2.0};
    reply_finish(r, "stop", &u);
    json *v = parse_body(r);
    CHECK(!strcmp(json_get_str(v, "object"), "chat.completion"));
    CHECK(!strcmp(json_get_str(v, "id"), "chatcmpl-abc") && !strcmp(json_get_str(v, "model"), "tiny"));
    json *c0 = json_at(json_get(v, "choices"), 0), *msg = json_get(c0, "message");
    CHECK(!strcmp(json_get_str(c0, "finish_reason"), "tool_calls"));
    CHECK(!strcmp(json_get_str(msg, "content"), "Sure."));
    CHECK(!strcmp(json_get_str(msg, "reasoning_content"), "Let me think."));
    json *calls = json_get(msg, "tool_calls");
    CHECK(calls && calls->len == 2);
    json *f0 = json_get(json_at(calls, 0), "function");
    CHECK(!strcmp(json_get_str(f0, "name"), "get_weather") && !strcmp(json_get_str(f0, "arguments"), "{\"city\":\"Paris\"}"));
    CHECK(!strcmp(json_get_str(json_at(calls, 0), "id"), "call_abc_0") && !strcmp(json_get_str(json_at(calls, 1), "id"), "call_abc_1"));
    CHECK(!strcmp(json_get_str(json_get(json_at(calls, 1), "function"), "arguments"), "{}"));
    json *usage = json_get(v, "usage");
    CHECK(json_get(usage, "prompt_tokens")->num == 10 && json_get(usage, "completion_tokens")->num == 20);
    CHECK(json_get(usage, "total_tokens")->num == 30);
    CHECK(json_get(json_get(usage, "prompt_tokens_details"), "cached_tokens")->num == 4);
    CHECK(json_get(json_get(usage, "completion_tokens_details"), "reasoning_tokens")->num == 6);
    CHECK(json_get(json_get(v, "timings"), "draft_n") == NULL); /* no drafter: no draft counts */
    json_free(v);
    chat_parser_free(p);
    reply_free(r);

    /* only tool calls: content is null; "length" stays "length" */
    r = reply_new(&o);
    reply_tool_call(r, "f", "{\"a\":1}");
    reply_finish(r, "length", &u);
    v = parse_body(r);
    c0 = json_at(json_get(v, "choices"), 0);
    CHECK(json_get(json_get(c0, "message"), "content")->type == JSON_NULL);
    CHECK(!strcmp(json_get_str(c0, "finish_reason"), "length"));
    json_free(v);
    reply_free(r);
}

/* Splits an SSE stream into its data payloads. */
static int sse_events(const char *s, char ev[][2048], int max) {
    int n = 0;
    while (*s && n < max) {
        const char *end = strstr(s, "\n\n");
        CHECKF(end != NULL, "unterminated event: %s", s);
        if (!end) break;
        CHECKF(!strncmp(s, "data: ", 6), "event without data: %.40s", s);
        size_t len = (size_t)(end - s - 6);
        if (len >= 2048) len = 2047;
        memcpy(ev[n], s + 6, len);
        ev[n][len] = 0;
        n++;
        s = end + 2;
    }
    return n;
}

static void test_reply_chat_stream(void) {
    reply_opts o = chat_opts(1, 1);
    reply *r = reply_new(&o);
    strbuf all = {0};
    reply_start(r);
    reply_reasoning(r, "hmm", 3);
    reply_text(r, "Hi", 2);
    reply_tool_call(r, "f", "{\"a\":1}");
    reply_usage u = {.prompt_tokens = 5, .completion_tokens = 3, .prompt_ms = 1.0, .predicted_ms = 2.0, .spec = 1, .draft_n = 7, .draft_n_accepted = 5};
    reply_finish(r, "stop", &u);
    sb_put(&all, reply_out(r)->p, reply_out(r)->len);
    static char ev[16][2048];
    int n = sse_events(sb_cstr(&all), ev, 16);
    CHECKF(n == 7, "%d events", n);
    if (n == 7) {
        json *e0 = json_parse(ev[0], strlen(ev[0]), NULL);
        CHECK(!strcmp(json_get_str(e0, "object"), "chat.completion.chunk"));
        json *d0 = json_get(json_at(json_get(e0, "choices"), 0), "delta");
        CHECK(!strcmp(json_get_str(d0, "role"), "assistant") && !strcmp(json_get_str(d0, "content"), ""));
        CHECK(json_get(e0, "usage")->type == JSON_NULL);
        json_free(e0);
        json *e1 = json_parse(ev[1], strlen(ev[1]), NULL);
        CHECK(!strcmp(json_get_str(json_get(json_at(json_get(e1, "choices"), 0), "delta"), "reasoning_content"), "hmm"));
        json_free(e1);
        json *e3 = json_parse(ev[3], strlen(ev[3]), NULL);
        json *tc = json_at(json_get(json_get(json_at(json_get(e3, "choices"), 0), "delta"), "tool_calls"), 0);
        CHECK(tc && json_get(tc, "index")->num == 0 && !strcmp(json_get_str(tc, "id"), "call_abc_0"));
        CHECK(!strcmp(json_get_str(tc, "type"), "function"));
        CHECK(!strcmp(json_get_str(json_get(tc, "function"), "name"), "f"));
        CHECK(!strcmp(json_get_str(json_get(tc, "function"), "arguments"), "{\"a\":1}"));
        json_free(e3);
        json *e4 = json_parse(ev[4], strlen(ev[4]), NULL);
        json *c4 = json_at(json_get(e4, "choices"), 0);
        CHECK(!strcmp(json_get_str(c4, "finish_reason"), "tool_calls") && json_get(c4, "delta")->len == 0);
        json_free(e4);
        json *e5 = json_parse(ev[5], strlen(ev[5]), NULL);
        CHECK(json_get(e5, "choices")->len == 0 && json_get(json_get(e5, "usage"), "total_tokens")->num == 8);
        /* a speculative run's counts go inside timings (llama-server's shape) */
        json *tm = json_get(e5, "timings");
        CHECK(tm && json_get(tm, "draft_n") && json_get(tm, "draft_n")->num == 7 &&
              json_get(tm, "draft_n_accepted")->num == 5 && json_get(tm, "predicted_n")->num == 3);
        json_free(e5);
        CHECK(!strcmp(ev[6], "[DONE]"));
    }
    sb_free(&all);
    reply_free(r);
    /* without include_usage: no usage chunk and no "usage" member */
    o = chat_opts(1, 0);
    r = reply_new(&o);
    reply_text(r, "x", 1);
    reply_finish(r, "length", &u);
    n = sse_events(sb_cstr(reply_out(r)), ev, 16);
    CHECK(n == 3 && !strstr(sb_cstr(reply_out(r)), "usage") && !strcmp(ev[2], "[DONE]"));
    reply_free(r);
}

static void test_reply_completion(void) {
    reply_opts o = {API_COMPLETION, 0, 0, 1, "cmpl-1", "tiny", NULL, 1, 0};
    reply *r = reply_new(&o);
    reply_text(r, "ab", 2);
    reply_token(r, 7);
    reply_text(r, "\xff" "c", 2);
    reply_token(r, 8);
    reply_usage u = {.prompt_tokens = 1, .completion_tokens = 2};
    reply_finish(r, "length", &u);
    json *v = parse_body(r);
    json *c0 = json_at(json_get(v, "choices"), 0);
    CHECK(!strcmp(json_get_str(v, "object"), "text_completion"));
    CHECK(!strcmp(json_get_str(c0, "text"), "ab\xef\xbf\xbd" "c"));
    CHECK(json_get(c0, "tokens")->len == 2 && json_at(json_get(c0, "tokens"), 1)->num == 8);
    CHECK(!json_get(v, "system_fingerprint"));
    json_free(v);
    reply_free(r);
    o.stream = 1;
    o.return_tokens = 0;
    r = reply_new(&o);
    reply_start(r); /* nothing for completions */
    CHECK(reply_out(r)->len == 0);
    reply_text(r, "z", 1);
    CHECK(strstr(sb_cstr(reply_out(r)), "\"choices\":[{\"index\":0,\"text\":\"z\",\"logprobs\":null,\"finish_reason\":null}]"));
    reply_free(r);
}

/* chat logprobs: OpenAI's content list, exact; a byte that is no UTF-8
 * character is U+FFFD in the token and itself in bytes */
static void test_reply_logprobs_chat(void) {
    reply_opts o = chat_opts(0, 0);
    o.logprobs = 1;
    reply *r = reply_new(&o);
    reply_alt top[2] = {{"Hi", 2, -0.5}, {"\xff", 1, -1.25}};
    reply_lp e = {{"Hi", 2, -0.5}, top, 2, 0};
    reply_logprob(r, &e);
    reply_text(r, "Hi", 2);
    reply_lp e2 = {{"\xff", 1, -1.25}, top, 0, 0};
    reply_logprob(r, &e2);
    reply_usage u = {.prompt_tokens = 1, .completion_tokens = 2};
    reply_finish(r, "stop", &u);
    CHECKF(strstr(sb_cstr(reply_out(r)),
                  "\"message\":{\"role\":\"assistant\",\"content\":\"Hi\"},\"logprobs\":{\"content\":["
                  "{\"token\":\"Hi\",\"logprob\":-0.5,\"bytes\":[72,105],\"top_logprobs\":["
                  "{\"token\":\"Hi\",\"logprob\":-0.5,\"bytes\":[72,105]},"
                  "{\"token\":\"\xef\xbf\xbd\",\"logprob\":-1.25,\"bytes\":[255]}]},"
                  "{\"token\":\"\xef\xbf\xbd\",\"logprob\":-1.25,\"bytes\":[255],\"top_logprobs\":[]}],"
                  "\"refusal\":null},\"finish_reason\":\"stop\"}"),
           "%s", sb_cstr(reply_out(r)));
    reply_free(r);
    /* a choice without tokens still has its (empty) list; without
     * logprobs asked: null */
    r = reply_new(&o);
    reply_finish(r, "length", &u);
    CHECK(strstr(sb_cstr(reply_out(r)), "\"logprobs\":{\"content\":[],\"refusal\":null}"));
    reply_free(r);
    o.logprobs = 0;
    r = reply_new(&o);
    reply_logprob(r, &e);
    reply_finish(r, "length", &u);
    CHECK(strstr(sb_cstr(reply_out(r)), "\"logprobs\":null"));
    reply_free(r);
}

/* a stream: entries ride the next chunk; n > 1: chunks carry their index,
 * each choice its role chunk and finish chunk; tool call ids stay unique */
static void test_reply_stream_choices(void) {
    reply_opts o = chat_opts(1, 0);
    o.logprobs = 1;
    reply *r = reply_new(&o);
    reply_alt top[1] = {{"A", 1, -0.125}};
    reply_lp e = {{"A", 1, -0.125}, top, 1, 0};
    reply_start(r);
    reply_logprob(r, &e);
    reply_logprob(r, &e); /* held back: goes with the next chunk */
    reply_text(r, "AA", 2);
    reply_tool_call(r, "f", "{}");
    reply_next(r, "stop");
    reply_logprob(r, &e);
    reply_tool_call(r, "g", "{}");
    reply_usage u = {.prompt_tokens = 1, .completion_tokens = 3};
    reply_finish(r, "length", &u);
    static char ev[16][2048];
    int n = sse_events(sb_cstr(reply_out(r)), ev, 16);
    CHECKF(n == 8, "%d events", n);
    static const char *const want[] = {
        "\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]",
        "\"choices\":[{\"index\":0,\"delta\":{\"content\":\"AA\"},\"logprobs\":{\"content\":["
        "{\"token\":\"A\",\"logprob\":-0.125,\"bytes\":[65],\"top_logprobs\":[{\"token\":\"A\",\"logprob\":-0.125,\"bytes\":[65]}]},"
        "{\"token\":\"A\",\"logprob\":-0.125,\"bytes\":[65],\"top_logprobs\":[{\"token\":\"A\",\"logprob\":-0.125,\"bytes\":[65]}]}],"
        "\"refusal\":null},\"finish_reason\":null}]",
        "{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_abc_0\",",
        "\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"tool_calls\"}]",
        "\"choices\":[{\"index\":1,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]",
        "{\"index\":1,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_abc_1\",\"type\":\"function\",\"function\":"
        "{\"name\":\"g\",\"arguments\":\"{}\"}}]},\"logprobs\":{\"content\":[{\"token\":\"A\"",
        "\"choices\":[{\"index\":1,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"length\"}]",
        "[DONE]",
    };
    for (int i = 0; i < n && i < 8; i++) CHECKF(strstr(ev[i], want[i]) != NULL, "event %d: %s", i, ev[i]);
    reply_free(r);
}

/* completions: the legacy arrays, exact; top_logprobs holds the token too
 * (each text once); an echoed first token has null; n > 1 and prompt
 * lists are choices in order */
static void test_reply_logprobs_completion(void) {
    reply_opts o = {API_COMPLETION, 0, 0, 0, "cmpl-1", "tiny", NULL, 1, 1};
    reply *r = reply_new(&o);
    reply_alt top[2] = {{" b", 2, -0.5}, {"c", 1, -1}};
    reply_lp e0 = {{"<bos>", 5, NAN}, NULL, 0, 0};
    reply_lp e1 = {{"a", 1, -2}, top, 2, 0};
    reply_lp e2 = {{" b", 2, -0.5}, top, 1, 1};
    reply_logprob(r, &e0);
    reply_logprob(r, &e1);
    reply_text(r, "a", 1);
    reply_logprob(r, &e2);
    reply_text(r, " b", 2);
    reply_next(r, "length");
    reply_text(r, "z", 1);
    reply_usage u = {.prompt_tokens = 2, .completion_tokens = 2};
    reply_finish(r, "stop", &u);
    CHECKF(strstr(sb_cstr(reply_out(r)),
                  "\"choices\":[{\"index\":0,\"text\":\"a b\",\"logprobs\":{\"tokens\":[\"<bos>\",\"a\",\" b\"],"
                  "\"token_logprobs\":[null,-2,-0.5],\"top_logprobs\":[null,{\" b\":-0.5,\"c\":-1,\"a\":-2},{\" b\":-0.5}],"
                  "\"text_offset\":[0,0,1]},\"finish_reason\":\"length\"},"
                  "{\"index\":1,\"text\":\"z\",\"logprobs\":{\"tokens\":[],\"token_logprobs\":[],\"top_logprobs\":[],"
                  "\"text_offset\":[]},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":2,"),
           "%s", sb_cstr(reply_out(r)));
    reply_free(r);
    /* streaming: each text chunk carries its tokens */
    o.stream = 1;
    r = reply_new(&o);
    reply_logprob(r, &e1);
    reply_text(r, "a", 1);
    reply_next(r, "stop");
    reply_text(r, "q", 1);
    CHECKF(strstr(sb_cstr(reply_out(r)),
                  "\"choices\":[{\"index\":0,\"text\":\"a\",\"logprobs\":{\"tokens\":[\"a\"],\"token_logprobs\":[-2],"
                  "\"top_logprobs\":[{\" b\":-0.5,\"c\":-1,\"a\":-2}],\"text_offset\":[0]},\"finish_reason\":null}]"),
           "%s", sb_cstr(reply_out(r)));
    CHECK(strstr(sb_cstr(reply_out(r)), "\"choices\":[{\"index\":0,\"text\":\"\",\"logprobs\":null,\"finish_reason\":\"stop\"}]"));
    CHECK(strstr(sb_cstr(reply_out(r)), "\"choices\":[{\"index\":1,\"text\":\"q\",\"logprobs\":null,\"finish_reason\":null}]"));
    reply_free(r);
}

static void test_sanitize(void) {
    strbuf o = {0};
    utf8_sanitize("a\xc3\xa9\xe2\x82\xac\xf0\x9f\x8e\x89z", 11, &o);
    CHECK(o.len == 11 && !memcmp(o.p, "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x8e\x89z", 11));
    o.len = 0;
    utf8_sanitize("\x80x\xc3\xed\xa0\x80\xc0\xaf", 8, &o); /* stray continuation, truncated, surrogate, overlong */
    CHECK(!strcmp(sb_cstr(&o), "\xef\xbf\xbdx\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"));
    sb_free(&o);
}

int main(void) {
    test_chat_valid();
    test_tool_choice();
    test_response_format();
    test_render_tools_error();
    test_chat_errors();
    test_completion();
    test_prompt_lists();
    test_logprobs_n();
    test_logit_bias();
    test_unsupported_fields();
    test_tokenize_requests();
    test_body_bounds();
    test_error_json();
    test_reply_chat();
    test_reply_chat_stream();
    test_reply_completion();
    test_reply_logprobs_chat();
    test_reply_stream_choices();
    test_reply_logprobs_completion();
    test_sanitize();
    return test_report("test_api");
}
