/* CUDA attention over prompt tiles, and the KV caches (see cuda_ops.h;
 * shared helpers and invariants in cuda_attn.h and cuda_common.h):
 * k_attn_fa (flash attention on the f16 tensor cores, tiles of FA_MIN_N
 * queries or more), k_attn_split (split-K attention with online softmax
 * in f32: tiles without the tensor cores, steps of 2-8 tokens, and
 * one-token steps with GEM_CUDA_ATTN_DEC=0) and its combine for calls of
 * more than 8 queries, the tiles' cache stores, and the caches'
 * allocation and checkpoint blobs. Which kernel a call runs is
 * attention_run's choice (cuda_attn_decode.cu). Keys of a call come from
 * its k/v, older ones from the cache; a tile's own keys are stored after
 * every query has read the old ring. */
#include "backend/cuda/cuda_attn.h"
#include "backend/cuda/cuda_ops.h"

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

/* k_attn_combine of the partials in scratch into out (with their 8-bit
 * codes when quant): calls of more than 8 queries, or heads not a
 * multiple of 32. */
void attn_combine_launch(cuda_backend *c, int n, int n_head, int d, int nsplit, int QB, int window, int quant,
                         be_buf *out) {
    launch(c, k_attn_combine, dim3(n_head, n), 128, sizeof(float) * (size_t)nsplit, (const float *)c->part.p,
           (const float *)c->pml.p, n_head, d, nsplit, out->d, quant ? (int8_t *)c->xq.p : NULL,
           quant ? (float *)c->xd.p : NULL, quant ? (int *)c->xs.p : NULL, c->step, n, QB, window);
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
 * no splits: the block writes the normalised rows.
 * Warps: BR/16 row groups x WC parts. A warp's scores are its 16 rows x
 * FA_BC/WC keys over the whole head, kept in registers (fragments by
 * ldmatrix); the softmax runs there too (row maxima over the lane quad,
 * and between the WC warps of a row group through shared memory), and
 * each warp's f16 probabilities go to shared memory, where P V reads all
 * FA_BC keys of its rows for its D/WC output columns. Row sums stay
 * per-lane partials, scaled by the same alphas, summed at the end.
 * BR = 128 rows for heads up to 256 (O of 16 x D per warp in registers),
 * 64 for longer heads (16 x D/2): every staged key and value serves BR
 * rows. */
#define FA_BC 64
#define FA_THREADS 256
#define FA_MIN_N 16

template <int D> struct fa_geom {
    static constexpr int BR = D <= 256 ? 128 : 64; /* rows per block */
    static constexpr int WC = 128 / BR;             /* warps per row group */
    static constexpr int LD = D + 8;       /* halves per Q/K/V row: fragment loads conflict-free */
    static constexpr int PLD = FA_BC + 8;  /* halves per probability row */
    static constexpr size_t K_OFF = (size_t)BR * LD * 2, V_OFF = K_OFF + (size_t)FA_BC * LD * 2,
                            P_OFF = V_OFF + (size_t)FA_BC * LD * 2, X_OFF = P_OFF + (size_t)BR * PLD * 2,
                            SMEM = X_OFF + (size_t)WC * BR * 4;
};

/* FA_LB float4 loads per array a thread issues before it converts and
 * stores them: one at a time (the compiler's schedule), each 64-key tile
 * was 16 (head 256) or 32 (head 512) dependent L2 round trips per thread
 * (bench/results/cuda-variants-2026-12-03b.json). */
#define FA_LB 4

/* An f16 cache's key or value tile (FA_BC rows from position t0, all older
 * than the call) copied as it is into shared memory with cp.async: no
 * registers, every load of the tile in flight at once, one commit group.
 * The caller's pipeline waits for the group when it needs the tile. */
template <int D>
__device__ __forceinline__ void fa_issue_tile(__half *dst, const __half *cache, int t0, int kvh, int h, int cap,
                                              int ring, int tid) {
    constexpr int LD = fa_geom<D>::LD, CH = D / 8; /* 16-byte chunks per row */
#pragma unroll 4
    for (int idx = tid; idx < FA_BC * CH; idx += FA_THREADS) {
        const int j = idx / CH, e = 8 * (idx % CH), p = t0 + j;
        const size_t slot = (size_t)(ring ? p % cap : p);
        cp_async16(dst + j * LD + e, cache + (slot * kvh + h) * D + e);
    }
    cp_async_commit();
}
template <typename KT> struct fa_is_half { static constexpr bool v = false; };
template <> struct fa_is_half<__half> { static constexpr bool v = true; };

/* mma_f16 without volatile: registers only, so the scheduler may move it */
__device__ __forceinline__ void fa_mma(float (&d)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0,
                                       unsigned b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

template <int D, typename KT>
__global__ void __launch_bounds__(FA_THREADS, 1)
    k_attn_fa(const float *q, const float *k, const float *v, const KT *ck, const KT *cv, const int *step, int n,
              int n_head, int kvh, int cap, int ring, int window, float *out) {
    CU_TRACE(CT_ATTN_FA);
    pdl_wait();
    CU_TRACE_RELEASED();
    typedef fa_geom<D> F;
    constexpr int BR = F::BR, WC = F::WC, NS = FA_BC / WC / 8; /* 8-key score tiles per warp */
    static_assert(NS % 2 == 0, "key fragments load in pairs of tiles");
    extern __shared__ __align__(16) uint8_t fa_smem[];
    __half *Qs = (__half *)fa_smem, *Ks = (__half *)(fa_smem + F::K_OFF), *Vs = (__half *)(fa_smem + F::V_OFF);
    __half *Ps = (__half *)(fa_smem + F::P_OFF);
    float *X = (float *)(fa_smem + F::X_OFF); /* [WC][BR]: row maxima, then row sums, of each part */
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
    /* this thread's two rows (g and g + 8 of its row group): the keys each
     * sees are rf..qp; a row past the tile sees none (qp = -1) */
    int qp[2], rf[2];
#pragma unroll
    for (int hi = 0; hi < 2; hi++) {
        const int grow = r0 + wr * 16 + g + 8 * hi;
        qp[hi] = grow < rows ? pos0 + grow / G : -1;
        rf[hi] = window > 0 && qp[hi] - window + 1 > 0 ? qp[hi] - window + 1 : 0;
    }
    float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0, 0}; /* lrow: this lane's partial */
    constexpr int NO = D / WC / 8; /* 8-wide output tiles per warp */
    float o[NO][4];
#pragma unroll
    for (int t = 0; t < NO; t++) o[t][0] = o[t][1] = o[t][2] = o[t][3] = 0;
    /* Tiles wholly older than the call, from an f16 cache, are pipelined
     * (fa_issue_tile): K of tile t+1 loads during t's softmax and P V, V of
     * t+1 during t+1's scores, so the staging overlaps the tensor cores.
     * Groups in flight, oldest first, at the top of such a tile: K_t, V_t.
     * Other tiles (the call's own keys, f32 caches) load through registers.
     * Once a tile is not pipelined no later one is (t0 + FA_BC <= pos0
     * only shrinks). */
    const auto piped = [&](int t) { return fa_is_half<KT>::v && t + FA_BC <= pos0 && t <= qp_last; };
    if constexpr (fa_is_half<KT>::v) {
        if (piped(first)) {
            fa_issue_tile<D>(Ks, (const __half *)ck, first, kvh, h, cap, ring, tid);
            fa_issue_tile<D>(Vs, (const __half *)cv, first, kvh, h, cap, ring, tid);
        }
    }
    for (int t0 = first; t0 <= qp_last; t0 += FA_BC) {
        const bool pipe = piped(t0), pipe_next = pipe && piped(t0 + FA_BC);
        /* a pipelined tile: its K arrived (V_t may still load); the last
         * tile's readers of Ks, Vs and Ps passed the barriers before. Else,
         * after the barrier, K and V through registers. Keys past the
         * block's last query load as zeros: masked scores, and a
         * probability 0 times a finite value. */
        if (pipe) cp_async_wait<1>();
        __syncthreads();
#pragma unroll 1
        for (int i0 = 0; i0 < (pipe ? 0 : FA_BC * D / 4 / FA_THREADS); i0 += FA_LB) {
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
        if (!pipe) __syncthreads();
        /* S = Q K^T for the warp's 16 rows x NS * 8 keys */
        float s[NS][4];
#pragma unroll
        for (int nt = 0; nt < NS; nt++) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0;
        {
            const __half *qa = Qs + (wr * 16 + (lane & 15)) * F::LD + (lane >> 4) * 8;
            const __half *kb = Ks + (wc * NS * 8 + (lane & 7) + ((lane >> 4) << 3)) * F::LD + ((lane >> 3) & 1) * 8;
#pragma unroll 4
            for (int kk = 0; kk < D; kk += 16) {
                unsigned a0, a1, a2, a3;
                ldsm_x4(a0, a1, a2, a3, qa + kk);
#pragma unroll
                for (int nt = 0; nt < NS; nt += 2) {
                    unsigned b0, b1, b2, b3;
                    ldsm_x4(b0, b1, b2, b3, kb + nt * 8 * F::LD + kk);
                    fa_mma(s[nt], a0, a1, a2, a3, b0, b1);
                    fa_mma(s[nt + 1], a0, a1, a2, a3, b2, b3);
                }
            }
        }
        /* masks, and the rows' maxima over the warp's keys */
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int nt = 0; nt < NS; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int hi = e >> 1, p = t0 + wc * NS * 8 + nt * 8 + 2 * c + (e & 1);
                if (p < rf[hi] || p > qp[hi]) s[nt][e] = -INFINITY;
                mx[hi] = fmaxf(mx[hi], s[nt][e]);
            }
#pragma unroll
        for (int hi = 0; hi < 2; hi++) {
            mx[hi] = fmaxf(mx[hi], __shfl_xor_sync(0xffffffffu, mx[hi], 1));
            mx[hi] = fmaxf(mx[hi], __shfl_xor_sync(0xffffffffu, mx[hi], 2));
        }
        if constexpr (WC > 1)
            if (c == 0) X[wc * BR + wr * 16 + g] = mx[0], X[wc * BR + wr * 16 + g + 8] = mx[1];
        __syncthreads(); /* the maxima are out, the scores out of Ks: K of the next tile may load */
        if constexpr (fa_is_half<KT>::v)
            if (pipe_next) fa_issue_tile<D>(Ks, (const __half *)ck, t0 + FA_BC, kvh, h, cap, ring, tid);
        float alpha[2];
#pragma unroll
        for (int hi = 0; hi < 2; hi++) {
            float m = mx[hi];
            if constexpr (WC > 1)
#pragma unroll
                for (int w = 0; w < WC; w++) m = fmaxf(m, X[w * BR + wr * 16 + g + 8 * hi]);
            const float mnew = fmaxf(mrow[hi], m);
            alpha[hi] = mnew == -INFINITY ? 1.0f : expf(mrow[hi] - mnew);
            mrow[hi] = mnew;
            float sum = 0;
#pragma unroll
            for (int nt = 0; nt < NS; nt++) {
                const float p0 = mnew == -INFINITY ? 0.0f : expf(s[nt][2 * hi] - mnew);
                const float p1 = mnew == -INFINITY ? 0.0f : expf(s[nt][2 * hi + 1] - mnew);
                sum += p0 + p1;
                *(unsigned *)(Ps + (wr * 16 + g + 8 * hi) * F::PLD + wc * NS * 8 + nt * 8 + 2 * c) = pack_h2(p0, p1);
            }
            lrow[hi] = lrow[hi] * alpha[hi] + sum;
        }
#pragma unroll
        for (int t = 0; t < NO; t++) o[t][0] *= alpha[0], o[t][1] *= alpha[0], o[t][2] *= alpha[1], o[t][3] *= alpha[1];
        if (pipe) { /* V_t (K of the next tile may still load) */
            if (pipe_next) cp_async_wait<1>();
            else cp_async_wait<0>();
        }
        __syncthreads(); /* the probabilities (and V) are in */
        {
            const __half *pa = Ps + (wr * 16 + (lane & 15)) * F::PLD + (lane >> 4) * 8;
#pragma unroll
            for (int kk = 0; kk < FA_BC; kk += 16) {
                unsigned a0, a1, a2, a3;
                ldsm_x4(a0, a1, a2, a3, pa + kk);
                const __half *vb = Vs + (kk + (lane & 7) + (lane & 8)) * F::LD + wc * (D / WC) + (lane >> 4) * 8;
#pragma unroll
                for (int t = 0; t < NO; t += 2) {
                    unsigned b0, b1, b2, b3;
                    ldsm_x4_t(b0, b1, b2, b3, vb + t * 8);
                    fa_mma(o[t], a0, a1, a2, a3, b0, b1);
                    fa_mma(o[t + 1], a0, a1, a2, a3, b2, b3);
                }
            }
        }
        if constexpr (fa_is_half<KT>::v)
            if (pipe_next) {
                __syncthreads(); /* every warp's P V is done with Vs */
                fa_issue_tile<D>(Vs, (const __half *)cv, t0 + FA_BC, kvh, h, cap, ring, tid);
            }
    }
    /* the rows' sums: over the lane quad, then the WC parts in order */
    float l[2];
#pragma unroll
    for (int hi = 0; hi < 2; hi++) {
        l[hi] = lrow[hi] + __shfl_xor_sync(0xffffffffu, lrow[hi], 1);
        l[hi] += __shfl_xor_sync(0xffffffffu, l[hi], 2);
    }
    if constexpr (WC > 1) {
        __syncthreads(); /* every warp read the last tile's maxima */
        if (c == 0) X[wc * BR + wr * 16 + g] = l[0], X[wc * BR + wr * 16 + g + 8] = l[1];
        __syncthreads();
#pragma unroll
        for (int hi = 0; hi < 2; hi++) {
            l[hi] = 0;
#pragma unroll
            for (int w = 0; w < WC; w++) l[hi] += X[w * BR + wr * 16 + g + 8 * hi];
        }
    }
#pragma unroll
    for (int hi = 0; hi < 2; hi++) {
        const int grow = r0 + wr * 16 + g + 8 * hi;
        if (grow >= rows) continue;
        const float inv = l[hi] > 0 ? 1.0f / l[hi] : 0.0f;
        float *dst = out + ((size_t)(grow / G) * n_head + h * G + grow % G) * D + wc * (D / WC) + 2 * c;
#pragma unroll
        for (int t = 0; t < NO; t++) *(float2 *)(dst + t * 8) = make_float2(o[t][2 * hi] * inv, o[t][2 * hi + 1] * inv);
    }
}

/* Shared memory above the 48 KB default for flash attention, every head
 * size and cache entry type. */
template <int D> static cudaError_t attn_fa_allow() {
    const cudaFuncAttribute at = cudaFuncAttributeMaxDynamicSharedMemorySize;
    cudaError_t e = cudaFuncSetAttribute(k_attn_fa<D, float>, at, (int)fa_geom<D>::SMEM);
    if (e == cudaSuccess) e = cudaFuncSetAttribute(k_attn_fa<D, __half>, at, (int)fa_geom<D>::SMEM);
    return e;
}

cudaError_t attn_prefill_allow(int d) {
    cudaError_t e = cudaSuccess;
#define FA_ALLOW(DIM) e = attn_fa_allow<DIM>()
    HEAD_DIM_SWITCH(d, FA_ALLOW);
#undef FA_ALLOW
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

/* Row i of a tile of one-token steps of sequences (rkv: row i's caches,
 * step_rows: its position) into its cache: the bits k_kv_store stores. */
template <typename KT>
__global__ void k_kv_store_rows(const float *k, const float *v, const kv_row *rkv, const int *step_rows, int row,
                                int cap, int ring) {
    CU_TRACE(CT_KV_STORE);
    pdl_wait();
    CU_TRACE_RELEASED();
    const int i = blockIdx.x, p = step_rows[3 * i];
    KT *ck = (KT *)rkv[i].k, *cv = (KT *)rkv[i].v;
    const size_t slot = (size_t)(ring ? p % cap : p);
    for (int e = threadIdx.x; e < row; e += blockDim.x) {
        kv_st(ck + slot * row + e, k[(size_t)i * row + e]);
        kv_st(cv + slot * row + e, v[(size_t)i * row + e]);
    }
}

/* kv_store_tile, or with rkv the rows of one-token steps of sequences
 * into their own caches (kv: their common shape). */
void kv_store_rows(cuda_backend *c, const be_buf *k, const be_buf *v, be_kv *kv, int n, int n_kv_head, int d,
                   const kv_row *rkv) {
    if (!rkv) {
        kv_store_tile(c, k, v, kv, n, n_kv_head, d);
        return;
    }
    if (kv->f16)
        launch(c, k_kv_store_rows<__half>, n, 256, 0, k->d, v->d, rkv, (const int *)c->step_rows, n_kv_head * d,
               kv->capacity, kv->ring);
    else
        launch(c, k_kv_store_rows<float>, n, 256, 0, k->d, v->d, rkv, (const int *)c->step_rows, n_kv_head * d,
               kv->capacity, kv->ring);
    LAUNCHED(c, "kv store (rows of sequences)");
}

/* A tile's keys and values into the cache, after every query read the old
 * ring (one-token steps store inside the attention kernel). */
void kv_store_tile(cuda_backend *c, const be_buf *k, const be_buf *v, be_kv *kv, int n, int n_kv_head, int d) {
    if (kv->f16)
        launch(c, k_kv_store<__half>, n, 256, 0, k->d, v->d, (__half *)kv->k, (__half *)kv->v, c->step, n_kv_head * d,
               kv->capacity, kv->ring);
    else
        launch(c, k_kv_store<float>, n, 256, 0, k->d, v->d, (float *)kv->k, (float *)kv->v, c->step, n_kv_head * d,
               kv->capacity, kv->ring);
    LAUNCHED(c, "kv store");
}

/* k_attn_split over a call's n queries: nsplit splits of the keys, blocks
 * of G query heads x QB queries (attention_run chooses them); the
 * partials go to the part/pml scratch for a combine, and a one-token
 * step stores its key and value inside the kernel. */
void attn_split_launch(cuda_backend *c, const be_buf *q, const be_buf *k, const be_buf *v, be_kv *kv, int n,
                       int n_head, int n_kv_head, int d, int window, int nsplit, int G, int QB) {
    const int groups = n_head / n_kv_head / G, R = G * QB;
    const size_t shm = sizeof(float) * ((size_t)R * d + (size_t)R * AT_CHUNK + 5 * (size_t)R);
    const dim3 grid(n_kv_head * groups, nsplit, (n + QB - 1) / QB);
#define ATTN_LAUNCH_T(DIM, KT)                                                                                 \
    launch(c, k_attn_split<DIM, KT>, grid, AT_THREADS, shm, q->d, k->d, v->d, (const KT *)kv->k, (const KT *)kv->v, \
           c->step, n, n_head, n_kv_head, kv->capacity, kv->ring, window, nsplit, G, QB, (float *)c->part.p,     \
           (float *)c->pml.p, n == 1 ? (KT *)kv->k : (KT *)NULL, n == 1 ? (KT *)kv->v : (KT *)NULL)
    HEAD_DIM_KV_SWITCH(d, kv->f16, ATTN_LAUNCH_T);
#undef ATTN_LAUNCH_T
}

/* A prompt tile on the tensor cores (k_attn_fa), its keys and values then
 * stored: 1 when it ran, 0 when the tile is not one for it (GEM_CUDA_MMA=0,
 * fewer than FA_MIN_N queries, a head shape it does not take). */
int attn_fa_run(cuda_backend *c, const be_buf *q, const be_buf *k, const be_buf *v, be_kv *kv, int n, int n_head,
                int n_kv_head, int d, int window, be_buf *out) {
    if (!(c->mma && n >= FA_MIN_N && d % 128 == 0 && d <= 512 && n_head % n_kv_head == 0)) return 0;
    const int br = d <= 256 ? fa_geom<256>::BR : fa_geom<512>::BR;
    const dim3 grid((unsigned)(((size_t)n * (n_head / n_kv_head) + br - 1) / br), n_kv_head);
#define FA_LAUNCH_T(DIM, KT)                                                                                    \
    launch(c, k_attn_fa<DIM, KT>, grid, FA_THREADS, fa_geom<DIM>::SMEM, q->d, k->d, v->d, (const KT *)kv->k,     \
           (const KT *)kv->v, c->step, n, n_head, n_kv_head, kv->capacity, kv->ring, window, out->d)
    HEAD_DIM_KV_SWITCH(d, kv->f16, FA_LAUNCH_T);
#undef FA_LAUNCH_T
    LAUNCHED(c, d <= 256 ? "attention (tensor cores, d<=256)" : "attention (tensor cores, d>256)");
    kv_store_tile(c, k, v, kv, n, n_kv_head, d);
    return 1;
}

be_kv *cu_kv_new(backend *b, int n_kv_head, int d, int capacity, int ring, be_kv_type type, gem_err *err) {
    cuda_backend *c = cu_of(b);
    if (type != BE_KV_F32 && type != BE_KV_F16) {
        gem_err_set(err, "KV cache entry type %d is not one the CUDA backend keeps (f32, f16)", (int)type);
        return NULL;
    }
    const int f16 = type == BE_KV_F16;
    be_kv *kv = (be_kv *)calloc(1, sizeof *kv);
    /* exactly cu_kv_bytes(kv, capacity) / 2 each for keys and values (the
     * KV plan counts on it) */
    const size_t bytes = (size_t)capacity * n_kv_head * d * (f16 ? sizeof(__half) : sizeof(float));
    cudaError_t e = kv ? cudaMalloc(&kv->k, bytes) : cudaErrorMemoryAllocation;
    if (e == cudaSuccess) e = cudaMalloc(&kv->v, bytes);
    if (e == cudaSuccess) e = cudaMemsetAsync(kv->k, 0, bytes, c->st);
    if (e == cudaSuccess) e = cudaMemsetAsync(kv->v, 0, bytes, c->st);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* a refused allocation is an answer, not a sticky fault */
        gem_err_set(err, "cannot allocate a KV cache of %d positions (%s, %.1f MiB) on the GPU: %s", capacity,
                    f16 ? "f16" : "f32", 2.0 * bytes / 1048576.0, cudaGetErrorString(e));
        if (kv) {
            cudaFree(kv->k);
            cudaFree(kv->v);
            free(kv);
        }
        return NULL;
    }
    kv->f16 = f16;
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
