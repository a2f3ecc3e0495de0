/* CUDA backend (see cuda_backend.h and backend/backend.h).
 *
 * Invariants:
 * - One stream per backend; every op is enqueued on it in call order, so the
 *   seam's ordering is the stream's. Host-visible results come only from
 *   download/kv_save, which synchronise.
 * - Weights are resident after `weight`: f32/f16/bf16 as stored; q8_0 and
 *   q4_0 split into a contiguous code array (32 or 16 bytes per block, so a
 *   lane loads one block with 16-byte loads) and an f16 scale array; other
 *   GGUF types are expanded to f16 at load (correct, not yet fast).
 * - Position-dependent ops (embed, rope, attention) read the token ids and
 *   the first position from the device step buffer written by set_step, so a
 *   recorded decode step replays at any position. Their launch shapes depend
 *   only on n and the cache capacity, never on the position.
 * - Scratch buffers a recorded graph may point at (quantized activations,
 *   attention partials, argmax partials, the step buffer) only grow outside
 *   a capture; each growth bumps `generation`, which invalidates graphs.
 * - Errors are sticky: the first failing CUDA call is remembered and
 *   reported by status(); later ops still run but their results are void.
 * - Every kernel begins with pdl_wait() and is launched through launch()
 *   (programmatic dependent launch): a kernel touches memory only after the
 *   one before it on the stream has completed, as with plain launches.
 * - The quantized-activation scratch (xq/xd/xs) holds the 8-bit codes of
 *   one buffer, named by q_src/q_n/q_K and valid while `epoch` (bumped by
 *   every launch) equals q_epoch: set by a product that quantized its input
 *   and by the ops that produce a product's input (rmsnorm, the residual
 *   add + norm, the attention combine), which write the codes as they go.
 * - KV caches hold f32 entries, or f16 with backend_opts.kv_f16; the
 *   checkpoint blob is the cache's own bytes (f32: the CPU's layout).
 *
 * Numerics: q8_0/q4_0 products of decode steps (and of prefill tiles with
 * GEM_CUDA_MMA=0, K not a multiple of 128 or a scale that is inf/NaN) quantize the activations to 8 bits per 32-value block
 * exactly as the CPU fast path does (scale max|x|/127, round to nearest
 * even), so integer block sums are identical and only the f32 summation
 * order differs. Prefill tiles (more than 8 tokens) run on the tensor cores
 * with f16 operands and f32 sums: products (k_mm_h: f16 activations and
 * f16-expanded weights, relative 2^-11 each) and attention (k_attn_fa: f16
 * q, k, v and probabilities). Everything else is f32. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <utility>

#include "backend/cuda/cuda_backend.h"

extern "C" {
#include "quant/quant.h"
}

enum { DW_F32, DW_F16, DW_BF16, DW_Q8_0, DW_Q4_0 };

struct be_buf {
    float *d;
    size_t n;
};

struct be_weight {
    int fmt;
    int64_t ne0, ne1;
    void *q;   /* codes or plain values */
    __half *d; /* per-block scales (q8_0, q4_0) */
    float hexp; /* q8_0/q4_0: 2^we for k_mm_h (see there); 0: no f16 path (a scale is inf or NaN) */
};

struct be_kv {
    void *k, *v; /* [capacity][n_kv_head][head_dim], the CPU layout; f32, or f16 when f16 */
    int f16;
    int n_kv_head, head_dim, capacity, ring;
    int nsplit; /* attention splits of a one-token step */
};

struct be_graph {
    cudaGraphExec_t exec;
    unsigned generation;
};

/* A device scratch buffer that only grows (see the invariants above). */
typedef struct {
    void *p;
    size_t cap;
} scratch;

typedef struct {
    backend base;
    cudaStream_t st;
    cudaEvent_t step_copied;
    int failed;
    char why[512];
    int gelu_fp16;
    int capturing;
    unsigned generation;
    int *step;      /* device: pos0, n, ids[n] */
    int *step_host; /* pinned staging of the same */
    int step_cap;
    scratch xq, xd, xs;     /* quantized activations: codes, scales, code sums */
    scratch part, pml;      /* attention partials */
    scratch amax_v, amax_i; /* argmax partials */
    scratch up;             /* matmul_geglu's unfused path */
    scratch topk_part;      /* top-k: each chunk's first k keys */
    void *stage;            /* weight upload staging */
    unsigned *dmax;         /* device: the largest |scale| bits of the weight being uploaded */
    scratch xh, xhinv;      /* f16 activations of k_mm_h and their per-token 2^-ea */
    /* the f16-activation cache of k_mm_h, as the quantized one below */
    unsigned h_epoch;
    const float *h_src;
    int h_n, h_K;
    size_t stage_cap;
    /* GEM_CUDA_PROFILE=1: every op waits for the GPU; the GPU time between
     * an event recorded before its first launch and one after its last is
     * added to its op's row, printed at exit (no graphs then, so the launch
     * gaps of graph replay are not in these numbers) */
    int profile;
    int prof_open; /* prof_ev[0] recorded, op not yet LAUNCHED */
    cudaEvent_t prof_ev[2];
    /* the quantized-activation cache of matmul_into: valid while epoch,
     * bumped by every other op, is unchanged */
    unsigned epoch, q_epoch;
    const float *q_src;
    int q_n, q_K;
    /* prefill tiles of q8_0/q4_0 on the tensor cores (k_mm_q) unless
     * GEM_CUDA_MMA=0 */
    int mma;
    int mmh_variant; /* k_mm_h: 2 stages, 2 blocks per SM (GEM_CUDA_MMH=1: 3 stages, 1 block; =3: k_mm_w) */
    int mv_split;    /* one-token products of long rows split over warps (GEM_CUDA_MV_SPLIT=0: off) */
    int combine_wide; /* GEM_CUDA_COMBINE=2: k_attn_combine_wide for steps of up to 8 tokens */
    int fa_lb;        /* GEM_CUDA_FA_LB=4: k_attn_fa issues 4 loads per array before storing */
    int attn_v2;      /* GEM_CUDA_ATTN_V2=1: k_attn_split loads value pairs (heads of 384, 512) */
    int pdl; /* programmatic dependent launch (GEM_CUDA_PDL=0: off) */
    int kv_f16; /* new caches hold f16 entries (backend_opts.kv_f16) */
    size_t mem_free0; /* free device memory when the backend was created */
    struct {
        char name[48];
        double s;
        long calls;
    } prof[48];
} cuda_backend;

static cuda_backend *cu_of(backend *b) { return (cuda_backend *)b; }

static int cu_check(cuda_backend *c, cudaError_t e, const char *what) {
    if (e == cudaSuccess) return 0;
    if (!c->failed) {
        c->failed = 1;
        snprintf(c->why, sizeof c->why, "CUDA error in %s: %s", what, cudaGetErrorString(e));
    }
    return -1;
}
#define CK(c, call) cu_check((c), (call), #call)

static void launched(cuda_backend *c, const char *name) {
    c->epoch++;
    cu_check(c, cudaGetLastError(), name);
    if (!c->profile || !c->prof_open) return;
    c->prof_open = 0;
    float ms = 0;
    cudaEventRecord(c->prof_ev[1], c->st);
    cudaEventSynchronize(c->prof_ev[1]);
    cudaEventElapsedTime(&ms, c->prof_ev[0], c->prof_ev[1]);
    for (int i = 0; i < 48; i++) {
        if (!c->prof[i].name[0]) snprintf(c->prof[i].name, sizeof c->prof[i].name, "%s", name);
        if (!strcmp(c->prof[i].name, name)) {
            c->prof[i].s += ms * 1e-3;
            c->prof[i].calls++;
            break;
        }
    }
}
#define LAUNCHED(c, name) launched((c), (name))

static int grow(cuda_backend *c, scratch *s, size_t bytes) {
    if (bytes <= s->cap) return 0;
    if (c->capturing) {
        if (!c->failed) {
            c->failed = 1;
            snprintf(c->why, sizeof c->why, "internal: scratch buffer grew during graph capture");
        }
        return -1;
    }
    size_t cap = s->cap ? s->cap : 4096;
    while (cap < bytes) cap *= 2;
    if (s->p) CK(c, cudaStreamSynchronize(c->st)), CK(c, cudaFree(s->p));
    s->p = NULL;
    s->cap = 0;
    if (CK(c, cudaMalloc(&s->p, cap))) return -1;
    s->cap = cap;
    c->generation++;
    return 0;
}

/* Launches on the backend's stream (see pdl_wait). */
template <typename... P, typename... A>
static void launch(cuda_backend *c, void (*kern)(P...), dim3 grid, dim3 block, size_t smem, A &&...args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = c->st;
    cudaLaunchAttribute at[1] = {};
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = c->pdl ? 1 : 0;
    if (c->profile && !c->prof_open) {
        c->prof_open = 1;
        cudaEventRecord(c->prof_ev[0], c->st);
    }
    const cudaError_t e = cudaLaunchKernelEx(&cfg, kern, std::forward<A>(args)...);
    if (e != cudaSuccess) cu_check(c, e, "kernel launch");
}

static inline unsigned blocks_for(size_t n, unsigned threads) { return (unsigned)((n + threads - 1) / threads); }

/* ------------------------------------------------------------------ */
/* launches                                                            */

/* Programmatic dependent launch: every kernel of the stream is launched
 * with programmatic stream serialization, so the next kernel's launch and
 * block scheduling overlap the end of the one before. Safety: every kernel
 * starts with pdl_wait() (griddepcontrol.wait returns once the previous
 * grid has completed and its memory is visible; a no-op for plain
 * launches) before it reads or writes anything, so all ordering is the
 * stream's; pdl_wait() then lets the next grid be scheduled. GEM_CUDA_PDL=0
 * turns it off. */
