/* Prefill products: gem's own kernel against cuBLAS on the same shapes and
 * the same values (issue 6: cuBLAS may serve prefill only where it beats
 * gem's kernel, and both are recorded). A speed probe, not part of gem: it
 * links gem's library for the backend's matmul op and cuBLAS for the
 * comparison; gem itself never links cuBLAS.
 *
 * Per product shape of the 31B (M output rows, K inputs; 2048 tokens, the
 * CUDA backend's prompt tile), for Q4_0 and Q8_0 weights of random blocks:
 *   gem      the backend's matmul op as a prompt tile runs it: the f32
 *            activations to f16 (k_act_f16) and the warpgroup-MMA product
 *            on the quantized weights (k_mm_w), f32 out;
 *   cublas   cublasGemmEx on weights expanded to f16 beforehand (the same
 *            values) and f16 activations, f32 sums and f32 out
 *            (CUBLAS_COMPUTE_32F): what a cuBLAS prefill with resident f16
 *            copies of the weights would pay (2 or 3.6 times the bytes);
 *   +expand  the same with the weights expanded from their blocks and the
 *            activations converted before each product (this file's two
 *            small kernels): what a cuBLAS prefill keeping only the
 *            quantized weights would pay.
 * Each figure is the median of REPS timed runs after two warm-ups; the
 * three run interleaved (gem, cublas, +expand, gem, ...) so drift weighs
 * on all alike. The last column is the largest |gem - cublas| over the
 * rms of the product (both have f16 operands and f32 sums: a layout or
 * shape error shows as order one).
 *
 *   build/experiments/cuda_cublas_probe [TOKENS] [REPS]     (defaults 2048, 10; make -C experiments/cuda cublas) */
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <algorithm>
#include <vector>

extern "C" {
#include "backend/backend.h"
#include "quant/quant.h"
}

