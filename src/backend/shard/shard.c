/* Tensor-parallel backend (see shard.h and docs/tensor-parallel.md).
 *
 * Every wrapper object holds one child object per shard. A weight is dealt
 * as the model asked (weight_split: be_shard_units picks each shard's
 * units); a buffer carries the layout of what was last written into it:
 *   REPL:    every child holds the whole logical contents;
 *   SPLIT:   logical rows of width map.W; child s holds, row after row,
 *            only the columns [off[s], off[s] + len[s]) (local row width
 *            len[s]), as a matmul by a BE_SPLIT_OUT weight leaves them;
 *   PARTIAL: every child holds a whole-size partial sum (a matmul by a
 *            BE_SPLIT_IN weight); only allreduce may read it.
 * Ops translate the logical shapes into each child's local ones (heads,
 * rows, element counts) and run the children in shard order. An op given
 * a layout it cannot take (a PARTIAL buffer read before allreduce, a split
 * input of the wrong map) is a bug in the caller: it sets the status error
 * (status reports it) and does nothing, so a test sees it.
 *
 * Collectives (allreduce, the embedding's row exchange, the vocabulary
 * gathers of argmax/top-k, a stash's assembly) go through the host with
 * the children's own download/upload: in-process, in shard order, so the
 * result is deterministic. A GPU build replaces exactly these with NCCL
 * calls on the children's streams.
 *
 * Invariants: G (2..SHARD_MAX) children of one backend kind; the children
 * run one op at a time each, in order; no state outside the backend. */
#include "backend/shard/shard.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant.h"

typedef struct {
    uint32_t W;                                 /* logical row width */
    uint32_t off[SHARD_MAX], len[SHARD_MAX];    /* shard s's columns */
} shard_map;

typedef enum { LAY_REPL, LAY_SPLIT, LAY_PARTIAL } layout;

struct be_buf {
    size_t n; /* logical floats */
    be_buf *c[SHARD_MAX];
    layout lay;
    shard_map map; /* SPLIT */
    size_t rows;   /* SPLIT: logical rows written */
};

struct be_weight {
    be_weight *c[SHARD_MAX];
    be_split_kind kind;
    uint64_t ne0;                 /* the input width (the embedding's row) */
    shard_map map;                /* OUT: output rows; IN: input columns */
    void *packed[SHARD_MAX];      /* IN: each shard's repacked columns (the children's weights view them) */
};

struct be_kv {
    be_kv *c[SHARD_MAX];
    int uniq[SHARD_MAX];  /* the checkpoint blob shard s's heads are (replicas share one) */
    int owner[SHARD_MAX]; /* the shard that saves blob u */
    int n_uniq;
};

typedef struct {
    backend base;
    int G;
    backend *c[SHARD_MAX];
    gem_err fail; /* the first internal error (status) */
    int failed;
    float *h0, *h1; /* host staging of the collectives */
    size_t h_cap;
} shard_backend;

static shard_backend *sh(backend *b) { return (shard_backend *)b; }

static void bad(shard_backend *s, const char *fmt, ...) GEM_PRINTF(2, 3);
static void bad(shard_backend *s, const char *fmt, ...) {
    if (s->failed) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->fail.msg, sizeof s->fail.msg, fmt, ap);
    va_end(ap);
    s->failed = 1;
}

/* Host staging of n floats each (h0, h1); 0, or -1 after bad(). */
static int stage(shard_backend *s, size_t n) {
    if (n <= s->h_cap) return 0;
    float *a = realloc(s->h0, n * sizeof *a), *b2 = a ? realloc(s->h1, n * sizeof *b2) : NULL;
    if (a) s->h0 = a;
    if (b2) s->h1 = b2;
    if (!a || !b2) {
        bad(s, "out of memory staging %zu floats", n);
        return -1;
    }
    s->h_cap = n;
    return 0;
}

static int map_eq(const shard_map *a, const shard_map *b, int G) {
    if (a->W != b->W) return 0;
    for (int i = 0; i < G; i++)
        if (a->off[i] != b->off[i] || a->len[i] != b->len[i]) return 0;
    return 1;
}

/* Shard i's floats of n logical floats of a SPLIT buffer (whole rows). */
static size_t loc(const be_buf *x, int i, size_t n) { return n / x->map.W * x->map.len[i]; }

/* x readable as its layout by an ordinary op: not PARTIAL; a SPLIT x only
 * in whole rows of n floats. */
static int readable(shard_backend *s, const be_buf *x, size_t n, const char *op) {
    if (x->lay == LAY_PARTIAL) {
        bad(s, "internal: %s read partial sums before allreduce", op);
        return 0;
    }
    if (x->lay == LAY_SPLIT && n % x->map.W) {
        bad(s, "internal: %s of %zu floats on a buffer split in rows of %u", op, n, x->map.W);
        return 0;
    }
    return 1;
}

static void set_split(be_buf *out, const shard_map *m, size_t rows) {
    out->lay = LAY_SPLIT;
    out->map = *m;
    out->rows = rows;
}

/* A SPLIT buffer's rows gathered into the logical layout on every child
 * (REPL): what a write that keeps the rest of the buffer needs. */
static void materialize(shard_backend *s, be_buf *x) {
    if (x->lay == LAY_REPL) return;
    if (x->lay == LAY_PARTIAL) {
        bad(s, "internal: a write into partial sums before allreduce");
        return;
    }
    const size_t n = x->rows * x->map.W;
    if (stage(s, n)) return;
    for (int i = 0; i < s->G; i++) {
        const size_t l = x->map.len[i];
        for (size_t r = 0; r < x->rows; r++)
            s->c[i]->download(s->c[i], x->c[i], r * l, s->h0 + r * x->map.W + x->map.off[i], l);
    }
    for (int i = 0; i < s->G; i++) s->c[i]->upload(s->c[i], x->c[i], 0, s->h0, n);
    x->lay = LAY_REPL;
}

