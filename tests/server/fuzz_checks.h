/* Invariants shared by the server's fuzz targets (fuzz_api.c,
 * fuzz_anthropic.c); each abort()s when violated, which libFuzzer reports
 * with the input. The two APIs differ only in how an error is serialized,
 * so the error check takes the serializer. */
#ifndef GEM_TESTS_SERVER_FUZZ_CHECKS_H
#define GEM_TESTS_SERVER_FUZZ_CHECKS_H

#include <stdlib.h>
#include <string.h>

#include "server/api.h"
#include "util/json.h"
#include "util/strbuf.h"

/* p[0..n) is valid JSON */
static void fz_check_json(const char *p, size_t n) {
    json *v = json_parse(p, n, NULL);
    if (!v) abort();
    json_free(v);
}

typedef void (*fz_error_json)(const api_error *e, strbuf *out);

/* An error carries a 4xx/5xx status and a message, and serializes (as
 * to_json writes it) to valid JSON. */
static void fz_check_error(const api_error *e, fz_error_json to_json) {
    if (e->status < 400 || e->status > 599 || !e->message[0]) abort();
    strbuf o = {0};
    to_json(e, &o);
    fz_check_json(o.p, o.len);
    sb_free(&o);
}

/* An accepted chat request renders (or fails with a 400) to a prompt
 * starting with <bos>, and its schemas go through the grammar compiler
 * (or fail with a 400). */
static void fz_check_chat(const api_request *r, fz_error_json to_json) {
    api_error e = {0};
    strbuf p = {0};
    gram *g = NULL;
    if (api_render(r, &p, &e)) {
        if (e.status != 400) abort();
        fz_check_error(&e, to_json);
    } else if (p.len < 5 || memcmp(p.p, "<bos>", 5)) {
        abort();
    } else if (api_grammar(r, &g, &e)) {
        if (e.status != 400) abort();
        fz_check_error(&e, to_json);
    }
    gram_free(g);
    sb_free(&p);
}

#endif
