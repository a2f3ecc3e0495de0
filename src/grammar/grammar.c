/* The grammar engine: the builder, the compiled form (see gram_impl.h),
 * the matcher (sets of parse stacks) and the canonical keys the mask
 * caches are filed under.
 *
 * Invariants: a compiled gram never changes after gb_finish except its
 * memo (under its lock); every stack stored in an sset is expanded (its top
 * is a byte set) or empty; an sset holds each stack once. */
#include <stdlib.h>
#include <string.h>

#include "chat/chat.h"
#include "grammar/gram_impl.h"

/* ---- builder ---- */

typedef struct {
    gseq *alts;
    size_t n, cap;
} gb_rule_t;

struct gb {
    gb_rule_t *rules;
    size_t n_rules, cap_rules;
    uint8_t (*sets)[32];
    size_t n_sets, cap_sets;
    uint32_t *set_ht; /* set index + 1 */
    size_t set_ht_cap;
    int failed;
};

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 8;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

gb *gb_new(void) { return calloc(1, sizeof(gb)); }

void gs_reset(gseq *s) {
    s->n = 0;
    s->failed = 0;
}

void gs_free(gseq *s) {
    free(s->v);
    memset(s, 0, sizeof *s);
}

void gb_free(gb *b) {
    if (!b) return;
    for (size_t r = 0; r < b->n_rules; r++) {
        for (size_t a = 0; a < b->rules[r].n; a++) gs_free(&b->rules[r].alts[a]);
        free(b->rules[r].alts);
    }
    free(b->rules);
    free(b->sets);
    free(b->set_ht);
    free(b);
}

int gb_failed(const gb *b) { return b->failed; }

uint32_t gb_rule(gb *b) {
    if (b->n_rules >= 0x3fffffff || grow((void **)&b->rules, &b->cap_rules, b->n_rules + 1, sizeof *b->rules)) {
        b->failed = 1;
        return 0;
    }
    memset(&b->rules[b->n_rules], 0, sizeof *b->rules);
    return (uint32_t)b->n_rules++;
}

void gb_alt(gb *b, uint32_t r, const gseq *s) {
    if (b->failed || s->failed) {
        b->failed = 1;
        return;
    }
    gb_rule_t *R = &b->rules[r];
    if (grow((void **)&R->alts, &R->cap, R->n + 1, sizeof *R->alts)) {
        b->failed = 1;
        return;
    }
    gseq *c = &R->alts[R->n];
    memset(c, 0, sizeof *c);
    if (s->n) {
        c->v = malloc(s->n * sizeof *c->v);
        if (!c->v) {
            b->failed = 1;
            return;
        }
        memcpy(c->v, s->v, s->n * sizeof *c->v);
        c->n = c->cap = s->n;
    }
    R->n++;
}

uint32_t gb_rule_seq(gb *b, const gseq *s) {
    uint32_t r = gb_rule(b);
    if (!b->failed) gb_alt(b, r, s);
    return r;
}

uint32_t gb_rule_lit(gb *b, const char *p, size_t n) {
    gseq s = {0};
    gs_lit(b, &s, p, n);
    uint32_t r = gb_rule_seq(b, &s);
    gs_free(&s);
    return r;
}

static void gs_push(gseq *s, uint32_t e) {
    if (s->failed) return;
    if (grow((void **)&s->v, &s->cap, s->n + 1, sizeof *s->v)) {
        s->failed = 1;
        return;
    }
    s->v[s->n++] = e;
}

static uint64_t set_hash(const uint8_t *set) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < 32; i++) h = (h ^ set[i]) * 0x100000001b3ull;
    return h ^ (h >> 29);
}

/* The index of a byte set, interned: grammars repeat a few sets often. */
static uint32_t intern_set(gb *b, const uint8_t *set) {
    if (b->n_sets * 2 + 2 > b->set_ht_cap) {
        size_t nc = b->set_ht_cap ? b->set_ht_cap * 2 : 64;
        uint32_t *ht = calloc(nc, sizeof *ht);
        if (!ht) {
            b->failed = 1;
            return 0;
        }
        for (size_t i = 0; i < b->n_sets; i++) {
            size_t k = set_hash(b->sets[i]) & (nc - 1);
            while (ht[k]) k = (k + 1) & (nc - 1);
            ht[k] = (uint32_t)i + 1;
        }
        free(b->set_ht);
        b->set_ht = ht;
        b->set_ht_cap = nc;
    }
    size_t k = set_hash(set) & (b->set_ht_cap - 1);
    for (; b->set_ht[k]; k = (k + 1) & (b->set_ht_cap - 1))
        if (!memcmp(b->sets[b->set_ht[k] - 1], set, 32)) return b->set_ht[k] - 1;
    if (grow((void **)&b->sets, &b->cap_sets, b->n_sets + 1, sizeof *b->sets)) {
        b->failed = 1;
        return 0;
    }
    memcpy(b->sets[b->n_sets], set, 32);
    b->set_ht[k] = (uint32_t)b->n_sets + 1;
    return (uint32_t)b->n_sets++;
}

