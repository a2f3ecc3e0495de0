/* libFuzzer target: the JSON parser. Whatever parses must dump to JSON that
 * parses again to the same dump (round trip), and the dump is valid UTF-8.
 * The bounded parse (json_parse_limited) with a packed member ("p") must
 * agree with the plain one: it parses exactly what the plain one parses
 * (no value bound) and dumps the same, packed or not; with a bound of 16
 * values it either parses the same or reports the bound. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/json.h"
#include "util/utf8.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gem_err err;
    json *v = json_parse((const char *)data, size, &err);
    if (!v) {
        /* the bounded parse refuses what the plain one does */
        json_limits lim = {0, "p", 0};
        json *pk = json_parse_limited((const char *)data, size, &lim, &err);
        if (pk) abort();
        return 0;
    }
    strbuf a = {0}, b = {0};
    json_dump(v, &a);
    json *w = json_parse(a.p ? a.p : "", a.len, &err);
    if (!w) abort();
    json_dump(w, &b);
    if (a.len != b.len || memcmp(a.p, b.p, a.len)) abort();
    if (!utf8_valid(a.p, a.len)) abort();
    json_limits lim = {0, "p", 0};
    json *pk = json_parse_limited((const char *)data, size, &lim, &err);
    if (!pk) abort();
    strbuf c = {0};
    json_dump(pk, &c);
    if (a.len != c.len || memcmp(a.p, c.p, a.len)) abort();
    json_free(pk);
    sb_free(&c);
    json_limits small = {16, "p", 0};
    pk = json_parse_limited((const char *)data, size, &small, &err);
    if (!pk && !small.over) abort();
    if (pk) {
        json_dump(pk, &c);
        if (a.len != c.len || memcmp(a.p, c.p, a.len)) abort();
    }
    json_free(pk);
    sb_free(&c);
    json_free(v);
    json_free(w);
    sb_free(&a);
    sb_free(&b);
    return 0;
}
