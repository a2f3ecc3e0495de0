/* GGUF writer: builds the header in memory, then streams tensor data.
 *
 * Use: gguf_writer_new, add metadata (in the order it should appear in the
 * file), add every tensor's info (this fixes its offset), gguf_writer_begin
 * to write header, metadata and tensor table, then gguf_writer_data for each
 * tensor's bytes in the order the tensors were added (a tensor may be given
 * in several chunks). gguf_writer_finish checks every byte was written. The
 * layout matches the reference writer: GGUF v3, tensor data aligned to
 * `general.alignment` (default 32), zero padding. */
#ifndef GEM_GGUF_GGUF_WRITE_H
#define GEM_GGUF_GGUF_WRITE_H

#include <stdint.h>
#include <stdio.h>

#include "gguf/gguf.h"

typedef struct gguf_writer gguf_writer;

gguf_writer *gguf_writer_new(uint32_t alignment);
void gguf_writer_free(gguf_writer *w);

/* Metadata setters; a key may be set once. Return 0 or -1 (err names the key). */
int gguf_w_u32(gguf_writer *w, const char *key, uint32_t v, gem_err *err);
int gguf_w_i32(gguf_writer *w, const char *key, int32_t v, gem_err *err);
int gguf_w_u64(gguf_writer *w, const char *key, uint64_t v, gem_err *err);
int gguf_w_f32(gguf_writer *w, const char *key, float v, gem_err *err);
int gguf_w_bool(gguf_writer *w, const char *key, int v, gem_err *err);
int gguf_w_str(gguf_writer *w, const char *key, const char *v, gem_err *err);
/* Numeric or bool array: n elements of et, little-endian, packed. */
int gguf_w_arr(gguf_writer *w, const char *key, gguf_vtype et, const void *data, uint64_t n, gem_err *err);
int gguf_w_arr_str(gguf_writer *w, const char *key, const char *const *v, uint64_t n, gem_err *err);
/* Copies kv i of src verbatim (key, type and value). */
int gguf_w_copy_kv(gguf_writer *w, const gguf_file *src, uint64_t i, gem_err *err);

/* Adds a tensor info; ne[0] is the contiguous dimension. */
int gguf_w_tensor(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                  const uint64_t *ne, gem_err *err);
uint64_t gguf_w_tensor_bytes(const gguf_writer *w, uint64_t i);

int gguf_writer_begin(gguf_writer *w, FILE *fp, gem_err *err);
int gguf_writer_data(gguf_writer *w, FILE *fp, const void *data, uint64_t n, gem_err *err);
int gguf_writer_finish(gguf_writer *w, FILE *fp, gem_err *err);

#endif
