/* The Gated DeltaNet hybrids' ops on CUDA (Qwen3.5; backend.h describes
 * each, src/backend/cpu/hybrid.c is the reference): the causal conv with
 * its rolling state, the L2 norm, the gated delta rule, the gated RMS norm,
 * the gated attention's split and gate, the SiLU-gated FFN activation, and
 * add / scale. f32 throughout; sums run in another order than the CPU's
 * (warp and block reductions), so results agree within f32 rounding of
 * the sums, not bit for bit.
 *
 * The delta rule keeps one value column of a head's state (S^T row jv: d
 * floats over the keys) in one warp's registers for the whole call: the
 * columns are independent (each reads the token's k, q and its own v), so
 * a call of n tokens is n sequential steps per warp with no block-wide
 * synchronisation. Prompt tiles may take the chunked form below
 * (GEM_CUDA_GDN_CHUNKED=1). */
#include "backend/cuda/cuda_common.h"
#include "backend/cuda/cuda_ops.h"

#define HY_CONV_K 4   /* the conv's taps (hybrid.h HYB_CONV_K) */
#define HY_MAX_EPL 8  /* state elements per lane: head dims up to 256 */

/* grid-stride kernels: enough blocks to fill the GPU, not one per 256 */
static unsigned hy_grid(size_t n) {
    const unsigned b = blocks_for(n, 256);
    return b < 1024 ? (b ? b : 1) : 1024;
}

__device__ __forceinline__ float hy_silu(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float hy_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float hy_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* One thread per channel: the 3 carried inputs, then each new one (the
 * CPU's order of the 4 products, no fused multiply-add). */
__global__ void k_conv_silu(const float *x, float *state, const float *w, int n, int ch, float *out) {
    pdl_wait();
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= ch) return;
    float win[HY_CONV_K];
#pragma unroll
    for (int k = 0; k < HY_CONV_K - 1; k++) win[k] = state[(size_t)k * ch + c];
    float wc[HY_CONV_K];
#pragma unroll
    for (int k = 0; k < HY_CONV_K; k++) wc[k] = w[(size_t)c * HY_CONV_K + k];
    for (int t = 0; t < n; t++) {
        win[HY_CONV_K - 1] = x[(size_t)t * ch + c];
        float acc = 0;
#pragma unroll
        for (int k = 0; k < HY_CONV_K; k++) acc = __fadd_rn(acc, __fmul_rn(wc[k], win[k]));
        out[(size_t)t * ch + c] = hy_silu(acc);
#pragma unroll
        for (int k = 0; k < HY_CONV_K - 1; k++) win[k] = win[k + 1];
    }
#pragma unroll
    for (int k = 0; k < HY_CONV_K - 1; k++) state[(size_t)k * ch + c] = win[k];
}

/* A prompt tile: one thread per (token, channel), each output's window
 * read from the tile or, for its first 3 tokens, the carried state (the
 * one-thread-per-channel loop above is n dependent global loads long,
 * latency-bound at one tile of a 10240-channel conv a layer); the same
 * products in the same order, so the same bits. The state is left alone
 * here (others may still read it): k_conv_state moves it on after. */
__global__ void k_conv_silu_tile(const float *x, const float *state, const float *w, int n, int ch, float *out) {
    pdl_wait();
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)n * ch) return;
    const int t = (int)(i / ch), c = (int)(i % ch);
    float acc = 0;
#pragma unroll
    for (int k = 0; k < HY_CONV_K; k++) {
        const int src = t - (HY_CONV_K - 1) + k; /* the input token tap k sees; below 0: the state's row src + 3 */
        const float v = src >= 0 ? x[(size_t)src * ch + c] : state[(size_t)(src + HY_CONV_K - 1) * ch + c];
        acc = __fadd_rn(acc, __fmul_rn(w[(size_t)c * HY_CONV_K + k], v));
    }
    out[i] = hy_silu(acc);
}

/* The state after a tile of n tokens: its last 3 inputs (rows of the old
 * state where n < 3, read before this thread overwrites them: row k takes
 * row k + n, further on). */
