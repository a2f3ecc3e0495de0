/* Parity with transformers (the Gemma 4 logit oracle): for each golden in
 * tests/data/hf (written on the GPU machine by tools/hf_golden.sh from the
 * same gem-synthesized F32 model), gem's logits over a 140-token prompt
 * (four times the sliding window) must agree within 1e-3 after the soft-cap
 * at 2048 sampled vocabulary ids and at the oracle's top 16 of every
 * position, and the argmax must be identical at every position where the
 * oracle's top-2 margin exceeds that tolerance (closer calls are decided by
 * rounding and are reported, not asserted). Both paths run: the scalar
 * reference and the fast CPU path. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "engine/engine.h"
#include "model/gemma4.h"
#include "quant/quant.h"
#include "synth_tiny.h"
#include "test.h"

#define TOL 1e-3

static void check_golden(const char *path, int seed) {
    size_t n;
    char *raw = test_slurp(path, &n);
    CHECK(raw && n > 20 && !memcmp(raw, "GEMHF1", 6));
    if (!raw) return;
    uint32_t n_pos, n_sub, n_top;
    memcpy(&n_pos, raw + 8, 4);
    memcpy(&n_sub, raw + 12, 4);
    memcpy(&n_top, raw + 16, 4);
    const char *p = raw + 20;
    int32_t *ids = malloc(n_pos * 4), *sub = malloc(n_sub * 4);
    memcpy(ids, p, n_pos * 4);
    p += n_pos * 4;
    memcpy(sub, p, n_sub * 4);
    p += n_sub * 4;
    const char *per_pos = p;
    size_t stride = 12 + (size_t)n_sub * 4 + (size_t)n_top * 8;
    CHECK((size_t)(per_pos - raw) + stride * n_pos == n);

    char model[] = "/tmp/gem-hf-XXXXXX";
    gem_err err = {{0}};
    CHECKF(!test_tmp_file(model), "cannot make %s", model);
    CHECKF(!test_synth_tiny(model, (uint64_t)seed, 0, &err), "%s", err.msg);
    float *logits = malloc((size_t)n_pos * GEMMA4_N_VOCAB * sizeof(float));
    for (int ref = 0; ref <= 1; ref++) {
        gem_engine_opts eo = {0};
        eo.model_path = model;
        eo.n_ctx = 512;
        eo.cpu_ref = ref;
        gem_engine *e = gem_engine_open(&eo, &err);
        gem_session *s = e ? gem_session_new(e, &err) : NULL;
        CHECKF(s && !gem_session_eval_all(s, ids, (int)n_pos, logits, &err), "%s", err.msg);
        double worst = 0;
        int argmax_bad = 0, close_calls = 0;
        for (uint32_t i = 0; i < n_pos; i++) {
            const char *q = per_pos + stride * i;
            int32_t am;
            float mx, margin;
            memcpy(&am, q, 4);
            memcpy(&mx, q + 4, 4);
            memcpy(&margin, q + 8, 4);
            const float *want_sub = (const float *)(q + 12);
            const int32_t *top_ids = (const int32_t *)(q + 12 + n_sub * 4);
            const float *top = (const float *)(q + 12 + n_sub * 4 + n_top * 4);
            const float *l = logits + (size_t)i * GEMMA4_N_VOCAB;
            for (uint32_t k = 0; k < n_sub; k++) worst = fmax(worst, fabs(l[sub[k]] - want_sub[k]));
            for (uint32_t k = 0; k < n_top; k++) worst = fmax(worst, fabs(l[top_ids[k]] - top[k]));
            int best = 0;
            for (int k = 1; k < (int)GEMMA4_N_VOCAB; k++)
                if (l[k] > l[best]) best = k;
            if (best != am) {
                if (margin > TOL) argmax_bad++;
                else close_calls++;
            }
        }
        CHECKF(worst <= TOL, "%s (%s): max |logit - transformers| = %g", path, ref ? "cpu-ref" : "cpu", worst);
        CHECKF(argmax_bad == 0, "%s (%s): argmax differs at %d positions", path, ref ? "cpu-ref" : "cpu", argmax_bad);
        printf("%s (%s): %u positions, max |diff| %.3g, argmax identical except %d close calls\n", path,
               ref ? "cpu-ref" : "cpu", n_pos, worst, close_calls);
        gem_session_free(s);
        gem_engine_close(e);
    }
    remove(model);
    free(logits);
    free(ids);
    free(sub);
    free(raw);
}

int main(void) {
    DIR *d = opendir("tests/data/hf");
    CHECK(d != NULL);
    int count = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        int seed;
        if (sscanf(e->d_name, "gemma4-tiny-f32-seed%d-long.bin", &seed) != 1) continue;
        char path[512];
        snprintf(path, sizeof path, "tests/data/hf/%s", e->d_name);
        check_golden(path, seed);
        count++;
    }
    if (d) closedir(d);
    CHECKF(count >= 1, "no transformers goldens found");
    return test_report("test_hf_parity");
}
