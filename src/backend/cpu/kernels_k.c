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

/* q4_k (q5 = 0) and q5_k: per 64 values the low nibbles against
 * a[64c..) with scale 2c and the high ones against a[64c + 32..) with
 * scale 2c + 1, each code plus 16 where its fifth bit is set (q5_k) */
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
                int32_t s0 = 0, s1 = 0; /* the 32 values' first and second 16 have scales 2k, 2k + 1 */
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
void kernels_kpack(const uint8_t *w, uint64_t row_bytes, int64_t nrows, int64_t nb, uint32_t block_bytes,
                   uint32_t *words) {
    const uint32_t kw = KERNELS_KWORDS(block_bytes);
    for (int64_t p = 0; p * 16 < nrows; p++)
        for (int r = 0; r < 16; r++) {
            /* a short last panel repeats its last row (panel_rows) */
            const int64_t row = p * 16 + r < nrows ? p * 16 + r : nrows - 1;
            const uint8_t *src = w + (uint64_t)row * row_bytes;
            for (int64_t b = 0; b < nb; b++) {
                uint32_t *dst = words + ((size_t)(p * nb + b) * kw) * 16 + r;
                const uint8_t *blk = src + (uint64_t)b * block_bytes;
                for (uint32_t i = 0; i < kw; i++) {
                    uint32_t v = 0;
                    memcpy(&v, blk + 4 * i, block_bytes - 4 * i < 4 ? block_bytes - 4 * i : 4);
                    dst[(size_t)i * 16] = v;
                }
            }
        }
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include "backend/cpu/panel16.h"

#define AVX2 __attribute__((target("avx2,fma,f16c")))

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
            const __m128i p0 = _mm256_castsi256_si128(p), p1 = _mm256_extracti128_si256(p, 1);
            const __m128i h = _mm_add_epi32(p0, _mm_shuffle_epi32(p0, 0x4e));
            const __m128i g = _mm_add_epi32(p1, _mm_shuffle_epi32(p1, 0x4e));
            o->bs[(block0 + b) * 16 + i / 16] = (int16_t)(_mm_cvtsi128_si32(h) + _mm_extract_epi32(h, 1));
            o->bs[(block0 + b) * 16 + i / 16 + 1] = (int16_t)(_mm_cvtsi128_si32(g) + _mm_extract_epi32(g, 1));
        }
        o->d[block0 + b] = amax / 127.0f;
    }
}

/* The 8 six-bit scales (sc) and mins (m) of a q4_k/q5_k block as bytes
 * 0..7 of two vectors, from the 12 packed bytes read as three words: the
 * low six bits of words 0 and 1 for sub-blocks 0..3, the nibbles of word
 * 2 with the top two bits of words 0 and 1 for sub-blocks 4..7. */
AVX2 static inline void k4_unpack_avx2(const uint8_t *s, __m128i *sc, __m128i *m) {
    uint32_t u[3];
    memcpy(u, s, 12);
    const uint32_t sc_lo = u[0] & 0x3f3f3f3fu, m_lo = u[1] & 0x3f3f3f3fu;
    const uint32_t sc_hi = (u[2] & 0x0f0f0f0fu) | ((u[0] >> 2) & 0x30303030u);
    const uint32_t m_hi = ((u[2] >> 4) & 0x0f0f0f0fu) | ((u[1] >> 2) & 0x30303030u);
    *sc = _mm_set_epi32(0, 0, (int)sc_hi, (int)sc_lo);
    *m = _mm_set_epi32(0, 0, (int)m_hi, (int)m_lo);
}

/* [S, M] of the int32 vectors s and m summed across their lanes (exact). */
AVX2 static inline __m128i sum2_i32(__m256i s, __m256i m) {
    const __m256i t = _mm256_hadd_epi32(s, m);
    const __m128i r = _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
    return _mm_hadd_epi32(r, r);
}

/* q4_k (q5 = 0) and q5_k: per 64 values the low nibbles (plus the fifth
 * bits) against a[64c..) and the high ones against a[64c + 32..), byte
 * products summed in pairs (maddubs: codes < 32 and |a| <= 128 keep them
 * below 2^13), then weighted by the sub-block's scale in pairs again
 * (madd; the scale broadcast to every int16 lane by a byte shuffle of the
 * scales widened to int16); M the 16-code sums against the mins, each min
 * taken twice (two sums per sub-block). S and M are exact in int32. */
