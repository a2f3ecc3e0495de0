/* The CUDA backend's ops, one entry point per seam function (backend.h
 * says what each computes), defined in files by op family and put into
 * the seam's table by cuda_backend.cu; also the families' start-up calls
 * that raise kernels' shared-memory limits. Internal to src/backend/cuda
 * (state, invariants and shared helpers: cuda_common.h).
 *
 * Every entry point enqueues on the backend's stream and returns: results
 * are the device buffers', failures the backend's sticky error (status()). */
#ifndef GEM_BACKEND_CUDA_OPS_H
#define GEM_BACKEND_CUDA_OPS_H

#include "backend/cuda/cuda_common.h"

/* cuda_elementwise.cu: embed, geglu, scale, softcap */
void cu_embed(backend *b, const be_weight *E, const int32_t *ids, int n, float scale, be_buf *out);
void cu_geglu(backend *b, const be_buf *gate, const be_buf *up, size_t n, be_buf *out);
void cu_scale(backend *b, be_buf *x, size_t n, const be_weight *s);
void cu_softcap(backend *b, be_buf *x, size_t n, float cap);

/* cuda_hybrid.cu: the Gated DeltaNet hybrids' ops (backend.h) */
void cu_conv_silu(backend *b, const be_buf *x, be_buf *state, const be_weight *w, int n, int ch, be_buf *out);
void cu_l2norm(backend *b, be_buf *x, int n, int heads, int d, int stride, float eps);
void cu_gated_delta(backend *b, const be_buf *qkv, const be_buf *alpha, const be_buf *beta, const be_weight *a,
                    const be_weight *dt_bias, be_buf *state, int n, int n_k, int n_v, int d, be_buf *out);
void cu_rmsnorm_gated(backend *b, const be_buf *x, const be_buf *z, const be_weight *w, int rows, int d, float eps,
                      be_buf *out);
void cu_split_q(backend *b, const be_buf *qg, int n, int heads, int d, be_buf *q);
void cu_attn_gate(backend *b, be_buf *x, const be_buf *qg, int n, int heads, int d);
void cu_swiglu(backend *b, const be_buf *gate, const be_buf *up, size_t n, be_buf *out);
void cu_add(backend *b, be_buf *x, const be_buf *y, size_t n);
void cu_scale_f(backend *b, be_buf *x, size_t n, float s);

/* cuda_norm.cu: rmsnorm, add_rmsnorm, add_rmsnorm_norm */
void cu_rmsnorm(backend *b, const be_buf *x, const be_weight *w, int rows, int width, float eps, be_buf *out);
void cu_add_rmsnorm(backend *b, be_buf *h, const be_buf *x, const be_weight *w, int rows, int width, float eps,
                    const be_weight *s);
void cu_add_rmsnorm_norm(backend *b, be_buf *h, const be_buf *x, const be_weight *w, const be_weight *s,
                         const be_weight *w_next, int rows, int width, float eps, be_buf *out);

/* cuda_rope.cu: rope, rmsnorm_rope, qkv_norm_rope */
void cu_rope(backend *b, be_buf *x, int n, int heads, int d, int n_rot, int pos0, float base, const be_weight *ff);
void cu_rmsnorm_rope(backend *b, be_buf *x, const be_weight *w, int n, int heads, int d, float eps, int pos0,
                     float base, const be_weight *ff);
void cu_qkv_norm_rope(backend *b, be_buf *q, const be_weight *qw, be_buf *k, const be_weight *kw, be_buf *v,
                      int v_from_k, int n, int n_head, int n_kv_head, int d, float eps, int pos0, float base,
                      const be_weight *ff);

/* cuda_matmul_k.cu: products of k-quant weights (q4_k, q5_k, q6_k in
 * their own blocks) for any token count, and q6_k's load-time repacking */
int kq_format(int fmt);
void kq_run(cuda_backend *c, int count, const be_weight *const *W, const be_buf *x, int n, be_buf *const *outs,
            int pair);
__global__ void k_repack_q6_k(const uint8_t *raw, int64_t nblk, uint8_t *q, __half *d);
/* W expanded to f16 times W->hexp, each 32-value block's 32 values in
 * k_mm_w's fragment order (k_mm_w<MMW_F16>), into out (ne1 * ne0 values) */
void kq_f16(cuda_backend *c, const be_weight *W, __half *out);
/* 2^we for a k-quant tensor's f16 products (be_weight.hexp; 0: a scale is
 * inf or NaN), from its blocks as stored in the file */
float kq_hexp(uint32_t type, const uint8_t *data, int64_t nblk);

/* cuda_matmul.cu: matmul, matmul_multi, matmul_geglu */
void cu_matmul(backend *b, const be_weight *W, const be_buf *x, int n, be_buf *out);
void cu_matmul_multi(backend *b, int count, const be_weight *const *W, const be_buf *x, int n, be_buf *const *out);
void cu_matmul_geglu(backend *b, const be_weight *Wg, const be_weight *Wu, const be_buf *x, int n, be_buf *out);
cudaError_t mmh_allow(void); /* shared-memory limits of the product kernels */

/* cuda_attn_decode.cu: attention, attention_qkv (both files' kernels) */
void cu_attention(backend *b, const be_buf *q, const be_buf *k, const be_buf *v, be_kv *kv, int n, int pos0,
                  int n_head, int n_kv_head, int d, int window, be_buf *out);
void cu_attention_qkv(backend *b, be_buf *q, const be_weight *qw, be_buf *k, const be_weight *kw, be_buf *v,
                      int v_from_k, be_kv *kv, int n, int pos0, int n_head, int n_kv_head, int d, float eps,
                      float theta, const be_weight *ff, int window, be_buf *out);
void cu_attention_seqs(backend *b, be_buf *q, const be_weight *qw, be_buf *k, const be_weight *kw, be_buf *v,
                       int v_from_k, be_kv *const *kvs, const int *pos, int n, int n_head, int n_kv_head, int d,
                       float eps, float theta, const be_weight *ff, int window, be_buf *out);
cudaError_t attn_allow_all(void); /* shared-memory limits of the attention kernels */
void cu_attention_cached(backend *b, const be_buf *q, const be_kv *kv, int n, int pos, int n_head, int n_kv_head,
                         int d, int window, be_buf *out);

/* cuda_attn_prefill.cu: the KV caches */
be_kv *cu_kv_new(backend *b, int n_kv_head, int d, int capacity, int ring, be_kv_type type, gem_err *err);
void cu_kv_free(backend *b, be_kv *kv);
size_t cu_kv_bytes(backend *b, const be_kv *kv, int n_pos);
void cu_kv_save(backend *b, const be_kv *kv, int n_pos, void *dst);
void cu_kv_load(backend *b, be_kv *kv, int n_pos, const void *src);

/* cuda_topk.cu: argmax, topk */
void cu_argmax(backend *b, const be_buf *x, int rows, int width, be_buf *out);
void cu_argmax_prob(backend *b, const be_buf *x, int width, be_buf *out);
void cu_topk(backend *b, const be_buf *x, int width, int k, be_buf *out);
cudaError_t topk_allow(void); /* shared-memory limit of the final top-k block */
cudaError_t gdn_allow(void);  /* shared-memory limits of the chunked delta rule */

#endif
