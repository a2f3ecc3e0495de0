/* Qwen3.5 hybrid forward pass (see qwen35_run.h), in the order of the shared
 * spec §1 and transformers' Qwen3_5 text model:
 *
 *   h = E[tok]
 *   per layer:  a = N_attn(h)
 *     GDN:      qkv = conv_silu(Wqkv a), q, k = l2norm(q, k); z = Wz a
 *               o = delta_rule(q, k, v, g(Walpha a), sigmoid(Wbeta a))
 *               m = Wout (rmsnorm(o) w * silu(z))
 *     attention: [q | gate] = Wq a per head; q = rope(N_q(q)) / sqrt(hd),
 *               k = rope(N_k(Wk a)), v = Wv a
 *               m = Wo (attention(q, k, v) * sigmoid(gate))
 *     h += m;  f = N_post(h);  h += Wdown(silu(Wgate f) * Wup f)
 *   logits = Wout_head N_out(h)
 *
 * RoPE rotates the first n_rot dims of each head in NeoX pairs with theta
 * 1e7 (text positions make the interleaved MRoPE a plain RoPE). */
#include "model/qwen35_run.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define EPS 1e-6f
#define THETA 1e7f

typedef struct {
    be_weight *attn_norm, *post_norm, *gate, *up, *down;
    be_weight *qkv, *z, *alpha, *beta, *conv, *dt, *a, *ssm_norm, *ssm_out; /* GDN */
    be_weight *q, *k, *v, *o, *q_norm, *k_norm;                           /* attention */
} layer_w;

struct qwen35_state {
    const qwen35_model *m;
    backend *b;
    int n_ctx, tile, n_past;
    be_weight *embd, *out_norm, *head;
    layer_w *L;
    be_kv **kv;              /* attention layers' caches (NULL elsewhere) */
    be_buf **conv, **ssm;    /* GDN layers' recurrent state (NULL elsewhere) */
    be_buf *h, *a, *mix, *qkvr, *qkv, *z, *al, *be, *o, *o2, *qg, *q, *k, *v, *att, *fg, *fu, *act;
    be_buf *last, *logits, *topk;
    be_buf *all; /* the head over a tile (all_logits), made on first use */
};

/* A checkpoint's floats (snap_floats' layout) on the backend (buf) or, for
 * a host snapshot, in host memory (host). */
struct qwen35_snap {
    backend *b;
    be_buf *buf;
    float *host;
    size_t cap; /* floats */
    int n_past;
};

/* The tile buffers of a state, in floats, in the order it allocates them
 * (qwen35_plan counts the same). */
enum {
    Q35T_H, Q35T_A, Q35T_MIX, Q35T_QKVR, Q35T_QKV, Q35T_Z, Q35T_AL, Q35T_BE, Q35T_O, Q35T_O2, Q35T_QG, Q35T_Q,
    Q35T_K, Q35T_V, Q35T_ATT, Q35T_FG, Q35T_FU, Q35T_ACT, Q35T_LAST, Q35T_LOGITS, Q35T_TOPK, Q35T_COUNT
};

static void tile_floats(const qwen35_profile *p, int tile, size_t nf[Q35T_COUNT]) {
    const size_t T = (size_t)tile, H = p->n_embd, C = qwen35_conv_dim(p), Vd = qwen35_value_dim(p);
    const size_t qd = (size_t)p->n_head * p->head_dim, kvd = (size_t)p->n_head_kv * p->head_dim;
    const size_t v[Q35T_COUNT] = {T * H, T * H, T * H, T * C, T * C, T * Vd, T * p->n_v_heads, T * p->n_v_heads,
                                  T * Vd, T * Vd, T * 2 * qd, T * qd, T * kvd, T * kvd, T * qd, T * p->n_ff,
                                  T * p->n_ff, T * p->n_ff, H, p->n_vocab, 2 * BE_TOPK_MAX};
    memcpy(nf, v, sizeof v);
}

