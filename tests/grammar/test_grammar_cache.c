/* The grammar vocabulary's mask cache under its cap (grammar.h,
 * gram_vocab_set_cache_cap): a stream of distinct schemas, as a server
 * sees them, walked with random allowed tokens. After every mask the
 * capped vocabulary holds at most its cap, and its masks equal those of an
 * uncapped vocabulary computing the same states fresh (and, on a sample,
 * the brute-force definition: each token's bytes fed to the state), so an
 * evicted entry comes back identical. The uncapped one's final size shows
 * the cap mattered; the eviction count that it was used. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "test.h"
#include "tok/tok.h"
#include "util/clock.h"
#include "util/rng.h"

#define CAP ((size_t)3 << 20)

#ifdef GEM_TEST_ASAN
static const int n_schemas = 10, n_brute = 2;
#else
static const int n_schemas = 48, n_brute = 6;
#endif

static const tok *T;
static uint32_t NV;
static uint64_t rng_state = 7;

static uint32_t rnd(uint32_t n) { return (uint32_t)(rng_splitmix64(&rng_state) % n); }

/* The index-th set bit of bits (n_set of them), or -1. */
static int32_t nth_set(const uint32_t *bits, uint32_t k) {
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

/* Each token's bytes fed to a copy of s: the definition of the mask. */
static void brute_mask(const gram_state *s, uint32_t *out) {
    memset(out, 0, (NV + 31) / 32 * sizeof *out);
    gram_state *c = gram_state_clone(s);
    for (uint32_t id = 0; id < NV; id++) {
        size_t len = 0;
        const char *p = tok_piece(T, (int32_t)id, 0, &len);
        int ok;
        if (tok_is_eog(T, (int32_t)id)) ok = gram_state_done(s);
        else if (!len) ok = 0;
        else {
            ok = gram_state_feed(c, p, len) == 0;
            if (ok) gram_state_copy(c, s);
        }
        if (ok) out[id >> 5] |= 1u << (id & 31);
    }
    gram_state_free(c);
}

/* Schema i: property names, enum values and bounds of its own, so its
 * groups' canonical keys are new to the cache (what distinct client
 * schemas are to a server). */
static gram *schema_gram(int i, gem_err *err) {
    char text[1024];
    snprintf(text, sizeof text,
             "{\"type\":\"object\",\"properties\":{"
             "\"field_%d_name\":{\"type\":\"string\",\"enum\":[\"alpha%d\",\"beta%d\",\"gamma%d\"]},"
             "\"count_%d\":{\"type\":\"integer\",\"minimum\":%d,\"maximum\":%d},"
             "\"flags%d\":{\"type\":\"array\",\"items\":{\"type\":\"boolean\"},\"maxItems\":%d},"
             "\"note%d\":{\"type\":\"string\",\"maxLength\":%d}},"
             "\"required\":[\"field_%d_name\",\"count_%d\"],\"additionalProperties\":false}",
             i, i, i, i, i, i, 1000 + i * 7, i, 2 + i % 3, i, 8 + i % 5, i, i);
    json *s = json_parse(text, strlen(text), err);
    gram *g = s ? gram_json_schema(s, GRAM_SYNTAX_JSON, err) : NULL;
    json_free(s);
    return g;
}

int main(int argc, char **argv) {
    const char *vocab = argc > 1 ? argv[1] : "data/vocab/gemma-4.gguf";
    gem_err err = {{0}};
    gguf_file *f = gguf_open(vocab, &err);
    tok *t = f ? tok_load(f, &err) : NULL;
    CHECKF(t != NULL, "%s", err.msg);
    if (!t) return test_report("test_grammar_cache");
    T = t;
    gram_vocab *capped = gram_vocab_new(t, &err), *fresh = capped ? gram_vocab_new(t, &err) : NULL;
    CHECKF(fresh != NULL, "%s", err.msg);
    if (!fresh) return test_report("test_grammar_cache");
    CHECK(gram_vocab_cache_info(capped).cap == GRAM_VOCAB_CACHE_DEFAULT);
    gram_vocab_set_cache_cap(capped, CAP);
    NV = gram_vocab_size(capped);
    const size_t words = (NV + 31) / 32;
    uint32_t *a = malloc(words * sizeof *a), *b = malloc(words * sizeof *b), *c = malloc(words * sizeof *c);
    size_t peak = 0;
    long masks = 0, over = 0, differ = 0;
    int bruted = 0;
    const double t0 = gem_now_s();
    for (int i = 0; i < n_schemas; i++) {
        gram *g = schema_gram(i, &err);
        CHECKF(g != NULL, "schema %d: %s", i, err.msg);
        if (!g) continue;
        gram_state *s = gram_state_new(g);
        for (int step = 0; step < 40; step++) {
            const int na = gram_mask(s, capped, a), nb = gram_mask(s, fresh, b);
            masks++;
            const gram_vocab_cache ci = gram_vocab_cache_info(capped);
            if (ci.bytes > peak) peak = ci.bytes;
            if (ci.bytes > CAP && !over++) CHECKF(0, "schema %d step %d: the cache holds %zu bytes, over its cap %zu", i, step, ci.bytes, CAP);
            if ((na != nb || memcmp(a, b, words * sizeof *a)) && !differ++)
                CHECKF(0, "schema %d step %d: the capped vocabulary's mask (%d tokens) differs from a fresh one's (%d)", i,
                       step, na, nb);
            if (bruted < n_brute && step == 3 + i % 5 && i % (n_schemas / n_brute) == 0) {
                brute_mask(s, c);
                CHECKF(!memcmp(a, c, words * sizeof *a), "schema %d step %d: the mask differs from brute force", i, step);
                bruted++;
            }
            if (na <= 0) {
                CHECKF(0, "schema %d step %d: a dead end", i, step);
                break;
            }
            if (gram_state_done(s)) break;
            /* mostly the tokens that move on (short ones), so walks reach
             * the later properties' groups */
            int32_t id = nth_set(a, rnd((uint32_t)na));
            for (int tries = 0; tries < 8; tries++) {
                size_t len = 0;
                tok_piece(T, id, 0, &len);
                if (len <= 3) break;
                id = nth_set(a, rnd((uint32_t)na));
            }
            if (tok_is_eog(T, id)) break;
            if (gram_accept_token(s, capped, id)) {
                CHECKF(0, "schema %d: token %d allowed by the mask but refused", i, id);
                break;
            }
        }
        gram_state_free(s);
        gram_free(g);
    }
    CHECK(over == 0);
    CHECK(differ == 0);
    CHECKF(bruted == n_brute, "%d brute-force comparisons of %d", bruted, n_brute);
    const gram_vocab_cache ci = gram_vocab_cache_info(capped), cf = gram_vocab_cache_info(fresh);
    printf("%ld masks in %.1f s; capped: %zu bytes now, %zu at most, %zu entries, %llu evicted; uncapped: %zu bytes, "
           "%zu entries\n",
           masks, gem_now_s() - t0, ci.bytes, peak, ci.entries, (unsigned long long)ci.evicted, cf.bytes, cf.entries);
    /* the schemas' entries would have needed well over the cap, and the
     * capped cache evicted to stay within it */
    CHECKF(cf.bytes > 2 * CAP, "the uncapped cache holds only %zu bytes: the cap was never tested", cf.bytes);
    CHECKF(ci.evicted > 0 && cf.evicted == 0, "evicted: capped %llu, uncapped %llu", (unsigned long long)ci.evicted,
           (unsigned long long)cf.evicted);
    /* a new cap empties the cache */
    gram_vocab_set_cache_cap(capped, CAP / 2);
    const gram_vocab_cache ce = gram_vocab_cache_info(capped);
    CHECKF(ce.bytes == 0 && ce.entries == 0 && ce.cap == CAP / 2, "after a new cap: %zu bytes, %zu entries", ce.bytes,
           ce.entries);
    free(a);
    free(b);
    free(c);
    gram_vocab_free(capped);
    gram_vocab_free(fresh);
    tok_free(t);
    gguf_close(f);
    return test_report("test_grammar_cache");
}
