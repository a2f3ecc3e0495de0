/* CUDA backend (see cuda_backend.h and backend/backend.h; internals and
 * invariants in cuda_common.h): weights, buffers, step parameters, norms,
 * rope and elementwise ops, argmax and top-k, graphs, and the seam's
 * table. Matrix products live in cuda_matmul.cu, attention and the KV
 * caches in cuda_attention.cu. */
#include "backend/cuda/cuda_common.h"

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

__device__ __forceinline__ float w_value(int fmt, const void *q, const __half *d, int64_t row, int64_t k, int64_t K) {
    const int64_t i = row * K + k;
    switch (fmt) {
    case DW_F16: return __half2float(((const __half *)q)[i]);
    case DW_BF16: return __bfloat162float(((const __nv_bfloat16 *)q)[i]);
    case DW_Q8_0: return __half2float(d[i / 32]) * (float)((const int8_t *)q)[i];
    case DW_Q4_0: {
        const uint8_t byte = ((const uint8_t *)q)[(i / 32) * 16 + (k % 16)];
        const int code = (k % 32) < 16 ? (byte & 0x0F) : (byte >> 4);
        return (float)(code - 8) * __half2float(d[i / 32]);
    }
    default: return ((const float *)q)[i];
    }
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
            if (stage_grow(c, STAGE_BYTES)) e = cudaErrorMemoryAllocation;
            if (e == cudaSuccess && !c->dmax) e = cudaMalloc(&c->dmax, sizeof(unsigned));
            if (e == cudaSuccess) e = cudaMemset(c->dmax, 0, sizeof(unsigned));
            const int64_t per = (int64_t)(STAGE_BYTES / blk_bytes);
            for (int64_t b0 = 0; e == cudaSuccess && b0 < nblk; b0 += per) {
                const int64_t nb = nblk - b0 < per ? nblk - b0 : per;
                what = "cudaMemcpy";
                e = cudaMemcpy(c->stage, (const uint8_t *)t->data + b0 * blk_bytes, (size_t)(nb * blk_bytes),
                               cudaMemcpyHostToDevice);
                if (e != cudaSuccess) break;
                what = "repack";
                if (q8)
                    k_repack_q8_0<<<blocks_for((size_t)nb, 256), 256>>>((const uint8_t *)c->stage, nb,
                                                                         (int8_t *)w->q + b0 * 32, w->d + b0, c->dmax);
                else
                    k_repack_q4_0<<<blocks_for((size_t)nb, 256), 256>>>((const uint8_t *)c->stage, nb,
                                                                         (uint8_t *)w->q + b0 * 16, w->d + b0, c->dmax);
                if ((e = cudaGetLastError()) == cudaSuccess) e = cudaDeviceSynchronize();
            }
            unsigned bits = 0;
            if (e == cudaSuccess) e = cudaMemcpy(&bits, c->dmax, sizeof bits, cudaMemcpyDeviceToHost);
            /* |code x scale x 2^we| < 2^15 (|code| <= 128 or 8); no f16
             * path when a scale is inf or NaN */
            if (bits < 0x7C00u) {
                __half_raw hr;
                hr.x = (unsigned short)bits;
                const float big = (q8 ? 128.0f : 8.0f) * __half2float(__half(hr));
                int ex = 0;
                if (big > 0) frexpf(big, &ex);
                int we = big > 0 ? 15 - ex : 0;
                we = we < -14 ? -14 : we > 15 ? 15 : we;
                w->hexp = ldexpf(1.0f, we);
            }
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
    return w;
}

