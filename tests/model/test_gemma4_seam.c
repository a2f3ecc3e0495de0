/* The layer loop's optional fused ops (layer_rest, attention_rest; their
 * CUDA forms are opt-in kernels): on a CPU backend whose fused ops are
 * emulated here by the same op-by-op calls the loop would make, taking or
 * declining by a policy, the logits of a prompt in tiles and of
 * token-by-token decode equal the plain backend's bit for bit, and the loop
 * asks in the seam's order: both ops in one with the next layer's q/k/v,
 * then without them, then the attention and layer_rest with and without;
 * it skips a layer's q/k/v products exactly when the layer before took
 * them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "gguf/gguf.h"
#include "model/gemma4.h"
#include "model/gemma4_run.h"
#include "quant/quant.h"
#include "synth_tiny.h"
#include "test.h"

#define V GEMMA4_N_VOCAB

/* What the emulated ops take: bit 0 layer_rest with q/k/v, 1 layer_rest
 * without, 2 attention_rest with, 3 attention_rest without, 4 only one-token
 * tiles (prefill tiles declined). */
enum { LR_QKV = 1, LR = 2, AR_QKV = 4, AR = 8, ONE_TOKEN = 16 };
static int policy;
/* calls: [0] layer_rest asked with q/k/v, [1] without, [2] attention_rest
 * with, [3] without; taken: the same, taken; multi: matmul_multi calls */
static int asked[4], taken[4], multi;
static void (*base_multi)(backend *, int, const be_weight *const *, const be_buf *, int, be_buf *const *);

static void count_multi(backend *b, int count, const be_weight *const *W, const be_buf *x, int n, be_buf *const *out) {
    multi++;
    base_multi(b, count, W, x, n, out);
}

/* The loop's own fallback calls (gemma4_run.c: add_then_norm, attend, the
 * rest op by op), so that results are bit for bit the plain backend's. */
static void add_then_norm(backend *b, const be_layer_rest *r, const be_buf *x, const be_weight *w,
                          const be_weight *scale, const be_weight *w_next) {
    if (b->add_rmsnorm_norm) {
        b->add_rmsnorm_norm(b, r->h, x, w, scale, w_next, r->n, r->width, r->eps, r->a);
        return;
    }
    b->add_rmsnorm(b, r->h, x, w, r->n, r->width, r->eps, scale);
    b->rmsnorm(b, r->h, w_next, r->n, r->width, r->eps, r->a);
}

static void rest_ops(backend *b, const be_layer_rest *r) {
    b->matmul(b, r->o, r->att, r->n, r->o_out);
    add_then_norm(b, r, r->o_out, r->post_attn_norm, NULL, r->ffn_norm);
    b->matmul_geglu(b, r->gate, r->up, r->a, r->n, r->act);
    b->matmul(b, r->down, r->act, r->n, r->down_out);
    if (r->next_norm)
        add_then_norm(b, r, r->down_out, r->post_ffw_norm, r->out_scale, r->next_norm);
    else
        b->add_rmsnorm(b, r->h, r->down_out, r->post_ffw_norm, r->n, r->width, r->eps, r->out_scale);
    if (r->next_count) base_multi(b, r->next_count, r->next_w, r->a, r->n, r->next_out);
}

