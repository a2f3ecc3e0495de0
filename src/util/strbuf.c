/* See strbuf.h. */
#include "util/strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int sb_reserve(strbuf *b, size_t extra) {
    if (b->failed) return -1;
    if (b->len + extra + 1 <= b->cap) return 0;
    size_t c = b->cap ? b->cap : 64;
    while (c < b->len + extra + 1) c *= 2;
    char *p = realloc(b->p, c);
    if (!p) {
        b->failed = 1;
        return -1;
    }
    b->p = p;
    b->cap = c;
    return 0;
}

int sb_room(strbuf *b, size_t n) {
    if (b->failed) return -1;
    if (b->len + n + 1 <= b->cap) return 0;
    char *p = realloc(b->p, b->len + n + 1);
    if (!p) {
        b->failed = 1;
        return -1;
    }
    b->p = p;
    b->cap = b->len + n + 1;
    return 0;
}

void sb_put(strbuf *b, const void *p, size_t n) {
    if (!n || sb_reserve(b, n)) return;
    memcpy(b->p + b->len, p, n);
    b->len += n;
    b->p[b->len] = 0;
}

void sb_puts(strbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

void sb_putc(strbuf *b, char c) { sb_put(b, &c, 1); }

void sb_printf(strbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char tmp[256];
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof tmp) {
        sb_put(b, tmp, (size_t)n);
        return;
    }
    if (sb_reserve(b, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

const char *sb_cstr(strbuf *b) { return b->p && !b->failed ? b->p : ""; }

void sb_free(strbuf *b) {
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
    b->failed = 0;
}