int qwen35_backend_check(const backend *b, gem_err *err) {
    const struct {
        const char *name;
        int have;
    } ops[] = {
        {"conv_silu", b->conv_silu != NULL}, {"l2norm", b->l2norm != NULL}, {"gated_delta", b->gated_delta != NULL},
        {"rmsnorm_gated", b->rmsnorm_gated != NULL}, {"split_q", b->split_q != NULL},
        {"attn_gate", b->attn_gate != NULL}, {"swiglu", b->swiglu != NULL}, {"add", b->add != NULL},
        {"scale_f", b->scale_f != NULL}, {"kv_stash", b->kv_stash != NULL},
    };
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (!ops[i].have)
            return gem_err_set(err, "backend '%s' cannot run Qwen3.5 (qwen35) models yet: it has no '%s' op", b->name,
                               ops[i].name);
    return 0;
}

static void free_w(backend *b, be_weight *w) {
    if (w) b->weight_free(b, w);
}

void qwen35_state_free(qwen35_state *s) {
    if (!s) return;
    backend *b = s->b;
    const uint32_t nl = s->m->profile->n_layer;
    if (s->L) {
        for (uint32_t il = 0; il < nl; il++) {
            layer_w *l = &s->L[il];
            be_weight *ws[] = {l->attn_norm, l->post_norm, l->gate, l->up, l->down, l->qkv, l->z, l->alpha, l->beta,
                               l->conv, l->dt, l->a, l->ssm_norm, l->ssm_out, l->q, l->k, l->v, l->o, l->q_norm,
                               l->k_norm};
            for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) free_w(b, ws[i]);
        }
        free(s->L);
    }
    free_w(b, s->embd);
    free_w(b, s->out_norm);
    if (s->head != s->embd) free_w(b, s->head);
    for (uint32_t il = 0; il < nl; il++) {
        if (s->kv && s->kv[il]) b->kv_free(b, s->kv[il]);
        if (s->conv && s->conv[il]) b->buf_free(b, s->conv[il]);
        if (s->ssm && s->ssm[il]) b->buf_free(b, s->ssm[il]);
    }
    free(s->kv);
    free(s->conv);
    free(s->ssm);
    be_buf *bufs[] = {s->h, s->a, s->mix, s->qkvr, s->qkv, s->z, s->al, s->be, s->o, s->o2, s->qg, s->q, s->k, s->v,
                      s->att, s->fg, s->fu, s->act, s->last, s->logits, s->topk, s->all};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) b->buf_free(b, bufs[i]);
    free(s);
}

static size_t conv_floats(const qwen35_profile *p) { return (size_t)(QWEN35_CONV_KERNEL - 1) * qwen35_conv_dim(p); }
static size_t ssm_floats(const qwen35_profile *p) { return (size_t)p->n_v_heads * p->d_state * p->d_state; }

void qwen35_plan(const qwen35_profile *p, int n_ctx, int tile, int kv_f16, qwen35_mem *out) {
    memset(out, 0, sizeof *out);
    uint64_t kv = 0, rec = 0;
    for (uint32_t il = 0; il < p->n_layer; il++) {
        /* keys and values of n_ctx positions (kv_new's linear cache) */
        if (qwen35_layer_is_attn(il)) kv += 2ull * (uint64_t)n_ctx * p->n_head_kv * p->head_dim * (kv_f16 ? 2 : 4);
        else rec += (uint64_t)(conv_floats(p) + ssm_floats(p)) * 4;
    }
    size_t nf[Q35T_COUNT];
    tile_floats(p, tile, nf);
    for (int i = 0; i < Q35T_COUNT; i++) out->act_bytes += (uint64_t)nf[i] * 4;
    out->kv_bytes = kv;
    out->recurrent_bytes = rec;
    /* a checkpoint of a full context: the caches' filled positions, the
     * recurrent states and the last logits */
    out->checkpoint_bytes = kv + rec + (uint64_t)p->n_vocab * 4;
}

