/* The Anthropic Messages layer (server/anthropic.h): requests mapped to the
 * chat request the renderer takes (fields, defaults, tool_choice, thinking),
 * Anthropic conversations rendering byte for byte as their OpenAI
 * equivalents, refusals with their exact messages, and the message body and
 * SSE event sequence built from chat parser events, as exact strings. */
#include "server/anthropic.h"

#include "chat/chat.h"
#include "server/reply.h"
#include "test.h"

static api_opts hooks_off = {.allow_forced_output = 0}, hooks_on = {.allow_forced_output = 1};

static int parse(const char *body, api_request *r, api_error *e) {
    return anth_parse(body, strlen(body), &hooks_off, 0, r, e);
}

/* the prompt (and what constrains the answer) of an Anthropic or OpenAI request */
static char *render(int anth, const char *body) {
    api_request r;
    api_error e = {0};
    int rc = anth ? parse(body, &r, &e) : api_parse(API_CHAT, body, strlen(body), &hooks_off, &r, &e);
    CHECKF(rc == 0, "%s: %s", body, e.message);
    strbuf p = {0};
    gram *g = NULL;
    if (!rc) {
        rc = api_render(&r, &p, &e);
        CHECKF(rc == 0, "render %s: %s", body, e.message);
        CHECKF(rc || api_grammar(&r, &g, &e) == 0, "grammar %s: %s", body, e.message);
    }
    /* tool_choice any / tool constrain the answer as required / named do */
    sb_printf(&p, "|grammar:%s", !g ? "none" : r.tool_choice == API_TOOLS_NAMED ? r.tool_name : "any tool");
    gram_free(g);
    char *out = strdup(sb_cstr(&p));
    sb_free(&p);
    api_request_free(&r);
    return out;
}

/* ... and the prompt holds `must` (the comparison is not of two empty renders) */
static void same_prompt(const char *anth, const char *openai, const char *must) {
    char *a = render(1, anth), *o = render(0, openai);
    CHECKF(!strcmp(a, o), "\nanthropic: %s\nopenai:    %s", a, o);
    CHECKF(strstr(a, must) != NULL, "%s lacks %s", a, must);
    free(a);
    free(o);
}

/* the request fails with status 400, param and exactly message want */
static void expect_bad(const char *body, const char *param, const char *want) {
    api_request r;
    api_error e = {0};
    int rc = parse(body, &r, &e);
    CHECKF(rc == -1 && e.status == 400, "%s: rc %d status %d", body, rc, e.status);
    CHECKF(!strcmp(e.param, param), "%s: param '%s', want '%s'", body, e.param, param);
    CHECKF(!strcmp(e.message, want), "%s:\n  message '%s'\n  want    '%s'", body, e.message, want);
    api_request_free(&r);
}

