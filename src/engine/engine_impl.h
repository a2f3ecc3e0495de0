/* Inside the engine: the handles' layouts and the helpers engine.c (the
 * handles, eval, checkpoints) and generate.c (sync and generate) share.
 * Nothing outside src/engine includes this. */
#ifndef GEM_ENGINE_ENGINE_IMPL_H
#define GEM_ENGINE_ENGINE_IMPL_H

#include <pthread.h>

#include "backend/backend.h"
#include "engine/engine.h"
#include "engine/spec_policy.h"
#include "gguf/gguf.h"
#include "model/model.h"

/* Tokens a turn marker may take. */
#define ENGINE_TURN_MAX 16

/* A session's one-token decode step waiting to be run in a batch. */
typedef struct step_req {
    gem_session *s;
    int32_t id, best;
    int done, rc;
    double t; /* when it was posted */
    gem_err err;
    struct step_req *next;
} step_req;

struct gem_engine {
    gguf_file *file;
    gem_model *model; /* the family behind the seam (model/model.h), its MTP drafter and shared weights */
    const model_info *info;
    uint32_t n_vocab;
    chat_format chat;
    tok *tok;
    backend *be;
    int n_ctx, tile;
    gem_mem_plan plan; /* what a session allocates (gem_engine_open checked it fits) */
    /* the turn marker's tokens (<|turn>, <|im_start|>: one special token;
     * a test vocabulary without it spells it in several), where
     * gem_session_sync's checkpoints go; n_turn 0: none */
    int32_t turn_ids[ENGINE_TURN_MAX];
    int n_turn;
    int n_sessions;
    /* The gate (engine.c): sessions may run on different threads, and the
     * backend runs one op sequence at a time: a thread holds the gate
     * (gate_busy) for each sequence it enqueues. One-token decode steps
     * of concurrent generations are posted (pending) and run together as
     * one batched step by whichever waiting thread finds the gate free.
     * Everything below is under mu. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int gate_busy;
    /* threads waiting in gate_enter, and the gate's acquisitions so far: a
     * generation stepping alone lets such a waiter in before its next
     * step (session_step), else its back-to-back steps starve the others'
     * prompts and they never decode beside it */
    int n_waiting;
    unsigned gate_gen;
    step_req *pending, *pending_tail;
    int n_pending;
    int n_decoding; /* generations past their prompt, not yet ended */
    int batch_rows; /* rows a batched step may carry (1: none) */
    long n_batches, n_batched_rows; /* batched steps run, and their rows (stats) */
    double t_free, step_s; /* when the last batched step ended, and how long it took */
    /* the gate's last holder was a batched step: a yielding gate_enter
     * (a prompt's chunk) then goes before the next batch, so prompts and
     * decode batches alternate and neither starves the other */
    int last_was_batch;
    /* the vocabulary's trie and mask caches for grammars, built on the
     * first constrained generation (under mu; the caches lock themselves) */
    gram_vocab *gv;
};

struct gem_checkpoint {
    model_snap *snap;
    int32_t *tokens;
    size_t n_tokens, cap;
    int next_ok; /* the snapshot holds the logits after its last token */
};

struct gem_session {
    gem_engine *e;
    model_state *st;
    int32_t *tokens;
    size_t n_tokens, cap;
    float *logits;
    int logits_valid; /* logits holds the last token's logits */
    int logits_dev;   /* the backend holds them (read lazily: sampling with
                       * top-k reads only k of them, see gem_session_sample) */
    /* gem_session_sync / gem_session_generate (generate.c) */
    gem_checkpoint *ck; /* the turn checkpoint of the last generate */
    int32_t *prompt;    /* the synced prompt */
    size_t n_prompt, prompt_cap, n_kept;
    int synced;
    /* speculative decoding (spec.c): the MTP drafter, or the test drafter */
    model_drafter *mtp;
    int32_t *replay;
    size_t n_replay;
    double replay_p;
    uint64_t replay_rng;
    /* the draft-count policy and what it measured, kept across generations
     * (a server's requests, a chat's turns) while its settings stay */
    spec_policy pol;
    int pol_set;
};

