/* Row quantizers, bit-exact with the reference (see quantize.h).
 *
 * Each routine mirrors the reference's float evaluation order expression by
 * expression; comments point out the places where a natural rewrite would
 * change the last bit (int-to-float promotions, association of products,
 * the fp16 round trip of block scales). Blocks are assembled in a local
 * struct-free byte layout and copied out, so dst needs no alignment. */
#include "quant/quantize.h"

#include <math.h>
#include <string.h>

#include "quant/quant.h"

#define QK_K 256
#define GROUP_MAX_EPS 1e-15f

/* Round to nearest via the float magic number 1.5 * 2^23, exactly as the
 * reference does: ties go to even, and out-of-range inputs wrap the same
 * way (the reference only asserts the range in debug builds). */
static inline int nearest_int(float fval) {
    float val = fval + 12582912.f;
    int32_t i;
    memcpy(&i, &val, 4);
    return (i & 0x007fffff) - 0x00400000;
}

/* The reference converts floats to int8_t with a plain C cast, which x86-64
 * compiles to a 32-bit truncating conversion (NaN and out-of-range give
 * INT32_MIN) keeping the low byte. Only reachable with absurd scales (a
 * block whose largest value is subnormal), but then we agree too. */
static inline int8_t trunc_to_i8(float v) {
    int32_t i = (v >= -2147483648.0f && v < 2147483648.0f) ? (int32_t)v : INT32_MIN;
    return (int8_t)(uint8_t)((uint32_t)i & 0xff);
}

/* ---- q8_0: d = amax / 127, codes roundf(x / d) ---- */

static void q8_0_block(const float *x, uint8_t *y) {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) {
        const float v = fabsf(x[j]);
        amax = amax > v ? amax : v;
    }
    const float d = amax / 127;
    const float id = d ? 1.0f / d : 0.0f;
    quant_put_f16(y, d);
    for (int j = 0; j < 32; j++) y[2 + j] = (uint8_t)trunc_to_i8(roundf(x[j] * id));
}

/* ---- q4_0: d = (signed value of largest magnitude) / -8 ---- */

static void q4_0_block(const float *x, uint8_t *y) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; j++) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    const float d = max / -8;
    const float id = d ? 1.0f / d : 0.0f;
    quant_put_f16(y, d);
    for (int j = 0; j < 16; j++) {
        const int8_t c0 = trunc_to_i8(x[j] * id + 8.5f);
        const int8_t c1 = trunc_to_i8(x[16 + j] * id + 8.5f);
        const uint8_t q0 = (uint8_t)(c0 < 15 ? c0 : 15);
        const uint8_t q1 = (uint8_t)(c1 < 15 ? c1 : 15);
        y[2 + j] = (uint8_t)(q0 | (q1 << 4));
    }
}

/* ---- q5_0 / q5_1: 32 values of 5-bit codes (the fallbacks of q4_k and
 * q5_k for rows that are not whole super-blocks) ---- */

/* Codes c[0..32) (0..31) as 16 bytes of nibbles (value j low, j + 16 high)
 * and a little-endian 32-bit mask of fifth bits (bit j: value j). */
static void put_q5_codes(const uint8_t *c, uint8_t *qh, uint8_t *qs) {
    uint32_t h = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((c[j] & 15) | ((c[j + 16] & 15) << 4));
        h |= (uint32_t)(c[j] >> 4 & 1) << j;
        h |= (uint32_t)(c[j + 16] >> 4 & 1) << (j + 16);
    }
    memcpy(qh, &h, 4);
}

/* d = (signed value of largest magnitude) / -16; codes x / d + 16.5 truncated
 * (through int8, like the reference), at most 31. Layout: d, qh[4], qs[16]. */
static void q5_0_block(const float *x, uint8_t *y) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; j++) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    const float d = max / -16;
    const float id = d ? 1.0f / d : 0.0f;
    quant_put_f16(y, d);
    uint8_t c[32];
    for (int j = 0; j < 32; j++) {
        const int8_t v = trunc_to_i8(x[j] * id + 16.5f);
        c[j] = (uint8_t)(v < 31 ? v : 31);
    }
    put_q5_codes(c, y + 2, y + 6);
}

