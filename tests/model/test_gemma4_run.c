/* The Gemma 4 forward pass on the tiny profile: prefill in tiles equals
 * token-by-token decode (the sliding ring wraps: 3x the window), the scalar
 * reference path equals the threaded path, checkpoints restore exactly, the
 * context limit is enforced, and sampling is deterministic per seed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "model/gemma4.h"
#include "quant/quant.h"
#include "synth_tiny.h"
#include "test.h"

#define V GEMMA4_N_VOCAB
#define N 100 /* > 3 x the tiny window of 32 */

static double max_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > m || d != d) m = d != d ? INFINITY : d;
    }
    return m;
}

typedef struct {
    float v;
    int32_t i;
} vi;

static int vi_desc(const void *a, const void *b) {
    const vi *x = a, *y = b;
    if (x->v != y->v) return x->v > y->v ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

/* The k largest of l by full sort: the order top-k must give. */
static void top_by_sort(const float *l, int k, float *vals, int32_t *ids) {
    vi *c = malloc(sizeof *c * V);
    for (int i = 0; i < (int)V; i++) c[i] = (vi){l[i], i};
    qsort(c, V, sizeof *c, vi_desc);
    for (int i = 0; i < k; i++) vals[i] = c[i].v, ids[i] = c[i].i;
    free(c);
}

static int argmax(const float *l) {
    int b = 0;
    for (int i = 1; i < (int)V; i++)
        if (l[i] > l[b]) b = i;
    return b;
}

int main(void) {
    char path[] = "/tmp/gem-run-XXXXXX";
    if (test_tmp_file(path)) return 1;
    gem_err err = {{0}};
    CHECKF(!test_synth_tiny(path, 42, 0, &err), "%s", err.msg);

    int32_t ids[N];
    for (int i = 0; i < N; i++) ids[i] = (int32_t)((i * 7919 + 13) % 262000) + 100;
    ids[0] = 2;

    /* prefill in tiles of 16, all logits */
    gem_engine_opts eo = {0};
    eo.model_path = path;
    eo.n_ctx = 256;
    eo.tile = 16;
    gem_engine *e = gem_engine_open(&eo, &err);
    CHECKF(e != NULL, "%s", err.msg);
    if (!e) return test_report("test_gemma4_run");
    float *all = malloc((size_t)N * V * sizeof(float));
    gem_session *s = gem_session_new(e, &err);
    CHECK(s && !gem_session_eval_all(s, ids, N, all, &err));
    gem_session *s2 = gem_session_new(e, &err); /* sessions share the engine (tests/engine/test_parallel.c) */
    CHECKF(s2 != NULL, "%s", err.msg);
    gem_session_free(s2);

    /* token by token, comparing every position */
    gem_session_reset(s);
    double worst = 0;
    int argmax_same = 1;
    gem_checkpoint *cp = NULL;
    for (int i = 0; i < N; i++) {
        CHECK(!gem_session_eval(s, &ids[i], 1, &err));
        const float *l = gem_session_logits(s);
        double d = max_diff(l, all + (size_t)i * V, V);
        if (d > worst) worst = d;
        argmax_same &= argmax(l) == argmax(all + (size_t)i * V);
        if (i == 59) cp = gem_session_save(s, &err); /* past the window: the ring has wrapped */
    }
    /* Tiles and single tokens run the same arithmetic per row except the
     * attention sums over a different split of keys: equal to rounding. */
    CHECKF(worst < 1e-3, "prefill vs decode max |diff| %g", worst);
    CHECK(argmax_same);
    printf("prefill vs token-by-token: max |logit diff| %.3g over %d positions\n", worst, N);

    /* checkpoint at 60, restore, replay the rest: bit-identical */
    CHECK(cp != NULL);
    gem_session_restore(s, cp);
    size_t nt;
    gem_session_tokens(s, &nt);
    CHECK(nt == 60);
    for (int i = 60; i < N; i++) gem_session_eval(s, &ids[i], 1, &err);
    float *after = malloc(V * sizeof(float));
    memcpy(after, gem_session_logits(s), V * sizeof(float));
    gem_session_restore(s, cp);
    for (int i = 60; i < N; i++) gem_session_eval(s, &ids[i], 1, &err);
    CHECK(max_diff(after, gem_session_logits(s), V) == 0);
    gem_checkpoint_free(cp);

    /* context limit */
    gem_session_reset(s);
    int32_t many[300];
    for (int i = 0; i < 300; i++) many[i] = 5;
    CHECK(gem_session_eval(s, many, 300, &err) == -1);
    CHECK_ERR(err.msg, "exceed the context of 256");
    int32_t bad = 262144;
    CHECK(gem_session_eval(s, &bad, 1, &err) == -1);
    CHECK_ERR(err.msg, "out of the vocabulary");
    gem_session_free(s);
    gem_engine_close(e);

    /* the scalar reference path gives the same logits as the threaded one */
    eo.cpu_ref = 1;
    e = gem_engine_open(&eo, &err);
    s = e ? gem_session_new(e, &err) : NULL;
    CHECK(s && !gem_session_eval(s, ids, 40, &err));
    if (s) CHECK(max_diff(gem_session_logits(s), all + (size_t)39 * V, V) < 1e-3);
    gem_session_free(s);
    gem_engine_close(e);
    eo.cpu_ref = 0;

    /* gem_engine_opts.layers (testing): all layers or more give the same
     * logits, bit for bit; one layer, or all but the last, give others (a
     * limit ignored or one too high shows), and the one-layer prefill and
     * token-by-token paths still agree (the last layer's residual goes to
     * the output norm) */
    {
        const int nl = (int)gemma4_profile_find("gemma4-tiny")->n_layer, counts[] = {nl, nl + 5, 1, nl - 1};
        float *one = malloc((size_t)N * V * sizeof(float));
        for (int c = 0; c < 4; c++) {
            eo.layers = counts[c];
            e = gem_engine_open(&eo, &err);
            s = e ? gem_session_new(e, &err) : NULL;
            CHECK(s && !gem_session_eval_all(s, ids, N, one, &err));
            const double d = s ? max_diff(one + (size_t)(N - 1) * V, all + (size_t)(N - 1) * V, V) : -1;
            if (c < 2) CHECKF(d == 0, "layers=%d vs all layers: max |diff| %g", counts[c], d);
            else CHECKF(d > 1e-2, "layers=%d vs all layers: max |diff| %g (the limit is ignored?)", counts[c], d);
            if (c == 2 && s) {
                gem_session_reset(s);
                double w1 = 0;
                for (int i = 0; i < N; i++) {
                    CHECK(!gem_session_eval(s, &ids[i], 1, &err));
                    const double di = max_diff(gem_session_logits(s), one + (size_t)i * V, V);
                    if (di > w1) w1 = di;
                }
                CHECKF(w1 < 1e-3, "layers=1: prefill vs decode max |diff| %g", w1);
            }
            gem_session_free(s);
            gem_engine_close(e);
        }
        eo.layers = 0;
        free(one);
    }

    /* the backend's top-k (here the CPU's) in the sampler's order, ties
     * included; the engine's sampling through it draws what the sampler
     * draws from the whole vocabulary */
    {
        backend_opts bo = {1, 0, 0, 0};
        backend *cb = backend_create("cpu", &bo, &err);
        CHECK(cb != NULL);
        be_buf *x = cb ? cb->alloc(cb, V, &err) : NULL, *o = cb ? cb->alloc(cb, 2 * BE_TOPK_MAX, &err) : NULL;
        float *row = malloc(sizeof(float) * V), want_v[BE_TOPK_MAX], got[2 * BE_TOPK_MAX];
        int32_t want_i[BE_TOPK_MAX];
        const int ks[] = {1, 40, BE_TOPK_MAX};
        for (int r = 0; r < 4 && x && o; r++) {
            memcpy(row, all + (size_t)r * 13 * V, sizeof(float) * V);
            if (r & 1) /* many equal values: ties go to the lower id */
                for (int i = 0; i < (int)V; i++) row[i] = roundf(row[i] * 2.0f) / 2.0f;
            cb->upload(cb, x, 0, row, V);
            for (int ki = 0; ki < 3; ki++) {
                const int k = ks[ki];
                cb->topk(cb, x, (int)V, k, o);
                cb->download(cb, o, 0, got, (size_t)(2 * k));
                top_by_sort(row, k, want_v, want_i);
                int ok = 1;
                for (int i = 0; i < k; i++) ok &= got[i] == want_v[i] && (int32_t)got[k + i] == want_i[i];
                CHECKF(ok, "cpu topk row %d k %d", r, k);
            }
        }
        if (cb) cb->buf_free(cb, x), cb->buf_free(cb, o), cb->destroy(cb);
        free(row);

        gem_sampling tp = gem_sampling_default();
        tp.temp = 1.3f;
        tp.top_k = 40;
        tp.top_p = 0.95f;
        tp.min_p = 0.01f;
        tp.seed = 11;
        sampler *sa = sampler_new(&tp, (int)V), *sb = sampler_new(&tp, (int)V);
        CHECK(sampler_topk(sa) == 40);
        int same = 1;
        for (int i = 0; i < 20; i++) {
            top_by_sort(all + (size_t)i * V, 40, want_v, want_i);
            same &= sampler_sample(sa, all + (size_t)i * V, ids, (size_t)i) == sampler_sample_top(sb, want_v, want_i, 40);
        }
        CHECK(same);
        /* the engine: gem_session_sample reads only the top k */
        eo.cpu_ref = 0;
        gem_engine *te = gem_engine_open(&eo, &err);
        gem_session *ts = te ? gem_session_new(te, &err) : NULL;
        int32_t cur = ids[0];
        same = ts != NULL;
        for (int i = 0; i < 12 && ts; i++) {
            if (gem_session_eval(ts, &cur, 1, &err)) { same = 0; break; }
            const int32_t x1 = gem_session_sample(ts, sa, &err);
            size_t nh;
            const int32_t *hist = gem_session_tokens(ts, &nh);
            const int32_t x2 = sampler_sample(sb, gem_session_logits(ts), hist, nh);
            same &= x1 >= 0 && x1 == x2;
            cur = x1 >= 0 ? x1 : 2;
        }
        CHECKF(same, "gem_session_sample vs sampler_sample: %s", err.msg);
        gem_session_free(ts);
        gem_engine_close(te);
        sampler_free(sa);
        sampler_free(sb);
        tp.repeat_penalty = 1.1f;
        sa = sampler_new(&tp, (int)V);
        CHECK(sampler_topk(sa) == 0); /* penalties need the whole vocabulary */
        sampler_free(sa);
        tp.repeat_penalty = 1.0f;
        tp.top_k = BE_TOPK_MAX + 1;
        sa = sampler_new(&tp, (int)V);
        CHECK(sampler_topk(sa) == 0);
        sampler_free(sa);
    }

    /* sampling: a seed fixes the draw; greedy is the argmax */
    gem_sampling sp = gem_sampling_default();
    sp.temp = 0.9f;
    sp.top_k = 40;
    sp.top_p = 0.9f;
    sp.seed = 7;
    sampler *a = sampler_new(&sp, (int)V), *b = sampler_new(&sp, (int)V);
    int same = 1, varied = 0;
    int32_t first = -1;
    for (int i = 0; i < 20; i++) {
        int32_t x = sampler_sample(a, all + (size_t)i * V, ids, (size_t)i), y = sampler_sample(b, all + (size_t)i * V, ids, (size_t)i);
        same &= x == y;
        if (first < 0) first = x;
        else varied |= x != first;
    }
    CHECK(same && varied);
    sampler_free(a);
    sampler_free(b);
    sp = gem_sampling_default();
    sampler *g = sampler_new(&sp, (int)V);
    CHECK(sampler_sample(g, all, ids, 0) == argmax(all));
    /* a repetition penalty moves the choice away from a repeated argmax */
    sampler_free(g);
    sp.repeat_penalty = 1e4f;
    g = sampler_new(&sp, (int)V);
    int32_t top = argmax(all);
    CHECK(sampler_sample(g, all, &top, 1) != top);
    sampler_free(g);
    /* logit biases: -100 bans the argmax, a large bias makes any token the
     * pick; either takes the sampler off the device's argmax and top-k
     * shortcuts; the sampler keeps its own copy of the arrays */
    {
        sp = gem_sampling_default();
        int32_t bid[2] = {top, 5};
        float bv[2] = {-100.0f, 0.0f};
        sp.bias_ids = bid, sp.bias = bv, sp.n_bias = 1;
        g = sampler_new(&sp, (int)V);
        bid[0] = 0; /* the caller's array changes: the sampler's copy does not */
        CHECK(!sampler_is_greedy(g) && sampler_topk(g) == 0);
        const int32_t pick = sampler_sample(g, all, NULL, 0);
        CHECKF(pick != top && pick >= 0, "logit_bias -100 on %d: picked %d", top, pick);
        sampler_free(g);
        bid[0] = top, bid[1] = 5, bv[0] = 0, bv[1] = 100.0f;
        sp.n_bias = 2;
        sp.temp = 0.9f, sp.top_k = 40;
        g = sampler_new(&sp, (int)V);
        CHECK(sampler_topk(g) == 0 && sampler_sample(g, all, NULL, 0) == 5);
        sampler_free(g);
    }

    free(all);
    free(after);
    remove(path);
    return test_report("test_gemma4_run");
}
