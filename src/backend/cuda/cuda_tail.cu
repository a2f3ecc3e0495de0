/* The rest of a layer after its attention, for one token, as one
 * persistent kernel (the seam's layer_rest; GEM_CUDA_TAIL=1, 2 or 3 by
 * prefetch level, off by default: a measurement switch until it wins on
 * the H200, which it does not yet: 31B Q4_0 decode 113.5 vs 164.0 tok/s
 * at depth 0 with 2; its gate/up phase streams at ~2.7 TB/s where the
 * gate/up launch reaches ~3.8, bench/results/cuda-tail-ab-2026-12-05.json).
 *
 * Why: a one-token layer runs ten kernels, and its fixed cost (~37 us per
 * 31B layer above the bytes of its weights) sits at their boundaries: the
 * one-block norms, the activation codes and each product's ramp and tail
 * (bench/results/cuda-boundary-bounds-2026-12-04.json). Here the o
 * product, the residual add with both norms, the gate/up pair, the codes of
 * its output, the down product and the second residual add with the next
 * layer's norm are phases of one kernel on every multiprocessor, separated
 * by four grid barriers; the norms are computed by every block for itself
 * (each needs the whole normed row for its products anyway), so they cost
 * no barrier. With GEM_CUDA_TAIL=2 each warp issues its first round of the
 * next product's weights before it waits at a barrier (weights do not
 * depend on the phase before), with 3 also the o product's before the grid
 * dependency wait. GEM_CUDA_TAIL_QKV=1 adds the next layer's q/k/v products
 * as a last phase (every block already has the codes of their input), so
 * the layer loop's next kernel is the attention. GEM_CUDA_TAIL_COMB=1 (the
 * seam's attention_rest, f16 caches) adds a first phase and a fifth
 * barrier: the one-token attention, launched without its combine, leaves
 * its split partials, and the kernel combines them into att and its codes.
 * GEM_CUDA_TAIL_PIPE=1 runs the product phases as pipelines of half
 * rounds (tail_phase_pipe: the phases above stream slower than the
 * launches, in step after each barrier) with the o and down phases' input
 * codes in shared memory, 2 also with two slots issued before each wait;
 * GEM_CUDA_TAIL_PARTS=2..4 cuts the o and down rows into more tasks;
 * none measured yet.
 *
 * Invariants:
 * - Every block is resident at once (grid = multiprocessors x the
 *   kernel's occupancy, 512 threads, nothing else of this backend's stream
 *   can hold an SM while the grid waits: the kernel before it completes,
 *   the one after is scheduled only once all our blocks have started). This
 *   is assumed, not enforced (no cooperative launch): two backends must not
 *   run this kernel concurrently on one GPU (their grids could split the
 *   SMs and wait on each other; one engine holds one backend), nor may
 *   another process limit this one's SMs (MPS). Either would stall a
 *   barrier: after 5 s of waiting the kernel traps (TAIL_WAIT_LIMIT_NS),
 *   which the backend reports as a CUDA error rather than hanging.
 * - The barrier counter only grows (64 bits: no wrap): an arriving block
 *   waits for the next multiple of the grid, so a launch needs no reset as
 *   long as every launch on the counter has the same grid.
 * - A product's rows are dealt as tasks (2 rows, or one gate/up row; o and
 *   down rows in parts of at most a round of loads, see tail_parts): warp w takes
 *   tasks w, w + W, ... for its static rounds, then takes the rest from the
 *   phase's counter (atomicAdd); block 0 zeroes that counter after the
 *   barrier that ends the phase (the q/k/v phase's, which no barrier
 *   follows, after the o phase's barrier of the next launch), so the next
 *   launch finds it zero.
 * - Data another block wrote in this launch (att's codes with the combine
 *   phase, the o and down row parts, the gate/up output and its codes, h')
 *   is read with plain loads or cp.async.cg (L2; PIPE's staged codes)
 *   after a barrier (its fences order them), never through the read-only
 *   path (__ldg), which is not coherent with writes during the kernel.
 * - Results are those of the op-by-op path within the rounding of other
 *   summation orders (the products: k_mv_q's arithmetic per part, parts
 *   added in order; the norms: k_rmsnorm4's per-element expressions,
 *   another block-sum order), deterministic from run to run. The o_out and
 *   down_out buffers of the op are not used (the row parts live in the
 *   backend's scratch); act holds the gate/up output. */
#include "backend/cuda/cuda_common.h"

#define TAIL_THREADS 512
#define TAIL_WARPS (TAIL_THREADS / 32)

/* weight loads per lane per round and row: as k_mv_q (q4_0 blocks are half
 * the bytes, so twice as many in flight); a pipelined phase's q4_0 rounds
 * are of 6 (slots of 3: two slots' registers then fit beside the rest
 * without spilling in the loop, and a 5376-value row, 5.25 chunks of 32
 * blocks, is one round of two full slots) */
__host__ __device__ constexpr int tail_u(int q4, int pipe = 0) { return q4 ? (pipe ? 6 : 8) : 4; }

/* U weight blocks of each of a task's two rows, in registers: a round
 * (U = tail_u), or half of one (the pipelined phases, see tail_phase_pipe) */
template <int U> struct tail_buf {
    uint4 w0[U][2], w1[U][2];
    float dw[U][2];
};


/* Times of a block's phases in trace builds (thread 0): when it arrived at
 * the barrier before the phase (or entered the kernel) and when that wait
 * ended (or the grid dependency resolved). */
struct tail_times {
    unsigned long long arrived, released;
};
__device__ __forceinline__ unsigned long long trace_now() {
#ifdef GEM_CUDA_TRACE
    return gpu_time_ns();
#else
    return 0;
#endif
}

/* Grid barrier in two halves (see the invariants): arrive returns the
 * count to wait for; work may go between the two. Trace builds record the
 * block's phase that ends here as a record of its kind. */
__device__ __forceinline__ unsigned long long tail_arrive(unsigned long long *bar, unsigned kind, tail_times &tt) {
    __syncthreads();
    unsigned long long target = 0;
    if (threadIdx.x == 0) {
        CU_TRACE_PHASE(kind, tt.arrived, tt.released);
        tt.arrived = trace_now();
        __threadfence();
        const unsigned long long old = atomicAdd(bar, 1ull);
        target = (old / gridDim.x + 1) * gridDim.x;
    }
    return target; /* meaningful in thread 0 only */
}
/* A wait longer than this means a block of the grid is not resident (the
 * assumption no cooperative launch checks, see the invariants): the kernel
 * traps, so the backend reports a CUDA error instead of the process
 * hanging. A layer's barrier waits microseconds; 5 s also covers time
 * slices shared with other processes. */
#define TAIL_WAIT_LIMIT_NS 5000000000ull

__device__ __forceinline__ void tail_wait(const unsigned long long *bar, unsigned long long target, tail_times &tt) {
    if (threadIdx.x == 0) {
        const unsigned long long t0 = gpu_time_ns();
        for (;;) {
            unsigned long long v;
            asm volatile("ld.acquire.gpu.u64 %0, [%1];" : "=l"(v) : "l"(bar) : "memory");
            if (v >= target) break;
            __nanosleep(20);
            if (gpu_time_ns() - t0 > TAIL_WAIT_LIMIT_NS) __trap();
        }
        __threadfence();
        tt.released = trace_now();
    }
    __syncthreads();
}

