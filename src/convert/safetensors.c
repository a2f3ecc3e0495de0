/* safetensors reader (see safetensors.h).
 *
 * The header is parsed by the strict JSON parser, then every tensor entry is
 * checked on its own (dtype, shape, offsets, byte count) and finally all of
 * them together (sorted by offset they must tile the data section). Every
 * check happens before any view is handed out, so a hostile header can cost
 * at most a bounded parse. Numbers in the header are JSON doubles; offsets
 * and dimensions are accepted only as exact integers up to 2^53, which is far
 * above any file we can map. */
#include "convert/safetensors.h"

#include <stdlib.h>
#include <string.h>

#include "util/file.h"
#include "util/json.h"

#define MAX_EXACT 9007199254740992.0 /* 2^53 */

struct st_file {
    file_view src; /* the bytes and the name messages give them */
    st_tensor *tensors;
    size_t n;
};

static const struct {
    const char *name;
    uint32_t size;
} dtypes[ST_DTYPE_COUNT] = {
    [ST_BOOL] = {"BOOL", 1}, [ST_U8] = {"U8", 1},     [ST_I8] = {"I8", 1},
    [ST_I16] = {"I16", 2},   [ST_U16] = {"U16", 2},   [ST_F16] = {"F16", 2},
    [ST_BF16] = {"BF16", 2}, [ST_I32] = {"I32", 4},   [ST_U32] = {"U32", 4},
    [ST_F32] = {"F32", 4},   [ST_F64] = {"F64", 8},   [ST_I64] = {"I64", 8},
    [ST_U64] = {"U64", 8},   [ST_F8_E4M3] = {"F8_E4M3", 1}, [ST_F8_E5M2] = {"F8_E5M2", 1},
};

const char *st_dtype_name(st_dtype t) { return (unsigned)t < ST_DTYPE_COUNT ? dtypes[t].name : "?"; }
uint32_t st_dtype_size(st_dtype t) { return (unsigned)t < ST_DTYPE_COUNT ? dtypes[t].size : 0; }

const char *st_path(const st_file *f) { return f->src.path; }
size_t st_count(const st_file *f) { return f->n; }
const st_tensor *st_at(const st_file *f, size_t i) { return i < f->n ? &f->tensors[i] : NULL; }

