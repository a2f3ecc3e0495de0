/* Pre-tokenizers (see pretok.h).
 *
 * A word is matched from its first code point with a look-ahead of at most
 * two code points beyond what it consumes, so the splitter is a function
 * "end of the word starting here" and needs no state between words. The
 * alternatives are tried in the regex's order; each comment names the one
 * it implements. Flags come from unicode_tab.h; past the end of the text a
 * code point has no flags, which is what makes "\s+(?!\S)" keep a final
 * run of white space whole. */
#include "tok/pretok.h"

#include <stdint.h>
#include <string.h>

#include "tok/unicode_tab.h"

int pretok_from_name(const char *name, size_t len, pretok_kind *out) {
    if (len == 6 && !memcmp(name, "qwen35", 6)) {
        *out = PRETOK_QWEN35;
        return 0;
    }
    return -1;
}

/* Code point at s[i] (well-formed UTF-8, i < n); *next is the byte after. */
static inline uint32_t cp_at(const unsigned char *s, size_t i, size_t *next) {
    unsigned b = s[i];
    if (b < 0x80) {
        *next = i + 1;
        return b;
    }
    if (b < 0xe0) {
        *next = i + 2;
        return (uint32_t)(b & 0x1f) << 6 | (s[i + 1] & 0x3f);
    }
    if (b < 0xf0) {
        *next = i + 3;
        return (uint32_t)(b & 0x0f) << 12 | (uint32_t)(s[i + 1] & 0x3f) << 6 | (s[i + 2] & 0x3f);
    }
    *next = i + 4;
    return (uint32_t)(b & 0x07) << 18 | (uint32_t)(s[i + 1] & 0x3f) << 12 | (uint32_t)(s[i + 2] & 0x3f) << 6 |
           (s[i + 3] & 0x3f);
}

/* Flags of the code point at i, 0 at the end. */
static inline unsigned flags_at(const unsigned char *s, size_t n, size_t i) {
    if (i >= n) return 0;
    size_t nx;
    return ucd_flags(cp_at(s, i, &nx));
}

static inline uint32_t lower_ascii(uint32_t c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

static size_t qwen35_next(const unsigned char *s, size_t n, size_t pos) {
    size_t p1, p2, p3;
    const uint32_t c0 = cp_at(s, pos, &p1);
    const unsigned f0 = ucd_flags(c0);
    /* (?i:'s|'t|'re|'ve|'m|'ll|'d): only ASCII letters lower-case to these */
    if (c0 == '\'' && p1 < n) {
        const uint32_t c1 = lower_ascii(cp_at(s, p1, &p2));
        if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return p2;
        if (p2 < n) {
            const uint32_t c2 = lower_ascii(cp_at(s, p2, &p3));
            if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return p3;
        }
    }
    const unsigned f1 = flags_at(s, n, p1);
    /* [^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+ */
    if (c0 != '\r' && c0 != '\n' && !(f0 & UCD_NUMBER) && ((f0 | f1) & (UCD_LETTER | UCD_MARK))) {
        size_t p = p1;
        while (p < n) {
            size_t nx;
            if (!(ucd_flags(cp_at(s, p, &nx)) & (UCD_LETTER | UCD_MARK))) break;
            p = nx;
        }
        return p;
    }
    /* \p{N} */
    if (f0 & UCD_NUMBER) return p1;
    /* ' '?[^\s\p{L}\p{M}\p{N}]+[\r\n]* (a lone ' ' at the end also lands
     * here and is one word, as \s+ would make it) */
    const unsigned word = UCD_SPACE | UCD_LETTER | UCD_MARK | UCD_NUMBER;
    if (!((c0 == ' ' ? f1 : f0) & word)) {
        size_t p = c0 == ' ' ? p1 : pos;
        while (p < n) {
            size_t nx;
            if (ucd_flags(cp_at(s, p, &nx)) & word) break;
            p = nx;
        }
        while (p < n && (s[p] == '\r' || s[p] == '\n')) p++;
        return p;
    }
    /* white space: \s*[\r\n]+ takes the run up to its last \r or \n;
     * \s+(?!\S) leaves the run's last code point to the next word when a
     * non-space follows; \s+ takes the rest */
    size_t p = pos, last = pos, last_rn = 0;
    int count = 0;
    while (p < n) {
        size_t nx;
        const uint32_t c = cp_at(s, p, &nx);
        if (!(ucd_flags(c) & UCD_SPACE)) break;
        if (c == '\r' || c == '\n') last_rn = nx;
        last = p;
        p = nx;
        count++;
    }
    if (last_rn) return last_rn;
    if (count > 1 && p < n) return last;
    if (count > 0) return p;
    return p1; /* unreachable for well-formed input: every code point matches above */
}

size_t pretok_next(pretok_kind k, const char *s, size_t n, size_t pos) {
    switch (k) {
    case PRETOK_QWEN35:
    default: return qwen35_next((const unsigned char *)s, n, pos);
    }
}