#define CK(x)                                                                                 \
    do {                                                                                      \
        cudaError_t e_ = (x);                                                                 \
        if (e_ != cudaSuccess) {                                                              \
            fprintf(stderr, "cuda_cublas_probe: %s: %s\n", #x, cudaGetErrorString(e_));       \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)
#define CB(x)                                                                                 \
    do {                                                                                      \
        cublasStatus_t s_ = (x);                                                              \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                    \
            fprintf(stderr, "cuda_cublas_probe: %s: cuBLAS status %d\n", #x, (int)s_);        \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

/* Expands q8_0 (34-byte blocks: f16 scale, 32 codes) or q4_0 (18-byte
 * blocks: f16 scale, 16 bytes of two 4-bit codes, low nibbles first, minus
 * 8) into f16 rows: one thread per block. The values are the dequantizer's
 * (scale x code, rounded once to f16). */
template <int Q4> __global__ void k_expand(const uint8_t *q, long long nblk, __half *out) {
    const long long b = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (b >= nblk) return;
    constexpr int TS = Q4 ? 18 : 34;
    const uint8_t *p = q + b * TS;
    const float d = __half2float(*(const __half *)p);
    __half *o = out + b * 32;
    for (int i = 0; i < 16; i++) {
        const int lo = Q4 ? (p[2 + i] & 15) - 8 : (int8_t)p[2 + i];
        const int hi = Q4 ? (p[2 + i] >> 4) - 8 : (int8_t)p[2 + 16 + i];
        o[i] = __float2half_rn(d * (float)lo);
        o[16 + i] = __float2half_rn(d * (float)hi);
    }
}

__global__ void k_to_f16(const float *x, long long n, __half *out) {
    const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) out[i] = __float2half_rn(x[i]);
}

static unsigned long long rng = 0x9e3779b97f4a7c15ull;
static unsigned next_u32(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (unsigned)(rng >> 16);
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return 1e3 * (double)t.tv_sec + 1e-6 * (double)t.tv_nsec;
}

static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

struct shape {
    const char *what;
    int M, K;
};

int main(int argc, char **argv) {
    const int n = argc > 1 ? atoi(argv[1]) : 2048, reps = argc > 2 ? atoi(argv[2]) : 10;
    if (n < 16 || n > 8192 || reps < 1 || reps > 1000) {
        fprintf(stderr, "usage: build/experiments/cuda_cublas_probe [TOKENS 16-8192] [REPS 1-1000]\n");
        return 2;
    }
    gem_err err;
    backend *b = backend_create("cuda", NULL, &err);
    if (!b) {
        fprintf(stderr, "cuda_cublas_probe: %s\n", err.msg);
        return 1;
    }
    cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, 0));
    int ver = 0;
    cublasHandle_t h;
    CB(cublasCreate(&h));
    CB(cublasGetVersion(h, &ver));
    cudaStream_t st;
    CK(cudaStreamCreate(&st));
    CB(cublasSetStream(h, st));
    printf("cuda_cublas_probe: %s, %d SMs; cuBLAS %d; %d tokens, median of %d\n", p.name, p.multiProcessorCount, ver, n,
           reps);
    printf("%-14s %-5s %6s %6s | %9s %7s | %9s %7s | %9s %7s | %9s\n", "product", "type", "M", "K", "gem ms", "TFLOPS",
           "cublas ms", "TFLOPS", "+expand", "TFLOPS", "max|d|/rms");
    /* the 31B's prefill products (gemma4-31b: hidden 5376, 32 query heads
     * of 256 / 512, 16 / 4 KV heads, FFN 21504) */
    const shape shapes[] = {{"q sliding", 8192, 5376}, {"k,v sliding", 4096, 5376}, {"q full", 16384, 5376},
                            {"o sliding", 5376, 8192}, {"o full", 5376, 16384},     {"gate, up", 21504, 5376},
                            {"down", 5376, 21504}};
    const uint32_t types[] = {QT_Q4_0, QT_Q8_0};
    for (const uint32_t type : types) {
        const int q4 = type == QT_Q4_0;
        for (const shape &s : shapes) {
            const int M = s.M, K = s.K;
            uint64_t rb = 0;
            quant_row_bytes(type, K, &rb);
            const size_t wbytes = (size_t)rb * M, nblk = (size_t)M * K / 32;
            std::vector<uint8_t> wq(wbytes);
            const uint32_t ts = quant_type_size(type);
            for (size_t k = 0; k < nblk; k++) {
                uint8_t *blk = wq.data() + k * ts;
                for (uint32_t i = 2; i < ts; i++) blk[i] = (uint8_t)next_u32();
                const uint16_t d = quant_f32_to_f16(0.01f + 0.02f * (float)(next_u32() % 1000) / 1000.0f);
                memcpy(blk, &d, 2);
            }
            std::vector<float> x((size_t)n * K);
            for (float &v : x) v = (float)((int)(next_u32() % 2001) - 1000) / 1000.0f;

            gguf_tensor t;
            memset(&t, 0, sizeof t);
            t.name = "probe";
            t.n_dims = 2;
            t.ne[0] = (uint64_t)K, t.ne[1] = (uint64_t)M, t.ne[2] = t.ne[3] = 1;
            t.type = type;
            t.n_elems = (uint64_t)M * K;
            t.n_bytes = wbytes;
            t.data = wq.data();
            be_weight *w = b->weight(b, &t, &err);
            be_buf *bx = w ? b->alloc(b, (size_t)n * K, &err) : NULL, *bo = bx ? b->alloc(b, (size_t)n * M, &err) : NULL;
            if (!bo) {
                fprintf(stderr, "cuda_cublas_probe: %s\n", err.msg);
                return 1;
            }
            b->upload(b, bx, 0, x.data(), x.size());

            uint8_t *dq;
            float *dx, *dc;
            __half *dw, *dxh;
            CK(cudaMalloc(&dq, wbytes));
            CK(cudaMalloc(&dw, sizeof(__half) * (size_t)M * K));
            CK(cudaMalloc(&dx, sizeof(float) * (size_t)n * K));
            CK(cudaMalloc(&dxh, sizeof(__half) * (size_t)n * K));
            CK(cudaMalloc(&dc, sizeof(float) * (size_t)n * M));
            CK(cudaMemcpy(dq, wq.data(), wbytes, cudaMemcpyHostToDevice));
            CK(cudaMemcpy(dx, x.data(), sizeof(float) * x.size(), cudaMemcpyHostToDevice));
            const float one = 1.0f, zero = 0.0f;
            /* out (n x M, row-major) = x (n x K) W^T: column-major C (M x n)
             * = W^T (W row-major M x K read as column-major K x M, op T)
             * times x^T (column-major K x n) */
            auto expand = [&]() {
                const long long nb = (long long)nblk;
                if (q4) k_expand<1><<<(unsigned)((nb + 255) / 256), 256, 0, st>>>(dq, nb, dw);
                else k_expand<0><<<(unsigned)((nb + 255) / 256), 256, 0, st>>>(dq, nb, dw);
                const long long nx = (long long)n * K;
                k_to_f16<<<(unsigned)((nx + 255) / 256), 256, 0, st>>>(dx, nx, dxh);
            };
            auto gemm = [&]() {
                CB(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, M, n, K, &one, dw, CUDA_R_16F, K, dxh, CUDA_R_16F, K,
                                &zero, dc, CUDA_R_32F, M, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
            };
            expand();
            CK(cudaStreamSynchronize(st));
            std::vector<double> tg, tc, te;
            for (int r = -2; r < reps; r++) {
                b->sync(b);
                double t0 = now_ms();
                b->matmul(b, w, bx, n, bo);
                b->sync(b);
                const double g = now_ms() - t0;
                t0 = now_ms();
                gemm();
                CK(cudaStreamSynchronize(st));
                const double c = now_ms() - t0;
                t0 = now_ms();
                expand();
                gemm();
                CK(cudaStreamSynchronize(st));
                const double e = now_ms() - t0;
                if (r >= 0) tg.push_back(g), tc.push_back(c), te.push_back(e);
            }
            std::vector<float> og((size_t)n * M), oc((size_t)n * M);
            b->download(b, bo, 0, og.data(), og.size());
            b->sync(b);
            CK(cudaMemcpy(oc.data(), dc, sizeof(float) * oc.size(), cudaMemcpyDeviceToHost));
            double ss = 0, dmax = 0;
            for (size_t i = 0; i < og.size(); i++) {
                ss += (double)oc[i] * oc[i];
                dmax = fmax(dmax, fabs((double)og[i] - oc[i]));
            }
            const double rms = sqrt(ss / (double)og.size()), flop = 2.0 * n * (double)M * K;
            const double mg = median(tg), mc = median(tc), me = median(te);
            printf("%-14s %-5s %6d %6d | %9.3f %7.1f | %9.3f %7.1f | %9.3f %7.1f | %9.2e\n", s.what, q4 ? "q4_0" : "q8_0",
                   M, K, mg, flop / mg * 1e-9, mc, flop / mc * 1e-9, me, flop / me * 1e-9, dmax / rms);
            fflush(stdout);
            CK(cudaFree(dq));
            CK(cudaFree(dw));
            CK(cudaFree(dx));
            CK(cudaFree(dxh));
            CK(cudaFree(dc));
            b->buf_free(b, bx), b->buf_free(b, bo);
            b->weight_free(b, w);
            if (b->status(b, &err)) {
                fprintf(stderr, "cuda_cublas_probe: %s\n", err.msg);
                return 1;
            }
        }
    }
    cublasDestroy(h);
    cudaStreamDestroy(st);
    b->destroy(b);
    return 0;
}
