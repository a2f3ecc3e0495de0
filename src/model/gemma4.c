/* Gemma 4 dense model contract (see gemma4.h).
 *
 * The manifest is generated from the profile rather than listed by hand, so
 * validation, `gem synth` and the binder can never disagree about names,
 * shapes or order. Validation walks metadata first (a wrong architecture or
 * a shape mismatch is the most useful first message), then the manifest in
 * order, then the file's tensor table for extras. */
#include "model/gemma4.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/manifest.h"
#include "quant/quant.h"

/* The 31B and 12B shapes are the published ones; the small profiles keep the
 * full structure (head dims 256/512, 5:1 pattern ending on a full layer,
 * K-as-V, real vocabulary) at small widths, with a window that short prompts
 * wrap. */
static const gemma4_profile profiles[] = {
    {"gemma4-31b", "Gemma 4 31B dense", 60, 5376, 21504, 32, 16, 4, 1024, 262144, 0},
    {"gemma4-12b", "Gemma 4 12B dense", 48, 3840, 15360, 16, 8, 1, 1024, 262144, 0},
    {"gemma4-1b", "test profile, about 1B parameters", 18, 1536, 6144, 8, 4, 1, 128, 32768, 0},
    {"gemma4-tiny", "smallest test profile", 6, 256, 512, 4, 2, 1, 32, 4096, 0},
    /* The trained demo model (models/README.md): the tiny widths with a
     * window and FFN large enough to learn from book-length text; its
     * size is dominated by the real 262144-token embedding. */
    {"gemma4-demo", "trained demo model, the embedded default", 6, 256, 1024, 4, 2, 1, 256, 1024, 0},
    /* MTP drafters: the published 31B and 12B assistants (shared spec §7),
     * then one per test profile, each reading its target's caches (same
     * KV heads and window), at widths that keep a draft step cheap beside
     * its target's */
    {"gemma4-31b-assistant", "Gemma 4 31B MTP drafter (assistant)", 4, 1024, 8192, 32, 16, 4, 1024, 262144, 5376},
    {"gemma4-12b-assistant", "Gemma 4 12B MTP drafter (assistant)", 4, 1024, 8192, 16, 8, 1, 1024, 262144, 3840},
    {"gemma4-1b-assistant", "test drafter for gemma4-1b", 4, 256, 1024, 8, 4, 1, 128, 32768, 1536},
    {"gemma4-tiny-assistant", "test drafter for gemma4-tiny", 4, 128, 256, 4, 2, 1, 32, 4096, 256},
    {"gemma4-demo-assistant", "drafter for the demo model", 4, 128, 512, 4, 2, 1, 256, 1024, 256},
};

const char *gemma4_arch(const gemma4_profile *p) { return gemma4_is_assistant(p) ? GEMMA4_ASSISTANT_ARCH : GEMMA4_ARCH; }

const char *gemma4_key(const char *arch, int k, char *buf, size_t cap) {
    static const char *const sfx[G4K_COUNT] = {
        "block_count", "context_length", "embedding_length", "feed_forward_length", "attention.head_count",
        "attention.head_count_kv", "rope.freq_base", "rope.freq_base_swa", "attention.layer_norm_rms_epsilon",
        "attention.key_length", "attention.value_length", "final_logit_softcapping", "attention.sliding_window",
        "attention.shared_kv_layers", "embedding_length_per_layer_input", "attention.sliding_window_pattern",
        "attention.key_length_swa", "attention.value_length_swa", "rope.dimension_count", "rope.dimension_count_swa",
        "embedding_length_out", "nextn_predict_layers"};
    snprintf(buf, cap, "%s.%s", arch, k >= 0 && k < G4K_COUNT ? sfx[k] : "?");
    return buf;
}

int gemma4_profile_count(void) { return (int)(sizeof profiles / sizeof profiles[0]); }

const gemma4_profile *gemma4_profile_at(int i) {
    return i >= 0 && i < gemma4_profile_count() ? &profiles[i] : NULL;
}

