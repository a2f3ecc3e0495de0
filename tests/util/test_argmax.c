/* util/argmax: the vector path equals the scalar definition (lowest index
 * of the maximum, NaN never chosen unless first) on rows with ties, NaNs,
 * signed zeros, infinities and every length around the vector widths.
 * gem_top1_prob within 1e-5 relative of its double definition (the vector
 * exp's error, 1e-6 per term, with margin) on rows of every length up to
 * 300 and on vocabulary-sized rows, from flat to peaked; NaN in, NaN out. */
#include <math.h>
#include <stdlib.h>

#include "test.h"
#include "util/argmax.h"
#include "util/rng.h"

int main(void) {
    enum { N = 300 };
    float v[N];
    /* fixed cases */
    float a[] = {1, 3, 3, 2};
    CHECK(gem_argmax(a, 4) == 1);
    float b[] = {NAN, 5, 6};
    CHECK(gem_argmax(b, 3) == 0);
    float c[] = {-1, NAN, -0.0f, 0.0f, NAN};
    CHECK(gem_argmax(c, 5) == 2);
    float d[] = {-INFINITY, -INFINITY};
    CHECK(gem_argmax(d, 2) == 0);
    CHECK(gem_argmax(a, 1) == 0);
    CHECK(gem_argmax(a, 0) == 0);
    /* random rows: few distinct values (ties), NaNs, infinities, zeros */
    uint64_t s = 7;
    int bad = 0;
    for (int t = 0; t < 20000; t++) {
        const int n = 1 + (int)(rng_splitmix64(&s) % N);
        const int kinds = 1 + (int)(rng_splitmix64(&s) % 6);
        for (int i = 0; i < n; i++) {
            const uint64_t r = rng_splitmix64(&s);
            switch (r % (uint64_t)kinds) {
            case 0: v[i] = (float)(int)((r >> 8) % 5) - 2.0f; break; /* ties */
            case 1: v[i] = NAN; break;
            case 2: v[i] = (r >> 9) & 1 ? 0.0f : -0.0f; break;
            case 3: v[i] = (r >> 9) & 1 ? INFINITY : -INFINITY; break;
            default: v[i] = (float)((double)(r >> 11) / 9007199254740992.0 * 20 - 10);
            }
        }
        if (gem_argmax(v, n) != gem_argmax_ref(v, n)) bad++;
    }
    CHECKF(bad == 0, "%d of 20000 random rows differ from the scalar definition", bad);

    /* top-1 probability */
    CHECK(gem_top1_prob(a, 1, NULL) == 1.0f && gem_top1_prob_ref(a, 1) == 1.0);
    float two[] = {0, 0};
    CHECK(fabsf(gem_top1_prob(two, 2, NULL) - 0.5f) < 1e-7f);
    CHECK(isnan(gem_top1_prob(b, 3, NULL)) && isnan(gem_top1_prob(c, 5, NULL)));
    double worst = 0;
    for (int t = 0; t < 5000; t++) {
        const int n = 1 + (int)(rng_splitmix64(&s) % N);
        const double scale = 0.01 * (double)(1 + rng_splitmix64(&s) % 4000); /* flat .. peaked: spread up to 400 */
        for (int i = 0; i < n; i++) v[i] = (float)(((double)(rng_splitmix64(&s) >> 11) / 9007199254740992.0 - 0.5) * scale);
        const double r = gem_top1_prob_ref(v, n), g = gem_top1_prob(v, n, NULL);
        if (fabs(g - r) / r > worst) worst = fabs(g - r) / r;
    }
    enum { VOC = 262144 };
    float *big = malloc(VOC * sizeof *big);
    for (int t = 0; big && t < 6; t++) {
        const double scale = t == 0 ? 1e-3 : t * 8.0;
        for (int i = 0; i < VOC; i++) big[i] = (float)(((double)(rng_splitmix64(&s) >> 11) / 9007199254740992.0) * scale);
        big[(t * 7919) % VOC] += (float)(t * 3); /* a leader, more or less clear */
        const double r = gem_top1_prob_ref(big, VOC), g = gem_top1_prob(big, VOC, NULL);
        if (fabs(g - r) / r > worst) worst = fabs(g - r) / r;
    }
    free(big);
    CHECKF(worst <= 1e-5, "gem_top1_prob is %.3g relative from its definition", worst);
    return test_report("util/argmax");
}
