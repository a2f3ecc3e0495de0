/* Chunked, threaded row generation for synth (see synth_rows.h). */
#include "model/synth_rows.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "quant/quant.h"
#include "util/file.h"
#include "util/rng.h"

uint64_t sr_next(sr_stream *r) { return r->s = rng_mix64(r->s); }

float sr_sym(sr_stream *r) { return (float)((int64_t)(sr_next(r) >> 40) - (1 << 23)) / (float)(1 << 23); }

int sr_quant_blocks(uint32_t type, uint64_t n, float std, sr_stream *r, uint8_t *out) {
    switch (type) {
    case QT_Q8_0: /* codes uniform in [-127, 127]: std 73.3 */
        for (uint64_t b = 0; b < n / 32; b++) {
            uint8_t *blk = out + 34 * b;
            quant_put_f16(blk, std / 73.3f * (1.0f + 0.25f * sr_sym(r)));
            for (int j = 0; j < 32; j++) blk[2 + j] = (uint8_t)(int8_t)((int)(sr_next(r) % 255) - 127);
        }
        return 0;
    case QT_Q4_0: /* codes uniform in [0, 15] minus 8: std 4.61; random sign on d removes the -0.5 bias */
        for (uint64_t b = 0; b < n / 32; b++) {
            uint8_t *blk = out + 18 * b;
            uint64_t bits = sr_next(r);
            float d = std / 4.61f * (1.0f + 0.25f * sr_sym(r));
            quant_put_f16(blk, (bits & 1) ? -d : d);
            uint64_t q0 = sr_next(r), q1 = sr_next(r);
            memcpy(blk + 2, &q0, 8);
            memcpy(blk + 10, &q1, 8);
        }
        return 0;
    case QT_Q4_K: /* codes uniform in [0, 15], 6-bit scales and mins uniform: with dmin = 7.5 d a
                     value d (sc q - 7.5 m) has mean 0 and std 257 d; random sign on d */
    case QT_Q5_K: /* the same with 5-bit codes: dmin = 15.5 d, std 525 d */
        for (uint64_t b = 0; b < n / 256; b++) {
            const int q5 = type == QT_Q5_K, bytes = (int)quant_type_size(type);
            uint8_t *blk = out + bytes * b;
            const uint64_t bits = sr_next(r);
            float d = std / (q5 ? 525.0f : 257.0f) * (1.0f + 0.25f * sr_sym(r));
            if (bits & 1) d = -d;
            quant_put_f16(blk, d);
            quant_put_f16(blk + 2, d * (q5 ? 15.5f : 7.5f));
            for (int j = 4; j < bytes; j += 4) {
                const uint32_t q = (uint32_t)sr_next(r);
                memcpy(blk + j, &q, 4);
            }
        }
        return 0;
    case QT_Q6_K: /* codes uniform in [-32, 31] (std 18.5), scales in [-64, 63] (std 37) */
        for (uint64_t b = 0; b < n / 256; b++) {
            uint8_t *blk = out + 210 * b;
            for (int j = 0; j < 192; j += 8) {
                uint64_t q = sr_next(r);
                memcpy(blk + j, &q, 8);
            }
            for (int j = 0; j < 16; j++) blk[192 + j] = (uint8_t)(int8_t)((int)(sr_next(r) % 128) - 64);
            quant_put_f16(blk + 208, std / (18.5f * 37.0f) * (1.0f + 0.25f * sr_sym(r)));
        }
        return 0;
    default:
        return -1;
    }
}

int sr_threads(int want) {
    int n = want > 0 ? want : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1) n = 1;
    return n > SR_MAX_THREADS ? SR_MAX_THREADS : n;
}

typedef struct {
    const sr_tensor *t;
    uint64_t row0, rows;
    uint8_t *out;
    int rc;
} job;

static void *run_job(void *arg) {
    job *j = arg;
    j->rc = j->t->fill(j->t->ctx, j->row0, j->rows, j->out);
    return NULL;
}

int sr_fill(const sr_tensor *t, uint64_t row0, uint64_t n, uint8_t *out, int threads) {
    pthread_t tid[SR_MAX_THREADS];
    job jobs[SR_MAX_THREADS];
    int started[SR_MAX_THREADS];
    if (threads > SR_MAX_THREADS) threads = SR_MAX_THREADS;
    int nj = (uint64_t)threads > n ? (int)n : threads;
    if (nj < 1) nj = 1;
    uint64_t per = n / (uint64_t)nj, extra = n % (uint64_t)nj, at = row0;
    for (int i = 0; i < nj; i++) {
        uint64_t k = per + ((uint64_t)i < extra);
        jobs[i] = (job){t, at, k, out + (at - row0) * t->row_bytes, 0};
        at += k;
        started[i] = nj > 1 && pthread_create(&tid[i], NULL, run_job, &jobs[i]) == 0;
        if (!started[i]) run_job(&jobs[i]); /* one worker, or no thread available: do it here */
    }
    int rc = 0;
    for (int i = 0; i < nj; i++) {
        if (started[i]) pthread_join(tid[i], NULL);
        rc |= jobs[i].rc;
    }
    return rc;
}

int sr_write(sr_out *o, const sr_tensor *t, gem_err *err) {
    uint64_t per = o->chunk_bytes / t->row_bytes;
    if (per == 0) per = 1;
    for (uint64_t r = 0; r < t->rows; r += per) {
        const uint64_t k = t->rows - r < per ? t->rows - r : per;
        uint8_t *dst = o->buf, *big = NULL;
        if (k * t->row_bytes > o->chunk_bytes) { /* a single row larger than a chunk */
            if (!(big = malloc(k * t->row_bytes))) return gem_err_set(err, "out of memory");
            dst = big;
        }
        int rc = sr_fill(t, r, k, dst, o->threads);
        if (rc) gem_err_set(err, "synth: cannot quantize %s", t->name);
        else if ((rc = gguf_writer_data(o->w, o->fp, dst, k * t->row_bytes, err))) gem_err_wrap(err, "%s", o->path);
        free(big);
        if (rc) return -1;
        o->done += k * t->row_bytes;
        if (o->progress) o->progress(o->done, o->total, o->progress_ctx);
    }
    return 0;
}

int sr_begin(sr_out *o, gguf_writer *w, const char *path, uint64_t chunk_bytes, int threads, uint64_t total,
             void (*progress)(uint64_t done, uint64_t total, void *ctx), void *progress_ctx, gem_err *err) {
    *o = (sr_out){w, NULL, path, NULL, chunk_bytes, sr_threads(threads), 0, total, progress, progress_ctx};
    if (!(o->fp = file_create(path, err)) || gguf_writer_begin(w, o->fp, err)) return -1;
    if (!(o->buf = malloc(chunk_bytes))) return gem_err_set(err, "out of memory");
    return 0;
}

int sr_end(sr_out *o, int rc, gem_err *err) {
    if (!rc && gguf_writer_finish(o->w, o->fp, err)) rc = -1;
    rc = file_close_output(o->fp, o->path, rc, err);
    free(o->buf);
    *o = (sr_out){0};
    return rc;
}
