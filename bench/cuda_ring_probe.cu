/* Can a persistent decode kernel stream the 31B's product weights at the
 * rate of a single launch, with the work between products (norms, 8-bit
 * activation codes) done inside it? A speed probe, not part of gem.
 *
 * gem's one-token step runs a kernel per op: the four products of a
 * layer stream at 2.3-3.8 TB/s and every product and small kernel keeps a
 * ramp and a tail (bench/results/cuda-samecall-2026-12-05.json's trace:
 * ~92 us per sliding layer for the products, norms and codes, against 58
 * us for their 269 MB at 4.6 TB/s). The persistent layer kernel gem tried
 * (k_tail, dropped at a7a9d07) held each round's weight loads in
 * registers: its warps had nothing in flight between rounds and across
 * each grid barrier, and its products streamed at ~2.7 TB/s. Here the
 * loads leave the threads: one producer warp per multiprocessor streams
 * its block's slice of every product, product after product, through a
 * ring of shared-memory stages by bulk copies (cp.async.bulk, completion
 * counted in bytes on a "full" mbarrier per stage), and never waits for
 * the grid barriers; the consumer warps compute and free the stages
 * ("empty" mbarriers) and alone meet at the barriers. While they wait and
 * build the next product's input, the producer fills up to the ring's
 * depth of the next product's weights.
 *
 *   stream  one launch of many short blocks over all the weight bytes (the
 *           rate to reach);
 *   ring    the ring with nothing to compute: all the bytes as one phase
 *           (single), then the 240 product phases with a grid barrier
 *           between two (phases), by ring shape;
 *   chain   the real products: 60 layers of the 31B's sliding-layer
 *           shapes in Q4_0 (gem's repacked layout: 16-byte code blocks
 *           and a separate f16 scale array, both streamed), dp4a dots of
 *           each 32-value block against 8-bit activation codes in shared
 *           memory, per-row sums, outputs stored; after each barrier every
 *           block builds the next product's codes itself from the outputs
 *           before it (q/k/v and gate/up: an RMS norm of the 5376 values;
 *           o: the first 8192 q/k/v outputs, standing in for attention;
 *           down: gelu(gate) * up of the 21504 pairs), so no small kernel
 *           and no extra barrier is left.
 *
 *   build/cuda_ring_probe [LAYERS] [REPS]
 *
 * Output: median ms of REPS runs after a warm-up, GB/s of the bytes read,
 * and for chain the time per layer, to set against gem's ~92 us. The
 * outputs' values mean nothing (bytes are a memset pattern); the checksum
 * sink keeps the loads alive. The row sums use shared-memory atomics, so
 * their order (not the bytes read) differs from run to run. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <vector>

#include "backend/cuda/cuda_common.h"

#define PROBE_NAME "cuda_ring_probe"
#include "cuda_probe_util.h"

/* ---- mbarriers and bulk copies (PTX, sm_90) ---- */
__device__ __forceinline__ unsigned smem_u32(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mbar_init(unsigned long long *b, unsigned n) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(b)), "r"(n) : "memory");
}
/* A wait past 2 s traps: a wrong phase would otherwise hang the device
 * call (the timing loop's checks report the error). */
__device__ __forceinline__ void mbar_wait(unsigned long long *b, unsigned parity) {
    unsigned done = 0, n = 0;
    unsigned long long t0 = 0;
    for (;;) {
        asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}"
                     : "=r"(done)
                     : "r"(smem_u32(b)), "r"(parity)
                     : "memory");
        if (done) return;
        if (++n % 1024 == 0) {
            unsigned long long t;
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
            if (!t0) t0 = t;
            else if (t - t0 > 2000000000ull) __trap();
        }
    }
}
__device__ __forceinline__ void mbar_arrive(unsigned long long *b) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(b)) : "memory");
}
/* the producer's one arrival, announcing the bytes its copies complete */
__device__ __forceinline__ void mbar_expect(unsigned long long *b, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(b)), "r"(bytes) : "memory");
}
/* bytes and both addresses multiples of 16 */
__device__ __forceinline__ void bulk_copy(void *dst, const void *src, unsigned bytes, unsigned long long *b) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     smem_u32(dst)),
                 "l"(__cvta_generic_to_global(src)), "r"(bytes), "r"(smem_u32(b))
                 : "memory");
}

