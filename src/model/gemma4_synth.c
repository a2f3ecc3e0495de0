/* Synthetic Gemma 4 writer (see gemma4_synth.h).
 *
 * Tensors are produced in chunks of rows by synth_rows.h, each chunk split
 * across worker threads; per-row seeding makes the split irrelevant to the
 * bytes. */
#include "model/gemma4_synth.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf_write.h"
#include "model/synth_rows.h"
#include "quant/quant.h"
#include "quant/quantize.h"
#include "util/rng.h"

#define CHUNK_BYTES (64u << 20)

uint32_t gemma4_file_type(uint32_t t) {
    switch (t) {
    case QT_F32: return 0;
    case QT_F16: return 1;
    case QT_Q4_0: return 2;
    case QT_Q8_0: return 7;
    case QT_Q4_K: return 14; /* mostly q4_k (llama.cpp's Q4_K_S) */
    case QT_Q5_K: return 16; /* mostly q5_k (Q5_K_S) */
    case QT_Q6_K: return 18;
    case QT_BF16: return 32;
    default: return 0;
    }
}

/* The type of tensor i: vectors f32, the embedding its own, matrices the
 * matrix type; under the q4_k_m mix attn_v (counted over the attn_v
 * tensors in layer order) and ffn_down (counted over the layers) in the
 * "more bits" layers are q6_k. A row that is not whole k-quant blocks is
 * q8_0, the embedding's too (a drafter's 128-wide rows: the reference's
 * tied head falls back to q8_0; its matrices to q5_0, which synth does not
 * draw). */
uint32_t gemma4_synth_type(const gemma4_synth_opts *o, const gemma4_tensor_spec *specs, size_t n, size_t i) {
    const gemma4_tensor_spec *s = &specs[i];
    if (s->kind == G4_KIND_VECTOR) return QT_F32;
    uint32_t t = s->kind == G4_KIND_EMBD ? o->embd_type : o->type;
    if (o->q4_k_m && (s->role == G4_ATTN_V || s->role == G4_FFN_DOWN)) {
        /* counted in layer order (the manifest's is the converter's,
         * blk.1 before blk.10 before blk.2) */
        int at = 0, count = 0;
        for (size_t k = 0; k < n; k++)
            if (specs[k].role == G4_ATTN_V) count++, at += specs[k].layer < s->layer;
        if (s->role == G4_ATTN_V ? quant_more_bits(at, count) : quant_more_bits(s->layer, (int)o->profile->n_layer)) t = QT_Q6_K;
    }
    if (quant_block_size(t) == 256 && s->ne[0] % 256) t = QT_Q8_0;
    return t;
}

/* ---- deterministic randomness ---- */

static sr_stream row_rng(uint64_t seed, uint64_t tensor, uint64_t row) {
    sr_stream r = {rng_mix64(seed ^ rng_mix64(tensor * 0x100000001b3ull + 1) ^ rng_mix64(row + 0x51ed27ull))};
    return r;
}

/* ---- row generators ---- */

typedef struct {
    const gemma4_tensor_spec *spec;
    uint32_t type;
    uint64_t seed;
    uint64_t index;    /* tensor index in the manifest */
    uint64_t row_bytes;
} gen_tensor;

/* Target standard deviation of matrix entries: rows of norm ~1 keep
 * activations of order one through every projection. */
static float entry_std(const gemma4_tensor_spec *s) { return 1.0f / sqrtf((float)s->ne[0]); }

static void gen_vector(const gen_tensor *g, sr_stream *r, float *out) {
    const gemma4_tensor_spec *s = g->spec;
    for (uint64_t i = 0; i < s->ne[0]; i++) {
        switch (s->role) {
        case G4_ROPE_FREQS: /* proportional RoPE: 64 rotated pairs, the rest frozen */
            out[i] = i < GEMMA4_ROT_DIM_FULL / 2 ? 1.0f : 1e30f;
            break;
        case G4_LAYER_OUT_SCALE: out[i] = 0.65f + 0.35f * sr_sym(r); break;
        case G4_ATTN_Q_NORM:
        case G4_ATTN_K_NORM:
            /* d^(-1/4) each keeps attention scores q.k of order one (scale is
             * 1.0): a softmax that is not a hard argmax, as in trained models */
            out[i] = (1.0f + 0.25f * sr_sym(r)) / sqrtf(sqrtf((float)s->ne[0]));
            break;
        default: out[i] = 1.0f + 0.25f * sr_sym(r); break;
        }
    }
}

