/* The trained demo drafter's proposals against the reference's on the same
 * pair (data/models/default.gguf and mtp-default.gguf, the files the
 * reference ran). tests/data/demo/mtp-ref-proposals.json
 * (bench/mtp_proposals.py: llama-server --spec-type draft-mtp, its CPU
 * build, greedy, k = 3) holds for each held-out prompt the tokens (the
 * prompt, then the reference's greedy answer) and every round of the
 * reference: the root's position P, the root, and at each draft step the
 * reference drafter's three best ids with their probabilities (softmax
 * over its ten best logits: the reference's draft sampler is top-k 10).
 *
 * Here gem's target evaluates the same tokens [0, P) and gem's drafter
 * steps from the root, each step fed the reference's proposal of the step
 * before, so both drafters see the same inputs at every step. The two
 * targets' hidden states differ a little (another summation order, and
 * the reference's states come from batched verification rows), so gem's
 * proposal must equal the reference's wherever the reference's top-2
 * margin is at least MARGIN: a margin of that size is far beyond what such
 * differences move (the largest gap between the two drafters' probability
 * of the reference's proposal is printed, and bounded by PTOL). A wrong
 * input pairing, position, window or cache layer changes proposals
 * wholesale. GEM_TEST_BACKEND selects the backend (the CPU's fast path by
 * default). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "model/gemma4.h"
#include "model/gemma4_draft.h"
#include "model/gemma4_run.h"
#include "test.h"
#include "util/json.h"

#define V GEMMA4_N_VOCAB
#define MARGIN 0.1 /* the reference's p(top 1) - p(top 2) that counts as clear */
#define PTOL 0.05  /* |p_gem - p_ref| of the reference's proposal (both over the top 10), where it is clear */
#if defined(GEM_TEST_ASAN)
#define PROMPTS 3 /* the sanitizers' pass checks memory safety, on a few prompts */
#else
#define PROMPTS 1000
#endif

static int num(const json *v, double *out) {
    if (!v || v->type != JSON_NUMBER) return -1;
    *out = v->num;
    return 0;
}

/* The probability of id as the reference reports a candidate's: softmax
 * over the TOPK largest logits (its draft sampler is top-k 10), 0 for an
 * id outside them. */
#define TOPK 10
static double prob_of(const float *l, int id) {
    int top[TOPK];
    for (int t = 0; t < TOPK; t++) top[t] = -1;
    for (int k = 0; k < (int)V; k++) {
        int t = TOPK;
        while (t > 0 && (top[t - 1] < 0 || l[k] > l[top[t - 1]])) t--;
        if (t == TOPK) continue;
        memmove(top + t + 1, top + t, sizeof(int) * (size_t)(TOPK - 1 - t));
        top[t] = k;
    }
    double s = 0, pid = 0;
    for (int t = 0; t < TOPK; t++) {
        const double e = exp((double)l[top[t]] - l[top[0]]);
        s += e;
        if (top[t] == id) pid = e;
    }
    return pid / s;
}