const gemma4_profile *gemma4_profile_find(const char *name) {
    for (int i = 0; i < gemma4_profile_count(); i++)
        if (!strcmp(profiles[i].name, name)) return &profiles[i];
    return NULL;
}

const gemma4_profile *gemma4_profile_match(int64_t n_layer, int64_t n_embd, int64_t n_embd_out, int64_t window) {
    const gemma4_profile *m = NULL;
    for (int i = 0; i < gemma4_profile_count(); i++) {
        const gemma4_profile *p = &profiles[i];
        if (p->n_layer != n_layer || p->n_embd != n_embd || p->n_embd_out != n_embd_out) continue;
        if (p->window == window) return p;
        if (!m) m = p;
    }
    return m;
}

int gemma4_layer_is_full(const gemma4_profile *p, uint32_t il) {
    return il % 6 == 5 || il + 1 == p->n_layer;
}

static uint32_t layer_head_dim(const gemma4_profile *p, uint32_t il) {
    return gemma4_layer_is_full(p, il) ? GEMMA4_HEAD_DIM_FULL : GEMMA4_HEAD_DIM_SWA;
}

static uint32_t layer_kv_heads(const gemma4_profile *p, uint32_t il) {
    return gemma4_layer_is_full(p, il) ? p->n_head_kv_full : p->n_head_kv_swa;
}

/* ---- manifest ---- */

typedef struct {
    const char *suffix;
    gemma4_role role;
    gemma4_kind kind;
} layer_entry;

/* Per-layer tensors in the converter's order: HF parameter names sorted as
 * strings (input_layernorm, layer_scalar, mlp.down/gate/up_proj,
 * post_attention_layernorm, post_feedforward_layernorm,
 * pre_feedforward_layernorm, self_attn.k_norm/k_proj/o_proj/q_norm/q_proj/
 * v_proj), mapped to their GGUF names. */
static const layer_entry layer_entries[] = {
    {"attn_norm", G4_ATTN_NORM, G4_KIND_VECTOR},
    {"layer_output_scale", G4_LAYER_OUT_SCALE, G4_KIND_VECTOR},
    {"ffn_down", G4_FFN_DOWN, G4_KIND_MATRIX},
    {"ffn_gate", G4_FFN_GATE, G4_KIND_MATRIX},
    {"ffn_up", G4_FFN_UP, G4_KIND_MATRIX},
    {"post_attention_norm", G4_POST_ATTN_NORM, G4_KIND_VECTOR},
    {"post_ffw_norm", G4_POST_FFW_NORM, G4_KIND_VECTOR},
    {"ffn_norm", G4_FFN_NORM, G4_KIND_VECTOR},
    {"attn_k_norm", G4_ATTN_K_NORM, G4_KIND_VECTOR},
    {"attn_k", G4_ATTN_K, G4_KIND_MATRIX},
    {"attn_output", G4_ATTN_OUTPUT, G4_KIND_MATRIX},
    {"attn_q_norm", G4_ATTN_Q_NORM, G4_KIND_VECTOR},
    {"attn_q", G4_ATTN_Q, G4_KIND_MATRIX},
    {"attn_v", G4_ATTN_V, G4_KIND_MATRIX},
};

/* Assistants have no key projections: their attention reads the target's
 * caches. */
static int entry_in(const gemma4_profile *p, uint32_t il, gemma4_role role) {
    if (role == G4_ATTN_V && gemma4_layer_is_full(p, il)) return 0;
    if (gemma4_is_assistant(p) && (role == G4_ATTN_K || role == G4_ATTN_K_NORM || role == G4_ATTN_V)) return 0;
    return 1;
}

size_t gemma4_manifest_count(const gemma4_profile *p) {
    size_t n = gemma4_is_assistant(p) ? 5 : 3;
    for (uint32_t il = 0; il < p->n_layer; il++)
        for (size_t e = 0; e < sizeof layer_entries / sizeof layer_entries[0]; e++)
            n += (size_t)entry_in(p, il, layer_entries[e].role);
    return n;
}

