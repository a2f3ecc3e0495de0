/* GGUF reader (see gguf.h).
 *
 * Parsing is a single forward pass with a bounds-checked cursor: every read
 * first proves `pos + n <= size` without overflow. Element counts are checked
 * against the bytes that remain before anything is allocated, so a hostile
 * count can neither allocate unbounded memory nor loop for long. Key and
 * tensor-name lookups use a hash table so duplicate detection stays linear
 * on files with millions of entries. Only little-endian hosts are supported:
 * numeric values are memcpy'd straight out of the file. */
#include "gguf/gguf.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant.h"
#include "util/file.h"
#include "util/hash.h"
#include "util/utf8.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gem reads GGUF on little-endian hosts only"
#endif

#define GGUF_MAX_KEY_LEN 65535u
#define GGUF_MAX_NAME_LEN 255u

typedef struct {
    char *key;
    uint64_t off;        /* file offset of the kv record */
    uint64_t end;        /* one past its last byte */
    gguf_vtype type;
    gguf_vtype arr_type; /* GGUF_T_COUNT for scalars */
    uint64_t arr_len;
    const uint8_t *val;  /* scalar bytes, or first array element */
    uint64_t *str_offs;  /* string arrays: file offset of each element's length */
} gguf_kv;

typedef struct {
    uint64_t *slots; /* index + 1; 0 = empty */
    uint64_t cap;    /* power of two */
    uint64_t seed;   /* per index, random: a file cannot choose names that collide */
} name_index;

struct gguf_file {
    file_view src; /* the bytes and the name messages give them */
    uint32_t version;
    uint32_t alignment;
    uint64_t data_offset;
    uint64_t n_kv;
    gguf_kv *kv;
    uint64_t n_tensors;
    gguf_tensor *tensors;
    name_index kv_index;
    name_index tensor_index;
};

/* ---- cursor ---- */

typedef struct {
    const uint8_t *base;
    uint64_t size;
    uint64_t pos;
    const char *name;
    gem_err *err;
} cursor;

static int cur_fail(cursor *c, const char *what) {
    return gem_err_set(c->err, "%s: offset %llu: %s", c->name, (unsigned long long)c->pos, what);
}

static int cur_need(cursor *c, uint64_t n, const char *what) {
    if (n > c->size || c->pos > c->size - n) {
        char buf[400];
        snprintf(buf, sizeof buf, "truncated file: %s needs %llu bytes, %llu remain", what,
                 (unsigned long long)n, (unsigned long long)(c->size - c->pos));
        return cur_fail(c, buf);
    }
    return 0;
}

static int cur_u32(cursor *c, uint32_t *v, const char *what) {
    if (cur_need(c, 4, what)) return -1;
    memcpy(v, c->base + c->pos, 4);
    c->pos += 4;
    return 0;
}

static int cur_u64(cursor *c, uint64_t *v, const char *what) {
    if (cur_need(c, 8, what)) return -1;
    memcpy(v, c->base + c->pos, 8);
    c->pos += 8;
    return 0;
}

static uint64_t cur_left(const cursor *c) { return c->size - c->pos; }

/* ---- name index ---- */

/* Seeded (util/hash.h says why): with linear probing, names a file's
 * author built to share one slot would make parsing quadratic. */
static uint64_t name_hash(const char *s, uint64_t seed) { return hash_bytes_seeded(s, strlen(s), seed); }

static int index_init(name_index *ix, uint64_t n) {
    uint64_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    ix->slots = calloc(cap, sizeof *ix->slots);
    ix->cap = cap;
    ix->seed = hash_seed(ix);
    return ix->slots ? 0 : -1;
}

/* Inserts name as entry `idx`; returns the existing index when the name is
 * already present (duplicate), UINT64_MAX otherwise. */
static uint64_t index_insert(name_index *ix, const char *name, uint64_t idx,
                             const char *(*name_of)(const void *, uint64_t), const void *ctx) {
    uint64_t m = ix->cap - 1, h = name_hash(name, ix->seed) & m;
    while (ix->slots[h]) {
        uint64_t e = ix->slots[h] - 1;
        if (!strcmp(name_of(ctx, e), name)) return e;
        h = (h + 1) & m;
    }
    ix->slots[h] = idx + 1;
    return UINT64_MAX;
}

