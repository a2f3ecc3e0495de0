/* Stop strings (see stop.h). The hold buffer keeps the longest tail that
 * could still begin a stop string or the skip region's opening marker
 * (outside the region), or its closing marker (inside it). */
#include "engine/stop.h"

#include <string.h>

static void stop_drop(stopper *s, size_t n) {
    memmove(s->hold.p, s->hold.p + n, s->hold.len - n);
    s->hold.len -= n;
}

/* the longest proper prefix of m (length ml) that ends h[0..hn), above keep */
static size_t tail_prefix(const char *h, size_t hn, const char *m, size_t ml, size_t keep) {
    for (size_t k = ml ? ml - 1 : 0; k > keep; k--)
        if (k <= hn && !memcmp(h + hn - k, m, k)) return k;
    return keep;
}

int stopper_feed(stopper *s, const char *p, size_t n, stop_emit_fn emit, void *ctx) {
    if (s->hit) return 1;
    if (!s->n) {
        emit(p, n, ctx);
        return 0;
    }
    sb_put(&s->hold, p, n);
    if (s->hold.failed) return 0;
    const size_t ol = s->skip_open ? strlen(s->skip_open) : 0, cl = s->skip_close ? strlen(s->skip_close) : 0;
    const int skip = ol && cl; /* a region is set (both markers) */
    for (;;) {
        const char *h = s->hold.p;
        const size_t hn = s->hold.len;
        if (s->in_skip) { /* inside the region: only its end matters */
            const char *m = cl ? memmem(h, hn, s->skip_close, cl) : NULL;
            if (m) {
                const size_t end = (size_t)(m - h) + cl;
                emit(h, end, ctx);
                stop_drop(s, end);
                s->in_skip = 0;
                continue;
            }
            const size_t keep = tail_prefix(h, hn, s->skip_close, cl, 0);
            emit(h, hn - keep, ctx);
            stop_drop(s, hn - keep);
            return 0;
        }
        size_t best = hn + 1;
        int which = -1;
        for (int i = 0; i < s->n; i++) {
            const char *m = memmem(h, hn, s->stop[i], s->len[i]);
            if (m && (size_t)(m - h) < best) {
                best = (size_t)(m - h);
                which = i;
            }
        }
        /* a tail that may still become the opening marker: a stop string
         * found from there on waits (whole, the marker would come first) */
        const size_t pend = skip ? hn - tail_prefix(h, hn, s->skip_open, ol, 0) : hn;
        if (best <= hn && best >= pend) best = hn + 1;
        const char *o = skip ? memmem(h, hn, s->skip_open, ol) : NULL;
        if (o && (size_t)(o - h) <= best) { /* the region opens first: nothing in it stops */
            const size_t end = (size_t)(o - h) + ol;
            emit(h, end, ctx);
            stop_drop(s, end);
            s->in_skip = 1;
            continue;
        }
        if (best <= hn) {
            emit(h, best, ctx);
            s->hit = 1;
            s->which = which;
            s->hold.len = 0;
            return 1;
        }
        size_t keep = 0;
        for (int i = 0; i < s->n; i++) keep = tail_prefix(h, hn, s->stop[i], s->len[i], keep);
        if (skip) keep = tail_prefix(h, hn, s->skip_open, ol, keep);
        emit(h, hn - keep, ctx);
        stop_drop(s, hn - keep);
        return 0;
    }
}

void stopper_flush(stopper *s, stop_emit_fn emit, void *ctx) {
    if (!s->hit && s->hold.len) emit(s->hold.p, s->hold.len, ctx);
    s->hold.len = 0;
}

void stopper_free(stopper *s) { sb_free(&s->hold); }
