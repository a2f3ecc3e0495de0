/* libFuzzer target: the tokenizers on arbitrary bytes, with and without
 * special-token parsing, and the streaming detokenizer on the result, for
 * each vocabulary (Gemma 4's SPM-style BPE and Qwen3.5's byte-level BPE;
 * GEM_VOCAB replaces the first). Every id must be in the vocabulary and
 * the streamed text must hold every byte of the pieces fed to it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "tok/tok.h"

static gguf_file *vocab_file[2];
static tok *vocab[2];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    gem_err err;
    const char *paths[2] = {getenv("GEM_VOCAB") ? getenv("GEM_VOCAB") : "data/vocab/gemma-4.gguf", "data/vocab/qwen35.gguf"};
    for (int v = 0; v < 2; v++) {
        vocab_file[v] = gguf_open(paths[v], &err);
        vocab[v] = vocab_file[v] ? tok_load(vocab_file[v], &err) : NULL;
        if (!vocab[v]) abort();
    }
    return 0;
}

static void count(const char *p, size_t n, void *ctx) {
    (void)p;
    *(size_t *)ctx += n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    for (int v = 0; v < 2; v++) {
        const tok *t = vocab[v];
        for (int special = 0; special < 2; special++) {
            tok_ids ids = {0};
            if (tok_encode(t, (const char *)data, size, 1, special, &ids)) abort();
            size_t fed = 0, got = 0;
            tok_stream st = {{0}, 0};
            for (size_t i = 0; i < ids.n; i++) {
                size_t len;
                const char *p = tok_piece(t, ids.v[i], 1, &len);
                if (!p) abort(); /* id out of range */
                fed += len;
                tok_stream_feed(&st, p, len, count, &got);
            }
            tok_stream_flush(&st, count, &got);
            if (got != fed) abort();
            if (size && ids.n < (tok_add_bos(t) ? 2u : 1u)) abort(); /* BOS (when the vocabulary adds one) plus a token */
            tok_ids_free(&ids);
        }
    }
    return 0;
}