static int64_t index_find(const name_index *ix, const char *name,
                          const char *(*name_of)(const void *, uint64_t), const void *ctx) {
    if (!ix->slots) return -1;
    uint64_t m = ix->cap - 1, h = name_hash(name, ix->seed) & m;
    while (ix->slots[h]) {
        uint64_t e = ix->slots[h] - 1;
        if (!strcmp(name_of(ctx, e), name)) return (int64_t)e;
        h = (h + 1) & m;
    }
    return -1;
}

static const char *kv_name_of(const void *ctx, uint64_t i) {
    return ((const gguf_file *)ctx)->kv[i].key;
}

static const char *tensor_name_of(const void *ctx, uint64_t i) {
    return ((const gguf_file *)ctx)->tensors[i].name;
}

/* ---- value types ---- */

static const char *const vtype_names[GGUF_T_COUNT] = {
    "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
    "bool", "string", "array", "uint64", "int64", "float64",
};

const char *gguf_vtype_name(gguf_vtype t) {
    return (unsigned)t < GGUF_T_COUNT ? vtype_names[t] : "invalid";
}

/* Byte size of a fixed-size scalar type; 0 for string/array/invalid. */
static uint64_t vtype_size(gguf_vtype t) {
    switch (t) {
    case GGUF_T_UINT8: case GGUF_T_INT8: case GGUF_T_BOOL: return 1;
    case GGUF_T_UINT16: case GGUF_T_INT16: return 2;
    case GGUF_T_UINT32: case GGUF_T_INT32: case GGUF_T_FLOAT32: return 4;
    case GGUF_T_UINT64: case GGUF_T_INT64: case GGUF_T_FLOAT64: return 8;
    default: return 0;
    }
}

/* Reads a length-prefixed string at the cursor; returns a view. */
static int cur_str(cursor *c, gguf_str *s, const char *what) {
    uint64_t len;
    if (cur_u64(c, &len, what)) return -1;
    if (len > cur_left(c)) {
        c->pos -= 8;
        char buf[300];
        snprintf(buf, sizeof buf, "%s: string length %llu exceeds the %llu bytes left in the file",
                 what, (unsigned long long)len, (unsigned long long)(cur_left(c) - 8));
        return cur_fail(c, buf);
    }
    s->ptr = (const char *)c->base + c->pos;
    s->len = len;
    c->pos += len;
    return 0;
}

static char *dup_name(cursor *c, gguf_str s, uint64_t max_len, const char *what) {
    char buf[300];
    uint64_t at = c->pos - s.len;
    if (s.len == 0) {
        snprintf(buf, sizeof buf, "empty %s", what);
    } else if (s.len > max_len) {
        snprintf(buf, sizeof buf, "%s of %llu bytes is longer than %llu", what,
                 (unsigned long long)s.len, (unsigned long long)max_len);
    } else if (memchr(s.ptr, 0, s.len)) {
        snprintf(buf, sizeof buf, "%s contains a NUL byte", what);
    } else if (!utf8_valid(s.ptr, s.len)) {
        snprintf(buf, sizeof buf, "%s is not valid UTF-8", what);
    } else {
        char *out = malloc(s.len + 1);
        if (!out) {
            gem_err_set(c->err, "%s: out of memory", c->name);
            return NULL;
        }
        memcpy(out, s.ptr, s.len);
        out[s.len] = 0;
        return out;
    }
    uint64_t save = c->pos;
    c->pos = at;
    cur_fail(c, buf);
    c->pos = save;
    return NULL;
}

