/* libFuzzer target: the tokenizer on arbitrary bytes, with and without
 * special-token parsing, and the streaming detokenizer on the result. Every
 * id must be in the vocabulary and the streamed text must hold every byte of
 * the pieces fed to it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "tok/tok.h"

static gguf_file *vocab_file;
static tok *vocab;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    gem_err err;
    const char *path = getenv("GEM_VOCAB") ? getenv("GEM_VOCAB") : "data/vocab/gemma-4.gguf";
    vocab_file = gguf_open(path, &err);
    vocab = vocab_file ? tok_load(vocab_file, &err) : NULL;
    if (!vocab) abort();
    return 0;
}

static void count(const char *p, size_t n, void *ctx) {
    (void)p;
    *(size_t *)ctx += n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    for (int special = 0; special < 2; special++) {
        tok_ids ids = {0};
        if (tok_encode(vocab, (const char *)data, size, 1, special, &ids)) abort();
        size_t fed = 0, got = 0;
        tok_stream st = {{0}, 0};
        for (size_t i = 0; i < ids.n; i++) {
            size_t len;
            const char *p = tok_piece(vocab, ids.v[i], 1, &len);
            if (!p) abort(); /* id out of range */
            fed += len;
            tok_stream_feed(&st, p, len, count, &got);
        }
        tok_stream_flush(&st, count, &got);
        if (got != fed) abort();
        if (size && ids.n < 2) abort(); /* BOS plus at least one token */
        tok_ids_free(&ids);
    }
    return 0;
}
