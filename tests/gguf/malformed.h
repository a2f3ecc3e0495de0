/* The malformed-GGUF corpus, generated from one small valid file by named
 * mutations. Shared by the generator (make corpus) and by test_gguf, which
 * checks that the committed files are exactly what this code generates and
 * that each is rejected with the expected reason.
 *
 * The valid base: GGUF v3, 4 keys (general.architecture = "gemma4",
 * general.alignment = 32, test.arr = [u32 1,2,3], test.names = ["x","yz"]),
 * two tensors "a" f32 [32] at 0 and "b" q8_0 [32, 2] at 128. */
#ifndef GEM_TESTS_MALFORMED_H
#define GEM_TESTS_MALFORMED_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint8_t *p;
    size_t n, cap;
} mbuf;

static void mb_put(mbuf *b, const void *p, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
}
static void mb_u32(mbuf *b, uint32_t v) { mb_put(b, &v, 4); }
static void mb_u64(mbuf *b, uint64_t v) { mb_put(b, &v, 8); }
static void mb_str(mbuf *b, const char *s, size_t n) { mb_u64(b, n); mb_put(b, s, n); }
static void mb_cstr(mbuf *b, const char *s) { mb_str(b, s, strlen(s)); }

/* Knobs of the base file; each mutation changes one. */
typedef struct {
    uint32_t version;
    const char *magic;
    uint64_t n_tensors_field, n_kv_field; /* UINT64_MAX = the true count */
    const char *key0; size_t key0_len;    /* first key (general.architecture) */
    const char *arch;
    uint32_t arch_type;                   /* value type of the first kv */
    int dup_key;                          /* test.arr named like key 0 */
    uint32_t align_type; uint64_t align;  /* general.alignment */
    uint32_t arr_elem_type; uint64_t arr_len_field;
    uint64_t str_elem_len;                /* length field of test.names[1] */
    int bool_kv; uint8_t bool_val;        /* adds test.flag */
    const char *t0_name; size_t t0_len;
    uint32_t t0_dims; uint64_t t0_ne0, t0_ne1; uint32_t t0_type; uint64_t t0_off;
    const char *t1_name;
    uint32_t t1_type; uint64_t t1_ne0; uint64_t t1_off;
    size_t data_bytes;                    /* bytes of data section written */
    size_t cut;                           /* truncate the file to this size (0 = no) */
} mspec;

static mspec mspec_base(void) {
    mspec s;
    memset(&s, 0, sizeof s);
    s.version = 3; s.magic = "GGUF";
    s.n_tensors_field = UINT64_MAX; s.n_kv_field = UINT64_MAX;
    s.key0 = "general.architecture"; s.key0_len = strlen(s.key0); s.arch = "gemma4"; s.arch_type = 8;
    s.align_type = 4; s.align = 32;
    s.arr_elem_type = 4; s.arr_len_field = 3;
    s.str_elem_len = 2;
    s.t0_name = "a"; s.t0_len = 1; s.t0_dims = 1; s.t0_ne0 = 32; s.t0_ne1 = 1; s.t0_type = 0; s.t0_off = 0;
    s.t1_name = "b"; s.t1_type = 8; s.t1_ne0 = 32; s.t1_off = 128;
    s.data_bytes = 128 + 68;
    return s;
}

