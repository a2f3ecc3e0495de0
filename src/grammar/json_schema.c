/* JSON Schema to grammar: values as RFC 8259 text or in Gemma 4's tool-call
 * argument syntax, and the tool-call envelope around them.
 *
 * What a grammar generates is always valid against its schema; where the
 * schema allows more than the grammar can say simply (extra properties
 * when additionalProperties is absent, escapes in enum strings, ...) the
 * grammar generates a subset. What cannot be honoured exactly is refused
 * with the keyword and its path.
 *
 * Output shape (chosen so a random model terminates and the chat parser
 * sees nothing it would mistake for a marker):
 *  - no insignificant whitespace at all;
 *  - numbers: at most 15 integer digits, 15 fraction digits, 2 exponent
 *    digits; integers without fraction or exponent, never "-0";
 *  - strings: any valid UTF-8 (JSON: control characters escaped, every
 *    escape allowed, surrogates only as pairs), but never the raw byte
 *    pairs "<|" or "|>", which every Gemma control marker contains (JSON
 *    can still say them with \u003c); enum, const and key literals escape
 *    '<' as \u003c in JSON;
 *  - Gemma syntax: {key:value} with bare keys (or <|"|>key<|"|> when the
 *    key has a character a bare key cannot hold), <|"|>raw text<|"|>
 *    strings, JSON numbers, true, false, null, [a,b] arrays;
 *  - extra properties (additionalProperties true or a schema) have keys of
 *    [A-Za-z0-9_.-]+ not equal to a declared one (duplicates among extras
 *    are not prevented);
 *  - string lengths, item counts: unrolled, so at most GRAM_MAX_UNROLL. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/gram_impl.h"

#define GRAM_MAX_UNROLL 1024
#define MAX_SCHEMA_DEPTH 64
#define MAX_INT_DIGITS 15
#define MAX_FRAC_DIGITS 15
#define MAX_EXP_DIGITS 2
#define GEMMA_QUOTE "<|\"|>"

enum { T_NULL = 1, T_BOOL = 2, T_OBJ = 4, T_ARR = 8, T_STR = 16, T_NUM = 32, T_INT = 64, T_ALL = 127 };

typedef struct {
    const json *node;
    uint32_t rule;
} ref_memo;

typedef struct {
    gb *b;
    int syntax;
    const json *root;
    gem_err *err;
    int failed;
    strbuf path;
    ref_memo *refs;
    size_t n_refs, cap_refs;
    int depth;
    /* shared rules, GRAM_NONE until first used */
    uint32_t r_any, r_str, r_num, r_int, r_hex, r_esc;
} sc_t;

static uint32_t sc_fail(sc_t *c, const char *fmt, ...) GEM_PRINTF(2, 3);
static uint32_t sc_fail(sc_t *c, const char *fmt, ...) {
    if (c->failed) return GRAM_NONE;
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    gem_err_set(c->err, "%s: %s", c->path.len ? c->path.p : "schema", msg);
    c->failed = 1;
    return GRAM_NONE;
}

static uint32_t sc_oom(sc_t *c) { return sc_fail(c, "out of memory"); }

static size_t path_push(sc_t *c, const char *fmt, ...) GEM_PRINTF(2, 3);
static size_t path_push(sc_t *c, const char *fmt, ...) {
    size_t mark = c->path.len;
    char seg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(seg, sizeof seg, fmt, ap);
    va_end(ap);
    sb_puts(&c->path, seg);
    return mark;
}

static void path_pop(sc_t *c, size_t mark) {
    c->path.len = mark;
    if (c->path.p) c->path.p[mark] = 0;
}

/* ---- small grammar helpers ---- */

static int ok(sc_t *c) { return !c->failed && !gb_failed(c->b); }

static uint32_t lit_rule(sc_t *c, const char *s) { return gb_rule_lit(c->b, s, strlen(s)); }

/* n digits exactly (n >= 0; 0 is the empty string) */
static uint32_t digits_exact(sc_t *c, int n) {
    gseq s = {0};
    for (int i = 0; i < n; i++) gs_range(c->b, &s, '0', '9');
    uint32_t r = gb_rule_seq(c->b, &s);
    gs_free(&s);
    return r;
}

/* between lo and hi digits (a chain: each state may stop once lo are in) */
static uint32_t digits_between(sc_t *c, int lo, int hi) {
    uint32_t first = gb_rule(c->b);
    for (int k = 1; k <= hi; k++) gb_rule(c->b);
    gseq s = {0};
    for (int k = 0; k <= hi; k++) {
        if (k < hi) {
            gs_reset(&s);
            gs_range(c->b, &s, '0', '9');
            gs_ref(&s, first + (uint32_t)k + 1);
            gb_alt(c->b, first + (uint32_t)k, &s);
        }
        if (k >= lo) {
            gs_reset(&s);
            gb_alt(c->b, first + (uint32_t)k, &s);
        }
    }
    gs_free(&s);
    return first;
}

static uint32_t hex_rule(sc_t *c) {
    if (c->r_hex == GRAM_NONE) {
        uint8_t set[32] = {0};
        bset_add(set, '0', '9');
        bset_add(set, 'a', 'f');
        bset_add(set, 'A', 'F');
        gseq s = {0};
        gs_set(c->b, &s, set);
        c->r_hex = gb_rule_seq(c->b, &s);
        gs_free(&s);
    }
    return c->r_hex;
}

/* After a backslash: one JSON escape; \u escapes of surrogates only as a
 * high-low pair (json_parse refuses lone ones). */
static uint32_t esc_rule(sc_t *c) {
    if (c->r_esc != GRAM_NONE) return c->r_esc;
    gb *b = c->b;
    uint32_t h = hex_rule(c), r = gb_rule(b);
    c->r_esc = r;
    gseq s = {0};
    uint8_t set[32] = {0};
    const char *simple = "\"\\/bfnrt";
    for (const char *p = simple; *p; p++) bset_add(set, (uint8_t)*p, (uint8_t)*p);
    gs_set(b, &s, set);
    gb_alt(b, r, &s);
    /* u + a non-surrogate: [0-9A-Ca-c]xxx, [Dd][0-7]xx, [EFef]xxx */
    gs_reset(&s);
    gs_byte(b, &s, 'u');
    memset(set, 0, 32);
    bset_add(set, '0', '9');
    bset_add(set, 'A', 'C');
    bset_add(set, 'a', 'c');
    bset_add(set, 'E', 'F');
    bset_add(set, 'e', 'f');
    gs_set(b, &s, set);
    gs_ref(&s, h);
    gs_ref(&s, h);
    gs_ref(&s, h);
    gb_alt(b, r, &s);
    uint8_t dD[32] = {0};
    bset_add(dD, 'D', 'D');
    bset_add(dD, 'd', 'd');
    gs_reset(&s);
    gs_byte(b, &s, 'u');
    gs_set(b, &s, dD);
    gs_range(b, &s, '0', '7');
    gs_ref(&s, h);
    gs_ref(&s, h);
    gb_alt(b, r, &s);
    /* a high surrogate, then \u and a low one */
    gs_reset(&s);
    gs_byte(b, &s, 'u');
    gs_set(b, &s, dD);
    memset(set, 0, 32);
    bset_add(set, '8', '9');
    bset_add(set, 'A', 'B');
    bset_add(set, 'a', 'b');
    gs_set(b, &s, set);
    gs_ref(&s, h);
    gs_ref(&s, h);
    gs_str(b, &s, "\\u");
    gs_set(b, &s, dD);
    memset(set, 0, 32);
    bset_add(set, 'C', 'F');
    bset_add(set, 'c', 'f');
    gs_set(b, &s, set);
    gs_ref(&s, h);
    gs_ref(&s, h);
    gb_alt(b, r, &s);
    gs_free(&s);
    return r;
}

/* The body of a string after its opening quote, through its closing
 * quote, with between min and max characters (code points; an escape is
 * one; max < 0: no bound). One rule per (characters so far, marker state):
 * the marker state N/L/P says whether the last byte was '<' (L: '|' may
 * not follow) or '|' (P: '>' may not follow). */
