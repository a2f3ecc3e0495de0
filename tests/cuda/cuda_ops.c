/* Every CUDA backend op against the CPU backend (make test-cuda; needs a
 * GPU). Inputs are fresh random values of order one, outputs are poisoned
 * before each op so an unwritten element fails. Tolerances:
 * - data movement (embed of f32/f16/bf16/q8_0/q4_0, KV blobs, argmax): exact;
 * - f32 arithmetic in another order (norms, rope, attention, plain matmul):
 *   a few ulps of the magnitudes involved (1e-5 relative / 2e-5 absolute);
 * - q8_0/q4_0 matmul: the same 8-bit activation codes as the CPU fast path,
 *   so against it only the f32 summation order differs (1e-5 of the sum of
 *   |terms|); against the scalar reference the bound the activation
 *   rounding implies (sum |w| * max|x| / 254 per block);
 * - types expanded to f16 at load (q6_k): f16 rounding, 1e-3 relative. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "quant/quant.h"
#include "test.h"

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static float frand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}
static uint8_t brand(void) { return (uint8_t)(frand() * 127.0f + 128.0f); }

static backend *cpu_ref, *cpu_fast, *gpu;
static backend *gpu_f16;  /* caches in f16 (--kv-type f16) */
/* One-token attention: the defaults are the staged k_attn_dec for f32
 * caches (gpu) and k_attn_tc on the tensor cores for f16 ones (gpu_f16);
 * the other kernels: k_attn_split (GEM_CUDA_ATTN_DEC=0), the register
 * k_attn_dec (GEM_CUDA_ATTN_DEC=1), f32 and f16 caches, and the staged
 * k_attn_dec with f16 caches (GEM_CUDA_ATTN_DEC=2). */
static backend *gpu_split, *gpu_split_f16, *gpu_reg, *gpu_reg_f16, *gpu_staged_f16;

/* GEM_CUDA_MMA=0 keeps prefill on the f32-exact kernels (dp4a products,
 * f32 attention); otherwise prefill tiles use the tensor cores. */
static int mma_on(void) {
    const char *e = getenv("GEM_CUDA_MMA");
    return !(e && !strcmp(e, "0"));
}

/* A weight tensor of `rows` x `cols` in `type` with random contents. */
typedef struct {
    gguf_tensor t;
    uint8_t *data;
    float *deq; /* dequantized values */
} tensor;

static tensor make_tensor(uint32_t type, int64_t cols, int64_t rows) {
    tensor x;
    memset(&x, 0, sizeof x);
    uint64_t rb = 0;
    quant_row_bytes(type, cols, &rb);
    x.data = malloc(rb * (size_t)rows);
    x.deq = malloc(sizeof(float) * (size_t)(cols * rows));
    const uint32_t bs = quant_block_size(type), ts = quant_type_size(type);
    for (int64_t r = 0; r < rows; r++) {
        uint8_t *row = x.data + rb * (size_t)r;
        if (type == QT_F32) {
            for (int64_t i = 0; i < cols; i++) ((float *)row)[i] = frand();
        } else if (type == QT_F16 || type == QT_BF16) {
            for (int64_t i = 0; i < cols; i++) {
                uint16_t h = type == QT_F16 ? quant_f32_to_f16(frand()) : quant_f32_to_bf16(frand());
                memcpy(row + 2 * i, &h, 2);
            }
        } else {
            for (int64_t b = 0; b < cols / bs; b++) {
                uint8_t *blk = row + b * ts;
                for (uint32_t k = 0; k < ts; k++) blk[k] = brand();
                uint16_t d = quant_f32_to_f16(0.01f + 0.02f * fabsf(frand()));
                if (type == QT_Q6_K) memcpy(blk + ts - 2, &d, 2); /* d is the block's last field */
                else memcpy(blk, &d, 2);
            }
        }
        quant_dequant_row(type, row, x.deq + cols * r, cols);
    }
    x.t.name = "test";
    x.t.n_dims = rows > 1 ? 2 : 1;
    x.t.ne[0] = (uint64_t)cols;
    x.t.ne[1] = (uint64_t)rows;
    x.t.ne[2] = x.t.ne[3] = 1;
    x.t.type = type;
    x.t.n_elems = (uint64_t)(cols * rows);
    x.t.n_bytes = rb * (uint64_t)rows;
    x.t.data = x.data;
    return x;
}

/* Row o of W times token i of x ([n][K]): returns sum |w x| (the scale of
 * f32 and f16 rounding errors); *bound8, when given, receives the error
 * bound of 8-bit activation codes, sum over 32-value blocks of
 * sum |w| max |x| / 254 (with a 1e-4 margin for its own rounding). */
static double row_mag(const tensor *W, const float *x, int64_t K, int i, int64_t o, double *bound8) {
    double mag = 0, bound = 0;
    for (int64_t b = 0; b < K / 32; b++) {
        double sw = 0, amax = 0;
        for (int k = 0; k < 32; k++) {
            const double wv = W->deq[o * K + b * 32 + k], xv = x[(size_t)i * K + b * 32 + k];
            mag += fabs(wv * xv);
            sw += fabs(wv);
            amax = fmax(amax, fabs(xv));
        }
        bound += sw * amax / 254.0 * 1.0001;
    }
    if (bound8) *bound8 = bound;
    return mag;
}

static void free_tensor(tensor *x) {
    free(x->data);
    free(x->deq);
}

static float *rand_vec(size_t n, float scale) {
    float *v = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) v[i] = frand() * scale;
    return v;
}

/* A buffer on backend b holding v (or poison when v is NULL). */
static be_buf *put(backend *b, const float *v, size_t n) {
    gem_err err;
    be_buf *x = b->alloc(b, n, &err);
    float *poison = NULL;
    if (!v) {
        poison = malloc(sizeof(float) * n);
        for (size_t i = 0; i < n; i++) poison[i] = NAN;
        v = poison;
    }
    b->upload(b, x, 0, v, n);
    free(poison);
    return x;
}

static float *get(backend *b, be_buf *x, size_t n) {
    float *v = malloc(sizeof(float) * n);
    b->download(b, x, 0, v, n);
    return v;
}

