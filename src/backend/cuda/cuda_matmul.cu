/* CUDA matrix products (see cuda_ops.h; invariants in cuda_common.h):
 * matmul, matmul_multi (q/k/v in one launch) and matmul_geglu (gate/up
 * with the gating fused). One-token steps, row-exact tiles of up to 4
 * tokens, and every call with GEM_CUDA_MMA=0, run matrix-vector kernels:
 * dp4a on 8-bit activation codes for q8_0/q4_0 (the CPU fast path's codes,
 * so only the f32 summation order differs from it), f32 FMA for float
 * weights, one-token rows of 8192 values or more split over warps; row-exact
 * tiles of 5 to 16 tokens of q8_0/q4_0 run k_vr_q (tensor-core block sums,
 * the matrix-vector kernel's f32 steps and order). Prefill tiles run on the
 * tensor cores: k_mm_w (warpgroup MMA, the default) or k_mm_h (mma.sync,
 * GEM_CUDA_MMH=2) on f16 activations and weights expanded to f16 in
 * registers (power-of-two operand ranges: no f16 overflow), else, for K
 * not a multiple of 128 or a scale that is inf/NaN, k_mm_tiled/k_mm_q
 * (8-bit mma.sync, the dp4a block sums). A product reuses the codes (or
 * f16 activations) of its input while nothing but products ran since
 * (act_cache), whoever made them. */
#include "backend/cuda/cuda_common.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/cuda_kquant.h"

/* ------------------------------------------------------------------ */
/* matrix products                                                     */

/* Activations to 8-bit codes per 32-value block: one warp per block. */

__global__ void k_quantize_act(const float *x, int64_t nblk, int8_t *q, float *d, int *s) {
    CU_TRACE(CT_QUANTIZE_ACT);
    pdl_wait();
    CU_TRACE_RELEASED();
    const int64_t blk = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (blk >= nblk) return;
    quantize_block32(x[blk * 32 + lane], (size_t)blk, lane, q, d, s);
}

/* Launch shape of the matrix-vector kernels (overridable for tuning runs,
 * e.g. make NVEXTRA=-DMV_WARPS=8). */
#ifndef MV_WARPS
#define MV_WARPS 4 /* warps per block */
#endif
#ifndef MV_ROWS
#define MV_ROWS 2 /* output rows per warp: each activation block loaded serves all */
#endif
/* k_mv_q's launch bounds; a tuning build may size its registers for
 * MV_MINB blocks per multiprocessor (naming 1 is not the same as naming
 * none: ptxas then allocates more registers) */
#ifdef MV_MINB
#define MV_BOUNDS __launch_bounds__(MV_WARPS * 32, MV_MINB)
#else
#define MV_BOUNDS __launch_bounds__(MV_WARPS * 32)
#endif
/* tokens per launch: a verification tile of up to BE_EXACT_ROWS tokens
 * reads the weights once */
#define MV_MAXT 16
static_assert(MV_WARPS % 4 == 0, "the row split shares a row among 2 or 4 warps of a block");

/* Matrix-vector products (n <= MV_MAXT tokens per launch).
 *
 * One launch serves up to three matrices that share the input (q, k, v):
 * blocks are dealt to the matrices in order. A warp owns MV_ROWS output
 * rows; in `pair` mode (gate/up with GELU gating fused) its two rows are
 * row R of matrix 0 (gate) and row R of matrix 1 (up), and it writes
 * gelu_tanh(gate) * up. Lane L takes blocks L, L+32, ... of each row,
 * MV_UNROLL at a time with every weight load issued before the first use
 * (memory-level parallelism is what a product at the bandwidth roofline
 * needs).
 *
 * q8_0/q4_0: 16 (q4_0) or 32 (q8_0) contiguous code bytes per block, so a
 * warp's loads of one row are contiguous 512- or 1024-byte runs; integer dot
 * products (dp4a) per block, then one f32 multiply-add with
 * scale(w) * scale(x), the CPU fast path's arithmetic.
 * f32/f16/bf16: lane L takes 8 consecutive values at 8L, 8L + 256, ... */
#ifndef MV_UNROLL
#define MV_UNROLL 4
#endif
#ifndef MV_UNROLL_Q4
#define MV_UNROLL_Q4 8 /* q4_0 blocks are half the bytes: twice as many in flight */
#endif

typedef struct {
    const void *q;
    const __half *d;
    float *out;
    int M;      /* rows */
    int blocks; /* thread blocks dealt to this matrix */
} mv_mat;

typedef struct {
    mv_mat m[3];
    int count;
    int pair;
    /* k_mv_q's staggered start: block i < wave waits (i % levels) *
     * stagger ns after pdl_wait (stagger 0: none) */
    int wave, stagger, levels;
    /* k_vr_q with split rows: each part's sums ([tile][part][row][token])
     * and per tile the parts done so far (0 between launches) */
    float *vr_part;
    unsigned *vr_done;
} mv_job;

/* The rows of this warp: per slot a matrix base and a row index; *mi is the
 * matrix of slot 0 (its out/M receive the results). */
struct mv_rows {
    const void *q[MV_ROWS];
    const __half *d[MV_ROWS];
    int row[MV_ROWS];
    float *out;
    int M, row0;
};

/* Fields are picked with selects, never by indexing job.m with a run-time
 * index: that would copy the parameter struct to local memory (a stack
 * frame, measurably slower decode). */
template <int SP = 1>
__device__ __forceinline__ bool mv_rows_of(const mv_job &job, mv_rows &r) {
    int bid = blockIdx.x, mi = 0;
    if (job.count > 1 && bid >= job.m[0].blocks) bid -= job.m[0].blocks, mi = 1;
    if (job.count > 2 && mi == 1 && bid >= job.m[1].blocks) bid -= job.m[1].blocks, mi = 2;
    const void *mq = mi == 0 ? job.m[0].q : mi == 1 ? job.m[1].q : job.m[2].q;
    const __half *md = mi == 0 ? job.m[0].d : mi == 1 ? job.m[1].d : job.m[2].d;
    const int M = mi == 0 ? job.m[0].M : mi == 1 ? job.m[1].M : job.m[2].M;
    const int warp = bid * (MV_WARPS / SP) + (threadIdx.x >> 5) / SP;
    r.out = mi == 0 ? job.m[0].out : mi == 1 ? job.m[1].out : job.m[2].out;
    r.M = M;
    if (job.pair) {
        r.row0 = warp;
        if (warp >= M) return false;
#pragma unroll
        for (int k = 0; k < MV_ROWS; k++) {
            r.q[k] = k == 0 ? job.m[0].q : job.m[1].q;
            r.d[k] = k == 0 ? job.m[0].d : job.m[1].d;
            r.row[k] = warp;
        }
    } else {
        r.row0 = warp * MV_ROWS;
        if (r.row0 >= M) return false;
#pragma unroll
        for (int k = 0; k < MV_ROWS; k++) {
            r.q[k] = mq;
            r.d[k] = md;
            r.row[k] = min(r.row0 + k, M - 1);
        }
    }
    return true;
}

template <int NT>
__device__ __forceinline__ void mv_store(const mv_job &job, const mv_rows &r, float (&acc)[MV_ROWS][NT]) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int k = 0; k < MV_ROWS; k++)
#pragma unroll
        for (int t = 0; t < NT; t++) acc[k][t] = warp_sum(acc[k][t]);
    if (lane != 0) return;
#pragma unroll
    for (int t = 0; t < NT; t++) {
        if (job.pair) {
            r.out[(size_t)t * r.M + r.row0] = gelu_tanh_f(acc[0][t]) * acc[1][t];
        } else {
#pragma unroll
            for (int k = 0; k < MV_ROWS; k++)
                if (r.row0 + k < r.M) r.out[(size_t)t * r.M + r.row0 + k] = acc[k][t];
        }
    }
}

/* SP > 1 (one-token steps of rows of 8192 values or more; GEM_CUDA_MV_SPLIT=0
 * turns it off): SP consecutive warps share a warp's rows, part P taking
 * blocks 32P + L, 32P + L + 32 SP, ...; a compile-time stride keeps the
 * loads' immediate offsets (a run-time one slowed the unsplit kernel), and
 * SP = 1 is the plain kernel (same PTX). The parts meet in shared memory
 * and part 0 adds them in a fixed order. It lets the 5376-row o and down
 * products (1.27 waves of 4 blocks per SM unsplit) fill the machine
 * (bench/results/cuda-variants-2026-12-03.json). */

/* One round of a lane's weight blocks (U per row, SP-strided) into w0/w1,
 * read through L1 (ld.global.nc). Other load flavours and staging were
 * measured and dropped (docs/cuda.md, removed experiments). */
template <int Q4, int U, int SP>
__device__ __forceinline__ void mv_load_q(const mv_rows &r, int nb, int b0, uint4 (&w0)[U][MV_ROWS],
                                          uint4 (&w1)[U][MV_ROWS], float (&dw)[U][MV_ROWS]) {
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int b = b0 + 32 * SP * u;
#pragma unroll
        for (int k = 0; k < MV_ROWS; k++) {
            if (b < nb) {
                const size_t blk = (size_t)r.row[k] * nb + b;
                const uint8_t *q = (const uint8_t *)r.q[k];
                w0[u][k] = __ldg((const uint4 *)(q + blk * (Q4 ? 16 : 32)));
                if (!Q4) w1[u][k] = __ldg((const uint4 *)(q + blk * 32 + 16));
                dw[u][k] = __half2float(r.d[k][blk]);
            }
        }
    }
}

/* The staggered start of a product longer than one wave (GEM_CUDA_MV_STAGGER,
 * default 500 ns in 8 levels). The blocks of the first wave are resident
 * before the grid dependency resolves (programmatic dependent launch); at
 * once they all issue their loads (~13 MB for the 31B gate/up pair), and
 * every one of them completes together, at about half the rate the same
 * kernel streams once its blocks start at different times. Then the next
 * wave starts together too: the waves stay in step for several rounds,
 * each with a gap in the memory traffic. A per-block trace of a decode
 * step (globaltimer at entry, release and exit) showed it; starting the
 * first wave over a few microseconds instead (block i waits (i % 8) * 500
 * ns) lets the first blocks finish sooner and the waves fall out of step
 * at once (bench/results/cuda-mv-stagger-2026-12-03.json). A grid of one
 * wave or less starts at once (its last block would only wait). */
__device__ __forceinline__ void mv_stagger_start(const mv_job &job) {
    if (!job.stagger || (int)blockIdx.x >= job.wave) return;
    const unsigned long long wait = (unsigned long long)(blockIdx.x % (unsigned)job.levels) * (unsigned)job.stagger;
    if (!wait) return;
    const unsigned long long t0 = gpu_time_ns();
    do __nanosleep(128);
    while (gpu_time_ns() - t0 < wait);
}

/* Weights are read after pdl_wait like everything else: issuing the first
 * round before it (the blocks of a product then wait on SMs while the
 * latency-bound kernel before them runs) made decode much slower
 * (bench/results/cuda-variants-2026-12-03c.json). */
template <int Q4, int NT, int SP>
__global__ void MV_BOUNDS
    k_mv_q(mv_job job, const int8_t *__restrict__ xq, const float *__restrict__ xd, const int *__restrict__ xs, int K) {
    CU_TRACE(CT_MV_Q);
    pdl_wait();
    CU_TRACE_RELEASED();
    mv_stagger_start(job);
    mv_rows r;
    static_assert(MV_WARPS % SP == 0, "a row's SP warps are in one block");
    const bool valid = mv_rows_of<SP>(job, r);
    if (SP == 1 && !valid) return;
    constexpr int U = Q4 ? MV_UNROLL_Q4 : MV_UNROLL;
    const int lane = threadIdx.x & 31, nb = valid ? K / 32 : 0, part = SP > 1 ? (threadIdx.x >> 5) % SP : 0;
    float acc[MV_ROWS][NT];
#pragma unroll
    for (int k = 0; k < MV_ROWS; k++)
#pragma unroll
        for (int t = 0; t < NT; t++) acc[k][t] = 0;
    uint4 w0[U][MV_ROWS], w1[U][MV_ROWS];
    float dw[U][MV_ROWS];
    const int first = 32 * part + lane;
    for (int b0 = first; b0 < nb; b0 += 32 * SP * U) {
        mv_load_q<Q4, U, SP>(r, nb, b0, w0, w1, dw);
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int b = b0 + 32 * SP * u;
            if (b >= nb) break;
#pragma unroll
            for (int t = 0; t < NT; t++) {
                const int4 *xv = (const int4 *)(xq + (size_t)t * K + (size_t)b * 32);
                const int4 x0 = __ldg(xv), x1 = __ldg(xv + 1);
                const float dx = __ldg(xd + (size_t)t * nb + b);
                const int sx = __ldg(xs + (size_t)t * nb + b);
#pragma unroll
                for (int k = 0; k < MV_ROWS; k++) {
                    /* q4_0 loads no second half (w1 unset): pass w0 twice */
                    const int sum = mv_block_dot<Q4>(w0[u][k], Q4 ? w0[u][k] : w1[u][k], x0, x1, sx);
                    /* spelled out: k_vr_q repeats this step exactly */
                    acc[k][t] = __fmaf_rn(__fmul_rn(dw[u][k], dx), (float)sum, acc[k][t]);
                }
            }
        }
    }
    if (SP > 1) {
        __shared__ float parts[MV_WARPS][MV_ROWS][NT];
#pragma unroll
        for (int k = 0; k < MV_ROWS; k++)
#pragma unroll
            for (int t = 0; t < NT; t++) {
                const float v = warp_sum(acc[k][t]);
                if (lane == 0) parts[threadIdx.x >> 5][k][t] = v;
            }
        __syncthreads();
        if (!valid || part != 0) return;
        const int w0 = threadIdx.x >> 5;
#pragma unroll
        for (int k = 0; k < MV_ROWS; k++)
#pragma unroll
            for (int t = 0; t < NT; t++) {
                float v = parts[w0][k][t];
#pragma unroll
                for (int p = 1; p < SP; p++) v += parts[w0 + p][k][t];
                acc[k][t] = lane == 0 ? v : 0.0f; /* mv_store sums the lanes */
            }
    }
    mv_store<NT>(job, r, acc);
}

