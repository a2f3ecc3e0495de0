/* layer_rest (backend.h) on one persistent launch: the rest of a one-token
 * layer after its attention (o, gate/up, down) and the next layer's q/k/v,
 * q4_0 weights only, GEM_CUDA_REST=1..3 (the ring's shape; off by default
 * until it is measured faster on the H200: on an H100 every shape is
 * slower, 1.8-2.6% for =1 and 9.5-13% for =2 and =3 at depths 0-32768,
 * bench/results/cuda-rest-h100-2026-12-05b.json).
 *
 * Why: the kernel-per-op step spends ~30 us of each 31B layer's ~100 on the
 * ramps and tails of its products and the small kernels between them
 * (cuda-samecall-2026-12-05.json's trace; cuda-boundary-bounds-2026-12-04
 * bounds that path at 176-180 tok/s). Here weight bytes keep streaming
 * across the boundaries: one producer warp per multiprocessor copies
 * chunks of whole rows of every product, product after product, into a
 * ring of shared-memory stages (cp.async.bulk, completion counted in bytes
 * on each stage's "full" mbarrier) and never waits at a grid barrier; the
 * consumer warps compute and free stages ("empty" mbarriers) and alone
 * meet at the grid barriers between products. The design and its numbers
 * come from bench/cuda_ring_probe.cu (k_group).
 *
 * Phases (one grid barrier between two):
 *   0  o_out = o att                       input: att's codes
 *   1  act = gelu(gate f) (up f)           input: h' = h + rms(o_out) w1, f = rms(h') w2
 *   2  down_out = down act                 input: act's codes
 *   3  next q/k/v of a                     input: h'' = (h' + rms(down_out) w3) s, a = rms(h'') w4
 * Every block builds a phase's input itself from the outputs before it
 * (reads through L2), so no kernel and no extra barrier sits between two
 * products; block 0 alone writes h' (to scratch), h'' (to h), a and a's
 * codes (the quantized-activation scratch, for a product after the op).
 * Phase 3 runs its build even without products (the last layer: h'' only).
 *
 * Invariants:
 * - Chunks are claimed at run time (a phase's counter, two chunks a
 *   claim): a multiprocessor that streams faster takes more. A producer
 *   that finds none left puts one end mark per consumer group through the
 *   ring; every claim precedes its block's end marks, so once every
 *   block's consumers are done no producer claims again, and the last
 *   block to finish zeroes the counters for the next launch.
 * - Stages are dealt to groups of RS_GW warps (stage index mod the group
 *   count); a group's warps split every row of the stage and meet at the
 *   group's named barrier (2 + group) to add their parts.
 * - The grid barrier's counter only grows; an arrival's ticket names its
 *   barrier, so no argument changes between launches (graph replay).
 * - Every block must be resident at once (grid barriers): one block per
 *   multiprocessor (its shared memory allows no second), n_sm blocks, on
 *   a GPU this process's one stream has to itself (another stream or MPS
 *   client holding multiprocessors for long would reach the 10 s trap).
 * - Its producers read the claim counters before the grid dependency
 *   wait. The launch that zeroed them last is never the kernel right
 *   before (in a step, attention kernels come between two; back to back,
 *   the earlier one never triggers, so the later starts after it has
 *   completed and its memory is visible).
 * - Launched with programmatic dependent launch: the producers stream
 *   weights (which no kernel writes) and claim before the grid dependency
 *   wait; the consumers wait before reading anything. The kernel never
 *   lets a dependent start early (it never triggers), so the next kernel
 *   cannot take a multiprocessor one of its blocks still needs.
 * - A wait that lasts 10 s traps (persist_deadline: a device error
 *   status() reports) instead of hanging the process.
 * Numerics: the input codes are k_quantize_act's (scale max|x|/127, round
 * to nearest even), the norms k_rmsnorm4's formulas; only the f32
 * summation order differs from the op-by-op calls. */
#include "backend/cuda/cuda_common.h"

