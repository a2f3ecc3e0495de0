/* cuda_ops family matmul (see ops_harness.h): matmul, matmul_multi and
 * matmul_geglu on every path: one-token and small-batch dp4a products
 * (split rows and the unsplit kernel, GEM_CUDA_MV_SPLIT=0; the staggered
 * first wave against none), the f16 prefill products (k_mm_w, and k_mm_h
 * with GEM_CUDA_MMH=2), operand ranges f16 cannot hold as they are, and
 * the prefill geglu's f16 activations. */
#include "ops_harness.h"

/* Fused launches against their unfused GPU equivalents: the same
 * arithmetic per row, so exactly equal. The geglu pair's reference comes
 * from gu (GEM_CUDA_MV_SPLIT=0): the fused pair never splits a row, the
 * default's one-token products of K >= 8192 do (another order). */
static void test_fused_matmul(backend *gu) {
    const uint32_t types[] = {QT_Q4_0, QT_Q8_0, QT_F16, QT_Q4_K, QT_Q6_K};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
        for (int n = 1; n <= 9; n += 8)
        for (int64_t K = 1024; K <= 16384; K *= 16) { /* 16384: long rows */
            tensor A = make_tensor(types[t], K, 300), B = make_tensor(types[t], K, 64), C = make_tensor(types[t], K, 300);
            gem_err err;
            be_weight *W[3] = {gpu->weight(gpu, &A.t, &err), gpu->weight(gpu, &B.t, &err), gpu->weight(gpu, &C.t, &err)};
            float *x = rand_vec((size_t)n * K, 1.0f);
            be_buf *xg = put(gpu, x, (size_t)n * K);
            be_buf *o[3] = {put(gpu, NULL, (size_t)n * 300), put(gpu, NULL, (size_t)n * 64), put(gpu, NULL, (size_t)n * 300)};
            be_buf *r[3] = {put(gpu, NULL, (size_t)n * 300), put(gpu, NULL, (size_t)n * 64), put(gpu, NULL, (size_t)n * 300)};
            gpu->matmul_multi(gpu, 3, (const be_weight *const *)W, xg, n, o);
            for (int i = 0; i < 3; i++) gpu->matmul(gpu, W[i], xg, n, r[i]);
            int same = 1;
            for (int i = 0; i < 3; i++) {
                const size_t len = (size_t)n * (i == 1 ? 64 : 300);
                float *a = get(gpu, o[i], len), *b = get(gpu, r[i], len);
                same &= close_enough("matmul_multi", a, b, len, 0, 0);
                free(a), free(b);
            }
            CHECKF(same, "matmul_multi %s n=%d", quant_type_name(types[t]), n);
            /* geglu pair: gate = A, up = C */
            be_buf *fused = put(gpu, NULL, (size_t)n * 300);
            gpu->matmul_geglu(gpu, W[0], W[2], xg, n, fused);
            be_weight *ua = gu->weight(gu, &A.t, &err), *uc = gu->weight(gu, &C.t, &err);
            be_buf *ux = put(gu, x, (size_t)n * K), *ur[3] = {put(gu, NULL, (size_t)n * 300), put(gu, NULL, (size_t)n * 300),
                                                             put(gu, NULL, (size_t)n * 300)};
            gu->matmul(gu, ua, ux, n, ur[0]);
            gu->matmul(gu, uc, ux, n, ur[1]);
            gu->geglu(gu, ur[0], ur[1], (size_t)n * 300, ur[2]);
            float *a = get(gpu, fused, (size_t)n * 300), *b = get(gu, ur[2], (size_t)n * 300);
            CHECKF(close_enough("matmul_geglu", a, b, (size_t)n * 300, 0, 0), "matmul_geglu %s n=%d",
                   quant_type_name(types[t]), n);
            free(a), free(b), free(x);
            for (int i = 0; i < 3; i++) gu->buf_free(gu, ur[i]);
            gu->buf_free(gu, ux), gu->weight_free(gu, ua), gu->weight_free(gu, uc);
            gpu->buf_free(gpu, fused), gpu->buf_free(gpu, xg);
            for (int i = 0; i < 3; i++) gpu->buf_free(gpu, o[i]), gpu->buf_free(gpu, r[i]), gpu->weight_free(gpu, W[i]);
            free_tensor(&A), free_tensor(&B), free_tensor(&C);
        }
}

/* k_mv_q's staggered first wave (the default, mv_stagger_start) only
 * delays blocks: one-token products equal those of GEM_CUDA_MV_STAGGER=0
 * (g0) exactly, also with 64 levels of 20 us (gl: blocks wait up to 1.26
 * ms, so later waves overtake waiting ones). Three matrices sharing the
 * input and the geglu pair (gate and up distinct), single products of 4999
 * rows (625 or 2500 blocks, past one wave of the H200's 528) and of 61
 * rows (8 or 31 blocks: one wave, started at once), q4_0 and q8_0, plain and split rows
 * (K 16384: four warps per row). gl also shows the delay is there: its
 * 4999-row product returns no sooner than its longest wait (63 x 20 us),
 * its 61-row one well before it. */