/* The matrices of a product phase: one (rows M0 into o0, in sp parts),
 * the gate/up pair (PAIR: q0 gate and q1 up, rows M0 into o0), or up to
 * three sharing the input (the next layer's q, k, v: `count` of them, rows
 * Mi into oi, one part). Fields are picked with selects, never indexed by
 * a run-time value (that would copy the struct to local memory, as
 * k_mv_q's mv_rows_of notes). */
struct tail_mats {
    const uint8_t *q0, *q1, *q2;
    const __half *d0, *d1, *d2;
    float *o0, *o1, *o2;
    int M0, M1, M2, count, sp;
};

struct tail_job {
    /* the products: o (into the parts op), gate/up (act), down (the parts
     * dp), the next layer's q/k/v (count 0: not in this launch) */
    tail_mats mo, mgu, mdn, mqkv;
    const float *n_pa, *n_ffn, *n_pf; /* norm weights */
    const float *n_next, *scale;      /* NULL: the last layer; no layer scale */
    const int8_t *xq_att;             /* att's codes (written before the launch, or by the combine phase) */
    const float *xd_att;
    const int *xs_att;
    int8_t *tq; /* the gate/up output's codes (F), written and read in the launch */
    float *td;
    int *ts;
    int8_t *xq; /* a's codes for the next products (the backend's scratch) */
    float *xd;
    int *xs;
    float *h, *act, *a;
    float *hs;       /* h after the first add (H) */
    float *op, *dp;  /* the o and down products' row parts (sp_o x H, sp_d x H) */
    /* the attention's split partials to combine into att and its codes
     * first (part NULL: att comes combined, its codes in xq_att) */
    struct {
        const float *part, *pml;
        const int *step;
        float *att;
        int n_head, d, nsplit, window;
    } cb;
    unsigned long long *bar;
    unsigned *ctr; /* the o, gate/up, down and q/k/v phases' task counters */
    int H, F, K;
    int sp_o, sp_d; /* parts of an o row and of a down row (tail_task_of) */
    int pre2;       /* PIPE: each prefetch issues the first task's first two slots (GEM_CUDA_TAIL_PIPE=2) */
    int xcap;       /* PIPE: values of the staged input codes' area in shared memory (tail_smem_bytes) */
    float eps;
};

/* Tasks of a phase: two rows each (one of each matrix: PAIR), times the
 * parts of a row. MULTI: the up-to-three matrices of the q/k/v phase (one
 * part each); otherwise one matrix (count 1) or the pair: no select among
 * matrices, which frees registers for the other phases. */
template <bool PAIR, bool MULTI> __host__ __device__ __forceinline__ int tail_tasks(const tail_mats &m) {
    if (PAIR) return m.M0;
    if (!MULTI) return ((m.M0 + 1) / 2) * m.sp;
    return (m.M0 + 1) / 2 + (m.count > 1 ? (m.M1 + 1) / 2 : 0) + (m.count > 2 ? (m.M2 + 1) / 2 : 0);
}

/* A task: two weight rows (rows 2g and 2g + 1 of a matrix, the last row
 * twice when M is odd; or row g of gate and of up: PAIR), over the blocks
 * [lo, hi) of its part. The o and down rows are cut into sp parts of at
 * most a round of a warp's loads each (tail_parts; a product of few long
 * rows then still has tasks for every warp, and no warp ends on a long
 * last task alone); part p's sums go to out[p M + row], the next
 * phase adds the parts in order. Task t of a matrix is part t / G of row
 * group t % G; the matrices' tasks follow one another. */
struct tail_task {
    const uint8_t *q[2];
    const __half *d[2];
    float *out;
    int M, lo, hi, g, part;
};
template <int Q4, bool PAIR, bool MULTI>
__device__ __forceinline__ tail_task tail_task_of(int t, int nb, const tail_mats &m) {
    constexpr int BS = Q4 ? 16 : 32;
    const int T0 = PAIR ? m.M0 : MULTI ? (m.M0 + 1) / 2 : ((m.M0 + 1) / 2) * m.sp, T1 = (m.M1 + 1) / 2;
    const int i = PAIR || !MULTI || t < T0 ? 0 : t < T0 + T1 ? 1 : 2;
    if (i) t -= i == 1 ? T0 : T0 + T1;
    const uint8_t *qa = i == 0 ? m.q0 : i == 1 ? m.q1 : m.q2;
    const __half *da = i == 0 ? m.d0 : i == 1 ? m.d1 : m.d2;
    tail_task k;
    k.M = i == 0 ? m.M0 : i == 1 ? m.M1 : m.M2;
    k.out = i == 0 ? m.o0 : i == 1 ? m.o1 : m.o2;
    const int sp = MULTI || PAIR ? 1 : m.sp, G = PAIR ? k.M : (k.M + 1) / 2, nbp = (nb + sp - 1) / sp;
    k.part = t / G;
    k.g = t - k.part * G;
    const int r0 = PAIR ? k.g : 2 * k.g, r1 = PAIR ? k.g : min(2 * k.g + 1, k.M - 1);
    k.q[0] = qa + (size_t)r0 * nb * BS;
    k.d[0] = da + (size_t)r0 * nb;
    k.q[1] = (PAIR ? m.q1 : qa) + (size_t)r1 * nb * BS;
    k.d[1] = (PAIR ? m.d1 : da) + (size_t)r1 * nb;
    k.lo = k.part * nbp;
    k.hi = min(nb, k.lo + nbp);
    return k;
}

/* U of a lane's weight blocks, b0, b0 + ST, ... (below hi), of both rows:
 * a round (ST 32: every block of U chunks of 32) or the even or odd
 * chunks of one (ST 64: a pipelined phase's slot). */
template <int Q4, int U, int ST>
__device__ __forceinline__ void tail_load(tail_buf<U> &R, const tail_task &k, int b0) {
    constexpr int BS = Q4 ? 16 : 32;
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int b = b0 + ST * u;
#pragma unroll
        for (int r = 0; r < 2; r++)
            if (b < k.hi) {
                R.w0[u][r] = __ldg((const uint4 *)(k.q[r] + (size_t)b * BS));
                if (!Q4) R.w1[u][r] = __ldg((const uint4 *)(k.q[r] + (size_t)b * BS + 16));
                R.dw[u][r] = __half2float(k.d[r][b]);
            }
    }
}

/* The dot products of those blocks against activation codes, read plainly:
 * global ones are written by this launch or by the kernel before it into
 * scratch this launch writes again (att's codes, then a's, in xq), so never
 * through the read-only path; or shared memory. */
template <int Q4, int U, int ST>
__device__ __forceinline__ void tail_dot(const tail_buf<U> &R, const int8_t *xq, const float *xd, const int *xs,
                                         int hi, int b0, float &a0, float &a1) {
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int b = b0 + ST * u;
        if (b >= hi) break;
        const int4 *xv = (const int4 *)(xq + (size_t)b * 32);
        const int4 x0 = xv[0], x1 = xv[1];
        const float dx = xd[b];
        const int sx = xs[b];
        /* q4_0 loads no second half (w1 unset): pass w0 twice */
        const int s0 = mv_block_dot<Q4>(R.w0[u][0], Q4 ? R.w0[u][0] : R.w1[u][0], x0, x1, sx);
        const int s1 = mv_block_dot<Q4>(R.w0[u][1], Q4 ? R.w0[u][1] : R.w1[u][1], x0, x1, sx);
        a0 += R.dw[u][0] * dx * (float)s0;
        a1 += R.dw[u][1] * dx * (float)s1;
    }
}

/* This warp's first task's first round, issued before a wait
 * (tail_preload_pipe is the pipelined phases' counterpart). */
