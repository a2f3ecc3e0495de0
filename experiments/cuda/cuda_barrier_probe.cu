/* What one boundary between two one-token products costs on this GPU,
 * measured on synthetic bytes: the question before a persistent decode
 * kernel. Issue 6's 190 tok/s leaves ~16 us per 31B layer for its four
 * product boundaries and every small kernel together; gem's step spends
 * ~30 us there (bench/results/cuda-boundary-bounds-2026-12-04.json).
 *
 *   stream   one kernel streaming every phase's bytes, no boundary, at
 *            its own occupancy: the rate `launch` is compared with;
 *   stream-p the same on the persistent kernels' grid (they hold more
 *            registers, so fewer blocks per SM): the rate the barrier
 *            variants are compared with;
 *   launch   one kernel per phase, blocks of one 16 KB round each (gem's
 *            one-token products: blocks of one round of ~24 KB), chained by
 *            programmatic dependent launch and replayed as a CUDA graph:
 *            gem's decode step today;
 *   barrier  one persistent kernel (every block resident: a cooperative
 *            launch) streaming the phases with a grid barrier between two
 *            (one atomic per block, thread 0 polling with relaxed loads and
 *            a short sleep, one acquire fence after);
 *   early    the same, each thread issuing its first round of the next
 *            phase after its block arrived and before it waits (weights do
 *            not depend on the phase before);
 *   cg       the barrier of cooperative_groups' grid.sync(), for reference.
 *   bal      (after the shapes) the persistent kernel without the two
 *            confounds of `barrier`: one block per multiprocessor, equal
 *            slices of every phase (see k_bal), by threads and loads in
 *            flight, with and without the early first round.
 *   work     (last) one phase on bal's grid with dp4a work after each
 *            round's loads: whole rounds against half rounds pipelined
 *            (see k_work: why a persistent layer kernel's phases
 *            streamed slower than k_bal).
 * Variants run in the order listed, then in reverse, REPS times each way;
 * each prints the median, GB/s and the cost per boundary, (t - t_base) /
 * (phases - 1) against its stream. To calibrate: the decode step's four
 * products skipping their waits gained ~1.9 us per product boundary
 * (bench/results/cuda-boundary-bounds-2026-12-04.json), which `launch`
 * should come near. A persistent layer would also need barriers where no
 * product is (norms, rope, attention, combine): this counts product
 * boundaries only. Then the launch chain by block shape (round size,
 * blocks per multiprocessor and load flavour: nc as gem's weight loads,
 * cs, nc.L1::no_allocate), each against one launch of its own shape.
 * On the H200 (bench/results/cuda-probe-xs-2026-12-04.json): launch 1.15 us
 * per boundary, barrier 4.4, early 2.9, cg 3.8. Its shape rows were taken
 * with plain loads, which the compiler did not keep in flight as asked (34
 * registers whatever the round size): the shapes now load through
 * volatile asm and print their registers.
 *
 *   build/experiments/cuda_barrier_probe [PHASE_MB,...] [LAYERS] [REPS]   (make -C experiments/cuda barrier)
 *
 * Defaults: the 31B Q4_0 sliding layer's products (q/k/v 49.5 MB, o 24.8,
 * gate/up 130, down 65) times 60 layers, 10 runs. The checksum sink keeps
 * the loads alive; its value means nothing. A speed probe, not part of gem:
 * its only invariant is that every variant reads the same bytes. */
#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#define PROBE_NAME "cuda_barrier_probe"
#include "cuda_probe_util.h"

#define THREADS 128
#define UNROLL 8
#define CHUNK ((size_t)THREADS * UNROLL * 16) /* bytes of one block round: 16 KB */


