/* CPU dot kernels against the reference dequantize-then-dot: the f32-path
 * kernels (any instruction set) agree to rounding; the integer kernels on
 * 8-bit activations agree within the bound the activation rounding implies
 * (half a step per value: sum |w| * max|x| / 254 per block). Then the tile
 * contract, on every variant this CPU has: a product of n tokens gives each
 * token's row bit for bit as n one-token products do, and the multi-row
 * integer kernels compute kernels.h's canonical sum exactly. The k-quant
 * kernels (q4_k, q5_k, q6_k on 256-value activation blocks) are checked
 * on random blocks against their canonical sum computed here from blocks
 * decoded value by value (bit for bit, every variant), the dequantizer
 * against the same decoding, and the dots against the exact product
 * within the activation rounding bound (amax / 254 per value). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kernels.h"
#include "quant/quant.h"
#include "test.h"

static uint64_t st = 88172645463325252ull;
static float frand(void) {
    st ^= st << 13;
    st ^= st >> 7;
    st ^= st << 17;
    return (float)((st >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

static void make_row(uint32_t type, uint8_t *row, int64_t n) {
    if (type == QT_F32) {
        for (int64_t i = 0; i < n; i++) ((float *)row)[i] = frand();
    } else if (type == QT_F16) {
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = quant_f32_to_f16(frand());
            memcpy(row + 2 * i, &h, 2);
        }
    } else {
        uint32_t ts = quant_type_size(type);
        for (int64_t b = 0; b < n / 32; b++) {
            uint8_t *blk = row + b * ts;
            for (uint32_t k = 2; k < ts; k++) blk[k] = (uint8_t)(st = st * 6364136223846793005ull + 1, st >> 56);
            uint16_t d = quant_f32_to_f16(0.01f + 0.02f * fabsf(frand()));
            memcpy(blk, &d, 2);
        }
    }
}

/* The tile contract of one variant and type: out[t][r] of a product of ntok
 * tokens, computed the way cpu_matmul does (the multi-row kernel over row
 * ranges, else one kernel call per row and token), for any ntok. */
enum { TK = 2240, TNB = TK / 32, TROWS = 40, TTOK = 64 };

static void tile_product(const cpu_kernels *k, uint32_t type, const uint8_t *rows, uint64_t rb, int64_t r0, int64_t r1,
                         const float *x, const act_q8 *xq, int ntok, float *out) {
    mm_q8_fn mm = type == QT_Q8_0 ? k->q8_0_mm : k->q4_0_mm;
    dot_q8_fn q8 = type == QT_Q8_0 ? k->q8_0_q8 : k->q4_0_q8;
    dot_fn fused = type == QT_Q8_0 ? k->q8_0 : k->q4_0;
    if (mm) {
        mm(rows + rb * (uint64_t)r0, rb, r1 - r0, xq, TNB, ntok, out + r0, TROWS);
        return;
    }
    for (int64_t r = r0; r < r1; r++)
        for (int t = 0; t < ntok; t++)
            out[(size_t)t * TROWS + (size_t)r] =
                q8 ? q8(rows + rb * (uint64_t)r, xq, (int64_t)t * TNB, TK) : fused(rows + rb * (uint64_t)r, x + (size_t)t * TK, TK);
}

/* kernels.h's canonical sum, in plain C: acc = fma(S_b, d_w d_x, acc) */
static float canonical(uint32_t type, const uint8_t *row, const act_q8 *xq, int64_t block0) {
    float acc = 0;
    for (int64_t b = 0; b < TNB; b++) {
        const uint8_t *blk = row + b * (type == QT_Q8_0 ? 34 : 18);
        uint16_t h;
        memcpy(&h, blk, 2);
        int32_t s = 0;
        for (int i = 0; i < 32; i++) {
            const int w = type == QT_Q8_0 ? (int8_t)blk[2 + i]
                                          : (i < 16 ? blk[2 + i] & 15 : blk[2 + i - 16] >> 4) - 8;
            s += w * xq->q[(block0 + b) * 32 + i];
        }
        acc = fmaf((float)s, quant_f16_to_f32(h) * xq->d[block0 + b], acc);
    }
    return acc;
}

static int same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