void gs_set(gb *b, gseq *s, const uint8_t set[32]) { gs_push(s, GE(GE_SET, intern_set(b, set))); }

void gs_range(gb *b, gseq *s, uint8_t lo, uint8_t hi) {
    uint8_t set[32] = {0};
    bset_add(set, lo, hi);
    gs_set(b, s, set);
}

void gs_byte(gb *b, gseq *s, uint8_t c) { gs_range(b, s, c, c); }

void gs_lit(gb *b, gseq *s, const char *p, size_t n) {
    for (size_t i = 0; i < n; i++) gs_byte(b, s, (uint8_t)p[i]);
}

void gs_str(gb *b, gseq *s, const char *p) { gs_lit(b, s, p, strlen(p)); }

void gs_ref(gseq *s, uint32_t rule) { gs_push(s, GE(GE_REF, rule)); }

/* The alternatives of one non-ASCII UTF-8 character (no overlong forms, no
 * surrogates, nothing above U+10FFFF), each followed by a reference to
 * cont, added to rule r. */
static void add_utf8_tail(gb *b, uint32_t r, uint32_t cont) {
    static const uint8_t seqs[7][4][2] = {
        {{0xC2, 0xDF}, {0x80, 0xBF}},
        {{0xE0, 0xE0}, {0xA0, 0xBF}, {0x80, 0xBF}},
        {{0xE1, 0xEC}, {0x80, 0xBF}, {0x80, 0xBF}},
        {{0xED, 0xED}, {0x80, 0x9F}, {0x80, 0xBF}},
        {{0xEE, 0xEF}, {0x80, 0xBF}, {0x80, 0xBF}},
        {{0xF0, 0xF0}, {0x90, 0xBF}, {0x80, 0xBF}, {0x80, 0xBF}},
        {{0xF1, 0xF3}, {0x80, 0xBF}, {0x80, 0xBF}, {0x80, 0xBF}},
    };
    static const int lens[7] = {2, 3, 3, 3, 3, 4, 4};
    gseq s = {0};
    for (int i = 0; i < 8; i++) {
        gs_reset(&s);
        if (i < 7)
            for (int k = 0; k < lens[i]; k++) gs_range(b, &s, seqs[i][k][0], seqs[i][k][1]);
        else { /* F4 80-8F 80-BF 80-BF */
            gs_byte(b, &s, 0xF4);
            gs_range(b, &s, 0x80, 0x8F);
            gs_range(b, &s, 0x80, 0xBF);
            gs_range(b, &s, 0x80, 0xBF);
        }
        if (cont != GRAM_NONE) gs_ref(&s, cont);
        gb_alt(b, r, &s);
    }
    gs_free(&s);
}

void gb_utf8_alts(gb *b, uint32_t r, uint32_t cont) { add_utf8_tail(b, r, cont); }

uint32_t gb_until(gb *b, const char *marker) {
    /* A KMP automaton over the marker, one rule per matched-prefix length:
     * any ASCII byte moves to the state its failure function gives,
     * completing the marker ends the rule, and a non-ASCII character
     * (which the ASCII marker cannot contain) restarts at state 0. */
    size_t m = strlen(marker);
    uint32_t k0 = gb_rule(b);
    for (size_t k = 1; k < m; k++) gb_rule(b);
    if (b->failed || m == 0 || m > 64) {
        b->failed = 1;
        return 0;
    }
    size_t pi[64] = {0}; /* longest proper border of marker[0..k] */
    for (size_t k = 1, j = 0; k < m; k++) {
        while (j && marker[k] != marker[j]) j = pi[j - 1];
        if (marker[k] == marker[j]) j++;
        pi[k] = j;
    }
    gseq s = {0};
    for (size_t k = 0; k < m; k++) {
        uint8_t sets[65][32];
        memset(sets, 0, sizeof sets);
        for (unsigned c = 0; c < 128; c++) {
            size_t j = k;
            while (j && (uint8_t)marker[j] != c) j = pi[j - 1];
            size_t to = (uint8_t)marker[j] == c ? j + 1 : 0;
            bset_add(sets[to], (uint8_t)c, (uint8_t)c);
        }
        for (size_t to = 0; to <= m; to++) {
            static const uint8_t zero[32];
            if (!memcmp(sets[to], zero, 32)) continue;
            gs_reset(&s);
            gs_set(b, &s, sets[to]);
            if (to < m) gs_ref(&s, k0 + (uint32_t)to);
            gb_alt(b, k0 + (uint32_t)k, &s);
        }
        add_utf8_tail(b, k0 + (uint32_t)k, k0);
    }
    gs_free(&s);
    return k0;
}

