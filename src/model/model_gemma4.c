/* Gemma 4 behind the model seam (model.h): a thin adapter over
 * gemma4_run.h, gemma4_kvplan.h and gemma4_draft.h. Everything it does is
 * what the engine did with these calls before the seam, in the same
 * order and with the same messages: Gemma's numerics and paths are
 * gemma4_run.c's alone. */
#include <stdlib.h>

#include "model/gemma4.h"
#include "model/gemma4_draft.h"
#include "model/gemma4_kvplan.h"
#include "model/gemma4_run.h"
#include "model/model_impl.h"

typedef struct {
    const gguf_file *file;
    const char *path;
    gemma4_model *m;
    gguf_file *mtp_file; /* the MTP drafter (model_mtp_attach), or NULL */
    gemma4_model *mtp;
    gemma4_kv_plan plan;
    int layers;
    gemma4_core *core;           /* the weights and tile buffers every state shares */
    gemma4_draft_weights *mtp_w; /* the drafter's weights, made with the first drafter */
} g4;

static g4 *G(const gem_model *m) { return m->impl; }

static int g4_open(gem_model *m, const gguf_file *f, const char *path, gem_err *err) {
    gemma4_model *gm = gemma4_bind(f, err);
    if (!gm) return -1;
    if (gemma4_is_assistant(gm->profile)) {
        gem_err_set(err, "%s is an MTP drafter (%s), not a model to run: pass it with --mtp beside its target", path,
                    gm->profile->name);
        gemma4_free(gm);
        return -1;
    }
    g4 *g = calloc(1, sizeof *g);
    if (!g) {
        gemma4_free(gm);
        return gem_err_set(err, "out of memory");
    }
    g->file = f;
    g->path = path;
    g->m = gm;
    m->impl = g;
    m->info.arch = GEMMA4_ARCH;
    m->info.profile = gm->profile->name;
    m->info.n_vocab = GEMMA4_N_VOCAB;
    m->info.turn_marker = "<|turn>";
    m->info.caps = MODEL_CAP_STEP_SEQS | MODEL_CAP_REWIND | MODEL_CAP_SPEC | MODEL_CAP_MTP;
    return 0;
}

static void g4_free(gem_model *m) {
    g4 *g = G(m);
    gemma4_free(g->m);
    gemma4_free(g->mtp);
    gguf_close(g->mtp_file);
    free(g);
}

static uint64_t g4_decode_bytes(const gem_model *m) { return gemma4_decode_bytes(G(m)->m); }

static int g4_mtp_attach(gem_model *m, const char *path, gem_err *err) {
    g4 *g = G(m);
    if (!(g->mtp_file = gguf_open(path, err)) || !(g->mtp = gemma4_bind(g->mtp_file, err)))
        return gem_err_wrap(err, "--mtp");
    return gemma4_pair_check(g->m, g->mtp, err);
}

static const char *g4_mtp_name(const gem_model *m) { return G(m)->mtp ? G(m)->mtp->profile->name : NULL; }
static const gguf_file *g4_mtp_file(const gem_model *m) { return G(m)->mtp_file; }

static int g4_backend_check(const gem_model *m, const backend *b, gem_err *err) {
    /* a drafter reads the target's caches, which a sharded backend splits
     * by heads, with weights of its own that are not dealt yet */
    if (G(m)->mtp && b->shards > 1)
        return gem_err_set(err, "--mtp: speculative decoding does not run tensor-parallel (%d shards) yet", b->shards);
    if (b->shards > 1) { /* before any weight is dealt: the heads, KV heads and FFN rows (docs/tensor-parallel.md) */
        const gemma4_profile *p = G(m)->m->profile;
        const uint32_t G_ = (uint32_t)b->shards, kv[2] = {p->n_head_kv_swa, p->n_head_kv_full};
        uint32_t f, c;
        if (p->n_head % G_)
            return gem_err_set(err, "%s's %u query heads do not divide over %d shards", p->name, p->n_head, b->shards);
        for (int i = 0; i < 2; i++)
            if (be_shard_units(kv[i], b->shards, 0, &f, &c))
                return gem_err_set(err, "%s's %u KV heads (%s layers) do not divide over %d shards, nor %d over them",
                                   p->name, kv[i], i ? "full" : "sliding", b->shards, b->shards);
        if (p->n_ff % G_)
            return gem_err_set(err, "%s's %u FFN rows do not divide over %d shards", p->name, p->n_ff, b->shards);
    }
    if (G(m)->mtp && (!b->rows_exact || !b->attention_cached))
        return gem_err_set(err, "--mtp: backend '%s' cannot verify drafts exactly yet (no row-exact small tiles)",
                           b->name);
    return 0;
}

