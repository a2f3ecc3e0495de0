/* Backend selection by name, and the device queries every backend name
 * answers. No fallback: asking for a backend that is not available is an
 * error naming why. */
#include "backend/backend.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "backend/cpu/cpu.h"
#include "backend/shard/shard.h"
#ifdef GEM_CUDA
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_device.h"
#endif

int backend_run_recorded(backend *b, be_graph **g, void (*fn)(void *ctx), void *ctx, gem_err *err) {
    if (!b->capture) {
        fn(ctx);
        return 0;
    }
    if (*g && b->replay(b, *g) == 0) return 0;
    if (*g) b->graph_free(b, *g);
    *g = b->capture(b, fn, ctx, err);
    return *g ? 0 : -1;
}

int be_shard_units(uint32_t units, int G, int s, uint32_t *first, uint32_t *count) {
    if (G < 1 || s < 0 || s >= G || units < 1) return -1;
    if (units % (uint32_t)G == 0) {
        *count = units / (uint32_t)G;
        *first = (uint32_t)s * *count;
        return 0;
    }
    if ((uint32_t)G % units == 0) {
        *count = 1;
        *first = (uint32_t)s / ((uint32_t)G / units);
        return 0;
    }
    return -1;
}

#define CUDA_NOT_BUILT "not in this build (built without nvcc; the CPU backend is 'cpu')"

static int is_cpu(const char *name) { return !strcmp(name, "cpu") || !strcmp(name, "cpu-ref"); }

backend *backend_create(const char *name, const backend_opts *o, gem_err *err) {
    if (o && o->shards > 1) return backend_shard_create(name, o, err);
    if (!strcmp(name, "cpu")) return backend_cpu_create(o, err);
    if (!strcmp(name, "cuda")) {
#ifdef GEM_CUDA
        return backend_cuda_create(o, err);
#else
        gem_err_set(err, "backend 'cuda' is " CUDA_NOT_BUILT);
        return NULL;
#endif
    }
    gem_err_set(err, "unknown backend '%s' (available: cpu, cuda)", name);
    return NULL;
}

int backend_devices(const char *name, int *built, gem_err *err) {
    if (built) *built = 0;
    if (is_cpu(name)) {
        if (built) *built = 1;
        return 1;
    }
    if (!strcmp(name, "cuda")) {
#ifdef GEM_CUDA
        if (built) *built = 1;
        char why[256];
        const int n = cuda_device_count(why, sizeof why);
        if (n < 0) gem_err_set(err, "%s", why);
        return n;
#else
        gem_err_set(err, CUDA_NOT_BUILT);
        return -1;
#endif
    }
    gem_err_set(err, "unknown backend '%s' (available: cpu, cuda)", name);
    return -1;
}

/* The CPU's model name (/proc/cpuinfo) and online cores. */
static void cpu_describe(char *out, size_t cap) {
    char line[256], model[200] = "unknown CPU";
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f)) {
        const char *c = strchr(line, ':');
        if (!strncmp(line, "model name", 10) && c) {
            snprintf(model, sizeof model, "%s", c + 2);
            model[strcspn(model, "\n")] = 0;
            break;
        }
    }
    if (f) fclose(f);
    snprintf(out, cap, "%s, %ld online cores", model, sysconf(_SC_NPROCESSORS_ONLN));
}

int backend_describe(const char *name, int i, char *out, size_t cap) {
    if (is_cpu(name) && i == 0) {
        cpu_describe(out, cap);
        return 0;
    }
#ifdef GEM_CUDA
    if (!strcmp(name, "cuda")) return cuda_device_describe(i, out, cap);
#endif
    snprintf(out, cap, "backend '%s' has no device %d here", name, i);
    return -1;
}

double backend_peak_gbs(const char *name, int i) {
#ifdef GEM_CUDA
    if (!strcmp(name, "cuda")) return cuda_device_peak_gbs(i);
#endif
    (void)name, (void)i;
    return 0;
}
