/* Parallel sessions of one engine (engine.h): generations on different
 * threads share the backend, and their one-token steps run as batched
 * steps (gemma4_step_seqs). What must hold:
 *  - each answer is token for token the one its prompt gets alone, greedy
 *    and sampled, whatever else runs beside it (more sessions than a batch
 *    carries, staggered starts, stop strings and limits ending some early);
 *  - batching happens (the engine's statistics count batched rows), and
 *    with batch_rows 1 the sessions still take turns correctly;
 *  - a batched step leaves every state bitwise as its own one-token step
 *    does (logits, argmax), at positions past a sliding window;
 *  - a new generation's prompt gets the gate after a few batched steps of
 *    the decoding ones, not after they end;
 *  - on the trained demo model with its MTP drafter, concurrent answers
 *    equal the speculative answer alone (rounds run only while a
 *    generation decodes alone).
 * GEM_TEST_BACKEND=cuda runs the same checks on the GPU (tests/cuda/run.sh):
 * the same prompt tiles on both sides, so equality is bit for bit there too. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
#include "model/gemma4.h"
#include "model/gemma4_run.h"
#include "synth_tiny.h"
#include "test.h"

#define MAXG 64
#define NJ 18 /* more than a batch carries (BE_EXACT_ROWS) */

/* The tiny profile in q8_0 (the 262144-token head in f32 would make every
 * step read 256 MB): the quantized paths are row-exact too (backend.h). */
static int synth_tiny_q8(const char *path, uint64_t seed, gem_err *err) {
    gemma4_synth_opts so = {0};
    so.profile = gemma4_profile_find("gemma4-tiny");
    so.type = QT_Q8_0;
    so.embd_type = QT_Q8_0;
    so.seed = seed;
    so.vocab_path = "data/vocab/gemma-4.gguf";
    so.out_path = path;
    return gemma4_synth(&so, err);
}

static const char *backend_name(void) {
    const char *b = getenv("GEM_TEST_BACKEND");
    return b && *b ? b : "cpu";
}

typedef struct {
    gem_session *s;
    int32_t prompt[160];
    size_t n_prompt;
    gem_gen_params p;
    const char *stop;
    size_t stop_len;
    int delay_us;
    /* out */
    int32_t out[MAXG + 1];
    int n_out;
    int rc, finish;
    char err[256];
} job;

static void on_token(void *ctx, const gem_gen_token *t) {
    job *j = ctx;
    if (j->n_out <= MAXG) j->out[j->n_out++] = t->id;
}

static int on_text(void *ctx, const char *p, size_t n) {
    (void)ctx, (void)p, (void)n;
    return 0; /* text is produced so stop strings apply */
}

static void *run_job(void *arg) {
    job *j = arg;
    if (j->delay_us) usleep((useconds_t)j->delay_us);
    gem_err err = {{0}};
    j->n_out = 0;
    j->rc = -1;
    gem_gen_params p = j->p;
    if (j->stop) {
        p.stop = &j->stop;
        p.stop_len = &j->stop_len;
        p.n_stop = 1;
    }
    if (gem_session_sync(j->s, j->prompt, j->n_prompt, &err) < 0) {
        snprintf(j->err, sizeof j->err, "%s", err.msg);
        return NULL;
    }
    gem_gen_callbacks cb = {j, on_token, on_text, NULL, NULL};
    gem_gen_result r;
    j->rc = gem_session_generate(j->s, &p, &cb, &r, &err);
    j->finish = (int)r.finish;
    if (j->rc) snprintf(j->err, sizeof j->err, "%s", err.msg);
    return NULL;
}

/* The jobs' prompts and parameters: lengths around and past the tiny
 * profile's window, greedy and sampled, some ended early. */
static void make_jobs(job *js, int n, int sampled, int vocab_lo, int vocab_span, int max_tokens) {
    for (int i = 0; i < n; i++) {
        job *j = &js[i];
        memset(j, 0, sizeof *j);
        j->n_prompt = (size_t)(3 + (i * 37) % 150);
        j->prompt[0] = 2;
        for (size_t t = 1; t < j->n_prompt; t++)
            j->prompt[t] = (int32_t)(vocab_lo + (int)((t * 7919 + (size_t)i * 104729 + 13) % (size_t)vocab_span));
        j->p = gem_gen_params_default();
        j->p.max_tokens = max_tokens - (i % 4) * (max_tokens / 6);
        j->p.ignore_eos = i % 3 != 0;
        if (sampled && i % 2) { /* top-k: drawn from the backend's k largest (a whole
                                 * vocabulary's draw on the host is slow here) */
            j->p.sampling.temp = 0.9f;
            j->p.sampling.top_k = i % 4 == 1 ? 40 : 64;
            j->p.sampling.top_p = 0.95f;
            j->p.sampling.seed = 1000 + (uint64_t)i;
        }
        j->p.no_checkpoint = i % 5 == 0;
    }
}

