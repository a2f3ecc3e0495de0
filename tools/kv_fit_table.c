/* The README's capacity table: which KV types fit which contexts for the
 * 31B and 12B profiles on one GPU, computed (not measured) from the KV plan
 * (model/gemma4_kvplan.h) and the Q4_0 weights as gem synth --type q4_0
 * writes them (matrices q4_0, the embedding q8_0, vectors f32; and the 31B
 * in Q8_0, where the choice of KV type starts to matter; then the Qwen3.5
 * 27B in gem synth's Q4_K_M mix and in Q8_0, its plan from qwen35_plan), counted as
 * the CUDA backend counts them (cu_weight_bytes: codes and scales as two
 * allocations, each of 1 MiB or more rounded to 2 MiB pages), with the
 * CUDA prompt tile of 2048 and its 1.5 GiB work reserve: the sum gem serve
 * and gem run check before loading. A card's free memory is taken as 78 GiB (H100 80 GB) and
 * 139 GiB (H200 141 GB), what cudaMemGetInfo reports free on them with a
 * CUDA context up.
 *
 *   make CUDA=0 lib-objs && cc -std=c11 -D_GNU_SOURCE -O2 -Isrc -o /tmp/kv_fit_table \
 *       tools/kv_fit_table.c $(cat build/lib-objs) -lm -pthread && /tmp/kv_fit_table */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "model/gemma4.h"
#include "model/gemma4_kvplan.h"
#include "model/qwen35.h"
#include "model/qwen35_run.h"
#include "model/qwen35_synth.h"
#include "quant/quant.h"

#define GIB 1073741824.0

/* cu_pages (cuda_backend.cu): the driver's 2 MiB pages */
static uint64_t pages(uint64_t n) {
    const uint64_t page = (uint64_t)2 << 20;
    return n >= ((uint64_t)1 << 20) ? (n + page - 1) / page * page : n;
}

/* q8: matrices in q8_0 (else q4_0); the embedding q8_0 either way */
static uint64_t weights_of(const gemma4_profile *p, int q8) {
    const size_t n = gemma4_manifest_count(p);
    gemma4_tensor_spec *s = malloc(n * sizeof *s);
    uint64_t bytes = 0;
    if (!s || gemma4_manifest(p, s, n) != n) {
        fprintf(stderr, "kv_fit_table: no manifest for %s\n", p->name);
        exit(1);
    }
    for (size_t i = 0; i < n; i++) {
        const uint64_t n_el = s[i].ne[0] * (s[i].n_dims > 1 ? s[i].ne[1] : 1), nblk = n_el / 32;
        if (s[i].kind == G4_KIND_VECTOR) bytes += pages(n_el * 4);                         /* f32 */
        else bytes += pages(nblk * (q8 || s[i].kind == G4_KIND_EMBD ? 32 : 16)) + pages(nblk * 2); /* codes, scales */
    }
    free(s);
    return bytes;
}

/* A Qwen3.5 profile's weights in gem synth's (and gem quantize's) mix of
 * type t, as cu_weight stores them: q4_k/q5_k blocks as in the file (one
 * allocation), q6_k as 208-byte blocks and their f16 scales apart (an even
 * count), q8_0 as codes and scales, f32 as is */
static uint64_t qwen_weights_of(const qwen35_profile *p, uint32_t t, int q4_k_m) {
    const size_t n = qwen35_manifest_count(p);
    qwen35_tensor_spec *s = malloc(n * sizeof *s);
    if (!s || qwen35_manifest(p, s, n) != n) {
        fprintf(stderr, "kv_fit_table: no manifest for %s\n", p->name);
        exit(1);
    }
    const qwen35_synth_opts o = {.profile = p, .type = t, .q4_k_m = q4_k_m, .embd_type = q4_k_m ? QT_Q4_K : t};
    uint64_t bytes = 0;
    for (size_t i = 0; i < n; i++) {
        const uint64_t n_el = s[i].ne[0] * (s[i].n_dims > 1 ? s[i].ne[1] : 1);
        switch (qwen35_synth_type(&o, &s[i])) {
        case QT_F32: bytes += pages(n_el * 4); break;
        case QT_Q4_K: bytes += pages(n_el / 256 * 144); break;
        case QT_Q5_K: bytes += pages(n_el / 256 * 176); break;
        case QT_Q6_K: bytes += pages(n_el / 256 * 208) + pages((n_el / 256 + 1) / 2 * 4); break;
        case QT_Q8_0: bytes += pages(n_el / 32 * 32) + pages(n_el / 32 * 2); break;
        default: /* expanded to f16 at load */
            bytes += pages(n_el * 2);
            break;
        }
    }
    free(s);
    return bytes;
}

/* One cell: the sum and the cards (78 and 139 GiB free) it fits */
static void print_fit(double need) {
    printf(" %.1f GiB: %s |", need, need <= 78.0 ? "H100, H200" : need <= 139.0 ? "H200 only" : "neither");
}

int main(void) {
    static const char *const profiles[] = {"gemma4-31b", "gemma4-12b"};
    static const int ctxs[] = {32768, 65536, 131072, 262144};
    const uint64_t reserve = (uint64_t)3 << 29; /* CU_WORK_RESERVE */
    printf("| model (weights) | context | f32 | f16-full | f16 |\n|---|---|---|---|---|\n");
    for (int m = 0; m < 3; m++) {
        const int q8 = m == 2; /* the 31B and 12B in Q4_0, then the 31B in Q8_0 */
        const gemma4_profile *p = gemma4_profile_find(profiles[m == 1]);
        const uint64_t w = weights_of(p, q8);
        for (size_t ci = 0; ci < sizeof ctxs / sizeof ctxs[0]; ci++) {
            printf("| %s %s (%.1f GiB) | %d |", p->name, q8 ? "q8_0" : "q4_0", w / GIB, ctxs[ci]);
            static const gemma4_kv_type order[] = {GEMMA4_KV_F32, GEMMA4_KV_F16_FULL, GEMMA4_KV_F16};
            for (int ti = 0; ti < 3; ti++) {
                gemma4_kv_plan plan;
                gem_err err = {{0}};
                if (gemma4_kv_plan_make(p, ctxs[ci], order[ti], 16, 2048, &plan, &err)) {
                    fprintf(stderr, "kv_fit_table: %s\n", err.msg);
                    return 1;
                }
                print_fit((w + gemma4_kv_plan_total(&plan) + reserve) / GIB);
            }
            printf("\n");
        }
    }
    /* Qwen3.5 27B: all its attention caches grow with the context, so
     * f16-full is f16 */
    const qwen35_profile *q = qwen35_profile_find("qwen35-27b");
    for (int m = 0; m < 2; m++) {
        const int q8 = m == 1;
        const uint64_t w = qwen_weights_of(q, q8 ? QT_Q8_0 : QT_Q4_K, !q8);
        for (size_t ci = 0; ci < sizeof ctxs / sizeof ctxs[0]; ci++) {
            printf("| %s %s (%.1f GiB) | %d |", q->name, q8 ? "q8_0" : "q4_k_m", w / GIB, ctxs[ci]);
            for (int ti = 0; ti < 3; ti++) {
                qwen35_mem mem;
                qwen35_plan(q, ctxs[ci], 2048, ti > 0, &mem);
                print_fit((w + qwen35_mem_total(&mem) + reserve) / GIB);
            }
            printf("\n");
        }
    }
    return 0;
}
