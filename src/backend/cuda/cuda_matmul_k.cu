/* CUDA products of k-quant weights (q4_k, q5_k, q6_k) kept in their own
 * blocks on the device, for every token count: one-token decode steps,
 * row-exact tiles and, in launches of KQ_MAXT tokens, prefill tiles.
 *
 * Storage (cu_weight): q4_k and q5_k blocks as the file has them (144 and
 * 176 bytes: 16-byte aligned rows of 256-value super-blocks); q6_k blocks
 * without their trailing f16 scale (208 bytes: ql, qh, scales) and the
 * scales apart (d[]), since 210-byte blocks would leave every other block
 * unaligned.
 *
 * Arithmetic: the CPU's canonical k-quant sum (backend/cpu/kernels.h).
 * Activations are quantized per 256 values exactly as the CPU does it
 * (scale max|x| / 127, codes rounded to nearest even, a sum per 16 codes),
 * so the integer sums S (and M, the mins' term) of every super-block equal
 * the CPU's; per super-block the same fused multiply-adds
 *     acc = fma((float)S, d * dx, acc); acc = fma(-(float)M, dmin * dx, acc)
 * (q6_k: the first only) run on one chain per super-block slot of a warp,
 * and only the order in which the chains meet differs from the CPU's
 * sequential sum. A token's arithmetic never depends on the other tokens
 * of a launch, so a tile's rows are bitwise its one-token products
 * (rows_exact, backend.h).
 *
 * Work split: a warp owns KQ_ROWS rows (pair mode: row R of the gate and
 * of the up matrix, written as gelu_tanh(gate) * up); lane 4s + c takes
 * quarter c (64 values) of super-blocks s, s + 8, s + 16, ...; the four
 * quarters' integer sums meet by shuffles (exact), then each lane of the
 * slot holds the whole S and M. */
#include "backend/cuda/cuda_common.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/cuda_kquant.h"

#define KQ_WARPS 4 /* warps per block */
#define KQ_ROWS 2  /* rows per warp: each activation load serves both */
#ifndef KQ_UNROLL
#define KQ_UNROLL 1 /* super-block rounds loaded before the first use: 1 beat 2 (more warps resident), bench/results/kquant-12b-h100-2026-12-07.json */
#endif

/* 1: each round also asks L2 for the warp's next round of blocks (a bulk
 * prefetch per row, nothing held in registers), so that round's loads
 * wait on L2 rather than memory; a tuning build's variant until measured
 * (more loads in flight by unrolling cost occupancy: KQ_UNROLL) */
#ifndef KQ_PREFETCH
#define KQ_PREFETCH 0
#endif

/* 1: each lane keeps its quarter's chain (float(S_c) d dx per super-block)
 * and the 4 quarters meet only at the end with the slots, instead of
 * exact integer shuffles per super-block, row and token (4 shuffles each:
 * the tiles of 16 tokens are bound by such per-token work). Same sums in
 * another f32 order, for one-token steps and tiles alike; a tuning
 * build's variant until measured */
#ifndef KQ_LANE_ACC
#define KQ_LANE_ACC 0
#endif

#define KQ_MAXT BE_EXACT_ROWS /* tokens per launch: a row-exact tile in one */
/* super-blocks per row from which 2 or 4 warps share a row (a tuning
 * build may set them) */
#ifndef KQ_SPLIT2
#define KQ_SPLIT2 32
#endif
#ifndef KQ_SPLIT4
#define KQ_SPLIT4 48
#endif

/* ---- activations: 8-bit codes per 256 values (the CPU's act_q8k) ---- */

/* One warp per 256-value block: lane L holds values 8L .. 8L + 7. */
__global__ void k_quantize_act_k(const float *x, int64_t nblk, int8_t *q, float *d, int *s16) {
    CU_TRACE(CT_QUANTIZE_ACT);
    pdl_wait();
    CU_TRACE_RELEASED();
    const int64_t blk = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (blk >= nblk) return;
    kq_act_block(x + blk * 256, lane, q + blk * 256, d + blk, s16 + blk * 16);
}

/* ---- the product ---- */

