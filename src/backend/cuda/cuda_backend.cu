/* CUDA backend (see cuda_backend.h and backend/backend.h; internals and
 * invariants in cuda_common.h): weights, buffers, step parameters, graph
 * capture and replay, the switches, and the seam's table. The ops live
 * in files by family, their entry points declared in cuda_ops.h:
 * cuda_elementwise.cu (embed, geglu, scale, softcap), cuda_norm.cu,
 * cuda_rope.cu, cuda_matmul.cu (products), cuda_attn_prefill.cu and
 * cuda_attn_decode.cu (attention, KV caches), cuda_topk.cu (argmax,
 * top-k). */
#include "backend/cuda/cuda_common.h"
#include "backend/cuda/cuda_ops.h"

extern "C" {
#include "util/env.h"
}

/* ------------------------------------------------------------------ */
/* weights                                                             */

/* The largest |scale| of the blocks (as f16 bits; inf and NaN sort above
 * every finite value) into *dmax: it fixes the weight's exponent for k_mm_h. */
__device__ __forceinline__ void scale_max(const uint8_t *raw, int64_t b, int64_t nblk, int bytes, unsigned *dmax) {
    const unsigned bits = b < nblk ? (unsigned)(*(const unsigned short *)(raw + b * bytes) & 0x7FFF) : 0u;
    const unsigned m = __reduce_max_sync(0xffffffffu, bits);
    if ((threadIdx.x & 31) == 0 && m) atomicMax(dmax, m);
}

__global__ void k_repack_q8_0(const uint8_t *raw, int64_t nblk, int8_t *q, __half *d, unsigned *dmax) {
    pdl_wait();
    const int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    scale_max(raw, b, nblk, 34, dmax);
    if (b >= nblk) return;
    const uint8_t *src = raw + b * 34;
    d[b] = *(const __half *)src;
    for (int j = 0; j < 32; j++) q[b * 32 + j] = (int8_t)src[2 + j];
}

__global__ void k_repack_q4_0(const uint8_t *raw, int64_t nblk, uint8_t *q, __half *d, unsigned *dmax) {
    pdl_wait();
    const int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    scale_max(raw, b, nblk, 18, dmax);
    if (b >= nblk) return;
    const uint8_t *src = raw + b * 18;
    d[b] = *(const __half *)src;
    for (int j = 0; j < 16; j++) q[b * 16 + j] = src[2 + j];
}

static void free_weight(be_weight *w) {
    if (!w) return;
    cudaFree(w->q);
    cudaFree(w->d);
    free(w);
}

static int stage_grow(cuda_backend *c, size_t bytes) {
    if (bytes <= c->stage_cap) return 0;
    if (c->stage) CK(c, cudaFree(c->stage));
    c->stage = NULL;
    c->stage_cap = 0;
    if (CK(c, cudaMalloc(&c->stage, bytes))) return -1;
    c->stage_cap = bytes;
    return 0;
}

#define STAGE_BYTES ((size_t)64 << 20)

/* A file's nblk blocks of blk_bytes each through the staging buffer, as
 * many at a time as it holds: repack(b0, nb) launches the kernel that
 * rewrites blocks [b0, b0 + nb) from c->stage into the device layout.
 * *what names the step that failed. */
template <class F>
static cudaError_t staged_repack(cuda_backend *c, const uint8_t *src, int64_t nblk, int64_t blk_bytes, const char **what,
                                 F repack) {
    if (stage_grow(c, STAGE_BYTES)) return cudaErrorMemoryAllocation;
    const int64_t per = (int64_t)(STAGE_BYTES / blk_bytes);
    cudaError_t e = cudaSuccess;
    for (int64_t b0 = 0; e == cudaSuccess && b0 < nblk; b0 += per) {
        const int64_t nb = nblk - b0 < per ? nblk - b0 : per;
        *what = "cudaMemcpy";
        e = cudaMemcpy(c->stage, src + b0 * blk_bytes, (size_t)(nb * blk_bytes), cudaMemcpyHostToDevice);
        if (e != cudaSuccess) break;
        *what = "repack";
        repack(b0, nb);
        if ((e = cudaGetLastError()) == cudaSuccess) e = cudaDeviceSynchronize();
    }
    return e;
}

/* backend.h work_reserve: what the backend takes beyond the weights (whose
 * page rounding cu_weight_bytes counts), the KV plan and the model's
 * buffers. Its scratch grows lazily in powers of two from 4 KiB
 * (cuda_common.h grow); for the 31B at the default tile of 2048: the
 * 8-bit activation codes of the widest product input (2048 x 21504 bytes:
 * 64 MiB) with their scales and sums (2 x 8 MiB), k_mm_h's f16
 * activations (128 MiB), the attention partials of a split-kernel tile
 * (2048 x 32 heads x 512 floats: 256 MiB, with GEM_CUDA_MMA=0 or tiles of
 * under 16; a decode step's 256 splits need 16 MiB), matmul_geglu's
 * unfused up projection (256 MiB), the 64 MiB weight staging buffer, for
 * k-quant files a matrix expanded to f16 (256 MiB at most, KQ_F16_MAX):
 * about 1.05 GiB at most (the README's 31B benchmark left about 0.3 GiB
 * beyond its rounded weights, caches and buffers). Then the caches' own
 * page rounding (at most 2 MiB per allocation, two per layer: 0.23 GiB
 * for the 31B), the recorded graphs, the step buffers, argmax and top-k
 * partials, an MTP verification's 16 rows of logits and its drafter's
 * buffers: held to 1.5 GiB. A larger --tile grows the tile-sized scratch
 * proportionally. */
