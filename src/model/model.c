/* The model seam's dispatch (model.h): picks the family from the file's
 * architecture and wraps the family's objects in the seam's handles. */
#include "model/model.h"

#include <stdlib.h>
#include <string.h>

#include "model/model_impl.h"
#include "model/qwen35.h"

struct model_state {
    gem_model *m;
    void *p;
};

struct model_snap {
    const model_ops *ops;
    void *p;
};

struct model_drafter {
    const model_ops *ops;
    void *p;
};

gem_model *model_open(const gguf_file *f, const char *path, gem_err *err) {
    gem_model *m = calloc(1, sizeof *m);
    if (!m) {
        gem_err_set(err, "out of memory");
        return NULL;
    }
    /* qwen35 by its architecture; anything else goes to Gemma 4's binding,
     * whose messages say what a file that is neither lacks */
    const int64_t ai = gguf_find_key(f, "general.architecture");
    gguf_str arch;
    const int qwen = ai >= 0 && !gguf_kv_str(f, (uint64_t)ai, &arch) && gguf_str_eq(arch, QWEN35_ARCH);
    m->ops = qwen ? &model_qwen35_ops : &model_gemma4_ops;
    if (m->ops->open(m, f, path, err)) {
        model_free(m);
        return NULL;
    }
    return m;
}

void model_free(gem_model *m) {
    if (!m) return;
    if (m->impl) m->ops->free(m);
    free(m);
}

const model_info *model_info_of(const gem_model *m) { return &m->info; }
uint64_t model_decode_bytes(const gem_model *m) { return m->ops->decode_bytes(m); }

int model_backend_ok(const gem_model *m, const char *name, gem_err *err) {
    return m->ops->backend_ok ? m->ops->backend_ok(m, name, err) : 0;
}

int model_mtp_attach(gem_model *m, const char *path, gem_err *err) {
    if (!m->ops->mtp_attach)
        return gem_err_set(err, "--mtp: %s (%s) has no MTP drafter support yet: speculative decoding runs on Gemma 4 "
                           "models only", m->info.profile, m->info.arch);
    return m->ops->mtp_attach(m, path, err);
}

const char *model_mtp_name(const gem_model *m) { return m->ops->mtp_name ? m->ops->mtp_name(m) : NULL; }
const gguf_file *model_mtp_file(const gem_model *m) { return m->ops->mtp_file ? m->ops->mtp_file(m) : NULL; }

int model_backend_check(const gem_model *m, const backend *b, gem_err *err) {
    return m->ops->backend_check ? m->ops->backend_check(m, b, err) : 0;
}

int model_plan_make(gem_model *m, backend *b, const model_plan_opts *o, model_plan *out, gem_err *err) {
    return m->ops->plan(m, b, o, out, err);
}

int model_fit_check(const gem_model *m, int sessions, uint64_t weights, uint64_t reserve, uint64_t free_b,
                    const char *where, gem_err *err) {
    return m->ops->fit(m, sessions, weights, reserve, free_b, where, err);
}

void model_release(gem_model *m) {
    if (m && m->impl && m->ops->release) m->ops->release(m);
}

/* ---- states ---- */

model_state *model_state_new(gem_model *m, backend *b, gem_err *err) {
    model_state *s = calloc(1, sizeof *s);
    if (!s) {
        gem_err_set(err, "out of memory");
        return NULL;
    }
    s->m = m;
    if (!(s->p = m->ops->state_new(m, b, err))) {
        free(s);
        return NULL;
    }
    return s;
}

void model_state_free(model_state *s) {
    if (!s) return;
    s->m->ops->state_free(s->p);
    free(s);
}

int model_n_past(const model_state *s) { return s->m->ops->n_past(s->p); }

int model_eval(model_state *s, const int32_t *ids, int n, float *logits, int all_logits, gem_err *err) {
    return s->m->ops->eval(s->p, ids, n, logits, all_logits, err);
}

int model_eval_greedy(model_state *s, const int32_t *ids, int n, int32_t *next, gem_err *err) {
    return s->m->ops->eval_greedy(s->p, ids, n, next, err);
}

int model_prefill(model_state *s, const int32_t *ids, int n, gem_err *err) {
    return s->m->ops->prefill(s->p, ids, n, err);
}

int model_logits(model_state *s, float *dst, gem_err *err) { return s->m->ops->logits(s->p, dst, err); }

int model_topk(model_state *s, int k, float *vals, int32_t *ids, gem_err *err) {
    return s->m->ops->topk(s->p, k, vals, ids, err);
}

void model_reset(model_state *s) { s->m->ops->reset(s->p); }
int model_rewind_min(const model_state *s) { return s->m->ops->rewind_min(s->p); }
int model_rewind(model_state *s, int n) { return s->m->ops->rewind(s->p, n); }

