/* The harness of the CUDA op checks (tests/cuda/cuda_ops.c and its
 * families in tests/cuda/ops_*.c, one binary: make test-cuda).
 *
 * Every CUDA backend op against the CPU backend (needs a GPU). Inputs are
 * fresh random values of order one, outputs are poisoned before each op so
 * an unwritten element fails. Tolerances:
 * - data movement (embed of f32/f16/bf16/q8_0/q4_0, KV blobs, argmax): exact;
 * - f32 arithmetic in another order (norms, rope, attention, plain matmul):
 *   a few ulps of the magnitudes involved (1e-5 relative / 2e-5 absolute);
 * - q8_0/q4_0 matmul: the same 8-bit activation codes as the CPU fast path,
 *   so against it only the f32 summation order differs (1e-5 of the sum of
 *   |terms|); against the scalar reference the bound the activation
 *   rounding implies (sum |w| * max|x| / 254 per block);
 * - types expanded to f16 at load (q6_k): f16 rounding, 1e-3 relative.
 *
 * One random stream (frand) serves every family in cuda_ops' order, so a
 * full run draws the same inputs whatever file a check lives in. */
#ifndef GEM_TESTS_CUDA_OPS_HARNESS_H
#define GEM_TESTS_CUDA_OPS_HARNESS_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "quant/quant.h"
#define TEST_COUNTERS_EXTERN /* one pair of counters for the binary's files (ops_harness.c) */
#include "test.h"

/* the backends: CPU scalar reference and fast path; the CUDA defaults
 * with f32 caches (gpu) and f16 caches (gpu_f16: kv_make gives it f16
 * caches; the entry type is a cache's, chosen at kv_new) */
extern backend *cpu_ref, *cpu_fast, *gpu, *gpu_f16;
/* One-token attention: the defaults are the staged k_attn_dec for f32
 * caches (gpu) and k_attn_tc on the tensor cores for f16 ones (gpu_f16);
 * the other kernels: k_attn_split (GEM_CUDA_ATTN_DEC=0), the register
 * k_attn_dec (GEM_CUDA_ATTN_DEC=1), f32 and f16 caches, and the staged
 * k_attn_dec with f16 caches (GEM_CUDA_ATTN_DEC=2). */
extern backend *gpu_split, *gpu_split_f16, *gpu_reg, *gpu_reg_f16, *gpu_staged_f16;

float frand(void);   /* uniform in [-1, 1) */
uint8_t brand(void); /* a byte */
int mma_on(void);    /* prefill on the tensor cores (GEM_CUDA_MMA unset or not 0) */

/* A weight tensor of `rows` x `cols` in `type` with random contents. */
typedef struct {
    gguf_tensor t;
    uint8_t *data;
    float *deq; /* dequantized values */
} tensor;
tensor make_tensor(uint32_t type, int64_t cols, int64_t rows);
void free_tensor(tensor *x);
/* sum |w x| of row o of W times token i of x; *bound8: the 8-bit codes' bound */
double row_mag(const tensor *W, const float *x, int64_t K, int i, int64_t o, double *bound8);
/* row_mag with the activation-rounding bound of bs-value blocks (256: the
 * k-quants' activation codes) */
double row_mag_blocks(const tensor *W, const float *x, int64_t K, int i, int64_t o, int bs, double *bound8);

float *rand_vec(size_t n, float scale);
be_buf *put(backend *b, const float *v, size_t n); /* v, or NaN poison when v is NULL */
float *get(backend *b, be_buf *x, size_t n);
/* max |a - b| / (abs_tol + rel * |b|) <= 1, NaN fails */
int close_enough(const char *what, const float *a, const float *b, size_t n, double rel, double abs_tol);
void step_both(const int32_t *ids, int n, int pos0); /* set_step on cpu_ref and gpu */
double seconds_now(void);

/* a CUDA backend created with VAR=VALUE set (variant_f16: one whose
 * caches from kv_make hold f16 entries); its status checked, then
 * destroyed */
backend *variant(const char *var, const char *value, const backend_opts *o);
backend *variant_f16(const char *var, const char *value, const backend_opts *o);
void variant_done(backend *b);
/* b's caches under test hold f16 entries (gpu_f16 and the f16 variants):
 * mark_f16 says so, unmark_f16 before b is destroyed (a later backend may
 * come at the same address) */
void mark_f16(backend *b);
void unmark_f16(backend *b);
/* b->kv_new with the entry type b's checks use (f16 where marked, else
 * f32) */
be_kv *kv_make(backend *b, int n_kv_head, int head_dim, int capacity, int ring, gem_err *err);
/* a line on stderr as a family ends (its checks so far, its seconds) */
void progress(const char *group);

/* The families, in cuda_ops' order: g the default options (the variants
 * each family creates use them). */
void ops_embed(const backend_opts *g);       /* ops_elementwise.c */
void ops_norm(const backend_opts *g);        /* ops_norm.c */
void ops_elementwise(const backend_opts *g); /* ops_elementwise.c */
void ops_rope(const backend_opts *g);        /* ops_rope.c */
void ops_matmul(const backend_opts *g);      /* ops_matmul.c */
void ops_attention(const backend_opts *g);   /* ops_attention.c */
void ops_topk(const backend_opts *g);        /* ops_topk.c */
void ops_graph(const backend_opts *g);       /* ops_graph.c */
void ops_hybrid(const backend_opts *g);      /* ops_hybrid.c */

#endif