static void spec_shape(const gemma4_profile *p, int il, gemma4_role role, uint64_t ne[2], uint32_t *n_dims) {
    uint64_t H = p->n_embd, F = p->n_ff;
    uint64_t d = il >= 0 ? layer_head_dim(p, (uint32_t)il) : 0;
    uint64_t g = il >= 0 ? layer_kv_heads(p, (uint32_t)il) : 0;
    *n_dims = 2;
    ne[1] = 1;
    switch (role) {
    case G4_TOKEN_EMBD: ne[0] = H; ne[1] = GEMMA4_N_VOCAB; break;
    case G4_OUTPUT_NORM: ne[0] = H; *n_dims = 1; break;
    case G4_ROPE_FREQS: ne[0] = GEMMA4_HEAD_DIM_FULL / 2; *n_dims = 1; break;
    case G4_ATTN_Q: ne[0] = H; ne[1] = p->n_head * d; break;
    case G4_ATTN_K: case G4_ATTN_V: ne[0] = H; ne[1] = g * d; break;
    case G4_ATTN_OUTPUT: ne[0] = p->n_head * d; ne[1] = H; break;
    case G4_ATTN_Q_NORM: case G4_ATTN_K_NORM: ne[0] = d; *n_dims = 1; break;
    case G4_FFN_GATE: case G4_FFN_UP: ne[0] = H; ne[1] = F; break;
    case G4_FFN_DOWN: ne[0] = F; ne[1] = H; break;
    case G4_LAYER_OUT_SCALE: ne[0] = 1; *n_dims = 1; break;
    case G4_NEXTN_PRE: ne[0] = 2 * (uint64_t)p->n_embd_out; ne[1] = H; break;
    case G4_NEXTN_POST: ne[0] = H; ne[1] = p->n_embd_out; break;
    default: ne[0] = H; *n_dims = 1; break; /* the four block norms */
    }
}

static void spec_set(const gemma4_profile *p, gemma4_tensor_spec *s, const char *name, gemma4_role role,
                     gemma4_kind kind, int il) {
    snprintf(s->name, sizeof s->name, "%s", name);
    s->role = role;
    s->kind = kind;
    s->layer = il;
    spec_shape(p, il, role, s->ne, &s->n_dims);
}

size_t gemma4_manifest(const gemma4_profile *p, gemma4_tensor_spec *out, size_t cap) {
    size_t n = gemma4_manifest_count(p);
    if (cap < n) return 0;
    size_t k = 0;
    /* The converter emits the generated rope_freqs first, then the HF tensors
     * sorted by name: embed_tokens, layers.N sorted as strings (0, 1, 10,
     * 11, ..., 2, 20, ...), norm. */
    spec_set(p, &out[k++], "rope_freqs.weight", G4_ROPE_FREQS, G4_KIND_VECTOR, -1);
    spec_set(p, &out[k++], "token_embd.weight", G4_TOKEN_EMBD, G4_KIND_EMBD, -1);
    uint32_t order[256];
    uint32_t L = p->n_layer < 256 ? p->n_layer : 256;
    mf_layer_order(order, L);
    for (uint32_t oi = 0; oi < L; oi++) {
        uint32_t il = order[oi];
        for (size_t e = 0; e < sizeof layer_entries / sizeof layer_entries[0]; e++) {
            const layer_entry *le = &layer_entries[e];
            if (!entry_in(p, il, le->role)) continue;
            char name[48];
            snprintf(name, sizeof name, "blk.%u.%s.weight", il, le->suffix);
            spec_set(p, &out[k++], name, le->role, le->kind, (int)il);
        }
    }
    spec_set(p, &out[k++], "output_norm.weight", G4_OUTPUT_NORM, G4_KIND_VECTOR, -1);
    if (gemma4_is_assistant(p)) { /* top-level HF names post_projection, pre_projection sort last */
        spec_set(p, &out[k++], "nextn.post_projection.weight", G4_NEXTN_POST, G4_KIND_MATRIX, -1);
        spec_set(p, &out[k++], "nextn.pre_projection.weight", G4_NEXTN_PRE, G4_KIND_MATRIX, -1);
    }
    return k == n ? n : 0;
}

