/* Model quantization (see quantize.h).
 *
 * Three passes over the tensor table: sort it the way the reference's
 * loader orders weights, pick each tensor's type (the reference's rules,
 * including its per-category counters, which advance in that sorted order),
 * then stream the data: every tensor is processed in chunks of rows, each
 * chunk split over worker threads that check the input rows, convert them to
 * f32, quantize and check the result; chunks are written in order, so the
 * bytes do not depend on the split. Only the rules that can fire for the
 * supported file types are reproduced; anything that would need a type gem
 * cannot produce is refused by name rather than approximated. */
#include "convert/quantize.h"

#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "gguf/gguf_write.h"
#include "model/gemma4.h"
#include "model/qwen35.h"
#include "quant/quant.h"
#include "quant/quantize.h"
#include "util/file.h"

#define CHUNK_ELEMS (8u << 20) /* f32 values per chunk: 32 MiB of scratch */
#define MAX_THREADS 64
#define QUANT_VERSION 2        /* GGML_QNT_VERSION of the reference */

/* The reference's file-type codes (llama.h llama_ftype) gem can write. */
enum { FT_Q4_0 = 2, FT_Q8_0 = 7, FT_Q4_K_S = 14, FT_Q4_K_M = 15, FT_Q5_K_S = 16, FT_Q5_K_M = 17, FT_Q6_K = 18 };

/* --type names, as llama-quantize spells them (case-insensitive): "q4_k"
 * and "q5_k" are its aliases of the _M mixes. */
static const struct {
    const char *name;
    int ftype;
    uint32_t type; /* the file type's default tensor type */
} ftypes[] = {
    {"q8_0", FT_Q8_0, QT_Q8_0},     {"q4_0", FT_Q4_0, QT_Q4_0},     {"q4_k", FT_Q4_K_M, QT_Q4_K},
    {"q4_k_m", FT_Q4_K_M, QT_Q4_K}, {"q4_k_s", FT_Q4_K_S, QT_Q4_K}, {"q5_k", FT_Q5_K_M, QT_Q5_K},
    {"q5_k_m", FT_Q5_K_M, QT_Q5_K}, {"q5_k_s", FT_Q5_K_S, QT_Q5_K}, {"q6_k", FT_Q6_K, QT_Q6_K},
};

static int ieq(const char *a, const char *b) {
    while (*a && *b && tolower((unsigned char)*a) == tolower((unsigned char)*b)) a++, b++;
    return !*a && !*b;
}

int gem_quantize_ftype(const char *type) {
    for (size_t i = 0; i < sizeof ftypes / sizeof ftypes[0]; i++)
        if (ieq(type, ftypes[i].name)) return ftypes[i].ftype;
    return -1;
}

static uint32_t ftype_default(int ftype) {
    for (size_t i = 0; i < sizeof ftypes / sizeof ftypes[0]; i++)
        if (ftypes[i].ftype == ftype) return ftypes[i].type;
    return QT_COUNT;
}

/* ---- tensor order: the reference's weight map sorts by layer, then name ---- */

typedef struct {
    const gguf_tensor *t;
    int layer;       /* from "blk.%d.", -1 otherwise */
    uint32_t n_dims; /* trailing dimensions of 1 dropped, as ggml_n_dims does */
    uint32_t new_type;
} item;

static int cmp_items(const void *pa, const void *pb) {
    const item *a = pa, *b = pb;
    if (a->layer != b->layer) return a->layer < b->layer ? -1 : 1;
    return strcmp(a->t->name, b->t->name);
}

/* ---- type selection ---- */

typedef enum {
    CAT_TOKEN_EMBD, CAT_ATTN_Q, CAT_ATTN_V, CAT_ATTN_K, CAT_ATTN_QKV, CAT_ATTN_KV_B, CAT_ATTN_OUTPUT,
    CAT_FFN_UP, CAT_FFN_GATE, CAT_FFN_DOWN, CAT_OUTPUT, CAT_OTHER
} category;