typedef struct {
    const void *q[3];
    const __half *d[3]; /* q6_k's scales; NULL otherwise */
    float *out[3];
    int M[3];
    int blocks[3]; /* thread blocks dealt to each matrix */
    int count, pair;
} kq_job;

/* One lane's quarter of one super-block of one row. */
struct kq_w {
    uint4 a, b;   /* q4_k/q5_k: qs bytes 32c .. 32c + 31; q6_k: ql bytes 64n + 32j .. + 31 */
    uint4 h0, h1; /* q5_k: qh (all 32 bytes); q6_k: qh bytes 32n .. 32n + 31 */
    uint4 hdr;    /* as loaded: q4_k/q5_k: d, dmin, scales[12]; q6_k: x = its 4 scales' bytes */
    unsigned sc;  /* kq_prep: the 4 scales this quarter needs, a byte each (q4_k/q5_k: sc0, sc1, m0, m1) */
    float d, dmin;
};

/* Issues the loads (nothing waits on them here). */
template <int FMT>
__device__ __forceinline__ void kq_load(kq_w &w, const uint8_t *blk, const __half *d6, int c) {
    if (FMT == DW_Q6_K) {
        const int n = c >> 1, j = c & 1;
        w.a = __ldg((const uint4 *)(blk + 64 * n + 32 * j));
        w.b = __ldg((const uint4 *)(blk + 64 * n + 32 * j + 16));
        w.h0 = __ldg((const uint4 *)(blk + 128 + 32 * n));
        w.h1 = __ldg((const uint4 *)(blk + 128 + 32 * n + 16));
        /* scales 8n + 2j, + 1 (values 32j ..) and 8n + 2j + 4, + 5 (32j + 64 ..) */
        const int g = 192 + 8 * n + 2 * j;
        w.hdr.x = (unsigned)__ldg((const unsigned short *)(blk + g)) | (unsigned)__ldg((const unsigned short *)(blk + g + 4)) << 16;
        w.d = __half2float(*d6);
        w.dmin = 0;
    } else {
        const int qs = FMT == DW_Q5_K ? 48 : 16;
        w.hdr = __ldg((const uint4 *)blk);
        w.a = __ldg((const uint4 *)(blk + qs + 32 * c));
        w.b = __ldg((const uint4 *)(blk + qs + 32 * c + 16));
        if (FMT == DW_Q5_K) {
            w.h0 = __ldg((const uint4 *)(blk + 16));
            w.h1 = __ldg((const uint4 *)(blk + 32));
        }
    }
}

/* After the loads: the quarter's scales into one register (the header's
 * four are then dead while the tokens run). */
template <int FMT> __device__ __forceinline__ void kq_prep(kq_w &w, int c) {
    if (FMT == DW_Q6_K) {
        w.sc = w.hdr.x;
    } else {
        unsigned sc0, m0, sc1, m1;
        kq_scale_min(w.hdr, 2 * c, sc0, m0);
        kq_scale_min(w.hdr, 2 * c + 1, sc1, m1);
        w.sc = sc0 | sc1 << 8 | m0 << 16 | m1 << 24;
        const __half2 dd = *(const __half2 *)&w.hdr.x;
        w.d = __low2float(dd);
        w.dmin = __high2float(dd);
    }
}

/* This lane's integer sums of one super-block against one token's codes:
 * S (scaled code products) and M (mins against code sums). a: the 32
 * values' codes this quarter meets (q4_k/q5_k: 64c .. 64c + 63; q6_k: runs
 * at 128n + 32j and 128n + 32j + 64), s: the four 16-code sums. */
