/* Token masks on the real Gemma 4 vocabulary: end-of-generation tokens
 * exactly when done, control tokens never; gram_mask equal to the
 * brute-force mask (every token's bytes fed to a copy of the state) on
 * random walks over many grammars; and random generation: from every
 * schema of tests/data/grammar/schemas.json, in both syntaxes and as tool
 * calls, walk the grammar choosing random allowed tokens until the end;
 * the text must parse (json_parse, chat_args_to_json, the chat parser) and
 * validate against its schema. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat.h"
#include "grammar/grammar.h"
#include "schema_check.h"
#include "test.h"
#include "tok/tok.h"
#include "util/clock.h"
#include "util/rng.h"

static const tok *T;
static gram_vocab *V;
static uint32_t NV;
static uint32_t *bits, *brute;
static uint8_t *is_closer; /* the piece closes something and opens nothing */
static int32_t *closers, *enders; /* enders: pieces of only '"', '}', ']' (at most 2), ":", <|"|> */
static uint32_t n_closers, n_enders;
static double mask_time, mask_max;
/* brute force feeds the whole vocabulary per state: under ASan fewer
 * states are compared (the masks are still computed at every step) */
#ifdef GEM_TEST_ASAN
static const int max_compared = 10;
#else
static const int max_compared = 1000;
#endif
static long mask_n;

static int bit(const uint32_t *b, int32_t id) { return (b[(uint32_t)id >> 5] >> ((uint32_t)id & 31)) & 1; }

static int timed_mask(const gram_state *s) {
    double t0 = gem_now_s();
    int n = gram_mask(s, V, bits);
    double dt = gem_now_s() - t0;
    mask_time += dt;
    mask_n++;
    if (dt > mask_max) mask_max = dt;
    return n;
}

/* every token's bytes fed to a copy of s: the definition gram_mask meets */
static void brute_mask(const gram_state *s, uint32_t *out) {
    memset(out, 0, (NV + 31) / 32 * sizeof *out);
    gram_state *c = gram_state_clone(s);
    for (uint32_t id = 0; id < NV; id++) {
        size_t len = 0;
        const char *p = tok_piece(T, (int32_t)id, 0, &len);
        int okb;
        if (tok_is_eog(T, (int32_t)id)) okb = gram_state_done(s);
        else if (!len) okb = 0;
        else {
            okb = gram_state_feed(c, p, len) == 0;
            if (okb) gram_state_copy(c, s);
        }
        if (okb) out[id >> 5] |= 1u << (id & 31);
    }
    gram_state_free(c);
}

static uint64_t rng_state = 12345;
static uint32_t rnd(uint32_t n) { return (uint32_t)(rng_splitmix64(&rng_state) % n); }

/* A random allowed token: with closing set, mostly one that closes
 * strings, objects, arrays (so walks end); -1 when none is allowed. */
static int32_t pick(int n_allowed, int closing) {
    if (n_allowed <= 0) return -1;
    if (closing && rnd(2)) {
        int32_t ok_ids[64];
        uint32_t k = 0;
        for (uint32_t i = 0; i < n_enders && k < 64; i++)
            if (bit(bits, enders[i])) ok_ids[k++] = enders[i];
        if (k) return ok_ids[rnd(k)];
    }
    if (closing && n_closers)
        for (int tries = 0; tries < 2000; tries++) {
            int32_t id = closers[rnd(n_closers)];
            if (bit(bits, id)) return id;
        }
    if (n_allowed > 20000)
        for (int tries = 0; tries < 2000; tries++) {
            int32_t id = (int32_t)rnd(NV);
            if (bit(bits, id)) return id;
        }
    uint32_t k = rnd((uint32_t)n_allowed);
    for (uint32_t w = 0; w < (NV + 31) / 32; w++) {
        uint32_t c = (uint32_t)__builtin_popcount(bits[w]);
        if (k >= c) {
            k -= c;
            continue;
        }
        for (uint32_t b = 0; b < 32; b++)
            if ((bits[w] >> b) & 1 && k-- == 0) return (int32_t)(w * 32 + b);
    }
    return -1;
}

