/* Internal to src/tok: the loaded vocabulary and the machinery the
 * tokenizer models share (token and merge tables, the BPE merge loop, the
 * lenient UTF-8 reading the reference applies to input text). tok.c loads
 * and partitions out special tokens; each model file turns a fragment of
 * plain text into ids and a NORMAL token's text into the bytes it stands
 * for:
 *   tok_spm.c   Gemma 4's SPM-style BPE over code points ("gemma4")
 *   tok_bbpe.c  GPT-2-style byte-level BPE ("gpt2"), split by pretok.c
 * Nothing here is specific to one model family. */
#ifndef GEM_TOK_TOK_INT_H
#define GEM_TOK_TOK_INT_H

#include <stddef.h>
#include <stdint.h>

#include "tok/pretok.h"
#include "tok/tok.h"
#include "util/strbuf.h"

typedef struct {
    uint64_t key; /* left << 32 | right */
    int32_t rank;
    int32_t merged;
} tok_merge_slot;

typedef enum { TOK_MODEL_SPM, TOK_MODEL_BBPE } tok_model;

struct tok {
    tok_model model;
    pretok_kind pre;       /* TOK_MODEL_BBPE: how text splits into words */
    uint32_t n_vocab;
    gguf_str *text;        /* views into the gguf file */
    uint8_t *attr;
    uint32_t *text_index;  /* id per slot, TOK_EMPTY_SLOT when empty */
    uint64_t text_mask;
    uint64_t seed; /* of both tables' hashes, drawn at load */
    tok_merge_slot *merges;
    uint64_t merge_mask;
    uint64_t n_merges, n_unresolved;
    int32_t byte_id[256];  /* <0xXX> tokens (SPM byte fallback) */
    int32_t ascii_id[128]; /* one-byte texts */
    int32_t byte_sym[256]; /* BBPE: the token of each byte's mapped character */
    int32_t byte_fb[256][2]; /* BBPE: what the reference emits for a byte left in an unknown symbol */
    int32_t bos, eos;
    int add_bos, add_eos;
    uint8_t *eog;          /* per id */
    int32_t *specials;     /* ids to split out, longest text first */
    uint32_t n_specials;
    char *pieces;          /* rendered pieces, concatenated */
    uint64_t *piece_off;   /* n_vocab + 1 offsets */
    uint32_t max_cps;      /* the most code points in a token text (tok_min_tokens) */
};

#define TOK_EMPTY_SLOT 0xffffffffu

const tok_merge_slot *tok_merge_find(const tok *t, int32_t l, int32_t r);

/* BPE state for one word, indexed by byte offset: a live symbol at offset
 * i covers bytes [i, i + len[i]) with token id[i] (-1: not a token) and
 * its left neighbour at prev[i]; its right neighbour starts at i + len[i]. */
typedef struct {
    int32_t *id, *len, *prev;
    uint64_t *heap;
    size_t cap, heap_n, heap_cap;
} bpe_scratch;

int bpe_reserve(bpe_scratch *s, size_t n); /* 0, or -1 out of memory */
void bpe_scratch_free(bpe_scratch *s);
/* Merges the symbols of a word of n bytes (set up by the caller) by rank,
 * lowest rank first, then leftmost: the reference's order. */
int bpe_merge(const tok *t, int32_t n, bpe_scratch *s);

/* One code point read as the reference reads input: an invalid byte is
 * U+FFFD and consumes one byte, overlong forms and surrogates are taken as
 * they decode. Returns the bytes consumed. */
size_t tok_decode_lenient(const unsigned char *p, size_t n, uint32_t *cp);
/* Canonical UTF-8 of cp (U+FFFD above U+10FFFF); returns its length. */
size_t tok_encode_cp(uint32_t cp, char *o);

/* Model hooks. encode: ids of one fragment of plain text. normal_piece:
 * the bytes a NORMAL token's text stands for. */
int tok_spm_encode(const tok *t, const char *text, size_t len, bpe_scratch *s, tok_ids *out);
void tok_spm_normal_piece(const char *text, size_t len, strbuf *out);
void tok_bbpe_init(tok *t); /* byte_sym and byte_fb, once the token table exists */
int tok_bbpe_encode(const tok *t, const char *text, size_t len, bpe_scratch *s, tok_ids *out);
void tok_bbpe_normal_piece(const char *text, size_t len, strbuf *out);

#endif