template <int FMT, int NT>
__global__ void __launch_bounds__(MV_WARPS * 32) k_mv_f(mv_job job, const float *__restrict__ x, int K) {
    CU_TRACE(CT_MV_F);
    pdl_wait();
    CU_TRACE_RELEASED();
    mv_rows r;
    if (!mv_rows_of(job, r)) return;
    const int lane = threadIdx.x & 31;
    float acc[MV_ROWS][NT];
#pragma unroll
    for (int k = 0; k < MV_ROWS; k++)
#pragma unroll
        for (int t = 0; t < NT; t++) acc[k][t] = 0;
    for (int e = lane * 8; e < K; e += 256) {
        float w[MV_ROWS][8];
#pragma unroll
        for (int k = 0; k < MV_ROWS; k++) {
            const size_t base = (size_t)r.row[k] * K + e;
            if (FMT == DW_F32) {
                const float4 a = __ldg((const float4 *)((const float *)r.q[k] + base)),
                             c = __ldg((const float4 *)((const float *)r.q[k] + base + 4));
                w[k][0] = a.x, w[k][1] = a.y, w[k][2] = a.z, w[k][3] = a.w;
                w[k][4] = c.x, w[k][5] = c.y, w[k][6] = c.z, w[k][7] = c.w;
            } else {
                const uint4 raw = __ldg((const uint4 *)((const uint16_t *)r.q[k] + base));
                const unsigned u[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    if (FMT == DW_F16) {
                        const float2 f = __half22float2(*(const __half2 *)&u[j]);
                        w[k][2 * j] = f.x, w[k][2 * j + 1] = f.y;
                    } else {
                        w[k][2 * j] = __uint_as_float(u[j] << 16);
                        w[k][2 * j + 1] = __uint_as_float(u[j] & 0xFFFF0000u);
                    }
                }
            }
        }
#pragma unroll
        for (int t = 0; t < NT; t++) {
            const float4 a = __ldg((const float4 *)(x + (size_t)t * K + e)),
                         c = __ldg((const float4 *)(x + (size_t)t * K + e + 4));
            const float xv[8] = {a.x, a.y, a.z, a.w, c.x, c.y, c.z, c.w};
#pragma unroll
            for (int k = 0; k < MV_ROWS; k++)
#pragma unroll
                for (int j = 0; j < 8; j++) acc[k][t] = fmaf(w[k][j], xv[j], acc[k][t]);
        }
    }
    mv_store<NT>(job, r, acc);
}

/* Prefill tiles (n > MV_MAXT tokens): q8_0/q4_0 weights against 8-bit
 * activations on the tensor cores, mma.sync m16n8k32 with s8 operands and
 * s32 results. One 32-value block is exactly one k-step, so each mma gives
 * the exact integer block sums of the dp4a path (q4_0 codes made signed,
 * code - 8, when loaded), scaled per block by d(w) d(x) into f32: the
 * matrix-vector arithmetic, in another f32 order. Block tile 64 rows x 64
 * tokens, four warps of 32 x 32 (2 x 4 mma tiles). Fragments are read
 * straight from global memory (each thread's words of a block are 4-byte
 * aligned); rows and tokens past the ends are clamped on load and skipped
 * on store.
 *
 * Fragment layout (PTX ISA, m16n8k32 .s8): g = lane / 4, c = lane % 4;
 * A: a0 = row g, k 4c..4c+3; a1 = row g+8, same k; a2, a3 = the same rows
 * at k + 16. B: b0 = token g, k 4c..4c+3; b1 = k + 16. C: c0/c1 = row g,
 * tokens 2c, 2c+1; c2/c3 = row g+8. */
#define MM_ROWS 64
#define MM_TOKS 64

__device__ __forceinline__ void mma_s8(int (&c)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0,
                                       unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

template <int Q4>
__global__ void __launch_bounds__(128)
    k_mm_q(const uint8_t *__restrict__ q, const __half *__restrict__ d, const int8_t *__restrict__ xq,
           const float *__restrict__ xd, int K, int M, int N, float *__restrict__ out) {
    CU_TRACE(CT_MM_Q);
    pdl_wait();
    CU_TRACE_RELEASED();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
    const int row_base = blockIdx.x * MM_ROWS + (warp >> 1) * 32, tok_base = blockIdx.y * MM_TOKS + (warp & 1) * 32;
    const int nb = K / 32;
    float acc[2][4][4];
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[mi][ni][e] = 0;
    int rows[2][2], toks[4], cols[4][2];
#pragma unroll
    for (int mi = 0; mi < 2; mi++) {
        rows[mi][0] = min(row_base + mi * 16 + g, M - 1);
        rows[mi][1] = min(row_base + mi * 16 + g + 8, M - 1);
    }
#pragma unroll
    for (int ni = 0; ni < 4; ni++) {
        toks[ni] = min(tok_base + ni * 8 + g, N - 1);
        cols[ni][0] = min(tok_base + ni * 8 + 2 * c, N - 1);
        cols[ni][1] = min(tok_base + ni * 8 + 2 * c + 1, N - 1);
    }
    for (int b = 0; b < nb; b++) {
        unsigned a[2][4];
        float dw[2][2];
#pragma unroll
        for (int mi = 0; mi < 2; mi++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const size_t blk = (size_t)rows[mi][h] * nb + b;
                if (Q4) {
                    const unsigned w = __ldg((const unsigned *)(q + blk * 16) + c);
                    a[mi][h] = __vsub4(w & 0x0F0F0F0Fu, 0x08080808u);
                    a[mi][h + 2] = __vsub4((w >> 4) & 0x0F0F0F0Fu, 0x08080808u);
                } else {
                    a[mi][h] = __ldg((const unsigned *)(q + blk * 32) + c);
                    a[mi][h + 2] = __ldg((const unsigned *)(q + blk * 32) + 4 + c);
                }
                dw[mi][h] = __half2float(d[blk]);
            }
#pragma unroll
        for (int ni = 0; ni < 4; ni++) {
            const unsigned *xv = (const unsigned *)(xq + (size_t)toks[ni] * K + (size_t)b * 32);
            const unsigned b0 = __ldg(xv + c), b1 = __ldg(xv + 4 + c);
            const float dx0 = __ldg(xd + (size_t)cols[ni][0] * nb + b), dx1 = __ldg(xd + (size_t)cols[ni][1] * nb + b);
#pragma unroll
            for (int mi = 0; mi < 2; mi++) {
                int r[4] = {0, 0, 0, 0};
                mma_s8(r, a[mi][0], a[mi][1], a[mi][2], a[mi][3], b0, b1);
                acc[mi][ni][0] += dw[mi][0] * dx0 * (float)r[0];
                acc[mi][ni][1] += dw[mi][0] * dx1 * (float)r[1];
                acc[mi][ni][2] += dw[mi][1] * dx0 * (float)r[2];
                acc[mi][ni][3] += dw[mi][1] * dx1 * (float)r[3];
            }
        }
    }
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int row = row_base + mi * 16 + g + (e >= 2 ? 8 : 0), tok = tok_base + ni * 8 + 2 * c + (e & 1);
                if (row < M && tok < N) out[(size_t)tok * M + row] = acc[mi][ni][e];
            }
}

/* The same products staged through shared memory (the prefill kernel when
 * K is a multiple of 32 MMT_KS): block tile MMT_BM rows x MMT_BN tokens,
 * eight warps of 64 x 32, and per pipeline stage MMT_KS 32-value blocks of
 * codes and scales copied with cp.async, MMT_STAGES stages in flight, so
 * each weight and activation byte crosses from global memory once per
 * block tile and the tensor cores are fed from shared memory. Rows of
 * shared memory are padded by 16 bytes so the fragment reads of a warp
 * (8 rows x 4 words) fall into 32 distinct banks. Grid x walks the token
 * tiles, so the blocks that share a weight tile run together and read it
 * from memory once between them. Block sums become f32 with the exact
 * 2^23 trick (|sum| < 2^22) instead of the slower integer-to-float
 * conversion; scaling and summation order are those of k_mm_q. */
#define MMT_BM 128
#define MMT_BN 128
#define MMT_KS 4
#define MMT_STAGES 3
#define MMT_THREADS 256
#ifndef MMT_MINB
#define MMT_MINB 1 /* blocks per SM the register budget is sized for */
#endif

template <int Q4> struct mmt_geom {
    static constexpr int WB = Q4 ? 16 : 32;           /* code bytes per weight block */
    static constexpr int A_STRIDE = MMT_KS * WB + 16; /* smem bytes per weight row */
    static constexpr int B_STRIDE = MMT_KS * 32 + 16; /* smem bytes per token */
    static constexpr int A_BYTES = MMT_BM * A_STRIDE;
    static constexpr int B_BYTES = MMT_BN * B_STRIDE;
    static constexpr int AS_BYTES = MMT_BM * MMT_KS * 2; /* f16 weight scales */
    static constexpr int BS_BYTES = MMT_BN * MMT_KS * 4; /* f32 activation scales */
    static constexpr int STAGE = A_BYTES + B_BYTES + AS_BYTES + BS_BYTES;
    static constexpr int SMEM = STAGE * MMT_STAGES;
};

/* four q4_0 codes (0..15, one per byte) to the signed values code - 8:
 * the +0x78 never carries out of a byte, the xor flips the sign bit */
__device__ __forceinline__ unsigned q4_signed(unsigned nibbles) { return (nibbles + 0x78787878u) ^ 0x80808080u; }

/* Stage kb0 .. kb0 + MMT_KS - 1 of the block tile into shared memory.
 * Rows and tokens past the ends are clamped (read, never stored). */
template <int Q4>
__device__ __forceinline__ void mmt_load(uint8_t *st, const uint8_t *__restrict__ q, const __half *__restrict__ d,
                                         const int8_t *__restrict__ xq, const float *__restrict__ xd, int nb, int M,
                                         int N, int m0, int n0, int kb0) {
    typedef mmt_geom<Q4> G;
    uint8_t *A = st, *B = st + G::A_BYTES, *As = B + G::B_BYTES, *Bs = As + G::AS_BYTES;
    const int tid = threadIdx.x;
    constexpr int ACH = MMT_KS * G::WB / 16, BCH = MMT_KS * 32 / 16; /* 16-byte chunks per row / token */
#pragma unroll
    for (int i = tid; i < MMT_BM * ACH; i += MMT_THREADS) {
        const int r = i / ACH, ch = i % ACH, row = min(m0 + r, M - 1);
        cp_async16(A + r * G::A_STRIDE + ch * 16, q + ((size_t)row * nb + kb0) * G::WB + ch * 16);
    }
#pragma unroll
    for (int i = tid; i < MMT_BN * BCH; i += MMT_THREADS) {
        const int t = i / BCH, ch = i % BCH, tok = min(n0 + t, N - 1);
        cp_async16(B + t * G::B_STRIDE + ch * 16, xq + ((size_t)tok * nb + kb0) * 32 + ch * 16);
    }
    if (tid < MMT_BM) {
        const int row = min(m0 + tid, M - 1);
        cp_async8(As + tid * MMT_KS * 2, d + (size_t)row * nb + kb0);
    } else if (tid < MMT_BM + MMT_BN) {
        const int t = tid - MMT_BM, tok = min(n0 + t, N - 1);
        cp_async16(Bs + t * MMT_KS * 4, xd + (size_t)tok * nb + kb0);
    }
}

