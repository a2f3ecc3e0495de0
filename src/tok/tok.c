/* Gemma 4 tokenizer (see tok.h).
 *
 * Tables: token text -> id and (left id, right id) -> (merge rank, merged
 * id) are open-addressing hash tables built once at load. Merging by ids is
 * equivalent to the reference's merging by strings because every merge part
 * of the vocabulary is itself a token (checked at load; a merge that does
 * not resolve is counted and can never fire, as in the reference).
 *
 * BPE state for one run of text is indexed by byte offset: a live symbol at
 * offset i covers bytes [i, i + len[i]) and its right neighbour starts at
 * i + len[i], so only prev[] needs maintaining. The priority queue holds
 * (rank << 32 | offset) keys; an entry is stale unless the pair now starting
 * at that offset still has that rank. Since symbols only grow and a rank
 * names exactly one (left, right) pair, this accepts exactly the entries the
 * reference's text comparison accepts, in the same order (rank, then
 * leftmost). */
#include "tok/tok.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "util/hash.h"

#define EMPTY_SLOT 0xffffffffu

typedef struct {
    uint64_t key;  /* left << 32 | right */
    int32_t rank;
    int32_t merged;
} merge_slot;

struct tok {
    uint32_t n_vocab;
    gguf_str *text;        /* views into the gguf file */
    uint8_t *attr;
    uint32_t *text_index;  /* id per slot, EMPTY_SLOT when empty */
    uint64_t text_mask;
    uint64_t seed; /* of both tables' hashes, drawn at load */
    merge_slot *merges;
    uint64_t merge_mask;
    uint64_t n_merges, n_unresolved;
    int32_t byte_id[256];
    int32_t ascii_id[128];
    int32_t bos, eos;
    int add_bos, add_eos;
    uint8_t *eog;          /* per id */
    int32_t *specials;     /* ids to split out, longest text first */
    uint32_t n_specials;
    char *pieces;          /* rendered pieces, concatenated */
    uint64_t *piece_off;   /* n_vocab + 1 offsets */
    uint32_t max_cps;      /* the most code points in a token text (tok_min_tokens) */
};

/* Lenient decode of one code point as the reference does it; returns the
 * bytes consumed and the code point (0xFFFD for an invalid byte). */
static size_t decode_lenient(const unsigned char *p, size_t n, uint32_t *cp);

/* ---- hashing ---- */

/* Seeded per vocabulary (util/hash.h): texts and merge pairs come from
 * the file, and a fixed hash lets its author pick keys that share slots. */
static uint64_t hash_bytes(const tok *t, const char *p, size_t n) { return hash_bytes_seeded(p, n, t->seed); }
static uint64_t hash_pair(const tok *t, uint64_t k) { return hash_mix64(k ^ t->seed); }

int32_t tok_find(const tok *t, const char *s, size_t n) {
    uint64_t h = hash_bytes(t, s, n) & t->text_mask;
    for (;;) {
        uint32_t id = t->text_index[h];
        if (id == EMPTY_SLOT) return -1;
        if (t->text[id].len == n && !memcmp(t->text[id].ptr, s, n)) return (int32_t)id;
        h = (h + 1) & t->text_mask;
    }
}

static const merge_slot *merge_find(const tok *t, int32_t l, int32_t r) {
    uint64_t key = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
    uint64_t h = hash_pair(t, key) & t->merge_mask;
    for (;;) {
        const merge_slot *s = &t->merges[h];
        if (s->rank < 0) return NULL;
        if (s->key == key) return s;
        h = (h + 1) & t->merge_mask;
    }
}

/* ---- loading ---- */

static int64_t key_index(const gguf_file *f, const char *key) { return gguf_find_key(f, key); }

static int load_id(const gguf_file *f, const char *key, uint32_t n_vocab, int32_t *out, gem_err *err) {
    int64_t i = key_index(f, key);
    if (i < 0) return 0; /* keep the default */
    int64_t v;
    if (gguf_kv_int(f, (uint64_t)i, &v)) return gem_err_set(err, "%s: key '%s' is not an integer", gguf_path(f), key);
    if (v < 0 || v >= n_vocab) return gem_err_set(err, "%s: key '%s' = %lld is out of the vocabulary", gguf_path(f), key, (long long)v);
    *out = (int32_t)v;
    return 0;
}

