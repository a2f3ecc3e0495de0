/* CUDA attention of decode steps, and the seam's attention entry points
 * (see cuda_ops.h; shared helpers and invariants in cuda_attn.h and
 * cuda_common.h): the one-token kernels k_attn_dec (a warp per query head
 * and key subset; f32 caches, staged through shared memory) and k_attn_tc
 * (the query heads of a KV head on the tensor cores; f16 caches, with the
 * q/k/v norms and rope folded in for attention_qkv), the combine of steps
 * of up to 8 tokens, and attention_run, which picks every attention
 * call's kernels: flash attention for prompt tiles, else the split-K path
 * (a one-token kernel or k_attn_split, then a combine). One-token steps
 * store their key and value inside the attention kernel, so a recorded
 * step needs no store launch. */
#include "backend/cuda/cuda_attn.h"
#include "backend/cuda/cuda_ops.h"

/* The keys s0 .. s1 - 1 of split `split` of a one-token step at pos0 (s0 >=
 * s1: the split is empty). */
__device__ __forceinline__ void one_token_split(int pos0, int window, int nsplit, int split, int &s0, int &s1) {
    int first, len;
    const int per = attn_split_per(pos0, pos0, window, nsplit, first, len);
    s0 = first + split * per;
    s1 = min(s0 + per, pos0 + 1);
}

/* The combine of steps of up to 8 tokens: one block per (query, head, 32 output elements), its 8 warps
 * summing every 8th split from a different start (lane = element), then
 * warp 0 adding the 8 sums in order. k_attn_combine gives a head's whole
 * row to one block of 128 threads, each walking all splits for its
 * elements: at depth, 256 splits x 512 elements of a full layer are 128
 * rounds of dependent loads in only 32 blocks
 * (bench/results/cuda-variants-2026-12-03b.json). The same split weights and
 * the same quantization; L and the outputs are summed in another (fixed)
 * order, so the last bit of an output, and rarely a code, can differ from
 * k_attn_combine's. */
#define CB_GROUPS 8
__global__ void __launch_bounds__(CB_GROUPS * 32)
    k_attn_combine_wide(const float *part, const float *pml, int n_head, int d, int nsplit, float *out,
                        int8_t *__restrict__ xq, float *__restrict__ xd, int *__restrict__ xs, const int *step, int n,
                        int QB, int window, int rows) {
    CU_TRACE(CT_ATTN_COMBINE_WIDE);
    const int hq = blockIdx.x, i = blockIdx.y, e = blockIdx.z * 32 + (threadIdx.x & 31);
    const int tid = threadIdx.x, lane = tid & 31, grp = tid >> 5;
    const size_t base = (size_t)i * n_head + hq;
    /* the step buffer is written before the step's first kernel; rows: the
     * rows of a row-exact tile, each a one-token step (its own step
     * buffer, n = QB = 1) */
    const int used = rows ? attn_used_splits(step + 3 * i, 0, 1, 1, window, nsplit)
                          : attn_used_splits(step, i, n, QB, window, nsplit);
    pdl_wait();
    CU_TRACE_RELEASED();
    extern __shared__ float wgt[];
    __shared__ float red[CB_GROUPS][32], sm[32];
    /* A group's first CB_PRE partials are loaded with the split maxima and
     * sums, not after the weights: one round of loads before the sums
     * instead of two (a decode step's combine is one to a few splits per
     * group). The same products, added in the same order. */
    constexpr int CB_PRE = 4;
    float pv[CB_PRE];
#pragma unroll
    for (int j = 0; j < CB_PRE; j++) {
        const int sp = grp + CB_GROUPS * j;
        pv[j] = sp < used ? part[(base * nsplit + sp) * d + e] : 0.0f;
    }
    const float L = combine_weights(pml + base * nsplit * 2, used, wgt, sm);
    float o = 0;
#pragma unroll
    for (int j = 0; j < CB_PRE; j++)
        if (grp + CB_GROUPS * j < used) o += wgt[grp + CB_GROUPS * j] * pv[j];
#pragma unroll 8
    for (int sp = grp + CB_GROUPS * CB_PRE; sp < used; sp += CB_GROUPS) o += wgt[sp] * part[(base * nsplit + sp) * d + e];
    red[grp][lane] = o;
    __syncthreads();
    if (grp != 0) return;
    o = red[0][lane];
#pragma unroll
    for (int j = 1; j < CB_GROUPS; j++) o += red[j][lane];
    o *= 1.0f / L;
    out[base * d + e] = o;
    if (xq) quantize_block32(o, (base * d + e) / 32, lane, xq, xd, xs); /* the warp holds one 32-value block */
}

/* ---- one-token decode attention, warp per query head and key subset
 * (the register form, GEM_CUDA_ATTN_DEC=1, replaced k_attn_split for
 * one-token steps; the staged form is the default for f32 caches) ----
 * k_attn_split gives a block's 256 threads one key at a time: per 64-key
 * chunk a dependent chain of key loads, warp reductions, a block-wide
 * softmax and value loads, with barriers between. Here each warp owns one
 * query head and every S-th key of the block's split (S = AD_WARPS / GB
 * warps share a head) and runs its own online softmax over KU keys per
 * round, all KU key and value rows loaded before the first dot product;
 * no barrier until the warps of a head merge their (max, sum, output) in
 * shared memory. Lane l holds elements VW l + 32 VW i of every row (VW
 * values per load: 4, or 8 for f16 entries of heads 256 and 512), so each
 * load instruction of a warp reads one contiguous stretch. The split
 * ranges, the partial layout and the empty-split marks are k_attn_split's
 * (n = 1, QB = 1), so k_attn_combine_wide combines either.
 * STAGED (the default for f32 caches; GEM_CUDA_ATTN_DEC=2 for f16 ones
 * too): a deep split is a long chain of rounds per warp, each waiting on
 * HBM for a few rows (31B depth 32768: 128 keys per split). There the
 * block's threads copy tiles of AD_TILE_BYTES of cached keys and values
 * into shared memory with cp.async, AD_STAGES tiles in flight, and the
 * warps run the same rounds on rows read from shared memory
 * (bench/results/cuda-decode-staged-2026-12-03.json). */
#define AD_WARPS 8
#define AD_STAGES 3
#define AD_TILE_BYTES 32768 /* keys and values of one stage */

template <int VW> __device__ __forceinline__ void ad_ld(float *d, const float *p) {
    const float4 a = *(const float4 *)p;
    d[0] = a.x, d[1] = a.y, d[2] = a.z, d[3] = a.w;
    if (VW == 8) {
        const float4 b = *(const float4 *)(p + 4);
        d[4] = b.x, d[5] = b.y, d[6] = b.z, d[7] = b.w;
    }
}
template <int VW> __device__ __forceinline__ void ad_ld(float *d, const __half *p) {
    if (VW == 8) {
        const uint4 u = *(const uint4 *)p;
        const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const float2 f = __half22float2(*(const __half2 *)&w[i]);
            d[2 * i] = f.x, d[2 * i + 1] = f.y;
        }
    } else {
        const float4 f = kv_ld4(p);
        d[0] = f.x, d[1] = f.y, d[2] = f.z, d[3] = f.w;
    }
}

/* A lane's E = D / 32 elements of the row at src (global or shared). */
template <int D, int VW, typename T> __device__ __forceinline__ void ad_lane(float (&r)[D / 32], const T *src, int lane) {
#pragma unroll
    for (int i = 0; i < D / 32 / VW; i++) ad_ld<VW>(r + i * VW, src + VW * lane + 32 * VW * i);
}

/* Row p of keys or values: this step's row (f32) for p >= pos0, else the
 * cache's. */
template <int D, int VW, typename KT>
__device__ __forceinline__ void ad_row(float (&r)[D / 32], const float *cur, const KT *cache, int p, int pos0, int kvh,
                                       int h, int cap, int ring, int lane) {
    if (p >= pos0) ad_lane<D, VW>(r, cur + ((size_t)(p - pos0) * kvh + h) * D, lane);
    else ad_lane<D, VW>(r, cache + ((size_t)(ring ? p % cap : p) * kvh + h) * D, lane);
}

/* One round of a warp's online softmax over KU keys, the first nv of them
 * real (the rest repeat a real key and weigh nothing; nv >= 1, so the new
 * max is finite and the first round scales the zero state by
 * expf(-inf) = 0). The rescale runs only when the max grows: otherwise its
 * factor is expf(0) = 1 exactly, and deep in a split the max rarely moves
 * (the scores are the same bits in every lane after the butterfly sums,
 * so the branch is uniform). */
template <int E, int KU>
__device__ __forceinline__ void ad_round(const float (&qv)[E], const float (&kr)[KU][E], const float (&vr)[KU][E],
                                         int nv, float &m, float &l, float (&o)[E]) {
    float sc[KU];
#pragma unroll
    for (int u = 0; u < KU; u++) {
        float d = 0;
#pragma unroll
        for (int e = 0; e < E; e++) d += qv[e] * kr[u][e];
        sc[u] = d;
    }
#pragma unroll
    for (int off = 16; off; off >>= 1)
#pragma unroll
        for (int u = 0; u < KU; u++) sc[u] += __shfl_xor_sync(0xffffffffu, sc[u], off);
    float mx = m;
#pragma unroll
    for (int u = 0; u < KU; u++) {
        if (u >= nv) sc[u] = -INFINITY;
        mx = fmaxf(mx, sc[u]);
    }
    if (mx > m) {
        const float a = expf(m - mx);
        l *= a;
#pragma unroll
        for (int e = 0; e < E; e++) o[e] *= a;
        m = mx;
    }
#pragma unroll
    for (int u = 0; u < KU; u++) {
        const float w = expf(sc[u] - m);
        l += w;
#pragma unroll
        for (int e = 0; e < E; e++) o[e] += w * vr[u][e];
    }
}

