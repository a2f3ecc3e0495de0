/* The Gated DeltaNet hybrids' CPU ops (backend.h conv_silu, l2norm,
 * gated_delta, rmsnorm_gated, split_q, attn_gate, swiglu, add, scale_f)
 * against plain loops written here from the shared spec's formulas (§1.3,
 * §1.4), on both paths: the scalar reference (cpu-ref) and the fast path
 * (cpu). Also: a sequence split over calls equals one call (the conv and
 * recurrent states carry it), the fast path's rows are exact for tiles of
 * up to BE_EXACT_ROWS tokens, and its chunked prefill stays within the
 * stated tolerance of the recurrence.
 *
 * Tolerance of the chunked form: it reassociates the recurrence's sums
 * (products of decays become exponentials of differences of cumulative
 * log-decays, the intra-chunk corrections a triangular solve), so f32
 * rounding differs; with unit-norm keys, |beta| <= 1 and decays <= 1 every
 * term is bounded by the values' magnitude and the errors are of order
 * chunk length x 1e-7 relative. The test asserts 2e-4 absolute on outputs
 * and states of order one (observed about 1e-7). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "gguf/gguf.h"
#include "quant/quant.h"
#include "test.h"

static uint64_t rs = 0x12345;
static float frand(void) {
    rs = rs * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rs >> 40) & 0xffffff) / (float)0x800000 - 1.0f;
}

static float silu(float x) { return x / (1.0f + expf(-x)); }
static float sigm(float x) { return 1.0f / (1.0f + expf(-x)); }

/* An f32 weight the backend reads as a tensor view. */
static be_weight *wt(backend *b, gguf_tensor *t, const char *name, float *data, uint64_t ne0, uint64_t ne1) {
    memset(t, 0, sizeof *t);
    t->name = name;
    t->n_dims = ne1 > 1 ? 2 : 1;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->ne[2] = t->ne[3] = 1;
    t->type = QT_F32;
    t->n_elems = ne0 * ne1;
    t->n_bytes = t->n_elems * 4;
    t->data = data;
    gem_err err = {{0}};
    return b->weight(b, t, &err);
}

static be_buf *buf(backend *b, const float *src, size_t n) {
    gem_err err = {{0}};
    be_buf *x = b->alloc(b, n, &err);
    if (src) b->upload(b, x, 0, src, n);
    else {
        float *z = calloc(n, sizeof *z);
        b->upload(b, x, 0, z, n);
        free(z);
    }
    return x;
}

static float *get(backend *b, const be_buf *x, size_t n) {
    float *h = malloc(n * sizeof *h);
    b->download(b, x, 0, h, n);
    return h;
}

static double maxdiff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

/* ---- conv ---- */

static void test_conv(backend *b) {
    const int ch = 40, n = 12;
    float *x = malloc(sizeof(float) * ch * n), w[4 * 40], want[40 * 12];
    for (int i = 0; i < ch * n; i++) x[i] = frand();
    for (int i = 0; i < 4 * ch; i++) w[i] = frand();
    /* from zeros: out[t][c] = silu(sum_k w[c][k] x[t - 3 + k][c]) */
    for (int t = 0; t < n; t++)
        for (int c = 0; c < ch; c++) {
            float acc = 0;
            for (int k = 0; k < 4; k++) {
                const int s = t - 3 + k;
                acc += w[c * 4 + k] * (s >= 0 ? x[s * ch + c] : 0);
            }
            want[t * ch + c] = silu(acc);
        }
    gguf_tensor t;
    be_weight *W = wt(b, &t, "conv", w, 4, ch);
    be_buf *X = buf(b, x, (size_t)ch * n), *st = buf(b, NULL, 3 * ch), *out = buf(b, NULL, (size_t)ch * n);
    b->conv_silu(b, X, st, W, n, ch, out);
    float *got = get(b, out, (size_t)ch * n);
    CHECKF(maxdiff(got, want, (size_t)ch * n) < 1e-6, "%s conv %g", b->name, maxdiff(got, want, (size_t)ch * n));
    float *st1 = get(b, st, 3 * ch);
    CHECK(!memcmp(st1, x + (size_t)(n - 3) * ch, sizeof(float) * 3 * ch)); /* the last 3 inputs */
    /* the same sequence in calls of 5, 1 and 6 rows: the state carries it, bit for bit */
    be_buf *st2 = buf(b, NULL, 3 * ch), *part = buf(b, NULL, (size_t)ch * n), *xs = buf(b, NULL, (size_t)ch * n);
    float *all = malloc(sizeof(float) * ch * n);
    const int cuts[] = {0, 5, 6, 12};
    for (int c = 0; c < 3; c++) {
        const int m = cuts[c + 1] - cuts[c];
        b->upload(b, xs, 0, x + (size_t)cuts[c] * ch, (size_t)m * ch);
        b->conv_silu(b, xs, st2, W, m, ch, part);
        b->download(b, part, 0, all + (size_t)cuts[c] * ch, (size_t)m * ch);
    }
    CHECKF(!memcmp(all, got, sizeof(float) * ch * n), "%s: conv over 3 calls differs from one call", b->name);
    free(all);
    free(got);
    free(st1);
    free(x);
    be_buf *bs[] = {X, st, out, st2, part, xs};
    for (int i = 0; i < 6; i++) b->buf_free(b, bs[i]);
    b->weight_free(b, W);
}