#define CU_WORK_RESERVE ((size_t)3 << 29)

static be_weight *cu_weight(backend *b, const gguf_tensor *t, gem_err *err) {
    cuda_backend *c = cu_of(b);
    be_weight *w = (be_weight *)calloc(1, sizeof *w);
    if (!w) {
        gem_err_set(err, "out of memory");
        return NULL;
    }
    w->ne0 = (int64_t)t->ne[0];
    w->ne1 = (int64_t)(t->n_elems / t->ne[0]);
    const int64_t n = w->ne0 * w->ne1;
    uint64_t row_bytes = 0;
    quant_row_bytes(t->type, w->ne0, &row_bytes);
    cudaError_t e = cudaSuccess;
    const char *what = "copy";
    if (t->type == QT_F32 || t->type == QT_F16 || t->type == QT_BF16) {
        w->fmt = t->type == QT_F32 ? DW_F32 : t->type == QT_F16 ? DW_F16 : DW_BF16;
        what = "cudaMalloc";
        if ((e = cudaMalloc(&w->q, t->n_bytes)) == cudaSuccess) {
            what = "cudaMemcpy";
            e = cudaMemcpy(w->q, t->data, t->n_bytes, cudaMemcpyHostToDevice);
        }
    } else if ((t->type == QT_Q8_0 || t->type == QT_Q4_0) && w->ne0 % 32 == 0) {
        const int q8 = t->type == QT_Q8_0;
        w->fmt = q8 ? DW_Q8_0 : DW_Q4_0;
        const int64_t nblk = n / 32, blk_bytes = q8 ? 34 : 18;
        what = "cudaMalloc";
        if ((e = cudaMalloc(&w->q, (size_t)nblk * (q8 ? 32 : 16))) == cudaSuccess &&
            (e = cudaMalloc(&w->d, (size_t)nblk * sizeof(__half))) == cudaSuccess) {
            if (!c->dmax) e = cudaMalloc(&c->dmax, sizeof(unsigned));
            if (e == cudaSuccess) e = cudaMemset(c->dmax, 0, sizeof(unsigned));
            if (e == cudaSuccess)
                e = staged_repack(c, (const uint8_t *)t->data, nblk, blk_bytes, &what, [&](int64_t b0, int64_t nb) {
                    if (q8)
                        k_repack_q8_0<<<blocks_for((size_t)nb, 256), 256>>>((const uint8_t *)c->stage, nb,
                                                                             (int8_t *)w->q + b0 * 32, w->d + b0, c->dmax);
                    else
                        k_repack_q4_0<<<blocks_for((size_t)nb, 256), 256>>>((const uint8_t *)c->stage, nb,
                                                                             (uint8_t *)w->q + b0 * 16, w->d + b0, c->dmax);
                });
            unsigned bits = 0;
            if (e == cudaSuccess) e = cudaMemcpy(&bits, c->dmax, sizeof bits, cudaMemcpyDeviceToHost);
            /* |code x scale x 2^we| < 2^15 (|code| <= 128 or 8); no f16
             * path when a scale is inf or NaN */
            if (bits < 0x7C00u) {
                __half_raw hr;
                hr.x = (unsigned short)bits;
                w->hexp = weight_hexp((q8 ? 128.0f : 8.0f) * __half2float(__half(hr)));
            }
        }
    } else if ((t->type == QT_Q4_K || t->type == QT_Q5_K) && w->ne0 % 256 == 0) {
        /* k-quant blocks as stored (cuda_matmul_k.cu) */
        w->fmt = t->type == QT_Q4_K ? DW_Q4_K : DW_Q5_K;
        w->hexp = kq_hexp(t->type, (const uint8_t *)t->data, n / 256);
        what = "cudaMalloc";
        if ((e = cudaMalloc(&w->q, t->n_bytes)) == cudaSuccess) {
            what = "cudaMemcpy";
            e = cudaMemcpy(w->q, t->data, t->n_bytes, cudaMemcpyHostToDevice);
        }
    } else if (t->type == QT_Q6_K && w->ne0 % 256 == 0) {
        /* 208-byte blocks and their scales apart (cuda_matmul_k.cu) */
        w->fmt = DW_Q6_K;
        const int64_t nblk = n / 256;
        w->hexp = kq_hexp(t->type, (const uint8_t *)t->data, nblk);
        what = "cudaMalloc";
        if ((e = cudaMalloc(&w->q, (size_t)nblk * 208)) == cudaSuccess &&
            /* an even count: k_mm_w copies the aligned pair holding a block's scale */
            (e = cudaMalloc(&w->d, (size_t)((nblk + 1) & ~(int64_t)1) * sizeof(__half))) == cudaSuccess) {
            e = staged_repack(c, (const uint8_t *)t->data, nblk, 210, &what, [&](int64_t b0, int64_t nb) {
                k_repack_q6_k<<<blocks_for((size_t)nb, 256), 256>>>((const uint8_t *)c->stage, nb,
                                                                     (uint8_t *)w->q + b0 * 208, w->d + b0);
            });
        }
    } else if (quant_type_supported(t->type)) {
        /* expanded to f16 row by row on the host */
        w->fmt = DW_F16;
        float *row = (float *)malloc(sizeof(float) * (size_t)w->ne0);
        __half *h = (__half *)malloc(sizeof(__half) * (size_t)w->ne0);
        what = "cudaMalloc";
        if (!row || !h) e = cudaErrorMemoryAllocation;
        else e = cudaMalloc(&w->q, (size_t)n * sizeof(__half));
        for (int64_t r = 0; e == cudaSuccess && r < w->ne1; r++) {
            quant_dequant_row(t->type, (const uint8_t *)t->data + (uint64_t)r * row_bytes, row, w->ne0);
            for (int64_t k = 0; k < w->ne0; k++) h[k] = __float2half_rn(row[k]);
            what = "cudaMemcpy";
            e = cudaMemcpy((__half *)w->q + r * w->ne0, h, sizeof(__half) * (size_t)w->ne0, cudaMemcpyHostToDevice);
        }
        free(row);
        free(h);
    } else {
        free(w);
        gem_err_set(err, "tensor '%s': storage type %s has no CUDA kernel", t->name, quant_type_name(t->type));
        return NULL;
    }
    if (e == cudaSuccess) e = cudaDeviceSynchronize(); /* pageable copies may still be in flight */
    if (e != cudaSuccess) {
        gem_err_set(err, "tensor '%s' (%.1f MiB) could not be made resident on the GPU: %s failed: %s", t->name,
                    t->n_bytes / 1048576.0, what, cudaGetErrorString(e));
        free_weight(w);
        return NULL;
    }
    if (kq_format(w->fmt)) c->kq_acts = 1; /* norms may leave k-quant codes (GEM_CUDA_KQ_NORM) */
    return w;
}

