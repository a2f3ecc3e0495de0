/* Hugging Face tokenizer files to GGUF tokenizer keys, the way the reference
 * converter's Gemma 4 class writes them.
 *
 * Reads tokenizer.json (a byte-fallback BPE with a Sequence decoder, as
 * Gemma 4 ships), tokenizer_config.json, chat_template.jinja/.json and
 * config.json from the checkpoint folder and adds, in the reference's
 * order: tokenizer.ggml.model "gemma4", tokens (by id), scores (-1000 each),
 * token_type (BYTE for <0xXX>, CONTROL for the special tokens named in
 * tokenizer_config.json, USER_DEFINED for added non-special tokens and the
 * seven tokens Gemma 4 always renders, NORMAL otherwise), merges ("a b"),
 * the special token ids (bos, eos, unk, sep, pad, cls, mask: from
 * tokenizer_config.json through added_tokens, then config.json), the
 * add_*_token flags, the chat template, add_space_prefix false and
 * add_bos_token true. Anything outside that shape is refused by name. */
#ifndef GEM_CONVERT_HF_TOK_H
#define GEM_CONVERT_HF_TOK_H

#include <stdint.h>

#include "gguf/gguf_write.h"
#include "util/err.h"
#include "util/json.h"

/* n_vocab_rows receives len(model.vocab) + len(added_tokens): the reference
 * keeps at most that many embedding rows. */
int hf_tok_add_keys(gguf_writer *w, const char *dir, const json *config, uint64_t *n_vocab_rows, gem_err *err);

/* Reads a whole file under dir (NUL-terminated); NULL with err set when it
 * cannot, or (when optional) NULL with err untouched when it does not exist. */
char *hf_read_file(const char *dir, const char *name, int optional, size_t *len, gem_err *err);

#endif