int gemma4_type_allowed(gemma4_kind kind, uint32_t type) { return mf_type_allowed(kind == G4_KIND_VECTOR, type); }

uint64_t gemma4_param_count(const gemma4_profile *p) {
    size_t n = gemma4_manifest_count(p);
    gemma4_tensor_spec *specs = malloc(n * sizeof *specs);
    if (!specs || !gemma4_manifest(p, specs, n)) {
        free(specs);
        return 0;
    }
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++)
        if (specs[i].role != G4_ROPE_FREQS) total += specs[i].ne[0] * specs[i].ne[1];
    free(specs);
    return total;
}

/* ---- metadata validation ---- */

/* v->arch is the metadata prefix: "gemma4" or "gemma4-assistant" */
static const char *K(mf_ctx *v, const char *suffix) { return mf_key(v, suffix); }

/* A per-layer integer: either a scalar (all layers equal) or an array of
 * n_layer integers. want(il) gives the expected value. */
static int expect_per_layer(mf_ctx *v, const char *key, const gemma4_profile *p,
                            uint32_t (*want)(const gemma4_profile *, uint32_t)) {
    int64_t i = mf_need_key(v, key);
    if (i < 0) return -1;
    char d[200];
    if (gguf_kv_type(v->f, (uint64_t)i) == GGUF_T_ARRAY) {
        if (gguf_kv_arr_len(v->f, (uint64_t)i) != p->n_layer) {
            snprintf(d, sizeof d, "%llu entries, expected one per layer (%u)",
                     (unsigned long long)gguf_kv_arr_len(v->f, (uint64_t)i), p->n_layer);
            return mf_fail(v, key, "array has %s", d);
        }
        for (uint32_t il = 0; il < p->n_layer; il++) {
            int64_t x;
            if (gguf_kv_arr_int(v->f, (uint64_t)i, il, &x))
                return mf_fail(v, key, "array elements have type %s, expected integers",
                               gguf_vtype_name(gguf_kv_arr_type(v->f, (uint64_t)i)));
            if (x != want(p, il)) {
                snprintf(d, sizeof d, "[%u] is %lld, expected %u", il, (long long)x, want(p, il));
                return mf_fail(v, key, "%s", d);
            }
        }
        return 0;
    }
    int64_t x;
    if (gguf_kv_int(v->f, (uint64_t)i, &x))
        return mf_fail(v, key, "has type %s, expected an integer or an array of integers",
                       gguf_vtype_name(gguf_kv_type(v->f, (uint64_t)i)));
    for (uint32_t il = 0; il < p->n_layer; il++) {
        if (x != want(p, il)) {
            snprintf(d, sizeof d, "%lld for every layer, but layer %u needs %u", (long long)x, il, want(p, il));
            return mf_fail(v, key, "is %s", d);
        }
    }
    return 0;
}

static uint32_t want_ff(const gemma4_profile *p, uint32_t il) { (void)il; return p->n_ff; }
static uint32_t want_head(const gemma4_profile *p, uint32_t il) { (void)il; return p->n_head; }

static int expect_pattern(mf_ctx *v, const char *key, const gemma4_profile *p) {
    int64_t i = mf_layer_flags(v, key, p->n_layer, "true = sliding layer");
    if (i < 0) return -1;
    for (uint32_t il = 0; il < p->n_layer; il++) {
        int b;
        gguf_kv_arr_bool(v->f, (uint64_t)i, il, &b);
        if (b != !gemma4_layer_is_full(p, il)) {
            char d[200];
            snprintf(d, sizeof d, "layer %u is marked %s, the profile has it %s", il, b ? "sliding" : "full",
                     gemma4_layer_is_full(p, il) ? "full" : "sliding");
            return mf_fail(v, key, "%s", d);
        }
    }
    return 0;
}

