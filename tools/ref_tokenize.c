/* Reference tokenizer runner: tokenizes every input of a vocab-test file
 * (inputs separated by "\n__ggml_vocab_test__\n") with the pinned
 * reference's llama_tokenize, without BOS, and prints one line of ids per
 * input. With a third argument "special" it parses special tokens.
 * With "bench N" it instead times N passes over the whole file content as
 * one text and prints MB/s. Built against .ref/ by tools/tok_golden.sh. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "llama.h"

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc((size_t)len + 1);
    *n = fread(p, 1, (size_t)len, f);
    p[*n] = 0;
    fclose(f);
    return p;
}

static void quiet(enum ggml_log_level l, const char *t, void *u) { (void)l; (void)t; (void)u; }

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    struct llama_model *m = llama_model_load_from_file(argv[1], mp);
    if (!m) return 1;
    const struct llama_vocab *v = llama_model_get_vocab(m);
    size_t n;
    char *text = slurp(argv[2], &n);
    if (!text) return 1;
    int special = argc > 3 && !strcmp(argv[3], "special");
    size_t cap = n + 16;
    llama_token *ids = malloc(cap * sizeof *ids);
    if (argc > 4 && !strcmp(argv[3], "bench")) {
        int reps = atoi(argv[4]);
        double best = 1e30;
        int32_t count = 0;
        for (int r = 0; r < reps; r++) {
            struct timespec a, b;
            clock_gettime(CLOCK_MONOTONIC, &a);
            count = llama_tokenize(v, text, (int32_t)n, ids, (int32_t)cap, false, false);
            clock_gettime(CLOCK_MONOTONIC, &b);
            double s = (double)(b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9;
            if (s < best) best = s;
        }
        printf("{\"bytes\": %zu, \"tokens\": %d, \"best_seconds\": %.6f, \"mb_per_s\": %.3f}\n", n, count, best,
               n / best / 1e6);
        return 0;
    }
    const char *sep = "\n__ggml_vocab_test__\n";
    char *p = text;
    for (;;) {
        char *e = strstr(p, sep);
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (!e && len == 0) break;
        int32_t k = llama_tokenize(v, p, (int32_t)len, ids, (int32_t)cap, false, special);
        for (int32_t i = 0; i < k; i++) printf(i ? " %d" : "%d", ids[i]);
        printf("\n");
        if (!e) break;
        p = e + strlen(sep);
    }
    return 0;
}
