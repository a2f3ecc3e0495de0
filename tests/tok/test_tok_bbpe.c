/* Byte-level BPE (Qwen3.5's vocabulary, tokenizer.ggml.pre = qwen35): exact
 * ids against the pinned reference on its own vector set and on the golden
 * corpus (tests/data/tok, made by tools/tok_golden.sh), the attribute table
 * and end-of-generation set, no BOS, invalid UTF-8, detokenization through
 * the byte alphabet and the streaming decoder, linear time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gguf/gguf.h"
#include "gguf/gguf_write.h"
#include "test.h"
#include "tok/tok.h"
#include "tok/vectors.h"

#define VOCAB "data/vocab/qwen35.gguf"
#define N_VOCAB 151936

static int ids_eq(const tok *t, const char *text, int bos, int special, const int32_t *want, size_t n) {
    tok_ids ids = {0};
    tok_encode(t, text, strlen(text), bos, special, &ids);
    int ok = ids.n == n && (n == 0 || !memcmp(ids.v, want, n * 4));
    if (!ok) {
        fprintf(stderr, "'%s': got", text);
        for (size_t i = 0; i < ids.n; i++) fprintf(stderr, " %d", ids.v[i]);
        fprintf(stderr, "\n");
    }
    tok_ids_free(&ids);
    return ok;
}

static void test_basics(const tok *t) {
    CHECK(tok_n_vocab(t) == N_VOCAB);
    CHECK(tok_bos(t) == 151643 && tok_eos(t) == 151643 && !tok_add_bos(t));
    CHECK(tok_is_eog(t, 151643) && tok_is_eog(t, 151645) && !tok_is_eog(t, 151644) && !tok_is_eog(t, 0));
    CHECK(tok_attr(t, 151644) == TOK_ATTR_CONTROL && tok_attr(t, 151646) == TOK_ATTR_USER_DEFINED);
    CHECK(tok_attr(t, 0) == TOK_ATTR_NORMAL && tok_attr(t, N_VOCAB) == 0);
    CHECK(tok_find(t, "<|im_start|>", 12) == 151644 && tok_find(t, "\xc4\xa0", 2) >= 0); /* "Ġ" spells ' ' */
    /* no BOS for this vocabulary even when asked */
    CHECK(ids_eq(t, "", 1, 0, NULL, 0));
    int32_t hello[2];
    hello[0] = tok_find(t, "Hello", 5);
    hello[1] = tok_find(t, "\xc4\xa0world", 7);
    CHECK(hello[0] >= 0 && hello[1] >= 0 && ids_eq(t, "Hello world", 1, 0, hello, 2));
    /* control tokens only with special parsing; user-defined always */
    CHECK(ids_eq(t, "<|im_start|>", 0, 1, (int32_t[]){151644}, 1));
    tok_ids ids = {0};
    tok_encode(t, "<|im_start|>", 12, 0, 0, &ids);
    CHECK(ids.n > 1);
    tok_ids_free(&ids);
    CHECK(ids_eq(t, "[PAD151650]", 0, 0, (int32_t[]){151650}, 1));
    /* an invalid byte reads as U+FFFD, as in the reference */
    tok_ids a = {0}, b = {0};
    tok_encode(t, "\xff", 1, 0, 0, &a);
    tok_encode(t, "\xef\xbf\xbd", 3, 0, 0, &b);
    CHECK(a.n >= 1 && a.n == b.n && !memcmp(a.v, b.v, a.n * 4));
    tok_ids_free(&a);
    tok_ids_free(&b);
}

/* Every token's attributes and the end-of-generation set equal the table
 * the reference printed after loading the same vocabulary. */
static void test_attr_table(const tok *t) {
    size_t n;
    char *txt = test_slurp("tests/data/tok/qwen35-attrs.txt", &n);
    CHECK(txt != NULL);
    if (!txt) return;
    static uint8_t want[N_VOCAB];
    memset(want, TOK_ATTR_NORMAL, sizeof want);
    int bad = 0, eog_ok = 1;
    for (char *line = txt; *line;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        int id, attr;
        if (sscanf(line, "%d %d", &id, &attr) == 2 && id >= 0 && id < N_VOCAB) want[id] = (uint8_t)attr;
        if (!strncmp(line, "eog:", 4)) {
            int cnt = 0;
            for (char *q = line + 4; *q;) {
                long v = strtol(q, &q, 10);
                cnt++;
                eog_ok &= tok_is_eog(t, (int32_t)v);
                while (*q == ' ') q++;
            }
            int mine = 0;
            for (int32_t i = 0; i < N_VOCAB; i++) mine += tok_is_eog(t, i);
            eog_ok &= mine == cnt;
        }
        if (!nl) break;
        line = nl + 1;
    }
    for (int32_t i = 0; i < N_VOCAB; i++) bad += tok_attr(t, i) != want[i];
    CHECKF(bad == 0, "%d token attributes differ from the reference", bad);
    CHECK(eog_ok);
    free(txt);
}

