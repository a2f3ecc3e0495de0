/* Integer settings read from the environment (the CUDA backend's kernel
 * choices for measurements, GEM_CUDA_*).
 *
 * A setting that is unset or empty takes its default; any other value must
 * be a plain decimal integer within the setting's range, or the caller gets
 * an error naming the variable, the value and what it accepts: a typo in a
 * measurement switch must not silently measure the defaults. */
#ifndef GEM_UTIL_ENV_H
#define GEM_UTIL_ENV_H

#include "util/err.h"

/* *out = the value of name in [lo, hi], or dflt when unset or empty.
 * 0 on success; -1 with err set (and *out = dflt) otherwise. */
int env_int(const char *name, long lo, long hi, long dflt, long *out, gem_err *err);

/* 0 when every variable whose name starts with prefix is one of the n names
 * in known; -1 with err naming the first other one (a misspelt setting,
 * e.g. GEM_CUDA_MV_SPLT=0, would otherwise leave the default in place). */
int env_known(const char *prefix, const char *const *known, int n, gem_err *err);

#endif
