/* The backend seam: what a model's layer loop may ask of a compute device.
 *
 * A backend owns device memory: weights are made resident once (`weight`,
 * zero-copy on the CPU), activations live in `be_buf`s of floats, and each
 * layer's KV cache is a `be_kv`. Operations are enqueued in order and may run
 * asynchronously; `sync` waits, and `download` implies it. Shapes are passed
 * explicitly (rows x width, row-major, width contiguous). Positions inside
 * one call are contiguous (pos0, pos0+1, ...): a session is one sequence.
 *
 * The operations are coarse enough for a GPU (a whole tile of tokens per
 * call, no host round trips inside a token) and named after the model's
 * arithmetic, so the same loop runs on every backend. Semantics (all math
 * in f32):
 *   embed:      out[i] = E[ids[i]] * scale
 *   rmsnorm:    out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * (w ? w : 1)
 *   add_rmsnorm h[r] = (h[r] + rmsnorm(x[r]) * w) * (s ? s[0] : 1)
 *   matmul:     out[i][o] = sum_k W[o][k] * x[i][k]   (W as stored: out rows of in)
 *   rope:       NeoX rotation of the first `n_rot` dims of every head, pair
 *               (j, j + n_rot/2) by angle pos * theta^(-2j/n_rot) / ff[j]
 *   attention:  causal softmax(q.k) v over the cache plus this call's keys,
 *               scale 1.0, keys older than `window` hidden when window > 0,
 *               GQA: kv head = q head / (n_head / n_kv_head)
 *   geglu:      out = gelu_tanh(gate) * up
 *   scale:      x *= s[0] (a 1-element weight)
 *   softcap:    x = cap * tanh(x / cap)
 * The Gated DeltaNet hybrids' ops (Qwen3.5) are optional and described
 * where they are declared.
 *
 * Tensor parallelism (docs/tensor-parallel.md): a backend of `shards` > 1
 * splits each layer over that many devices. The model says how each weight
 * splits when it makes it resident (weight_split), and calls allreduce
 * where a row-split matmul left per-shard partial sums (after the
 * attention output and the FFN down projections); every other op keeps
 * its meaning above, whatever the shard count. */
#ifndef GEM_BACKEND_BACKEND_H
#define GEM_BACKEND_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "backend/device.h" /* the device queries: backend_devices, backend_describe, backend_peak_gbs */
#include "gguf/gguf.h"
#include "util/err.h"

typedef struct be_buf be_buf;
typedef struct be_weight be_weight;
typedef struct be_kv be_kv;
typedef struct backend backend;
typedef struct be_graph be_graph;

/* Entry type of one KV cache, chosen per cache (kv_new): a model may keep
 * its sliding rings in f32 and its context-long caches in f16
 * (gemma4_kvplan.h, --kv-type f16-full). */
typedef enum { BE_KV_F32, BE_KV_F16 } be_kv_type;

#define BE_TOPK_MAX 128

/* One op's device time (op_times): its label names the kernels and the
 * shape, so each stage of a step has its own row. */
typedef struct {
    char op[64];
    long calls;
    double seconds;
} be_op_time;

/* How a weight is dealt over the shards of a tensor-parallel backend
 * (weight_split). The split dimension is cut into `units` equal units
 * (attention heads, FFN rows, vocabulary rows), and shard s of G holds the
 * units be_shard_units gives it:
 *   BE_SPLIT_NONE: the whole weight on every shard (norms, scales);
 *   BE_SPLIT_OUT:  output rows (ne[1]): Wq/Wk/Wv by heads, gate/up by FFN
 *                  rows, the tied embedding and head by vocabulary; a
 *                  matmul's output is then split the same way;
 *   BE_SPLIT_IN:   input columns (ne[0]): Wo by heads, down by FFN rows; a
 *                  matmul reads the split input and leaves partial sums,
 *                  which allreduce adds up. */
typedef enum { BE_SPLIT_NONE, BE_SPLIT_OUT, BE_SPLIT_IN } be_split_kind;