/* Keys per stage of the staged kernel, and the dynamic shared memory. */
template <int D, typename KT> struct ad_geom {
    static constexpr int TK = AD_TILE_BYTES / (2 * D * (int)sizeof(KT));
    static constexpr int SMEM = AD_STAGES * 2 * TK * D * (int)sizeof(KT);
    /* two blocks per multiprocessor (the launch bound): both blocks' stages,
     * merge arrays and 1 KB of reserved shared memory within Hopper's
     * 228 KB (head 512: 1.9 KB to spare) */
    static_assert(2 * (SMEM + AD_WARPS * (D + 2) * 4 + 1024) <= 228 * 1024, "two staged blocks per multiprocessor");
};

/* Tile t of cached positions s0 + t TK .. (before sc1) into stage t mod
 * AD_STAGES, 16 bytes per copy, then one commit (also when empty: the
 * wait counts groups). */
template <int D, typename KT>
__device__ __forceinline__ void ad_stage(KT *sk, const KT *ck, const KT *cv, int t, int nt, int s0, int sc1, int kvh,
                                         int h, int cap, int ring) {
    typedef ad_geom<D, KT> G;
    constexpr int C = D * (int)sizeof(KT) / 16, V = 16 / (int)sizeof(KT); /* chunks per row, values per chunk */
    if (t < nt) {
        KT *dk = sk + (size_t)(t % AD_STAGES) * 2 * G::TK * D, *dv = dk + G::TK * D;
        const int t0 = s0 + t * G::TK;
        for (int i = threadIdx.x; i < G::TK * C; i += AD_WARPS * 32) {
            const int r = i / C, c = i % C, p = t0 + r;
            if (p < sc1) {
                const size_t src = ((size_t)(ring ? p % cap : p) * kvh + h) * D + c * V;
                cp_async16(dk + r * D + c * V, ck + src);
                cp_async16(dv + r * D + c * V, cv + src);
            }
        }
    }
    cp_async_commit();
}

/* One block per (KV head x group of GB query heads, split); GB divides
 * AD_WARPS (the host checks). Cached rows (positions before this step's)
 * are read from before pdl_wait: the register path's first round, the
 * staged path's first AD_STAGES - 1 tiles. Safe because those rows were
 * written by earlier steps, the step buffer by a copy before the step's
 * kernels, and a kernel's code before its wait runs only once the kernel
 * two back has completed (every kernel lets its dependents start only
 * after its own wait); this step's row (p = pos0, written by the kernel
 * just before) is read after the wait. So the kernel just before a
 * one-token attention must not write that cache: in the model it is the
 * q/k/v norm + rope, and a prefill tile's k_kv_store is many launches
 * back. */
template <int D, typename KT, int VW, int KU, bool STAGED, bool ROWS>
__global__ void __launch_bounds__(AD_WARPS * 32, STAGED ? 2 : 1)
    k_attn_dec(const float *q, const float *k, const float *v, const KT *ck, const KT *cv, const int *step, int n_head,
               int kvh, int cap, int ring, int window, int nsplit, int GB, float *part, float *pml, KT *store_k,
               KT *store_v, const kv_row *rkv) {
    CU_TRACE(CT_ATTN_DEC);
    if (ROWS) { /* row blockIdx.z of a row-exact tile (as k_attn_tc's) */
        const int row = blockIdx.z;
        if (rkv) ck = (const KT *)rkv[row].k, cv = (const KT *)rkv[row].v; /* a sequence's own caches */
        step += 3 * row;
        q += (size_t)row * n_head * D;
        k += (size_t)row * kvh * D;
        v += (size_t)row * kvh * D;
        part += (size_t)row * n_head * nsplit * D;
        pml += (size_t)row * n_head * nsplit * 2;
    }
    constexpr int E = D / 32;
    static_assert(D % (32 * VW) == 0, "whole loads per lane");
    typedef ad_geom<D, KT> G;
    extern __shared__ __align__(16) unsigned char ad_smem[];
    KT *sk = (KT *)ad_smem; /* STAGED: per stage TK key rows, then TK value rows */
    __shared__ float sm_m[AD_WARPS], sm_l[AD_WARPS];
    __shared__ __align__(16) float sm_o[AD_WARPS][D];
    const int groups = n_head / kvh / GB, S = AD_WARPS / GB;
    const int h = blockIdx.x / groups, hq0 = h * (n_head / kvh) + (blockIdx.x % groups) * GB, split = blockIdx.y;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, sub = warp / GB, hq = hq0 + warp % GB;
    const int pos0 = step[0];
    int s0, s1;
    one_token_split(pos0, window, nsplit, split, s0, s1);
    const int pf = s0 + sub;
    const int sc1 = min(s1, pos0); /* cached rows: s0 .. sc1 - 1 */
    const int nt = STAGED && sc1 > s0 ? (sc1 - s0 + G::TK - 1) / G::TK : 0;
    float kr[KU][E], vr[KU][E];
    /* a tile's rows read the rows before them, which the launch just
     * before stored: their first cached rows after the wait */
    auto first_rows = [&]() {
        if (STAGED) {
#pragma unroll
            for (int t = 0; t < AD_STAGES - 1; t++) ad_stage<D>(sk, ck, cv, t, nt, s0, sc1, kvh, h, cap, ring);
        } else if (pf < s1) {
#pragma unroll
            for (int u = 0; u < KU; u++) {
                const int p = min(pf + u * S, s1 - 1);
                if (p < pos0) {
                    ad_row<D, VW>(kr[u], k, ck, p, pos0, kvh, h, cap, ring, lane);
                    ad_row<D, VW>(vr[u], v, cv, p, pos0, kvh, h, cap, ring, lane);
                }
            }
        }
    };
    if (!ROWS) first_rows();
    pdl_wait();
    CU_TRACE_RELEASED();
    if (ROWS) first_rows();
    if (!ROWS && split == 0 && blockIdx.x % groups == 0)
        attn_store_step<D, AD_WARPS * 32>(k, v, store_k, store_v, pos0, cap, ring, kvh, h);
    if (s0 >= s1) { /* the same for the whole block (no copy was issued) */
        if (sub == 0 && lane == 0) pml_put(pml, (size_t)hq * nsplit + split, -INFINITY, 0);
        return;
    }
    float qv[E], o[E];
    ad_lane<D, VW>(qv, q + (size_t)hq * D, lane);
#pragma unroll
    for (int e = 0; e < E; e++) o[e] = 0;
    float m = -INFINITY, l = 0;
    if (STAGED) {
        for (int t = 0; t < nt; t++) {
            ad_stage<D>(sk, ck, cv, t + AD_STAGES - 1, nt, s0, sc1, kvh, h, cap, ring);
            cp_async_wait<AD_STAGES - 1>(); /* this thread's copies of tile t */
            __syncthreads();                /* everyone's */
            const KT *tk = sk + (size_t)(t % AD_STAGES) * 2 * G::TK * D, *tv = tk + G::TK * D;
            const int nk = min(G::TK, sc1 - (s0 + t * G::TK));
            for (int j0 = sub; j0 < nk; j0 += S * KU) {
#pragma unroll
                for (int u = 0; u < KU; u++) {
                    const int j = min(j0 + u * S, nk - 1);
                    ad_lane<D, VW>(kr[u], tk + (size_t)j * D, lane);
                    ad_lane<D, VW>(vr[u], tv + (size_t)j * D, lane);
                }
                ad_round<E, KU>(qv, kr, vr, (nk - j0 + S - 1) / S, m, l, o);
            }
            __syncthreads(); /* stage t is free for tile t + AD_STAGES */
        }
        cp_async_wait<0>();
        if (s1 > pos0 && sub == 0) { /* this step's key, from the step buffer */
#pragma unroll
            for (int u = 0; u < KU; u++) {
                ad_lane<D, VW>(kr[u], k + (size_t)h * D, lane);
                ad_lane<D, VW>(vr[u], v + (size_t)h * D, lane);
            }
            ad_round<E, KU>(qv, kr, vr, 1, m, l, o);
        }
    } else {
        for (int p0 = pf; p0 < s1; p0 += S * KU) {
#pragma unroll
            for (int u = 0; u < KU; u++) { /* keys past the split repeat its last (weight 0) */
                const int p = min(p0 + u * S, s1 - 1);
                if (p0 != pf || p >= pos0) {
                    ad_row<D, VW>(kr[u], k, ck, p, pos0, kvh, h, cap, ring, lane);
                    ad_row<D, VW>(vr[u], v, cv, p, pos0, kvh, h, cap, ring, lane);
                }
            }
            ad_round<E, KU>(qv, kr, vr, (s1 - p0 + S - 1) / S, m, l, o);
        }
    }
    /* the S warps of each head merge; a warp whose subset was empty left
     * (-inf, 0, zeros) and weighs nothing; key s0 is in subset 0 */
    if (lane == 0) {
        sm_m[warp] = m;
        sm_l[warp] = l;
    }
#pragma unroll
    for (int i = 0; i < E / VW; i++)
#pragma unroll
        for (int j = 0; j < VW; j += 4) /* 16-byte stores: no bank conflicts */
            *(float4 *)&sm_o[warp][VW * lane + 32 * VW * i + j] =
                make_float4(o[i * VW + j], o[i * VW + j + 1], o[i * VW + j + 2], o[i * VW + j + 3]);
    __syncthreads();
    for (int idx = tid; idx < GB * D; idx += AD_WARPS * 32) {
        const int g = idx / D, e = idx % D;
        float M = -INFINITY;
        for (int s2 = 0; s2 < S; s2++) M = fmaxf(M, sm_m[s2 * GB + g]);
        float O = 0, L = 0;
        for (int s2 = 0; s2 < S; s2++) {
            const float w = expf(sm_m[s2 * GB + g] - M);
            O += w * sm_o[s2 * GB + g][e];
            L += w * sm_l[s2 * GB + g];
        }
        const size_t row = (size_t)(hq0 + g) * nsplit + split;
        part[row * D + e] = O;
        if (e == 0) pml_put(pml, row, M, L);
    }
}

