/* Log-probabilities of a next-token distribution: log-softmax over the
 * whole vocabulary of the (soft-capped) logits an eval leaves, and its top
 * k entries. Used by `gem run --top-logprobs` (bench/logits.py compares
 * them with the reference and the transformers goldens). */
#ifndef GEM_ENGINE_LOGPROBS_H
#define GEM_ENGINE_LOGPROBS_H

#include <stdint.h>

/* log(sum_i exp(logits[i])) over all n logits, in double after subtracting
 * the maximum. The log-probability of token t is logits[t] - that value. */
double gem_logsumexp(const float *logits, int n);

/* The k (1 <= k <= n) largest logits in descending order, ties to the
 * lowest id (so ids[0] is the greedy choice of gem_session_eval_greedy and
 * the sampler), with their log-probabilities; returns the log-sum-exp. */
double gem_top_logprobs(const float *logits, int n, int k, int32_t *ids, double *logprobs);

#endif