static void test_matmul_stagger(backend *g0, backend *gl) {
    const uint32_t types[] = {QT_Q4_0, QT_Q8_0};
    const int64_t Ks[] = {1024, 5376, 16384};
    for (size_t t = 0; t < 2; t++)
        for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++) {
            const int64_t K = Ks[ki];
            /* gate/up: 0, 2; outputs 4 and 5: single products of 0 and 1 */
            const int64_t rows[3] = {4999, 61, 4999}, orows[6] = {4999, 61, 4999, 4999, 4999, 61};
            tensor A[3] = {make_tensor(types[t], K, rows[0]), make_tensor(types[t], K, rows[1]),
                           make_tensor(types[t], K, rows[2])};
            float *x = rand_vec((size_t)K, 1.0f);
            backend *bs[3] = {g0, gpu, gl};
            float *res[3][6];
            double took[2] = {0, 0};
            gem_err err;
            for (int bi = 0; bi < 3; bi++) {
                backend *g = bs[bi];
                be_weight *W[3];
                for (int i = 0; i < 3; i++) W[i] = g->weight(g, &A[i].t, &err);
                be_buf *xg = put(g, x, (size_t)K), *o[6];
                for (int i = 0; i < 6; i++) o[i] = put(g, NULL, (size_t)orows[i]);
                g->matmul_multi(g, 3, (const be_weight *const *)W, xg, 1, o);
                g->matmul_geglu(g, W[0], W[2], xg, 1, o[3]);
                for (int i = 0; i < 3; i++) res[bi][i] = get(g, o[i], (size_t)orows[i]);
                res[bi][3] = get(g, o[3], (size_t)orows[3]);
                for (int s = 0; s < 2; s++) { /* timed from an idle stream (get waited) */
                    const double t0 = seconds_now();
                    g->matmul(g, W[s], xg, 1, o[4 + s]);
                    res[bi][4 + s] = get(g, o[4 + s], (size_t)orows[4 + s]);
                    if (bi == 2) took[s] = seconds_now() - t0;
                }
                for (int i = 0; i < 6; i++) g->buf_free(g, o[i]);
                g->buf_free(g, xg);
                for (int i = 0; i < 3; i++) g->weight_free(g, W[i]);
            }
            static const char *const names[3] = {"", "the default stagger", "64 levels of 20 us"};
            for (int bi = 1; bi < 3; bi++) {
                int same = 1;
                for (int i = 0; i < 6; i++)
                    same &= close_enough("k_mv_q stagger", res[bi][i], res[0][i], (size_t)orows[i], 0, 0);
                CHECKF(same, "k_mv_q with %s, %s K=%lld: multi, geglu pair and single products equal no stagger",
                       names[bi], quant_type_name(types[t]), (long long)K);
            }
            CHECKF(took[0] >= 1.26e-3, "64 levels of 20 us: a 625-block product took %.3f ms, under its 1.26 ms wait",
                   took[0] * 1e3);
            CHECKF(took[1] < 1.0e-3, "64 levels of 20 us: a one-wave product (no stagger) took %.3f ms",
                   took[1] * 1e3);
            for (int bi = 0; bi < 3; bi++)
                for (int i = 0; i < 6; i++) free(res[bi][i]);
            free(x);
            for (int i = 0; i < 3; i++) free_tensor(&A[i]);
        }
}