gb *gb_from_gram(const gram *g) {
    gb *b = gb_new();
    if (!b) return NULL;
    for (uint32_t r = 0; r < g->n_rules; r++) gb_rule(b);
    gseq s = {0};
    for (uint32_t r = 0; r < g->n_rules; r++)
        for (uint32_t a = g->rule_alt[r]; a < g->rule_alt[r + 1]; a++) {
            gs_reset(&s);
            for (uint32_t p = g->alt[a]; GE_KIND(g->el[p]) != GE_END; p++) {
                uint32_t e = g->el[p];
                if (GE_KIND(e) == GE_SET) gs_set(b, &s, g->sets[GE_ARG(e)]);
                else gs_ref(&s, GE_ARG(e));
            }
            gb_alt(b, r, &s);
        }
    gs_free(&s);
    if (b->failed) {
        gb_free(b);
        return NULL;
    }
    return b;
}

/* ---- finishing: flatten, check ---- */

typedef struct {
    uint32_t val, rule;
} heap_ent;

static void heap_push(heap_ent *h, size_t *n, heap_ent x) {
    size_t i = (*n)++;
    while (i && h[(i - 1) / 2].val > x.val) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = x;
}

static heap_ent heap_pop(heap_ent *h, size_t *n) {
    heap_ent top = h[0], x = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && h[c + 1].val < h[c].val) c++;
        if (h[c].val >= x.val) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = x;
    return top;
}

/* The fewest bytes each rule derives (Knuth's generalization of Dijkstra
 * to grammars: a rule's value is final when it leaves the heap). A rule
 * left unreached derives no finite string. */
static int compute_minlen(gram *g) {
    uint32_t nr = g->n_rules, na = g->rule_alt[nr];
    uint32_t *pending = calloc(na ? na : 1, sizeof *pending), *base = calloc(na ? na : 1, sizeof *base);
    uint32_t *alt_rule = malloc((na ? na : 1) * sizeof *alt_rule);
    uint32_t *occ_off = calloc(nr + 1, sizeof *occ_off), *occ = NULL;
    uint8_t *fin = calloc(nr ? nr : 1, 1);
    heap_ent *h = NULL;
    size_t hn = 0, n_refs = 0;
    int rc = -1;
    if (!pending || !base || !alt_rule || !occ_off || !fin) goto out;
    for (uint32_t r = 0; r < nr; r++)
        for (uint32_t a = g->rule_alt[r]; a < g->rule_alt[r + 1]; a++) {
            alt_rule[a] = r;
            for (uint32_t p = g->alt[a]; GE_KIND(g->el[p]) != GE_END; p++) {
                if (GE_KIND(g->el[p]) == GE_SET) base[a]++;
                else {
                    pending[a]++;
                    occ_off[GE_ARG(g->el[p]) + 1]++;
                    n_refs++;
                }
            }
        }
    for (uint32_t r = 0; r < nr; r++) occ_off[r + 1] += occ_off[r];
    occ = malloc((n_refs ? n_refs : 1) * sizeof *occ);
    h = malloc((na + n_refs + 1) * sizeof *h);
    uint32_t *fill = calloc(nr ? nr : 1, sizeof *fill);
    if (!occ || !h || !fill) {
        free(fill);
        goto out;
    }
    for (uint32_t a = 0; a < na; a++)
        for (uint32_t p = g->alt[a]; GE_KIND(g->el[p]) != GE_END; p++)
            if (GE_KIND(g->el[p]) == GE_REF) {
                uint32_t r = GE_ARG(g->el[p]);
                occ[occ_off[r] + fill[r]++] = a;
            }
    free(fill);
    for (uint32_t a = 0; a < na; a++)
        if (!pending[a]) heap_push(h, &hn, (heap_ent){base[a], alt_rule[a]});
    for (uint32_t r = 0; r < nr; r++) g->minlen[r] = UINT32_MAX;
    while (hn) {
        heap_ent x = heap_pop(h, &hn);
        if (fin[x.rule]) continue;
        fin[x.rule] = 1;
        g->minlen[x.rule] = x.val;
        for (uint32_t i = occ_off[x.rule]; i < occ_off[x.rule + 1]; i++) {
            uint32_t a = occ[i];
            uint64_t v = (uint64_t)base[a] + x.val;
            base[a] = v > UINT32_MAX / 2 ? UINT32_MAX / 2 : (uint32_t)v;
            if (--pending[a] == 0) heap_push(h, &hn, (heap_ent){base[a], alt_rule[a]});
        }
    }
    rc = 0;
out:
    free(pending);
    free(base);
    free(alt_rule);
    free(occ_off);
    free(occ);
    free(fin);
    free(h);
    return rc;
}

