/* gem convert for Qwen3.5 checkpoints (convert/hf_qwen35.h) and parity with
 * transformers.
 *
 * 1. A Qwen3_5ForConditionalGeneration folder written here (random f32
 *    weights in the HF layout, a vision tensor and an mtp tensor to drop)
 *    converts into a file the qwen35 contract accepts, with the reference
 *    converter's transforms checked element by element: A_log -> -exp,
 *    1 + w on the zero-centred norms (not the GDN norm), the V heads moved
 *    from grouped to tiled order in in_proj_qkv, in_proj_z, in_proj_a,
 *    dt_bias, conv1d and out_proj's columns, conv1d squeezed to [4, C].
 * 2. The goldens of tests/data/qwen35/make_goldens.py (transformers' own
 *    Qwen3.5 classes, float32): the saved folder is converted with gem
 *    convert and gem's logits at every position of the 130-token prompt
 *    (tiles of 48, so three prefill tiles and three 64-token DeltaNet
 *    chunks) must be within 1e-3 of transformers', on the scalar reference
 *    and the fast path. While tests/data/qwen35/logits-tiny.bin is absent
 *    (it is produced on a machine with PyTorch) this part is skipped with a
 *    message; part 1 always runs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/backend.h"
#include "convert/hf.h"
#include "gguf/gguf.h"
#include "model/qwen35.h"
#include "model/qwen35_run.h"
#include "quant/quant.h"
#include "test.h"

#define TOL 1e-3

/* ---- a synthetic checkpoint ---- */

typedef struct {
    char name[96];
    int nd;
    uint64_t shape[3];
    float *data;
} hf_t;

static uint64_t rs = 99;
static float frand(void) {
    rs = rs * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rs >> 40) & 0xffffff) / (float)0x800000 - 1.0f;
}

static void add(hf_t *t, int *n, const char *name, int nd, uint64_t a, uint64_t b, uint64_t c) {
    hf_t *x = &t[(*n)++];
    snprintf(x->name, sizeof x->name, "%s", name);
    x->nd = nd;
    x->shape[0] = a, x->shape[1] = b, x->shape[2] = c;
    uint64_t k = a * (nd > 1 ? b : 1) * (nd > 2 ? c : 1);
    x->data = malloc(k * 4);
    for (uint64_t i = 0; i < k; i++) x->data[i] = frand() * 0.3f;
}

static uint64_t numel(const hf_t *x) { return x->shape[0] * (x->nd > 1 ? x->shape[1] : 1) * (x->nd > 2 ? x->shape[2] : 1); }

static int cmp_hf(const void *a, const void *b) { return strcmp(((const hf_t *)a)->name, ((const hf_t *)b)->name); }

