/* Engine and session (see engine.h), and the gate that lets sessions on
 * different threads share the backend (engine_impl.h).
 *
 * Batching policy. A thread whose decode step is posted waits; the first
 * waiter that finds the gate free leads: once every decoding generation
 * has posted its step (or the oldest has waited BATCH_WAIT_S, so a
 * generation busy elsewhere, e.g. a client slow to take its stream,
 * delays the others by at most that), it runs up to batch_rows of them,
 * oldest first, as one step: one read of the weights for all rows. A lone
 * step takes the ordinary one-token path (a replayed graph on a GPU).
 * Prompts and batches alternate: after a batch, one chunk of a waiting
 * prompt runs before the next batch (last_was_batch), so a stream of
 * batches never starves a new generation's prompt, and a long prompt
 * delays the decoding streams by one chunk per step. */
#include "engine/engine.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine_impl.h"
#include "util/clock.h"
#include "util/sysmem.h"

#define BATCH_WAIT_S 0.002

/* Resident bytes of a model's tensors on backend b (0 where weights stay
 * views of the mapped file). */
static uint64_t weights_resident(backend *b, const gguf_file *f) {
    uint64_t n = 0;
    if (!b->weight_bytes || !f) return 0;
    for (uint64_t i = 0; i < gguf_tensor_count(f); i++) n += b->weight_bytes(b, gguf_tensor_at(f, i));
    return n;
}

/* The plan against the memory free now, before anything is loaded: on a
 * device its free memory holds the weights (target and drafter), the plan
 * and the backend's work reserve; on the host the plan and reserve must
 * fit MemAvailable, while the weights stay in the mapped file, whose pages
 * the kernel reads in and evicts as it needs (a model larger than memory
 * runs, slowly) and so are not counted. Without a way to know (no
 * /proc/meminfo) the check is skipped: the allocations themselves then
 * fail with their own message. */
static int engine_fit_check(gem_engine *e, const gem_engine_opts *o, gem_err *err) {
    backend *b = e->be;
    const int device = b->mem_free != NULL;
    uint64_t free_b = o->mem_free;
    if (!free_b) {
        if (device) free_b = b->mem_free(b);
        else if (sysmem_available(&free_b)) return 0;
    }
    const uint64_t weights =
        device ? weights_resident(b, e->file) + weights_resident(b, model_mtp_file(e->model)) : 0;
    /* every session the caller will make keeps its own caches (the model
     * says what its sessions share) */
    const int n = o->sessions > 1 ? o->sessions : 1;
    if (model_fit_check(e->model, n, weights, b->work_reserve, free_b,
                        device ? "the GPU" : "this machine (MemAvailable)", err))
        return n > 1 ? gem_err_wrap(err, "%d sessions", n) : -1;
    return 0;
}

