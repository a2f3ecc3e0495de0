/* safetensors reader: a bounded, zero-copy view of one .safetensors file.
 *
 * Layout: an 8-byte little-endian header length N, N bytes of JSON
 * ({"name": {"dtype", "shape", "data_offsets": [begin, end]}, ...,
 * optional "__metadata__": {string: string}}), then the data section.
 * st_open checks everything before it is used, with overflow-safe
 * arithmetic: N against the file size (and a 100 MB cap, like the reference
 * library), the JSON strictly, every dtype, shape and offset pair, that each
 * tensor's byte count equals its element count times its dtype size, and
 * that the tensors tile the data section exactly (sorted by offset, no
 * overlap, no hole, nothing left over), as the safetensors library demands.
 * After a successful open every tensor view is in bounds.
 *
 * Tensors are listed sorted by name (byte order), which is the order the
 * reference converter visits them in. Lifetime: views live until st_close. */
#ifndef GEM_CONVERT_SAFETENSORS_H
#define GEM_CONVERT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

#define ST_MAX_DIMS 8
#define ST_MAX_HEADER (100u * 1000u * 1000u)

typedef enum {
    ST_BOOL, ST_U8, ST_I8, ST_I16, ST_U16, ST_F16, ST_BF16, ST_I32, ST_U32, ST_F32, ST_F64, ST_I64, ST_U64,
    ST_F8_E4M3, ST_F8_E5M2, ST_DTYPE_COUNT
} st_dtype;

typedef struct {
    const char *name; /* NUL-terminated, owned by the st_file */
    st_dtype dtype;
    uint32_t n_dims;
    uint64_t shape[ST_MAX_DIMS]; /* shape[0] is the outermost (slowest) dimension */
    uint64_t n_elems;
    uint64_t offset;  /* absolute file offset of the first byte */
    uint64_t n_bytes;
    const void *data; /* into the mapping */
} st_tensor;

typedef struct st_file st_file;

st_file *st_open(const char *path, gem_err *err);
/* Parses a buffer the caller keeps alive until st_close (fuzzers, tests). */
st_file *st_open_mem(const void *data, size_t size, const char *name, gem_err *err);
void st_close(st_file *f);

const char *st_path(const st_file *f);
size_t st_count(const st_file *f);
const st_tensor *st_at(const st_file *f, size_t i); /* sorted by name */
const st_tensor *st_find(const st_file *f, const char *name);

const char *st_dtype_name(st_dtype t); /* "F32" */
uint32_t st_dtype_size(st_dtype t);

#endif
