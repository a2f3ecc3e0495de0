/* Token masks: the vocabulary trie, the context-independent caches, and
 * the mask, single-token check and token advance.
 *
 * The mask of a state is the union over its parse stacks. Stacks that
 * share everything below their top entry form a group; matching a token
 * from a group either stays inside the group's frame (the top entry and
 * what it pushes), leaves the frame exactly at the token's end, or leaves
 * it with bytes to spare. The first two cases do not depend on what lies
 * below, so the tokens they accept are computed once per group shape
 * (cached); only the third ("uncertain": the token's rest must be matched
 * by the context) needs the real stacks, and for it only the distinct
 * rests (suffixes, kept in a small trie per cache entry) are fed to the
 * context state. Cache entries are filed under a canonical key of the
 * grammar around the group (gram_canon_key), so every grammar with the same
 * shape there, in this or another request, shares them.
 *
 * Exactness: the cached results hold as long as the real stacks cannot
 * exceed GRAM_MAX_DEPTH where the cached walk did not; when a group sits
 * too deep for that margin the whole mask falls back to walking the trie
 * on the real state. Invariant: cache entries never change once filed.
 *
 * Bound: the entries filed and the table that files them take at most the
 * cache's cap in bytes (gram_vocab_set_cache_cap). Filing an entry that
 * would pass it first evicts the least recently used entries, down to
 * three quarters of the cap (so evictions come in batches, each paid for
 * by a quarter of the cap's worth of filings). An entry is pinned while a
 * mask computation uses it (refs): an evicted entry in use leaves the
 * table at once and is freed, and its bytes uncounted, by the last user;
 * an entry larger than the cap alone is built, used once and freed. A
 * server seeing endless distinct schemas thus keeps the cap, and an
 * evicted entry is rebuilt, identically, when its key comes back. */
#include <stdlib.h>
#include <string.h>

#include "grammar/gram_impl.h"

/* Room for what the context's expansion may push after a frame returns. */
#define DEPTH_MARGIN 16

typedef struct {
    char *key;
    size_t key_len;
    uint64_t h;
    size_t bytes;              /* what the entry holds: itself, its key, lists and trie */
    uint64_t last_use;         /* the vocabulary's use clock at its latest lookup */
    uint32_t refs;             /* mask computations using it now */
    int filed;                 /* in the table (else freed by its last user) */
    uint32_t growth;           /* deepest stack the cached walk held */
    uint32_t n_acc;            /* tokens accepted inside the frame */
    int32_t *acc;              /* as a list, when few */
    uint32_t *acc_bits;        /* or as a bitmap */
    uint32_t n_sn;             /* suffix trie of the uncertain tokens, preorder */
    uint8_t *sn_byte;
    uint16_t *sn_depth;
    uint32_t *sn_skip, *sn_tok_off; /* tokens whose suffix ends at the node */
    int32_t *sn_tok;
} centry;

typedef struct scratch {
    struct scratch *next;
    sset *lvl; /* max_len + 1 */
    sset s0, ctx;
} scratch;

struct gram_vocab {
    uint32_t n_vocab, max_len;
    uint32_t *poff; /* token pieces: pbytes[poff[id] .. poff[id+1]) */
    uint8_t *pbytes;
    uint8_t *is_eog;
    int32_t *eog;
    uint32_t n_eog;
    uint32_t n_nodes; /* the trie, preorder, root excluded */
    uint8_t *nbyte;
    uint16_t *ndepth;
    uint32_t *nskip;    /* the node after this one's subtree */
    uint32_t *ntok_off; /* tokens ending at node i: ntok[ntok_off[i] .. ntok_off[i+1]) */
    int32_t *ntok;
    pthread_mutex_t mu; /* guards the cache table, its accounting and the scratch pool */
    centry **ht;
    size_t ht_cap, n_ent;
    size_t cache_bytes;   /* filed entries' bytes and the table's, plus evicted entries still in use */
    size_t cache_cap;     /* the bound on cache_bytes (see the top of this file) */
    uint64_t clock;       /* lookups so far: the LRU order */
    uint64_t n_evicted;
    scratch *pool;
};

/* ---- building ---- */

typedef struct {
    const uint8_t *p;
    uint32_t len;
    int32_t id;
} piece_ref;

static int piece_cmp(const void *a, const void *b) {
    const piece_ref *x = a, *y = b;
    uint32_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->p, y->p, n);
    if (c) return c;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