qwen35_state *qwen35_state_new(const qwen35_model *m, backend *b, int n_ctx, int tile, int kv_f16, gem_err *err) {
    if (qwen35_backend_check(b, err)) return NULL;
    if (kv_f16 && !b->kv_f16) {
        gem_err_set(err, "f16 KV caches: backend '%s' keeps its caches in f32", b->name);
        return NULL;
    }
    const qwen35_profile *p = m->profile;
    if (n_ctx < 1) {
        gem_err_set(err, "context of %d tokens: must be at least 1", n_ctx);
        return NULL;
    }
    qwen35_state *s = calloc(1, sizeof *s);
    if (!s) {
        gem_err_set(err, "out of memory");
        return NULL;
    }
    s->m = m;
    s->b = b;
    s->n_ctx = n_ctx;
    s->tile = tile > 0 ? tile : (b->prompt_tile > 0 ? b->prompt_tile : 64);
    const uint32_t nl = p->n_layer;
    s->L = calloc(nl, sizeof *s->L);
    s->kv = calloc(nl, sizeof *s->kv);
    s->conv = calloc(nl, sizeof *s->conv);
    s->ssm = calloc(nl, sizeof *s->ssm);
    if (!s->L || !s->kv || !s->conv || !s->ssm) {
        gem_err_set(err, "out of memory");
        goto fail;
    }
#define UP(dst, t) if (!((dst) = b->weight(b, (t), err))) goto fail
    UP(s->embd, m->token_embd);
    UP(s->out_norm, m->output_norm);
    if (m->output == m->token_embd) s->head = s->embd;
    else UP(s->head, m->output);
    for (uint32_t il = 0; il < nl; il++) {
        const qwen35_layer *g = &m->layers[il];
        layer_w *l = &s->L[il];
        UP(l->attn_norm, g->attn_norm); UP(l->post_norm, g->post_attention_norm);
        UP(l->gate, g->ffn_gate); UP(l->up, g->ffn_up); UP(l->down, g->ffn_down);
        if (g->is_attn) {
            UP(l->q, g->attn_q); UP(l->k, g->attn_k); UP(l->v, g->attn_v); UP(l->o, g->attn_output);
            UP(l->q_norm, g->attn_q_norm); UP(l->k_norm, g->attn_k_norm);
            if (!(s->kv[il] = b->kv_new(b, (int)p->n_head_kv, (int)p->head_dim, n_ctx, 0, kv_f16 ? BE_KV_F16 : BE_KV_F32, err))) {
                gem_err_wrap(err, "layer %u's KV cache", il);
                goto fail;
            }
        } else {
            UP(l->qkv, g->attn_qkv); UP(l->z, g->attn_gate); UP(l->alpha, g->ssm_alpha); UP(l->beta, g->ssm_beta);
            UP(l->conv, g->ssm_conv1d); UP(l->dt, g->ssm_dt); UP(l->a, g->ssm_a); UP(l->ssm_norm, g->ssm_norm);
            UP(l->ssm_out, g->ssm_out);
            if (!(s->conv[il] = b->alloc(b, conv_floats(p), err)) || !(s->ssm[il] = b->alloc(b, ssm_floats(p), err)))
                goto fail;
        }
    }
#undef UP
    size_t nf[Q35T_COUNT];
    tile_floats(p, s->tile, nf);
    be_buf **dst[Q35T_COUNT] = {&s->h, &s->a, &s->mix, &s->qkvr, &s->qkv, &s->z, &s->al, &s->be, &s->o, &s->o2,
                                &s->qg, &s->q, &s->k, &s->v, &s->att, &s->fg, &s->fu, &s->act, &s->last, &s->logits,
                                &s->topk};
    for (int i = 0; i < Q35T_COUNT; i++)
        if (!(*dst[i] = b->alloc(b, nf[i], err))) goto fail;
    qwen35_reset(s);
    return s;
fail:
    qwen35_state_free(s);
    return NULL;
}

int qwen35_n_past(const qwen35_state *s) { return s->n_past; }
int qwen35_n_ctx(const qwen35_state *s) { return s->n_ctx; }

