/* cuda_ops family hybrid (see ops_harness.h): the Gated DeltaNet ops of
 * Qwen3.5 (backend.h, src/backend/cuda/cuda_hybrid.cu) against the CPU
 * scalar reference on the same random inputs: conv_silu with its rolling
 * state over calls of 1, 2, 5, 16 and 37 tokens (both CUDA forms, each call
 * also bitwise equal to its rows one call each), l2norm
 * on q/k heads inside a qkv row, gated_delta over 1, 5, 70, 150 and 600
 * tokens (the recurrence, then GEM_CUDA_GDN_CHUNKED=1: the chunked form
 * for the calls past 16 tokens) with its state carried between calls, in the shapes of qwen35-small, qwen35-tiny
 * and the 27B's heads (V heads a multiple of the QK heads), rmsnorm_gated,
 * split_q / attn_gate, swiglu, add and scale_f.
 *
 * Tolerances: every op is f32 with sums in another order (warp and block
 * reductions against the CPU's sequential loops) and CUDA's expf/log1pf
 * against glibc's (a few ulps): 2e-5 relative for the elementwise and norm
 * ops; the delta rule's state is a running sum over the tokens with decays
 * below one, so its error grows with n but stays at the rounding of its
 * dot products: 1e-4 relative of the magnitudes, checked on the outputs and
 * the final state. */
#include "ops_harness.h"

/* both backends' copies of one f32 weight */
typedef struct {
    tensor t;
    be_weight *c, *g;
} wpair;

static wpair wmake_on(backend *gb, int64_t cols, int64_t rows, float scale, float bias) {
    wpair w = {make_tensor(QT_F32, cols, rows), NULL, NULL};
    float *v = (float *)w.t.data;
    for (int64_t i = 0; i < cols * rows; i++) v[i] = v[i] * scale + bias;
    gem_err err;
    w.c = cpu_ref->weight(cpu_ref, &w.t.t, &err);
    w.g = gb->weight(gb, &w.t.t, &err);
    CHECKF(w.c && w.g, "weight: %s", err.msg);
    return w;
}
static wpair wmake(int64_t cols, int64_t rows, float scale, float bias) { return wmake_on(gpu, cols, rows, scale, bias); }

static void wfree_on(backend *gb, wpair *w) {
    if (w->c) cpu_ref->weight_free(cpu_ref, w->c);
    if (w->g) gb->weight_free(gb, w->g);
    free_tensor(&w->t);
}
static void wfree(wpair *w) { wfree_on(gpu, w); }

/* a's n values against the reference b's */
static int same(const char *what, backend *gb, be_buf *ga, backend *cb, be_buf *ca, size_t n, double rel, double abs_tol) {
    float *a = get(gb, ga, n), *b = get(cb, ca, n);
    const int ok = close_enough(what, a, b, n, rel, abs_tol);
    free(a), free(b);
    return ok;
}

