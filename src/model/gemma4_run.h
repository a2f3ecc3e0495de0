/* The Gemma 4 forward pass, written once against the backend seam.
 *
 * A gemma4_state holds the resident weights, the per-layer KV caches (a
 * ring of window + slack positions for sliding layers, n_ctx positions for
 * full layers, as its KV plan says) and the activation buffers of one
 * prompt tile. Evaluation takes
 * any number of tokens and runs them in tiles; decode is a tile of one.
 * State can be checkpointed and restored exactly (positions and both caches). */
#ifndef GEM_MODEL_GEMMA4_RUN_H
#define GEM_MODEL_GEMMA4_RUN_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "model/gemma4.h"
#include "model/gemma4_kvplan.h"

typedef struct gemma4_state gemma4_state;

/* The ring slack a backend's sessions keep (BE_EXACT_ROWS where rows are
 * exact, else none): what its KV plans take. */
int gemma4_ring_slack(const backend *b);

/* Layer il's cache on backend b as the plan says; NULL with err when the
 * backend refuses (no memory, an entry type it does not keep) or holds
 * other than the plan's bytes (an internal error, named). */
be_kv *gemma4_kv_alloc(const gemma4_kv_plan *plan, backend *b, uint32_t il, gem_err *err);

/* The weights (made resident once) and the prompt tile's activation
 * buffers (the plan's G4T_H..G4T_DOWN), shared by the states of one model
 * on one backend: parallel sessions of an engine. States made on a core
 * must be freed before it; their calls must not overlap (one backend runs
 * one op sequence at a time). layers: run only the first `layers` layers
 * before the output norm and head (testing; 0 or less, or more than the
 * model has: all). */
typedef struct gemma4_core gemma4_core;
gemma4_core *gemma4_core_new(const gemma4_model *m, backend *b, const gemma4_kv_plan *plan, int layers,
                             gem_err *err);
void gemma4_core_free(gemma4_core *c);
int gemma4_core_max_tile(const gemma4_core *c);
/* A sequence on core c allocating the plan's caches and its per-state
 * buffers (G4T_LAST..): the plan's context, KV types, ring slack (which
 * must be gemma4_ring_slack(b)) and tile (the core's). */
gemma4_state *gemma4_state_on(gemma4_core *c, const gemma4_kv_plan *plan, gem_err *err);

/* A state with a core of its own (freed with it): exactly `plan`
 * (gemma4_kvplan.h) beside the model's weights. */
gemma4_state *gemma4_state_new(const gemma4_model *m, backend *b, const gemma4_kv_plan *plan, int layers,
                               gem_err *err);
void gemma4_state_free(gemma4_state *s);

int gemma4_n_past(const gemma4_state *s);
int gemma4_n_ctx(const gemma4_state *s);

/* Evaluates ids[0..n) at positions n_past.. . Logits (soft-capped) go to
 * `logits`: of the last token only (GEMMA4_N_VOCAB floats), or of every
 * token (n x GEMMA4_N_VOCAB) when all_logits is set; logits may be NULL:
 * the last token's logits stay on the backend either way (gemma4_logits,
 * gemma4_topk). Fails without changing the state when the context would
 * overflow. */
int gemma4_eval(gemma4_state *s, const int32_t *ids, int n, float *logits, int all_logits, gem_err *err);

/* As gemma4_eval, but only the argmax of the last token's logits (lowest id
 * on ties) comes back: on a GPU one number instead of the vocabulary, and a
 * decode step is one replay of a recorded graph. */
int gemma4_eval_greedy(gemma4_state *s, const int32_t *ids, int n, int32_t *next, gem_err *err);

/* As gemma4_eval without the head: the tokens enter the caches and no
 * logits are computed (a prompt's tiles before its last); the backend's
 * logits are undefined until the next eval. */
int gemma4_prefill(gemma4_state *s, const int32_t *ids, int n, gem_err *err);

/* The last evaluated token's logits on the backend (any eval leaves them):
 * all of them, or only their k largest (value descending, lowest id first
 * among equals; k <= BE_TOPK_MAX). Valid until the next eval or reset (a
 * snapshot load brings back the snapshot's). */
int gemma4_logits(gemma4_state *s, float *dst, gem_err *err);
int gemma4_topk(gemma4_state *s, int k, float *vals, int32_t *ids, gem_err *err);

/* One decode step of each of n (1..BE_EXACT_ROWS, at most the tile)
 * distinct states of one core: ids[i] at ss[i]'s next position, in one
 * tile (the weights read once for all rows). Each state is left exactly as
 * its own one-token gemma4_eval_greedy leaves it (logits, argmax, hidden
 * state: the backend's rows are exact and attention_seqs attends each row
 * alone); best, when not NULL, receives every row's argmax. Needs a
 * backend with attention_seqs. Fails without changing any state when a
 * context would overflow. */
int gemma4_step_seqs(gemma4_state *const *ss, const int32_t *ids, int n, int32_t *best, gem_err *err);

/* Forgets everything after position n (n <= n_past). Only n == 0 or a
 * snapshot load is exact for sliding layers; see gemma4_snap_load. */
