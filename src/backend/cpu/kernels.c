/* CPU dot-product kernels (see kernels.h). The AVX2 functions are compiled
 * for that target with function attributes, so the rest of gem stays
 * portable and the choice is made at run time from CPUID. */
#include "backend/cpu/kernels.h"

#include <math.h>
#include <string.h>

#include "backend/cpu/kernels_k.h"
#include "quant/quant.h"

/* ---- portable ---- */

static float dot_scalar(const float *a, const float *b, int64_t n) {
    float acc = 0;
    for (int64_t i = 0; i < n; i++) acc += a[i] * b[i];
    return acc;
}

#define SCALAR_ROW_DOT(NAME, TYPE)                                      \
    static float NAME(const uint8_t *row, const float *x, int64_t n) { \
        float tmp[256], acc = 0;                                        \
        const int64_t bs = quant_block_size(TYPE);                      \
        const int64_t ts = quant_type_size(TYPE);                       \
        const int64_t step = 256 / bs * bs;                             \
        for (int64_t i = 0; i < n; i += step) {                         \
            int64_t m = n - i < step ? n - i : step;                    \
            quant_dequant_row(TYPE, row + i / bs * ts, tmp, m);         \
            for (int64_t k = 0; k < m; k++) acc += tmp[k] * x[i + k];   \
        }                                                               \
        return acc;                                                     \
    }

SCALAR_ROW_DOT(q8_0_scalar, QT_Q8_0)
SCALAR_ROW_DOT(q4_0_scalar, QT_Q4_0)
SCALAR_ROW_DOT(f16_scalar, QT_F16)

static float f32_scalar(const uint8_t *row, const float *x, int64_t n) { return dot_scalar((const float *)row, x, n); }

static void axpy_scalar(float *y, float a, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}

#define GELU_C 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_A 0.044715f

float kernels_gelu_tanh(float x) { return 0.5f * x * (1.0f + tanhf(GELU_C * (x + GELU_A * x * x * x))); }

static void geglu_scalar(const float *g, const float *u, float *out, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = kernels_gelu_tanh(g[i]) * u[i];
}

static void softcap_scalar(float *x, int64_t n, float cap) {
    for (int64_t i = 0; i < n; i++) x[i] = cap * tanhf(x[i] / cap);
}

/* ---- AVX2 + FMA + F16C ---- */
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>

#include "backend/cpu/panel16.h"
#include "util/vexp.h"

#define AVX2 __attribute__((target("avx2,fma,f16c")))

AVX2 static float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

AVX2 static float d16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

AVX2 static __m256 i8x8_ps(const int8_t *q) {
    __m128i v = _mm_loadl_epi64((const __m128i *)q);
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
}

AVX2 static float q8_0_avx2(const uint8_t *row, const float *x, int64_t n) {
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / 32; b++) {
        const uint8_t *blk = row + b * 34;
        const int8_t *q = (const int8_t *)(blk + 2);
        const float *xb = x + b * 32;
        __m256 s = _mm256_mul_ps(i8x8_ps(q), _mm256_loadu_ps(xb));
        s = _mm256_fmadd_ps(i8x8_ps(q + 8), _mm256_loadu_ps(xb + 8), s);
        s = _mm256_fmadd_ps(i8x8_ps(q + 16), _mm256_loadu_ps(xb + 16), s);
        s = _mm256_fmadd_ps(i8x8_ps(q + 24), _mm256_loadu_ps(xb + 24), s);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d16(blk)), s, acc);
    }
    return hsum(acc);
}

AVX2 static float q4_0_avx2(const uint8_t *row, const float *x, int64_t n) {
    __m256 acc = _mm256_setzero_ps();
    const __m128i low = _mm_set1_epi8(0x0f), eight = _mm_set1_epi8(8);
    for (int64_t b = 0; b < n / 32; b++) {
        const uint8_t *blk = row + b * 18;
        const float *xb = x + b * 32;
        __m128i qs = _mm_loadu_si128((const __m128i *)(blk + 2));
        __m128i lo = _mm_sub_epi8(_mm_and_si128(qs, low), eight);                    /* values 0..15 */
        __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(qs, 4), low), eight); /* values 16..31 */
        __m256 s = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)), _mm256_loadu_ps(xb));
        s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))), _mm256_loadu_ps(xb + 8), s);
        s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)), _mm256_loadu_ps(xb + 16), s);
        s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))), _mm256_loadu_ps(xb + 24), s);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d16(blk)), s, acc);
    }
    return hsum(acc);
}

