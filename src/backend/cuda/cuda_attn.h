/* What the two attention files share (included by cuda_attn_prefill.cu and
 * cuda_attn_decode.cu only; invariants in cuda_common.h): cache entry
 * loads and stores, the split ranges every attention kernel and combine
 * agree on, the partials' (max, sum) layout, the in-kernel store of a
 * one-token step's key and value, the combines' weights, two f16 fragment
 * helpers, and the prefill file's launchers that the decode file's
 * attention_run calls.
 *
 * Invariants: a call of n queries at pos0 cuts each query block's keys
 * into nsplit splits of attn_split_per keys (at least AT_MIN_SPLIT); each
 * kernel leaves, per (query, head, split), an unnormalised partial row and
 * its (max, sum), an empty split (-inf, 0); the combines read only the
 * splits attn_used_splits names. Every attention kernel is defined in one
 * of the two files and launched only there (no relocatable device code):
 * the decode file reaches the prefill file's kernels through the
 * launchers below. */
#ifndef GEM_BACKEND_CUDA_ATTN_H
#define GEM_BACKEND_CUDA_ATTN_H

#include "backend/cuda/cuda_common.h"

#define AT_THREADS 256
#define AT_CHUNK 64
#define AT_MAX_OWN 16 /* accumulators per thread: rows x ceil(head_dim / AT_THREADS) */
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
template <typename KT>
__device__ __forceinline__ float kv_row1(const float *cur, const KT *cache, int p, int pos0, int kvh, int h, int d,
                                         int cap, int ring, int e) {
    if (p >= pos0) return cur[((size_t)(p - pos0) * kvh + h) * d + e];
    const int slot = ring ? p % cap : p;
    return kv_ld1(cache + ((size_t)slot * kvh + h) * d + e);
}

/* The keys of a query block at positions qp_first..qp_last start at
 * `first` (its first query's window) and are cut into splits of `per`
 * keys, at least AT_MIN_SPLIT: at a shallow depth only the first few
 * splits have keys; the rest leave an empty partial the combine skips
 * without reading. Every attention kernel and the combines use this. */
#define AT_MIN_SPLIT 32
__device__ __forceinline__ int attn_split_per(int qp_first, int qp_last, int window, int nsplit, int &first, int &len) {
    first = window > 0 && qp_first - window + 1 > 0 ? qp_first - window + 1 : 0;
    len = qp_last - first + 1;
    return max((len + nsplit - 1) / nsplit, AT_MIN_SPLIT);
}
/* The splits of query row i's block (QB rows) that hold keys: the
 * combines read these and no further. */
__device__ __forceinline__ int attn_used_splits(const int *step, int i, int n, int QB, int window, int nsplit) {
    const int i0 = i / QB * QB, pos0 = step[0];
    int first, len;
    const int per = attn_split_per(pos0 + i0, pos0 + min(i0 + QB, n) - 1, window, nsplit, first, len);
    return min(nsplit, (len + per - 1) / per);
}
/* A split's weight in a combine: exp(m - M) for its max m against the
 * largest split max M, 0 for a split that saw no key (m = -inf). */
__device__ __forceinline__ float attn_split_weight(float m, float M) { return m == -INFINITY ? 0.0f : expf(m - M); }

/* A split's (max, sum) of one output row (query x head, split), as the
 * combines read them; an empty split is (-inf, 0), which weighs nothing. */
__device__ __forceinline__ void pml_put(float *pml, size_t row, float m, float l) {
    pml[row * 2] = m;
    pml[row * 2 + 1] = l;
}

/* One-token steps store the new key and value inside the attention kernel
 * (threads of the first block of a KV head): no block reads that cache
 * slot (the new key comes from k/v; in a ring the slot held the position
 * just outside the window). */
template <int D, int NT, typename KT>
__device__ __forceinline__ void attn_store_row(const float *kr, const float *vr, KT *store_k, KT *store_v, int pos0,
                                               int cap, int ring, int kvh, int h) {
    const size_t slot = (size_t)(ring ? pos0 % cap : pos0);
    for (int e = threadIdx.x; e < D; e += NT) {
        kv_st(store_k + (slot * kvh + h) * D + e, kr[e]);
        kv_st(store_v + (slot * kvh + h) * D + e, vr[e]);
    }
}
template <int D, int NT, typename KT>
__device__ __forceinline__ void attn_store_step(const float *k, const float *v, KT *store_k, KT *store_v, int pos0,
                                                int cap, int ring, int kvh, int h) {
    attn_store_row<D, NT>(k + (size_t)h * D, v + (size_t)h * D, store_k, store_v, pos0, cap, ring, kvh, h);
}

