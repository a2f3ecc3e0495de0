/* gem run: generate from a prompt. Text streams to stdout as whole UTF-8
 * characters; timings (load, prompt tok/s, time to first token, decode
 * tok/s) go to stderr. --ids prints only the generated token ids on one
 * line (an interface external checks use). --top-logprobs K prints instead
 * one JSON line per step: the chosen id, its log-probability and the K most
 * likely ids with theirs (log-softmax of the soft-capped logits over the
 * whole vocabulary); --force-ids makes the first steps take given ids
 * (teacher forcing, for comparisons along another implementation's path).
 * Both are what bench/logits.py reads. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chat/chat.h"
#include "cli/cli.h"
#include "util/file.h"
#include "engine/engine.h"
#include "engine/logprobs.h"
#include "engine/sampler.h"
#include "util/clock.h"

static void emit_stdout(const char *p, size_t n, void *ctx) {
    (void)ctx;
    fwrite(p, 1, n, stdout);
    fflush(stdout);
}

static void chat_event_out(const chat_event *ev, void *ctx) {
    (void)ctx;
    if (ev->kind == CHAT_EV_CONTENT) emit_stdout(ev->text, ev->len, NULL);
    else if (ev->kind == CHAT_EV_REASONING) fwrite(ev->text, 1, ev->len, stderr);
    else printf("\n[tool call] %s %s\n", ev->name, ev->arguments);
}

/* What the generation callbacks write to. */
typedef struct {
    const tok *tk;
    chat_parser *cp; /* --chat: the answer goes through the chat parser */
    int32_t *out;    /* the generated ids (--ids) */
    int n_out;
    int n_top;       /* --top-logprobs K */
    int32_t *top;
    double *top_lp;
    cli_prefill bar; /* a long prompt's progress on the terminal */
} run_io;

static void on_prefill(void *ctx, long done, long total) { cli_prefill_draw(&((run_io *)ctx)->bar, done, total); }

static void print_logprobs(int step, size_t pos, int32_t id, int forced, const float *logits, int n_vocab, int k,
                           int32_t *top, double *lp);

static void on_token(void *ctx, const gem_gen_token *t) {
    run_io *io = ctx;
    if (io->n_top)
        print_logprobs((int)t->index, t->pos, t->id, t->forced, t->logits, (int)tok_n_vocab(io->tk), io->n_top, io->top,
                       io->top_lp);
    if (!t->end) io->out[io->n_out++] = t->id;
}

static int on_text(void *ctx, const char *p, size_t n) {
    run_io *io = ctx;
    if (io->cp) chat_parser_feed(io->cp, p, n);
    else emit_stdout(p, n, NULL);
    return 0;
}

static int usage(void) {
    fprintf(stderr,
            "usage: gem run -m FILE (-p PROMPT | -f FILE | --prompt-ids IDS) [-n N] [--temp T] [--top-k K] [--top-p P]\n"
            "               [--min-p P] [--repeat-penalty R] [--presence-penalty P] [--frequency-penalty F]\n"
            "               [--seed S] [--ctx N] [-t THREADS] [--backend cpu|cuda] [--gpus N] [-tp N] [--kv-type f32|f16|f16-full] [--cpu-ref]\n"
            "               [--compat-llama] [--chat]\n"
            "               [--ignore-eos] [--ids] [--top-logprobs K] [--force-ids IDS]\n"
            "               [--mtp FILE | --no-mtp] [--draft-max N] [--draft-min N] [--draft-p-min P] [--draft-p-prod P]\n"
            "               [--draft-fixed] [--json-schema FILE | --json-object]\n");
    return 2;
}

/* One --top-logprobs line: step, the position the distribution predicts
 * (tokens evaluated before it), the chosen id and whether it was forced,
 * the argmax, the log-sum-exp of the logits (logit = logprob + lse), the
 * chosen id's logprob and the top K. */
static void print_logprobs(int step, size_t pos, int32_t id, int forced, const float *logits, int n_vocab, int k,
                           int32_t *top, double *lp) {
    double lse = gem_top_logprobs(logits, n_vocab, k, top, lp);
    printf("{\"step\":%d,\"pos\":%zu,\"id\":%d,\"forced\":%s,\"argmax\":%d,\"lse\":%.9g,\"logprob\":%.9g,\"top_ids\":[",
           step, pos, id, forced ? "true" : "false", top[0], lse, (double)logits[id] - lse);
    for (int j = 0; j < k; j++) printf(j ? ",%d" : "%d", top[j]);
    printf("],\"top_logprobs\":[");
    for (int j = 0; j < k; j++) printf(j ? ",%.9g" : "%.9g", lp[j]);
    printf("]}\n");
}