template <int Q4>
__global__ void __launch_bounds__(MMT_THREADS, MMT_MINB)
    k_mm_tiled(const uint8_t *__restrict__ q, const __half *__restrict__ d, const int8_t *__restrict__ xq,
               const float *__restrict__ xd, int K, int M, int N, float *__restrict__ out) {
    CU_TRACE(CT_MM_TILED);
    pdl_wait();
    CU_TRACE_RELEASED();
    typedef mmt_geom<Q4> G;
    extern __shared__ __align__(16) uint8_t mmt_smem[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c = lane & 3;
    const int wm = warp >> 2, wn = warp & 3; /* 2 x 4 warps of 64 rows x 32 tokens */
    const int n0 = blockIdx.x * MMT_BN, m0 = blockIdx.y * MMT_BM;
    const int nb = K / 32, nsteps = nb / MMT_KS;
    float acc[4][4][4];
#pragma unroll
    for (int mt = 0; mt < 4; mt++)
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[mt][nt][e] = 0;
#pragma unroll
    for (int s = 0; s < MMT_STAGES - 1; s++) {
        if (s < nsteps) mmt_load<Q4>(mmt_smem + s * G::STAGE, q, d, xq, xd, nb, M, N, m0, n0, s * MMT_KS);
        cp_async_commit();
    }
    for (int step = 0; step < nsteps; step++) {
        /* this step's stage has landed, and every warp is done with the
         * stage the next load overwrites (it was read last iteration) */
        cp_async_wait<MMT_STAGES - 2>();
        __syncthreads();
        const int nxt = step + MMT_STAGES - 1;
        if (nxt < nsteps) mmt_load<Q4>(mmt_smem + (nxt % MMT_STAGES) * G::STAGE, q, d, xq, xd, nb, M, N, m0, n0, nxt * MMT_KS);
        cp_async_commit();
        const uint8_t *A = mmt_smem + (step % MMT_STAGES) * G::STAGE, *B = A + G::A_BYTES;
        const __half *As = (const __half *)(B + G::B_BYTES);
        const float *Bs = (const float *)((const uint8_t *)As + G::AS_BYTES);
#pragma unroll
        for (int kb = 0; kb < MMT_KS; kb++) {
            /* activation fragments of all four token tiles stay in
             * registers; weight fragments are read one row tile at a time
             * (fewer live registers: two blocks per SM without spills) */
            unsigned bf[4][2];
            float dx[4][2];
#pragma unroll
            for (int nt = 0; nt < 4; nt++) {
                const uint8_t *br = B + (wn * 32 + nt * 8 + g) * G::B_STRIDE + kb * 32;
                bf[nt][0] = *(const unsigned *)(br + 4 * c);
                bf[nt][1] = *(const unsigned *)(br + 16 + 4 * c);
                dx[nt][0] = Bs[(wn * 32 + nt * 8 + 2 * c) * MMT_KS + kb];
                dx[nt][1] = Bs[(wn * 32 + nt * 8 + 2 * c + 1) * MMT_KS + kb];
            }
#pragma unroll
            for (int mt = 0; mt < 4; mt++) {
                unsigned a[4];
                float dw[2];
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int r = wm * 64 + mt * 16 + g + 8 * h;
                    const uint8_t *ar = A + r * G::A_STRIDE + kb * G::WB;
                    if (Q4) {
                        const unsigned w = *(const unsigned *)(ar + 4 * c);
                        a[h] = q4_signed(w & 0x0F0F0F0Fu);
                        a[h + 2] = q4_signed((w >> 4) & 0x0F0F0F0Fu);
                    } else {
                        a[h] = *(const unsigned *)(ar + 4 * c);
                        a[h + 2] = *(const unsigned *)(ar + 16 + 4 * c);
                    }
                    dw[h] = __half2float(As[r * MMT_KS + kb]);
                }
#pragma unroll
                for (int nt = 0; nt < 4; nt++) {
                    int r[4] = {0, 0, 0, 0};
                    mma_s8(r, a[0], a[1], a[2], a[3], bf[nt][0], bf[nt][1]);
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const float f = __int_as_float(r[e] + 0x4B400000) - 12582912.0f; /* exact: |r| < 2^22 */
                        acc[mt][nt][e] += dw[e >> 1] * dx[nt][e & 1] * f;
                    }
                }
            }
        }
    }
    cp_async_wait<0>(); /* no copy may still target shared memory at exit */
#pragma unroll
    for (int mt = 0; mt < 4; mt++)
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int row = m0 + wm * 64 + mt * 16 + g + (e >= 2 ? 8 : 0), tok = n0 + wn * 32 + nt * 8 + 2 * c + (e & 1);
                if (row < M && tok < N) out[(size_t)tok * M + row] = acc[mt][nt][e];
            }
}

/* ---- row-exact small tiles on the tensor cores ----
 * k_vr_q: 2 .. MV_MAXT tokens of q8_0/q4_0 products (MTP verification
 * rounds; later batched decode) with each (row, token) equal, bit for bit,
 * to k_mv_q's one-token product of that token. k_mv_q's arithmetic: lane L
 * of part P sums the blocks b = 32P + L + 32 SP m in order of m, each as
 * acc = fma(dw * dx, (float)block_sum, acc) from acc = 0; the 32 lanes meet
 * in warp_sum's butterfly (partners 16, 8, 4, 2, 1), the parts in order
 * (p0 + p1) + p2 ..., and a split row's sum then passes once more through
 * warp_sum with zeros (v + 0). k_mv_q repeats the integer work per token,
 * which bounds it at several tokens; here the block sums come from
 * mma.sync m16n8k32 (s8 operands, exact like dp4a: one 32-value block is
 * one k step, q4_0 codes made signed) and only the f32 steps run per
 * (row, token), in k_mv_q's order: a CTA owns VR_ROWS rows, its VR_WARPS
 * warps each own the lane classes L = w + VR_WARPS i (i < VR_CPW) of every
 * part with one accumulator per class, so a class's chain is one register's
 * chain; warp_sum's partners 16 .. VR_WARPS pair classes of one thread
 * (vr_tree over i), partners below pair warps (vr_tree over w, through
 * shared memory). A split row's SP parts go to SP CTAs of the tile
 * (blockIdx.x = tile * SP + part: a short row of tiles alone would leave
 * multiprocessors idle), each writing its part's sums to job.vr_part; the
 * tile's last CTA to finish (job.vr_done) adds them in k_mv_q's order, so
 * which CTA finishes last never shows in the bits. A part's blocks stream
 * through a cp.async pipeline of VR_ST stages of half a 32-block chunk (16
 * blocks: lanes 0-15 or 16-31), weights, codes and scales alike, so the
 * weights are read once per tile and the loads of three stages are in
 * flight per CTA. The
 * activations go through L1 (every CTA reads all of them: from L2 alone
 * they were a hot spot that halved the product's speed); tokens past nt
 * are never loaded, their columns never stored.
 * Pair mode (gate/up with the GELU gating): rows 0-7 of the tile are gate
 * rows, 8-15 the same up rows.
 * Needs nb = K / 32 a multiple of 8 (16-byte aligned scale rows) and, when
 * SP > 1, every part some blocks (nb >= 32 SP); mv_run checks both. */
#ifndef VR_MT
#define VR_MT 2 /* m16 tiles per CTA, VR_WARPS warps each: they share the activation stages */
#endif
#define VR_ROWS (16 * VR_MT) /* weight rows per CTA */
#define VR_WARPS 4           /* warps per m16 tile */
#define VR_THREADS (VR_WARPS * 32 * VR_MT)
#define VR_CPW (32 / VR_WARPS) /* lane classes per warp and part */
#define VR_CH 16               /* blocks per pipeline stage */
#ifndef VR_MIN_ROWS
#define VR_MIN_ROWS 5 /* fewer tokens take k_mv_q (mv_run) */
#endif
#ifndef VR_ST
#define VR_ST 4 /* pipeline stages (a tuning build may set it) */
#endif
#define VR_BS_STRIDE 20 /* floats per token of a stage's scales: conflict-free, 16-byte rows */

template <int Q4, int NTT> struct vr_geom {
    static constexpr int WB = Q4 ? 16 : 32;
    static constexpr int NTOK = 8 * NTT;
    static constexpr int A_STRIDE = VR_CH * WB + 16; /* conflict-free 32-bit fragment reads */
    static constexpr int B_STRIDE = VR_CH * 32 + 16;
    static constexpr int A_BYTES = VR_ROWS * A_STRIDE;
    static constexpr int B_BYTES = NTOK * B_STRIDE;
    static constexpr int AS_BYTES = VR_ROWS * VR_CH * 2;
    static constexpr int BS_BYTES = NTOK * VR_BS_STRIDE * 4;
    static constexpr int STAGE = A_BYTES + B_BYTES + AS_BYTES + BS_BYTES;
    static constexpr int RED_BYTES = VR_WARPS * VR_ROWS * NTOK * 4; /* [m tile][warp][row][token] */
    static constexpr int SMEM = STAGE * VR_ST + RED_BYTES;
};

/* warp_sum's pairing over N values indexed by the partners' lane bits:
 * v[i] + v[i + o] for o = N/2 .. 1 (float addition commutes, so only the
 * pairing matters); v[0] is the sum */
template <int N> __device__ __forceinline__ float vr_tree(float (&v)[N]) {
#pragma unroll
    for (int o = N / 2; o >= 1; o >>= 1)
#pragma unroll
        for (int i = 0; i < o; i++) v[i] = v[i] + v[i + o];
    return v[0];
}

/* Stage s of the stream: part-major, then global half-chunk index gh (16
 * blocks from 16 gh; part P owns gh = 2P, 2P + 1 mod 2 SP) ascending.
 * begin[P]: the part's first stage. */
template <int SP> struct vr_stream {
    int begin[SP + 1];
    /* begin[i] by selects (a run-time index would put the array in local memory) */
    __device__ __forceinline__ int first(int i) const {
        int v = begin[0];
#pragma unroll
        for (int p = 1; p <= SP; p++) v = i == p ? begin[p] : v;
        return v;
    }
    __device__ vr_stream(int nb) {
        const int H = (nb + VR_CH - 1) / VR_CH;
        begin[0] = 0;
#pragma unroll
        for (int P = 0; P < SP; P++) {
            int cnt = 0;
#pragma unroll
            for (int r = 2 * P; r <= 2 * P + 1; r++) cnt += r < H ? (H - r + 2 * SP - 1) / (2 * SP) : 0;
            begin[P + 1] = begin[P] + cnt;
        }
    }
    /* the part of stage s, its half (k & 1) and first block */
    __device__ __forceinline__ void at(int s, int &P, int &half, int &b0) const {
        P = 0;
#pragma unroll
        for (int p = 1; p < SP; p++) P += s >= begin[p];
        const int k = s - first(P);
        half = k & 1;
        b0 = VR_CH * (2 * P + half + 2 * SP * (k >> 1));
    }
};

/* The weight rows of a CTA: tile row r is row row(r) of matrix q/d[(r & 8)
 * != 0] (the same matrix twice but in pair mode, where rows 0-7 of each m16
 * tile are gate rows and 8-15 the same up rows); computed, not tabled (a
 * table indexed per thread would live in local memory). */
struct vr_rows {
    const uint8_t *q[2];
    const __half *d[2];
    int r0, M, pair;
    __device__ __forceinline__ int row(int r) const { return min(r0 + (pair ? 8 * (r >> 4) + (r & 7) : r), M - 1); }
};

template <int Q4, int NTT>
__device__ __forceinline__ void vr_load(uint8_t *st, const vr_rows &W, const int8_t *__restrict__ xq,
                                        const float *__restrict__ xd, int nb, int K, int nt, int b0) {
    typedef vr_geom<Q4, NTT> G;
    uint8_t *A = st, *B = st + G::A_BYTES, *As = B + G::B_BYTES, *Bs = As + G::AS_BYTES;
    const int tid = threadIdx.x;
    constexpr int ACH = VR_CH * G::WB / 16, BCH = VR_CH * 32 / 16; /* 16-byte chunks per row / token */
#pragma unroll
    for (int i = tid; i < VR_ROWS * ACH; i += VR_THREADS) {
        const int r = i / ACH, ch = i % ACH;
        if (b0 + ch * 16 / G::WB < nb)
            cp_async16(A + r * G::A_STRIDE + ch * 16, ((r & 8) ? W.q[1] : W.q[0]) + ((size_t)W.row(r) * nb + b0) * G::WB + ch * 16);
    }
#pragma unroll
    for (int i = tid; i < G::NTOK * BCH; i += VR_THREADS) {
        const int t = i / BCH, ch = i % BCH;
        if (t < nt && b0 + ch / 2 < nb)
            cp_async16_ca(B + t * G::B_STRIDE + ch * 16, xq + (size_t)t * K + (size_t)b0 * 32 + ch * 16);
    }
    const int i = tid;
    if (i < VR_ROWS * 2) { /* weight scales: 8 blocks per chunk */
        const int r = i >> 1, ch = i & 1;
        if (b0 + 8 * ch < nb) cp_async16(As + r * VR_CH * 2 + ch * 16, ((r & 8) ? W.d[1] : W.d[0]) + (size_t)W.row(r) * nb + b0 + 8 * ch);
    } else if (i < VR_ROWS * 2 + G::NTOK * 4) { /* activation scales: 4 blocks per chunk */
        const int j = i - VR_ROWS * 2, t = j >> 2, ch = j & 3;
        if (t < nt && b0 + 4 * ch < nb) cp_async16_ca(Bs + t * VR_BS_STRIDE * 4 + ch * 16, xd + (size_t)t * nb + b0 + 4 * ch);
    }
}

/* One stage's blocks for this warp: local blocks w + VR_WARPS j (j < 4),
 * classes HALF * 4 + j, into acc. */
