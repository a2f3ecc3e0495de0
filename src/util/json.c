/* JSON (see json.h). Recursive descent with an explicit depth bound; every
 * read checks the remaining length first. Under json_parse_limited every
 * node is counted before it is allocated, and a candidate packed array is
 * parsed in one pass into exactly sized storage; an element that does not
 * fit (not an integer, outside int32) sends the parse back to the array's
 * start to read it as nodes, so each byte is read at most twice. */
#include "util/json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/utf8.h"

typedef struct {
    const char *s;
    size_t n, pos;
    gem_err *err;
    int depth;
    json_limits *lim; /* NULL: unbounded, nothing packed */
    size_t values;    /* nodes made so far */
    int packing;      /* inside the packed member */
} parser;

static int fail(parser *p, const char *what) {
    return gem_err_set(p->err, "invalid JSON at byte %zu: %s", p->pos, what);
}

static void skip_ws(parser *p) {
    while (p->pos < p->n) {
        char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

json *json_new(json_type t) {
    json *v = calloc(1, sizeof *v);
    if (v) v->type = t;
    return v;
}

void json_free(json *v) {
    if (!v) return;
    free(v->ints);
    for (size_t i = 0; i < v->len && v->items; i++) json_free(v->items[i]);
    if (v->keys)
        for (size_t i = 0; i < v->len; i++) free(v->keys[i]);
    free(v->items);
    free(v->keys);
    free(v->key_lens);
    free(v->str);
    free(v);
}

static int grow(json *c) {
    if (c->len < c->cap) return 0;
    size_t cap = c->cap ? c->cap * 2 : 4;
    json **it = realloc(c->items, cap * sizeof *it);
    if (!it) return -1;
    c->items = it;
    if (c->type == JSON_OBJECT) {
        char **k = realloc(c->keys, cap * sizeof *k);
        if (!k) return -1;
        c->keys = k;
        size_t *kl = realloc(c->key_lens, cap * sizeof *kl);
        if (!kl) return -1;
        c->key_lens = kl;
    }
    c->cap = cap;
    return 0;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int read_hex4(parser *p, uint32_t *out) {
    if (p->n - p->pos < 4) return fail(p, "truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p->s[p->pos + i]);
        if (h < 0) return fail(p, "bad hex digit in \\u escape");
        v = v << 4 | (uint32_t)h;
    }
    p->pos += 4;
    *out = v;
    return 0;
}

static size_t put_utf8(uint32_t cp, char *o) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xc0 | cp >> 6); o[1] = (char)(0x80 | (cp & 0x3f)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | cp >> 12); o[1] = (char)(0x80 | ((cp >> 6) & 0x3f)); o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | cp >> 18); o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f)); o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* Parses a string literal at p->pos (the opening quote). */
static int parse_string(parser *p, char **out, size_t *out_len) {
    p->pos++; /* opening quote */
    size_t start = p->pos;
    /* first pass: find the end and validate raw bytes */
    size_t end = start;
    while (end < p->n && p->s[end] != '"') {
        unsigned char c = (unsigned char)p->s[end];
        if (c < 0x20) {
            p->pos = end;
            return fail(p, "control character in string");
        }
        end += c == '\\' ? 2 : 1;
    }
    if (end >= p->n) {
        p->pos = p->n;
        return fail(p, "unterminated string");
    }
    char *buf = malloc(end - start + 1); /* escapes only shrink */
    if (!buf) return fail(p, "out of memory");
    size_t m = 0;
    while (p->pos < end) {
        char c = p->s[p->pos];
        if (c != '\\') {
            /* copy a run of plain bytes, then validate it as UTF-8 */
            size_t run = p->pos;
            while (run < end && p->s[run] != '\\') run++;
            if (!utf8_valid(p->s + p->pos, run - p->pos)) {
                free(buf);
                return fail(p, "invalid UTF-8 in string");
            }
            memcpy(buf + m, p->s + p->pos, run - p->pos);
            m += run - p->pos;
            p->pos = run;
            continue;
        }
        p->pos++;
        char e = p->s[p->pos++];
        switch (e) {
        case '"': buf[m++] = '"'; break;
        case '\\': buf[m++] = '\\'; break;
        case '/': buf[m++] = '/'; break;
        case 'b': buf[m++] = '\b'; break;
        case 'f': buf[m++] = '\f'; break;
        case 'n': buf[m++] = '\n'; break;
        case 'r': buf[m++] = '\r'; break;
        case 't': buf[m++] = '\t'; break;
        case 'u': {
            uint32_t cp;
            if (read_hex4(p, &cp)) { free(buf); return -1; }
            if (cp >= 0xdc00 && cp <= 0xdfff) { free(buf); return fail(p, "lone low surrogate in \\u escape"); }
            if (cp >= 0xd800 && cp <= 0xdbff) {
                uint32_t lo;
                if (p->pos + 2 > end || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u') {
                    free(buf);
                    return fail(p, "lone high surrogate in \\u escape");
                }
                p->pos += 2;
                if (read_hex4(p, &lo)) { free(buf); return -1; }
                if (lo < 0xdc00 || lo > 0xdfff) { free(buf); return fail(p, "bad surrogate pair in \\u escape"); }
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            }
            m += put_utf8(cp, buf + m);
            break;
        }
        default:
            free(buf);
            p->pos--;
            return fail(p, "bad escape in string");
        }
    }
    p->pos = end + 1;
    buf[m] = 0;
    *out = buf;
    *out_len = m;
    return 0;
}

