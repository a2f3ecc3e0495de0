/* Stop strings (see stop.h). */
#include "engine/stop.h"

#include <string.h>

static void stop_drop(stopper *s, size_t n) {
    memmove(s->hold.p, s->hold.p + n, s->hold.len - n);
    s->hold.len -= n;
}

int stopper_feed(stopper *s, const char *p, size_t n, stop_emit_fn emit, void *ctx) {
    if (s->hit) return 1;
    if (!s->n) {
        emit(p, n, ctx);
        return 0;
    }
    sb_put(&s->hold, p, n);
    if (s->hold.failed) return 0;
    const char *h = s->hold.p;
    size_t hn = s->hold.len, best = hn + 1;
    for (int i = 0; i < s->n; i++) {
        const char *m = memmem(h, hn, s->stop[i], s->len[i]);
        if (m && (size_t)(m - h) < best) best = (size_t)(m - h);
    }
    if (best <= hn) {
        emit(h, best, ctx);
        s->hit = 1;
        s->hold.len = 0;
        return 1;
    }
    /* hold the longest suffix that is a proper prefix of a stop string */
    size_t keep = 0;
    for (int i = 0; i < s->n; i++)
        for (size_t k = s->len[i] - 1; k > keep; k--)
            if (k <= hn && !memcmp(h + hn - k, s->stop[i], k)) {
                keep = k;
                break;
            }
    emit(h, hn - keep, ctx);
    stop_drop(s, hn - keep);
    return 0;
}

void stopper_flush(stopper *s, stop_emit_fn emit, void *ctx) {
    if (!s->hit && s->hold.len) emit(s->hold.p, s->hold.len, ctx);
    s->hold.len = 0;
}

void stopper_free(stopper *s) { sb_free(&s->hold); }