static void tile_contract(const cpu_kernels *k, uint32_t type) {
    const uint64_t rb = (uint64_t)quant_type_size(type) * TNB;
    uint8_t *rows = malloc(rb * TROWS);
    float *x = malloc(sizeof(float) * TK * TTOK), *tile = malloc(sizeof(float) * TROWS * TTOK),
          *one = malloc(sizeof(float) * TROWS);
    act_q8 all = {malloc(sizeof(float) * TNB * TTOK), malloc((size_t)TK * TTOK), malloc(sizeof(int32_t) * TNB * TTOK)};
    act_q8 alone = {malloc(sizeof(float) * TNB), malloc(TK), malloc(sizeof(int32_t) * TNB)};
    for (int r = 0; r < TROWS; r++) make_row(type, rows + rb * (uint64_t)r, TK);
    for (int64_t i = 0; i < (int64_t)TK * TTOK; i++) x[i] = frand() * (i % 53 == 0 ? 25.0f : 1.0f) * (i / TK % 5 + 1);
    if (k->quantize_act)
        for (int t = 0; t < TTOK; t++) k->quantize_act(x + (size_t)t * TK, TK, &all, (int64_t)t * TNB);
    static const int ns[] = {2, 3, 8, 9, 16, 64};
    for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++) {
        const int ntok = ns[ni];
        int same = 1, split = 1, canon = 1;
        tile_product(k, type, rows, rb, 0, TROWS, x, &all, ntok, tile);
        for (int t = 0; t < ntok; t++) {
            const float *xt = x + (size_t)t * TK;
            if (k->quantize_act) k->quantize_act(xt, TK, &alone, 0);
            tile_product(k, type, rows, rb, 0, TROWS, xt, &alone, 1, one);
            for (int r = 0; r < TROWS; r++) {
                if (!same_bits(tile[(size_t)t * TROWS + r], one[r])) same = 0;
                if ((k->q8_0_mm || k->q4_0_mm) && !same_bits(one[r], canonical(type, rows + rb * (uint64_t)r, &alone, 0)))
                    canon = 0;
            }
        }
        /* the rows split as threads split them: a row's bits do not depend on its neighbours */
        float *parts = malloc(sizeof(float) * TROWS * TTOK);
        tile_product(k, type, rows, rb, 0, 16, x, &all, ntok, parts);
        tile_product(k, type, rows, rb, 16, 21, x, &all, ntok, parts);
        tile_product(k, type, rows, rb, 21, TROWS, x, &all, ntok, parts);
        for (int t = 0; t < ntok; t++)
            for (int r = 0; r < TROWS; r++)
                if (!same_bits(parts[(size_t)t * TROWS + r], tile[(size_t)t * TROWS + r])) split = 0;
        free(parts);
        /* packed at load (kernels.h, q_panels): the same bits as the
         * unpacked kernel, whole and from a later panel on (a thread's
         * share), the short last panel included */
        pack_q8_fn pack = type == QT_Q8_0 ? k->q8_0_pack : k->q4_0_pack;
        mm_packed_fn mmp = type == QT_Q8_0 ? k->q8_0_mmp : k->q4_0_mmp;
        CHECKF(!pack == !mmp && !pack == !(type == QT_Q8_0 ? k->q8_0_mm : k->q4_0_mm),
               "%s %s: packer, packed and unpacked kernels come together", k->name, quant_type_name(type));
        if (pack && mmp) {
            const int q4 = type == QT_Q4_0, panels = (TROWS + 15) / 16;
            void *mem = NULL;
            const size_t cb = (size_t)panels * TNB * KERNELS_PANEL_BYTES(q4);
            CHECK(!posix_memalign(&mem, 64, cb + (size_t)panels * TNB * 32));
            pack(rows, rb, TROWS, TNB, mem, (uint16_t *)((uint8_t *)mem + cb));
            const q_panels qp = {mem, (const uint16_t *)((uint8_t *)mem + cb)};
            float *pk = malloc(sizeof(float) * TROWS * TTOK);
            int packed_same = 1;
            mmp(&qp, 0, 16, &all, TNB, ntok, pk, TROWS);
            mmp(&qp, 1, TROWS - 16, &all, TNB, ntok, pk + 16, TROWS);
            for (int t = 0; t < ntok; t++)
                for (int r = 0; r < TROWS; r++)
                    if (!same_bits(pk[(size_t)t * TROWS + r], tile[(size_t)t * TROWS + r])) packed_same = 0;
            CHECKF(packed_same, "%s %s: %d tokens, the packed matrix's rows differ from the unpacked kernel's", k->name,
                   quant_type_name(type), ntok);
            free(pk);
            free(mem);
        }
        CHECKF(same, "%s %s: %d tokens, rows differ from one-token products", k->name, quant_type_name(type), ntok);
        CHECKF(split, "%s %s: %d tokens, rows differ when the rows are split", k->name, quant_type_name(type), ntok);
        CHECKF(canon, "%s %s: one-token rows differ from the canonical sum", k->name, quant_type_name(type));
    }
    free(rows), free(x), free(tile), free(one);
    free(all.d), free(all.q), free(all.s), free(alone.d), free(alone.q), free(alone.s);
}