static int parse_value(gguf_file *f, cursor *c, gguf_kv *kv) {
    uint32_t t;
    if (cur_u32(c, &t, "value type")) return -1;
    if (t >= GGUF_T_COUNT) {
        c->pos -= 4;
        char buf[400];
        snprintf(buf, sizeof buf, "key '%s': invalid value type %u", kv->key, t);
        return cur_fail(c, buf);
    }
    kv->type = (gguf_vtype)t;
    kv->arr_type = GGUF_T_COUNT;
    if (t == GGUF_T_STRING) {
        gguf_str s;
        kv->val = c->base + c->pos;
        return cur_str(c, &s, kv->key);
    }
    if (t != GGUF_T_ARRAY) {
        uint64_t n = vtype_size(kv->type);
        kv->val = c->base + c->pos;
        if (cur_need(c, n, kv->key)) return -1;
        if (t == GGUF_T_BOOL && c->base[c->pos] > 1) {
            char buf[400];
            snprintf(buf, sizeof buf, "key '%s': invalid bool value %u", kv->key, c->base[c->pos]);
            return cur_fail(c, buf);
        }
        c->pos += n;
        return 0;
    }
    uint32_t et;
    uint64_t len;
    if (cur_u32(c, &et, "array element type")) return -1;
    if (et >= GGUF_T_COUNT || et == GGUF_T_ARRAY) {
        c->pos -= 4;
        char buf[400];
        snprintf(buf, sizeof buf, "key '%s': %s array element type %u", kv->key,
                 et == GGUF_T_ARRAY ? "unsupported nested" : "invalid", et);
        return cur_fail(c, buf);
    }
    if (cur_u64(c, &len, "array length")) return -1;
    uint64_t esz = et == GGUF_T_STRING ? 8 : vtype_size((gguf_vtype)et);
    if (len > cur_left(c) / esz) {
        c->pos -= 8;
        char buf[400];
        snprintf(buf, sizeof buf, "key '%s': array of %llu %s elements cannot fit in the %llu bytes left",
                 kv->key, (unsigned long long)len, gguf_vtype_name((gguf_vtype)et),
                 (unsigned long long)(cur_left(c) - 8));
        return cur_fail(c, buf);
    }
    kv->arr_type = (gguf_vtype)et;
    kv->arr_len = len;
    kv->val = c->base + c->pos;
    if (et == GGUF_T_STRING) {
        kv->str_offs = malloc((len ? len : 1) * sizeof *kv->str_offs);
        if (!kv->str_offs) return gem_err_set(c->err, "%s: out of memory", f->src.path);
        for (uint64_t i = 0; i < len; i++) {
            gguf_str s;
            kv->str_offs[i] = c->pos;
            if (cur_str(c, &s, kv->key)) return -1;
        }
        return 0;
    }
    if (et == GGUF_T_BOOL) {
        for (uint64_t i = 0; i < len; i++) {
            if (c->base[c->pos + i] > 1) {
                c->pos += i;
                char buf[400];
                snprintf(buf, sizeof buf, "key '%s': invalid bool value %u at index %llu", kv->key,
                         c->base[c->pos], (unsigned long long)i);
                return cur_fail(c, buf);
            }
        }
    }
    c->pos += len * esz;
    return 0;
}

static int parse_kvs(gguf_file *f, cursor *c) {
    /* smallest kv: 8 (key len) + 1 (key) + 4 (type) + 1 (u8 value) */
    if (f->n_kv > cur_left(c) / 14) {
        c->pos -= 8;
        char buf[200];
        snprintf(buf, sizeof buf, "metadata count %llu cannot fit in the %llu bytes left",
                 (unsigned long long)f->n_kv, (unsigned long long)cur_left(c));
        return cur_fail(c, buf);
    }
    f->kv = calloc(f->n_kv ? f->n_kv : 1, sizeof *f->kv);
    if (!f->kv || index_init(&f->kv_index, f->n_kv))
        return gem_err_set(c->err, "%s: out of memory", f->src.path);
    for (uint64_t i = 0; i < f->n_kv; i++) {
        gguf_kv *kv = &f->kv[i];
        gguf_str key;
        kv->off = c->pos;
        kv->arr_type = GGUF_T_COUNT;
        if (cur_str(c, &key, "metadata key")) return -1;
        kv->key = dup_name(c, key, GGUF_MAX_KEY_LEN, "metadata key");
        if (!kv->key) return -1;
        uint64_t dup = index_insert(&f->kv_index, kv->key, i, kv_name_of, f);
        if (dup != UINT64_MAX) {
            c->pos = kv->off;
            char buf[400];
            snprintf(buf, sizeof buf, "duplicate metadata key '%s'", kv->key);
            return cur_fail(c, buf);
        }
        if (parse_value(f, c, kv)) return -1;
        kv->end = c->pos;
    }
    return 0;
}

