/* Gemma 4 forward pass (see gemma4_run.h), in the order of the shared spec
 * §1 and llama.cpp's graph:
 *
 *   h = E[tok] * sqrt(H)
 *   per layer:  a = N_attn(h); q = N_q(Wq a), k = N_k(Wk a) (RoPE on both);
 *               v = rms(Wv a), or on full layers rms(raw Wk a) (K as V);
 *               h += N_post_attn(Wo attention(q, k, v))
 *               f = N_ffn(h); h += N_post_ffw(Wdown(gelu(Wgate f) * Wup f))
 *               h *= layer_output_scale
 *   logits = 30 tanh((E N_out(h)) / 30)
 *
 * Sliding layers rotate all 256 dims with theta 1e4; full layers rotate the
 * 512-dim head with theta 1e6 and the rope_freqs factors (only the first 64
 * pairs move). Attention scale is 1.0.
 *
 * On a tensor-parallel backend (b->shards > 1, docs/tensor-parallel.md)
 * the same loop runs: the weights are dealt by role at upload (q/k/v and
 * gate/up by output rows, o and down by input columns, the tied embedding
 * by vocabulary) and an allreduce follows the o and down projections; the
 * backend keeps everything else. A backend of one shard never sees either. */
#include "model/gemma4_run.h"

#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define EPS 1e-6f
#define SOFTCAP 30.0f

typedef struct {
    be_weight *attn_norm, *q, *k, *v, *o, *q_norm, *k_norm, *post_attn_norm, *ffn_norm, *gate, *up, *down,
        *post_ffw_norm, *out_scale;
} layer_w;

/* What the states of one model on one backend share: the resident
 * weights and one tile's activation buffers. Sharing the buffers is safe
 * because a backend runs one op sequence at a time (the engine serialises
 * its sessions), and no state keeps a value in them between calls. */
struct gemma4_core {
    const gemma4_model *m;
    backend *b;
    int max_tile;
    uint32_t n_run; /* layers evaluated: all but for testing (gemma4_core_new) */
    be_weight *embd, *out_norm, *rope_freqs;
    layer_w *L;
    be_buf *h, *a, *q, *k, *v, *att, *o, *act, *down;
    /* a batched step of sequences (gemma4_step_seqs): every row's normed
     * hidden state, logits and argmax; the rows' caches for set_step_seqs
     * (BE_EXACT_ROWS x n_layer); a recorded step per row count, for
     * states of one context and KV type (sgraph_ctx, sgraph_kv) */
    be_buf *bhid, *blogits, *bbest;
    be_kv **bkvs;
    be_graph *sgraph[BE_EXACT_ROWS + 1];
    int sgraph_ctx;
    gemma4_kv_type sgraph_kv;
};

struct gemma4_state {
    gemma4_core *c;
    int owns_core; /* made by gemma4_state_new */
    const gemma4_model *m;
    backend *b;
    int n_ctx, max_tile, n_past;
    gemma4_kv_type kv_type; /* with n_ctx, the shape of every cache (the plan's) */
    /* the highest position written into the caches since the rings last
     * held exactly [n_past - capacity, n_past): a verification's dropped
     * rows overwrote ring slots below it (gemma4_rewind_ok) */
    int top;
    uint32_t n_run;
    be_weight *embd, *out_norm, *rope_freqs; /* the core's */
    layer_w *L;                               /* the core's */
    be_kv **kv;                               /* per layer: this sequence's caches */
    be_buf *h, *a, *q, *k, *v, *att, *o, *act, *down; /* the core's */
    be_buf *last, *logits, *best, *topk;
    be_graph *decode; /* one recorded decode step (backends with capture) */
    /* the hidden state after the last evaluated token (gemma4_hidden) */
    const be_buf *hid;
    size_t hid_off;
    int hid_valid;
    /* speculative verification (gemma4_spec_init): every row's normed
     * hidden state, logits and argmax; the last verify's first position
     * and row count */
    int spec_rows;
    be_buf *vhid, *vlogits, *vbest;
    int v_pos0, v_n;
    be_graph *vgraph[BE_EXACT_ROWS + 1]; /* a recorded verification per row count */
};

int gemma4_ring_slack(const backend *b) { return b->rows_exact ? BE_EXACT_ROWS : 0; }

be_kv *gemma4_kv_alloc(const gemma4_kv_plan *plan, backend *b, uint32_t il, gem_err *err) {
    const gemma4_kv_kind *k = gemma4_kv_plan_kind(plan, il);
    if (k->f16 && !b->kv_f16) {
        gem_err_set(err, "--kv-type %s: backend '%s' keeps its KV caches in f32 (f16 caches are a CUDA option)",
                    gemma4_kv_type_name(plan->type), b->name);
        return NULL;
    }
    be_kv *kv = b->kv_new(b, (int)k->n_kv_head, (int)k->head_dim, (int)k->capacity, k->ring,
                          k->f16 ? BE_KV_F16 : BE_KV_F32, err);
    if (!kv) {
        gem_err_wrap(err, "layer %u's %s cache", il, k->ring ? "sliding" : "full-attention");
        return NULL;
    }
    const uint64_t held = b->kv_bytes(b, kv, (int)k->capacity);
    if (held != k->layer_bytes) {
        b->kv_free(b, kv);
        gem_err_set(err, "internal: backend '%s' holds %" PRIu64 " bytes for layer %u's cache, the KV plan %" PRIu64,
                    b->name, held, il, k->layer_bytes);
        return NULL;
    }
    return kv;
}

static be_weight *up_w(gemma4_core *c, const gguf_tensor *t, gem_err *err) {
    return t ? c->b->weight(c->b, t, err) : NULL;
}

