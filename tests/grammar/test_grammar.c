/* Grammar module without the vocabulary: the engine (builder checks,
 * recursion, until, rollback, done/ended, bounds), JSON Schema acceptance
 * and rejection of hand-written texts in both syntaxes, every refusal's
 * message, the Gemma syntax round trip through chat_args_to_json, tool
 * calls and the reasoning prefix. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat.h"
#include "grammar/gram_impl.h"
#include "grammar/grammar.h"
#include "test.h"

/* 2: a complete sentence, 1: a prefix only, 0: rejected */
static int run(const gram *g, const char *s, size_t n) {
    gram_state *st = gram_state_new(g);
    if (!st) return -1;
    int r = gram_state_feed(st, s, n) ? 0 : gram_state_done(st) ? 2 : 1;
    gram_state_free(st);
    return r;
}

static int runs(const gram *g, const char *s) { return run(g, s, strlen(s)); }

static gram *schema_gram(const char *schema, int syntax, gem_err *err) {
    json *j = schema ? json_parse(schema, strlen(schema), err) : NULL;
    if (schema && !j) return NULL;
    gram *g = gram_json_schema(j, syntax, err);
    json_free(j);
    return g;
}

/* ---- engine ---- */

static void test_engine(void) {
    gem_err err = {{0}};
    /* P := '(' P ')' P | '' */
    gb *b = gb_new();
    uint32_t p = gb_rule(b);
    gseq s = {0};
    gs_byte(b, &s, '(');
    gs_ref(&s, p);
    gs_byte(b, &s, ')');
    gs_ref(&s, p);
    gb_alt(b, p, &s);
    gs_reset(&s);
    gb_alt(b, p, &s);
    gram *g = gb_finish(b, p, &err);
    gb_free(b);
    CHECKF(g != NULL, "%s", err.msg);
    if (g) {
        CHECK(runs(g, "") == 2);
        CHECK(runs(g, "(()())()") == 2);
        CHECK(runs(g, "(()") == 1);
        CHECK(runs(g, "())") == 0);
        CHECK(runs(g, "(x") == 0);
        /* a rejected feed leaves the state as it was */
        gram_state *st = gram_state_new(g);
        CHECK(gram_state_feed(st, "((", 2) == 0);
        CHECK(gram_state_feed(st, ")x", 2) == -1);
        CHECK(!gram_state_done(st));
        CHECK(gram_state_feed(st, "))", 2) == 0 && gram_state_done(st) && !gram_state_ended(st));
        /* clone and copy (rollback) */
        gram_state *c = gram_state_clone(st);
        CHECK(gram_state_feed(c, "(", 1) == 0 && !gram_state_done(c));
        CHECK(gram_state_done(st));
        CHECK(gram_state_copy(c, st) == 0 && gram_state_done(c));
        CHECK(gram_state_feed(c, ")", 1) == -1);
        gram_state_free(c);
        /* depth bound: nesting stops below GRAM_MAX_DEPTH, closing still works */
        char deep[300];
        memset(deep, '(', sizeof deep);
        int k = 0;
        gram_state_copy(st, st);
        gram_state *d = gram_state_new(g);
        while (k < 300 && gram_state_feed(d, deep, 1) == 0) k++;
        CHECKF(k > 60 && k < GRAM_MAX_DEPTH, "nesting stopped at %d", k);
        memset(deep, ')', sizeof deep);
        CHECK(gram_state_feed(d, deep, (size_t)k) == 0 && gram_state_done(d));
        gram_state_free(d);
        gram_state_free(st);
        gram_free(g);
    }
    /* done vs ended: "ab" | "abc" */
    b = gb_new();
    uint32_t r = gb_rule(b);
    gs_reset(&s);
    gs_str(b, &s, "ab");
    gb_alt(b, r, &s);
    gs_reset(&s);
    gs_str(b, &s, "abc");
    gb_alt(b, r, &s);
    g = gb_finish(b, r, &err);
    gb_free(b);
    if (g) {
        gram_state *st = gram_state_new(g);
        gram_state_feed(st, "ab", 2);
        CHECK(gram_state_done(st) && !gram_state_ended(st));
        gram_state_feed(st, "c", 1);
        CHECK(gram_state_done(st) && gram_state_ended(st));
        CHECK(gram_state_feed(st, "c", 1) == -1);
        gram_state_free(st);
        gram_free(g);
    }
    /* until */
    b = gb_new();
    gs_reset(&s);
    gs_str(b, &s, "<a>");
    gs_ref(&s, gb_until(b, "</a>"));
    gs_str(b, &s, "x");
    r = gb_rule_seq(b, &s);
    g = gb_finish(b, r, &err);
    gb_free(b);
    CHECKF(g != NULL, "%s", err.msg);
    if (g) {
        CHECK(runs(g, "<a>hello</a>x") == 2);
        CHECK(runs(g, "<a></a>x") == 2);
        CHECK(runs(g, "<a>ab</a</a>x") == 2);
        CHECK(runs(g, "<a><</</a>x") == 2);
        CHECK(runs(g, "<a>a</a>b</a>x") == 0); /* the first marker ends it */
        CHECK(runs(g, "<a>caf\xc3\xa9 \xf0\x9f\x98\x80</a>x") == 2);
        CHECK(runs(g, "<a>\xc3") == 1);         /* a character cut short: a prefix */
        CHECK(runs(g, "<a>\xff") == 0);         /* never UTF-8 */
        CHECK(runs(g, "<a>\xed\xa0\x80") == 0); /* a surrogate */
        CHECK(runs(g, "<a>\xc0\xaf") == 0);     /* overlong */
        gram_free(g);
    }
    /* builder checks: left recursion, no finite derivation */
    b = gb_new();
    r = gb_rule(b);
    gs_reset(&s);
    gs_ref(&s, r);
    gs_str(b, &s, "x");
    gb_alt(b, r, &s);
    gs_reset(&s);
    gs_str(b, &s, "y");
    gb_alt(b, r, &s);
    g = gb_finish(b, r, &err);
    CHECK(g == NULL);
    CHECK_ERR(err.msg, "left recursion");
    gb_free(b);
    b = gb_new();
    r = gb_rule(b);
    gs_reset(&s);
    gs_str(b, &s, "x");
    gs_ref(&s, r);
    gb_alt(b, r, &s);
    g = gb_finish(b, r, &err);
    CHECK(g == NULL);
    CHECK_ERR(err.msg, "derives no finite text");
    gb_free(b);
    gs_free(&s);
    /* ambiguity stays bounded: A := 'a' A | 'a' B ; B := 'a' B | '' */
    b = gb_new();
    uint32_t A = gb_rule(b), B = gb_rule(b);
    gs_reset(&s);
    gs_byte(b, &s, 'a');
    gs_ref(&s, A);
    gb_alt(b, A, &s);
    gs_reset(&s);
    gs_byte(b, &s, 'a');
    gs_ref(&s, B);
    gb_alt(b, A, &s);
    gs_reset(&s);
    gs_byte(b, &s, 'a');
    gs_ref(&s, B);
    gb_alt(b, B, &s);
    gs_reset(&s);
    gb_alt(b, B, &s);
    g = gb_finish(b, A, &err);
    gb_free(b);
    if (g) {
        char as[2000];
        memset(as, 'a', sizeof as);
        CHECK(run(g, as, sizeof as) == 2);
        gram_free(g);
    }
    /* exponential ambiguity: A := 'a' A B | 'a' B A | '' ; B := A. The
     * stack set hits GRAM_MAX_STACKS and the byte is refused (no hang). */
    b = gb_new();
    A = gb_rule(b);
    B = gb_rule(b);
    gs_reset(&s);
    gs_byte(b, &s, 'a');
    gs_ref(&s, A);
    gs_ref(&s, B);
    gb_alt(b, A, &s);
    gs_reset(&s);
    gs_byte(b, &s, 'a');
    gs_ref(&s, B);
    gs_ref(&s, A);
    gb_alt(b, A, &s);
    gs_reset(&s);
    gb_alt(b, A, &s);
    gs_reset(&s);
    gs_ref(&s, A);
    gb_alt(b, B, &s);
    gs_free(&s);
    g = gb_finish(b, A, &err);
    gb_free(b);
    CHECKF(g != NULL, "%s", err.msg);
    if (g) {
        gram_state *st = gram_state_new(g);
        int k = 0;
        while (k < 200 && gram_state_feed(st, "a", 1) == 0) k++;
        CHECKF(k > 3 && k < 200, "ambiguous grammar fed %d bytes", k);
        CHECK(gram_state_done(st)); /* the refused byte changed nothing */
        gram_state_free(st);
        gram_free(g);
    }
}