gram_vocab *gram_vocab_new(const tok *t, gem_err *err) {
    gram_vocab *v = calloc(1, sizeof *v);
    piece_ref *refs = NULL;
    uint32_t *open = NULL;
    if (!v) goto oom;
    pthread_mutex_init(&v->mu, NULL);
    uint32_t n = tok_n_vocab(t);
    v->n_vocab = n;
    v->cache_cap = GRAM_VOCAB_CACHE_DEFAULT;
    v->poff = malloc(((size_t)n + 1) * sizeof *v->poff);
    v->is_eog = calloc(n ? n : 1, 1);
    refs = malloc((n ? n : 1) * sizeof *refs);
    if (!v->poff || !v->is_eog || !refs) goto oom;
    size_t total = 0;
    for (uint32_t i = 0; i < n; i++) {
        size_t len = 0;
        tok_piece(t, (int32_t)i, 0, &len);
        total += len;
        if (tok_is_eog(t, (int32_t)i)) {
            v->is_eog[i] = 1;
            v->n_eog++;
        }
    }
    if (total >= UINT32_MAX) {
        gem_err_set(err, "grammar vocabulary: pieces too large");
        gram_vocab_free(v);
        free(refs);
        return NULL;
    }
    v->pbytes = malloc(total ? total : 1);
    v->eog = malloc((v->n_eog ? v->n_eog : 1) * sizeof *v->eog);
    if (!v->pbytes || !v->eog) goto oom;
    uint32_t off = 0, nr = 0, ne = 0;
    for (uint32_t i = 0; i < n; i++) {
        size_t len = 0;
        const char *p = tok_piece(t, (int32_t)i, 0, &len);
        v->poff[i] = off;
        if (len) memcpy(v->pbytes + off, p, len);
        off += (uint32_t)len;
        if (v->is_eog[i]) v->eog[ne++] = (int32_t)i;
        /* an empty piece (control tokens) is never matched by bytes; an
         * end-of-generation token is handled by the done flag instead */
        else if (len) refs[nr++] = (piece_ref){v->pbytes + v->poff[i], (uint32_t)len, (int32_t)i};
        if (len > v->max_len) v->max_len = (uint32_t)len;
    }
    v->poff[n] = off;
    if (v->max_len > 0xffff) {
        gem_err_set(err, "grammar vocabulary: a token piece of %u bytes", v->max_len);
        gram_vocab_free(v);
        free(refs);
        return NULL;
    }
    qsort(refs, nr, sizeof *refs, piece_cmp);
    /* nodes: a sorted list's new bytes beyond the common prefix with the
     * previous piece, so nodes come out in preorder and each token ends at
     * the newest node */
    size_t n_nodes = 0;
    for (uint32_t i = 0; i < nr; i++) {
        uint32_t l = 0;
        if (i)
            while (l < refs[i].len && l < refs[i - 1].len && refs[i].p[l] == refs[i - 1].p[l]) l++;
        n_nodes += refs[i].len - l;
    }
    v->n_nodes = (uint32_t)n_nodes;
    v->nbyte = malloc(n_nodes ? n_nodes : 1);
    v->ndepth = malloc((n_nodes ? n_nodes : 1) * sizeof *v->ndepth);
    v->nskip = malloc((n_nodes ? n_nodes : 1) * sizeof *v->nskip);
    v->ntok_off = calloc(n_nodes + 1, sizeof *v->ntok_off);
    v->ntok = malloc((nr ? nr : 1) * sizeof *v->ntok);
    open = malloc(((size_t)v->max_len + 1) * sizeof *open); /* the path's nodes by depth */
    if (!v->nbyte || !v->ndepth || !v->nskip || !v->ntok_off || !v->ntok || !open) goto oom;
    uint32_t nn = 0, depth = 0;
    for (uint32_t i = 0; i < nr; i++) {
        uint32_t l = 0;
        if (i)
            while (l < refs[i].len && l < refs[i - 1].len && refs[i].p[l] == refs[i - 1].p[l]) l++;
        /* close the nodes deeper than the common prefix */
        while (depth > l) v->nskip[open[depth--]] = nn;
        for (uint32_t k = l; k < refs[i].len; k++) {
            v->nbyte[nn] = refs[i].p[k];
            v->ndepth[nn] = (uint16_t)(k + 1);
            open[++depth] = nn;
            v->ntok_off[nn + 1] = v->ntok_off[nn];
            nn++;
        }
        v->ntok[v->ntok_off[nn]++] = refs[i].id;
    }
    while (depth > 0) v->nskip[open[depth--]] = nn;
    free(refs);
    free(open);
    return v;
oom:
    free(refs);
    free(open);
    gram_vocab_free(v);
    gem_err_set(err, "grammar vocabulary: out of memory");
    return NULL;
}

