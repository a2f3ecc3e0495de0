/* The tensor-parallel backend (src/backend/shard) on in-process CPU shards:
 *  - ops: a row-split matmul gathers bitwise to the unsplit one; a
 *    column-split matmul's partial sums, reduced, equal it to rounding; a
 *    partial sum read before allreduce, and splits that do not divide,
 *    are errors naming why;
 *  - the Gemma 4 tiny profile, f32 and q8_0, G = 2 and 4 against G = 1:
 *    every position's logits over a prompt that wraps the sliding ring,
 *    greedy continuations, top-k sampling, a checkpoint, and batched
 *    steps of several sequences;
 *  - the 1b profile in q4_0 (its first six layers, one full-attention
 *    layer among them): logits and clear argmaxes, G = 2 and 4;
 *  - refusals: shards that do not divide the heads, --mtp, Qwen3.5, cuda.
 *
 * Tolerances. f32 weights: the only arithmetic that changes is where the
 * sums split: o and down add G partial sums of the same products (each
 * shard's columns in the kernel's order, then the shards in order), a
 * reassociation of ~1e-7 relative per sum; six layers and the softcapped
 * head keep that below 1e-4 in the logits (measured: ~1e-5), so 1e-3
 * holds with room and still fails on any real error (a wrong head or a
 * missing shard moves logits by O(1)). q8_0: activations are quantized per
 * 32-value block, and the column split falls on block boundaries, so the
 * quantized values are the same; but an o/down output that rounds
 * differently is re-quantized by the next layer's matmul, where one
 * rounding step of 8 bits moves a value by 1/127 of its block's scale:
 * after one layer the logits already differ by up to 0.03 at G = 4, after
 * six by ~0.1 (measured 0.09 at G = 2, 0.12 at G = 4): 0.25 is allowed,
 * and the argmax must agree wherever G = 1's top two are more than 0.25
 * apart (a clear position), greedy continuations token for token (they
 * do: no near-tie on this seed's path), top-k draws not compared. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "engine/engine.h"
#include "model/gemma4.h"
#include "model/gemma4_run.h"
#include "quant/quant.h"
#include "synth_tiny.h"
#include "test.h"

#define V GEMMA4_N_VOCAB
#define N 80 /* > 2 x the tiny window of 32: the rings wrap */

/* ---- ops ---- */

static gguf_tensor f32_tensor(const char *name, float *data, int ne0, int ne1) {
    gguf_tensor t = {0};
    t.name = name;
    t.n_dims = 2;
    t.ne[0] = (uint64_t)ne0, t.ne[1] = (uint64_t)ne1, t.ne[2] = t.ne[3] = 1;
    t.type = QT_F32;
    t.n_elems = (uint64_t)ne0 * (uint64_t)ne1;
    t.n_bytes = t.n_elems * sizeof(float);
    t.data = data;
    return t;
}

