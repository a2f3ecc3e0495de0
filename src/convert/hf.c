/* Hugging Face checkpoint to GGUF (see hf.h).
 *
 * Order of work: config.json (architecture, variant, profile), the shards
 * (every header checked by the safetensors reader, names mapped, the set
 * compared with the index and with the profile's manifest), the tokenizer,
 * then the metadata in the reference's key order and the tensor data,
 * converted chunk by chunk over worker threads and streamed to the writer.
 * Nothing is written before every check that needs no tensor data passed;
 * the finished file is validated against the Gemma 4 contract and removed
 * if it fails. */
#include "convert/hf.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "convert/hf_out.h"
#include "convert/hf_qwen35.h"
#include "convert/hf_tok.h"
#include "convert/safetensors.h"
#include "gguf/gguf.h"
#include "gguf/gguf_write.h"
#include "model/gemma4.h"
#include "quant/quant.h"
#include "util/file.h"
#include "util/json.h"

#define CHUNK_ELEMS (4u << 20)
#define MAX_THREADS 64
#define MAX_SHARDS 4096

/* ---- config ---- */

/* The reference merges text_config over the top level ({**config, **text_config}). */
static const json *hp(const json *cfg, const char *key) {
    const json *tc = json_get(cfg, "text_config");
    const json *v = tc && tc->type == JSON_OBJECT ? json_get(tc, key) : NULL;
    if (tc && tc->type == JSON_OBJECT && v) return v;
    return json_get(cfg, key);
}

static int hp_set(const json *cfg, const char *key) {
    const json *v = hp(cfg, key);
    return v && v->type != JSON_NULL;
}

static int hp_uint(const json *cfg, const char *dir, const char *key, uint32_t *out, gem_err *err) {
    const json *v = hp(cfg, key);
    if (!v || v->type == JSON_NULL) return gem_err_set(err, "%s/config.json: missing '%s'", dir, key);
    if (v->type != JSON_NUMBER || !v->is_int || v->num < 0 || v->num > UINT32_MAX)
        return gem_err_set(err, "%s/config.json: '%s' is not a non-negative integer", dir, key);
    *out = (uint32_t)v->num;
    return 0;
}

static int hp_num(const json *cfg, const char *dir, const char *key, double *out, gem_err *err) {
    const json *v = hp(cfg, key);
    if (!v || v->type != JSON_NUMBER) return gem_err_set(err, "%s/config.json: missing number '%s'", dir, key);
    *out = v->num;
    return 0;
}

static int obj_num(const json *o, const char *dir, const char *what, const char *key, double *out, gem_err *err) {
    const json *v = o ? json_get(o, key) : NULL;
    if (!v || v->type != JSON_NUMBER) return gem_err_set(err, "%s/config.json: %s has no number '%s'", dir, what, key);
    *out = v->num;
    return 0;
}

typedef struct {
    int assistant;     /* Gemma4AssistantForCausalLM: an MTP drafter */
    uint32_t n_embd_out; /* assistants: backbone_hidden_size, the target's width */
    uint32_t n_layer, n_embd, n_ff, n_head, n_head_kv, head_dim, head_dim_full, window, shared_kv, n_ctx;
    int have_kv_full;
    uint32_t n_head_kv_full;
    uint32_t per_layer_input;
    double rms_eps, theta_full, theta_swa, rot_full, softcap;
    int have_theta_full, have_theta_swa;
    uint8_t *swa; /* per layer: 1 = sliding */
} hparams;

