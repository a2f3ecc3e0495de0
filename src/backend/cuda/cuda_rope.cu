/* CUDA rope and the per-head norm + rope of q, k and v (see cuda_ops.h;
 * invariants in cuda_common.h): rope, rmsnorm_rope and qkv_norm_rope.
 * Angles are built as the CPU builds them (rope_angle: repeated f32
 * products, the host's powf for the factor) and pairs rotated without
 * fused multiply-adds (rope_rotate), so every kernel here and the
 * attention kernel that folds the norms in (k_attn_tc) agree bit for
 * bit. Positions come from the step buffer (set_step). */
#include "backend/cuda/cuda_common.h"
#include "backend/cuda/cuda_ops.h"

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

void cu_rope(backend *b, be_buf *x, int n, int heads, int d, int n_rot, int pos0, float base,
                    const be_weight *ff) {
    cuda_backend *c = cu_of(b);
    (void)pos0; /* read from the step buffer */
    const float theta_scale = rope_theta_scale(base, n_rot);
    launch(c, k_rope, n, 256, sizeof(float) * (size_t)n_rot, x->d, heads, d, n_rot, c->step, theta_scale,
                                                             ff ? (const float *)ff->q : NULL);
    LAUNCHED(c, "rope");
}

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
                                int nh, int kvh, int d, float eps, const int *step, float theta_scale, const float *ff,
                                const int *rpos) {
    CU_TRACE(CT_QKV_NORM_ROPE);
    pdl_wait();
    CU_TRACE_RELEASED();
    extern __shared__ float row[];
    __shared__ float sh[32];
    int bid = blockIdx.x;
    const int pos0 = step[0];
    if (bid < n * nh) {
        const int tok = bid / nh, p = rpos ? rpos[3 * tok] : pos0 + tok;
        head_norm_rope(q + (size_t)bid * d, qw, d, eps, (float)p, theta_scale, ff, true, row, sh, NULL);
        return;
    }
    bid -= n * nh;
    if (bid < n * kvh) {
        const int tok = bid / kvh, p = rpos ? rpos[3 * tok] : pos0 + tok;
        head_norm_rope(k + (size_t)bid * d, kw, d, eps, (float)p, theta_scale, ff, true, row, sh,
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
                      int kvh, float eps, const int *step, float theta_scale, const float *ff, const int *rpos) {
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
        const float pos = (float)(rpos ? rpos[3 * tok] : step[0] + tok);
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

/* rpos (device, stride 3): row i's position rpos[3 i] (the rows of a
 * batched step of sequences, step_rows), else the step buffer's pos0 + i. */
void qkv_norm_rope_launch(cuda_backend *c, be_buf *q, const be_weight *qw, be_buf *k, const be_weight *kw, be_buf *v,
                          int v_from_k, int n, int n_head, int n_kv_head, int d, float eps, float base,
                          const be_weight *ff, const int *rpos) {
    const float theta_scale = rope_theta_scale(base, d);
    const int blocks = n * (n_head + (v_from_k ? 1 : 2) * n_kv_head);
    if (d == 256 || d == 512) {
#define QKV_E(D)                                                                                                       \
    launch(c, k_qkv_norm_rope_e<D>, blocks, 128, 0, q->d, qw ? (const float *)qw->q : NULL, k->d,                      \
           kw ? (const float *)kw->q : NULL, v->d, v_from_k, n, n_head, n_kv_head, eps, c->step, theta_scale,             \
           ff ? (const float *)ff->q : NULL, rpos)
        if (d == 256) QKV_E(256);
        else QKV_E(512);
#undef QKV_E
        LAUNCHED(c, "q/k/v norm+rope");
        return;
    }
    launch(c, k_qkv_norm_rope, blocks, 128, sizeof(float) * (size_t)d, q->d, qw ? (const float *)qw->q : NULL, k->d,
           kw ? (const float *)kw->q : NULL, v->d, v_from_k, n, n_head, n_kv_head, d, eps, c->step, theta_scale,
           ff ? (const float *)ff->q : NULL, rpos);
    LAUNCHED(c, "q/k/v norm+rope");
}

void cu_qkv_norm_rope(backend *b, be_buf *q, const be_weight *qw, be_buf *k, const be_weight *kw, be_buf *v,
                      int v_from_k, int n, int n_head, int n_kv_head, int d, float eps, int pos0, float base,
                      const be_weight *ff) {
    (void)pos0; /* read from the step buffer */
    qkv_norm_rope_launch(cu_of(b), q, qw, k, kw, v, v_from_k, n, n_head, n_kv_head, d, eps, base, ff, NULL);
}

void cu_rmsnorm_rope(backend *b, be_buf *x, const be_weight *w, int n, int heads, int d, float eps, int pos0,
                            float base, const be_weight *ff) {
    cuda_backend *c = cu_of(b);
    (void)pos0; /* read from the step buffer */
    const float theta_scale = rope_theta_scale(base, d);
    launch(c, k_rmsnorm_rope, n * heads, 128, sizeof(float) * (size_t)d, 
        x->d, w ? (const float *)w->q : NULL, heads, d, eps, c->step, theta_scale, ff ? (const float *)ff->q : NULL);
    LAUNCHED(c, "rmsnorm+rope");
}
