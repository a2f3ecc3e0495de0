/* The shared harness of cuda_ops (see ops_harness.h): the random inputs,
 * the backends under test, weight tensors, buffers, the comparison and
 * the check counters of every ops_*.c file. */
#include "ops_harness.h"

int test_passed, test_failed; /* test.h's counters, one pair for the binary */

static uint64_t rng = 0x2545F4914F6CDD1Dull;
float frand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}
uint8_t brand(void) { return (uint8_t)(frand() * 127.0f + 128.0f); }

backend *cpu_ref, *cpu_fast, *gpu;
backend *gpu_f16; /* caches in f16 (--kv-type f16): kv_make's type for it */
backend *gpu_split, *gpu_split_f16, *gpu_reg, *gpu_reg_f16, *gpu_staged_f16;

/* GEM_CUDA_MMA=0 keeps prefill on the f32-exact kernels (dp4a products,
 * f32 attention); otherwise prefill tiles use the tensor cores. */
int mma_on(void) {
    const char *e = getenv("GEM_CUDA_MMA");
    return !(e && !strcmp(e, "0"));
}


tensor make_tensor(uint32_t type, int64_t cols, int64_t rows) {
    tensor x;
    memset(&x, 0, sizeof x);
    uint64_t rb = 0;
    quant_row_bytes(type, cols, &rb);
    x.data = malloc(rb * (size_t)rows);
    x.deq = malloc(sizeof(float) * (size_t)(cols * rows));
    const uint32_t bs = quant_block_size(type), ts = quant_type_size(type);
    for (int64_t r = 0; r < rows; r++) {
        uint8_t *row = x.data + rb * (size_t)r;
        if (type == QT_F32) {
            for (int64_t i = 0; i < cols; i++) ((float *)row)[i] = frand();
        } else if (type == QT_F16 || type == QT_BF16) {
            for (int64_t i = 0; i < cols; i++) {
                uint16_t h = type == QT_F16 ? quant_f32_to_f16(frand()) : quant_f32_to_bf16(frand());
                memcpy(row + 2 * i, &h, 2);
            }
        } else {
            for (int64_t b = 0; b < cols / bs; b++) {
                uint8_t *blk = row + b * ts;
                for (uint32_t k = 0; k < ts; k++) blk[k] = brand();
                uint16_t d = quant_f32_to_f16(0.01f + 0.02f * fabsf(frand()));
                if (type == QT_Q6_K) memcpy(blk + ts - 2, &d, 2); /* d is the block's last field */
                else memcpy(blk, &d, 2);
                if (type == QT_Q4_K || type == QT_Q5_K) { /* dmin follows d */
                    const uint16_t dm = quant_f32_to_f16(0.005f + 0.01f * fabsf(frand()));
                    memcpy(blk + 2, &dm, 2);
                }
            }
        }
        quant_dequant_row(type, row, x.deq + cols * r, cols);
    }
    x.t.name = "test";
    x.t.n_dims = rows > 1 ? 2 : 1;
    x.t.ne[0] = (uint64_t)cols;
    x.t.ne[1] = (uint64_t)rows;
    x.t.ne[2] = x.t.ne[3] = 1;
    x.t.type = type;
    x.t.n_elems = (uint64_t)(cols * rows);
    x.t.n_bytes = rb * (uint64_t)rows;
    x.t.data = x.data;
    return x;
}

/* Row o of W times token i of x ([n][K]): returns sum |w x| (the scale of
 * f32 and f16 rounding errors); *bound8, when given, receives the error
 * bound of 8-bit activation codes, sum over 32-value blocks of
 * sum |w| max |x| / 254 (with a 1e-4 margin for its own rounding). */
double row_mag(const tensor *W, const float *x, int64_t K, int i, int64_t o, double *bound8) {
    return row_mag_blocks(W, x, K, i, o, 32, bound8);
}

double row_mag_blocks(const tensor *W, const float *x, int64_t K, int i, int64_t o, int bs, double *bound8) {
    double mag = 0, bound = 0;
    for (int64_t b = 0; b < K / bs; b++) {
        double sw = 0, amax = 0;
        for (int k = 0; k < bs; k++) {
            const double wv = W->deq[o * K + b * bs + k], xv = x[(size_t)i * K + b * bs + k];
            mag += fabs(wv * xv);
            sw += fabs(wv);
            amax = fmax(amax, fabs(xv));
        }
        bound += sw * amax / 254.0 * 1.0001;
    }
    if (bound8) *bound8 = bound;
    return mag;
}

