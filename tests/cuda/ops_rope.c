/* cuda_ops family rope (see ops_harness.h): rope, rmsnorm_rope and
 * qkv_norm_rope (both of its kernels, K as V) against the CPU and the
 * separate calls. */
#include "ops_harness.h"

/* gr: the backend under test. The q/k/v launch runs k_qkv_norm_rope_e
 * for heads of 256 and 512 and k_qkv_norm_rope for the others (head 128
 * here). */
static void test_rope(backend *gr) {
    const int pos0s[] = {0, 37, 131000};
    /* mode 0: sliding (head 256, no factors); 1: full (head 512, theta
     * 1e6, rope_freqs' factors); 2: head 512 and theta 1e6 without factors
     * (every pair rotates: the early kernel's angles for j >= 64 too); 3:
     * head 128, theta 1e4 (the generic kernel) */
    for (int mode = 0; mode < 4; mode++)
        for (int p = 0; p < 3; p++) {
            const int full = mode == 1 || mode == 2, n = 5, heads = 6, d = mode == 3 ? 128 : full ? 512 : 256;
            const float theta = full ? 1e6f : 1e4f;
            const size_t len = (size_t)n * heads * d;
            tensor ff = make_tensor(QT_F32, d / 2, 1);
            for (int j = 0; j < d / 2; j++) ((float *)ff.data)[j] = j < 64 ? 1.0f : 1e30f; /* as rope_freqs */
            gem_err err;
            be_weight *fc = cpu_ref->weight(cpu_ref, &ff.t, &err), *fg = gr->weight(gr, &ff.t, &err);
            const be_weight *fcm = mode == 1 ? fc : NULL, *fgm = mode == 1 ? fg : NULL; /* this mode's factors */
            float *x = rand_vec(len, 2.0f);
            int32_t ids[5] = {0};
            if (cpu_ref->set_step) cpu_ref->set_step(cpu_ref, ids, n, pos0s[p]);
            gr->set_step(gr, ids, n, pos0s[p]); /* this backend's step buffer */
            be_buf *xc = put(cpu_ref, x, len), *xg = put(gr, x, len);
            cpu_ref->rope(cpu_ref, xc, n, heads, d, d, pos0s[p], theta, fcm);
            gr->rope(gr, xg, n, heads, d, d, pos0s[p], theta, fgm);
            float *a = get(gr, xg, len), *b = get(cpu_ref, xc, len);
            /* cos/sin of arguments up to 1.3e5 rad: both libraries reduce
             * exactly, results differ by an ulp of the value */
            CHECKF(close_enough("rope", a, b, len, 1e-5, 2e-5), "rope mode=%d pos0=%d", mode, pos0s[p]);
            free(a), free(b);
            /* the fused q/k path: per-head rmsnorm (weighted) then rope */
            tensor nw = make_tensor(QT_F32, d, 1);
            be_weight *nc = cpu_ref->weight(cpu_ref, &nw.t, &err), *ng = gr->weight(gr, &nw.t, &err);
            cpu_ref->upload(cpu_ref, xc, 0, x, len);
            gr->upload(gr, xg, 0, x, len);
            cpu_ref->rmsnorm_rope(cpu_ref, xc, nc, n, heads, d, 1e-6f, pos0s[p], theta, fcm);
            gr->rmsnorm_rope(gr, xg, ng, n, heads, d, 1e-6f, pos0s[p], theta, fgm);
            a = get(gr, xg, len), b = get(cpu_ref, xc, len);
            CHECKF(close_enough("rmsnorm_rope", a, b, len, 1e-5, 2e-5), "rmsnorm_rope mode=%d pos0=%d", mode, pos0s[p]);
            free(a), free(b);
            /* the q/k/v launch: q = these 6 heads (weight ng), k = the first
             * 2 heads' worth of rows (another weight, kg), v likewise or, with
             * K as V, k's raw rows; against the separate calls */
            tensor kn = make_tensor(QT_F32, d, 1);
            be_weight *kg = gr->weight(gr, &kn.t, &err);
            for (int kasv = 0; kasv < 2; kasv++) {
                const int kvh = 2;
                const size_t klen = (size_t)n * kvh * d;
                const float *vsrc = kasv ? x : x + klen;
                /* K as V: v1 starts as NaN (put's poison), so an element
                 * left unwritten fails */
                be_buf *q1 = put(gr, x, len), *k1 = put(gr, x, klen), *v1 = put(gr, kasv ? NULL : vsrc, klen);
                be_buf *q2 = put(gr, x, len), *k2 = put(gr, x, klen), *v2 = put(gr, vsrc, klen);
                gr->qkv_norm_rope(gr, q1, ng, k1, kg, v1, kasv, n, heads, kvh, d, 1e-6f, pos0s[p],
                                   theta, fgm);
                gr->rmsnorm_rope(gr, q2, ng, n, heads, d, 1e-6f, pos0s[p], theta, fgm);
                gr->rmsnorm_rope(gr, k2, kg, n, kvh, d, 1e-6f, pos0s[p], theta, fgm);
                gr->rmsnorm(gr, v2, NULL, n * kvh, d, 1e-6f, v2);
                float *a1 = get(gr, q1, len), *a2 = get(gr, q2, len), *b1 = get(gr, k1, klen), *b2 = get(gr, k2, klen);
                float *c1 = get(gr, v1, klen), *c2 = get(gr, v2, klen);
                /* q and k: the same code, exactly; v: another summation
                 * order */
                CHECKF(close_enough("qkv q", a1, a2, len, 0, 0) && close_enough("qkv k", b1, b2, klen, 0, 0) &&
                           close_enough("qkv v", c1, c2, klen, 1e-6, 1e-6),
                       "qkv_norm_rope mode=%d pos0=%d k_as_v=%d", mode, pos0s[p], kasv);
                if (kasv) {
                    /* the k blocks' weightless rows equal the v blocks' of
                     * a copy, bit for bit (the same sum and product), and
                     * are normalised once */
                    be_buf *q3 = put(gr, x, len), *k3 = put(gr, x, klen), *v3 = put(gr, x, klen);
                    gr->qkv_norm_rope(gr, q3, ng, k3, kg, v3, 0, n, heads, kvh, d, 1e-6f, pos0s[p], theta, fgm);
                    float *c3 = get(gr, v3, klen);
                    CHECKF(close_enough("qkv v (K as V)", c1, c3, klen, 0, 0),
                           "qkv_norm_rope K as V vs a copy mode=%d pos0=%d", mode, pos0s[p]);
                    free(c3);
                    gr->buf_free(gr, q3), gr->buf_free(gr, k3), gr->buf_free(gr, v3);
                }
                free(a1), free(a2), free(b1), free(b2), free(c1), free(c2);
                be_buf *bb[] = {q1, k1, v1, q2, k2, v2};
                for (int i = 0; i < 6; i++) gr->buf_free(gr, bb[i]);
            }
            gr->weight_free(gr, kg);
            free_tensor(&kn);
            free(x);
            cpu_ref->weight_free(cpu_ref, nc), gr->weight_free(gr, ng);
            free_tensor(&nw);
            cpu_ref->buf_free(cpu_ref, xc), gr->buf_free(gr, xg);
            cpu_ref->weight_free(cpu_ref, fc), gr->weight_free(gr, fg);
            free_tensor(&ff);
        }
}

void ops_rope(const backend_opts *g) {
    (void)g;
    test_rope(gpu);
}