/* Walks g with random tokens (at most max_steps); out gets the text.
 * Returns 1 when it ended (an end-of-generation token chosen), 0 when the
 * step bound ran out, -1 on a failure (a dead end, an allowed token the
 * state refused). When compare, masks are checked against brute force at
 * about every stride-th step. */
static int walk(const gram *g, int max_steps, strbuf *out, int compare, int stride, int *compared) {
    gram_state *s = gram_state_new(g);
    int rc = 0;
    for (int step = 0; step < max_steps; step++) {
        int n = timed_mask(s);
        if (compare && *compared < max_compared && (step % stride == 0 || gram_state_done(s))) {
            brute_mask(s, brute);
            int diff = 0;
            int32_t first = -1;
            for (uint32_t w = 0; w < (NV + 31) / 32; w++)
                if (bits[w] != brute[w]) {
                    diff++;
                    if (first < 0) first = (int32_t)(w * 32 + (uint32_t)__builtin_ctz(bits[w] ^ brute[w]));
                }
            size_t fl = 0;
            const char *fp = first >= 0 ? tok_piece(T, first, 0, &fl) : "";
            CHECKF(!diff, "mask differs from brute force after '%.*s': token %d '%.*s' mask %d brute %d", (int)out->len,
                   out->p ? out->p : "", first, (int)fl, fp, first >= 0 ? bit(bits, first) : 0,
                   first >= 0 ? bit(brute, first) : 0);
            (*compared)++;
        }
        if (n <= 0) {
            CHECKF(0, "dead end after '%.*s'", (int)out->len, out->p ? out->p : "");
            rc = -1;
            break;
        }
        int done = gram_state_done(s);
        CHECK(bit(bits, 1) == done && bit(bits, 106) == done);
        int32_t id;
        if (done && (gram_state_ended(s) || rnd(2) == 0)) id = 106;
        else id = pick(n, step > max_steps / 4 || rnd(3) == 0);
        if (id < 0) {
            rc = -1;
            break;
        }
        CHECK(gram_token_ok(s, V, id));
        if (gram_accept_token(s, V, id)) {
            CHECKF(0, "token %d allowed by the mask but refused", id);
            rc = -1;
            break;
        }
        if (tok_is_eog(T, id)) {
            rc = 1;
            break;
        }
        size_t len = 0;
        const char *p = tok_piece(T, id, 0, &len);
        sb_put(out, p, len);
    }
    gram_state_free(s);
    return rc;
}

static void test_eog_and_control(void) {
    gem_err err = {{0}};
    gram *g = gram_json_schema(NULL, GRAM_SYNTAX_JSON, &err);
    gram_state *s = gram_state_new(g);
    int n = gram_mask(s, V, bits);
    int32_t brace = tok_find(T, "{", 1);
    CHECKF(n >= 1 && n < 10 && bit(bits, brace), "%d tokens start an object", n);
    CHECK(!bit(bits, 1) && !bit(bits, 106) && !bit(bits, 50));
    CHECK(!gram_token_ok(s, V, 106) && gram_accept_token(s, V, 106) == -1);
    CHECK(gram_state_feed(s, "{}", 2) == 0);
    n = gram_mask(s, V, bits);
    CHECK(n == 3 && bit(bits, 1) && bit(bits, 106) && bit(bits, 50));
    CHECK(gram_token_ok(s, V, 1) && gram_accept_token(s, V, 106) == 0);
    CHECK(!gram_token_ok(s, V, 2) && !gram_token_ok(s, V, -1) && !gram_token_ok(s, V, (int32_t)NV));
    gram_state_free(s);
    gram_free(g);
    /* Gemma strings: the <|"|> token closes them; <|tool_call> never inside */
    json *sc = json_parse("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}}}", 57, &err);
    g = gram_json_schema(sc, GRAM_SYNTAX_GEMMA, &err);
    CHECKF(g != NULL, "%s", err.msg);
    if (g) {
        s = gram_state_new(g);
        gram_state_feed(s, "{a:<|\"|>text", 12);
        gram_mask(s, V, bits);
        int32_t q = tok_find(T, "<|\"|>", 5), call = tok_find(T, "<|tool_call>", 12);
        CHECK(q >= 0 && bit(bits, q) && call >= 0 && !bit(bits, call));
        CHECK(gram_accept_token(s, V, call) == -1 && gram_accept_token(s, V, q) == 0);
        gram_state_free(s);
        gram_free(g);
    }
    json_free(sc);
}

