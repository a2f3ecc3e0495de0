/* Sampler (see sampler.h). Candidates are (logit, id) pairs; top-k uses a
 * partial selection so the common case never sorts the whole vocabulary. */
#include "engine/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/argmax.h"
#include "util/rng.h"

typedef struct {
    float logit;
    int32_t id;
} cand;

struct sampler {
    gem_sampling p;
    int n_vocab;
    uint64_t state;
    cand *c;
    float *work;
    uint16_t *count;
};

gem_sampling gem_sampling_default(void) {
    gem_sampling s = {0.0f, 0, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 64, 0, NULL, NULL, 0};
    return s;
}

sampler *sampler_new(const gem_sampling *p, int n_vocab) {
    sampler *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->p = *p;
    s->n_vocab = n_vocab;
    s->state = p->seed ^ RNG_GAMMA;
    s->c = malloc((size_t)n_vocab * sizeof *s->c);
    s->work = malloc((size_t)n_vocab * sizeof *s->work);
    s->count = calloc((size_t)n_vocab, sizeof *s->count);
    /* the biases are copied: a request's arrays may go before the sampler */
    const int nb = p->n_bias > 0 ? p->n_bias : 0;
    int32_t *ids = nb ? malloc((size_t)nb * sizeof *ids) : NULL;
    float *bias = nb ? malloc((size_t)nb * sizeof *bias) : NULL;
    s->p.bias_ids = ids, s->p.bias = bias, s->p.n_bias = nb;
    if (!s->c || !s->work || !s->count || (nb && (!ids || !bias))) {
        sampler_free(s);
        return NULL;
    }
    for (int i = 0; i < nb; i++) ids[i] = p->bias_ids[i], bias[i] = p->bias[i];
    return s;
}

void sampler_free(sampler *s) {
    if (!s) return;
    free(s->c);
    free(s->work);
    free(s->count);
    free((void *)s->p.bias_ids);
    free((void *)s->p.bias);
    free(s);
}

static double uniform(sampler *s) {
    return (double)(rng_splitmix64(&s->state) >> 11) / 9007199254740992.0;
}

static int cand_desc(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Moves the k largest candidates to the front (unordered). */
static void select_top(cand *c, size_t n, size_t k) {
    size_t lo = 0, hi = n;
    while (hi - lo > 1) {
        cand pivot = c[lo + (hi - lo) / 2];
        size_t i = lo, j = hi - 1;
        while (i <= j) {
            while (cand_desc(&c[i], &pivot) < 0) i++;
            while (cand_desc(&c[j], &pivot) > 0) j--;
            if (i <= j) {
                cand t = c[i]; c[i] = c[j]; c[j] = t;
                i++;
                if (j == 0) break;
                j--;
            }
        }
        if (k <= j) hi = j + 1;
        else if (k >= i) lo = i;
        else break;
    }
}

static int penalties_on(const gem_sampling *p) {
    return p->penalty_last_n != 0 && (p->repeat_penalty != 1.0f || p->presence_penalty != 0 || p->frequency_penalty != 0);
}

static int32_t sample_sorted(sampler *s, size_t n);

int sampler_is_greedy(const sampler *s) { return s->p.temp <= 0 && !penalties_on(&s->p) && !s->p.n_bias; }

int32_t sampler_sample(sampler *s, const float *logits, const int32_t *hist, size_t n_hist) {
    const gem_sampling *p = &s->p;
    /* greedy without penalties or biases reads the logits as they are */
    if (p->temp <= 0 && !penalties_on(p) && !p->n_bias) return gem_argmax(logits, s->n_vocab);
    float *l = s->work;
    memcpy(l, logits, (size_t)s->n_vocab * sizeof *l);
    /* biases first (llama.cpp's chain): -100 or less bans the token */
    for (int i = 0; i < p->n_bias; i++)
        if (p->bias_ids[i] >= 0 && p->bias_ids[i] < s->n_vocab)
            l[p->bias_ids[i]] = p->bias[i] <= -100.0f ? -INFINITY : l[p->bias_ids[i]] + p->bias[i];
    /* penalties over the recent history */
    if (penalties_on(p)) {
        size_t from = p->penalty_last_n < 0 || (size_t)p->penalty_last_n >= n_hist ? 0 : n_hist - (size_t)p->penalty_last_n;
        for (size_t i = from; i < n_hist; i++)
            if (hist[i] >= 0 && hist[i] < s->n_vocab && s->count[hist[i]] < UINT16_MAX) s->count[hist[i]]++;
        for (size_t i = from; i < n_hist; i++) {
            int32_t t = hist[i];
            if (t < 0 || t >= s->n_vocab || !s->count[t]) continue;
            float v = l[t];
            if (p->repeat_penalty != 1.0f) v = v > 0 ? v / p->repeat_penalty : v * p->repeat_penalty;
            v -= (float)s->count[t] * p->frequency_penalty + p->presence_penalty;
            l[t] = v;
            s->count[t] = 0; /* each distinct token once */
        }
    }
    if (p->temp <= 0) return gem_argmax(l, s->n_vocab);
    size_t n = (size_t)s->n_vocab;
    for (size_t i = 0; i < n; i++) s->c[i] = (cand){l[i], (int32_t)i};
    if (p->top_k > 0 && (size_t)p->top_k < n) {
        select_top(s->c, n, (size_t)p->top_k);
        n = (size_t)p->top_k;
    }
    return sample_sorted(s, n);
}

int sampler_topk(const sampler *s) {
    const gem_sampling *p = &s->p;
    return p->temp > 0 && !penalties_on(p) && !p->n_bias && p->top_k > 0 && p->top_k <= SAMPLER_TOPK_MAX && p->top_k < s->n_vocab
               ? p->top_k
               : 0;
}

int32_t sampler_sample_top(sampler *s, const float *vals, const int32_t *ids, int k) {
    for (int i = 0; i < k; i++) s->c[i] = (cand){vals[i], ids[i]};
    return sample_sorted(s, (size_t)k);
}

/* The chain after top-k, on the n candidates at the front of s->c. */
static int32_t sample_sorted(sampler *s, size_t n) {
    const gem_sampling *p = &s->p;
    qsort(s->c, n, sizeof *s->c, cand_desc);
    /* probabilities at temperature 1 for the top-p / min-p filters */
    double mx = s->c[0].logit, sum = 0;
    for (size_t i = 0; i < n; i++) sum += exp(s->c[i].logit - mx);
    if (p->top_p < 1.0f) {
        double cum = 0;
        size_t keep = n;
        for (size_t i = 0; i < n; i++) {
            cum += exp(s->c[i].logit - mx) / sum;
            if (cum >= p->top_p) { keep = i + 1; break; }
        }
        n = keep;
    }
    if (p->min_p > 0) {
        size_t keep = 1;
        for (size_t i = 1; i < n; i++)
            if (exp(s->c[i].logit - mx) >= p->min_p) keep = i + 1;
            else break;
        n = keep;
    }
    /* temperature, then a draw */
    double total = 0;
    for (size_t i = 0; i < n; i++) {
        double w = exp((s->c[i].logit - mx) / p->temp);
        s->work[i] = (float)w;
        total += w;
    }
    double r = uniform(s) * total, acc = 0;
    size_t last = 0; /* the last candidate with weight: a rounding shortfall of acc falls back to it, never to
                      * a banned (-inf) candidate */
    for (size_t i = 0; i < n; i++) {
        acc += s->work[i];
        if (s->work[i] > 0) last = i;
        if (r < acc) return s->c[i].id;
    }
    return s->c[last].id;
}