static void centry_free(centry *c) {
    if (!c) return;
    free(c->key);
    free(c->acc);
    free(c->acc_bits);
    free(c->sn_byte);
    free(c->sn_depth);
    free(c->sn_skip);
    free(c->sn_tok_off);
    free(c->sn_tok);
    free(c);
}

static void scratch_free(scratch *s, uint32_t max_len) {
    if (!s) return;
    if (s->lvl)
        for (uint32_t i = 0; i <= max_len + 1; i++) sset_free(&s->lvl[i]);
    free(s->lvl);
    sset_free(&s->s0);
    sset_free(&s->ctx);
    free(s);
}

void gram_vocab_free(gram_vocab *v) {
    if (!v) return;
    for (size_t i = 0; i < v->ht_cap; i++) centry_free(v->ht ? v->ht[i] : NULL);
    free(v->ht);
    while (v->pool) {
        scratch *s = v->pool;
        v->pool = s->next;
        scratch_free(s, v->max_len);
    }
    pthread_mutex_destroy(&v->mu);
    free(v->poff);
    free(v->pbytes);
    free(v->is_eog);
    free(v->eog);
    free(v->nbyte);
    free(v->ndepth);
    free(v->nskip);
    free(v->ntok_off);
    free(v->ntok);
    free(v);
}

uint32_t gram_vocab_size(const gram_vocab *v) { return v->n_vocab; }

/* ---- scratch ---- */

static scratch *scratch_get(gram_vocab *v) {
    pthread_mutex_lock(&v->mu);
    scratch *s = v->pool;
    if (s) v->pool = s->next;
    pthread_mutex_unlock(&v->mu);
    if (s) return s;
    s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->lvl = calloc((size_t)v->max_len + 2, sizeof *s->lvl);
    if (!s->lvl) {
        free(s);
        return NULL;
    }
    return s;
}

static void scratch_put(gram_vocab *v, scratch *s) {
    if (!s) return;
    pthread_mutex_lock(&v->mu);
    s->next = v->pool;
    v->pool = s;
    pthread_mutex_unlock(&v->mu);
}

static inline int live(const sset *s) { return s->n > (uint32_t)(s->has_empty ? 1 : 0); }

static inline void set_bit(uint32_t *bits, int32_t id) { bits[(uint32_t)id >> 5] |= 1u << ((uint32_t)id & 31); }

/* The tokens the real state s0 accepts, by walking the trie: the exact
 * mask, used when the caches cannot be trusted (deep stacks). */
static void walk_real(const gram *g, const gram_vocab *v, scratch *sc, const sset *s0, uint32_t *bits) {
    for (uint32_t i = 0; i < v->n_nodes;) {
        uint32_t d = v->ndepth[i];
        const sset *src = d == 1 ? s0 : &sc->lvl[d - 1];
        if (gram_step(g, src, v->nbyte[i], &sc->lvl[d])) {
            i = v->nskip[i];
            continue;
        }
        for (uint32_t k = v->ntok_off[i]; k < v->ntok_off[i + 1]; k++) set_bit(bits, v->ntok[k]);
        i = live(&sc->lvl[d]) ? i + 1 : v->nskip[i];
    }
}

/* ---- cache entries ---- */

typedef struct {
    int32_t tok;
    uint16_t from; /* the suffix starts at this byte of the piece */
} unc_pair;

typedef struct {
    unc_pair *v;
    size_t n, cap;
    int failed;
} unc_list;

static void unc_push(unc_list *l, int32_t id, uint16_t from) {
    if (l->failed) return;
    if (l->n == l->cap) {
        size_t c = l->cap ? l->cap * 2 : 256;
        unc_pair *q = realloc(l->v, c * sizeof *q);
        if (!q) {
            l->failed = 1;
            return;
        }
        l->v = q;
        l->cap = c;
    }
    l->v[l->n++] = (unc_pair){id, from};
}

/* Every token ending in nodes [i0, i1) is uncertain once for each exit
 * depth recorded on the path (ex[1..dmax]). */