/* ---- one-token decode attention on the tensor cores, f16 caches (the
 * default for them, faster than the staged k_attn_dec at every depth:
 * bench/results/cuda-attn-dec-2026-12-03d.json; f32 caches take the
 * staged k_attn_dec) ----
 * k_attn_dec spends ~80 instructions per key and query head (f16 to f32
 * conversions, dot products, a warp sum, value sums); with 8 query heads
 * per KV head (31B full layers) each cached element is converted and
 * multiplied 8 times, and deep splits are bound by that, not by HBM. Here the query
 * heads of a KV head are the n = 8 columns of mma.sync m16n8k16 (f16
 * operands, f32 sums, as k_attn_fa): per tile of 16 keys S^T = K Q^T (keys
 * x heads, K rows from shared memory through ldmatrix, Q^T fragments in
 * registers), an online softmax per head column, P^T from the scores'
 * accumulators by a transposing move (movmatrix), then O^T += V^T P^T with
 * V^T through ldmatrix.trans. Every warp computes the tile's scores (cheap
 * on the tensor cores) and its own quarter of the head's elements, so no
 * merge across warps. Tiles are staged by cp.async, TC_STAGES in flight;
 * rows past the split are zero (score masked to -inf, value 0), this
 * step's row comes from the f32 step buffers, rounded as the cache store
 * rounds it. Groups of more than 8 query heads take several blocks;
 * fewer leave columns unused. Same split ranges, partial layout and
 * combine as k_attn_dec. */
#define TC_WARPS 4
#define TC_STAGES 3
#define TC_HEADS 8

template <int D> struct tc_geom {
    static constexpr int LD = D + 8;                   /* halves per staged row: ldmatrix rows on distinct banks */
    static constexpr int STAGE = 2 * 16 * LD;          /* halves: 16 key rows, then 16 value rows */
    static constexpr int SMEM = TC_STAGES * STAGE * 2; /* bytes */
    /* with the q/k/v norms and rope (tc_nr): this step's normalised key
     * and value rows (f32) after the stages */
    static constexpr int SMEM_NR = SMEM + 2 * D * 4;
};
static_assert(TC_STAGES >= 2, "k_attn_tc's norms use the last stage, which no tile fills before the loop");

/* k_attn_tc with the q/k/v norms and rope of the step folded in (the
 * backend's attention_qkv): the raw projections come in, and each block
 * normalises what it reads itself, so the q/k/v norm+rope launch before the
 * attention goes away, with its launch, wait and round trip through
 * memory (bench/results/cuda-attn-qkv-2026-12-04.json). The arithmetic is
 * k_qkv_norm_rope_e's, bit for bit (see tc_norm_row). */
struct tc_nr {
    const float *qw, *kw, *ff; /* q and k norm weights; rope frequency factors or NULL */
    float eps, theta_scale;
    int v_from_k; /* K as V: the value row is the raw key row normalised without weight */
};

/* One head row of D values by one warp (lane l holds elements l + 32 m):
 * rmsnorm with weight w (or none), then, when cs is set, rope with the
 * angles' cosines cs[j] and sines sn[j]; into dst, and the row normalised
 * without weight into dstv when set. The sum of squares is formed in the
 * order of k_qkv_norm_rope_e's 128 threads and block_sum (thread t owns
 * elements t + 128 e: lane l here forms threads l, l + 32, l + 64 and
 * l + 96's sums, each warp-summed as there, then adds them in warp order),
 * so both give the same bits. */
template <int D>
__device__ __forceinline__ void tc_norm_row(const float *src, const float *w, float eps, const float *cs, const float *sn,
                                            float *dst, float *dstv, int lane) {
    constexpr int M = D / 32, E = D / 128, HALF = D / 2;
    static_assert(D % 128 == 0, "head size");
    float x[M];
#pragma unroll
    for (int m = 0; m < M; m++) x[m] = src[lane + 32 * m];
    float ss = 0;
#pragma unroll
    for (int t = 0; t < 4; t++) {
        float a = 0;
#pragma unroll
        for (int e = 0; e < E; e++) a = __fmaf_rn(x[t + 4 * e], x[t + 4 * e], a);
        ss += warp_sum(a);
    }
    const float r = 1.0f / sqrtf(ss / (float)D + eps);
#pragma unroll
    for (int m = 0; m < M; m++) {
        const float xr = x[m] * r;
        if (dstv) dstv[lane + 32 * m] = xr;
        x[m] = w ? xr * w[lane + 32 * m] : xr;
    }
    if (!cs) {
#pragma unroll
        for (int m = 0; m < M; m++) dst[lane + 32 * m] = x[m];
        return;
    }
    /* element l + 32 m pairs with l + 32 (m + M / 2): the lane's own */
#pragma unroll
    for (int m = 0; m < M / 2; m++) {
        const int j = lane + 32 * m;
        rope_rotate(x[m], x[m + M / 2], cs[j], sn[j], dst[j], dst[j + HALF]);
    }
}

/* The transpose of an 8x8 f16 matrix held as a fragment (lane l: row l / 4,
 * columns 2 (l % 4) and 2 (l % 4) + 1), in the same layout. */
__device__ __forceinline__ unsigned movm_t(unsigned x) {
    unsigned y;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
    return y;
}

/* This step's key and value row (f32, KV head h's: the step buffers' or,
 * with tc_nr, the normalised rows in shared memory) as row r of the stage
 * of tile t. */
template <int D>
__device__ __forceinline__ void tc_cur_row(__half *st, int t, int r, const float *kr, const float *vr) {
    typedef tc_geom<D> G;
    __half *dk = st + (size_t)(t % TC_STAGES) * G::STAGE + (size_t)r * G::LD, *dv = dk + 16 * G::LD;
    for (int e = 4 * (int)threadIdx.x; e < D; e += 4 * TC_WARPS * 32) {
        st_half4(dk + e, *(const float4 *)(kr + e));
        st_half4(dv + e, *(const float4 *)(vr + e));
    }
}

/* Tile t (keys s0 + 16 t ..) into stage t mod TC_STAGES: cached rows by
 * cp.async, rows at or past s1 zero, this step's row (pos0) only when cur
 * (before pdl_wait it may not be written yet: tc_cur_row after it); then
 * one commit, also when empty (the wait counts groups). */
template <int D>
__device__ __forceinline__ void tc_stage(__half *st, const __half *ck, const __half *cv, const float *kr, const float *vr,
                                         int t, int nt, int s0, int s1, int pos0, int kvh, int h, int cap, int ring,
                                         bool cur) {
    typedef tc_geom<D> G;
    constexpr int C = D / 8; /* 16-byte chunks per row */
    if (t < nt) {
        __half *dk = st + (size_t)(t % TC_STAGES) * G::STAGE, *dv = dk + 16 * G::LD;
        for (int i = threadIdx.x; i < 16 * C; i += TC_WARPS * 32) {
            const int r = i / C, c = i % C, p = s0 + 16 * t + r;
            __half *ok = dk + r * G::LD + 8 * c, *ov = dv + r * G::LD + 8 * c;
            if (p >= s1) {
                *(uint4 *)ok = make_uint4(0, 0, 0, 0);
                *(uint4 *)ov = make_uint4(0, 0, 0, 0);
            } else if (p < pos0) {
                const size_t src = ((size_t)(ring ? p % cap : p) * kvh + h) * D + 8 * c;
                cp_async16(ok, ck + src);
                cp_async16(ov, cv + src);
            }
        }
        if (cur && s1 > pos0 && (pos0 - s0) / 16 == t) tc_cur_row<D>(st, t, (pos0 - s0) % 16, kr, vr);
    }
    cp_async_commit();
}

/* One block per (KV head x group of up to 8 query heads, split). NR: the
 * q/k/v norms and rope folded in (tc_nr): before the wait the block puts
 * the rope's angles in its last stage (free until the loop), after it
 * each warp normalises rows (the block's query heads into the last stage,
 * and in the blocks that need this step's key and value, those rows into
 * their own space after the stages). */
