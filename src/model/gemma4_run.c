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
 * pairs move). Attention scale is 1.0. */
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
    be_kv *kv;
} layer_w;

struct gemma4_state {
    const gemma4_model *m;
    backend *b;
    int n_ctx, max_tile, n_past;
    uint32_t n_run; /* layers evaluated: all but for testing (gemma4_state_new) */
    be_weight *embd, *out_norm, *rope_freqs;
    layer_w *L;
    be_buf *h, *a, *q, *k, *v, *att, *o, *act, *down, *last, *logits, *best, *topk;
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

static be_weight *up_w(gemma4_state *s, const gguf_tensor *t, gem_err *err) {
    return t ? s->b->weight(s->b, t, err) : NULL;
}

void gemma4_state_free(gemma4_state *s) {
    if (!s) return;
    backend *b = s->b;
    if (s->decode) b->graph_free(b, s->decode);
    for (int i = 0; i <= BE_EXACT_ROWS; i++)
        if (s->vgraph[i]) b->graph_free(b, s->vgraph[i]);
    if (s->L) {
        for (uint32_t il = 0; il < s->m->profile->n_layer; il++) {
            layer_w *l = &s->L[il];
            be_weight *ws[] = {l->attn_norm, l->q, l->k, l->v, l->o, l->q_norm, l->k_norm, l->post_attn_norm,
                               l->ffn_norm, l->gate, l->up, l->down, l->post_ffw_norm, l->out_scale};
            for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
                if (ws[i]) b->weight_free(b, ws[i]);
            if (l->kv) b->kv_free(b, l->kv);
        }
        free(s->L);
    }
    be_weight *g[] = {s->embd, s->out_norm, s->rope_freqs};
    for (int i = 0; i < 3; i++)
        if (g[i]) b->weight_free(b, g[i]);
    be_buf *bufs[] = {s->h, s->a, s->q, s->k, s->v, s->att, s->o, s->act, s->down, s->last, s->logits,
                      s->best, s->topk, s->vhid, s->vlogits, s->vbest};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) b->buf_free(b, bufs[i]);
    free(s);
}

gemma4_state *gemma4_state_new(const gemma4_model *m, backend *b, const gemma4_kv_plan *plan, int layers,
                               gem_err *err) {
    const gemma4_profile *p = m->profile;
    if (plan->profile != p) {
        gem_err_set(err, "internal: a KV plan for %s given to a %s model", plan->profile->name, p->name);
        return NULL;
    }
    /* a row-exact backend verifies drafts: its rings need BE_EXACT_ROWS
     * slots beyond the window (gemma4_spec_init) */
    if (plan->ring_slack != gemma4_ring_slack(b)) {
        gem_err_set(err, "internal: a KV plan with rings of window + %d slots for backend '%s', which needs + %d",
                    plan->ring_slack, b->name, gemma4_ring_slack(b));
        return NULL;
    }
    gemma4_state *s = calloc(1, sizeof *s);
    if (!s) {
        gem_err_set(err, "out of memory");
        return NULL;
    }
    s->m = m;
    s->b = b;
    s->n_ctx = plan->n_ctx;
    s->max_tile = plan->tile;
    s->n_run = layers > 0 && (uint32_t)layers < p->n_layer ? (uint32_t)layers : p->n_layer;
    s->L = calloc(p->n_layer, sizeof *s->L);
    if (!s->L) goto oom;
    if (!(s->embd = up_w(s, m->token_embd, err)) || !(s->out_norm = up_w(s, m->output_norm, err)) ||
        !(s->rope_freqs = up_w(s, m->rope_freqs, err)))
        goto fail;
    for (uint32_t il = 0; il < p->n_layer; il++) {
        const gemma4_layer *g = &m->layers[il];
        layer_w *l = &s->L[il];
#define UP(dst, src) if (!(l->dst = up_w(s, g->src, err))) goto fail
        UP(attn_norm, attn_norm); UP(q, attn_q); UP(k, attn_k); UP(o, attn_output); UP(q_norm, attn_q_norm);
        UP(k_norm, attn_k_norm); UP(post_attn_norm, post_attention_norm); UP(ffn_norm, ffn_norm);
        UP(gate, ffn_gate); UP(up, ffn_up); UP(down, ffn_down); UP(post_ffw_norm, post_ffw_norm);
        UP(out_scale, layer_output_scale);
#undef UP
        if (g->attn_v && !(l->v = up_w(s, g->attn_v, err))) goto fail;
    }
    /* the caches after the weights: a device's free memory then shows what
     * the weights took (the engine checked the sum before any of it) */
    for (uint32_t il = 0; il < p->n_layer; il++)
        if (!(s->L[il].kv = gemma4_kv_alloc(plan, b, il, err))) goto fail;
    size_t fl[G4T_COUNT];
    gemma4_tile_floats(p, plan->tile, fl);
    be_buf **bufs[G4T_COUNT] = {&s->h, &s->a, &s->q, &s->k, &s->v, &s->att, &s->o,
                                &s->act, &s->down, &s->last, &s->logits, &s->best, &s->topk};
    for (int i = 0; i < G4T_COUNT; i++)
        if (!(*bufs[i] = b->alloc(b, fl[i], err))) goto fail;
    return s;
oom:
    gem_err_set(err, "out of memory");
fail:
    gemma4_state_free(s);
    return NULL;
}

