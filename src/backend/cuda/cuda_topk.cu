/* CUDA picks from the logits (see cuda_ops.h; invariants in
 * cuda_common.h): argmax (greedy decoding reads back one number per
 * row; argmax_prob also the largest value's softmax probability, in f32:
 * a confidence, not an exact quantity; a row of -inf alone gives +inf
 * where the CPU gives NaN, neither a probability a stop rule acts on) and
 * top-k (sampling reads back 2k numbers). The picks are exact and order
 * ties as the sampler does: the lowest index first among equal values. */
#include "backend/cuda/cuda_common.h"
#include "backend/cuda/cuda_ops.h"

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

/* Online softmax sums: (m, s) stands for s exp(m) (s = 0 while m = -inf);
 * two such pairs combine at the larger m. */
__device__ __forceinline__ void ms_join(float &m, float &s, float m2, float s2) {
    const float M = fmaxf(m, m2);
    if (M == -INFINITY) return;
    s = (m == -INFINITY ? 0.0f : s * expf(m - M)) + (m2 == -INFINITY ? 0.0f : s2 * expf(m2 - M));
    m = M;
}

__device__ void block_ms(float &m, float &s) {
    __shared__ float sm[32], ss[32];
    for (int o = 16; o > 0; o >>= 1) ms_join(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    if (lane == 0) sm[w] = m, ss[w] = s;
    __syncthreads();
    if (threadIdx.x == 0)
        for (int j = 1; j < (int)(blockDim.x >> 5); j++) ms_join(m, s, sm[j], ss[j]);
}

/* PROB (argmax_prob, one row): each block also leaves its (m, s) of
 * exp(x) in pms, and the final block writes out[1] = 1 / sum exp(x - max),
 * the largest value's softmax probability (f32 expf: a confidence for the
 * MTP drafter's stop rule, not a bitwise quantity) */
template <bool PROB> __global__ void k_argmax_part(const float *x, int width, float *pv, int *pi, float *pms) {
    CU_TRACE(CT_ARGMAX_PART);
    pdl_wait();
    CU_TRACE_RELEASED();
    const int r = blockIdx.y;
    float v = -INFINITY, m = -INFINITY, s = 0;
    int idx = 0x7fffffff;
    for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < width; j += gridDim.x * blockDim.x) {
        const float y = x[(size_t)r * width + j];
        better(v, idx, y, j);
        if (PROB) ms_join(m, s, y, 1.0f);
    }
    block_argmax(v, idx);
    if (PROB) {
        __syncthreads();
        block_ms(m, s);
    }
    if (threadIdx.x == 0) {
        pv[r * AM_BLOCKS + blockIdx.x] = v, pi[r * AM_BLOCKS + blockIdx.x] = idx;
        if (PROB) pms[2 * blockIdx.x] = m, pms[2 * blockIdx.x + 1] = s;
    }
}

template <bool PROB> __global__ void k_argmax_final(const float *pv, const int *pi, const float *pms, float *out) {
    CU_TRACE(CT_ARGMAX_FINAL);
    pdl_wait();
    CU_TRACE_RELEASED();
    const int r = blockIdx.x;
    float v = -INFINITY, m = -INFINITY, s = 0;
    int idx = 0x7fffffff;
    if (threadIdx.x < AM_BLOCKS) {
        v = pv[r * AM_BLOCKS + threadIdx.x], idx = pi[r * AM_BLOCKS + threadIdx.x];
        if (PROB) m = pms[2 * threadIdx.x], s = pms[2 * threadIdx.x + 1];
    }
    block_argmax(v, idx);
    if (PROB) {
        __syncthreads();
        block_ms(m, s);
    }
    if (threadIdx.x == 0) {
        if (PROB) out[0] = (float)(idx == 0x7fffffff ? 0 : idx), out[1] = 1.0f / s;
        else out[r] = (float)(idx == 0x7fffffff ? 0 : idx);
    }
}

void cu_argmax(backend *b, const be_buf *x, int rows, int width, be_buf *out) {
    cuda_backend *c = cu_of(b);
    if (grow(c, &c->amax_v, sizeof(float) * AM_BLOCKS * (size_t)rows) ||
        grow(c, &c->amax_i, sizeof(int) * AM_BLOCKS * (size_t)rows))
        return;
    launch(c, k_argmax_part<false>, dim3(AM_BLOCKS, rows), 256, 0, x->d, width, (float *)c->amax_v.p,
           (int *)c->amax_i.p, (float *)NULL);
    LAUNCHED(c, "argmax");
    launch(c, k_argmax_final<false>, rows, AM_BLOCKS, 0, (const float *)c->amax_v.p, (const int *)c->amax_i.p,
           (const float *)NULL, out->d);
    LAUNCHED(c, "argmax");
}

void cu_argmax_prob(backend *b, const be_buf *x, int width, be_buf *out) {
    cuda_backend *c = cu_of(b);
    /* amax_v holds the blocks' maxima, then their (m, s) pairs */
    if (grow(c, &c->amax_v, sizeof(float) * 3 * AM_BLOCKS) || grow(c, &c->amax_i, sizeof(int) * AM_BLOCKS)) return;
    float *pv = (float *)c->amax_v.p;
    launch(c, k_argmax_part<true>, dim3(AM_BLOCKS, 1), 256, 0, x->d, width, pv, (int *)c->amax_i.p, pv + AM_BLOCKS);
    LAUNCHED(c, "argmax+prob");
    launch(c, k_argmax_final<true>, 1, AM_BLOCKS, 0, (const float *)pv, (const int *)c->amax_i.p,
           (const float *)(pv + AM_BLOCKS), out->d);
    LAUNCHED(c, "argmax+prob");
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

void cu_topk(backend *b, const be_buf *x, int width, int k, be_buf *out) {
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

/* The final top-k block's shared memory above the 48 KB default. */
cudaError_t topk_allow(void) {
    return cudaFuncSetAttribute(k_topk_final, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                (int)(sizeof(unsigned long long) * TK_FINAL));
}