template <int D, bool NR, bool ROWS>
__global__ void __launch_bounds__(TC_WARPS * 32)
    k_attn_tc(const float *q, const float *k, const float *v, const __half *ck, const __half *cv, const int *step,
              int n_head, int kvh, int cap, int ring, int window, int nsplit, float *part, float *pml, __half *store_k,
              __half *store_v, tc_nr nr, const kv_row *rkv) {
    CU_TRACE(CT_ATTN_TC);
    if (ROWS) { /* row blockIdx.z of a row-exact tile: its own step, inputs and partials (attn_tc_rows) */
        const int row = blockIdx.z;
        if (rkv) ck = (const __half *)rkv[row].k, cv = (const __half *)rkv[row].v; /* a sequence's own caches */
        step += 3 * row;
        q += (size_t)row * n_head * D;
        k += (size_t)row * kvh * D;
        v += (size_t)row * kvh * D;
        part += (size_t)row * n_head * nsplit * D;
        pml += (size_t)row * n_head * nsplit * 2;
    }
    typedef tc_geom<D> G;
    constexpr int MT = D / 64; /* 16-row output tiles per warp: a quarter of the head */
    static_assert(D % 64 == 0 && (D / 16) % 2 == 0, "head size");
    extern __shared__ __align__(16) unsigned char tc_smem[];
    __half *st = (__half *)tc_smem;
    const int gall = n_head / kvh, groups = (gall + TC_HEADS - 1) / TC_HEADS;
    const int h = blockIdx.x / groups, grp = blockIdx.x % groups, hq0 = h * gall + grp * TC_HEADS;
    const int nh = min(TC_HEADS, gall - grp * TC_HEADS), split = blockIdx.y;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
    const int pos0 = step[0];
    int s0, s1;
    one_token_split(pos0, window, nsplit, split, s0, s1);
    const int nt = s1 > s0 ? (s1 - s0 + 15) / 16 : 0;
    /* NR: in the last stage the angles' cosines and sines (D / 2 each),
     * then the normalised query rows (nh x D); this step's key and value
     * rows after the stages */
    float *nr_cs = (float *)(st + (size_t)(TC_STAGES - 1) * G::STAGE), *nr_sn = nr_cs + D / 2, *nr_q = nr_cs + D;
    float *nr_k = (float *)(st + (size_t)TC_STAGES * G::STAGE), *nr_v = nr_k + D;
    static_assert((TC_HEADS + 1) * D * 4 <= G::STAGE * 2, "the norms' rows fit one stage");
    const float *kr = NR ? nr_k : k + (size_t)h * D, *vr = NR ? nr_v : v + (size_t)h * D;
    /* cached rows of earlier steps only before the wait (see k_attn_dec);
     * a tile's rows read the rows before them, which the launch just
     * before stored: after the wait */
    if (!ROWS)
#pragma unroll
        for (int t = 0; t < TC_STAGES - 1; t++)
            tc_stage<D>(st, ck, cv, kr, vr, t, nt, s0, s1, pos0, kvh, h, cap, ring, false);
    if (NR) /* the position is the step buffer's (set before the step's first kernel) */
        for (int j = threadIdx.x; j < D / 2; j += TC_WARPS * 32) {
            const float a = rope_angle((float)pos0, nr.theta_scale, j, nr.ff);
            nr_cs[j] = cosf(a), nr_sn[j] = sinf(a);
        }
    pdl_wait();
    CU_TRACE_RELEASED();
    if (ROWS)
#pragma unroll
        for (int t = 0; t < TC_STAGES - 1; t++)
            tc_stage<D>(st, ck, cv, kr, vr, t, nt, s0, s1, pos0, kvh, h, cap, ring, false);
    const bool store = !ROWS && split == 0 && grp == 0;
    if (NR) { /* block-uniform: every thread reaches the barrier */
        const bool has_q = s0 < s1, has_kv = store || (has_q && s1 > pos0);
        const int nq = has_q ? nh : 0, rows = nq + (has_kv ? (nr.v_from_k ? 1 : 2) : 0);
        __syncthreads(); /* the angles */
        for (int r = warp; r < rows; r += TC_WARPS) {
            if (r < nq)
                tc_norm_row<D>(q + (size_t)(hq0 + r) * D, nr.qw, nr.eps, nr_cs, nr_sn, nr_q + (size_t)r * D, NULL, lane);
            else if (r == nq)
                tc_norm_row<D>(k + (size_t)h * D, nr.kw, nr.eps, nr_cs, nr_sn, nr_k, nr.v_from_k ? nr_v : NULL, lane);
            else
                tc_norm_row<D>(v + (size_t)h * D, NULL, nr.eps, NULL, NULL, nr_v, NULL, lane);
        }
        __syncthreads();
    }
    if (store) attn_store_row<D, TC_WARPS * 32>(kr, vr, store_k, store_v, pos0, cap, ring, kvh, h);
    if (s0 >= s1) { /* the same for the whole block (no copy was issued) */
        if ((int)threadIdx.x < nh) pml_put(pml, (size_t)(hq0 + threadIdx.x) * nsplit + split, -INFINITY, 0);
        return;
    }
    if (s1 > pos0 && (pos0 - s0) / 16 < TC_STAGES - 1) tc_cur_row<D>(st, (pos0 - s0) / 16, (pos0 - s0) % 16, kr, vr);
    /* Q^T as B fragments: column g = query head hq0 + g (zero past nh),
     * k-step kk: elements 16 kk + 2c, +1 and 16 kk + 2c + 8, +9 */
    unsigned qb[D / 16][2];
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        if (g < nh) {
            const float *qr = (NR ? nr_q + (size_t)g * D : q + (size_t)(hq0 + g) * D) + 16 * kk + 2 * c;
            qb[kk][0] = pack_h2(qr[0], qr[1]);
            qb[kk][1] = pack_h2(qr[8], qr[9]);
        } else {
            qb[kk][0] = qb[kk][1] = 0;
        }
    }
    if (NR) __syncthreads(); /* the last stage is the loop's again */
    float o[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) o[mt][0] = o[mt][1] = o[mt][2] = o[mt][3] = 0;
    /* heads 2c and 2c + 1: running max (the same in every lane of a
     * column) and this lane's part of the sum (keys g and g + 8) */
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0, l1 = 0;
    const int arow = (lane & 7) + 8 * ((lane >> 3) & 1), acol = 8 * (lane >> 4); /* ldmatrix: K as A */
    const int vrow = (lane & 7) + 8 * (lane >> 4), vcol = 8 * ((lane >> 3) & 1);  /* ldmatrix.trans: V^T as A */
    for (int t = 0; t < nt; t++) {
        tc_stage<D>(st, ck, cv, kr, vr, t + TC_STAGES - 1, nt, s0, s1, pos0, kvh, h, cap, ring, true);
        cp_async_wait<TC_STAGES - 1>(); /* this thread's copies of tile t */
        __syncthreads();                /* everyone's, and the plain stores */
        const __half *tk = st + (size_t)(t % TC_STAGES) * G::STAGE, *tv = tk + 16 * G::LD;
        float sa[4] = {0, 0, 0, 0}, sb[4] = {0, 0, 0, 0}; /* two chains of k-steps */
#pragma unroll
        for (int kk = 0; kk < D / 16; kk += 2) {
            unsigned a0, a1, a2, a3, b0, b1, b2, b3;
            ldsm_x4(a0, a1, a2, a3, tk + arow * G::LD + 16 * kk + acol);
            ldsm_x4(b0, b1, b2, b3, tk + arow * G::LD + 16 * (kk + 1) + acol);
            mma_f16(sa, a0, a1, a2, a3, qb[kk][0], qb[kk][1]);
            mma_f16(sb, b0, b1, b2, b3, qb[kk + 1][0], qb[kk + 1][1]);
        }
        /* sa[0], sa[1]: key g, heads 2c, 2c + 1; sa[2], sa[3]: key g + 8 */
        const int kb = s0 + 16 * t;
        float s[4];
#pragma unroll
        for (int i = 0; i < 4; i++) s[i] = sa[i] + sb[i];
        if (kb + g >= s1) s[0] = s[1] = -INFINITY;
        if (kb + g + 8 >= s1) s[2] = s[3] = -INFINITY;
        float t0 = fmaxf(s[0], s[2]), t1 = fmaxf(s[1], s[3]);
#pragma unroll
        for (int off = 4; off < 32; off <<= 1) {
            t0 = fmaxf(t0, __shfl_xor_sync(0xffffffffu, t0, off));
            t1 = fmaxf(t1, __shfl_xor_sync(0xffffffffu, t1, off));
        }
        /* finite: key kb is in the split. Rescale only when the max grows
         * (the factor is exactly 1 otherwise). */
        if (t0 > m0) {
            const float a = expf(m0 - t0);
            l0 *= a;
#pragma unroll
            for (int mt = 0; mt < MT; mt++) o[mt][0] *= a, o[mt][2] *= a;
            m0 = t0;
        }
        if (t1 > m1) {
            const float a = expf(m1 - t1);
            l1 *= a;
#pragma unroll
            for (int mt = 0; mt < MT; mt++) o[mt][1] *= a, o[mt][3] *= a;
            m1 = t1;
        }
        const float p0 = expf(s[0] - m0), p1 = expf(s[1] - m1), p2 = expf(s[2] - m0), p3 = expf(s[3] - m1);
        l0 += p0 + p2;
        l1 += p1 + p3;
        /* P^T as a B fragment: the transposes of the two 8x8 blocks (keys
         * 0-7 and 8-15 by heads) */
        const unsigned pb0 = movm_t(pack_h2(p0, p1)), pb1 = movm_t(pack_h2(p2, p3));
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            unsigned a0, a1, a2, a3;
            ldsm_x4_t(a0, a1, a2, a3, tv + vrow * G::LD + warp * (D / 4) + 16 * mt + vcol);
            mma_f16(o[mt], a0, a1, a2, a3, pb0, pb1);
        }
        __syncthreads(); /* stage t is free for tile t + TC_STAGES */
    }
    cp_async_wait<0>();