AVX2 static inline __attribute__((always_inline)) float k45_avx2(const uint8_t *row, const int q5, const act_q8k *x,
                                                                 int64_t block0, int64_t n) {
    const size_t bytes = q5 ? 176 : 144;
    const __m256i m4 = _mm256_set1_epi8(0x0f), bit = _mm256_set1_epi8(0x10);
    const __m128i dup = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    float acc = 0;
    for (int64_t b = 0; b < n / QK; b++) {
        const uint8_t *blk = row + b * bytes;
        const int8_t *a = x->q + (block0 + b) * QK;
        __m128i sc8, m8;
        k4_unpack_avx2(blk + 4, &sc8, &m8);
        const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sc8));
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
            /* int16 lane j of sc16 (bytes 2j, 2j + 1) in every lane */
            const __m256i sl = _mm256_shuffle_epi8(sc16, _mm256_set1_epi16((short)(0x0100 * (4 * c + 1) + 4 * c)));
            const __m256i sh = _mm256_shuffle_epi8(sc16, _mm256_set1_epi16((short)(0x0100 * (4 * c + 3) + 4 * c + 2)));
            const __m256i plo = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(a + 64 * c)));
            const __m256i phi = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(a + 64 * c + 32)));
            s = _mm256_add_epi32(s, _mm256_add_epi32(_mm256_madd_epi16(plo, sl), _mm256_madd_epi16(phi, sh)));
        }
        const __m256i mins = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(m8, dup));
        const __m256i mv = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(x->bs + (block0 + b) * 16)), mins);
        const __m128i sm = sum2_i32(s, mv);
        const float dx = x->d[block0 + b];
        acc = fma1((float)_mm_cvtsi128_si32(sm), f16_at(blk) * dx, acc);
        acc = fma1(-(float)_mm_extract_epi32(sm, 1), f16_at(blk + 2) * dx, acc);
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
 * -32 offset applied once per sub-block through the code sums (32 times
 * sum_j sc_j bs_j, subtracted lane-wise before the one reduction). */
AVX2 static float q6_k_avx2(const uint8_t *row, const act_q8k *x, int64_t block0, int64_t n) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(0x30);
    float acc = 0;
    for (int64_t b = 0; b < n / QK; b++) {
        const uint8_t *blk = row + b * 210;
        const int8_t *a = x->q + (block0 + b) * QK;
        const __m128i sc8 = _mm_loadu_si128((const __m128i *)(blk + 192));
        __m256i s = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            /* this half's 8 scales as int16 in both lanes */
            const __m128i sc8h = _mm_loadl_epi64((const __m128i *)(blk + 192 + 8 * h));
            const __m256i sch = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(sc8h));
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
                /* values 0..15 of the group (low lane): scale 2k of the half; 16..31: 2k + 1 */
                const __m256i w = _mm256_shuffle_epi8(
                    sch, _mm256_set_m128i(_mm_set1_epi16((short)(0x0100 * (4 * k + 3) + 4 * k + 2)),
                                          _mm_set1_epi16((short)(0x0100 * (4 * k + 1) + 4 * k))));
                const __m256i p =
                    _mm256_maddubs_epi16(q[k], _mm256_loadu_si256((const __m256i *)(a + 128 * h + 32 * k)));
                s = _mm256_add_epi32(s, _mm256_madd_epi16(p, w));
            }
        }
        const __m256i off = _mm256_madd_epi16(_mm256_cvtepi8_epi16(sc8),
                                              _mm256_loadu_si256((const __m256i *)(x->bs + (block0 + b) * 16)));
        const __m128i sm = sum2_i32(_mm256_sub_epi32(s, _mm256_slli_epi32(off, 5)), _mm256_setzero_si256());
        acc = fma1((float)_mm_cvtsi128_si32(sm), f16_at(blk + 208) * x->d[block0 + b], acc);
    }
    return acc;
}

void kernels_k_avx2(cpu_kernels *k) {
    k->q4_k_q8k = q4_k_avx2;
    k->q5_k_q8k = q5_k_avx2;
    k->q6_k_q8k = q6_k_avx2;
    k->quantize_act_k = quantize_act_k_avx2;
}