/* Keys the contract knows under the "gemma4." prefix. */
static const char *const known_keys[] = {
    "context_length", "block_count", "embedding_length", "feed_forward_length",
    "attention.head_count", "attention.head_count_kv", "attention.key_length",
    "attention.value_length", "attention.key_length_swa", "attention.value_length_swa",
    "attention.sliding_window", "attention.sliding_window_pattern",
    "attention.layer_norm_rms_epsilon", "attention.shared_kv_layers", "rope.freq_base",
    "rope.freq_base_swa", "rope.dimension_count", "rope.dimension_count_swa",
    "final_logit_softcapping", "embedding_length_per_layer_input", "vocab_size",
};
/* ... and, under "gemma4-assistant.", these besides */
static const char *const assistant_keys[] = {"embedding_length_out", "nextn_predict_layers"};

static int check_tokenizer(mf_ctx *v) {
    const char *key = "tokenizer.ggml.model";
    int64_t i = mf_need_key(v, key);
    if (i < 0) return -1;
    gguf_str s;
    if (gguf_kv_str(v->f, (uint64_t)i, &s)) return mf_fail(v, key, "%s", "must be a string");
    if (!gguf_str_eq(s, "gemma4")) {
        char d[120];
        snprintf(d, sizeof d, "'%.*s', expected 'gemma4'", (int)(s.len > 64 ? 64 : s.len), s.ptr);
        return mf_fail(v, key, "is %s", d);
    }
    key = "tokenizer.ggml.tokens";
    if ((i = mf_string_array(v, key)) < 0) return -1;
    if (gguf_kv_arr_len(v->f, (uint64_t)i) != GEMMA4_N_VOCAB) {
        char d[100];
        snprintf(d, sizeof d, "%llu tokens, expected %u", (unsigned long long)gguf_kv_arr_len(v->f, (uint64_t)i),
                 GEMMA4_N_VOCAB);
        return mf_fail(v, key, "has %s", d);
    }
    return 0;
}

static int identify(mf_ctx *v, const gemma4_profile **out) {
    const char *key = "general.architecture";
    int64_t i = mf_need_key(v, key);
    if (i < 0) return -1;
    gguf_str arch;
    if (gguf_kv_str(v->f, (uint64_t)i, &arch)) return mf_fail(v, key, "%s", "must be a string");
    if (gguf_str_eq(arch, GEMMA4_ARCH)) {
        v->arch = GEMMA4_ARCH;
    } else if (gguf_str_eq(arch, GEMMA4_ASSISTANT_ARCH)) {
        v->arch = GEMMA4_ASSISTANT_ARCH;
    } else {
        char d[200];
        snprintf(d, sizeof d, "unsupported architecture '%.*s' (gem supports: gemma4, gemma4-assistant, qwen35)",
                 (int)(arch.len > 64 ? 64 : arch.len), arch.ptr);
        return mf_fail(v, key, "%s", d);
    }
    int64_t x;
    if (gguf_find_key(v->f, K(v, "expert_count")) >= 0)
        return mf_fail(v, v->key, "%s", "Gemma 4 MoE (26B-A4B) is not supported: gem runs the dense 31B and 12B");
    i = gguf_find_key(v->f, K(v, "embedding_length_per_layer_input"));
    if (i >= 0 && !gguf_kv_int(v->f, (uint64_t)i, &x) && x != 0)
        return mf_fail(v, v->key, "%s",
                         "Gemma 4 E2B/E4B (per-layer embeddings) is not supported: gem runs the dense 31B and 12B");
    int64_t n_layer, n_embd, n_out = 0;
    if (mf_get_int(v, K(v, "block_count"), &n_layer) || mf_get_int(v, K(v, "embedding_length"), &n_embd)) return -1;
    const int assistant = !strcmp(v->arch, GEMMA4_ASSISTANT_ARCH);
    if (assistant) {
        if (mf_get_int(v, K(v, "embedding_length_out"), &n_out)) return -1;
        if (n_out == n_embd || n_out < 1)
            return mf_fail(v, v->key, "%s", "must carry the target's width (positive, and not the drafter's own)");
    }
    int64_t window = -1;
    i = gguf_find_key(v->f, K(v, "attention.sliding_window"));
    if (i < 0 || gguf_kv_int(v->f, (uint64_t)i, &window)) window = -1;
    if ((*out = gemma4_profile_match(n_layer, n_embd, n_out, window))) return 0;
    char names[512] = "";
    for (int p = 0; p < gemma4_profile_count(); p++)
        if (gemma4_is_assistant(&profiles[p]) == assistant) mf_list_add(names, sizeof names, profiles[p].name);
    if (assistant)
        return gem_err_set(v->err,
                           "%s: block_count %lld with embedding_length %lld and embedding_length_out %lld matches no "
                           "supported Gemma 4 assistant profile (%s)",
                           gguf_path(v->f), (long long)n_layer, (long long)n_embd, (long long)n_out, names);
    return gem_err_set(v->err,
                       "%s: block_count %lld with embedding_length %lld matches no supported Gemma 4 profile (%s)",
                       gguf_path(v->f), (long long)n_layer, (long long)n_embd, names);
}