static void test_ops(void) {
    enum { IN = 128, OUT = 96, ROWS = 3 };
    gem_err err = {{0}};
    backend_opts po = {1, 0, 0, 0}, so = {1, 0, 0, 2};
    backend *p = backend_create("cpu", &po, &err), *s = backend_create("cpu", &so, &err);
    CHECKF(p && s, "%s", err.msg);
    if (!p || !s) return;
    CHECK(s->shards == 2 && s->allreduce && s->weight_split && !p->allreduce && p->shards <= 1);
    float *w = malloc(sizeof(float) * IN * OUT), x[ROWS * IN], y0[ROWS * OUT], y1[ROWS * OUT], z0[ROWS * IN],
          z1[ROWS * IN];
    for (int i = 0; i < IN * OUT; i++) w[i] = (float)((i * 7919 % 1000) - 500) / 1000.0f;
    for (int i = 0; i < ROWS * IN; i++) x[i] = (float)((i * 104729 % 200) - 100) / 100.0f;
    const gguf_tensor t = f32_tensor("w", w, IN, OUT), tt = f32_tensor("wt", w, OUT, IN);

    /* row split: each output row is computed whole on one shard */
    be_weight *wp = p->weight(p, &t, &err), *ws = s->weight_split(s, &t, (be_split){BE_SPLIT_OUT, 4}, &err);
    be_buf *xp = p->alloc(p, ROWS * IN, &err), *yp = p->alloc(p, ROWS * OUT, &err);
    be_buf *xs = s->alloc(s, ROWS * IN, &err), *ys = s->alloc(s, ROWS * OUT, &err), *zs = s->alloc(s, ROWS * IN, &err);
    CHECKF(wp && ws && xp && yp && xs && ys && zs, "%s", err.msg);
    p->upload(p, xp, 0, x, ROWS * IN);
    s->upload(s, xs, 0, x, ROWS * IN);
    p->matmul(p, wp, xp, ROWS, yp);
    s->matmul(s, ws, xs, ROWS, ys);
    p->download(p, yp, 0, y0, ROWS * OUT);
    s->download(s, ys, 0, y1, ROWS * OUT);
    CHECK(!memcmp(y0, y1, sizeof y0));
    /* a gathered range that starts and ends inside rows */
    float part[OUT];
    s->download(s, ys, OUT + 10, part, OUT);
    CHECK(!memcmp(part, y0 + OUT + 10, sizeof part));

    /* column split: the split output above is the input of a weight
     * split by its input columns alike; partial sums, then allreduce */
    be_weight *wtp = p->weight(p, &tt, &err), *wts = s->weight_split(s, &tt, (be_split){BE_SPLIT_IN, 4}, &err);
    be_buf *zp = p->alloc(p, ROWS * IN, &err);
    CHECKF(wtp && wts && zp, "%s", err.msg);
    p->matmul(p, wtp, yp, ROWS, zp);
    s->matmul(s, wts, ys, ROWS, zs);
    s->allreduce(s, zs, ROWS * IN);
    p->download(p, zp, 0, z0, ROWS * IN);
    s->download(s, zs, 0, z1, ROWS * IN);
    double worst = 0;
    for (int i = 0; i < ROWS * IN; i++) worst = fmax(worst, fabs((double)z0[i] - z1[i]) / (1 + fabs((double)z0[i])));
    CHECKF(worst < 1e-5, "column split vs whole: %g", worst);
    CHECK(!s->status(s, &err));

    /* partial sums read before allreduce: the status names it */
    s->matmul(s, wts, ys, ROWS, zs);
    s->add_rmsnorm(s, xs, zs, NULL, ROWS, IN, 1e-6f, NULL);
    CHECK(s->status(s, &err) == -1);
    CHECK_ERR(err.msg, "partial sums before allreduce");

    /* splits that do not divide */
    CHECK(s->weight_split(s, &t, (be_split){BE_SPLIT_OUT, 5}, &err) == NULL);
    CHECK_ERR(err.msg, "do not divide over 2 shards");
    CHECK(s->weight_split(s, &tt, (be_split){BE_SPLIT_IN, 1}, &err) == NULL); /* replicas would double-count */
    CHECK_ERR(err.msg, "do not divide over 2 shards");

    p->weight_free(p, wp), p->weight_free(p, wtp);
    s->weight_free(s, ws), s->weight_free(s, wts);
    p->buf_free(p, xp), p->buf_free(p, yp), p->buf_free(p, zp);
    s->buf_free(s, xs), s->buf_free(s, ys), s->buf_free(s, zs);
    p->destroy(p);
    s->destroy(s);
    free(w);

    so.shards = 9;
    CHECK(backend_create("cpu", &so, &err) == NULL);
    CHECK_ERR(err.msg, "takes 2 to 8");
}

/* ---- the Gemma 4 tiny profile ---- */

static int synth(const char *path, uint32_t type, uint64_t seed, gem_err *err) {
    gemma4_synth_opts so = {0};
    so.profile = gemma4_profile_find("gemma4-tiny");
    so.type = type;
    so.embd_type = type;
    so.seed = seed;
    so.vocab_path = "data/vocab/gemma-4.gguf";
    so.out_path = path;
    return gemma4_synth(&so, err);
}