static void attend_ops(backend *b, const be_attend *a) {
    const int n = a->n, nh = a->n_head, kvh = a->n_kv_head, d = a->head_dim;
    if (b->attention_qkv) {
        b->attention_qkv(b, a->q, a->qw, a->k, a->kw, a->v, a->v_from_k, a->kv, n, a->pos0, nh, kvh, d, a->eps,
                         a->theta, a->freq_factors, a->window, a->out);
        return;
    }
    if (b->qkv_norm_rope) {
        b->qkv_norm_rope(b, a->q, a->qw, a->k, a->kw, a->v, a->v_from_k, n, nh, kvh, d, a->eps, a->pos0, a->theta,
                         a->freq_factors);
    } else {
        if (a->v_from_k) b->copy(b, a->k, 0, a->v, 0, (size_t)n * kvh * d);
        b->rmsnorm_rope(b, a->q, a->qw, n, nh, d, a->eps, a->pos0, a->theta, a->freq_factors);
        b->rmsnorm_rope(b, a->k, a->kw, n, kvh, d, a->eps, a->pos0, a->theta, a->freq_factors);
        b->rmsnorm(b, a->v, NULL, n * kvh, d, a->eps, a->v);
    }
    b->attention(b, a->q, a->k, a->v, a->kv, n, a->pos0, nh, kvh, d, a->window, a->out);
}

static int takes(int with_bit, int without_bit, const be_layer_rest *r) {
    if ((policy & ONE_TOKEN) && r->n != 1) return 0;
    return policy & (r->next_count ? with_bit : without_bit);
}

static int emu_layer_rest(backend *b, const be_layer_rest *r) {
    const int k = r->next_count ? 0 : 1;
    asked[k]++;
    if (!takes(LR_QKV, LR, r)) return 1;
    taken[k]++;
    rest_ops(b, r);
    return 0;
}

static int emu_attention_rest(backend *b, const be_attend *a, const be_layer_rest *r) {
    const int k = r->next_count ? 2 : 3;
    asked[k]++;
    CHECKF(a->out == r->att, "attention_rest: the attention's output is not att");
    if (!takes(AR_QKV, AR, r)) return 1;
    taken[k]++;
    attend_ops(b, a);
    rest_ops(b, r);
    return 0;
}

/* logits of N prompt tokens (tiles of 16, every position) and of D decode
 * steps after them */
#define N 70
#define D 6
static void run(const gemma4_model *m, int lr, int ar, float *out) {
    gem_err err = {{0}};
    backend_opts bo = {1, 0, 0, 0};
    backend *b = backend_create("cpu", &bo, &err);
    CHECKF(b != NULL, "%s", err.msg);
    if (!b) return;
    base_multi = b->matmul_multi;
    b->matmul_multi = count_multi;
    CHECK(b->layer_rest == NULL && b->attention_rest == NULL); /* the CPU backend offers neither */
    if (lr) b->layer_rest = emu_layer_rest;
    if (ar) b->attention_rest = emu_attention_rest;
    gemma4_state *s = gemma4_state_new(m, b, 128, 16, 0, &err);
    CHECKF(s != NULL, "%s", err.msg);
    if (s) {
        int32_t ids[N + D];
        for (int i = 0; i < N + D; i++) ids[i] = (int32_t)((i * 7919 + 13) % 262000) + 100;
        ids[0] = 2;
        CHECKF(!gemma4_eval(s, ids, N, out, 1, &err), "%s", err.msg);
        for (int t = 0; t < D; t++)
            CHECKF(!gemma4_eval(s, ids + N + t, 1, out + (size_t)(N + t) * V, 0, &err), "%s", err.msg);
        gemma4_state_free(s);
    }
    b->destroy(b);
}

