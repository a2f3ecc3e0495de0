/* Gemma 4 MTP drafter forward pass (see gemma4_draft.h), in the order of
 * the reference's graph (src/models/gemma4-assistant.cpp in the pinned
 * llama.cpp) and transformers' Gemma4AssistantForCausalLM:
 *
 *   z = W_pre [E_target[tok] * sqrt(D) ; h]
 *   per layer:  a = N_attn(z); q = rope(N_q(Wq a)) at the round's position
 *               z += N_post_attn(Wo attention(q, target caches))
 *               f = N_ffn(z); z += N_post_ffw(Wdown(gelu(Wgate f) * Wup f))
 *               z *= layer_output_scale
 *   y = N_out(z); logits = E_assistant y (no soft-cap); h_next = W_post y
 *
 * RoPE as the target's: sliding layers theta 1e4 over all 256 dims, the
 * full layer theta 1e6 with rope_freqs. Attention scale 1.0. */
#include "model/gemma4_draft.h"

#include <math.h>
#include <stdlib.h>

#include "util/argmax.h"

#define EPS 1e-6f

typedef struct {
    be_weight *attn_norm, *q, *o, *q_norm, *post_attn_norm, *ffn_norm, *gate, *up, *down, *post_ffw_norm, *out_scale;
} dlayer;

/* The drafter's resident weights, shared by the drafters of an engine's
 * sessions (gemma4_drafter_on). */
struct gemma4_draft_weights {
    const gemma4_model *m;
    backend *b;
    be_weight *embd, *out_norm, *rope_freqs, *pre, *post;
    dlayer L[8];
};

struct gemma4_drafter {
    const gemma4_model *m;
    gemma4_state *target;
    backend *b;
    gemma4_draft_weights *w;
    int owns_w; /* made by gemma4_drafter_new */
    be_weight *embd, *out_norm, *rope_freqs, *pre, *post; /* w's */
    dlayer L[8];                                          /* w's */
    be_kv *kv[8]; /* per layer: the target's cache it reads (not owned) */
    be_buf *xh, *z, *a, *q, *att, *o, *act, *down, *y, *logits, *best, *hnext;
    be_graph *step; /* the recorded step body (backends that replay) */
};

static be_weight *up_w(backend *b, const gguf_tensor *t, gem_err *err) { return t ? b->weight(b, t, err) : NULL; }

void gemma4_draft_weights_free(gemma4_draft_weights *w) {
    if (!w) return;
    backend *b = w->b;
    for (uint32_t il = 0; il < w->m->profile->n_layer && il < 8; il++) {
        dlayer *l = &w->L[il];
        be_weight *ws[] = {l->attn_norm, l->q, l->o, l->q_norm, l->post_attn_norm, l->ffn_norm, l->gate, l->up,
                           l->down, l->post_ffw_norm, l->out_scale};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
            if (ws[i]) b->weight_free(b, ws[i]);
    }
    be_weight *g[] = {w->embd, w->out_norm, w->rope_freqs, w->pre, w->post};
    for (size_t i = 0; i < sizeof g / sizeof g[0]; i++)
        if (g[i]) b->weight_free(b, g[i]);
    free(w);
}

gemma4_draft_weights *gemma4_draft_weights_new(const gemma4_model *asst, backend *b, gem_err *err) {
    const gemma4_profile *p = asst->profile;
    if (p->n_layer > 8) {
        gem_err_set(err, "%s: %u drafter layers (gem's drafters have 4)", p->name, p->n_layer);
        return NULL;
    }
    gemma4_draft_weights *w = calloc(1, sizeof *w);
    if (!w) {
        gem_err_set(err, "out of memory");
        return NULL;
    }
    w->m = asst;
    w->b = b;
    if (!(w->embd = up_w(b, asst->token_embd, err)) || !(w->out_norm = up_w(b, asst->output_norm, err)) ||
        !(w->rope_freqs = up_w(b, asst->rope_freqs, err)) || !(w->pre = up_w(b, asst->nextn_pre, err)) ||
        !(w->post = up_w(b, asst->nextn_post, err)))
        goto fail;
    for (uint32_t il = 0; il < p->n_layer; il++) {
        const gemma4_layer *g = &asst->layers[il];
        dlayer *l = &w->L[il];
#define UP(dst, src) if (!(l->dst = up_w(b, g->src, err))) goto fail
        UP(attn_norm, attn_norm); UP(q, attn_q); UP(o, attn_output); UP(q_norm, attn_q_norm);
        UP(post_attn_norm, post_attention_norm); UP(ffn_norm, ffn_norm); UP(gate, ffn_gate); UP(up, ffn_up);
        UP(down, ffn_down); UP(post_ffw_norm, post_ffw_norm); UP(out_scale, layer_output_scale);
#undef UP
    }
    return w;
fail:
    gemma4_draft_weights_free(w);
    return NULL;
}

