/* Synthetic Qwen3.5 files: the contract's exact layout (qwen35.h) with
 * deterministic random weights, as gemma4_synth.h does for Gemma 4.
 *
 * Values are generated per row from (seed, tensor index, row) as floats and
 * stored in the requested type through the quantizers, except plain
 * k-quant matrices, drawn directly as random blocks (sr_quant_blocks), so
 * the bytes depend only on the options. The scales keep activations of order one and the
 * Gated DeltaNet's decay in a useful range: ssm_a in [-1, -0.1] and dt
 * biases in [-1, 0] give per-token decays exp(g) spread over about
 * (0.3, 0.95), a memory of a few to tens of tokens. */
#ifndef GEM_MODEL_QWEN35_SYNTH_H
#define GEM_MODEL_QWEN35_SYNTH_H

#include <stdint.h>

#include "gguf/gguf_write.h"
#include "model/qwen35.h"
#include "util/err.h"

typedef struct {
    const qwen35_profile *profile;
    uint32_t type;      /* matrices: any type quant_quantize_row makes */
    uint32_t embd_type; /* token_embd and output (q4_k_m: token_embd only; output is q6_k) */
    /* with type q4_k: llama-quantize's Q4_K_M mix (attn_v/attn_qkv and
     * ffn_down of its "more bits" layers and the output head in q6_k, rows
     * that are not whole blocks in q5_0 or q8_0 as it falls back) */
    int q4_k_m;
    uint64_t seed;
    uint32_t n_ctx_train; /* context_length written; 0: the profile's */
    const char *vocab_path; /* GGUF with the Qwen3.5 tokenizer keys (data/vocab/qwen35.gguf) */
    const char *out_path;
    int threads; /* 0 = all online CPUs */
    void (*progress)(uint64_t done, uint64_t total, void *ctx);
    void *progress_ctx;
} qwen35_synth_opts;

int qwen35_synth(const qwen35_synth_opts *o, gem_err *err);

/* The type qwen35_synth writes tensor s in (under q4_k_m, gem quantize's
 * and llama-quantize's Q4_K_M mix). */
uint32_t qwen35_synth_type(const qwen35_synth_opts *o, const qwen35_tensor_spec *s);

/* Writes the tokenizer.* keys of `vocab` (a gpt2/qwen35 vocabulary GGUF)
 * sized to n_vocab tokens, as the reference converter sizes a checkpoint's
 * vocabulary to its embedding: missing ids become "[PAD<id>]" tokens of
 * type UNUSED; a smaller vocabulary (test profiles) keeps the first n_vocab
 * tokens, the merges among them, and drops special-token ids beyond it. */
int qwen35_write_vocab(gguf_writer *w, const gguf_file *vocab, uint32_t n_vocab, gem_err *err);

/* The architecture keys of profile p, in the converter's order (general.*
 * and the tokenizer are the caller's; file_type goes where the converter
 * puts it, after value_length). sections: the MRoPE split (4 ints, the
 * checkpoint's mrope_section padded), NULL for the converter's default
 * [11, 11, 10, 0]. */
int qwen35_write_arch_keys(gguf_writer *w, const qwen35_profile *p, uint32_t n_ctx, uint32_t file_type,
                           const int32_t *sections, gem_err *err);

#endif