/* ---- the small row ops ---- */

static void test_rows(backend *b) {
    const int n = 3, heads = 4, d = 32, stride = heads * d + 7;
    float x[3 * 135], want[3 * 135];
    for (int i = 0; i < n * stride; i++) want[i] = x[i] = 3 * frand();
    for (int r = 0; r < n; r++)
        for (int h = 0; h < heads; h++) {
            float *v = want + r * stride + h * d, ss = 0;
            for (int e = 0; e < d; e++) ss += v[e] * v[e];
            for (int e = 0; e < d; e++) v[e] /= sqrtf(ss + 1e-6f);
        }
    be_buf *X = buf(b, x, (size_t)n * stride);
    b->l2norm(b, X, n, heads, d, stride, 1e-6f);
    float *got = get(b, X, (size_t)n * stride);
    CHECKF(maxdiff(got, want, (size_t)n * stride) < 1e-6, "%s l2norm", b->name);
    free(got);
    b->buf_free(b, X);

    /* gated rms norm, q split, attention gate, swiglu, add, scale */
    const int rows = n * heads;
    float xs[12 * 32], zs[12 * 32], w[32], qg[12 * 64], wn[12 * 32], wq[12 * 32], wg[12 * 32];
    for (int i = 0; i < rows * d; i++) xs[i] = frand(), zs[i] = 2 * frand();
    for (int i = 0; i < rows * 2 * d; i++) qg[i] = frand();
    for (int i = 0; i < d; i++) w[i] = 1 + frand() / 4;
    for (int r = 0; r < rows; r++) {
        float ss = 0;
        for (int e = 0; e < d; e++) ss += xs[r * d + e] * xs[r * d + e];
        const float s = 1 / sqrtf(ss / d + 1e-6f);
        for (int e = 0; e < d; e++) {
            wn[r * d + e] = xs[r * d + e] * s * w[e] * silu(zs[r * d + e]);
            wq[r * d + e] = qg[r * 2 * d + e];
            wg[r * d + e] = xs[r * d + e] * sigm(qg[r * 2 * d + d + e]);
        }
    }
    gguf_tensor t;
    be_weight *W = wt(b, &t, "norm", w, d, 1);
    be_buf *Xb = buf(b, xs, (size_t)rows * d), *Z = buf(b, zs, (size_t)rows * d), *O = buf(b, NULL, (size_t)rows * d);
    be_buf *QG = buf(b, qg, (size_t)rows * 2 * d);
    b->rmsnorm_gated(b, Xb, Z, W, rows, d, 1e-6f, O);
    got = get(b, O, (size_t)rows * d);
    CHECKF(maxdiff(got, wn, (size_t)rows * d) < 1e-5, "%s rmsnorm_gated %g", b->name, maxdiff(got, wn, (size_t)rows * d));
    free(got);
    b->split_q(b, QG, n, heads, d, O);
    got = get(b, O, (size_t)rows * d);
    CHECK(!memcmp(got, wq, sizeof(float) * rows * d));
    free(got);
    b->attn_gate(b, Xb, QG, n, heads, d);
    got = get(b, Xb, (size_t)rows * d);
    CHECKF(maxdiff(got, wg, (size_t)rows * d) < 1e-6, "%s attn_gate", b->name);
    free(got);
    b->upload(b, Xb, 0, xs, (size_t)rows * d);
    b->swiglu(b, Xb, Z, (size_t)rows * d, O);
    got = get(b, O, (size_t)rows * d);
    double m = 0;
    for (int i = 0; i < rows * d; i++) m = fmax(m, fabs(got[i] - silu(xs[i]) * zs[i]));
    CHECKF(m < 1e-6, "%s swiglu %g", b->name, m);
    free(got);
    b->add(b, Xb, Z, (size_t)rows * d);
    b->scale_f(b, Xb, (size_t)rows * d, 0.5f);
    got = get(b, Xb, (size_t)rows * d);
    m = 0;
    for (int i = 0; i < rows * d; i++) m = fmax(m, fabs(got[i] - (xs[i] + zs[i]) * 0.5f));
    CHECK(m == 0);
    free(got);
    be_buf *bs[] = {Xb, Z, O, QG};
    for (int i = 0; i < 4; i++) b->buf_free(b, bs[i]);
    b->weight_free(b, W);
}