/* 1 when some rule can reach itself without consuming a byte first (left
 * recursion): expansion would not terminate. */
static int left_recursive(const gram *g) {
    uint32_t nr = g->n_rules;
    uint8_t *color = calloc(nr ? nr : 1, 1);
    uint32_t *stk = malloc((nr + 1) * sizeof *stk), *it = malloc((nr + 1) * 2 * sizeof *it);
    int found = -1;
    if (!color || !stk || !it) goto out;
    found = 0;
    for (uint32_t r0 = 0; r0 < nr && !found; r0++) {
        if (color[r0]) continue;
        size_t sp = 0;
        stk[sp] = r0;
        it[2 * sp] = g->rule_alt[r0];
        it[2 * sp + 1] = 0; /* element offset within the alternative */
        color[r0] = 1;
        sp++;
        while (sp && !found) {
            uint32_t r = stk[sp - 1], a = it[2 * (sp - 1)], k = it[2 * (sp - 1) + 1];
            if (a >= g->rule_alt[r + 1]) {
                color[r] = 2;
                sp--;
                continue;
            }
            uint32_t e = g->el[g->alt[a] + k];
            /* advance this frame's cursor past e first */
            if (GE_KIND(e) == GE_REF && g->minlen[GE_ARG(e)] == 0) it[2 * (sp - 1) + 1] = k + 1;
            else {
                it[2 * (sp - 1)] = a + 1;
                it[2 * (sp - 1) + 1] = 0;
            }
            if (GE_KIND(e) != GE_REF) continue;
            uint32_t s = GE_ARG(e);
            if (color[s] == 1) found = 1;
            else if (!color[s]) {
                color[s] = 1;
                stk[sp] = s;
                it[2 * sp] = g->rule_alt[s];
                it[2 * sp + 1] = 0;
                sp++;
            }
        }
    }
out:
    free(color);
    free(stk);
    free(it);
    return found;
}

gram *gb_finish(gb *b, uint32_t root, gem_err *err) {
    if (b->failed) {
        gem_err_set(err, "grammar: out of memory");
        return NULL;
    }
    if (root >= b->n_rules) {
        gem_err_set(err, "grammar: no root rule");
        return NULL;
    }
    size_t n_el = 2, n_alt = 0;
    for (size_t r = 0; r < b->n_rules; r++) {
        if (!b->rules[r].n) {
            gem_err_set(err, "grammar: rule %zu has no alternatives", r);
            return NULL;
        }
        n_alt += b->rules[r].n;
        for (size_t a = 0; a < b->rules[r].n; a++) n_el += b->rules[r].alts[a].n + 1;
    }
    if (n_el >= 0x3fffffff || n_alt >= 0x3fffffff) {
        gem_err_set(err, "grammar: too large (%zu elements)", n_el);
        return NULL;
    }
    gram *g = calloc(1, sizeof *g);
    if (!g) goto oom;
    pthread_mutex_init(&g->mu, NULL);
    g->n_rules = (uint32_t)b->n_rules;
    g->n_el = (uint32_t)n_el;
    g->el = malloc(n_el * sizeof *g->el);
    g->alt = malloc((n_alt ? n_alt : 1) * sizeof *g->alt);
    g->rule_alt = malloc((b->n_rules + 1) * sizeof *g->rule_alt);
    g->minlen = malloc((b->n_rules ? b->n_rules : 1) * sizeof *g->minlen);
    g->n_sets = (uint32_t)b->n_sets;
    g->sets = malloc((b->n_sets ? b->n_sets : 1) * 32);
    if (!g->el || !g->alt || !g->rule_alt || !g->minlen || !g->sets) goto oom;
    if (b->n_sets) memcpy(g->sets, b->sets, b->n_sets * 32);
    uint32_t p = 0, na = 0;
    for (size_t r = 0; r < b->n_rules; r++) {
        g->rule_alt[r] = na;
        for (size_t a = 0; a < b->rules[r].n; a++) {
            const gseq *s = &b->rules[r].alts[a];
            g->alt[na++] = p;
            if (s->n) memcpy(g->el + p, s->v, s->n * sizeof *s->v);
            p += (uint32_t)s->n;
            g->el[p++] = GE(GE_END, 0);
        }
    }
    g->rule_alt[b->n_rules] = na;
    /* the start: a tail reference to the root, so the root's frame is the
     * bottom one and popping it leaves the empty (complete) stack */
    g->el[p] = GE(GE_REF, root);
    g->el[p + 1] = GE(GE_END, 0);
    g->root = root;
    if (compute_minlen(g)) goto oom;
    for (uint32_t r = 0; r < g->n_rules; r++)
        if (g->minlen[r] == UINT32_MAX) {
            gem_err_set(err, "grammar: rule %u derives no finite text", r);
            gram_free(g);
            return NULL;
        }
    int lr = left_recursive(g);
    if (lr) {
        if (lr < 0) goto oom;
        gem_err_set(err, "grammar: left recursion");
        gram_free(g);
        return NULL;
    }
    return g;
oom:
    gram_free(g);
    gem_err_set(err, "grammar: out of memory");
    return NULL;
}

