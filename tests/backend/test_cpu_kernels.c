/* CPU dot kernels against the reference dequantize-then-dot: the f32-path
 * kernels (any instruction set) agree to rounding; the integer kernels on
 * 8-bit activations agree within the bound the activation rounding implies
 * (half a step per value: sum |w| * max|x| / 254 per block). Then the tile
 * contract, on every variant this CPU has: a product of n tokens gives each
 * token's row bit for bit as n one-token products do, and the multi-row
 * integer kernels compute kernels.h's canonical sum exactly. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/cpu/kernels.h"
#include "quant/quant.h"
#include "test.h"

static uint64_t st = 88172645463325252ull;
static float frand(void) {
    st ^= st << 13;
    st ^= st >> 7;
    st ^= st << 17;
    return (float)((st >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

static void make_row(uint32_t type, uint8_t *row, int64_t n) {
    if (type == QT_F32) {
        for (int64_t i = 0; i < n; i++) ((float *)row)[i] = frand();
    } else if (type == QT_F16) {
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = quant_f32_to_f16(frand());
            memcpy(row + 2 * i, &h, 2);
        }
    } else {
        uint32_t ts = quant_type_size(type);
        for (int64_t b = 0; b < n / 32; b++) {
            uint8_t *blk = row + b * ts;
            for (uint32_t k = 2; k < ts; k++) blk[k] = (uint8_t)(st = st * 6364136223846793005ull + 1, st >> 56);
            uint16_t d = quant_f32_to_f16(0.01f + 0.02f * fabsf(frand()));
            memcpy(blk, &d, 2);
        }
    }
}

/* The tile contract of one variant and type: out[t][r] of a product of ntok
 * tokens, computed the way cpu_matmul does (the multi-row kernel over row
 * ranges, else one kernel call per row and token), for any ntok. */
enum { TK = 2240, TNB = TK / 32, TROWS = 40, TTOK = 64 };

static void tile_product(const cpu_kernels *k, uint32_t type, const uint8_t *rows, uint64_t rb, int64_t r0, int64_t r1,
                         const float *x, const act_q8 *xq, int ntok, float *out) {
    mm_q8_fn mm = type == QT_Q8_0 ? k->q8_0_mm : k->q4_0_mm;
    dot_q8_fn q8 = type == QT_Q8_0 ? k->q8_0_q8 : k->q4_0_q8;
    dot_fn fused = type == QT_Q8_0 ? k->q8_0 : k->q4_0;
    if (mm) {
        mm(rows + rb * (uint64_t)r0, rb, r1 - r0, xq, TNB, ntok, out + r0, TROWS);
        return;
    }
    for (int64_t r = r0; r < r1; r++)
        for (int t = 0; t < ntok; t++)
            out[(size_t)t * TROWS + (size_t)r] =
                q8 ? q8(rows + rb * (uint64_t)r, xq, (int64_t)t * TNB, TK) : fused(rows + rb * (uint64_t)r, x + (size_t)t * TK, TK);
}

/* kernels.h's canonical sum, in plain C: acc = fma(S_b, d_w d_x, acc) */
static float canonical(uint32_t type, const uint8_t *row, const act_q8 *xq, int64_t block0) {
    float acc = 0;
    for (int64_t b = 0; b < TNB; b++) {
        const uint8_t *blk = row + b * (type == QT_Q8_0 ? 34 : 18);
        uint16_t h;
        memcpy(&h, blk, 2);
        int32_t s = 0;
        for (int i = 0; i < 32; i++) {
            const int w = type == QT_Q8_0 ? (int8_t)blk[2 + i]
                                          : (i < 16 ? blk[2 + i] & 15 : blk[2 + i - 16] >> 4) - 8;
            s += w * xq->q[(block0 + b) * 32 + i];
        }
        acc = fmaf((float)s, quant_f16_to_f32(h) * xq->d[block0 + b], acc);
    }
    return acc;
}

static int same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