static json *load_schemas(void) {
    size_t n;
    char *p = test_slurp("tests/data/grammar/schemas.json", &n);
    CHECKF(p != NULL, "tests/data/grammar/schemas.json missing");
    gem_err err = {{0}};
    json *j = p ? json_parse(p, n, &err) : NULL;
    CHECKF(j && j->type == JSON_ARRAY, "schemas.json: %s", err.msg);
    free(p);
    return j;
}

static int valid_text(const json *schema, int syntax, const strbuf *text) {
    strbuf js = {0};
    const char *p = text->p ? text->p : "";
    size_t n = text->len;
    if (syntax == GRAM_SYNTAX_GEMMA) {
        if (chat_args_to_json(p, n, &js)) {
            fprintf(stderr, "chat_args_to_json refused: %.*s\n", (int)n, p);
            sb_free(&js);
            return 0;
        }
        p = js.p;
        n = js.len;
    }
    gem_err err = {{0}};
    json *v = json_parse(p, n, &err);
    int okv = v && sc_valid(schema, schema, v);
    if (!okv) fprintf(stderr, "%s: %.*s\n", v ? "invalid against the schema" : err.msg, (int)n, p);
    json_free(v);
    sb_free(&js);
    return okv;
}

/* masks vs brute force on walks over assorted grammars */
static void test_masks(const json *schemas) {
    gem_err err = {{0}};
#ifdef GEM_TEST_ASAN
    int walks = 1, stride = 40;
#else
    int walks = 1, stride = 12;
#endif
    const char *picks[] = {"read_file", "sql_query", "create_calendar_event", "kv_store", "number_ranges", "file_tree",
                           "http_request_headers", "string_lengths"};
    int compared = 0;
    double t_start = test_cpu_now();
    for (int k = -1; k < (int)(sizeof picks / sizeof *picks); k++) {
        const json *sc = NULL;
        if (k >= 0)
            for (size_t i = 0; i < schemas->len; i++)
                if (!strcmp(json_get_str(schemas->items[i], "name"), picks[k])) sc = json_get(schemas->items[i], "schema");
        for (int syn = 0; syn < 2; syn++) {
            gram *g = gram_json_schema(sc, syn, &err);
            CHECKF(g != NULL, "%s", err.msg);
            if (!g) continue;
            for (int w = 0; w < walks; w++) {
                strbuf out = {0};
                walk(g, 45, &out, 1, stride, &compared);
                sb_free(&out);
            }
            gram_free(g);
        }
    }
    /* deep states: the caches' depth margin runs out and the mask walks
     * the trie on the real state */
    gram *dg = gram_json_schema(NULL, GRAM_SYNTAX_JSON, &err);
    if (dg) {
        gram_state *s = gram_state_new(dg);
        gram_state_feed(s, "{\"a\":", 5);
        int depth = 0, checked = 0;
        while (gram_state_feed(s, "[", 1) == 0) {
            depth++;
            if ((depth == 40 || depth == 105 || depth == 120) && checked < 3 && compared < max_compared) {
                gram_mask(s, V, bits);
                brute_mask(s, brute);
                CHECKF(!memcmp(bits, brute, (NV + 31) / 32 * sizeof *bits), "deep mask at %d arrays differs", depth);
                checked++;
                compared++;
            }
        }
        CHECKF(depth > 60 && depth < GRAM_MAX_DEPTH, "arrays nest %d deep", depth);
        gram_state_free(s);
        gram_free(dg);
    }
    /* tool calls with a reasoning prefix */
    json *tools = json_new(JSON_ARRAY);
    for (size_t i = 0; i < 6 && i < schemas->len; i++) {
        strbuf t = {0};
        sb_printf(&t, "{\"type\":\"function\",\"function\":{\"name\":\"%s\",\"parameters\":", json_get_str(schemas->items[i], "name"));
        json_dump(json_get(schemas->items[i], "schema"), &t);
        sb_puts(&t, "}}");
        json_push(tools, json_parse(t.p, t.len, NULL));
        sb_free(&t);
    }
    gram *tg = gram_tool_calls(tools, NULL, 0, &err);
    gram *rg = tg ? gram_with_reasoning(tg, &err) : NULL;
    CHECKF(rg != NULL, "%s", err.msg);
    if (rg) {
        strbuf out = {0};
        walk(rg, 60, &out, 1, stride, &compared);
        sb_free(&out);
    }
    gram_free(rg);
    gram_free(tg);
    json_free(tools);
    printf("masks equal to brute force on %d states (%.1f s)\n", compared, test_cpu_now() - t_start);
}