/* ---- k-quants (q4_k, q5_k, q6_k) on act_q8k activations ---- */

/* A row of n values of a k-quant type: random bytes everywhere (every code,
 * scale and fifth-bit pattern, q6_k scales -128..127), the f16 scales set
 * to small positive values so products stay finite. */
static void make_k_row(uint32_t type, uint8_t *row, int64_t n) {
    const uint32_t ts = quant_type_size(type);
    for (int64_t b = 0; b < n / 256; b++) {
        uint8_t *blk = row + b * ts;
        for (uint32_t k = 0; k < ts; k++) blk[k] = (uint8_t)(st = st * 6364136223846793005ull + 1, st >> 56);
        const uint16_t d = quant_f32_to_f16(0.001f + 0.002f * fabsf(frand()));
        const uint16_t dmin = quant_f32_to_f16(0.001f + 0.004f * fabsf(frand()));
        if (type == QT_Q6_K) {
            memcpy(blk + 208, &d, 2);
        } else {
            memcpy(blk, &d, 2);
            memcpy(blk + 2, &dmin, 2);
        }
    }
}

/* The integer content of one block, decoded here from the format
 * description value by value (not the kernels' grouping): code[v], the
 * scale and min that apply to value v, d and dmin. q6_k codes include the
 * -32 offset and have no min. */
static void k_decode(uint32_t type, const uint8_t *blk, int *code, int *scale, int *min, float *d, float *dmin) {
    if (type == QT_Q6_K) {
        *d = quant_get_f16(blk + 208);
        *dmin = 0;
        for (int v = 0; v < 256; v++) {
            const int half = v / 128, k = v % 128 / 32, l = v % 32;
            const uint8_t lb = blk[64 * half + l + (k % 2 ? 32 : 0)];
            const int low = k < 2 ? lb & 15 : lb >> 4;
            const int high = blk[128 + 32 * half + l] >> (2 * k) & 3;
            code[v] = (low | high << 4) - 32;
            scale[v] = (int8_t)blk[192 + v / 16];
            min[v] = 0;
        }
        return;
    }
    const int q5 = type == QT_Q5_K;
    const uint8_t *s = blk + 4, *qh = blk + 16, *qs = blk + (q5 ? 48 : 16);
    *d = quant_get_f16(blk);
    *dmin = quant_get_f16(blk + 2);
    for (int v = 0; v < 256; v++) {
        const int j = v / 32, c = v / 64, l = v % 32, upper = j % 2;
        int sc, m;
        if (j < 4) {
            sc = s[j] & 63;
            m = s[j + 4] & 63;
        } else {
            sc = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
            m = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
        }
        int q = upper ? qs[32 * c + l] >> 4 : qs[32 * c + l] & 15;
        if (q5 && qh[l] >> j & 1) q += 16; /* bit 2c (low half) or 2c + 1 (high half) = bit j */
        code[v] = q;
        scale[v] = sc;
        min[v] = m;
    }
}

/* kernels.h's canonical k-quant sum, from the decoded values */
static float k_canonical(uint32_t type, const uint8_t *row, int64_t n, const act_q8k *x, int64_t block0) {
    float acc = 0;
    int code[256], scale[256], min[256];
    for (int64_t b = 0; b < n / 256; b++) {
        float d, dmin;
        k_decode(type, row + b * quant_type_size(type), code, scale, min, &d, &dmin);
        int64_t S = 0, M = 0;
        for (int v = 0; v < 256; v++) {
            const int a = x->q[(block0 + b) * 256 + v];
            S += (int64_t)scale[v] * code[v] * a;
            M += (int64_t)min[v] * a;
        }
        const float dx = x->d[block0 + b];
        acc = fmaf((float)S, d * dx, acc);
        if (type != QT_Q6_K) acc = fmaf(-(float)M, dmin * dx, acc);
    }
    return acc;
}