static void test_conv(void) {
    const int ch = 1000; /* not a multiple of the 128-thread blocks: the tail guard */
    wpair w = wmake(4, ch, 0.5f, 0.0f);
    float *st = rand_vec((size_t)3 * ch, 1.0f);
    be_buf *sc = put(cpu_ref, st, (size_t)3 * ch), *sg = put(gpu, st, (size_t)3 * ch), *s1 = put(gpu, st, (size_t)3 * ch);
    const int calls[] = {37, 1, 1, 16, 2, 5}; /* tiles past HY_CONV_SEQ (4) take the parallel form */
    for (size_t k = 0; k < sizeof calls / sizeof calls[0]; k++) {
        const int n = calls[k];
        float *x = rand_vec((size_t)n * ch, 2.0f);
        be_buf *xc = put(cpu_ref, x, (size_t)n * ch), *xg = put(gpu, x, (size_t)n * ch);
        be_buf *oc = put(cpu_ref, NULL, (size_t)n * ch), *og = put(gpu, NULL, (size_t)n * ch);
        cpu_ref->conv_silu(cpu_ref, xc, sc, w.c, n, ch, oc);
        gpu->conv_silu(gpu, xg, sg, w.g, n, ch, og);
        CHECKF(same("conv_silu", gpu, og, cpu_ref, oc, (size_t)n * ch, 2e-5, 1e-6), "conv_silu call %zu (%d rows)", k, n);
        CHECKF(same("conv state", gpu, sg, cpu_ref, sc, (size_t)3 * ch, 0, 0), "conv state after call %zu", k);
        /* the same rows one call each (the per-channel form): the tile's
         * outputs and state bit for bit (the same products in one order) */
        float *o1 = malloc(sizeof(float) * (size_t)n * ch);
        for (int t = 0; t < n; t++) {
            be_buf *xt = put(gpu, x + (size_t)t * ch, (size_t)ch), *ot = put(gpu, NULL, (size_t)ch);
            gpu->conv_silu(gpu, xt, s1, w.g, 1, ch, ot);
            float *r = get(gpu, ot, (size_t)ch);
            memcpy(o1 + (size_t)t * ch, r, sizeof(float) * (size_t)ch);
            free(r), gpu->buf_free(gpu, xt), gpu->buf_free(gpu, ot);
        }
        float *ot = get(gpu, og, (size_t)n * ch), *sa = get(gpu, sg, (size_t)3 * ch), *sb = get(gpu, s1, (size_t)3 * ch);
        CHECKF(!memcmp(ot, o1, sizeof(float) * (size_t)n * ch) && !memcmp(sa, sb, sizeof(float) * (size_t)3 * ch),
               "conv_silu call %zu (%d rows) differs from its rows one call each", k, n);
        free(ot), free(sa), free(sb), free(o1);
        cpu_ref->buf_free(cpu_ref, xc), cpu_ref->buf_free(cpu_ref, oc), gpu->buf_free(gpu, xg), gpu->buf_free(gpu, og);
        free(x);
    }
    cpu_ref->buf_free(cpu_ref, sc), gpu->buf_free(gpu, sg), gpu->buf_free(gpu, s1);
    free(st);
    wfree(&w);
}

/* The delta rule in one shape over calls of 1 to 600 tokens, each step
 * as the model feeds it: q and k L2-normed in place inside the qkv rows. */
