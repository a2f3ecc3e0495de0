/* Internals of the CUDA backend (see cuda_backend.h and backend/backend.h),
 * included only by the .cu files of src/backend/cuda: the backend's state,
 * launch and error helpers, warp reductions and the device helpers more
 * than one op family uses (the families' entry points: cuda_ops.h).
 *
 * Invariants:
 * - One stream per backend; every op is enqueued on it in call order, so the
 *   seam's ordering is the stream's. Host-visible results come only from
 *   download/kv_save, which synchronise.
 * - Weights are resident after `weight`: f32/f16/bf16 as stored; q8_0 and
 *   q4_0 split into a contiguous code array (32 or 16 bytes per block, so a
 *   lane loads one block with 16-byte loads) and an f16 scale array; other
 *   GGUF types are expanded to f16 at load (correct, not yet fast).
 * - Position-dependent ops (embed, rope, attention) read the token ids and
 *   the first position from the device step buffer written by set_step, so a
 *   recorded decode step replays at any position. Their launch shapes depend
 *   only on n and the cache capacity, never on the position.
 * - Scratch buffers a recorded graph may point at (quantized activations,
 *   attention partials, argmax partials, the step buffer) only grow outside
 *   a capture; each growth bumps `generation`, which invalidates graphs.
 * - Errors are sticky: the first failing CUDA call is remembered and
 *   reported by status(); later ops still run but their results are void.
 * - Every kernel begins with pdl_wait() and is launched through launch()
 *   (programmatic dependent launch): a kernel touches memory only after the
 *   one before it on the stream has completed, as with plain launches
 *   (except the early reads described at pdl_wait).
 * - The quantized-activation scratch (xq/xd/xs) holds the 8-bit codes of
 *   one buffer, named by xq_of and valid while `epoch` (bumped by every
 *   launch) equals its epoch: set by a product that quantized its input
 *   and by the ops that produce a product's input (rmsnorm, the residual
 *   add + norm, the attention combine), which write the codes as they go.
 * - KV caches hold f32 or f16 entries, chosen per cache (kv_new; be_kv.f16),
 *   so one model may mix them (--kv-type f16-full: f32 rings, f16 full
 *   caches): every attention entry point dispatches on the cache it is
 *   given, never on a backend-wide setting, and the scratch the kernels
 *   share (partials, codes) has one layout for both types. The checkpoint
 *   blob is the cache's own bytes (f32: the CPU's layout).
 *
 * Numerics: q8_0/q4_0 products of decode steps (and of prefill tiles with
 * GEM_CUDA_MMA=0, K not a multiple of 128 or a scale that is inf/NaN) quantize the activations to 8 bits per 32-value block
 * exactly as the CPU fast path does (scale max|x|/127, round to nearest
 * even), so integer block sums are identical and only the f32 summation
 * order differs. Prefill tiles (more than 8 tokens) run on the tensor cores
 * with f16 operands and f32 sums: products (k_mm_w/k_mm_h: f16 activations and
 * f16-expanded weights, relative 2^-11 each) and attention (k_attn_fa: f16
 * q, k, v and probabilities). Everything else is f32. */
#ifndef GEM_BACKEND_CUDA_COMMON_H
#define GEM_BACKEND_CUDA_COMMON_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <utility>

#include "backend/cuda/cuda_backend.h"

extern "C" {
#include "quant/quant.h"
}

enum { DW_F32, DW_F16, DW_BF16, DW_Q8_0, DW_Q4_0, DW_Q4_K, DW_Q5_K, DW_Q6_K };

struct be_buf {
    float *d;
    size_t n;
};

struct be_weight {
    int fmt;
    int64_t ne0, ne1;
    void *q;   /* codes or plain values */
    __half *d; /* per-block scales (q8_0, q4_0) */
    float hexp; /* q8_0/q4_0/k-quants: 2^we for k_mm_h/k_mm_w (see there); 0: no f16 path (a scale is inf or NaN) */
};

struct be_kv {
    void *k, *v; /* [capacity][n_kv_head][head_dim], the CPU layout; f32, or f16 when f16 */
    int f16;
    int n_kv_head, head_dim, capacity, ring;
    int nsplit; /* attention splits of a one-token step */
};

