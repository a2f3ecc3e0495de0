/* Error reporting for every fallible call in gem.
 *
 * A caller owns a gem_err on its stack and passes its address down; the first
 * failure writes a human-readable message naming the file, offset, key or
 * tensor at fault. Functions return 0 / non-NULL on success and -1 / NULL on
 * failure, and never print: printing is the CLI's job. Passing NULL for the
 * error is allowed (the message is dropped). */
#ifndef GEM_UTIL_ERR_H
#define GEM_UTIL_ERR_H

#include <stddef.h>

typedef struct gem_err {
    char msg[1024];
} gem_err;

#if defined(__GNUC__)
#define GEM_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define GEM_PRINTF(a, b)
#endif

/* Always returns -1 so callers can write `return gem_err_set(...)`. */
int gem_err_set(gem_err *err, const char *fmt, ...) GEM_PRINTF(2, 3);

/* Prepends "prefix: " to an already-set message (adds context on the way up). */
int gem_err_wrap(gem_err *err, const char *fmt, ...) GEM_PRINTF(2, 3);

#endif
