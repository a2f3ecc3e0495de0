/* Dot products of one stored weight row with f32 activations: the CPU fast
 * path's inner loop. kernels_pick() chooses, once, the best variant the CPU
 * supports (AVX512-VNNI, AVX2 + FMA + F16C, else portable C). The portable
 * f32-path kernels equal the reference dequantize-then-dot; the SIMD ones
 * differ only in summation order (eight lanes, fused multiply-add). The
 * integer kernels on quantized activations (q8_0/q4_0 on act_q8, the
 * k-quants on act_q8k) have canonical sums defined below. In every variant
 * a token's output row does not depend on the other tokens of the call: a
 * tile of n tokens gives, row for row, the bits of n one-token calls. */
#ifndef GEM_BACKEND_CPU_KERNELS_H
#define GEM_BACKEND_CPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

typedef float (*dot_fn)(const uint8_t *row, const float *x, int64_t n);
typedef float (*dot_f32_fn)(const float *a, const float *b, int64_t n);

/* Activations quantized to 8 bits per 32-value block (scale = max|x|/127),
 * for the integer dot products of q8_0 and q4_0 weights: the same scheme the
 * reference's CPU backend uses, with the same accuracy trade-off. */
typedef struct {
    float *d;    /* per block scale */
    int8_t *q;   /* codes, 32 per block */
    int32_t *s;  /* per block sum of the codes (the multi-row kernels' offset
                  * correction); quantize_act fills it when set */
} act_q8;

typedef float (*dot_q8_fn)(const uint8_t *row, const act_q8 *x, int64_t block0, int64_t n);

/* Rows [0, nrows) (row_bytes apart) of a q8_0/q4_0 matrix against ntok
 * tokens of quantized activations (token t's blocks start at t * nb; x->s
 * set), nb blocks per row: out[t * out_stride + r]. Each output is the
 * canonical sum of its row and token alone,
 *     acc = 0; for b in 0..nb-1: acc = fma((float)S_b, d_w[b] * d_x[b], acc)
 * (S_b the exact integer dot of block b, d_w * d_x rounded to f32, one
 * rounding per fma), so a token's row is bitwise the same whatever ntok,
 * nrows and the thread split are: a verification tile or a prompt tile
 * reproduces one-token decode exactly. */
typedef void (*mm_q8_fn)(const uint8_t *w, uint64_t row_bytes, int64_t nrows, const act_q8 *x, int64_t nb, int ntok,
                         float *out, size_t out_stride);

/* Activations quantized for k-quant weights (q4_k, q5_k, q6_k): per
 * 256-value block one scale d = max|x| / 127, the 256 codes round(x / d)
 * (to nearest even) and the sums of each 16 consecutive codes (the k-quant
 * mins and q6_k's code offset apply per 16 or 32 values). The reference's
 * Q8_K layout in spirit: one scale per super-block keeps the integer dot
 * of a whole super-block exact. */
typedef struct {
    float *d;    /* per 256-value block */
    int8_t *q;   /* codes, 256 per block */
    int16_t *bs; /* 16 sums per block */
} act_q8k;

/* A row of n values (whole super-blocks) of a q4_k, q5_k or q6_k matrix
 * against one token's quantized activations (its blocks start at block0).
 * Every variant computes the canonical sum, bit for bit:
 *     acc = 0; for each super-block b:
 *       q4_k/q5_k: S = sum_j sc_j (sum_{i in j} q_i a_i),
 *                  M = sum_j m_j (sum_{i in j} a_i)     (j: 8 sub-blocks of 32)
 *                  acc = fma((float)S, d_b * d_x, acc); acc = fma(-(float)M, dmin_b * d_x, acc)
 *       q6_k:      S = sum_j sc_j (sum_{i in j} (q_i - 32) a_i)  (j: 16 of 16)
 *                  acc = fma((float)S, d_b * d_x, acc)
 * with S and M exact integers (|S| < 2^28), the products of scales
 * rounded to f32 and one rounding per fma. A token's result therefore
 * never depends on the other tokens, rows or threads of a call, and the
 * SIMD variants can be checked against the portable one for equality. */
typedef float (*dot_q8k_fn)(const uint8_t *row, const act_q8k *x, int64_t block0, int64_t n);

/* Rows [0, nrows) (row_bytes apart) of a q4_k/q5_k/q6_k matrix against
 * ntok tokens of act_q8k activations (token t's blocks start at t * nb), nb
 * super-blocks per row: out[t * out_stride + r], each the canonical sum
 * above (so equal to the one-row kernels' bits). */
typedef void (*mm_q8k_fn)(const uint8_t *w, uint64_t row_bytes, int64_t nrows, const act_q8k *x, int64_t nb,
                          int ntok, float *out, size_t out_stride);

