/* GGUF writer (see gguf_write.h).
 *
 * Metadata is encoded straight into a growable byte buffer as it is added,
 * so the header can be written in one go; keys are remembered only to refuse
 * duplicates. Tensor data is streamed: the writer tracks which tensor is
 * being filled and how many bytes are still owed, and pads to the alignment
 * after each one, so an 18 GB file never has to be held in memory. */
#include "gguf/gguf_write.h"

#include <stdlib.h>
#include <string.h>

#include "quant/quant.h"

typedef struct {
    char *name;
    uint32_t type;
    uint32_t n_dims;
    uint64_t ne[GGUF_MAX_DIMS];
    uint64_t offset;
    uint64_t n_bytes;
} w_tensor;

struct gguf_writer {
    uint32_t alignment;
    uint8_t *kv;
    uint64_t kv_len, kv_cap;
    uint64_t n_kv;
    char **keys;
    uint64_t keys_cap;
    w_tensor *tensors;
    uint64_t n_tensors, tensors_cap;
    uint64_t data_size;
    /* streaming state */
    uint64_t cur;     /* tensor being written */
    uint64_t written; /* bytes of it written so far */
    int begun;
};

gguf_writer *gguf_writer_new(uint32_t alignment) {
    if (alignment < 8 || (alignment & (alignment - 1))) return NULL; /* what the reader accepts */
    gguf_writer *w = calloc(1, sizeof *w);
    if (w) w->alignment = alignment;
    return w;
}

void gguf_writer_free(gguf_writer *w) {
    if (!w) return;
    for (uint64_t i = 0; i < w->n_kv; i++) free(w->keys[i]);
    for (uint64_t i = 0; i < w->n_tensors; i++) free(w->tensors[i].name);
    free(w->keys);
    free(w->tensors);
    free(w->kv);
    free(w);
}

