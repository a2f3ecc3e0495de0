/* UTF-8 validation shared by every parser (GGUF keys, JSON strings). */
#ifndef GEM_UTIL_UTF8_H
#define GEM_UTIL_UTF8_H

#include <stdint.h>

/* 1 when the bytes are valid UTF-8: no overlong forms, no surrogates,
 * nothing above U+10FFFF, no truncated sequence. */
int utf8_valid(const char *s, uint64_t len);

#endif