void qwen35_reset(qwen35_state *s) {
    const qwen35_profile *p = s->m->profile;
    const size_t nz = conv_floats(p) > ssm_floats(p) ? conv_floats(p) : ssm_floats(p);
    float *zero = calloc(nz, sizeof *zero);
    for (uint32_t il = 0; zero && il < p->n_layer; il++) {
        if (s->conv[il]) s->b->upload(s->b, s->conv[il], 0, zero, conv_floats(p));
        if (s->ssm[il]) s->b->upload(s->b, s->ssm[il], 0, zero, ssm_floats(p));
    }
    free(zero);
    s->n_past = 0;
}

/* One Gated DeltaNet mixer over the tile's n normed rows in s->a; the
 * result in s->mix. */
static void gdn_layer(qwen35_state *s, uint32_t il, int n) {
    backend *b = s->b;
    const qwen35_profile *p = s->m->profile;
    const layer_w *l = &s->L[il];
    const int C = (int)qwen35_conv_dim(p), nk = (int)p->n_k_heads, nv = (int)p->n_v_heads, d = (int)p->d_state;
    const be_weight *W[3] = {l->qkv, l->z, l->beta};
    be_buf *out[3] = {s->qkvr, s->z, s->be};
    b->matmul_multi(b, 3, W, s->a, n, out);
    b->matmul(b, l->alpha, s->a, n, s->al);
    b->conv_silu(b, s->qkvr, s->conv[il], l->conv, n, C, s->qkv);
    b->l2norm(b, s->qkv, n, 2 * nk, d, C, EPS);
    b->gated_delta(b, s->qkv, s->al, s->be, l->a, l->dt, s->ssm[il], n, nk, nv, d, s->o);
    b->rmsnorm_gated(b, s->o, s->z, l->ssm_norm, n * nv, d, EPS, s->o2);
    b->matmul(b, l->ssm_out, s->o2, n, s->mix);
}

/* One gated attention mixer at positions pos0..; the result in s->mix. */
static void attn_layer(qwen35_state *s, uint32_t il, int n, int pos0) {
    backend *b = s->b;
    const qwen35_profile *p = s->m->profile;
    const layer_w *l = &s->L[il];
    const int nh = (int)p->n_head, nkv = (int)p->n_head_kv, hd = (int)p->head_dim, rot = (int)p->n_rot;
    const be_weight *W[3] = {l->q, l->k, l->v};
    be_buf *out[3] = {s->qg, s->k, s->v};
    b->matmul_multi(b, 3, W, s->a, n, out);
    b->split_q(b, s->qg, n, nh, hd, s->q);
    b->rmsnorm(b, s->q, l->q_norm, n * nh, hd, EPS, s->q);
    b->rmsnorm(b, s->k, l->k_norm, n * nkv, hd, EPS, s->k);
    b->rope(b, s->q, n, nh, hd, rot, pos0, THETA, NULL);
    b->rope(b, s->k, n, nkv, hd, rot, pos0, THETA, NULL);
    /* the softmax scale 1/sqrt(head_dim), on q (the seam's attention has none) */
    b->scale_f(b, s->q, (size_t)n * nh * hd, 1.0f / sqrtf((float)hd));
    b->attention(b, s->q, s->k, s->v, s->kv[il], n, pos0, nh, nkv, hd, 0, s->att);
    b->attn_gate(b, s->att, s->qg, n, nh, hd);
    b->matmul(b, l->o, s->att, n, s->mix);
}

/* One tile of n <= s->tile tokens; the head on the last row (into
 * s->logits, HEAD_LAST), every row (into s->all, HEAD_ALL) or none. */
