/* Tokenizer: exact ids against the pinned reference on its own vector set
 * and on the large golden corpus (tests/data/tok, made by
 * tools/tok_golden.sh), the attribute table, BOS handling, invalid UTF-8,
 * detokenization and the streaming decoder. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gguf/gguf.h"
#include "test.h"
#include "gguf/gguf_write.h"
#include "tok/tok.h"

#include "tok/vectors.h"

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

/* tok_min_tokens: a lower bound, and near the count where the text is
 * made of the longest tokens (runs of spaces: 31 a token) */
static void test_min_tokens(const tok *t) {
    char spaces[3100];
    memset(spaces, ' ', sizeof spaces);
    tok_ids ids = {0};
    tok_encode(t, spaces, sizeof spaces, 0, 1, &ids);
    const size_t least = tok_min_tokens(t, spaces, sizeof spaces);
    CHECKF(least <= ids.n && least * 4 >= ids.n, "3100 spaces: %zu tokens, bound %zu", ids.n, least);
    tok_ids_free(&ids);
    /* stray continuation bytes and overlong forms count no code point from below */
    const char odd[] = "\x80\x80\xc0\xaf\xe0\x80\xaf<|turn>";
    tok_encode(t, odd, sizeof odd - 1, 0, 1, &ids);
    CHECK(tok_min_tokens(t, odd, sizeof odd - 1) <= ids.n);
    tok_ids_free(&ids);
    CHECK(tok_min_tokens(t, "", 0) == 0);
}

static void test_basics(const tok *t) {
    CHECK(tok_n_vocab(t) == 262144);
    CHECK(tok_bos(t) == 2 && tok_eos(t) == 1 && tok_add_bos(t));
    CHECK(tok_is_eog(t, 1) && tok_is_eog(t, 50) && tok_is_eog(t, 106) && !tok_is_eog(t, 212) && !tok_is_eog(t, 2));
    CHECK(tok_attr(t, 50) == (TOK_ATTR_USER_DEFINED | TOK_ATTR_CONTROL));
    CHECK(tok_attr(t, 48) == TOK_ATTR_USER_DEFINED && tok_attr(t, 105) == TOK_ATTR_CONTROL);
    CHECK(tok_attr(t, 212) == TOK_ATTR_NORMAL); /* "</s>" */
    CHECK(tok_attr(t, 238) == TOK_ATTR_BYTE && tok_attr(t, -1) == 0 && tok_attr(t, 262144) == 0);
    CHECK(tok_find(t, "<|turn>", 7) == 105 && tok_find(t, "\n", 1) == 107 && tok_find(t, "no such token", 13) == -1);
    /* shared spec: " Linus" -> [9684 "▁Lin", 605]; newline runs are whole tokens */
    CHECK(ids_eq(t, " Linus", 0, 0, (int32_t[]){9684, 605}, 2));
    CHECK(ids_eq(t, "\n\n\n", 0, 0, (int32_t[]){109}, 1));
    CHECK(ids_eq(t, "", 1, 0, (int32_t[]){2}, 1));
    CHECK(ids_eq(t, "", 0, 0, NULL, 0));
    CHECK(ids_eq(t, "Hello world", 1, 0, (int32_t[]){2, 9259, 1902}, 3));
    /* control tokens only with special parsing; user-defined always */
    CHECK(ids_eq(t, "<|turn>", 0, 1, (int32_t[]){105}, 1));
    tok_ids ids = {0};
    tok_encode(t, "<|turn>", 7, 0, 0, &ids);
    CHECK(ids.n > 1);
    tok_ids_free(&ids);
    CHECK(ids_eq(t, "<|channel>", 0, 0, (int32_t[]){100}, 1));
    CHECK(ids_eq(t, "<|tool_response>", 0, 1, (int32_t[]){50}, 1));
    /* byte fallback: a lone invalid byte becomes U+FFFD, as in the reference */
    tok_encode(t, "\xff", 1, 0, 0, &ids);
    int32_t fffd = tok_find(t, "\xef\xbf\xbd", 3);
    CHECK(ids.n >= 1 && (fffd < 0 || (ids.n == 1 && ids.v[0] == fffd)));
    tok_ids_free(&ids);
}

/* Every token's attributes and the end-of-generation set equal the table
 * the reference printed after loading the same vocabulary. */