AVX2 static float dot_avx2(const float *a, const float *b, int64_t n) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
    }
    float r = hsum(_mm256_add_ps(acc0, acc1));
    for (; i < n; i++) r += a[i] * b[i];
    return r;
}

AVX2 static float f16_avx2(const uint8_t *row, const float *x, int64_t n) {
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        acc = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(row + 2 * i))), _mm256_loadu_ps(x + i), acc);
    float r = hsum(acc);
    for (; i < n; i++) r += d16(row + 2 * i) * x[i];
    return r;
}

AVX2 static float f32_avx2(const uint8_t *row, const float *x, int64_t n) { return dot_avx2((const float *)row, x, n); }

AVX2 static void axpy_avx2(float *y, float a, const float *x, int64_t n) {
    const __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * x[i];
}

/* tanh for eight lanes. |x| < 0.25: the odd Taylor series to x^11 (the
 * next term is below 3e-11); beyond: 1 - 2 / (e^(2|x|) + 1) with the sign
 * put back, e^y as 2^k e^r (|r| <= ln2 / 2, Taylor to r^7: relative error
 * below 1e-8); |x| >= 9 gives +-1 (1 - tanh(9) is 3e-8). Absolute error is
 * a few 1e-8: the cancellation in 1 - 2/(e+1) near |x| = 0.25 costs an ulp
 * of 1. */
AVX2 static __m256 tanh8(__m256 x) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    /* min returns its second operand for a NaN: NaN stays NaN */
    const __m256 ax = _mm256_min_ps(_mm256_set1_ps(9.0f), _mm256_andnot_ps(sign, x));
    /* series: x (1 + x2 (-1/3 + x2 (2/15 + x2 (-17/315 + x2 (62/2835 - x2 1382/155925))))) */
    const __m256 x2 = _mm256_mul_ps(ax, ax);
    __m256 p = _mm256_set1_ps(-1382.0f / 155925.0f);
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(62.0f / 2835.0f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-17.0f / 315.0f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(2.0f / 15.0f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-1.0f / 3.0f));
    const __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, x2), ax, ax);
    /* e^(2|x|): the shared reduction and polynomial (util/vexp.h), 2^k
     * added to the exponent bits */
    const __m256 y = _mm256_add_ps(ax, ax);
    __m256 k;
    __m256 e = gem_exp_reduced8(y, &k);
    e = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(e), _mm256_slli_epi32(_mm256_cvtps_epi32(k), 23)));
    const __m256 big = _mm256_sub_ps(_mm256_set1_ps(1.0f),
                                     _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, _mm256_set1_ps(1.0f))));
    const __m256 t = _mm256_blendv_ps(big, small, _mm256_cmp_ps(ax, _mm256_set1_ps(0.25f), _CMP_LT_OQ));
    return _mm256_or_ps(t, _mm256_and_ps(x, sign));
}

AVX2 static void geglu_avx2(const float *g, const float *u, float *out, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 x = _mm256_loadu_ps(g + i);
        const __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
        const __m256 t = tanh8(_mm256_mul_ps(_mm256_set1_ps(GELU_C), _mm256_fmadd_ps(_mm256_set1_ps(GELU_A), x3, x)));
        const __m256 gl = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), x), _mm256_add_ps(_mm256_set1_ps(1.0f), t));
        _mm256_storeu_ps(out + i, _mm256_mul_ps(gl, _mm256_loadu_ps(u + i)));
    }
    geglu_scalar(g + i, u + i, out + i, n - i);
}

AVX2 static void softcap_avx2(float *x, int64_t n, float cap) {
    const __m256 c = _mm256_set1_ps(cap), ic = _mm256_set1_ps(1.0f / cap);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(c, tanh8(_mm256_mul_ps(_mm256_loadu_ps(x + i), ic))));
    softcap_scalar(x + i, n - i, cap);
}