static void cu_weight_free(backend *b, be_weight *w) {
    (void)b;
    free_weight(w);
}

/* Device memory an allocation of n bytes takes: the driver maps device
 * memory in 2 MiB pages and gives an allocation of 1 MiB or more pages of
 * its own, while smaller ones share pages. An estimate of the driver's
 * policy, not its contract; with it the 31B Q4_0's 1244 weight allocations
 * come to 17.56 GiB where their bytes are 16.74 GiB, and weights, caches
 * and tile buffers so rounded to 21.82 GiB beside the 22.1 GiB the
 * benchmark measured (README's table, f16 caches at 32961 positions), the
 * rest being scratch. */
static uint64_t cu_pages(uint64_t n) {
    const uint64_t page = (uint64_t)2 << 20;
    return n >= ((uint64_t)1 << 20) ? (n + page - 1) / page * page : n;
}

/* What cu_weight allocates for t, as the device counts it (cu_pages):
 * f32/f16/bf16, q4_k and q5_k as stored; q8_0/q4_0 as codes plus f16
 * scales (the file's bytes split in two allocations), q6_k as 208-byte
 * blocks plus their f16 scales; other types expanded to f16. */
static uint64_t cu_weight_bytes(backend *b, const gguf_tensor *t) {
    (void)b;
    if (t->type == QT_F32 || t->type == QT_F16 || t->type == QT_BF16) return cu_pages(t->n_bytes);
    if ((t->type == QT_Q8_0 || t->type == QT_Q4_0) && t->ne[0] % 32 == 0) {
        const uint64_t nblk = t->n_elems / 32;
        return cu_pages(nblk * (t->type == QT_Q8_0 ? 32 : 16)) + cu_pages(nblk * sizeof(__half));
    }
    if ((t->type == QT_Q4_K || t->type == QT_Q5_K) && t->ne[0] % 256 == 0) return cu_pages(t->n_bytes);
    if (t->type == QT_Q6_K && t->ne[0] % 256 == 0)
        return cu_pages(t->n_elems / 256 * 208) + cu_pages(t->n_elems / 256 * sizeof(__half));
    return cu_pages(t->n_elems * sizeof(__half));
}

/* ------------------------------------------------------------------ */
/* buffers                                                             */

static be_buf *cu_alloc(backend *b, size_t n, gem_err *err) {
    cuda_backend *c = cu_of(b);
    be_buf *x = (be_buf *)calloc(1, sizeof *x);
    if (!x) {
        gem_err_set(err, "out of memory");
        return NULL;
    }
    cudaError_t e = cudaMalloc(&x->d, (n ? n : 1) * sizeof(float));
    if (e == cudaSuccess) e = cudaMemsetAsync(x->d, 0, (n ? n : 1) * sizeof(float), c->st);
    if (e != cudaSuccess) {
        /* a refused allocation is an answer, not a fault: clear it, or the
         * next launch's error check would report it (a checkpoint without
         * room is skipped and generation goes on) */
        (void)cudaGetLastError();
        if (x->d) cudaFree(x->d);
        gem_err_set(err, "cannot allocate %zu floats on the GPU: %s", n, cudaGetErrorString(e));
        free(x);
        return NULL;
    }
    x->n = n;
    return x;
}