int gemma4_n_past(const gemma4_state *s) { return s->n_past; }
int gemma4_n_ctx(const gemma4_state *s) { return s->n_ctx; }
void gemma4_reset(gemma4_state *s) {
    s->n_past = 0;
    s->hid_valid = 0;
}

/* h += rmsnorm(x) w (times s), then a = rmsnorm(h) w_next: fused where
 * the backend offers it (results are equal). */
static void add_then_norm(gemma4_state *s, const be_buf *x, const be_weight *w, const be_weight *scale,
                          const be_weight *w_next, int n) {
    backend *b = s->b;
    const int H = (int)s->m->profile->n_embd;
    if (b->add_rmsnorm_norm) {
        b->add_rmsnorm_norm(b, s->h, x, w, scale, w_next, n, H, EPS, s->a);
        return;
    }
    b->add_rmsnorm(b, s->h, x, w, n, H, EPS, scale);
    b->rmsnorm(b, s->h, w_next, n, H, EPS, s->a);
}

/* q/k norms, rope and attention of layer g on its projections s->q/k/v,
 * into s->att (one op where the backend folds them together). */
static void attend(gemma4_state *s, const gemma4_layer *g, const layer_w *l, int n, int pos0) {
    const gemma4_profile *p = s->m->profile;
    backend *b = s->b;
    const int nh = (int)p->n_head, d = (int)g->head_dim, kvh = (int)g->n_head_kv;
    const float theta = g->is_full ? 1e6f : 1e4f;
    const be_weight *ff = g->is_full ? s->rope_freqs : NULL;
    const int window = g->is_full ? 0 : (int)p->window;
    if (b->attention_qkv) { /* K as V (full layers) inside the op: v from k's raw rows */
        b->attention_qkv(b, s->q, l->q_norm, s->k, l->k_norm, s->v, g->is_full, l->kv, n, pos0, nh, kvh, d, EPS, theta,
                         ff, window, s->att);
        return;
    }
    if (b->qkv_norm_rope) { /* K as V (full layers) inside the launch: v from k's raw rows */
        b->qkv_norm_rope(b, s->q, l->q_norm, s->k, l->k_norm, s->v, g->is_full, n, nh, kvh, d, EPS, pos0, theta, ff);
    } else {
        if (g->is_full) b->copy(b, s->k, 0, s->v, 0, (size_t)n * kvh * d); /* K as V: the raw projection */
        b->rmsnorm_rope(b, s->q, l->q_norm, n, nh, d, EPS, pos0, theta, ff);
        b->rmsnorm_rope(b, s->k, l->k_norm, n, kvh, d, EPS, pos0, theta, ff);
        b->rmsnorm(b, s->v, NULL, n * kvh, d, EPS, s->v);
    }
    b->attention(b, s->q, s->k, s->v, l->kv, n, pos0, nh, kvh, d, window, s->att);
}

/* One tile of n tokens at positions pos0.. ; leaves h holding the final
 * residual stream of every token. Each layer starts with a = attn_norm(h)
 * already computed (by the previous layer's last step, or before the
 * first). */
