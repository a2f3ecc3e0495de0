/* Qwen3.5 dense hybrid model contract (see qwen35.h).
 *
 * As for Gemma 4 the manifest is generated from the profile, so validation,
 * `gem synth`, `gem convert` and the binder agree on names, shapes and order
 * by construction. Validation walks metadata first, then the manifest in
 * order, then the file's tensor table for extras. */
#include "model/qwen35.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/manifest.h"
#include "quant/quant.h"

/* The 27B shape is the published one (shared spec §1.1). qwen35-tiny keeps
 * the structure (3 GDN layers then a gated attention layer, GQA, partial
 * RoPE of a quarter of the head, more V heads than QK heads so the tiled
 * head order matters, untied head) at widths whose Hugging Face checkpoint
 * stays under 2 MB for the transformers goldens: hence its own 512-token
 * vocabulary (synth writes the first 512 tokens of the Qwen vocabulary). */
static const qwen35_profile profiles[] = {
    {"qwen35-27b", "Qwen3.5/3.6/3.8 27B dense hybrid", 64, 5120, 17408, 24, 4, 256, 64, 128, 16, 48, 248320, 0,
     262144},
    {"qwen35-tiny", "smallest test profile (3 GDN + 1 attention layer)", 4, 64, 128, 2, 1, 64, 16, 64, 2, 4, 512, 0,
     4096},
    /* a step up for CPU speed work and multi-block tests: two full
     * attention layers, the real head dims */
    {"qwen35-small", "test profile (6 GDN + 2 attention layers, real head dims)", 8, 512, 1536, 4, 2, 256, 64, 128,
     2, 6, 4096, 0, 32768},
};

int qwen35_profile_count(void) { return (int)(sizeof profiles / sizeof profiles[0]); }

const qwen35_profile *qwen35_profile_at(int i) { return i >= 0 && i < qwen35_profile_count() ? &profiles[i] : NULL; }

const qwen35_profile *qwen35_profile_find(const char *name) {
    for (int i = 0; i < qwen35_profile_count(); i++)
        if (!strcmp(profiles[i].name, name)) return &profiles[i];
    return NULL;
}

const qwen35_profile *qwen35_profile_match(int64_t n_layer, int64_t n_embd) {
    for (int i = 0; i < qwen35_profile_count(); i++)
        if (profiles[i].n_layer == n_layer && profiles[i].n_embd == n_embd) return &profiles[i];
    return NULL;
}

int qwen35_layer_is_attn(uint32_t il) { return (il + 1) % QWEN35_ATTN_INTERVAL == 0; }

/* The Q35K_* suffixes: what synth and convert write, and (with vocab_size)
 * every "qwen35." key validation knows. */
static const char *const key_sfx[Q35K_COUNT] = {
    "block_count", "context_length", "embedding_length", "feed_forward_length", "attention.head_count",
    "attention.head_count_kv", "rope.dimension_sections", "rope.freq_base", "attention.layer_norm_rms_epsilon",
    "attention.key_length", "attention.value_length", "ssm.conv_kernel", "ssm.state_size", "ssm.group_count",
    "ssm.time_step_rank", "ssm.inner_size", "attention.recurrent_layers", "full_attention_interval",
    "rope.dimension_count"};

const char *qwen35_key(int k, char *buf, size_t cap) {
    snprintf(buf, cap, "%s.%s", QWEN35_ARCH, k >= 0 && k < Q35K_COUNT ? key_sfx[k] : "?");
    return buf;
}

int64_t qwen35_trained_ctx(const gguf_file *f) {
    char key[64];
    const int64_t k = gguf_find_key(f, qwen35_key(Q35K_CONTEXT_LENGTH, key, sizeof key));
    int64_t v = 0;
    if (k < 0 || gguf_kv_int(f, (uint64_t)k, &v) || v < 0) return 0;
    return v;
}

/* ---- manifest ---- */