void gemma4_drafter_free(gemma4_drafter *d) {
    if (!d) return;
    backend *b = d->b;
    if (d->owns_w) gemma4_draft_weights_free(d->w);
    if (d->step) b->graph_free(b, d->step);
    be_buf *bufs[] = {d->xh, d->z, d->a, d->q, d->att, d->o, d->act, d->down, d->y, d->logits, d->best, d->hnext};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) b->buf_free(b, bufs[i]);
    free(d);
}

gemma4_drafter *gemma4_drafter_on(gemma4_draft_weights *w, gemma4_state *target, gem_err *err) {
    const gemma4_model *asst = w->m;
    const gemma4_model *tm = gemma4_state_model(target);
    if (gemma4_pair_check(tm, asst, err)) return NULL;
    backend *b = gemma4_state_backend(target);
    if (b != w->b) {
        gem_err_set(err, "internal: drafter weights of another backend");
        return NULL;
    }
    if (!b->attention_cached) {
        gem_err_set(err, "backend '%s' cannot run an MTP drafter (no cached-key attention)", b->name);
        return NULL;
    }
    const gemma4_profile *p = asst->profile;
    gemma4_drafter *d = calloc(1, sizeof *d);
    if (!d) {
        gem_err_set(err, "out of memory");
        return NULL;
    }
    d->m = asst;
    d->target = target;
    d->b = b;
    d->w = w;
    d->embd = w->embd, d->out_norm = w->out_norm, d->rope_freqs = w->rope_freqs, d->pre = w->pre, d->post = w->post;
    for (int i = 0; i < 8; i++) d->L[i] = w->L[i];
    /* the target layers drafter layers read: its last sliding and last full */
    const uint32_t tl = tm->profile->n_layer;
    int last_swa = -1, last_full = -1;
    for (uint32_t il = 0; il < tl; il++) {
        if (tm->layers[il].is_full) last_full = (int)il;
        else last_swa = (int)il;
    }
    for (uint32_t il = 0; il < p->n_layer; il++) {
        const gemma4_layer *g = &asst->layers[il];
        const int src = g->is_full ? last_full : last_swa;
        if (src < 0 || !(d->kv[il] = gemma4_state_kv(target, (uint32_t)src))) {
            gem_err_set(err, "the target has no %s layer for drafter layer %u", g->is_full ? "full" : "sliding", il);
            goto fail;
        }
    }
    const size_t H = p->n_embd, D = p->n_embd_out, F = p->n_ff, QW = (size_t)p->n_head * GEMMA4_HEAD_DIM_FULL;
    if (!(d->xh = b->alloc(b, 2 * D, err)) || !(d->z = b->alloc(b, H, err)) || !(d->a = b->alloc(b, H, err)) ||
        !(d->q = b->alloc(b, QW, err)) || !(d->att = b->alloc(b, QW, err)) || !(d->o = b->alloc(b, H, err)) ||
        !(d->act = b->alloc(b, F, err)) || !(d->down = b->alloc(b, H, err)) || !(d->y = b->alloc(b, H, err)) ||
        !(d->logits = b->alloc(b, GEMMA4_N_VOCAB, err)) || !(d->best = b->alloc(b, 2, err)) ||
        !(d->hnext = b->alloc(b, D, err)))
        goto fail;
    return d;
fail:
    gemma4_drafter_free(d);
    return NULL;
}

gemma4_drafter *gemma4_drafter_new(const gemma4_model *asst, gemma4_state *target, gem_err *err) {
    gemma4_draft_weights *w = gemma4_draft_weights_new(asst, gemma4_state_backend(target), err);
    if (!w) return NULL;
    gemma4_drafter *d = gemma4_drafter_on(w, target, err);
    if (!d) {
        gemma4_draft_weights_free(w);
        return NULL;
    }
    d->owns_w = 1;
    return d;
}

typedef struct {
    gemma4_drafter *d;
    int32_t id;
    int pos;
    int want_p; /* the proposal's probability is wanted (best[1]) */
} step_ctx;

/* The step after its input h is in xh's second half: repeatable, and on a
 * GPU recordable (the token and position come from the step buffer). */
