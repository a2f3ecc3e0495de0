/* Token sampling from logits. The chain and its order follow llama.cpp's
 * default: logit biases, repetition/presence/frequency penalties over the last
 * `penalty_last_n` tokens, then top-k, top-p, min-p, temperature, and a draw
 * from the renormalised distribution. temp <= 0 means greedy (argmax after
 * penalties; ties go to the lowest id). The random stream depends only on
 * the seed, so a seed fixes the output. */
#ifndef GEM_ENGINE_SAMPLER_H
#define GEM_ENGINE_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    float temp;              /* 0: greedy */
    int top_k;               /* 0: off */
    float top_p;             /* 1: off */
    float min_p;             /* 0: off */
    float repeat_penalty;    /* 1: off */
    float presence_penalty;  /* 0: off */
    float frequency_penalty; /* 0: off */
    int penalty_last_n;      /* tokens of history the penalties look at */
    uint64_t seed;
    /* logit biases (OpenAI's logit_bias): bias[i] added to the logit of
     * bias_ids[i] before everything else, -100 or less banning it; the
     * arrays are the caller's until sampler_new copies them */
    const int32_t *bias_ids;
    const float *bias;
    int n_bias;
} gem_sampling;

gem_sampling gem_sampling_default(void); /* greedy, penalties off, last_n 64 */

typedef struct sampler sampler;

sampler *sampler_new(const gem_sampling *s, int n_vocab);
void sampler_free(sampler *s);
/* True when the draw is a plain argmax (greedy, no penalty, no bias): the engine can
 * then take the argmax on the device (gem_session_eval_greedy). */
int sampler_is_greedy(const sampler *s);
/* logits is left unchanged; history are the tokens so far (prompt and output). */
int32_t sampler_sample(sampler *s, const float *logits, const int32_t *history, size_t n_history);

/* When the draw needs only the top_k largest logits (temperature > 0, no
 * penalty or bias, 1 <= top_k <= SAMPLER_TOPK_MAX, fewer than the vocabulary):
 * top_k, else 0. The engine then takes the top k on the backend and
 * sampler_sample_top draws from them: the same token sampler_sample draws
 * from the whole vocabulary, given the k largest (value descending, lowest
 * id first among equals). */
#define SAMPLER_TOPK_MAX 128
int sampler_topk(const sampler *s);
int32_t sampler_sample_top(sampler *s, const float *vals, const int32_t *ids, int k);

#endif