static mbuf mspec_build(const mspec *s) {
    mbuf b = {0};
    uint64_t n_kv = 4 + (s->bool_kv ? 1 : 0);
    mb_put(&b, s->magic, 4);
    mb_u32(&b, s->version);
    mb_u64(&b, s->n_tensors_field != UINT64_MAX ? s->n_tensors_field : 2);
    mb_u64(&b, s->n_kv_field != UINT64_MAX ? s->n_kv_field : n_kv);
    /* kv 0 */
    mb_u64(&b, s->key0_len); /* the length field may lie; write only the real bytes */
    mb_put(&b, s->key0, s->key0_len > 64 ? strlen(s->key0) : s->key0_len);
    mb_u32(&b, s->arch_type);
    if (s->arch_type == 8) mb_cstr(&b, s->arch);
    else if (s->arch_type == 9) { mb_u32(&b, 9); mb_u64(&b, 1); mb_u32(&b, 4); mb_u64(&b, 1); mb_u32(&b, 7); }
    else mb_u32(&b, 0);
    /* kv 1: alignment */
    mb_cstr(&b, "general.alignment");
    mb_u32(&b, s->align_type);
    if (s->align_type == 10) mb_u64(&b, s->align); else mb_u32(&b, (uint32_t)s->align);
    /* kv 2: numeric array */
    mb_cstr(&b, s->dup_key ? "general.architecture" : "test.arr");
    mb_u32(&b, 9);
    mb_u32(&b, s->arr_elem_type);
    mb_u64(&b, s->arr_len_field);
    for (int i = 1; i <= 3; i++) mb_u32(&b, (uint32_t)i);
    /* kv 3: string array */
    mb_cstr(&b, "test.names");
    mb_u32(&b, 9);
    mb_u32(&b, 8);
    mb_u64(&b, 2);
    mb_cstr(&b, "x");
    mb_u64(&b, s->str_elem_len);
    mb_put(&b, "yz", 2);
    if (s->bool_kv) {
        mb_cstr(&b, "test.flag");
        mb_u32(&b, 7);
        mb_put(&b, &s->bool_val, 1);
    }
    /* tensor infos */
    mb_str(&b, s->t0_name, s->t0_len);
    mb_u32(&b, s->t0_dims);
    for (uint32_t d = 0; d < s->t0_dims && d < 8; d++) mb_u64(&b, d == 0 ? s->t0_ne0 : d == 1 ? s->t0_ne1 : 1);
    mb_u32(&b, s->t0_type);
    mb_u64(&b, s->t0_off);
    mb_cstr(&b, s->t1_name);
    mb_u32(&b, 2);
    mb_u64(&b, s->t1_ne0);
    mb_u64(&b, 2);
    mb_u32(&b, s->t1_type);
    mb_u64(&b, s->t1_off);
    uint64_t a = s->align && !(s->align & (s->align - 1)) && s->align < 4096 ? s->align : 32;
    while (b.n % a) mb_put(&b, "", 1);
    for (size_t i = 0; i < s->data_bytes; i++) {
        uint8_t v = (uint8_t)(i * 7);
        mb_put(&b, &v, 1);
    }
    if (s->cut && s->cut < b.n) b.n = s->cut;
    return b;
}

typedef struct {
    const char *name;
    const char *level;  /* "gguf": the reader rejects; "model": the contract rejects */
    const char *expect; /* substring of the error */
} mcase;