/* ---- memory ---- */

static void sh_weight_free(backend *b, be_weight *w) {
    shard_backend *s = sh(b);
    if (!w) return;
    for (int i = 0; i < s->G; i++) {
        if (w->c[i]) s->c[i]->weight_free(s->c[i], w->c[i]);
        free(w->packed[i]);
    }
    free(w);
}

static be_weight *sh_weight_split(backend *b, const gguf_tensor *t, be_split sp, gem_err *err) {
    shard_backend *s = sh(b);
    const int G = s->G;
    be_weight *w = calloc(1, sizeof *w);
    if (!w) {
        gem_err_set(err, "out of memory");
        return NULL;
    }
    w->kind = sp.kind;
    w->ne0 = t->ne[0];
    const uint64_t ne0 = t->ne[0], ne1 = t->n_elems / t->ne[0];
    uint64_t row_bytes = 0;
    quant_row_bytes(t->type, (int64_t)ne0, &row_bytes);
    const uint64_t dim = sp.kind == BE_SPLIT_IN ? ne0 : ne1;
    if (sp.kind != BE_SPLIT_NONE) {
        if (sp.units < 1 || dim % sp.units)
            goto fail_units;
        const uint64_t unit = dim / sp.units;
        w->map.W = (uint32_t)dim;
        for (int i = 0; i < G; i++) {
            uint32_t first, count;
            if (be_shard_units(sp.units, G, i, &first, &count)) goto fail_units;
            w->map.off[i] = (uint32_t)(first * unit);
            w->map.len[i] = (uint32_t)(count * unit);
        }
        /* a split input dimension adds its shards' sums: replicas would
         * count a unit twice */
        if (sp.kind == BE_SPLIT_IN && sp.units % (uint32_t)G) goto fail_units;
    }
    for (int i = 0; i < G; i++) {
        gguf_tensor ct = *t;
        if (sp.kind == BE_SPLIT_OUT) {
            ct.data = (const uint8_t *)t->data + w->map.off[i] * row_bytes;
            ct.ne[1] = w->map.len[i];
            ct.n_elems = (uint64_t)w->map.len[i] * ne0;
            ct.n_bytes = w->map.len[i] * row_bytes;
        } else if (sp.kind == BE_SPLIT_IN) {
            const uint32_t blk = quant_block_size(t->type);
            const uint64_t c0 = w->map.off[i], cn = w->map.len[i];
            if (c0 % blk || cn % blk) {
                gem_err_set(err, "tensor '%s': %llu input columns per shard do not fall on its %s blocks of %u (try "
                            "fewer shards, or another quantization)", t->name, (unsigned long long)cn,
                            quant_type_name(t->type), blk);
                goto fail;
            }
            uint64_t skip = 0, keep = 0;
            quant_row_bytes(t->type, (int64_t)c0, &skip);
            quant_row_bytes(t->type, (int64_t)cn, &keep);
            uint8_t *p = malloc(keep * ne1 > 0 ? keep * ne1 : 1);
            if (!p) {
                gem_err_set(err, "out of memory repacking '%s'", t->name);
                goto fail;
            }
            for (uint64_t r = 0; r < ne1; r++)
                memcpy(p + r * keep, (const uint8_t *)t->data + r * row_bytes + skip, keep);
            w->packed[i] = p;
            ct.data = p;
            ct.mapped = 0; /* this copy, not the file: never released */
            ct.ne[0] = cn;
            ct.n_elems = cn * ne1;
            ct.n_bytes = keep * ne1;
        }
        if (!(w->c[i] = s->c[i]->weight(s->c[i], &ct, err))) {
            gem_err_wrap(err, "shard %d", i);
            goto fail;
        }
    }
    return w;
fail_units:
    gem_err_set(err, "tensor '%s': %u %s do not divide over %d shards", t->name, sp.units,
                sp.kind == BE_SPLIT_IN ? "input units" : "output units", G);
fail:
    sh_weight_free(b, w);
    return NULL;
}

static be_weight *sh_weight(backend *b, const gguf_tensor *t, gem_err *err) {
    return sh_weight_split(b, t, (be_split){BE_SPLIT_NONE, 0}, err);
}

static void sh_buf_free(backend *b, be_buf *x) {
    shard_backend *s = sh(b);
    if (!x) return;
    for (int i = 0; i < s->G; i++)
        if (x->c[i]) s->c[i]->buf_free(s->c[i], x->c[i]);
    free(x);
}

static be_buf *sh_alloc(backend *b, size_t n, gem_err *err) {
    shard_backend *s = sh(b);
    be_buf *x = calloc(1, sizeof *x);
    if (!x) {
        gem_err_set(err, "out of memory");
        return NULL;
    }
    x->n = n;
    for (int i = 0; i < s->G; i++)
        if (!(x->c[i] = s->c[i]->alloc(s->c[i], n, err))) {
            sh_buf_free(b, x);
            return NULL;
        }
    return x;
}

static void sh_upload(backend *b, be_buf *dst, size_t off, const float *src, size_t n) {
    shard_backend *s = sh(b);
    if (!(off == 0 && n == dst->n)) materialize(s, dst);
    for (int i = 0; i < s->G; i++) s->c[i]->upload(s->c[i], dst->c[i], off, src, n);
    dst->lay = LAY_REPL;
}

