/* CPU dot-product kernels (see kernels.h). The AVX2 functions are compiled
 * for that target with function attributes, so the rest of gem stays
 * portable and the choice is made at run time from CPUID. */
#include "backend/cpu/kernels.h"

#include <math.h>
#include <string.h>

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
    /* e^(2|x|) */
    const __m256 y = _mm256_add_ps(ax, ax);
    const __m256 k = _mm256_round_ps(_mm256_mul_ps(y, _mm256_set1_ps(1.4426950408889634f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    /* r = y - k ln2 in two parts (ln2 = hi + lo, hi exact in few bits) */
    __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693145751953125f), y);
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(1.428606820309417e-06f), r);
    __m256 e = _mm256_set1_ps(1.0f / 5040.0f);
    e = _mm256_fmadd_ps(e, r, _mm256_set1_ps(1.0f / 720.0f));
    e = _mm256_fmadd_ps(e, r, _mm256_set1_ps(1.0f / 120.0f));
    e = _mm256_fmadd_ps(e, r, _mm256_set1_ps(1.0f / 24.0f));
    e = _mm256_fmadd_ps(e, r, _mm256_set1_ps(1.0f / 6.0f));
    e = _mm256_fmadd_ps(e, r, _mm256_set1_ps(0.5f));
    e = _mm256_fmadd_ps(e, r, _mm256_set1_ps(1.0f));
    e = _mm256_fmadd_ps(e, r, _mm256_set1_ps(1.0f));
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
        if (o->m8) {
            const __m256i g4 = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), s8), _mm256_set1_epi16(1));
            _mm256_storeu_si256((__m256i *)(o->m8 + (block0 + b) * 8), _mm256_mullo_epi32(g4, _mm256_set1_epi32(-8)));
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

/* ---- AVX512-VNNI eight-row blocks for prompt tiles ----
 *
 * Lanes are rows: eight rows' codes are interleaved once per call into
 * [block][4-byte group][row] (a 256-bit vector per group), so one vpdpbusd
 * multiplies a group of four activation codes, broadcast, with the same
 * group of eight rows. vpdpbusd takes unsigned x signed bytes: activations
 * go in as x + 128 (x XOR 0x80) and 128 * sum(w) is subtracted per block and
 * row, leaving the exact integer block sum sum(w x). Each block then adds
 * float(sum) * (d(w) d(x)) to the row's f32 accumulator, the one-row
 * kernels' per-block term. Weights stay in the mapping: the interleaved
 * copy lives in per-task scratch and serves every token of the tile. */
#define VNNI __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")))

size_t gemm8_scratch_bytes(int64_t nb) { return (size_t)nb * 8 * (32 + 4 + 4); }

/* One q4_0 row against quantized activations for decode: vpdpbusd takes the
 * stored codes (0..15, unsigned) times the signed activation codes, on top
 * of -8 x the activations' lane-group sums (act_q8.m8), which leaves the
 * exact integer block sums of the AVX2 kernel with a third of its
 * instructions per block (that kernel was compute bound: it streamed q4_0
 * weights more slowly than the q8_0 head's, which are bigger). */
VNNI static __m256 q4_block_vnni(const uint8_t *blk, const int8_t *q, const int32_t *m8, float dx, __m256 acc) {
    const __m128i qs = _mm_loadu_si128((const __m128i *)(blk + 2));
    const __m256i w = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(qs, 4), qs), _mm256_set1_epi8(0x0f));
    const __m256i p = _mm256_dpbusd_epi32(_mm256_loadu_si256((const __m256i *)m8), w, _mm256_loadu_si256((const __m256i *)q));
    return _mm256_fmadd_ps(_mm256_set1_ps(d16(blk) * dx), _mm256_cvtepi32_ps(p), acc);
}

VNNI static float q4_0_q8_vnni(const uint8_t *row, const act_q8 *x, int64_t block0, int64_t n) {
    if (!x->m8) return q4_0_q8_avx2(row, x, block0, n);
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    const int64_t nb = n / 32;
    const int8_t *q = x->q + block0 * 32;
    const int32_t *m8 = x->m8 + block0 * 8;
    const float *dx = x->d + block0;
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        a0 = q4_block_vnni(row + b * 18, q + b * 32, m8 + b * 8, dx[b], a0);
        a1 = q4_block_vnni(row + (b + 1) * 18, q + (b + 1) * 32, m8 + (b + 1) * 8, dx[b + 1], a1);
    }
    if (b < nb) a0 = q4_block_vnni(row + b * 18, q + b * 32, m8 + b * 8, dx[b], a0);
    return hsum(_mm256_add_ps(a0, a1));
}

