/* Checking a GGUF file against a model contract: the pieces every
 * contract (gemma4, qwen35) validates with, so that their error messages
 * say the same thing the same way.
 *
 * A failing check sets the error ("PATH: offset N: key 'K': ...", or
 * without the offset when the key is absent) and returns -1; the caller
 * passes -1 up. Only the shape of the checks lives here: which keys, which
 * values and which tensors a model needs stay with its contract. */
#ifndef GEM_MODEL_MANIFEST_H
#define GEM_MODEL_MANIFEST_H

#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "util/err.h"

typedef struct {
    const gguf_file *f;
    gem_err *err;
    const char *arch; /* the metadata prefix: "gemma4", "qwen35", ... */
    char key[160];    /* mf_key's result: valid until the next mf_key */
} mf_ctx;

/* "<arch>.<suffix>" in c->key; returns c->key. */
const char *mf_key(mf_ctx *c, const char *suffix);

/* Fails on key with the message fmt (one %s: detail). Returns -1. */
int mf_fail(mf_ctx *c, const char *key, const char *fmt, const char *detail);

/* The index of key, or -1 with "missing metadata key" set. */
int64_t mf_need_key(mf_ctx *c, const char *key);

/* Required scalars: an integer, an integer equal to want, a float within
 * rel of want. */
int mf_get_int(mf_ctx *c, const char *key, int64_t *out);
int mf_expect_int(mf_ctx *c, const char *key, int64_t want);
int mf_expect_float(mf_ctx *c, const char *key, double want, double rel);

/* The index of key (present: the caller decides whether it is optional)
 * when it is an array of n_layer bools, else -1; what ends "must be an
 * array of bool (...)" and says what true means. */
int64_t mf_layer_flags(mf_ctx *c, const char *key, uint32_t n_layer, const char *what);

/* The index of the required key when it is an array of strings, else -1. */
int64_t mf_string_array(mf_ctx *c, const char *key);

/* Fails on the first "<arch>." key in neither list ("unknown key for the
 * <arch> contract"); more may be NULL. */
int mf_check_known(mf_ctx *c, const char *const *known, size_t n_known, const char *const *more, size_t n_more);

/* Appends name to a ", "-separated list in names[cap] (cut at cap). */
void mf_list_add(char *names, size_t cap, const char *name);

/* Layer indices 0..n-1 in the order their decimal strings sort ("0", "1",
 * "10", "11", ..., "2", ...): the order Hugging Face tensor names, and so
 * the converters, put layers in. */
void mf_layer_order(uint32_t *order, uint32_t n);

/* Storage types a contract accepts: vectors f32 only, matrices and
 * embeddings every type a backend runs. mf_types names them for errors. */
int mf_type_allowed(int vector, uint32_t type);
const char *mf_types(int vector);

/* Checks one manifest entry against the file's tensor table: present,
 * of that shape (profile names the profile in the message), of an allowed
 * storage type. */
int mf_check_tensor(mf_ctx *c, const char *profile, const char *name, uint32_t n_dims, const uint64_t ne[2],
                    int vector);

/* The first tensor of the file that is not one of the manifest's n names
 * (name_at(specs, i)); NULL when there is none. */
const gguf_tensor *mf_extra_tensor(const gguf_file *f, const void *specs, size_t n,
                                   const char *(*name_at)(const void *specs, size_t i));

#endif
