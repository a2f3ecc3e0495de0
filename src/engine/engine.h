/* The engine API the CLI and server use: opaque handles, no tensors.
 *
 * A gem_engine is one loaded model: the mmapped file, its validated
 * binding (a family behind model/model.h: Gemma 4, Qwen3.5), its
 * tokenizer, chat format and backend. A gem_session is one sequence on it: KV
 * state, the token history and the logits of the last evaluated token.
 * Sessions share the engine's weights. Different sessions may be used from
 * different threads at once (one session from one thread at a time): the
 * engine takes turns on the backend, and the one-token decode steps of
 * generations running together go through the model as one batched step
 * (one read of the weights for all of them; each session's logits are
 * bitwise what it would get alone, so its answer does not depend on what
 * else runs). A generation alone keeps the one-token path and speculation.
 *
 * Generation has one owner: gem_session_sync (which prefix of a prompt the
 * session can keep) and gem_session_generate (prefill, then decode with
 * detokenization, stop strings and limits). gem run, chat, serve and bench
 * are I/O around these two calls; the lower-level eval calls serve scoring
 * (perplexity) and tests. */
#ifndef GEM_ENGINE_ENGINE_H
#define GEM_ENGINE_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "chat/chat.h"
#include "engine/sampler.h"
#include "grammar/grammar.h"
#include "model/gemma4_kvplan.h" /* gemma4_kv_type: the --kv-type values */
#include "tok/tok.h"
#include "util/err.h"

typedef struct {
    const char *model_path;
    const char *backend; /* "cpu" (default) */
    int cpu_ref;         /* the scalar reference path */
    int threads;         /* 0: all cores */
    int n_ctx;           /* 0: 4096, capped at the model's trained context; more than it: refused */
    int tile;            /* prompt tile, 0: the backend's (CPU 64, CUDA 2048) */
    int compat_llama;    /* reproduce llama.cpp's CPU GELU table (backend_opts.gelu_fp16) */
    gemma4_kv_type kv_type; /* --kv-type: f32 (0, the default), f16, f16-full (gemma4_kvplan.h; Qwen3.5: f32 only) */
    /* Testing: run only the first `layers` layers, then the output norm and
     * head (0 or less: all). Lets backends be compared at a depth where
     * random quantized models have not yet amplified rounding into chaos
     * (tests/cuda/cuda_model.c). */
    int layers;
    /* Testing: the free memory (bytes) the capacity check compares the
     * plan with, instead of asking the device (or the host's
     * MemAvailable); 0: ask. */
    uint64_t mem_free;
    /* An MTP drafter (a gemma4-assistant GGUF that fits the model, checked
     * at open) for speculative decoding, or NULL. */
    const char *mtp_path;
    /* Most decode steps of concurrent generations run as one batched step
     * (0: as many as the backend's row-exact tiles allow, BE_EXACT_ROWS;
     * 1: none, the sessions take turns step by step). */
    int batch_rows;
    /* Sessions the caller will make (gem serve --parallel; 0: one): each
     * keeps its own caches, which the capacity check counts. */
    int sessions;
    /* Tensor parallelism (--tensor-parallel-size, --gpus; docs/tensor-
     * parallel.md): each layer split over this many shards (0 or 1: none).
     * On the CPU backend the shards are in-process (the sharded arithmetic,
     * for tests); on CUDA one per GPU. */
    int shards;
} gem_engine_opts;

typedef struct gem_engine gem_engine;
typedef struct gem_session gem_session;

/* What a session costs (the model's plan of its context, KV type and
 * prompt tile): state_bytes its caches and recurrent state (each session
 * its own), act_bytes a prompt tile's buffers, checkpoint_bytes an exact
 * checkpoint of a full context. */
typedef struct {
    int n_ctx, tile;
    const char *kv_type; /* "f32", "f16", "f16-full" */
    uint64_t state_bytes, act_bytes, checkpoint_bytes;
} gem_mem_plan;

/* Opens the model and its backend, and plans the session's memory (the KV
 * plan of the context, KV type and prompt tile); refuses, before any
 * weight is loaded, a backend or option the model's family cannot run
 * (Qwen3.5: any backend but the CPU, --mtp, f16 caches), a context beyond
 * the trained one, a KV type the
 * backend does not keep, and a plan that does not fit the memory free now
 * (on a GPU: weights + plan + the backend's work reserve against its free
 * memory; on the CPU: the plan + work reserve against MemAvailable, the
 * weights staying in the mapped file), with a message naming the bytes
 * needed and free. Weights are loaded by gem_session_new. */