template <int FMT>
__device__ __forceinline__ void kq_sums(const kq_w &w, const int (&a)[16], const int4 &s, int c, int &S, int &M) {
    const unsigned q[8] = {w.a.x, w.a.y, w.a.z, w.a.w, w.b.x, w.b.y, w.b.z, w.b.w};
    int lo0 = 0, lo1 = 0, hi0 = 0, hi1 = 0; /* per 16 values: q6_k scales apply per 16 */
    if (FMT == DW_Q6_K) {
        const int j = c & 1;
        const unsigned h[8] = {w.h0.x, w.h0.y, w.h0.z, w.h0.w, w.h1.x, w.h1.y, w.h1.z, w.h1.w};
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const unsigned vlo = (q[i] & 0x0F0F0F0Fu) | (((h[i] >> (2 * j)) & 0x03030303u) << 4);
            const unsigned vhi = ((q[i] >> 4) & 0x0F0F0F0Fu) | (((h[i] >> (2 * j + 4)) & 0x03030303u) << 4);
            if (i < 4) lo0 = __dp4a((int)vlo, a[i], lo0), hi0 = __dp4a((int)vhi, a[8 + i], hi0);
            else lo1 = __dp4a((int)vlo, a[i], lo1), hi1 = __dp4a((int)vhi, a[8 + i], hi1);
        }
        /* codes minus 32: each 16-value group's code sum times 32 comes off */
        const int sc0 = (int)(signed char)(w.sc & 0xFF), sc1 = (int)(signed char)(w.sc >> 8 & 0xFF);
        const int sc2 = (int)(signed char)(w.sc >> 16 & 0xFF), sc3 = (int)(signed char)(w.sc >> 24);
        S = sc0 * (lo0 - 32 * s.x) + sc1 * (lo1 - 32 * s.y) + sc2 * (hi0 - 32 * s.z) + sc3 * (hi1 - 32 * s.w);
        M = 0;
    } else {
        unsigned hb[8];
        if (FMT == DW_Q5_K) {
            const unsigned h[8] = {w.h0.x, w.h0.y, w.h0.z, w.h0.w, w.h1.x, w.h1.y, w.h1.z, w.h1.w};
#pragma unroll
            for (int i = 0; i < 8; i++) hb[i] = h[i] >> (2 * c);
        }
#pragma unroll
        for (int i = 0; i < 8; i++) {
            unsigned vlo = q[i] & 0x0F0F0F0Fu, vhi = (q[i] >> 4) & 0x0F0F0F0Fu;
            if (FMT == DW_Q5_K) vlo |= (hb[i] & 0x01010101u) << 4, vhi |= ((hb[i] >> 1) & 0x01010101u) << 4;
            lo0 = __dp4a((int)vlo, a[i], lo0);
            hi0 = __dp4a((int)vhi, a[8 + i], hi0);
        }
        S = (int)(w.sc & 0xFF) * lo0 + (int)(w.sc >> 8 & 0xFF) * hi0;
        M = (int)(w.sc >> 16 & 0xFF) * (s.x + s.y) + (int)(w.sc >> 24) * (s.z + s.w);
    }
}

/* NT: tokens this instance can take (nt <= NT run); every token's
 * arithmetic is the same whatever NT and nt are. SP > 1 (rows of
 * KQ_SPLIT2 super-blocks or more, chosen by K alone so a tile's rows stay
 * its one-token products): SP consecutive warps share a warp's rows, part
 * P taking rounds P, P + SP, ...; the parts meet in shared memory, added
 * in order by part 0 (short rows alone leave too few warps to keep enough
 * loads in flight: a 3840-row product of 60 super-blocks a row is half a
 * wave of blocks). */
