/* The k-quant members of cpu_kernels (kernels.h): q4_k, q5_k and q6_k rows
 * against activations quantized per 256 values (act_q8k), in portable C
 * and AVX2, and sixteen-row panels for every tile size in AVX512-VNNI.
 * Every variant computes kernels.h's canonical sum exactly, so
 * a variant's results are the portable ones bit for bit; kernels.c calls
 * these while it assembles a variant. */
#ifndef GEM_BACKEND_CPU_KERNELS_K_H
#define GEM_BACKEND_CPU_KERNELS_K_H

#include "backend/cpu/kernels.h"

/* Sets k's k-quant members to the portable kernels. */
void kernels_k_portable(cpu_kernels *k);

/* Sets them to the AVX2 kernels; the caller has checked that the CPU has
 * AVX2, FMA and F16C. No-op on other architectures. */
void kernels_k_avx2(cpu_kernels *k);

/* Adds the AVX512-VNNI multi-row kernels (q4_k_mm, ...) to the AVX2 ones;
 * the caller has checked the CPU. No-op on other architectures. */
void kernels_k_vnni(cpu_kernels *k);

#endif