static int load_bool(const gguf_file *f, const char *key, int *out, gem_err *err) {
    int64_t i = key_index(f, key);
    if (i < 0) return 0;
    if (gguf_kv_bool(f, (uint64_t)i, out)) return gem_err_set(err, "%s: key '%s' is not a bool", gguf_path(f), key);
    return 0;
}

/* End-of-generation texts the reference recognises (its list, restricted to
 * what a Gemma-family vocabulary can hold); they also become control. */
static const char *const eog_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<｜end▁of▁sentence｜>", "[e~[",
};

static int build_attrs(tok *t, const gguf_file *f, gem_err *err) {
    int64_t ki = key_index(f, "tokenizer.ggml.token_type");
    for (uint32_t i = 0; i < t->n_vocab; i++) t->attr[i] = TOK_ATTR_NORMAL;
    if (ki >= 0) {
        if (gguf_kv_arr_len(f, (uint64_t)ki) != t->n_vocab)
            return gem_err_set(err, "%s: tokenizer.ggml.token_type has %llu entries for %u tokens", gguf_path(f),
                               (unsigned long long)gguf_kv_arr_len(f, (uint64_t)ki), t->n_vocab);
        for (uint32_t i = 0; i < t->n_vocab; i++) {
            int64_t ty;
            if (gguf_kv_arr_int(f, (uint64_t)ki, i, &ty))
                return gem_err_set(err, "%s: tokenizer.ggml.token_type is not an integer array", gguf_path(f));
            switch (ty) {
            case 2: t->attr[i] = TOK_ATTR_UNKNOWN; break;
            case 3: t->attr[i] = TOK_ATTR_CONTROL; break;
            case 4: t->attr[i] = TOK_ATTR_USER_DEFINED; break;
            case 5: t->attr[i] = TOK_ATTR_UNUSED; break;
            case 6: t->attr[i] = TOK_ATTR_BYTE; break;
            default: t->attr[i] = TOK_ATTR_NORMAL; break;
            }
            /* a byte token stands for the one byte its text <0xHH> names
             * (build_pieces writes that byte whatever the text's length) */
            const gguf_str *s = &t->text[i];
            if (ty == 6 && (s->len != 6 || memcmp(s->ptr, "<0x", 3) || s->ptr[5] != '>' || !isxdigit((unsigned char)s->ptr[3]) ||
                            !isxdigit((unsigned char)s->ptr[4])))
                return gem_err_set(err, "%s: token %u is a byte token (type 6) but its text is not <0xHH>", gguf_path(f),
                                   i);
        }
    }
    /* control tokens named "unused" are unused too */
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        if (!(t->attr[i] & TOK_ATTR_CONTROL)) continue;
        const gguf_str *s = &t->text[i];
        for (uint64_t k = 0; k + 6 <= s->len; k++)
            if (!memcmp(s->ptr + k, "unused", 6)) { t->attr[i] |= TOK_ATTR_UNUSED; break; }
    }
    int32_t tool_response = -1, eos_s = -1;
    for (size_t e = 0; e < sizeof eog_texts / sizeof eog_texts[0]; e++) {
        int32_t id = tok_find(t, eog_texts[e], strlen(eog_texts[e]));
        if (id < 0) continue;
        t->eog[id] = 1;
        t->attr[id] |= TOK_ATTR_CONTROL;
        if (!strcmp(eog_texts[e], "<|tool_response>")) tool_response = id;
        if (!strcmp(eog_texts[e], "</s>")) eos_s = id;
    }
    /* As the reference: with <|tool_response> in the end set, "</s>" is an
     * ordinary token again. */
    if (tool_response >= 0 && eos_s >= 0) {
        t->eog[eos_s] = 0;
        t->attr[eos_s] = TOK_ATTR_NORMAL;
    }
    if (t->eos >= 0) t->eog[t->eos] = 1;
    return 0;
}

