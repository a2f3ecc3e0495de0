/* Top-k log-probabilities (see logprobs.h). */
#include "engine/logprobs.h"

#include <math.h>

#include "util/argmax.h"

double gem_logsumexp(const float *logits, int n) {
    const float mx = logits[gem_argmax(logits, n)];
    double sum = 0;
    for (int i = 0; i < n; i++) sum += exp((double)logits[i] - mx);
    return mx + log(sum);
}

/* a before b: larger logit, then lower id */
static int before(float la, int32_t a, float lb, int32_t b) { return la > lb || (la == lb && a < b); }

double gem_top_logprobs(const float *logits, int n, int k, int32_t *ids, double *logprobs) {
    int m = 0; /* entries held, sorted: ids[0..m) */
    for (int i = 0; i < n; i++) {
        float l = logits[i];
        if (m == k && !before(l, i, logits[ids[m - 1]], ids[m - 1])) continue;
        int j = m < k ? m++ : k - 1;
        while (j > 0 && before(l, i, logits[ids[j - 1]], ids[j - 1])) {
            ids[j] = ids[j - 1];
            j--;
        }
        ids[j] = i;
    }
    double lse = gem_logsumexp(logits, n);
    for (int j = 0; j < m; j++) logprobs[j] = (double)logits[ids[j]] - lse;
    return lse;
}