AVX2 static void quantize_act_avx2(const float *x, int64_t n, act_q8 *o, int64_t block0) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t b = 0; b < n / 32; b++) {
        const float *xb = x + b * 32;
        __m256 v0 = _mm256_loadu_ps(xb), v1 = _mm256_loadu_ps(xb + 8), v2 = _mm256_loadu_ps(xb + 16),
               v3 = _mm256_loadu_ps(xb + 24);
        __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v0), _mm256_andnot_ps(sign, v1)),
                                 _mm256_max_ps(_mm256_andnot_ps(sign, v2), _mm256_andnot_ps(sign, v3)));
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const float amax = _mm_cvtss_f32(m4);
        const float d = amax / 127.0f, id = amax > 0 ? 127.0f / amax : 0.0f;
        const __m256 mul = _mm256_set1_ps(id);
        __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(v0, mul)), i1 = _mm256_cvtps_epi32(_mm256_mul_ps(v1, mul)),
                i2 = _mm256_cvtps_epi32(_mm256_mul_ps(v2, mul)), i3 = _mm256_cvtps_epi32(_mm256_mul_ps(v3, mul));
        __m256i s16a = _mm256_packs_epi32(i0, i1), s16b = _mm256_packs_epi32(i2, i3);
        __m256i s8 = _mm256_packs_epi16(s16a, s16b);
        /* undo the lane interleaving of the two packs */
        s8 = _mm256_permutevar8x32_epi32(s8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)(o->q + (block0 + b) * 32), s8);
        o->d[block0 + b] = d;
        if (o->s) {
            __m256i g = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), s8), _mm256_set1_epi16(1));
            __m128i h = _mm_add_epi32(_mm256_castsi256_si128(g), _mm256_extracti128_si256(g, 1));
            h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
            h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
            o->s[block0 + b] = _mm_cvtsi128_si32(h);
        }
    }
}

/* Two blocks per iteration into two accumulators: one fused multiply-add
 * chain would serialise on its latency. */
AVX2 static __m256 q8_block(const uint8_t *blk, const int8_t *q, float dx, __m256 acc) {
    const __m256i w = _mm256_loadu_si256((const __m256i *)(blk + 2));
    const __m256i v = _mm256_loadu_si256((const __m256i *)q);
    const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(v, w)),
                                        _mm256_set1_epi16(1));
    return _mm256_fmadd_ps(_mm256_set1_ps(d16(blk) * dx), _mm256_cvtepi32_ps(p), acc);
}

/* q4_0: codes 0..15 (stored +8) in the low lane, high nibbles in the high
 * lane; made signed so the same sign trick as q8_0 applies. */
AVX2 static __m256 q4_block(const uint8_t *blk, const int8_t *q, float dx, __m256 acc) {
    const __m128i qs = _mm_loadu_si128((const __m128i *)(blk + 2));
    const __m256i w = _mm256_sub_epi8(
        _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(qs, 4), qs), _mm256_set1_epi8(0x0f)), _mm256_set1_epi8(8));
    const __m256i v = _mm256_loadu_si256((const __m256i *)q);
    const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(v, w)),
                                        _mm256_set1_epi16(1));
    return _mm256_fmadd_ps(_mm256_set1_ps(d16(blk) * dx), _mm256_cvtepi32_ps(p), acc);
}

/* A row of nb blocks of `bytes` each against quantized activations. */
#define Q8_ROW_DOT(NAME, BLOCK, BYTES)                                                   \
    AVX2 static float NAME(const uint8_t *row, const act_q8 *x, int64_t block0, int64_t n) { \
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();                      \
        const int64_t nb = n / 32;                                                      \
        const int8_t *q = x->q + block0 * 32;                                           \
        const float *dx = x->d + block0;                                                \
        int64_t b = 0;                                                                  \
        for (; b + 2 <= nb; b += 2) {                                                   \
            a0 = BLOCK(row + b * BYTES, q + b * 32, dx[b], a0);                         \
            a1 = BLOCK(row + (b + 1) * BYTES, q + (b + 1) * 32, dx[b + 1], a1);         \
        }                                                                               \
        if (b < nb) a0 = BLOCK(row + b * BYTES, q + b * 32, dx[b], a0);                 \
        return hsum(_mm256_add_ps(a0, a1));                                             \
    }

