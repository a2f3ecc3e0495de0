/* The Qwen3.5 contract (model/qwen35.h): the manifest's names and shapes
 * for the published 27B, synth's tiny file passing validation and binding,
 * and every kind of deviation refused with an error naming the key or
 * tensor (each deviation written as a copy of a valid file with one thing
 * changed). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "gguf/gguf_write.h"
#include "model/qwen35.h"
#include "quant/quant.h"
#include "synth_tiny.h"
#include "test.h"

static const qwen35_tensor_spec *find_spec(const qwen35_tensor_spec *s, size_t n, const char *name) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(s[i].name, name)) return &s[i];
    return NULL;
}

static void test_manifest_27b(void) {
    const qwen35_profile *p = qwen35_profile_find("qwen35-27b");
    CHECK(p != NULL);
    if (!p) return;
    size_t n = qwen35_manifest_count(p);
    /* 48 GDN layers x 14 + 16 attention layers x 11 + embd, output, norm */
    CHECK(n == 48 * 14 + 16 * 11 + 3);
    qwen35_tensor_spec *s = malloc(n * sizeof *s);
    CHECK(qwen35_manifest(p, s, n) == n);
    CHECK(qwen35_manifest(p, s, n - 1) == 0);
    const struct {
        const char *name;
        uint32_t nd;
        uint64_t a, b;
    } want[] = {
        {"token_embd.weight", 2, 5120, 248320}, {"output.weight", 2, 5120, 248320},
        {"output_norm.weight", 1, 5120, 1},     {"blk.0.attn_qkv.weight", 2, 5120, 10240},
        {"blk.0.attn_gate.weight", 2, 5120, 6144}, {"blk.0.ssm_beta.weight", 2, 5120, 48},
        {"blk.0.ssm_alpha.weight", 2, 5120, 48}, {"blk.0.ssm_conv1d.weight", 2, 4, 10240},
        {"blk.0.ssm_dt.bias", 1, 48, 1},         {"blk.0.ssm_a", 1, 48, 1},
        {"blk.0.ssm_norm.weight", 1, 128, 1},    {"blk.0.ssm_out.weight", 2, 6144, 5120},
        {"blk.3.attn_q.weight", 2, 5120, 12288}, {"blk.3.attn_k.weight", 2, 5120, 1024},
        {"blk.3.attn_v.weight", 2, 5120, 1024},  {"blk.3.attn_output.weight", 2, 6144, 5120},
        {"blk.3.attn_q_norm.weight", 1, 256, 1}, {"blk.63.attn_k_norm.weight", 1, 256, 1},
        {"blk.62.ffn_gate.weight", 2, 5120, 17408}, {"blk.62.ffn_down.weight", 2, 17408, 5120},
        {"blk.1.post_attention_norm.weight", 1, 5120, 1},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const qwen35_tensor_spec *t = find_spec(s, n, want[i].name);
        CHECKF(t && t->n_dims == want[i].nd && t->ne[0] == want[i].a && (want[i].nd == 1 || t->ne[1] == want[i].b),
               "%s", want[i].name);
    }
    CHECK(!find_spec(s, n, "blk.3.attn_qkv.weight"));
    CHECK(!find_spec(s, n, "blk.0.attn_q.weight"));
    /* the spec's parameter count: 26.90 B text */
    const uint64_t params = qwen35_param_count(p);
    CHECKF(params > 26.85e9 && params < 26.95e9, "%llu", (unsigned long long)params);
    free(s);
}

/* A copy of src with one change: a key dropped or replaced by a u32, a
 * tensor dropped, reshaped (ne[0] + 1 of f32 data) or one added. */
typedef struct {
    const char *drop_key, *set_key;
    uint32_t set_val;
    const char *drop_tensor, *reshape_tensor, *add_tensor;
} change;

