/* Parity of gem's MTP drafter (src/model/gemma4_draft.c) with transformers'
 * Gemma4AssistantForCausalLM. The golden in tests/data/hf (written on the
 * GPU machine by tools/hf_golden_mtp.sh) holds, for a 70-token prompt over
 * a gemma4-tiny target (seed 31) and a gemma4-tiny-assistant (seed 32), the
 * drafter's logits at positions below, at and past the 32-token window:
 * step 1 on (prompt[p], the target's hidden state after p-1) at position p
 * over the target's keys before p, and step 2 on (step 1's argmax, step 1's
 * h_next) at the same position.
 *
 * Each position has two records. Variant 1 cuts the sliding layers' keys to
 * [p-W+1, p) before transformers' drafter runs: the keys gem lets a query
 * at p see, as llama.cpp does (a key is masked once p - pos >= W). gem must
 * match it at every position. Variant 0 gives transformers the keys [0, p)
 * and lets its own mask choose; below the window the two are the same
 * input, so gem must match variant 0 there too. Past the window
 * transformers' drafter mask (create_bidirectional_sliding_window_mask,
 * |q - kv| <= W, flipped onto the past) keeps the last W+1 keys,
 * [p-W-1, p): two more than gem and llama.cpp, so variant 0 differs there
 * and its distance is reported, not asserted.
 *
 * Tolerance 1e-3 on logits (at 512 sampled ids and the oracle's top 16):
 * both sides compute in f32 and differ only in summation order, which
 * moves these O(1) logits by about 1e-5; a wrong window, scale, norm or
 * RoPE moves them by 1e-2 or more. Argmax must agree wherever the oracle's
 * top-2 margin exceeds the tolerance. Both CPU paths run: the scalar
 * reference and the fast one. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "model/gemma4.h"
#include "model/gemma4_draft.h"
#include "model/gemma4_run.h"
#include "model/gemma4_synth.h"
#include "synth_tiny.h"
#include "test.h"

#define TOL 1e-3
#define V GEMMA4_N_VOCAB

typedef struct {
    int32_t variant, pos, step, token, argmax;
    float max, margin;
    const float *sub;
    const int32_t *top_ids;
    const float *top;
} record;

static int synth(const char *profile, uint64_t seed, const char *path, gem_err *err) {
    return test_synth_f32(profile, path, seed, 0, err);
}

static int best_of(const float *l) {
    int b = 0;
    for (int k = 1; k < (int)V; k++)
        if (l[k] > l[b]) b = k;
    return b;
}

/* max |gem - oracle| over the record's sampled and top ids */
static double diff_of(const float *l, const record *r, const int32_t *sub, uint32_t n_sub, uint32_t n_top) {
    double worst = 0;
    for (uint32_t k = 0; k < n_sub; k++) worst = fmax(worst, fabs(l[sub[k]] - r->sub[k]));
    for (uint32_t k = 0; k < n_top; k++) worst = fmax(worst, fabs(l[r->top_ids[k]] - r->top[k]));
    return worst;
}