static void sh_download(backend *b, const be_buf *src, size_t off, float *dst, size_t n) {
    shard_backend *s = sh(b);
    if (src->lay == LAY_PARTIAL) {
        bad(s, "internal: a download of partial sums before allreduce");
        return;
    }
    if (src->lay == LAY_REPL) {
        s->c[0]->download(s->c[0], src->c[0], off, dst, n);
        return;
    }
    /* the logical range [off, off + n) from each shard's columns of each
     * row it touches (replicated columns are read twice, equal) */
    const size_t W = src->map.W;
    for (size_t r = off / W; r * W < off + n; r++)
        for (int i = 0; i < s->G; i++) {
            size_t a = r * W + src->map.off[i], e = a + src->map.len[i];
            if (a < off) a = off;
            if (e > off + n) e = off + n;
            if (a < e)
                s->c[i]->download(s->c[i], src->c[i], r * src->map.len[i] + (a - r * W - src->map.off[i]),
                                  dst + (a - off), e - a);
        }
}

static void sh_copy(backend *b, const be_buf *src, size_t so, be_buf *dst, size_t d, size_t n) {
    shard_backend *s = sh(b);
    if (src->lay == LAY_PARTIAL) {
        bad(s, "internal: a copy of partial sums before allreduce");
        return;
    }
    if (src->lay == LAY_SPLIT) {
        /* a split copy leaves dst split (its other contents are lost: a
         * later partial write gathers what it holds first) */
        const size_t W = src->map.W;
        if (so % W || d % W || n % W) {
            bad(s, "internal: a copy of %zu floats at %zu -> %zu out of a buffer split in rows of %zu", n, so, d, W);
            return;
        }
        const int keep = dst->lay == LAY_SPLIT && map_eq(&dst->map, &src->map, s->G);
        const size_t rows = d / W + n / W, had = keep ? dst->rows : 0;
        for (int i = 0; i < s->G; i++)
            s->c[i]->copy(s->c[i], src->c[i], loc(src, i, so), dst->c[i], loc(src, i, d), loc(src, i, n));
        set_split(dst, &src->map, rows > had ? rows : had);
        return;
    }
    if (!(d == 0 && n == dst->n)) materialize(s, dst);
    for (int i = 0; i < s->G; i++) s->c[i]->copy(s->c[i], src->c[i], so, dst->c[i], d, n);
    dst->lay = LAY_REPL;
}

static void sh_sync(backend *b) {
    shard_backend *s = sh(b);
    for (int i = 0; i < s->G; i++) s->c[i]->sync(s->c[i]);
}

/* ---- ops ---- */

/* out[i] = E[ids[i]] * scale with E split by vocabulary: each row is
 * looked up on the shard holding its token (the lowest such; the child
 * writes its rows at the front of its out, used as scratch), gathered on
 * the host in row order, and every shard gets every row (exact: a copy). */
static void sh_embed(backend *b, const be_weight *E, const int32_t *ids, int n, float scale, be_buf *out) {
    shard_backend *s = sh(b);
    if (E->kind == BE_SPLIT_NONE) {
        for (int i = 0; i < s->G; i++) s->c[i]->embed(s->c[i], E->c[i], ids, n, scale, out->c[i]);
        out->lay = LAY_REPL;
        return;
    }
    if (E->kind != BE_SPLIT_OUT) {
        bad(s, "internal: an embedding split by its input columns");
        return;
    }
    const size_t H = E->ne0;
    if (stage(s, (size_t)n * H)) return;
    enum { CHUNK = 64 };
    int32_t lid[CHUNK];
    int row[CHUNK];
    for (int i = 0; i < s->G; i++)
        for (int at = 0; at < n; at += CHUNK) {
            const int m = n - at < CHUNK ? n - at : CHUNK;
            int k = 0;
            for (int r = at; r < at + m; r++) {
                const uint32_t id = (uint32_t)ids[r];
                int owner = -1;
                for (int j = 0; j < s->G && owner < 0; j++)
                    if (id >= E->map.off[j] && id - E->map.off[j] < E->map.len[j]) owner = j;
                if (owner == i) lid[k] = (int32_t)(id - E->map.off[i]), row[k++] = r;
            }
            if (!k) continue;
            s->c[i]->embed(s->c[i], E->c[i], lid, k, scale, out->c[i]);
            for (int r = 0; r < k; r++)
                s->c[i]->download(s->c[i], out->c[i], (size_t)r * H, s->h0 + (size_t)row[r] * H, H);
        }
    for (int i = 0; i < s->G; i++) s->c[i]->upload(s->c[i], out->c[i], 0, s->h0, (size_t)n * H);
    out->lay = LAY_REPL;
}

/* For each shard, C(i) with the local count of `n` logical floats of x
 * (x's own when REPL). */
#define EACH(s, i) for (int i = 0; i < (s)->G; i++)

static size_t loc_or(const be_buf *x, int i, size_t n) { return x->lay == LAY_SPLIT ? loc(x, i, n) : n; }

static void sh_rmsnorm(backend *b, const be_buf *x, const be_weight *w, int rows, int width, float eps, be_buf *out) {
    shard_backend *s = sh(b);
    const size_t n = (size_t)rows * (size_t)width;
    if (!readable(s, x, n, "rmsnorm")) return;
    if (x->lay == LAY_SPLIT && x->map.W % (uint32_t)width) {
        bad(s, "internal: rmsnorm of rows of %d on a buffer split in rows of %u", width, x->map.W);
        return;
    }
    EACH(s, i) s->c[i]->rmsnorm(s->c[i], x->c[i], w ? w->c[i] : NULL, (int)(loc_or(x, i, n) / (size_t)width), width, eps,
                                out->c[i]);
    if (x->lay == LAY_SPLIT) set_split(out, &x->map, n / x->map.W);
    else out->lay = LAY_REPL;
}