/* ---- AVX512-VNNI: sixteen-row panels (panel16.h), one token or a tile ----
 *
 * A chunk of KC super-blocks of a panel is unpacked once into codes
 * grouped [super-block][sub-block][4-value group] x 16 rows (unsigned:
 * q4_k 0..15, q5_k 0..31, q6_k 0..63), the sub-block scales and mins as
 * int32 per row and d, dmin as floats per row; then every token of the
 * call runs over it. Per (row, token) and super-block: each sub-block's
 * code dot starts at zero (q6_k: at -32 times the sub-block's code sum,
 * so it ends as the dot of code - 32) and takes 8 (q6_k 4) vpdpbusd, is
 * weighted by its scale (vpmulld) into S; M is 8 vpdpwssd of the mins
 * (two int16 halves) with the pairs of 16-code sums. S and M are the exact
 * integers of kernels.h, and the float steps are its fused multiply-adds
 * (fnmadd for the min term: -(M dmin dx) + acc is fma(-M, dmin dx, acc)),
 * so a row's bits are the one-row kernels' whatever the tile. */
#define KC 4 /* super-blocks per unpacked chunk: 22 KiB, in L1 while the tokens pass */

typedef struct {
    __m512i w[KC][64];  /* codes: [sub-block j][group g] at 8j + g (q6_k: 4j + g) */
    __m512i sc[KC][16]; /* scales (q4_k/q5_k: 8) */
    __m512i m[KC][8];   /* q4_k/q5_k mins, m | m << 16 */
    __m512 d[KC], dmin[KC];
} kchunk;

/* Where a chunk's bytes come from: a panel's sixteen rows in the file's
 * layout (regrouped here, per call), or the panel packed at load
 * (kernels.h, KERNELS_KWORDS: the same 32-bit words, already grouped).
 * packed is a constant wherever these are inlined. */
typedef struct {
    const uint8_t *const *rows;
    __m512i roff;
    const __m512i *pw; /* packed: the panel's first super-block */
    int kw;            /* packed: words per super-block */
} ksrc;

/* bytes [at, at + 16) of super-block b (at a multiple of 4) of the 16
 * rows: o[k] = bytes at + 4k.. of row i in lane i (groups16x4) */
VNNI static inline __attribute__((always_inline)) void kgroups(const int packed, const ksrc *s, uint64_t bytes,
                                                               int64_t b, int at, __m512i o[4]) {
    if (packed)
        for (int k = 0; k < 4; k++) o[k] = _mm512_load_si512(s->pw + (size_t)b * s->kw + at / 4 + k);
    else
        groups16x4(s->rows, (uint64_t)b * bytes + (uint64_t)at, o);
}
/* bytes [at, at + 4) of super-block b of the 16 rows, one row a lane */
VNNI static inline __attribute__((always_inline)) __m512i kword(const int packed, const ksrc *s, uint64_t bytes,
                                                                int64_t b, int at) {
    return packed ? _mm512_load_si512(s->pw + (size_t)b * s->kw + at / 4)
                  : _mm512_i32gather_epi32(s->roff, s->rows[0] + (uint64_t)b * bytes + (uint64_t)at, 1);
}

/* A q4_k/q5_k super-block's 6-bit scales and mins from its three scale
 * words, one row a lane (k4_unpack_avx2's formulas): byte j of sc_lo
 * (j < 4) or sc_hi (j - 4) is sub-block j's scale, of m_lo / m_hi its min. */
VNNI static inline __attribute__((always_inline)) void k45_scales(__m512i u0, __m512i u1, __m512i u2, __m512i *sc_lo,
                                                                  __m512i *sc_hi, __m512i *m_lo, __m512i *m_hi) {
    const __m512i m6 = _mm512_set1_epi32(0x3f3f3f3f), m4 = _mm512_set1_epi32(0x0f0f0f0f),
                  top = _mm512_set1_epi32(0x30303030);
    *sc_lo = _mm512_and_si512(u0, m6);
    *m_lo = _mm512_and_si512(u1, m6);
    *sc_hi = _mm512_or_si512(_mm512_and_si512(u2, m4), _mm512_and_si512(_mm512_srli_epi32(u0, 2), top));
    *m_hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(u2, 4), m4), _mm512_and_si512(_mm512_srli_epi32(u1, 2), top));
}

/* The codes of group g of sub-blocks 2q (lo) and 2q + 1 (hi) from their
 * qs word o (low and high nibbles) and, for q5_k, qh word h (bits 2q and
 * 2q + 1 of each byte). */
