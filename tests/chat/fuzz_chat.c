/* libFuzzer target: the chat format. The input is tried as a conversation
 * (JSON request body) for the renderer, as generated text for the
 * streaming parser (fed in chunks sized by the first byte), and as tool-call
 * arguments. Events must carry valid JSON arguments. */
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
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gem_err err;
    json *conv = json_parse((const char *)data, size, &err);
    if (conv) {
        chat_render_opts o = {json_get(conv, "messages"), json_get(conv, "tools"),
                              json_truthy(json_get(conv, "enable_thinking")), 1, "<bos>", CHAT_FORMAT_GEMMA4};
        strbuf out = {0};
        chat_render(&o, &out, &err);
        sb_free(&out);
        json_free(conv);
    }
    chat_parser *p = chat_parser_new(check_event, NULL);
    size_t chunk = size ? (size_t)data[0] % 17 + 1 : 1;
    for (size_t i = 0; i < size; i += chunk) chat_parser_feed(p, (const char *)data + i, size - i < chunk ? size - i : chunk);
    chat_parser_finish(p);
    chat_parser_free(p);
    strbuf args = {0};
    if (chat_args_to_json((const char *)data, size, &args) == 0) {
        json *v = json_parse(args.p, args.len, &err);
        if (!v) abort();
        json_free(v);
    }
    sb_free(&args);
    return 0;
}