static int repl(shard_backend *s, const be_buf *x, const char *op) {
    if (x->lay == LAY_REPL) return 1;
    bad(s, "internal: %s takes a whole (replicated) input, not %s", op,
        x->lay == LAY_PARTIAL ? "partial sums before allreduce" : "a split one");
    return 0;
}

static void sh_add_rmsnorm(backend *b, be_buf *h, const be_buf *x, const be_weight *w, int rows, int width, float eps,
                           const be_weight *sc) {
    shard_backend *s = sh(b);
    if (!repl(s, h, "add_rmsnorm") || !repl(s, x, "add_rmsnorm")) return;
    EACH(s, i) s->c[i]->add_rmsnorm(s->c[i], h->c[i], x->c[i], w->c[i], rows, width, eps, sc ? sc->c[i] : NULL);
}

static void sh_add_rmsnorm_norm(backend *b, be_buf *h, const be_buf *x, const be_weight *w, const be_weight *sc,
                                const be_weight *w_next, int rows, int width, float eps, be_buf *out) {
    shard_backend *s = sh(b);
    if (!repl(s, h, "add_rmsnorm_norm") || !repl(s, x, "add_rmsnorm_norm")) return;
    EACH(s, i) s->c[i]->add_rmsnorm_norm(s->c[i], h->c[i], x->c[i], w->c[i], sc ? sc->c[i] : NULL, w_next->c[i], rows,
                                         width, eps, out->c[i]);
    out->lay = LAY_REPL;
}

/* The input a matmul by W takes (a split one of W's map for BE_SPLIT_IN,
 * else a whole one), and the layout it leaves in out. */
static int mm_in(shard_backend *s, const be_weight *W, const be_buf *x) {
    if (W->kind != BE_SPLIT_IN) return repl(s, x, "a matmul by a whole or row-split weight");
    if (x->lay == LAY_SPLIT && map_eq(&x->map, &W->map, s->G)) return 1;
    bad(s, "internal: a matmul by a column-split weight (%u columns) given %s", W->map.W,
        x->lay == LAY_SPLIT ? "a differently split input" : "an unsplit input");
    return 0;
}

static void mm_out(const be_weight *W, be_buf *out, int n) {
    if (W->kind == BE_SPLIT_OUT) set_split(out, &W->map, (size_t)n);
    else out->lay = W->kind == BE_SPLIT_IN ? LAY_PARTIAL : LAY_REPL;
}

static void sh_matmul(backend *b, const be_weight *W, const be_buf *x, int n, be_buf *out) {
    shard_backend *s = sh(b);
    if (!mm_in(s, W, x)) return;
    EACH(s, i) s->c[i]->matmul(s->c[i], W->c[i], x->c[i], n, out->c[i]);
    mm_out(W, out, n);
}

static void sh_matmul_multi(backend *b, int count, const be_weight *const *W, const be_buf *x, int n,
                            be_buf *const *out) {
    shard_backend *s = sh(b);
    if (count < 1 || count > 3) {
        bad(s, "internal: matmul_multi of %d weights", count);
        return;
    }
    for (int j = 0; j < count; j++)
        if (W[j]->kind == BE_SPLIT_IN || !mm_in(s, W[j], x)) {
            bad(s, "internal: matmul_multi takes whole or row-split weights");
            return;
        }
    EACH(s, i) {
        const be_weight *cw[3];
        be_buf *co[3];
        for (int j = 0; j < count; j++) cw[j] = W[j]->c[i], co[j] = out[j]->c[i];
        s->c[i]->matmul_multi(s->c[i], count, cw, x->c[i], n, co);
    }
    for (int j = 0; j < count; j++) mm_out(W[j], out[j], n);
}

static void sh_matmul_geglu(backend *b, const be_weight *Wg, const be_weight *Wu, const be_buf *x, int n, be_buf *out) {
    shard_backend *s = sh(b);
    if (Wg->kind != Wu->kind || Wg->kind == BE_SPLIT_IN || (Wg->kind == BE_SPLIT_OUT && !map_eq(&Wg->map, &Wu->map, s->G))) {
        bad(s, "internal: matmul_geglu's gate and up must be split alike by their output rows");
        return;
    }
    if (!repl(s, x, "matmul_geglu")) return;
    EACH(s, i) s->c[i]->matmul_geglu(s->c[i], Wg->c[i], Wu->c[i], x->c[i], n, out->c[i]);
    mm_out(Wg, out, n);
}

/* Heads of head_dim in shard i's part of x (all of them when whole). */
static int loc_heads(shard_backend *s, const be_buf *x, int i, int heads, int head_dim) {
    if (x->lay != LAY_SPLIT) return heads;
    if (x->map.W != (uint32_t)(heads * head_dim) || x->map.len[i] % (uint32_t)head_dim) {
        bad(s, "internal: %d heads of %d on a buffer split in rows of %u", heads, head_dim, x->map.W);
        return 0;
    }
    return (int)(x->map.len[i] / (uint32_t)head_dim);
}

static void sh_rope(backend *b, be_buf *x, int n, int heads, int head_dim, int n_rot, int pos0, float theta,
                    const be_weight *ff) {
    shard_backend *s = sh(b);
    if (!readable(s, x, (size_t)n * heads * head_dim, "rope")) return;
    EACH(s, i) {
        const int lh = loc_heads(s, x, i, heads, head_dim);
        if (lh) s->c[i]->rope(s->c[i], x->c[i], n, lh, head_dim, n_rot, pos0, theta, ff ? ff->c[i] : NULL);
    }
}

