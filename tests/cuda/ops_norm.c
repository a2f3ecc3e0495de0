/* cuda_ops family norm (see ops_harness.h): rmsnorm, add_rmsnorm and
 * add_rmsnorm_norm against the CPU, and the 8-bit codes a norm leaves for
 * the next product; on the defaults and with 256-thread one-token norms
 * (GEM_CUDA_NORM_WIDE=0); the k-quant codes with GEM_CUDA_KQ_NORM=1. */
#include "ops_harness.h"

/* g: the default backend (single rows wider than 2048 on one block of up
 * to 1024 threads, one float4 each up to width 4096, two above: 2080 on
 * 544 threads (the last warp holds 8 of its 32 float4), 3840 on 960, 4160
 * on 544 (two float4 each, the second round partial), 5376 on 672, 8192
 * on 1024) or the 256-thread one-token norms (GEM_CUDA_NORM_WIDE=0: six
 * float4 per thread for 5376) */
static void test_norms(backend *g) {
    /* 1002: not a multiple of 4, the plain kernel */
    const int shapes[][2] = {{1, 5376}, {7, 256},  {64, 512}, {3, 1536}, {2, 1002},
                             {1, 3840}, {1, 1536}, {1, 1152}, {1, 256}, {1, 8192},
                             {1, 2080}, {1, 4160}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int rows = shapes[s][0], width = shapes[s][1];
        const size_t n = (size_t)rows * width;
        tensor w = make_tensor(QT_F32, width, 1);
        gem_err err;
        be_weight *wc = cpu_ref->weight(cpu_ref, &w.t, &err), *wg = g->weight(g, &w.t, &err);
        float *x = rand_vec(n, 3.0f), *h = rand_vec(n, 1.0f);
        for (int with_w = 0; with_w < 2; with_w++) {
            be_buf *xc = put(cpu_ref, x, n), *xg = put(g, x, n), *oc = put(cpu_ref, NULL, n), *og = put(g, NULL, n);
            cpu_ref->rmsnorm(cpu_ref, xc, with_w ? wc : NULL, rows, width, 1e-6f, oc);
            g->rmsnorm(g, xg, with_w ? wg : NULL, rows, width, 1e-6f, og);
            float *a = get(g, og, n), *b = get(cpu_ref, oc, n);
            CHECKF(close_enough("rmsnorm", a, b, n, 1e-5, 2e-5), "rmsnorm %dx%d", rows, width);
            /* in place, as the layer loop uses it */
            g->rmsnorm(g, xg, with_w ? wg : NULL, rows, width, 1e-6f, xg);
            free(a);
            a = get(g, xg, n);
            CHECKF(close_enough("rmsnorm in place", a, b, n, 1e-5, 2e-5), "in place %dx%d", rows, width);
            free(a), free(b);
            cpu_ref->buf_free(cpu_ref, xc), g->buf_free(g, xg), cpu_ref->buf_free(cpu_ref, oc), g->buf_free(g, og);
        }
        tensor sc = make_tensor(QT_F32, 1, 1);
        be_weight *scc = cpu_ref->weight(cpu_ref, &sc.t, &err), *scg = g->weight(g, &sc.t, &err);
        for (int with_s = 0; with_s < 2; with_s++) {
            be_buf *hc = put(cpu_ref, h, n), *hg = put(g, h, n), *xc = put(cpu_ref, x, n), *xg = put(g, x, n);
            cpu_ref->add_rmsnorm(cpu_ref, hc, xc, wc, rows, width, 1e-6f, with_s ? scc : NULL);
            g->add_rmsnorm(g, hg, xg, wg, rows, width, 1e-6f, with_s ? scg : NULL);
            float *a = get(g, hg, n), *b = get(cpu_ref, hc, n);
            CHECKF(close_enough("add_rmsnorm", a, b, n, 1e-5, 2e-5), "add_rmsnorm %dx%d scale %d", rows, width, with_s);
            free(a), free(b);
            /* the fused residual add + next norm equals the two calls */
            be_buf *h2 = put(g, h, n), *o1 = put(g, NULL, n), *o2 = put(g, NULL, n);
            g->add_rmsnorm_norm(g, h2, xg, wg, with_s ? scg : NULL, wg, rows, width, 1e-6f, o1);
            g->rmsnorm(g, hg, wg, rows, width, 1e-6f, o2);
            float *f1 = get(g, h2, n), *f2 = get(g, hg, n), *g1 = get(g, o1, n), *g2 = get(g, o2, n);
            CHECKF(close_enough("add_rmsnorm_norm h", f1, f2, n, 0, 0) && close_enough("add_rmsnorm_norm out", g1, g2, n, 0, 0),
                   "add_rmsnorm_norm %dx%d scale %d", rows, width, with_s);
            free(f1), free(f2), free(g1), free(g2);
            g->buf_free(g, h2), g->buf_free(g, o1), g->buf_free(g, o2);
            cpu_ref->buf_free(cpu_ref, hc), g->buf_free(g, hg), cpu_ref->buf_free(cpu_ref, xc), g->buf_free(g, xg);
        }
        cpu_ref->weight_free(cpu_ref, scc), g->weight_free(g, scg);
        free_tensor(&sc);
        free(x), free(h);
        cpu_ref->weight_free(cpu_ref, wc), g->weight_free(g, wg);
        free_tensor(&w);
    }
}