static void test_attr_table(const tok *t) {
    size_t n;
    char *txt = test_slurp("tests/data/tok/gemma4-attrs.txt", &n);
    CHECK(txt != NULL);
    if (!txt) return;
    static uint8_t want[262144];
    memset(want, TOK_ATTR_NORMAL, sizeof want);
    int bad = 0, eog_ok = 1;
    for (char *line = txt; *line;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        int id, attr;
        if (sscanf(line, "%d %d", &id, &attr) == 2 && id >= 0 && id < 262144) want[id] = (uint8_t)attr;
        if (!strncmp(line, "eog:", 4)) {
            int cnt = 0;
            for (char *q = line + 4; *q;) {
                long v = strtol(q, &q, 10);
                cnt++;
                eog_ok &= tok_is_eog(t, (int32_t)v);
                while (*q == ' ') q++;
            }
            int mine = 0;
            for (int32_t i = 0; i < 262144; i++) mine += tok_is_eog(t, i);
            eog_ok &= mine == cnt;
        }
        if (!nl) break;
        line = nl + 1;
    }
    for (int32_t i = 0; i < 262144; i++) bad += tok_attr(t, i) != want[i];
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

static void test_detok(const tok *t) {
    const char *text = "Hello, wörld!  日本語 🎉 <|\"|> done\n\n";
    tok_ids ids = {0};
    tok_encode(t, text, strlen(text), 1, 1, &ids);
    char out[256] = "";
    tok_stream st = {{0}, 0};
    size_t len;
    for (size_t i = 0; i < ids.n; i++) {
        const char *p = tok_piece(t, ids.v[i], 0, &len);
        tok_stream_feed(&st, p, len, append, out);
    }
    tok_stream_flush(&st, append, out);
    CHECKF(!strcmp(out, text), "round trip gave '%s'", out);
    CHECK(tok_piece(t, 2, 0, &len) && len == 0);             /* <bos> hidden */
    CHECK(tok_piece(t, 2, 1, &len) && len == 5);             /* shown with special */
    CHECK(tok_piece(t, 48, 0, &len) && len == 12);           /* <|tool_call> always */
    CHECK(tok_piece(t, 238 + 0x41, 0, &len) && len == 1);    /* <0x41> */
    /* a literal U+2581 in text reads back as a space, as in the reference */
    int32_t sp = tok_find(t, "\xe2\x96\x81", 3);
    CHECK(sp >= 0 && tok_piece(t, sp, 0, &len) && len == 1);
    CHECK(tok_piece(t, 262144, 0, &len) == NULL && tok_piece(t, -5, 1, &len) == NULL);
    tok_ids_free(&ids);

    /* the streaming decoder never splits a character, whatever the chunks */
    const char *s = "a\xc3\xa9\xe6\x97\xa5\xf0\x9f\x8e\x89z";
    size_t sl = strlen(s);
    for (size_t cut1 = 0; cut1 <= sl; cut1++) {
        for (size_t cut2 = cut1; cut2 <= sl; cut2++) {
            char o[64] = "";
            char seen[8][16];
            int nseen = 0;
            tok_stream st2 = {{0}, 0};
            (void)seen; (void)nseen;
            tok_stream_feed(&st2, s, cut1, append, o);
            size_t before = strlen(o);
            int whole = 1;
            /* everything emitted so far must be whole characters */
            for (size_t i = 0; i < before; i++) {
                unsigned char c = (unsigned char)o[i];
                int need = c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
                if (c >= 0x80 && c < 0xc0) { whole = 0; break; }
                if (i + (size_t)need > before) { whole = 0; break; }
                i += (size_t)need - 1;
            }
            tok_stream_feed(&st2, s + cut1, cut2 - cut1, append, o);
            tok_stream_feed(&st2, s + cut2, sl - cut2, append, o);
            tok_stream_flush(&st2, append, o);
            CHECK(whole && !strcmp(o, s));
        }
    }
    /* invalid bytes are passed through, not held forever */
    char o2[16] = "";
    tok_stream st3 = {{0}, 0};
    tok_stream_feed(&st3, "\xe6x", 2, append, o2);
    CHECK(!strcmp(o2, "\xe6x"));
}

/* Encoding time must grow linearly: a 4 MB line may take at most 8x the
 * time of a 1 MB line (linear is 4x, quadratic 16x). Timed in this
 * thread's CPU time, the better of two runs each: other processes on a
 * loaded machine (a 2-core CI runner) stretch wall time, not that. */
static void test_linear(const tok *t) {
    size_t n1 = 1 << 20, n4 = 4 << 20;
    char *buf = malloc(n4);
    for (size_t i = 0; i < n4; i++) buf[i] = "abc de,f.ghij klm"[i * 7 % 17];
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
            CHECK(ids.n > ns[k] / 20);
            tok_ids_free(&ids);
        }
    }
    /* linear predicts 4x; allow noise up to 8x, quadratic would be 16x */
    CHECKF(tm[1] < 8 * tm[0] + 0.05, "1 MB %.3fs, 4 MB %.3fs", tm[0], tm[1]);
    free(buf);
}