/* The ring's stages and barriers, set up by thread 0 before the block's
 * first barrier. */
template <int ST> struct ring_bars {
    unsigned long long full[ST], empty[ST];
};
template <int ST> __device__ __forceinline__ void ring_init(ring_bars<ST> &rb, int consumer_warps) {
    if (threadIdx.x == 0) {
        for (int i = 0; i < ST; i++) mbar_init(&rb.full[i], 1), mbar_init(&rb.empty[i], (unsigned)consumer_warps);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
}
/* The consumers' grid barrier: a named block barrier for the BT consumer
 * threads (the producer warp never joins), then one arrival per block on a
 * 64-bit counter that only grows, thread 0 polling it with acquire loads. */
__device__ __forceinline__ void consumers_grid_sync(int bt, unsigned long long *count, unsigned long long target) {
    asm volatile("bar.sync 1, %0;" ::"r"(bt) : "memory");
    if (threadIdx.x == 0) {
        __threadfence();
        atomicAdd(count, 1ull);
        unsigned long long v, t0 = 0, t;
        for (unsigned n = 1;; n++) {
            asm volatile("ld.acquire.gpu.u64 %0, [%1];" : "=l"(v) : "l"(count) : "memory");
            if (v >= target) break;
            __nanosleep(20);
            if (n % 1024 == 0) { /* as mbar_wait: 2 s trap */
                asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
                if (!t0) t0 = t;
                else if (t - t0 > 2000000000ull) __trap();
            }
        }
    }
    asm volatile("bar.sync 1, %0;" ::"r"(bt) : "memory");
}

/* ---- stream: one launch of many short blocks (16 KB each) ---- */
__global__ void __launch_bounds__(128) k_stream(const uint4 *p, size_t n16, unsigned *sink) {
    unsigned acc = 0;
    for (size_t i = (size_t)blockIdx.x * 1024 + threadIdx.x; i < n16; i += (size_t)gridDim.x * 1024) {
        uint4 v[8];
#pragma unroll
        for (int u = 0; u < 8; u++) v[u] = i + u * 128 < n16 ? __ldcs(p + i + u * 128) : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int u = 0; u < 8; u++) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    if (acc == 0x9e3779b9u) sink[0] = acc;
}

/* ---- ring: the stages with nothing to compute ---- */
template <int BT, int ST, int TB>
__global__ void __launch_bounds__(BT + 32, 1) k_ring(const uint4 *base, const size_t *off16, const size_t *n16,
                                                     int phases, unsigned long long *count, unsigned long long start,
                                                     unsigned *sink) {
    static_assert(BT % 32 == 0 && TB % 16 == 0, "whole warps, whole 16-byte units");
    extern __shared__ __align__(128) uint4 stage[]; /* ST x TB bytes */
    __shared__ __align__(8) ring_bars<ST> rb;
    ring_init<ST>(rb, BT / 32);
    constexpr size_t T16 = TB / 16;
    const int lane = threadIdx.x & 31;
    if (threadIdx.x >= BT) { /* the producer warp */
        if (lane != 0) return;
        unsigned it = 0;
        for (int p = 0; p < phases; p++) {
            const size_t lo = n16[p] * blockIdx.x / gridDim.x, hi = n16[p] * (blockIdx.x + 1) / gridDim.x;
            for (size_t c = lo; c < hi; c += T16, it++) {
                const int s = (int)(it % ST);
                if (it >= ST) mbar_wait(&rb.empty[s], (it / ST - 1) & 1); /* its last use freed */
                const unsigned bytes = (unsigned)(16 * (hi - c < T16 ? hi - c : T16));
                mbar_expect(&rb.full[s], bytes);
                bulk_copy(stage + (size_t)s * T16, base + off16[p] + c, bytes, &rb.full[s]);
            }
        }
        return;
    }
    unsigned acc = 0, it = 0;
    for (int p = 0; p < phases; p++) {
        const size_t lo = n16[p] * blockIdx.x / gridDim.x, hi = n16[p] * (blockIdx.x + 1) / gridDim.x;
        for (size_t c = lo; c < hi; c += T16, it++) { /* the producer's sequence of stages */
            const int s = (int)(it % ST);
            mbar_wait(&rb.full[s], (it / ST) & 1);
            const size_t n = hi - c < T16 ? hi - c : T16;
            const uint4 *q = stage + (size_t)s * T16;
            for (size_t i = threadIdx.x; i < n; i += BT) acc ^= q[i].x ^ q[i].y ^ q[i].z ^ q[i].w;
            __syncwarp();
            if (lane == 0) mbar_arrive(&rb.empty[s]);
        }
        if (p + 1 < phases) consumers_grid_sync(BT, count, start + (unsigned long long)(p + 1) * gridDim.x);
    }
    if (acc == 0x9e3779b9u) sink[0] = acc;
}

/* ---- chain: the products of the layers ---- */
enum { IN_NORM, IN_HEAD, IN_GEGLU }; /* how a phase builds its input from `in` */
struct chain_phase {
    const uint8_t *q;  /* M x nb blocks of 16 code bytes (q4_0, stored +8) */
    const __half *d;   /* M x nb scales */
    const float *in;   /* the values the input is built from */
    float *out;        /* M results */
    int M, K, in_kind; /* IN_GEGLU: in holds K gate values, then K up values */
};

#define CH_NB_MAX (21504 / 32)

/* Blocks of 32 values per stage: CB 16-byte code blocks and CB f16 scales,
 * one full barrier for both copies. CB is a multiple of 8 so the scales'
 * copy is whole 16-byte units; every slice starts at a row, and nb (K / 32:
 * 168, 256, 672) is a multiple of 8 too. */
template <int BT, int ST, int CB>
__global__ void __launch_bounds__(BT + 32, 1) k_chain(const chain_phase *ph, int phases, unsigned long long *count,
                                                      unsigned long long start, unsigned *sink) {
    static_assert(BT % 32 == 0 && CB % 8 == 0, "whole warps, whole 16-byte scale copies");
    extern __shared__ __align__(128) uint4 ring[]; /* ST x (CB code blocks, then CB scales) */
    constexpr int STAGE16 = CB + CB / 8;           /* 16-byte units per stage */
    __shared__ __align__(8) ring_bars<ST> rb;
    __shared__ __align__(16) int8_t xq[CH_NB_MAX * 32];
    __shared__ float xd[CH_NB_MAX], red[32];
    __shared__ int xs[CH_NB_MAX];
    __shared__ float acc[2 * 21504 / 128 + 8]; /* the block's rows: at most ceil(43008 / grid) */
    ring_init<ST>(rb, BT / 32);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (threadIdx.x >= BT) { /* the producer warp: every phase's slice, never a grid barrier */
        if (lane != 0) return;
        unsigned it = 0;
        for (int p = 0; p < phases; p++) {
            const chain_phase P = ph[p];
            const int nb = P.K / 32;
            const size_t r0 = (size_t)P.M * blockIdx.x / gridDim.x, r1 = (size_t)P.M * (blockIdx.x + 1) / gridDim.x;
            for (size_t c = r0 * nb; c < r1 * nb; c += CB, it++) {
                const int s = (int)(it % ST);
                if (it >= ST) mbar_wait(&rb.empty[s], (it / ST - 1) & 1);
                const unsigned n = (unsigned)(r1 * nb - c < (size_t)CB ? r1 * nb - c : (size_t)CB);
                uint4 *dst = ring + (size_t)s * STAGE16;
                mbar_expect(&rb.full[s], n * 16 + n * 2);
                bulk_copy(dst, P.q + c * 16, n * 16, &rb.full[s]);
                bulk_copy(dst + CB, P.d + c, n * 2, &rb.full[s]);
            }
        }
        return;
    }
    unsigned it = 0;
    float chk = 0;
    for (int p = 0; p < phases; p++) {
        const chain_phase P = ph[p];
        const int nb = P.K / 32;
        const size_t r0 = (size_t)P.M * blockIdx.x / gridDim.x, r1 = (size_t)P.M * (blockIdx.x + 1) / gridDim.x;
        /* the input's codes, built by every block from the outputs before
         * (L2 reads): an RMS norm's scale first where the phase asks */
        float scale = 1.0f;
        if (P.in_kind == IN_NORM) {
            float ss = 0;
            for (int i = threadIdx.x; i < P.K; i += BT) ss += P.in[i] * P.in[i];
            ss = warp_sum(ss);
            if (lane == 0) red[warp] = ss;
            asm volatile("bar.sync 1, %0;" ::"r"(BT) : "memory");
            ss = 0;
            for (int w = 0; w < BT / 32; w++) ss += red[w];
            scale = rsqrtf(ss / (float)P.K + 1e-6f);
        }
        for (int b = warp; b < nb; b += BT / 32) { /* a warp per 32-value block, a lane per value */
            const int i = b * 32 + lane;
            float v = P.in[i] * scale;
            if (P.in_kind == IN_GEGLU) v = gelu_tanh_f(P.in[i]) * P.in[P.K + i];
            const float amax = warp_max(fabsf(v));
            const float dx = amax / 127.0f;
            const int code = dx > 0 ? __float2int_rn(v / dx) : 0;
            xq[i] = (int8_t)code;
            const int sum = warp_isum(code);
            if (lane == 0) xd[b] = dx, xs[b] = sum;
        }
        for (size_t r = r0 + threadIdx.x; r < r1; r += BT) acc[r - r0] = 0;
        asm volatile("bar.sync 1, %0;" ::"r"(BT) : "memory");
        /* the stages of the slice: warp w takes blocks w 32 + lane, + BT, ...
         * of each stage; 32 consecutive blocks span at most two rows (nb >=
         * 168), so a warp's sums go to two rows by two masked warp sums */
        const size_t lo = r0 * nb, hi = r1 * nb;
        for (size_t c = lo; c < hi; c += CB, it++) {
            const int s = (int)(it % ST);
            mbar_wait(&rb.full[s], (it / ST) & 1);
            const int n = (int)(hi - c < (size_t)CB ? hi - c : (size_t)CB);
            const uint4 *qs = ring + (size_t)s * STAGE16;
            const __half *ds = (const __half *)(qs + CB);
            for (int i0 = warp * 32; i0 < n; i0 += BT) {
                const int i = i0 + lane;
                /* one 32-bit division per warp and round (M nb < 2^31) */
                const unsigned g0 = (unsigned)(c + (size_t)i0), row_a = g0 / (unsigned)nb;
                int col = (int)(g0 - row_a * (unsigned)nb) + lane, row = (int)row_a;
                if (col >= nb) col -= nb, row++;
                float val = 0;
                if (i < n) {
                    const uint4 w = qs[i];
                    const int4 x0 = *(const int4 *)(xq + col * 32), x1 = *(const int4 *)(xq + col * 32 + 16);
                    const int dot = mv_block_dot<1>(w, w, x0, x1, xs[col]); /* gem's q4_0 block dot */
                    val = __half2float(ds[i]) * xd[col] * (float)dot;
                }
                const float a = warp_sum(row == (int)row_a ? val : 0.0f), bsum = warp_sum(row == (int)row_a ? 0.0f : val);
                if (lane == 0) {
                    atomicAdd(&acc[row_a - r0], a);
                    if (bsum != 0.0f) atomicAdd(&acc[row_a + 1 - r0], bsum);
                }
            }
            __syncwarp();
            if (lane == 0) mbar_arrive(&rb.empty[s]);
        }
        asm volatile("bar.sync 1, %0;" ::"r"(BT) : "memory");
        for (size_t r = r0 + threadIdx.x; r < r1; r += BT) P.out[r] = acc[r - r0], chk += acc[r - r0];
        if (p + 1 < phases) consumers_grid_sync(BT, count, start + (unsigned long long)(p + 1) * gridDim.x);
    }
    if (chk == 1234.5f) sink[0] = 1;
}

int main(int argc, char **argv) {
    const int layers = argc > 1 ? atoi(argv[1]) : 60, reps = argc > 2 ? atoi(argv[2]) : 10;
    if (layers < 1 || layers > 60 || reps < 1) {
        fprintf(stderr, "usage: cuda_ring_probe [LAYERS 1-60] [REPS >= 1]\n");
        return 2;
    }
    int dev = 0, sms = 0, coop = 0;
    PK(cudaGetDevice(&dev));
    PK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    PK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev));
    if (!coop || 2 * 21504 / sms + 1 > 2 * 21504 / 128 + 8) {
        fprintf(stderr, "cuda_ring_probe: needs cooperative launches and at least 128 multiprocessors\n");
        return 1;
    }
    cudaDeviceProp prop;
    PK(cudaGetDeviceProperties(&prop, dev));
    /* the 31B's sliding-layer products: q/k/v (8192 + 4096 + 4096 rows of
     * 5376), o (5376 of 8192), gate/up (2 x 21504 of 5376), down (5376 of
     * 21504); each matrix its codes then its scales, 16-byte aligned */
    const int shape[4][3] = {{16384, 5376, IN_NORM}, {5376, 8192, IN_HEAD}, {43008, 5376, IN_NORM}, {5376, 21504, IN_GEGLU}};
    size_t layer_bytes = 0;
    for (const auto &s : shape) layer_bytes += (size_t)s[0] * (s[1] / 32) * 18;
    const size_t wbytes = layer_bytes * layers;
    uint8_t *w;
    PK(cudaMalloc(&w, wbytes));
    PK(cudaMemset(w, 0x11, wbytes)); /* f16 scales 0x1111: small, finite */
    /* outputs: one buffer per product kind, reused by every layer; inputs
     * of the first q/k/v: h */
    float *h, *out[4];
    PK(cudaMalloc(&h, 5376 * sizeof(float)));
    std::vector<float> hv(5376);
    for (int i = 0; i < 5376; i++) hv[i] = (float)((i * 37) % 101 - 50) / 25.0f;
    PK(cudaMemcpy(h, hv.data(), hv.size() * sizeof(float), cudaMemcpyHostToDevice));
    for (int k = 0; k < 4; k++) {
        PK(cudaMalloc(&out[k], (size_t)shape[k][0] * sizeof(float)));
        PK(cudaMemset(out[k], 0, (size_t)shape[k][0] * sizeof(float)));
    }
    std::vector<chain_phase> ph;
    std::vector<size_t> off16, n16;
    size_t at = 0;
    for (int l = 0; l < layers; l++)
        for (int k = 0; k < 4; k++) {
            chain_phase P;
            const size_t blocks = (size_t)shape[k][0] * (shape[k][1] / 32);
            P.q = w + at;
            P.d = (const __half *)(w + at + blocks * 16);
            off16.push_back(at / 16);
            n16.push_back(blocks * 18 / 16);
            at += blocks * 18;
            P.M = shape[k][0];
            P.K = shape[k][1];
            P.in_kind = shape[k][2];
            P.in = k == 0 ? (l == 0 ? h : out[3]) : out[k - 1];
            P.out = out[k];
            ph.push_back(P);
        }
    const int phases = (int)ph.size();
    chain_phase *dph;
    size_t *doff, *dn, *dall;
    const size_t all16[2] = {0, wbytes / 16};
    unsigned long long *count, next = 0;
    unsigned *sink;
    PK(cudaMalloc(&dph, sizeof(chain_phase) * phases));
    PK(cudaMemcpy(dph, ph.data(), sizeof(chain_phase) * phases, cudaMemcpyHostToDevice));
    PK(cudaMalloc(&doff, sizeof(size_t) * phases));
    PK(cudaMalloc(&dn, sizeof(size_t) * phases));
    PK(cudaMalloc(&dall, sizeof all16));
    PK(cudaMemcpy(doff, off16.data(), sizeof(size_t) * phases, cudaMemcpyHostToDevice));
    PK(cudaMemcpy(dn, n16.data(), sizeof(size_t) * phases, cudaMemcpyHostToDevice));
    PK(cudaMemcpy(dall, all16, sizeof all16, cudaMemcpyHostToDevice));
    PK(cudaMalloc(&count, sizeof *count));
    PK(cudaMemset(count, 0, sizeof *count));
    PK(cudaMalloc(&sink, sizeof *sink));
    cudaStream_t st;
    PK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    const double gb = (double)wbytes / 1e9;
    printf("cuda_ring_probe: %s, %d SMs; %d layers x 4 products (31B sliding-layer shapes, q4_0), %.2f GB per run, "
           "median of %d\n",
           prop.name, sms, layers, gb, reps);
    const float ts = median_ms(reps, st, [&] {
        k_stream<<<sms * 16, 128, 0, st>>>((const uint4 *)w, wbytes / 16, sink);
    });
    printf("stream  one launch, blocks of 16 KB              %8.3f ms %7.1f GB/s\n", ts, gb / (ts * 1e-3));
