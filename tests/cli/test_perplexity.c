/* gem perplexity on the synthetic tiny model (f32, seed 1), against an
 * independent computation from the engine's own logits: each chunk through
 * gem_session_eval_all in one call, BOS first, -log p of tokens
 * n_ctx/2+1 .. n_ctx-1 by a log-sum-exp in double, PPL = exp(mean) and the
 * error PPL * sqrt(var / (count - 1)). Checked: the final PPL and error, the
 * per-chunk running estimates (JSON and the "[i]x," line), the counts, the
 * trailing newline dropped as llama-perplexity's -f drops it, evaluation in
 * pieces smaller than the chunk (--tile), --chunks, and the errors for a
 * missing file, an empty file, a text too short for the context, an
 * unwritable --json path and bad options. Runs ./gem (or $GEM) from the repository root. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/engine.h"
#include "model/gemma4.h"
#include "quant/quant.h"
#include "util/json.h"
#include "synth_tiny.h"
#include "test.h"

#define V GEMMA4_N_VOCAB
#define MAX_CHUNKS 64

static char dir[] = "/tmp/gem-ppl-XXXXXX";
static const char *gem = "./gem";
static char model[256], text[256];

/* gem perplexity ARGS with stdout and stderr in dir/out and dir/err; the exit status */
static int run_gem(const char *args) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s perplexity %s >%s/out 2>%s/err", gem, args, dir, dir);
    int st = system(cmd);
    if (st == -1 || !WIFEXITED(st)) return -1;
    return WEXITSTATUS(st);
}

static char *slurp_in_dir(const char *name) {
    char p[512];
    size_t n;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    char *s = test_slurp(p, &n);
    return s ? s : calloc(1, 1);
}

static void write_file(const char *path, const char *s) {
    FILE *f = fopen(path, "wb");
    if (f) {
        fputs(s, f);
        fclose(f);
    }
}

typedef struct {
    int n_chunks;
    long scored;
    double ppl, err, running[MAX_CHUNKS], running_err[MAX_CHUNKS]; /* after chunk c */
} result;

/* The independent computation: whole chunks, all logits, double throughout. */
static int reference(const int32_t *toks, size_t n, int n_ctx, int tile, result *r) {
    gem_engine_opts eo = {0};
    eo.model_path = model;
    eo.n_ctx = n_ctx;
    eo.tile = tile;
    gem_err err = {{0}};
    gem_engine *e = gem_engine_open(&eo, &err);
    gem_session *s = e ? gem_session_new(e, &err) : NULL;
    float *lg = malloc((size_t)n_ctx * V * sizeof *lg);
    int32_t *ids = malloc((size_t)n_ctx * sizeof *ids);
    int ok = s && lg && ids;
    CHECKF(ok, "%s", err.msg);
    memset(r, 0, sizeof *r);
    r->n_chunks = (int)(n / (size_t)n_ctx);
    double sum = 0, sum2 = 0;
    for (int c = 0; ok && c < r->n_chunks && c < MAX_CHUNKS; c++) {
        gem_session_reset(s);
        memcpy(ids, toks + (size_t)c * n_ctx, (size_t)n_ctx * sizeof *ids);
        ids[0] = tok_bos(gem_engine_tok(e));
        if (gem_session_eval_all(s, ids, n_ctx, lg, &err)) {
            CHECKF(0, "%s", err.msg);
            ok = 0;
            break;
        }
        for (int j = n_ctx / 2; j <= n_ctx - 2; j++) {
            const float *row = lg + (size_t)j * V;
            double m = row[0];
            for (uint32_t i = 1; i < V; i++) m = row[i] > m ? row[i] : m;
            double se = 0;
            for (uint32_t i = 0; i < V; i++) se += exp((double)row[i] - m);
            const double v = m + log(se) - (double)row[toks[(size_t)c * n_ctx + j + 1]];
            sum += v;
            sum2 += v * v;
            r->scored++;
        }
        const double mean = sum / r->scored, var = sum2 / r->scored - mean * mean;
        r->running[c] = r->ppl = exp(mean);
        r->running_err[c] = r->err = r->ppl * sqrt(var / (r->scored - 1));
    }
    free(ids);
    free(lg);
    gem_session_free(s);
    gem_engine_close(e);
    return ok ? 0 : -1;
}

static double rel(double a, double b) { return fabs(a - b) / fabs(b); }

static double num(const json *o, const char *k) {
    const json *v = json_get(o, k);
    return v && v->type == JSON_NUMBER ? v->num : NAN;
}