/* Reads the number at p->pos (p->pos past it): its value and whether it
 * has a fraction or exponent; *start and *len delimit its literal. No
 * allocation unless the literal is over 63 bytes. */
static int scan_number(parser *p, double *num, int *has_frac, size_t *start_out, size_t *len_out) {
    size_t start = p->pos, i = p->pos;
    int frac = 0;
    if (i < p->n && p->s[i] == '-') i++;
    if (i >= p->n) return fail(p, "truncated number");
    if (p->s[i] == '0') {
        i++;
    } else if (p->s[i] >= '1' && p->s[i] <= '9') {
        while (i < p->n && p->s[i] >= '0' && p->s[i] <= '9') i++;
    } else {
        return fail(p, "bad number");
    }
    if (i < p->n && p->s[i] == '.') {
        frac = 1;
        i++;
        if (i >= p->n || p->s[i] < '0' || p->s[i] > '9') { p->pos = i; return fail(p, "digit expected after '.'"); }
        while (i < p->n && p->s[i] >= '0' && p->s[i] <= '9') i++;
    }
    if (i < p->n && (p->s[i] == 'e' || p->s[i] == 'E')) {
        frac = 1;
        i++;
        if (i < p->n && (p->s[i] == '+' || p->s[i] == '-')) i++;
        if (i >= p->n || p->s[i] < '0' || p->s[i] > '9') { p->pos = i; return fail(p, "digit expected in exponent"); }
        while (i < p->n && p->s[i] >= '0' && p->s[i] <= '9') i++;
    }
    char tmp[64];
    size_t len = i - start;
    char *heap = NULL, *txt = tmp;
    if (len >= sizeof tmp) {
        heap = malloc(len + 1);
        if (!heap) return fail(p, "out of memory");
        txt = heap;
    }
    memcpy(txt, p->s + start, len);
    txt[len] = 0;
    *num = strtod(txt, NULL);
    free(heap);
    *has_frac = frac;
    *start_out = start;
    *len_out = len;
    p->pos = i;
    return 0;
}

static int parse_number(parser *p, json *v) {
    size_t start, len;
    if (scan_number(p, &v->num, &v->num_frac, &start, &len)) return -1;
    /* the literal, for renderers that print numbers as another language
     * parsed them (Python: an integer keeps its digits, 1.0 stays a float) */
    v->str = malloc(len + 1);
    if (!v->str) return fail(p, "out of memory");
    memcpy(v->str, p->s + start, len);
    v->str[len] = 0;
    v->is_int = isfinite(v->num) && v->num == floor(v->num) && fabs(v->num) <= 9.2e18; /* < 2^63: an int64 */
    return 0;
}

