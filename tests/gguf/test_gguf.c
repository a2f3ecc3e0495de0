/* GGUF reader and writer: round trips of every value type, tensor layout and
 * alignment, the real vocabulary file, and the malformed corpus (every file
 * rejected with its named reason, and the committed files identical to what
 * tests/gguf/malformed.h generates). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "gguf/gguf_write.h"
#include "util/utf8.h"
#include "gguf/malformed.h"
#include "model/gemma4.h"
#include "quant/quant.h"
#include "test.h"

static void test_roundtrip(uint32_t alignment) {
    gem_err err = {{0}};
    gguf_writer *w = gguf_writer_new(alignment);
    CHECK(w != NULL);
    int8_t i8s[3] = {-1, 0, 127};
    uint16_t u16s[2] = {1, 65535};
    double f64s[2] = {0.5, -1e300};
    uint8_t bools[4] = {1, 0, 0, 1};
    const char *strs[3] = {"alpha", "", "\xe2\x96\x81gamma"};
    CHECK(!gguf_w_str(w, "general.architecture", "test", &err));
    if (alignment != 32) CHECK(!gguf_w_u32(w, "general.alignment", alignment, &err));
    CHECK(!gguf_w_u32(w, "t.u32", 4000000000u, &err));
    CHECK(!gguf_w_i32(w, "t.i32", -7, &err));
    CHECK(!gguf_w_u64(w, "t.u64", 18446744073709551615ull, &err));
    CHECK(!gguf_w_f32(w, "t.f32", 1.5f, &err));
    CHECK(!gguf_w_bool(w, "t.bool", 1, &err));
    CHECK(!gguf_w_arr(w, "t.i8s", GGUF_T_INT8, i8s, 3, &err));
    CHECK(!gguf_w_arr(w, "t.u16s", GGUF_T_UINT16, u16s, 2, &err));
    CHECK(!gguf_w_arr(w, "t.f64s", GGUF_T_FLOAT64, f64s, 2, &err));
    CHECK(!gguf_w_arr(w, "t.bools", GGUF_T_BOOL, bools, 4, &err));
    CHECK(!gguf_w_arr_str(w, "t.strs", strs, 3, &err));
    CHECK(!gguf_w_arr(w, "t.empty", GGUF_T_UINT32, NULL, 0, &err));
    CHECK(gguf_w_u32(w, "t.u32", 1, &err) == -1);
    CHECK_ERR(err.msg, "duplicate key 't.u32'");
    uint64_t ne_a[1] = {96}, ne_b[2] = {64, 3}, ne_c[3] = {256, 2, 2};
    CHECK(!gguf_w_tensor(w, "a", QT_F32, 1, ne_a, &err));
    CHECK(!gguf_w_tensor(w, "b", QT_Q4_0, 2, ne_b, &err));
    CHECK(!gguf_w_tensor(w, "c", QT_Q6_K, 3, ne_c, &err));
    uint64_t ne_bad[1] = {33};
    CHECK(gguf_w_tensor(w, "d", QT_Q8_0, 1, ne_bad, &err) == -1);
    CHECK_ERR(err.msg, "not whole q8_0 blocks");
    CHECK(gguf_w_tensor_bytes(w, 1) == 2 * 18 * 3);
    CHECK(gguf_w_tensor_bytes(w, 2) == 210 * 4);

    char *buf = NULL;
    size_t len = 0;
    FILE *fp = open_memstream(&buf, &len);
    CHECK(!gguf_writer_begin(w, fp, &err));
    uint8_t data[1024];
    for (int i = 0; i < 1024; i++) data[i] = (uint8_t)(i * 13 + 1);
    CHECK(!gguf_writer_data(w, fp, data, 384, &err));       /* a */
    CHECK(!gguf_writer_data(w, fp, data, 100, &err));       /* b, in two chunks */
    CHECK(!gguf_writer_data(w, fp, data + 100, 8, &err));
    CHECK(gguf_writer_finish(w, fp, &err) == -1);            /* c is missing */
    CHECK_ERR(err.msg, "tensor 'c' is missing data");
    CHECK(!gguf_writer_data(w, fp, data, 840, &err));       /* c */
    CHECK(gguf_writer_data(w, fp, data, 1, &err) == -1);
    CHECK_ERR(err.msg, "more data than tensors");
    CHECK(!gguf_writer_finish(w, fp, &err));
    fclose(fp);
    gguf_writer_free(w);

    gguf_file *f = gguf_open_mem(buf, len, "roundtrip", &err);
    CHECKF(f != NULL, "%s", err.msg);
    if (!f) { free(buf); return; }
    CHECK(gguf_version(f) == 3);
    CHECK(gguf_alignment(f) == alignment);
    CHECK(gguf_data_offset(f) % alignment == 0);
    CHECK(gguf_kv_count(f) == (alignment != 32 ? 13u : 12u));
    int64_t i;
    int64_t iv;
    uint64_t uv;
    double dv;
    int bv;
    gguf_str s;
    i = gguf_find_key(f, "t.u32");
    CHECK(i >= 0 && !gguf_kv_int(f, (uint64_t)i, &iv) && iv == 4000000000ll);
    CHECK(gguf_kv_float(f, (uint64_t)i, &dv) == -1);
    CHECK(gguf_kv_str(f, (uint64_t)i, &s) == -1);
    i = gguf_find_key(f, "t.i32");
    CHECK(i >= 0 && !gguf_kv_int(f, (uint64_t)i, &iv) && iv == -7);
    CHECK(gguf_kv_uint64(f, (uint64_t)i, &uv) == -1); /* negative */
    i = gguf_find_key(f, "t.u64");
    CHECK(i >= 0 && gguf_kv_int(f, (uint64_t)i, &iv) == -1); /* out of int64 range */
    CHECK(!gguf_kv_uint64(f, (uint64_t)i, &uv) && uv == 18446744073709551615ull);
    i = gguf_find_key(f, "t.f32");
    CHECK(i >= 0 && !gguf_kv_float(f, (uint64_t)i, &dv) && dv == 1.5);
    CHECK(gguf_kv_int(f, (uint64_t)i, &iv) == -1);
    i = gguf_find_key(f, "t.bool");
    CHECK(i >= 0 && !gguf_kv_bool(f, (uint64_t)i, &bv) && bv == 1);
    i = gguf_find_key(f, "t.i8s");
    CHECK(i >= 0 && gguf_kv_arr_type(f, (uint64_t)i) == GGUF_T_INT8 && gguf_kv_arr_len(f, (uint64_t)i) == 3);
    CHECK(!gguf_kv_arr_int(f, (uint64_t)i, 0, &iv) && iv == -1);
    CHECK(!gguf_kv_arr_int(f, (uint64_t)i, 2, &iv) && iv == 127);
    CHECK(gguf_kv_arr_int(f, (uint64_t)i, 3, &iv) == -1); /* out of range index */
    i = gguf_find_key(f, "t.u16s");
    CHECK(!gguf_kv_arr_int(f, (uint64_t)i, 1, &iv) && iv == 65535);
    i = gguf_find_key(f, "t.f64s");
    CHECK(!gguf_kv_arr_float(f, (uint64_t)i, 1, &dv) && dv == -1e300);
    i = gguf_find_key(f, "t.bools");
    CHECK(!gguf_kv_arr_bool(f, (uint64_t)i, 3, &bv) && bv == 1);
    CHECK(!gguf_kv_arr_bool(f, (uint64_t)i, 1, &bv) && bv == 0);
    i = gguf_find_key(f, "t.strs");
    CHECK(gguf_kv_arr_len(f, (uint64_t)i) == 3);
    CHECK(!gguf_kv_arr_str(f, (uint64_t)i, 0, &s) && gguf_str_eq(s, "alpha"));
    CHECK(!gguf_kv_arr_str(f, (uint64_t)i, 1, &s) && s.len == 0);
    CHECK(!gguf_kv_arr_str(f, (uint64_t)i, 2, &s) && gguf_str_eq(s, "\xe2\x96\x81gamma"));
    CHECK(gguf_kv_arr_data(f, (uint64_t)i) == NULL);
    i = gguf_find_key(f, "t.empty");
    CHECK(i >= 0 && gguf_kv_arr_len(f, (uint64_t)i) == 0);
    CHECK(gguf_find_key(f, "t.missing") == -1);
    i = gguf_find_key(f, "general.architecture");
    CHECK(!gguf_kv_str(f, (uint64_t)i, &s) && gguf_str_eq(s, "test"));

    CHECK(gguf_tensor_count(f) == 3);
    const gguf_tensor *a = gguf_find_tensor(f, "a"), *b = gguf_find_tensor(f, "b"), *c = gguf_find_tensor(f, "c");
    CHECK(a && b && c && !gguf_find_tensor(f, "d"));
    if (a && b && c) {
        CHECK(a->n_dims == 1 && a->ne[0] == 96 && a->ne[1] == 1 && a->n_bytes == 384 && a->offset == 0);
        CHECK(b->n_dims == 2 && b->ne[1] == 3 && b->type == QT_Q4_0 && b->n_bytes == 108);
        CHECK(b->offset % alignment == 0 && b->offset >= 384);
        CHECK(c->n_dims == 3 && c->ne[2] == 2 && c->n_elems == 1024 && c->n_bytes == 840);
        CHECK(!memcmp(a->data, data, 384));
        CHECK(!memcmp(b->data, data, 108));
        CHECK(!memcmp(c->data, data, 840));
        CHECK((const char *)c->data + c->n_bytes <= buf + len);
    }

    /* Copying a kv verbatim reproduces it. */
    gguf_writer *w2 = gguf_writer_new(32);
    CHECK(!gguf_w_copy_kv(w2, f, (uint64_t)gguf_find_key(f, "t.strs"), &err));
    CHECK(!gguf_w_copy_kv(w2, f, (uint64_t)gguf_find_key(f, "t.f64s"), &err));
    char *buf2 = NULL;
    size_t len2 = 0;
    FILE *fp2 = open_memstream(&buf2, &len2);
    CHECK(!gguf_writer_begin(w2, fp2, &err) && !gguf_writer_finish(w2, fp2, &err));
    fclose(fp2);
    gguf_writer_free(w2);
    gguf_file *f2 = gguf_open_mem(buf2, len2, "copy", &err);
    CHECKF(f2 != NULL, "%s", err.msg);
    if (f2) {
        i = gguf_find_key(f2, "t.strs");
        CHECK(!gguf_kv_arr_str(f2, (uint64_t)i, 2, &s) && gguf_str_eq(s, "\xe2\x96\x81gamma"));
        i = gguf_find_key(f2, "t.f64s");
        CHECK(!gguf_kv_arr_float(f2, (uint64_t)i, 0, &dv) && dv == 0.5);
        gguf_close(f2);
    }
    free(buf2);

    /* Version 2 has the same layout for little-endian files. */
    buf[4] = 2;
    gguf_file *v2 = gguf_open_mem(buf, len, "v2", &err);
    CHECKF(v2 && gguf_version(v2) == 2, "%s", err.msg);
    gguf_close(v2);
    gguf_close(f);
    free(buf);
}