static void sh_geglu(backend *b, const be_buf *gate, const be_buf *up, size_t n, be_buf *out) {
    shard_backend *s = sh(b);
    if (!readable(s, gate, n, "geglu") || !readable(s, up, n, "geglu")) return;
    if (gate->lay != up->lay || (gate->lay == LAY_SPLIT && !map_eq(&gate->map, &up->map, s->G))) {
        bad(s, "internal: geglu of differently split gate and up");
        return;
    }
    EACH(s, i) s->c[i]->geglu(s->c[i], gate->c[i], up->c[i], loc_or(gate, i, n), out->c[i]);
    if (gate->lay == LAY_SPLIT) set_split(out, &gate->map, n / gate->map.W);
    else out->lay = LAY_REPL;
}

static void sh_rmsnorm_rope(backend *b, be_buf *x, const be_weight *w, int n, int heads, int head_dim, float eps,
                            int pos0, float theta, const be_weight *ff) {
    shard_backend *s = sh(b);
    if (!readable(s, x, (size_t)n * heads * head_dim, "rmsnorm_rope")) return;
    EACH(s, i) {
        const int lh = loc_heads(s, x, i, heads, head_dim);
        if (lh)
            s->c[i]->rmsnorm_rope(s->c[i], x->c[i], w ? w->c[i] : NULL, n, lh, head_dim, eps, pos0, theta,
                                  ff ? ff->c[i] : NULL);
    }
}

static void sh_qkv_norm_rope(backend *b, be_buf *q, const be_weight *qw, be_buf *k, const be_weight *kw, be_buf *v,
                             int v_from_k, int n, int n_head, int n_kv_head, int head_dim, float eps, int pos0,
                             float theta, const be_weight *ff) {
    shard_backend *s = sh(b);
    if (!readable(s, q, (size_t)n * n_head * head_dim, "qkv_norm_rope") ||
        !readable(s, k, (size_t)n * n_kv_head * head_dim, "qkv_norm_rope") ||
        (!v_from_k && !readable(s, v, (size_t)n * n_kv_head * head_dim, "qkv_norm_rope")))
        return;
    EACH(s, i) {
        const int lq = loc_heads(s, q, i, n_head, head_dim), lk = loc_heads(s, k, i, n_kv_head, head_dim);
        if (lq && lk)
            s->c[i]->qkv_norm_rope(s->c[i], q->c[i], qw ? qw->c[i] : NULL, k->c[i], kw ? kw->c[i] : NULL, v->c[i],
                                   v_from_k, n, lq, lk, head_dim, eps, pos0, theta, ff ? ff->c[i] : NULL);
    }
    if (v_from_k) {
        if (k->lay == LAY_SPLIT) set_split(v, &k->map, (size_t)n);
        else v->lay = LAY_REPL;
    }
}

static void sh_scale(backend *b, be_buf *x, size_t n, const be_weight *sc) {
    shard_backend *s = sh(b);
    if (!readable(s, x, n, "scale")) return;
    EACH(s, i) s->c[i]->scale(s->c[i], x->c[i], loc_or(x, i, n), sc->c[i]);
}

static void sh_softcap(backend *b, be_buf *x, size_t n, float cap) {
    shard_backend *s = sh(b);
    if (!readable(s, x, n, "softcap")) return;
    EACH(s, i) s->c[i]->softcap(s->c[i], x->c[i], loc_or(x, i, n), cap);
}

/* The partial sums of every shard added in shard order (0 + 1 + ... on
 * the host: one fixed order), then the sum on every shard. */
static void sh_allreduce(backend *b, be_buf *x, size_t n) {
    shard_backend *s = sh(b);
    if (x->lay != LAY_PARTIAL) {
        bad(s, "internal: allreduce of a buffer that holds no partial sums");
        return;
    }
    if (stage(s, n)) return;
    s->c[0]->download(s->c[0], x->c[0], 0, s->h0, n);
    for (int i = 1; i < s->G; i++) {
        s->c[i]->download(s->c[i], x->c[i], 0, s->h1, n);
        for (size_t j = 0; j < n; j++) s->h0[j] += s->h1[j];
    }
    EACH(s, i) s->c[i]->upload(s->c[i], x->c[i], 0, s->h0, n);
    x->lay = LAY_REPL;
}

/* ---- KV caches ---- */

static void sh_kv_free(backend *b, be_kv *kv) {
    shard_backend *s = sh(b);
    if (!kv) return;
    EACH(s, i) if (kv->c[i]) s->c[i]->kv_free(s->c[i], kv->c[i]);
    free(kv);
}

/* Each shard keeps the KV heads be_shard_units deals it (those of its
 * query heads); a checkpoint holds every distinct head once. */
static be_kv *sh_kv_new(backend *b, int n_kv_head, int head_dim, int capacity, int ring, be_kv_type type,
                        gem_err *err) {
    shard_backend *s = sh(b);
    be_kv *kv = calloc(1, sizeof *kv);
    if (!kv) {
        gem_err_set(err, "out of memory");
        return NULL;
    }
    const int G = s->G;
    for (int i = 0; i < G; i++) {
        uint32_t first, count;
        if (n_kv_head < 1 || be_shard_units((uint32_t)n_kv_head, G, i, &first, &count)) {
            gem_err_set(err, "%d KV heads do not divide over %d shards", n_kv_head, G);
            sh_kv_free(b, kv);
            return NULL;
        }
        /* replicas of one head (fewer heads than shards) share a blob */
        kv->uniq[i] = n_kv_head % G == 0 ? i : (int)first;
        if (!(kv->c[i] = s->c[i]->kv_new(s->c[i], (int)count, head_dim, capacity, ring, type, err))) {
            sh_kv_free(b, kv);
            return NULL;
        }
    }
    kv->n_uniq = 0;
    for (int i = 0; i < G; i++)
        if (kv->uniq[i] == kv->n_uniq) kv->owner[kv->n_uniq++] = i;
    return kv;
}

