/* Gated DeltaNet kernels (see hybrid.h). */
#include "backend/cpu/hybrid.h"

#include <math.h>
#include <string.h>

float hyb_silu(float x) { return x / (1.0f + expf(-x)); }
float hyb_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
float hyb_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

void hyb_conv_silu(const float *x, float *state, const float *w, int n, int ch, int c0, int c1, float *out) {
    const int K = HYB_CONV_K;
    for (int c = c0; c < c1; c++) {
        /* the channel's window: the 3 carried inputs, then each new one */
        float win[HYB_CONV_K];
        for (int k = 0; k < K - 1; k++) win[k] = state[(size_t)k * ch + c];
        const float *wc = w + (size_t)c * K;
        for (int t = 0; t < n; t++) {
            win[K - 1] = x[(size_t)t * ch + c];
            float acc = 0;
            for (int k = 0; k < K; k++) acc += wc[k] * win[k];
            out[(size_t)t * ch + c] = hyb_silu(acc);
            for (int k = 0; k < K - 1; k++) win[k] = win[k + 1];
        }
        for (int k = 0; k < K - 1; k++) state[(size_t)k * ch + c] = win[k];
    }
}

/* Token t's gates for V head h: the log-decay g and the write strength. */
static void gates(const hyb_gdn *j, int t, int h, float *g, float *beta) {
    *g = j->a[h] * hyb_softplus(j->alpha[(size_t)t * j->n_v + h] + j->dt[h]);
    *beta = hyb_sigmoid(j->beta[(size_t)t * j->n_v + h]);
}

static size_t row_stride(const hyb_gdn *j) { return (size_t)(2 * j->n_k + j->n_v) * j->d; }
static const float *q_of(const hyb_gdn *j, int t, int h) {
    return j->qkv + (size_t)t * row_stride(j) + (size_t)(h % j->n_k) * j->d;
}
static const float *k_of(const hyb_gdn *j, int t, int h) {
    return j->qkv + (size_t)t * row_stride(j) + (size_t)(j->n_k + h % j->n_k) * j->d;
}
static const float *v_of(const hyb_gdn *j, int t, int h) {
    return j->qkv + (size_t)t * row_stride(j) + (size_t)(2 * j->n_k + h) * j->d;
}

void hyb_gdn_recurrent(const hyb_gdn *j, int h) {
    const int d = j->d;
    const float scale = 1.0f / sqrtf((float)d);
    float *S = j->state + (size_t)h * d * d; /* S^T: row jv is value column jv over keys */
    for (int t = 0; t < j->n; t++) {
        float g, beta;
        gates(j, t, h, &g, &beta);
        const float eg = expf(g);
        const float *q = q_of(j, t, h), *k = k_of(j, t, h), *v = v_of(j, t, h);
        float *o = j->out + ((size_t)t * j->n_v + h) * d;
        /* one pass per value column: decay, read, correct, write, output */
        for (int jv = 0; jv < d; jv++) {
            float *row = S + (size_t)jv * d;
            for (int i = 0; i < d; i++) row[i] *= eg;
            const float kv = j->dot(row, k, d);
            j->axpy(row, beta * (v[jv] - kv), k, d);
            o[jv] = j->dot(row, q, d) * scale;
        }
    }
}

size_t hyb_gdn_scratch(int d) {
    const size_t C = HYB_CHUNK;
    return 2 * C + 2 * C * C + 3 * C * (size_t)d;
}

/* Per chunk of L tokens with the state S0 before it (G the cumulative
 * log-decay inside the chunk, b the write strengths):
 *   A[r][s] = b_r exp(G_r - G_s) k_r.k_s  (s < r)
 *   U = (I + A)^-1 (b v),  W = (I + A)^-1 (b exp(G) k)   (forward substitution)
 *   u = U - W S0
 *   O_r = (exp(G_r) q_r S0 + sum_{s<=r} exp(G_r - G_s) (q_r.k_s) u_s) / sqrt(d)
 *   S  = exp(G_L) S0 + sum_s exp(G_L - G_s) k_s u_s^T
 * Every exponent is of a difference G_r - G_s <= 0 or of G_r <= 0, so
 * nothing overflows however strong the decay. The result is the
 * recurrence's up to f32 rounding of the reassociated sums. */
