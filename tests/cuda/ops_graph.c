/* cuda_ops family graph (see ops_harness.h): set_step, capture and
 * replay: a recorded step replays at other positions with other ids. */
#include "ops_harness.h"

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
    g.kv = kv_make(gpu, 1, 256, 16, 1, &err);
    be_kv *kc = kv_make(cpu_ref, 1, 256, 16, 1, &err);
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

/* A row-exact tile of split rows (K 8192: two parts, k_vr_q) recorded once
 * and replayed for new inputs equals a direct call bit for bit. The scale
 * launch before the product makes the input new to the product's
 * activation cache, as the norm before every product of a step does. */
typedef struct {
    be_weight *W[2];
    be_buf *x, *o[2];
    int n;
    int64_t K;
} tile_ctx;

static void tile_body(void *p) {
    tile_ctx *c = p;
    gpu->scale_f(gpu, c->x, (size_t)c->n * (size_t)c->K, 1.0f);
    gpu->matmul_multi(gpu, 2, (const be_weight *const *)c->W, c->x, c->n, c->o);
}

static void test_graph_tile(void) {
    const int64_t K = 8192, M[2] = {333, 64};
    gem_err err;
    tensor A[2] = {make_tensor(QT_Q4_0, K, M[0]), make_tensor(QT_Q4_0, K, M[1])};
    tile_ctx rec = {{gpu->weight(gpu, &A[0].t, &err), gpu->weight(gpu, &A[1].t, &err)}, NULL, {NULL, NULL}, 9, K};
    tile_ctx direct = rec;
    rec.x = put(gpu, NULL, (size_t)rec.n * K);
    for (int i = 0; i < 2; i++)
        rec.o[i] = put(gpu, NULL, (size_t)rec.n * M[i]), direct.o[i] = put(gpu, NULL, (size_t)rec.n * M[i]);
    direct.x = rec.x;
    float *x0 = rand_vec((size_t)rec.n * K, 1.0f);
    gpu->upload(gpu, rec.x, 0, x0, (size_t)rec.n * K);
    free(x0);
    be_graph *gr = gpu->capture(gpu, tile_body, &rec, &err);
    CHECKF(gr != NULL, "%s", err.msg);
    int same = 1;
    for (int rep = 0; rep < 3 && gr; rep++) {
        float *xv = rand_vec((size_t)rec.n * K, 1.0f + (float)rep);
        gpu->upload(gpu, rec.x, 0, xv, (size_t)rec.n * K);
        CHECK(gpu->replay(gpu, gr) == 0);
        tile_body(&direct);
        for (int i = 0; i < 2; i++) {
            float *a = get(gpu, rec.o[i], (size_t)rec.n * M[i]), *b = get(gpu, direct.o[i], (size_t)rec.n * M[i]);
            if (memcmp(a, b, sizeof(float) * (size_t)rec.n * (size_t)M[i])) same = 0;
            free(a), free(b);
        }
        free(xv);
    }
    CHECKF(same, "a replayed 9-token tile of K 8192 rows equals a direct call, bit for bit, 3 times");
    CHECK(gpu->status(gpu, &err) == 0);
    if (gr) gpu->graph_free(gpu, gr);
    gpu->buf_free(gpu, rec.x);
    for (int i = 0; i < 2; i++) {
        gpu->buf_free(gpu, rec.o[i]), gpu->buf_free(gpu, direct.o[i]);
        gpu->weight_free(gpu, rec.W[i]);
        free_tensor(&A[i]);
    }
}

void ops_graph(const backend_opts *g) {
    (void)g;
    test_graph();
    test_graph_tile();
}