/* Each job alone on one session, in order: the reference answers. */
static int run_alone(gem_engine *e, job *js, int n, job *ref) {
    gem_err err = {{0}};
    gem_session *s = gem_session_new(e, &err);
    CHECKF(s != NULL, "%s", err.msg);
    if (!s) return -1;
    for (int i = 0; i < n; i++) {
        ref[i] = js[i];
        ref[i].s = s;
        gem_session_reset(s);
        run_job(&ref[i]);
        CHECKF(ref[i].rc == 0, "alone %d: %s", i, ref[i].err);
    }
    gem_session_free(s);
    return 0;
}

/* The jobs on n sessions at once; 0 when every answer equals ref's. */
static int run_together(gem_engine *e, job *js, int n, const job *ref, const char *what) {
    gem_err err = {{0}};
    pthread_t th[NJ];
    int ok = 1;
    for (int i = 0; i < n; i++) {
        js[i].s = gem_session_new(e, &err);
        CHECKF(js[i].s != NULL, "%s: session %d: %s", what, i, err.msg);
        if (!js[i].s) return -1;
    }
    for (int i = 0; i < n; i++) pthread_create(&th[i], NULL, run_job, &js[i]);
    for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
    int same = 0;
    for (int i = 0; i < n; i++) {
        CHECKF(js[i].rc == 0, "%s %d: %s", what, i, js[i].err);
        const int eq = js[i].n_out == ref[i].n_out && !memcmp(js[i].out, ref[i].out, (size_t)js[i].n_out * 4) &&
                       js[i].finish == ref[i].finish;
        if (!eq) {
            ok = 0;
            int at = 0;
            while (at < js[i].n_out && at < ref[i].n_out && js[i].out[at] == ref[i].out[at]) at++;
            fprintf(stderr, "%s: job %d: %d tokens (finish %d) vs %d alone (finish %d), first difference at %d\n", what,
                    i, js[i].n_out, js[i].finish, ref[i].n_out, ref[i].finish, at);
        }
        same += eq;
        gem_session_free(js[i].s);
        js[i].s = NULL;
    }
    printf("%s: %d of %d answers equal their answers alone\n", what, same, n);
    CHECKF(ok, "%s: answers differ from their answers alone", what);
    return ok ? 0 : -1;
}

static void test_tiny(const char *path) {
    gem_err err = {{0}};
    gem_engine_opts eo = {0};
    eo.model_path = path;
    eo.backend = backend_name();
    eo.n_ctx = 256;
    eo.tile = 32;
    gem_engine *e = gem_engine_open(&eo, &err);
    CHECKF(e != NULL, "%s", err.msg);
    if (!e) return;
    static job js[NJ], ref[NJ];
    long steps0, rows0, steps1, rows1;
    int rmax;
#ifdef GEM_TEST_ASAN
    const int modes = 1, gen = 12; /* memory safety on fewer cases: the sanitizers slow every step */
#else
    const int modes = 2, gen = 32;
#endif
    for (int sampled = 0; sampled < modes; sampled++) {
        make_jobs(js, NJ, sampled, 100, 262000, gen);
        if (run_alone(e, js, NJ, ref)) break;
        /* some distinct answers: a model that says one thing would prove little */
        int distinct = 0;
        for (int i = 1; i < NJ; i++) distinct += memcmp(ref[i].out, ref[0].out, 8 * sizeof(int32_t)) != 0;
        CHECKF(distinct >= NJ / 2, "only %d of %d reference answers differ from the first", distinct, NJ - 1);
        gem_engine_batch_stats(e, &steps0, &rows0, &rmax);
        run_together(e, js, NJ, ref, sampled ? "tiny, sampled, 18 at once" : "tiny, greedy, 18 at once");
        gem_engine_batch_stats(e, &steps1, &rows1, &rmax);
        const double mean = steps1 > steps0 ? (double)(rows1 - rows0) / (double)(steps1 - steps0) : 0;
        printf("  %ld steps carried %ld rows (mean %.2f, at most %d)\n", steps1 - steps0, rows1 - rows0, mean, rmax);
        /* 18 decoding at once: 3.5-7 rows seen here (2-core VM, loaded), 4.7-6.8 on an H100 */
        CHECKF(mean > 1.3, "batched steps carried %.2f rows on average", mean);
        CHECK(rmax == BE_EXACT_ROWS);
    }
    /* staggered starts, stop strings: sessions join and leave batches */
    make_jobs(js, 8, 1, 100, 262000, 40);
    for (int i = 0; i < 8; i++) {
        js[i].delay_us = 3000 * i;
        if (i % 3 == 2) js[i].stop = "a", js[i].stop_len = 1;
    }
    if (!run_alone(e, js, 8, ref)) run_together(e, js, 8, ref, "tiny, staggered, stop strings");
    gem_engine_close(e);

    /* no batching: the sessions take turns, step by step */
    eo.batch_rows = 1;
    e = gem_engine_open(&eo, &err);
    CHECKF(e != NULL, "%s", err.msg);
    if (e) {
        make_jobs(js, 6, 1, 100, 262000, 32);
        if (!run_alone(e, js, 6, ref)) run_together(e, js, 6, ref, "tiny, batch_rows 1");
        gem_engine_batch_stats(e, &steps1, &rows1, &rmax);
        CHECK(rmax == 1 && rows1 == steps1);
        gem_engine_close(e);
    }
}