static int rewrite(const char *src, const char *dst, const change *c) {
    gem_err err = {{0}};
    gguf_file *f = gguf_open(src, &err);
    if (!f) return -1;
    gguf_writer *w = gguf_writer_new(GGUF_DEFAULT_ALIGNMENT);
    int rc = -1, set_done = 0;
    FILE *fp = NULL;
    for (uint64_t i = 0; i < gguf_kv_count(f); i++) {
        const char *k = gguf_kv_key(f, i);
        if (c->drop_key && !strcmp(k, c->drop_key)) continue;
        if (c->set_key && !strcmp(k, c->set_key)) {
            if (gguf_w_u32(w, k, c->set_val, &err)) goto done;
            set_done = 1;
            continue;
        }
        if (gguf_w_copy_kv(w, f, i, &err)) goto done;
    }
    if (c->set_key && !set_done && gguf_w_u32(w, c->set_key, c->set_val, &err)) goto done;
    for (uint64_t i = 0; i < gguf_tensor_count(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        if (c->drop_tensor && !strcmp(t->name, c->drop_tensor)) continue;
        uint64_t ne[2] = {t->ne[0], t->ne[1]};
        if (c->reshape_tensor && !strcmp(t->name, c->reshape_tensor)) ne[0]++;
        if (gguf_w_tensor(w, t->name, t->type, t->n_dims, ne, &err)) goto done;
    }
    uint64_t one = 4;
    if (c->add_tensor && gguf_w_tensor(w, c->add_tensor, QT_F32, 1, &one, &err)) goto done;
    if (!(fp = fopen(dst, "wb")) || gguf_writer_begin(w, fp, &err)) goto done;
    for (uint64_t i = 0; i < gguf_tensor_count(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        if (c->drop_tensor && !strcmp(t->name, c->drop_tensor)) continue;
        uint64_t bytes = t->n_bytes;
        if (c->reshape_tensor && !strcmp(t->name, c->reshape_tensor)) bytes += 4 * (t->n_dims > 1 ? t->ne[1] : 1);
        char *buf = calloc(1, bytes);
        memcpy(buf, t->data, t->n_bytes);
        int wr = gguf_writer_data(w, fp, buf, bytes, &err);
        free(buf);
        if (wr) goto done;
    }
    float z[4] = {0};
    if (c->add_tensor && gguf_writer_data(w, fp, z, sizeof z, &err)) goto done;
    rc = gguf_writer_finish(w, fp, &err);
done:
    if (fp) fclose(fp);
    gguf_writer_free(w);
    gguf_close(f);
    if (rc) fprintf(stderr, "rewrite: %s\n", err.msg);
    return rc;
}

static void expect_refused(const char *good, const change *c, const char *want) {
    char bad[] = "/tmp/gem-q35bad-XXXXXX";
    test_tmp_file(bad);
    CHECK(!rewrite(good, bad, c));
    gem_err err = {{0}};
    gguf_file *f = gguf_open(bad, &err);
    CHECKF(f != NULL, "%s", err.msg);
    if (f) {
        const qwen35_profile *p;
        CHECKF(qwen35_validate(f, &p, &err) != 0, "accepted a file expected to fail with '%s'", want);
        CHECK_ERR(err.msg, want);
        gguf_close(f);
    }
    remove(bad);
}

static void test_tiny_file(void) {
    char path[] = "/tmp/gem-q35-XXXXXX";
    test_tmp_file(path);
    gem_err err = {{0}};
    CHECKF(!test_synth_qwen35_tiny(path, 3, 2, &err), "%s", err.msg);
    gguf_file *f = gguf_open(path, &err);
    CHECKF(f != NULL, "%s", err.msg);
    if (!f) return;
    qwen35_model *m = qwen35_bind(f, &err);
    CHECKF(m != NULL, "%s", err.msg);
    if (m) {
        CHECK(m->profile == qwen35_profile_find("qwen35-tiny"));
        CHECK(!m->layers[0].is_attn && !m->layers[2].is_attn && m->layers[3].is_attn);
        CHECK(m->layers[0].attn_qkv && m->layers[0].ssm_a && !m->layers[0].attn_q);
        CHECK(m->layers[3].attn_q && m->layers[3].attn_k_norm && !m->layers[3].ssm_out);
        CHECK(m->output && m->output != m->token_embd);
        int64_t i = gguf_find_key(f, "tokenizer.ggml.tokens");
        CHECK(i >= 0 && gguf_kv_arr_len(f, (uint64_t)i) == 512);
        CHECK(gguf_find_key(f, "tokenizer.ggml.eos_token_id") < 0); /* 151643 is beyond the tiny vocabulary */
        qwen35_free(m);
    }
    gguf_close(f);
    /* the 27B's vocabulary is padded to its embedding: [PAD] tokens */
    const change cases[][1] = {
        {{.drop_key = "qwen35.ssm.state_size"}},
        {{.set_key = "qwen35.ssm.group_count", .set_val = 4}},
        {{.set_key = "qwen35.attention.head_count_kv", .set_val = 2}},
        {{.set_key = "qwen35.nextn_predict_layers", .set_val = 1}},
        {{.set_key = "qwen35.rope.scaling.factor", .set_val = 2}},
        {{.set_key = "qwen35.block_count", .set_val = 5}},
        {{.drop_key = "qwen35.rope.dimension_sections"}},
        {{.drop_tensor = "blk.1.ssm_a"}},
        {{.drop_tensor = "output.weight"}},
        {{.reshape_tensor = "blk.3.attn_q_norm.weight"}},
        {{.add_tensor = "blk.3.attn_qkv.weight"}},
        {{.add_tensor = "blk.0.nextn.eh_proj.weight"}},
    };
    const char *want[] = {
        "missing metadata key 'qwen35.ssm.state_size'",
        "key 'qwen35.ssm.group_count': is 4, expected 2",
        "key 'qwen35.attention.head_count_kv': is 2, expected 1",
        "MTP block is not supported",
        "'qwen35.rope.scaling.factor': unknown key",
        "matches no supported Qwen3.5 profile",
        "missing metadata key 'qwen35.rope.dimension_sections'",
        "missing tensor 'blk.1.ssm_a'",
        "missing tensor 'output.weight'",
        "tensor 'blk.3.attn_q_norm.weight' has shape [65], profile qwen35-tiny needs [64]",
        "unexpected tensor 'blk.3.attn_qkv.weight'",
        "unexpected tensor 'blk.0.nextn.eh_proj.weight'",
    };
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) expect_refused(path, cases[k], want[k]);
    remove(path);
}

int main(void) {
    test_manifest_27b();
    test_tiny_file();
    return test_report("test_qwen35");
}