#define RING_ROW(BT, ST, TB)                                                                                       \
    {                                                                                                              \
        PK(cudaFuncSetAttribute(k_ring<BT, ST, TB>, cudaFuncAttributeMaxDynamicSharedMemorySize, ST * TB));        \
        const float t1 = median_ms(reps, st, [&] {                                                                 \
            coop_launch(k_ring<BT, ST, TB>, (unsigned)sms, BT + 32, ST * TB, st, (const uint4 *)w, (const size_t *)dall,      \
                        (const size_t *)dall + 1, 1, count, next, sink);                                           \
        });                                                                                                        \
        const float tp = median_ms(reps, st, [&] {                                                                 \
            coop_launch(k_ring<BT, ST, TB>, (unsigned)sms, BT + 32, ST * TB, st, (const uint4 *)w, (const size_t *)doff,      \
                        (const size_t *)dn, phases, count, next, sink);                                            \
            next += (unsigned long long)(phases - 1) * (unsigned)sms;                                              \
        });                                                                                                        \
        printf("ring    %4d consumers, %2d x %2d KB stages         single %8.3f ms %7.1f GB/s, phases %8.3f ms "     \
               "%7.1f GB/s (%3.0f%% of stream), %5.2f us per boundary\n",                                           \
               BT, ST, TB / 1024, t1, gb / (t1 * 1e-3), tp, gb / (tp * 1e-3), 100 * ts / tp,                       \
               (tp - t1) * 1e3 / (phases - 1));                                                                    \
    }
    RING_ROW(256, 4, 32768)
    RING_ROW(256, 6, 32768)
    RING_ROW(256, 12, 16384)
    RING_ROW(512, 6, 32768)