__device__ __forceinline__ void pdl_wait() {
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

/* ------------------------------------------------------------------ */
/* reductions                                                          */

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ int warp_isum(int v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Sum over a block of blockDim.x threads (a multiple of 32, at most 1024). */
__device__ float block_sum(float v, float *sh) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    float t = 0;
    for (int i = 0; i < nw; i++) t += sh[i];
    return t;
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
    pdl_wait();
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

/* One block per row. add: h += rmsnorm(x) * w (x unchanged); else out = rmsnorm(x) * (w or 1).
 *
 * Rows whose width is a multiple of 4 (every row of the supported models)
 * are read once into registers, NV float4 per thread, every load issued
 * before the first use: a one-token step's norms are single rows, bound by
 * memory latency, not bandwidth. `out` may be `x` (each element is read
 * before its own store, by the same thread). Other widths take the plain
 * loop. */
/* The 8-bit codes of one 32-value block held as float4s by 8 consecutive
 * lanes (lane & 7 = 0 holds the first four): the arithmetic of
 * k_quantize_act, so a product reading them sees identical codes. */
__device__ __forceinline__ void quantize_block8(float4 v, int64_t blk, int8_t *q, float *d, int *s, bool valid) {
    float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
#pragma unroll
    for (int o = 4; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float id = amax > 0 ? 127.0f / amax : 0.0f;
    const int c0 = __float2int_rn(v.x * id), c1 = __float2int_rn(v.y * id), c2 = __float2int_rn(v.z * id),
              c3 = __float2int_rn(v.w * id);
    const int lane8 = threadIdx.x & 7;
    if (valid)
        ((char4 *)q)[blk * 8 + lane8] = make_char4((signed char)c0, (signed char)c1, (signed char)c2, (signed char)c3);
    int sum = c0 + c1 + c2 + c3;
#pragma unroll
    for (int o = 4; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (valid && lane8 == 0) {
        d[blk] = amax / 127.0f;
        s[blk] = sum;
    }
}

/* Stage 1: out = rmsnorm(x) w, or with add: out += rmsnorm(x) w, then
 * times scale. Stage 2 (w2 set): out2 = rmsnorm(out) w2 from the values
 * still in registers (a residual add and the next layer's norm in one
 * launch). The last output written gets 8-bit codes when xq is set. */
template <int NV>
__global__ void k_rmsnorm4(const float *x, const float *__restrict__ w, int width, float eps, float *out, int add,
                           const float *__restrict__ scale, const float *__restrict__ w2, float *__restrict__ out2,
                           int8_t *__restrict__ xq, float *__restrict__ xd, int *__restrict__ xs) {
    pdl_wait();
    __shared__ float sh[32];
    const int n4 = width / 4, lane = threadIdx.x & 31;
    const float4 *xr = (const float4 *)(x + (size_t)blockIdx.x * width);
    float4 v[NV];
    float ss = 0;
#pragma unroll
    for (int i = 0; i < NV; i++) {
        const int idx = threadIdx.x + i * blockDim.x;
        v[i] = idx < n4 ? xr[idx] : make_float4(0, 0, 0, 0);
    }
#pragma unroll
    for (int i = 0; i < NV; i++) ss += v[i].x * v[i].x + v[i].y * v[i].y + v[i].z * v[i].z + v[i].w * v[i].w;
    ss = block_sum(ss, sh);
    const float r = 1.0f / sqrtf(ss / (float)width + eps);
    const float sc = add && scale ? scale[0] : 1.0f;
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
    /* whole warps stay in these loops while any lane has values: the block
     * quantization shuffles across 8 lanes (widths are multiples of 32 when
     * it runs, so a 32-value block is all in or all out); values past the
     * end stay zero */
#pragma unroll
    for (int i = 0; i < NV; i++) {
        const int idx = threadIdx.x + i * blockDim.x;
        if (idx - lane >= n4) break;
        const float4 wv = idx < n4 && w ? ((const float4 *)w)[idx] : make_float4(1, 1, 1, 1);
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
        const float4 wv = idx < n4 ? ((const float4 *)w2)[idx] : make_float4(1, 1, 1, 1);
        const float4 t = make_float4(v[i].x * r2 * wv.x, v[i].y * r2 * wv.y, v[i].z * r2 * wv.z, v[i].w * r2 * wv.w);
        if (idx < n4) o2[idx] = t;
        if (xq) quantize_block8(t, ((int64_t)blockIdx.x * n4 + idx) / 8, xq, xd, xs, idx < n4);
    }
}

__global__ void k_rmsnorm(const float *x, const float *w, int width, float eps, float *out, int add, const float *scale) {
    pdl_wait();
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
        const int nv = (n4 + threads - 1) / threads;
        if (nv <= 1) launch(c, k_rmsnorm4<1>, rows, threads, 0, x, w, width, eps, out, add, scale, w2, out2, xq, xd, xs);
        else if (nv <= 2) launch(c, k_rmsnorm4<2>, rows, threads, 0, x, w, width, eps, out, add, scale, w2, out2, xq, xd, xs);
        else if (nv <= 4) launch(c, k_rmsnorm4<4>, rows, threads, 0, x, w, width, eps, out, add, scale, w2, out2, xq, xd, xs);
        else launch(c, k_rmsnorm4<8>, rows, threads, 0, x, w, width, eps, out, add, scale, w2, out2, xq, xd, xs);
        return xq != NULL;
    }
    launch(c, k_rmsnorm, rows, 256, 0, x, w, width, eps, out, add, scale);
    if (w2) launch(c, k_rmsnorm, rows, 256, 0, out, w2, width, eps, out2, 0, (const float *)NULL);
    return 0;
}

/* After a launch that left the 8-bit codes of buffer p (n rows of K) in the
 * scratch: the next product of p reuses them (see mv_run). */
static void quantized_cache_set(cuda_backend *c, const float *p, int n, int K) {
    c->q_src = p;
    c->q_n = n;
    c->q_K = K;
    c->q_epoch = c->epoch;
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

/* The one GELU of this file (the fused matmul epilogue uses it too, so
 * fused and unfused gating round identically). */
__device__ __forceinline__ float gelu_tanh_f(float x) {
    const float k = 0.7978845608028654f;
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

__global__ void k_geglu(const float *g, const float *u, size_t n, float *out, int fp16) {
    pdl_wait();
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

static void cu_geglu(backend *b, const be_buf *gate, const be_buf *up, size_t n, be_buf *out) {
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
    pdl_wait();
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
        float theta = pos;
        for (int m = 0; m < j; m++) theta *= theta_scale;
        const float t = ff ? theta / ff[j] : theta;
        cs[2 * j] = cosf(t);
        cs[2 * j + 1] = sinf(t);
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < heads * half; idx += blockDim.x) {
        const int h = idx / half, j = idx % half;
        float *v = x + ((size_t)i * heads + h) * d;
        const float x0 = v[j], x1 = v[j + half];
        v[j] = x0 * cs[2 * j] - x1 * cs[2 * j + 1];
        v[j + half] = x0 * cs[2 * j + 1] + x1 * cs[2 * j];
    }
}

static void cu_rope(backend *b, be_buf *x, int n, int heads, int d, int n_rot, int pos0, float base,
                    const be_weight *ff) {
    cuda_backend *c = cu_of(b);
    (void)pos0; /* read from the step buffer */
    const float theta_scale = powf(base, -2.0f / (float)n_rot);
    launch(c, k_rope, n, 256, sizeof(float) * (size_t)n_rot, x->d, heads, d, n_rot, c->step, theta_scale,
                                                             ff ? (const float *)ff->q : NULL);
    LAUNCHED(c, "rope");
}

/* rmsnorm + rope of one (token, head) row per block: the row is normalised
 * into shared memory, then rotated pairwise; the arithmetic of each step is
 * that of k_rmsnorm and k_rope. */
/* rmsnorm (+ rope when rope) of one head row v of d values, by the block;
 * the arithmetic of k_rmsnorm and k_rope. */
__device__ __forceinline__ void head_norm_rope(float *v, const float *w, int d, float eps, float pos, float theta_scale,
                                               const float *ff, bool rope, float *row, float *sh) {
    const int half = d / 2;
    float ss = 0;
    for (int k = threadIdx.x; k < d; k += blockDim.x) ss += v[k] * v[k];
    ss = block_sum(ss, sh);
    const float r = 1.0f / sqrtf(ss / (float)d + eps);
    if (!rope) {
        for (int k = threadIdx.x; k < d; k += blockDim.x) v[k] = w ? v[k] * r * w[k] : v[k] * r;
        return;
    }
    for (int k = threadIdx.x; k < d; k += blockDim.x) row[k] = w ? v[k] * r * w[k] : v[k] * r;
    __syncthreads();
    for (int j = threadIdx.x; j < half; j += blockDim.x) {
        float theta = pos;
        for (int m = 0; m < j; m++) theta *= theta_scale;
        const float t = ff ? theta / ff[j] : theta;
        const float cs = cosf(t), sn = sinf(t), x0 = row[j], x1 = row[j + half];
        v[j] = x0 * cs - x1 * sn;
        v[j + half] = x0 * sn + x1 * cs;
    }
}

/* rmsnorm + rope of one (token, head) row per block: the row is normalised
 * into shared memory, then rotated pairwise. */
__global__ void k_rmsnorm_rope(float *x, const float *w, int heads, int d, float eps, const int *step, float theta_scale,
                               const float *ff) {
    pdl_wait();
    extern __shared__ float row[];
    __shared__ float sh[32];
    const int i = blockIdx.x / heads;
    head_norm_rope(x + (size_t)blockIdx.x * d, w, d, eps, (float)(step[0] + i), theta_scale, ff, true, row, sh);
}

/* The q, k and v rows of a layer in one launch: blocks [0, n nh) take q
 * rows (weight qw, rope), the next n kvh k rows (weight kw, rope), the last
 * n kvh v rows (no weight, no rope). */
__global__ void k_qkv_norm_rope(float *q, const float *qw, float *k, const float *kw, float *v, int n, int nh, int kvh,
                                int d, float eps, const int *step, float theta_scale, const float *ff) {
    pdl_wait();
    extern __shared__ float row[];
    __shared__ float sh[32];
    int bid = blockIdx.x;
    const int pos0 = step[0];
    if (bid < n * nh) {
        head_norm_rope(q + (size_t)bid * d, qw, d, eps, (float)(pos0 + bid / nh), theta_scale, ff, true, row, sh);
        return;
    }
    bid -= n * nh;
    if (bid < n * kvh) {
        head_norm_rope(k + (size_t)bid * d, kw, d, eps, (float)(pos0 + bid / kvh), theta_scale, ff, true, row, sh);
        return;
    }
    bid -= n * kvh;
    head_norm_rope(v + (size_t)bid * d, NULL, d, eps, 0.0f, theta_scale, ff, false, row, sh);
}

static void cu_qkv_norm_rope(backend *b, be_buf *q, const be_weight *qw, be_buf *k, const be_weight *kw, be_buf *v,
                             int n, int n_head, int n_kv_head, int d, float eps, int pos0, float base,
                             const be_weight *ff) {
    cuda_backend *c = cu_of(b);
    (void)pos0; /* read from the step buffer */
    const float theta_scale = powf(base, -2.0f / (float)d);
    launch(c, k_qkv_norm_rope, n * (n_head + 2 * n_kv_head), 128, sizeof(float) * (size_t)d, 
        q->d, qw ? (const float *)qw->q : NULL, k->d, kw ? (const float *)kw->q : NULL, v->d, n, n_head, n_kv_head, d,
        eps, c->step, theta_scale, ff ? (const float *)ff->q : NULL);
    LAUNCHED(c, "q/k/v norm+rope");
}

static void cu_rmsnorm_rope(backend *b, be_buf *x, const be_weight *w, int n, int heads, int d, float eps, int pos0,
                            float base, const be_weight *ff) {
    cuda_backend *c = cu_of(b);
    (void)pos0; /* read from the step buffer */
    const float theta_scale = powf(base, -2.0f / (float)d);
    launch(c, k_rmsnorm_rope, n * heads, 128, sizeof(float) * (size_t)d, 
        x->d, w ? (const float *)w->q : NULL, heads, d, eps, c->step, theta_scale, ff ? (const float *)ff->q : NULL);
    LAUNCHED(c, "rmsnorm+rope");
}

/* ------------------------------------------------------------------ */
/* matrix products                                                     */

/* Activations to 8-bit codes per 32-value block: one warp per block. */
/* Block blk of 32 values, one per lane of a full warp: its 8-bit codes,
 * scale and code sum (the CPU fast path's quantize_act arithmetic). Also
 * used by the kernels that produce a product's input as they write it. */
__device__ __forceinline__ void quantize_block32(float v, size_t blk, int lane, int8_t *q, float *d, int *s) {
    const float amax = warp_max(fabsf(v));
    const float id = amax > 0 ? 127.0f / amax : 0.0f;
    const int code = __float2int_rn(v * id);
    q[blk * 32 + lane] = (int8_t)code;
    const int sum = warp_isum(code);
    if (lane == 0) {
        d[blk] = amax / 127.0f;
        s[blk] = sum;
    }
}

__global__ void k_quantize_act(const float *x, int64_t nblk, int8_t *q, float *d, int *s) {
    pdl_wait();
    const int64_t blk = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (blk >= nblk) return;
    quantize_block32(x[blk * 32 + lane], (size_t)blk, lane, q, d, s);
}

/* Launch shape of the matrix-vector kernels (overridable for tuning runs,
 * e.g. make NVEXTRA=-DMV_WARPS=8). */
#ifndef MV_WARPS
#define MV_WARPS 4 /* warps per block */
#endif
#ifndef MV_ROWS
#define MV_ROWS 2 /* output rows per warp: each activation block loaded serves all */
#endif
#define MV_MAXT 8 /* tokens per launch */
static_assert(MV_WARPS % 4 == 0, "the row split shares a row among 2 or 4 warps of a block");

/* Matrix-vector products (n <= MV_MAXT tokens per launch).
 *
 * One launch serves up to three matrices that share the input (q, k, v):
 * blocks are dealt to the matrices in order. A warp owns MV_ROWS output
 * rows; in `pair` mode (gate/up with GELU gating fused) its two rows are
 * row R of matrix 0 (gate) and row R of matrix 1 (up), and it writes
 * gelu_tanh(gate) * up. Lane L takes blocks L, L+32, ... of each row,
 * MV_UNROLL at a time with every weight load issued before the first use
 * (memory-level parallelism is what a product at the bandwidth roofline
 * needs).
 *
 * q8_0/q4_0: 16 (q4_0) or 32 (q8_0) contiguous code bytes per block, so a
 * warp's loads of one row are contiguous 512- or 1024-byte runs; integer dot
 * products (dp4a) per block, then one f32 multiply-add with
 * scale(w) * scale(x), the CPU fast path's arithmetic.
 * f32/f16/bf16: lane L takes 8 consecutive values at 8L, 8L + 256, ... */
#ifndef MV_UNROLL
#define MV_UNROLL 4
#endif
#ifndef MV_UNROLL_Q4
#define MV_UNROLL_Q4 8 /* q4_0 blocks are half the bytes: twice as many in flight (+3% decode, 31B) */
#endif

typedef struct {
    const void *q;
    const __half *d;
    float *out;
    int M;      /* rows */
    int blocks; /* thread blocks dealt to this matrix */
} mv_mat;

typedef struct {
    mv_mat m[3];
    int count;
    int pair;
} mv_job;

/* The rows of this warp: per slot a matrix base and a row index; *mi is the
 * matrix of slot 0 (its out/M receive the results). */
struct mv_rows {
    const void *q[MV_ROWS];
    const __half *d[MV_ROWS];
    int row[MV_ROWS];
    float *out;
    int M, row0;
};

/* Fields are picked with selects, never by indexing job.m with a run-time
 * index: that would copy the parameter struct to local memory (a stack
 * frame, measured 8% slower decode). */
template <int SP = 1>
__device__ __forceinline__ bool mv_rows_of(const mv_job &job, mv_rows &r) {
    int bid = blockIdx.x, mi = 0;
    if (job.count > 1 && bid >= job.m[0].blocks) bid -= job.m[0].blocks, mi = 1;
    if (job.count > 2 && mi == 1 && bid >= job.m[1].blocks) bid -= job.m[1].blocks, mi = 2;
    const void *mq = mi == 0 ? job.m[0].q : mi == 1 ? job.m[1].q : job.m[2].q;
    const __half *md = mi == 0 ? job.m[0].d : mi == 1 ? job.m[1].d : job.m[2].d;
    const int M = mi == 0 ? job.m[0].M : mi == 1 ? job.m[1].M : job.m[2].M;
    const int warp = bid * (MV_WARPS / SP) + (threadIdx.x >> 5) / SP;
    r.out = mi == 0 ? job.m[0].out : mi == 1 ? job.m[1].out : job.m[2].out;
    r.M = M;
    if (job.pair) {
        r.row0 = warp;
        if (warp >= M) return false;
#pragma unroll
        for (int k = 0; k < MV_ROWS; k++) {
            r.q[k] = k == 0 ? job.m[0].q : job.m[1].q;
            r.d[k] = k == 0 ? job.m[0].d : job.m[1].d;
            r.row[k] = warp;
        }
    } else {
        r.row0 = warp * MV_ROWS;
        if (r.row0 >= M) return false;
#pragma unroll
        for (int k = 0; k < MV_ROWS; k++) {
            r.q[k] = mq;
            r.d[k] = md;
            r.row[k] = min(r.row0 + k, M - 1);
        }
    }
    return true;
}

template <int NT>
__device__ __forceinline__ void mv_store(const mv_job &job, const mv_rows &r, float (&acc)[MV_ROWS][NT]) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int k = 0; k < MV_ROWS; k++)
#pragma unroll
        for (int t = 0; t < NT; t++) acc[k][t] = warp_sum(acc[k][t]);
    if (lane != 0) return;
#pragma unroll
    for (int t = 0; t < NT; t++) {
        if (job.pair) {
            r.out[(size_t)t * r.M + r.row0] = gelu_tanh_f(acc[0][t]) * acc[1][t];
        } else {
#pragma unroll
            for (int k = 0; k < MV_ROWS; k++)
                if (r.row0 + k < r.M) r.out[(size_t)t * r.M + r.row0 + k] = acc[k][t];
        }
    }
}

/* SP > 1 (one-token steps of rows of 8192 values or more; GEM_CUDA_MV_SPLIT=0
 * turns it off): SP
 * consecutive warps share a warp's rows, part P taking blocks 32P + L,
 * 32P + L + 32 SP, ...; a compile-time stride keeps the loads' immediate
 * offsets (a run-time one cost the unsplit kernel 7.5%), and SP = 1 is the
 * plain kernel (same PTX). The parts meet in shared memory and part 0 adds
 * them in a fixed order. It lets the 5376-row o and down products (1.27
 * waves of 4 blocks per SM unsplit) fill the machine: 31B Q4_0 decode 120.4
 * vs 111.0 tok/s. */
template <int Q4, int NT, int SP>
__global__ void __launch_bounds__(MV_WARPS * 32)
    k_mv_q(mv_job job, const int8_t *__restrict__ xq, const float *__restrict__ xd, const int *__restrict__ xs, int K) {
    pdl_wait();
    mv_rows r;
    const bool valid = mv_rows_of<SP>(job, r);
    if (SP == 1 && !valid) return;
    constexpr int U = Q4 ? MV_UNROLL_Q4 : MV_UNROLL;
    const int lane = threadIdx.x & 31, nb = valid ? K / 32 : 0, part = SP > 1 ? (threadIdx.x >> 5) % SP : 0;
    float acc[MV_ROWS][NT];
#pragma unroll
    for (int k = 0; k < MV_ROWS; k++)
#pragma unroll
        for (int t = 0; t < NT; t++) acc[k][t] = 0;
    for (int b0 = 32 * part + lane; b0 < nb; b0 += 32 * SP * U) {
        uint4 w0[U][MV_ROWS], w1[U][MV_ROWS];
        float dw[U][MV_ROWS];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int b = b0 + 32 * SP * u;
#pragma unroll
            for (int k = 0; k < MV_ROWS; k++) {
                if (b < nb) {
                    const size_t blk = (size_t)r.row[k] * nb + b;
                    const uint8_t *q = (const uint8_t *)r.q[k];
                    w0[u][k] = __ldg((const uint4 *)(q + blk * (Q4 ? 16 : 32)));
                    if (!Q4) w1[u][k] = __ldg((const uint4 *)(q + blk * 32 + 16));
                    dw[u][k] = __half2float(r.d[k][blk]);
                }
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int b = b0 + 32 * SP * u;
            if (b >= nb) break;
#pragma unroll
            for (int t = 0; t < NT; t++) {
                const int4 *xv = (const int4 *)(xq + (size_t)t * K + (size_t)b * 32);
                const int4 x0 = __ldg(xv), x1 = __ldg(xv + 1);
                const float dx = __ldg(xd + (size_t)t * nb + b);
                const int sx = __ldg(xs + (size_t)t * nb + b);
#pragma unroll
                for (int k = 0; k < MV_ROWS; k++) {
                    int sum = 0;
                    if (Q4) {
                        const unsigned m = 0x0F0F0F0Fu;
                        const uint4 w = w0[u][k];
                        sum = __dp4a((int)(w.x & m), x0.x, sum);
                        sum = __dp4a((int)(w.y & m), x0.y, sum);
                        sum = __dp4a((int)(w.z & m), x0.z, sum);
                        sum = __dp4a((int)(w.w & m), x0.w, sum);
                        sum = __dp4a((int)((w.x >> 4) & m), x1.x, sum);
                        sum = __dp4a((int)((w.y >> 4) & m), x1.y, sum);
                        sum = __dp4a((int)((w.z >> 4) & m), x1.z, sum);
                        sum = __dp4a((int)((w.w >> 4) & m), x1.w, sum);
                        sum -= 8 * sx; /* codes are stored +8 */
                    } else {
                        const uint4 a = w0[u][k], c = w1[u][k];
                        sum = __dp4a((int)a.x, x0.x, sum);
                        sum = __dp4a((int)a.y, x0.y, sum);
                        sum = __dp4a((int)a.z, x0.z, sum);
                        sum = __dp4a((int)a.w, x0.w, sum);
                        sum = __dp4a((int)c.x, x1.x, sum);
                        sum = __dp4a((int)c.y, x1.y, sum);
                        sum = __dp4a((int)c.z, x1.z, sum);
                        sum = __dp4a((int)c.w, x1.w, sum);
                    }
                    acc[k][t] += dw[u][k] * dx * (float)sum;
                }
            }
        }
    }
    if (SP > 1) {
        __shared__ float parts[MV_WARPS][MV_ROWS][NT];
#pragma unroll
        for (int k = 0; k < MV_ROWS; k++)
#pragma unroll
            for (int t = 0; t < NT; t++) {
                const float v = warp_sum(acc[k][t]);
                if (lane == 0) parts[threadIdx.x >> 5][k][t] = v;
            }
        __syncthreads();
        if (!valid || part != 0) return;
        const int w0 = threadIdx.x >> 5;
#pragma unroll
        for (int k = 0; k < MV_ROWS; k++)
#pragma unroll
            for (int t = 0; t < NT; t++) {
                float v = parts[w0][k][t];
#pragma unroll
                for (int p = 1; p < SP; p++) v += parts[w0 + p][k][t];
                acc[k][t] = lane == 0 ? v : 0.0f; /* mv_store sums the lanes */
            }
    }
    mv_store<NT>(job, r, acc);
}

template <int FMT, int NT>
__global__ void __launch_bounds__(MV_WARPS * 32) k_mv_f(mv_job job, const float *__restrict__ x, int K) {
    pdl_wait();
    mv_rows r;
    if (!mv_rows_of(job, r)) return;
    const int lane = threadIdx.x & 31;
    float acc[MV_ROWS][NT];
#pragma unroll
    for (int k = 0; k < MV_ROWS; k++)
#pragma unroll
        for (int t = 0; t < NT; t++) acc[k][t] = 0;
    for (int e = lane * 8; e < K; e += 256) {
        float w[MV_ROWS][8];
#pragma unroll
        for (int k = 0; k < MV_ROWS; k++) {
            const size_t base = (size_t)r.row[k] * K + e;
            if (FMT == DW_F32) {
                const float4 a = __ldg((const float4 *)((const float *)r.q[k] + base)),
                             c = __ldg((const float4 *)((const float *)r.q[k] + base + 4));
                w[k][0] = a.x, w[k][1] = a.y, w[k][2] = a.z, w[k][3] = a.w;
                w[k][4] = c.x, w[k][5] = c.y, w[k][6] = c.z, w[k][7] = c.w;
            } else {
                const uint4 raw = __ldg((const uint4 *)((const uint16_t *)r.q[k] + base));
                const unsigned u[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    if (FMT == DW_F16) {
                        const float2 f = __half22float2(*(const __half2 *)&u[j]);
                        w[k][2 * j] = f.x, w[k][2 * j + 1] = f.y;
                    } else {
                        w[k][2 * j] = __uint_as_float(u[j] << 16);
                        w[k][2 * j + 1] = __uint_as_float(u[j] & 0xFFFF0000u);
                    }
                }
            }
        }
#pragma unroll
        for (int t = 0; t < NT; t++) {
            const float4 a = __ldg((const float4 *)(x + (size_t)t * K + e)),
                         c = __ldg((const float4 *)(x + (size_t)t * K + e + 4));
            const float xv[8] = {a.x, a.y, a.z, a.w, c.x, c.y, c.z, c.w};
#pragma unroll
            for (int k = 0; k < MV_ROWS; k++)
#pragma unroll
                for (int j = 0; j < 8; j++) acc[k][t] = fmaf(w[k][j], xv[j], acc[k][t]);
        }
    }
    mv_store<NT>(job, r, acc);
}

/* Prefill tiles (n > MV_MAXT tokens): q8_0/q4_0 weights against 8-bit
 * activations on the tensor cores, mma.sync m16n8k32 with s8 operands and
 * s32 results. One 32-value block is exactly one k-step, so each mma gives
 * the exact integer block sums of the dp4a path (q4_0 codes made signed,
 * code - 8, when loaded), scaled per block by d(w) d(x) into f32: the
 * matrix-vector arithmetic, in another f32 order. Block tile 64 rows x 64
 * tokens, four warps of 32 x 32 (2 x 4 mma tiles). Fragments are read
 * straight from global memory (each thread's words of a block are 4-byte
 * aligned); rows and tokens past the ends are clamped on load and skipped
 * on store.
 *
 * Fragment layout (PTX ISA, m16n8k32 .s8): g = lane / 4, c = lane % 4;
 * A: a0 = row g, k 4c..4c+3; a1 = row g+8, same k; a2, a3 = the same rows
 * at k + 16. B: b0 = token g, k 4c..4c+3; b1 = k + 16. C: c0/c1 = row g,
 * tokens 2c, 2c+1; c2/c3 = row g+8. */
#define MM_ROWS 64
#define MM_TOKS 64

__device__ __forceinline__ void mma_s8(int (&c)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0,
                                       unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

template <int Q4>
__global__ void __launch_bounds__(128)
    k_mm_q(const uint8_t *__restrict__ q, const __half *__restrict__ d, const int8_t *__restrict__ xq,
           const float *__restrict__ xd, int K, int M, int N, float *__restrict__ out) {
    pdl_wait();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
    const int row_base = blockIdx.x * MM_ROWS + (warp >> 1) * 32, tok_base = blockIdx.y * MM_TOKS + (warp & 1) * 32;
    const int nb = K / 32;
    float acc[2][4][4];
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[mi][ni][e] = 0;
    int rows[2][2], toks[4], cols[4][2];
#pragma unroll
    for (int mi = 0; mi < 2; mi++) {
        rows[mi][0] = min(row_base + mi * 16 + g, M - 1);
        rows[mi][1] = min(row_base + mi * 16 + g + 8, M - 1);
    }
#pragma unroll
    for (int ni = 0; ni < 4; ni++) {
        toks[ni] = min(tok_base + ni * 8 + g, N - 1);
        cols[ni][0] = min(tok_base + ni * 8 + 2 * c, N - 1);
        cols[ni][1] = min(tok_base + ni * 8 + 2 * c + 1, N - 1);
    }
    for (int b = 0; b < nb; b++) {
        unsigned a[2][4];
        float dw[2][2];
#pragma unroll
        for (int mi = 0; mi < 2; mi++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const size_t blk = (size_t)rows[mi][h] * nb + b;
                if (Q4) {
                    const unsigned w = __ldg((const unsigned *)(q + blk * 16) + c);
                    a[mi][h] = __vsub4(w & 0x0F0F0F0Fu, 0x08080808u);
                    a[mi][h + 2] = __vsub4((w >> 4) & 0x0F0F0F0Fu, 0x08080808u);
                } else {
                    a[mi][h] = __ldg((const unsigned *)(q + blk * 32) + c);
                    a[mi][h + 2] = __ldg((const unsigned *)(q + blk * 32) + 4 + c);
                }
                dw[mi][h] = __half2float(d[blk]);
            }
#pragma unroll
        for (int ni = 0; ni < 4; ni++) {
            const unsigned *xv = (const unsigned *)(xq + (size_t)toks[ni] * K + (size_t)b * 32);
            const unsigned b0 = __ldg(xv + c), b1 = __ldg(xv + 4 + c);
            const float dx0 = __ldg(xd + (size_t)cols[ni][0] * nb + b), dx1 = __ldg(xd + (size_t)cols[ni][1] * nb + b);
#pragma unroll
            for (int mi = 0; mi < 2; mi++) {
                int r[4] = {0, 0, 0, 0};
                mma_s8(r, a[mi][0], a[mi][1], a[mi][2], a[mi][3], b0, b1);
                acc[mi][ni][0] += dw[mi][0] * dx0 * (float)r[0];
                acc[mi][ni][1] += dw[mi][0] * dx1 * (float)r[1];
                acc[mi][ni][2] += dw[mi][1] * dx0 * (float)r[2];
                acc[mi][ni][3] += dw[mi][1] * dx1 * (float)r[3];
            }
        }
    }
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int row = row_base + mi * 16 + g + (e >= 2 ? 8 : 0), tok = tok_base + ni * 8 + 2 * c + (e & 1);
                if (row < M && tok < N) out[(size_t)tok * M + row] = acc[mi][ni][e];
            }
}

/* The same products staged through shared memory (the prefill kernel when
 * K is a multiple of 32 MMT_KS): block tile MMT_BM rows x MMT_BN tokens,
 * eight warps of 64 x 32, and per pipeline stage MMT_KS 32-value blocks of
 * codes and scales copied with cp.async, MMT_STAGES stages in flight, so
 * each weight and activation byte crosses from global memory once per
 * block tile and the tensor cores are fed from shared memory. Rows of
 * shared memory are padded by 16 bytes so the fragment reads of a warp
 * (8 rows x 4 words) fall into 32 distinct banks. Grid x walks the token
 * tiles, so the blocks that share a weight tile run together and read it
 * from memory once between them. Block sums become f32 with the exact
 * 2^23 trick (|sum| < 2^22) instead of the slower integer-to-float
 * conversion; scaling and summation order are those of k_mm_q. */
#define MMT_BM 128
#define MMT_BN 128
#define MMT_KS 4
#define MMT_STAGES 3
#define MMT_THREADS 256
#ifndef MMT_MINB
#define MMT_MINB 1 /* blocks per SM the register budget is sized for */
#endif

template <int Q4> struct mmt_geom {
    static constexpr int WB = Q4 ? 16 : 32;           /* code bytes per weight block */
    static constexpr int A_STRIDE = MMT_KS * WB + 16; /* smem bytes per weight row */
    static constexpr int B_STRIDE = MMT_KS * 32 + 16; /* smem bytes per token */
    static constexpr int A_BYTES = MMT_BM * A_STRIDE;
    static constexpr int B_BYTES = MMT_BN * B_STRIDE;
    static constexpr int AS_BYTES = MMT_BM * MMT_KS * 2; /* f16 weight scales */
    static constexpr int BS_BYTES = MMT_BN * MMT_KS * 4; /* f32 activation scales */
    static constexpr int STAGE = A_BYTES + B_BYTES + AS_BYTES + BS_BYTES;
    static constexpr int SMEM = STAGE * MMT_STAGES;
};

__device__ __forceinline__ void cp_async16(void *smem, const void *gmem) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
__device__ __forceinline__ void cp_async8(void *smem, const void *gmem) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(s), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

/* four q4_0 codes (0..15, one per byte) to the signed values code - 8:
 * the +0x78 never carries out of a byte, the xor flips the sign bit */
__device__ __forceinline__ unsigned q4_signed(unsigned nibbles) { return (nibbles + 0x78787878u) ^ 0x80808080u; }

/* Stage kb0 .. kb0 + MMT_KS - 1 of the block tile into shared memory.
 * Rows and tokens past the ends are clamped (read, never stored). */
template <int Q4>
__device__ __forceinline__ void mmt_load(uint8_t *st, const uint8_t *__restrict__ q, const __half *__restrict__ d,
                                         const int8_t *__restrict__ xq, const float *__restrict__ xd, int nb, int M,
                                         int N, int m0, int n0, int kb0) {
    typedef mmt_geom<Q4> G;
    uint8_t *A = st, *B = st + G::A_BYTES, *As = B + G::B_BYTES, *Bs = As + G::AS_BYTES;
    const int tid = threadIdx.x;
    constexpr int ACH = MMT_KS * G::WB / 16, BCH = MMT_KS * 32 / 16; /* 16-byte chunks per row / token */
#pragma unroll
    for (int i = tid; i < MMT_BM * ACH; i += MMT_THREADS) {
        const int r = i / ACH, ch = i % ACH, row = min(m0 + r, M - 1);
        cp_async16(A + r * G::A_STRIDE + ch * 16, q + ((size_t)row * nb + kb0) * G::WB + ch * 16);
    }
#pragma unroll
    for (int i = tid; i < MMT_BN * BCH; i += MMT_THREADS) {
        const int t = i / BCH, ch = i % BCH, tok = min(n0 + t, N - 1);
        cp_async16(B + t * G::B_STRIDE + ch * 16, xq + ((size_t)tok * nb + kb0) * 32 + ch * 16);
    }
    if (tid < MMT_BM) {
        const int row = min(m0 + tid, M - 1);
        cp_async8(As + tid * MMT_KS * 2, d + (size_t)row * nb + kb0);
    } else if (tid < MMT_BM + MMT_BN) {
        const int t = tid - MMT_BM, tok = min(n0 + t, N - 1);
        cp_async16(Bs + t * MMT_KS * 4, xd + (size_t)tok * nb + kb0);
    }
}

template <int Q4>
__global__ void __launch_bounds__(MMT_THREADS, MMT_MINB)
    k_mm_tiled(const uint8_t *__restrict__ q, const __half *__restrict__ d, const int8_t *__restrict__ xq,
               const float *__restrict__ xd, int K, int M, int N, float *__restrict__ out) {
    pdl_wait();
    typedef mmt_geom<Q4> G;
    extern __shared__ __align__(16) uint8_t mmt_smem[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c = lane & 3;
    const int wm = warp >> 2, wn = warp & 3; /* 2 x 4 warps of 64 rows x 32 tokens */
    const int n0 = blockIdx.x * MMT_BN, m0 = blockIdx.y * MMT_BM;
    const int nb = K / 32, nsteps = nb / MMT_KS;
    float acc[4][4][4];
#pragma unroll
    for (int mt = 0; mt < 4; mt++)
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[mt][nt][e] = 0;
#pragma unroll
    for (int s = 0; s < MMT_STAGES - 1; s++) {
        if (s < nsteps) mmt_load<Q4>(mmt_smem + s * G::STAGE, q, d, xq, xd, nb, M, N, m0, n0, s * MMT_KS);
        cp_async_commit();
    }
    for (int step = 0; step < nsteps; step++) {
        /* this step's stage has landed, and every warp is done with the
         * stage the next load overwrites (it was read last iteration) */
        cp_async_wait<MMT_STAGES - 2>();
        __syncthreads();
        const int nxt = step + MMT_STAGES - 1;
        if (nxt < nsteps) mmt_load<Q4>(mmt_smem + (nxt % MMT_STAGES) * G::STAGE, q, d, xq, xd, nb, M, N, m0, n0, nxt * MMT_KS);
        cp_async_commit();
        const uint8_t *A = mmt_smem + (step % MMT_STAGES) * G::STAGE, *B = A + G::A_BYTES;
        const __half *As = (const __half *)(B + G::B_BYTES);
        const float *Bs = (const float *)((const uint8_t *)As + G::AS_BYTES);
#pragma unroll
        for (int kb = 0; kb < MMT_KS; kb++) {
            /* activation fragments of all four token tiles stay in
             * registers; weight fragments are read one row tile at a time
             * (fewer live registers: two blocks per SM without spills) */
            unsigned bf[4][2];
            float dx[4][2];
#pragma unroll
            for (int nt = 0; nt < 4; nt++) {
                const uint8_t *br = B + (wn * 32 + nt * 8 + g) * G::B_STRIDE + kb * 32;
                bf[nt][0] = *(const unsigned *)(br + 4 * c);
                bf[nt][1] = *(const unsigned *)(br + 16 + 4 * c);
                dx[nt][0] = Bs[(wn * 32 + nt * 8 + 2 * c) * MMT_KS + kb];
                dx[nt][1] = Bs[(wn * 32 + nt * 8 + 2 * c + 1) * MMT_KS + kb];
            }
#pragma unroll
            for (int mt = 0; mt < 4; mt++) {
                unsigned a[4];
                float dw[2];
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int r = wm * 64 + mt * 16 + g + 8 * h;
                    const uint8_t *ar = A + r * G::A_STRIDE + kb * G::WB;
                    if (Q4) {
                        const unsigned w = *(const unsigned *)(ar + 4 * c);
                        a[h] = q4_signed(w & 0x0F0F0F0Fu);
                        a[h + 2] = q4_signed((w >> 4) & 0x0F0F0F0Fu);
                    } else {
                        a[h] = *(const unsigned *)(ar + 4 * c);
                        a[h + 2] = *(const unsigned *)(ar + 16 + 4 * c);
                    }
                    dw[h] = __half2float(As[r * MMT_KS + kb]);
                }
#pragma unroll
                for (int nt = 0; nt < 4; nt++) {
                    int r[4] = {0, 0, 0, 0};
                    mma_s8(r, a[0], a[1], a[2], a[3], bf[nt][0], bf[nt][1]);
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const float f = __int_as_float(r[e] + 0x4B400000) - 12582912.0f; /* exact: |r| < 2^22 */
                        acc[mt][nt][e] += dw[e >> 1] * dx[nt][e & 1] * f;
                    }
                }
            }
        }
    }
    cp_async_wait<0>(); /* no copy may still target shared memory at exit */
#pragma unroll
    for (int mt = 0; mt < 4; mt++)
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int row = m0 + wm * 64 + mt * 16 + g + (e >= 2 ? 8 : 0), tok = n0 + wn * 32 + nt * 8 + 2 * c + (e & 1);
                if (row < M && tok < N) out[(size_t)tok * M + row] = acc[mt][nt][e];
            }
}

/* ---- prefill products on f16 tensor cores ----
 * k_mm_h: q8_0/q4_0 weights times f16 activations, mma.sync m16n8k16 with
 * f32 accumulation. The weight codes are staged as stored (cp.async, the
 * cp.async pipeline of k_mm_tiled, ST stages) and expanded to f16 in registers right
 * before the product: code - offset by the 0x6400 exponent trick (exact),
 * times the block scale (one f16 rounding, relative 2^-11). The per-block
 * scaling is thus folded into the operand, and the tensor cores accumulate
 * a whole row without the f32 work per 32-value block that bounds the
 * integer kernel. Operand ranges: a weight's scales are multiplied by 2^we
 * (chosen at load from its largest scale, so |code x scale| < 2^15) and a
 * token's activations by 2^ea (k_act_f16, largest |x| below 2^15): no f16
 * overflow for any file, and a tensor of uniformly tiny (or huge) values
 * keeps f16's full precision (only values some 2^28 below their weight's
 * or token's largest fall into f16 subnormals); the epilogue multiplies by
 * 2^-(we + ea), all exact.
 * K order: within each group of four values k, the activations are stored
 * as k+0, k+2, k+1, k+3 (k_act_f16), the order in which a lane's 32-bit
 * word of codes expands into f16 pairs; A and B agree, so every product
 * pairs the same k. Numerics differ from the 8-bit-activation kernels:
 * relative 2^-11 per activation and per weight instead of a per-block 8-bit
 * code (cuda_ops bounds it). */
#define MMH_BM 128
#define MMH_BN 128
#define MMH_THREADS 256

/* m16n8k16 f16 x f16 + f32 (PTX ISA fragment layout: g = lane / 4, c = lane % 4;
 * A: a0 = row g, k 2c, 2c+1; a1 = row g+8; a2, a3 = the same at k + 8;
 * B: b0 = column g, k 2c, 2c+1; b1 = k + 8; C as m16n8k32). */
__device__ __forceinline__ void mma_f16(float (&d)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0,
                                        unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

template <int Q4> struct mmh_geom {
    static constexpr int WB = Q4 ? 16 : 32;           /* code bytes per weight block */
    static constexpr int A_STRIDE = MMT_KS * WB + 16; /* conflict-free 32-bit fragment loads */
    static constexpr int B_STRIDE = MMT_KS * 64 + 32; /* bytes per token: conflict-free 64-bit loads */
    static constexpr int A_BYTES = MMH_BM * A_STRIDE;
    static constexpr int B_BYTES = MMH_BN * B_STRIDE;
    static constexpr int AS_BYTES = MMH_BM * MMT_KS * 2;
    static constexpr int STAGE = A_BYTES + B_BYTES + AS_BYTES;
};

/* Per token: the power of two bringing its largest |x| into [2^14, 2^15),
 * applied while converting to f16 in the K order above; xinv = its inverse. */
__global__ void k_act_f16(const float *x, int K, __half *xh, float *xinv, int order) {
    pdl_wait();
    __shared__ float red[32];
    const float *r = x + (size_t)blockIdx.x * K;
    float m = 0;
    for (int i = threadIdx.x * 4; i < K; i += blockDim.x * 4) {
        const float4 v = *(const float4 *)(r + i);
        m = fmaxf(m, fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w))));
    }
    m = warp_max(m);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = m;
    __syncthreads();
    m = red[0];
    for (int j = 1; j < (int)(blockDim.x >> 5); j++) m = fmaxf(m, red[j]);
    int e = 0;
    if (m > 0 && isfinite(m)) {
        int ex;
        frexpf(m, &ex); /* m < 2^ex */
        e = min(max(15 - ex, -120), 120);
    }
    const float s = ldexpf(1.0f, e);
    __half *o = xh + (size_t)blockIdx.x * K;
    if (order == 0) {
        for (int i = threadIdx.x * 4; i < K; i += blockDim.x * 4) {
            const float4 v = *(const float4 *)(r + i);
            *(__half2 *)(o + i) = __floats2half2_rn(v.x * s, v.z * s);
            *(__half2 *)(o + i + 2) = __floats2half2_rn(v.y * s, v.w * s);
        }
    } else { /* k_mm_w: per 16 values the even k, then the odd k */
        for (int i = threadIdx.x * 16; i < K; i += blockDim.x * 16) {
            float v[16];
#pragma unroll
            for (int j = 0; j < 4; j++) *(float4 *)(v + 4 * j) = *(const float4 *)(r + i + 4 * j);
#pragma unroll
            for (int j = 0; j < 4; j++) {
                *(__half2 *)(o + i + 2 * j) = __floats2half2_rn(v[4 * j] * s, v[4 * j + 2] * s);
                *(__half2 *)(o + i + 8 + 2 * j) = __floats2half2_rn(v[4 * j + 1] * s, v[4 * j + 3] * s);
            }
        }
    }
    if (threadIdx.x == 0) xinv[blockIdx.x] = ldexpf(1.0f, -e);
}