static gem_engine *open_g_layers(const char *path, int shards, int layers, gem_err *err) {
    gem_engine_opts eo = {0};
    eo.layers = layers;
    eo.model_path = path;
    eo.n_ctx = 256;
    eo.tile = 16;
    eo.shards = shards;
    return gem_engine_open(&eo, err);
}

static gem_engine *open_g(const char *path, int shards, gem_err *err) { return open_g_layers(path, shards, 0, err); }

static int argmax_of(const float *l) {
    int b = 0;
    for (int i = 1; i < (int)V; i++)
        if (l[i] > l[b]) b = i;
    return b;
}

/* The gap between row l's largest and second largest value. */
static float top2_gap(const float *l) {
    float a = -INFINITY, b = -INFINITY;
    for (int i = 0; i < (int)V; i++)
        if (l[i] > a) b = a, a = l[i];
        else if (l[i] > b) b = l[i];
    return a - b;
}

typedef struct {
    float *all;      /* N x V logits of the prompt, prefilled in tiles */
    int32_t greedy[24];
    int32_t sampled[24];
} run_out;

typedef struct {
    int32_t *ids;
    int n;
} collect;

static void on_token(void *ctx, const gem_gen_token *t) {
    collect *c = ctx;
    if (c->n < 24) c->ids[c->n++] = t->id;
}

/* The prompt's logits, a greedy continuation and a top-k sampled one. */
static int run_model(const char *path, int shards, const int32_t *ids, run_out *o, gem_err *err) {
    gem_engine *e = open_g(path, shards, err);
    gem_session *s = e ? gem_session_new(e, err) : NULL;
    int rc = -1;
    if (!s || gem_session_eval_all(s, ids, N, o->all, err)) goto out;
    int32_t next = -1;
    gem_session_reset(s);
    if (gem_session_eval_greedy(s, ids, 20, &next, err)) goto out;
    for (int i = 0; i < 24; i++) {
        o->greedy[i] = next;
        if (gem_session_eval_greedy(s, &next, 1, &next, err)) goto out;
    }
    /* top-k sampling: the sampler reads the k best from the backend (the
     * shards' candidates merged) */
    gem_session_reset(s);
    gem_gen_params gp = gem_gen_params_default();
    gp.sampling.temp = 0.9f;
    gp.sampling.top_k = 20;
    gp.sampling.seed = 7;
    gp.max_tokens = 24;
    gp.ignore_eos = 1;
    gp.no_checkpoint = 1;
    memset(o->sampled, 0xff, sizeof o->sampled);
    collect col = {o->sampled, 0};
    const gem_gen_callbacks cb = {.ctx = &col, .on_token = on_token};
    gem_gen_result r;
    if (gem_session_sync(s, ids, 20, err) < 0 || gem_session_generate(s, &gp, &cb, &r, err)) goto out;
    rc = 0;
out:
    gem_session_free(s);
    gem_engine_close(e);
    return rc;
}

/* tol: the logits' bound; clear: the top-two gap past which the argmax
 * must agree; sampled: top-k draws compared too (where the logits agree
 * far below any probability a draw could sit that close to) */