static size_t blob(shard_backend *s, const be_kv *kv, int n_pos) { return s->c[0]->kv_bytes(s->c[0], kv->c[0], n_pos); }

static size_t sh_kv_bytes(backend *b, const be_kv *kv, int n_pos) { return (size_t)kv->n_uniq * blob(sh(b), kv, n_pos); }

static void sh_kv_save(backend *b, const be_kv *kv, int n_pos, void *dst) {
    shard_backend *s = sh(b);
    const size_t lb = blob(s, kv, n_pos);
    for (int u = 0; u < kv->n_uniq; u++) {
        const int i = kv->owner[u];
        s->c[i]->kv_save(s->c[i], kv->c[i], n_pos, (char *)dst + (size_t)u * lb);
    }
}

static void sh_kv_load(backend *b, be_kv *kv, int n_pos, const void *src) {
    shard_backend *s = sh(b);
    const size_t lb = blob(s, kv, n_pos);
    EACH(s, i) s->c[i]->kv_load(s->c[i], kv->c[i], n_pos, (const char *)src + (size_t)kv->uniq[i] * lb);
}

/* A stash is the checkpoint's bytes on every shard (assembled on the
 * host): the buffer's region stays whole, downloadable as any other. */
static void sh_kv_stash(backend *b, const be_kv *kv, int n_pos, be_buf *dst, size_t off) {
    shard_backend *s = sh(b);
    const size_t bytes = sh_kv_bytes(b, kv, n_pos);
    if (bytes % sizeof(float) || off % sizeof(float)) {
        bad(s, "internal: a stash of %zu bytes at %zu", bytes, off);
        return;
    }
    materialize(s, dst);
    if (stage(s, bytes / sizeof(float) + 1)) return;
    sh_kv_save(b, kv, n_pos, s->h0);
    EACH(s, i) s->c[i]->upload(s->c[i], dst->c[i], off / sizeof(float), s->h0, bytes / sizeof(float));
}

static void sh_kv_unstash(backend *b, be_kv *kv, int n_pos, const be_buf *src, size_t off) {
    shard_backend *s = sh(b);
    const size_t lb = blob(s, kv, n_pos);
    if (src->lay != LAY_REPL) {
        bad(s, "internal: an unstash from a split buffer");
        return;
    }
    EACH(s, i) s->c[i]->kv_unstash(s->c[i], kv->c[i], n_pos, src->c[i], off + (size_t)kv->uniq[i] * lb);
}

/* ---- attention ---- */

/* q, k, v split by heads (each shard its query heads and their KV heads),
 * out split as q. */
static int att_in(shard_backend *s, const be_buf *q, const be_buf *k, const be_buf *v, int v_from_k, int n,
                  int n_head, int n_kv_head, int d, const char *op) {
    if (q->lay != LAY_SPLIT || k->lay != LAY_SPLIT || (!v_from_k && v->lay != LAY_SPLIT)) {
        bad(s, "internal: %s on a sharded cache takes q, k and v split by heads", op);
        return 0;
    }
    (void)n;
    return q->map.W == (uint32_t)(n_head * d) && k->map.W == (uint32_t)(n_kv_head * d);
}

static void sh_attention(backend *b, const be_buf *q, const be_buf *k, const be_buf *v, be_kv *kv, int n, int pos0,
                         int n_head, int n_kv_head, int d, int window, be_buf *out) {
    shard_backend *s = sh(b);
    if (!att_in(s, q, k, v, 0, n, n_head, n_kv_head, d, "attention")) return;
    EACH(s, i) s->c[i]->attention(s->c[i], q->c[i], k->c[i], v->c[i], kv->c[i], n, pos0, loc_heads(s, q, i, n_head, d),
                                  loc_heads(s, k, i, n_kv_head, d), d, window, out->c[i]);
    set_split(out, &q->map, (size_t)n);
}

static void sh_attention_qkv(backend *b, be_buf *q, const be_weight *qw, be_buf *k, const be_weight *kw, be_buf *v,
                             int v_from_k, be_kv *kv, int n, int pos0, int n_head, int n_kv_head, int d, float eps,
                             float theta, const be_weight *ff, int window, be_buf *out) {
    shard_backend *s = sh(b);
    if (!att_in(s, q, k, v, v_from_k, n, n_head, n_kv_head, d, "attention_qkv")) return;
    EACH(s, i) s->c[i]->attention_qkv(s->c[i], q->c[i], qw ? qw->c[i] : NULL, k->c[i], kw ? kw->c[i] : NULL, v->c[i],
                                      v_from_k, kv->c[i], n, pos0, loc_heads(s, q, i, n_head, d),
                                      loc_heads(s, k, i, n_kv_head, d), d, eps, theta, ff ? ff->c[i] : NULL, window,
                                      out->c[i]);
    set_split(out, &q->map, (size_t)n);
}