static void mark_uncertain(const gram_vocab *v, const uint8_t *ex, uint32_t dmax, uint32_t i0, uint32_t i1,
                           unc_list *u) {
    int any = 0;
    for (uint32_t k = 1; k <= dmax; k++) any |= ex[k];
    if (!any) return;
    for (uint32_t j = i0; j < i1; j++)
        for (uint32_t t = v->ntok_off[j]; t < v->ntok_off[j + 1]; t++)
            for (uint32_t k = 1; k <= dmax; k++)
                if (ex[k]) unc_push(u, v->ntok[t], (uint16_t)k);
}

typedef struct {
    const gram_vocab *v;
    const unc_pair *u;
} sfx_ctx;

static int sfx_cmp_r(const void *a, const void *b, void *c) {
    const sfx_ctx *x = c;
    const unc_pair *p = a, *q = b;
    const uint8_t *pa = x->v->pbytes + x->v->poff[p->tok] + p->from, *pb = x->v->pbytes + x->v->poff[q->tok] + q->from;
    uint32_t la = x->v->poff[p->tok + 1] - x->v->poff[p->tok] - p->from;
    uint32_t lb = x->v->poff[q->tok + 1] - x->v->poff[q->tok] - q->from;
    int r = memcmp(pa, pb, la < lb ? la : lb);
    if (r) return r;
    if (la != lb) return la < lb ? -1 : 1;
    return p->tok < q->tok ? -1 : p->tok > q->tok;
}

/* The suffix trie of an entry's uncertain tokens (built like the vocab's):
 * at mask time the context state walks it once, and every token whose
 * suffix node it reaches is allowed. A token listed twice (two exits) is
 * kept under each suffix. */
static int build_suffix_trie(const gram_vocab *v, unc_list *u, centry *c) {
    if (!u->n) return 0;
    sfx_ctx cx = {v, u->v};
    qsort_r(u->v, u->n, sizeof *u->v, sfx_cmp_r, &cx);
    size_t nn = 0;
    const uint8_t *prev = NULL;
    uint32_t plen = 0;
    for (size_t i = 0; i < u->n; i++) {
        const uint8_t *p = v->pbytes + v->poff[u->v[i].tok] + u->v[i].from;
        uint32_t len = v->poff[u->v[i].tok + 1] - v->poff[u->v[i].tok] - u->v[i].from, l = 0;
        if (prev)
            while (l < len && l < plen && p[l] == prev[l]) l++;
        nn += len - l;
        prev = p;
        plen = len;
    }
    uint32_t *open = malloc(((size_t)v->max_len + 1) * sizeof *open);
    c->sn_byte = malloc(nn);
    c->sn_depth = malloc(nn * sizeof *c->sn_depth);
    c->sn_skip = malloc(nn * sizeof *c->sn_skip);
    c->sn_tok_off = calloc(nn + 1, sizeof *c->sn_tok_off);
    c->sn_tok = malloc(u->n * sizeof *c->sn_tok);
    if (!open || !c->sn_byte || !c->sn_depth || !c->sn_skip || !c->sn_tok_off || !c->sn_tok) {
        free(open);
        return -1;
    }
    uint32_t k = 0, depth = 0;
    prev = NULL;
    plen = 0;
    for (size_t i = 0; i < u->n; i++) {
        const uint8_t *p = v->pbytes + v->poff[u->v[i].tok] + u->v[i].from;
        uint32_t len = v->poff[u->v[i].tok + 1] - v->poff[u->v[i].tok] - u->v[i].from, l = 0;
        if (prev)
            while (l < len && l < plen && p[l] == prev[l]) l++;
        while (depth > l) c->sn_skip[open[depth--]] = k;
        for (uint32_t j = l; j < len; j++) {
            c->sn_byte[k] = p[j];
            c->sn_depth[k] = (uint16_t)(j + 1);
            open[++depth] = k;
            c->sn_tok_off[k + 1] = c->sn_tok_off[k];
            k++;
        }
        c->sn_tok[c->sn_tok_off[k]++] = u->v[i].tok;
        prev = p;
        plen = len;
    }
    while (depth > 0) c->sn_skip[open[depth--]] = k;
    c->n_sn = k;
    free(open);
    return 0;
}

/* Walks the whole trie from the group's tops alone (the frame), sorting
 * every token into accepted (inside the frame, or leaving it exactly at
 * its end), uncertain (leaving it with bytes to spare) or rejected. */