static void test_model(const char *path, uint32_t type, double tol, float clear, int sampled) {
    gem_err err = {{0}};
    int32_t ids[N];
    for (int i = 0; i < N; i++) ids[i] = (int32_t)((i * 7919 + 13) % 262000) + 100;
    ids[0] = 2;
    run_out base = {malloc(sizeof(float) * N * V), {0}, {0}};
    CHECKF(!run_model(path, 1, ids, &base, &err), "G=1: %s", err.msg);
    for (int G = 2; G <= 4; G += 2) {
        run_out o = {malloc(sizeof(float) * N * V), {0}, {0}};
        const int ok = !run_model(path, G, ids, &o, &err);
        CHECKF(ok, "G=%d: %s", G, err.msg);
        double worst = 0;
        int clear_pos = 0, clear_same = 0, all_same = 0;
        for (int r = 0; ok && r < N; r++) {
            const float *a = base.all + (size_t)r * V, *b = o.all + (size_t)r * V;
            for (size_t i = 0; i < V; i++) {
                const double d = fabs((double)a[i] - b[i]);
                if (d > worst || d != d) worst = d != d ? INFINITY : d;
            }
            const int same = argmax_of(a) == argmax_of(b);
            all_same += same;
            if (top2_gap(a) > clear) clear_pos++, clear_same += same;
        }
        printf("%s G=%d vs 1: max |logit diff| %.3g over %d positions; argmax equal at %d, at %d of %d clear ones\n",
               quant_type_name(type), G, worst, N, all_same, clear_same, clear_pos);
        CHECKF(ok && worst < tol, "G=%d: max |logit diff| %g >= %g", G, worst, tol);
        CHECK(ok && clear_pos >= N / 5 && clear_same == clear_pos);
        CHECK(ok && !memcmp(o.greedy, base.greedy, sizeof o.greedy));
        if (sampled) CHECK(ok && !memcmp(o.sampled, base.sampled, sizeof o.sampled));
        free(o.all);
    }
    free(base.all);
}

static void prompt_ids(int32_t *ids, int n, int salt) {
    for (int i = 0; i < n; i++) ids[i] = (int32_t)((i * 7919 + 13 + salt * 977) % 262000) + 100;
    ids[0] = 2;
}

/* Checkpoints on shards: a backend checkpoint (kv_stash) restored, and a
 * parked one (the host's copy, kv_save) unparked into another session,
 * continue bit for bit as the session that never stopped. */
static void test_checkpoints(const char *path, int G) {
    gem_err err = {{0}};
    gem_engine *e = open_g(path, G, &err);
    gem_session *s = e ? gem_session_new(e, &err) : NULL, *t = e ? gem_session_new(e, &err) : NULL;
    CHECKF(s && t, "%s", err.msg);
    if (!s || !t) goto out;
    int32_t ids[N];
    prompt_ids(ids, N, 0);
    float *go = malloc(sizeof(float) * V), *back = malloc(sizeof(float) * V);
    CHECK(!gem_session_eval(s, ids, 60, &err)); /* past the window: the rings wrapped */
    gem_checkpoint *cp = gem_session_save(s, &err);
    gem_park *pk = gem_session_park(s, &err);
    CHECKF(cp && pk, "%s", err.msg);
    CHECK(!gem_session_eval(s, ids + 60, N - 60, &err));
    memcpy(go, gem_session_logits(s), sizeof(float) * V);
    if (cp) {
        gem_session_restore(s, cp);
        CHECK(!gem_session_eval(s, ids + 60, N - 60, &err));
        memcpy(back, gem_session_logits(s), sizeof(float) * V);
        CHECK(!memcmp(go, back, sizeof(float) * V));
    }
    if (pk) {
        CHECKF(!gem_session_unpark(t, pk, &err), "%s", err.msg);
        CHECK(!gem_session_eval(t, ids + 60, N - 60, &err));
        memcpy(back, gem_session_logits(t), sizeof(float) * V);
        CHECK(!memcmp(go, back, sizeof(float) * V));
    }
    printf("G=%d: checkpoint and park restore bit for bit\n", G);
    gem_checkpoint_free(cp);
    gem_park_free(pk);
    free(go);
    free(back);
out:
    gem_session_free(s);
    gem_session_free(t);
    gem_engine_close(e);
}

/* A batched step of several sequences on shards (attention_seqs over each
 * shard's caches) leaves every state bitwise as its own one-token step. */