static int write_safetensors(const char *path, hf_t *t, int n) {
    qsort(t, (size_t)n, sizeof *t, cmp_hf);
    char *hdr = malloc(1 << 16);
    size_t len = 0;
    uint64_t off = 0;
    len += (size_t)sprintf(hdr + len, "{");
    for (int i = 0; i < n; i++) {
        len += (size_t)sprintf(hdr + len, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[", i ? "," : "", t[i].name);
        for (int d = 0; d < t[i].nd; d++) len += (size_t)sprintf(hdr + len, "%s%llu", d ? "," : "", (unsigned long long)t[i].shape[d]);
        len += (size_t)sprintf(hdr + len, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                               (unsigned long long)(off + numel(&t[i]) * 4));
        off += numel(&t[i]) * 4;
    }
    len += (size_t)sprintf(hdr + len, "}");
    while (len % 8) hdr[len++] = ' ';
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    uint64_t hl = len;
    fwrite(&hl, 8, 1, f);
    fwrite(hdr, 1, len, f);
    for (int i = 0; i < n; i++) fwrite(t[i].data, 4, numel(&t[i]), f);
    free(hdr);
    return fclose(f);
}

static const hf_t *find(const hf_t *t, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(t[i].name, name)) return &t[i];
    return NULL;
}

static const float *tensor_f32(const gguf_file *g, const char *name) {
    const gguf_tensor *t = gguf_find_tensor(g, name);
    return t && t->type == QT_F32 ? t->data : NULL;
}

static void test_synthetic(void) {
    const qwen35_profile *p = qwen35_profile_find("qwen35-tiny");
    const uint64_t H = p->n_embd, F = p->n_ff, V = p->n_vocab, d = p->d_state, nk = p->n_k_heads, nv = p->n_v_heads;
    const uint64_t C = qwen35_conv_dim(p), Vd = nv * d, hd = p->head_dim;
    char dir[] = "/tmp/gem-q35hf-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    hf_t t[128];
    int n = 0;
    char nm[96];
    add(t, &n, "lm_head.weight", 2, V, H, 0);
    add(t, &n, "model.language_model.embed_tokens.weight", 2, V, H, 0);
    add(t, &n, "model.language_model.norm.weight", 1, H, 0, 0);
    add(t, &n, "model.visual.blocks.0.attn.qkv.weight", 2, 8, 4, 0);
    add(t, &n, "mtp.fc.weight", 2, 4, 8, 0);
    for (int il = 0; il < 4; il++) {
#define L(s, nd, a, b, c) snprintf(nm, sizeof nm, "model.language_model.layers.%d.%s", il, s), add(t, &n, nm, nd, a, b, c)
        L("input_layernorm.weight", 1, H, 0, 0);
        L("post_attention_layernorm.weight", 1, H, 0, 0);
        L("mlp.gate_proj.weight", 2, F, H, 0);
        L("mlp.up_proj.weight", 2, F, H, 0);
        L("mlp.down_proj.weight", 2, H, F, 0);
        if (il == 3) {
            L("self_attn.q_proj.weight", 2, 2 * p->n_head * hd, H, 0);
            L("self_attn.k_proj.weight", 2, p->n_head_kv * hd, H, 0);
            L("self_attn.v_proj.weight", 2, p->n_head_kv * hd, H, 0);
            L("self_attn.o_proj.weight", 2, H, p->n_head * hd, 0);
            L("self_attn.q_norm.weight", 1, hd, 0, 0);
            L("self_attn.k_norm.weight", 1, hd, 0, 0);
        } else {
            L("linear_attn.A_log", 1, nv, 0, 0);
            L("linear_attn.dt_bias", 1, nv, 0, 0);
            L("linear_attn.conv1d.weight", 3, C, 1, 4);
            L("linear_attn.in_proj_qkv.weight", 2, C, H, 0);
            L("linear_attn.in_proj_z.weight", 2, Vd, H, 0);
            L("linear_attn.in_proj_a.weight", 2, nv, H, 0);
            L("linear_attn.in_proj_b.weight", 2, nv, H, 0);
            L("linear_attn.norm.weight", 1, d, 0, 0);
            L("linear_attn.out_proj.weight", 2, H, Vd, 0);
        }
#undef L
    }
    char path[256];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CHECK(!write_safetensors(path, t, n));
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "{\"architectures\":[\"Qwen3_5ForConditionalGeneration\"],\"model_type\":\"qwen3_5\","
               "\"tie_word_embeddings\":false,\"text_config\":{\"vocab_size\":512,\"hidden_size\":64,"
               "\"intermediate_size\":128,\"num_hidden_layers\":4,\"num_attention_heads\":2,\"num_key_value_heads\":1,"
               "\"head_dim\":64,\"linear_conv_kernel_dim\":4,\"linear_key_head_dim\":64,\"linear_value_head_dim\":64,"
               "\"linear_num_key_heads\":2,\"linear_num_value_heads\":4,\"rms_norm_eps\":1e-06,"
               "\"max_position_embeddings\":4096,\"tie_word_embeddings\":false,\"layer_types\":[\"linear_attention\","
               "\"linear_attention\",\"linear_attention\",\"full_attention\"],\"rope_parameters\":{\"rope_type\":"
               "\"default\",\"rope_theta\":10000000.0,\"partial_rotary_factor\":0.25,\"mrope_section\":[2,3,3]}}}");
    fclose(f);
    char out[300];
    snprintf(out, sizeof out, "%s/out.gguf", dir);
    gem_convert_opts o = {0};
    o.dir = dir;
    o.out_path = out;
    o.type = QT_F32;
    o.vocab_path = "data/vocab/qwen35.gguf";
    o.threads = 1;
    gem_err err = {{0}};
    gem_convert_stats st = {0};
    CHECKF(!gem_convert(&o, &st, &err), "%s", err.msg);
    gguf_file *g = gguf_open(out, &err);
    CHECKF(g != NULL, "%s", err.msg);
    if (g) {
        const qwen35_profile *vp = NULL;
        CHECKF(!qwen35_validate(g, &vp, &err) && vp == p, "%s", err.msg);
        CHECK(gguf_tensor_count(g) == qwen35_manifest_count(p));
        /* tiled position q holds grouped head (q % nk) * r + q / nk */
        const uint64_t r = nv / nk;
#define SRC(q) (((q) % nk) * r + (q) / nk)
        const float *a = tensor_f32(g, "blk.1.ssm_a"), *dt = tensor_f32(g, "blk.1.ssm_dt.bias");
        const hf_t *al = find(t, n, "model.language_model.layers.1.linear_attn.A_log");
        const hf_t *db = find(t, n, "model.language_model.layers.1.linear_attn.dt_bias");
        int bad = !a || !dt;
        for (uint64_t q = 0; !bad && q < nv; q++)
            bad |= a[q] != -expf(al->data[SRC(q)]) || dt[q] != db->data[SRC(q)];
        CHECKF(!bad, "ssm_a / ssm_dt.bias");
        const float *nrm = tensor_f32(g, "blk.3.attn_q_norm.weight"), *gn = tensor_f32(g, "blk.0.ssm_norm.weight");
        const hf_t *hn = find(t, n, "model.language_model.layers.3.self_attn.q_norm.weight");
        const hf_t *hg = find(t, n, "model.language_model.layers.0.linear_attn.norm.weight");
        bad = !nrm || !gn;
        for (uint64_t i = 0; !bad && i < hd; i++) bad |= nrm[i] != hn->data[i] + 1.0f;
        for (uint64_t i = 0; !bad && i < d; i++) bad |= gn[i] != hg->data[i];
        CHECKF(!bad, "norms: 1 + w, the GDN norm as is");
        const float *qkv = tensor_f32(g, "blk.2.attn_qkv.weight"), *z = tensor_f32(g, "blk.2.attn_gate.weight");
        const float *cv = tensor_f32(g, "blk.2.ssm_conv1d.weight"), *op = tensor_f32(g, "blk.2.ssm_out.weight");
        const float *ba = tensor_f32(g, "blk.2.ssm_alpha.weight");
        const hf_t *hq = find(t, n, "model.language_model.layers.2.linear_attn.in_proj_qkv.weight");
        const hf_t *hz = find(t, n, "model.language_model.layers.2.linear_attn.in_proj_z.weight");
        const hf_t *hc = find(t, n, "model.language_model.layers.2.linear_attn.conv1d.weight");
        const hf_t *ho = find(t, n, "model.language_model.layers.2.linear_attn.out_proj.weight");
        const hf_t *ha = find(t, n, "model.language_model.layers.2.linear_attn.in_proj_a.weight");
        bad = !qkv || !z || !cv || !op || !ba;
        const uint64_t kd2 = 2 * nk * d;
        for (uint64_t row = 0; !bad && row < C; row++) {
            const uint64_t src = row < kd2 ? row : kd2 + SRC((row - kd2) / d) * d + (row - kd2) % d;
            bad |= memcmp(qkv + row * H, hq->data + src * H, H * 4) != 0;
            bad |= memcmp(cv + row * 4, hc->data + src * 4, 16) != 0;
        }
        for (uint64_t row = 0; !bad && row < Vd; row++)
            bad |= memcmp(z + row * H, hz->data + (SRC(row / d) * d + row % d) * H, H * 4) != 0;
        for (uint64_t row = 0; !bad && row < nv; row++) bad |= memcmp(ba + row * H, ha->data + SRC(row) * H, H * 4) != 0;
        for (uint64_t row = 0; !bad && row < H; row++)
            for (uint64_t c = 0; c < Vd; c++) bad |= op[row * Vd + c] != ho->data[row * Vd + SRC(c / d) * d + c % d];
        CHECKF(!bad, "the V-head reorder of qkv, z, conv1d, alpha and out_proj");
        const gguf_tensor *ct = gguf_find_tensor(g, "blk.0.ssm_conv1d.weight");
        CHECK(ct && ct->n_dims == 2 && ct->ne[0] == 4 && ct->ne[1] == C);
        int64_t ki = gguf_find_key(g, "qwen35.rope.dimension_sections");
        int64_t s0 = -1, s3 = -1;
        CHECK(ki >= 0 && !gguf_kv_arr_int(g, (uint64_t)ki, 0, &s0) && !gguf_kv_arr_int(g, (uint64_t)ki, 3, &s3) &&
              s0 == 2 && s3 == 0);
        gguf_close(g);
    }
    /* a config that is not the profile's is refused by field */
    FILE *f2 = fopen(path, "w");
    fprintf(f2, "{\"architectures\":[\"Qwen3_5ForConditionalGeneration\"],\"text_config\":{\"vocab_size\":512,"
                "\"hidden_size\":64,\"intermediate_size\":128,\"num_hidden_layers\":4,\"num_attention_heads\":2,"
                "\"num_key_value_heads\":1,\"head_dim\":64,\"linear_conv_kernel_dim\":4,\"linear_key_head_dim\":64,"
                "\"linear_value_head_dim\":64,\"linear_num_key_heads\":4,\"linear_num_value_heads\":4}}");
    fclose(f2);
    CHECK(gem_convert(&o, &st, &err) != 0);
    CHECK_ERR(err.msg, "'linear_num_key_heads' differs from profile qwen35-tiny");
    for (int i = 0; i < n; i++) free(t[i].data);
    remove(out);
    remove(path);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    remove(path);
    rmdir(dir);
}

