/* Engine and session (see engine.h). */
#include "engine/engine.h"

#include <stdlib.h>
#include <string.h>

#include "engine/engine_impl.h"
#include "util/sysmem.h"

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
    const uint64_t weights = device ? weights_resident(b, e->file) + weights_resident(b, e->mtp_file) : 0;
    return gemma4_fit_check(&e->plan, weights, b->work_reserve, free_b,
                            device ? "the GPU" : "this machine (MemAvailable)", err);
}

gem_engine *gem_engine_open(const gem_engine_opts *o, gem_err *err) {
    gem_engine *e = calloc(1, sizeof *e);
    if (!e) {
        gem_err_set(err, "out of memory");
        return NULL;
    }
    if (!(e->file = gguf_open(o->model_path, err))) goto fail;
    if (!(e->model = gemma4_bind(e->file, err))) goto fail;
    if (gemma4_is_assistant(e->model->profile)) {
        gem_err_set(err, "%s is an MTP drafter (%s), not a model to run: pass it with --mtp beside its target",
                    o->model_path, e->model->profile->name);
        goto fail;
    }
    if (o->mtp_path) {
        if (!(e->mtp_file = gguf_open(o->mtp_path, err)) || !(e->mtp = gemma4_bind(e->mtp_file, err))) {
            gem_err_wrap(err, "--mtp");
            goto fail;
        }
        if (gemma4_pair_check(e->model, e->mtp, err)) goto fail;
    }
    if (!(e->tok = tok_load(e->file, err))) goto fail;
    backend_opts bo = {o->threads, o->cpu_ref, o->compat_llama};
    if (!(e->be = backend_create(o->backend ? o->backend : "cpu", &bo, err))) goto fail;
    if (e->mtp && (!e->be->rows_exact || !e->be->attention_cached)) {
        gem_err_set(err, "--mtp: backend '%s' cannot verify drafts exactly yet (no row-exact small tiles)",
                    e->be->name);
        goto fail;
    }
    if (gemma4_ctx_resolve(o->n_ctx, gemma4_trained_ctx(e->file, e->model->profile), o->model_path, &e->n_ctx, err))
        goto fail;
    e->tile = o->tile > 0 ? o->tile : e->be->prompt_tile > 0 ? e->be->prompt_tile : 64;
    if (gemma4_kv_plan_make(e->model->profile, e->n_ctx, o->kv_type, gemma4_ring_slack(e->be), e->tile, &e->plan, err))
        goto fail;
    if (!e->be->kv_f16 && (e->plan.kind[GEMMA4_KV_SLIDING].f16 || e->plan.kind[GEMMA4_KV_FULL].f16)) {
        gem_err_set(err, "--kv-type %s: backend '%s' keeps its KV caches in f32 (f16 caches are a CUDA option)",
                    gemma4_kv_type_name(o->kv_type), e->be->name);
        goto fail;
    }
    if (engine_fit_check(e, o, err)) goto fail;
    e->layers = o->layers;
    e->turn_id = tok_find(e->tok, "<|turn>", 7);
    return e;
fail:
    gem_engine_close(e);
    return NULL;
}

void gem_engine_close(gem_engine *e) {
    if (!e) return;
    if (e->be) e->be->destroy(e->be);
    gram_vocab_free(e->gv); /* before the tokenizer it was built from */
    tok_free(e->tok);
    gemma4_free(e->model);
    gguf_close(e->file);
    gemma4_free(e->mtp);
    gguf_close(e->mtp_file);
    free(e);
}

const tok *gem_engine_tok(const gem_engine *e) { return e->tok; }
const char *gem_engine_backend(const gem_engine *e) { return e->be->name; }
const char *gem_engine_profile(const gem_engine *e) { return e->model->profile->name; }
size_t gem_engine_mem_used(const gem_engine *e) { return e->be->mem_used ? e->be->mem_used(e->be) : 0; }
int gem_engine_n_ctx(const gem_engine *e) { return e->n_ctx; }
const gemma4_kv_plan *gem_engine_kv_plan(const gem_engine *e) { return &e->plan; }
const char *gem_engine_mtp(const gem_engine *e) { return e->mtp ? e->mtp->profile->name : NULL; }

