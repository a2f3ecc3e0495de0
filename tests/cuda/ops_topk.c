/* cuda_ops family topk (see ops_harness.h): argmax and top-k against the
 * CPU, ties and -inf included; argmax_prob against the CPU's double
 * definition. */
#include "ops_harness.h"
#include "util/argmax.h"

static void test_argmax(void) {
    const int width = 262144;
    float *x = rand_vec((size_t)width * 2, 10.0f);
    x[77] = 50, x[1000] = 50, x[width + 262143] = 60; /* a tie goes to the lowest index */
    be_buf *xg = put(gpu, x, (size_t)width * 2), *og = put(gpu, NULL, 2);
    be_buf *xc = put(cpu_ref, x, (size_t)width * 2), *oc = put(cpu_ref, NULL, 2);
    gpu->argmax(gpu, xg, 2, width, og);
    cpu_ref->argmax(cpu_ref, xc, 2, width, oc);
    float *a = get(gpu, og, 2), *b = get(cpu_ref, oc, 2);
    CHECKF(a[0] == 77 && a[1] == 262143, "argmax %g %g", a[0], a[1]);
    CHECK(a[0] == b[0] && a[1] == b[1]);
    free(a), free(b), free(x);
    gpu->buf_free(gpu, xg), gpu->buf_free(gpu, og), cpu_ref->buf_free(cpu_ref, xc), cpu_ref->buf_free(cpu_ref, oc);
}

/* Top-k for sampling: the same values and indices, in the same order, as
 * the CPU's (value descending, lower index first among equals), on the
 * vocabulary's width (64 chunks) and on one partial chunk; rows with many
 * ties and with -inf. */
static void test_topk(void) {
    const int widths[] = {262144, 1000}, ks[] = {1, 40, BE_TOPK_MAX};
    for (int wi = 0; wi < 2; wi++)
        for (int r = 0; r < 3; r++) {
            const int width = widths[wi];
            float *x = rand_vec((size_t)width, 10.0f);
            if (r == 1)
                for (int i = 0; i < width; i++) x[i] = roundf(x[i]); /* ~21 distinct values */
            if (r == 2)
                for (int i = 0; i < width; i += 3) x[i] = -INFINITY;
            be_buf *xg = put(gpu, x, (size_t)width), *og = put(gpu, NULL, 2 * BE_TOPK_MAX);
            be_buf *xc = put(cpu_ref, x, (size_t)width), *oc = put(cpu_ref, NULL, 2 * BE_TOPK_MAX);
            for (int ki = 0; ki < 3; ki++) {
                const int k = ks[ki];
                gpu->topk(gpu, xg, width, k, og);
                cpu_ref->topk(cpu_ref, xc, width, k, oc);
                float *a = get(gpu, og, (size_t)(2 * k)), *b = get(cpu_ref, oc, (size_t)(2 * k));
                int ok = 1;
                for (int i = 0; i < 2 * k; i++) ok &= a[i] == b[i];
                CHECKF(ok, "topk width %d row kind %d k %d: first %g@%g vs %g@%g", width, r, k, a[0], a[k], b[0], b[k]);
                free(a), free(b);
            }
            free(x);
            gpu->buf_free(gpu, xg), gpu->buf_free(gpu, og), cpu_ref->buf_free(cpu_ref, xc), cpu_ref->buf_free(cpu_ref, oc);
        }
}

/* argmax_prob (the MTP drafter's confidence): the argmax's index and the
 * softmax probability of its value within 1e-5 relative of
 * gem_top1_prob_ref (f32 expf per value, partial sums in f32 per block:
 * well inside it), on rows from flat (p about 4e-6) to peaked, with a tie
 * and a -inf, at the vocabulary's width and at one short of a block. */
static void test_argmax_prob(void) {
    const int widths[] = {262144, 255};
    const float spreads[] = {0.01f, 5.0f, 40.0f};
    for (int wi = 0; wi < 2; wi++)
        for (int si = 0; si < 3; si++) {
            const int width = widths[wi];
            float *x = rand_vec((size_t)width, spreads[si]);
            x[width / 3] = spreads[si] + 1, x[width / 2] = spreads[si] + 1, x[width - 1] = -INFINITY;
            be_buf *xg = put(gpu, x, (size_t)width), *og = put(gpu, NULL, 2);
            gpu->argmax_prob(gpu, xg, width, og);
            float *a = get(gpu, og, 2);
            const double ref = gem_top1_prob_ref(x, width);
            CHECKF(a[0] == (float)(width / 3) && fabs(a[1] - ref) <= 1e-5 * ref,
                   "argmax_prob width %d spread %g: %g %.9g, expected %d %.9g", width, spreads[si], a[0], a[1],
                   width / 3, ref);
            free(a), free(x);
            gpu->buf_free(gpu, xg), gpu->buf_free(gpu, og);
        }
}

void ops_topk(const backend_opts *g) {
    (void)g;
    test_argmax();
    test_argmax_prob();
    test_topk();
}
