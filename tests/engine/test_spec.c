/* Speculative decoding in the engine's generation loop (generate.c, spec.c)
 * on the tiny profile (window 32) with prompts longer than the window, so
 * verification tiles wrap the sliding rings and rejected rows must not
 * cost a key a later query reads:
 *  - greedy ids identical to plain decoding for draft_max 1..8 with the
 *    replay drafter right always (every draft accepted), never (none), and
 *    60% of the time, and with a random MTP drafter (gemma4-tiny-assistant);
 *  - sampled ids identical to plain sampling with the same seed (each
 *    verified row draws its token as plain decoding would);
 *  - the state afterwards is plain decoding's bit for bit (the last
 *    logits, and a continued prompt's logits);
 *  - max_tokens, stop strings and the context's end falling inside a
 *    round end the answer where plain decoding ends it, with the same
 *    session length;
 *  - a drafter that does not fit, or a drafter given as the model, is
 *    refused with a message naming the field or the file.
 * GEM_TEST_BACKEND selects the backend (the CPU by default), GEM_TEST_KV_TYPE
 * the KV type (f32 by default; tests/cuda/run.sh runs f16-full on the GPU:
 * the verification tiles and checkpoints over f32 rings beside f16 full
 * caches must still reproduce plain decoding bit for bit). */
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
#include "util/strbuf.h"

#define V GEMMA4_N_VOCAB
#define NP 70   /* prompt tokens: over two sliding windows */
#define NG 48   /* generated tokens */

static const char *backend_name(void) {
    const char *b = getenv("GEM_TEST_BACKEND");
    return b && *b ? b : "cpu";
}

/* GEM_TEST_KV_TYPE, f32 when unset; -1 for a value that is no KV type. */
static int kv_type_env(void) {
    const char *t = getenv("GEM_TEST_KV_TYPE");
    return gemma4_kv_type_parse(t && *t ? t : "f32");
}

typedef struct {
    int32_t ids[256];
    int n;
    strbuf text;
} seen;

static void on_token(void *ctx, const gem_gen_token *t) {
    seen *w = ctx;
    if (!t->end && w->n < 256) w->ids[w->n++] = t->id;
}

static int on_text(void *ctx, const char *p, size_t n) {
    sb_put(&((seen *)ctx)->text, p, n);
    return 0;
}

/* a generation cancelled by poll on its cancel_at-th call */
typedef struct {
    seen w;
    int polls, cancel_at;
} poll_ctx;

static void on_token_p(void *ctx, const gem_gen_token *t) { on_token(&((poll_ctx *)ctx)->w, t); }

static int on_poll_p(void *ctx) {
    poll_ctx *p = ctx;
    return ++p->polls == p->cancel_at;
}

static gem_engine *open_engine(const char *model, const char *mtp, int n_ctx, gem_err *err) {
    gem_engine_opts eo = {0};
    eo.backend = backend_name();
    eo.kv_type = (gemma4_kv_type)kv_type_env();
    eo.model_path = model;
    eo.mtp_path = mtp;
    eo.n_ctx = n_ctx;
    return gem_engine_open(&eo, err);
}

/* One generation from a fresh sync of prompt[0..n): ids and text into w,
 * the result into r. */
static int run(gem_session *s, const int32_t *prompt, int n, const gem_gen_params *gp, seen *w, gem_gen_result *r) {
    gem_err err = {{0}};
    w->n = 0;
    w->text.len = 0;
    gem_gen_callbacks cb = {w, on_token, on_text, NULL, NULL};
    CHECKF(gem_session_sync(s, prompt, (size_t)n, &err) >= 0, "%s", err.msg);
    int rc = gem_session_generate(s, gp, &cb, r, &err);
    CHECKF(rc == 0, "%s", err.msg);
    return rc;
}

static int synth(const char *profile, uint64_t seed, const char *path) {
    gem_err err = {{0}};
    int rc = test_synth_f32(profile, path, seed, 0, &err);
    CHECKF(rc == 0, "%s: %s", profile, err.msg);
    return rc;
}