static centry *build_entry(const gram *g, const gram_vocab *v, scratch *sc, const uint32_t *pos, uint32_t np) {
    centry *c = calloc(1, sizeof *c);
    uint8_t *ex = calloc((size_t)v->max_len + 1, 1); /* ex[d]: the frame was left after d bytes */
    int32_t *acc = NULL;
    size_t n_acc = 0, cap_acc = 0;
    unc_list u = {0};
    if (!c || !ex) goto fail;
    sset_reset(&sc->s0);
    for (uint32_t i = 0; i < np; i++) sset_add(&sc->s0, &pos[i], 1);
    if (sc->s0.failed) goto fail;
    uint32_t growth = 1;
    for (uint32_t i = 0; i < v->n_nodes;) {
        uint32_t d = v->ndepth[i];
        const sset *src = d == 1 ? &sc->s0 : &sc->lvl[d - 1];
        sset *dst = &sc->lvl[d];
        if (gram_step(g, src, v->nbyte[i], dst)) {
            mark_uncertain(v, ex, d - 1, i, v->nskip[i], &u);
            i = v->nskip[i];
            continue;
        }
        if (dst->max_len > growth) growth = dst->max_len;
        ex[d] = (uint8_t)dst->has_empty;
        for (uint32_t k = v->ntok_off[i]; k < v->ntok_off[i + 1]; k++) {
            if (n_acc == cap_acc) {
                size_t nc = cap_acc ? cap_acc * 2 : 1024;
                int32_t *q = realloc(acc, nc * sizeof *q);
                if (!q) goto fail;
                acc = q;
                cap_acc = nc;
            }
            acc[n_acc++] = v->ntok[k];
        }
        if (!live(dst)) {
            mark_uncertain(v, ex, d, i + 1, v->nskip[i], &u);
            i = v->nskip[i];
            continue;
        }
        i++;
    }
    if (u.failed) goto fail;
    c->growth = growth;
    c->n_acc = (uint32_t)n_acc;
    size_t acc_bytes = cap_acc * sizeof *acc;
    if (n_acc > v->n_vocab / 32) {
        c->acc_bits = calloc((v->n_vocab + 31) / 32, sizeof *c->acc_bits);
        if (!c->acc_bits) goto fail;
        for (size_t k = 0; k < n_acc; k++) set_bit(c->acc_bits, acc[k]);
        free(acc);
        acc_bytes = (v->n_vocab + 31) / 32 * sizeof *c->acc_bits;
    } else
        c->acc = acc;
    acc = NULL;
    if (build_suffix_trie(v, &u, c)) goto fail;
    c->bytes = sizeof *c + acc_bytes +
               (size_t)c->n_sn * (sizeof *c->sn_byte + sizeof *c->sn_depth + sizeof *c->sn_skip + sizeof *c->sn_tok_off) +
               sizeof *c->sn_tok_off + u.n * sizeof *c->sn_tok;
    free(u.v);
    free(ex);
    return c;
fail:
    free(acc);
    free(u.v);
    free(ex);
    centry_free(c);
    return NULL;
}

/* ---- lookups ---- */