static int parse_alignment(gguf_file *f, gem_err *err) {
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    int64_t i = gguf_find_key(f, "general.alignment");
    if (i < 0) return 0;
    const gguf_kv *kv = &f->kv[i];
    if (kv->type != GGUF_T_UINT32)
        return gem_err_set(err, "%s: offset %llu: key 'general.alignment' has type %s, expected uint32",
                           f->src.path, (unsigned long long)kv->off, gguf_vtype_name(kv->type));
    uint32_t a;
    memcpy(&a, kv->val, 4);
    /* at least 8 (the format's rule: a multiple of 8), so f32 and f16
     * tensors are aligned for their element loads */
    if (a < 8 || (a & (a - 1)))
        return gem_err_set(err, "%s: offset %llu: key 'general.alignment' = %u is not a power of two of at least 8",
                           f->src.path, (unsigned long long)kv->off, a);
    f->alignment = a;
    return 0;
}

static int parse_tensor_infos(gguf_file *f, cursor *c) {
    /* smallest info: 8 + 1 (name) + 4 (n_dims) + 8 (one dim) + 4 (type) + 8 (offset) */
    if (f->n_tensors > cur_left(c) / 33) {
        char buf[200];
        snprintf(buf, sizeof buf, "tensor count %llu cannot fit in the %llu bytes left",
                 (unsigned long long)f->n_tensors, (unsigned long long)cur_left(c));
        return cur_fail(c, buf);
    }
    f->tensors = calloc(f->n_tensors ? f->n_tensors : 1, sizeof *f->tensors);
    if (!f->tensors || index_init(&f->tensor_index, f->n_tensors))
        return gem_err_set(c->err, "%s: out of memory", f->src.path);
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        uint64_t at = c->pos;
        char buf[600];
        gguf_str name;
        if (cur_str(c, &name, "tensor name")) return -1;
        char *nm = dup_name(c, name, GGUF_MAX_NAME_LEN, "tensor name");
        if (!nm) return -1;
        t->name = nm;
        if (index_insert(&f->tensor_index, nm, i, tensor_name_of, f) != UINT64_MAX) {
            c->pos = at;
            snprintf(buf, sizeof buf, "duplicate tensor name '%s'", nm);
            return cur_fail(c, buf);
        }
        if (cur_u32(c, &t->n_dims, "tensor dimension count")) return -1;
        if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS) {
            c->pos -= 4;
            snprintf(buf, sizeof buf, "tensor '%s': %u dimensions (1 to %d allowed)", nm, t->n_dims,
                     GGUF_MAX_DIMS);
            return cur_fail(c, buf);
        }
        uint64_t n = 1;
        for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) {
            if (cur_u64(c, &t->ne[d], "tensor dimension")) return -1;
            if (t->ne[d] == 0 || t->ne[d] > (uint64_t)INT64_MAX / n) {
                c->pos -= 8;
                snprintf(buf, sizeof buf, "tensor '%s': dimension %u = %llu %s", nm, d,
                         (unsigned long long)t->ne[d],
                         t->ne[d] == 0 ? "is zero" : "overflows the element count");
                return cur_fail(c, buf);
            }
            n *= t->ne[d];
        }
        t->n_elems = n;
        if (cur_u32(c, &t->type, "tensor type")) return -1;
        uint32_t bs = quant_block_size(t->type);
        if (!bs) {
            c->pos -= 4;
            snprintf(buf, sizeof buf, "tensor '%s': unknown storage type %u", nm, t->type);
            return cur_fail(c, buf);
        }
        if (t->ne[0] % bs) {
            c->pos -= 4;
            snprintf(buf, sizeof buf, "tensor '%s': row length %llu is not a multiple of the %s block size %u",
                     nm, (unsigned long long)t->ne[0], quant_type_name(t->type), bs);
            return cur_fail(c, buf);
        }
        uint64_t ts = quant_type_size(t->type);
        uint64_t blocks = n / bs;
        if (blocks > UINT64_MAX / ts) {
            c->pos -= 4;
            snprintf(buf, sizeof buf, "tensor '%s': byte size overflows", nm);
            return cur_fail(c, buf);
        }
        t->n_bytes = blocks * ts;
        if (cur_u64(c, &t->offset, "tensor offset")) return -1;
        if (t->offset % f->alignment) {
            c->pos -= 8;
            snprintf(buf, sizeof buf, "tensor '%s': data offset %llu is not a multiple of the alignment %u",
                     nm, (unsigned long long)t->offset, f->alignment);
            return cur_fail(c, buf);
        }
    }
    return 0;
}


