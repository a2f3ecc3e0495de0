/* Type table and reference dequantizers (see quant.h).
 *
 * Block layouts follow the ggml definitions; all multi-byte fields are
 * little-endian and read with memcpy (blocks inside a GGUF file carry no
 * alignment guarantee beyond one byte). Every expression below mirrors the
 * reference's evaluation order: e.g. the K formats compute d*sc and dmin*m in
 * float first and then d1*q - m1, Q6_K computes (d*sc)*q. Changing the order
 * changes the last bit. */
#include "quant/quant.h"

#include <ctype.h>
#include <string.h>

typedef struct {
    const char *name;
    uint32_t block;
    uint32_t size;
} quant_info;

static const quant_info quant_table[QT_COUNT] = {
    [0] = {"f32", 1, 4},         [1] = {"f16", 1, 2},
    [2] = {"q4_0", 32, 18},      [3] = {"q4_1", 32, 20},
    [6] = {"q5_0", 32, 22},      [7] = {"q5_1", 32, 24},
    [8] = {"q8_0", 32, 34},      [9] = {"q8_1", 32, 36},
    [10] = {"q2_k", 256, 84},    [11] = {"q3_k", 256, 110},
    [12] = {"q4_k", 256, 144},   [13] = {"q5_k", 256, 176},
    [14] = {"q6_k", 256, 210},   [15] = {"q8_k", 256, 292},
    [16] = {"iq2_xxs", 256, 66}, [17] = {"iq2_xs", 256, 74},
    [18] = {"iq3_xxs", 256, 98}, [19] = {"iq1_s", 256, 50},
    [20] = {"iq4_nl", 32, 18},   [21] = {"iq3_s", 256, 110},
    [22] = {"iq2_s", 256, 82},   [23] = {"iq4_xs", 256, 136},
    [24] = {"i8", 1, 1},         [25] = {"i16", 1, 2},
    [26] = {"i32", 1, 4},        [27] = {"i64", 1, 8},
    [28] = {"f64", 1, 8},        [29] = {"iq1_m", 256, 56},
    [30] = {"bf16", 1, 2},       [34] = {"tq1_0", 256, 54},
    [35] = {"tq2_0", 256, 66},   [39] = {"mxfp4", 32, 17},
    [40] = {"nvfp4", 64, 36},    [41] = {"q1_0", 128, 18},
    [42] = {"q2_0", 64, 18},
};

const char *quant_type_name(uint32_t type) {
    return type < QT_COUNT ? quant_table[type].name : NULL;
}

int quant_type_from_name(const char *name) {
    for (uint32_t t = 0; t < QT_COUNT; t++) {
        const char *n = quant_table[t].name;
        if (!n) continue;
        size_t i = 0;
        while (n[i] && name[i] && tolower((unsigned char)name[i]) == n[i]) i++;
        if (!n[i] && !name[i]) return (int)t;
    }
    return -1;
}

uint32_t quant_block_size(uint32_t type) {
    return type < QT_COUNT ? quant_table[type].block : 0;
}

uint32_t quant_type_size(uint32_t type) {
    return type < QT_COUNT ? quant_table[type].size : 0;
}

int quant_type_supported(uint32_t type) {
    switch (type) {
    case QT_F32: case QT_F16: case QT_BF16: case QT_Q4_0: case QT_Q4_1:
    case QT_Q5_0: case QT_Q5_1: case QT_Q8_0: case QT_Q4_K: case QT_Q5_K:
    case QT_Q6_K:
        return 1;
    default:
        return 0;
    }
}

int quant_row_bytes(uint32_t type, int64_t n, uint64_t *bytes) {
    uint32_t bs = quant_block_size(type);
    if (!bs || n < 0 || n % bs) return -1;
    *bytes = (uint64_t)(n / bs) * quant_type_size(type);
    return 0;
}

/* ---- scalar conversions ---- */

static float f32_from_bits(uint32_t bits) {
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static uint32_t f32_bits(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    return x;
}

float quant_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    uint32_t bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign;
    } else {
        /* subnormal: renormalise */
        int e = -1;
        do { man <<= 1; e++; } while (!(man & 0x400));
        bits = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ff) << 13);
    }
    return f32_from_bits(bits);
}