static category categorize(const char *n) {
    if (!strcmp(n, "output.weight")) return CAT_OUTPUT;
    if (!strcmp(n, "token_embd.weight") || !strcmp(n, "per_layer_token_embd.weight")) return CAT_TOKEN_EMBD;
    if (strstr(n, "attn_qkv.weight")) return CAT_ATTN_QKV;
    if (strstr(n, "attn_kv_b.weight")) return CAT_ATTN_KV_B;
    if (strstr(n, "attn_v.weight")) return CAT_ATTN_V;
    if (strstr(n, "attn_k.weight")) return CAT_ATTN_K;
    if (strstr(n, "attn_q.weight")) return CAT_ATTN_Q;
    if (strstr(n, "attn_output.weight")) return CAT_ATTN_OUTPUT;
    if (strstr(n, "ffn_up")) return CAT_FFN_UP;
    if (strstr(n, "ffn_gate")) return CAT_FFN_GATE;
    if (strstr(n, "ffn_down")) return CAT_FFN_DOWN;
    return CAT_OTHER;
}

static int is_attn_v(category c) { return c == CAT_ATTN_V || c == CAT_ATTN_QKV || c == CAT_ATTN_KV_B; }

/* Name fragments the reference never quantizes (norms, routers, small
 * convolution and positional tensors of other architectures). */
static const char *const keep_fragments[] = {
    "_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel",
    "per_layer_model_proj", "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight",
    "indexer.q_proj.weight", "time_mix_first.weight", "time_mix_w0.weight", "time_mix_w1.weight",
    "time_mix_w2.weight", "time_mix_v0.weight", "time_mix_v1.weight", "time_mix_v2.weight",
    "time_mix_a0.weight", "time_mix_a1.weight", "time_mix_a2.weight", "time_mix_g1.weight",
    "time_mix_g2.weight", "time_mix_decay_w1.weight", "time_mix_decay_w2.weight",
    "time_mix_lerp_fused.weight", "attn_rel_b.weight", ".position_embd", "sam.pos_embd", "sam.neck.",
    "sam.net_", ".rel_pos", ".patch_embd", ".patch_merger", "a.rvq.codebook", "mm.a.code_embd",
};

static int allows_quantization(const item *it) {
    if (it->n_dims < 2) return 0;
    const char *n = it->t->name;
    size_t len = strlen(n);
    /* "ends with weight", written as the reference's rfind test, which a
     * five-character name also passes (size - 6 wraps to npos) */
    int q = len >= 6 ? !strcmp(n + len - 6, "weight") : len == 5;
    for (size_t i = 0; q && i < sizeof keep_fragments / sizeof keep_fragments[0]; i++)
        if (strstr(n, keep_fragments[i])) q = 0;
    if (!strcmp(n, "position_embd.weight") || !strcmp(n, "token_types.weight")) q = 0;
    return q;
}

typedef struct {
    int ftype;
    uint32_t def;
    int embd_type;
    int tied;       /* no output.weight: the token embedding is the output head */
    int n_attn_v, i_attn_v;
    int n_layer, i_ffn_down;
} selector;


/* The reference's per-tensor choice (llama_tensor_get_type_impl) for the
 * file types gem offers, on a dense model without an importance matrix:
 *   - the output head (output.weight, or a tied token_embd.weight /
 *     per_layer_token_embd.weight when there is no output.weight): q6_k
 *     for every type but q8_0, which keeps q8_0; q8_0 too when the row is
 *     not a whole block of the default type;
 *   - attn_v-like tensors (attn_v, attn_qkv, attn_kv_b), counted in the
 *     sorted order over all of them: q6_k in the "more bits" layers for
 *     Q4_K_M and Q5_K_M; q5_k for the first four for Q4_K_S;
 *   - ffn_down, counted per tensor in sorted order over n_layer: q6_k in
 *     the "more bits" layers for Q4_K_M and Q5_K_M; q5_k in the first
 *     eighth for Q4_K_S;
 *   - everything else keeps the default (Q4_K_x: q4_k, Q5_K_x: q5_k). The
 *     reference's "attn_qkv becomes q5_k for Q4_K_M" branch sits after the
 *     attn_v-like one in its if-chain and never fires: attn_qkv follows the
 *     attn_v rule. Q5_K_S and Q6_K have no rule besides the output head.
 * A row the chosen type's blocks do not divide falls back afterwards
 * (fallback). */