int main(void) {
    size_t n;
    char *raw = test_slurp("tests/data/demo/mtp-ref-proposals.json", &n);
    CHECK(raw != NULL);
    gem_err err = {{0}};
    json *doc = raw ? json_parse(raw, n, &err) : NULL;
    CHECKF(doc != NULL, "mtp-ref-proposals.json: %s", err.msg);
    const json *prompts = doc ? json_get(doc, "prompts") : NULL;
    CHECK(prompts && prompts->type == JSON_ARRAY && prompts->len > 0);
    gguf_file *tf = gguf_open("data/models/default.gguf", &err),
              *af = tf ? gguf_open("data/models/mtp-default.gguf", &err) : NULL;
    gemma4_model *tm = af ? gemma4_bind(tf, &err) : NULL, *am = tm ? gemma4_bind(af, &err) : NULL;
    CHECKF(am != NULL, "the demo pair (make data/models/default.gguf data/models/mtp-default.gguf): %s", err.msg);
    const char *bname = getenv("GEM_TEST_BACKEND");
    backend_opts bo = {0};
    backend *b = am ? backend_create(bname && *bname ? bname : "cpu", &bo, &err) : NULL;
    gemma4_kv_plan plan;
    gemma4_state *st = b && !gemma4_kv_plan_make(tm->profile, 1024, GEMMA4_KV_F32, gemma4_ring_slack(b), 64, &plan, &err)
                           ? gemma4_state_new(tm, b, &plan, 0, &err)
                           : NULL;
    gemma4_drafter *d = st ? gemma4_drafter_new(am, st, &err) : NULL;
    CHECKF(d != NULL, "%s", err.msg);
    float *l = malloc(V * sizeof *l);
    int32_t *ids = malloc(1024 * sizeof *ids);
    long rounds = 0, steps = 0, clear = 0, same = 0, same_all = 0, bad_data = 0;
    double worst_p = 0;
    for (size_t pi = 0; d && l && ids && prompts && pi < prompts->len && pi < PROMPTS; pi++) {
        const json *pr = json_at(prompts, pi), *jids = json_get(pr, "ids"), *jr = json_get(pr, "rounds");
        if (!jids || jids->type != JSON_ARRAY || jids->len > 1024 || !jr || jr->type != JSON_ARRAY) {
            bad_data++;
            continue;
        }
        const int n_ids = (int)jids->len;
        for (int i = 0; i < n_ids; i++) {
            double x;
            ids[i] = num(json_at(jids, (size_t)i), &x) || x < 0 || x >= V ? -1 : (int32_t)x;
            bad_data += ids[i] < 0;
        }
        gemma4_reset(st);
        for (size_t ri = 0; ri < jr->len; ri++) {
            const json *r = json_at(jr, ri), *js = json_get(r, "steps");
            double pos_d, root_d;
            if (num(json_get(r, "pos"), &pos_d) || num(json_get(r, "root"), &root_d) || !js || js->type != JSON_ARRAY) {
                bad_data++;
                continue;
            }
            const int pos = (int)pos_d;
            /* the root is the answer's token at its position; the target has
             * evaluated the positions before it */
            if (pos < 1 || pos >= n_ids || ids[pos] != (int32_t)root_d || pos < gemma4_n_past(st)) {
                bad_data++;
                continue;
            }
            const int have = gemma4_n_past(st);
            if (pos > have && gemma4_eval(st, ids + have, pos - have, NULL, 0, &err)) {
                CHECKF(0, "target eval: %s", err.msg);
                break;
            }
            rounds++;
            int32_t prev = (int32_t)root_d;
            for (size_t si = 0; si < js->len; si++) {
                const json *s = json_at(js, si);
                double id0, p0, p1;
                if (!s || s->type != JSON_ARRAY || s->len != 6 || num(json_at(s, 0), &id0) || num(json_at(s, 1), &p0) ||
                    num(json_at(s, 3), &p1) || id0 < 0 || id0 >= V) {
                    bad_data++;
                    break;
                }
                int32_t next;
                if (gemma4_draft_step(d, prev, si == 0, &next, NULL, l, &err)) {
                    CHECKF(0, "draft step: %s", err.msg);
                    break;
                }
                steps++;
                same_all += next == (int32_t)id0;
                const double pg = prob_of(l, (int)id0);
                if (p0 - p1 >= MARGIN) {
                    clear++;
                    same += next == (int32_t)id0;
                    if (fabs(pg - p0) > worst_p) worst_p = fabs(pg - p0);
                    if (next != (int32_t)id0)
                        fprintf(stderr,
                                "test_mtp_ref: prompt %zu round at %d step %zu: gem proposes %d, the reference %d "
                                "(p %.3f, margin %.3f; gem's p of it %.3f)\n",
                                pi, pos, si, next, (int)id0, p0, p0 - p1, pg);
                }
                prev = (int32_t)id0; /* the reference's proposal feeds both drafters' next step */
            }
        }
    }
    printf("test_mtp_ref: %ld rounds, %ld draft steps (%ld proposals equal), %ld with the reference's margin >= "
           "%.2f: %ld equal; largest |p_gem - p_ref| there %.4f\n",
           rounds, steps, same_all, clear, MARGIN, same, worst_p);
    CHECKF(bad_data == 0, "%ld malformed or misaligned records in mtp-ref-proposals.json", bad_data);
    CHECKF(clear >= (PROMPTS < 1000 ? 10 : 200), "only %ld clear draft steps compared", clear);
    CHECKF(same == clear, "%ld of %ld clear proposals differ from the reference's", clear - same, clear);
    CHECKF(worst_p <= PTOL, "gem's probability of a clear proposal is %.4f from the reference's", worst_p);
    free(l);
    free(ids);
    gemma4_drafter_free(d);
    gemma4_state_free(st);
    if (b) b->destroy(b);
    gemma4_free(am);
    gemma4_free(tm);
    gguf_close(af);
    gguf_close(tf);
    json_free(doc);
    free(raw);
    return test_report("test_mtp_ref");
}