static void test_matmul(void) {
    const uint32_t types[] = {QT_F32, QT_F16, QT_BF16, QT_Q8_0, QT_Q4_0, QT_Q4_K, QT_Q5_K, QT_Q6_K};
    /* 70 and 300: prefill tiles (tensor cores unless GEM_CUDA_MMA=0) over
     * one and three token tiles of the staged kernel, two and five of the
     * direct one; k-quants: 16-token launches, the last one partial */
    const int ns[] = {1, 3, 8, 13, 70, 300};
    /* K = 16384: long matrix-vector rows (decode sizes only); 1536 (48 blocks) takes the staged tensor-core kernel, 1568 (49,
     * not a multiple of its 4-block stage) the direct one; k-quant rows
     * need a multiple of 256: 1536 (6 super-blocks, fewer than a warp's 8
     * slots), 5376 (21: the 31B's width, a last round of 5), 10240 (40:
     * two warps a row, the second's last round partial) and 16384 (64:
     * four warps a row) */
    const int64_t Ks[] = {16384, 1536, 1568}, Kk[] = {16384, 1536, 5376, 10240};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
    for (size_t ki = 0;
         ki < (quant_block_size(types[t]) == 256 ? 4u : types[t] == QT_Q8_0 || types[t] == QT_Q4_0 ? 3u : 2u); ki++) {
        const int kq = quant_block_size(types[t]) == 256;
        const int64_t K = kq ? Kk[ki] : Ks[ki], M = 333; /* M odd: a warp's second row runs off the end */
        tensor W = make_tensor(types[t], K, M);
        gem_err err;
        be_weight *wr = cpu_ref->weight(cpu_ref, &W.t, &err), *wf = cpu_fast->weight(cpu_fast, &W.t, &err),
                  *wg = gpu->weight(gpu, &W.t, &err);
        CHECKF(wg != NULL, "%s", err.msg);
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
            const int n = ns[ni];
            if (K > 8192 && n > 13) continue; /* the long rows matter to decode; keeps the f64 bounds cheap */
            float *x = rand_vec((size_t)n * K, 1.0f);
            for (int64_t i = 0; i < n * K; i += 97) x[i] *= 30.0f; /* outliers stress the activation scales */
            be_buf *xr = put(cpu_ref, x, (size_t)n * K), *xf = put(cpu_fast, x, (size_t)n * K), *xg = put(gpu, x, (size_t)n * K);
            be_buf *orf = put(cpu_ref, NULL, (size_t)n * M), *of = put(cpu_fast, NULL, (size_t)n * M),
                   *og = put(gpu, NULL, (size_t)n * M);
            cpu_ref->matmul(cpu_ref, wr, xr, n, orf);
            cpu_fast->matmul(cpu_fast, wf, xf, n, of);
            gpu->matmul(gpu, wg, xg, n, og);
            float *a = get(gpu, og, (size_t)n * M), *r = get(cpu_ref, orf, (size_t)n * M), *f = get(cpu_fast, of, (size_t)n * M);
            int ok = 1;
            for (int i = 0; i < n && ok; i++)
                for (int64_t o = 0; o < M && ok; o++) {
                    double bound;
                    const double mag = row_mag_blocks(&W, x, K, i, o, kq ? 256 : 32, &bound);
                    const double got = a[(size_t)i * M + o], ref = r[(size_t)i * M + o], fast = f[(size_t)i * M + o];
                    const int quant8 = types[t] == QT_Q8_0 || types[t] == QT_Q4_0;
                    /* prefill tiles with K a multiple of 128 run k_mm_h: f16
                     * activations and weights (relative 2^-11 each, so 2^-10
                     * per product) instead of 8-bit activation codes; tiles
                     * up to BE_EXACT_ROWS stay on the one-token kernels */
                    /* k-quants: expanded to f16 (kq_f16, one rounding of
                     * each value) for the same k_mm_w */
                    const int f16 = (quant8 || kq) && n > BE_EXACT_ROWS && mma_on() && (K / 32) % 4 == 0;
                    /* k-quants: 8-bit codes per 256 activations, the CPU
                     * fast path's, so it differs in f32 order alone */
                    const int int8 = (quant8 || kq) && !f16;
                    const double tol_ref = f16 ? (1.0 / 1024 + 1e-5) * mag * 1.0001 : int8 ? bound + 1e-5 * mag : 1e-5 * mag;
                    if (!(fabs(got - ref) <= tol_ref + 1e-6)) {
                        fprintf(stderr, "matmul %s n=%d row %lld token %d: gpu %.9g ref %.9g (tol %.3g)\n",
                                quant_type_name(types[t]), n, (long long)o, i, got, ref, tol_ref);
                        ok = 0;
                    }
                    if (int8 && !(fabs(got - fast) <= 1e-5 * mag + 1e-6)) {
                        fprintf(stderr, "matmul %s n=%d row %lld token %d: gpu %.9g cpu fast %.9g\n",
                                quant_type_name(types[t]), n, (long long)o, i, got, fast);
                        ok = 0;
                    }
                }
            CHECKF(ok, "matmul %s K=%lld n=%d", quant_type_name(types[t]), (long long)K, n);
            /* rows_exact: a tile of up to BE_EXACT_ROWS tokens gives each
             * token's row bit for bit as a one-token product of it */
            if (n > 1 && n <= BE_EXACT_ROWS) {
                int same = 1;
                for (int i = 0; i < n && same; i++) {
                    be_buf *x1 = put(gpu, x + (size_t)i * K, (size_t)K), *o1 = put(gpu, NULL, (size_t)M);
                    gpu->matmul(gpu, wg, x1, 1, o1);
                    float *a1 = get(gpu, o1, (size_t)M);
                    same = !memcmp(a1, a + (size_t)i * M, sizeof(float) * (size_t)M);
                    free(a1);
                    gpu->buf_free(gpu, x1), gpu->buf_free(gpu, o1);
                }
                CHECKF(same, "matmul %s K=%lld n=%d: a row differs from its one-token product", quant_type_name(types[t]),
                       (long long)K, n);
            }
            free(a), free(r), free(f), free(x);
            cpu_ref->buf_free(cpu_ref, xr), cpu_fast->buf_free(cpu_fast, xf), gpu->buf_free(gpu, xg);
            cpu_ref->buf_free(cpu_ref, orf), cpu_fast->buf_free(cpu_fast, of), gpu->buf_free(gpu, og);
        }
        cpu_ref->weight_free(cpu_ref, wr), cpu_fast->weight_free(cpu_fast, wf), gpu->weight_free(gpu, wg);
        free_tensor(&W);
    }
}