/* t dealt over the shards as `kind` in `units` (heads, FFN rows,
 * vocabulary rows); whole on a backend of one shard. */
static be_weight *up_split(gemma4_core *c, const gguf_tensor *t, be_split_kind kind, uint32_t units, gem_err *err) {
    backend *b = c->b;
    if (!t || b->shards <= 1) return up_w(c, t, err);
    if (!b->weight_split) {
        gem_err_set(err, "internal: backend '%s' of %d shards cannot deal weights", b->name, b->shards);
        return NULL;
    }
    return b->weight_split(b, t, (be_split){kind, units}, err);
}

/* After a matmul by a weight split by its input columns: the shards'
 * partial sums added (nothing on a backend of one shard). */
static void reduce(backend *b, be_buf *x, size_t n) {
    if (b->allreduce) b->allreduce(b, x, n);
}

void gemma4_core_free(gemma4_core *c) {
    if (!c) return;
    backend *b = c->b;
    if (c->L) {
        for (uint32_t il = 0; il < c->m->profile->n_layer; il++) {
            layer_w *l = &c->L[il];
            be_weight *ws[] = {l->attn_norm, l->q, l->k, l->v, l->o, l->q_norm, l->k_norm, l->post_attn_norm,
                               l->ffn_norm, l->gate, l->up, l->down, l->post_ffw_norm, l->out_scale};
            for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
                if (ws[i]) b->weight_free(b, ws[i]);
        }
        free(c->L);
    }
    be_weight *g[] = {c->embd, c->out_norm, c->rope_freqs};
    for (int i = 0; i < 3; i++)
        if (g[i]) b->weight_free(b, g[i]);
    be_buf *bufs[] = {c->h, c->a, c->q, c->k, c->v, c->att, c->o, c->act, c->down, c->bhid, c->blogits, c->bbest};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) b->buf_free(b, bufs[i]);
    for (int i = 0; i <= BE_EXACT_ROWS; i++)
        if (c->sgraph[i]) b->graph_free(b, c->sgraph[i]);
    free(c->bkvs);
    free(c);
}

/* A plan for model m's profile and backend b's ring slack, or -1 with err. */
static int plan_fits(const gemma4_kv_plan *plan, const gemma4_model *m, const backend *b, gem_err *err) {
    if (plan->profile != m->profile)
        return gem_err_set(err, "internal: a KV plan for %s given to a %s model", plan->profile->name,
                           m->profile->name);
    /* a row-exact backend verifies drafts: its rings need BE_EXACT_ROWS
     * slots beyond the window (gemma4_spec_init) */
    if (plan->ring_slack != gemma4_ring_slack(b))
        return gem_err_set(err, "internal: a KV plan with rings of window + %d slots for backend '%s', which needs + %d",
                           plan->ring_slack, b->name, gemma4_ring_slack(b));
    return 0;
}

gemma4_core *gemma4_core_new(const gemma4_model *m, backend *b, const gemma4_kv_plan *plan, int layers,
                             gem_err *err) {
    const gemma4_profile *p = m->profile;
    if (plan_fits(plan, m, b, err)) return NULL;
    const int max_tile = plan->tile;
    gemma4_core *c = calloc(1, sizeof *c);
    if (!c) {
        gem_err_set(err, "out of memory");
        return NULL;
    }
    c->m = m;
    c->b = b;
    c->max_tile = max_tile;
    c->n_run = layers > 0 && (uint32_t)layers < p->n_layer ? (uint32_t)layers : p->n_layer;
    c->L = calloc(p->n_layer, sizeof *c->L);
    if (!c->L) goto oom;
    const uint32_t vocab = (uint32_t)(m->token_embd->n_elems / m->token_embd->ne[0]);
    if (!(c->embd = up_split(c, m->token_embd, BE_SPLIT_OUT, vocab, err)) || !(c->out_norm = up_w(c, m->output_norm, err)) ||
        !(c->rope_freqs = up_w(c, m->rope_freqs, err)))
        goto fail;
    for (uint32_t il = 0; il < p->n_layer; il++) {
        const gemma4_layer *g = &m->layers[il];
        layer_w *l = &c->L[il];
#define UP(dst, src) if (!(l->dst = up_w(c, g->src, err))) goto fail
#define UPS(dst, src, kind, units) if (!(l->dst = up_split(c, g->src, kind, units, err))) goto fail
        UP(attn_norm, attn_norm); UPS(q, attn_q, BE_SPLIT_OUT, p->n_head); UPS(k, attn_k, BE_SPLIT_OUT, g->n_head_kv);
        UPS(o, attn_output, BE_SPLIT_IN, p->n_head); UP(q_norm, attn_q_norm);
        UP(k_norm, attn_k_norm); UP(post_attn_norm, post_attention_norm); UP(ffn_norm, ffn_norm);
        UPS(gate, ffn_gate, BE_SPLIT_OUT, p->n_ff); UPS(up, ffn_up, BE_SPLIT_OUT, p->n_ff);
        UPS(down, ffn_down, BE_SPLIT_IN, p->n_ff); UP(post_ffw_norm, post_ffw_norm);
        UP(out_scale, layer_output_scale);
#undef UP
#undef UPS
        if (g->attn_v && !(l->v = up_split(c, g->attn_v, BE_SPLIT_OUT, g->n_head_kv, err))) goto fail;
    }
    /* the tile's shared buffers (the plan's G4T_H..G4T_DOWN; each state
     * keeps the rest) */
    size_t fl[G4T_COUNT];
    gemma4_tile_floats(p, plan->tile, fl);
    be_buf **bufs[] = {&c->h, &c->a, &c->q, &c->k, &c->v, &c->att, &c->o, &c->act, &c->down};
    for (int i = 0; i <= G4T_DOWN; i++)
        if (!(*bufs[i] = b->alloc(b, fl[i], err))) goto fail;
    return c;
oom:
    gem_err_set(err, "out of memory");
fail:
    gemma4_core_free(c);
    return NULL;
}