static void sh_attention_seqs(backend *b, be_buf *q, const be_weight *qw, be_buf *k, const be_weight *kw, be_buf *v,
                              int v_from_k, be_kv *const *kvs, const int *pos, int n, int n_head, int n_kv_head, int d,
                              float eps, float theta, const be_weight *ff, int window, be_buf *out) {
    shard_backend *s = sh(b);
    if (n < 1 || n > BE_EXACT_ROWS) {
        bad(s, "internal: attention_seqs of %d rows", n);
        return;
    }
    if (!att_in(s, q, k, v, v_from_k, n, n_head, n_kv_head, d, "attention_seqs")) return;
    EACH(s, i) {
        be_kv *ck[BE_EXACT_ROWS];
        for (int r = 0; r < n; r++) ck[r] = kvs[r]->c[i];
        s->c[i]->attention_seqs(s->c[i], q->c[i], qw ? qw->c[i] : NULL, k->c[i], kw ? kw->c[i] : NULL, v->c[i],
                                v_from_k, ck, pos, n, loc_heads(s, q, i, n_head, d), loc_heads(s, k, i, n_kv_head, d), d,
                                eps, theta, ff ? ff->c[i] : NULL, window, out->c[i]);
    }
    set_split(out, &q->map, (size_t)n);
}

/* ---- the head: vocabulary gathers ---- */

/* Row r's largest value of shard i's columns of x (split) and its global
 * index: the child's argmax (out->c[i] as scratch) and one value read. */
static void sh_argmax(backend *b, const be_buf *x, int rows, int width, be_buf *out) {
    shard_backend *s = sh(b);
    if (!readable(s, x, (size_t)rows * width, "argmax")) return;
    if (x->lay == LAY_REPL) {
        EACH(s, i) s->c[i]->argmax(s->c[i], x->c[i], rows, width, out->c[i]);
        out->lay = LAY_REPL;
        return;
    }
    if (x->map.W != (uint32_t)width) {
        bad(s, "internal: argmax over rows of %d of a buffer split in rows of %u", width, x->map.W);
        return;
    }
    /* rows: a verification's or a batched step's (BE_EXACT_ROWS at most) */
    float best_v[BE_EXACT_ROWS], idx[BE_EXACT_ROWS];
    if (rows < 1 || rows > BE_EXACT_ROWS) {
        bad(s, "internal: argmax of %d rows on a sharded backend (1..%d)", rows, BE_EXACT_ROWS);
        return;
    }
    if (stage(s, (size_t)rows)) return;
    /* shards in vocabulary order: a strictly larger value wins, so among
     * equal values the lowest index stays (the seam's rule) */
    EACH(s, i) {
        s->c[i]->argmax(s->c[i], x->c[i], rows, (int)x->map.len[i], out->c[i]);
        s->c[i]->download(s->c[i], out->c[i], 0, idx, (size_t)rows);
        for (int r = 0; r < rows; r++) {
            float v;
            const size_t li = (size_t)idx[r];
            s->c[i]->download(s->c[i], x->c[i], (size_t)r * x->map.len[i] + li, &v, 1);
            const float g = (float)(x->map.off[i] + li);
            if (i == 0 || v > best_v[r] || (best_v[r] != best_v[r] && v == v)) best_v[r] = v, s->h0[r] = g;
        }
    }
    EACH(s, i) s->c[i]->upload(s->c[i], out->c[i], 0, s->h0, (size_t)rows);
    out->lay = LAY_REPL;
}

/* The softmax probability of the largest value from each shard's: with
 * m_i its largest and p_i = 1 / sum exp(x - m_i) over its columns,
 * 1 / p = sum_i exp(m_i - M) / p_i (M the largest m_i). */
static void sh_argmax_prob(backend *b, const be_buf *x, int width, be_buf *out) {
    shard_backend *s = sh(b);
    if (!readable(s, x, (size_t)width, "argmax_prob")) return;
    if (x->lay == LAY_REPL) {
        EACH(s, i) s->c[i]->argmax_prob(s->c[i], x->c[i], width, out->c[i]);
        out->lay = LAY_REPL;
        return;
    }
    float m[SHARD_MAX], p[SHARD_MAX], idx[SHARD_MAX];
    int bi = 0;
    EACH(s, i) {
        float r[2];
        s->c[i]->argmax_prob(s->c[i], x->c[i], (int)x->map.len[i], out->c[i]);
        s->c[i]->download(s->c[i], out->c[i], 0, r, 2);
        idx[i] = (float)x->map.off[i] + r[0];
        p[i] = r[1];
        s->c[i]->download(s->c[i], x->c[i], (size_t)r[0], &m[i], 1);
        if (m[i] > m[bi]) bi = i;
    }
    double sum = 0;
    EACH(s, i) sum += exp((double)m[i] - (double)m[bi]) / (double)p[i];
    const float res[2] = {idx[bi], (float)(1.0 / sum)};
    EACH(s, i) s->c[i]->upload(s->c[i], out->c[i], 0, res, 2);
    out->lay = LAY_REPL;
}

typedef struct {
    float v;
    int32_t i;
} cand;

/* the sampler's order: value descending, then index ascending */
static int cand_cmp(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->v != y->v) return x->v > y->v ? -1 : 1;
    return (x->i > y->i) - (x->i < y->i);
}

/* Each shard's k best of its columns, merged: the k best of the row
 * (G x k candidates cross, not the vocabulary). */