static void tile_contract(const cpu_kernels *k, uint32_t type) {
    const uint64_t rb = (uint64_t)quant_type_size(type) * TNB;
    uint8_t *rows = malloc(rb * TROWS);
    float *x = malloc(sizeof(float) * TK * TTOK), *tile = malloc(sizeof(float) * TROWS * TTOK),
          *one = malloc(sizeof(float) * TROWS);
    act_q8 all = {malloc(sizeof(float) * TNB * TTOK), malloc((size_t)TK * TTOK), malloc(sizeof(int32_t) * TNB * TTOK)};
    act_q8 alone = {malloc(sizeof(float) * TNB), malloc(TK), malloc(sizeof(int32_t) * TNB)};
    for (int r = 0; r < TROWS; r++) make_row(type, rows + rb * (uint64_t)r, TK);
    for (int64_t i = 0; i < (int64_t)TK * TTOK; i++) x[i] = frand() * (i % 53 == 0 ? 25.0f : 1.0f) * (i / TK % 5 + 1);
    if (k->quantize_act)
        for (int t = 0; t < TTOK; t++) k->quantize_act(x + (size_t)t * TK, TK, &all, (int64_t)t * TNB);
    static const int ns[] = {2, 3, 8, 9, 16, 64};
    for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++) {
        const int ntok = ns[ni];
        int same = 1, split = 1, canon = 1;
        tile_product(k, type, rows, rb, 0, TROWS, x, &all, ntok, tile);
        for (int t = 0; t < ntok; t++) {
            const float *xt = x + (size_t)t * TK;
            if (k->quantize_act) k->quantize_act(xt, TK, &alone, 0);
            tile_product(k, type, rows, rb, 0, TROWS, xt, &alone, 1, one);
            for (int r = 0; r < TROWS; r++) {
                if (!same_bits(tile[(size_t)t * TROWS + r], one[r])) same = 0;
                if ((k->q8_0_mm || k->q4_0_mm) && !same_bits(one[r], canonical(type, rows + rb * (uint64_t)r, &alone, 0)))
                    canon = 0;
            }
        }
        /* the rows split as threads split them: a row's bits do not depend on its neighbours */
        float *parts = malloc(sizeof(float) * TROWS * TTOK);
        tile_product(k, type, rows, rb, 0, 16, x, &all, ntok, parts);
        tile_product(k, type, rows, rb, 16, 21, x, &all, ntok, parts);
        tile_product(k, type, rows, rb, 21, TROWS, x, &all, ntok, parts);
        for (int t = 0; t < ntok; t++)
            for (int r = 0; r < TROWS; r++)
                if (!same_bits(parts[(size_t)t * TROWS + r], tile[(size_t)t * TROWS + r])) split = 0;
        free(parts);
        CHECKF(same, "%s %s: %d tokens, rows differ from one-token products", k->name, quant_type_name(type), ntok);
        CHECKF(split, "%s %s: %d tokens, rows differ when the rows are split", k->name, quant_type_name(type), ntok);
        CHECKF(canon, "%s %s: one-token rows differ from the canonical sum", k->name, quant_type_name(type));
    }
    free(rows), free(x), free(tile), free(one);
    free(all.d), free(all.q), free(all.s), free(alone.d), free(alone.q), free(alone.s);
}