static uint64_t mix(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

static uint64_t bytes_hash(const void *p, size_t n) {
    const uint8_t *b = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return mix(h);
}

/* The canonical key of a group, from the gram's memo (computed on a
 * miss). Returns the memo entry's index, or -1 out of memory. The caller
 * holds g->mu. */
static long memo_find(gram *g, const uint32_t *pos, uint32_t np, uint32_t t) {
    uint64_t h = mix(bytes_hash(pos, np * sizeof *pos) ^ t);
    if (g->memo_ht_cap) {
        for (size_t k = h & (g->memo_ht_cap - 1); g->memo_ht[k]; k = (k + 1) & (g->memo_ht_cap - 1)) {
            gram_memo_ent *m = &g->memo[g->memo_ht[k] - 1];
            if (m->h == h && m->n_pos == np && m->t == t && !memcmp(m->pos, pos, np * sizeof *pos))
                return (long)(g->memo_ht[k] - 1);
        }
    }
    strbuf key = {0};
    if (gram_canon_key(g, pos, np, t, &key)) {
        sb_free(&key);
        return -1;
    }
    if (g->memo_n == g->memo_cap) {
        size_t c = g->memo_cap ? g->memo_cap * 2 : 16;
        gram_memo_ent *q = realloc(g->memo, c * sizeof *q);
        if (!q) goto oom;
        g->memo = q;
        g->memo_cap = c;
    }
    if ((g->memo_n + 1) * 2 > g->memo_ht_cap) {
        size_t c = g->memo_ht_cap ? g->memo_ht_cap * 2 : 32;
        uint32_t *ht = calloc(c, sizeof *ht);
        if (!ht) goto oom;
        for (size_t i = 0; i < g->memo_n; i++) {
            size_t k = g->memo[i].h & (c - 1);
            while (ht[k]) k = (k + 1) & (c - 1);
            ht[k] = (uint32_t)i + 1;
        }
        free(g->memo_ht);
        g->memo_ht = ht;
        g->memo_ht_cap = c;
    }
    gram_memo_ent *m = &g->memo[g->memo_n];
    m->pos = malloc(np * sizeof *pos);
    if (!m->pos) goto oom;
    memcpy(m->pos, pos, np * sizeof *pos);
    m->n_pos = np;
    m->t = t;
    m->h = h;
    m->canon = key.p;
    m->canon_len = key.len;
    m->canon_h = bytes_hash(key.p, key.len);
    size_t k = h & (g->memo_ht_cap - 1);
    while (g->memo_ht[k]) k = (k + 1) & (g->memo_ht_cap - 1);
    g->memo_ht[k] = (uint32_t)g->memo_n + 1;
    return (long)g->memo_n++;
oom:
    sb_free(&key);
    return -1;
}

/* Files c in the table (v->mu held; the table has room). */
static void table_put(centry **ht, size_t cap, centry *c) {
    size_t k = c->h & (cap - 1);
    while (ht[k]) k = (k + 1) & (cap - 1);
    ht[k] = c;
}

/* A table of cap slots holding the filed entries (v->mu held): replaces
 * v's and updates the accounting. -1 when out of memory (v unchanged). */
static int table_rebuild(gram_vocab *v, size_t cap) {
    centry **ht = calloc(cap, sizeof *ht);
    if (!ht) return -1;
    for (size_t i = 0; i < v->ht_cap; i++)
        if (v->ht[i]) table_put(ht, cap, v->ht[i]);
    v->cache_bytes = v->cache_bytes - v->ht_cap * sizeof *v->ht + cap * sizeof *ht;
    free(v->ht);
    v->ht = ht;
    v->ht_cap = cap;
    return 0;
}

/* Takes c out of the table's accounting (v->mu held): freed now, or by
 * its last user when a mask computation still holds it. */
static void entry_drop(gram_vocab *v, centry *c) {
    c->filed = 0;
    v->n_ent--;
    v->n_evicted++;
    if (!c->refs) {
        v->cache_bytes -= c->bytes;
        centry_free(c);
    }
}

/* The bytes the table grows by to file one more entry (kept at most half
 * full; it starts at 64 slots). */
static size_t table_growth(const gram_vocab *v) {
    if ((v->n_ent + 1) * 2 <= v->ht_cap) return 0;
    return (v->ht_cap ? v->ht_cap : 64) * sizeof *v->ht;
}

static int by_last_use(const void *a, const void *b) {
    const centry *x = *(centry *const *)a, *y = *(centry *const *)b;
    return x->last_use < y->last_use ? -1 : x->last_use > y->last_use;
}

/* Evicts the least recently used entries until `need` more bytes fit in
 * three quarters of the cap (v->mu held). The table is rebuilt without
 * them (open addressing has no cheap delete). -1 when out of memory. */
static int evict_for(gram_vocab *v, size_t need) {
    const size_t goal = v->cache_cap / 4 * 3;
    centry **all = malloc((v->n_ent ? v->n_ent : 1) * sizeof *all);
    if (!all) return -1;
    size_t n = 0;
    for (size_t i = 0; i < v->ht_cap; i++)
        if (v->ht[i]) all[n++] = v->ht[i];
    qsort(all, n, sizeof *all, by_last_use);
    memset(v->ht, 0, v->ht_cap * sizeof *v->ht);
    size_t i = 0;
    for (; i < n && v->cache_bytes + need > goal; i++) entry_drop(v, all[i]);
    for (; i < n; i++) table_put(v->ht, v->ht_cap, all[i]);
    free(all);
    return 0;
}

/* The cache entry of a group, built on a miss, pinned for the caller
 * (entry_release unpins it). NULL when out of memory. */
static centry *entry_for(const gram *cg, gram_vocab *v, scratch *sc, const uint32_t *pos, uint32_t np) {
    gram *g = (gram *)cg; /* only the memo changes, under its lock */
    pthread_mutex_lock(&g->mu);
    long mi = memo_find(g, pos, np, v->max_len);
    const char *key = mi >= 0 ? g->memo[mi].canon : NULL;
    size_t key_len = mi >= 0 ? g->memo[mi].canon_len : 0;
    uint64_t h = mi >= 0 ? g->memo[mi].canon_h : 0;
    pthread_mutex_unlock(&g->mu);
    if (mi < 0) return NULL;
    pthread_mutex_lock(&v->mu);
    centry *found = NULL;
    if (v->ht_cap)
        for (size_t k = h & (v->ht_cap - 1); v->ht[k]; k = (k + 1) & (v->ht_cap - 1))
            if (v->ht[k]->h == h && v->ht[k]->key_len == key_len && !memcmp(v->ht[k]->key, key, key_len)) {
                found = v->ht[k];
                break;
            }
    if (!found) {
        /* built under the lock: two threads never build the same entry */
        centry *c = build_entry(g, v, sc, pos, np);
        if (!c) goto out;
        c->key = malloc(key_len ? key_len : 1);
        if (!c->key) {
            centry_free(c);
            goto out;
        }
        memcpy(c->key, key, key_len);
        c->key_len = key_len;
        c->h = h;
        c->bytes += key_len;
        v->cache_bytes += c->bytes; /* counted while it lives, filed or not */
        found = c;
        /* filed when it fits the cap with the table's growth (an entry
         * over the eviction goal alone is used once and freed) */
        if (c->bytes + table_growth(v) <= v->cache_cap / 4 * 3) {
            if (v->cache_bytes + table_growth(v) > v->cache_cap) evict_for(v, table_growth(v));
            const size_t grow = table_growth(v);
            if (v->cache_bytes + grow <= v->cache_cap &&
                (!grow || table_rebuild(v, v->ht_cap ? v->ht_cap * 2 : 64) == 0)) {
                table_put(v->ht, v->ht_cap, c);
                c->filed = 1;
                v->n_ent++;
            }
        }
    }
    found->refs++;
    found->last_use = ++v->clock;
out:
    pthread_mutex_unlock(&v->mu);
    return found;
}

/* Unpins an entry from entry_for; one no longer filed is freed by its
 * last user. */
static void entry_release(gram_vocab *v, centry *c) {
    pthread_mutex_lock(&v->mu);
    if (!--c->refs && !c->filed) {
        v->cache_bytes -= c->bytes;
        centry_free(c);
    }
    pthread_mutex_unlock(&v->mu);
}

void gram_vocab_set_cache_cap(gram_vocab *v, size_t bytes) {
    pthread_mutex_lock(&v->mu);
    v->cache_cap = bytes;
    /* the cache starts over: every entry evicted, the table freed */
    for (size_t i = 0; i < v->ht_cap; i++)
        if (v->ht[i]) entry_drop(v, v->ht[i]);
    v->cache_bytes -= v->ht_cap * sizeof *v->ht;
    free(v->ht);
    v->ht = NULL;
    v->ht_cap = 0;
    pthread_mutex_unlock(&v->mu);
}

gram_vocab_cache gram_vocab_cache_info(const gram_vocab *cv) {
    gram_vocab *v = (gram_vocab *)cv; /* the lock only */
    pthread_mutex_lock(&v->mu);
    gram_vocab_cache c = {v->cache_bytes, v->cache_cap, v->n_ent, v->n_evicted};
    pthread_mutex_unlock(&v->mu);
    return c;
}

/* ---- masks ---- */

typedef struct {
    const uint32_t *st;
    uint32_t n;
} stack_ref;

/* by what lies below the top, then by the top */
static int stack_cmp(const void *a, const void *b) {
    const stack_ref *x = a, *y = b;
    if (x->n != y->n) return x->n < y->n ? -1 : 1;
    for (uint32_t i = 0; i + 1 < x->n; i++)
        if (x->st[i] != y->st[i]) return x->st[i] < y->st[i] ? -1 : 1;
    uint32_t tx = x->st[x->n - 1], ty = y->st[y->n - 1];
    return tx < ty ? -1 : tx > ty;
}

/* Walks an entry's suffix trie on the context state: every suffix the
 * context accepts allows its tokens. */
static void walk_suffixes(const gram *g, const centry *c, scratch *sc, const sset *ctx, uint32_t *bits) {
    for (uint32_t i = 0; i < c->n_sn;) {
        uint32_t d = c->sn_depth[i];
        const sset *src = d == 1 ? ctx : &sc->lvl[d - 1];
        if (gram_step(g, src, c->sn_byte[i], &sc->lvl[d])) {
            i = c->sn_skip[i];
            continue;
        }
        for (uint32_t k = c->sn_tok_off[i]; k < c->sn_tok_off[i + 1]; k++) set_bit(bits, c->sn_tok[k]);
        i = live(&sc->lvl[d]) ? i + 1 : c->sn_skip[i];
    }
}

int gram_mask(const gram_state *s, const gram_vocab *cv, uint32_t *bits) {
    gram_vocab *v = (gram_vocab *)cv; /* only the caches change, under its lock */
    const gram *g = s->g;
    const sset *cur = &s->cur;
    size_t words = (v->n_vocab + 31) / 32;
    memset(bits, 0, words * sizeof *bits);
    scratch *sc = scratch_get(v);
    stack_ref *refs = malloc((cur->n ? cur->n : 1) * sizeof *refs);
    uint32_t *tops = malloc((cur->n ? cur->n : 1) * sizeof *tops);
    int rc = -1, slow = 0;
    if (!sc || !refs || !tops) goto out;
    uint32_t nr = 0;
    for (uint32_t i = 0; i < cur->n; i++)
        if (sset_len(cur, i)) refs[nr++] = (stack_ref){sset_stack(cur, i), sset_len(cur, i)};
    qsort(refs, nr, sizeof *refs, stack_cmp);
    for (uint32_t i = 0; i < nr && !slow;) {
        uint32_t j = i, nb = refs[i].n - 1;
        while (j < nr && refs[j].n == refs[i].n && !memcmp(refs[j].st, refs[i].st, nb * sizeof *refs[i].st)) {
            tops[j - i] = refs[j].st[nb];
            j++;
        }
        centry *c = entry_for(g, v, sc, tops, j - i);
        if (!c) goto out;
        if (nb + c->growth + DEPTH_MARGIN > GRAM_MAX_DEPTH) {
            entry_release(v, c);
            slow = 1;
            break;
        }
        if (c->acc_bits)
            for (size_t w = 0; w < words; w++) bits[w] |= c->acc_bits[w];
        else
            for (uint32_t k = 0; k < c->n_acc; k++) set_bit(bits, c->acc[k]);
        if (c->n_sn && nb) {
            /* the context: the frame below, resumed at its return position */
            uint32_t st[GRAM_MAX_DEPTH + 1];
            memcpy(st, refs[i].st, nb * sizeof *st);
            sset_reset(&sc->ctx);
            gram_expand(g, st, nb, &sc->ctx);
            if (sc->ctx.failed) {
                entry_release(v, c);
                slow = 1;
                break;
            }
            walk_suffixes(g, c, sc, &sc->ctx, bits);
        }
        entry_release(v, c);
        i = j;
    }
    if (slow) {
        memset(bits, 0, words * sizeof *bits);
        walk_real(g, v, sc, cur, bits);
    }
    if (cur->has_empty)
        for (uint32_t k = 0; k < v->n_eog; k++) set_bit(bits, v->eog[k]);
    rc = 0;
    for (size_t w = 0; w < words; w++) rc += __builtin_popcount(bits[w]);
out:
    free(refs);
    free(tops);
    scratch_put(v, sc);
    return rc;
}

int gram_token_ok(const gram_state *s, const gram_vocab *cv, int32_t id) {
    gram_vocab *v = (gram_vocab *)cv;
    if (id < 0 || (uint32_t)id >= v->n_vocab) return 0;
    if (v->is_eog[id]) return s->cur.has_empty;
    uint32_t len = v->poff[id + 1] - v->poff[id];
    if (!len) return 0;
    scratch *sc = scratch_get(v);
    if (!sc) return 0;
    const uint8_t *p = v->pbytes + v->poff[id];
    const sset *src = &s->cur;
    int ok = 1;
    for (uint32_t i = 0; i < len && ok; i++) {
        sset *dst = &sc->lvl[i & 1];
        ok = gram_step(s->g, src, p[i], dst) == 0;
        src = dst;
    }
    scratch_put(v, sc);
    return ok;
}

int gram_accept_token(gram_state *s, const gram_vocab *v, int32_t id) {
    if (id < 0 || (uint32_t)id >= v->n_vocab) return -1;
    if (v->is_eog[id]) return s->cur.has_empty ? 0 : -1;
    uint32_t len = v->poff[id + 1] - v->poff[id];
    if (!len) return -1;
    return gram_state_feed(s, (const char *)v->pbytes + v->poff[id], len);
}
