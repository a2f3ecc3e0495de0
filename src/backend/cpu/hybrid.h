/* The CPU kernels of the Gated DeltaNet hybrids' ops (backend.h: conv_silu,
 * gated_delta, ...), on plain float arrays; cpu.c wires them into the seam
 * and splits them over its worker pool. Each kernel is one unit of work
 * (a row range or one V head), computed alone, so the split never changes
 * a result. The dot and axpy are the backend's: the scalar ones on the
 * reference path, SIMD on the fast path. */
#ifndef GEM_BACKEND_CPU_HYBRID_H
#define GEM_BACKEND_CPU_HYBRID_H

#include <stddef.h>
#include <stdint.h>

#include "backend/cpu/kernels.h"

#define HYB_CONV_K 4
/* Tokens per chunk of the chunked delta rule: the reference's (llama.cpp
 * CS=64, transformers chunk_size=64). */
#define HYB_CHUNK 64

float hyb_silu(float x);
float hyb_sigmoid(float x);
float hyb_softplus(float x); /* log(1 + e^x), x above 20 returned as is (torch's threshold) */

/* conv_silu for channels [c0, c1). */
void hyb_conv_silu(const float *x, float *state, const float *w, int n, int ch, int c0, int c1, float *out);

typedef struct {
    const float *qkv, *alpha, *beta, *a, *dt;
    float *state, *out;
    int n, n_k, n_v, d;
    dot_f32_fn dot;
    void (*axpy)(float *y, float a, const float *x, int64_t n);
} hyb_gdn;

/* V head h over all n tokens, one token at a time (the definition). */
void hyb_gdn_recurrent(const hyb_gdn *j, int h);
/* The same in chunks of HYB_CHUNK tokens: per chunk the intra-chunk
 * interactions are solved as (I + L) X = B by forward substitution and the
 * state is read and updated once (shared spec §1.7). scratch holds
 * hyb_gdn_scratch(d) floats. */
void hyb_gdn_chunked(const hyb_gdn *j, int h, float *scratch);
size_t hyb_gdn_scratch(int d);

#endif