#define RS_BT 512                /* consumer threads */
#define RS_W (RS_BT / 32)        /* consumer warps */
#define RS_TB 12288              /* bytes per stage: a 21504-value q4_0 row (12096) fits */
#define RS_KMAX 21504            /* widest product input (o's, down's) */
#define RS_NBMAX (RS_KMAX / 32)  /* 32-value blocks of it */
#define RS_HMAX 8192             /* widest residual (four float4 per consumer thread) */
#define RS_ROWS 8                /* dot rows per stage at most (rows, or twice the pairs) */
#define RS_CG 2                  /* chunks per claim */
#define RS_PHASES 4

enum { RS_PLAIN, RS_RESID };

typedef struct {
    const uint8_t *q; /* M x nb blocks of 16 code bytes */
    const __half *d;  /* M x nb scales */
    float *out;
    int M, chunk0; /* rows; the matrix's first chunk in the phase's numbering */
} rs_mat;

typedef struct {
    rs_mat m[3];
    int count, pair; /* matrices; pair: m[0] gate, m[1] up, out gelu(gate) up into m[0].out */
    int K, rows, chunks;
    int kind;
    const float *x;   /* RS_PLAIN: the input; RS_RESID: the addend, normed first */
    const float *h_in, *w_res, *scale, *w_norm; /* RS_RESID (w_norm NULL: no input codes) */
    float *h_out, *a_out;                       /* RS_RESID, written by block 0 (a_out may be NULL) */
    int8_t *xq;                                 /* RS_RESID: a's codes for later products (block 0), or NULL */
    float *xd;
    int *xs;
} rs_phase;

typedef struct {
    rs_phase p[RS_PHASES];
    float eps;
    int *claim;    /* RS_PHASES counters, zero between launches */
    unsigned *done; /* blocks finished, zero between launches */
    unsigned long long *bar;
} rs_job;

/* Sum over the consumer threads (red: RS_W floats, its own per use). */
__device__ __forceinline__ float rs_sum(float v, float *red) {
    v = warp_sum(v);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    asm volatile("bar.sync 1, %0;" ::"r"(RS_BT) : "memory");
    float s = 0;
#pragma unroll
    for (int w = 0; w < RS_W; w++) s += red[w];
    return s;
}

/* 8-bit codes of v (float4 j of the input: 8 consecutive threads hold a
 * 32-value block) into the two shared planes (values 0-15 and 16-31 of
 * each block, so the dots' 16-byte reads of consecutive blocks meet no bank
 * conflict), and into global codes when xq (block 0). Whole groups of 8
 * lanes take part (widths are multiples of 32). */
__device__ __forceinline__ void rs_codes(float4 v, int j, bool in, int4 *xlo, int4 *xhi, float *xd, int *xs,
                                         int8_t *gq, float *gd, int *gs) {
    const codes8 c = block8_codes(v);
    if (!in) return;
    const int b = j >> 3, q = j & 7;
    ((int *)(q < 4 ? xlo : xhi))[b * 4 + (q & 3)] = c.packed;
    if (q == 0) xd[b] = c.d, xs[b] = c.sum;
    if (gq) {
        ((int *)gq)[j] = c.packed;
        if (q == 0) gd[b] = c.d, gs[b] = c.sum;
    }
}