typedef struct {
    const char *name; /* GGUF name after "blk.N." */
    qwen35_role role;
    qwen35_kind kind;
    int attn; /* 1: attention layers only, 0: GDN layers only, -1: both */
} layer_entry;

/* Per-layer tensors in HF name order (input_layernorm, linear_attn.A_log,
 * conv1d, dt_bias, in_proj_a/b/qkv/z, norm, out_proj, mlp.down/gate/up,
 * post_attention_layernorm, self_attn.k_norm/k_proj/o_proj/q_norm/q_proj/
 * v_proj), mapped to their GGUF names. */
static const layer_entry layer_entries[] = {
    {"attn_norm.weight", Q35_ATTN_NORM, Q35_KIND_VECTOR, -1},
    {"ssm_a", Q35_SSM_A, Q35_KIND_VECTOR, 0},
    {"ssm_conv1d.weight", Q35_SSM_CONV1D, Q35_KIND_VECTOR, 0},
    {"ssm_dt.bias", Q35_SSM_DT, Q35_KIND_VECTOR, 0},
    {"ssm_alpha.weight", Q35_SSM_ALPHA, Q35_KIND_MATRIX, 0},
    {"ssm_beta.weight", Q35_SSM_BETA, Q35_KIND_MATRIX, 0},
    {"attn_qkv.weight", Q35_ATTN_QKV, Q35_KIND_MATRIX, 0},
    {"attn_gate.weight", Q35_ATTN_GATE, Q35_KIND_MATRIX, 0},
    {"ssm_norm.weight", Q35_SSM_NORM, Q35_KIND_VECTOR, 0},
    {"ssm_out.weight", Q35_SSM_OUT, Q35_KIND_MATRIX, 0},
    {"ffn_down.weight", Q35_FFN_DOWN, Q35_KIND_MATRIX, -1},
    {"ffn_gate.weight", Q35_FFN_GATE, Q35_KIND_MATRIX, -1},
    {"ffn_up.weight", Q35_FFN_UP, Q35_KIND_MATRIX, -1},
    {"post_attention_norm.weight", Q35_POST_ATTN_NORM, Q35_KIND_VECTOR, -1},
    {"attn_k_norm.weight", Q35_ATTN_K_NORM, Q35_KIND_VECTOR, 1},
    {"attn_k.weight", Q35_ATTN_K, Q35_KIND_MATRIX, 1},
    {"attn_output.weight", Q35_ATTN_OUTPUT, Q35_KIND_MATRIX, 1},
    {"attn_q_norm.weight", Q35_ATTN_Q_NORM, Q35_KIND_VECTOR, 1},
    {"attn_q.weight", Q35_ATTN_Q, Q35_KIND_MATRIX, 1},
    {"attn_v.weight", Q35_ATTN_V, Q35_KIND_MATRIX, 1},
};
#define N_ENTRIES (sizeof layer_entries / sizeof layer_entries[0])

static int entry_in(uint32_t il, const layer_entry *e) { return e->attn < 0 || e->attn == qwen35_layer_is_attn(il); }

size_t qwen35_manifest_count(const qwen35_profile *p) {
    size_t n = p->tied ? 2 : 3;
    for (uint32_t il = 0; il < p->n_layer; il++)
        for (size_t e = 0; e < N_ENTRIES; e++) n += (size_t)entry_in(il, &layer_entries[e]);
    return n;
}

