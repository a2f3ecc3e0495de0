/* cuda_ops family attention (see ops_harness.h): attention and
 * attention_qkv on every kernel (flash attention and the split kernel for
 * tiles; k_attn_dec, k_attn_tc and k_attn_split for one-token steps, with
 * f32 and f16 caches), a deep cache, the q/k/v norms folded into k_attn_tc
 * against the two launches (GEM_CUDA_ATTN_FUSE=0), row-exact tiles in one
 * launch against row by row (GEM_CUDA_ATTN_ROWS=0), and the 8-bit codes
 * the combines leave for the output projection. */
#include "ops_harness.h"

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
    be_kv *kv = kv_make(gb, kvh, d, window ? window : 512, window > 0, &err);
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
    be_kv *kc = kv_make(cpu_ref, kvh, d, cap, window > 0, &err), *kg[ATT_MAX];
    int ok[ATT_MAX];
    for (int i = 0; i < nb; i++) {
        kg[i] = kv_make(gk[i], kvh, d, cap, window > 0, &err);
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
        for (int b = 0; b < nb; b++) kv[b] = kv_make(bs[b], kvh, d, cap, 0, &err);
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
    int fused;        /* the first backend folds the norms into one-token steps (checked) */
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
        if (b == 0 && n == 1 && c->fused) {
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
        c.kasv = cases[ci].kasv, c.theta = full ? 1e6f : 1e4f, c.what = what, c.fused = 1;
        const int d = c.d;
        gem_err err;
        tensor qn = make_tensor(QT_F32, d, 1), kn = make_tensor(QT_F32, d, 1), ff = make_tensor(QT_F32, d / 2, 1);
        for (int j = 0; j < d / 2; j++) ((float *)ff.data)[j] = j < d / 8 ? 1.0f : 1e30f; /* as rope_freqs */
        for (int b = 0; b < 2; b++) {
            c.qw[b] = bs[b]->weight(bs[b], &qn.t, &err), c.kw[b] = bs[b]->weight(bs[b], &kn.t, &err);
            c.ff[b] = full && c.kasv ? bs[b]->weight(bs[b], &ff.t, &err) : NULL;
            c.kv[b] = kv_make(bs[b], c.kvh, d, cases[ci].cap, !full, &err);
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

/* attention_qkv on tiles of 2..16 rows (row-exact: a verification tile)
 * in one launch per kernel (ga: the default, attention_tile) against row
 * by row (gb: GEM_CUDA_ATTN_ROWS=0, each row the one-token call): outputs
 * and caches equal bit for bit. Rings of window + BE_EXACT_ROWS slots as
 * the model keeps them, wrapped by the tiles; the 31B sliding and full
 * layers (K as V, rope factors), the 12B full layer (two groups of query
 * heads), heads of 128, and a deep full layer (several splits, the tile
 * straddling split and tile boundaries). */
static void test_attention_tiles(backend *ga, backend *gb, const char *what) {
    const struct {
        int nh, kvh, d, window, cap, kasv, prompt;
    } cases[] = {
        {32, 16, 256, 64, 64 + BE_EXACT_ROWS, 0, 40}, {32, 4, 512, 0, 400, 1, 20}, {16, 1, 512, 0, 400, 1, 5},
        {4, 2, 128, 32, 32 + BE_EXACT_ROWS, 0, 0},    {8, 1, 512, 0, 16384, 1, 13000},
    };
    static const int tiles[] = {2, 9, 16, 3, 5, 8, 1, 13, 4, 16, 7, 6, 11, 2, 15, 10};
    backend *bs[2] = {ga, gb};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const int full = cases[ci].window == 0;
        qkv_case c;
        memset(&c, 0, sizeof c);
        c.nh = cases[ci].nh, c.kvh = cases[ci].kvh, c.d = cases[ci].d, c.window = cases[ci].window;
        c.kasv = cases[ci].kasv, c.theta = full ? 1e6f : 1e4f, c.what = what;
        const int d = c.d;
        gem_err err;
        tensor qn = make_tensor(QT_F32, d, 1), kn = make_tensor(QT_F32, d, 1), ff = make_tensor(QT_F32, d / 2, 1);
        for (int j = 0; j < d / 2; j++) ((float *)ff.data)[j] = j < d / 8 ? 1.0f : 1e30f;
        for (int b = 0; b < 2; b++) {
            c.qw[b] = bs[b]->weight(bs[b], &qn.t, &err), c.kw[b] = bs[b]->weight(bs[b], &kn.t, &err);
            c.ff[b] = full && c.kasv ? bs[b]->weight(bs[b], &ff.t, &err) : NULL;
            c.kv[b] = kv_make(bs[b], c.kvh, d, cases[ci].cap, !full, &err);
        }
        int pos = 0, ok = 1;
        for (int left = cases[ci].prompt; ok && left > 0;) {
            const int n = left < 3250 ? left : 3250;
            ok = qkv_pair_call(bs, &c, n, pos);
            pos += n, left -= n;
        }
        for (size_t t = 0; ok && t < sizeof tiles / sizeof tiles[0]; t++) {
            ok = qkv_pair_call(bs, &c, tiles[t], pos);
            pos += tiles[t];
        }
        const int held = full || pos < cases[ci].cap ? pos : cases[ci].cap;
        const size_t bytes = ga->kv_bytes(ga, c.kv[0], held);
        unsigned char *c0 = malloc(bytes), *c1 = malloc(bytes);
        ga->kv_save(ga, c.kv[0], held, c0);
        gb->kv_save(gb, c.kv[1], held, c1);
        CHECKF(ok && bytes == gb->kv_bytes(gb, c.kv[1], held) && !memcmp(c0, c1, bytes),
               "attention tiles vs %s: the caches after %d positions differ (heads %d/%d, d %d)", what, pos, c.nh,
               c.kvh, d);
        free(c0), free(c1);
        for (int b = 0; b < 2; b++) {
            bs[b]->kv_free(bs[b], c.kv[b]);
            bs[b]->weight_free(bs[b], c.qw[b]), bs[b]->weight_free(bs[b], c.kw[b]);
            if (c.ff[b]) bs[b]->weight_free(bs[b], c.ff[b]);
        }
        free_tensor(&qn), free_tensor(&kn), free_tensor(&ff);
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
        be_kv *kv = kv_make(gpu, kvh, d, 512, 0, &err);
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

/* attention_cached (an MTP drafter's queries over its target's cache, keys
 * before pos only, nothing stored): the GPU with f32 caches (1e-5) and f16
 * caches (3e-3) against the CPU reference, on caches both filled by the same
 * attention tiles. The GPU splits the keys into ranges fixed by the capacity
 * (64 keys each at full capacity, up to 64 ranges): positions leave most
 * ranges empty (pos 5), cut one midway (700 of 1024), fill all 64 (3000 of
 * 4096, 47 keys each), and a sliding ring (window 64 in 80 slots, 200
 * positions in: wrapped, keys [pos - 63, pos)); two query rows. */
static void test_attention_cached(void) {
    static const struct {
        int n_head, kvh, d, window, cap, fill, tile;
    } cs[] = {{8, 2, 256, 0, 1024, 5, 5}, {8, 2, 256, 0, 1024, 700, 100}, {4, 1, 512, 0, 4096, 3000, 500},
              {8, 2, 256, 64, 80, 200, 16}};
    backend *gs[2] = {gpu, gpu_f16};
    const double tol[2] = {1e-5, 3e-3};
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        const int nh = cs[c].n_head, kvh = cs[c].kvh, d = cs[c].d, w = cs[c].window, n = 2;
        for (int gi = 0; gi < 2; gi++) {
            backend *g = gs[gi];
            if (!g || !g->attention_cached) continue;
            gem_err err;
            be_kv *kc = kv_make(cpu_ref, kvh, d, cs[c].cap, w > 0, &err);
            be_kv *kg = kc ? kv_make(g, kvh, d, cs[c].cap, w > 0, &err) : NULL;
            CHECKF(kc && kg, "attention_cached case %zu: %s", c, err.msg);
            if (!kc || !kg) {
                if (kc) cpu_ref->kv_free(cpu_ref, kc);
                continue;
            }
            const float qk = 3.0f / sqrtf(sqrtf((float)d));
            for (int pos = 0; pos < cs[c].fill; pos += cs[c].tile) {
                const int t = cs[c].fill - pos < cs[c].tile ? cs[c].fill - pos : cs[c].tile;
                const size_t nq = (size_t)t * nh * d, nk = (size_t)t * kvh * d;
                float *q = rand_vec(nq, qk), *k = rand_vec(nk, qk), *v = rand_vec(nk, 1.0f);
                int32_t *ids = calloc((size_t)t, sizeof *ids);
                backend *both[2] = {cpu_ref, g};
                be_kv *kvs[2] = {kc, kg};
                for (int b = 0; b < 2; b++) {
                    backend *x = both[b];
                    if (x->set_step) x->set_step(x, ids, t, pos);
                    be_buf *qb = put(x, q, nq), *kb = put(x, k, nk), *vb = put(x, v, nk), *ob = put(x, NULL, nq);
                    x->attention(x, qb, kb, vb, kvs[b], t, pos, nh, kvh, d, w, ob);
                    x->buf_free(x, qb), x->buf_free(x, kb), x->buf_free(x, vb), x->buf_free(x, ob);
                }
                free(q), free(k), free(v), free(ids);
            }
            const int pos = cs[c].fill;
            const size_t nq = (size_t)n * nh * d;
            float *q = rand_vec(nq, qk);
            int32_t ids[2] = {0, 0};
            float *out[2];
            backend *both[2] = {cpu_ref, g};
            be_kv *kvs[2] = {kc, kg};
            for (int b = 0; b < 2; b++) {
                backend *x = both[b];
                if (x->set_step) x->set_step(x, ids, n, pos);
                be_buf *qb = put(x, q, nq), *ob = put(x, NULL, nq);
                x->attention_cached(x, qb, kvs[b], n, pos, nh, kvh, d, w, ob);
                out[b] = get(x, ob, nq);
                x->buf_free(x, qb), x->buf_free(x, ob);
            }
            CHECKF(close_enough("attention_cached", out[1], out[0], nq, tol[gi], 2 * tol[gi]),
                   "attention_cached (%s caches) heads %d/%d d %d window %d capacity %d at %d", gi ? "f16" : "f32",
                   nh, kvh, d, w, cs[c].cap, pos);
            CHECKF(g->status(g, &err) == 0, "%s", err.msg);
            free(out[0]), free(out[1]), free(q);
            cpu_ref->kv_free(cpu_ref, kc);
            g->kv_free(g, kg);
        }
    }
}

/* ---- caches of both entry types on one backend (--kv-type f16-full) ----
 * A model with f32 sliding rings and f16 full-attention caches runs both
 * kinds' kernels side by side on one backend, in one recorded decode step:
 * a sliding layer (8 query heads over 2 KV heads of 256, window 16 in a
 * ring of 16 + BE_EXACT_ROWS, f32: the staged k_attn_dec, the q/k/v norms
 * as their own launch) and a full layer (8 over 1 of 512, K as V, rope
 * factors, f16: k_attn_tc with the norms folded in), each through
 * attention_qkv, then attention_cached over both caches (an MTP drafter's
 * reads). Backend A holds both; B1 only the sliding layer, B2 only the
 * full one. The same calls (a prefill tile of 40: flash attention or the
 * split kernel; a row-exact tile of 5; 24 one-token steps replayed from a
 * graph) give A's outputs and caches bit for bit what B1's and
 * B2's give: no kernel choice, scratch or layout leaks from one cache's
 * type into the other's. Then A's two caches are stashed into one buffer
 * (the f16 cache at the f32 one's byte offset), 3 steps run, the caches
 * come back from the stash and the same 3 steps give the same bits again
 * (a checkpoint of mixed caches, kv_stash/kv_unstash): the
 * last 3 calls on all three backends then agree as before. */
#define MX_NH 8
#define MX_MAXN 40
typedef struct {
    backend *b;
    int has[2]; /* [0] the sliding layer, [1] the full layer */
    be_kv *kv[2];
    be_weight *qw[2], *kw[2], *ff;
    /* the inputs as uploaded (qin, kin, vin), copied by the body into the
     * buffers attention_qkv may rewrite, so that the body repeats
     * exactly (a capture runs it twice) */
    be_buf *qin[2], *kin[2], *vin[2], *q[2], *k[2], *v[2], *qc[2], *out[2], *cached[2];
    be_graph *graph;
    int n, pos;
} mixed_run;
static const int mx_kvh[2] = {2, 1}, mx_d[2] = {256, 512}, mx_window[2] = {16, 0}, mx_kasv[2] = {0, 1};
static const int mx_cap[2] = {16 + BE_EXACT_ROWS, 256};

static void mixed_body(void *ctx) {
    mixed_run *r = ctx;
    backend *b = r->b;
    for (int l = 0; l < 2; l++) {
        if (!r->has[l]) continue;
        const size_t nq = (size_t)r->n * MX_NH * mx_d[l], nk = (size_t)r->n * mx_kvh[l] * mx_d[l];
        b->copy(b, r->qin[l], 0, r->q[l], 0, nq);
        b->copy(b, r->kin[l], 0, r->k[l], 0, nk);
        b->copy(b, r->vin[l], 0, r->v[l], 0, nk);
        b->attention_qkv(b, r->q[l], r->qw[l], r->k[l], r->kw[l], r->v[l], mx_kasv[l], r->kv[l], r->n, r->pos, MX_NH,
                         mx_kvh[l], mx_d[l], 1e-6f, l ? 1e6f : 1e4f, l ? r->ff : NULL, mx_window[l], r->out[l]);
        if (r->n == 1)
            b->attention_cached(b, r->qc[l], r->kv[l], 1, r->pos, MX_NH, mx_kvh[l], mx_d[l], mx_window[l],
                                r->cached[l]);
    }
}

/* One call of n tokens at pos with inputs in[l] (q, k, v, then the cached
 * query, each at its size); the outputs come back in got[l]. */
static void mixed_call(mixed_run *r, float *const in[2][4], int n, int pos, float *got[2][2]) {
    backend *b = r->b;
    int32_t ids[MX_MAXN] = {0};
    r->n = n, r->pos = pos;
    for (int l = 0; l < 2; l++) {
        if (!r->has[l]) continue;
        const size_t nq = (size_t)n * MX_NH * mx_d[l], nk = (size_t)n * mx_kvh[l] * mx_d[l];
        b->upload(b, r->qin[l], 0, in[l][0], nq);
        b->upload(b, r->kin[l], 0, in[l][1], nk);
        b->upload(b, r->vin[l], 0, in[l][2], nk);
        b->upload(b, r->qc[l], 0, in[l][3], (size_t)MX_NH * mx_d[l]);
    }
    b->set_step(b, ids, n, pos);
    gem_err err;
    if (n == 1) CHECKF(backend_run_recorded(b, &r->graph, mixed_body, r, &err) == 0, "mixed caches: %s", err.msg);
    else mixed_body(r);
    for (int l = 0; l < 2; l++) {
        got[l][0] = got[l][1] = NULL;
        if (!r->has[l]) continue;
        got[l][0] = get(b, r->out[l], (size_t)n * MX_NH * mx_d[l]);
        if (n == 1) got[l][1] = get(b, r->cached[l], (size_t)MX_NH * mx_d[l]);
    }
}

static void test_attention_mixed(const backend_opts *o) {
    gem_err err;
    mixed_run runs[3];
    memset(runs, 0, sizeof runs);
    tensor nw[2][2], ff = make_tensor(QT_F32, mx_d[1] / 2, 1);
    for (int j = 0; j < mx_d[1] / 2; j++) ((float *)ff.data)[j] = j < mx_d[1] / 8 ? 1.0f : 1e30f; /* as rope_freqs */
    for (int l = 0; l < 2; l++)
        for (int w = 0; w < 2; w++) nw[l][w] = make_tensor(QT_F32, mx_d[l], 1);
    int ok = 1;
    for (int ri = 0; ri < 3; ri++) {
        mixed_run *r = &runs[ri];
        r->b = ri == 0 ? gpu : backend_create("cuda", o, &err);
        CHECKF(r->b != NULL, "mixed caches: %s", err.msg);
        if (!r->b) {
            ok = 0;
            break;
        }
        r->has[0] = ri != 2, r->has[1] = ri != 1;
        for (int l = 0; l < 2; l++) {
            if (!r->has[l]) continue;
            const size_t nq = (size_t)MX_MAXN * MX_NH * mx_d[l], nk = (size_t)MX_MAXN * mx_kvh[l] * mx_d[l];
            r->kv[l] = r->b->kv_new(r->b, mx_kvh[l], mx_d[l], mx_cap[l], !l, l ? BE_KV_F16 : BE_KV_F32, &err);
            CHECKF(r->kv[l] != NULL, "mixed caches: %s", err.msg);
            r->qw[l] = r->b->weight(r->b, &nw[l][0].t, &err), r->kw[l] = r->b->weight(r->b, &nw[l][1].t, &err);
            r->q[l] = put(r->b, NULL, nq), r->k[l] = put(r->b, NULL, nk), r->v[l] = put(r->b, NULL, nk);
            r->qin[l] = put(r->b, NULL, nq), r->kin[l] = put(r->b, NULL, nk), r->vin[l] = put(r->b, NULL, nk);
            r->qc[l] = put(r->b, NULL, (size_t)MX_NH * mx_d[l]), r->out[l] = put(r->b, NULL, nq);
            r->cached[l] = put(r->b, NULL, (size_t)MX_NH * mx_d[l]);
            ok &= r->kv[l] != NULL;
        }
        if (r->has[1]) r->ff = r->b->weight(r->b, &ff.t, &err);
    }
    /* the calls: 40, 5, 21 single tokens, then 3 more, run after the stash
     * below */
    int calls[26] = {40, 5};
    for (int i = 2; i < 26; i++) calls[i] = 1;
    int pos = 0;
    for (int ci = 0; ci < 26 && ok; ci++) {
        const int n = calls[ci];
        if (ci == 23) { /* stash A's caches, both into one buffer */
            backend *a = runs[0].b;
            const size_t b0 = a->kv_bytes(a, runs[0].kv[0], pos), b1 = a->kv_bytes(a, runs[0].kv[1], pos);
            be_buf *st = a->alloc(a, (b0 + b1 + 3) / 4, &err);
            CHECKF(st != NULL, "mixed caches: stash: %s", err.msg);
            if (!st) break;
            a->kv_stash(a, runs[0].kv[0], pos, st, 0);
            a->kv_stash(a, runs[0].kv[1], pos, st, b0);
            /* three steps on A alone, then back to the stash */
            float *in3[3][2][4];
            for (int t = 0; t < 3; t++)
                for (int l = 0; l < 2; l++) {
                    const size_t nq = (size_t)MX_NH * mx_d[l], nk = (size_t)mx_kvh[l] * mx_d[l];
                    in3[t][l][0] = rand_vec(nq, 3.0f), in3[t][l][1] = rand_vec(nk, 0.5f);
                    in3[t][l][2] = rand_vec(nk, 2.0f), in3[t][l][3] = rand_vec(nq, 1.0f);
                }
            for (int t = 0; t < 3; t++) {
                float *got[2][2];
                mixed_call(&runs[0], in3[t], 1, pos + t, got);
                for (int l = 0; l < 2; l++) free(got[l][0]), free(got[l][1]);
            }
            a->kv_unstash(a, runs[0].kv[0], pos, st, 0);
            a->kv_unstash(a, runs[0].kv[1], pos, st, b0);
            a->buf_free(a, st);
            for (int t = 0; t < 3; t++)
                for (int l = 0; l < 2; l++)
                    for (int j = 0; j < 4; j++) free(in3[t][l][j]);
            /* the ring's every slot came back (pos is past its capacity);
             * the full cache's positions from pos on hold the three steps'
             * keys until the calls below rewrite them, unseen before */
        }
        float *in[2][4];
        for (int l = 0; l < 2; l++) {
            const size_t nq = (size_t)n * MX_NH * mx_d[l], nk = (size_t)n * mx_kvh[l] * mx_d[l];
            in[l][0] = rand_vec(nq, 3.0f), in[l][1] = rand_vec(nk, 0.5f), in[l][2] = rand_vec(nk, 2.0f);
            in[l][3] = rand_vec((size_t)MX_NH * mx_d[l], 3.0f / sqrtf(sqrtf((float)mx_d[l])));
        }
        float *got[3][2][2];
        for (int ri = 0; ri < 3; ri++) mixed_call(&runs[ri], in, n, pos, got[ri]);
        for (int l = 0; l < 2 && ok; l++) {
            const int ref = l ? 2 : 1;
            const size_t nq = (size_t)n * MX_NH * mx_d[l];
            ok &= close_enough("mixed caches", got[0][l][0], got[ref][l][0], nq, 0, 0);
            if (n == 1)
                ok &= close_enough("mixed caches (cached keys)", got[0][l][1], got[ref][l][1],
                                   (size_t)MX_NH * mx_d[l], 0, 0);
            CHECKF(ok, "mixed caches: the %s layer's %s differ from its own backend's (%d tokens at %d)",
                   l ? "full (f16)" : "sliding (f32)", n == 1 ? "step" : "tile", n, pos);
        }
        for (int ri = 0; ri < 3; ri++)
            for (int l = 0; l < 2; l++) free(got[ri][l][0]), free(got[ri][l][1]);
        for (int l = 0; l < 2; l++)
            for (int j = 0; j < 4; j++) free(in[l][j]);
        pos += n;
    }
    /* the caches themselves, bit for bit */
    for (int l = 0; l < 2 && ok; l++) {
        mixed_run *a = &runs[0], *r = &runs[l ? 2 : 1];
        const int held = l || pos < mx_cap[l] ? pos : mx_cap[l];
        const size_t bytes = a->b->kv_bytes(a->b, a->kv[l], held);
        CHECK(bytes == r->b->kv_bytes(r->b, r->kv[l], held));
        CHECK(bytes == (size_t)2 * held * mx_kvh[l] * mx_d[l] * (l ? 2 : 4));
        unsigned char *c0 = malloc(bytes), *c1 = malloc(bytes);
        a->b->kv_save(a->b, a->kv[l], held, c0);
        r->b->kv_save(r->b, r->kv[l], held, c1);
        CHECKF(!memcmp(c0, c1, bytes), "mixed caches: the %s cache differs after %d positions", l ? "full" : "sliding",
               pos);
        free(c0), free(c1);
    }
    for (int ri = 0; ri < 3; ri++) {
        mixed_run *r = &runs[ri];
        if (!r->b) continue;
        CHECKF(r->b->status(r->b, &err) == 0, "mixed caches: %s", err.msg);
        if (r->graph) r->b->graph_free(r->b, r->graph);
        for (int l = 0; l < 2; l++) {
            if (!r->has[l]) continue;
            if (r->kv[l]) r->b->kv_free(r->b, r->kv[l]);
            r->b->weight_free(r->b, r->qw[l]), r->b->weight_free(r->b, r->kw[l]);
            be_buf *bufs[] = {r->qin[l], r->kin[l], r->vin[l], r->q[l],   r->k[l],
                              r->v[l],   r->qc[l],  r->out[l], r->cached[l]};
            for (int i = 0; i < 9; i++) r->b->buf_free(r->b, bufs[i]);
        }
        if (r->ff) r->b->weight_free(r->b, r->ff);
        if (ri) r->b->destroy(r->b);
    }
    for (int l = 0; l < 2; l++) free_tensor(&nw[l][0]), free_tensor(&nw[l][1]);
    free_tensor(&ff);
}

void ops_attention(const backend_opts *g) {
    test_quantized_handoff();
    test_attention();
    test_attention_deep();
    test_attention_cached();
    test_attention_mixed(g);
    if (gpu_f16) {
        backend *gnf = variant_f16("GEM_CUDA_ATTN_FUSE", "0", g);
        if (gnf) test_attention_qkv(gpu_f16, gnf, "two launches (GEM_CUDA_ATTN_FUSE=0)");
        variant_done(gnf);
    }
    test_wide_handoff(gpu, 0);
    if (gpu_f16) test_wide_handoff(gpu_f16, 64);
    /* tiles in one launch against row by row: f16 caches (k_attn_tc with
     * the norms folded in, and GEM_CUDA_ATTN_FUSE=0: the norms' launch and
     * k_attn_tc), f32 caches (the staged k_attn_dec, and the register form
     * GEM_CUDA_ATTN_DEC=1) */
    static const struct {
        const char *var, *val;
        int f16;
    } tv[] = {{NULL, NULL, 1}, {"GEM_CUDA_ATTN_FUSE", "0", 1}, {NULL, NULL, 0}, {"GEM_CUDA_ATTN_DEC", "1", 0}};
    for (size_t i = 0; i < sizeof tv / sizeof tv[0]; i++) {
        if (tv[i].f16 && !gpu_f16) continue;
        if (tv[i].var) setenv(tv[i].var, tv[i].val, 1);
        backend *ga = (tv[i].f16 ? variant_f16 : variant)("GEM_CUDA_ATTN_ROWS", "1", g);
        backend *gb = (tv[i].f16 ? variant_f16 : variant)("GEM_CUDA_ATTN_ROWS", "0", g);
        if (tv[i].var) unsetenv(tv[i].var);
        char what[96];
        snprintf(what, sizeof what, "row by row (%s caches%s%s%s)", tv[i].f16 ? "f16" : "f32", tv[i].var ? ", " : "",
                 tv[i].var ? tv[i].var : "", tv[i].var ? "=" : "");
        if (tv[i].var) snprintf(what + strlen(what), sizeof what - strlen(what), "%s", tv[i].val);
        if (ga && gb) test_attention_tiles(ga, gb, what);
        variant_done(ga);
        variant_done(gb);
    }
}