template <int Q4, bool PAIR, bool MULTI = false>
__device__ __forceinline__ void tail_preload(tail_buf<tail_u(Q4)> &R, const tail_mats &m, int K) {
    const int gw = blockIdx.x * TAIL_WARPS + (threadIdx.x >> 5);
    if (gw >= tail_tasks<PAIR, MULTI>(m)) return;
    const tail_task k = tail_task_of<Q4, PAIR, MULTI>(gw, K / 32, m);
    tail_load<Q4, tail_u(Q4), 32>(R, k, k.lo + (threadIdx.x & 31));
}

/* A task's sums, a0 and a1 of every lane, to its output: gelu(gate) up
 * (PAIR), or its two rows of its part. */
template <bool PAIR> __device__ __forceinline__ void tail_store(const tail_task &k, float a0, float a1) {
    a0 = warp_sum(a0);
    a1 = warp_sum(a1);
    if ((threadIdx.x & 31) == 0) {
        if (PAIR) {
            k.out[k.g] = gelu_tanh_f(a0) * a1;
        } else {
            float *o = k.out + (size_t)k.part * k.M;
            o[2 * k.g] = a0;
            if (2 * k.g + 1 < k.M) o[2 * k.g + 1] = a1;
        }
    }
}

/* One product phase of the matrices m (see tail_mats) on x, 8-bit codes of
 * K values: out = W x, or out = gelu(gate x) (up x) (PAIR). pre: the first
 * task's first round is in R already (tail_preload). */
template <int Q4, bool PAIR, bool MULTI = false>
__device__ __forceinline__ void tail_phase(tail_buf<tail_u(Q4)> &R, bool pre, const tail_mats &m, int K,
                                           const int8_t *xq, const float *xd, const int *xs, unsigned *ctr) {
    constexpr int U = tail_u(Q4);
    const int lane = threadIdx.x & 31, W = gridDim.x * TAIL_WARPS, gw = blockIdx.x * TAIL_WARPS + (threadIdx.x >> 5);
    const int nb = K / 32, T = tail_tasks<PAIR, MULTI>(m);
    /* static rounds: all but the last full one; the rest is taken from the
     * counter, so a slow multiprocessor's share shrinks */
    const int S = max(1, T / W - 1);
    int t = gw;
    for (int n = 0; t < T; n++) {
        unsigned got = 0;
        if (n + 1 >= S && lane == 0) got = atomicAdd(ctr, 1u); /* next task; its latency hides behind this one */
        const tail_task k = tail_task_of<Q4, PAIR, MULTI>(t, nb, m);
        float a0 = 0, a1 = 0;
        for (int b0 = k.lo + lane; b0 < k.hi; b0 += 32 * U) {
            if (!pre || b0 != k.lo + lane) tail_load<Q4, U, 32>(R, k, b0);
            tail_dot<Q4, U, 32>(R, xq, xd, xs, k.hi, b0, a0, a1);
        }
        pre = false;
        tail_store<PAIR>(k, a0, a1);
        t = n + 1 < S ? gw + (n + 1) * W : S * W + (int)__shfl_sync(0xffffffffu, got, 0);
    }
}

/* A pipelined phase's slots (GEM_CUDA_TAIL_PIPE=1): a task's rounds cut
 * in two, the even 32-block chunks of a round, then its odd ones; a last
 * round of one chunk has one slot. Uniform over the warp. */
template <int Q4> __device__ __forceinline__ int tail_slots(const tail_task &k) {
    constexpr int U = tail_u(Q4, 1);
    const int c = (k.hi - k.lo + 31) / 32, r = (c + U - 1) / U;
    return 2 * (r - 1) + (c - (r - 1) * U >= 2 ? 2 : 1);
}
/* this lane's first block of slot s (then every 64th: tail_load's ST) */
template <int Q4> __device__ __forceinline__ int tail_slot_b0(const tail_task &k, int s) {
    return k.lo + (threadIdx.x & 31) + 32 * (tail_u(Q4, 1) * (s >> 1) + (s & 1));
}

/* A pipelined phase's number for this warp: warp w of block b is w G + b
 * (G blocks), so a static round that does not fill the grid (k_mv_pipe:
 * T mod W tasks in its last) falls on about as many warps of every
 * multiprocessor rather than on all the warps of the first few. */
__device__ __forceinline__ int tail_pipe_warp() { return (int)((threadIdx.x >> 5) * gridDim.x + blockIdx.x); }

/* This warp's first task's first slot into A, with `two` also its second
 * (when it has one) into B, issued before a wait (tail_phase_pipe's pre 1
 * or 2). */
template <int Q4, bool PAIR, bool MULTI = false>
__device__ __forceinline__ void tail_preload_pipe(tail_buf<tail_u(Q4, 1) / 2> &A, tail_buf<tail_u(Q4, 1) / 2> &B,
                                                  const tail_mats &m, int K, bool two) {
    constexpr int UH = tail_u(Q4, 1) / 2;
    const int gw = tail_pipe_warp();
    if (gw >= tail_tasks<PAIR, MULTI>(m)) return;
    const tail_task k = tail_task_of<Q4, PAIR, MULTI>(gw, K / 32, m);
    tail_load<Q4, UH, 64>(A, k, tail_slot_b0<Q4>(k, 0));
    if (two && tail_slots<Q4>(k) >= 2) tail_load<Q4, UH, 64>(B, k, tail_slot_b0<Q4>(k, 1));
}

/* tail_phase as a pipeline of slots (half rounds): each warp issues the
 * loads of its next slot, of this task or of its next one, before it uses
 * the slot it has, so it always has weights in flight. Why: after a grid
 * barrier every warp of the grid starts its phase at once, and with whole
 * rounds (tail_phase) they stay in step: all issue a round, all wait for
 * it, all compute, while memory idles (the in-step waves k_mv_q's
 * staggered start breaks up; its gate/up phase streamed at ~2.7 TB/s
 * against the launch's ~3.8). Two slots fit the registers of a round
 * (q8_0: 2 x 2 blocks against 4; q4_0: 2 x 3 against 8). The counter's
 * tasks are asked for two ahead (lane 0: p1 for this warp's next task,
 * p2 for the one after), so the next task is known a slot before this
 * one ends; a warp's answers grow (one address, one
 * thread), so a warp that stops on an answer past the end has been dealt
 * no task it leaves undone. pre: 1, the first task's first slot is in RA;
 * 2, also its second in RB if it has one (tail_preload_pipe). ctr NULL:
 * every task static (k_mv_pipe). */