static void spec_shape(const qwen35_profile *p, qwen35_role role, uint64_t ne[2], uint32_t *n_dims) {
    const uint64_t H = p->n_embd, F = p->n_ff, V = p->n_vocab;
    const uint64_t qd = (uint64_t)p->n_head * p->head_dim, kvd = (uint64_t)p->n_head_kv * p->head_dim;
    *n_dims = 2;
    ne[1] = 1;
    switch (role) {
    case Q35_TOKEN_EMBD: case Q35_OUTPUT: ne[0] = H; ne[1] = V; break;
    case Q35_FFN_GATE: case Q35_FFN_UP: ne[0] = H; ne[1] = F; break;
    case Q35_FFN_DOWN: ne[0] = F; ne[1] = H; break;
    case Q35_SSM_A: case Q35_SSM_DT: ne[0] = p->n_v_heads; *n_dims = 1; break;
    case Q35_SSM_CONV1D: ne[0] = QWEN35_CONV_KERNEL; ne[1] = qwen35_conv_dim(p); break;
    case Q35_SSM_ALPHA: case Q35_SSM_BETA: ne[0] = H; ne[1] = p->n_v_heads; break;
    case Q35_ATTN_QKV: ne[0] = H; ne[1] = qwen35_conv_dim(p); break;
    case Q35_ATTN_GATE: ne[0] = H; ne[1] = qwen35_value_dim(p); break;
    case Q35_SSM_NORM: ne[0] = p->d_state; *n_dims = 1; break;
    case Q35_SSM_OUT: ne[0] = qwen35_value_dim(p); ne[1] = H; break;
    case Q35_ATTN_Q: ne[0] = H; ne[1] = 2 * qd; break;
    case Q35_ATTN_K: case Q35_ATTN_V: ne[0] = H; ne[1] = kvd; break;
    case Q35_ATTN_OUTPUT: ne[0] = qd; ne[1] = H; break;
    case Q35_ATTN_Q_NORM: case Q35_ATTN_K_NORM: ne[0] = p->head_dim; *n_dims = 1; break;
    default: ne[0] = H; *n_dims = 1; break; /* attn_norm, post_attention_norm, output_norm */
    }
}

static void spec_set(const qwen35_profile *p, qwen35_tensor_spec *s, const char *name, qwen35_role role,
                     qwen35_kind kind, int il) {
    snprintf(s->name, sizeof s->name, "%s", name);
    s->role = role;
    s->kind = kind;
    s->layer = il;
    spec_shape(p, role, s->ne, &s->n_dims);
}

size_t qwen35_manifest(const qwen35_profile *p, qwen35_tensor_spec *out, size_t cap) {
    size_t n = qwen35_manifest_count(p);
    if (cap < n) return 0;
    size_t k = 0;
    if (!p->tied) spec_set(p, &out[k++], "output.weight", Q35_OUTPUT, Q35_KIND_EMBD, -1);
    spec_set(p, &out[k++], "token_embd.weight", Q35_TOKEN_EMBD, Q35_KIND_EMBD, -1);
    /* layers in string order of their HF index: 0, 1, 10, 11, ..., 2, ... */
    uint32_t order[1024];
    uint32_t nl = p->n_layer < 1024 ? p->n_layer : 1024;
    mf_layer_order(order, nl);
    for (uint32_t i = 0; i < nl; i++) {
        const uint32_t il = order[i];
        for (size_t e = 0; e < N_ENTRIES; e++) {
            if (!entry_in(il, &layer_entries[e])) continue;
            char name[48];
            snprintf(name, sizeof name, "blk.%u.%s", il, layer_entries[e].name);
            spec_set(p, &out[k++], name, layer_entries[e].role, layer_entries[e].kind, (int)il);
        }
    }
    spec_set(p, &out[k++], "output_norm.weight", Q35_OUTPUT_NORM, Q35_KIND_VECTOR, -1);
    return k == n ? n : 0;
}

int qwen35_type_allowed(qwen35_kind kind, uint32_t type) { return mf_type_allowed(kind == Q35_KIND_VECTOR, type); }

uint64_t qwen35_param_count(const qwen35_profile *p) {
    size_t n = qwen35_manifest_count(p);
    qwen35_tensor_spec *specs = malloc(n * sizeof *specs);
    if (!specs || !qwen35_manifest(p, specs, n)) {
        free(specs);
        return 0;
    }
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) total += specs[i].ne[0] * specs[i].ne[1];
    free(specs);
    return total;
}

/* ---- metadata validation ---- */

static const char *K(mf_ctx *v, int k) { return qwen35_key(k, v->key, sizeof v->key); }