Q8_ROW_DOT(q8_0_q8_avx2, q8_block, 34)
Q8_ROW_DOT(q4_0_q8_avx2, q4_block, 18)

/* ---- AVX512-VNNI: sixteen-row panels, one token or a tile ----
 *
 * Lanes are rows. A panel's blocks are rearranged, a chunk of blocks at a
 * time, into [block][4-byte group][row] (a 512-bit vector per group), so one
 * vpdpbusd multiplies a group of four activation codes, broadcast, with that
 * group of sixteen rows. vpdpbusd takes unsigned x signed bytes: the weight
 * codes go in unsigned with an offset (q4_0 its stored +8, q8_0 +128 by XOR
 * 0x80) and the offset times the activations' block code sum starts the
 * integer accumulator negative, leaving the exact block sum S. Every (row,
 * token) then runs the canonical sequence of kernels.h; nothing in it depends
 * on the other rows or tokens of the call, so a token of a tile gets the bits
 * it gets alone. Weights stay in the mapping: the rearranged chunk lives on
 * the stack and serves every token of the call. */
#define MM_KC 32 /* blocks per rearranged chunk: 18 KiB, in L1 while the tokens pass */
#ifndef MM_PF
#define MM_PF 1024
#endif

/* Blocks [b0, b0 + nkc) of a panel: pw[b][g] group g (values 4g..4g+3) of
 * rows 0..15 as unsigned codes, pd[b] the rows' scales. roff: each row's
 * offset from rows[0], for the gather of the scales. */
VNNI static inline __attribute__((always_inline)) void mm_pack(const int q4, const uint8_t *const *rows, __m512i roff,
                                                               int64_t b0, int nkc, __m512i *pw, __m512 *pd) {
    const uint64_t bytes = q4 ? 18 : 34;
    for (int b = 0; b < nkc; b++) {
        const uint64_t off = (uint64_t)(b0 + b) * bytes;
        if (MM_PF > 0 && (b & 1) == 0)
            for (int r = 0; r < MM_ROWS; r++) _mm_prefetch((const char *)rows[r] + off + MM_PF, _MM_HINT_T0);
        __m512i o[4], *w = pw + b * 8;
        groups16x4(rows, off + 2, o);
        if (q4) { /* a byte's low nibble is value i, its high one value i + 16 */
            const __m512i low = _mm512_set1_epi8(0x0f);
            for (int k = 0; k < 4; k++) {
                w[k] = _mm512_and_si512(o[k], low);
                w[k + 4] = _mm512_and_si512(_mm512_srli_epi16(o[k], 4), low);
            }
        } else {
            const __m512i flip = _mm512_set1_epi8((char)0x80);
            for (int k = 0; k < 4; k++) w[k] = _mm512_xor_si512(o[k], flip);
            groups16x4(rows, off + 18, o);
            for (int k = 0; k < 4; k++) w[k + 4] = _mm512_xor_si512(o[k], flip);
        }
        /* 4 bytes at each block start: the f16 scale and two code bytes */
        const __m512i h = _mm512_i32gather_epi32(roff, rows[0] + off, 1);
        pd[b] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h));
    }
}

/* Tokens [t0, t0 + T) against a packed chunk (blocks b0..): the running sums
 * start at zero on the first chunk and continue from out (stored f32, so
 * exactly) on the next ones. off: the offset x 1 (q4_0 8, q8_0 128). */
