/* The CPU backend's tile contract, end to end through backend->matmul: a
 * product of n tokens gives each token's output row bit for bit as a
 * one-token product of that token alone (speculative verification and
 * batched decode compare a tile with the decode it replaces), for every
 * storage type with a CPU kernel, on the fast path (any thread count: a
 * row's bits do not depend on how the rows are split) and the reference
 * path. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "quant/quant.h"
#include "quant/quantize.h"
#include "test.h"

static uint64_t st = 0x9e3779b97f4a7c15ull;
static float frand(void) {
    st ^= st << 13;
    st ^= st >> 7;
    st ^= st << 17;
    return (float)((st >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

/* K: 72 blocks of 32 (not a multiple of the kernels' 32-block chunks), 9
 * super-blocks of 256 for the k-quants; N: not a multiple of 16 */
enum { K = 2304, N = 200, MAXTOK = 64 };

int main(void) {
    static const uint32_t types[] = {QT_Q4_0, QT_Q8_0, QT_Q4_K, QT_Q5_K, QT_Q6_K, QT_F16, QT_F32};
    static const int ns[] = {2, 3, 8, 9, 16, 64};
    float *w = malloc(sizeof(float) * K * N), *x = malloc(sizeof(float) * K * MAXTOK);
    float *tile = malloc(sizeof(float) * N * MAXTOK), *one = malloc(sizeof(float) * N);
    uint8_t *data = malloc((size_t)K * N * 4);
    for (int64_t i = 0; i < (int64_t)K * N; i++) w[i] = frand() * 0.05f;
    for (int64_t i = 0; i < (int64_t)K * MAXTOK; i++) x[i] = frand() * (i % 61 == 0 ? 30.0f : 1.0f) * (float)(i / K % 4 + 1);
    struct {
        const char *name;
        backend_opts o;
    } cfg[3] = {{"fast, 2 threads", {.threads = 2}}, {"fast, 3 threads", {.threads = 3}}, {"reference", {.reference = 1}}};
    for (int c = 0; c < 3; c++) {
        gem_err err = {0};
        backend *b = backend_cpu_create(&cfg[c].o, &err);
        CHECKF(b != NULL, "%s: %s", cfg[c].name, err.msg);
        if (!b) continue;
        be_buf *xb = b->alloc(b, (size_t)K * MAXTOK, &err), *x1 = b->alloc(b, K, &err);
        be_buf *ob = b->alloc(b, (size_t)N * MAXTOK, &err), *o1 = b->alloc(b, N, &err);
        b->upload(b, xb, 0, x, (size_t)K * MAXTOK);
        for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
            uint64_t rb;
            quant_row_bytes(types[ti], K, &rb);
            for (int r = 0; r < N; r++) quant_quantize_row(types[ti], w + (size_t)r * K, data + rb * (uint64_t)r, K);
            gguf_tensor t = {.name = "w", .n_dims = 2, .ne = {K, N, 1, 1}, .type = types[ti],
                             .n_elems = (uint64_t)K * N, .n_bytes = rb * N, .data = data};
            be_weight *W = b->weight(b, &t, &err);
            CHECKF(W != NULL, "%s", err.msg);
            if (!W) continue;
            for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++) {
                const int n = ns[ni];
                b->matmul(b, W, xb, n, ob);
                b->download(b, ob, 0, tile, (size_t)N * n);
                int same = 1;
                for (int i = 0; i < n; i++) {
                    b->upload(b, x1, 0, x + (size_t)i * K, K);
                    b->matmul(b, W, x1, 1, o1);
                    b->download(b, o1, 0, one, N);
                    if (memcmp(one, tile + (size_t)i * N, sizeof(float) * N)) same = 0;
                }
                CHECKF(same, "%s, %s, %d tokens: a row differs from its one-token product", cfg[c].name,
                       quant_type_name(types[ti]), n);
            }
            /* row lookups (embeddings, tied to the output head) give the
             * stored rows whatever the backend keeps for its products (the
             * fast path packs q8_0, q4_0 and the k-quants at load) */
            {
                static const int32_t ids[] = {0, 1, 15, 16, 17, 100, 191, 192, 198, N - 1};
                enum { NI = sizeof ids / sizeof *ids };
                be_buf *eb = b->alloc(b, (size_t)K * NI, &err);
                float *got = malloc(sizeof(float) * K * NI), *want = malloc(sizeof(float) * K);
                int same = eb && got && want;
                if (same) {
                    b->embed(b, W, ids, NI, 1.0f, eb);
                    b->download(b, eb, 0, got, (size_t)K * NI);
                    for (int i = 0; i < NI; i++) {
                        quant_dequant_row(types[ti], data + rb * (uint64_t)ids[i], want, K);
                        if (memcmp(want, got + (size_t)i * K, sizeof(float) * K)) same = 0;
                    }
                }
                CHECKF(same, "%s, %s: embedded rows differ from the stored rows", cfg[c].name, quant_type_name(types[ti]));
                if (eb) b->buf_free(b, eb);
                free(got), free(want);
            }
            b->weight_free(b, W);
        }
        b->buf_free(b, xb), b->buf_free(b, x1), b->buf_free(b, ob), b->buf_free(b, o1);
        b->destroy(b);
    }
    free(w), free(x), free(tile), free(one), free(data);
    return test_report("test_cpu_tile");
}
