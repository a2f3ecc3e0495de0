/* Model-level CUDA checks (make test-cuda): the same GGUF through the engine
 * on the CPU fast path and on the GPU.
 *   cuda_model FILE PROMPT_LEN GEN strict|int8 [kv-f16|kv-f16-full] [layers=N] [tbt=TOL] [tbt-agree=PCT]
 *              [cpu-agree=PCT]
 * kv-f16: the GPU's caches hold f16 entries (--kv-type f16: k_attn_tc for
 * one-token steps), keys and values rounded to 11 bits; checked with the
 * int8 criteria, and token-by-token also against the CPU (see criterion 2's
 * check). kv-f16-full: only the full-attention layers' caches are f16
 * (--kv-type f16-full), the sliding rings f32: both kinds of one-token
 * kernel (k_attn_tc, the staged k_attn_dec) in one recorded step, under
 * the same criteria as kv-f16.
 * tbt-agree=PCT: criterion 2's agreement for int8 models instead of 98%.
 * cpu-agree=PCT: token-by-token against the CPU at PCT% of its clear
 * positions (with kv-f16 that check always runs, at 90% unless given; an
 * int8 run with f32 caches runs it when given).
 * layers=N: both backends run only the first N layers, then the head
 * (gem_engine_opts.layers): deep random quantized models amplify the
 * 8-bit codes' rounding into chaos (the synthetic 12B q4_0 at its 48
 * layers: the CPU fast path and the CPU scalar reference share none of
 * their top 3 tokens; at 12 layers they agree on 9 of 9 clear positions of
 * the 16 compared, max logit diff 0.375: bench/results/cpu-12b-q4_0-
 * collapse-2026-12-04.json), so a disagreement there points at a kernel
 * rather than at amplification.
 * tbt=TOL: criterion 2's bound for strict models instead of 1e-4 (below).
 * strict (f32/f16/bf16 weights: f32 arithmetic everywhere, only the
 * summation order differs; random weights amplify that per layer: measured
 * 6e-6 after 6 layers, 5e-5 after 18, 4e-3 after 48):
 * 1. logits of every prompt position (prompts longer than three sliding
 *    windows, evaluated in tiles) agree within 1e-2 after the soft-cap, and
 *    the argmax agrees wherever the CPU's top-2 margin is at least 0.1;
 * 2. prefill-then-decode on the GPU equals token-by-token decode within 1e-4
 *    where both run the same kernels' summation orders (one-token norms of
 *    rows over 2048 values, the 12B's 3840, sum the squares over 1024
 *    threads' partials, tiled rows over 256: with the amplification above
 *    the 12B f16 model's two paths then differ by 2.4e-3, so run.sh checks
 *    it once with GEM_CUDA_NORM_WIDE=0 at 1e-4 and once with the defaults
 *    at tbt=1e-2, criterion 1's bound);
 * 3. GEN greedy tokens are identical on both backends.
 * int8 (q8_0/q4_0 weights: both backends round activations to 8 bits per
 * block; an f32 difference of one ulp can move a code by one step, which
 * random weights amplify: the CPU fast path against the CPU reference
 * already differs at 2 of 64 greedy steps on the tiny q8_0 model), so
 * decisions are compared where they are not near-ties (top-2 margin of the
 * CPU logits >= 0.1):
 * 1. argmax agrees at 90% of such positions (a code flip early in the
 *    prompt changes everything after it);
 * 2. token-by-token against the tiled prefill: at 98% of the tiled run's
 *    clear positions (tbt-agree=PCT; f16 caches: see the check);
 * 3. greedy tokens agree up to the first near-tie.
 * Always: the graph-replayed greedy path equals the GPU logits path, and
 * the continuation is not one repeated token. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "model/gemma4.h"
#include "test.h"
#include "cuda/logits_check.h"

static gemma4_kv_type kv_type; /* the GPU's (kv-f16, kv-f16-full); set once from argv before any session opens */
static int layers;
static double tbt_tol = 1e-4; /* criterion 2's bound for strict models (tbt=TOL) */
static int tbt_agree = 98;     /* criterion 2's argmax agreement for int8 models, percent (tbt-agree=PCT) */
static int cpu_agree = 90;     /* token-by-token against the CPU, percent (cpu-agree=PCT) */
static int cpu_check;          /* that check runs: f16 caches, or cpu-agree given */