static void test_step_seqs(const char *path, int G) {
    gem_err err = {{0}};
    gguf_file *f = gguf_open(path, &err);
    gemma4_model *m = f ? gemma4_bind(f, &err) : NULL;
    backend_opts bo = {0, 0, 0, G};
    backend *b = m ? backend_create("cpu", &bo, &err) : NULL;
    gemma4_kv_plan plan;
    gemma4_core *c = b && !gemma4_kv_plan_make(m->profile, 256, GEMMA4_KV_F32, gemma4_ring_slack(b), 16, &plan, &err)
                         ? gemma4_core_new(m, b, &plan, 0, &err)
                         : NULL;
    CHECKF(c != NULL, "%s", err.msg);
    enum { NS = 3 };
    gemma4_state *a[NS] = {0}, *z[NS] = {0};
    float *la = malloc(sizeof(float) * V), *lz = malloc(sizeof(float) * V);
    int ok = c != NULL, rows = 0, equal = 0;
    for (int i = 0; ok && i < NS; i++) {
        int32_t ids[N];
        prompt_ids(ids, N, i + 1);
        const int n = 30 + 20 * i; /* 30..70: the later ones past the window */
        ok = (a[i] = gemma4_state_on(c, &plan, &err)) && (z[i] = gemma4_state_on(c, &plan, &err)) &&
             !gemma4_prefill(a[i], ids, n, &err) && !gemma4_prefill(z[i], ids, n, &err);
    }
    for (int step = 0; ok && step < 3; step++) {
        int32_t ids[NS] = {500 + step, 901 + step, 1300 + step}, best[NS];
        ok = !gemma4_step_seqs(a, ids, NS, best, &err);
        for (int i = 0; ok && i < NS; i++) {
            int32_t nb = -1;
            ok = !gemma4_eval_greedy(z[i], &ids[i], 1, &nb, &err) && !gemma4_logits(a[i], la, &err) &&
                 !gemma4_logits(z[i], lz, &err);
            rows++;
            equal += ok && nb == best[i] && !memcmp(la, lz, sizeof(float) * V);
        }
    }
    CHECKF(ok, "%s", err.msg);
    printf("G=%d: step_seqs %d of %d rows bitwise equal to one-token steps\n", G, equal, rows);
    CHECK(rows == 3 * NS && equal == rows);
    for (int i = 0; i < NS; i++) {
        gemma4_state_free(a[i]);
        gemma4_state_free(z[i]);
    }
    free(la);
    free(lz);
    gemma4_core_free(c);
    if (b) b->destroy(b);
    gemma4_free(m);
    gguf_close(f);
}

/* The 1b profile (8 query heads, 4 sliding / 1 full KV heads, FFN 6144)
 * in q4_0 with its q8_0 embedding, its first `layers` layers then the
 * head: every position's logits of a short prompt, G = 2 and 4 against 1. */
#ifndef GEM_TEST_ASAN /* run on the plain build only (main) */
static void test_1b(int layers, int n, double tol, float clear) {
    char path[] = "/tmp/gem-shard-1b-XXXXXX";
    if (test_tmp_file(path)) return;
    gem_err err = {{0}};
    gemma4_synth_opts so = {0};
    so.profile = gemma4_profile_find("gemma4-1b");
    so.type = QT_Q4_0;
    so.embd_type = QT_Q8_0;
    so.seed = 1;
    so.vocab_path = "data/vocab/gemma-4.gguf";
    so.out_path = path;
    CHECKF(!gemma4_synth(&so, &err), "%s", err.msg);
    int32_t ids[N];
    prompt_ids(ids, n, 3);
    float *all[3] = {malloc(sizeof(float) * n * V), malloc(sizeof(float) * n * V), malloc(sizeof(float) * n * V)};
    for (int g = 0; g < 3; g++) {
        gem_engine *e = open_g_layers(path, 1 << g, layers, &err);
        gem_session *s = e ? gem_session_new(e, &err) : NULL;
        CHECKF(s && !gem_session_eval_all(s, ids, n, all[g], &err), "1b G=%d: %s", 1 << g, err.msg);
        gem_session_free(s);
        gem_engine_close(e);
    }
    for (int g = 1; g < 3; g++) {
        double worst = 0;
        int clear_pos = 0, clear_same = 0;
        for (int r = 0; r < n; r++) {
            const float *a = all[0] + (size_t)r * V, *b = all[g] + (size_t)r * V;
            for (size_t i = 0; i < V; i++) worst = fmax(worst, fabs((double)a[i] - b[i]));
            if (top2_gap(a) > clear) clear_pos++, clear_same += argmax_of(a) == argmax_of(b);
        }
        printf("1b q4_0 (%d layers) G=%d vs 1: max |logit diff| %.3g over %d positions; argmax equal at %d of %d clear\n",
               layers, 1 << g, worst, n, clear_same, clear_pos);
        CHECKF(worst < tol, "1b G=%d: %g", 1 << g, worst);
        CHECK(clear_same == clear_pos && clear_pos >= n / 4);
    }
    for (int g = 0; g < 3; g++) free(all[g]);
    unlink(path);
}
#endif