static void test_fields(void) {
    api_request r;
    api_error e = {0};
    const char *body = "{\"model\":\"m\",\"max_tokens\":7,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                       "\"system\":\"be brief\",\"temperature\":0.5,\"top_p\":0.9,\"top_k\":40,\"stream\":true,"
                       "\"stop_sequences\":[\"a\",\"bc\"],\"metadata\":{\"user_id\":\"u1\"},"
                       "\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":2048},"
                       "\"tools\":[{\"name\":\"get\",\"description\":\"d\",\"input_schema\":{\"type\":\"object\"}}],"
                       "\"tool_choice\":{\"type\":\"any\",\"disable_parallel_tool_use\":true}}";
    CHECK(parse(body, &r, &e) == 0);
    CHECK(r.kind == API_CHAT && !strcmp(r.model, "m") && r.max_tokens == 7 && r.stream);
    CHECK(r.sampling.temp == 0.5f && r.sampling.top_p == 0.9f && r.sampling.top_k == 40);
    CHECK(r.n_stop == 2 && r.stop_len[1] == 2 && !memcmp(r.stop[1], "bc", 2));
    CHECK(r.enable_thinking == 1 && r.tool_choice == API_TOOLS_REQUIRED && r.single_call);
    CHECK(r.messages->len == 2 && r.tools && r.tools->len == 1 && r.cache_prompt);
    strbuf o = {0};
    json_dump(r.messages, &o);
    CHECKF(!strcmp(sb_cstr(&o), "[{\"role\":\"system\",\"content\":\"be brief\"},{\"role\":\"user\",\"content\":\"hi\"}]"),
           "%s", sb_cstr(&o));
    o.len = 0;
    json_dump(r.tools, &o);
    CHECKF(!strcmp(sb_cstr(&o), "[{\"type\":\"function\",\"function\":{\"name\":\"get\",\"description\":\"d\","
                                "\"parameters\":{\"type\":\"object\"}}}]"),
           "%s", sb_cstr(&o));
    sb_free(&o);
    api_request_free(&r);

    /* defaults: gem's sampling (as the OpenAI routes), thinking not given */
    CHECK(parse("{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", &r, &e) == 0);
    CHECK(r.sampling.temp == 0.8f && r.sampling.top_k == 64 && r.sampling.top_p == 0.95f && !r.seed_given);
    CHECK(!r.stream && r.n_stop == 0 && r.enable_thinking == -1 && !r.tools && r.tool_choice == API_TOOLS_AUTO);
    CHECK(!r.model && !r.single_call);
    api_request_free(&r);

    /* tool_choice: tool (named), none (the tools are not declared), auto; thinking disabled */
    const char *tools = "\"tools\":[{\"name\":\"a\",\"input_schema\":{}},{\"name\":\"b\",\"input_schema\":{}}],";
    char buf[512];
    snprintf(buf, sizeof buf, "{\"max_tokens\":1,%s\"tool_choice\":{\"type\":\"tool\",\"name\":\"b\"},"
             "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", tools);
    CHECK(parse(buf, &r, &e) == 0 && r.tool_choice == API_TOOLS_NAMED && !strcmp(r.tool_name, "b"));
    api_request_free(&r);
    snprintf(buf, sizeof buf, "{\"max_tokens\":1,%s\"tool_choice\":{\"type\":\"none\"},\"thinking\":{\"type\":\"disabled\"},"
             "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", tools);
    CHECK(parse(buf, &r, &e) == 0 && r.tool_choice == API_TOOLS_NONE && !r.tools && r.enable_thinking == 0);
    api_request_free(&r);

    /* count_tokens: max_tokens is not required there */
    const char *nomax = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}";
    CHECK(anth_parse(nomax, strlen(nomax), &hooks_off, 1, &r, &e) == 0 && r.max_tokens == -1);
    api_request_free(&r);

    /* the test hook, only when the server allows it */
    const char *hook = "{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"gem_forced_output\":\"ab\"}";
    CHECK(anth_parse(hook, strlen(hook), &hooks_on, 0, &r, &e) == 0 && r.forced_output_len == 2);
    api_request_free(&r);
    expect_bad(hook, "gem_forced_output", "'gem_forced_output' is a test hook; the server was not started with --test-hooks");
}