typedef struct {
    be_split_kind kind;
    uint32_t units;
} be_split;

/* The units [*first, *first + *count) of `units` that shard s of G holds:
 * a contiguous G-th when G divides units; one unit when units divides G
 * (unit s / (G / units): each unit replicated on G / units shards, as the
 * KV heads of a layer with fewer KV heads than shards are); else -1. Query
 * heads dealt this way find their KV heads (GQA: q / (n_head / n_kv_head))
 * on their own shard whenever both counts are dealt by this rule. */
int be_shard_units(uint32_t units, int G, int s, uint32_t *first, uint32_t *count);

/* Rows a call may carry and still be row-exact (below). */
#define BE_EXACT_ROWS 16

struct backend {
    const char *name;     /* "cpu", "cpu-ref", "cuda" */
    /* Row-exact small tiles: for a call of n <= BE_EXACT_ROWS tokens, every
     * op gives each token's row bitwise what n calls of one token in order
     * give (matmul rows, norms, rope, attention with the earlier rows'
     * keys). Speculative verification relies on it: a verified token is
     * then exactly the token plain decoding would have produced, never a
     * near-tie flip. 0: the backend's multi-row kernels sum differently,
     * and MTP is refused on it. */
    int rows_exact;
    /* Tokens per prompt tile the engine uses unless told otherwise: a GPU
     * wants tiles large enough that each weight read from memory serves
     * hundreds of tokens; the CPU's caches want small ones. */
    int prompt_tile;
    /* kv_new takes BE_KV_F16 (every attention op then reads and writes
     * both entry types, caches of both types side by side). */
    int kv_f16;
    /* A batched step of sequences may be recorded (capture) and replayed
     * for other sequences: attention_seqs then reads the rows' caches from
     * set_step_seqs, not from its own arguments, when it replays. */
    int seqs_replay;
    /* Bytes of memory the backend may take beyond weights, KV caches and
     * the buffers the model allocates: its lazily grown scratch (quantized
     * activations, attention partials, graphs). Capacity checks add it to
     * the KV plan before anything is loaded; a stated bound, not a
     * measurement (the backend says how it was derived). */
    size_t work_reserve;
    /* Devices (shards) each layer is split over: 0 or 1 on a plain backend.
     * With more, weights are made resident through weight_split and
     * allreduce is set (docs/tensor-parallel.md). */
    int shards;
    void (*destroy)(backend *b);

    be_weight *(*weight)(backend *b, const gguf_tensor *t, gem_err *err);
    void (*weight_free)(backend *b, be_weight *w);
    /* Optional (NULL: weights stay views of the mapped file, as on the
     * CPU): bytes of memory `weight` takes for t as the device counts them
     * (its allocation granularity included), so that a model's resident
     * size is known before it is loaded. */
    uint64_t (*weight_bytes)(backend *b, const gguf_tensor *t);
    /* Optional (NULL on a backend of one shard: `weight` is the whole
     * story): t made resident dealt over the shards as `split` says
     * (be_split); NULL with err when the split does not divide
     * over the shards (units, quantization blocks). */
    be_weight *(*weight_split)(backend *b, const gguf_tensor *t, be_split split, gem_err *err);

    be_buf *(*alloc)(backend *b, size_t n_floats, gem_err *err);
    void (*buf_free)(backend *b, be_buf *x);
    void (*upload)(backend *b, be_buf *dst, size_t off, const float *src, size_t n);
    void (*download)(backend *b, const be_buf *src, size_t off, float *dst, size_t n);
    void (*copy)(backend *b, const be_buf *src, size_t src_off, be_buf *dst, size_t dst_off, size_t n);
    void (*sync)(backend *b);