/* A new generation's prompt while others decode: prompt chunks and
 * batched steps alternate (engine.c), so its first token comes after a
 * few batches, not after the decoding streams end. */
typedef struct {
    gem_session *s;
    int32_t prompt[128];
    size_t n_prompt;
    long max;
    int *ctr;          /* tokens so far (atomic) */
    const int *others; /* with n_others: the decoders' counters */
    int n_others, at_first; /* the others' most tokens at this one's first */
    int rc;
} nc_job;

static int nc_max(const int *c, int n) {
    int hi = 0;
    for (int i = 0; i < n; i++) {
        const int v = __atomic_load_n(&c[i], __ATOMIC_ACQUIRE);
        hi = v > hi ? v : hi;
    }
    return hi;
}

static void nc_on_token(void *ctx, const gem_gen_token *t) {
    nc_job *j = ctx;
    if (t->index == 0 && j->others) j->at_first = nc_max(j->others, j->n_others);
    __atomic_add_fetch(j->ctr, 1, __ATOMIC_RELEASE);
}

static void *nc_run(void *arg) {
    nc_job *j = arg;
    gem_err err = {{0}};
    j->rc = -1;
    gem_gen_params p = gem_gen_params_default();
    p.max_tokens = j->max;
    p.ignore_eos = 1;
    if (gem_session_sync(j->s, j->prompt, j->n_prompt, &err) < 0) return NULL;
    gem_gen_callbacks cb = {j, nc_on_token, NULL, NULL, NULL};
    gem_gen_result r;
    j->rc = gem_session_generate(j->s, &p, &cb, &r, &err);
    return NULL;
}

static void test_newcomer(const char *path) {
    gem_err err = {{0}};
    gem_engine_opts eo = {0};
    eo.model_path = path;
    eo.backend = backend_name();
    eo.n_ctx = 512;
    eo.tile = 32;
    gem_engine *e = gem_engine_open(&eo, &err);
    CHECKF(e != NULL, "%s", err.msg);
    if (!e) return;
    enum { ND = 12 };
    static nc_job d[ND + 1];
    static int ctr[ND + 1];
    pthread_t th[ND + 1];
    memset(d, 0, sizeof d);
    memset(ctr, 0, sizeof ctr);
    for (int i = 0; i <= ND; i++) {
        d[i].s = gem_session_new(e, &err);
        CHECKF(d[i].s != NULL, "%s", err.msg);
        if (!d[i].s) return;
        d[i].ctr = &ctr[i];
        d[i].n_prompt = i < ND ? 4 : 96; /* the newcomer's prompt: 3 chunks of the tile */
        d[i].prompt[0] = 2;
        for (size_t t = 1; t < d[i].n_prompt; t++) d[i].prompt[t] = (int32_t)(100 + (t * 7919 + (size_t)i * 31) % 200000);
        d[i].max = i < ND ? 300 : 4;
    }
    d[ND].others = ctr;
    d[ND].n_others = ND;
    for (int i = 0; i < ND; i++) pthread_create(&th[i], NULL, nc_run, &d[i]);
    /* every decoder under way, then the newcomer */
    for (int spin = 0; spin < 20000; spin++) {
        int lo = 1 << 30;
        for (int i = 0; i < ND; i++) {
            const int c = __atomic_load_n(&ctr[i], __ATOMIC_ACQUIRE);
            lo = c < lo ? c : lo;
        }
        if (lo >= 4) break;
        usleep(500);
    }
    const int base = nc_max(ctr, ND);
    pthread_create(&th[ND], NULL, nc_run, &d[ND]);
    for (int i = 0; i <= ND; i++) pthread_join(th[i], NULL);
    for (int i = 0; i <= ND; i++) CHECKF(d[i].rc == 0, "generation %d failed", i);
    const int waited = d[ND].at_first - base;
    printf("newcomer: its first token after %d more steps of %d decoding streams (of 300)\n", waited, ND);
    /* its prompt's 4 gate entries (3 chunks, the last token), each after
     * at most one batch: 4 steps seen on a 2-core VM; 16 leaves slack for
     * thread scheduling. Without the alternation (prompts yielding to any
     * pending step) the same run waited 31. */
    CHECKF(waited >= 0 && waited <= 16, "a new prompt waited %d decode steps for the gate", waited);
    for (int i = 0; i <= ND; i++) gem_session_free(d[i].s);
    gem_engine_close(e);
}