int gemma4_core_max_tile(const gemma4_core *c) { return c->max_tile; }

void gemma4_state_free(gemma4_state *s) {
    if (!s) return;
    backend *b = s->b;
    if (s->decode) b->graph_free(b, s->decode);
    for (int i = 0; i <= BE_EXACT_ROWS; i++)
        if (s->vgraph[i]) b->graph_free(b, s->vgraph[i]);
    if (s->kv) {
        for (uint32_t il = 0; il < s->m->profile->n_layer; il++)
            if (s->kv[il]) b->kv_free(b, s->kv[il]);
        free(s->kv);
    }
    be_buf *bufs[] = {s->last, s->logits, s->best, s->topk, s->vhid, s->vlogits, s->vbest};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) b->buf_free(b, bufs[i]);
    if (s->owns_core) gemma4_core_free(s->c);
    free(s);
}

gemma4_state *gemma4_state_on(gemma4_core *c, const gemma4_kv_plan *plan, gem_err *err) {
    const gemma4_model *m = c->m;
    const gemma4_profile *p = m->profile;
    backend *b = c->b;
    if (plan_fits(plan, m, b, err)) return NULL;
    if (plan->tile != c->max_tile) {
        gem_err_set(err, "internal: a KV plan with tiles of %d for a core of %d", plan->tile, c->max_tile);
        return NULL;
    }
    gemma4_state *s = calloc(1, sizeof *s);
    if (!s || !(s->kv = calloc(p->n_layer, sizeof *s->kv))) {
        free(s);
        gem_err_set(err, "out of memory");
        return NULL;
    }
    s->c = c;
    s->m = m;
    s->b = b;
    s->top = -1;
    s->n_ctx = plan->n_ctx;
    s->kv_type = plan->type;
    s->max_tile = c->max_tile;
    s->n_run = c->n_run;
    s->embd = c->embd;
    s->out_norm = c->out_norm;
    s->rope_freqs = c->rope_freqs;
    s->L = c->L;
    s->h = c->h, s->a = c->a, s->q = c->q, s->k = c->k, s->v = c->v;
    s->att = c->att, s->o = c->o, s->act = c->act, s->down = c->down;
    for (uint32_t il = 0; il < p->n_layer; il++)
        if (!(s->kv[il] = gemma4_kv_alloc(plan, b, il, err))) goto fail;
    size_t fl[G4T_COUNT];
    gemma4_tile_floats(p, plan->tile, fl);
    be_buf **bufs[] = {&s->last, &s->logits, &s->best, &s->topk};
    for (int i = G4T_LAST; i < G4T_COUNT; i++)
        if (!(*bufs[i - G4T_LAST] = b->alloc(b, fl[i], err))) goto fail;
    return s;
fail:
    gemma4_state_free(s);
    return NULL;
}

gemma4_state *gemma4_state_new(const gemma4_model *m, backend *b, const gemma4_kv_plan *plan, int layers,
                               gem_err *err) {
    gemma4_core *c = gemma4_core_new(m, b, plan, layers, err);
    if (!c) return NULL;
    gemma4_state *s = gemma4_state_on(c, plan, err);
    if (!s) {
        gemma4_core_free(c);
        return NULL;
    }
    s->owns_core = 1;
    return s;
}

int gemma4_n_past(const gemma4_state *s) { return s->n_past; }
int gemma4_n_ctx(const gemma4_state *s) { return s->n_ctx; }
void gemma4_reset(gemma4_state *s) {
    s->n_past = 0;
    s->top = -1;
    s->hid_valid = 0;
}

/* After n_past grew: the highest position written. */
static void wrote(gemma4_state *s) {
    if (s->n_past - 1 > s->top) s->top = s->n_past - 1;
}

int gemma4_rewind_min(const gemma4_state *s) {
    const gemma4_profile *p = s->m->profile;
    const int window = (int)p->window, cap = window + (s->b->rows_exact ? BE_EXACT_ROWS : 0);
    /* the queries from n on need keys from n - window + 1; the rings still
     * hold every position above top - cap (later writes went to the slots
     * of positions below it) */
    const int intact = s->top + 1 - cap > 0 ? s->top + 1 - cap : 0;
    return intact ? intact + window - 1 : 0;
}

int gemma4_rewind_ok(const gemma4_state *s, int n) {
    return n >= 0 && n <= s->n_past && n >= gemma4_rewind_min(s);
}

int gemma4_rewind(gemma4_state *s, int n) {
    if (!gemma4_rewind_ok(s, n)) return -1;
    s->n_past = n;
    s->hid_valid = 0;
    return 0;
}

static void add_then_norm(gemma4_core *c, const be_buf *x, const be_weight *w, const be_weight *scale,
                          const be_weight *w_next, int n) {
    backend *b = c->b;
    const int H = (int)c->m->profile->n_embd;
    if (b->add_rmsnorm_norm) {
        b->add_rmsnorm_norm(b, c->h, x, w, scale, w_next, n, H, EPS, c->a);
        return;
    }
    b->add_rmsnorm(b, c->h, x, w, n, H, EPS, scale);
    b->rmsnorm(b, c->h, w_next, n, H, EPS, c->a);
}