static void gen_row(const gen_tensor *g, uint64_t row, uint8_t *out) {
    const gemma4_tensor_spec *s = g->spec;
    sr_stream r = row_rng(g->seed, g->index, row);
    const uint64_t n = s->ne[0];
    const float std = entry_std(s);
    const float a = std * 1.7320508f; /* uniform [-a, a] has this std */
    switch (g->type) {
    case QT_F32:
        if (s->kind == G4_KIND_VECTOR) {
            gen_vector(g, &r, (float *)out);
        } else {
            for (uint64_t i = 0; i < n; i++) {
                float v = a * sr_sym(&r);
                memcpy(out + 4 * i, &v, 4);
            }
        }
        break;
    case QT_F16:
        for (uint64_t i = 0; i < n; i++) quant_put_f16(out + 2 * i, a * sr_sym(&r));
        break;
    case QT_BF16:
        for (uint64_t i = 0; i < n; i++) {
            uint16_t h = quant_f32_to_bf16(a * sr_sym(&r));
            memcpy(out + 2 * i, &h, 2);
        }
        break;
    default: /* quantized: random blocks */
        sr_quant_blocks(g->type, n, std, &r, out);
        break;
    }
}

/* synth_rows' fill: rows [row0, row0 + n), each from its own seed */
static int fill_rows(const void *ctx, uint64_t row0, uint64_t n, uint8_t *out) {
    const gen_tensor *g = ctx;
    for (uint64_t r = 0; r < n; r++) gen_row(g, row0 + r, out + r * g->row_bytes);
    return 0;
}

/* ---- metadata ---- */

static int write_meta(gguf_writer *w, const gemma4_synth_opts *o, const gguf_file *vocab, gem_err *err) {
    const gemma4_profile *p = o->profile;
    char name[128];
    snprintf(name, sizeof name, "gem synth %s %s seed %llu", p->name, o->q4_k_m ? "q4_k_m" : quant_type_name(o->type),
             (unsigned long long)o->seed);
    int32_t kv_heads[256];
    uint8_t swa[256];
    for (uint32_t il = 0; il < p->n_layer; il++) {
        kv_heads[il] = (int32_t)(gemma4_layer_is_full(p, il) ? p->n_head_kv_full : p->n_head_kv_swa);
        swa[il] = !gemma4_layer_is_full(p, il);
    }
    /* Key order and types follow the reference converter's output (as seen
     * in the vocabulary GGUF it wrote): general.*, the architecture keys in
     * the order set_gguf_parameters adds them, then the tokenizer. A
     * drafter has no soft-cap key (its config has none), every layer reads
     * shared caches, and the assistant converter appends its two keys. */
    const char *arch = gemma4_arch(p);
    const int asst = gemma4_is_assistant(p);
    char k[G4K_COUNT][96];
    for (int i = 0; i < G4K_COUNT; i++) gemma4_key(arch, i, k[i], sizeof k[i]);
    if (gguf_w_str(w, "general.architecture", arch, err) ||
        gguf_w_str(w, "general.type", "model", err) ||
        gguf_w_str(w, "general.name", name, err) ||
        gguf_w_u32(w, k[0], p->n_layer, err) ||
        gguf_w_u32(w, k[1], o->n_ctx_train ? o->n_ctx_train : p->n_ctx_train, err) ||
        gguf_w_u32(w, k[2], p->n_embd, err) ||
        gguf_w_u32(w, k[3], p->n_ff, err) ||
        gguf_w_u32(w, k[4], p->n_head, err) ||
        gguf_w_arr(w, k[5], GGUF_T_INT32, kv_heads, p->n_layer, err) ||
        gguf_w_f32(w, k[6], 1e6f, err) ||
        gguf_w_f32(w, k[7], 1e4f, err) ||
        gguf_w_f32(w, k[8], 1e-6f, err) ||
        gguf_w_u32(w, k[9], GEMMA4_HEAD_DIM_FULL, err) ||
        gguf_w_u32(w, k[10], GEMMA4_HEAD_DIM_FULL, err) ||
        gguf_w_u32(w, "general.file_type", o->q4_k_m ? 15 : gemma4_file_type(o->type), err) ||
        (!asst && gguf_w_f32(w, k[11], 30.0f, err)) ||
        gguf_w_u32(w, k[12], p->window, err) ||
        gguf_w_u32(w, k[13], asst ? p->n_layer : 0, err) ||
        gguf_w_u32(w, k[14], 0, err) ||
        gguf_w_arr(w, k[15], GGUF_T_BOOL, swa, p->n_layer, err) ||
        gguf_w_u32(w, k[16], GEMMA4_HEAD_DIM_SWA, err) ||
        gguf_w_u32(w, k[17], GEMMA4_HEAD_DIM_SWA, err) ||
        gguf_w_u32(w, k[18], GEMMA4_HEAD_DIM_FULL, err) ||
        gguf_w_u32(w, k[19], GEMMA4_HEAD_DIM_SWA, err) ||
        (asst && (gguf_w_u32(w, k[20], p->n_embd_out, err) || gguf_w_u32(w, k[21], p->n_layer, err))) ||
        gguf_w_u32(w, "general.quantization_version", 2, err))
        return -1;
    int copied = 0;
    for (uint64_t i = 0; i < gguf_kv_count(vocab); i++) {
        if (strncmp(gguf_kv_key(vocab, i), "tokenizer.", 10)) continue;
        if (gguf_w_copy_kv(w, vocab, i, err)) return -1;
        copied++;
    }
    if (!copied) return gem_err_set(err, "%s: no tokenizer keys to copy", gguf_path(vocab));
    return 0;
}