enum { HEAD_NONE, HEAD_LAST, HEAD_ALL };
static void tile(qwen35_state *s, const int32_t *ids, int n, int head) {
    backend *b = s->b;
    const qwen35_profile *p = s->m->profile;
    const int H = (int)p->n_embd, F = (int)p->n_ff;
    if (b->set_step) b->set_step(b, ids, n, s->n_past);
    b->embed(b, s->embd, ids, n, 1.0f, s->h);
    for (uint32_t il = 0; il < p->n_layer; il++) {
        b->rmsnorm(b, s->h, s->L[il].attn_norm, n, H, EPS, s->a);
        if (s->m->layers[il].is_attn) attn_layer(s, il, n, s->n_past);
        else gdn_layer(s, il, n);
        b->add(b, s->h, s->mix, (size_t)n * H);
        b->rmsnorm(b, s->h, s->L[il].post_norm, n, H, EPS, s->a);
        const be_weight *W[2] = {s->L[il].gate, s->L[il].up};
        be_buf *out[2] = {s->fg, s->fu};
        b->matmul_multi(b, 2, W, s->a, n, out);
        b->swiglu(b, s->fg, s->fu, (size_t)n * F, s->act);
        b->matmul(b, s->L[il].down, s->act, n, s->mix);
        b->add(b, s->h, s->mix, (size_t)n * H);
    }
    if (head == HEAD_ALL) {
        b->rmsnorm(b, s->h, s->out_norm, n, H, EPS, s->a);
        b->matmul(b, s->head, s->a, n, s->all);
        b->copy(b, s->all, (size_t)(n - 1) * p->n_vocab, s->logits, 0, p->n_vocab);
    } else if (head == HEAD_LAST) {
        b->copy(b, s->h, (size_t)(n - 1) * H, s->last, 0, (size_t)H);
        b->rmsnorm(b, s->last, s->out_norm, 1, H, EPS, s->last);
        b->matmul(b, s->head, s->last, 1, s->logits);
    }
    s->n_past += n;
}

/* The checks every evaluation makes before changing anything. */
static int eval_check(const qwen35_state *s, const int32_t *ids, int n, gem_err *err) {
    const qwen35_profile *p = s->m->profile;
    if (n < 1) return gem_err_set(err, "nothing to evaluate");
    if (n > s->n_ctx - s->n_past)
        return gem_err_set(err, "context full: %d tokens evaluated, %d more would pass the context of %d", s->n_past, n,
                           s->n_ctx);
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || (uint32_t)ids[i] >= p->n_vocab)
            return gem_err_set(err, "token id %d at %d is outside the vocabulary of %u", ids[i], i, p->n_vocab);
    return 0;
}

int qwen35_eval(qwen35_state *s, const int32_t *ids, int n, float *logits, int all_logits, gem_err *err) {
    const qwen35_profile *p = s->m->profile;
    if (eval_check(s, ids, n, err)) return -1;
    backend *b = s->b;
    if (all_logits && logits && !s->all && !(s->all = b->alloc(b, (size_t)s->tile * p->n_vocab, err))) return -1;
    for (int t = 0; t < n; t += s->tile) {
        const int m = n - t < s->tile ? n - t : s->tile;
        const int rows = all_logits && logits;
        /* tiles before the last need no head unless every row's logits are asked for */
        tile(s, ids + t, m, rows ? HEAD_ALL : t + m == n ? HEAD_LAST : HEAD_NONE);
        if (rows) b->download(b, s->all, 0, logits + (size_t)t * p->n_vocab, (size_t)m * p->n_vocab);
    }
    if (logits && !all_logits) b->download(b, s->logits, 0, logits, p->n_vocab);
    if (!logits) b->sync(b);
    return b->status ? b->status(b, err) : 0;
}

int qwen35_eval_greedy(qwen35_state *s, const int32_t *ids, int n, int32_t *next, gem_err *err) {
    if (qwen35_eval(s, ids, n, NULL, 0, err)) return -1;
    backend *b = s->b;
    float f;
    b->argmax(b, s->logits, 1, (int)s->m->profile->n_vocab, s->topk);
    b->download(b, s->topk, 0, &f, 1);
    *next = (int32_t)f;
    return b->status ? b->status(b, err) : 0;
}