void gram_free(gram *g) {
    if (!g) return;
    for (size_t i = 0; i < g->memo_n; i++) {
        free(g->memo[i].pos);
        free(g->memo[i].canon);
    }
    free(g->memo);
    free(g->memo_ht);
    free(g->ck_dist);
    free(g->ck_dist_stamp);
    free(g->ck_cid);
    free(g->ck_cid_stamp);
    pthread_mutex_destroy(&g->mu);
    free(g->el);
    free(g->alt);
    free(g->rule_alt);
    free(g->minlen);
    free(g->sets);
    free(g);
}

gram *gram_with_reasoning(const gram *g, gem_err *err) {
    gb *b = gb_from_gram(g);
    if (!b) {
        gem_err_set(err, "grammar: out of memory");
        return NULL;
    }
    gseq s = {0};
    gs_str(b, &s, CHAT_REASONING_OPEN);
    gs_ref(&s, gb_until(b, CHAT_REASONING_CLOSE));
    gs_ref(&s, g->root);
    uint32_t root = gb_rule_seq(b, &s);
    gs_reset(&s);
    gs_ref(&s, g->root);
    gb_alt(b, root, &s);
    gs_free(&s);
    gram *out = gb_finish(b, root, err);
    gb_free(b);
    return out;
}

/* ---- stack sets ---- */

static uint64_t stack_hash(const uint32_t *st, uint32_t n) {
    uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
    for (uint32_t i = 0; i < n; i++) h = (h ^ st[i]) * 0x100000001b3ull;
    return h ^ (h >> 31);
}

void sset_free(sset *s) {
    free(s->off);
    free(s->e);
    free(s->ht);
    memset(s, 0, sizeof *s);
}

void sset_reset(sset *s) {
    if (s->ht) {
        /* clear only the slots in use: cheaper than the whole table when a
         * set once grew large */
        if (s->n * 4 < s->ht_cap) {
            for (uint32_t i = 0; i < s->n; i++) {
                uint32_t k = (uint32_t)stack_hash(sset_stack(s, i), sset_len(s, i)) & (s->ht_cap - 1);
                while (s->ht[k] != i + 1) k = (k + 1) & (s->ht_cap - 1);
                s->ht[k] = 0;
            }
            /* the probe chains of cleared slots are gone with them: the
             * table is empty again */
        } else
            memset(s->ht, 0, s->ht_cap * sizeof *s->ht);
    }
    s->n = s->used = s->max_len = 0;
    s->has_empty = s->failed = 0;
    if (s->off) s->off[0] = 0;
}

static int sset_rehash(sset *s, uint32_t cap) {
    uint32_t *ht = calloc(cap, sizeof *ht);
    if (!ht) return -1;
    for (uint32_t i = 0; i < s->n; i++) {
        uint32_t k = (uint32_t)stack_hash(sset_stack(s, i), sset_len(s, i)) & (cap - 1);
        while (ht[k]) k = (k + 1) & (cap - 1);
        ht[k] = i + 1;
    }
    free(s->ht);
    s->ht = ht;
    s->ht_cap = cap;
    return 0;
}

void sset_add(sset *s, const uint32_t *st, uint32_t n) {
    if (s->failed) return;
    if (!s->off) {
        size_t c = 0;
        if (grow((void **)&s->off, &c, 9, sizeof *s->off)) goto fail;
        s->cap_n = (uint32_t)c - 1;
        s->off[0] = 0;
    }
    if ((s->n + 1) * 2 > s->ht_cap && sset_rehash(s, s->ht_cap ? s->ht_cap * 2 : 16)) goto fail;
    uint32_t k = (uint32_t)stack_hash(st, n) & (s->ht_cap - 1);
    for (; s->ht[k]; k = (k + 1) & (s->ht_cap - 1)) {
        uint32_t i = s->ht[k] - 1;
        if (sset_len(s, i) == n && !memcmp(sset_stack(s, i), st, n * sizeof *st)) return;
    }
    if (s->n >= GRAM_MAX_STACKS) goto fail;
    if (s->n + 1 > s->cap_n) {
        size_t c = s->cap_n + 1;
        if (grow((void **)&s->off, &c, s->n + 2, sizeof *s->off)) goto fail;
        s->cap_n = (uint32_t)c - 1;
    }
    if (s->used + n > s->cap_e) {
        size_t c = s->cap_e;
        if (grow((void **)&s->e, &c, s->used + n, sizeof *s->e)) goto fail;
        s->cap_e = (uint32_t)c;
    }
    if (n) memcpy(s->e + s->used, st, n * sizeof *st);
    s->used += n;
    s->n++;
    s->off[s->n] = s->used;
    s->ht[k] = s->n;
    if (!n) s->has_empty = 1;
    if (n > s->max_len) s->max_len = n;
    return;
fail:
    s->failed = 1;
}