template <int FMT, int NT, int SP>
__global__ void __launch_bounds__(KQ_WARPS * 32)
    k_mv_k(kq_job job, const int8_t *__restrict__ xq, const float *__restrict__ xd, const int *__restrict__ xs, int K,
           int nt) {
    CU_TRACE(CT_MV_K);
    pdl_wait();
    CU_TRACE_RELEASED();
    int bid = blockIdx.x, mi = 0;
    if (job.count > 1 && bid >= job.blocks[0]) bid -= job.blocks[0], mi = 1;
    if (job.count > 2 && mi == 1 && bid >= job.blocks[1]) bid -= job.blocks[1], mi = 2;
    const int M = mi == 0 ? job.M[0] : mi == 1 ? job.M[1] : job.M[2];
    float *out = mi == 0 ? job.out[0] : mi == 1 ? job.out[1] : job.out[2];
    const int wib = threadIdx.x >> 5, part = wib % SP;
    const int warp = bid * (KQ_WARPS / SP) + wib / SP, lane = threadIdx.x & 31, c = lane & 3, slot = lane >> 2;
    const int row0 = job.pair ? warp : warp * KQ_ROWS;
    const bool valid = row0 < M;
    if (SP == 1 && !valid) return;
    const int nsb = valid ? K / 256 : 0;
    const uint8_t *wq[KQ_ROWS];
    const __half *wd[KQ_ROWS];
#pragma unroll
    for (int k = 0; k < KQ_ROWS; k++) {
        const int mk = job.pair ? k : mi;
        const int row = job.pair ? row0 : min(row0 + k, M - 1);
        wq[k] = (const uint8_t *)(mk == 0 ? job.q[0] : mk == 1 ? job.q[1] : job.q[2]) +
                (size_t)row * nsb * kq_block_bytes(FMT);
        wd[k] = FMT == DW_Q6_K ? (mk == 0 ? job.d[0] : mk == 1 ? job.d[1] : job.d[2]) + (size_t)row * nsb : NULL;
    }
    float acc[KQ_ROWS][NT];
#pragma unroll
    for (int k = 0; k < KQ_ROWS; k++)
#pragma unroll
        for (int t = 0; t < NT; t++) acc[k][t] = 0;
    /* this lane's code offsets within a super-block: q6_k's two runs of 32 */
    const int a0 = FMT == DW_Q6_K ? 128 * (c >> 1) + 32 * (c & 1) : 64 * c, a1 = FMT == DW_Q6_K ? a0 + 64 : a0 + 32;
    const int g0 = a0 / 16, g1 = a1 / 16; /* their 16-code sums: g0, g0 + 1, g1, g1 + 1 */
    /* the loop is the same for the whole warp (its shuffles need every
     * lane); slots past the row's end add nothing */
    for (int r0 = 8 * KQ_UNROLL * part; r0 < nsb; r0 += 8 * KQ_UNROLL * SP) {
        kq_w w[KQ_UNROLL][KQ_ROWS];
#pragma unroll
        for (int u = 0; u < KQ_UNROLL; u++) {
            const int b = r0 + 8 * u + slot;
#pragma unroll
            for (int k = 0; k < KQ_ROWS; k++)
                if (b < nsb) kq_load<FMT>(w[u][k], wq[k] + (size_t)b * kq_block_bytes(FMT), FMT == DW_Q6_K ? wd[k] + b : NULL, c);
        }
        if (KQ_PREFETCH && lane < KQ_ROWS) {
            /* lane k asks for row k's next round, its blocks contiguous and
             * 16-byte aligned: one bulk prefetch (sm_90) */
            const int bn = r0 + 8 * KQ_UNROLL * SP;
            if (bn < nsb) {
                const uint8_t *p = (lane == 0 ? wq[0] : wq[KQ_ROWS - 1]) + (size_t)bn * kq_block_bytes(FMT);
                const unsigned bytes = (unsigned)(min(8 * KQ_UNROLL, nsb - bn) * kq_block_bytes(FMT));
                asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(__cvta_generic_to_global(p)), "r"(bytes)
                             : "memory");
            }
        }
#pragma unroll
        for (int u = 0; u < KQ_UNROLL; u++)
#pragma unroll
            for (int k = 0; k < KQ_ROWS; k++)
                if (r0 + 8 * u + slot < nsb) kq_prep<FMT>(w[u][k], c);
#pragma unroll
        for (int u = 0; u < KQ_UNROLL; u++) {
            const int b = r0 + 8 * u + slot;
            /* the same for the 4 lanes of a slot, which shuffle together */
            const bool live = b < nsb;
#pragma unroll
            for (int t = 0; t < NT; t++) {
                if (t >= nt) break;
                int a[16];
                int4 s = make_int4(0, 0, 0, 0);
                float dx = 0;
                if (live) {
                    const int8_t *xb = xq + (size_t)t * K + (size_t)b * 256;
                    const int4 v0 = __ldg((const int4 *)(xb + a0)), v1 = __ldg((const int4 *)(xb + a0 + 16));
                    const int4 v2 = __ldg((const int4 *)(xb + a1)), v3 = __ldg((const int4 *)(xb + a1 + 16));
                    a[0] = v0.x, a[1] = v0.y, a[2] = v0.z, a[3] = v0.w, a[4] = v1.x, a[5] = v1.y, a[6] = v1.z, a[7] = v1.w;
                    a[8] = v2.x, a[9] = v2.y, a[10] = v2.z, a[11] = v2.w, a[12] = v3.x, a[13] = v3.y, a[14] = v3.z,
                    a[15] = v3.w;
                    const int *sb = xs + ((size_t)t * nsb + b) * 16;
                    s = make_int4(__ldg(sb + g0), __ldg(sb + g0 + 1), __ldg(sb + g1), __ldg(sb + g1 + 1));
                    dx = __ldg(xd + (size_t)t * nsb + b);
                } else {
#pragma unroll
                    for (int i = 0; i < 16; i++) a[i] = 0;
                }
#pragma unroll
                for (int k = 0; k < KQ_ROWS; k++) {
                    int S = 0, Mn = 0;
                    if (live) kq_sums<FMT>(w[u][k], a, s, c, S, Mn);
                    if (!KQ_LANE_ACC) {
                        /* the quarters meet: exact integer sums, all 4 lanes hold them */
                        S += __shfl_xor_sync(0xffffffffu, S, 1);
                        S += __shfl_xor_sync(0xffffffffu, S, 2);
                        if (FMT != DW_Q6_K) {
                            Mn += __shfl_xor_sync(0xffffffffu, Mn, 1);
                            Mn += __shfl_xor_sync(0xffffffffu, Mn, 2);
                        }
                    }
                    if (live) {
                        float v = __fmaf_rn((float)S, __fmul_rn(w[u][k].d, dx), acc[k][t]);
                        if (FMT != DW_Q6_K) v = __fmaf_rn(-(float)Mn, __fmul_rn(w[u][k].dmin, dx), v);
                        acc[k][t] = v;
                    }
                }
            }
        }
    }
    /* the 8 slots' chains meet (lanes of one c hold the same values; with
     * KQ_LANE_ACC the 4 quarters' chains too) */
