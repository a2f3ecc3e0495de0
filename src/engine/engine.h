/* The engine API the CLI and server use: opaque handles, no tensors.
 *
 * A gem_engine is one loaded model: the mmapped file, its validated Gemma 4
 * binding, tokenizer and backend. A gem_session is one sequence on it: KV
 * state, the token history and the logits of the last evaluated token.
 * Sessions of one engine must not run concurrently (one backend stream). */
#ifndef GEM_ENGINE_ENGINE_H
#define GEM_ENGINE_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "tok/tok.h"
#include "util/err.h"

typedef struct {
    const char *model_path;
    const char *backend; /* "cpu" (default) */
    int cpu_ref;         /* the scalar reference path */
    int threads;         /* 0: all cores */
    int n_ctx;           /* 0: 4096, capped at the model's trained context */
    int tile;            /* prompt tile, 0: the backend's (CPU 64, CUDA 512) */
    int compat_llama;    /* reproduce llama.cpp's CPU GELU table (backend_opts.gelu_fp16) */
    int kv_f16;          /* --kv-type f16 (backend_opts.kv_f16) */
    /* Testing: run only the first `layers` layers, then the output norm and
     * head (0 or less: all). Lets backends be compared at a depth where
     * random quantized models have not yet amplified rounding into chaos
     * (tests/cuda/cuda_model.c). */
    int layers;
} gem_engine_opts;

typedef struct gem_engine gem_engine;
typedef struct gem_session gem_session;

gem_engine *gem_engine_open(const gem_engine_opts *o, gem_err *err);
void gem_engine_close(gem_engine *e);
const tok *gem_engine_tok(const gem_engine *e);
const char *gem_engine_backend(const gem_engine *e);
const char *gem_engine_profile(const gem_engine *e);
/* Device memory held by the engine's backend (0 on the CPU). */
size_t gem_engine_mem_used(const gem_engine *e);
int gem_engine_n_ctx(const gem_engine *e);

gem_session *gem_session_new(gem_engine *e, gem_err *err);
void gem_session_free(gem_session *s);
/* Appends tokens; afterwards gem_session_logits holds the next-token logits. */
int gem_session_eval(gem_session *s, const int32_t *ids, int n, gem_err *err);
/* As eval, and copies the logits of every token (n x vocab) into out. */
int gem_session_eval_all(gem_session *s, const int32_t *ids, int n, float *out, gem_err *err);
/* As eval, but only the greedy choice (argmax of the last logits, lowest id
 * on ties) comes back, computed on the backend; gem_session_logits is NULL
 * until the next eval. */
int gem_session_eval_greedy(gem_session *s, const int32_t *ids, int n, int32_t *next, gem_err *err);
/* Logits of the last evaluated token, or NULL after eval_greedy. */
const float *gem_session_logits(const gem_session *s);
/* The next token drawn by smp from the last evaluated token's logits and
 * the session's history; -1 with err set on failure. Sampling with top-k
 * (sampler_topk) takes the k largest on the backend and reads back only
 * those: the same token as sampler_sample on the whole vocabulary. */
struct sampler;
int32_t gem_session_sample(gem_session *s, struct sampler *smp, gem_err *err);
const int32_t *gem_session_tokens(const gem_session *s, size_t *n);
void gem_session_reset(gem_session *s);

/* Exact snapshots of a session (tokens, positions, caches, logits). */
typedef struct gem_checkpoint gem_checkpoint;
gem_checkpoint *gem_session_save(const gem_session *s, gem_err *err);
void gem_session_restore(gem_session *s, const gem_checkpoint *c);
void gem_checkpoint_free(gem_checkpoint *c);

#endif
