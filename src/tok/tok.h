/* Tokenizers loaded from the tokenizer keys of a GGUF file, matching the
 * pinned reference's ids exactly. tokenizer.ggml.model picks the model:
 *
 * gemma4: "SPM-style" BPE over code points. Every ' ' becomes U+2581, the
 * text is decoded leniently into code points (an invalid byte becomes
 * U+FFFD, overlong forms are accepted and re-encoded canonically), split
 * into runs of newlines and runs of non-newlines, and each run is merged by
 * BPE rank (lowest rank first, then leftmost). A run of newlines that is
 * itself a token stays whole. A symbol that is not a token falls back to
 * one <0xXX> token per byte. BOS is always added when asked for.
 *
 * gpt2: GPT-2-style byte-level BPE. The text is decoded leniently the same
 * way, cut into words by the pre-tokenizer tokenizer.ggml.pre names (qwen35,
 * pretok.h), and each word is merged by rank from one symbol per byte;
 * token texts spell bytes in GPT-2's byte-to-unicode alphabet, which
 * tok_piece maps back. BOS only when the file's add_bos_token says so.
 *
 * For both, special and user-defined tokens are split out first
 * (user-defined ones always, control ones only when parse_special is set;
 * longest token text first), and attributes and end-of-generation tokens
 * follow the reference's rules on token texts.
 *
 * Lifetime: the tokenizer points into the gguf_file (token texts), which
 * must outlive it. All functions are thread-safe on a loaded tokenizer. */
#ifndef GEM_TOK_TOK_H
#define GEM_TOK_TOK_H

#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "util/err.h"

/* Token attributes, the same bits the reference uses. */
enum {
    TOK_ATTR_UNKNOWN = 1 << 0,
    TOK_ATTR_UNUSED = 1 << 1,
    TOK_ATTR_NORMAL = 1 << 2,
    TOK_ATTR_CONTROL = 1 << 3,
    TOK_ATTR_USER_DEFINED = 1 << 4,
    TOK_ATTR_BYTE = 1 << 5,
};

typedef struct tok tok;

tok *tok_load(const gguf_file *f, gem_err *err);
void tok_free(tok *t);

uint32_t tok_n_vocab(const tok *t);
int32_t tok_bos(const tok *t);
int32_t tok_eos(const tok *t);
int tok_add_bos(const tok *t);
int tok_is_eog(const tok *t, int32_t id);
uint32_t tok_attr(const tok *t, int32_t id);

/* The id of a token text, or -1. */
int32_t tok_find(const tok *t, const char *text, size_t len);

/* Raw token text as stored (U+2581 for spaces, or the byte alphabet);
 * NULL for a bad id. */
const char *tok_text(const tok *t, int32_t id, size_t *len);

typedef struct {
    int32_t *v;
    size_t n, cap;
} tok_ids;

void tok_ids_free(tok_ids *ids);
int tok_ids_push(tok_ids *ids, int32_t id); /* 0, or -1 out of memory */

/* A lower bound on the tokens tok_encode gives for text[0..len) (BOS and
 * EOS not counted): its code points over the most any token covers. O(len)
 * and allocation-free, where encoding takes some 25 bytes of scratch per
 * byte of text: a prompt that cannot fit a context is refused unencoded. */
size_t tok_min_tokens(const tok *t, const char *text, size_t len);

/* Appends the tokens of text[0..len) to out. add_bos prepends BOS when the
 * vocabulary asks for it. Returns 0, or -1 when memory runs out. */
int tok_encode(const tok *t, const char *text, size_t len, int add_bos, int parse_special, tok_ids *out);

/* The bytes a token stands for: U+2581 back to spaces (gemma4), the byte
 * alphabet back to bytes (gpt2), byte tokens as their byte. A piece may
 * end inside a UTF-8 character: tok_stream reassembles them. Control and
 * unknown tokens give "" unless special is set;
 * user-defined tokens are always rendered. NULL for an id out of range. */
const char *tok_piece(const tok *t, int32_t id, int special, size_t *len);

/* Streaming detokenizer: feeds pieces and emits only whole UTF-8
 * characters (bytes that can never complete a character are emitted as
 * they are, so nothing is held forever). */
typedef struct {
    unsigned char pend[4];
    int n;
} tok_stream;

typedef void (*tok_emit_fn)(const char *p, size_t n, void *ctx);

void tok_stream_feed(tok_stream *s, const char *p, size_t n, tok_emit_fn emit, void *ctx);
void tok_stream_flush(tok_stream *s, tok_emit_fn emit, void *ctx);

#endif
