/* Synthetic Qwen3.5 writer (see qwen35_synth.h). */
#include "model/qwen35_synth.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/synth_rows.h"
#include "quant/quant.h"
#include "quant/quantize.h"
#include "util/rng.h"

#define CHUNK_BYTES (32u << 20)

/* llama.cpp's general.file_type for a matrix type */
static uint32_t file_type(uint32_t t) {
    switch (t) {
    case QT_F16: return 1;
    case QT_Q4_0: return 2;
    case QT_Q8_0: return 7;
    case QT_Q5_0: return 8;
    case QT_Q5_1: return 9;
    case QT_Q4_K: return 15;
    case QT_Q5_K: return 17;
    case QT_Q6_K: return 18;
    case QT_BF16: return 32;
    default: return 0;
    }
}

int qwen35_write_arch_keys(gguf_writer *w, const qwen35_profile *p, uint32_t n_ctx, uint32_t ftype,
                           const int32_t *sec, gem_err *err) {
    char k[Q35K_COUNT][80];
    for (int i = 0; i < Q35K_COUNT; i++) qwen35_key(i, k[i], sizeof k[i]);
    /* the converter's default mrope_section, padded to 4 */
    const int32_t dflt[4] = {11, 11, 10, 0};
    const int32_t *sections = sec ? sec : dflt;
    uint8_t recurrent[1024];
    for (uint32_t il = 0; il < p->n_layer && il < 1024; il++) recurrent[il] = !qwen35_layer_is_attn(il);
    if (gguf_w_u32(w, k[Q35K_BLOCK_COUNT], p->n_layer, err) || gguf_w_u32(w, k[Q35K_CONTEXT_LENGTH], n_ctx, err) ||
        gguf_w_u32(w, k[Q35K_EMBEDDING_LENGTH], p->n_embd, err) ||
        gguf_w_u32(w, k[Q35K_FEED_FORWARD_LENGTH], p->n_ff, err) ||
        gguf_w_u32(w, k[Q35K_HEAD_COUNT], p->n_head, err) || gguf_w_u32(w, k[Q35K_HEAD_COUNT_KV], p->n_head_kv, err) ||
        gguf_w_arr(w, k[Q35K_ROPE_SECTIONS], GGUF_T_INT32, sections, 4, err) ||
        gguf_w_f32(w, k[Q35K_ROPE_FREQ_BASE], 1e7f, err) || gguf_w_f32(w, k[Q35K_RMS_EPS], 1e-6f, err) ||
        gguf_w_u32(w, k[Q35K_KEY_LENGTH], p->head_dim, err) || gguf_w_u32(w, k[Q35K_VALUE_LENGTH], p->head_dim, err) ||
        gguf_w_u32(w, "general.file_type", ftype, err) ||
        gguf_w_u32(w, k[Q35K_SSM_CONV_KERNEL], QWEN35_CONV_KERNEL, err) ||
        gguf_w_u32(w, k[Q35K_SSM_STATE_SIZE], p->d_state, err) ||
        gguf_w_u32(w, k[Q35K_SSM_GROUP_COUNT], p->n_k_heads, err) ||
        gguf_w_u32(w, k[Q35K_SSM_TIME_STEP_RANK], p->n_v_heads, err) ||
        gguf_w_u32(w, k[Q35K_SSM_INNER_SIZE], qwen35_value_dim(p), err) ||
        gguf_w_arr(w, k[Q35K_RECURRENT_LAYERS], GGUF_T_BOOL, recurrent, p->n_layer, err) ||
        gguf_w_u32(w, k[Q35K_FULL_ATTN_INTERVAL], QWEN35_ATTN_INTERVAL, err) ||
        gguf_w_u32(w, k[Q35K_ROPE_DIM], p->n_rot, err))
        return -1;
    return 0;
}

/* ---- vocabulary ---- */

typedef struct {
    const char *s;
    size_t n;
} sv;

static int sv_cmp(const void *a, const void *b) {
    const sv *x = a, *y = b;
    size_t n = x->n < y->n ? x->n : y->n;
    int c = memcmp(x->s, y->s, n);
    return c ? c : (x->n > y->n) - (x->n < y->n);
}

static int sv_has(const sv *set, size_t n, const char *s, size_t len) {
    sv key = {s, len};
    return bsearch(&key, set, n, sizeof *set, sv_cmp) != NULL;
}