template <int Q4, int NTT, int HALF>
__device__ __forceinline__ void vr_stage(const uint8_t *st, int b0, int nb, float (&acc)[VR_CPW][NTT][4]) {
    typedef vr_geom<Q4, NTT> G;
    static_assert(VR_CPW / 2 * VR_WARPS == VR_CH, "a stage is half of every warp's classes");
    const int lane = threadIdx.x & 31, w = (threadIdx.x >> 5) % VR_WARPS, mt = threadIdx.x / (VR_WARPS * 32);
    const int g = lane >> 2, c = lane & 3;
    const uint8_t *A = st + 16 * mt * G::A_STRIDE, *B = st + G::A_BYTES;
    const __half *As = (const __half *)(B + G::B_BYTES) + 16 * mt * VR_CH;
    const float *Bs = (const float *)(st + G::A_BYTES + G::B_BYTES + G::AS_BYTES);
#pragma unroll
    for (int j = 0; j < VR_CPW / 2; j++) {
        const int lb = w + VR_WARPS * j;
        if (b0 + lb >= nb) break; /* the same for the whole warp */
        const uint8_t *ar = A + g * G::A_STRIDE + lb * G::WB;
        unsigned a0, a1, a2, a3;
        if (Q4) {
            const unsigned wa = *(const unsigned *)(ar + 4 * c), wb = *(const unsigned *)(ar + 8 * G::A_STRIDE + 4 * c);
            a0 = q4_signed(wa & 0x0F0F0F0Fu), a2 = q4_signed((wa >> 4) & 0x0F0F0F0Fu);
            a1 = q4_signed(wb & 0x0F0F0F0Fu), a3 = q4_signed((wb >> 4) & 0x0F0F0F0Fu);
        } else {
            a0 = *(const unsigned *)(ar + 4 * c), a2 = *(const unsigned *)(ar + 16 + 4 * c);
            a1 = *(const unsigned *)(ar + 8 * G::A_STRIDE + 4 * c), a3 = *(const unsigned *)(ar + 8 * G::A_STRIDE + 16 + 4 * c);
        }
        const float dw[2] = {__half2float(As[g * VR_CH + lb]), __half2float(As[(g + 8) * VR_CH + lb])};
#pragma unroll
        for (int nt = 0; nt < NTT; nt++) {
            const uint8_t *br = B + (nt * 8 + g) * G::B_STRIDE + lb * 32;
            const unsigned x0 = *(const unsigned *)(br + 4 * c), x1 = *(const unsigned *)(br + 16 + 4 * c);
            const float dx[2] = {Bs[(nt * 8 + 2 * c) * VR_BS_STRIDE + lb], Bs[(nt * 8 + 2 * c + 1) * VR_BS_STRIDE + lb]};
            /* the accumulator starts at the bits of 1.5 * 2^23, so the
             * block sum r lands in the mantissa: (float)r is then one
             * subtraction, exactly (|r| < 2^22), and no integer add runs
             * per (row, token) */
            int r[4] = {0x4B400000, 0x4B400000, 0x4B400000, 0x4B400000};
            mma_s8(r, a0, a1, a2, a3, x0, x1);
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const float f = __int_as_float(r[e]) - 12582912.0f;
                float &a = acc[HALF * (VR_CPW / 2) + j][nt][e];
                a = __fmaf_rn(__fmul_rn(dw[e >> 1], dx[e & 1]), f, a); /* k_mv_q's step */
            }
        }
    }
}

template <int Q4, int NTT, int SP>
/* at most 128 registers, so 16 warps fit an SM where shared memory allows
 * (q8_0 with 9-16 tokens needs about 116 KiB a CTA: one per SM) */
__global__ void __launch_bounds__(VR_THREADS, 4 / VR_MT)
    k_vr_q(mv_job job, const int8_t *__restrict__ xq, const float *__restrict__ xd, int K, int nt) {
    CU_TRACE(CT_VR_Q);
    pdl_wait();
    CU_TRACE_RELEASED();
    typedef vr_geom<Q4, NTT> G;
    constexpr int NTOK = G::NTOK;
    extern __shared__ __align__(16) uint8_t vr_sh[];
    float *red = (float *)(vr_sh + G::STAGE * VR_ST); /* [warp][row][token] */
    /* this CTA's tile, part, matrix and rows (selects, never
     * job.m[runtime index]) */
    const int tile = blockIdx.x / SP, part = blockIdx.x % SP;
    int bid = tile, mi = 0;
    if (job.count > 1 && bid >= job.m[0].blocks) bid -= job.m[0].blocks, mi = 1;
    if (job.count > 2 && mi == 1 && bid >= job.m[1].blocks) bid -= job.m[1].blocks, mi = 2;
    const int M = mi == 0 ? job.m[0].M : mi == 1 ? job.m[1].M : job.m[2].M;
    float *out = mi == 0 ? job.m[0].out : mi == 1 ? job.m[1].out : job.m[2].out;
    const uint8_t *mq = (const uint8_t *)(mi == 0 ? job.m[0].q : mi == 1 ? job.m[1].q : job.m[2].q);
    const __half *md = mi == 0 ? job.m[0].d : mi == 1 ? job.m[1].d : job.m[2].d;
    const int r0 = bid * (job.pair ? VR_ROWS / 2 : VR_ROWS);
    vr_rows W;
    W.q[0] = job.pair ? (const uint8_t *)job.m[0].q : mq, W.q[1] = job.pair ? (const uint8_t *)job.m[1].q : mq;
    W.d[0] = job.pair ? job.m[0].d : md, W.d[1] = job.pair ? job.m[1].d : md;
    W.r0 = r0, W.M = M, W.pair = job.pair;
    const int nb = K / 32, tid = threadIdx.x, lane = tid & 31, g = lane >> 2, c = lane & 3;
    const int w = (tid >> 5) % VR_WARPS, mt = tid / (VR_WARPS * 32); /* class owner, m16 tile */
    const vr_stream<SP> sm(nb);
    const int s0 = sm.first(part), s1 = sm.first(part + 1); /* this part's stages */
    float acc[VR_CPW][NTT][4];
#pragma unroll
    for (int i = 0; i < VR_CPW; i++)
#pragma unroll
        for (int t = 0; t < NTT; t++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][t][e] = 0;
    /* this thread's outputs: m16 tile omt, its row orow and the row 8
     * below, token otok */
    const int omt = tid / (8 * NTOK), orow = tid % (8 * NTOK) / NTOK, otok = tid % NTOK;
    const bool outs = tid < VR_MT * 8 * NTOK;
    float tot[2] = {0, 0};
#pragma unroll
    for (int s = 0; s < VR_ST - 1; s++) {
        if (s0 + s < s1) {
            int P, h, b0;
            sm.at(s0 + s, P, h, b0);
            vr_load<Q4, NTT>(vr_sh + s * G::STAGE, W, xq, xd, nb, K, nt, b0);
        }
        cp_async_commit();
    }
    for (int s = s0; s < s1; s++) {
        cp_async_wait<VR_ST - 2>();
        __syncthreads(); /* stage s landed for all; stage s - 1 is read by nobody */
        const int nx = s + VR_ST - 1;
        if (nx < s1) {
            int P, h, b0;
            sm.at(nx, P, h, b0);
            vr_load<Q4, NTT>(vr_sh + ((nx - s0) % VR_ST) * G::STAGE, W, xq, xd, nb, K, nt, b0);
        }
        cp_async_commit();
        int P, h, b0;
        sm.at(s, P, h, b0);
        const uint8_t *st = vr_sh + ((s - s0) % VR_ST) * G::STAGE;
        if (h == 0) vr_stage<Q4, NTT, 0>(st, b0, nb, acc);
        else vr_stage<Q4, NTT, 1>(st, b0, nb, acc);
    }
    cp_async_wait<0>(); /* no copy may still target shared memory at exit */
#pragma unroll
    for (int t = 0; t < NTT; t++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float v[VR_CPW];
#pragma unroll
            for (int i = 0; i < VR_CPW; i++) v[i] = acc[i][t][e];
            red[((mt * VR_WARPS + w) * 16 + g + 8 * (e >> 1)) * NTOK + t * 8 + 2 * c + (e & 1)] = vr_tree(v);
        }
    __syncthreads();
    if (outs)
#pragma unroll
        for (int k = 0; k < 2; k++) {
            float v[VR_WARPS];
#pragma unroll
            for (int q = 0; q < VR_WARPS; q++) v[q] = red[((omt * VR_WARPS + q) * 16 + orow + 8 * k) * NTOK + otok];
            tot[k] = vr_tree(v);
        }
    if (SP > 1) {
        /* slot of (row 16 omt + orow + 8 k, token otok) in this tile's part */
        float *pt = job.vr_part + (size_t)tile * SP * VR_ROWS * NTOK;
        const int slot = (16 * omt + orow) * NTOK + otok;
        if (outs) pt[part * VR_ROWS * NTOK + slot] = tot[0], pt[part * VR_ROWS * NTOK + slot + 8 * NTOK] = tot[1];
        __threadfence(); /* the sums are visible before the count says so */
        __syncthreads();
        __shared__ int last;
        if (tid == 0) {
            last = atomicAdd(job.vr_done + tile, 1u) == (unsigned)(SP - 1);
            if (last) job.vr_done[tile] = 0; /* every part has counted: ready for the next launch */
        }
        __syncthreads();
        if (!last) return;
        __threadfence(); /* the other parts' sums, written before their counts */
        if (outs)
#pragma unroll
            for (int k = 0; k < 2; k++) {
                float v = __ldcg(pt + slot + 8 * NTOK * k); /* k_mv_q's order: (p0 + p1) + p2 ... */
#pragma unroll
                for (int p = 1; p < SP; p++) v = v + __ldcg(pt + p * VR_ROWS * NTOK + slot + 8 * NTOK * k);
                tot[k] = v + 0.0f; /* k_mv_q's closing warp_sum with zeros */
            }
    }
    if (!outs || otok >= nt) return;
    if (job.pair) {
        const int row = r0 + 8 * omt + orow;
        if (row < M) out[(size_t)otok * M + row] = gelu_tanh_f(tot[0]) * tot[1];
    } else {
#pragma unroll
        for (int k = 0; k < 2; k++) {
            const int row = r0 + 16 * omt + orow + 8 * k;
            if (row < M) out[(size_t)otok * M + row] = tot[k];
        }
    }
}

typedef void (*vr_fn)(mv_job, const int8_t *, const float *, int, int);
#define VR_TABLE(Q4) {{k_vr_q<Q4, 1, 1>, k_vr_q<Q4, 1, 2>, k_vr_q<Q4, 1, 4>}, {k_vr_q<Q4, 2, 1>, k_vr_q<Q4, 2, 2>, k_vr_q<Q4, 2, 4>}}
static const vr_fn vr_q[2][2][3] = {VR_TABLE(0), VR_TABLE(1)}; /* [q4][ntt - 1][sp 1, 2, 4] */
static_assert(sizeof vr_q / sizeof(vr_fn) == 12, "mmh_allow opts every entry in");
template <int Q4, int NTT> static size_t vr_smem_of() { return (size_t)vr_geom<Q4, NTT>::SMEM; }
static size_t vr_smem(int q4, int ntt) {
    return q4 ? (ntt == 1 ? vr_smem_of<1, 1>() : vr_smem_of<1, 2>()) : (ntt == 1 ? vr_smem_of<0, 1>() : vr_smem_of<0, 2>());
}

/* ---- prefill products on f16 tensor cores ----
 * k_mm_h: q8_0/q4_0 weights times f16 activations, mma.sync m16n8k16 with
 * f32 accumulation. The weight codes are staged as stored (cp.async, the
 * cp.async pipeline of k_mm_tiled, ST stages) and expanded to f16 in registers right
 * before the product: code - offset by the 0x6400 exponent trick (exact),
 * times the block scale (one f16 rounding, relative 2^-11). The per-block
 * scaling is thus folded into the operand, and the tensor cores accumulate
 * a whole row without the f32 work per 32-value block that bounds the
 * integer kernel. Operand ranges: a weight's scales are multiplied by 2^we
 * (chosen at load from its largest scale, so |code x scale| < 2^15) and a
 * token's activations by 2^ea (k_act_f16, largest |x| below 2^15): no f16
 * overflow for any file, and a tensor of uniformly tiny (or huge) values
 * keeps f16's full precision (only values some 2^28 below their weight's
 * or token's largest fall into f16 subnormals); the epilogue multiplies by
 * 2^-(we + ea), all exact.
 * K order: within each group of four values k, the activations are stored
 * as k+0, k+2, k+1, k+3 (k_act_f16), the order in which a lane's 32-bit
 * word of codes expands into f16 pairs; A and B agree, so every product
 * pairs the same k. Numerics differ from the 8-bit-activation kernels:
 * relative 2^-11 per activation and per weight instead of a per-block 8-bit
 * code (cuda_ops bounds it). */
#define MMH_BM 128
#define MMH_BN 128
#define MMH_THREADS 256

template <int Q4> struct mmh_geom {
    static constexpr int WB = Q4 ? 16 : 32;           /* code bytes per weight block */
    static constexpr int A_STRIDE = MMT_KS * WB + 16; /* conflict-free 32-bit fragment loads */
    static constexpr int B_STRIDE = MMT_KS * 64 + 32; /* bytes per token: conflict-free 64-bit loads */
    static constexpr int A_BYTES = MMH_BM * A_STRIDE;
    static constexpr int B_BYTES = MMH_BN * B_STRIDE;
    static constexpr int AS_BYTES = MMH_BM * MMT_KS * 2;
    static constexpr int STAGE = A_BYTES + B_BYTES + AS_BYTES;
};