VNNI static inline __attribute__((always_inline)) void mm_tokens(const __m512i *pw, const __m512 *pd, int nkc,
                                                                 const act_q8 *x, int64_t nb, int64_t b0, int64_t t0,
                                                                 const int T, const int32_t off, int first, float *out,
                                                                 size_t stride, __mmask16 mask) {
    /* constant trip counts, unrolled: -O2 keeps acc[] in registers only so */
    __m512 acc[8];
#pragma GCC unroll 8
    for (int t = 0; t < T; t++)
        acc[t] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mask, out + (size_t)(t0 + t) * stride);
    for (int b = 0; b < nkc; b++) {
        const __m512i *w = pw + b * 8;
        const uint8_t *q[8];
        __m512i s[8];
        /* tokens interleaved within each group: T independent chains */
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            const int64_t xb = (t0 + t) * nb + b0 + b;
            q[t] = (const uint8_t *)x->q + xb * 32;
            s[t] = _mm512_set1_epi32(-off * x->s[xb]);
        }
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++)
#pragma GCC unroll 8
            for (int t = 0; t < T; t++) {
                int32_t v;
                memcpy(&v, q[t] + 4 * g, 4);
                s[t] = _mm512_dpbusd_epi32(s[t], w[g], _mm512_set1_epi32(v));
            }
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            const int64_t xb = (t0 + t) * nb + b0 + b;
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[t]), _mm512_mul_ps(pd[b], _mm512_set1_ps(x->d[xb])), acc[t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) _mm512_mask_storeu_ps(out + (size_t)(t0 + t) * stride, mask, acc[t]);
}

/* Every token of the call against one chunk: the same per-token code at
 * every width, 8 tokens at a time, then 4, 2, 1. */
VNNI static inline __attribute__((always_inline)) void mm_chunk(const __m512i *pw, const __m512 *pd, int nkc,
                                                                const act_q8 *x, int64_t nb, int64_t b0, int ntok,
                                                                const int32_t off, float *o, size_t stride,
                                                                __mmask16 mask) {
    int t = 0;
    for (; t + 8 <= ntok; t += 8) mm_tokens(pw, pd, nkc, x, nb, b0, t, 8, off, b0 == 0, o, stride, mask);
    if (ntok - t >= 4) mm_tokens(pw, pd, nkc, x, nb, b0, t, 4, off, b0 == 0, o, stride, mask), t += 4;
    if (ntok - t >= 2) mm_tokens(pw, pd, nkc, x, nb, b0, t, 2, off, b0 == 0, o, stride, mask), t += 2;
    if (ntok - t >= 1) mm_tokens(pw, pd, nkc, x, nb, b0, t, 1, off, b0 == 0, o, stride, mask);
}

VNNI static inline __attribute__((always_inline)) void mm_panels(const int q4, const uint8_t *w, uint64_t row_bytes,
                                                                 int64_t nrows, const act_q8 *x, int64_t nb, int ntok,
                                                                 float *out, size_t stride) {
    __m512i pw[MM_KC * 8];
    __m512 pd[MM_KC];
    const int32_t off = q4 ? 8 : 128;
    for (int64_t r0 = 0; r0 < nrows; r0 += MM_ROWS) {
        const int nr = nrows - r0 < MM_ROWS ? (int)(nrows - r0) : MM_ROWS;
        const uint8_t *rows[MM_ROWS];
        int32_t roff[MM_ROWS];
        panel_rows(w, row_bytes, r0, nr, rows, roff);
        const __m512i vroff = _mm512_loadu_si512(roff);
        const __mmask16 mask = (__mmask16)((1u << nr) - 1);
        float *o = out + r0;
        for (int64_t b0 = 0; b0 < nb; b0 += MM_KC) {
            const int nkc = nb - b0 < MM_KC ? (int)(nb - b0) : MM_KC;
            mm_pack(q4, rows, vroff, b0, nkc, pw, pd);
            mm_chunk(pw, pd, nkc, x, nb, b0, ntok, off, o, stride, mask);
        }
    }
}

/* Packing at load: the bytes mm_pack regroups per call, regrouped once
 * (kernels.h, q_panels). */
VNNI static inline __attribute__((always_inline)) void pack_panels(const int q4, const uint8_t *w, uint64_t row_bytes,
                                                                   int64_t nrows, int64_t nb, uint8_t *codes,
                                                                   uint16_t *scales) {
    const uint64_t bytes = q4 ? 18 : 34;
    const int cb = KERNELS_PANEL_BYTES(q4);
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    for (int64_t r0 = 0, p = 0; r0 < nrows; r0 += MM_ROWS, p++) {
        const int nr = nrows - r0 < MM_ROWS ? (int)(nrows - r0) : MM_ROWS;
        const uint8_t *rows[MM_ROWS];
        int32_t roff[MM_ROWS];
        panel_rows(w, row_bytes, r0, nr, rows, roff);
        for (int64_t b = 0; b < nb; b++) {
            const uint64_t off = (uint64_t)b * bytes;
            __m512i o[4], *dst = (__m512i *)(codes + (size_t)(p * nb + b) * cb);
            groups16x4(rows, off + 2, o);
            for (int k = 0; k < 4; k++) _mm512_store_si512(dst + k, q4 ? o[k] : _mm512_xor_si512(o[k], flip));
            if (!q4) {
                groups16x4(rows, off + 18, o);
                for (int k = 0; k < 4; k++) _mm512_store_si512(dst + 4 + k, _mm512_xor_si512(o[k], flip));
            }
            uint16_t *sc = scales + (size_t)(p * nb + b) * MM_ROWS;
            for (int r = 0; r < MM_ROWS; r++) memcpy(sc + r, rows[r] + off, 2);
        }
    }
}