static void append(const char *p, size_t n, void *ctx) {
    char *buf = ctx;
    size_t l = strlen(buf);
    memcpy(buf + l, p, n);
    buf[l + n] = 0;
}

/* Pieces spell bytes: the text comes back byte for byte through the
 * streaming decoder, even where a character is split across tokens. */
static void test_detok(const tok *t) {
    const char *texts[] = {
        "Hello, wörld!  日本語 🎉 <|im_start|> done\n\n",
        "\t\tcode(x) { return x->y; }\r\n",
        "👨‍👩‍👧‍👦 🏳️‍🌈 ಠ_ಠ",
        "\x01\x7f control bytes",
    };
    for (size_t k = 0; k < sizeof texts / sizeof texts[0]; k++) {
        tok_ids ids = {0};
        tok_encode(t, texts[k], strlen(texts[k]), 0, 1, &ids);
        char out[256] = "";
        tok_stream st = {{0}, 0};
        size_t len;
        for (size_t i = 0; i < ids.n; i++) {
            const char *p = tok_piece(t, ids.v[i], 1, &len);
            tok_stream_feed(&st, p, len, append, out);
        }
        tok_stream_flush(&st, append, out);
        CHECKF(!strcmp(out, texts[k]), "round trip of text %zu gave '%s'", k, out);
        tok_ids_free(&ids);
    }
    size_t len;
    CHECK(tok_piece(t, 151644, 0, &len) && len == 0);  /* <|im_start|> hidden */
    CHECK(tok_piece(t, 151644, 1, &len) && len == 12); /* shown with special */
    CHECK(tok_piece(t, 151650, 0, &len) && len == 11); /* user-defined: always */
    int32_t sp = tok_find(t, "\xc4\xa0", 2);
    const char *p = tok_piece(t, sp, 0, &len);
    CHECK(p && len == 1 && p[0] == ' ');
    int32_t nl = tok_find(t, "\xc4\x8a", 2); /* "Ċ" spells '\n' */
    p = tok_piece(t, nl, 0, &len);
    CHECK(p && len == 1 && p[0] == '\n');
    /* a multi-byte character split over byte tokens: no piece alone is whole */
    tok_ids ids = {0};
    tok_encode(t, "\xf0\x9f\xab\xa0", 4, 0, 0, &ids); /* U+1FAE0 */
    char out[32] = "";
    tok_stream st = {{0}, 0};
    for (size_t i = 0; i < ids.n; i++) {
        p = tok_piece(t, ids.v[i], 0, &len);
        tok_stream_feed(&st, p, len, append, out);
        CHECK(i + 1 == ids.n || strlen(out) == 0);
    }
    tok_stream_flush(&st, append, out);
    CHECK(ids.n > 1 && !strcmp(out, "\xf0\x9f\xab\xa0"));
    tok_ids_free(&ids);
    CHECK(tok_piece(t, N_VOCAB, 0, &len) == NULL && tok_piece(t, -5, 1, &len) == NULL);
}

/* Encoding time must grow linearly: a 4 MB text may take at most 8x the
 * time of a 1 MB text, in thread CPU time (see test_tok.c), on one line of
 * words and on one word of 4 MB letters (a single BPE run). */