__global__ void k_conv_state(const float *x, float *state, int n, int ch) {
    pdl_wait();
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= ch) return;
#pragma unroll
    for (int k = 0; k < HY_CONV_K - 1; k++) {
        const int src = n - (HY_CONV_K - 1) + k;
        state[(size_t)k * ch + c] = src >= 0 ? x[(size_t)src * ch + c] : state[(size_t)(k + n) * ch + c];
    }
}

/* Up to HY_CONV_SEQ tokens the per-channel loop (one launch, a decode
 * step's shape); longer tiles the parallel form and the state move. */
#define HY_CONV_SEQ 4
void cu_conv_silu(backend *b, const be_buf *x, be_buf *state, const be_weight *w, int n, int ch, be_buf *out) {
    cuda_backend *c = cu_of(b);
    if (n <= HY_CONV_SEQ) {
        launch(c, k_conv_silu, (unsigned)((ch + 127) / 128), 128, 0, (const float *)x->d, state->d, (const float *)w->q,
               n, ch, out->d);
        LAUNCHED(c, "conv_silu");
        return;
    }
    launch(c, k_conv_silu_tile, blocks_for((size_t)n * ch, 256), 256, 0, (const float *)x->d, (const float *)state->d,
           (const float *)w->q, n, ch, out->d);
    LAUNCHED(c, "conv_silu (tile)");
    launch(c, k_conv_state, (unsigned)((ch + 127) / 128), 128, 0, (const float *)x->d, state->d, n, ch);
    LAUNCHED(c, "conv state");
}

/* One warp per (row, head): x = x / sqrt(sum x^2 + eps). */
__global__ void k_l2norm(float *x, int rows, int heads, int d, int stride, float eps) {
    pdl_wait();
    const int r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (r >= rows) return;
    float *v = x + (size_t)(r / heads) * stride + (size_t)(r % heads) * d;
    float ss = 0;
    for (int e = lane; e < d; e += 32) ss += v[e] * v[e];
    ss = warp_sum(ss);
    const float s = 1.0f / sqrtf(ss + eps);
    for (int e = lane; e < d; e += 32) v[e] *= s;
}

void cu_l2norm(backend *b, be_buf *x, int n, int heads, int d, int stride, float eps) {
    cuda_backend *c = cu_of(b);
    const int rows = n * heads;
    launch(c, k_l2norm, (unsigned)((rows + 7) / 8), 256, 0, x->d, rows, heads, d, stride, eps);
    LAUNCHED(c, "l2norm");
}

/* One warp per (V head h, value column jv): the column's d state values,
 * lane L holding elements L + 32 m, through the n tokens in order. Per
 * token (backend.h): S = exp(g) S; S += k (b (v - S^T k))^T; out = S^T q /
 * sqrt(d), for this column: row = exp(g) row; row += b (v_jv - row.k) k;
 * out_jv = row.q / sqrt(d). */
