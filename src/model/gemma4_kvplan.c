/* The KV plan (see gemma4_kvplan.h): one function computes every byte a
 * session's context costs; the state allocates from it, the engine checks
 * it against free memory, gem inspect prints it. */
#include "model/gemma4_kvplan.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "backend/backend.h" /* BE_EXACT_ROWS, BE_TOPK_MAX: the ring slack's bound, the top-k buffer */

const char *gemma4_kv_type_name(gemma4_kv_type t) {
    static const char *const names[GEMMA4_KV_TYPES] = {"f32", "f16", "f16-full"};
    return (unsigned)t < GEMMA4_KV_TYPES ? names[t] : "?";
}

int gemma4_kv_type_parse(const char *s) {
    for (int t = 0; s && t < GEMMA4_KV_TYPES; t++)
        if (!strcmp(s, gemma4_kv_type_name((gemma4_kv_type)t))) return t;
    return -1;
}

int gemma4_kv_type_f16(gemma4_kv_type t, int is_full) {
    return t == GEMMA4_KV_F16 || (t == GEMMA4_KV_F16_FULL && is_full);
}

int64_t gemma4_trained_ctx(const gguf_file *f, const gemma4_profile *p) {
    char key[64];
    gemma4_key(gemma4_arch(p), G4K_CONTEXT_LENGTH, key, sizeof key);
    const int64_t k = gguf_find_key(f, key);
    int64_t v = 0;
    if (k < 0 || gguf_kv_int(f, (uint64_t)k, &v) || v < 0) return 0;
    return v;
}

int gemma4_ctx_resolve(int asked, int64_t trained, const char *path, int *n_ctx, gem_err *err) {
    if (asked < 0) return gem_err_set(err, "a context of %d tokens: the context must be positive", asked);
    /* an asked-for context past the trained one is refused (the model's
     * positions beyond it were never trained); the default is capped */
    if (trained > 0 && asked > trained)
        return gem_err_set(err, "a context of %d exceeds the model's trained context of %lld (%s)", asked,
                           (long long)trained, path);
    int n = asked > 0 ? asked : GEMMA4_CTX_DEFAULT;
    if (trained > 0 && n > trained) n = (int)trained;
    *n_ctx = n;
    return 0;
}

/* The bytes of a cache kind's one layer at `slots` positions. */
static uint64_t kind_bytes(const gemma4_kv_kind *k, uint64_t slots) {
    return 2 * slots * k->n_kv_head * k->head_dim * (k->f16 ? 2u : 4u);
}

void gemma4_tile_floats(const gemma4_profile *p, int tile, size_t out[G4T_COUNT]) {
    const size_t T = tile > 0 ? (size_t)tile : 1, H = p->n_embd, F = p->n_ff;
    /* q and the attention output hold every query head at the widest head
     * (512, full layers); k and v the most KV heads of either kind at 512 */
    const size_t kvh = p->n_head_kv_swa > p->n_head_kv_full ? p->n_head_kv_swa : p->n_head_kv_full;
    const size_t qw = (size_t)p->n_head * GEMMA4_HEAD_DIM_FULL, kw = kvh * GEMMA4_HEAD_DIM_FULL;
    out[G4T_H] = out[G4T_A] = out[G4T_O] = out[G4T_DOWN] = out[G4T_LAST] = T * H;
    out[G4T_Q] = out[G4T_ATT] = T * qw;
    out[G4T_K] = out[G4T_V] = T * kw;
    out[G4T_ACT] = T * F;
    out[G4T_LOGITS] = GEMMA4_N_VOCAB;
    out[G4T_BEST] = 1;
    out[G4T_TOPK] = 2 * BE_TOPK_MAX;
}

int gemma4_kv_plan_make(const gemma4_profile *p, int n_ctx, gemma4_kv_type t, int ring_slack, int tile,
                        gemma4_kv_plan *out, gem_err *err) {
    if (gemma4_is_assistant(p))
        return gem_err_set(err, "%s is an MTP drafter: it keeps no KV caches (it reads its target's)", p->name);
    if (n_ctx < 1) return gem_err_set(err, "a context of %d tokens: the context must be positive", n_ctx);
    if ((unsigned)t >= GEMMA4_KV_TYPES)
        return gem_err_set(err, "KV type %d is not one of " GEMMA4_KV_TYPE_CHOICES, (int)t);
    if (ring_slack < 0 || ring_slack > BE_EXACT_ROWS)
        return gem_err_set(err, "ring slack %d is outside 0..%d", ring_slack, BE_EXACT_ROWS);
    if (tile < 1) return gem_err_set(err, "a prompt tile of %d tokens: the tile must be positive", tile);
    memset(out, 0, sizeof *out);
    out->profile = p;
    out->n_ctx = n_ctx;
    out->type = t;
    out->ring_slack = ring_slack;
    out->tile = tile;
    for (int f = 0; f < 2; f++) {
        gemma4_kv_kind *k = &out->kind[f];
        k->n_kv_head = f ? p->n_head_kv_full : p->n_head_kv_swa;
        k->head_dim = f ? GEMMA4_HEAD_DIM_FULL : GEMMA4_HEAD_DIM_SWA;
        k->capacity = f ? (uint32_t)n_ctx : p->window + (uint32_t)ring_slack;
        k->ring = !f;
        k->f16 = gemma4_kv_type_f16(t, f);
        k->layer_bytes = kind_bytes(k, k->capacity);
    }
    for (uint32_t il = 0; il < p->n_layer; il++) out->kind[gemma4_layer_is_full(p, il)].layers++;
    /* a checkpoint of n_ctx positions: logits and hidden state, then each
     * cache's filled slots (a ring's at most its capacity): gemma4_run.c
     * snap_bytes at n_past = n_ctx */
    out->checkpoint_bytes = ((uint64_t)GEMMA4_N_VOCAB + p->n_embd) * sizeof(float);
    for (int f = 0; f < 2; f++) {
        gemma4_kv_kind *k = &out->kind[f];
        k->bytes = k->layers * k->layer_bytes;
        out->kv_bytes += k->bytes;
        const uint64_t filled = (uint64_t)n_ctx < k->capacity ? (uint64_t)n_ctx : k->capacity;
        out->checkpoint_bytes += k->layers * kind_bytes(k, filled);
    }
    size_t fl[G4T_COUNT];
    gemma4_tile_floats(p, tile, fl);
    for (int i = 0; i < G4T_COUNT; i++) out->act_bytes += (uint64_t)fl[i] * sizeof(float);
    return 0;
}