int qwen35_write_vocab(gguf_writer *w, const gguf_file *vocab, uint32_t n_vocab, gem_err *err) {
    int64_t it = gguf_find_key(vocab, "tokenizer.ggml.tokens"), ity = gguf_find_key(vocab, "tokenizer.ggml.token_type");
    int64_t im = gguf_find_key(vocab, "tokenizer.ggml.merges"), ip = gguf_find_key(vocab, "tokenizer.ggml.pre");
    gguf_str pre;
    if (it < 0 || ity < 0 || ip < 0 || gguf_kv_str(vocab, (uint64_t)ip, &pre) || !gguf_str_eq(pre, "qwen35"))
        return gem_err_set(err, "%s: not a Qwen3.5 vocabulary (tokenizer.ggml.pre 'qwen35' with tokens and types)",
                           gguf_path(vocab));
    const uint64_t have = gguf_kv_arr_len(vocab, (uint64_t)it);
    char **tok = calloc(n_vocab, sizeof *tok);
    int32_t *types = malloc((size_t)n_vocab * sizeof *types);
    sv *set = malloc((size_t)n_vocab * sizeof *set);
    char **merges = NULL;
    uint64_t n_merges = 0;
    int rc = -1;
    if (!tok || !types || !set) {
        gem_err_set(err, "out of memory");
        goto done;
    }
    for (uint32_t i = 0; i < n_vocab; i++) {
        gguf_str s = {0};
        int64_t ty = 5; /* UNUSED, the converter's type for padding */
        if (i < have) {
            gguf_kv_arr_str(vocab, (uint64_t)it, i, &s);
            gguf_kv_arr_int(vocab, (uint64_t)ity, i, &ty);
            tok[i] = malloc(s.len + 1);
            if (tok[i]) {
                memcpy(tok[i], s.ptr, s.len);
                tok[i][s.len] = 0;
            }
        } else {
            tok[i] = malloc(24);
            if (tok[i]) snprintf(tok[i], 24, "[PAD%u]", i);
        }
        if (!tok[i]) {
            gem_err_set(err, "out of memory");
            goto done;
        }
        types[i] = (int32_t)ty;
        set[i] = (sv){tok[i], strlen(tok[i])};
    }
    qsort(set, n_vocab, sizeof *set, sv_cmp);
    if (im >= 0) {
        const uint64_t nm = gguf_kv_arr_len(vocab, (uint64_t)im);
        merges = malloc((nm ? nm : 1) * sizeof *merges);
        if (!merges) {
            gem_err_set(err, "out of memory");
            goto done;
        }
        char buf[1024];
        for (uint64_t i = 0; i < nm; i++) {
            gguf_str s;
            if (gguf_kv_arr_str(vocab, (uint64_t)im, i, &s) || s.len >= sizeof buf) continue;
            /* a merge "a b" stays when a, b and ab are all kept tokens */
            if (n_vocab < have) {
                const char *sp = memchr(s.ptr, ' ', s.len);
                if (!sp) continue;
                size_t la = (size_t)(sp - s.ptr), lb = s.len - la - 1;
                memcpy(buf, s.ptr, la);
                memcpy(buf + la, sp + 1, lb);
                if (!sv_has(set, n_vocab, s.ptr, la) || !sv_has(set, n_vocab, sp + 1, lb) ||
                    !sv_has(set, n_vocab, buf, la + lb))
                    continue;
            }
            char *m = malloc(s.len + 1);
            if (!m) {
                gem_err_set(err, "out of memory");
                goto done;
            }
            memcpy(m, s.ptr, s.len);
            m[s.len] = 0;
            merges[n_merges++] = m;
        }
    }
    for (uint64_t i = 0; i < gguf_kv_count(vocab); i++) {
        const char *key = gguf_kv_key(vocab, i);
        if (strncmp(key, "tokenizer.", 10)) continue;
        int r = 0;
        if (!strcmp(key, "tokenizer.ggml.tokens"))
            r = gguf_w_arr_str(w, key, (const char *const *)tok, n_vocab, err);
        else if (!strcmp(key, "tokenizer.ggml.token_type"))
            r = gguf_w_arr(w, key, GGUF_T_INT32, types, n_vocab, err);
        else if (!strcmp(key, "tokenizer.ggml.merges"))
            r = gguf_w_arr_str(w, key, (const char *const *)merges, n_merges, err);
        else {
            int64_t id;
            /* a special id beyond a test vocabulary names no token */
            if (!strncmp(key, "tokenizer.ggml.", 15) && strstr(key, "_token_id") &&
                !gguf_kv_int(vocab, i, &id) && (id < 0 || id >= (int64_t)n_vocab))
                continue;
            r = gguf_w_copy_kv(w, vocab, i, err);
        }
        if (r) goto done;
    }
    rc = 0;
done:
    if (tok)
        for (uint32_t i = 0; i < n_vocab; i++) free(tok[i]);
    for (uint64_t i = 0; i < n_merges; i++) free(merges[i]);
    free(merges);
    free(tok);
    free(types);
    free(set);
    return rc;
}