int main(void) {
    const int64_t n = 1536;
    cpu_kernels ref = kernels_pick(1), fast = kernels_pick(0);
    printf("fast kernels: %s\n", fast.name);
    uint8_t *row = malloc((size_t)n * 4);
    float *x = malloc((size_t)n * 4), *w = malloc((size_t)n * 4);
    act_q8 xq = {malloc((size_t)n / 32 * 4), malloc((size_t)n), malloc((size_t)n / 32 * sizeof(int32_t))};
    const uint32_t types[] = {QT_F32, QT_F16, QT_Q8_0, QT_Q4_0};
    for (int trial = 0; trial < 200; trial++) {
        for (int64_t i = 0; i < n; i++) x[i] = frand() * (trial % 7 == 0 ? 100.0f : 1.0f) * (i % 97 == 0 ? 20.0f : 1.0f);
        for (size_t t = 0; t < 4; t++) {
            make_row(types[t], row, n);
            quant_dequant_row(types[t], row, w, n);
            double exact = 0, mag = 0;
            for (int64_t i = 0; i < n; i++) {
                exact += (double)w[i] * x[i];
                mag += fabs((double)w[i] * x[i]);
            }
            dot_fn fr = t == 0 ? ref.f32 : t == 1 ? ref.f16 : t == 2 ? ref.q8_0 : ref.q4_0;
            dot_fn ff = t == 0 ? fast.f32 : t == 1 ? fast.f16 : t == 2 ? fast.q8_0 : fast.q4_0;
            /* f32 summation error bound: a few ulps of the magnitude sum */
            double tol = 1e-6 * mag + 1e-6;
            CHECKF(fabs(fr(row, x, n) - exact) <= tol, "ref type %u", types[t]);
            CHECKF(fabs(ff(row, x, n) - exact) <= tol, "fast type %u: %g vs %g", types[t], ff(row, x, n), exact);
            dot_q8_fn fq = t == 2 ? fast.q8_0_q8 : t == 3 ? fast.q4_0_q8 : NULL;
            mm_q8_fn fm = t == 2 ? fast.q8_0_mm : t == 3 ? fast.q4_0_mm : NULL;
            if (fq && fast.quantize_act) {
                fast.quantize_act(x, n, &xq, 0);
                double bound = 0;
                int sums_ok = 1;
                for (int64_t b = 0; b < n / 32; b++) {
                    double sw = 0, amax = 0;
                    int32_t cs = 0;
                    for (int k = 0; k < 32; k++) {
                        sw += fabs(w[b * 32 + k]);
                        amax = fmax(amax, fabs(x[b * 32 + k]));
                        cs += xq.q[b * 32 + k];
                    }
                    bound += sw * amax / 254.0 * 1.0001;
                    if (xq.s[b] != cs) sums_ok = 0;
                }
                CHECKF(sums_ok, "quantize_act's block code sums");
                const double got = fq(row, &xq, 0, n);
                CHECKF(fabs(got - exact) <= bound + tol, "int8 type %u: %g vs %g (bound %g)", types[t], got, exact, bound);
                if (fm) { /* the multi-row form, one row: the same exact block sums, another f32 order */
                    float got2 = NAN;
                    fm(row, (uint64_t)quant_type_size(types[t]) * (uint64_t)(n / 32), 1, &xq, n / 32, 1, &got2, 1);
                    CHECKF(fabs(got - got2) <= 1e-6 * mag + 1e-6, "int8 type %u: %g one-row, %g multi-row", types[t], got,
                           got2);
                }
            }
        }
    }
    free(row);
    free(x);
    free(w);
    free(xq.d);
    free(xq.q);
    free(xq.s);

    /* tanh-based element ops: the SIMD variants against tanhf, over the
     * range the model feeds them (gate values, logits / 30) and the
     * switch between their two tanh forms at |x| = 0.25 */
    {
        const int64_t m = 4099; /* not a multiple of 8: the tail runs the portable loop */
        float *g = malloc(sizeof(float) * m), *u = malloc(sizeof(float) * m), *o1 = malloc(sizeof(float) * m),
              *o2 = malloc(sizeof(float) * m);
        for (int trial = 0; trial < 4; trial++) {
            const float span = trial == 0 ? 0.6f : trial == 1 ? 4.0f : trial == 2 ? 30.0f : 400.0f;
            for (int64_t i = 0; i < m; i++) g[i] = frand() * span, u[i] = frand();
            ref.geglu(g, u, o1, m);
            fast.geglu(g, u, o2, m);
            int ok = 1;
            for (int64_t i = 0; i < m; i++) /* gelu(x) u = 0.5 x u (1 + tanh): tanh's error times 0.5 |x u| */
                if (!(fabsf(o1[i] - o2[i]) <= 1e-6f * (1.0f + 0.5f * fabsf(g[i] * u[i])))) ok = 0;
            CHECKF(ok, "geglu %s vs portable, span %g", fast.name, span);
            memcpy(o1, g, sizeof(float) * m), memcpy(o2, g, sizeof(float) * m);
            ref.softcap(o1, m, 30.0f);
            fast.softcap(o2, m, 30.0f);
            ok = 1;
            for (int64_t i = 0; i < m; i++)
                if (!(fabsf(o1[i] - o2[i]) <= 30.0f * 1e-6f)) ok = 0;
            CHECKF(ok, "softcap %s vs portable, span %g", fast.name, span);
        }
        g[0] = NAN;
        fast.softcap(g, 8, 30.0f);
        CHECKF(isnan(g[0]), "softcap keeps NaN");
        free(g), free(u), free(o1), free(o2);
    }

    static const char *const variants[] = {"avx512vnni", "avx2", "scalar"};
    for (int v = 0; v < 3; v++) {
        cpu_kernels k;
        if (!kernels_variant(variants[v], &k)) {
            printf("no %s on this CPU: its tile contract is not tested here\n", variants[v]);
            continue;
        }
        tile_contract(&k, QT_Q4_0);
        tile_contract(&k, QT_Q8_0);
    }
    return test_report("test_cpu_kernels");
}