/* The packed matrix's panels [p0, ...) for rows [16 p0, 16 p0 + nrows):
 * the chunk loop of mm_panels with the chunk read in place (q8_0) or its
 * nibbles split (q4_0) instead of regrouped, then the same mm_tokens. */
VNNI static inline __attribute__((always_inline)) void mm_panels_packed(const int q4, const q_panels *w, int64_t p0,
                                                                        int64_t nrows, const act_q8 *x, int64_t nb,
                                                                        int ntok, float *out, size_t stride) {
    __m512i pw[MM_KC * 8];
    __m512 pd[MM_KC];
    const int32_t off = q4 ? 8 : 128;
    const int cb = KERNELS_PANEL_BYTES(q4);
    const __m512i low = _mm512_set1_epi8(0x0f);
    for (int64_t r0 = 0, p = p0; r0 < nrows; r0 += MM_ROWS, p++) {
        const int nr = nrows - r0 < MM_ROWS ? (int)(nrows - r0) : MM_ROWS;
        const __mmask16 mask = (__mmask16)((1u << nr) - 1);
        float *o = out + r0;
        const uint8_t *pc = w->codes + (size_t)p * (size_t)nb * cb;
        const uint16_t *ps = w->scales + (size_t)p * (size_t)nb * MM_ROWS;
        if (q4 && ntok == 1) {
            /* one token: each block's nibbles split in registers and used at
             * once, so the weight loads stream without the chunk's store
             * and reload; mm_tokens' arithmetic for T = 1 in its order
             * (the running sum kept in a register across chunks, where
             * mm_tokens stores and reloads it exactly), the same bits */
            const __m512i *cw = (const __m512i *)pc;
            __m512 acc = _mm512_setzero_ps();
            for (int64_t b = 0; b < nb; b++) {
                __m512i wv[8];
#pragma GCC unroll 8
                for (int k = 0; k < 4; k++) {
                    const __m512i v = _mm512_load_si512(cw + b * 4 + k);
                    wv[k] = _mm512_and_si512(v, low);
                    wv[k + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
                }
                const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(ps + (size_t)b * MM_ROWS)));
                const uint8_t *q = (const uint8_t *)x->q + b * 32;
                __m512i sum = _mm512_set1_epi32(-off * x->s[b]);
#pragma GCC unroll 8
                for (int g = 0; g < 8; g++) {
                    int32_t v;
                    memcpy(&v, q + 4 * g, 4);
                    sum = _mm512_dpbusd_epi32(sum, wv[g], _mm512_set1_epi32(v));
                }
                acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(d, _mm512_set1_ps(x->d[b])), acc);
            }
            _mm512_mask_storeu_ps(o, mask, acc);
            continue;
        }
        for (int64_t b0 = 0; b0 < nb; b0 += MM_KC) {
            const int nkc = nb - b0 < MM_KC ? (int)(nb - b0) : MM_KC;
            const __m512i *cw = (const __m512i *)(pc + (size_t)b0 * cb);
            for (int b = 0; b < nkc; b++) {
                pd[b] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(ps + (size_t)(b0 + b) * MM_ROWS)));
                if (q4)
                    for (int k = 0; k < 4; k++) {
                        const __m512i v = _mm512_load_si512(cw + b * 4 + k);
                        pw[b * 8 + k] = _mm512_and_si512(v, low);
                        pw[b * 8 + k + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
                    }
            }
            const __m512i *src = q4 ? pw : cw;
            mm_chunk(src, pd, nkc, x, nb, b0, ntok, off, o, stride, mask);
        }
    }
}