static int read_config(const char *dir, const json *cfg, hparams *h, gem_err *err) {
    const json *arch = json_get(cfg, "architectures");
    const json *a0 = arch && arch->type == JSON_ARRAY && arch->len ? arch->items[0] : NULL;
    if (!a0 || a0->type != JSON_STRING)
        return gem_err_set(err, "%s/config.json: no 'architectures' list naming the model class", dir);
    h->assistant = !strcmp(a0->str, "Gemma4AssistantForCausalLM");
    if (strcmp(a0->str, "Gemma4ForCausalLM") && strcmp(a0->str, "Gemma4ForConditionalGeneration") && !h->assistant)
        return gem_err_set(err,
                           "%s/config.json: unsupported architecture '%.64s' (gem converts Gemma4ForCausalLM, "
                           "Gemma4ForConditionalGeneration, dense variants, and Gemma4AssistantForCausalLM)",
                           dir, a0->str);
    static const char *const moe_keys[] = {"num_experts", "num_local_experts", "n_routed_experts"};
    for (size_t i = 0; i < 3; i++) {
        const json *v = hp(cfg, moe_keys[i]);
        if (v && v->type == JSON_NUMBER && v->num > 0)
            return gem_err_set(err, "%s/config.json: Gemma 4 MoE (%s %g) is not supported: gem runs the dense models",
                               dir, moe_keys[i], v->num);
    }
    const json *moe = hp(cfg, "enable_moe_block");
    if (moe && moe->type == JSON_BOOL && moe->boolean)
        return gem_err_set(err, "%s/config.json: Gemma 4 MoE (enable_moe_block) is not supported: gem runs the dense models", dir);
    const json *pl = hp(cfg, "hidden_size_per_layer_input");
    if (pl && pl->type == JSON_NUMBER && pl->num != 0)
        return gem_err_set(err, "%s/config.json: Gemma 4 E2B/E4B (per-layer embeddings) is not supported: gem runs the dense models", dir);
    h->per_layer_input = 0;
    const json *dw = hp(cfg, "use_double_wide_mlp");
    if (dw && dw->type == JSON_BOOL && dw->boolean)
        return gem_err_set(err, "%s/config.json: use_double_wide_mlp is not supported (dense Gemma 4 has none)", dir);
    /* block count: the reference's first match of n_layers, num_hidden_layers, n_layer, num_layers */
    static const char *const layer_keys[] = {"n_layers", "num_hidden_layers", "n_layer", "num_layers"};
    const char *lk = NULL;
    for (size_t i = 0; i < 4 && !lk; i++)
        if (hp(cfg, layer_keys[i])) lk = layer_keys[i];
    if (!lk) return gem_err_set(err, "%s/config.json: missing 'num_hidden_layers'", dir);
    if (hp_uint(cfg, dir, lk, &h->n_layer, err) || hp_uint(cfg, dir, "hidden_size", &h->n_embd, err) ||
        hp_uint(cfg, dir, "intermediate_size", &h->n_ff, err) ||
        hp_uint(cfg, dir, "num_attention_heads", &h->n_head, err) ||
        hp_uint(cfg, dir, "num_key_value_heads", &h->n_head_kv, err) ||
        hp_uint(cfg, dir, "head_dim", &h->head_dim, err) ||
        hp_uint(cfg, dir, "sliding_window", &h->window, err) ||
        hp_uint(cfg, dir, "num_kv_shared_layers", &h->shared_kv, err) ||
        hp_uint(cfg, dir, "max_position_embeddings", &h->n_ctx, err) ||
        hp_num(cfg, dir, "rms_norm_eps", &h->rms_eps, err))
        return -1;
    /* a drafter's logits are not soft-capped: its config may have none (the
     * reference then writes no key) */
    h->softcap = 0;
    if ((!h->assistant || hp_set(cfg, "final_logit_softcapping")) &&
        hp_num(cfg, dir, "final_logit_softcapping", &h->softcap, err))
        return -1;
    if (h->n_layer == 0 || h->n_layer > 512) return gem_err_set(err, "%s/config.json: %u layers is implausible", dir, h->n_layer);
    if (h->assistant) {
        /* every drafter layer reads the target's caches */
        if (hp_uint(cfg, dir, "backbone_hidden_size", &h->n_embd_out, err)) return -1;
        if (h->shared_kv != h->n_layer)
            return gem_err_set(err, "%s/config.json: num_kv_shared_layers %u: a Gemma 4 assistant shares all %u layers",
                               dir, h->shared_kv, h->n_layer);
        const json *oe = json_get(cfg, "use_ordered_embeddings");
        if (oe && oe->type == JSON_BOOL && oe->boolean)
            return gem_err_set(err, "%s/config.json: use_ordered_embeddings (the E2B/E4B drafters' sparse head) is not "
                               "supported: gem runs the dense-head drafters", dir);
    } else if (h->shared_kv) {
        return gem_err_set(err, "%s/config.json: num_kv_shared_layers %u: KV-sharing Gemma 4 variants are not supported", dir,
                           h->shared_kv);
    }
    const json *lt = hp(cfg, "layer_types");
    if (!lt || lt->type != JSON_ARRAY || lt->len != h->n_layer)
        return gem_err_set(err, "%s/config.json: 'layer_types' must list one type per layer (%u)", dir, h->n_layer);
    h->swa = malloc(h->n_layer);
    if (!h->swa) return gem_err_set(err, "out of memory");
    for (uint32_t i = 0; i < h->n_layer; i++) {
        const json *t = lt->items[i];
        if (!t || t->type != JSON_STRING || (strcmp(t->str, "sliding_attention") && strcmp(t->str, "full_attention")))
            return gem_err_set(err, "%s/config.json: layer_types[%u] is not sliding_attention or full_attention", dir, i);
        h->swa[i] = !strcmp(t->str, "sliding_attention");
    }
    /* the full layers' head size and KV heads: global_head_dim and
     * num_global_key_value_heads, or, as transformers 5 saves them, the
     * first full layer's entry in per_layer_config (the reference reads both) */
    int have_hd = hp_set(cfg, "global_head_dim");
    if (have_hd && hp_uint(cfg, dir, "global_head_dim", &h->head_dim_full, err)) return -1;
    h->have_kv_full = hp_set(cfg, "num_global_key_value_heads");
    if (h->have_kv_full && hp_uint(cfg, dir, "num_global_key_value_heads", &h->n_head_kv_full, err)) return -1;
    const json *plc = hp(cfg, "per_layer_config");
    for (int pass = 0; pass < 2 && plc && plc->type == JSON_OBJECT; pass++) {
        int *have = pass ? &h->have_kv_full : &have_hd;
        uint32_t *dst = pass ? &h->n_head_kv_full : &h->head_dim_full;
        const char *key = pass ? "num_key_value_heads" : "head_dim";
        for (size_t i = 0; i < plc->len && !*have; i++) {
            char *end;
            const unsigned long il = strtoul(plc->keys[i], &end, 10);
            const json *v = json_get(plc->items[i], key);
            if (!isdigit((unsigned char)plc->keys[i][0]) || *end || il >= h->n_layer || h->swa[il] || !v) continue;
            if (v->type != JSON_NUMBER || !v->is_int || v->num < 1 || v->num > UINT32_MAX)
                return gem_err_set(err, "%s/config.json: per_layer_config['%s'].%s is not a positive integer", dir,
                                   plc->keys[i], key);
            *dst = (uint32_t)v->num;
            *have = 1;
        }
    }
    if (!have_hd) return gem_err_set(err, "%s/config.json: missing 'global_head_dim'", dir);
    const json *rp = hp(cfg, "rope_parameters");
    const json *full = rp ? json_get(rp, "full_attention") : NULL, *swa = rp ? json_get(rp, "sliding_attention") : NULL;
    if (!full || full->type != JSON_OBJECT)
        return gem_err_set(err, "%s/config.json: rope_parameters.full_attention is missing", dir);
    const json *rt = json_get(full, "rope_type");
    if (!rt || rt->type != JSON_STRING || strcmp(rt->str, "proportional"))
        return gem_err_set(err, "%s/config.json: rope_parameters.full_attention.rope_type must be 'proportional'", dir);
    if (obj_num(full, dir, "rope_parameters.full_attention", "partial_rotary_factor", &h->rot_full, err)) return -1;
    h->have_theta_full = !obj_num(full, dir, "", "rope_theta", &h->theta_full, NULL);
    h->have_theta_swa = swa && !obj_num(swa, dir, "", "rope_theta", &h->theta_swa, NULL);
    return 0;
}

