/* Row quantizers: bytes identical to the pinned reference's quantizers on
 * rows with special patterns (tests/data/quant/rows.f32: zeros, constants,
 * outliers, subnormals, ties, mixed magnitudes) and on synthetic weights
 * (input.f32); goldens made by tools/quant_golden.sh. Also the row
 * validation rules and argument checks. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant.h"
#include "quant/quantize.h"
#include "test.h"

#define NE0 256

static void check_file(const char *input, const char *type_name) {
    char path[256];
    size_t n_in = 0, n_want = 0;
    snprintf(path, sizeof path, "tests/data/quant/%s.f32", input);
    float *x = (float *)test_slurp(path, &n_in);
    snprintf(path, sizeof path, "tests/data/quant/%s.%s", input, type_name);
    uint8_t *want = (uint8_t *)test_slurp(path, &n_want);
    CHECKF(x && want, "goldens %s.%s", input, type_name);
    if (!x || !want) {
        free(x);
        free(want);
        return;
    }
    int t = quant_type_from_name(type_name);
    uint64_t row_bytes = 0;
    quant_row_bytes((uint32_t)t, NE0, &row_bytes);
    size_t rows = n_in / sizeof(float) / NE0;
    CHECKF(rows * row_bytes == n_want, "%s.%s: %zu rows, %zu golden bytes", input, type_name, rows, n_want);
    uint8_t *got = malloc(row_bytes);
    int bad_rows = 0;
    for (size_t r = 0; r < rows && rows * row_bytes == n_want; r++) {
        CHECK(quant_quantize_row((uint32_t)t, x + r * NE0, got, NE0) == 0);
        if (memcmp(got, want + r * row_bytes, row_bytes)) {
            if (bad_rows++ < 4) {
                size_t k = 0;
                while (got[k] == want[r * row_bytes + k]) k++;
                fprintf(stderr, "%s.%s row %zu: first difference at byte %zu (got %02x, want %02x)\n", input,
                        type_name, r, k, got[k], want[r * row_bytes + k]);
            }
        }
    }
    CHECKF(bad_rows == 0, "%s.%s: %d rows differ from the reference", input, type_name, bad_rows);
    /* the whole file as one call gives the same bytes as row by row */
    uint8_t *all = malloc(n_want);
    CHECK(quant_quantize_row((uint32_t)t, x, all, (int64_t)(rows * NE0)) == 0 && !memcmp(all, want, n_want));
    free(all);
    free(got);
    free(x);
    free(want);
}

static void test_args(void) {
    float x[256] = {0};
    uint8_t out[1024];
    CHECK(quant_can_quantize(QT_Q4_K) && quant_can_quantize(QT_Q5_K) && quant_can_quantize(QT_Q6_K) &&
          quant_can_quantize(QT_Q8_0) && quant_can_quantize(QT_Q4_0) && quant_can_quantize(QT_Q5_0) &&
          quant_can_quantize(QT_Q5_1));
    CHECK(!quant_can_quantize(QT_Q4_1) && !quant_can_quantize(QT_Q2_K) && !quant_can_quantize(QT_IQ2_XXS));
    CHECK(quant_quantize_row(QT_Q2_K, x, out, 256) == -1);
    CHECK(quant_quantize_row(QT_Q4_K, x, out, 128) == -1); /* partial super-block */
    CHECK(quant_quantize_row(QT_Q5_K, x, out, 128) == -1);
    CHECK(quant_quantize_row(QT_Q5_1, x, out, 48) == -1);
    CHECK(quant_quantize_row(QT_Q8_0, x, out, 33) == -1);
    CHECK(quant_quantize_row(QT_Q8_0, x, out, -32) == -1);
    CHECK(quant_quantize_row(QT_Q8_0, x, out, 0) == 0);
    /* f16/bf16 targets use the exhaustively tested scalar conversions */
    x[0] = 1.0f;
    x[1] = -2.0f;
    CHECK(quant_quantize_row(QT_F16, x, out, 2) == 0 && out[0] == 0x00 && out[1] == 0x3c && out[3] == 0xc0);
    CHECK(quant_quantize_row(QT_BF16, x, out, 2) == 0 && out[0] == 0x80 && out[1] == 0x3f);
}

static void test_validate(void) {
    float f[4] = {1, 2, 3, 4};
    uint64_t where = 99;
    CHECK(quant_validate_row(QT_F32, f, sizeof f, &where) == 0);
    f[2] = INFINITY;
    CHECK(quant_validate_row(QT_F32, f, sizeof f, &where) == -1 && where == 2);
    f[2] = NAN;
    CHECK(quant_validate_row(QT_F32, f, sizeof f, &where) == -1 && where == 2);
    CHECK(quant_validate_row(QT_F32, f, 7, &where) == -1); /* partial value */
    uint16_t h[3] = {0x3c00, 0x7c00, 0};
    CHECK(quant_validate_row(QT_F16, h, 2, NULL) == 0);
    CHECK(quant_validate_row(QT_F16, h, 6, &where) == -1 && where == 1);
    uint16_t b[2] = {0x3f80, 0x7fc0};
    CHECK(quant_validate_row(QT_BF16, b, 4, &where) == -1 && where == 1);
    uint8_t q8[68] = {0};
    CHECK(quant_validate_row(QT_Q8_0, q8, 68, &where) == 0);
    q8[34] = 0x00;
    q8[35] = 0x7e; /* NaN scale in block 1 */
    CHECK(quant_validate_row(QT_Q8_0, q8, 68, &where) == -1 && where == 1);
    uint8_t q4k[144] = {0};
    q4k[2] = 0x00;
    q4k[3] = 0x7c; /* dmin = inf */
    CHECK(quant_validate_row(QT_Q4_K, q4k, 144, &where) == -1 && where == 0);
    uint8_t q5k[2 * 176] = {0};
    q5k[176 + 1] = 0x7c; /* d of block 1 = inf */
    CHECK(quant_validate_row(QT_Q5_K, q5k, 2 * 176, &where) == -1 && where == 1);
    uint8_t q51[24] = {0};
    CHECK(quant_validate_row(QT_Q5_1, q51, 24, NULL) == 0);
    q51[3] = 0xfe; /* m = NaN */
    CHECK(quant_validate_row(QT_Q5_1, q51, 24, NULL) == -1);
    uint8_t q6k[210] = {0};
    CHECK(quant_validate_row(QT_Q6_K, q6k, 210, NULL) == 0);
    q6k[209] = 0xfc; /* d = -inf */
    CHECK(quant_validate_row(QT_Q6_K, q6k, 210, NULL) == -1);
    CHECK(quant_validate_row(QT_Q6_K, q6k, 200, NULL) == -1);
}

int main(void) {
    const char *types[] = {"q8_0", "q4_0", "q5_0", "q5_1", "q4_k", "q5_k", "q6_k"};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        check_file("rows", types[i]);
        check_file("input", types[i]);
    }
    test_args();
    test_validate();
    return test_report("test_quantize");
}
