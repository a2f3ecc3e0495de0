/* The AVX2 exponential core shared by the CPU backend's tanh (GELU) and
 * gem_top1_prob: y = k ln2 + r with k = round(y / ln2) and ln2 in two
 * parts (the high part exact in few bits, so r is exact enough), and
 * e^r by its Taylor polynomial to degree 7 (|r| <= ln2 / 2: truncation
 * below 2e-8 relative). The caller scales by 2^k (its range decides how).
 * x86-64 builds only; callers are compiled for AVX2 and FMA. */
#ifndef GEM_UTIL_VEXP_H
#define GEM_UTIL_VEXP_H

#if defined(__x86_64__)
#include <immintrin.h>

/* e^r of y's reduction, and k in *k (a whole number as a float) */
__attribute__((target("avx2,fma"))) static inline __m256 gem_exp_reduced8(__m256 y, __m256 *k) {
    *k = _mm256_round_ps(_mm256_mul_ps(y, _mm256_set1_ps(1.4426950408889634f)),
                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(*k, _mm256_set1_ps(0.693145751953125f), y);
    r = _mm256_fnmadd_ps(*k, _mm256_set1_ps(1.428606820309417e-06f), r);
    __m256 e = _mm256_set1_ps(1.0f / 5040.0f);
    e = _mm256_fmadd_ps(e, r, _mm256_set1_ps(1.0f / 720.0f));
    e = _mm256_fmadd_ps(e, r, _mm256_set1_ps(1.0f / 120.0f));
    e = _mm256_fmadd_ps(e, r, _mm256_set1_ps(1.0f / 24.0f));
    e = _mm256_fmadd_ps(e, r, _mm256_set1_ps(1.0f / 6.0f));
    e = _mm256_fmadd_ps(e, r, _mm256_set1_ps(0.5f));
    e = _mm256_fmadd_ps(e, r, _mm256_set1_ps(1.0f));
    return _mm256_fmadd_ps(e, r, _mm256_set1_ps(1.0f));
}
#endif

#endif