#pragma unroll
    for (int k = 0; k < KQ_ROWS; k++)
#pragma unroll
        for (int t = 0; t < NT; t++) {
            float v = acc[k][t];
#pragma unroll
            for (int o = 16; o >= (KQ_LANE_ACC ? 1 : 4); o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
            acc[k][t] = v;
        }
    if (SP > 1) {
        __shared__ float parts[KQ_WARPS][KQ_ROWS][NT];
        if (lane == 0)
#pragma unroll
            for (int k = 0; k < KQ_ROWS; k++)
#pragma unroll
                for (int t = 0; t < NT; t++) parts[wib][k][t] = acc[k][t];
        __syncthreads();
        if (!valid || part != 0) return;
#pragma unroll
        for (int k = 0; k < KQ_ROWS; k++)
#pragma unroll
            for (int t = 0; t < NT; t++) {
                float v = parts[wib][k][t];
#pragma unroll
                for (int p = 1; p < SP; p++) v = v + parts[wib + p][k][t];
                acc[k][t] = v;
            }
    }
    if (lane != 0) return;
#pragma unroll
    for (int t = 0; t < NT; t++) {
        if (t >= nt) break;
        if (job.pair) {
            out[(size_t)t * M + row0] = gelu_tanh_f(acc[0][t]) * acc[1][t];
        } else {
#pragma unroll
            for (int k = 0; k < KQ_ROWS; k++)
                if (row0 + k < M) out[(size_t)t * M + row0 + k] = acc[k][t];
        }
    }
}

typedef void (*kq_fn)(kq_job, const int8_t *, const float *, const int *, int, int);
#define KQ_NTS(F, SP) {k_mv_k<F, 1, SP>, k_mv_k<F, 2, SP>, k_mv_k<F, 4, SP>, k_mv_k<F, 8, SP>, k_mv_k<F, KQ_MAXT, SP>}
#define KQ_TABLE(F) {KQ_NTS(F, 1), KQ_NTS(F, 2), KQ_NTS(F, 4)}
static const kq_fn kq_tab[3][3][5] = {KQ_TABLE(DW_Q4_K), KQ_TABLE(DW_Q5_K), KQ_TABLE(DW_Q6_K)}; /* [fmt][sp 1, 2, 4][nt] */

