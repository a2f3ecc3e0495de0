/* CPU dot kernels against the reference dequantize-then-dot: the f32-path
 * kernels (any instruction set) agree to rounding; the integer kernels on
 * 8-bit activations agree within the bound the activation rounding implies
 * (half a step per value: sum |w| * max|x| / 254 per block). */
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

int main(void) {
    const int64_t n = 1536;
    cpu_kernels ref = kernels_pick(1), fast = kernels_pick(0);
    printf("fast kernels: %s\n", fast.name);
    uint8_t *row = malloc((size_t)n * 4);
    float *x = malloc((size_t)n * 4), *w = malloc((size_t)n * 4);
    /* m8 set: the q4_0 decode kernel takes its VNNI form where the CPU has it */
    act_q8 xq = {malloc((size_t)n / 32 * 4), malloc((size_t)n), NULL, malloc((size_t)n / 32 * 8 * sizeof(int32_t))};
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
            if (fq && fast.quantize_act) {
                fast.quantize_act(x, n, &xq, 0);
                double bound = 0;
                for (int64_t b = 0; b < n / 32; b++) {
                    double sw = 0, amax = 0;
                    for (int k = 0; k < 32; k++) {
                        sw += fabs(w[b * 32 + k]);
                        amax = fmax(amax, fabs(x[b * 32 + k]));
                    }
                    bound += sw * amax / 254.0 * 1.0001;
                }
                double got = fq(row, &xq, 0, n);
                CHECKF(fabs(got - exact) <= bound + tol, "int8 type %u: %g vs %g (bound %g)", types[t], got, exact, bound);
                /* without m8 (the AVX2 form): the same exact block sums, so
                 * equal up to the f32 accumulation order */
                int32_t *m8 = xq.m8;
                xq.m8 = NULL;
                const double got2 = fq(row, &xq, 0, n);
                xq.m8 = m8;
                CHECKF(fabs(got - got2) <= 1e-6 * mag + 1e-6, "int8 type %u: %g with m8, %g without", types[t], got, got2);
            }
        }
    }
    free(row);
    free(x);
    free(w);
    free(xq.d);
    free(xq.q);
    free(xq.m8);

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

    /* eight-row blocks against the one-row integer kernels: the same exact
     * integer block sums and per-block scales, only the f32 accumulation
     * order differs (1e-6 of the sum of |terms|); 1..8 rows, 1..9 tokens */
    if (fast.q8_0_gemm) {
        const int64_t K = 1536, nb = K / 32;
        const uint32_t gt[2] = {QT_Q8_0, QT_Q4_0};
        for (int ti = 0; ti < 2; ti++) {
            const uint64_t rb = (uint64_t)(nb * quant_type_size(gt[ti]));
            uint8_t *rows = malloc(rb * 8);
            float *xs = malloc(sizeof(float) * (size_t)(K * 9)), *deq = malloc(sizeof(float) * (size_t)K);
            act_q8 q9 = {malloc(sizeof(float) * (size_t)(nb * 9)), malloc((size_t)(K * 9)), malloc((size_t)(K * 9)),
                         malloc(sizeof(int32_t) * (size_t)(nb * 9 * 8))};
            void *scratch = malloc(gemm8_scratch_bytes(nb));
            for (int r = 0; r < 8; r++) make_row(gt[ti], rows + rb * (uint64_t)r, K);
            for (int64_t i = 0; i < K * 9; i++) xs[i] = frand() * (i % 53 == 0 ? 25.0f : 1.0f);
            for (int t = 0; t < 9; t++) fast.quantize_act(xs + t * K, K, &q9, t * nb);
            for (int64_t i = 0; i < K * 9; i++) q9.u[i] = (uint8_t)q9.q[i] ^ 0x80;
            gemm_q8_fn g = gt[ti] == QT_Q8_0 ? fast.q8_0_gemm : fast.q4_0_gemm;
            dot_q8_fn d1 = gt[ti] == QT_Q8_0 ? fast.q8_0_q8 : fast.q4_0_q8;
            for (int nrows = 1; nrows <= 8; nrows += 7)
                for (int ntok = 1; ntok <= 9; ntok += 4) {
                    float out[9 * 10];
                    for (int i = 0; i < 90; i++) out[i] = NAN;
                    g(rows, rb, nrows, &q9, nb, ntok, out, 10, scratch);
                    int ok = 1;
                    for (int t = 0; t < 9; t++)
                        for (int r = 0; r < 10; r++) {
                            const float got = out[t * 10 + r];
                            if (t >= ntok || r >= nrows) { /* nothing written outside the block */
                                if (!isnan(got)) ok = 0;
                                continue;
                            }
                            quant_dequant_row(gt[ti], rows + rb * (uint64_t)r, deq, K);
                            double mag = 0;
                            for (int64_t i = 0; i < K; i++) mag += fabs((double)deq[i] * xs[t * K + i]);
                            const float want = d1(rows + rb * (uint64_t)r, &q9, t * nb, K);
                            if (!(fabs(got - want) <= 1e-6 * mag + 1e-6)) ok = 0;
                        }
                    CHECKF(ok, "gemm8 %s rows %d tokens %d", quant_type_name(gt[ti]), nrows, ntok);
                }
            free(rows), free(xs), free(deq), free(q9.d), free(q9.q), free(q9.u), free(q9.m8), free(scratch);
        }
    } else {
        printf("no AVX512-VNNI on this CPU: the eight-row kernels are not tested here\n");
    }
    return test_report("test_cpu_kernels");
}
