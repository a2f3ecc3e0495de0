/* Prometheus text for gem serve (metrics.h). Counters only grow; the
 * histograms' buckets are cumulative as the format wants (le: the upper
 * bound, +Inf the count). Latencies are per answer: the time to its first
 * token (prompt included) and its mean time per token after the first. */
#include <pthread.h>
#include <stdlib.h>

#include "server/metrics.h"

static const double TTFT_LE[] = {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
static const double TOKEN_LE[] = {0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1};
#define N_TTFT (sizeof TTFT_LE / sizeof TTFT_LE[0])
#define N_TOKEN (sizeof TOKEN_LE / sizeof TOKEN_LE[0])
/* what a generation request that reached validation can end with (refusals
 * of the head, such as 401 or 413, are not generation requests yet) */
static const int STATUSES[] = {200, 400, 499, 500, 503};
#define N_STATUS (sizeof STATUSES / sizeof STATUSES[0])

typedef struct {
    unsigned long long le[16], count;
    double sum;
} histo;

struct metrics {
    pthread_mutex_t mu;
    unsigned long long status[N_STATUS + 1]; /* the last: any other status */
    unsigned long long answers, prompt_tokens, cached_tokens, generated, drafted, accepted;
    double prompt_s, decode_s;
    histo ttft, token;
};

metrics *metrics_new(void) {
    metrics *m = calloc(1, sizeof *m);
    if (m) pthread_mutex_init(&m->mu, NULL);
    return m;
}

void metrics_free(metrics *m) {
    if (!m) return;
    pthread_mutex_destroy(&m->mu);
    free(m);
}

void metrics_request(metrics *m, int status) {
    size_t i = 0;
    while (i < N_STATUS && STATUSES[i] != status) i++;
    pthread_mutex_lock(&m->mu);
    m->status[i]++;
    pthread_mutex_unlock(&m->mu);
}

static void observe(histo *h, const double *le, size_t n, double v) {
    for (size_t i = 0; i < n; i++)
        if (v <= le[i]) h->le[i]++;
    h->count++;
    h->sum += v;
}

void metrics_answer_add(metrics *m, const metrics_answer *a) {
    pthread_mutex_lock(&m->mu);
    m->answers++;
    m->prompt_tokens += (unsigned long long)(a->prompt_tokens > 0 ? a->prompt_tokens : 0);
    m->cached_tokens += (unsigned long long)(a->cached_tokens > 0 ? a->cached_tokens : 0);
    m->generated += (unsigned long long)(a->generated > 0 ? a->generated : 0);
    m->drafted += (unsigned long long)(a->drafted > 0 ? a->drafted : 0);
    m->accepted += (unsigned long long)(a->accepted > 0 ? a->accepted : 0);
    m->prompt_s += a->prompt_s;
    m->decode_s += a->decode_s;
    if (a->generated > 0) observe(&m->ttft, TTFT_LE, N_TTFT, a->first_s);
    if (a->generated > 1) observe(&m->token, TOKEN_LE, N_TOKEN, a->decode_s / (double)(a->generated - 1));
    pthread_mutex_unlock(&m->mu);
}

static void counter(strbuf *o, const char *name, const char *help, unsigned long long v) {
    sb_printf(o, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name, v);
}
static void counter_f(strbuf *o, const char *name, const char *help, double v) {
    sb_printf(o, "# HELP %s %s\n# TYPE %s counter\n%s %.6f\n", name, help, name, name, v);
}
static void gauge(strbuf *o, const char *name, const char *help, long v) {
    sb_printf(o, "# HELP %s %s\n# TYPE %s gauge\n%s %ld\n", name, help, name, name, v);
}
static void histogram(strbuf *o, const char *name, const char *help, const histo *h, const double *le, size_t n) {
    sb_printf(o, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    for (size_t i = 0; i < n; i++) sb_printf(o, "%s_bucket{le=\"%g\"} %llu\n", name, le[i], h->le[i]);
    sb_printf(o, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name, h->count, name, h->sum, name,
              h->count);
}

void metrics_render(metrics *m, const metrics_now *now, strbuf *o) {
    pthread_mutex_lock(&m->mu);
    sb_puts(o, "# HELP gem_requests_total Generation requests (chat, completions, messages) that reached validation, by "
               "final status.\n"
               "# TYPE gem_requests_total counter\n");
    for (size_t i = 0; i < N_STATUS; i++) sb_printf(o, "gem_requests_total{status=\"%d\"} %llu\n", STATUSES[i], m->status[i]);
    sb_printf(o, "gem_requests_total{status=\"other\"} %llu\n", m->status[N_STATUS]);
    counter(o, "gem_answers_total", "Answers generated (a request with n > 1 or several prompts has several).",
            m->answers);
    counter(o, "gem_prompt_tokens_total", "Prompt tokens evaluated.", m->prompt_tokens);
    counter(o, "gem_prompt_tokens_cached_total", "Prompt tokens reused from the session's cached state.",
            m->cached_tokens);
    counter(o, "gem_generated_tokens_total", "Tokens generated.", m->generated);
    counter_f(o, "gem_prompt_seconds_total", "Time spent evaluating prompts.", m->prompt_s);
    counter_f(o, "gem_decode_seconds_total", "Time from each answer's first token to its last.", m->decode_s);
    histogram(o, "gem_time_to_first_token_seconds", "Time from an answer's start to its first token, prompt included.",
              &m->ttft, TTFT_LE, N_TTFT);
    histogram(o, "gem_time_per_token_seconds", "An answer's mean time per token after its first.", &m->token,
              TOKEN_LE, N_TOKEN);
    if (now->speculative) {
        counter(o, "gem_draft_tokens_total", "Tokens the MTP drafter proposed.", m->drafted);
        counter(o, "gem_draft_tokens_accepted_total", "Drafted tokens the target confirmed.", m->accepted);
    }
    pthread_mutex_unlock(&m->mu);
    gauge(o, "gem_requests_running", "Generation requests running (at most one per slot).", now->running);
    gauge(o, "gem_requests_queued", "Generation requests waiting for a free slot.", now->queued);
    gauge(o, "gem_connections_open", "Open client connections.", now->connections);
    gauge(o, "gem_slots", "Sessions that run requests at once (--parallel).", now->slots);
    gauge(o, "gem_cache_tokens", "Tokens the slots' cached states hold, together.", now->session_tokens);
    gauge(o, "gem_context_tokens", "The context size in tokens (per slot).", now->n_ctx);
    counter(o, "gem_decode_steps_total",
            "Decode steps of generations running together (each one read of the weights for all its rows).",
            (unsigned long long)(now->batched_steps > 0 ? now->batched_steps : 0));
    counter(o, "gem_decode_step_rows_total", "Tokens those steps carried (over gem_decode_steps_total: the mean batch).",
            (unsigned long long)(now->batched_rows > 0 ? now->batched_rows : 0));
    if (now->pcache) {
        counter(o, "gem_prompt_cache_hits_total",
                "Requests whose slot did not hold their conversation that continued a parked state.", now->pc_hits);
        counter(o, "gem_prompt_cache_misses_total",
                "Requests whose slot did not hold their conversation that found no parked state keeping more.",
                now->pc_misses);
        counter(o, "gem_prompt_cache_evictions_total", "Parked states dropped for room (least recently used first).",
                now->pc_evicted);
        gauge(o, "gem_prompt_cache_bytes", "Host memory the parked states hold.", (long)now->pc_bytes);
        gauge(o, "gem_prompt_cache_limit_bytes", "The bound on it (--cache-ram).", (long)now->pc_limit);
        gauge(o, "gem_prompt_cache_entries", "Parked states.", now->pc_entries);
    }
}
