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
 *           memory, a warp per row, outputs stored; the rows go in chunks
 *           that each block's producer claims at run time, so the blocks
 *           stay balanced; gate and up rows come as pairs in one stage and
 *           leave as gelu(gate) * up. After each barrier every block builds
 *           the next product's codes itself from the outputs before it
 *           (q/k/v and gate/up: an RMS norm of the 5376 values; o: the
 *           first 8192 q/k/v outputs, standing in for attention; down: the
 *           21504 gated values), so no small kernel and no extra barrier is
 *           left; "no build" skips that to show what it costs, "no copy"
 *           copies nothing (the consumers' own bound);
 *   group   the chain with each stage dealt to a group of warps that split
 *           its rows, instead of every warp stepping through every stage.
 *
 *   build/experiments/cuda_ring_probe [LAYERS] [REPS]   (make -C experiments/cuda ring)
 *
 * Output: median ms of REPS runs after a warm-up, GB/s of the bytes read,
 * and for chain the time per layer, to set against gem's ~92 us. The
 * outputs' values mean nothing (bytes are a memset pattern); the checksum
 * sink keeps the loads alive. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <vector>

#include "cuda_persist.h" /* mbarriers, bulk copies, the consumers' grid barrier */

#define PROBE_NAME "cuda_ring_probe"
#include "cuda_probe_util.h"

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
                                                     int phases, unsigned long long *count, unsigned *sink) {
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
        if (p + 1 < phases) consumers_grid_sync(BT, count);
    }
    if (acc == 0x9e3779b9u) sink[0] = acc;
}

/* ---- chain: the products of the layers ---- */
enum { IN_NORM, IN_HEAD }; /* how a phase builds its input from `in`: RMS norm or as it is */
struct chain_phase {
    const uint8_t *q, *q2; /* M x nb blocks of 16 code bytes (q4_0, stored +8); q2: the up rows of a pair */
    const __half *d, *d2;  /* M x nb scales */
    const float *in;       /* the values the input is built from */
    float *out;            /* M results: with q2, gelu(q row) * (q2 row) */
    int M, K, in_kind;
    int rows, chunks; /* rows per chunk (rows x nb x 18 bytes, twice with q2, fit a stage), ceil(M / rows) */
};

#define CH_K_MAX 21504
#define CH_NB_MAX (CH_K_MAX / 32)

/* The phase's input codes, built by every block from the outputs before
 * it (L2 reads): every load issued before any use (J float4 per thread),
 * an RMS norm's scale where the phase asks, then one 32-value block per 8
 * consecutive threads (3 shuffles for its max, 3 for its code sum). The
 * codes go to two planes, values 0-15 and 16-31 of each block, so the
 * dots' 16-byte reads of consecutive blocks meet no bank conflict. */
template <int BT>
__device__ __forceinline__ void chain_build(const chain_phase &P, int4 *xlo, int4 *xhi, float *xd, int *xs,
                                            float *red) {
    constexpr int J = (CH_K_MAX / 4 + BT - 1) / BT;
    const int n4 = P.K / 4, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const float4 *g4 = (const float4 *)P.in;
    float4 v[J];
#pragma unroll
    for (int k = 0; k < J; k++) {
        const int j = threadIdx.x + k * BT;
        v[k] = j < n4 ? __ldcg(g4 + j) : make_float4(0, 0, 0, 0); /* L2: other blocks wrote it */
    }
    float scale = 1.0f;
    if (P.in_kind == IN_NORM) {
        float ss = 0;
#pragma unroll
        for (int k = 0; k < J; k++) ss += v[k].x * v[k].x + v[k].y * v[k].y + v[k].z * v[k].z + v[k].w * v[k].w;
        ss = warp_sum(ss);
        if (lane == 0) red[warp] = ss;
        asm volatile("bar.sync 1, %0;" ::"r"(BT) : "memory");
        ss = 0;
        for (int w = 0; w < BT / 32; w++) ss += red[w];
        scale = rsqrtf(ss / (float)P.K + 1e-6f);
    }
#pragma unroll
    for (int k = 0; k < J; k++) {
        if (k * BT >= n4) break; /* the same for every thread: no shuffle left half done */
        const int j = threadIdx.x + k * BT, b = j >> 3, q = j & 7; /* n4 is a multiple of 8: whole groups */
        const codes8 c = block8_codes(make_float4(v[k].x * scale, v[k].y * scale, v[k].z * scale, v[k].w * scale));
        if (j < n4) {
            ((int *)(q < 4 ? xlo : xhi))[b * 4 + (q & 3)] = c.packed;
            if (q == 0) xd[b] = c.d, xs[b] = c.sum;
        }
    }
}