/* Weights of the splits in parallel (a one-token step may have 256), then
 * each output element sums only the splits that had keys
 * (attn_used_splits: the split kernel's ranges per query block of QB
 * recomputed; splits past it wrote nothing).
 * The combine's weights: each used split's exp(max_s - M) into wgt (0 for a
 * split that saw no key), M the largest split max; returns the weighted sum
 * of the splits' sums, L. Block-wide (red: 32 floats of shared memory);
 * its last barrier also publishes wgt. */
__device__ __forceinline__ float combine_weights(const float *ml, int used, float *wgt, float *red) {
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, nw = blockDim.x >> 5;
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
        const float wt = attn_split_weight(ml[2 * s], M);
        wgt[s] = wt;
        L += wt * ml[2 * s + 1];
    }
    return block_sum(L, red);
}

/* Four 8x8 f16 matrices, transposed: lane l names row l % 8 of matrix l / 8. */
__device__ __forceinline__ void ldsm_x4_t(unsigned &r0, unsigned &r1, unsigned &r2, unsigned &r3, const void *p) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(s));
}

/* Four 8x8 f16 matrices as they are: lane l names row l % 8 of matrix l / 8. */
__device__ __forceinline__ void ldsm_x4(unsigned &r0, unsigned &r1, unsigned &r2, unsigned &r3, const void *p) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(s));
}

/* lo and hi rounded to f16, as one 32-bit fragment register (lo low) */
__device__ __forceinline__ unsigned pack_h2(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *(const unsigned *)&h;
}

__device__ __forceinline__ void st_half4(__half *p, float4 x) {
    *(__half2 *)p = __floats2half2_rn(x.x, x.y);
    *(__half2 *)(p + 2) = __floats2half2_rn(x.z, x.w);
}

/* L(D) for the head sizes the kernels are built for (cu_attention checks
 * d is a multiple of 128 up to 512 before any launch) */
#define HEAD_DIM_SWITCH(d, L) \
    switch (d) {              \
    case 128: L(128); break;  \
    case 256: L(256); break;  \
    case 384: L(384); break;  \
    default: L(512); break;   \
    }
/* L(D, KT) for those head sizes and the cache's entry type KT (__half
 * when f16, else float) */
#define KV_TYPE_CALL(f16, L, D) \
    if (f16)                    \
        L(D, __half);           \
    else                        \
        L(D, float)
#define HEAD_DIM_KV_SWITCH(d, f16, L)                 \
    switch (d) {                                      \
    case 128: KV_TYPE_CALL(f16, L, 128); break;       \
    case 256: KV_TYPE_CALL(f16, L, 256); break;       \
    case 384: KV_TYPE_CALL(f16, L, 384); break;       \
    default: KV_TYPE_CALL(f16, L, 512); break;        \
    }

/* cuda_attn_prefill.cu's launchers (attention_run, cuda_attn_decode.cu,
 * picks among them and the one-token kernels) */
int attn_fa_run(cuda_backend *c, const be_buf *q, const be_buf *k, const be_buf *v, be_kv *kv, int n, int n_head,
                int n_kv_head, int d, int window, be_buf *out);
void attn_split_launch(cuda_backend *c, const be_buf *q, const be_buf *k, const be_buf *v, be_kv *kv, int n,
                       int n_head, int n_kv_head, int d, int window, int nsplit, int G, int QB);
void attn_combine_launch(cuda_backend *c, int n, int n_head, int d, int nsplit, int QB, int window, int quant,
                         be_buf *out);
void kv_store_tile(cuda_backend *c, const be_buf *k, const be_buf *v, be_kv *kv, int n, int n_kv_head, int d);
/* cu_qkv_norm_rope, with rpos (device, stride 3) giving row i's position
 * rpos[3 i] (the rows of a batched step of sequences), else pos0 + i. */
void qkv_norm_rope_launch(cuda_backend *c, be_buf *q, const be_weight *qw, be_buf *k, const be_weight *kw, be_buf *v,
                          int v_from_k, int n, int n_head, int n_kv_head, int d, float eps, float base,
                          const be_weight *ff, const int *rpos);
void kv_store_rows(cuda_backend *c, const be_buf *k, const be_buf *v, be_kv *kv, int n, int n_kv_head, int d,
                   const kv_row *rkv);
cudaError_t attn_prefill_allow(int d); /* flash attention's shared-memory limits, head size d */

#endif