static void test_gdn(backend *gb, int want_chunks, int n_k, int n_v, int d) {
    const size_t stride = (size_t)(2 * n_k + n_v) * d, sn = (size_t)n_v * d * d;
    /* a = -exp(A_log) as stored: negative, of order one */
    wpair a = wmake_on(gb, n_v, 1, 0.4f, -0.6f), dt = wmake_on(gb, n_v, 1, 1.0f, 0.0f);
    float *s0 = rand_vec(sn, 0.1f);
    be_buf *stc = put(cpu_ref, s0, sn), *stg = put(gb, s0, sn);
    /* 70 and 150: the chunked form (one partial chunk, three chunks);
     * 600: more chunks than one prep/scan segment of 512 tokens */
    const int calls[] = {1, 5, 70, 1, 150, 600};
    for (size_t k = 0; k < sizeof calls / sizeof calls[0]; k++) {
        const int n = calls[k];
        float *qkv = rand_vec((size_t)n * stride, 1.0f), *al = rand_vec((size_t)n * n_v, 2.0f),
              *be = rand_vec((size_t)n * n_v, 3.0f);
        be_buf *qc = put(cpu_ref, qkv, (size_t)n * stride), *qg = put(gb, qkv, (size_t)n * stride);
        be_buf *ac = put(cpu_ref, al, (size_t)n * n_v), *ag = put(gb, al, (size_t)n * n_v);
        be_buf *bc = put(cpu_ref, be, (size_t)n * n_v), *bg = put(gb, be, (size_t)n * n_v);
        be_buf *oc = put(cpu_ref, NULL, (size_t)n * n_v * d), *og = put(gb, NULL, (size_t)n * n_v * d);
        /* q and k of every row: 2 n_k heads from the row's start */
        cpu_ref->l2norm(cpu_ref, qc, n, 2 * n_k, d, (int)stride, 1e-6f);
        gb->l2norm(gb, qg, n, 2 * n_k, d, (int)stride, 1e-6f);
        CHECKF(same("l2norm", gb, qg, cpu_ref, qc, (size_t)n * stride, 2e-5, 1e-7), "l2norm %d x %d heads of %d", n,
               2 * n_k, d);
        cpu_ref->gated_delta(cpu_ref, qc, ac, bc, a.c, dt.c, stc, n, n_k, n_v, d, oc);
        be_op_time rows[32];
        gb->op_timing(gb, 1);
        gb->op_times(gb, rows, 32, 1); /* an empty table */
        gb->gated_delta(gb, qg, ag, bg, a.g, dt.g, stg, n, n_k, n_v, d, og);
        /* the form that ran, by its launches' labels (a tolerance alone would
         * pass with either) */
        const int nr = gb->op_times(gb, rows, 32, 1);
        gb->op_timing(gb, 0);
        long chunked = 0, recurrent = 0;
        for (int i = 0; i < nr; i++) {
            if (!strcmp(rows[i].op, "gated_delta (chunk prep)")) chunked += rows[i].calls;
            if (!strcmp(rows[i].op, "gated_delta (recurrence)")) recurrent += rows[i].calls;
        }
        const int want_chunked = want_chunks && n > BE_EXACT_ROWS;
        CHECKF(want_chunked ? chunked == (n + 511) / 512 && !recurrent : recurrent == 1 && !chunked,
               "gated_delta %d tokens: %ld chunk-prep and %ld recurrence launches (the %s form expected)", n, chunked,
               recurrent, want_chunked ? "chunked" : "recurrent");
        CHECKF(same("gated_delta out", gb, og, cpu_ref, oc, (size_t)n * n_v * d, 1e-4, 1e-5),
               "gated_delta n_k %d n_v %d d %d, call %zu (%d tokens)", n_k, n_v, d, k, n);
        CHECKF(same("gated_delta state", gb, stg, cpu_ref, stc, sn, 1e-4, 1e-5),
               "gated_delta state n_k %d n_v %d d %d after call %zu", n_k, n_v, d, k);
        cpu_ref->buf_free(cpu_ref, qc), cpu_ref->buf_free(cpu_ref, ac), cpu_ref->buf_free(cpu_ref, bc);
        cpu_ref->buf_free(cpu_ref, oc), gb->buf_free(gb, qg), gb->buf_free(gb, ag), gb->buf_free(gb, bg);
        gb->buf_free(gb, og);
        free(qkv), free(al), free(be);
    }
    cpu_ref->buf_free(cpu_ref, stc), gb->buf_free(gb, stg);
    free(s0);
    wfree_on(gb, &a), wfree_on(gb, &dt);
}

