/* gem bench: prefill and decode speed of one model on one backend, through
 * the engine's generation loop (gem_session_sync, gem_session_generate):
 * the path gem run, chat and serve take.
 *
 * Token ids are fixed pseudo-random ids (the same for every run and every
 * engine), greedy, EOS ignored. Each measurement is repeated (after one
 * warm-up run) and the median and spread are reported. Prefill of P tokens
 * is the time to first token of a P-token prompt on an empty session (the
 * prompt in, the first token chosen). Decode at depth D prefills D tokens
 * once, then generates (reps + 1) runs of `gen` steps whose tokens are
 * forced to the fixed ids; a run's time is read off the steps' timestamps
 * (the runs see depths D .. D + (reps + 1) gen: filling a deep context
 * once per run would cost more than the measurement).
 * Achieved bandwidth counts the weight bytes one decode step reads (the
 * tied embedding once as the head) plus the KV cache bytes at that depth.
 *
 * Speculative decoding (--spec A,A,.. and/or --mtp FILE): at each depth,
 * greedy free-running generation of `gen` tokens after a prompt of D
 * pseudo-random ids, plain, then with the replay test drafter right with
 * each probability A (proposing the plain run's own tokens), then with the
 * MTP drafter; every run's answer must be the plain one (else an error),
 * so the speed-ups are of identical outputs. Runs after the first restore
 * the prompt's checkpoint instead of prefilling again. --verify-cost adds
 * the cost of a verification of 2 .. draft-max + 1 rows in decode steps
 * (bench_verify_cost).
 *
 * --json-schema FILE or --json-object: constrained decoding (structured
 * output) against free decoding at the first depth (bench_grammar).
 *
 * --parallel N,N,..: N generations at once, each on its own session of
 * the engine (whose gate runs their decode steps as batched steps), at
 * the first depth: aggregate decode tok/s against the one-stream figure
 * of the same run (bench_parallel). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "engine/engine.h"
#include "gguf/gguf.h"
#include "model/gemma4.h"
#include "util/json.h"
#include "util/strbuf.h"
#include "backend/device.h"
#include "util/clock.h"

/* When each decode step's token was chosen (gem_gen_callbacks.on_token). */
typedef struct {
    double *t;
} bench_clock;

static void on_step_token(void *ctx, const gem_gen_token *tk) {
    ((bench_clock *)ctx)->t[tk->index] = gem_now_s();
}

static int usage(void) {
    fprintf(stderr,
            "usage: gem bench -m FILE [--backend cpu|cuda] [--gpus N] [-tp N] [--prompt N,N,...] [--gen N] [--depth N,N,...]\n"
            "                 [--reps R] [--tile T] [-t THREADS] [--kv-type f32|f16|f16-full] [--peak-gbs G] [--json OUT]\n"
            "                 [--spec A,A,...] [--mtp FILE] [--draft-max N] [--draft-min N] [--draft-p-min P] [--draft-p-prod P]\n"
            "                 [--draft-fixed] [--verify-cost] [--json-schema FILE | --json-object] [--parallel N,N,...]\n");
    return 2;
}

/* Context a speculative run may use beyond its answer: one round's drafts. */
#define SPEC_SLACK 16

/* The tokens one speculative-benchmark run generated. */
typedef struct {
    int32_t *ids;
    long n, cap;
} spec_out;

static void on_spec_token(void *ctx, const gem_gen_token *tk) {
    spec_out *o = ctx;
    if (o->n < o->cap) o->ids[o->n++] = tk->id;
}

