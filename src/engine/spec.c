/* Speculative decoding's pieces below the generation loop (engine_impl.h):
 * the session's drafter (the engine's MTP model, or the replay test
 * drafter), the verification tile and the rollback. The round itself (how
 * many to draft, acceptance, emission) is generate.c's.
 *
 * Invariant: after spec_keep the session is exactly what plain decoding
 * of the kept tokens would have left (history, positions, caches, the last
 * token's logits and hidden state): the target's rows are row-exact
 * (backend.h) and its sliding rings keep SPEC_ROWS slots beyond the
 * window (gemma4_spec_init, behind model_spec_init). Models without
 * exact verification tiles (MODEL_CAP_SPEC) get no drafter. */
#include <stdlib.h>
#include <string.h>

#include "engine/engine_impl.h"
#include "util/rng.h"

int spec_session_init(gem_session *s, gem_err *err) {
    if (!model_mtp_name(s->e->model)) return 0;
    if (model_spec_init(s->st, SPEC_ROWS, err)) return -1;
    /* the drafters share one copy of its weights (made under the gate:
     * gem_session_new) */
    if (!(s->mtp = model_drafter_new(s->st, err))) return -1;
    return 0;
}

void spec_session_free(gem_session *s) {
    model_drafter_free(s->mtp);
    s->mtp = NULL;
    free(s->replay);
    s->replay = NULL;
    s->n_replay = 0;
}

int spec_has_drafter(const gem_session *s) { return s->mtp || s->n_replay; }

int gem_session_set_replay(gem_session *s, const int32_t *ids, size_t n, double p_right, uint64_t seed,
                           gem_err *err) {
    free(s->replay);
    s->replay = NULL;
    s->n_replay = 0;
    if (n == 0) return 0;
    if (!(p_right >= 0 && p_right <= 1)) return gem_err_set(err, "replay drafter: p_right %g is not in [0, 1]", p_right);
    if (model_spec_init(s->st, SPEC_ROWS, err)) return -1;
    if (!(s->replay = malloc(n * sizeof *ids))) return gem_err_set(err, "out of memory");
    memcpy(s->replay, ids, n * sizeof *ids);
    s->n_replay = n;
    s->replay_p = p_right;
    s->replay_rng = seed;
    return 0;
}

/* The replay drafter: the expected token, or on a miss the next id. */
static int replay_draft(gem_session *s, int m, int32_t *out) {
    const size_t pos = s->n_tokens; /* the root's position; drafts follow it */
    int k = 0;
    for (; k < m && pos + 1 + (size_t)k < s->n_replay; k++) {
        const int32_t want = s->replay[pos + 1 + (size_t)k];
        const double u = (double)(rng_splitmix64(&s->replay_rng) >> 11) * (1.0 / 9007199254740992.0);
        out[k] = u < s->replay_p ? want : (int32_t)((uint32_t)(want + 1) % s->e->n_vocab);
    }
    return k;
}

int spec_draft(gem_session *s, int32_t id, int m, float p_min, float p_prod, int32_t *out, gem_err *err) {
    if (m <= 0) return 0;
    if (m > model_spec_rows(s->st) - 1) m = model_spec_rows(s->st) - 1;
    if (s->n_replay) return replay_draft(s, m, out);
    if (!s->mtp) return 0;
    const int want_p = p_min > 0 || p_prod > 0;
    double run = 1; /* the product of the proposals' probabilities so far */
    int k = 0;
    for (int32_t prev = id; k < m; k++) {
        float p = 1;
        if (model_draft_step(s->mtp, prev, k == 0, &out[k], want_p ? &p : NULL, err)) return -1;
        prev = out[k];
        run *= p;
        /* an unsure drafter's next proposals are rarely accepted: stop when
         * this proposal's probability, or the running product (for a
         * calibrated drafter the chance that every proposal so far is
         * right), falls below its bound (the proposal itself is still
         * verified) */
        if (p < p_min || run < p_prod) {
            k++;
            break;
        }
    }
    return k;
}

int spec_verify(gem_session *s, const int32_t *ids, int n, int32_t *best, float *logits, gem_err *err) {
    s->synced = 0;
    s->logits_valid = s->logits_dev = 0;
    if (model_verify(s->st, ids, n, best, logits, err)) return -1;
    return session_remember(s, ids, n, err);
}

void spec_keep(gem_session *s, int n, int keep) {
    model_spec_keep(s->st, keep);
    s->n_tokens -= (size_t)(n - keep);
    s->logits_dev = 1; /* the kept row's logits are the backend's last */
    s->logits_valid = 0;
}
