/* CPU backend (see backend/backend.h).
 *
 * Two paths share this file. The reference path (`--cpu-ref`) is plain
 * scalar loops on one thread with f32 accumulation in index order: it is
 * the oracle every other kernel is compared with, so it favours obvious
 * code over speed. The fast path runs the same arithmetic split across a
 * worker pool (matrix rows, attention heads); faster kernels replace parts
 * of it only when they match the reference within a stated tolerance.
 * Weights are views into the mmapped GGUF: nothing is copied. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backend/cpu/cpu.h"
#include "backend/cpu/hybrid.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/pool.h"
#include "quant/quant.h"
#include "util/argmax.h"

struct be_buf {
    float *p;
    size_t n;
};

struct be_weight {
    const uint8_t *data;
    uint32_t type;
    int64_t ne0, ne1;
    uint64_t row_bytes;
    /* q8_0/q4_0 and the k-quants on the AVX512-VNNI kernels: the matrix
     * packed into panels at load (kernels.h: q_panels, KERNELS_KWORDS;
     * packed_mem owns it), which the products and row lookups read (data
     * stays: the fallbacks when scratch cannot be allocated) */
    q_panels packed;
    const uint32_t *kwords;
    void *packed_mem;
};

struct be_kv {
    float *k, *v; /* [capacity][n_kv_head][head_dim] */
    int n_kv_head, head_dim, capacity, ring;
};

typedef struct {
    backend base;
    cpu_pool *pool;
    int reference;
    int gelu_fp16;
    cpu_kernels k;
    act_q8 act; /* quantized-activation scratch (one matmul at a time) */
    size_t act_cap;
    act_q8k act_k; /* the same for k-quant weights (256-value blocks) */
    size_t act_k_cap;
    be_buf up; /* matmul_geglu's up projection */
    size_t up_cap;
} cpu_backend;

static cpu_backend *cpu_of(backend *b) { return (cpu_backend *)b; }

/* ---- memory ---- */

/* One slice of rows of a packing (cpu_weight_pack), on the pool. */
typedef struct {
    const cpu_backend *c;
    const be_weight *w;
    int mapped, q4, kq;
    size_t nb, per;
    uint8_t *codes;
    uint16_t *scales;
    int64_t slice;
} pack_job;

static void pack_task(void *ctx, int i) {
    const pack_job *j = ctx;
    const be_weight *w = j->w;
    const int64_t r0 = (int64_t)i * j->slice, nr = w->ne1 - r0 < j->slice ? w->ne1 - r0 : j->slice;
    const size_t p0 = (size_t)(r0 / 16);
    const uint8_t *src = w->data + (uint64_t)r0 * w->row_bytes;
    if (j->kq)
        kernels_kpack(src, w->row_bytes, nr, (int64_t)j->nb, (uint32_t)j->kq, (uint32_t *)(j->codes + p0 * j->nb * j->per));
    else
        (j->q4 ? j->c->k.q4_0_pack : j->c->k.q8_0_pack)(src, w->row_bytes, nr, (int64_t)j->nb,
                                                         j->codes + p0 * j->nb * j->per, j->scales + p0 * j->nb * 16);
    if (j->mapped) { /* whole pages within the slice */
        const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
        const uintptr_t a = (uintptr_t)src, e = a + (uint64_t)nr * w->row_bytes;
        const uintptr_t a0 = (a + pg - 1) / pg * pg, e0 = e / pg * pg;
        if (e0 > a0) (void)madvise((void *)a0, e0 - a0, MADV_DONTNEED);
    }
}

/* Packs a q8_0/q4_0 or k-quant matrix for the VNNI products (the backend
 * has their packed kernels). The copy replaces the file's pages as what the
 * products and row lookups read: those of a mapped file are released from
 * this process (MADV_DONTNEED: read again from the file if a fallback
 * needs them) slice by slice as they are packed, so the resident memory
 * stays about the file's and its peak the copy plus the slices in flight.
 * A matrix that cannot be packed (no memory) keeps the unpacked kernels. */
static void cpu_weight_pack(const cpu_backend *c, be_weight *w, const gguf_tensor *t) {
    const int q4 = w->type == QT_Q4_0, q8 = w->type == QT_Q8_0;
    /* k-quants: their block's bytes, the words kernels_kpack groups */
    const int kq = w->type == QT_Q4_K || w->type == QT_Q5_K || w->type == QT_Q6_K ? (int)quant_type_size(w->type) : 0;
    const int have = q4 ? c->k.q4_0_pack && c->k.q4_0_mmp
                   : q8 ? c->k.q8_0_pack && c->k.q8_0_mmp
                        : kq && (w->type == QT_Q4_K ? c->k.q4_k_mmp : w->type == QT_Q5_K ? c->k.q5_k_mmp : c->k.q6_k_mmp);
    const int qk = kq ? 256 : 32;
    if (c->reference || !have || w->ne0 % qk || w->ne1 < 1) return;
    const size_t nb = (size_t)(w->ne0 / qk), panels = (size_t)((w->ne1 + 15) / 16);
    const size_t per = kq ? (size_t)KERNELS_KWORDS(kq) * 64 : (size_t)KERNELS_PANEL_BYTES(q4); /* a panel's block */
    const size_t cbytes = panels * nb * per, sbytes = kq ? 0 : panels * nb * 16 * sizeof(uint16_t);
    void *mem = NULL;
    /* huge pages where the kernel offers them (2 MiB-aligned): fewer
     * faults for a copy written once at load */
    const size_t huge = (size_t)2 << 20, total = cbytes + sbytes;
    if (posix_memalign(&mem, total >= huge ? huge : 64, total)) return;
#ifdef MADV_HUGEPAGE
    if (total >= huge) (void)madvise(mem, total, MADV_HUGEPAGE);
#endif
    /* slices of 512 rows (a multiple of 16) on the pool: the copy's first
     * touch (the kernel zeroing each fresh page) and the regrouping take
     * most of the load time, and spread over the threads */
    pack_job j = {c, w, t->mapped, q4, kq, nb, per, mem, (uint16_t *)((uint8_t *)mem + cbytes), 512};
    pool_run(c->pool, pack_task, &j, (int)((w->ne1 + j.slice - 1) / j.slice));
    if (kq) w->kwords = (const uint32_t *)j.codes;
    else w->packed.codes = j.codes, w->packed.scales = j.scales;
    w->packed_mem = mem;
}