static void check_golden(const char *path, uint64_t seed_t, uint64_t seed_a) {
    size_t n;
    char *raw = test_slurp(path, &n);
    CHECK(raw && n > 32 && !memcmp(raw, "GEMMTP1", 8));
    if (!raw || n <= 32) {
        free(raw);
        return;
    }
    uint32_t hdr[6];
    memcpy(hdr, raw + 8, sizeof hdr);
    const uint32_t n_prompt = hdr[0], n_rec = hdr[1], n_sub = hdr[2], n_top = hdr[3], n_h = hdr[4], window = hdr[5];
    const char *p = raw + 8 + sizeof hdr;
    const int32_t *prompt = (const int32_t *)p, *sub = (const int32_t *)(p + 4 * n_prompt);
    const char *recs = p + 4 * (size_t)n_prompt + 4 * (size_t)n_sub;
    const size_t stride = 28 + 4 * (size_t)n_sub + 8 * (size_t)n_top + 8 + 4 * (size_t)n_h;
    CHECKF((size_t)(recs - raw) + stride * n_rec == n, "%s: %zu bytes, the header implies %zu", path, n,
           (size_t)(recs - raw) + stride * n_rec);
    if ((size_t)(recs - raw) + stride * n_rec != n) {
        free(raw);
        return;
    }
    record *r = calloc(n_rec, sizeof *r);
    for (uint32_t i = 0; i < n_rec; i++) {
        const char *q = recs + stride * i;
        memcpy(&r[i], q, 20);
        memcpy(&r[i].max, q + 20, 4);
        memcpy(&r[i].margin, q + 24, 4);
        r[i].sub = (const float *)(q + 28);
        r[i].top_ids = (const int32_t *)(q + 28 + 4 * (size_t)n_sub);
        r[i].top = (const float *)(q + 28 + 4 * (size_t)n_sub + 4 * (size_t)n_top);
    }

    char tpath[] = "/tmp/gem-hfmtp-t-XXXXXX", apath[] = "/tmp/gem-hfmtp-a-XXXXXX";
    gem_err err = {{0}};
    CHECK(!test_tmp_file(tpath) && !test_tmp_file(apath));
    CHECKF(!synth("gemma4-tiny", seed_t, tpath, &err) && !synth("gemma4-tiny-assistant", seed_a, apath, &err), "%s",
           err.msg);
    gguf_file *tf = gguf_open(tpath, &err), *af = tf ? gguf_open(apath, &err) : NULL;
    gemma4_model *tm = af ? gemma4_bind(tf, &err) : NULL, *am = tm ? gemma4_bind(af, &err) : NULL;
    CHECKF(am != NULL, "%s", err.msg);
    CHECK(!am || am->profile->window == window);
    float *l = malloc(V * sizeof(float));
    /* GEM_TEST_BACKEND=cuda (tests/cuda/run.sh): the GPU's drafter against
     * the same golden; else the CPU's fast and reference paths */
    const char *gpu = getenv("GEM_TEST_BACKEND");
    if (gpu && (!*gpu || !strcmp(gpu, "cpu"))) gpu = NULL;
    for (int ref = 0; am && ref <= (gpu ? 0 : 1); ref++) {
        backend_opts bo = {0};
        bo.reference = ref;
        const char *name = gpu ? gpu : ref ? "cpu-ref" : "cpu";
        backend *b = backend_create(gpu ? gpu : "cpu", &bo, &err);
        gemma4_kv_plan plan;
        gemma4_state *st =
            b && !gemma4_kv_plan_make(tm->profile, 128, GEMMA4_KV_F32, gemma4_ring_slack(b), 64, &plan, &err)
                ? gemma4_state_new(tm, b, &plan, 0, &err)
                : NULL;
        gemma4_drafter *d = st ? gemma4_drafter_new(am, st, &err) : NULL;
        CHECKF(d != NULL, "%s", err.msg);
        double worst = 0, worst_v0_past = 0;
        int argmax_bad = 0, close_calls = 0, checked = 0;
        for (uint32_t i = 0; d && i < n_rec; i++) {
            const record *x = &r[i];
            if (x->pos < 1 || (uint32_t)x->pos >= n_prompt || x->step < 1 || x->step > 2) {
                CHECKF(0, "%s: record %u is malformed", path, i);
                break;
            }
            /* the target evaluates up to (not including) the record's position */
            const int have = gemma4_n_past(st);
            if (have > x->pos) {
                gemma4_reset(st);
                CHECKF(!gemma4_eval(st, prompt, x->pos, NULL, 0, &err), "%s", err.msg);
            } else if (have < x->pos) {
                CHECKF(!gemma4_eval(st, prompt + have, x->pos - have, NULL, 0, &err), "%s", err.msg);
            }
            /* step 2 follows its own step 1 (the record before it): it takes
             * that step's h_next, and the oracle's draft token */
            if (x->step == 2)
                CHECKF(i > 0 && r[i - 1].step == 1 && r[i - 1].pos == x->pos && r[i - 1].variant == x->variant,
                       "%s: record %u: step 2 without its step 1", path, i);
            int32_t next;
            CHECKF(!gemma4_draft_step(d, x->token, x->step == 1, &next, NULL, l, &err), "%s", err.msg);
            const double dd = diff_of(l, x, sub, n_sub, n_top);
            const int same_input = x->variant == 1 || (uint32_t)x->pos < window;
            if (!same_input) {
                worst_v0_past = fmax(worst_v0_past, dd);
                continue;
            }
            checked++;
            worst = fmax(worst, dd);
            if (best_of(l) != x->argmax) {
                if (x->margin > TOL) argmax_bad++;
                else close_calls++;
            }
            if (dd > TOL)
                printf("  %s: variant %d p=%d step %d: max |diff| %.3g\n", name, x->variant, x->pos,
                       x->step, dd);
        }
        CHECKF(checked > 0 && worst <= TOL, "%s (%s): max |logit - transformers| = %g over %d records", path,
               name, worst, checked);
        CHECKF(argmax_bad == 0, "%s (%s): argmax differs in %d records", path, name, argmax_bad);
        printf("%s (%s): %d records, max |diff| %.3g, argmax identical except %d close calls; past the window "
               "of %u, transformers' own sliding mask (keys [p-W-1, p)) differs by up to %.3g\n",
               path, name, checked, worst, close_calls, window, worst_v0_past);
        gemma4_drafter_free(d);
        gemma4_state_free(st);
        if (b) b->destroy(b);
    }
    free(l);
    gemma4_free(am);
    gemma4_free(tm);
    gguf_close(af);
    gguf_close(tf);
    remove(tpath);
    remove(apath);
    free(r);
    free(raw);
}

int main(void) {
    DIR *dir = opendir("tests/data/hf");
    CHECK(dir != NULL);
    int count = 0;
    struct dirent *e;
    while (dir && (e = readdir(dir))) {
        unsigned st, sa;
        if (sscanf(e->d_name, "gemma4-tiny-mtp-f32-seed%u-%u.bin", &st, &sa) != 2) continue;
        char path[512];
        snprintf(path, sizeof path, "tests/data/hf/%s", e->d_name);
        check_golden(path, st, sa);
        count++;
    }
    if (dir) closedir(dir);
    CHECKF(count >= 1, "no transformers MTP goldens found");
    return test_report("test_hf_mtp");
}