static void cu_weight_free(backend *b, be_weight *w) {
    (void)b;
    free_weight(w);
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

static void cu_set_step(backend *b, const int32_t *ids, int n, int pos0) {
    cuda_backend *c = cu_of(b);
    if (n > c->step_cap) {
        int cap = c->step_cap ? c->step_cap : 64;
        while (cap < n) cap *= 2;
        CK(c, cudaStreamSynchronize(c->st));
        cudaFree(c->step);
        cudaFreeHost(c->step_host);
        c->step = NULL;
        c->step_host = NULL;
        c->step_cap = 0;
        if (CK(c, cudaMalloc(&c->step, sizeof(int) * (size_t)(cap + 2))) ||
            CK(c, cudaMallocHost(&c->step_host, sizeof(int) * (size_t)(cap + 2))))
            return;
        c->step_cap = cap;
        c->generation++;
    }
    /* the previous step's copy must have left the staging area before it is
     * rewritten; this waits at most for the tile before the last one */
    CK(c, cudaEventSynchronize(c->step_copied));
    c->step_host[0] = pos0;
    c->step_host[1] = n;
    memcpy(c->step_host + 2, ids, sizeof(int) * (size_t)n);
    CK(c, cudaMemcpyAsync(c->step, c->step_host, sizeof(int) * (size_t)(n + 2), cudaMemcpyHostToDevice, c->st));
    CK(c, cudaEventRecord(c->step_copied, c->st));
}

/* ------------------------------------------------------------------ */
/* elementwise and norms                                               */

__global__ void k_embed(int fmt, const void *q, const __half *d, int64_t K, int64_t rows, const int *step, int n,
                        float scale, float *out) {
    CU_TRACE(CT_EMBED);
    pdl_wait();
    CU_TRACE_RELEASED();
    const int i = blockIdx.x;
    if (i >= n) return;
    int64_t id = step[2 + i];
    if (id < 0) id = 0;
    if (id >= rows) id = rows - 1;
    for (int64_t k = threadIdx.x; k < K; k += blockDim.x) out[(int64_t)i * K + k] = w_value(fmt, q, d, id, k, K) * scale;
}

static void cu_embed(backend *b, const be_weight *E, const int32_t *ids, int n, float scale, be_buf *out) {
    cuda_backend *c = cu_of(b);
    (void)ids; /* read from the step buffer */
    launch(c, k_embed, n, 256, 0, E->fmt, E->q, E->d, E->ne0, E->ne1, c->step, n, scale, out->d);
    LAUNCHED(c, "embed");
}

/* The 8-bit codes of one 32-value block held as float4s by 8 consecutive
 * lanes (lane & 7 = 0 holds the first four; block8_codes) into the
 * quantized-activation arrays. */
__device__ __forceinline__ void quantize_block8(float4 v, int64_t blk, int8_t *q, float *d, int *s, bool valid) {
    const codes8 c = block8_codes(v);
    const int lane8 = threadIdx.x & 7;
    if (valid) ((int *)q)[blk * 8 + lane8] = c.packed;
    if (valid && lane8 == 0) {
        d[blk] = c.d;
        s[blk] = c.sum;
    }
}

/* One block per row. add: h += rmsnorm(x) * w (x unchanged); else out = rmsnorm(x) * (w or 1).
 *
 * Rows whose width is a multiple of 4 (every row of the supported models)
 * are read once into registers, NV float4 per thread, every load issued
 * before the first use: a one-token step's norms are single rows, bound by
 * memory latency, not bandwidth. `out` may be `x` (each element is read
 * before its own store, by the same thread). Other widths take the plain
 * loop. */
/* Stage 1: out = rmsnorm(x) w, or with add: out += rmsnorm(x) w, then
 * times scale. Stage 2 (w2 set): out2 = rmsnorm(out) w2 from the values
 * still in registers (a residual add and the next layer's norm in one
 * launch). The last output written gets 8-bit codes when xq is set.
 * EARLY (one-token steps): the weights and the scale, which no kernel
 * writes, are read before pdl_wait, and the residual with the input, so a
 * step's norm is one round of loads and two block sums instead of four
 * dependent rounds (bench/results/cuda-variants-2026-12-03c.json).
 * Prefill rows keep the
 * weights out of registers (k_rmsnorm4<8> needs 160 registers with them,
 * 106 without, nvcc 13 --resource-usage: one block of 256 threads per
 * multiprocessor instead of two). The residual is read
 * with the input either way. */
template <int NV, bool EARLY, int MAXT = 256>
__global__ void __launch_bounds__(MAXT) k_rmsnorm4(const float *x, const float *__restrict__ w, int width, float eps, float *out, int add,
                           const float *__restrict__ scale, const float *__restrict__ w2, float *__restrict__ out2,
                           int8_t *__restrict__ xq, float *__restrict__ xd, int *__restrict__ xs) {
    CU_TRACE(CT_RMSNORM4);
    const int n4 = width / 4, lane = threadIdx.x & 31;
    float4 we[EARLY ? NV : 1], w2e[EARLY ? NV : 1];
    if constexpr (EARLY) {
#pragma unroll
        for (int i = 0; i < NV; i++) {
            const int idx = threadIdx.x + i * blockDim.x;
            we[i] = idx < n4 && w ? ((const float4 *)w)[idx] : make_float4(1, 1, 1, 1);
            w2e[i] = idx < n4 && w2 ? ((const float4 *)w2)[idx] : make_float4(1, 1, 1, 1);
        }
    }
    const float sc = add && scale ? scale[0] : 1.0f;
    pdl_wait();
    CU_TRACE_RELEASED();
    __shared__ float sh[32];
    const float4 *xr = (const float4 *)(x + (size_t)blockIdx.x * width);
    float4 v[NV];
    float ss = 0;
#pragma unroll
    for (int i = 0; i < NV; i++) {
        const int idx = threadIdx.x + i * blockDim.x;
        v[i] = idx < n4 ? xr[idx] : make_float4(0, 0, 0, 0);
    }
    float4 *o = (float4 *)(out + (size_t)blockIdx.x * width);
    float4 ov[NV];
#pragma unroll
    for (int i = 0; i < NV; i++) ov[i] = make_float4(0, 0, 0, 0);
    if (add) {
#pragma unroll
        for (int i = 0; i < NV; i++) {
            const int idx = threadIdx.x + i * blockDim.x;
            if (idx < n4) ov[i] = o[idx];
        }
    }
#pragma unroll
    for (int i = 0; i < NV; i++) ss += v[i].x * v[i].x + v[i].y * v[i].y + v[i].z * v[i].z + v[i].w * v[i].w;
    ss = block_sum(ss, sh);
    const float r = 1.0f / sqrtf(ss / (float)width + eps);
    /* whole warps stay in these loops while any lane has values: the block
     * quantization shuffles across 8 lanes (widths are multiples of 32 when
     * it runs, so a 32-value block is all in or all out); values past the
     * end stay zero */
#pragma unroll
    for (int i = 0; i < NV; i++) {
        const int idx = threadIdx.x + i * blockDim.x;
        if (idx - lane >= n4) break;
        const float4 wv = EARLY ? we[EARLY ? i : 0] : idx < n4 && w ? ((const float4 *)w)[idx] : make_float4(1, 1, 1, 1);
        float4 t;
        /* (x r) w as the plain loop computes it; with no weight, x r */
        t.x = w ? v[i].x * r * wv.x : v[i].x * r;
        t.y = w ? v[i].y * r * wv.y : v[i].y * r;
        t.z = w ? v[i].z * r * wv.z : v[i].z * r;
        t.w = w ? v[i].w * r * wv.w : v[i].w * r;
        if (add) {
            t.x = ov[i].x + t.x, t.y = ov[i].y + t.y, t.z = ov[i].z + t.z, t.w = ov[i].w + t.w;
            if (scale) t.x *= sc, t.y *= sc, t.z *= sc, t.w *= sc;
        }
        if (idx < n4) o[idx] = t;
        else t = make_float4(0, 0, 0, 0);
        v[i] = t;
        if (xq && !w2) quantize_block8(t, ((int64_t)blockIdx.x * n4 + idx) / 8, xq, xd, xs, idx < n4);
    }
    if (!w2) return;
    float ss2 = 0;
#pragma unroll
    for (int i = 0; i < NV; i++) ss2 += v[i].x * v[i].x + v[i].y * v[i].y + v[i].z * v[i].z + v[i].w * v[i].w;
    ss2 = block_sum(ss2, sh);
    const float r2 = 1.0f / sqrtf(ss2 / (float)width + eps);
    float4 *o2 = (float4 *)(out2 + (size_t)blockIdx.x * width);
#pragma unroll
    for (int i = 0; i < NV; i++) {
        const int idx = threadIdx.x + i * blockDim.x;
        if (idx - lane >= n4) break;
        const float4 wv = EARLY ? w2e[EARLY ? i : 0] : idx < n4 ? ((const float4 *)w2)[idx] : make_float4(1, 1, 1, 1);
        const float4 t = make_float4(v[i].x * r2 * wv.x, v[i].y * r2 * wv.y, v[i].z * r2 * wv.z, v[i].w * r2 * wv.w);
        if (idx < n4) o2[idx] = t;
        if (xq) quantize_block8(t, ((int64_t)blockIdx.x * n4 + idx) / 8, xq, xd, xs, idx < n4);
    }
}

__global__ void k_rmsnorm(const float *x, const float *w, int width, float eps, float *out, int add, const float *scale) {
    CU_TRACE(CT_RMSNORM);
    pdl_wait();
    CU_TRACE_RELEASED();
    __shared__ float sh[32];
    const float *xr = x + (size_t)blockIdx.x * width;
    float ss = 0;
    for (int k = threadIdx.x; k < width; k += blockDim.x) ss += xr[k] * xr[k];
    ss = block_sum(ss, sh);
    const float r = 1.0f / sqrtf(ss / (float)width + eps);
    float *o = out + (size_t)blockIdx.x * width;
    for (int k = threadIdx.x; k < width; k += blockDim.x) {
        const float v = w ? xr[k] * r * w[k] : xr[k] * r;
        if (add) o[k] = scale ? (o[k] + v) * scale[0] : o[k] + v;
        else o[k] = v;
    }
}

/* Returns 1 when the kernel also left the 8-bit codes of `out` in the
 * quantized-activation scratch (quant set, width a multiple of 32). */
static int rmsnorm_launch(cuda_backend *c, const float *x, const float *w, int rows, int width, float eps, float *out,
                          int add, const float *scale, const float *w2, float *out2, int quant) {
    const int n4 = width / 4;
    if (width % 4 == 0 && n4 <= 8 * 256) {
        int8_t *xq = NULL;
        float *xd = NULL;
        int *xs = NULL;
        const size_t nblk = (size_t)rows * (size_t)(width / 32);
        /* scratch only grows outside a capture (a step's scratch was sized
         * by the tiles before it; if not, the product quantizes itself) */
        if (quant && width % 32 == 0 &&
            (!c->capturing || (nblk * 32 <= c->xq.cap && nblk * sizeof(float) <= c->xd.cap && nblk * sizeof(int) <= c->xs.cap)) &&
            !grow(c, &c->xq, nblk * 32) && !grow(c, &c->xd, nblk * sizeof(float)) && !grow(c, &c->xs, nblk * sizeof(int))) {
            xq = (int8_t *)c->xq.p;
            xd = (float *)c->xd.p;
            xs = (int *)c->xs.p;
        }
        int threads = (n4 + 31) / 32 * 32;
        if (threads > 256) threads = 256;
        int nv = (n4 + threads - 1) / threads;
#define NORM_LAUNCH(NV, E, T) \
    launch(c, k_rmsnorm4<NV, E, T>, rows, threads, 0, x, w, width, eps, out, add, scale, w2, out2, xq, xd, xs)
#define NORM_LAUNCH_NV(E)                     \
    if (nv <= 1) NORM_LAUNCH(1, E, 256);      \
    else if (nv <= 2) NORM_LAUNCH(2, E, 256); \
    else if (nv <= 4) NORM_LAUNCH(4, E, 256); \
    else NORM_LAUNCH(8, E, 256)
        if (rows == 1 && c->norm_wide && n4 > 2 * 256) {
            /* A one-token row in one block of up to 1024 threads, one or
             * two float4 each (n4 <= 2048 here). With 256 threads a 31B
             * row is six float4 per thread, and a thread's work after the
             * loads (scaling, the residual add, the 8-lane code shuffles of
             * each float4, twice) is a dependent chain that two warps per
             * scheduler cannot hide: the block was one of the longest of
             * a decode step's trace, 122 times a step
             * (bench/results/cuda-decode-small-2026-12-04.json).
             * Same arithmetic per element; the block sums add more warp
             * partials (last-bit differences). Rows of two float4 per
             * thread or fewer (gemma4-1b, 1152) keep 256 threads: nothing
             * to gain there, and the 1b q4_0 model's token-by-token check
             * against its tiled prefill (tests/cuda/run.sh), which
             * amplifies any change in summation order, moved from 2 to 6
             * of 222 clear argmax positions with 288 threads. */
            nv = n4 <= 1024 ? 1 : 2;
            threads = ((n4 + nv - 1) / nv + 31) / 32 * 32;
            if (nv == 1) NORM_LAUNCH(1, true, 1024);
            else NORM_LAUNCH(2, true, 1024);
        } else if (rows == 1) {
            NORM_LAUNCH_NV(true);
        } else {
            NORM_LAUNCH_NV(false);
        }
#undef NORM_LAUNCH_NV
#undef NORM_LAUNCH
        return xq != NULL;
    }
    launch(c, k_rmsnorm, rows, 256, 0, x, w, width, eps, out, add, scale);
    if (w2) launch(c, k_rmsnorm, rows, 256, 0, out, w2, width, eps, out2, 0, (const float *)NULL);
    return 0;
}


static void cu_rmsnorm(backend *b, const be_buf *x, const be_weight *w, int rows, int width, float eps, be_buf *out) {
    cuda_backend *c = cu_of(b);
    /* normed rows are the input of the next products (q/k/v, gate/up, the
     * head): their 8-bit codes are made here, saving a launch per product */
    const int quant =
        rmsnorm_launch(c, x->d, w ? (const float *)w->q : NULL, rows, width, eps, out->d, 0, NULL, NULL, NULL, 1);
    LAUNCHED(c, "rmsnorm");
    if (quant) quantized_cache_set(c, out->d, rows, width);
}

static void cu_add_rmsnorm(backend *b, be_buf *h, const be_buf *x, const be_weight *w, int rows, int width, float eps,
                           const be_weight *s) {
    cuda_backend *c = cu_of(b);
    rmsnorm_launch(c, x->d, (const float *)w->q, rows, width, eps, h->d, 1, s ? (const float *)s->q : NULL, NULL, NULL,
                   0);
    LAUNCHED(c, "add_rmsnorm");
}

static void cu_add_rmsnorm_norm(backend *b, be_buf *h, const be_buf *x, const be_weight *w, const be_weight *s,
                                const be_weight *w_next, int rows, int width, float eps, be_buf *out) {
    cuda_backend *c = cu_of(b);
    const int quant = rmsnorm_launch(c, x->d, (const float *)w->q, rows, width, eps, h->d, 1,
                                     s ? (const float *)s->q : NULL, (const float *)w_next->q, out->d, 1);
    LAUNCHED(c, "add_rmsnorm+rmsnorm");
    if (quant) quantized_cache_set(c, out->d, rows, width);
}


__global__ void k_geglu(const float *g, const float *u, size_t n, float *out, int fp16) {
    CU_TRACE(CT_GEGLU);
    pdl_wait();
    CU_TRACE_RELEASED();
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float a = g[i];
        if (fp16) {
            /* llama.cpp's CPU table (backend_opts.gelu_fp16) */
            a = a <= -10.0f ? 0.0f
                : a >= 10.0f ? a
                             : __half2float(__float2half_rn(gelu_tanh_f(__half2float(__float2half_rn(a)))));
        } else {
            a = gelu_tanh_f(a);
        }
        out[i] = a * u[i];
    }
}

