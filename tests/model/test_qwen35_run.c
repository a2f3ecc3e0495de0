/* The Qwen3.5 forward pass (model/qwen35_run.h) on the tiny profile:
 *   - prefill equals token-by-token decode: bit for bit in tiles of up to
 *     BE_EXACT_ROWS tokens (the CPU's rows are exact and such tiles run the
 *     recurrence), and within 1e-4 on the logits and the recurrent state in
 *     tiles of 64, where the Gated DeltaNet takes its chunked form (the
 *     op's own tolerance is 2e-4 on O(1) values, tests/backend/
 *     test_cpu_hybrid.c; observed about 1e-5 on logits of magnitude 4);
 *   - the scalar reference backend and the fast path agree within 1e-4;
 *   - a checkpoint round trip is exact: after save, more tokens, load and
 *     the same tokens again, logits and recurrent state are bit-identical;
 *   - a backend without the hybrid ops is refused, naming the op;
 *   - context overflow and out-of-vocabulary ids fail without evaluating. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "gguf/gguf.h"
#include "model/qwen35.h"
#include "model/qwen35_run.h"
#include "synth_tiny.h"
#include "test.h"

#define NTOK 150 /* three 64-token chunks, the last partial */

static double maxdiff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

/* Evaluates ids in calls of `step` tokens with every row's logits. */
static int run(const qwen35_model *m, backend *b, int tile, int step, const int32_t *ids, float *logits,
               float *state3) {
    gem_err err = {{0}};
    qwen35_state *s = qwen35_state_new(m, b, 256, tile, 0, &err);
    if (!s) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    const uint32_t V = m->profile->n_vocab;
    for (int t = 0; t < NTOK; t += step) {
        const int k = NTOK - t < step ? NTOK - t : step;
        if (qwen35_eval(s, ids + t, k, logits + (size_t)t * V, 1, &err)) {
            fprintf(stderr, "%s\n", err.msg);
            qwen35_state_free(s);
            return -1;
        }
    }
    /* layer 2's recurrent state (the last GDN layer before attention) */
    int rc = qwen35_recurrent_read(s, 2, state3, state3 + 3 * qwen35_conv_dim(m->profile));
    qwen35_state_free(s);
    return rc;
}