/* ---- schemas: acceptance ---- */

typedef struct {
    const char *schema;
    int syntax;
    const char *text;
    int want; /* 2 complete, 1 prefix only, 0 rejected */
} acase;

#define J GRAM_SYNTAX_JSON
#define G GRAM_SYNTAX_GEMMA
#define Q "<|\"|>"

static const acase acases[] = {
    /* json_object mode */
    {NULL, J, "{}", 2},
    {NULL, J, "{\"a\":[1,-2.5e+10,true,null,{\"b\":\"c\"}],\"\":\"\"}", 2},
    {NULL, J, "[1]", 0},
    {NULL, J, "{\"a\": 1}", 0}, /* no insignificant whitespace */
    {NULL, J, "{\"a\":01}", 0},
    {NULL, J, "{\"a\":1.}", 0},
    {NULL, J, "{\"a\":1e123}", 0}, /* at most 2 exponent digits */
    {NULL, J, "{\"a\":1234567890123456}", 0}, /* at most 15 integer digits */
    {NULL, J, "{\"a\":123456789012345}", 2},
    {"{}", J, "{\"k\":{}}", 2},
    {NULL, G, "{a:" Q "x" Q ",b:[1,{c:null}]}", 2},
    /* types */
    {"{\"type\":\"string\"}", J, "\"a\\\"b\\\\c\\/\\b\\f\\n\\r\\t\\u00e9\"", 2},
    {"{\"type\":\"string\"}", J, "\"\\ud83d\\ude00\"", 2},
    {"{\"type\":\"string\"}", J, "\"\\ud83d\"", 0},
    {"{\"type\":\"string\"}", J, "\"\\ude00\"", 0},
    {"{\"type\":\"string\"}", J, "\"\\x\"", 0},
    {"{\"type\":\"string\"}", J, "\"a\nb\"", 0}, /* raw control character */
    {"{\"type\":\"string\"}", J, "\"\xe2\x82\xac\xf0\x9f\x98\x80\"", 2},
    {"{\"type\":\"string\"}", J, "\"\xe2\x82\"", 0},
    {"{\"type\":\"string\"}", J, "\"\xe2\x82", 1},
    {"{\"type\":\"string\"}", J, "\"a<b|c\"", 2},
    {"{\"type\":\"string\"}", J, "\"<|tool_call>\"", 0}, /* raw <| never */
    {"{\"type\":\"string\"}", J, "\"<turn|>\"", 0},
    {"{\"type\":\"string\"}", J, "\"\\u003c|tool_call>\"", 2},
    {"{\"type\":\"integer\"}", J, "-42", 2},
    {"{\"type\":\"integer\"}", J, "-0", 0},
    {"{\"type\":\"integer\"}", J, "4.0", 0},
    {"{\"type\":\"number\"}", J, "-0.5e-3", 2},
    {"{\"type\":\"boolean\"}", J, "false", 2},
    {"{\"type\":\"null\"}", J, "null", 2},
    {"{\"type\":[\"string\",\"null\"]}", J, "null", 2},
    {"{\"type\":[\"string\",\"null\"]}", J, "\"x\"", 2},
    {"{\"type\":[\"string\",\"null\"]}", J, "1", 0},
    /* objects */
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"string\"}},\"required\":[\"b\"]}", J, "{\"b\":\"x\"}", 2},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"string\"}},\"required\":[\"b\"]}", J, "{\"a\":1,\"b\":\"x\"}", 2},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"string\"}},\"required\":[\"b\"]}", J, "{\"b\":\"x\",\"a\":1}", 0}, /* declared order */
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"string\"}},\"required\":[\"b\"]}", J, "{\"a\":1}", 0},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"string\"}},\"required\":[\"b\"]}", J, "{\"a\":1,\"a\":2,\"b\":\"x\"}", 0},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}", J, "{}", 2},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}", J, "{\"z\":1}", 0}, /* additionalProperties absent: declared only */
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"additionalProperties\":true}", J, "{\"a\":1,\"z\":[1],\"y\":\"s\"}", 2},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"additionalProperties\":true}", J, "{\"a\":1,\"a\":2}", 0}, /* extras avoid declared names */
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"additionalProperties\":true}", J, "{\"ab\":2}", 2},
    {"{\"type\":\"object\",\"properties\":{\"ab\":{\"type\":\"integer\"}},\"additionalProperties\":true}", J, "{\"a\":2}", 2},
    {"{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}", J, "{\"x\":1,\"y\":2}", 2},
    {"{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}", J, "{\"x\":\"s\"}", 0},
    {"{\"type\":\"object\"}", J, "{\"x\":{\"y\":[]}}", 2},
    {"{\"type\":\"object\",\"properties\":{},\"additionalProperties\":false}", J, "{}", 2},
    {"{\"type\":\"object\",\"properties\":{},\"additionalProperties\":false}", J, "{\"a\":1}", 0},
    {"{\"type\":\"object\",\"required\":[\"id\"]}", J, "{\"id\":3}", 2},
    {"{\"type\":\"object\",\"required\":[\"id\"]}", J, "{}", 0},
    {"{\"properties\":{\"k\":{\"const\":\"<v>\"}},\"required\":[\"k\"]}", J, "{\"k\":\"\\u003cv>\"}", 2},
    {"{\"properties\":{\"k\":{\"const\":\"<v>\"}},\"required\":[\"k\"]}", J, "{\"k\":\"<v>\"}", 0},
    /* arrays */
    {"{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":1,\"maxItems\":3}", J, "[]", 0},
    {"{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":1,\"maxItems\":3}", J, "[1,2,3]", 2},
    {"{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":1,\"maxItems\":3}", J, "[1,2,3,4]", 0},
    {"{\"type\":\"array\",\"items\":{\"type\":\"integer\"}}", J, "[]", 2},
    {"{\"type\":\"array\",\"items\":{\"type\":\"integer\"}}", J, "[1,2,3,4,5,6]", 2},
    {"{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2}", J, "[1]", 0},
    {"{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2}", J, "[1,2,3]", 2},
    {"{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}", J, "[\"a\",1,true]", 2},
    {"{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"}],\"items\":false}", J, "[\"a\",1,true]", 0},
    {"{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"}],\"items\":false}", J, "[\"a\"]", 2},
    {"{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"}],\"items\":false}", J, "[1]", 0},
    /* enum, const */
    {"{\"enum\":[\"a\",1,null,[true],{\"k\":\"v\"}]}", J, "{\"k\":\"v\"}", 2},
    {"{\"enum\":[\"a\",1,null,[true],{\"k\":\"v\"}]}", J, "[true]", 2},
    {"{\"enum\":[\"a\",1,null,[true],{\"k\":\"v\"}]}", J, "\"b\"", 0},
    {"{\"type\":\"string\",\"enum\":[\"a\",1]}", J, "1", 0}, /* outside the type */
    {"{\"const\":\"q\\\"\\\\\"}", J, "\"q\\\"\\\\\"", 2},
    {"{\"enum\":[1.5,100]}", J, "1.5", 2},
    /* anyOf / oneOf / $ref / allOf */
    {"{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\",\"maxLength\":2}]}", J, "\"ab\"", 2},
    {"{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\",\"maxLength\":2}]}", J, "\"abc\"", 0},
    {"{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"boolean\"}]}", J, "true", 2},
    {"{\"$ref\":\"#/$defs/t\",\"$defs\":{\"t\":{\"type\":\"object\",\"properties\":{\"c\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/t\"}}},\"required\":[\"c\"]}}}", J, "{\"c\":[{\"c\":[]},{\"c\":[{\"c\":[]}]}]}", 2},
    {"{\"$ref\":\"#/definitions/a~1b\",\"definitions\":{\"a/b\":{\"type\":\"boolean\"}}}", J, "true", 2},
    {"{\"allOf\":[{\"type\":\"integer\"}]}", J, "7", 2},
    {"{\"type\":\"object\",\"properties\":{\"n\":{\"$ref\":\"#\"}}}", J, "{\"n\":{\"n\":{}}}", 2},
    /* string lengths (code points; an escape is one) */
    {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", J, "\"a\"", 0},
    {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", J, "\"ab\"", 2},
    {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", J, "\"\xc3\xa9\\n\xf0\x9f\x98\x80\"", 2},
    {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", J, "\"\\ud83d\\ude00\\n\"", 2},
    {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", J, "\"abcd\"", 0},
    {"{\"type\":\"string\",\"minLength\":3}", J, "\"abcdefgh\"", 2},
    {"{\"type\":\"string\",\"maxLength\":0}", J, "\"\"", 2},
    /* formats */
    {"{\"type\":\"string\",\"format\":\"date\"}", J, "\"2024-02-28\"", 2},
    {"{\"type\":\"string\",\"format\":\"date\"}", J, "\"2024-02-30\"", 0},
    {"{\"type\":\"string\",\"format\":\"date\"}", J, "\"2024-04-31\"", 0},
    {"{\"type\":\"string\",\"format\":\"date\"}", J, "\"2024-12-31\"", 2},
    {"{\"type\":\"string\",\"format\":\"date\"}", J, "\"2024-13-01\"", 0},
    {"{\"type\":\"string\",\"format\":\"time\"}", J, "\"23:59:59Z\"", 2},
    {"{\"type\":\"string\",\"format\":\"time\"}", J, "\"08:30:00.123+05:30\"", 2},
    {"{\"type\":\"string\",\"format\":\"time\"}", J, "\"24:00:00Z\"", 0},
    {"{\"type\":\"string\",\"format\":\"time\"}", J, "\"12:00:00\"", 0},
    {"{\"type\":\"string\",\"format\":\"date-time\"}", J, "\"2025-01-05T10:00:00-08:00\"", 2},
    {"{\"type\":\"string\",\"format\":\"uuid\"}", J, "\"123e4567-e89b-12d3-a456-426614174000\"", 2},
    {"{\"type\":\"string\",\"format\":\"uuid\"}", J, "\"123e4567e89b12d3a456426614174000\"", 0},
    /* integer ranges */
    {"{\"type\":\"integer\",\"minimum\":-5,\"maximum\":12}", J, "-5", 2},
    {"{\"type\":\"integer\",\"minimum\":-5,\"maximum\":12}", J, "-6", 0},
    {"{\"type\":\"integer\",\"minimum\":-5,\"maximum\":12}", J, "12", 2},
    {"{\"type\":\"integer\",\"minimum\":-5,\"maximum\":12}", J, "13", 0},
    {"{\"type\":\"integer\",\"minimum\":-5,\"maximum\":12}", J, "0", 2},
    {"{\"type\":\"integer\",\"minimum\":-5,\"maximum\":12}", J, "-0", 0},
    {"{\"type\":\"integer\",\"exclusiveMinimum\":0,\"exclusiveMaximum\":100}", J, "0", 0},
    {"{\"type\":\"integer\",\"exclusiveMinimum\":0,\"exclusiveMaximum\":100}", J, "99", 2},
    {"{\"type\":\"integer\",\"exclusiveMinimum\":0,\"exclusiveMaximum\":100}", J, "100", 0},
    {"{\"type\":\"integer\",\"minimum\":0.5}", J, "0", 0},
    {"{\"type\":\"integer\",\"minimum\":0.5}", J, "1", 2},
    {"{\"type\":\"integer\",\"minimum\":0,\"exclusiveMinimum\":true}", J, "0", 0},
    {"{\"type\":\"integer\",\"minimum\":1000,\"maximum\":20050}", J, "20049", 2},
    {"{\"type\":\"integer\",\"minimum\":1000,\"maximum\":20050}", J, "20051", 0},
    {"{\"type\":\"integer\",\"minimum\":1000,\"maximum\":20050}", J, "999", 1}, /* a prefix of 9990 */
    {"{\"type\":\"integer\",\"minimum\":1000,\"maximum\":20050}", J, "999,", 0},
    {"{\"type\":\"integer\",\"format\":\"int32\"}", J, "2147483647", 2},
    {"{\"type\":\"integer\",\"format\":\"int32\"}", J, "2147483648", 0},
    /* number ranges */
    {"{\"type\":\"number\",\"minimum\":0,\"maximum\":1}", J, "0.25", 2},
    {"{\"type\":\"number\",\"minimum\":0,\"maximum\":1}", J, "1.000", 2},
    {"{\"type\":\"number\",\"minimum\":0,\"maximum\":1}", J, "1.01", 0},
    {"{\"type\":\"number\",\"minimum\":0,\"maximum\":1}", J, "-0.1", 0},
    {"{\"type\":\"number\",\"minimum\":0,\"maximum\":1}", J, "1e0", 0},
    {"{\"type\":\"number\",\"exclusiveMinimum\":0}", J, "0", 1},
    {"{\"type\":\"number\",\"exclusiveMinimum\":0}", J, "0.000", 1},
    {"{\"type\":\"array\",\"items\":{\"type\":\"number\",\"exclusiveMinimum\":0}}", J, "[0.000]", 0},
    {"{\"type\":\"array\",\"items\":{\"type\":\"number\",\"exclusiveMinimum\":0}}", J, "[0]", 0},
    {"{\"type\":\"number\",\"exclusiveMinimum\":0}", J, "0.001", 2},
    {"{\"type\":\"number\",\"exclusiveMinimum\":0}", J, "12345.5", 2},
    {"{\"type\":\"number\",\"exclusiveMaximum\":0}", J, "-0.5", 2},
    {"{\"type\":\"number\",\"exclusiveMaximum\":0}", J, "0", 0},
    {"{\"type\":\"number\",\"exclusiveMaximum\":0}", J, "-0.0", 1},
    {"{\"type\":\"array\",\"items\":{\"type\":\"number\",\"exclusiveMaximum\":0}}", J, "[-0.0]", 0},
    {"{\"type\":\"number\",\"minimum\":-10,\"exclusiveMaximum\":-2}", J, "-10", 2},
    {"{\"type\":\"number\",\"minimum\":-10,\"exclusiveMaximum\":-2}", J, "-10.5", 0},
    {"{\"type\":\"number\",\"minimum\":-10,\"exclusiveMaximum\":-2}", J, "-2", 1},
    {"{\"type\":\"array\",\"items\":{\"type\":\"number\",\"minimum\":-10,\"exclusiveMaximum\":-2}}", J, "[-2]", 0},
    {"{\"type\":\"number\",\"minimum\":-10,\"exclusiveMaximum\":-2}", J, "-2.01", 2},
    {"{\"type\":\"number\",\"minimum\":-10,\"exclusiveMaximum\":-2}", J, "-3", 2},
    /* Gemma syntax */
    {"{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"},\"n\":{\"type\":\"integer\"}},\"required\":[\"path\"]}", G,
     "{path:" Q "a \"quoted\" \\ text\n" Q ",n:3}", 2},
    {"{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"},\"n\":{\"type\":\"integer\"}},\"required\":[\"path\"]}", G,
     "{\"path\":" Q "a" Q "}", 0},
    {"{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"}}}", G, "{path:" Q "a|>b" Q "}", 0},
    {"{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"}}}", G, "{path:" Q "a<tool_call|>" Q "}", 0},
    {"{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"}}}", G, "{path:" Q "<" Q "}", 2},
    {"{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"}}}", G, "{path:" Q "|" Q "}", 2},
    {"{\"type\":\"object\",\"properties\":{\"my key\":{\"type\":\"integer\"},\"a:b\":{\"type\":\"integer\"},\"x-y\":{\"type\":\"integer\"}}}", G,
     "{" Q "my key" Q ":1," Q "a:b" Q ":2,x-y:3}", 2},
    {"{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":2}}}", G, "{s:" Q Q "}", 0},
    {"{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":2}}}", G, "{s:" Q "<<" Q "}", 2},
    {"{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":2}}}", G, "{s:" Q "<<<" Q "}", 0},
    {"{\"type\":\"object\",\"properties\":{\"e\":{\"enum\":[\"a b\",{\"k\":[1]}]}}}", G, "{e:" Q "a b" Q "}", 2},
    {"{\"type\":\"object\",\"properties\":{\"e\":{\"enum\":[\"a b\",{\"k\":[1]}]}}}", G, "{e:{k:[1]}}", 2},
    {"{\"type\":\"object\",\"additionalProperties\":true}", G, "{a_b.c-1:[" Q "x" Q "]}", 2},
};