#pragma unroll
    for (int off = 4; off < 32; off <<= 1) {
        l0 += __shfl_xor_sync(0xffffffffu, l0, off);
        l1 += __shfl_xor_sync(0xffffffffu, l1, off);
    }
    /* o[mt]: elements warp D/4 + 16 mt + g (0, 1) and + 8 (2, 3), heads
     * 2c (0, 2) and 2c + 1 (1, 3) */
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        const int e = warp * (D / 4) + 16 * mt + g;
        if (2 * c < nh) {
            float *row = part + ((size_t)(hq0 + 2 * c) * nsplit + split) * D;
            row[e] = o[mt][0];
            row[e + 8] = o[mt][2];
        }
        if (2 * c + 1 < nh) {
            float *row = part + ((size_t)(hq0 + 2 * c + 1) * nsplit + split) * D;
            row[e] = o[mt][1];
            row[e + 8] = o[mt][3];
        }
    }
    if (warp == 0 && g == 0) {
        if (2 * c < nh) pml_put(pml, (size_t)(hq0 + 2 * c) * nsplit + split, m0, l0);
        if (2 * c + 1 < nh) pml_put(pml, (size_t)(hq0 + 2 * c + 1) * nsplit + split, m1, l1);
    }
}

/* The keys and values of a row-exact tile's rows with the q/k/v norms and
 * rope of k_attn_tc's NR path (tc_norm_row, the same angles), stored at
 * each row's position before k_attn_tc<ROWS> reads them: one block per
 * (KV head, row). The stored bits are those each row's one-token
 * k_attn_tc would have stored (attn_store_row of the same f32 rows). */
template <int D>
__global__ void __launch_bounds__(TC_WARPS * 32)
    k_kv_store_nr(const float *k, const float *v, const int *step_rows, int kvh, int cap, int ring, __half *store_k,
                  __half *store_v, tc_nr nr, const kv_row *rkv) {
    __shared__ __align__(16) float cs[D / 2], sn[D / 2], nk[D], nv[D];
    const int h = blockIdx.x, i = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (rkv) store_k = (__half *)rkv[i].k, store_v = (__half *)rkv[i].v; /* row i's sequence's caches */
    const int pos0 = step_rows[3 * i];
    for (int j = threadIdx.x; j < D / 2; j += TC_WARPS * 32) {
        const float a = rope_angle((float)pos0, nr.theta_scale, j, nr.ff);
        cs[j] = cosf(a), sn[j] = sinf(a);
    }
    pdl_wait();
    __syncthreads();
    const size_t r = ((size_t)i * kvh + h) * D;
    if (warp == 0) tc_norm_row<D>(k + r, nr.kw, nr.eps, cs, sn, nk, nr.v_from_k ? nv : NULL, lane);
    else if (warp == 1 && !nr.v_from_k) tc_norm_row<D>(v + r, NULL, nr.eps, NULL, NULL, nv, NULL, lane);
    __syncthreads();
    attn_store_row<D, TC_WARPS * 32>(nk, nv, store_k, store_v, pos0, cap, ring, kvh, h);
}

/* The kernel for a head size and entry type: VW values per load (8 for
 * f16 rows of 256 and 512), KU keys per round (fewer for the wide heads:
 * registers). */
template <typename KT>
using ad_fn = void (*)(const float *, const float *, const float *, const KT *, const KT *, const int *, int, int, int,
                       int, int, int, int, float *, float *, KT *, KT *, const kv_row *);
template <int D, typename KT> static ad_fn<KT> ad_kernel(bool staged, bool rows = false) {
    constexpr int VW = sizeof(KT) == 2 && D % 256 == 0 ? 8 : 4, KU = D >= 384 ? 2 : 4;
    if (rows) return staged ? k_attn_dec<D, KT, VW, KU, true, true> : k_attn_dec<D, KT, VW, KU, false, true>;
    return staged ? k_attn_dec<D, KT, VW, KU, true, false> : k_attn_dec<D, KT, VW, KU, false, false>;
}
/* Shared memory above the 48 KB default for the one-token kernels of head
 * size D that take it dynamically: the staged k_attn_dec and k_attn_tc. */
template <int D> static cudaError_t attn_decode_allow() {
    const cudaFuncAttribute at = cudaFuncAttributeMaxDynamicSharedMemorySize;
    cudaError_t e = cudaFuncSetAttribute(ad_kernel<D, float>(true), at, ad_geom<D, float>::SMEM);
    if (e == cudaSuccess) e = cudaFuncSetAttribute(ad_kernel<D, __half>(true), at, ad_geom<D, __half>::SMEM);
    if (e == cudaSuccess) e = cudaFuncSetAttribute(ad_kernel<D, float>(true, true), at, ad_geom<D, float>::SMEM);
    if (e == cudaSuccess) e = cudaFuncSetAttribute(ad_kernel<D, __half>(true, true), at, ad_geom<D, __half>::SMEM);
    if (e == cudaSuccess) e = cudaFuncSetAttribute(k_attn_tc<D, false, false>, at, tc_geom<D>::SMEM);
    if (e == cudaSuccess) e = cudaFuncSetAttribute(k_attn_tc<D, true, false>, at, tc_geom<D>::SMEM_NR);
    if (e == cudaSuccess) e = cudaFuncSetAttribute(k_attn_tc<D, false, true>, at, tc_geom<D>::SMEM);
    if (e == cudaSuccess) e = cudaFuncSetAttribute(k_attn_tc<D, true, true>, at, tc_geom<D>::SMEM_NR);
    return e;
}

cudaError_t attn_allow_all(void) {
    static const int dims[] = {128, 256, 384, 512};
    cudaError_t e = cudaSuccess;
    for (int i = 0; i < 4 && e == cudaSuccess; i++) {
        e = attn_prefill_allow(dims[i]);
#define DEC_ALLOW(DIM) \
    if (e == cudaSuccess) e = attn_decode_allow<DIM>()
        HEAD_DIM_SWITCH(dims[i], DEC_ALLOW);
#undef DEC_ALLOW
    }
    return e;
}

static int attn_splits(const be_kv *kv, int n) {
    int s = kv->nsplit;
    if (n > 1) {
        s = 256 / n;
        if (s > kv->nsplit) s = kv->nsplit;
        if (s < 1) s = 1;
    }
    return s;
}

/* Whether a step of n tokens runs on k_attn_tc: one-token steps with f16
 * caches, unless GEM_CUDA_ATTN_DEC picks another kernel. */
static int attn_tc_step(const cuda_backend *c, const be_kv *kv, int n) { return n == 1 && c->attn_dec == 3 && kv->f16; }

/* The split kernels' group of query heads per block: the largest divisor
 * of n_head / n_kv_head (halving) whose outputs fit the block's registers;
 * 0 for a head shape they do not take. */
static int attn_split_group(int n_head, int n_kv_head, int d) {
    if (n_kv_head < 1 || n_head % n_kv_head || d % 128 || d > 512) return 0;
    int G = n_head / n_kv_head;
    const int ept = (d + AT_THREADS - 1) / AT_THREADS; /* output elements per thread and row */
    while (G * ept > AT_MAX_OWN && G % 2 == 0) G /= 2;
    return G * ept > AT_MAX_OWN ? 0 : G;
}

/* k_attn_dec's query heads per block: the largest common divisor of the
 * group (gall query heads per KV head) and AD_WARPS, a power of two. */
static int attn_dec_heads(int gall) {
    int gb = AD_WARPS;
    while (gall % gb) gb /= 2;
    return gb;
}

/* attention, and with nr (a one-token step on k_attn_tc only, see
 * cu_attention_qkv) the q/k/v norms and rope folded into it. A failure
 * (nothing launched) is the backend's sticky error. */
