/* See err.h. Messages are truncated, never overflowed. */
#include "util/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int gem_err_set(gem_err *err, const char *fmt, ...) {
    if (!err) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return -1;
}

int gem_err_wrap(gem_err *err, const char *fmt, ...) {
    if (!err) return -1;
    char prefix[512];
    char old[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    snprintf(err->msg, sizeof err->msg, "%s: %s", prefix, old);
    return -1;
}