/* The gate (see struct gem_engine). gate_enter waits until the backend is
 * free and takes it; with yield (a prompt tile, which may run long),
 * decode steps posted by other sessions run first, so streams keep going
 * while a long prompt is prefilled. */
void gate_enter(gem_engine *e, int yield);
void gate_leave(gem_engine *e);
/* The one-token step of id (the session's newest token) with the greedy
 * choice after it in *next: the ordinary step while this is the only
 * generation decoding, else posted and run in a batch with the other
 * sessions' steps (the same result: model_step_seqs). Called without the
 * gate. */
int session_step(gem_session *s, int32_t id, int32_t *next, gem_err *err);
/* A generation enters (+1) or leaves (-1) its decode phase. */
void session_decoding(gem_session *s, int delta);
/* 1 when no other generation of the engine is decoding (speculative
 * rounds, which take the backend for a whole round, run only then). */
int session_alone(gem_session *s);
/* The gate-free forms of the public calls, for callers holding the gate. */
int sess_eval(gem_session *s, const int32_t *ids, int n, gem_err *err);
int sess_eval_greedy(gem_session *s, const int32_t *ids, int n, int32_t *next, gem_err *err);
const float *sess_logits(gem_session *s);
int32_t sess_sample(gem_session *s, sampler *smp, gem_err *err);
void sess_restore(gem_session *s, const gem_checkpoint *c);

/* The prefix policy (generate.c, engine.h gem_session_sync) over what a
 * session, live or parked, offers: its live tokens (whether the logits
 * after them are held; the lowest point it rewinds to exactly,
 * model_rewind_min: its n_past where the model cannot rewind) and its turn checkpoint (or NULL). How many of
 * ids[0..n) (n > 0) it keeps, and how. */
typedef struct {
    const int32_t *t;
    size_t n;
    int next_ok, rewind_min;
    const gem_checkpoint *ck;
} keep_src;
typedef enum { KEEP_NONE, KEEP_LIVE, KEEP_REWIND, KEEP_CK } keep_how;
size_t keep_plan(const keep_src *k, const int32_t *ids, size_t n, keep_how *how);

/* Appends ids to the session's history. */
int session_remember(gem_session *s, const int32_t *ids, int n, gem_err *err);
/* Evaluates ids without computing logits (a prompt's tiles before its last). */
int session_prefill(gem_session *s, const int32_t *ids, int n, gem_err *err);
/* Waits until the backend has done the work enqueued so far. */
void session_wait(gem_session *s);
/* Empties the live state; the checkpoint stays. */
void session_clear(gem_session *s);
/* Saves the session's state into c (its buffers reused). */
int checkpoint_fill(gem_session *s, gem_checkpoint *c, gem_err *err);

/* ---- speculative decoding (spec.c) ---- */
/* Rows the speculative tiles may carry: a round's drafts plus its root. */
#define SPEC_ROWS BE_EXACT_ROWS
/* Sets up the engine's MTP drafter for a new session (nothing when the
 * engine has none). */
int spec_session_init(gem_session *s, gem_err *err);
void spec_session_free(gem_session *s);
int spec_has_drafter(const gem_session *s);
/* Up to m drafts after id (fewer when the verification tile is smaller:
 * model_spec_rows - 1), the next token at the session's position; returns
 * how many (0..m), or -1 with err set. */
int spec_draft(gem_session *s, int32_t id, int m, float p_min, float p_prod, int32_t *out, gem_err *err);
/* Evaluates ids[0..n) as one verification tile: best[i] is the target's
 * argmax after ids[i], logits (when not NULL) every row's logits (n x
 * vocabulary). spec_keep(s, n, keep) then keeps the first keep rows of
 * the n the session holds now from that tile (n: the tile's rows, or fewer
 * after an earlier spec_keep of the same tile). */
int spec_verify(gem_session *s, const int32_t *ids, int n, int32_t *best, float *logits, gem_err *err);
void spec_keep(gem_session *s, int n, int keep);

#endif
