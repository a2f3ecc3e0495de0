/* Sampled speculative decoding draws from plain sampling's distribution:
 * on the tiny pair (gemma4-tiny, gemma4-tiny-assistant, q8_0), the first token
 * forced, the joint distribution of the next two sampled tokens (a round
 * of one draft verifies both when the draft is accepted) against the exact
 * distribution, computed from the target's logits
 * (top-k 8 at temperature 0.7: p proportional to exp(l / 0.7) over the 8
 * largest, the sampler's chain with top-p and min-p off). Two drafters:
 * the MTP drafter (random: its drafts are nearly always rejected) and a
 * replay drafter proposing the target's greedy tokens (accepted whenever
 * the draw is the most likely token, so both paths of a round are taken).
 * The replay drafter runs 20000 seeds, the MTP drafter 2000 (a seed's
 * answer is the same with either: test_spec; each run costs about three
 * 262144-row heads). Pearson's chi-squared over the 64 cells (cells expected below 5 merged)
 * must stay under its p = 1e-4 critical value: a correct engine fails
 * this once in 10000 seeds' worth of runs; drafting that biased the draw
 * (e.g. accepting a draft without drawing) fails it surely. Seeds are
 * fixed, so the outcome is reproducible. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "model/gemma4.h"
#include "model/gemma4_synth.h"
#include "quant/quant.h"
#include "synth_tiny.h"
#include "test.h"

#define V GEMMA4_N_VOCAB
#define K 8
#define TEMP 0.7
#define NP 12
#if defined(GEM_TEST_ASAN)
/* under the sanitizers (make test's second pass) the same checks on fewer
 * seeds (enough for several cells of 5 expected draws): memory safety is what that pass is for, and 22000 runs there
 * would take half an hour; the full count runs in the plain build */
#define SEEDS 500
#define SEEDS_MTP 400
#else
#define SEEDS 20000     /* the replay drafter's runs (both paths of a round) */
#define SEEDS_MTP 2000  /* the random MTP drafter's (its drafts all rejected) */
#endif

/* the top K ids of logits (descending, ties to the lower id) and their
 * sampling probabilities */
static void top_probs(const float *l, int32_t *ids, double *p) {
    for (int j = 0; j < K; j++) ids[j] = -1;
    for (int32_t i = 0; i < (int32_t)V; i++) {
        int j = K;
        while (j > 0 && (ids[j - 1] < 0 || l[i] > l[ids[j - 1]])) j--;
        if (j == K) continue;
        memmove(ids + j + 1, ids + j, sizeof *ids * (size_t)(K - 1 - j));
        ids[j] = i;
    }
    double s = 0;
    for (int j = 0; j < K; j++) s += p[j] = exp(((double)l[ids[j]] - l[ids[0]]) / TEMP);
    for (int j = 0; j < K; j++) p[j] /= s;
}

static int find(const int32_t *ids, int32_t t) {
    for (int j = 0; j < K; j++)
        if (ids[j] == t) return j;
    return -1;
}

typedef struct {
    int32_t ids[4];
    int n;
} seen;

static void on_token(void *ctx, const gem_gen_token *t) {
    seen *w = ctx;
    if (!t->end && w->n < 4) w->ids[w->n++] = t->id;
}

/* q8_0 weights: the VNNI kernel's speed makes 40000 generations affordable */
static int synth_q8(const char *profile, const char *path, uint64_t seed, gem_err *err) {
    gemma4_synth_opts so = {0};
    so.profile = gemma4_profile_find(profile);
    so.type = so.embd_type = QT_Q8_0;
    so.seed = seed;
    so.vocab_path = "data/vocab/gemma-4.gguf";
    so.out_path = path;
    return gemma4_synth(&so, err);
}

/* the logits after ids[0..n): whatever sync keeps, the rest evaluated */
static int eval_at(gem_session *s, const int32_t *ids, int n, gem_err *err) {
    const int kept = gem_session_sync(s, ids, (size_t)n, err);
    if (kept < 0) return 0;
    if (kept == n) return 0; /* (never here: nothing would be left to evaluate) */
    return !gem_session_eval(s, ids + kept, n - kept, err);
}

/* Wilson-Hilferty: the chi-squared quantile of df degrees at the normal z */
static double chi2_crit(int df, double z) {
    const double a = 2.0 / (9.0 * df);
    return df * pow(1 - a + z * sqrt(a), 3);
}