const gemma4_kv_kind *gemma4_kv_plan_kind(const gemma4_kv_plan *plan, uint32_t il) {
    return &plan->kind[gemma4_layer_is_full(plan->profile, il) ? GEMMA4_KV_FULL : GEMMA4_KV_SLIDING];
}

const char *gemma4_human_bytes(uint64_t n, char *buf, size_t cap) {
    if (n >= (1ull << 30)) snprintf(buf, cap, "%.2f GiB", n / 1073741824.0);
    else if (n >= (1ull << 20)) snprintf(buf, cap, "%.2f MiB", n / 1048576.0);
    else if (n >= 1024) snprintf(buf, cap, "%.2f KiB", n / 1024.0);
    else snprintf(buf, cap, "%" PRIu64 " bytes", n);
    return buf;
}

static uint64_t plan_need(const gemma4_kv_plan *plan, uint64_t weights, uint64_t reserve) {
    return weights + gemma4_kv_plan_total(plan) + reserve;
}

int gemma4_fit_check(const gemma4_kv_plan *plan, uint64_t weights, uint64_t reserve, uint64_t free_bytes,
                     const char *where, gem_err *err) {
    const uint64_t need = plan_need(plan, weights, reserve);
    if (need <= free_bytes) return 0;
    char alt[256] = "", h[32];
    int used = 0;
    /* the other KV types at this context, smallest saving first: the first
     * that fits keeps the most precision */
    static const gemma4_kv_type order[] = {GEMMA4_KV_F16_FULL, GEMMA4_KV_F16};
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
        gemma4_kv_plan o;
        if (order[i] == plan->type ||
            gemma4_kv_plan_make(plan->profile, plan->n_ctx, order[i], plan->ring_slack, plan->tile, &o, NULL))
            continue;
        const uint64_t n = plan_need(&o, weights, reserve);
        if (n > free_bytes) continue;
        used = snprintf(alt, sizeof alt, "--kv-type %s fits (it needs %s); ", gemma4_kv_type_name(order[i]),
                        gemma4_human_bytes(n, h, sizeof h));
        break;
    }
    /* the largest context with this type: only the full-attention caches
     * grow with it */
    const gemma4_kv_kind *full = &plan->kind[GEMMA4_KV_FULL];
    const uint64_t per_pos = full->layers * kind_bytes(full, 1), fixed = need - full->bytes;
    if (fixed < free_bytes && per_pos > 0 && (free_bytes - fixed) / per_pos >= 1)
        snprintf(alt + used, sizeof alt - (size_t)used, "--ctx %" PRIu64 " at most with --kv-type %s",
                 (free_bytes - fixed) / per_pos, gemma4_kv_type_name(plan->type));
    else
        snprintf(alt + used, sizeof alt - (size_t)used, "the weights and fixed buffers alone need %s",
                 gemma4_human_bytes(fixed, h, sizeof h));
    char hn[32], hw[32], hk[32], ha[32], hr[32], hf[32];
    return gem_err_set(err,
                       "a context of %d tokens with --kv-type %s does not fit: it needs %s (%" PRIu64
                       " bytes: weights %s, KV caches %s, activations %s, working reserve %s) and %s has %s "
                       "(%" PRIu64 " bytes) free; %s",
                       plan->n_ctx, gemma4_kv_type_name(plan->type), gemma4_human_bytes(need, hn, sizeof hn), need,
                       gemma4_human_bytes(weights, hw, sizeof hw), gemma4_human_bytes(plan->kv_bytes, hk, sizeof hk),
                       gemma4_human_bytes(plan->act_bytes, ha, sizeof ha), gemma4_human_bytes(reserve, hr, sizeof hr),
                       where, gemma4_human_bytes(free_bytes, hf, sizeof hf), free_bytes, alt);
}