/* A row's caches in a batched step of sequences (set_step_seqs): the
 * device table the row-exact attention kernels read a row's cache from. */
typedef struct {
    void *k, *v;
} kv_row;

struct be_graph {
    cudaGraphExec_t exec;
    unsigned generation;
};

/* A device scratch buffer that only grows (see the invariants above). */
typedef struct {
    void *p;
    size_t cap;
} scratch;

/* Which buffer's converted activations a scratch holds (8-bit codes, or
 * k_mm_h's f16 values): buffer src as n rows of K, valid while the
 * backend's epoch (bumped by every launch) is still `epoch`. */
typedef struct {
    const float *src;
    int n, K;
    unsigned epoch;
} act_cache;

#define CU_PROF_ROWS 64 /* op labels timed; later ones are dropped (a step has about 20) */

typedef struct {
    backend base;
    cudaStream_t st;
    cudaEvent_t step_copied;
    int failed;
    char why[512];
    int gelu_fp16;
    int capturing;
    unsigned generation;
    int *step;      /* device: pos0, n, ids[n] */
    int *step_host; /* pinned staging of the same */
    int step_cap;
    /* device, after the step: for a tile of n <= BE_EXACT_ROWS tokens, row
     * i's own one-token step {pos0 + i, 1, ids[i]}; attention runs such a
     * tile row by row on the one-token kernels (rows_exact, backend.h) */
    int *step_rows;
    /* a batched step of sequences (set_step_seqs, until the next
     * set_step): its n rows' caches for each of nkv cache slots, entry
     * l * n + i = row i's cache for slot l, on the device (seq_tab, copied
     * with the step buffer, so a recorded step replays for other
     * sequences) and as the host's be_kv (seq_of, to find a call's slot) */
    int seqs, seq_n, seq_nkv, seq_cap;
    kv_row *seq_tab, *seq_tab_host;
    const be_kv **seq_of;
    int att_row;        /* the row being attended: its output's 8-bit codes go there */
    int att_quant_last; /* the last attention left its output's codes */
    scratch xq, xd, xs;     /* quantized activations: codes, scales, code sums */
    scratch part, pml;      /* attention partials */
    scratch amax_v, amax_i; /* argmax partials */
    scratch up;             /* matmul_geglu's unfused path */
    scratch topk_part;      /* top-k: each chunk's first k keys */
    void *stage;            /* weight upload staging */
    unsigned *dmax;         /* device: the largest |scale| bits of the weight being uploaded */
    scratch xh, xhinv;      /* f16 activations of k_mm_h and their per-token 2^-ea */
    scratch vr_part, vr_done; /* k_vr_q's split-row part sums and per-tile counts (zero between launches) */
    scratch xkq, xkd, xks;    /* k-quant activations: codes, scales per 256, sums per 16 (cuda_matmul_k.cu) */
    act_cache xk_of;          /* the buffer whose codes xkq/xkd/xks hold */
    scratch kqh;              /* a k-quant matrix expanded to f16 for a prefill tile (kq_f16) */
    scratch gdn;              /* the chunked delta rule's per-chunk G, P, U, W (cuda_hybrid.cu) */
    act_cache xh_of; /* the buffer whose f16 activations xh holds */
    size_t stage_cap;
    /* op timing (op_timing, or GEM_CUDA_PROFILE=1 for the whole run,
     * printed at exit): every op waits for the GPU; the GPU time between
     * an event recorded before its first launch and one after its last is
     * added to its op's row (no graphs then, so the launch gaps of graph
     * replay are not in these numbers) */
    int profile, profile_env;
    int prof_open; /* prof_ev[0] recorded, op not yet LAUNCHED */
    cudaEvent_t prof_ev[2];
    unsigned epoch;  /* bumped by every launch (see act_cache) */
    act_cache xq_of; /* the buffer whose 8-bit codes xq/xd/xs hold */
    /* prefill tiles of q8_0/q4_0 on the tensor cores (k_mm_q) unless
     * GEM_CUDA_MMA=0 */
    int mma;
    int mmh_wgmma; /* f16 prefill products on k_mm_w (GEM_CUDA_MMH=2: k_mm_h) */
    int mv_split;  /* one-token products of long rows split over warps (GEM_CUDA_MV_SPLIT=0: off) */
    /* k-quant prefill tiles: 1 each matrix expanded to f16 first (kq_f16
     * + k_mm_w<MMW_F16>), 0 k_mm_w<MMW_K4..K6> expanding the blocks itself
     * (GEM_CUDA_KQ_F16=0). The default stays 1 until the corrected
     * q4_k/q5_k scales of 0 have passed cuda_ops on a GPU (docs/cuda.md) */
    int kq_f16;
    /* norms feeding products leave k-quant codes too (GEM_CUDA_KQ_NORM=1:
     * kq_act_block, the k_quantize_act_k launch of a k-quant product
     * saved); only once k-quant weights were loaded (kq_acts) */
    int kq_norm, kq_acts;
    /* prompt tiles of the delta rule in chunks (cuda_hybrid.cu), with
     * GEM_CUDA_GDN_CHUNKED=1; 0, the default until the chunked form has
     * passed cuda_ops on a GPU: the recurrence, token by token */
    int gdn_chunked;
    int norm_wide;    /* one-token norms on one block of up to 1024 threads (GEM_CUDA_NORM_WIDE=0: 256) */
    int attn_fuse;    /* one-token k_attn_tc with the q/k/v norms and rope inside (GEM_CUDA_ATTN_FUSE=0: off) */
    int attn_rows;    /* a row-exact tile's attention in one launch per kernel (attention_tile;
                       * GEM_CUDA_ATTN_ROWS=0: row by row) */
    int n_sm;         /* multiprocessors of the device */
    /* k_mv_q's staggered first wave (mv_stagger_start): ns per level
     * (GEM_CUDA_MV_STAGGER, 0: off) and levels (GEM_CUDA_MV_LEVELS); its
     * blocks resident at once (occupancy, on first use) */
    int mv_stagger, mv_levels, mv_wave[2]; /* mv_wave: blocks of one wave, [q4_0] (mv_run) */
    /* one-token attention: 3 (default) k_attn_tc on the tensor cores for
     * f16 caches, the staged k_attn_dec for f32 ones; 2 the staged
     * k_attn_dec for both (GEM_CUDA_ATTN_DEC=2); 1 k_attn_dec reading
     * straight into registers (GEM_CUDA_ATTN_DEC=1); 0 k_attn_split
     * (GEM_CUDA_ATTN_DEC=0). bench/results/cuda-attn-dec-2026-12-03d.json */
    int attn_dec;
    int pdl; /* programmatic dependent launch (GEM_CUDA_PDL=0: off) */
    /* trace builds (make CUDA=1 build/gem-trace): the device ring of block
     * records and the file it goes to when the backend closes
     * (GEM_CUDA_TRACE=FILE; NULL: no trace) */
    struct cu_trace_rec *trace_ring;
    char *trace_path;
    size_t mem_free0; /* free device memory when the backend was created */
    struct {
        char name[64]; /* room for mv_run's longest label */
        double s;
        long calls;
    } prof[CU_PROF_ROWS];
} cuda_backend;