/* d = (max - min) / 31, m = min; codes (x - min) / d + 0.5 truncated.
 * Layout: d, m, qh[4], qs[16]. */
static void q5_1_block(const float *x, uint8_t *y) {
    float min = x[0], max = x[0];
    for (int j = 1; j < 32; j++) {
        if (x[j] < min) min = x[j];
        if (x[j] > max) max = x[j];
    }
    const float d = (max - min) / 31;
    const float id = d ? 1.0f / d : 0.0f;
    quant_put_f16(y, d);
    quant_put_f16(y + 2, min);
    uint8_t c[32];
    for (int j = 0; j < 32; j++) c[j] = (uint8_t)trunc_to_i8((x[j] - min) * id + 0.5f);
    put_q5_codes(c, y + 4, y + 8);
}

/* ---- q4_k: 8 sub-blocks of 32 with 6-bit scales and mins ---- */

/* Weighted least-squares search for a scale and min of n values quantized to
 * [0, nmax]: start from the min/max fit, then try nstep+1 stretched grids. */
static float make_qkx2_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L, float *the_min,
                              uint8_t *Laux, float rmin, float rdelta, int nstep) {
    float min = x[0];
    float max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        *the_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; ++i) {
        int l = nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)(l < 0 ? 0 : l > nmax ? nmax : l);
        float diff = scale * L[i] + min - x[i];
        diff = diff * diff;
        best_error += weights[i] * diff;
    }
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; ++i) {
            int l = nearest_int(iscale * (x[i] - min));
            l = l < 0 ? 0 : l > nmax ? nmax : l;
            Laux[i] = (uint8_t)l;
            float w = weights[i];
            sum_l += w * l;
            sum_l2 += w * l * l; /* (w*l)*l, not w*(l*l) */
            sum_xl += w * l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; ++i) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                diff = diff * diff;
                cur_error += weights[i] * diff;
            }
            if (cur_error < best_error) {
                memcpy(L, Laux, (size_t)n);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

static void k4_get_scale_min(int j, const uint8_t *q, uint8_t *d, uint8_t *m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
    }
}

/* The part q4_k and q5_k share: per 32-value sub-block a scale and min
 * search for codes in [0, nmax] (nmax 15 or 31, with the reference's
 * per-type grid: rmin -1 / 20 steps for q4_k, -0.5 / 15 steps for q5_k),
 * the scales and mins quantized to 6 bits against their maxima and packed
 * into head[4..16), d and dmin (f16) into head[0..4), then every code
 * chosen again against the stored (fp16-rounded, 6-bit) scales. A sub-block
 * whose stored scale is 0 keeps its search codes. */