/* Token ids separated by spaces, commas or brackets; A..B stands for A,
 * A + 1, .., B (B >= A: long synthetic prompts for profiling without an
 * argument of hundreds of KB). At most PARSE_IDS_MAX ids in all, ranges
 * included: 16 times the longest context of any profile, and the count
 * stays an int. */
#define PARSE_IDS_MAX (1 << 22)
static int parse_ids(const char *s, int32_t **ids, int *n) {
    size_t cap = 64, k = 0;
    int32_t *v = malloc(cap * sizeof *v);
    while (v && *s) {
        while (*s == ' ' || *s == ',' || *s == '[' || *s == ']' || *s == '\n') s++;
        if (!*s) break;
        char *end;
        errno = 0;
        long x = strtol(s, &end, 10), y;
        if (end == s || errno || x < 0 || x > INT32_MAX) { free(v); return -1; }
        s = end;
        y = x;
        if (s[0] == '.' && s[1] == '.') {
            errno = 0;
            y = strtol(s + 2, &end, 10);
            if (end == s + 2 || errno || y < x || y > INT32_MAX) { free(v); return -1; }
            s = end;
        }
        if ((size_t)(y - x) >= PARSE_IDS_MAX - k) { free(v); return -1; }
        for (long id = x; id <= y; id++) {
            if (k == cap) {
                cap *= 2;
                int32_t *nv = realloc(v, cap * sizeof *v);
                if (!nv) { free(v); return -1; }
                v = nv;
            }
            v[k++] = (int32_t)id;
        }
    }
    *ids = v;
    *n = (int)k;
    return v && k ? 0 : -1;
}

