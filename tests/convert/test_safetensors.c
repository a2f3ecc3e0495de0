/* safetensors reader: a valid file parses into in-bounds, name-sorted views;
 * every malformed header (truncated, offsets past the end, overlapping or
 * leaving holes, wrong dtype, byte count not matching shape and dtype, bad
 * JSON, hostile numbers) is refused with a message naming the fault. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "convert/safetensors.h"
#include "test.h"

/* header JSON + data bytes, with an 8-byte length prefix (hlen_override
 * replaces the stored length when nonzero) */
static uint8_t *build(const char *hdr, size_t data_len, uint64_t hlen_override, size_t *out_len) {
    size_t h = strlen(hdr);
    *out_len = 8 + h + data_len;
    uint8_t *b = calloc(1, *out_len);
    uint64_t n = hlen_override ? hlen_override : h;
    memcpy(b, &n, 8);
    memcpy(b + 8, hdr, h);
    for (size_t i = 0; i < data_len; i++) b[8 + h + i] = (uint8_t)i;
    return b;
}

static void test_valid(void) {
    const char *hdr = "{\"b.weight\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[8,32]},"
                      "\"__metadata__\":{\"format\":\"pt\"},"
                      "\"a.scalar\":{\"dtype\":\"BF16\",\"shape\":[],\"data_offsets\":[0,2]},"
                      "\"c.empty\":{\"dtype\":\"F16\",\"shape\":[0,4],\"data_offsets\":[32,32]},"
                      "\"a.pad\":{\"dtype\":\"U8\",\"shape\":[6],\"data_offsets\":[2,8]}}   ";
    size_t n;
    uint8_t *b = build(hdr, 32, 0, &n);
    gem_err err = {{0}};
    st_file *f = st_open_mem(b, n, "t.safetensors", &err);
    CHECKF(f != NULL, "%s", err.msg);
    if (f) {
        CHECK(st_count(f) == 4);
        CHECK(!strcmp(st_at(f, 0)->name, "a.pad") && !strcmp(st_at(f, 1)->name, "a.scalar") &&
              !strcmp(st_at(f, 2)->name, "b.weight") && !strcmp(st_at(f, 3)->name, "c.empty"));
        const st_tensor *t = st_find(f, "b.weight");
        CHECK(t && t->dtype == ST_F32 && t->n_dims == 2 && t->shape[0] == 2 && t->shape[1] == 3 && t->n_elems == 6);
        size_t hl = strlen(hdr);
        CHECK(t && t->offset == 8 + hl + 8 && t->n_bytes == 24 && (const uint8_t *)t->data == b + 8 + hl + 8);
        CHECK(t && ((const uint8_t *)t->data)[0] == 8);
        t = st_find(f, "a.scalar");
        CHECK(t && t->n_dims == 0 && t->n_elems == 1 && t->n_bytes == 2);
        t = st_find(f, "c.empty");
        CHECK(t && t->n_elems == 0 && t->n_bytes == 0);
        CHECK(st_find(f, "zzz") == NULL && st_find(f, "") == NULL && st_find(f, "__metadata__") == NULL);
        CHECK(st_dtype_size(ST_BF16) == 2 && !strcmp(st_dtype_name(ST_F8_E4M3), "F8_E4M3"));
    }
    st_close(f);
    free(b);
    /* an empty header object with no data is a valid (empty) file */
    b = build("{}", 0, 0, &n);
    f = st_open_mem(b, n, "e", &err);
    CHECK(f && st_count(f) == 0);
    st_close(f);
    free(b);
}

typedef struct {
    const char *name;
    const char *hdr;
    size_t data;
    uint64_t hlen; /* 0: the real length */
    size_t cut;    /* bytes removed from the end */
    const char *want;
} bad_case;