/* One block round: UNROLL 16-byte loads per thread, all issued before use. */
struct round_regs {
    uint4 v[UNROLL];
};
__device__ __forceinline__ void round_load(const uint4 *base, size_t chunk, round_regs &r) {
    const uint4 *p = base + chunk * (CHUNK / 16) + threadIdx.x;
#pragma unroll
    for (int u = 0; u < UNROLL; u++) r.v[u] = __ldcs(p + u * THREADS); /* streamed: no reuse */
}
__device__ __forceinline__ unsigned round_fold(const round_regs &r, unsigned acc) {
#pragma unroll
    for (int u = 0; u < UNROLL; u++) acc ^= r.v[u].x ^ r.v[u].y ^ r.v[u].z ^ r.v[u].w;
    return acc;
}
/* chunks first, first + stride, ... below n of the phase at base */
__device__ __forceinline__ unsigned stream_chunks(const uint4 *base, size_t n, size_t first, size_t stride,
                                                  unsigned acc) {
    for (size_t c = first; c < n; c += stride) {
        round_regs r;
        round_load(base, c, r);
        acc = round_fold(r, acc);
    }
    return acc;
}

__global__ void __launch_bounds__(THREADS) k_stream(const uint4 *base, size_t chunks, unsigned *sink) {
    const unsigned acc = stream_chunks(base, chunks, blockIdx.x, gridDim.x, 0);
    if (acc == 0x9e3779b9u) sink[0] = acc; /* never taken in practice; keeps the loads */
}

/* One phase as gem launches a product: waits for the kernel before it,
 * then lets the next one be scheduled. */
__global__ void __launch_bounds__(THREADS) k_phase(const uint4 *base, size_t chunks, unsigned *sink) {
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
    const unsigned acc = stream_chunks(base, chunks, blockIdx.x, gridDim.x, 0);
    if (acc == 0x9e3779b9u) sink[0] = acc;
}

/* The launch chain with other block shapes: one round of U 16-byte loads
 * per thread per block (128 x U x 16 bytes), occupancy capped by dynamic
 * shared memory the kernel does not touch. gem's one-token q4_0 product
 * runs 4 blocks of ~24 KB per multiprocessor (registers), the probe's
 * chain above 16 of 16 KB: whether the cost per boundary follows the
 * shape says whether a product with more bytes in flight per
 * multiprocessor (cp.async into shared memory rather than registers) is
 * worth writing. */
/* LDF, the load flavour, numbered as gem's GEM_CUDA_MV_LD was when this
 * ran (bench/results/cuda-mv-variants-2026-12-04.json): 0 ld.global.nc
 * (__ldg, gem's weight loads), 1 ld.global.cs (evict first, as the chain
 * above), 2 ld.global.nc.L1::no_allocate. Volatile asm, all U issued in
 * order before the first use: with plain loads the compiler gave k_shape 34
 * registers whatever U, so it did not hold U loads in flight (the shape rows
 * print the registers each kernel got). */
template <int LDF> __device__ __forceinline__ uint4 shape_ld(const uint4 *p) {
    uint4 v;
    const size_t g = __cvta_generic_to_global(p);
    if constexpr (LDF == 1)
        asm volatile("ld.global.cs.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                     : "l"(g));
    else if constexpr (LDF == 2)
        asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                     : "l"(g));
    else
        asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                     : "l"(g));
    return v;
}
template <int U, int LDF>
__global__ void __launch_bounds__(THREADS) k_shape(const uint4 *base, size_t blocks, unsigned *sink) {
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
    if (blockIdx.x >= blocks) return;
    const uint4 *p = base + (size_t)blockIdx.x * THREADS * U + threadIdx.x;
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; u++) v[u] = shape_ld<LDF>(p + u * THREADS);
    unsigned acc = 0;
#pragma unroll
    for (int u = 0; u < U; u++) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    if (acc == 0x9e3779b9u) sink[0] = acc;
}

/* A graph of launches of kern, chained by programmatic dependent launch
 * (gem's decode step): launch p gets blocks[p] blocks of THREADS and the
 * bytes after those of the launches before it, `unit` bytes a block. */
static cudaGraphExec_t chain_graph(void (*kern)(const uint4 *, size_t, unsigned *), const uint4 *base,
                                   const std::vector<size_t> &blocks, size_t unit, size_t smem, unsigned *sink,
                                   cudaStream_t st) {
    cudaGraph_t g;
    cudaGraphExec_t gx;
    PK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    size_t at_blk = 0;
    for (size_t p = 0; p < blocks.size(); p++) {
        cudaLaunchConfig_t cfg = {};
        cudaLaunchAttribute at[1] = {};
        at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.gridDim = dim3((unsigned)blocks[p]);
        cfg.blockDim = dim3(THREADS);
        cfg.dynamicSmemBytes = smem;
        cfg.stream = st;
        cfg.attrs = at;
        cfg.numAttrs = 1;
        PK(cudaLaunchKernelEx(&cfg, kern, base + at_blk * (unit / 16), blocks[p], sink));
        at_blk += blocks[p];
    }
    PK(cudaStreamEndCapture(st, &g));
    PK(cudaGraphInstantiate(&gx, g, 0));
    PK(cudaGraphDestroy(g));
    return gx;
}


