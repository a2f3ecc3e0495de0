/* gem quantize in process (so the ASan run covers it): the output does not
 * depend on the thread count, follows the reference's layout (tensors by
 * layer then name, file_type and quantization_version last, types per
 * tensor), passes the Gemma 4 contract for q4_0 with a q8_0 embedding and
 * for the K mixes (whose per-tensor types follow the reference's rule), is
 * idempotent, and bad requests fail with clear messages. Byte identity with
 * llama-quantize itself is tests/convert/test_quantize.sh. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "convert/quantize.h"
#include "gguf/gguf.h"
#include "model/gemma4.h"
#include "quant/quant.h"
#include "synth_tiny.h"
#include "test.h"

static char in_path[64], out1[64], out2[64], out3[64];

static int files_equal(const char *a, const char *b) {
    size_t na, nb;
    char *pa = test_slurp(a, &na), *pb = test_slurp(b, &nb);
    int eq = pa && pb && na == nb && !memcmp(pa, pb, na);
    free(pa);
    free(pb);
    return eq;
}

static int quantize(const char *in, const char *out, const char *type, int embd, int threads, gem_err *err) {
    gem_quantize_opts o = {0};
    o.in_path = in;
    o.out_path = out;
    o.type = type;
    o.embd_type = embd;
    o.threads = threads;
    gem_quantize_stats st;
    return gem_quantize(&o, &st, err);
}

int main(void) {
    int pid = (int)getpid();
    snprintf(in_path, sizeof in_path, "/tmp/gem-tq-%d-in.gguf", pid);
    snprintf(out1, sizeof out1, "/tmp/gem-tq-%d-1.gguf", pid);
    snprintf(out2, sizeof out2, "/tmp/gem-tq-%d-2.gguf", pid);
    snprintf(out3, sizeof out3, "/tmp/gem-tq-%d-3.gguf", pid);
    gem_err err = {{0}};
    CHECKF(!test_synth_tiny(in_path, 9, 2, &err), "%s", err.msg);

    CHECKF(!quantize(in_path, out1, "q4_0", QT_Q8_0, 1, &err), "%s", err.msg);
    CHECKF(!quantize(in_path, out2, "Q4_0", QT_Q8_0, 2, &err), "%s", err.msg);
    CHECK(files_equal(out1, out2));

    gguf_file *f = gguf_open(out1, &err);
    CHECKF(f != NULL, "%s", err.msg);
    if (f) {
        const gemma4_profile *p;
        CHECKF(!gemma4_validate(f, &p, &err), "%s", err.msg);
        uint64_t n = gguf_kv_count(f);
        int64_t ft;
        CHECK(!strcmp(gguf_kv_key(f, n - 2), "general.quantization_version"));
        CHECK(!strcmp(gguf_kv_key(f, n - 1), "general.file_type") && !gguf_kv_int(f, n - 1, &ft) && ft == 2);
        CHECK(!strcmp(gguf_tensor_at(f, 0)->name, "output_norm.weight"));
        CHECK(!strcmp(gguf_tensor_at(f, 1)->name, "rope_freqs.weight"));
        CHECK(!strcmp(gguf_tensor_at(f, 2)->name, "token_embd.weight"));
        CHECK(!strcmp(gguf_tensor_at(f, 3)->name, "blk.0.attn_k.weight"));
        CHECK(!strcmp(gguf_tensor_at(f, gguf_tensor_count(f) - 1)->name, "blk.5.post_ffw_norm.weight"));
        CHECK(gguf_find_tensor(f, "token_embd.weight")->type == QT_Q8_0);
        CHECK(gguf_find_tensor(f, "blk.3.ffn_down.weight")->type == QT_Q4_0);
        CHECK(gguf_find_tensor(f, "blk.3.attn_norm.weight")->type == QT_F32);
        CHECK(gguf_find_tensor(f, "blk.3.layer_output_scale.weight")->type == QT_F32);
        /* the kept f32 tensors carry the input's bytes */
        gguf_file *g = gguf_open(in_path, &err);
        const gguf_tensor *a = g ? gguf_find_tensor(g, "rope_freqs.weight") : NULL;
        const gguf_tensor *b = gguf_find_tensor(f, "rope_freqs.weight");
        CHECK(a && b && a->n_bytes == b->n_bytes && !memcmp(a->data, b->data, a->n_bytes));
        gguf_close(g);
    }
    gguf_close(f);

    /* quantizing a quantized file to the same types copies it unchanged */
    CHECKF(!quantize(out1, out3, "q4_0", QT_Q8_0, 2, &err), "%s", err.msg);
    CHECK(files_equal(out1, out3));
    /* ... but a different type would requantize, which is refused before
     * the output is created */
    remove(out3);
    CHECK(quantize(out1, out3, "q4_0", -1, 2, &err) == -1);
    CHECK_ERR(err.msg, "tensor 'token_embd.weight' is already quantized (q8_0)");
    CHECK(access(out3, F_OK) != 0);
    CHECK(quantize(in_path, out3, "q3_k", -1, 2, &err) == -1);
    CHECK_ERR(err.msg, "unknown type 'q3_k' (q8_0, q4_0, q4_k_m (q4_k), q4_k_s, q5_k_m (q5_k), q5_k_s, q6_k)");
    CHECK(quantize(in_path, out3, "q8_0", QT_Q2_K, 2, &err) == -1);
    CHECK_ERR(err.msg, "embedding type q2_k cannot be produced");
    CHECK(quantize("data/vocab/gemma-4.gguf", out3, "q8_0", -1, 2, &err) == -1);
    CHECK_ERR(err.msg, "not a supported Gemma 4 model");
    CHECK(gem_quantize_ftype("Q4_K") == 15 && gem_quantize_ftype("q4_k_m") == 15 && gem_quantize_ftype("q6_k") == 18 &&
          gem_quantize_ftype("q8_0") == 7 && gem_quantize_ftype("q4_0") == 2 && gem_quantize_ftype("f16") == -1);
    CHECK(gem_quantize_ftype("q4_k_s") == 14 && gem_quantize_ftype("Q5_K") == 17 &&
          gem_quantize_ftype("q5_k_m") == 17 && gem_quantize_ftype("q5_k_s") == 16 && gem_quantize_ftype("q3_k_m") == -1);

    /* The K mixes' per-tensor types (the embedding kept f32: only the
     * layers are quantized). gemma4-tiny has six ffn_down and five attn_v
     * (the last layer's V is its K); "more bits" of i among n is i < n/8,
     * i >= 7n/8 or (i - n/8) % 3 == 2: ffn_down 2 and 5, attn_v 2 and 4
     * (the counter runs over the attn_v tensors, not the layers). */
    static const struct {
        const char *type;
        const char *v[5], *down[6];
    } mixes[] = {
        {"q4_k_m", {"q4_k", "q4_k", "q6_k", "q4_k", "q6_k"}, {"q4_k", "q4_k", "q6_k", "q4_k", "q4_k", "q6_k"}},
        {"q4_k_s", {"q5_k", "q5_k", "q5_k", "q5_k", "q4_k"}, {"q4_k", "q4_k", "q4_k", "q4_k", "q4_k", "q4_k"}},
        {"q5_k_m", {"q5_k", "q5_k", "q6_k", "q5_k", "q6_k"}, {"q5_k", "q5_k", "q6_k", "q5_k", "q5_k", "q6_k"}},
        {"q5_k_s", {"q5_k", "q5_k", "q5_k", "q5_k", "q5_k"}, {"q5_k", "q5_k", "q5_k", "q5_k", "q5_k", "q5_k"}},
    };
    for (size_t m = 0; m < sizeof mixes / sizeof mixes[0]; m++) {
        remove(out3);
        CHECKF(!quantize(in_path, out3, mixes[m].type, QT_F32, 2, &err), "%s: %s", mixes[m].type, err.msg);
        gguf_file *g = gguf_open(out3, &err);
        CHECKF(g != NULL, "%s", err.msg);
        if (!g) continue;
        int ok = 1;
        char name[64];
        for (int il = 0; il < 6; il++) {
            const gguf_tensor *t;
            snprintf(name, sizeof name, "blk.%d.attn_v.weight", il);
            t = gguf_find_tensor(g, name);
            if (t && (il >= 5 || strcmp(quant_type_name(t->type), mixes[m].v[il]))) ok = 0;
            if (!t && il < 5) ok = 0;
            snprintf(name, sizeof name, "blk.%d.ffn_down.weight", il);
            if (!(t = gguf_find_tensor(g, name)) || strcmp(quant_type_name(t->type), mixes[m].down[il])) ok = 0;
            snprintf(name, sizeof name, "blk.%d.attn_q.weight", il);
            if (!(t = gguf_find_tensor(g, name)) || t->type != (mixes[m].type[1] == '4' ? QT_Q4_K : QT_Q5_K)) ok = 0;
        }
        CHECKF(ok, "%s: per-tensor types differ from the reference's rule", mixes[m].type);
        const gemma4_profile *p;
        CHECKF(!gemma4_validate(g, &p, &err), "%s: %s", mixes[m].type, err.msg);
        gguf_close(g);
    }

    remove(in_path);
    remove(out1);
    remove(out2);
    remove(out3);
    return test_report("test_quantize_model");
}