/* ---- names ---- */

/* The reference's text-model filter: multimodal towers and projectors. */
static int is_multimodal(const char *n) {
    static const char *const prefixes[] = {"mlp", "vit.", "vpm.", "siglip2.", "conformer.", "merger.", "resampler.",
                                           "sound_encoder.", "sound_projection.", "speech_embeddings."};
    static const char *const parts[] = {"visual.", "vision.", "audio.", "talker.", "vision_", "audio_", "token2wav.",
                                        "code2wav.", "projector.", "pre_mm_projector_norm", "image_newline",
                                        "view_seperator", "patch_embed", "patch_embedding", "patch_merger.",
                                        "patch_merge_mlp.", "model.connector."};
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++)
        if (!strncmp(n, prefixes[i], strlen(prefixes[i]))) return 1;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        if (strstr(n, parts[i])) return 1;
    return 0;
}

static const struct {
    const char *hf, *gguf;
} layer_names[] = {
    {"input_layernorm.weight", "attn_norm"},
    {"layer_scalar", "layer_output_scale"},
    {"mlp.down_proj.weight", "ffn_down"},
    {"mlp.gate_proj.weight", "ffn_gate"},
    {"mlp.up_proj.weight", "ffn_up"},
    {"post_attention_layernorm.weight", "post_attention_norm"},
    {"post_feedforward_layernorm.weight", "post_ffw_norm"},
    {"pre_feedforward_layernorm.weight", "ffn_norm"},
    {"self_attn.k_norm.weight", "attn_k_norm"},
    {"self_attn.k_proj.weight", "attn_k"},
    {"self_attn.o_proj.weight", "attn_output"},
    {"self_attn.q_norm.weight", "attn_q_norm"},
    {"self_attn.q_proj.weight", "attn_q"},
    {"self_attn.v_proj.weight", "attn_v"},
};

/* HF name (language_model. already removed) to GGUF name; -1 if unknown.
 * A drafter's top-level projections become the reference's nextn.* names. */
static int map_name(const char *n, const hparams *h, char *out, size_t cap) {
    const uint32_t n_layer = h->n_layer;
    if (h->assistant && (!strcmp(n, "pre_projection.weight") || !strcmp(n, "post_projection.weight")))
        return snprintf(out, cap, "nextn.%s", n) < 0 ? -1 : 0;
    if (!strcmp(n, "model.embed_tokens.weight")) return snprintf(out, cap, "token_embd.weight") < 0 ? -1 : 0;
    if (!strcmp(n, "model.norm.weight")) return snprintf(out, cap, "output_norm.weight") < 0 ? -1 : 0;
    if (strncmp(n, "model.layers.", 13)) return -1;
    const char *p = n + 13;
    if (!isdigit((unsigned char)*p)) return -1;
    char *end;
    unsigned long il = strtoul(p, &end, 10);
    if (*end != '.' || il >= n_layer || (p[0] == '0' && end - p > 1)) return -1;
    for (size_t i = 0; i < sizeof layer_names / sizeof layer_names[0]; i++)
        if (!strcmp(end + 1, layer_names[i].hf)) {
            snprintf(out, cap, "blk.%lu.%s.weight", il, layer_names[i].gguf);
            return 0;
        }
    return -1;
}

/* ---- shards ---- */

typedef struct {
    const st_tensor *t;
    char hf[256];   /* name after the reference's renames (language_model. removed) */
    char gguf[64];
    uint32_t n_dims;
    uint64_t ne[2]; /* GGUF order: ne[0] is the contiguous dimension */
    uint32_t type;  /* GGUF storage type */
    uint64_t rows;  /* rows written (the embedding may be cut to the vocabulary) */
} entry;

