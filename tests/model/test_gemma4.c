/* Gemma 4 contract: manifests of every profile, synth determinism and
 * layout, binding, and rejection of each kind of mismatch with a message
 * naming the first offending item. Variants are made by rewriting a valid
 * synthetic file in memory with one edit. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "gguf/gguf_write.h"
#include "model/gemma4.h"
#include "model/gemma4_synth.h"
#include "quant/quant.h"
#include "synth_tiny.h"
#include "test.h"

static const char *vocab_path = "data/vocab/gemma-4.gguf";

static void test_manifests(void) {
    const gemma4_profile *p31 = gemma4_profile_find("gemma4-31b");
    const gemma4_profile *p12 = gemma4_profile_find("gemma4-12b");
    const gemma4_profile *p1 = gemma4_profile_find("gemma4-1b");
    const gemma4_profile *pt = gemma4_profile_find("gemma4-tiny");
    CHECK(p31 && p12 && p1 && pt && !gemma4_profile_find("gemma4-26b"));
    if (!p31 || !p12 || !p1 || !pt) return;
    CHECK(gemma4_manifest_count(p31) == 833);
    CHECK(gemma4_manifest_count(p12) == 667);
    /* 30.70 B text parameters for 31B (shared spec §5 memory math) */
    uint64_t n31 = gemma4_param_count(p31);
    CHECKF(n31 > 30650000000ull && n31 < 30750000000ull, "31b params %llu", (unsigned long long)n31);
    uint64_t n12 = gemma4_param_count(p12);
    CHECKF(n12 > 11000000000ull && n12 < 11960000000ull, "12b params %llu", (unsigned long long)n12);
    uint64_t n1 = gemma4_param_count(p1);
    CHECKF(n1 > 900000000ull && n1 < 1200000000ull, "1b params %llu", (unsigned long long)n1);
    for (int i = 0; i < gemma4_profile_count(); i++) {
        const gemma4_profile *p = gemma4_profile_at(i);
        CHECK(gemma4_layer_is_full(p, p->n_layer - 1));
        CHECK(p->n_head % p->n_head_kv_swa == 0 && p->n_head % p->n_head_kv_full == 0);
        size_t n = gemma4_manifest_count(p);
        gemma4_tensor_spec *s = malloc(n * sizeof *s);
        CHECK(gemma4_manifest(p, s, n) == n);
        CHECK(gemma4_manifest(p, s, n - 1) == 0);
        int dups = 0, full_v = 0;
        for (size_t a = 0; a < n; a++) {
            for (size_t b = a + 1; b < n; b++) dups += !strcmp(s[a].name, s[b].name);
            if (s[a].role == G4_ATTN_V && gemma4_layer_is_full(p, (uint32_t)s[a].layer)) full_v++;
        }
        CHECK(dups == 0 && full_v == 0);
        CHECK(!strcmp(s[0].name, "rope_freqs.weight") && !strcmp(s[1].name, "token_embd.weight"));
        if (gemma4_is_assistant(p)) { /* the converter's HF names post_projection, pre_projection sort last */
            CHECK(!strcmp(s[n - 3].name, "output_norm.weight"));
            CHECK(!strcmp(s[n - 2].name, "nextn.post_projection.weight") && s[n - 2].ne[0] == p->n_embd &&
                  s[n - 2].ne[1] == p->n_embd_out);
            CHECK(!strcmp(s[n - 1].name, "nextn.pre_projection.weight") && s[n - 1].ne[0] == 2 * p->n_embd_out &&
                  s[n - 1].ne[1] == p->n_embd);
            int kv = 0;
            for (size_t a = 0; a < n; a++)
                kv += s[a].role == G4_ATTN_K || s[a].role == G4_ATTN_V || s[a].role == G4_ATTN_K_NORM;
            CHECK(kv == 0); /* Q-only attention */
        } else {
            CHECK(!strcmp(s[n - 1].name, "output_norm.weight"));
        }
        free(s);
    }
    /* 31B shapes from the published file */
    gemma4_tensor_spec s[833];
    gemma4_manifest(p31, s, 833);
    int found = 0;
    for (int i = 0; i < 833; i++) {
        if (!strcmp(s[i].name, "blk.5.attn_q.weight")) found += s[i].ne[0] == 5376 && s[i].ne[1] == 16384;
        if (!strcmp(s[i].name, "blk.5.attn_k.weight")) found += s[i].ne[0] == 5376 && s[i].ne[1] == 2048;
        if (!strcmp(s[i].name, "blk.0.attn_v.weight")) found += s[i].ne[0] == 5376 && s[i].ne[1] == 4096;
        if (!strcmp(s[i].name, "blk.0.attn_output.weight")) found += s[i].ne[0] == 8192 && s[i].ne[1] == 5376;
        if (!strcmp(s[i].name, "blk.59.ffn_down.weight")) found += s[i].ne[0] == 21504 && s[i].ne[1] == 5376;
        if (!strcmp(s[i].name, "rope_freqs.weight")) found += s[i].ne[0] == 256 && s[i].n_dims == 1;
    }
    CHECK(found == 6);
    /* the published assistants: 49 tensors (the reference's 26B assistant
     * file has 49), about 470M parameters for the 31B one (shared spec §7) */
    const gemma4_profile *a31 = gemma4_profile_find("gemma4-31b-assistant");
    const gemma4_profile *a12 = gemma4_profile_find("gemma4-12b-assistant");
    CHECK(a31 && a12 && gemma4_is_assistant(a31) && !gemma4_is_assistant(p31));
    if (a31 && a12) {
        CHECK(gemma4_manifest_count(a31) == 49 && gemma4_manifest_count(a12) == 49);
        uint64_t na = gemma4_param_count(a31);
        CHECKF(na > 465000000ull && na < 475000000ull, "31b assistant params %llu", (unsigned long long)na);
        CHECK(a31->n_embd_out == p31->n_embd && a12->n_embd_out == p12->n_embd);
        CHECK(!strcmp(gemma4_arch(a31), "gemma4-assistant") && !strcmp(gemma4_arch(p31), "gemma4"));
        CHECK(gemma4_layer_is_full(a31, 3) && !gemma4_layer_is_full(a31, 2));
        CHECK(gemma4_profile_match(4, 1024, 5376, 1024) == a31 && gemma4_profile_match(4, 1024, 0, 1024) == NULL);
    }
    /* converter order: layers sorted as strings */
    CHECK(!strcmp(s[2].name, "blk.0.attn_norm.weight"));
    CHECK(!strncmp(s[2 + 14 + 14].name, "blk.10.", 7));
}

