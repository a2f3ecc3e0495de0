/* cuda_ops families embed and elementwise (see ops_harness.h): the
 * embedding rows of every storage type, and geglu, scale and softcap. */
#include "ops_harness.h"

static void test_embed(void) {
    /* every type's values are the CPU's dequantization, bit for bit */
    const uint32_t types[] = {QT_F32, QT_F16, QT_BF16, QT_Q8_0, QT_Q4_0, QT_Q4_K, QT_Q5_K, QT_Q6_K};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const int64_t cols = 512, rows = 300;
        tensor E = make_tensor(types[t], cols, rows);
        gem_err err;
        be_weight *wc = cpu_ref->weight(cpu_ref, &E.t, &err), *wg = gpu->weight(gpu, &E.t, &err);
        CHECKF(wg != NULL, "%s", err.msg);
        const int32_t ids[5] = {0, 299, 17, 17, 150};
        step_both(ids, 5, 0);
        be_buf *oc = put(cpu_ref, NULL, 5 * cols), *og = put(gpu, NULL, 5 * cols);
        cpu_ref->embed(cpu_ref, wc, ids, 5, 1.7f, oc);
        gpu->embed(gpu, wg, ids, 5, 1.7f, og);
        float *a = get(gpu, og, 5 * cols), *b = get(cpu_ref, oc, 5 * cols);
        CHECKF(close_enough("embed", a, b, 5 * cols, 0, 0),
               "embed type %s", quant_type_name(types[t]));
        free(a), free(b);
        cpu_ref->buf_free(cpu_ref, oc), gpu->buf_free(gpu, og);
        cpu_ref->weight_free(cpu_ref, wc), gpu->weight_free(gpu, wg);
        free_tensor(&E);
    }
}

static void test_elementwise(void) {
    const size_t n = 100003;
    float *g = rand_vec(n, 6.0f), *u = rand_vec(n, 2.0f), *x = rand_vec(n, 80.0f);
    for (int fp16 = 0; fp16 < 2; fp16++) {
        gem_err err;
        backend_opts o = {.threads = 1, .reference = 1, .gelu_fp16 = fp16};
        backend *c = backend_create("cpu", &o, &err), *d = backend_create("cuda", &o, &err);
        be_buf *gc = put(c, g, n), *uc = put(c, u, n), *oc = put(c, NULL, n);
        be_buf *gg = put(d, g, n), *ug = put(d, u, n), *og = put(d, NULL, n);
        c->geglu(c, gc, uc, n, oc);
        d->geglu(d, gg, ug, n, og);
        float *a = get(d, og, n), *b = get(c, oc, n);
        /* fp16 mode rounds gelu to f16: the two tanhf may straddle a rounding
         * boundary, one f16 ulp (2^-10 relative) */
        CHECKF(close_enough("geglu", a, b, n, fp16 ? 1e-3 : 2e-6, 1e-6), "geglu fp16=%d", fp16);
        free(a), free(b);
        c->buf_free(c, gc), c->buf_free(c, uc), c->buf_free(c, oc), d->buf_free(d, gg), d->buf_free(d, ug), d->buf_free(d, og);
        c->destroy(c), d->destroy(d);
    }
    tensor s = make_tensor(QT_F32, 1, 1);
    gem_err err;
    be_weight *sc = cpu_ref->weight(cpu_ref, &s.t, &err), *sg = gpu->weight(gpu, &s.t, &err);
    be_buf *xc = put(cpu_ref, x, n), *xg = put(gpu, x, n);
    cpu_ref->scale(cpu_ref, xc, n, sc);
    gpu->scale(gpu, xg, n, sg);
    cpu_ref->softcap(cpu_ref, xc, n, 30.0f);
    gpu->softcap(gpu, xg, n, 30.0f);
    float *a = get(gpu, xg, n), *b = get(cpu_ref, xc, n);
    CHECK(close_enough("scale+softcap", a, b, n, 2e-6, 1e-6));
    free(a), free(b), free(g), free(u), free(x);
    cpu_ref->buf_free(cpu_ref, xc), gpu->buf_free(gpu, xg);
    cpu_ref->weight_free(cpu_ref, sc), gpu->weight_free(gpu, sg);
    free_tensor(&s);
}

void ops_embed(const backend_opts *g) {
    (void)g;
    test_embed();
}

void ops_elementwise(const backend_opts *g) {
    (void)g;
    test_elementwise();
}
