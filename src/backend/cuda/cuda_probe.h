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

/* Memory bandwidth of device i in GB/s for the roofline fraction: the
 * datasheet figure of the cards gem is measured on (H100 SXM 3350, H200
 * 4800: ../docs and the anchors quote those), else memory clock x 2 (double
 * data rate) x bus width; 0 when the device cannot be asked. */
double cuda_probe_peak_gbs(int i);

/* One-line description of device i (name, compute capability, memory,
 * clocks). Returns 0, or -1 with a reason in out. */
int cuda_probe_describe(int i, char *out, size_t cap);

#ifdef __cplusplus
}
#endif

#endif
