/* Row quantizers: float rows to q8_0, q4_0, q5_0, q5_1, q4_k, q5_k and q6_k
 * blocks, bit-exact with the pinned reference's deterministic ("_ref", no
 * importance matrix) quantizers, plus the block sanity check the reference
 * applies to every row it reads or writes.
 *
 * Bit-exactness is the whole point (gem quantize must write the same bytes
 * as llama-quantize), so every routine evaluates the same float expressions
 * in the same order as the reference: the K-quant scale searches
 * (make_qkx2/make_qx style), the magic-number round-to-nearest
 * (nearest_int), fp16 rounding of the block scales before the codes are
 * chosen. quantize.c is built with -ffp-contract=off (no fused
 * multiply-adds, which the reference's baseline x86-64 build never uses
 * either). Inputs must be finite; callers check rows with
 * quant_validate_row first, as the reference loader does. */
#ifndef GEM_QUANT_QUANTIZE_H
#define GEM_QUANT_QUANTIZE_H

#include <stdint.h>

/* 1 when quant_quantize_row can produce the type (q8_0, q4_0, q5_0, q5_1,
 * q4_k, q5_k, q6_k, f16, bf16, f32). */
int quant_can_quantize(uint32_t type);

/* llama-quantize's "more bits" layers of the K mixes (Q4_K_M, Q5_K_M:
 * attn_v-like and ffn_down tensors there become q6_k): index i of n, the
 * first and last eighth and every third one between. */
int quant_more_bits(int i, int n);

/* Quantizes n floats (a whole number of blocks of type) into dst.
 * Returns -1 for an unsupported type or a partial block. */
int quant_quantize_row(uint32_t type, const float *src, void *dst, int64_t n);

/* The reference's row check: f32/f16/bf16 values must be finite, block
 * scales (d, and dmin for the K formats with a min) must be finite. `bytes`
 * must be whole rows/blocks. Returns 0 when valid; otherwise -1 and the
 * index of the first bad element or block in *where (may be NULL). */
int quant_validate_row(uint32_t type, const void *data, uint64_t bytes, uint64_t *where);

#endif
