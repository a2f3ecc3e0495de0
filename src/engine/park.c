/* Parked sessions (engine.h gem_session_park): a session's reusable state
 * copied into host memory, to be given back to any session of the engine
 * later. A server keeps a pool of them (its prompt cache), so it must not
 * take device memory: the snapshots are host ones (model_snap_save_host),
 * whatever the backend.
 *
 * What is parked is what gem_session_sync chooses from: the live state
 * and the turn checkpoint. The checkpoint is left out when the live
 * state rewinds to it exactly (Gemma's rings can; a recurrent state
 * never does) (the live state then keeps at least as much of any prompt
 * that continues it), so a chat parked after an
 * answer re-rendered as generated costs one copy, and one whose answer is
 * re-rendered differently (a thought dropped) keeps the checkpoint at its
 * last turn start too. */
#include <stdlib.h>
#include <string.h>

#include "engine/engine_impl.h"

struct gem_park {
    gem_checkpoint *live; /* the live state (a host snapshot), or NULL when it was empty */
    gem_checkpoint *turn; /* the turn checkpoint (host), or NULL */
    size_t bytes;
};

static gem_checkpoint *ck_with(const int32_t *t, size_t n, gem_err *err) {
    gem_checkpoint *c = calloc(1, sizeof *c);
    if (c && (c->tokens = malloc((n ? n : 1) * sizeof *t))) {
        memcpy(c->tokens, t, n * sizeof *t);
        c->n_tokens = c->cap = n;
        return c;
    }
    free(c);
    gem_err_set(err, "out of memory for a parked session");
    return NULL;
}

static size_t ck_bytes(const gem_checkpoint *c) {
    return c ? sizeof *c + c->cap * sizeof(int32_t) + (c->snap ? model_snap_bytes(c->snap) : 0) : 0;
}

static int is_prefix(const int32_t *a, size_t na, const int32_t *b, size_t nb) {
    return na <= nb && (na == 0 || !memcmp(a, b, na * sizeof *a));
}

gem_park *gem_session_park(gem_session *s, gem_err *err) {
    gem_park *p = calloc(1, sizeof *p);
    if (!p) {
        gem_err_set(err, "out of memory for a parked session");
        return NULL;
    }
    gate_enter(s->e, 0);
    int rc = 0;
    if (s->n_tokens) {
        rc = !(p->live = ck_with(s->tokens, s->n_tokens, err)) || model_snap_save_host(s->st, &p->live->snap, err);
    }
    const gem_checkpoint *c = s->ck;
    const int covered = p->live && c && c->n_tokens >= (size_t)model_rewind_min(s->st) &&
                        is_prefix(c->tokens, c->n_tokens, s->tokens, s->n_tokens);
    if (!rc && c && c->n_tokens && !covered)
        rc = !(p->turn = ck_with(c->tokens, c->n_tokens, err)) ||
             model_snap_to_host(c->snap, s->st, &p->turn->snap, err);
    gate_leave(s->e);
    if (!rc && !p->live && !p->turn) rc = gem_err_set(err, "the session holds nothing to park");
    if (rc) {
        gem_park_free(p);
        return NULL;
    }
    p->bytes = sizeof *p + ck_bytes(p->live) + ck_bytes(p->turn);
    return p;
}

int gem_session_unpark(gem_session *s, const gem_park *p, gem_err *err) {
    gem_checkpoint *turn = NULL;
    gate_enter(s->e, 0);
    int rc = p->turn && (!(turn = ck_with(p->turn->tokens, p->turn->n_tokens, err)) ||
                         model_snap_to_host(p->turn->snap, s->st, &turn->snap, err));
    if (rc) {
        gem_checkpoint_free(turn);
        turn = NULL;
    }
    if (turn) {
        gem_checkpoint_free(s->ck); /* the backend's buffer, freed under the gate */
        s->ck = turn;
    } else if (s->ck) { /* another conversation's: forgotten, its memory kept */
        s->ck->n_tokens = 0;
        s->ck->next_ok = 0;
    }
    if (p->live && !rc) sess_restore(s, p->live);
    else session_clear(s);
    gate_leave(s->e);
    return rc ? -1 : 0;
}

long gem_park_keeps(const gem_park *p, const int32_t *ids, size_t n) {
    if (n == 0) return 0;
    keep_src k = {NULL, 0, 0, 0, p->turn};
    if (p->live) {
        k.t = p->live->tokens;
        k.n = p->live->n_tokens;
        k.rewind_min = model_snap_rewind_min(p->live->snap);
    }
    keep_how how;
    return (long)keep_plan(&k, ids, n, &how);
}

const int32_t *gem_park_tokens(const gem_park *p, size_t *n) {
    const gem_checkpoint *c = p->live ? p->live : p->turn;
    *n = c->n_tokens;
    return c->tokens;
}

size_t gem_park_bytes(const gem_park *p) { return p->bytes; }

void gem_park_free(gem_park *p) {
    if (!p) return;
    gem_checkpoint_free(p->live);
    gem_checkpoint_free(p->turn);
    free(p);
}