typedef struct {
    st_file *shards[MAX_SHARDS];
    uint32_t n_shards;
    entry *e;
    size_t n, cap;
} ckpt;

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Shard file names: from the index, or every model*.safetensors in dir. */
static int shard_names(const char *dir, char ***names, uint32_t *n, json **index, gem_err *err) {
    gem_err e2 = {{0}};
    size_t len;
    char *s = hf_read_file(dir, "model.safetensors.index.json", 1, &len, &e2);
    *names = NULL;
    *n = 0;
    if (!s && e2.msg[0]) return gem_err_set(err, "%s", e2.msg);
    if (s) {
        *index = json_parse(s, len, &e2);
        free(s);
        if (!*index) return gem_err_set(err, "%s/model.safetensors.index.json: invalid JSON: %s", dir, e2.msg);
        const json *wm = json_get(*index, "weight_map");
        if (!wm || wm->type != JSON_OBJECT)
            return gem_err_set(err, "%s/model.safetensors.index.json: no 'weight_map' object", dir);
        *names = calloc(wm->len ? wm->len : 1, sizeof **names);
        if (!*names) return gem_err_set(err, "out of memory");
        for (size_t i = 0; i < wm->len; i++) {
            const json *f = wm->items[i];
            if (f->type != JSON_STRING || !f->len || strchr(f->str, '/') || !strcmp(f->str, "..") ||
                memchr(f->str, 0, f->len))
                return gem_err_set(err, "%s/model.safetensors.index.json: weight_map['%s'] is not a file name in the folder",
                                   dir, wm->keys[i]);
            int seen = 0;
            for (uint32_t k = 0; k < *n && !seen; k++) seen = !strcmp((*names)[k], f->str);
            if (seen) continue;
            if (*n >= MAX_SHARDS) return gem_err_set(err, "%s: more than %d shards", dir, MAX_SHARDS);
            (*names)[(*n)++] = f->str; /* view into the index */
        }
        qsort(*names, *n, sizeof **names, cmp_str);
        return 0;
    }
    DIR *d = opendir(dir);
    if (!d) return gem_err_set(err, "%s: cannot open the folder: %s", dir, strerror(errno));
    size_t cap = 0;
    struct dirent *de;
    int rc = 0;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (strncmp(de->d_name, "model", 5) || l < 12 || strcmp(de->d_name + l - 12, ".safetensors")) continue;
        if (*n >= MAX_SHARDS) {
            rc = gem_err_set(err, "%s: more than %d safetensors files", dir, MAX_SHARDS);
            break;
        }
        if (*n == cap) {
            cap = cap ? cap * 2 : 8;
            char **m = realloc(*names, cap * sizeof *m);
            if (!m) {
                rc = gem_err_set(err, "out of memory");
                break;
            }
            *names = m;
        }
        if (!((*names)[*n] = strdup(de->d_name))) {
            rc = gem_err_set(err, "out of memory");
            break;
        }
        (*n)++;
    }
    closedir(d);
    if (!rc && !*n) rc = gem_err_set(err, "%s: no model*.safetensors file (only safetensors checkpoints are supported)", dir);
    if (!rc) qsort(*names, *n, sizeof **names, cmp_str);
    return rc;
}