/* One-token products with rows split over 2 or 4 warps (the default for
 * K >= 8192) against the unsplit kernel (gu: GEM_CUDA_MV_SPLIT=0): the
 * same integer block sums, parts added in another order, so within 1e-5 of
 * the sum of |terms|. */
static void test_matmul_split(backend *gu) {
    backend *gs = gpu; /* the default: split */
    const uint32_t types[] = {QT_Q4_0, QT_Q8_0};
    const int64_t Ks[] = {8192, 21504};
    for (size_t t = 0; t < 2; t++)
        for (size_t ki = 0; ki < 2; ki++) {
            const int64_t K = Ks[ki], M = 333;
            tensor W = make_tensor(types[t], K, M);
            gem_err err;
            be_weight *wg = gu->weight(gu, &W.t, &err), *ws = gs->weight(gs, &W.t, &err);
            float *x = rand_vec((size_t)K, 1.0f);
            be_buf *xg = put(gu, x, (size_t)K), *xs = put(gs, x, (size_t)K);
            be_buf *og = put(gu, NULL, (size_t)M), *os = put(gs, NULL, (size_t)M);
            gu->matmul(gu, wg, xg, 1, og);
            gs->matmul(gs, ws, xs, 1, os);
            float *a = get(gu, og, (size_t)M), *b = get(gs, os, (size_t)M);
            int ok = 1;
            for (int64_t o = 0; o < M && ok; o++) {
                const double mag = row_mag(&W, x, K, 0, o, NULL);
                if (!(fabs((double)a[o] - b[o]) <= 1e-5 * mag + 1e-6)) {
                    fprintf(stderr, "split matmul %s K=%lld row %lld: %.9g vs unsplit %.9g\n", quant_type_name(types[t]),
                            (long long)K, (long long)o, b[o], a[o]);
                    ok = 0;
                }
            }
            CHECKF(ok, "split matmul %s K=%lld", quant_type_name(types[t]), (long long)K);
            free(a), free(b), free(x);
            gu->buf_free(gu, xg), gs->buf_free(gs, xs), gu->buf_free(gu, og), gs->buf_free(gs, os);
            gu->weight_free(gu, wg), gs->weight_free(gs, ws);
            free_tensor(&W);
        }
}

/* Prefill geglu makes the down product's f16 activations in the same
 * launch (k_geglu_f16): the pair and the down product equal separate
 * products, k_geglu and a down product that converts its input itself
 * (k_act_f16), bit for bit (the same arithmetic); q8_0, q4_0 and the
 * k-quants (expanded to f16 per product, kq_f16), a token count that is
 * not a multiple of the tile. */
static void test_geglu_f16(void) {
    const uint32_t types[] = {QT_Q4_0, QT_Q8_0, QT_Q4_K, QT_Q6_K};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const int64_t K = 1536, F = 1024;
        const int n = 300;
        tensor G = make_tensor(types[t], K, F), U = make_tensor(types[t], K, F), D = make_tensor(types[t], F, 200);
        gem_err err;
        float *x = rand_vec((size_t)n * K, 1.0f);
        be_weight *wg = gpu->weight(gpu, &G.t, &err), *wu = gpu->weight(gpu, &U.t, &err), *wd = gpu->weight(gpu, &D.t, &err);
        be_buf *xb = put(gpu, x, (size_t)n * K), *act = put(gpu, NULL, (size_t)n * F), *o = put(gpu, NULL, (size_t)n * 200);
        be_buf *ga = put(gpu, NULL, (size_t)n * F), *ua = put(gpu, NULL, (size_t)n * F), *o2 = put(gpu, NULL, (size_t)n * 200);
        gpu->matmul_geglu(gpu, wg, wu, xb, n, act);
        gpu->matmul(gpu, wd, act, n, o);
        gpu->matmul(gpu, wg, xb, n, ga);
        gpu->matmul(gpu, wu, xb, n, ua);
        gpu->geglu(gpu, ga, ua, (size_t)n * F, ga);
        gpu->matmul(gpu, wd, ga, n, o2);
        float *a1 = get(gpu, act, (size_t)n * F), *a2 = get(gpu, ga, (size_t)n * F);
        float *d1 = get(gpu, o, (size_t)n * 200), *d2 = get(gpu, o2, (size_t)n * 200);
        CHECKF(close_enough("geglu f16 act", a1, a2, (size_t)n * F, 0, 0) &&
                   close_enough("geglu f16 down", d1, d2, (size_t)n * 200, 0, 0),
               "fused geglu + f16 activations %s", quant_type_name(types[t]));
        free(a1), free(a2), free(d1), free(d2), free(x);
        gpu->buf_free(gpu, xb), gpu->buf_free(gpu, act), gpu->buf_free(gpu, o);
        gpu->buf_free(gpu, ga), gpu->buf_free(gpu, ua), gpu->buf_free(gpu, o2);
        gpu->weight_free(gpu, wg), gpu->weight_free(gpu, wu), gpu->weight_free(gpu, wd);
        free_tensor(&G), free_tensor(&U), free_tensor(&D);
    }
}