static unsigned grid_1d(size_t n) {
    size_t g = (n + 255) / 256;
    return (unsigned)(g > 65535 * 4 ? 65535 * 4 : g ? g : 1);
}

void cu_geglu(backend *b, const be_buf *gate, const be_buf *up, size_t n, be_buf *out) {
    cuda_backend *c = cu_of(b);
    launch(c, k_geglu, grid_1d(n), 256, 0, gate->d, up->d, n, out->d, c->gelu_fp16);
    LAUNCHED(c, "geglu");
}

__global__ void k_scale(float *x, size_t n, const float *s) {
    pdl_wait();
    const float v = s[0];
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) x[i] *= v;
}

static void cu_scale(backend *b, be_buf *x, size_t n, const be_weight *s) {
    cuda_backend *c = cu_of(b);
    launch(c, k_scale, grid_1d(n), 256, 0, x->d, n, (const float *)s->q);
    LAUNCHED(c, "scale");
}

__global__ void k_softcap(float *x, size_t n, float cap) {
    CU_TRACE(CT_SOFTCAP);
    pdl_wait();
    CU_TRACE_RELEASED();
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] = cap * tanhf(x[i] / cap);
}

static void cu_softcap(backend *b, be_buf *x, size_t n, float cap) {
    cuda_backend *c = cu_of(b);
    launch(c, k_softcap, grid_1d(n), 256, 0, x->d, n, cap);
    LAUNCHED(c, "softcap");
}