/* A q8_0/q4_0 matrix packed once (at load) into the sixteen-row panels the
 * multi-row kernels work on, so a call reads each panel as one stream
 * instead of regrouping sixteen separate rows every time: panel p (rows
 * 16p..16p+15; a short last panel repeats its last row) holds, for each
 * block b in order, its codes (q8_0: 8 x 64 bytes, group g = values
 * 4g..4g+3 of the 16 rows, stored +128; q4_0: 4 x 64 bytes of the stored
 * code bytes, group g = bytes 4g..4g+3, values 4g.. in the low nibbles and
 * 16 + 4g.. in the high ones) at codes + (p nb + b) * KERNELS_PANEL_BYTES(q4),
 * and the 16 rows' f16 scales at scales + (p nb + b) * 16. The packed
 * kernel computes the same canonical sums as the unpacked one (mm_q8_fn),
 * bit for bit. */
#define KERNELS_PANEL_BYTES(q4) ((q4) ? 256 : 512)
typedef struct {
    const uint8_t *codes; /* 64-byte aligned */
    const uint16_t *scales;
} q_panels;
typedef void (*pack_q8_fn)(const uint8_t *w, uint64_t row_bytes, int64_t nrows, int64_t nb, uint8_t *codes,
                           uint16_t *scales);
/* Rows [16 p0, 16 p0 + nrows) of a packed matrix (nrows <= its rows past
 * 16 p0): out[t * out_stride + r] for r < nrows, as mm_q8_fn. */
typedef void (*mm_packed_fn)(const q_panels *w, int64_t p0, int64_t nrows, const act_q8 *x, int64_t nb, int ntok,
                             float *out, size_t out_stride);

/* A q4_k/q5_k/q6_k matrix packed at load for the same panels: panel p,
 * super-block b holds the 16 rows' block bytes as 32-bit words, word i of
 * row r at words[((p nb + b) KERNELS_KWORDS(bytes) + i) 16 + r] (q6_k's
 * 210 bytes padded with zeros to 53 words), so a chunk loads grouped words
 * where the unpacked kernel regroups sixteen rows. Same canonical sums
 * (mm_q8k_fn), bit for bit. kernels_kpack (portable) packs. */
#define KERNELS_KWORDS(block_bytes) (((block_bytes) + 3) / 4)
void kernels_kpack(const uint8_t *w, uint64_t row_bytes, int64_t nrows, int64_t nb, uint32_t block_bytes,
                   uint32_t *words);
typedef void (*mm_kpacked_fn)(const uint32_t *words, int64_t p0, int64_t nrows, const act_q8k *x, int64_t nb,
                              int ntok, float *out, size_t out_stride);

typedef struct {
    const char *name; /* "avx512vnni", "avx2" or "scalar" */
    dot_fn q8_0, q4_0, f16, f32;
    dot_f32_fn dot;
    dot_q8_fn q8_0_q8, q4_0_q8; /* NULL where only the f32 path exists */
    /* every tile size, one token included, where set (AVX512-VNNI): the
     * one-row kernels above are then not used for these types */
    mm_q8_fn q8_0_mm, q4_0_mm;
    /* the same on matrices packed at load (set with the mm kernels) */
    pack_q8_fn q8_0_pack, q4_0_pack;
    mm_packed_fn q8_0_mmp, q4_0_mmp;
    void (*quantize_act)(const float *x, int64_t n, act_q8 *out, int64_t block0);
    /* k-quants on act_q8k activations: set in every variant (the portable
     * ones define the canonical sum above; kernels_k.c) */
    dot_q8k_fn q4_k_q8k, q5_k_q8k, q6_k_q8k;
    mm_q8k_fn q4_k_mm, q5_k_mm, q6_k_mm; /* every tile size where set (AVX512-VNNI) */
    mm_kpacked_fn q4_k_mmp, q5_k_mmp, q6_k_mmp; /* the same on matrices packed at load */
    void (*quantize_act_k)(const float *x, int64_t n, act_q8k *out, int64_t block0); /* n: whole blocks */
    void (*axpy)(float *y, float a, const float *x, int64_t n); /* y += a x */
    /* out = gelu_tanh(g) * u and x = cap tanh(x / cap): tanhf in the
     * portable variants; the SIMD ones evaluate tanh from their own exp
     * (within 1e-6 absolute, tests/backend/test_cpu_kernels.c) */
    void (*geglu)(const float *g, const float *u, float *out, int64_t n);
    void (*softcap)(float *x, int64_t n, float cap);
} cpu_kernels;

/* gelu_tanh(x) in f32 with tanhf: the portable geglu's term, and the value
 * the reference's fp16 table holds (backend_opts.gelu_fp16). */
float kernels_gelu_tanh(float x);

/* The variants for this CPU; force_scalar picks the portable ones. */
cpu_kernels kernels_pick(int force_scalar);

/* The named variant ("avx512vnni", "avx2", "scalar") in *out, or 0 where
 * this CPU lacks it: the tests run every variant the machine supports. */
int kernels_variant(const char *name, cpu_kernels *out);

#endif