/* attention.recurrent_layers (optional; the converter writes it from
 * layer_types): one bool per layer, true on the GDN layers. */
static int expect_recurrent(mf_ctx *v, const char *key, const qwen35_profile *p) {
    if (gguf_find_key(v->f, key) < 0) return 0;
    int64_t i = mf_layer_flags(v, key, p->n_layer, "true = Gated DeltaNet layer");
    if (i < 0) return -1;
    for (uint32_t il = 0; il < p->n_layer; il++) {
        int b;
        gguf_kv_arr_bool(v->f, (uint64_t)i, il, &b);
        if (b != !qwen35_layer_is_attn(il)) {
            char d[160];
            snprintf(d, sizeof d, "layer %u is marked %s; gem runs attention on every 4th layer only", il,
                     b ? "recurrent" : "attention");
            return mf_fail(v, key, "%s", d);
        }
    }
    return 0;
}

/* rope.dimension_sections: the MRoPE split of the rotated pairs. For text
 * the three position streams are equal, so the split does not change the
 * rotation; the key must be there (the reference requires it) as 4 ints. */
static int expect_sections(mf_ctx *v, const char *key) {
    int64_t i = mf_need_key(v, key);
    if (i < 0) return -1;
    if (gguf_kv_type(v->f, (uint64_t)i) != GGUF_T_ARRAY || gguf_kv_arr_len(v->f, (uint64_t)i) != 4)
        return mf_fail(v, key, "%s", "must be an array of 4 integers");
    for (uint64_t k = 0; k < 4; k++) {
        int64_t x;
        if (gguf_kv_arr_int(v->f, (uint64_t)i, k, &x))
            return mf_fail(v, key, "%s", "must be an array of 4 integers");
    }
    return 0;
}

/* known besides the Q35K_* keys: the converter may write it */
static const char *const extra_keys[] = {"vocab_size"};

static int check_tokenizer(mf_ctx *v, const qwen35_profile *p) {
    const char *key = "tokenizer.ggml.model";
    int64_t i = mf_need_key(v, key);
    if (i < 0) return -1;
    gguf_str s;
    if (gguf_kv_str(v->f, (uint64_t)i, &s) || !gguf_str_eq(s, "gpt2"))
        return mf_fail(v, key, "%s", "must be 'gpt2' (Qwen's byte-level BPE)");
    key = "tokenizer.ggml.pre";
    if ((i = mf_need_key(v, key)) < 0) return -1;
    if (gguf_kv_str(v->f, (uint64_t)i, &s) || !gguf_str_eq(s, "qwen35"))
        return mf_fail(v, key, "%s", "must be 'qwen35' (the Qwen3.5 pre-tokenizer)");
    key = "tokenizer.ggml.tokens";
    if ((i = mf_string_array(v, key)) < 0) return -1;
    if (gguf_kv_arr_len(v->f, (uint64_t)i) != p->n_vocab) {
        char d[100];
        snprintf(d, sizeof d, "%llu tokens, profile %s needs %u",
                 (unsigned long long)gguf_kv_arr_len(v->f, (uint64_t)i), p->name, p->n_vocab);
        return mf_fail(v, key, "has %s", d);
    }
    return 0;
}

static int identify(mf_ctx *v, const qwen35_profile **out) {
    const char *key = "general.architecture";
    int64_t i = mf_need_key(v, key);
    if (i < 0) return -1;
    gguf_str arch;
    if (gguf_kv_str(v->f, (uint64_t)i, &arch)) return mf_fail(v, key, "%s", "must be a string");
    if (!gguf_str_eq(arch, QWEN35_ARCH)) {
        char d[200];
        snprintf(d, sizeof d, "architecture '%.*s' is not the Qwen3.5 contract's '%s'",
                 (int)(arch.len > 64 ? 64 : arch.len), arch.ptr, QWEN35_ARCH);
        return mf_fail(v, key, "%s", d);
    }
    if (gguf_find_key(v->f, "qwen35.nextn_predict_layers") >= 0)
        return mf_fail(v, "qwen35.nextn_predict_layers", "%s",
                       "the MTP block is not supported yet (convert with --no-mtp)");
    int64_t n_layer, n_embd;
    if (mf_get_int(v, K(v, Q35K_BLOCK_COUNT), &n_layer) || mf_get_int(v, K(v, Q35K_EMBEDDING_LENGTH), &n_embd))
        return -1;
    if ((*out = qwen35_profile_match(n_layer, n_embd))) return 0;
    char names[256] = "";
    for (int k = 0; k < qwen35_profile_count(); k++) mf_list_add(names, sizeof names, profiles[k].name);
    return gem_err_set(v->err, "%s: block_count %lld with embedding_length %lld matches no supported Qwen3.5 profile (%s)",
                       gguf_path(v->f), (long long)n_layer, (long long)n_embd, names);
}