/* One block per token. The angle of pair j is built as the CPU reference
 * builds it: theta = pos, multiplied by theta_scale once per pair (f32,
 * sequential), so both backends round the same way; theta_scale comes from
 * the host's powf for the same reason. */
__global__ void k_rope(float *x, int heads, int d, int n_rot, const int *step, float theta_scale, const float *ff) {
    pdl_wait();
    extern __shared__ float cs[];
    const int i = blockIdx.x, half = n_rot / 2;
    const float pos = (float)(step[0] + i);
    for (int j = threadIdx.x; j < half; j += blockDim.x) {
        const float t = rope_angle(pos, theta_scale, j, ff);
        cs[2 * j] = cosf(t);
        cs[2 * j + 1] = sinf(t);
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < heads * half; idx += blockDim.x) {
        const int h = idx / half, j = idx % half;
        float *v = x + ((size_t)i * heads + h) * d;
        rope_rotate(v[j], v[j + half], cs[2 * j], cs[2 * j + 1], v[j], v[j + half]);
    }
}

static void cu_rope(backend *b, be_buf *x, int n, int heads, int d, int n_rot, int pos0, float base,
                    const be_weight *ff) {
    cuda_backend *c = cu_of(b);
    (void)pos0; /* read from the step buffer */
    const float theta_scale = rope_theta_scale(base, n_rot);
    launch(c, k_rope, n, 256, sizeof(float) * (size_t)n_rot, x->d, heads, d, n_rot, c->step, theta_scale,
                                                             ff ? (const float *)ff->q : NULL);
    LAUNCHED(c, "rope");
}

