/* Grammar-constrained decoding: compiled byte-level grammars, matcher
 * states, and token masks over the Gemma vocabulary.
 *
 * A gram is an immutable context-free grammar over bytes (rules of
 * alternatives of sequences of byte sets and rule references), compiled by
 * one of the front-ends below. A gram_state is a position of the matcher in
 * it: the set of parse stacks that the bytes fed so far leave alive
 * (deduplicated, at most GRAM_MAX_STACKS of them, each at most
 * GRAM_MAX_DEPTH deep; a byte whose parse would exceed either bound is
 * rejected, so JSON nesting stays below json_parse's limit). States are
 * cheap to clone and to copy back (rollback).
 *
 * A gram_vocab holds every token's bytes (tok_piece with special=0) and a
 * trie over them; it is built once per engine and is shared by every
 * grammar: it also owns the mask caches, keyed by the structure of the
 * grammar around a matcher position, so requests that compile the same
 * schema (or merely use JSON strings) reuse each other's work, within a
 * cap in bytes (gram_vocab_set_cache_cap). All
 * functions are thread-safe on distinct states; a gram and a gram_vocab
 * may be shared between threads (their caches take a lock).
 *
 * Lifetime: a gram_state points to its gram, which must outlive it. */
#ifndef GEM_GRAMMAR_GRAMMAR_H
#define GEM_GRAMMAR_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#include "tok/tok.h"
#include "util/err.h"
#include "util/json.h"
#include "util/strbuf.h"

#define GRAM_MAX_DEPTH 128
#define GRAM_MAX_STACKS 1024

typedef struct gram gram;
typedef struct gram_state gram_state;
typedef struct gram_vocab gram_vocab;

/* ---- front-ends ---- */

enum { GRAM_SYNTAX_JSON = 0, GRAM_SYNTAX_GEMMA = 1 };

/* A value that the JSON Schema accepts, as RFC 8259 text (GRAM_SYNTAX_JSON)
 * or in Gemma 4's tool-call argument syntax (GRAM_SYNTAX_GEMMA: what
 * chat_args_to_json parses). schema NULL or {} with JSON syntax: any JSON
 * object (response_format json_object). NULL with an error naming the
 * keyword and its path ("schema.properties.path: \"pattern\" is not
 * supported") when the schema uses what this compiler cannot honour
 * exactly or contradicts itself. */
gram *gram_json_schema(const json *schema, int syntax, gem_err *err);

/* What Gemma emits for tool calls: one or more (at most max_calls; 0: no
 * bound) "<|tool_call>call:NAME{ARGS}<tool_call|>", NAME one of the tools'
 * function.name (only only_name when not NULL), ARGS that function's
 * parameters schema in Gemma syntax; then optionally "<|tool_response>".
 * tools: OpenAI-style [{"type":"function","function":{...}}]. */
gram *gram_tool_calls(const json *tools, const char *only_name, int max_calls, gem_err *err);

/* g preceded by an optional reasoning block: "<|channel>", any valid UTF-8
 * text not containing "<channel|>", then "<channel|>". A new grammar; g is
 * unchanged. */
gram *gram_with_reasoning(const gram *g, gem_err *err);

void gram_free(gram *g);

/* ---- matcher ---- */

gram_state *gram_state_new(const gram *g);          /* NULL when out of memory */
gram_state *gram_state_clone(const gram_state *s);
/* dst becomes src (both of the same gram): rollback to a saved state.
 * 0, or -1 when out of memory (dst then unchanged). */
int gram_state_copy(gram_state *dst, const gram_state *src);
void gram_state_free(gram_state *s);

/* Feeds bytes: 0 when the grammar accepts them (as a prefix of a
 * sentence), -1 when not (the state is then unchanged). */
int gram_state_feed(gram_state *s, const char *p, size_t n);
/* 1 when the input so far is a complete sentence (generation may end). */
int gram_state_done(const gram_state *s);
/* 1 when complete and no byte can follow (generation must end). */
int gram_state_ended(const gram_state *s);
/* Appends to out the shortest bytes that complete a sentence from s (one
 * of them: each choice the shortest, each byte the lowest a set allows),
 * nothing when s is done. Lets a generation that is running out of tokens
 * close what it opened. 0, or -1 when out of memory or when no
 * completion fits the parse's depth bound. */
int gram_state_complete(const gram_state *s, strbuf *out);

/* ---- tokens ---- */

gram_vocab *gram_vocab_new(const tok *t, gem_err *err);
void gram_vocab_free(gram_vocab *v);
uint32_t gram_vocab_size(const gram_vocab *v);

/* The mask cache's bound: its entries and their table take at most this
 * many bytes (least recently used entries are evicted; an evicted entry is
 * rebuilt identically when needed again), so a server seeing many distinct
 * schemas stays bounded. Entries a mask computation is using when they are
 * evicted are counted until it ends: once no computation runs, bytes <=
 * cap. */
#define GRAM_VOCAB_CACHE_DEFAULT ((size_t)256 << 20)
/* Sets the cap (the cache starts over, empty). */
void gram_vocab_set_cache_cap(gram_vocab *v, size_t bytes);
typedef struct {
    size_t bytes, cap;   /* held now, and the bound */
    size_t entries;      /* filed */
    uint64_t evicted;    /* entries evicted so far */
} gram_vocab_cache;
gram_vocab_cache gram_vocab_cache_info(const gram_vocab *v);

/* bits: (gram_vocab_size + 31) / 32 words, overwritten; bit id (word
 * id/32, bit id%32) set for every token whose bytes the state accepts, and
 * for the end-of-generation tokens when the state is done. Control tokens
 * (empty pieces) other than those are never set. Returns the number of
 * tokens allowed (0: a dead end), or -1 when out of memory. */
int gram_mask(const gram_state *s, const gram_vocab *v, uint32_t *bits);

/* 1 when token id is allowed in state s (the bit gram_mask would set);
 * costs one feed of the token's bytes, not a mask. */
int gram_token_ok(const gram_state *s, const gram_vocab *v, int32_t id);

/* Advances s by token id: 0, or -1 when the token is not allowed (s then
 * unchanged). An end-of-generation token is accepted only when done and
 * leaves the state as it is. */
int gram_accept_token(gram_state *s, const gram_vocab *v, int32_t id);

#endif
