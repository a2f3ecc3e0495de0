/* gem profile: where the device time of one decode step (or one prefill
 * tile of --rows tokens) goes, stage by stage, at a chosen depth.
 *
 * The session is prefilled to the depth once and checkpointed (an exact
 * snapshot: gem_session_save); every sample restores the checkpoint, so
 * deep positions are not prefilled again per sample. Ordinary samples run
 * the step as gem run and gem serve do (a decode step replays its
 * recorded graph) and give its wall time; profiled samples run the same
 * step with the backend's per-op timing on (gem_engine_op_timing: each op
 * alone, no graph), whose rows are the table. The profiled step's logits
 * must equal the ordinary step's bit for bit (else an error): profiling
 * never changes the path it measures. The tokens are the fixed
 * pseudo-random ids of gem bench. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/device.h"
#include "cli/cli.h"
#include "model/gemma4.h"
#include "util/clock.h"
#include "util/json.h"
#include "util/strbuf.h"

#define PROF_MAX_ROWS 64

static int usage(void) {
    fprintf(stderr, "usage: gem profile -m FILE [--backend cuda] [--depth N] [--rows N] [--samples S]\n"
                    "                   [--kv-type f32|f16|f16-full] [--json OUT]\n");
    return 2;
}

/* One sample: the checkpoint, then the step's rows; its wall time. */
static int sample(gem_session *s, const gem_checkpoint *ck, const int32_t *ids, int rows, double *t, gem_err *err) {
    gem_session_restore(s, ck);
    (void)gem_session_logits(s); /* reads the restored logits back: the restore's copies are done */
    int32_t next;
    const double t0 = gem_now_s();
    if (gem_session_eval_greedy(s, ids, rows, &next, err)) return -1; /* reads the argmax back: the step is done */
    *t = gem_now_s() - t0;
    return 0;
}

