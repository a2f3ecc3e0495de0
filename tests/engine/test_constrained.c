/* Grammar-constrained generation in the engine (gem_gen_params.grammar):
 *  - every answer of a random tiny model under a schema parses as JSON and
 *    follows the schema, greedy and sampled, and ends with STOP;
 *  - a greedy answer is, token by token, the argmax of the logits over the
 *    tokens the grammar allows (a by-hand loop with its own matcher and
 *    full masks), so the check-first shortcut changes nothing;
 *  - a sampled answer is fixed by its seed;
 *  - an answer the grammar closes ends at once (no end token drawn);
 *  - an answer about to reach its length limit closes what it opened;
 *  - a forced token the grammar refuses is an error that says so. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "grammar/grammar.h"
#include "model/gemma4.h"
#include "synth_tiny.h"
#include "test.h"
#include "util/json.h"
#include "util/strbuf.h"

#define V GEMMA4_N_VOCAB

typedef struct {
    int32_t ids[1024];
    int n_ids, n_end;
    strbuf text;
} seen;

static void on_token(void *ctx, const gem_gen_token *t) {
    seen *w = ctx;
    if (t->end) w->n_end++;
    else if (w->n_ids < 1024) w->ids[w->n_ids++] = t->id;
}

static int on_text(void *ctx, const char *p, size_t n) {
    sb_put(&((seen *)ctx)->text, p, n);
    return 0;
}

static gem_gen_callbacks callbacks(seen *w) {
    w->n_ids = w->n_end = 0;
    w->text.len = 0;
    gem_gen_callbacks cb = {w, on_token, on_text, NULL, NULL};
    return cb;
}

static const char *const SCHEMA =
    "{\"type\":\"object\",\"properties\":{"
    "\"n\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":99},"
    "\"kind\":{\"enum\":[\"red\",\"green\",\"blue\"]},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"boolean\"},\"maxItems\":3},"
    "\"note\":{\"type\":\"string\",\"maxLength\":12}},"
    "\"required\":[\"n\",\"kind\"],\"additionalProperties\":false}";

/* The answer follows SCHEMA (checked by hand: an independent reading). */
static int follows_schema(const char *text, size_t len, char *why, size_t cap) {
    gem_err err = {{0}};
    json *v = json_parse(text, len, &err);
    int ok = 0;
    if (!v) snprintf(why, cap, "not JSON: %s", err.msg);
    else if (v->type != JSON_OBJECT) snprintf(why, cap, "not an object");
    else {
        const json *n = json_get(v, "n"), *k = json_get(v, "kind"), *t = json_get(v, "tags"), *no = json_get(v, "note");
        ok = 1;
        for (size_t i = 0; i < v->len && ok; i++)
            if (strcmp(v->keys[i], "n") && strcmp(v->keys[i], "kind") && strcmp(v->keys[i], "tags") &&
                strcmp(v->keys[i], "note"))
                ok = 0, snprintf(why, cap, "extra key %s", v->keys[i]);
        if (ok && !(n && n->type == JSON_NUMBER && n->is_int && n->num >= 0 && n->num <= 99))
            ok = 0, snprintf(why, cap, "bad n");
        if (ok && !(k && k->type == JSON_STRING &&
                    (!strcmp(k->str, "red") || !strcmp(k->str, "green") || !strcmp(k->str, "blue"))))
            ok = 0, snprintf(why, cap, "bad kind");
        if (ok && t) {
            if (t->type != JSON_ARRAY || t->len > 3) ok = 0, snprintf(why, cap, "bad tags");
            for (size_t i = 0; ok && i < t->len; i++)
                if (t->items[i]->type != JSON_BOOL) ok = 0, snprintf(why, cap, "bad tag");
        }
        if (ok && no && no->type != JSON_STRING) ok = 0, snprintf(why, cap, "bad note");
        /* maxLength counts characters (code points) */
        if (ok && no) {
            size_t cps = 0;
            for (size_t i = 0; i < no->len; i++) cps += ((unsigned char)no->str[i] & 0xC0) != 0x80;
            if (cps > 12) ok = 0, snprintf(why, cap, "note of %zu characters", cps);
        }
    }
    json_free(v);
    return ok;
}