/* Median ms of the chain of phases (MB each) with k_shape<U, LDF> at `per_sm`
 * blocks per multiprocessor, or of one launch over all their bytes
 * (single): the difference per boundary is the shape's own cost. */
template <int U, int LDF>
static float shape_run(const std::vector<double> &mb, int layers, int reps, const uint4 *buf, size_t buf_bytes,
                       int per_sm, bool single, unsigned *sink, cudaStream_t st, int *got_per_sm, int *regs) {
    cudaFuncAttributes fa;
    PK(cudaFuncGetAttributes(&fa, k_shape<U, LDF>));
    *regs = fa.numRegs;
    const size_t bb = (size_t)THREADS * U * 16;
    int smem = 0, occ = 0;
    for (int s = 0; s <= 227 * 1024; s += 1024) {
        PK(cudaFuncSetAttribute(k_shape<U, LDF>, cudaFuncAttributeMaxDynamicSharedMemorySize, s ? s : 1024));
        PK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, k_shape<U, LDF>, THREADS, s));
        if (occ <= per_sm) {
            smem = s;
            break;
        }
    }
    *got_per_sm = occ;
    std::vector<size_t> nb;
    size_t total = 0;
    for (int l = 0; l < layers; l++)
        for (double m : mb) nb.push_back((size_t)(m * 1e6 / bb) + 1), total += nb.back();
    if (single) nb.assign(1, total);
    if (total * bb > buf_bytes) {
        fprintf(stderr, "cuda_barrier_probe: shape U=%d needs %zu bytes, the buffer has %zu\n", U, total * bb, buf_bytes);
        exit(1);
    }
    cudaGraphExec_t gx = chain_graph(k_shape<U, LDF>, buf, nb, bb, (size_t)smem, sink, st);
    const float ms = median_ms(reps, st, [&] { PK(cudaGraphLaunch(gx, st)); });
    PK(cudaGraphExecDestroy(gx));
    return ms;
}

/* A grid barrier in two halves, so work can go between them: arrive (the
 * block's writes released by thread 0's fence after the block barrier,
 * then one atomic), wait (thread 0 polls with relaxed loads, sleeping
 * briefly, then one acquire fence; the block barrier passes it on). The
 * counter only grows: target is every block of every barrier so far, from
 * this launch's start value. */
__device__ __forceinline__ void grid_arrive(unsigned *count) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        atomicAdd(count, 1u);
    }
}
__device__ __forceinline__ void grid_wait(const unsigned *count, unsigned target) {
    if (threadIdx.x == 0) {
        while ((int)(*(const volatile unsigned *)count - target) < 0) __nanosleep(32);
        __threadfence();
    }
    __syncthreads();
}

/* Phases p at base + off[p] chunks, n[p] chunks each. mode 0: the barrier
 * above; 1: the same with the next phase's first round issued between
 * arriving and waiting; 2: cooperative_groups' grid.sync(). */
__global__ void __launch_bounds__(THREADS) k_persist(const uint4 *base, const size_t *off, const size_t *n, int phases,
                                                     unsigned *count, unsigned start, int mode, unsigned *sink) {
    unsigned acc = 0;
    size_t first = blockIdx.x;
    for (int p = 0; p < phases; p++) {
        acc = stream_chunks(base + off[p] * (CHUNK / 16), n[p], first, gridDim.x, acc);
        first = blockIdx.x;
        if (p + 1 == phases) break;
        if (mode == 2) {
            cooperative_groups::this_grid().sync();
            continue;
        }
        round_regs r;
        const bool pre = mode == 1 && first < n[p + 1];
        grid_arrive(count);
        if (pre) round_load(base + off[p + 1] * (CHUNK / 16), first, r);
        grid_wait(count, start + (unsigned)(p + 1) * gridDim.x);
        if (pre) {
            acc = round_fold(r, acc);
            first += gridDim.x;
        }
    }
    if (acc == 0x9e3779b9u) sink[0] = acc;
}

