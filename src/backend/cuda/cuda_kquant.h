/* K-quant blocks as the CUDA backend stores them, for the products
 * (cuda_matmul_k.cu) and the embedding lookup (cuda_elementwise.cu): the
 * block sizes, the packed 6-bit scales and one value, each as quant.c
 * decodes it (its dequantization, unfused, so the values are the CPU's
 * bit for bit). */
#ifndef GEM_BACKEND_CUDA_KQUANT_H
#define GEM_BACKEND_CUDA_KQUANT_H

#include "backend/cuda/cuda_common.h"

/* Bytes per block as stored on the device (q6_k: without its scale). */
__host__ __device__ constexpr int kq_block_bytes(int fmt) {
    return fmt == DW_Q4_K ? 144 : fmt == DW_Q5_K ? 176 : 208;
}

/* byte i (run-time, 0..15) of a 16-byte group */
__device__ __forceinline__ unsigned kq_byte(const uint4 &v, int i) {
    const unsigned w = (i >> 2) == 0 ? v.x : (i >> 2) == 1 ? v.y : (i >> 2) == 2 ? v.z : v.w;
    return (w >> (8 * (i & 3))) & 0xFFu;
}

/* q4_k/q5_k: the 6-bit scale and min of sub-block j (scales at hdr bytes
 * 4 .. 15), the file's packing */
__device__ __forceinline__ void kq_scale_min(const uint4 &hdr, int j, unsigned &sc, unsigned &m) {
    if (j < 4) {
        sc = kq_byte(hdr, 4 + j) & 63;
        m = kq_byte(hdr, 8 + j) & 63;
    } else {
        sc = (kq_byte(hdr, 8 + j) & 15) | ((kq_byte(hdr, j) >> 6) << 4);
        m = (kq_byte(hdr, 8 + j) >> 4) | ((kq_byte(hdr, 4 + j) >> 6) << 4);
    }
}

/* Value l (0..31) of 32-value block j (0..7) of a super-block, as
 * quant.c's dequantization computes it (unfused). */
template <int FMT> __device__ __forceinline__ float kq_value(const uint8_t *blk, const __half *d6, int j, int l) {
    if (FMT == DW_Q6_K) {
        const int v = 32 * j + l, n = v / 128, kk = (v % 128) / 32;
        const uint8_t lb = blk[64 * n + l + 32 * (kk & 1)];
        const int code = ((kk < 2 ? lb & 15 : lb >> 4) | (((blk[128 + 32 * n + l] >> (2 * kk)) & 3) << 4)) - 32;
        const int sc = (int)(signed char)blk[192 + 8 * n + l / 16 + 2 * kk];
        return __fmul_rn(__fmul_rn(__half2float(*d6), (float)sc), (float)code);
    }
    const int q5 = FMT == DW_Q5_K, c = j / 2, hi = j & 1;
    unsigned sc, m;
    const uint4 hdr = *(const uint4 *)blk;
    kq_scale_min(hdr, j, sc, m);
    const uint8_t byte = blk[(q5 ? 48 : 16) + 32 * c + l];
    int code = hi ? byte >> 4 : byte & 15;
    if (q5 && (blk[16 + l] >> (2 * c + hi) & 1)) code += 16;
    const float dd = __half2float(*(const __half *)blk), dmin = __half2float(*(const __half *)(blk + 2));
    return __fsub_rn(__fmul_rn(__fmul_rn(dd, (float)sc), (float)code), __fmul_rn(dmin, (float)m));
}

/* One warp quantizes one 256-value block x (the CPU fast path's act_q8k:
 * scale max|x| / 127, codes rounded to nearest even, -128 for NaN, a sum
 * per 16 codes); lane L takes values 8L .. 8L + 7. k_quantize_act_k and
 * the norms that leave k-quant codes (cuda_norm.cu) share it, so their
 * codes are the same bits. */
__device__ __forceinline__ void kq_act_block(const float *x, int lane, int8_t *q, float *d, int *s16) {
    const float4 a = ((const float4 *)x)[2 * lane], b = ((const float4 *)x)[2 * lane + 1];
    const float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
    float amax = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) amax = fmaxf(amax, fabsf(v[i]));
    amax = warp_max(amax); /* max is exact in any order */
    const float id = amax > 0 ? __fdiv_rn(127.0f, amax) : 0.0f;
    int sum = 0;
    unsigned packed[2] = {0, 0};
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const float t = __fmul_rn(v[i], id);
        /* the CPU's rounding (to nearest even) and its -128 for NaN */
        const int c = t == t ? __float2int_rn(fminf(fmaxf(t, -128.0f), 127.0f)) : -128;
        sum += c;
        packed[i >> 2] |= (unsigned)(c & 0xFF) << (8 * (i & 3));
    }
    ((uint2 *)q)[lane] = make_uint2(packed[0], packed[1]);
    sum += __shfl_xor_sync(0xffffffffu, sum, 1); /* lanes 2g, 2g + 1: codes 16g .. 16g + 15 */
    if (!(lane & 1)) s16[lane >> 1] = sum;
    if (lane == 0) *d = __fdiv_rn(amax, 127.0f);
}

#endif