    void (*embed)(backend *b, const be_weight *E, const int32_t *ids, int n, float scale, be_buf *out);
    void (*rmsnorm)(backend *b, const be_buf *x, const be_weight *w, int rows, int width, float eps, be_buf *out);
    void (*add_rmsnorm)(backend *b, be_buf *h, const be_buf *x, const be_weight *w, int rows, int width, float eps,
                        const be_weight *s);
    /* Optional (NULL: the model calls add_rmsnorm, then rmsnorm): h +=
     * rmsnorm(x) w (times s[0] when s), then out = rmsnorm(h) w_next, in
     * one pass over h (a residual add and the next norm). Results equal
     * the two calls'. */
    void (*add_rmsnorm_norm)(backend *b, be_buf *h, const be_buf *x, const be_weight *w, const be_weight *s,
                             const be_weight *w_next, int rows, int width, float eps, be_buf *out);
    void (*matmul)(backend *b, const be_weight *W, const be_buf *x, int n, be_buf *out);
    /* out[i] = W[i] x for `count` (<= 3) weights sharing one input (q, k, v):
     * one pass of the activations, and one launch on a GPU. */
    void (*matmul_multi)(backend *b, int count, const be_weight *const *W, const be_buf *x, int n, be_buf *const *out);
    /* out = gelu_tanh(Wgate x) * (Wup x): both projections and the gating
     * in one pass (no gate/up buffers on backends that fuse it). */
    void (*matmul_geglu)(backend *b, const be_weight *Wgate, const be_weight *Wup, const be_buf *x, int n, be_buf *out);
    void (*rope)(backend *b, be_buf *x, int n, int heads, int head_dim, int n_rot, int pos0, float theta,
                 const be_weight *freq_factors);
    void (*geglu)(backend *b, const be_buf *gate, const be_buf *up, size_t n, be_buf *out);
    /* rmsnorm of every head of x (n x heads x head_dim, weight w or none),
     * then rope on all head_dim dims: the q/k path of a layer in one op. */
    void (*rmsnorm_rope)(backend *b, be_buf *x, const be_weight *w, int n, int heads, int head_dim, float eps, int pos0,
                         float theta, const be_weight *freq_factors);
    /* Optional (NULL: three calls): rmsnorm_rope of q (weight qw, n_head
     * heads) and of k (kw, n_kv_head heads), and the weightless rmsnorm of
     * every v head, in one launch on a GPU; the same results. v_from_k (K
     * as V): v's input is k's raw rows, read before k is rewritten; v's
     * contents on entry are not read, and v must not alias k. */
    void (*qkv_norm_rope)(backend *b, be_buf *q, const be_weight *qw, be_buf *k, const be_weight *kw, be_buf *v,
                          int v_from_k, int n, int n_head, int n_kv_head, int head_dim, float eps, int pos0,
                          float theta, const be_weight *freq_factors);
    void (*scale)(backend *b, be_buf *x, size_t n, const be_weight *s);
    void (*softcap)(backend *b, be_buf *x, size_t n, float cap);