/* the writer refuses what the reader refuses: alignments below 8 */
static void test_writer_alignment(void) {
    CHECK(gguf_writer_new(1) == NULL && gguf_writer_new(4) == NULL && gguf_writer_new(48) == NULL);
    gguf_writer *w = gguf_writer_new(8);
    CHECK(w != NULL);
    gguf_writer_free(w);
}

static void test_utf8(void) {
    CHECK(utf8_valid("plain", 5));
    CHECK(utf8_valid("\xe2\x96\x81", 3));
    CHECK(utf8_valid("\xf0\x9f\x98\x80", 4));
    CHECK(!utf8_valid("\xf0\x9f\x98", 3));
    CHECK(!utf8_valid("\xc1\xbf", 2));         /* overlong */
    CHECK(!utf8_valid("\xe0\x80\xaf", 3));     /* overlong */
    CHECK(!utf8_valid("\xed\xb0\x80", 3));     /* surrogate */
    CHECK(!utf8_valid("\xf4\x90\x80\x80", 4)); /* > U+10FFFF */
    CHECK(!utf8_valid("\x80", 1));
}

static void test_vocab(void) {
    gem_err err = {{0}};
    gguf_file *f = gguf_open("data/vocab/gemma-4.gguf", &err);
    CHECKF(f != NULL, "%s", err.msg);
    if (!f) return;
    CHECK(gguf_tensor_count(f) == 0);
    int64_t i = gguf_find_key(f, "tokenizer.ggml.tokens");
    CHECK(gguf_kv_arr_len(f, (uint64_t)i) == 262144);
    gguf_str s;
    CHECK(!gguf_kv_arr_str(f, (uint64_t)i, 2, &s) && gguf_str_eq(s, "<bos>"));
    CHECK(!gguf_kv_arr_str(f, (uint64_t)i, 106, &s) && gguf_str_eq(s, "<turn|>"));
    CHECK(!gguf_kv_arr_str(f, (uint64_t)i, 238, &s) && gguf_str_eq(s, "<0x00>"));
    i = gguf_find_key(f, "tokenizer.ggml.merges");
    CHECK(gguf_kv_arr_len(f, (uint64_t)i) == 514906);
    const gemma4_profile *p;
    CHECK(gemma4_validate(f, &p, &err) == -1); /* a vocabulary is not a model */
    CHECK_ERR(err.msg, "MoE");
    gguf_close(f);
}