static json *parse_value(parser *p);

static int sort_and_dedupe(json *o);

/* A new node, counted against the value budget. */
static json *node(parser *p, json_type t) {
    if (p->lim && p->lim->max_values && ++p->values > p->lim->max_values) {
        p->lim->over = 1;
        fail(p, "too many values");
        return NULL;
    }
    json *v = json_new(t);
    if (!v) fail(p, "out of memory");
    return v;
}

/* The array at p->pos as packed int32s (p->pos past it): 1 when packed,
 * 0 when an element is not an integer literal (no fraction or exponent:
 * a renderer would print 1.0 otherwise than 1) in the int32 range, or
 * the array is empty or malformed (the node parse then reports it), with
 * p->pos unchanged; -1 out of memory. */
static int parse_packed(parser *p, json *v) {
    const size_t start = p->pos;
    /* elements: at most one more than the commas before the first ']'
     * (a ']' inside a string ends the count early, but a string is no
     * integer: the array is not packed then) */
    const char *close = memchr(p->s + p->pos, ']', p->n - p->pos);
    if (!close) return 0;
    size_t cap = 1;
    for (const char *q = p->s + p->pos; q < close; q++) cap += *q == ',';
    p->pos++;
    skip_ws(p);
    if (p->pos < p->n && p->s[p->pos] == ']') goto not_packed;
    int32_t *ints = malloc(cap * sizeof *ints);
    if (!ints) {
        fail(p, "out of memory");
        return -1;
    }
    size_t n = 0;
    for (;;) {
        skip_ws(p);
        if (p->pos >= p->n || !(p->s[p->pos] == '-' || (p->s[p->pos] >= '0' && p->s[p->pos] <= '9'))) break;
        double num;
        int frac;
        size_t at, len;
        if (scan_number(p, &num, &frac, &at, &len) || frac || !(num >= INT32_MIN && num <= INT32_MAX) || n == cap) break;
        ints[n++] = (int32_t)num;
        skip_ws(p);
        if (p->pos < p->n && p->s[p->pos] == ',') {
            p->pos++;
            continue;
        }
        if (p->pos < p->n && p->s[p->pos] == ']') {
            p->pos++;
            v->ints = ints;
            v->len = n;
            return 1;
        }
        break;
    }
    free(ints);
not_packed:
    p->pos = start;
    return 0;
}