static void test_accept(void) {
    for (size_t i = 0; i < sizeof acases / sizeof *acases; i++) {
        const acase *c = &acases[i];
        gem_err err = {{0}};
        gram *g = schema_gram(c->schema, c->syntax, &err);
        CHECKF(g != NULL, "case %zu: %s", i, err.msg);
        if (!g) continue;
        int got = runs(g, c->text);
        CHECKF(got == c->want, "case %zu (%s) on '%s': got %d want %d", i, c->schema ? c->schema : "null", c->text, got, c->want);
        gram_free(g);
    }
}

/* ---- refusals ---- */

typedef struct {
    const char *schema;
    int syntax;
    const char *msg; /* the exact message */
} rcase;

static const rcase rcases[] = {
    {"{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\",\"pattern\":\"^a\"}}}", J,
     "schema.properties.path: \"pattern\" is not supported"},
    {"{\"type\":\"object\",\"patternProperties\":{\"^a\":{}}}", J, "schema: \"patternProperties\" is not supported"},
    {"{\"not\":{\"type\":\"string\"}}", J, "schema: \"not\" is not supported"},
    {"{\"if\":{},\"then\":{}}", J, "schema: \"if\" is not supported"},
    {"{\"type\":\"object\",\"minProperties\":1}", J, "schema: \"minProperties\" is not supported"},
    {"{\"type\":\"object\",\"dependentRequired\":{}}", J, "schema: \"dependentRequired\" is not supported"},
    {"{\"type\":\"number\",\"multipleOf\":2}", J, "schema: \"multipleOf\" is not supported"},
    {"{\"type\":\"array\",\"contains\":{}}", J, "schema: \"contains\" is not supported"},
    {"{\"type\":\"array\",\"uniqueItems\":true}", J, "schema: \"uniqueItems\" is not supported"},
    {"{\"type\":\"array\",\"items\":[{}]}", J, "schema: \"items\" as an array is not supported (use \"prefixItems\")"},
    {"{\"allOf\":[{\"type\":\"string\"},{\"maxLength\":3}]}", J,
     "schema: \"allOf\" is supported only with a single schema and nothing beside it"},
    {"{\"$ref\":\"https://example.com/s.json\"}", J,
     "schema: \"$ref\" \"https://example.com/s.json\" is not supported (only local #/$defs and #/definitions)"},
    {"{\"$ref\":\"#/$defs/missing\"}", J, "schema: \"$ref\" \"#/$defs/missing\" does not resolve"},
    {"{\"$ref\":\"#/$defs/a\",\"$defs\":{\"a\":{\"$ref\":\"#/$defs/a\"}}}", J,
     "schema: \"$ref\" \"#/$defs/a\" refers to itself"},
    {"{\"$ref\":\"#/$defs/a\",\"type\":\"string\"}", J, "schema: \"type\" together with \"$ref\" is not supported"},
    {"{\"type\":\"string\",\"format\":\"email\"}", J, "schema: \"format\" \"email\" is not supported"},
    {"{\"type\":\"number\",\"minimum\":0.5}", J, "schema: \"minimum\" of a number must be an integer to be enforced"},
    {"{\"type\":\"number\",\"exclusiveMaximum\":2.5}", J,
     "schema: \"exclusiveMaximum\" of a number must be an integer to be enforced"},
    {"{\"enum\":[]}", J, "schema: \"enum\" allows no value"},
    {"{\"type\":\"integer\",\"enum\":[\"a\"]}", J, "schema: \"enum\" allows no value of the given \"type\""},
    {"{\"type\":\"string\",\"enum\":[\"a\"],\"maxLength\":3}", J, "schema: \"maxLength\" together with \"enum\" is not supported"},
    {"{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", J, "schema: \"minItems\" is greater than \"maxItems\""},
    {"{\"type\":\"array\",\"prefixItems\":[{}],\"items\":false,\"minItems\":2}", J,
     "schema: \"minItems\" is greater than the number of \"prefixItems\""},
    {"{\"type\":\"string\",\"minLength\":3,\"maxLength\":2}", J, "schema: \"minLength\" is greater than \"maxLength\""},
    {"{\"type\":\"string\",\"maxLength\":5000}", J, "schema: \"maxLength\" above 1024 is not supported"},
    {"{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", J, "schema: no integer lies between \"minimum\" and \"maximum\""},
    {"{\"type\":\"number\",\"exclusiveMinimum\":3,\"maximum\":3}", J, "schema: no number lies between the bounds"},
    {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":[\"b\"],\"additionalProperties\":false}", J,
     "schema: required property \"b\" is not in \"properties\" and \"additionalProperties\" is false"},
    {"{\"type\":\"object\",\"properties\":{\"a\":false},\"required\":[\"a\"]}", J, "schema: required property \"a\" is declared false"},
    {"{\"type\":\"strin\"}", J, "schema: unknown \"type\" strin"},
    {"{\"type\":[]}", J, "schema: \"type\" is empty"},
    {"false", J, "schema: the schema false allows nothing"},
    {"{\"anyOf\":[]}", J, "schema: \"anyOf\" must be a non-empty array"},
    {"{\"anyOf\":[{\"type\":\"string\"}],\"type\":\"string\"}", J, "schema: \"type\" together with \"anyOf\" is not supported"},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"b\":{\"not\":{}}}}}}}", J,
     "schema.properties.a.items.properties.b: \"not\" is not supported"},
    {"{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"string\",\"pattern\":\"x\"}]}", J, "schema.anyOf[1]: \"pattern\" is not supported"},
    {"{\"type\":\"string\"}", G, "schema: Gemma tool arguments must be an object"},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"const\":\"x<|\\\"|>y\"}}}", G,
     "schema.properties.a: the string \"x<|\"|>y\" cannot be written in Gemma syntax"},
    {"{\"type\":\"object\",\"properties\":{\"a<|b\":{}}}", G, "schema: the key \"a<|b\" cannot be written in Gemma syntax"},
};

