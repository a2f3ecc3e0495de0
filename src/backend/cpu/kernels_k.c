/* k-quant dot products on 8-bit activations (see kernels_k.h).
 *
 * Block layouts (ggml's, little-endian, f16 scales):
 *   q4_k (144 B): d, dmin, scales[12] (8 six-bit scales and mins), qs[128]:
 *                 byte 32c + l holds value 64c + l (low nibble, sub-block
 *                 2c) and 64c + 32 + l (high nibble, sub-block 2c + 1);
 *   q5_k (176 B): d, dmin, scales[12], qh[32], qs[128]: q4_k plus a fifth
 *                 bit, bit 2c of qh[l] for value 64c + l, 2c + 1 for
 *                 64c + 32 + l;
 *   q6_k (210 B): ql[128], qh[64], int8 scales[16], d: in half n (128
 *                 values) value 32k + l has four low bits from ql[64n + l
 *                 + 32 (k & 1)] (low nibble for k < 2, else high) and two
 *                 high bits 2k..2k+1 of qh[32n + l], code minus 32, scale
 *                 scales[v / 16].
 * Each kernel evaluates the canonical sum of kernels.h: the integer sums S
 * and M of a super-block are exact in int32 whatever the order (which is
 * what lets the SIMD kernels group them as they like), and the float steps
 * are the same two (q6_k one) fused multiply-adds per super-block in every
 * variant. */
#include "backend/cpu/kernels_k.h"

#include <math.h>
#include <string.h>

#include "quant/quant.h"

#define QK 256

/* The 6-bit scales and mins of the 8 sub-blocks of a q4_k/q5_k block. */
static void k4_unpack(const uint8_t *s, uint8_t *sc, uint8_t *m) {
    for (int j = 0; j < 4; j++) {
        sc[j] = s[j] & 63;
        m[j] = s[j + 4] & 63;
        sc[j + 4] = (uint8_t)((s[j + 8] & 15) | ((s[j] >> 6) << 4));
        m[j + 4] = (uint8_t)((s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4));
    }
}

/* M of a q4_k/q5_k block: sum_j m_j (sum of sub-block j's codes). */
static int32_t k4_min_sum(const uint8_t *m, const int16_t *bs) {
    int32_t acc = 0;
    for (int j = 0; j < 8; j++) acc += m[j] * (bs[2 * j] + bs[2 * j + 1]);
    return acc;
}

/* ---- portable ---- */

/* codes: round to nearest even like the SIMD conversion; NaN gives -128
 * as the SIMD packs do (the only way to reach -128) */
static void quantize_act_k_portable(const float *x, int64_t n, act_q8k *o, int64_t block0) {
    for (int64_t b = 0; b < n / QK; b++) {
        const float *xb = x + b * QK;
        int8_t *q = o->q + (block0 + b) * QK;
        int16_t *bs = o->bs + (block0 + b) * 16;
        float amax = 0;
        for (int i = 0; i < QK; i++) amax = fmaxf(amax, fabsf(xb[i]));
        const float id = amax > 0 ? 127.0f / amax : 0.0f;
        for (int i = 0; i < QK; i++) {
            const float v = xb[i] * id;
            q[i] = (int8_t)(v == v ? (int)nearbyintf(fminf(fmaxf(v, -128.0f), 127.0f)) : -128);
        }
        for (int g = 0; g < 16; g++) {
            int s = 0;
            for (int i = 0; i < 16; i++) s += q[16 * g + i];
            bs[g] = (int16_t)s;
        }
        o->d[block0 + b] = amax / 127.0f;
    }
}

/* q4_k and q5_k: qh NULL for q4_k */
static float k45_portable(const uint8_t *row, size_t bytes, int q5, const act_q8k *x, int64_t block0, int64_t n) {
    float acc = 0;
    for (int64_t b = 0; b < n / QK; b++) {
        const uint8_t *blk = row + b * bytes;
        const uint8_t *qh = q5 ? blk + 16 : NULL, *qs = blk + (q5 ? 48 : 16);
        const int8_t *a = x->q + (block0 + b) * QK;
        uint8_t sc[8], m[8];
        k4_unpack(blk + 4, sc, m);
        int32_t S = 0;
        for (int c = 0; c < 4; c++) {
            int32_t lo = 0, hi = 0;
            for (int l = 0; l < 32; l++) {
                const int ql = (qs[32 * c + l] & 15) + (qh && (qh[l] >> (2 * c) & 1) ? 16 : 0);
                const int qhi = (qs[32 * c + l] >> 4) + (qh && (qh[l] >> (2 * c + 1) & 1) ? 16 : 0);
                lo += ql * a[64 * c + l];
                hi += qhi * a[64 * c + 32 + l];
            }
            S += sc[2 * c] * lo + sc[2 * c + 1] * hi;
        }
        const int32_t M = k4_min_sum(m, x->bs + (block0 + b) * 16);
        const float dx = x->d[block0 + b];
        acc = fmaf((float)S, quant_get_f16(blk) * dx, acc);
        acc = fmaf(-(float)M, quant_get_f16(blk + 2) * dx, acc);
    }
    return acc;
}