/* Specials are matched longest first, ties by id (a total order: a file
 * may mark every token special, so the sort must not be quadratic). */
typedef struct {
    uint64_t len;
    int32_t id;
} special_key;

static int cmp_special(const void *a, const void *b) {
    const special_key *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static int build_specials(tok *t) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < t->n_vocab; i++)
        if (t->attr[i] & (TOK_ATTR_CONTROL | TOK_ATTR_USER_DEFINED | TOK_ATTR_UNKNOWN) && t->text[i].len) n++;
    t->specials = malloc((n ? n : 1) * sizeof *t->specials);
    if (!t->specials) return -1;
    special_key *keys = malloc((n ? n : 1) * sizeof *keys);
    if (!keys) return -1;
    t->n_specials = 0;
    for (uint32_t i = 0; i < t->n_vocab; i++)
        if (t->attr[i] & (TOK_ATTR_CONTROL | TOK_ATTR_USER_DEFINED | TOK_ATTR_UNKNOWN) && t->text[i].len)
            keys[t->n_specials++] = (special_key){t->text[i].len, (int32_t)i};
    qsort(keys, n, sizeof *keys, cmp_special);
    for (uint32_t i = 0; i < n; i++) t->specials[i] = keys[i].id;
    free(keys);
    return 0;
}

static int build_pieces(tok *t) {
    uint64_t total = 0;
    for (uint32_t i = 0; i < t->n_vocab; i++) total += t->text[i].len;
    t->pieces = malloc(total + 1);
    t->piece_off = malloc((t->n_vocab + 1ull) * sizeof *t->piece_off);
    if (!t->pieces || !t->piece_off) return -1;
    uint64_t at = 0;
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        t->piece_off[i] = at;
        const gguf_str *s = &t->text[i];
        uint8_t a = t->attr[i];
        if (a & (TOK_ATTR_CONTROL | TOK_ATTR_UNKNOWN | TOK_ATTR_USER_DEFINED)) {
            memcpy(t->pieces + at, s->ptr, s->len);
            at += s->len;
        } else if (a & TOK_ATTR_NORMAL) {
            for (uint64_t k = 0; k < s->len;) {
                if (k + 3 <= s->len && !memcmp(s->ptr + k, "\xe2\x96\x81", 3)) {
                    t->pieces[at++] = ' ';
                    k += 3;
                } else {
                    t->pieces[at++] = s->ptr[k++];
                }
            }
        } else if (a & TOK_ATTR_BYTE) {
            unsigned v = 0;
            for (uint64_t k = 3; k < 5 && k < s->len; k++) {
                char c = s->ptr[k];
                v = v * 16 + (unsigned)(c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : 0);
            }
            t->pieces[at++] = (char)v;
        }
    }
    t->piece_off[t->n_vocab] = at;
    return 0;
}

static int build_merges(tok *t, const gguf_file *f, gem_err *err) {
    int64_t ki = key_index(f, "tokenizer.ggml.merges");
    uint64_t n = ki >= 0 ? gguf_kv_arr_len(f, (uint64_t)ki) : 0;
    if (ki >= 0 && gguf_kv_arr_type(f, (uint64_t)ki) != GGUF_T_STRING)
        return gem_err_set(err, "%s: tokenizer.ggml.merges is not a string array", gguf_path(f));
    uint64_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    t->merges = malloc(cap * sizeof *t->merges);
    if (!t->merges) return gem_err_set(err, "out of memory");
    for (uint64_t i = 0; i < cap; i++) t->merges[i].rank = -1;
    t->merge_mask = cap - 1;
    char *buf = NULL;
    size_t buf_cap = 0;
    for (uint64_t i = 0; i < n && i < INT32_MAX; i++) {
        gguf_str m;
        gguf_kv_arr_str(f, (uint64_t)ki, i, &m);
        /* the reference splits at the first space after the first byte */
        const char *sp = m.len > 1 ? memchr(m.ptr + 1, ' ', m.len - 1) : NULL;
        if (!sp) { t->n_unresolved++; continue; }
        size_t ln = (size_t)(sp - m.ptr), rn = m.len - ln - 1;
        int32_t l = tok_find(t, m.ptr, ln), r = tok_find(t, sp + 1, rn);
        if (l < 0 || r < 0) { t->n_unresolved++; continue; }
        if (ln + rn > buf_cap) {
            buf_cap = (ln + rn) * 2;
            char *nb = realloc(buf, buf_cap);
            if (!nb) { free(buf); return gem_err_set(err, "out of memory"); }
            buf = nb;
        }
        memcpy(buf, m.ptr, ln);
        memcpy(buf + ln, sp + 1, rn);
        int32_t merged = tok_find(t, buf, ln + rn);
        uint64_t key = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
        uint64_t h = hash_pair(t, key) & t->merge_mask;
        while (t->merges[h].rank >= 0 && t->merges[h].key != key) h = (h + 1) & t->merge_mask;
        if (t->merges[h].rank >= 0) continue; /* first rank wins, as in the reference */
        t->merges[h] = (merge_slot){key, (int32_t)i, merged};
        t->n_merges++;
    }
    free(buf);
    return 0;
}