int sset_copy(sset *dst, const sset *src) {
    sset_reset(dst);
    if (src->n + 1 > dst->cap_n + 1 || !dst->off) {
        size_t c = dst->off ? dst->cap_n + 1 : 0;
        if (grow((void **)&dst->off, &c, src->n + 1, sizeof *dst->off)) return -1;
        dst->cap_n = (uint32_t)c - 1;
    }
    if (src->used > dst->cap_e) {
        size_t c = dst->cap_e;
        if (grow((void **)&dst->e, &c, src->used, sizeof *dst->e)) return -1;
        dst->cap_e = (uint32_t)c;
    }
    if (src->ht_cap != dst->ht_cap) {
        uint32_t *ht = calloc(src->ht_cap ? src->ht_cap : 1, sizeof *ht);
        if (!ht) return -1;
        free(dst->ht);
        dst->ht = ht;
        dst->ht_cap = src->ht_cap;
    }
    if (src->ht_cap) memcpy(dst->ht, src->ht, src->ht_cap * sizeof *dst->ht);
    if (src->off) memcpy(dst->off, src->off, (src->n + 1) * sizeof *dst->off);
    else dst->off[0] = 0;
    if (src->used) memcpy(dst->e, src->e, src->used * sizeof *dst->e);
    dst->n = src->n;
    dst->used = src->used;
    dst->has_empty = src->has_empty;
    dst->max_len = src->max_len;
    dst->failed = src->failed;
    return 0;
}

/* ---- matching ---- */

void gram_expand(const gram *g, uint32_t *st, uint32_t n, sset *out) {
    for (;;) {
        if (n == 0) {
            sset_add(out, st, 0);
            return;
        }
        uint32_t p = st[n - 1], e = g->el[p];
        if (GE_KIND(e) == GE_SET) {
            sset_add(out, st, n);
            return;
        }
        if (GE_KIND(e) == GE_END) {
            n--; /* the frame returns: the position below is next */
            continue;
        }
        uint32_t r = GE_ARG(e);
        if (GE_KIND(g->el[p + 1]) != GE_END) {
            if (n >= GRAM_MAX_DEPTH) return; /* too deep: this parse dies */
            st[n - 1] = p + 1;
            n++;
        }
        uint32_t a0 = g->rule_alt[r], a1 = g->rule_alt[r + 1];
        for (uint32_t a = a0; a + 1 < a1; a++) {
            /* each alternative on its own copy: a branch that returns
             * rewrites the entries below its frame */
            uint32_t copy[GRAM_MAX_DEPTH + 1];
            memcpy(copy, st, (n - 1) * sizeof *st);
            copy[n - 1] = g->alt[a];
            gram_expand(g, copy, n, out);
        }
        st[n - 1] = g->alt[a1 - 1];
    }
}

int gram_step(const gram *g, const sset *src, uint8_t b, sset *dst) {
    sset_reset(dst);
    uint32_t st[GRAM_MAX_DEPTH + 1];
    for (uint32_t i = 0; i < src->n; i++) {
        uint32_t n = sset_len(src, i);
        if (!n) continue;
        const uint32_t *s = sset_stack(src, i);
        uint32_t top = s[n - 1];
        if (!gram_set_has(g, GE_ARG(g->el[top]), b)) continue;
        memcpy(st, s, (n - 1) * sizeof *st);
        st[n - 1] = top + 1;
        gram_expand(g, st, n, dst);
    }
    return dst->n && !dst->failed ? 0 : -1;
}

void gram_start(const gram *g, sset *out) {
    uint32_t st[GRAM_MAX_DEPTH + 1];
    st[0] = g->n_el - 2;
    sset_reset(out);
    gram_expand(g, st, 1, out);
}

/* ---- states ---- */

gram_state *gram_state_new(const gram *g) {
    gram_state *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->g = g;
    gram_start(g, &s->cur);
    if (s->cur.failed || !s->cur.n) {
        gram_state_free(s);
        return NULL;
    }
    return s;
}

gram_state *gram_state_clone(const gram_state *src) {
    gram_state *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->g = src->g;
    if (sset_copy(&s->cur, &src->cur)) {
        gram_state_free(s);
        return NULL;
    }
    return s;
}