/* A tile's rows: n tokens of one sequence at pos0.. (seqs NULL: its caches
 * kv), or n one-token steps of the sequences seqs[i] at pos[i]. */
typedef struct {
    be_kv *const *kv;           /* per layer, one sequence */
    gemma4_state *const *seqs;  /* or n sequences */
    const int *pos;
    int pos0;
} tile_rows;

/* q/k norms, rope and attention of layer il on its projections c->q/k/v,
 * into c->att (one op where the backend folds them together). */
static void attend(gemma4_core *c, uint32_t il, const tile_rows *t, int n) {
    const gemma4_profile *p = c->m->profile;
    const gemma4_layer *g = &c->m->layers[il];
    const layer_w *l = &c->L[il];
    backend *b = c->b;
    const int nh = (int)p->n_head, d = (int)g->head_dim, kvh = (int)g->n_head_kv, pos0 = t->pos0;
    const float theta = g->is_full ? 1e6f : 1e4f;
    const be_weight *ff = g->is_full ? c->rope_freqs : NULL;
    const int window = g->is_full ? 0 : (int)p->window;
    if (t->seqs) { /* gemma4_step_seqs checked the backend has it */
        be_kv *kvs[BE_EXACT_ROWS];
        for (int i = 0; i < n; i++) kvs[i] = t->seqs[i]->kv[il];
        b->attention_seqs(b, c->q, l->q_norm, c->k, l->k_norm, c->v, g->is_full, kvs, t->pos, n, nh, kvh, d, EPS, theta,
                          ff, window, c->att);
        return;
    }
    be_kv *kv = t->kv[il];
    if (b->attention_qkv) { /* K as V (full layers) inside the op: v from k's raw rows */
        b->attention_qkv(b, c->q, l->q_norm, c->k, l->k_norm, c->v, g->is_full, kv, n, pos0, nh, kvh, d, EPS, theta, ff,
                         window, c->att);
        return;
    }
    if (b->qkv_norm_rope) { /* K as V (full layers) inside the launch: v from k's raw rows */
        b->qkv_norm_rope(b, c->q, l->q_norm, c->k, l->k_norm, c->v, g->is_full, n, nh, kvh, d, EPS, pos0, theta, ff);
    } else {
        if (g->is_full) b->copy(b, c->k, 0, c->v, 0, (size_t)n * kvh * d); /* K as V: the raw projection */
        b->rmsnorm_rope(b, c->q, l->q_norm, n, nh, d, EPS, pos0, theta, ff);
        b->rmsnorm_rope(b, c->k, l->k_norm, n, kvh, d, EPS, pos0, theta, ff);
        b->rmsnorm(b, c->v, NULL, n * kvh, d, EPS, c->v);
    }
    b->attention(b, c->q, c->k, c->v, kv, n, pos0, nh, kvh, d, window, c->att);
}

/* One tile of n rows (tile_rows); leaves h holding the final residual
 * stream of every row. Each layer starts with a = attn_norm(h) already
 * computed (by the previous layer's last step, or before the first). */
static void forward_rows(gemma4_core *c, const tile_rows *t, const int32_t *ids, int n) {
    const gemma4_profile *p = c->m->profile;
    backend *b = c->b;
    const int H = (int)p->n_embd;
    b->embed(b, c->embd, ids, n, sqrtf((float)H), c->h);
    b->rmsnorm(b, c->h, c->L[0].attn_norm, n, H, EPS, c->a);
    for (uint32_t il = 0; il < c->n_run; il++) {
        const gemma4_layer *g = &c->m->layers[il];
        layer_w *l = &c->L[il];
        const be_weight *W[3] = {l->q, l->k, l->v};
        be_buf *O[3] = {c->q, c->k, c->v};
        b->matmul_multi(b, g->is_full ? 2 : 3, W, c->a, n, O);
        attend(c, il, t, n);
        b->matmul(b, l->o, c->att, n, c->o);
        reduce(b, c->o, (size_t)n * H);
        add_then_norm(c, c->o, l->post_attn_norm, NULL, l->ffn_norm, n);
        b->matmul_geglu(b, l->gate, l->up, c->a, n, c->act);
        b->matmul(b, l->down, c->act, n, c->down);
        reduce(b, c->down, (size_t)n * H);
        if (il + 1 < c->n_run)
            add_then_norm(c, c->down, l->post_ffw_norm, l->out_scale, c->L[il + 1].attn_norm, n);
        else
            b->add_rmsnorm(b, c->h, c->down, l->post_ffw_norm, n, H, EPS, l->out_scale);
    }
}

/* n tokens of s at positions pos0.. */
static void forward_tile(gemma4_state *s, const int32_t *ids, int n, int pos0) {
    const tile_rows t = {s->kv, NULL, NULL, pos0};
    forward_rows(s->c, &t, ids, n);
}

/* Soft-capped logits of row r of h into s->logits, and their argmax into
 * s->best; stays on the device. */
static void head_dev(gemma4_state *s, int r) {
    backend *b = s->b;
    const int H = (int)s->m->profile->n_embd;
    b->copy(b, s->h, (size_t)r * H, s->last, 0, (size_t)H);
    b->rmsnorm(b, s->last, s->out_norm, 1, H, EPS, s->last);
    b->matmul(b, s->embd, s->last, 1, s->logits);
    b->softcap(b, s->logits, GEMMA4_N_VOCAB, SOFTCAP);
    b->argmax(b, s->logits, 1, GEMMA4_N_VOCAB, s->best);
}