template <int Q4>
__device__ __forceinline__ void mmh_load(uint8_t *st, const uint8_t *__restrict__ q, const __half *__restrict__ d,
                                         const __half *__restrict__ xh, int nb, int M, int N, int m0, int n0, int kb0) {
    typedef mmh_geom<Q4> G;
    uint8_t *A = st, *B = st + G::A_BYTES, *As = B + G::B_BYTES;
    const int tid = threadIdx.x;
    constexpr int ACH = MMT_KS * G::WB / 16, BCH = MMT_KS * 64 / 16;
#pragma unroll
    for (int i = tid; i < MMH_BM * ACH; i += MMH_THREADS) {
        const int r = i / ACH, ch = i % ACH, row = min(m0 + r, M - 1);
        cp_async16(A + r * G::A_STRIDE + ch * 16, q + ((size_t)row * nb + kb0) * G::WB + ch * 16);
    }
#pragma unroll
    for (int i = tid; i < MMH_BN * BCH; i += MMH_THREADS) {
        const int t = i / BCH, ch = i % BCH, tok = min(n0 + t, N - 1);
        cp_async16(B + t * G::B_STRIDE + ch * 16, (const uint8_t *)(xh + ((size_t)tok * nb + kb0) * 32) + ch * 16);
    }
    if (tid < MMH_BM) {
        const int row = min(m0 + tid, M - 1);
        cp_async8(As + tid * MMT_KS * 2, d + (size_t)row * nb + kb0);
    }
}