static int check_metadata(mf_ctx *v, const gemma4_profile *p) {
    const int assistant = gemma4_is_assistant(p);
    int64_t ctx;
    if (mf_get_int(v, K(v, "context_length"), &ctx)) return -1;
    if (ctx < 1) return mf_fail(v, v->key, "%s", "must be positive");
    if (expect_per_layer(v, K(v, "feed_forward_length"), p, want_ff) ||
        expect_per_layer(v, K(v, "attention.head_count"), p, want_head) ||
        expect_per_layer(v, K(v, "attention.head_count_kv"), p, layer_kv_heads) ||
        mf_expect_int(v, K(v, "attention.key_length"), GEMMA4_HEAD_DIM_FULL) ||
        mf_expect_int(v, K(v, "attention.value_length"), GEMMA4_HEAD_DIM_FULL) ||
        mf_expect_int(v, K(v, "attention.key_length_swa"), GEMMA4_HEAD_DIM_SWA) ||
        mf_expect_int(v, K(v, "attention.value_length_swa"), GEMMA4_HEAD_DIM_SWA) ||
        mf_expect_int(v, K(v, "attention.sliding_window"), p->window) ||
        expect_pattern(v, K(v, "attention.sliding_window_pattern"), p) ||
        mf_expect_float(v, K(v, "attention.layer_norm_rms_epsilon"), 1e-6, 1e-6) ||
        mf_expect_float(v, K(v, "rope.freq_base"), 1e6, 1e-6) ||
        mf_expect_float(v, K(v, "rope.freq_base_swa"), 1e4, 1e-6) ||
        mf_expect_int(v, K(v, "rope.dimension_count"), GEMMA4_HEAD_DIM_FULL) ||
        mf_expect_int(v, K(v, "rope.dimension_count_swa"), GEMMA4_HEAD_DIM_SWA))
        return -1;
    /* A drafter's logits are never soft-capped (the reference's graph has
     * no cap), so its file may carry the key or not; a target must have 30. */
    if (!assistant && mf_expect_float(v, K(v, "final_logit_softcapping"), 30.0, 1e-6)) return -1;
    /* every assistant layer reads shared (the target's) caches */
    if (gguf_find_key(v->f, K(v, "attention.shared_kv_layers")) >= 0 &&
        mf_expect_int(v, v->key, assistant ? p->n_layer : 0))
        return -1;
    if (assistant && mf_expect_int(v, K(v, "nextn_predict_layers"), p->n_layer)) return -1;
    if (gguf_find_key(v->f, K(v, "embedding_length_per_layer_input")) >= 0 &&
        mf_expect_int(v, v->key, 0))
        return -1;
    if (gguf_find_key(v->f, K(v, "vocab_size")) >= 0 && mf_expect_int(v, v->key, GEMMA4_N_VOCAB)) return -1;
    if (mf_check_known(v, known_keys, sizeof known_keys / sizeof known_keys[0], assistant_keys,
                       assistant ? sizeof assistant_keys / sizeof assistant_keys[0] : 0))
        return -1;
    /* a drafter file may carry the converter's copy of the tokenizer (it
     * then must be the target's kind) or none: it reads no text */
    if (assistant && gguf_find_key(v->f, "tokenizer.ggml.model") < 0) return 0;
    return check_tokenizer(v);
}