static void cu_buf_free(backend *b, be_buf *x) {
    (void)b;
    if (!x) return;
    cudaFree(x->d);
    free(x);
}

static void cu_upload(backend *b, be_buf *dst, size_t off, const float *src, size_t n) {
    cuda_backend *c = cu_of(b);
    c->epoch++;
    CK(c, cudaMemcpyAsync(dst->d + off, src, n * sizeof(float), cudaMemcpyHostToDevice, c->st));
    CK(c, cudaStreamSynchronize(c->st)); /* src may be reused by the caller at once */
}

static void cu_download(backend *b, const be_buf *src, size_t off, float *dst, size_t n) {
    cuda_backend *c = cu_of(b);
    if (CK(c, cudaMemcpyAsync(dst, src->d + off, n * sizeof(float), cudaMemcpyDeviceToHost, c->st)) ||
        CK(c, cudaStreamSynchronize(c->st)))
        memset(dst, 0, n * sizeof(float));
}

static void cu_copy(backend *b, const be_buf *src, size_t so, be_buf *dst, size_t d, size_t n) {
    cuda_backend *c = cu_of(b);
    c->epoch++;
    CK(c, cudaMemcpyAsync(dst->d + d, src->d + so, n * sizeof(float), cudaMemcpyDeviceToDevice, c->st));
}

/* Checkpoints on the device (backend.h kv_stash): the bytes kv_save
 * would download, copied on the stream, so a checkpoint costs a device
 * copy and no wait. */
static void cu_kv_stash(backend *b, const be_kv *kv, int n_pos, be_buf *dst, size_t off) {
    cuda_backend *c = cu_of(b);
    const size_t half = cu_kv_bytes(b, kv, n_pos) / 2;
    char *d = (char *)dst->d + off;
    CK(c, cudaMemcpyAsync(d, kv->k, half, cudaMemcpyDeviceToDevice, c->st));
    CK(c, cudaMemcpyAsync(d + half, kv->v, half, cudaMemcpyDeviceToDevice, c->st));
}

static void cu_kv_unstash(backend *b, be_kv *kv, int n_pos, const be_buf *src, size_t off) {
    cuda_backend *c = cu_of(b);
    const size_t half = cu_kv_bytes(b, kv, n_pos) / 2;
    const char *s = (const char *)src->d + off;
    CK(c, cudaMemcpyAsync(kv->k, s, half, cudaMemcpyDeviceToDevice, c->st));
    CK(c, cudaMemcpyAsync(kv->v, s + half, half, cudaMemcpyDeviceToDevice, c->st));
}

static void cu_sync(backend *b) {
    cuda_backend *c = cu_of(b);
    CK(c, cudaStreamSynchronize(c->st));
}

/* ------------------------------------------------------------------ */
/* step parameters                                                     */

/* Other processes on the GPU can move the free count too; on the benchmark
 * machine the GPU is ours alone. */
static size_t cu_mem_used(backend *b) {
    cuda_backend *c = cu_of(b);
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess || free_b > c->mem_free0) return 0;
    return c->mem_free0 - free_b;
}

static size_t cu_mem_free(backend *b) {
    (void)b;
    size_t free_b = 0, total_b = 0;
    return cudaMemGetInfo(&free_b, &total_b) == cudaSuccess ? free_b : 0;
}

/* The step buffer for a tile of n tokens: row i at pos0 + i, or at pos[i]
 * when pos is given (one-token steps of n sequences: set_step_seqs, whose
 * rows' caches kvs, nkv per row, go to the seq table in the same wait). */