/* Per token: the power of two bringing its largest |x| into [2^14, 2^15),
 * applied while converting to f16 in the K order above; xinv = its inverse.
 * m: the row's largest |x| in this thread (the block reduces it). */
__device__ __forceinline__ void act_f16_row(const float *r, int K, float m, __half *o, float *xinv, int order) {
    __shared__ float red[32];
    m = warp_max(m);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = m;
    __syncthreads();
    m = red[0];
    for (int j = 1; j < (int)(blockDim.x >> 5); j++) m = fmaxf(m, red[j]);
    int e = 0;
    if (m > 0 && isfinite(m)) {
        int ex;
        frexpf(m, &ex); /* m < 2^ex */
        e = min(max(15 - ex, -120), 120);
    }
    const float s = ldexpf(1.0f, e);
    if (order == 0) {
        for (int i = threadIdx.x * 4; i < K; i += blockDim.x * 4) {
            const float4 v = *(const float4 *)(r + i);
            *(__half2 *)(o + i) = __floats2half2_rn(v.x * s, v.z * s);
            *(__half2 *)(o + i + 2) = __floats2half2_rn(v.y * s, v.w * s);
        }
    } else { /* k_mm_w: per 16 values the even k, then the odd k */
        for (int i = threadIdx.x * 16; i < K; i += blockDim.x * 16) {
            float v[16];
#pragma unroll
            for (int j = 0; j < 4; j++) *(float4 *)(v + 4 * j) = *(const float4 *)(r + i + 4 * j);
#pragma unroll
            for (int j = 0; j < 4; j++) {
                *(__half2 *)(o + i + 2 * j) = __floats2half2_rn(v[4 * j] * s, v[4 * j + 2] * s);
                *(__half2 *)(o + i + 8 + 2 * j) = __floats2half2_rn(v[4 * j + 1] * s, v[4 * j + 3] * s);
            }
        }
    }
    if (threadIdx.x == 0) *xinv = ldexpf(1.0f, -e);
}

__global__ void k_act_f16(const float *x, int K, __half *xh, float *xinv, int order) {
    CU_TRACE(CT_ACT_F16);
    pdl_wait();
    CU_TRACE_RELEASED();
    const float *r = x + (size_t)blockIdx.x * K;
    float m = 0;
    for (int i = threadIdx.x * 4; i < K; i += blockDim.x * 4) {
        const float4 v = *(const float4 *)(r + i);
        m = fmaxf(m, fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w))));
    }
    act_f16_row(r, K, m, xh + (size_t)blockIdx.x * K, xinv + blockIdx.x, order);
}

/* Prefill tiles (the default since its measurement,
 * bench/results/cuda-variants-2026-12-03c.json): gelu(gate) x up of a
 * token row into out (k_geglu's arithmetic) and, in the same launch, its
 * f16 activations for the down product (k_act_f16's): the row is read back
 * from L2 right after it is written instead of from HBM by a second
 * kernel. The max reduction's barrier orders this block's writes of out
 * before it reads them. */
__global__ void k_geglu_f16(const float *g, const float *u, int K, float *out, __half *xh, float *xinv, int order) {
    CU_TRACE(CT_GEGLU_F16);
    pdl_wait();
    CU_TRACE_RELEASED();
    const size_t base = (size_t)blockIdx.x * K;
    float m = 0;
    for (int i = threadIdx.x * 4; i < K; i += blockDim.x * 4) {
        const float4 a = *(const float4 *)(g + base + i), b = *(const float4 *)(u + base + i);
        const float4 y = make_float4(gelu_tanh_f(a.x) * b.x, gelu_tanh_f(a.y) * b.y, gelu_tanh_f(a.z) * b.z,
                                     gelu_tanh_f(a.w) * b.w);
        *(float4 *)(out + base + i) = y;
        m = fmaxf(m, fmaxf(fmaxf(fabsf(y.x), fabsf(y.y)), fmaxf(fabsf(y.z), fabsf(y.w))));
    }
    act_f16_row(out + base, K, m, xh + base, xinv + blockIdx.x, order);
}

template <int Q4>
__device__ __forceinline__ void mmh_load(uint8_t *st, const uint8_t *__restrict__ q, const __half *__restrict__ d,
                                         const __half *__restrict__ xh, int nb, int M, int N, int m0, int n0, int kb0) {
    typedef mmh_geom<Q4> G;
    uint8_t *A = st, *B = st + G::A_BYTES, *As = B + G::B_BYTES;
    const int tid = threadIdx.x;
    constexpr int ACH = MMT_KS * G::WB / 16, BCH = MMT_KS * 64 / 16;
#pragma unroll
    for (int i = tid; i < MMH_BM * ACH; i += MMH_THREADS) {
        const int r = i / ACH, ch = i % ACH, row = min(m0 + r, M - 1);
        cp_async16(A + r * G::A_STRIDE + ch * 16, q + ((size_t)row * nb + kb0) * G::WB + ch * 16);
    }
#pragma unroll
    for (int i = tid; i < MMH_BN * BCH; i += MMH_THREADS) {
        const int t = i / BCH, ch = i % BCH, tok = min(n0 + t, N - 1);
        cp_async16(B + t * G::B_STRIDE + ch * 16, (const uint8_t *)(xh + ((size_t)tok * nb + kb0) * 32) + ch * 16);
    }
    if (tid < MMH_BM) {
        const int row = min(m0 + tid, M - 1);
        cp_async8(As + tid * MMT_KS * 2, d + (size_t)row * nb + kb0);
    }
}

/* Two f16 values 1024 + u (u a byte or nibble placed in each half's low
 * mantissa bits by the caller) minus `off`, times the scale: exact codes,
 * one rounding. */
__device__ __forceinline__ unsigned mmh_expand(unsigned bits, __half2 off, __half2 scale) {
    __half2 h = *(__half2 *)&bits;
    h = __hmul2(__hsub2(h, off), scale);
    return *(unsigned *)&h;
}

/* Row half h (0: row g, 1: row g + 8) of a lane's A fragments for one
 * 32-value block at ar: f[s] is k16 step s (the low / high nibbles of q4_0,
 * the first / second 16 codes of q8_0), in the K order described above.
 * k_mm_h and k_mm_w share it, so both see the same operands. */
template <int Q4>
__device__ __forceinline__ void mmh_expand_row(unsigned (&f)[2][4], int h, const uint8_t *ar, int c, __half2 off,
                                               __half2 sc) {
    if (Q4) {
        const unsigned w = *(const unsigned *)(ar + 4 * c);
        f[0][h] = mmh_expand((w & 0x000F000Fu) | 0x64006400u, off, sc);
        f[0][h + 2] = mmh_expand(((w >> 8) & 0x000F000Fu) | 0x64006400u, off, sc);
        f[1][h] = mmh_expand(((w >> 4) & 0x000F000Fu) | 0x64006400u, off, sc);
        f[1][h + 2] = mmh_expand(((w >> 12) & 0x000F000Fu) | 0x64006400u, off, sc);
    } else {
        const unsigned w0 = *(const unsigned *)(ar + 4 * c) ^ 0x80808080u;
        const unsigned w1 = *(const unsigned *)(ar + 16 + 4 * c) ^ 0x80808080u;
        f[0][h] = mmh_expand(__byte_perm(w0, 0x64646464u, 0x4240), off, sc);
        f[0][h + 2] = mmh_expand(__byte_perm(w0, 0x64646464u, 0x4341), off, sc);
        f[1][h] = mmh_expand(__byte_perm(w1, 0x64646464u, 0x4240), off, sc);
        f[1][h + 2] = mmh_expand(__byte_perm(w1, 0x64646464u, 0x4341), off, sc);
    }
}

/* ST pipeline stages, 2 blocks per SM (the register budget): faster than 3
 * stages and 1 block, two blocks hiding each other's staging
 * (bench/results/cuda-variants-2026-12-03.json). */
#define MMH_ST 2
template <int Q4>
__global__ void __launch_bounds__(MMH_THREADS, 2)
    k_mm_h(const uint8_t *__restrict__ q, const __half *__restrict__ d, float wexp, const __half *__restrict__ xh,
           const float *__restrict__ xinv, int K, int M, int N, float *__restrict__ out) {
    CU_TRACE(CT_MM_H);
    pdl_wait();
    CU_TRACE_RELEASED();
    typedef mmh_geom<Q4> G;
    constexpr int ST = MMH_ST;
    extern __shared__ __align__(16) uint8_t mmh_smem[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c = lane & 3;
    const int wm = warp & 3, wn = warp >> 2; /* 4 x 2 warps of 32 rows x 64 tokens */
    const int n0 = blockIdx.x * MMH_BN, m0 = blockIdx.y * MMH_BM;
    const int nb = K / 32, nsteps = nb / MMT_KS;
    const __half wsc = __float2half_rn(wexp);
    const __half2 off = Q4 == 1 ? __half2half2(__ushort_as_half(0x6408)) : __half2half2(__ushort_as_half(0x6480));
    float acc[2][8][4];
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[mt][nt][e] = 0;
#pragma unroll
    for (int s = 0; s < ST - 1; s++) {
        if (s < nsteps) mmh_load<Q4>(mmh_smem + s * G::STAGE, q, d, xh, nb, M, N, m0, n0, s * MMT_KS);
        cp_async_commit();
    }
    for (int step = 0; step < nsteps; step++) {
        cp_async_wait<ST - 2>();
        __syncthreads();
        const int nxt = step + ST - 1;
        if (nxt < nsteps) mmh_load<Q4>(mmh_smem + (nxt % ST) * G::STAGE, q, d, xh, nb, M, N, m0, n0, nxt * MMT_KS);
        cp_async_commit();
        const uint8_t *A = mmh_smem + (step % ST) * G::STAGE, *B = A + G::A_BYTES;
        const __half *As = (const __half *)(B + G::B_BYTES);
#pragma unroll
        for (int kb = 0; kb < MMT_KS; kb++) {
            unsigned af[2][2][4]; /* [row tile][k half of the block][fragment register] */
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int r = wm * 32 + mt * 16 + g + 8 * h;
                    const uint8_t *ar = A + r * G::A_STRIDE + kb * G::WB;
                    mmh_expand_row<Q4>(af[mt], h, ar, c, off, __half2half2(__hmul(As[r * MMT_KS + kb], wsc)));
                }
#pragma unroll
            for (int nt = 0; nt < 8; nt++) {
                const uint8_t *br = B + (wn * 64 + nt * 8 + g) * G::B_STRIDE + kb * 64 + 8 * c;
                const uint2 b0 = *(const uint2 *)br, b1 = *(const uint2 *)(br + 32);
#pragma unroll
                for (int mt = 0; mt < 2; mt++) {
                    mma_f16(acc[mt][nt], af[mt][0][0], af[mt][0][1], af[mt][0][2], af[mt][0][3], b0.x, b0.y);
                    mma_f16(acc[mt][nt], af[mt][1][0], af[mt][1][1], af[mt][1][2], af[mt][1][3], b1.x, b1.y);
                }
            }
        }
    }
    cp_async_wait<0>();
    const float winv = 1.0f / wexp;
#pragma unroll
    for (int nt = 0; nt < 8; nt++)
#pragma unroll
        for (int e2 = 0; e2 < 2; e2++) {
            const int tok = n0 + wn * 64 + nt * 8 + 2 * c + e2;
            if (tok >= N) continue;
            const float s = winv * xinv[tok];
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int row = m0 + wm * 32 + mt * 16 + g + 8 * h;
                    if (row < M) out[(size_t)tok * M + row] = acc[mt][nt][2 * h + e2] * s;
                }
        }
}

typedef void (*mv_q_fn)(mv_job, const int8_t *, const float *, const int *, int);
typedef void (*mv_f_fn)(mv_job, const float *, int);

#define NT_TABLE(K, ...)                                                                                   \
    {K<__VA_ARGS__, 1>,  K<__VA_ARGS__, 2>,  K<__VA_ARGS__, 3>,  K<__VA_ARGS__, 4>,  K<__VA_ARGS__, 5>,       \
     K<__VA_ARGS__, 6>,  K<__VA_ARGS__, 7>,  K<__VA_ARGS__, 8>,  K<__VA_ARGS__, 9>,  K<__VA_ARGS__, 10>,      \
     K<__VA_ARGS__, 11>, K<__VA_ARGS__, 12>, K<__VA_ARGS__, 13>, K<__VA_ARGS__, 14>, K<__VA_ARGS__, 15>,      \
     K<__VA_ARGS__, 16>}
#define NT_TABLE_Q(Q4) NT_TABLE_QS(Q4, 1)
#define NT_TABLE_QS(Q4, SP)                                                                                     \
    {k_mv_q<Q4, 1, SP>,  k_mv_q<Q4, 2, SP>,  k_mv_q<Q4, 3, SP>,  k_mv_q<Q4, 4, SP>,  k_mv_q<Q4, 5, SP>,          \
     k_mv_q<Q4, 6, SP>,  k_mv_q<Q4, 7, SP>,  k_mv_q<Q4, 8, SP>,  k_mv_q<Q4, 9, SP>,  k_mv_q<Q4, 10, SP>,         \
     k_mv_q<Q4, 11, SP>, k_mv_q<Q4, 12, SP>, k_mv_q<Q4, 13, SP>, k_mv_q<Q4, 14, SP>, k_mv_q<Q4, 15, SP>,         \
     k_mv_q<Q4, 16, SP>}