static int load_shards(const char *dir, const hparams *h, ckpt *c, gem_err *err) {
    char **names = NULL;
    uint32_t n = 0;
    json *index = NULL;
    int rc = shard_names(dir, &names, &n, &index, err);
    for (uint32_t i = 0; !rc && i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (!(c->shards[i] = st_open(path, err))) rc = -1;
        else c->n_shards = i + 1;
    }
    for (uint32_t s = 0; !rc && s < c->n_shards; s++) {
        const st_file *f = c->shards[s];
        for (size_t i = 0; !rc && i < st_count(f); i++) {
            const st_tensor *t = st_at(f, i);
            const char *n0 = t->name;
            if (index) {
                const json *wf = json_get(json_get(index, "weight_map"), n0);
                if (!wf) {
                    rc = gem_err_set(err, "%s: tensor '%s' is not in model.safetensors.index.json", st_path(f), n0);
                    break;
                }
            }
            if (is_multimodal(n0)) continue;
            size_t l = strlen(n0);
            static const char *const skip[] = {".attention.masked_bias", ".attention.bias", ".rotary_emb.inv_freq"};
            int skipped = 0;
            for (size_t k = 0; k < 3; k++)
                skipped |= l >= strlen(skip[k]) && !strcmp(n0 + l - strlen(skip[k]), skip[k]);
            if (skipped) continue;
            /* the reference drops the E2B/E4B drafters' centroid head (it uses the dense one) */
            if (h->assistant && strstr(n0, "masked_embedding")) continue;
            if (c->n == c->cap) {
                size_t cap = c->cap ? c->cap * 2 : 256;
                entry *e = realloc(c->e, cap * sizeof *e);
                if (!e) {
                    rc = gem_err_set(err, "out of memory");
                    break;
                }
                c->e = e;
                c->cap = cap;
            }
            entry *e = &c->e[c->n];
            memset(e, 0, sizeof *e);
            e->t = t;
            /* the reference removes "language_model." wherever it appears */
            const char *lm = strstr(n0, "language_model.");
            if (lm) snprintf(e->hf, sizeof e->hf, "%.*s%s", (int)(lm - n0), n0, lm + 15);
            else snprintf(e->hf, sizeof e->hf, "%s", n0);
            if (!strcmp(e->hf, "lm_head.weight")) {
                rc = gem_err_set(err, "%s: an untied output head (lm_head.weight) is not supported: Gemma 4 ties it to the embedding",
                                 st_path(f));
                break;
            }
            if (map_name(e->hf, h, e->gguf, sizeof e->gguf)) {
                rc = gem_err_set(err, "%s: tensor '%s' is not part of a dense Gemma 4 %s", st_path(f), n0,
                                 h->assistant ? "assistant" : "text model");
                break;
            }
            for (size_t k = 0; k < c->n; k++)
                if (!strcmp(c->e[k].gguf, e->gguf)) {
                    rc = gem_err_set(err, "%s: tensor '%s' appears twice (also in %s)", st_path(f), n0,
                                     st_path(c->shards[0]));
                    break;
                }
            if (rc) break;
            if (t->dtype != ST_F32 && t->dtype != ST_F16 && t->dtype != ST_BF16) {
                rc = gem_err_set(err, "%s: tensor '%s' has dtype %s (gem converts F32, F16 and BF16)", st_path(f), n0,
                                 st_dtype_name(t->dtype));
                break;
            }
            if (t->n_dims > 2) {
                rc = gem_err_set(err, "%s: tensor '%s' has %u dimensions", st_path(f), n0, t->n_dims);
                break;
            }
            e->n_dims = t->n_dims == 2 ? 2 : 1;
            e->ne[0] = t->n_dims == 0 ? 1 : t->shape[t->n_dims - 1];
            e->ne[1] = t->n_dims == 2 ? t->shape[0] : 1;
            e->rows = e->ne[1];
            c->n++;
        }
    }
    if (!rc && index) { /* every indexed tensor must be in some shard */
        const json *wm = json_get(index, "weight_map");
        for (size_t i = 0; i < wm->len && !rc; i++) {
            int found = 0;
            for (uint32_t s = 0; s < c->n_shards && !found; s++) found = st_find(c->shards[s], wm->keys[i]) != NULL;
            if (!found)
                rc = gem_err_set(err, "%s: tensor '%s' of model.safetensors.index.json is in no shard (missing or incomplete file %s)",
                                 dir, wm->keys[i], wm->items[i]->str);
        }
    }
    if (!index) {
        for (uint32_t i = 0; i < n; i++) free(names[i]);
    }
    free(names);
    json_free(index);
    return rc;
}

/* Every manifest tensor present with its shape, nothing else. */
static int check_manifest(const char *dir, const gemma4_profile *p, ckpt *c, uint64_t vocab_rows, gem_err *err) {
    size_t n = gemma4_manifest_count(p);
    gemma4_tensor_spec *specs = malloc(n * sizeof *specs);
    if (!specs) return gem_err_set(err, "out of memory");
    gemma4_manifest(p, specs, n);
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        const gemma4_tensor_spec *s = &specs[i];
        if (s->role == G4_ROPE_FREQS) continue;
        entry *e = NULL;
        for (size_t k = 0; k < c->n && !e; k++)
            if (!strcmp(c->e[k].gguf, s->name)) e = &c->e[k];
        if (!e) {
            rc = gem_err_set(err, "%s: the checkpoint has no tensor for '%s' (profile %s)", dir, s->name, p->name);
            break;
        }
        if (s->role == G4_TOKEN_EMBD && e->rows > vocab_rows) e->rows = vocab_rows; /* the reference cuts OOV rows */
        uint64_t rows = s->n_dims == 2 ? e->rows : 1;
        if (e->n_dims != s->n_dims || e->ne[0] != s->ne[0] || (s->n_dims == 2 && rows != s->ne[1]))
            rc = gem_err_set(err,
                             "%s: tensor '%s' (%s) has shape [%llu, %llu] in GGUF order, profile %s needs [%llu, %llu]",
                             dir, e->t->name, s->name, (unsigned long long)e->ne[0], (unsigned long long)rows, p->name,
                             (unsigned long long)s->ne[0], (unsigned long long)(s->n_dims == 2 ? s->ne[1] : 1));
    }
    for (size_t k = 0; k < c->n && !rc; k++) {
        int found = 0;
        for (size_t i = 0; i < n && !found; i++) found = !strcmp(c->e[k].gguf, specs[i].name);
        if (!found)
            rc = gem_err_set(err, "%s: tensor '%s' (%s) is not in the %s manifest%s", dir, c->e[k].t->name,
                             c->e[k].gguf, p->name,
                             gemma4_is_assistant(p) && (strstr(c->e[k].gguf, "attn_k") || strstr(c->e[k].gguf, "attn_v"))
                                 ? " (a drafter's attention reads the target's caches: no key or value weights)"
                             : strstr(c->e[k].gguf, "attn_v") ? " (full-attention layers use K as V)"
                                                              : "");
    }
    free(specs);
    return rc;
}

/* ---- general.* keys ---- */

/* The reference's title case for a folder name: words split on '-' and
 * spaces, lowercase words capitalized after every non-letter (str.title),
 * version-like and digit-led words kept. */
