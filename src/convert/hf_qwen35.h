/* Hugging Face Qwen3.5 checkpoint to GGUF: the Qwen3_5ForConditionalGeneration
 * / Qwen3_5ForCausalLM branch of `gem convert` (hf.h).
 *
 * Writes what the pinned reference converter (conversion/qwen.py,
 * Qwen3_5TextModel) writes with --no-mtp: the text weights only (the vision
 * tower and the mtp.* block are dropped), renamed to arch qwen35, with its
 * transforms: A_log -> -exp(A_log), conv1d squeezed, every *norm.weight but
 * the GDN output norm stored as 1 + w, and the GDN V heads permuted from
 * grouped to tiled order (in_proj_qkv's V rows, in_proj_z, in_proj_a/b,
 * A_log, dt_bias, conv1d's V channels, out_proj's input columns). Vectors,
 * norms and the conv kernel are f32, matrices the requested type. The
 * result must pass the qwen35 contract, else it is removed.
 *
 * Known divergence: the tokenizer keys come from a vocabulary GGUF
 * (vocab_path, default data/vocab/qwen35.gguf) sized to the embedding, not
 * from the checkpoint's tokenizer.json; general.* carries the name only. */
#ifndef GEM_CONVERT_HF_QWEN35_H
#define GEM_CONVERT_HF_QWEN35_H

#include "convert/hf.h"
#include "util/json.h"

/* 1 when config.json's architectures name a Qwen3.5 dense model. */
int hf_is_qwen35(const json *cfg);

int hf_convert_qwen35(const gem_convert_opts *o, const json *cfg, gem_convert_stats *st, gem_err *err);

#endif