tok *tok_load(const gguf_file *f, gem_err *err) {
    int64_t ki = key_index(f, "tokenizer.ggml.model");
    gguf_str model;
    if (ki < 0 || gguf_kv_str(f, (uint64_t)ki, &model)) {
        gem_err_set(err, "%s: no tokenizer (missing tokenizer.ggml.model)", gguf_path(f));
        return NULL;
    }
    if (!gguf_str_eq(model, "gemma4")) {
        gem_err_set(err, "%s: tokenizer model '%.*s' is not supported (gem supports gemma4)", gguf_path(f),
                    (int)(model.len > 40 ? 40 : model.len), model.ptr);
        return NULL;
    }
    ki = key_index(f, "tokenizer.ggml.tokens");
    if (ki < 0 || gguf_kv_arr_type(f, (uint64_t)ki) != GGUF_T_STRING || gguf_kv_arr_len(f, (uint64_t)ki) == 0 ||
        gguf_kv_arr_len(f, (uint64_t)ki) >= INT32_MAX) {
        gem_err_set(err, "%s: tokenizer.ggml.tokens is missing or not a non-empty string array", gguf_path(f));
        return NULL;
    }
    tok *t = calloc(1, sizeof *t);
    if (!t) {
        gem_err_set(err, "out of memory");
        return NULL;
    }
    t->seed = hash_seed(t);
    t->n_vocab = (uint32_t)gguf_kv_arr_len(f, (uint64_t)ki);
    t->text = malloc(t->n_vocab * sizeof *t->text);
    t->attr = malloc(t->n_vocab);
    t->eog = calloc(t->n_vocab, 1);
    uint64_t cap = 16;
    while (cap < (uint64_t)t->n_vocab * 2) cap <<= 1;
    t->text_index = malloc(cap * sizeof *t->text_index);
    t->text_mask = cap - 1;
    if (!t->text || !t->attr || !t->eog || !t->text_index) goto oom;
    memset(t->text_index, 0xff, cap * sizeof *t->text_index);
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        gguf_kv_arr_str(f, (uint64_t)ki, i, &t->text[i]);
        uint32_t cps = 0, cp;
        for (size_t k = 0; k < t->text[i].len; cps++)
            k += decode_lenient((const unsigned char *)t->text[i].ptr + k, t->text[i].len - k, &cp);
        if (cps > t->max_cps) t->max_cps = cps;
        /* later duplicates win, as in the reference's text -> id map */
        uint64_t h = hash_bytes(t, t->text[i].ptr, t->text[i].len) & t->text_mask;
        for (;;) {
            uint32_t id = t->text_index[h];
            if (id == EMPTY_SLOT) { t->text_index[h] = i; break; }
            if (t->text[id].len == t->text[i].len && !memcmp(t->text[id].ptr, t->text[i].ptr, t->text[i].len)) {
                t->text_index[h] = i;
                break;
            }
            h = (h + 1) & t->text_mask;
        }
    }
    t->bos = 2;
    t->eos = 1;
    t->add_bos = 1;
    if (load_id(f, "tokenizer.ggml.bos_token_id", t->n_vocab, &t->bos, err) ||
        load_id(f, "tokenizer.ggml.eos_token_id", t->n_vocab, &t->eos, err) ||
        load_bool(f, "tokenizer.ggml.add_bos_token", &t->add_bos, err) ||
        load_bool(f, "tokenizer.ggml.add_eos_token", &t->add_eos, err))
        goto fail;
    t->add_bos = 1; /* forced for Gemma 4, as the reference does */
    if (t->bos >= (int32_t)t->n_vocab) t->bos = -1;
    if (t->eos >= (int32_t)t->n_vocab) t->eos = -1;
    if (build_attrs(t, f, err) || build_merges(t, f, err)) goto fail;
    if (build_specials(t) || build_pieces(t)) goto oom;
    for (int b = 0; b < 256; b++) {
        char name[8];
        static const char hex[] = "0123456789ABCDEF";
        name[0] = '<'; name[1] = '0'; name[2] = 'x'; name[3] = hex[b >> 4]; name[4] = hex[b & 15]; name[5] = '>';
        t->byte_id[b] = tok_find(t, name, 6);
    }
    for (int c = 0; c < 128; c++) {
        char ch = (char)c;
        t->ascii_id[c] = tok_find(t, &ch, 1);
    }
    return t;