static void kmin_scales_codes(const float *x, uint8_t *head, uint8_t *L, int nmax, float rmin, int nstep) {
    uint8_t Laux[32];
    float weights[32], mins[QK_K / 32], scales[QK_K / 32];
    uint8_t *sc = head + 4;
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < QK_K / 32; ++j) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
        float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; ++l) weights[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, 0.1f, nstep);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < QK_K / 32; ++j) {
        /* the reference stores nearest_int into uint8_t before clamping */
        uint8_t ls = (uint8_t)nearest_int(inv_scale * scales[j]);
        uint8_t lm = (uint8_t)nearest_int(inv_min * mins[j]);
        ls = ls < 63 ? ls : 63;
        lm = lm < 63 ? lm : 63;
        /* j < 4 writes bytes 0..7 before j >= 4 ors its high bits into them */
        if (j < 4) {
            sc[j] = ls;
            sc[j + 4] = lm;
        } else {
            sc[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
            sc[j - 4] |= (uint8_t)((ls >> 4) << 6);
            sc[j - 0] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    quant_put_f16(head, max_scale / 63.f);
    quant_put_f16(head + 2, max_min / 63.f);
    /* codes are chosen against the fp16-rounded scales actually stored */
    const float dd = quant_get_f16(head), dmin = quant_get_f16(head + 2);
    for (int j = 0; j < QK_K / 32; ++j) {
        uint8_t s, m;
        k4_get_scale_min(j, sc, &s, &m);
        const float d = dd * s;
        if (!d) continue;
        const float dm = dmin * m;
        for (int ii = 0; ii < 32; ++ii) {
            int l = nearest_int((x[32 * j + ii] + dm) / d);
            L[32 * j + ii] = (uint8_t)(l < 0 ? 0 : l > nmax ? nmax : l);
        }
    }
}

/* Layout: d (f16), dmin (f16), scales[12], qs[128]; byte 32c + l of qs holds
 * value 64c + l in its low nibble and value 64c + 32 + l in its high one. */
static void q4_k_block(const float *x, uint8_t *y) {
    uint8_t L[QK_K];
    kmin_scales_codes(x, y, L, 15, -1.f, 20);
    uint8_t *qs = y + 16;
    for (int j = 0; j < QK_K; j += 64) {
        for (int l = 0; l < 32; ++l) qs[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
        qs += 32;
    }
}

/* ---- q5_k: q4_k's sub-blocks with 5-bit codes ---- */

/* Layout: d, dmin, scales[12], qh[32], qs[128]: q4_k's nibbles, and bit
 * 2c (value 64c + l) and 2c + 1 (value 64c + 32 + l) of qh[l] the fifth
 * bits. */
static void q5_k_block(const float *x, uint8_t *y) {
    uint8_t L[QK_K];
    kmin_scales_codes(x, y, L, 31, -0.5f, 15);
    uint8_t *qh = y + 16, *qs = y + 48;
    memset(qh, 0, 32);
    for (int c = 0; c < 4; ++c) {
        for (int l = 0; l < 32; ++l) {
            const uint8_t lo = L[64 * c + l], hi = L[64 * c + 32 + l];
            qs[32 * c + l] = (uint8_t)((lo & 15) | ((hi & 15) << 4));
            qh[l] |= (uint8_t)(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
        }
    }
}

/* ---- q6_k: 16 sub-blocks of 16 with signed 8-bit scales ---- */

/* Scale search for n values quantized to [-nmax, nmax-1], weighted by x^2
 * (the reference's rmse_type 1 without an importance matrix). */
static float make_qx_quants(int n, int nmax, const float *x, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; ++i) {
        float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < GROUP_MAX_EPS) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        return 0.f;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = nearest_int(iscale * x[i]);
        l = l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l;
        L[i] = (int8_t)(l + nmax);
        float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; ++i) {
            int l = nearest_int(iscale * x[i]);
            l = l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l;
            float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; ++i) {
                int l = nearest_int(iscale * x[i]);
                L[i] = (int8_t)(nmax + (l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l));
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* Layout: ql[128], qh[64], scales[16] (int8), d (f16). */
static void q6_k_block(const float *x, uint8_t *y) {
    int8_t L[QK_K];
    float scales[QK_K / 16];
    float max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < QK_K / 16; ++ib) {
        const float scale = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
        scales[ib] = scale;
        const float abs_scale = fabsf(scale);
        if (abs_scale > max_abs_scale) {
            max_abs_scale = abs_scale;
            max_scale = scale;
        }
    }
    if (max_abs_scale < GROUP_MAX_EPS) {
        memset(y, 0, 210);
        quant_put_f16(y + 208, 0.f);
        return;
    }
    int8_t *sc = (int8_t *)(y + 192);
    float iscale = -128.f / max_scale;
    quant_put_f16(y + 208, 1 / iscale);
    for (int ib = 0; ib < QK_K / 16; ++ib) {
        int v = nearest_int(iscale * scales[ib]);
        sc[ib] = (int8_t)(uint8_t)(unsigned)(v < 127 ? v : 127);
    }
    const float dd = quant_get_f16(y + 208);
    for (int j = 0; j < QK_K / 16; ++j) {
        float d = dd * sc[j];
        if (!d) continue;
        for (int ii = 0; ii < 16; ++ii) {
            int l = nearest_int(x[16 * j + ii] / d);
            l = l < -32 ? -32 : l > 31 ? 31 : l;
            L[16 * j + ii] = (int8_t)(l + 32);
        }
    }
    uint8_t *ql = y, *qh = y + 128;
    for (int j = 0; j < QK_K; j += 128) {
        for (int l = 0; l < 32; ++l) {
            const uint8_t q1 = L[j + l + 0] & 0xF;
            const uint8_t q2 = L[j + l + 32] & 0xF;
            const uint8_t q3 = L[j + l + 64] & 0xF;
            const uint8_t q4 = L[j + l + 96] & 0xF;
            ql[l + 0] = (uint8_t)(q1 | (q3 << 4));
            ql[l + 32] = (uint8_t)(q2 | (q4 << 4));
            qh[l] = (uint8_t)((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                              ((L[j + l + 96] >> 4) << 6));
        }
        ql += 64;
        qh += 32;
    }
}

/* ---- dispatch ---- */

int quant_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

int quant_can_quantize(uint32_t type) {
    switch (type) {
    case QT_Q8_0: case QT_Q4_0: case QT_Q5_0: case QT_Q5_1: case QT_Q4_K: case QT_Q5_K: case QT_Q6_K:
    case QT_F16: case QT_BF16: case QT_F32:
        return 1;
    default:
        return 0;
    }
}

int quant_quantize_row(uint32_t type, const float *src, void *dst, int64_t n) {
    uint8_t *out = dst;
    const uint32_t bs = quant_block_size(type), ts = quant_type_size(type);
    if (!quant_can_quantize(type) || n < 0 || n % bs) return -1;
    switch (type) {
    case QT_F32:
        memcpy(out, src, (size_t)n * 4);
        return 0;
    case QT_F16:
        for (int64_t i = 0; i < n; i++) quant_put_f16(out + 2 * i, src[i]);
        return 0;
    case QT_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = quant_f32_to_bf16(src[i]);
            memcpy(out + 2 * i, &h, 2);
        }
        return 0;
    default:
        break;
    }
    for (int64_t b = 0; b < n / bs; b++) {
        const float *x = src + b * bs;
        uint8_t *y = out + (size_t)b * ts;
        switch (type) {
        case QT_Q8_0: q8_0_block(x, y); break;
        case QT_Q4_0: q4_0_block(x, y); break;
        case QT_Q5_0: q5_0_block(x, y); break;
        case QT_Q5_1: q5_1_block(x, y); break;
        case QT_Q4_K: q4_k_block(x, y); break;
        case QT_Q5_K: q5_k_block(x, y); break;
        case QT_Q6_K: q6_k_block(x, y); break;
        default: return -1;
        }
    }
    return 0;
}

/* ---- validation ---- */

static int f16_bad(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return (h & 0x7c00) == 0x7c00;
}

int quant_validate_row(uint32_t type, const void *data, uint64_t bytes, uint64_t *where) {
    const uint8_t *p = data;
    const uint32_t ts = quant_type_size(type);
    uint64_t dummy;
    if (!where) where = &dummy;
    *where = 0;
    if (!ts || bytes % ts) return -1;
    const uint64_t n = bytes / ts;
    for (uint64_t i = 0; i < n; i++) {
        const uint8_t *b = p + i * ts;
        int bad = 0;
        switch (type) {
        case QT_F32: {
            uint32_t u;
            memcpy(&u, b, 4);
            bad = (u & 0x7f800000u) == 0x7f800000u;
            break;
        }
        case QT_F16: bad = f16_bad(b); break;
        case QT_BF16: {
            uint16_t h;
            memcpy(&h, b, 2);
            bad = (h & 0x7f80) == 0x7f80;
            break;
        }
        case QT_Q4_0: case QT_Q5_0: case QT_Q8_0: bad = f16_bad(b); break;
        case QT_Q4_1: case QT_Q5_1: case QT_Q4_K: case QT_Q5_K: bad = f16_bad(b) || f16_bad(b + 2); break;
        case QT_Q6_K: bad = f16_bad(b + 208); break;
        default: break; /* types without float scales gem knows of: nothing to check */
        }
        if (bad) {
            *where = i;
            return -1;
        }
    }
    return 0;
}