/* An Anthropic conversation and its OpenAI equivalent render the same prompt. */
static void test_equivalence(void) {
    /* system blocks, thinking, text and two tool_use blocks, their results
     * (one an error), then a user question; tool_choice any */
    same_prompt(
        "{\"max_tokens\":5,\"system\":[{\"type\":\"text\",\"text\":\"Be brief.\"},{\"type\":\"text\",\"text\":\"Use tools.\","
        "\"cache_control\":{\"type\":\"ephemeral\"}}],"
        "\"tools\":[{\"name\":\"get_weather\",\"description\":\"Weather of a city\",\"input_schema\":{\"type\":\"object\","
        "\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}],\"tool_choice\":{\"type\":\"any\"},"
        "\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Paris and Lyon?\"},"
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"Two calls.\",\"signature\":\"\"},"
        "{\"type\":\"text\",\"text\":\"Checking.\"},"
        "{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"get_weather\",\"input\":{\"city\":\"Paris\"}},"
        "{\"type\":\"tool_use\",\"id\":\"toolu_2\",\"name\":\"get_weather\",\"input\":{\"city\":\"Lyon\"}}]},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_1\",\"content\":\"sunny\"},"
        "{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_2\",\"is_error\":true,"
        "\"content\":[{\"type\":\"text\",\"text\":\"no station\"}]},"
        "{\"type\":\"text\",\"text\":\"And tomorrow?\"}]}]}",
        "{\"max_tokens\":5,\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":"
        "\"Weather of a city\",\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},"
        "\"required\":[\"city\"]}}}],\"tool_choice\":\"required\","
        "\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\\n\\nUse tools.\"},"
        "{\"role\":\"user\",\"content\":\"Weather in Paris and Lyon?\"},"
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"Checking.\"}],\"reasoning_content\":\"Two calls.\","
        "\"tool_calls\":[{\"id\":\"toolu_1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
        "\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}},{\"id\":\"toolu_2\",\"type\":\"function\",\"function\":"
        "{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Lyon\"}}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"toolu_1\",\"content\":\"sunny\"},"
        "{\"role\":\"tool\",\"tool_call_id\":\"toolu_2\",\"content\":[{\"type\":\"text\",\"text\":\"Error: \"},"
        "{\"type\":\"text\",\"text\":\"no station\"}]},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"And tomorrow?\"}]}]}",
        "<|turn>model\n<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|>"
        "<|tool_call>call:get_weather{city:<|\"|>Lyon<|\"|>}<tool_call|><|tool_response>response:get_weather{value:<|\"|>"
        "sunny<|\"|>}<tool_response|><|tool_response>response:get_weather{value:<|\"|>Error: no station<|\"|>}"
        "<tool_response|>");
    /* the tool call ids pair the results with their calls: the rendered
     * response names the tool; a user message of tool results only is no
     * user turn, so the thinking of the call it answers stays */
    char *p = render(1, "{\"max_tokens\":1,\"tools\":[{\"name\":\"f\",\"input_schema\":{}}],\"messages\":["
                        "{\"role\":\"user\",\"content\":\"go\"},{\"role\":\"assistant\",\"content\":["
                        "{\"type\":\"thinking\",\"thinking\":\"Call f.\"},{\"type\":\"tool_use\","
                        "\"id\":\"t9\",\"name\":\"f\",\"input\":{\"n\":3}}]},{\"role\":\"user\",\"content\":["
                        "{\"type\":\"tool_result\",\"tool_use_id\":\"t9\",\"content\":\"42\"}]}]}");
    CHECKF(strstr(p, "<|turn>model\n<|channel>thought\nCall f.\n<channel|><|tool_call>call:f{n:3}<tool_call|><|tool_response>response:f{value:<|\"|>42<|\"|>}<tool_response|>"),
           "%s", p);
    free(p);
    /* thinking on, a named tool, plain strings; stop sequences change nothing rendered */
    same_prompt("{\"max_tokens\":5,\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":1024},\"system\":\"S\","
                "\"tools\":[{\"name\":\"f\",\"input_schema\":{\"type\":\"object\"}}],\"tool_choice\":{\"type\":\"tool\",\"name\":\"f\"},"
                "\"stop_sequences\":[\"x\"],\"messages\":[{\"role\":\"user\",\"content\":\"a\"},"
                "{\"role\":\"assistant\",\"content\":\"b\"},{\"role\":\"user\",\"content\":\"c\"}]}",
                "{\"max_tokens\":5,\"chat_template_kwargs\":{\"enable_thinking\":true},"
                "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}}],"
                "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"f\"}},\"messages\":["
                "{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"a\"},"
                "{\"role\":\"assistant\",\"content\":\"b\"},{\"role\":\"user\",\"content\":\"c\"}]}",
                "|grammar:f");
    /* an empty system prompt is none; thinking disabled */
    same_prompt("{\"max_tokens\":5,\"system\":\"\",\"thinking\":{\"type\":\"disabled\"},"
                "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hi\"}]}]}",
                "{\"max_tokens\":5,\"chat_template_kwargs\":{\"enable_thinking\":false},"
                "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hi\"}]}]}",
                "<bos><|turn>user\nhi<turn|>\n<|turn>model\n<|channel>thought\n<channel|>|grammar:none");
}