template <int Q4, bool PAIR, bool MULTI = false>
__device__ __forceinline__ void tail_phase_pipe(tail_buf<tail_u(Q4, 1) / 2> &RA, tail_buf<tail_u(Q4, 1) / 2> &RB,
                                                int pre, const tail_mats &m, int K, const int8_t *xq, const float *xd,
                                                const int *xs, unsigned *ctr) {
    constexpr int UH = tail_u(Q4, 1) / 2;
    const int lane = threadIdx.x & 31, W = gridDim.x * TAIL_WARPS, gw = tail_pipe_warp();
    const int nb = K / 32, T = tail_tasks<PAIR, MULTI>(m);
    /* static tasks, as tail_phase; all of them without a counter */
    const int S = ctr ? max(1, T / W - 1) : (T + W - 1) / W;
    if (gw >= T) return;
    tail_task k = tail_task_of<Q4, PAIR, MULTI>(gw, nb, m);
    int s = 0, ns = tail_slots<Q4>(k), n = 0;
    unsigned p1 = 0, p2 = 0;
    if (ctr && lane == 0) {
        if (1 >= S) p1 = atomicAdd(ctr, 1u);
        if (2 >= S) p2 = atomicAdd(ctr, 1u);
    }
    if (!pre) tail_load<Q4, UH, 64>(RA, k, tail_slot_b0<Q4>(k, 0));
    /* the second slot too is in RB already (tail_preload_pipe, two): the
     * first step issues no loads */
    bool skip = pre >= 2 && ns >= 2;
    float a0 = 0, a1 = 0;
    /* one slot: the next one's loads, this one's dots (and its task's
     * store when it is the last); false when there is no next slot */
    auto step = [&](tail_buf<UH> &cur, tail_buf<UH> &nxt) -> bool {
        tail_task kn = k;
        int sn = s + 1, nsn = ns;
        bool more = true, fresh = false;
        if (sn == ns) {
            const int tn = n + 1 < S ? gw + (n + 1) * W : ctr ? S * W + (int)__shfl_sync(0xffffffffu, p1, 0) : T;
            more = tn < T;
            if (more) {
                kn = tail_task_of<Q4, PAIR, MULTI>(tn, nb, m);
                sn = 0;
                nsn = tail_slots<Q4>(kn);
                fresh = true;
            }
        }
        if (more && !skip) tail_load<Q4, UH, 64>(nxt, kn, tail_slot_b0<Q4>(kn, sn));
        skip = false;
        tail_dot<Q4, UH, 64>(cur, xq, xd, xs, k.hi, tail_slot_b0<Q4>(k, s), a0, a1);
        if (s + 1 == ns) {
            tail_store<PAIR>(k, a0, a1);
            a0 = a1 = 0;
        }
        if (fresh) {
            n++;
            p1 = p2;
            if (ctr && lane == 0 && n + 2 >= S) p2 = atomicAdd(ctr, 1u);
        }
        k = kn, s = sn, ns = nsn;
        return more;
    };
    /* two slots per turn: the buffers trade roles without copies */
    while (step(RA, RB) && step(RB, RA)) {
    }
}

/* Up to TAIL_NV float4 of a row per thread (rows of H <= 6144: the 31B's
 * 5376 is 2.6): the norm loops run a fixed count, so every load of a
 * thread is issued before the first use (the rows are latency-bound). */
#define TAIL_NV 3

/* The float4 i = thread + 512 k of a row of n4 (k < TAIL_NV), in order. */
#define TAIL_ROW(k, i, n4)                                       \
    _Pragma("unroll") for (int k = 0; k < TAIL_NV; k++)          \
        if (const int i = threadIdx.x + k * TAIL_THREADS; i < (n4))

/* The float4 of a row this block writes: i = block * threads + thread, then
 * every grid's worth; 8 lanes hold a 32-value block, a warp 4 (n4 is a
 * multiple of 32, so whole warps take part: quantize_block8 shuffles). */
#define TAIL_SLICE(i, n4) \
    for (int i = blockIdx.x * TAIL_THREADS + threadIdx.x; i < (n4); i += gridDim.x * TAIL_THREADS)

/* float4 i of a row kept in sp parts of n4 float4 each, added in order */
__device__ __forceinline__ float4 parts_sum(const float *p, int sp, int n4, int i) {
    float4 v = ((const float4 *)p)[i];
    for (int q = 1; q < sp; q++) {
        const float4 w = ((const float4 *)p)[(size_t)q * n4 + i];
        v.x += w.x, v.y += w.y, v.z += w.z, v.w += w.w;
    }
    return v;
}

__device__ __forceinline__ float sumsq4(float4 v) { return v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w; }

/* x r w, as k_rmsnorm4 rounds it */
__device__ __forceinline__ float4 norm4(float4 x, float r, float4 w) {
    return make_float4(x.x * r * w.x, x.y * r * w.y, x.z * r * w.z, x.w * r * w.w);
}

/* Both residual adds of the layer, as k_rmsnorm4's two stages compute
 * them, on a row of H (n4 float4) kept in sp parts: h4 = (res + rmsnorm(x)
 * w) (scale ? scale[0] : 1), w4 = w_next (when given), and the second
 * stage's factor 1 / rms(h4) returned. Every block computes the whole row;
 * block_sum's barriers publish h4 and w4 to the block. */
__device__ __forceinline__ float tail_add_norm(const float *parts, int sp, const float *w, const float *res,
                                               const float *scale, const float *w_next, int H, float eps, float4 *h4,
                                               float4 *w4, float *sh) {
    const int n4 = H / 4;
    float ss = 0;
    TAIL_ROW(k, i, n4) {
        const float4 v = parts_sum(parts, sp, n4, i);
        h4[i] = v;
        ss += sumsq4(v);
    }
    const float r = 1.0f / sqrtf(block_sum(ss, sh) / (float)H + eps);
    const float sc = scale ? __ldg(scale) : 1.0f;
    float ss2 = 0;
    TAIL_ROW(k, i, n4) {
        const float4 t = norm4(h4[i], r, __ldg((const float4 *)w + i)), hv = ((const float4 *)res)[i];
        float4 u = make_float4(hv.x + t.x, hv.y + t.y, hv.z + t.z, hv.w + t.w);
        if (scale) u.x *= sc, u.y *= sc, u.z *= sc, u.w *= sc;
        h4[i] = u;
        if (w_next) w4[i] = __ldg((const float4 *)w_next + i);
        ss2 += sumsq4(u);
    }
    return 1.0f / sqrtf(block_sum(ss2, sh) / (float)H + eps);
}

/* The combine phase (attention_rest): the one-token attention's split
 * partials weighed as k_attn_combine_wide weighs them (exp(max_s - M) per
 * split that saw keys, L the weighted sum of the splits' sums), into att
 * and its 8-bit codes (the o phase's input: xq, xd, xs). An item is one
 * head's 32-value block; G warps of a block share it (as many as the
 * grid's warps allow, up to all 16: a full layer at depth has up to 256
 * splits), warp g summing splits g, g + G, ..., and the item's first
 * warp adds the G sums in order, so the result does not depend on
 * timing. The loop's bound is the same for every warp of a block (its
 * barriers). On the H200's 132 multiprocessors the 31B's sliding layers
 * (256 items) get 8 warps per item, its full layers (512) 4. */
__device__ __forceinline__ void tail_combine(const tail_job &j, float *red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int D = j.cb.d, nsplit = j.cb.nsplit, nblk = D / 32, items = j.cb.n_head * nblk;
    int G = TAIL_WARPS;
    while (G > 1 && (int)gridDim.x * (TAIL_WARPS / G) < items) G >>= 1;
    const int per_block = TAIL_WARPS / G;
    const int used = attn_used_splits(j.cb.step, 0, 1, 1, j.cb.window, nsplit);
    for (int base = blockIdx.x * per_block; base < items; base += gridDim.x * per_block) {
        const int item = base + warp / G, g = warp % G;
        float o = 0, L = 0;
        if (item < items) {
            const int hq = item / nblk;
            const float *ml = j.cb.pml + (size_t)hq * nsplit * 2;
            float M = -INFINITY;
            for (int s = lane; s < used; s += 32) M = fmaxf(M, ml[2 * s]);
            M = warp_max(M); /* finite: this step's key is in a split */
            if (g == 0) {
                for (int s = lane; s < used; s += 32) {
                    const float m = ml[2 * s];
                    L += attn_split_weight(m, M) * ml[2 * s + 1];
                }
                L = warp_sum(L);
            }
            const float *pp = j.cb.part + (size_t)hq * nsplit * D + (size_t)(item % nblk) * 32 + lane;
#pragma unroll 8
            for (int s = g; s < used; s += G) {
                const float m = ml[2 * s];
                o += attn_split_weight(m, M) * pp[(size_t)s * D];
            }
        }
        red[warp * 32 + lane] = o;
        __syncthreads();
        if (item < items && g == 0) {
            for (int q = 1; q < G; q++) o += red[(warp + q) * 32 + lane];
            o *= 1.0f / L;
            const size_t e = (size_t)item * 32 + lane; /* = head D + element: D is a multiple of 32 */
            j.cb.att[e] = o;
            quantize_block32(o, (size_t)item, lane, j.xq, j.xd, j.xs);
        }
        __syncthreads(); /* red is the next round's */
    }
}