__global__ void k_gated_delta(const float *qkv, const float *alpha, const float *beta, const float *a, const float *dt,
                              float *state, int n, int n_k, int n_v, int d, float *out) {
    pdl_wait();
    const int wid = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (wid >= n_v * d) return;
    const int h = wid / d, jv = wid % d, epl = d / 32;
    const size_t stride = (size_t)(2 * n_k + n_v) * d;
    const float scale = 1.0f / sqrtf((float)d);
    float *S = state + ((size_t)h * d + jv) * d;
    float row[HY_MAX_EPL];
#pragma unroll
    for (int m = 0; m < HY_MAX_EPL; m++) row[m] = m < epl ? S[lane + 32 * m] : 0.0f;
    const float ah = a[h], dth = dt[h];
    for (int t = 0; t < n; t++) {
        const float g = ah * hy_softplus(alpha[(size_t)t * n_v + h] + dth);
        const float bt = hy_sigmoid(beta[(size_t)t * n_v + h]);
        const float eg = expf(g);
        const float *q = qkv + (size_t)t * stride + (size_t)(h % n_k) * d;
        const float *k = qkv + (size_t)t * stride + (size_t)(n_k + h % n_k) * d;
        const float vj = qkv[(size_t)t * stride + (size_t)(2 * n_k + h) * d + jv];
        float kr[HY_MAX_EPL], kv = 0;
#pragma unroll
        for (int m = 0; m < HY_MAX_EPL; m++)
            if (m < epl) {
                kr[m] = k[lane + 32 * m];
                row[m] *= eg;
                kv += row[m] * kr[m];
            }
        kv = warp_sum(kv);
        const float u = bt * (vj - kv);
        float o = 0;
#pragma unroll
        for (int m = 0; m < HY_MAX_EPL; m++)
            if (m < epl) {
                row[m] += u * kr[m];
                o += row[m] * q[lane + 32 * m];
            }
        o = warp_sum(o);
        if (lane == 0) out[((size_t)t * n_v + h) * d + jv] = o * scale;
    }
#pragma unroll
    for (int m = 0; m < HY_MAX_EPL; m++)
        if (m < epl) S[lane + 32 * m] = row[m];
}

/* ---- the chunked form (prompt tiles, GEM_CUDA_GDN_CHUNKED=1) ----
 * The CPU's hyb_gdn_chunked (backend/cpu/hybrid.c) per chunk of GDN_C
 * tokens with the state S0 before it, G the cumulative log-decay, b the
 * write strengths:
 *   A[r][s] = b_r exp(G_r - G_s) k_r.k_s (s < r),  P[r][s] = exp(G_r - G_s) q_r.k_s (s <= r)
 *   U = (I + A)^-1 (b v),  W = (I + A)^-1 (b exp(G) k)   (forward substitution)
 *   u = U - W S0,  O_r = (exp(G_r) q_r S0 + sum_{s<=r} P[r][s] u_s) / sqrt(d)
 *   S = exp(G_L) S0 + sum_s exp(G_L - G_s) k_s u_s^T
 * Everything but the last two lines depends on the chunk's own inputs
 * alone: k_gdn_prep computes G, P, U and W of every chunk at once (a block
 * per head and chunk), and k_gdn_scan then walks the chunks in order, a
 * block per head and GDN_DV value columns of its state (the columns are
 * independent given U and W), with the state in shared memory. f32 on the
 * CUDA cores, the CPU's operations per element in its order except the
 * dot products' (blocked sums), so it agrees with the recurrence within
 * the chunked form's tolerance (tests/backend/test_cpu_hybrid.c). A tile
 * walks its chunks GDN_SEG at a time, which bounds the scratch
 * (c->gdn: GDN_SEG x n_v x gdn_scr(d) floats, 32 MiB for the 27B).
 * Tiles of up to BE_EXACT_ROWS tokens (decode steps, verification and
 * batched rows) keep the recurrence, as on the CPU, so their rows stay
 * one-token steps. */
#define GDN_C 64   /* tokens per chunk: the CPU's HYB_CHUNK */
#define GDN_DV 32  /* value columns of a scan block */
#define GDN_SEG 8  /* chunks per prep/scan pair */

/* scratch floats per (chunk, head): G, P (C x C), U and W (C x d each) */
__host__ __device__ constexpr size_t gdn_scr(int d) { return GDN_C + (size_t)GDN_C * GDN_C + 2 * (size_t)GDN_C * d; }

template <int D> struct gdn_prep_geom {
    static constexpr int XS = D + 4; /* row stride of K and Q tiles: float4 rows, spread banks */
    static constexpr int SMEM = (2 * GDN_C * XS + GDN_C * (GDN_C + 1) + 3 * GDN_C) * 4;
};
template <int D> struct gdn_scan_geom {
    static constexpr int XS = D + 4;
    static constexpr int SMEM = (GDN_DV * XS + GDN_C * XS + GDN_C * (GDN_DV + 1) + GDN_C * (GDN_C + 1) + 2 * GDN_C) * 4;
};