static void test_refusals(void) {
    for (size_t i = 0; i < sizeof rcases / sizeof *rcases; i++) {
        gem_err err = {{0}};
        gram *g = schema_gram(rcases[i].schema, rcases[i].syntax, &err);
        CHECKF(g == NULL, "case %zu (%s) compiled", i, rcases[i].schema);
        CHECKF(!strcmp(err.msg, rcases[i].msg), "case %zu: got '%s' want '%s'", i, err.msg, rcases[i].msg);
        gram_free(g);
    }
    /* tools */
    static const struct {
        const char *tools, *only, *msg;
    } tc[] = {
        {"[{\"type\":\"function\",\"function\":{\"name\":\"a b\"}}]", NULL,
         "tools[0]: function name \"a b\" has a character a Gemma call cannot hold"},
        {"[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":{\"x\":{\"pattern\":\"a\"}}}}}]", NULL,
         "tools[0].function.parameters.properties.x: \"pattern\" is not supported"},
        {"[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]", "g", "tools: no function named \"g\""},
        {"[{\"type\":\"retrieval\"}]", NULL, "tools[0]: not a function tool"},
        {"[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"string\"}}}]", NULL,
         "tools[0].function.parameters: must be an object schema"},
        {"[]", NULL, "tools: no function tools"},
    };
    for (size_t i = 0; i < sizeof tc / sizeof *tc; i++) {
        gem_err err = {{0}};
        json *t = json_parse(tc[i].tools, strlen(tc[i].tools), &err);
        gram *g = gram_tool_calls(t, tc[i].only, 0, &err);
        CHECKF(g == NULL, "tools case %zu compiled", i);
        CHECKF(!strcmp(err.msg, tc[i].msg), "tools case %zu: got '%s' want '%s'", i, err.msg, tc[i].msg);
        gram_free(g);
        json_free(t);
    }
}

/* ---- Gemma round trip ---- */

static void test_gemma_roundtrip(void) {
    static const struct {
        const char *schema, *text, *json;
    } rt[] = {
        {"{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"},\"n\":{\"type\":\"number\"},\"ok\":{\"type\":\"boolean\"}}}",
         "{path:" Q "a \"b\"\n\\c" Q ",n:-1.50e2,ok:true}", "{\"path\":\"a \\\"b\\\"\\n\\\\c\",\"n\":-150,\"ok\":true}"},
        {"{\"type\":\"object\",\"properties\":{\"my key\":{\"type\":\"array\",\"items\":{\"type\":[\"string\",\"null\"]}}}}",
         "{" Q "my key" Q ":[" Q "x" Q ",null]}", "{\"my key\":[\"x\",null]}"},
        {"{\"type\":\"object\",\"properties\":{\"o\":{\"type\":\"object\",\"properties\":{\"k\":{\"const\":{\"a b\":\"c\"}}}}}}",
         "{o:{k:{" Q "a b" Q ":" Q "c" Q "}}}", "{\"o\":{\"k\":{\"a b\":\"c\"}}}"},
        {NULL, "{}", "{}"},
    };
    for (size_t i = 0; i < sizeof rt / sizeof *rt; i++) {
        gem_err err = {{0}};
        gram *g = schema_gram(rt[i].schema, G, &err);
        CHECKF(g != NULL, "%s", err.msg);
        if (!g) continue;
        CHECKF(runs(g, rt[i].text) == 2, "round trip %zu: grammar rejects '%s'", i, rt[i].text);
        strbuf o = {0};
        CHECKF(chat_args_to_json(rt[i].text, strlen(rt[i].text), &o) == 0, "round trip %zu: parser rejects", i);
        CHECKF(o.len == strlen(rt[i].json) && !memcmp(o.p, rt[i].json, o.len), "round trip %zu: got %s", i, sb_cstr(&o));
        sb_free(&o);
        gram_free(g);
    }
}