/* The activation codes a pipelined product reads from shared memory, at
 * most this many values (K of the o product, F of the down one, or a
 * k_mv_pipe product's K; 40 KB with their scales and sums): larger ones
 * are declined. A launch asks for what its own K and F need (tail_job's
 * xcap), so the 31B's k_tail takes ~76 KB, not the ~96 KB the kernel's
 * limit allows: the rest stays L1. */
#define TAIL_XMAX 32768
static size_t tail_x_bytes(int n) { return (size_t)n + (size_t)(n / 32) * 8; }

/* Rows in shared memory: hsm (the row being normed, H floats), wsm (the
 * second norm's weights, H floats), then a's codes for the gate/up phase:
 * cq (H bytes), cd and cs (H / 32 scales and code sums); with PIPE then
 * the o and down phases' input codes (tail_stage_x, xcap values: max(K,
 * F), a multiple of 32; 0 without PIPE). */
static size_t tail_smem_bytes(int H, int xcap) {
    return (size_t)H * 2 * sizeof(float) + tail_x_bytes(H) + tail_x_bytes(xcap);
}

/* n values' 8-bit codes (n bytes, a multiple of 32) with their block
 * scales and sums into shared memory, by the whole block (the caller
 * syncs). Why: a product's dots read every activation block once per task,
 * as many bytes as its weights; from global memory every warp of a block
 * misses L1 on the same lines at the same time after a barrier, from
 * shared memory they cost no memory traffic. The codes by cp.async (no
 * registers: the prefetched weights hold them; .cg reads L2, coherent with
 * this launch's writes), the scales and sums by plain loads meanwhile. */
__device__ __forceinline__ void tail_stage_x(const int8_t *q, const float *d, const int *s, int n, int8_t *sq,
                                             float *sd, int *ss) {
    for (int i = threadIdx.x; i < n / 16; i += blockDim.x) cp_async16(sq + 16 * (size_t)i, q + 16 * (size_t)i);
    cp_async_commit();
    for (int i = threadIdx.x; i < n / 32; i += blockDim.x) sd[i] = d[i], ss[i] = s[i];
    cp_async_wait<0>();
}

/* The product phases' weight registers: a round, or with PIPE two slots
 * of half a round (b unused without PIPE: the compiler drops it). */
template <int Q4, bool PIPE> struct tail_regs {
    static constexpr int U = PIPE ? tail_u(Q4, 1) / 2 : tail_u(Q4);
    tail_buf<U> a, b;
};
/* pre: what tail_prefetch issued (0 nothing; else 1 + its `two`) */
template <int Q4, bool PIPE, bool PAIR, bool MULTI = false>
__device__ __forceinline__ void tail_product(tail_regs<Q4, PIPE> &R, int pre, const tail_mats &m, int K,
                                             const int8_t *xq, const float *xd, const int *xs, unsigned *ctr) {
    if constexpr (PIPE) tail_phase_pipe<Q4, PAIR, MULTI>(R.a, R.b, pre, m, K, xq, xd, xs, ctr);
    else tail_phase<Q4, PAIR, MULTI>(R.a, pre != 0, m, K, xq, xd, xs, ctr);
}
/* two (PIPE only; GEM_CUDA_TAIL_PIPE=2): the first task's second slot
 * too, so that twice the bytes are in flight across a barrier and the
 * norm after it */
template <int Q4, bool PIPE, bool PAIR, bool MULTI = false>
__device__ __forceinline__ void tail_prefetch(tail_regs<Q4, PIPE> &R, const tail_mats &m, int K, bool two) {
    if constexpr (PIPE) tail_preload_pipe<Q4, PAIR, MULTI>(R.a, R.b, m, K, two);
    else tail_preload<Q4, PAIR, MULTI>(R.a, m, K);
}

/* PF: 0 no weights before a wait; 1 the next product's first round before
 * each grid barrier's wait; 2 also the o product's first round before the
 * grid dependency wait (weights are not written by any kernel, see
 * pdl_wait). COMB: the combine phase first (j.cb; attention_rest), a
 * template flag so that the kernels without it keep their registers.
 * PIPE: the product phases pipelined (tail_phase_pipe). */