static dot_q8k_fn k_kernel(const cpu_kernels *k, uint32_t type) {
    return type == QT_Q4_K ? k->q4_k_q8k : type == QT_Q5_K ? k->q5_k_q8k : k->q6_k_q8k;
}

enum { KN = 2304, KTOK = 9 }; /* 9 super-blocks */

/* One variant: its activation quantization is the portable one bit for
 * bit (codes, scales, 16-code sums), its dots are the canonical sums bit
 * for bit, dequantization agrees with the decoded values, and the dots
 * are within the activation rounding's bound of the exact product of the
 * dequantized row with the float activations. */
static void k_variant(const cpu_kernels *k, const cpu_kernels *portable) {
    static const uint32_t types[] = {QT_Q4_K, QT_Q5_K, QT_Q6_K};
    uint8_t *row = malloc((size_t)KN / 256 * 210);
    float *x = malloc(sizeof(float) * KN * KTOK), *w = malloc(sizeof(float) * KN);
    act_q8k xa = {malloc(sizeof(float) * KN / 256 * KTOK), malloc((size_t)KN * KTOK),
                  malloc(sizeof(int16_t) * KN / 16 * KTOK)};
    act_q8k xp = {malloc(sizeof(float) * KN / 256 * KTOK), malloc((size_t)KN * KTOK),
                  malloc(sizeof(int16_t) * KN / 16 * KTOK)};
    int act_same = 1, sums_ok = 1, canon = 1, deq = 1, bound_ok = 1, nonzero = 0;
    double worst = 0;
    for (int trial = 0; trial < 60; trial++) {
        for (int64_t i = 0; i < (int64_t)KN * KTOK; i++)
            x[i] = frand() * (trial % 5 == 0 ? 300.0f : 1.0f) * (i % 89 == 0 ? 40.0f : 1.0f) * (float)(i / KN % 3 + 1);
        if (trial == 1) x[7] = 0, memset(x, 0, sizeof(float) * 256); /* an all-zero block: scale 0 */
        for (int t = 0; t < KTOK; t++) {
            k->quantize_act_k(x + (size_t)t * KN, KN, &xa, (int64_t)t * (KN / 256));
            portable->quantize_act_k(x + (size_t)t * KN, KN, &xp, (int64_t)t * (KN / 256));
        }
        if (memcmp(xa.q, xp.q, (size_t)KN * KTOK) || memcmp(xa.d, xp.d, sizeof(float) * KN / 256 * KTOK) ||
            memcmp(xa.bs, xp.bs, sizeof(int16_t) * KN / 16 * KTOK))
            act_same = 0;
        for (int64_t g = 0; g < (int64_t)KN / 16 * KTOK; g++) {
            int s16 = 0;
            for (int i = 0; i < 16; i++) s16 += xa.q[g * 16 + i];
            if (s16 != xa.bs[g]) sums_ok = 0;
        }
        for (size_t ti = 0; ti < 3; ti++) {
            const uint32_t type = types[ti];
            make_k_row(type, row, KN);
            quant_dequant_row(type, row, w, KN);
            int code[256], scale[256], min[256];
            for (int64_t b = 0; b < KN / 256; b++) {
                float d, dmin;
                k_decode(type, row + b * quant_type_size(type), code, scale, min, &d, &dmin);
                for (int v = 0; v < 256; v++) {
                    /* the reference's evaluation order: (d * sc) * q - dmin * m */
                    const float want = type == QT_Q6_K ? d * (float)scale[v] * (float)code[v]
                                                       : d * (float)scale[v] * (float)code[v] - dmin * (float)min[v];
                    if (memcmp(&want, &w[b * 256 + v], 4)) deq = 0;
                }
            }
            for (int t = 0; t < KTOK; t++) {
                const float *xt = x + (size_t)t * KN;
                const int64_t b0 = (int64_t)t * (KN / 256);
                const float got = k_kernel(k, type)(row, &xa, b0, KN);
                const float want = k_canonical(type, row, KN, &xa, b0);
                if (memcmp(&got, &want, 4)) canon = 0;
                nonzero |= got != 0;
                /* exact product, the bound of the activation rounding (half a
                 * step, amax/254, per value) and f32 slack on the magnitudes
                 * the kernel sums (the scale and min terms apart) */
                double exact = 0, bound = 0, mag = 0;
                for (int64_t b = 0; b < KN / 256; b++) {
                    float d, dmin;
                    k_decode(type, row + b * quant_type_size(type), code, scale, min, &d, &dmin);
                    double sw = 0, amax = 0;
                    for (int v = 0; v < 256; v++) {
                        const int64_t i = b * 256 + v;
                        exact += (double)w[i] * xt[i];
                        sw += fabs(w[i]);
                        amax = fmax(amax, fabs(xt[i]));
                        mag += (fabs((double)d * scale[v] * code[v]) + fabs((double)dmin * min[v])) * fabs(xt[i]);
                    }
                    bound += sw * amax / 254.0 * 1.0001;
                }
                const double err = fabs(got - exact), tol = bound + 1e-5 * mag + 1e-6;
                if (!(err <= tol)) {
                    if (bound_ok) fprintf(stderr, "%s %s token %d: %g vs exact %g (bound %g)\n", k->name,
                                          quant_type_name(type), t, got, exact, tol);
                    bound_ok = 0;
                }
                if (tol > 0) worst = fmax(worst, err / tol);
            }
        }
    }
    CHECKF(act_same, "%s: quantize_act_k differs from the portable one", k->name);
    CHECKF(sums_ok, "%s: 16-code sums", k->name);
    CHECKF(canon, "%s: k-quant dots differ from the canonical sum", k->name);
    CHECKF(deq, "dequantized k-quant values differ from the decoded blocks");
    CHECKF(bound_ok, "%s: k-quant dots outside the activation rounding bound", k->name);
    CHECKF(nonzero, "%s: k-quant dots all zero", k->name);
    printf("%s k-quants: worst error %.3f of the bound\n", k->name, worst);
    free(row), free(x), free(w);
    free(xa.d), free(xa.q), free(xa.bs), free(xp.d), free(xp.q), free(xp.bs);
}