static int g4_plan(gem_model *m, backend *b, const model_plan_opts *o, model_plan *out, gem_err *err) {
    g4 *g = G(m);
    const gemma4_profile *p = g->m->profile;
    int n_ctx;
    if (gemma4_ctx_resolve(o->n_ctx, gemma4_trained_ctx(g->file, p), g->path, &n_ctx, err)) return -1;
    const gemma4_kv_type t = (gemma4_kv_type)o->kv_type;
    if (gemma4_kv_plan_make(p, n_ctx, t, gemma4_ring_slack(b), o->tile, &g->plan, err)) return -1;
    if (!b->kv_f16 && (g->plan.kind[GEMMA4_KV_SLIDING].f16 || g->plan.kind[GEMMA4_KV_FULL].f16))
        return gem_err_set(err, "--kv-type %s: backend '%s' keeps its KV caches in f32 (f16 caches are a CUDA option)",
                           gemma4_kv_type_name(t), b->name);
    g->layers = o->layers;
    out->n_ctx = g->plan.n_ctx;
    out->tile = g->plan.tile;
    out->kv_type = gemma4_kv_type_name(g->plan.type);
    out->state_bytes = g->plan.kv_bytes;
    out->act_bytes = g->plan.act_bytes;
    out->checkpoint_bytes = g->plan.checkpoint_bytes;
    return 0;
}

static int g4_fit(const gem_model *m, int sessions, uint64_t weights, uint64_t reserve, uint64_t free_b,
                  const char *where, gem_err *err) {
    /* every session keeps its own caches; the tile buffers are shared (gemma4_core) */
    gemma4_kv_plan all = G(m)->plan;
    all.kv_bytes *= (uint64_t)sessions;
    return gemma4_fit_check(&all, weights, reserve, free_b, where, err);
}

static void g4_release(gem_model *m) {
    g4 *g = G(m);
    gemma4_draft_weights_free(g->mtp_w); /* the drafters are gone */
    g->mtp_w = NULL;
    gemma4_core_free(g->core);
    g->core = NULL;
}

static void *g4_state_new(gem_model *m, backend *b, gem_err *err) {
    g4 *g = G(m);
    if (!g->core && !(g->core = gemma4_core_new(g->m, b, &g->plan, g->layers, err))) return NULL;
    return gemma4_state_on(g->core, &g->plan, err);
}

static void g4_state_free(void *st) { gemma4_state_free(st); }
static int g4_n_past(const void *st) { return gemma4_n_past(st); }
static int g4_eval(void *st, const int32_t *ids, int n, float *logits, int all, gem_err *err) {
    return gemma4_eval(st, ids, n, logits, all, err);
}
static int g4_eval_greedy(void *st, const int32_t *ids, int n, int32_t *next, gem_err *err) {
    return gemma4_eval_greedy(st, ids, n, next, err);
}
static int g4_prefill(void *st, const int32_t *ids, int n, gem_err *err) { return gemma4_prefill(st, ids, n, err); }
static int g4_logits(void *st, float *dst, gem_err *err) { return gemma4_logits(st, dst, err); }
static int g4_topk(void *st, int k, float *vals, int32_t *ids, gem_err *err) {
    return gemma4_topk(st, k, vals, ids, err);
}
static void g4_reset(void *st) { gemma4_reset(st); }
static int g4_rewind_min(const void *st) { return gemma4_rewind_min(st); }
static int g4_rewind(void *st, int n) { return gemma4_rewind(st, n); }

