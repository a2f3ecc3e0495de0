/* gem perplexity: perplexity of a text file, computed the way the pinned
 * reference's llama-perplexity computes it (tools/perplexity/perplexity.cpp,
 * perplexity() without --ppl-stride), so the two can be compared number for
 * number on one GGUF:
 *
 *  - the file is read whole and one trailing '\n' is dropped (what the
 *    reference's -f does), then tokenized once with BOS and without parsing
 *    control tokens (common_tokenize(ctx, prompt, true));
 *  - at least 2 x n_ctx tokens are needed; the text is cut into
 *    n_tokens / n_ctx chunks of n_ctx tokens (--chunks caps the count);
 *  - each chunk is evaluated from an empty cache with its first token
 *    replaced by BOS, and the tokens after position first = n_ctx / 2 are
 *    scored: for j = first .. n_ctx - 2, -log softmax(logits[j])[tok[j + 1]]
 *    with the reference's log_softmax (float max and differences, expf,
 *    double sum, log), on the soft-capped logits the model outputs;
 *  - after each chunk "[i]PPL," with PPL = exp(mean NLL so far), and at the
 *    end "Final estimate: PPL = X +/- Y" with Y = PPL * sqrt(var(NLL) /
 *    (count - 1)).
 *
 * The chunk line and the final line go to stdout (the reference writes the
 * final line to its log on stderr); progress goes to stderr. A chunk is fed
 * in pieces of the engine's prompt tile (--tile, default 64), so the tiles
 * are those of one whole-chunk evaluation and only one tile of logits is
 * held; pieces that end before `first` skip the all-logits copy. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "engine/engine.h"
#include "model/gemma4.h"
#include "util/json.h"
#include "util/strbuf.h"
#include "util/clock.h"
#include "util/file.h"

#define PPL_TILE 64 /* default tokens per evaluation piece, also the engine's prompt tile */

static int usage(void) {
    fprintf(stderr,
            "usage: gem perplexity -m FILE -f TEXTFILE [-c N] [--chunks N] [-t THREADS] [--backend cpu|cuda]\n"
            "                      [--cpu-ref] [--compat-llama] [--kv-type f32|f16|f16-full] [--tile T] [--json OUT]\n");
    return 2;
}

/* -log p(tok), as the reference's log_softmax(n_vocab, logits, tok) and
 * process_logits compute it: the same float and double steps. */
static double row_nll(const float *logits, uint32_t n_vocab, int32_t target) {
    float max_logit = logits[0];
    for (uint32_t i = 1; i < n_vocab; i++) max_logit = logits[i] > max_logit ? logits[i] : max_logit;
    double sum_exp = 0.0;
    for (uint32_t i = 0; i < n_vocab; i++) sum_exp += expf(logits[i] - max_logit);
    return -((double)(logits[target] - max_logit) - log(sum_exp));
}

static void json_str_field(strbuf *b, const char *key, const char *v) {
    sb_printf(b, "\"%s\": ", key);
    json_quote(v, strlen(v), b);
    sb_puts(b, ", ");
}

static void json_num(strbuf *b, double v) {
    if (isfinite(v)) sb_printf(b, "%.17g", v);
    else sb_puts(b, "null");
}