oom:
    gem_err_set(err, "out of memory loading the tokenizer");
fail:
    tok_free(t);
    return NULL;
}

void tok_free(tok *t) {
    if (!t) return;
    free(t->text);
    free(t->attr);
    free(t->eog);
    free(t->text_index);
    free(t->merges);
    free(t->specials);
    free(t->pieces);
    free(t->piece_off);
    free(t);
}

uint32_t tok_n_vocab(const tok *t) { return t->n_vocab; }
int32_t tok_bos(const tok *t) { return t->bos; }
int32_t tok_eos(const tok *t) { return t->eos; }
int tok_add_bos(const tok *t) { return t->add_bos; }
int tok_is_eog(const tok *t, int32_t id) { return id >= 0 && (uint32_t)id < t->n_vocab && t->eog[id]; }
uint32_t tok_attr(const tok *t, int32_t id) { return id >= 0 && (uint32_t)id < t->n_vocab ? t->attr[id] : 0; }

const char *tok_text(const tok *t, int32_t id, size_t *len) {
    if (id < 0 || (uint32_t)id >= t->n_vocab) return NULL;
    *len = t->text[id].len;
    return t->text[id].ptr;
}

const char *tok_piece(const tok *t, int32_t id, int special, size_t *len) {
    if (id < 0 || (uint32_t)id >= t->n_vocab) return NULL;
    if (!special && (t->attr[id] & (TOK_ATTR_CONTROL | TOK_ATTR_UNKNOWN))) {
        *len = 0;
        return "";
    }
    *len = t->piece_off[id + 1] - t->piece_off[id];
    return t->pieces + t->piece_off[id];
}

/* ---- encoding ---- */

int tok_ids_push(tok_ids *o, int32_t id) {
    if (o->n == o->cap) {
        size_t c = o->cap ? o->cap * 2 : 64;
        int32_t *v = realloc(o->v, c * sizeof *v);
        if (!v) return -1;
        o->v = v;
        o->cap = c;
    }
    o->v[o->n++] = id;
    return 0;
}

void tok_ids_free(tok_ids *ids) {
    free(ids->v);
    ids->v = NULL;
    ids->n = ids->cap = 0;
}

typedef struct {
    int32_t *id, *len, *prev;
    uint64_t *heap;
    size_t cap, heap_n, heap_cap;
} bpe_scratch;

static int scratch_reserve(bpe_scratch *s, size_t n) {
    if (n <= s->cap) return 0;
    size_t c = n < 256 ? 256 : n;
    int32_t *a = realloc(s->id, c * 4), *b = NULL, *d = NULL;
    if (a) s->id = a;
    b = realloc(s->len, c * 4);
    if (b) s->len = b;
    d = realloc(s->prev, c * 4);
    if (d) s->prev = d;
    if (!a || !b || !d) return -1;
    s->cap = c;
    return 0;
}

