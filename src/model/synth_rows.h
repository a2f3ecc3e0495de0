/* The data half of a synthetic model file (gemma4_synth, qwen35_synth):
 * each tensor's rows generated in chunks, every chunk split across worker
 * threads, and written in manifest order with progress.
 *
 * A model's synth only says how to fill a range of rows; its generator
 * must seed per row, so that the split (and the thread count) never
 * changes the bytes. */
#ifndef GEM_MODEL_SYNTH_ROWS_H
#define GEM_MODEL_SYNTH_ROWS_H

#include <stdint.h>
#include <stdio.h>

#include "gguf/gguf_write.h"
#include "util/err.h"

#define SR_MAX_THREADS 64

/* A row's random stream: the state fed back through rng_mix64 (changing
 * that would change every synthetic file's bytes). */
typedef struct {
    uint64_t s;
} sr_stream;
uint64_t sr_next(sr_stream *r);
float sr_sym(sr_stream *r); /* uniform in [-1, 1) */

/* n values (a multiple of type's block) of random blocks of a quantized
 * type, drawn directly as codes and scales (no float rows to quantize:
 * a 27B's k-quant matrices in seconds instead of minutes), with entries of
 * about standard deviation std and mean 0. 0, or -1 for a type it does not
 * draw (q8_0, q4_0, q4_k, q5_k, q6_k are drawn). */
int sr_quant_blocks(uint32_t type, uint64_t n, float std, sr_stream *r, uint8_t *out);

/* One tensor's rows. fill writes rows [row0, row0 + n) to out (n *
 * row_bytes bytes); 0, or -1 when it could not. */
typedef struct {
    const char *name; /* for "synth: cannot quantize NAME" */
    uint64_t rows, row_bytes;
    int (*fill)(const void *ctx, uint64_t row0, uint64_t n, uint8_t *out);
    const void *ctx;
} sr_tensor;

/* Where the rows go (set up by sr_begin): the file, chunks of about
 * chunk_bytes in buf, and the progress so far of total bytes (the
 * tensors' gguf_w_tensor_bytes). A zeroed one is fine for sr_end. */
typedef struct {
    gguf_writer *w;
    FILE *fp;
    const char *path;
    uint8_t *buf;
    uint64_t chunk_bytes;
    int threads;
    uint64_t done, total;
    void (*progress)(uint64_t done, uint64_t total, void *ctx);
    void *progress_ctx;
} sr_out;

/* The worker count for a request: 0 means every online CPU; at most
 * SR_MAX_THREADS. */
int sr_threads(int want);

/* Generates rows [row0, row0 + n) of t into out across up to threads
 * workers. 0, or -1 when a worker's fill failed. */
int sr_fill(const sr_tensor *t, uint64_t row0, uint64_t n, uint8_t *out, int threads);

/* Generates and writes all of t's rows. 0 or -1 with err set. */
int sr_write(sr_out *o, const sr_tensor *t, gem_err *err);

/* Creates path and writes w's header (every tensor added), for sr_write:
 * threads as sr_threads takes it, total the bytes of all tensors for
 * progress. 0 or -1 with err set; either way sr_end cleans up. */
int sr_begin(sr_out *o, gguf_writer *w, const char *path, uint64_t chunk_bytes, int threads, uint64_t total,
             void (*progress)(uint64_t done, uint64_t total, void *ctx), void *progress_ctx, gem_err *err);

/* Finishes the file when rc (the status so far) is 0, closes it (removing
 * it on failure) and frees the buffer; returns the final status. */
int sr_end(sr_out *o, int rc, gem_err *err);

#endif