typedef struct {
    gemma4_state *s;
    const int32_t *ids;
    int n; /* verify_body's rows */
} decode_ctx;

static void decode_body(void *ctx) {
    decode_ctx *d = ctx;
    forward_tile(d->s, d->ids, 1, d->s->n_past);
    head_dev(d->s, 0);
}

/* One decode step through the recorded graph, recorded on first use and
 * again whenever the backend says its buffers changed (capturing runs the
 * step too; a decode step is repeatable: it rewrites the same cache slot
 * with the same values). */
static int decode_replay(gemma4_state *s, const int32_t *id, gem_err *err) {
    decode_ctx d = {s, id, 1};
    return backend_run_recorded(s->b, &s->decode, decode_body, &d, err);
}

/* A tile's arguments: room in the context, ids in the vocabulary. */
static int check_tile(const gemma4_state *s, const int32_t *ids, int n, gem_err *err) {
    if (n > s->n_ctx - s->n_past)
        return gem_err_set(err, "context full: %d tokens at position %d exceed the context of %d", n, s->n_past, s->n_ctx);
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || (uint32_t)ids[i] >= GEMMA4_N_VOCAB)
            return gem_err_set(err, "token id %d is out of the vocabulary", ids[i]);
    return 0;
}

/* Every eval leaves the last token's logits (and their argmax) on the
 * backend; logits / best additionally read them back. Without head (a
 * prompt's tiles before its last) no logits are computed at all. */
static int eval_tiles(gemma4_state *s, const int32_t *ids, int n, int head, float *logits, int all_logits,
                      int32_t *best, gem_err *err) {
    backend *b = s->b;
    if (n <= 0) return gem_err_set(err, "nothing to evaluate");
    if (check_tile(s, ids, n, err)) return -1;
    for (int done = 0; done < n;) {
        int t = n - done < s->max_tile ? n - done : s->max_tile;
        const int last = done + t == n;
        if (b->set_step) b->set_step(b, ids + done, t, s->n_past);
        if (t == 1 && last && head && !all_logits && b->capture) {
            if (decode_replay(s, ids + done, err)) return -1;
        } else {
            forward_tile(s, ids + done, t, s->n_past);
            if (all_logits) {
                for (int r = 0; r < t; r++) {
                    head_dev(s, r);
                    if (logits) b->download(b, s->logits, 0, logits + (size_t)(done + r) * GEMMA4_N_VOCAB, GEMMA4_N_VOCAB);
                }
            } else if (last && head) {
                head_dev(s, t - 1);
            }
        }
        if (b->status(b, err)) return -1;
        s->n_past += t;
        wrote(s);
        done += t;
    }
    s->hid = s->last; /* the head's normed row (head_dev) */
    s->hid_off = 0;
    s->hid_valid = head;
    if (logits && !all_logits) b->download(b, s->logits, 0, logits, GEMMA4_N_VOCAB);
    if (best) {
        float f = 0;
        b->download(b, s->best, 0, &f, 1);
        *best = (int32_t)f;
    }
    return b->status(b, err);
}

int gemma4_eval(gemma4_state *s, const int32_t *ids, int n, float *logits, int all_logits, gem_err *err) {
    return eval_tiles(s, ids, n, 1, logits, all_logits, NULL, err);
}

int gemma4_eval_greedy(gemma4_state *s, const int32_t *ids, int n, int32_t *next, gem_err *err) {
    return eval_tiles(s, ids, n, 1, NULL, 0, next, err);
}

int gemma4_prefill(gemma4_state *s, const int32_t *ids, int n, gem_err *err) {
    return eval_tiles(s, ids, n, 0, NULL, 0, NULL, err);
}

int gemma4_logits(gemma4_state *s, float *dst, gem_err *err) {
    s->b->download(s->b, s->logits, 0, dst, GEMMA4_N_VOCAB);
    return s->b->status(s->b, err);
}

int gemma4_topk(gemma4_state *s, int k, float *vals, int32_t *ids, gem_err *err) {
    backend *b = s->b;
    if (!b->topk || k < 1 || k > BE_TOPK_MAX) return gem_err_set(err, "top-k of %d on backend '%s' is not available", k, b->name);
    float buf[2 * BE_TOPK_MAX];
    b->topk(b, s->logits, GEMMA4_N_VOCAB, k, s->topk);
    b->download(b, s->topk, 0, buf, (size_t)(2 * k));
    if (b->status(b, err)) return -1;
    for (int i = 0; i < k; i++) vals[i] = buf[i], ids[i] = (int32_t)buf[k + i];
    return 0;
}

/* ---- batched steps of several sequences ---- */

/* A batched step's tile and the head of every row as a verification
 * computes it (row-exact: each row's logits are a one-token step's,
 * head_dev's), as one recordable body: the rows' ids, positions and
 * caches come from set_step_seqs on backends that replay. */
typedef struct {
    gemma4_core *c;
    const tile_rows *t;
    const int32_t *ids;
    int n;
} seqs_ctx;

static void seqs_body(void *ctx) {
    seqs_ctx *d = ctx;
    gemma4_core *c = d->c;
    backend *b = c->b;
    const int H = (int)c->m->profile->n_embd, n = d->n;
    forward_rows(c, d->t, d->ids, n);
    b->rmsnorm(b, c->h, c->out_norm, n, H, EPS, c->bhid);
    b->matmul(b, c->embd, c->bhid, n, c->blogits);
    b->softcap(b, c->blogits, (size_t)n * GEMMA4_N_VOCAB, SOFTCAP);
    b->argmax(b, c->blogits, n, GEMMA4_N_VOCAB, c->bbest);
}

