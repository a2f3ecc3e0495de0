/* Decisions of a logits row for the model-level CUDA checks (cuda_model,
 * cuda_depth): the greedy pick and how clear it is. A position whose
 * top-2 margin is below TIE is a near-tie: both backends may pick either
 * there, so the checks compare decisions only at clear positions. */
#ifndef GEM_TESTS_CUDA_LOGITS_CHECK_H
#define GEM_TESTS_CUDA_LOGITS_CHECK_H

#include "model/gemma4.h"
#include "util/argmax.h"

#define TIE 0.1f

/* the sampler's greedy pick (lowest index of the maximum) */
static inline int lc_argmax(const float *l) { return gem_argmax(l, (int32_t)GEMMA4_N_VOCAB); }

/* the largest value minus the largest of the others */
static inline float lc_margin(const float *l) {
    const int b = lc_argmax(l);
    float second = -3.4e38f;
    for (int i = 0; i < (int)GEMMA4_N_VOCAB; i++)
        if (i != b && l[i] > second) second = l[i];
    return l[b] - second;
}

#endif