static void test_refusals(void) {
    const char *u = "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]";
    char b[1024];
#define BAD(param, want, ...)                       \
    do {                                            \
        snprintf(b, sizeof b, __VA_ARGS__);         \
        expect_bad(b, param, want);                 \
    } while (0)
    expect_bad("", "", "the request body is empty; send a JSON object");
    expect_bad("[1]", "", "the request body must be a JSON object, not an array");
    BAD("max_tokens", "'max_tokens' is required", "{%s}", u);
    BAD("max_tokens", "'max_tokens' must be between 1 and 1e+09, not 0", "{\"max_tokens\":0,%s}", u);
    BAD("max_tokens", "'max_tokens' must be an integer", "{\"max_tokens\":1.5,%s}", u);
    BAD("", "'n' is not supported", "{\"max_tokens\":1,\"n\":2,%s}", u);
    BAD("", "'service_tier' is not supported", "{\"max_tokens\":1,\"service_tier\":\"auto\",%s}", u);
    BAD("temperature", "'temperature' must be between 0 and 1, not 1.5", "{\"max_tokens\":1,\"temperature\":1.5,%s}", u);
    BAD("top_k", "'top_k' must be an integer", "{\"max_tokens\":1,\"top_k\":2.5,%s}", u);
    BAD("stream", "'stream' must be a boolean, not a string", "{\"max_tokens\":1,\"stream\":\"yes\",%s}", u);
    BAD("model", "'model' must be a string, not a number", "{\"max_tokens\":1,\"model\":3,%s}", u);
    BAD("metadata", "'metadata' must be an object, not a string", "{\"max_tokens\":1,\"metadata\":\"m\",%s}", u);
    BAD("stop_sequences", "'stop_sequences' must be an array of strings, not a string",
        "{\"max_tokens\":1,\"stop_sequences\":\"x\",%s}", u);
    BAD("stop_sequences", "each stop sequence must have 1 to 256 bytes", "{\"max_tokens\":1,\"stop_sequences\":[\"\"],%s}", u);
    expect_bad("{\"max_tokens\":1}", "messages", "'messages' is required");
    expect_bad("{\"max_tokens\":1,\"messages\":[]}", "messages", "'messages' must not be empty");
    expect_bad("{\"max_tokens\":1,\"messages\":[{\"role\":\"system\",\"content\":\"x\"}]}", "messages[0].role",
               "'messages[0].role' must be \"user\" or \"assistant\"");
    expect_bad("{\"max_tokens\":1,\"messages\":[{\"role\":\"user\"}]}", "messages[0].content",
               "'messages[0].content' is required");
    expect_bad("{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"name\":\"n\"}]}", "messages[0]",
               "'messages[0].name' is not supported");
    expect_bad("{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"source\":{}}]}]}",
               "messages[0].content[0]",
               "'messages[0].content[0]' is a block of type 'image', which is not supported: gem reads text only");
    expect_bad("{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"document\",\"source\":{}}]}]}",
               "messages[0].content[0]",
               "'messages[0].content[0]' is a block of type 'document', which is not supported: gem reads text only");
    expect_bad("{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_use\",\"id\":\"a\","
               "\"name\":\"f\",\"input\":{}}]}]}",
               "messages[0].content[0]",
               "'messages[0].content[0]' is a block of type 'tool_use', which only assistant messages may hold");
    expect_bad("{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\","
               "\"citations\":[{}]}]}]}",
               "messages[0].content[0]", "'messages[0].content[0].citations' is not supported");
    expect_bad("{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\","
               "\"tool_use_id\":\"a\",\"content\":[{\"type\":\"image\"}]}]}]}",
               "messages[0].content[0].content[0]",
               "'messages[0].content[0].content[0]' is a block of type 'image', which is not supported: gem reads text only");
    expect_bad("{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\","
               "\"content\":[{\"type\":\"tool_use\",\"id\":\"a\",\"name\":\"f\",\"input\":\"{}\"}]},"
               "{\"role\":\"user\",\"content\":\"b\"}]}",
               "messages[1].content[0]", "'messages[1].content[0].input' must be an object");
    expect_bad("{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\","
               "\"content\":\"Sure, \"}]}",
               "messages", "'messages[1]' is an assistant message: continuing a prefilled answer is not supported; "
               "end with a user message");
    BAD("tools[0]", "'tools[0].input_schema' must be an object (a JSON schema)",
        "{\"max_tokens\":1,\"tools\":[{\"name\":\"f\"}],%s}", u);
    BAD("tools[0]", "'tools[0].type' 'web_search_20250305' is not supported: gem runs custom tools only (name, "
        "description, input_schema), no server tools",
        "{\"max_tokens\":1,\"tools\":[{\"type\":\"web_search_20250305\",\"name\":\"web_search\"}],%s}", u);
    BAD("tools[0]", "'tools[0].name' must be 1 to 128 letters, digits, '_', '-' or '.'",
        "{\"max_tokens\":1,\"tools\":[{\"name\":\"a b\",\"input_schema\":{}}],%s}", u);
    BAD("tool_choice", "'tool_choice' asks for a tool call but 'tools' is empty",
        "{\"max_tokens\":1,\"tool_choice\":{\"type\":\"any\"},%s}", u);
    BAD("tool_choice", "'tool_choice' names 'g', which is not in 'tools'",
        "{\"max_tokens\":1,\"tools\":[{\"name\":\"f\",\"input_schema\":{}}],\"tool_choice\":{\"type\":\"tool\",\"name\":\"g\"},%s}", u);
    BAD("tool_choice", "'tool_choice.type' must be \"auto\", \"any\", \"tool\" or \"none\"",
        "{\"max_tokens\":1,\"tool_choice\":{\"type\":\"required\"},%s}", u);
    BAD("tool_choice", "'tool_choice' must be an object, not a string", "{\"max_tokens\":1,\"tool_choice\":\"auto\",%s}", u);
    BAD("thinking", "'thinking.budget_tokens' is required", "{\"max_tokens\":1,\"thinking\":{\"type\":\"enabled\"},%s}", u);
    BAD("thinking", "'thinking.type' must be \"enabled\" or \"disabled\"",
        "{\"max_tokens\":1,\"thinking\":{\"type\":\"adaptive\"},%s}", u);
    BAD("system[0]", "'system[0]' must be a text block",
        "{\"max_tokens\":1,\"system\":[{\"type\":\"image\"}],%s}", u);
#undef BAD
}