static int heap_push(bpe_scratch *s, uint64_t key) {
    if (s->heap_n == s->heap_cap) {
        size_t c = s->heap_cap ? s->heap_cap * 2 : 256;
        uint64_t *h = realloc(s->heap, c * sizeof *h);
        if (!h) return -1;
        s->heap = h;
        s->heap_cap = c;
    }
    size_t i = s->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (s->heap[p] <= key) break;
        s->heap[i] = s->heap[p];
        i = p;
    }
    s->heap[i] = key;
    return 0;
}

static uint64_t heap_pop(bpe_scratch *s) {
    uint64_t top = s->heap[0], last = s->heap[--s->heap_n];
    size_t i = 0, n = s->heap_n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && s->heap[c + 1] < s->heap[c]) c++;
        if (last <= s->heap[c]) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n) s->heap[i] = last;
    return top;
}

static size_t utf8_len_of(unsigned char b) {
    static const uint8_t lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lookup[b >> 4];
}

static int push_pair(const tok *t, bpe_scratch *s, int32_t left, int32_t n) {
    int32_t right = left + s->len[left];
    if (right >= n || s->id[left] < 0 || s->id[right] < 0) return 0;
    const merge_slot *m = merge_find(t, s->id[left], s->id[right]);
    if (!m) return 0;
    return heap_push(s, (uint64_t)(uint32_t)m->rank << 32 | (uint32_t)left);
}

/* BPE over one run w[0..n) of well-formed text. */
static int bpe_run(const tok *t, const char *w, int32_t n, bpe_scratch *s, tok_ids *out) {
    if (scratch_reserve(s, (size_t)n)) return -1;
    s->heap_n = 0;
    int32_t prev = -1;
    for (int32_t i = 0; i < n;) {
        int32_t l = (int32_t)utf8_len_of((unsigned char)w[i]);
        if (l > n - i) l = n - i;
        s->len[i] = l;
        s->prev[i] = prev;
        s->id[i] = l == 1 && (unsigned char)w[i] < 128 ? t->ascii_id[(unsigned char)w[i]] : tok_find(t, w + i, (size_t)l);
        prev = i;
        i += l;
    }
    for (int32_t i = 0; i < n; i += s->len[i])
        if (push_pair(t, s, i, n)) return -1;
    while (s->heap_n) {
        uint64_t key = heap_pop(s);
        int32_t left = (int32_t)(uint32_t)key, rank = (int32_t)(key >> 32);
        if (s->len[left] == 0) continue;
        int32_t right = left + s->len[left];
        if (right >= n || s->id[left] < 0 || s->id[right] < 0) continue;
        const merge_slot *m = merge_find(t, s->id[left], s->id[right]);
        if (!m || m->rank != rank) continue; /* stale */
        int32_t after = right + s->len[right];
        s->len[left] += s->len[right];
        s->len[right] = 0;
        s->id[left] = m->merged;
        if (after < n) s->prev[after] = left;
        if (s->prev[left] >= 0 && push_pair(t, s, s->prev[left], n)) return -1;
        if (push_pair(t, s, left, n)) return -1;
    }
    for (int32_t i = 0; i < n; i += s->len[i]) {
        if (s->id[i] >= 0) {
            if (tok_ids_push(out, s->id[i])) return -1;
            continue;
        }
        for (int32_t k = 0; k < s->len[i]; k++) {
            int32_t b = t->byte_id[(unsigned char)w[i + k]];
            if (b >= 0 && tok_ids_push(out, b)) return -1;
        }
    }
    return 0;
}

/* Encoding maps each code point of the input to one symbol (a space to
 * U+2581, an invalid byte to U+FFFD, a special token's text to itself),
 * and a token is a run of symbols whose text it spells: a token covers at
 * most max_cps code points. Every code point but a stray continuation
 * byte's holds exactly one byte outside 0x80-0xBF, so those bytes count
 * code points from below. */
size_t tok_min_tokens(const tok *t, const char *text, size_t len) {
    size_t cps = 0;
    for (size_t i = 0; i < len; i++) cps += ((unsigned char)text[i] & 0xc0) != 0x80;
    return t->max_cps ? (cps + t->max_cps - 1) / t->max_cps : 0;
}