/* The balanced persistent kernel (the "bal" rows): what the barrier rows
 * above leave open. Their persistent kernel runs 8 blocks of 128 threads
 * per multiprocessor (1056 arrivals per barrier on one counter) and deals
 * 16 KB chunks round robin, so a phase whose chunks are not a multiple of
 * the grid ends with a partial round (the o phase: 1514 chunks on 1056
 * blocks, its second round 43% full), and that tail is counted as barrier
 * cost. Here one block of BT threads per multiprocessor (132 arrivals)
 * takes an equal contiguous slice of every phase (16-byte granularity), so
 * every block streams the same bytes and all arrive together; U loads per
 * thread in flight (volatile asm: the compiler keeps them all issued before
 * the first use). The 64-bit counter only grows (target: every arrival of
 * every barrier so far, from this launch's start value); thread 0 polls it
 * with ld.acquire.gpu. EARLY issues the next phase's first round between
 * arriving and waiting. Each shape is compared with itself over one phase
 * of all the bytes. */
__device__ __forceinline__ uint4 bal_ld(const uint4 *p) {
    uint4 v;
    asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(__cvta_generic_to_global(p)));
    return v;
}
template <int BT, int U>
__device__ __forceinline__ void bal_round(const uint4 *q, size_t i, size_t hi, uint4 (&v)[U]) {
#pragma unroll
    for (int u = 0; u < U; u++) v[u] = i + (size_t)u * BT < hi ? bal_ld(q + i + (size_t)u * BT) : make_uint4(0, 0, 0, 0);
}
template <int U> __device__ __forceinline__ unsigned bal_fold(const uint4 (&v)[U], unsigned acc) {
#pragma unroll
    for (int u = 0; u < U; u++) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    return acc;
}
template <int BT, int U, bool EARLY>
__global__ void __launch_bounds__(BT, 1) k_bal(const uint4 *base, const size_t *off16, const size_t *n16, int phases,
                                              unsigned long long *count, unsigned long long start, unsigned *sink) {
    unsigned acc = 0;
    uint4 v[U];
    bool pre = false;
    for (int p = 0; p < phases; p++) {
        const size_t lo = n16[p] * blockIdx.x / gridDim.x, hi = n16[p] * (blockIdx.x + 1) / gridDim.x;
        const uint4 *q = base + off16[p];
        size_t i = lo + threadIdx.x;
        if (pre) {
            acc = bal_fold<U>(v, acc);
            i += (size_t)BT * U;
        }
        for (; i < hi; i += (size_t)BT * U) {
            bal_round<BT, U>(q, i, hi, v);
            acc = bal_fold<U>(v, acc);
        }
        if (p + 1 == phases) break;
        __syncthreads();
        if (threadIdx.x == 0) {
            __threadfence();
            atomicAdd(count, 1ull);
        }
        pre = EARLY;
        if (EARLY) {
            const size_t lo2 = n16[p + 1] * blockIdx.x / gridDim.x, hi2 = n16[p + 1] * (blockIdx.x + 1) / gridDim.x;
            bal_round<BT, U>(base + off16[p + 1], lo2 + threadIdx.x, hi2, v);
        }
        if (threadIdx.x == 0) {
            const unsigned long long target = start + (unsigned long long)(p + 1) * gridDim.x;
            unsigned long long c;
            for (;;) {
                asm volatile("ld.acquire.gpu.u64 %0, [%1];" : "=l"(c) : "l"(count) : "memory");
                if (c >= target) break;
                __nanosleep(20);
            }
        }
        __syncthreads();
    }
    if (acc == 0x9e3779b9u) sink[0] = acc;
}