/* chat parser events, as the server feeds them */
static void feed(anth_reply *r, chat_ev_kind k, const char *text, const char *name, const char *args) {
    chat_event ev = {k, text, text ? strlen(text) : 0, name, args};
    anth_reply_event(r, &ev);
}

static void test_reply(void) {
    const anth_usage u = {10, 4, 6};
    /* not streaming: blocks in order, consecutive text merged */
    anth_reply_opts o = {0, "msg_00ab", "tiny"};
    anth_reply *r = anth_reply_new(&o);
    anth_reply_start(r, &u); /* nothing without a stream */
    CHECK(anth_reply_out(r)->len == 0);
    feed(r, CHAT_EV_REASONING, "Think", NULL, NULL);
    feed(r, CHAT_EV_REASONING, "ing.", NULL, NULL);
    feed(r, CHAT_EV_CONTENT, "Hi ", NULL, NULL);
    feed(r, CHAT_EV_CONTENT, "\"you\"\xff", NULL, NULL);
    feed(r, CHAT_EV_TOOL_CALL, NULL, "get", "{\"city\":\"Paris\"}");
    feed(r, CHAT_EV_TOOL_CALL, NULL, "get", "not json");
    CHECK(anth_reply_n_tool_uses(r) == 2);
    anth_reply_finish(r, 0, NULL, 0, &u);
    CHECKF(!strcmp(sb_cstr(anth_reply_out(r)),
                   "{\"id\":\"msg_00ab\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"tiny\",\"content\":["
                   "{\"type\":\"thinking\",\"thinking\":\"Thinking.\",\"signature\":\"\"},"
                   "{\"type\":\"text\",\"text\":\"Hi \\\"you\\\"\xef\xbf\xbd\"},"
                   "{\"type\":\"tool_use\",\"id\":\"toolu_00ab_0\",\"name\":\"get\",\"input\":{\"city\":\"Paris\"}},"
                   "{\"type\":\"tool_use\",\"id\":\"toolu_00ab_1\",\"name\":\"get\",\"input\":{}}],"
                   "\"stop_reason\":\"tool_use\",\"stop_sequence\":null,\"usage\":{\"input_tokens\":6,"
                   "\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":4,\"output_tokens\":6}}"),
           "%s", sb_cstr(anth_reply_out(r)));
    anth_reply_free(r);

    /* stop reasons: stop sequence, max_tokens (even with a tool call), end_turn; an empty answer */
    r = anth_reply_new(&o);
    feed(r, CHAT_EV_CONTENT, "a", NULL, NULL);
    anth_reply_finish(r, 0, "END", 3, &u);
    CHECKF(strstr(sb_cstr(anth_reply_out(r)), "\"stop_reason\":\"stop_sequence\",\"stop_sequence\":\"END\","), "%s",
           sb_cstr(anth_reply_out(r)));
    anth_reply_free(r);
    r = anth_reply_new(&o);
    feed(r, CHAT_EV_TOOL_CALL, NULL, "get", "{}");
    anth_reply_finish(r, 1, NULL, 0, &u);
    CHECK(strstr(sb_cstr(anth_reply_out(r)), "\"stop_reason\":\"max_tokens\",\"stop_sequence\":null,") != NULL);
    anth_reply_free(r);
    r = anth_reply_new(&o);
    anth_reply_finish(r, 0, NULL, 0, &u);
    CHECKF(strstr(sb_cstr(anth_reply_out(r)), "\"content\":[],\"stop_reason\":\"end_turn\",\"stop_sequence\":null,"),
           "%s", sb_cstr(anth_reply_out(r)));
    anth_reply_free(r);

    /* streaming: Anthropic's event sequence */
    anth_reply_opts so = {1, "msg_00ab", "tiny"};
    r = anth_reply_new(&so);
    anth_reply_start(r, &u);
    feed(r, CHAT_EV_REASONING, "Hm", NULL, NULL);
    feed(r, CHAT_EV_CONTENT, "", NULL, NULL); /* empty: no block */
    feed(r, CHAT_EV_CONTENT, "Hi", NULL, NULL);
    feed(r, CHAT_EV_CONTENT, "!", NULL, NULL);
    feed(r, CHAT_EV_TOOL_CALL, NULL, "get", "{\"a\":1}");
    anth_reply_finish(r, 0, NULL, 0, &u);
    const char *want =
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_00ab\",\"type\":\"message\","
        "\"role\":\"assistant\",\"model\":\"tiny\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,"
        "\"usage\":{\"input_tokens\":6,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":4,\"output_tokens\":0}}}\n\n"
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":"
        "{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}}\n\n"
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":"
        "{\"type\":\"thinking_delta\",\"thinking\":\"Hm\"}}\n\n"
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":"
        "{\"type\":\"text\",\"text\":\"\"}}\n\n"
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":"
        "{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n"
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":"
        "{\"type\":\"text_delta\",\"text\":\"!\"}}\n\n"
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n"
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":2,\"content_block\":"
        "{\"type\":\"tool_use\",\"id\":\"toolu_00ab_0\",\"name\":\"get\",\"input\":{}}}\n\n"
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":"
        "{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"a\\\":1}\"}}\n\n"
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":2}\n\n"
        "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\","
        "\"stop_sequence\":null},\"usage\":{\"input_tokens\":6,\"cache_creation_input_tokens\":0,"
        "\"cache_read_input_tokens\":4,\"output_tokens\":6}}\n\n"
        "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
    CHECKF(!strcmp(sb_cstr(anth_reply_out(r)), want), "\n%s", sb_cstr(anth_reply_out(r)));
    anth_reply_free(r);

    /* an error after the head went out */
    r = anth_reply_new(&so);
    api_error e;
    api_fail(&e, 500, "server_error", NULL, NULL, "boom");
    anth_reply_error(r, &e);
    CHECK(!strcmp(sb_cstr(anth_reply_out(r)), "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\","
                                                "\"message\":\"boom\"}}\n\n"));
    anth_reply_free(r);
}