/* A phase's input codes, built by every block (see the file comment). */
__device__ void rs_build(const rs_phase &P, float eps, int4 *xlo, int4 *xhi, float *xd, int *xs, float *red) {
    const int n4 = P.K / 4;
    if (P.kind == RS_PLAIN) {
        constexpr int J = (RS_KMAX / 4 + RS_BT - 1) / RS_BT;
        const float4 *x4 = (const float4 *)P.x;
        float4 v[J];
#pragma unroll
        for (int k = 0; k < J; k++) { /* every load before any use */
            const int j = threadIdx.x + k * RS_BT;
            v[k] = j < n4 ? __ldcg(x4 + j) : make_float4(0, 0, 0, 0);
        }
#pragma unroll
        for (int k = 0; k < J; k++) {
            if (k * RS_BT >= n4) break; /* the same for every thread */
            const int j = threadIdx.x + k * RS_BT;
            rs_codes(v[k], j, j < n4, xlo, xhi, xd, xs, NULL, NULL, NULL);
        }
        return;
    }
    constexpr int J = RS_HMAX / 4 / RS_BT;
    const float4 *x4 = (const float4 *)P.x, *h4 = (const float4 *)P.h_in, *wr4 = (const float4 *)P.w_res,
                 *wn4 = (const float4 *)P.w_norm;
    float4 v[J], h[J];
    float ss = 0;
#pragma unroll
    for (int k = 0; k < J; k++) {
        const int j = threadIdx.x + k * RS_BT;
        v[k] = j < n4 ? __ldcg(x4 + j) : make_float4(0, 0, 0, 0);
        h[k] = j < n4 ? __ldcg(h4 + j) : make_float4(0, 0, 0, 0);
    }
    const float sc = P.scale ? P.scale[0] : 1.0f;
#pragma unroll
    for (int k = 0; k < J; k++) ss += v[k].x * v[k].x + v[k].y * v[k].y + v[k].z * v[k].z + v[k].w * v[k].w;
    const float r = 1.0f / sqrtf(rs_sum(ss, red) / (float)P.K + eps);
    float ss2 = 0;
#pragma unroll
    for (int k = 0; k < J; k++) { /* h' = (h + (x r) w) s, k_rmsnorm4's order */
        const int j = threadIdx.x + k * RS_BT;
        if (j >= n4) break;
        const float4 w = __ldg(wr4 + j);
        float4 t = make_float4(v[k].x * r * w.x, v[k].y * r * w.y, v[k].z * r * w.z, v[k].w * r * w.w);
        t = make_float4(h[k].x + t.x, h[k].y + t.y, h[k].z + t.z, h[k].w + t.w);
        if (P.scale) t.x *= sc, t.y *= sc, t.z *= sc, t.w *= sc;
        if (blockIdx.x == 0) ((float4 *)P.h_out)[j] = t;
        h[k] = t;
        ss2 += t.x * t.x + t.y * t.y + t.z * t.z + t.w * t.w;
    }
    if (!P.w_norm) return;
    const float r2 = 1.0f / sqrtf(rs_sum(ss2, red + RS_W) / (float)P.K + eps);
    const bool first = blockIdx.x == 0;
#pragma unroll
    for (int k = 0; k < J; k++) {
        if (k * RS_BT >= n4) break;
        const int j = threadIdx.x + k * RS_BT;
        const bool in = j < n4;
        const float4 w = in ? __ldg(wn4 + j) : make_float4(0, 0, 0, 0);
        const float4 t = make_float4(h[k].x * r2 * w.x, h[k].y * r2 * w.y, h[k].z * r2 * w.z, h[k].w * r2 * w.w);
        if (first && in && P.a_out) ((float4 *)P.a_out)[j] = t;
        rs_codes(t, j, in, xlo, xhi, xd, xs, first ? P.xq : NULL, P.xd, P.xs);
    }
}

/* The matrix of chunk c and its first row (a pair's chunks are gate's:
 * up's rows come with them). */
__device__ __forceinline__ int rs_mat_of(const rs_phase &P, int c, int &row0) {
    const int m = P.pair ? 0 : (P.count > 1 && c >= P.m[1].chunk0) + (P.count > 2 && c >= P.m[2].chunk0);
    row0 = (c - P.m[m].chunk0) * P.rows;
    return m;
}

/* RS_ST stages, groups of RS_GW warps (the ring's shapes GEM_CUDA_REST
 * picks: cu_layer_rest) */
