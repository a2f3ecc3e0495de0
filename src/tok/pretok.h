/* Pre-tokenizers of byte-level BPE vocabularies: the rule that cuts text
 * into words before BPE merges inside each word. Each is a hand-written
 * matcher equal to the pinned reference's splitter for that vocabulary's
 * `tokenizer.ggml.pre` (the reference's own matcher, not the regex it
 * documents, where the two differ).
 *
 * qwen35: (?i:'s|'t|'re|'ve|'m|'ll|'d) | [^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+ |
 *         \p{N} | ' '?[^\s\p{L}\p{M}\p{N}]+[\r\n]* | \s*[\r\n]+ |
 *         \s+(?!\S) | \s+
 *
 * Input is UTF-8 as tok_encode_cp writes it (every sequence well formed;
 * surrogate code points may appear, as the reference lets them through). */
#ifndef GEM_TOK_PRETOK_H
#define GEM_TOK_PRETOK_H

#include <stddef.h>

typedef enum { PRETOK_QWEN35 } pretok_kind;

/* The pre-tokenizer a `tokenizer.ggml.pre` value names; -1 if unsupported. */
int pretok_from_name(const char *name, size_t len, pretok_kind *out);

/* End (byte offset) of the word that starts at pos < n in s[0..n). */
size_t pretok_next(pretok_kind k, const char *s, size_t n, size_t pos);

#endif