/* "512,2048" -> values; -1 on anything malformed */
static int parse_list(const char *s, int *v, int cap, int lo, int hi) {
    int n = 0;
    while (*s) {
        char buf[32];
        size_t len = strcspn(s, ",");
        if (len == 0 || len >= sizeof buf || n == cap) return -1;
        memcpy(buf, s, len);
        buf[len] = 0;
        double x;
        if (cli_parse_num(buf, lo, hi, &x)) return -1;
        v[n++] = (int)x;
        s += len;
        if (*s == ',') s++;
    }
    return n;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double cli_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void cli_bench_ids(int32_t *ids, int n, uint32_t n_vocab) {
    uint64_t r = 0x9E3779B97F4A7C15ull;
    const uint32_t span = n_vocab > 201000 ? 200000 : n_vocab - 1, base = n_vocab > 201000 ? 1000 : 1;
    if (n > 0) ids[0] = 2;
    for (int i = 1; i < n; i++) ids[i] = (int32_t)(((r = r * 6364136223846793005ull + 1) >> 40) % span) + (int32_t)base;
}

typedef struct {
    double median, p95, min, max;
} stats;

static stats summarize(double *v, int n) {
    const double med = cli_median(v, n); /* sorts v */
    stats s = {med, v[(int)ceil(0.95 * n) - 1 < 0 ? 0 : (int)ceil(0.95 * n) - 1], v[0], v[n - 1]};
    return s;
}

/* What the numbers were measured on, for the JSON record: the backend's
 * device (the GPU's name and clocks, or the CPU's model and cores). */
static void hardware_of(const char *backend, char *out, size_t cap) {
    if (backend_describe(backend, 0, out, cap)) snprintf(out, cap, "unknown");
}

/* One speculative-benchmark run: the prompt ids[0..D) (its checkpoint
 * restored after the first run), gen tokens; its decode tok/s. */
static int spec_run(gem_session *s, const int32_t *ids, int D, const gem_gen_params *gp, spec_out *o,
                    gem_gen_result *res, gem_err *err) {
    o->n = 0;
    const gem_gen_callbacks cb = {o, on_spec_token, NULL, NULL, NULL};
    if (gem_session_sync(s, ids, (size_t)D, err) < 0 || gem_session_generate(s, gp, &cb, res, err)) return -1;
    if (res->n_generated != gp->max_tokens)
        return gem_err_set(err, "a speculative run at depth %d generated %ld of %ld tokens", D, res->n_generated,
                           gp->max_tokens);
    return 0;
}

/* The replay drafter over the prompt ids[0..D) and the plain answer (gen
 * tokens), built in full (room for D + gen ids), right with probability p. */
static int replay_plain(gem_session *s, const int32_t *ids, int D, const spec_out *plain, int gen, int32_t *full,
                        double p, uint64_t seed, gem_err *err) {
    memcpy(full, ids, sizeof(int32_t) * (size_t)D);
    memcpy(full + D, plain->ids, sizeof(int32_t) * (size_t)gen);
    return gem_session_set_replay(s, full, (size_t)(D + gen), p, seed, err);
}

/* --verify-cost: the cost of a verification round of k + 1 rows, k = 1 ..
 * draft-max, in plain decode steps: the replay drafter right every time
 * (its proposals cost nothing) with k fixed, and an answer length at which
 * every round is full: the first token comes from the prompt, then each
 * round verifies k + 1 rows and emits k + 1 tokens, with no plain step and
 * no shorter last round (the length is searched below gen, and the runs
 * checked for it), so decode time over rounds is one full round's time.
 * Medians over reps. */
static int bench_verify_cost(gem_session *s, const int32_t *ids, int D, const gem_gen_params *gp, int32_t *full,
                             const spec_out *plain, double plain_tps, int reps, strbuf *js, gem_err *err) {
    const int gen = (int)gp->max_tokens;
    spec_out o = {malloc(sizeof(int32_t) * (size_t)gen), 0, gen};
    double *rt = malloc(sizeof(double) * (size_t)(reps + 1));
    int rc = !o.ids || !rt ? gem_err_set(err, "out of memory") : 0;
    if (!rc && replay_plain(s, ids, D, plain, gen, full, 1.0, 0x5eed, err)) rc = 1;
    const double step_s = 1.0 / plain_tps;
    for (int k = 1; k <= gp->draft_max && !rc; k++) {
        gem_gen_params g = *gp;
        g.draft_max = k;
        g.draft_min = 1;
        g.draft_fixed = 1;
        g.draft_p_min = g.draft_p_prod = 0;
        gem_gen_result res;
        /* the longest answer up to gen made of full rounds only */
        int len = 0;
        for (int n = gen; n >= 2 && !len && !rc; n--) {
            g.max_tokens = n;
            if (spec_run(s, ids, D, &g, &o, &res, err)) rc = 1;
            else if (res.n_drafted == (long)k * res.n_rounds && 1 + res.n_rounds * (k + 1) == res.n_generated)
                len = n;
        }
        if (!rc && !len)
            rc = gem_err_set(err, "--verify-cost: no answer of up to %d tokens is made of full %d-row rounds", gen, k + 1);
        for (int r = 0; r <= reps && !rc; r++) {
            if (spec_run(s, ids, D, &g, &o, &res, err)) rc = 1;
            else if (memcmp(o.ids, plain->ids, sizeof(int32_t) * (size_t)len))
                rc = gem_err_set(err, "a verification-cost run at depth %d changed the answer", D);
            else if (res.n_drafted != (long)k * res.n_rounds || res.n_rounds < 1)
                rc = gem_err_set(err, "a verification-cost run drafted %ld in %ld rounds of %d", res.n_drafted,
                                 res.n_rounds, k);
            /* decode_s runs from the first token (the prompt's) to the
             * last: the rounds, nothing else */
            else rt[r] = res.decode_s / (double)res.n_rounds;
        }
        if (rc) break;
        const stats st = summarize(rt + 1, reps);
        printf("  verify %2d rows               %8.3f ms per round = %.2f decode steps (%ld rounds)\n", k + 1,
               1e3 * st.median, st.median / step_s, res.n_rounds);
        sb_printf(js, "%s\n  {\"depth\": %d, \"verify_rows\": %d, \"rounds\": %ld, \"round_ms\": %.4f, "
                      "\"decode_step_ms\": %.4f, \"round_in_steps\": %.4f}",
                  js->len ? "," : "", D, k + 1, res.n_rounds, 1e3 * st.median, 1e3 * step_s, st.median / step_s);
    }
    gem_session_set_replay(s, NULL, 0, 0, 0, err);
    free(o.ids);
    free(rt);
    return rc;
}

/* --json-schema FILE / --json-object: constrained decoding against free
 * decoding, greedy, from the same prompt ids[0..D) (restored from its
 * checkpoint after the first answer), without a drafter. A constrained
 * answer that the grammar ends early is followed by another from the same
 * prompt until gen tokens were generated; free answers run gen tokens
 * (end tokens ignored). A run's speed is its answers' steps (each answer's
 * tokens after its first) over their decode time, so the grammar's masks
 * and checks are in it and the prompts are not. Medians over reps after a
 * warm-up run. */
static int bench_grammar(gem_session *s, const int32_t *ids, int D, const gram *g, const char *what, int gen,
                         int reps, FILE *js, gem_err *err) {
    double *tps[2] = {malloc(sizeof(double) * (size_t)(reps + 1)), malloc(sizeof(double) * (size_t)(reps + 1))};
    double med[2] = {0, 0};
    long answers = 0, tokens = 0;
    int rc = tps[0] && tps[1] ? 0 : gem_err_set(err, "out of memory");
    /* free and constrained runs alternate, so a drift of the machine's
     * speed falls on both */
    for (int r = 0; r <= reps && !rc; r++)
        for (int mode = 0; mode < 2 && !rc; mode++) {
            gem_gen_params gp = gem_gen_params_default();
            gp.draft_max = 0;
            gp.grammar = mode ? g : NULL;
            gp.ignore_eos = !mode;
            long made = 0, steps = 0;
            double t = 0;
            while (made < gen && !rc) {
                gem_gen_result res;
                gp.max_tokens = gen - made;
                if (gem_session_sync(s, ids, (size_t)D, err) < 0 || gem_session_generate(s, &gp, NULL, &res, err)) {
                    rc = 1;
                    break;
                }
                if (res.n_generated < 1) {
                    rc = gem_err_set(err, "a %s answer generated no token", mode ? "constrained" : "free");
                    break;
                }
                made += res.n_generated;
                steps += res.n_generated - 1;
                t += res.decode_s;
                if (mode && r > 0) answers++, tokens += res.n_generated;
            }
            tps[mode][r] = steps > 0 && t > 0 ? steps / t : 0;
        }
    for (int mode = 0; mode < 2 && !rc; mode++) med[mode] = summarize(tps[mode] + 1, reps).median;
    if (!rc) {
        const double over = med[1] > 0 ? med[0] / med[1] - 1 : 0;
        printf("constrained decode (%s), depth %d, %d tokens:\n  free        %8.2f tok/s\n  constrained %8.2f tok/s "
               "(%+.1f%% time per token; %ld answers, %.1f tokens each)\n",
               what, D, gen, med[0], med[1], 100 * over, answers, answers ? (double)tokens / answers : 0);
        if (js) {
            strbuf q = {0};
            json_quote(what, strlen(what), &q);
            fprintf(js, "\n  {\"grammar\": %s, \"depth\": %d, \"gen\": %d, \"tok_s_free\": %.3f, "
                        "\"tok_s_constrained\": %.3f, \"time_per_token_overhead\": %.4f, \"answers\": %ld, "
                        "\"tokens\": %ld}",
                    sb_cstr(&q), D, gen, med[0], med[1], over, answers, tokens);
            sb_free(&q);
        }
    }
    free(tps[0]);
    free(tps[1]);
    return rc;
}

/* The speculative section (see the file comment): per depth, plain, then
 * the replay drafter at each probability, then the MTP drafter. */
static int bench_spec(gem_session *s, gem_engine *e, const int32_t *ids, int need, const int *depths, int n_depths,
                      int gen, int reps, const cli_mtp *mtp, const double *spec_p, int n_spec, int verify_cost,
                      FILE *js, strbuf *vjs, gem_err *err) {
    gem_gen_params gp = gem_gen_params_default();
    cli_mtp_params(mtp, &gp);
    const int fixed = gp.draft_fixed;
    gp.max_tokens = gen;
    gp.ignore_eos = 1;
    const int k = gp.draft_max;
    spec_out plain = {malloc(sizeof(int32_t) * (size_t)gen), 0, gen}, o = {malloc(sizeof(int32_t) * (size_t)gen), 0, gen};
    int32_t *full = malloc(sizeof(int32_t) * (size_t)need);
    double *tps = malloc(sizeof(double) * (size_t)(reps + 1));
    int rc = !plain.ids || !o.ids || !full || !tps ? gem_err_set(err, "out of memory") : 0;
    gem_gen_result res;
    for (int di = 0; di < n_depths && !rc; di++) {
        const int D = depths[di] > 0 ? depths[di] : 1;
        if (D + gen + SPEC_SLACK > need) {
            rc = gem_err_set(err, "depth %d with %d tokens does not fit the context of %d", D, gen, need);
            break;
        }
        /* runs: -1 plain, 0..n_spec-1 replay, n_spec the MTP drafter */
        double plain_tps = 0;
        for (int run = -1; run <= n_spec && !rc; run++) {
            const int is_mtp = run == n_spec;
            if (is_mtp && !gem_engine_mtp(e)) break;
            gem_gen_params g = gp;
            if (run == -1) g.draft_max = 0;
            if (run >= 0 && !is_mtp) {
                if (replay_plain(s, ids, D, &plain, gen, full, spec_p[run], 0x5eed + (uint64_t)run, err)) {
                    rc = 1;
                    break;
                }
            } else if (gem_session_set_replay(s, NULL, 0, 0, 0, err)) {
                rc = 1;
                break;
            }
            long rounds = 0, drafted = 0, accepted = 0;
            for (int r = 0; r <= reps && !rc; r++) {
                if (spec_run(s, ids, D, &g, run == -1 ? &plain : &o, &res, err)) {
                    rc = 1;
                    break;
                }
                if (run >= 0 && memcmp(o.ids, plain.ids, sizeof(int32_t) * (size_t)gen)) {
                    rc = gem_err_set(err, "speculative run %d at depth %d changed the answer", run, D);
                    break;
                }
                tps[r] = (gen - 1) / (res.decode_s > 0 ? res.decode_s : 1e-9);
                if (r > 0) rounds += res.n_rounds, drafted += res.n_drafted, accepted += res.n_accepted;
            }
            if (rc) break;
            stats st = summarize(tps + 1, reps); /* run 0 is the warm-up */
            const double per_round = rounds ? (double)(accepted + rounds) / (double)rounds : 0;
            char who[64];
            if (run == -1) snprintf(who, sizeof who, "plain");
            else if (is_mtp) snprintf(who, sizeof who, "mtp %s", gem_engine_mtp(e));
            else snprintf(who, sizeof who, "replay a=%.2f", spec_p[run]);
            if (run == -1) {
                plain_tps = st.median;
                printf("speculative at depth %6d (%d tokens, draft-max %d%s):\n", D, gen, k, fixed ? " fixed" : "");
                printf("  %-28s %8.2f tok/s\n", who, st.median);
            } else {
                printf("  %-28s %8.2f tok/s (%.2fx), %ld rounds, %ld of %ld drafts accepted, %.2f tokens per round\n",
                       who, st.median, st.median / plain_tps, rounds, accepted, drafted, per_round);
            }
            char p_js[16] = "null";
            if (run >= 0 && !is_mtp) snprintf(p_js, sizeof p_js, "%.3f", spec_p[run]);
            if (js)
                fprintf(js, "%s\n  {\"depth\": %d, \"gen\": %d, \"draft_max\": %d, \"draft_fixed\": %s, \"drafter\": \"%s\", "
                            "\"p_right\": %s, \"tok_s\": %.3f, \"speedup\": %.4f, \"rounds\": %ld, \"drafted\": %ld, "
                            "\"accepted\": %ld, \"tokens_per_round\": %.3f}",
                        di || run > -1 ? "," : "", D, gen, k, fixed ? "true" : "false",
                        run == -1 ? "none" : is_mtp ? gem_engine_mtp(e) : "replay", p_js, st.median,
                        st.median / plain_tps, rounds, drafted, accepted, per_round);
        }
        if (!rc && verify_cost)
            rc = bench_verify_cost(s, ids, D, &gp, full, &plain, plain_tps, reps, vjs, err);
    }
    gem_session_set_replay(s, NULL, 0, 0, 0, err);
    free(plain.ids);
    free(o.ids);
    free(full);
    free(tps);
    return rc;
}

/* The streams' start: every thread waits until go is 1 (start) or -1
 * (a thread could not be made: return without generating). */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int go;
} par_start;