/* One norm-to-product handoff on g: rmsnorm of x (fused: the residual add
 * and the next norm, whose second stage writes the codes) into a, then
 * *r1 = W a (the codes the norm left, if any) and *r2 = W of a copy of a
 * (codes the product makes itself), 200 rows of type, n tokens of K (the
 * caller frees both). want_kq >= 0: the first product runs under op
 * timing, which must show its (n + 15) / 16 launches (so the timing saw
 * it) and want_kq k-quant quantizations. */
static void handoff(backend *g, uint32_t type, int K, int n, int fused, int want_kq, float **r1, float **r2) {
    const char *what = fused ? "add_rmsnorm_norm" : "rmsnorm";
    tensor W = make_tensor(type, K, 200), nw = make_tensor(QT_F32, K, 1);
    gem_err err;
    be_weight *wg = g->weight(g, &W.t, &err), *ng = g->weight(g, &nw.t, &err);
    float *x = rand_vec((size_t)n * K, 3.0f), *h = rand_vec((size_t)n * K, 1.0f);
    be_buf *xg = put(g, x, (size_t)n * K), *a = put(g, NULL, (size_t)n * K), *copy = put(g, NULL, (size_t)n * K),
           *hg = put(g, h, (size_t)n * K);
    be_buf *o1 = put(g, NULL, (size_t)n * 200), *o2 = put(g, NULL, (size_t)n * 200);
    be_op_time rows[32];
    if (want_kq >= 0) {
        g->op_timing(g, 1);
        g->op_times(g, rows, 32, 1); /* an empty table */
    }
    if (fused) g->add_rmsnorm_norm(g, hg, xg, ng, NULL, ng, n, K, 1e-6f, a);
    else g->rmsnorm(g, xg, ng, n, K, 1e-6f, a);
    g->matmul(g, wg, a, n, o1); /* codes from the norm, if it left them */
    if (want_kq >= 0) {
        const int nr = g->op_times(g, rows, 32, 1);
        g->op_timing(g, 0);
        long quantized = 0, products = 0;
        for (int i = 0; i < nr; i++) {
            if (!strcmp(rows[i].op, "quantize activations (k-quants)")) quantized += rows[i].calls;
            if (!strncmp(rows[i].op, "matmul", 6)) products += rows[i].calls;
        }
        CHECKF(products == (n + 15) / 16, "%s -> matmul %s K=%d n=%d: the timing saw %ld product launches", what,
               quant_type_name(type), K, n, products);
        CHECKF(quantized == want_kq, "%s -> matmul %s K=%d n=%d: %ld k-quant quantizations", what, quant_type_name(type),
               K, n, quantized);
    }
    g->copy(g, a, 0, copy, 0, (size_t)n * K);
    g->matmul(g, wg, copy, n, o2); /* codes of its own */
    *r1 = get(g, o1, (size_t)n * 200);
    *r2 = get(g, o2, (size_t)n * 200);
    free(x), free(h);
    be_buf *bufs[] = {xg, a, copy, hg, o1, o2};
    for (int i = 0; i < 6; i++) g->buf_free(g, bufs[i]);
    g->weight_free(g, wg), g->weight_free(g, ng);
    free_tensor(&W), free_tensor(&nw);
}

/* The codes a norm leaves for the next product equal those the product
 * makes of a copy of its input itself (bit for bit: the same codes, the
 * same kernel); g: as in test_norms. The plain norm and the fused residual
 * add + norm (its second stage writes the codes), K 1024, 1152, 3840 (12B),
 * 4160 (one-token row on a partial second round of float4) and the 31B's
 * 5376, one token and a tile. */