/* A vocabulary file of n tokens (texts and types) for the loader checks. */
static int write_vocab(const char *path, const char *const *texts, const int32_t *types, uint64_t n) {
    gem_err err = {{0}};
    gguf_writer *w = gguf_writer_new(32);
    FILE *fp = fopen(path, "wb");
    int rc = !w || !fp || gguf_w_str(w, "tokenizer.ggml.model", "gemma4", &err) ||
             gguf_w_arr_str(w, "tokenizer.ggml.tokens", texts, n, &err) ||
             gguf_w_arr(w, "tokenizer.ggml.token_type", GGUF_T_INT32, types, n, &err) ||
             gguf_writer_begin(w, fp, &err) || gguf_writer_finish(w, fp, &err);
    if (fp) fclose(fp);
    gguf_writer_free(w);
    return rc;
}

static tok *load_vocab(const char *path, gem_err *err) {
    gguf_file *f = gguf_open(path, err);
    tok *t = f ? tok_load(f, err) : NULL;
    if (t) tok_free(t);
    gguf_close(f);
    return t;
}

/* Hostile vocabularies: a byte token (type 6) whose text is not <0xHH>
 * (it once overflowed the pieces buffer: one byte written for an empty
 * text), and every token special with lengths ascending (the longest-first
 * sort of specials was an insertion sort: 36 s for 262144 tokens). */
static void test_hostile_vocab(void) {
    const char *path = "build/test-tok-vocab.gguf";
    const char *texts[4] = {"<pad>", "<eos>", "", "a"};
    const int32_t types[4] = {3, 3, 6, 1};
    gem_err err = {{0}};
    CHECK(write_vocab(path, texts, types, 4) == 0);
    load_vocab(path, &err);
    CHECKF(strstr(err.msg, "token 2 is a byte token (type 6) but its text is not <0xHH>"), "got '%s'", err.msg);
    const char *texts2[2] = {"<0x4G>", "<0x41>"};
    const int32_t types2[2] = {6, 6};
    err.msg[0] = 0;
    CHECK(write_vocab(path, texts2, types2, 2) == 0);
    load_vocab(path, &err);
    CHECKF(strstr(err.msg, "token 0 is a byte token"), "got '%s'", err.msg);

    enum { N = 100000 };
    char **many = malloc(N * sizeof *many);
    int32_t *ty = malloc(N * sizeof *ty);
    CHECK(many && ty);
    if (!many || !ty) return;
    for (int i = 0; i < N; i++) { /* "<s7>xxx...": lengths 8 to 107, ascending with i */
        const int len = 8 + i / 1000;
        many[i] = malloc((size_t)len + 1);
        if (!many[i]) return;
        const int k = snprintf(many[i], (size_t)len + 1, "<s%d>", i);
        memset(many[i] + k, 'x', (size_t)(len - k));
        many[i][len] = 0;
        ty[i] = 3;
    }
    CHECK(write_vocab(path, (const char *const *)many, ty, N) == 0);
    const double t0 = test_cpu_now();
    gguf_file *f = gguf_open(path, &err);
    tok *t = f ? tok_load(f, &err) : NULL;
    const double dt = test_cpu_now() - t0;
    CHECKF(t != NULL, "%s", err.msg);
    /* the insertion sort took 7.6 s here; qsort takes milliseconds (bound for a slow CI machine) */
    CHECKF(dt < 1.5, "loading %d special tokens took %.2f s", N, dt);
    if (t) {
        /* longest first: the last text is one token, not a shorter special and the rest */
        tok_ids out = {0};
        CHECK(tok_encode(t, many[N - 1], strlen(many[N - 1]), 0, 1, &out) == 0 && out.n == 1 && out.v[0] == N - 1);
        tok_ids_free(&out);
        tok_free(t);
    }
    gguf_close(f);
    for (int i = 0; i < N; i++) free(many[i]);
    free(many);
    free(ty);
    remove(path);
}

int main(int argc, char **argv) {
    const char *vocab = argc > 1 ? argv[1] : "data/vocab/gemma-4.gguf";
    gem_err err = {{0}};
    gguf_file *f = gguf_open(vocab, &err);
    tok *t = f ? tok_load(f, &err) : NULL;
    CHECKF(t != NULL, "%s", err.msg);
    if (!t) return test_report("test_tok");
    test_basics(t);
    test_min_tokens(t);
    test_attr_table(t);
    check_vectors(t, "tests/data/tok/ggml-vocab-gemma-4.gguf.inp", "tests/data/tok/ggml-vocab-gemma-4.gguf.out", 0);
    /* the large corpus, unpacked by the Makefile into build/ */
    FILE *c = fopen("build/tok-golden/corpus.inp", "rb");
    if (c) {
        fclose(c);
        check_vectors(t, "build/tok-golden/corpus.inp", "build/tok-golden/corpus.plain.out", 0);
        check_vectors(t, "build/tok-golden/corpus.inp", "build/tok-golden/corpus.special.out", 1);
    } else {
        CHECKF(0, "build/tok-golden/corpus.inp missing (make unpacks tests/data/tok/*.gz)");
    }
    test_detok(t);
    test_linear(t);
    test_hostile_vocab();
    tok_free(t);
    gguf_close(f);
    return test_report("test_tok");
}