/* rmsnorm + rope of one (token, head) row per block: the row is normalised
 * into shared memory, then rotated pairwise; the arithmetic of each step is
 * that of k_rmsnorm and k_rope. */
/* rmsnorm (+ rope when rope) of one head row v of d values, by the block;
 * the arithmetic of k_rmsnorm and k_rope. vn (rope only): also gets the
 * row normalised without weight (K as V). */
__device__ __forceinline__ void head_norm_rope(float *v, const float *w, int d, float eps, float pos, float theta_scale,
                                               const float *ff, bool rope, float *row, float *sh, float *vn) {
    const int half = d / 2;
    float ss = 0;
    for (int k = threadIdx.x; k < d; k += blockDim.x) ss = __fmaf_rn(v[k], v[k], ss);
    ss = block_sum(ss, sh);
    const float r = 1.0f / sqrtf(ss / (float)d + eps);
    if (!rope) {
        for (int k = threadIdx.x; k < d; k += blockDim.x) v[k] = w ? v[k] * r * w[k] : v[k] * r;
        return;
    }
    for (int k = threadIdx.x; k < d; k += blockDim.x) {
        const float xr = v[k] * r; /* (v r) w: the same rounding as before */
        if (vn) vn[k] = xr;        /* as the !rope branch's weightless row */
        row[k] = w ? xr * w[k] : xr;
    }
    __syncthreads();
    for (int j = threadIdx.x; j < half; j += blockDim.x) {
        const float t = rope_angle(pos, theta_scale, j, ff);
        rope_rotate(row[j], row[j + half], cosf(t), sinf(t), v[j], v[j + half]);
    }
}

/* rmsnorm + rope of one (token, head) row per block: the row is normalised
 * into shared memory, then rotated pairwise. */
__global__ void k_rmsnorm_rope(float *x, const float *w, int heads, int d, float eps, const int *step, float theta_scale,
                               const float *ff) {
    CU_TRACE(CT_RMSNORM_ROPE);
    pdl_wait();
    CU_TRACE_RELEASED();
    extern __shared__ float row[];
    __shared__ float sh[32];
    const int i = blockIdx.x / heads;
    head_norm_rope(x + (size_t)blockIdx.x * d, w, d, eps, (float)(step[0] + i), theta_scale, ff, true, row, sh, NULL);
}

/* The q, k and v rows of a layer in one launch: blocks [0, n nh) take q
 * rows (weight qw, rope), the next n kvh k rows (weight kw, rope), the last
 * n kvh v rows (no weight, no rope). K as V (v_from_k): no v blocks; each k
 * block writes its raw row normalised without weight to v before the
 * rope, in place of a copy of the raw projection to v (a copy node, which
 * also cut the launch overlap before this kernel: the full layers' q/k/v
 * kernel ran several times as long as the sliding layers' in a decode
 * step's trace). */
__global__ void k_qkv_norm_rope(float *q, const float *qw, float *k, const float *kw, float *v, int v_from_k, int n,
                                int nh, int kvh, int d, float eps, const int *step, float theta_scale, const float *ff) {
    CU_TRACE(CT_QKV_NORM_ROPE);
    pdl_wait();
    CU_TRACE_RELEASED();
    extern __shared__ float row[];
    __shared__ float sh[32];
    int bid = blockIdx.x;
    const int pos0 = step[0];
    if (bid < n * nh) {
        head_norm_rope(q + (size_t)bid * d, qw, d, eps, (float)(pos0 + bid / nh), theta_scale, ff, true, row, sh, NULL);
        return;
    }
    bid -= n * nh;
    if (bid < n * kvh) {
        head_norm_rope(k + (size_t)bid * d, kw, d, eps, (float)(pos0 + bid / kvh), theta_scale, ff, true, row, sh,
                       v_from_k ? v + (size_t)bid * d : NULL);
        return;
    }
    bid -= n * kvh;
    head_norm_rope(v + (size_t)bid * d, NULL, d, eps, 0.0f, theta_scale, ff, false, row, sh, NULL);
}

/* k_qkv_norm_rope for heads of D = 256 or 512 values on 128 threads,
 * everything that does not depend on the projections done before the
 * grid dependency wait: the row's norm weights (no kernel writes them) and
 * the rope's cos/sin (the position is the step buffer's, written before
 * the step's first kernel). Thread t holds elements t + 128 e; pair j
 * rotates elements j and j + D/2, both the same thread's (j = t + 128 p),
 * so the rotation needs no shared row. Each block's wait then covers
 * one round of loads and one block sum instead of a load of the weights
 * after the sum and 127 (255) dependent multiplications for the last
 * angles, which made it one of the longest blocks of a decode step's
 * trace. The arithmetic of head_norm_rope, element for element and in
 * the same order (sum of squares, then (x r) w, then the rotation; K as V
 * as in k_qkv_norm_rope). */
