/* The model seam: what the engine asks of a model family, so that one
 * engine (one decode loop, one prefix policy, one server) runs every
 * family gem knows. Each family implements it once (model_gemma4.c over
 * gemma4_run.h, model_qwen35.c over qwen35_run.h); the family is picked by
 * the file's general.architecture (qwen35, else Gemma 4, whose binding
 * names what is wrong with any other file).
 *
 * Handles are opaque: a gem_model is a bound model with its session plan
 * and the weights its states share; a model_state is one sequence on it; a
 * model_snap an exact copy of a state (on the backend, or in host memory).
 *
 * What only some families can do is a capability (model_info.caps), and
 * the engine asks before it relies on it:
 *   MODEL_CAP_STEP_SEQS  one-token steps of several states in one tile
 *                        (each bitwise its own step): batched decode;
 *   MODEL_CAP_REWIND     dropping the newest positions exactly (Gemma's
 *                        sliding rings keep a few slots beyond the
 *                        window); without it model_rewind_min is n_past:
 *                        a state goes back only through a snapshot (a
 *                        recurrent state cannot be truncated);
 *   MODEL_CAP_SPEC       row-exact verification tiles whose rejected rows
 *                        can be dropped (speculative decoding);
 *   MODEL_CAP_MTP        an MTP drafter beside the model (--mtp). */
#ifndef GEM_MODEL_MODEL_H
#define GEM_MODEL_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "gguf/gguf.h"
#include "util/err.h"

typedef struct gem_model gem_model;
typedef struct model_state model_state;
typedef struct model_snap model_snap;
typedef struct model_drafter model_drafter;

enum { MODEL_CAP_STEP_SEQS = 1, MODEL_CAP_REWIND = 2, MODEL_CAP_SPEC = 4, MODEL_CAP_MTP = 8 };

typedef struct {
    const char *arch;        /* the family: "gemma4", "qwen35" */
    const char *profile;     /* the profile's name: "gemma4-31b", "qwen35-tiny" */
    uint32_t n_vocab;        /* logits per token */
    const char *turn_marker; /* the token text a chat turn starts with (where
                              * gem_session_sync's checkpoint goes), or NULL */
    unsigned caps;           /* MODEL_CAP_* */
} model_info;

/* What a session costs, planned before anything is loaded. */
typedef struct {
    int n_ctx;              /* positions a session holds */
    int tile;               /* tokens per prompt tile */
    const char *kv_type;    /* "f32", "f16", "f16-full" */
    uint64_t state_bytes;   /* a session's caches and recurrent state */
    uint64_t act_bytes;     /* the tile's activation buffers */
    uint64_t checkpoint_bytes; /* an exact checkpoint of a full context */
} model_plan;

typedef struct {
    int n_ctx;        /* 0: the family's default, capped at the trained context */
    int kv_type;      /* engine.h's --kv-type value (0: f32) */
    const char *kv_type_name;
    int tile;         /* 0: the backend's */
    int layers;       /* testing: the first `layers` layers only (0: all) */
} model_plan_opts;

/* Binds the file's model (the file must outlive it); path names it in
 * messages. Refuses what is not a model to run (an MTP drafter file). */
gem_model *model_open(const gguf_file *f, const char *path, gem_err *err);
/* Frees the model; model_release must have run if a backend was used. */
void model_free(gem_model *m);
const model_info *model_info_of(const gem_model *m);
/* Bytes one decode step reads (the weights; for benchmarks). */
uint64_t model_decode_bytes(const gem_model *m);

/* Whether backend `name` can run the model, asked before it is created:
 * -1 with err naming what is missing. */
int model_backend_ok(const gem_model *m, const char *name, gem_err *err);
/* An MTP drafter file for the model (checked that it fits); -1 with err
 * when it does not, or when the family has none (no MODEL_CAP_MTP). */
int model_mtp_attach(gem_model *m, const char *path, gem_err *err);
/* The drafter's profile name and file, or NULL without one. */
const char *model_mtp_name(const gem_model *m);
const gguf_file *model_mtp_file(const gem_model *m);
/* After the backend is made: -1 with err when it lacks what the model (or
 * its drafter) needs. */
