/* gem: entry point and subcommand dispatch. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/device.h"
#include "cli/cli.h"

#define GEM_VERSION "0.1.0"

static void usage(FILE *out) {
    fprintf(out,
            "gem %s: a native inference engine for Gemma 4\n"
            "\n"
            "usage: gem COMMAND [options]\n"
            "\n"
            "commands:\n"
            "  run -m FILE -p PROMPT [-n N] [--temp T] [--chat] [--ids] ...\n"
            "                                      generate text (gem run --help for every option)\n"
            "  chat -m FILE [--system TEXT] [--think]  interactive chat (Ctrl-C stops an answer)\n"
            "  serve -m FILE [--host H] [--port P] [--api-key KEY] ...\n"
            "                                      OpenAI-compatible HTTP server (gem serve --help)\n"
            "  inspect FILE [--keys] [--tensors]   describe and validate a GGUF model\n"
            "  synth --profile P --type T [--embd-type T] [--seed N] [--ctx-train N] [-t N] -o FILE\n"
            "                                      write a synthetic model with the exact layout\n"
            "  quantize IN.gguf OUT.gguf --type q8_0|q4_0|q4_k_m|q5_k_m|q6_k|... [--embd-type T] [-t N]\n"
            "                                      quantize an f32/f16/bf16 model (same bytes as llama-quantize)\n"
            "  convert HF_DIR -o FILE.gguf [--type f32|bf16|f16]\n"
            "                                      Hugging Face safetensors checkpoint to GGUF\n"
            "  tokenize -m FILE [--no-bos] [--special] [--detok]\n"
            "                                      text on stdin to token ids (or ids back to text)\n"
            "  bench -m FILE [--backend B] [--prompt N,..] [--gen N] [--depth N,..] [--reps R] [--json OUT]\n"
            "                                      prefill and decode speed (median of R runs)\n"
            "  perplexity -m FILE -f TEXT [-c N] [--chunks N] [--backend B] [--json OUT]\n"
            "                                      perplexity of a text, as llama-perplexity computes it\n"
            "  profile -m FILE --backend cuda [--depth N] [--rows N] [--samples S] [--json OUT]\n"
            "                                      device time of one decode step (or prefill tile) per stage\n"
            "  devices                             list the compute backends and devices\n"
            "  help                                this text\n"
            "  version                             print the version\n"
            "\n"
            "profiles: gemma4-31b, gemma4-12b, gemma4-1b, gemma4-tiny; qwen35-27b, qwen35-small, qwen35-tiny (CPU)\n",
            GEM_VERSION);
}

const char *cli_version(void) { return "gem " GEM_VERSION; }

int cli_kv_type_arg(const char *cmd, const char *v, gemma4_kv_type *out) {
    const int t = gemma4_kv_type_parse(v);
    if (t < 0) {
        fprintf(stderr, "gem %s: error: --kv-type wants " GEMMA4_KV_TYPE_CHOICES ", not '%s'\n", cmd, v ? v : "");
        return -1;
    }
    *out = (gemma4_kv_type)t;
    return 0;
}

int cli_parse_num(const char *s, double lo, double hi, double *out) {
    if (!s) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) return -1;
    *out = v;
    return 0;
}

const char *cli_data_path(const char *rel, char *buf, unsigned long cap) {
    const char *env = getenv("GEM_DATA_DIR");
    if (env && *env) {
        snprintf(buf, cap, "%s/%s", env, rel);
        return buf;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;
            snprintf(buf, cap, "%s/data/%s", exe, rel);
            if (access(buf, R_OK) == 0) return buf;
        }
    }
    snprintf(buf, cap, "data/%s", rel);
    return buf;
}

/* Each backend as the seam sees it (backend_devices): the CPU and what it
 * is, then the GPUs, one line each. */
static int cmd_devices(void) {
    char buf[512];
    backend_describe("cpu", 0, buf, sizeof buf);
    printf("cpu: available (%s)\n", buf);
    gem_err err;
    int built = 0;
    const int n = backend_devices("cuda", &built, &err);
    if (n < 0) {
        printf("cuda: %s%s\n", built ? "compiled in; " : "", err.msg);
        return 0;
    }
    printf("cuda: compiled in; %d device%s\n", n, n == 1 ? "" : "s");
    for (int i = 0; i < n; i++) {
        backend_describe("cuda", i, buf, sizeof buf);
        printf("  %s\n", buf);
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "inspect")) return cli_inspect(argc - 2, argv + 2);
    if (!strcmp(cmd, "synth")) return cli_synth(argc - 2, argv + 2);
    if (!strcmp(cmd, "tokenize")) return cli_tokenize(argc - 2, argv + 2);
    if (!strcmp(cmd, "run")) return cli_run(argc - 2, argv + 2);
    if (!strcmp(cmd, "chat")) return cli_chat(argc - 2, argv + 2);
    if (!strcmp(cmd, "bench")) return cli_bench(argc - 2, argv + 2);
    if (!strcmp(cmd, "quantize")) return cli_quantize(argc - 2, argv + 2);
    if (!strcmp(cmd, "convert")) return cli_convert(argc - 2, argv + 2);
    if (!strcmp(cmd, "serve")) return cli_serve(argc - 2, argv + 2);
    if (!strcmp(cmd, "perplexity")) return cli_perplexity(argc - 2, argv + 2);
    if (!strcmp(cmd, "profile")) return cli_profile(argc - 2, argv + 2);
    if (!strcmp(cmd, "devices")) return cmd_devices();
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        printf("gem %s\n", GEM_VERSION);
        return 0;
    }
    fprintf(stderr, "gem: error: unknown command '%s' (try 'gem help')\n", cmd);
    return 2;
}