/* The f16 prefill products, k_mm_w (the default, warpgroup MMA) and
 * k_mm_h (g2: GEM_CUDA_MMH=2, mma.sync), against the scalar reference
 * with one bound (the same f16 operands; the tensor cores may sum a k16
 * step in another order): token counts below, at and over the 128-token
 * tile, K of one and of several pipeline stages, M not a multiple of the
 * 128 rows. */
static void test_matmul_f16_on(backend *gb, const char *name) {
    const uint32_t types[] = {QT_Q8_0, QT_Q4_0};
    const int64_t Ks[] = {128, 1536, 4096};
    const int ns[] = {BE_EXACT_ROWS + 1, 70, 300}; /* fewer take the one-token kernels */
    for (size_t t = 0; t < 2; t++)
        for (size_t ki = 0; ki < 3; ki++) {
            const int64_t K = Ks[ki], M = 333;
            tensor W = make_tensor(types[t], K, M);
            gem_err err;
            be_weight *wr = cpu_ref->weight(cpu_ref, &W.t, &err), *wg = gb->weight(gb, &W.t, &err);
            for (size_t ni = 0; ni < 3; ni++) {
                const int n = ns[ni];
                float *x = rand_vec((size_t)n * K, 1.0f);
                be_buf *xr = put(cpu_ref, x, (size_t)n * K), *xg = put(gb, x, (size_t)n * K);
                be_buf *orf = put(cpu_ref, NULL, (size_t)n * M), *og = put(gb, NULL, (size_t)n * M);
                cpu_ref->matmul(cpu_ref, wr, xr, n, orf);
                gb->matmul(gb, wg, xg, n, og);
                float *a = get(gb, og, (size_t)n * M), *r = get(cpu_ref, orf, (size_t)n * M);
                int ok = 1;
                for (int i = 0; i < n && ok; i++)
                    for (int64_t o = 0; o < M && ok; o++) {
                        const double mag = row_mag(&W, x, K, i, o, NULL);
                        const double got = a[(size_t)i * M + o], ref = r[(size_t)i * M + o];
                        if (!(fabs(got - ref) <= (1.0 / 1024 + 1e-5) * mag * 1.0001 + 1e-6)) {
                            fprintf(stderr, "%s matmul %s K=%lld n=%d row %lld token %d: gpu %.9g ref %.9g\n", name,
                                    quant_type_name(types[t]), (long long)K, n, (long long)o, i, got, ref);
                            ok = 0;
                        }
                    }
                CHECKF(ok, "%s matmul %s K=%lld n=%d", name, quant_type_name(types[t]), (long long)K, n);
                free(a), free(r), free(x);
                cpu_ref->buf_free(cpu_ref, xr), gb->buf_free(gb, xg), cpu_ref->buf_free(cpu_ref, orf), gb->buf_free(gb, og);
            }
            cpu_ref->weight_free(cpu_ref, wr), gb->weight_free(gb, wg);
            free_tensor(&W);
        }
}

/* A grid that fills the GPU with two blocks per SM (races show here): two
 * runs of k_mm_w bit-identical, and against k_mm_h (g2: the same f16
 * operands, another summation order) within 1e-4 of sum |terms| on a
 * sample. */
