/* CUDA device discovery, callable from C: how many devices, what each is,
 * its memory bandwidth. Built only with the CUDA backend (GEM_CUDA); the
 * rest of gem reaches it through the seam's device queries
 * (backend/backend.h: backend_devices, backend_describe, backend_peak_gbs),
 * never by including this header. Nothing here creates a context beyond
 * what the runtime does on its first call, and nothing aborts: a missing
 * or unusable GPU is a reason string, not a crash. */
#ifndef GEM_BACKEND_CUDA_DEVICE_H
#define GEM_BACKEND_CUDA_DEVICE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Number of usable devices (>= 0), or -1 with a reason in why. */
int cuda_device_count(char *why, size_t cap);

/* Memory bandwidth of device i in GB/s for the roofline fraction: the
 * datasheet figure of the cards gem is measured on (H100 SXM 3350, H200
 * 4800), else memory clock x 2 (double data rate) x bus width; 0 when the
 * device cannot be asked. */
double cuda_device_peak_gbs(int i);

/* One-line description of device i (name, compute capability, memory,
 * clocks). Returns 0, or -1 with a reason in out. */
int cuda_device_describe(int i, char *out, size_t cap);

#ifdef __cplusplus
}
#endif

#endif