static void test_errors(void) {
    static const struct {
        int status;
        const char *type;
    } map[] = {{400, "invalid_request_error"}, {401, "authentication_error"}, {403, "permission_error"},
               {404, "not_found_error"},       {405, "invalid_request_error"}, {413, "request_too_large"},
               {429, "overloaded_error"},      {500, "api_error"},           {503, "overloaded_error"}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        CHECKF(!strcmp(anth_error_type(map[i].status), map[i].type), "%d: %s", map[i].status,
               anth_error_type(map[i].status));
    api_error e;
    api_fail(&e, 400, "invalid_request_error", "max_tokens", NULL, "'max_tokens' is \"required\"");
    strbuf o = {0};
    anth_error_json(&e, &o);
    CHECK(!strcmp(sb_cstr(&o), "{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\","
                               "\"message\":\"'max_tokens' is \\\"required\\\"\"}}"));
    sb_free(&o);
}

/* Generated text through the chat parser into the reply, as run_job does. */
static void on_ev(const chat_event *ev, void *ctx) { anth_reply_event(ctx, ev); }

static void test_parser_to_reply(void) {
    const char *gen = "<|channel>thought\nPlan.<channel|>Ok.<|tool_call>call:f{x:<|\"|>y<|\"|>}<tool_call|><|tool_response>";
    anth_reply_opts o = {0, "msg_1", "m"};
    anth_reply *r = anth_reply_new(&o);
    chat_parser *p = chat_parser_new(on_ev, r);
    for (const char *c = gen; *c; c++) chat_parser_feed(p, c, 1); /* byte by byte */
    chat_parser_finish(p);
    const anth_usage u = {3, 0, 9};
    anth_reply_finish(r, 0, NULL, 0, &u);
    CHECKF(strstr(sb_cstr(anth_reply_out(r)),
                  "\"content\":[{\"type\":\"thinking\",\"thinking\":\"Plan.\",\"signature\":\"\"},{\"type\":\"text\","
                  "\"text\":\"Ok.\"},{\"type\":\"tool_use\",\"id\":\"toolu_1_0\",\"name\":\"f\",\"input\":{\"x\":\"y\"}}],"
                  "\"stop_reason\":\"tool_use\""),
           "%s", sb_cstr(anth_reply_out(r)));
    chat_parser_free(p);
    anth_reply_free(r);
}

int main(void) {
    test_fields();
    test_equivalence();
    test_refusals();
    test_reply();
    test_errors();
    test_parser_to_reply();
    printf("test_anthropic: %d passed, %d failed\n", test_passed, test_failed);
    return test_failed != 0;
}
