/* The engine on a Qwen3.5 hybrid (model/model.h's qwen35 family), on the
 * qwen35-tiny profile (f32) on the CPU:
 *  - greedy generation through gem_session_generate equals a direct
 *    qwen35_run greedy loop (qwen35_eval and the host argmax), token for
 *    token;
 *  - prefix reuse across turns: a second turn whose prompt repeats the
 *    first turn's prompt but not its answer restarts from the turn
 *    checkpoint (the recurrent state cannot be rewound), keeps exactly the
 *    first prompt, and answers as a fresh session does; a turn that
 *    continues the live state keeps all of it; neither rewinds;
 *  - a parked session given to another answers as the original would;
 *  - two sessions decoding at once on two threads take turns step by step
 *    (no batched steps for this family) and each answers as alone;
 *  - refusals, with their messages: the CUDA backend (no Gated DeltaNet
 *    ops), --mtp, f16 KV caches, the replay drafter (no verification
 *    tiles), and a plan that does not fit the memory. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "engine/engine.h"
#include "model/qwen35.h"
#include "model/qwen35_run.h"
#include "synth_tiny.h"
#include "test.h"
#include "util/argmax.h"

#define CTX 256
#define NGEN 24

static char path[] = "/tmp/gem-q35eng-XXXXXX";

typedef struct {
    int32_t ids[128];
    int n;
} seen;

static void on_token(void *ctx, const gem_gen_token *t) {
    seen *w = ctx;
    if (w->n < 128) w->ids[w->n++] = t->id;
}

/* sync and a greedy answer of n tokens; returns what the sync kept (-1 on
 * failure) */
static long answer(gem_session *s, const int32_t *p, size_t np, int n, seen *w) {
    gem_err err = {{0}};
    gem_gen_params gp = gem_gen_params_default();
    gp.max_tokens = n;
    gp.ignore_eos = 1;
    gem_gen_callbacks cb = {w, on_token, NULL, NULL, NULL};
    w->n = 0;
    const long kept = gem_session_sync(s, p, np, &err);
    CHECKF(kept >= 0, "sync: %s", err.msg);
    gem_gen_result r;
    const int rc = kept >= 0 ? gem_session_generate(s, &gp, &cb, &r, &err) : -1;
    CHECKF(rc == 0, "generate: %s", err.msg);
    CHECK(w->n == n);
    return rc ? -1 : kept;
}

/* The reference: qwen35_run alone, the argmax of each step's logits. */
static int direct_greedy(const int32_t *p, int np, int n, int32_t *out) {
    gem_err err = {{0}};
    gguf_file *f = gguf_open(path, &err);
    qwen35_model *m = f ? qwen35_bind(f, &err) : NULL;
    backend_opts bo = {0};
    backend *b = m ? backend_create("cpu", &bo, &err) : NULL;
    qwen35_state *st = b ? qwen35_state_new(m, b, CTX, 0, 0, &err) : NULL;
    const uint32_t V = m ? m->profile->n_vocab : 0;
    float *logits = st ? malloc(V * sizeof *logits) : NULL;
    int rc = logits ? qwen35_eval(st, p, np, logits, 0, &err) : -1;
    for (int i = 0; !rc && i < n; i++) {
        out[i] = (int32_t)gem_argmax(logits, V);
        if (i + 1 < n) rc = qwen35_eval(st, &out[i], 1, logits, 0, &err);
    }
    CHECKF(rc == 0, "direct loop: %s", err.msg);
    free(logits);
    qwen35_state_free(st);
    if (b) b->destroy(b);
    qwen35_free(m);
    gguf_close(f);
    return rc;
}

static gem_engine *open_engine(int sessions, gem_err *err) {
    gem_engine_opts o = {0};
    o.model_path = path;
    o.n_ctx = CTX;
    o.threads = 2;
    o.sessions = sessions;
    return gem_engine_open(&o, err);
}

static void test_greedy(gem_engine *e, const int32_t *p, int np) {
    int32_t want[NGEN];
    if (direct_greedy(p, np, NGEN, want)) return;
    gem_err err = {{0}};
    gem_session *s = gem_session_new(e, &err);
    CHECKF(s != NULL, "%s", err.msg);
    if (!s) return;
    seen w;
    answer(s, p, (size_t)np, NGEN, &w);
    int same = w.n == NGEN;
    for (int i = 0; same && i < NGEN; i++) same = w.ids[i] == want[i];
    CHECKF(same, "the engine's greedy answer differs from qwen35_run's loop");
    /* the greedy answer is not one token repeated (the test could not tell
     * a stuck loop from a right one) */
    int varied = 0;
    for (int i = 1; i < NGEN; i++) varied |= w.ids[i] != w.ids[0];
    CHECK(varied);
    gem_session_free(s);
}

