/* Decisions of a logits row for the model-level CUDA checks (cuda_model,
 * cuda_depth): the greedy pick and how clear it is. A position whose
 * top-2 margin is below TIE is a near-tie: both backends may pick either
 * there, so the checks compare decisions only at clear positions. */
#ifndef GEM_TESTS_CUDA_LOGITS_CHECK_H
#define GEM_TESTS_CUDA_LOGITS_CHECK_H

#include <stddef.h>

#include "util/argmax.h"

#define TIE 0.1f

/* the sampler's greedy pick (lowest index of the maximum) of a row of n
 * logits (the model's vocabulary) */
static inline int lc_argmax(const float *l, size_t n) { return gem_argmax(l, (int32_t)n); }

/* the largest value minus the largest of the others */
static inline float lc_margin(const float *l, size_t n) {
    const int b = lc_argmax(l, n);
    float second = -3.4e38f;
    for (int i = 0; i < (int)n; i++)
        if (i != b && l[i] > second) second = l[i];
    return l[b] - second;
}

#endif
