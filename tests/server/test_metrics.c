/* /metrics' text (server/metrics.h): counters by status, the answers'
 * token and time sums, cumulative histogram buckets, the draft counters
 * only with a drafter, the prompt cache's only with one, the gauges as
 * given. */
#include <string.h>

#include "server/metrics.h"
#include "test.h"

static void has(const strbuf *o, const char *line) {
    CHECKF(strstr(sb_cstr((strbuf *)o), line) != NULL, "missing line: %s", line);
}

int main(void) {
    metrics *m = metrics_new();
    CHECK(m != NULL);
    if (!m) return test_report("test_metrics");
    metrics_request(m, 200);
    metrics_request(m, 200);
    metrics_request(m, 400);
    metrics_request(m, 418); /* no row of its own */
    const metrics_answer a = {10, 4, 5, 0.2, 0.08, 0.4, 6, 3};  /* 0.1 s per token after the first */
    const metrics_answer b = {7, 0, 1, 0.1, 3.0, 0.0, 0, 0};    /* one token: no per-token latency */
    metrics_answer_add(m, &a);
    metrics_answer_add(m, &b);
    strbuf o = {0};
    const metrics_now now = {1, 2, 3, 42, 4096, 0, 4, 10, 37, 0, 0, 0, 0, 0, 0, 0};
    metrics_render(m, &now, &o);
    has(&o, "# TYPE gem_requests_total counter\n");
    has(&o, "\ngem_requests_total{status=\"200\"} 2\n");
    has(&o, "\ngem_requests_total{status=\"400\"} 1\n");
    has(&o, "\ngem_requests_total{status=\"503\"} 0\n");
    has(&o, "\ngem_requests_total{status=\"other\"} 1\n");
    has(&o, "\ngem_answers_total 2\n");
    has(&o, "\ngem_prompt_tokens_total 17\n");
    has(&o, "\ngem_prompt_tokens_cached_total 4\n");
    has(&o, "\ngem_generated_tokens_total 6\n");
    has(&o, "\ngem_prompt_seconds_total 0.300000\n");
    has(&o, "\ngem_decode_seconds_total 0.400000\n");
    /* first tokens at 0.08 s and 3 s: cumulative buckets */
    has(&o, "\ngem_time_to_first_token_seconds_bucket{le=\"0.05\"} 0\n");
    has(&o, "\ngem_time_to_first_token_seconds_bucket{le=\"0.1\"} 1\n");
    has(&o, "\ngem_time_to_first_token_seconds_bucket{le=\"2.5\"} 1\n");
    has(&o, "\ngem_time_to_first_token_seconds_bucket{le=\"5\"} 2\n");
    has(&o, "\ngem_time_to_first_token_seconds_bucket{le=\"+Inf\"} 2\n");
    has(&o, "\ngem_time_to_first_token_seconds_sum 3.080000\n");
    has(&o, "\ngem_time_to_first_token_seconds_count 2\n");
    has(&o, "\ngem_time_per_token_seconds_bucket{le=\"0.05\"} 0\n");
    has(&o, "\ngem_time_per_token_seconds_bucket{le=\"0.1\"} 1\n");
    has(&o, "\ngem_time_per_token_seconds_count 1\n");
    has(&o, "\ngem_requests_running 1\n");
    has(&o, "\ngem_requests_queued 2\n");
    has(&o, "\ngem_connections_open 3\n");
    has(&o, "\ngem_cache_tokens 42\n");
    has(&o, "\ngem_context_tokens 4096\n");
    has(&o, "\ngem_slots 4\n");
    has(&o, "\ngem_decode_steps_total 10\n");
    has(&o, "\ngem_decode_step_rows_total 37\n");
    CHECK(!strstr(sb_cstr(&o), "gem_draft_tokens_total"));
    CHECK(!strstr(sb_cstr(&o), "gem_prompt_cache"));
    o.len = 0;
    const metrics_now spec = {0, 0, 0, 0, 4096, 1, 1, 0, 0, 1, 8 << 20, 3 << 20, 2, 5, 7, 1};
    metrics_render(m, &spec, &o);
    has(&o, "\ngem_draft_tokens_total 6\n");
    has(&o, "\ngem_draft_tokens_accepted_total 3\n");
    has(&o, "\ngem_prompt_cache_hits_total 5\n");
    has(&o, "\ngem_prompt_cache_misses_total 7\n");
    has(&o, "\ngem_prompt_cache_evictions_total 1\n");
    has(&o, "\ngem_prompt_cache_bytes 3145728\n");
    has(&o, "\ngem_prompt_cache_limit_bytes 8388608\n");
    has(&o, "\ngem_prompt_cache_entries 2\n");
    /* every sample line is NAME{labels} VALUE or NAME VALUE */
    int lines = 0, bad = 0;
    for (char *l = o.p; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        if (*l == '#' || *l == '\n') continue;
        lines++;
        if (strncmp(l, "gem_", 4) || !strchr(l, ' ')) bad++;
    }
    CHECKF(lines > 40 && !bad, "%d sample lines, %d malformed", lines, bad);
    sb_free(&o);
    metrics_free(m);
    return test_report("test_metrics");
}