template <int D>
__global__ void __launch_bounds__(128)
    k_qkv_norm_rope_e(float *q, const float *qw, float *k, const float *kw, float *v, int v_from_k, int n, int nh,
                      int kvh, float eps, const int *step, float theta_scale, const float *ff) {
    CU_TRACE(CT_QKV_NORM_ROPE);
    constexpr int E = D / 128, P = D / 256, HALF = D / 2;
    const int t = threadIdx.x;
    int bid = blockIdx.x, tok;
    float *row, *vn = NULL;
    const float *w;
    bool rope = true;
    if (bid < n * nh) {
        row = q + (size_t)bid * D, w = qw, tok = bid / nh;
    } else if ((bid -= n * nh) < n * kvh) {
        row = k + (size_t)bid * D, w = kw, tok = bid / kvh;
        if (v_from_k) vn = v + (size_t)bid * D;
    } else {
        bid -= n * kvh;
        row = v + (size_t)bid * D, w = NULL, tok = 0, rope = false;
    }
    float we[E], cs[P], sn[P];
#pragma unroll
    for (int e = 0; e < E; e++) we[e] = w ? w[t + 128 * e] : 1.0f;
    if (rope) {
        const float pos = (float)(step[0] + tok);
#pragma unroll
        for (int p = 0; p < P; p++) {
            const float a = rope_angle(pos, theta_scale, t + 128 * p, ff);
            cs[p] = cosf(a), sn[p] = sinf(a);
        }
    }
    pdl_wait();
    CU_TRACE_RELEASED();
    __shared__ float sh[32];
    float x[E];
    float ss = 0;
#pragma unroll
    for (int e = 0; e < E; e++) x[e] = row[t + 128 * e];
#pragma unroll
    for (int e = 0; e < E; e++) ss = __fmaf_rn(x[e], x[e], ss);
    ss = block_sum(ss, sh);
    const float r = 1.0f / sqrtf(ss / (float)D + eps);
    if (vn) {
#pragma unroll
        for (int e = 0; e < E; e++) vn[t + 128 * e] = x[e] * r;
    }
#pragma unroll
    for (int e = 0; e < E; e++) x[e] = w ? x[e] * r * we[e] : x[e] * r;
    if (!rope) {
#pragma unroll
        for (int e = 0; e < E; e++) row[t + 128 * e] = x[e];
        return;
    }
    /* element t + 128 p pairs with t + 128 p + HALF, i.e. x[p + P] */
    static_assert(HALF == 128 * P, "pairs are the thread's own elements");
#pragma unroll
    for (int p = 0; p < P; p++) rope_rotate(x[p], x[p + P], cs[p], sn[p], row[t + 128 * p], row[t + 128 * p + HALF]);
}

void cu_qkv_norm_rope(backend *b, be_buf *q, const be_weight *qw, be_buf *k, const be_weight *kw, be_buf *v,
                             int v_from_k, int n, int n_head, int n_kv_head, int d, float eps, int pos0, float base,
                             const be_weight *ff) {
    cuda_backend *c = cu_of(b);
    (void)pos0; /* read from the step buffer */
    const float theta_scale = rope_theta_scale(base, d);
    const int blocks = n * (n_head + (v_from_k ? 1 : 2) * n_kv_head);
    if (d == 256 || d == 512) {
#define QKV_E(D)                                                                                                       \
    launch(c, k_qkv_norm_rope_e<D>, blocks, 128, 0, q->d, qw ? (const float *)qw->q : NULL, k->d,                      \
           kw ? (const float *)kw->q : NULL, v->d, v_from_k, n, n_head, n_kv_head, eps, c->step, theta_scale,             \
           ff ? (const float *)ff->q : NULL)
        if (d == 256) QKV_E(256);
        else QKV_E(512);
#undef QKV_E
        LAUNCHED(c, "q/k/v norm+rope");
        return;
    }
    launch(c, k_qkv_norm_rope, blocks, 128, sizeof(float) * (size_t)d, q->d, qw ? (const float *)qw->q : NULL, k->d,
           kw ? (const float *)kw->q : NULL, v->d, v_from_k, n, n_head, n_kv_head, d, eps, c->step, theta_scale,
           ff ? (const float *)ff->q : NULL);
    LAUNCHED(c, "q/k/v norm+rope");
}

static void cu_rmsnorm_rope(backend *b, be_buf *x, const be_weight *w, int n, int heads, int d, float eps, int pos0,
                            float base, const be_weight *ff) {
    cuda_backend *c = cu_of(b);
    (void)pos0; /* read from the step buffer */
    const float theta_scale = rope_theta_scale(base, d);
    launch(c, k_rmsnorm_rope, n * heads, 128, sizeof(float) * (size_t)d, 
        x->d, w ? (const float *)w->q : NULL, heads, d, eps, c->step, theta_scale, ff ? (const float *)ff->q : NULL);
    LAUNCHED(c, "rmsnorm+rope");
}

/* ------------------------------------------------------------------ */
/* argmax                                                              */

#define AM_BLOCKS 64

__device__ __forceinline__ void better(float &v, int &i, float v2, int i2) {
    if (v2 > v || (v2 == v && i2 < i)) {
        v = v2;
        i = i2;
    }
}