void hyb_gdn_chunked(const hyb_gdn *j, int h, float *scratch) {
    const int d = j->d, C = HYB_CHUNK;
    const float scale = 1.0f / sqrtf((float)d);
    float *S = j->state + (size_t)h * d * d;
    float *G = scratch, *B = G + C, *A = B + C, *QK = A + (size_t)C * C, *U = QK + (size_t)C * C;
    float *W = U + (size_t)C * d, *u = W + (size_t)C * d;
    for (int t0 = 0; t0 < j->n; t0 += C) {
        const int L = j->n - t0 < C ? j->n - t0 : C;
        float acc = 0;
        for (int r = 0; r < L; r++) {
            float g;
            gates(j, t0 + r, h, &g, &B[r]);
            acc += g;
            G[r] = acc;
        }
        for (int r = 0; r < L; r++) {
            const float *kr = k_of(j, t0 + r, h), *qr = q_of(j, t0 + r, h);
            for (int s = 0; s < r; s++)
                A[(size_t)r * C + s] = B[r] * expf(G[r] - G[s]) * j->dot(kr, k_of(j, t0 + s, h), d);
            for (int s = 0; s <= r; s++) QK[(size_t)r * C + s] = expf(G[r] - G[s]) * j->dot(qr, k_of(j, t0 + s, h), d);
        }
        /* U and W by forward substitution */
        for (int r = 0; r < L; r++) {
            float *Ur = U + (size_t)r * d, *Wr = W + (size_t)r * d;
            const float *vr = v_of(j, t0 + r, h), *kr = k_of(j, t0 + r, h);
            const float ew = B[r] * expf(G[r]);
            for (int e = 0; e < d; e++) {
                Ur[e] = B[r] * vr[e];
                Wr[e] = ew * kr[e];
            }
            for (int s = 0; s < r; s++) {
                const float a = -A[(size_t)r * C + s];
                j->axpy(Ur, a, U + (size_t)s * d, d);
                j->axpy(Wr, a, W + (size_t)s * d, d);
            }
        }
        /* u = U - W S0 and the outputs' inter-chunk part, a value column
         * of S0 at a time (S is stored by value column) */
        for (int r = 0; r < L; r++) {
            float *o = j->out + ((size_t)(t0 + r) * j->n_v + h) * d;
            const float *qr = q_of(j, t0 + r, h);
            const float eg = expf(G[r]);
            for (int jv = 0; jv < d; jv++) {
                const float *Sj = S + (size_t)jv * d;
                u[(size_t)r * d + jv] = U[(size_t)r * d + jv] - j->dot(W + (size_t)r * d, Sj, d);
                o[jv] = eg * j->dot(qr, Sj, d);
            }
        }
        /* the intra-chunk part */
        for (int r = 0; r < L; r++) {
            float *o = j->out + ((size_t)(t0 + r) * j->n_v + h) * d;
            for (int s = 0; s <= r; s++) j->axpy(o, QK[(size_t)r * C + s], u + (size_t)s * d, d);
            for (int e = 0; e < d; e++) o[e] *= scale;
        }
        /* the state after the chunk */
        const float eL = expf(G[L - 1]);
        for (int jv = 0; jv < d; jv++) {
            float *Sj = S + (size_t)jv * d;
            for (int i = 0; i < d; i++) Sj[i] *= eL;
            for (int s = 0; s < L; s++)
                j->axpy(Sj, expf(G[L - 1] - G[s]) * u[(size_t)s * d + jv], k_of(j, t0 + s, h), d);
        }
    }
}