/* ---- weights ---- */

typedef struct {
    const qwen35_tensor_spec *spec;
    uint32_t type;
    uint64_t seed, index, row_bytes;
} gen_tensor;

static sr_stream row_rng(const gen_tensor *g, uint64_t row) {
    sr_stream r = {rng_mix64(g->seed ^ rng_mix64(g->index * 0x100000001b3ull + 7) ^ rng_mix64(row + 0x9e37ull))};
    return r;
}

static void gen_floats(const gen_tensor *g, uint64_t row, float *out) {
    const qwen35_tensor_spec *s = g->spec;
    sr_stream r = row_rng(g, row);
    const uint64_t n = s->ne[0];
    const float a = 1.7320508f / sqrtf((float)n); /* rows of norm about 1 */
    for (uint64_t i = 0; i < n; i++) {
        const float u = sr_sym(&r);
        switch (s->role) {
        case Q35_SSM_A: out[i] = -0.55f + 0.45f * u; break;  /* [-1, -0.1] */
        case Q35_SSM_DT: out[i] = -0.5f + 0.5f * u; break;   /* [-1, 0] */
        case Q35_SSM_CONV1D: out[i] = 0.5f * u; break;       /* 4 taps */
        case Q35_ATTN_NORM: case Q35_POST_ATTN_NORM: case Q35_OUTPUT_NORM: case Q35_SSM_NORM:
        case Q35_ATTN_Q_NORM: case Q35_ATTN_K_NORM:
            out[i] = 1.0f + 0.25f * u;
            break;
        default: out[i] = a * u; break;
        }
    }
}

/* synth_rows' fill: rows [row0, row0 + n), each from its own seed,
 * quantized from floats; k-quant matrices drawn as random blocks
 * (sr_quant_blocks: quantizing a 27B's rows to k-quants took minutes).
 * Only gen_floats' plain entries can be k-quants: the tensors with their
 * own value ranges (ssm_a, dt, the conv, the norms) are vectors, f32. */
static int fill_rows(const void *ctx, uint64_t row0, uint64_t n, uint8_t *out) {
    const gen_tensor *g = ctx;
    if (quant_block_size(g->type) == 256) {
        for (uint64_t r = 0; r < n; r++) {
            sr_stream st = row_rng(g, row0 + r);
            if (sr_quant_blocks(g->type, g->spec->ne[0], 1.0f / sqrtf((float)g->spec->ne[0]), &st, out + r * g->row_bytes))
                return -1;
        }
        return 0;
    }
    float *f = malloc(g->spec->ne[0] * sizeof *f);
    if (!f) return -1;
    int rc = 0;
    for (uint64_t r = 0; r < n; r++) {
        uint8_t *dst = out + r * g->row_bytes;
        gen_floats(g, row0 + r, f);
        if (g->type == QT_F32) memcpy(dst, f, g->spec->ne[0] * 4);
        else if (quant_quantize_row(g->type, f, dst, (int64_t)g->spec->ne[0])) rc = -1;
    }
    free(f);
    return rc;
}