/* The producer (lane 0 of the warp past the consumers) of k_chain and
 * k_group: every phase's chunks, claimed CG at a time with the next claim
 * in flight, into the ring's stages in order (COPY 0: no bytes, the
 * stages' old contents); a phase ends with `marks` end marks (tag -1), one
 * per consumer group. */
template <int ST, int TB, int CG, int COPY>
__device__ void chain_produce(const chain_phase *ph, int phases, int *claim, ring_bars<ST> &rb, int *tag,
                              uint4 *ring, int marks) {
    unsigned it = 0;
    for (int p = 0; p < phases; p++) {
        const chain_phase P = ph[p];
        const int nb = P.K / 32;
        int base = atomicAdd(&claim[p], CG), k = 0, next = 0;
        for (;; it++) {
            if (k == 0) next = base < P.chunks ? atomicAdd(&claim[p], CG) : 0;
            const int c = base + k;
            if (c >= P.chunks) {
                for (int e = 0; e < marks; e++, it++) {
                    const int s = (int)(it % ST);
                    if (it >= ST) mbar_wait(&rb.empty[s], (it / ST - 1) & 1);
                    tag[s] = -1;
                    mbar_arrive(&rb.full[s]); /* release: the tag is seen */
                }
                break;
            }
            const int s = (int)(it % ST);
            if (it >= ST) mbar_wait(&rb.empty[s], (it / ST - 1) & 1);
            tag[s] = c;
            const size_t b0 = (size_t)c * P.rows * nb;
            const unsigned n = (unsigned)(min(P.rows, P.M - c * P.rows) * nb);
            uint4 *dst = ring + (size_t)s * (TB / 16);
            if (++k == CG) k = 0, base = next;
            if (!COPY) {
                mbar_arrive(&rb.full[s]);
                continue;
            }
            mbar_expect(&rb.full[s], P.q2 ? 2 * n * 18 : n * 18);
            bulk_copy(dst, P.q + b0 * 16, n * 16, &rb.full[s]);
            if (P.q2) { /* stage: gate codes, up codes, gate scales, up scales */
                bulk_copy(dst + n, P.q2 + b0 * 16, n * 16, &rb.full[s]);
                bulk_copy(dst + 2 * n, P.d + b0, n * 2, &rb.full[s]);
                bulk_copy(dst + 2 * n + n / 8, P.d2 + b0, n * 2, &rb.full[s]);
            } else {
                bulk_copy(dst + n, P.d + b0, n * 2, &rb.full[s]);
            }
        }
    }
}

/* Chunks of whole rows, claimed at run time: a block's producer takes the
 * phase's next CG chunks (atomicAdd on the phase's counter, the next claim
 * in flight while it copies these) whenever a stage is free, so a
 * multiprocessor that streams faster takes more chunks instead of waiting
 * at every barrier for the slowest; a claim past the end puts an end mark
 * (tag -1) through the ring instead of bytes. A chunk's codes, then its
 * scales, fill a stage; one warp computes two whole rows (lanes over their
 * blocks, the activation codes read once for both, a warp sum each, no
 * atomics), the stage's row pairs dealt to the warps in turn across
 * stages so a warp without one goes on to the next stage.
 * BUILD 0 skips the input build; COPY 0 copies no bytes (the consumers
 * compute on whatever the stages hold): rows that time the parts. */