/* gemma4_step_seqs against one-token steps, bit for bit, on states past
 * the sliding window (their rings wrapped), for a KV type: every row
 * count twice in changing compositions (a backend that records batched
 * steps replays a row count's recording for other sequences), and once a
 * batch mixing states of two contexts (not one recording's shapes). */
static void test_step_seqs_kv(const char *path, gemma4_kv_type kt) {
    gem_err err = {{0}};
    gguf_file *f = gguf_open(path, &err);
    gemma4_model *m = f ? gemma4_bind(f, &err) : NULL;
    backend_opts bo = {0};
    backend *b = m ? backend_create(backend_name(), &bo, &err) : NULL;
    CHECKF(b != NULL, "%s", err.msg);
    gemma4_kv_plan plan, plan2;
    gemma4_core *c = b && !gemma4_kv_plan_make(m->profile, 256, kt, gemma4_ring_slack(b), 32, &plan, &err) &&
                             !gemma4_kv_plan_make(m->profile, 320, kt, gemma4_ring_slack(b), 32, &plan2, &err)
                         ? gemma4_core_new(m, b, &plan, 0, &err)
                         : NULL;
    CHECKF(c != NULL, "%s", err.msg);
    enum { NS = 5 };
    gemma4_state *a[NS] = {0}, *z[NS] = {0}; /* batched, and alone */
    float *la = malloc(GEMMA4_N_VOCAB * sizeof(float)), *lz = malloc(GEMMA4_N_VOCAB * sizeof(float));
    int ok = c && la && lz;
    for (int i = 0; ok && i < NS; i++) {
        /* the last state of another context: the mixed batches below */
        a[i] = gemma4_state_on(c, i == NS - 1 ? &plan2 : &plan, &err);
        z[i] = gemma4_state_on(c, i == NS - 1 ? &plan2 : &plan, &err);
        ok = a[i] && z[i];
        int32_t ids[120];
        const int n = 20 + 23 * i; /* 20..112: the later ones past the window */
        for (int t = 0; t < n; t++) ids[t] = (int32_t)(100 + (t * 31 + i * 977) % 261000);
        ok = ok && !gemma4_prefill(a[i], ids, n, &err) && !gemma4_prefill(z[i], ids, n, &err);
    }
    CHECKF(ok, "setup: %s", err.msg);
    int steps_equal = 0, rows = 0;
    for (int step = 0; ok && step < 2 * (NS - 1) + 1; step++) {
        /* 1..NS-1 rows of the first NS-1 states, twice in changing orders;
         * the last step all NS, the other context's state among them */
        const int n = step < 2 * (NS - 1) ? 1 + step % (NS - 1) : NS, k = n == NS ? NS : NS - 1;
        gemma4_state *ss[NS];
        int32_t ids[NS], best[NS];
        int who[NS];
        for (int i = 0; i < n; i++) {
            /* the second pass rotated one further: each row count replays
             * its recording for other sequences in other rows */
            who[i] = (i + step + step / (NS - 1)) % k;
            ss[i] = a[who[i]];
            ids[i] = (int32_t)(500 + step * 13 + i * 7);
        }
        ok = !gemma4_step_seqs(ss, ids, n, best, &err);
        CHECKF(ok, "step_seqs: %s", err.msg);
        for (int i = 0; ok && i < n; i++) {
            gemma4_state *alone = z[who[i]];
            int32_t nb = -1;
            ok = !gemma4_eval_greedy(alone, &ids[i], 1, &nb, &err) && !gemma4_logits(ss[i], la, &err) &&
                 !gemma4_logits(alone, lz, &err);
            rows++;
            steps_equal += ok && nb == best[i] && !memcmp(la, lz, GEMMA4_N_VOCAB * sizeof(float)) &&
                           gemma4_n_past(alone) == gemma4_n_past(ss[i]);
        }
    }
    printf("step_seqs (--kv-type %s): %d of %d rows bitwise equal to one-token steps\n", gemma4_kv_type_name(kt),
           steps_equal, rows);
    CHECK(ok && rows == 2 * (1 + 2 + 3 + 4) + NS && steps_equal == rows);
    /* refused: a repeated state, too many rows */
    if (ok) {
        gemma4_state *ss[2] = {a[0], a[0]};
        int32_t ids[2] = {5, 6};
        CHECK(gemma4_step_seqs(ss, ids, 2, NULL, &err) == -1);
        CHECK_ERR(err.msg, "one sequence twice");
        CHECK(gemma4_step_seqs(ss, ids, BE_EXACT_ROWS + 1, NULL, &err) == -1);
        CHECK_ERR(err.msg, "a batched step of 17 sequences");
    }
    for (int i = 0; i < NS; i++) {
        gemma4_state_free(a[i]);
        gemma4_state_free(z[i]);
    }
    free(la);
    free(lz);
    gemma4_core_free(c);
    if (b) b->destroy(b);
    gemma4_free(m);
    gguf_close(f);
}