static size_t decode_lenient(const unsigned char *p, size_t n, uint32_t *cp) {
    unsigned char b = p[0];
    if (b < 0x80) { *cp = b; return 1; }
    if (!(b & 0x40)) goto bad;
    if (!(b & 0x20)) {
        if (n < 2 || (p[1] & 0xc0) != 0x80) goto bad;
        *cp = (uint32_t)(b & 0x1f) << 6 | (p[1] & 0x3f);
        return 2;
    }
    if (!(b & 0x10)) {
        if (n < 3 || (p[1] & 0xc0) != 0x80 || (p[2] & 0xc0) != 0x80) goto bad;
        *cp = (uint32_t)(b & 0x0f) << 12 | (uint32_t)(p[1] & 0x3f) << 6 | (p[2] & 0x3f);
        return 3;
    }
    if (!(b & 0x08)) {
        if (n < 4 || (p[1] & 0xc0) != 0x80 || (p[2] & 0xc0) != 0x80 || (p[3] & 0xc0) != 0x80) goto bad;
        *cp = (uint32_t)(b & 0x07) << 18 | (uint32_t)(p[1] & 0x3f) << 12 | (uint32_t)(p[2] & 0x3f) << 6 | (p[3] & 0x3f);
        return 4;
    }
bad:
    *cp = 0xfffd;
    return 1;
}

static size_t encode_cp(uint32_t cp, char *o) {
    if (cp > 0x10ffff) cp = 0xfffd; /* the reference throws here; a replacement character is the sane reading */
    if (cp <= 0x7f) { o[0] = (char)cp; return 1; }
    if (cp <= 0x7ff) { o[0] = (char)(0xc0 | cp >> 6); o[1] = (char)(0x80 | (cp & 0x3f)); return 2; }
    if (cp <= 0xffff) {
        o[0] = (char)(0xe0 | cp >> 12); o[1] = (char)(0x80 | ((cp >> 6) & 0x3f)); o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | cp >> 18); o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f)); o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* One fragment of plain text: escape spaces, normalise, split into newline
 * and non-newline runs, BPE each run. */
static int encode_raw(const tok *t, const char *text, size_t len, bpe_scratch *s, tok_ids *out) {
    if (len == 0) return 0;
    if (len > (size_t)INT32_MAX / 4) return -1;
    /* a space grows to 3 bytes, an invalid byte to 3 (U+FFFD): 3x bounds both */
    char *norm = malloc(len * 3);
    if (!norm) return -1;
    size_t m = 0;
    const unsigned char *p = (const unsigned char *)text;
    for (size_t i = 0; i < len;) {
        if (p[i] == ' ') {
            memcpy(norm + m, "\xe2\x96\x81", 3);
            m += 3;
            i++;
            continue;
        }
        uint32_t cp;
        size_t k = decode_lenient(p + i, len - i, &cp);
        m += encode_cp(cp, norm + m);
        i += k;
    }
    int rc = 0;
    for (size_t i = 0; i < m && !rc;) {
        int nl = norm[i] == '\n';
        size_t j = i;
        while (j < m && (norm[j] == '\n') == nl) j++;
        if (nl) {
            int32_t id = tok_find(t, norm + i, j - i);
            if (id >= 0) {
                rc = tok_ids_push(out, id);
                i = j;
                continue;
            }
        }
        rc = bpe_run(t, norm + i, (int32_t)(j - i), s, out);
        i = j;
    }
    free(norm);
    return rc;
}

typedef struct {
    size_t off, len;
    int32_t id; /* -1: raw text */
} fragment;

typedef struct {
    fragment *v;
    size_t n, cap;
} frag_list;

static int frag_push(frag_list *l, size_t off, size_t len, int32_t id) {
    if (l->n == l->cap) {
        size_t c = l->cap ? l->cap * 2 : 16;
        fragment *v = realloc(l->v, c * sizeof *v);
        if (!v) return -1;
        l->v = v;
        l->cap = c;
    }
    l->v[l->n++] = (fragment){off, len, id};
    return 0;
}

