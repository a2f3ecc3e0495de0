/* libFuzzer target: the JSON parser. Whatever parses must dump to JSON that
 * parses again to the same dump (round trip), and the dump is valid UTF-8. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/json.h"
#include "util/utf8.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gem_err err;
    json *v = json_parse((const char *)data, size, &err);
    if (!v) return 0;
    strbuf a = {0}, b = {0};
    json_dump(v, &a);
    json *w = json_parse(a.p ? a.p : "", a.len, &err);
    if (!w) abort();
    json_dump(w, &b);
    if (a.len != b.len || memcmp(a.p, b.p, a.len)) abort();
    if (!utf8_valid(a.p, a.len)) abort();
    json_free(v);
    json_free(w);
    sb_free(&a);
    sb_free(&b);
    return 0;
}