/* Builds case i into *out; returns 0 when i is past the last case. */
static int malformed_case(int i, mcase *c, mbuf *out) {
    mspec s = mspec_base();
    mbuf base = mspec_build(&s);
    *c = (mcase){0};
    c->level = "gguf";
    switch (i) {
    case 0: c->name = "empty"; c->expect = "empty file"; s.cut = 0; free(base.p); *out = (mbuf){malloc(1), 0, 1}; return 1;
    case 1: c->name = "bad_magic"; c->expect = "bad magic"; s.magic = "GGUX"; break;
    case 2: c->name = "version_1"; c->expect = "version 1 is not supported"; s.version = 1; break;
    case 3: c->name = "version_4"; c->expect = "unsupported GGUF version 4"; s.version = 4; break;
    case 4: c->name = "version_byteswapped"; c->expect = "big-endian"; s.version = 0x03000000u; break;
    case 5: c->name = "trunc_magic"; c->expect = "bad magic"; s.cut = 3; break;
    case 6: c->name = "trunc_version"; c->expect = "truncated file: version"; s.cut = 6; break;
    case 7: c->name = "trunc_tensor_count"; c->expect = "truncated file: tensor count"; s.cut = 12; break;
    case 8: c->name = "trunc_kv_count"; c->expect = "truncated file: metadata count"; s.cut = 20; break;
    case 9: c->name = "huge_kv_count"; c->expect = "metadata count"; s.n_kv_field = UINT64_MAX - 1; break;
    case 10: c->name = "huge_tensor_count"; c->expect = "tensor count"; s.n_tensors_field = 1ull << 60; break;
    /* kv records: 0 at 24..70, 1 at 70..103, 2 at 103..147, 3 at 147..200;
     * tensor infos 200..274, data from 288 */
    case 11: c->name = "trunc_key_len"; c->expect = "truncated file: metadata key"; s.cut = 107; break;
    case 12: c->name = "trunc_key"; c->expect = "string length 8 exceeds"; s.cut = 114; break;
    case 13: c->name = "huge_key_len"; c->expect = "string length"; s.key0_len = 1ull << 40; break;
    case 14: c->name = "empty_key"; c->expect = "empty metadata key"; s.key0 = ""; s.key0_len = 0; break;
    case 15: c->name = "key_bad_utf8"; c->expect = "not valid UTF-8"; s.key0 = "general.\xff\xfe"; s.key0_len = 10; break;
    case 16: c->name = "key_overlong_utf8"; c->expect = "not valid UTF-8"; s.key0 = "general.\xc0\x80"; s.key0_len = 10; break;
    case 17: c->name = "key_surrogate"; c->expect = "not valid UTF-8"; s.key0 = "general.\xed\xa0\x80"; s.key0_len = 11; break;
    case 18: c->name = "key_nul"; c->expect = "NUL byte"; s.key0 = "general\0arch"; s.key0_len = 12; break;
    case 19: c->name = "key_trunc_utf8"; c->expect = "not valid UTF-8"; s.key0 = "general.\xe2\x82"; s.key0_len = 10; break;
    case 20: c->name = "duplicate_key"; c->expect = "duplicate metadata key 'general.architecture'"; s.dup_key = 1; break;
    case 21: c->name = "bad_value_type"; c->expect = "invalid value type 13"; s.arch_type = 13; break;
    case 22: c->name = "huge_value_type"; c->expect = "invalid value type 4294967295"; s.arch_type = 0xffffffffu; break;
    case 23: c->name = "trunc_value_type"; c->expect = "truncated file: value type"; s.cut = 121; break;
    case 24: c->name = "trunc_string_elem"; c->expect = "string length 2 exceeds"; s.cut = 199; break;
    case 25: c->name = "nested_array"; c->expect = "nested"; s.arch_type = 9; break;
    case 26: c->name = "bad_array_elem_type"; c->expect = "invalid array element type 13"; s.arr_elem_type = 13; break;
    case 27: c->name = "huge_array_len"; c->expect = "cannot fit"; s.arr_len_field = 1ull << 61; break;
    case 28: c->name = "array_len_past_end"; c->expect = "cannot fit"; s.arr_len_field = 100000; break;
    case 29: c->name = "string_elem_past_end"; c->expect = "string length"; s.str_elem_len = 1ull << 33; break;
    case 30: c->name = "bool_value_2"; c->expect = "invalid bool value 2"; s.bool_kv = 1; s.bool_val = 2; break;
    case 31: c->name = "alignment_u64"; c->expect = "expected uint32"; s.align_type = 10; break;
    case 32: c->name = "alignment_zero"; c->expect = "not a power of two"; s.align = 0; break;
    case 33: c->name = "alignment_48"; c->expect = "not a power of two"; s.align = 48; break;
    case 34: c->name = "tensor_name_empty"; c->expect = "empty tensor name"; s.t0_name = ""; s.t0_len = 0; break;
    case 35: c->name = "tensor_name_bad_utf8"; c->expect = "tensor name is not valid UTF-8"; s.t0_name = "\x80z"; s.t0_len = 2; break;
    case 36: c->name = "tensor_name_too_long"; c->expect = "longer than"; {
        static char longname[300];
        memset(longname, 'n', sizeof longname);
        s.t0_name = longname; s.t0_len = sizeof longname;
    } break;
    case 37: c->name = "duplicate_tensor"; c->expect = "duplicate tensor name 'b'"; s.t0_name = "b"; break;
    case 38: c->name = "tensor_zero_dims"; c->expect = "0 dimensions"; s.t0_dims = 0; break;
    case 39: c->name = "tensor_five_dims"; c->expect = "5 dimensions"; s.t0_dims = 5; break;
    case 40: c->name = "tensor_dim_zero"; c->expect = "is zero"; s.t0_ne0 = 0; break;
    case 41: c->name = "tensor_dims_overflow"; c->expect = "overflows"; s.t0_dims = 2; s.t0_ne0 = 1ull << 40; s.t0_ne1 = 1ull << 40; break;
    case 42: c->name = "tensor_unknown_type"; c->expect = "unknown storage type 99"; s.t0_type = 99; break;
    case 43: c->name = "tensor_removed_type"; c->expect = "unknown storage type 4"; s.t0_type = 4; break;
    case 44: c->name = "tensor_partial_block"; c->expect = "not a multiple of the q8_0 block size"; s.t1_ne0 = 48; break;
    case 45: c->name = "tensor_misaligned"; c->expect = "not a multiple of the alignment"; s.t1_off = 132; break;
    case 46: c->name = "tensor_overlap"; c->expect = "overlaps"; s.t1_off = 96; break;
    case 47: c->name = "tensor_past_eof"; c->expect = "runs past the end"; s.t1_off = 1ull << 20; break;
    case 48: c->name = "tensor_offset_overflow"; c->expect = "runs past the end"; s.t1_off = UINT64_MAX - 31; break;
    case 49: c->name = "trunc_data"; c->expect = "runs past the end"; s.data_bytes = 150; break;
    case 50: c->name = "trunc_before_data"; c->expect = "data section starts at 288"; s.data_bytes = 0; s.cut = 280; break;
    case 51: c->name = "trunc_tensor_info"; c->expect = "truncated file: tensor offset"; s.cut = (size_t)-1; break;
    case 52: c->name = "kv_count_too_big"; c->expect = "empty tensor name"; s.n_kv_field = 5; break;
    case 53: c->name = "tensor_type_is_f64_huge"; c->expect = "runs past the end"; s.t0_type = 28; s.t0_ne0 = 1ull << 30; break;
    case 54: c->name = "trunc_numeric_array"; c->expect = "cannot fit"; s.cut = 141; break;
    /* Well-formed GGUF that the model contract must reject. */
    case 55: c->name = "model_other_arch"; c->level = "model"; c->expect = "unsupported architecture 'llama'"; s.arch = "llama"; break;
    case 56: c->name = "model_no_hparams"; c->level = "model"; c->expect = "missing metadata key 'gemma4.block_count'"; break;
    case 57: c->name = "model_arch_not_string"; c->level = "model"; c->expect = "general.architecture"; s.arch_type = 4; break;
    /* GGUF asks for a multiple of 8: below it f32 tensors may sit misaligned for their loads */
    case 58: c->name = "alignment_4"; c->expect = "is not a power of two of at least 8"; s.align = 4; break;
    default: free(base.p); return 0;
    }
    if (s.cut == (size_t)-1) { /* cut in the middle of the second tensor info */
        mspec t = mspec_base();
        t.data_bytes = 0;
        mbuf full = mspec_build(&t);
        s.cut = full.n - 18; /* inside the offset of tensor 'b' */
        free(full.p);
    }
    free(base.p);
    *out = mspec_build(&s);
    return 1;
}

#endif
