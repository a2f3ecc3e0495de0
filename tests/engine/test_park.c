/* Parked sessions (engine.h gem_session_park / gem_session_unpark) on the
 * tiny profile (window 32; the CPU's rings keep 8 positions beyond it):
 *  - a parked state given to another session continues exactly: the
 *    prompt kept is what gem_park_keeps predicted, and the answer (ids and
 *    last logits) is a fresh session's, bit for bit on the CPU, whether the
 *    parked live state is continued, rewound a few tokens, or its turn
 *    checkpoint is used;
 *  - the turn checkpoint is parked only where the live state's rings do
 *    not reach it (the park is then larger); parking leaves the session
 *    as it was; a park of a restored session (its checkpoint in host
 *    memory) parks that checkpoint again;
 *  - an unparked session forgets its own earlier checkpoint; a park is
 *    copied, so two sessions can continue it;
 *  - a session holding nothing is refused. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "model/gemma4.h"
#include "synth_tiny.h"
#include "test.h"

#define V GEMMA4_N_VOCAB

typedef struct {
    int32_t ids[64];
    int n;
    float *logits;
} seen;

static void on_token(void *ctx, const gem_gen_token *t) {
    seen *w = ctx;
    if (!t->end && w->n < 64) w->ids[w->n++] = t->id;
    if (t->logits) memcpy(w->logits, t->logits, V * sizeof(float));
}

/* sync and a greedy answer of n tokens (the last step's logits in w);
 * returns what the sync kept */
static long answer(gem_session *s, const int32_t *p, size_t np, int n, seen *w) {
    gem_err err = {{0}};
    gem_gen_params gp = gem_gen_params_default();
    gp.max_tokens = n;
    gp.ignore_eos = 1;
    gp.want_logits = 1;
    gem_gen_callbacks cb = {w, on_token, NULL, NULL, NULL};
    w->n = 0;
    const long kept = gem_session_sync(s, p, np, &err);
    CHECKF(kept >= 0, "sync: %s", err.msg);
    gem_gen_result r;
    CHECKF(kept >= 0 && !gem_session_generate(s, &gp, &cb, &r, &err), "generate: %s", err.msg);
    CHECK(w->n == n);
    return kept;
}

/* The answer to p after unparking pk into s against a fresh session's. */
static void same_as_fresh(const char *what, gem_session *s, gem_park *pk, gem_session *fresh, const int32_t *p,
                          size_t np, long want_kept) {
    seen a = {{0}, 0, malloc(V * sizeof(float))}, b = {{0}, 0, malloc(V * sizeof(float))};
    const long predicted = gem_park_keeps(pk, p, np);
    CHECKF(predicted == want_kept, "%s: gem_park_keeps %ld, want %ld", what, predicted, want_kept);
    gem_err err = {{0}};
    CHECKF(!gem_session_unpark(s, pk, &err), "%s: unpark: %s", what, err.msg);
    gem_park_free(pk);
    CHECKF(gem_session_keeps(s, p, np) == predicted, "%s: the unparked session keeps %ld, the park said %ld", what,
           gem_session_keeps(s, p, np), predicted);
    const long kept = answer(s, p, np, 6, &a);
    CHECKF(kept == predicted, "%s: kept %ld, predicted %ld", what, kept, predicted);
    gem_session_reset(fresh);
    CHECK(answer(fresh, p, np, 6, &b) == 0);
    CHECKF(!memcmp(a.ids, b.ids, sizeof a.ids), "%s: ids differ from a fresh session's", what);
    CHECKF(!memcmp(a.logits, b.logits, V * sizeof(float)), "%s: logits differ from a fresh session's", what);
    free(a.logits);
    free(b.logits);
}

