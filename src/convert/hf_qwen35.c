/* Qwen3.5 HF -> GGUF (see hf_qwen35.h).
 *
 * Every output row is produced from its source row(s) on the fly (a row
 * permutation for the V-head reorder, a column permutation for out_proj,
 * the +1 or -exp transforms), so a tensor is never held whole: memory stays
 * one chunk of rows whatever the model size. */
#include "convert/hf_qwen35.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert/hf_out.h"
#include "convert/hf_tok.h"
#include "convert/safetensors.h"
#include "gguf/gguf.h"
#include "gguf/gguf_write.h"
#include "model/qwen35.h"
#include "model/qwen35_synth.h"
#include "quant/quant.h"
#include "util/file.h"

#define MAX_SHARDS 256
#define CHUNK_FLOATS (4u << 20)

int hf_is_qwen35(const json *cfg) {
    const json *arch = json_get(cfg, "architectures");
    const json *a0 = arch && arch->type == JSON_ARRAY && arch->len ? arch->items[0] : NULL;
    return a0 && a0->type == JSON_STRING &&
           (!strcmp(a0->str, "Qwen3_5ForConditionalGeneration") || !strcmp(a0->str, "Qwen3_5ForCausalLM"));
}

/* text_config over the top level, as the reference merges them */
static const json *hp(const json *cfg, const char *key) {
    const json *tc = json_get(cfg, "text_config");
    const json *v = tc && tc->type == JSON_OBJECT ? json_get(tc, key) : NULL;
    return v ? v : json_get(cfg, key);
}

static int hp_u32(const json *cfg, const char *dir, const char *key, uint32_t *out, gem_err *err) {
    const json *v = hp(cfg, key);
    if (!v || v->type != JSON_NUMBER || !v->is_int || v->num < 0 || v->num > 4294967295.0)
        return gem_err_set(err, "%s/config.json: missing or bad integer '%s'", dir, key);
    *out = (uint32_t)v->num;
    return 0;
}

/* a rope parameter: in rope_parameters (transformers 5) or at the top */
static double rope_param(const json *cfg, const char *key, double dflt) {
    const json *rp = hp(cfg, "rope_parameters");
    const json *v = rp && rp->type == JSON_OBJECT ? json_get(rp, key) : NULL;
    if (!v) v = hp(cfg, key);
    return v && v->type == JSON_NUMBER ? v->num : dflt;
}

/* What a source tensor becomes. */
typedef enum { X_PLAIN, X_NORM1, X_NEG_EXP, X_QKV, X_VROWS, X_VROWS1, X_VCOLS, X_CONV } xform;

typedef struct {
    const st_tensor *t;
    char gguf[48];
    xform x;
    uint32_t type;
    uint32_t n_dims;
    uint64_t ne0, rows; /* GGUF shape */
} entry;

typedef struct {
    const qwen35_profile *p;
    uint32_t r; /* V heads per QK head */
} perm;

/* Tiled position q holds grouped head (q % n_k) * r + q / n_k. */
static uint32_t v_src(const perm *pm, uint32_t q) { return (q % pm->p->n_k_heads) * pm->r + q / pm->p->n_k_heads; }

static float elem(const st_tensor *t, uint64_t i) {
    const uint8_t *p = (const uint8_t *)t->data + i * st_dtype_size(t->dtype);
    uint16_t h;
    float f;
    switch (t->dtype) {
    case ST_F32: memcpy(&f, p, 4); return f;
    case ST_F16: return quant_get_f16(p);
    default: memcpy(&h, p, 2); return quant_bf16_to_f32(h);
    }
}

/* GGUF row r of e as floats (ne0 of them). */
static void get_row(const entry *e, const perm *pm, uint64_t r, float *out) {
    const uint32_t dv = pm->p->d_state, kd2 = 2 * qwen35_key_dim(pm->p);
    uint64_t src = r;
    switch (e->x) {
    case X_QKV: case X_CONV:
        if (r >= kd2) src = kd2 + (uint64_t)v_src(pm, (uint32_t)((r - kd2) / dv)) * dv + (r - kd2) % dv;
        break;
    case X_VROWS: src = (uint64_t)v_src(pm, (uint32_t)(r / dv)) * dv + r % dv; break;
    case X_VROWS1: src = v_src(pm, (uint32_t)r); break;
    default: break;
    }
    for (uint64_t c = 0; c < e->ne0; c++) {
        uint64_t sc = c;
        if (e->x == X_VCOLS) sc = (uint64_t)v_src(pm, (uint32_t)(c / dv)) * dv + c % dv;
        if (e->n_dims == 1 && (e->x == X_NEG_EXP || e->x == X_VROWS1)) { /* 1-D per-V-head vectors */
            float v = elem(e->t, v_src(pm, (uint32_t)c));
            out[c] = e->x == X_NEG_EXP ? -expf(v) : v;
            continue;
        }
        float v = elem(e->t, src * e->ne0 + sc);
        if (e->x == X_NORM1) v += 1.0f;
        out[c] = v;
    }
}