/* Sorting indices by offset uses a small merge sort (qsort_r is not C11). */
static void sort_by_offset(uint64_t *idx, uint64_t *tmp, uint64_t n, const gguf_tensor *t) {
    if (n < 2) return;
    uint64_t h = n / 2;
    sort_by_offset(idx, tmp, h, t);
    sort_by_offset(idx + h, tmp, n - h, t);
    uint64_t i = 0, j = h, k = 0;
    while (i < h && j < n) tmp[k++] = t[idx[i]].offset <= t[idx[j]].offset ? idx[i++] : idx[j++];
    while (i < h) tmp[k++] = idx[i++];
    while (j < n) tmp[k++] = idx[j++];
    memcpy(idx, tmp, n * sizeof *idx);
}

static int check_tensor_data(gguf_file *f, gem_err *err) {
    if (f->n_tensors == 0) return 0;
    if (f->data_offset > f->src.size)
        return gem_err_set(err, "%s: truncated file: tensor data section starts at %llu, past the end (%llu bytes)",
                           f->src.path, (unsigned long long)f->data_offset, (unsigned long long)f->src.size);
    uint64_t avail = f->src.size - f->data_offset;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        if (t->offset > avail || t->n_bytes > avail - t->offset)
            return gem_err_set(err, "%s: tensor '%s': data [%llu, +%llu) runs past the end of the file (data section holds %llu bytes)",
                               f->src.path, t->name, (unsigned long long)t->offset,
                               (unsigned long long)t->n_bytes, (unsigned long long)avail);
        t->data = f->src.data + f->data_offset + t->offset;
        t->mapped = f->src.mapped;
    }
    uint64_t *idx = malloc(f->n_tensors * sizeof *idx);
    uint64_t *tmp = malloc(f->n_tensors * sizeof *tmp);
    if (!idx || !tmp) {
        free(idx);
        free(tmp);
        return gem_err_set(err, "%s: out of memory", f->src.path);
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) idx[i] = i;
    sort_by_offset(idx, tmp, f->n_tensors, f->tensors);
    int rc = 0;
    for (uint64_t i = 1; i < f->n_tensors; i++) {
        const gguf_tensor *a = &f->tensors[idx[i - 1]], *b = &f->tensors[idx[i]];
        if (a->offset + a->n_bytes > b->offset) {
            rc = gem_err_set(err, "%s: tensor '%s' [%llu, +%llu) overlaps tensor '%s' at %llu", f->src.path,
                             b->name, (unsigned long long)b->offset, (unsigned long long)b->n_bytes,
                             a->name, (unsigned long long)a->offset);
            break;
        }
    }
    free(idx);
    free(tmp);
    return rc;
}

static int parse(gguf_file *f, gem_err *err) {
    cursor c = {f->src.data, f->src.size, 0, f->src.path, err};
    if (f->src.size == 0) return gem_err_set(err, "%s: empty file", f->src.path);
    if (f->src.size < 4 || memcmp(f->src.data, GGUF_MAGIC, 4)) {
        if (f->src.size >= 4 && !memcmp(f->src.data, "FUGG", 4))
            return gem_err_set(err, "%s: offset 0: big-endian GGUF is not supported", f->src.path);
        return gem_err_set(err, "%s: offset 0: bad magic (not a GGUF file)", f->src.path);
    }
    c.pos = 4;
    if (cur_u32(&c, &f->version, "version")) return -1;
    if (f->version != 2 && f->version != 3) {
        c.pos -= 4;
        char buf[200];
        if (f->version == 1)
            snprintf(buf, sizeof buf, "GGUF version 1 is not supported (only 2 and 3)");
        else if ((f->version & 0xffff) == 0 && f->version >> 16)
            snprintf(buf, sizeof buf, "GGUF version %u looks byte-swapped: big-endian GGUF is not supported", f->version);
        else
            snprintf(buf, sizeof buf, "unsupported GGUF version %u (only 2 and 3)", f->version);
        return cur_fail(&c, buf);
    }
    if (cur_u64(&c, &f->n_tensors, "tensor count")) return -1;
    if (cur_u64(&c, &f->n_kv, "metadata count")) return -1;
    uint64_t n_tensors = f->n_tensors;
    f->n_tensors = 0; /* until the table is allocated */
    if (parse_kvs(f, &c)) return -1;
    if (parse_alignment(f, err)) return -1;
    f->n_tensors = n_tensors;
    if (parse_tensor_infos(f, &c)) {
        return -1;
    }
    uint64_t a = f->alignment;
    uint64_t pad = (a - c.pos % a) % a;
    f->data_offset = c.pos + pad;
    return check_tensor_data(f, err);
}