template <int RS_ST, int RS_GW>
__global__ void __launch_bounds__(RS_BT + 32, 1) k_layer_rest(const __grid_constant__ rs_job job) {
    constexpr int RS_G = RS_W / RS_GW; /* groups */
    static_assert(RS_W % RS_GW == 0 && RS_ST % RS_G == 0, "whole groups, every group owning whole stages");
    static_assert(RS_G + 2 <= 16, "named barriers 2 .. RS_G + 1");
    CU_TRACE(CT_LAYER_REST); /* thread 0, a consumer, records the block */
    extern __shared__ __align__(128) uint4 ring[]; /* RS_ST x RS_TB bytes */
    __shared__ __align__(8) unsigned long long full[RS_ST], empty[RS_ST];
    __shared__ int4 xlo[RS_NBMAX], xhi[RS_NBMAX];
    __shared__ float xd[RS_NBMAX], red[2 * RS_W], part[2][RS_G][RS_ROWS][RS_GW];
    __shared__ int xs[RS_NBMAX], tag[RS_ST];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (threadIdx.x == 0) {
        for (int i = 0; i < RS_ST; i++) mbar_init(&full[i], 1), mbar_init(&empty[i], RS_GW);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x >= RS_BT) { /* the producer warp: weights only, before and without any wait */
        if (lane != 0) return;
        unsigned it = 0;
        for (int p = 0; p < RS_PHASES; p++) {
            const rs_phase &P = job.p[p];
            const int nb = P.K / 32;
            int base = P.chunks ? atomicAdd(&job.claim[p], RS_CG) : 0, k = 0, next = 0;
            for (;; it++) {
                if (k == 0) next = base < P.chunks ? atomicAdd(&job.claim[p], RS_CG) : 0;
                const int c = base + k;
                const int s = (int)(it % RS_ST);
                if (c >= P.chunks) { /* an end mark for every group */
                    for (int e = 0; e < RS_G; e++, it++) {
                        const int se = (int)(it % RS_ST);
                        if (it >= RS_ST) mbar_wait(&empty[se], (it / RS_ST - 1) & 1);
                        tag[se] = -1;
                        mbar_arrive(&full[se]); /* release: the tag is seen */
                    }
                    break;
                }
                if (it >= RS_ST) mbar_wait(&empty[s], (it / RS_ST - 1) & 1);
                tag[s] = c;
                int row0;
                const int m = rs_mat_of(P, c, row0);
                const rs_mat &A = P.m[m];
                const size_t b0 = (size_t)row0 * nb;
                const unsigned n = (unsigned)(min(P.rows, A.M - row0) * nb);
                uint4 *dst = ring + (size_t)s * (RS_TB / 16);
                const unsigned bytes = P.pair ? 2 * n * 18 : n * 18;
                mbar_expect(&full[s], bytes);
                bulk_copy(dst, A.q + b0 * 16, n * 16, &full[s]);
                if (P.pair) { /* stage: gate codes, up codes, gate scales, up scales */
                    bulk_copy(dst + n, P.m[1].q + b0 * 16, n * 16, &full[s]);
                    bulk_copy(dst + 2 * n, A.d + b0, n * 2, &full[s]);
                    bulk_copy(dst + 2 * n + n / 8, P.m[1].d + b0, n * 2, &full[s]);
                } else {
                    bulk_copy(dst + n, A.d + b0, n * 2, &full[s]);
                }
                if (++k == RS_CG) k = 0, base = next;
            }
        }
        return;
    }
    asm volatile("griddepcontrol.wait;" ::: "memory"); /* att, h: the kernels before have completed */
    CU_TRACE_RELEASED();
    const int g = warp / RS_GW, wi = warp % RS_GW;
    unsigned it = (unsigned)g; /* this group's stages */
    int buf = 0;
    for (int p = 0; p < RS_PHASES; p++) {
        const rs_phase &P = job.p[p];
        const int nb = P.K / 32, b0 = wi * nb / RS_GW, b1 = (wi + 1) * nb / RS_GW; /* this warp's segment */
        rs_build(P, job.eps, xlo, xhi, xd, xs, red);
        asm volatile("bar.sync 1, %0;" ::"r"(RS_BT) : "memory");
        for (;; it += RS_G) {
            const int s = (int)(it % RS_ST);
            mbar_wait(&full[s], (it / RS_ST) & 1);
            const int c = tag[s];
            if (c < 0) {
                __syncwarp();
                if (lane == 0) mbar_arrive(&empty[s]);
                it += RS_G;
                break;
            }
            int row0;
            const rs_mat &A = P.m[rs_mat_of(P, c, row0)];
            const int nrows = min(P.rows, A.M - row0), n = nrows * nb;
            const uint4 *qs = ring + (size_t)s * (RS_TB / 16);
            const __half *ds = (const __half *)(qs + (P.pair ? 2 * n : n));
            /* an item: two rows whose dots share the activation reads
             * (rows r, r + 1, or the gate and up rows of pair r) */
            const int items = P.pair ? nrows : (nrows + 1) / 2;
            for (int i = 0; i < items; i++) {
                const int ra = P.pair ? i : 2 * i, oa = ra * nb, ob = P.pair ? n + oa : oa + nb;
                const bool two = P.pair || ra + 1 < nrows;
                float a = 0, u = 0;
                q4_pair_dot(qs, ds, oa, ob, two, b0, b1, xlo, xhi, xd, xs, a, u);
                a = warp_sum(a);
                u = warp_sum(u);
                if (lane == 0) part[buf][g][2 * i][wi] = a, part[buf][g][2 * i + 1][wi] = u;
            }
            __syncwarp();
            if (lane == 0) mbar_arrive(&empty[s]); /* the stage's bytes are read */
            asm volatile("bar.sync %0, %1;" ::"r"(2 + g), "r"(RS_GW * 32) : "memory");
            for (int i = wi; i < items; i += RS_GW) { /* the group's parts, in warp order */
                if (lane) continue;
                float a = 0, u = 0;
#pragma unroll
                for (int v = 0; v < RS_GW; v++) a += part[buf][g][2 * i][v], u += part[buf][g][2 * i + 1][v];
                const int ra = P.pair ? i : 2 * i;
                if (P.pair) A.out[row0 + ra] = gelu_tanh_f(a) * u;
                else {
                    A.out[row0 + ra] = a;
                    if (ra + 1 < nrows) A.out[row0 + ra + 1] = u;
                }
            }
            buf ^= 1; /* the group's next stage writes the other parts while these are read */
        }
        if (p + 1 < RS_PHASES) consumers_grid_sync(RS_BT, job.bar);
    }
    /* the last block done zeroes the claim counters: every producer has
     * claimed for the last time before its block's consumers got here */
    asm volatile("bar.sync 1, %0;" ::"r"(RS_BT) : "memory");
    if (threadIdx.x == 0) {
        __threadfence();
        if (atomicAdd(job.done, 1u) == gridDim.x - 1) {
            __threadfence(); /* the other blocks' last claims before the reset */
            for (int p = 0; p < RS_PHASES; p++) job.claim[p] = 0;
            *job.done = 0;
            __threadfence();
        }
    }
}