static void test_corpus(void) {
    size_t n;
    char *ex = test_slurp("tests/data/malformed/EXPECTED", &n);
    CHECK(ex != NULL);
    if (!ex) return;
    ex = realloc(ex, n + 1);
    ex[n] = 0;
    int files = 0;
    mcase c;
    mbuf gen;
    for (int idx = 0; malformed_case(idx, &c, &gen); idx++) {
        char name[128], line[512];
        snprintf(name, sizeof name, "%02d_%s.gguf", idx, c.name);
        snprintf(line, sizeof line, "%s\t%s\t%s\n", name, c.level, c.expect);
        CHECKF(strstr(ex, line) != NULL, "EXPECTED lacks '%s' (run make corpus)", name);
        char path[256];
        snprintf(path, sizeof path, "tests/data/malformed/%s", name);
        size_t flen;
        uint8_t *bytes = (uint8_t *)test_slurp(path, &flen);
        CHECKF(bytes && flen == gen.n && !memcmp(bytes, gen.p, gen.n), "%s differs from its generator", path);
        free(bytes);
        gem_err err = {{0}};
        gguf_file *f = gguf_open(path, &err);
        if (!strcmp(c.level, "gguf")) {
            CHECKF(f == NULL, "%s was accepted", path);
            CHECK_ERR(err.msg, c.expect);
            CHECK_ERR(err.msg, name); /* the file is named */
            /* the in-memory parser agrees */
            gem_err err2 = {{0}};
            gguf_file *m = gguf_open_mem(gen.p, gen.n, name, &err2);
            CHECK(m == NULL);
            if (gen.n) CHECK(!strcmp(err.msg, err2.msg) || strstr(err2.msg, c.expect));
            gguf_close(m);
        } else {
            CHECKF(f != NULL, "%s: %s", path, err.msg);
            const gemma4_profile *p;
            CHECK(f && gemma4_validate(f, &p, &err) == -1);
            CHECK_ERR(err.msg, c.expect);
        }
        gguf_close(f);
        free(gen.p);
        files++;
    }
    CHECKF(files >= 40, "only %d malformed files", files);
    free(ex);
}