/* The reader over src, which it takes over (closed on failure). */
static gguf_file *open_src(file_view *src, gem_err *err) {
    gguf_file *f = calloc(1, sizeof *f);
    if (file_view_move(src, f ? &f->src : NULL, err)) return NULL;
    if (!parse(f, err)) return f;
    gguf_close(f);
    return NULL;
}

gguf_file *gguf_open_mem(const void *data, size_t size, const char *name, gem_err *err) {
    file_view v;
    return file_view_mem(data, size, name, &v, err) ? NULL : open_src(&v, err);
}

gguf_file *gguf_open(const char *path, gem_err *err) {
    file_view v;
    return file_view_map(path, &v, err) ? NULL : open_src(&v, err);
}

void gguf_close(gguf_file *f) {
    if (!f) return;
    if (f->kv) {
        for (uint64_t i = 0; i < f->n_kv; i++) {
            free(f->kv[i].key);
            free(f->kv[i].str_offs);
        }
        free(f->kv);
    }
    if (f->tensors) {
        for (uint64_t i = 0; i < f->n_tensors; i++) free((char *)f->tensors[i].name);
        free(f->tensors);
    }
    free(f->kv_index.slots);
    free(f->tensor_index.slots);
    file_view_close(&f->src);
    free(f);
}

/* ---- accessors ---- */

const char *gguf_path(const gguf_file *f) { return f->src.path; }
uint32_t gguf_version(const gguf_file *f) { return f->version; }
uint64_t gguf_file_size(const gguf_file *f) { return f->src.size; }
uint32_t gguf_alignment(const gguf_file *f) { return f->alignment; }
uint64_t gguf_data_offset(const gguf_file *f) { return f->data_offset; }
uint64_t gguf_kv_count(const gguf_file *f) { return f->n_kv; }
const char *gguf_kv_key(const gguf_file *f, uint64_t i) { return i < f->n_kv ? f->kv[i].key : NULL; }
uint64_t gguf_kv_offset(const gguf_file *f, uint64_t i) { return i < f->n_kv ? f->kv[i].off : 0; }

const void *gguf_kv_raw(const gguf_file *f, uint64_t i, uint64_t *len) {
    if (i >= f->n_kv) return NULL;
    *len = f->kv[i].end - f->kv[i].off;
    return f->src.data + f->kv[i].off;
}

int64_t gguf_find_key(const gguf_file *f, const char *key) {
    return index_find(&f->kv_index, key, kv_name_of, f);
}

gguf_vtype gguf_kv_type(const gguf_file *f, uint64_t i) {
    return i < f->n_kv ? f->kv[i].type : GGUF_T_COUNT;
}

gguf_vtype gguf_kv_arr_type(const gguf_file *f, uint64_t i) {
    return i < f->n_kv ? f->kv[i].arr_type : GGUF_T_COUNT;
}

uint64_t gguf_kv_arr_len(const gguf_file *f, uint64_t i) {
    return i < f->n_kv ? f->kv[i].arr_len : 0;
}

const void *gguf_kv_arr_data(const gguf_file *f, uint64_t i) {
    if (i >= f->n_kv || f->kv[i].type != GGUF_T_ARRAY || f->kv[i].arr_type == GGUF_T_STRING) return NULL;
    return f->kv[i].val;
}

/* Decodes one numeric value of type t at p. */
static int num_int(gguf_vtype t, const uint8_t *p, int64_t *out) {
    switch (t) {
    case GGUF_T_UINT8: *out = p[0]; return 0;
    case GGUF_T_INT8: *out = (int8_t)p[0]; return 0;
    case GGUF_T_UINT16: { uint16_t v; memcpy(&v, p, 2); *out = v; return 0; }
    case GGUF_T_INT16: { int16_t v; memcpy(&v, p, 2); *out = v; return 0; }
    case GGUF_T_UINT32: { uint32_t v; memcpy(&v, p, 4); *out = v; return 0; }
    case GGUF_T_INT32: { int32_t v; memcpy(&v, p, 4); *out = v; return 0; }
    case GGUF_T_INT64: { int64_t v; memcpy(&v, p, 8); *out = v; return 0; }
    case GGUF_T_UINT64: {
        uint64_t v;
        memcpy(&v, p, 8);
        if (v > (uint64_t)INT64_MAX) return -1;
        *out = (int64_t)v;
        return 0;
    }
    default: return -1;
    }
}