static uint32_t string_body(sc_t *c, long min, long max) {
    int unbounded = max < 0;
    long K = unbounded ? min : max; /* states 0..K */
    if (unbounded && min == 0 && c->r_str != GRAM_NONE) return c->r_str;
    gb *b = c->b;
    uint32_t first = gb_rule(b);
    for (long i = 1; i < (K + 1) * 3; i++) gb_rule(b);
    if (!ok(c)) return GRAM_NONE;
    int js = c->syntax == GRAM_SYNTAX_JSON;
    uint32_t esc = js ? esc_rule(c) : GRAM_NONE;
    uint8_t plain[32] = {0};
    if (js) {
        bset_add(plain, 0x20, 0x7F);
        bset_del(plain, '"');
        bset_del(plain, '\\');
    } else
        bset_add(plain, 0x01, 0x7F);
    bset_del(plain, '<');
    bset_del(plain, '|');
    gseq s = {0};
    for (long k = 0; k <= K; k++) {
        long nk = unbounded && k == K ? K : k + 1; /* the state after one more character */
        int more = unbounded || k < max, close = k >= min;
        for (int m = 0; m < 3; m++) { /* 0: N, 1: L, 2: P */
            uint32_t r = first + (uint32_t)(k * 3 + m);
            uint32_t toN = first + (uint32_t)(nk * 3), toL = toN + 1, toP = toN + 2;
            if (more) {
                uint8_t set[32];
                memcpy(set, plain, 32);
                if (m == 2) bset_del(set, '>');
                gs_reset(&s);
                gs_set(b, &s, set);
                gs_ref(&s, toN);
                gb_alt(b, r, &s);
                gs_reset(&s);
                gs_byte(b, &s, '<');
                gs_ref(&s, toL);
                gb_alt(b, r, &s);
                if (m != 1) {
                    gs_reset(&s);
                    gs_byte(b, &s, '|');
                    gs_ref(&s, toP);
                    gb_alt(b, r, &s);
                }
                if (js) {
                    gs_reset(&s);
                    gs_byte(b, &s, '\\');
                    gs_ref(&s, esc);
                    gs_ref(&s, toN);
                    gb_alt(b, r, &s);
                }
                gb_utf8_alts(b, r, toN);
            }
            if (close) {
                gs_reset(&s);
                gs_str(b, &s, js ? "\"" : GEMMA_QUOTE);
                gb_alt(b, r, &s);
            }
        }
    }
    gs_free(&s);
    if (unbounded && min == 0) c->r_str = first;
    return first;
}

static uint32_t string_rule(sc_t *c, long min, long max) {
    uint32_t body = string_body(c, min, max);
    if (body == GRAM_NONE) return GRAM_NONE;
    gseq s = {0};
    gs_str(c->b, &s, c->syntax == GRAM_SYNTAX_JSON ? "\"" : GEMMA_QUOTE);
    gs_ref(&s, body);
    uint32_t r = gb_rule_seq(c->b, &s);
    gs_free(&s);
    return r;
}

/* ---- numbers ---- */

/* JSON number: -?(0|[1-9]d{0,14})(.d{1,15})?([eE][+-]?d{1,2})? */
static uint32_t number_rule(sc_t *c) {
    if (c->r_num != GRAM_NONE) return c->r_num;
    gb *b = c->b;
    gseq s = {0};
    uint32_t intp = gb_rule(b);
    gs_byte(b, &s, '0');
    gb_alt(b, intp, &s);
    gs_reset(&s);
    gs_range(b, &s, '1', '9');
    gs_ref(&s, digits_between(c, 0, MAX_INT_DIGITS - 1));
    gb_alt(b, intp, &s);
    uint32_t frac = gb_rule(b);
    gs_reset(&s);
    gb_alt(b, frac, &s);
    gs_byte(b, &s, '.');
    gs_ref(&s, digits_between(c, 1, MAX_FRAC_DIGITS));
    gb_alt(b, frac, &s);
    uint32_t exp = gb_rule(b);
    gs_reset(&s);
    gb_alt(b, exp, &s);
    uint8_t e[32] = {0}, pm[32] = {0};
    bset_add(e, 'e', 'e');
    bset_add(e, 'E', 'E');
    bset_add(pm, '+', '+');
    bset_add(pm, '-', '-');
    uint32_t sign = gb_rule(b);
    gs_reset(&s);
    gb_alt(b, sign, &s);
    gs_set(b, &s, pm);
    gb_alt(b, sign, &s);
    gs_reset(&s);
    gs_set(b, &s, e);
    gs_ref(&s, sign);
    gs_ref(&s, digits_between(c, 1, MAX_EXP_DIGITS));
    gb_alt(b, exp, &s);
    uint32_t r = gb_rule(b);
    for (int neg = 0; neg < 2; neg++) {
        gs_reset(&s);
        if (neg) gs_byte(b, &s, '-');
        gs_ref(&s, intp);
        gs_ref(&s, frac);
        gs_ref(&s, exp);
        gb_alt(b, r, &s);
    }
    gs_free(&s);
    c->r_num = r;
    return r;
}

/* digits of v, zero-padded to w */
static void dec(int64_t v, int w, char *out) {
    char tmp[32];
    snprintf(tmp, sizeof tmp, "%0*lld", w, (long long)v);
    strcpy(out, tmp);
}

/* Fixed-width digit strings between lo and hi (same width, leading zeros
 * allowed), digit by digit. */
static uint32_t fixed_range(sc_t *c, const char *lo, const char *hi) {
    size_t w = strlen(lo);
    gb *b = c->b;
    gseq s = {0};
    uint32_t r = gb_rule(b);
    if (w == 0) {
        gb_alt(b, r, &s);
        return r;
    }
    int all0 = 1, all9 = 1;
    for (size_t i = 0; i < w; i++) {
        all0 &= lo[i] == '0';
        all9 &= hi[i] == '9';
    }
    if (all0 && all9) {
        gs_ref(&s, digits_exact(c, (int)w));
        gb_alt(b, r, &s);
        gs_free(&s);
        return r;
    }
    char z[32], n9[32];
    memset(z, '0', w - 1);
    z[w - 1] = 0;
    memset(n9, '9', w - 1);
    n9[w - 1] = 0;
    if (lo[0] == hi[0]) {
        gs_byte(b, &s, (uint8_t)lo[0]);
        gs_ref(&s, fixed_range(c, lo + 1, hi + 1));
        gb_alt(b, r, &s);
    } else {
        gs_byte(b, &s, (uint8_t)lo[0]);
        gs_ref(&s, fixed_range(c, lo + 1, n9));
        gb_alt(b, r, &s);
        if (lo[0] + 1 <= hi[0] - 1) {
            gs_reset(&s);
            gs_range(b, &s, (uint8_t)(lo[0] + 1), (uint8_t)(hi[0] - 1));
            gs_ref(&s, digits_exact(c, (int)w - 1));
            gb_alt(b, r, &s);
        }
        gs_reset(&s);
        gs_byte(b, &s, (uint8_t)hi[0]);
        gs_ref(&s, fixed_range(c, z, hi + 1));
        gb_alt(b, r, &s);
    }
    gs_free(&s);
    return r;
}

static int ndigits(int64_t v) {
    int n = 1;
    while (v >= 10) {
        v /= 10;
        n++;
    }
    return n;
}

/* Canonical decimal naturals in [a, b] (0 <= a <= b): alternatives added to
 * rule r, each followed by cont (GRAM_NONE: nothing). */
static void nat_range(sc_t *c, uint32_t r, int64_t a, int64_t b, uint32_t cont) {
    gseq s = {0};
    for (int w = ndigits(a); w <= ndigits(b); w++) {
        int64_t lo = w == 1 ? 0 : 1, p = 1;
        for (int i = 1; i < w; i++) p *= 10;
        if (w > 1) lo = p;
        int64_t hi = p * 10 - 1;
        if (a > lo) lo = a;
        if (b < hi) hi = b;
        if (lo > hi) continue;
        char ls[32], hs[32];
        dec(lo, w, ls);
        dec(hi, w, hs);
        gs_reset(&s);
        gs_ref(&s, fixed_range(c, ls, hs));
        if (cont != GRAM_NONE) gs_ref(&s, cont);
        gb_alt(c->b, r, &s);
    }
    gs_free(&s);
}

#define MAX_NAT 999999999999999LL /* MAX_INT_DIGITS nines */

/* Integers in [lo, hi] (clamped to MAX_INT_DIGITS digits). */
static uint32_t int_range_rule(sc_t *c, int64_t lo, int64_t hi) {
    if (lo < -MAX_NAT) lo = -MAX_NAT;
    if (hi > MAX_NAT) hi = MAX_NAT;
    uint32_t r = gb_rule(c->b);
    if (hi >= 0) nat_range(c, r, lo > 0 ? lo : 0, hi, GRAM_NONE);
    if (lo < 0) {
        uint32_t m = gb_rule(c->b);
        nat_range(c, m, hi < -1 ? -hi : 1, -lo, GRAM_NONE);
        gseq s = {0};
        gs_byte(c->b, &s, '-');
        gs_ref(&s, m);
        gb_alt(c->b, r, &s);
        gs_free(&s);
    }
    return r;
}

/* Non-negative decimals without exponent between L and H (integers;
 * H < 0: no upper bound), each bound inclusive or exclusive, added to
 * rule r after prefix (a sign or nothing). y = I.F:
 *   (L, ..: I = L with a nonzero fraction, or I > L with any
 *   [L, ..: I >= L with any fraction
 *   .., H]: I = H with an all-zero fraction or none
 * Returns 1 when it added anything. */