int gemma4_step_seqs(gemma4_state *const *ss, const int32_t *ids, int n, int32_t *best, gem_err *err) {
    if (n < 1 || n > BE_EXACT_ROWS) return gem_err_set(err, "a batched step of %d sequences (1..%d)", n, BE_EXACT_ROWS);
    gemma4_core *c = ss[0]->c;
    backend *b = c->b;
    const uint32_t L = c->m->profile->n_layer;
    if (!b->attention_seqs || (b->set_step && !b->set_step_seqs))
        return gem_err_set(err, "backend '%s' has no batched steps of several sequences", b->name);
    if (n > c->max_tile) return gem_err_set(err, "a batched step of %d rows exceeds the tile of %d", n, c->max_tile);
    int pos[BE_EXACT_ROWS], same = 1;
    for (int i = 0; i < n; i++) {
        if (ss[i]->c != c) return gem_err_set(err, "a batched step over states of different models or backends");
        for (int j = 0; j < i; j++)
            if (ss[j] == ss[i]) return gem_err_set(err, "a batched step names one sequence twice");
        if (check_tile(ss[i], ids + i, 1, err)) return -1;
        pos[i] = ss[i]->n_past;
        same &= ss[i]->n_ctx == ss[0]->n_ctx && ss[i]->kv_type == ss[0]->kv_type;
    }
    const size_t H = c->m->profile->n_embd;
    if (!c->bhid && (!(c->bhid = b->alloc(b, BE_EXACT_ROWS * H, err)) ||
                     !(c->blogits = b->alloc(b, (size_t)BE_EXACT_ROWS * GEMMA4_N_VOCAB, err)) ||
                     !(c->bbest = b->alloc(b, BE_EXACT_ROWS, err)))) {
        be_buf *bufs[] = {c->bhid, c->blogits, c->bbest};
        for (int i = 0; i < 3; i++)
            if (bufs[i]) b->buf_free(b, bufs[i]);
        c->bhid = c->blogits = c->bbest = NULL;
        return -1;
    }
    if (!c->bkvs && !(c->bkvs = malloc(sizeof *c->bkvs * BE_EXACT_ROWS * L))) return gem_err_set(err, "out of memory");
    for (int i = 0; i < n; i++) memcpy(c->bkvs + (size_t)i * L, ss[i]->kv, sizeof *c->bkvs * L);
    if (b->set_step_seqs) b->set_step_seqs(b, ids, pos, n, c->bkvs, (int)L);
    const tile_rows t = {NULL, ss, pos, 0};
    seqs_ctx d = {c, &t, ids, n};
    /* recorded once per row count: a replay attends over the caches
     * set_step_seqs named, which are of the recording's shapes while the
     * states share a context and KV type */
    if (b->capture && b->seqs_replay && same) {
        if (c->sgraph_ctx != ss[0]->n_ctx || c->sgraph_kv != ss[0]->kv_type) {
            for (int i = 0; i <= BE_EXACT_ROWS; i++)
                if (c->sgraph[i]) {
                    b->graph_free(b, c->sgraph[i]);
                    c->sgraph[i] = NULL;
                }
            c->sgraph_ctx = ss[0]->n_ctx;
            c->sgraph_kv = ss[0]->kv_type;
        }
        if (backend_run_recorded(b, &c->sgraph[n], seqs_body, &d, err)) return -1;
    } else {
        seqs_body(&d);
    }
    for (int i = 0; i < n; i++) { /* each sequence as its own one-token eval leaves it */
        gemma4_state *s = ss[i];
        b->copy(b, c->blogits, (size_t)i * GEMMA4_N_VOCAB, s->logits, 0, GEMMA4_N_VOCAB);
        b->copy(b, c->bbest, (size_t)i, s->best, 0, 1);
        b->copy(b, c->bhid, (size_t)i * H, s->last, 0, H);
        s->hid = s->last;
        s->hid_off = 0;
        s->hid_valid = 1;
        s->n_past++;
        wrote(s);
    }
    if (best) {
        float f[BE_EXACT_ROWS];
        b->download(b, c->bbest, 0, f, (size_t)n);
        for (int i = 0; i < n; i++) best[i] = (int32_t)f[i];
    }
    return b->status(b, err);
}

/* A snapshot is one backend buffer: the last token's logits, then each
 * layer's cache bytes for positions [0, n_past) (kv_stash's layout). It
 * only grows: a session's next checkpoint reuses it. A host snapshot
 * (gemma4_snap_save_host) is the caches' part alone, in host memory. */
struct gemma4_snap {
    backend *b;
    be_buf *buf;
    void *host;  /* a host snapshot's bytes (then buf is NULL) */
    size_t cap;  /* bytes */
    int n_past;
    int top;     /* the state's top: what rewinding the loaded state may reach */
    int rewind_min;
    int hid_valid;
};

/* Device memory a snapshot leaves free (see gemma4_snap_save). */
#define SNAP_RESERVE ((size_t)1 << 30)

/* logits, then the hidden state (an MTP drafter's next input), then the caches */
static size_t snap_head_floats(const gemma4_state *s) { return GEMMA4_N_VOCAB + s->m->profile->n_embd; }

static size_t snap_kv_bytes(const gemma4_state *s) {
    size_t n = 0;
    for (uint32_t il = 0; il < s->n_run; il++) n += s->b->kv_bytes(s->b, s->kv[il], s->n_past);
    return n;
}

static size_t snap_bytes(const gemma4_state *s) { return snap_head_floats(s) * sizeof(float) + snap_kv_bytes(s); }

