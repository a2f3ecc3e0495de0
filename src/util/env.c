/* Integer settings from the environment: strict decimal, range-checked,
 * errors that name the variable (see env.h). */
#include "util/env.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h> /* environ (_GNU_SOURCE) */

int env_int(const char *name, long lo, long hi, long dflt, long *out, gem_err *err) {
    *out = dflt;
    const char *v = getenv(name);
    if (!v || !*v) return 0;
    /* strtol alone would take leading blanks, a '+' and trailing junk */
    const char *p = v + (*v == '-');
    int digits = *p >= '0' && *p <= '9';
    char *end = NULL;
    errno = 0;
    const long x = digits ? strtol(v, &end, 10) : 0;
    if (!digits || *end || errno || x < lo || x > hi) {
        if (hi - lo == 1)
            return gem_err_set(err, "%s=%.64s: expected %ld or %ld (unset: %ld)", name, v, lo, hi, dflt);
        return gem_err_set(err, "%s=%.64s: expected an integer from %ld to %ld (unset: %ld)", name, v, lo, hi, dflt);
    }
    *out = x;
    return 0;
}

int env_known(const char *prefix, const char *const *known, int n, gem_err *err) {
    const size_t lp = strlen(prefix);
    for (char **e = environ; e && *e; e++) {
        if (strncmp(*e, prefix, lp)) continue;
        const char *eq = strchr(*e, '=');
        const size_t len = eq ? (size_t)(eq - *e) : strlen(*e);
        int found = 0;
        for (int i = 0; i < n && !found; i++) found = strlen(known[i]) == len && !strncmp(known[i], *e, len);
        if (!found)
            return gem_err_set(err, "unknown setting %.*s in the environment (%s* names: see docs/cuda.md)",
                               (int)(len < 64 ? len : 64), *e, prefix);
    }
    return 0;
}