/* ---- tensor validation ---- */

static const char *spec_name(const void *specs, size_t i) { return ((const gemma4_tensor_spec *)specs)[i].name; }

static int check_tensors(mf_ctx *v, const gemma4_profile *p, const gemma4_tensor_spec *specs, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (mf_check_tensor(v, p->name, specs[i].name, specs[i].n_dims, specs[i].ne, specs[i].kind == G4_KIND_VECTOR))
            return -1;
    const gguf_tensor *t = mf_extra_tensor(v->f, specs, n, spec_name);
    if (!t) return 0;
    const char *path = gguf_path(v->f);
    unsigned il;
    char suffix[64];
    if (gemma4_is_assistant(p) && sscanf(t->name, "blk.%u.%63[^.]", &il, suffix) == 2 &&
        (!strcmp(suffix, "attn_k") || !strcmp(suffix, "attn_v") || !strcmp(suffix, "attn_k_norm")))
        return gem_err_set(v->err, "%s: unexpected tensor '%s': a drafter's attention reads the target's caches "
                           "and has no key or value projections", path, t->name);
    if (sscanf(t->name, "blk.%u.%63[^.]", &il, suffix) == 2 && !strcmp(suffix, "attn_v") && il < p->n_layer &&
        gemma4_layer_is_full(p, il))
        return gem_err_set(v->err, "%s: unexpected tensor '%s': full-attention layers use K as V and have no attn_v",
                           path, t->name);
    return gem_err_set(v->err, "%s: unexpected tensor '%s' (not in the %s manifest)", path, t->name, p->name);
}

int gemma4_validate(const gguf_file *f, const gemma4_profile **out, gem_err *err) {
    mf_ctx v = {f, err, GEMMA4_ARCH, ""};
    const gemma4_profile *p;
    if (identify(&v, &p) || check_metadata(&v, p)) return -1;
    size_t n = gemma4_manifest_count(p);
    gemma4_tensor_spec *specs = malloc(n * sizeof *specs);
    if (!specs) return gem_err_set(err, "out of memory");
    gemma4_manifest(p, specs, n);
    int rc = check_tensors(&v, p, specs, n);
    free(specs);
    if (rc) return -1;
    *out = p;
    return 0;
}

/* ---- binding ---- */