static void step_write(backend *b, const int32_t *ids, int n, int pos0, const int *pos, be_kv *const *kvs, int nkv) {
    cuda_backend *c = cu_of(b);
    if (n > c->step_cap) {
        int cap = c->step_cap ? c->step_cap : 64;
        while (cap < n) cap *= 2;
        CK(c, cudaStreamSynchronize(c->st));
        cudaFree(c->step);
        cudaFreeHost(c->step_host);
        c->step = NULL;
        c->step_host = NULL;
        c->step_rows = NULL;
        c->step_cap = 0;
        const size_t ints = (size_t)cap + 2 + 3 * BE_EXACT_ROWS;
        if (CK(c, cudaMalloc(&c->step, sizeof(int) * ints)) || CK(c, cudaMallocHost(&c->step_host, sizeof(int) * ints)))
            return;
        c->step_cap = cap;
        c->step_rows = c->step + cap + 2;
        c->generation++;
    }
    c->seqs = 0; /* until this step's table is in place */
    const int entries = pos && kvs ? n * nkv : 0;
    if (entries > c->seq_cap) { /* recorded steps hold the table's address: sized once for the most rows */
        const int want = BE_EXACT_ROWS * nkv;
        CK(c, cudaStreamSynchronize(c->st));
        cudaFree(c->seq_tab);
        cudaFreeHost(c->seq_tab_host);
        free(c->seq_of);
        c->seq_tab = c->seq_tab_host = NULL;
        c->seq_of = NULL;
        c->seq_cap = 0;
        if (CK(c, cudaMalloc(&c->seq_tab, sizeof(kv_row) * (size_t)want)) ||
            CK(c, cudaMallocHost(&c->seq_tab_host, sizeof(kv_row) * (size_t)want)))
            return;
        if (!(c->seq_of = (const be_kv **)malloc(sizeof(be_kv *) * (size_t)want))) {
            cu_check(c, cudaErrorMemoryAllocation, "set_step_seqs: the rows' cache table");
            return;
        }
        c->seq_cap = want;
        c->generation++;
    }
    /* the previous step's copies must have left the staging areas before
     * they are rewritten; this waits at most for the tile before the last */
    CK(c, cudaEventSynchronize(c->step_copied));
    c->step_host[0] = pos ? pos[0] : pos0;
    c->step_host[1] = n;
    memcpy(c->step_host + 2, ids, sizeof(int) * (size_t)n);
    size_t ints = (size_t)n + 2;
    if ((n > 1 && n <= BE_EXACT_ROWS) || pos) { /* the rows' own steps (step_rows) */
        int *r = c->step_host + c->step_cap + 2;
        for (int i = 0; i < n; i++) r[3 * i] = pos ? pos[i] : pos0 + i, r[3 * i + 1] = 1, r[3 * i + 2] = ids[i];
        ints = (size_t)c->step_cap + 2 + 3 * (size_t)n;
    }
    CK(c, cudaMemcpyAsync(c->step, c->step_host, sizeof(int) * ints, cudaMemcpyHostToDevice, c->st));
    c->seqs = pos != NULL;
    c->seq_n = n;
    c->seq_nkv = entries ? nkv : 0;
    if (entries) {
        for (int l = 0; l < nkv; l++)
            for (int i = 0; i < n; i++) {
                const be_kv *kv = kvs[(size_t)i * nkv + l];
                c->seq_of[l * n + i] = kv;
                c->seq_tab_host[l * n + i].k = kv->k;
                c->seq_tab_host[l * n + i].v = kv->v;
            }
        CK(c, cudaMemcpyAsync(c->seq_tab, c->seq_tab_host, sizeof(kv_row) * (size_t)entries, cudaMemcpyHostToDevice,
                              c->st));
    }
    CK(c, cudaEventRecord(c->step_copied, c->st));
}

static void cu_set_step(backend *b, const int32_t *ids, int n, int pos0) {
    step_write(b, ids, n, pos0, NULL, NULL, 0);
}

static void cu_set_step_seqs(backend *b, const int32_t *ids, const int *pos, int n, be_kv *const *kvs, int nkv) {
    if (n > BE_EXACT_ROWS) {
        cu_check(cu_of(b), cudaErrorInvalidValue, "set_step_seqs: more rows than BE_EXACT_ROWS");
        return;
    }
    step_write(b, ids, n, 0, pos, kvs, nkv);
}

/* ------------------------------------------------------------------ */
/* graphs                                                              */

static be_graph *cu_capture(backend *b, void (*fn)(void *ctx), void *ctx, gem_err *err) {
    cuda_backend *c = cu_of(b);
    if (c->failed) {
        gem_err_set(err, "%s", c->why);
        return NULL;
    }
    /* run for real first: scratch buffers reach their sizes outside the
     * recording, and this step's results exist when capture returns */
    fn(ctx);
    cudaGraph_t g = NULL;
    cudaError_t e = c->failed ? cudaErrorUnknown : cudaStreamBeginCapture(c->st, cudaStreamCaptureModeThreadLocal);
    if (e == cudaSuccess) {
        c->capturing = 1;
        fn(ctx);
        c->capturing = 0;
        e = cudaStreamEndCapture(c->st, &g);
    }
    be_graph *r = (be_graph *)calloc(1, sizeof *r);
    if (e == cudaSuccess && !c->failed && r) e = cudaGraphInstantiate(&r->exec, g, 0);
    if (g) cudaGraphDestroy(g);
    if (e != cudaSuccess || c->failed || !r) {
        gem_err_set(err, "recording a decode step failed: %s", c->failed ? c->why : cudaGetErrorString(e));
        free(r);
        return NULL;
    }
    r->generation = c->generation;
    return r;
}

static int cu_replay(backend *b, be_graph *g) {
    cuda_backend *c = cu_of(b);
    if (g->generation != c->generation) return -1;
    c->epoch++; /* the replayed launches end every activation cache's validity */
    CK(c, cudaGraphLaunch(g->exec, c->st));
    return 0;
}

static void cu_graph_free(backend *b, be_graph *g) {
    (void)b;
    if (!g) return;
    cudaGraphExecDestroy(g->exec);
    free(g);
}

/* op timing on (off): what runs before (after) is not timed; while on,
 * no graph is recorded or replayed (backend.h op_timing) */