static inline cuda_backend *cu_of(backend *b) { return (cuda_backend *)b; }

static inline int cu_check(cuda_backend *c, cudaError_t e, const char *what) {
    if (e == cudaSuccess) return 0;
    if (!c->failed) {
        c->failed = 1;
        snprintf(c->why, sizeof c->why, "CUDA error in %s: %s", what, cudaGetErrorString(e));
    }
    return -1;
}
#define CK(c, call) cu_check((c), (call), #call)

static inline void launched(cuda_backend *c, const char *name) {
    c->epoch++;
    cu_check(c, cudaGetLastError(), name);
    if (!c->profile || !c->prof_open) return;
    c->prof_open = 0;
    float ms = 0;
    cudaEventRecord(c->prof_ev[1], c->st);
    cudaEventSynchronize(c->prof_ev[1]);
    cudaEventElapsedTime(&ms, c->prof_ev[0], c->prof_ev[1]);
    for (int i = 0; i < CU_PROF_ROWS; i++) {
        if (!c->prof[i].name[0]) snprintf(c->prof[i].name, sizeof c->prof[i].name, "%s", name);
        if (!strcmp(c->prof[i].name, name)) {
            c->prof[i].s += ms * 1e-3;
            c->prof[i].calls++;
            break;
        }
    }
}
#define LAUNCHED(c, name) launched((c), (name))

