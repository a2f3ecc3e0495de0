/* The Qwen3.5 hybrid behind the model seam (model.h), over qwen35_run.h.
 *
 * What it lacks, and the engine then does without: batched steps of
 * sequences (sessions take turns step by step), rewinding (a Gated
 * DeltaNet state cannot drop its newest positions: model_rewind_min is
 * n_past, and prefix reuse goes through exact checkpoints), speculative
 * verification and MTP drafters. Its backend must have the hybrid ops
 * (qwen35_backend_check): the CPU and CUDA have them (CUDA within the
 * head dims q35_backend_ok states); any other is refused by name before
 * it is even made. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "model/gemma4_kvplan.h" /* gemma4_ctx_resolve, gemma4_human_bytes: family-neutral helpers */
#include "model/model_impl.h"
#include "model/qwen35.h"
#include "model/qwen35_run.h"

typedef struct {
    const gguf_file *file;
    const char *path;
    qwen35_model *m;
    int n_ctx, tile;
    int kv_f16; /* --kv-type f16 (or f16-full: every cache of this model grows with the context) */
    qwen35_mem mem;
} q35;

static q35 *Q(const gem_model *m) { return m->impl; }

static int q35_open(gem_model *m, const gguf_file *f, const char *path, gem_err *err) {
    qwen35_model *qm = qwen35_bind(f, err);
    if (!qm) return -1;
    q35 *q = calloc(1, sizeof *q);
    if (!q) {
        qwen35_free(qm);
        return gem_err_set(err, "out of memory");
    }
    q->file = f;
    q->path = path;
    q->m = qm;
    m->impl = q;
    m->info.arch = QWEN35_ARCH;
    m->info.profile = qm->profile->name;
    m->info.n_vocab = qm->profile->n_vocab;
    m->info.turn_marker = "<|im_start|>";
    m->info.caps = 0;
    return 0;
}

static void q35_free(gem_model *m) {
    qwen35_free(Q(m)->m);
    free(Q(m));
}

/* Every tensor is read once per step but token_embd, of which one row is
 * (unless it is also the tied head). */
static uint64_t q35_decode_bytes(const gem_model *m) {
    const qwen35_model *qm = Q(m)->m;
    uint64_t total = 0;
    for (uint64_t i = 0; i < gguf_tensor_count(qm->file); i++) total += gguf_tensor_at(qm->file, i)->n_bytes;
    if (qm->output != qm->token_embd) total -= qm->token_embd->n_bytes;
    return total + qm->token_embd->n_bytes / qm->token_embd->ne[1];
}

/* cpu and cuda carry the Gated DeltaNet ops (qwen35_backend_check names
 * any that a backend lacks once it exists); CUDA's attention kernels take
 * head dims that are multiples of 128 and its delta rule state dims that
 * are multiples of 32 up to 256 (qwen35-small and the 27B; not the tiny
 * test profile's 64-wide attention heads) */
static int q35_backend_ok(const gem_model *m, const char *name, gem_err *err) {
    if (!strcmp(name, "cpu")) return 0;
    if (!strcmp(name, "cuda")) {
        const qwen35_profile *p = Q(m)->m->profile;
        if (p->head_dim % 128)
            return gem_err_set(err, "backend 'cuda' cannot run %s: its attention heads are %u wide and CUDA attention "
                               "takes multiples of 128; use --backend cpu", p->name, p->head_dim);
        if (p->d_state % 32 || p->d_state > 256)
            return gem_err_set(err, "backend 'cuda' cannot run %s: its Gated DeltaNet heads are %u wide and the CUDA "
                               "delta rule takes multiples of 32 up to 256; use --backend cpu", p->name, p->d_state);
        return 0;
    }
    return gem_err_set(err, "backend '%s' cannot run %s (Qwen3.5, qwen35) yet: it has no Gated DeltaNet ops "
                       "(conv_silu, gated_delta, ...); use --backend cpu or cuda", name, m->info.profile);
}

static int q35_backend_check(const gem_model *m, const backend *b, gem_err *err) {
    if (b->shards > 1) /* its layer loop neither deals its weights nor reduces */
        return gem_err_set(err, "%s (Qwen3.5) does not run tensor-parallel (%d shards) yet", m->info.profile, b->shards);
    return qwen35_backend_check(b, err);
}

static int q35_plan(gem_model *m, backend *b, const model_plan_opts *o, model_plan *out, gem_err *err) {
    q35 *q = Q(m);
    const qwen35_profile *p = q->m->profile;
    /* its attention layers are all full (no sliding rings): f16 and
     * f16-full both make every cache f16 */
    q->kv_f16 = o->kv_type != 0;
    if (q->kv_f16 && !b->kv_f16)
        return gem_err_set(err, "--kv-type %s: backend '%s' keeps its KV caches in f32 (f16 caches are a CUDA option)",
                           o->kv_type_name, b->name);
    if (o->layers > 0) return gem_err_set(err, "%s: runs of the first layers only are a Gemma 4 test option", p->name);
    if (gemma4_ctx_resolve(o->n_ctx, qwen35_trained_ctx(q->file), q->path, &q->n_ctx, err)) return -1;
    q->tile = o->tile;
    qwen35_plan(p, q->n_ctx, q->tile, q->kv_f16, &q->mem);
    out->n_ctx = q->n_ctx;
    out->tile = q->tile;
    out->kv_type = o->kv_type_name && q->kv_f16 ? o->kv_type_name : "f32";
    out->state_bytes = q->mem.kv_bytes + q->mem.recurrent_bytes;
    out->act_bytes = q->mem.act_bytes;
    out->checkpoint_bytes = q->mem.checkpoint_bytes;
    return 0;
}