VNNI static inline __attribute__((always_inline)) void k45_codes(const int q5, __m512i o, __m512i h, int q, __m512i *lo,
                                                                 __m512i *hi) {
    const __m512i low = _mm512_set1_epi8(0x0f), one = _mm512_set1_epi8(1);
    *lo = _mm512_and_si512(o, low);
    *hi = _mm512_and_si512(_mm512_srli_epi16(o, 4), low);
    if (q5) {
        *lo = _mm512_or_si512(*lo, _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(h, 2 * q), one), 4));
        *hi = _mm512_or_si512(*hi, _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(h, 2 * q + 1), one), 4));
    }
}

/* Super-blocks [b0, b0 + n) of a q4_k (q5 = 0) or q5_k panel into c. */
VNNI static inline __attribute__((always_inline)) void kpack45(const int packed, const int q5, const ksrc *src,
                                                               int64_t b0, int n, kchunk *c) {
    const uint64_t bytes = q5 ? 176 : 144;
    const int qs_at = q5 ? 48 : 16;
    const __m512i byte = _mm512_set1_epi32(0xff);
    for (int b = 0; b < n; b++) {
        const int64_t sb = b0 + b;
        /* d and dmin, then the scale words (k4_unpack_avx2's formulas, per row) */
        const __m512i h = kword(packed, src, bytes, sb, 0);
        c->d[b] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h));
        c->dmin[b] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(h, 16)));
        __m512i sc_lo, sc_hi, m_lo, m_hi;
        k45_scales(kword(packed, src, bytes, sb, 4), kword(packed, src, bytes, sb, 8), kword(packed, src, bytes, sb, 12),
                   &sc_lo, &sc_hi, &m_lo, &m_hi);
        for (int j = 0; j < 4; j++) {
            c->sc[b][j] = _mm512_and_si512(_mm512_srli_epi32(sc_lo, 8 * j), byte);
            c->sc[b][j + 4] = _mm512_and_si512(_mm512_srli_epi32(sc_hi, 8 * j), byte);
            const __m512i ml = _mm512_and_si512(_mm512_srli_epi32(m_lo, 8 * j), byte);
            const __m512i mh = _mm512_and_si512(_mm512_srli_epi32(m_hi, 8 * j), byte);
            c->m[b][j] = _mm512_or_si512(ml, _mm512_slli_epi32(ml, 16));
            c->m[b][j + 4] = _mm512_or_si512(mh, _mm512_slli_epi32(mh, 16));
        }
        /* codes: qs bytes 32q + 16h + 4k hold group 4h + k of sub-blocks 2q
         * (low nibbles) and 2q + 1 (high); qh bytes 16h + 4k the fifth bits
         * of the same groups, bit j for sub-block j */
        for (int hh = 0; hh < 2; hh++) {
            __m512i qh[4];
            if (q5) kgroups(packed, src, bytes, sb, 16 + 16 * hh, qh);
            for (int q = 0; q < 4; q++) {
                __m512i o[4];
                kgroups(packed, src, bytes, sb, qs_at + 32 * q + 16 * hh, o);
                for (int k = 0; k < 4; k++) {
                    const int g = 4 * hh + k;
                    __m512i lo, hi;
                    k45_codes(q5, o[k], q5 ? qh[k] : o[k], q, &lo, &hi);
                    c->w[b][8 * (2 * q) + g] = lo;
                    c->w[b][8 * (2 * q + 1) + g] = hi;
                }
            }
        }
    }
}

/* Super-blocks [b0, b0 + n) of a q6_k panel into c. Sub-block j (values
 * 16j..16j + 15) lies in half j / 8 at k = j % 8 / 2, l from 16 (j % 2):
 * low bits in ql bytes 64 half + 32 (k & 1) + l (low nibble for k < 2),
 * high bits 2k..2k+1 of qh bytes 32 half + l. */