int kq_format(int fmt) { return fmt == DW_Q4_K || fmt == DW_Q5_K || fmt == DW_Q6_K; }

void kq_run(cuda_backend *c, int count, const be_weight *const *W, const be_buf *x, int n, be_buf *const *outs,
            int pair) {
    const int K = (int)W[0]->ne0, fmt = W[0]->fmt;
    char label[64] = "matmul";
    if (c->profile)
        snprintf(label, sizeof label, "matmul%s x%d %s %dx%d n%d", pair ? "+geglu" : "", count,
                 fmt == DW_Q4_K ? "q4_k" : fmt == DW_Q5_K ? "q5_k" : "q6_k", (int)W[0]->ne1, K, n);
    const size_t nblk = (size_t)n * (size_t)(K / 256);
    if (!act_cache_holds(c, &c->xk_of, x->d, n, K)) {
        if (grow(c, &c->xkq, nblk * 256) || grow(c, &c->xkd, nblk * sizeof(float)) ||
            grow(c, &c->xks, nblk * 16 * sizeof(int)))
            return;
        launch(c, k_quantize_act_k, blocks_for(nblk * 32, 256), 256, 0, x->d, (int64_t)nblk, (int8_t *)c->xkq.p,
               (float *)c->xkd.p, (int *)c->xks.p);
        LAUNCHED(c, "quantize activations (k-quants)");
    }
    kq_job job;
    memset(&job, 0, sizeof job);
    job.count = pair ? 1 : count;
    job.pair = pair;
    unsigned grid = 0;
    for (int i = 0; i < (pair ? 2 : count); i++) {
        job.q[i] = W[i]->q;
        job.d[i] = W[i]->d;
        job.M[i] = (int)W[i]->ne1;
    }
    /* warps per row (by K alone: the rows of a tile are then its
     * one-token products) */
    const int nsb = K / 256, sp = nsb >= KQ_SPLIT4 ? 4 : nsb >= KQ_SPLIT2 ? 2 : 1;
    for (int i = 0; i < job.count; i++) {
        job.blocks[i] = (int)blocks_for((size_t)job.M[i], (pair ? KQ_WARPS : KQ_WARPS * KQ_ROWS) / sp);
        grid += (unsigned)job.blocks[i];
    }
    const int f = fmt == DW_Q4_K ? 0 : fmt == DW_Q5_K ? 1 : 2, si = sp == 4 ? 2 : sp == 2 ? 1 : 0;
    for (int t0 = 0; t0 < n; t0 += KQ_MAXT) {
        const int nt = n - t0 < KQ_MAXT ? n - t0 : KQ_MAXT;
        const int ti = nt == 1 ? 0 : nt == 2 ? 1 : nt <= 4 ? 2 : nt <= 8 ? 3 : 4;
        kq_job jt = job;
        for (int i = 0; i < job.count; i++) jt.out[i] = outs[i]->d + (size_t)t0 * job.M[i];
        const size_t bo = (size_t)t0 * (size_t)(K / 256);
        launch(c, kq_tab[f][si][ti], grid, KQ_WARPS * 32, 0, jt, (const int8_t *)c->xkq.p + bo * 256,
               (const float *)c->xkd.p + bo, (const int *)c->xks.p + bo * 16, K, nt);
        LAUNCHED(c, label);
    }
    int writes_x = 0;
    for (int i = 0; i < job.count; i++) writes_x |= outs[i]->d == x->d;
    if (!writes_x) act_cache_set(c, &c->xk_of, x->d, n, K);
}

/* q6_k blocks to the device layout: 208 bytes of ql, qh and scales, the
 * f16 scale apart (one thread per block) */
__global__ void k_repack_q6_k(const uint8_t *raw, int64_t nblk, uint8_t *q, __half *d) {
    const int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= nblk) return;
    const uint8_t *src = raw + b * 210;
    uint8_t *dst = q + b * 208;
    for (int i = 0; i < 208; i++) dst[i] = src[i];
    __half_raw h;
    h.x = (unsigned short)(src[208] | (src[209] << 8));
    d[b] = __half(h);
}