int main(void) {
    if (kv_type_env() < 0) {
        fprintf(stderr, "test_spec: GEM_TEST_KV_TYPE wants " GEMMA4_KV_TYPE_CHOICES "\n");
        return 2;
    }
    char model[] = "/tmp/gem-spec-XXXXXX", asst[] = "/tmp/gem-spec-a-XXXXXX", other[] = "/tmp/gem-spec-d-XXXXXX";
    if (test_tmp_file(model) || test_tmp_file(asst) || test_tmp_file(other)) return 1;
    if (synth("gemma4-tiny", 42, model) || synth("gemma4-tiny-assistant", 43, asst) ||
        synth("gemma4-demo-assistant", 44, other))
        return test_report("test_spec");
    gem_err err = {{0}};
    gem_engine *e = open_engine(model, NULL, 512, &err);
    CHECKF(e != NULL, "%s", err.msg);
    gem_engine *em = open_engine(model, asst, 512, &err);
    CHECKF(em != NULL, "%s", err.msg);
    if (!e || !em) return test_report("test_spec");
    CHECK(gem_engine_mtp(e) == NULL && !strcmp(gem_engine_mtp(em), "gemma4-tiny-assistant"));

    int32_t prompt[NP + NG];
    for (int i = 0; i < NP; i++) prompt[i] = (int32_t)((i * 7919 + 13) % 200000) + 1000;
    prompt[0] = tok_bos(gem_engine_tok(e));
    gem_gen_params gp = gem_gen_params_default();
    gp.max_tokens = NG;
    gp.ignore_eos = 1;

    /* plain greedy: the reference ids, text and final logits */
    gem_session *s = gem_session_new(e, &err);
    seen ref = {{0}, 0, {0}}, w = {{0}, 0, {0}};
    gem_gen_result r;
    run(s, prompt, NP, &gp, &ref, &r);
    CHECK(ref.n == NG && r.n_rounds == 0);
    float *ref_logits = malloc(V * sizeof(float)), *ref_cont = malloc(V * sizeof(float));
    memcpy(ref_logits, gem_session_logits(s), V * sizeof(float));
    size_t ref_len;
    gem_session_tokens(s, &ref_len);
    CHECK(ref_len == NP + NG - 1); /* the last token is never evaluated */
    int distinct = 0;
    for (int i = 0; i < ref.n; i++) {
        int seen_before = 0;
        for (int j = 0; j < i; j++) seen_before |= ref.ids[j] == ref.ids[i];
        distinct += !seen_before;
    }
    /* random tiny models settle into loops; the answer still varies */
    CHECKF(distinct >= 5, "the tiny model's greedy answer has only %d distinct tokens", distinct);
    /* the continued prompt (prompt + answer) through the live state */
    int32_t full[NP + NG];
    memcpy(full, prompt, NP * sizeof *prompt);
    memcpy(full + NP, ref.ids, NG * sizeof *prompt);
    gem_gen_params one = gp;
    one.max_tokens = 1;
    run(s, full, NP + NG, &one, &w, &r);
    CHECK(r.n_cached == NP + NG - 1);
    memcpy(ref_cont, gem_session_logits(s), V * sizeof(float));
    gem_session_free(s);

    /* the replay drafter: always right, never, and 60% of the time */
    const double probs[] = {1.0, 0.0, 0.6};
    for (int pi = 0; pi < 3; pi++) {
        static const int ks[] = {1, 2, 3, 5, 8};
        for (int ki = 0; ki < 5; ki++) {
            const int k = ks[ki];
            s = gem_session_new(e, &err);
            CHECKF(s && !gem_session_set_replay(s, full, NP + NG, probs[pi], (uint64_t)k, &err), "%s", err.msg);
            gem_gen_params g = gp;
            g.draft_max = k;
            g.draft_fixed = ki % 2; /* both schedules */
            run(s, prompt, NP, &g, &w, &r);
            CHECKF(w.n == NG && !memcmp(w.ids, ref.ids, sizeof(int32_t) * NG),
                   "replay p=%.1f k=%d: ids differ from plain decoding", probs[pi], k);
            CHECKF(r.n_rounds > 0 && r.n_drafted >= r.n_rounds, "p=%.1f k=%d: %ld rounds, %ld drafted", probs[pi], k,
                   r.n_rounds, r.n_drafted);
            if (pi == 0) CHECKF(r.n_accepted == r.n_drafted, "k=%d: %ld of %ld accepted", k, r.n_accepted, r.n_drafted);
            if (pi == 1) CHECK(r.n_accepted == 0);
            if (pi == 2) CHECK(r.n_accepted > 0 && r.n_accepted < r.n_drafted);
            /* all accepted, k fixed: a round emits k drafts and the target's
             * token (the cost policy's counts follow timings) */
            if (pi == 0 && g.draft_fixed)
                CHECKF(r.n_rounds <= (NG + k) / (k + 1) + 1, "k=%d: %ld rounds", k, r.n_rounds);
            size_t len;
            gem_session_tokens(s, &len);
            CHECK(len == ref_len);
            CHECKF(!memcmp(gem_session_logits(s), ref_logits, V * sizeof(float)),
                   "replay p=%.1f k=%d: the last logits differ from plain decoding's", probs[pi], k);
            if (k == 8) { /* the rolled-back state continues exactly */
                run(s, full, NP + NG, &one, &w, &r);
                CHECK(r.n_cached == NP + NG - 1);
                CHECKF(!memcmp(gem_session_logits(s), ref_cont, V * sizeof(float)),
                       "replay p=%.1f: the continued prompt's logits differ", probs[pi]);
            }
            gem_session_free(s);
        }
    }

    /* a rewind after rounds whose rejected rows wrote into the rings (the
     * next prompt leaves the held tokens d before their end): whatever the
     * sync keeps (a rewound live state where the rings still hold the
     * point, else nothing), the next logits are a fresh session's. The
     * fresh run prefills in other tiles: bit for bit on the CPU only. */
    {
        const int exact = !strcmp(backend_name(), "cpu");
        static const int ds[] = {2, 6, 12, 17};
        float *fresh = malloc(V * sizeof(float));
        int rewound = 0;
        for (int pi = 1; pi < 3; pi++)
            for (int di = 0; di < 4; di++) {
                s = gem_session_new(e, &err);
                CHECK(s && !gem_session_set_replay(s, full, NP + NG, probs[pi], 11, &err));
                gem_gen_params g = gp;
                g.draft_max = 8;
                g.draft_fixed = 1;
                run(s, prompt, NP, &g, &w, &r);
                const int keep = NP + NG - 1 - ds[di];
                int32_t q[NP + NG + 8];
                memcpy(q, full, (size_t)keep * sizeof *q);
                for (int i = 0; i < 8; i++) q[keep + i] = prompt[i + 1] + 5;
                run(s, q, keep + 8, &one, &w, &r);
                rewound += r.n_cached == keep;
                CHECKF(r.n_cached == keep || r.n_cached == 0, "d=%d: %ld kept", ds[di], r.n_cached);
                memcpy(fresh, gem_session_logits(s), V * sizeof(float));
                gem_session *f = gem_session_new(e, &err);
                run(f, q, keep + 8, &one, &w, &r);
                const float *lf = gem_session_logits(f);
                double d = 0;
                for (size_t i = 0; i < V; i++) d = fmax(d, fabs((double)fresh[i] - lf[i]));
                CHECKF(exact ? d == 0 : d < 4e-3, "p=%.1f d=%d: logits after the rewind differ by %g", probs[pi],
                       ds[di], d);
                gem_session_free(f);
                gem_session_free(s);
            }
        CHECKF(rewound >= 2, "only %d of 8 syncs rewound", rewound);
        free(fresh);
    }

    /* limits inside a round: max_tokens and a stop string end the answer
     * where plain decoding does, the session as long as plain decoding's */
    s = gem_session_new(e, &err);
    gem_session *sp = NULL;
    CHECK(!gem_session_set_replay(s, full, NP + NG, 1.0, 7, &err));
    for (int max = 1; max <= 12; max++) {
        gem_gen_params g = gp;
        g.max_tokens = max;
        g.no_checkpoint = 1;
        gem_session_reset(s);
        run(s, prompt, NP, &g, &w, &r);
        size_t len;
        gem_session_tokens(s, &len);
        CHECKF(w.n == max && !memcmp(w.ids, ref.ids, sizeof(int32_t) * (size_t)max) && len == NP + (size_t)max - 1,
               "max_tokens %d: %d tokens, session %zu", max, w.n, len);
    }
    /* a stop string taken from the answer's text, at several places */
    gem_session_free(s);
    sp = gem_session_new(e, &err);
    seen plain = {{0}, 0, {0}};
    for (int cut = 3; cut < 40; cut += 7) {
        if (ref.text.len == 0) break;
        const size_t at = (size_t)cut * ref.text.len / NG;
        if (at + 2 > ref.text.len) break;
        char stop[3] = {ref.text.p[at], ref.text.p[at + 1], 0};
        const char *stops[] = {stop};
        size_t lens[] = {2};
        gem_gen_params g = gp;
        g.stop = stops;
        g.stop_len = lens;
        g.n_stop = 1;
        gem_session_reset(sp);
        gem_gen_result rp;
        run(sp, prompt, NP, &g, &plain, &rp);
        size_t lp;
        gem_session_tokens(sp, &lp);
        gem_session_free(sp);
        s = gem_session_new(e, &err);
        CHECK(!gem_session_set_replay(s, full, NP + NG, 1.0, 9, &err));
        run(s, prompt, NP, &g, &w, &r);
        size_t ls;
        gem_session_tokens(s, &ls);
        CHECKF(w.n == plain.n && !memcmp(w.ids, plain.ids, sizeof(int32_t) * (size_t)w.n) && r.finish == rp.finish &&
                   ls == lp && w.text.len == plain.text.len && !memcmp(w.text.p, plain.text.p, w.text.len),
               "stop '%s': %d tokens against %d, session %zu against %zu", stop, w.n, plain.n, ls, lp);
        gem_session_free(s);
        sp = gem_session_new(e, &err);
    }
    gem_session_free(sp);

    /* the context's end inside a round */
    gem_engine *ec = open_engine(model, NULL, NP + 21, &err); /* 21 < NG */
    CHECKF(ec != NULL, "%s", err.msg);
    if (ec) {
        gem_gen_params g = gp;
        g.max_tokens = -1;
        s = gem_session_new(ec, &err);
        run(s, prompt, NP, &g, &w, &r);
        CHECK(w.n == 21 && !memcmp(w.ids, ref.ids, 21 * sizeof(int32_t)) && r.finish == GEM_FINISH_LENGTH);
        gem_session_free(s);
        s = gem_session_new(ec, &err);
        CHECK(!gem_session_set_replay(s, full, NP + NG, 1.0, 3, &err));
        run(s, prompt, NP, &g, &w, &r);
        CHECKF(w.n == 21 && !memcmp(w.ids, ref.ids, 21 * sizeof(int32_t)) && r.finish == GEM_FINISH_LENGTH &&
                   r.n_rounds > 0,
               "context end: %d tokens, %ld rounds", w.n, r.n_rounds);
        gem_session_free(s);
        gem_engine_close(ec);
    }

    /* a random MTP drafter: the answer is still plain decoding's */
    for (int k = 1; k <= 8; k += 3) {
        s = gem_session_new(em, &err);
        CHECKF(s != NULL, "%s", err.msg);
        if (!s) break;
        gem_gen_params g = gp;
        g.draft_max = k;
        run(s, prompt, NP, &g, &w, &r);
        CHECKF(w.n == NG && !memcmp(w.ids, ref.ids, sizeof(int32_t) * NG), "mtp k=%d: ids differ from plain decoding",
               k);
        CHECK(r.n_rounds > 0 && r.n_drafted > 0);
        CHECKF(!memcmp(gem_session_logits(s), ref_logits, V * sizeof(float)), "mtp k=%d: last logits differ", k);
        printf("test_spec: random drafter k=%d: %ld rounds, %ld drafted, %ld accepted\n", k, r.n_rounds, r.n_drafted,
               r.n_accepted);
        gem_session_free(s);
    }
    /* the stop rules, k = 8 fixed: off, every round drafts 8 (up to the
     * answer's end); a bound of 1 on the running product (the random
     * drafter is never certain) or on each proposal's probability stops
     * every round after its first proposal, which is still verified; the
     * answer is plain decoding's in each case */
    for (int rule = 0; rule < 3; rule++) {
        s = gem_session_new(em, &err);
        CHECKF(s != NULL, "%s", err.msg);
        if (!s) break;
        gem_gen_params g = gp;
        g.draft_max = 8;
        g.draft_fixed = 1;
        g.draft_p_prod = rule == 1 ? 1.0f : 0.0f;
        g.draft_p_min = rule == 2 ? 1.0f : 0.0f;
        run(s, prompt, NP, &g, &w, &r);
        CHECKF(w.n == NG && !memcmp(w.ids, ref.ids, sizeof(int32_t) * NG), "stop rule %d: ids differ from plain", rule);
        if (rule == 0)
            CHECKF(r.n_drafted > 6 * r.n_rounds, "no stop rule: %ld drafted in %ld rounds", r.n_drafted, r.n_rounds);
        else
            CHECKF(r.n_rounds > 0 && r.n_drafted == r.n_rounds, "stop rule %d: %ld drafted in %ld rounds", rule,
                   r.n_drafted, r.n_rounds);
        gem_session_free(s);
    }
    CHECK(gem_gen_params_default().draft_p_prod == GEM_DRAFT_P_PROD_DEFAULT && GEM_DRAFT_P_PROD_DEFAULT > 0);
    /* sampling: each verified row's token is drawn as plain decoding draws
     * it, so one seed gives one answer with drafts right always, sometimes
     * (replay) or almost never (the random MTP drafter); with a repeat
     * penalty (the whole vocabulary on the host) and without (plain decoding
     * then takes the top-k shortcut on the backend) */
    for (int cfg = 0; cfg < 2; cfg++) {
        gem_gen_params gs = gp;
        gs.sampling.temp = 0.9f;
        gs.sampling.top_k = 40;
        gs.sampling.top_p = 0.95f;
        gs.sampling.repeat_penalty = cfg ? 1.0f : 1.1f;
        gs.sampling.seed = 1234 + (uint64_t)cfg;
        seen sref = {{0}, 0, {0}};
        s = gem_session_new(e, &err);
        run(s, prompt, NP, &gs, &sref, &r);
        size_t slen;
        gem_session_tokens(s, &slen);
        gem_session_free(s);
        int32_t sfull[NP + NG];
        memcpy(sfull, prompt, NP * sizeof *prompt);
        memcpy(sfull + NP, sref.ids, NG * sizeof *prompt);
        for (int v = 0; v < 3; v++) {
            s = gem_session_new(v == 2 ? em : e, &err);
            if (v < 2) CHECK(!gem_session_set_replay(s, sfull, NP + NG, v == 0 ? 1.0 : 0.5, 5, &err));
            run(s, prompt, NP, &gs, &w, &r);
            size_t len;
            gem_session_tokens(s, &len);
            CHECKF(w.n == NG && !memcmp(w.ids, sref.ids, sizeof(int32_t) * NG) && len == slen && r.n_rounds > 0,
                   "sampled, drafter %d: ids differ from plain sampling (%ld rounds)", v, r.n_rounds);
            if (v == 0) CHECK(r.n_accepted == r.n_drafted);
            gem_session_free(s);
        }
        sb_free(&sref.text);
    }

    /* forced tokens, then rounds; draft_min; a cancel inside a round */
    {
        gem_gen_params g = gp;
        g.force = ref.ids;
        g.n_force = 5;
        g.draft_min = 3;
        s = gem_session_new(e, &err);
        CHECK(!gem_session_set_replay(s, full, NP + NG, 0.7, 21, &err));
        run(s, prompt, NP, &g, &w, &r);
        CHECKF(w.n == NG && !memcmp(w.ids, ref.ids, sizeof(int32_t) * NG) && r.n_rounds > 0,
               "forced tokens then rounds: ids differ (%ld rounds)", r.n_rounds);
        gem_session_free(s);
        for (int cancel_at = 3; cancel_at <= 20; cancel_at += 7) {
            size_t lens[2];
            int ns[2];
            int32_t got[2][NG];
            for (int v = 0; v < 2; v++) {
                s = gem_session_new(e, &err);
                if (v) CHECK(!gem_session_set_replay(s, full, NP + NG, 1.0, 22, &err));
                poll_ctx pc = {{{0}, 0, {0}}, 0, cancel_at};
                gem_gen_callbacks cb = {&pc, on_token_p, NULL, on_poll_p, NULL};
                CHECK(gem_session_sync(s, prompt, NP, &err) >= 0 && !gem_session_generate(s, &gp, &cb, &r, &err));
                CHECK(r.finish == GEM_FINISH_CANCELLED);
                gem_session_tokens(s, &lens[v]);
                ns[v] = pc.w.n;
                memcpy(got[v], pc.w.ids, sizeof got[v]);
                gem_session_free(s);
            }
            CHECKF(ns[0] == ns[1] && lens[0] == lens[1] && !memcmp(got[0], got[1], sizeof(int32_t) * (size_t)ns[0]),
                   "cancel at poll %d: %d tokens, session %zu plain; %d, %zu speculative", cancel_at, ns[0], lens[0],
                   ns[1], lens[1]);
        }
    }

    /* draft_max 0: no rounds even with a drafter */
    s = gem_session_new(em, &err);
    gem_gen_params g0 = gp;
    g0.draft_max = 0;
    run(s, prompt, NP, &g0, &w, &r);
    CHECK(r.n_rounds == 0 && w.n == NG && !memcmp(w.ids, ref.ids, sizeof(int32_t) * NG));
    gem_session_free(s);

    /* quantized weights: the multi-row integer kernels (the CPU's
     * AVX512-VNNI eight-row blocks, the GPU's multi-token products) must
     * give each verified row the one-token step's logits bit for bit */
    static const char *const qtypes[] = {"q8_0", "q4_0"};
    for (int qi = 0; qi < 2; qi++) {
        char qpath[] = "/tmp/gem-spec-q-XXXXXX";
        if (test_tmp_file(qpath)) break;
        gemma4_synth_opts so = {0};
        so.profile = gemma4_profile_find("gemma4-tiny");
        so.type = (uint32_t)quant_type_from_name(qtypes[qi]);
        so.embd_type = QT_Q8_0;
        so.seed = 77;
        so.vocab_path = "data/vocab/gemma-4.gguf";
        so.out_path = qpath;
        CHECKF(!gemma4_synth(&so, &err), "%s", err.msg);
        gem_engine *eq = open_engine(qpath, NULL, 512, &err);
        CHECKF(eq != NULL, "%s", err.msg);
        if (!eq) break;
        seen qref = {{0}, 0, {0}};
        s = gem_session_new(eq, &err);
        run(s, prompt, NP, &gp, &qref, &r);
        float *ql = malloc(V * sizeof(float));
        memcpy(ql, gem_session_logits(s), V * sizeof(float));
        gem_session_free(s);
        int32_t qfull[NP + NG];
        memcpy(qfull, prompt, NP * sizeof *prompt);
        memcpy(qfull + NP, qref.ids, NG * sizeof *prompt);
        for (int pi = 0; pi < 2; pi++) {
            s = gem_session_new(eq, &err);
            CHECK(!gem_session_set_replay(s, qfull, NP + NG, pi ? 0.6 : 1.0, 11, &err));
            gem_gen_params g = gp;
            g.draft_max = 8;
            run(s, prompt, NP, &g, &w, &r);
            CHECKF(w.n == NG && !memcmp(w.ids, qref.ids, sizeof(int32_t) * NG) &&
                       !memcmp(gem_session_logits(s), ql, V * sizeof(float)),
                   "%s, replay p=%.1f: the answer or the last logits differ from plain decoding's", qtypes[qi],
                   pi ? 0.6 : 1.0);
            gem_session_free(s);
        }
        free(ql);
        sb_free(&qref.text);
        gem_engine_close(eq);
        remove(qpath);
    }

    /* refusals */
    gem_engine *bad = open_engine(model, other, 512, &err);
    CHECK(bad == NULL);
    CHECKF(strstr(err.msg, "attention.sliding_window 256 of the drafter is not the target's 32") &&
               strstr(err.msg, other),
           "%s", err.msg);
    bad = open_engine(asst, NULL, 512, &err);
    CHECK(bad == NULL);
    CHECKF(strstr(err.msg, "is an MTP drafter (gemma4-tiny-assistant), not a model to run"), "%s", err.msg);
    bad = open_engine(model, model, 512, &err);
    CHECK(bad == NULL);
    CHECKF(strstr(err.msg, "is a target model (gemma4-tiny), not an MTP drafter"), "%s", err.msg);

    free(ref_logits);
    free(ref_cont);
    sb_free(&ref.text);
    sb_free(&w.text);
    sb_free(&plain.text);
    gem_engine_close(e);
    gem_engine_close(em);
    remove(model);
    remove(asst);
    remove(other);
    return test_report("test_spec");
}