static int synth(const char *profile, const char *type, uint64_t seed, int threads, const char *out) {
    gemma4_synth_opts o = {0};
    o.profile = gemma4_profile_find(profile);
    o.type = (uint32_t)quant_type_from_name(type);
    o.embd_type = QT_Q8_0;
    o.seed = seed;
    o.vocab_path = vocab_path;
    o.out_path = out;
    o.threads = threads;
    gem_err err = {{0}};
    int rc = gemma4_synth(&o, &err);
    if (rc) fprintf(stderr, "synth: %s\n", err.msg);
    return rc;
}

static int files_equal(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int eq = fa && fb;
    static char ba[1 << 16], bb[1 << 16];
    while (eq) {
        size_t na = fread(ba, 1, sizeof ba, fa), nb = fread(bb, 1, sizeof bb, fb);
        if (na != nb || memcmp(ba, bb, na)) eq = 0;
        if (na == 0) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return eq;
}

/* path opened and bound (checked); *m NULL when binding failed, the
 * result NULL when opening did */
static gguf_file *open_bound(const char *path, gemma4_model **m) {
    gem_err err = {{0}};
    *m = NULL;
    gguf_file *f = gguf_open(path, &err);
    CHECKF(f != NULL, "%s", err.msg);
    if (!f) return NULL;
    *m = gemma4_bind(f, &err);
    CHECKF(*m != NULL, "%s", err.msg);
    return f;
}

/* The q4_k_m mix: q4_k matrices, q6_k for the embedding and for attn_v and
 * ffn_down in llama-quantize's "more bits" layers (tiny: 6 layers, ffn_down
 * of layers 2 and 5, attn_v of sliding layers 2 and 4, the same 37 q4_k
 * and 5 q6_k tensors gem quantize --type q4_k_m makes of it); k-quant
 * rows of norm about 1 like the other types'. */
static void test_synth_q4_k_m(const char *dir) {
    char a[512];
    snprintf(a, sizeof a, "%s/km.gguf", dir);
    gemma4_synth_opts o = {0};
    o.profile = gemma4_profile_find("gemma4-tiny");
    o.type = QT_Q4_K;
    o.q4_k_m = 1;
    o.embd_type = QT_Q6_K;
    o.seed = 3;
    o.vocab_path = vocab_path;
    o.out_path = a;
    gem_err err = {{0}};
    CHECKF(!gemma4_synth(&o, &err), "%s", err.msg);
    gemma4_model *m;
    gguf_file *f = open_bound(a, &m);
    if (!f) return;
    if (m) {
        int n4 = 0, n6 = 0;
        for (uint64_t i = 0; i < gguf_tensor_count(f); i++) {
            n4 += gguf_tensor_at(f, i)->type == QT_Q4_K;
            n6 += gguf_tensor_at(f, i)->type == QT_Q6_K;
        }
        CHECKF(n4 == 37 && n6 == 5, "%d q4_k, %d q6_k", n4, n6);
        CHECK(m->token_embd->type == QT_Q6_K);
        CHECK(m->layers[2].ffn_down->type == QT_Q6_K && m->layers[5].ffn_down->type == QT_Q6_K);
        CHECK(m->layers[1].ffn_down->type == QT_Q4_K && m->layers[3].ffn_down->type == QT_Q4_K);
        CHECK(m->layers[2].attn_v->type == QT_Q6_K && m->layers[4].attn_v->type == QT_Q6_K);
        CHECK(m->layers[3].attn_v->type == QT_Q4_K && m->layers[0].attn_q->type == QT_Q4_K);
        int64_t k = gguf_find_key(f, "general.file_type"), ft;
        CHECK(k >= 0 && !gguf_kv_int(f, (uint64_t)k, &ft) && ft == 15);
        float row[256];
        double ss = 0;
        for (int r = 0; r < 64; r++) {
            quant_dequant_row(QT_Q4_K, (const uint8_t *)m->layers[0].attn_q->data + 144 * r, row, 256);
            for (int i = 0; i < 256; i++) ss += (double)row[i] * row[i];
        }
        CHECKF(ss / 64 > 0.5 && ss / 64 < 2.0, "q4_k row norm^2 %g", ss / 64);
        gemma4_free(m);
    }
    gguf_close(f);
    remove(a);
    /* 1b: 18 layers, so the manifest's order (blk.1, blk.10, ...) is not
     * the layer order the mix counts attn_v in; gem quantize (byte-identical
     * to llama-quantize) gives blk.10.attn_v q6_k, blk.12.attn_v q4_k,
     * blk.4.ffn_down q6_k and blk.5.ffn_down q4_k */
    o.profile = gemma4_profile_find("gemma4-1b");
    const size_t n = gemma4_manifest_count(o.profile);
    gemma4_tensor_spec *sp = malloc(n * sizeof *sp);
    if (!sp || !gemma4_manifest(o.profile, sp, n)) {
        CHECK(0);
        free(sp);
        return;
    }
    int seen = 0;
    for (size_t i = 0; i < n; i++) {
        const uint32_t want = !strcmp(sp[i].name, "blk.10.attn_v.weight")   ? QT_Q6_K
                              : !strcmp(sp[i].name, "blk.12.attn_v.weight") ? QT_Q4_K
                              : !strcmp(sp[i].name, "blk.4.ffn_down.weight") ? QT_Q6_K
                              : !strcmp(sp[i].name, "blk.5.ffn_down.weight") ? QT_Q4_K
                                                                             : QT_COUNT;
        if (want == QT_COUNT) continue;
        seen++;
        CHECKF(gemma4_synth_type(&o, sp, n, i) == want, "%s", sp[i].name);
    }
    CHECK(seen == 4);
    free(sp);
    /* a drafter's 128-wide embedding rows are not whole q6_k blocks: q8_0 */
    o.profile = gemma4_profile_find("gemma4-tiny-assistant");
    o.embd_type = QT_Q6_K;
    snprintf(a, sizeof a, "%s/kma.gguf", dir);
    CHECKF(!gemma4_synth(&o, &err), "%s", err.msg);
    f = gguf_open(a, &err);
    const gguf_tensor *te = f ? gguf_find_tensor(f, "token_embd.weight") : NULL;
    CHECK(te != NULL && te->type == QT_Q8_0);
    if (f) gguf_close(f);
    remove(a);
}

static void test_synth(const char *dir) {
    char a[512], b[512], c[512];
    snprintf(a, sizeof a, "%s/a.gguf", dir);
    snprintf(b, sizeof b, "%s/b.gguf", dir);
    snprintf(c, sizeof c, "%s/c.gguf", dir);
    CHECK(!synth("gemma4-tiny", "q4_0", 5, 1, a));
    CHECK(!synth("gemma4-tiny", "q4_0", 5, 2, b));
    CHECK(!synth("gemma4-tiny", "q4_0", 6, 2, c));
    CHECK(files_equal(a, b));  /* thread count does not change the bytes */
    CHECK(!files_equal(a, c)); /* the seed does */
    gem_err err = {{0}};
    gemma4_model *m;
    gguf_file *f = open_bound(a, &m);
    if (!f) return;
    if (m) {
        const gemma4_profile *p = m->profile;
        CHECK(!strcmp(p->name, "gemma4-tiny"));
        CHECK(m->token_embd->type == QT_Q8_0 && m->token_embd->ne[1] == GEMMA4_N_VOCAB);
        CHECK(m->layers[5].is_full && m->layers[5].attn_v == NULL && m->layers[5].head_dim == 512);
        CHECK(!m->layers[4].is_full && m->layers[4].attn_v != NULL && m->layers[4].head_dim == 256);
        CHECK(m->layers[5].n_head_kv == p->n_head_kv_full && m->layers[0].n_head_kv == p->n_head_kv_swa);
        CHECK(m->layers[0].attn_q->type == QT_Q4_0 && m->layers[0].attn_norm->type == QT_F32);
        /* rope_freqs: 64 rotated pairs then frozen ones */
        const float *rf = m->rope_freqs->data;
        CHECK(rf[0] == 1.0f && rf[63] == 1.0f && rf[64] == 1e30f && rf[255] == 1e30f);
        /* norms and scalars are sane, matrices have rows of norm ~1 */
        const float *ls = m->layers[2].layer_output_scale->data;
        CHECK(ls[0] > 0.25f && ls[0] <= 1.0f);
        float row[256];
        quant_dequant_row(QT_Q4_0, m->layers[0].attn_q->data, row, 256);
        double ss = 0;
        for (int i = 0; i < 256; i++) ss += (double)row[i] * row[i];
        CHECKF(ss > 0.5 && ss < 2.0, "row norm^2 %g", ss);
        quant_dequant_row(QT_Q8_0, (const uint8_t *)m->token_embd->data + 272 * 1000, row, 256);
        ss = 0;
        for (int i = 0; i < 256; i++) ss += (double)row[i] * row[i];
        CHECKF(ss > 0.5 && ss < 2.0, "embedding row norm^2 %g", ss);
        uint64_t total = 0;
        for (uint64_t i = 0; i < gguf_tensor_count(f); i++) total += gguf_tensor_at(f, i)->n_bytes;
        CHECK(gemma4_decode_bytes(m) == total + 272);
        int64_t k = gguf_find_key(f, "general.file_type");
        int64_t ft;
        CHECK(k >= 0 && !gguf_kv_int(f, (uint64_t)k, &ft) && ft == 2);
        gemma4_free(m);
    }
    gguf_close(f);
    remove(b);
    remove(c);
    /* bad options */
    gemma4_synth_opts o = {0};
    o.profile = gemma4_profile_find("gemma4-tiny");
    o.type = QT_Q5_0;
    o.embd_type = QT_Q8_0;
    o.vocab_path = vocab_path;
    o.out_path = c;
    CHECK(gemma4_synth(&o, &err) == -1);
    CHECK_ERR(err.msg, "matrix type q5_0 is not allowed");
    o.type = QT_Q8_0;
    o.q4_k_m = 1;
    CHECK(gemma4_synth(&o, &err) == -1);
    CHECK_ERR(err.msg, "the q4_k_m mix needs q4_k matrices");
    o.q4_k_m = 0;
    o.type = QT_Q4_0;
    o.vocab_path = "tests/data/malformed/02_version_1.gguf";
    CHECK(gemma4_synth(&o, &err) == -1);
    CHECK_ERR(err.msg, "version 1");
    o.vocab_path = vocab_path;
    o.out_path = "/nonexistent-dir/x.gguf";
    CHECK(gemma4_synth(&o, &err) == -1);
    CHECK_ERR(err.msg, "cannot create");
}

/* ---- variants ---- */

typedef enum { SET_NONE, SET_U32, SET_U64, SET_STR, SET_F32, SET_BOOLS_ALL_TRUE, SET_U32_ARR_BAD3, SET_DROP } set_kind;

typedef struct {
    const char *name;
    const char *key; /* key to replace, drop or add */
    set_kind set;
    uint32_t u32;
    uint64_t u64;
    const char *str;
    float f32;
    const char *drop_tensor;
    const char *add_tensor;
    uint32_t add_type;
    uint32_t add_dims;
    uint64_t add_ne[2];
    const char *retype_tensor;
    uint32_t new_type;
    uint64_t new_ne1; /* 0 = keep */
    const char *expect;
} variant;

static int write_value(gguf_writer *w, const variant *v, const gemma4_profile *p, gem_err *err) {
    switch (v->set) {
    case SET_U32: return gguf_w_u32(w, v->key, v->u32, err);
    case SET_U64: return gguf_w_u64(w, v->key, v->u64, err);
    case SET_STR: return gguf_w_str(w, v->key, v->str, err);
    case SET_F32: return gguf_w_f32(w, v->key, v->f32, err);
    case SET_BOOLS_ALL_TRUE: {
        uint8_t b[64];
        memset(b, 1, sizeof b);
        return gguf_w_arr(w, v->key, GGUF_T_BOOL, b, p->n_layer, err);
    }
    case SET_U32_ARR_BAD3: {
        uint32_t a[64];
        for (uint32_t i = 0; i < p->n_layer; i++) a[i] = i == 3 ? 999 : p->n_ff;
        return gguf_w_arr(w, v->key, GGUF_T_UINT32, a, p->n_layer, err);
    }
    default: return 0;
    }
}

/* Rewrites src with one edit into memory; returns the parsed result. */
static gguf_file *rewrite(const gguf_file *src, const variant *v, char **buf, size_t *len) {
    gem_err err = {{0}};
    const gemma4_profile *p = gemma4_profile_find("gemma4-tiny");
    gguf_writer *w = gguf_writer_new(32);
    int replaced = 0;
    for (uint64_t i = 0; i < gguf_kv_count(src); i++) {
        const char *k = gguf_kv_key(src, i);
        if (v->key && !strcmp(k, v->key)) {
            replaced = 1;
            if (v->set != SET_DROP && write_value(w, v, p, &err)) return NULL;
            continue;
        }
        if (gguf_w_copy_kv(w, src, i, &err)) return NULL;
    }
    if (v->key && !replaced && write_value(w, v, p, &err)) return NULL;
    for (uint64_t i = 0; i < gguf_tensor_count(src); i++) {
        const gguf_tensor *t = gguf_tensor_at(src, i);
        if (v->drop_tensor && !strcmp(t->name, v->drop_tensor)) continue;
        uint64_t ne[2] = {t->ne[0], t->ne[1]};
        uint32_t type = t->type;
        if (v->retype_tensor && !strcmp(t->name, v->retype_tensor)) {
            type = v->new_type;
            if (v->new_ne1) ne[1] = v->new_ne1;
        }
        if (gguf_w_tensor(w, t->name, type, t->n_dims, ne, &err)) return NULL;
    }
    if (v->add_tensor && gguf_w_tensor(w, v->add_tensor, v->add_type, v->add_dims, v->add_ne, &err)) return NULL;
    FILE *fp = open_memstream(buf, len);
    gguf_writer_begin(w, fp, &err);
    uint64_t n = 0;
    for (uint64_t i = 0; i < gguf_tensor_count(src); i++) {
        const gguf_tensor *t = gguf_tensor_at(src, i);
        if (v->drop_tensor && !strcmp(t->name, v->drop_tensor)) continue;
        uint64_t bytes = gguf_w_tensor_bytes(w, n++);
        if (bytes == t->n_bytes) gguf_writer_data(w, fp, t->data, bytes, &err);
        else {
            void *z = calloc(1, bytes);
            gguf_writer_data(w, fp, z, bytes, &err);
            free(z);
        }
    }
    if (v->add_tensor) {
        uint64_t bytes = gguf_w_tensor_bytes(w, n);
        void *z = calloc(1, bytes);
        gguf_writer_data(w, fp, z, bytes, &err);
        free(z);
    }
    if (gguf_writer_finish(w, fp, &err)) fprintf(stderr, "rewrite: %s\n", err.msg);
    fclose(fp);
    gguf_writer_free(w);
    gguf_file *f = gguf_open_mem(*buf, *len, v->name, &err);
    if (!f) fprintf(stderr, "rewrite %s: %s\n", v->name, err.msg);
    return f;
}

static void test_variants(const char *path) {
    static const variant vs[] = {
        {.name = "identity", .expect = NULL},
        {.name = "no_window", .key = "gemma4.attention.sliding_window", .set = SET_DROP,
         .expect = "missing metadata key 'gemma4.attention.sliding_window'"},
        {.name = "window", .key = "gemma4.attention.sliding_window", .set = SET_U32, .u32 = 64,
         .expect = "is 64, expected 32"},
        {.name = "pattern", .key = "gemma4.attention.sliding_window_pattern", .set = SET_BOOLS_ALL_TRUE,
         .expect = "layer 5 is marked sliding"},
        {.name = "kv_scalar", .key = "gemma4.attention.head_count_kv", .set = SET_U32, .u32 = 2,
         .expect = "layer 5 needs 1"},
        {.name = "arch", .key = "general.architecture", .set = SET_STR, .str = "llama",
         .expect = "unsupported architecture 'llama' (gem supports: gemma4, gemma4-assistant, qwen35)"},
        {.name = "moe", .key = "gemma4.expert_count", .set = SET_U32, .u32 = 128, .expect = "MoE"},
        {.name = "ple", .key = "gemma4.embedding_length_per_layer_input", .set = SET_U32, .u32 = 256,
         .expect = "E2B/E4B"},
        {.name = "layers", .key = "gemma4.block_count", .set = SET_U32, .u32 = 7,
         .expect = "block_count 7 with embedding_length 256 matches no supported Gemma 4 profile"},
        {.name = "ffn_arr", .key = "gemma4.feed_forward_length", .set = SET_U32_ARR_BAD3, .expect = "[3] is 999"},
        {.name = "theta", .key = "gemma4.rope.freq_base", .set = SET_F32, .f32 = 10000.0f,
         .expect = "is 10000, expected 1e+06"},
        {.name = "keylen_float", .key = "gemma4.attention.key_length", .set = SET_F32, .f32 = 512.0f,
         .expect = "expected an integer"},
        /* an integer type, but past int64: the value is named, not the type blamed */
        {.name = "ctx_u64_huge", .key = "gemma4.context_length", .set = SET_U64, .u64 = (1ull << 63) + 5,
         .expect = "'gemma4.context_length': is 9223372036854775813, beyond the integers gem reads"},
        {.name = "unknown_key", .key = "gemma4.rope.scaling.type", .set = SET_STR, .str = "yarn",
         .expect = "'gemma4.rope.scaling.type': unknown key"},
        {.name = "tok_model", .key = "tokenizer.ggml.model", .set = SET_STR, .str = "llama",
         .expect = "tokenizer.ggml.model': is 'llama', expected 'gemma4'"},
        {.name = "tok_missing", .key = "tokenizer.ggml.tokens", .set = SET_DROP,
         .expect = "missing metadata key 'tokenizer.ggml.tokens'"},
        {.name = "missing_tensor", .drop_tensor = "blk.3.ffn_up.weight", .expect = "missing tensor 'blk.3.ffn_up.weight'"},
        {.name = "full_attn_v", .add_tensor = "blk.5.attn_v.weight", .add_type = QT_Q4_0, .add_dims = 2,
         .add_ne = {256, 512}, .expect = "'blk.5.attn_v.weight': full-attention layers use K as V"},
        {.name = "extra_output", .add_tensor = "output.weight", .add_type = QT_Q4_0, .add_dims = 2,
         .add_ne = {256, 262144}, .expect = "unexpected tensor 'output.weight'"},
        {.name = "q2k_matrix", .retype_tensor = "blk.0.attn_q.weight", .new_type = QT_Q2_K,
         .expect = "'blk.0.attn_q.weight' has storage type q2_k"},
        {.name = "f16_norm", .retype_tensor = "blk.0.attn_norm.weight", .new_type = QT_F16,
         .expect = "'blk.0.attn_norm.weight' has storage type f16, the contract allows f32"},
        {.name = "q6k_embd_ok", .retype_tensor = "token_embd.weight", .new_type = QT_Q6_K, .expect = NULL},
        {.name = "q2k_embd", .retype_tensor = "token_embd.weight", .new_type = QT_Q2_K,
         .expect = "'token_embd.weight' has storage type q2_k"},
        {.name = "embd_shape", .retype_tensor = "token_embd.weight", .new_type = QT_Q8_0, .new_ne1 = 1000,
         .expect = "'token_embd.weight' has shape [256, 1000], profile gemma4-tiny needs [256, 262144]"},
    };
    gem_err err = {{0}};
    gguf_file *src = gguf_open(path, &err);
    CHECKF(src != NULL, "%s", err.msg);
    if (!src) return;
    for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++) {
        char *buf = NULL;
        size_t len = 0;
        gguf_file *f = rewrite(src, &vs[i], &buf, &len);
        CHECKF(f != NULL, "variant %s", vs[i].name);
        if (f) {
            const gemma4_profile *p = NULL;
            int rc = gemma4_validate(f, &p, &err);
            if (vs[i].expect) {
                CHECKF(rc == -1, "variant %s accepted", vs[i].name);
                CHECK_ERR(err.msg, vs[i].expect);
            } else {
                CHECKF(rc == 0 && p, "variant %s: %s", vs[i].name, err.msg);
            }
            gguf_close(f);
        }
        free(buf);
    }
    gguf_close(src);
}