/* Turn 1: p1. Turn 2: p1 + tokens the model did not generate, so the live
 * state does not begin it; a recurrent state cannot rewind, so the turn
 * checkpoint at p1's end is what is kept. Turn 3 continues turn 2's live
 * state. Each answer equals a fresh session's. */
static void test_turns(gem_engine *e, const int32_t *p1, int n1) {
    gem_err err = {{0}};
    gem_session *s = gem_session_new(e, &err), *fresh = gem_session_new(e, &err);
    CHECKF(s && fresh, "%s", err.msg);
    if (!s || !fresh) {
        gem_session_free(s);
        gem_session_free(fresh);
        return;
    }
    seen a, b;
    CHECK(answer(s, p1, (size_t)n1, 8, &a) == 0);
    int32_t p2[160];
    memcpy(p2, p1, (size_t)n1 * sizeof *p1);
    int n2 = n1;
    for (int i = 0; i < 8; i++) p2[n2++] = (int32_t)((a.ids[i] + 7) % 512); /* not the answer */
    for (int i = 0; i < 5; i++) p2[n2++] = (int32_t)(100 + 3 * i);
    CHECK(gem_session_keeps(s, p2, (size_t)n2) == n1);
    CHECK(answer(s, p2, (size_t)n2, 8, &a) == n1);
    gem_session_reset(fresh);
    CHECK(answer(fresh, p2, (size_t)n2, 8, &b) == 0);
    CHECKF(!memcmp(a.ids, b.ids, sizeof(int32_t) * 8), "turn 2 from the checkpoint differs from a fresh session");
    /* turn 3 continues the live state (prompt + the answer but its last
     * token, which was never evaluated, + more) */
    int32_t p3[200];
    memcpy(p3, p2, (size_t)n2 * sizeof *p2);
    int n3 = n2;
    for (int i = 0; i < 8; i++) p3[n3++] = a.ids[i];
    for (int i = 0; i < 4; i++) p3[n3++] = (int32_t)(200 + i);
    CHECK(gem_session_keeps(s, p3, (size_t)n3) == n2 + 7);
    /* a prompt that leaves the live state a few tokens back: no rewind,
     * the checkpoint (turn 2's prompt end) instead */
    CHECK(gem_session_keeps(s, p3, (size_t)(n2 + 5)) == n2);

    /* park s (live state and turn checkpoint), unpark into a new session */
    gem_park *pk = gem_session_park(s, &err);
    CHECKF(pk != NULL, "park: %s", err.msg);
    CHECK(!pk || gem_park_keeps(pk, p3, (size_t)n3) == n2 + 7);
    gem_session *u = gem_session_new(e, &err);
    CHECKF(u != NULL, "%s", err.msg);
    seen c;
    if (pk && u) {
        CHECKF(!gem_session_unpark(u, pk, &err), "unpark: %s", err.msg);
        CHECK(answer(u, p3, (size_t)n3, 8, &c) == n2 + 7);
    }
    CHECK(answer(s, p3, (size_t)n3, 8, &a) == n2 + 7);
    gem_session_reset(fresh);
    CHECK(answer(fresh, p3, (size_t)n3, 8, &b) == 0);
    CHECKF(!memcmp(a.ids, b.ids, sizeof(int32_t) * 8), "turn 3 on the live state differs from a fresh session");
    CHECKF(u && pk && !memcmp(c.ids, b.ids, sizeof(int32_t) * 8), "the unparked session's turn 3 differs");
    gem_park_free(pk);
    gem_session_free(u);
    gem_session_free(s);
    gem_session_free(fresh);
}

typedef struct {
    gem_engine *e;
    const int32_t *p;
    int np;
    seen w;
    int rc;
} job;

static void *run_job(void *arg) {
    job *j = arg;
    gem_err err = {{0}};
    gem_session *s = gem_session_new(j->e, &err);
    j->rc = !s || answer(s, j->p, (size_t)j->np, NGEN, &j->w) < 0;
    gem_session_free(s);
    return NULL;
}

static void test_parallel(const int32_t *p, int np) {
    gem_err err = {{0}};
    gem_engine *e = open_engine(2, &err);
    CHECKF(e != NULL, "%s", err.msg);
    if (!e) return;
    int32_t q[64];
    memcpy(q, p, (size_t)np * sizeof *p);
    q[np - 1] = 300; /* a different prompt: a different answer */
    int32_t want[2][NGEN];
    direct_greedy(p, np, NGEN, want[0]);
    direct_greedy(q, np, NGEN, want[1]);
    job j[2] = {{e, p, np, {{0}, 0}, 0}, {e, q, np, {{0}, 0}, 0}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, run_job, &j[i]);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 2; i++)
        CHECKF(!j[i].rc && j[i].w.n == NGEN && !memcmp(j[i].w.ids, want[i], sizeof want[i]),
               "session %d decoding beside another differs from qwen35_run alone", i);
    long steps, rows;
    int rows_max;
    gem_engine_batch_stats(e, &steps, &rows, &rows_max);
    CHECK(rows_max == 1); /* no batched steps of sequences for qwen35 */
    gem_engine_close(e);
}