static mm_q8k_fn k_mm(const cpu_kernels *k, uint32_t type) {
    return type == QT_Q4_K ? k->q4_k_mm : type == QT_Q5_K ? k->q5_k_mm : k->q6_k_mm;
}

/* The tile contract for k-quants: tokens quantized together or one at a
 * time, a whole tile or one token per call, each (row, token) the same
 * bits, and those of the canonical sum; where the variant has multi-row
 * kernels they run as cpu_matmul runs them (row ranges, short panels
 * included), else one kernel call per row and token. */
static void k_tile_contract(const cpu_kernels *k) {
    static const uint32_t types[] = {QT_Q4_K, QT_Q5_K, QT_Q6_K};
    enum { R = 37, NB = KN / 256 }; /* two panels of 16 and a short one */
    uint8_t *rows = malloc((size_t)NB * 210 * R);
    float *x = malloc(sizeof(float) * KN * KTOK), *tile = malloc(sizeof(float) * R * KTOK);
    float *one = malloc(sizeof(float) * R);
    act_q8k all = {malloc(sizeof(float) * NB * KTOK), malloc((size_t)KN * KTOK),
                   malloc(sizeof(int16_t) * KN / 16 * KTOK)};
    act_q8k alone = {malloc(sizeof(float) * NB), malloc(KN), malloc(sizeof(int16_t) * KN / 16)};
    for (int64_t i = 0; i < (int64_t)KN * KTOK; i++)
        x[i] = frand() * (float)(i / KN + 1) * (i % 101 == 0 ? 30.0f : 1.0f);
    for (int t = 0; t < KTOK; t++) k->quantize_act_k(x + (size_t)t * KN, KN, &all, (int64_t)t * NB);
    for (size_t ti = 0; ti < 3; ti++) {
        const uint32_t type = types[ti];
        const uint64_t rb = (uint64_t)quant_type_size(type) * NB;
        const mm_q8k_fn mm = k_mm(k, type);
        const dot_q8k_fn dot = k_kernel(k, type);
        for (int r = 0; r < R; r++) make_k_row(type, rows + rb * (uint64_t)r, KN);
        /* the whole tile, rows split 0..16, 16..21, 21..R as threads may split them */
        static const int cuts[] = {0, 16, 21, R};
        for (int c = 0; c < 3; c++) {
            const int r0 = cuts[c], r1 = cuts[c + 1];
            if (mm) mm(rows + rb * (uint64_t)r0, rb, r1 - r0, &all, NB, KTOK, tile + r0, R);
            else
                for (int r = r0; r < r1; r++)
                    for (int t = 0; t < KTOK; t++)
                        tile[(size_t)t * R + r] = dot(rows + rb * (uint64_t)r, &all, (int64_t)t * NB, KN);
        }
        int same = 1, canon = 1;
        for (int t = 0; t < KTOK; t++) {
            k->quantize_act_k(x + (size_t)t * KN, KN, &alone, 0);
            if (mm) mm(rows, rb, R, &alone, NB, 1, one, R);
            else
                for (int r = 0; r < R; r++) one[r] = dot(rows + rb * (uint64_t)r, &alone, 0, KN);
            for (int r = 0; r < R; r++) {
                const float want = k_canonical(type, rows + rb * (uint64_t)r, KN, &alone, 0);
                if (memcmp(&one[r], &tile[(size_t)t * R + r], 4)) same = 0;
                if (memcmp(&one[r], &want, 4)) canon = 0;
            }
        }
        CHECKF(same, "%s %s: a token's row depends on the tile", k->name, quant_type_name(type));
        CHECKF(canon, "%s %s%s: rows differ from the canonical sum", k->name, quant_type_name(type),
               mm ? " (multi-row)" : "");
        /* packed at load (kernels.h, KERNELS_KWORDS): the tile's bits, whole
         * and from the second panel on, the short last panel included */
        const mm_kpacked_fn mmp = type == QT_Q4_K ? k->q4_k_mmp : type == QT_Q5_K ? k->q5_k_mmp : k->q6_k_mmp;
        CHECKF(!mmp == !mm, "%s %s: the packed kernel comes with the multi-row one", k->name, quant_type_name(type));
        if (mmp) {
            const uint32_t bb = quant_type_size(type), kw = KERNELS_KWORDS(bb);
            void *mem = NULL;
            CHECK(!posix_memalign(&mem, 64, (size_t)(R + 15) / 16 * NB * kw * 64));
            kernels_kpack(rows, rb, R, NB, bb, mem);
            float *pk = malloc(sizeof(float) * R * KTOK);
            mmp(mem, 0, 16, &all, NB, KTOK, pk, R);
            mmp(mem, 1, R - 16, &all, NB, KTOK, pk + 16, R);
            CHECKF(!memcmp(pk, tile, sizeof(float) * R * KTOK), "%s %s: the packed matrix's rows differ from the tile's",
                   k->name, quant_type_name(type));
            free(pk);
            free(mem);
        }
    }
    free(rows), free(x), free(tile), free(one);
    free(all.d), free(all.q), free(all.bs), free(alone.d), free(alone.q), free(alone.bs);
}