static int check_metadata(mf_ctx *v, const qwen35_profile *p) {
    int64_t ctx;
    if (mf_get_int(v, K(v, Q35K_CONTEXT_LENGTH), &ctx)) return -1;
    if (ctx < 1) return mf_fail(v, v->key, "%s", "must be positive");
    if (mf_expect_int(v, K(v, Q35K_FEED_FORWARD_LENGTH), p->n_ff) ||
        mf_expect_int(v, K(v, Q35K_HEAD_COUNT), p->n_head) ||
        mf_expect_int(v, K(v, Q35K_HEAD_COUNT_KV), p->n_head_kv) ||
        mf_expect_int(v, K(v, Q35K_KEY_LENGTH), p->head_dim) ||
        mf_expect_int(v, K(v, Q35K_VALUE_LENGTH), p->head_dim) ||
        expect_sections(v, K(v, Q35K_ROPE_SECTIONS)) ||
        mf_expect_float(v, K(v, Q35K_ROPE_FREQ_BASE), 1e7, 1e-6) ||
        mf_expect_float(v, K(v, Q35K_RMS_EPS), 1e-6, 1e-6) ||
        mf_expect_int(v, K(v, Q35K_SSM_CONV_KERNEL), QWEN35_CONV_KERNEL) ||
        mf_expect_int(v, K(v, Q35K_SSM_STATE_SIZE), p->d_state) ||
        mf_expect_int(v, K(v, Q35K_SSM_GROUP_COUNT), p->n_k_heads) ||
        mf_expect_int(v, K(v, Q35K_SSM_TIME_STEP_RANK), p->n_v_heads) ||
        mf_expect_int(v, K(v, Q35K_SSM_INNER_SIZE), qwen35_value_dim(p)) ||
        expect_recurrent(v, K(v, Q35K_RECURRENT_LAYERS), p) ||
        mf_expect_int(v, K(v, Q35K_ROPE_DIM), p->n_rot))
        return -1;
    /* the reference defaults the interval to 4 when the key is absent */
    if (gguf_find_key(v->f, K(v, Q35K_FULL_ATTN_INTERVAL)) >= 0 && mf_expect_int(v, v->key, QWEN35_ATTN_INTERVAL))
        return -1;
    if (gguf_find_key(v->f, "qwen35.vocab_size") >= 0 && mf_expect_int(v, "qwen35.vocab_size", p->n_vocab)) return -1;
    if (mf_check_known(v, key_sfx, Q35K_COUNT, extra_keys, 1)) return -1;
    return check_tokenizer(v, p);
}

/* ---- tensor validation ---- */

static const char *spec_name(const void *specs, size_t i) { return ((const qwen35_tensor_spec *)specs)[i].name; }

static int check_tensors(mf_ctx *v, const qwen35_profile *p, const qwen35_tensor_spec *specs, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (mf_check_tensor(v, p->name, specs[i].name, specs[i].n_dims, specs[i].ne, specs[i].kind == Q35_KIND_VECTOR))
            return -1;
    const gguf_tensor *t = mf_extra_tensor(v->f, specs, n, spec_name);
    if (!t) return 0;
    const char *path = gguf_path(v->f);
    if (p->tied && !strcmp(t->name, "output.weight"))
        return gem_err_set(v->err, "%s: unexpected tensor 'output.weight': profile %s ties its head to token_embd",
                           path, p->name);
    return gem_err_set(v->err, "%s: unexpected tensor '%s' (not in the %s manifest)", path, t->name, p->name);
}

