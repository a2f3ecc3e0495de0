/* The BPE merge loop and input reading every tokenizer model shares (see
 * tok_int.h).
 *
 * Merging by ids is equivalent to the reference's merging by strings
 * because every merge part of the vocabulary is itself a token (checked at
 * load; a merge that does not resolve is counted and can never fire, as in
 * the reference).
 *
 * The priority queue holds (rank << 32 | offset) keys; an entry is stale
 * unless the pair now starting at that offset still has that rank. Since
 * symbols only grow and a rank names exactly one (left, right) pair, this
 * accepts exactly the entries the reference's text comparison accepts, in
 * the same order (rank, then leftmost). */
#include <stdlib.h>

#include "tok/tok_int.h"

int bpe_reserve(bpe_scratch *s, size_t n) {
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

void bpe_scratch_free(bpe_scratch *s) {
    free(s->id);
    free(s->len);
    free(s->prev);
    free(s->heap);
    *s = (bpe_scratch){0};
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

static int push_pair(const tok *t, bpe_scratch *s, int32_t left, int32_t n) {
    int32_t right = left + s->len[left];
    if (right >= n || s->id[left] < 0 || s->id[right] < 0) return 0;
    const tok_merge_slot *m = tok_merge_find(t, s->id[left], s->id[right]);
    if (!m) return 0;
    return heap_push(s, (uint64_t)(uint32_t)m->rank << 32 | (uint32_t)left);
}

int bpe_merge(const tok *t, int32_t n, bpe_scratch *s) {
    s->heap_n = 0;
    for (int32_t i = 0; i < n; i += s->len[i])
        if (push_pair(t, s, i, n)) return -1;
    while (s->heap_n) {
        uint64_t key = heap_pop(s);
        int32_t left = (int32_t)(uint32_t)key, rank = (int32_t)(key >> 32);
        if (s->len[left] == 0) continue;
        int32_t right = left + s->len[left];
        if (right >= n || s->id[left] < 0 || s->id[right] < 0) continue;
        const tok_merge_slot *m = tok_merge_find(t, s->id[left], s->id[right]);
        if (!m || m->rank != rank) continue; /* stale */
        int32_t after = right + s->len[right];
        s->len[left] += s->len[right];
        s->len[right] = 0;
        s->id[left] = m->merged;
        if (after < n) s->prev[after] = left;
        if (s->prev[left] >= 0 && push_pair(t, s, s->prev[left], n)) return -1;
        if (push_pair(t, s, left, n)) return -1;
    }
    return 0;
}

size_t tok_decode_lenient(const unsigned char *p, size_t n, uint32_t *cp) {
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

size_t tok_encode_cp(uint32_t cp, char *o) {
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
