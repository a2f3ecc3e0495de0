/* gem_argmax (see argmax.h): an AVX2 maximum then a first-match scan where
 * the CPU has AVX2 (checked once per call: cheap beside 262144 values),
 * else the scalar loop. MAXPS(x, m) returns m when x is NaN, so NaNs drop
 * out of the maximum exactly as they never win the scalar comparison. */
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