typedef struct {
    const json *tools;
    int calls, bad, content;
} call_check;

static void on_event(const chat_event *ev, void *ctx) {
    call_check *c = ctx;
    if (ev->kind != CHAT_EV_TOOL_CALL) {
        c->content += ev->len > 0;
        return;
    }
    c->calls++;
    const json *params = NULL;
    int found = 0;
    for (size_t i = 0; i < c->tools->len; i++) {
        const json *fn = json_get(c->tools->items[i], "function");
        if (!strcmp(json_get_str(fn, "name"), ev->name)) {
            params = json_get(fn, "parameters");
            found = 1;
        }
    }
    json *v = json_parse(ev->arguments, strlen(ev->arguments), NULL);
    if (!found || !v || (params && !sc_valid(params, params, v))) {
        fprintf(stderr, "bad call %s(%s)\n", ev->name, ev->arguments);
        c->bad++;
    }
    json_free(v);
}

static void test_generation(const json *schemas) {
    gem_err err = {{0}};
    int total = 0, ended = 0, valid = 0;
    double t_start = test_cpu_now();
#ifdef GEM_TEST_ASAN
    int per = 1, steps = 120;
    size_t stride = 4;
#else
    int per = 3, steps = 400;
    size_t stride = 1;
#endif
    for (size_t i = 0; i < schemas->len; i += stride) {
        const json *sc = json_get(schemas->items[i], "schema");
        const char *name = json_get_str(schemas->items[i], "name");
        for (int syn = 0; syn < 2; syn++) {
            gram *g = gram_json_schema(sc, syn, &err);
            CHECKF(g != NULL, "%s (%s): %s", name, syn ? "gemma" : "json", err.msg);
            if (!g) continue;
            for (int w = 0; w < per; w++) {
                strbuf out = {0};
                int rc = walk(g, steps, &out, 0, 0, NULL);
                /* GRAM_DEBUG=1: show the walks that ran out of steps */
                if (rc != 1 && getenv("GRAM_DEBUG")) fprintf(stderr, "NOT ENDED %s/%d: %.400s\n...%s\n", name, syn, out.p, out.len > 400 ? out.p + out.len - 200 : "");
                total++;
                if (rc == 1) {
                    ended++;
                    int okv = valid_text(sc, syn, &out);
                    valid += okv;
                    CHECKF(okv, "%s (%s): generated text does not validate", name, syn ? "gemma" : "json");
                }
                sb_free(&out);
            }
            gram_free(g);
        }
    }
    /* tool calls: every schema a function; up to 2 calls per answer */
    json *tools = json_new(JSON_ARRAY);
    for (size_t i = 0; i < schemas->len; i++) {
        strbuf t = {0};
        sb_printf(&t, "{\"type\":\"function\",\"function\":{\"name\":\"%s\",\"parameters\":", json_get_str(schemas->items[i], "name"));
        json_dump(json_get(schemas->items[i], "schema"), &t);
        sb_puts(&t, "}}");
        json_push(tools, json_parse(t.p, t.len, NULL));
        sb_free(&t);
    }
    gram *g = gram_tool_calls(tools, NULL, 2, &err);
    CHECKF(g != NULL, "%s", err.msg);
    int calls_total = 0;
    for (int w = 0; g && w < per * 8; w++) {
        strbuf out = {0};
        int rc = walk(g, steps, &out, 0, 0, NULL);
        total++;
        if (rc == 1) {
            ended++;
            call_check cc = {tools, 0, 0, 0};
            chat_parser *p = chat_parser_new(on_event, &cc);
            chat_parser_max_calls(p, 2);
            chat_parser_feed(p, out.p ? out.p : "", out.len);
            chat_parser_finish(p);
            chat_parser_free(p);
            CHECKF(cc.calls >= 1 && cc.calls <= 2 && !cc.bad && !cc.content, "tool calls: %d calls, %d bad, %d content: %.300s",
                   cc.calls, cc.bad, cc.content, out.p ? out.p : "");
            valid += cc.calls >= 1 && !cc.bad && !cc.content;
            calls_total += cc.calls;
        }
        sb_free(&out);
    }
    gram_free(g);
    json_free(tools);
    printf("generation (%.1f s): %d walks, %d ended, %d valid (%d tool calls)\n", test_cpu_now() - t_start, total, ended, valid, calls_total);
    /* the walks prefer closing tokens once a quarter of the budget is
     * spent, so nearly all of them end */
    CHECKF(ended * 10 >= total * 8, "only %d of %d walks ended", ended, total);
}