gem_session *gem_session_new(gem_engine *e, gem_err *err) {
    if (e->busy) {
        gem_err_set(err, "the engine already has a session");
        return NULL;
    }
    gem_session *s = calloc(1, sizeof *s);
    if (!s) {
        gem_err_set(err, "out of memory");
        return NULL;
    }
    s->e = e;
    s->logits = calloc(GEMMA4_N_VOCAB, sizeof(float));
    if (!s->logits || !(s->st = gemma4_state_new(e->model, e->be, &e->plan, e->layers, err))) {
        if (!s->logits) gem_err_set(err, "out of memory");
        gem_session_free(s);
        return NULL;
    }
    if (spec_session_init(s, err)) {
        gem_session_free(s);
        return NULL;
    }
    e->busy = 1;
    return s;
}

void gem_session_free(gem_session *s) {
    if (!s) return;
    gem_checkpoint_free(s->ck);
    spec_session_free(s); /* the drafter reads the state: freed first */
    if (s->st) s->e->busy = 0;
    gemma4_state_free(s->st);
    free(s->tokens);
    free(s->prompt);
    free(s->logits);
    free(s);
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

int gem_session_eval(gem_session *s, const int32_t *ids, int n, gem_err *err) {
    s->synced = 0; /* a sync is followed by generate, not by raw evals */
    s->logits_valid = s->logits_dev = 0;
    if (gemma4_eval(s->st, ids, n, NULL, 0, err)) return -1;
    s->logits_dev = 1;
    return session_remember(s, ids, n, err);
}

int gem_session_eval_greedy(gem_session *s, const int32_t *ids, int n, int32_t *next, gem_err *err) {
    s->synced = 0; /* a sync is followed by generate, not by raw evals */
    s->logits_valid = s->logits_dev = 0;
    if (gemma4_eval_greedy(s->st, ids, n, next, err)) return -1;
    s->logits_dev = 1;
    return session_remember(s, ids, n, err);
}

int session_prefill(gem_session *s, const int32_t *ids, int n, gem_err *err) {
    s->logits_valid = s->logits_dev = 0;
    if (gemma4_prefill(s->st, ids, n, err)) return -1;
    return session_remember(s, ids, n, err);
}

int gem_session_eval_all(gem_session *s, const int32_t *ids, int n, float *out, gem_err *err) {
    s->synced = 0; /* a sync is followed by generate, not by raw evals */
    s->logits_valid = s->logits_dev = 0;
    if (gemma4_eval(s->st, ids, n, out, 1, err)) return -1;
    memcpy(s->logits, out + (size_t)(n - 1) * GEMMA4_N_VOCAB, GEMMA4_N_VOCAB * sizeof(float));
    s->logits_valid = s->logits_dev = 1;
    return session_remember(s, ids, n, err);
}

/* Reads the backend's logits on first use. The session is logically
 * unchanged (the same logits either way), hence the const argument; the
 * object itself is never const (gem_session_new allocates it). */
const float *gem_session_logits(const gem_session *cs) {
    gem_session *s = (gem_session *)cs;
    if (!s->logits_valid && s->logits_dev) {
        gem_err err;
        if (gemma4_logits(s->st, s->logits, &err) == 0) s->logits_valid = 1;
        else s->logits_dev = 0;
    }
    return s->logits_valid ? s->logits : NULL;
}

int32_t gem_session_sample(gem_session *s, sampler *smp, gem_err *err) {
    const int k = sampler_topk(smp);
    if (k > 0 && k <= BE_TOPK_MAX && !s->logits_valid && s->logits_dev) {
        float vals[BE_TOPK_MAX];
        int32_t ids[BE_TOPK_MAX];
        if (gemma4_topk(s->st, k, vals, ids, err)) return -1;
        return sampler_sample_top(smp, vals, ids, k);
    }
    const float *l = gem_session_logits(s);
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

void session_wait(gem_session *s) { s->e->be->sync(s->e->be); }

void session_clear(gem_session *s) {
    gemma4_reset(s->st);
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
    if (gemma4_snap_save(s->st, &c->snap, err)) return -1;
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
    gem_err err;
    s->synced = 0;
    s->n_tokens = 0;
    if (session_remember(s, c->tokens, (int)c->n_tokens, &err)) { /* no memory for the history: start over */
        session_clear(s);
        return;
    }
    gemma4_snap_load(s->st, c->snap);
    s->logits_valid = 0;
    s->logits_dev = c->next_ok;
}

void gem_checkpoint_free(gem_checkpoint *c) {
    if (!c) return;
    gemma4_snap_free(c->snap);
    free(c->tokens);
    free(c);
}