static int argmax_allowed(const float *l, const uint32_t *bits) {
    int b = -1;
    for (int i = 0; i < (int)V; i++)
        if (bits[i / 32] >> (i % 32) & 1 && (b < 0 || l[i] > l[b])) b = i;
    return b;
}

int main(void) {
    char path[] = "/tmp/gem-con-XXXXXX";
    if (test_tmp_file(path)) return 1;
    gem_err err = {{0}};
    CHECKF(!test_synth_tiny(path, 7, 0, &err), "%s", err.msg);
    gem_engine_opts eo = {0};
    eo.backend = getenv("GEM_TEST_BACKEND") && *getenv("GEM_TEST_BACKEND") ? getenv("GEM_TEST_BACKEND") : "cpu";
    eo.model_path = path;
    eo.n_ctx = 1024;
    gem_engine *e = gem_engine_open(&eo, &err);
    CHECKF(e != NULL, "%s", err.msg);
    if (!e) return test_report("test_constrained");
    gem_session *s = gem_session_new(e, &err);
    const tok *tk = gem_engine_tok(e);
    json *sj = json_parse(SCHEMA, strlen(SCHEMA), &err);
    gram *g = sj ? gram_json_schema(sj, GRAM_SYNTAX_JSON, &err) : NULL;
    CHECKF(g != NULL, "schema: %s", err.msg);
    if (!g || !s) return test_report("test_constrained");

    int32_t prompt[24];
    for (int i = 0; i < 24; i++) prompt[i] = (int32_t)((i * 7919 + 13) % 200000) + 1000;
    prompt[0] = tok_bos(tk);
    seen w = {0};
    gem_gen_params gp = gem_gen_params_default();
    gp.grammar = g;
    gp.max_tokens = 600;
    gem_gen_result r;
    char why[160];

    /* greedy: valid, and the masked argmax at every step */
    gem_gen_callbacks cb = callbacks(&w);
    CHECKF(gem_session_sync(s, prompt, 24, &err) >= 0 && !gem_session_generate(s, &gp, &cb, &r, &err), "%s", err.msg);
    CHECKF(r.finish == GEM_FINISH_STOP, "greedy constrained answer finished %d after %ld tokens", r.finish,
           r.n_generated);
    CHECKF(follows_schema(w.text.p, w.text.len, why, sizeof why), "greedy answer '%.*s': %s", (int)w.text.len,
           w.text.p, why);
    {
        gram_vocab *gv = gram_vocab_new(tk, &err);
        gram_state *st = gram_state_new(g);
        uint32_t *bits = malloc((V + 31) / 32 * sizeof *bits);
        gem_session *h = s; /* an engine runs one session: the same one, emptied */
        gem_session_reset(h);
        CHECK(gv && st && bits);
        if (gv && st && bits) {
            CHECK(!gem_session_eval(h, prompt, 24, &err));
            int same = 1, i;
            for (i = 0; i < w.n_ids && same; i++) {
                CHECK(gram_mask(st, gv, bits) > 0);
                const int want = argmax_allowed(gem_session_logits(h), bits);
                same = want == w.ids[i];
                CHECKF(same, "step %d: the engine chose %d, the masked argmax is %d", i, w.ids[i], want);
                CHECK(!gram_accept_token(st, gv, want));
                if (i + 1 < w.n_ids) CHECK(!gem_session_eval(h, &w.ids[i], 1, &err));
            }
            CHECKF(gram_state_ended(st), "the by-hand matcher can go on after the engine's %d tokens", w.n_ids);
            CHECKF(w.n_end == 0, "an answer the grammar closed drew %d end tokens", w.n_end);
        }
        free(bits);
        gram_state_free(st);
        gram_vocab_free(gv);
    }
    printf("test_constrained: greedy answer (%d tokens): %.*s\n", w.n_ids, (int)w.text.len, w.text.p);

    /* sampled: valid for every seed, and fixed by it */
    gp.sampling.temp = 1.0f;
    gp.sampling.top_k = 0;
    gp.sampling.top_p = 1.0f;
    int valid = 0;
    for (int seed = 1; seed <= 12; seed++) {
        gp.sampling.seed = (uint64_t)seed;
        cb = callbacks(&w);
        CHECKF(gem_session_sync(s, prompt, 24, &err) >= 0 && !gem_session_generate(s, &gp, &cb, &r, &err), "%s",
               err.msg);
        const int ok = r.finish == GEM_FINISH_STOP && follows_schema(w.text.p, w.text.len, why, sizeof why);
        CHECKF(ok, "seed %d: answer '%.*s' (finish %d): %s", seed, (int)w.text.len, w.text.p, r.finish, why);
        valid += ok;
        if (seed == 3) {
            strbuf first = {0};
            sb_put(&first, w.text.p, w.text.len);
            cb = callbacks(&w);
            CHECK(gem_session_sync(s, prompt, 24, &err) >= 0 && !gem_session_generate(s, &gp, &cb, &r, &err));
            CHECKF(w.text.len == first.len && !memcmp(w.text.p, first.p, first.len),
                   "the same seed gave another answer: '%s' then '%.*s'", sb_cstr(&first), (int)w.text.len,
                   w.text.p);
            sb_free(&first);
        }
    }
    printf("test_constrained: %d of 12 sampled answers follow the schema\n", valid);

    /* a length limit the random answers would overrun: they close in time
     * (the grammar's shortest completion once it needs every token left) */
    gp.max_tokens = 24;
    for (int seed = 1; seed <= 6; seed++) {
        gp.sampling.seed = (uint64_t)(100 + seed);
        cb = callbacks(&w);
        CHECK(gem_session_sync(s, prompt, 24, &err) >= 0 && !gem_session_generate(s, &gp, &cb, &r, &err));
        CHECKF(r.n_generated <= 24 && follows_schema(w.text.p, w.text.len, why, sizeof why),
               "seed %d, 24 tokens at most: answer '%.*s' (%ld tokens): %s", seed, (int)w.text.len, w.text.p,
               r.n_generated, why);
    }

    /* a forced token the grammar refuses: "x" cannot begin an object */
    gp = gem_gen_params_default();
    gp.grammar = g;
    gp.max_tokens = 5;
    const int32_t x = tok_find(tk, "x", 1);
    CHECK(x >= 0);
    gp.force = &x;
    gp.n_force = 1;
    cb = callbacks(&w);
    CHECK(gem_session_sync(s, prompt, 24, &err) >= 0);
    CHECK(gem_session_generate(s, &gp, &cb, &r, &err) == -1 && r.finish == GEM_FINISH_ERROR);
    CHECKF(strstr(err.msg, "not allowed by the output grammar") != NULL, "message: %s", err.msg);

    /* a grammar with one sentence: exactly it, and no end token */
    json *cj = json_parse("{\"const\":\"ok\"}", 14, &err);
    gram *one = gram_json_schema(cj, GRAM_SYNTAX_JSON, &err);
    CHECKF(one != NULL, "%s", err.msg);
    if (one) {
        gp = gem_gen_params_default();
        gp.grammar = one;
        gp.max_tokens = 50;
        cb = callbacks(&w);
        CHECK(gem_session_sync(s, prompt, 24, &err) >= 0 && !gem_session_generate(s, &gp, &cb, &r, &err));
        CHECKF(r.finish == GEM_FINISH_STOP && w.n_end == 0 && w.text.len == 4 && !memcmp(w.text.p, "\"ok\"", 4),
               "const answer '%.*s', finish %d, %d end tokens", (int)w.text.len, w.text.p, r.finish, w.n_end);
    }
    gram_free(one);
    json_free(cj);

    sb_free(&w.text);
    gram_free(g);
    json_free(sj);
    gem_session_free(s);
    gem_engine_close(e);
    unlink(path);
    return test_report("test_constrained");
}