VNNI static inline __attribute__((always_inline)) void kpack6(const int packed, const ksrc *src, int64_t b0, int n,
                                                              kchunk *c) {
    const __m512i low = _mm512_set1_epi8(0x0f), two = _mm512_set1_epi8(3);
    for (int b = 0; b < n; b++) {
        const int64_t sb = b0 + b;
        /* d: unpacked, bytes 206..209 (the last two scales and d: a gather
         * at 208 would read past the block); packed, word 52 (d and the
         * two bytes of padding) */
        const __m512i dw = packed ? kword(1, src, 210, sb, 208) : _mm512_srli_epi32(kword(0, src, 210, sb, 206), 16);
        c->d[b] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dw));
        for (int q = 0; q < 4; q++) {
            const __m512i s4 = kword(packed, src, 210, sb, 192 + 4 * q);
            for (int i = 0; i < 4; i++) /* byte i of the word, sign-extended */
                c->sc[b][4 * q + i] = _mm512_srai_epi32(_mm512_slli_epi32(s4, 24 - 8 * i), 24);
        }
        for (int half = 0; half < 2; half++) {
            for (int part = 0; part < 2; part++) { /* l in [16 part, 16 part + 16) */
                __m512i qh[4], l0[4], l1[4];
                kgroups(packed, src, 210, sb, 128 + 32 * half + 16 * part, qh);
                kgroups(packed, src, 210, sb, 64 * half + 16 * part, l0);      /* ql for k = 0, 2 */
                kgroups(packed, src, 210, sb, 64 * half + 32 + 16 * part, l1); /* ql for k = 1, 3 */
                for (int k = 0; k < 4; k++) {
                    const int j = 8 * half + 2 * k + part;
                    for (int g = 0; g < 4; g++) {
                        const __m512i lb = k & 1 ? l1[g] : l0[g];
                        const __m512i lo4 =
                            _mm512_and_si512(k < 2 ? lb : _mm512_srli_epi16(lb, 4), low);
                        const __m512i hi2 = _mm512_and_si512(_mm512_srli_epi16(qh[g], 2 * k), two);
                        c->w[b][4 * j + g] = _mm512_or_si512(lo4, _mm512_slli_epi16(hi2, 4));
                    }
                }
            }
        }
    }
}

/* Tokens [t0, t0 + T) against a chunk (super-blocks b0..b0 + n): the
 * running sums start at zero on the first chunk and continue from out
 * (stored f32, so exactly) on the next ones. */
VNNI static inline __attribute__((always_inline)) void ktokens(const int q6, const kchunk *c, int n, const act_q8k *x,
                                                               int64_t nb, int64_t b0, int64_t t0, const int T,
                                                               int first, float *out, size_t stride, __mmask16 mask) {
    __m512 acc[4];
#pragma GCC unroll 4
    for (int t = 0; t < T; t++)
        acc[t] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mask, out + (size_t)(t0 + t) * stride);
    for (int b = 0; b < n; b++) {
        const int8_t *a[4];
        const int16_t *bs[4];
        __m512i S[4];
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            const int64_t xb = (t0 + t) * nb + b0 + b;
            a[t] = x->q + xb * QK;
            bs[t] = x->bs + xb * 16;
            S[t] = _mm512_setzero_si512();
        }
        const int nsub = q6 ? 16 : 8, ng = q6 ? 4 : 8;
        for (int j = 0; j < nsub; j++) {
            __m512i s[4];
#pragma GCC unroll 4
            for (int t = 0; t < T; t++) s[t] = q6 ? _mm512_set1_epi32(-32 * bs[t][j]) : _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int g = 0; g < ng; g++)
#pragma GCC unroll 4
                for (int t = 0; t < T; t++) {
                    int32_t v;
                    memcpy(&v, a[t] + (q6 ? 16 : 32) * j + 4 * g, 4);
                    s[t] = _mm512_dpbusd_epi32(s[t], c->w[b][ng * j + g], _mm512_set1_epi32(v));
                }
#pragma GCC unroll 4
            for (int t = 0; t < T; t++) S[t] = _mm512_add_epi32(S[t], _mm512_mullo_epi32(s[t], c->sc[b][j]));
        }
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            const __m512 dx = _mm512_set1_ps(x->d[(t0 + t) * nb + b0 + b]);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S[t]), _mm512_mul_ps(c->d[b], dx), acc[t]);
            if (!q6) {
                __m512i M = _mm512_setzero_si512();
                for (int j = 0; j < 8; j++) {
                    int32_t pair;
                    memcpy(&pair, bs[t] + 2 * j, 4);
                    M = _mm512_dpwssd_epi32(M, c->m[b][j], _mm512_set1_epi32(pair));
                }
                acc[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(M), _mm512_mul_ps(c->dmin[b], dx), acc[t]);
            }
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) _mm512_mask_storeu_ps(out + (size_t)(t0 + t) * stride, mask, acc[t]);
}