static int dec_range(sc_t *c, uint32_t r, const char *prefix, int64_t L, int Lx, int64_t H, int Hx) {
    gb *b = c->b;
    int added = 0;
    gseq s = {0};
    if (H >= 0 && (H < L || (H == L && (Lx || Hx)))) return 0;
    uint32_t anyfrac = gb_rule(b); /* ("." d{1,15})? */
    gb_alt(b, anyfrac, &s);
    gs_byte(b, &s, '.');
    gs_ref(&s, digits_between(c, 1, MAX_FRAC_DIGITS));
    gb_alt(b, anyfrac, &s);
    /* I in [lo_any, hi_any] with any fraction */
    int64_t lo_any = Lx ? L + 1 : L, hi_any = H < 0 ? MAX_NAT : H - 1;
    if (lo_any <= hi_any && lo_any <= MAX_NAT) {
        uint32_t n = gb_rule(b);
        nat_range(c, n, lo_any, hi_any > MAX_NAT ? MAX_NAT : hi_any, anyfrac);
        gs_reset(&s);
        gs_str(b, &s, prefix);
        gs_ref(&s, n);
        gb_alt(b, r, &s);
        added = 1;
    }
    if (Lx && L <= MAX_NAT && (H < 0 || H > L)) { /* L.(nonzero fraction) */
        /* j zeros, then 1-9, then up to 14-j digits */
        uint32_t nz = gb_rule(b);
        for (int j = 0; j < MAX_FRAC_DIGITS; j++) {
            gs_reset(&s);
            for (int k = 0; k < j; k++) gs_byte(b, &s, '0');
            gs_range(b, &s, '1', '9');
            gs_ref(&s, digits_between(c, 0, MAX_FRAC_DIGITS - 1 - j));
            gb_alt(b, nz, &s);
        }
        char ls[32];
        snprintf(ls, sizeof ls, "%lld.", (long long)L);
        gs_reset(&s);
        gs_str(b, &s, prefix);
        gs_str(b, &s, ls);
        gs_ref(&s, nz);
        gb_alt(b, r, &s);
        added = 1;
    }
    if (H >= 0 && !Hx && H <= MAX_NAT && (H > L || !Lx)) { /* H(.0+)? */
        char hs[32];
        snprintf(hs, sizeof hs, "%lld", (long long)H);
        uint32_t zf = gb_rule(b);
        gs_reset(&s);
        gb_alt(b, zf, &s);
        for (int j = 1; j <= MAX_FRAC_DIGITS; j++) {
            gs_reset(&s);
            gs_byte(b, &s, '.');
            for (int k = 0; k < j; k++) gs_byte(b, &s, '0');
            gb_alt(b, zf, &s);
        }
        gs_reset(&s);
        gs_str(b, &s, prefix);
        gs_str(b, &s, hs);
        gs_ref(&s, zf);
        gb_alt(b, r, &s);
        added = 1;
    }
    gs_free(&s);
    return added;
}

typedef struct {
    int has_lo, has_hi, lo_x, hi_x;
    double lo, hi;
} bounds;

/* minimum / maximum / exclusive* (draft 4 booleans too) */
static int read_bounds(sc_t *c, const json *n, bounds *bd) {
    memset(bd, 0, sizeof *bd);
    const json *mn = json_get(n, "minimum"), *mx = json_get(n, "maximum");
    const json *emn = json_get(n, "exclusiveMinimum"), *emx = json_get(n, "exclusiveMaximum");
    const char *names[4] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
    const json *vals[4] = {mn, mx, emn, emx};
    for (int i = 0; i < 4; i++) {
        if (!vals[i]) continue;
        if (i >= 2 && vals[i]->type == JSON_BOOL) continue;
        if (vals[i]->type != JSON_NUMBER) {
            sc_fail(c, "\"%s\" must be a number", names[i]);
            return -1;
        }
    }
    if (mn) {
        bd->has_lo = 1;
        bd->lo = mn->num;
        bd->lo_x = emn && emn->type == JSON_BOOL && emn->boolean;
    }
    if (emn && emn->type == JSON_NUMBER && (!bd->has_lo || emn->num >= bd->lo)) {
        bd->has_lo = 1;
        bd->lo = emn->num;
        bd->lo_x = 1;
    }
    if (mx) {
        bd->has_hi = 1;
        bd->hi = mx->num;
        bd->hi_x = emx && emx->type == JSON_BOOL && emx->boolean;
    }
    if (emx && emx->type == JSON_NUMBER && (!bd->has_hi || emx->num <= bd->hi)) {
        bd->has_hi = 1;
        bd->hi = emx->num;
        bd->hi_x = 1;
    }
    return 0;
}

static uint32_t integer_rule(sc_t *c, const json *n) {
    bounds bd;
    if (read_bounds(c, n, &bd)) return GRAM_NONE;
    const char *fmt = json_get_str(n, "format");
    int64_t lo = -MAX_NAT, hi = MAX_NAT;
    if (fmt && !strcmp(fmt, "int32")) {
        lo = -2147483648LL;
        hi = 2147483647LL;
    }
    if (bd.has_lo) {
        double v = bd.lo_x ? floor(bd.lo) + 1 : ceil(bd.lo);
        if (v > (double)lo) lo = v > (double)MAX_NAT ? MAX_NAT + 1 : (int64_t)v;
    }
    if (bd.has_hi) {
        double v = bd.hi_x ? ceil(bd.hi) - 1 : floor(bd.hi);
        if (v < (double)hi) hi = v < (double)-MAX_NAT ? -MAX_NAT - 1 : (int64_t)v;
    }
    if (lo > hi) return sc_fail(c, "no integer lies between \"minimum\" and \"maximum\"");
    if (lo == -MAX_NAT && hi == MAX_NAT) {
        if (c->r_int == GRAM_NONE) {
            /* 0 | -?[1-9]d{0,14} */
            gb *b = c->b;
            gseq s = {0};
            uint32_t r = gb_rule(b), tail = digits_between(c, 0, MAX_INT_DIGITS - 1);
            gs_byte(b, &s, '0');
            gb_alt(b, r, &s);
            for (int neg = 0; neg < 2; neg++) {
                gs_reset(&s);
                if (neg) gs_byte(b, &s, '-');
                gs_range(b, &s, '1', '9');
                gs_ref(&s, tail);
                gb_alt(b, r, &s);
            }
            gs_free(&s);
            c->r_int = r;
        }
        return c->r_int;
    }
    return int_range_rule(c, lo, hi);
}

static int is_integral(double d) { return isfinite(d) && d == floor(d) && fabs(d) < 1e18; }

static uint32_t bounded_number_rule(sc_t *c, const json *n) {
    bounds bd;
    if (read_bounds(c, n, &bd)) return GRAM_NONE;
    if (!bd.has_lo && !bd.has_hi) return number_rule(c);
    if (bd.has_lo && !is_integral(bd.lo))
        return sc_fail(c, "\"%s\" of a number must be an integer to be enforced", bd.lo_x ? "exclusiveMinimum" : "minimum");
    if (bd.has_hi && !is_integral(bd.hi))
        return sc_fail(c, "\"%s\" of a number must be an integer to be enforced", bd.hi_x ? "exclusiveMaximum" : "maximum");
    int64_t lo = bd.has_lo ? (int64_t)bd.lo : 0, hi = bd.has_hi ? (int64_t)bd.hi : 0;
    if (bd.has_lo && bd.has_hi && (lo > hi || (lo == hi && (bd.lo_x || bd.hi_x))))
        return sc_fail(c, "no number lies between the bounds");
    uint32_t r = gb_rule(c->b);
    int any = 0;
    /* x >= 0 */
    if (!bd.has_hi || hi >= 0) {
        int64_t L = bd.has_lo && lo >= 0 ? lo : 0;
        int Lx = bd.has_lo && lo >= 0 ? bd.lo_x : 0;
        any |= dec_range(c, r, "", L, Lx, bd.has_hi ? hi : -1, bd.has_hi ? bd.hi_x : 0);
    }
    /* x < 0: x = -y with y > 0 */
    if (!bd.has_lo || lo < 0) {
        int64_t L = bd.has_hi && hi < 0 ? -hi : 0;
        int Lx = bd.has_hi && hi < 0 ? bd.hi_x : 1;
        any |= dec_range(c, r, "-", L, Lx, bd.has_lo ? -lo : -1, bd.has_lo ? bd.lo_x : 0);
    }
    if (!any) return sc_fail(c, "no number lies between the bounds");
    return r;
}

/* ---- formats ---- */

static void alt_lits(gb *b, uint32_t r, const char *const *v, int n) {
    gseq s = {0};
    for (int i = 0; i < n; i++) {
        gs_reset(&s);
        gs_str(b, &s, v[i]);
        gb_alt(b, r, &s);
    }
    gs_free(&s);
}

/* YYYY-MM-DD with a day the month always has (no February 29: it needs
 * the year) */
static uint32_t date_rule(sc_t *c) {
    gb *b = c->b;
    gseq s = {0};
    uint32_t d31 = gb_rule(b), d30 = gb_rule(b), d28 = gb_rule(b);
    uint32_t days[3] = {d31, d30, d28};
    for (int i = 0; i < 3; i++) {
        gs_reset(&s);
        gs_byte(b, &s, '0');
        gs_range(b, &s, '1', '9');
        gb_alt(b, days[i], &s);
        gs_reset(&s);
        gs_byte(b, &s, '1');
        gs_range(b, &s, '0', '9');
        gb_alt(b, days[i], &s);
        gs_reset(&s);
        gs_byte(b, &s, '2');
        gs_range(b, &s, '0', i == 2 ? '8' : '9');
        gb_alt(b, days[i], &s);
    }
    static const char *const t31[] = {"30", "31"};
    alt_lits(b, d31, t31, 2);
    alt_lits(b, d30, t31, 1);
    uint32_t md = gb_rule(b);
    static const char *const m31[] = {"01", "03", "05", "07", "08", "10", "12"}, *const m30[] = {"04", "06", "09", "11"};
    for (int i = 0; i < 7 + 4 + 1; i++) {
        gs_reset(&s);
        gs_str(b, &s, i < 7 ? m31[i] : i < 11 ? m30[i - 7] : "02");
        gs_byte(b, &s, '-');
        gs_ref(&s, i < 7 ? d31 : i < 11 ? d30 : d28);
        gb_alt(b, md, &s);
    }
    gs_reset(&s);
    gs_ref(&s, digits_exact(c, 4));
    gs_byte(b, &s, '-');
    gs_ref(&s, md);
    uint32_t r = gb_rule_seq(b, &s);
    gs_free(&s);
    return r;
}