static json *parse_value(parser *p) {
    skip_ws(p);
    if (p->pos >= p->n) {
        fail(p, "unexpected end of input");
        return NULL;
    }
    char c = p->s[p->pos];
    json *v = NULL;
    if (c == '{' || c == '[') {
        if (++p->depth > JSON_MAX_DEPTH) {
            fail(p, "nesting too deep");
            return NULL;
        }
        int obj = c == '{';
        v = node(p, obj ? JSON_OBJECT : JSON_ARRAY);
        if (!v) return NULL;
        if (!obj && p->packing) {
            const int k = parse_packed(p, v);
            if (k) {
                p->depth--;
                if (k > 0) return v;
                json_free(v);
                return NULL;
            }
        }
        p->pos++;
        skip_ws(p);
        if (p->pos < p->n && p->s[p->pos] == (obj ? '}' : ']')) {
            p->pos++;
            p->depth--;
            return v;
        }
        for (;;) {
            char *key = NULL;
            size_t klen = 0;
            if (obj) {
                skip_ws(p);
                if (p->pos >= p->n || p->s[p->pos] != '"') { fail(p, "object key expected"); goto bad; }
                if (parse_string(p, &key, &klen)) goto bad;
                skip_ws(p);
                if (p->pos >= p->n || p->s[p->pos] != ':') { free(key); fail(p, "':' expected"); goto bad; }
                p->pos++;
            }
            /* the packed member: a value of the top-level object by that name */
            const int was_packing = p->packing;
            if (obj && p->depth == 1 && p->lim && p->lim->packed_member &&
                klen == strlen(p->lim->packed_member) && !memcmp(key, p->lim->packed_member, klen))
                p->packing = 1;
            json *item = parse_value(p);
            p->packing = was_packing;
            if (!item || grow(v)) {
                if (item) fail(p, "out of memory");
                json_free(item);
                free(key);
                goto bad;
            }
            if (obj) {
                v->keys[v->len] = key;
                v->key_lens[v->len] = klen;
            }
            v->items[v->len++] = item;
            skip_ws(p);
            if (p->pos >= p->n) { fail(p, obj ? "unterminated object" : "unterminated array"); goto bad; }
            char d = p->s[p->pos++];
            if (d == ',') continue;
            if (d == (obj ? '}' : ']')) break;
            p->pos--;
            fail(p, obj ? "',' or '}' expected" : "',' or ']' expected");
            goto bad;
        }
        p->depth--;
        if (obj && sort_and_dedupe(v)) { fail(p, "out of memory"); goto bad; }
        return v;
    bad:
        json_free(v);
        return NULL;
    }
    if (c == '"') {
        v = node(p, JSON_STRING);
        if (!v) return NULL;
        if (parse_string(p, &v->str, &v->len)) {
            v->len = 0;
            json_free(v);
            return NULL;
        }
        return v;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        v = node(p, JSON_NUMBER);
        if (!v || parse_number(p, v)) { json_free(v); return NULL; }
        return v;
    }
    static const struct { const char *lit; json_type t; int b; } lits[] = {
        {"true", JSON_BOOL, 1}, {"false", JSON_BOOL, 0}, {"null", JSON_NULL, 0}};
    for (int i = 0; i < 3; i++) {
        size_t l = strlen(lits[i].lit);
        if (p->n - p->pos >= l && !memcmp(p->s + p->pos, lits[i].lit, l)) {
            p->pos += l;
            v = node(p, lits[i].t);
            if (v) v->boolean = lits[i].b;
            return v;
        }
    }
    fail(p, "unexpected character");
    return NULL;
}

/* Duplicate keys: keep the first position, take the last value. Linear for
 * small objects; large ones go through a sorted index (no quadratic time on
 * hostile input). */
static int key_cmp_idx(const json *o, size_t a, size_t b) {
    size_t la = o->key_lens[a], lb = o->key_lens[b];
    int c = memcmp(o->keys[a], o->keys[b], la < lb ? la : lb);
    if (c) return c;
    if (la != lb) return la < lb ? -1 : 1;
    return a < b ? -1 : a > b;
}

static void msort(const json *o, size_t *idx, size_t *tmp, size_t n) {
    if (n < 2) return;
    size_t h = n / 2;
    msort(o, idx, tmp, h);
    msort(o, idx + h, tmp, n - h);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) tmp[k++] = key_cmp_idx(o, idx[i], idx[j]) <= 0 ? idx[i++] : idx[j++];
    while (i < h) tmp[k++] = idx[i++];
    while (j < n) tmp[k++] = idx[j++];
    memcpy(idx, tmp, n * sizeof *idx);
}

static int sort_and_dedupe(json *o) {
    if (o->len < 2) return 0;
    size_t n = o->len;
    size_t *idx = malloc(n * sizeof *idx), *tmp = malloc(n * sizeof *tmp);
    char *drop = calloc(n, 1);
    if (!idx || !tmp || !drop) { free(idx); free(tmp); free(drop); return -1; }
    for (size_t i = 0; i < n; i++) idx[i] = i;
    msort(o, idx, tmp, n);
    int any = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && o->key_lens[idx[j]] == o->key_lens[idx[i]] &&
               !memcmp(o->keys[idx[j]], o->keys[idx[i]], o->key_lens[idx[i]]))
            j++;
        if (j - i > 1) { /* idx[i] is the first occurrence, idx[j-1] the last */
            any = 1;
            size_t first = idx[i], last = idx[j - 1];
            json *keep = o->items[last];
            o->items[last] = o->items[first];
            o->items[first] = keep;
            for (size_t k = i + 1; k < j; k++) drop[idx[k]] = 1;
        }
        i = j;
    }
    if (any) {
        size_t w = 0;
        for (size_t r = 0; r < n; r++) {
            if (drop[r]) {
                json_free(o->items[r]);
                free(o->keys[r]);
                continue;
            }
            o->items[w] = o->items[r];
            o->keys[w] = o->keys[r];
            o->key_lens[w] = o->key_lens[r];
            w++;
        }
        o->len = w;
    }
    free(idx);
    free(tmp);
    free(drop);
    return 0;
}