static const mv_q_fn mv_q4[MV_MAXT] = NT_TABLE_Q(1);
static const mv_q_fn mv_q8[MV_MAXT] = NT_TABLE_Q(0);
/* products of long rows split over 2 or 4 warps (see k_mv_q): one-token
 * steps, and every tile of up to BE_EXACT_ROWS tokens, whose rows must be
 * the one-token step's bit for bit (backend.h, rows_exact) */
static const mv_q_fn mv_q4_split[2][MV_MAXT] = {NT_TABLE_QS(1, 2), NT_TABLE_QS(1, 4)};
static const mv_q_fn mv_q8_split[2][MV_MAXT] = {NT_TABLE_QS(0, 2), NT_TABLE_QS(0, 4)};
static const mv_f_fn mv_f32[MV_MAXT] = NT_TABLE(k_mv_f, DW_F32);
static const mv_f_fn mv_f16[MV_MAXT] = NT_TABLE(k_mv_f, DW_F16);
static const mv_f_fn mv_bf16[MV_MAXT] = NT_TABLE(k_mv_f, DW_BF16);

/* ---- prefill products on warpgroup MMA (the default, faster than k_mm_h,
 * which GEM_CUDA_MMH=2 selects: bench/results/cuda-variants-2026-12-03c.json) ----
 * k_mm_w: k_mm_h's operands on wgmma.mma_async m64n128k16 (Hopper's
 * asynchronous warpgroup MMA): the weights expanded to f16 in registers as
 * the A operand (each warp's A slice is exactly an m16n8k16 A fragment, so
 * the expansion is k_mm_h's), the activations as the B operand read by the
 * tensor cores from shared memory through a matrix descriptor (K-major,
 * 128-byte swizzle: 16-byte chunk c of token row n at n*128 + ((c ^ (n & 7))
 * << 4), atoms of 64 values and 8 rows 1024-byte aligned). The tensor cores
 * read B in natural k order, so the activations are stored in the order
 * that pairs with the expansion: in each group of 16 values the even k
 * first, then the odd k (k_act_f16 order 1). Two warpgroups of 64 rows x
 * 128 tokens; per 32-value block two k16 steps; A registers double-buffered
 * by block parity (a wgmma may still read the other set); the stage a later
 * cp.async overwrites is released only after wgmma.wait_group 0. */
#define MMW_BM 128
#define MMW_BN 128
#define MMW_THREADS 256
#define MMW_ST 2

/* Q4: 0 q8_0, 1 q4_0, MMW_F16 f16 weights already in the expansion's
 * order and scaled by 2^we (kq_f16: k-quant prefill), 64 bytes a block;
 * MMW_K4/K5/K6 q4_k/q5_k/q6_k blocks expanded in the kernel (mmw_kq_*):
 * a stage of MMT_KS = 4 blocks is half a super-block, each row's bytes of
 * that half staged as [header 16 | qs 64] (q4_k), [header 16 | qh 32 | qs
 * 64] (q5_k), [ql 64 | qh 32 | scales 16 | the scale's f16 pair 4] (q6_k);
 * strides of 80, 112 and 144 bytes keep the fragment loads of a warp's 8
 * rows on distinct banks */
#define MMW_F16 2
#define MMW_K4 3
#define MMW_K5 4
#define MMW_K6 5
template <int Q4> struct mmw_geom {
    static constexpr bool KQ = Q4 >= MMW_K4;
    static constexpr int WB = Q4 == MMW_F16 ? 64 : Q4 == 1 ? 16 : 32;
    static constexpr int A_STRIDE = Q4 == MMW_K4 ? 80 : Q4 == MMW_K5 ? 112 : Q4 == MMW_K6 ? 144 : MMT_KS * WB + 16;
    static constexpr int A_CHUNKS = Q4 == MMW_K4 ? 5 : 7; /* k-quants: 16-byte copies per row and stage */
    static constexpr int B_BYTES = MMT_KS / 2 * MMW_BN * 128; /* MMT_KS blocks = MMT_KS / 2 swizzle atoms */
    static constexpr int A_BYTES = MMW_BM * A_STRIDE;
    static constexpr int AS_BYTES = Q4 == MMW_F16 || KQ ? 0 : MMW_BM * MMT_KS * 2;
    static constexpr int STAGE = (B_BYTES + A_BYTES + AS_BYTES + 1023) / 1024 * 1024; /* B of every stage 1024-aligned */
    static constexpr int SMEM = STAGE * MMW_ST + 1024;                                 /* + the base's alignment */
};

__device__ __forceinline__ uint64_t wgmma_desc_sw128(unsigned saddr) {
    return (uint64_t)((saddr & 0x3FFFF) >> 4) | (uint64_t)1 << 16 | (uint64_t)(1024 >> 4) << 32 | (uint64_t)1 << 62;
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* keeps the compiler from moving accumulator accesses across the asm above */
__device__ __forceinline__ void acc_fence(float (&d)[64]) {
#pragma unroll
    for (int i = 0; i < 64; i++) asm volatile("" : "+f"(d[i])::"memory");
}
/* scale_d 0: D = A B (the first product needs no zeroed accumulators:
 * zeroing them with ordinary moves makes ptxas serialize every wgmma) */
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], const unsigned (&a)[4], uint64_t desc, int scale_d) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, {%64,%65,%66,%67}, %68, p, 1, 1, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(scale_d));
}

/* the device format of a k-quant k_mm_w instance */
template <int Q4> __host__ __device__ constexpr int mmw_dw() {
    return Q4 == MMW_K4 ? DW_Q4_K : Q4 == MMW_K5 ? DW_Q5_K : DW_Q6_K;
}

/* One row's scales for one stage (half hf of a super-block) of a k-quant
 * k_mm_w: dw = d 2^we, and q4_k/q5_k: mw = dmin 2^we, sc/mn the half's
 * four 6-bit scales and mins a byte each (the file's packing, as
 * kq_scale_min unpacks it); q6_k: sc/mn its 8 signed scales. */
struct mmw_kq_row {
    float dw, mw;
    unsigned sc, mn;
};
template <int Q4>
__device__ __forceinline__ mmw_kq_row mmw_kq_prep(const uint8_t *ar, int hf, int parity, float wexp) {
    mmw_kq_row s;
    if (Q4 == MMW_K6) {
        const uint2 sw = *(const uint2 *)(ar + 96 + 8 * hf);
        const __half2 dp = *(const __half2 *)(ar + 112);
        s.sc = sw.x, s.mn = sw.y;
        s.dw = __fmul_rn(parity ? __high2float(dp) : __low2float(dp), wexp);
        s.mw = 0;
    } else {
        const uint4 hd = *(const uint4 *)ar;
        const __half2 dd = *(const __half2 *)&hd.x;
        s.dw = __fmul_rn(__low2float(dd), wexp);
        s.mw = __fmul_rn(__high2float(dd), wexp);
        if (hf == 0) { /* sub-blocks 0..3: scales at bytes 4.., mins at 8.., 6 bits each */
            s.sc = hd.y & 0x3F3F3F3Fu;
            s.mn = hd.z & 0x3F3F3F3Fu;
        } else { /* 4..7: low 4 bits at bytes 12.. (scale low, min high), top 2 in bits 6-7 of bytes 4.. / 8.. */
            s.sc = (hd.w & 0x0F0F0F0Fu) | ((hd.y >> 2) & 0x30303030u);
            s.mn = ((hd.w >> 4) & 0x0F0F0F0Fu) | ((hd.z >> 2) & 0x30303030u);
        }
    }
    return s;
}

/* byte i of w (a small integer) as a float, exactly: 2^23 + b minus 2^23
 * + bias (no I2F on the path) */
__device__ __forceinline__ float mmw_byte_f(unsigned w, int i, float bias) {
    return __int_as_float(__byte_perm(w, 0x4B00u, 0x5440u | (unsigned)i)) - bias;
}

/* Row half h of a lane's A fragments for block kb of a k-quant stage at
 * ar, the same f16 values as kq_f16 (so the same products as the expanded
 * path): each quant.c value times 2^we, rounded once. With 2^we folded into
 * the scales (a power of two: exact), q4_k/q5_k's value
 * fma(code, d sc 2^we, -dmin m 2^we) is quant.c's d sc code - dmin m,
 * since d sc code is exact in f32 (at most 11 + 6 + 5 bits); q6_k's is its
 * rounded product (d sc) code, as in quant.c. Fragment order: word s of
 * each half of the block as at kq_f16 (values 4c, 4c + 2 / 4c + 1, 4c + 3,
 * then the same 16 further). */
template <int Q4>
__device__ __forceinline__ void mmw_kq_expand(unsigned (&f)[2][4], int h, const uint8_t *ar, int c, int kb, int hf,
                                              const mmw_kq_row &s) {
    unsigned cw[2]; /* the codes of values 4c .. 4c + 3 and 16 + 4c .., a byte each */
    float d1[2], m1 = 0;
#pragma unroll
    for (int p = 0; p < 2; p++) {
        if (Q4 == MMW_K6) {
            const unsigned ql = *(const unsigned *)(ar + 32 * (kb & 1) + 16 * p + 4 * c);
            const unsigned qh = *(const unsigned *)(ar + 64 + 16 * p + 4 * c);
            cw[p] = ((ql >> (4 * (kb >> 1))) & 0x0F0F0F0Fu) | (((qh >> (2 * kb)) & 0x03030303u) << 4);
            /* scale 2 kb + p of the half, signed: (b ^ 0x80) = b + 128 */
            const float scf = mmw_byte_f((kb < 2 ? s.sc : s.mn) ^ 0x80808080u, 2 * (kb & 1) + p, 8388736.0f);
            d1[p] = __fmul_rn(s.dw, scf);
        } else {
            const int qs = Q4 == MMW_K5 ? 48 : 16;
            const unsigned w = *(const unsigned *)(ar + qs + 32 * (kb >> 1) + 16 * p + 4 * c);
            cw[p] = (w >> (4 * (kb & 1))) & 0x0F0F0F0Fu;
            if (Q4 == MMW_K5) {
                const unsigned qh = *(const unsigned *)(ar + 16 + 16 * p + 4 * c);
                cw[p] |= ((qh >> (4 * hf + kb)) & 0x01010101u) << 4;
            }
        }
    }
    if (Q4 != MMW_K6) {
        d1[0] = d1[1] = __fmul_rn(s.dw, mmw_byte_f(s.sc, kb, 8388608.0f));
        m1 = __fmul_rn(s.mw, mmw_byte_f(s.mn, kb, 8388608.0f));
    }
#pragma unroll
    for (int p = 0; p < 2; p++) {
        float v[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const float code = mmw_byte_f(cw[p], i, Q4 == MMW_K6 ? 8388640.0f : 8388608.0f); /* q6_k: minus 32 */
            v[i] = Q4 == MMW_K6 ? __fmul_rn(d1[p], code) : __fmaf_rn(code, d1[p], -m1);
        }
        const __half2 e0 = __floats2half2_rn(v[0], v[2]), e1 = __floats2half2_rn(v[1], v[3]);
        f[p][h] = *(const unsigned *)&e0;
        f[p][h + 2] = *(const unsigned *)&e1;
    }
}

template <int Q4>
__device__ __forceinline__ void mmw_load(uint8_t *st, const uint8_t *__restrict__ q, const __half *__restrict__ d,
                                         const __half *__restrict__ xh, int nb, int M, int N, int m0, int n0, int kb0) {
    typedef mmw_geom<Q4> G;
    uint8_t *B = st, *A = st + G::B_BYTES, *As = A + G::A_BYTES;
    const int tid = threadIdx.x;
    constexpr int ACH = MMT_KS * G::WB / 16, BCH = MMT_KS * 64 / 16; /* 16-byte chunks per weight row / token */
#pragma unroll
    for (int i = tid; i < MMW_BN * BCH; i += MMW_THREADS) {
        const int t = i / BCH, ch = i % BCH, tok = min(n0 + t, N - 1), atom = ch >> 3, c = ch & 7;
        cp_async16(B + atom * (MMW_BN * 128) + t * 128 + ((c ^ (t & 7)) << 4),
                   (const uint8_t *)(xh + ((size_t)tok * nb + kb0) * 32) + ch * 16);
    }
    if constexpr (G::KQ) {
        /* half hf of super-block sb (layouts at mmw_geom) */
        const int nsb = nb >> 3, sb = kb0 >> 3, hf = (kb0 >> 2) & 1;
#pragma unroll
        for (int i = tid; i < MMW_BM * G::A_CHUNKS; i += MMW_THREADS) {
            const int r = i / G::A_CHUNKS, ch = i % G::A_CHUNKS, row = min(m0 + r, M - 1);
            const int off = Q4 == MMW_K4   ? (ch ? 64 * hf + 16 * ch : 0)
                            : Q4 == MMW_K5 ? (ch < 3 ? 16 * ch : 64 * hf + 16 * ch)
                                           : (ch < 4 ? 64 * hf + 16 * ch : ch < 6 ? 64 + 32 * hf + 16 * ch : 192);
            cp_async16(A + r * G::A_STRIDE + ch * 16, q + ((size_t)row * nsb + sb) * kq_block_bytes(mmw_dw<Q4>()) + off);
        }
        if (Q4 == MMW_K6 && tid < MMW_BM) { /* the aligned pair holding the block's scale (d has an even count) */
            const size_t idx = (size_t)min(m0 + tid, M - 1) * nsb + sb;
            cp_async4(A + tid * G::A_STRIDE + 112, d + (idx & ~(size_t)1));
        }
    } else {
#pragma unroll
        for (int i = tid; i < MMW_BM * ACH; i += MMW_THREADS) {
            const int r = i / ACH, ch = i % ACH, row = min(m0 + r, M - 1);
            cp_async16(A + r * G::A_STRIDE + ch * 16, q + ((size_t)row * nb + kb0) * G::WB + ch * 16);
        }
        if (Q4 != MMW_F16 && tid < MMW_BM) {
            const int row = min(m0 + tid, M - 1);
            cp_async8(As + tid * MMT_KS * 2, d + (size_t)row * nb + kb0);
        }
    }
}

