/* Storage types of GGUF tensors: the type table and one reference dequantizer
 * per supported format.
 *
 * Type ids are the ggml ids written in GGUF files. The table knows the block
 * geometry of every id the pinned reference defines (so the GGUF reader can
 * bound-check any file), while only the formats gem computes with have a
 * dequantizer. The dequantizers are plain scalar loops that evaluate exactly
 * the same float expressions, in the same order, as the reference format
 * definition: they are the oracle every faster kernel is tested against, so
 * they must stay bit-exact (quant.c is built with -ffp-contract=off). */
#ifndef GEM_QUANT_QUANT_H
#define GEM_QUANT_QUANT_H

#include <stdint.h>

enum {
    QT_F32 = 0, QT_F16 = 1, QT_Q4_0 = 2, QT_Q4_1 = 3, QT_Q5_0 = 6, QT_Q5_1 = 7,
    QT_Q8_0 = 8, QT_Q8_1 = 9, QT_Q2_K = 10, QT_Q3_K = 11, QT_Q4_K = 12,
    QT_Q5_K = 13, QT_Q6_K = 14, QT_Q8_K = 15, QT_IQ2_XXS = 16, QT_I8 = 24,
    QT_I16 = 25, QT_I32 = 26, QT_I64 = 27, QT_F64 = 28, QT_BF16 = 30,
    QT_COUNT = 43
};

/* Lower-case name ("q4_0"), or NULL when the id is not a type the pinned
 * reference defines (removed ids 4, 5, 31-33, 36-38 included). */
const char *quant_type_name(uint32_t type);

/* Inverse of quant_type_name (case-insensitive); -1 when unknown. */
int quant_type_from_name(const char *name);

/* Values per block and bytes per block; 0 for unknown ids. */
uint32_t quant_block_size(uint32_t type);
uint32_t quant_type_size(uint32_t type);

/* 1 when gem has a dequantizer for the type. */
int quant_type_supported(uint32_t type);

/* Bytes of a row of n values; -1 when n is not a whole number of blocks. */
int quant_row_bytes(uint32_t type, int64_t n, uint64_t *bytes);

/* Dequantizes n values (a whole number of blocks) of a supported type.
 * Returns -1 for an unsupported type or a partial block. */
int quant_dequant_row(uint32_t type, const void *src, float *dst, int64_t n);

float quant_f16_to_f32(uint16_t h);
uint16_t quant_f32_to_f16(float f); /* round to nearest even, like the hardware */
float quant_bf16_to_f32(uint16_t h);
uint16_t quant_f32_to_bf16(float f); /* round to nearest even, NaN kept quiet */

/* The f16 stored at p (any alignment, little-endian) as a float; v stored
 * at p as f16 (quant_f32_to_f16's rounding). Block scales and f16 rows. */
float quant_get_f16(const void *p);
void quant_put_f16(void *p, float v);

#endif