json *json_parse(const char *s, size_t n, gem_err *err) { return json_parse_limited(s, n, NULL, err); }

json *json_parse_limited(const char *s, size_t n, json_limits *lim, gem_err *err) {
    if (lim) lim->over = 0;
    parser p = {s, n, 0, err, 0, lim, 0, 0};
    json *v = parse_value(&p);
    if (!v) return NULL;
    skip_ws(&p);
    if (p.pos != n) {
        fail(&p, "trailing characters after the value");
        json_free(v);
        return NULL;
    }
    return v;
}

json *json_get(const json *o, const char *key) {
    if (!o || o->type != JSON_OBJECT) return NULL;
    size_t kl = strlen(key);
    for (size_t i = 0; i < o->len; i++)
        if (o->key_lens[i] == kl && !memcmp(o->keys[i], key, kl)) return o->items[i];
    return NULL;
}

json *json_at(const json *a, size_t i) {
    if (!a || (a->type != JSON_ARRAY && a->type != JSON_OBJECT) || i >= a->len || !a->items) return NULL;
    return a->items[i];
}

const char *json_get_str(const json *o, const char *key) {
    json *v = json_get(o, key);
    return v && v->type == JSON_STRING ? v->str : NULL;
}

int json_truthy(const json *v) {
    if (!v) return 0;
    switch (v->type) {
    case JSON_NULL: return 0;
    case JSON_BOOL: return v->boolean;
    case JSON_NUMBER: return v->num != 0;
    case JSON_STRING: return v->len > 0;
    default: return v->len > 0;
    }
}

json *json_new_str(const char *s, size_t n) {
    json *v = json_new(JSON_STRING);
    if (!v) return NULL;
    v->str = malloc(n + 1);
    if (!v->str) { free(v); return NULL; }
    memcpy(v->str, s, n);
    v->str[n] = 0;
    v->len = n;
    return v;
}

json *json_new_num(double d) {
    json *v = json_new(JSON_NUMBER);
    if (v) {
        v->num = d;
        v->is_int = isfinite(d) && d == floor(d) && fabs(d) <= 9.2e18;
    }
    return v;
}

json *json_new_bool(int b) {
    json *v = json_new(JSON_BOOL);
    if (v) v->boolean = b != 0;
    return v;
}

int json_push(json *a, json *v) {
    if (!v || grow(a)) { json_free(v); return -1; }
    a->items[a->len++] = v;
    return 0;
}

int json_set(json *o, const char *key, json *v) {
    if (!v) return -1;
    size_t kl = strlen(key);
    for (size_t i = 0; i < o->len; i++) {
        if (o->key_lens[i] == kl && !memcmp(o->keys[i], key, kl)) {
            json_free(o->items[i]);
            o->items[i] = v;
            return 0;
        }
    }
    char *k = malloc(kl + 1);
    if (!k || grow(o)) { free(k); json_free(v); return -1; }
    memcpy(k, key, kl + 1);
    o->keys[o->len] = k;
    o->key_lens[o->len] = kl;
    o->items[o->len++] = v;
    return 0;
}

void json_quote(const char *s, size_t n, strbuf *out) {
    sb_putc(out, '"');
    size_t run = 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char ubuf[8];
        size_t adv = 1;
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default:
            if (c < 0x20) {
                snprintf(ubuf, sizeof ubuf, "\\u%04x", c);
                esc = ubuf;
            } else if (c >= 0x80) {
                /* keep valid UTF-8; an invalid byte becomes U+FFFD so the
                 * output is always valid JSON (model text can hold any byte) */
                size_t l = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;
                if (i + l <= n && utf8_valid(s + i, l)) adv = l;
                else esc = "\\ufffd";
            }
        }
        if (esc) {
            sb_put(out, s + run, i - run);
            sb_puts(out, esc);
            run = i + 1;
        }
        i += adv;
    }
    sb_put(out, s + run, n - run);
    sb_putc(out, '"');
}