gem_engine *gem_engine_open(const gem_engine_opts *o, gem_err *err) {
    gem_engine *e = calloc(1, sizeof *e);
    if (!e) {
        gem_err_set(err, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&e->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* the batch wait's deadlines */
    pthread_cond_init(&e->cv, &ca);
    pthread_condattr_destroy(&ca);
    const char *be_name = o->backend ? o->backend : "cpu";
    if (!(e->file = gguf_open(o->model_path, err))) goto fail;
    if (!(e->model = model_open(e->file, o->model_path, err))) goto fail;
    e->info = model_info_of(e->model);
    e->n_vocab = e->info->n_vocab;
    /* what the family cannot do is refused before anything is made */
    if (model_backend_ok(e->model, be_name, err)) goto fail;
    if (o->mtp_path && model_mtp_attach(e->model, o->mtp_path, err)) goto fail;
    if (chat_format_for_arch(e->info->arch, &e->chat)) e->chat = CHAT_FORMAT_GEMMA4;
    if (!(e->tok = tok_load(e->file, err))) goto fail;
    if (tok_n_vocab(e->tok) != e->n_vocab) {
        gem_err_set(err, "%s: the tokenizer has %u tokens, the model's logits %u", o->model_path, tok_n_vocab(e->tok),
                    e->n_vocab);
        goto fail;
    }
    backend_opts bo = {o->threads, o->cpu_ref, o->compat_llama, o->shards};
    if (!(e->be = backend_create(be_name, &bo, err))) goto fail;
    if (model_backend_check(e->model, e->be, err)) goto fail;
    e->tile = o->tile > 0 ? o->tile : e->be->prompt_tile > 0 ? e->be->prompt_tile : 64;
    model_plan_opts po = {o->n_ctx, (int)o->kv_type, gemma4_kv_type_name(o->kv_type), e->tile, o->layers};
    model_plan mp;
    if (model_plan_make(e->model, e->be, &po, &mp, err)) goto fail;
    e->n_ctx = mp.n_ctx;
    e->plan = (gem_mem_plan){mp.n_ctx, mp.tile, mp.kv_type, mp.state_bytes, mp.act_bytes, mp.checkpoint_bytes};
    if (engine_fit_check(e, o, err)) goto fail;
    if (e->info->turn_marker) { /* as the marker is tokenized in a rendered prompt (special tokens parsed) */
        tok_ids t = {0};
        if (!tok_encode(e->tok, e->info->turn_marker, strlen(e->info->turn_marker), 0, 1, &t) && t.n &&
            t.n <= ENGINE_TURN_MAX) {
            memcpy(e->turn_ids, t.v, t.n * sizeof *t.v);
            e->n_turn = (int)t.n;
        }
        tok_ids_free(&t);
    }
    /* batched steps: the backend's row-exact rows (a session's answer must
     * not depend on what else runs), within the tile's buffers, for a
     * model that steps several sequences at once */
    e->batch_rows = 1;
    if ((e->info->caps & MODEL_CAP_STEP_SEQS) && e->be->rows_exact && e->be->attention_seqs &&
        (!e->be->set_step || e->be->set_step_seqs)) {
        int r = o->batch_rows > 0 ? o->batch_rows : BE_EXACT_ROWS;
        if (r > BE_EXACT_ROWS) r = BE_EXACT_ROWS;
        if (r > e->tile) r = e->tile;
        e->batch_rows = r;
    }
    return e;
fail:
    gem_engine_close(e);
    return NULL;
}

void gem_engine_close(gem_engine *e) {
    if (!e) return;
    model_release(e->model); /* the sessions are gone; before the backend */
    if (e->be) e->be->destroy(e->be);
    gram_vocab_free(e->gv); /* before the tokenizer it was built from */
    tok_free(e->tok);
    model_free(e->model);
    gguf_close(e->file);
    pthread_cond_destroy(&e->cv);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

const tok *gem_engine_tok(const gem_engine *e) { return e->tok; }
const char *gem_engine_backend(const gem_engine *e) { return e->be->name; }
const char *gem_engine_profile(const gem_engine *e) { return e->info->profile; }
size_t gem_engine_mem_used(const gem_engine *e) { return e->be->mem_used ? e->be->mem_used(e->be) : 0; }
int gem_engine_n_ctx(const gem_engine *e) { return e->n_ctx; }
const gem_mem_plan *gem_engine_plan(const gem_engine *e) { return &e->plan; }
const char *gem_engine_mtp(const gem_engine *e) { return model_mtp_name(e->model); }
const char *gem_engine_arch(const gem_engine *e) { return e->info->arch; }
uint32_t gem_engine_n_vocab(const gem_engine *e) { return e->n_vocab; }
chat_format gem_engine_chat_format(const gem_engine *e) { return e->chat; }
uint64_t gem_engine_decode_bytes(const gem_engine *e) { return model_decode_bytes(e->model); }

void gem_engine_batch_stats(gem_engine *e, long *steps, long *rows, int *rows_max) {
    pthread_mutex_lock(&e->mu);
    *steps = e->n_batches;
    *rows = e->n_batched_rows;
    *rows_max = e->batch_rows;
    pthread_mutex_unlock(&e->mu);
}

int gem_engine_op_timing(gem_engine *e, int on, gem_err *err) {
    if (!e->be->op_timing) return gem_err_set(err, "backend '%s' has no per-op timings (gem profile needs --backend cuda)", e->be->name);
    gate_enter(e, 0); /* between other sessions' op sequences */
    e->be->op_timing(e->be, on);
    const int rc = e->be->status(e->be, err);
    gate_leave(e);
    return rc;
}

int gem_engine_op_times(gem_engine *e, gem_op_time *rows, int cap, int clear) {
    if (!e->be->op_times || cap < 1) return 0;
    be_op_time t[64];
    gate_enter(e, 0);
    const int n = e->be->op_times(e->be, t, cap < 64 ? cap : 64, clear);
    gate_leave(e);
    for (int i = 0; i < n; i++) {
        memcpy(rows[i].op, t[i].op, sizeof rows[i].op);
        rows[i].calls = t[i].calls;
        rows[i].seconds = t[i].seconds;
    }
    return n;
}

gem_session *gem_session_new(gem_engine *e, gem_err *err) {
    gem_session *s = calloc(1, sizeof *s);
    if (!s) {
        gem_err_set(err, "out of memory");
        return NULL;
    }
    s->e = e;
    s->logits = calloc(e->n_vocab, sizeof(float));
    if (!s->logits) {
        gem_err_set(err, "out of memory");
        free(s);
        return NULL;
    }
    gate_enter(e, 0); /* allocations beside other sessions' work */
    s->st = model_state_new(e->model, e->be, err);
    int bad = !s->st || spec_session_init(s, err);
    if (!bad) e->n_sessions++;
    gate_leave(e);
    if (bad) {
        gem_session_free(s);
        return NULL;
    }
    return s;
}

void gem_session_free(gem_session *s) {
    if (!s) return;
    gem_engine *e = s->e;
    gate_enter(e, 0);
    gem_checkpoint_free(s->ck);
    spec_session_free(s); /* the drafter reads the state: freed first */
    if (s->st) {
        e->n_sessions--;
        model_state_free(s->st);
    }
    gate_leave(e);
    free(s->tokens);
    free(s->prompt);
    free(s->logits);
    free(s);
}

/* ---- the gate and batched steps ---- */

static void wait_until(gem_engine *e, double deadline) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    const double now = (double)ts.tv_sec + ts.tv_nsec * 1e-9;
    double left = deadline - now;
    if (left <= 0) return;
    if (left > 0.05) left = 0.05; /* recheck now and then (a poster's state may change) */
    const double at = now + left;
    ts.tv_sec = (time_t)at;
    ts.tv_nsec = (long)((at - (double)ts.tv_sec) * 1e9);
    pthread_cond_timedwait(&e->cv, &e->mu, &ts);
}

/* Until when the waiting steps wait for the decoding generations that
 * have not posted yet: from the later of the oldest post and the end of
 * the last step (the generations of that step post again after their own
 * host work: a deadline from the oldest post alone would split the
 * sessions into two alternating half batches), for BATCH_WAIT_S or half
 * the last step's time, whichever is longer (host work such as drawing
 * from a whole vocabulary's logits can take a while). */
static double batch_deadline(const gem_engine *e) {
    const double from = e->pending->t > e->t_free ? e->pending->t : e->t_free;
    return from + (e->step_s / 2 > BATCH_WAIT_S ? e->step_s / 2 : BATCH_WAIT_S);
}

/* Whether the waiting steps should run now: every decoding generation has
 * posted, or a batch is full, or the deadline has passed. */
static int batch_due(const gem_engine *e) {
    return e->n_pending > 0 && (e->n_pending >= e->n_decoding || e->n_pending >= e->batch_rows ||
                                gem_now_s() >= batch_deadline(e));
}

/* Runs the oldest pending steps as one step; called with mu held and the
 * gate free, returns the same way (mu dropped while the backend works). */
static void run_batch(gem_engine *e) {
    step_req *r[BE_EXACT_ROWS];
    int n = 0;
    while (e->pending && n < e->batch_rows) {
        r[n++] = e->pending;
        e->pending = e->pending->next;
    }
    if (!e->pending) e->pending_tail = NULL;
    e->n_pending -= n;
    e->gate_busy = 1;
    e->gate_gen++;
    pthread_mutex_unlock(&e->mu);
    const double t0 = gem_now_s();
    int rc;
    gem_err err = {{0}};
    if (n == 1) {
        rc = model_eval_greedy(r[0]->s->st, &r[0]->id, 1, &r[0]->best, &err);
    } else {
        model_state *ss[BE_EXACT_ROWS];
        int32_t ids[BE_EXACT_ROWS], best[BE_EXACT_ROWS];
        for (int i = 0; i < n; i++) ss[i] = r[i]->s->st, ids[i] = r[i]->id;
        rc = model_step_seqs(ss, ids, n, best, &err);
        for (int i = 0; i < n; i++) r[i]->best = best[i];
    }
    pthread_mutex_lock(&e->mu);
    e->t_free = gem_now_s();
    e->step_s = e->t_free - t0;
    e->n_batches++;
    e->n_batched_rows += n;
    e->last_was_batch = 1;
    for (int i = 0; i < n; i++) {
        r[i]->rc = rc;
        if (rc) r[i]->err = err;
        r[i]->done = 1;
    }
    e->gate_busy = 0;
    pthread_cond_broadcast(&e->cv);
}

void gate_enter(gem_engine *e, int yield) {
    pthread_mutex_lock(&e->mu);
    e->n_waiting++;
    for (;;) {
        /* decode steps are waiting: yield to them, unless a batch has just
         * run (one chunk of this prompt, then the next batch) */
        if (!e->gate_busy && yield && e->n_pending > 0 && !e->last_was_batch) {
            if (batch_due(e)) run_batch(e);
            else wait_until(e, batch_deadline(e));
            continue;
        }
        if (!e->gate_busy) break;
        pthread_cond_wait(&e->cv, &e->mu);
    }
    e->n_waiting--;
    e->last_was_batch = 0;
    e->gate_busy = 1;
    e->gate_gen++;
    pthread_mutex_unlock(&e->mu);
}

void gate_leave(gem_engine *e) {
    pthread_mutex_lock(&e->mu);
    e->gate_busy = 0;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

void session_decoding(gem_session *s, int delta) {
    gem_engine *e = s->e;
    pthread_mutex_lock(&e->mu);
    e->n_decoding += delta;
    pthread_cond_broadcast(&e->cv); /* a leader may be waiting for this one */
    pthread_mutex_unlock(&e->mu);
}

int session_alone(gem_session *s) {
    gem_engine *e = s->e;
    pthread_mutex_lock(&e->mu);
    const int alone = e->n_decoding <= 1;
    pthread_mutex_unlock(&e->mu);
    return alone;
}

int session_step(gem_session *s, int32_t id, int32_t *next, gem_err *err) {
    gem_engine *e = s->e;
    s->synced = 0;
    s->logits_valid = s->logits_dev = 0;
    step_req r = {s, id, -1, 0, 0, 0, {{0}}, NULL};
    pthread_mutex_lock(&e->mu);
    /* alone, or no batching: the ordinary step, once a thread waiting for
     * the gate (another generation's prompt) has had it: that generation
     * may then decode beside this one */
    const unsigned gen0 = e->gate_gen;
    while ((e->batch_rows <= 1 || e->n_decoding <= 1) && (e->gate_busy || (e->n_waiting > 0 && e->gate_gen == gen0)))
        pthread_cond_wait(&e->cv, &e->mu);
    if (e->batch_rows <= 1 || e->n_decoding <= 1) {
        e->gate_busy = 1;
        e->gate_gen++;
        pthread_mutex_unlock(&e->mu);
        r.rc = model_eval_greedy(s->st, &id, 1, &r.best, err);
        gate_leave(e);
    } else {
        r.t = gem_now_s();
        if (e->pending_tail) e->pending_tail->next = &r;
        else e->pending = &r;
        e->pending_tail = &r;
        e->n_pending++;
        pthread_cond_broadcast(&e->cv); /* the last poster completes a batch */
        while (!r.done) {
            /* after a batch, a thread waiting in gate_enter (a prompt's
             * chunk) has the gate first: its wake-up must not lose the race
             * to these steps' next batch */
            const int defer = e->last_was_batch && e->n_waiting > 0;
            if (!e->gate_busy && !defer && batch_due(e)) run_batch(e);
            else if (!e->gate_busy && !defer) wait_until(e, batch_deadline(e));
            else pthread_cond_wait(&e->cv, &e->mu);
        }
        pthread_mutex_unlock(&e->mu);
        if (r.rc) *err = r.err;
    }
    if (r.rc) return -1;
    s->logits_dev = 1;
    *next = r.best;
    return session_remember(s, &id, 1, err);
}

int session_remember(gem_session *s, const int32_t *ids, int n, gem_err *err) {
    if (s->n_tokens + (size_t)n > s->cap) {
        size_t c = s->cap ? s->cap : 256;
        while (c < s->n_tokens + (size_t)n) c *= 2;
        int32_t *t = realloc(s->tokens, c * sizeof *t);
        if (!t) return gem_err_set(err, "out of memory");
        s->tokens = t;
        s->cap = c;
    }
    memcpy(s->tokens + s->n_tokens, ids, (size_t)n * sizeof *ids);
    s->n_tokens += (size_t)n;
    return 0;
}

int sess_eval(gem_session *s, const int32_t *ids, int n, gem_err *err) {
    s->synced = 0; /* a sync is followed by generate, not by raw evals */
    s->logits_valid = s->logits_dev = 0;
    if (model_eval(s->st, ids, n, NULL, 0, err)) return -1;
    s->logits_dev = 1;
    return session_remember(s, ids, n, err);
}

int gem_session_eval(gem_session *s, const int32_t *ids, int n, gem_err *err) {
    gate_enter(s->e, 1);
    const int rc = sess_eval(s, ids, n, err);
    gate_leave(s->e);
    return rc;
}

int sess_eval_greedy(gem_session *s, const int32_t *ids, int n, int32_t *next, gem_err *err) {
    s->synced = 0; /* a sync is followed by generate, not by raw evals */
    s->logits_valid = s->logits_dev = 0;
    if (model_eval_greedy(s->st, ids, n, next, err)) return -1;
    s->logits_dev = 1;
    return session_remember(s, ids, n, err);
}

int gem_session_eval_greedy(gem_session *s, const int32_t *ids, int n, int32_t *next, gem_err *err) {
    gate_enter(s->e, 1);
    const int rc = sess_eval_greedy(s, ids, n, next, err);
    gate_leave(s->e);
    return rc;
}

int session_prefill(gem_session *s, const int32_t *ids, int n, gem_err *err) {
    s->logits_valid = s->logits_dev = 0;
    gate_enter(s->e, 1);
    const int rc = model_prefill(s->st, ids, n, err);
    gate_leave(s->e);
    if (rc) return -1;
    return session_remember(s, ids, n, err);
}

int gem_session_eval_all(gem_session *s, const int32_t *ids, int n, float *out, gem_err *err) {
    s->synced = 0; /* a sync is followed by generate, not by raw evals */
    s->logits_valid = s->logits_dev = 0;
    gate_enter(s->e, 1);
    const int rc = model_eval(s->st, ids, n, out, 1, err);
    gate_leave(s->e);
    if (rc) return -1;
    const size_t V = s->e->n_vocab;
    memcpy(s->logits, out + (size_t)(n - 1) * V, V * sizeof(float));
    s->logits_valid = s->logits_dev = 1;
    return session_remember(s, ids, n, err);
}

/* Reads the backend's logits on first use. The session is logically
 * unchanged (the same logits either way), hence the const argument; the
 * object itself is never const (gem_session_new allocates it). */
const float *sess_logits(gem_session *s) {
    if (!s->logits_valid && s->logits_dev) {
        gem_err err;
        if (model_logits(s->st, s->logits, &err) == 0) s->logits_valid = 1;
        else s->logits_dev = 0;
    }
    return s->logits_valid ? s->logits : NULL;
}

const float *gem_session_logits(const gem_session *cs) {
    gem_session *s = (gem_session *)cs;
    if (s->logits_valid || !s->logits_dev) return s->logits_valid ? s->logits : NULL;
    gate_enter(s->e, 0);
    const float *l = sess_logits(s);
    gate_leave(s->e);
    return l;
}

int32_t gem_session_sample(gem_session *s, sampler *smp, gem_err *err) {
    gate_enter(s->e, 0);
    const int32_t id = sess_sample(s, smp, err);
    gate_leave(s->e);
    return id;
}

int32_t sess_sample(gem_session *s, sampler *smp, gem_err *err) {
    const int k = sampler_topk(smp);
    if (k > 0 && k <= BE_TOPK_MAX && !s->logits_valid && s->logits_dev) {
        float vals[BE_TOPK_MAX];
        int32_t ids[BE_TOPK_MAX];
        if (model_topk(s->st, k, vals, ids, err)) return -1;
        return sampler_sample_top(smp, vals, ids, k);
    }
    const float *l = sess_logits(s);
    if (!l) {
        gem_err_set(err, "no logits to sample from (nothing evaluated, or the backend failed)");
        return -1;
    }
    size_t nh;
    const int32_t *hist = gem_session_tokens(s, &nh);
    return sampler_sample(smp, l, hist, nh);
}

const int32_t *gem_session_tokens(const gem_session *s, size_t *n) {
    *n = s->n_tokens;
    return s->tokens;
}

void session_wait(gem_session *s) {
    gate_enter(s->e, 0);
    s->e->be->sync(s->e->be);
    gate_leave(s->e);
}

void session_clear(gem_session *s) {
    model_reset(s->st);
    s->n_tokens = 0;
    s->logits_valid = s->logits_dev = 0;
    s->synced = 0;
}

void gem_session_reset(gem_session *s) {
    session_clear(s);
    if (s->ck) { /* forgotten, its memory kept for the next one */
        s->ck->n_tokens = 0;
        s->ck->next_ok = 0;
    }
}

int checkpoint_fill(gem_session *s, gem_checkpoint *c, gem_err *err) {
    if (c->cap < s->n_tokens || !c->tokens) {
        size_t cap = s->n_tokens > 16 ? s->n_tokens : 16;
        int32_t *t = realloc(c->tokens, cap * sizeof *t);
        if (!t) return gem_err_set(err, "out of memory for a checkpoint");
        c->tokens = t;
        c->cap = cap;
    }
    c->n_tokens = 0;
    gate_enter(s->e, 0);
    const int rc = model_snap_save(s->st, &c->snap, err);
    gate_leave(s->e);
    if (rc) return -1;
    memcpy(c->tokens, s->tokens, s->n_tokens * sizeof(int32_t));
    c->n_tokens = s->n_tokens;
    c->next_ok = s->logits_dev;
    return 0;
}

gem_checkpoint *gem_session_save(gem_session *s, gem_err *err) {
    gem_checkpoint *c = calloc(1, sizeof *c);
    if (!c) {
        gem_err_set(err, "out of memory for a checkpoint");
        return NULL;
    }
    if (checkpoint_fill(s, c, err)) {
        gem_checkpoint_free(c);
        return NULL;
    }
    return c;
}

void gem_session_restore(gem_session *s, const gem_checkpoint *c) {
    gate_enter(s->e, 0);
    sess_restore(s, c);
    gate_leave(s->e);
}

void sess_restore(gem_session *s, const gem_checkpoint *c) {
    gem_err err;
    s->synced = 0;
    s->n_tokens = 0;
    if (session_remember(s, c->tokens, (int)c->n_tokens, &err)) { /* no memory for the history: start over */
        session_clear(s);
        return;
    }
    model_snap_load(s->st, c->snap);
    s->logits_valid = 0;
    s->logits_dev = c->next_ok;
}

void gem_checkpoint_free(gem_checkpoint *c) {
    if (!c) return;
    model_snap_free(c->snap); /* (a session's own, freed under its gate by gem_session_free) */
    free(c->tokens);
    free(c);
}