static void cu_op_timing(backend *b, int on) {
    cuda_backend *c = cu_of(b);
    if (on && !c->prof_ev[0] && (CK(c, cudaEventCreate(&c->prof_ev[0])) || CK(c, cudaEventCreate(&c->prof_ev[1]))))
        return;
    CK(c, cudaStreamSynchronize(c->st));
    c->profile = on || c->profile_env;
    b->capture = c->profile ? NULL : cu_capture;
}

static int cu_op_times(backend *b, be_op_time *rows, int cap, int clear) {
    cuda_backend *c = cu_of(b);
    int n = 0;
    for (int i = 0; i < CU_PROF_ROWS && c->prof[i].name[0] && n < cap; i++, n++) {
        snprintf(rows[n].op, sizeof rows[n].op, "%s", c->prof[i].name);
        rows[n].calls = c->prof[i].calls;
        rows[n].seconds = c->prof[i].s;
    }
    if (clear) memset(c->prof, 0, sizeof c->prof);
    return n;
}

static int cu_status(backend *b, gem_err *err) {
    cuda_backend *c = cu_of(b);
    if (!c->failed) {
        cudaError_t e = cudaStreamQuery(c->st);
        if (e != cudaSuccess && e != cudaErrorNotReady) cu_check(c, e, "stream");
    }
    if (c->failed) return gem_err_set(err, "%s", c->why);
    return 0;
}

/* ------------------------------------------------------------------ */

/* The block trace (trace builds, GEM_CUDA_TRACE=FILE): a text header
 * (format, kind names, records written, ring size), then the ring as
 * written on the device (record 0 holds the count). */
static void trace_write(cuda_backend *c) {
    const size_t bytes = sizeof(cu_trace_rec) * CU_TRACE_CAP;
    cu_trace_rec *h = (cu_trace_rec *)malloc(bytes);
    FILE *f = h ? fopen(c->trace_path, "wb") : NULL;
    if (!h || !f || cudaMemcpy(h, c->trace_ring, bytes, cudaMemcpyDeviceToHost) != cudaSuccess) {
        fprintf(stderr, "gem: cannot write the CUDA block trace to %s\n", c->trace_path);
    } else {
        fprintf(f, "gem-cuda-trace 1\nkinds %s\nrecords %u\ncapacity %u\nrecord_bytes %zu\n\n", CT_NAMES,
                *(const unsigned *)h, CU_TRACE_CAP, sizeof(cu_trace_rec));
        if (fwrite(h, 1, bytes, f) != bytes)
            fprintf(stderr, "gem: short write of the CUDA block trace to %s\n", c->trace_path);
        else
            fprintf(stderr, "gem: CUDA block trace (%u blocks) in %s\n", *(const unsigned *)h, c->trace_path);
    }
    if (f) fclose(f);
    free(h);
}

static void cu_destroy(backend *b) {
    cuda_backend *c = cu_of(b);
    cudaStreamSynchronize(c->st);
    if (c->trace_ring) {
        trace_write(c);
        cudaFree(c->trace_ring);
    }
    free(c->trace_path);
    if (c->profile_env) {
        double total = 0;
        for (int i = 0; i < CU_PROF_ROWS && c->prof[i].name[0]; i++) total += c->prof[i].s;
        fprintf(stderr, "gem cuda profile (GPU time per op, each op run alone; no graph, no launch overlap):\n");
        for (int i = 0; i < CU_PROF_ROWS && c->prof[i].name[0]; i++)
            fprintf(stderr, "  %-34s %8ld calls %10.3f ms %5.1f%%  %8.2f us/call\n", c->prof[i].name, c->prof[i].calls,
                    c->prof[i].s * 1e3, 100 * c->prof[i].s / (total > 0 ? total : 1), 1e6 * c->prof[i].s / c->prof[i].calls);
    }
    scratch *s[] = {&c->xq, &c->xd,        &c->xs, &c->part,  &c->pml,    &c->amax_v,
                    &c->amax_i, &c->up, &c->topk_part, &c->xh, &c->xhinv, &c->vr_part, &c->vr_done, &c->xkq, &c->xkd, &c->xks, &c->kqh, &c->gdn};
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) cudaFree(s[i]->p);
    cudaFree(c->stage);
    cudaFree(c->dmax);
    cudaFree(c->step);
    cudaFreeHost(c->step_host);
    cudaFree(c->seq_tab);
    cudaFreeHost(c->seq_tab_host);
    free(c->seq_of);
    cudaEventDestroy(c->step_copied);
    if (c->prof_ev[0]) cudaEventDestroy(c->prof_ev[0]);
    if (c->prof_ev[1]) cudaEventDestroy(c->prof_ev[1]);
    cudaStreamDestroy(c->st);
    free(c);
}

/* The backend's switches (docs/cuda.md: each one's role), read when a
 * backend starts: each an integer in a range, unset or empty for its
 * default. A value out of range, or a GEM_CUDA_ name that is none of
 * these, fails the backend's creation: a misspelt switch would otherwise
 * measure the defaults. GEM_CUDA_TRACE (a path) is a name only; the test
 * runner's variables are GEM_TEST_*, not the backend's. */
