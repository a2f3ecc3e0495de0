/* The Gemma 4 forward pass on the tiny profile: prefill in tiles equals
 * token-by-token decode (the sliding ring wraps: 3x the window), the scalar
 * reference path equals the threaded path, checkpoints restore exactly, the
 * context limit is enforced, and sampling is deterministic per seed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "engine/engine.h"
#include "engine/sampler.h"
#include "model/gemma4.h"
#include "model/gemma4_synth.h"
#include "quant/quant.h"
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

static int argmax(const float *l) {
    int b = 0;
    for (int i = 1; i < (int)V; i++)
        if (l[i] > l[b]) b = i;
    return b;
}

int main(void) {
    char path[] = "/tmp/gem-run-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return 1;
    close(fd);
    gemma4_synth_opts so = {0};
    so.profile = gemma4_profile_find("gemma4-tiny");
    so.type = QT_F32;
    so.embd_type = QT_F32;
    so.seed = 42;
    so.vocab_path = "data/vocab/gemma-4.gguf";
    so.out_path = path;
    gem_err err = {{0}};
    CHECKF(!gemma4_synth(&so, &err), "%s", err.msg);

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
    CHECK(gem_session_new(e, &err) == NULL); /* one session per engine */
    CHECK_ERR(err.msg, "already has a session");

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

    free(all);
    free(after);
    remove(path);
    return test_report("test_gemma4_run");
}