static be_weight *cpu_weight(backend *b, const gguf_tensor *t, gem_err *err) {
    if (!quant_type_supported(t->type)) {
        gem_err_set(err, "tensor '%s': storage type %s has no CPU kernel", t->name, quant_type_name(t->type));
        return NULL;
    }
    be_weight *w = calloc(1, sizeof *w);
    if (!w) {
        gem_err_set(err, "out of memory");
        return NULL;
    }
    w->data = t->data;
    w->type = t->type;
    w->ne0 = (int64_t)t->ne[0];
    w->ne1 = (int64_t)(t->n_elems / t->ne[0]);
    quant_row_bytes(t->type, w->ne0, &w->row_bytes);
    cpu_weight_pack(cpu_of(b), w, t);
    return w;
}

static void cpu_weight_free(backend *b, be_weight *w) {
    (void)b;
    if (w) free(w->packed_mem);
    free(w);
}

static be_buf *cpu_alloc(backend *b, size_t n, gem_err *err) {
    (void)b;
    be_buf *x = calloc(1, sizeof *x);
    if (x) x->p = calloc(n ? n : 1, sizeof(float));
    if (!x || !x->p) {
        if (x) free(x);
        gem_err_set(err, "out of memory allocating %zu floats", n);
        return NULL;
    }
    x->n = n;
    return x;
}

static void cpu_buf_free(backend *b, be_buf *x) {
    (void)b;
    if (!x) return;
    free(x->p);
    free(x);
}

static void cpu_upload(backend *b, be_buf *dst, size_t off, const float *src, size_t n) {
    (void)b;
    memcpy(dst->p + off, src, n * sizeof(float));
}

static void cpu_download(backend *b, const be_buf *src, size_t off, float *dst, size_t n) {
    (void)b;
    memcpy(dst, src->p + off, n * sizeof(float));
}

static void cpu_copy(backend *b, const be_buf *src, size_t so, be_buf *dst, size_t d, size_t n) {
    (void)b;
    memmove(dst->p + d, src->p + so, n * sizeof(float));
}

static void cpu_sync(backend *b) { (void)b; }

/* ---- elementwise ---- */

/* Row r of a matrix in the file's layout: the mapping's bytes, or for a
 * packed matrix its bytes put back together in buf (row_bytes), so row
 * lookups (embeddings, tied to the output head) do not fault the released
 * file pages back in. */
static const uint8_t *cpu_row(const be_weight *w, int64_t r, uint8_t *buf) {
    const int64_t p = r / 16, l = r % 16;
    if (w->kwords) {
        const uint32_t bb = quant_type_size(w->type), kw = KERNELS_KWORDS(bb);
        const int64_t nb = w->ne0 / 256;
        for (int64_t b = 0; b < nb; b++)
            for (uint32_t i = 0; i < kw; i++) {
                const uint32_t v = w->kwords[((size_t)(p * nb + b) * kw + i) * 16 + (size_t)l];
                memcpy(buf + (size_t)b * bb + 4 * i, &v, bb - 4 * i < 4 ? bb - 4 * i : 4);
            }
        return buf;
    }
    if (w->packed.codes) {
        const int q4 = w->type == QT_Q4_0, bytes = (int)quant_type_size(w->type), cb = KERNELS_PANEL_BYTES(q4);
        const int64_t nb = w->ne0 / 32;
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *blk = buf + (size_t)b * bytes;
            const uint8_t *pc = w->packed.codes + (size_t)(p * nb + b) * cb;
            memcpy(blk, w->packed.scales + (size_t)(p * nb + b) * 16 + l, 2);
            for (int g = 0; g < cb / 64; g++) /* group g: the row's 4 bytes in lane l */
                for (int k = 0; k < 4; k++) blk[2 + 4 * g + k] = (uint8_t)(pc[64 * g + 4 * l + k] ^ (q4 ? 0 : 0x80));
        }
        return buf;
    }
    return w->data + (uint64_t)r * w->row_bytes;
}

static void cpu_embed(backend *b, const be_weight *E, const int32_t *ids, int n, float scale, be_buf *out) {
    (void)b;
    uint8_t *buf = E->packed_mem ? malloc(E->row_bytes) : NULL;
    if (E->packed_mem && !buf) { /* no memory for a row: the mapping's bytes (re-read from the file) */
        be_weight plain = *E;
        plain.packed.codes = NULL, plain.kwords = NULL, plain.packed_mem = NULL;
        cpu_embed(b, &plain, ids, n, scale, out);
        return;
    }
    for (int i = 0; i < n; i++) {
        float *row = out->p + (size_t)i * (size_t)E->ne0;
        quant_dequant_row(E->type, cpu_row(E, ids[i], buf), row, E->ne0);
        for (int64_t k = 0; k < E->ne0; k++) row[k] *= scale;
    }
    free(buf);
}

static const float *vec_f32(const be_weight *w) { return (const float *)w->data; }

static void rms_row(const float *x, const float *w, int d, float eps, float *out) {
    float ss = 0;
    for (int k = 0; k < d; k++) ss += x[k] * x[k];
    const float r = 1.0f / sqrtf(ss / (float)d + eps);
    for (int k = 0; k < d; k++) out[k] = w ? x[k] * r * w[k] : x[k] * r;
}

static void cpu_rmsnorm(backend *b, const be_buf *x, const be_weight *w, int rows, int d, float eps, be_buf *out) {
    (void)b;
    const float *wv = w ? vec_f32(w) : NULL;
    for (int r = 0; r < rows; r++) rms_row(x->p + (size_t)r * d, wv, d, eps, out->p + (size_t)r * d);
}

