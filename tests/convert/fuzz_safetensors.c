/* libFuzzer target: the safetensors header parser on arbitrary bytes. Every
 * tensor view of whatever parses is touched at both ends, so an
 * out-of-bounds offset shows up under ASan. */
#include <stddef.h>
#include <stdint.h>

#include "convert/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gem_err err;
    st_file *f = st_open_mem(data, size, "fuzz", &err);
    if (!f) return 0;
    volatile uint64_t sink = 0;
    for (size_t i = 0; i < st_count(f); i++) {
        const st_tensor *t = st_at(f, i);
        const uint8_t *p = t->data;
        if (t->n_bytes) sink += p[0] + p[t->n_bytes - 1];
        sink += st_find(f, t->name) == t;
        sink += t->n_elems * st_dtype_size(t->dtype) == t->n_bytes;
    }
    (void)sink;
    st_close(f);
    return 0;
}