uint32_t qwen35_synth_type(const qwen35_synth_opts *o, const qwen35_tensor_spec *s) {
    if (s->kind == Q35_KIND_VECTOR) return QT_F32;
    uint32_t t = s->kind == Q35_KIND_EMBD ? o->embd_type : o->type;
    if (o->q4_k_m) {
        /* one attn_v-like tensor per layer (attn_qkv or attn_v), so the
         * reference's count over them is the layer index */
        const int n = (int)o->profile->n_layer;
        if (s->role == Q35_OUTPUT) t = QT_Q6_K;
        else if ((s->role == Q35_ATTN_QKV || s->role == Q35_ATTN_V || s->role == Q35_FFN_DOWN) && quant_more_bits(s->layer, n))
            t = QT_Q6_K;
        if (s->ne[0] % quant_block_size(t)) t = t == QT_Q4_K ? QT_Q5_0 : t == QT_Q6_K ? QT_Q8_0 : t;
    }
    /* a row that is not whole blocks of the type is written as the
     * quantize tool would fall back: q8_0 (blocks of 32) */
    if (s->ne[0] % quant_block_size(t)) t = QT_Q8_0;
    return t;
}

int qwen35_synth(const qwen35_synth_opts *o, gem_err *err) {
    const qwen35_profile *p = o->profile;
    if (!quant_can_quantize(o->type) && o->type != QT_F32)
        return gem_err_set(err, "synth: matrix type %s cannot be written",
                           quant_type_name(o->type) ? quant_type_name(o->type) : "?");
    if (!quant_can_quantize(o->embd_type) && o->embd_type != QT_F32)
        return gem_err_set(err, "synth: embedding type %s cannot be written",
                           quant_type_name(o->embd_type) ? quant_type_name(o->embd_type) : "?");
    if (o->q4_k_m && o->type != QT_Q4_K) return gem_err_set(err, "synth: the q4_k_m mix needs q4_k matrices");
    if (!qwen35_type_allowed(Q35_KIND_MATRIX, o->type) || !qwen35_type_allowed(Q35_KIND_EMBD, o->embd_type))
        return gem_err_set(err, "synth: the qwen35 contract does not take matrices of %s",
                           quant_type_name(o->type) ? quant_type_name(o->type) : "?");
    gguf_file *vocab = gguf_open(o->vocab_path, err);
    if (!vocab) return -1;
    size_t n = qwen35_manifest_count(p);
    qwen35_tensor_spec *specs = malloc(n * sizeof *specs);
    gguf_writer *w = gguf_writer_new(GGUF_DEFAULT_ALIGNMENT);
    sr_out so = {0};
    int rc = -1;
    if (!specs || !w) {
        gem_err_set(err, "out of memory");
        goto done;
    }
    qwen35_manifest(p, specs, n);
    char name[128];
    snprintf(name, sizeof name, "gem synth %s %s seed %llu", p->name, o->q4_k_m ? "q4_k_m" : quant_type_name(o->type),
             (unsigned long long)o->seed);
    if (gguf_w_str(w, "general.architecture", QWEN35_ARCH, err) || gguf_w_str(w, "general.type", "model", err) ||
        gguf_w_str(w, "general.name", name, err) ||
        qwen35_write_arch_keys(w, p, o->n_ctx_train ? o->n_ctx_train : p->n_ctx_train, o->q4_k_m ? 15 : file_type(o->type),
                               NULL, err) ||
        gguf_w_u32(w, "general.quantization_version", 2, err) || qwen35_write_vocab(w, vocab, p->n_vocab, err))
        goto done;
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (gguf_w_tensor(w, specs[i].name, qwen35_synth_type(o, &specs[i]), specs[i].n_dims, specs[i].ne, err)) goto done;
        total += gguf_w_tensor_bytes(w, i);
    }
    if (sr_begin(&so, w, o->out_path, CHUNK_BYTES, o->threads, total, o->progress, o->progress_ctx, err)) goto done;
    for (size_t i = 0; i < n; i++) {
        gen_tensor g = {&specs[i], qwen35_synth_type(o, &specs[i]), o->seed, i, 0};
        quant_row_bytes(g.type, (int64_t)specs[i].ne[0], &g.row_bytes);
        const sr_tensor st = {specs[i].name, specs[i].n_dims == 1 ? 1 : specs[i].ne[1], g.row_bytes, fill_rows, &g};
        if (sr_write(&so, &st, err)) goto done;
    }
    rc = 0;
done:
    rc = sr_end(&so, rc, err);
    free(specs);
    gguf_writer_free(w);
    gguf_close(vocab);
    return rc;
}