static void snap_mark(gemma4_snap *p, const gemma4_state *s) {
    p->n_past = s->n_past;
    p->top = s->top;
    p->rewind_min = gemma4_rewind_min(s);
}

int gemma4_snap_save(gemma4_state *s, gemma4_snap **snap, gem_err *err) {
    backend *b = s->b;
    gemma4_snap *p = *snap;
    if (!p) {
        if (!(p = calloc(1, sizeof *p))) return gem_err_set(err, "out of memory for a checkpoint");
        p->b = b;
        *snap = p;
    }
    if (p->host) { /* a host snapshot becomes a backend one (a restored session's next checkpoint) */
        free(p->host);
        p->host = NULL;
        p->cap = 0;
    }
    const size_t need = snap_bytes(s);
    if (need > p->cap) {
        if (p->buf) b->buf_free(b, p->buf);
        p->buf = NULL;
        p->cap = 0;
        /* a device keeps SNAP_RESERVE free beside it: the backend's working
         * memory grows lazily (a longer prompt tile than any before), and a
         * checkpoint must never be what makes that fail; room for growth
         * (the next turn's checkpoint is longer) only where it fits */
        const size_t avail = b->mem_free ? b->mem_free(b) : SIZE_MAX;
        const size_t reserve = b->mem_free ? SNAP_RESERVE : 0;
        size_t want = need + need / 4;
        if (avail < reserve || avail - reserve < want) want = need;
        if (avail < reserve || avail - reserve < want)
            return gem_err_set(err, "no room for a checkpoint of %zu bytes (%zu free)", want, avail);
        if (!(p->buf = b->alloc(b, (want + 3) / 4, err))) return gem_err_wrap(err, "checkpoint of %zu bytes", want);
        p->cap = want;
    }
    b->copy(b, s->logits, 0, p->buf, 0, GEMMA4_N_VOCAB);
    if (s->hid_valid) b->copy(b, s->hid, s->hid_off, p->buf, GEMMA4_N_VOCAB, s->m->profile->n_embd);
    p->hid_valid = s->hid_valid;
    size_t off = snap_head_floats(s) * sizeof(float);
    for (uint32_t il = 0; il < s->n_run; il++) {
        b->kv_stash(b, s->kv[il], s->n_past, p->buf, off);
        off += b->kv_bytes(b, s->kv[il], s->n_past);
    }
    snap_mark(p, s);
    return b->status(b, err);
}

/* An empty host snapshot of `need` bytes on backend b, or NULL with err. */
static gemma4_snap *snap_host_new(backend *b, size_t need, gem_err *err) {
    gemma4_snap *p = calloc(1, sizeof *p);
    if (!p || !(p->host = malloc(need ? need : 1))) {
        free(p);
        gem_err_set(err, "out of memory for a host checkpoint of %zu bytes", need);
        return NULL;
    }
    p->b = b;
    p->cap = need;
    return p;
}

int gemma4_snap_save_host(gemma4_state *s, gemma4_snap **snap, gem_err *err) {
    backend *b = s->b;
    gemma4_snap *p = snap_host_new(b, snap_kv_bytes(s), err);
    if (!p) return -1;
    size_t off = 0;
    for (uint32_t il = 0; il < s->n_run; il++) {
        b->kv_save(b, s->kv[il], s->n_past, (char *)p->host + off);
        off += b->kv_bytes(b, s->kv[il], s->n_past);
    }
    snap_mark(p, s);
    if (b->status(b, err)) {
        gemma4_snap_free(p);
        return -1;
    }
    *snap = p;
    return 0;
}

int gemma4_snap_to_host(const gemma4_snap *src, const gemma4_state *s, gemma4_snap **snap, gem_err *err) {
    backend *b = src->b;
    const size_t head = src->host ? 0 : snap_head_floats(s) * sizeof(float);
    size_t need = 0;
    for (uint32_t il = 0; il < s->n_run; il++) need += b->kv_bytes(b, s->kv[il], src->n_past);
    gemma4_snap *p = snap_host_new(b, need, err);
    if (!p) return -1;
    p->n_past = src->n_past;
    p->top = src->top;
    p->rewind_min = src->rewind_min;
    if (src->host) memcpy(p->host, src->host, need);
    else b->download(b, src->buf, head / sizeof(float), p->host, need / sizeof(float));
    if (b->status(b, err)) {
        gemma4_snap_free(p);
        return -1;
    }
    *snap = p;
    return 0;
}

void gemma4_snap_load(gemma4_state *s, const gemma4_snap *p) {
    backend *b = s->b;
    s->n_past = p->n_past;
    s->top = p->top; /* the rings hold exactly what they held at the save */
    s->hid = s->last;
    s->hid_off = 0;
    if (p->host) { /* the caches alone: logits and hidden state undefined until the next eval */
        s->hid_valid = 0;
        size_t off = 0;
        for (uint32_t il = 0; il < s->n_run; il++) {
            b->kv_load(b, s->kv[il], s->n_past, (const char *)p->host + off);
            off += b->kv_bytes(b, s->kv[il], s->n_past);
        }
        return;
    }
    b->copy(b, p->buf, 0, s->logits, 0, GEMMA4_N_VOCAB);
    if (p->hid_valid) b->copy(b, p->buf, GEMMA4_N_VOCAB, s->last, 0, s->m->profile->n_embd);
    s->hid_valid = p->hid_valid;
    size_t off = snap_head_floats(s) * sizeof(float);
    for (uint32_t il = 0; il < s->n_run; il++) {
        b->kv_unstash(b, s->kv[il], s->n_past, p->buf, off);
        off += b->kv_bytes(b, s->kv[il], s->n_past);
    }
}