static void test_matmul_wgmma_grid(backend *g2) {
    backend *g3 = gpu; /* the default: k_mm_w */
    const int64_t K = 4096, M = 4096;
    const int n = 512;
    tensor W = make_tensor(QT_Q4_0, K, M);
    gem_err err;
    be_weight *w3 = g3->weight(g3, &W.t, &err), *wh = g2->weight(g2, &W.t, &err);
    float *x = rand_vec((size_t)n * K, 1.0f);
    be_buf *x3 = put(g3, x, (size_t)n * K), *xh = put(g2, x, (size_t)n * K);
    be_buf *o1 = put(g3, NULL, (size_t)n * M), *o2 = put(g3, NULL, (size_t)n * M), *oh = put(g2, NULL, (size_t)n * M);
    g3->matmul(g3, w3, x3, n, o1);
    g3->matmul(g3, w3, x3, n, o2);
    g2->matmul(g2, wh, xh, n, oh);
    float *a = get(g3, o1, (size_t)n * M), *b = get(g3, o2, (size_t)n * M), *h = get(g2, oh, (size_t)n * M);
    CHECKF(close_enough("wgmma rerun", a, b, (size_t)n * M, 0, 0), "wgmma matmul: two runs differ");
    int ok = 1;
    for (size_t i = 0; i < (size_t)n * M && ok; i += 97) {
        const size_t tok = i / M, row = i % M;
        const double mag = row_mag(&W, x, K, (int)tok, (int64_t)row, NULL);
        if (!(fabs((double)a[i] - h[i]) <= 1e-4 * mag)) {
            fprintf(stderr, "wgmma vs k_mm_h row %zu token %zu: %.9g vs %.9g\n", row, tok, a[i], h[i]);
            ok = 0;
        }
    }
    CHECKF(ok, "wgmma matmul against k_mm_h (M=K=4096, n=512)");
    free(a), free(b), free(h), free(x);
    g3->buf_free(g3, x3), g2->buf_free(g2, xh), g3->buf_free(g3, o1), g3->buf_free(g3, o2), g2->buf_free(g2, oh);
    g3->weight_free(g3, w3), g2->weight_free(g2, wh);
    free_tensor(&W);
}

/* Value ranges an f16 operand cannot hold as they are: q8_0 scales of 600
 * (|code x scale| up to 76800, over f16's 65504) with activations of 1e-9
 * (below f16's smallest subnormal), q4_0 scales of 1e4 (|code x scale| up
 * to 80000) with activations of 1e5 (over 65504), and scales of 1e-7 (f16
 * subnormals) with activations of 1e4. The prefill products scale both
 * operands by powers of two, so the results keep the relative error of the
 * normal range; unscaled f16 operands would give inf or lose the products. */
static void test_matmul_ranges(backend *gb) {
    const uint32_t types[] = {QT_Q8_0, QT_Q4_0};
    const float dscale[2][2] = {{600.0f, 1e-7f}, {1e4f, 1e-7f}}, xscale[2][2] = {{1e-9f, 1e4f}, {1e5f, 1e4f}};
    for (size_t t = 0; t < 2; t++)
        for (int r = 0; r < 2; r++) {
            const int64_t K = 1024, M = 130;
            const int n = 40;
            tensor W = make_tensor(types[t], K, M);
            const uint32_t ts = quant_type_size(types[t]);
            uint64_t rb = 0;
            quant_row_bytes(types[t], K, &rb);
            for (int64_t row = 0; row < M; row++) {
                for (int64_t b = 0; b < K / 32; b++) {
                    uint8_t *blk = W.data + rb * (size_t)row + b * ts;
                    const uint16_t d = quant_f32_to_f16(dscale[t][r] * (0.5f + 0.5f * fabsf(frand())));
                    memcpy(blk, &d, 2);
                }
                quant_dequant_row(types[t], W.data + rb * (size_t)row, W.deq + K * row, K);
            }
            gem_err err;
            be_weight *wr = cpu_ref->weight(cpu_ref, &W.t, &err), *wg = gb->weight(gb, &W.t, &err);
            float *x = rand_vec((size_t)n * K, xscale[t][r]);
            be_buf *xr = put(cpu_ref, x, (size_t)n * K), *xg = put(gb, x, (size_t)n * K);
            be_buf *orf = put(cpu_ref, NULL, (size_t)n * M), *og = put(gb, NULL, (size_t)n * M);
            cpu_ref->matmul(cpu_ref, wr, xr, n, orf);
            gb->matmul(gb, wg, xg, n, og);
            float *a = get(gb, og, (size_t)n * M), *b = get(cpu_ref, orf, (size_t)n * M);
            int ok = 1;
            for (int i = 0; i < n && ok; i++)
                for (int64_t o = 0; o < M && ok; o++) {
                    double bound;
                    const double mag = row_mag(&W, x, K, i, o, &bound);
                    /* the path's own bound (no absolute slack: the values
                     * are tiny or huge on purpose) */
                    const double tol = mma_on() ? (1.0 / 1024 + 1e-5) * mag * 1.0001 : bound + 1e-5 * mag;
                    const double got = a[(size_t)i * M + o], ref = b[(size_t)i * M + o];
                    if (!(fabs(got - ref) <= tol)) {
                        fprintf(stderr, "matmul range %s d~%g x~%g row %lld token %d: gpu %.9g ref %.9g (tol %.3g)\n",
                                quant_type_name(types[t]), dscale[t][r], xscale[t][r], (long long)o, i, got, ref, tol);
                        ok = 0;
                    }
                }
            CHECKF(ok, "matmul value ranges %s d~%g x~%g", quant_type_name(types[t]), dscale[t][r], xscale[t][r]);
            free(a), free(b), free(x);
            cpu_ref->buf_free(cpu_ref, xr), gb->buf_free(gb, xg), cpu_ref->buf_free(cpu_ref, orf), gb->buf_free(gb, og);
            cpu_ref->weight_free(cpu_ref, wr), gb->weight_free(gb, wg);
            free_tensor(&W);
        }
}

