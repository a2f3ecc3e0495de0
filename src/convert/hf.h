/* Hugging Face checkpoint to GGUF: `gem convert`.
 *
 * Reads a Gemma 4 dense checkpoint folder (config.json, model.safetensors or
 * the shards named by model.safetensors.index.json, the tokenizer files) and
 * writes the GGUF the pinned reference converter (convert_hf_to_gguf.py,
 * class Gemma4Model) writes for it: the same metadata keys with the same
 * types in the same order, the generated rope_freqs tensor first, then the
 * tensors shard by shard in name order, renamed (model.layers.N.mlp.down_proj
 * -> blk.N.ffn_down, ...), never transposed or shifted (Gemma 4 norms are
 * stored as used), vectors and norms in f32 and matrices in the requested
 * type. The result must pass the Gemma 4 contract (gemma4_validate); any
 * other architecture, a MoE or per-layer-embedding variant, or a checkpoint
 * whose shapes match no profile is refused before anything is written.
 *
 * An MTP drafter (Gemma4AssistantForCausalLM, class Gemma4AssistantModel in
 * the reference) converts the same way under arch gemma4-assistant: the
 * text model from text_config (every layer sharing the target's KV), its
 * top-level pre_projection / post_projection as nextn.*, and
 * embedding_length_out (backbone_hidden_size) and nextn_predict_layers
 * appended to the keys. A drafter with the E2B/E4B ordered-embedding head
 * (use_ordered_embeddings) is refused: the reference drops its
 * masked_embedding.* tensors and runs the dense head instead, which is not
 * what transformers computes; stray masked_embedding.* tensors are dropped
 * as the reference drops them.
 *
 * Known divergence: of the reference's authorship heuristics (general.*
 * keys guessed from README model cards, generation_config.json and dashed
 * folder names) gem writes general.name (the folder name in title case, or
 * the name given) and general.size_label (from the parameter count) only. */
#ifndef GEM_CONVERT_HF_H
#define GEM_CONVERT_HF_H

#include <stdint.h>

#include "util/err.h"

typedef struct {
    const char *dir;
    const char *out_path;
    int type;         /* QT_F32, QT_F16 or QT_BF16; -1 = the reference's "auto" (bf16/f16 as stored, else f16) */
    const char *name; /* general.name; NULL = from the folder name */
    const char *vocab_path; /* Qwen3.5: the vocabulary GGUF for the tokenizer keys (hf_qwen35.h) */
    int threads;      /* 0 = all online CPUs */
    void (*progress)(uint64_t done, uint64_t total, void *ctx);
    void *progress_ctx;
} gem_convert_opts;

typedef struct {
    uint64_t in_bytes, out_bytes;
    uint32_t n_tensors, n_shards;
    uint32_t type; /* matrix type written */
    const char *profile;
} gem_convert_stats;

int gem_convert(const gem_convert_opts *o, gem_convert_stats *st, gem_err *err);

#endif
