/* Subcommands of the `gem` executable. Each takes the arguments after its
 * name and returns the process exit status; errors go to stderr as
 * "gem CMD: error: ...". */
#ifndef GEM_CLI_CLI_H
#define GEM_CLI_CLI_H

#include <stdint.h>

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

/* "gem 0.1.0": the version string (also the server's build info). */
const char *cli_version(void);

/* Parses a number in [lo, hi]; -1 for anything else (empty, trailing text,
 * out of range). */
int cli_parse_num(const char *s, double lo, double hi, double *out);

/* "--kv-type" values: "f32" -> 0, "f16" -> 1; -1 for anything else. */
int cli_parse_kv_type(const char *s);

/* Path of a data file shipped next to the executable (data/...), found via
 * GEM_DATA_DIR, then the executable's directory, then the working directory.
 * Writes into buf and returns it. */
const char *cli_data_path(const char *rel, char *buf, unsigned long cap);

/* A 40-column progress bar on stderr ("gem CMD: [####....]  45.0%"),
 * redrawn when the permille changes; *last holds the state (start at -1). */
void cli_progress_bar(const char *cmd, uint64_t done, uint64_t total, int *last);

#endif
