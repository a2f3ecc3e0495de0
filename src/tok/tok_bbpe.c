/* GPT-2-style byte-level BPE ("gpt2" vocabularies; see tok.h and
 * tok_int.h).
 *
 * Token texts spell bytes in GPT-2's byte-to-unicode alphabet: the
 * printable bytes 0x21-0x7E, 0xA1-0xAC and 0xAE-0xFF stand for themselves,
 * the other 68 bytes become U+0100.. in byte order. A fragment of text is
 * read leniently into code points and re-encoded canonically (what the
 * reference does to its input), cut into words by the vocabulary's
 * pre-tokenizer (pretok.h), and each word is merged by BPE rank starting
 * from one symbol per byte. The alphabet is never materialised: the symbol
 * of byte b is the token of b's mapped character (byte_sym), and merges
 * work on ids. A symbol that is not a token (a vocabulary without some
 * byte's character, or a merge whose result is missing) is emitted as the
 * reference does: each byte of its mapped text looked up as a one-byte
 * token, those that exist. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok/tok_int.h"

/* Whether byte b stands for itself in the alphabet. */
static int byte_is_self(unsigned b) { return (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae; }

/* The code point that spells byte b: the 68 other bytes are 0x00-0x20,
 * 0x7F-0xA0 and 0xAD, numbered from U+0100 in that order. */
static uint32_t byte_to_cp(unsigned b) {
    if (byte_is_self(b)) return b;
    if (b <= 0x20) return 256 + b;
    if (b <= 0xa0) return 256 + 33 + (b - 0x7f);
    return 256 + 67; /* 0xAD */
}

/* The byte a code point spells, or -1. */
static int cp_to_byte(uint32_t cp) {
    if (cp < 256) return byte_is_self(cp) ? (int)cp : -1;
    if (cp >= 256 + 68) return -1;
    const uint32_t n = cp - 256;
    if (n < 33) return (int)n;
    if (n < 67) return (int)(0x7f + n - 33);
    return 0xad;
}

void tok_bbpe_init(tok *t) {
    for (unsigned b = 0; b < 256; b++) {
        char u[4];
        size_t n = tok_encode_cp(byte_to_cp(b), u);
        t->byte_sym[b] = tok_find(t, u, n);
        t->byte_fb[b][0] = t->byte_fb[b][1] = -1;
        for (size_t k = 0; k < n && k < 2; k++) t->byte_fb[b][k] = tok_find(t, u + k, 1);
    }
}

static int emit_fallback(const tok *t, const unsigned char *w, int32_t n, tok_ids *out) {
    for (int32_t k = 0; k < n; k++)
        for (int j = 0; j < 2; j++)
            if (t->byte_fb[w[k]][j] >= 0 && tok_ids_push(out, t->byte_fb[w[k]][j])) return -1;
    return 0;
}

/* BPE over one word w[0..n). */
static int bpe_word(const tok *t, const unsigned char *w, int32_t n, bpe_scratch *s, tok_ids *out) {
    if (n == 1) {
        int32_t id = t->byte_sym[w[0]];
        return id >= 0 ? tok_ids_push(out, id) : emit_fallback(t, w, 1, out);
    }
    if (bpe_reserve(s, (size_t)n)) return -1;
    for (int32_t i = 0; i < n; i++) {
        s->id[i] = t->byte_sym[w[i]];
        s->len[i] = 1;
        s->prev[i] = i - 1;
    }
    if (bpe_merge(t, n, s)) return -1;
    for (int32_t i = 0; i < n; i += s->len[i]) {
        if (s->id[i] >= 0) {
            if (tok_ids_push(out, s->id[i])) return -1;
        } else if (emit_fallback(t, w + i, s->len[i], out)) {
            return -1;
        }
    }
    return 0;
}

int tok_bbpe_encode(const tok *t, const char *text, size_t len, bpe_scratch *s, tok_ids *out) {
    if (len == 0) return 0;
    if (len > (size_t)INT32_MAX / 4) return -1;
    /* an invalid byte grows to 3 (U+FFFD); everything else keeps its length or shrinks */
    char *norm = malloc(len * 3);
    if (!norm) return -1;
    size_t m = 0;
    const unsigned char *p = (const unsigned char *)text;
    for (size_t i = 0; i < len;) {
        if (p[i] < 0x80) {
            norm[m++] = (char)p[i++];
            continue;
        }
        uint32_t cp;
        size_t k = tok_decode_lenient(p + i, len - i, &cp);
        m += tok_encode_cp(cp, norm + m);
        i += k;
    }
    int rc = 0;
    for (size_t pos = 0; pos < m && !rc;) {
        size_t end = pretok_next(t->pre, norm, m, pos);
        rc = bpe_word(t, (const unsigned char *)norm + pos, (int32_t)(end - pos), s, out);
        pos = end;
    }
    free(norm);
    return rc;
}

void tok_bbpe_normal_piece(const char *text, size_t len, strbuf *out) {
    const unsigned char *p = (const unsigned char *)text;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t k = tok_decode_lenient(p + i, len - i, &cp);
        int b = cp_to_byte(cp);
        if (b >= 0) {
            sb_putc(out, (char)b);
        } else {
            /* as the reference renders a character outside the alphabet:
             * its UTF-8 in hex, then the whole token text */
            char u[4];
            size_t n = tok_encode_cp(cp, u);
            sb_puts(out, "[UNK_BYTE_0x");
            for (size_t j = 0; j < n; j++) sb_printf(out, "%02x", (unsigned char)u[j]);
            sb_put(out, text, len);
            sb_putc(out, ']');
        }
        i += k;
    }
}