int main(void) {
    char path[] = "/tmp/gem-park-XXXXXX";
    if (test_tmp_file(path)) return 1;
    gem_err err = {{0}};
    CHECKF(!test_synth_tiny(path, 7, 0, &err), "%s", err.msg);
    gem_engine_opts eo = {0};
    eo.model_path = path;
    eo.n_ctx = 256;
    eo.tile = 16;
    const char *be = getenv("GEM_TEST_BACKEND"); /* cuda: tests/cuda/run.sh (host parks of device caches) */
    if (be && *be) eo.backend = be;
    gem_engine *e = gem_engine_open(&eo, &err);
    CHECKF(e != NULL, "%s", err.msg);
    if (!e) return test_report("test_park");
    gem_session *a = gem_session_new(e, &err), *b = gem_session_new(e, &err), *f = gem_session_new(e, &err);
    CHECK(a && b && f);
    const tok *tk = gem_engine_tok(e);
    const int32_t turn = tok_find(tk, "<|turn>", 7);

    int32_t p1[60], q[120], other[40];
    for (int i = 0; i < 60; i++) p1[i] = (int32_t)((i * 7919 + 13) % 200000) + 1000;
    p1[0] = tok_bos(tk);
    p1[20] = turn, p1[45] = turn; /* the turn checkpoint stands at 45 */
    for (int i = 0; i < 40; i++) other[i] = (int32_t)((i * 104729 + 5) % 200000) + 1000;
    other[0] = tok_bos(tk);
    seen w = {{0}, 0, malloc(V * sizeof(float))};

    /* nothing to park */
    CHECK(gem_session_park(a, &err) == NULL && strstr(err.msg, "nothing"));

    /* conversation 1 on a: 60 prompt tokens, 8 generated (67 held) */
    answer(a, p1, 60, 8, &w);
    size_t held;
    const int32_t *t = gem_session_tokens(a, &held);
    CHECK(held == 67);
    int32_t held1[67];
    memcpy(held1, t, sizeof held1);
    gem_park *pk = gem_session_park(a, &err);
    CHECKF(pk != NULL, "park: %s", err.msg);
    size_t n_pt;
    const int32_t *pt = gem_park_tokens(pk, &n_pt);
    CHECK(n_pt == 67 && !memcmp(pt, held1, sizeof held1));
    /* the checkpoint at 45 is below what the live rings rewind to (top 66,
     * 40 slots: 58), so it was parked too; the session is unchanged */
    const size_t both = gem_park_bytes(pk);
    memcpy(q, p1, 45 * sizeof(int32_t));
    for (int i = 45; i < 70; i++) q[i] = p1[i % 60] + 5;
    CHECK(gem_session_keeps(a, q, 70) == 45);
    CHECK(gem_park_keeps(pk, q, 70) == 45);
    memcpy(q, held1, sizeof held1);
    for (int i = 67; i < 80; i++) q[i] = p1[i - 60] + 9;
    CHECK(gem_session_keeps(a, q, 80) == 67);

    /* a serves another conversation; the parked one continues on b */
    answer(a, other, 40, 4, &w);
    same_as_fresh("live continuation", b, pk, f, q, 80, 67);

    /* rewound: the parked tokens' last 3 re-rendered differently */
    answer(a, p1, 60, 8, &w); /* a has conversation 1 again (its checkpoint at 45 too) */
    pk = gem_session_park(a, &err);
    CHECK(pk != NULL);
    memcpy(q, held1, 64 * sizeof(int32_t));
    for (int i = 64; i < 80; i++) q[i] = p1[i - 60] + 11;
    answer(b, other, 40, 4, &w); /* b's own state and checkpoint: another conversation's */
    same_as_fresh("rewound parked state", b, pk, f, q, 80, 64);
    /* b's own checkpoint (other's, at its prompt's end) was forgotten by the unpark */
    CHECK(gem_session_keeps(b, other, 40) == 0);

    /* the turn checkpoint: the answer re-rendered differently from the
     * turn start at 45 on */
    gem_session_reset(a);
    answer(a, p1, 60, 8, &w);
    pk = gem_session_park(a, &err);
    CHECK(pk != NULL);
    memcpy(q, p1, 45 * sizeof(int32_t));
    for (int i = 45; i < 90; i++) q[i] = p1[i % 60] + 13;
    same_as_fresh("parked turn checkpoint", b, pk, f, q, 90, 45);
    /* b's checkpoint is the unparked one (host memory): parked again, it
     * serves another session */
    gem_park *again = gem_session_park(b, &err);
    CHECK(again != NULL);
    memcpy(q, p1, 45 * sizeof(int32_t));
    for (int i = 45; i < 90; i++) q[i] = p1[i % 60] + 29;
    same_as_fresh("a restored checkpoint parked again", a, again, f, q, 90, 45);
    /* b's own checkpoint serves again, and its next checkpoint replaces it
     * on the backend */
    for (int i = 0; i < 45; i++) q[i] = p1[i];
    for (int i = 45; i < 90; i++) q[i] = p1[i % 60] + 17;
    CHECK(gem_session_keeps(b, q, 90) == 45);
    answer(b, q, 90, 4, &w);
    /* q's first 60: beyond the live rings' reach (93 held: from 84), the
     * new checkpoint at 45 */
    CHECK(gem_session_keeps(b, q, 60) == 45);

    /* no turn start: the checkpoint stands at the prompt's end (40), which
     * the live state's rings reach (43 held: from 34 on): not parked */
    gem_session_reset(a);
    answer(a, other, 40, 4, &w);
    pk = gem_session_park(a, &err);
    CHECK(pk != NULL);
    const size_t live_only = gem_park_bytes(pk);
    CHECKF(live_only < both, "a park without the checkpoint (%zu bytes) is smaller than one with it (%zu)", live_only,
           both);
    memcpy(q, other, 40 * sizeof(int32_t));
    for (int i = 40; i < 60; i++) q[i] = p1[i] + 19;
    same_as_fresh("checkpoint covered by the live state", b, pk, f, q, 60, 40);

    /* a park outlives its session's later work and its session */
    answer(a, p1, 60, 8, &w);
    pk = gem_session_park(a, &err);
    gem_session_free(a);
    memcpy(q, held1, sizeof held1);
    for (int i = 67; i < 75; i++) q[i] = p1[i - 60] + 23;
    same_as_fresh("park of a freed session", b, pk, f, q, 75, 67);

    /* a park is copied: given to two sessions, both continue it alike */
    answer(b, p1, 60, 8, &w);
    gem_park *twice = gem_session_park(b, &err);
    CHECK(twice != NULL);
    answer(b, other, 40, 4, &w);
    gem_session *c = gem_session_new(e, &err);
    CHECK(c && !gem_session_unpark(b, twice, &err) && !gem_session_unpark(c, twice, &err));
    gem_park_free(twice);
    memcpy(q, held1, sizeof held1);
    for (int i = 67; i < 77; i++) q[i] = p1[i - 60] + 31;
    seen w2 = {{0}, 0, malloc(V * sizeof(float))};
    CHECK(answer(b, q, 77, 5, &w) == 67 && answer(c, q, 77, 5, &w2) == 67);
    CHECK(!memcmp(w.ids, w2.ids, 5 * sizeof(int32_t)) && !memcmp(w.logits, w2.logits, V * sizeof(float)));
    free(w2.logits);
    gem_session_free(c);

    /* freed unused */
    answer(b, p1, 60, 2, &w);
    gem_park_free(gem_session_park(b, &err));

    free(w.logits);
    gem_session_free(b);
    gem_session_free(f);
    gem_engine_close(e);
    remove(path);
    return test_report("test_park");
}