int gemma4_snap_n_past(const gemma4_snap *p) { return p->n_past; }
int gemma4_snap_rewind_min(const gemma4_snap *p) { return p->rewind_min; }
int gemma4_snap_is_host(const gemma4_snap *p) { return p->host != NULL; }
size_t gemma4_snap_bytes(const gemma4_snap *p) { return p->cap; }

void gemma4_snap_free(gemma4_snap *p) {
    if (!p) return;
    if (p->buf) p->b->buf_free(p->b, p->buf);
    free(p->host);
    free(p);
}

/* ---- speculative verification ---- */

int gemma4_spec_init(gemma4_state *s, int rows, gem_err *err) {
    backend *b = s->b;
    const gemma4_profile *p = s->m->profile;
    if (!b->rows_exact)
        return gem_err_set(err, "backend '%s' has no row-exact small tiles: speculative verification would not "
                           "reproduce plain decoding exactly", b->name);
    if (rows > s->max_tile) rows = s->max_tile; /* a tile's buffers hold max_tile rows */
    if (rows > BE_EXACT_ROWS) rows = BE_EXACT_ROWS;
    if (rows < 2) return gem_err_set(err, "verification needs tiles of at least 2 rows (the prompt tile is %d)", s->max_tile);
    if (s->spec_rows >= rows) return 0;
    for (int i = 0; i <= BE_EXACT_ROWS; i++) /* recorded with the buffers freed below */
        if (s->vgraph[i]) {
            b->graph_free(b, s->vgraph[i]);
            s->vgraph[i] = NULL;
        }
    be_buf *bufs[] = {s->vhid, s->vlogits, s->vbest};
    for (int i = 0; i < 3; i++)
        if (bufs[i]) b->buf_free(b, bufs[i]);
    s->vhid = s->vlogits = s->vbest = NULL;
    s->spec_rows = 0;
    if (!(s->vhid = b->alloc(b, (size_t)rows * p->n_embd, err)) ||
        !(s->vlogits = b->alloc(b, (size_t)rows * GEMMA4_N_VOCAB, err)) || !(s->vbest = b->alloc(b, (size_t)rows, err)))
        return -1;
    s->spec_rows = rows;
    return 0;
}

int gemma4_spec_rows(const gemma4_state *s) { return s->spec_rows; }

/* A verification tile and the head of every row (row-exact ops), as one
 * recordable body: like a decode step, it reads the tokens and positions
 * from set_step on backends that replay, and rewrites the same cache
 * slots with the same values when run again. */
static void verify_body(void *ctx) {
    decode_ctx *d = ctx;
    gemma4_state *s = d->s;
    backend *b = s->b;
    const int H = (int)s->m->profile->n_embd, n = d->n;
    forward_tile(s, d->ids, n, s->n_past);
    b->rmsnorm(b, s->h, s->out_norm, n, H, EPS, s->vhid);
    b->matmul(b, s->embd, s->vhid, n, s->vlogits);
    b->softcap(b, s->vlogits, (size_t)n * GEMMA4_N_VOCAB, SOFTCAP);
    b->argmax(b, s->vlogits, n, GEMMA4_N_VOCAB, s->vbest);
}

int gemma4_verify(gemma4_state *s, const int32_t *ids, int n, int32_t *best, float *logits, gem_err *err) {
    backend *b = s->b;
    if (n < 1 || n > s->spec_rows) return gem_err_set(err, "verification of %d rows (1..%d)", n, s->spec_rows);
    if (check_tile(s, ids, n, err)) return -1;
    if (b->set_step) b->set_step(b, ids, n, s->n_past);
    /* replayed like a decode step: launches cost no host time */
    decode_ctx d = {s, ids, n};
    if (backend_run_recorded(b, &s->vgraph[n], verify_body, &d, err)) return -1;
    float f[BE_EXACT_ROWS];
    b->download(b, s->vbest, 0, f, (size_t)n);
    if (logits) b->download(b, s->vlogits, 0, logits, (size_t)n * GEMMA4_N_VOCAB);
    if (b->status(b, err)) return -1;
    for (int i = 0; i < n; i++) best[i] = (int32_t)f[i];
    s->v_pos0 = s->n_past;
    s->v_n = n;
    s->n_past += n;
    wrote(s);
    s->hid_valid = 0; /* until gemma4_spec_keep picks the row */
    return 0;
}

void gemma4_spec_keep(gemma4_state *s, int keep) {
    backend *b = s->b;
    if (keep < 1) keep = 1;
    if (keep > s->v_n) keep = s->v_n;
    const size_t r = (size_t)keep - 1;
    s->n_past = s->v_pos0 + keep;
    b->copy(b, s->vlogits, r * GEMMA4_N_VOCAB, s->logits, 0, GEMMA4_N_VOCAB);
    b->copy(b, s->vbest, r, s->best, 0, 1);
    s->hid = s->vhid;
    s->hid_off = r * s->m->profile->n_embd;
    s->hid_valid = 1;
}

int gemma4_hidden(const gemma4_state *s, const be_buf **buf, size_t *off) {
    if (!s->hid_valid) return -1;
    *buf = s->hid;
    *off = s->hid_off;
    return 0;
}

backend *gemma4_state_backend(const gemma4_state *s) { return s->b; }
const be_weight *gemma4_state_embd(const gemma4_state *s) { return s->embd; }
be_kv *gemma4_state_kv(const gemma4_state *s, uint32_t layer) {
    return layer < s->m->profile->n_layer ? s->kv[layer] : NULL;
}
const gemma4_model *gemma4_state_model(const gemma4_state *s) { return s->m; }
