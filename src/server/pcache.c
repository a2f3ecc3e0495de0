/* The prompt cache (pcache.h). Entries sit in an array in use order, the
 * least recent first: a server parks a few hundred states at most (each
 * one a conversation's caches, megabytes to gigabytes), so linear scans
 * cost nothing beside the copies they decide. */
#include "server/pcache.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    gem_park *p;
    int pins; /* copies in progress (pcache_take without a move) */
} entry;

struct pcache {
    entry *e; /* least recently used first */
    size_t n, cap;
    pcache_stats st;
};

pcache *pcache_new(size_t limit) {
    pcache *c = calloc(1, sizeof *c);
    if (c) c->st.limit = limit;
    return c;
}

void pcache_free(pcache *c) {
    if (!c) return;
    for (size_t i = 0; i < c->n; i++) gem_park_free(c->e[i].p);
    free(c->e);
    free(c);
}

/* Takes entry i out (the order of the others kept). */
static entry take_at(pcache *c, size_t i) {
    entry x = c->e[i];
    memmove(c->e + i, c->e + i + 1, (c->n - i - 1) * sizeof *c->e);
    c->n--;
    c->st.bytes -= gem_park_bytes(x.p);
    return x;
}

gem_park *pcache_take(pcache *c, const int32_t *ids, size_t n, long beat, long gain, long slack, long *kept,
                      int *moved) {
    long best = beat + gain - 1;
    size_t at = c->n;
    for (size_t i = c->n; i-- > 0;) { /* the most recent first wins a tie */
        const long k = gem_park_keeps(c->e[i].p, ids, n);
        if (k > best) best = k, at = i;
    }
    if (at == c->n) {
        c->st.misses++;
        return NULL;
    }
    c->st.hits++;
    *kept = best;
    size_t held;
    gem_park_tokens(c->e[at].p, &held);
    entry x = c->e[at];
    if (best + slack >= (long)held && 2 * best >= (long)held && !x.pins) { /* its conversation goes on in the slot */
        *moved = 1;
        return take_at(c, at).p;
    }
    *moved = 0;
    take_at(c, at);
    x.pins++;
    c->e[c->n++] = x; /* the most recently used (room: it was there) */
    c->st.bytes += gem_park_bytes(x.p);
    return x.p;
}

void pcache_unpin(pcache *c, const gem_park *p) {
    for (size_t i = 0; i < c->n; i++)
        if (c->e[i].p == p && c->e[i].pins > 0) {
            c->e[i].pins--;
            return;
        }
}

/* 1 when a's tokens begin b's (a is b's conversation, earlier). */
static int begins(const gem_park *a, const gem_park *b) {
    size_t na, nb;
    const int32_t *ta = gem_park_tokens(a, &na), *tb = gem_park_tokens(b, &nb);
    return na <= nb && !memcmp(ta, tb, na * sizeof *ta);
}

void pcache_put(pcache *c, gem_park *p) {
    const size_t bytes = gem_park_bytes(p);
    for (size_t i = c->n; i-- > 0;)
        if (!c->e[i].pins && begins(c->e[i].p, p)) {
            gem_park_free(take_at(c, i).p);
            c->st.replaced++;
        }
    size_t pinned = 0;
    for (size_t i = 0; i < c->n; i++) pinned += c->e[i].pins ? gem_park_bytes(c->e[i].p) : 0;
    if (bytes > c->st.limit || pinned + bytes > c->st.limit) { /* no room even after every eviction */
        gem_park_free(p);
        c->st.evicted++;
        return;
    }
    for (size_t i = 0; i < c->n && c->st.bytes + bytes > c->st.limit;) {
        if (c->e[i].pins) {
            i++;
            continue;
        }
        gem_park_free(take_at(c, i).p);
        c->st.evicted++;
    }
    if (c->n == c->cap) {
        const size_t cap = c->cap ? 2 * c->cap : 16;
        entry *e = realloc(c->e, cap * sizeof *e);
        if (!e) { /* no memory for the list: the state is dropped (reuse is an optimisation) */
            gem_park_free(p);
            return;
        }
        c->e = e;
        c->cap = cap;
    }
    c->e[c->n].p = p;
    c->e[c->n].pins = 0;
    c->n++;
    c->st.bytes += bytes;
    c->st.parked++;
}

void pcache_get_stats(const pcache *c, pcache_stats *st) {
    *st = c->st;
    st->entries = (long)c->n;
}