static uint32_t mix_type(selector *s, const item *it, category cat, uint32_t t) {
    const int km = s->ftype == FT_Q4_K_M || s->ftype == FT_Q5_K_M;
    if (cat == CAT_OUTPUT || (s->tied && cat == CAT_TOKEN_EMBD)) {
        if (it->t->ne[0] % quant_block_size(t)) t = QT_Q8_0;
        else if (t != QT_Q8_0) t = QT_Q6_K;
    } else if (cat == CAT_TOKEN_EMBD) {
        /* no rule for these file types */
    } else if (is_attn_v(cat)) {
        if (km && quant_more_bits(s->i_attn_v, s->n_attn_v)) t = QT_Q6_K;
        else if (s->ftype == FT_Q4_K_S && s->i_attn_v < 4) t = QT_Q5_K;
        s->i_attn_v++;
    } else if (cat == CAT_FFN_DOWN) {
        /* the layer index is the counter, in sorted order, not the name's */
        if (km && quant_more_bits(s->i_ffn_down, s->n_layer)) t = QT_Q6_K;
        else if (s->ftype == FT_Q4_K_S && s->i_ffn_down < s->n_layer / 8) t = QT_Q5_K;
        s->i_ffn_down++;
    }
    return t;
}

/* A row length the type's blocks do not divide falls back like the reference. */
static uint32_t fallback(const item *it, uint32_t t) {
    uint64_t ncols = it->t->ne[0];
    if (ncols % quant_block_size(t) == 0) return t;
    uint32_t r = t;
    switch (t) {
    case QT_Q4_K: r = QT_Q5_0; break;
    case QT_Q5_K: r = QT_Q5_1; break;
    case QT_Q6_K: r = QT_Q8_0; break;
    default: break;
    }
    if (ncols % quant_block_size(r)) r = QT_F16;
    return r;
}

static uint32_t pick_type(selector *s, const item *it) {
    if (!allows_quantization(it)) return it->t->type;
    category cat = categorize(it->t->name);
    if (s->embd_type >= 0 && cat == CAT_TOKEN_EMBD) return (uint32_t)s->embd_type;
    return fallback(it, mix_type(s, it, cat, s->def));
}

/* ---- metadata ---- */

static int has_nul(gguf_str s) { return s.len && memchr(s.ptr, 0, s.len) != NULL; }

static char *cstr_upto_nul(gguf_str s) {
    size_t n = strnlen(s.ptr, s.len);
    char *c = malloc(n + 1);
    if (c) {
        memcpy(c, s.ptr, n);
        c[n] = 0;
    }
    return c;
}

/* The reference re-adds each key through its C-string setters, so a string
 * value ends at its first NUL byte; everything else is copied verbatim. */
static int copy_kv(gguf_writer *w, const gguf_file *f, uint64_t i, gem_err *err) {
    const char *key = gguf_kv_key(f, i);
    gguf_vtype t = gguf_kv_type(f, i);
    gguf_str s;
    if (t == GGUF_T_STRING && !gguf_kv_str(f, i, &s) && has_nul(s)) {
        char *c = cstr_upto_nul(s);
        int rc = c ? gguf_w_str(w, key, c, err) : gem_err_set(err, "out of memory");
        free(c);
        return rc;
    }
    if (t == GGUF_T_ARRAY && gguf_kv_arr_type(f, i) == GGUF_T_ARRAY)
        return gem_err_set(err, "%s: key '%s' is an array of arrays, which the reference cannot copy", gguf_path(f), key);
    if (t == GGUF_T_ARRAY && gguf_kv_arr_type(f, i) == GGUF_T_STRING) {
        uint64_t n = gguf_kv_arr_len(f, i), bad = 0;
        for (uint64_t k = 0; k < n && !bad; k++) bad = !gguf_kv_arr_str(f, i, k, &s) && has_nul(s);
        if (bad) {
            char **v = calloc(n ? n : 1, sizeof *v);
            int rc = v ? 0 : gem_err_set(err, "out of memory");
            for (uint64_t k = 0; k < n && !rc; k++) {
                gguf_kv_arr_str(f, i, k, &s);
                if (!(v[k] = cstr_upto_nul(s))) rc = gem_err_set(err, "out of memory");
            }
            if (!rc) rc = gguf_w_arr_str(w, key, (const char *const *)v, n, err);
            for (uint64_t k = 0; k < n; k++) free(v[k]);
            free(v);
            return rc;
        }
    }
    return gguf_w_copy_kv(w, f, i, err);
}

