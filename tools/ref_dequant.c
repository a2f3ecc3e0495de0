/* Golden-file maker for the dequantizer tests: reads the first ROWS rows of
 * a tensor from a GGUF written by the reference's llama-quantize and writes
 * the raw blocks (OUT.blocks) and the reference's own dequantization of them
 * (OUT.f32, via ggml's type traits). Built against the reference in .ref/
 * by tools/quant_golden.sh; never part of gem. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml.h"
#include "gguf.h"

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: ref_dequant FILE TENSOR ROWS OUT\n");
        return 2;
    }
    struct gguf_init_params ip = {true, NULL};
    struct gguf_context *g = gguf_init_from_file(argv[1], ip);
    if (!g) return 1;
    int64_t t = gguf_find_tensor(g, argv[2]);
    if (t < 0) return 1;
    enum ggml_type type = gguf_get_tensor_type(g, t);
    size_t off = gguf_get_data_offset(g) + gguf_get_tensor_offset(g, t);
    /* row length from the tensor's byte size is not exposed; the caller's
     * tensors have ne0 = 256 */
    const int64_t ne0 = 256;
    const int rows = atoi(argv[3]);
    size_t row_bytes = ggml_row_size(type, ne0);
    size_t nb = row_bytes * (size_t)rows;
    unsigned char *blocks = malloc(nb);
    float *vals = malloc(sizeof(float) * (size_t)(ne0 * rows));
    FILE *f = fopen(argv[1], "rb");
    if (!f || fseek(f, (long)off, SEEK_SET) || fread(blocks, 1, nb, f) != nb) return 1;
    fclose(f);
    const struct ggml_type_traits *tr = ggml_get_type_traits(type);
    if (type == GGML_TYPE_F32) memcpy(vals, blocks, nb); /* F32 has no to_float trait */
    else tr->to_float(blocks, vals, ne0 * rows);
    char path[4096];
    snprintf(path, sizeof path, "%s.blocks", argv[4]);
    f = fopen(path, "wb");
    fwrite(blocks, 1, nb, f);
    fclose(f);
    snprintf(path, sizeof path, "%s.f32", argv[4]);
    f = fopen(path, "wb");
    fwrite(vals, sizeof(float), (size_t)(ne0 * rows), f);
    fclose(f);
    printf("%s: %s, %d rows, %zu bytes\n", argv[4], ggml_type_name(type), rows, nb);
    gguf_free(g);
    return 0;
}
