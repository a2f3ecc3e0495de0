/* Shared by the tokenizer tests: runs every input of a vocab-test file
 * (inputs separated by "\n__ggml_vocab_test__\n", the reference's format)
 * and compares with the expected file's one line of ids per input; each
 * input also checks tok_min_tokens, a lower bound on the count. */
#ifndef GEM_TESTS_TOK_VECTORS_H
#define GEM_TESTS_TOK_VECTORS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "tok/tok.h"

static void check_vectors(const tok *t, const char *inp, const char *outp, int special) {
    size_t ni, no;
    char *in = test_slurp(inp, &ni), *out = test_slurp(outp, &no);
    CHECKF(in && out, "golden files %s %s", inp, outp);
    if (!in || !out) { free(in); free(out); return; }
    const char *sep = "\n__ggml_vocab_test__\n";
    char *p = in, *line = out;
    int cases = 0, bad = 0, unsound = 0;
    for (;;) {
        char *e = strstr(p, sep);
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (!e && len == 0) break;
        char *nl = strchr(line, '\n');
        if (!nl) { bad++; break; }
        *nl = 0;
        tok_ids ids = {0};
        tok_encode(t, p, len, 0, special, &ids);
        /* tok_min_tokens is a lower bound (the server refuses prompts on it) */
        if (tok_min_tokens(t, p, len) > ids.n && unsound++ < 5)
            fprintf(stderr, "%s case %d: tok_min_tokens %zu > %zu tokens\n", inp, cases, tok_min_tokens(t, p, len), ids.n);
        /* compare with the expected line */
        char *q = line;
        size_t k = 0;
        int ok = 1;
        while (*q) {
            long v = strtol(q, &q, 10);
            if (k >= ids.n || ids.v[k] != v) { ok = 0; break; }
            k++;
            while (*q == ' ') q++;
        }
        if (k != ids.n) ok = 0;
        if (!ok) {
            if (bad < 5) {
                fprintf(stderr, "%s case %d (%zu bytes) differs:\n  want %.200s\n  got ", inp, cases, len, line);
                for (size_t i = 0; i < ids.n && i < 30; i++) fprintf(stderr, "%d ", ids.v[i]);
                fprintf(stderr, "\n");
            }
            bad++;
        }
        tok_ids_free(&ids);
        cases++;
        line = nl + 1;
        if (!e) break;
        p = e + strlen(sep);
    }
    CHECKF(bad == 0, "%s (%s): %d of %d cases differ", inp, special ? "special" : "plain", bad, cases);
    CHECKF(unsound == 0, "%s (%s): tok_min_tokens above the count in %d cases", inp, special ? "special" : "plain", unsound);
    printf("%s (%s): %d cases\n", inp, special ? "special" : "plain", cases);
    free(in);
    free(out);
}

#endif