int main(int argc, char **argv) {
    const char *vocab = argc > 1 ? argv[1] : "data/vocab/gemma-4.gguf";
    gem_err err = {{0}};
    gguf_file *f = gguf_open(vocab, &err);
    tok *t = f ? tok_load(f, &err) : NULL;
    CHECKF(t != NULL, "%s", err.msg);
    if (!t) return test_report("test_grammar_mask");
    T = t;
    double t0 = gem_now_s();
    V = gram_vocab_new(t, &err);
    CHECKF(V != NULL, "%s", err.msg);
    if (!V) return test_report("test_grammar_mask");
    printf("vocabulary: %.2f s\n", gem_now_s() - t0);
    NV = gram_vocab_size(V);
    bits = malloc((NV + 31) / 32 * sizeof *bits);
    brute = malloc((NV + 31) / 32 * sizeof *brute);
    is_closer = calloc(NV, 1);
    closers = malloc(NV * sizeof *closers);
    enders = malloc(NV * sizeof *enders);
    for (uint32_t id = 0; id < NV; id++) {
        size_t len = 0;
        const char *p = tok_piece(t, (int32_t)id, 0, &len);
        int c = 0, o = 0;
        for (size_t k = 0; k < len; k++) {
            c |= p[k] == '"' || p[k] == '}' || p[k] == ']' || p[k] == '>';
            o |= p[k] == '{' || p[k] == '[';
        }
        if (c && !o) closers[n_closers++] = (int32_t)id;
        int e = len && len <= 2;
        for (size_t k = 0; k < len; k++) e &= p[k] == '"' || p[k] == '}' || p[k] == ']' || (len == 1 && p[k] == ':');
        if (e || (len == 5 && !memcmp(p, "<|\"|>", 5))) enders[n_enders++] = (int32_t)id;
    }
    test_eog_and_control();
    json *schemas = load_schemas();
    if (schemas) {
        CHECK(schemas->len >= 50);
        test_masks(schemas);
        test_generation(schemas);
    }
    printf("gram_mask: %ld masks, mean %.3f ms, max %.1f ms (cold builds included)\n", mask_n, mask_n ? mask_time / mask_n * 1e3 : 0,
           mask_max * 1e3);
    json_free(schemas);
    free(bits);
    free(brute);
    free(is_closer);
    free(closers);
    free(enders);
    gram_vocab_free(V);
    tok_free(t);
    gguf_close(f);
    return test_report("test_grammar_mask");
}