gem_engine *gem_engine_open(const gem_engine_opts *o, gem_err *err);
void gem_engine_close(gem_engine *e);
const tok *gem_engine_tok(const gem_engine *e);
const char *gem_engine_backend(const gem_engine *e);
const char *gem_engine_profile(const gem_engine *e);
/* Device memory held by the engine's backend (0 on the CPU). */
size_t gem_engine_mem_used(const gem_engine *e);
int gem_engine_n_ctx(const gem_engine *e);
/* The engine's plan: what its sessions allocate. */
const gem_mem_plan *gem_engine_plan(const gem_engine *e);
/* The model's family (general.architecture: "gemma4", "qwen35"), its
 * vocabulary size (logits per token) and chat format (the template and
 * the answer parser to use). */
const char *gem_engine_arch(const gem_engine *e);
uint32_t gem_engine_n_vocab(const gem_engine *e);
chat_format gem_engine_chat_format(const gem_engine *e);
/* Bytes of weights one decode step reads (benchmarks). */
uint64_t gem_engine_decode_bytes(const gem_engine *e);
/* The MTP drafter's profile name, or NULL without one. */
const char *gem_engine_mtp(const gem_engine *e);
/* Batched decode steps run so far, and the rows they carried (their mean
 * is the batch a step had); rows_max: the most a step may carry. */
void gem_engine_batch_stats(gem_engine *e, long *steps, long *rows, int *rows_max);

/* Per-op device times (gem profile): with timing on, every op of the
 * engine's backend waits for the device and adds its device time to its
 * label's row; nothing is recorded or replayed meanwhile, and results are
 * unchanged. Timing covers every session's ops while on (meant for one
 * session alone). -1 with err when the backend has no per-op timings (the
 * CPU). gem_engine_op_times copies up to cap rows in first-use order
 * (emptying the table when clear) and returns how many. */
typedef struct {
    char op[64];
    long calls;
    double seconds;
} gem_op_time;
int gem_engine_op_timing(gem_engine *e, int on, gem_err *err);
int gem_engine_op_times(gem_engine *e, gem_op_time *rows, int cap, int clear);

gem_session *gem_session_new(gem_engine *e, gem_err *err);
void gem_session_free(gem_session *s);
/* Appends tokens; afterwards gem_session_logits holds the next-token logits. */
int gem_session_eval(gem_session *s, const int32_t *ids, int n, gem_err *err);
/* As eval, and copies the logits of every token (n x vocab) into out. */
int gem_session_eval_all(gem_session *s, const int32_t *ids, int n, float *out, gem_err *err);
/* As eval, but only the greedy choice (argmax of the last logits, lowest id
 * on ties) comes back, computed on the backend (the logits stay there and
 * gem_session_logits reads them on demand). */
int gem_session_eval_greedy(gem_session *s, const int32_t *ids, int n, int32_t *next, gem_err *err);
/* Logits of the last evaluated token (read from the backend on first use),
 * or NULL when the last evaluation computed none. */
const float *gem_session_logits(const gem_session *s);
/* The next token drawn by smp from the last evaluated token's logits and
 * the session's history; -1 with err set on failure. Sampling with top-k
 * (sampler_topk) takes the k largest on the backend and reads back only
 * those: the same token as sampler_sample on the whole vocabulary. */
int32_t gem_session_sample(gem_session *s, sampler *smp, gem_err *err);
const int32_t *gem_session_tokens(const gem_session *s, size_t *n);
/* Empties the session, and forgets the checkpoint gem_session_sync keeps. */
void gem_session_reset(gem_session *s);

/* Exact snapshots of a session (tokens, positions, caches, logits), kept in
 * the backend's memory (on a GPU a device copy, enqueued in order: saving
 * costs no host round trip). A checkpoint belongs to its session's engine. */
typedef struct gem_checkpoint gem_checkpoint;
gem_checkpoint *gem_session_save(gem_session *s, gem_err *err);
void gem_session_restore(gem_session *s, const gem_checkpoint *c);
void gem_checkpoint_free(gem_checkpoint *c);

/* ---- parked sessions (a server's prompt cache) ----
 *
 * gem_session_park copies what the session offers gem_session_sync (its
 * live state and its turn checkpoint) into host memory, never the
 * backend's: many parked sessions take no device memory. The session
 * is left as it was. NULL with err set when out of
 * memory or when the session holds nothing.
 *
 * gem_session_unpark copies a parked state into any session of the same
 * engine, in place of what it held (the park stays the caller's; -1 with
 * err set and the session emptied when out of memory): the next
 * gem_session_sync then keeps of a prompt what the parked session would
 * have kept, exactly (the same caches; only the logits after the last
 * token are not kept, so a prompt equal to the parked tokens evaluates its
 * last token again). gem_park_keeps says how many tokens of ids that is
 * (gem_session_keeps: the same for a session as it is), evaluating
 * nothing. gem_park_tokens: the live tokens (the checkpoint's when the
 * live state was empty). gem_park_bytes: the host memory it holds. */