#undef RING_ROW
#define CHAIN_ROW(BT, ST, CB)                                                                                      \
    {                                                                                                              \
        const int smem = ST * (CB * 16 + CB * 2);                                                                  \
        PK(cudaFuncSetAttribute(k_chain<BT, ST, CB>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));          \
        cudaFuncAttributes fa;                                                                                     \
        PK(cudaFuncGetAttributes(&fa, k_chain<BT, ST, CB>));                                                       \
        const float tc = median_ms(reps, st, [&] {                                                                 \
            coop_launch(k_chain<BT, ST, CB>, (unsigned)sms, BT + 32, (size_t)smem, st, (const chain_phase *)dph, phases,     \
                        count, next, sink);                                                                        \
            next += (unsigned long long)(phases - 1) * (unsigned)sms;                                              \
        });                                                                                                        \
        printf("chain   %4d consumers, %2d x %2d KB stages (%3d regs, %3zu KB static) %8.3f ms %7.1f GB/s (%3.0f%% " \
               "of stream), %6.2f us per layer\n",                                                                 \
               BT, ST, CB * 18 / 1024, fa.numRegs, fa.sharedSizeBytes / 1024, tc, gb / (tc * 1e-3), 100 * ts / tc,  \
               tc * 1e3 / layers);                                                                                 \
    }
    CHAIN_ROW(256, 4, 1792)
    CHAIN_ROW(256, 6, 1024)
    CHAIN_ROW(512, 6, 1024)
    CHAIN_ROW(512, 8, 768)
#undef CHAIN_ROW
    PK(cudaFree(w));
    PK(cudaFree(h));
    for (int k = 0; k < 4; k++) PK(cudaFree(out[k]));
    PK(cudaFree(dph));
    PK(cudaFree(doff));
    PK(cudaFree(dn));
    PK(cudaFree(dall));
    PK(cudaFree(count));
    PK(cudaFree(sink));
    PK(cudaStreamDestroy(st));
    return 0;
}