/* Each session allocates its caches, recurrent state and tile buffers
 * (states share no buffers). */
static int q35_fit(const gem_model *m, int sessions, uint64_t weights, uint64_t reserve, uint64_t free_b,
                   const char *where, gem_err *err) {
    const q35 *q = Q(m);
    const uint64_t per = q->mem.kv_bytes + q->mem.recurrent_bytes + q->mem.act_bytes;
    const uint64_t need = weights + (uint64_t)sessions * per + reserve;
    if (need <= free_b) return 0;
    char hn[32], hw[32], hk[32], hr[32], ha[32], hs[32], hf[32];
    return gem_err_set(err,
                       "a context of %d tokens does not fit: it needs %s (%" PRIu64 " bytes: weights %s, per session "
                       "KV caches %s, recurrent state %s, activations %s, working reserve %s) and %s has %s (%" PRIu64
                       " bytes) free",
                       q->n_ctx, gemma4_human_bytes(need, hn, sizeof hn), need, gemma4_human_bytes(weights, hw, sizeof hw),
                       gemma4_human_bytes(q->mem.kv_bytes, hk, sizeof hk),
                       gemma4_human_bytes(q->mem.recurrent_bytes, hr, sizeof hr),
                       gemma4_human_bytes(q->mem.act_bytes, ha, sizeof ha), gemma4_human_bytes(reserve, hs, sizeof hs),
                       where, gemma4_human_bytes(free_b, hf, sizeof hf), free_b);
}

static void *q35_state_new(gem_model *m, backend *b, gem_err *err) {
    return qwen35_state_new(Q(m)->m, b, Q(m)->n_ctx, Q(m)->tile, Q(m)->kv_f16, err);
}

static void q35_state_free(void *st) { qwen35_state_free(st); }
static int q35_n_past(const void *st) { return qwen35_n_past(st); }
static int q35_eval(void *st, const int32_t *ids, int n, float *logits, int all, gem_err *err) {
    return qwen35_eval(st, ids, n, logits, all, err);
}
static int q35_eval_greedy(void *st, const int32_t *ids, int n, int32_t *next, gem_err *err) {
    return qwen35_eval_greedy(st, ids, n, next, err);
}
static int q35_prefill(void *st, const int32_t *ids, int n, gem_err *err) { return qwen35_prefill(st, ids, n, err); }
static int q35_logits(void *st, float *dst, gem_err *err) { return qwen35_logits(st, dst, err); }
static int q35_topk(void *st, int k, float *vals, int32_t *ids, gem_err *err) {
    return qwen35_topk(st, k, vals, ids, err);
}
static void q35_reset(void *st) { qwen35_reset(st); }
/* nothing before n_past can be reached by dropping positions */
static int q35_rewind_min(const void *st) { return qwen35_n_past(st); }
static int q35_rewind(void *st, int n) { return n == qwen35_n_past(st) ? 0 : -1; }

static int q35_snap_save(void *st, void **snap, gem_err *err) {
    qwen35_snap *sn = *snap;
    const int rc = qwen35_snap_save(st, &sn, err);
    *snap = sn;
    return rc;
}
static void q35_snap_load(void *st, const void *snap) { qwen35_snap_load(st, snap); }
static int q35_snap_rewind_min(const void *snap) { return qwen35_snap_n_past(snap); }
static int q35_snap_save_host(void *st, void **snap, gem_err *err) {
    qwen35_snap *sn = NULL;
    if (qwen35_snap_save_host(st, &sn, err)) return -1;
    qwen35_snap_free(*snap);
    *snap = sn;
    return 0;
}
static int q35_snap_to_host(const void *src, const void *st, void **snap, gem_err *err) {
    qwen35_snap *sn = NULL;
    if (qwen35_snap_to_host(src, &sn, err)) return -1;
    qwen35_snap_free(*snap);
    *snap = sn;
    return 0;
}
static size_t q35_snap_bytes(const void *snap) { return qwen35_snap_bytes(snap); }
static void q35_snap_free(void *snap) { qwen35_snap_free(snap); }

const model_ops model_qwen35_ops = {
    .open = q35_open,
    .free = q35_free,
    .decode_bytes = q35_decode_bytes,
    .backend_ok = q35_backend_ok,
    .backend_check = q35_backend_check,
    .plan = q35_plan,
    .fit = q35_fit,
    .state_new = q35_state_new,
    .state_free = q35_state_free,
    .n_past = q35_n_past,
    .eval = q35_eval,
    .eval_greedy = q35_eval_greedy,
    .prefill = q35_prefill,
    .logits = q35_logits,
    .topk = q35_topk,
    .reset = q35_reset,
    .rewind_min = q35_rewind_min,
    .rewind = q35_rewind,
    .snap_save = q35_snap_save,
    .snap_load = q35_snap_load,
    .snap_rewind_min = q35_snap_rewind_min,
    .snap_save_host = q35_snap_save_host,
    .snap_to_host = q35_snap_to_host,
    .snap_bytes = q35_snap_bytes,
    .snap_free = q35_snap_free,
};