/* Two f16 values 1024 + u (u a byte or nibble placed in each half's low
 * mantissa bits by the caller) minus `off`, times the scale: exact codes,
 * one rounding. */
__device__ __forceinline__ unsigned mmh_expand(unsigned bits, __half2 off, __half2 scale) {
    __half2 h = *(__half2 *)&bits;
    h = __hmul2(__hsub2(h, off), scale);
    return *(unsigned *)&h;
}

/* ST pipeline stages, MINB blocks per SM (the register budget): 2 and 2 by
 * default (3614 vs 3228 tok/s prefill of 31B Q4_0 at 2048: two blocks hide
 * each other's staging), 3 and 1 with GEM_CUDA_MMH=1 */
template <int Q4, int ST, int MINB>
__global__ void __launch_bounds__(MMH_THREADS, MINB)
    k_mm_h(const uint8_t *__restrict__ q, const __half *__restrict__ d, float wexp, const __half *__restrict__ xh,
           const float *__restrict__ xinv, int K, int M, int N, float *__restrict__ out) {
    pdl_wait();
    typedef mmh_geom<Q4> G;
    extern __shared__ __align__(16) uint8_t mmh_smem[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c = lane & 3;
    const int wm = warp & 3, wn = warp >> 2; /* 4 x 2 warps of 32 rows x 64 tokens */
    const int n0 = blockIdx.x * MMH_BN, m0 = blockIdx.y * MMH_BM;
    const int nb = K / 32, nsteps = nb / MMT_KS;
    const __half wsc = __float2half_rn(wexp);
    const __half2 off = Q4 ? __half2half2(__ushort_as_half(0x6408)) : __half2half2(__ushort_as_half(0x6480));
    float acc[2][8][4];
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[mt][nt][e] = 0;
#pragma unroll
    for (int s = 0; s < ST - 1; s++) {
        if (s < nsteps) mmh_load<Q4>(mmh_smem + s * G::STAGE, q, d, xh, nb, M, N, m0, n0, s * MMT_KS);
        cp_async_commit();
    }
    for (int step = 0; step < nsteps; step++) {
        cp_async_wait<ST - 2>();
        __syncthreads();
        const int nxt = step + ST - 1;
        if (nxt < nsteps) mmh_load<Q4>(mmh_smem + (nxt % ST) * G::STAGE, q, d, xh, nb, M, N, m0, n0, nxt * MMT_KS);
        cp_async_commit();
        const uint8_t *A = mmh_smem + (step % ST) * G::STAGE, *B = A + G::A_BYTES;
        const __half *As = (const __half *)(B + G::B_BYTES);
#pragma unroll
        for (int kb = 0; kb < MMT_KS; kb++) {
            unsigned af[2][2][4]; /* [row tile][k half of the block][fragment register] */
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int r = wm * 32 + mt * 16 + g + 8 * h;
                    const uint8_t *ar = A + r * G::A_STRIDE + kb * G::WB;
                    const __half2 sc = __half2half2(__hmul(As[r * MMT_KS + kb], wsc));
                    if (Q4) {
                        const unsigned w = *(const unsigned *)(ar + 4 * c);
                        af[mt][0][h] = mmh_expand((w & 0x000F000Fu) | 0x64006400u, off, sc);
                        af[mt][0][h + 2] = mmh_expand(((w >> 8) & 0x000F000Fu) | 0x64006400u, off, sc);
                        af[mt][1][h] = mmh_expand(((w >> 4) & 0x000F000Fu) | 0x64006400u, off, sc);
                        af[mt][1][h + 2] = mmh_expand(((w >> 12) & 0x000F000Fu) | 0x64006400u, off, sc);
                    } else {
                        const unsigned w0 = *(const unsigned *)(ar + 4 * c) ^ 0x80808080u;
                        const unsigned w1 = *(const unsigned *)(ar + 16 + 4 * c) ^ 0x80808080u;
                        af[mt][0][h] = mmh_expand(__byte_perm(w0, 0x64646464u, 0x4240), off, sc);
                        af[mt][0][h + 2] = mmh_expand(__byte_perm(w0, 0x64646464u, 0x4341), off, sc);
                        af[mt][1][h] = mmh_expand(__byte_perm(w1, 0x64646464u, 0x4240), off, sc);
                        af[mt][1][h + 2] = mmh_expand(__byte_perm(w1, 0x64646464u, 0x4341), off, sc);
                    }
                }
#pragma unroll
            for (int nt = 0; nt < 8; nt++) {
                const uint8_t *br = B + (wn * 64 + nt * 8 + g) * G::B_STRIDE + kb * 64 + 8 * c;
                const uint2 b0 = *(const uint2 *)br, b1 = *(const uint2 *)(br + 32);
#pragma unroll
                for (int mt = 0; mt < 2; mt++) {
                    mma_f16(acc[mt][nt], af[mt][0][0], af[mt][0][1], af[mt][0][2], af[mt][0][3], b0.x, b0.y);
                    mma_f16(acc[mt][nt], af[mt][1][0], af[mt][1][1], af[mt][1][2], af[mt][1][3], b1.x, b1.y);
                }
            }
        }
    }
    cp_async_wait<0>();
    const float winv = 1.0f / wexp;
#pragma unroll
    for (int nt = 0; nt < 8; nt++)
#pragma unroll
        for (int e2 = 0; e2 < 2; e2++) {
            const int tok = n0 + wn * 64 + nt * 8 + 2 * c + e2;
            if (tok >= N) continue;
            const float s = winv * xinv[tok];
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int row = m0 + wm * 32 + mt * 16 + g + 8 * h;
                    if (row < M) out[(size_t)tok * M + row] = acc[mt][nt][2 * h + e2] * s;
                }
        }
}

typedef void (*mv_q_fn)(mv_job, const int8_t *, const float *, const int *, int);
typedef void (*mv_f_fn)(mv_job, const float *, int);

#define NT_TABLE(K, ...) {K<__VA_ARGS__, 1>, K<__VA_ARGS__, 2>, K<__VA_ARGS__, 3>, K<__VA_ARGS__, 4>, \
                          K<__VA_ARGS__, 5>, K<__VA_ARGS__, 6>, K<__VA_ARGS__, 7>, K<__VA_ARGS__, 8>}
#define NT_TABLE_Q(Q4) {k_mv_q<Q4, 1, 1>, k_mv_q<Q4, 2, 1>, k_mv_q<Q4, 3, 1>, k_mv_q<Q4, 4, 1>, \
                        k_mv_q<Q4, 5, 1>, k_mv_q<Q4, 6, 1>, k_mv_q<Q4, 7, 1>, k_mv_q<Q4, 8, 1>}
static const mv_q_fn mv_q4[MV_MAXT] = NT_TABLE_Q(1);
static const mv_q_fn mv_q8[MV_MAXT] = NT_TABLE_Q(0);
/* one-token products of long rows split over 2 or 4 warps (see k_mv_q) */
static const mv_q_fn mv_q4_split[2] = {k_mv_q<1, 1, 2>, k_mv_q<1, 1, 4>};
static const mv_q_fn mv_q8_split[2] = {k_mv_q<0, 1, 2>, k_mv_q<0, 1, 4>};
static const mv_f_fn mv_f32[MV_MAXT] = NT_TABLE(k_mv_f, DW_F32);
static const mv_f_fn mv_f16[MV_MAXT] = NT_TABLE(k_mv_f, DW_F16);
static const mv_f_fn mv_bf16[MV_MAXT] = NT_TABLE(k_mv_f, DW_BF16);

/* ---- prefill products on warpgroup MMA (GEM_CUDA_MMH=3; written without
 * a GPU at hand, opt-in until cuda_ops and a benchmark have run it) ----
 * k_mm_w: k_mm_h's operands on wgmma.mma_async m64n128k16 (Hopper's
 * asynchronous warpgroup MMA): the weights expanded to f16 in registers as
 * the A operand (each warp's A slice is exactly an m16n8k16 A fragment, so
 * the expansion is k_mm_h's), the activations as the B operand read by the
 * tensor cores from shared memory through a matrix descriptor (K-major,
 * 128-byte swizzle: 16-byte chunk c of token row n at n*128 + ((c ^ (n & 7))
 * << 4), atoms of 64 values and 8 rows 1024-byte aligned). The tensor cores
 * read B in natural k order, so the activations are stored in the order
 * that pairs with the expansion: in each group of 16 values the even k
 * first, then the odd k (k_act_f16 order 1). Two warpgroups of 64 rows x
 * 128 tokens; per 32-value block two k16 steps; A registers double-buffered
 * by block parity (a wgmma may still read the other set); the stage a later
 * cp.async overwrites is released only after wgmma.wait_group 0. */
#define MMW_BM 128
#define MMW_BN 128
#define MMW_THREADS 256
#define MMW_ST 2

template <int Q4> struct mmw_geom {
    static constexpr int WB = Q4 ? 16 : 32;
    static constexpr int A_STRIDE = MMT_KS * WB + 16;
    static constexpr int B_BYTES = MMT_KS / 2 * MMW_BN * 128; /* MMT_KS blocks = MMT_KS / 2 swizzle atoms */
    static constexpr int A_BYTES = MMW_BM * A_STRIDE;
    static constexpr int AS_BYTES = MMW_BM * MMT_KS * 2;
    static constexpr int STAGE = (B_BYTES + A_BYTES + AS_BYTES + 1023) / 1024 * 1024; /* B of every stage 1024-aligned */
    static constexpr int SMEM = STAGE * MMW_ST + 1024;                                 /* + the base's alignment */
};

__device__ __forceinline__ uint64_t wgmma_desc_sw128(unsigned saddr) {
    return (uint64_t)((saddr & 0x3FFFF) >> 4) | (uint64_t)1 << 16 | (uint64_t)(1024 >> 4) << 32 | (uint64_t)1 << 62;
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* keeps the compiler from moving accumulator accesses across the asm above */
__device__ __forceinline__ void acc_fence(float (&d)[64]) {
#pragma unroll
    for (int i = 0; i < 64; i++) asm volatile("" : "+f"(d[i])::"memory");
}
/* scale_d 0: D = A B (the first product needs no zeroed accumulators:
 * zeroing them with ordinary moves makes ptxas serialize every wgmma) */
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], const unsigned (&a)[4], uint64_t desc, int scale_d) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, {%64,%65,%66,%67}, %68, p, 1, 1, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(scale_d));
}