static gem_session *open_session(const char *path, const char *backend, int tile, gem_engine **e) {
    gem_err err;
    gem_engine_opts o;
    memset(&o, 0, sizeof o);
    o.model_path = path;
    o.backend = backend;
    o.threads = 0;
    o.n_ctx = 1024;
    o.tile = tile;
    o.kv_type = !strcmp(backend, "cuda") ? kv_type : GEMMA4_KV_F32;
    o.layers = layers;
    *e = gem_engine_open(&o, &err);
    if (!*e) {
        fprintf(stderr, "%s: %s\n", backend, err.msg);
        return NULL;
    }
    gem_session *s = gem_session_new(*e, &err);
    if (!s) fprintf(stderr, "%s: %s\n", backend, err.msg);
    return s;
}

/* An agreement bound in percent, 50 to 100; 1 when s is not one. */
static int parse_pct(const char *s, int *out) {
    char *end;
    const long v = strtol(s, &end, 10);
    if (end == s || *end || v < 50 || v > 100) return 1;
    *out = (int)v;
    return 0;
}

int main(int argc, char **argv) {
    int bad_args = argc < 5, tbt_set = 0, agree_set = 0, cpu_agree_set = 0;
    for (int i = 5; i < argc; i++) {
        if (!strcmp(argv[i], "kv-f16")) kv_type = GEMMA4_KV_F16;
        else if (!strcmp(argv[i], "kv-f16-full")) kv_type = GEMMA4_KV_F16_FULL;
        else if (!strncmp(argv[i], "layers=", 7) && (layers = atoi(argv[i] + 7)) > 0) continue;
        else if (!strncmp(argv[i], "tbt=", 4)) {
            char *end;
            tbt_tol = strtod(argv[i] + 4, &end);
            tbt_set = 1;
            if (end == argv[i] + 4 || *end || !(tbt_tol > 0 && tbt_tol <= 1e-2)) bad_args = 1;
        } else if (!strncmp(argv[i], "tbt-agree=", 10)) {
            agree_set = 1;
            bad_args |= parse_pct(argv[i] + 10, &tbt_agree);
        } else if (!strncmp(argv[i], "cpu-agree=", 10)) {
            cpu_agree_set = 1;
            bad_args |= parse_pct(argv[i] + 10, &cpu_agree);
        } else bad_args = 1;
    }
    if (bad_args) {
        fprintf(stderr, "usage: cuda_model FILE PROMPT_LEN GEN strict|int8 [kv-f16|kv-f16-full] [layers=N] [tbt=TOL (<= 1e-2)] "
                        "[tbt-agree=PCT (50-100)] [cpu-agree=PCT (50-100, int8)]\n");
        return 2;
    }
    if (tbt_set && strcmp(argv[4], "strict")) {
        fprintf(stderr, "cuda_model: tbt=TOL bounds the strict criteria only\n");
        return 2;
    }
    if (agree_set && !strcmp(argv[4], "strict")) {
        fprintf(stderr, "cuda_model: tbt-agree=PCT bounds the int8 criteria only\n");
        return 2;
    }
    if (cpu_agree_set && !strcmp(argv[4], "strict")) {
        fprintf(stderr, "cuda_model: cpu-agree=PCT bounds the int8 criteria only\n");
        return 2;
    }
    cpu_check = kv_type != GEMMA4_KV_F32 || cpu_agree_set;
    if (kv_type != GEMMA4_KV_F32 && !strcmp(argv[4], "strict")) {
        fprintf(stderr, "cuda_model: kv-%s takes the int8 criteria (f16 entries are not exact)\n",
                gemma4_kv_type_name(kv_type));
        return 2;
    }
    const char *path = argv[1];
    const int n = atoi(argv[2]), gen = atoi(argv[3]), strict = !strcmp(argv[4], "strict");
    gem_engine *ec, *eg, *et;
    gem_session *sc = open_session(path, "cpu", 64, &ec), *sg = open_session(path, "cuda", 64, &eg);
    if (!sc || !sg) {
        printf("cuda_model: 0 passed, 1 failed\n");
        return 1;
    }
    /* the model's vocabulary (Gemma 4's 262144; a Qwen3.5 test profile's
     * few thousand): the logits' row stride and the prompt's id range */
    const size_t V = gem_engine_n_vocab(ec);
    const uint32_t lo = V > 2000 ? (V > 201000 ? 1000 : 100) : 3, span = (uint32_t)(V > 201000 ? 200000 : V - lo);
    int32_t *prompt = malloc(sizeof(int32_t) * (size_t)n);
    uint64_t r = 12345;
    prompt[0] = 2;
    for (int i = 1; i < n; i++)
        prompt[i] = (int32_t)(((r = r * 6364136223846793005ull + 1442695040888963407ull) >> 46) % span + lo);
    gem_err err;
    float *lc = malloc(sizeof(float) * V * (size_t)n), *lg = malloc(sizeof(float) * V * (size_t)n);
    CHECKF(gem_session_eval_all(sc, prompt, n, lc, &err) == 0, "%s", err.msg);
    CHECKF(gem_session_eval_all(sg, prompt, n, lg, &err) == 0, "%s", err.msg);
    double worst = 0;
    int argmax_same = 0, clear = 0, clear_same = 0;
    for (int i = 0; i < n; i++) {
        for (size_t v = 0; v < V; v++) {
            double d = fabs((double)lc[(size_t)i * V + v] - lg[(size_t)i * V + v]);
            if (!(d <= worst)) worst = isnan(d) ? INFINITY : d;
        }
        const int same = lc_argmax(lc + (size_t)i * V, V) == lc_argmax(lg + (size_t)i * V, V);
        argmax_same += same;
        if (lc_margin(lc + (size_t)i * V, V) >= TIE) clear++, clear_same += same;
    }
    printf("cuda_model: %s: %d positions, max |logit diff| gpu vs cpu %.3g, argmax agrees at %d (%d of %d clear)\n",
           path, n, worst, argmax_same, clear_same, clear);
    if (strict) {
        CHECKF(worst <= 1e-2, "max logit diff %g", worst);
        CHECKF(clear_same == clear, "argmax differs at %d clear positions", clear - clear_same);
    } else {
        CHECKF(clear_same * 10 >= clear * 9, "argmax agrees at only %d of %d clear positions", clear_same, clear);
    }

    /* 2: token by token on the GPU */
    {
        gem_session_free(sg);
        gem_engine_close(eg);
        gem_session *st = open_session(path, "cuda", 1, &et);
        double w2 = 0;
        int bad = 0, clear2 = 0, cpu_same = 0; /* cpu_same: token by token against the CPU, of `clear` */
        for (int i = 0; i < n && st; i++) {
            CHECKF(gem_session_eval(st, prompt + i, 1, &err) == 0, "%s", err.msg);
            const float *l = gem_session_logits(st);
            if (!l) break;
            for (size_t v = 0; v < V; v++) {
                double d = fabs((double)l[v] - lg[(size_t)i * V + v]);
                if (!(d <= w2)) w2 = isnan(d) ? INFINITY : d;
            }
            if (lc_margin(lg + (size_t)i * V, V) >= TIE) clear2++, bad += lc_argmax(l, V) != lc_argmax(lg + (size_t)i * V, V);
            if (lc_margin(lc + (size_t)i * V, V) >= TIE) cpu_same += lc_argmax(l, V) == lc_argmax(lc + (size_t)i * V, V);
        }
        printf("cuda_model: token-by-token vs tiled prefill on the GPU: max |diff| %.3g, %d of %d clear argmax differ; "
               "token-by-token vs the CPU: argmax agrees at %d of %d clear\n",
               w2, bad, clear2, cpu_same, clear);
        /* Float models: the two paths agree to 1e-4 (tbt_tol: see the
         * header) and on every clear argmax. 8-bit activation models
         * re-round every product's input, so attention results that
         * differ in the last bits (every one-token and tiled kernel is
         * within 1e-5 of the CPU reference per op, cuda_ops) can flip
         * codes and grow through the layers: the 1b q4_0 model's two paths
         * have differed at a few of its ~205 clear positions, as the GPU
         * and the CPU do. Up to 2% of clear positions may differ there
         * (tbt-agree=98, the default).
         * With f16 caches the two paths run attention at two precisions:
         * one-token steps on k_attn_tc (tensor cores: f16 queries, keys,
         * values and probabilities), the tiled prefill (GEM_CUDA_MMA=0)
         * on the f32 split kernel (f32 queries and probabilities; the
         * tile's own keys and values from the f32 projections, earlier
         * ones from the f16 cache): the 1b q4_0 model's paths then differ
         * at about one in nine clear positions, where with f32 caches they
         * agree (bench/results/cuda-pipe-h100-2026-12-05.json). run.sh
         * holds the quantized models with f16 caches to 80% (tbt-agree=80;
         * a wrong one-token kernel agrees nowhere near it), and every run
         * with f16 caches also holds token-by-token to the CPU as
         * criterion 1 holds the tiled run (90% of the CPU's clear
         * positions; the 1b q4_0 model at 80%, cpu-agree=80: its one-token
         * steps agree with the CPU at just over 80%, its tiled run at
         * nearly all). */
        if (strict) {
            CHECKF(w2 <= tbt_tol, "tiled vs token-by-token %g (bound %g)", w2, tbt_tol);
            CHECKF(bad == 0, "tiled vs token-by-token: argmax differs at %d clear positions", bad);
        } else {
            CHECKF(bad * 100 <= clear2 * (100 - tbt_agree),
                   "tiled vs token-by-token: argmax differs at %d of %d clear positions (at most %d%%)", bad, clear2,
                   100 - tbt_agree);
            if (cpu_check)
                CHECKF(cpu_same * 100 >= clear * cpu_agree,
                       "token-by-token vs the CPU: argmax agrees at only %d of %d clear positions (at least %d%%)",
                       cpu_same, clear, cpu_agree);
        }
        gem_session_free(st);
        gem_engine_close(et);
        sg = open_session(path, "cuda", 64, &eg);
    }

    /* 3: greedy continuations */
    int32_t *oc = malloc(sizeof(int32_t) * (size_t)gen), *og = malloc(sizeof(int32_t) * (size_t)gen),
            *ol = malloc(sizeof(int32_t) * (size_t)gen);
    gem_session_reset(sc);
    int32_t next_g = 0;
    int first_tie = gen; /* first CPU step whose top-2 margin is a near-tie */
    float *ml = malloc(sizeof(float) * V);
    CHECK(gem_session_eval(sc, prompt, n, &err) == 0);
    CHECK(gem_session_eval_greedy(sg, prompt, n, &next_g, &err) == 0);
    for (int i = 0; i < gen; i++) {
        memcpy(ml, gem_session_logits(sc), sizeof(float) * V);
        oc[i] = lc_argmax(ml, V);
        if (first_tie == gen && lc_margin(ml, V) < TIE) first_tie = i;
        og[i] = next_g;
        if (i + 1 < gen) {
            CHECK(gem_session_eval(sc, &oc[i], 1, &err) == 0);
            CHECK(gem_session_eval_greedy(sg, &og[i], 1, &next_g, &err) == 0);
        }
    }
    free(ml);
    gem_session_reset(sg);
    CHECK(gem_session_eval(sg, prompt, n, &err) == 0);
    for (int i = 0; i < gen; i++) {
        ol[i] = lc_argmax(gem_session_logits(sg), V);
        if (i + 1 < gen) CHECK(gem_session_eval(sg, &ol[i], 1, &err) == 0);
    }
    int same = 0, same_l = 0, distinct = 0, agree = 0;
    while (agree < gen && oc[agree] == og[agree]) agree++;
    for (int i = 0; i < gen; i++) {
        same += oc[i] == og[i];
        same_l += ol[i] == og[i];
        int seen = 0;
        for (int j = 0; j < i; j++) seen |= og[j] == og[i];
        distinct += !seen;
    }
    printf("cuda_model: %d greedy tokens: %d identical to the CPU (first %d; first CPU near-tie at %d), %d to the "
           "logits path, %d distinct\n", gen, same, agree, first_tie, same_l, distinct);
    if (strict) CHECKF(same == gen, "greedy tokens differ from the CPU backend");
    else CHECKF(agree >= first_tie, "greedy tokens differ at %d before the first near-tie (%d)", agree, first_tie);
    CHECKF(same_l == gen, "graph greedy path differs from the logits path");
    CHECKF(distinct >= 2, "the continuation is one repeated token: the check proves little");
    free(oc), free(og), free(ol), free(lc), free(lg), free(prompt);
    gem_session_free(sc);
    gem_session_free(sg);
    gem_engine_close(ec);
    gem_engine_close(eg);
    printf("cuda_model: %d passed, %d failed\n", test_passed, test_failed);
    return test_failed ? 1 : 0;
}