/* ---- the gated delta rule ---- */

enum { NK = 2, NV = 6, D = 128, CONV = (2 * NK + NV) * D };

/* The definition, written from the spec with the state as S[i][j] (key i,
 * value j), V head h reading QK head h % NK. */
static void naive_gdn(const float *qkv, const float *al, const float *be, const float *a, const float *dt, float *S,
                      int n, float *out) {
    float *kv = malloc(D * sizeof *kv);
    for (int t = 0; t < n; t++)
        for (int h = 0; h < NV; h++) {
            const float *q = qkv + (size_t)t * CONV + (h % NK) * D, *k = qkv + (size_t)t * CONV + (NK + h % NK) * D;
            const float *v = qkv + (size_t)t * CONV + 2 * NK * D + h * D;
            const float x = al[t * NV + h] + dt[h];
            const float g = a[h] * (x > 20 ? x : log1pf(expf(x))), beta = sigm(be[t * NV + h]);
            float *Sh = S + (size_t)h * D * D; /* stored as the backend does: (i, j) at j * D + i */
            for (int i = 0; i < D * D; i++) Sh[i] *= expf(g);
            for (int j = 0; j < D; j++) {
                kv[j] = 0;
                for (int i = 0; i < D; i++) kv[j] += Sh[j * D + i] * k[i];
            }
            for (int j = 0; j < D; j++)
                for (int i = 0; i < D; i++) Sh[j * D + i] += k[i] * beta * (v[j] - kv[j]);
            for (int j = 0; j < D; j++) {
                float o = 0;
                for (int i = 0; i < D; i++) o += Sh[j * D + i] * q[i];
                out[((size_t)t * NV + h) * D + j] = o / sqrtf((float)D);
            }
        }
    free(kv);
}

typedef struct {
    float *qkv, *al, *be, a[NV], dt[NV];
} gdn_in;

static void gdn_make(gdn_in *in, int n) {
    in->qkv = malloc(sizeof(float) * CONV * n);
    in->al = malloc(sizeof(float) * NV * n);
    in->be = malloc(sizeof(float) * NV * n);
    for (int i = 0; i < CONV * n; i++) in->qkv[i] = frand();
    for (int t = 0; t < n; t++) /* q and k unit-norm, as l2norm leaves them */
        for (int hh = 0; hh < 2 * NK; hh++) {
            float *v = in->qkv + (size_t)t * CONV + hh * D, ss = 0;
            for (int e = 0; e < D; e++) ss += v[e] * v[e];
            for (int e = 0; e < D; e++) v[e] /= sqrtf(ss);
        }
    for (int i = 0; i < NV * n; i++) in->al[i] = 2 * frand(), in->be[i] = 2 * frand();
    for (int h = 0; h < NV; h++) in->a[h] = -0.1f - 0.9f * (frand() + 1) / 2, in->dt[h] = frand() / 2;
}