static inline int grow(cuda_backend *c, scratch *s, size_t bytes) {
    if (bytes <= s->cap) return 0;
    if (c->capturing) {
        if (!c->failed) {
            c->failed = 1;
            snprintf(c->why, sizeof c->why, "internal: scratch buffer grew during graph capture");
        }
        return -1;
    }
    size_t cap = s->cap ? s->cap : 4096;
    while (cap < bytes) cap *= 2;
    if (s->p) CK(c, cudaStreamSynchronize(c->st)), CK(c, cudaFree(s->p));
    s->p = NULL;
    s->cap = 0;
    if (CK(c, cudaMalloc(&s->p, cap))) return -1;
    s->cap = cap;
    c->generation++;
    return 0;
}

/* Room for a launch's activation codes in three scratches (codes, scales,
 * sums: qb, db and sb bytes), 1 or 0. They grow outside a graph capture;
 * inside one only what the step before it sized is there (growing would
 * fail the capture), else 0 and the product quantizes its input itself. */
static inline int codes_room(cuda_backend *c, scratch *q, size_t qb, scratch *d, size_t db, scratch *s, size_t sb) {
    if (c->capturing && (qb > q->cap || db > d->cap || sb > s->cap)) return 0;
    return !grow(c, q, qb) && !grow(c, d, db) && !grow(c, s, sb);
}

/* ------------------------------------------------------------------ */
/* block trace (trace builds only)                                     */

/* build/gem-trace (the CUDA objects compiled with GEM_CUDA_TRACE) records,
 * for every block of an annotated kernel, %globaltimer when the block
 * starts, when its grid dependency resolves (pdl_wait) and when it ends,
 * with its SM, block index, grid size and the grid's launch id (%gridid),
 * into a ring of CU_TRACE_CAP records on the device; GEM_CUDA_TRACE=FILE
 * writes it when the backend closes, and bench/cuda_trace.py lays out a
 * decode step from it (where each kernel starts, waits and ends, how the
 * blocks of a product come and go). It shows what a per-kernel profiler
 * cannot: kernels overlapping inside a replayed graph. Thread 0 of a block
 * records (its exit stands for the block's); the records slow decode a
 * little, so time a trace build only against itself. In other builds
 * CU_TRACE and CU_TRACE_RELEASED are empty. Kinds: one per annotated
 * kernel, named in the file's header. */
enum {
    CT_EMBED = 1, CT_RMSNORM4, CT_RMSNORM, CT_GEGLU, CT_SOFTCAP, CT_RMSNORM_ROPE, CT_QKV_NORM_ROPE, CT_ARGMAX_PART,
    CT_ARGMAX_FINAL, CT_TOPK_PART, CT_TOPK_FINAL, CT_ATTN_SPLIT, CT_ATTN_COMBINE, CT_ATTN_FA, CT_ATTN_COMBINE_WIDE,
    CT_ATTN_DEC, CT_ATTN_TC, CT_KV_STORE, CT_QUANTIZE_ACT, CT_MV_Q, CT_MV_F, CT_MM_Q, CT_MM_TILED, CT_ACT_F16,
    CT_GEGLU_F16, CT_MM_H, CT_MM_W, CT_VR_Q, CT_MV_K, CT_KQ_F16, CT_COUNT
};
#define CT_NAMES                                                                                                      \
    "-,embed,rmsnorm4,rmsnorm,geglu,softcap,rmsnorm_rope,qkv_norm_rope,argmax_part,argmax_final,topk_part,topk_final," \
    "attn_split,attn_combine,attn_fa,attn_combine_wide,attn_dec,attn_tc,kv_store,quantize_act,mv_q,mv_f,mm_q,"        \
    "mm_tiled,act_f16,geglu_f16,mm_h,mm_w,vr_q,mv_k,kq_f16"
/* record 0's first word counts the records ever written */
struct cu_trace_rec {
    unsigned long long t0, t1, t2, grid;
    unsigned kind, block, blocks, sm;
};
#define CU_TRACE_CAP (1u << 21)

