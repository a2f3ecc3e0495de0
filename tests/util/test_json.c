/* JSON: strict parsing with named errors, JavaScript semantics for
 * duplicate keys and number printing, escaping, builders; bounded parsing
 * (a value budget, packed integer arrays in one member). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "test.h"
#include "util/json.h"
#include "util/strbuf.h"
#include "util/utf8.h"

static void roundtrip(const char *in, const char *want) {
    gem_err err = {{0}};
    json *v = json_parse(in, strlen(in), &err);
    CHECKF(v != NULL, "%s: %s", in, err.msg);
    if (!v) return;
    strbuf o = {0};
    json_dump(v, &o);
    CHECKF(!strcmp(sb_cstr(&o), want), "%s dumped as %s, want %s", in, sb_cstr(&o), want);
    sb_free(&o);
    json_free(v);
}

static void reject(const char *in, size_t n, const char *want) {
    gem_err err = {{0}};
    json *v = json_parse(in, n, &err);
    CHECKF(v == NULL, "accepted %.*s", (int)n, in);
    json_free(v);
    CHECK_ERR(err.msg, want);
}

static void num(double d, const char *want) {
    strbuf o = {0};
    json_num_js(d, &o);
    CHECKF(!strcmp(sb_cstr(&o), want), "%.17g printed %s, want %s", d, sb_cstr(&o), want);
    sb_free(&o);
}

/* json_parse_limited: the packed member's integer arrays without element
 * nodes (and as nodes whenever an element is not an int32 integer, so
 * the array reads the same), the value budget counting everything else */
static void test_limited(void) {
    gem_err err = {{0}};
    json_limits lim = {0, "ids", 0};
    const char *in = "{\"ids\":[1, -2 ,2147483647,-2147483648],\"more\":{\"ids\":[1,2]},\"x\":[3]}";
    json *v = json_parse_limited(in, strlen(in), &lim, &err);
    CHECKF(v != NULL, "%s", err.msg);
    const json *ids = json_get(v, "ids");
    CHECK(ids && ids->type == JSON_ARRAY && ids->ints && !ids->items && ids->len == 4);
    CHECK(ids && ids->ints && ids->ints[1] == -2 && ids->ints[2] == INT32_MAX && ids->ints[3] == INT32_MIN);
    CHECK(ids && json_at(ids, 0) == NULL);
    /* only the top-level member: the nested one and other members have nodes */
    CHECK(!json_get(json_get(v, "more"), "ids")->ints && !json_get(v, "x")->ints && json_get(v, "x")->items[0]->num == 3);
    strbuf o = {0};
    json_dump(v, &o);
    CHECKF(!strcmp(sb_cstr(&o), "{\"ids\":[1,-2,2147483647,-2147483648],\"more\":{\"ids\":[1,2]},\"x\":[3]}"), "%s",
           sb_cstr(&o));
    sb_free(&o);
    json_free(v);
    /* not packed, read as nodes: a non-integer, an int32 overflow, a
     * string (with a bracket that ends the element count early), nesting,
     * the empty array, and integers written with a fraction or exponent
     * (their literal is kept: a renderer prints 1.0 otherwise than 1) */
    static const char *const plain[] = {"[1,2.5]", "[1,2147483648]", "[1,\"]\"]", "[[1],[2]]", "[]", "[1,null]", "[1,1.0]", "[1e2]"};
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++) {
        char body[64];
        snprintf(body, sizeof body, "{\"ids\":%s}", plain[i]);
        v = json_parse_limited(body, strlen(body), &lim, &err);
        const json *a = json_get(v, "ids");
        CHECKF(a && !a->ints && (a->len == 0 || a->items), "%s", plain[i]);
        json_free(v);
    }
    v = json_parse_limited("{\"ids\":[[1,2],[3]]}", 19, &lim, &err);
    CHECK(v && json_get(v, "ids")->items[0]->ints && json_get(v, "ids")->items[1]->ints[0] == 3);
    json_free(v);
    const char *two = "{\"ids\":[7, 8 ]}";
    v = json_parse_limited(two, strlen(two), &lim, &err);
    CHECK(v && json_get(v, "ids")->ints && json_get(v, "ids")->ints[1] == 8 && json_get(v, "ids")->len == 2);
    json_free(v);
    /* malformed packed candidates fail as the plain parser does */
    static const char *const broken[][2] = {{"{\"ids\":[1,2", "unterminated array"},
                                           {"{\"ids\":[1,]}", "unexpected character"},
                                           {"{\"ids\":[1 2]}", "',' or ']' expected"},
                                           {"{\"ids\":[-]}", "bad number"}};
    for (size_t i = 0; i < sizeof broken / sizeof broken[0]; i++) {
        v = json_parse_limited(broken[i][0], strlen(broken[i][0]), &lim, &err);
        CHECKF(!v, "accepted %s", broken[i][0]);
        CHECK_ERR(err.msg, broken[i][1]);
        json_free(v);
    }
    /* the budget: every node counts, a packed array once */
    json_limits small = {5, "ids", 0};
    const char *five = "{\"a\":[1,2],\"ids\":[1,2,3,4,5,6]}"; /* object, a, 1, 2, ids */
    v = json_parse_limited(five, strlen(five), &small, &err);
    CHECKF(v && !small.over, "%s", err.msg);
    json_free(v);
    const char *six = "{\"a\":[1,2,3],\"ids\":[1]}";
    v = json_parse_limited(six, strlen(six), &small, &err);
    CHECK(!v && small.over);
    CHECK_ERR(err.msg, "too many values");
    json_free(v);
    /* the attack the budget is for: a million nulls stop at the budget */
    strbuf big = {0};
    sb_puts(&big, "{\"x\":[");
    for (int i = 0; i < 1000000; i++) sb_puts(&big, i ? ",null" : "null");
    sb_puts(&big, "]}");
    json_limits k = {1000, NULL, 0};
    v = json_parse_limited(big.p, big.len, &k, &err);
    CHECK(!v && k.over);
    sb_free(&big);
    /* a packed list renders as its nodes would (Python's dump included) */
    const char *neg = "{\"ids\":[3,-1]}";
    v = json_parse_limited(neg, strlen(neg), &lim, &err);
    strbuf py = {0};
    json_dump_py(v, &py);
    CHECKF(v && json_get(v, "ids")->ints && !strcmp(sb_cstr(&py), "{\"ids\": [3, -1]}"), "%s", sb_cstr(&py));
    sb_free(&py);
    json_free(v);
}