/* ---- tool calls, reasoning ---- */

static const char *tools_json =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"w\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"location\":{\"type\":\"string\"},\"unit\":{\"type\":\"string\",\"enum\":[\"celsius\",\"fahrenheit\"]}},"
    "\"required\":[\"location\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"parameters\":{\"type\":\"object\",\"properties\":{}}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"ping\"}}]";

static void test_tool_calls(void) {
    gem_err err = {{0}};
    json *t = json_parse(tools_json, strlen(tools_json), &err);
    gram *g = gram_tool_calls(t, NULL, 0, &err);
    CHECKF(g != NULL, "%s", err.msg);
    const char *w = "<|tool_call>call:get_weather{location:" Q "Paris" Q ",unit:" Q "celsius" Q "}<tool_call|>";
    const char *tm = "<|tool_call>call:get_time{}<tool_call|>";
    const char *pg = "<|tool_call>call:ping{}<tool_call|>";
    char buf[1024];
    if (g) {
        CHECK(runs(g, w) == 2);
        CHECK(runs(g, tm) == 2);
        CHECK(runs(g, pg) == 2);
        CHECK(runs(g, "<|tool_call>call:ping{a:1}<tool_call|>") == 0);
        CHECK(runs(g, "<|tool_call>call:get_weather{unit:" Q "celsius" Q "}<tool_call|>") == 0);
        CHECK(runs(g, "<|tool_call>call:get_wether{}<tool_call|>") == 0);
        CHECK(runs(g, "") == 1);
        snprintf(buf, sizeof buf, "%s%s%s<|tool_response>", w, tm, w);
        CHECK(runs(g, buf) == 2);
        snprintf(buf, sizeof buf, "%s<|tool_response>x", w);
        CHECK(runs(g, buf) == 0);
        snprintf(buf, sizeof buf, "%s text", w);
        CHECK(runs(g, buf) == 0);
        /* what the grammar accepts, the chat parser reports as calls */
        snprintf(buf, sizeof buf, "%s%s", w, tm);
        gram_free(g);
    }
    g = gram_tool_calls(t, "get_time", 2, &err);
    CHECKF(g != NULL, "%s", err.msg);
    if (g) {
        CHECK(runs(g, w) == 0);
        snprintf(buf, sizeof buf, "%s%s", tm, tm);
        CHECK(runs(g, buf) == 2);
        snprintf(buf, sizeof buf, "%s%s%s", tm, tm, tm);
        CHECK(runs(g, buf) == 0);
        gram_state *s = gram_state_new(g);
        snprintf(buf, sizeof buf, "%s%s", tm, tm);
        gram_state_feed(s, buf, strlen(buf));
        CHECK(gram_state_done(s) && !gram_state_ended(s)); /* <|tool_response> may follow */
        gram_state_feed(s, "<|tool_response>", 16);
        CHECK(gram_state_ended(s));
        gram_state_free(s);
        gram_free(g);
    }
    /* reasoning prefix */
    gram *base = schema_gram("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]}", J, &err);
    gram *r = base ? gram_with_reasoning(base, &err) : NULL;
    CHECKF(r != NULL, "%s", err.msg);
    if (r) {
        CHECK(runs(r, "{\"a\":1}") == 2);
        CHECK(runs(r, "<|channel>thought\nLet me think: {\"a\":2} \xe2\x9c\x93<channel|>{\"a\":1}") == 2);
        CHECK(runs(r, "<|channel>x<channel|>") == 1);
        CHECK(runs(r, "<|channel>x<channel|><|channel>y<channel|>{\"a\":1}") == 0);
        CHECK(runs(base, "<|channel>x<channel|>{\"a\":1}") == 0);
        gram_free(r);
    }
    gram_free(base);
    json_free(t);
}