/* The GPU's nanosecond clock (%globaltimer), comparable across SMs: the
 * trace's times and k_mv_q's staggered start. */
__device__ __forceinline__ unsigned long long gpu_time_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

#ifdef GEM_CUDA_TRACE
/* Each translation unit has its own copy of the ring's address: launch()
 * copies the backend's into it when it changes (cu_trace_bind). One traced
 * backend at a time: two alive at once would share the copy. */
static __constant__ cu_trace_rec *cu_trace_ring;
/* One record per block, by thread 0 as the kernel returns. */
struct cu_trace_span {
    unsigned long long t0, t1;
    unsigned kind;
    __device__ explicit cu_trace_span(unsigned k) : t0(gpu_time_ns()), t1(0), kind(k) {}
    __device__ ~cu_trace_span() {
        if (threadIdx.x || threadIdx.y || threadIdx.z) return;
        cu_trace_rec *ring = cu_trace_ring;
        if (!ring) return;
        cu_trace_rec r;
        r.t0 = t0, r.t1 = t1, r.t2 = gpu_time_ns();
        asm volatile("mov.u64 %0, %%gridid;" : "=l"(r.grid));
        asm volatile("mov.u32 %0, %%smid;" : "=r"(r.sm));
        r.kind = kind;
        r.block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
        r.blocks = gridDim.x * gridDim.y * gridDim.z;
        ring[1 + atomicAdd((unsigned *)ring, 1u) % (CU_TRACE_CAP - 1)] = r;
    }
};
#define CU_TRACE(kind) cu_trace_span cu_trace_span_(kind)
#define CU_TRACE_RELEASED() (cu_trace_span_.t1 = gpu_time_ns())
static inline void cu_trace_bind(cuda_backend *c) {
    static cu_trace_rec *bound; /* this translation unit's copy (trace builds only) */
    if (c->trace_ring == bound) return;
    cudaMemcpyToSymbolAsync(cu_trace_ring, &c->trace_ring, sizeof c->trace_ring, 0, cudaMemcpyHostToDevice, c->st);
    bound = c->trace_ring;
}
#else
#define CU_TRACE(kind) \
    do {               \
    } while (0)
#define CU_TRACE_RELEASED() \
    do {                    \
    } while (0)
static inline void cu_trace_bind(cuda_backend *c) { (void)c; }
#endif

/* Launches on the backend's stream (see pdl_wait). */
template <typename... P, typename... A>
static inline void launch(cuda_backend *c, void (*kern)(P...), dim3 grid, dim3 block, size_t smem, A &&...args) {
    cu_trace_bind(c);
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = c->st;
    cudaLaunchAttribute at[1] = {};
    unsigned n = 0;
    if (c->pdl) {
        at[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[n++].val.programmaticStreamSerializationAllowed = 1;
    }
    cfg.attrs = at;
    cfg.numAttrs = n;
    if (c->profile && !c->prof_open) {
        c->prof_open = 1;
        cudaEventRecord(c->prof_ev[0], c->st);
    }
    const cudaError_t e = cudaLaunchKernelEx(&cfg, kern, std::forward<A>(args)...);
    if (e != cudaSuccess) cu_check(c, e, "kernel launch");
}

static inline unsigned blocks_for(size_t n, unsigned threads) { return (unsigned)((n + threads - 1) / threads); }

/* ------------------------------------------------------------------ */
/* launches                                                            */

/* Programmatic dependent launch: every kernel of the stream is launched
 * with programmatic stream serialization, so the next kernel's launch and
 * block scheduling overlap the end of the one before. Safety: every kernel
 * starts with pdl_wait() (griddepcontrol.wait returns once the previous
 * grid has completed and its memory is visible; a no-op for plain
 * launches) before it reads or writes anything, so all ordering is the
 * stream's; pdl_wait() then lets the next grid be scheduled. Exceptions,
 * each reading before the wait only what no kernel of the step writes or
 * what a kernel two back or earlier wrote (it has completed once the
 * previous one lets this one start):
 *   k_rmsnorm4: the layer scale, with EARLY also the norm weights;
 *   k_qkv_norm_rope_e: q/k norm weights, rope frequencies and the step
 *     buffer's position (set_step's copy precedes the step's first kernel);
 *   k_attn_combine_wide: the step buffer's position;
 *   k_attn_dec, k_attn_tc: the position and cached keys and values of
 *     earlier positions.
 * GEM_CUDA_PDL=0 turns it off. */
__device__ __forceinline__ void pdl_wait() {
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

/* Asynchronous copies to shared memory (cp.async: 16 bytes bypassing L1
 * or through it, 8 bytes through it), committed and waited for in groups. */
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
/* 16 bytes through L1: data many CTAs of an SM read (a tile's activations) */
__device__ __forceinline__ void cp_async16_ca(void *smem, const void *gmem) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
__device__ __forceinline__ void cp_async8(void *smem, const void *gmem) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(s), "l"(gmem));
}
/* 4 bytes through L1 (a k-quant block's scale pair, cuda_matmul.cu) */
__device__ __forceinline__ void cp_async4(void *smem, const void *gmem) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(s), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