/* Row-exact tiles (backend.h, rows_exact) on every kernel a tile of 2 ..
 * BE_EXACT_ROWS tokens takes (k_vr_q on the tensor cores; the dp4a
 * matrix-vector kernels with GEM_CUDA_MMA=0 or K / 32 not a multiple of 8):
 * each token's row of matmul, matmul_multi (three matrices in one launch)
 * and matmul_geglu equals, bit for bit, the one-token product of that
 * token. K: unsplit rows whose last pipeline stage is half full (5376, the
 * 31B's width), rows split over 2 and 4 warps (8192, 21504; 8448 and
 * 16640 with their last stage half full), a short row
 * (1536: fewer blocks than lanes in some classes) and one the tensor-core
 * tile does not take (1568); token counts on both sides of k_vr_q's
 * smallest (5) and of 8 (one or two 8-token mma tiles); M not a multiple
 * of the 32-row tile. */
static void test_matmul_tiles_exact(void) {
    const uint32_t types[] = {QT_Q4_0, QT_Q8_0};
    const int64_t Ks[] = {5376, 8192, 21504, 8448, 16640, 1536, 1568};
    const int ns[] = {2, 4, 5, 8, 9, 16};
    for (size_t t = 0; t < 2; t++)
        for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++) {
            const int64_t K = Ks[ki], rows[3] = {333, 40, 333};
            tensor A[3] = {make_tensor(types[t], K, rows[0]), make_tensor(types[t], K, rows[1]),
                           make_tensor(types[t], K, rows[2])};
            gem_err err;
            be_weight *W[3];
            for (int i = 0; i < 3; i++) W[i] = gpu->weight(gpu, &A[i].t, &err);
            for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
                const int n = ns[ni];
                float *x = rand_vec((size_t)n * K, 1.0f);
                for (int64_t i = 0; i < n * K; i += 89) x[i] *= 20.0f;
                be_buf *xg = put(gpu, x, (size_t)n * K);
                be_buf *o[4], *o1[4];
                for (int i = 0; i < 3; i++) o[i] = put(gpu, NULL, (size_t)n * rows[i]), o1[i] = put(gpu, NULL, (size_t)rows[i]);
                o[3] = put(gpu, NULL, (size_t)n * rows[0]), o1[3] = put(gpu, NULL, (size_t)rows[0]);
                gpu->matmul_multi(gpu, 3, (const be_weight *const *)W, xg, n, o);
                gpu->matmul_geglu(gpu, W[0], W[2], xg, n, o[3]);
                float *tile[4];
                for (int i = 0; i < 4; i++) tile[i] = get(gpu, o[i], (size_t)n * rows[i == 3 ? 0 : i]);
                int same = 1;
                for (int tok = 0; tok < n && same; tok++) {
                    be_buf *x1 = put(gpu, x + (size_t)tok * K, (size_t)K);
                    for (int i = 0; i < 3; i++) gpu->matmul(gpu, W[i], x1, 1, o1[i]);
                    gpu->matmul_geglu(gpu, W[0], W[2], x1, 1, o1[3]);
                    for (int i = 0; i < 4 && same; i++) {
                        const int64_t M = rows[i == 3 ? 0 : i];
                        float *a1 = get(gpu, o1[i], (size_t)M);
                        for (int64_t r = 0; r < M && same; r++)
                            if (memcmp(&a1[r], &tile[i][(size_t)tok * M + r], sizeof(float))) {
                                fprintf(stderr, "tile %s K=%lld n=%d %s row %lld token %d: %.9g, one-token %.9g\n",
                                        quant_type_name(types[t]), (long long)K, n,
                                        i == 3 ? "geglu" : i == 1 ? "multi[1]" : "multi", (long long)r, tok,
                                        tile[i][(size_t)tok * M + r], a1[r]);
                                same = 0;
                            }
                        free(a1);
                    }
                    gpu->buf_free(gpu, x1);
                }
                CHECKF(same, "row-exact tile %s K=%lld n=%d (%s)", quant_type_name(types[t]), (long long)K, n,
                       mma_on() ? "defaults" : "GEM_CUDA_MMA=0");
                for (int i = 0; i < 4; i++) free(tile[i]), gpu->buf_free(gpu, o[i]), gpu->buf_free(gpu, o1[i]);
                gpu->buf_free(gpu, xg);
                free(x);
            }
            for (int i = 0; i < 3; i++) gpu->weight_free(gpu, W[i]), free_tensor(&A[i]);
        }
}