int tok_encode(const tok *t, const char *text, size_t len, int add_bos, int parse_special, tok_ids *out) {
    if (add_bos && t->add_bos && t->bos >= 0 && tok_ids_push(out, t->bos)) return -1;
    if (len == 0) return 0;
    frag_list cur = {0}, next = {0};
    int rc = frag_push(&cur, 0, len, -1);
    /* Split out special tokens, longest text first, each over every raw
     * fragment left to right: the reference's partition order. */
    for (uint32_t k = 0; k < t->n_specials && !rc; k++) {
        int32_t sid = t->specials[k];
        if (!parse_special && (t->attr[sid] & (TOK_ATTR_CONTROL | TOK_ATTR_UNKNOWN))) continue;
        const gguf_str *st = &t->text[sid];
        next.n = 0;
        for (size_t f = 0; f < cur.n && !rc; f++) {
            fragment fr = cur.v[f];
            if (fr.id >= 0) { rc = frag_push(&next, fr.off, fr.len, fr.id); continue; }
            size_t at = fr.off, end = fr.off + fr.len;
            while (!rc) {
                const char *hit = end - at >= st->len ? memmem(text + at, end - at, st->ptr, st->len) : NULL;
                if (!hit) {
                    if (end > at) rc = frag_push(&next, at, end - at, -1);
                    break;
                }
                size_t h = (size_t)(hit - text);
                if (h > at) rc = frag_push(&next, at, h - at, -1);
                if (!rc) rc = frag_push(&next, h, st->len, sid);
                at = h + st->len;
            }
        }
        frag_list tmp = cur;
        cur = next;
        next = tmp;
    }
    bpe_scratch s = {0};
    for (size_t f = 0; f < cur.n && !rc; f++) {
        if (cur.v[f].id >= 0) rc = tok_ids_push(out, cur.v[f].id);
        else rc = encode_raw(t, text + cur.v[f].off, cur.v[f].len, &s, out);
    }
    if (!rc && add_bos && t->add_eos && t->eos >= 0) rc = tok_ids_push(out, t->eos);
    free(s.id);
    free(s.len);
    free(s.prev);
    free(s.heap);
    free(cur.v);
    free(next.v);
    return rc ? -1 : 0;
}

/* ---- streaming decode ---- */

/* Bytes a lead byte announces (0 for a byte that cannot start a character). */
static int utf8_need(unsigned char b) {
    if (b < 0x80) return 1;
    if (b >= 0xc2 && b <= 0xdf) return 2;
    if (b >= 0xe0 && b <= 0xef) return 3;
    if (b >= 0xf0 && b <= 0xf4) return 4;
    return 0;
}

void tok_stream_feed(tok_stream *s, const char *p, size_t n, tok_emit_fn emit, void *ctx) {
    const unsigned char *u = (const unsigned char *)p;
    size_t i = 0;
    /* complete a pending character first */
    while (s->n && i < n) {
        int need = utf8_need(s->pend[0]);
        if ((u[i] & 0xc0) != 0x80) { /* cannot continue: release what is held */
            emit((const char *)s->pend, (size_t)s->n, ctx);
            s->n = 0;
            break;
        }
        s->pend[s->n++] = u[i++];
        if (s->n == need) {
            emit((const char *)s->pend, (size_t)s->n, ctx);
            s->n = 0;
        }
    }
    if (i == n) return;
    /* emit everything up to a possibly incomplete character at the end */
    size_t end = n, k = n;
    int back = 0;
    while (k > i && back < 3 && (u[k - 1] & 0xc0) == 0x80) { k--; back++; }
    if (k > i) {
        int need = utf8_need(u[k - 1]);
        size_t have = n - (k - 1);
        if (need > 1 && have < (size_t)need) end = k - 1;
    }
    if (end > i) emit(p + i, end - i, ctx);
    for (size_t j = end; j < n; j++) s->pend[s->n++] = u[j];
}

void tok_stream_flush(tok_stream *s, tok_emit_fn emit, void *ctx) {
    if (s->n) emit((const char *)s->pend, (size_t)s->n, ctx);
    s->n = 0;
}