/* Python's renderings: json.dumps and str() of what json.loads returns,
 * repr() of floats (expected strings printed by CPython 3.11). */
static void py(const char *in, const char *want_dump, const char *want_str) {
    gem_err err;
    json *v = json_parse(in, strlen(in), &err);
    CHECKF(v != NULL, "%s", in);
    if (!v) return;
    strbuf a = {0}, b = {0};
    json_dump_py(v, &a);
    json_str_py(v, &b);
    CHECKF(!strcmp(sb_cstr(&a), want_dump), "%s: dump '%s'", in, sb_cstr(&a));
    CHECKF(!strcmp(sb_cstr(&b), want_str), "%s: str '%s'", in, sb_cstr(&b));
    sb_free(&a);
    sb_free(&b);
    json_free(v);
}

static void num_py(double d, const char *want) {
    strbuf b = {0};
    json_num_py(d, &b);
    CHECKF(!strcmp(sb_cstr(&b), want), "%.17g: '%s'", d, sb_cstr(&b));
    sb_free(&b);
}

static void test_python(void) {
    py("1", "1", "1");
    py("-0", "0", "0");
    py("1.0", "1.0", "1.0");
    py("-0.0", "-0.0", "-0.0");
    py("1e2", "100.0", "100.0");
    py("12345678901234567890", "12345678901234567890", "12345678901234567890");
    py("true", "true", "True");
    py("null", "null", "None");
    py("\"a\\u00e9\\n\\\"\\u0001\\u007f\"", "\"a\u00e9\\n\\\"\\u0001\x7f\"", "a\u00e9\n\"\001\x7f");
    py("{\"b\": [1, 2.5, {}], \"a\": []}", "{\"b\": [1, 2.5, {}], \"a\": []}", "{\"b\": [1, 2.5, {}], \"a\": []}");
    num_py(1e16, "1e+16");
    num_py(1e15, "1000000000000000.0");
    num_py(0.0001, "0.0001");
    num_py(0.00001, "1e-05");
    num_py(1.5e-7, "1.5e-07");
    num_py(123456789.125, "123456789.125");
    num_py(1.2345678901234568e+17, "1.2345678901234568e+17");
    num_py(0.1, "0.1");
    num_py(-2.5, "-2.5");
    num_py(1e300, "1e+300");
}