__device__ __forceinline__ float dot4(float4 a, float4 b, float acc) {
    return fmaf(a.w, b.w, fmaf(a.z, b.z, fmaf(a.y, b.y, fmaf(a.x, b.x, acc))));
}

/* Block (head h, chunk ck of the segment starting at token t_first):
 * 256 threads. Rows past the tile's end are zero in K, Q, P, U and W. */
template <int D>
__global__ void __launch_bounds__(256)
    k_gdn_prep(const float *qkv, const float *alpha, const float *beta, const float *a, const float *dt, int n,
               int t_first, int n_k, int n_v, float *scr) {
    pdl_wait();
    typedef gdn_prep_geom<D> Gm;
    constexpr int XS = Gm::XS, C = GDN_C;
    extern __shared__ __align__(16) float gp_sh[];
    float *Ks = gp_sh, *Qs = Ks + C * XS, *As = Qs + C * XS, *gs = As + C * (C + 1), *Bs = gs + C, *Gs = Bs + C;
    const int h = blockIdx.x, ck = blockIdx.y, tid = threadIdx.x;
    const int t0 = t_first + ck * C, L = min(C, n - t0);
    const size_t stride = (size_t)(2 * n_k + n_v) * D;
    float *base = scr + ((size_t)ck * n_v + h) * gdn_scr(D);
    float *P = base + C, *U = P + C * C, *W = U + (size_t)C * D;
    if (tid < C) {
        float g = 0, bt = 0;
        if (tid < L) {
            g = a[h] * hy_softplus(alpha[(size_t)(t0 + tid) * n_v + h] + dt[h]);
            bt = hy_sigmoid(beta[(size_t)(t0 + tid) * n_v + h]);
        }
        gs[tid] = g, Bs[tid] = bt;
    }
    for (int i = tid; i < C * (D / 4); i += 256) {
        const int r = i / (D / 4), c4 = i % (D / 4);
        float4 kv = make_float4(0, 0, 0, 0), qv = kv;
        if (r < L) {
            const float *row = qkv + (size_t)(t0 + r) * stride;
            kv = *(const float4 *)(row + (size_t)(n_k + h % n_k) * D + 4 * c4);
            qv = *(const float4 *)(row + (size_t)(h % n_k) * D + 4 * c4);
        }
        *(float4 *)(Ks + r * XS + 4 * c4) = kv;
        *(float4 *)(Qs + r * XS + 4 * c4) = qv;
    }
    __syncthreads();
    if (tid == 0) { /* the CPU's running sum */
        float acc = 0;
        for (int r = 0; r < C; r++) acc += gs[r], Gs[r] = acc;
    }
    __syncthreads();
    /* k_r.k_s and q_r.k_s, a 4 x 4 block of (r, s) per thread */
    {
        const int r0 = 4 * (tid / 16), s0 = 4 * (tid % 16);
        float kk[4][4] = {}, qk[4][4] = {};
        if (s0 <= r0 + 3 && r0 < L) {
            for (int i = 0; i < D; i += 4) {
                float4 kr[4], qr[4], ks[4];
#pragma unroll
                for (int x = 0; x < 4; x++) {
                    kr[x] = *(const float4 *)(Ks + (r0 + x) * XS + i);
                    qr[x] = *(const float4 *)(Qs + (r0 + x) * XS + i);
                    ks[x] = *(const float4 *)(Ks + (s0 + x) * XS + i);
                }
#pragma unroll
                for (int x = 0; x < 4; x++)
#pragma unroll
                    for (int y = 0; y < 4; y++) kk[x][y] = dot4(kr[x], ks[y], kk[x][y]), qk[x][y] = dot4(qr[x], ks[y], qk[x][y]);
            }
        }
#pragma unroll
        for (int x = 0; x < 4; x++)
#pragma unroll
            for (int y = 0; y < 4; y++) {
                const int r = r0 + x, s = s0 + y;
                const bool in = r < L;
                As[r * (C + 1) + s] = in && s < r ? Bs[r] * expf(Gs[r] - Gs[s]) * kk[x][y] : 0.0f;
                P[r * C + s] = in && s <= r ? expf(Gs[r] - Gs[s]) * qk[x][y] : 0.0f;
            }
    }
    __syncthreads();
    /* U (threads 0 .. D - 1, a column each, in place of Q) and W (D .. 2D - 1,
     * in place of K): row r of a column needs only rows s < r of the same
     * column, so no thread waits for another */
    if (tid < 2 * D) {
        const int e = tid % D;
        const bool isw = tid >= D;
        float *col = (isw ? Ks : Qs) + e;
        const float *vcol = qkv + (size_t)(2 * n_k + h) * D + e;
        for (int r = 0; r < C; r++) {
            float acc = 0;
            if (r < L) {
                acc = isw ? Bs[r] * expf(Gs[r]) * col[r * XS] : Bs[r] * vcol[(size_t)(t0 + r) * stride];
                for (int s = 0; s < r; s++) acc = fmaf(-As[r * (C + 1) + s], col[s * XS], acc);
            }
            col[r * XS] = acc;
        }
    }
    __syncthreads();
    for (int i = tid; i < C * D; i += 256) {
        const int r = i / D, e = i % D;
        U[i] = Qs[r * XS + e];
        W[i] = Ks[r * XS + e];
    }
    if (tid < C) base[tid] = Gs[tid];
}

