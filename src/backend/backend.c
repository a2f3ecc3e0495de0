/* Backend selection by name. No fallback: asking for a backend that is not
 * available is an error naming why. */
#include "backend/backend.h"

#include <string.h>

#include "backend/cpu/cpu.h"
#ifdef GEM_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

backend *backend_create(const char *name, const backend_opts *o, gem_err *err) {
    if (!strcmp(name, "cpu")) return backend_cpu_create(o, err);
    if (!strcmp(name, "cuda")) {
#ifdef GEM_CUDA
        return backend_cuda_create(o, err);
#else
        gem_err_set(err, "backend 'cuda' is not in this build (built without nvcc; the CPU backend is 'cpu')");
        return NULL;
#endif
    }
    gem_err_set(err, "unknown backend '%s' (available: cpu, cuda)", name);
    return NULL;
}