template <int Q4, int PF, bool COMB, bool PIPE>
__global__ void __launch_bounds__(TAIL_THREADS, 1) k_tail(tail_job j) {
    CU_TRACE(CT_TAIL);
    tail_times tt;
    tt.arrived = trace_now();
    tail_regs<Q4, PIPE> R;
    const bool two = PIPE && j.pre2;
    const int pre = 1 + two; /* tail_product's pre where a prefetch was issued */
    if (PF >= 2) tail_prefetch<Q4, PIPE, false>(R, j.mo, j.K, two);
    pdl_wait();
    CU_TRACE_RELEASED();
    tt.released = trace_now();
    extern __shared__ float4 tail_smem[];
    __shared__ float sh[32], cred[COMB ? TAIL_WARPS * 32 : 1];
    const int H = j.H, F = j.F, n4 = H / 4, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float4 *h4 = tail_smem, *w4 = tail_smem + n4;
    int8_t *cq = (int8_t *)(w4 + n4);
    float *cd = (float *)(cq + H);
    int *cs = (int *)(cd + H / 32);
    /* PIPE: the o and down phases' input codes (tail_stage_x), after cs;
     * the pointers are made where they are used (kept live across the
     * combine phase, they cost a spill) */
#define TAIL_XS                                                        \
    int8_t *xq_s = (int8_t *)(tail_smem + 2 * n4) + j.H + j.H / 4;     \
    float *xd_s = (float *)(xq_s + j.xcap);                            \
    int *xs_s = (int *)(xd_s + j.xcap / 32);
    unsigned long long target;

    /* att and its codes from the attention's partials (attention_rest) */
    if (COMB) {
        tail_combine(j, cred);
        target = tail_arrive(j.bar, CT_TAIL_C, tt);
        if (PF == 1) tail_prefetch<Q4, PIPE, false>(R, j.mo, j.K, two);
        tail_wait(j.bar, target, tt);
    }

    /* o = Wo att (PIPE: att's codes from shared memory) */
    {
        TAIL_XS
        if (PIPE) {
            tail_stage_x(j.xq_att, j.xd_att, j.xs_att, j.K, xq_s, xd_s, xs_s);
            __syncthreads();
        }
        tail_product<Q4, PIPE, false>(R, PF >= 2 || (PF == 1 && COMB) ? pre : 0, j.mo, j.K, PIPE ? xq_s : j.xq_att,
                                      PIPE ? xd_s : j.xd_att, PIPE ? xs_s : j.xs_att, j.ctr);
    }
    target = tail_arrive(j.bar, CT_TAIL_O, tt);
    if (PF) tail_prefetch<Q4, PIPE, true>(R, j.mgu, H, two);
    tail_wait(j.bar, target, tt);
    /* the o phase's counter, and the q/k/v phase's of the launch before
     * (no barrier follows that phase) */
    if (blockIdx.x == 0 && threadIdx.x == 0) j.ctr[0] = j.ctr[3] = 0;

    /* h' = h + rmsnorm(o) n_pa (hsm; hs gets this block's slice), a' =
     * rmsnorm(h') n_ffn as codes (cq, cd, cs); k_rmsnorm4's expressions */
    {
        const float r2 = tail_add_norm(j.op, j.sp_o, j.n_pa, j.h, NULL, j.n_ffn, H, j.eps, h4, w4, sh);
        TAIL_SLICE(i, n4)((float4 *)j.hs)[i] = h4[i];
        TAIL_ROW(k, i, n4) quantize_block8(norm4(h4[i], r2, w4[i]), i / 8, cq, cd, cs, true);
        __syncthreads();
    }

    /* act = gelu(Wg a') (Wu a') */
    tail_product<Q4, PIPE, true>(R, PF >= 1 ? pre : 0, j.mgu, H, cq, cd, cs, j.ctr + 1);
    target = tail_arrive(j.bar, CT_TAIL_GU, tt);
    if (PF) tail_prefetch<Q4, PIPE, false>(R, j.mdn, F, two);
    tail_wait(j.bar, target, tt);
    if (blockIdx.x == 0 && threadIdx.x == 0) j.ctr[1] = 0;

    /* act's codes, a 32-value block per warp of the grid */
    for (int blk = blockIdx.x * TAIL_WARPS + warp; blk < F / 32; blk += gridDim.x * TAIL_WARPS)
        quantize_block32(j.act[blk * 32 + lane], (size_t)blk, lane, j.tq, j.td, j.ts);
    target = tail_arrive(j.bar, CT_TAIL_Q, tt);
    tail_wait(j.bar, target, tt);

    /* dn = Wd act (PIPE: act's codes from shared memory) */
    {
        TAIL_XS
        if (PIPE) {
            tail_stage_x(j.tq, j.td, j.ts, F, xq_s, xd_s, xs_s);
            __syncthreads();
        }
        tail_product<Q4, PIPE, false>(R, PF >= 1 ? pre : 0, j.mdn, F, PIPE ? xq_s : j.tq, PIPE ? xd_s : j.td,
                                      PIPE ? xs_s : j.ts, j.ctr + 2);
    }
#undef TAIL_XS
    target = tail_arrive(j.bar, CT_TAIL_DN, tt);
    if (PF && j.mqkv.count) tail_prefetch<Q4, PIPE, false, true>(R, j.mqkv, H, two);
    tail_wait(j.bar, target, tt);
    if (blockIdx.x == 0 && threadIdx.x == 0) j.ctr[2] = 0;

    /* h = (h' + rmsnorm(dn) n_pf) scale, a = rmsnorm(h) n_next with its
     * codes; every block norms the whole row, then writes its slice */
    const float r2 = tail_add_norm(j.dp, j.sp_d, j.n_pf, j.hs, j.scale, j.n_next, H, j.eps, h4, w4, sh);
    TAIL_SLICE(i, n4) {
        ((float4 *)j.h)[i] = h4[i];
        if (!j.n_next) continue;
        const float4 v = norm4(h4[i], r2, w4[i]);
        ((float4 *)j.a)[i] = v;
        quantize_block8(v, i / 8, j.xq, j.xd, j.xs, true);
    }
    if (j.mqkv.count) {
        /* the next layer's q/k/v of a: every block has the whole of a's
         * codes (as for the gate/up phase), so no barrier */
        TAIL_ROW(k, i, n4) quantize_block8(norm4(h4[i], r2, w4[i]), i / 8, cq, cd, cs, true);
        __syncthreads();
        tail_product<Q4, PIPE, false, true>(R, PF >= 1 ? pre : 0, j.mqkv, H, cq, cd, cs, j.ctr + 3);
    }
    if (threadIdx.x == 0) CU_TRACE_PHASE(CT_TAIL_END, tt.arrived, tt.released); /* the last norm (and q/k/v) */
}
#undef TAIL_SLICE
#undef TAIL_ROW

/* Parts of a row of nb blocks (tail_task_of): at most one round of a
 * warp's loads each (32 lanes x tail_u blocks), times `more`
 * (GEM_CUDA_TAIL_PARTS: smaller tasks end a phase more evenly), with
 * nb / sp at least 32 (a warp's width: every part but the last has 32
 * blocks or more) and none empty (tail_task_of's parts are ceil(nb / sp)
 * blocks, the last what is left: an empty task would never reach its
 * last slot in tail_phase_pipe). */
static int tail_parts(int nb, int q4, int pipe, int more) {
    const int round = 32 * tail_u(q4, pipe);
    int sp = (nb + round - 1) / round * more;
    while (sp > 1 && (nb / sp < 32 || (sp - 1) * ((nb + sp - 1) / sp) >= nb)) sp--;
    return sp;
}

static int f32_vec(const be_weight *w, int n) { return w && w->fmt == DW_F32 && w->ne0 == n && w->ne1 == 1; }

/* The seam's layer_rest, and with `at` its attention_rest (the attention
 * launched without its combine, which the kernel's first phase does): 0
 * when enqueued, 1 when these arguments are not the kernel's (nothing
 * enqueued; the model makes the other calls). Every check comes before
 * the first launch. */