/* One stream of --parallel: its session, forced tokens and timestamps. */
typedef struct {
    gem_session *s;
    gem_gen_params gp;
    bench_clock bc;
    par_start *start;
    gem_err err;
    int rc;
} par_stream;

static void *par_main(void *arg) {
    par_stream *p = arg;
    gem_gen_result res;
    const gem_gen_callbacks cb = {&p->bc, on_step_token, NULL, NULL, NULL};
    pthread_mutex_lock(&p->start->mu);
    while (!p->start->go) pthread_cond_wait(&p->start->cv, &p->start->mu);
    const int go = p->start->go;
    pthread_mutex_unlock(&p->start->mu);
    if (go < 0) return NULL;
    p->rc = gem_session_generate(p->s, &p->gp, &cb, &res, &p->err);
    if (!p->rc && res.n_generated != p->gp.max_tokens)
        p->rc = gem_err_set(&p->err, "a stream generated %ld of %ld steps", res.n_generated, p->gp.max_tokens);
    return NULL;
}

/* --parallel: for each N, N streams each prefilled to depth D, then
 * generating (reps + 1) gen forced tokens at once. Window k (k = 1 ..
 * reps; window 0 is the warm-up) runs from the moment every stream has
 * passed token k gen to the first moment one reaches token (k + 1) gen;
 * its rate is every token chosen inside it over its length (streams in
 * one batch move in step, so this is their aggregate rate without the
 * ramps). The median window is reported, beside the mean rows of the
 * engine's batched steps over the whole run. */