/* max |a - b| / (abs_tol + rel * |b|) <= 1, NaN fails */
static int close_enough(const char *what, const float *a, const float *b, size_t n, double rel, double abs_tol) {
    double worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        double e = a[i] == b[i] ? 0 : fabs((double)a[i] - b[i]) / (abs_tol + rel * fabs(b[i]));
        if (!(e <= worst)) {
            worst = isnan(e) ? INFINITY : e;
            at = i;
        }
    }
    if (worst > 1) fprintf(stderr, "%s: element %zu: %.9g vs %.9g\n", what, at, a[at], b[at]);
    return worst <= 1;
}

static void step_both(const int32_t *ids, int n, int pos0) {
    if (cpu_ref->set_step) cpu_ref->set_step(cpu_ref, ids, n, pos0);
    gpu->set_step(gpu, ids, n, pos0);
}

static void test_embed(void) {
    const uint32_t types[] = {QT_F32, QT_F16, QT_BF16, QT_Q8_0, QT_Q4_0, QT_Q6_K};
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
        CHECKF(close_enough("embed", a, b, 5 * cols, types[t] == QT_Q6_K ? 1e-3 : 0, types[t] == QT_Q6_K ? 1e-4 : 0),
               "embed type %s", quant_type_name(types[t]));
        free(a), free(b);
        cpu_ref->buf_free(cpu_ref, oc), gpu->buf_free(gpu, og);
        cpu_ref->weight_free(cpu_ref, wc), gpu->weight_free(gpu, wg);
        free_tensor(&E);
    }
}

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