int main(void) {
    char path[] = "/tmp/gem-q35run-XXXXXX";
    test_tmp_file(path);
    gem_err err = {{0}};
    CHECKF(!test_synth_qwen35_tiny(path, 11, 2, &err), "%s", err.msg);
    gguf_file *f = gguf_open(path, &err);
    qwen35_model *m = f ? qwen35_bind(f, &err) : NULL;
    CHECKF(m != NULL, "%s", err.msg);
    backend_opts ro = {0}, fo = {0};
    ro.reference = 1;
    fo.threads = 2;
    backend *ref = backend_create("cpu", &ro, &err), *fast = backend_create("cpu", &fo, &err);
    CHECKF(ref && fast, "%s", err.msg);
    if (!m || !ref || !fast) return test_report("test_qwen35_run");
    const qwen35_profile *p = m->profile;
    const size_t V = p->n_vocab, NL = (size_t)NTOK * V;
    const size_t NS = 3 * (size_t)qwen35_conv_dim(p) + (size_t)p->n_v_heads * p->d_state * p->d_state;
    int32_t ids[NTOK];
    uint64_t r = 7;
    for (int i = 0; i < NTOK; i++) ids[i] = (int32_t)((r = r * 6364136223846793005ull + 1) >> 33) % (int32_t)V;

    float *tok = malloc(NL * 4), *t16 = malloc(NL * 4), *t64 = malloc(NL * 4), *rl = malloc(NL * 4);
    float *s_tok = malloc(NS * 4), *s16 = malloc(NS * 4), *s64 = malloc(NS * 4), *sr = malloc(NS * 4);
    CHECK(!run(m, fast, 64, 1, ids, tok, s_tok));
    CHECK(!run(m, fast, BE_EXACT_ROWS, NTOK, ids, t16, s16));
    CHECK(!run(m, fast, 64, NTOK, ids, t64, s64));
    CHECK(!run(m, ref, 64, NTOK, ids, rl, sr));
    CHECKF(!memcmp(tok, t16, NL * 4) && !memcmp(s_tok, s16, NS * 4),
           "tiles of %d differ from token-by-token decode: logits %g state %g", BE_EXACT_ROWS, maxdiff(tok, t16, NL),
           maxdiff(s_tok, s16, NS));
    const double d64 = maxdiff(tok, t64, NL), ds64 = maxdiff(s_tok, s64, NS);
    CHECKF(d64 < 1e-4 && ds64 < 1e-4, "chunked prefill vs decode: logits %g state %g", d64, ds64);
    const double dr = maxdiff(rl, t64, NL), dsr = maxdiff(sr, s64, NS);
    CHECKF(dr < 1e-4 && dsr < 1e-4, "cpu-ref vs cpu: logits %g state %g", dr, dsr);
    double mag = 0;
    for (size_t i = 0; i < NL; i++) mag = fmax(mag, fabs(tok[i]));
    CHECKF(mag > 0.05, "logits all near zero (%g): the test would prove nothing", mag);
    printf("prefill(64) vs decode: logits %.3g state %.3g; cpu-ref vs cpu: logits %.3g state %.3g (max |logit| %.3g)\n",
           d64, ds64, dr, dsr, mag);

    /* checkpoints */
    qwen35_state *s = qwen35_state_new(m, fast, 256, 64, 0, &err);
    CHECKF(s != NULL, "%s", err.msg);
    if (s) {
        qwen35_snap *snap = NULL;
        float *a = malloc(30 * V * 4), *b = malloc(30 * V * 4), *sa = malloc(NS * 4), *sb = malloc(NS * 4);
        float *la = malloc(V * 4), *lb = malloc(V * 4);
        CHECK(!qwen35_eval(s, ids, 70, la, 0, &err));
        CHECK(!qwen35_snap_save(s, &snap, &err));
        CHECK(!qwen35_eval(s, ids + 70, 30, a, 1, &err));
        qwen35_recurrent_read(s, 0, sa, sa + 3 * qwen35_conv_dim(p));
        qwen35_reset(s);
        CHECK(!qwen35_eval(s, ids + 100, 20, NULL, 0, &err)); /* something else in between */
        qwen35_snap_load(s, snap);
        CHECK(qwen35_n_past(s) == 70 && qwen35_snap_n_past(snap) == 70);
        CHECK(!qwen35_eval(s, ids + 70, 30, b, 1, &err));
        qwen35_recurrent_read(s, 0, sb, sb + 3 * qwen35_conv_dim(p));
        CHECKF(!memcmp(a, b, 30 * V * 4), "logits after a checkpoint load differ: %g", maxdiff(a, b, 30 * V));
        CHECK(!memcmp(sa, sb, NS * 4));
        /* the same tokens match the straight run's rows too (decode steps
         * of one sequence: tile 64 here, chunked within 1e-4) */
        CHECKF(maxdiff(b, tok + 70 * V, 30 * V) < 1e-4, "%g", maxdiff(b, tok + 70 * V, 30 * V));
        /* a loaded snapshot also brings back its logits: evaluating after
         * load continues from position 70 */
        qwen35_snap_load(s, snap);
        CHECK(!qwen35_eval(s, ids + 70, 1, lb, 0, &err));
        qwen35_snap_load(s, snap);
        CHECK(!qwen35_eval(s, ids + 70, 1, la, 0, &err));
        CHECK(!memcmp(lb, la, V * 4));
        CHECKF(maxdiff(lb, b, V) < 1e-4, "%g", maxdiff(lb, b, V)); /* b's row came from a chunked tile */
        /* errors leave the state alone */
        CHECK(qwen35_eval(s, ids, 256, NULL, 0, &err) != 0);
        CHECK_ERR(err.msg, "context full");
        int32_t bad = (int32_t)V;
        CHECK(qwen35_eval(s, &bad, 1, NULL, 0, &err) != 0);
        CHECK_ERR(err.msg, "outside the vocabulary");
        CHECK(qwen35_n_past(s) == 71);
        qwen35_snap_free(snap);
        qwen35_state_free(s);
        free(a), free(b), free(sa), free(sb), free(la), free(lb);
    }

    /* a backend lacking an op is refused by name */
    backend lacking = *fast;
    lacking.gated_delta = NULL;
    CHECK(qwen35_state_new(m, &lacking, 16, 4, 0, &err) == NULL);
    CHECK_ERR(err.msg, "no 'gated_delta' op");
    /* f16 caches only where the backend has them (the CPU's are f32) */
    CHECK(qwen35_state_new(m, fast, 16, 4, 1, &err) == NULL);
    CHECK_ERR(err.msg, "f16 KV caches: backend 'cpu' keeps its caches in f32");

    /* the plan's cache bytes: 16 attention layers of the 27B, 4 kv heads
     * of 256, keys and values, 4 bytes an entry (2 with f16) */
    {
        qwen35_mem m32, m16;
        const qwen35_profile *p27 = qwen35_profile_find("qwen35-27b");
        qwen35_plan(p27, 131072, 64, 0, &m32);
        qwen35_plan(p27, 131072, 64, 1, &m16);
        CHECK(m32.kv_bytes == 16ull * 2 * 131072 * 4 * 256 * 4);
        CHECK(m16.kv_bytes == 16ull * 2 * 131072 * 4 * 256 * 2);
        CHECK(m16.recurrent_bytes == m32.recurrent_bytes && m16.recurrent_bytes > 0);
        CHECK(m16.checkpoint_bytes == m32.checkpoint_bytes - m32.kv_bytes / 2);
    }

    free(tok), free(t16), free(t64), free(rl), free(s_tok), free(s16), free(s64), free(sr);
    ref->destroy(ref);
    fast->destroy(fast);
    qwen35_free(m);
    gguf_close(f);
    remove(path);
    return test_report("test_qwen35_run");
}
