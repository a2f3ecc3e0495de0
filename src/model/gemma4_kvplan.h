/* The KV plan: every byte a Gemma 4 session allocates for its context,
 * computed once from the profile, the context and the KV type, before
 * anything is loaded.
 *
 * A session's memory is its weights (fixed), its KV caches (the part that
 * grows with the context), the activation buffers of one prompt tile
 * (grow with the tile, not the context) and the backend's own scratch
 * (bounded: backend.h work_reserve). The caches come in two kinds, all
 * layers of a kind alike:
 *   sliding layers: a ring of window + ring_slack positions, whatever the
 *     context (ring_slack: BE_EXACT_ROWS on a row-exact backend, so that a
 *     rejected speculative verification loses no key; gemma4_run.h);
 *   full-attention layers: a linear cache of n_ctx positions.
 * Each keeps keys and values of n_kv_head x head_dim entries per position,
 * f32 (4 bytes) or f16 (2), per the KV type:
 *   f32: every cache f32;  f16: every cache f16;
 *   f16-full: sliding rings f32, full-attention caches f16 (the caches that
 *     grow with the context are halved; the short rings keep exact keys).
 * Besides these only an exact checkpoint grows with the context (a copy of
 * every cache's filled positions, taken only where it fits:
 * gemma4_snap_save), reported as checkpoint_bytes.
 *
 * Invariant: gemma4_state_new allocates exactly this plan: its caches come
 * from gemma4_kv_alloc (gemma4_run.h, which checks the backend's count
 * against the plan's) and its tile buffers from gemma4_tile_floats. This
 * header names no backend type: the engine API passes plans through. */
#ifndef GEM_MODEL_GEMMA4_KVPLAN_H
#define GEM_MODEL_GEMMA4_KVPLAN_H

#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "model/gemma4.h"
#include "util/err.h"

typedef enum { GEMMA4_KV_F32, GEMMA4_KV_F16, GEMMA4_KV_F16_FULL, GEMMA4_KV_TYPES } gemma4_kv_type;

/* "f32", "f16", "f16-full" (the --kv-type values); "?" for anything else. */
const char *gemma4_kv_type_name(gemma4_kv_type t);
/* The --kv-type value s; -1 for anything else. */
int gemma4_kv_type_parse(const char *s);
/* "f32, f16 or f16-full": the values, for messages. */
#define GEMMA4_KV_TYPE_CHOICES "f32, f16 or f16-full"
/* Whether a cache of a full-attention (is_full) or sliding layer holds f16
 * entries under type t. */
int gemma4_kv_type_f16(gemma4_kv_type t, int is_full);

/* The context when none is asked for (capped at the trained one). */
#define GEMMA4_CTX_DEFAULT 4096
/* The context the file was trained for (<arch>.context_length), 0 when
 * the key is absent. */
int64_t gemma4_trained_ctx(const gguf_file *f, const gemma4_profile *p);
/* The context to plan for: `asked` (0: the default, capped at `trained`);
 * -1 with err when asked exceeds trained (the model's positions beyond it
 * were never trained) or is negative. trained 0: unknown, no cap. path
 * names the file in the message. */
int gemma4_ctx_resolve(int asked, int64_t trained, const char *path, int *n_ctx, gem_err *err);

/* The caches of one kind of layer. */
typedef struct {
    uint32_t layers;             /* how many layers have this kind */
    uint32_t n_kv_head, head_dim;
    uint32_t capacity;           /* positions each cache holds */
    int ring;                    /* ring (sliding) or linear (full) */
    int f16;                     /* entries f16 (2 bytes) or f32 (4) */
    uint64_t layer_bytes;        /* keys and values of one layer */
    uint64_t bytes;              /* layers x layer_bytes */
} gemma4_kv_kind;

enum { GEMMA4_KV_SLIDING, GEMMA4_KV_FULL };

typedef struct {
    const gemma4_profile *profile;
    int n_ctx;
    gemma4_kv_type type;
    int ring_slack;
    int tile;                      /* tokens per prompt tile */
    gemma4_kv_kind kind[2];        /* [GEMMA4_KV_SLIDING], [GEMMA4_KV_FULL] */
    uint64_t kv_bytes;             /* both kinds: what grows with the context */
    uint64_t act_bytes;            /* the tile's activation buffers (gemma4_tile_floats) */
    uint64_t checkpoint_bytes;     /* an exact checkpoint of a full context (optional, see above) */
} gemma4_kv_plan;

/* The plan for profile p (a target, not a drafter: a drafter keeps no
 * caches), n_ctx positions (>= 1), KV type t, rings of window + ring_slack
 * slots (0..BE_EXACT_ROWS; gemma4_ring_slack gives a backend's), prompt tiles of `tile` tokens (>= 1). -1 with err for values out
 * of range. */
int gemma4_kv_plan_make(const gemma4_profile *p, int n_ctx, gemma4_kv_type t, int ring_slack, int tile,
                        gemma4_kv_plan *out, gem_err *err);
/* The kind of layer il's cache. */
const gemma4_kv_kind *gemma4_kv_plan_kind(const gemma4_kv_plan *plan, uint32_t il);
/* Everything the plan allocates: caches and tile buffers. */
static inline uint64_t gemma4_kv_plan_total(const gemma4_kv_plan *plan) { return plan->kv_bytes + plan->act_bytes; }

/* The activation buffers of a tile of `tile` tokens, in floats, in the
 * order gemma4_state holds them. */
enum {
    G4T_H, G4T_A, G4T_Q, G4T_K, G4T_V, G4T_ATT, G4T_O, G4T_ACT, G4T_DOWN, G4T_LAST, G4T_LOGITS, G4T_BEST, G4T_TOPK,
    G4T_COUNT
};
void gemma4_tile_floats(const gemma4_profile *p, int tile, size_t out[G4T_COUNT]);

/* "12.34 GiB", "5.67 MiB", "8.00 KiB" or "12 bytes" into buf; returns buf. */
const char *gemma4_human_bytes(uint64_t n, char *buf, size_t cap);

/* Whether a session fits: weights (resident bytes; 0 where they stay in
 * the mapped file) + the plan + the backend's work reserve against `free`
 * bytes of `where` ("the GPU", "this machine's available memory"). 0 when
 * it fits; else -1 with a message naming the bytes needed (and their
 * parts), the bytes free, and what would fit instead (another KV type at
 * this context, or the largest context with this type). */
int gemma4_fit_check(const gemma4_kv_plan *plan, uint64_t weights, uint64_t reserve, uint64_t free_bytes,
                     const char *where, gem_err *err);

#endif