/* ------------------------------------------------------------------ */
/* reductions                                                          */

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ int warp_isum(int v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Sum over a block of blockDim.x threads (a multiple of 32, at most 1024). */
__device__ __forceinline__ float block_sum(float v, float *sh) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    float t = 0;
    for (int i = 0; i < nw; i++) t += sh[i];
    return t;
}

/* ------------------------------------------------------------------ */
/* helpers shared by the parts                                         */

/* A weight's f16 range scale (be_weight.hexp) from the largest |value|
 * its blocks can hold: the power of two 2^we (we in [-14, 15]) that keeps
 * |value| 2^we below 2^15, so k_mm_h/k_mm_w's f16 operands cannot
 * overflow. */
static inline float weight_hexp(float big) {
    int ex = 0;
    if (big > 0) frexpf(big, &ex);
    int we = big > 0 ? 15 - ex : 0;
    we = we < -14 ? -14 : we > 15 ? 15 : we;
    return ldexpf(1.0f, we);
}

/* After a launch that left buffer p's (n rows of K) converted activations
 * in a scratch: the next product of p reuses them (see mv_run). */
static inline void act_cache_set(const cuda_backend *c, act_cache *a, const float *p, int n, int K) {
    a->src = p;
    a->n = n;
    a->K = K;
    a->epoch = c->epoch;
}
static inline int act_cache_holds(const cuda_backend *c, const act_cache *a, const float *p, int n, int K) {
    return a->src == p && a->n == n && a->K == K && a->epoch == c->epoch;
}
static inline void quantized_cache_set(cuda_backend *c, const float *p, int n, int K) {
    act_cache_set(c, &c->xq_of, p, n, K);
}

/* The integer sum of one 32-value block (the one-token products):
 * weight codes (q4_0: 16 bytes of nibbles in w0, stored +8, so the
 * activations' code sum sx times 8 comes off; q8_0: 32 bytes in w0, w1)
 * against the activation codes x0, x1. */
template <int Q4>
__device__ __forceinline__ int mv_block_dot(uint4 w0, uint4 w1, int4 x0, int4 x1, int sx) {
    int sum = 0;
    if (Q4) {
        const unsigned m = 0x0F0F0F0Fu;
        sum = __dp4a((int)(w0.x & m), x0.x, sum);
        sum = __dp4a((int)(w0.y & m), x0.y, sum);
        sum = __dp4a((int)(w0.z & m), x0.z, sum);
        sum = __dp4a((int)(w0.w & m), x0.w, sum);
        sum = __dp4a((int)((w0.x >> 4) & m), x1.x, sum);
        sum = __dp4a((int)((w0.y >> 4) & m), x1.y, sum);
        sum = __dp4a((int)((w0.z >> 4) & m), x1.z, sum);
        sum = __dp4a((int)((w0.w >> 4) & m), x1.w, sum);
        sum -= 8 * sx; /* codes are stored +8 */
    } else {
        sum = __dp4a((int)w0.x, x0.x, sum);
        sum = __dp4a((int)w0.y, x0.y, sum);
        sum = __dp4a((int)w0.z, x0.z, sum);
        sum = __dp4a((int)w0.w, x0.w, sum);
        sum = __dp4a((int)w1.x, x1.x, sum);
        sum = __dp4a((int)w1.y, x1.y, sum);
        sum = __dp4a((int)w1.z, x1.z, sum);
        sum = __dp4a((int)w1.w, x1.w, sum);
    }
    return sum;
}