static int check_vocab(const gguf_file *vocab, gem_err *err) {
    int64_t i = gguf_find_key(vocab, "tokenizer.ggml.model");
    gguf_str s;
    if (i < 0 || gguf_kv_str(vocab, (uint64_t)i, &s) || !gguf_str_eq(s, "gemma4"))
        return gem_err_set(err, "%s: not a Gemma 4 vocabulary (tokenizer.ggml.model is not 'gemma4')", gguf_path(vocab));
    i = gguf_find_key(vocab, "tokenizer.ggml.tokens");
    if (i < 0 || gguf_kv_arr_len(vocab, (uint64_t)i) != GEMMA4_N_VOCAB)
        return gem_err_set(err, "%s: vocabulary does not have %u tokens", gguf_path(vocab), GEMMA4_N_VOCAB);
    return 0;
}

int gemma4_synth(const gemma4_synth_opts *o, gem_err *err) {
    const gemma4_profile *p = o->profile;
    /* synth draws blocks of these types only (the contract accepts more) */
    const uint32_t mt = o->type;
    if (mt != QT_Q4_0 && mt != QT_Q8_0 && mt != QT_Q4_K && mt != QT_Q5_K && mt != QT_Q6_K && mt != QT_F16 &&
        mt != QT_BF16 && mt != QT_F32)
        return gem_err_set(err, "synth: matrix type %s is not allowed (q4_0, q8_0, q4_k, q5_k, q6_k, f16, bf16, f32)",
                           quant_type_name(o->type) ? quant_type_name(o->type) : "?");
    if (o->q4_k_m && mt != QT_Q4_K) return gem_err_set(err, "synth: the q4_k_m mix needs q4_k matrices");
    if (!gemma4_type_allowed(G4_KIND_EMBD, o->embd_type) ||
        (o->embd_type != QT_Q8_0 && o->embd_type != QT_Q6_K && o->embd_type != QT_Q4_0 && o->embd_type != o->type))
        return gem_err_set(err, "synth: embedding type %s is not allowed (q8_0, q6_k, q4_0, or the matrix type)",
                           quant_type_name(o->embd_type) ? quant_type_name(o->embd_type) : "?");
    gguf_file *vocab = gguf_open(o->vocab_path, err);
    if (!vocab) return -1;
    if (check_vocab(vocab, err)) {
        gguf_close(vocab);
        return -1;
    }
    size_t n = gemma4_manifest_count(p);
    gemma4_tensor_spec *specs = malloc(n * sizeof *specs);
    gguf_writer *w = gguf_writer_new(GGUF_DEFAULT_ALIGNMENT);
    sr_out so = {0};
    int rc = -1;
    if (!specs || !w) {
        gem_err_set(err, "out of memory");
        goto done;
    }
    gemma4_manifest(p, specs, n);
    if (write_meta(w, o, vocab, err)) goto done;
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        const uint32_t t = gemma4_synth_type(o, specs, n, i);
        if (gguf_w_tensor(w, specs[i].name, t, specs[i].n_dims, specs[i].ne, err)) goto done;
        total += gguf_w_tensor_bytes(w, i);
    }
    if (sr_begin(&so, w, o->out_path, CHUNK_BYTES, o->threads, total, o->progress, o->progress_ctx, err)) goto done;
    for (size_t i = 0; i < n; i++) {
        const gemma4_tensor_spec *s = &specs[i];
        const uint32_t t = gemma4_synth_type(o, specs, n, i);
        gen_tensor g = {s, t, o->seed, i, 0};
        quant_row_bytes(t, (int64_t)s->ne[0], &g.row_bytes);
        const sr_tensor st = {s->name, s->n_dims == 1 ? 1 : s->ne[1], g.row_bytes, fill_rows, &g};
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