template <int Q4>
__global__ void __launch_bounds__(MMW_THREADS, 2)
    k_mm_w(const uint8_t *__restrict__ q, const __half *__restrict__ d, float wexp, const __half *__restrict__ xh,
           const float *__restrict__ xinv, int K, int M, int N, float *__restrict__ out) {
    CU_TRACE(CT_MM_W);
    pdl_wait();
    CU_TRACE_RELEASED();
    typedef mmw_geom<Q4> G;
    extern __shared__ __align__(16) uint8_t mmw_raw[];
    /* the swizzle works on absolute shared addresses: stage bases on 1024 */
    const unsigned raw_s = (unsigned)__cvta_generic_to_shared(mmw_raw);
    uint8_t *smem = mmw_raw + (((raw_s + 1023u) & ~1023u) - raw_s);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c = lane & 3;
    const int wg = warp >> 2, w = warp & 3; /* warpgroup (64 rows each), warp within it (16 rows) */
    const int n0 = blockIdx.x * MMW_BN, m0 = blockIdx.y * MMW_BM;
    const int nb = K / 32, nsteps = nb / MMT_KS;
    const __half wsc = __float2half_rn(wexp);
    const __half2 off = Q4 == 1 ? __half2half2(__ushort_as_half(0x6408)) : __half2half2(__ushort_as_half(0x6480));
    float acc[64]; /* written first by a wgmma with scale_d 0 */
    unsigned af[2][2][4]; /* [block parity][k16 step][fragment register] */
#pragma unroll
    for (int s = 0; s < MMW_ST - 1; s++) {
        if (s < nsteps) mmw_load<Q4>(smem + s * G::STAGE, q, d, xh, nb, M, N, m0, n0, s * MMT_KS);
        cp_async_commit();
    }
    for (int step = 0; step < nsteps; step++) {
        cp_async_wait<MMW_ST - 2>();
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); /* cp.async wrote through the generic proxy */
        wgmma_wait<0>(); /* the stage the next load overwrites is no longer read */
        acc_fence(acc);
        __syncthreads();
        const int nxt = step + MMW_ST - 1;
        if (nxt < nsteps) mmw_load<Q4>(smem + (nxt % MMW_ST) * G::STAGE, q, d, xh, nb, M, N, m0, n0, nxt * MMT_KS);
        cp_async_commit();
        uint8_t *st = smem + (step % MMW_ST) * G::STAGE;
        const uint8_t *A = st + G::B_BYTES;
        const __half *As = (const __half *)(A + G::A_BYTES);
        const unsigned bs = (unsigned)__cvta_generic_to_shared(st);
        /* k-quants: this stage is half hf of super-block step / 2 */
        const int hf = step & 1;
        int par = 0; /* q6_k: bit h, the parity of row half h's scale index */
        if constexpr (Q4 == MMW_K6) {
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int r = wg * 64 + w * 16 + g + 8 * h;
                par |= (int)(((size_t)min(m0 + r, M - 1) * (size_t)(nb >> 3) + (size_t)(step >> 1)) & 1) << h;
            }
        }
#pragma unroll
        for (int kb = 0; kb < MMT_KS; kb++) {
            unsigned(&a)[2][4] = af[kb & 1];
            if (kb >= 2) wgmma_wait<1>(); /* the wgmmas of block kb - 2 (same register set) are done */
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int r = wg * 64 + w * 16 + g + 8 * h;
                const uint8_t *arow = A + r * G::A_STRIDE, *ar = arow + kb * G::WB;
                if constexpr (G::KQ) {
                    /* the row's scales again per block: kept across the blocks they spill */
                    const mmw_kq_row ks = mmw_kq_prep<Q4>(arow, hf, (par >> h) & 1, wexp);
                    mmw_kq_expand<Q4>(a, h, arow, c, kb, hf, ks);
                } else if constexpr (Q4 == MMW_F16) { /* the fragment words as stored (kq_f16's order) */
                    const uint4 v = *(const uint4 *)(ar + 16 * c);
                    a[0][h] = v.x, a[0][h + 2] = v.y, a[1][h] = v.z, a[1][h + 2] = v.w;
                } else {
                    mmh_expand_row<Q4>(a, h, ar, c, off, __half2half2(__hmul(As[r * MMT_KS + kb], wsc)));
                }
            }
            acc_fence(acc);
            wgmma_fence();
            /* block kb: atom kb / 2, k16 steps 2 (kb % 2) and + 1 at 32 bytes each */
            const unsigned base = bs + (kb >> 1) * (MMW_BN * 128) + (kb & 1) * 64;
            wgmma_m64n128k16(acc, a[0], wgmma_desc_sw128(base), step > 0 || kb > 0);
            wgmma_m64n128k16(acc, a[1], wgmma_desc_sw128(base + 32), 1);
            wgmma_commit();
        }
    }
    wgmma_wait<0>();
    acc_fence(acc);
    cp_async_wait<0>();
    const float winv = 1.0f / wexp;
#pragma unroll
    for (int v = 0; v < 64; v++) {
        const int row = m0 + wg * 64 + w * 16 + g + 8 * ((v >> 1) & 1), tok = n0 + 8 * (v >> 2) + 2 * c + (v & 1);
        if (row < M && tok < N) out[(size_t)tok * M + row] = acc[v] * winv * xinv[tok];
    }
}

template <int Q4> static cudaError_t mmh_allow1() {
    return cudaFuncSetAttribute(k_mm_h<Q4>, cudaFuncAttributeMaxDynamicSharedMemorySize, mmh_geom<Q4>::STAGE * MMH_ST);
}
cudaError_t mmh_allow(void) {
    cudaError_t e = cudaFuncSetAttribute(k_mm_tiled<1>, cudaFuncAttributeMaxDynamicSharedMemorySize, mmt_geom<1>::SMEM);
    if (e == cudaSuccess) e = cudaFuncSetAttribute(k_mm_tiled<0>, cudaFuncAttributeMaxDynamicSharedMemorySize, mmt_geom<0>::SMEM);
    if (e == cudaSuccess) e = mmh_allow1<1>();
    if (e == cudaSuccess) e = mmh_allow1<0>();
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(k_mm_w<1>, cudaFuncAttributeMaxDynamicSharedMemorySize, mmw_geom<1>::SMEM);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(k_mm_w<0>, cudaFuncAttributeMaxDynamicSharedMemorySize, mmw_geom<0>::SMEM);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(k_mm_w<MMW_F16>, cudaFuncAttributeMaxDynamicSharedMemorySize, mmw_geom<MMW_F16>::SMEM);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(k_mm_w<MMW_K4>, cudaFuncAttributeMaxDynamicSharedMemorySize, mmw_geom<MMW_K4>::SMEM);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(k_mm_w<MMW_K5>, cudaFuncAttributeMaxDynamicSharedMemorySize, mmw_geom<MMW_K5>::SMEM);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(k_mm_w<MMW_K6>, cudaFuncAttributeMaxDynamicSharedMemorySize, mmw_geom<MMW_K6>::SMEM);
    /* every k_vr_q instance: a typed vr_fn, so that indexing the table
     * with too few subscripts (an array, which the runtime's template
     * overload would take) fails to compile */
    for (int q4 = 0; q4 < 2; q4++)
        for (int t = 0; t < 2; t++)
            for (int sp = 0; sp < 3 && e == cudaSuccess; sp++) {
                const vr_fn f = vr_q[q4][t][sp];
                e = cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)vr_smem(q4, t + 1));
            }
    return e;
}

/* the largest matrix a prefill tile expands to f16 (the 31B's gate,
 * 21504 x 5376, is 231 MB); a larger k-quant one (a tied output head's
 * logits for a whole tile, as perplexity asks) takes the integer kernel */
#define KQ_F16_MAX ((size_t)256 << 20)

/* Prefill products on the f16 tensor cores: q8_0/q4_0 weights on k_mm_w
 * (or k_mm_h with GEM_CUDA_MMH=2), k-quant weights on k_mm_w only, each
 * matrix expanded to f16 first (kq_f16, into scratch) and multiplied like
 * a q8_0 one's expansion (the same operand order and the 2^we range
 * scaling, cu_weight's hexp), or with GEM_CUDA_KQ_F16=0 expanded by
 * k_mm_w<MMW_K4..K6> itself; the f16 activations of x are reused while
 * nothing but products ran since. Returns -1 when scratch could not grow
 * (nothing launched). */
static int mmh_run(cuda_backend *c, int count, const be_weight *const *W, const be_buf *x, int n, be_buf *const *outs) {
    const int K = (int)W[0]->ne0;
    size_t kq_bytes = 0;
    for (int i = 0; i < count && c->kq_f16; i++)
        if (kq_format(W[i]->fmt) && (size_t)W[i]->ne1 * K * sizeof(__half) > kq_bytes)
            kq_bytes = (size_t)W[i]->ne1 * K * sizeof(__half);
    if (kq_bytes && grow(c, &c->kqh, kq_bytes)) return -1;
    const int cached = act_cache_holds(c, &c->xh_of, x->d, n, K);
    if (!cached) {
        if (grow(c, &c->xh, (size_t)n * K * sizeof(__half)) || grow(c, &c->xhinv, (size_t)n * sizeof(float))) return -1;
        launch(c, k_act_f16, n, 256, 0, (const float *)x->d, K, (__half *)c->xh.p, (float *)c->xhinv.p,
               c->mmh_wgmma ? 1 : 0);
        LAUNCHED(c, "activations to f16");
    }
    int writes_x = 0;
    for (int i = 0; i < count; i++) {
        const int M = (int)W[i]->ne1;
        const dim3 g((unsigned)((n + MMH_BN - 1) / MMH_BN), (unsigned)((M + MMH_BM - 1) / MMH_BM));
        static_assert(MMW_BN == MMH_BN && MMW_BM == MMH_BM, "one grid for both product kernels");
#define MMH_LAUNCH(Q4)                                                                                              \
    launch(c, k_mm_h<Q4>, g, MMH_THREADS, mmh_geom<Q4>::STAGE * MMH_ST, (const uint8_t *)W[i]->q,                     \
           (const __half *)W[i]->d, W[i]->hexp, (const __half *)c->xh.p, (const float *)c->xhinv.p, K, M, n,        \
           outs[i]->d)
/* WQ: the weights k_mm_w<Q4> reads (MMW_F16: kq_f16's expansion, no scales read) */
#define MMW_LAUNCH(Q4, WQ)                                                                                          \
    launch(c, k_mm_w<Q4>, g, MMW_THREADS, mmw_geom<Q4>::SMEM, (const uint8_t *)(WQ), (const __half *)W[i]->d,         \
           W[i]->hexp, (const __half *)c->xh.p, (const float *)c->xhinv.p, K, M, n, outs[i]->d)
        if (kq_format(W[i]->fmt) && !c->kq_f16) {
            if (W[i]->fmt == DW_Q4_K) MMW_LAUNCH(MMW_K4, W[i]->q);
            else if (W[i]->fmt == DW_Q5_K) MMW_LAUNCH(MMW_K5, W[i]->q);
            else MMW_LAUNCH(MMW_K6, W[i]->q);
        } else if (kq_format(W[i]->fmt)) {
            kq_f16(c, W[i], (__half *)c->kqh.p);
            MMW_LAUNCH(MMW_F16, c->kqh.p);
        } else if (c->mmh_wgmma) {
            if (W[i]->fmt == DW_Q4_0) MMW_LAUNCH(1, W[i]->q);
            else MMW_LAUNCH(0, W[i]->q);
        } else if (W[i]->fmt == DW_Q4_0) {
            MMH_LAUNCH(1);
        } else {
            MMH_LAUNCH(0);
        }
#undef MMW_LAUNCH
#undef MMH_LAUNCH
        LAUNCHED(c, "matmul (f16 tensor cores)");
        writes_x |= outs[i]->d == x->d;
    }
    if (!writes_x) act_cache_set(c, &c->xh_of, x->d, n, K);
    return 0;
}

