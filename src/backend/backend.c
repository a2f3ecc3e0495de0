/* Backend selection by name. No fallback: asking for a backend that is not
 * available is an error naming why. */
#include "backend/backend.h"

#include <string.h>

#include "backend/cpu/cpu.h"

backend *backend_create(const char *name, const backend_opts *o, gem_err *err) {
    if (!strcmp(name, "cpu")) return backend_cpu_create(o, err);
    if (!strcmp(name, "cuda")) {
        gem_err_set(err, "backend 'cuda' has no kernels yet in this build (the CPU backend is 'cpu')");
        return NULL;
    }
    gem_err_set(err, "unknown backend '%s' (available: cpu)", name);
    return NULL;
}