/* The run just made against r: stdout's two lines and the JSON file. */
static void check_run(const char *what, const result *r, int n_ctx, size_t n_tokens) {
    char *out = slurp_in_dir("out"), *js = slurp_in_dir("ppl.json");
    /* "[1]x,[2]y,...," then "Final estimate: PPL = X +/- Y" */
    const char *p = out;
    int k = 0, idx;
    double x;
    int used;
    while (sscanf(p, "[%d]%lf,%n", &idx, &x, &used) == 2) {
        CHECKF(idx == k + 1, "%s: entry %d is numbered %d", what, k + 1, idx);
        if (k < r->n_chunks)
            CHECKF(fabs(x - r->running[k]) <= 5.1e-5 + 1e-6 * r->running[k], "%s: chunk %d printed %.4f, expected %.6f",
                   what, k + 1, x, r->running[k]);
        k++;
        p += used;
    }
    CHECKF(k == r->n_chunks, "%s: %d chunk estimates printed, expected %d: %s", what, k, r->n_chunks, out);
    double fp = NAN, fe = NAN;
    const char *fl = strstr(out, "\nFinal estimate: PPL = ");
    CHECKF(fl && sscanf(fl, "\nFinal estimate: PPL = %lf +/- %lf", &fp, &fe) == 2, "%s: no final line: %s", what, out);
    CHECKF(fabs(fp - r->ppl) <= 5.1e-5 + 1e-6 * r->ppl, "%s: final PPL %.4f, expected %.6f", what, fp, r->ppl);
    CHECKF(fabs(fe - r->err) <= 5.1e-6 + 1e-5 * r->err, "%s: final error %.5f, expected %.6f", what, fe, r->err);

    gem_err err = {{0}};
    json *j = json_parse(js, strlen(js), &err);
    CHECKF(j != NULL, "%s: JSON: %s", what, err.msg);
    if (j) {
        CHECKF(rel(num(j, "ppl"), r->ppl) < 1e-6, "%s: ppl %.12g, independent %.12g (rel %.3g)", what, num(j, "ppl"), r->ppl,
               rel(num(j, "ppl"), r->ppl));
        CHECKF(rel(num(j, "stderr"), r->err) < 1e-5, "%s: stderr %.12g, independent %.12g", what, num(j, "stderr"), r->err);
        CHECK(num(j, "n_ctx") == n_ctx);
        CHECK(num(j, "n_chunks") == r->n_chunks);
        CHECK(num(j, "n_chunks_max") == (double)(n_tokens / (size_t)n_ctx));
        CHECKF(num(j, "tokens") == (double)n_tokens, "%s: tokens %g, expected %zu", what, num(j, "tokens"), n_tokens);
        CHECKF(num(j, "scored") == (double)r->scored, "%s: scored %g, expected %ld", what, num(j, "scored"), r->scored);
        CHECK(json_get_str(j, "model") && !strcmp(json_get_str(j, "model"), model));
        const json *ch = json_get(j, "chunks");
        CHECK(ch && ch->type == JSON_ARRAY && ch->len == (size_t)r->n_chunks);
        double worst = 0;
        for (int c = 0; ch && c < r->n_chunks && c < (int)ch->len; c++) {
            const double d = rel(json_at(ch, (size_t)c)->num, r->running[c]);
            worst = d > worst ? d : worst;
        }
        CHECKF(worst < 1e-6, "%s: running estimates differ by %.3g (relative)", what, worst);
        printf("%s: ppl %.6f (independent %.6f, rel diff %.2g) +/- %.6f, %d chunks, %ld tokens scored\n", what,
               num(j, "ppl"), r->ppl, rel(num(j, "ppl"), r->ppl), num(j, "stderr"), r->n_chunks, r->scored);
    }
    json_free(j);
    free(js);
    free(out);
}

static void expect_error(int want_rc, const char *args, const char *want) {
    int rc = run_gem(args);
    char *err = slurp_in_dir("err");
    CHECKF(rc == want_rc, "gem perplexity %s exited %d, expected %d (%s)", args, rc, want_rc, err);
    CHECK_ERR(err, want);
    CHECKF(!strstr(err, "Sanitizer") && !strstr(err, "Segmentation"), "%s", err);
    free(err);
}