int cli_profile(int argc, char **argv) {
    const char *model = NULL, *backend = "cpu", *json_path = NULL;
    int depth = 0, rows = 1, samples = 5;
    gemma4_kv_type kv_type = GEMMA4_KV_F32;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        double x;
        if (!v) return usage();
        if (!strcmp(a, "-m")) model = v;
        else if (!strcmp(a, "--backend")) backend = v;
        else if (!strcmp(a, "--json")) json_path = v;
        else if (!strcmp(a, "--kv-type")) { if (cli_kv_type_arg("profile", v, &kv_type)) return 2; }
        else if (!strcmp(a, "--depth")) { if (cli_parse_num(v, 0, 1 << 20, &x)) goto bad; depth = (int)x; }
        else if (!strcmp(a, "--rows")) { if (cli_parse_num(v, 1, 1 << 16, &x)) goto bad; rows = (int)x; }
        else if (!strcmp(a, "--samples")) { if (cli_parse_num(v, 1, 1000, &x)) goto bad; samples = (int)x; }
        else {
            fprintf(stderr, "gem profile: error: unknown option '%s'\n", a);
            return usage();
        }
        i++;
        continue;
    bad:
        fprintf(stderr, "gem profile: error: bad value '%s' for %s\n", v, a);
        return 2;
    }
    if (!model) return usage();
    gem_err err = {{0}};
    gem_engine_opts eo;
    memset(&eo, 0, sizeof eo);
    eo.model_path = model;
    eo.backend = backend;
    eo.kv_type = kv_type;
    eo.n_ctx = depth + rows + 1;
    if (rows > 1) eo.tile = rows; /* the rows are one prefill tile */
    gem_engine *e = gem_engine_open(&eo, &err);
    /* refused before the weights load and the depth fills */
    gem_session *s = e && !gem_engine_op_timing(e, 0, &err) ? gem_session_new(e, &err) : NULL;
    if (!s) {
        fprintf(stderr, "gem profile: error: %s\n", err.msg);
        gem_engine_close(e);
        return 1;
    }
    const int need = depth + rows;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)need);
    double *wall = malloc(sizeof(double) * (size_t)samples);
    const size_t nv = gem_engine_n_vocab(e);
    float *plain = malloc(sizeof(float) * nv);
    gem_op_time *tab = malloc(sizeof(gem_op_time) * PROF_MAX_ROWS);
    gem_checkpoint *ck = NULL;
    int rc = 1, n_tab = 0, equal = 0;
    double t = 0;
    if (!ids || !wall || !plain || !tab) {
        gem_err_set(&err, "out of memory");
        goto out;
    }
    cli_bench_ids(ids, need, gem_engine_n_vocab(e));
    const double tp = gem_now_s();
    if (depth > 0 && gem_session_eval(s, ids, depth, &err)) goto out;
    const double fill_s = gem_now_s() - tp;
    if (!(ck = gem_session_save(s, &err))) goto out;
    /* ordinary: one warm-up (records the step), then the samples */
    for (int k = 0; k <= samples; k++)
        if (sample(s, ck, ids + depth, rows, k ? &wall[k - 1] : &t, &err)) goto out;
    const float *lg = gem_session_logits(s);
    if (!lg) {
        gem_err_set(&err, "the step left no logits");
        goto out;
    }
    memcpy(plain, lg, sizeof(float) * nv);
    const double step_s = cli_median(wall, samples);
    /* profiled: only the step's own ops are timed (the restore is not) */
    gem_engine_op_times(e, tab, PROF_MAX_ROWS, 1);
    for (int k = 0; k < samples; k++) {
        gem_session_restore(s, ck);
        int32_t next;
        if (gem_engine_op_timing(e, 1, &err) || gem_session_eval_greedy(s, ids + depth, rows, &next, &err) ||
            gem_engine_op_timing(e, 0, &err))
            goto out;
    }
    n_tab = gem_engine_op_times(e, tab, PROF_MAX_ROWS, 1);
    lg = gem_session_logits(s);
    equal = lg && !memcmp(lg, plain, sizeof(float) * nv);
    double total = 0;
    for (int i = 0; i < n_tab; i++) total += tab[i].seconds / samples;
    char hw[512];
    if (backend_describe(backend, 0, hw, sizeof hw)) snprintf(hw, sizeof hw, "unknown");
    printf("gem profile: %s on %s (%s), %s of %d token%s at depth %d (filled in %.2f s), --kv-type %s\n",
           gem_engine_profile(e), backend, hw, rows == 1 ? "one decode step" : "one prefill tile", rows,
           rows == 1 ? "" : "s", depth, fill_s, gemma4_kv_type_name(kv_type));
    printf("ordinary step: %.3f ms (median of %d, %s); its ops run alone: %.3f ms\n", step_s * 1e3, samples,
           rows == 1 ? "recorded and replayed as gem run and serve do" : "the prompt-tile path", total * 1e3);
    printf("  %-50s %8s %11s %7s\n", "op (kernels, shape)", "calls", "ms/step", "share");
    for (int i = 0; i < n_tab; i++)
        printf("  %-50s %8.1f %11.4f %6.1f%%\n", tab[i].op, (double)tab[i].calls / samples,
               tab[i].seconds / samples * 1e3, total > 0 ? 100 * tab[i].seconds / samples / total : 0);
    printf("profiled step's logits equal the ordinary step's bit for bit: %s\n", equal ? "yes" : "NO");
    if (json_path) {
        FILE *js = fopen(json_path, "w");
        if (!js) {
            gem_err_set(&err, "cannot write %s", json_path);
            goto out;
        }
        strbuf q = {0};
        char when[32];
        const time_t tn = time(NULL);
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime(&tn));
        sb_puts(&q, "{\"model\": ");
        json_quote(model, strlen(model), &q);
        sb_puts(&q, ", \"hardware\": ");
        json_quote(hw, strlen(hw), &q);
        fputs(sb_cstr(&q), js);
        sb_free(&q);
        fprintf(js, ", \"date\": \"%s\", \"profile\": \"%s\", \"backend\": \"%s\", \"kv_type\": \"%s\", \"depth\": %d, "
                    "\"rows\": %d, \"samples\": %d, \"step_s\": %.6f, \"ops_alone_s\": %.6f, \"logits_equal\": %s, "
                    "\"ops\": [",
                when, gem_engine_profile(e), backend, gemma4_kv_type_name(kv_type), depth, rows, samples, step_s,
                total, equal ? "true" : "false");
        for (int i = 0; i < n_tab; i++) {
            strbuf o = {0};
            json_quote(tab[i].op, strlen(tab[i].op), &o);
            fprintf(js, "%s\n  {\"op\": %s, \"calls_per_step\": %.2f, \"s_per_step\": %.8f, \"share\": %.4f}",
                    i ? "," : "", sb_cstr(&o), (double)tab[i].calls / samples, tab[i].seconds / samples,
                    total > 0 ? tab[i].seconds / samples / total : 0);
            sb_free(&o);
        }
        fputs("]}\n", js);
        fclose(js);
    }
    if (!equal) {
        gem_err_set(&err, "the profiled step's logits differ from the ordinary step's");
        goto out;
    }
    rc = 0;
out:
    if (rc) fprintf(stderr, "gem profile: error: %s\n", err.msg);
    gem_checkpoint_free(ck);
    free(ids);
    free(wall);
    free(plain);
    free(tab);
    gem_session_free(s);
    gem_engine_close(e);
    return rc;
}