/* Work between rounds (the "work" rows): the persistent layer kernel gem
 * measured and dropped (k_tail, until a7a9d07) streamed its product phases
 * at ~2.7 TB/s where k_bal, the same grid with nothing to compute, streams
 * at ~4.2 (bench/results/cuda-tail-ab-2026-12-05.json). The question: do
 * warps that start in step and compute after each whole round (its dots,
 * then its sums) leave memory idle while they all compute, and does a
 * pipeline of half rounds (the next half's loads issued before the dots of
 * the one in hand) get the rate back? On an H100 both forms streamed as
 * fast with the work as k_bal without it (2.79-2.84 against 2.77-2.80
 * TB/s; bench/results/cuda-pipe-h100-2026-12-05.json, whose W 0 rows timed
 * loads the compiler had dropped). One block of
 * BT threads per multiprocessor streams an equal slice of all the bytes,
 * U loads per thread per round, W pairs of dp4a per 16 bytes loaded (a
 * q4_0 block's dot against 8-bit codes is 8 dp4a and 8 logic ops, ~W 4
 * to 6 with its sums), whole rounds or (PIPE) half rounds in a pipeline. */
template <int W> __device__ __forceinline__ unsigned work_fold(uint4 v, unsigned acc) {
    int a = (int)acc, b = (int)(acc ^ 0x5555u);
#pragma unroll
    for (int k = 0; k < W; k++) {
        a = __dp4a((int)(v.x >> k), (int)v.y, a);
        b = __dp4a((int)(v.z ^ (unsigned)k), (int)v.w, b);
    }
    /* W 0: the values folded into acc itself, so every load stays live
     * (a ^ b alone would be a constant there: the 2026-12-05 H100 run's W 0
     * rows timed loads the compiler had dropped) */
    return W ? (unsigned)(a ^ b) : acc ^ v.x ^ v.y ^ v.z ^ v.w;
}
template <int BT, int U, int W, bool PIPE>
__global__ void __launch_bounds__(BT, 1) k_work(const uint4 *base, size_t n16, unsigned *sink) {
    const size_t lo = n16 * blockIdx.x / gridDim.x, hi = n16 * (blockIdx.x + 1) / gridDim.x;
    unsigned acc = 0;
    if (!PIPE) {
        uint4 v[U];
        for (size_t i = lo + threadIdx.x; i < hi; i += (size_t)BT * U) {
            bal_round<BT, U>(base, i, hi, v);
#pragma unroll
            for (int u = 0; u < U; u++) acc = work_fold<W>(v[u], acc);
        }
    } else {
        /* half rounds of U / 2 loads: a, then b, the next one's loads
         * issued before the one in hand is used */
        constexpr int H = U / 2;
        constexpr size_t STEP = (size_t)BT * H;
        uint4 a[H], b[H];
        size_t i = lo + threadIdx.x;
        bal_round<BT, H>(base, i, hi, a);
        for (; i < hi; i += 2 * STEP) {
            bal_round<BT, H>(base, i + STEP, hi, b);
#pragma unroll
            for (int u = 0; u < H; u++) acc = work_fold<W>(a[u], acc);
            bal_round<BT, H>(base, i + 2 * STEP, hi, a);
#pragma unroll
            for (int u = 0; u < H; u++) acc = work_fold<W>(b[u], acc);
        }
    }
    if (acc == 0x9e3779b9u) sink[0] = acc;
}
template <int BT, int U, int W, bool PIPE>
static float work_run(const uint4 *buf, size_t n16, int sms, int reps, unsigned *sink, cudaStream_t st, int *regs) {
    cudaFuncAttributes fa;
    PK(cudaFuncGetAttributes(&fa, k_work<BT, U, W, PIPE>));
    *regs = fa.numRegs;
    return median_ms(reps, st, [&] { k_work<BT, U, W, PIPE><<<sms, BT, 0, st>>>(buf, n16, sink); });
}

/* Median ms of k_bal<BT, U, EARLY> on one block per multiprocessor over the
 * phases (off16/n16 on the device, `phases` of them); *next is the
 * counter's value after the last run. */
template <int BT, int U, bool EARLY>
static float bal_run(const uint4 *buf, const size_t *doff, const size_t *dn, int phases, unsigned long long *count,
                     unsigned long long *next, int sms, int reps, unsigned *sink, cudaStream_t st, int *regs) {
    cudaFuncAttributes fa;
    PK(cudaFuncGetAttributes(&fa, k_bal<BT, U, EARLY>));
    *regs = fa.numRegs;
    return median_ms(reps, st, [&] {
        coop_launch(k_bal<BT, U, EARLY>, (unsigned)sms, BT, 0, st, buf, doff, dn, phases, count, *next, sink);
        *next += (unsigned long long)(phases - 1) * (unsigned)sms;
    });
}