int main(void) {
    char model[] = "/tmp/gem-dist-XXXXXX", asst[] = "/tmp/gem-dist-a-XXXXXX";
    gem_err err = {{0}};
    if (test_tmp_file(model) || test_tmp_file(asst)) return 1;
    if (synth_q8("gemma4-tiny", model, 42, &err) || synth_q8("gemma4-tiny-assistant", asst, 43, &err)) {
        CHECKF(0, "synth: %s", err.msg);
        return test_report("test_spec_dist");
    }
    gem_engine_opts eo = {0};
    eo.backend = getenv("GEM_TEST_BACKEND") && *getenv("GEM_TEST_BACKEND") ? getenv("GEM_TEST_BACKEND") : "cpu";
    eo.model_path = model;
    eo.n_ctx = 64;
    gem_engine *e = gem_engine_open(&eo, &err);
    eo.mtp_path = asst;
    gem_engine *em = e ? gem_engine_open(&eo, &err) : NULL;
    CHECKF(e && em, "%s", err.msg);
    if (!e || !em) return test_report("test_spec_dist");

    int32_t seq[NP + 3];
    for (int i = 0; i < NP; i++) seq[i] = (int32_t)((i * 7919 + 13) % 200000) + 1000;
    seq[0] = 2;
    /* the exact joint: t1 forced (the greedy token), then t2 ~ p2, t3 ~ p3 | t2 */
    gem_session *s = gem_session_new(e, &err);
    CHECK(eval_at(s, seq, NP, &err));
    const float *l = gem_session_logits(s);
    int32_t id1[K], id2[K], id3[K][K];
    double p1[K], p2[K], p3[K][K];
    top_probs(l, id1, p1);
    seq[NP] = id1[0];
    CHECK(eval_at(s, seq, NP + 1, &err));
    top_probs(gem_session_logits(s), id2, p2);
    for (int a = 0; a < K; a++) {
        seq[NP + 1] = id2[a];
        CHECK(eval_at(s, seq, NP + 2, &err));
        top_probs(gem_session_logits(s), id3[a], p3[a]);
    }
    gem_session_free(s);
    printf("test_spec_dist: p(t2) top %.3f, cells %d\n", p2[0], K * K);

    int32_t greedy[NP + 3];
    memcpy(greedy, seq, sizeof(int32_t) * (NP + 1));
    greedy[NP + 1] = id2[0];
    greedy[NP + 2] = id3[0][0];
    for (int v = 0; v < 2; v++) {
        s = gem_session_new(v == 0 ? em : e, &err);
        if (!s) break;
        if (v == 1) CHECK(!gem_session_set_replay(s, greedy, NP + 3, 1.0, 7, &err));
        static long count[K][K];
        memset(count, 0, sizeof count);
        long outside = 0, rounds = 0, accepted = 0;
        const int seeds = v == 0 ? SEEDS_MTP : SEEDS;
        for (int seed = 0; seed < seeds; seed++) {
            gem_gen_params g = gem_gen_params_default();
            g.sampling.temp = (float)TEMP;
            g.sampling.top_k = K;
            g.sampling.top_p = 1.0f;
            g.sampling.min_p = 0.0f;
            g.sampling.repeat_penalty = 1.0f;
            g.sampling.seed = 1000 + (uint64_t)seed;
            g.max_tokens = 3;
            g.ignore_eos = 1;
            g.force = seq + NP;
            g.n_force = 1;
            g.draft_max = 1;
            g.draft_fixed = 1;
            g.no_checkpoint = 0;
            seen w = {{0}, 0};
            gem_gen_callbacks cb = {&w, on_token, NULL, NULL, NULL};
            gem_gen_result r;
            if (gem_session_sync(s, seq, NP, &err) < 0 || gem_session_generate(s, &g, &cb, &r, &err) || w.n != 3) {
                CHECKF(0, "drafter %d seed %d: %s (%d tokens)", v, seed, err.msg, w.n);
                break;
            }
            rounds += r.n_rounds;
            accepted += r.n_accepted;
            const int a = find(id2, w.ids[1]);
            const int b = a < 0 ? -1 : find(id3[a], w.ids[2]);
            if (w.ids[0] != seq[NP] || a < 0 || b < 0) outside++;
            else count[a][b]++;
        }
        CHECKF(outside == 0, "drafter %d: %ld draws outside the top %d", v, outside, K);
        /* Pearson over cells expected >= 5, the rest pooled */
        double chi2 = 0, pool_e = 0, pool_o = 0;
        int cells = 0;
        for (int a = 0; a < K; a++)
            for (int b = 0; b < K; b++) {
                const double ex = seeds * p2[a] * p3[a][b];
                if (ex < 5) {
                    pool_e += ex, pool_o += (double)count[a][b];
                    continue;
                }
                chi2 += (count[a][b] - ex) * (count[a][b] - ex) / ex;
                cells++;
            }
        if (pool_e > 0) chi2 += (pool_o - pool_e) * (pool_o - pool_e) / pool_e, cells++;
        CHECKF(cells >= 4, "drafter %d: only %d cells expect 5 draws or more (too few seeds)", v, cells);
        const double c = chi2_crit(cells > 1 ? cells - 1 : 1, 3.719);
        printf("test_spec_dist: drafter %s: chi2 %.1f over %d cells (p=1e-4 bound %.1f), %ld rounds, %ld accepted\n",
               v == 0 ? "mtp (random)" : "replay (greedy)", chi2, cells, c, rounds, accepted);
        CHECKF(chi2 < c, "drafter %d: chi-squared %.1f over %d cells exceeds %.1f", v, chi2, cells, c);
        CHECK(rounds == seeds); /* one round of one draft per answer */
        if (v == 1) CHECKF(accepted > seeds / 10, "replay: %ld accepted", accepted);
        gem_session_free(s);
    }
    gem_engine_close(em);
    gem_engine_close(e);
    remove(model);
    remove(asst);
    return test_report("test_spec_dist");
}