/* outs[i] = W[i] x (pair: outs[0] = gelu(W[0] x) * (W[1] x)). The 8-bit
 * activations of the last quantized input are reused while nothing but
 * matrix products ran since. Weights of one call share a format (else the
 * caller splits the call). */
static void mv_run(cuda_backend *c, int count, const be_weight *const *W, const be_buf *x, int n, be_buf *const *outs,
                   int pair) {
    const int K = (int)W[0]->ne0, fmt = W[0]->fmt;
    if (kq_format(fmt)) {
        /* prefill tiles on the tensor cores where the f16 range allows */
        int f16 = n > BE_EXACT_ROWS && !pair && c->mma && c->mmh_wgmma && (K / 32) % MMT_KS == 0;
        for (int i = 0; i < count && f16; i++)
            f16 = W[i]->hexp > 0 && (!c->kq_f16 || (size_t)W[i]->ne1 * K * sizeof(__half) <= KQ_F16_MAX);
        if (f16 && !mmh_run(c, count, W, x, n, outs)) return;
        kq_run(c, count, W, x, n, outs, pair);
        return;
    }
    char label[64] = "matmul";
    if (c->profile)
        snprintf(label, sizeof label, "matmul%s x%d %s %dx%d n%d", pair ? "+geglu" : "", count,
                 fmt == DW_Q4_0 ? "q4_0" : fmt == DW_Q8_0 ? "q8_0" : "float", (int)W[0]->ne1, K, n);
    mv_job job;
    memset(&job, 0, sizeof job);
    job.count = pair ? 1 : count;
    job.pair = pair;
    /* warps per row of a split product (k_mv_q): one-token steps and the
     * row-exact small tiles alike */
    const int sp = c->mv_split && n <= BE_EXACT_ROWS && !pair && (fmt == DW_Q8_0 || fmt == DW_Q4_0)
                       ? (K >= 16384 ? 4 : K >= 8192 ? 2 : 1)
                       : 1;
    unsigned grid = 0;
    for (int i = 0; i < job.count; i++) {
        job.m[i].q = W[i]->q;
        job.m[i].d = W[i]->d;
        job.m[i].M = (int)W[i]->ne1;
        job.m[i].blocks = (int)blocks_for((size_t)W[i]->ne1, pair ? MV_WARPS : MV_WARPS / sp * MV_ROWS);
        grid += (unsigned)job.m[i].blocks;
    }
    if (pair) {
        job.m[1].q = W[1]->q;
        job.m[1].d = W[1]->d;
        job.m[1].M = (int)W[1]->ne1;
    }
    /* tiles of up to BE_EXACT_ROWS tokens stay on the row-exact kernels
     * (k_mv_q in launches of MV_MAXT, or k_vr_q below): their rows are then
     * the one-token step's */
    if ((fmt == DW_Q8_0 || fmt == DW_Q4_0) && n > BE_EXACT_ROWS && !pair && c->mma && (K / 32) % MMT_KS == 0) {
        int f16 = 1;
        for (int i = 0; i < job.count; i++) f16 &= W[i]->hexp > 0;
        if (f16 && !mmh_run(c, job.count, W, x, n, outs)) return;
    }
    if (fmt == DW_Q8_0 || fmt == DW_Q4_0) {
        const size_t nblk = (size_t)n * (size_t)(K / 32);
        const int cached = act_cache_holds(c, &c->xq_of, x->d, n, K);
        if (!cached) {
            if (grow(c, &c->xq, nblk * 32) || grow(c, &c->xd, nblk * sizeof(float)) ||
                grow(c, &c->xs, nblk * sizeof(int)))
                return;
            launch(c, k_quantize_act, blocks_for(nblk * 32, 256), 256, 0, x->d, (int64_t)nblk, (int8_t *)c->xq.p,
                                                                          (float *)c->xd.p, (int *)c->xs.p);
            LAUNCHED(c, "quantize activations");
        }
        if (n > BE_EXACT_ROWS && !pair && c->mma && (K / 32) % MMT_KS == 0) {
            for (int i = 0; i < job.count; i++) {
                const dim3 g((unsigned)((n + MMT_BN - 1) / MMT_BN), (unsigned)((job.m[i].M + MMT_BM - 1) / MMT_BM));
                if (fmt == DW_Q4_0)
                    launch(c, k_mm_tiled<1>, g, MMT_THREADS, mmt_geom<1>::SMEM, 
                        (const uint8_t *)job.m[i].q, job.m[i].d, (const int8_t *)c->xq.p, (const float *)c->xd.p, K,
                        job.m[i].M, n, outs[i]->d);
                else
                    launch(c, k_mm_tiled<0>, g, MMT_THREADS, mmt_geom<0>::SMEM, 
                        (const uint8_t *)job.m[i].q, job.m[i].d, (const int8_t *)c->xq.p, (const float *)c->xd.p, K,
                        job.m[i].M, n, outs[i]->d);
                LAUNCHED(c, "matmul (tensor cores, tiled)");
            }
            goto quantized_done;
        }
        if (n > BE_EXACT_ROWS && !pair && c->mma) {
            for (int i = 0; i < job.count; i++) {
                const dim3 g((unsigned)((job.m[i].M + MM_ROWS - 1) / MM_ROWS), (unsigned)((n + MM_TOKS - 1) / MM_TOKS));
                if (fmt == DW_Q4_0)
                    launch(c, k_mm_q<1>, g, 128, 0, (const uint8_t *)job.m[i].q, job.m[i].d, (const int8_t *)c->xq.p,
                                                    (const float *)c->xd.p, K, job.m[i].M, n, outs[i]->d);
                else
                    launch(c, k_mm_q<0>, g, 128, 0, (const uint8_t *)job.m[i].q, job.m[i].d, (const int8_t *)c->xq.p,
                                                    (const float *)c->xd.p, K, job.m[i].M, n, outs[i]->d);
                LAUNCHED(c, "matmul (tensor cores)");
            }
            goto quantized_done;
        }
        /* row-exact small tiles of VR_MIN_ROWS or more tokens on the tensor
         * cores (k_vr_q; GEM_CUDA_MMA=0: the matrix-vector kernels). Both
         * give every row the one-token product's bits, so the choice is
         * speed alone: k_vr_q's time hardly grows with the tokens, k_mv_q's
         * integer work does; they cross at about 4 tokens on the 31B
         * (bench/results/cuda-vr-31b-2026-12-06.json). */
        if (n >= VR_MIN_ROWS && n <= MV_MAXT && c->mma && (K / 32) % 8 == 0 && K / 32 >= 32 * sp) {
            unsigned vgrid = 0;
            for (int i = 0; i < job.count; i++) {
                job.m[i].out = outs[i]->d;
                job.m[i].blocks = (int)blocks_for((size_t)job.m[i].M, pair ? VR_ROWS / 2 : VR_ROWS);
                vgrid += (unsigned)job.m[i].blocks;
            }
            const int ntt = n > 8 ? 2 : 1, q4 = fmt == DW_Q4_0;
            if (sp > 1) {
                const size_t cap0 = c->vr_done.cap;
                if (grow(c, &c->vr_part, (size_t)vgrid * sp * VR_ROWS * 8 * ntt * sizeof(float)) ||
                    grow(c, &c->vr_done, (size_t)vgrid * sizeof(unsigned)))
                    return;
                /* a new count buffer starts at zero; launches leave it so */
                if (c->vr_done.cap != cap0 && CK(c, cudaMemsetAsync(c->vr_done.p, 0, c->vr_done.cap, c->st))) return;
                job.vr_part = (float *)c->vr_part.p;
                job.vr_done = (unsigned *)c->vr_done.p;
            }
            launch(c, vr_q[q4][ntt - 1][sp == 4 ? 2 : sp == 2 ? 1 : 0], vgrid * (unsigned)sp, VR_THREADS, vr_smem(q4, ntt), job,
                   (const int8_t *)c->xq.p, (const float *)c->xd.p, K, n);
            LAUNCHED(c, label);
            goto quantized_done;
        }
        {
        const mv_q_fn *tab = sp > 1 ? (fmt == DW_Q4_0 ? mv_q4_split : mv_q8_split)[sp == 4] : fmt == DW_Q4_0 ? mv_q4 : mv_q8;
        /* blocks of one wave, per format, from the one-token kernel of
         * unsplit rows */
        const int q4 = fmt == DW_Q4_0;
        if (!c->mv_wave[q4]) {
            int per_sm = 0;
            if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, q4 ? mv_q4[0] : mv_q8[0], MV_WARPS * 32, 0) !=
                    cudaSuccess ||
                per_sm < 1) {
                (void)cudaGetLastError(); /* a guess, not a failure: launches check the last error */
                per_sm = 4;
            }
            c->mv_wave[q4] = per_sm * c->n_sm;
        }
        job.wave = c->mv_wave[q4];
        job.stagger = (int)grid > job.wave ? c->mv_stagger : 0;
        job.levels = c->mv_levels;
        for (int t0 = 0; t0 < n; t0 += MV_MAXT) {
            const int nt = n - t0 < MV_MAXT ? n - t0 : MV_MAXT;
            const size_t bo = (size_t)t0 * (size_t)(K / 32);
            mv_job jt = job;
            for (int i = 0; i < job.count; i++) jt.m[i].out = outs[i]->d + (size_t)t0 * job.m[i].M;
            launch(c, tab[nt - 1], grid, MV_WARPS * 32, 0, jt, (const int8_t *)c->xq.p + bo * 32,
                                                           (const float *)c->xd.p + bo, (const int *)c->xs.p + bo, K);
            LAUNCHED(c, label);
        }
        }
    quantized_done:;
        int writes_x = 0;
        for (int i = 0; i < job.count; i++) writes_x |= outs[i]->d == x->d;
        if (!writes_x) quantized_cache_set(c, x->d, n, K);
        return;
    }
    const mv_f_fn *tab = fmt == DW_F32 ? mv_f32 : fmt == DW_F16 ? mv_f16 : mv_bf16;
    for (int t0 = 0; t0 < n; t0 += MV_MAXT) {
        const int nt = n - t0 < MV_MAXT ? n - t0 : MV_MAXT;
        mv_job jt = job;
        for (int i = 0; i < job.count; i++) jt.m[i].out = outs[i]->d + (size_t)t0 * job.m[i].M;
        launch(c, tab[nt - 1], grid, MV_WARPS * 32, 0, jt, x->d + (size_t)t0 * K, K);
        LAUNCHED(c, label);
    }
}

void cu_matmul(backend *b, const be_weight *W, const be_buf *x, int n, be_buf *out) {
    mv_run(cu_of(b), 1, &W, x, n, &out, 0);
}

void cu_matmul_multi(backend *b, int count, const be_weight *const *W, const be_buf *x, int n,
                            be_buf *const *out) {
    int same = 1;
    for (int i = 1; i < count; i++) same &= W[i]->fmt == W[0]->fmt && W[i]->ne0 == W[0]->ne0;
    if (same) {
        mv_run(cu_of(b), count, W, x, n, out, 0);
        return;
    }
    for (int i = 0; i < count; i++) mv_run(cu_of(b), 1, &W[i], x, n, &out[i], 0);
}

void cu_matmul_geglu(backend *b, const be_weight *Wg, const be_weight *Wu, const be_buf *x, int n, be_buf *out) {
    cuda_backend *c = cu_of(b);
    const be_weight *W[2] = {Wg, Wu};
    const int quant = Wg->fmt == DW_Q8_0 || Wg->fmt == DW_Q4_0 || kq_format(Wg->fmt);
    if (c->gelu_fp16 || Wg->fmt != Wu->fmt || Wg->ne1 != Wu->ne1 || (c->mma && quant && n > BE_EXACT_ROWS)) {
        /* the table GELU and mixed formats go the long way, through scratch */
        const size_t len = (size_t)n * (size_t)Wu->ne1;
        if (grow(c, &c->up, len * sizeof(float))) return;
        be_buf up = {(float *)c->up.p, len};
        be_buf *o1 = out, *o2 = &up;
        mv_run(c, 1, &W[0], x, n, &o1, 0);
        mv_run(c, 1, &W[1], x, n, &o2, 0);
        const int F = (int)Wu->ne1;
        /* prefill tiles: the down product's f16 activations made here (its
         * K, F, must suit the f16 kernels: (F / 32) % MMT_KS == 0) */
        if (!c->gelu_fp16 && c->mma && quant && n > BE_EXACT_ROWS && F % 4 == 0 && (F / 32) % MMT_KS == 0 &&
            !grow(c, &c->xh, len * sizeof(__half)) && !grow(c, &c->xhinv, (size_t)n * sizeof(float))) {
            launch(c, k_geglu_f16, n, 256, 0, (const float *)out->d, (const float *)up.d, F, out->d, (__half *)c->xh.p,
                   (float *)c->xhinv.p, c->mmh_wgmma ? 1 : 0);
            LAUNCHED(c, "geglu + activations to f16");
            act_cache_set(c, &c->xh_of, out->d, n, F);
            return;
        }
        cu_geglu(b, out, &up, len, out);
        return;
    }
    mv_run(c, 2, W, x, n, &out, 1);
}