static void forward_tile(gemma4_state *s, const int32_t *ids, int n, int pos0) {
    const gemma4_profile *p = s->m->profile;
    backend *b = s->b;
    const int H = (int)p->n_embd;
    b->embed(b, s->embd, ids, n, sqrtf((float)H), s->h);
    b->rmsnorm(b, s->h, s->L[0].attn_norm, n, H, EPS, s->a);
    for (uint32_t il = 0; il < s->n_run; il++) {
        const gemma4_layer *g = &s->m->layers[il];
        layer_w *l = &s->L[il];
        const be_weight *W[3] = {l->q, l->k, l->v};
        be_buf *O[3] = {s->q, s->k, s->v};
        b->matmul_multi(b, g->is_full ? 2 : 3, W, s->a, n, O);
        attend(s, g, l, n, pos0);
        b->matmul(b, l->o, s->att, n, s->o);
        add_then_norm(s, s->o, l->post_attn_norm, NULL, l->ffn_norm, n);
        b->matmul_geglu(b, l->gate, l->up, s->a, n, s->act);
        b->matmul(b, l->down, s->act, n, s->down);
        if (il + 1 < s->n_run)
            add_then_norm(s, s->down, l->post_ffw_norm, l->out_scale, s->L[il + 1].attn_norm, n);
        else
            b->add_rmsnorm(b, s->h, s->down, l->post_ffw_norm, n, H, EPS, l->out_scale);
    }
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

/* A snapshot is one backend buffer: the last token's logits, then each
 * layer's cache bytes for positions [0, n_past) (kv_stash's layout). It
 * only grows: a session's next checkpoint reuses it. */
struct gemma4_snap {
    backend *b;
    be_buf *buf;
    size_t cap; /* bytes */
    int n_past;
    int hid_valid;
};

/* Device memory a snapshot leaves free (see gemma4_snap_save). */
#define SNAP_RESERVE ((size_t)1 << 30)

/* logits, then the hidden state (an MTP drafter's next input), then the caches */
static size_t snap_head_floats(const gemma4_state *s) { return GEMMA4_N_VOCAB + s->m->profile->n_embd; }

static size_t snap_bytes(const gemma4_state *s) {
    size_t n = snap_head_floats(s) * sizeof(float);
    for (uint32_t il = 0; il < s->n_run; il++) n += s->b->kv_bytes(s->b, s->L[il].kv, s->n_past);
    return n;
}

int gemma4_snap_save(gemma4_state *s, gemma4_snap **snap, gem_err *err) {
    backend *b = s->b;
    gemma4_snap *p = *snap;
    if (!p) {
        if (!(p = calloc(1, sizeof *p))) return gem_err_set(err, "out of memory for a checkpoint");
        p->b = b;
        *snap = p;
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
        b->kv_stash(b, s->L[il].kv, s->n_past, p->buf, off);
        off += b->kv_bytes(b, s->L[il].kv, s->n_past);
    }
    p->n_past = s->n_past;
    return b->status(b, err);
}

void gemma4_snap_load(gemma4_state *s, const gemma4_snap *p) {
    backend *b = s->b;
    s->n_past = p->n_past;
    b->copy(b, p->buf, 0, s->logits, 0, GEMMA4_N_VOCAB);
    if (p->hid_valid) b->copy(b, p->buf, GEMMA4_N_VOCAB, s->last, 0, s->m->profile->n_embd);
    s->hid = s->last;
    s->hid_off = 0;
    s->hid_valid = p->hid_valid;
    size_t off = snap_head_floats(s) * sizeof(float);
    for (uint32_t il = 0; il < s->n_run; il++) {
        b->kv_unstash(b, s->L[il].kv, s->n_past, p->buf, off);
        off += b->kv_bytes(b, s->L[il].kv, s->n_past);
    }
}

int gemma4_snap_n_past(const gemma4_snap *p) { return p->n_past; }

void gemma4_snap_free(gemma4_snap *p) {
    if (!p) return;
    if (p->buf) p->b->buf_free(p->b, p->buf);
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
    return layer < s->m->profile->n_layer ? s->L[layer].kv : NULL;
}
const gemma4_model *gemma4_state_model(const gemma4_state *s) { return s->m; }