const st_tensor *st_find(const st_file *f, const char *name) {
    size_t lo = 0, hi = f->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(f->tensors[mid].name, name);
        if (!c) return &f->tensors[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

static int exact_u64(const json *v, uint64_t *out) {
    if (!v || v->type != JSON_NUMBER || !v->is_int || v->num < 0 || v->num > MAX_EXACT) return -1;
    *out = (uint64_t)v->num;
    return 0;
}

/* One tensor entry; `data_size` bounds the offsets. */
static int parse_entry(st_file *f, const char *name, size_t name_len, const json *e, uint64_t data_size,
                       st_tensor *t, gem_err *err) {
    const char *p = f->src.path;
    if (name_len == 0) return gem_err_set(err, "%s: safetensors header: empty tensor name", p);
    if (memchr(name, 0, name_len)) return gem_err_set(err, "%s: safetensors header: tensor name contains a NUL byte", p);
    if (e->type != JSON_OBJECT)
        return gem_err_set(err, "%s: safetensors header: tensor '%s' is not an object", p, name);
    const json *dt = json_get(e, "dtype"), *shape = json_get(e, "shape"), *offs = json_get(e, "data_offsets");
    if (!dt || dt->type != JSON_STRING)
        return gem_err_set(err, "%s: safetensors header: tensor '%s' has no dtype string", p, name);
    int found = -1;
    for (int i = 0; i < ST_DTYPE_COUNT && found < 0; i++)
        if (dt->len == strlen(dtypes[i].name) && !memcmp(dt->str, dtypes[i].name, dt->len)) found = i;
    if (found < 0)
        return gem_err_set(err, "%s: safetensors header: tensor '%s' has unknown dtype '%.*s'", p, name,
                           (int)(dt->len > 32 ? 32 : dt->len), dt->str);
    t->dtype = (st_dtype)found;
    if (!shape || shape->type != JSON_ARRAY)
        return gem_err_set(err, "%s: safetensors header: tensor '%s' has no shape array", p, name);
    if (shape->len > ST_MAX_DIMS)
        return gem_err_set(err, "%s: safetensors header: tensor '%s' has %zu dimensions (at most %d)", p, name,
                           shape->len, ST_MAX_DIMS);
    t->n_dims = (uint32_t)shape->len;
    uint64_t n = 1;
    for (size_t i = 0; i < shape->len; i++) {
        uint64_t d;
        if (exact_u64(shape->items[i], &d))
            return gem_err_set(err, "%s: safetensors header: tensor '%s': shape[%zu] is not a non-negative integer",
                               p, name, i);
        t->shape[i] = d;
        if (d && n > UINT64_MAX / d)
            return gem_err_set(err, "%s: safetensors header: tensor '%s': element count overflows", p, name);
        n *= d;
    }
    t->n_elems = n;
    uint64_t b, e2;
    if (!offs || offs->type != JSON_ARRAY || offs->len != 2 || exact_u64(offs->items[0], &b) ||
        exact_u64(offs->items[1], &e2))
        return gem_err_set(err, "%s: safetensors header: tensor '%s' needs data_offsets [begin, end]", p, name);
    if (b > e2 || e2 > data_size)
        return gem_err_set(err,
                           "%s: safetensors header: tensor '%s': data_offsets [%llu, %llu] outside the %llu-byte data section",
                           p, name, (unsigned long long)b, (unsigned long long)e2, (unsigned long long)data_size);
    uint64_t want = n;
    if (want > UINT64_MAX / dtypes[found].size)
        return gem_err_set(err, "%s: safetensors header: tensor '%s': byte count overflows", p, name);
    want *= dtypes[found].size;
    if (e2 - b != want)
        return gem_err_set(err, "%s: safetensors header: tensor '%s' has %llu bytes, its shape and dtype need %llu",
                           p, name, (unsigned long long)(e2 - b), (unsigned long long)want);
    t->offset = b;
    t->n_bytes = want;
    return 0;
}

static int cmp_offset(const void *a, const void *b) {
    const st_tensor *x = a, *y = b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    return x->n_bytes < y->n_bytes ? -1 : x->n_bytes > y->n_bytes;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}

static int parse(st_file *f, gem_err *err) {
    const char *p = f->src.path;
    if (f->src.size < 8) return gem_err_set(err, "%s: not a safetensors file (%llu bytes, no header length)", p,
                                        (unsigned long long)f->src.size);
    uint64_t hlen;
    memcpy(&hlen, f->src.data, 8);
    if (hlen > f->src.size - 8)
        return gem_err_set(err, "%s: safetensors header of %llu bytes runs past the end of the file (%llu bytes)", p,
                           (unsigned long long)hlen, (unsigned long long)f->src.size);
    if (hlen > ST_MAX_HEADER)
        return gem_err_set(err, "%s: safetensors header of %llu bytes is larger than the %u-byte limit", p,
                           (unsigned long long)hlen, ST_MAX_HEADER);
    const uint64_t data_start = 8 + hlen, data_size = f->src.size - data_start;
    gem_err jerr = {{0}};
    json *h = json_parse((const char *)f->src.data + 8, (size_t)hlen, &jerr);
    if (!h) return gem_err_set(err, "%s: safetensors header is not valid JSON: %s", p, jerr.msg);
    int rc = -1;
    if (h->type != JSON_OBJECT) {
        gem_err_set(err, "%s: safetensors header is not a JSON object", p);
        goto done;
    }
    f->tensors = calloc(h->len ? h->len : 1, sizeof *f->tensors);
    if (!f->tensors) {
        gem_err_set(err, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < h->len; i++) {
        const char *key = h->keys[i];
        if (!strcmp(key, "__metadata__") && h->key_lens[i] == 12) {
            const json *m = h->items[i];
            if (m->type != JSON_OBJECT) {
                gem_err_set(err, "%s: safetensors header: __metadata__ is not an object", p);
                goto done;
            }
            for (size_t k = 0; k < m->len; k++)
                if (m->items[k]->type != JSON_STRING) {
                    gem_err_set(err, "%s: safetensors header: __metadata__ value '%s' is not a string", p, m->keys[k]);
                    goto done;
                }
            continue;
        }
        st_tensor *t = &f->tensors[f->n];
        if (parse_entry(f, key, h->key_lens[i], h->items[i], data_size, t, err)) goto done;
        if (!(t->name = strdup(key))) {
            gem_err_set(err, "out of memory");
            goto done;
        }
        f->n++;
    }
    /* the tensors must tile the data section */
    qsort(f->tensors, f->n, sizeof *f->tensors, cmp_offset);
    uint64_t at = 0;
    for (size_t i = 0; i < f->n; i++) {
        const st_tensor *t = &f->tensors[i];
        if (t->offset < at) {
            gem_err_set(err, "%s: safetensors header: tensor '%s' overlaps '%s'", p, t->name, f->tensors[i - 1].name);
            goto done;
        }
        if (t->offset > at) {
            gem_err_set(err, "%s: safetensors header: %llu unused bytes before tensor '%s'", p,
                        (unsigned long long)(t->offset - at), t->name);
            goto done;
        }
        at = t->offset + t->n_bytes;
    }
    if (at != data_size) {
        gem_err_set(err, "%s: safetensors data section has %llu bytes, the tensors cover %llu", p,
                    (unsigned long long)data_size, (unsigned long long)at);
        goto done;
    }
    for (size_t i = 0; i < f->n; i++) {
        f->tensors[i].offset += data_start;
        f->tensors[i].data = f->src.data + f->tensors[i].offset;
    }
    qsort(f->tensors, f->n, sizeof *f->tensors, cmp_name);
    rc = 0;
done:
    json_free(h);
    return rc;
}

/* The reader over src, which it takes over (closed on failure). */
static st_file *open_src(file_view *src, gem_err *err) {
    st_file *f = calloc(1, sizeof *f);
    if (file_view_move(src, f ? &f->src : NULL, err)) return NULL;
    if (!parse(f, err)) return f;
    st_close(f);
    return NULL;
}

st_file *st_open_mem(const void *data, size_t size, const char *name, gem_err *err) {
    file_view v;
    return file_view_mem(data, size, name, &v, err) ? NULL : open_src(&v, err);
}

st_file *st_open(const char *path, gem_err *err) {
    file_view v;
    return file_view_map(path, &v, err) ? NULL : open_src(&v, err);
}

void st_close(st_file *f) {
    if (!f) return;
    for (size_t i = 0; i < f->n; i++) free((char *)f->tensors[i].name);
    free(f->tensors);
    file_view_close(&f->src);
    free(f);
}