typedef struct gem_park gem_park;
gem_park *gem_session_park(gem_session *s, gem_err *err);
int gem_session_unpark(gem_session *s, const gem_park *p, gem_err *err);
long gem_session_keeps(const gem_session *s, const int32_t *ids, size_t n);
long gem_park_keeps(const gem_park *p, const int32_t *ids, size_t n);
const int32_t *gem_park_tokens(const gem_park *p, size_t *n);
size_t gem_park_bytes(const gem_park *p);
void gem_park_free(gem_park *p);

/* ---- generation ---- */

/* Makes ids[0..n) the prompt of the next gem_session_generate and brings
 * the session to the longest prefix of it that it can keep exactly: the
 * live state when the tokens it holds begin the prompt, or rewound to the
 * common prefix when its sliding-window caches still hold that point
 * (up to BE_EXACT_ROWS positions back: a chat's re-rendered answer with
 * its trailing whitespace trimmed); else the
 * checkpoint the last generate kept (its prompt up to its last turn start
 * <|turn>, or the whole prompt when it has none: the next turn of a chat
 * repeats everything before its last generation prompt, while the
 * generated answer is re-rendered differently) when that begins it;
 * whichever is longer; else an empty state. Returns how many prompt tokens
 * are kept, or -1 with err set (an empty prompt, one that does not fit the
 * context, or an id outside the vocabulary). Evaluates nothing. */
long gem_session_sync(gem_session *s, const int32_t *ids, size_t n, gem_err *err);

typedef enum {
    GEM_FINISH_LENGTH,    /* max_tokens generated, or the context is full */
    GEM_FINISH_STOP,      /* an end-of-generation token, a stop string, or a callback asked */
    GEM_FINISH_CANCELLED, /* poll asked */
    GEM_FINISH_ERROR,     /* err says what failed; the session is emptied */
} gem_finish;

typedef struct {
    gem_sampling sampling;   /* greedy without penalties: argmax on the backend;
                              * top-k sampling: the k largest on the backend */
    long max_tokens;         /* < 0: until the context is full */
    int ignore_eos;          /* end-of-generation tokens are ordinary tokens */
    const char *const *stop; /* n_stop stop strings (lengths in stop_len) */
    const size_t *stop_len;
    int n_stop;
    /* stop strings are not looked for from stop_skip_open to
     * stop_skip_close (both set: a reasoning channel's markers, so a stop
     * string never ends an answer inside its thought) */
    const char *stop_skip_open, *stop_skip_close;
    int stop_skip_inside;    /* the answer starts between them (a prompt that
                              * opens the thought: Qwen3.5's <think>) */
    const int32_t *force;    /* the first n_force tokens are these, not drawn */
    long n_force;
    int want_logits;         /* on_token sees each step's logits (the whole
                              * vocabulary comes back from the backend) */
    int no_checkpoint;       /* keep no turn checkpoint (nothing will reuse
                              * it: one-shot runs, requests without cache) */
    /* Speculative decoding, when the session has a drafter (the engine's
     * MTP model, or a test drafter): up to draft_max tokens drafted per
     * round (0: plain decoding), verified by the target in one row-exact
     * tile; the answer is token for token plain decoding's. Rounds that
     * would draft fewer than draft_min tokens decode plainly; the MTP
     * drafter stops a round early when its top-1 probability falls below
     * draft_p_min, or the product of its top-1 probabilities in the round
     * below draft_p_prod (the proposal that crossed is still verified).
     * With sampling, each verified row's token is drawn as
     * plain decoding draws it (the same seed gives the same answer) and a
     * draft is accepted while it equals the draw. */
    int draft_max, draft_min;
    float draft_p_min, draft_p_prod;
    /* A grammar the answer follows (grammar/grammar.h; structured output),
     * or NULL. Every drawn token is one it allows: the mask goes on the
     * logits before the sampler's chain, and a greedy draw whose
     * unconstrained choice is allowed takes it without a mask (the same
     * token). Forced tokens must be allowed too. The answer ends (STOP) as
     * soon as the grammar can take nothing more, or with an end token once
     * it is complete; a dead end is an error. Near max_tokens the answer
     * closes what it opened (the grammar's shortest completion, once it
     * needs every token left) and ends as STOP: its text parses, though
     * the limit shortened it. want_logits' logits are the model's, before
     * the mask. No speculation under a grammar (drafts are not checked
     * against it). The grammar is the caller's and must outlive the call. */
    const gram *grammar;
    int draft_fixed;         /* draft draft_max every round (benchmarks; the
                              * stop bounds still apply: the CLI clears
                              * draft_p_prod's default with it,
                              * cli_mtp_p_prod); by default the count adapts
                              * to acceptance */
} gem_gen_params;