int main(void) {
    const int64_t n = 1536;
    cpu_kernels ref = kernels_pick(1), fast = kernels_pick(0);
    printf("fast kernels: %s\n", fast.name);
    uint8_t *row = malloc((size_t)n * 4);
    float *x = malloc((size_t)n * 4), *w = malloc((size_t)n * 4);
    act_q8 xq = {malloc((size_t)n / 32 * 4), malloc((size_t)n), malloc((size_t)n / 32 * sizeof(int32_t))};
    const uint32_t types[] = {QT_F32, QT_F16, QT_Q8_0, QT_Q4_0};
    for (int trial = 0; trial < 200; trial++) {
        for (int64_t i = 0; i < n; i++) x[i] = frand() * (trial % 7 == 0 ? 100.0f : 1.0f) * (i % 97 == 0 ? 20.0f : 1.0f);
        for (size_t t = 0; t < 4; t++) {
            make_row(types[t], row, n);
            quant_dequant_row(types[t], row, w, n);
            double exact = 0, mag = 0;
            for (int64_t i = 0; i < n; i++) {
                exact += (double)w[i] * x[i];
                mag += fabs((double)w[i] * x[i]);
            }
            dot_fn fr = t == 0 ? ref.f32 : t == 1 ? ref.f16 : t == 2 ? ref.q8_0 : ref.q4_0;
            dot_fn ff = t == 0 ? fast.f32 : t == 1 ? fast.f16 : t == 2 ? fast.q8_0 : fast.q4_0;
            /* f32 summation error bound: a few ulps of the magnitude sum */
            double tol = 1e-6 * mag + 1e-6;
            CHECKF(fabs(fr(row, x, n) - exact) <= tol, "ref type %u", types[t]);
            CHECKF(fabs(ff(row, x, n) - exact) <= tol, "fast type %u: %g vs %g", types[t], ff(row, x, n), exact);
            dot_q8_fn fq = t == 2 ? fast.q8_0_q8 : t == 3 ? fast.q4_0_q8 : NULL;
            mm_q8_fn fm = t == 2 ? fast.q8_0_mm : t == 3 ? fast.q4_0_mm : NULL;
            if (fq && fast.quantize_act) {
                fast.quantize_act(x, n, &xq, 0);
                double bound = 0;
                int sums_ok = 1;
                for (int64_t b = 0; b < n / 32; b++) {
                    double sw = 0, amax = 0;
                    int32_t cs = 0;
                    for (int k = 0; k < 32; k++) {
                        sw += fabs(w[b * 32 + k]);
                        amax = fmax(amax, fabs(x[b * 32 + k]));
                        cs += xq.q[b * 32 + k];
                    }
                    bound += sw * amax / 254.0 * 1.0001;
                    if (xq.s[b] != cs) sums_ok = 0;
                }
                CHECKF(sums_ok, "quantize_act's block code sums");
                const double got = fq(row, &xq, 0, n);
                CHECKF(fabs(got - exact) <= bound + tol, "int8 type %u: %g vs %g (bound %g)", types[t], got, exact, bound);
                if (fm) { /* the multi-row form, one row: the same exact block sums, another f32 order */
                    float got2 = NAN;
                    fm(row, (uint64_t)quant_type_size(types[t]) * (uint64_t)(n / 32), 1, &xq, n / 32, 1, &got2, 1);
                    CHECKF(fabs(got - got2) <= 1e-6 * mag + 1e-6, "int8 type %u: %g one-row, %g multi-row", types[t], got,
                           got2);
                }
            }
        }
    }
    free(row);
    free(x);
    free(w);
    free(xq.d);
    free(xq.q);
    free(xq.s);

    /* tanh-based element ops: the SIMD variants against tanhf, over the
     * range the model feeds them (gate values, logits / 30) and the
     * switch between their two tanh forms at |x| = 0.25 */
    {
        const int64_t m = 4099; /* not a multiple of 8: the tail runs the portable loop */
        float *g = malloc(sizeof(float) * m), *u = malloc(sizeof(float) * m), *o1 = malloc(sizeof(float) * m),
              *o2 = malloc(sizeof(float) * m);
        for (int trial = 0; trial < 4; trial++) {
            const float span = trial == 0 ? 0.6f : trial == 1 ? 4.0f : trial == 2 ? 30.0f : 400.0f;
            for (int64_t i = 0; i < m; i++) g[i] = frand() * span, u[i] = frand();
            ref.geglu(g, u, o1, m);
            fast.geglu(g, u, o2, m);
            int ok = 1;
            for (int64_t i = 0; i < m; i++) /* gelu(x) u = 0.5 x u (1 + tanh): tanh's error times 0.5 |x u| */
                if (!(fabsf(o1[i] - o2[i]) <= 1e-6f * (1.0f + 0.5f * fabsf(g[i] * u[i])))) ok = 0;
            CHECKF(ok, "geglu %s vs portable, span %g", fast.name, span);
            memcpy(o1, g, sizeof(float) * m), memcpy(o2, g, sizeof(float) * m);
            ref.softcap(o1, m, 30.0f);
            fast.softcap(o2, m, 30.0f);
            ok = 1;
            for (int64_t i = 0; i < m; i++)
                if (!(fabsf(o1[i] - o2[i]) <= 30.0f * 1e-6f)) ok = 0;
            CHECKF(ok, "softcap %s vs portable, span %g", fast.name, span);
        }
        g[0] = NAN;
        fast.softcap(g, 8, 30.0f);
        CHECKF(isnan(g[0]), "softcap keeps NaN");
        free(g), free(u), free(o1), free(o2);
    }

    static const char *const variants[] = {"avx512vnni", "avx2", "scalar"};
    for (int v = 0; v < 3; v++) {
        cpu_kernels k;
        if (!kernels_variant(variants[v], &k)) {
            printf("no %s on this CPU: its tile contract is not tested here\n", variants[v]);
            continue;
        }
        tile_contract(&k, QT_Q4_0);
        tile_contract(&k, QT_Q8_0);
        k_variant(&k, &ref);
        k_tile_contract(&k);
    }
    return test_report("test_cpu_kernels");
}