/* HH:MM:SS(.d{1,6})?(Z|[+-]HH:MM): RFC 3339 full-time, offset required */
static uint32_t time_rule(sc_t *c) {
    gb *b = c->b;
    gseq s = {0};
    uint32_t hh = gb_rule(b), m60 = gb_rule(b);
    gs_range(b, &s, '0', '1');
    gs_range(b, &s, '0', '9');
    gb_alt(b, hh, &s);
    gs_reset(&s);
    gs_byte(b, &s, '2');
    gs_range(b, &s, '0', '3');
    gb_alt(b, hh, &s);
    gs_reset(&s);
    gs_range(b, &s, '0', '5');
    gs_range(b, &s, '0', '9');
    gb_alt(b, m60, &s);
    uint32_t frac = gb_rule(b);
    gs_reset(&s);
    gb_alt(b, frac, &s);
    gs_byte(b, &s, '.');
    gs_ref(&s, digits_between(c, 1, 6));
    gb_alt(b, frac, &s);
    uint32_t off = gb_rule(b);
    gs_reset(&s);
    gs_byte(b, &s, 'Z');
    gb_alt(b, off, &s);
    gs_reset(&s);
    uint8_t pm[32] = {0};
    bset_add(pm, '+', '+');
    bset_add(pm, '-', '-');
    gs_set(b, &s, pm);
    gs_ref(&s, hh);
    gs_byte(b, &s, ':');
    gs_ref(&s, m60);
    gb_alt(b, off, &s);
    gs_reset(&s);
    gs_ref(&s, hh);
    gs_byte(b, &s, ':');
    gs_ref(&s, m60);
    gs_byte(b, &s, ':');
    gs_ref(&s, m60);
    gs_ref(&s, frac);
    gs_ref(&s, off);
    uint32_t r = gb_rule_seq(b, &s);
    gs_free(&s);
    return r;
}

static uint32_t uuid_rule(sc_t *c) {
    gb *b = c->b;
    uint8_t hx[32] = {0};
    bset_add(hx, '0', '9');
    bset_add(hx, 'a', 'f');
    gseq s = {0};
    static const int groups[5] = {8, 4, 4, 4, 12};
    for (int g = 0; g < 5; g++) {
        if (g) gs_byte(b, &s, '-');
        for (int i = 0; i < groups[g]; i++) gs_set(b, &s, hx);
    }
    uint32_t r = gb_rule_seq(b, &s);
    gs_free(&s);
    return r;
}

/* ---- literals (enum, const, keys) ---- */

static int gemma_text_ok(const char *s, size_t n) {
    for (size_t i = 0; i + 1 < n; i++)
        if ((s[i] == '<' && s[i + 1] == '|') || (s[i] == '|' && s[i + 1] == '>')) return 0;
    return 1;
}

static int bare_key_ok(const char *s, size_t n) {
    if (!n) return 0;
    for (size_t i = 0; i < n; i++)
        if (strchr(":,{}[] \n\t\r", s[i]) || !s[i]) return 0;
    return 1;
}

/* A JSON string literal with '<' escaped (so no marker appears raw). */
static void json_lit_str(const char *s, size_t n, strbuf *o) {
    strbuf t = {0};
    json_quote(s, n, &t);
    for (size_t i = 0; i < t.len; i++) {
        if (t.p[i] == '<') sb_puts(o, "\\u003c");
        else sb_putc(o, t.p[i]);
    }
    sb_free(&t);
}

/* A value as literal text in the grammar's syntax; -1 (error set) when
 * Gemma syntax cannot say it. */
static int render_value(sc_t *c, const json *v, strbuf *o) {
    int js = c->syntax == GRAM_SYNTAX_JSON;
    switch (v->type) {
    case JSON_NULL: sb_puts(o, "null"); return 0;
    case JSON_BOOL: sb_puts(o, v->boolean ? "true" : "false"); return 0;
    case JSON_NUMBER: json_num_js(v->num, o); return 0;
    case JSON_STRING:
        if (js) json_lit_str(v->str, v->len, o);
        else {
            if (!gemma_text_ok(v->str, v->len) || memchr(v->str, 0, v->len)) {
                sc_fail(c, "the string \"%.60s\" cannot be written in Gemma syntax", v->str);
                return -1;
            }
            sb_puts(o, GEMMA_QUOTE);
            sb_put(o, v->str, v->len);
            sb_puts(o, GEMMA_QUOTE);
        }
        return 0;
    case JSON_ARRAY:
        sb_putc(o, '[');
        for (size_t i = 0; i < v->len; i++) {
            if (i) sb_putc(o, ',');
            if (render_value(c, v->items[i], o)) return -1;
        }
        sb_putc(o, ']');
        return 0;
    case JSON_OBJECT:
        sb_putc(o, '{');
        for (size_t i = 0; i < v->len; i++) {
            if (i) sb_putc(o, ',');
            if (js) json_lit_str(v->keys[i], v->key_lens[i], o);
            else if (!gemma_text_ok(v->keys[i], v->key_lens[i]) || memchr(v->keys[i], 0, v->key_lens[i])) {
                sc_fail(c, "the key \"%.60s\" cannot be written in Gemma syntax", v->keys[i]);
                return -1;
            } else if (bare_key_ok(v->keys[i], v->key_lens[i]))
                sb_put(o, v->keys[i], v->key_lens[i]);
            else {
                sb_puts(o, GEMMA_QUOTE);
                sb_put(o, v->keys[i], v->key_lens[i]);
                sb_puts(o, GEMMA_QUOTE);
            }
            sb_putc(o, ':');
            if (render_value(c, v->items[i], o)) return -1;
        }
        sb_putc(o, '}');
        return 0;
    }
    return 0;
}

/* A key and its colon, as literal text. */
static int render_key(sc_t *c, const char *k, size_t n, strbuf *o) {
    json key = {0};
    key.type = JSON_STRING;
    key.str = (char *)k;
    key.len = n;
    if (c->syntax == GRAM_SYNTAX_GEMMA && (!gemma_text_ok(k, n) || memchr(k, 0, n))) {
        sc_fail(c, "the key \"%.60s\" cannot be written in Gemma syntax", k);
        return -1;
    }
    if (c->syntax == GRAM_SYNTAX_GEMMA && bare_key_ok(k, n))
        sb_put(o, k, n);
    else if (render_value(c, &key, o))
        return -1;
    sb_putc(o, ':');
    return 0;
}

static int type_of(const json *v) {
    switch (v->type) {
    case JSON_NULL: return T_NULL;
    case JSON_BOOL: return T_BOOL;
    case JSON_NUMBER: return v->is_int || (isfinite(v->num) && v->num == floor(v->num)) ? T_INT | T_NUM : T_NUM;
    case JSON_STRING: return T_STR;
    case JSON_ARRAY: return T_ARR;
    default: return T_OBJ;
    }
}

/* ---- any value ---- */

/* Keys of extra properties: [A-Za-z0-9_.-]+ then the terminator, never one
 * of the excluded names (a trie of them, complemented): one rule per trie
 * node; leaving the trie leads to the free state. */
static void key_charset(uint8_t *set) {
    memset(set, 0, 32);
    bset_add(set, 'A', 'Z');
    bset_add(set, 'a', 'z');
    bset_add(set, '0', '9');
    bset_add(set, '_', '_');
    bset_add(set, '.', '.');
    bset_add(set, '-', '-');
}

typedef struct {
    const char **names;
    const size_t *lens;
    size_t n;
} name_set;

static uint32_t key_free(sc_t *c, const char *term) {
    uint8_t ks[32];
    key_charset(ks);
    gb *b = c->b;
    uint32_t r = gb_rule(b);
    gseq s = {0};
    gs_set(b, &s, ks);
    gs_ref(&s, r);
    gb_alt(b, r, &s);
    gs_reset(&s);
    gs_str(b, &s, term);
    gb_alt(b, r, &s);
    gs_free(&s);
    return r;
}

/* the node for prefix names[*][0..depth) restricted to the names in [i0, i1)
 * (sorted, so each prefix is a contiguous run) */