/* One panel of nr rows (type: 4 q4_k, 5 q5_k, 6 q6_k) against ntok tokens
 * into o, a chunk of KC super-blocks at a time through c. */
VNNI static inline __attribute__((always_inline)) void kpanel(const int packed, const int type, const ksrc *src, int nr,
                                                              const act_q8k *x, int64_t nb, int ntok, float *o,
                                                              size_t stride, kchunk *c) {
    const __mmask16 mask = (__mmask16)((1u << nr) - 1);
    for (int64_t b0 = 0; b0 < nb; b0 += KC) {
        const int n = nb - b0 < KC ? (int)(nb - b0) : KC;
        if (type == 6) kpack6(packed, src, b0, n, c);
        else kpack45(packed, type == 5, src, b0, n, c);
        /* the same per-token code at every width: 4, then 2, 1 */
        int t = 0;
        for (; t + 4 <= ntok; t += 4) ktokens(type == 6, c, n, x, nb, b0, t, 4, b0 == 0, o, stride, mask);
        if (ntok - t >= 2) ktokens(type == 6, c, n, x, nb, b0, t, 2, b0 == 0, o, stride, mask), t += 2;
        if (ntok - t >= 1) ktokens(type == 6, c, n, x, nb, b0, t, 1, b0 == 0, o, stride, mask);
    }
}

/* type: 4 (q4_k), 5 (q5_k) or 6 (q6_k) */
VNNI static inline __attribute__((always_inline)) void kpanels(const int type, const uint8_t *w, uint64_t row_bytes,
                                                               int64_t nrows, const act_q8k *x, int64_t nb, int ntok,
                                                               float *out, size_t stride) {
    kchunk c;
    for (int64_t r0 = 0; r0 < nrows; r0 += MM_ROWS) {
        const int nr = nrows - r0 < MM_ROWS ? (int)(nrows - r0) : MM_ROWS;
        const uint8_t *rows[MM_ROWS];
        int32_t roff[MM_ROWS];
        panel_rows(w, row_bytes, r0, nr, rows, roff);
        const ksrc src = {rows, _mm512_loadu_si512(roff), NULL, 0};
        kpanel(0, type, &src, nr, x, nb, ntok, out + r0, stride, &c);
    }
}

#ifndef KF_PF
/* super-blocks ahead that kfused1 prefetches: 2 to 8 measured alike on
 * gemma4-1b q4_k_m, 1 like none (bench/results/cpu-fused-1b-q4km-2026-12-07b.json) */
#define KF_PF 4
#endif

/* One token against a packed panel, each super-block's codes made in
 * registers and used at once (kpack's chunk, 5 KiB a super-block stored and
 * reloaded, made a decode step bound by that traffic, not by memory). The
 * integer sums S and M are exact in any order, so only ktokens' float
 * steps must be repeated, in its order: a row's bits are ktokens' for T =
 * 1 (test_cpu_tile holds tiles to one-token rows). */