int model_step_seqs(model_state *const *ss, const int32_t *ids, int n, int32_t *best, gem_err *err) {
    if (n < 1 || n > BE_EXACT_ROWS) return gem_err_set(err, "a batched step of %d rows (1..%d)", n, BE_EXACT_ROWS);
    const model_ops *ops = ss[0]->m->ops;
    if (!ops->step_seqs) return gem_err_set(err, "%s: no batched steps of sequences", ss[0]->m->info.profile);
    void *p[BE_EXACT_ROWS];
    for (int i = 0; i < n; i++) p[i] = ss[i]->p;
    return ops->step_seqs(p, ids, n, best, err);
}

/* ---- snapshots ---- */

static int snap_done(model_snap **snap, int made, int rc) {
    /* a wrapper made here for a family call that failed before making its
     * object is dropped (the caller frees a half-made one) */
    if (made && !(*snap)->p) {
        free(*snap);
        *snap = NULL;
    }
    return rc;
}

static model_snap *snap_wrap(const model_ops *ops, model_snap **snap, int *made, gem_err *err) {
    *made = 0;
    if (*snap) return *snap;
    if (!(*snap = calloc(1, sizeof **snap))) {
        gem_err_set(err, "out of memory for a checkpoint");
        return NULL;
    }
    (*snap)->ops = ops;
    *made = 1;
    return *snap;
}

int model_snap_save(model_state *s, model_snap **snap, gem_err *err) {
    int made;
    model_snap *w = snap_wrap(s->m->ops, snap, &made, err);
    if (!w) return -1;
    return snap_done(snap, made, s->m->ops->snap_save(s->p, &w->p, err));
}

void model_snap_load(model_state *s, const model_snap *snap) { s->m->ops->snap_load(s->p, snap->p); }
int model_snap_rewind_min(const model_snap *snap) { return snap->ops->snap_rewind_min(snap->p); }

int model_snap_save_host(model_state *s, model_snap **snap, gem_err *err) {
    int made;
    model_snap *w = snap_wrap(s->m->ops, snap, &made, err);
    if (!w) return -1;
    return snap_done(snap, made, s->m->ops->snap_save_host(s->p, &w->p, err));
}

int model_snap_to_host(const model_snap *src, const model_state *s, model_snap **snap, gem_err *err) {
    int made;
    model_snap *w = snap_wrap(s->m->ops, snap, &made, err);
    if (!w) return -1;
    return snap_done(snap, made, s->m->ops->snap_to_host(src->p, s->p, &w->p, err));
}

size_t model_snap_bytes(const model_snap *snap) { return snap->p ? snap->ops->snap_bytes(snap->p) : 0; }

void model_snap_free(model_snap *snap) {
    if (!snap) return;
    if (snap->p) snap->ops->snap_free(snap->p);
    free(snap);
}

/* ---- speculative verification ---- */

int model_spec_init(model_state *s, int rows, gem_err *err) {
    if (!s->m->ops->spec_init)
        return gem_err_set(err, "speculative decoding: %s (%s) has no exact verification tiles (a rejected draft "
                           "cannot be dropped from its state)", s->m->info.profile, s->m->info.arch);
    return s->m->ops->spec_init(s->p, rows, err);
}

int model_spec_rows(const model_state *s) { return s->m->ops->spec_rows ? s->m->ops->spec_rows(s->p) : 0; }

int model_verify(model_state *s, const int32_t *ids, int n, int32_t *best, float *logits, gem_err *err) {
    if (!s->m->ops->verify) return gem_err_set(err, "%s: no verification tiles", s->m->info.profile);
    return s->m->ops->verify(s->p, ids, n, best, logits, err);
}

void model_spec_keep(model_state *s, int keep) {
    if (s->m->ops->spec_keep) s->m->ops->spec_keep(s->p, keep);
}

/* ---- the MTP drafter ---- */

model_drafter *model_drafter_new(model_state *s, gem_err *err) {
    const model_ops *ops = s->m->ops;
    if (!ops->drafter_new) {
        gem_err_set(err, "%s: no MTP drafter", s->m->info.profile);
        return NULL;
    }
    model_drafter *d = calloc(1, sizeof *d);
    if (!d) {
        gem_err_set(err, "out of memory");
        return NULL;
    }
    d->ops = ops;
    if (!(d->p = ops->drafter_new(s->m, s->p, err))) {
        free(d);
        return NULL;
    }
    return d;
}

void model_drafter_free(model_drafter *d) {
    if (!d) return;
    d->ops->drafter_free(d->p);
    free(d);
}

int model_draft_step(model_drafter *d, int32_t id, int first, int32_t *next, float *p_top, gem_err *err) {
    return d->ops->draft_step(d->p, id, first, next, p_top, err);
}
