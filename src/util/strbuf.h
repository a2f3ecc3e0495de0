/* A growable byte string. Appends never fail silently: on allocation
 * failure the buffer is marked failed, further appends are ignored, and
 * the owner checks sb.failed once at the end. */
#ifndef GEM_UTIL_STRBUF_H
#define GEM_UTIL_STRBUF_H

#include <stddef.h>

#include "util/err.h"

typedef struct {
    char *p; /* NUL-terminated when len > 0 or after sb_cstr */
    size_t len, cap;
    int failed;
} strbuf;

void sb_put(strbuf *b, const void *p, size_t n);
/* Room for n more bytes; a buffer that must grow for them gets exactly
 * that capacity (no doubling: for a size known in advance, such as a
 * request body). 0, or -1 (and failed) when out of memory. */
int sb_room(strbuf *b, size_t n);
void sb_puts(strbuf *b, const char *s);
void sb_putc(strbuf *b, char c);
void sb_printf(strbuf *b, const char *fmt, ...) GEM_PRINTF(2, 3);
const char *sb_cstr(strbuf *b); /* "" for an empty buffer */
void sb_free(strbuf *b);

#endif
