/* The index of the largest value of a float row: the greedy pick of the
 * sampler, the CPU backend's argmax op and the drafter's proposals share
 * it, so every greedy decision in gem breaks ties the same way.
 *
 * Defined as the scalar loop `best = 0; for i: if (v[i] > v[best]) best = i`:
 * the lowest index of the maximum, NaN never chosen unless v[0] is NaN
 * (nothing compares greater than it). The vector path finds the maximum
 * first, then its first index: the same answer. */
#ifndef GEM_UTIL_ARGMAX_H
#define GEM_UTIL_ARGMAX_H

#include <stdint.h>

int32_t gem_argmax(const float *v, int32_t n);

/* the scalar definition (tests compare the two) */
int32_t gem_argmax_ref(const float *v, int32_t n);

/* The softmax probability of the largest value, 1 / sum_i exp(v[i] - max)
 * (an MTP drafter's confidence in its proposal). Defined by
 * gem_top1_prob_ref, in double; the AVX2 path takes exp from a polynomial
 * after the 2^k split (relative error below 1e-6 per term, terms summed in
 * double), so the two agree within 1e-5 relative (test_argmax). NaN where
 * v holds a NaN; 1 for n <= 1. */
float gem_top1_prob(const float *v, int32_t n, int32_t *idx); /* idx (if not NULL): gem_argmax's */
double gem_top1_prob_ref(const float *v, int32_t n);

#endif