static void test_elementwise_hybrid(void) {
    const int rows = 19, d = 200, heads = 4; /* d past one 128-thread block's stride */
    const size_t nq = (size_t)rows * heads * d;
    wpair w = wmake(d, 1, 1.0f, 1.0f);
    float *x = rand_vec((size_t)rows * d, 3.0f), *z = rand_vec((size_t)rows * d, 4.0f);
    be_buf *xc = put(cpu_ref, x, (size_t)rows * d), *xg = put(gpu, x, (size_t)rows * d);
    be_buf *zc = put(cpu_ref, z, (size_t)rows * d), *zg = put(gpu, z, (size_t)rows * d);
    be_buf *oc = put(cpu_ref, NULL, (size_t)rows * d), *og = put(gpu, NULL, (size_t)rows * d);
    cpu_ref->rmsnorm_gated(cpu_ref, xc, zc, w.c, rows, d, 1e-6f, oc);
    gpu->rmsnorm_gated(gpu, xg, zg, w.g, rows, d, 1e-6f, og);
    CHECK(same("rmsnorm_gated", gpu, og, cpu_ref, oc, (size_t)rows * d, 2e-5, 1e-6));
    /* gated attention: rows of [query | gate] per head */
    float *qgv = rand_vec(2 * nq, 3.0f), *att = rand_vec(nq, 1.0f);
    be_buf *qgc = put(cpu_ref, qgv, 2 * nq), *qgg = put(gpu, qgv, 2 * nq);
    be_buf *qc = put(cpu_ref, NULL, nq), *qg = put(gpu, NULL, nq);
    cpu_ref->split_q(cpu_ref, qgc, rows, heads, d, qc);
    gpu->split_q(gpu, qgg, rows, heads, d, qg);
    CHECK(same("split_q", gpu, qg, cpu_ref, qc, nq, 0, 0));
    be_buf *tc = put(cpu_ref, att, nq), *tg = put(gpu, att, nq);
    cpu_ref->attn_gate(cpu_ref, tc, qgc, rows, heads, d);
    gpu->attn_gate(gpu, tg, qgg, rows, heads, d);
    CHECK(same("attn_gate", gpu, tg, cpu_ref, tc, nq, 2e-6, 1e-7));
    /* swiglu, add, scale_f */
    const size_t n = 100003;
    float *g = rand_vec(n, 6.0f), *u = rand_vec(n, 2.0f);
    be_buf *gc = put(cpu_ref, g, n), *gg = put(gpu, g, n), *uc = put(cpu_ref, u, n), *ug = put(gpu, u, n);
    be_buf *sc = put(cpu_ref, NULL, n), *sg = put(gpu, NULL, n);
    cpu_ref->swiglu(cpu_ref, gc, uc, n, sc);
    gpu->swiglu(gpu, gg, ug, n, sg);
    CHECK(same("swiglu", gpu, sg, cpu_ref, sc, n, 2e-6, 1e-7));
    cpu_ref->add(cpu_ref, sc, uc, n);
    gpu->add(gpu, sg, ug, n);
    cpu_ref->scale_f(cpu_ref, sc, n, 0.0625f);
    gpu->scale_f(gpu, sg, n, 0.0625f);
    CHECK(same("add+scale_f", gpu, sg, cpu_ref, sc, n, 2e-6, 1e-7));
    be_buf *bufs_c[] = {xc, zc, oc, qgc, qc, tc, gc, uc, sc}, *bufs_g[] = {xg, zg, og, qgg, qg, tg, gg, ug, sg};
    for (int i = 0; i < 9; i++) cpu_ref->buf_free(cpu_ref, bufs_c[i]), gpu->buf_free(gpu, bufs_g[i]);
    free(x), free(z), free(qgv), free(att), free(g), free(u);
    wfree(&w);
}

void ops_hybrid(const backend_opts *g) {
    test_conv();
    /* the delta rule on the default backend (the recurrence for every
     * call), then with the chunked form for the calls past 16 tokens */
    backend *gc = variant("GEM_CUDA_GDN_CHUNKED", "1", g);
    backend *const gbs[2] = {gpu, gc};
    for (int i = 0; i < 2; i++) {
        if (!gbs[i]) continue;
        test_gdn(gbs[i], i, 2, 6, 128);   /* qwen35-small's heads */
        test_gdn(gbs[i], i, 16, 48, 128); /* the 27B's: 48 V heads over 16 QK heads */
        test_gdn(gbs[i], i, 2, 4, 64);    /* qwen35-tiny's GDN heads */
        test_gdn(gbs[i], i, 1, 3, 32);    /* one QK head for every V head, the narrowest state */
    }
    variant_done(gc);
    test_elementwise_hybrid();
}
