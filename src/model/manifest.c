/* Shared contract checks (see manifest.h). */
#include "model/manifest.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "quant/quant.h"

const char *mf_key(mf_ctx *c, const char *suffix) {
    snprintf(c->key, sizeof c->key, "%s.%s", c->arch, suffix);
    return c->key;
}

int mf_fail(mf_ctx *c, const char *key, const char *fmt, const char *detail) {
    int64_t i = gguf_find_key(c->f, key);
    char buf[600];
    snprintf(buf, sizeof buf, fmt, detail);
    if (i < 0) return gem_err_set(c->err, "%s: key '%s': %s", gguf_path(c->f), key, buf);
    return gem_err_set(c->err, "%s: offset %llu: key '%s': %s", gguf_path(c->f),
                       (unsigned long long)gguf_kv_offset(c->f, (uint64_t)i), key, buf);
}

int64_t mf_need_key(mf_ctx *c, const char *key) {
    int64_t i = gguf_find_key(c->f, key);
    if (i < 0) gem_err_set(c->err, "%s: missing metadata key '%s'", gguf_path(c->f), key);
    return i;
}

int mf_get_int(mf_ctx *c, const char *key, int64_t *out) {
    int64_t i = mf_need_key(c, key);
    if (i < 0) return -1;
    if (gguf_kv_int(c->f, (uint64_t)i, out)) {
        /* a uint64 beyond int64 is an integer all the same: say so rather
         * than blame its type */
        uint64_t u;
        if (gguf_kv_type(c->f, (uint64_t)i) == GGUF_T_UINT64 && !gguf_kv_uint64(c->f, (uint64_t)i, &u)) {
            char d[32];
            snprintf(d, sizeof d, "%llu", (unsigned long long)u);
            return mf_fail(c, key, "is %s, beyond the integers gem reads (2^63 - 1)", d);
        }
        return mf_fail(c, key, "has type %s, expected an integer", gguf_vtype_name(gguf_kv_type(c->f, (uint64_t)i)));
    }
    return 0;
}

int mf_expect_int(mf_ctx *c, const char *key, int64_t want) {
    int64_t got;
    if (mf_get_int(c, key, &got)) return -1;
    if (got != want) {
        char d[100];
        snprintf(d, sizeof d, "%lld, expected %lld", (long long)got, (long long)want);
        return mf_fail(c, key, "is %s", d);
    }
    return 0;
}

int mf_expect_float(mf_ctx *c, const char *key, double want, double rel) {
    int64_t i = mf_need_key(c, key);
    if (i < 0) return -1;
    double got;
    if (gguf_kv_float(c->f, (uint64_t)i, &got))
        return mf_fail(c, key, "has type %s, expected a float", gguf_vtype_name(gguf_kv_type(c->f, (uint64_t)i)));
    if (!(fabs(got - want) <= rel * fabs(want))) {
        char d[100];
        snprintf(d, sizeof d, "%g, expected %g", got, want);
        return mf_fail(c, key, "is %s", d);
    }
    return 0;
}

int64_t mf_layer_flags(mf_ctx *c, const char *key, uint32_t n_layer, const char *what) {
    int64_t i = mf_need_key(c, key);
    if (i < 0) return -1;
    if (gguf_kv_type(c->f, (uint64_t)i) != GGUF_T_ARRAY || gguf_kv_arr_type(c->f, (uint64_t)i) != GGUF_T_BOOL) {
        char d[200];
        snprintf(d, sizeof d, "must be an array of bool (%s)", what);
        return mf_fail(c, key, "%s", d);
    }
    if (gguf_kv_arr_len(c->f, (uint64_t)i) != n_layer) {
        char d[100];
        snprintf(d, sizeof d, "%llu entries, expected %u", (unsigned long long)gguf_kv_arr_len(c->f, (uint64_t)i),
                 n_layer);
        return mf_fail(c, key, "has %s", d);
    }
    return i;
}

int64_t mf_string_array(mf_ctx *c, const char *key) {
    int64_t i = mf_need_key(c, key);
    if (i < 0) return -1;
    if (gguf_kv_type(c->f, (uint64_t)i) != GGUF_T_ARRAY || gguf_kv_arr_type(c->f, (uint64_t)i) != GGUF_T_STRING)
        return mf_fail(c, key, "%s", "must be an array of strings");
    return i;
}

static int in_list(const char *s, const char *const *list, size_t n) {
    for (size_t j = 0; j < n; j++)
        if (!strcmp(s, list[j])) return 1;
    return 0;
}