VNNI static void pack_q4_0_vnni(const uint8_t *w, uint64_t row_bytes, int64_t nrows, int64_t nb, uint8_t *codes,
                                uint16_t *scales) {
    pack_panels(1, w, row_bytes, nrows, nb, codes, scales);
}
VNNI static void pack_q8_0_vnni(const uint8_t *w, uint64_t row_bytes, int64_t nrows, int64_t nb, uint8_t *codes,
                                uint16_t *scales) {
    pack_panels(0, w, row_bytes, nrows, nb, codes, scales);
}
VNNI static void mmp_q4_0_vnni(const q_panels *w, int64_t p0, int64_t nrows, const act_q8 *x, int64_t nb, int ntok,
                               float *out, size_t stride) {
    mm_panels_packed(1, w, p0, nrows, x, nb, ntok, out, stride);
}
VNNI static void mmp_q8_0_vnni(const q_panels *w, int64_t p0, int64_t nrows, const act_q8 *x, int64_t nb, int ntok,
                               float *out, size_t stride) {
    mm_panels_packed(0, w, p0, nrows, x, nb, ntok, out, stride);
}

VNNI static void mm_q4_0_vnni(const uint8_t *w, uint64_t row_bytes, int64_t nrows, const act_q8 *x, int64_t nb, int ntok,
                              float *out, size_t stride) {
    mm_panels(1, w, row_bytes, nrows, x, nb, ntok, out, stride);
}

VNNI static void mm_q8_0_vnni(const uint8_t *w, uint64_t row_bytes, int64_t nrows, const act_q8 *x, int64_t nb, int ntok,
                              float *out, size_t stride) {
    mm_panels(0, w, row_bytes, nrows, x, nb, ntok, out, stride);
}

static int have_vnni(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vnni");
}

static int have_avx2(void) {
    __builtin_cpu_init();
    unsigned a, b, c, d;
    /* F16C is CPUID.1:ECX bit 29 (not every compiler's cpu_supports knows it) */
    int f16c = __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1);
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
}
#endif

int kernels_variant(const char *name, cpu_kernels *out) {
    cpu_kernels k = {.name = "scalar", .q8_0 = q8_0_scalar, .q4_0 = q4_0_scalar, .f16 = f16_scalar, .f32 = f32_scalar,
                     .dot = dot_scalar, .axpy = axpy_scalar, .geglu = geglu_scalar, .softcap = softcap_scalar};
    kernels_k_portable(&k);
    int ok = !strcmp(name, "scalar");
#if defined(__x86_64__) && defined(__GNUC__)
    if (!ok && have_avx2()) {
        k.name = "avx2";
        k.q8_0 = q8_0_avx2;
        k.q4_0 = q4_0_avx2;
        k.f16 = f16_avx2;
        k.f32 = f32_avx2;
        k.dot = dot_avx2;
        k.q8_0_q8 = q8_0_q8_avx2;
        k.q4_0_q8 = q4_0_q8_avx2;
        k.quantize_act = quantize_act_avx2;
        k.axpy = axpy_avx2;
        k.geglu = geglu_avx2;
        k.softcap = softcap_avx2;
        kernels_k_avx2(&k);
        ok = !strcmp(name, "avx2");
        if (!ok && have_vnni()) {
            k.name = "avx512vnni";
            k.q8_0_mm = mm_q8_0_vnni;
            k.q4_0_mm = mm_q4_0_vnni;
            k.q8_0_pack = pack_q8_0_vnni;
            k.q4_0_pack = pack_q4_0_vnni;
            k.q8_0_mmp = mmp_q8_0_vnni;
            k.q4_0_mmp = mmp_q4_0_vnni;
            kernels_k_vnni(&k);
            ok = !strcmp(name, "avx512vnni");
        }
    }
#endif
    if (ok) *out = k;
    return ok;
}

cpu_kernels kernels_pick(int force_scalar) {
    cpu_kernels k;
    if (force_scalar || !(kernels_variant("avx512vnni", &k) || kernels_variant("avx2", &k))) kernels_variant("scalar", &k);
    return k;
}
