/* Gemma 4's SPM-style BPE ("gemma4" vocabularies; see tok.h and
 * tok_int.h): every ' ' becomes U+2581, the text is read leniently into
 * code points and re-encoded canonically, split into runs of newlines and
 * runs of non-newlines, and each run is merged by BPE rank starting from
 * one symbol per code point. A run of newlines that is itself a token stays
 * whole. A symbol that is not a token falls back to one <0xXX> token per
 * byte. */
#include <stdlib.h>
#include <string.h>

#include "tok/tok_int.h"

static size_t utf8_len_of(unsigned char b) {
    static const uint8_t lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lookup[b >> 4];
}

/* BPE over one run w[0..n) of well-formed text. */
static int bpe_run(const tok *t, const char *w, int32_t n, bpe_scratch *s, tok_ids *out) {
    if (bpe_reserve(s, (size_t)n)) return -1;
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
    if (bpe_merge(t, n, s)) return -1;
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

int tok_spm_encode(const tok *t, const char *text, size_t len, bpe_scratch *s, tok_ids *out) {
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
        size_t k = tok_decode_lenient(p + i, len - i, &cp);
        m += tok_encode_cp(cp, norm + m);
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

void tok_spm_normal_piece(const char *text, size_t len, strbuf *out) {
    for (size_t k = 0; k < len;) {
        if (k + 3 <= len && !memcmp(text + k, "\xe2\x96\x81", 3)) {
            sb_putc(out, ' ');
            k += 3;
        } else {
            sb_putc(out, text[k++]);
        }
    }
}