static int write_meta(gguf_writer *w, const gguf_file *f, int ftype, gem_err *err) {
    static const char *const dropped[] = {"general.quantization_version", "general.file_type", "split.no",
                                          "split.count", "split.tensors.count"};
    for (uint64_t i = 0; i < gguf_kv_count(f); i++) {
        const char *key = gguf_kv_key(f, i);
        int drop = 0;
        for (size_t k = 0; k < sizeof dropped / sizeof dropped[0]; k++) drop |= !strcmp(key, dropped[k]);
        if (!drop && copy_kv(w, f, i, err)) return -1;
    }
    return gguf_w_u32(w, "general.quantization_version", QUANT_VERSION, err) ||
           gguf_w_u32(w, "general.file_type", (uint32_t)ftype, err);
}

/* ---- data: chunks of rows over worker threads ---- */

typedef struct {
    const item *it;
    const uint8_t *src; /* first row of the chunk */
    uint8_t *dst;
    uint64_t row_in, row_out, ne0;
    uint64_t row0, rows; /* this worker's rows, relative to the chunk */
    uint64_t chunk_row0; /* the chunk's first row in the tensor (for messages) */
    int failed;          /* 1: bad input, 2: bad output, 3: out of memory */
    uint64_t bad_row;
} work;

static void *run_work(void *arg) {
    work *k = arg;
    const uint32_t in_t = k->it->t->type, out_t = k->it->new_type;
    float *row = malloc(sizeof(float) * k->ne0);
    if (!row) {
        k->failed = 3;
        return NULL;
    }
    for (uint64_t r = k->row0; r < k->row0 + k->rows; r++) {
        const uint8_t *in = k->src + r * k->row_in;
        uint8_t *out = k->dst + r * k->row_out;
        if (quant_validate_row(in_t, in, k->row_in, NULL)) {
            k->failed = 1;
            k->bad_row = k->chunk_row0 + r;
            break;
        }
        quant_dequant_row(in_t, in, row, (int64_t)k->ne0);
        quant_quantize_row(out_t, row, out, (int64_t)k->ne0);
        if (quant_validate_row(out_t, out, k->row_out, NULL)) {
            k->failed = 2;
            k->bad_row = k->chunk_row0 + r;
            break;
        }
    }
    free(row);
    return NULL;
}

/* Copy path: rows are only checked. */
static void *run_check(void *arg) {
    work *k = arg;
    for (uint64_t r = k->row0; r < k->row0 + k->rows; r++) {
        if (quant_validate_row(k->it->t->type, k->src + r * k->row_in, k->row_in, NULL)) {
            k->failed = 1;
            k->bad_row = k->chunk_row0 + r;
            break;
        }
    }
    return NULL;
}

static void run_chunk(work *tmpl, uint64_t rows, int threads, void *(*fn)(void *), work *jobs) {
    pthread_t tid[MAX_THREADS];
    int started[MAX_THREADS] = {0};
    int n = threads;
    if ((uint64_t)n > rows) n = (int)rows;
    if (n < 1) n = 1;
    uint64_t per = rows / (uint64_t)n, extra = rows % (uint64_t)n, at = 0;
    for (int i = 0; i < n; i++) {
        jobs[i] = *tmpl;
        jobs[i].row0 = at;
        jobs[i].rows = per + ((uint64_t)i < extra);
        at += jobs[i].rows;
        started[i] = i > 0 && pthread_create(&tid[i], NULL, fn, &jobs[i]) == 0;
    }
    for (int i = 0; i < n; i++)
        if (!started[i]) fn(&jobs[i]); /* the caller's share, or no thread available */
    for (int i = 0; i < n; i++)
        if (started[i]) pthread_join(tid[i], NULL);
    tmpl->failed = 0;
    for (int i = 0; i < n && !tmpl->failed; i++) {
        tmpl->failed = jobs[i].failed;
        tmpl->bad_row = jobs[i].bad_row;
    }
}