/* gram_state_complete: after every prefix of a sentence, the completion
 * fed back leaves the state done; its length is exact for fixed tails. */
static void test_complete(void) {
    static const struct {
        const char *schema;
        int syntax;
        const char *sentence;
    } cases[] = {
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"minLength\":3},\"b\":{\"type\":\"array\","
         "\"items\":{\"type\":\"integer\"},\"minItems\":2}},\"required\":[\"a\",\"b\"]}",
         GRAM_SYNTAX_JSON, "{\"a\":\"x\\u00e9\u00e9y\",\"b\":[12,-3]}"},
        {"{\"type\":\"object\",\"properties\":{\"t\":{\"type\":\"string\",\"format\":\"date-time\"},\"k\":"
         "{\"enum\":[\"alpha\",\"beta\"]}},\"required\":[\"t\",\"k\"]}",
         GRAM_SYNTAX_GEMMA, "{t:<|\"|>2026-12-06T10:00:00Z<|\"|>,k:<|\"|>beta<|\"|>}"},
        {NULL, GRAM_SYNTAX_JSON, "{\"q\":[{\"r\":null},true,1.5e3]}"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        gem_err err = {{0}};
        gram *g = schema_gram(cases[c].schema, cases[c].syntax, &err);
        CHECKF(g != NULL, "case %zu: %s", c, err.msg);
        if (!g) continue;
        const char *sen = cases[c].sentence;
        CHECKF(runs(g, sen), "case %zu: the sentence is not accepted", c);
        for (size_t i = 0; i <= strlen(sen); i++) {
            gram_state *st = gram_state_new(g);
            strbuf out = {0};
            int ok = st && gram_state_feed(st, sen, i) == 0 && gram_state_complete(st, &out) == 0 &&
                     gram_state_feed(st, out.p ? out.p : "", out.len) == 0 && gram_state_done(st);
            CHECKF(ok, "case %zu: prefix of %zu bytes completed by '%s' is not a sentence", c, i, sb_cstr(&out));
            if (i == strlen(sen)) CHECKF(out.len == 0, "case %zu: a complete sentence got '%s'", c, sb_cstr(&out));
            sb_free(&out);
            gram_state_free(st);
        }
        gram_free(g);
    }
    /* a fixed tail: exactly it */
    gem_err err = {{0}};
    gram *g = schema_gram("{\"const\":{\"x\":[1,2]}}", GRAM_SYNTAX_JSON, &err);
    gram_state *st = g ? gram_state_new(g) : NULL;
    strbuf out = {0};
    CHECK(st && gram_state_feed(st, "{\"x\":[1", 7) == 0 && gram_state_complete(st, &out) == 0);
    CHECKF(!strcmp(sb_cstr(&out), ",2]}"), "const tail: '%s'", sb_cstr(&out));
    sb_free(&out);
    gram_state_free(st);
    gram_free(g);
}

int main(void) {
    test_engine();
    test_accept();
    test_refusals();
    test_gemma_roundtrip();
    test_tool_calls();
    test_complete();
    return test_report("test_grammar");
}