static uint32_t key_excl_node(sc_t *c, const name_set *ns, size_t i0, size_t i1, size_t depth, uint32_t free_r,
                              const char *term) {
    gb *b = c->b;
    uint8_t ks[32], rest[32];
    key_charset(ks);
    memcpy(rest, ks, 32);
    uint32_t r = gb_rule(b);
    gseq s = {0};
    int terminal = 0;
    size_t i = i0;
    while (i < i1) {
        if (ns->lens[i] == depth) {
            terminal = 1;
            i++;
            continue;
        }
        uint8_t ch = (uint8_t)ns->names[i][depth];
        size_t j = i;
        while (j < i1 && ns->lens[j] > depth && (uint8_t)ns->names[j][depth] == ch) j++;
        bset_del(rest, ch);
        gs_reset(&s);
        gs_byte(b, &s, ch);
        gs_ref(&s, key_excl_node(c, ns, i, j, depth + 1, free_r, term));
        gb_alt(b, r, &s);
        i = j;
    }
    static const uint8_t zero[32];
    if (memcmp(rest, zero, 32)) {
        gs_reset(&s);
        gs_set(b, &s, rest);
        gs_ref(&s, free_r);
        gb_alt(b, r, &s);
    }
    if (depth > 0 && !terminal) {
        gs_reset(&s);
        gs_str(b, &s, term);
        gb_alt(b, r, &s);
    }
    gs_free(&s);
    return r;
}

static int name_cmp(const void *a, const void *b) {
    const char *const *x = a, *const *y = b;
    return strcmp(*x, *y);
}

/* An extra-property key (with its colon), not equal to any declared name. */
static uint32_t extra_key_rule(sc_t *c, const char *const *names, size_t n) {
    int js = c->syntax == GRAM_SYNTAX_JSON;
    const char *term = js ? "\":" : ":";
    uint8_t ks[32];
    key_charset(ks);
    /* only names made of key characters can collide */
    const char **v = malloc((n ? n : 1) * sizeof *v);
    size_t *lens = malloc((n ? n : 1) * sizeof *lens), m = 0;
    if (!v || !lens) {
        free(v);
        free(lens);
        return sc_oom(c);
    }
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(names[i]), k = 0;
        while (k < l && ((ks[(uint8_t)names[i][k] >> 3] >> ((uint8_t)names[i][k] & 7)) & 1)) k++;
        if (k == l && l) v[m++] = names[i];
    }
    qsort(v, m, sizeof *v, name_cmp);
    for (size_t i = 0; i < m; i++) lens[i] = strlen(v[i]);
    uint32_t free_r = key_free(c, term);
    name_set ns = {v, lens, m};
    uint32_t body = key_excl_node(c, &ns, 0, m, 0, free_r, term);
    free(v);
    free(lens);
    if (!js) return body;
    gseq s = {0};
    gs_byte(c->b, &s, '"');
    gs_ref(&s, body);
    uint32_t r = gb_rule_seq(c->b, &s);
    gs_free(&s);
    return r;
}

/* Objects with members KEY VALUE (KEY includes the colon): '{' then
 * nothing or members separated by ','. */
static uint32_t object_of(sc_t *c, uint32_t key, uint32_t value) {
    gb *b = c->b;
    gseq s = {0};
    uint32_t more = gb_rule(b); /* after a member */
    gs_byte(b, &s, '}');
    gb_alt(b, more, &s);
    gs_reset(&s);
    gs_byte(b, &s, ',');
    gs_ref(&s, key);
    gs_ref(&s, value);
    gs_ref(&s, more);
    gb_alt(b, more, &s);
    uint32_t r = gb_rule(b);
    gs_reset(&s);
    gs_str(b, &s, "{}");
    gb_alt(b, r, &s);
    gs_reset(&s);
    gs_byte(b, &s, '{');
    gs_ref(&s, key);
    gs_ref(&s, value);
    gs_ref(&s, more);
    gb_alt(b, r, &s);
    gs_free(&s);
    return r;
}

static uint32_t any_key_rule(sc_t *c) {
    if (c->syntax == GRAM_SYNTAX_JSON) {
        gseq s = {0};
        gs_ref(&s, string_rule(c, 0, -1));
        gs_byte(c->b, &s, ':');
        uint32_t r = gb_rule_seq(c->b, &s);
        gs_free(&s);
        return r;
    }
    return extra_key_rule(c, NULL, 0);
}

static uint32_t any_value(sc_t *c) {
    if (c->r_any != GRAM_NONE) return c->r_any;
    gb *b = c->b;
    uint32_t r = gb_rule(b);
    c->r_any = r;
    gseq s = {0};
    uint32_t obj = object_of(c, any_key_rule(c), r);
    uint32_t more = gb_rule(b), arr = gb_rule(b);
    gs_byte(b, &s, ']');
    gb_alt(b, more, &s);
    gs_reset(&s);
    gs_byte(b, &s, ',');
    gs_ref(&s, r);
    gs_ref(&s, more);
    gb_alt(b, more, &s);
    gs_reset(&s);
    gs_str(b, &s, "[]");
    gb_alt(b, arr, &s);
    gs_reset(&s);
    gs_byte(b, &s, '[');
    gs_ref(&s, r);
    gs_ref(&s, more);
    gb_alt(b, arr, &s);
    uint32_t parts[4] = {obj, arr, string_rule(c, 0, -1), number_rule(c)};
    for (int i = 0; i < 4; i++) {
        gs_reset(&s);
        gs_ref(&s, parts[i]);
        gb_alt(b, r, &s);
    }
    static const char *const kw[] = {"true", "false", "null"};
    alt_lits(b, r, kw, 3);
    gs_free(&s);
    return r;
}

/* ---- schemas ---- */

static uint32_t compile(sc_t *c, const json *n);

static const char *const annotations[] = {
    "description", "title", "default", "examples", "$schema", "$id", "$comment", "strict", "deprecated",
    "readOnly", "writeOnly", "$defs", "definitions", "nullable", "$anchor", "contentEncoding", "contentMediaType",
    NULL};
static const char *const supported[] = {
    "type", "enum", "const", "properties", "required", "additionalProperties", "items", "prefixItems", "minItems",
    "maxItems", "minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "format",
    "anyOf", "oneOf", "allOf", "$ref", "uniqueItems", NULL};

static int in_list(const char *k, const char *const *l) {
    for (; *l; l++)
        if (!strcmp(k, *l)) return 1;
    return 0;
}

static int is_annotation(const char *k) { return in_list(k, annotations) || !strncmp(k, "x-", 2); }

/* 1 when n has a keyword other than annotations and those listed */
static const char *other_keyword(const json *n, const char *const *allowed) {
    for (size_t i = 0; i < n->len; i++)
        if (!is_annotation(n->keys[i]) && !in_list(n->keys[i], allowed)) return n->keys[i];
    return NULL;
}

static uint32_t get_limit(sc_t *c, const json *n, const char *key, long *out) {
    const json *v = json_get(n, key);
    if (!v) return 0;
    if (v->type != JSON_NUMBER || !is_integral(v->num) || v->num < 0)
        return sc_fail(c, "\"%s\" must be a non-negative integer", key);
    if (v->num > GRAM_MAX_UNROLL) return sc_fail(c, "\"%s\" above %d is not supported", key, GRAM_MAX_UNROLL);
    *out = (long)v->num;
    return 0;
}

static uint32_t resolve_ref(sc_t *c, const json *n, const char *ref) {
    const json *t = NULL;
    if (!strcmp(ref, "#")) t = c->root;
    else if (!strncmp(ref, "#/$defs/", 8) || !strncmp(ref, "#/definitions/", 14)) {
        int defs = ref[2] == '$';
        const json *d = json_get(c->root, defs ? "$defs" : "definitions");
        /* the name, JSON-pointer unescaped (~1 is '/', ~0 is '~') */
        const char *p = ref + (defs ? 8 : 14);
        char name[256];
        size_t k = 0;
        for (; *p && k + 1 < sizeof name; p++) {
            if (*p == '/') return sc_fail(c, "\"$ref\" \"%s\": only #/$defs/NAME and #/definitions/NAME are supported", ref);
            if (*p == '~' && (p[1] == '0' || p[1] == '1')) {
                name[k++] = p[1] == '1' ? '/' : '~';
                p++;
            } else
                name[k++] = *p;
        }
        name[k] = 0;
        t = d && d->type == JSON_OBJECT ? json_get(d, name) : NULL;
    } else
        return sc_fail(c, "\"$ref\" \"%s\" is not supported (only local #/$defs and #/definitions)", ref);
    if (!t) return sc_fail(c, "\"$ref\" \"%s\" does not resolve", ref);
    for (size_t i = 0; i < c->n_refs; i++)
        if (c->refs[i].node == t) return c->refs[i].rule;
    if (c->n_refs == c->cap_refs) {
        size_t nc = c->cap_refs ? c->cap_refs * 2 : 8;
        ref_memo *q = realloc(c->refs, nc * sizeof *q);
        if (!q) return sc_oom(c);
        c->refs = q;
        c->cap_refs = nc;
    }
    /* the rule exists before its body, so a recursive schema refers to it */
    uint32_t r = gb_rule(c->b);
    c->refs[c->n_refs++] = (ref_memo){t, r};
    size_t mark = path_push(c, "(%s)", ref);
    uint32_t body = compile(c, t);
    path_pop(c, mark);
    (void)n;
    if (body == GRAM_NONE) return GRAM_NONE;
    if (body == r) return sc_fail(c, "\"$ref\" \"%s\" refers to itself", ref);
    gseq s = {0};
    gs_ref(&s, body);
    gb_alt(c->b, r, &s);
    gs_free(&s);
    return r;
}