static void title_name(const char *dir, char *out, size_t cap) {
    char base[256];
    size_t l = strlen(dir);
    while (l > 1 && dir[l - 1] == '/') l--;
    size_t s = l;
    while (s > 0 && dir[s - 1] != '/') s--;
    snprintf(base, sizeof base, "%.*s", (int)(l - s), dir + s);
    for (char *q = base; *q; q++)
        if (*q == '-') *q = ' ';
    size_t o = 0;
    out[0] = 0;
    char *save = NULL;
    for (char *w = strtok_r(base, " \t\n", &save); w; w = strtok_r(NULL, " \t\n", &save)) {
        int has_lower = 0, has_upper = 0;
        for (char *q = w; *q; q++) {
            has_lower |= islower((unsigned char)*q) != 0;
            has_upper |= isupper((unsigned char)*q) != 0;
        }
        int versionish = isdigit((unsigned char)w[0]);
        if (w[0] == 'v' && isdigit((unsigned char)w[1])) {
            versionish = 1;
            for (char *q = w + 1; *q; q++)
                if (!isdigit((unsigned char)*q) && *q != '.') versionish = 0;
        }
        if (has_lower && !has_upper && !versionish) {
            int prev_cased = 0;
            for (char *q = w; *q; q++) {
                int cased = isalpha((unsigned char)*q) != 0;
                if (cased) *q = (char)(prev_cased ? tolower((unsigned char)*q) : toupper((unsigned char)*q));
                prev_cased = cased;
            }
        }
        if (o && o + 1 < cap) out[o++] = ' ';
        int k = snprintf(out + o, cap - o, "%s", w);
        if (k > 0) o += (size_t)k < cap - o ? (size_t)k : cap - o - 1;
    }
}

/* gguf-py's size label: two significant digits and a K/M/B/T suffix. */
static void size_label(uint64_t n, char *out, size_t cap) {
    double x;
    const char *suffix;
    if ((double)n > 1e12) x = (double)n * 1e-12, suffix = "T";
    else if ((double)n > 1e9) x = (double)n * 1e-9, suffix = "B";
    else if ((double)n > 1e6) x = (double)n * 1e-6, suffix = "M";
    else x = (double)n * 1e-3, suffix = "K";
    double r = nearbyint(x); /* Python's round(): ties to even */
    int digits = 0;
    for (unsigned long long v = (unsigned long long)r; v; v /= 10) digits++;
    int fix = 2 - digits > 0 ? 2 - digits : 0;
    snprintf(out, cap, "%.*f%s", fix, x, suffix);
}

/* ---- metadata in the reference's order ---- */

static int write_meta(gguf_writer *w, const gem_convert_opts *o, const json *cfg, const hparams *h, uint32_t ftype,
                      uint64_t n_params, uint64_t *vocab_rows, gem_err *err) {
    char name[512], label[32];
    if (o->name) snprintf(name, sizeof name, "%s", o->name);
    else title_name(o->dir, name, sizeof name);
    size_label(n_params, label, sizeof label);
    int32_t *kv = malloc(h->n_layer * sizeof *kv);
    if (!kv) return gem_err_set(err, "out of memory");
    for (uint32_t i = 0; i < h->n_layer; i++) kv[i] = (int32_t)(h->swa[i] ? h->n_head_kv : h->n_head_kv_full);
    /* first-insertion order of TextModel, Gemma3Model and Gemma4Model's
     * set_gguf_parameters; keys set again later keep their first place. A
     * drafter (Gemma4AssistantModel) writes the same under its own prefix
     * and appends its two keys. */
    const char *arch = h->assistant ? GEMMA4_ASSISTANT_ARCH : GEMMA4_ARCH;
    char k[G4K_COUNT][96];
    for (int i = 0; i < G4K_COUNT; i++) gemma4_key(arch, i, k[i], sizeof k[i]);
    int rc = gguf_w_str(w, "general.architecture", arch, err) || gguf_w_str(w, "general.type", "model", err) ||
             gguf_w_str(w, "general.name", name, err) || gguf_w_str(w, "general.size_label", label, err) ||
             gguf_w_u32(w, k[0], h->n_layer, err) ||
             gguf_w_u32(w, k[1], h->n_ctx, err) ||
             gguf_w_u32(w, k[2], h->n_embd, err) ||
             gguf_w_u32(w, k[3], h->n_ff, err) ||
             gguf_w_u32(w, k[4], h->n_head, err) ||
             (h->have_kv_full ? gguf_w_arr(w, k[5], GGUF_T_INT32, kv, h->n_layer, err)
                              : gguf_w_u32(w, k[5], h->n_head_kv, err)) ||
             (h->have_theta_full && gguf_w_f32(w, k[6], (float)h->theta_full, err)) ||
             (h->have_theta_swa && gguf_w_f32(w, k[7], (float)h->theta_swa, err)) ||
             gguf_w_f32(w, k[8], (float)h->rms_eps, err) ||
             gguf_w_u32(w, k[9], h->head_dim_full, err) ||
             gguf_w_u32(w, k[10], h->head_dim_full, err) ||
             gguf_w_u32(w, "general.file_type", ftype, err) ||
             (h->softcap != 0 && gguf_w_f32(w, k[11], (float)h->softcap, err)) ||
             gguf_w_u32(w, k[12], h->window, err) ||
             gguf_w_u32(w, k[13], h->shared_kv, err) ||
             gguf_w_u32(w, k[14], h->per_layer_input, err) ||
             gguf_w_arr(w, k[15], GGUF_T_BOOL, h->swa, h->n_layer, err) ||
             gguf_w_u32(w, k[16], h->head_dim, err) ||
             gguf_w_u32(w, k[17], h->head_dim, err) ||
             gguf_w_u32(w, k[18], h->head_dim_full, err) ||
             gguf_w_u32(w, k[19], h->head_dim, err) ||
             (h->assistant && (gguf_w_u32(w, k[20], h->n_embd_out, err) || gguf_w_u32(w, k[21], h->n_layer, err))) ||
             gguf_w_u32(w, "general.quantization_version", 2, err) ||
             hf_tok_add_keys(w, o->dir, cfg, vocab_rows, err);
    free(kv);
    return rc ? -1 : 0;
}

