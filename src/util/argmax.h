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

#endif
