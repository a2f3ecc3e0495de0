/* Synthetic Gemma 4 files: exact published layout, deterministic random
 * weights.
 *
 * The file has the metadata keys, tensor names, order, types and alignment
 * the reference converter writes, with the tokenizer keys copied verbatim
 * from a real Gemma 4 vocabulary GGUF. Weight values are generated per row
 * from (seed, tensor index, row), so the bytes depend only on the options,
 * never on the thread count. Quantized weights are drawn directly as blocks
 * (random codes and scales) rather than quantized from floats: that is what
 * makes a 31B file a matter of disk speed. Scales keep activations of order
 * one: a matrix row has norm about 1, embedding rows about 1 before the
 * sqrt(H) input scale. */
#ifndef GEM_MODEL_GEMMA4_SYNTH_H
#define GEM_MODEL_GEMMA4_SYNTH_H

#include <stdint.h>

#include "model/gemma4.h"
#include "util/err.h"

typedef struct {
    const gemma4_profile *profile;
    uint32_t type;      /* matrices: q4_0, q8_0, q4_k, q5_k, q6_k, f16, bf16 or f32 */
    int q4_k_m;         /* with type q4_k: llama-quantize's Q4_K_M mix (attn_v, ffn_down in q6_k in its layers) */
    uint32_t embd_type; /* token_embd: q8_0, q6_k, q4_0, f16, bf16 or f32 */
    uint64_t seed;
    uint32_t n_ctx_train; /* context_length written; 0: the profile's */
    const char *vocab_path; /* GGUF holding the gemma4 tokenizer keys */
    const char *out_path;
    int threads;        /* 0 = all online CPUs */
    void (*progress)(uint64_t done, uint64_t total, void *ctx);
    void *progress_ctx;
} gemma4_synth_opts;

int gemma4_synth(const gemma4_synth_opts *o, gem_err *err);

/* The type synth writes tensor i of the manifest specs[0..n) in (the
 * q4_k_m mix's choice included). */
uint32_t gemma4_synth_type(const gemma4_synth_opts *o, const gemma4_tensor_spec *specs, size_t n, size_t i);

/* The llama.cpp file-type code for a matrix type (general.file_type). */
uint32_t gemma4_file_type(uint32_t matrix_type);

#endif