enum {
    CS_MMA, CS_MMH, CS_MV_SPLIT, CS_NORM_WIDE, CS_ATTN_FUSE, CS_MV_STAGGER, CS_MV_LEVELS, CS_ATTN_DEC, CS_PDL,
    CS_PROFILE, CS_ATTN_ROWS, CS_KQ_F16, CS_KQ_NORM, CS_GDN_CHUNKED, CS_N
};
static const struct cu_setting {
    const char *name;
    long lo, hi, dflt;
} cu_settings[CS_N] = {
    {"GEM_CUDA_MMA", 0, 1, 1},          {"GEM_CUDA_MMH", 1, 2, 1},          {"GEM_CUDA_MV_SPLIT", 0, 1, 1},
    {"GEM_CUDA_NORM_WIDE", 0, 1, 1},    {"GEM_CUDA_ATTN_FUSE", 0, 1, 1},    {"GEM_CUDA_MV_STAGGER", 0, 99999, 500},
    {"GEM_CUDA_MV_LEVELS", 2, 64, 8},   {"GEM_CUDA_ATTN_DEC", 0, 3, 3},     {"GEM_CUDA_PDL", 0, 1, 1},
    {"GEM_CUDA_PROFILE", 0, 1, 0},      {"GEM_CUDA_ATTN_ROWS", 0, 1, 1},    {"GEM_CUDA_KQ_F16", 0, 1, 1},
    {"GEM_CUDA_KQ_NORM", 0, 1, 0},      {"GEM_CUDA_GDN_CHUNKED", 0, 1, 0},
};
static const char *const cu_names_only[] = {"GEM_CUDA_TRACE"};

/* v[CS_*]: every setting's value; -1 with err set when one is invalid. */
static int cu_read_settings(long v[CS_N], gem_err *err) {
    const char *names[CS_N + sizeof cu_names_only / sizeof cu_names_only[0]];
    int n = 0;
    for (int i = 0; i < CS_N; i++) {
        names[n++] = cu_settings[i].name;
        if (env_int(cu_settings[i].name, cu_settings[i].lo, cu_settings[i].hi, cu_settings[i].dflt, &v[i], err))
            return gem_err_wrap(err, "backend 'cuda'");
    }
    for (size_t i = 0; i < sizeof cu_names_only / sizeof cu_names_only[0]; i++) names[n++] = cu_names_only[i];
    if (env_known("GEM_CUDA_", names, n, err)) return gem_err_wrap(err, "backend 'cuda'");
    return 0;
}