static const bad_case bad[] = {
    {"no length", "", 0, 0, 8, "no header length"},
    {"header past EOF", "{}", 0, 1000, 0, "safetensors header of 1000 bytes runs past the end"},
    {"huge header length", "{}", 0, 0xffffffffffffull, 0, "runs past the end"},
    {"truncated header", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, 0, 10, "runs past the end of the file"},
    {"not json", "hello", 0, 0, 0, "not valid JSON"},
    {"not an object", "[1,2]", 0, 0, 0, "not a JSON object"},
    {"entry not object", "{\"a\":3}", 0, 0, 0, "tensor 'a' is not an object"},
    {"no dtype", "{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, 0, 0, "tensor 'a' has no dtype string"},
    {"unknown dtype", "{\"a\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, 0, 0, "unknown dtype 'F33'"},
    {"no shape", "{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, 0, 0, "no shape array"},
    {"negative dim", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, 0, 0, "shape[0] is not a non-negative integer"},
    {"fractional dim", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, 0, 0, "shape[0] is not"},
    {"too many dims", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1, 0, 0, "9 dimensions"},
    {"count overflow", "{\"a\":{\"dtype\":\"U8\",\"shape\":[9007199254740992,9007199254740992],\"data_offsets\":[0,1]}}", 1, 0, 0, "element count overflows"},
    {"byte overflow", "{\"a\":{\"dtype\":\"F64\",\"shape\":[9007199254740992,1024],\"data_offsets\":[0,1]}}", 1, 0, 0, "byte count overflows"},
    {"no offsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, 0, 0, "needs data_offsets"},
    {"one offset", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4, 0, 0, "needs data_offsets"},
    {"huge offset", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,1e300]}}", 4, 0, 0, "needs data_offsets"},
    {"offsets reversed", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 4, 0, 0, "outside the 4-byte data section"},
    {"offsets past EOF", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, 0, 0, "data_offsets [0, 8] outside the 4-byte data section"},
    {"data truncated", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 16, 0, 1, "outside the 15-byte data section"},
    {"shape vs bytes", "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, 0, 0, "tensor 'a' has 8 bytes, its shape and dtype need 12"},
    {"wrong dtype size", "{\"a\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[0,16]}}", 16, 0, 0, "has 16 bytes, its shape and dtype need 8"},
    {"overlap", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, 0, 0, "tensor 'b' overlaps 'a'"},
    {"hole", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", 12, 0, 0, "4 unused bytes before tensor 'b'"},
    {"trailing data", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 6, 0, 0, "data section has 6 bytes, the tensors cover 4"},
    {"duplicate name", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, 0, 0, "4 unused bytes before tensor 'a'"},
    {"empty name", "{\"\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, 0, 0, "empty tensor name"},
    {"NUL in name", "{\"a\\u0000b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, 0, 0, "contains a NUL byte"},
    {"bad metadata", "{\"__metadata__\":{\"x\":1}}", 0, 0, 0, "__metadata__ value 'x' is not a string"},
    {"metadata not object", "{\"__metadata__\":[]}", 0, 0, 0, "__metadata__ is not an object"},
    {"invalid utf-8", "{\"\xff\":{}}", 0, 0, 0, "not valid JSON"},
};

static void test_bad(void) {
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        size_t n;
        uint8_t *b = build(bad[i].hdr, bad[i].data, bad[i].hlen, &n);
        gem_err err = {{0}};
        st_file *f = st_open_mem(b, n - bad[i].cut, "bad.safetensors", &err);
        CHECKF(f == NULL, "%s: accepted", bad[i].name);
        CHECKF(strstr(err.msg, bad[i].want) && strstr(err.msg, "bad.safetensors"), "%s: message '%s' lacks '%s'",
               bad[i].name, err.msg, bad[i].want);
        st_close(f);
        free(b);
    }
    /* a header above the 100 MB cap is refused without parsing it */
    size_t n = 8 + ST_MAX_HEADER + 1;
    uint8_t *b = calloc(1, n);
    uint64_t h = ST_MAX_HEADER + 1;
    memcpy(b, &h, 8);
    gem_err err = {{0}};
    CHECK(st_open_mem(b, n, "big", &err) == NULL);
    CHECK_ERR(err.msg, "larger than the 100000000-byte limit");
    free(b);
}

static void test_files(void) {
    gem_err err = {{0}};
    CHECK(st_open("tests/data/none.safetensors", &err) == NULL);
    CHECK_ERR(err.msg, "cannot open");
    CHECK(st_open("tests", &err) == NULL);
    CHECK_ERR(err.msg, "not a regular file");
    /* every file of the committed seed corpus parses */
    const char *seeds[] = {"tests/data/seeds/safetensors/two.safetensors",
                           "tests/data/seeds/safetensors/sharded-00001.safetensors"};
    for (int i = 0; i < 2; i++) {
        st_file *f = st_open(seeds[i], &err);
        CHECKF(f != NULL, "%s: %s", seeds[i], err.msg);
        st_close(f);
    }
}

/* A FIFO is refused as not a regular file, at once (it once waited for a
 * writer forever); the alarm turns a hang into a failure. */
static void test_fifo(void) {
    const char *path = "build/test-st.fifo";
    remove(path);
    CHECK(mkfifo(path, 0600) == 0);
    gem_err err = {{0}};
    alarm(10);
    st_file *f = st_open(path, &err);
    alarm(0);
    CHECK(f == NULL);
    CHECK_ERR(err.msg, "not a regular file");
    remove(path);
}

int main(void) {
    test_fifo();
    test_valid();
    test_bad();
    test_files();
    return test_report("test_safetensors");
}