__device__ void block_argmax(float &v, int &i) {
    __shared__ float sv[32];
    __shared__ int si[32];
    for (int o = 16; o > 0; o >>= 1) better(v, i, __shfl_xor_sync(0xffffffffu, v, o), __shfl_xor_sync(0xffffffffu, i, o));
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    if (lane == 0) sv[w] = v, si[w] = i;
    __syncthreads();
    if (threadIdx.x == 0)
        for (int j = 1; j < (int)(blockDim.x >> 5); j++) better(v, i, sv[j], si[j]);
}

__global__ void k_argmax_part(const float *x, int width, float *pv, int *pi) {
    CU_TRACE(CT_ARGMAX_PART);
    pdl_wait();
    CU_TRACE_RELEASED();
    const int r = blockIdx.y;
    float v = -INFINITY;
    int idx = 0x7fffffff;
    for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < width; j += gridDim.x * blockDim.x)
        better(v, idx, x[(size_t)r * width + j], j);
    block_argmax(v, idx);
    if (threadIdx.x == 0) pv[r * AM_BLOCKS + blockIdx.x] = v, pi[r * AM_BLOCKS + blockIdx.x] = idx;
}

__global__ void k_argmax_final(const float *pv, const int *pi, float *out) {
    CU_TRACE(CT_ARGMAX_FINAL);
    pdl_wait();
    CU_TRACE_RELEASED();
    const int r = blockIdx.x;
    float v = -INFINITY;
    int idx = 0x7fffffff;
    if (threadIdx.x < AM_BLOCKS) v = pv[r * AM_BLOCKS + threadIdx.x], idx = pi[r * AM_BLOCKS + threadIdx.x];
    block_argmax(v, idx);
    if (threadIdx.x == 0) out[r] = (float)(idx == 0x7fffffff ? 0 : idx);
}

static void cu_argmax(backend *b, const be_buf *x, int rows, int width, be_buf *out) {
    cuda_backend *c = cu_of(b);
    if (grow(c, &c->amax_v, sizeof(float) * AM_BLOCKS * (size_t)rows) ||
        grow(c, &c->amax_i, sizeof(int) * AM_BLOCKS * (size_t)rows))
        return;
    launch(c, k_argmax_part, dim3(AM_BLOCKS, rows), 256, 0, x->d, width, (float *)c->amax_v.p, (int *)c->amax_i.p);
    LAUNCHED(c, "argmax");
    launch(c, k_argmax_final, rows, AM_BLOCKS, 0, (const float *)c->amax_v.p, (const int *)c->amax_i.p, out->d);
    LAUNCHED(c, "argmax");
}

/* Top-k for sampling: each block sorts a chunk of TK_CHUNK values in
 * shared memory (bitonic, descending) and keeps its first k; one block
 * sorts those and writes the first k. Keys order as the sampler does:
 * the value's bits made monotonic in the high word, the complement of the
 * index in the low word (equal values: lower index first). */
#define TK_CHUNK 4096
#define TK_FINAL 8192 /* keys the final block sorts (64 chunks x 128) */

__device__ __forceinline__ unsigned long long tk_key(float v, int i) {
    unsigned u = __float_as_uint(v);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ((unsigned long long)u << 32) | (0xFFFFFFFFu - (unsigned)i);
}

__device__ void tk_sort_desc(unsigned long long *s, int n) {
    for (int k = 2; k <= n; k <<= 1)
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int i = threadIdx.x; i < n; i += blockDim.x) {
                const int ixj = i ^ j;
                if (ixj > i) {
                    const unsigned long long a = s[i], b = s[ixj];
                    if ((i & k) == 0 ? a < b : a > b) s[i] = b, s[ixj] = a;
                }
            }
            __syncthreads();
        }
}

__global__ void __launch_bounds__(512) k_topk_part(const float *x, int width, int k, unsigned long long *part) {
    CU_TRACE(CT_TOPK_PART);
    pdl_wait();
    CU_TRACE_RELEASED();
    __shared__ unsigned long long s[TK_CHUNK];
    const int base = blockIdx.x * TK_CHUNK;
    for (int i = threadIdx.x; i < TK_CHUNK; i += blockDim.x) s[i] = base + i < width ? tk_key(x[base + i], base + i) : 0ull;
    __syncthreads();
    tk_sort_desc(s, TK_CHUNK);
    for (int i = threadIdx.x; i < k; i += blockDim.x) part[(size_t)blockIdx.x * k + i] = s[i];
}

__global__ void __launch_bounds__(1024) k_topk_final(const unsigned long long *part, int n, int p2, int k, float *out) {
    CU_TRACE(CT_TOPK_FINAL);
    pdl_wait();
    CU_TRACE_RELEASED();
    extern __shared__ unsigned long long sk[];
    for (int i = threadIdx.x; i < p2; i += blockDim.x) sk[i] = i < n ? part[i] : 0ull;
    __syncthreads();
    tk_sort_desc(sk, p2);
    for (int i = threadIdx.x; i < k; i += blockDim.x) {
        const unsigned long long key = sk[i];
        const unsigned u = (unsigned)(key >> 32);
        out[i] = __uint_as_float((u & 0x80000000u) ? (u & 0x7FFFFFFFu) : ~u);
        out[k + i] = (float)(0xFFFFFFFFu - (unsigned)key);
    }
}