/* The shortest decimal digits that read back as d (finite, nonzero):
 * d = 0.DIGITS * 10^point; returns the digit count. */
static int shortest_digits(double d, char digits[24], int *point, int *neg) {
    char buf[40];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, d);
        if (strtod(buf, NULL) == d) break;
    }
    /* buf = [-]D.DDDDe[+-]XX: collect digits and exponent */
    int nd = 0;
    *neg = buf[0] == '-';
    const char *q = buf + *neg;
    for (; *q && *q != 'e'; q++)
        if (*q >= '0' && *q <= '9') digits[nd++] = *q;
    int e = atoi(q + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    *point = e + 1;
    return nd;
}

void json_num_js(double d, strbuf *out) {
    if (!isfinite(d)) {
        sb_puts(out, isnan(d) ? "NaN" : d > 0 ? "Infinity" : "-Infinity");
        return;
    }
    if (d == 0) {
        sb_putc(out, '0');
        return;
    }
    char digits[24];
    int point, neg, nd = shortest_digits(d, digits, &point, &neg);
    if (neg) sb_putc(out, '-');
    if (point > 21 || point < -5) { /* JS switches to exponent notation here */
        sb_putc(out, digits[0]);
        if (nd > 1) {
            sb_putc(out, '.');
            sb_put(out, digits + 1, (size_t)nd - 1);
        }
        sb_printf(out, "e%c%d", point - 1 >= 0 ? '+' : '-', abs(point - 1));
    } else if (point <= 0) {
        sb_puts(out, "0.");
        for (int i = 0; i < -point; i++) sb_putc(out, '0');
        sb_put(out, digits, (size_t)nd);
    } else if (point >= nd) {
        sb_put(out, digits, (size_t)nd);
        for (int i = nd; i < point; i++) sb_putc(out, '0');
    } else {
        sb_put(out, digits, (size_t)point);
        sb_putc(out, '.');
        sb_put(out, digits + point, (size_t)(nd - point));
    }
}


/* Python's repr(float): shortest digits, exponent form (two digits at
 * least) when the point falls before -4 or after 16 digits, otherwise
 * fixed with ".0" for an integral value. */
void json_num_py(double d, strbuf *out) {
    if (!isfinite(d)) {
        sb_puts(out, isnan(d) ? "NaN" : d > 0 ? "Infinity" : "-Infinity");
        return;
    }
    if (d == 0) {
        sb_puts(out, signbit(d) ? "-0.0" : "0.0");
        return;
    }
    char digits[24];
    int point, neg, nd = shortest_digits(d, digits, &point, &neg);
    if (neg) sb_putc(out, '-');
    if (point > 16 || point < -3) {
        sb_putc(out, digits[0]);
        if (nd > 1) {
            sb_putc(out, '.');
            sb_put(out, digits + 1, (size_t)nd - 1);
        }
        sb_printf(out, "e%c%02d", point - 1 >= 0 ? '+' : '-', abs(point - 1));
    } else if (point <= 0) {
        sb_puts(out, "0.");
        for (int i = 0; i < -point; i++) sb_putc(out, '0');
        sb_put(out, digits, (size_t)nd);
    } else if (point >= nd) {
        sb_put(out, digits, (size_t)nd);
        for (int i = nd; i < point; i++) sb_putc(out, '0');
        sb_puts(out, ".0");
    } else {
        sb_put(out, digits, (size_t)point);
        sb_putc(out, '.');
        sb_put(out, digits + point, (size_t)(nd - point));
    }
}

/* A number as Python prints what json.loads made of it: an integer literal
 * as its digits ("-0" is 0), anything else as a float. */
