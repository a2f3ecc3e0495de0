/* GGUF reader: a bounded, zero-copy view of a GGUF v2/v3 file.
 *
 * gguf_open maps the file read-only and parses the header, the metadata and
 * the tensor table once, checking every count, length and offset against the
 * file size with overflow-safe arithmetic before it is used. After a
 * successful open every accessor is O(1) and cannot read out of bounds:
 * strings and arrays are views into the mapping, tensor data pointers point
 * into the mapping. Nothing here knows any model; model/ interprets keys.
 *
 * Lifetime: every pointer handed out (strings, arrays, tensor data) lives
 * until gguf_close. Strings are NOT NUL-terminated views except keys and
 * tensor names, which the reader copies once so callers can use them as C
 * strings (both are validated as UTF-8 without NUL bytes). */
#ifndef GEM_GGUF_GGUF_H
#define GEM_GGUF_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

#define GGUF_MAGIC "GGUF"
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS 4

typedef enum {
    GGUF_T_UINT8 = 0, GGUF_T_INT8 = 1, GGUF_T_UINT16 = 2, GGUF_T_INT16 = 3,
    GGUF_T_UINT32 = 4, GGUF_T_INT32 = 5, GGUF_T_FLOAT32 = 6, GGUF_T_BOOL = 7,
    GGUF_T_STRING = 8, GGUF_T_ARRAY = 9, GGUF_T_UINT64 = 10, GGUF_T_INT64 = 11,
    GGUF_T_FLOAT64 = 12, GGUF_T_COUNT = 13
} gguf_vtype;

typedef struct {
    const char *ptr; /* not NUL-terminated */
    uint64_t len;
} gguf_str;

typedef struct {
    const char *name; /* NUL-terminated, owned by the gguf_file */
    uint32_t n_dims;
    uint64_t ne[GGUF_MAX_DIMS]; /* ne[0] is the contiguous (input) dimension; unused dims are 1 */
    uint32_t type;              /* ggml type id, see quant.h */
    uint64_t offset;            /* relative to the data section */
    uint64_t n_elems;
    uint64_t n_bytes;
    const void *data; /* into the mapping */
    int mapped;       /* data is in a file mapping (pages a backend may release: re-read on access) */
} gguf_tensor;

typedef struct gguf_file gguf_file;

/* Maps and parses a file. On failure returns NULL and names file, offset and
 * item in err. */
gguf_file *gguf_open(const char *path, gem_err *err);

/* Parses a buffer the caller keeps alive until gguf_close (used by fuzzers
 * and tests). `name` is used in messages. */
gguf_file *gguf_open_mem(const void *data, size_t size, const char *name, gem_err *err);

void gguf_close(gguf_file *f);

const char *gguf_path(const gguf_file *f);
uint32_t gguf_version(const gguf_file *f);
uint64_t gguf_file_size(const gguf_file *f);
uint32_t gguf_alignment(const gguf_file *f);
uint64_t gguf_data_offset(const gguf_file *f); /* start of the tensor data section */

/* ---- metadata ---- */
uint64_t gguf_kv_count(const gguf_file *f);
const char *gguf_kv_key(const gguf_file *f, uint64_t i);
int64_t gguf_find_key(const gguf_file *f, const char *key); /* -1 when absent */
gguf_vtype gguf_kv_type(const gguf_file *f, uint64_t i);
/* Arrays: element type and length (GGUF_T_COUNT / 0 for scalars). */
gguf_vtype gguf_kv_arr_type(const gguf_file *f, uint64_t i);
uint64_t gguf_kv_arr_len(const gguf_file *f, uint64_t i);

/* Typed scalar getters: return 0 on success, -1 when the kv is not of a
 * compatible type (any integer type for _int, integer range checked; F32/F64
 * for _float; BOOL for _bool; STRING for _str). */
int gguf_kv_int(const gguf_file *f, uint64_t i, int64_t *out);
int gguf_kv_uint64(const gguf_file *f, uint64_t i, uint64_t *out);
int gguf_kv_float(const gguf_file *f, uint64_t i, double *out);
int gguf_kv_bool(const gguf_file *f, uint64_t i, int *out);
int gguf_kv_str(const gguf_file *f, uint64_t i, gguf_str *out);

/* Array element getters with the same type rules; idx is bounds-checked. */
int gguf_kv_arr_int(const gguf_file *f, uint64_t i, uint64_t idx, int64_t *out);
int gguf_kv_arr_float(const gguf_file *f, uint64_t i, uint64_t idx, double *out);
int gguf_kv_arr_bool(const gguf_file *f, uint64_t i, uint64_t idx, int *out);
int gguf_kv_arr_str(const gguf_file *f, uint64_t i, uint64_t idx, gguf_str *out);
/* Raw little-endian element bytes of a numeric array (may be unaligned). */
const void *gguf_kv_arr_data(const gguf_file *f, uint64_t i);

/* Where the kv starts in the file (for messages). */
uint64_t gguf_kv_offset(const gguf_file *f, uint64_t i);

/* The encoded bytes of a whole kv record (key, type, value), as in the file;
 * the writer copies records verbatim with it. */
const void *gguf_kv_raw(const gguf_file *f, uint64_t i, uint64_t *len);

const char *gguf_vtype_name(gguf_vtype t);

/* 1 when s equals the NUL-terminated c string. */
int gguf_str_eq(gguf_str s, const char *c);

/* ---- tensors ---- */
uint64_t gguf_tensor_count(const gguf_file *f);
const gguf_tensor *gguf_tensor_at(const gguf_file *f, uint64_t i);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);

#endif