/* The 8-bit codes of one 32-value block held as float4s by 8 consecutive
 * lanes (all eight take part in the shuffles): k_quantize_act's
 * arithmetic (scale max|x|/127, codes round(x 127/max|x|) to nearest even),
 * so a product reading them sees identical codes. packed: this lane's four
 * codes as the bytes of one int (memory order); d and sum are the block's,
 * the same in the group's lanes. quantize_block8 (the norms) writes them
 * out. */
struct codes8 {
    int packed;
    float d;
    int sum;
};
__device__ __forceinline__ codes8 block8_codes(float4 v) {
    float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
#pragma unroll
    for (int o = 4; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float id = amax > 0 ? 127.0f / amax : 0.0f;
    const int c0 = __float2int_rn(v.x * id), c1 = __float2int_rn(v.y * id), c2 = __float2int_rn(v.z * id),
              c3 = __float2int_rn(v.w * id);
    int sum = c0 + c1 + c2 + c3;
#pragma unroll
    for (int o = 4; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    codes8 r;
    r.packed = (c0 & 0xff) | (c1 & 0xff) << 8 | (c2 & 0xff) << 16 | (int)((unsigned)c3 << 24);
    r.d = amax / 127.0f;
    r.sum = sum;
    return r;
}

/* The backend's one GELU (k_geglu, the fused matmul epilogue and the
 * prefill geglu use it, so fused and unfused gating round identically). */
__device__ __forceinline__ float gelu_tanh_f(float x) {
    const float k = 0.7978845608028654f;
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

/* The rope's per-pair angle factor, base^(-2 / n_rot), from the host's
 * powf: one place, so every norm+rope launch (and the attention kernel
 * that folds them in) multiplies by the same bits. */
static inline float rope_theta_scale(float base, int n_rot) { return powf(base, -2.0f / (float)n_rot); }

/* The rope's angle of pair j at position pos: pos times theta_scale j
 * times, one rounding per multiplication in that order (the CPU's
 * arithmetic), divided by the frequency factor when there is one. Every
 * norm+rope kernel takes its angles from here, so they agree bit for bit. */
__device__ __forceinline__ float rope_angle(float pos, float theta_scale, int j, const float *ff) {
    float theta = pos;
    for (int m = 0; m < j; m++) theta *= theta_scale;
    return ff ? theta / ff[j] : theta;
}
/* One rotated pair, rounded as the CPU rounds it (each product, then the
 * sum: no fused multiply-add, which the compiler may or may not form
 * depending on the code around it). */
__device__ __forceinline__ void rope_rotate(float x0, float x1, float cs, float sn, float &y0, float &y1) {
    y0 = __fsub_rn(__fmul_rn(x0, cs), __fmul_rn(x1, sn));
    y1 = __fadd_rn(__fmul_rn(x0, sn), __fmul_rn(x1, cs));
}

/* Block blk of 32 values, one per lane of a full warp: its 8-bit codes,
 * scale and code sum (the CPU fast path's quantize_act arithmetic). Also
 * used by the kernels that produce a product's input as they write it. */
__device__ __forceinline__ void quantize_block32(float v, size_t blk, int lane, int8_t *q, float *d, int *s) {
    const float amax = warp_max(fabsf(v));
    const float id = amax > 0 ? 127.0f / amax : 0.0f;
    const int code = __float2int_rn(v * id);
    q[blk * 32 + lane] = (int8_t)code;
    const int sum = warp_isum(code);
    if (lane == 0) {
        d[blk] = amax / 127.0f;
        s[blk] = sum;
    }
}

/* m16n8k16 f16 x f16 + f32 (PTX ISA fragment layout: g = lane / 4, c = lane % 4;
 * A: a0 = row g, k 2c, 2c+1; a1 = row g+8; a2, a3 = the same at k + 8;
 * B: b0 = column g, k 2c, 2c+1; b1 = k + 8; C as m16n8k32). */
__device__ __forceinline__ void mma_f16(float (&d)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0,
                                        unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

#endif