static void cu_topk(backend *b, const be_buf *x, int width, int k, be_buf *out) {
    cuda_backend *c = cu_of(b);
    const int chunks = (width + TK_CHUNK - 1) / TK_CHUNK, n = chunks * k;
    if (k < 1 || k > BE_TOPK_MAX || k > width || n > TK_FINAL) {
        if (!c->failed) {
            c->failed = 1;
            snprintf(c->why, sizeof c->why, "topk: k=%d over %d values is outside what the kernel takes", k, width);
        }
        return;
    }
    int p2 = 1;
    while (p2 < n) p2 *= 2;
    if (grow(c, &c->topk_part, sizeof(unsigned long long) * (size_t)n)) return;
    launch(c, k_topk_part, chunks, 512, 0, x->d, width, k, (unsigned long long *)c->topk_part.p);
    LAUNCHED(c, "topk");
    launch(c, k_topk_final, 1, 1024, sizeof(unsigned long long) * (size_t)p2, (const unsigned long long *)c->topk_part.p,
           n, p2, k, out->d);
    LAUNCHED(c, "topk");
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
    if (c->profile) {
        double total = 0;
        for (int i = 0; i < 48 && c->prof[i].name[0]; i++) total += c->prof[i].s;
        fprintf(stderr, "gem cuda profile (GPU time per op, each op run alone; no graph, no launch overlap):\n");
        for (int i = 0; i < 48 && c->prof[i].name[0]; i++)
            fprintf(stderr, "  %-34s %8ld calls %10.3f ms %5.1f%%  %8.2f us/call\n", c->prof[i].name, c->prof[i].calls,
                    c->prof[i].s * 1e3, 100 * c->prof[i].s / (total > 0 ? total : 1), 1e6 * c->prof[i].s / c->prof[i].calls);
    }
    scratch *s[] = {&c->xq, &c->xd,        &c->xs, &c->part,  &c->pml,    &c->amax_v,
                    &c->amax_i, &c->up, &c->topk_part, &c->xh, &c->xhinv};
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) cudaFree(s[i]->p);
    cudaFree(c->stage);
    cudaFree(c->dmax);
    cudaFree(c->step);
    cudaFreeHost(c->step_host);
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
    CS_PROFILE, CS_N
};
static const struct cu_setting {
    const char *name;
    long lo, hi, dflt;
} cu_settings[CS_N] = {
    {"GEM_CUDA_MMA", 0, 1, 1},          {"GEM_CUDA_MMH", 1, 2, 1},          {"GEM_CUDA_MV_SPLIT", 0, 1, 1},
    {"GEM_CUDA_NORM_WIDE", 0, 1, 1},    {"GEM_CUDA_ATTN_FUSE", 0, 1, 1},    {"GEM_CUDA_MV_STAGGER", 0, 99999, 500},
    {"GEM_CUDA_MV_LEVELS", 2, 64, 8},   {"GEM_CUDA_ATTN_DEC", 0, 3, 3},     {"GEM_CUDA_PDL", 0, 1, 1},
    {"GEM_CUDA_PROFILE", 0, 1, 0},
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
        (e = cudaFuncSetAttribute(k_topk_final, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (int)(sizeof(unsigned long long) * TK_FINAL))) != cudaSuccess ||
        (e = attn_allow_all()) != cudaSuccess ||
        (e = mmh_allow()) != cudaSuccess) {
        gem_err_set(err, "backend 'cuda': %s", cudaGetErrorString(e));
        free(c);
        return NULL;
    }
    c->gelu_fp16 = o && o->gelu_fp16;
    c->kv_f16 = o && o->kv_f16;
    backend *b = &c->base;
    b->name = "cuda";
    /* 2048: the 5376-row products of a 31B tile then fill 5 waves of the
     * 132 multiprocessors instead of 1.3 (k_mm_h's 128 x 128 tiles), for
     * ~0.5 GB more scratch */
    b->prompt_tile = 2048;
    b->destroy = cu_destroy;
    b->weight = cu_weight;
    b->weight_free = cu_weight_free;
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
    b->matmul = cu_matmul;
    b->matmul_geglu = cu_matmul_geglu;
    b->matmul_multi = cu_matmul_multi;
    b->rmsnorm_rope = cu_rmsnorm_rope;
    b->rope = cu_rope;
    b->geglu = cu_geglu;
    b->scale = cu_scale;
    b->softcap = cu_softcap;
    b->kv_new = cu_kv_new;
    b->kv_free = cu_kv_free;
    b->attention = cu_attention;
    b->kv_bytes = cu_kv_bytes;
    b->kv_save = cu_kv_save;
    b->kv_load = cu_kv_load;
    b->kv_stash = cu_kv_stash;
    b->kv_unstash = cu_kv_unstash;
    b->argmax = cu_argmax;
    b->topk = cu_topk;
    b->set_step = cu_set_step;
    /* tensor-core prefill is the default; GEM_CUDA_MMA=0 selects the dp4a
     * kernels (whose f32 order matches the CPU fast path: tests/cuda/run.sh) */
    c->mma = (int)set[CS_MMA];
    c->mmh_wgmma = set[CS_MMH] != 2;
    c->mv_split = (int)set[CS_MV_SPLIT];
    c->norm_wide = (int)set[CS_NORM_WIDE];
    c->attn_fuse = (int)set[CS_ATTN_FUSE];
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
    c->profile = (int)set[CS_PROFILE];
    if (c->profile && (CK(c, cudaEventCreate(&c->prof_ev[0])) || CK(c, cudaEventCreate(&c->prof_ev[1])))) {
        gem_err_set(err, "backend 'cuda': %s", c->why);
        cu_destroy(b);
        return NULL;
    }
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) c->mem_free0 = free_b;
    b->mem_used = cu_mem_used;
    b->capture = c->profile ? NULL : cu_capture;
    b->replay = cu_replay;
    b->graph_free = cu_graph_free;
    b->status = cu_status;
    return b;
}