/* acc[x][y] = rows r0 + x of X (shared, stride D + 4) dotted with state
 * columns jj + y of S (the same stride), blocked over 4 keys at a time:
 * k_gdn_scan's W S0 and Q S0. */
template <int D>
__device__ __forceinline__ void gdn_rows_dot(const float *Xs, const float *Ss, int r0, int jj, float (&acc)[4][2]) {
    constexpr int XS = gdn_scan_geom<D>::XS;
#pragma unroll
    for (int x = 0; x < 4; x++) acc[x][0] = acc[x][1] = 0.0f;
    for (int i = 0; i < D; i += 4) {
        float4 xv[4], sv[2];
#pragma unroll
        for (int x = 0; x < 4; x++) xv[x] = *(const float4 *)(Xs + (r0 + x) * XS + i);
#pragma unroll
        for (int y = 0; y < 2; y++) sv[y] = *(const float4 *)(Ss + (jj + y) * XS + i);
#pragma unroll
        for (int x = 0; x < 4; x++)
#pragma unroll
            for (int y = 0; y < 2; y++) acc[x][y] = dot4(xv[x], sv[y], acc[x][y]);
    }
}

/* Block (head h, value columns j0 = GDN_DV blockIdx.y ..): the segment's
 * nck chunks in order, the state's columns in shared memory throughout. */