static int num_float(gguf_vtype t, const uint8_t *p, double *out) {
    if (t == GGUF_T_FLOAT32) { float v; memcpy(&v, p, 4); *out = v; return 0; }
    if (t == GGUF_T_FLOAT64) { memcpy(out, p, 8); return 0; }
    return -1;
}

int gguf_kv_int(const gguf_file *f, uint64_t i, int64_t *out) {
    if (i >= f->n_kv) return -1;
    return num_int(f->kv[i].type, f->kv[i].val, out);
}

int gguf_kv_uint64(const gguf_file *f, uint64_t i, uint64_t *out) {
    if (i >= f->n_kv) return -1;
    if (f->kv[i].type == GGUF_T_UINT64) { memcpy(out, f->kv[i].val, 8); return 0; }
    int64_t v;
    if (num_int(f->kv[i].type, f->kv[i].val, &v) || v < 0) return -1;
    *out = (uint64_t)v;
    return 0;
}

int gguf_kv_float(const gguf_file *f, uint64_t i, double *out) {
    if (i >= f->n_kv) return -1;
    return num_float(f->kv[i].type, f->kv[i].val, out);
}

int gguf_kv_bool(const gguf_file *f, uint64_t i, int *out) {
    if (i >= f->n_kv || f->kv[i].type != GGUF_T_BOOL) return -1;
    *out = f->kv[i].val[0] != 0;
    return 0;
}

static void str_at(const gguf_file *f, uint64_t off, gguf_str *out) {
    uint64_t len;
    memcpy(&len, f->src.data + off, 8);
    out->ptr = (const char *)f->src.data + off + 8;
    out->len = len;
}

int gguf_kv_str(const gguf_file *f, uint64_t i, gguf_str *out) {
    if (i >= f->n_kv || f->kv[i].type != GGUF_T_STRING) return -1;
    str_at(f, (uint64_t)(f->kv[i].val - f->src.data), out);
    return 0;
}

static const uint8_t *arr_elem(const gguf_file *f, uint64_t i, uint64_t idx) {
    if (i >= f->n_kv || f->kv[i].type != GGUF_T_ARRAY || idx >= f->kv[i].arr_len) return NULL;
    return f->kv[i].val + idx * vtype_size(f->kv[i].arr_type);
}

int gguf_kv_arr_int(const gguf_file *f, uint64_t i, uint64_t idx, int64_t *out) {
    const uint8_t *p = arr_elem(f, i, idx);
    return p ? num_int(f->kv[i].arr_type, p, out) : -1;
}

int gguf_kv_arr_float(const gguf_file *f, uint64_t i, uint64_t idx, double *out) {
    const uint8_t *p = arr_elem(f, i, idx);
    return p ? num_float(f->kv[i].arr_type, p, out) : -1;
}

int gguf_kv_arr_bool(const gguf_file *f, uint64_t i, uint64_t idx, int *out) {
    const uint8_t *p = arr_elem(f, i, idx);
    if (!p || f->kv[i].arr_type != GGUF_T_BOOL) return -1;
    *out = p[0] != 0;
    return 0;
}

int gguf_kv_arr_str(const gguf_file *f, uint64_t i, uint64_t idx, gguf_str *out) {
    if (i >= f->n_kv || f->kv[i].type != GGUF_T_ARRAY || f->kv[i].arr_type != GGUF_T_STRING ||
        idx >= f->kv[i].arr_len)
        return -1;
    str_at(f, f->kv[i].str_offs[idx], out);
    return 0;
}

int gguf_str_eq(gguf_str s, const char *c) {
    size_t n = strlen(c);
    return s.len == n && !memcmp(s.ptr, c, n);
}

uint64_t gguf_tensor_count(const gguf_file *f) { return f->n_tensors; }

const gguf_tensor *gguf_tensor_at(const gguf_file *f, uint64_t i) {
    return i < f->n_tensors ? &f->tensors[i] : NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
    int64_t i = index_find(&f->tensor_index, name, tensor_name_of, f);
    return i < 0 ? NULL : &f->tensors[i];
}