uint16_t quant_f32_to_f16(float f) {
    uint32_t x = f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t exp = (x >> 23) & 0xff;
    uint32_t man = x & 0x7fffff;
    if (exp == 0xff) return (uint16_t)(sign | 0x7c00 | (man ? 0x200 | (man >> 13) : 0));
    int32_t e = (int32_t)exp - 127 + 15;
    if (e >= 0x1f) return (uint16_t)(sign | 0x7c00);
    if (e <= 0) {
        if (e < -10) return (uint16_t)sign;
        man |= 0x800000;
        uint32_t shift = (uint32_t)(14 - e);
        uint32_t half = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1);
        uint32_t mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = ((uint32_t)e << 10) | (man >> 13);
    uint32_t rem = man & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) half++; /* may carry into inf: correct */
    return (uint16_t)(sign | half);
}

float quant_bf16_to_f32(uint16_t h) { return f32_from_bits((uint32_t)h << 16); }

uint16_t quant_f32_to_bf16(float f) {
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffff) > 0x7f800000) return (uint16_t)((x >> 16) | 64);
    return (uint16_t)((x + (0x7fff + ((x >> 16) & 1))) >> 16);
}

float quant_get_f16(const void *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return quant_f16_to_f32(h);
}

void quant_put_f16(void *p, float v) {
    uint16_t h = quant_f32_to_f16(v);
    memcpy(p, &h, 2);
}

/* ---- block dequantizers: one block of the type to float ---- */

static void dq_q4_0(const uint8_t *b, float *y) {
    const float d = quant_get_f16(b);
    const uint8_t *qs = b + 2;
    for (int j = 0; j < 16; j++) {
        const int x0 = (qs[j] & 0x0f) - 8;
        const int x1 = (qs[j] >> 4) - 8;
        y[j] = x0 * d;
        y[j + 16] = x1 * d;
    }
}

static void dq_q4_1(const uint8_t *b, float *y) {
    const float d = quant_get_f16(b);
    const float m = quant_get_f16(b + 2);
    const uint8_t *qs = b + 4;
    for (int j = 0; j < 16; j++) {
        const int x0 = qs[j] & 0x0f;
        const int x1 = qs[j] >> 4;
        y[j] = x0 * d + m;
        y[j + 16] = x1 * d + m;
    }
}

static void dq_q5_0(const uint8_t *b, float *y) {
    const float d = quant_get_f16(b);
    uint32_t qh;
    memcpy(&qh, b + 2, 4);
    const uint8_t *qs = b + 6;
    for (int j = 0; j < 16; j++) {
        const int hi0 = (int)((qh >> j) << 4) & 0x10;
        const int hi1 = (int)(qh >> (j + 12)) & 0x10;
        const int x0 = ((qs[j] & 0x0f) | hi0) - 16;
        const int x1 = ((qs[j] >> 4) | hi1) - 16;
        y[j] = x0 * d;
        y[j + 16] = x1 * d;
    }
}

static void dq_q5_1(const uint8_t *b, float *y) {
    const float d = quant_get_f16(b);
    const float m = quant_get_f16(b + 2);
    uint32_t qh;
    memcpy(&qh, b + 4, 4);
    const uint8_t *qs = b + 8;
    for (int j = 0; j < 16; j++) {
        const int hi0 = (int)((qh >> j) << 4) & 0x10;
        const int hi1 = (int)(qh >> (j + 12)) & 0x10;
        const int x0 = (qs[j] & 0x0f) | hi0;
        const int x1 = (qs[j] >> 4) | hi1;
        y[j] = x0 * d + m;
        y[j + 16] = x1 * d + m;
    }
}

static void dq_q8_0(const uint8_t *b, float *y) {
    const float d = quant_get_f16(b);
    const int8_t *qs = (const int8_t *)(b + 2);
    for (int j = 0; j < 32; j++) y[j] = qs[j] * d;
}