static int write_tensor(gguf_writer *w, FILE *fp, const gguf_file *f, const item *it, int threads, uint8_t *scratch,
                        uint64_t *done, uint64_t total, const gem_quantize_opts *o, gem_err *err) {
    const gguf_tensor *t = it->t;
    const uint64_t ne0 = t->ne[0], rows = t->n_elems / ne0;
    uint64_t row_in, row_out;
    quant_row_bytes(t->type, (int64_t)ne0, &row_in);
    quant_row_bytes(it->new_type, (int64_t)ne0, &row_out);
    const int convert = it->new_type != t->type;
    uint64_t per_chunk = CHUNK_ELEMS / ne0;
    if (per_chunk == 0) per_chunk = 1;
    work jobs[MAX_THREADS];
    for (uint64_t r0 = 0; r0 < rows; r0 += per_chunk) {
        uint64_t k = rows - r0 < per_chunk ? rows - r0 : per_chunk;
        uint8_t *dst = scratch, *big = NULL;
        if (convert && k * row_out > (uint64_t)CHUNK_ELEMS * 4) { /* one row larger than the scratch */
            if (!(big = malloc(k * row_out))) return gem_err_set(err, "out of memory");
            dst = big;
        }
        work tmpl = {it, (const uint8_t *)t->data + r0 * row_in, dst, row_in, row_out, ne0, 0, 0, r0, 0, 0};
        run_chunk(&tmpl, k, threads, convert ? run_work : run_check, jobs);
        int rc = 0;
        if (tmpl.failed == 1)
            rc = gem_err_set(err, "%s: tensor '%s' has invalid data (a non-finite value or scale in row %llu)",
                             gguf_path(f), t->name, (unsigned long long)tmpl.bad_row);
        else if (tmpl.failed == 2)
            rc = gem_err_set(err, "tensor '%s': quantized data validation failed (row %llu: a %s scale overflows f16)",
                             t->name, (unsigned long long)tmpl.bad_row, quant_type_name(it->new_type));
        else if (tmpl.failed == 3)
            rc = gem_err_set(err, "out of memory");
        else
            rc = gguf_writer_data(w, fp, convert ? dst : tmpl.src, k * (convert ? row_out : row_in), err);
        free(big);
        if (rc) return -1;
        *done += k * row_in;
        if (o->progress) o->progress(*done, total, o->progress_ctx);
    }
    return 0;
}

/* ---- driver ---- */

int gem_quantize_contract(const gguf_file *f, int *n_layer, gem_err *err) {
    const int64_t k = gguf_find_key(f, "general.architecture");
    gguf_str a = {0};
    if (k >= 0 && !gguf_kv_str(f, (uint64_t)k, &a) && a.len == 6 && !memcmp(a.ptr, "qwen35", 6)) {
        const qwen35_profile *q;
        if (qwen35_validate(f, &q, err)) return gem_err_wrap(err, "not a supported Qwen3.5 model");
        *n_layer = (int)q->n_layer;
        return 0;
    }
    const gemma4_profile *p;
    if (gemma4_validate(f, &p, err)) return gem_err_wrap(err, "not a supported Gemma 4 model");
    *n_layer = (int)p->n_layer;
    return 0;
}

static int plan(const gguf_file *f, int n_layer, const gem_quantize_opts *o, int ftype, item *items,
                uint64_t n, gem_err *err) {
    for (uint64_t i = 0; i < n; i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        items[i].t = t;
        items[i].layer = -1;
        sscanf(t->name, "blk.%d.", &items[i].layer);
        uint32_t nd = t->n_dims;
        while (nd > 1 && t->ne[nd - 1] == 1) nd--;
        items[i].n_dims = nd;
    }
    qsort(items, n, sizeof *items, cmp_items);
    selector s = {ftype, ftype_default(ftype), o->embd_type, 1, 0, 0, n_layer, 0};
    for (uint64_t i = 0; i < n; i++) {
        category c = categorize(items[i].t->name);
        if (c == CAT_OUTPUT) s.tied = 0;
        if (is_attn_v(c)) s.n_attn_v++;
    }
    for (uint64_t i = 0; i < n; i++) {
        item *it = &items[i];
        it->new_type = pick_type(&s, it);
        const uint32_t from = it->t->type, to = it->new_type;
        if (from == to) continue;
        if (from != QT_F32 && from != QT_F16 && from != QT_BF16)
            return gem_err_set(err,
                               "%s: tensor '%s' is already quantized (%s); gem quantize, like llama-quantize, "
                               "quantizes from f32, f16 or bf16 only",
                               gguf_path(f), it->t->name, quant_type_name(from));
        if (!quant_can_quantize(to))
            return gem_err_set(err, "tensor '%s' would become %s, a type gem cannot produce", it->t->name,
                               quant_type_name(to) ? quant_type_name(to) : "?");
    }
    return 0;
}