template <int Q4>
__device__ __forceinline__ void mmw_load(uint8_t *st, const uint8_t *__restrict__ q, const __half *__restrict__ d,
                                         const __half *__restrict__ xh, int nb, int M, int N, int m0, int n0, int kb0) {
    typedef mmw_geom<Q4> G;
    uint8_t *B = st, *A = st + G::B_BYTES, *As = A + G::A_BYTES;
    const int tid = threadIdx.x;
    constexpr int ACH = MMT_KS * G::WB / 16, BCH = MMT_KS * 64 / 16; /* 16-byte chunks per weight row / token */
#pragma unroll
    for (int i = tid; i < MMW_BN * BCH; i += MMW_THREADS) {
        const int t = i / BCH, ch = i % BCH, tok = min(n0 + t, N - 1), atom = ch >> 3, c = ch & 7;
        cp_async16(B + atom * (MMW_BN * 128) + t * 128 + ((c ^ (t & 7)) << 4),
                   (const uint8_t *)(xh + ((size_t)tok * nb + kb0) * 32) + ch * 16);
    }
#pragma unroll
    for (int i = tid; i < MMW_BM * ACH; i += MMW_THREADS) {
        const int r = i / ACH, ch = i % ACH, row = min(m0 + r, M - 1);
        cp_async16(A + r * G::A_STRIDE + ch * 16, q + ((size_t)row * nb + kb0) * G::WB + ch * 16);
    }
    if (tid < MMW_BM) {
        const int row = min(m0 + tid, M - 1);
        cp_async8(As + tid * MMT_KS * 2, d + (size_t)row * nb + kb0);
    }
}

template <int Q4>
__global__ void __launch_bounds__(MMW_THREADS, 2)
    k_mm_w(const uint8_t *__restrict__ q, const __half *__restrict__ d, float wexp, const __half *__restrict__ xh,
           const float *__restrict__ xinv, int K, int M, int N, float *__restrict__ out) {
    pdl_wait();
    typedef mmw_geom<Q4> G;
    extern __shared__ __align__(16) uint8_t mmw_raw[];
    /* the swizzle works on absolute shared addresses: stage bases on 1024 */
    const unsigned raw_s = (unsigned)__cvta_generic_to_shared(mmw_raw);
    uint8_t *smem = mmw_raw + (((raw_s + 1023u) & ~1023u) - raw_s);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c = lane & 3;
    const int wg = warp >> 2, w = warp & 3; /* warpgroup (64 rows each), warp within it (16 rows) */
    const int n0 = blockIdx.x * MMW_BN, m0 = blockIdx.y * MMW_BM;
    const int nb = K / 32, nsteps = nb / MMT_KS;
    const __half wsc = __float2half_rn(wexp);
    const __half2 off = Q4 ? __half2half2(__ushort_as_half(0x6408)) : __half2half2(__ushort_as_half(0x6480));
    float acc[64]; /* written first by a wgmma with scale_d 0 */
    unsigned af[2][2][4]; /* [block parity][k16 step][fragment register] */
#pragma unroll
    for (int s = 0; s < MMW_ST - 1; s++) {
        if (s < nsteps) mmw_load<Q4>(smem + s * G::STAGE, q, d, xh, nb, M, N, m0, n0, s * MMT_KS);
        cp_async_commit();
    }
    for (int step = 0; step < nsteps; step++) {
        cp_async_wait<MMW_ST - 2>();
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); /* cp.async wrote through the generic proxy */
        wgmma_wait<0>(); /* the stage the next load overwrites is no longer read */
        acc_fence(acc);
        __syncthreads();
        const int nxt = step + MMW_ST - 1;
        if (nxt < nsteps) mmw_load<Q4>(smem + (nxt % MMW_ST) * G::STAGE, q, d, xh, nb, M, N, m0, n0, nxt * MMT_KS);
        cp_async_commit();
        uint8_t *st = smem + (step % MMW_ST) * G::STAGE;
        const uint8_t *A = st + G::B_BYTES;
        const __half *As = (const __half *)(A + G::A_BYTES);
        const unsigned bs = (unsigned)__cvta_generic_to_shared(st);
#pragma unroll
        for (int kb = 0; kb < MMT_KS; kb++) {
            unsigned(&a)[2][4] = af[kb & 1];
            if (kb >= 2) wgmma_wait<1>(); /* the wgmmas of block kb - 2 (same register set) are done */
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int r = wg * 64 + w * 16 + g + 8 * h;
                const uint8_t *ar = A + r * G::A_STRIDE + kb * G::WB;
                const __half2 sc = __half2half2(__hmul(As[r * MMT_KS + kb], wsc));
                if (Q4) {
                    const unsigned wd = *(const unsigned *)(ar + 4 * c);
                    a[0][h] = mmh_expand((wd & 0x000F000Fu) | 0x64006400u, off, sc);
                    a[0][h + 2] = mmh_expand(((wd >> 8) & 0x000F000Fu) | 0x64006400u, off, sc);
                    a[1][h] = mmh_expand(((wd >> 4) & 0x000F000Fu) | 0x64006400u, off, sc);
                    a[1][h + 2] = mmh_expand(((wd >> 12) & 0x000F000Fu) | 0x64006400u, off, sc);
                } else {
                    const unsigned w0 = *(const unsigned *)(ar + 4 * c) ^ 0x80808080u;
                    const unsigned w1 = *(const unsigned *)(ar + 16 + 4 * c) ^ 0x80808080u;
                    a[0][h] = mmh_expand(__byte_perm(w0, 0x64646464u, 0x4240), off, sc);
                    a[0][h + 2] = mmh_expand(__byte_perm(w0, 0x64646464u, 0x4341), off, sc);
                    a[1][h] = mmh_expand(__byte_perm(w1, 0x64646464u, 0x4240), off, sc);
                    a[1][h + 2] = mmh_expand(__byte_perm(w1, 0x64646464u, 0x4341), off, sc);
                }
            }
            acc_fence(acc);
            wgmma_fence();
            /* block kb: atom kb / 2, k16 steps 2 (kb % 2) and + 1 at 32 bytes each */
            const unsigned base = bs + (kb >> 1) * (MMW_BN * 128) + (kb & 1) * 64;
            wgmma_m64n128k16(acc, a[0], wgmma_desc_sw128(base), step > 0 || kb > 0);
            wgmma_m64n128k16(acc, a[1], wgmma_desc_sw128(base + 32), 1);
            wgmma_commit();
        }
    }
    wgmma_wait<0>();
    acc_fence(acc);
    cp_async_wait<0>();
    const float winv = 1.0f / wexp;
#pragma unroll
    for (int v = 0; v < 64; v++) {
        const int row = m0 + wg * 64 + w * 16 + g + 8 * ((v >> 1) & 1), tok = n0 + 8 * (v >> 2) + 2 * c + (v & 1);
        if (row < M && tok < N) out[(size_t)tok * M + row] = acc[v] * winv * xinv[tok];
    }
}

template <int Q4, int ST, int MINB> static cudaError_t mmh_allow1() {
    return cudaFuncSetAttribute(k_mm_h<Q4, ST, MINB>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                mmh_geom<Q4>::STAGE * ST);
}
static cudaError_t mmh_allow() {
    cudaError_t e = mmh_allow1<1, 3, 1>();
    if (e == cudaSuccess) e = mmh_allow1<0, 3, 1>();
    if (e == cudaSuccess) e = mmh_allow1<1, 2, 2>();
    if (e == cudaSuccess) e = mmh_allow1<0, 2, 2>();
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(k_mm_w<1>, cudaFuncAttributeMaxDynamicSharedMemorySize, mmw_geom<1>::SMEM);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(k_mm_w<0>, cudaFuncAttributeMaxDynamicSharedMemorySize, mmw_geom<0>::SMEM);
    return e;
}

/* Prefill products of q8_0/q4_0 weights on the f16 tensor cores (k_mm_h);
 * the f16 activations of x are reused while nothing but products ran
 * since. Returns -1 when scratch could not grow (nothing launched). */
static int mmh_run(cuda_backend *c, int count, const be_weight *const *W, const be_buf *x, int n, be_buf *const *outs) {
    const int K = (int)W[0]->ne0;
    const int cached = c->h_src == x->d && c->h_n == n && c->h_K == K && c->h_epoch == c->epoch;
    if (!cached) {
        if (grow(c, &c->xh, (size_t)n * K * sizeof(__half)) || grow(c, &c->xhinv, (size_t)n * sizeof(float))) return -1;
        launch(c, k_act_f16, n, 256, 0, (const float *)x->d, K, (__half *)c->xh.p, (float *)c->xhinv.p,
               c->mmh_variant == 3 ? 1 : 0);
        LAUNCHED(c, "activations to f16");
    }
    int writes_x = 0;
    for (int i = 0; i < count; i++) {
        const int M = (int)W[i]->ne1;
        const dim3 g((unsigned)((n + MMH_BN - 1) / MMH_BN), (unsigned)((M + MMH_BM - 1) / MMH_BM));
        static_assert(MMW_BN == MMH_BN && MMW_BM == MMH_BM, "one grid for both product kernels");
#define MMH_LAUNCH(Q4, ST, MINB)                                                                                    \
    launch(c, k_mm_h<Q4, ST, MINB>, g, MMH_THREADS, mmh_geom<Q4>::STAGE * ST, (const uint8_t *)W[i]->q,              \
           (const __half *)W[i]->d, W[i]->hexp, (const __half *)c->xh.p, (const float *)c->xhinv.p, K, M, n,        \
           outs[i]->d)
        if (c->mmh_variant == 3) {
            if (W[i]->fmt == DW_Q4_0)
                launch(c, k_mm_w<1>, g, MMW_THREADS, mmw_geom<1>::SMEM, (const uint8_t *)W[i]->q, (const __half *)W[i]->d,
                       W[i]->hexp, (const __half *)c->xh.p, (const float *)c->xhinv.p, K, M, n, outs[i]->d);
            else
                launch(c, k_mm_w<0>, g, MMW_THREADS, mmw_geom<0>::SMEM, (const uint8_t *)W[i]->q, (const __half *)W[i]->d,
                       W[i]->hexp, (const __half *)c->xh.p, (const float *)c->xhinv.p, K, M, n, outs[i]->d);
        } else if (W[i]->fmt == DW_Q4_0) {
            if (c->mmh_variant == 2) MMH_LAUNCH(1, 2, 2);
            else MMH_LAUNCH(1, 3, 1);
        } else {
            if (c->mmh_variant == 2) MMH_LAUNCH(0, 2, 2);
            else MMH_LAUNCH(0, 3, 1);
        }
#undef MMH_LAUNCH
        LAUNCHED(c, "matmul (f16 tensor cores)");
        writes_x |= outs[i]->d == x->d;
    }
    if (!writes_x) {
        c->h_src = x->d;
        c->h_n = n;
        c->h_K = K;
        c->h_epoch = c->epoch;
    }
    return 0;
}

/* outs[i] = W[i] x (pair: outs[0] = gelu(W[0] x) * (W[1] x)). The 8-bit
 * activations of the last quantized input are reused while nothing but
 * matrix products ran since. Weights of one call share a format (else the
 * caller splits the call). */
static void mv_run(cuda_backend *c, int count, const be_weight *const *W, const be_buf *x, int n, be_buf *const *outs,
                   int pair) {
    const int K = (int)W[0]->ne0, fmt = W[0]->fmt;
    char label[64] = "matmul";
    if (c->profile)
        snprintf(label, sizeof label, "matmul%s x%d %s %dx%d n%d", pair ? "+geglu" : "", count,
                 fmt == DW_Q4_0 ? "q4_0" : fmt == DW_Q8_0 ? "q8_0" : "float", (int)W[0]->ne1, K, n);
    mv_job job;
    memset(&job, 0, sizeof job);
    job.count = pair ? 1 : count;
    job.pair = pair;
    /* warps per row of a split one-token product (k_mv_q) */
    const int sp = c->mv_split && n == 1 && !pair && (fmt == DW_Q8_0 || fmt == DW_Q4_0) ? (K >= 16384 ? 4 : K >= 8192 ? 2 : 1)
                                                                                       : 1;
    unsigned grid = 0;
    for (int i = 0; i < job.count; i++) {
        job.m[i].q = W[i]->q;
        job.m[i].d = W[i]->d;
        job.m[i].M = (int)W[i]->ne1;
        job.m[i].blocks = (int)blocks_for((size_t)W[i]->ne1, pair ? MV_WARPS : MV_WARPS / sp * MV_ROWS);
        grid += (unsigned)job.m[i].blocks;
    }
    if (pair) {
        job.m[1].q = W[1]->q;
        job.m[1].d = W[1]->d;
        job.m[1].M = (int)W[1]->ne1;
    }
    if ((fmt == DW_Q8_0 || fmt == DW_Q4_0) && n > MV_MAXT && !pair && c->mma && (K / 32) % MMT_KS == 0) {
        int f16 = 1;
        for (int i = 0; i < job.count; i++) f16 &= W[i]->hexp > 0;
        if (f16 && !mmh_run(c, job.count, W, x, n, outs)) return;
    }
    if (fmt == DW_Q8_0 || fmt == DW_Q4_0) {
        const size_t nblk = (size_t)n * (size_t)(K / 32);
        const int cached = c->q_src == x->d && c->q_n == n && c->q_K == K && c->q_epoch == c->epoch;
        if (!cached) {
            if (grow(c, &c->xq, nblk * 32) || grow(c, &c->xd, nblk * sizeof(float)) ||
                grow(c, &c->xs, nblk * sizeof(int)))
                return;
            launch(c, k_quantize_act, blocks_for(nblk * 32, 256), 256, 0, x->d, (int64_t)nblk, (int8_t *)c->xq.p,
                                                                          (float *)c->xd.p, (int *)c->xs.p);
            LAUNCHED(c, "quantize activations");
        }
        if (n > MV_MAXT && !pair && c->mma && (K / 32) % MMT_KS == 0) {
            for (int i = 0; i < job.count; i++) {
                const dim3 g((unsigned)((n + MMT_BN - 1) / MMT_BN), (unsigned)((job.m[i].M + MMT_BM - 1) / MMT_BM));
                if (fmt == DW_Q4_0)
                    launch(c, k_mm_tiled<1>, g, MMT_THREADS, mmt_geom<1>::SMEM, 
                        (const uint8_t *)job.m[i].q, job.m[i].d, (const int8_t *)c->xq.p, (const float *)c->xd.p, K,
                        job.m[i].M, n, outs[i]->d);
                else
                    launch(c, k_mm_tiled<0>, g, MMT_THREADS, mmt_geom<0>::SMEM, 
                        (const uint8_t *)job.m[i].q, job.m[i].d, (const int8_t *)c->xq.p, (const float *)c->xd.p, K,
                        job.m[i].M, n, outs[i]->d);
                LAUNCHED(c, "matmul (tensor cores, tiled)");
            }
            goto quantized_done;
        }
        if (n > MV_MAXT && !pair && c->mma) {
            for (int i = 0; i < job.count; i++) {
                const dim3 g((unsigned)((job.m[i].M + MM_ROWS - 1) / MM_ROWS), (unsigned)((n + MM_TOKS - 1) / MM_TOKS));
                if (fmt == DW_Q4_0)
                    launch(c, k_mm_q<1>, g, 128, 0, (const uint8_t *)job.m[i].q, job.m[i].d, (const int8_t *)c->xq.p,
                                                    (const float *)c->xd.p, K, job.m[i].M, n, outs[i]->d);
                else
                    launch(c, k_mm_q<0>, g, 128, 0, (const uint8_t *)job.m[i].q, job.m[i].d, (const int8_t *)c->xq.p,
                                                    (const float *)c->xd.p, K, job.m[i].M, n, outs[i]->d);
                LAUNCHED(c, "matmul (tensor cores)");
            }
            goto quantized_done;
        }
        {
        /* n == 1 when split: tab[0] is the 2- or 4-warp kernel */
        const mv_q_fn *tab = sp > 1 ? (fmt == DW_Q4_0 ? mv_q4_split : mv_q8_split) + (sp == 4) : fmt == DW_Q4_0 ? mv_q4 : mv_q8;
        for (int t0 = 0; t0 < n; t0 += MV_MAXT) {
            const int nt = n - t0 < MV_MAXT ? n - t0 : MV_MAXT;
            const size_t bo = (size_t)t0 * (size_t)(K / 32);
            mv_job jt = job;
            for (int i = 0; i < job.count; i++) jt.m[i].out = outs[i]->d + (size_t)t0 * job.m[i].M;
            launch(c, tab[nt - 1], grid, MV_WARPS * 32, 0, jt, (const int8_t *)c->xq.p + bo * 32,
                                                           (const float *)c->xd.p + bo, (const int *)c->xs.p + bo, K);
            LAUNCHED(c, label);
        }
        }
    quantized_done:;
        int writes_x = 0;
        for (int i = 0; i < job.count; i++) writes_x |= outs[i]->d == x->d;
        if (!writes_x) quantized_cache_set(c, x->d, n, K);
        return;
    }
    const mv_f_fn *tab = fmt == DW_F32 ? mv_f32 : fmt == DW_F16 ? mv_f16 : mv_bf16;
    for (int t0 = 0; t0 < n; t0 += MV_MAXT) {
        const int nt = n - t0 < MV_MAXT ? n - t0 : MV_MAXT;
        mv_job jt = job;
        for (int i = 0; i < job.count; i++) jt.m[i].out = outs[i]->d + (size_t)t0 * job.m[i].M;
        launch(c, tab[nt - 1], grid, MV_WARPS * 32, 0, jt, x->d + (size_t)t0 * K, K);
        LAUNCHED(c, label);
    }
}