static void attention_run(cuda_backend *c, const be_buf *q, const be_buf *k, const be_buf *v, be_kv *kv, int n,
                          int n_head, int n_kv_head, int d, int window, be_buf *out, const tc_nr *nr) {
    c->att_quant_last = 0; /* until this call writes its output's codes */
    if (attn_fa_run(c, q, k, v, kv, n, n_head, n_kv_head, d, window, out)) return;
    const int nsplit = attn_splits(kv, n);
    const int G = attn_split_group(n_head, n_kv_head, d);
    if (!G) {
        cu_check(c, cudaErrorInvalidValue, "attention: unsupported head shape");
        return;
    }
    const int ept = (d + AT_THREADS - 1) / AT_THREADS;
    /* queries per block: as many as the accumulators hold (one value load
     * then serves G x QB rows) */
    int QB = AT_MAX_OWN / (G * ept);
    if (QB < 1) QB = 1;
    if (QB > n) QB = n;
    const size_t rows = (size_t)n * n_head * nsplit;
    if (grow(c, &c->part, rows * d * sizeof(float)) || grow(c, &c->pml, rows * 2 * sizeof(float))) return;
    /* the output is the input of the output projection: its 8-bit codes
     * are made here (as in cu_rmsnorm) */
    /* a row of a row-exact tile (att_row > 0) writes its codes at its row */
    const size_t nblk = (size_t)(n + c->att_row) * n_head * d / 32, code0 = (size_t)c->att_row * n_head * d;
    const int quant =
        d % 32 == 0 && codes_room(c, &c->xq, nblk * 32, &c->xd, nblk * sizeof(float), &c->xs, nblk * sizeof(int));
    const int gall = n_head / n_kv_head;
    const int gb = attn_dec_heads(gall);
    const int dec = c->attn_dec && n == 1, staged = c->attn_dec >= 2, tc = attn_tc_step(c, kv, n);
    if (nr && !tc) {
        cu_check(c, cudaErrorInvalidValue, "attention: q/k/v norms folded into a kernel other than k_attn_tc");
        return;
    }
    if (tc) {
        const dim3 tgrid(n_kv_head * ((gall + TC_HEADS - 1) / TC_HEADS), nsplit);
        const tc_nr none = {NULL, NULL, NULL, 0, 0, 0};
#define TC_LAUNCH_NR(DIM, NR)                                                                                          \
    launch(c, k_attn_tc<DIM, NR, false>, tgrid, TC_WARPS * 32, NR ? tc_geom<DIM>::SMEM_NR : tc_geom<DIM>::SMEM, q->d,    \
           k->d, v->d, (const __half *)kv->k, (const __half *)kv->v, c->step, n_head, n_kv_head, kv->capacity,         \
           kv->ring, window, nsplit, (float *)c->part.p, (float *)c->pml.p, (__half *)kv->k, (__half *)kv->v,          \
           nr ? *nr : none, (const kv_row *)NULL)
#define TC_LAUNCH(DIM)             \
    if (nr)                        \
        TC_LAUNCH_NR(DIM, true);   \
    else                           \
        TC_LAUNCH_NR(DIM, false)
        HEAD_DIM_SWITCH(d, TC_LAUNCH);
#undef TC_LAUNCH
#undef TC_LAUNCH_NR
    } else if (dec) {
        const dim3 dgrid(n_kv_head * (gall / gb), nsplit);
#define DEC_LAUNCH_T(DIM, KT)                                                                                     \
    launch(c, ad_kernel<DIM, KT>(staged), dgrid, AD_WARPS * 32, staged ? ad_geom<DIM, KT>::SMEM : 0, q->d, k->d, v->d, \
           (const KT *)kv->k, (const KT *)kv->v, c->step, n_head, n_kv_head, kv->capacity, kv->ring, window, nsplit, gb, \
           (float *)c->part.p, (float *)c->pml.p, (KT *)kv->k, (KT *)kv->v, (const kv_row *)NULL)
        HEAD_DIM_KV_SWITCH(d, kv->f16, DEC_LAUNCH_T);
#undef DEC_LAUNCH_T
    } else {
        attn_split_launch(c, q, k, v, kv, n, n_head, n_kv_head, d, window, nsplit, G, QB);
    }
    LAUNCHED(c, tc ? (nr ? "attention (one-token, k_attn_tc+norm+rope)" : "attention (one-token, k_attn_tc)")
                : dec ? "attention (one-token, k_attn_dec)"
                      : "attention");
    if (n <= 8 && d % 32 == 0)
        launch(c, k_attn_combine_wide, dim3(n_head, n, d / 32), CB_GROUPS * 32, sizeof(float) * (size_t)nsplit,
               (const float *)c->part.p, (const float *)c->pml.p, n_head, d, nsplit, out->d,
               quant ? (int8_t *)c->xq.p + code0 : NULL, quant ? (float *)c->xd.p + code0 / 32 : NULL,
               quant ? (int *)c->xs.p + code0 / 32 : NULL, c->step, n, QB, window, 0);
    else
        attn_combine_launch(c, n, n_head, d, nsplit, QB, window, quant, out);
    LAUNCHED(c, "attention combine");
    if (n > 1) kv_store_tile(c, k, v, kv, n, n_kv_head, d);
    if (quant) quantized_cache_set(c, out->d, n, n_head * d);
    c->att_quant_last = quant;
}

/* A tile of 1 < n <= BE_EXACT_ROWS tokens in one launch per kernel, each
 * row a one-token step bit for bit (rows_exact, backend.h): the rows'
 * keys and values are stored first (k_kv_store_nr with nr, else
 * kv_store_tile: the bits each row's one-token kernel stores), then the
 * one-token kernel runs with a grid dimension of rows (ROWS: row r reads
 * step_rows + 3 r, its inputs, its partials, positions before its own
 * from the cache, its own row as the one-token kernel does, stores
 * nothing), then one combine over every row. A ring needs n - 1 slots
 * beyond the window so that no row's store reaches a slot an earlier row
 * still reads (the model's rings keep BE_EXACT_ROWS: gemma4_run.c). 0 when
 * the one-token kernel is one without a row form (k_attn_split) or the
 * ring is too small: the caller then runs attention_rows.
 * rkv (device, n entries): the rows are one-token steps of n sequences,
 * row r over its own caches rkv[r] (of kv's shape: capacity, ring, type,
 * splits), so no row's store reaches another's keys. */
/* Whether a tile over caches of kv's kind has a row form of its one-token
 * kernel (with the norms folded in: k_attn_tc's) and a head shape it takes. */
static int attention_tile_ok(const cuda_backend *c, const be_kv *kv, int n_head, int n_kv_head, int d, int folded) {
    const int tc = attn_tc_step(c, kv, 1);
    return c->attn_rows && (tc || c->attn_dec) && (!folded || tc) && attn_split_group(n_head, n_kv_head, d) &&
           d % 32 == 0;
}

static int attention_tile(cuda_backend *c, const be_buf *q, const be_buf *k, const be_buf *v, be_kv *kv, int n,
                          int n_head, int n_kv_head, int d, int window, be_buf *out, const tc_nr *nr,
                          const kv_row *rkv) {
    if (!attention_tile_ok(c, kv, n_head, n_kv_head, d, nr != NULL)) return 0;
    const int tc = attn_tc_step(c, kv, 1);
    /* a row's store evicts position pos - capacity, which a row up to n - 1
     * before it still reads unless the ring has n - 1 slots past the window */
    if (!rkv && kv->ring && kv->capacity < window + n - 1) return 0;
    c->att_quant_last = 0;
    const int nsplit = attn_splits(kv, 1);
    const size_t rows = (size_t)n * n_head * nsplit;
    if (grow(c, &c->part, rows * d * sizeof(float)) || grow(c, &c->pml, rows * 2 * sizeof(float))) return 1;
    const size_t nblk = (size_t)n * n_head * d / 32;
    const int quant = codes_room(c, &c->xq, nblk * 32, &c->xd, nblk * sizeof(float), &c->xs, nblk * sizeof(int));
    if (nr) {
#define NR_STORE(DIM)                                                                                                \
    launch(c, k_kv_store_nr<DIM>, dim3(n_kv_head, n), TC_WARPS * 32, 0, k->d, v->d, (const int *)c->step_rows,     \
           n_kv_head, kv->capacity, kv->ring, (__half *)kv->k, (__half *)kv->v, *nr, rkv)
        HEAD_DIM_SWITCH(d, NR_STORE);
#undef NR_STORE
        LAUNCHED(c, "kv store (tile rows, norm+rope)");
    } else {
        kv_store_rows(c, k, v, kv, n, n_kv_head, d, rkv);
    }
    const int gall = n_head / n_kv_head;
    if (tc) {
        const dim3 tgrid(n_kv_head * ((gall + TC_HEADS - 1) / TC_HEADS), nsplit, n);
        const tc_nr none = {NULL, NULL, NULL, 0, 0, 0};
#define TC_ROWS_NR(DIM, NR)                                                                                            \
    launch(c, k_attn_tc<DIM, NR, true>, tgrid, TC_WARPS * 32, NR ? tc_geom<DIM>::SMEM_NR : tc_geom<DIM>::SMEM, q->d, \
           k->d, v->d, (const __half *)kv->k, (const __half *)kv->v, (const int *)c->step_rows, n_head, n_kv_head,    \
           kv->capacity, kv->ring, window, nsplit, (float *)c->part.p, (float *)c->pml.p, (__half *)NULL,              \
           (__half *)NULL, nr ? *nr : none, rkv)
#define TC_ROWS(DIM)             \
    if (nr)                      \
        TC_ROWS_NR(DIM, true);   \
    else                         \
        TC_ROWS_NR(DIM, false)
        HEAD_DIM_SWITCH(d, TC_ROWS);
#undef TC_ROWS
#undef TC_ROWS_NR
    } else {
        const int gb = attn_dec_heads(gall);
        const bool staged = c->attn_dec >= 2;
        const dim3 dgrid(n_kv_head * (gall / gb), nsplit, n);
#define DEC_ROWS_T(DIM, KT)                                                                                          \
    launch(c, ad_kernel<DIM, KT>(staged, true), dgrid, AD_WARPS * 32, staged ? ad_geom<DIM, KT>::SMEM : 0, q->d, k->d, \
           v->d, (const KT *)kv->k, (const KT *)kv->v, (const int *)c->step_rows, n_head, n_kv_head, kv->capacity,   \
           kv->ring, window, nsplit, gb, (float *)c->part.p, (float *)c->pml.p, (KT *)NULL, (KT *)NULL, rkv)
        HEAD_DIM_KV_SWITCH(d, kv->f16, DEC_ROWS_T);
#undef DEC_ROWS_T
    }
    LAUNCHED(c, tc ? (nr ? "attention (tile rows, k_attn_tc+norm+rope)" : "attention (tile rows, k_attn_tc)")
                   : "attention (tile rows, k_attn_dec)");
    launch(c, k_attn_combine_wide, dim3(n_head, n, d / 32), CB_GROUPS * 32, sizeof(float) * (size_t)nsplit,
           (const float *)c->part.p, (const float *)c->pml.p, n_head, d, nsplit, out->d,
           quant ? (int8_t *)c->xq.p : NULL, quant ? (float *)c->xd.p : NULL, quant ? (int *)c->xs.p : NULL,
           (const int *)c->step_rows, 1, 1, window, 1);
    LAUNCHED(c, "attention combine (tile rows)");
    if (quant) quantized_cache_set(c, out->d, n, n_head * d);
    c->att_quant_last = quant;
    return 1;
}

