/* Gemma 4 dense: the model contract (profiles, manifest, validation, binding).
 *
 * gem runs a fixed set of exact profiles. A file is accepted only when its
 * metadata and tensor table describe one of them exactly: every key, tensor
 * name, shape and storage type is checked, and the first offending item is
 * named in the error. Binding is zero-copy: the per-layer struct points at
 * the tensor views of the open gguf_file, which must outlive the model.
 *
 * Structure shared by all profiles (docs/gemma4.md in the shared spec):
 * 5 sliding : 1 full layers (layer il is full when il % 6 == 5, the last
 * layer is always full), sliding head 256 with theta 1e4, full head 512 with
 * proportional RoPE (theta 1e6, rope_freqs), K-as-V on full layers (no
 * attn_v), tied embedding, soft-cap 30, per-layer layer_output_scale.
 *
 * The MTP drafters ("assistant" files, arch gemma4-assistant, keys under
 * that prefix) are profiles of the same contract: 4 layers [S,S,S,F] with
 * Q-only attention (no attn_k/attn_k_norm/attn_v: they read the target's
 * caches), their own tied embedding as the head (no soft-cap), and
 * nextn.pre_projection [2D -> d] / nextn.post_projection [d -> D], D the
 * target's width (embedding_length_out). */
#ifndef GEM_MODEL_GEMMA4_H
#define GEM_MODEL_GEMMA4_H

#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "util/err.h"

#define GEMMA4_ARCH "gemma4"
#define GEMMA4_ASSISTANT_ARCH "gemma4-assistant"
#define GEMMA4_N_VOCAB 262144u
#define GEMMA4_HEAD_DIM_SWA 256u
#define GEMMA4_HEAD_DIM_FULL 512u
#define GEMMA4_ROT_DIM_FULL 128u /* partial_rotary_factor 0.25 of 512 */

typedef struct {
    const char *name;        /* "gemma4-31b" */
    const char *description;
    uint32_t n_layer;
    uint32_t n_embd;
    uint32_t n_ff;
    uint32_t n_head;
    uint32_t n_head_kv_swa;
    uint32_t n_head_kv_full;
    uint32_t window;
    uint32_t n_ctx_train;    /* context_length written by synth */
    uint32_t n_embd_out;     /* assistants: the target's width D (embedding_length_out); 0 for targets */
} gemma4_profile;

/* The architecture keys synth and convert write, in the order the
 * reference converter's set_gguf_parameters adds them (a drafter's two
 * last): suffixes after "<arch>.". */
enum {
    G4K_BLOCK_COUNT, G4K_CONTEXT_LENGTH, G4K_EMBEDDING_LENGTH, G4K_FEED_FORWARD_LENGTH, G4K_HEAD_COUNT,
    G4K_HEAD_COUNT_KV, G4K_ROPE_FREQ_BASE, G4K_ROPE_FREQ_BASE_SWA, G4K_RMS_EPS, G4K_KEY_LENGTH, G4K_VALUE_LENGTH,
    G4K_SOFTCAP, G4K_SLIDING_WINDOW, G4K_SHARED_KV_LAYERS, G4K_PER_LAYER_INPUT, G4K_SLIDING_WINDOW_PATTERN,
    G4K_KEY_LENGTH_SWA, G4K_VALUE_LENGTH_SWA, G4K_ROPE_DIM, G4K_ROPE_DIM_SWA, G4K_EMBEDDING_LENGTH_OUT,
    G4K_NEXTN_PREDICT_LAYERS, G4K_COUNT
};
/* "<arch>.<suffix of key k>" into buf (cap bytes); returns buf. */
const char *gemma4_key(const char *arch, int k, char *buf, size_t cap);

/* An MTP drafter profile (arch gemma4-assistant). */
static inline int gemma4_is_assistant(const gemma4_profile *p) { return p->n_embd_out != 0; }
/* "gemma4" or "gemma4-assistant": the architecture and the metadata prefix. */
const char *gemma4_arch(const gemma4_profile *p);