static void test_elementwise(void) {
    const size_t n = 100003;
    float *g = rand_vec(n, 6.0f), *u = rand_vec(n, 2.0f), *x = rand_vec(n, 80.0f);
    for (int fp16 = 0; fp16 < 2; fp16++) {
        gem_err err;
        backend_opts o = {1, 1, fp16, 0};
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

/* Fused launches against their unfused GPU equivalents: the same
 * arithmetic per row, so exactly equal. The geglu pair's reference comes
 * from gu (GEM_CUDA_MV_SPLIT=0): the fused pair never splits a row, the
 * default's one-token products of K >= 8192 do (another order). */
static void test_fused_matmul(backend *gu) {
    const uint32_t types[] = {QT_Q4_0, QT_Q8_0, QT_F16};
    for (size_t t = 0; t < 3; t++)
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

static double seconds_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
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
    const uint32_t types[] = {QT_F32, QT_F16, QT_BF16, QT_Q8_0, QT_Q4_0, QT_Q6_K};
    /* 70 and 300: prefill tiles (tensor cores unless GEM_CUDA_MMA=0) over
     * one and three token tiles of the staged kernel, two and five of the
     * direct one */
    const int ns[] = {1, 3, 8, 13, 70, 300};
    /* K = 16384: long matrix-vector rows (decode sizes only); 1536 (48 blocks) takes the staged tensor-core kernel, 1568 (49,
     * not a multiple of its 4-block stage) the direct one; q6_k rows need a
     * multiple of 256 */
    const int64_t Ks[] = {16384, 1536, 1568};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
    for (size_t ki = 0; ki < (types[t] == QT_Q8_0 || types[t] == QT_Q4_0 ? 3u : 2u); ki++) {
        const int64_t K = Ks[ki], M = 333; /* M odd: a warp's second row runs off the end */
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
                    const double mag = row_mag(&W, x, K, i, o, &bound);
                    const double got = a[(size_t)i * M + o], ref = r[(size_t)i * M + o], fast = f[(size_t)i * M + o];
                    const int quant8 = types[t] == QT_Q8_0 || types[t] == QT_Q4_0;
                    /* prefill tiles with K a multiple of 128 run k_mm_h: f16
                     * activations and weights (relative 2^-11 each, so 2^-10
                     * per product) instead of 8-bit activation codes */
                    const int f16 = quant8 && n > 8 && mma_on() && (K / 32) % 4 == 0;
                    const int int8 = quant8 && !f16;
                    const double tol_ref = f16    ? (1.0 / 1024 + 1e-5) * mag * 1.0001
                                           : int8 ? bound + 1e-5 * mag
                                           : types[t] == QT_Q6_K ? 1e-3 * mag
                                                                 : 1e-5 * mag;
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
 * (k_act_f16), bit for bit (the same arithmetic); q8_0 and q4_0, a token
 * count that is not a multiple of the tile. */
static void test_geglu_f16(void) {
    const uint32_t types[] = {QT_Q4_0, QT_Q8_0};
    for (size_t t = 0; t < 2; t++) {
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

/* The combine (k_attn_combine_wide) writes the 8-bit codes of its output
 * for the output projection: a one-token step at depth 100 and the product
 * of its output equal the product of a copy (own codes). gb and window:
 * f32 caches, full (gpu: the staged k_attn_dec's partials, 4 splits with
 * keys), or f16 caches with a sliding window of 64 in a ring of 64
 * (gpu_f16: k_attn_tc's, 2 splits with keys). */
static void test_wide_handoff(backend *gb, int window) {
    const int nh = 8, kvh = 2, d = 256, K = nh * d, depth = 100;
    tensor W = make_tensor(QT_Q4_0, K, 128);
    gem_err err;
    be_weight *wg = gb->weight(gb, &W.t, &err);
    be_kv *kv = gb->kv_new(gb, kvh, d, window ? window : 512, window > 0, &err);
    int32_t ids[100] = {0};
    for (int n = depth; n >= 1; n = n == depth ? 1 : 0) {
        const int pos = n == depth ? 0 : depth;
        float *q = rand_vec((size_t)n * K, 1.0f), *k = rand_vec((size_t)n * kvh * d, 1.0f), *v = rand_vec((size_t)n * kvh * d, 1.0f);
        be_buf *qg = put(gb, q, (size_t)n * K), *kg = put(gb, k, (size_t)n * kvh * d), *vg = put(gb, v, (size_t)n * kvh * d);
        be_buf *att = put(gb, NULL, (size_t)n * K), *copy = put(gb, NULL, (size_t)n * K);
        be_buf *o1 = put(gb, NULL, (size_t)n * 128), *o2 = put(gb, NULL, (size_t)n * 128);
        gb->set_step(gb, ids, n, pos);
        gb->attention(gb, qg, kg, vg, kv, n, pos, nh, kvh, d, window, att);
        if (n == 1) {
            gb->matmul(gb, wg, att, n, o1);
            gb->copy(gb, att, 0, copy, 0, (size_t)n * K);
            gb->matmul(gb, wg, copy, n, o2);
            float *r1 = get(gb, o1, (size_t)n * 128), *r2 = get(gb, o2, (size_t)n * 128);
            CHECKF(close_enough("combine handoff", r1, r2, (size_t)n * 128, 0, 0),
                   "combine -> matmul at depth %d, window %d", depth, window);
            free(r1), free(r2);
        }
        free(q), free(k), free(v);
        be_buf *bufs[] = {qg, kg, vg, att, copy, o1, o2};
        for (int i = 0; i < 7; i++) gb->buf_free(gb, bufs[i]);
    }
    gb->kv_free(gb, kv);
    gb->weight_free(gb, wg);
    free_tensor(&W);
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
    const int ns[] = {9, 70, 300};
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

/* Runs the same sequence of attention calls (a prompt in tiles, then single
 * tokens) on the reference and on each GPU backend under test (the default,
 * f16 caches, the other one-token kernels), computing the reference once,
 * and compares every output and the final caches. tol[i]: relative and
 * absolute tolerance of backend i against the f32 reference (above 1e-5:
 * its caches hold f16 entries). */
#define ATT_MAX 7
static void test_attention_case_on(backend *const *gk, const double *tol, int nb, int n_head, int kvh, int d,
                                   int window, int cap, const int *tiles, int n_tiles) {
    gem_err err;
    be_kv *kc = cpu_ref->kv_new(cpu_ref, kvh, d, cap, window > 0, &err), *kg[ATT_MAX];
    int ok[ATT_MAX];
    for (int i = 0; i < nb; i++) {
        kg[i] = gk[i]->kv_new(gk[i], kvh, d, cap, window > 0, &err);
        CHECKF(kg[i] != NULL, "%s", err.msg);
        ok[i] = kg[i] != NULL;
    }
    int pos = 0;
    for (int t = 0; t < n_tiles; t++) {
        const int n = tiles[t];
        const size_t nq = (size_t)n * n_head * d, nk = (size_t)n * kvh * d;
        /* scaled as the model's normed q/k (weights ~ d^-1/4): scores of a
         * few units, so f32 rounding of the dot products stays at 1e-6 */
        const float qk = 3.0f / sqrtf(sqrtf((float)d));
        float *q = rand_vec(nq, qk), *k = rand_vec(nk, qk), *v = rand_vec(nk, 1.0f);
        int32_t *ids = calloc((size_t)n, sizeof *ids);
        if (cpu_ref->set_step) cpu_ref->set_step(cpu_ref, ids, n, pos);
        be_buf *qc = put(cpu_ref, q, nq), *kcb = put(cpu_ref, k, nk), *vc = put(cpu_ref, v, nk), *oc = put(cpu_ref, NULL, nq);
        cpu_ref->attention(cpu_ref, qc, kcb, vc, kc, n, pos, n_head, kvh, d, window, oc);
        float *b = get(cpu_ref, oc, nq);
        for (int i = 0; i < nb; i++) {
            if (!ok[i]) continue; /* one failure per backend and case is enough */
            backend *g = gk[i];
            g->set_step(g, ids, n, pos);
            be_buf *qg = put(g, q, nq), *kgb = put(g, k, nk), *vg = put(g, v, nk), *og = put(g, NULL, nq);
            g->attention(g, qg, kgb, vg, kg[i], n, pos, n_head, kvh, d, window, og);
            float *a = get(g, og, nq);
            /* tiles of 16 queries or more take the tensor-core kernel unless
             * GEM_CUDA_MMA=0: f16 operands (q, k, v and the probabilities,
             * relative 2^-12 each), the same bound as the f16 cache */
            const double t_tol = n >= 16 && mma_on() && tol[i] < 3e-3 ? 3e-3 : tol[i];
            ok[i] = close_enough("attention", a, b, nq, t_tol, 2 * t_tol);
            CHECKF(ok[i], "attention (backend %d%s) heads %d/%d d %d window %d tile %d (n %d at %d)", i,
                   tol[i] > 1e-5 ? ", f16 KV" : "", n_head, kvh, d, window, t, n, pos);
            free(a);
            g->buf_free(g, qg), g->buf_free(g, kgb), g->buf_free(g, vg), g->buf_free(g, og);
        }
        free(b), free(q), free(k), free(v), free(ids);
        cpu_ref->buf_free(cpu_ref, qc), cpu_ref->buf_free(cpu_ref, kcb), cpu_ref->buf_free(cpu_ref, vc), cpu_ref->buf_free(cpu_ref, oc);
        pos += n;
    }
    /* checkpoint blobs have one layout on every backend with f32 caches
     * (f16 caches: half the bytes, their own round trip below) */
    for (int i = 0; i < nb; i++) {
        if (!kg[i]) continue;
        backend *g = gk[i];
        if (!ok[i]) { /* its cache missed the tiles after the failure */
            g->kv_free(g, kg[i]);
            continue;
        }
        const int f16 = tol[i] > 1e-5;
        size_t bytes = cpu_ref->kv_bytes(cpu_ref, kc, pos);
        CHECK(f16 ? 2 * g->kv_bytes(g, kg[i], pos) == bytes : bytes == g->kv_bytes(g, kg[i], pos));
        if (f16) bytes /= 2;
        char *bc = malloc(bytes), *bg = malloc(bytes);
        if (f16) g->kv_save(g, kg[i], pos, bc);
        else cpu_ref->kv_save(cpu_ref, kc, pos, bc);
        g->kv_save(g, kg[i], pos, bg);
        CHECKF(memcmp(bc, bg, bytes) == 0, "kv blobs differ (backend %d)", i);
        memset(bg, 0, bytes);
        g->kv_load(g, kg[i], pos, bc);
        g->kv_save(g, kg[i], pos, bg);
        CHECKF(memcmp(bc, bg, bytes) == 0, "kv load/save round trip (backend %d)", i);
        free(bc), free(bg);
        g->kv_free(g, kg[i]);
    }
    cpu_ref->kv_free(cpu_ref, kc);
}

/* Every GPU attention path on one case: the defaults, f32 caches (backend
 * 0: the staged k_attn_dec for one-token steps) and f16 caches (1:
 * k_attn_tc), then k_attn_split (2, 3) and the register k_attn_dec (4, 5),
 * each with f32 and f16 caches, and the staged k_attn_dec with f16 caches
 * (6). f16 entries: scores and values rounded to 11 bits (relative
 * 2^-12 each), so outputs of order one move by a few 1e-4: 3e-3 bounds it;
 * k_attn_tc also rounds q and the probabilities to f16, as the prefill
 * flash attention does under the same bound. */
static void test_attention_case(int n_head, int kvh, int d, int window, int cap, const int *tiles, int n_tiles) {
    backend *all[ATT_MAX] = {gpu, gpu_f16, gpu_split, gpu_split_f16, gpu_reg, gpu_reg_f16, gpu_staged_f16};
    backend *gk[ATT_MAX];
    double tol[ATT_MAX];
    int nb = 0;
    for (int i = 0; i < ATT_MAX; i++)
        if (all[i]) {
            gk[nb] = all[i];
            tol[nb++] = i % 2 || i == 6 ? 3e-3 : 1e-5;
        }
    test_attention_case_on(gk, tol, nb, n_head, kvh, d, window, cap, tiles, n_tiles);
}

/* One-token steps over a deep full-attention cache, where a split holds
 * more than the 32 keys of the shallow cases (capacity 32768: 256 splits;
 * 16432 keys: 65 per split, so 5 to 9 shared-memory tiles per block, every
 * kernel's stage ring wrapping, and the steps' own keys at offsets 52-54
 * of the last split, in a reused stage; each step's key dominates head
 * 0): the register k_attn_dec, its staged form and k_attn_split on equal
 * caches (filled by the same prefill kernels) agree within f32 summation
 * order (1e-5), f32 and f16 entries; k_attn_tc within the f16 bound. A
 * last step of 3 tokens runs k_attn_split on every backend (85 splits).
 * The CPU reference is too slow at this depth; the kernels met it above. */
static void test_attention_deep(void) {
    const int nh = 8, kvh = 1, d = 512, cap = 32768, tiles[] = {5000, 5000, 5000, 1432, 1, 1, 1, 3};
    /* the register, staged, split and (f16 caches) tensor-core kernels; the
     * defaults are gpu (f32: staged) and gpu_f16 (tensor cores) */
    backend *sets[2][4] = {{gpu_reg, gpu, gpu_split, NULL}, {gpu_reg_f16, gpu_staged_f16, gpu_split_f16, gpu_f16}};
    const char *names[4] = {"register", "staged", "split", "tensor cores"};
    for (int f = 0; f < 2; f++) {
        backend **bs = sets[f];
        if (!bs[0] || !bs[1] || !bs[2]) continue;
        int nb = 3;
        while (nb < 4 && bs[nb]) nb++; /* the backends present, in order */
        gem_err err;
        be_kv *kv[4];
        for (int b = 0; b < nb; b++) kv[b] = bs[b]->kv_new(bs[b], kvh, d, cap, 0, &err);
        int pos = 0, ok = 1;
        for (size_t t = 0; t < sizeof tiles / sizeof tiles[0]; t++) {
            const int n = tiles[t];
            const size_t nq = (size_t)n * nh * d, nk = (size_t)n * kvh * d;
            const float qk = 3.0f / sqrtf(sqrtf((float)d));
            float *q = rand_vec(nq, qk), *k = rand_vec(nk, qk), *v = rand_vec(nk, 1.0f), *o[4];
            int32_t *ids = calloc((size_t)n, sizeof *ids);
            if (n == 1) /* the step's own key dominates head 0 (score ~136): a lost or doubled row shows */
                for (int e = 0; e < d; e++) k[e] = 2.0f * q[e];
            for (int b = 0; b < nb; b++) {
                backend *g = bs[b];
                be_buf *qg = put(g, q, nq), *kg = put(g, k, nk), *vg = put(g, v, nk), *og = put(g, NULL, nq);
                g->set_step(g, ids, n, pos);
                g->attention(g, qg, kg, vg, kv[b], n, pos, nh, kvh, d, 0, og);
                o[b] = get(g, og, nq);
                g->buf_free(g, qg), g->buf_free(g, kg), g->buf_free(g, vg), g->buf_free(g, og);
            }
            if (n <= 8)
                for (int b = 1; b < nb && ok; b++) {
                    /* f16 q and probabilities on the tensor cores: the f16 bound */
                    const double tol = b >= 3 ? 3e-3 : 1e-5;
                    ok = close_enough("deep one-token", o[b], o[0], nq, tol, 2 * tol);
                    CHECKF(ok, "deep one-token attention, %s vs register%s at %d", names[b], f ? " (f16 KV)" : "", pos);
                }
            for (int b = 0; b < nb; b++) free(o[b]);
            free(q), free(k), free(v), free(ids);
            pos += n;
            if (!ok) break;
        }
        for (int b = 0; b < nb; b++) bs[b]->kv_free(bs[b], kv[b]);
    }
}

static void test_attention(void) {
    const int prompt[] = {7, 1, 1, 33, 1, 64, 1, 1, 1, 2, 1, 1};
    /* sliding: window 32, ring of 32, tiles wrap it several times */
    test_attention_case(4, 2, 256, 32, 32, prompt, 12);
    test_attention_case(8, 1, 512, 0, 4096, prompt, 12);  /* full, G = 8, head 512 */
    test_attention_case(32, 16, 256, 64, 64, prompt, 12); /* 31B sliding shape, G = 2 */
    test_attention_case(32, 4, 512, 0, 300, prompt, 12);  /* 31B full shape */
    test_attention_case(16, 1, 512, 0, 300, prompt, 12);  /* 12B full shape: G = 16 in two groups */
    const int long_prompt[] = {512, 512, 1, 1, 3};
    test_attention_case(8, 1, 512, 0, 2048, long_prompt, 5);
    /* 31B sliding shape over the window of 1024: tiles of many key blocks,
     * rows whose windows start inside a block, a tile past the ring */
    const int long_sliding[] = {700, 600, 1, 1100, 2};
    test_attention_case(32, 16, 256, 1024, 1024, long_sliding, 5);
    /* the 1b test profile's sliding shape (G = 2, window and ring of 128):
     * one-token steps at positions 100-101, 128-129 (the first wrap),
     * 256-258 (the second) and 323-324 */
    const int ring128[] = {100, 1, 1, 26, 1, 1, 126, 1, 1, 1, 64, 1, 1};
    test_attention_case(8, 4, 256, 128, 128, ring128, 13);
    /* the other head sizes the kernels are built for */
    test_attention_case(4, 2, 128, 32, 32, prompt, 12);
    test_attention_case(4, 1, 384, 0, 300, prompt, 12);
    test_attention_case(8, 2, 512, 32, 32, prompt, 12); /* a ring at head 512 */
    /* one-token steps with fewer keys than a block's key subsets (steps at
     * positions 0-2, then a split of one key at 32): k_attn_dec's warps
     * with no key */
    const int few_keys[] = {1, 1, 1, 29, 1, 1};
    test_attention_case(32, 16, 256, 64, 64, few_keys, 6); /* G = 2: four key subsets */
    test_attention_case(8, 2, 512, 0, 300, few_keys, 6);   /* G = 4: two */
}

/* One attention_qkv call of n tokens at pos on both backends (raw
 * projections at scales other than 1, so the norms matter; v NaN under K
 * as V: it must not be read); 1 when the outputs are equal bit for bit. */
typedef struct {
    int nh, kvh, d, window, kasv;
    const char *what; /* what the second backend is, for the message */
    float theta;
    be_weight *qw[2], *kw[2], *ff[2];
    be_kv *kv[2];
} qkv_case;
static int qkv_pair_call(backend *const *bs, const qkv_case *c, int n, int pos) {
    const size_t nq = (size_t)n * c->nh * c->d, nk = (size_t)n * c->kvh * c->d;
    float *q = rand_vec(nq, 3.0f), *k = rand_vec(nk, 0.5f), *v = rand_vec(nk, 2.0f), *o[2];
    int32_t *ids = calloc((size_t)n, sizeof *ids);
    for (int b = 0; b < 2; b++) {
        backend *g = bs[b];
        be_buf *qg = put(g, q, nq), *kg = put(g, k, nk), *vg = put(g, c->kasv ? NULL : v, nk), *og = put(g, NULL, nq);
        g->set_step(g, ids, n, pos);
        g->attention_qkv(g, qg, c->qw[b], kg, c->kw[b], vg, c->kasv, c->kv[b], n, pos, c->nh, c->kvh, c->d, 1e-6f,
                         c->theta, c->ff[b], c->window, og);
        o[b] = get(g, og, nq);
        if (b == 0 && n == 1) {
            /* the fused kernel ran: it leaves q as it came (the norm+rope
             * launch rewrites it) */
            float *qa = get(g, qg, nq);
            CHECKF(close_enough("attention_qkv q", qa, q, nq, 0, 0), "attention_qkv: q rewritten, not fused (d %d at %d)",
                   c->d, pos);
            free(qa);
        }
        g->buf_free(g, qg), g->buf_free(g, kg), g->buf_free(g, vg), g->buf_free(g, og);
    }
    const int ok = close_enough("attention_qkv", o[0], o[1], nq, 0, 0);
    CHECKF(ok, "attention_qkv, the default vs %s: heads %d/%d, d %d, window %d, %d tokens at %d", c->what, c->nh, c->kvh,
           c->d, c->window, n, pos);
    free(o[0]), free(o[1]), free(q), free(k), free(v), free(ids);
    return ok;
}

/* attention_qkv: one-token steps on k_attn_tc with the q/k/v norms and
 * rope folded in (gf: the f16-cache default) against the norm+rope launch
 * and the attention (gp: GEM_CUDA_ATTN_FUSE=0): the same arithmetic, so
 * the outputs and the caches are equal bit for bit. Distinct q and k
 * weights. Shapes: the 31B sliding layer (ring of 64: the steps wrap it),
 * the 31B full layer with K as V and rope_freqs' factors, the 12B full
 * layer (16 query heads in two groups: only group 0 stores), heads of 128
 * (one-token steps from position 0) and 384 (K as V), and a deep full
 * layer whose splits hold 51 keys, so this step's key falls in each of
 * four tiles (the fourth reuses the first stage) in turn. Prompts fill the
 * caches first (prefill tiles of at most 3250: the same kernels on both).
 * The fused backend's one-token calls leave q as it came: the fused
 * kernel, not the two launches, ran. */
static void test_attention_qkv(backend *gf, backend *gp, const char *what) {
    const struct {
        int nh, kvh, d, window, cap, kasv, prompt, steps;
    } cases[] = {
        {32, 16, 256, 64, 64, 0, 40, 70}, {32, 4, 512, 0, 300, 1, 20, 40}, {16, 1, 512, 0, 300, 1, 5, 20},
        {4, 2, 128, 32, 32, 0, 0, 40},    {4, 1, 384, 0, 300, 1, 3, 20},  {8, 1, 512, 0, 16384, 1, 13000, 56},
    };
    backend *bs[2] = {gf, gp};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const int full = cases[ci].window == 0;
        qkv_case c;
        memset(&c, 0, sizeof c);
        c.nh = cases[ci].nh, c.kvh = cases[ci].kvh, c.d = cases[ci].d, c.window = cases[ci].window;
        c.kasv = cases[ci].kasv, c.theta = full ? 1e6f : 1e4f, c.what = what;
        const int d = c.d;
        gem_err err;
        tensor qn = make_tensor(QT_F32, d, 1), kn = make_tensor(QT_F32, d, 1), ff = make_tensor(QT_F32, d / 2, 1);
        for (int j = 0; j < d / 2; j++) ((float *)ff.data)[j] = j < d / 8 ? 1.0f : 1e30f; /* as rope_freqs */
        for (int b = 0; b < 2; b++) {
            c.qw[b] = bs[b]->weight(bs[b], &qn.t, &err), c.kw[b] = bs[b]->weight(bs[b], &kn.t, &err);
            c.ff[b] = full && c.kasv ? bs[b]->weight(bs[b], &ff.t, &err) : NULL;
            c.kv[b] = bs[b]->kv_new(bs[b], c.kvh, d, cases[ci].cap, !full, &err);
        }
        int pos = 0, ok = 1;
        for (int left = cases[ci].prompt; ok && left > 0;) {
            const int n = left < 3250 ? left : 3250;
            ok = qkv_pair_call(bs, &c, n, pos);
            pos += n, left -= n;
        }
        for (int t = 0; ok && t < cases[ci].steps; t++) ok = qkv_pair_call(bs, &c, 1, pos++);
        const int held = full || pos < cases[ci].cap ? pos : cases[ci].cap;
        const size_t bytes = gf->kv_bytes(gf, c.kv[0], held);
        unsigned char *c0 = malloc(bytes), *c1 = malloc(bytes);
        gf->kv_save(gf, c.kv[0], held, c0);
        gp->kv_save(gp, c.kv[1], held, c1);
        CHECKF(ok && bytes == gp->kv_bytes(gp, c.kv[1], held) && !memcmp(c0, c1, bytes),
               "attention_qkv: the caches after %d positions differ (heads %d/%d, d %d)", pos, c.nh, c.kvh, d);
        free(c0), free(c1);
        for (int b = 0; b < 2; b++) {
            bs[b]->kv_free(bs[b], c.kv[b]);
            bs[b]->weight_free(bs[b], c.qw[b]), bs[b]->weight_free(bs[b], c.kw[b]);
            if (c.ff[b]) bs[b]->weight_free(bs[b], c.ff[b]);
        }
        free_tensor(&qn), free_tensor(&kn), free_tensor(&ff);
    }
}

static void test_argmax(void) {
    const int width = 262144;
    float *x = rand_vec((size_t)width * 2, 10.0f);
    x[77] = 50, x[1000] = 50, x[width + 262143] = 60; /* a tie goes to the lowest index */
    be_buf *xg = put(gpu, x, (size_t)width * 2), *og = put(gpu, NULL, 2);
    be_buf *xc = put(cpu_ref, x, (size_t)width * 2), *oc = put(cpu_ref, NULL, 2);
    gpu->argmax(gpu, xg, 2, width, og);
    cpu_ref->argmax(cpu_ref, xc, 2, width, oc);
    float *a = get(gpu, og, 2), *b = get(cpu_ref, oc, 2);
    CHECKF(a[0] == 77 && a[1] == 262143, "argmax %g %g", a[0], a[1]);
    CHECK(a[0] == b[0] && a[1] == b[1]);
    free(a), free(b), free(x);
    gpu->buf_free(gpu, xg), gpu->buf_free(gpu, og), cpu_ref->buf_free(cpu_ref, xc), cpu_ref->buf_free(cpu_ref, oc);
}

/* Top-k for sampling: the same values and indices, in the same order, as
 * the CPU's (value descending, lower index first among equals), on the
 * vocabulary's width (64 chunks) and on one partial chunk; rows with many
 * ties and with -inf. */
static void test_topk(void) {
    const int widths[] = {262144, 1000}, ks[] = {1, 40, BE_TOPK_MAX};
    for (int wi = 0; wi < 2; wi++)
        for (int r = 0; r < 3; r++) {
            const int width = widths[wi];
            float *x = rand_vec((size_t)width, 10.0f);
            if (r == 1)
                for (int i = 0; i < width; i++) x[i] = roundf(x[i]); /* ~21 distinct values */
            if (r == 2)
                for (int i = 0; i < width; i += 3) x[i] = -INFINITY;
            be_buf *xg = put(gpu, x, (size_t)width), *og = put(gpu, NULL, 2 * BE_TOPK_MAX);
            be_buf *xc = put(cpu_ref, x, (size_t)width), *oc = put(cpu_ref, NULL, 2 * BE_TOPK_MAX);
            for (int ki = 0; ki < 3; ki++) {
                const int k = ks[ki];
                gpu->topk(gpu, xg, width, k, og);
                cpu_ref->topk(cpu_ref, xc, width, k, oc);
                float *a = get(gpu, og, (size_t)(2 * k)), *b = get(cpu_ref, oc, (size_t)(2 * k));
                int ok = 1;
                for (int i = 0; i < 2 * k; i++) ok &= a[i] == b[i];
                CHECKF(ok, "topk width %d row kind %d k %d: first %g@%g vs %g@%g", width, r, k, a[0], a[k], b[0], b[k]);
                free(a), free(b);
            }
            free(x);
            gpu->buf_free(gpu, xg), gpu->buf_free(gpu, og), cpu_ref->buf_free(cpu_ref, xc), cpu_ref->buf_free(cpu_ref, oc);
        }
}

/* A recorded step replays at other positions with other ids. */
typedef struct {
    be_weight *E;
    be_buf *x, *k, *v, *o;
    be_kv *kv;
} rec_ctx;

static void rec_body(void *p) {
    rec_ctx *c = p;
    int32_t id = 0;
    gpu->embed(gpu, c->E, &id, 1, 0.1f, c->x);
    gpu->rope(gpu, c->x, 1, 2, 256, 256, 0, 1e4f, NULL);
    gpu->copy(gpu, c->x, 0, c->k, 0, 256);
    gpu->attention(gpu, c->x, c->k, c->x, c->kv, 1, 0, 2, 1, 256, 16, c->o);
}

static void test_graph(void) {
    tensor E = make_tensor(QT_Q8_0, 512, 50);
    gem_err err;
    be_weight *eg = gpu->weight(gpu, &E.t, &err), *ec = cpu_ref->weight(cpu_ref, &E.t, &err);
    rec_ctx g = {eg, put(gpu, NULL, 512), put(gpu, NULL, 512), NULL, put(gpu, NULL, 512), NULL};
    g.kv = gpu->kv_new(gpu, 1, 256, 16, 1, &err);
    be_kv *kc = cpu_ref->kv_new(cpu_ref, 1, 256, 16, 1, &err);
    be_buf *xc = put(cpu_ref, NULL, 512), *kcb = put(cpu_ref, NULL, 256), *oc = put(cpu_ref, NULL, 512);
    int32_t first = 3;
    gpu->set_step(gpu, &first, 1, 0);
    be_graph *gr = gpu->capture(gpu, rec_body, &g, &err);
    CHECKF(gr != NULL, "%s", err.msg);
    int ok = 1;
    for (int pos = 0; pos < 40 && gr; pos++) {
        int32_t id = (pos * 7 + 3) % 50;
        gpu->set_step(gpu, &id, 1, pos);
        CHECK(gpu->replay(gpu, gr) == 0);
        cpu_ref->embed(cpu_ref, ec, &id, 1, 0.1f, xc);
        cpu_ref->rope(cpu_ref, xc, 1, 2, 256, 256, pos, 1e4f, NULL);
        cpu_ref->copy(cpu_ref, xc, 0, kcb, 0, 256);
        cpu_ref->attention(cpu_ref, xc, kcb, xc, kc, 1, pos, 2, 1, 256, 16, oc);
        float *a = get(gpu, g.o, 512), *b = get(cpu_ref, oc, 512);
        if (!close_enough("graph replay", a, b, 512, 1e-5, 2e-5)) ok = 0;
        free(a), free(b);
    }
    CHECKF(ok, "replayed steps match direct execution at 40 positions");
    CHECK(gpu->status(gpu, &err) == 0);
    if (gr) gpu->graph_free(gpu, gr);
    gpu->kv_free(gpu, g.kv), cpu_ref->kv_free(cpu_ref, kc);
    gpu->buf_free(gpu, g.x), gpu->buf_free(gpu, g.k), gpu->buf_free(gpu, g.o);
    cpu_ref->buf_free(cpu_ref, xc), cpu_ref->buf_free(cpu_ref, kcb), cpu_ref->buf_free(cpu_ref, oc);
    gpu->weight_free(gpu, eg), cpu_ref->weight_free(cpu_ref, ec);
    free_tensor(&E);
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
                    tensor W = make_tensor(types[t], K, 200), nw = make_tensor(QT_F32, K, 1);
                    gem_err err;
                    be_weight *wg = g->weight(g, &W.t, &err), *ng = g->weight(g, &nw.t, &err);
                    float *x = rand_vec((size_t)n * K, 3.0f), *h = rand_vec((size_t)n * K, 1.0f);
                    be_buf *xg = put(g, x, (size_t)n * K), *a = put(g, NULL, (size_t)n * K),
                           *copy = put(g, NULL, (size_t)n * K), *hg = put(g, h, (size_t)n * K);
                    be_buf *o1 = put(g, NULL, (size_t)n * 200), *o2 = put(g, NULL, (size_t)n * 200);
                    if (fused) g->add_rmsnorm_norm(g, hg, xg, ng, NULL, ng, n, K, 1e-6f, a);
                    else g->rmsnorm(g, xg, ng, n, K, 1e-6f, a);
                    g->matmul(g, wg, a, n, o1); /* codes from the norm */
                    g->copy(g, a, 0, copy, 0, (size_t)n * K);
                    g->matmul(g, wg, copy, n, o2); /* codes of its own */
                    float *r1 = get(g, o1, (size_t)n * 200), *r2 = get(g, o2, (size_t)n * 200);
                    CHECKF(close_enough("norm handoff", r1, r2, (size_t)n * 200, 0, 0), "%s -> matmul %s K=%d n=%d",
                           fused ? "add_rmsnorm_norm" : "rmsnorm", quant_type_name(types[t]), K, n);
                    free(r1), free(r2), free(x), free(h);
                    be_buf *bufs[] = {xg, a, copy, hg, o1, o2};
                    for (int i = 0; i < 6; i++) g->buf_free(g, bufs[i]);
                    g->weight_free(g, wg), g->weight_free(g, ng);
                    free_tensor(&W), free_tensor(&nw);
                }
}

/* Attention leaves the 8-bit codes of its output for the output
 * projection, as the norms do (test_norm_handoff). */
static void test_quantized_handoff(void) {
    /* attention -> output projection: 8 heads of 256 (one-token step and a
     * tile), against the same product of a copy */
    for (int n = 1; n <= 70; n += 69) {
        const int nh = 8, kvh = 2, d = 256, K = nh * d;
        tensor W = make_tensor(QT_Q4_0, K, 128);
        gem_err err;
        be_weight *wg = gpu->weight(gpu, &W.t, &err);
        be_kv *kv = gpu->kv_new(gpu, kvh, d, 512, 0, &err);
        float *q = rand_vec((size_t)n * K, 1.0f), *k = rand_vec((size_t)n * kvh * d, 1.0f), *v = rand_vec((size_t)n * kvh * d, 1.0f);
        be_buf *qg = put(gpu, q, (size_t)n * K), *kg = put(gpu, k, (size_t)n * kvh * d), *vg = put(gpu, v, (size_t)n * kvh * d);
        be_buf *att = put(gpu, NULL, (size_t)n * K), *copy = put(gpu, NULL, (size_t)n * K);
        be_buf *o1 = put(gpu, NULL, (size_t)n * 128), *o2 = put(gpu, NULL, (size_t)n * 128);
        gpu->set_step(gpu, (const int32_t[70]){0}, n, 0);
        gpu->attention(gpu, qg, kg, vg, kv, n, 0, nh, kvh, d, 0, att);
        gpu->matmul(gpu, wg, att, n, o1);
        gpu->copy(gpu, att, 0, copy, 0, (size_t)n * K);
        gpu->matmul(gpu, wg, copy, n, o2);
        float *r1 = get(gpu, o1, (size_t)n * 128), *r2 = get(gpu, o2, (size_t)n * 128);
        CHECKF(close_enough("attention handoff", r1, r2, (size_t)n * 128, 0, 0), "attention -> matmul n=%d", n);
        free(r1), free(r2), free(q), free(k), free(v);
        be_buf *bufs[] = {qg, kg, vg, att, copy, o1, o2};
        for (int i = 0; i < 7; i++) gpu->buf_free(gpu, bufs[i]);
        gpu->kv_free(gpu, kv);
        gpu->weight_free(gpu, wg);
        free_tensor(&W);
    }
}

/* A CUDA backend created with VAR=VALUE set (the GEM_CUDA_* variables are
 * read when a backend is created), the variable unset again. */
static backend *variant(const char *var, const char *value, const backend_opts *o) {
    gem_err err;
    setenv(var, value, 1);
    backend *b = backend_create("cuda", o, &err);
    unsetenv(var);
    CHECKF(b != NULL, "variant backend %s=%s: %s", var, value, err.msg);
    return b;
}

/* A variant's sticky error state is clean after its tests; then it goes. */
static void variant_done(backend *b) {
    gem_err err;
    if (!b) return;
    CHECKF(b->status(b, &err) == 0, "%s", err.msg);
    b->destroy(b);
}

/* A line on stderr as each group of checks ends (its checks so far and its
 * seconds): a run cut short by a time limit shows how far it came. */
static void progress(const char *group) {
    static struct timespec last;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (last.tv_sec)
        fprintf(stderr, "cuda_ops: %s done (%d passed, %d failed, %.1f s)\n", group, test_passed, test_failed,
                (double)(now.tv_sec - last.tv_sec) + 1e-9 * (double)(now.tv_nsec - last.tv_nsec));
    last = now;
}

/* cuda_ops: every check */
int main(void) {
    gem_err err;
    backend_opts ref = {1, 1, 0, 0}, fast = {2, 0, 0, 0}, g = {0, 0, 0, 0};
    /* the backends under test are the defaults, whatever the caller's
     * environment says; variants below set their variable explicitly */
    unsetenv("GEM_CUDA_MV_SPLIT");
    unsetenv("GEM_CUDA_MMH");
    unsetenv("GEM_CUDA_ATTN_DEC");
    unsetenv("GEM_CUDA_MV_STAGGER");
    unsetenv("GEM_CUDA_NORM_WIDE");
    unsetenv("GEM_CUDA_MV_LEVELS");
    unsetenv("GEM_CUDA_ATTN_FUSE");
    cpu_ref = backend_create("cpu", &ref, &err);
    cpu_fast = backend_create("cpu", &fast, &err);
    gpu = backend_create("cuda", &g, &err);
    backend_opts gh = {0, 0, 0, 1};
    gpu_f16 = gpu ? backend_create("cuda", &gh, &err) : NULL;
    if (gpu) {
        gpu_split = variant("GEM_CUDA_ATTN_DEC", "0", &g);
        gpu_split_f16 = variant("GEM_CUDA_ATTN_DEC", "0", &gh);
        gpu_reg = variant("GEM_CUDA_ATTN_DEC", "1", &g);
        gpu_reg_f16 = variant("GEM_CUDA_ATTN_DEC", "1", &gh);
        gpu_staged_f16 = variant("GEM_CUDA_ATTN_DEC", "2", &gh);
    }
    if (!gpu) {
        fprintf(stderr, "cuda_ops: %s\n", err.msg);
        printf("cuda_ops: 0 passed, 1 failed\n");
        return 1;
    }
    progress(NULL); /* the clock starts */
    test_embed();
    test_norms(gpu);
    test_norm_handoff(gpu);
    backend *gnw = variant("GEM_CUDA_NORM_WIDE", "0", &g);
    if (gnw) {
        test_norms(gnw);
        test_norm_handoff(gnw);
    }
    variant_done(gnw);
    test_elementwise();
    test_rope(gpu);
    progress("embed, norms, elementwise, rope");
    test_matmul();
    test_matmul_ranges(gpu);
    backend *gu = variant("GEM_CUDA_MV_SPLIT", "0", &g);
    if (gu) {
        test_matmul_split(gu);
        test_fused_matmul(gu);
    }
    variant_done(gu);
    backend *g0 = variant("GEM_CUDA_MV_STAGGER", "0", &g);
    setenv("GEM_CUDA_MV_LEVELS", "64", 1);
    backend *gl = variant("GEM_CUDA_MV_STAGGER", "20000", &g);
    unsetenv("GEM_CUDA_MV_LEVELS");
    if (g0 && gl) test_matmul_stagger(g0, gl);
    variant_done(g0);
    variant_done(gl);
    if (mma_on()) test_geglu_f16();
    progress("matmul");
    backend *g2 = variant("GEM_CUDA_MMH", "2", &g);
    if (g2) {
        if (mma_on()) {
            test_matmul_f16_on(gpu, "wgmma");
            test_matmul_f16_on(g2, "k_mm_h");
            test_matmul_wgmma_grid(g2);
        }
        test_matmul_ranges(g2); /* k_mm_h's epilogue at extreme operand exponents */
    }
    variant_done(g2);
    test_quantized_handoff();
    progress("f16 prefill products");
    test_attention();
    progress("attention");
    test_attention_deep();
    if (gpu_f16) {
        backend *gnf = variant("GEM_CUDA_ATTN_FUSE", "0", &gh);
        if (gnf) test_attention_qkv(gpu_f16, gnf, "two launches (GEM_CUDA_ATTN_FUSE=0)");
        variant_done(gnf);
    }
    progress("deep one-token attention, attention_qkv");
    test_wide_handoff(gpu, 0);
    if (gpu_f16) test_wide_handoff(gpu_f16, 64);
    test_argmax();
    test_topk();
    test_graph();
    progress("handoff, argmax, topk, graph");
    CHECKF(gpu->status(gpu, &err) == 0, "%s", err.msg);
    gpu->destroy(gpu);
    backend *variants[] = {gpu_f16, gpu_split, gpu_split_f16, gpu_reg, gpu_reg_f16, gpu_staged_f16};
    for (int i = 0; i < 6; i++) variant_done(variants[i]);
    cpu_ref->destroy(cpu_ref);
    cpu_fast->destroy(cpu_fast);
    printf("cuda_ops: %d passed, %d failed\n", test_passed, test_failed);
    return test_failed ? 1 : 0;
}