/* ---- transformers goldens ---- */

static void test_goldens(void) {
    const char *bin = "tests/data/qwen35/logits-tiny.bin";
    size_t len;
    char *raw = test_slurp(bin, &len);
    if (!raw) {
        printf("test_qwen35_hf: SKIPPED the transformers parity check: %s is absent (produce it with "
               "`python3 tests/data/qwen35/make_goldens.py` on a machine with PyTorch and transformers)\n", bin);
        return;
    }
    uint32_t n_pos = 0, n_vocab = 0;
    CHECK(len > 16 && !memcmp(raw, "GEMQ35G1", 8));
    memcpy(&n_pos, raw + 8, 4);
    memcpy(&n_vocab, raw + 12, 4);
    CHECK(len == 16 + (size_t)n_pos * 4 + (size_t)n_pos * n_vocab * 4);
    const int32_t *ids = (const int32_t *)(raw + 16);
    const float *want = (const float *)(raw + 16 + (size_t)n_pos * 4);
    char out[] = "/tmp/gem-q35gold-XXXXXX";
    int fd = mkstemp(out);
    if (fd >= 0) close(fd);
    gem_convert_opts o = {0};
    o.dir = "tests/data/qwen35/hf-tiny";
    o.out_path = out;
    o.type = QT_F32;
    o.vocab_path = "data/vocab/qwen35.gguf";
    gem_err err = {{0}};
    gem_convert_stats st = {0};
    CHECKF(!gem_convert(&o, &st, &err), "%s", err.msg);
    gguf_file *g = gguf_open(out, &err);
    qwen35_model *m = g ? qwen35_bind(g, &err) : NULL;
    CHECKF(m && m->profile->n_vocab == n_vocab, "%s", err.msg);
    float *got = malloc((size_t)n_pos * n_vocab * 4);
    for (int ref = 0; m && ref <= 1; ref++) {
        backend_opts bo = {0};
        bo.reference = ref;
        backend *b = backend_create("cpu", &bo, &err);
        qwen35_state *s = b ? qwen35_state_new(m, b, 512, 48, 0, &err) : NULL;
        CHECKF(s && !qwen35_eval(s, ids, (int)n_pos, got, 1, &err), "%s", err.msg);
        double worst = 0;
        int argmax_bad = 0;
        for (uint32_t i = 0; i < n_pos; i++) {
            const float *w = want + (size_t)i * n_vocab, *l = got + (size_t)i * n_vocab;
            int bw = 0, bl = 0;
            for (uint32_t k = 0; k < n_vocab; k++) {
                worst = fmax(worst, fabs((double)l[k] - w[k]));
                if (w[k] > w[bw]) bw = (int)k;
                if (l[k] > l[bl]) bl = (int)k;
            }
            argmax_bad += bw != bl;
        }
        CHECKF(worst <= TOL, "%s: max |logit - transformers| = %g", ref ? "cpu-ref" : "cpu", worst);
        printf("test_qwen35_hf (%s): %u positions x %u logits, max |diff| %.3g, argmax differs at %d\n",
               ref ? "cpu-ref" : "cpu", n_pos, n_vocab, worst, argmax_bad);
        qwen35_state_free(s);
        if (b) b->destroy(b);
    }
    free(got);
    qwen35_free(m);
    gguf_close(g);
    remove(out);
    free(raw);
}

int main(void) {
    test_synthetic();
    test_goldens();
    return test_report("test_qwen35_hf");
}