int gem_quantize(const gem_quantize_opts *o, gem_quantize_stats *st, gem_err *err) {
    const int ftype = gem_quantize_ftype(o->type ? o->type : "");
    if (ftype < 0) return gem_err_set(err, "unknown type '%s' (%s)", o->type ? o->type : "", GEM_QUANTIZE_TYPES);
    if (o->embd_type >= 0 && !quant_can_quantize((uint32_t)o->embd_type))
        return gem_err_set(err,
                           "embedding type %s cannot be produced (q8_0, q6_k, q5_k, q4_k, q5_1, q5_0, q4_0, f16, bf16, "
                           "f32)",
                           quant_type_name((uint32_t)o->embd_type) ? quant_type_name((uint32_t)o->embd_type) : "?");
    int threads = o->threads > 0 ? o->threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (threads < 1) threads = 1;
    if (threads > MAX_THREADS) threads = MAX_THREADS;

    gguf_file *f = gguf_open(o->in_path, err);
    if (!f) return -1;
    int n_layer = 0;
    item *items = NULL;
    gguf_writer *w = NULL;
    uint8_t *scratch = NULL;
    FILE *fp = NULL;
    int rc = -1;
    if (gem_quantize_contract(f, &n_layer, err)) goto done;
    if (gguf_alignment(f) != GGUF_DEFAULT_ALIGNMENT) {
        /* the reference writes 32-byte alignment whatever the key says */
        gem_err_set(err, "%s: alignment %u is not supported (only %u)", o->in_path, gguf_alignment(f),
                    GGUF_DEFAULT_ALIGNMENT);
        goto done;
    }
    const uint64_t n = gguf_tensor_count(f);
    items = calloc(n ? n : 1, sizeof *items);
    w = gguf_writer_new(GGUF_DEFAULT_ALIGNMENT);
    scratch = malloc((size_t)CHUNK_ELEMS * 4);
    if (!items || !w || !scratch) {
        gem_err_set(err, "out of memory");
        goto done;
    }
    if (plan(f, n_layer, o, ftype, items, n, err) || write_meta(w, f, ftype, err)) goto done;
    uint64_t total = 0, out_total = 0;
    uint32_t n_quant = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (gguf_w_tensor(w, items[i].t->name, items[i].new_type, items[i].n_dims, items[i].t->ne, err)) goto done;
        total += items[i].t->n_bytes;
        out_total += gguf_w_tensor_bytes(w, i);
        n_quant += items[i].new_type != items[i].t->type;
    }
    struct stat si, so;
    if (!stat(o->in_path, &si) && !stat(o->out_path, &so) && si.st_dev == so.st_dev && si.st_ino == so.st_ino) {
        gem_err_set(err, "%s: the output would overwrite the input", o->out_path);
        goto done;
    }
    if (!(fp = file_create(o->out_path, err))) goto done;
    if (gguf_writer_begin(w, fp, err)) goto done;
    uint64_t done_bytes = 0;
    for (uint64_t i = 0; i < n; i++)
        if (write_tensor(w, fp, f, &items[i], threads, scratch, &done_bytes, total, o, err)) goto done;
    if (gguf_writer_finish(w, fp, err)) goto done;
    if (st) {
        st->in_bytes = total;
        st->out_bytes = out_total;
        st->n_tensors = (uint32_t)n;
        st->n_quantized = n_quant;
        st->ftype = (uint32_t)ftype;
    }
    rc = 0;
done:
    rc = file_close_output(fp, o->out_path, rc, err);
    free(scratch);
    free(items);
    gguf_writer_free(w);
    gguf_close(f);
    return rc;
}