static int bench_parallel(gem_engine *e, const int32_t *ids, int need, int D, const int *ns, int n_ns, int gen,
                          int reps, double one_tps, FILE *js, gem_err *err) {
    int rc = 0, nmax = 0;
    for (int i = 0; i < n_ns; i++) nmax = ns[i] > nmax ? ns[i] : nmax;
    const long steps = (long)(reps + 1) * gen;
    par_stream *ps = calloc((size_t)nmax, sizeof *ps);
    pthread_t *th = calloc((size_t)nmax, sizeof *th);
    int32_t *forced = malloc(sizeof(int32_t) * (size_t)steps * (size_t)nmax);
    double *win = malloc(sizeof(double) * (size_t)reps);
    if (!ps || !th || !forced || !win) rc = gem_err_set(err, "out of memory");
    for (int i = 0; i < nmax && !rc; i++) {
        if (!(ps[i].s = gem_session_new(e, err)) || !(ps[i].bc.t = malloc(sizeof(double) * (size_t)steps))) {
            if (ps[i].s) rc = gem_err_set(err, "out of memory");
            rc = -1;
        }
        for (long k = 0; k < steps; k++) forced[(size_t)i * steps + k] = ids[(D + 7 * i + k) % need];
    }
    for (int ni = 0; ni < n_ns && !rc; ni++) {
        const int N = ns[ni];
        par_start start = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
        for (int i = 0; i < N && !rc; i++) {
            gem_session_reset(ps[i].s);
            if (gem_session_sync(ps[i].s, ids, (size_t)(D > 0 ? D : 1), err) < 0) rc = -1;
            ps[i].gp = gem_gen_params_default();
            ps[i].gp.max_tokens = steps;
            ps[i].gp.n_force = steps;
            ps[i].gp.force = forced + (size_t)i * steps;
            ps[i].gp.ignore_eos = 1;
            ps[i].start = &start;
            ps[i].rc = 0;
        }
        long st0 = 0, ro0 = 0, st1 = 0, ro1 = 0;
        int rmax = 0;
        gem_engine_batch_stats(e, &st0, &ro0, &rmax);
        int started = 0;
        for (; started < N && !rc; started++)
            if (pthread_create(&th[started], NULL, par_main, &ps[started])) {
                rc = gem_err_set(err, "cannot start a thread");
                break;
            }
        pthread_mutex_lock(&start.mu);
        start.go = rc ? -1 : 1;
        pthread_cond_broadcast(&start.cv);
        pthread_mutex_unlock(&start.mu);
        for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
        if (rc) break;
        gem_engine_batch_stats(e, &st1, &ro1, &rmax);
        for (int i = 0; i < N && !rc; i++)
            if (ps[i].rc) {
                *err = ps[i].err;
                rc = -1;
            }
        if (rc) break;
        for (int k = 1; k <= reps; k++) {
            double ta = 0, tb = 1e300;
            for (int i = 0; i < N; i++) {
                const double a = ps[i].bc.t[(long)k * gen - 1], b = ps[i].bc.t[(long)(k + 1) * gen - 1];
                ta = a > ta ? a : ta;
                tb = b < tb ? b : tb;
            }
            long tokens = 0;
            for (int i = 0; i < N; i++)
                for (long j = 0; j < steps; j++) tokens += ps[i].bc.t[j] > ta && ps[i].bc.t[j] <= tb;
            win[k - 1] = tb > ta ? tokens / (tb - ta) : 0;
        }
        int apart = 0; /* windows where the streams did not run together */
        for (int k = 0; k < reps; k++) apart += win[k] == 0;
        if (apart) {
            rc = gem_err_set(err, "--parallel %d: in %d of %d windows the streams did not run together (each "
                                  "finished a window before another began it)", N, apart, reps);
            break;
        }
        stats st = summarize(win, reps);
        const double mean_rows = st1 > st0 ? (double)(ro1 - ro0) / (double)(st1 - st0) : 0;
        char rows_txt[48] = "no batched steps";
        if (mean_rows > 0) snprintf(rows_txt, sizeof rows_txt, "batched steps of %.2f rows on average", mean_rows);
        printf("parallel %2d streams at depth %6d: %8.2f tok/s aggregate (median of %d windows of %d steps; spread "
               "%.2f-%.2f), %.2f per stream, %.2fx one stream; %s\n",
               N, D, st.median, reps, gen, st.min, st.max, st.median / N, one_tps > 0 ? st.median / one_tps : 0,
               rows_txt);
        if (js)
            fprintf(js, "%s\n  {\"streams\": %d, \"depth\": %d, \"gen\": %d, \"tok_s_aggregate\": %.3f, "
                        "\"tok_s_per_stream\": %.3f, \"spread\": [%.3f, %.3f], \"vs_one_stream\": %.4f, "
                        "\"one_stream_tok_s\": %.3f, \"mean_step_rows\": %.3f}",
                    ni ? "," : "", N, D, gen, st.median, st.median / N, st.min, st.max,
                    one_tps > 0 ? st.median / one_tps : 0, one_tps, mean_rows);
    }
    for (int i = 0; i < nmax && ps; i++) {
        gem_session_free(ps[i].s);
        free(ps[i].bc.t);
    }
    free(ps);
    free(th);
    free(forced);
    free(win);
    return rc;
}

