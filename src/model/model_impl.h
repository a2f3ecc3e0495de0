/* Inside the model seam (model.h): the table a family fills and the
 * handles' layouts. Only src/model/model*.c include this. A family's
 * functions take its own objects as void pointers (its state, snapshot,
 * drafter); model.c wraps them in the seam's handles. Optional entries
 * (after step_seqs) are NULL where the family lacks the capability. */
#ifndef GEM_MODEL_MODEL_IMPL_H
#define GEM_MODEL_MODEL_IMPL_H

#include "model/model.h"

typedef struct {
    int (*open)(gem_model *m, const gguf_file *f, const char *path, gem_err *err); /* sets impl and info */
    void (*free)(gem_model *m);
    uint64_t (*decode_bytes)(const gem_model *m);
    int (*backend_ok)(const gem_model *m, const char *name, gem_err *err);
    int (*backend_check)(const gem_model *m, const backend *b, gem_err *err);
    int (*plan)(gem_model *m, backend *b, const model_plan_opts *o, model_plan *out, gem_err *err);
    int (*fit)(const gem_model *m, int sessions, uint64_t weights, uint64_t reserve, uint64_t free_b,
               const char *where, gem_err *err);
    void (*release)(gem_model *m);

    void *(*state_new)(gem_model *m, backend *b, gem_err *err);
    void (*state_free)(void *st);
    int (*n_past)(const void *st);
    int (*eval)(void *st, const int32_t *ids, int n, float *logits, int all_logits, gem_err *err);
    int (*eval_greedy)(void *st, const int32_t *ids, int n, int32_t *next, gem_err *err);
    int (*prefill)(void *st, const int32_t *ids, int n, gem_err *err);
    int (*logits)(void *st, float *dst, gem_err *err);
    int (*topk)(void *st, int k, float *vals, int32_t *ids, gem_err *err);
    void (*reset)(void *st);
    int (*rewind_min)(const void *st);
    int (*rewind)(void *st, int n);

    int (*snap_save)(void *st, void **snap, gem_err *err);
    void (*snap_load)(void *st, const void *snap);
    int (*snap_rewind_min)(const void *snap);
    int (*snap_save_host)(void *st, void **snap, gem_err *err);
    int (*snap_to_host)(const void *src, const void *st, void **snap, gem_err *err);
    size_t (*snap_bytes)(const void *snap);
    void (*snap_free)(void *snap);

    /* optional */
    int (*step_seqs)(void *const *ss, const int32_t *ids, int n, int32_t *best, gem_err *err);
    int (*spec_init)(void *st, int rows, gem_err *err);
    int (*spec_rows)(const void *st);
    int (*verify)(void *st, const int32_t *ids, int n, int32_t *best, float *logits, gem_err *err);
    void (*spec_keep)(void *st, int keep);
    int (*mtp_attach)(gem_model *m, const char *path, gem_err *err);
    const char *(*mtp_name)(const gem_model *m);
    const gguf_file *(*mtp_file)(const gem_model *m);
    void *(*drafter_new)(gem_model *m, void *st, gem_err *err);
    void (*drafter_free)(void *d);
    int (*draft_step)(void *d, int32_t id, int first, int32_t *next, float *p_top, gem_err *err);
} model_ops;

struct gem_model {
    const model_ops *ops;
    model_info info;
    void *impl; /* the family's */
};

extern const model_ops model_gemma4_ops, model_qwen35_ops;

#endif
