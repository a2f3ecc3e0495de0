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
#include <unistd.h>

#include "backend/cpu/cpu.h"
#include "quant/quant.h"
#include "quant/quantize.h"
#include "test.h"
#include "util/file.h"

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

/* A matrix of more than two of the packer's 4096-row slices in a real file
 * mapping, not page-aligned (gguf_tensor.mapped: its pages are released
 * as they are packed): embedded rows on both sides of each slice edge equal
 * the stored rows, and the product stays within the 8-bit activations'
 * bound of the reference path's. */
static void mapped_slices(void) {
    enum { KM = 512, NM = 8200, PAD = 100 };
    static const uint32_t types[] = {QT_Q8_0, QT_Q4_0, QT_Q4_K, QT_Q6_K};
    char path[] = "/tmp/gem-test-cpu-tile-XXXXXX";
    float *wf = malloc(sizeof(float) * KM * NM), *xf = malloc(sizeof(float) * KM);
    for (int64_t i = 0; i < (int64_t)KM * NM; i++) wf[i] = frand() * 0.05f;
    for (int i = 0; i < KM; i++) xf[i] = frand();
    backend_opts fo = {.threads = 2}, ro = {.reference = 1};
    gem_err err = {0};
    backend *fast = backend_cpu_create(&fo, &err), *ref = backend_cpu_create(&ro, &err);
    CHECK(fast && ref);
    for (size_t ti = 0; fast && ref && ti < sizeof types / sizeof *types; ti++) {
        uint64_t rb;
        quant_row_bytes(types[ti], KM, &rb);
        uint8_t *q = calloc(1, PAD + rb * NM);
        for (int r = 0; r < NM; r++) quant_quantize_row(types[ti], wf + (size_t)r * KM, q + PAD + rb * (uint64_t)r, KM);
        const int fd = mkstemp(path);
        const int wrote = fd >= 0 && write(fd, q, PAD + rb * NM) == (ssize_t)(PAD + rb * NM);
        if (fd >= 0) close(fd);
        file_view v;
        const int mapped = wrote && file_view_map(path, &v, &err) == 0;
        unlink(path);
        strcpy(path + strlen(path) - 6, "XXXXXX");
        CHECKF(mapped, "%s: mapping the test file: %s", quant_type_name(types[ti]), err.msg);
        if (!mapped) {
            free(q);
            continue;
        }
        gguf_tensor t = {.name = "w", .n_dims = 2, .ne = {KM, NM, 1, 1}, .type = types[ti], .n_elems = (uint64_t)KM * NM,
                         .n_bytes = rb * NM, .data = v.data + PAD, .mapped = 1};
        be_weight *W = fast->weight(fast, &t, &err), *WR = ref->weight(ref, &t, &err);
        CHECK(W && WR);
        static const int32_t ids[] = {0, 4095, 4096, 4097, 8191, 8192, 8199};
        enum { NI = sizeof ids / sizeof *ids };
        float *got = malloc(sizeof(float) * KM * NI), *want = malloc(sizeof(float) * KM);
        float *of = malloc(sizeof(float) * NM), *orf = malloc(sizeof(float) * NM);
        be_buf *eb = fast->alloc(fast, (size_t)KM * NI, &err), *xb = fast->alloc(fast, KM, &err),
               *ob = fast->alloc(fast, NM, &err), *xr = ref->alloc(ref, KM, &err), *orb = ref->alloc(ref, NM, &err);
        int same = 1, close_enough = 1;
        if (W && WR && eb && xb && ob && xr && orb) {
            fast->embed(fast, W, ids, NI, 1.0f, eb);
            fast->download(fast, eb, 0, got, (size_t)KM * NI);
            for (int i = 0; i < NI; i++) {
                quant_dequant_row(types[ti], q + PAD + rb * (uint64_t)ids[i], want, KM);
                if (memcmp(want, got + (size_t)i * KM, sizeof(float) * KM)) same = 0;
            }
            fast->upload(fast, xb, 0, xf, KM);
            ref->upload(ref, xr, 0, xf, KM);
            fast->matmul(fast, W, xb, 1, ob);
            ref->matmul(ref, WR, xr, 1, orb);
            fast->download(fast, ob, 0, of, NM);
            ref->download(ref, orb, 0, orf, NM);
            /* 8-bit activations: |error| <= sum |w| max|x| / 254 per row
             * (test_cpu_kernels' bound); here sum |w| <= 0.05 K */
            for (int r = 0; r < NM; r++)
                if (!(fabsf(of[r] - orf[r]) <= 0.05f * KM / 254.0f * 1.01f)) close_enough = 0;
        }
        CHECKF(same, "%s, mapped, %d rows: embedded rows at the slice edges differ from the stored rows",
               quant_type_name(types[ti]), NM);
        CHECKF(close_enough, "%s, mapped, %d rows: the product strays from the reference path's",
               quant_type_name(types[ti]), NM);
        fast->buf_free(fast, eb), fast->buf_free(fast, xb), fast->buf_free(fast, ob);
        ref->buf_free(ref, xr), ref->buf_free(ref, orb);
        if (W) fast->weight_free(fast, W);
        if (WR) ref->weight_free(ref, WR);
        free(got), free(want), free(of), free(orf), free(q);
        file_view_close(&v);
    }
    if (fast) fast->destroy(fast);
    if (ref) ref->destroy(ref);
    free(wf), free(xf);
}

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
    mapped_slices();
    return test_report("test_cpu_tile");
}