static int tail_run(cuda_backend *c, const be_layer_rest *r, const be_attend *at) {
    if (!c->tail || r->n != 1 || c->gelu_fp16 || !c->tail_sync || (r->next_count && !c->tail_qkv)) return 1;
    const be_weight *Wo = r->o, *Wg = r->gate, *Wu = r->up, *Wd = r->down;
    const int fmt = Wo->fmt, q4 = fmt == DW_Q4_0;
    if ((fmt != DW_Q4_0 && fmt != DW_Q8_0) || Wg->fmt != fmt || Wu->fmt != fmt || Wd->fmt != fmt) return 1;
    const int H = r->width, F = (int)Wg->ne1, K = (int)Wo->ne0;
    /* rows of whole warps of float4 (TAIL_SLICE), at most TAIL_NV per thread */
    if (H % 128 || H > TAIL_NV * TAIL_THREADS * 4 || F % 32 || F < 32 || K % 32 || K < 32 || Wo->ne1 != H ||
        Wg->ne0 != H || Wu->ne0 != H || Wu->ne1 != F || Wd->ne0 != F || Wd->ne1 != H)
        return 1;
    if (!f32_vec(r->post_attn_norm, H) || !f32_vec(r->ffn_norm, H) || !f32_vec(r->post_ffw_norm, H) ||
        (r->next_norm && !f32_vec(r->next_norm, H)) || (r->out_scale && !f32_vec(r->out_scale, 1)))
        return 1;
    if (r->att->n < (size_t)K || r->h->n < (size_t)H || r->act->n < (size_t)F ||
        (r->next_norm && r->a->n < (size_t)H))
        return 1;
    /* the next layer's q/k/v (GEM_CUDA_TAIL_QKV=1): of a, in this format */
    const int nq = r->next_count;
    if (nq < 0 || nq > 3 || (nq && (!c->tail_qkv || !r->next_norm))) return 1;
    for (int i = 0; i < nq; i++)
        if (!r->next_w[i] || r->next_w[i]->fmt != fmt || r->next_w[i]->ne0 != H || !r->next_out[i] ||
            r->next_out[i]->n < (size_t)r->next_w[i]->ne1)
            return 1;
    /* blocks read h, att and (last) write a, act, q/k/v while others still
     * read: distinct buffers only (the seam says so) */
    /* attention_rest: a one-token step of the fused k_attn_tc whose output
     * is att, of the o product's width */
    if (at && (!c->tail_comb || at->out != r->att || at->n != 1 || !attn_parts_take(c, at) ||
               at->n_head * at->head_dim != K))
        return 1;
    const float *bufs[7] = {r->h->d, r->att->d, r->act->d, r->next_norm ? r->a->d : NULL, NULL, NULL, NULL};
    for (int i = 0; i < nq; i++) bufs[4 + i] = r->next_out[i]->d;
    for (int x = 0; x < 7; x++)
        for (int y = x + 1; y < 7; y++)
            if (bufs[x] && bufs[x] == bufs[y]) return 1;
    /* PIPE stages the o and down products' inputs in shared memory */
    if (c->tail_pipe && (K > TAIL_XMAX || F > TAIL_XMAX)) return 1;
    const int xcap = c->tail_pipe ? (K > F ? K : F) : 0;
    const size_t smem = tail_smem_bytes(H, xcap);
    const int pf = c->tail - 1; /* GEM_CUDA_TAIL=1..3: the prefetch level */
    /* [q4_0][prefetch level][combine phase][pipelined] */
#define TAIL_K(Q4, PF) {{k_tail<Q4, PF, false, false>, k_tail<Q4, PF, false, true>}, \
                        {k_tail<Q4, PF, true, false>, k_tail<Q4, PF, true, true>}}
    static void (*const kerns[2][3][2][2])(tail_job) = {{TAIL_K(0, 0), TAIL_K(0, 1), TAIL_K(0, 2)},
                                                        {TAIL_K(1, 0), TAIL_K(1, 1), TAIL_K(1, 2)}};
#undef TAIL_K
    const int comb = at != NULL;
    void (*kern)(tail_job) = kerns[q4][pf][comb][c->tail_pipe != 0];
    /* The grid: every block resident at once, sized once per kernel for the
     * largest rows (the shared-memory attribute is the process's, never
     * lowered: another backend with other rows sets the same value), and
     * one grid for every launch on the barrier counter (its targets are
     * multiples of the grid): a kernel whose occupancy gives another grid
     * than one already sized is declined. */
    int *grid = &c->tail_grid[q4][comb];
    if (*grid == 0) {
        const size_t most = tail_smem_bytes(TAIL_NV * TAIL_THREADS * 4, c->tail_pipe ? TAIL_XMAX : 0);
        int per_sm = 0;
        if (cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)most) != cudaSuccess ||
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, TAIL_THREADS, most) != cudaSuccess ||
            per_sm < 1) {
            (void)cudaGetLastError(); /* not a failure of the stream: the op-by-op calls instead */
            *grid = -1;
        } else {
            *grid = per_sm * c->n_sm;
        }
    }
    if (*grid < 1) return 1;
    for (int k = 0; k < 4; k++)
        if (c->tail_grid[k / 2][k % 2] > 0 && c->tail_grid[k / 2][k % 2] != *grid) return 1;
    /* o and down rows cut into parts (tail_parts): at most a round of a
     * warp's loads each (32 lanes x tail_u blocks: with PIPE, q4_0 rounds
     * of 6 chunks, so the 31B's o rows take 2 parts and its down rows 4
     * where they take 1 and 3 without), times GEM_CUDA_TAIL_PARTS */
    const int sp_o = tail_parts(K / 32, q4, c->tail_pipe, c->tail_parts),
              sp_d = tail_parts(F / 32, q4, c->tail_pipe, c->tail_parts);
    /* scratch: att's and then a's codes (xq), the gate/up output's codes
     * (tail_q), h' and the o and down row parts (tail_h); a capture
     * cannot grow them */
    const size_t nx = (size_t)(K > H ? K : H);
    const size_t need[4] = {nx, nx / 32 * sizeof(float), (size_t)F + (size_t)F / 32 * 8,
                            (size_t)H * (size_t)(1 + sp_o + sp_d) * sizeof(float)};
    if (c->capturing && (c->xq.cap < need[0] || c->xd.cap < need[1] || c->xs.cap < need[1] || c->tail_q.cap < need[2] ||
                         c->tail_h.cap < need[3]))
        return 1;
    /* att's codes from the op that made att, unless the scratch must grow
     * (a new buffer holds no codes); with `at` the kernel makes them */
    const int cached = !at && act_cache_holds(c, &c->xq_of, r->att->d, 1, K) && c->xq.cap >= need[0] &&
                       c->xd.cap >= need[1] && c->xs.cap >= need[1];
    if (!cached) c->xq_of.src = NULL; /* xq may be reallocated below, even if a later growth fails */
    if (grow(c, &c->xq, need[0]) || grow(c, &c->xd, need[1]) || grow(c, &c->xs, need[1]) ||
        grow(c, &c->tail_q, need[2]) || grow(c, &c->tail_h, need[3]))
        return 1; /* the error is sticky: status() reports it */
    if (!cached && !at) {
        launch(c, k_quantize_act, blocks_for((size_t)K, 256), 256, 0, (const float *)r->att->d, (int64_t)(K / 32),
               (int8_t *)c->xq.p, (float *)c->xd.p, (int *)c->xs.p);
        LAUNCHED(c, "quantize activations");
    }
    tail_job j;
    memset(&j, 0, sizeof j);
    if (at) {
        attn_parts p;
        if (attn_parts_run(c, at, &p)) return 0; /* taken, failed: the sticky error says why */
        j.cb.part = p.part, j.cb.pml = p.pml, j.cb.step = c->step, j.cb.att = r->att->d;
        j.cb.n_head = p.n_head, j.cb.d = p.d, j.cb.nsplit = p.nsplit, j.cb.window = p.window;
    }
    j.hs = (float *)c->tail_h.p;
    j.op = j.hs + H;
    j.dp = j.op + (size_t)sp_o * H;
    j.mo.q0 = (const uint8_t *)Wo->q, j.mo.d0 = Wo->d, j.mo.o0 = j.op, j.mo.M0 = H, j.mo.count = 1, j.mo.sp = sp_o;
    j.mgu.q0 = (const uint8_t *)Wg->q, j.mgu.d0 = Wg->d, j.mgu.q1 = (const uint8_t *)Wu->q, j.mgu.d1 = Wu->d;
    j.mgu.o0 = r->act->d, j.mgu.M0 = F, j.mgu.count = 2, j.mgu.sp = 1;
    j.mdn.q0 = (const uint8_t *)Wd->q, j.mdn.d0 = Wd->d, j.mdn.o0 = j.dp, j.mdn.M0 = H, j.mdn.count = 1;
    j.mdn.sp = sp_d;
    j.mqkv.count = nq, j.mqkv.sp = 1;
    if (nq > 0)
        j.mqkv.q0 = (const uint8_t *)r->next_w[0]->q, j.mqkv.d0 = r->next_w[0]->d, j.mqkv.o0 = r->next_out[0]->d,
        j.mqkv.M0 = (int)r->next_w[0]->ne1;
    if (nq > 1)
        j.mqkv.q1 = (const uint8_t *)r->next_w[1]->q, j.mqkv.d1 = r->next_w[1]->d, j.mqkv.o1 = r->next_out[1]->d,
        j.mqkv.M1 = (int)r->next_w[1]->ne1;
    if (nq > 2)
        j.mqkv.q2 = (const uint8_t *)r->next_w[2]->q, j.mqkv.d2 = r->next_w[2]->d, j.mqkv.o2 = r->next_out[2]->d,
        j.mqkv.M2 = (int)r->next_w[2]->ne1;
    j.n_pa = (const float *)r->post_attn_norm->q, j.n_ffn = (const float *)r->ffn_norm->q;
    j.n_pf = (const float *)r->post_ffw_norm->q;
    j.n_next = r->next_norm ? (const float *)r->next_norm->q : NULL;
    j.scale = r->out_scale ? (const float *)r->out_scale->q : NULL;
    j.xq_att = (const int8_t *)c->xq.p, j.xd_att = (const float *)c->xd.p, j.xs_att = (const int *)c->xs.p;
    j.tq = (int8_t *)c->tail_q.p;
    j.td = (float *)(j.tq + F);
    j.ts = (int *)(j.td + F / 32);
    j.xq = (int8_t *)c->xq.p, j.xd = (float *)c->xd.p, j.xs = (int *)c->xs.p;
    j.h = r->h->d, j.act = r->act->d;
    j.a = r->next_norm ? r->a->d : NULL;
    j.sp_o = sp_o, j.sp_d = sp_d;
    j.pre2 = c->tail_pipe == 2;
    j.xcap = xcap;
    j.bar = c->tail_sync;
    j.ctr = (unsigned *)(c->tail_sync + 1);
    j.H = H, j.F = F, j.K = K;
    j.eps = r->eps;
    launch(c, kern, *grid, TAIL_THREADS, smem, j);
    /* the names tell in a profile (GEM_CUDA_PROFILE=1) which form ran */
    LAUNCHED(c, at ? "layer rest (persistent, combine)" : "layer rest (persistent)");
    /* a's codes stay in xq for the products of a after this op */
    if (r->next_norm) quantized_cache_set(c, r->a->d, 1, H);
    return 0;
}