    /* ---- Gated DeltaNet hybrids (Qwen3.5, model/qwen35_run.h). Optional:
     * NULL on a backend without them, which such a model refuses by name.
     * Buffers are row-major as everywhere; the recurrent state buffers are
     * the model's (it allocates, checkpoints and restores them). ---- */
    /* Causal depthwise conv of kernel 4 (no bias) over n rows of ch
     * channels, then SiLU: out[t][c] = silu(sum_k w[c][k] xe[t + k][c]),
     * where xe is the 3 rows of `state` followed by x's n rows and w the
     * [4, ch] tensor (4 taps per channel). state (3 x ch) then holds the
     * last 3 rows of xe: the next call continues the sequence. out is not
     * x (a tile's outputs are written while other rows still read x). */
    void (*conv_silu)(backend *b, const be_buf *x, be_buf *state, const be_weight *w, int n, int ch, be_buf *out);
    /* In place, for each of n rows (stride floats apart) the first `heads`
     * heads of d values: x = x / sqrt(sum x^2 + eps). */
    void (*l2norm)(backend *b, be_buf *x, int n, int heads, int d, int stride, float eps);
    /* The gated delta rule over n tokens. Row t of qkv (stride
     * 2 n_k d + n_v d) holds q (n_k heads of d), k (n_k heads), v (n_v
     * heads), q and k already L2-normed; alpha and beta are n x n_v. V head
     * h reads QK head h % n_k (the converter's tiled order). Per token and
     * V head, with g = a[h] softplus(alpha + dt_bias[h]) (a = -exp(A_log),
     * as stored) and b = sigmoid(beta):
     *   S = exp(g) S;  S += k (b (v - S^T k))^T;  out = S^T q / sqrt(d)
     * S the head's d x d state (key index i, value index j), kept in
     * `state` (n_v x d x d floats) as S^T: element (i, j) at (h d + j) d + i.
     * out is n x n_v x d. A backend may evaluate a call of more than
     * BE_EXACT_ROWS tokens in the chunked form (the same rule, reassociated),
     * which the recurrence bounds within the tolerance it states. */
    void (*gated_delta)(backend *b, const be_buf *qkv, const be_buf *alpha, const be_buf *beta, const be_weight *a,
                        const be_weight *dt_bias, be_buf *state, int n, int n_k, int n_v, int d, be_buf *out);
    /* out[r] = rmsnorm(x[r]) * w * silu(z[r]) for rows of d (the GDN output
     * norm gated by z). */
    void (*rmsnorm_gated)(backend *b, const be_buf *x, const be_buf *z, const be_weight *w, int rows, int d, float eps,
                          be_buf *out);
    /* Gated attention: qg rows are `heads` blocks of [query d | gate d].
     * split_q copies the queries to q (n x heads x d); attn_gate then
     * multiplies the attention output x (n x heads x d) by sigmoid(gate). */
    void (*split_q)(backend *b, const be_buf *qg, int n, int heads, int d, be_buf *q);
    void (*attn_gate)(backend *b, be_buf *x, const be_buf *qg, int n, int heads, int d);
    /* out = silu(gate) * up (a SiLU-gated FFN's activation). */
    void (*swiglu)(backend *b, const be_buf *gate, const be_buf *up, size_t n, be_buf *out);
    /* x += y; and x *= s for a scale the model computes (1/sqrt(head_dim)). */
    void (*add)(backend *b, be_buf *x, const be_buf *y, size_t n);
    void (*scale_f)(backend *b, be_buf *x, size_t n, float s);

    /* Tensor parallelism (NULL on a backend of one shard): x's first n
     * floats hold per-shard partial sums (a matmul by a BE_SPLIT_IN
     * weight); afterwards every shard holds their sum, added in shard
     * order 0, 1, ..., G-1 (one fixed order: the result does not depend
     * on timing). */
    void (*allreduce)(backend *b, be_buf *x, size_t n);