void free_tensor(tensor *x) {
    free(x->data);
    free(x->deq);
}

float *rand_vec(size_t n, float scale) {
    float *v = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) v[i] = frand() * scale;
    return v;
}

/* A buffer on backend b holding v (or poison when v is NULL). */
be_buf *put(backend *b, const float *v, size_t n) {
    gem_err err;
    be_buf *x = b->alloc(b, n, &err);
    float *poison = NULL;
    if (!v) {
        poison = malloc(sizeof(float) * n);
        for (size_t i = 0; i < n; i++) poison[i] = NAN;
        v = poison;
    }
    b->upload(b, x, 0, v, n);
    free(poison);
    return x;
}

float *get(backend *b, be_buf *x, size_t n) {
    float *v = malloc(sizeof(float) * n);
    b->download(b, x, 0, v, n);
    return v;
}

/* max |a - b| / (abs_tol + rel * |b|) <= 1, NaN fails */
int close_enough(const char *what, const float *a, const float *b, size_t n, double rel, double abs_tol) {
    double worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        double e = a[i] == b[i] ? 0 : fabs((double)a[i] - b[i]) / (abs_tol + rel * fabs(b[i]));
        if (!(e <= worst)) {
            worst = isnan(e) ? INFINITY : e;
            at = i;
        }
    }
    if (worst > 1) fprintf(stderr, "%s: element %zu: %.9g vs %.9g\n", what, at, a[at], b[at]);
    return worst <= 1;
}

void step_both(const int32_t *ids, int n, int pos0) {
    if (cpu_ref->set_step) cpu_ref->set_step(cpu_ref, ids, n, pos0);
    gpu->set_step(gpu, ids, n, pos0);
}

double seconds_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* A CUDA backend created with VAR=VALUE set (the GEM_CUDA_* variables are
 * read when a backend is created), the variable unset again. */
backend *variant(const char *var, const char *value, const backend_opts *o) {
    gem_err err;
    setenv(var, value, 1);
    backend *b = backend_create("cuda", o, &err);
    unsetenv(var);
    CHECKF(b != NULL, "variant backend %s=%s: %s", var, value, err.msg);
    return b;
}

backend *variant_f16(const char *var, const char *value, const backend_opts *o) {
    backend *b = variant(var, value, o);
    if (b) mark_f16(b);
    return b;
}

/* The backends whose caches under test are f16. */
static backend *f16_set[32];

void mark_f16(backend *b) {
    for (int i = 0; i < 32; i++)
        if (!f16_set[i]) {
            f16_set[i] = b;
            return;
        }
    CHECKF(0, "mark_f16: more than 32 f16 backends");
}

void unmark_f16(backend *b) {
    for (int i = 0; i < 32; i++)
        if (f16_set[i] == b) f16_set[i] = NULL;
}

be_kv *kv_make(backend *b, int n_kv_head, int head_dim, int capacity, int ring, gem_err *err) {
    int f16 = 0;
    for (int i = 0; i < 32; i++) f16 |= b && f16_set[i] == b;
    return b->kv_new(b, n_kv_head, head_dim, capacity, ring, f16 ? BE_KV_F16 : BE_KV_F32, err);
}

/* A variant's sticky error state is clean after its tests; then it goes. */
void variant_done(backend *b) {
    gem_err err;
    if (!b) return;
    unmark_f16(b);
    CHECKF(b->status(b, &err) == 0, "%s", err.msg);
    b->destroy(b);
}

/* A line on stderr as each group of checks ends (its checks so far and its
 * seconds): a run cut short by a time limit shows how far it came. */
void progress(const char *group) {
    static struct timespec last;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (last.tv_sec)
        fprintf(stderr, "cuda_ops: %s done (%d passed, %d failed, %.1f s)\n", group, test_passed, test_failed,
                (double)(now.tv_sec - last.tv_sec) + 1e-9 * (double)(now.tv_nsec - last.tv_nsec));
    last = now;
}
