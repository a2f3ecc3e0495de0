/* The Qwen3.5 hybrid's forward pass, written once against the backend seam
 * (backend.h), as gemma4_run.h is Gemma 4's.
 *
 * A qwen35_state is one sequence: the resident weights, a KV cache of n_ctx
 * positions per attention layer, and per Gated DeltaNet layer its recurrent
 * state (the conv's last 3 input rows and the d x d delta-rule state of
 * every V head, f32, independent of the context length), plus one prompt
 * tile's activation buffers. Evaluation takes any number of tokens and runs
 * them in tiles; decode is a tile of one. The backend must have the
 * hybrid ops (backend.h conv_silu ... scale_f); one without them is refused
 * with the first missing op named.
 *
 * Unlike a KV cache, recurrent state cannot be truncated: going back to an
 * earlier position needs a checkpoint taken there. qwen35_snap_save copies
 * everything a later evaluation depends on (positions, the attention
 * caches' [0, n_past), the recurrent states, the last logits) so that
 * qwen35_snap_load makes the state exactly what it was, bit for bit; that
 * is what prefix reuse in a server builds on. */
#ifndef GEM_MODEL_QWEN35_RUN_H
#define GEM_MODEL_QWEN35_RUN_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "model/qwen35.h"

typedef struct qwen35_state qwen35_state;

/* -1 with err naming the first hybrid op backend b lacks, else 0. */
int qwen35_backend_check(const backend *b, gem_err *err);

/* A sequence of up to n_ctx positions evaluated in tiles of at most `tile`
 * tokens (0: the backend's prompt_tile). */
/* kv_f16: the attention layers' caches hold f16 entries (backends with
 * kv_f16; else f32, the oracle's). */
qwen35_state *qwen35_state_new(const qwen35_model *m, backend *b, int n_ctx, int tile, int kv_f16, gem_err *err);
void qwen35_state_free(qwen35_state *s);

int qwen35_n_past(const qwen35_state *s);
int qwen35_n_ctx(const qwen35_state *s);

/* Evaluates ids[0..n) at positions n_past.. . logits (may be NULL) gets the
 * last token's n_vocab logits, or every token's (n x n_vocab) when
 * all_logits is set. Fails without changing the state when the context
 * would overflow or an id is outside the vocabulary. */
int qwen35_eval(qwen35_state *s, const int32_t *ids, int n, float *logits, int all_logits, gem_err *err);

/* As qwen35_eval, but only the argmax of the last token's logits (lowest
 * id on ties) comes back, taken on the backend. */
int qwen35_eval_greedy(qwen35_state *s, const int32_t *ids, int n, int32_t *next, gem_err *err);
/* As qwen35_eval without the head (a prompt's tiles before its last): the
 * state advances exactly as eval's; the backend's logits are undefined
 * until the next eval. */
int qwen35_prefill(qwen35_state *s, const int32_t *ids, int n, gem_err *err);
/* The last evaluated token's logits on the backend: all of them, or the k
 * largest (k <= BE_TOPK_MAX; value descending, lowest id first among
 * equals; the backend's topk op). */
int qwen35_logits(qwen35_state *s, float *dst, gem_err *err);
int qwen35_topk(qwen35_state *s, int k, float *vals, int32_t *ids, gem_err *err);

/* What a state of n_ctx positions and prompt tiles of `tile` tokens
 * allocates besides the weights: the attention layers' KV caches (f32,
 * or f16 with kv_f16: kv_bytes, grows with the context), the GDN layers' recurrent states
 * (recurrent_bytes, fixed), the tile's activation buffers (act_bytes);
 * and what an exact checkpoint of a full context takes. */
typedef struct {
    uint64_t kv_bytes, recurrent_bytes, act_bytes, checkpoint_bytes;
} qwen35_mem;
void qwen35_plan(const qwen35_profile *p, int n_ctx, int tile, int kv_f16, qwen35_mem *out);
/* What a session allocates in all (caches, recurrent state, tile buffers) */
static inline uint64_t qwen35_mem_total(const qwen35_mem *m) { return m->kv_bytes + m->recurrent_bytes + m->act_bytes; }

/* Back to an empty sequence (position 0, zero recurrent state). */
void qwen35_reset(qwen35_state *s);

/* Layer il's recurrent state copied to the host: conv (3 x conv_dim floats)
 * and ssm (n_v x d x d, stored as backend.h gated_delta says); -1 when il
 * is an attention layer. For tests and diagnostics. */
int qwen35_recurrent_read(qwen35_state *s, uint32_t il, float *conv, float *ssm);

/* Exact checkpoints kept in the backend's memory (copies enqueued like any
 * op). qwen35_snap_save fills *snap, allocating it when NULL and growing it
 * when too small; -1 with err when the backend has no room. */
typedef struct qwen35_snap qwen35_snap;
int qwen35_snap_save(qwen35_state *s, qwen35_snap **snap, gem_err *err);
void qwen35_snap_load(qwen35_state *s, const qwen35_snap *snap);
int qwen35_snap_n_past(const qwen35_snap *snap);
void qwen35_snap_free(qwen35_snap *snap);

/* Host snapshots: the same contents in host memory, so that many of them
 * (a server's parked sessions) take no device memory. save_host makes *snap
 * (new) from the state; to_host makes *snap (new) from src, a snapshot of
 * either kind. qwen35_snap_load takes either kind; qwen35_snap_save over a
 * host snapshot turns it back into a backend one. bytes: the memory it
 * holds. */
int qwen35_snap_save_host(qwen35_state *s, qwen35_snap **snap, gem_err *err);
int qwen35_snap_to_host(const qwen35_snap *src, qwen35_snap **snap, gem_err *err);
int qwen35_snap_is_host(const qwen35_snap *snap);
size_t qwen35_snap_bytes(const qwen35_snap *snap);

#endif