int main(void) {
    char path[] = "/tmp/gem-seam-XXXXXX";
    if (test_tmp_file(path)) return 1;
    gem_err err = {{0}};
    CHECKF(!test_synth_tiny(path, 7, 0, &err), "%s", err.msg);
    gguf_file *f = gguf_open(path, &err);
    gemma4_model *m = f ? gemma4_bind(f, &err) : NULL;
    CHECKF(m != NULL, "%s", err.msg);
    if (!m) {
        unlink(path);
        return test_report("test_gemma4_seam");
    }
    const int L = (int)m->profile->n_layer, tiles = (N + 15) / 16, evals = tiles + D; /* forward tiles */
    const size_t nl = (size_t)(N + D) * V;
    float *want = malloc(sizeof(float) * nl), *got = malloc(sizeof(float) * nl);
    memset(asked, 0, sizeof asked), memset(taken, 0, sizeof taken), multi = 0;
    run(m, 0, 0, want);
    CHECKF(multi == evals * L, "plain backend: %d matmul_multi calls, want %d", multi, evals * L);
    const struct {
        int policy, lr, ar;
        const char *what;
        /* per forward tile: layer_rest asked with/without, attention_rest
         * asked with/without, taken likewise, matmul_multi calls */
        int ask[4], take[4], mm;
    } cases[] = {
        /* layer_rest takes everything: the next q/k/v come with it, so only
         * layer 0's products are called */
        {LR_QKV | LR, 1, 0, "layer_rest takes all", {L - 1, 1, 0, 0}, {L - 1, 1, 0, 0}, 1},
        /* without the q/k/v only: asked twice for every layer but the last */
        {LR, 1, 0, "layer_rest without q/k/v", {L - 1, L, 0, 0}, {0, L, 0, 0}, L},
        /* declines all: every layer op by op */
        {0, 1, 0, "layer_rest declines", {L - 1, L, 0, 0}, {0, 0, 0, 0}, L},
        {AR_QKV | AR, 0, 1, "attention_rest takes all", {0, 0, L - 1, 1}, {0, 0, L - 1, 1}, 1},
        {AR, 0, 1, "attention_rest without q/k/v", {0, 0, L - 1, L}, {0, 0, 0, L}, L},
        /* attention_rest without q/k/v before layer_rest with them */
        {AR | LR_QKV, 1, 1, "attention_rest without, layer_rest with", {0, 0, L - 1, L}, {0, 0, 0, L}, L},
        /* attention_rest declines: then layer_rest with q/k/v */
        {LR_QKV | LR, 1, 1, "attention_rest declines, layer_rest takes", {L - 1, 1, L - 1, L}, {L - 1, 1, 0, 0}, 1},
        {0, 1, 1, "both decline", {L - 1, L, L - 1, L}, {0, 0, 0, 0}, L},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        policy = cases[c].policy;
        memset(asked, 0, sizeof asked), memset(taken, 0, sizeof taken), multi = 0;
        memset(got, 0, sizeof(float) * nl);
        run(m, cases[c].lr, cases[c].ar, got);
        int same = 1;
        for (size_t i = 0; i < nl && same; i++) same = got[i] == want[i];
        CHECKF(same, "%s: logits differ from the plain backend's", cases[c].what);
        for (int k = 0; k < 4; k++) {
            CHECKF(asked[k] == evals * cases[c].ask[k], "%s: asked[%d] %d, want %d", cases[c].what, k, asked[k],
                   evals * cases[c].ask[k]);
            CHECKF(taken[k] == evals * cases[c].take[k], "%s: taken[%d] %d, want %d", cases[c].what, k, taken[k],
                   evals * cases[c].take[k]);
        }
        CHECKF(multi == evals * cases[c].mm, "%s: %d matmul_multi calls, want %d", cases[c].what, multi,
               evals * cases[c].mm);
    }
    /* one-token tiles only (a GPU's kernels decline prefill tiles): the
     * prompt's tiles op by op, the decode steps in one op each */
    policy = AR_QKV | AR | ONE_TOKEN;
    memset(asked, 0, sizeof asked), memset(taken, 0, sizeof taken), multi = 0;
    run(m, 0, 1, got);
    int same = 1;
    for (size_t i = 0; i < nl && same; i++) same = got[i] == want[i];
    CHECKF(same, "one-token attention_rest: logits differ from the plain backend's");
    CHECKF(taken[2] == D * (L - 1) && taken[3] == D && multi == tiles * L + D,
           "one-token attention_rest: taken %d/%d, %d matmul_multi calls", taken[2], taken[3], multi);
    free(want), free(got);
    gemma4_free(m);
    gguf_close(f);
    unlink(path);
    return test_report("test_gemma4_seam");
}