int mf_check_known(mf_ctx *c, const char *const *known, size_t n_known, const char *const *more, size_t n_more) {
    const size_t plen = strlen(c->arch);
    for (uint64_t k = 0; k < gguf_kv_count(c->f); k++) {
        const char *key = gguf_kv_key(c->f, k);
        if (strncmp(key, c->arch, plen) || key[plen] != '.') continue;
        if (in_list(key + plen + 1, known, n_known) || (more && in_list(key + plen + 1, more, n_more))) continue;
        char d[80];
        snprintf(d, sizeof d, "unknown key for the %s contract", c->arch);
        return mf_fail(c, key, "%s", d);
    }
    return 0;
}

void mf_list_add(char *names, size_t cap, const char *name) {
    strncat(names, names[0] ? ", " : "", cap - strlen(names) - 1);
    strncat(names, name, cap - strlen(names) - 1);
}

/* "a" sorts before "b" as decimal strings */
static int dec_before(uint32_t a, uint32_t b) {
    char x[16], y[16];
    snprintf(x, sizeof x, "%u", a);
    snprintf(y, sizeof y, "%u", b);
    return strcmp(x, y) < 0;
}

void mf_layer_order(uint32_t *order, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) order[i] = i;
    for (uint32_t i = 1; i < n; i++) { /* insertion sort: a few hundred layers at most */
        uint32_t v = order[i], j = i;
        while (j > 0 && dec_before(v, order[j - 1])) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = v;
    }
}

int mf_type_allowed(int vector, uint32_t type) {
    if (vector) return type == QT_F32;
    /* k-quants are what published Q4_K_M / Q5_K_M / Q6_K files (and
     * `gem quantize --type q4_k_m|q5_k_m|q6_k|...`) contain, with q5_0 and
     * q5_1 where a row is not whole super-blocks: every backend runs them
     * (the CPU with its k-quant kernels or dequantizers, CUDA expanded to
     * f16 at load) */
    return type == QT_Q4_0 || type == QT_Q8_0 || type == QT_Q5_0 || type == QT_Q5_1 || type == QT_Q4_K ||
           type == QT_Q5_K || type == QT_Q6_K || type == QT_F16 || type == QT_BF16 || type == QT_F32;
}

const char *mf_types(int vector) {
    return vector ? "f32" : "q4_0, q8_0, q5_0, q5_1, q4_k, q5_k, q6_k, f16, bf16 or f32";
}

static void shape_str(char *buf, size_t cap, uint32_t n_dims, const uint64_t ne[2], int more) {
    if (n_dims == 1) snprintf(buf, cap, "[%llu]", (unsigned long long)ne[0]);
    else snprintf(buf, cap, "[%llu, %llu%s]", (unsigned long long)ne[0], (unsigned long long)ne[1], more ? ", ..." : "");
}

int mf_check_tensor(mf_ctx *c, const char *profile, const char *name, uint32_t n_dims, const uint64_t ne[2],
                    int vector) {
    const char *path = gguf_path(c->f);
    const gguf_tensor *t = gguf_find_tensor(c->f, name);
    if (!t) return gem_err_set(c->err, "%s: missing tensor '%s'", path, name);
    if (t->n_dims != n_dims || t->ne[0] != ne[0] || (n_dims >= 2 && t->ne[1] != ne[1])) {
        char got[100], want[100];
        shape_str(got, sizeof got, t->n_dims, t->ne, t->n_dims > 2);
        shape_str(want, sizeof want, n_dims, ne, 0);
        return gem_err_set(c->err, "%s: tensor '%s' has shape %s, profile %s needs %s", path, name, got, profile,
                           want);
    }
    if (!mf_type_allowed(vector, t->type)) {
        const char *tn = quant_type_name(t->type);
        return gem_err_set(c->err, "%s: tensor '%s' has storage type %s, the contract allows %s", path, name,
                           tn ? tn : "?", mf_types(vector));
    }
    return 0;
}

const gguf_tensor *mf_extra_tensor(const gguf_file *f, const void *specs, size_t n,
                                   const char *(*name_at)(const void *specs, size_t i)) {
    /* every manifest name was found, so equal counts mean no extras */
    if (gguf_tensor_count(f) == n) return NULL;
    for (uint64_t i = 0; i < gguf_tensor_count(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        int found = 0;
        for (size_t j = 0; j < n && !found; j++) found = !strcmp(name_at(specs, j), t->name);
        if (!found) return t;
    }
    return NULL;
}