/* A FIFO is refused as not a regular file, at once: the reader opened it
 * first and so waited for a writer forever. An alarm turns a hang into a
 * failure instead of a stuck test run. */
static void test_fifo(void) {
    const char *path = "build/test-gguf.fifo";
    remove(path);
    CHECK(mkfifo(path, 0600) == 0);
    gem_err err = {{0}};
    alarm(10);
    gguf_file *f = gguf_open(path, &err);
    alarm(0);
    CHECK(f == NULL);
    CHECK_ERR(err.msg, "not a regular file");
    gguf_close(f);
    remove(path);
}

/* 2^16 keys whose names collide in the low 20 bits of an unseeded FNV-1a
 * (the reader's former name hash, whose low bits depend only on the low
 * bits of its state): each 4-letter block is one of two that lead the low
 * bits to the same state, found by a birthday search. With that hash the
 * keys all probe one run of slots (5.8 s for this file); with the
 * seeded hash they spread. */
static uint32_t fnv_low20(uint32_t h, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) h = ((h ^ (unsigned char)s[i]) * 0x1b3u) & 0xfffffu; /* low bits of the 64-bit prime */
    return h;
}
static void test_hash_flood(void) {
    enum { BLOCKS = 16 };
    const char *prefix = "general.x.";
    uint32_t h = (uint32_t)(1469598103934665603ull & 0xfffffu); /* the former hash's start value, low 20 bits */
    h = fnv_low20(h, prefix, strlen(prefix));
    char pair[BLOCKS][2][4];
    uint32_t *seen = malloc(sizeof(uint32_t) << 20);
    CHECK(seen != NULL);
    if (!seen) return;
    for (int b = 0; b < BLOCKS; b++) { /* a pair of 4-letter blocks leading h to one state */
        memset(seen, 0xff, sizeof(uint32_t) << 20);
        int found = 0;
        for (uint32_t v = 0; v < 26u * 26 * 26 * 26 && !found; v++) {
            const char blk[4] = {(char)('a' + v % 26), (char)('a' + v / 26 % 26), (char)('a' + v / 676 % 26),
                                 (char)('a' + v / 17576)};
            const uint32_t g = fnv_low20(h, blk, 4);
            if (seen[g] != 0xffffffffu) {
                const uint32_t u = seen[g];
                const char other[4] = {(char)('a' + u % 26), (char)('a' + u / 26 % 26), (char)('a' + u / 676 % 26),
                                       (char)('a' + u / 17576)};
                memcpy(pair[b][0], other, 4);
                memcpy(pair[b][1], blk, 4);
                h = g;
                found = 1;
            } else {
                seen[g] = v;
            }
        }
        CHECK(found);
    }
    free(seen);
    /* the file: GGUF v3, no tensors, 2^BLOCKS uint8 keys */
    mbuf m = {0};
    mb_put(&m, "GGUF", 4);
    mb_u32(&m, 3);
    mb_u64(&m, 0);
    mb_u64(&m, 1ull << BLOCKS);
    char name[96];
    const size_t pl = strlen(prefix);
    memcpy(name, prefix, pl);
    for (uint32_t k = 0; k < (1u << BLOCKS); k++) {
        for (int b = 0; b < BLOCKS; b++) memcpy(name + pl + 4 * b, pair[b][k >> b & 1], 4);
        mb_str(&m, name, pl + 4 * BLOCKS);
        mb_u32(&m, 0); /* uint8 */
        const uint8_t one = 1;
        mb_put(&m, &one, 1);
    }
    const char *path = "build/test-gguf-flood.gguf";
    FILE *fp = fopen(path, "wb");
    CHECK(fp && fwrite(m.p, 1, m.n, fp) == m.n);
    if (fp) fclose(fp);
    free(m.p);
    const double t0 = test_cpu_now();
    gem_err err = {{0}};
    gguf_file *f = gguf_open(path, &err);
    const double dt = test_cpu_now() - t0;
    CHECKF(f != NULL, "%s", err.msg);
    /* spread, the parse takes milliseconds; one run of slots took ~20 s (bound for a slow CI machine) */
    CHECKF(dt < 2.0, "parsing %u colliding keys took %.2f s", 1u << BLOCKS, dt);
    if (f) { /* every name still found: the first and the last */
        for (int b = 0; b < BLOCKS; b++) memcpy(name + pl + 4 * b, pair[b][0], 4);
        name[pl + 4 * BLOCKS] = 0;
        CHECK(gguf_find_key(f, name) == 0);
        for (int b = 0; b < BLOCKS; b++) memcpy(name + pl + 4 * b, pair[b][1], 4);
        CHECK(gguf_find_key(f, name) == (int64_t)(1u << BLOCKS) - 1);
    }
    gguf_close(f);
    remove(path);
}

int main(void) {
    test_utf8();
    test_roundtrip(32);
    test_roundtrip(64);
    test_roundtrip(4096);
    test_vocab();
    test_corpus();
    test_fifo();
    test_writer_alignment();
    test_hash_flood();
    return test_report("test_gguf");
}
