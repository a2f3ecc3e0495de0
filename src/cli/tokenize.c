/* gem tokenize: text on stdin to token ids on one line, or back with
 * --detok. The output format is an interface external checks rely on: ids
 * separated by single spaces, one line. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "gguf/gguf.h"
#include "tok/tok.h"
#include "util/clock.h"

static char *read_all(FILE *f, size_t *n) {
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t k = fread(buf + len, 1, cap - len, f);
        len += k;
        if (len < cap) break;
        cap *= 2;
        char *nb = realloc(buf, cap);
        if (!nb) { free(buf); return NULL; }
        buf = nb;
    }
    *n = len;
    return buf;
}

static void emit_stdout(const char *p, size_t n, void *ctx) {
    (void)ctx;
    fwrite(p, 1, n, stdout);
}

int cli_tokenize(int argc, char **argv) {
    const char *model = NULL;
    int no_bos = 0, special = 0, detok = 0, bench = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) {
            if (i + 1 >= argc) { fprintf(stderr, "gem tokenize: error: -m needs a file\n"); return 2; }
            model = argv[++i];
        } else if (!strcmp(argv[i], "--no-bos")) no_bos = 1;
        else if (!strcmp(argv[i], "--special")) special = 1;
        else if (!strcmp(argv[i], "--detok")) detok = 1;
        else if (!strcmp(argv[i], "--bench") && i + 1 < argc && atoi(argv[i + 1]) > 0) bench = atoi(argv[++i]);
        else {
            fprintf(stderr, "gem tokenize: error: unknown option '%s'\n", argv[i]);
            return 2;
        }
    }
    if (!model) {
        fprintf(stderr, "usage: gem tokenize -m FILE [--no-bos] [--special] [--detok] < input\n");
        return 2;
    }
    gem_err err = {{0}};
    gguf_file *f = gguf_open(model, &err);
    tok *t = f ? tok_load(f, &err) : NULL;
    if (!t) {
        fprintf(stderr, "gem tokenize: error: %s\n", err.msg);
        gguf_close(f);
        return 1;
    }
    size_t n;
    char *in = read_all(stdin, &n);
    int rc = 0;
    if (!in) {
        fprintf(stderr, "gem tokenize: error: cannot read stdin\n");
        rc = 1;
    } else if (bench) {
        /* encode throughput: best of N passes over the whole input, no BOS */
        double best = 1e30;
        size_t count = 0;
        for (int r = 0; r < bench && !rc; r++) {
            tok_ids ids = {0};
            double t0 = gem_now_s();
            rc = tok_encode(t, in, n, 0, special, &ids) ? 1 : 0;
            double s = gem_now_s() - t0;
            if (s < best) best = s;
            count = ids.n;
            tok_ids_free(&ids);
        }
        printf("{\"bytes\": %zu, \"tokens\": %zu, \"best_seconds\": %.6f, \"mb_per_s\": %.3f}\n", n, count, best,
               n / best / 1e6);
    } else if (detok) {
        tok_stream st = {{0}, 0};
        for (size_t i = 0; i < n && !rc;) {
            while (i < n && !(in[i] >= '0' && in[i] <= '9') && in[i] != '-') {
                char c = in[i];
                if (c != ' ' && c != '\n' && c != '\t' && c != '\r' && c != ',' && c != '[' && c != ']') {
                    fprintf(stderr, "gem tokenize: error: --detok reads token ids, found '%c' at byte %zu\n", c, i);
                    rc = 1;
                    break;
                }
                i++;
            }
            if (rc || i >= n) break;
            char *end;
            errno = 0;
            long long id = strtoll(in + i, &end, 10);
            size_t plen;
            const char *piece = errno ? NULL : tok_piece(t, id < 0 || id > INT32_MAX ? -1 : (int32_t)id, special, &plen);
            if (!piece) {
                fprintf(stderr, "gem tokenize: error: token id %.*s is out of the vocabulary (%u tokens)\n",
                        (int)(end - (in + i)), in + i, tok_n_vocab(t));
                rc = 1;
                break;
            }
            tok_stream_feed(&st, piece, plen, emit_stdout, NULL);
            i = (size_t)(end - in);
        }
        tok_stream_flush(&st, emit_stdout, NULL);
    } else {
        tok_ids ids = {0};
        if (tok_encode(t, in, n, !no_bos, special, &ids)) {
            fprintf(stderr, "gem tokenize: error: out of memory\n");
            rc = 1;
        } else {
            for (size_t i = 0; i < ids.n; i++) printf(i ? " %d" : "%d", ids.v[i]);
            printf("\n");
        }
        tok_ids_free(&ids);
    }
    free(in);
    tok_free(t);
    gguf_close(f);
    if (fflush(stdout)) rc = 1;
    return rc;
}