static float q4_k_portable(const uint8_t *row, const act_q8k *x, int64_t block0, int64_t n) {
    return k45_portable(row, 144, 0, x, block0, n);
}

static float q5_k_portable(const uint8_t *row, const act_q8k *x, int64_t block0, int64_t n) {
    return k45_portable(row, 176, 1, x, block0, n);
}

static float q6_k_portable(const uint8_t *row, const act_q8k *x, int64_t block0, int64_t n) {
    float acc = 0;
    for (int64_t b = 0; b < n / QK; b++) {
        const uint8_t *blk = row + b * 210;
        const int8_t *sc = (const int8_t *)(blk + 192);
        const int8_t *a = x->q + (block0 + b) * QK;
        int32_t S = 0;
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = blk + 64 * h, *qh = blk + 128 + 32 * h;
            for (int k = 0; k < 4; k++) {
                int32_t s0 = 0, s1 = 0; /* values 16 apart share no scale */
                for (int l = 0; l < 32; l++) {
                    const int lowbits = k < 2 ? ql[l + 32 * k] & 15 : ql[l + 32 * (k - 2)] >> 4;
                    const int q = (lowbits | ((qh[l] >> (2 * k) & 3) << 4)) - 32;
                    if (l < 16) s0 += q * a[128 * h + 32 * k + l];
                    else s1 += q * a[128 * h + 32 * k + l];
                }
                S += sc[8 * h + 2 * k] * s0 + sc[8 * h + 2 * k + 1] * s1;
            }
        }
        acc = fmaf((float)S, quant_get_f16(blk + 208) * x->d[block0 + b], acc);
    }
    return acc;
}

void kernels_k_portable(cpu_kernels *k) {
    k->q4_k_q8k = q4_k_portable;
    k->q5_k_q8k = q5_k_portable;
    k->q6_k_q8k = q6_k_portable;
    k->quantize_act_k = quantize_act_k_portable;
}

/* ---- AVX2 ---- */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,fma,f16c")))

AVX2 static int32_t hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

AVX2 static float f16_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* one rounding, as fmaf: the scalar fused multiply-add */
AVX2 static float fma1(float a, float b, float c) {
    return _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(a), _mm_set_ss(b), _mm_set_ss(c)));
}

AVX2 static void quantize_act_k_avx2(const float *x, int64_t n, act_q8k *o, int64_t block0) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t b = 0; b < n / QK; b++) {
        const float *xb = x + b * QK;
        int8_t *q = o->q + (block0 + b) * QK;
        __m256 m = _mm256_setzero_ps();
        for (int i = 0; i < QK; i += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(xb + i)));
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const float amax = _mm_cvtss_f32(m4);
        const __m256 id = _mm256_set1_ps(amax > 0 ? 127.0f / amax : 0.0f);
        for (int i = 0; i < QK; i += 32) {
            const __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xb + i), id));
            const __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xb + i + 8), id));
            const __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xb + i + 16), id));
            const __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xb + i + 24), id));
            __m256i s8 = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
            /* undo the lane interleaving of the two packs */
            s8 = _mm256_permutevar8x32_epi32(s8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            _mm256_storeu_si256((__m256i *)(q + i), s8);
            /* sums of the two 16-code groups: byte pairs, then pairs of those */
            const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), s8), _mm256_set1_epi16(1));
            const __m128i h = _mm_add_epi32(_mm256_castsi256_si128(p), _mm_shuffle_epi32(_mm256_castsi256_si128(p), 0x4e));
            const __m128i g = _mm_add_epi32(_mm256_extracti128_si256(p, 1),
                                            _mm_shuffle_epi32(_mm256_extracti128_si256(p, 1), 0x4e));
            o->bs[(block0 + b) * 16 + i / 16] = (int16_t)(_mm_cvtsi128_si32(h) + _mm_extract_epi32(h, 1));
            o->bs[(block0 + b) * 16 + i / 16 + 1] = (int16_t)(_mm_cvtsi128_si32(g) + _mm_extract_epi32(g, 1));
        }
        o->d[block0 + b] = amax / 127.0f;
    }
}

/* S of a q4_k (q5 = 0) or q5_k block: per 64 values, the low nibbles (plus
 * the fifth bits) against a[64c..) and the high ones against a[64c + 32..),
 * byte products summed in pairs (maddubs: codes < 32, |a| <= 128, so
 * below 2^13) and then weighted by the sub-block's scale in pairs again
 * (madd), exact in int32. */