/* Interleaving: each row's block is unpacked to 32 signed codes (one
 * vector of eight 4-byte groups), the eight rows' vectors are transposed as
 * an 8 x 8 matrix of 32-bit groups, and the row sums for the +128
 * correction come from vpdpbusd against ones. */
VNNI static void repack8(int q4, const uint8_t *row0, uint64_t row_bytes, int nrows, int64_t nb, int8_t *pw,
                         int32_t *corr, float *sw) {
    const int64_t bytes = q4 ? 18 : 34;
    const uint8_t *rows[8];
    for (int r = 0; r < 8; r++) rows[r] = row0 + row_bytes * (uint64_t)(r < nrows ? r : nrows - 1); /* pad: a real row */
    const __m256i ones = _mm256_set1_epi8(1);
    for (int64_t b = 0; b < nb; b++) {
        __m256i v[8];
        for (int r = 0; r < 8; r++) {
            const uint8_t *blk = rows[r] + b * bytes;
            if (q4) {
                const __m128i qs = _mm_loadu_si128((const __m128i *)(blk + 2));
                v[r] = _mm256_sub_epi8(
                    _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(qs, 4), qs), _mm256_set1_epi8(0x0f)),
                    _mm256_set1_epi8(8));
            } else {
                v[r] = _mm256_loadu_si256((const __m256i *)(blk + 2));
            }
            uint16_t h;
            memcpy(&h, blk, 2);
            sw[b * 8 + r] = _cvtsh_ss(h);
        }
        /* 8 x 8 transpose of 32-bit groups: t[g] holds group g of rows 0..7 */
        __m256i a0 = _mm256_unpacklo_epi32(v[0], v[1]), a1 = _mm256_unpackhi_epi32(v[0], v[1]);
        __m256i a2 = _mm256_unpacklo_epi32(v[2], v[3]), a3 = _mm256_unpackhi_epi32(v[2], v[3]);
        __m256i a4 = _mm256_unpacklo_epi32(v[4], v[5]), a5 = _mm256_unpackhi_epi32(v[4], v[5]);
        __m256i a6 = _mm256_unpacklo_epi32(v[6], v[7]), a7 = _mm256_unpackhi_epi32(v[6], v[7]);
        __m256i b0 = _mm256_unpacklo_epi64(a0, a2), b1 = _mm256_unpackhi_epi64(a0, a2);
        __m256i b2 = _mm256_unpacklo_epi64(a1, a3), b3 = _mm256_unpackhi_epi64(a1, a3);
        __m256i b4 = _mm256_unpacklo_epi64(a4, a6), b5 = _mm256_unpackhi_epi64(a4, a6);
        __m256i b6 = _mm256_unpacklo_epi64(a5, a7), b7 = _mm256_unpackhi_epi64(a5, a7);
        __m256i t[8];
        t[0] = _mm256_permute2x128_si256(b0, b4, 0x20), t[4] = _mm256_permute2x128_si256(b0, b4, 0x31);
        t[1] = _mm256_permute2x128_si256(b1, b5, 0x20), t[5] = _mm256_permute2x128_si256(b1, b5, 0x31);
        t[2] = _mm256_permute2x128_si256(b2, b6, 0x20), t[6] = _mm256_permute2x128_si256(b2, b6, 0x31);
        t[3] = _mm256_permute2x128_si256(b3, b7, 0x20), t[7] = _mm256_permute2x128_si256(b3, b7, 0x31);
        __m256i sum = _mm256_setzero_si256();
        for (int g = 0; g < 8; g++) {
            _mm256_storeu_si256((__m256i *)(pw + (b * 8 + g) * 32), t[g]);
            sum = _mm256_dpbusd_epi32(sum, ones, t[g]);
        }
        _mm256_storeu_si256((__m256i *)(corr + b * 8), _mm256_slli_epi32(sum, 7));
    }
}

/* Four tokens at a time with four independent vpdpbusd chains (one chain
 * would wait on its own latency at every step). */