int gemma4_profile_count(void);
const gemma4_profile *gemma4_profile_at(int i);
const gemma4_profile *gemma4_profile_find(const char *name);
/* The profile of a file or checkpoint by its shape: depth and width (and
 * for assistants, n_embd_out > 0, the target width they serve), and among
 * profiles sharing those (gemma4-tiny, gemma4-demo) the one with this
 * sliding window, else the first of that shape, so that the window check
 * afterwards names what is wrong. NULL when no profile has that shape. */
const gemma4_profile *gemma4_profile_match(int64_t n_layer, int64_t n_embd, int64_t n_embd_out, int64_t window);
int gemma4_layer_is_full(const gemma4_profile *p, uint32_t il);

/* Role of a tensor in the manifest. */
typedef enum {
    G4_TOKEN_EMBD, G4_OUTPUT_NORM, G4_ROPE_FREQS,
    G4_ATTN_NORM, G4_ATTN_Q, G4_ATTN_K, G4_ATTN_V, G4_ATTN_OUTPUT, G4_ATTN_Q_NORM,
    G4_ATTN_K_NORM, G4_POST_ATTN_NORM, G4_FFN_NORM, G4_FFN_GATE, G4_FFN_UP, G4_FFN_DOWN,
    G4_POST_FFW_NORM, G4_LAYER_OUT_SCALE, G4_NEXTN_PRE, G4_NEXTN_POST, G4_ROLE_COUNT
} gemma4_role;

typedef enum { G4_KIND_EMBD, G4_KIND_MATRIX, G4_KIND_VECTOR } gemma4_kind;

typedef struct {
    char name[48];
    gemma4_role role;
    gemma4_kind kind;
    int layer; /* -1 for global tensors */
    uint32_t n_dims;
    uint64_t ne[2];
} gemma4_tensor_spec;

/* Number of tensors of the profile (833 for 31B, 667 for 12B). */
size_t gemma4_manifest_count(const gemma4_profile *p);

/* Fills out[0..count) in the order the reference converter writes them.
 * Returns the count, or 0 when cap is too small. */
size_t gemma4_manifest(const gemma4_profile *p, gemma4_tensor_spec *out, size_t cap);

/* Storage types the contract accepts for a tensor kind. */
int gemma4_type_allowed(gemma4_kind kind, uint32_t type);

/* Checks metadata and tensor table; on success *out is the profile (a
 * target or an assistant: callers that need one kind check it). */
int gemma4_validate(const gguf_file *f, const gemma4_profile **out, gem_err *err);

typedef struct {
    int is_full;
    uint32_t head_dim;
    uint32_t n_head_kv;
    const gguf_tensor *attn_norm, *attn_q, *attn_k /* NULL in assistants */, *attn_v /* NULL on full layers and in assistants */,
        *attn_output, *attn_q_norm, *attn_k_norm, *post_attention_norm, *ffn_norm, *ffn_gate,
        *ffn_up, *ffn_down, *post_ffw_norm, *layer_output_scale;
} gemma4_layer;

typedef struct {
    const gemma4_profile *profile;
    const gguf_file *file;
    const gguf_tensor *token_embd, *output_norm, *rope_freqs;
    const gguf_tensor *nextn_pre, *nextn_post; /* assistants only */
    gemma4_layer *layers; /* profile->n_layer entries */
} gemma4_model;

/* An assistant serves a target when its backbone width is the target's
 * width, its heads and KV heads per layer kind and its window are the
 * target's (its attention reads the target's caches), and the vocabulary
 * sizes agree; -1 with a message naming both files and the field. */
int gemma4_pair_check(const gemma4_model *target, const gemma4_model *assistant, gem_err *err);

/* Validates then binds; the gguf_file must outlive the model. */
gemma4_model *gemma4_bind(const gguf_file *f, gem_err *err);
void gemma4_free(gemma4_model *m);

/* Weight bytes one decode token reads: every layer matrix and vector, the
 * tied embedding once as the output head, plus one embedding row. */
uint64_t gemma4_decode_bytes(const gemma4_model *m);

/* Parameter count of a profile (tied embedding counted once). */
uint64_t gemma4_param_count(const gemma4_profile *p);

#endif
