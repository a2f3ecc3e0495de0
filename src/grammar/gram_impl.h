/* Internals shared by the grammar module's files: the compiled form, the
 * builder the front-ends use, and the stack sets the matcher and the mask
 * walk operate on. Not for use outside src/grammar/.
 *
 * Compiled form: one flat array of elements. Each alternative of each rule
 * is its elements followed by an END element; a position is an index into
 * that array. A parse stack is an array of positions, bottom first: the top
 * is the element to match next (always a byte set once expanded), the
 * entries below are return positions (the element after a rule reference).
 * A reference in tail position (followed by END) replaces its frame instead
 * of pushing one, so right recursion runs in constant depth. The empty
 * stack means the sentence is complete. Builder output is checked: every
 * rule productive, no left recursion, so expansion always terminates. */
#ifndef GEM_GRAMMAR_GRAM_IMPL_H
#define GEM_GRAMMAR_GRAM_IMPL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "grammar/grammar.h"
#include "util/strbuf.h"

enum { GE_SET = 0, GE_REF = 1, GE_END = 2 };
#define GE(k, a) (((uint32_t)(k) << 30) | (uint32_t)(a))
#define GE_KIND(e) ((e) >> 30)
#define GE_ARG(e) ((e)&0x3fffffffu)
#define GRAM_NONE 0xffffffffu

/* memo of canonical keys by matcher position group (vocab.c fills it) */
typedef struct {
    uint32_t *pos, n_pos, t; /* key: the group's top positions, the token bound */
    uint64_t h;
    char *canon; /* the canonical key bytes */
    size_t canon_len;
    uint64_t canon_h;
} gram_memo_ent;

struct gram {
    uint32_t *el, n_el;
    uint32_t *alt;      /* alternative start positions, rule by rule */
    uint32_t *rule_alt; /* rule r's alternatives: alt[rule_alt[r] .. rule_alt[r+1]) */
    uint32_t n_rules, root;
    uint8_t (*sets)[32];
    uint32_t n_sets;
    uint32_t *minlen; /* per rule: the fewest bytes it derives */
    pthread_mutex_t mu; /* guards memo */
    gram_memo_ent *memo;
    size_t memo_n, memo_cap;
    uint32_t *memo_ht; /* memo index + 1, open addressing */
    size_t memo_ht_cap;
    /* gram_canon_key's scratch (under mu): an entry is valid only when its
     * stamp is the current one, so a key costs what it visits, not the
     * grammar's size */
    uint32_t *ck_dist, *ck_dist_stamp, *ck_cid, *ck_cid_stamp, ck_stamp;
};

static inline int gram_set_has(const gram *g, uint32_t set, uint8_t b) { return (g->sets[set][b >> 3] >> (b & 7)) & 1; }

/* ---- builder ---- */

typedef struct gb gb;

/* One alternative under construction. */
typedef struct {
    uint32_t *v;
    size_t n, cap;
    int failed;
} gseq;

gb *gb_new(void);
void gb_free(gb *b);
/* A new rule without alternatives (they may be added later: recursion). */
uint32_t gb_rule(gb *b);
/* Adds s as an alternative of rule r (s is copied; reset it to reuse). */
void gb_alt(gb *b, uint32_t r, const gseq *s);
/* A new rule whose single alternative is s. */
uint32_t gb_rule_seq(gb *b, const gseq *s);
/* A new rule matching exactly the bytes p[0..n). */
uint32_t gb_rule_lit(gb *b, const char *p, size_t n);
int gb_failed(const gb *b);

void gs_set(gb *b, gseq *s, const uint8_t set[32]);
void gs_range(gb *b, gseq *s, uint8_t lo, uint8_t hi);
void gs_byte(gb *b, gseq *s, uint8_t c);
void gs_lit(gb *b, gseq *s, const char *p, size_t n);
void gs_str(gb *b, gseq *s, const char *p); /* NUL-terminated literal */
void gs_ref(gseq *s, uint32_t rule);
void gs_reset(gseq *s);
void gs_free(gseq *s);

/* set helpers: 256-bit byte sets */
static inline void bset_add(uint8_t *set, uint8_t lo, uint8_t hi) {
    for (unsigned c = lo; c <= hi; c++) set[c >> 3] |= (uint8_t)(1u << (c & 7));
}
static inline void bset_del(uint8_t *set, uint8_t c) { set[c >> 3] &= (uint8_t) ~(1u << (c & 7)); }

/* Adds to rule r the alternatives of one non-ASCII UTF-8 character, each
 * followed by a reference to cont (GRAM_NONE: nothing follows). */
void gb_utf8_alts(gb *b, uint32_t r, uint32_t cont);

/* "any valid UTF-8 text not containing marker, then marker" (marker:
 * non-empty ASCII) as a rule. */
uint32_t gb_until(gb *b, const char *marker);

/* Flattens and checks the grammar rooted at rule root. The builder stays
 * the caller's to free. */
gram *gb_finish(gb *b, uint32_t root, gem_err *err);

/* A builder holding a copy of g's rules (rule ids as in g). */
gb *gb_from_gram(const gram *g);

/* ---- stack sets ---- */

typedef struct {
    uint32_t n, used;     /* stacks, entries */
    uint32_t cap_n, cap_e;
    uint32_t *off; /* stack i: e[off[i] .. off[i+1]) */
    uint32_t *e;
    uint32_t *ht; /* dedup table: stack index + 1, 0 free */
    uint32_t ht_cap;
    uint32_t max_len; /* the longest stack held */
    int has_empty; /* holds the empty stack */
    int failed;    /* out of memory or over GRAM_MAX_STACKS */
} sset;

void sset_free(sset *s);
void sset_reset(sset *s);
int sset_copy(sset *dst, const sset *src);
void sset_add(sset *s, const uint32_t *st, uint32_t n);
static inline uint32_t sset_len(const sset *s, uint32_t i) { return s->off[i + 1] - s->off[i]; }
static inline const uint32_t *sset_stack(const sset *s, uint32_t i) { return s->e + s->off[i]; }

/* Expands the stack st[0..n) (st has room for GRAM_MAX_DEPTH + 1 entries;
 * its top is a position not yet expanded) into out. */
void gram_expand(const gram *g, uint32_t *st, uint32_t n, sset *out);
/* dst = the stacks of src after byte b. 0 when dst holds any stack. */
int gram_step(const gram *g, const sset *src, uint8_t b, sset *dst);
/* The start set. */
void gram_start(const gram *g, sset *out);

struct gram_state {
    const gram *g;
    sset cur, tmp[2];
};

/* The canonical key of a group of top positions: a serialization of the
 * part of the grammar that matching at most t bytes from them can reach
 * (positions farther than t bytes are cut). Two groups with equal keys
 * accept, reject and leave the frame on the same tokens of at most t
 * bytes. The caller holds g->mu. 0, or -1 when out of memory. */
int gram_canon_key(gram *g, const uint32_t *pos, uint32_t n, uint32_t t, strbuf *out);

#endif