static int grow(void **p, uint64_t *cap, uint64_t need, size_t elem) {
    if (need <= *cap) return 0;
    uint64_t c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

static int put(gguf_writer *w, const void *p, uint64_t n) {
    if (n == 0) return 0; /* memcpy from NULL is undefined even for 0 bytes */
    if (grow((void **)&w->kv, &w->kv_cap, w->kv_len + n, 1)) return -1;
    memcpy(w->kv + w->kv_len, p, n);
    w->kv_len += n;
    return 0;
}

static int put_u32(gguf_writer *w, uint32_t v) { return put(w, &v, 4); }
static int put_u64(gguf_writer *w, uint64_t v) { return put(w, &v, 8); }

static int put_str(gguf_writer *w, const char *s, uint64_t n) {
    return put_u64(w, n) || put(w, s, n);
}

/* Registers a new key and writes it; refuses duplicates and a started file. */
static int begin_kv(gguf_writer *w, const char *key, gguf_vtype t, gem_err *err) {
    if (w->begun) return gem_err_set(err, "gguf writer: key '%s' added after the header was written", key);
    for (uint64_t i = 0; i < w->n_kv; i++)
        if (!strcmp(w->keys[i], key)) return gem_err_set(err, "gguf writer: duplicate key '%s'", key);
    if (grow((void **)&w->keys, &w->keys_cap, w->n_kv + 1, sizeof *w->keys)) goto oom;
    w->keys[w->n_kv] = strdup(key);
    if (!w->keys[w->n_kv]) goto oom;
    w->n_kv++;
    if (put_str(w, key, strlen(key)) || put_u32(w, (uint32_t)t)) goto oom;
    return 0;
oom:
    return gem_err_set(err, "gguf writer: out of memory at key '%s'", key);
}

static int scalar(gguf_writer *w, const char *key, gguf_vtype t, const void *v, uint64_t n, gem_err *err) {
    if (begin_kv(w, key, t, err)) return -1;
    if (put(w, v, n)) return gem_err_set(err, "gguf writer: out of memory at key '%s'", key);
    return 0;
}

int gguf_w_u32(gguf_writer *w, const char *key, uint32_t v, gem_err *err) { return scalar(w, key, GGUF_T_UINT32, &v, 4, err); }
int gguf_w_i32(gguf_writer *w, const char *key, int32_t v, gem_err *err) { return scalar(w, key, GGUF_T_INT32, &v, 4, err); }
int gguf_w_u64(gguf_writer *w, const char *key, uint64_t v, gem_err *err) { return scalar(w, key, GGUF_T_UINT64, &v, 8, err); }
int gguf_w_f32(gguf_writer *w, const char *key, float v, gem_err *err) { return scalar(w, key, GGUF_T_FLOAT32, &v, 4, err); }

int gguf_w_bool(gguf_writer *w, const char *key, int v, gem_err *err) {
    uint8_t b = v ? 1 : 0;
    return scalar(w, key, GGUF_T_BOOL, &b, 1, err);
}

int gguf_w_str(gguf_writer *w, const char *key, const char *v, gem_err *err) {
    if (begin_kv(w, key, GGUF_T_STRING, err)) return -1;
    if (put_str(w, v, strlen(v))) return gem_err_set(err, "gguf writer: out of memory at key '%s'", key);
    return 0;
}

int gguf_w_arr(gguf_writer *w, const char *key, gguf_vtype et, const void *data, uint64_t n, gem_err *err) {
    static const uint8_t sizes[GGUF_T_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    if ((unsigned)et >= GGUF_T_COUNT || !sizes[et])
        return gem_err_set(err, "gguf writer: key '%s': bad array element type", key);
    if (begin_kv(w, key, GGUF_T_ARRAY, err)) return -1;
    if (put_u32(w, (uint32_t)et) || put_u64(w, n) || put(w, data, n * sizes[et]))
        return gem_err_set(err, "gguf writer: out of memory at key '%s'", key);
    return 0;
}

int gguf_w_arr_str(gguf_writer *w, const char *key, const char *const *v, uint64_t n, gem_err *err) {
    if (begin_kv(w, key, GGUF_T_ARRAY, err)) return -1;
    if (put_u32(w, GGUF_T_STRING) || put_u64(w, n)) goto oom;
    for (uint64_t i = 0; i < n; i++)
        if (put_str(w, v[i], strlen(v[i]))) goto oom;
    return 0;
oom:
    return gem_err_set(err, "gguf writer: out of memory at key '%s'", key);
}

int gguf_w_copy_kv(gguf_writer *w, const gguf_file *src, uint64_t i, gem_err *err) {
    uint64_t len;
    const uint8_t *raw = gguf_kv_raw(src, i, &len);
    const char *key = gguf_kv_key(src, i);
    if (!raw) return gem_err_set(err, "gguf writer: no kv %llu to copy", (unsigned long long)i);
    if (begin_kv(w, key, gguf_kv_type(src, i), err)) return -1;
    /* begin_kv wrote key and type again; append only the value bytes */
    uint64_t head = 8 + strlen(key) + 4;
    if (put(w, raw + head, len - head)) return gem_err_set(err, "gguf writer: out of memory at key '%s'", key);
    return 0;
}

int gguf_w_tensor(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                  const uint64_t *ne, gem_err *err) {
    if (w->begun) return gem_err_set(err, "gguf writer: tensor '%s' added after the header was written", name);
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS) return gem_err_set(err, "gguf writer: tensor '%s': bad rank", name);
    uint64_t n = 1;
    for (uint32_t d = 0; d < n_dims; d++) n *= ne[d];
    uint64_t row;
    if (quant_row_bytes(type, (int64_t)ne[0], &row))
        return gem_err_set(err, "gguf writer: tensor '%s': row of %llu is not whole %s blocks", name,
                           (unsigned long long)ne[0], quant_type_name(type) ? quant_type_name(type) : "?");
    for (uint64_t i = 0; i < w->n_tensors; i++)
        if (!strcmp(w->tensors[i].name, name)) return gem_err_set(err, "gguf writer: duplicate tensor '%s'", name);
    if (grow((void **)&w->tensors, &w->tensors_cap, w->n_tensors + 1, sizeof *w->tensors)) goto oom;
    w_tensor *t = &w->tensors[w->n_tensors];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    if (!t->name) goto oom;
    t->type = type;
    t->n_dims = n_dims;
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = d < n_dims ? ne[d] : 1;
    t->n_bytes = row * (n / ne[0]);
    t->offset = w->data_size;
    uint64_t a = w->alignment;
    w->data_size += (t->n_bytes + a - 1) / a * a;
    w->n_tensors++;
    return 0;
oom:
    return gem_err_set(err, "gguf writer: out of memory at tensor '%s'", name);
}

uint64_t gguf_w_tensor_bytes(const gguf_writer *w, uint64_t i) {
    return i < w->n_tensors ? w->tensors[i].n_bytes : 0;
}

static int wr(FILE *fp, const void *p, uint64_t n, gem_err *err) {
    if (n && fwrite(p, 1, n, fp) != n) return gem_err_set(err, "gguf writer: write failed (disk full?)");
    return 0;
}

static int pad(FILE *fp, uint64_t pos, uint32_t a, gem_err *err) {
    static const uint8_t zeros[256];
    uint64_t n = (a - pos % a) % a;
    while (n) {
        uint64_t k = n < sizeof zeros ? n : sizeof zeros;
        if (wr(fp, zeros, k, err)) return -1;
        n -= k;
    }
    return 0;
}

int gguf_writer_begin(gguf_writer *w, FILE *fp, gem_err *err) {
    if (w->begun) return gem_err_set(err, "gguf writer: header already written");
    uint32_t version = 3;
    uint64_t pos = 0;
    if (wr(fp, GGUF_MAGIC, 4, err) || wr(fp, &version, 4, err) || wr(fp, &w->n_tensors, 8, err) ||
        wr(fp, &w->n_kv, 8, err) || wr(fp, w->kv, w->kv_len, err))
        return -1;
    pos = 24 + w->kv_len;
    for (uint64_t i = 0; i < w->n_tensors; i++) {
        const w_tensor *t = &w->tensors[i];
        uint64_t len = strlen(t->name);
        if (wr(fp, &len, 8, err) || wr(fp, t->name, len, err) || wr(fp, &t->n_dims, 4, err) ||
            wr(fp, t->ne, 8ull * t->n_dims, err) || wr(fp, &t->type, 4, err) || wr(fp, &t->offset, 8, err))
            return -1;
        pos += 8 + len + 4 + 8ull * t->n_dims + 4 + 8;
    }
    if (w->n_tensors && pad(fp, pos, w->alignment, err)) return -1;
    w->begun = 1;
    w->cur = 0;
    w->written = 0;
    return 0;
}

int gguf_writer_data(gguf_writer *w, FILE *fp, const void *data, uint64_t n, gem_err *err) {
    const uint8_t *p = data;
    if (!w->begun) return gem_err_set(err, "gguf writer: data before header");
    while (n) {
        if (w->cur >= w->n_tensors) return gem_err_set(err, "gguf writer: more data than tensors");
        const w_tensor *t = &w->tensors[w->cur];
        uint64_t k = t->n_bytes - w->written;
        if (k > n) k = n;
        if (wr(fp, p, k, err)) return -1;
        p += k;
        n -= k;
        w->written += k;
        if (w->written == t->n_bytes) {
            if (pad(fp, t->n_bytes, w->alignment, err)) return -1;
            w->cur++;
            w->written = 0;
        }
    }
    return 0;
}

int gguf_writer_finish(gguf_writer *w, FILE *fp, gem_err *err) {
    if (!w->begun) return gem_err_set(err, "gguf writer: header never written");
    if (w->cur != w->n_tensors)
        return gem_err_set(err, "gguf writer: tensor '%s' is missing data", w->tensors[w->cur].name);
    if (fflush(fp)) return gem_err_set(err, "gguf writer: flush failed (disk full?)");
    return 0;
}
