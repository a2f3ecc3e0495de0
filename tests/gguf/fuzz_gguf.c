/* libFuzzer target: the GGUF reader and the Gemma 4 contract on arbitrary
 * bytes. Every accessor is exercised on whatever parses, so an
 * out-of-bounds read anywhere shows up under ASan. */
#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "model/gemma4.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gem_err err;
    gguf_file *f = gguf_open_mem(data, size, "fuzz", &err);
    if (!f) return 0;
    volatile uint64_t sink = 0;
    for (uint64_t i = 0; i < gguf_kv_count(f); i++) {
        int64_t iv;
        uint64_t uv;
        double dv;
        int bv;
        gguf_str s;
        sink += gguf_kv_int(f, i, &iv) + gguf_kv_uint64(f, i, &uv) + gguf_kv_float(f, i, &dv) +
                gguf_kv_bool(f, i, &bv) + gguf_kv_str(f, i, &s);
        if (!gguf_kv_str(f, i, &s) && s.len) sink += (uint8_t)s.ptr[s.len - 1];
        uint64_t n = gguf_kv_arr_len(f, i);
        for (uint64_t k = 0; k < n && k < 64; k++) {
            sink += gguf_kv_arr_int(f, i, k, &iv) + gguf_kv_arr_float(f, i, k, &dv) + gguf_kv_arr_bool(f, i, k, &bv);
            if (!gguf_kv_arr_str(f, i, k, &s) && s.len) sink += (uint8_t)s.ptr[0] + (uint8_t)s.ptr[s.len - 1];
        }
        if (n) sink += gguf_kv_arr_str(f, i, n - 1, &s) + gguf_kv_arr_int(f, i, n, &iv);
        sink += (uint64_t)gguf_find_key(f, gguf_kv_key(f, i));
    }
    for (uint64_t i = 0; i < gguf_tensor_count(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        const uint8_t *p = t->data;
        sink += p[0] + p[t->n_bytes - 1];
        sink += gguf_find_tensor(f, t->name) == t;
    }
    const gemma4_profile *prof;
    sink += gemma4_validate(f, &prof, &err);
    (void)sink;
    gguf_close(f);
    return 0;
}