static void cpu_add_rmsnorm(backend *b, be_buf *h, const be_buf *x, const be_weight *w, int rows, int d, float eps,
                            const be_weight *sw) {
    (void)b;
    const float *wv = vec_f32(w);
    const float sv = sw ? vec_f32(sw)[0] : 1.0f;
    for (int r = 0; r < rows; r++) {
        const float *xr = x->p + (size_t)r * d;
        float *hr = h->p + (size_t)r * d;
        float ss = 0;
        for (int k = 0; k < d; k++) ss += xr[k] * xr[k];
        const float s = 1.0f / sqrtf(ss / (float)d + eps);
        for (int k = 0; k < d; k++) hr[k] += xr[k] * s * wv[k];
        if (sw)
            for (int k = 0; k < d; k++) hr[k] *= sv;
    }
}

/* The reference's table GELU (see backend_opts.gelu_fp16). */
static float gelu_fp16_table(float x) {
    if (x <= -10.0f) return 0.0f;
    if (x >= 10.0f) return x;
    return quant_f16_to_f32(quant_f32_to_f16(kernels_gelu_tanh(quant_f16_to_f32(quant_f32_to_f16(x)))));
}

static void cpu_geglu(backend *b, const be_buf *gate, const be_buf *up, size_t n, be_buf *out) {
    if (cpu_of(b)->gelu_fp16)
        for (size_t i = 0; i < n; i++) out->p[i] = gelu_fp16_table(gate->p[i]) * up->p[i];
    else
        cpu_of(b)->k.geglu(gate->p, up->p, out->p, (int64_t)n);
}

static void cpu_scale(backend *b, be_buf *x, size_t n, const be_weight *s) {
    (void)b;
    const float v = vec_f32(s)[0];
    for (size_t i = 0; i < n; i++) x->p[i] *= v;
}

static void cpu_softcap(backend *b, be_buf *x, size_t n, float cap) { cpu_of(b)->k.softcap(x->p, (int64_t)n, cap); }

/* The angle of pair j is computed as the reference does: theta_scale =
 * base^(-2/n_rot) raised by repeated multiplication in f32, divided by the
 * frequency factor. */
static void cpu_rope(backend *b, be_buf *x, int n, int heads, int d, int n_rot, int pos0, float base,
                     const be_weight *ff) {
    (void)b;
    const float theta_scale = powf(base, -2.0f / (float)n_rot);
    const float *f = ff ? vec_f32(ff) : NULL;
    const int half = n_rot / 2;
    float *cs = malloc(sizeof(float) * (size_t)n_rot);
    if (!cs) return;
    for (int i = 0; i < n; i++) {
        float theta = (float)(pos0 + i);
        for (int j = 0; j < half; j++) {
            float t = f ? theta / f[j] : theta;
            cs[2 * j] = cosf(t);
            cs[2 * j + 1] = sinf(t);
            theta *= theta_scale;
        }
        for (int h = 0; h < heads; h++) {
            float *v = x->p + ((size_t)i * heads + h) * d;
            for (int j = 0; j < half; j++) {
                const float x0 = v[j], x1 = v[j + half];
                v[j] = x0 * cs[2 * j] - x1 * cs[2 * j + 1];
                v[j + half] = x0 * cs[2 * j + 1] + x1 * cs[2 * j];
            }
        }
    }
    free(cs);
}

/* ---- matmul ---- */

typedef struct {
    const be_weight *W;
    const float *x;
    float *out;
    int n;
    int64_t rows_per_task;
    dot_fn fused; /* a kernel that reads the stored row directly, or NULL */
    dot_f32_fn dot;
    dot_q8_fn q8;  /* integer kernel on quantized activations, or NULL */
    mm_q8_fn mm;   /* its multi-row form for every tile size, or NULL */
    mm_packed_fn mmp; /* the same on the matrix packed at load, or NULL */
    const act_q8 *xq;
    dot_q8k_fn q8k; /* k-quant kernel on act_q8k activations, or NULL */
    mm_q8k_fn mmk;  /* its multi-row form for every tile size, or NULL */
    mm_kpacked_fn mmkp; /* the same on the matrix packed at load, or NULL */
    const act_q8k *xk;
} mm_job;

/* Rows [r0, r1) of out for every token: stored rows are read once per row
 * and stay in cache across the tokens of a tile. */
static void mm_task(void *ctx, int t) {
    const mm_job *j = ctx;
    const be_weight *W = j->W;
    const int64_t in = W->ne0;
    int64_t r0 = (int64_t)t * j->rows_per_task;
    int64_t r1 = r0 + j->rows_per_task;
    if (r1 > W->ne1) r1 = W->ne1;
    if (j->mmp) { /* r0 is a multiple of 16 (whole panels per task) */
        j->mmp(&W->packed, r0 / 16, r1 - r0, j->xq, in / 32, j->n, j->out + r0, (size_t)W->ne1);
        return;
    }
    if (j->mm) { /* one token and a tile alike: the same bits per token (kernels.h) */
        j->mm(W->data + (uint64_t)r0 * W->row_bytes, W->row_bytes, r1 - r0, j->xq, in / 32, j->n, j->out + r0,
              (size_t)W->ne1);
        return;
    }
    if (j->mmkp) { /* r0 is a multiple of 16 (whole panels per task) */
        j->mmkp(W->kwords, r0 / 16, r1 - r0, j->xk, in / 256, j->n, j->out + r0, (size_t)W->ne1);
        return;
    }
    if (j->mmk) {
        j->mmk(W->data + (uint64_t)r0 * W->row_bytes, W->row_bytes, r1 - r0, j->xk, in / 256, j->n, j->out + r0,
               (size_t)W->ne1);
        return;
    }
    const int direct = j->fused || j->q8 || j->q8k; /* reads the stored row itself */
    float *row = direct ? NULL : malloc(sizeof(float) * (size_t)in);
    if (!direct && !row) return;
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *src = W->data + (uint64_t)r * W->row_bytes;
        if (row) quant_dequant_row(W->type, src, row, in);
        for (int i = 0; i < j->n; i++) {
            const float *xi = j->x + (size_t)i * (size_t)in;
            float v;
            if (j->q8k) v = j->q8k(src, j->xk, (int64_t)i * (in / 256), in);
            else if (j->q8) v = j->q8(src, j->xq, (int64_t)i * (in / 32), in);
            else if (j->fused) v = j->fused(src, xi, in);
            else v = j->dot(row, xi, in);
            j->out[(size_t)i * (size_t)W->ne1 + (size_t)r] = v;
        }
    }
    free(row);
}