int qwen35_prefill(qwen35_state *s, const int32_t *ids, int n, gem_err *err) {
    if (eval_check(s, ids, n, err)) return -1;
    for (int t = 0; t < n; t += s->tile) tile(s, ids + t, n - t < s->tile ? n - t : s->tile, HEAD_NONE);
    s->b->sync(s->b);
    return s->b->status ? s->b->status(s->b, err) : 0;
}

int qwen35_logits(qwen35_state *s, float *dst, gem_err *err) {
    s->b->download(s->b, s->logits, 0, dst, s->m->profile->n_vocab);
    return s->b->status ? s->b->status(s->b, err) : 0;
}

int qwen35_topk(qwen35_state *s, int k, float *vals, int32_t *ids, gem_err *err) {
    backend *b = s->b;
    const uint32_t V = s->m->profile->n_vocab;
    if (k < 1 || k > BE_TOPK_MAX || (uint32_t)k > V) return gem_err_set(err, "top-k of %d (1..%d)", k, BE_TOPK_MAX);
    if (!b->topk) return gem_err_set(err, "backend '%s' has no top-k op", b->name);
    float out[2 * BE_TOPK_MAX];
    b->topk(b, s->logits, (int)V, k, s->topk);
    b->download(b, s->topk, 0, out, 2 * (size_t)k);
    for (int i = 0; i < k; i++) {
        vals[i] = out[i];
        ids[i] = (int32_t)out[k + i];
    }
    return b->status ? b->status(b, err) : 0;
}

int qwen35_recurrent_read(qwen35_state *s, uint32_t il, float *conv, float *ssm) {
    if (il >= s->m->profile->n_layer || !s->conv[il]) return -1;
    if (conv) s->b->download(s->b, s->conv[il], 0, conv, conv_floats(s->m->profile));
    if (ssm) s->b->download(s->b, s->ssm[il], 0, ssm, ssm_floats(s->m->profile));
    return 0;
}

/* ---- checkpoints ---- */

/* Floats a snapshot at n_past positions takes: the recurrent states, the
 * attention caches' bytes (rounded up to floats) and the last logits. */
static size_t snap_floats(const qwen35_state *s, int n_past) {
    const qwen35_profile *p = s->m->profile;
    size_t n = p->n_vocab;
    for (uint32_t il = 0; il < p->n_layer; il++) {
        if (s->kv[il]) n += (s->b->kv_bytes(s->b, s->kv[il], n_past) + 3) / 4;
        else n += conv_floats(p) + ssm_floats(p);
    }
    return n;
}

/* Makes sn a backend snapshot of at least `need` floats (a host one turns
 * into a backend one). */
static int snap_room(qwen35_state *s, qwen35_snap *sn, size_t need, gem_err *err) {
    backend *b = s->b;
    free(sn->host);
    sn->host = NULL;
    if (sn->buf && sn->cap >= need) return 0;
    if (sn->buf) b->buf_free(b, sn->buf);
    sn->buf = NULL;
    sn->cap = 0;
    if (!(sn->buf = b->alloc(b, need, err))) return -1;
    sn->cap = need;
    return 0;
}

int qwen35_snap_save(qwen35_state *s, qwen35_snap **snap, gem_err *err) {
    backend *b = s->b;
    const qwen35_profile *p = s->m->profile;
    const size_t need = snap_floats(s, s->n_past);
    if (!*snap && !(*snap = calloc(1, sizeof **snap))) return gem_err_set(err, "out of memory");
    qwen35_snap *sn = *snap;
    sn->b = b;
    if (snap_room(s, sn, need, err)) return -1;
    size_t off = 0;
    for (uint32_t il = 0; il < p->n_layer; il++) {
        if (s->kv[il]) {
            b->kv_stash(b, s->kv[il], s->n_past, sn->buf, off * 4);
            off += (b->kv_bytes(b, s->kv[il], s->n_past) + 3) / 4;
        } else {
            b->copy(b, s->conv[il], 0, sn->buf, off, conv_floats(p));
            off += conv_floats(p);
            b->copy(b, s->ssm[il], 0, sn->buf, off, ssm_floats(p));
            off += ssm_floats(p);
        }
    }
    b->copy(b, s->logits, 0, sn->buf, off, p->n_vocab);
    sn->n_past = s->n_past;
    return 0;
}