static uint32_t enum_rule(sc_t *c, const json *n, int types) {
    const json *e = json_get(n, "enum"), *k = json_get(n, "const");
    const char *kw = e ? "enum" : "const";
    if (e && k) return sc_fail(c, "\"enum\" together with \"const\" is not supported");
    static const char *const ok_with[] = {"enum", "const", "type", NULL};
    const char *other = other_keyword(n, ok_with);
    if (other) return sc_fail(c, "\"%s\" together with \"%s\" is not supported", other, kw);
    if (e && e->type != JSON_ARRAY) return sc_fail(c, "\"enum\" must be an array");
    size_t cnt = e ? e->len : 1;
    uint32_t r = gb_rule(c->b);
    gseq s = {0};
    strbuf t = {0};
    size_t used = 0;
    for (size_t i = 0; i < cnt; i++) {
        const json *v = e ? e->items[i] : k;
        if (!(type_of(v) & types)) continue; /* outside "type": never valid */
        t.len = 0;
        if (render_value(c, v, &t)) break;
        if (t.failed) {
            sc_oom(c);
            break;
        }
        gs_reset(&s);
        gs_lit(c->b, &s, t.p, t.len);
        gb_alt(c->b, r, &s);
        used++;
    }
    sb_free(&t);
    gs_free(&s);
    if (c->failed) return GRAM_NONE;
    if (!used) return sc_fail(c, "\"%s\" allows no value%s", kw, e && e->len ? " of the given \"type\"" : "");
    return r;
}

static uint32_t string_schema(sc_t *c, const json *n) {
    long mn = 0, mx = -1;
    if (get_limit(c, n, "minLength", &mn) == GRAM_NONE || get_limit(c, n, "maxLength", &mx) == GRAM_NONE)
        return GRAM_NONE;
    if (mx >= 0 && mn > mx) return sc_fail(c, "\"minLength\" is greater than \"maxLength\"");
    const json *f = json_get(n, "format");
    if (f && f->type != JSON_STRING) return sc_fail(c, "\"format\" must be a string");
    if (f) {
        const char *fs = f->str;
        uint32_t body;
        if (!strcmp(fs, "date")) body = date_rule(c);
        else if (!strcmp(fs, "time")) body = time_rule(c);
        else if (!strcmp(fs, "date-time")) {
            gseq s = {0};
            gs_ref(&s, date_rule(c));
            gs_byte(c->b, &s, 'T');
            gs_ref(&s, time_rule(c));
            body = gb_rule_seq(c->b, &s);
            gs_free(&s);
        } else if (!strcmp(fs, "uuid")) body = uuid_rule(c);
        else return sc_fail(c, "\"format\" \"%.40s\" is not supported", fs);
        if (json_get(n, "minLength") || json_get(n, "maxLength"))
            return sc_fail(c, "\"%s\" together with \"format\" is not supported",
                           json_get(n, "minLength") ? "minLength" : "maxLength");
        const char *q = c->syntax == GRAM_SYNTAX_JSON ? "\"" : GEMMA_QUOTE;
        gseq s = {0};
        gs_str(c->b, &s, q);
        gs_ref(&s, body);
        gs_str(c->b, &s, q);
        uint32_t r = gb_rule_seq(c->b, &s);
        gs_free(&s);
        return r;
    }
    return string_rule(c, mn, mx);
}

static uint32_t array_schema(sc_t *c, const json *n) {
    const json *items = json_get(n, "items"), *prefix = json_get(n, "prefixItems"), *uniq = json_get(n, "uniqueItems");
    if (uniq && !(uniq->type == JSON_BOOL && !uniq->boolean)) return sc_fail(c, "\"uniqueItems\" is not supported");
    if (items && items->type == JSON_ARRAY) return sc_fail(c, "\"items\" as an array is not supported (use \"prefixItems\")");
    if (items && items->type != JSON_OBJECT && items->type != JSON_BOOL) return sc_fail(c, "\"items\" must be a schema");
    if (prefix && prefix->type != JSON_ARRAY) return sc_fail(c, "\"prefixItems\" must be an array");
    long mn = 0, mx = -1;
    if (get_limit(c, n, "minItems", &mn) == GRAM_NONE || get_limit(c, n, "maxItems", &mx) == GRAM_NONE) return GRAM_NONE;
    long k = prefix ? (long)prefix->len : 0;
    if (k > GRAM_MAX_UNROLL) return sc_fail(c, "\"prefixItems\" longer than %d is not supported", GRAM_MAX_UNROLL);
    int no_more = items && items->type == JSON_BOOL && !items->boolean;
    if (no_more && (mx < 0 || mx > k)) mx = k;
    if (mx >= 0 && mn > mx) return sc_fail(c, "\"minItems\" is greater than %s", no_more ? "the number of \"prefixItems\"" : "\"maxItems\"");
    long U = mx >= 0 ? mx : (mn > k ? mn : k);
    gb *b = c->b;
    /* element rules */
    uint32_t *el = malloc(((size_t)U + 1) * sizeof *el);
    if (!el) return sc_oom(c);
    uint32_t item_r = GRAM_NONE;
    int need_items = U > k || mx < 0;
    if (need_items && !no_more) {
        size_t mark = path_push(c, ".items");
        item_r = items && items->type == JSON_OBJECT ? compile(c, items) : any_value(c);
        path_pop(c, mark);
    }
    for (long i = 0; i < U && !c->failed; i++) {
        if (i < k) {
            size_t mark = path_push(c, ".prefixItems[%ld]", i);
            el[i] = compile(c, prefix->items[i]);
            path_pop(c, mark);
        } else
            el[i] = item_r;
    }
    if (c->failed) {
        free(el);
        return GRAM_NONE;
    }
    gseq s = {0};
    uint32_t loop = GRAM_NONE;
    if (mx < 0) { /* ']' | ',' ITEM LOOP */
        loop = gb_rule(b);
        gs_byte(b, &s, ']');
        gb_alt(b, loop, &s);
        gs_reset(&s);
        gs_byte(b, &s, ',');
        gs_ref(&s, item_r);
        gs_ref(&s, loop);
        gb_alt(b, loop, &s);
    }
    /* A_i: i elements written */
    uint32_t first = gb_rule(b);
    for (long i = 1; i <= U; i++) gb_rule(b);
    for (long i = 0; i <= U; i++) {
        uint32_t r = first + (uint32_t)i;
        if (i == U && mx < 0 && U > 0) {
            gs_reset(&s);
            gs_ref(&s, loop);
            gb_alt(b, r, &s);
            continue;
        }
        if (i >= mn) {
            gs_reset(&s);
            gs_byte(b, &s, ']');
            gb_alt(b, r, &s);
        }
        if (i < U || (mx < 0 && U == 0)) {
            gs_reset(&s);
            if (i) gs_byte(b, &s, ',');
            gs_ref(&s, i < U ? el[i] : item_r);
            gs_ref(&s, i < U ? first + (uint32_t)i + 1 : loop);
            gb_alt(b, r, &s);
        }
    }
    free(el);
    gs_reset(&s);
    gs_byte(b, &s, '[');
    gs_ref(&s, first);
    uint32_t r = gb_rule_seq(b, &s);
    gs_free(&s);
    return r;
}

typedef struct {
    const char *name;
    size_t len;
    const json *schema; /* NULL: any value */
    int required;
} prop;