/* Quantizes the n tokens of x (ne0 values each) for the k-quant kernels
 * into the backend's scratch (grown to the largest tile seen and reused)
 * and points the job at it; 0 when the scratch cannot be allocated. */
static int prep_act_k(cpu_backend *c, const be_buf *x, int64_t ne0, int n, mm_job *j) {
    const size_t blocks = (size_t)n * (size_t)(ne0 / 256);
    if (blocks > c->act_k_cap) {
        free(c->act_k.d);
        free(c->act_k.q);
        free(c->act_k.bs);
        c->act_k.d = malloc(blocks * sizeof(float));
        c->act_k.q = malloc(blocks * 256);
        c->act_k.bs = malloc(blocks * 16 * sizeof(int16_t));
        c->act_k_cap = c->act_k.d && c->act_k.q && c->act_k.bs ? blocks : 0;
    }
    if (c->act_k_cap < blocks) return 0;
    for (int i = 0; i < n; i++)
        c->k.quantize_act_k(x->p + (size_t)i * (size_t)ne0, ne0, &c->act_k, (int64_t)i * (ne0 / 256));
    j->xk = &c->act_k;
    return 1;
}

static void cpu_matmul(backend *b, const be_weight *W, const be_buf *x, int n, be_buf *out) {
    cpu_backend *c = cpu_of(b);
    mm_job j = {W, x->p, out->p, n, 0, NULL, c->k.dot, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    switch (W->type) {
    case QT_Q8_0: j.fused = c->k.q8_0; j.q8 = c->k.q8_0_q8; j.mm = c->k.q8_0_mm; j.mmp = c->k.q8_0_mmp; break;
    case QT_Q4_0: j.fused = c->k.q4_0; j.q8 = c->k.q4_0_q8; j.mm = c->k.q4_0_mm; j.mmp = c->k.q4_0_mmp; break;
    case QT_F16: j.fused = c->k.f16; break;
    case QT_F32: j.fused = c->k.f32; break;
    /* k-quants: integer kernels on the fast path; the reference path
     * dequantizes each row and takes the f32 dot (the oracle) */
    case QT_Q4_K: j.q8k = c->k.q4_k_q8k; j.mmk = c->k.q4_k_mm; j.mmkp = c->k.q4_k_mmp; break;
    case QT_Q5_K: j.q8k = c->k.q5_k_q8k; j.mmk = c->k.q5_k_mm; j.mmkp = c->k.q5_k_mmp; break;
    case QT_Q6_K: j.q8k = c->k.q6_k_q8k; j.mmk = c->k.q6_k_mm; j.mmkp = c->k.q6_k_mmp; break;
    default: break;
    }
    if (c->reference || (j.q8k && !prep_act_k(c, x, W->ne0, n, &j))) j.q8k = NULL, j.mmk = NULL, j.mmkp = NULL; /* the f32 path */
    if (!W->kwords) j.mmkp = NULL;
    /* the multi-row kernels gather the rows' scales with 32-bit offsets */
    if (W->row_bytes > (uint64_t)INT32_MAX / 16) j.mm = NULL, j.mmk = NULL;
    if (!W->packed.codes) j.mmp = NULL;
    act_q8 xq = {0};
    if (j.q8) {
        /* quantize the activations once per call (scratch grows to the
         * largest tile seen and is reused) */
        size_t blocks = (size_t)n * (size_t)(W->ne0 / 32);
        if (blocks > c->act_cap) {
            free(c->act.d);
            free(c->act.q);
            free(c->act.s);
            c->act.d = malloc(blocks * sizeof(float));
            c->act.q = malloc(blocks * 32);
            c->act.s = malloc(blocks * sizeof(int32_t));
            c->act_cap = c->act.d && c->act.q && c->act.s ? blocks : 0;
        }
        if (c->act_cap >= blocks) {
            for (int i = 0; i < n; i++)
                c->k.quantize_act(x->p + (size_t)i * (size_t)W->ne0, W->ne0, &c->act, (int64_t)i * (W->ne0 / 32));
            xq = c->act;
            j.xq = &xq;
        } else {
            j.q8 = NULL; /* no memory for the scratch: the f32 path still works */
            j.mm = NULL, j.mmp = NULL;
        }
    } else {
        j.mm = NULL, j.mmp = NULL;
    }
    int tasks = c->reference ? 1 : pool_threads(c->pool) * 8;
    if (tasks > W->ne1) tasks = (int)W->ne1;
    j.rows_per_task = (W->ne1 + tasks - 1) / tasks;
    if (j.mm || j.mmp || j.mmk || j.mmkp) j.rows_per_task = (j.rows_per_task + 15) / 16 * 16; /* whole sixteen-row panels per task */
    tasks = (int)((W->ne1 + j.rows_per_task - 1) / j.rows_per_task);
    if (c->reference) mm_task(&j, 0);
    else pool_run(c->pool, mm_task, &j, tasks);
}

static void cpu_matmul_multi(backend *b, int count, const be_weight *const *W, const be_buf *x, int n,
                             be_buf *const *out) {
    for (int i = 0; i < count; i++) cpu_matmul(b, W[i], x, n, out[i]);
}

static void cpu_matmul_geglu(backend *b, const be_weight *Wg, const be_weight *Wu, const be_buf *x, int n, be_buf *out) {
    cpu_backend *c = cpu_of(b);
    const size_t len = (size_t)n * (size_t)Wu->ne1;
    if (len > c->up_cap) { /* the up projection's scratch grows to the largest tile */
        free(c->up.p);
        c->up.p = malloc(len * sizeof(float));
        c->up_cap = c->up.p ? len : 0;
        c->up.n = c->up_cap;
    }
    if (!c->up.p) { /* no memory: nothing sensible to compute; zeros make the failure visible */
        memset(out->p, 0, len * sizeof(float));
        return;
    }
    cpu_matmul(b, Wg, x, n, out);
    cpu_matmul(b, Wu, x, n, &c->up);
    cpu_geglu(b, out, &c->up, len, out); /* elementwise: in place is safe */
}

static void cpu_rmsnorm_rope(backend *b, be_buf *x, const be_weight *w, int n, int heads, int d, float eps, int pos0,
                             float theta, const be_weight *ff) {
    cpu_rmsnorm(b, x, w, n * heads, d, eps, x);
    cpu_rope(b, x, n, heads, d, d, pos0, theta, ff);
}

/* ---- KV cache and attention ---- */

/* ---- Gated DeltaNet hybrids (backend.h); the kernels are in hybrid.c ---- */

/* Rows [t * rows_per, ...) of an elementwise op over `rows` rows on the
 * pool (one task on the reference path): each row is computed alone, so
 * both paths give the same bits. */
typedef struct {
    void (*fn)(void *ctx, int r0, int r1);
    void *ctx;
    int rows, per;
} rows_job;

static void rows_task(void *ctx, int t) {
    const rows_job *j = ctx;
    const int r0 = t * j->per, r1 = r0 + j->per < j->rows ? r0 + j->per : j->rows;
    if (r0 < r1) j->fn(j->ctx, r0, r1);
}

static void run_rows(cpu_backend *c, void (*fn)(void *, int, int), void *ctx, int rows) {
    if (rows <= 0) return;
    const int tasks = c->reference ? 1 : pool_threads(c->pool) * 4;
    rows_job j = {fn, ctx, rows, (rows + tasks - 1) / tasks};
    if (c->reference) fn(ctx, 0, rows);
    else pool_run(c->pool, rows_task, &j, (rows + j.per - 1) / j.per);
}

typedef struct {
    const float *x, *w;
    float *state, *out;
    int n, ch;
} conv_job;

static void conv_rows(void *ctx, int c0, int c1) {
    const conv_job *j = ctx;
    hyb_conv_silu(j->x, j->state, j->w, j->n, j->ch, c0, c1, j->out);
}

static void cpu_conv_silu(backend *b, const be_buf *x, be_buf *state, const be_weight *w, int n, int ch, be_buf *out) {
    conv_job j = {x->p, vec_f32(w), state->p, out->p, n, ch};
    run_rows(cpu_of(b), conv_rows, &j, ch); /* channels are independent */
}

typedef struct {
    float *x;
    int heads, d, stride;
    float eps;
} l2_job;

static void l2_rows(void *ctx, int r0, int r1) {
    const l2_job *j = ctx;
    for (int r = r0; r < r1; r++) {
        float *v = j->x + (size_t)(r / j->heads) * j->stride + (size_t)(r % j->heads) * j->d;
        float ss = 0;
        for (int e = 0; e < j->d; e++) ss += v[e] * v[e];
        const float s = 1.0f / sqrtf(ss + j->eps);
        for (int e = 0; e < j->d; e++) v[e] *= s;
    }
}

static void cpu_l2norm(backend *b, be_buf *x, int n, int heads, int d, int stride, float eps) {
    l2_job j = {x->p, heads, d, stride, eps};
    run_rows(cpu_of(b), l2_rows, &j, n * heads);
}

typedef struct {
    hyb_gdn g;
    int chunked;
} gdn_job;

static void gdn_task(void *ctx, int h) {
    const gdn_job *j = ctx;
    if (!j->chunked) {
        hyb_gdn_recurrent(&j->g, h);
        return;
    }
    float *scratch = malloc(hyb_gdn_scratch(j->g.d) * sizeof(float));
    if (!scratch) { /* no memory for the chunk: the definition needs none */
        hyb_gdn_recurrent(&j->g, h);
        return;
    }
    hyb_gdn_chunked(&j->g, h, scratch);
    free(scratch);
}

/* Heads are independent: one task each. A tile of more than BE_EXACT_ROWS
 * tokens takes the chunked form on the fast path (its intra-chunk work is
 * matrix-shaped); smaller ones the recurrence, so that rows stay exact. */
static void cpu_gated_delta(backend *b, const be_buf *qkv, const be_buf *alpha, const be_buf *beta, const be_weight *a,
                            const be_weight *dt, be_buf *state, int n, int n_k, int n_v, int d, be_buf *out) {
    cpu_backend *c = cpu_of(b);
    gdn_job j = {{qkv->p, alpha->p, beta->p, vec_f32(a), vec_f32(dt), state->p, out->p, n, n_k, n_v, d, c->k.dot,
                  c->k.axpy},
                 !c->reference && n > BE_EXACT_ROWS};
    if (c->reference)
        for (int h = 0; h < n_v; h++) gdn_task(&j, h);
    else
        pool_run(c->pool, gdn_task, &j, n_v);
}

typedef struct {
    const float *x, *z, *w;
    float *out;
    int d;
    float eps;
} gnorm_job;

static void gnorm_rows(void *ctx, int r0, int r1) {
    const gnorm_job *j = ctx;
    for (int r = r0; r < r1; r++) {
        const float *x = j->x + (size_t)r * j->d, *z = j->z + (size_t)r * j->d;
        float *o = j->out + (size_t)r * j->d;
        rms_row(x, j->w, j->d, j->eps, o);
        for (int e = 0; e < j->d; e++) o[e] *= hyb_silu(z[e]);
    }
}

static void cpu_rmsnorm_gated(backend *b, const be_buf *x, const be_buf *z, const be_weight *w, int rows, int d,
                              float eps, be_buf *out) {
    gnorm_job j = {x->p, z->p, vec_f32(w), out->p, d, eps};
    run_rows(cpu_of(b), gnorm_rows, &j, rows);
}

typedef struct {
    const float *qg;
    float *x;
    int d;
} gate_job;

static void split_rows(void *ctx, int r0, int r1) {
    const gate_job *j = ctx;
    for (int r = r0; r < r1; r++) memcpy(j->x + (size_t)r * j->d, j->qg + (size_t)r * 2 * j->d, sizeof(float) * j->d);
}

static void gate_rows(void *ctx, int r0, int r1) {
    const gate_job *j = ctx;
    for (int r = r0; r < r1; r++) {
        const float *g = j->qg + (size_t)r * 2 * j->d + j->d;
        float *x = j->x + (size_t)r * j->d;
        for (int e = 0; e < j->d; e++) x[e] *= hyb_sigmoid(g[e]);
    }
}

static void cpu_split_q(backend *b, const be_buf *qg, int n, int heads, int d, be_buf *q) {
    gate_job j = {qg->p, q->p, d};
    run_rows(cpu_of(b), split_rows, &j, n * heads);
}

static void cpu_attn_gate(backend *b, be_buf *x, const be_buf *qg, int n, int heads, int d) {
    gate_job j = {qg->p, x->p, d};
    run_rows(cpu_of(b), gate_rows, &j, n * heads);
}

typedef struct {
    const float *g, *u;
    float *out;
} swiglu_job;

static void swiglu_rows(void *ctx, int i0, int i1) {
    const swiglu_job *j = ctx;
    for (int i = i0; i < i1; i++) j->out[i] = hyb_silu(j->g[i]) * j->u[i];
}

static void cpu_swiglu(backend *b, const be_buf *gate, const be_buf *up, size_t n, be_buf *out) {
    swiglu_job j = {gate->p, up->p, out->p};
    run_rows(cpu_of(b), swiglu_rows, &j, (int)n);
}

static void cpu_add(backend *b, be_buf *x, const be_buf *y, size_t n) {
    (void)b;
    for (size_t i = 0; i < n; i++) x->p[i] += y->p[i];
}

static void cpu_scale_f(backend *b, be_buf *x, size_t n, float s) {
    (void)b;
    for (size_t i = 0; i < n; i++) x->p[i] *= s;
}

static be_kv *cpu_kv_new(backend *b, int n_kv_head, int d, int capacity, int ring, be_kv_type type, gem_err *err) {
    if (type != BE_KV_F32) {
        gem_err_set(err, "backend '%s' keeps its KV caches in f32 (f16 caches are a CUDA option)", b->name);
        return NULL;
    }
    be_kv *kv = calloc(1, sizeof *kv);
    size_t n = (size_t)capacity * n_kv_head * d;
    if (kv) {
        kv->k = calloc(n, sizeof(float));
        kv->v = calloc(n, sizeof(float));
    }
    if (!kv || !kv->k || !kv->v) {
        if (kv) { free(kv->k); free(kv->v); free(kv); }
        gem_err_set(err, "out of memory for a KV cache of %d positions", capacity);
        return NULL;
    }
    kv->n_kv_head = n_kv_head;
    kv->head_dim = d;
    kv->capacity = capacity;
    kv->ring = ring;
    return kv;
}

static void cpu_kv_free(backend *b, be_kv *kv) {
    (void)b;
    if (!kv) return;
    free(kv->k);
    free(kv->v);
    free(kv);
}

static size_t kv_slot(const be_kv *kv, int pos) { return (size_t)(kv->ring ? pos % kv->capacity : pos); }

typedef struct {
    const float *q, *k, *v;
    const be_kv *kv;
    float *out;
    int n, pos0, n_head, n_kv_head, d, window;
    int cached; /* attention_cached: every query at pos0, keys [.., pos0) from the cache only */
    /* attention_seqs: row i is its own sequence's one-token step, at pos[i]
     * over kvs[i] (kv and pos0 unused) */
    const be_kv *const *kvs;
    const int *pos;
    /* the kernels' dot and axpy: the scalar ones (plain loops in order) on
     * the reference path; SIMD on the fast path, where a scalar dependency
     * chain made decode slow down as the context grew */
    dot_f32_fn dot;
    void (*axpy)(float *y, float a, const float *x, int64_t n);
} att_job;

/* One (query, head) pair: scores over the visible keys, softmax, sum of v. */
static void att_task(void *ctx, int t) {
    const att_job *j = ctx;
    const int i = t / j->n_head, h = t % j->n_head, g = h / (j->n_head / j->n_kv_head), d = j->d;
    /* this call's keys start at position pos0 (for a sequence row: its own
     * position, its key the call's row i) */
    const be_kv *kv = j->kvs ? j->kvs[i] : j->kv;
    const int pos0 = j->kvs ? j->pos[i] : j->pos0;
    const float *ck = j->kvs ? j->k + (size_t)i * j->n_kv_head * d : j->k;
    const float *cv = j->kvs ? j->v + (size_t)i * j->n_kv_head * d : j->v;
    const int qp = j->cached || j->kvs ? pos0 : pos0 + i;
    const int first = j->window > 0 && qp - j->window + 1 > 0 ? qp - j->window + 1 : 0;
    const int last = j->cached ? qp - 1 : qp; /* a drafted token's key is not in the cache */
    const int count = last - first + 1;
    const float *q = j->q + ((size_t)i * j->n_head + h) * d;
    float *o = j->out + ((size_t)i * j->n_head + h) * d;
    if (count <= 0) {
        for (int e = 0; e < d; e++) o[e] = 0;
        return;
    }
    float *s = malloc(sizeof(float) * (size_t)count);
    if (!s) return;
    float mx = -INFINITY;
    for (int p = first; p <= last; p++) {
        const float *k = p < pos0 ? kv->k + (kv_slot(kv, p) * j->n_kv_head + g) * d
                                  : ck + ((size_t)(p - pos0) * j->n_kv_head + g) * d;
        const float acc = j->dot(q, k, d);
        s[p - first] = acc;
        if (acc > mx) mx = acc;
    }
    float sum = 0;
    for (int c = 0; c < count; c++) {
        s[c] = expf(s[c] - mx);
        sum += s[c];
    }
    for (int e = 0; e < d; e++) o[e] = 0;
    for (int p = first; p <= last; p++) {
        const float *v = p < pos0 ? kv->v + (kv_slot(kv, p) * j->n_kv_head + g) * d
                                  : cv + ((size_t)(p - pos0) * j->n_kv_head + g) * d;
        j->axpy(o, s[p - first] / sum, v, d);
    }
    free(s);
}

/* Every (query, head) task of j: in order on the reference path, on the
 * thread pool otherwise (each task alone either way). */
static void att_run(cpu_backend *c, att_job *j) {
    if (c->reference) {
        for (int t = 0; t < j->n * j->n_head; t++) att_task(j, t);
    } else {
        pool_run(c->pool, att_task, j, j->n * j->n_head);
    }
}

static void cpu_attention(backend *b, const be_buf *q, const be_buf *k, const be_buf *v, be_kv *kv, int n, int pos0,
                          int n_head, int n_kv_head, int d, int window, be_buf *out) {
    cpu_backend *c = cpu_of(b);
    att_job j = {q->p, k->p, v->p, kv, out->p, n, pos0, n_head, n_kv_head, d, window, 0, NULL, NULL, c->k.dot,
                 c->k.axpy};
    att_run(c, &j);
    /* store this call's keys and values (after all queries read the old ring) */
    const size_t row = (size_t)n_kv_head * d;
    for (int i = 0; i < n; i++) {
        size_t slot = kv_slot(kv, pos0 + i);
        memcpy(kv->k + slot * row, k->p + (size_t)i * row, row * sizeof(float));
        memcpy(kv->v + slot * row, v->p + (size_t)i * row, row * sizeof(float));
    }
}

/* Rows of n sequences (backend.h attention_seqs): the model's one-token
 * path per row (K as V from the raw k, the q/k norms, the weightless v
 * norm, rope at the row's own position, attention), with the row-wise ops
 * run over all rows at once (each row computed alone either way). */
static void cpu_attention_seqs(backend *b, be_buf *q, const be_weight *qw, be_buf *k, const be_weight *kw, be_buf *v,
                               int v_from_k, be_kv *const *kvs, const int *pos, int n, int n_head, int n_kv_head,
                               int d, float eps, float theta, const be_weight *ff, int window, be_buf *out) {
    cpu_backend *c = cpu_of(b);
    const size_t qrow = (size_t)n_head * d, krow = (size_t)n_kv_head * d;
    if (v_from_k) cpu_copy(b, k, 0, v, 0, (size_t)n * krow);
    cpu_rmsnorm(b, q, qw, n * n_head, d, eps, q);
    cpu_rmsnorm(b, k, kw, n * n_kv_head, d, eps, k);
    cpu_rmsnorm(b, v, NULL, n * n_kv_head, d, eps, v);
    for (int i = 0; i < n; i++) {
        be_buf qi = {q->p + (size_t)i * qrow, qrow}, ki = {k->p + (size_t)i * krow, krow};
        cpu_rope(b, &qi, 1, n_head, d, d, pos[i], theta, ff);
        cpu_rope(b, &ki, 1, n_kv_head, d, d, pos[i], theta, ff);
    }
    att_job j = {q->p, k->p, v->p, NULL, out->p, n, 0, n_head, n_kv_head, d, window, 0,
                 (const be_kv *const *)kvs, pos, c->k.dot, c->k.axpy};
    att_run(c, &j);
    for (int i = 0; i < n; i++) {
        const size_t slot = kv_slot(kvs[i], pos[i]);
        memcpy(kvs[i]->k + slot * krow, k->p + (size_t)i * krow, krow * sizeof(float));
        memcpy(kvs[i]->v + slot * krow, v->p + (size_t)i * krow, krow * sizeof(float));
    }
}

static void cpu_attention_cached(backend *b, const be_buf *q, const be_kv *kv, int n, int pos, int n_head,
                                 int n_kv_head, int d, int window, be_buf *out) {
    cpu_backend *c = cpu_of(b);
    att_job j = {q->p, NULL, NULL, kv, out->p, n, pos, n_head, n_kv_head, d, window, 1, NULL, NULL, c->k.dot,
                 c->k.axpy};
    att_run(c, &j);
}

static size_t cpu_kv_bytes(backend *b, const be_kv *kv, int n_pos) {
    (void)b;
    size_t slots = (size_t)(kv->ring ? (n_pos < kv->capacity ? n_pos : kv->capacity) : n_pos);
    return 2 * slots * (size_t)kv->n_kv_head * kv->head_dim * sizeof(float);
}

static void cpu_kv_save(backend *b, const be_kv *kv, int n_pos, void *dst) {
    size_t half = cpu_kv_bytes(b, kv, n_pos) / 2;
    memcpy(dst, kv->k, half);
    memcpy((char *)dst + half, kv->v, half);
}

static void cpu_kv_load(backend *b, be_kv *kv, int n_pos, const void *src) {
    size_t half = cpu_kv_bytes(b, kv, n_pos) / 2;
    memcpy(kv->k, src, half);
    memcpy(kv->v, (const char *)src + half, half);
}

static void cpu_kv_stash(backend *b, const be_kv *kv, int n_pos, be_buf *dst, size_t off) {
    cpu_kv_save(b, kv, n_pos, (char *)dst->p + off);
}

static void cpu_kv_unstash(backend *b, be_kv *kv, int n_pos, const be_buf *src, size_t off) {
    cpu_kv_load(b, kv, n_pos, (const char *)src->p + off);
}

static void cpu_argmax_prob(backend *b, const be_buf *x, int width, be_buf *out) {
    (void)b;
    int32_t best;
    out->p[1] = gem_top1_prob(x->p, width, &best);
    out->p[0] = (float)best;
}

static void cpu_argmax(backend *b, const be_buf *x, int rows, int width, be_buf *out) {
    (void)b;
    for (int r = 0; r < rows; r++) out->p[r] = (float)gem_argmax(x->p + (size_t)r * width, width);
}

/* Before in the sampler's order: larger value, then lower index. */
static int topk_before(float va, int ia, float vb, int ib) { return va > vb || (va == vb && ia < ib); }

/* Places (v, i) at the root of the heap hv/hi[0..n) and sifts it down below
 * worse children (root: the worst kept). */
static void topk_sift_down(float *hv, int *hi, int n, float v, int i) {
    int at = 0;
    for (;;) {
        int c = 2 * at + 1;
        if (c >= n) break;
        if (c + 1 < n && topk_before(hv[c], hi[c], hv[c + 1], hi[c + 1])) c++;
        if (!topk_before(v, i, hv[c], hi[c])) break;
        hv[at] = hv[c], hi[at] = hi[c];
        at = c;
    }
    hv[at] = v, hi[at] = i;
}

/* A min-heap of the k best so far (root: the worst of them), then sorted. */
static void cpu_topk(backend *b, const be_buf *x, int width, int k, be_buf *out) {
    (void)b;
    float hv[BE_TOPK_MAX];
    int hi[BE_TOPK_MAX], n = 0;
    if (k > width) k = width;
    for (int i = 0; i < width; i++) {
        const float v = x->p[i];
        if (n < k) {
            int at = n++;
            while (at > 0 && topk_before(hv[(at - 1) / 2], hi[(at - 1) / 2], v, i)) { /* sift up past better parents */
                hv[at] = hv[(at - 1) / 2], hi[at] = hi[(at - 1) / 2];
                at = (at - 1) / 2;
            }
            hv[at] = v, hi[at] = i;
        } else if (topk_before(v, i, hv[0], hi[0])) {
            topk_sift_down(hv, hi, n, v, i);
        }
    }
    /* heap sort: the worst moves to the end, best first remains */
    for (int m = n - 1; m > 0; m--) {
        const float v = hv[m];
        const int i = hi[m];
        hv[m] = hv[0], hi[m] = hi[0];
        topk_sift_down(hv, hi, m, v, i);
    }
    for (int j = 0; j < n; j++) out->p[j] = hv[j], out->p[n + j] = (float)hi[j];
}

/* Everything runs synchronously on the host: nothing can fail later. */
static int cpu_status(backend *b, gem_err *err) {
    (void)b;
    (void)err;
    return 0;
}

static void cpu_destroy(backend *b) {
    cpu_backend *c = cpu_of(b);
    free(c->act.d);
    free(c->act.q);
    free(c->act.s);
    free(c->act_k.d);
    free(c->act_k.q);
    free(c->act_k.bs);
    free(c->up.p);
    pool_free(c->pool);
    free(c);
}

backend *backend_cpu_create(const backend_opts *o, gem_err *err) {
    cpu_backend *c = calloc(1, sizeof *c);
    if (!c) {
        gem_err_set(err, "out of memory");
        return NULL;
    }
    int threads = o && o->threads > 0 ? o->threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    c->reference = o && o->reference;
    c->gelu_fp16 = o && o->gelu_fp16;
    c->k = kernels_pick(c->reference);
    c->pool = pool_new(c->reference ? 1 : threads);
    if (!c->pool) {
        free(c);
        gem_err_set(err, "cannot start worker threads");
        return NULL;
    }
    backend *b = &c->base;
    b->name = c->reference ? "cpu-ref" : "cpu";
    b->destroy = cpu_destroy;
    b->weight = cpu_weight;
    b->weight_free = cpu_weight_free;
    b->alloc = cpu_alloc;
    b->buf_free = cpu_buf_free;
    b->upload = cpu_upload;
    b->download = cpu_download;
    b->copy = cpu_copy;
    b->sync = cpu_sync;
    b->embed = cpu_embed;
    b->rmsnorm = cpu_rmsnorm;
    b->add_rmsnorm = cpu_add_rmsnorm;
    b->matmul = cpu_matmul;
    b->matmul_geglu = cpu_matmul_geglu;
    b->matmul_multi = cpu_matmul_multi;
    b->rmsnorm_rope = cpu_rmsnorm_rope;
    b->rope = cpu_rope;
    b->geglu = cpu_geglu;
    b->scale = cpu_scale;
    b->softcap = cpu_softcap;
    b->conv_silu = cpu_conv_silu;
    b->l2norm = cpu_l2norm;
    b->gated_delta = cpu_gated_delta;
    b->rmsnorm_gated = cpu_rmsnorm_gated;
    b->split_q = cpu_split_q;
    b->attn_gate = cpu_attn_gate;
    b->swiglu = cpu_swiglu;
    b->add = cpu_add;
    b->scale_f = cpu_scale_f;
    b->kv_new = cpu_kv_new;
    b->kv_f16 = 0; /* f32 entries only: the kernels read float rows */
    /* the scratch that grows lazily: matmul_geglu's up projection (tile x
     * ffn floats: 5.5 MB for the 31B at the CPU's tile of 64) and the
     * quantized activations (a byte per value, and a scale per 32 or a
     * scale and 16 sums per 256 for k-quants) */
    b->work_reserve = (size_t)64 << 20;
    b->kv_free = cpu_kv_free;
    b->attention = cpu_attention;
    b->attention_cached = cpu_attention_cached;
    b->attention_seqs = cpu_attention_seqs;
    b->rows_exact = 1; /* every op computes a row alone (threads split rows, never a row's sum) */
    b->kv_bytes = cpu_kv_bytes;
    b->kv_save = cpu_kv_save;
    b->kv_load = cpu_kv_load;
    b->kv_stash = cpu_kv_stash;
    b->kv_unstash = cpu_kv_unstash;
    b->argmax = cpu_argmax;
    b->argmax_prob = cpu_argmax_prob;
    b->topk = cpu_topk;
    b->status = cpu_status;
    return b;
}