/* A tile of 1 < n <= BE_EXACT_ROWS tokens, row by row on the one-token
 * path (each row's own step: position, and its key stored before the next
 * row attends), so every row is the one-token step's bit for bit
 * (rows_exact, backend.h). fn runs one row on sub-buffers. */
typedef struct {
    be_buf q, k, v, out;
} att_rows;

template <typename F>
static void attention_rows(cuda_backend *c, be_buf *q, be_buf *k, be_buf *v, be_buf *out, int n, int n_head,
                           int n_kv_head, int d, F fn) {
    int *const step = c->step;
    int quant = 1;
    /* the codes of every row land in one scratch: grow it for all of them
     * first (growing inside a row's call would drop the rows before it) */
    const size_t nblk = (size_t)n * n_head * d / 32;
    if (!c->capturing && d % 32 == 0 &&
        (grow(c, &c->xq, nblk * 32) || grow(c, &c->xd, nblk * sizeof(float)) || grow(c, &c->xs, nblk * sizeof(int))))
        return;
    for (int i = 0; i < n; i++) {
        att_rows r = {{q->d + (size_t)i * n_head * d, (size_t)n_head * d},
                      {k->d + (size_t)i * n_kv_head * d, (size_t)n_kv_head * d},
                      {v->d + (size_t)i * n_kv_head * d, (size_t)n_kv_head * d},
                      {out->d + (size_t)i * n_head * d, (size_t)n_head * d}};
        c->step = c->step_rows + 3 * i;
        c->att_row = i;
        fn(r);
        quant &= c->att_quant_last;
    }
    c->step = step;
    c->att_row = 0;
    /* the output projection reads the codes every row left */
    if (quant) quantized_cache_set(c, out->d, n, n_head * d);
}

void cu_attention(backend *b, const be_buf *q, const be_buf *k, const be_buf *v, be_kv *kv, int n, int pos0,
                  int n_head, int n_kv_head, int d, int window, be_buf *out) {
    (void)pos0; /* read from the step buffer */
    cuda_backend *c = cu_of(b);
    if (n > 1 && n <= BE_EXACT_ROWS) {
        if (attention_tile(c, q, k, v, kv, n, n_head, n_kv_head, d, window, out, NULL, NULL)) return;
        attention_rows(c, (be_buf *)q, (be_buf *)k, (be_buf *)v, out, n, n_head, n_kv_head, d, [&](att_rows &r) {
            attention_run(c, &r.q, &r.k, &r.v, kv, 1, n_head, n_kv_head, d, window, &r.out, NULL);
        });
        return;
    }
    attention_run(c, q, k, v, kv, n, n_head, n_kv_head, d, window, out, NULL);
}

/* qkv_norm_rope, then attention: one-token steps on k_attn_tc (f16
 * caches) take the norms and rope inside the attention kernel
 * (GEM_CUDA_ATTN_FUSE=0: two launches as everywhere else); q, k and v then
 * keep the raw projections. */
void cu_attention_qkv(backend *b, be_buf *q, const be_weight *qw, be_buf *k, const be_weight *kw, be_buf *v,
                      int v_from_k, be_kv *kv, int n, int pos0, int n_head, int n_kv_head, int d, float eps,
                      float theta, const be_weight *ff, int window, be_buf *out) {
    cuda_backend *c = cu_of(b);
    if (n > 1 && n <= BE_EXACT_ROWS) {
        if (c->attn_fuse && c->attn_rows && attn_tc_step(c, kv, 1)) {
            const tc_nr nr = {qw ? (const float *)qw->q : NULL, kw ? (const float *)kw->q : NULL,
                              ff ? (const float *)ff->q : NULL, eps, rope_theta_scale(theta, d), v_from_k};
            if (attention_tile(c, q, k, v, kv, n, n_head, n_kv_head, d, window, out, &nr, NULL)) return;
        } else if (c->attn_rows) {
            cu_qkv_norm_rope(b, q, qw, k, kw, v, v_from_k, n, n_head, n_kv_head, d, eps, pos0, theta, ff);
            cu_attention(b, q, k, v, kv, n, pos0, n_head, n_kv_head, d, window, out);
            return;
        }
        attention_rows(c, q, k, v, out, n, n_head, n_kv_head, d, [&](att_rows &r) {
            cu_attention_qkv(b, &r.q, qw, &r.k, kw, &r.v, v_from_k, kv, 1, pos0, n_head, n_kv_head, d, eps, theta, ff,
                             window, &r.out);
        });
        return;
    }
    if (c->attn_fuse && attn_tc_step(c, kv, n)) { /* (attention_run rejects unsupported head shapes itself) */
        const tc_nr nr = {qw ? (const float *)qw->q : NULL, kw ? (const float *)kw->q : NULL,
                          ff ? (const float *)ff->q : NULL, eps, rope_theta_scale(theta, d), v_from_k};
        attention_run(c, q, k, v, kv, n, n_head, n_kv_head, d, window, out, &nr);
        return;
    }
    cu_qkv_norm_rope(b, q, qw, k, kw, v, v_from_k, n, n_head, n_kv_head, d, eps, pos0, theta, ff);
    cu_attention(b, q, k, v, kv, n, pos0, n_head, n_kv_head, d, window, out);
}

/* The slot of set_step_seqs' table holding exactly these n caches in
 * row order, all of one shape, or -1 (not set for this step, another row
 * order, or shapes a tile cannot mix: then row by row). */
static int seqs_slot(const cuda_backend *c, be_kv *const *kvs, int n) {
    if (!c->seqs || c->seq_n != n || !c->seq_nkv) return -1;
    for (int l = 0; l < c->seq_nkv; l++) {
        if (c->seq_of[l * n] != kvs[0]) continue;
        const be_kv *k0 = kvs[0];
        for (int i = 0; i < n; i++) {
            const be_kv *k = kvs[i];
            if (c->seq_of[l * n + i] != k || k->f16 != k0->f16 || k->capacity != k0->capacity || k->ring != k0->ring ||
                k->nsplit != k0->nsplit || k->n_kv_head != k0->n_kv_head || k->head_dim != k0->head_dim)
                return -1;
        }
        return l;
    }
    return -1;
}

/* One-token steps of n sequences (backend.h attention_seqs): as a
 * row-exact tile (attention_tile) whose row r reads and writes its own
 * caches through set_step_seqs' table, so one launch per kernel serves
 * every sequence and a recorded step replays for other sequences
 * (seqs_replay); else each row on the one-token path (attention_rows:
 * the row's own step from set_step_seqs), over its own cache. */
void cu_attention_seqs(backend *b, be_buf *q, const be_weight *qw, be_buf *k, const be_weight *kw, be_buf *v,
                       int v_from_k, be_kv *const *kvs, const int *pos, int n, int n_head, int n_kv_head, int d,
                       float eps, float theta, const be_weight *ff, int window, be_buf *out) {
    cuda_backend *c = cu_of(b);
    if (n < 1 || n > BE_EXACT_ROWS) {
        cu_check(c, cudaErrorInvalidValue, "attention_seqs: rows outside 1..BE_EXACT_ROWS");
        return;
    }
    const int slot = c->attn_rows ? seqs_slot(c, kvs, n) : -1;
    if (slot >= 0) {
        const kv_row *rkv = c->seq_tab + (size_t)slot * n;
        if (c->attn_fuse && attn_tc_step(c, kvs[0], 1)) {
            const tc_nr nr = {qw ? (const float *)qw->q : NULL, kw ? (const float *)kw->q : NULL,
                              ff ? (const float *)ff->q : NULL, eps, rope_theta_scale(theta, d), v_from_k};
            if (attention_tile(c, q, k, v, kvs[0], n, n_head, n_kv_head, d, window, out, &nr, rkv)) return;
        } else if (attention_tile_ok(c, kvs[0], n_head, n_kv_head, d, 0)) {
            /* the rows' norms and rope at their own positions, then the tile */
            qkv_norm_rope_launch(c, q, qw, k, kw, v, v_from_k, n, n_head, n_kv_head, d, eps, theta, ff, c->step_rows);
            if (attention_tile(c, q, k, v, kvs[0], n, n_head, n_kv_head, d, window, out, NULL, rkv)) return;
            cu_check(c, cudaErrorInvalidValue, "attention_seqs: the tile refused rows it was checked for");
            return;
        }
    }
    if (c->capturing && b->seqs_replay) {
        /* a recording would keep these sequences' caches (backend.h seqs_replay) */
        cu_check(c, cudaErrorInvalidValue, "attention_seqs: a recorded batched step needs the caches of set_step_seqs");
        return;
    }
    attention_rows(c, q, k, v, out, n, n_head, n_kv_head, d, [&](att_rows &r) {
        const int i = c->att_row;
        cu_attention_qkv(b, &r.q, qw, &r.k, kw, &r.v, v_from_k, kvs[i], 1, pos[i], n_head, n_kv_head, d, eps, theta,
                         ff, window, &r.out);
    });
}