/* A host snapshot holds the same floats as a backend one (kv_save writes
 * kv_stash's bytes), logits included. */
int qwen35_snap_save_host(qwen35_state *s, qwen35_snap **snap, gem_err *err) {
    backend *b = s->b;
    const qwen35_profile *p = s->m->profile;
    const size_t need = snap_floats(s, s->n_past);
    qwen35_snap *sn = calloc(1, sizeof *sn);
    if (!sn || !(sn->host = malloc(need * sizeof(float)))) {
        free(sn);
        return gem_err_set(err, "out of memory for a parked session (%zu bytes)", need * sizeof(float));
    }
    sn->b = b;
    sn->cap = need;
    size_t off = 0;
    for (uint32_t il = 0; il < p->n_layer; il++) {
        if (s->kv[il]) {
            b->kv_save(b, s->kv[il], s->n_past, sn->host + off);
            off += (b->kv_bytes(b, s->kv[il], s->n_past) + 3) / 4;
        } else {
            b->download(b, s->conv[il], 0, sn->host + off, conv_floats(p));
            off += conv_floats(p);
            b->download(b, s->ssm[il], 0, sn->host + off, ssm_floats(p));
            off += ssm_floats(p);
        }
    }
    b->download(b, s->logits, 0, sn->host + off, p->n_vocab);
    sn->n_past = s->n_past;
    *snap = sn;
    return 0;
}

int qwen35_snap_to_host(const qwen35_snap *src, qwen35_snap **snap, gem_err *err) {
    qwen35_snap *sn = calloc(1, sizeof *sn);
    if (!sn || !(sn->host = malloc(src->cap * sizeof(float)))) {
        free(sn);
        return gem_err_set(err, "out of memory for a parked session (%zu bytes)", src->cap * sizeof(float));
    }
    sn->b = src->b;
    sn->cap = src->cap;
    sn->n_past = src->n_past;
    if (src->host) memcpy(sn->host, src->host, src->cap * sizeof(float));
    else src->b->download(src->b, src->buf, 0, sn->host, src->cap);
    *snap = sn;
    return 0;
}

void qwen35_snap_load(qwen35_state *s, const qwen35_snap *sn) {
    backend *b = s->b;
    const qwen35_profile *p = s->m->profile;
    size_t off = 0;
    for (uint32_t il = 0; il < p->n_layer; il++) {
        if (s->kv[il]) {
            if (sn->host) b->kv_load(b, s->kv[il], sn->n_past, sn->host + off);
            else b->kv_unstash(b, s->kv[il], sn->n_past, sn->buf, off * 4);
            off += (b->kv_bytes(b, s->kv[il], sn->n_past) + 3) / 4;
        } else {
            if (sn->host) b->upload(b, s->conv[il], 0, sn->host + off, conv_floats(p));
            else b->copy(b, sn->buf, off, s->conv[il], 0, conv_floats(p));
            off += conv_floats(p);
            if (sn->host) b->upload(b, s->ssm[il], 0, sn->host + off, ssm_floats(p));
            else b->copy(b, sn->buf, off, s->ssm[il], 0, ssm_floats(p));
            off += ssm_floats(p);
        }
    }
    if (sn->host) b->upload(b, s->logits, 0, sn->host + off, p->n_vocab);
    else b->copy(b, sn->buf, off, s->logits, 0, p->n_vocab);
    s->n_past = sn->n_past;
}

int qwen35_snap_n_past(const qwen35_snap *snap) { return snap->n_past; }
int qwen35_snap_is_host(const qwen35_snap *snap) { return snap->host != NULL; }
size_t qwen35_snap_bytes(const qwen35_snap *snap) { return snap->cap * sizeof(float); }

void qwen35_snap_free(qwen35_snap *snap) {
    if (!snap) return;
    if (snap->buf) snap->b->buf_free(snap->b, snap->buf);
    free(snap->host);
    free(snap);
}