/* Runs n tokens in calls of `step` tokens from state S (n x NV x D out). */
static void gdn_run(backend *b, const gdn_in *in, int n, int step, float *S, float *out) {
    gguf_tensor ta, td;
    be_weight *A = wt(b, &ta, "a", (float *)in->a, NV, 1), *DT = wt(b, &td, "dt", (float *)in->dt, NV, 1);
    be_buf *st = buf(b, S, (size_t)NV * D * D), *q = buf(b, NULL, (size_t)CONV * step);
    be_buf *al = buf(b, NULL, (size_t)NV * step), *be = buf(b, NULL, (size_t)NV * step);
    be_buf *o = buf(b, NULL, (size_t)NV * D * step);
    for (int t = 0; t < n; t += step) {
        const int m = n - t < step ? n - t : step;
        b->upload(b, q, 0, in->qkv + (size_t)t * CONV, (size_t)m * CONV);
        b->upload(b, al, 0, in->al + (size_t)t * NV, (size_t)m * NV);
        b->upload(b, be, 0, in->be + (size_t)t * NV, (size_t)m * NV);
        b->gated_delta(b, q, al, be, A, DT, st, m, NK, NV, D, o);
        b->download(b, o, 0, out + (size_t)t * NV * D, (size_t)m * NV * D);
    }
    b->download(b, st, 0, S, (size_t)NV * D * D);
    be_buf *bs[] = {st, q, al, be, o};
    for (int i = 0; i < 5; i++) b->buf_free(b, bs[i]);
    b->weight_free(b, A);
    b->weight_free(b, DT);
}

static void test_gdn(backend *ref, backend *fast) {
    const int n = 150; /* three chunks of 64, the last partial */
    gdn_in in;
    gdn_make(&in, n);
    const size_t ns = (size_t)NV * D * D, no = (size_t)n * NV * D;
    float *S0 = malloc(ns * 4), *Sw = malloc(ns * 4), *Sr = malloc(ns * 4), *Sf = malloc(ns * 4), *Sc = malloc(ns * 4);
    float *ow = malloc(no * 4), *or_ = malloc(no * 4), *of = malloc(no * 4), *oc = malloc(no * 4);
    for (size_t i = 0; i < ns; i++) S0[i] = frand() / 4; /* a state carried from earlier tokens */
    memcpy(Sw, S0, ns * 4);
    naive_gdn(in.qkv, in.al, in.be, in.a, in.dt, Sw, n, ow);
    /* the reference path: any split into calls is the recurrence */
    memcpy(Sr, S0, ns * 4);
    gdn_run(ref, &in, n, 37, Sr, or_);
    CHECKF(maxdiff(or_, ow, no) < 1e-5 && maxdiff(Sr, Sw, ns) < 1e-5, "cpu-ref gated_delta: out %g state %g",
           maxdiff(or_, ow, no), maxdiff(Sr, Sw, ns));
    /* the fast path one token at a time, and in tiles of 16: bit-identical */
    memcpy(Sf, S0, ns * 4);
    gdn_run(fast, &in, n, 1, Sf, of);
    memcpy(Sc, S0, ns * 4);
    gdn_run(fast, &in, n, BE_EXACT_ROWS, Sc, oc);
    CHECKF(!memcmp(of, oc, no * 4) && !memcmp(Sf, Sc, ns * 4), "cpu: tiles of %d tokens differ from single tokens",
           BE_EXACT_ROWS);
    CHECKF(maxdiff(of, ow, no) < 1e-5 && maxdiff(Sf, Sw, ns) < 1e-5, "cpu gated_delta: out %g state %g",
           maxdiff(of, ow, no), maxdiff(Sf, Sw, ns));
    /* the chunked prefill: one call of 150 tokens */
    memcpy(Sc, S0, ns * 4);
    gdn_run(fast, &in, n, n, Sc, oc);
    const double eo = maxdiff(oc, of, no), es = maxdiff(Sc, Sf, ns);
    CHECKF(eo < 2e-4 && es < 2e-4, "chunked vs recurrence: out %g state %g", eo, es);
    printf("gated_delta: chunked vs recurrence max |diff| out %.3g state %.3g (tolerance 2e-4)\n", eo, es);
    free(S0), free(Sw), free(Sr), free(Sf), free(Sc), free(ow), free(or_), free(of), free(oc);
    free(in.qkv), free(in.al), free(in.be);
}

int main(void) {
    gem_err err = {{0}};
    backend_opts ro = {0}, fo = {0};
    ro.reference = 1;
    ro.threads = 1;
    fo.threads = 3;
    backend *ref = backend_create("cpu", &ro, &err), *fast = backend_create("cpu", &fo, &err);
    CHECKF(ref && fast, "%s", err.msg);
    if (!ref || !fast) return test_report("test_cpu_hybrid");
    CHECK(ref->gated_delta && fast->conv_silu && fast->swiglu);
    backend *bs[] = {ref, fast};
    for (int i = 0; i < 2; i++) {
        test_conv(bs[i]);
        test_rows(bs[i]);
    }
    test_gdn(ref, fast);
    ref->destroy(ref);
    fast->destroy(fast);
    return test_report("test_cpu_hybrid");
}
