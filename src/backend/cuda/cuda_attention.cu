/* CUDA attention and KV caches (see cuda_common.h for the invariants):
 * split-K attention with online softmax for decode steps and the f32
 * prefill path, its combine, tensor-core flash attention for prefill
 * tiles, KV stores, and the caches' allocation and checkpoint blobs. */
#include "backend/cuda/cuda_common.h"

/* ------------------------------------------------------------------ */
/* attention                                                           */

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

/* The keys s0 .. s1 - 1 of split `split` of a one-token step at pos0 (s0 >=
 * s1: the split is empty). */
__device__ __forceinline__ void one_token_split(int pos0, int window, int nsplit, int split, int &s0, int &s1) {
    int first, len;
    const int per = attn_split_per(pos0, pos0, window, nsplit, first, len);
    s0 = first + split * per;
    s1 = min(s0 + per, pos0 + 1);
}

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
template <int D, typename KT>
__global__ void __launch_bounds__(AT_THREADS)
    k_attn_split(const float *q, const float *k, const float *v, const KT *ck, const KT *cv, const int *step,
                 int n, int n_head, int kvh, int cap, int ring, int window, int nsplit, int G, int QB, float *part,
                 float *pml, KT *store_k, KT *store_v) {
    CU_TRACE(CT_ATTN_SPLIT);
    pdl_wait();
    CU_TRACE_RELEASED();
    constexpr int EPT = (D + AT_THREADS - 1) / AT_THREADS;
    extern __shared__ float sm[];
    const int R = G * QB;
    const int groups = n_head / kvh / G;
    const int h = blockIdx.x / groups, hq0 = h * (n_head / kvh) + (blockIdx.x % groups) * G;
    const int split = blockIdx.y, i0 = blockIdx.z * QB;
    float *qs = sm, *S = sm + R * D, *mrow = S + R * AT_CHUNK, *lrow = mrow + R, *alpha = lrow + R;
    int *rfirst = (int *)(alpha + R), *rlast = rfirst + R;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = AT_THREADS / 32;
    const int pos0 = step[0];
    if (store_k && split == 0 && blockIdx.x % groups == 0)
        attn_store_step<D, AT_THREADS>(k, v, store_k, store_v, pos0, cap, ring, kvh, h);
    const int i_last = min(i0 + QB, n) - 1;
    const int qp_first = pos0 + i0, qp_last = pos0 + i_last;
    int first, len;
    const int per = attn_split_per(qp_first, qp_last, window, nsplit, first, len);
    const int s0 = first + split * per, s1 = min(s0 + per, qp_last + 1);
    if (s0 >= s1) {
        if (tid < R && i0 + tid / G < n) {
            pml_put(pml, ((size_t)(i0 + tid / G) * n_head + hq0 + tid % G) * nsplit + split, -INFINITY, 0);
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
#pragma unroll
            for (int u = 0; u < AT_VU; u++) {
                const int p = c0 + min(j0 + u, cn - 1);
#pragma unroll
                for (int e = 0; e < EPT; e++)
                    vv[u][e] = tid + e * AT_THREADS < D
                                   ? kv_row1(v, cv, p, pos0, kvh, h, D, cap, ring, tid + e * AT_THREADS)
                                   : 0.0f;
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
        const int r = jj / EPT, e = tid + (jj % EPT) * AT_THREADS, qi = r / G, g = r % G;
        if (jj < R * EPT && e < D && i0 + qi < n)
            part[(((size_t)(i0 + qi) * n_head + hq0 + g) * nsplit + split) * D + e] = acc[jj];
    }
    if (tid < R && i0 + tid / G < n) {
        pml_put(pml, ((size_t)(i0 + tid / G) * n_head + hq0 + tid % G) * nsplit + split, mrow[tid], lrow[tid]);
    }
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

__global__ void k_attn_combine(const float *part, const float *pml, int n_head, int d, int nsplit, float *out,
                               int8_t *__restrict__ xq, float *__restrict__ xd, int *__restrict__ xs,
                               const int *step, int n, int QB, int window) {
    CU_TRACE(CT_ATTN_COMBINE);
    pdl_wait();
    CU_TRACE_RELEASED();
    extern __shared__ float wgt[];
    __shared__ float red[32];
    const int hq = blockIdx.x, i = blockIdx.y, tid = threadIdx.x, lane = tid & 31;
    const size_t base = (size_t)i * n_head + hq;
    const int used = attn_used_splits(step, i, n, QB, window, nsplit);
    const float L = combine_weights(pml + base * nsplit * 2, used, wgt, red);
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

/* FA_LB float4 loads per array a thread issues before it converts and
 * stores them: one at a time (the compiler's schedule), each 64-key tile
 * was 16 (head 256) or 32 (head 512) dependent L2 round trips per thread
 * (bench/results/cuda-variants-2026-12-03b.json). */
#define FA_LB 4
template <int D, typename KT>
__global__ void __launch_bounds__(FA_THREADS, 1)
    k_attn_fa(const float *q, const float *k, const float *v, const KT *ck, const KT *cv, const int *step, int n,
              int n_head, int kvh, int cap, int ring, int window, float *out) {
    CU_TRACE(CT_ATTN_FA);
    pdl_wait();
    CU_TRACE_RELEASED();
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
    static_assert((BR * D / 4 / FA_THREADS) % FA_LB == 0 && (FA_BC * D / 4 / FA_THREADS) % FA_LB == 0, "load batches");
#pragma unroll 1
    for (int i0 = 0; i0 < BR * D / 4 / FA_THREADS; i0 += FA_LB) {
        float4 qr[FA_LB];
#pragma unroll
        for (int u = 0; u < FA_LB; u++) {
            const int idx = tid + (i0 + u) * FA_THREADS, r = idx / (D / 4), e = 4 * (idx % (D / 4)), row = r0 + r;
            qr[u] = row < rows ? *(const float4 *)(q + ((size_t)(row / G) * n_head + h * G + row % G) * D + e)
                               : make_float4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < FA_LB; u++) {
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
#pragma unroll 1
        for (int i0 = 0; i0 < FA_BC * D / 4 / FA_THREADS; i0 += FA_LB) {
            float4 kr[FA_LB], vr[FA_LB];
#pragma unroll
            for (int u = 0; u < FA_LB; u++) {
                const int idx = tid + (i0 + u) * FA_THREADS, j = idx / (D / 4), e = 4 * (idx % (D / 4)), p = t0 + j;
                const int in = p <= qp_last;
                kr[u] = in ? kv_row4(k, ck, p, pos0, kvh, h, D, cap, ring, e) : make_float4(0, 0, 0, 0);
                vr[u] = in ? kv_row4(v, cv, p, pos0, kvh, h, D, cap, ring, e) : make_float4(0, 0, 0, 0);
            }
#pragma unroll
            for (int u = 0; u < FA_LB; u++) {
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

/* The combine of steps of up to 8 tokens: one block per (query, head, 32 output elements), its 8 warps
 * summing every 8th split from a different start (lane = element), then
 * warp 0 adding the 8 sums in order. k_attn_combine gives a head's whole
 * row to one block of 128 threads, each walking all splits for its
 * elements: at depth, 256 splits x 512 elements of a full layer are 128
 * rounds of dependent loads in only 32 blocks
 * (bench/results/cuda-variants-2026-12-03b.json). The same split weights and
 * the same quantization; L and the outputs are summed in another (fixed)
 * order, so the last bit of an output, and rarely a code, can differ from
 * k_attn_combine's. */
#define CB_GROUPS 8
__global__ void __launch_bounds__(CB_GROUPS * 32)
    k_attn_combine_wide(const float *part, const float *pml, int n_head, int d, int nsplit, float *out,
                        int8_t *__restrict__ xq, float *__restrict__ xd, int *__restrict__ xs, const int *step, int n,
                        int QB, int window) {
    CU_TRACE(CT_ATTN_COMBINE_WIDE);
    const int hq = blockIdx.x, i = blockIdx.y, e = blockIdx.z * 32 + (threadIdx.x & 31);
    const int tid = threadIdx.x, lane = tid & 31, grp = tid >> 5;
    const size_t base = (size_t)i * n_head + hq;
    /* the step buffer is written before the step's first kernel */
    const int used = attn_used_splits(step, i, n, QB, window, nsplit);
    pdl_wait();
    CU_TRACE_RELEASED();
    extern __shared__ float wgt[];
    __shared__ float red[CB_GROUPS][32], sm[32];
    /* A group's first CB_PRE partials are loaded with the split maxima and
     * sums, not after the weights: one round of loads before the sums
     * instead of two (a decode step's combine is one to a few splits per
     * group). The same products, added in the same order. */
    constexpr int CB_PRE = 4;
    float pv[CB_PRE];
#pragma unroll
    for (int j = 0; j < CB_PRE; j++) {
        const int sp = grp + CB_GROUPS * j;
        pv[j] = sp < used ? part[(base * nsplit + sp) * d + e] : 0.0f;
    }
    const float L = combine_weights(pml + base * nsplit * 2, used, wgt, sm);
    float o = 0;
#pragma unroll
    for (int j = 0; j < CB_PRE; j++)
        if (grp + CB_GROUPS * j < used) o += wgt[grp + CB_GROUPS * j] * pv[j];
#pragma unroll 8
    for (int sp = grp + CB_GROUPS * CB_PRE; sp < used; sp += CB_GROUPS) o += wgt[sp] * part[(base * nsplit + sp) * d + e];
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

/* ---- one-token decode attention, warp per query head and key subset
 * (the register form, GEM_CUDA_ATTN_DEC=1, replaced k_attn_split for
 * one-token steps; the staged form is the default for f32 caches) ----
 * k_attn_split gives a block's 256 threads one key at a time: per 64-key
 * chunk a dependent chain of key loads, warp reductions, a block-wide
 * softmax and value loads, with barriers between. Here each warp owns one
 * query head and every S-th key of the block's split (S = AD_WARPS / GB
 * warps share a head) and runs its own online softmax over KU keys per
 * round, all KU key and value rows loaded before the first dot product;
 * no barrier until the warps of a head merge their (max, sum, output) in
 * shared memory. Lane l holds elements VW l + 32 VW i of every row (VW
 * values per load: 4, or 8 for f16 entries of heads 256 and 512), so each
 * load instruction of a warp reads one contiguous stretch. The split
 * ranges, the partial layout and the empty-split marks are k_attn_split's
 * (n = 1, QB = 1), so k_attn_combine_wide combines either.
 * STAGED (the default for f32 caches; GEM_CUDA_ATTN_DEC=2 for f16 ones
 * too): a deep split is a long chain of rounds per warp, each waiting on
 * HBM for a few rows (31B depth 32768: 128 keys per split). There the
 * block's threads copy tiles of AD_TILE_BYTES of cached keys and values
 * into shared memory with cp.async, AD_STAGES tiles in flight, and the
 * warps run the same rounds on rows read from shared memory
 * (bench/results/cuda-decode-staged-2026-12-03.json). */
#define AD_WARPS 8
#define AD_STAGES 3
#define AD_TILE_BYTES 32768 /* keys and values of one stage */

template <int VW> __device__ __forceinline__ void ad_ld(float *d, const float *p) {
    const float4 a = *(const float4 *)p;
    d[0] = a.x, d[1] = a.y, d[2] = a.z, d[3] = a.w;
    if (VW == 8) {
        const float4 b = *(const float4 *)(p + 4);
        d[4] = b.x, d[5] = b.y, d[6] = b.z, d[7] = b.w;
    }
}
template <int VW> __device__ __forceinline__ void ad_ld(float *d, const __half *p) {
    if (VW == 8) {
        const uint4 u = *(const uint4 *)p;
        const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const float2 f = __half22float2(*(const __half2 *)&w[i]);
            d[2 * i] = f.x, d[2 * i + 1] = f.y;
        }
    } else {
        const float4 f = kv_ld4(p);
        d[0] = f.x, d[1] = f.y, d[2] = f.z, d[3] = f.w;
    }
}

/* A lane's E = D / 32 elements of the row at src (global or shared). */
template <int D, int VW, typename T> __device__ __forceinline__ void ad_lane(float (&r)[D / 32], const T *src, int lane) {
#pragma unroll
    for (int i = 0; i < D / 32 / VW; i++) ad_ld<VW>(r + i * VW, src + VW * lane + 32 * VW * i);
}

/* Row p of keys or values: this step's row (f32) for p >= pos0, else the
 * cache's. */
template <int D, int VW, typename KT>
__device__ __forceinline__ void ad_row(float (&r)[D / 32], const float *cur, const KT *cache, int p, int pos0, int kvh,
                                       int h, int cap, int ring, int lane) {
    if (p >= pos0) ad_lane<D, VW>(r, cur + ((size_t)(p - pos0) * kvh + h) * D, lane);
    else ad_lane<D, VW>(r, cache + ((size_t)(ring ? p % cap : p) * kvh + h) * D, lane);
}

/* One round of a warp's online softmax over KU keys, the first nv of them
 * real (the rest repeat a real key and weigh nothing; nv >= 1, so the new
 * max is finite and the first round scales the zero state by
 * expf(-inf) = 0). The rescale runs only when the max grows: otherwise its
 * factor is expf(0) = 1 exactly, and deep in a split the max rarely moves
 * (the scores are the same bits in every lane after the butterfly sums,
 * so the branch is uniform). */
template <int E, int KU>
__device__ __forceinline__ void ad_round(const float (&qv)[E], const float (&kr)[KU][E], const float (&vr)[KU][E],
                                         int nv, float &m, float &l, float (&o)[E]) {
    float sc[KU];
#pragma unroll
    for (int u = 0; u < KU; u++) {
        float d = 0;
#pragma unroll
        for (int e = 0; e < E; e++) d += qv[e] * kr[u][e];
        sc[u] = d;
    }
#pragma unroll
    for (int off = 16; off; off >>= 1)
#pragma unroll
        for (int u = 0; u < KU; u++) sc[u] += __shfl_xor_sync(0xffffffffu, sc[u], off);
    float mx = m;
#pragma unroll
    for (int u = 0; u < KU; u++) {
        if (u >= nv) sc[u] = -INFINITY;
        mx = fmaxf(mx, sc[u]);
    }
    if (mx > m) {
        const float a = expf(m - mx);
        l *= a;
#pragma unroll
        for (int e = 0; e < E; e++) o[e] *= a;
        m = mx;
    }
#pragma unroll
    for (int u = 0; u < KU; u++) {
        const float w = expf(sc[u] - m);
        l += w;
#pragma unroll
        for (int e = 0; e < E; e++) o[e] += w * vr[u][e];
    }
}

/* Keys per stage of the staged kernel, and the dynamic shared memory. */
template <int D, typename KT> struct ad_geom {
    static constexpr int TK = AD_TILE_BYTES / (2 * D * (int)sizeof(KT));
    static constexpr int SMEM = AD_STAGES * 2 * TK * D * (int)sizeof(KT);
    /* two blocks per multiprocessor (the launch bound): both blocks' stages,
     * merge arrays and 1 KB of reserved shared memory within Hopper's
     * 228 KB (head 512: 1.9 KB to spare) */
    static_assert(2 * (SMEM + AD_WARPS * (D + 2) * 4 + 1024) <= 228 * 1024, "two staged blocks per multiprocessor");
};

/* Tile t of cached positions s0 + t TK .. (before sc1) into stage t mod
 * AD_STAGES, 16 bytes per copy, then one commit (also when empty: the
 * wait counts groups). */
template <int D, typename KT>
__device__ __forceinline__ void ad_stage(KT *sk, const KT *ck, const KT *cv, int t, int nt, int s0, int sc1, int kvh,
                                         int h, int cap, int ring) {
    typedef ad_geom<D, KT> G;
    constexpr int C = D * (int)sizeof(KT) / 16, V = 16 / (int)sizeof(KT); /* chunks per row, values per chunk */
    if (t < nt) {
        KT *dk = sk + (size_t)(t % AD_STAGES) * 2 * G::TK * D, *dv = dk + G::TK * D;
        const int t0 = s0 + t * G::TK;
        for (int i = threadIdx.x; i < G::TK * C; i += AD_WARPS * 32) {
            const int r = i / C, c = i % C, p = t0 + r;
            if (p < sc1) {
                const size_t src = ((size_t)(ring ? p % cap : p) * kvh + h) * D + c * V;
                cp_async16(dk + r * D + c * V, ck + src);
                cp_async16(dv + r * D + c * V, cv + src);
            }
        }
    }
    cp_async_commit();
}

/* One block per (KV head x group of GB query heads, split); GB divides
 * AD_WARPS (the host checks). Cached rows (positions before this step's)
 * are read from before pdl_wait: the register path's first round, the
 * staged path's first AD_STAGES - 1 tiles. Safe because those rows were
 * written by earlier steps, the step buffer by a copy before the step's
 * kernels, and a kernel's code before its wait runs only once the kernel
 * two back has completed (every kernel lets its dependents start only
 * after its own wait); this step's row (p = pos0, written by the kernel
 * just before) is read after the wait. So the kernel just before a
 * one-token attention must not write that cache: in the model it is the
 * q/k/v norm + rope, and a prefill tile's k_kv_store is many launches
 * back. */
template <int D, typename KT, int VW, int KU, bool STAGED>
__global__ void __launch_bounds__(AD_WARPS * 32, STAGED ? 2 : 1)
    k_attn_dec(const float *q, const float *k, const float *v, const KT *ck, const KT *cv, const int *step, int n_head,
               int kvh, int cap, int ring, int window, int nsplit, int GB, float *part, float *pml, KT *store_k,
               KT *store_v) {
    CU_TRACE(CT_ATTN_DEC);
    constexpr int E = D / 32;
    static_assert(D % (32 * VW) == 0, "whole loads per lane");
    typedef ad_geom<D, KT> G;
    extern __shared__ __align__(16) unsigned char ad_smem[];
    KT *sk = (KT *)ad_smem; /* STAGED: per stage TK key rows, then TK value rows */
    __shared__ float sm_m[AD_WARPS], sm_l[AD_WARPS];
    __shared__ __align__(16) float sm_o[AD_WARPS][D];
    const int groups = n_head / kvh / GB, S = AD_WARPS / GB;
    const int h = blockIdx.x / groups, hq0 = h * (n_head / kvh) + (blockIdx.x % groups) * GB, split = blockIdx.y;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, sub = warp / GB, hq = hq0 + warp % GB;
    const int pos0 = step[0];
    int s0, s1;
    one_token_split(pos0, window, nsplit, split, s0, s1);
    const int pf = s0 + sub;
    const int sc1 = min(s1, pos0); /* cached rows: s0 .. sc1 - 1 */
    const int nt = STAGED && sc1 > s0 ? (sc1 - s0 + G::TK - 1) / G::TK : 0;
    float kr[KU][E], vr[KU][E];
    if (STAGED) {
#pragma unroll
        for (int t = 0; t < AD_STAGES - 1; t++) ad_stage<D>(sk, ck, cv, t, nt, s0, sc1, kvh, h, cap, ring);
    } else if (pf < s1) {
#pragma unroll
        for (int u = 0; u < KU; u++) {
            const int p = min(pf + u * S, s1 - 1);
            if (p < pos0) {
                ad_row<D, VW>(kr[u], k, ck, p, pos0, kvh, h, cap, ring, lane);
                ad_row<D, VW>(vr[u], v, cv, p, pos0, kvh, h, cap, ring, lane);
            }
        }
    }
    pdl_wait();
    CU_TRACE_RELEASED();
    if (split == 0 && blockIdx.x % groups == 0)
        attn_store_step<D, AD_WARPS * 32>(k, v, store_k, store_v, pos0, cap, ring, kvh, h);
    if (s0 >= s1) { /* the same for the whole block (no copy was issued) */
        if (sub == 0 && lane == 0) pml_put(pml, (size_t)hq * nsplit + split, -INFINITY, 0);
        return;
    }
    float qv[E], o[E];
    ad_lane<D, VW>(qv, q + (size_t)hq * D, lane);
#pragma unroll
    for (int e = 0; e < E; e++) o[e] = 0;
    float m = -INFINITY, l = 0;
    if (STAGED) {
        for (int t = 0; t < nt; t++) {
            ad_stage<D>(sk, ck, cv, t + AD_STAGES - 1, nt, s0, sc1, kvh, h, cap, ring);
            cp_async_wait<AD_STAGES - 1>(); /* this thread's copies of tile t */
            __syncthreads();                /* everyone's */
            const KT *tk = sk + (size_t)(t % AD_STAGES) * 2 * G::TK * D, *tv = tk + G::TK * D;
            const int nk = min(G::TK, sc1 - (s0 + t * G::TK));
            for (int j0 = sub; j0 < nk; j0 += S * KU) {
#pragma unroll
                for (int u = 0; u < KU; u++) {
                    const int j = min(j0 + u * S, nk - 1);
                    ad_lane<D, VW>(kr[u], tk + (size_t)j * D, lane);
                    ad_lane<D, VW>(vr[u], tv + (size_t)j * D, lane);
                }
                ad_round<E, KU>(qv, kr, vr, (nk - j0 + S - 1) / S, m, l, o);
            }
            __syncthreads(); /* stage t is free for tile t + AD_STAGES */
        }
        cp_async_wait<0>();
        if (s1 > pos0 && sub == 0) { /* this step's key, from the step buffer */
#pragma unroll
            for (int u = 0; u < KU; u++) {
                ad_lane<D, VW>(kr[u], k + (size_t)h * D, lane);
                ad_lane<D, VW>(vr[u], v + (size_t)h * D, lane);
            }
            ad_round<E, KU>(qv, kr, vr, 1, m, l, o);
        }
    } else {
        for (int p0 = pf; p0 < s1; p0 += S * KU) {
#pragma unroll
            for (int u = 0; u < KU; u++) { /* keys past the split repeat its last (weight 0) */
                const int p = min(p0 + u * S, s1 - 1);
                if (p0 != pf || p >= pos0) {
                    ad_row<D, VW>(kr[u], k, ck, p, pos0, kvh, h, cap, ring, lane);
                    ad_row<D, VW>(vr[u], v, cv, p, pos0, kvh, h, cap, ring, lane);
                }
            }
            ad_round<E, KU>(qv, kr, vr, (s1 - p0 + S - 1) / S, m, l, o);
        }
    }
    /* the S warps of each head merge; a warp whose subset was empty left
     * (-inf, 0, zeros) and weighs nothing; key s0 is in subset 0 */
    if (lane == 0) {
        sm_m[warp] = m;
        sm_l[warp] = l;
    }
#pragma unroll
    for (int i = 0; i < E / VW; i++)
#pragma unroll
        for (int j = 0; j < VW; j += 4) /* 16-byte stores: no bank conflicts */
            *(float4 *)&sm_o[warp][VW * lane + 32 * VW * i + j] =
                make_float4(o[i * VW + j], o[i * VW + j + 1], o[i * VW + j + 2], o[i * VW + j + 3]);
    __syncthreads();
    for (int idx = tid; idx < GB * D; idx += AD_WARPS * 32) {
        const int g = idx / D, e = idx % D;
        float M = -INFINITY;
        for (int s2 = 0; s2 < S; s2++) M = fmaxf(M, sm_m[s2 * GB + g]);
        float O = 0, L = 0;
        for (int s2 = 0; s2 < S; s2++) {
            const float w = expf(sm_m[s2 * GB + g] - M);
            O += w * sm_o[s2 * GB + g][e];
            L += w * sm_l[s2 * GB + g];
        }
        const size_t row = (size_t)(hq0 + g) * nsplit + split;
        part[row * D + e] = O;
        if (e == 0) pml_put(pml, row, M, L);
    }
}

/* ---- one-token decode attention on the tensor cores, f16 caches (the
 * default for them, faster than the staged k_attn_dec at every depth:
 * bench/results/cuda-attn-dec-2026-12-03d.json; f32 caches take the
 * staged k_attn_dec) ----
 * k_attn_dec spends ~80 instructions per key and query head (f16 to f32
 * conversions, dot products, a warp sum, value sums); with 8 query heads
 * per KV head (31B full layers) each cached element is converted and
 * multiplied 8 times, and deep splits are bound by that, not by HBM. Here the query
 * heads of a KV head are the n = 8 columns of mma.sync m16n8k16 (f16
 * operands, f32 sums, as k_attn_fa): per tile of 16 keys S^T = K Q^T (keys
 * x heads, K rows from shared memory through ldmatrix, Q^T fragments in
 * registers), an online softmax per head column, P^T from the scores'
 * accumulators by a transposing move (movmatrix), then O^T += V^T P^T with
 * V^T through ldmatrix.trans. Every warp computes the tile's scores (cheap
 * on the tensor cores) and its own quarter of the head's elements, so no
 * merge across warps. Tiles are staged by cp.async, TC_STAGES in flight;
 * rows past the split are zero (score masked to -inf, value 0), this
 * step's row comes from the f32 step buffers, rounded as the cache store
 * rounds it. Groups of more than 8 query heads take several blocks;
 * fewer leave columns unused. Same split ranges, partial layout and
 * combine as k_attn_dec. */
#define TC_WARPS 4
#define TC_STAGES 3
#define TC_HEADS 8

template <int D> struct tc_geom {
    static constexpr int LD = D + 8;                   /* halves per staged row: ldmatrix rows on distinct banks */
    static constexpr int STAGE = 2 * 16 * LD;          /* halves: 16 key rows, then 16 value rows */
    static constexpr int SMEM = TC_STAGES * STAGE * 2; /* bytes */
    /* with the q/k/v norms and rope (tc_nr): this step's normalised key
     * and value rows (f32) after the stages */
    static constexpr int SMEM_NR = SMEM + 2 * D * 4;
};
static_assert(TC_STAGES >= 2, "k_attn_tc's norms use the last stage, which no tile fills before the loop");

/* k_attn_tc with the q/k/v norms and rope of the step folded in (the
 * backend's attention_qkv): the raw projections come in, and each block
 * normalises what it reads itself, so the q/k/v norm+rope launch before the
 * attention goes away, with its launch, wait and round trip through
 * memory (bench/results/cuda-attn-qkv-2026-12-04.json). The arithmetic is
 * k_qkv_norm_rope_e's, bit for bit (see tc_norm_row). */
struct tc_nr {
    const float *qw, *kw, *ff; /* q and k norm weights; rope frequency factors or NULL */
    float eps, theta_scale;
    int v_from_k; /* K as V: the value row is the raw key row normalised without weight */
};

/* One head row of D values by one warp (lane l holds elements l + 32 m):
 * rmsnorm with weight w (or none), then, when cs is set, rope with the
 * angles' cosines cs[j] and sines sn[j]; into dst, and the row normalised
 * without weight into dstv when set. The sum of squares is formed in the
 * order of k_qkv_norm_rope_e's 128 threads and block_sum (thread t owns
 * elements t + 128 e: lane l here forms threads l, l + 32, l + 64 and
 * l + 96's sums, each warp-summed as there, then adds them in warp order),
 * so both give the same bits. */
template <int D>
__device__ __forceinline__ void tc_norm_row(const float *src, const float *w, float eps, const float *cs, const float *sn,
                                            float *dst, float *dstv, int lane) {
    constexpr int M = D / 32, E = D / 128, HALF = D / 2;
    static_assert(D % 128 == 0, "head size");
    float x[M];
#pragma unroll
    for (int m = 0; m < M; m++) x[m] = src[lane + 32 * m];
    float ss = 0;
#pragma unroll
    for (int t = 0; t < 4; t++) {
        float a = 0;
#pragma unroll
        for (int e = 0; e < E; e++) a = __fmaf_rn(x[t + 4 * e], x[t + 4 * e], a);
        ss += warp_sum(a);
    }
    const float r = 1.0f / sqrtf(ss / (float)D + eps);
#pragma unroll
    for (int m = 0; m < M; m++) {
        const float xr = x[m] * r;
        if (dstv) dstv[lane + 32 * m] = xr;
        x[m] = w ? xr * w[lane + 32 * m] : xr;
    }
    if (!cs) {
#pragma unroll
        for (int m = 0; m < M; m++) dst[lane + 32 * m] = x[m];
        return;
    }
    /* element l + 32 m pairs with l + 32 (m + M / 2): the lane's own */
#pragma unroll
    for (int m = 0; m < M / 2; m++) {
        const int j = lane + 32 * m;
        rope_rotate(x[m], x[m + M / 2], cs[j], sn[j], dst[j], dst[j + HALF]);
    }
}

/* Four 8x8 f16 matrices: lane l names row l % 8 of matrix l / 8. */
__device__ __forceinline__ void ldsm_x4(unsigned &r0, unsigned &r1, unsigned &r2, unsigned &r3, const void *p) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(s));
}
/* The transpose of an 8x8 f16 matrix held as a fragment (lane l: row l / 4,
 * columns 2 (l % 4) and 2 (l % 4) + 1), in the same layout. */
__device__ __forceinline__ unsigned movm_t(unsigned x) {
    unsigned y;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
    return y;
}
__device__ __forceinline__ unsigned pack_h2(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *(const unsigned *)&h;
}

/* This step's key and value row (f32, KV head h's: the step buffers' or,
 * with tc_nr, the normalised rows in shared memory) as row r of the stage
 * of tile t. */
template <int D>
__device__ __forceinline__ void tc_cur_row(__half *st, int t, int r, const float *kr, const float *vr) {
    typedef tc_geom<D> G;
    __half *dk = st + (size_t)(t % TC_STAGES) * G::STAGE + (size_t)r * G::LD, *dv = dk + 16 * G::LD;
    for (int e = 4 * (int)threadIdx.x; e < D; e += 4 * TC_WARPS * 32) {
        st_half4(dk + e, *(const float4 *)(kr + e));
        st_half4(dv + e, *(const float4 *)(vr + e));
    }
}

/* Tile t (keys s0 + 16 t ..) into stage t mod TC_STAGES: cached rows by
 * cp.async, rows at or past s1 zero, this step's row (pos0) only when cur
 * (before pdl_wait it may not be written yet: tc_cur_row after it); then
 * one commit, also when empty (the wait counts groups). */
template <int D>
__device__ __forceinline__ void tc_stage(__half *st, const __half *ck, const __half *cv, const float *kr, const float *vr,
                                         int t, int nt, int s0, int s1, int pos0, int kvh, int h, int cap, int ring,
                                         bool cur) {
    typedef tc_geom<D> G;
    constexpr int C = D / 8; /* 16-byte chunks per row */
    if (t < nt) {
        __half *dk = st + (size_t)(t % TC_STAGES) * G::STAGE, *dv = dk + 16 * G::LD;
        for (int i = threadIdx.x; i < 16 * C; i += TC_WARPS * 32) {
            const int r = i / C, c = i % C, p = s0 + 16 * t + r;
            __half *ok = dk + r * G::LD + 8 * c, *ov = dv + r * G::LD + 8 * c;
            if (p >= s1) {
                *(uint4 *)ok = make_uint4(0, 0, 0, 0);
                *(uint4 *)ov = make_uint4(0, 0, 0, 0);
            } else if (p < pos0) {
                const size_t src = ((size_t)(ring ? p % cap : p) * kvh + h) * D + 8 * c;
                cp_async16(ok, ck + src);
                cp_async16(ov, cv + src);
            }
        }
        if (cur && s1 > pos0 && (pos0 - s0) / 16 == t) tc_cur_row<D>(st, t, (pos0 - s0) % 16, kr, vr);
    }
    cp_async_commit();
}

/* One block per (KV head x group of up to 8 query heads, split). NR: the
 * q/k/v norms and rope folded in (tc_nr): before the wait the block puts
 * the rope's angles in its last stage (free until the loop), after it
 * each warp normalises rows (the block's query heads into the last stage,
 * and in the blocks that need this step's key and value, those rows into
 * their own space after the stages). */
template <int D, bool NR>
__global__ void __launch_bounds__(TC_WARPS * 32)
    k_attn_tc(const float *q, const float *k, const float *v, const __half *ck, const __half *cv, const int *step,
              int n_head, int kvh, int cap, int ring, int window, int nsplit, float *part, float *pml, __half *store_k,
              __half *store_v, tc_nr nr) {
    CU_TRACE(CT_ATTN_TC);
    typedef tc_geom<D> G;
    constexpr int MT = D / 64; /* 16-row output tiles per warp: a quarter of the head */
    static_assert(D % 64 == 0 && (D / 16) % 2 == 0, "head size");
    extern __shared__ __align__(16) unsigned char tc_smem[];
    __half *st = (__half *)tc_smem;
    const int gall = n_head / kvh, groups = (gall + TC_HEADS - 1) / TC_HEADS;
    const int h = blockIdx.x / groups, grp = blockIdx.x % groups, hq0 = h * gall + grp * TC_HEADS;
    const int nh = min(TC_HEADS, gall - grp * TC_HEADS), split = blockIdx.y;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
    const int pos0 = step[0];
    int s0, s1;
    one_token_split(pos0, window, nsplit, split, s0, s1);
    const int nt = s1 > s0 ? (s1 - s0 + 15) / 16 : 0;
    /* NR: in the last stage the angles' cosines and sines (D / 2 each),
     * then the normalised query rows (nh x D); this step's key and value
     * rows after the stages */
    float *nr_cs = (float *)(st + (size_t)(TC_STAGES - 1) * G::STAGE), *nr_sn = nr_cs + D / 2, *nr_q = nr_cs + D;
    float *nr_k = (float *)(st + (size_t)TC_STAGES * G::STAGE), *nr_v = nr_k + D;
    static_assert((TC_HEADS + 1) * D * 4 <= G::STAGE * 2, "the norms' rows fit one stage");
    const float *kr = NR ? nr_k : k + (size_t)h * D, *vr = NR ? nr_v : v + (size_t)h * D;
    /* cached rows of earlier steps only before the wait (see k_attn_dec) */
#pragma unroll
    for (int t = 0; t < TC_STAGES - 1; t++) tc_stage<D>(st, ck, cv, kr, vr, t, nt, s0, s1, pos0, kvh, h, cap, ring, false);
    if (NR) /* the position is the step buffer's (set before the step's first kernel) */
        for (int j = threadIdx.x; j < D / 2; j += TC_WARPS * 32) {
            const float a = rope_angle((float)pos0, nr.theta_scale, j, nr.ff);
            nr_cs[j] = cosf(a), nr_sn[j] = sinf(a);
        }
    pdl_wait();
    CU_TRACE_RELEASED();
    const bool store = split == 0 && grp == 0;
    if (NR) { /* block-uniform: every thread reaches the barrier */
        const bool has_q = s0 < s1, has_kv = store || (has_q && s1 > pos0);
        const int nq = has_q ? nh : 0, rows = nq + (has_kv ? (nr.v_from_k ? 1 : 2) : 0);
        __syncthreads(); /* the angles */
        for (int r = warp; r < rows; r += TC_WARPS) {
            if (r < nq)
                tc_norm_row<D>(q + (size_t)(hq0 + r) * D, nr.qw, nr.eps, nr_cs, nr_sn, nr_q + (size_t)r * D, NULL, lane);
            else if (r == nq)
                tc_norm_row<D>(k + (size_t)h * D, nr.kw, nr.eps, nr_cs, nr_sn, nr_k, nr.v_from_k ? nr_v : NULL, lane);
            else
                tc_norm_row<D>(v + (size_t)h * D, NULL, nr.eps, NULL, NULL, nr_v, NULL, lane);
        }
        __syncthreads();
    }
    if (store) attn_store_row<D, TC_WARPS * 32>(kr, vr, store_k, store_v, pos0, cap, ring, kvh, h);
    if (s0 >= s1) { /* the same for the whole block (no copy was issued) */
        if ((int)threadIdx.x < nh) pml_put(pml, (size_t)(hq0 + threadIdx.x) * nsplit + split, -INFINITY, 0);
        return;
    }
    if (s1 > pos0 && (pos0 - s0) / 16 < TC_STAGES - 1) tc_cur_row<D>(st, (pos0 - s0) / 16, (pos0 - s0) % 16, kr, vr);
    /* Q^T as B fragments: column g = query head hq0 + g (zero past nh),
     * k-step kk: elements 16 kk + 2c, +1 and 16 kk + 2c + 8, +9 */
    unsigned qb[D / 16][2];
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        if (g < nh) {
            const float *qr = (NR ? nr_q + (size_t)g * D : q + (size_t)(hq0 + g) * D) + 16 * kk + 2 * c;
            qb[kk][0] = pack_h2(qr[0], qr[1]);
            qb[kk][1] = pack_h2(qr[8], qr[9]);
        } else {
            qb[kk][0] = qb[kk][1] = 0;
        }
    }
    if (NR) __syncthreads(); /* the last stage is the loop's again */
    float o[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) o[mt][0] = o[mt][1] = o[mt][2] = o[mt][3] = 0;
    /* heads 2c and 2c + 1: running max (the same in every lane of a
     * column) and this lane's part of the sum (keys g and g + 8) */
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0, l1 = 0;
    const int arow = (lane & 7) + 8 * ((lane >> 3) & 1), acol = 8 * (lane >> 4); /* ldmatrix: K as A */
    const int vrow = (lane & 7) + 8 * (lane >> 4), vcol = 8 * ((lane >> 3) & 1);  /* ldmatrix.trans: V^T as A */
    for (int t = 0; t < nt; t++) {
        tc_stage<D>(st, ck, cv, kr, vr, t + TC_STAGES - 1, nt, s0, s1, pos0, kvh, h, cap, ring, true);
        cp_async_wait<TC_STAGES - 1>(); /* this thread's copies of tile t */
        __syncthreads();                /* everyone's, and the plain stores */
        const __half *tk = st + (size_t)(t % TC_STAGES) * G::STAGE, *tv = tk + 16 * G::LD;
        float sa[4] = {0, 0, 0, 0}, sb[4] = {0, 0, 0, 0}; /* two chains of k-steps */
#pragma unroll
        for (int kk = 0; kk < D / 16; kk += 2) {
            unsigned a0, a1, a2, a3, b0, b1, b2, b3;
            ldsm_x4(a0, a1, a2, a3, tk + arow * G::LD + 16 * kk + acol);
            ldsm_x4(b0, b1, b2, b3, tk + arow * G::LD + 16 * (kk + 1) + acol);
            mma_f16(sa, a0, a1, a2, a3, qb[kk][0], qb[kk][1]);
            mma_f16(sb, b0, b1, b2, b3, qb[kk + 1][0], qb[kk + 1][1]);
        }
        /* sa[0], sa[1]: key g, heads 2c, 2c + 1; sa[2], sa[3]: key g + 8 */
        const int kb = s0 + 16 * t;
        float s[4];
#pragma unroll
        for (int i = 0; i < 4; i++) s[i] = sa[i] + sb[i];
        if (kb + g >= s1) s[0] = s[1] = -INFINITY;
        if (kb + g + 8 >= s1) s[2] = s[3] = -INFINITY;
        float t0 = fmaxf(s[0], s[2]), t1 = fmaxf(s[1], s[3]);
#pragma unroll
        for (int off = 4; off < 32; off <<= 1) {
            t0 = fmaxf(t0, __shfl_xor_sync(0xffffffffu, t0, off));
            t1 = fmaxf(t1, __shfl_xor_sync(0xffffffffu, t1, off));
        }
        /* finite: key kb is in the split. Rescale only when the max grows
         * (the factor is exactly 1 otherwise). */
        if (t0 > m0) {
            const float a = expf(m0 - t0);
            l0 *= a;
#pragma unroll
            for (int mt = 0; mt < MT; mt++) o[mt][0] *= a, o[mt][2] *= a;
            m0 = t0;
        }
        if (t1 > m1) {
            const float a = expf(m1 - t1);
            l1 *= a;
#pragma unroll
            for (int mt = 0; mt < MT; mt++) o[mt][1] *= a, o[mt][3] *= a;
            m1 = t1;
        }
        const float p0 = expf(s[0] - m0), p1 = expf(s[1] - m1), p2 = expf(s[2] - m0), p3 = expf(s[3] - m1);
        l0 += p0 + p2;
        l1 += p1 + p3;
        /* P^T as a B fragment: the transposes of the two 8x8 blocks (keys
         * 0-7 and 8-15 by heads) */
        const unsigned pb0 = movm_t(pack_h2(p0, p1)), pb1 = movm_t(pack_h2(p2, p3));
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            unsigned a0, a1, a2, a3;
            ldsm_x4_t(a0, a1, a2, a3, tv + vrow * G::LD + warp * (D / 4) + 16 * mt + vcol);
            mma_f16(o[mt], a0, a1, a2, a3, pb0, pb1);
        }
        __syncthreads(); /* stage t is free for tile t + TC_STAGES */
    }
    cp_async_wait<0>();
#pragma unroll
    for (int off = 4; off < 32; off <<= 1) {
        l0 += __shfl_xor_sync(0xffffffffu, l0, off);
        l1 += __shfl_xor_sync(0xffffffffu, l1, off);
    }
    /* o[mt]: elements warp D/4 + 16 mt + g (0, 1) and + 8 (2, 3), heads
     * 2c (0, 2) and 2c + 1 (1, 3) */
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        const int e = warp * (D / 4) + 16 * mt + g;
        if (2 * c < nh) {
            float *row = part + ((size_t)(hq0 + 2 * c) * nsplit + split) * D;
            row[e] = o[mt][0];
            row[e + 8] = o[mt][2];
        }
        if (2 * c + 1 < nh) {
            float *row = part + ((size_t)(hq0 + 2 * c + 1) * nsplit + split) * D;
            row[e] = o[mt][1];
            row[e + 8] = o[mt][3];
        }
    }
    if (warp == 0 && g == 0) {
        if (2 * c < nh) pml_put(pml, (size_t)(hq0 + 2 * c) * nsplit + split, m0, l0);
        if (2 * c + 1 < nh) pml_put(pml, (size_t)(hq0 + 2 * c + 1) * nsplit + split, m1, l1);
    }
}

/* The kernel for a head size and entry type: VW values per load (8 for
 * f16 rows of 256 and 512), KU keys per round (fewer for the wide heads:
 * registers). */
template <typename KT>
using ad_fn = void (*)(const float *, const float *, const float *, const KT *, const KT *, const int *, int, int, int,
                       int, int, int, int, float *, float *, KT *, KT *);
template <int D, typename KT> static ad_fn<KT> ad_kernel(bool staged) {
    constexpr int VW = sizeof(KT) == 2 && D % 256 == 0 ? 8 : 4, KU = D >= 384 ? 2 : 4;
    return staged ? k_attn_dec<D, KT, VW, KU, true> : k_attn_dec<D, KT, VW, KU, false>;
}
/* Shared memory above the 48 KB default for every kernel of head size D
 * that takes it dynamically: flash attention, staged k_attn_dec, k_attn_tc. */
template <int D> static cudaError_t attn_allow() {
    const cudaFuncAttribute at = cudaFuncAttributeMaxDynamicSharedMemorySize;
    cudaError_t e = cudaFuncSetAttribute(k_attn_fa<D, float>, at, (int)fa_geom<D>::SMEM);
    if (e == cudaSuccess) e = cudaFuncSetAttribute(k_attn_fa<D, __half>, at, (int)fa_geom<D>::SMEM);
    if (e == cudaSuccess) e = cudaFuncSetAttribute(ad_kernel<D, float>(true), at, ad_geom<D, float>::SMEM);
    if (e == cudaSuccess) e = cudaFuncSetAttribute(ad_kernel<D, __half>(true), at, ad_geom<D, __half>::SMEM);
    if (e == cudaSuccess) e = cudaFuncSetAttribute(k_attn_tc<D, false>, at, tc_geom<D>::SMEM);
    if (e == cudaSuccess) e = cudaFuncSetAttribute(k_attn_tc<D, true>, at, tc_geom<D>::SMEM_NR);
    return e;
}

cudaError_t attn_allow_all(void) {
    cudaError_t e = attn_allow<128>();
    if (e == cudaSuccess) e = attn_allow<256>();
    if (e == cudaSuccess) e = attn_allow<384>();
    if (e == cudaSuccess) e = attn_allow<512>();
    return e;
}

template <typename KT>
__global__ void k_kv_store(const float *k, const float *v, KT *ck, KT *cv, const int *step, int row, int cap,
                           int ring) {
    CU_TRACE(CT_KV_STORE);
    pdl_wait();
    CU_TRACE_RELEASED();
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

/* L(D) for the head sizes the kernels are built for (cu_attention checks
 * d is a multiple of 128 up to 512 before any launch) */
#define HEAD_DIM_SWITCH(d, L) \
    switch (d) {              \
    case 128: L(128); break;  \
    case 256: L(256); break;  \
    case 384: L(384); break;  \
    default: L(512); break;   \
    }

/* Whether a step of n tokens runs on k_attn_tc: one-token steps with f16
 * caches, unless GEM_CUDA_ATTN_DEC picks another kernel. */
static int attn_tc_step(const cuda_backend *c, const be_kv *kv, int n) { return n == 1 && c->attn_dec == 3 && kv->f16; }

/* The split kernels' group of query heads per block: the largest divisor
 * of n_head / n_kv_head (halving) whose outputs fit the block's registers;
 * 0 for a head shape they do not take. */
static int attn_split_group(int n_head, int n_kv_head, int d) {
    if (n_kv_head < 1 || n_head % n_kv_head || d % 128 || d > 512) return 0;
    int G = n_head / n_kv_head;
    const int ept = (d + AT_THREADS - 1) / AT_THREADS; /* output elements per thread and row */
    while (G * ept > AT_MAX_OWN && G % 2 == 0) G /= 2;
    return G * ept > AT_MAX_OWN ? 0 : G;
}

/* attention, and with nr (a one-token step on k_attn_tc only, see
 * cu_attention_qkv) the q/k/v norms and rope folded into it. A failure
 * (nothing launched) is the backend's sticky error. */
static void attention_run(cuda_backend *c, const be_buf *q, const be_buf *k, const be_buf *v, be_kv *kv, int n,
                          int n_head, int n_kv_head, int d, int window, be_buf *out, const tc_nr *nr) {
    if (c->mma && n >= FA_MIN_N && d % 128 == 0 && d <= 512 && n_head % n_kv_head == 0) {
        const int br = d <= 256 ? fa_geom<256>::BR : fa_geom<512>::BR;
        const dim3 grid((unsigned)(((size_t)n * (n_head / n_kv_head) + br - 1) / br), n_kv_head);
#define FA_LAUNCH_T(DIM, KT)                                                                                    \
    launch(c, k_attn_fa<DIM, KT>, grid, FA_THREADS, fa_geom<DIM>::SMEM, q->d, k->d, v->d, (const KT *)kv->k,     \
           (const KT *)kv->v, c->step, n, n_head, n_kv_head, kv->capacity, kv->ring, window, out->d)
#define FA_LAUNCH(DIM)                   \
    if (kv->f16)                         \
        FA_LAUNCH_T(DIM, __half);        \
    else                                 \
        FA_LAUNCH_T(DIM, float)
        HEAD_DIM_SWITCH(d, FA_LAUNCH);
#undef FA_LAUNCH
#undef FA_LAUNCH_T
        LAUNCHED(c, d <= 256 ? "attention (tensor cores, d<=256)" : "attention (tensor cores, d>256)");
        kv_store_tile(c, k, v, kv, n, n_kv_head, d);
        return;
    }
    const int nsplit = attn_splits(kv, n);
    const int G = attn_split_group(n_head, n_kv_head, d);
    if (!G) {
        cu_check(c, cudaErrorInvalidValue, "attention: unsupported head shape");
        return;
    }
    const int ept = (d + AT_THREADS - 1) / AT_THREADS;
    const int groups = n_head / n_kv_head / G;
    /* queries per block: as many as the accumulators hold (one value load
     * then serves G x QB rows) */
    int QB = AT_MAX_OWN / (G * ept);
    if (QB < 1) QB = 1;
    if (QB > n) QB = n;
    const int R = G * QB;
    const size_t rows = (size_t)n * n_head * nsplit;
    if (grow(c, &c->part, rows * d * sizeof(float)) || grow(c, &c->pml, rows * 2 * sizeof(float))) return;
    /* the output is the input of the output projection: its 8-bit codes
     * are made here (as in cu_rmsnorm) */
    const size_t nblk = (size_t)n * n_head * d / 32;
    const int quant = d % 32 == 0 &&
                      (!c->capturing || (nblk * 32 <= c->xq.cap && nblk * sizeof(float) <= c->xd.cap &&
                                         nblk * sizeof(int) <= c->xs.cap)) &&
                      !grow(c, &c->xq, nblk * 32) && !grow(c, &c->xd, nblk * sizeof(float)) &&
                      !grow(c, &c->xs, nblk * sizeof(int));
    const size_t shm = sizeof(float) * ((size_t)R * d + (size_t)R * AT_CHUNK + 5 * (size_t)R);
    const dim3 grid(n_kv_head * groups, nsplit, (n + QB - 1) / QB);
#define ATTN_LAUNCH_T(DIM, KT)                                                                                 \
    launch(c, k_attn_split<DIM, KT>, grid, AT_THREADS, shm, q->d, k->d, v->d, (const KT *)kv->k, (const KT *)kv->v, \
           c->step, n, n_head, n_kv_head, kv->capacity, kv->ring, window, nsplit, G, QB, (float *)c->part.p,     \
           (float *)c->pml.p, n == 1 ? (KT *)kv->k : (KT *)NULL, n == 1 ? (KT *)kv->v : (KT *)NULL)
#define ATTN_LAUNCH(DIM)                 \
    if (kv->f16)                         \
        ATTN_LAUNCH_T(DIM, __half);      \
    else                                 \
        ATTN_LAUNCH_T(DIM, float)
    /* one-token steps on k_attn_dec: GB query heads per block, the largest
     * common divisor of the group and AD_WARPS */
    const int gall = n_head / n_kv_head;
    int gb = AD_WARPS;
    while (gall % gb) gb /= 2; /* AD_WARPS is a power of two */
    const int dec = c->attn_dec && n == 1, staged = c->attn_dec >= 2, tc = attn_tc_step(c, kv, n);
    if (nr && !tc) {
        cu_check(c, cudaErrorInvalidValue, "attention: q/k/v norms folded into a kernel other than k_attn_tc");
        return;
    }
    if (tc) {
        const dim3 tgrid(n_kv_head * ((gall + TC_HEADS - 1) / TC_HEADS), nsplit);
        const tc_nr none = {NULL, NULL, NULL, 0, 0, 0};
#define TC_LAUNCH_NR(DIM, NR)                                                                                          \
    launch(c, k_attn_tc<DIM, NR>, tgrid, TC_WARPS * 32, NR ? tc_geom<DIM>::SMEM_NR : tc_geom<DIM>::SMEM, q->d,    \
           k->d, v->d, (const __half *)kv->k, (const __half *)kv->v, c->step, n_head, n_kv_head, kv->capacity,         \
           kv->ring, window, nsplit, (float *)c->part.p, (float *)c->pml.p, (__half *)kv->k, (__half *)kv->v,          \
           nr ? *nr : none)
#define TC_LAUNCH(DIM)             \
    if (nr)                        \
        TC_LAUNCH_NR(DIM, true);   \
    else                           \
        TC_LAUNCH_NR(DIM, false)
        HEAD_DIM_SWITCH(d, TC_LAUNCH);
#undef TC_LAUNCH
#undef TC_LAUNCH_NR
    } else if (dec) {
        const dim3 dgrid(n_kv_head * (gall / gb), nsplit);
#define DEC_LAUNCH_T(DIM, KT)                                                                                     \
    launch(c, ad_kernel<DIM, KT>(staged), dgrid, AD_WARPS * 32, staged ? ad_geom<DIM, KT>::SMEM : 0, q->d, k->d, v->d, \
           (const KT *)kv->k, (const KT *)kv->v, c->step, n_head, n_kv_head, kv->capacity, kv->ring, window, nsplit, gb, \
           (float *)c->part.p, (float *)c->pml.p, (KT *)kv->k, (KT *)kv->v)
#define DEC_LAUNCH(DIM)           \
    if (kv->f16)                  \
        DEC_LAUNCH_T(DIM, __half); \
    else                          \
        DEC_LAUNCH_T(DIM, float)
        HEAD_DIM_SWITCH(d, DEC_LAUNCH);
#undef DEC_LAUNCH
#undef DEC_LAUNCH_T
    } else {
        HEAD_DIM_SWITCH(d, ATTN_LAUNCH);
    }
#undef ATTN_LAUNCH
#undef ATTN_LAUNCH_T
    LAUNCHED(c, tc ? (nr ? "attention (one-token, k_attn_tc+norm+rope)" : "attention (one-token, k_attn_tc)")
                : dec ? "attention (one-token, k_attn_dec)"
                      : "attention");
    if (n <= 8 && d % 32 == 0)
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

void cu_attention(backend *b, const be_buf *q, const be_buf *k, const be_buf *v, be_kv *kv, int n, int pos0,
                  int n_head, int n_kv_head, int d, int window, be_buf *out) {
    (void)pos0; /* read from the step buffer */
    attention_run(cu_of(b), q, k, v, kv, n, n_head, n_kv_head, d, window, out, NULL);
}

/* qkv_norm_rope, then attention: one-token steps on k_attn_tc (f16
 * caches) take the norms and rope inside the attention kernel
 * (GEM_CUDA_ATTN_FUSE=0: two launches as everywhere else); q, k and v then
 * keep the raw projections. */
void cu_attention_qkv(backend *b, be_buf *q, const be_weight *qw, be_buf *k, const be_weight *kw, be_buf *v,
                      int v_from_k, be_kv *kv, int n, int pos0, int n_head, int n_kv_head, int d, float eps,
                      float theta, const be_weight *ff, int window, be_buf *out) {
    cuda_backend *c = cu_of(b);
    if (c->attn_fuse && attn_tc_step(c, kv, n)) { /* (attention_run rejects unsupported head shapes itself) */
        const tc_nr nr = {qw ? (const float *)qw->q : NULL, kw ? (const float *)kw->q : NULL,
                          ff ? (const float *)ff->q : NULL, eps, rope_theta_scale(theta, d), v_from_k};
        attention_run(c, q, k, v, kv, n, n_head, n_kv_head, d, window, out, &nr);
        return;
    }
    cu_qkv_norm_rope(b, q, qw, k, kw, v, v_from_k, n, n_head, n_kv_head, d, eps, pos0, theta, ff);
    cu_attention(b, q, k, v, kv, n, pos0, n_head, n_kv_head, d, window, out);
}

be_kv *cu_kv_new(backend *b, int n_kv_head, int d, int capacity, int ring, gem_err *err) {
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

void cu_kv_free(backend *b, be_kv *kv) {
    (void)b;
    if (!kv) return;
    cudaFree(kv->k);
    cudaFree(kv->v);
    free(kv);
}

size_t cu_kv_bytes(backend *b, const be_kv *kv, int n_pos) {
    (void)b;
    size_t slots = (size_t)(kv->ring ? (n_pos < kv->capacity ? n_pos : kv->capacity) : n_pos);
    return 2 * slots * (size_t)kv->n_kv_head * kv->head_dim * (kv->f16 ? sizeof(__half) : sizeof(float));
}

/* Both on the backend's stream, then waited for: a plain cudaMemcpy runs on
 * the legacy stream, which does not order the backend's non-blocking
 * stream, and one from pageable memory may return before its DMA lands,
 * so a later kernel could read a stale cache. */
void cu_kv_save(backend *b, const be_kv *kv, int n_pos, void *dst) {
    cuda_backend *c = cu_of(b);
    size_t half = cu_kv_bytes(b, kv, n_pos) / 2;
    CK(c, cudaMemcpyAsync(dst, kv->k, half, cudaMemcpyDeviceToHost, c->st));
    CK(c, cudaMemcpyAsync((char *)dst + half, kv->v, half, cudaMemcpyDeviceToHost, c->st));
    CK(c, cudaStreamSynchronize(c->st));
}

void cu_kv_load(backend *b, be_kv *kv, int n_pos, const void *src) {
    cuda_backend *c = cu_of(b);
    size_t half = cu_kv_bytes(b, kv, n_pos) / 2;
    CK(c, cudaMemcpyAsync(kv->k, src, half, cudaMemcpyHostToDevice, c->st));
    CK(c, cudaMemcpyAsync(kv->v, (const char *)src + half, half, cudaMemcpyHostToDevice, c->st));
    CK(c, cudaStreamSynchronize(c->st));
}
