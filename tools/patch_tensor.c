/* Overwrites an F32 tensor of a GGUF in place with value patterns that
 * stress quantizers: wide and narrow ranges, outliers, constant rows, zeros,
 * one-signed rows. Row r gets pattern r % 8. Used by tools/quant_golden.sh. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "gguf/gguf.h"
#include "quant/quant.h"

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: patch_tensor FILE TENSOR\n");
        return 2;
    }
    gem_err err = {{0}};
    gguf_file *g = gguf_open(argv[1], &err);
    if (!g) { fprintf(stderr, "%s\n", err.msg); return 1; }
    const gguf_tensor *t = gguf_find_tensor(g, argv[2]);
    if (!t || t->type != QT_F32 || t->n_dims != 2) { fprintf(stderr, "need a 2-D f32 tensor\n"); return 1; }
    uint64_t ne0 = t->ne[0], rows = t->ne[1];
    float *v = malloc(sizeof(float) * ne0 * rows);
    uint64_t s = 12345;
    for (uint64_t r = 0; r < rows; r++) {
        for (uint64_t i = 0; i < ne0; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            float u = (float)((s >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f; /* [-1, 1) */
            float x;
            switch (r % 8) {
            case 0: x = u * u * u * 3.0f; break;                       /* peaked */
            case 1: x = (i % 37 == 5) ? 100.0f * u : 0.01f * u; break; /* outliers */
            case 2: x = 0.0f; break;
            case 3: x = -fabsf(u) - 0.5f; break;                       /* negative only */
            case 4: x = 0.75f; break;                                  /* constant */
            case 5: x = 1e-5f * u; break;                              /* tiny */
            case 6: x = 3e4f * u; break;                               /* huge, within f16 */
            default: x = sinf((float)i * 0.37f) * (1.0f + (float)(i % 16)); break;
            }
            v[r * ne0 + i] = x;
        }
    }
    long off = (long)(gguf_data_offset(g) + t->offset);
    gguf_close(g);
    FILE *f = fopen(argv[1], "r+b");
    if (!f || fseek(f, off, SEEK_SET) || fwrite(v, sizeof(float), ne0 * rows, f) != ne0 * rows) return 1;
    fclose(f);
    free(v);
    return 0;
}