static int synth_asst(const char *profile, const char *path) {
    gem_err err = {{0}};
    int rc = test_synth_f32(profile, path, 3, 1, &err);
    CHECKF(rc == 0, "%s: %s", profile, err.msg);
    return rc;
}

/* Drafter files: synth writes them, the contract binds them, and pairing
 * names what does not fit. */
static void test_assistant(const char *dir) {
    char ta[512], tt[512], td[512];
    snprintf(ta, sizeof ta, "%s/asst.gguf", dir);
    snprintf(tt, sizeof tt, "%s/tiny.gguf", dir);
    snprintf(td, sizeof td, "%s/demo-asst.gguf", dir);
    if (synth_asst("gemma4-tiny-assistant", ta) || synth_asst("gemma4-tiny", tt) ||
        synth_asst("gemma4-demo-assistant", td))
        return;
    gem_err err = {{0}};
    gguf_file *fa = gguf_open(ta, &err), *ft = gguf_open(tt, &err), *fd = gguf_open(td, &err);
    CHECK(fa && ft && fd);
    gemma4_model *a = fa ? gemma4_bind(fa, &err) : NULL;
    CHECKF(a != NULL, "%s", err.msg);
    gemma4_model *t = ft ? gemma4_bind(ft, &err) : NULL;
    gemma4_model *d = fd ? gemma4_bind(fd, &err) : NULL;
    CHECK(t && d);
    if (a && t && d) {
        CHECK(!strcmp(a->profile->name, "gemma4-tiny-assistant") && !strcmp(d->profile->name, "gemma4-demo-assistant"));
        CHECK(a->nextn_pre && a->nextn_post && a->layers[0].attn_k == NULL && a->layers[3].attn_v == NULL);
        CHECK(a->layers[3].is_full && a->layers[3].head_dim == 512 && a->layers[0].head_dim == 256);
        CHECK(a->token_embd->ne[0] == 128 && a->nextn_pre->ne[0] == 512 && a->nextn_post->ne[1] == 256);
        CHECK(t->nextn_pre == NULL);
        err.msg[0] = 0;
        CHECKF(gemma4_pair_check(t, a, &err) == 0, "%s", err.msg);
        /* the demo drafter has the demo model's window, not tiny's 32 */
        CHECK(gemma4_pair_check(t, d, &err) == -1);
        CHECKF(strstr(err.msg, "attention.sliding_window 256 of the drafter is not the target's 32") &&
                   strstr(err.msg, td) && strstr(err.msg, tt),
               "%s", err.msg);
        CHECK(gemma4_pair_check(t, t, &err) == -1);
        CHECKF(strstr(err.msg, "is a target model (gemma4-tiny), not an MTP drafter"), "%s", err.msg);
        CHECK(gemma4_pair_check(a, a, &err) == -1);
        CHECKF(strstr(err.msg, "is an MTP drafter (gemma4-tiny-assistant), not a target model"), "%s", err.msg);
    }
    /* a target of another width (the tiny binding under the 1b profile:
     * the check reads profiles, and a 1b file would cost gigabytes) */
    if (a && t) {
        gemma4_model wide = *t;
        wide.profile = gemma4_profile_find("gemma4-1b");
        CHECK(gemma4_pair_check(&wide, a, &err) == -1);
        CHECKF(strstr(err.msg, "embedding_length_out 256 of the drafter is not the target's embedding_length 1536"),
               "%s", err.msg);
    }
    gemma4_free(a);
    gemma4_free(t);
    gemma4_free(d);
    gguf_close(fa);
    gguf_close(ft);
    gguf_close(fd);
    remove(ta);
    remove(tt);
    remove(td);
}

int main(void) {
    char dir[] = "/tmp/gem-test-XXXXXX";
    if (!mkdtemp(dir)) return 1;
    test_manifests();
    test_synth(dir);
    test_synth_q4_k_m(dir);
    test_assistant(dir);
    char a[512];
    snprintf(a, sizeof a, "%s/a.gguf", dir);
    test_variants(a);
    remove(a);
    rmdir(dir);
    return test_report("test_gemma4");
}