int gram_state_copy(gram_state *dst, const gram_state *src) {
    if (dst == src) return 0;
    /* into a spare first, so a failure leaves dst as it was */
    if (sset_copy(&dst->tmp[0], &src->cur)) return -1;
    sset t = dst->cur;
    dst->cur = dst->tmp[0];
    dst->tmp[0] = t;
    dst->g = src->g;
    return 0;
}

void gram_state_free(gram_state *s) {
    if (!s) return;
    sset_free(&s->cur);
    sset_free(&s->tmp[0]);
    sset_free(&s->tmp[1]);
    free(s);
}

int gram_state_feed(gram_state *s, const char *p, size_t n) {
    const sset *src = &s->cur;
    sset *dst = NULL;
    for (size_t i = 0; i < n; i++) {
        dst = &s->tmp[i & 1];
        if (gram_step(s->g, src, (uint8_t)p[i], dst)) return -1;
        src = dst;
    }
    if (dst) {
        sset t = s->cur;
        s->cur = *dst;
        *dst = t;
    }
    return 0;
}

/* ---- the shortest completion ---- */

/* The fewest bytes from position p to the end of its alternative. */
static uint64_t rest_len(const gram *g, uint32_t p) {
    uint64_t n = 0;
    for (; GE_KIND(g->el[p]) != GE_END; p++) n += GE_KIND(g->el[p]) == GE_SET ? 1 : g->minlen[GE_ARG(g->el[p])];
    return n;
}

int gram_state_complete(const gram_state *s, strbuf *out) {
    const gram *g = s->g;
    if (s->cur.has_empty) return 0;
    /* the stack whose frames' remainders are shortest (each frame's rest of
     * its alternative, the return positions' included) */
    uint64_t best_cost = UINT64_MAX;
    uint32_t best = 0;
    for (uint32_t i = 0; i < s->cur.n; i++) {
        const uint32_t n = sset_len(&s->cur, i), *st = sset_stack(&s->cur, i);
        uint64_t c = 0;
        for (uint32_t j = 0; j < n; j++) c += rest_len(g, st[j]);
        if (n && c < best_cost) best_cost = c, best = i;
    }
    if (best_cost == UINT64_MAX) return -1;
    uint32_t st[GRAM_MAX_DEPTH + 1], n = sset_len(&s->cur, best);
    memcpy(st, sset_stack(&s->cur, best), n * sizeof *st);
    /* each reference takes its shortest alternative (the rules' minlen),
     * each byte set its lowest byte: minlen bytes in all. The step bound
     * guards against alternatives of equal length that recurse without
     * bytes (the builder refuses left recursion, not every such cycle). */
    for (uint64_t steps = 0; n > 0; steps++) {
        if (steps > 64 * (best_cost + GRAM_MAX_DEPTH)) return -1;
        const uint32_t p = st[n - 1], e = g->el[p];
        if (GE_KIND(e) == GE_SET) {
            unsigned b = 0;
            while (b < 256 && !gram_set_has(g, GE_ARG(e), (uint8_t)b)) b++;
            if (b == 256) return -1;
            sb_putc(out, (char)b);
            st[n - 1] = p + 1;
        } else if (GE_KIND(e) == GE_END) {
            n--;
        } else {
            const uint32_t r = GE_ARG(e);
            uint32_t a = g->rule_alt[r];
            for (uint32_t x = a + 1; x < g->rule_alt[r + 1]; x++)
                if (rest_len(g, g->alt[x]) < rest_len(g, g->alt[a])) a = x;
            if (GE_KIND(g->el[p + 1]) != GE_END) { /* a return position below the callee's frame */
                if (n >= GRAM_MAX_DEPTH) return -1;
                st[n - 1] = p + 1;
                n++;
            }
            st[n - 1] = g->alt[a];
        }
    }
    return out->failed ? -1 : 0;
}

int gram_state_done(const gram_state *s) { return s->cur.has_empty; }

int gram_state_ended(const gram_state *s) { return s->cur.has_empty && s->cur.n == 1; }

/* ---- canonical keys ---- */

static void put_u32(strbuf *o, uint32_t v) { sb_put(o, &v, 4); }