int model_backend_check(const gem_model *m, const backend *b, gem_err *err);
/* Plans a session on b (the context resolved against the trained one, the
 * KV type checked against the backend); kept in the model for its states. */
int model_plan_make(gem_model *m, backend *b, const model_plan_opts *o, model_plan *out, gem_err *err);
/* Whether `sessions` sessions fit: resident weights + their plans + the
 * backend's reserve against free_b bytes of `where`; -1 with a message
 * naming the bytes (and what would fit instead, where the family knows). */
int model_fit_check(const gem_model *m, int sessions, uint64_t weights, uint64_t reserve, uint64_t free_b,
                    const char *where, gem_err *err);
/* Frees what the model holds on its backend (shared weights, the
 * drafter's); after every state is freed, before the backend goes. */
void model_release(gem_model *m);

/* ---- states ---- */
/* A sequence on b as the plan says (the first one makes the weights
 * resident; later ones share them). */
model_state *model_state_new(gem_model *m, backend *b, gem_err *err);
void model_state_free(model_state *s);
int model_n_past(const model_state *s);
/* Evaluates ids at positions n_past..: logits (may be NULL) gets the last
 * token's, or every token's (n x n_vocab) with all_logits; the last
 * token's logits stay on the backend either way. */
int model_eval(model_state *s, const int32_t *ids, int n, float *logits, int all_logits, gem_err *err);
/* As eval; only the argmax of the last token's logits comes back. */
int model_eval_greedy(model_state *s, const int32_t *ids, int n, int32_t *next, gem_err *err);
/* As eval without the head (a prompt's tiles before its last). */
int model_prefill(model_state *s, const int32_t *ids, int n, gem_err *err);
/* The last evaluated token's logits: all, or the k largest (k <=
 * BE_TOPK_MAX, value descending, lowest id first among equals). */
int model_logits(model_state *s, float *dst, gem_err *err);
int model_topk(model_state *s, int k, float *vals, int32_t *ids, gem_err *err);
/* Back to an empty sequence. */
void model_reset(model_state *s);
/* The lowest n to which model_rewind drops positions exactly (n_past
 * without MODEL_CAP_REWIND); model_rewind: -1, nothing changed, below it. */
int model_rewind_min(const model_state *s);
int model_rewind(model_state *s, int n);
/* One decode step of each of n states (MODEL_CAP_STEP_SEQS; 1..
 * BE_EXACT_ROWS, distinct): each left exactly as its own eval_greedy of
 * one token leaves it; best[i] its argmax. */
int model_step_seqs(model_state *const *ss, const int32_t *ids, int n, int32_t *best, gem_err *err);

/* ---- snapshots ----
 * Backend snapshots (model_snap_save: filled in place, allocated when
 * *snap is NULL) and host ones (save_host, to_host: host memory, so that
 * many parked sessions take no device memory; loading one leaves the
 * logits undefined until the next eval). load takes either kind. */
int model_snap_save(model_state *s, model_snap **snap, gem_err *err);
void model_snap_load(model_state *s, const model_snap *snap);
int model_snap_rewind_min(const model_snap *snap);
int model_snap_save_host(model_state *s, model_snap **snap, gem_err *err);
int model_snap_to_host(const model_snap *src, const model_state *s, model_snap **snap, gem_err *err);
size_t model_snap_bytes(const model_snap *snap);
void model_snap_free(model_snap *snap);

/* ---- speculative verification (MODEL_CAP_SPEC; gemma4_run.h) ---- */
int model_spec_init(model_state *s, int rows, gem_err *err);
int model_spec_rows(const model_state *s);
int model_verify(model_state *s, const int32_t *ids, int n, int32_t *best, float *logits, gem_err *err);
void model_spec_keep(model_state *s, int keep);

/* ---- the MTP drafter (MODEL_CAP_MTP, with model_mtp_attach) ---- */
model_drafter *model_drafter_new(model_state *s, gem_err *err);
void model_drafter_free(model_drafter *d);
int model_draft_step(model_drafter *d, int32_t id, int first, int32_t *next, float *p_top, gem_err *err);

#endif
