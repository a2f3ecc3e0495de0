/* Qwen3.5 / 3.6 / 3.8 dense hybrid: the model contract (profiles, manifest,
 * validation, binding), as gemma4.h is Gemma 4's.
 *
 * The file layout is the reference converter's (llama.cpp arch `qwen35`,
 * conversion/qwen.py Qwen3_5TextModel) without the MTP block (converted
 * with --no-mtp; a file carrying it is refused by name). Structure shared by
 * every profile (shared spec later-models.md §1):
 *   - layer il is full attention iff (il + 1) % 4 == 0, the others are
 *     Gated DeltaNet (GDN) layers;
 *   - every layer: attn_norm, post_attention_norm and a SiLU-gated FFN;
 *   - GDN: attn_qkv [H -> 2*Kd + Vd], attn_gate (z) [H -> Vd], ssm_beta and
 *     ssm_alpha [H -> n_v], ssm_conv1d [4, 2*Kd + Vd] (f32), ssm_dt.bias and
 *     ssm_a (= -exp(A_log)) [n_v], ssm_norm [d_state], ssm_out [Vd -> H],
 *     with Kd = n_k * d_state, Vd = n_v * d_state, V heads in the
 *     converter's tiled order (V head h reads QK head h % n_k);
 *   - attention: attn_q [H -> 2 * n_head * head_dim] (query and sigmoid gate
 *     interleaved per head), attn_k/attn_v [H -> n_head_kv * head_dim],
 *     attn_q_norm/attn_k_norm [head_dim], attn_output; NeoX RoPE on the first
 *     n_rot dims (theta 1e7);
 *   - norms are stored as used (the converter folded Qwen's 1 + w), the GDN
 *     output norm plain;
 *   - output.weight present (untied) or absent (tied to token_embd), as the
 *     profile says. */
#ifndef GEM_MODEL_QWEN35_H
#define GEM_MODEL_QWEN35_H

#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "util/err.h"

#define QWEN35_ARCH "qwen35"
#define QWEN35_CONV_KERNEL 4u
#define QWEN35_ATTN_INTERVAL 4u

typedef struct {
    const char *name; /* "qwen35-27b" */
    const char *description;
    uint32_t n_layer;
    uint32_t n_embd;
    uint32_t n_ff;
    uint32_t n_head;    /* attention query heads */
    uint32_t n_head_kv; /* attention KV heads */
    uint32_t head_dim;  /* attention head dim (key_length = value_length) */
    uint32_t n_rot;     /* rotated dims per attention head (rope.dimension_count) */
    uint32_t d_state;   /* GDN head dim, keys and values (ssm.state_size) */
    uint32_t n_k_heads; /* GDN QK heads (ssm.group_count) */
    uint32_t n_v_heads; /* GDN V heads (ssm.time_step_rank) */
    uint32_t n_vocab;
    uint32_t tied;      /* no output.weight: the head is token_embd */
    uint32_t n_ctx_train;
} qwen35_profile;

int qwen35_profile_count(void);
const qwen35_profile *qwen35_profile_at(int i);
const qwen35_profile *qwen35_profile_find(const char *name);
int qwen35_layer_is_attn(uint32_t il);

/* Derived widths. */
static inline uint32_t qwen35_key_dim(const qwen35_profile *p) { return p->n_k_heads * p->d_state; }
static inline uint32_t qwen35_value_dim(const qwen35_profile *p) { return p->n_v_heads * p->d_state; }
static inline uint32_t qwen35_conv_dim(const qwen35_profile *p) { return 2 * qwen35_key_dim(p) + qwen35_value_dim(p); }

typedef enum {
    Q35_TOKEN_EMBD, Q35_OUTPUT_NORM, Q35_OUTPUT,
    Q35_ATTN_NORM, Q35_POST_ATTN_NORM, Q35_FFN_GATE, Q35_FFN_UP, Q35_FFN_DOWN,
    Q35_SSM_A, Q35_SSM_CONV1D, Q35_SSM_DT, Q35_SSM_ALPHA, Q35_SSM_BETA, Q35_ATTN_QKV, Q35_ATTN_GATE, Q35_SSM_NORM,
    Q35_SSM_OUT,
    Q35_ATTN_K_NORM, Q35_ATTN_K, Q35_ATTN_OUTPUT, Q35_ATTN_Q_NORM, Q35_ATTN_Q, Q35_ATTN_V,
    Q35_ROLE_COUNT
} qwen35_role;