static void num_py(const json *v, strbuf *out) {
    if (v->str && !v->num_frac) {
        sb_puts(out, strcmp(v->str, "-0") ? v->str : "0");
    } else if (!v->str && v->is_int) {
        sb_printf(out, "%lld", (long long)v->num);
    } else {
        json_num_py(v->num, out);
    }
}

void json_str_py(const json *v, strbuf *out) {
    if (!v || v->type == JSON_NULL) sb_puts(out, "None");
    else if (v->type == JSON_BOOL) sb_puts(out, v->boolean ? "True" : "False");
    else if (v->type == JSON_NUMBER) num_py(v, out);
    else if (v->type == JSON_STRING) sb_put(out, v->str, v->len);
    else json_dump_py(v, out);
}

/* json.dumps' string escapes with ensure_ascii=False: quote, backslash and
 * control characters; everything else as it is. */
static void quote_py(const char *s, size_t n, strbuf *out) {
    sb_putc(out, '"');
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        sb_put(out, s + run, i - run);
        run = i + 1;
        switch (c) {
        case '"': sb_puts(out, "\\\""); break;
        case '\\': sb_puts(out, "\\\\"); break;
        case '\n': sb_puts(out, "\\n"); break;
        case '\r': sb_puts(out, "\\r"); break;
        case '\t': sb_puts(out, "\\t"); break;
        case '\b': sb_puts(out, "\\b"); break;
        case '\f': sb_puts(out, "\\f"); break;
        default: sb_printf(out, "\\u%04x", c); break;
        }
    }
    sb_put(out, s + run, n - run);
    sb_putc(out, '"');
}

void json_dump_py(const json *v, strbuf *out) {
    if (!v) {
        sb_puts(out, "null");
        return;
    }
    switch (v->type) {
    case JSON_NULL: sb_puts(out, "null"); break;
    case JSON_BOOL: sb_puts(out, v->boolean ? "true" : "false"); break;
    case JSON_NUMBER:
        if (isfinite(v->num) || (v->str && !v->num_frac)) num_py(v, out);
        else sb_puts(out, isnan(v->num) ? "NaN" : v->num > 0 ? "Infinity" : "-Infinity");
        break;
    case JSON_STRING: quote_py(v->str, v->len, out); break;
    case JSON_ARRAY:
        sb_putc(out, '[');
        for (size_t i = 0; i < v->len; i++) {
            if (i) sb_puts(out, ", ");
            if (v->ints) sb_printf(out, "%d", (int)v->ints[i]);
            else json_dump_py(v->items[i], out);
        }
        sb_putc(out, ']');
        break;
    case JSON_OBJECT:
        sb_putc(out, '{');
        for (size_t i = 0; i < v->len; i++) {
            if (i) sb_puts(out, ", ");
            quote_py(v->keys[i], v->key_lens[i], out);
            sb_puts(out, ": ");
            json_dump_py(v->items[i], out);
        }
        sb_putc(out, '}');
        break;
    }
}

void json_dump(const json *v, strbuf *out) {
    if (!v) {
        sb_puts(out, "null");
        return;
    }
    switch (v->type) {
    case JSON_NULL: sb_puts(out, "null"); break;
    case JSON_BOOL: sb_puts(out, v->boolean ? "true" : "false"); break;
    case JSON_NUMBER:
        if (isfinite(v->num)) json_num_js(v->num, out);
        else sb_puts(out, "null");
        break;
    case JSON_STRING: json_quote(v->str, v->len, out); break;
    case JSON_ARRAY:
        sb_putc(out, '[');
        for (size_t i = 0; i < v->len; i++) {
            if (i) sb_putc(out, ',');
            if (v->ints) sb_printf(out, "%d", (int)v->ints[i]);
            else json_dump(v->items[i], out);
        }
        sb_putc(out, ']');
        break;
    case JSON_OBJECT:
        sb_putc(out, '{');
        for (size_t i = 0; i < v->len; i++) {
            if (i) sb_putc(out, ',');
            json_quote(v->keys[i], v->key_lens[i], out);
            sb_putc(out, ':');
            json_dump(v->items[i], out);
        }
        sb_putc(out, '}');
        break;
    }
}