static void cu_matmul(backend *b, const be_weight *W, const be_buf *x, int n, be_buf *out) {
    mv_run(cu_of(b), 1, &W, x, n, &out, 0);
}

static void cu_matmul_multi(backend *b, int count, const be_weight *const *W, const be_buf *x, int n,
                            be_buf *const *out) {
    int same = 1;
    for (int i = 1; i < count; i++) same &= W[i]->fmt == W[0]->fmt && W[i]->ne0 == W[0]->ne0;
    if (same) {
        mv_run(cu_of(b), count, W, x, n, out, 0);
        return;
    }
    for (int i = 0; i < count; i++) mv_run(cu_of(b), 1, &W[i], x, n, &out[i], 0);
}

static void cu_matmul_geglu(backend *b, const be_weight *Wg, const be_weight *Wu, const be_buf *x, int n, be_buf *out) {
    cuda_backend *c = cu_of(b);
    const be_weight *W[2] = {Wg, Wu};
    const int quant = Wg->fmt == DW_Q8_0 || Wg->fmt == DW_Q4_0;
    if (c->gelu_fp16 || Wg->fmt != Wu->fmt || Wg->ne1 != Wu->ne1 || (c->mma && quant && n > MV_MAXT)) {
        /* the table GELU and mixed formats go the long way, through scratch */
        const size_t len = (size_t)n * (size_t)Wu->ne1;
        if (grow(c, &c->up, len * sizeof(float))) return;
        be_buf up = {(float *)c->up.p, len};
        be_buf *o1 = out, *o2 = &up;
        mv_run(c, 1, &W[0], x, n, &o1, 0);
        mv_run(c, 1, &W[1], x, n, &o2, 0);
        cu_geglu(b, out, &up, len, out);
        return;
    }
    mv_run(c, 2, W, x, n, &out, 1);
}

/* ------------------------------------------------------------------ */
/* attention                                                           */

#define AT_THREADS 256
#define AT_CHUNK 64
#define AT_MAX_OWN 16 /* accumulators per thread: rows x ceil(head_dim / AT_THREADS) */
#define AT_MIN_SPLIT 32
#ifndef AT_KU
#define AT_KU 2 /* key rows in flight per warp */
#endif
#ifndef AT_VU
#define AT_VU 16 /* value rows in flight per thread */
#endif

/* Cache entries are f32 or f16 (--kv-type f16: half the bytes a deep
 * step reads); keys and values of the current call are always f32. */
__device__ __forceinline__ float4 kv_ld4(const float *p) { return *(const float4 *)p; }
__device__ __forceinline__ float4 kv_ld4(const __half *p) {
    const uint2 u = *(const uint2 *)p;
    const float2 a = __half22float2(*(const __half2 *)&u.x), b = __half22float2(*(const __half2 *)&u.y);
    return make_float4(a.x, a.y, b.x, b.y);
}
__device__ __forceinline__ float kv_ld1(const float *p) { return *p; }
__device__ __forceinline__ float kv_ld1(const __half *p) { return __half2float(*p); }
__device__ __forceinline__ void kv_st(float *p, float v) { *p = v; }
__device__ __forceinline__ void kv_st(__half *p, float v) { *p = __float2half_rn(v); }

/* Element e of the key (or value) row of position p: this call's rows for
 * p >= pos0, else the cache (slot p, or p mod cap in a ring). */
template <typename KT>
__device__ __forceinline__ float4 kv_row4(const float *cur, const KT *cache, int p, int pos0, int kvh, int h, int d,
                                          int cap, int ring, int e) {
    if (p >= pos0) return *(const float4 *)(cur + ((size_t)(p - pos0) * kvh + h) * d + e);
    const int slot = ring ? p % cap : p;
    return kv_ld4(cache + ((size_t)slot * kvh + h) * d + e);
}
/* Elements e, e + 1 (e even) of a key or value row, as kv_row1. */
__device__ __forceinline__ float2 kv_ld2(const float *p) { return *(const float2 *)p; }
__device__ __forceinline__ float2 kv_ld2(const __half *p) { return __half22float2(*(const __half2 *)p); }
template <typename KT>
__device__ __forceinline__ float2 kv_row2(const float *cur, const KT *cache, int p, int pos0, int kvh, int h, int d,
                                          int cap, int ring, int e) {
    if (p >= pos0) return *(const float2 *)(cur + ((size_t)(p - pos0) * kvh + h) * d + e);
    const int slot = ring ? p % cap : p;
    return kv_ld2(cache + ((size_t)slot * kvh + h) * d + e);
}
template <typename KT>
__device__ __forceinline__ float kv_row1(const float *cur, const KT *cache, int p, int pos0, int kvh, int h, int d,
                                         int cap, int ring, int e) {
    if (p >= pos0) return cur[((size_t)(p - pos0) * kvh + h) * d + e];
    const int slot = ring ? p % cap : p;
    return kv_ld1(cache + ((size_t)slot * kvh + h) * d + e);
}

/* One block per (KV head x head group, split, query block): its R rows are
 * QB queries x G query heads sharing one KV head, so each key and value
 * row read serves all R of them (prefill tiles share the reads across
 * queries; a one-token step has QB = 1). Keys of this call come from k/v,
 * older ones from the cache (a tile's own keys may overwrite ring slots its
 * earlier queries still need, so the cache is written after). Each row
 * masks keys outside its own causal window. Online softmax over chunks of
 * AT_CHUNK keys; the block leaves unnormalised partial sums with their
 * running max and sum for k_attn_combine (a row with no key in a split
 * leaves max -inf and sum 0, which the combine weighs as nothing).
 * Thread t accumulates output elements t, t + 256, ... (EPT of them) of
 * every row, so one value load serves all rows. */
template <int D, typename KT, bool PAIRS>
__global__ void __launch_bounds__(AT_THREADS)
    k_attn_split(const float *q, const float *k, const float *v, const KT *ck, const KT *cv, const int *step,
                 int n, int n_head, int kvh, int cap, int ring, int window, int nsplit, int G, int QB, float *part,
                 float *pml, KT *store_k, KT *store_v) {
    pdl_wait();
    constexpr int EPT = (D + AT_THREADS - 1) / AT_THREADS;
    /* PAIRS (GEM_CUDA_ATTN_V2=1, opt-in until measured): with two output
     * elements per thread and row, thread t owns elements 2t and 2t + 1
     * instead of t and t + 256, so each value row is one wide load; every
     * element sums the same terms in the same order either way. A template
     * parameter: as a run-time flag it cost the plain kernel registers. */
    static_assert(!PAIRS || EPT == 2, "value pairs need two elements per thread and row");
    constexpr bool pairs = PAIRS;
    extern __shared__ float sm[];
    const int R = G * QB;
    const int groups = n_head / kvh / G;
    const int h = blockIdx.x / groups, hq0 = h * (n_head / kvh) + (blockIdx.x % groups) * G;
    const int split = blockIdx.y, i0 = blockIdx.z * QB;
    float *qs = sm, *S = sm + R * D, *mrow = S + R * AT_CHUNK, *lrow = mrow + R, *alpha = lrow + R;
    int *rfirst = (int *)(alpha + R), *rlast = rfirst + R;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = AT_THREADS / 32;
    const int pos0 = step[0];
    /* one-token steps store the new key/value here: no block reads that
     * cache slot (the new key comes from k/v; in a ring the slot held the
     * position just outside the window) */
    if (store_k && split == 0 && blockIdx.x % groups == 0) {
        const size_t slot = (size_t)(ring ? pos0 % cap : pos0);
        for (int e = threadIdx.x; e < D; e += AT_THREADS) {
            kv_st(store_k + (slot * kvh + h) * D + e, k[(size_t)h * D + e]);
            kv_st(store_v + (slot * kvh + h) * D + e, v[(size_t)h * D + e]);
        }
    }
    const int i_last = min(i0 + QB, n) - 1;
    const int qp_first = pos0 + i0, qp_last = pos0 + i_last;
    const int first = window > 0 && qp_first - window + 1 > 0 ? qp_first - window + 1 : 0;
    /* splits of at least AT_MIN_SPLIT keys: at a shallow depth only the
     * first few have keys; the rest leave an empty partial the combine
     * skips without reading */
    const int len = qp_last - first + 1, per = max((len + nsplit - 1) / nsplit, AT_MIN_SPLIT);
    const int s0 = first + split * per, s1 = min(s0 + per, qp_last + 1);
    if (s0 >= s1) {
        if (tid < R && i0 + tid / G < n) {
            const size_t o = (((size_t)(i0 + tid / G) * n_head + hq0 + tid % G) * nsplit + split) * 2;
            pml[o] = -INFINITY;
            pml[o + 1] = 0;
        }
        return;
    }
    /* float4 loads, four in flight per thread (D is a multiple of 128) */
#pragma unroll 4
    for (int idx = tid; idx < R * D / 4; idx += AT_THREADS) {
        const int r = idx / (D / 4), qi = r / G, g = r % G;
        ((float4 *)qs)[idx] = i0 + qi < n ? *(const float4 *)(q + ((size_t)(i0 + qi) * n_head + hq0 + g) * D + 4 * (idx % (D / 4)))
                                          : make_float4(0, 0, 0, 0);
    }
    if (tid < R) {
        const int i = i0 + tid / G, qp = pos0 + i;
        mrow[tid] = -INFINITY;
        lrow[tid] = 0;
        rfirst[tid] = window > 0 && qp - window + 1 > 0 ? qp - window + 1 : 0;
        rlast[tid] = i < n ? qp : -1; /* rows past the tile see no key */
    }
    float acc[AT_MAX_OWN];
#pragma unroll
    for (int j = 0; j < AT_MAX_OWN; j++) acc[j] = 0;
    __syncthreads();
    for (int c0 = s0; c0 < s1; c0 += AT_CHUNK) {
        const int cn = min(AT_CHUNK, s1 - c0);
        /* each warp scores keys warp, warp + nwarps, ...: AT_KU keys at a
         * time, all their loads issued before the first dot product */
        for (int j0 = warp; j0 < cn; j0 += AT_KU * nwarps) {
            float4 kv4[AT_KU][4];
#pragma unroll
            for (int u = 0; u < AT_KU; u++) {
                const int p = c0 + min(j0 + u * nwarps, cn - 1);
#pragma unroll
                for (int m = 0; m < 4; m++)
                    kv4[u][m] = m * 128 < D ? kv_row4(k, ck, p, pos0, kvh, h, D, cap, ring, m * 128 + lane * 4)
                                            : make_float4(0, 0, 0, 0);
            }
#pragma unroll
            for (int u = 0; u < AT_KU; u++) {
                const int j = j0 + u * nwarps, p = c0 + j;
                if (j >= cn) break;
                for (int r = 0; r < R; r++) {
                    if (p < rfirst[r] || p > rlast[r]) { /* the same for the whole warp */
                        if (lane == 0) S[r * AT_CHUNK + j] = -INFINITY;
                        continue;
                    }
                    float dot = 0;
#pragma unroll
                    for (int m = 0; m < 4; m++)
                        if (m * 128 < D) {
                            const float4 qv = *(const float4 *)(qs + r * D + m * 128 + lane * 4);
                            dot += qv.x * kv4[u][m].x + qv.y * kv4[u][m].y + qv.z * kv4[u][m].z + qv.w * kv4[u][m].w;
                        }
                    dot = warp_sum(dot);
                    if (lane == 0) S[r * AT_CHUNK + j] = dot;
                }
            }
        }
        __syncthreads();
        for (int r = warp; r < R; r += nwarps) {
            float mx = -INFINITY;
            for (int j = lane; j < cn; j += 32) mx = fmaxf(mx, S[r * AT_CHUNK + j]);
            mx = warp_max(mx);
            const float mnew = fmaxf(mrow[r], mx);
            float sum = 0;
            for (int j = lane; j < cn; j += 32) {
                const float e = mnew == -INFINITY ? 0.0f : expf(S[r * AT_CHUNK + j] - mnew);
                S[r * AT_CHUNK + j] = e;
                sum += e;
            }
            sum = warp_sum(sum);
            if (lane == 0) {
                const float a = mnew == -INFINITY ? 1.0f : expf(mrow[r] - mnew);
                alpha[r] = a;
                lrow[r] = lrow[r] * a + sum;
                mrow[r] = mnew;
            }
        }
        __syncthreads();
#pragma unroll
        for (int jj = 0; jj < AT_MAX_OWN; jj++)
            if (jj < R * EPT) acc[jj] *= alpha[jj / EPT];
        /* AT_VU value rows in flight per thread (latency, not bandwidth,
         * bounds a one-token step: each split has few keys) */
        for (int j0 = 0; j0 < cn; j0 += AT_VU) {
            float vv[AT_VU][EPT];
            if (pairs) { /* one 8- (f32) or 4-byte (f16) load per value row */
#pragma unroll
                for (int u = 0; u < AT_VU; u++) {
                    const int p = c0 + min(j0 + u, cn - 1);
                    const float2 x = 2 * tid < D ? kv_row2(v, cv, p, pos0, kvh, h, D, cap, ring, 2 * tid)
                                                 : make_float2(0, 0);
                    vv[u][0] = x.x;
                    vv[u][EPT - 1] = x.y;
                }
            } else {
#pragma unroll
                for (int u = 0; u < AT_VU; u++) {
                    const int p = c0 + min(j0 + u, cn - 1);
#pragma unroll
                    for (int e = 0; e < EPT; e++)
                        vv[u][e] = tid + e * AT_THREADS < D
                                       ? kv_row1(v, cv, p, pos0, kvh, h, D, cap, ring, tid + e * AT_THREADS)
                                       : 0.0f;
                }
            }
#pragma unroll
            for (int u = 0; u < AT_VU; u++) {
                if (j0 + u >= cn) break;
#pragma unroll
                for (int jj = 0; jj < AT_MAX_OWN; jj++)
                    if (jj < R * EPT) acc[jj] += S[(jj / EPT) * AT_CHUNK + j0 + u] * vv[u][jj % EPT];
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int jj = 0; jj < AT_MAX_OWN; jj++) {
        const int r = jj / EPT, e = pairs ? 2 * tid + jj % EPT : tid + (jj % EPT) * AT_THREADS, qi = r / G, g = r % G;
        if (jj < R * EPT && e < D && i0 + qi < n)
            part[(((size_t)(i0 + qi) * n_head + hq0 + g) * nsplit + split) * D + e] = acc[jj];
    }
    if (tid < R && i0 + tid / G < n) {
        const size_t o = (((size_t)(i0 + tid / G) * n_head + hq0 + tid % G) * nsplit + split) * 2;
        pml[o] = mrow[tid];
        pml[o + 1] = lrow[tid];
    }
}

/* Weights of the splits in parallel (a one-token step may have 256), then
 * each output element sums only the splits that had keys. */
/* The number of splits with keys for query i: the split kernel's ranges
 * (per query block of QB) recomputed; splits past it wrote nothing. */
__device__ __forceinline__ int attn_used_splits(const int *step, int i, int n, int QB, int window, int nsplit) {
    const int i0 = i / QB * QB, pos0 = step[0];
    const int qp_first = pos0 + i0, qp_last = pos0 + min(i0 + QB, n) - 1;
    const int first = window > 0 && qp_first - window + 1 > 0 ? qp_first - window + 1 : 0;
    const int len = qp_last - first + 1, per = max((len + nsplit - 1) / nsplit, AT_MIN_SPLIT);
    return min(nsplit, (len + per - 1) / per);
}

__global__ void k_attn_combine(const float *part, const float *pml, int n_head, int d, int nsplit, float *out,
                               int8_t *__restrict__ xq, float *__restrict__ xd, int *__restrict__ xs,
                               const int *step, int n, int QB, int window) {
    pdl_wait();
    extern __shared__ float wgt[];
    __shared__ float red[32];
    const int hq = blockIdx.x, i = blockIdx.y, tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
    const int nw = blockDim.x >> 5;
    const size_t base = (size_t)i * n_head + hq;
    const float *ml = pml + base * nsplit * 2;
    const int used = attn_used_splits(step, i, n, QB, window, nsplit);
    float M = -INFINITY;
    for (int s = tid; s < used; s += blockDim.x) M = fmaxf(M, ml[2 * s]);
    M = warp_max(M);
    if (lane == 0) red[w] = M;
    __syncthreads();
    M = red[0];
    for (int j = 1; j < nw; j++) M = fmaxf(M, red[j]);
    __syncthreads();
    float L = 0;
    for (int s = tid; s < used; s += blockDim.x) {
        const float wt = ml[2 * s] == -INFINITY ? 0.0f : expf(ml[2 * s] - M);
        wgt[s] = wt;
        L += wt * ml[2 * s + 1];
    }
    L = block_sum(L, red);
    const float inv = 1.0f / L;
    for (int e = tid; e < d; e += blockDim.x) {
        float o = 0;
        /* no branch: eight partial loads in flight (a split of a row's
         * query block that saw none of the row's keys left zeros) */
#pragma unroll 8
        for (int s = 0; s < used; s++) o += wgt[s] * part[(base * nsplit + s) * d + e];
        o *= inv;
        out[base * d + e] = o;
        if (xq) {
            /* the 8-bit codes for the output projection: a warp holds one
             * 32-value block (d is a multiple of 32) */
            quantize_block32(o, (base * d + e) / 32, lane, xq, xd, xs);
        }
    }
}

/* ---- prefill attention on the tensor cores ----
 * A tile of at least FA_MIN_N queries (GEM_CUDA_MMA on): one block per (KV
 * head, BR rows), a row being one (query, query head) pair of the heads
 * that share the KV head, so each key and value tile staged in shared
 * memory serves all of them. Q, K, V and the probabilities enter
 * mma.sync m16n8k16 as f16 (the products and every sum in f32): scores and
 * outputs move by the f16 rounding of the operands (relative 2^-11 each),
 * which cuda_ops bounds like the f16 cache. Online softmax per key tile of
 * FA_BC (as the split kernel, expf), masks per row (causal and window),
 * no splits: the block writes the normalised rows. Warps: S = Q K^T and
 * O += P V as BR/16 row groups x WC parts (of the keys, of the head), the
 * softmax BR/8 rows each. BR = 128 rows for heads up to 256 (O of 16 x D
 * per warp in registers), 64 for longer heads (16 x D/2): every staged
 * key and value serves BR rows, and the staging (L2 to shared memory,
 * f32 to f16) is what bounds the kernel. */
#define FA_BC 64
#define FA_THREADS 256
#define FA_MIN_N 16

template <int D> struct fa_geom {
    static constexpr int BR = D <= 256 ? 128 : 64; /* rows per block */
    static constexpr int WC = 128 / BR;             /* warps per row group */
    static constexpr int LD = D + 8;       /* halves per Q/K/V row: fragment loads conflict-free */
    static constexpr int SLD = FA_BC + 4;  /* floats per score row */
    static constexpr int PLD = FA_BC + 8;  /* halves per probability row */
    static constexpr size_t K_OFF = (size_t)BR * LD * 2, V_OFF = K_OFF + (size_t)FA_BC * LD * 2,
                            S_OFF = V_OFF + (size_t)FA_BC * LD * 2, P_OFF = S_OFF + (size_t)BR * SLD * 4,
                            M_OFF = P_OFF + (size_t)BR * PLD * 2, SMEM = M_OFF + 3 * BR * 4;
};

/* Four 8x8 f16 matrices, transposed: lane l names row l % 8 of matrix l / 8. */
__device__ __forceinline__ void ldsm_x4_t(unsigned &r0, unsigned &r1, unsigned &r2, unsigned &r3, const void *p) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(s));
}