int cu_layer_rest(backend *b, const be_layer_rest *r) { return tail_run(cu_of(b), r, NULL); }

int cu_attention_rest(backend *b, const be_attend *a, const be_layer_rest *r) { return tail_run(cu_of(b), r, a); }

/* GEM_CUDA_MV_PIPE=1 (2: also where its static rounds fit badly, see
 * tail_mv_pipe): a one-token q8_0/q4_0 product (up to three matrices
 * sharing the input, or the gate/up pair with GELU gating) as one wave of
 * 512-thread blocks, each warp running tail_phase_pipe over its static
 * share of row pairs (whole rows: no parts), instead of k_mv_q's blocks of
 * one round each. The question it answers: whether k_mv_q's products,
 * whose waves its staggered start keeps out of step, stream faster as
 * pipelines of half rounds. Not yet measured. Activation codes as k_mv_q
 * reads them, written by the kernel before, staged in shared memory. */
template <int Q4, bool PAIR>
__global__ void __launch_bounds__(TAIL_THREADS, 1)
    k_mv_pipe(tail_mats m, int K, const int8_t *xq, const float *xd, const int *xs) {
    CU_TRACE(CT_MV_PIPE);
    pdl_wait();
    CU_TRACE_RELEASED();
    /* the first two slots' weights in flight while the block stages the
     * input's codes in shared memory (tail_stage_x) */
    tail_buf<tail_u(Q4, 1) / 2> RA, RB;
    tail_preload_pipe<Q4, PAIR, !PAIR>(RA, RB, m, K, true);
    extern __shared__ int4 mv_pipe_smem[];
    int8_t *sq = (int8_t *)mv_pipe_smem;
    float *sd = (float *)(sq + K);
    int *ss = (int *)(sd + K / 32);
    tail_stage_x(xq, xd, xs, K, sq, sd, ss);
    __syncthreads();
    tail_phase_pipe<Q4, PAIR, !PAIR>(RA, RB, 2, m, K, sq, sd, ss, NULL);
}

int tail_mv_pipe(cuda_backend *c, int count, const be_weight *const *W, int pair, be_buf *const *outs) {
    const int fmt = W[0]->fmt, q4 = fmt == DW_Q4_0, K = (int)W[0]->ne0, nw = pair ? 2 : count;
    /* K >= 32: a task of no blocks would have no last slot; K <= TAIL_XMAX:
     * the input's codes in shared memory (under the 48 KB a launch may ask
     * without raising the kernel's limit) */
    if ((fmt != DW_Q4_0 && fmt != DW_Q8_0) || K % 32 || K < 32 || K > TAIL_XMAX || count < 1 || count > 3 ||
        (pair && count != 1))
        return 1;
    for (int i = 0; i < nw; i++)
        if (W[i]->fmt != fmt || W[i]->ne0 != K) return 1;
    if (pair && W[1]->ne1 != W[0]->ne1) return 1;
    static void (*const kerns[2][2])(tail_mats, int, const int8_t *, const float *, const int *) = {
        {k_mv_pipe<0, false>, k_mv_pipe<0, true>}, {k_mv_pipe<1, false>, k_mv_pipe<1, true>}};
    void (*kern)(tail_mats, int, const int8_t *, const float *, const int *) = kerns[q4][pair];
    int *grid = &c->mv_pipe_grid[q4][pair];
    if (*grid == 0) {
        int per_sm = 0;
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, TAIL_THREADS, tail_x_bytes(TAIL_XMAX)) !=
                cudaSuccess ||
            per_sm < 1) {
            (void)cudaGetLastError(); /* not a failure of the stream: k_mv_q instead */
            *grid = -1;
        } else {
            *grid = per_sm * c->n_sm;
        }
    }
    if (*grid < 1) return 1;
    tail_mats m;
    memset(&m, 0, sizeof m);
    m.q0 = (const uint8_t *)W[0]->q, m.d0 = W[0]->d, m.o0 = outs[0]->d, m.M0 = (int)W[0]->ne1;
    m.count = nw, m.sp = 1;
    if (nw > 1) m.q1 = (const uint8_t *)W[1]->q, m.d1 = W[1]->d, m.M1 = (int)W[1]->ne1;
    if (nw > 2) m.q2 = (const uint8_t *)W[2]->q, m.d2 = W[2]->d, m.M2 = (int)W[2]->ne1;
    if (!pair && nw > 1) m.o1 = outs[1]->d;
    if (!pair && nw > 2) m.o2 = outs[2]->d;
    /* Tasks (row pairs, or gate/up rows) are dealt statically, so with 1 a
     * product whose static rounds keep on average fewer than 85% of the
     * warps busy is declined: the 31B's o and down products (2688 tasks on
     * 2112 warps: 64% of two rounds) stay on k_mv_q, its gate/up (93% of
     * 11) and q/k/v (97% of 4) come here. 2: every product here (the
     * tests). */
    const int tasks = pair ? tail_tasks<true, false>(m) : tail_tasks<false, true>(m);
    const long warps = (long)*grid * TAIL_WARPS, rounds = (tasks + warps - 1) / warps;
    if (c->mv_pipe == 1 && (long)tasks * 100 < 85 * rounds * warps) return 1;
    launch(c, kern, *grid, TAIL_THREADS, tail_x_bytes(K), m, K, (const int8_t *)c->xq.p, (const float *)c->xd.p,
           (const int *)c->xs.p);
    return 0;
}