template <int D>
__global__ void __launch_bounds__(256)
    k_gdn_scan(const float *qkv, const float *scr, float *state, int n, int t_first, int nck, int n_k, int n_v,
               float *out) {
    pdl_wait();
    typedef gdn_scan_geom<D> Gm;
    constexpr int XS = Gm::XS, C = GDN_C, DV = GDN_DV, US = DV + 1, IPT = D / 16;
    extern __shared__ __align__(16) float gq_sh[];
    float *Ss = gq_sh, *Xs = Ss + DV * XS, *us = Xs + C * XS, *Ps = us + C * US, *Gs = Ps + C * (C + 1), *Es = Gs + C;
    const int h = blockIdx.x, j0 = blockIdx.y * DV, tid = threadIdx.x;
    const size_t stride = (size_t)(2 * n_k + n_v) * D;
    const float scale = 1.0f / sqrtf((float)D);
    float *S = state + ((size_t)h * D + j0) * D; /* rows j0 .. j0 + DV - 1 of S^T */
    for (int i = tid; i < DV * (D / 4); i += 256) {
        const int j = i / (D / 4), c4 = i % (D / 4);
        *(float4 *)(Ss + j * XS + 4 * c4) = *(const float4 *)(S + (size_t)j * D + 4 * c4);
    }
    /* (a) and (b): rows 4 rb .. + 3, columns 2 jb, + 1; (c): columns 2 jb,
     * + 1 of S^T over keys IPT ib .. + IPT - 1 */
    const int rb = tid / 16, jb = tid % 16, r0 = 4 * rb, jj = 2 * jb;
    for (int ck = 0; ck < nck; ck++) {
        const int t0 = t_first + ck * C, L = min(C, n - t0);
        const float *base = scr + ((size_t)ck * n_v + h) * gdn_scr(D);
        const float *P = base + C, *U = P + C * C, *W = U + (size_t)C * D;
        if (tid < C) Gs[tid] = base[tid];
        for (int i = tid; i < C * (D / 4); i += 256) {
            const int r = i / (D / 4), c4 = i % (D / 4);
            *(float4 *)(Xs + r * XS + 4 * c4) = *(const float4 *)(W + (size_t)r * D + 4 * c4);
        }
        for (int i = tid; i < C * C; i += 256) Ps[(i / C) * (C + 1) + i % C] = P[i];
        __syncthreads();
        /* (a) u = U - W S0 */
        {
            float acc[4][2];
            gdn_rows_dot<D>(Xs, Ss, r0, jj, acc);
#pragma unroll
            for (int x = 0; x < 4; x++)
#pragma unroll
                for (int y = 0; y < 2; y++) {
                    const int r = r0 + x;
                    us[r * US + jj + y] = r < L ? U[(size_t)r * D + j0 + jj + y] - acc[x][y] : 0.0f;
                }
        }
        __syncthreads();
        for (int i = tid; i < C * (D / 4); i += 256) {
            const int r = i / (D / 4), c4 = i % (D / 4);
            *(float4 *)(Xs + r * XS + 4 * c4) =
                r < L ? *(const float4 *)(qkv + (size_t)(t0 + r) * stride + (size_t)(h % n_k) * D + 4 * c4) : make_float4(0, 0, 0, 0);
        }
        __syncthreads();
        /* (b) O = exp(G) Q S0 + P u, over sqrt(d) */
        {
            float acc[4][2];
            gdn_rows_dot<D>(Xs, Ss, r0, jj, acc);
#pragma unroll
            for (int x = 0; x < 4; x++) {
                const int r = r0 + x;
                if (r >= L) break;
                const float eg = expf(Gs[r]);
#pragma unroll
                for (int y = 0; y < 2; y++) {
                    float o = eg * acc[x][y];
                    for (int s = 0; s <= r; s++) o = fmaf(Ps[r * (C + 1) + s], us[s * US + jj + y], o);
                    out[((size_t)(t0 + r) * n_v + h) * D + j0 + jj + y] = o * scale;
                }
            }
        }
        __syncthreads();
        for (int i = tid; i < C * (D / 4); i += 256) {
            const int r = i / (D / 4), c4 = i % (D / 4);
            *(float4 *)(Xs + r * XS + 4 * c4) =
                r < L ? *(const float4 *)(qkv + (size_t)(t0 + r) * stride + (size_t)(n_k + h % n_k) * D + 4 * c4)
                      : make_float4(0, 0, 0, 0);
        }
        if (tid < C) Es[tid] = tid < L ? expf(Gs[L - 1] - Gs[tid]) : 0.0f;
        __syncthreads();
        /* (c) S = exp(G_L) S0 + sum_s exp(G_L - G_s) k_s u_s^T */
        {
            const float eL = expf(Gs[L - 1]);
            const int i0 = IPT * rb;
#pragma unroll
            for (int y = 0; y < 2; y++) {
                float sv[IPT];
#pragma unroll
                for (int m = 0; m < IPT; m++) sv[m] = Ss[(jj + y) * XS + i0 + m] * eL;
                for (int s = 0; s < L; s++) {
                    const float cf = Es[s] * us[s * US + jj + y];
#pragma unroll
                    for (int m = 0; m < IPT; m++) sv[m] = fmaf(cf, Xs[s * XS + i0 + m], sv[m]);
                }
#pragma unroll
                for (int m = 0; m < IPT; m++) Ss[(jj + y) * XS + i0 + m] = sv[m];
            }
        }
        __syncthreads();
    }
    for (int i = tid; i < DV * (D / 4); i += 256) {
        const int j = i / (D / 4), c4 = i % (D / 4);
        *(float4 *)(S + (size_t)j * D + 4 * c4) = *(const float4 *)(Ss + j * XS + 4 * c4);
    }
}

