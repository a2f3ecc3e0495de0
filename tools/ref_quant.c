/* Golden-file maker for the row-quantizer tests: quantizes every 256-value
 * row of an f32 file with the pinned reference's ggml_quantize_chunk (the
 * path llama-quantize takes without an importance matrix) and writes
 * PREFIX.TYPE for q8_0, q4_0, q5_0, q5_1, q4_k, q5_k and q6_k. Built
 * against the reference in .ref/ by tools/quant_golden.sh; never part of
 * gem. */
#include <stdio.h>
#include <stdlib.h>

#include "ggml.h"

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: ref_quant ROWS.f32 PREFIX\n");
        return 2;
    }
    const int64_t ne0 = 256;
    FILE *f = fopen(argv[1], "rb");
    if (!f) return 1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    float *x = malloc((size_t)n);
    if (!x || fread(x, 1, (size_t)n, f) != (size_t)n) return 1;
    fclose(f);
    const int64_t rows = n / (long)sizeof(float) / ne0;
    const struct { enum ggml_type t; const char *name; } types[] = {
        {GGML_TYPE_Q8_0, "q8_0"}, {GGML_TYPE_Q4_0, "q4_0"}, {GGML_TYPE_Q5_0, "q5_0"}, {GGML_TYPE_Q5_1, "q5_1"},
        {GGML_TYPE_Q4_K, "q4_k"}, {GGML_TYPE_Q5_K, "q5_k"}, {GGML_TYPE_Q6_K, "q6_k"}};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        size_t sz = ggml_row_size(types[i].t, ne0) * (size_t)rows;
        void *q = malloc(sz);
        size_t got = ggml_quantize_chunk(types[i].t, x, q, 0, rows, ne0, NULL);
        if (got != sz) return 1;
        char path[4096];
        snprintf(path, sizeof path, "%s.%s", argv[2], types[i].name);
        f = fopen(path, "wb");
        if (!f || fwrite(q, 1, sz, f) != sz) return 1;
        fclose(f);
        free(q);
        printf("%s: %lld rows, %zu bytes\n", path, (long long)rows, sz);
    }
    free(x);
    return 0;
}