static void step_body(void *ctx) {
    const step_ctx *sc = ctx;
    gemma4_drafter *d = sc->d;
    backend *b = d->b;
    const gemma4_profile *p = d->m->profile;
    const int H = (int)p->n_embd, D = (int)p->n_embd_out, pos = sc->pos;
    /* input: the target's embedding of id (its own input scale), then h */
    b->embed(b, gemma4_state_embd(d->target), &sc->id, 1, sqrtf((float)D), d->xh);
    b->matmul(b, d->pre, d->xh, 1, d->z);
    for (uint32_t il = 0; il < p->n_layer; il++) {
        const gemma4_layer *g = &d->m->layers[il];
        const dlayer *l = &d->L[il];
        const int hd = (int)g->head_dim;
        b->rmsnorm(b, d->z, l->attn_norm, 1, H, EPS, d->a);
        b->matmul(b, l->q, d->a, 1, d->q);
        b->rmsnorm_rope(b, d->q, l->q_norm, 1, (int)p->n_head, hd, EPS, pos, g->is_full ? 1e6f : 1e4f,
                        g->is_full ? d->rope_freqs : NULL);
        b->attention_cached(b, d->q, d->kv[il], 1, pos, (int)p->n_head, (int)g->n_head_kv, hd,
                            g->is_full ? 0 : (int)p->window, d->att);
        b->matmul(b, l->o, d->att, 1, d->o);
        b->add_rmsnorm(b, d->z, d->o, l->post_attn_norm, 1, H, EPS, NULL);
        b->rmsnorm(b, d->z, l->ffn_norm, 1, H, EPS, d->a);
        b->matmul_geglu(b, l->gate, l->up, d->a, 1, d->act);
        b->matmul(b, l->down, d->act, 1, d->down);
        b->add_rmsnorm(b, d->z, d->down, l->post_ffw_norm, 1, H, EPS, l->out_scale);
    }
    b->rmsnorm(b, d->z, d->out_norm, 1, H, EPS, d->y);
    b->matmul(b, d->embd, d->y, 1, d->logits);
    /* a recording backend's step is one graph for every call: it always
     * takes the probability (on a GPU a few exps per thread of the argmax
     * it replaces); the CPU only when asked (a pass of exp over the
     * vocabulary) */
    if (b->argmax_prob && (sc->want_p || b->capture)) b->argmax_prob(b, d->logits, GEMMA4_N_VOCAB, d->best);
    else b->argmax(b, d->logits, 1, GEMMA4_N_VOCAB, d->best);
    b->matmul(b, d->post, d->y, 1, d->hnext);
}

int gemma4_draft_step(gemma4_drafter *d, int32_t id, int first, int32_t *next, float *p_top, float *logits,
                      gem_err *err) {
    backend *b = d->b;
    const int D = (int)d->m->profile->n_embd_out;
    const int pos = gemma4_n_past(d->target);
    if (id < 0 || (uint32_t)id >= GEMMA4_N_VOCAB) return gem_err_set(err, "token id %d is out of the vocabulary", id);
    const be_buf *h = d->hnext;
    size_t h_off = 0;
    if (first && gemma4_hidden(d->target, &h, &h_off))
        return gem_err_set(err, "the target's hidden state is not available for drafting");
    /* a GPU's kernels read the token and position from the step buffer */
    if (b->set_step) b->set_step(b, &id, 1, pos);
    b->copy(b, h, h_off, d->xh, (size_t)D, (size_t)D);
    step_ctx sc = {d, id, pos, p_top != NULL};
    if (backend_run_recorded(b, &d->step, step_body, &sc, err)) return -1;
    float f[2] = {0, 0};
    const int on_device = p_top && b->argmax_prob;
    b->download(b, d->best, 0, f, on_device ? 2 : 1);
    float *l = logits;
    if (p_top && !on_device && !l && !(l = malloc(GEMMA4_N_VOCAB * sizeof *l))) return gem_err_set(err, "out of memory");
    if (l) b->download(b, d->logits, 0, l, GEMMA4_N_VOCAB);
    if (p_top) *p_top = on_device ? f[1] : gem_top1_prob(l, GEMMA4_N_VOCAB, NULL);
    if (l != logits) free(l);
    if (b->status(b, err)) return -1;
    *next = (int32_t)f[0];
    return 0;
}

uint64_t gemma4_draft_bytes(const gemma4_drafter *d) { return gemma4_decode_bytes(d->m); }