template <int D> static cudaError_t gdn_allow1() {
    const cudaFuncAttribute at = cudaFuncAttributeMaxDynamicSharedMemorySize;
    cudaError_t e = cudaFuncSetAttribute(k_gdn_prep<D>, at, gdn_prep_geom<D>::SMEM);
    return e == cudaSuccess ? cudaFuncSetAttribute(k_gdn_scan<D>, at, gdn_scan_geom<D>::SMEM) : e;
}
cudaError_t gdn_allow(void) {
    cudaError_t e = gdn_allow1<32>();
    if (e == cudaSuccess) e = gdn_allow1<64>();
    return e == cudaSuccess ? gdn_allow1<128>() : e;
}

template <int D>
static void gdn_chunked(cuda_backend *c, const be_buf *qkv, const be_buf *alpha, const be_buf *beta, const be_weight *a,
                        const be_weight *dt, be_buf *state, int n, int n_k, int n_v, be_buf *out) {
    const int nch = (n + GDN_C - 1) / GDN_C;
    if (grow(c, &c->gdn, (size_t)(nch < GDN_SEG ? nch : GDN_SEG) * n_v * gdn_scr(D) * sizeof(float))) return;
    for (int c0 = 0; c0 < nch; c0 += GDN_SEG) {
        const int nck = nch - c0 < GDN_SEG ? nch - c0 : GDN_SEG, t_first = c0 * GDN_C;
        launch(c, k_gdn_prep<D>, dim3((unsigned)n_v, (unsigned)nck), 256, gdn_prep_geom<D>::SMEM, (const float *)qkv->d,
               (const float *)alpha->d, (const float *)beta->d, (const float *)a->q, (const float *)dt->q, n, t_first,
               n_k, n_v, (float *)c->gdn.p);
        LAUNCHED(c, "gated_delta (chunk prep)");
        launch(c, k_gdn_scan<D>, dim3((unsigned)n_v, (unsigned)(D / GDN_DV)), 256, gdn_scan_geom<D>::SMEM,
               (const float *)qkv->d, (const float *)c->gdn.p, state->d, n, t_first, nck, n_k, n_v, out->d);
        LAUNCHED(c, "gated_delta (chunk scan)");
    }
}

void cu_gated_delta(backend *b, const be_buf *qkv, const be_buf *alpha, const be_buf *beta, const be_weight *a,
                    const be_weight *dt_bias, be_buf *state, int n, int n_k, int n_v, int d, be_buf *out) {
    cuda_backend *c = cu_of(b);
    if (d % 32 || d > 32 * HY_MAX_EPL || n_k <= 0 || n_v % n_k) {
        cu_check(c, cudaErrorInvalidValue, "gated_delta: head dim must be a multiple of 32 up to 256, V heads a multiple of QK heads");
        return;
    }
    if (n > BE_EXACT_ROWS && c->gdn_chunked && (d == 32 || d == 64 || d == 128)) {
        if (d == 32) gdn_chunked<32>(c, qkv, alpha, beta, a, dt_bias, state, n, n_k, n_v, out);
        else if (d == 64) gdn_chunked<64>(c, qkv, alpha, beta, a, dt_bias, state, n, n_k, n_v, out);
        else gdn_chunked<128>(c, qkv, alpha, beta, a, dt_bias, state, n, n_k, n_v, out);
        return;
    }
    const int warps = n_v * d;
    launch(c, k_gated_delta, (unsigned)((warps + 7) / 8), 256, 0, (const float *)qkv->d, (const float *)alpha->d,
           (const float *)beta->d, (const float *)a->q, (const float *)dt_bias->q, state->d, n, n_k, n_v, d, out->d);
    LAUNCHED(c, "gated_delta (recurrence)");
}