int main(int argc, char **argv) {
    std::vector<double> mb = {49.5, 24.8, 130.0, 65.0};
    int layers = argc > 2 ? atoi(argv[2]) : 60, reps = argc > 3 ? atoi(argv[3]) : 10;
    if (argc > 1) {
        mb.clear();
        for (char *s = argv[1]; *s;) {
            char *end;
            const double v = strtod(s, &end);
            if (end == s || v <= 0) {
                fprintf(stderr, "cuda_barrier_probe: phase sizes are MB values separated by commas: %s\n", argv[1]);
                return 2;
            }
            mb.push_back(v);
            s = *end == ',' ? end + 1 : end;
        }
    }
    if (layers < 1 || reps < 1 || layers * mb.size() < 2) {
        fprintf(stderr, "usage: cuda_barrier_probe [PHASE_MB,...] [LAYERS >= 1] [REPS >= 1] (two phases or more)\n");
        return 2;
    }
    std::vector<size_t> off, n;
    size_t total = 0;
    for (int l = 0; l < layers; l++)
        for (double m : mb) {
            off.push_back(total);
            n.push_back((size_t)(m * 1e6 / CHUNK) + 1);
            total += n.back();
        }
    const int phases = (int)n.size();
    const double bytes = (double)total * CHUNK;
    int dev = 0, sms = 0, per_sm = 0, per_sm_s = 0, coop = 0;
    PK(cudaGetDevice(&dev));
    PK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    PK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev));
    PK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k_persist, THREADS, 0));
    PK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm_s, k_stream, THREADS, 0));
    if (!coop || per_sm < 1 || per_sm_s < 1) {
        fprintf(stderr, "cuda_barrier_probe: this device cannot run a cooperative launch of the probe\n");
        return 1;
    }
    const unsigned grid = (unsigned)(per_sm * sms), grid_s = (unsigned)(per_sm_s * sms);
    uint4 *buf;
    size_t *doff, *dn;
    unsigned *count, *sink;
    const size_t buf_bytes = total * CHUNK + (size_t)phases * 4 * CHUNK; /* slack for the shapes' rounding */
    PK(cudaMalloc(&buf, buf_bytes));
    PK(cudaMemset(buf, 1, buf_bytes));
    PK(cudaMalloc(&doff, sizeof(size_t) * phases));
    PK(cudaMalloc(&dn, sizeof(size_t) * phases));
    PK(cudaMemcpy(doff, off.data(), sizeof(size_t) * phases, cudaMemcpyHostToDevice));
    PK(cudaMemcpy(dn, n.data(), sizeof(size_t) * phases, cudaMemcpyHostToDevice));
    PK(cudaMalloc(&count, sizeof(unsigned)));
    PK(cudaMemset(count, 0, sizeof(unsigned)));
    PK(cudaMalloc(&sink, sizeof(unsigned)));
    cudaStream_t st;
    PK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaEvent_t e0, e1;
    PK(cudaEventCreate(&e0));
    PK(cudaEventCreate(&e1));

    /* the launch chain, recorded once (phase p starts at chunk off[p], the
     * sum of the chunks before it) */
    const cudaGraphExec_t gx = chain_graph(k_phase, buf, n, CHUNK, 0, sink, st);

    unsigned start = 0; /* the barrier counter's value when the next persistent launch starts */
    enum { V_STREAM, V_STREAM_P, V_LAUNCH, V_BARRIER, V_EARLY, V_CG, NV };
    const char *names[NV] = {"stream", "stream-p", "launch", "barrier", "early", "cg"};
    std::vector<float> ts[NV];
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < NV; i++) {
            const int v = pass ? NV - 1 - i : i; /* forward, then in reverse: drift weighs on all alike */
            for (int r = 0; r <= reps; r++) {    /* run 0 warms up */
                PK(cudaEventRecord(e0, st));
                if (v == V_STREAM || v == V_STREAM_P) {
                    k_stream<<<v == V_STREAM ? grid_s : grid, THREADS, 0, st>>>(buf, total, sink);
                    PK(cudaGetLastError());
                } else if (v == V_LAUNCH) {
                    PK(cudaGraphLaunch(gx, st));
                } else {
                    coop_launch(k_persist, grid, THREADS, 0, st, (const uint4 *)buf, (const size_t *)doff,
                                (const size_t *)dn, phases, count, start, v - V_BARRIER, sink);
                    if (v != V_CG) start += (unsigned)(phases - 1) * grid;
                }
                PK(cudaEventRecord(e1, st));
                PK(cudaEventSynchronize(e1));
                float ms = 0;
                PK(cudaEventElapsedTime(&ms, e0, e1));
                if (r) ts[v].push_back(ms);
            }
        }
    cudaDeviceProp prop;
    PK(cudaGetDeviceProperties(&prop, dev));
    printf("cuda_barrier_probe: %s, %d SMs; blocks of %d threads per SM: %d (stream), %d (persistent); %d phases "
           "(%d layers x %zu), %.2f GB per run, median of %d\n",
           prop.name, sms, THREADS, per_sm_s, per_sm, phases, layers, mb.size(), bytes / 1e9, 2 * reps);
    float t[NV];
    for (int v = 0; v < NV; v++) t[v] = median(ts[v]);
    for (int v = 0; v < NV; v++) {
        const float base = v == V_LAUNCH ? t[V_STREAM] : t[V_STREAM_P];
        printf("%-8s %9.3f ms %8.1f GB/s", names[v], t[v], bytes / (t[v] * 1e-3) / 1e9);
        if (v >= V_LAUNCH) printf(" %8.2f us per boundary", (t[v] - base) * 1e3 / (phases - 1));
        printf("\n");
    }
    /* the launch chain by block shape: (U, blocks per multiprocessor, load
     * flavour); the capped occupancy comes from dynamic shared memory, which
     * also shrinks L1 (gem's products get the driver's choice) */
    printf("launch chain by block shape (one round per block; cost per boundary against one launch of the same "
           "shape over all the bytes):\n");
    const int shapes[][3] = {{8, 16, 1}, {8, 8, 1}, {8, 4, 1}, {12, 8, 1}, {12, 4, 1},
                             {12, 4, 0}, {12, 4, 2}, {6, 8, 0}, {16, 4, 1}, {16, 2, 1}};
    const char *ldf_names[3] = {"nc", "cs", "nc.L1::no_allocate"};
    for (const auto &sh : shapes) {
        float tc = 0, t1 = 0;
        int occ = 0, regs = 0;
        const size_t bb = (size_t)THREADS * sh[0] * 16;
#define SHAPE_RUN(U, LDF)                                                                                \
    if (sh[0] == U && sh[2] == LDF) {                                                                    \
        t1 = shape_run<U, LDF>(mb, layers, 2 * reps, buf, buf_bytes, sh[1], true, sink, st, &occ, &regs);  \
        tc = shape_run<U, LDF>(mb, layers, 2 * reps, buf, buf_bytes, sh[1], false, sink, st, &occ, &regs); \
    }
        SHAPE_RUN(6, 0)
        SHAPE_RUN(8, 1)
        SHAPE_RUN(12, 0)
        SHAPE_RUN(12, 1)
        SHAPE_RUN(12, 2)
        SHAPE_RUN(16, 1)
#undef SHAPE_RUN
        if (!occ) {
            fprintf(stderr, "cuda_barrier_probe: no kernel for shape U=%d flavour %d\n", sh[0], sh[2]);
            return 1;
        }
        printf("  %-18s %5.1f KB x %2d per SM (%3d registers): single %7.3f ms %7.1f GB/s, chain %7.3f ms %7.1f GB/s, "
               "%5.2f us per boundary\n",
               ldf_names[sh[2]], bb / 1024.0, occ, regs, t1, bytes / (t1 * 1e-3) / 1e9, tc, bytes / (tc * 1e-3) / 1e9,
               (tc - t1) * 1e3 / (phases - 1));
    }
    /* the balanced persistent kernel: the same phases in 16-byte units, and
     * one phase of all their bytes as its base */
    {
        std::vector<size_t> off16, n16;
        for (int p = 0; p < phases; p++) off16.push_back(off[p] * (CHUNK / 16)), n16.push_back(n[p] * (CHUNK / 16));
        const size_t all16[2] = {0, total * (CHUNK / 16)};
        size_t *doff16, *dn16, *dall;
        unsigned long long *count64, next = 0;
        PK(cudaMalloc(&doff16, sizeof(size_t) * phases));
        PK(cudaMalloc(&dn16, sizeof(size_t) * phases));
        PK(cudaMalloc(&dall, sizeof all16));
        PK(cudaMalloc(&count64, sizeof *count64));
        PK(cudaMemset(count64, 0, sizeof *count64));
        PK(cudaMemcpy(doff16, off16.data(), sizeof(size_t) * phases, cudaMemcpyHostToDevice));
        PK(cudaMemcpy(dn16, n16.data(), sizeof(size_t) * phases, cudaMemcpyHostToDevice));
        PK(cudaMemcpy(dall, all16, sizeof all16, cudaMemcpyHostToDevice));
        printf("balanced persistent kernel (one block per SM, equal slices of every phase, 132 arrivals per barrier; "
               "cost per boundary against one phase of all the bytes on the same shape):\n");
#define BAL_ROW(BT, U)                                                                                              \
    {                                                                                                               \
        int r0 = 0, r1 = 0, r2 = 0;                                                                                 \
        const float t1 = bal_run<BT, U, false>(buf, dall, dall + 1, 1, count64, &next, sms, 2 * reps, sink, st, &r0); \
        const float tb = bal_run<BT, U, false>(buf, doff16, dn16, phases, count64, &next, sms, 2 * reps, sink, st, &r1); \
        const float te = bal_run<BT, U, true>(buf, doff16, dn16, phases, count64, &next, sms, 2 * reps, sink, st, &r2); \
        printf("  %4d threads x %2d loads (%3d KB in flight per SM, %3d/%3d registers): single %7.3f ms %7.1f GB/s, " \
               "barrier %7.3f ms %5.2f us per boundary, early %7.3f ms %5.2f us per boundary\n",                    \
               BT, U, BT * U * 16 / 1024, r1, r2, t1, bytes / (t1 * 1e-3) / 1e9, tb, (tb - t1) * 1e3 / (phases - 1),   \
               te, (te - t1) * 1e3 / (phases - 1));                                                                  \
    }
        BAL_ROW(512, 8)
        BAL_ROW(512, 16)
        BAL_ROW(1024, 8)
        BAL_ROW(1024, 12)
#undef BAL_ROW
        printf("work between rounds (one block per SM, an equal slice of all the bytes, one phase; W pairs of dp4a per "
               "16 bytes; whole rounds, or half rounds pipelined):\n");
#define WORK_ROW(BT, U, W)                                                                                     \
    {                                                                                                          \
        int r0 = 0, r1 = 0;                                                                                    \
        const float tw = work_run<BT, U, W, false>(buf, all16[1], sms, 2 * reps, sink, st, &r0);               \
        const float tp = work_run<BT, U, W, true>(buf, all16[1], sms, 2 * reps, sink, st, &r1);                \
        printf("  %4d threads x %2d loads, W %2d (%3d/%3d registers): whole %7.3f ms %7.1f GB/s, pipelined %7.3f " \
               "ms %7.1f GB/s\n",                                                                              \
               BT, U, W, r0, r1, tw, bytes / (tw * 1e-3) / 1e9, tp, bytes / (tp * 1e-3) / 1e9);               \
    }
        WORK_ROW(512, 8, 0)
        WORK_ROW(512, 8, 2)
        WORK_ROW(512, 8, 4)
        WORK_ROW(512, 8, 8)
        WORK_ROW(512, 8, 16)
        WORK_ROW(512, 12, 4)
        WORK_ROW(512, 12, 8)
#undef WORK_ROW
        PK(cudaFree(doff16));
        PK(cudaFree(dn16));
        PK(cudaFree(dall));
        PK(cudaFree(count64));
    }
    PK(cudaGraphExecDestroy(gx));
    PK(cudaFree(buf));
    PK(cudaFree(doff));
    PK(cudaFree(dn));
    PK(cudaFree(count));
    PK(cudaFree(sink));
    PK(cudaStreamDestroy(st));
    return 0;
}