VNNI static void gemm8_compute(const int8_t *pw, const int32_t *corr, const float *sw, const act_q8 *x, int64_t nb,
                               int ntok, int nrows, float *out, size_t out_stride) {
    const __mmask8 mask = (__mmask8)((1u << nrows) - 1);
    for (int t0 = 0; t0 < ntok; t0 += 4) {
        const int nt = ntok - t0 < 4 ? ntok - t0 : 4;
        __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
        /* tokens past the end repeat the last one (results not stored) */
        int64_t tb[4];
        for (int tt = 0; tt < 4; tt++) tb[tt] = (int64_t)(t0 + (tt < nt ? tt : nt - 1)) * nb;
        /* named accumulators and unrolled loops: -O2 keeps them in registers
         * only this way (an ai[4] array went to the stack every step) */
        const uint8_t *x0 = x->u + tb[0] * 32, *x1 = x->u + tb[1] * 32, *x2 = x->u + tb[2] * 32,
                      *x3 = x->u + tb[3] * 32;
        __m256 c0 = acc[0], c1 = acc[1], c2 = acc[2], c3 = acc[3];
        for (int64_t b = 0; b < nb; b++) {
            __m256i i0 = _mm256_setzero_si256(), i1 = i0, i2 = i0, i3 = i0;
            const int8_t *wb = pw + b * 256;
#pragma GCC unroll 8
            for (int g = 0; g < 8; g++) {
                const __m256i w = _mm256_loadu_si256((const __m256i *)(wb + g * 32));
                int32_t v0, v1, v2, v3;
                memcpy(&v0, x0 + b * 32 + g * 4, 4);
                memcpy(&v1, x1 + b * 32 + g * 4, 4);
                memcpy(&v2, x2 + b * 32 + g * 4, 4);
                memcpy(&v3, x3 + b * 32 + g * 4, 4);
                i0 = _mm256_dpbusd_epi32(i0, _mm256_set1_epi32(v0), w);
                i1 = _mm256_dpbusd_epi32(i1, _mm256_set1_epi32(v1), w);
                i2 = _mm256_dpbusd_epi32(i2, _mm256_set1_epi32(v2), w);
                i3 = _mm256_dpbusd_epi32(i3, _mm256_set1_epi32(v3), w);
            }
            const __m256i cr = _mm256_loadu_si256((const __m256i *)(corr + b * 8));
            const __m256 s = _mm256_loadu_ps(sw + b * 8);
            c0 = _mm256_fmadd_ps(_mm256_mul_ps(s, _mm256_set1_ps(x->d[tb[0] + b])), _mm256_cvtepi32_ps(_mm256_sub_epi32(i0, cr)), c0);
            c1 = _mm256_fmadd_ps(_mm256_mul_ps(s, _mm256_set1_ps(x->d[tb[1] + b])), _mm256_cvtepi32_ps(_mm256_sub_epi32(i1, cr)), c1);
            c2 = _mm256_fmadd_ps(_mm256_mul_ps(s, _mm256_set1_ps(x->d[tb[2] + b])), _mm256_cvtepi32_ps(_mm256_sub_epi32(i2, cr)), c2);
            c3 = _mm256_fmadd_ps(_mm256_mul_ps(s, _mm256_set1_ps(x->d[tb[3] + b])), _mm256_cvtepi32_ps(_mm256_sub_epi32(i3, cr)), c3);
        }
        acc[0] = c0, acc[1] = c1, acc[2] = c2, acc[3] = c3;
        for (int tt = 0; tt < nt; tt++) _mm256_mask_storeu_ps(out + (size_t)(t0 + tt) * out_stride, mask, acc[tt]);
    }
}

static void gemm8(int q4, const uint8_t *row0, uint64_t row_bytes, int nrows, const act_q8 *x, int64_t nb, int ntok,
                  float *out, size_t out_stride, void *scratch) {
    int8_t *pw = scratch;
    int32_t *corr = (int32_t *)(pw + nb * 256);
    float *sw = (float *)(corr + nb * 8);
    repack8(q4, row0, row_bytes, nrows, nb, pw, corr, sw);
    gemm8_compute(pw, corr, sw, x, nb, ntok, nrows, out, out_stride);
}

static void gemm8_q4_0(const uint8_t *row0, uint64_t row_bytes, int nrows, const act_q8 *x, int64_t nb, int ntok,
                       float *out, size_t out_stride, void *scratch) {
    gemm8(1, row0, row_bytes, nrows, x, nb, ntok, out, out_stride, scratch);
}

static void gemm8_q8_0(const uint8_t *row0, uint64_t row_bytes, int nrows, const act_q8 *x, int64_t nb, int ntok,
                       float *out, size_t out_stride, void *scratch) {
    gemm8(0, row0, row_bytes, nrows, x, nb, ntok, out, out_stride, scratch);
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

cpu_kernels kernels_pick(int force_scalar) {
    cpu_kernels k = {"scalar", q8_0_scalar, q4_0_scalar, f16_scalar, f32_scalar, dot_scalar, NULL, NULL, NULL, NULL, NULL,
                     axpy_scalar, geglu_scalar, softcap_scalar};
#if defined(__x86_64__) && defined(__GNUC__)
    if (!force_scalar && have_avx2()) {
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
        if (have_vnni()) {
            k.name = "avx512vnni";
            k.q8_0_gemm = gemm8_q8_0;
            k.q4_0_gemm = gemm8_q4_0;
            k.q4_0_q8 = q4_0_q8_vnni;
        }
    }
#else
    (void)force_scalar;
#endif
    return k;
}
