/* gem serve's /metrics: counters and latency histograms of the generation
 * requests, rendered in Prometheus' text format (version 0.0.4).
 *
 * Pure (no sockets, no engine), so the text is unit-tested. Updates and
 * the render take the structure's own lock: the worker records, any
 * connection thread renders. */
#ifndef GEM_SERVER_METRICS_H
#define GEM_SERVER_METRICS_H

#include <stddef.h>

#include "util/strbuf.h"

typedef struct metrics metrics;

metrics *metrics_new(void); /* NULL when out of memory */
void metrics_free(metrics *m);

/* A generation request's end (chat, completion or message; one that
 * reached validation), by status: 200, 400, 499 (the client left), 500,
 * 503 (queue full, shutting down); any other as "other". */
void metrics_request(metrics *m, int status);

/* One answer (a request with n > 1 or several prompts has several). */
typedef struct {
    long prompt_tokens; /* evaluated for it */
    long cached_tokens; /* reused from the session's state */
    long generated;
    double prompt_s, first_s, decode_s; /* engine.h gem_gen_result's */
    long drafted, accepted;
} metrics_answer;
void metrics_answer_add(metrics *m, const metrics_answer *a);

/* What holds right now (gauges). */
typedef struct {
    int running, queued, connections;
    long session_tokens; /* the tokens the slots' sessions hold, together */
    int n_ctx;
    int speculative; /* the server has a drafter: the draft counters are shown */
    int slots;       /* sessions (--parallel) */
    long batched_steps, batched_rows; /* the engine's decode steps and the rows they carried */
    /* the prompt cache (pcache.h), shown when pcache is set */
    int pcache;
    size_t pc_limit, pc_bytes;
    long pc_entries;
    unsigned long long pc_hits, pc_misses, pc_evicted;
} metrics_now;
void metrics_render(metrics *m, const metrics_now *now, strbuf *out);

#endif