static void test_linear(const tok *t) {
    size_t n1 = 1 << 20, n4 = 4 << 20;
    char *buf = malloc(n4);
    for (int shape = 0; shape < 2; shape++) {
        for (size_t i = 0; i < n4; i++) buf[i] = shape ? "abcdefghij"[i * 7 % 10] : "abc de,f.ghij klm"[i * 7 % 17];
        double tm[2];
        size_t ns[2] = {n1, n4};
        for (int k = 0; k < 2; k++) {
            tm[k] = 1e30;
            for (int run = 0; run < 2; run++) {
                struct timespec a, b;
                tok_ids ids = {0};
                clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
                tok_encode(t, buf, ns[k], 0, 0, &ids);
                clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
                const double s = (double)(b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9;
                if (s < tm[k]) tm[k] = s;
                CHECK(ids.n > ns[k] / 40);
                tok_ids_free(&ids);
            }
        }
        CHECKF(tm[1] < 8 * tm[0] + 0.05, "shape %d: 1 MB %.3fs, 4 MB %.3fs", shape, tm[0], tm[1]);
    }
    free(buf);
}

/* A gpt2 vocabulary of a few tokens: pre names the pre-tokenizer (NULL:
 * no key), with_merges adds the merge "a b". */
static int write_vocab(const char *path, const char *pre, int with_merges) {
    gem_err err = {{0}};
    const char *texts[3] = {"a", "b", "ab"}, *merges[1] = {"a b"};
    gguf_writer *w = gguf_writer_new(32);
    FILE *fp = fopen(path, "wb");
    int rc = !w || !fp || gguf_w_str(w, "tokenizer.ggml.model", "gpt2", &err) ||
             (pre && gguf_w_str(w, "tokenizer.ggml.pre", pre, &err)) ||
             gguf_w_arr_str(w, "tokenizer.ggml.tokens", texts, 3, &err) ||
             (with_merges && gguf_w_arr_str(w, "tokenizer.ggml.merges", merges, 1, &err)) ||
             gguf_writer_begin(w, fp, &err) || gguf_writer_finish(w, fp, &err);
    if (fp) fclose(fp);
    gguf_writer_free(w);
    return rc;
}

/* What the loader refuses, by name; a tiny vocabulary merges and falls
 * back to what exists (bytes without a token are dropped, as the
 * reference drops them). */
static void test_loader(void) {
    const char *path = "build/test-tok-bbpe-vocab.gguf";
    const struct {
        const char *pre;
        int merges;
        const char *msg;
    } bad[] = {
        {"llama3", 1, "pre-tokenizer 'llama3' is not supported (gem supports qwen35)"},
        {NULL, 1, "pre-tokenizer '' is not supported"},
        {"qwen35", 0, "a gpt2 tokenizer needs tokenizer.ggml.merges"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        gem_err err = {{0}};
        CHECK(write_vocab(path, bad[i].pre, bad[i].merges) == 0);
        gguf_file *f = gguf_open(path, &err);
        tok *t = f ? tok_load(f, &err) : NULL;
        CHECKF(!t && strstr(err.msg, bad[i].msg), "got '%s'", err.msg);
        tok_free(t);
        gguf_close(f);
    }
    gem_err err = {{0}};
    CHECK(write_vocab(path, "qwen35", 1) == 0);
    gguf_file *f = gguf_open(path, &err);
    tok *t = f ? tok_load(f, &err) : NULL;
    CHECKF(t != NULL, "%s", err.msg);
    if (t) {
        CHECK(ids_eq(t, "ab", 0, 0, (int32_t[]){2}, 1));
        CHECK(ids_eq(t, "ba", 0, 0, (int32_t[]){1, 0}, 2));
        CHECK(ids_eq(t, "a c", 0, 0, (int32_t[]){0}, 1)); /* " c" has no tokens at all */
        tok_free(t);
    }
    gguf_close(f);
    remove(path);
}

int main(int argc, char **argv) {
    const char *vocab = argc > 1 ? argv[1] : VOCAB;
    gem_err err = {{0}};
    gguf_file *f = gguf_open(vocab, &err);
    tok *t = f ? tok_load(f, &err) : NULL;
    CHECKF(t != NULL, "%s", err.msg);
    if (!t) return test_report("test_tok_bbpe");
    test_basics(t);
    test_attr_table(t);
    check_vectors(t, "tests/data/tok/ggml-vocab-qwen35.gguf.inp", "tests/data/tok/ggml-vocab-qwen35.gguf.out", 0);
    /* the large corpus, unpacked by the Makefile into build/ */
    FILE *c = fopen("build/tok-golden/qwen35-corpus.inp", "rb");
    if (c) {
        fclose(c);
        check_vectors(t, "build/tok-golden/qwen35-corpus.inp", "build/tok-golden/qwen35-corpus.plain.out", 0);
        check_vectors(t, "build/tok-golden/qwen35-corpus.inp", "build/tok-golden/qwen35-corpus.special.out", 1);
    } else {
        CHECKF(0, "build/tok-golden/qwen35-corpus.inp missing (make unpacks tests/data/tok/*.gz)");
    }
    test_detok(t);
    test_linear(t);
    test_loader();
    tok_free(t);
    gguf_close(f);
    return test_report("test_tok_bbpe");
}