VNNI static inline __attribute__((always_inline)) void kfused1(const int type, const ksrc *src, const act_q8k *x,
                                                               int64_t nb, float *o, __mmask16 mask) {
    const __m512i low = _mm512_set1_epi8(0x0f), byte = _mm512_set1_epi32(0xff);
    const uint64_t bytes = type == 6 ? 210 : type == 5 ? 176 : 144;
    __m512 acc = _mm512_setzero_ps();
    for (int64_t sb = 0; sb < nb; sb++) {
        /* super-block sb + KF_PF on its way: one super-block's work is
         * longer than the reorder window, so its loads would not start
         * before this one's arithmetic retires (past the panel's end: the
         * next panel's, which follows it in memory) */
        for (int l = 0; l < src->kw; l++) _mm_prefetch((const char *)(src->pw + (size_t)(sb + KF_PF) * src->kw + l), _MM_HINT_T0);
        const int8_t *a = x->q + sb * QK;
        const int16_t *bs = x->bs + sb * 16;
        const __m512 dx = _mm512_set1_ps(x->d[sb]);
        __m512i S = _mm512_setzero_si512();
        if (type == 6) {
            const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(kword(1, src, 210, sb, 208)));
            /* the 16 scales as 4 words of 4 bytes, each sign-extended where
             * it is used (16 registers of scales would spill the codes) */
            __m512i s4[4];
#pragma GCC unroll 16
            for (int q = 0; q < 4; q++) s4[q] = kword(1, src, 210, sb, 192 + 4 * q);
            const __m512i two = _mm512_set1_epi8(3);
#pragma GCC unroll 16
            for (int half = 0; half < 2; half++)
#pragma GCC unroll 16
                for (int part = 0; part < 2; part++) {
                    __m512i qh[4], l0[4], l1[4];
                    kgroups(1, src, 210, sb, 128 + 32 * half + 16 * part, qh);
                    kgroups(1, src, 210, sb, 64 * half + 16 * part, l0);
                    kgroups(1, src, 210, sb, 64 * half + 32 + 16 * part, l1);
#pragma GCC unroll 16
                    for (int k = 0; k < 4; k++) {
                        const int j = 8 * half + 2 * k + part;
                        __m512i sj = _mm512_set1_epi32(-32 * bs[j]);
#pragma GCC unroll 16
                        for (int g = 0; g < 4; g++) {
                            const __m512i lb = k & 1 ? l1[g] : l0[g];
                            const __m512i lo4 = _mm512_and_si512(k < 2 ? lb : _mm512_srli_epi16(lb, 4), low);
                            const __m512i hi2 = _mm512_and_si512(_mm512_srli_epi16(qh[g], 2 * k), two);
                            int32_t v;
                            memcpy(&v, a + 16 * j + 4 * g, 4);
                            sj = _mm512_dpbusd_epi32(sj, _mm512_or_si512(lo4, _mm512_slli_epi16(hi2, 4)), _mm512_set1_epi32(v));
                        }
                        const __m512i scj = _mm512_srai_epi32(_mm512_slli_epi32(s4[j / 4], 24 - 8 * (j % 4)), 24);
                        S = _mm512_add_epi32(S, _mm512_mullo_epi32(sj, scj));
                    }
                }
            acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S), _mm512_mul_ps(d, dx), acc);
            continue;
        }
        const int q5 = type == 5, qs_at = q5 ? 48 : 16;
        const __m512i h = kword(1, src, bytes, sb, 0);
        const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h));
        const __m512 dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(h, 16)));
        __m512i sc_lo, sc_hi, m_lo, m_hi;
        k45_scales(kword(1, src, bytes, sb, 4), kword(1, src, bytes, sb, 8), kword(1, src, bytes, sb, 12), &sc_lo, &sc_hi,
                   &m_lo, &m_hi);
        __m512i M = _mm512_setzero_si512();
        __m512i qh[2][4];
        if (q5) kgroups(1, src, bytes, sb, 16, qh[0]), kgroups(1, src, bytes, sb, 32, qh[1]);
#pragma GCC unroll 16
        for (int q = 0; q < 4; q++) {
            /* sub-blocks 2q (low nibbles) and 2q + 1 (high): groups 0-3 from
             * bytes 32q.., 4-7 from 32q + 16.. */
            __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
#pragma GCC unroll 16
            for (int hh = 0; hh < 2; hh++) {
                __m512i ob[4];
                kgroups(1, src, bytes, sb, qs_at + 32 * q + 16 * hh, ob);
#pragma GCC unroll 16
                for (int k = 0; k < 4; k++) {
                    const int g = 4 * hh + k;
                    __m512i lo, hi;
                    k45_codes(q5, ob[k], q5 ? qh[hh][k] : ob[k], q, &lo, &hi);
                    int32_t v0, v1;
                    memcpy(&v0, a + 32 * (2 * q) + 4 * g, 4);
                    memcpy(&v1, a + 32 * (2 * q + 1) + 4 * g, 4);
                    s0 = _mm512_dpbusd_epi32(s0, lo, _mm512_set1_epi32(v0));
                    s1 = _mm512_dpbusd_epi32(s1, hi, _mm512_set1_epi32(v1));
                }
            }
            /* sub-block j's scale and min: byte j % 4 of the lo (j < 4) or hi word */
            const int j0 = 2 * q, j1 = 2 * q + 1;
            const __m512i sc0 = _mm512_and_si512(_mm512_srli_epi32(j0 < 4 ? sc_lo : sc_hi, 8 * (j0 % 4)), byte);
            const __m512i sc1 = _mm512_and_si512(_mm512_srli_epi32(j1 < 4 ? sc_lo : sc_hi, 8 * (j1 % 4)), byte);
            S = _mm512_add_epi32(S, _mm512_add_epi32(_mm512_mullo_epi32(s0, sc0), _mm512_mullo_epi32(s1, sc1)));
#pragma GCC unroll 16
            for (int j = j0; j <= j1; j++) {
                const __m512i ml = _mm512_and_si512(_mm512_srli_epi32(j < 4 ? m_lo : m_hi, 8 * (j % 4)), byte);
                int32_t pair;
                memcpy(&pair, bs + 2 * j, 4);
                M = _mm512_dpwssd_epi32(M, _mm512_or_si512(ml, _mm512_slli_epi32(ml, 16)), _mm512_set1_epi32(pair));
            }
        }
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S), _mm512_mul_ps(d, dx), acc);
        acc = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(M), _mm512_mul_ps(dmin, dx), acc);
    }
    _mm512_mask_storeu_ps(o, mask, acc);
}