int main(void) {
    if (getenv("GEM") && *getenv("GEM")) gem = getenv("GEM");
    if (access(gem, X_OK) != 0) {
        fprintf(stderr, "test_perplexity: %s is not built (make gem)\n", gem);
        return 1;
    }
    if (!mkdtemp(dir)) return 1;
    snprintf(model, sizeof model, "%s/tiny.gguf", dir);
    snprintf(text, sizeof text, "%s/text.txt", dir);

    /* what `gem synth --profile gemma4-tiny --type f32 --seed 1` writes */
    gem_err err = {{0}};
    CHECKF(!test_synth_tiny(model, 1, 0, &err), "%s", err.msg);

    /* about 35 tokens, ending in a newline that is dropped */
    static const char body[] = "The quick brown fox jumps over the lazy dog. Perplexity is the exponential of the "
                               "mean negative log-likelihood of each token given the ones before it.\n";
    write_file(text, body);
    gem_engine_opts eo = {0};
    eo.model_path = model;
    gem_engine *e = gem_engine_open(&eo, &err);
    tok_ids toks = {0}, with_nl = {0};
    CHECKF(e != NULL, "%s", err.msg);
    if (!e) goto out;
    tok_encode(gem_engine_tok(e), body, strlen(body) - 1, 1, 0, &toks);
    tok_encode(gem_engine_tok(e), body, strlen(body), 1, 0, &with_nl);
    gem_engine_close(e);
    CHECKF(toks.n >= 32 && toks.n != with_nl.n, "%zu tokens (%zu with the newline)", toks.n, with_nl.n);
    CHECK(toks.v[0] == 2);

    char args[2048];
    result r;
    /* (a) n_ctx 8, one piece per chunk */
    snprintf(args, sizeof args, "-m %s -f %s -c 8 --json %s/ppl.json", model, text, dir);
    CHECKF(run_gem(args) == 0, "gem perplexity %s failed", args);
    if (!reference(toks.v, toks.n, 8, 64, &r)) check_run("-c 8", &r, 8, toks.n);
    /* (c) --chunks 2 keeps the first two chunks: the running estimate after two */
    const result all8 = r;
    snprintf(args, sizeof args, "-m %s -f %s -c 8 --chunks 2 --json %s/ppl.json", model, text, dir);
    CHECKF(run_gem(args) == 0, "gem perplexity %s failed", args);
    result two = all8;
    two.n_chunks = 2;
    two.scored = 2 * 3;
    two.ppl = all8.running[1];
    two.err = all8.running_err[1];
    check_run("-c 8 --chunks 2", &two, 8, toks.n);
    /* pieces of 4 tokens, n_ctx 10: the first piece (before n_ctx/2) without
     * logits, a piece straddling n_ctx/2 and a short last piece */
    snprintf(args, sizeof args, "-m %s -f %s -c 10 --tile 4 -t 1 --json %s/ppl.json", model, text, dir);
    CHECKF(run_gem(args) == 0, "gem perplexity %s failed", args);
    if (!reference(toks.v, toks.n, 10, 4, &r)) check_run("-c 10 --tile 4", &r, 10, toks.n);

    /* (b) errors, with a clear message and no crash */
    snprintf(args, sizeof args, "-m %s -f %s/none.txt", model, dir);
    expect_error(1, args, "cannot open");
    expect_error(1, args, "none.txt");
    char empty[300];
    snprintf(empty, sizeof empty, "%s/empty.txt", dir);
    write_file(empty, "");
    snprintf(args, sizeof args, "-m %s -f %s", model, empty);
    expect_error(1, args, "empty.txt is empty");
    snprintf(args, sizeof args, "-m %s -f %s", model, dir);
    expect_error(1, args, "not a regular file");
    char shortp[300];
    snprintf(shortp, sizeof shortp, "%s/short.txt", dir);
    write_file(shortp, "Hello world\n");
    snprintf(args, sizeof args, "-m %s -f %s -c 8", model, shortp);
    expect_error(1, args, "tokenizes to only 3 tokens; a context of 8 needs at least 16");
    /* one token short of 2 x n_ctx (the reference's own limit) */
    char want[128];
    const int c_short = (int)toks.n / 2 + 1;
    snprintf(args, sizeof args, "-m %s -f %s -c %d", model, text, c_short);
    snprintf(want, sizeof want, "tokenizes to only %zu tokens; a context of %d needs at least %d", toks.n, c_short,
             2 * c_short);
    expect_error(1, args, want);
    snprintf(args, sizeof args, "-m %s -f %s", model, text); /* the default context of 512 */
    expect_error(1, args, "needs at least 1024");
    snprintf(args, sizeof args, "-m %s/none.gguf -f %s -c 8", dir, text);
    expect_error(1, args, "cannot open");
    snprintf(args, sizeof args, "-m %s -f %s -c 8 --json %s/no/such/dir.json", model, text, dir);
    expect_error(1, args, "cannot write");
    snprintf(args, sizeof args, "-m %s -f %s -c 2", model, text);
    expect_error(2, args, "bad value for -c");
    snprintf(args, sizeof args, "-m %s -f %s --chunks 0", model, text);
    expect_error(2, args, "bad value for --chunks");
    snprintf(args, sizeof args, "-m %s -f %s --frob", model, text);
    expect_error(2, args, "unknown option '--frob'");
    snprintf(args, sizeof args, "-m %s", model);
    expect_error(2, args, "usage: gem perplexity");

out:
    tok_ids_free(&toks);
    tok_ids_free(&with_nl);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "test_perplexity: could not remove %s\n", dir);
    return test_report("test_perplexity");
}