/* What shards cannot run is refused by name. */
static void test_refusals(const char *path) {
    gem_err err = {{0}};
    gem_engine *e = open_g(path, 3, &err); /* 4 query heads over 3 */
    CHECK(e == NULL);
    CHECK_ERR(err.msg, "do not divide over 3 shards");
    gem_engine_close(e);
    gem_engine_opts eo = {0};
    eo.model_path = path;
    eo.n_ctx = 256;
    eo.shards = 2;
    char d[] = "/tmp/gem-shard-d-XXXXXX";
    if (test_tmp_file(d)) return;
    CHECKF(!test_synth_f32("gemma4-tiny-assistant", d, 5, 0, &err), "%s", err.msg);
    eo.mtp_path = d; /* a drafter that fits: refused for the shards */
    e = gem_engine_open(&eo, &err);
    CHECK(e == NULL);
    CHECK_ERR(err.msg, "speculative decoding does not run tensor-parallel (2 shards)");
    gem_engine_close(e);
    unlink(d);
    eo.mtp_path = NULL;
    eo.backend = "cuda";
    e = gem_engine_open(&eo, &err);
    CHECK(e == NULL);
    CHECK_ERR(err.msg, "2-way tensor parallelism on 'cuda'");
    gem_engine_close(e);
    char q[] = "/tmp/gem-shard-q-XXXXXX";
    if (test_tmp_file(q)) return;
    CHECKF(!test_synth_qwen35_tiny(q, 3, 0, &err), "%s", err.msg);
    eo.backend = NULL;
    eo.model_path = q;
    e = gem_engine_open(&eo, &err);
    CHECK(e == NULL);
    CHECK_ERR(err.msg, "does not run tensor-parallel");
    gem_engine_close(e);
    unlink(q);
}

int main(void) {
    test_ops();
    char f32[] = "/tmp/gem-shard-XXXXXX", q8[] = "/tmp/gem-shard-q8-XXXXXX";
    gem_err err = {{0}};
    if (test_tmp_file(f32) || test_tmp_file(q8)) return 1;
    CHECKF(!synth(f32, QT_F32, 11, &err) && !synth(q8, QT_Q8_0, 11, &err), "%s", err.msg);
    test_model(f32, QT_F32, 1e-3, 0.0f, 1);
#ifndef GEM_TEST_ASAN /* the sanitizer pass checks memory on the f32 cases alone */
    test_model(q8, QT_Q8_0, 0.25, 0.25f, 0);
    test_step_seqs(q8, 4);
#endif
    test_checkpoints(q8, 2);
    test_step_seqs(q8, 2);
    test_refusals(q8);
#ifndef GEM_TEST_ASAN
    /* six layers: the first full-attention layer (5) among them; deeper,
     * this random q4_0 model amplifies 8-bit rounding past any bound (all
     * 18 layers: logits apart by ~0.9, tests/cuda/cuda_model.c says why) */
    test_1b(6, 12, 0.25, 0.25f);
#endif
    unlink(f32);
    unlink(q8);
    return test_report("test_shard");
}
