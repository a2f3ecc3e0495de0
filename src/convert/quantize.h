/* Model quantization: a Gemma 4 GGUF in f32/f16/bf16 to q8_0, q4_0, the
 * K-quant mixes Q4_K_S/Q4_K_M/Q5_K_S/Q5_K_M or q6_k, writing the same
 * bytes as the pinned reference's `llama-quantize` for the same type
 * (SHA-256 identical: metadata keys and their order, tensor order, types,
 * alignment, padding and data).
 *
 * What "the same" takes, besides bit-exact row quantizers (quantize.h in
 * quant/): the reference copies every metadata key, then re-adds
 * general.quantization_version and general.file_type at the end; it writes
 * tensors sorted by layer number, then by name; it picks a type per tensor
 * from the file type (1-D tensors and norms stay as they are, the tied
 * token embedding becomes q6_k unless the type is q8_0, the K mixes give
 * some attn_v and ffn_down more bits -- the rule is stated at mix_type in
 * quantize.c -- and rows that are not whole blocks fall back to q5_0, q5_1
 * or q8_0 as the reference's do); it checks every input row (non-finite
 * values are refused) and every quantized row. The output bytes never
 * depend on the thread count. */
#ifndef GEM_CONVERT_QUANTIZE_H
#define GEM_CONVERT_QUANTIZE_H

#include <stdint.h>

#include "util/err.h"

/* The --type names (llama-quantize's, case-insensitive; q4_k and q5_k are
 * its aliases of q4_k_m and q5_k_m). */
#define GEM_QUANTIZE_TYPES "q8_0, q4_0, q4_k_m (q4_k), q4_k_s, q5_k_m (q5_k), q5_k_s, q6_k"

typedef struct {
    const char *in_path;
    const char *out_path;
    const char *type;   /* one of GEM_QUANTIZE_TYPES */
    int embd_type;      /* token_embd type (QT_*), or -1 for the reference's default */
    int threads;        /* 0 = all online CPUs */
    void (*progress)(uint64_t done, uint64_t total, void *ctx);
    void *progress_ctx;
} gem_quantize_opts;

/* Summary of a finished run (for the CLI's last line). */
typedef struct {
    uint64_t in_bytes, out_bytes; /* tensor data */
    uint32_t n_tensors, n_quantized;
    uint32_t ftype;               /* general.file_type written */
} gem_quantize_stats;

int gem_quantize(const gem_quantize_opts *o, gem_quantize_stats *st, gem_err *err);
/* The contract of the file's family (general.architecture qwen35: the
 * Qwen3.5 one, else Gemma 4's, drafters included) and its layer count
 * (llama-quantize's ffn_down layer rule); -1 with err naming the family
 * and what is wrong. */
struct gguf_file;
int gem_quantize_contract(const struct gguf_file *f, int *n_layer, gem_err *err);

/* The reference's file-type code for a --type name; -1 when unknown. */
int gem_quantize_ftype(const char *type);

#endif
