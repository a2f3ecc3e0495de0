/* Reference runner: greedy generation with the pinned llama.cpp on the CPU,
 * F32 KV cache, from given prompt token ids. Prints the generated ids on
 * one line. With LOGITS=FILE in the environment it also writes the
 * soft-capped logits of every prompt position (f32, n x vocab). The
 * smallest top-2 logit margin over the generated steps goes to stderr: a
 * golden whose margin is inside the numerical noise between two correct
 * implementations cannot decide a greedy choice and is not used.
 *   ref_generate MODEL N_PREDICT THREADS ID ID ...
 * Built against .ref/ by the parity scripts; never part of gem. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

static void quiet(enum ggml_log_level l, const char *t, void *u) { (void)l; (void)t; (void)u; }

int main(int argc, char **argv) {
    if (argc < 5) return 2;
    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    struct llama_model *m = llama_model_load_from_file(argv[1], mp);
    if (!m) return 1;
    int n_predict = atoi(argv[2]);
    int n_prompt = argc - 4;
    llama_token *ids = malloc(sizeof(llama_token) * (size_t)(n_prompt + n_predict + 1));
    for (int i = 0; i < n_prompt; i++) ids[i] = atoi(argv[4 + i]);
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)(n_prompt + n_predict + 16);
    cp.n_batch = cp.n_ctx;
    cp.n_ubatch = 512;
    cp.n_threads = cp.n_threads_batch = atoi(argv[3]);
    cp.type_k = GGML_TYPE_F32;
    cp.type_v = GGML_TYPE_F32;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    struct llama_context *ctx = llama_init_from_model(m, cp);
    if (!ctx) return 1;
    const struct llama_vocab *v = llama_model_get_vocab(m);
    int n_vocab = llama_vocab_n_tokens(v);
    const char *dump = getenv("LOGITS");
    struct llama_batch b = llama_batch_init(n_prompt, 0, 1);
    for (int i = 0; i < n_prompt; i++) {
        b.token[i] = ids[i];
        b.pos[i] = i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = dump ? 1 : i == n_prompt - 1;
    }
    b.n_tokens = n_prompt;
    if (llama_decode(ctx, b)) return 1;
    if (dump) {
        FILE *f = fopen(dump, "wb");
        for (int i = 0; i < n_prompt; i++) fwrite(llama_get_logits_ith(ctx, i), sizeof(float), (size_t)n_vocab, f);
        fclose(f);
    }
    float min_margin = 1e30f;
    for (int t = 0; t < n_predict; t++) {
        const float *l = llama_get_logits_ith(ctx, -1);
        int best = 0;
        for (int i = 1; i < n_vocab; i++)
            if (l[i] > l[best]) best = i;
        float second = -1e30f;
        for (int i = 0; i < n_vocab; i++)
            if (i != best && l[i] > second) second = l[i];
        if (l[best] - second < min_margin) min_margin = l[best] - second;
        printf(t ? " %d" : "%d", best);
        llama_token tk = best;
        if (t + 1 < n_predict && llama_decode(ctx, llama_batch_get_one(&tk, 1))) return 1;
    }
    printf("\n");
    fprintf(stderr, "min_margin %.6f\n", min_margin);
    llama_free(ctx);
    llama_model_free(m);
    return 0;
}