static int g4_snap_save(void *st, void **snap, gem_err *err) {
    gemma4_snap *sn = *snap;
    const int rc = gemma4_snap_save(st, &sn, err);
    *snap = sn;
    return rc;
}
static void g4_snap_load(void *st, const void *snap) { gemma4_snap_load(st, snap); }
static int g4_snap_rewind_min(const void *snap) { return gemma4_snap_rewind_min(snap); }
static int g4_snap_save_host(void *st, void **snap, gem_err *err) {
    gemma4_snap *sn = *snap;
    const int rc = gemma4_snap_save_host(st, &sn, err);
    *snap = sn;
    return rc;
}
static int g4_snap_to_host(const void *src, const void *st, void **snap, gem_err *err) {
    gemma4_snap *sn = *snap;
    const int rc = gemma4_snap_to_host(src, st, &sn, err);
    *snap = sn;
    return rc;
}
static size_t g4_snap_bytes(const void *snap) { return gemma4_snap_bytes(snap); }
static void g4_snap_free(void *snap) { gemma4_snap_free(snap); }

static int g4_step_seqs(void *const *ss, const int32_t *ids, int n, int32_t *best, gem_err *err) {
    gemma4_state *st[BE_EXACT_ROWS];
    for (int i = 0; i < n; i++) st[i] = ss[i];
    return gemma4_step_seqs(st, ids, n, best, err);
}

static int g4_spec_init(void *st, int rows, gem_err *err) { return gemma4_spec_init(st, rows, err); }
static int g4_spec_rows(const void *st) { return gemma4_spec_rows(st); }
static int g4_verify(void *st, const int32_t *ids, int n, int32_t *best, float *logits, gem_err *err) {
    return gemma4_verify(st, ids, n, best, logits, err);
}
static void g4_spec_keep(void *st, int keep) { gemma4_spec_keep(st, keep); }

static void *g4_drafter_new(gem_model *m, void *st, gem_err *err) {
    g4 *g = G(m);
    if (!g->mtp) {
        gem_err_set(err, "no MTP drafter (--mtp)");
        return NULL;
    }
    if (g->layers > 0 && (uint32_t)g->layers < g->m->profile->n_layer) {
        gem_err_set(err, "--mtp: the drafter reads the target's last layers, which a run of %d of %u layers never "
                    "fills", g->layers, g->m->profile->n_layer);
        return NULL;
    }
    /* one copy of the drafter's weights for every state */
    if (!g->mtp_w && !(g->mtp_w = gemma4_draft_weights_new(g->mtp, gemma4_state_backend(st), err))) return NULL;
    return gemma4_drafter_on(g->mtp_w, st, err);
}
static void g4_drafter_free(void *d) { gemma4_drafter_free(d); }
static int g4_draft_step(void *d, int32_t id, int first, int32_t *next, float *p_top, gem_err *err) {
    return gemma4_draft_step(d, id, first, next, p_top, NULL, err);
}

const model_ops model_gemma4_ops = {
    .open = g4_open,
    .free = g4_free,
    .decode_bytes = g4_decode_bytes,
    .backend_check = g4_backend_check,
    .plan = g4_plan,
    .fit = g4_fit,
    .release = g4_release,
    .state_new = g4_state_new,
    .state_free = g4_state_free,
    .n_past = g4_n_past,
    .eval = g4_eval,
    .eval_greedy = g4_eval_greedy,
    .prefill = g4_prefill,
    .logits = g4_logits,
    .topk = g4_topk,
    .reset = g4_reset,
    .rewind_min = g4_rewind_min,
    .rewind = g4_rewind,
    .snap_save = g4_snap_save,
    .snap_load = g4_snap_load,
    .snap_rewind_min = g4_snap_rewind_min,
    .snap_save_host = g4_snap_save_host,
    .snap_to_host = g4_snap_to_host,
    .snap_bytes = g4_snap_bytes,
    .snap_free = g4_snap_free,
    .step_seqs = g4_step_seqs,
    .spec_init = g4_spec_init,
    .spec_rows = g4_spec_rows,
    .verify = g4_verify,
    .spec_keep = g4_spec_keep,
    .mtp_attach = g4_mtp_attach,
    .mtp_name = g4_mtp_name,
    .mtp_file = g4_mtp_file,
    .drafter_new = g4_drafter_new,
    .drafter_free = g4_drafter_free,
    .draft_step = g4_draft_step,
};