/* Storage kinds: matrices take every type the CPU runs, vectors (norms,
 * biases, the conv kernel, which the converter and llama-quantize keep in
 * f32) only f32. */
typedef enum { Q35_KIND_EMBD, Q35_KIND_MATRIX, Q35_KIND_VECTOR } qwen35_kind;

typedef struct {
    char name[48];
    qwen35_role role;
    qwen35_kind kind;
    int layer; /* -1 for global tensors */
    uint32_t n_dims;
    uint64_t ne[2];
} qwen35_tensor_spec;

/* The architecture keys synth and convert write, in the order the
 * reference converter adds them (suffixes after "qwen35."). */
enum {
    Q35K_BLOCK_COUNT, Q35K_CONTEXT_LENGTH, Q35K_EMBEDDING_LENGTH, Q35K_FEED_FORWARD_LENGTH, Q35K_HEAD_COUNT,
    Q35K_HEAD_COUNT_KV, Q35K_ROPE_SECTIONS, Q35K_ROPE_FREQ_BASE, Q35K_RMS_EPS, Q35K_KEY_LENGTH, Q35K_VALUE_LENGTH,
    Q35K_SSM_CONV_KERNEL, Q35K_SSM_STATE_SIZE, Q35K_SSM_GROUP_COUNT, Q35K_SSM_TIME_STEP_RANK, Q35K_SSM_INNER_SIZE,
    Q35K_RECURRENT_LAYERS, Q35K_FULL_ATTN_INTERVAL, Q35K_ROPE_DIM, Q35K_COUNT
};
/* "qwen35.<suffix of key k>" into buf; returns buf. */
const char *qwen35_key(int k, char *buf, size_t cap);
/* The file's trained context (context_length), 0 when absent or invalid. */
int64_t qwen35_trained_ctx(const gguf_file *f);

size_t qwen35_manifest_count(const qwen35_profile *p);
/* Fills out[0..count) in the order the reference converter writes a
 * one-shard checkpoint (HF names sorted: lm_head, embed_tokens, the layers
 * as strings 0, 1, 10, ..., norm). Returns the count, or 0 when cap is too
 * small. */
size_t qwen35_manifest(const qwen35_profile *p, qwen35_tensor_spec *out, size_t cap);
int qwen35_type_allowed(qwen35_kind kind, uint32_t type);

/* The profile of a file's shape (block_count, embedding_length); NULL when
 * none. */
const qwen35_profile *qwen35_profile_match(int64_t n_layer, int64_t n_embd);

/* Checks metadata and tensor table; on success *out is the profile. */
int qwen35_validate(const gguf_file *f, const qwen35_profile **out, gem_err *err);

typedef struct {
    int is_attn;
    const gguf_tensor *attn_norm, *post_attention_norm, *ffn_gate, *ffn_up, *ffn_down;
    /* GDN layers */
    const gguf_tensor *ssm_a, *ssm_conv1d, *ssm_dt, *ssm_alpha, *ssm_beta, *attn_qkv, *attn_gate, *ssm_norm, *ssm_out;
    /* attention layers */
    const gguf_tensor *attn_q, *attn_k, *attn_v, *attn_output, *attn_q_norm, *attn_k_norm;
} qwen35_layer;

typedef struct {
    const qwen35_profile *profile;
    const gguf_file *file;
    const gguf_tensor *token_embd, *output_norm, *output; /* output: token_embd when tied */
    qwen35_layer *layers;
} qwen35_model;

/* Validates then binds (zero-copy views; the file must outlive the model). */
qwen35_model *qwen35_bind(const gguf_file *f, gem_err *err);
void qwen35_free(qwen35_model *m);

/* Parameter count of a profile (a tied head counted once). */
uint64_t qwen35_param_count(const qwen35_profile *p);

#endif
