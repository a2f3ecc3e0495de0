/* Stop strings over generated text (gem_session_generate applies them):
 * text that could still be the start of a stop string is held back until
 * it is ruled out; a match ends the text just before it, and nothing after
 * it is ever emitted. Text from skip_open to skip_close (both set: a
 * reasoning channel's markers) is passed through unsearched, markers
 * included; a region opened and never closed runs to the end. Pure (no
 * engine), so it is unit-tested alone. */
#ifndef GEM_ENGINE_STOP_H
#define GEM_ENGINE_STOP_H

#include <stddef.h>

#include "util/strbuf.h"

typedef void (*stop_emit_fn)(const char *p, size_t n, void *ctx);

typedef struct {
    const char *const *stop;
    const size_t *len;
    int n;
    const char *skip_open, *skip_close; /* NUL-terminated, or NULL */
    strbuf hold;
    int hit, in_skip;
    int which; /* once hit: the index of the stop string found (the earliest in the text) */
} stopper;

/* Returns 1 once a stop string has been found (later text is dropped). */
int stopper_feed(stopper *s, const char *p, size_t n, stop_emit_fn emit, void *ctx);
/* End of generation: releases what was held. */
void stopper_flush(stopper *s, stop_emit_fn emit, void *ctx);
void stopper_free(stopper *s);

#endif