extern "C" backend *backend_cuda_create(const backend_opts *o, gem_err *err) {
    long set[CS_N]; /* first: a bad setting is named also where no GPU is */
    if (cu_read_settings(set, err)) return NULL;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count < 1) {
        gem_err_set(err, "backend 'cuda': no usable CUDA device (%s)",
                    e != cudaSuccess ? cudaGetErrorString(e) : "none found");
        return NULL;
    }
    cudaDeviceProp p;
    if ((e = cudaGetDeviceProperties(&p, 0)) != cudaSuccess) {
        gem_err_set(err, "backend 'cuda': %s", cudaGetErrorString(e));
        return NULL;
    }
    if (p.major < 9) {
        gem_err_set(err, "backend 'cuda': %s is sm_%d%d; this build targets Hopper (sm_90a)", p.name, p.major, p.minor);
        return NULL;
    }
    cuda_backend *c = (cuda_backend *)calloc(1, sizeof *c);
    if (!c) {
        gem_err_set(err, "out of memory");
        return NULL;
    }
    if ((e = cudaSetDevice(0)) != cudaSuccess || (e = cudaStreamCreateWithFlags(&c->st, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&c->step_copied, cudaEventDisableTiming)) != cudaSuccess ||
        (e = topk_allow()) != cudaSuccess ||
        (e = attn_allow_all()) != cudaSuccess ||
        (e = mmh_allow()) != cudaSuccess || (e = gdn_allow()) != cudaSuccess) {
        gem_err_set(err, "backend 'cuda': %s", cudaGetErrorString(e));
        free(c);
        return NULL;
    }
    c->gelu_fp16 = o && o->gelu_fp16;
    backend *b = &c->base;
    b->name = "cuda";
    /* 2048: the 5376-row products of a 31B tile then fill 5 waves of the
     * 132 multiprocessors instead of 1.3 (k_mm_h's 128 x 128 tiles), for
     * ~0.5 GB more scratch */
    b->prompt_tile = 2048;
    b->destroy = cu_destroy;
    b->weight = cu_weight;
    b->weight_free = cu_weight_free;
    b->weight_bytes = cu_weight_bytes;
    b->alloc = cu_alloc;
    b->buf_free = cu_buf_free;
    b->upload = cu_upload;
    b->download = cu_download;
    b->copy = cu_copy;
    b->sync = cu_sync;
    b->embed = cu_embed;
    b->rmsnorm = cu_rmsnorm;
    b->add_rmsnorm = cu_add_rmsnorm;
    b->add_rmsnorm_norm = cu_add_rmsnorm_norm;
    b->qkv_norm_rope = cu_qkv_norm_rope;
    b->attention_qkv = cu_attention_qkv;
    b->attention_cached = cu_attention_cached;
    /* tiles of up to BE_EXACT_ROWS tokens run the one-token kernels' per-row
     * arithmetic: the split matrix-vector products, the one-token norms,
     * attention row by row (cuda_matmul.cu, cuda_norm.cu, cu_attention) */
    b->rows_exact = 1;
    b->matmul = cu_matmul;
    b->matmul_geglu = cu_matmul_geglu;
    b->matmul_multi = cu_matmul_multi;
    b->rmsnorm_rope = cu_rmsnorm_rope;
    b->rope = cu_rope;
    b->geglu = cu_geglu;
    b->scale = cu_scale;
    b->softcap = cu_softcap;
    b->conv_silu = cu_conv_silu;
    b->l2norm = cu_l2norm;
    b->gated_delta = cu_gated_delta;
    b->rmsnorm_gated = cu_rmsnorm_gated;
    b->split_q = cu_split_q;
    b->attn_gate = cu_attn_gate;
    b->swiglu = cu_swiglu;
    b->add = cu_add;
    b->scale_f = cu_scale_f;
    b->kv_new = cu_kv_new;
    b->kv_f16 = 1;
    b->work_reserve = CU_WORK_RESERVE;
    b->kv_free = cu_kv_free;
    b->attention = cu_attention;
    b->kv_bytes = cu_kv_bytes;
    b->kv_save = cu_kv_save;
    b->kv_load = cu_kv_load;
    b->kv_stash = cu_kv_stash;
    b->kv_unstash = cu_kv_unstash;
    b->argmax = cu_argmax;
    b->argmax_prob = cu_argmax_prob;
    b->topk = cu_topk;
    b->set_step = cu_set_step;
    b->set_step_seqs = cu_set_step_seqs;
    b->attention_seqs = cu_attention_seqs;
    /* tensor-core prefill is the default; GEM_CUDA_MMA=0 selects the dp4a
     * kernels (whose f32 order matches the CPU fast path: tests/cuda/run.sh) */
    c->mma = (int)set[CS_MMA];
    c->mmh_wgmma = set[CS_MMH] != 2;
    c->mv_split = (int)set[CS_MV_SPLIT];
    c->kq_f16 = (int)set[CS_KQ_F16];
    c->kq_norm = (int)set[CS_KQ_NORM];
    c->gdn_chunked = (int)set[CS_GDN_CHUNKED];
    c->norm_wide = (int)set[CS_NORM_WIDE];
    c->attn_fuse = (int)set[CS_ATTN_FUSE];
    c->attn_rows = (int)set[CS_ATTN_ROWS];
    /* cu_attention_seqs reads the rows' caches from set_step_seqs on the
     * row-exact tile, which the split kernel (GEM_CUDA_ATTN_DEC=0) has no
     * form of: then row by row, never recorded */
    b->seqs_replay = c->attn_rows && c->attn_dec;
    /* the first wave of a one-token product starts over 8 steps of 500 ns
     * (see k_mv_q); GEM_CUDA_MV_STAGGER=0 starts it at once */
    c->mv_stagger = (int)set[CS_MV_STAGGER];
    c->mv_levels = (int)set[CS_MV_LEVELS];
    {
        int dev = 0;
        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&c->n_sm, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || c->n_sm < 1)
            c->n_sm = 1;
    }
    c->attn_dec = (int)set[CS_ATTN_DEC];
    c->pdl = (int)set[CS_PDL];
    const char *trace = getenv("GEM_CUDA_TRACE");
    if (trace && *trace) {
#ifdef GEM_CUDA_TRACE
        const size_t bytes = sizeof(cu_trace_rec) * CU_TRACE_CAP;
        if (!(c->trace_path = strdup(trace)) || cudaMalloc(&c->trace_ring, bytes) != cudaSuccess ||
            cudaMemset(c->trace_ring, 0, bytes) != cudaSuccess) {
            cudaFree(c->trace_ring);
            (void)cudaGetLastError();
            c->trace_ring = NULL;
            fprintf(stderr, "gem: no CUDA block trace: cannot allocate its %zu MiB ring\n", bytes >> 20);
        }
#else
        fprintf(stderr, "gem: GEM_CUDA_TRACE is set, but this gem records no block trace (build/gem-trace does: "
                        "make CUDA=1 build/gem-trace)\n");
#endif
    }
    c->profile = c->profile_env = (int)set[CS_PROFILE];
    if (c->profile && (CK(c, cudaEventCreate(&c->prof_ev[0])) || CK(c, cudaEventCreate(&c->prof_ev[1])))) {
        gem_err_set(err, "backend 'cuda': %s", c->why);
        cu_destroy(b);
        return NULL;
    }
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) c->mem_free0 = free_b;
    b->mem_used = cu_mem_used;
    b->mem_free = cu_mem_free;
    b->capture = c->profile ? NULL : cu_capture;
    b->replay = cu_replay;
    b->graph_free = cu_graph_free;
    b->status = cu_status;
    b->op_timing = cu_op_timing;
    b->op_times = cu_op_times;
    return b;
}