/* ---- tensor data ---- */

typedef struct {
    const uint8_t *src;
    uint8_t *dst;
    st_dtype from;
    uint32_t to;
    uint64_t i0, n; /* element range of this worker */
} conv_job;

static float load_elem(st_dtype t, const uint8_t *p) {
    uint16_t h;
    float f;
    switch (t) {
    case ST_F32: memcpy(&f, p, 4); return f;
    case ST_F16: return quant_get_f16(p);
    default: memcpy(&h, p, 2); return quant_bf16_to_f32(h);
    }
}

static void *run_conv(void *arg) {
    conv_job *j = arg;
    const uint32_t in = st_dtype_size(j->from);
    for (uint64_t i = j->i0; i < j->i0 + j->n; i++) {
        const uint8_t *p = j->src + i * in;
        float f = load_elem(j->from, p);
        uint16_t h;
        switch (j->to) {
        case QT_F32: memcpy(j->dst + 4 * i, &f, 4); break;
        case QT_F16:
            h = j->from == ST_F16 ? (uint16_t)(p[0] | p[1] << 8) : quant_f32_to_f16(f);
            memcpy(j->dst + 2 * i, &h, 2);
            break;
        default:
            h = j->from == ST_BF16 ? (uint16_t)(p[0] | p[1] << 8) : quant_f32_to_bf16(f);
            memcpy(j->dst + 2 * i, &h, 2);
            break;
        }
    }
    return NULL;
}

static int write_entry(gguf_writer *w, FILE *fp, const entry *e, int threads, uint8_t *buf, uint64_t *done,
                       uint64_t total, const gem_convert_opts *o, gem_err *err) {
    const uint64_t n = e->ne[0] * (e->n_dims == 2 ? e->rows : 1);
    const uint32_t in = st_dtype_size(e->t->dtype), out = quant_type_size(e->type);
    const uint8_t *src = e->t->data;
    for (uint64_t at = 0; at < n; at += CHUNK_ELEMS) {
        uint64_t k = n - at < CHUNK_ELEMS ? n - at : CHUNK_ELEMS;
        int rc;
        if ((e->t->dtype == ST_F32 && e->type == QT_F32)) {
            rc = gguf_writer_data(w, fp, src + at * in, k * in, err); /* same bytes: no copy */
        } else {
            pthread_t tid[MAX_THREADS];
            conv_job jobs[MAX_THREADS];
            int started[MAX_THREADS] = {0};
            int nt = threads;
            if ((uint64_t)nt > k / 65536 + 1) nt = (int)(k / 65536 + 1);
            uint64_t per = k / (uint64_t)nt, extra = k % (uint64_t)nt, i0 = 0;
            for (int t = 0; t < nt; t++) {
                jobs[t] = (conv_job){src + at * in, buf, e->t->dtype, e->type, i0, per + ((uint64_t)t < extra)};
                i0 += jobs[t].n;
                started[t] = t > 0 && pthread_create(&tid[t], NULL, run_conv, &jobs[t]) == 0;
            }
            for (int t = 0; t < nt; t++)
                if (!started[t]) run_conv(&jobs[t]);
            for (int t = 0; t < nt; t++)
                if (started[t]) pthread_join(tid[t], NULL);
            rc = gguf_writer_data(w, fp, buf, k * out, err);
        }
        if (rc) return -1;
        *done += k * in;
        if (o->progress) o->progress(*done, total, o->progress_ctx);
    }
    return 0;
}

/* ---- driver ---- */

static int validate_out(const gguf_file *f, gem_err *err) {
    const gemma4_profile *p;
    return gemma4_validate(f, &p, err);
}