/* The packed matrix's panels [p0, ...) for rows [16 p0, 16 p0 + nrows). */
VNNI static inline __attribute__((always_inline)) void kpanels_packed(const int type, const uint32_t *words, int64_t p0,
                                                                      int64_t nrows, const act_q8k *x, int64_t nb,
                                                                      int ntok, float *out, size_t stride) {
    kchunk c;
    const int kw = KERNELS_KWORDS(type == 6 ? 210 : type == 5 ? 176 : 144);
    for (int64_t r0 = 0, p = p0; r0 < nrows; r0 += MM_ROWS, p++) {
        const int nr = nrows - r0 < MM_ROWS ? (int)(nrows - r0) : MM_ROWS;
        const ksrc src = {NULL, _mm512_setzero_si512(), (const __m512i *)(words + (size_t)p * (size_t)nb * kw * 16), kw};
        if (ntok == 1) kfused1(type, &src, x, nb, out + r0, (__mmask16)((1u << nr) - 1));
        else kpanel(1, type, &src, nr, x, nb, ntok, out + r0, stride, &c);
    }
}

VNNI static void q4_k_mm_vnni(const uint8_t *w, uint64_t row_bytes, int64_t nrows, const act_q8k *x, int64_t nb,
                              int ntok, float *out, size_t stride) {
    kpanels(4, w, row_bytes, nrows, x, nb, ntok, out, stride);
}

VNNI static void q5_k_mm_vnni(const uint8_t *w, uint64_t row_bytes, int64_t nrows, const act_q8k *x, int64_t nb,
                              int ntok, float *out, size_t stride) {
    kpanels(5, w, row_bytes, nrows, x, nb, ntok, out, stride);
}

VNNI static void q6_k_mm_vnni(const uint8_t *w, uint64_t row_bytes, int64_t nrows, const act_q8k *x, int64_t nb,
                              int ntok, float *out, size_t stride) {
    kpanels(6, w, row_bytes, nrows, x, nb, ntok, out, stride);
}

VNNI static void q4_k_mmp_vnni(const uint32_t *words, int64_t p0, int64_t nrows, const act_q8k *x, int64_t nb, int ntok,
                               float *out, size_t stride) {
    kpanels_packed(4, words, p0, nrows, x, nb, ntok, out, stride);
}
VNNI static void q5_k_mmp_vnni(const uint32_t *words, int64_t p0, int64_t nrows, const act_q8k *x, int64_t nb, int ntok,
                               float *out, size_t stride) {
    kpanels_packed(5, words, p0, nrows, x, nb, ntok, out, stride);
}
VNNI static void q6_k_mmp_vnni(const uint32_t *words, int64_t p0, int64_t nrows, const act_q8k *x, int64_t nb, int ntok,
                               float *out, size_t stride) {
    kpanels_packed(6, words, p0, nrows, x, nb, ntok, out, stride);
}

void kernels_k_vnni(cpu_kernels *k) {
    k->q4_k_mm = q4_k_mm_vnni;
    k->q5_k_mm = q5_k_mm_vnni;
    k->q6_k_mm = q6_k_mm_vnni;
    k->q4_k_mmp = q4_k_mmp_vnni;
    k->q5_k_mmp = q5_k_mmp_vnni;
    k->q6_k_mmp = q6_k_mmp_vnni;
}
#else
void kernels_k_avx2(cpu_kernels *k) { (void)k; }
void kernels_k_vnni(cpu_kernels *k) { (void)k; }
#endif
