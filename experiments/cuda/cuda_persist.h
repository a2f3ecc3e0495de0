/* Device helpers of the persistent-kernel experiments (cuda_ring_probe.cu, and
 * the layer_rest kernel gem carried until it was removed; docs/cuda.md):
 * mbarriers, bulk copies by the copy engine, the consumers' grid barrier
 * of a persistent kernel, a deadline that traps instead of hanging, and
 * the two-row q4_0 dot loop of the ring's consumers. Not part of gem: the
 * product's kernels need none of these (src/backend/cuda/cuda_common.h
 * keeps only what src/ uses, and this file takes mv_block_dot from it).
 *
 * Invariants: sm_90a (cp.async.bulk, mbarrier expect_tx); the grid barrier
 * needs every block resident at once (a cooperative launch, or one block
 * per multiprocessor on a GPU nobody else uses). */
#ifndef GEM_EXPERIMENTS_CUDA_CUDA_PERSIST_H
#define GEM_EXPERIMENTS_CUDA_CUDA_PERSIST_H

#include "backend/cuda/cuda_common.h"

__device__ __forceinline__ unsigned smem_u32(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }

/* A wait that lasts 10 s traps (a device error the probe reports)
 * instead of hanging the process: called every spin, it reads
 * the clock every 1024th. */
__device__ __forceinline__ void persist_deadline(unsigned &n, unsigned long long &t0) {
    if (++n % 1024) return;
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    if (!t0) t0 = t;
    else if (t - t0 > 10000000000ull) __trap();
}
__device__ __forceinline__ void mbar_init(unsigned long long *b, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(b)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned long long *b, unsigned parity) {
    unsigned n = 0, done = 0;
    unsigned long long t0 = 0;
    for (;;) {
        asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}"
                     : "=r"(done)
                     : "r"(smem_u32(b)), "r"(parity)
                     : "memory");
        if (done) return;
        persist_deadline(n, t0);
    }
}
__device__ __forceinline__ void mbar_arrive(unsigned long long *b) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(b)) : "memory");
}
/* the producer's one arrival, announcing the bytes its copies complete */
__device__ __forceinline__ void mbar_expect(unsigned long long *b, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(b)), "r"(bytes) : "memory");
}
/* global to shared by the copy engine, completion counted on b; bytes and
 * both addresses multiples of 16 */
__device__ __forceinline__ void bulk_copy(void *dst, const void *src, unsigned bytes, unsigned long long *b) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     smem_u32(dst)),
                 "l"(__cvta_generic_to_global(src)), "r"(bytes), "r"(smem_u32(b))
                 : "memory");
}
/* The grid barrier of a persistent kernel's first bt threads (named block
 * barrier 1; a producer warp past them never joins), then one arrival per
 * block on a 64-bit counter that only grows, thread 0 polling it with
 * acquire loads. The arrival's ticket names the barrier (every block
 * arrives at one before any leaves it), so no launch argument changes
 * between runs and a graph replays the kernel. */
__device__ __forceinline__ void consumers_grid_sync(int bt, unsigned long long *count) {
    asm volatile("bar.sync 1, %0;" ::"r"(bt) : "memory");
    if (threadIdx.x == 0) {
        __threadfence();
        const unsigned long long ticket = atomicAdd(count, 1ull);
        const unsigned long long target = (ticket / gridDim.x + 1) * gridDim.x;
        unsigned long long v, t0 = 0;
        for (unsigned n = 0;;) {
            asm volatile("ld.acquire.gpu.u64 %0, [%1];" : "=l"(v) : "l"(count) : "memory");
            if (v >= target) break;
            __nanosleep(32);
            persist_deadline(n, t0);
        }
    }
    asm volatile("bar.sync 1, %0;" ::"r"(bt) : "memory");
}

/* One lane's share of two q4_0 rows' dot products against activation codes
 * in two shared planes (values 0-15 and 16-31 of each block): blocks b0 +
 * lane, + 32, ... below b1 of the rows whose code blocks start at qs + oa
 * and qs + ob (scales at ds + oa, ds + ob; the second row only when two).
 * The activation codes are read once for both rows. Lane sums, added into
 * a and u: the caller reduces them over the warp. */
__device__ __forceinline__ void q4_pair_dot(const uint4 *qs, const __half *ds, int oa, int ob, bool two, int b0,
                                            int b1, const int4 *xlo, const int4 *xhi, const float *xd, const int *xs,
                                            float &a, float &u) {
    const int lane = threadIdx.x & 31;
#pragma unroll 2
    for (int b = b0 + lane; b < b1; b += 32) {
        const int4 x0 = xlo[b], x1 = xhi[b];
        const float dx = xd[b];
        const int sx = xs[b];
        const uint4 w = qs[oa + b];
        a += __half2float(ds[oa + b]) * dx * (float)mv_block_dot<1>(w, w, x0, x1, sx);
        if (two) {
            const uint4 w2 = qs[ob + b];
            u += __half2float(ds[ob + b]) * dx * (float)mv_block_dot<1>(w2, w2, x0, x1, sx);
        }
    }
}

#endif