/* Maps an HF name to its GGUF name and transform; 0 when dropped, -1 when
 * unknown. */
static int map_name(const char *n, uint32_t n_layer, char *out, xform *x) {
    static const char *const pre[] = {"model.language_model.", "model."};
    const char *s = NULL;
    if (!strncmp(n, "model.visual.", 13) || !strncmp(n, "mtp.", 4) || !strncmp(n, "model.mtp.", 10)) return 0;
    if (!strcmp(n, "lm_head.weight")) {
        snprintf(out, 48, "output.weight");
        *x = X_PLAIN;
        return 1;
    }
    for (int i = 0; i < 2 && !s; i++)
        if (!strncmp(n, pre[i], strlen(pre[i]))) s = n + strlen(pre[i]);
    if (!s) return -1;
    if (!strcmp(s, "embed_tokens.weight")) return snprintf(out, 48, "token_embd.weight"), *x = X_PLAIN, 1;
    if (!strcmp(s, "norm.weight")) return snprintf(out, 48, "output_norm.weight"), *x = X_NORM1, 1;
    unsigned il;
    int used = 0;
    if (sscanf(s, "layers.%u.%n", &il, &used) != 1 || !used || il >= n_layer) return -1;
    const char *t = s + used;
    static const struct {
        const char *hf, *gguf;
        xform x;
    } map[] = {
        {"input_layernorm.weight", "attn_norm.weight", X_NORM1},
        {"post_attention_layernorm.weight", "post_attention_norm.weight", X_NORM1},
        {"mlp.gate_proj.weight", "ffn_gate.weight", X_PLAIN},
        {"mlp.up_proj.weight", "ffn_up.weight", X_PLAIN},
        {"mlp.down_proj.weight", "ffn_down.weight", X_PLAIN},
        {"linear_attn.A_log", "ssm_a", X_NEG_EXP},
        {"linear_attn.conv1d.weight", "ssm_conv1d.weight", X_CONV},
        {"linear_attn.dt_bias", "ssm_dt.bias", X_VROWS1},
        {"linear_attn.in_proj_a.weight", "ssm_alpha.weight", X_VROWS1},
        {"linear_attn.in_proj_b.weight", "ssm_beta.weight", X_VROWS1},
        {"linear_attn.in_proj_qkv.weight", "attn_qkv.weight", X_QKV},
        {"linear_attn.in_proj_z.weight", "attn_gate.weight", X_VROWS},
        {"linear_attn.norm.weight", "ssm_norm.weight", X_PLAIN}, /* the one norm stored as used */
        {"linear_attn.out_proj.weight", "ssm_out.weight", X_VCOLS},
        {"self_attn.q_proj.weight", "attn_q.weight", X_PLAIN},
        {"self_attn.k_proj.weight", "attn_k.weight", X_PLAIN},
        {"self_attn.v_proj.weight", "attn_v.weight", X_PLAIN},
        {"self_attn.o_proj.weight", "attn_output.weight", X_PLAIN},
        {"self_attn.q_norm.weight", "attn_q_norm.weight", X_NORM1},
        {"self_attn.k_norm.weight", "attn_k_norm.weight", X_NORM1},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (!strcmp(t, map[i].hf)) {
            snprintf(out, 48, "blk.%u.%s", il, map[i].gguf);
            *x = map[i].x;
            return 1;
        }
    return -1;
}

/* the config's shape against the profile, naming the first difference */
static const qwen35_profile *read_profile(const json *cfg, const char *dir, gem_err *err) {
    uint32_t nl, H, F, nh, nkv, hd, dk, dv, nk, nv, kern, V;
    if (hp_u32(cfg, dir, "num_hidden_layers", &nl, err) || hp_u32(cfg, dir, "hidden_size", &H, err) ||
        hp_u32(cfg, dir, "intermediate_size", &F, err) || hp_u32(cfg, dir, "num_attention_heads", &nh, err) ||
        hp_u32(cfg, dir, "num_key_value_heads", &nkv, err) || hp_u32(cfg, dir, "head_dim", &hd, err) ||
        hp_u32(cfg, dir, "linear_key_head_dim", &dk, err) || hp_u32(cfg, dir, "linear_value_head_dim", &dv, err) ||
        hp_u32(cfg, dir, "linear_num_key_heads", &nk, err) || hp_u32(cfg, dir, "linear_num_value_heads", &nv, err) ||
        hp_u32(cfg, dir, "linear_conv_kernel_dim", &kern, err) || hp_u32(cfg, dir, "vocab_size", &V, err))
        return NULL;
    const qwen35_profile *p = qwen35_profile_match(nl, H);
    if (!p) {
        gem_err_set(err, "%s/config.json: %u layers of width %u match no supported Qwen3.5 profile", dir, nl, H);
        return NULL;
    }
    const double rot = rope_param(cfg, "partial_rotary_factor", 0.25), theta = rope_param(cfg, "rope_theta", 1e7);
    const json *tie = hp(cfg, "tie_word_embeddings");
    const int tied = tie && json_truthy(tie);
    const json *fai = hp(cfg, "full_attention_interval");
    const char *what = NULL;
    char d[160];
    if (F != p->n_ff) what = "intermediate_size";
    else if (nh != p->n_head) what = "num_attention_heads";
    else if (nkv != p->n_head_kv) what = "num_key_value_heads";
    else if (hd != p->head_dim) what = "head_dim";
    else if (dk != p->d_state || dv != p->d_state) what = "linear_key_head_dim / linear_value_head_dim";
    else if (nk != p->n_k_heads) what = "linear_num_key_heads";
    else if (nv != p->n_v_heads) what = "linear_num_value_heads";
    else if (kern != QWEN35_CONV_KERNEL) what = "linear_conv_kernel_dim";
    else if (V != p->n_vocab) what = "vocab_size";
    else if (fabs(rot * hd - p->n_rot) > 1e-9) what = "partial_rotary_factor";
    else if (fabs(theta - 1e7) > 1e-3) what = "rope_theta";
    else if (tied != (int)p->tied) what = "tie_word_embeddings";
    else if (fai && (fai->type != JSON_NUMBER || fai->num != QWEN35_ATTN_INTERVAL)) what = "full_attention_interval";
    if (!what) {
        const json *lt = hp(cfg, "layer_types");
        for (size_t i = 0; lt && lt->type == JSON_ARRAY && i < lt->len && !what; i++) {
            const json *e = lt->items[i];
            const char *want = qwen35_layer_is_attn((uint32_t)i) ? "full_attention" : "linear_attention";
            if (e->type != JSON_STRING || strcmp(e->str, want)) what = "layer_types";
        }
        if (lt && (lt->type != JSON_ARRAY || lt->len != nl)) what = "layer_types";
    }
    if (what) {
        snprintf(d, sizeof d, "'%s' differs from profile %s", what, p->name);
        gem_err_set(err, "%s/config.json: %s", dir, d);
        return NULL;
    }
    return p;
}

static int validate_out(const gguf_file *f, gem_err *err) {
    const qwen35_profile *p;
    return qwen35_validate(f, &p, err);
}

int hf_convert_qwen35(const gem_convert_opts *o, const json *cfg, gem_convert_stats *st, gem_err *err) {
    const char *dir = o->dir;
    const qwen35_profile *p = read_profile(cfg, dir, err);
    if (!p) return -1;
    if (!o->vocab_path) return gem_err_set(err, "convert: a Qwen3.5 checkpoint needs a vocabulary GGUF (--vocab)");
    perm pm = {p, p->n_v_heads / p->n_k_heads};
    /* the shards: the index's files (sorted), else model.safetensors */
    st_file *shards[MAX_SHARDS];
    uint32_t n_shards = 0;
    entry *es = NULL;
    size_t n = 0, cap = 0;
    gguf_writer *w = NULL;
    gguf_file *vocab = NULL;
    float *rowbuf = NULL;
    uint8_t *out = NULL;
    FILE *fp = NULL;
    int rc = -1;
    {
        gem_err e2 = {{0}};
        size_t len;
        char *s = hf_read_file(dir, "model.safetensors.index.json", 1, &len, &e2);
        if (!s && e2.msg[0]) return gem_err_set(err, "%s", e2.msg);
        const char *names[MAX_SHARDS];
        json *idx = NULL;
        uint32_t nn = 0;
        if (s) {
            idx = json_parse(s, len, &e2);
            free(s);
            const json *wm = idx ? json_get(idx, "weight_map") : NULL;
            if (!wm || wm->type != JSON_OBJECT) {
                json_free(idx);
                return gem_err_set(err, "%s/model.safetensors.index.json: no 'weight_map' object", dir);
            }
            for (size_t i = 0; i < wm->len; i++) {
                const json *f = wm->items[i];
                if (f->type != JSON_STRING || strchr(f->str, '/')) {
                    json_free(idx);
                    return gem_err_set(err, "%s/model.safetensors.index.json: bad shard name for '%s'", dir, wm->keys[i]);
                }
                int seen = 0;
                for (uint32_t k = 0; k < nn && !seen; k++) seen = !strcmp(names[k], f->str);
                if (!seen && nn < MAX_SHARDS) names[nn++] = f->str;
            }
            for (uint32_t i = 1; i < nn; i++) /* name order */
                for (uint32_t k = i; k > 0 && strcmp(names[k - 1], names[k]) > 0; k--) {
                    const char *t = names[k];
                    names[k] = names[k - 1];
                    names[k - 1] = t;
                }
        } else {
            names[nn++] = "model.safetensors";
        }
        for (uint32_t i = 0; i < nn; i++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", dir, names[i]);
            if (!(shards[n_shards] = st_open(path, err))) {
                json_free(idx);
                goto done;
            }
            n_shards++;
        }
        json_free(idx);
    }
    /* every tensor mapped (or dropped), in shard then name order */
    for (uint32_t si = 0; si < n_shards; si++)
        for (size_t i = 0; i < st_count(shards[si]); i++) {
            const st_tensor *t = st_at(shards[si], i);
            entry e = {t, "", X_PLAIN, QT_F32, 0, 0, 0};
            int m = map_name(t->name, p->n_layer, e.gguf, &e.x);
            if (m < 0) {
                gem_err_set(err, "%s: tensor '%s' is not part of a Qwen3.5 text model", st_path(shards[si]), t->name);
                goto done;
            }
            if (!m) continue;
            if (t->dtype != ST_F32 && t->dtype != ST_F16 && t->dtype != ST_BF16) {
                gem_err_set(err, "%s: tensor '%s' has dtype %s (f32, f16 or bf16 expected)", st_path(shards[si]),
                            t->name, st_dtype_name(t->dtype));
                goto done;
            }
            /* GGUF shape: the HF shape reversed, conv1d's [C, 1, 4] squeezed */
            if (t->n_dims == 1) e.n_dims = 1, e.ne0 = t->shape[0], e.rows = 1;
            else if (e.x == X_CONV && t->n_dims == 3) e.n_dims = 2, e.ne0 = t->shape[2], e.rows = t->shape[0];
            else if (t->n_dims == 2) e.n_dims = 2, e.ne0 = t->shape[1], e.rows = t->shape[0];
            else {
                gem_err_set(err, "%s: tensor '%s' has %u dims", st_path(shards[si]), t->name, t->n_dims);
                goto done;
            }
            if (n == cap) {
                cap = cap ? 2 * cap : 256;
                entry *ne = realloc(es, cap * sizeof *ne);
                if (!ne) {
                    gem_err_set(err, "out of memory");
                    goto done;
                }
                es = ne;
            }
            es[n++] = e;
        }
    /* the reference's "auto" type: the first matrix's storage (bf16 or f16) */
    uint32_t type = QT_F16;
    if (o->type >= 0) type = (uint32_t)o->type;
    else
        for (size_t i = 0; i < n; i++)
            if (es[i].n_dims == 2) {
                type = es[i].t->dtype == ST_BF16 ? QT_BF16 : QT_F16;
                break;
            }
    for (size_t i = 0; i < n; i++) {
        const size_t l = strlen(es[i].gguf);
        const int vec = es[i].n_dims < 2 || es[i].x == X_CONV || (l > 12 && !strcmp(es[i].gguf + l - 12, "_norm.weight"));
        es[i].type = vec ? QT_F32 : type;
    }
    /* metadata: general.*, the architecture keys, the tokenizer */
    if (!(vocab = gguf_open(o->vocab_path, err))) goto done;
    w = gguf_writer_new(GGUF_DEFAULT_ALIGNMENT);
    if (!w) {
        gem_err_set(err, "out of memory");
        goto done;
    }
    char name[256];
    if (o->name) snprintf(name, sizeof name, "%s", o->name);
    else {
        const char *b = strrchr(dir, '/');
        snprintf(name, sizeof name, "%s", b && b[1] ? b + 1 : dir);
    }
    uint32_t n_ctx = p->n_ctx_train;
    hp_u32(cfg, dir, "max_position_embeddings", &n_ctx, err);
    const uint32_t ftype = type == QT_F32 ? 0 : type == QT_F16 ? 1 : 32;
    /* rope.dimension_sections: the checkpoint's mrope_section padded to 4 */
    int32_t sec[4] = {11, 11, 10, 0};
    {
        const json *rp = hp(cfg, "rope_parameters");
        const json *ms = rp && rp->type == JSON_OBJECT ? json_get(rp, "mrope_section") : NULL;
        if (!ms) ms = hp(cfg, "mrope_section");
        if (ms && ms->type == JSON_ARRAY && ms->len <= 4) {
            for (size_t i = 0; i < 4; i++)
                sec[i] = i < ms->len && ms->items[i]->type == JSON_NUMBER ? (int32_t)ms->items[i]->num : 0;
        }
    }
    if (gguf_w_str(w, "general.architecture", QWEN35_ARCH, err) || gguf_w_str(w, "general.type", "model", err) ||
        gguf_w_str(w, "general.name", name, err) || qwen35_write_arch_keys(w, p, n_ctx, ftype, sec, err) ||
        gguf_w_u32(w, "general.quantization_version", 2, err) || qwen35_write_vocab(w, vocab, p->n_vocab, err))
        goto done;
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t ne[2] = {es[i].ne0, es[i].rows};
        if (gguf_w_tensor(w, es[i].gguf, es[i].type, es[i].n_dims, ne, err)) goto done;
        total += es[i].t->n_bytes;
    }
    if (!(fp = file_create(o->out_path, err)) || gguf_writer_begin(w, fp, err)) goto done;
    uint64_t done_bytes = 0, out_bytes = 0;
    for (size_t i = 0; i < n; i++) {
        const entry *e = &es[i];
        free(rowbuf);
        free(out);
        rowbuf = malloc(e->ne0 * sizeof *rowbuf);
        out = malloc(e->ne0 * 4);
        if (!rowbuf || !out) {
            gem_err_set(err, "out of memory");
            goto done;
        }
        uint64_t rb;
        quant_row_bytes(e->type, (int64_t)e->ne0, &rb);
        for (uint64_t r = 0; r < e->rows; r++) {
            get_row(e, &pm, r, rowbuf);
            if (e->type == QT_F32) memcpy(out, rowbuf, e->ne0 * 4);
            else
                for (uint64_t c = 0; c < e->ne0; c++) {
                    uint16_t h = e->type == QT_F16 ? quant_f32_to_f16(rowbuf[c]) : quant_f32_to_bf16(rowbuf[c]);
                    memcpy(out + 2 * c, &h, 2);
                }
            if (gguf_writer_data(w, fp, out, rb, err)) goto done;
            out_bytes += rb;
        }
        done_bytes += e->t->n_bytes;
        if (o->progress) o->progress(done_bytes, total, o->progress_ctx);
    }
    {
        const int fin = hf_out_finish(w, fp, o->out_path, "qwen35", validate_out, err);
        fp = NULL;
        if (fin) goto done;
    }
    if (st) *st = (gem_convert_stats){total, out_bytes, (uint32_t)n, n_shards, type, p->name};
    rc = 0;
done:
    rc = file_close_output(fp, o->out_path, rc, err);
    free(rowbuf);
    free(out);
    free(es);
    gguf_writer_free(w);
    gguf_close(vocab);
    for (uint32_t i = 0; i < n_shards; i++) st_close(shards[i]);
    return rc;
}