static void test_refusals(void) {
    gem_err err = {{0}};
    gem_engine_opts o = {0};
    o.model_path = path;
    o.backend = "metal"; /* a backend without the Gated DeltaNet ops: refused by the model */
    CHECK(gem_engine_open(&o, &err) == NULL);
    CHECKF(!strcmp(err.msg, "backend 'metal' cannot run qwen35-tiny (Qwen3.5, qwen35) yet: it has no Gated DeltaNet "
                            "ops (conv_silu, gated_delta, ...); use --backend cpu or cuda"),
           "%s", err.msg);
    o.backend = "cuda"; /* within its head dims only: tiny's attention heads are 64 wide */
    CHECK(gem_engine_open(&o, &err) == NULL);
    CHECKF(!strcmp(err.msg, "backend 'cuda' cannot run qwen35-tiny: its attention heads are 64 wide and CUDA "
                            "attention takes multiples of 128; use --backend cpu"),
           "%s", err.msg);
    o.backend = NULL;
    o.mtp_path = "data/models/mtp-default.gguf";
    CHECK(gem_engine_open(&o, &err) == NULL);
    CHECKF(!strcmp(err.msg, "--mtp: qwen35-tiny (qwen35) has no MTP drafter support yet: speculative decoding runs "
                            "on Gemma 4 models only"),
           "%s", err.msg);
    o.mtp_path = NULL;
    o.kv_type = GEMMA4_KV_F16;
    CHECK(gem_engine_open(&o, &err) == NULL);
    CHECKF(!strcmp(err.msg, "--kv-type f16: backend 'cpu' keeps its KV caches in f32 (f16 caches are a CUDA option)"),
           "%s", err.msg);
    o.kv_type = GEMMA4_KV_F32;
    o.mem_free = 4096;
    CHECK(gem_engine_open(&o, &err) == NULL);
    CHECK_ERR(err.msg, "does not fit");
    CHECK_ERR(err.msg, "recurrent state");
    /* the plan counts the recurrent state: 3 GDN layers of (3 x conv_dim
     * + n_v x d x d) floats, and 1 attention layer's f32 keys and values */
    o.mem_free = 0;
    o.n_ctx = 128;
    gem_engine *e = gem_engine_open(&o, &err);
    CHECKF(e != NULL, "%s", err.msg);
    if (e) {
        const qwen35_profile *p = qwen35_profile_find("qwen35-tiny");
        const uint64_t rec = 3ull * (3ull * qwen35_conv_dim(p) + (uint64_t)p->n_v_heads * p->d_state * p->d_state) * 4;
        const uint64_t kv = 2ull * 128 * p->n_head_kv * p->head_dim * 4;
        CHECK(gem_engine_plan(e)->state_bytes == rec + kv);
        CHECK(!strcmp(gem_engine_arch(e), "qwen35") && gem_engine_chat_format(e) == CHAT_FORMAT_QWEN35);
        CHECK(gem_engine_n_vocab(e) == 512 && gem_engine_mtp(e) == NULL);
        gem_session *s = gem_session_new(e, &err);
        const int32_t ids[3] = {1, 2, 3};
        CHECK(s && gem_session_set_replay(s, ids, 3, 1.0, 1, &err) == -1);
        CHECKF(!strcmp(err.msg, "speculative decoding: qwen35-tiny (qwen35) has no exact verification tiles (a "
                                "rejected draft cannot be dropped from its state)"),
               "%s", err.msg);
        gem_session_free(s);
        gem_engine_close(e);
    }
}

int main(void) {
    gem_err err = {{0}};
    CHECKF(!test_tmp_file(path), "no temporary file");
    CHECKF(!test_synth_qwen35_tiny(path, 5, 2, &err), "%s", err.msg);
    gem_engine *e = open_engine(1, &err);
    CHECKF(e != NULL, "%s", err.msg);
    if (e) {
        /* a prompt of more than one 64-token tile, so prefill's tiles
         * before the last (no head) are covered */
        int32_t p[100];
        uint64_t r = 12345;
        for (int i = 0; i < 100; i++) p[i] = (int32_t)(((r = r * 6364136223846793005ull + 1) >> 33) % 512);
        test_greedy(e, p, 100);
        test_turns(e, p, 70);
        gem_engine_close(e);
        test_parallel(p, 40);
    }
    test_refusals();
    unlink(path);
    return test_report("test_qwen35_engine");
}