    /* KV cache of one layer: `capacity` positions of n_kv_head x head_dim
     * keys and as many values, entries of `type`; a ring (slot = pos %
     * capacity) when ring is set (sliding layers), else linear. It holds
     * exactly kv_bytes(kv, capacity) bytes of entries (the KV plan,
     * gemma4_kvplan.h, counts on it). BE_KV_F16 only where kv_f16 says so;
     * otherwise NULL with err naming the type. */
    be_kv *(*kv_new)(backend *b, int n_kv_head, int head_dim, int capacity, int ring, be_kv_type type, gem_err *err);
    void (*kv_free)(backend *b, be_kv *kv);
    /* Attention of n queries at positions pos0.. over the cache (positions
     * < pos0) and this call's k/v, then stores k/v into the cache. */
    void (*attention)(backend *b, const be_buf *q, const be_buf *k, const be_buf *v, be_kv *kv, int n, int pos0,
                      int n_head, int n_kv_head, int head_dim, int window, be_buf *out);
    /* Optional (NULL: qkv_norm_rope, then attention): the two in one op,
     * taking both ops' arguments (each once); the same results.
     * On return q, k and v hold unspecified values (a backend may fold the
     * norms and rope into its attention kernel and leave the raw
     * projections there). */
    void (*attention_qkv)(backend *b, be_buf *q, const be_weight *qw, be_buf *k, const be_weight *kw, be_buf *v,
                          int v_from_k, be_kv *kv, int n, int pos0, int n_head, int n_kv_head, int head_dim, float eps,
                          float theta, const be_weight *freq_factors, int window, be_buf *out);
    /* Optional (NULL: no MTP drafting on this backend): attention of n
     * queries, all at position pos, over the cache's positions [pos -
     * window + 1, pos) (window > 0) or [0, pos), storing nothing: an MTP
     * drafter's Q-only attention over its target's cache (the reference
     * masks a key when pos - pos_k >= window, and the drafted token's own
     * position is not in the cache). Scale 1.0, GQA as in attention. With
     * no visible key (pos 0) the output is zero. */
    void (*attention_cached)(backend *b, const be_buf *q, const be_kv *kv, int n, int pos, int n_head, int n_kv_head,
                             int head_dim, int window, be_buf *out);
    /* Optional (NULL: the engine steps sessions one at a time): n <=
     * BE_EXACT_ROWS rows that are one-token steps of n different sequences
     * (a batched decode step of parallel sessions): row i of q/k/v (the
     * raw projections, as attention_qkv takes them) at position pos[i],
     * over and into kvs[i]. Each row's result is bitwise what
     * attention_qkv of that row alone (n = 1, pos0 = pos[i], kvs[i]) gives,
     * so a session's answer does not depend on what else runs. The kvs
     * are distinct. Before the tile's ops, set_step_seqs (when the backend
     * has set_step) gives the rows' ids and positions. */
    void (*attention_seqs)(backend *b, be_buf *q, const be_weight *qw, be_buf *k, const be_weight *kw, be_buf *v,
                           int v_from_k, be_kv *const *kvs, const int *pos, int n, int n_head, int n_kv_head,
                           int head_dim, float eps, float theta, const be_weight *freq_factors, int window,
                           be_buf *out);
    /* Checkpoints: the cache's bytes for positions [0, n_pos) as a host blob. */
    size_t (*kv_bytes)(backend *b, const be_kv *kv, int n_pos);
    void (*kv_save)(backend *b, const be_kv *kv, int n_pos, void *dst);
    void (*kv_load)(backend *b, be_kv *kv, int n_pos, const void *src);
    /* The same bytes as kv_save/kv_load, to or from a backend buffer at byte
     * offset off (a multiple of 4; dst from alloc, big enough), enqueued
     * in order like any op: a session checkpoint without a host round trip
     * (on a GPU, a device-to-device copy). */
    void (*kv_stash)(backend *b, const be_kv *kv, int n_pos, be_buf *dst, size_t off);
    void (*kv_unstash)(backend *b, be_kv *kv, int n_pos, const be_buf *src, size_t off);

    /* out[r] = index of the largest value of row r of x (rows x width), the
     * lowest index among equals, stored as a float (exact below 2^24). Lets
     * greedy decoding read back one number instead of the vocabulary. */
    void (*argmax)(backend *b, const be_buf *x, int rows, int width, be_buf *out);
    /* Optional (NULL: the caller reads the row back): argmax of one row of
     * x (out[0], as argmax) and the softmax probability of that largest
     * value, 1 / sum exp(x - max) (out[1], f32 accuracy): an MTP drafter's
     * confidence without reading back the vocabulary. */
    void (*argmax_prob)(backend *b, const be_buf *x, int width, be_buf *out);
    /* Optional: the k (1..BE_TOPK_MAX) largest values of x (one row of
     * width values) in the sampler's order (value descending, then index
     * ascending): out[0..k) the values, out[k..2k) their indices as floats.
     * Sampling with top-k then reads back 2k numbers, not the vocabulary. */
    void (*topk)(backend *b, const be_buf *x, int width, int k, be_buf *out);