/* ---- attention_cached: an MTP drafter's queries over its target's cache ----
 * One block per (query head, query row), all queries at position pos (read
 * from the step buffer): keys [pos - window + 1, pos) (or [0, pos)) from
 * the cache only, none stored. Each of the AC_WARPS warps takes every
 * AC_WARPS-th key, AC_ILP keys at a time (independent dot products whose
 * shuffles overlap), and keeps its own online softmax: running maximum,
 * sum and the weighted values of its lanes' dimensions (lane + 32 j); the
 * block then merges the warps' states in a fixed order. f32 throughout.
 *
 * Deep caches split the keys (blockIdx.z: nsplit equal ranges, fixed by
 * the cache's capacity so a recorded step replays at any position): each
 * block leaves its unnormalised state in part/pml and k_attn_cached_merge
 * combines the splits in order. Without it a 31B drafter's full layer at
 * depth 32768 ran 32 blocks over all keys, a draft step then costing more
 * than a target step (bench/results/cuda-spec-31b-2026-12-06.json). */
#define AC_WARPS 8
#define AC_ILP 4
#define AC_SPLIT_KEYS 64 /* keys per split at full capacity */
#define AC_MAX_SPLITS 64

template <typename KT>
__global__ void __launch_bounds__(AC_WARPS * 32) k_attn_cached(const float *__restrict__ q, const KT *__restrict__ ck,
                                                               const KT *__restrict__ cv, const int *step, int n_head,
                                                               int n_kv_head, int d, int cap, int ring, int window,
                                                               int nsplit, float *__restrict__ part,
                                                               float *__restrict__ pml, float *__restrict__ out) {
    pdl_wait();
    const int pos = step[0]; /* the step buffer: a recorded draft step replays at any position */
    extern __shared__ float sm[]; /* AC_WARPS x d weighted values, then AC_WARPS x (max, sum) */
    const int h = blockIdx.x, i = blockIdx.y, g = h / (n_head / n_kv_head);
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, per = d / 32; /* d: a multiple of 32, at most 512 */
    const float *qr = q + ((size_t)i * n_head + h) * d;
    float qv[16], acc[16];
#pragma unroll
    for (int j = 0; j < 16; j++) {
        qv[j] = j < per ? qr[lane + 32 * j] : 0.0f;
        acc[j] = 0;
    }
    const int from = window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
    const int span = (pos - from + nsplit - 1) / nsplit, split = blockIdx.z;
    const int first = from + split * span, last = min(pos - 1, first + span - 1);
    float m = -INFINITY, l = 0;
    for (int p0 = first + w * AC_ILP; p0 <= last; p0 += AC_WARPS * AC_ILP) {
        float sc[AC_ILP];
        size_t row[AC_ILP];
#pragma unroll
        for (int u = 0; u < AC_ILP; u++) {
            const int p = p0 + u;
            row[u] = ((size_t)(ring ? p % cap : p) * n_kv_head + g) * d;
            float s = 0;
            if (p <= last) {
                const KT *kr = ck + row[u];
#pragma unroll
                for (int j = 0; j < 16; j++)
                    if (j < per) s += qv[j] * (float)kr[lane + 32 * j];
            }
            sc[u] = s;
        }
#pragma unroll
        for (int u = 0; u < AC_ILP; u++) sc[u] = warp_sum(sc[u]);
        float mx = m;
#pragma unroll
        for (int u = 0; u < AC_ILP; u++)
            if (p0 + u <= last) mx = fmaxf(mx, sc[u]);
        const float r = expf(m - mx);
        l *= r;
#pragma unroll
        for (int j = 0; j < 16; j++) acc[j] *= r;
#pragma unroll
        for (int u = 0; u < AC_ILP; u++) {
            if (p0 + u > last) break;
            const float e = expf(sc[u] - mx);
            l += e;
            const KT *vr = cv + row[u];
#pragma unroll
            for (int j = 0; j < 16; j++)
                if (j < per) acc[j] += e * (float)vr[lane + 32 * j];
        }
        m = mx;
    }
    float *wv = sm + (size_t)w * d, *ml = sm + (size_t)AC_WARPS * d;
#pragma unroll
    for (int j = 0; j < 16; j++)
        if (j < per) wv[lane + 32 * j] = acc[j];
    if (lane == 0) ml[2 * w] = m, ml[2 * w + 1] = l;
    __syncthreads();
    float M = -INFINITY;
    for (int k = 0; k < AC_WARPS; k++) M = fmaxf(M, ml[2 * k]);
    float L = 0;
    for (int k = 0; k < AC_WARPS; k++)
        if (ml[2 * k + 1] > 0) L += ml[2 * k + 1] * expf(ml[2 * k] - M);
    const size_t hr = (size_t)i * n_head + h;
    float *o = nsplit > 1 ? part + (hr * nsplit + split) * d : out + hr * d;
    for (int e = threadIdx.x; e < d; e += blockDim.x) {
        float v = 0;
        for (int k = 0; k < AC_WARPS; k++)
            if (ml[2 * k + 1] > 0) v += sm[(size_t)k * d + e] * expf(ml[2 * k] - M);
        o[e] = nsplit > 1 ? v : L > 0 ? v / L : 0.0f;
    }
    if (nsplit > 1 && threadIdx.x == 0) pml[2 * (hr * nsplit + split)] = M, pml[2 * (hr * nsplit + split) + 1] = L;
}

/* The splits of k_attn_cached, in order: one block per (head, row). */
__global__ void __launch_bounds__(128) k_attn_cached_merge(const float *__restrict__ part,
                                                           const float *__restrict__ pml, int n_head, int d,
                                                           int nsplit, float *__restrict__ out) {
    pdl_wait();
    const size_t hr = (size_t)blockIdx.y * n_head + blockIdx.x;
    const float *ml = pml + 2 * hr * nsplit;
    float M = -INFINITY;
    for (int k = 0; k < nsplit; k++)
        if (ml[2 * k + 1] > 0) M = fmaxf(M, ml[2 * k]);
    float L = 0;
    for (int k = 0; k < nsplit; k++)
        if (ml[2 * k + 1] > 0) L += ml[2 * k + 1] * expf(ml[2 * k] - M);
    for (int e = threadIdx.x; e < d; e += blockDim.x) {
        float v = 0;
        for (int k = 0; k < nsplit; k++)
            if (ml[2 * k + 1] > 0) v += part[(hr * nsplit + k) * d + e] * expf(ml[2 * k] - M);
        out[hr * d + e] = L > 0 ? v / L : 0.0f;
    }
}

void cu_attention_cached(backend *b, const be_buf *q, const be_kv *kv, int n, int pos, int n_head, int n_kv_head,
                         int d, int window, be_buf *out) {
    cuda_backend *c = cu_of(b);
    (void)pos; /* read from the step buffer */
    if (d > 512 || d % 32 || n_kv_head < 1 || n_head % n_kv_head) {
        cu_check(c, cudaErrorInvalidValue, "attention_cached: unsupported head shape");
        return;
    }
    /* splits from the most keys a query can see here (never the position) */
    const int span = window > 0 && window - 1 < kv->capacity ? window - 1 : kv->capacity;
    int nsplit = (span + AC_SPLIT_KEYS - 1) / AC_SPLIT_KEYS;
    nsplit = nsplit < 1 ? 1 : nsplit > AC_MAX_SPLITS ? AC_MAX_SPLITS : nsplit;
    const size_t rows = (size_t)n_head * n * nsplit;
    if (nsplit > 1 && (grow(c, &c->part, rows * d * sizeof(float)) || grow(c, &c->pml, rows * 2 * sizeof(float))))
        return;
    float *part = nsplit > 1 ? (float *)c->part.p : NULL, *pml = nsplit > 1 ? (float *)c->pml.p : NULL;
    const dim3 grid((unsigned)n_head, (unsigned)n, (unsigned)nsplit);
    const size_t smem = sizeof(float) * (size_t)(AC_WARPS * d + 2 * AC_WARPS);
    if (kv->f16)
        launch(c, k_attn_cached<__half>, grid, AC_WARPS * 32, smem, q->d, (const __half *)kv->k, (const __half *)kv->v,
               (const int *)c->step, n_head, n_kv_head, d, kv->capacity, kv->ring, window, nsplit, part, pml, out->d);
    else
        launch(c, k_attn_cached<float>, grid, AC_WARPS * 32, smem, q->d, (const float *)kv->k, (const float *)kv->v,
               (const int *)c->step, n_head, n_kv_head, d, kv->capacity, kv->ring, window, nsplit, part, pml, out->d);
    LAUNCHED(c, "attention (cached keys only)");
    if (nsplit > 1) {
        launch(c, k_attn_cached_merge, dim3((unsigned)n_head, (unsigned)n), 128, 0, (const float *)part,
               (const float *)pml, n_head, d, nsplit, out->d);
        LAUNCHED(c, "attention (cached keys only): merge");
    }
}