int gram_canon_key(gram *g, const uint32_t *pos, uint32_t n, uint32_t t, strbuf *out) {
    /* Fewest bytes from the group to each position (0-1 weights, except a
     * return position, which costs the callee's minimum): a bucket queue
     * up to t. Positions beyond t are never reached by a token of at most
     * t bytes, so the key stops there. */
    int rc = -1;
    uint32_t **bk = calloc(t + 1, sizeof *bk);
    size_t *bn = calloc(t + 1, sizeof *bn), *bc = calloc(t + 1, sizeof *bc);
    uint32_t *segs = NULL;
    size_t nseg = 0, cseg = 0;
    if (!bk || !bn || !bc) goto out;
    if (!g->ck_dist) {
        g->ck_dist = malloc(g->n_el * sizeof *g->ck_dist);
        g->ck_dist_stamp = calloc(g->n_el, sizeof *g->ck_dist_stamp);
        g->ck_cid = malloc((g->n_rules ? g->n_rules : 1) * sizeof *g->ck_cid);
        g->ck_cid_stamp = calloc(g->n_rules ? g->n_rules : 1, sizeof *g->ck_cid_stamp);
        if (!g->ck_dist || !g->ck_dist_stamp || !g->ck_cid || !g->ck_cid_stamp) {
            free(g->ck_dist);
            free(g->ck_dist_stamp);
            free(g->ck_cid);
            free(g->ck_cid_stamp);
            g->ck_dist = g->ck_dist_stamp = g->ck_cid = g->ck_cid_stamp = NULL;
            goto out;
        }
    }
    if (++g->ck_stamp == 0) { /* wrapped: every old stamp could match again */
        memset(g->ck_dist_stamp, 0, g->n_el * sizeof *g->ck_dist_stamp);
        memset(g->ck_cid_stamp, 0, (g->n_rules ? g->n_rules : 1) * sizeof *g->ck_cid_stamp);
        g->ck_stamp = 1;
    }
    const uint32_t stamp = g->ck_stamp;
#define DIST(x) (g->ck_dist_stamp[x] == stamp ? g->ck_dist[x] : UINT32_MAX)
#define RELAX(x, d)                                                                                \
    do {                                                                                           \
        uint32_t x_ = (x);                                                                         \
        uint64_t d_ = (d);                                                                         \
        if (d_ <= t && d_ < DIST(x_)) {                                                            \
            g->ck_dist[x_] = (uint32_t)d_;                                                         \
            g->ck_dist_stamp[x_] = stamp;                                                          \
            if (grow((void **)&bk[d_], &bc[d_], bn[d_] + 1, sizeof **bk)) goto out;                \
            bk[d_][bn[d_]++] = x_;                                                                 \
        }                                                                                          \
    } while (0)
    for (uint32_t i = 0; i < n; i++) RELAX(pos[i], 0);
    for (uint32_t d = 0; d <= t; d++)
        for (size_t i = 0; i < bn[d]; i++) {
            uint32_t x = bk[d][i];
            if (DIST(x) != d) continue;
            uint32_t e = g->el[x];
            if (GE_KIND(e) == GE_SET) RELAX(x + 1, (uint64_t)d + 1);
            else if (GE_KIND(e) == GE_REF) {
                uint32_t r = GE_ARG(e);
                for (uint32_t a = g->rule_alt[r]; a < g->rule_alt[r + 1]; a++) RELAX(g->alt[a], d);
                RELAX(x + 1, (uint64_t)d + g->minlen[r]);
            }
        }
#undef RELAX
    /* Serialize: the group's segments, then each referenced rule's
     * alternatives in order of first reference (rules renumbered by that
     * order, so the key does not depend on where in the grammar they sit). */
    put_u32(out, t);
    put_u32(out, n);
    for (uint32_t i = 0; i < n; i++) {
        if (grow((void **)&segs, &cseg, nseg + 1, sizeof *segs)) goto out;
        segs[nseg++] = pos[i];
    }
    uint32_t next_cid = 0;
    for (size_t si = 0; si < nseg; si++) {
        sb_putc(out, 'G');
        for (uint32_t x = segs[si];; x++) {
            if (DIST(x) > t) {
                sb_putc(out, 'F');
                break;
            }
            uint32_t e = g->el[x];
            if (GE_KIND(e) == GE_END) {
                sb_putc(out, 'E');
                break;
            }
            if (GE_KIND(e) == GE_SET) {
                sb_putc(out, 'S');
                sb_put(out, g->sets[GE_ARG(e)], 32);
                continue;
            }
            uint32_t r = GE_ARG(e);
            sb_putc(out, GE_KIND(g->el[x + 1]) == GE_END ? 'r' : 'R');
            if (g->ck_cid_stamp[r] != stamp) {
                g->ck_cid_stamp[r] = stamp;
                g->ck_cid[r] = next_cid++;
                put_u32(out, g->ck_cid[r]);
                put_u32(out, g->rule_alt[r + 1] - g->rule_alt[r]);
                for (uint32_t a = g->rule_alt[r]; a < g->rule_alt[r + 1]; a++) {
                    if (grow((void **)&segs, &cseg, nseg + 1, sizeof *segs)) goto out;
                    segs[nseg++] = g->alt[a];
                }
            } else
                put_u32(out, g->ck_cid[r]);
        }
    }
    rc = out->failed ? -1 : 0;
#undef DIST
out:
    if (bk)
        for (uint32_t d = 0; d <= t; d++) free(bk[d]);
    free(bk);
    free(bn);
    free(bc);
    free(segs);
    return rc;
}