static void sh_topk(backend *b, const be_buf *x, int width, int k, be_buf *out) {
    shard_backend *s = sh(b);
    if (!readable(s, x, (size_t)width, "topk")) return;
    if (x->lay == LAY_REPL) {
        EACH(s, i) s->c[i]->topk(s->c[i], x->c[i], width, k, out->c[i]);
        out->lay = LAY_REPL;
        return;
    }
    if (k < 1 || k > BE_TOPK_MAX) {
        bad(s, "internal: top-%d", k);
        return;
    }
    cand c[SHARD_MAX * BE_TOPK_MAX];
    int nc = 0;
    EACH(s, i) {
        const int ki = k < (int)x->map.len[i] ? k : (int)x->map.len[i];
        float r[2 * BE_TOPK_MAX];
        s->c[i]->topk(s->c[i], x->c[i], (int)x->map.len[i], ki, out->c[i]);
        s->c[i]->download(s->c[i], out->c[i], 0, r, (size_t)(2 * ki));
        for (int j = 0; j < ki; j++) c[nc++] = (cand){r[j], (int32_t)(x->map.off[i] + (uint32_t)r[ki + j])};
    }
    qsort(c, (size_t)nc, sizeof *c, cand_cmp);
    const int kk = k < nc ? k : nc;
    float res[2 * BE_TOPK_MAX];
    for (int j = 0; j < kk; j++) res[j] = c[j].v, res[kk + j] = (float)c[j].i;
    EACH(s, i) s->c[i]->upload(s->c[i], out->c[i], 0, res, (size_t)(2 * kk));
    out->lay = LAY_REPL;
}

/* ---- status, lifetime ---- */

static int sh_status(backend *b, gem_err *err) {
    shard_backend *s = sh(b);
    if (s->failed) return gem_err_set(err, "%s", s->fail.msg);
    EACH(s, i) if (s->c[i]->status(s->c[i], err)) return gem_err_wrap(err, "shard %d", i);
    return 0;
}

static void sh_destroy(backend *b) {
    shard_backend *s = sh(b);
    EACH(s, i) if (s->c[i]) s->c[i]->destroy(s->c[i]);
    free(s->h0);
    free(s->h1);
    free(s);
}

backend *backend_shard_create(const char *name, const backend_opts *o, gem_err *err) {
    const int G = o->shards;
    if (G < 2 || G > SHARD_MAX) {
        gem_err_set(err, "%d shards: tensor parallelism takes 2 to %d", G, SHARD_MAX);
        return NULL;
    }
    if (strcmp(name, "cpu")) {
        int built = 0;
        gem_err de = {{0}};
        const int n = backend_devices(name, &built, &de);
        if (n < 0) return gem_err_set(err, "%d-way tensor parallelism on '%s': %s", G, name, de.msg), NULL;
        if (n < G)
            return gem_err_set(err, "%d-way tensor parallelism on '%s': %d device%s present", G, name, n,
                               n == 1 ? "" : "s"),
                   NULL;
        gem_err_set(err, "%d-way tensor parallelism on '%s' (NCCL) is not in this build yet; the CPU backend runs "
                    "in-process shards (docs/tensor-parallel.md)", G, name);
        return NULL;
    }
    shard_backend *s = calloc(1, sizeof *s);
    if (!s) {
        gem_err_set(err, "out of memory");
        return NULL;
    }
    s->G = G;
    backend_opts co = *o;
    co.shards = 0;
    for (int i = 0; i < G; i++)
        if (!(s->c[i] = backend_create(name, &co, err))) {
            gem_err_wrap(err, "shard %d", i);
            sh_destroy(&s->base);
            return NULL;
        }
    const backend *c = s->c[0];
    backend *b = &s->base;
    b->name = c->rows_exact && !strcmp(c->name, "cpu-ref") ? "cpu-ref-tp" : "cpu-tp";
    b->shards = G;
    /* each shard's row is computed alone and the sums are added in a fixed
     * order per element: row-exact when the children are */
    b->rows_exact = c->rows_exact;
    b->prompt_tile = c->prompt_tile;
    b->kv_f16 = c->kv_f16;
    b->work_reserve = (size_t)G * c->work_reserve;
    b->destroy = sh_destroy;
    b->weight = sh_weight;
    b->weight_split = sh_weight_split;
    b->weight_free = sh_weight_free;
    b->alloc = sh_alloc;
    b->buf_free = sh_buf_free;
    b->upload = sh_upload;
    b->download = sh_download;
    b->copy = sh_copy;
    b->sync = sh_sync;
    b->embed = sh_embed;
    b->rmsnorm = sh_rmsnorm;
    b->add_rmsnorm = sh_add_rmsnorm;
    b->add_rmsnorm_norm = c->add_rmsnorm_norm ? sh_add_rmsnorm_norm : NULL;
    b->matmul = sh_matmul;
    b->matmul_multi = sh_matmul_multi;
    b->matmul_geglu = sh_matmul_geglu;
    b->rope = sh_rope;
    b->geglu = sh_geglu;
    b->rmsnorm_rope = sh_rmsnorm_rope;
    b->qkv_norm_rope = c->qkv_norm_rope ? sh_qkv_norm_rope : NULL;
    b->scale = sh_scale;
    b->softcap = sh_softcap;
    b->allreduce = sh_allreduce;
    b->kv_new = sh_kv_new;
    b->kv_free = sh_kv_free;
    b->attention = sh_attention;
    b->attention_qkv = c->attention_qkv ? sh_attention_qkv : NULL;
    /* attention_cached (an MTP drafter's) stays NULL: a drafter's weights
     * are not dealt over shards yet, so --mtp is refused */
    b->attention_seqs = c->attention_seqs ? sh_attention_seqs : NULL;
    b->kv_bytes = sh_kv_bytes;
    b->kv_save = sh_kv_save;
    b->kv_load = sh_kv_load;
    b->kv_stash = sh_kv_stash;
    b->kv_unstash = sh_kv_unstash;
    b->argmax = sh_argmax;
    b->argmax_prob = c->argmax_prob ? sh_argmax_prob : NULL;
    b->topk = c->topk ? sh_topk : NULL;
    b->status = sh_status;
    /* no set_step, capture or timings: the CPU children have none, and the
     * Qwen3.5 ops are absent (that family refuses the backend by name) */
    return b;
}
