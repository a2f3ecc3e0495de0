/* gem_argmax (see argmax.h): an AVX2 maximum then a first-match scan where
 * the CPU has AVX2 (checked once per call: cheap beside 262144 values),
 * else the scalar loop. MAXPS(x, m) returns m when x is NaN, so NaNs drop
 * out of the maximum exactly as they never win the scalar comparison.
 * gem_top1_prob: the same maximum, then the sum of exp(v - max) with a
 * vector exp where the CPU has AVX2 and FMA. */
#include "util/argmax.h"

#include <math.h>

int32_t gem_argmax_ref(const float *v, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return best;
}

#if defined(__x86_64__)
#include <immintrin.h>

#include "util/vexp.h"

__attribute__((target("avx2"))) static int32_t argmax_avx2(const float *v, int32_t n) {
    __m256 m0 = _mm256_set1_ps(v[0]), m1 = m0, m2 = m0, m3 = m0;
    int32_t i = 0;
    for (; i + 32 <= n; i += 32) {
        m0 = _mm256_max_ps(_mm256_loadu_ps(v + i), m0);
        m1 = _mm256_max_ps(_mm256_loadu_ps(v + i + 8), m1);
        m2 = _mm256_max_ps(_mm256_loadu_ps(v + i + 16), m2);
        m3 = _mm256_max_ps(_mm256_loadu_ps(v + i + 24), m3);
    }
    m0 = _mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3));
    float lanes[8];
    _mm256_storeu_ps(lanes, m0);
    float m = lanes[0];
    for (int j = 1; j < 8; j++)
        if (lanes[j] > m) m = lanes[j];
    for (; i < n; i++)
        if (v[i] > m) m = v[i];
    /* the first index holding m (m is v[0] or a value of v: one exists) */
    const __m256 mm = _mm256_set1_ps(m);
    i = 0;
    for (; i + 8 <= n; i += 8) {
        const int bits = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(v + i), mm, _CMP_EQ_OQ));
        if (bits) return i + __builtin_ctz((unsigned)bits);
    }
    for (; i < n; i++)
        if (v[i] == m) return i;
    return 0;
}
#endif

int32_t gem_argmax(const float *v, int32_t n) {
    if (n <= 1 || isnan(v[0])) return 0;
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2")) return argmax_avx2(v, n);
#endif
    return gem_argmax_ref(v, n);
}

/* a NaN anywhere makes the sum NaN (the maximum skips NaNs; exp does not) */
double gem_top1_prob_ref(const float *v, int32_t n) {
    if (n <= 1) return 1.0;
    const double m = v[gem_argmax_ref(v, n)];
    double s = 0;
    for (int32_t i = 0; i < n; i++) s += exp((double)v[i] - m);
    return 1.0 / s;
}

#if defined(__x86_64__)
/* exp(x) for x <= 0: the shared reduction and polynomial (util/vexp.h)
 * times 2^k built in the exponent bits; x below -87 (exp under 1.6e-38:
 * nothing beside the maximum's 1) gives 0. A NaN x comes out finite: the
 * caller flags NaNs itself. */
__attribute__((target("avx2,fma"))) static __m256 exp_neg(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-87.0f);
    const __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    x = _mm256_max_ps(x, lo); /* NaN x: maxps returns lo */
    __m256 k;
    __m256 p = gem_exp_reduced8(x, &k);
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
    p = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
    return _mm256_andnot_ps(under, p);
}

__attribute__((target("avx2,fma"))) static float top1_prob_avx2(const float *v, int32_t n, float m) {
    /* f32 lanes over chunks of 512 values (32 terms of at most 1 per lane
     * and accumulator: rounding far below exp's error), chunks in double */
    const __m256 mm = _mm256_set1_ps(m);
    __m256d sd = _mm256_setzero_pd();
    __m256 nan = _mm256_setzero_ps();
    int32_t i = 0;
    while (i + 16 <= n) {
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
        const int32_t end = i + 512 < n ? i + 512 : n;
        for (; i + 16 <= end; i += 16) {
            const __m256 x0 = _mm256_sub_ps(_mm256_loadu_ps(v + i), mm), x1 = _mm256_sub_ps(_mm256_loadu_ps(v + i + 8), mm);
            nan = _mm256_or_ps(nan, _mm256_cmp_ps(x0, x1, _CMP_UNORD_Q));
            a0 = _mm256_add_ps(a0, exp_neg(x0));
            a1 = _mm256_add_ps(a1, exp_neg(x1));
        }
        const __m256 a = _mm256_add_ps(a0, a1);
        sd = _mm256_add_pd(sd, _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(a)),
                                             _mm256_cvtps_pd(_mm256_extractf128_ps(a, 1))));
    }
    double lanes[4];
    _mm256_storeu_pd(lanes, sd);
    double s = lanes[0] + lanes[1] + lanes[2] + lanes[3];
    for (; i < n; i++) s += exp((double)v[i] - m);
    if (_mm256_movemask_ps(nan)) return NAN;
    return (float)(1.0 / s);
}
#endif

float gem_top1_prob(const float *v, int32_t n, int32_t *idx) {
    const int32_t best = gem_argmax(v, n);
    if (idx) *idx = best;
    if (n <= 1) return 1.0f;
    const float m = v[best];
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return top1_prob_avx2(v, n, m);
#endif
    return (float)gem_top1_prob_ref(v, n);
}