int main(void) {
    test_limited();
    roundtrip(" {\"a\": [1, 2.5, -0.125, true, false, null, \"x\"], \"b\": {}} ",
              "{\"a\":[1,2.5,-0.125,true,false,null,\"x\"],\"b\":{}}");
    roundtrip("\"\\u00e9\\ud83d\\ude00\\n\\t\\\"\\\\\\/\"", "\"é😀\\n\\t\\\"\\\\/\"");
    roundtrip("{\"k\":1,\"j\":2,\"k\":3}", "{\"k\":3,\"j\":2}"); /* JS: first position, last value */
    roundtrip("[1.0, 1e2, 1E-7, 12345678901234567890]", "[1,100,1e-7,12345678901234567000]");
    roundtrip("\"\\u0000x\"", "\"\\u0000x\"");
    num(0.1, "0.1");
    num(1e21, "1e+21");
    num(1e20, "100000000000000000000");
    num(123456.789, "123456.789");
    num(0.000001, "0.000001");
    num(1e-7, "1e-7");
    num(-2.5e-8, "-2.5e-8");
    num(5e-324, "5e-324");
    num(1.7976931348623157e308, "1.7976931348623157e+308");
    num(-0.0, "0");
    num(3.0, "3");

    reject("", 0, "unexpected end of input");
    reject("{", 1, "object key expected");
    reject("[1,]", 4, "unexpected character");
    reject("{\"a\":1,}", 8, "object key expected");
    reject("01", 2, "trailing characters");
    reject("1.", 2, "digit expected after '.'");
    reject("-", 1, "truncated number");
    reject("1e+", 3, "digit expected in exponent");
    reject("\"abc", 4, "unterminated string");
    reject("\"a\nb\"", 5, "control character in string");
    reject("\"\\x\"", 4, "bad escape");
    reject("\"\\ud800\"", 8, "lone high surrogate");
    reject("\"\\udc00\"", 8, "lone low surrogate");
    reject("\"\\u12g4\"", 8, "bad hex digit");
    reject("\"\xff\"", 3, "invalid UTF-8");
    reject("\"\xc0\x80\"", 4, "invalid UTF-8");
    reject("tru", 3, "unexpected character");
    reject("nul", 3, "unexpected character");
    reject("{\"a\" 1}", 7, "':' expected");
    reject("[1 2]", 5, "',' or ']' expected");
    reject("{} {}", 5, "trailing characters");
    reject("// c\n{}", 7, "unexpected character");
    {
        char deep[300];
        memset(deep, '[', sizeof deep);
        reject(deep, sizeof deep, "nesting too deep");
        char ok[256];
        memset(ok, '[', 128);
        memset(ok + 128, ']', 128);
        gem_err err = {{0}};
        json *v = json_parse(ok, 256, &err);
        CHECKF(v != NULL, "128 levels: %s", err.msg);
        json_free(v);
    }
    /* error offsets */
    gem_err err = {{0}};
    CHECK(json_parse("{\"a\": x}", 8, &err) == NULL);
    CHECK_ERR(err.msg, "at byte 6");

    /* accessors and truthiness */
    const char *doc = "{\"s\":\"\",\"n\":0,\"t\":\"x\",\"a\":[],\"o\":{\"k\":null}}";
    json *v = json_parse(doc, strlen(doc), &err);
    CHECK(v && !json_truthy(json_get(v, "s")) && !json_truthy(json_get(v, "n")) && json_truthy(json_get(v, "t")));
    CHECK(!json_truthy(json_get(v, "a")) && json_truthy(json_get(v, "o")) && !json_truthy(json_get(v, "missing")));
    CHECK(json_get_str(v, "t") && !strcmp(json_get_str(v, "t"), "x") && json_get_str(v, "n") == NULL);
    CHECK(json_get(json_get(v, "o"), "k")->type == JSON_NULL && json_at(json_get(v, "a"), 0) == NULL);
    json_free(v);
    v = json_parse("[9007199254740993, 2.5, -4]", 27, &err);
    CHECK(v && v->items[0]->is_int && !v->items[1]->is_int && v->items[2]->is_int && v->items[2]->num == -4);
    json_free(v);

    /* builders and escaping: invalid UTF-8 never reaches the output */
    json *o = json_new(JSON_OBJECT);
    CHECK(!json_set(o, "text", json_new_str("a\"\x01\xff\xe6\x97\xa5", 7)));
    CHECK(!json_set(o, "n", json_new_num(2.5)));
    CHECK(!json_set(o, "n", json_new_num(7)));
    json *arr = json_new(JSON_ARRAY);
    CHECK(!json_push(arr, json_new_bool(1)) && !json_push(arr, json_new(JSON_NULL)));
    CHECK(!json_set(o, "arr", arr));
    strbuf out = {0};
    json_dump(o, &out);
    CHECKF(!strcmp(sb_cstr(&out), "{\"text\":\"a\\\"\\u0001\\ufffd\xe6\x97\xa5\",\"n\":7,\"arr\":[true,null]}"), "%s",
           sb_cstr(&out));
    CHECK(utf8_valid(out.p, out.len));
    sb_free(&out);
    json_free(o);

    /* many duplicate keys stay fast (no quadratic dedupe) */
    strbuf big = {0};
    sb_putc(&big, '{');
    for (int i = 0; i < 200000; i++) sb_printf(&big, "%s\"k%d\":%d", i ? "," : "", i % 1000, i);
    sb_putc(&big, '}');
    v = json_parse(big.p, big.len, &err);
    CHECK(v && v->len == 1000 && json_get(v, "k5")->num == 199005);
    json_free(v);
    sb_free(&big);
    test_python();
    return test_report("test_json");
}
