/* Sixteen-row panels for the AVX512-VNNI matrix kernels (kernels.c for
 * q4_0/q8_0, kernels_k.c for the k-quants): lanes of a 512-bit vector are
 * the rows of a panel, so a panel's bytes are regrouped as [4-byte group]
 * [row] and one vpdpbusd multiplies a group of four activation codes,
 * broadcast, with that group of all sixteen rows. x86-64 GCC/Clang only;
 * the functions are compiled for the VNNI target and called only after
 * the CPU was checked for it. */
#ifndef GEM_BACKEND_CPU_PANEL16_H
#define GEM_BACKEND_CPU_PANEL16_H

#include <immintrin.h>
#include <stdint.h>

#define VNNI __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")))
#define MM_ROWS 16

/* bytes [off, off + 16) of rows r, r + 4, r + 8, r + 12, one per 128-bit lane */
VNNI static inline __m512i lanes4(const uint8_t *const *rows, int r, uint64_t off) {
    __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(rows[r] + off)));
    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(rows[r + 4] + off)), 1);
    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(rows[r + 8] + off)), 2);
    return _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(rows[r + 12] + off)), 3);
}

/* bytes [off, off + 16) of the sixteen rows: o[k] = 4-byte group k of rows
 * 0..15, row i in 32-bit lane i (a 4 x 4 transpose of 32-bit groups inside
 * each 128-bit lane) */
VNNI static inline void groups16x4(const uint8_t *const *rows, uint64_t off, __m512i o[4]) {
    const __m512i a = lanes4(rows, 0, off), b = lanes4(rows, 1, off), c = lanes4(rows, 2, off), d = lanes4(rows, 3, off);
    const __m512i t0 = _mm512_unpacklo_epi32(a, b), t1 = _mm512_unpackhi_epi32(a, b);
    const __m512i t2 = _mm512_unpacklo_epi32(c, d), t3 = _mm512_unpackhi_epi32(c, d);
    o[0] = _mm512_unpacklo_epi64(t0, t2);
    o[1] = _mm512_unpackhi_epi64(t0, t2);
    o[2] = _mm512_unpacklo_epi64(t1, t3);
    o[3] = _mm512_unpackhi_epi64(t1, t3);
}

/* The panel's rows from row r0 of w (row_bytes apart), nr <= 16 of them: a
 * short panel repeats its last row (its results are not stored); roff
 * gets each row's byte offset from rows[0], for gathers. */
static inline void panel_rows(const uint8_t *w, uint64_t row_bytes, int64_t r0, int nr, const uint8_t **rows,
                              int32_t *roff) {
    for (int r = 0; r < MM_ROWS; r++) {
        const int rr = r < nr ? r : nr - 1;
        rows[r] = w + (uint64_t)(r0 + rr) * row_bytes;
        roff[r] = (int32_t)((uint64_t)rr * row_bytes);
    }
}

#endif