__device__ __forceinline__ void st_half4(__half *p, float4 x) {
    *(__half2 *)p = __floats2half2_rn(x.x, x.y);
    *(__half2 *)(p + 2) = __floats2half2_rn(x.z, x.w);
}

/* LB: float4 loads per array a thread issues before it converts and stores
 * them (1, or 4 with GEM_CUDA_FA_LB=4, not yet measured): one at a time,
 * each 64-key tile is 16 (head 256) or 32 (head 512) dependent L2 round
 * trips per thread. */
template <int D, typename KT, int LB>
__global__ void __launch_bounds__(FA_THREADS, 1)
    k_attn_fa(const float *q, const float *k, const float *v, const KT *ck, const KT *cv, const int *step, int n,
              int n_head, int kvh, int cap, int ring, int window, float *out) {
    pdl_wait();
    typedef fa_geom<D> F;
    constexpr int BR = F::BR, WC = F::WC, NS = FA_BC / WC / 8; /* 8-key score tiles per warp */
    extern __shared__ __align__(16) uint8_t fa_smem[];
    __half *Qs = (__half *)fa_smem, *Ks = (__half *)(fa_smem + F::K_OFF), *Vs = (__half *)(fa_smem + F::V_OFF);
    float *S = (float *)(fa_smem + F::S_OFF);
    __half *Ps = (__half *)(fa_smem + F::P_OFF);
    float *mrow = (float *)(fa_smem + F::M_OFF), *lrow = mrow + BR, *alpha = lrow + BR;
    const int G = n_head / kvh, h = blockIdx.y, r0 = blockIdx.x * BR, rows = n * G;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c = lane & 3;
    const int wr = warp / WC, wc = warp % WC;
    const int pos0 = step[0];
    const int qp_first = pos0 + r0 / G, qp_last = pos0 + (min(r0 + BR, rows) - 1) / G;
    const int first = window > 0 && qp_first - window + 1 > 0 ? qp_first - window + 1 : 0;
    static_assert((BR * D / 4) % FA_THREADS == 0 && (FA_BC * D / 4) % FA_THREADS == 0, "whole load rounds");
    static_assert((BR * D / 4 / FA_THREADS) % LB == 0 && (FA_BC * D / 4 / FA_THREADS) % LB == 0, "load batches");
    if constexpr (LB == 1) { /* the compiler's own schedule (unrolled by 4) */
        for (int idx = tid; idx < BR * D / 4; idx += FA_THREADS) {
            const int r = idx / (D / 4), e = 4 * (idx % (D / 4)), row = r0 + r;
            st_half4(Qs + r * F::LD + e, row < rows ? *(const float4 *)(q + ((size_t)(row / G) * n_head + h * G + row % G) * D + e)
                                                    : make_float4(0, 0, 0, 0));
        }
    } else
#pragma unroll 1
    for (int i0 = 0; i0 < BR * D / 4 / FA_THREADS; i0 += LB) {
        float4 qr[LB];
#pragma unroll
        for (int u = 0; u < LB; u++) {
            const int idx = tid + (i0 + u) * FA_THREADS, r = idx / (D / 4), e = 4 * (idx % (D / 4)), row = r0 + r;
            qr[u] = row < rows ? *(const float4 *)(q + ((size_t)(row / G) * n_head + h * G + row % G) * D + e)
                               : make_float4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < LB; u++) {
            const int idx = tid + (i0 + u) * FA_THREADS, r = idx / (D / 4), e = 4 * (idx % (D / 4));
            st_half4(Qs + r * F::LD + e, qr[u]);
        }
    }
    if (tid < BR) {
        mrow[tid] = -INFINITY;
        lrow[tid] = 0;
    }
    constexpr int NO = D / WC / 8; /* 8-wide output tiles per warp */
    float o[NO][4];
#pragma unroll
    for (int t = 0; t < NO; t++) o[t][0] = o[t][1] = o[t][2] = o[t][3] = 0;
    for (int t0 = first; t0 <= qp_last; t0 += FA_BC) {
        __syncthreads(); /* the last tile's K, V and P are read */
        /* keys past the block's last query load as zeros: masked scores,
         * and a probability 0 times a finite value */
        if constexpr (LB == 1) {
            for (int idx = tid; idx < FA_BC * D / 4; idx += FA_THREADS) {
                const int j = idx / (D / 4), e = 4 * (idx % (D / 4)), p = t0 + j;
                const int in = p <= qp_last;
                st_half4(Ks + j * F::LD + e, in ? kv_row4(k, ck, p, pos0, kvh, h, D, cap, ring, e) : make_float4(0, 0, 0, 0));
                st_half4(Vs + j * F::LD + e, in ? kv_row4(v, cv, p, pos0, kvh, h, D, cap, ring, e) : make_float4(0, 0, 0, 0));
            }
        } else
#pragma unroll 1
        for (int i0 = 0; i0 < FA_BC * D / 4 / FA_THREADS; i0 += LB) {
            float4 kr[LB], vr[LB];
#pragma unroll
            for (int u = 0; u < LB; u++) {
                const int idx = tid + (i0 + u) * FA_THREADS, j = idx / (D / 4), e = 4 * (idx % (D / 4)), p = t0 + j;
                const int in = p <= qp_last;
                kr[u] = in ? kv_row4(k, ck, p, pos0, kvh, h, D, cap, ring, e) : make_float4(0, 0, 0, 0);
                vr[u] = in ? kv_row4(v, cv, p, pos0, kvh, h, D, cap, ring, e) : make_float4(0, 0, 0, 0);
            }
#pragma unroll
            for (int u = 0; u < LB; u++) {
                const int idx = tid + (i0 + u) * FA_THREADS, j = idx / (D / 4), e = 4 * (idx % (D / 4));
                st_half4(Ks + j * F::LD + e, kr[u]);
                st_half4(Vs + j * F::LD + e, vr[u]);
            }
        }
        __syncthreads();
        {
            float s[NS][4];
#pragma unroll
            for (int nt = 0; nt < NS; nt++) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0;
#pragma unroll 4
            for (int kk = 0; kk < D; kk += 16) {
                const __half *qa = Qs + (wr * 16 + g) * F::LD + kk + 2 * c;
                const unsigned a0 = *(const unsigned *)qa, a1 = *(const unsigned *)(qa + 8 * F::LD);
                const unsigned a2 = *(const unsigned *)(qa + 8), a3 = *(const unsigned *)(qa + 8 * F::LD + 8);
#pragma unroll
                for (int nt = 0; nt < NS; nt++) {
                    const __half *kb = Ks + (wc * NS * 8 + nt * 8 + g) * F::LD + kk + 2 * c;
                    mma_f16(s[nt], a0, a1, a2, a3, *(const unsigned *)kb, *(const unsigned *)(kb + 8));
                }
            }
#pragma unroll
            for (int nt = 0; nt < NS; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int row = wr * 16 + g + (e >= 2 ? 8 : 0), col = wc * NS * 8 + nt * 8 + 2 * c + (e & 1);
                    const int grow = r0 + row, p = t0 + col, qp = pos0 + grow / G;
                    const int rf = window > 0 && qp - window + 1 > 0 ? qp - window + 1 : 0;
                    S[row * F::SLD + col] = grow < rows && p >= rf && p <= qp ? s[nt][e] : -INFINITY;
                }
        }
        __syncthreads();
#pragma unroll 2
        for (int rr = 0; rr < BR / 8; rr++) {
            const int row = warp * (BR / 8) + rr;
            const float x0 = S[row * F::SLD + lane], x1 = S[row * F::SLD + lane + 32];
            const float mold = mrow[row], mnew = fmaxf(mold, warp_max(fmaxf(x0, x1)));
            const float p0 = mnew == -INFINITY ? 0.0f : expf(x0 - mnew), p1 = mnew == -INFINITY ? 0.0f : expf(x1 - mnew);
            Ps[row * F::PLD + lane] = __float2half_rn(p0);
            Ps[row * F::PLD + lane + 32] = __float2half_rn(p1);
            const float sum = warp_sum(p0 + p1);
            if (lane == 0) {
                const float a = mnew == -INFINITY ? 1.0f : expf(mold - mnew);
                alpha[row] = a;
                lrow[row] = lrow[row] * a + sum;
                mrow[row] = mnew;
            }
        }
        __syncthreads();
        const float alo = alpha[wr * 16 + g], ahi = alpha[wr * 16 + g + 8];
#pragma unroll
        for (int t = 0; t < NO; t++) o[t][0] *= alo, o[t][1] *= alo, o[t][2] *= ahi, o[t][3] *= ahi;
#pragma unroll
        for (int kk = 0; kk < FA_BC; kk += 16) {
            const __half *pa = Ps + (wr * 16 + g) * F::PLD + kk + 2 * c;
            const unsigned a0 = *(const unsigned *)pa, a1 = *(const unsigned *)(pa + 8 * F::PLD);
            const unsigned a2 = *(const unsigned *)(pa + 8), a3 = *(const unsigned *)(pa + 8 * F::PLD + 8);
            const __half *vb = Vs + (kk + (lane & 7) + (lane & 8)) * F::LD + wc * (D / WC) + (lane >> 4) * 8;
#pragma unroll
            for (int t = 0; t < NO; t += 2) {
                unsigned b0, b1, b2, b3;
                ldsm_x4_t(b0, b1, b2, b3, vb + t * 8);
                mma_f16(o[t], a0, a1, a2, a3, b0, b1);
                mma_f16(o[t + 1], a0, a1, a2, a3, b2, b3);
            }
        }
    }
    __syncthreads();
#pragma unroll
    for (int hi = 0; hi < 2; hi++) {
        const int row = wr * 16 + g + 8 * hi, grow = r0 + row;
        if (grow >= rows) continue;
        const float l = lrow[row], inv = l > 0 ? 1.0f / l : 0.0f;
        float *dst = out + ((size_t)(grow / G) * n_head + h * G + grow % G) * D + wc * (D / WC) + 2 * c;
#pragma unroll
        for (int t = 0; t < NO; t++) *(float2 *)(dst + t * 8) = make_float2(o[t][2 * hi] * inv, o[t][2 * hi + 1] * inv);
    }
}