AVX2 static inline __attribute__((always_inline)) int32_t k45_block_avx2(const uint8_t *blk, const int q5,
                                                                        const int8_t *a, const uint8_t *sc) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), bit = _mm256_set1_epi8(0x10);
    const uint8_t *qs = blk + (q5 ? 48 : 16);
    __m256i hb = q5 ? _mm256_loadu_si256((const __m256i *)(blk + 16)) : _mm256_setzero_si256();
    __m256i s = _mm256_setzero_si256();
    for (int c = 0; c < 4; c++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
        __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        if (q5) { /* bits 2c and 2c + 1 of each qh byte (hb holds qh >> 2c) to bit 4 */
            lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(hb, 4), bit));
            hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(hb, 3), bit));
            hb = _mm256_srli_epi16(hb, 2);
        }
        const __m256i plo = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(a + 64 * c)));
        const __m256i phi = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(a + 64 * c + 32)));
        s = _mm256_add_epi32(s, _mm256_madd_epi16(plo, _mm256_set1_epi16(sc[2 * c])));
        s = _mm256_add_epi32(s, _mm256_madd_epi16(phi, _mm256_set1_epi16(sc[2 * c + 1])));
    }
    return hsum_i32(s);
}

AVX2 static inline __attribute__((always_inline)) float k45_avx2(const uint8_t *row, const int q5, const act_q8k *x,
                                                                 int64_t block0, int64_t n) {
    const size_t bytes = q5 ? 176 : 144;
    float acc = 0;
    for (int64_t b = 0; b < n / QK; b++) {
        const uint8_t *blk = row + b * bytes;
        uint8_t sc[8], m[8];
        k4_unpack(blk + 4, sc, m);
        const int32_t S = k45_block_avx2(blk, q5, x->q + (block0 + b) * QK, sc);
        const int32_t M = k4_min_sum(m, x->bs + (block0 + b) * 16);
        const float dx = x->d[block0 + b];
        acc = fma1((float)S, f16_at(blk) * dx, acc);
        acc = fma1(-(float)M, f16_at(blk + 2) * dx, acc);
    }
    return acc;
}

AVX2 static float q4_k_avx2(const uint8_t *row, const act_q8k *x, int64_t block0, int64_t n) {
    return k45_avx2(row, 0, x, block0, n);
}

AVX2 static float q5_k_avx2(const uint8_t *row, const act_q8k *x, int64_t block0, int64_t n) {
    return k45_avx2(row, 1, x, block0, n);
}

/* q6_k: the codes unsigned (0..63, maddubs-safe: pairs below 2^14), the
 * -32 offset applied once per sub-block through the code sums. */
AVX2 static float q6_k_avx2(const uint8_t *row, const act_q8k *x, int64_t block0, int64_t n) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(0x30);
    float acc = 0;
    for (int64_t b = 0; b < n / QK; b++) {
        const uint8_t *blk = row + b * 210;
        const int8_t *sc = (const int8_t *)(blk + 192);
        const int8_t *a = x->q + (block0 + b) * QK;
        const int16_t *bs = x->bs + (block0 + b) * 16;
        __m256i s = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i l0 = _mm256_loadu_si256((const __m256i *)(blk + 64 * h));
            const __m256i l1 = _mm256_loadu_si256((const __m256i *)(blk + 64 * h + 32));
            const __m256i qh = _mm256_loadu_si256((const __m256i *)(blk + 128 + 32 * h));
            __m256i q[4];
            q[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m2));
            q[1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m2));
            q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(qh, m2));
            q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                   _mm256_and_si256(_mm256_srli_epi16(qh, 2), m2));
            for (int k = 0; k < 4; k++) {
                const int j = 8 * h + 2 * k; /* values 0..15 of the group: scale j; 16..31: j + 1 */
                const __m256i p =
                    _mm256_maddubs_epi16(q[k], _mm256_loadu_si256((const __m256i *)(a + 128 * h + 32 * k)));
                const __m256i w = _mm256_set_m128i(_mm_set1_epi16(sc[j + 1]), _mm_set1_epi16(sc[j]));
                s = _mm256_add_epi32(s, _mm256_madd_epi16(p, w));
            }
        }
        int32_t off = 0;
        for (int j = 0; j < 16; j++) off += sc[j] * bs[j];
        const int32_t S = hsum_i32(s) - 32 * off;
        acc = fma1((float)S, f16_at(blk + 208) * x->d[block0 + b], acc);
    }
    return acc;
}

void kernels_k_avx2(cpu_kernels *k) {
    k->q4_k_q8k = q4_k_avx2;
    k->q5_k_q8k = q5_k_avx2;
    k->q6_k_q8k = q6_k_avx2;
    k->quantize_act_k = quantize_act_k_avx2;
}
#else
void kernels_k_avx2(cpu_kernels *k) { (void)k; }
#endif
