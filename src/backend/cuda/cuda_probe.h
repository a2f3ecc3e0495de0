/* CUDA device discovery, callable from C.
 *
 * Built only when the CUDA backend is compiled (GEM_CUDA defined); the
 * probe is what `gem devices` reports and what `--backend cuda` will check
 * before anything is uploaded, so a missing or unusable GPU is a clear
 * error rather than a crash or a silent CPU fallback. */
#ifndef GEM_BACKEND_CUDA_PROBE_H
#define GEM_BACKEND_CUDA_PROBE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Number of usable devices (>= 0), or -1 with a reason in why. */
int cuda_probe_count(char *why, size_t cap);

/* One-line description of device i (name, compute capability, memory,
 * clocks). Returns 0, or -1 with a reason in out. */
int cuda_probe_describe(int i, char *out, size_t cap);

#ifdef __cplusplus
}
#endif

#endif