/* One block per row: out = rmsnorm(x) * w * silu(z) (k_rmsnorm's norm). */
__global__ void k_rmsnorm_gated(const float *x, const float *z, const float *w, int d, float eps, float *out) {
    pdl_wait();
    __shared__ float sh[32];
    const float *xr = x + (size_t)blockIdx.x * d, *zr = z + (size_t)blockIdx.x * d;
    float ss = 0;
    for (int k = threadIdx.x; k < d; k += blockDim.x) ss += xr[k] * xr[k];
    ss = block_sum(ss, sh);
    const float r = 1.0f / sqrtf(ss / (float)d + eps);
    float *o = out + (size_t)blockIdx.x * d;
    for (int k = threadIdx.x; k < d; k += blockDim.x) o[k] = xr[k] * r * w[k] * hy_silu(zr[k]);
}

void cu_rmsnorm_gated(backend *b, const be_buf *x, const be_buf *z, const be_weight *w, int rows, int d, float eps,
                      be_buf *out) {
    cuda_backend *c = cu_of(b);
    launch(c, k_rmsnorm_gated, (unsigned)rows, 128, 0, (const float *)x->d, (const float *)z->d, (const float *)w->q, d,
           eps, out->d);
    LAUNCHED(c, "rmsnorm_gated");
}

/* Gated attention: rows of [query d | gate d]; split copies the queries,
 * gate multiplies the attention output by sigmoid(gate). */
__global__ void k_split_q(const float *qg, size_t rows, int d, float *q) {
    pdl_wait();
    const size_t n = rows * (size_t)d;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        q[i] = qg[(i / d) * 2 * d + i % d];
}

__global__ void k_attn_gate(float *x, const float *qg, size_t rows, int d) {
    pdl_wait();
    const size_t n = rows * (size_t)d;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] *= hy_sigmoid(qg[(i / d) * 2 * d + d + i % d]);
}

void cu_split_q(backend *b, const be_buf *qg, int n, int heads, int d, be_buf *q) {
    cuda_backend *c = cu_of(b);
    const size_t rows = (size_t)n * heads;
    launch(c, k_split_q, hy_grid(rows * d), 256, 0, (const float *)qg->d, rows, d, q->d);
    LAUNCHED(c, "split_q");
}

void cu_attn_gate(backend *b, be_buf *x, const be_buf *qg, int n, int heads, int d) {
    cuda_backend *c = cu_of(b);
    const size_t rows = (size_t)n * heads;
    launch(c, k_attn_gate, hy_grid(rows * d), 256, 0, x->d, (const float *)qg->d, rows, d);
    LAUNCHED(c, "attn_gate");
}

__global__ void k_swiglu(const float *g, const float *u, size_t n, float *out) {
    pdl_wait();
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = hy_silu(g[i]) * u[i];
}

void cu_swiglu(backend *b, const be_buf *gate, const be_buf *up, size_t n, be_buf *out) {
    cuda_backend *c = cu_of(b);
    launch(c, k_swiglu, hy_grid(n), 256, 0, (const float *)gate->d, (const float *)up->d, n, out->d);
    LAUNCHED(c, "swiglu");
}

__global__ void k_add(float *x, const float *y, size_t n) {
    pdl_wait();
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] += y[i];
}

__global__ void k_scale_f(float *x, size_t n, float s) {
    pdl_wait();
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] *= s;
}

void cu_add(backend *b, be_buf *x, const be_buf *y, size_t n) {
    cuda_backend *c = cu_of(b);
    launch(c, k_add, hy_grid(n), 256, 0, x->d, (const float *)y->d, n);
    LAUNCHED(c, "add");
}

void cu_scale_f(backend *b, be_buf *x, size_t n, float s) {
    cuda_backend *c = cu_of(b);
    launch(c, k_scale_f, hy_grid(n), 256, 0, x->d, n, s);
    LAUNCHED(c, "scale_f");
}