template <int BT, int ST, int TB, int BUILD, int COPY, int CG>
__global__ void __launch_bounds__(BT + 32, 1) k_chain(const chain_phase *ph, int phases, int *claim,
                                                      unsigned long long *count, unsigned *sink) {
    static_assert(BT % 32 == 0 && TB % 16 == 0, "whole warps, whole 16-byte units");
    constexpr int W = BT / 32;
    extern __shared__ __align__(128) uint4 ring[]; /* ST x TB bytes */
    __shared__ __align__(8) ring_bars<ST> rb;
    __shared__ int4 xlo[CH_NB_MAX], xhi[CH_NB_MAX];
    __shared__ float xd[CH_NB_MAX], red[32];
    __shared__ int xs[CH_NB_MAX], tag[ST];
    ring_init<ST>(rb, W);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (threadIdx.x >= BT) { /* the producer warp: every phase, never a grid barrier */
        if (lane == 0) chain_produce<ST, TB, CG, COPY>(ph, phases, claim, rb, tag, ring, 1);
        return;
    }
    unsigned it = 0;
    int dealt = 0; /* rows dealt so far, mod W: where the next stage's first row goes */
    float chk = 0;
    for (int p = 0; p < phases; p++) {
        const chain_phase P = ph[p];
        const int nb = P.K / 32;
        if (BUILD) chain_build<BT>(P, xlo, xhi, xd, xs, red);
        asm volatile("bar.sync 1, %0;" ::"r"(BT) : "memory");
        for (;; it++) {
            const int s = (int)(it % ST);
            mbar_wait(&rb.full[s], (it / ST) & 1);
            const int c = tag[s];
            if (c >= 0) {
                const int row0 = c * P.rows, nrows = min(P.rows, P.M - row0);
                const int n = nrows * nb, pair = P.q2 != NULL;
                const uint4 *qs = ring + (size_t)s * (TB / 16);
                const __half *ds = (const __half *)(qs + (pair ? 2 * n : n)); /* the up scales n on */
                /* an item: two rows whose dots share the activation reads
                 * (rows r, r + 1, or the gate and up rows of pair r) */
                const int items = pair ? nrows : (nrows + 1) / 2;
                for (int i = ((warp - dealt) % W + W) % W; i < items; i += W) {
                    const int ra = pair ? i : 2 * i, oa = ra * nb, ob = pair ? n + oa : oa + nb;
                    const bool two = pair || ra + 1 < nrows;
                    float a = 0, u = 0;
                    q4_pair_dot(qs, ds, oa, ob, two, 0, nb, xlo, xhi, xd, xs, a, u);
                    a = warp_sum(a);
                    u = warp_sum(u);
                    if (lane == 0) {
                        if (pair) a = gelu_tanh_f(a) * u, P.out[row0 + ra] = a, chk += a;
                        else {
                            P.out[row0 + ra] = a, chk += a;
                            if (two) P.out[row0 + ra + 1] = u, chk += u;
                        }
                    }
                }
                dealt = (dealt + items) % W;
            }
            __syncwarp();
            if (lane == 0) mbar_arrive(&rb.empty[s]);
            if (c < 0) {
                it++;
                break;
            }
        }
        if (p + 1 < phases) consumers_grid_sync(BT, count);
    }
    if (chk == 1234.5f) sink[0] = 1;
}

/* The same chain with the stages dealt to groups of GW consumer warps (the
 * stage's index mod the group count): k_chain's every warp waited for and
 * stepped through every stage, most of them to find no row there, and that
 * bookkeeping was a third of its instructions (ncu source counters). Here a
 * stage's GW warps all work on it: each takes a segment of every row's
 * blocks, their partial sums meet in shared memory at the group's named
 * barrier (double buffered, so one barrier per stage), and a warp per row
 * pair finishes. The producer ends a phase with one end mark per group. */
