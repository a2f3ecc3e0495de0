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
 * synchronisation, decode and prefill alike. The chunked tensor-core form
 * for long prompts is not written yet: prefill runs the recurrence. */
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

void cu_conv_silu(backend *b, const be_buf *x, be_buf *state, const be_weight *w, int n, int ch, be_buf *out) {
    cuda_backend *c = cu_of(b);
    launch(c, k_conv_silu, (unsigned)((ch + 127) / 128), 128, 0, (const float *)x->d, state->d, (const float *)w->q, n,
           ch, out->d);
    LAUNCHED(c, "conv_silu");
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

void cu_gated_delta(backend *b, const be_buf *qkv, const be_buf *alpha, const be_buf *beta, const be_weight *a,
                    const be_weight *dt_bias, be_buf *state, int n, int n_k, int n_v, int d, be_buf *out) {
    cuda_backend *c = cu_of(b);
    if (d % 32 || d > 32 * HY_MAX_EPL || n_k <= 0 || n_v % n_k) {
        cu_check(c, cudaErrorInvalidValue, "gated_delta: head dim must be a multiple of 32 up to 256, V heads a multiple of QK heads");
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