void gemma4_reset(gemma4_state *s);

/* Whether dropping the positions from n on (n <= n_past) leaves the state
 * exactly as if only the first n had been evaluated: full-attention caches
 * always can; a sliding layer's ring needs the window's keys before n still
 * in place (its BE_EXACT_ROWS slots beyond the window cover a rewind of
 * that many positions, less after a verification's dropped rows used
 * them). gemma4_rewind drops them (-1, nothing changed, when not ok); the
 * last token's logits and hidden state are then undefined until the next
 * eval. */
int gemma4_rewind_ok(const gemma4_state *s, int n);
int gemma4_rewind(gemma4_state *s, int n);
/* The lowest n gemma4_rewind_ok allows (up to n_past): a prefix policy
 * can weigh a rewind without the state at hand (gemma4_snap_rewind_min). */
int gemma4_rewind_min(const gemma4_state *s);

/* ---- speculative verification ----
 *
 * gemma4_spec_init readies the state for verifying up to `rows` tokens at
 * a time (rows <= BE_EXACT_ROWS; at any point). On a row-exact backend the
 * sliding rings always keep BE_EXACT_ROWS slots beyond the window, so
 * that positions a rejected verification wrote can be dropped without
 * losing a key a later query needs (a dropped position p overwrote the
 * slot of p - capacity, which stays older than every later query's
 * window). -1 when the backend is not row-exact. */
int gemma4_spec_init(gemma4_state *s, int rows, gem_err *err);
/* The rows a verification may carry: what gemma4_spec_init granted (at
 * most the prompt tile), 0 without it. */
int gemma4_spec_rows(const gemma4_state *s);

/* Evaluates ids[0..n) (n <= the spec rows) as one tile whose every row is
 * computed exactly as a one-token decode step (the backend is row-exact),
 * with the head on every row: best[i] is the argmax after ids[i] (lowest
 * id on ties); logits, when not NULL, receives all n rows (n x vocab).
 * Then gemma4_spec_keep decides how many of the rows stay. */
int gemma4_verify(gemma4_state *s, const int32_t *ids, int n, int32_t *best, float *logits, gem_err *err);
/* Keeps the first `keep` (1..n) rows of the last gemma4_verify: positions
 * after them are dropped, and the last token's logits, argmax and hidden
 * state become row keep-1's, exactly as if only those tokens had been
 * evaluated one by one. */
void gemma4_spec_keep(gemma4_state *s, int keep);

/* The target's final hidden state after the last evaluated token (the
 * output norm's result, before the head): an MTP drafter's input. -1 when
 * the last evaluation computed no head (gemma4_prefill). */
int gemma4_hidden(const gemma4_state *s, const be_buf **buf, size_t *off);
/* What an MTP drafter reads of its target: the backend, the token
 * embedding, and the caches of the last sliding and last full layer. */
backend *gemma4_state_backend(const gemma4_state *s);
const be_weight *gemma4_state_embd(const gemma4_state *s);
be_kv *gemma4_state_kv(const gemma4_state *s, uint32_t layer);
const gemma4_model *gemma4_state_model(const gemma4_state *s);

/* Exact snapshots of positions, caches, the last token's logits and hidden state, kept
 * in the backend's memory: saving and loading are copies enqueued like any
 * op (no host round trip). gemma4_snap_save fills *snap, allocating it
 * when NULL and growing it when too small; -1 with err when the backend
 * has no room (the snapshot is then unusable: free it). A snapshot belongs
 * to one state's backend. */
typedef struct gemma4_snap gemma4_snap;
int gemma4_snap_save(gemma4_state *s, gemma4_snap **snap, gem_err *err);
/* Loads a snapshot of either kind (below). The state's rings come back
 * exactly, with the reach of a later rewind (gemma4_rewind_min) the saved
 * state's. */
void gemma4_snap_load(gemma4_state *s, const gemma4_snap *snap);
int gemma4_snap_n_past(const gemma4_snap *snap);
/* gemma4_rewind_min of the state the snapshot was taken from. */
int gemma4_snap_rewind_min(const gemma4_snap *snap);
void gemma4_snap_free(gemma4_snap *snap);

/* Host snapshots: the caches' bytes alone (kv_save's), in host memory, so
 * that many of them (a server's parked sessions) take no device memory.
 * Loading one leaves the logits and hidden state undefined until the next
 * eval (they are not kept: a parked state is always extended). save_host
 * makes *snap (new) from the state; to_host makes *snap (new) from src, a
 * snapshot of state s of either kind (a host one is copied). gemma4_snap_save over a host
 * snapshot turns it back into a backend one. */
int gemma4_snap_save_host(gemma4_state *s, gemma4_snap **snap, gem_err *err);
int gemma4_snap_to_host(const gemma4_snap *src, const gemma4_state *s, gemma4_snap **snap, gem_err *err);
int gemma4_snap_is_host(const gemma4_snap *snap);
/* The memory a snapshot takes: a host one's bytes, a backend one's buffer. */
size_t gemma4_snap_bytes(const gemma4_snap *snap);

#endif