    /* Step parameters: called before the ops of each forward tile with the
     * tile's token ids and first position. The ops still receive the same
     * ids/pos0 as arguments; a backend that replays recorded steps reads
     * them from here instead, so one recording serves every position. */
    void (*set_step)(backend *b, const int32_t *ids, int n, int pos0);
    /* As set_step for a tile of one-token steps of n sequences (row i at
     * pos[i]: attention_seqs); required with set_step and attention_seqs.
     * kvs[i * nkv + l]: row i's cache for the l-th attention_seqs call of
     * the tile (its layers in order), which a replay reads. */
    void (*set_step_seqs)(backend *b, const int32_t *ids, const int *pos, int n, be_kv *const *kvs, int nkv);
    /* Optional (NULL when unsupported): run fn once (its ops take effect, as
     * for a direct call) and record the ops it enqueues (no host round trips
     * inside) as a graph; replay runs them again for the latest set_step.
     * fn must be repeatable: the same step parameters give the same state.
     * replay returns -1 when the graph no longer matches the backend's
     * buffers (a scratch buffer grew): free it and capture again. */
    be_graph *(*capture)(backend *b, void (*fn)(void *ctx), void *ctx, gem_err *err);
    int (*replay)(backend *b, be_graph *g);
    void (*graph_free)(backend *b, be_graph *g);

    /* Optional (NULL: none on this backend): per-op device times (gem
     * profile). While on, every op waits for the device and adds the
     * device time from its first launch to its last to its label's row,
     * and nothing is recorded or replayed (capture reads NULL meanwhile):
     * the ops run alone, without a replay's overlapping launches, and give
     * the same results (the same kernels). op_times copies up to cap rows
     * in first-use order, emptying the table when clear; returns the
     * rows copied. */
    void (*op_timing)(backend *b, int on);
    int (*op_times)(backend *b, be_op_time *rows, int cap, int clear);

    /* 0, or -1 with the first device error since creation (asynchronous
     * failures surface here; after one, results are undefined). */
    int (*status)(backend *b, gem_err *err);

    /* Optional (NULL on host backends): bytes of device memory taken since
     * the backend was created (weights, caches, scratch). Buffers only grow
     * during a run, so the value at the end of a run is its peak. */
    size_t (*mem_used)(backend *b);
    /* Optional (NULL on host backends): bytes of device memory free now.
     * Lets optional allocations (checkpoints) leave the backend's own
     * lazily grown working memory room. */
    size_t (*mem_free)(backend *b);
};

typedef struct {
    int threads;    /* 0: all online CPUs */
    int reference;  /* CPU: the scalar reference path (the oracle) */
    /* Reproduce llama.cpp's CPU GELU, which looks gelu up in a table indexed
     * by the fp16-rounded input and rounds the result to fp16 (ggml-cpu
     * vec.h, GGML_GELU_FP16). Off by default: the model is defined with the
     * exact tanh GELU (transformers computes it in f32). On, greedy runs can
     * be compared token for token with the reference. */
    int gelu_fp16;
    /* Tensor parallelism: split each layer over this many shards (0 or 1:
     * none). On "cpu" the shards are in-process CPU backends sharing the
     * machine (the sharded arithmetic, testable anywhere); "cuda" would
     * put one per GPU (not in this build: refused by name). */
    int shards;
} backend_opts;

/* Creates a backend by name ("cpu", "cuda"); NULL with a reason when
 * unavailable (never a silent fallback to another backend). */
backend *backend_create(const char *name, const backend_opts *o, gem_err *err);

/* Runs fn(ctx) as a recorded graph kept in *g: replayed when *g still
 * matches the backend's buffers, else (re)captured, which runs fn too;
 * a backend without capture just calls fn. fn must be repeatable (see
 * capture). -1 with err when recording fails (*g is then NULL). */
int backend_run_recorded(backend *b, be_graph **g, void (*fn)(void *ctx), void *ctx, gem_err *err);

#endif
