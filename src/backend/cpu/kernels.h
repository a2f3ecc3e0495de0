/* Dot products of one stored weight row with f32 activations: the CPU fast
 * path's inner loop. kernels_pick() chooses, once, the best variant the CPU
 * supports (AVX2 + FMA + F16C, else portable C). The portable variants
 * equal the reference dequantize-then-dot; the SIMD ones differ only in
 * summation order (eight lanes, fused multiply-add). */
#ifndef GEM_BACKEND_CPU_KERNELS_H
#define GEM_BACKEND_CPU_KERNELS_H

#include <stdint.h>

typedef float (*dot_fn)(const uint8_t *row, const float *x, int64_t n);
typedef float (*dot_f32_fn)(const float *a, const float *b, int64_t n);

typedef struct {
    const char *name; /* "avx2" or "scalar" */
    dot_fn q8_0, q4_0, f16, f32;
    dot_f32_fn dot;
} cpu_kernels;

/* The variants for this CPU; force_scalar picks the portable ones. */
cpu_kernels kernels_pick(int force_scalar);

#endif