int cli_perplexity(int argc, char **argv) {
    gem_engine_opts eo = {0};
    const char *text_path = NULL, *json_path = NULL;
    int n_ctx = 512, max_chunks = -1, tile = PPL_TILE;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        double x;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) { if (!v) return usage(); eo.model_path = v; i++; }
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) { if (!v) return usage(); text_path = v; i++; }
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx") || !strcmp(a, "--ctx-size")) {
            if (cli_parse_num(v, 3, 1 << 20, &x) || x != (int)x) goto bad;
            n_ctx = (int)x;
            i++;
        }
        else if (!strcmp(a, "--chunks")) { if (cli_parse_num(v, 1, 1 << 30, &x) || x != (int)x) goto bad; max_chunks = (int)x; i++; }
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { if (cli_parse_num(v, 1, 1024, &x)) goto bad; eo.threads = (int)x; i++; }
        else if (!strcmp(a, "--tile")) { if (cli_parse_num(v, 1, 512, &x) || x != (int)x) goto bad; tile = (int)x; i++; }
        else if (!strcmp(a, "--backend")) { if (!v) return usage(); eo.backend = v; i++; }
        else if (!strcmp(a, "--kv-type")) { if (cli_kv_type_arg("perplexity", v, &eo.kv_type)) return 2; i++; }
        else if (!strcmp(a, "--json")) { if (!v) return usage(); json_path = v; i++; }
        else if (!strcmp(a, "--cpu-ref")) eo.cpu_ref = 1;
        else if (!strcmp(a, "--compat-llama")) eo.compat_llama = 1;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(); return 0; }
        else {
            fprintf(stderr, "gem perplexity: error: unknown option '%s'\n", a);
            return usage();
        }
        continue;
    bad:
        if (!strcmp(a, "-c") || !strcmp(a, "--ctx") || !strcmp(a, "--ctx-size"))
            fprintf(stderr, "gem perplexity: error: bad value for %s: '%s' (a whole number of tokens, at least 3)\n", a,
                    v ? v : "");
        else fprintf(stderr, "gem perplexity: error: bad value for %s: '%s'\n", a, v ? v : "");
        return 2;
    }
    if (!eo.model_path || !text_path) return usage();

    /* the text first: a bad text file fails before the model is loaded */
    gem_err err = {{0}};
    size_t text_len = 0;
    char *text = file_read(text_path, 0, &text_len, &err);
    if (!text) {
        fprintf(stderr, "gem perplexity: error: %s\n", err.msg);
        return 1;
    }
    if (text_len == 0) {
        fprintf(stderr, "gem perplexity: error: %s is empty\n", text_path);
        free(text);
        return 1;
    }
    if (text[text_len - 1] == '\n') text_len--; /* as the reference's -f */

    eo.n_ctx = n_ctx;
    eo.tile = tile;
    double t0 = gem_now_s();
    gem_engine *e = gem_engine_open(&eo, &err);
    if (!e) {
        fprintf(stderr, "gem perplexity: error: %s\n", err.msg);
        free(text);
        return 1;
    }
    int rc = 1;
    tok_ids ids = {0};
    gem_session *s = NULL;
    float *logits = NULL;
    int32_t *cids = NULL;
    double *running = NULL;
    strbuf js = {0};
    FILE *jf = NULL;
    int json_opened = 0;
    if (gem_engine_n_ctx(e) < n_ctx) {
        fprintf(stderr, "gem perplexity: error: a context of %d exceeds the model's trained context of %d (use -c)\n",
                n_ctx, gem_engine_n_ctx(e));
        goto done;
    }
    /* opened now: an unwritable path fails before the evaluation, not after */
    if (json_path && !(jf = fopen(json_path, "w"))) {
        fprintf(stderr, "gem perplexity: error: cannot write %s: %s\n", json_path, strerror(errno));
        goto done;
    }
    json_opened = json_path != NULL;
    const tok *tk = gem_engine_tok(e);
    if (tok_encode(tk, text, text_len, 1, 0, &ids)) {
        fprintf(stderr, "gem perplexity: error: out of memory while tokenizing %s\n", text_path);
        goto done;
    }
    const double t_load = gem_now_s() - t0;
    if (ids.n < 2 * (size_t)n_ctx) {
        fprintf(stderr,
                "gem perplexity: error: %s tokenizes to only %zu tokens; a context of %d needs at least %d "
                "(2 x the context; use a longer text or a smaller -c)\n",
                text_path, ids.n, n_ctx, 2 * n_ctx);
        goto done;
    }
    const int n_chunk_max = (int)(ids.n / (size_t)n_ctx);
    const int n_chunk = max_chunks < 0 || max_chunks > n_chunk_max ? n_chunk_max : max_chunks;
    const int first = n_ctx / 2;
    const uint32_t V = gem_engine_n_vocab(e);
    if (!(s = gem_session_new(e, &err))) {
        fprintf(stderr, "gem perplexity: error: %s\n", err.msg);
        goto done;
    }
    logits = malloc((size_t)tile * V * sizeof *logits);
    cids = malloc((size_t)n_ctx * sizeof *cids);
    running = malloc((size_t)n_chunk * sizeof *running);
    if (!logits || !cids || !running) {
        fprintf(stderr, "gem perplexity: error: out of memory\n");
        goto done;
    }
    fprintf(stderr,
            "gem perplexity: %s on %s, load %.2f s; %s: %zu tokens; %d chunks of %d tokens (of %d), scoring the "
            "last %d of each\n",
            gem_engine_profile(e), gem_engine_backend(e), t_load, text_path, ids.n, n_chunk, n_ctx, n_chunk_max,
            n_ctx - first - 1);

    double nll = 0.0, nll2 = 0.0;
    long count = 0;
    const double t_start = gem_now_s();
    for (int i = 0; i < n_chunk; i++) {
        const size_t start = (size_t)i * (size_t)n_ctx;
        const double tc = gem_now_s();
        gem_session_reset(s);
        memcpy(cids, ids.v + start, (size_t)n_ctx * sizeof *cids);
        if (tok_add_bos(tk)) cids[0] = tok_bos(tk);
        for (int a = 0; a < n_ctx; a += tile) {
            const int b = a + tile < n_ctx ? a + tile : n_ctx;
            if (b <= first) {
                if (gem_session_eval(s, cids + a, b - a, &err)) goto eval_failed;
                continue;
            }
            if (gem_session_eval_all(s, cids + a, b - a, logits, &err)) goto eval_failed;
            const int j_end = b < n_ctx - 1 ? b : n_ctx - 1;
            for (int j = a > first ? a : first; j < j_end; j++) {
                const double v = row_nll(logits + (size_t)(j - a) * V, V, ids.v[start + (size_t)j + 1]);
                if (!isfinite(v)) {
                    fprintf(stderr, "\ngem perplexity: error: non-finite logits in chunk %d at position %d\n", i + 1, j);
                    goto done;
                }
                nll += v;
                nll2 += v * v;
                count++;
            }
        }
        running[i] = exp(nll / count);
        if (i == 0) {
            const double t = gem_now_s() - tc;
            fprintf(stderr, "gem perplexity: %.2f seconds per pass - ETA %.2f minutes\n", t, t * n_chunk / 60.0);
        }
        printf("[%d]%.4f,", i + 1, running[i]);
        fflush(stdout);
    }
    printf("\n");
    const double seconds = gem_now_s() - t_start;

    /* the reference's final estimate, step for step */
    nll2 /= count;
    nll /= count;
    const double ppl = exp(nll);
    nll2 -= nll * nll;
    double err_ppl = NAN;
    if (nll2 > 0) {
        nll2 = sqrt(nll2 / (count - 1));
        err_ppl = nll2 * ppl;
        printf("Final estimate: PPL = %.4f +/- %.5f\n", ppl, err_ppl);
    } else {
        printf("Final estimate: PPL = %.4f +/- nan\n", ppl);
        fprintf(stderr, "gem perplexity: warning: no error estimate: the variance of -log(prob) over %ld scored "
                        "token%s is not positive\n", count, count == 1 ? "" : "s");
    }
    fflush(stdout);
    fprintf(stderr, "gem perplexity: %ld tokens scored in %.2f s (%.1f tok/s evaluated)\n", count, seconds,
            (double)n_chunk * n_ctx / (seconds > 0 ? seconds : 1e-9));

    if (json_path) {
        sb_puts(&js, "{");
        json_str_field(&js, "model", eo.model_path);
        json_str_field(&js, "profile", gem_engine_profile(e));
        json_str_field(&js, "backend", gem_engine_backend(e));
        json_str_field(&js, "text", text_path);
        sb_printf(&js, "\"n_ctx\": %d, \"n_chunks\": %d, \"n_chunks_max\": %d, \"tokens\": %zu, \"scored\": %ld, ", n_ctx,
                  n_chunk, n_chunk_max, ids.n, count);
        sb_puts(&js, "\"nll\": ");
        json_num(&js, nll);
        sb_puts(&js, ", \"ppl\": ");
        json_num(&js, ppl);
        sb_puts(&js, ", \"stderr\": ");
        json_num(&js, err_ppl);
        sb_puts(&js, ", \"chunks\": [");
        for (int i = 0; i < n_chunk; i++) {
            if (i) sb_puts(&js, ", ");
            json_num(&js, running[i]);
        }
        sb_printf(&js, "], \"seconds\": %.3f}\n", seconds);
        int wrote = !js.failed && fwrite(js.p, 1, js.len, jf) == js.len;
        if (fclose(jf)) wrote = 0;
        jf = NULL;
        if (!wrote) {
            fprintf(stderr, "gem perplexity: error: cannot write %s%s%s\n", json_path, js.failed ? "" : ": ",
                    js.failed ? "" : strerror(errno));
            goto done;
        }
    }
    rc = 0;
    goto done;
eval_failed:
    fprintf(stderr, "\ngem perplexity: error: %s\n", err.msg);
done:
    if (jf) fclose(jf);
    if (rc && json_opened) unlink(json_path); /* no half-written or empty result */
    sb_free(&js);
    free(running);
    free(cids);
    free(logits);
    gem_session_free(s);
    tok_ids_free(&ids);
    gem_engine_close(e);
    free(text);
    return rc;
}