static int rs_f32(const be_weight *w, int n) { return w && w->fmt == DW_F32 && w->ne0 == n && w->ne1 == 1; }
static int rs_q4(const be_weight *w, int cols) { return w && w->fmt == DW_Q4_0 && w->ne0 == cols; }

/* rows per chunk of K-value rows (pair: pairs of them): the most that fit
 * a stage, at most RS_ROWS dot rows */
static int rs_rows(int K, int pair) {
    const int row = K / 32 * 18 * (pair ? 2 : 1), most = pair ? RS_ROWS / 2 : RS_ROWS;
    const int r = RS_TB / row;
    return r < most ? r : most;
}

static void rs_phase_mats(rs_phase *P, int count, const be_weight *const *W, float *const *out) {
    P->count = count;
    P->chunks = 0;
    for (int i = 0; i < count; i++) {
        P->m[i].q = (const uint8_t *)W[i]->q, P->m[i].d = W[i]->d, P->m[i].out = out[i];
        P->m[i].M = (int)W[i]->ne1, P->m[i].chunk0 = P->chunks;
        if (!P->pair || i == 0) P->chunks += (P->m[i].M + P->rows - 1) / P->rows;
    }
}

extern "C" int cu_layer_rest(backend *b, const be_layer_rest *r) {
    cuda_backend *c = cu_of(b);
    if (!c->rest || r->n != 1 || c->gelu_fp16) return 1;
    const int H = r->width, K = r->o ? (int)r->o->ne0 : 0, F = r->gate ? (int)r->gate->ne1 : 0;
    /* rows of whole 8-block groups: every bulk copy (a chunk's scales
     * too) is whole 16-byte units at 16-byte offsets */
    if (H < 256 || H % 256 || H > RS_HMAX || K < 256 || K % 256 || K > RS_KMAX || F < 256 || F % 256 || F > RS_KMAX)
        return 1;
    if (!rs_q4(r->o, K) || r->o->ne1 != H || !rs_q4(r->gate, H) || !rs_q4(r->up, H) || r->up->ne1 != F ||
        !rs_q4(r->down, F) || r->down->ne1 != H)
        return 1;
    if (!rs_f32(r->post_attn_norm, H) || !rs_f32(r->ffn_norm, H) || !rs_f32(r->post_ffw_norm, H) ||
        (r->out_scale && !rs_f32(r->out_scale, 1)) || (r->next_norm && !rs_f32(r->next_norm, H)))
        return 1;
    const int nq = r->next_count;
    if (nq < 0 || nq > 3 || (nq && !r->next_norm)) return 1;
    if (!r->att || !r->h || !r->o_out || !r->act || !r->down_out || (r->next_norm && !r->a)) return 1;
    if (r->att->n < (size_t)K || r->h->n < (size_t)H || r->o_out->n < (size_t)H || r->act->n < (size_t)F ||
        r->down_out->n < (size_t)H || (r->next_norm && r->a->n < (size_t)H))
        return 1;
    for (int i = 0; i < nq; i++)
        if (!rs_q4(r->next_w[i], H) || r->next_w[i]->ne1 < 1 || !r->next_out[i] ||
            r->next_out[i]->n < (size_t)r->next_w[i]->ne1)
            return 1;
    /* blocks read att, h and the outputs before them while others write:
     * distinct buffers only (the seam says so) */
    const float *bufs[9] = {r->att->d, r->h->d, r->o_out->d, r->act->d, r->down_out->d,
                            r->next_norm ? r->a->d : NULL, NULL, NULL, NULL};
    for (int i = 0; i < nq; i++) bufs[6 + i] = r->next_out[i]->d;
    for (int x = 0; x < 9; x++)
        for (int y = x + 1; y < 9; y++)
            if (bufs[x] && bufs[x] == bufs[y]) return 1;
    /* the ring's shape (GEM_CUDA_REST): 1, the default, 16 stages dealt to
     * groups of 2 warps (the ring probe's best, 192 KB); 2, 12 stages to
     * groups of 4 (144 KB); 3, 8 stages to groups of 4 (96 KB). The
     * smaller rings leave a multiprocessor room for attention blocks, so
     * the early launch can start streaming before the attention ends. */
    static void (*const kerns[3])(rs_job) = {k_layer_rest<16, 2>, k_layer_rest<12, 4>, k_layer_rest<8, 4>};
    static const int stages[3] = {16, 12, 8};
    const int v = c->rest - 1;
    void (*const kern)(rs_job) = kerns[v];
    const size_t smem = (size_t)stages[v] * RS_TB;
    if (!c->rest_ready) { /* the shared-memory attribute and one resident block per multiprocessor */
        int per_sm = 0;
        if (cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess ||
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, RS_BT + 32, smem) != cudaSuccess ||
            per_sm < 1) {
            (void)cudaGetLastError(); /* not a failure of the stream: the op-by-op calls instead */
            c->rest_ready = -1;
        } else {
            c->rest_ready = 1;
        }
    }
    if (c->rest_ready < 0) return 1;
    /* scratch: h' (H floats), then the counters (zeroed once: the kernel
     * leaves them zero); a's codes for products after the op; a capture
     * cannot grow them */
    const size_t hbytes = (size_t)RS_HMAX * sizeof(float), need = hbytes + 256;
    const size_t nblk = (size_t)H / 32;
    if (c->capturing && (c->rest_s.cap < need || (r->next_norm && (c->xq.cap < (size_t)H || c->xd.cap < nblk * 4 ||
                                                                    c->xs.cap < nblk * 4))))
        return 1;
    const int fresh = c->rest_s.cap < need;
    if (grow(c, &c->rest_s, need)) return 0; /* taken, failed: the sticky error says why */
    if (fresh && CK(c, cudaMemsetAsync((char *)c->rest_s.p + hbytes, 0, 256, c->st))) return 0;
    if (r->next_norm) {
        c->xq_of.src = NULL; /* xq is rewritten (and may be reallocated) */
        if (grow(c, &c->xq, (size_t)H) || grow(c, &c->xd, nblk * 4) || grow(c, &c->xs, nblk * 4)) return 0;
    }
    float *h1 = (float *)c->rest_s.p;
    rs_job j;
    memset(&j, 0, sizeof j);
    j.eps = r->eps;
    j.claim = (int *)((char *)c->rest_s.p + hbytes);
    j.done = (unsigned *)(j.claim + RS_PHASES);
    j.bar = (unsigned long long *)((char *)c->rest_s.p + hbytes + 64);
    /* 0: o_out = o att */
    rs_phase *P = &j.p[0];
    P->K = K, P->rows = rs_rows(K, 0), P->kind = RS_PLAIN, P->x = r->att->d;
    rs_phase_mats(P, 1, &r->o, &r->o_out->d);
    /* 1: act = gelu(gate f) (up f), f = rms(h') ffn_norm, h' = h + rms(o_out) post_attn_norm */
    P = &j.p[1];
    const be_weight *gu[2] = {r->gate, r->up};
    float *act2[2] = {r->act->d, NULL};
    P->K = H, P->pair = 1, P->rows = rs_rows(H, 1), P->kind = RS_RESID, P->x = r->o_out->d, P->h_in = r->h->d;
    P->w_res = (const float *)r->post_attn_norm->q, P->w_norm = (const float *)r->ffn_norm->q, P->h_out = h1;
    rs_phase_mats(P, 2, gu, act2);
    /* 2: down_out = down act */
    P = &j.p[2];
    P->K = F, P->rows = rs_rows(F, 0), P->kind = RS_PLAIN, P->x = r->act->d;
    rs_phase_mats(P, 1, &r->down, &r->down_out->d);
    /* 3: h = (h' + rms(down_out) post_ffw_norm) s; a = rms(h) next_norm; the next q/k/v of a */
    P = &j.p[3];
    float *qo[3] = {NULL, NULL, NULL};
    for (int i = 0; i < nq; i++) qo[i] = r->next_out[i]->d;
    P->K = H, P->rows = rs_rows(H, 0), P->kind = RS_RESID, P->x = r->down_out->d, P->h_in = h1, P->h_out = r->h->d;
    P->w_res = (const float *)r->post_ffw_norm->q, P->scale = r->out_scale ? (const float *)r->out_scale->q : NULL;
    if (r->next_norm) {
        P->w_norm = (const float *)r->next_norm->q, P->a_out = r->a->d;
        P->xq = (int8_t *)c->xq.p, P->xd = (float *)c->xd.p, P->xs = (int *)c->xs.p;
    }
    rs_phase_mats(P, nq, r->next_w, qo);
    launch(c, kern, (unsigned)c->n_sm, RS_BT + 32, smem, j);
    LAUNCHED(c, "layer rest (persistent)");
    if (r->next_norm) quantized_cache_set(c, r->a->d, 1, H); /* a's codes, for a product after the op */
    return 0;
}