static uint32_t object_schema(sc_t *c, const json *n) {
    const json *props = json_get(n, "properties"), *req = json_get(n, "required"), *addl = json_get(n, "additionalProperties");
    if (props && props->type != JSON_OBJECT) return sc_fail(c, "\"properties\" must be an object");
    if (req && req->type != JSON_ARRAY) return sc_fail(c, "\"required\" must be an array");
    if (addl && addl->type != JSON_BOOL && addl->type != JSON_OBJECT)
        return sc_fail(c, "\"additionalProperties\" must be a boolean or a schema");
    size_t np = props ? props->len : 0, nreq = req ? req->len : 0;
    /* extras: additionalProperties true or a schema; also a bare
     * {"type":"object"}, whose only value would otherwise be {} */
    int extras = addl ? !(addl->type == JSON_BOOL && !addl->boolean) : np == 0;
    const json *extra_schema = addl && addl->type == JSON_OBJECT ? addl : NULL;
    prop *pv = calloc(np + nreq + 1, sizeof *pv);
    uint32_t *vals = calloc(np + nreq + 1, sizeof *vals);
    size_t m = 0;
    uint32_t result = GRAM_NONE;
    gseq s = {0};
    strbuf t = {0};
    if (!pv || !vals) {
        sc_oom(c);
        goto out;
    }
    for (size_t i = 0; i < np; i++) {
        const json *ps = props->items[i];
        if (ps->type == JSON_BOOL && !ps->boolean) {
            /* may not appear: required makes it a contradiction, below */
            continue;
        }
        if (ps->type != JSON_BOOL && ps->type != JSON_OBJECT) {
            size_t mark = path_push(c, ".properties.%s", props->keys[i]);
            sc_fail(c, "a property schema must be an object or a boolean");
            path_pop(c, mark);
            goto out;
        }
        pv[m++] = (prop){props->keys[i], props->key_lens[i], ps->type == JSON_OBJECT ? ps : NULL, 0};
    }
    for (size_t i = 0; i < nreq; i++) {
        const json *rn = req->items[i];
        if (rn->type != JSON_STRING) {
            sc_fail(c, "\"required\" must list strings");
            goto out;
        }
        size_t j = 0;
        while (j < m && !(pv[j].len == rn->len && !memcmp(pv[j].name, rn->str, rn->len))) j++;
        if (j < m) {
            pv[j].required = 1;
            continue;
        }
        const json *declared = props ? json_get(props, rn->str) : NULL;
        if (declared || !extras) {
            sc_fail(c, "required property \"%.80s\" is %s", rn->str,
                    declared ? "declared false" : "not in \"properties\" and \"additionalProperties\" is false");
            goto out;
        }
        /* required but undeclared: present, valued as the extras are */
        pv[m++] = (prop){rn->str, rn->len, extra_schema, 1};
        if (!extra_schema) pv[m - 1].schema = NULL;
    }
    for (size_t i = 0; i < m; i++) {
        if (memchr(pv[i].name, 0, pv[i].len)) {
            sc_fail(c, "property names with NUL are not supported");
            goto out;
        }
        size_t mark = path_push(c, ".properties.%s", pv[i].name);
        vals[i] = pv[i].schema ? compile(c, pv[i].schema) : any_value(c);
        path_pop(c, mark);
        if (vals[i] == GRAM_NONE) goto out;
    }
    gb *b = c->b;
    uint32_t extra_member = GRAM_NONE;
    if (extras) {
        /* extra keys avoid every declared name, false ones included */
        const char **all = calloc(np + m + 1, sizeof *all);
        if (!all) {
            sc_oom(c);
            goto out;
        }
        size_t na = 0;
        for (size_t i = 0; i < m; i++) all[na++] = pv[i].name;
        for (size_t i = 0; i < np; i++) all[na++] = props->keys[i];
        uint32_t key = extra_key_rule(c, all, na);
        free(all);
        uint32_t val;
        if (extra_schema) {
            size_t mark = path_push(c, ".additionalProperties");
            val = compile(c, extra_schema);
            path_pop(c, mark);
            if (val == GRAM_NONE) goto out;
        } else
            val = any_value(c);
        gs_reset(&s);
        gs_ref(&s, key);
        gs_ref(&s, val);
        extra_member = gb_rule_seq(b, &s);
    }
    /* A_i: nothing written yet, next candidate property i; B_i: something
     * written (a comma first). Required properties cannot be skipped. */
    uint32_t A = gb_rule(b);
    for (size_t i = 1; i < 2 * (m + 1); i++) gb_rule(b);
#define RA(i) (A + 2 * (uint32_t)(i))
#define RB(i) (A + 2 * (uint32_t)(i) + 1)
    for (size_t i = 0; i <= m; i++) {
        for (int after = 0; after < 2; after++) {
            uint32_t r = after ? RB(i) : RA(i);
            if (i == m) {
                gs_reset(&s);
                gs_byte(b, &s, '}');
                gb_alt(b, r, &s);
                if (extras) {
                    gs_reset(&s);
                    if (after) gs_byte(b, &s, ',');
                    gs_ref(&s, extra_member);
                    gs_ref(&s, RB(m));
                    gb_alt(b, r, &s);
                }
                continue;
            }
            t.len = 0;
            if (render_key(c, pv[i].name, pv[i].len, &t)) goto out;
            gs_reset(&s);
            if (after) gs_byte(b, &s, ',');
            gs_lit(b, &s, t.p, t.len);
            gs_ref(&s, vals[i]);
            gs_ref(&s, RB(i + 1));
            gb_alt(b, r, &s);
            if (!pv[i].required) {
                gs_reset(&s);
                gs_ref(&s, after ? RB(i + 1) : RA(i + 1));
                gb_alt(b, r, &s);
            }
        }
    }
#undef RA
#undef RB
    gs_reset(&s);
    gs_byte(b, &s, '{');
    gs_ref(&s, A);
    result = gb_rule_seq(b, &s);
out:
    free(pv);
    free(vals);
    gs_free(&s);
    sb_free(&t);
    return c->failed ? GRAM_NONE : result;
}

static int parse_types(sc_t *c, const json *t) {
    static const char *const tn[] = {"null", "boolean", "object", "array", "string", "number", "integer"};
    int mask = 0;
    size_t cnt = t->type == JSON_ARRAY ? t->len : 1;
    if (t->type != JSON_ARRAY && t->type != JSON_STRING) return sc_fail(c, "\"type\" must be a string or an array"), -1;
    if (!cnt) return sc_fail(c, "\"type\" is empty"), -1;
    for (size_t i = 0; i < cnt; i++) {
        const json *v = t->type == JSON_ARRAY ? t->items[i] : t;
        int k = -1;
        if (v->type == JSON_STRING)
            for (int j = 0; j < 7; j++)
                if (!strcmp(v->str, tn[j])) k = j;
        if (k < 0) return sc_fail(c, "unknown \"type\" %.40s", v->type == JSON_STRING ? v->str : "(not a string)"), -1;
        mask |= 1 << k;
    }
    return mask;
}