static void test_norm_handoff(backend *g) {
    const uint32_t types[] = {QT_Q4_0, QT_Q8_0};
    const int Ks[] = {1024, 1152, 3840, 4160, 5376};
    for (size_t t = 0; t < 2; t++)
        for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++)
            for (int n = 1; n <= 300; n += 299)
                for (int fused = 0; fused < 2; fused++) {
                    const int K = Ks[ki];
                    float *r1, *r2;
                    handoff(g, types[t], K, n, fused, -1, &r1, &r2);
                    CHECKF(close_enough("norm handoff", r1, r2, (size_t)n * 200, 0, 0), "%s -> matmul %s K=%d n=%d",
                           fused ? "add_rmsnorm_norm" : "rmsnorm", quant_type_name(types[t]), K, n);
                    free(r1), free(r2);
                }
}

/* k-quant products after a norm: with GEM_CUDA_KQ_NORM=1 (fused_codes set)
 * the norm leaves the 256-value codes (kq_act_block), the product launches
 * no k_quantize_act_k (counted through op_timing's rows), and its results
 * equal those of a copy quantized by the product itself bit for bit;
 * without it the product quantizes once. Token counts ns (one token and a
 * row-exact tile of 13; with GEM_CUDA_MMA=0 also a 40-token prompt tile,
 * whose products take k_mv_k too), the plain norm and the fused residual
 * add + norm, K 1024, 3840, the 31B's 5376 and 8192 (a 1024-thread
 * one-token norm), multiples of 256. */
static void test_norm_handoff_kq(backend *g, int fused_codes, const int *ns, int nn) {
    const uint32_t types[] = {QT_Q4_K, QT_Q6_K};
    const int Ks[] = {1024, 3840, 5376, 8192};
    for (size_t t = 0; t < 2; t++)
        for (size_t ki = 0; ki < 4; ki++)
            for (int ni = 0; ni < nn; ni++)
                for (int fused = 0; fused < 2; fused++) {
                    const int K = Ks[ki], n = ns[ni];
                    float *r1, *r2;
                    handoff(g, types[t], K, n, fused, fused_codes ? 0 : 1, &r1, &r2);
                    CHECKF(!memcmp(r1, r2, sizeof(float) * (size_t)n * 200), "k-quant norm handoff: %s -> matmul %s K=%d n=%d",
                           fused ? "add_rmsnorm_norm" : "rmsnorm", quant_type_name(types[t]), K, n);
                    free(r1), free(r2);
                }
}

void ops_norm(const backend_opts *g) {
    test_norms(gpu);
    test_norm_handoff(gpu);
    backend *gnw = variant("GEM_CUDA_NORM_WIDE", "0", g);
    if (gnw) {
        test_norms(gnw);
        test_norm_handoff(gnw);
    }
    variant_done(gnw);
    static const int tiles[] = {1, 13}, prompt[] = {40};
    test_norm_handoff_kq(gpu, 0, tiles, 2); /* cuda_ops clears GEM_CUDA_KQ_NORM: off */
    backend *gk = variant("GEM_CUDA_KQ_NORM", "1", g);
    if (gk) test_norm_handoff_kq(gk, 1, tiles, 2);
    variant_done(gk);
    setenv("GEM_CUDA_NORM_WIDE", "0", 1); /* the 256-thread one-token norms */
    gk = variant("GEM_CUDA_KQ_NORM", "1", g);
    unsetenv("GEM_CUDA_NORM_WIDE");
    if (gk) test_norm_handoff_kq(gk, 1, tiles, 2);
    variant_done(gk);
    /* prompt tiles on k_mv_k: the norm leaves their codes too (the
     * runner's own GEM_CUDA_MMA, which mma_on reads, restored after) */
    const char *mma = getenv("GEM_CUDA_MMA");
    char *saved = mma ? strdup(mma) : NULL;
    setenv("GEM_CUDA_MMA", "0", 1);
    gk = variant("GEM_CUDA_KQ_NORM", "1", g);
    if (saved) setenv("GEM_CUDA_MMA", saved, 1);
    else unsetenv("GEM_CUDA_MMA");
    free(saved);
    if (gk) test_norm_handoff_kq(gk, 1, prompt, 1);
    variant_done(gk);
}
