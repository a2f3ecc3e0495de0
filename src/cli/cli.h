/* Subcommands of the `gem` executable. Each takes the arguments after its
 * name and returns the process exit status; errors go to stderr as
 * "gem CMD: error: ...". */
#ifndef GEM_CLI_CLI_H
#define GEM_CLI_CLI_H

#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"

int cli_inspect(int argc, char **argv);
int cli_synth(int argc, char **argv);
int cli_tokenize(int argc, char **argv);
int cli_run(int argc, char **argv);
int cli_chat(int argc, char **argv);
int cli_bench(int argc, char **argv);
int cli_quantize(int argc, char **argv);
int cli_convert(int argc, char **argv);
int cli_serve(int argc, char **argv);
int cli_perplexity(int argc, char **argv);
int cli_profile(int argc, char **argv);

/* gem bench's token ids, the same on every engine and run (gem profile
 * uses them too): BOS 2, then fixed pseudo-random ordinary ids of an
 * n_vocab vocabulary (Gemma's: 1000..200999; a small test vocabulary:
 * any but 0). */
void cli_bench_ids(int32_t *ids, int n, uint32_t n_vocab);
/* The median of v[0..n), n >= 1 (v is sorted in place). */
double cli_median(double *v, int n);

/* "gem 0.1.0": the version string (also the server's build info). */
const char *cli_version(void);

/* Parses a number in [lo, hi]; -1 for anything else (empty, trailing text,
 * out of range). */
int cli_parse_num(const char *s, double lo, double hi, double *out);

/* --kv-type's value v (f32, f16, f16-full: gemma4_kvplan.h) into *out;
 * -1 for anything else, after "gem CMD: error: --kv-type wants f32, f16 or
 * f16-full, not 'V'" on stderr. */
int cli_kv_type_arg(const char *cmd, const char *v, gemma4_kv_type *out);

/* The speculative-decoding options run, chat, serve and bench share
 * (docs/cli.md): --mtp FILE, --no-mtp, --draft-max N, --draft-min N,
 * --draft-p-min P, --draft-p-prod P, --draft-fixed. */
typedef struct {
    const char *path; /* --mtp */
    int off;          /* --no-mtp */
    int fixed;        /* --draft-fixed: draft-max every round (no cost policy) */
    int draft_max, draft_min; /* -1: the engine's defaults */
    double p_min, p_prod; /* < 0: the engine's defaults */
} cli_mtp;
void cli_mtp_init(cli_mtp *m);
/* --draft-p-prod as given; with --draft-fixed and none given 0 (a fixed
 * count stays fixed unless a bound is asked for); else -1 (the engine's
 * default) */
double cli_mtp_p_prod(const cli_mtp *m);
/* 1 when a is one of the options (*used: how many arguments it took), 0
 * when it is not, -1 for a bad or missing value (the message printed as
 * "gem CMD: error: ..."). */
int cli_mtp_arg(const char *cmd, cli_mtp *m, const char *a, const char *v, int *used);
/* The drafter to load: --mtp's file; else, when autodetect (gem run and
 * gem chat), "mtp-<model file name>" beside the model when there is one;
 * NULL with --no-mtp or none found. */
const char *cli_mtp_path(const cli_mtp *m, const char *model, int autodetect, char *buf, size_t cap);
/* gem_engine_open with eo; when the drafter was found beside the model
 * (not named with --mtp) and the engine cannot take it, a warning on
 * stderr and the model without it: a file the user did not ask for never
 * stops the command. */
gem_engine *cli_engine_open(const char *cmd, gem_engine_opts *eo, const cli_mtp *m, gem_err *err);
/* The draft options into generation parameters. */
void cli_mtp_params(const cli_mtp *m, gem_gen_params *gp);
/* " | mtp: N rounds, D drafted, A accepted (P%), T tokens per target step"
 * (empty without rounds), for the closing summary lines. */
const char *cli_mtp_summary(const gem_gen_result *r, char *buf, size_t cap);

/* The tensor-parallel options run, chat, serve and bench share
 * (docs/cli.md): --gpus N (N CUDA GPUs) and -tp/--tensor-parallel-size N
 * (N shards on any backend). 0: not given. */
typedef struct {
    int gpus, tp;
} cli_tp;
void cli_tp_init(cli_tp *t);
/* As cli_mtp_arg: 1 when a is one of them (*used: 2), 0 when not, -1 for
 * a bad value (printed). */
int cli_tp_arg(const char *cmd, cli_tp *t, const char *a, const char *v, int *used);
/* The engine's shard count into *shards (1: none). --gpus sets *backend to
 * "cuda" (another named backend is an error) and checks that many GPUs are
 * present; -1 after the message on stderr. */
int cli_tp_resolve(const char *cmd, const cli_tp *t, const char **backend, int *shards);

/* The grammar of --json-schema FILE (a JSON Schema file: structured
 * output, grammar/grammar.h) or, with path NULL, of --json-object (any
 * JSON object). NULL with err naming the file and what is wrong. */
gram *cli_grammar(const char *path, gem_err *err);

/* Path of a data file shipped next to the executable (data/...), found via
 * GEM_DATA_DIR, then the executable's directory, then the working directory.
 * Writes into buf and returns it. */
const char *cli_data_path(const char *rel, char *buf, unsigned long cap);

/* "gem CMD: error: MSG: ARG" (": ARG" only when arg is not NULL) on
 * stderr; returns 2, the exit status of a usage error. */
int cli_fail(const char *cmd, const char *msg, const char *arg);

/* The progress of a long file command: a 40-column bar on stderr
 * ("gem CMD: [####....]  45.0%") when stderr is a terminal, redrawn when
 * the permille changes, and the command's wall time. */
typedef void (*cli_progress_fn)(uint64_t done, uint64_t total, void *ctx);
typedef struct {
    const char *cmd;
    int last; /* permille drawn last; -1 before the first */
    double t0;
} cli_progress;

/* Starts the clock and sets *fn, *ctx to the callback the command's
 * options take (NULL when stderr is not a terminal). */
void cli_progress_start(cli_progress *p, const char *cmd, cli_progress_fn *fn, void **ctx);

/* Seconds since cli_progress_start. */
double cli_progress_seconds(const cli_progress *p);

/* Ends a half-drawn bar, prints "gem CMD: error: MSG"; returns 1. */
int cli_progress_fail(const cli_progress *p, const char *msg);

/* A long prompt's prefill on a terminal: "gem CMD: prompt [####....]
 * 45.0% 12288/27306 tokens, 2300 tok/s, ETA 7 s" on stderr, redrawn at
 * each prompt tile (gem_gen_callbacks.on_prefill), for prompts of at
 * least CLI_PREFILL_BAR_MIN tokens to evaluate; the line is cleared once
 * the prompt is in. Nothing when stderr is not a terminal. */
#define CLI_PREFILL_BAR_MIN 2048
typedef struct {
    const char *cmd;
    int on;       /* stderr is a terminal */
    int drawn;    /* a line is on the screen */
    long from;    /* the tokens the session already held at the first call */
    double t0;
} cli_prefill;
void cli_prefill_init(cli_prefill *p, const char *cmd);
void cli_prefill_draw(void *ctx, long done, long total); /* ctx: a cli_prefill */

#endif
