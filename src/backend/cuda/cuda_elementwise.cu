/* CUDA elementwise ops (see cuda_ops.h; invariants in cuda_common.h): the
 * embedding rows of the step's tokens, the gated GELU, the layer scale
 * and the soft-cap. One pass over the elements each, f32 arithmetic;
 * embed reads its token ids from the step buffer (set_step), so a
 * replayed step embeds the ids of the latest call. */
#include "backend/cuda/cuda_common.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/cuda_kquant.h"

/* Element k of row `row` of a weight in any resident format (the
 * embedding's lookup; products have kernels of their own). */
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
    case DW_Q4_K: return kq_value<DW_Q4_K>((const uint8_t *)q + (i / 256) * kq_block_bytes(DW_Q4_K), NULL, (int)(k % 256) / 32, (int)(k % 32));
    case DW_Q5_K: return kq_value<DW_Q5_K>((const uint8_t *)q + (i / 256) * kq_block_bytes(DW_Q5_K), NULL, (int)(k % 256) / 32, (int)(k % 32));
    case DW_Q6_K: return kq_value<DW_Q6_K>((const uint8_t *)q + (i / 256) * kq_block_bytes(DW_Q6_K), d + i / 256, (int)(k % 256) / 32, (int)(k % 32));
    default: return ((const float *)q)[i];
    }
}

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

void cu_embed(backend *b, const be_weight *E, const int32_t *ids, int n, float scale, be_buf *out) {
    cuda_backend *c = cu_of(b);
    (void)ids; /* read from the step buffer */
    launch(c, k_embed, n, 256, 0, E->fmt, E->q, E->d, E->ne0, E->ne1, c->step, n, scale, out->d);
    LAUNCHED(c, "embed");
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

void cu_scale(backend *b, be_buf *x, size_t n, const be_weight *s) {
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

void cu_softcap(backend *b, be_buf *x, size_t n, float cap) {
    cuda_backend *c = cu_of(b);
    launch(c, k_softcap, grid_1d(n), 256, 0, x->d, n, cap);
    LAUNCHED(c, "softcap");
}