/* Every KV type the backend keeps (f16 caches are a GPU option). */
static void test_step_seqs(const char *path) {
    gem_err err = {{0}};
    backend_opts bo = {0};
    backend *b = backend_create(backend_name(), &bo, &err);
    CHECKF(b != NULL, "%s", err.msg);
    const int f16 = b && b->kv_f16;
    if (b) b->destroy(b);
    test_step_seqs_kv(path, GEMMA4_KV_F32);
    if (f16) {
        test_step_seqs_kv(path, GEMMA4_KV_F16);
        test_step_seqs_kv(path, GEMMA4_KV_F16_FULL);
    }
}

/* The trained demo model with its drafter: concurrent answers equal the
 * speculative answers alone. */
static void test_demo_mtp(void) {
#ifdef GEM_TEST_ASAN
    printf("demo model: not under the sanitizers (test_spec covers the drafter there)\n");
    return;
#endif
    const char *model = "data/models/default.gguf", *mtp = "data/models/mtp-default.gguf";
    if (access(model, R_OK) || access(mtp, R_OK)) {
        printf("demo model or drafter missing (make data/models/default.gguf): skipped\n");
        return;
    }
    gem_err err = {{0}};
    gem_engine_opts eo = {0};
    eo.model_path = model;
    eo.mtp_path = mtp;
    eo.backend = backend_name();
    eo.n_ctx = 512;
    gem_engine *e = gem_engine_open(&eo, &err);
    CHECKF(e != NULL, "%s", err.msg);
    if (!e) return;
    static job js[6], ref[6];
    const tok *tk = gem_engine_tok(e);
    const char *texts[] = {"Once upon a time", "The king said", "In the morning the", "She walked to the",
                           "The old man", "A little bird"};
    for (int i = 0; i < 6; i++) {
        memset(&js[i], 0, sizeof js[i]);
        tok_ids ids = {0};
        CHECK(!tok_encode(tk, texts[i], strlen(texts[i]), 1, 0, &ids));
        js[i].n_prompt = ids.n < 160 ? ids.n : 160;
        memcpy(js[i].prompt, ids.v, js[i].n_prompt * sizeof(int32_t));
        tok_ids_free(&ids);
        js[i].p = gem_gen_params_default();
        js[i].p.max_tokens = 48;
        js[i].p.ignore_eos = 1;
    }
    if (!run_alone(e, js, 6, ref)) run_together(e, js, 6, ref, "demo model with its drafter, 6 at once");
    gem_engine_close(e);
}

int main(void) {
    char path[] = "/tmp/gem-par-XXXXXX";
    gem_err err = {{0}};
    if (!test_tmp_file(path)) {
        CHECKF(!synth_tiny_q8(path, 7, &err), "%s", err.msg);
        test_step_seqs(path);
        test_tiny(path);
        test_newcomer(path);
        unlink(path);
    }
    test_demo_mtp();
    return test_report("test_parallel");
}
