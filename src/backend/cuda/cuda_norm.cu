/* CUDA RMS norms (see cuda_ops.h; invariants in cuda_common.h): rmsnorm,
 * add_rmsnorm (the residual add) and add_rmsnorm_norm (the residual add
 * and the next norm in one pass over h). Rows of a width that is a
 * multiple of 4 run k_rmsnorm4 (the row in registers), others the plain
 * k_rmsnorm. A norm whose output feeds a product also writes that
 * output's 8-bit codes into the quantized-activation scratch
 * (k_quantize_act's arithmetic, block8_codes), so the product quantizes
 * nothing: the codes are exactly those it would have made. One-token rows
 * read their weights before the grid dependency wait (EARLY), which is
 * safe because no kernel writes them. */
#include "backend/cuda/cuda_common.h"
#include "backend/cuda/cuda_kquant.h"
#include "backend/cuda/cuda_ops.h"

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
 * launch). The last output written gets 8-bit codes when xq is set, and
 * k-quant codes per 256 values when kq is set.
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
                           int8_t *__restrict__ xq, float *__restrict__ xd, int *__restrict__ xs,
                           int8_t *__restrict__ kq, float *__restrict__ kd, int *__restrict__ ks) {
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
    if (w2) {
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
    /* kq set (width a multiple of 256): the k-quant codes of the row just
     * written, a warp per 256 values read back after the barrier (the
     * block's own stores are visible to it then), kq_act_block as
     * k_quantize_act_k makes them */
    if (kq) {
        __syncthreads();
        const float *row = (w2 ? out2 : out) + (size_t)blockIdx.x * width;
        const int nb = width / 256;
        const size_t b0 = (size_t)blockIdx.x * nb;
        for (int b = threadIdx.x >> 5; b < nb; b += blockDim.x >> 5)
            kq_act_block(row + 256 * b, lane, kq + (b0 + b) * 256, kd + b0 + b, ks + (b0 + b) * 16);
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

/* Returns bit 0 when the kernel also left the 8-bit codes of `out` in the
 * quantized-activation scratch (quant set, width a multiple of 32), bit 1
 * when also the k-quant codes (xkq/xkd/xks: k-quant weights loaded,
 * GEM_CUDA_KQ_NORM=1, width a multiple of 256, rows the one-token kernels
 * take). */
static int rmsnorm_launch(cuda_backend *c, const float *x, const float *w, int rows, int width, float eps, float *out,
                          int add, const float *scale, const float *w2, float *out2, int quant) {
    const int n4 = width / 4;
    if (width % 4 == 0 && n4 <= 8 * 256) {
        int8_t *xq = NULL, *kq = NULL;
        float *xd = NULL, *kd = NULL;
        int *xs = NULL, *ks = NULL;
        const size_t nblk = (size_t)rows * (size_t)(width / 32), kblk = (size_t)rows * (size_t)(width / 256);
        /* scratch only grows outside a capture (a step's scratch was sized
         * by the tiles before it; if not, the product quantizes itself) */
        if (quant && width % 32 == 0 &&
            codes_room(c, &c->xq, nblk * 32, &c->xd, nblk * sizeof(float), &c->xs, nblk * sizeof(int))) {
            xq = (int8_t *)c->xq.p;
            xd = (float *)c->xd.p;
            xs = (int *)c->xs.p;
        }
        /* not for prompt tiles the tensor cores take (mv_run: they read
         * f16 activations, not codes) */
        if (quant && c->kq_norm && c->kq_acts && width % 256 == 0 &&
            (rows <= BE_EXACT_ROWS || !(c->mma && c->mmh_wgmma)) &&
            codes_room(c, &c->xkq, kblk * 256, &c->xkd, kblk * sizeof(float), &c->xks, kblk * 16 * sizeof(int))) {
            kq = (int8_t *)c->xkq.p;
            kd = (float *)c->xkd.p;
            ks = (int *)c->xks.p;
        }
        int threads = (n4 + 31) / 32 * 32;
        if (threads > 256) threads = 256;
        int nv = (n4 + threads - 1) / threads;
#define NORM_LAUNCH(NV, E, T) \
    launch(c, k_rmsnorm4<NV, E, T>, rows, threads, 0, x, w, width, eps, out, add, scale, w2, out2, xq, xd, xs, kq, kd, ks)
#define NORM_LAUNCH_NV(E)                     \
    if (nv <= 1) NORM_LAUNCH(1, E, 256);      \
    else if (nv <= 2) NORM_LAUNCH(2, E, 256); \
    else if (nv <= 4) NORM_LAUNCH(4, E, 256); \
    else NORM_LAUNCH(8, E, 256)
        /* one-token rows, and the rows of tiles up to BE_EXACT_ROWS tokens
         * (which must be one-token rows bit for bit: backend.h rows_exact) */
        if (rows <= BE_EXACT_ROWS && c->norm_wide && n4 > 2 * 256) {
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
        } else if (rows <= BE_EXACT_ROWS) {
            NORM_LAUNCH_NV(true);
        } else {
            NORM_LAUNCH_NV(false);
        }
#undef NORM_LAUNCH_NV
#undef NORM_LAUNCH
        return (xq != NULL) | (kq != NULL) << 1;
    }
    launch(c, k_rmsnorm, rows, 256, 0, x, w, width, eps, out, add, scale);
    if (w2) launch(c, k_rmsnorm, rows, 256, 0, out, w2, width, eps, out2, 0, (const float *)NULL);
    return 0;
}


/* the activation caches of the codes rmsnorm_launch says it left */
static void norm_codes_set(cuda_backend *c, int quant, const float *out, int rows, int width) {
    if (quant & 1) quantized_cache_set(c, out, rows, width);
    if (quant & 2) act_cache_set(c, &c->xk_of, out, rows, width);
}

void cu_rmsnorm(backend *b, const be_buf *x, const be_weight *w, int rows, int width, float eps, be_buf *out) {
    cuda_backend *c = cu_of(b);
    /* normed rows are the input of the next products (q/k/v, gate/up, the
     * head): their 8-bit codes are made here, saving a launch per product */
    const int quant =
        rmsnorm_launch(c, x->d, w ? (const float *)w->q : NULL, rows, width, eps, out->d, 0, NULL, NULL, NULL, 1);
    LAUNCHED(c, "rmsnorm");
    norm_codes_set(c, quant, out->d, rows, width);
}

void cu_add_rmsnorm(backend *b, be_buf *h, const be_buf *x, const be_weight *w, int rows, int width, float eps,
                           const be_weight *s) {
    cuda_backend *c = cu_of(b);
    rmsnorm_launch(c, x->d, (const float *)w->q, rows, width, eps, h->d, 1, s ? (const float *)s->q : NULL, NULL, NULL,
                   0);
    LAUNCHED(c, "add_rmsnorm");
}

void cu_add_rmsnorm_norm(backend *b, be_buf *h, const be_buf *x, const be_weight *w, const be_weight *s,
                                const be_weight *w_next, int rows, int width, float eps, be_buf *out) {
    cuda_backend *c = cu_of(b);
    const int quant = rmsnorm_launch(c, x->d, (const float *)w->q, rows, width, eps, h->d, 1,
                                     s ? (const float *)s->q : NULL, (const float *)w_next->q, out->d, 1);
    LAUNCHED(c, "add_rmsnorm+rmsnorm");
    norm_codes_set(c, quant, out->d, rows, width);
}