#define GRP_ROWS 16 /* dot rows per stage at most (rows, or twice the pairs) */
template <int BT, int ST, int TB, int GW, int COPY>
__global__ void __launch_bounds__(BT + 32, 1) k_group(const chain_phase *ph, int phases, int *claim,
                                                      unsigned long long *count, unsigned *sink) {
    constexpr int W = BT / 32, G = W / GW, CG = 2;
    static_assert(BT % 32 == 0 && TB % 16 == 0 && W % GW == 0 && ST % G == 0 && GW >= 2 && G <= 14,
                  "whole warps and groups, stages a multiple of the groups, named barriers 2..15");
    extern __shared__ __align__(128) uint4 ring[]; /* ST x TB bytes */
    __shared__ __align__(8) ring_bars<ST> rb;
    __shared__ int4 xlo[CH_NB_MAX], xhi[CH_NB_MAX];
    __shared__ float xd[CH_NB_MAX], red[32], part[2][G][GRP_ROWS][GW];
    __shared__ int xs[CH_NB_MAX], tag[ST];
    ring_init<ST>(rb, GW);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (threadIdx.x >= BT) { /* the producer warp: an end mark per group */
        if (lane == 0) chain_produce<ST, TB, CG, COPY>(ph, phases, claim, rb, tag, ring, G);
        return;
    }
    const int g = warp / GW, wi = warp % GW;
    unsigned it = (unsigned)g; /* this group's stages: it = g mod G */
    int buf = 0;
    float chk = 0;
    for (int p = 0; p < phases; p++) {
        const chain_phase P = ph[p];
        const int nb = P.K / 32, b0 = wi * nb / GW, b1 = (wi + 1) * nb / GW; /* this warp's segment */
        chain_build<BT>(P, xlo, xhi, xd, xs, red);
        asm volatile("bar.sync 1, %0;" ::"r"(BT) : "memory");
        for (;; it += G) {
            const int s = (int)(it % ST);
            mbar_wait(&rb.full[s], (it / ST) & 1);
            const int c = tag[s];
            if (c < 0) {
                __syncwarp();
                if (lane == 0) mbar_arrive(&rb.empty[s]);
                it += G;
                break;
            }
            const int row0 = c * P.rows, nrows = min(P.rows, P.M - row0);
            const int n = nrows * nb, pair = P.q2 != NULL;
            const uint4 *qs = ring + (size_t)s * (TB / 16);
            const __half *ds = (const __half *)(qs + (pair ? 2 * n : n));
            const int items = pair ? nrows : (nrows + 1) / 2;
            for (int i = 0; i < items; i++) {
                const int ra = pair ? i : 2 * i, oa = ra * nb, ob = pair ? n + oa : oa + nb;
                const bool two = pair || ra + 1 < nrows;
                float a = 0, u = 0;
                q4_pair_dot(qs, ds, oa, ob, two, b0, b1, xlo, xhi, xd, xs, a, u);
                a = warp_sum(a);
                u = warp_sum(u);
                if (lane == 0) part[buf][g][2 * i][wi] = a, part[buf][g][2 * i + 1][wi] = u;
            }
            __syncwarp();
            if (lane == 0) mbar_arrive(&rb.empty[s]); /* the stage's bytes are read */
            asm volatile("bar.sync %0, %1;" ::"r"(2 + g), "r"(GW * 32) : "memory");
            for (int i = wi; i < items; i += GW) { /* the partial sums of the group's warps */
                if (lane == 0) {
                    float a = 0, u = 0;
                    for (int v = 0; v < GW; v++) a += part[buf][g][2 * i][v], u += part[buf][g][2 * i + 1][v];
                    const int ra = pair ? i : 2 * i;
                    if (pair) a = gelu_tanh_f(a) * u, P.out[row0 + ra] = a, chk += a;
                    else {
                        P.out[row0 + ra] = a, chk += a;
                        if (ra + 1 < nrows) P.out[row0 + ra + 1] = u, chk += u;
                    }
                }
            }
            buf ^= 1;
        }
        if (p + 1 < phases) consumers_grid_sync(BT, count);
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
    if (!coop) {
        fprintf(stderr, "cuda_ring_probe: needs cooperative launches\n");
        return 1;
    }
    cudaDeviceProp prop;
    PK(cudaGetDeviceProperties(&prop, dev));
    /* the 31B's sliding-layer products: q/k/v (8192 + 4096 + 4096 rows of
     * 5376), o (5376 of 8192), gate/up (2 x 21504 of 5376), down (5376 of
     * 21504); each matrix its codes then its scales, 16-byte aligned */
    /* gate/up: 21504 pairs of rows (gate, up: two matrices) */
    const int shape[4][4] = {{16384, 5376, IN_NORM, 0}, {5376, 8192, IN_HEAD, 0}, {21504, 5376, IN_NORM, 1},
                             {5376, 21504, IN_HEAD, 0}};
    size_t layer_bytes = 0;
    for (const auto &s : shape) layer_bytes += (size_t)s[0] * (s[1] / 32) * 18 * (s[3] ? 2 : 1);
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
            chain_phase P = {};
            const size_t blocks = (size_t)shape[k][0] * (shape[k][1] / 32), mats = shape[k][3] ? 2 : 1;
            P.q = w + at;
            P.d = (const __half *)(w + at + blocks * 16);
            if (mats == 2) {
                P.q2 = w + at + blocks * 18;
                P.d2 = (const __half *)(w + at + blocks * 18 + blocks * 16);
            }
            off16.push_back(at / 16);
            n16.push_back(mats * blocks * 18 / 16);
            at += mats * blocks * 18;
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
    unsigned long long *count;
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
                        (const size_t *)dall + 1, 1, count, sink);                                                 \
        });                                                                                                        \
        const float tp = median_ms(reps, st, [&] {                                                                 \
            coop_launch(k_ring<BT, ST, TB>, (unsigned)sms, BT + 32, ST * TB, st, (const uint4 *)w, (const size_t *)doff,      \
                        (const size_t *)dn, phases, count, sink);                                                  \
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
    int *claim;
    PK(cudaMalloc(&claim, sizeof(int) * phases));
    /* a chunk: the most whole rows whose codes and scales fit a stage */
    auto set_rows = [&](int tb) {
        for (auto &P : ph) {
            P.rows = tb / (P.K / 32 * 18 * (P.q2 ? 2 : 1));
            P.chunks = (P.M + P.rows - 1) / P.rows;
        }
        PK(cudaMemcpy(dph, ph.data(), sizeof(chain_phase) * phases, cudaMemcpyHostToDevice));
    };
#define CHAIN_ROW(BT, ST, TB, BUILD, COPY, CG)                                                                               \
    {                                                                                                              \
        set_rows(TB);                                                                                              \
        PK(cudaFuncSetAttribute(k_chain<BT, ST, TB, BUILD, COPY, CG>, cudaFuncAttributeMaxDynamicSharedMemorySize, ST * TB)); \
        cudaFuncAttributes fa;                                                                                     \
        PK(cudaFuncGetAttributes(&fa, k_chain<BT, ST, TB, BUILD, COPY, CG>));                                                \
        const float tc = median_ms(reps, st, [&] {                                                                 \
            PK(cudaMemsetAsync(claim, 0, sizeof(int) * phases, st));                                               \
            coop_launch(k_chain<BT, ST, TB, BUILD, COPY, CG>, (unsigned)sms, BT + 32, (size_t)(ST * TB), st,                 \
                        (const chain_phase *)dph, phases, claim, count, sink);                                     \
        });                                                                                                        \
        printf("chain   %4d consumers, %2d x %2d KB stages, %d per claim%s (%3d regs, %3zu KB static) %8.3f ms %7.1f GB/s (%3.0f%% " \
               "of stream), %6.2f us per layer\n",                                                                 \
               BT, ST, TB / 1024, CG, BUILD ? (COPY ? "                   " : ", no copy          ") : (COPY ? ", no build         " : ", no build, no copy"), fa.numRegs, fa.sharedSizeBytes / 1024, tc,  \
               gb / (tc * 1e-3), 100 * ts / tc, tc * 1e3 / layers);                                                \
    }
    CHAIN_ROW(512, 8, 24576, 1, 1, 2)
    CHAIN_ROW(512, 8, 24576, 1, 0, 2)
    CHAIN_ROW(512, 8, 24576, 0, 0, 2)
#undef CHAIN_ROW
#define GROUP_ROW(BT, ST, TB, GW, COPY)                                                                            \
    {                                                                                                              \
        set_rows(TB);                                                                                              \
        PK(cudaFuncSetAttribute(k_group<BT, ST, TB, GW, COPY>, cudaFuncAttributeMaxDynamicSharedMemorySize, ST * TB)); \
        cudaFuncAttributes fa;                                                                                     \
        PK(cudaFuncGetAttributes(&fa, k_group<BT, ST, TB, GW, COPY>));                                             \
        const float tc = median_ms(reps, st, [&] {                                                                 \
            PK(cudaMemsetAsync(claim, 0, sizeof(int) * phases, st));                                               \
            coop_launch(k_group<BT, ST, TB, GW, COPY>, (unsigned)sms, BT + 32, (size_t)(ST * TB), st,              \
                        (const chain_phase *)dph, phases, claim, count, sink);                                     \
        });                                                                                                        \
        printf("group   %4d consumers, %2d x %2d KB stages, groups of %2d warps%s (%3d regs, %3zu KB static) %8.3f ms " \
               "%7.1f GB/s (%3.0f%% of stream), %6.2f us per layer\n",                                              \
               BT, ST, TB / 1024, GW, COPY ? "         " : ", no copy", fa.numRegs, fa.sharedSizeBytes / 1024, tc,  \
               gb / (tc * 1e-3), 100 * ts / tc, tc * 1e3 / layers);                                                \
    }
    GROUP_ROW(512, 8, 24576, 2, 1)
    GROUP_ROW(512, 16, 12288, 2, 1)
    GROUP_ROW(512, 16, 12288, 4, 1)
    GROUP_ROW(256, 16, 12288, 2, 1)
    GROUP_ROW(512, 8, 24576, 2, 0)
    GROUP_ROW(512, 16, 12288, 2, 0)
    GROUP_ROW(256, 16, 12288, 2, 0)
#undef GROUP_ROW
    PK(cudaFree(w));
    PK(cudaFree(h));
    for (int k = 0; k < 4; k++) PK(cudaFree(out[k]));
    PK(cudaFree(dph));
    PK(cudaFree(doff));
    PK(cudaFree(dn));
    PK(cudaFree(dall));
    PK(cudaFree(count));
    PK(cudaFree(claim));
    PK(cudaFree(sink));
    PK(cudaStreamDestroy(st));
    return 0;
}
