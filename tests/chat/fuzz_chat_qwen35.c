/* libFuzzer target: the Qwen3.5 chat format. The input is tried as a
 * conversation (JSON request body, tools and thinking from its fields) for
 * the renderer, and as generated text for the streaming parser (fed in
 * chunks sized by the first byte, starting in reasoning or not by the
 * second, typed by the conversation's tools when it parsed). Events must
 * carry a name and valid JSON object arguments; the parser must end on
 * every input. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat.h"

static void check_event(const chat_event *ev, void *ctx) {
    (void)ctx;
    if (ev->kind == CHAT_EV_TOOL_CALL) {
        gem_err err;
        json *v = json_parse(ev->arguments, strlen(ev->arguments), &err);
        if (!v || v->type != JSON_OBJECT || !ev->name || !*ev->name) abort();
        json_free(v);
    } else if (!ev->text || !ev->len) {
        abort(); /* empty deltas are never emitted */
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gem_err err;
    json *conv = json_parse((const char *)data, size, &err);
    if (conv) {
        const json *th = json_get(conv, "enable_thinking");
        chat_render_opts o = {json_get(conv, "messages"), json_get(conv, "tools"), th ? json_truthy(th) : -1, 1, NULL,
                              CHAT_FORMAT_QWEN35};
        strbuf out = {0};
        chat_render(&o, &out, &err);
        sb_free(&out);
    }
    chat_parser *p = chat_parser_new_format(CHAT_FORMAT_QWEN35, check_event, NULL);
    if (size > 1 && data[1] & 1) chat_parser_in_reasoning(p);
    if (size > 1 && data[1] & 2) chat_parser_max_calls(p, 1);
    chat_parser_set_tools(p, json_get(conv, "tools"));
    size_t chunk = size ? (size_t)data[0] % 17 + 1 : 1;
    for (size_t i = 0; i < size; i += chunk) chat_parser_feed(p, (const char *)data + i, size - i < chunk ? size - i : chunk);
    chat_parser_finish(p);
    chat_parser_free(p);
    json_free(conv);
    return 0;
}