/* ---- prefill tiles: the matrix expanded to f16 for k_mm_w ---- */

/* One thread per 32-value block: its values times 2^we in f16, as 16
 * words in the order k_mm_w's q8_0 expansion makes its fragments (word 4c
 * + s: values 4c, 4c + 2 / 4c + 1, 4c + 3 / 16 + 4c, 16 + 4c + 2 /
 * 16 + 4c + 1, 16 + 4c + 3, the first in the low half). */
template <int FMT>
__global__ void k_kq_f16(const uint8_t *__restrict__ q, const __half *__restrict__ d6, int64_t nblk32, float wexp,
                         __half *__restrict__ out) {
    CU_TRACE(CT_KQ_F16);
    pdl_wait();
    CU_TRACE_RELEASED();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nblk32) return;
    const int64_t sb = i / 8;
    const int j = (int)(i % 8);
    const uint8_t *blk = q + sb * kq_block_bytes(FMT);
    const __half *dd = FMT == DW_Q6_K ? d6 + sb : NULL;
    unsigned w[16];
#pragma unroll
    for (int cc = 0; cc < 4; cc++) {
        const int base[4] = {4 * cc, 4 * cc + 1, 16 + 4 * cc, 16 + 4 * cc + 1};
#pragma unroll
        for (int s = 0; s < 4; s++) {
            const __half lo = __float2half_rn(__fmul_rn(kq_value<FMT>(blk, dd, j, base[s]), wexp));
            const __half hi = __float2half_rn(__fmul_rn(kq_value<FMT>(blk, dd, j, base[s] + 2), wexp));
            w[4 * cc + s] = (unsigned)__half_as_ushort(lo) | (unsigned)__half_as_ushort(hi) << 16;
        }
    }
    uint4 *o = (uint4 *)(out + i * 32);
#pragma unroll
    for (int k = 0; k < 4; k++) o[k] = make_uint4(w[4 * k], w[4 * k + 1], w[4 * k + 2], w[4 * k + 3]);
}

void kq_f16(cuda_backend *c, const be_weight *W, __half *out) {
    const int64_t nblk32 = W->ne0 * W->ne1 / 32;
    const unsigned grid = blocks_for((size_t)nblk32, 256);
    if (W->fmt == DW_Q4_K)
        launch(c, k_kq_f16<DW_Q4_K>, grid, 256, 0, (const uint8_t *)W->q, (const __half *)NULL, nblk32, W->hexp, out);
    else if (W->fmt == DW_Q5_K)
        launch(c, k_kq_f16<DW_Q5_K>, grid, 256, 0, (const uint8_t *)W->q, (const __half *)NULL, nblk32, W->hexp, out);
    else
        launch(c, k_kq_f16<DW_Q6_K>, grid, 256, 0, (const uint8_t *)W->q, (const __half *)W->d, nblk32, W->hexp, out);
    LAUNCHED(c, "k-quant weights to f16");
}

float kq_hexp(uint32_t type, const uint8_t *data, int64_t nblk) {
    /* the largest |value| a block can hold: |d| 63 15 + |dmin| 63 (q4_k),
     * |d| 63 31 + |dmin| 63 (q5_k), |d| 128 32 (q6_k) */
    const int q6 = type == QT_Q6_K;
    const uint32_t bytes = quant_type_size(type);
    float big = 0;
    for (int64_t b = 0; b < nblk; b++) {
        const uint8_t *blk = data + b * bytes;
        const float d = fabsf(quant_get_f16(q6 ? blk + 208 : blk)), dm = q6 ? 0.0f : fabsf(quant_get_f16(blk + 2));
        if (!isfinite(d) || !isfinite(dm)) return 0;
        const float v = q6 ? d * 4096.0f : d * 63.0f * (type == QT_Q5_K ? 31.0f : 15.0f) + dm * 63.0f;
        big = v > big ? v : big;
    }
    return isfinite(big) ? weight_hexp(big) : 0;
}