template <int D> static cudaError_t fa_allow() {
    const int smem = (int)fa_geom<D>::SMEM;
    cudaError_t e = cudaFuncSetAttribute(k_attn_fa<D, float, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e == cudaSuccess) e = cudaFuncSetAttribute(k_attn_fa<D, __half, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e == cudaSuccess) e = cudaFuncSetAttribute(k_attn_fa<D, float, 4>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e == cudaSuccess) e = cudaFuncSetAttribute(k_attn_fa<D, __half, 4>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    return e;
}
static cudaError_t fa_allow_all() {
    cudaError_t e = fa_allow<128>();
    if (e == cudaSuccess) e = fa_allow<256>();
    if (e == cudaSuccess) e = fa_allow<384>();
    if (e == cudaSuccess) e = fa_allow<512>();
    return e;
}

/* The combine of steps of up to 8 tokens (GEM_CUDA_COMBINE=2, not yet the
 * default): one block per (query, head, 32 output elements), its 8 warps
 * summing every 8th split from a different start (lane = element), then
 * warp 0 adding the 8 sums in order. k_attn_combine gives a head's whole
 * row to one block of 128 threads, each walking all splits for its
 * elements: at depth, 256 splits x 512 elements of a full layer are 128
 * rounds of dependent loads in only 32 blocks. The same split weights and
 * the same quantization; L and the outputs are summed in another (fixed)
 * order, so the last bit of an output, and rarely a code, can differ from
 * k_attn_combine's. */
#define CB_GROUPS 8
__global__ void __launch_bounds__(CB_GROUPS * 32)
    k_attn_combine_wide(const float *part, const float *pml, int n_head, int d, int nsplit, float *out,
                        int8_t *__restrict__ xq, float *__restrict__ xd, int *__restrict__ xs, const int *step, int n,
                        int QB, int window) {
    pdl_wait();
    extern __shared__ float wgt[];
    __shared__ float red[CB_GROUPS][32], mx[CB_GROUPS], sm_l[32];
    const int hq = blockIdx.x, i = blockIdx.y, e = blockIdx.z * 32 + (threadIdx.x & 31);
    const int tid = threadIdx.x, lane = tid & 31, grp = tid >> 5;
    const size_t base = (size_t)i * n_head + hq;
    const float *ml = pml + base * nsplit * 2;
    const int used = attn_used_splits(step, i, n, QB, window, nsplit);
    float M = -INFINITY;
    for (int sp = tid; sp < used; sp += blockDim.x) M = fmaxf(M, ml[2 * sp]);
    M = warp_max(M);
    if (lane == 0) mx[grp] = M;
    __syncthreads();
    M = mx[0];
    for (int j = 1; j < CB_GROUPS; j++) M = fmaxf(M, mx[j]);
    float L = 0;
    for (int sp = tid; sp < used; sp += blockDim.x) {
        const float wt = ml[2 * sp] == -INFINITY ? 0.0f : expf(ml[2 * sp] - M);
        wgt[sp] = wt;
        L += wt * ml[2 * sp + 1];
    }
    L = block_sum(L, sm_l); /* its barrier also publishes wgt */
    float o = 0;
#pragma unroll 8
    for (int sp = grp; sp < used; sp += CB_GROUPS) o += wgt[sp] * part[(base * nsplit + sp) * d + e];
    red[grp][lane] = o;
    __syncthreads();
    if (grp != 0) return;
    o = red[0][lane];
#pragma unroll
    for (int j = 1; j < CB_GROUPS; j++) o += red[j][lane];
    o *= 1.0f / L;
    out[base * d + e] = o;
    if (xq) quantize_block32(o, (base * d + e) / 32, lane, xq, xd, xs); /* the warp holds one 32-value block */
}

template <typename KT>
__global__ void k_kv_store(const float *k, const float *v, KT *ck, KT *cv, const int *step, int row, int cap,
                           int ring) {
    pdl_wait();
    const int i = blockIdx.x, p = step[0] + i;
    /* a tile longer than the ring stores only its last `cap` positions: the
     * earlier ones would share slots with them (the CPU's sequential stores
     * leave the last writer, and so must this) */
    if (ring && i < (int)gridDim.x - cap) return;
    const size_t slot = (size_t)(ring ? p % cap : p);
    for (int e = threadIdx.x; e < row; e += blockDim.x) {
        kv_st(ck + slot * row + e, k[(size_t)i * row + e]);
        kv_st(cv + slot * row + e, v[(size_t)i * row + e]);
    }
}

static int attn_splits(const be_kv *kv, int n) {
    int s = kv->nsplit;
    if (n > 1) {
        s = 256 / n;
        if (s > kv->nsplit) s = kv->nsplit;
        if (s < 1) s = 1;
    }
    return s;
}

/* A tile's keys and values into the cache, after every query read the old
 * ring (one-token steps store inside the attention kernel). */
static void kv_store_tile(cuda_backend *c, const be_buf *k, const be_buf *v, be_kv *kv, int n, int n_kv_head, int d) {
    if (kv->f16)
        launch(c, k_kv_store<__half>, n, 256, 0, k->d, v->d, (__half *)kv->k, (__half *)kv->v, c->step, n_kv_head * d,
               kv->capacity, kv->ring);
    else
        launch(c, k_kv_store<float>, n, 256, 0, k->d, v->d, (float *)kv->k, (float *)kv->v, c->step, n_kv_head * d,
               kv->capacity, kv->ring);
    LAUNCHED(c, "kv store");
}

static void cu_attention(backend *b, const be_buf *q, const be_buf *k, const be_buf *v, be_kv *kv, int n, int pos0,
                         int n_head, int n_kv_head, int d, int window, be_buf *out) {
    cuda_backend *c = cu_of(b);
    (void)pos0; /* read from the step buffer */
    if (c->mma && n >= FA_MIN_N && d % 128 == 0 && d <= 512 && n_head % n_kv_head == 0) {
        const int br = d <= 256 ? fa_geom<256>::BR : fa_geom<512>::BR;
        const dim3 grid((unsigned)(((size_t)n * (n_head / n_kv_head) + br - 1) / br), n_kv_head);
#define FA_LAUNCH_LB(DIM, KT, LB)                                                                               \
    launch(c, k_attn_fa<DIM, KT, LB>, grid, FA_THREADS, fa_geom<DIM>::SMEM, q->d, k->d, v->d, (const KT *)kv->k,     \
           (const KT *)kv->v, c->step, n, n_head, n_kv_head, kv->capacity, kv->ring, window, out->d)
#define FA_LAUNCH_T(DIM, KT)             \
    if (c->fa_lb == 4)                   \
        FA_LAUNCH_LB(DIM, KT, 4);        \
    else                                 \
        FA_LAUNCH_LB(DIM, KT, 1)
#define FA_LAUNCH(DIM)                   \
    if (kv->f16)                         \
        FA_LAUNCH_T(DIM, __half);        \
    else                                 \
        FA_LAUNCH_T(DIM, float)
        switch (d) {
        case 128: FA_LAUNCH(128); break;
        case 256: FA_LAUNCH(256); break;
        case 384: FA_LAUNCH(384); break;
        default: FA_LAUNCH(512); break;
        }
#undef FA_LAUNCH
#undef FA_LAUNCH_T
#undef FA_LAUNCH_LB
        LAUNCHED(c, d <= 256 ? "attention (tensor cores, d<=256)" : "attention (tensor cores, d>256)");
        kv_store_tile(c, k, v, kv, n, n_kv_head, d);
        return;
    }
    const int nsplit = attn_splits(kv, n);
    /* the largest group of query heads (a divisor of n_head / n_kv_head)
     * whose outputs fit the block's registers */
    int G = n_head / n_kv_head;
    const int ept = (d + AT_THREADS - 1) / AT_THREADS; /* output elements per thread and row */
    while (G * ept > AT_MAX_OWN && G % 2 == 0) G /= 2;
    if (G * ept > AT_MAX_OWN || d % 128 || d > 512 || n_head % n_kv_head) {
        cu_check(c, cudaErrorInvalidValue, "attention: unsupported head shape");
        return;
    }
    const int groups = n_head / n_kv_head / G;
    /* queries per block: as many as the accumulators hold (one value load
     * then serves G x QB rows) */
    int QB = AT_MAX_OWN / (G * ept);
    if (QB < 1) QB = 1;
    if (QB > n) QB = n;
    const int R = G * QB;
    const size_t rows = (size_t)n * n_head * nsplit;
    if (grow(c, &c->part, rows * d * sizeof(float)) || grow(c, &c->pml, rows * 2 * sizeof(float))) return;
    const size_t shm = sizeof(float) * ((size_t)R * d + (size_t)R * AT_CHUNK + 5 * (size_t)R);
    const dim3 grid(n_kv_head * groups, nsplit, (n + QB - 1) / QB);
#define ATTN_LAUNCH_P(DIM, KT, P)                                                                               \
    launch(c, k_attn_split<DIM, KT, (P)>, grid, AT_THREADS, shm, q->d, k->d, v->d, (const KT *)kv->k, (const KT *)kv->v, \
           c->step, n, n_head, n_kv_head, kv->capacity, kv->ring, window, nsplit, G, QB, (float *)c->part.p,       \
           (float *)c->pml.p, n == 1 ? (KT *)kv->k : (KT *)NULL, n == 1 ? (KT *)kv->v : (KT *)NULL)
#define ATTN_LAUNCH_T(DIM, KT)                                                  \
    if (c->attn_v2)                                                             \
        ATTN_LAUNCH_P(DIM, KT, (DIM + AT_THREADS - 1) / AT_THREADS == 2);       \
    else                                                                        \
        ATTN_LAUNCH_P(DIM, KT, false)
#define ATTN_LAUNCH(DIM)                 \
    if (kv->f16)                         \
        ATTN_LAUNCH_T(DIM, __half);      \
    else                                 \
        ATTN_LAUNCH_T(DIM, float)
    switch (d) {
    case 128: ATTN_LAUNCH(128); break;
    case 256: ATTN_LAUNCH(256); break;
    case 384: ATTN_LAUNCH(384); break;
    default: ATTN_LAUNCH(512); break;
    }
#undef ATTN_LAUNCH
#undef ATTN_LAUNCH_T
#undef ATTN_LAUNCH_P
    LAUNCHED(c, "attention");
    /* the output is the input of the output projection: its 8-bit codes
     * are made here (as in cu_rmsnorm) */
    const size_t nblk = (size_t)n * n_head * d / 32;
    const int quant = d % 32 == 0 &&
                      (!c->capturing || (nblk * 32 <= c->xq.cap && nblk * sizeof(float) <= c->xd.cap &&
                                         nblk * sizeof(int) <= c->xs.cap)) &&
                      !grow(c, &c->xq, nblk * 32) && !grow(c, &c->xd, nblk * sizeof(float)) &&
                      !grow(c, &c->xs, nblk * sizeof(int));
    if (c->combine_wide && n <= 8 && d % 32 == 0)
        launch(c, k_attn_combine_wide, dim3(n_head, n, d / 32), CB_GROUPS * 32, sizeof(float) * (size_t)nsplit,
               (const float *)c->part.p, (const float *)c->pml.p, n_head, d, nsplit, out->d,
               quant ? (int8_t *)c->xq.p : NULL, quant ? (float *)c->xd.p : NULL, quant ? (int *)c->xs.p : NULL,
               c->step, n, QB, window);
    else
        launch(c, k_attn_combine, dim3(n_head, n), 128, sizeof(float) * (size_t)nsplit, (const float *)c->part.p,
               (const float *)c->pml.p, n_head, d, nsplit, out->d, quant ? (int8_t *)c->xq.p : NULL,
               quant ? (float *)c->xd.p : NULL, quant ? (int *)c->xs.p : NULL, c->step, n, QB, window);
    LAUNCHED(c, "attention combine");
    if (n > 1) kv_store_tile(c, k, v, kv, n, n_kv_head, d);
    if (quant) quantized_cache_set(c, out->d, n, n_head * d);
}

static be_kv *cu_kv_new(backend *b, int n_kv_head, int d, int capacity, int ring, gem_err *err) {
    cuda_backend *c = cu_of(b);
    be_kv *kv = (be_kv *)calloc(1, sizeof *kv);
    const size_t bytes = (size_t)capacity * n_kv_head * d * (c->kv_f16 ? sizeof(__half) : sizeof(float));
    cudaError_t e = kv ? cudaMalloc(&kv->k, bytes) : cudaErrorMemoryAllocation;
    if (e == cudaSuccess) e = cudaMalloc(&kv->v, bytes);
    if (e == cudaSuccess) e = cudaMemsetAsync(kv->k, 0, bytes, c->st);
    if (e == cudaSuccess) e = cudaMemsetAsync(kv->v, 0, bytes, c->st);
    if (e != cudaSuccess) {
        gem_err_set(err, "cannot allocate a KV cache of %d positions (%.1f MiB) on the GPU: %s", capacity,
                    2.0 * bytes / 1048576.0, cudaGetErrorString(e));
        if (kv) {
            cudaFree(kv->k);
            cudaFree(kv->v);
            free(kv);
        }
        return NULL;
    }
    kv->f16 = c->kv_f16;
    kv->n_kv_head = n_kv_head;
    kv->head_dim = d;
    kv->capacity = capacity;
    kv->ring = ring;
    /* a one-token step is latency-bound: many short splits (32 keys each,
     * up to 256) keep every multiprocessor busy */
    kv->nsplit = capacity / 32;
    if (kv->nsplit > 256) kv->nsplit = 256;
    if (kv->nsplit < 1) kv->nsplit = 1;
    return kv;
}

static void cu_kv_free(backend *b, be_kv *kv) {
    (void)b;
    if (!kv) return;
    cudaFree(kv->k);
    cudaFree(kv->v);
    free(kv);
}

static size_t cu_kv_bytes(backend *b, const be_kv *kv, int n_pos) {
    (void)b;
    size_t slots = (size_t)(kv->ring ? (n_pos < kv->capacity ? n_pos : kv->capacity) : n_pos);
    return 2 * slots * (size_t)kv->n_kv_head * kv->head_dim * (kv->f16 ? sizeof(__half) : sizeof(float));
}

static void cu_kv_save(backend *b, const be_kv *kv, int n_pos, void *dst) {
    cuda_backend *c = cu_of(b);
    size_t half = cu_kv_bytes(b, kv, n_pos) / 2;
    CK(c, cudaStreamSynchronize(c->st));
    CK(c, cudaMemcpy(dst, kv->k, half, cudaMemcpyDeviceToHost));
    CK(c, cudaMemcpy((char *)dst + half, kv->v, half, cudaMemcpyDeviceToHost));
}

static void cu_kv_load(backend *b, be_kv *kv, int n_pos, const void *src) {
    cuda_backend *c = cu_of(b);
    size_t half = cu_kv_bytes(b, kv, n_pos) / 2;
    CK(c, cudaStreamSynchronize(c->st));
    CK(c, cudaMemcpy(kv->k, src, half, cudaMemcpyHostToDevice));
    CK(c, cudaMemcpy(kv->v, (const char *)src + half, half, cudaMemcpyHostToDevice));
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
    pdl_wait();
    const int r = blockIdx.y;
    float v = -INFINITY;
    int idx = 0x7fffffff;
    for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < width; j += gridDim.x * blockDim.x)
        better(v, idx, x[(size_t)r * width + j], j);
    block_argmax(v, idx);
    if (threadIdx.x == 0) pv[r * AM_BLOCKS + blockIdx.x] = v, pi[r * AM_BLOCKS + blockIdx.x] = idx;
}

__global__ void k_argmax_final(const float *pv, const int *pi, float *out) {
    pdl_wait();
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
    pdl_wait();
    __shared__ unsigned long long s[TK_CHUNK];
    const int base = blockIdx.x * TK_CHUNK;
    for (int i = threadIdx.x; i < TK_CHUNK; i += blockDim.x) s[i] = base + i < width ? tk_key(x[base + i], base + i) : 0ull;
    __syncthreads();
    tk_sort_desc(s, TK_CHUNK);
    for (int i = threadIdx.x; i < k; i += blockDim.x) part[(size_t)blockIdx.x * k + i] = s[i];
}

__global__ void __launch_bounds__(1024) k_topk_final(const unsigned long long *part, int n, int p2, int k, float *out) {
    pdl_wait();
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

static void cu_destroy(backend *b) {
    cuda_backend *c = cu_of(b);
    cudaStreamSynchronize(c->st);
    if (c->profile) {
        double total = 0;
        for (int i = 0; i < 48 && c->prof[i].name[0]; i++) total += c->prof[i].s;
        fprintf(stderr, "gem cuda profile (GPU time per op, each op run alone; no graph, no launch overlap):\n");
        for (int i = 0; i < 48 && c->prof[i].name[0]; i++)
            fprintf(stderr, "  %-34s %8ld calls %10.3f ms %5.1f%%  %8.2f us/call\n", c->prof[i].name, c->prof[i].calls,
                    c->prof[i].s * 1e3, 100 * c->prof[i].s / (total > 0 ? total : 1), 1e6 * c->prof[i].s / c->prof[i].calls);
    }
    scratch *s[] = {&c->xq, &c->xd, &c->xs, &c->part, &c->pml, &c->amax_v, &c->amax_i, &c->up, &c->topk_part, &c->xh, &c->xhinv};
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

extern "C" backend *backend_cuda_create(const backend_opts *o, gem_err *err) {
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
        (e = cudaFuncSetAttribute(k_mm_tiled<1>, cudaFuncAttributeMaxDynamicSharedMemorySize, mmt_geom<1>::SMEM)) !=
            cudaSuccess ||
        (e = cudaFuncSetAttribute(k_mm_tiled<0>, cudaFuncAttributeMaxDynamicSharedMemorySize, mmt_geom<0>::SMEM)) !=
            cudaSuccess ||
        (e = cudaFuncSetAttribute(k_topk_final, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (int)(sizeof(unsigned long long) * TK_FINAL))) != cudaSuccess ||
        (e = fa_allow_all()) != cudaSuccess ||
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
    b->argmax = cu_argmax;
    b->topk = cu_topk;
    b->set_step = cu_set_step;
    /* tensor-core prefill is the default; GEM_CUDA_MMA=0 selects the dp4a
     * kernels (whose f32 order matches the CPU fast path: tests/cuda/run.sh) */
    const char *mma = getenv("GEM_CUDA_MMA");
    c->mma = !(mma && !strcmp(mma, "0"));
    const char *mmh = getenv("GEM_CUDA_MMH");
    c->mmh_variant = mmh && !strcmp(mmh, "1") ? 1 : mmh && !strcmp(mmh, "3") ? 3 : 2;
    const char *mvs = getenv("GEM_CUDA_MV_SPLIT");
    c->mv_split = !(mvs && !strcmp(mvs, "0"));
    const char *cmb = getenv("GEM_CUDA_COMBINE");
    c->combine_wide = cmb && !strcmp(cmb, "2");
    const char *lb = getenv("GEM_CUDA_FA_LB");
    c->fa_lb = lb && !strcmp(lb, "4") ? 4 : 1;
    const char *v2 = getenv("GEM_CUDA_ATTN_V2");
    c->attn_v2 = v2 && !strcmp(v2, "1");
    const char *pdl = getenv("GEM_CUDA_PDL");
    c->pdl = !(pdl && !strcmp(pdl, "0"));
    const char *prof = getenv("GEM_CUDA_PROFILE");
    c->profile = prof && *prof && strcmp(prof, "0");
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