/* params with sampling gem_sampling_default() (greedy), no limit,
 * draft_max GEM_DRAFT_MAX_DEFAULT and draft_p_prod GEM_DRAFT_P_PROD_DEFAULT
 * (it cuts drafts far more than accepted tokens:
 * bench/results/mtp-pprod-cpu-2026-12-06.json) */
#define GEM_DRAFT_MAX_DEFAULT 8
#define GEM_DRAFT_P_PROD_DEFAULT 0.1f
gem_gen_params gem_gen_params_default(void);

typedef struct {
    int32_t id;
    long index;          /* 0 for the first generated token */
    size_t pos;          /* tokens evaluated before it, prompt included */
    int forced;          /* taken from params.force */
    int end;             /* an end-of-generation token: generation stops
                          * after this call; not part of the answer's text */
    const float *logits; /* the distribution it came from (want_logits) */
} gem_gen_token;

/* Every callback is optional (NULL). ctx is passed to each. */
typedef struct {
    void *ctx;
    /* Each chosen token, end tokens included, before its text goes to
     * on_text. */
    void (*on_token)(void *ctx, const gem_gen_token *t);
    /* The answer's text as it becomes final: whole UTF-8 characters, text
     * that may begin a stop string held back until ruled out, nothing from
     * a stop string on. Nonzero stops (GEM_FINISH_STOP: e.g. the chat
     * parser saw the turn end). */
    int (*on_text)(void *ctx, const char *p, size_t n);
    /* Called before each prompt tile and after each generated token (its
     * text delivered): the place for I/O such as sending a stream's chunk.
     * Nonzero cancels (GEM_FINISH_CANCELLED); the session keeps what it
     * evaluated, a valid state for the next sync. */
    int (*poll)(void *ctx);
    /* Before each prompt tile and once the prompt is in (before the first
     * token): the prompt's tokens in the session so far (those the sync
     * kept included) of its total. For progress reports of long prompts. */
    void (*on_prefill)(void *ctx, long done, long total);
} gem_gen_callbacks;

typedef struct {
    gem_finish finish;
    long n_prompt;       /* the synced prompt's tokens */
    long n_cached;       /* of which gem_session_sync kept */
    long n_generated;    /* tokens of the answer (an end token not counted) */
    double prompt_s;     /* generate's start to the prompt evaluated */
    double first_s;      /* generate's start to the first token chosen */
    double decode_s;     /* the first token chosen to the last */
    long n_rounds;       /* speculative rounds (target verifications) */
    long n_drafted;      /* tokens drafted in them */
    long n_accepted;     /* drafted tokens the target confirmed */
    int stop_index;      /* the stop string that ended the answer (an index
                          * into params.stop), or -1 */
} gem_gen_result;

/* Evaluates the synced prompt's remaining tokens in the backend's tiles
 * (poll between tiles; tiles are never shrunk for it), then generates up
 * to max_tokens: each token forced, or chosen as the sampling parameters
 * say; detokenized incrementally; stopped by an end-of-generation token,
 * a stop string, a callback, the length limit or the context's end. The
 * last token is not evaluated (nothing would read its logits). Keeps the
 * turn checkpoint gem_session_sync describes, unless no_checkpoint, and
 * only where the backend has room for it beside a reserve for its own
 * working memory (a checkpoint is an optimisation, never a failure). 0, or -1 with err set
 * (result.finish GEM_FINISH_ERROR). Needs a gem_session_sync first. */
int gem_session_generate(gem_session *s, const gem_gen_params *p, const gem_gen_callbacks *cb, gem_gen_result *r,
                         gem_err *err);

/* A test drafter for speculative decoding, in place of the engine's MTP
 * model (tests and benchmarks): it proposes ids[q] for position q (an
 * expected sequence, prompt included, e.g. a plain run's output), each
 * proposal right with probability p_right (else a different token), from
 * a stream seeded with seed. n == 0 removes it. Needs a session whose
 * backend is row-exact. */
int gem_session_set_replay(gem_session *s, const int32_t *ids, size_t n, double p_right, uint64_t seed,
                           gem_err *err);

#endif