/* 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes. */
static void k4_scale_min(int j, const uint8_t *s, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (uint8_t)((s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4));
        *m = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

/* Scale and min of sub-blocks 2c (low nibbles) and 2c+1 (high nibbles). */
static void k4_pair(int c, const uint8_t *scales, float d, float dmin, float *d1, float *m1, float *d2, float *m2) {
    uint8_t sc, m;
    k4_scale_min(2 * c, scales, &sc, &m);
    *d1 = d * sc;
    *m1 = dmin * m;
    k4_scale_min(2 * c + 1, scales, &sc, &m);
    *d2 = d * sc;
    *m2 = dmin * m;
}

static void dq_q4_k(const uint8_t *b, float *y) {
    const float d = quant_get_f16(b);
    const float dmin = quant_get_f16(b + 2);
    const uint8_t *scales = b + 4;
    const uint8_t *qs = b + 16;
    for (int c = 0; c < 4; c++) {
        float d1, m1, d2, m2;
        k4_pair(c, scales, d, dmin, &d1, &m1, &d2, &m2);
        for (int l = 0; l < 32; l++) y[64 * c + l] = d1 * (qs[32 * c + l] & 0x0f) - m1;
        for (int l = 0; l < 32; l++) y[64 * c + 32 + l] = d2 * (qs[32 * c + l] >> 4) - m2;
    }
}

static void dq_q5_k(const uint8_t *b, float *y) {
    const float d = quant_get_f16(b);
    const float dmin = quant_get_f16(b + 2);
    const uint8_t *scales = b + 4;
    const uint8_t *qh = b + 16;
    const uint8_t *qs = b + 48;
    for (int c = 0; c < 4; c++) {
        float d1, m1, d2, m2;
        k4_pair(c, scales, d, dmin, &d1, &m1, &d2, &m2);
        const uint8_t lo_bit = (uint8_t)(1u << (2 * c)), hi_bit = (uint8_t)(1u << (2 * c + 1));
        for (int l = 0; l < 32; l++)
            y[64 * c + l] = d1 * ((qs[32 * c + l] & 0x0f) + (qh[l] & lo_bit ? 16 : 0)) - m1;
        for (int l = 0; l < 32; l++)
            y[64 * c + 32 + l] = d2 * ((qs[32 * c + l] >> 4) + (qh[l] & hi_bit ? 16 : 0)) - m2;
    }
}

static void dq_q6_k(const uint8_t *b, float *y) {
    const float d = quant_get_f16(b + 208);
    for (int n = 0; n < 2; n++) {
        const uint8_t *ql = b + 64 * n;
        const uint8_t *qh = b + 128 + 32 * n;
        const int8_t *sc = (const int8_t *)(b + 192 + 8 * n);
        float *yy = y + 128 * n;
        for (int l = 0; l < 32; l++) {
            const int is = l / 16;
            const int q1 = ((ql[l] & 0x0f) | ((qh[l] & 3) << 4)) - 32;
            const int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
            const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            yy[l] = d * sc[is] * q1;
            yy[l + 32] = d * sc[is + 2] * q2;
            yy[l + 64] = d * sc[is + 4] * q3;
            yy[l + 96] = d * sc[is + 6] * q4;
        }
    }
}

int quant_dequant_row(uint32_t type, const void *src, float *dst, int64_t n) {
    const uint8_t *p = src;
    uint32_t bs = quant_block_size(type);
    if (!quant_type_supported(type) || n < 0 || n % bs) return -1;
    switch (type) {
    case QT_F32:
        memcpy(dst, p, (size_t)n * 4);
        return 0;
    case QT_F16:
        for (int64_t i = 0; i < n; i++) dst[i] = quant_get_f16(p + 2 * i);
        return 0;
    case QT_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            dst[i] = quant_bf16_to_f32(h);
        }
        return 0;
    default:
        break;
    }
    void (*block_fn)(const uint8_t *, float *) = NULL;
    switch (type) {
    case QT_Q4_0: block_fn = dq_q4_0; break;
    case QT_Q4_1: block_fn = dq_q4_1; break;
    case QT_Q5_0: block_fn = dq_q5_0; break;
    case QT_Q5_1: block_fn = dq_q5_1; break;
    case QT_Q8_0: block_fn = dq_q8_0; break;
    case QT_Q4_K: block_fn = dq_q4_k; break;
    case QT_Q5_K: block_fn = dq_q5_k; break;
    case QT_Q6_K: block_fn = dq_q6_k; break;
    default: return -1;
    }
    const uint32_t ts = quant_type_size(type);
    for (int64_t b = 0; b < n / bs; b++) block_fn(p + (size_t)b * ts, dst + (size_t)b * bs);
    return 0;
}