int qwen35_validate(const gguf_file *f, const qwen35_profile **out, gem_err *err) {
    mf_ctx v = {f, err, QWEN35_ARCH, ""};
    const qwen35_profile *p;
    if (identify(&v, &p) || check_metadata(&v, p)) return -1;
    size_t n = qwen35_manifest_count(p);
    qwen35_tensor_spec *specs = malloc(n * sizeof *specs);
    if (!specs) return gem_err_set(err, "out of memory");
    qwen35_manifest(p, specs, n);
    int rc = check_tensors(&v, p, specs, n);
    free(specs);
    if (rc) return -1;
    *out = p;
    return 0;
}

/* ---- binding ---- */

qwen35_model *qwen35_bind(const gguf_file *f, gem_err *err) {
    const qwen35_profile *p;
    if (qwen35_validate(f, &p, err)) return NULL;
    qwen35_model *m = calloc(1, sizeof *m);
    size_t n = qwen35_manifest_count(p);
    qwen35_tensor_spec *specs = malloc(n * sizeof *specs);
    if (!m || !specs || !(m->layers = calloc(p->n_layer, sizeof *m->layers))) {
        free(specs);
        qwen35_free(m);
        gem_err_set(err, "out of memory");
        return NULL;
    }
    m->profile = p;
    m->file = f;
    qwen35_manifest(p, specs, n);
    for (size_t i = 0; i < n; i++) {
        const gguf_tensor *t = gguf_find_tensor(f, specs[i].name);
        qwen35_layer *L = specs[i].layer >= 0 ? &m->layers[specs[i].layer] : NULL;
        switch (specs[i].role) {
        case Q35_TOKEN_EMBD: m->token_embd = t; break;
        case Q35_OUTPUT_NORM: m->output_norm = t; break;
        case Q35_OUTPUT: m->output = t; break;
        case Q35_ATTN_NORM: L->attn_norm = t; break;
        case Q35_POST_ATTN_NORM: L->post_attention_norm = t; break;
        case Q35_FFN_GATE: L->ffn_gate = t; break;
        case Q35_FFN_UP: L->ffn_up = t; break;
        case Q35_FFN_DOWN: L->ffn_down = t; break;
        case Q35_SSM_A: L->ssm_a = t; break;
        case Q35_SSM_CONV1D: L->ssm_conv1d = t; break;
        case Q35_SSM_DT: L->ssm_dt = t; break;
        case Q35_SSM_ALPHA: L->ssm_alpha = t; break;
        case Q35_SSM_BETA: L->ssm_beta = t; break;
        case Q35_ATTN_QKV: L->attn_qkv = t; break;
        case Q35_ATTN_GATE: L->attn_gate = t; break;
        case Q35_SSM_NORM: L->ssm_norm = t; break;
        case Q35_SSM_OUT: L->ssm_out = t; break;
        case Q35_ATTN_K_NORM: L->attn_k_norm = t; break;
        case Q35_ATTN_K: L->attn_k = t; break;
        case Q35_ATTN_OUTPUT: L->attn_output = t; break;
        case Q35_ATTN_Q_NORM: L->attn_q_norm = t; break;
        case Q35_ATTN_Q: L->attn_q = t; break;
        case Q35_ATTN_V: L->attn_v = t; break;
        default: break;
        }
    }
    free(specs);
    if (!m->output) m->output = m->token_embd;
    for (uint32_t il = 0; il < p->n_layer; il++) m->layers[il].is_attn = qwen35_layer_is_attn(il);
    return m;
}

void qwen35_free(qwen35_model *m) {
    if (!m) return;
    free(m->layers);
    free(m);
}