int cli_bench(int argc, char **argv) {
    const char *model = NULL, *backend = NULL, *json_path = NULL; /* backend NULL: cpu, or cuda with --gpus */
    int prompts[16] = {512}, n_prompts = 1, depths[16] = {0}, n_depths = 1, gen = 128, reps = 3, tile = 0, threads = 0;
    double peak = 0; /* GB/s; 0: the GPU's figure (backend_peak_gbs) or none */
    gemma4_kv_type kv_type = GEMMA4_KV_F32;
    int n_spec = 0, verify_cost = 0, grammar_on = 0, par[16], n_par = 0;
    const char *schema = NULL; /* --json-schema FILE; with grammar_on and NULL: --json-object */
    double spec_p[16];
    cli_mtp mtp;
    cli_mtp_init(&mtp);
    cli_tp tp;
    cli_tp_init(&tp);
    int shards = 1;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        double x;
        int used, mr = cli_mtp_arg("bench", &mtp, a, v, &used);
        if (mr < 0) return 2;
        if (mr > 0) {
            i += used - 1;
            continue;
        }
        if ((mr = cli_tp_arg("bench", &tp, a, v, &used)) < 0) return 2;
        if (mr > 0) {
            i += used - 1;
            continue;
        }
        if (!strcmp(a, "--verify-cost")) {
            verify_cost = 1;
            continue;
        }
        if (!strcmp(a, "--json-object")) {
            grammar_on = 1;
            schema = NULL;
            continue;
        }
        if (!v) return usage();
        if (!strcmp(a, "--spec")) {
            char buf[256];
            snprintf(buf, sizeof buf, "%s", v);
            n_spec = 0;
            for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
                if (n_spec == 16 || cli_parse_num(t, 0, 1, &spec_p[n_spec])) goto bad;
                n_spec++;
            }
            if (!n_spec) goto bad;
            i++;
            continue;
        }
        if (!strcmp(a, "--json-schema")) grammar_on = 1, schema = v;
        else if (!strcmp(a, "-m")) model = v;
        else if (!strcmp(a, "--backend")) backend = v;
        else if (!strcmp(a, "--kv-type")) { if (cli_kv_type_arg("bench", v, &kv_type)) return 2; }
        else if (!strcmp(a, "--json")) json_path = v;
        else if (!strcmp(a, "--prompt")) { if ((n_prompts = parse_list(v, prompts, 16, 1, 1 << 20)) < 1) goto bad; }
        else if (!strcmp(a, "--parallel")) { if ((n_par = parse_list(v, par, 16, 1, 256)) < 1) goto bad; }
        else if (!strcmp(a, "--depth")) { if ((n_depths = parse_list(v, depths, 16, 0, 1 << 20)) < 1) goto bad; }
        else if (!strcmp(a, "--gen")) { if (cli_parse_num(v, 1, 1 << 20, &x)) goto bad; gen = (int)x; }
        else if (!strcmp(a, "--reps")) { if (cli_parse_num(v, 1, 1000, &x)) goto bad; reps = (int)x; }
        else if (!strcmp(a, "--tile")) { if (cli_parse_num(v, 1, 1 << 16, &x)) goto bad; tile = (int)x; }
        else if (!strcmp(a, "-t")) { if (cli_parse_num(v, 1, 4096, &x)) goto bad; threads = (int)x; }
        else if (!strcmp(a, "--peak-gbs")) { if (cli_parse_num(v, 1, 1e6, &x)) goto bad; peak = x; }
        else {
            fprintf(stderr, "gem bench: error: unknown option '%s'\n", a);
            return usage();
        }
        i++;
        continue;
    bad:
        fprintf(stderr, "gem bench: error: bad value '%s' for %s\n", v, a);
        return 2;
    }
    if (!model) return usage();
    if (cli_tp_resolve("bench", &tp, &backend, &shards)) return 2;
    if (!backend) backend = "cpu";
    gem_err err = {{0}};
    gram *grammar = NULL;
    if (grammar_on && !(grammar = cli_grammar(schema, &err))) {
        fprintf(stderr, "gem bench: error: %s\n", err.msg);
        return 1;
    }

    /* a prompt of P needs room for its first token; decode at depth D
     * prefills max(D, 1) tokens and generates (reps + 1) gen + 1 more */
    int p_max = 0;
    for (int i = 0; i < n_prompts; i++) p_max = prompts[i] > p_max ? prompts[i] : p_max;
    int need = p_max + 1;
    for (int i = 0; i < n_depths; i++) {
        int d = (depths[i] > 0 ? depths[i] : 1) + (reps + 1) * gen + 1;
        /* a prompt at depth D: D + P tokens and the first generated */
        if (depths[i] > 0 && depths[i] + p_max + 1 > d) d = depths[i] + p_max + 1;
        if (d < (depths[i] > 0 ? depths[i] : 1) + gen + SPEC_SLACK) d = (depths[i] > 0 ? depths[i] : 1) + gen + SPEC_SLACK;
        need = d > need ? d : need;
    }
    gem_engine_opts eo;
    memset(&eo, 0, sizeof eo);
    eo.model_path = model;
    eo.backend = backend;
    eo.kv_type = kv_type;
    eo.threads = threads;
    eo.shards = shards;
    eo.n_ctx = need;
    eo.tile = tile;
    for (int i = 0; i < n_par; i++) /* the streams' sessions beside the main one */
        eo.sessions = par[i] + 1 > eo.sessions ? par[i] + 1 : eo.sessions;
    char mtp_buf[8];
    eo.mtp_path = cli_mtp_path(&mtp, model, 0, mtp_buf, sizeof mtp_buf);
    double t0 = gem_now_s();
    gem_engine *e = gem_engine_open(&eo, &err);
    gem_session *s = e ? gem_session_new(e, &err) : NULL;
    if (!s) {
        fprintf(stderr, "gem bench: error: %s\n", err.msg);
        gem_engine_close(e);
        gram_free(grammar);
        return 1;
    }
    if (gem_engine_n_ctx(e) < need) {
        fprintf(stderr, "gem bench: error: the runs need a context of %d; the model allows %d\n", need,
                gem_engine_n_ctx(e));
        gem_session_free(s);
        gem_engine_close(e);
        gram_free(grammar);
        return 1;
    }
    const double t_load = gem_now_s() - t0;
    /* bytes one decode step reads, from the model's own tensor table */
    const uint64_t wbytes = gem_engine_decode_bytes(e);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)need);
    if (ids) cli_bench_ids(ids, need, gem_engine_n_vocab(e));
    double *samples = malloc(sizeof(double) * (size_t)(reps + 1));
    FILE *js = json_path ? fopen(json_path, "w") : NULL;
    if (json_path && !js) {
        fprintf(stderr, "gem bench: error: cannot write %s\n", json_path);
        return 1;
    }
    /* a CPU's memory bandwidth is not known here: without --peak-gbs no
     * fraction is printed rather than one against a made-up peak; a GPU
     * says what it is (an H100's fraction against the H200's 4800 was
     * wrong by 43%) */
    if (peak == 0) peak = backend_peak_gbs(gem_engine_backend(e), 0);
    char peak_txt[48] = "peak unknown (--peak-gbs)", peak_js[24] = "null";
    if (peak > 0) {
        snprintf(peak_txt, sizeof peak_txt, "peak %.0f GB/s", peak);
        snprintf(peak_js, sizeof peak_js, "%.0f", peak);
    }
    const gem_mem_plan *plan = gem_engine_plan(e);
    char kvb[32];
    printf("gem bench: %s on %s, load %.2f s, %.2f GB read per decode step (weights), %s; context %d, KV caches %s "
           "(--kv-type %s)\n",
           gem_engine_profile(e), gem_engine_backend(e), t_load, wbytes / 1e9, peak_txt, plan->n_ctx,
           gemma4_human_bytes(plan->state_bytes, kvb, sizeof kvb), plan->kv_type);
    if (js) {
        /* self-describing: the command, when, on what (commit and file hash
         * are the caller's: bench/ab records both) */
        strbuf cmd = {0}, q = {0};
        sb_puts(&cmd, "gem bench");
        for (int i = 0; i < argc; i++) sb_printf(&cmd, " %s", argv[i]);
        char hw[512], when[32];
        hardware_of(gem_engine_backend(e), hw, sizeof hw);
        const time_t tn = time(NULL);
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime(&tn));
        fputs("{\"model\": ", js);
        json_quote(model, strlen(model), &q);
        sb_puts(&q, ", \"command\": ");
        json_quote(sb_cstr(&cmd), strlen(sb_cstr(&cmd)), &q);
        /* the kernel choices in force (GEM_CUDA_* variables): a record of
         * an opt-in kernel says so, and the command re-runs as recorded */
        strbuf envs = {0};
        for (char **ev = environ; *ev; ev++)
            if (!strncmp(*ev, "GEM_CUDA_", 9)) sb_printf(&envs, "%s%s", envs.len ? " " : "", *ev);
        sb_puts(&q, ", \"env\": ");
        json_quote(sb_cstr(&envs), strlen(sb_cstr(&envs)), &q);
        sb_free(&envs);
        sb_puts(&q, ", \"hardware\": ");
        json_quote(hw, strlen(hw), &q);
        fputs(sb_cstr(&q), js);
        fprintf(js, ", \"date\": \"%s\", \"profile\": \"%s\", \"backend\": \"%s\", \"kv_type\": \"%s\", \"n_ctx\": %d, "
                    "\"kv_bytes\": %llu, \"load_s\": %.3f, "
                    "\"weight_bytes_per_token\": %llu, \"peak_gbs\": %s, \"reps\": %d,\n \"prefill\": [",
                when, gem_engine_profile(e), gem_engine_backend(e), plan->kv_type, plan->n_ctx,
                (unsigned long long)plan->state_bytes, t_load, (unsigned long long)wbytes, peak_js, reps);
        sb_free(&cmd);
        sb_free(&q);
    }
    int rc = 0;
    gem_gen_params gp = gem_gen_params_default(); /* greedy: the argmax on the backend */
    gem_gen_result res;
    for (int pi = 0; pi < n_prompts && !rc; pi++) {
        const int P = prompts[pi];
        gp.max_tokens = 1;
        for (int k = 0; k <= reps && !rc; k++) {
            gem_session_reset(s);
            if (gem_session_sync(s, ids, (size_t)P, &err) < 0 || gem_session_generate(s, &gp, NULL, &res, &err)) rc = 1;
            else if (res.n_generated != 1) rc = gem_err_set(&err, "a prompt of %d tokens gave no first token", P) != 0;
            if (k > 0) samples[k - 1] = res.first_s; /* run 0 is the warm-up */
        }
        if (rc) break;
        stats st = summarize(samples, reps);
        printf("prefill %6d tokens: %9.1f tok/s (median; p95 %.1f, min %.1f, max %.1f), time to first token %.3f s\n", P,
               P / st.median, P / st.p95, P / st.max, P / st.min, st.median);
        if (js)
            fprintf(js, "%s\n  {\"tokens\": %d, \"depth\": 0, \"tok_s\": %.2f, \"tok_s_p95\": %.2f, \"ttft_s\": %.5f, "
                        "\"spread\": [%.5f, %.5f]}",
                    pi ? "," : "", P, P / st.median, P / st.p95, st.median, st.min, st.max);
    }
    /* decode: the runs' tokens are forced (fixed ids: the same work on every
     * engine) and each run's time is read off the steps' timestamps */
    const long steps = (long)(reps + 1) * gen + 1;
    double first_tps = 0; /* decode at the first depth: --parallel's one stream */
    int32_t *forced = malloc(sizeof(int32_t) * (size_t)steps);
    bench_clock bc = {malloc(sizeof(double) * (size_t)steps)};
    if (!forced || !bc.t) rc = 1;
    gp.max_tokens = steps;
    gp.n_force = steps;
    gp.force = forced;
    gp.ignore_eos = 1;
    const gem_gen_callbacks cb = {&bc, on_step_token, NULL, NULL, NULL};
    /* the JSON's prefill entries at depth and decode entries, written after
     * the loop (one depth's prompts and decode run together, so that one
     * filled context is kept at a time) */
    strbuf pjs = {0}, djs = {0};
    for (int di = 0; di < n_depths && !rc; di++) {
        const int D = depths[di];
        /* prompts at depth (llama-bench -p P -d D): the context filled to D
         * once and kept as an exact checkpoint; each run restores it and
         * times the next P tokens to their first generated token, and
         * decode at D starts from it too */
        gem_checkpoint *ck = NULL;
        if (D > 0) {
            gem_gen_params gp1 = gem_gen_params_default();
            gp1.max_tokens = 1;
            gem_session_reset(s);
            if (gem_session_sync(s, ids, (size_t)D, &err) < 0 || gem_session_generate(s, &gp1, NULL, &res, &err) ||
                !(ck = gem_session_save(s, &err)))
                rc = 1;
            for (int pi = 0; pi < n_prompts && !rc; pi++) {
                const int P = prompts[pi];
                for (int k = 0; k <= reps && !rc; k++) {
                    gem_session_reset(s); /* no turn checkpoint of the last run may serve this one */
                    gem_session_restore(s, ck);
                    if (gem_session_sync(s, ids, (size_t)(D + P), &err) < 0 ||
                        gem_session_generate(s, &gp1, NULL, &res, &err))
                        rc = 1;
                    else if (res.n_generated != 1)
                        rc = gem_err_set(&err, "a prompt of %d tokens at depth %d gave no first token", P, D) != 0;
                    else if (res.n_prompt - res.n_cached != P) /* each run evaluates exactly its P tokens */
                        rc = gem_err_set(&err, "a prompt of %d tokens at depth %d evaluated %ld", P, D,
                                         res.n_prompt - res.n_cached) != 0;
                    if (k > 0) samples[k - 1] = res.first_s;
                }
                if (rc) break;
                stats st = summarize(samples, reps);
                printf("prefill %6d tokens at depth %6d: %9.1f tok/s (median; p95 %.1f, min %.1f, max %.1f), %.3f s\n",
                       P, D, P / st.median, P / st.p95, P / st.max, P / st.min, st.median);
                sb_printf(&pjs, ",\n  {\"tokens\": %d, \"depth\": %d, \"tok_s\": %.2f, \"tok_s_p95\": %.2f, "
                                "\"ttft_s\": %.5f, \"spread\": [%.5f, %.5f]}",
                          P, D, P / st.median, P / st.p95, st.median, st.min, st.max);
            }
            if (rc) {
                gem_checkpoint_free(ck);
                break;
            }
        }
        for (long k = 0; k < steps; k++) forced[k] = ids[(D + k) % need];
        gem_session_reset(s);
        if (ck) gem_session_restore(s, ck); /* the prompts' fill, not again */
        gem_checkpoint_free(ck);
        if (gem_session_sync(s, ids, (size_t)(D > 0 ? D : 1), &err) < 0 ||
            gem_session_generate(s, &gp, &cb, &res, &err)) {
            rc = 1;
            break;
        }
        if (res.n_generated != steps) {
            gem_err_set(&err, "decode at depth %d generated %ld of %ld steps", D, res.n_generated, steps);
            rc = 1;
            break;
        }
        for (int k = 0; k <= reps; k++)
            if (k > 0) samples[k - 1] = (bc.t[(k + 1) * gen] - bc.t[k * gen]) / gen; /* run 0 is the warm-up */
        stats st = summarize(samples, reps);
        const double tps = 1.0 / st.median, gbs = wbytes / st.median / 1e9;
        if (di == 0) first_tps = tps;
        char frac[40] = "", frac_js[24] = "null";
        if (peak > 0) {
            snprintf(frac, sizeof frac, ", %.1f%% of peak", 100 * gbs / peak);
            snprintf(frac_js, sizeof frac_js, "%.4f", gbs / peak);
        }
        printf("decode at depth %6d: %8.2f tok/s (median of %d x %d steps; p95 %.2f, spread %.2f-%.2f), %.0f GB/s "
               "weights%s\n",
               D, tps, reps, gen, 1.0 / st.p95, 1.0 / st.max, 1.0 / st.min, gbs, frac);
        sb_printf(&djs, "%s\n  {\"depth\": %d, \"gen\": %d, \"tok_s\": %.3f, \"tok_s_p95\": %.3f, \"spread\": [%.3f, %.3f], "
                        "\"weight_gbs\": %.1f, \"roofline_fraction\": %s}",
                  di ? "," : "", D, gen, tps, 1.0 / st.p95, 1.0 / st.max, 1.0 / st.min, gbs, frac_js);
    }
    if (js) fprintf(js, "%s],\n \"decode\": [%s],\n \"parallel\": [", sb_cstr(&pjs), sb_cstr(&djs));
    sb_free(&pjs);
    sb_free(&djs);
    if (!rc && n_par) {
        const int D = depths[0];
        rc = bench_parallel(e, ids, need, D, par, n_par, gen, reps, first_tps, js, &err);
    }
    if (js) fprintf(js, "],\n \"speculative\": [");
    strbuf vjs = {0};
    if (!rc && (n_spec || gem_engine_mtp(e) || verify_cost))
        rc = bench_spec(s, e, ids, need, depths, n_depths, gen, reps, &mtp, spec_p, n_spec, verify_cost, js, &vjs, &err);
    if (js) fprintf(js, "],\n \"verify_cost\": [%s", sb_cstr(&vjs));
    sb_free(&vjs);
    if (js) fprintf(js, "],\n \"constrained\": [");
    if (!rc && grammar)
        rc = bench_grammar(s, ids, depths[0] > 0 ? depths[0] : 1, grammar, schema ? schema : "any JSON object", gen,
                           reps, js, &err);
    /* device memory on the GPU, peak resident set size on the CPU */
    const size_t dev = gem_engine_mem_used(e);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    const double rss = (double)ru.ru_maxrss * 1024.0;
    if (dev) printf("peak device memory: %.2f GiB\n", dev / 1073741824.0);
    printf("peak resident set: %.2f GiB\n", rss / 1073741824.0);
    if (js) {
        fprintf(js, "],\n \"peak_device_bytes\": %zu, \"peak_rss_bytes\": %.0f}\n", dev, rss);
        fclose(js);
    }
    if (rc) fprintf(stderr, "gem bench: error: %s\n", err.msg);
    gram_free(grammar);
    free(forced);
    free(bc.t);
    free(samples);
    free(ids);
    gem_session_free(s);
    gem_engine_close(e);
    return rc;
}