gemma4_model *gemma4_bind(const gguf_file *f, gem_err *err) {
    const gemma4_profile *p;
    if (gemma4_validate(f, &p, err)) return NULL;
    gemma4_model *m = calloc(1, sizeof *m);
    if (!m || !(m->layers = calloc(p->n_layer, sizeof *m->layers))) {
        free(m);
        gem_err_set(err, "out of memory");
        return NULL;
    }
    m->profile = p;
    m->file = f;
    size_t n = gemma4_manifest_count(p);
    gemma4_tensor_spec *specs = malloc(n * sizeof *specs);
    if (!specs) {
        gemma4_free(m);
        gem_err_set(err, "out of memory");
        return NULL;
    }
    gemma4_manifest(p, specs, n);
    for (size_t i = 0; i < n; i++) {
        const gguf_tensor *t = gguf_find_tensor(f, specs[i].name);
        gemma4_layer *L = specs[i].layer >= 0 ? &m->layers[specs[i].layer] : NULL;
        switch (specs[i].role) {
        case G4_TOKEN_EMBD: m->token_embd = t; break;
        case G4_OUTPUT_NORM: m->output_norm = t; break;
        case G4_ROPE_FREQS: m->rope_freqs = t; break;
        case G4_ATTN_NORM: L->attn_norm = t; break;
        case G4_ATTN_Q: L->attn_q = t; break;
        case G4_ATTN_K: L->attn_k = t; break;
        case G4_ATTN_V: L->attn_v = t; break;
        case G4_ATTN_OUTPUT: L->attn_output = t; break;
        case G4_ATTN_Q_NORM: L->attn_q_norm = t; break;
        case G4_ATTN_K_NORM: L->attn_k_norm = t; break;
        case G4_POST_ATTN_NORM: L->post_attention_norm = t; break;
        case G4_FFN_NORM: L->ffn_norm = t; break;
        case G4_FFN_GATE: L->ffn_gate = t; break;
        case G4_FFN_UP: L->ffn_up = t; break;
        case G4_FFN_DOWN: L->ffn_down = t; break;
        case G4_POST_FFW_NORM: L->post_ffw_norm = t; break;
        case G4_LAYER_OUT_SCALE: L->layer_output_scale = t; break;
        case G4_NEXTN_PRE: m->nextn_pre = t; break;
        case G4_NEXTN_POST: m->nextn_post = t; break;
        default: break;
        }
    }
    free(specs);
    for (uint32_t il = 0; il < p->n_layer; il++) {
        m->layers[il].is_full = gemma4_layer_is_full(p, il);
        m->layers[il].head_dim = layer_head_dim(p, il);
        m->layers[il].n_head_kv = layer_kv_heads(p, il);
    }
    return m;
}

void gemma4_free(gemma4_model *m) {
    if (!m) return;
    free(m->layers);
    free(m);
}

uint64_t gemma4_decode_bytes(const gemma4_model *m) {
    uint64_t total = 0;
    for (uint64_t i = 0; i < gguf_tensor_count(m->file); i++) total += gguf_tensor_at(m->file, i)->n_bytes;
    /* token_embd is counted once above as the output head; add the gathered row */
    total += m->token_embd->n_bytes / m->token_embd->ne[1];
    return total;
}

int gemma4_pair_check(const gemma4_model *t, const gemma4_model *a, gem_err *err) {
    const gemma4_profile *tp = t->profile, *ap = a->profile;
    const char *tf = gguf_path(t->file), *af = gguf_path(a->file);
    if (gemma4_is_assistant(tp)) return gem_err_set(err, "%s is an MTP drafter (%s), not a target model", tf, tp->name);
    if (!gemma4_is_assistant(ap))
        return gem_err_set(err, "%s is a target model (%s), not an MTP drafter (arch %s)", af, ap->name,
                           GEMMA4_ASSISTANT_ARCH);
    char what[200] = "";
    if (ap->n_embd_out != tp->n_embd)
        snprintf(what, sizeof what, "embedding_length_out %u of the drafter is not the target's embedding_length %u",
                 ap->n_embd_out, tp->n_embd);
    else if (ap->n_head_kv_swa != tp->n_head_kv_swa || ap->n_head_kv_full != tp->n_head_kv_full)
        snprintf(what, sizeof what,
                 "attention.head_count_kv %u/%u (sliding/full) of the drafter is not the target's %u/%u",
                 ap->n_head_kv_swa, ap->n_head_kv_full, tp->n_head_kv_swa, tp->n_head_kv_full);
    else if (ap->window != tp->window)
        snprintf(what, sizeof what, "attention.sliding_window %u of the drafter is not the target's %u", ap->window,
                 tp->window);
    else if (a->token_embd->ne[1] != t->token_embd->ne[1])
        snprintf(what, sizeof what, "the drafter's vocabulary of %llu tokens is not the target's %llu",
                 (unsigned long long)a->token_embd->ne[1], (unsigned long long)t->token_embd->ne[1]);
    if (what[0])
        return gem_err_set(err, "MTP drafter %s (%s) does not fit target %s (%s): %s", af, ap->name, tf, tp->name, what);
    return 0;
}