static uint32_t compile(sc_t *c, const json *n) {
    if (c->failed) return GRAM_NONE;
    if (n->type == JSON_BOOL) return n->boolean ? any_value(c) : sc_fail(c, "the schema false allows nothing");
    if (n->type != JSON_OBJECT) return sc_fail(c, "a schema must be an object or a boolean");
    if (++c->depth > MAX_SCHEMA_DEPTH) {
        c->depth--;
        return sc_fail(c, "schema nested deeper than %d", MAX_SCHEMA_DEPTH);
    }
    uint32_t r = GRAM_NONE;
    for (size_t i = 0; i < n->len; i++)
        if (!is_annotation(n->keys[i]) && !in_list(n->keys[i], supported)) {
            r = sc_fail(c, "\"%s\" is not supported", n->keys[i]);
            goto out;
        }
    const json *ref = json_get(n, "$ref");
    if (ref) {
        static const char *const only[] = {"$ref", NULL};
        const char *o = other_keyword(n, only);
        if (ref->type != JSON_STRING) r = sc_fail(c, "\"$ref\" must be a string");
        else if (o) r = sc_fail(c, "\"%s\" together with \"$ref\" is not supported", o);
        else r = resolve_ref(c, n, ref->str);
        goto out;
    }
    const json *all = json_get(n, "allOf");
    if (all) {
        static const char *const only[] = {"allOf", NULL};
        const char *o = other_keyword(n, only);
        if (all->type != JSON_ARRAY || all->len != 1 || o) {
            r = sc_fail(c, "\"allOf\" is supported only with a single schema and nothing beside it");
            goto out;
        }
        size_t mark = path_push(c, ".allOf[0]");
        r = compile(c, all->items[0]);
        path_pop(c, mark);
        goto out;
    }
    const char *alt_kw = json_get(n, "anyOf") ? "anyOf" : json_get(n, "oneOf") ? "oneOf" : NULL;
    if (alt_kw) {
        const json *alts = json_get(n, alt_kw);
        static const char *const only[] = {"anyOf", "oneOf", NULL};
        const char *o = other_keyword(n, only);
        if (o) {
            r = sc_fail(c, "\"%s\" together with \"%s\" is not supported", o, alt_kw);
            goto out;
        }
        if (json_get(n, "anyOf") && json_get(n, "oneOf")) {
            r = sc_fail(c, "\"anyOf\" together with \"oneOf\" is not supported");
            goto out;
        }
        if (alts->type != JSON_ARRAY || !alts->len) {
            r = sc_fail(c, "\"%s\" must be a non-empty array", alt_kw);
            goto out;
        }
        uint32_t rr = gb_rule(c->b);
        gseq s = {0};
        for (size_t i = 0; i < alts->len && !c->failed; i++) {
            size_t mark = path_push(c, ".%s[%zu]", alt_kw, i);
            uint32_t a = compile(c, alts->items[i]);
            path_pop(c, mark);
            gs_reset(&s);
            gs_ref(&s, a);
            if (a != GRAM_NONE) gb_alt(c->b, rr, &s);
        }
        gs_free(&s);
        r = c->failed ? GRAM_NONE : rr;
        goto out;
    }
    int types;
    const json *t = json_get(n, "type");
    if (t) {
        types = parse_types(c, t);
        if (types < 0) goto out;
    } else {
        types = 0;
        static const char *const okw[] = {"properties", "required", "additionalProperties", NULL},
                                 *const akw[] = {"items", "prefixItems", "minItems", "maxItems", NULL},
                                 *const skw[] = {"minLength", "maxLength", "format", NULL},
                                 *const nkw[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", NULL};
        for (size_t i = 0; i < n->len; i++) {
            if (in_list(n->keys[i], okw)) types |= T_OBJ;
            if (in_list(n->keys[i], akw)) types |= T_ARR;
            if (in_list(n->keys[i], skw)) types |= T_STR;
            if (in_list(n->keys[i], nkw)) types |= T_NUM;
        }
        if (!types) types = T_ALL;
    }
    if (json_get(n, "enum") || json_get(n, "const")) {
        r = enum_rule(c, n, types);
        goto out;
    }
    if (types == T_ALL) {
        static const char *const none[] = {"type", NULL};
        const char *o = other_keyword(n, none);
        if (!o) {
            r = any_value(c);
            goto out;
        }
    }
    /* a format on a non-string: int32 / int64 / float / double are number
     * formats (int64 always holds, our integers have 15 digits at most) */
    const json *f = json_get(n, "format");
    if (f && f->type == JSON_STRING && !(types & T_STR)) {
        if (!((types & (T_INT | T_NUM)) &&
              (!strcmp(f->str, "int32") || !strcmp(f->str, "int64") || !strcmp(f->str, "float") || !strcmp(f->str, "double")))) {
            r = sc_fail(c, "\"format\" \"%.40s\" is not supported", f->str);
            goto out;
        }
        if (!strcmp(f->str, "int32") && (types & T_NUM)) {
            r = sc_fail(c, "\"format\" \"int32\" on a number is not supported");
            goto out;
        }
    }
    uint32_t rr = gb_rule(c->b);
    gseq s = {0};
    for (int k = 0; k < 7 && !c->failed; k++) {
        int bit = 1 << k;
        if (!(types & bit)) continue;
        if (bit == T_INT && (types & T_NUM)) continue; /* numbers hold the integers */
        uint32_t a = GRAM_NONE;
        switch (bit) {
        case T_NULL: a = lit_rule(c, "null"); break;
        case T_BOOL: {
            static const char *const tf[] = {"true", "false"};
            a = gb_rule(c->b);
            alt_lits(c->b, a, tf, 2);
            break;
        }
        case T_OBJ: a = object_schema(c, n); break;
        case T_ARR: a = array_schema(c, n); break;
        case T_STR:
            if (f && f->type == JSON_STRING && (types & (T_INT | T_NUM)) && strcmp(f->str, "date") && strcmp(f->str, "time") &&
                strcmp(f->str, "date-time") && strcmp(f->str, "uuid")) {
                /* a number format beside "string": the string is unconstrained by it */
                a = string_rule(c, 0, -1);
                break;
            }
            a = string_schema(c, n);
            break;
        case T_NUM: a = bounded_number_rule(c, n); break;
        case T_INT: a = integer_rule(c, n); break;
        }
        gs_reset(&s);
        gs_ref(&s, a);
        if (a != GRAM_NONE) gb_alt(c->b, rr, &s);
    }
    gs_free(&s);
    r = c->failed ? GRAM_NONE : rr;
out:
    c->depth--;
    if (!c->failed && gb_failed(c->b)) return sc_oom(c);
    return r;
}

static void sc_init(sc_t *c, const json *root, int syntax, gem_err *err) {
    memset(c, 0, sizeof *c);
    c->b = gb_new();
    c->syntax = syntax;
    c->root = root;
    c->err = err;
    c->r_any = c->r_str = c->r_num = c->r_int = c->r_hex = c->r_esc = GRAM_NONE;
}

static void sc_done(sc_t *c) {
    gb_free(c->b);
    free(c->refs);
    sb_free(&c->path);
}

/* The object (any keys) for NULL / {} schemas. */
static uint32_t any_object(sc_t *c) {
    uint32_t v = any_value(c);
    return object_of(c, any_key_rule(c), v);
}

/* 1 when every sentence of g starts with '{' (Gemma arguments must). */
static int starts_with_brace(const gram *g) {
    gram_state *s = gram_state_new(g);
    if (!s) return 0;
    int okb = !gram_state_done(s);
    for (int b = 0; b < 256 && okb; b++) {
        if (b == '{') continue;
        char ch = (char)b;
        gram_state *t = gram_state_clone(s);
        if (!t || gram_state_feed(t, &ch, 1) == 0) okb = 0;
        gram_state_free(t);
    }
    gram_state_free(s);
    return okb;
}

static uint32_t compile_root(sc_t *c, const json *schema) {
    if (!schema || (schema->type == JSON_OBJECT && schema->len == 0)) return any_object(c);
    return compile(c, schema);
}

gram *gram_json_schema(const json *schema, int syntax, gem_err *err) {
    if (syntax != GRAM_SYNTAX_JSON && syntax != GRAM_SYNTAX_GEMMA) {
        gem_err_set(err, "grammar: unknown syntax %d", syntax);
        return NULL;
    }
    sc_t c;
    sc_init(&c, schema, syntax, err);
    if (!c.b) {
        gem_err_set(err, "grammar: out of memory");
        return NULL;
    }
    sb_puts(&c.path, "schema");
    uint32_t root = compile_root(&c, schema);
    gram *g = NULL;
    if (root != GRAM_NONE && !c.failed) {
        g = gb_finish(c.b, root, err);
        if (!g) gem_err_wrap(err, "schema");
    }
    if (g && syntax == GRAM_SYNTAX_GEMMA && !starts_with_brace(g)) {
        gram_free(g);
        g = NULL;
        gem_err_set(err, "schema: Gemma tool arguments must be an object");
    }
    sc_done(&c);
    return g;
}

gram *gram_tool_calls(const json *tools, const char *only_name, int max_calls, gem_err *err) {
    if (!tools || tools->type != JSON_ARRAY) {
        gem_err_set(err, "tools: must be an array");
        return NULL;
    }
    if (max_calls < 0) {
        gem_err_set(err, "tools: max_calls must not be negative");
        return NULL;
    }
    sc_t c;
    sc_init(&c, NULL, GRAM_SYNTAX_GEMMA, err);
    if (!c.b) {
        gem_err_set(err, "grammar: out of memory");
        return NULL;
    }
    gb *b = c.b;
    gram *g = NULL;
    gseq s = {0};
    uint32_t call = gb_rule(b); /* "<|tool_call>call:" NAME ARGS "<tool_call|>" */
    int found = 0;
    for (size_t i = 0; i < tools->len && !c.failed; i++) {
        const json *t = tools->items[i], *fn = t->type == JSON_OBJECT ? json_get(t, "function") : NULL;
        const char *type = t->type == JSON_OBJECT ? json_get_str(t, "type") : NULL;
        path_pop(&c, 0);
        path_push(&c, "tools[%zu]", i);
        if (!fn || fn->type != JSON_OBJECT || (type && strcmp(type, "function"))) {
            sc_fail(&c, "not a function tool");
            break;
        }
        const json *name = json_get(fn, "name");
        if (!name || name->type != JSON_STRING || !name->len) {
            sc_fail(&c, "function.name must be a non-empty string");
            break;
        }
        for (size_t k = 0; k < name->len; k++)
            if (strchr(" \n\t:,{}[]<>|\"", name->str[k]) || !name->str[k]) {
                sc_fail(&c, "function name \"%.60s\" has a character a Gemma call cannot hold", name->str);
                break;
            }
        if (c.failed) break;
        if (only_name && strcmp(only_name, name->str)) continue;
        found = 1;
        const json *params = json_get(fn, "parameters");
        path_push(&c, ".function.parameters");
        const json *pt = params && params->type == JSON_OBJECT ? json_get(params, "type") : NULL;
        if (params && (params->type != JSON_OBJECT || (pt && !(pt->type == JSON_STRING && !strcmp(pt->str, "object"))))) {
            sc_fail(&c, "must be an object schema");
            break;
        }
        c.root = params;
        c.n_refs = 0; /* $refs resolve within this tool's parameters */
        uint32_t args;
        if (!params) args = lit_rule(&c, "{}"); /* OpenAI: no parameters, an empty list */
        else if (params->type == JSON_OBJECT && params->len == 0) args = any_object(&c);
        else args = compile(&c, params);
        if (args == GRAM_NONE) break;
        gs_reset(&s);
        gs_str(b, &s, "<|tool_call>call:");
        gs_lit(b, &s, name->str, name->len);
        gs_ref(&s, args);
        gs_str(b, &s, "<tool_call|>");
        gb_alt(b, call, &s);
    }
    path_pop(&c, 0);
    if (!c.failed && !found) {
        if (only_name) gem_err_set(err, "tools: no function named \"%.80s\"", only_name);
        else gem_err_set(err, "tools: no function tools");
        c.failed = 1;
    }
    if (!c.failed) {
        /* CALL then, up to max_calls in all, more calls; then optionally
         * "<|tool_response>" */
        uint32_t tail = gb_rule(b);
        gs_reset(&s);
        gb_alt(b, tail, &s);
        gs_str(b, &s, "<|tool_response>");
        gb_alt(b, tail, &s);
        uint32_t more;
        if (max_calls == 0) {
            more = gb_rule(b); /* TAIL | CALL MORE */
            gs_reset(&s);
            gs_ref(&s, tail);
            gb_alt(b, more, &s);
            gs_reset(&s);
            gs_ref(&s, call);
            gs_ref(&s, more);
            gb_alt(b, more, &s);
        } else {
            more = tail; /* after the max_calls-th call */
            for (int k = max_calls - 1; k >= 1; k--) {
                uint32_t r = gb_rule(b);
                gs_reset(&s);
                gs_ref(&s, tail);
                gb_alt(b, r, &s);
                gs_reset(&s);
                gs_ref(&s, call);
                gs_ref(&s, more);
                gb_alt(b, r, &s);
                more = r;
            }
        }
        gs_reset(&s);
        gs_ref(&s, call);
        gs_ref(&s, more);
        uint32_t root = gb_rule_seq(b, &s);
        if (gb_failed(b)) gem_err_set(err, "grammar: out of memory");
        else g = gb_finish(b, root, err);
    }
    gs_free(&s);
    sc_done(&c);
    return g;
}