/* k-quant prefill tiles: k_mm_w expanding the blocks itself (gx:
 * GEM_CUDA_KQ_F16=0) gives the products of the f16 expansion (gy: kq_f16,
 * GEM_CUDA_KQ_F16=1) bit for bit, since both make the same f16 values and
 * the same wgmma sequence. Both set explicitly, so the comparison holds
 * whatever the default.
 * K = 5376: 21 super-blocks (42 stages), M = 333: clamped last rows and an
 * odd count of q6_k scales; 300 tokens: three token tiles, the last
 * partial. */
static void test_matmul_kq_inkernel(backend *gx, backend *gy) {
    const uint32_t types[] = {QT_Q4_K, QT_Q5_K, QT_Q6_K};
    const int64_t Ks[] = {1536, 5376};
    for (size_t t = 0; t < 3; t++)
        for (size_t ki = 0; ki < 2; ki++) {
            const int64_t K = Ks[ki], M = 333;
            const int n = 300;
            tensor W = make_tensor(types[t], K, M);
            /* negative scales too (make_tensor's are positive): d of every
             * other super-block, dmin of every third (deq goes stale: this
             * test compares the two GPU paths only) */
            const uint32_t bb = quant_type_size(types[t]);
            for (int64_t b = 0; b < K / 256 * M; b++) {
                uint8_t *blk = W.data + b * bb;
                if (types[t] == QT_Q6_K) {
                    if (b & 1) blk[209] ^= 0x80;
                } else {
                    if (b & 1) blk[1] ^= 0x80;
                    if (b % 3 == 0) blk[3] ^= 0x80;
                }
            }
            gem_err err;
            be_weight *wx = gx->weight(gx, &W.t, &err), *wg = gy->weight(gy, &W.t, &err);
            CHECKF(wx && wg, "%s", err.msg);
            float *x = rand_vec((size_t)n * K, 1.0f);
            be_buf *xx = put(gx, x, (size_t)n * K), *xg = put(gy, x, (size_t)n * K);
            be_buf *ox = put(gx, NULL, (size_t)n * M), *og = put(gy, NULL, (size_t)n * M);
            gx->matmul(gx, wx, xx, n, ox);
            gy->matmul(gy, wg, xg, n, og);
            float *a = get(gx, ox, (size_t)n * M), *b = get(gy, og, (size_t)n * M);
            CHECKF(!memcmp(a, b, sizeof(float) * (size_t)n * M), "matmul %s K=%lld n=%d: k_mm_w's own expansion differs from kq_f16's",
                   quant_type_name(types[t]), (long long)K, n);
            free(a), free(b), free(x);
            gx->buf_free(gx, xx), gy->buf_free(gy, xg), gx->buf_free(gx, ox), gy->buf_free(gy, og);
            gx->weight_free(gx, wx), gy->weight_free(gy, wg);
            free_tensor(&W);
        }
}

void ops_matmul(const backend_opts *g) {
    test_matmul();
    test_matmul_tiles_exact();
    test_matmul_ranges(gpu);
    backend *gu = variant("GEM_CUDA_MV_SPLIT", "0", g);
    if (gu) {
        test_matmul_split(gu);
        test_fused_matmul(gu);
    }
    variant_done(gu);
    backend *g0 = variant("GEM_CUDA_MV_STAGGER", "0", g);
    setenv("GEM_CUDA_MV_LEVELS", "64", 1);
    backend *gl = variant("GEM_CUDA_MV_STAGGER", "20000", g);
    unsetenv("GEM_CUDA_MV_LEVELS");
    if (g0 && gl) test_matmul_stagger(g0, gl);
    variant_done(g0);
    variant_done(gl);
    if (mma_on()) test_geglu_f16();
    if (mma_on()) { /* cuda_ops clears GEM_CUDA_MMH: k_mm_w is on */
        backend *gx = variant("GEM_CUDA_KQ_F16", "0", g), *gy = variant("GEM_CUDA_KQ_F16", "1", g);
        if (gx && gy) test_matmul_kq_inkernel(gx, gy);
        variant_done(gx);
        variant_done(gy);
    }
    backend *g2 = variant("GEM_CUDA_MMH", "2", g);
    if (g2) {
        if (mma_on()) {
            test_matmul_f16_on(gpu, "wgmma");
            test_matmul_f16_on(g2, "k_mm_h");
            test_matmul_wgmma_grid(g2);
        }
        test_matmul_ranges(g2); /* k_mm_h's epilogue at extreme operand exponents */
    }
    variant_done(g2);
}