int gem_convert(const gem_convert_opts *o, gem_convert_stats *st, gem_err *err) {
    if (o->type != -1 && o->type != QT_F32 && o->type != QT_F16 && o->type != QT_BF16)
        return gem_err_set(err, "convert: type must be f32, f16 or bf16");
    int threads = o->threads > 0 ? o->threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (threads < 1) threads = 1;
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    struct stat sb;
    if (stat(o->dir, &sb) || !S_ISDIR(sb.st_mode)) return gem_err_set(err, "%s: not a folder", o->dir);

    hparams h = {0};
    ckpt c = {0};
    gguf_writer *w = NULL;
    uint8_t *buf = NULL;
    FILE *fp = NULL;
    int rc = -1;
    json *cfg = NULL;
    {
        size_t len;
        char *s = hf_read_file(o->dir, "config.json", 0, &len, err);
        if (!s) return -1;
        gem_err e2 = {{0}};
        cfg = json_parse(s, len, &e2);
        free(s);
        if (!cfg || cfg->type != JSON_OBJECT) {
            json_free(cfg);
            return gem_err_set(err, "%s/config.json: invalid JSON: %s", o->dir, cfg ? "not an object" : e2.msg);
        }
    }
    if (hf_is_qwen35(cfg)) {
        rc = hf_convert_qwen35(o, cfg, st, err);
        json_free(cfg);
        return rc;
    }
    if (read_config(o->dir, cfg, &h, err)) goto done;
    const gemma4_profile *p = gemma4_profile_match(h.n_layer, h.n_embd, h.assistant ? h.n_embd_out : 0, h.window);
    if (!p) {
        if (h.assistant)
            gem_err_set(err, "%s/config.json: %u layers of width %u for a target of width %u match no supported Gemma 4 "
                        "assistant profile", o->dir, h.n_layer, h.n_embd, h.n_embd_out);
        else
            gem_err_set(err, "%s/config.json: %u layers of width %u match no supported Gemma 4 profile", o->dir,
                        h.n_layer, h.n_embd);
        goto done;
    }
    if (load_shards(o->dir, &h, &c, err)) goto done;

    /* the reference's "auto" type: the first matrix's storage, f16 otherwise */
    uint32_t type = QT_F16;
    if (o->type >= 0) type = (uint32_t)o->type;
    else
        for (size_t i = 0; i < c.n; i++)
            if (c.e[i].t->n_dims >= 2) {
                type = c.e[i].t->dtype == ST_BF16 ? QT_BF16 : QT_F16;
                break;
            }
    const uint32_t ftype = type == QT_F32 ? 0 : type == QT_F16 ? 1 : 32;
    w = gguf_writer_new(GGUF_DEFAULT_ALIGNMENT);
    buf = malloc((size_t)CHUNK_ELEMS * 4);
    if (!w || !buf) {
        gem_err_set(err, "out of memory");
        goto done;
    }
    /* tensors first (the parameter count feeds general.size_label; the
     * embedding may shrink to the tokenizer's size, known after the keys) */
    uint64_t vocab_rows = 0;
    uint64_t n_params = GEMMA4_HEAD_DIM_FULL / 2;
    for (size_t i = 0; i < c.n; i++) {
        entry *e = &c.e[i];
        int vector = e->n_dims < 2 || (strlen(e->gguf) > 12 && !strcmp(e->gguf + strlen(e->gguf) - 12, "_norm.weight"));
        e->type = vector ? QT_F32 : type;
        n_params += e->ne[0] * e->ne[1];
    }
    /* vocab_rows is needed for the embedding cut, which changes n_params:
     * a dry pass over the tokenizer would double the work, so the cut is
     * applied after the keys, with the label from the uncut count (the
     * reference counts after the cut; equal whenever nothing is cut). */
    if (write_meta(w, o, cfg, &h, ftype, n_params, &vocab_rows, err)) goto done;
    if (check_manifest(o->dir, p, &c, vocab_rows, err)) goto done;

    static const float rope_one = 1.0f, rope_off = 1e30f;
    float rope[GEMMA4_HEAD_DIM_FULL / 2];
    const int n_rot = (int)(h.head_dim_full * h.rot_full / 2);
    for (int i = 0; i < (int)(GEMMA4_HEAD_DIM_FULL / 2); i++) rope[i] = i < n_rot ? rope_one : rope_off;
    uint64_t ne_rope[1] = {h.head_dim_full / 2};
    if (h.head_dim_full != GEMMA4_HEAD_DIM_FULL) {
        gem_err_set(err, "%s/config.json: global_head_dim %u, Gemma 4 has %u", o->dir, h.head_dim_full, GEMMA4_HEAD_DIM_FULL);
        goto done;
    }
    if (gguf_w_tensor(w, "rope_freqs.weight", QT_F32, 1, ne_rope, err)) goto done;
    uint64_t total = 0;
    for (size_t i = 0; i < c.n; i++) {
        entry *e = &c.e[i];
        uint64_t ne[2] = {e->ne[0], e->rows};
        if (gguf_w_tensor(w, e->gguf, e->type, e->n_dims, ne, err)) goto done;
        total += e->ne[0] * (e->n_dims == 2 ? e->rows : 1) * st_dtype_size(e->t->dtype);
    }
    if (!(fp = file_create(o->out_path, err))) goto done;
    if (gguf_writer_begin(w, fp, err) || gguf_writer_data(w, fp, rope, sizeof rope, err)) goto done;
    uint64_t done_bytes = 0, out_bytes = sizeof rope;
    for (size_t i = 0; i < c.n; i++) {
        if (write_entry(w, fp, &c.e[i], threads, buf, &done_bytes, total, o, err)) goto done;
        out_bytes += gguf_w_tensor_bytes(w, i + 1);
    }
    const int fin = hf_out_finish(w, fp, o->out_path, "Gemma 4", validate_out, err);
    fp = NULL;
    if (fin) goto done;
    if (st) *st = (gem_convert_stats){total, out_bytes, (uint32_t)c.n + 1, c.n_shards, type, p->name};
    rc = 0;
done:
    rc = file_close_output(fp, o->out_path, rc, err);
    free(buf);
    gguf_writer_free(w);
    for (uint32_t i = 0; i < c.n_shards; i++) st_close(c.shards[i]);
    free(c.e);
    free(h.swa);
    json_free(cfg);
    return rc;
}