int cli_run(int argc, char **argv) {
    gem_engine_opts eo = {0};
    gem_sampling sp = gem_sampling_default();
    sp.temp = 0.8f;
    sp.top_k = 64;
    sp.top_p = 0.95f;
    const char *prompt = NULL, *prompt_ids = NULL, *force_ids = NULL, *prompt_file = NULL;
    char *file_text = NULL; /* -f: the prompt read whole */
    double n_predict = 128, top_logprobs = 0;
    int chat = 0, ignore_eos = 0, print_ids = 0, json_out = 0, opens_reasoning = 0;
    const char *schema = NULL; /* --json-schema FILE; with json_out and NULL: --json-object */
    char mbuf[4096], mtp_buf[4096];
    cli_mtp mtp;
    cli_mtp_init(&mtp);
    cli_tp tp;
    cli_tp_init(&tp);
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        double x;
        int used, mr = cli_mtp_arg("run", &mtp, a, v, &used);
        if (mr < 0) return 2;
        if (mr > 0) {
            i += used - 1;
            continue;
        }
        if ((mr = cli_tp_arg("run", &tp, a, v, &used)) < 0) return 2;
        if (mr > 0) {
            i += used - 1;
            continue;
        }
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) { if (!v) return usage(); eo.model_path = v; i++; }
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) { if (!v) return usage(); prompt = v; i++; }
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) { if (!v) return usage(); prompt_file = v; i++; }
        else if (!strcmp(a, "--prompt-ids")) { if (!v) return usage(); prompt_ids = v; i++; }
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) { if (cli_parse_num(v, 0, 1e9, &n_predict)) goto bad; i++; }
        else if (!strcmp(a, "--temp")) { if (cli_parse_num(v, 0, 100, &x)) goto bad; sp.temp = (float)x; i++; }
        else if (!strcmp(a, "--top-k")) { if (cli_parse_num(v, 0, 1e9, &x)) goto bad; sp.top_k = (int)x; i++; }
        else if (!strcmp(a, "--top-p")) { if (cli_parse_num(v, 0, 1, &x)) goto bad; sp.top_p = (float)x; i++; }
        else if (!strcmp(a, "--min-p")) { if (cli_parse_num(v, 0, 1, &x)) goto bad; sp.min_p = (float)x; i++; }
        else if (!strcmp(a, "--repeat-penalty")) { if (cli_parse_num(v, 0.01, 100, &x)) goto bad; sp.repeat_penalty = (float)x; i++; }
        else if (!strcmp(a, "--presence-penalty")) { if (cli_parse_num(v, -100, 100, &x)) goto bad; sp.presence_penalty = (float)x; i++; }
        else if (!strcmp(a, "--frequency-penalty")) { if (cli_parse_num(v, -100, 100, &x)) goto bad; sp.frequency_penalty = (float)x; i++; }
        else if (!strcmp(a, "--seed")) { if (cli_parse_num(v, 0, 1.8e19, &x)) goto bad; sp.seed = (uint64_t)x; i++; }
        else if (!strcmp(a, "--ctx") || !strcmp(a, "-c")) { if (cli_parse_num(v, 1, 1 << 24, &x)) goto bad; eo.n_ctx = (int)x; i++; }
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { if (cli_parse_num(v, 1, 1024, &x)) goto bad; eo.threads = (int)x; i++; }
        else if (!strcmp(a, "--backend")) { if (!v) return usage(); eo.backend = v; i++; }
        else if (!strcmp(a, "--kv-type")) { if (cli_kv_type_arg("run", v, &eo.kv_type)) return 2; i++; }
        else if (!strcmp(a, "--cpu-ref")) eo.cpu_ref = 1;
        else if (!strcmp(a, "--compat-llama")) eo.compat_llama = 1;
        else if (!strcmp(a, "--chat")) chat = 1;
        else if (!strcmp(a, "--ignore-eos")) ignore_eos = 1;
        else if (!strcmp(a, "--ids")) print_ids = 1;
        else if (!strcmp(a, "--top-logprobs")) { if (cli_parse_num(v, 1, 1000, &top_logprobs)) goto bad; i++; }
        else if (!strcmp(a, "--force-ids")) { if (!v) return usage(); force_ids = v; i++; }
        else if (!strcmp(a, "--json-schema")) { if (!v) return usage(); json_out = 1, schema = v; i++; }
        else if (!strcmp(a, "--json-object")) json_out = 1, schema = NULL;
        else {
            fprintf(stderr, "gem run: error: unknown option '%s'\n", a);
            return usage();
        }
        continue;
    bad:
        fprintf(stderr, "gem run: error: bad value for %s: '%s'\n", a, v ? v : "");
        return 2;
    }
    if (cli_tp_resolve("run", &tp, &eo.backend, &eo.shards)) return 2;
    if (!eo.model_path) {
        eo.model_path = cli_data_path("models/default.gguf", mbuf, sizeof mbuf);
        if (access(eo.model_path, R_OK)) {
            fprintf(stderr, "gem run: error: no -m given and the embedded default model %s is missing (make unpacks it)\n",
                    eo.model_path);
            return 1;
        }
    }
    if (!!prompt + !!prompt_file + !!prompt_ids > 1) {
        fprintf(stderr, "gem run: error: give one of -p, -f and --prompt-ids\n");
        return 2;
    }
    if (prompt_file) {
        /* the whole file, as llama.cpp's -f reads it (one trailing newline dropped) */
        gem_err ferr = {{0}};
        size_t len = 0;
        if (!(file_text = file_read(prompt_file, 0, &len, &ferr))) {
            fprintf(stderr, "gem run: error: -f: %s\n", ferr.msg);
            return 1;
        }
        if (strlen(file_text) != len) {
            fprintf(stderr, "gem run: error: -f: %s holds a NUL byte (a prompt is text)\n", prompt_file);
            free(file_text);
            return 1;
        }
        if (len && file_text[len - 1] == '\n') file_text[len - 1] = 0;
        prompt = file_text;
    }
    if (!prompt && !prompt_ids) return usage();
    gem_err err = {{0}};
    /* structured output: the answer follows the schema (gem run's chat
     * prompt does not enable thinking, so no thought comes before it) */
    gram *grammar = NULL;
    if (json_out) {
        if (!(grammar = cli_grammar(schema, &err))) {
            fprintf(stderr, "gem run: error: %s\n", err.msg);
            free(file_text);
            return 1;
        }
    }
    eo.mtp_path = cli_mtp_path(&mtp, eo.model_path, 1, mtp_buf, sizeof mtp_buf);
    double t0 = gem_now_s();
    gem_engine *e = cli_engine_open("run", &eo, &mtp, &err);
    if (!e) {
        fprintf(stderr, "gem run: error: %s\n", err.msg);
        gram_free(grammar);
        free(file_text);
        return 1;
    }
    const tok *tk = gem_engine_tok(e);
    double t_load = gem_now_s() - t0;
    int32_t *ids = NULL;
    int n_ids = 0, rc = 1;
    tok_ids enc = {0};
    gem_session *s = NULL;
    run_io io = {0};
    int32_t *forced = NULL, *top = NULL;
    double *top_lp = NULL;
    int n_forced = 0;
    const int n_top = (int)top_logprobs;
    if (force_ids && parse_ids(force_ids, &forced, &n_forced)) {
        fprintf(stderr, "gem run: error: --force-ids needs token ids\n");
        goto done;
    }
    for (int i = 0; i < n_forced; i++)
        if (forced[i] >= (int32_t)tok_n_vocab(tk)) {
            fprintf(stderr, "gem run: error: --force-ids: id %d is outside the vocabulary\n", forced[i]);
            goto done;
        }
    if (n_top && (!(top = malloc((size_t)n_top * sizeof *top)) || !(top_lp = malloc((size_t)n_top * sizeof *top_lp))))
        goto done;
    if (prompt_ids) {
        if (parse_ids(prompt_ids, &ids, &n_ids)) {
            fprintf(stderr, "gem run: error: --prompt-ids needs token ids (numbers, or ranges A..B with B >= A; "
                            "at most %d in all)\n", PARSE_IDS_MAX);
            goto done;
        }
    } else if (chat) {
        json *msgs = json_new(JSON_ARRAY), *m = json_new(JSON_OBJECT);
        json_set(m, "role", json_new_str("user", 4));
        json_set(m, "content", json_new_str(prompt, strlen(prompt)));
        json_push(msgs, m);
        strbuf text = {0};
        chat_render_opts ro = {msgs, NULL, -1, 1, "<bos>", gem_engine_chat_format(e)};
        int r = chat_render(&ro, &text, &err);
        opens_reasoning = chat_render_opens_reasoning(&ro);
        json_free(msgs);
        if (r || tok_encode(tk, text.p, text.len, 0, 1, &enc)) {
            fprintf(stderr, "gem run: error: %s\n", r ? err.msg : "out of memory");
            sb_free(&text);
            goto done;
        }
        sb_free(&text);
        ids = enc.v;
        n_ids = (int)enc.n;
        enc.v = NULL;
    } else {
        if (tok_encode(tk, prompt, strlen(prompt), 1, 0, &enc)) goto done;
        ids = enc.v;
        n_ids = (int)enc.n;
        enc.v = NULL;
    }
    if (!(s = gem_session_new(e, &err))) {
        fprintf(stderr, "gem run: error: %s\n", err.msg);
        goto done;
    }
    if (n_ids + (int)n_predict > gem_engine_n_ctx(e)) {
        fprintf(stderr, "gem run: error: prompt (%d tokens) plus %d to generate exceed the context of %d (use --ctx)\n",
                n_ids, (int)n_predict, gem_engine_n_ctx(e));
        goto done;
    }
    io = (run_io){tk, NULL, NULL, 0, n_top, top, top_lp, {0}};
    io.out = malloc(((size_t)n_predict + 1) * sizeof *io.out);
    if (chat && (io.cp = chat_parser_new_format(gem_engine_chat_format(e), chat_event_out, NULL)) && opens_reasoning)
        chat_parser_in_reasoning(io.cp); /* the prompt ends inside <think> */
    if (!io.out || (chat && !io.cp)) goto done;
    gem_gen_params gp = gem_gen_params_default();
    gp.sampling = sp;
    gp.max_tokens = (long)n_predict;
    gp.ignore_eos = ignore_eos;
    gp.force = forced;
    gp.n_force = n_forced;
    gp.want_logits = n_top > 0;
    gp.no_checkpoint = 1; /* one generation: nothing reuses its state */
    gp.grammar = grammar;
    cli_mtp_params(&mtp, &gp);
    /* --ids and --top-logprobs print ids or JSON lines, not the text */
    gem_gen_callbacks cb = {&io, on_token, print_ids || n_top ? NULL : on_text, NULL, on_prefill};
    cli_prefill_init(&io.bar, "run");
    gem_gen_result res;
    if (gem_session_sync(s, ids, (size_t)n_ids, &err) < 0 || gem_session_generate(s, &gp, &cb, &res, &err)) {
        fprintf(stderr, "\ngem run: error: %s\n", err.msg);
        goto done;
    }
    if (n_top) {
        /* the JSON lines were the output */
    } else if (print_ids) {
        for (int i = 0; i < io.n_out; i++) printf(i ? " %d" : "%d", io.out[i]);
        printf("\n");
    } else if (chat) {
        chat_parser_finish(io.cp);
        printf("\n");
    } else {
        printf("\n");
    }
    fflush(stdout); /* the text's last line before the timings when both go to one terminal */
    char mtp_line[200];
    fprintf(stderr,
            "gem run: %s on %s | load %.2f s | prompt %d tokens, %.2f tok/s | first token %.3f s | "
            "decode %ld tokens, %.2f tok/s%s\n",
            gem_engine_profile(e), gem_engine_backend(e), t_load, n_ids, n_ids / (res.prompt_s > 0 ? res.prompt_s : 1e-9),
            res.first_s, res.n_generated,
            res.n_generated > 1 ? (res.n_generated - 1) / (res.decode_s > 0 ? res.decode_s : 1e-9) : 0.0,
            cli_mtp_summary(&res, mtp_line, sizeof mtp_line));
    rc = 0;
done:
    free(forced);
    free(top);
    free(top_lp);
    chat_parser_free(io.cp);
    free(io.out);
    gem_session_free(s);
    free(ids);
    tok_ids_free(&enc);
    gem_engine_close(e);
    gram_free(grammar);
    free(file_text);
    return rc;
}
