/* gem convert: a Hugging Face Gemma 4 checkpoint folder to GGUF (see
 * convert/hf.h). */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "convert/hf.h"
#include "quant/quant.h"

#define USAGE "usage: gem convert HF_DIR -o FILE.gguf [--type f32|bf16|f16] [--name NAME] [--vocab FILE] [-t THREADS]"

static int fail(const char *msg, const char *arg) { return cli_fail("convert", msg, arg); }

int cli_convert(int argc, char **argv) {
    const char *dir = NULL, *out = NULL, *type = NULL, *name = NULL, *vocab = NULL;
    double threads = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-o") || !strcmp(a, "--output") || !strcmp(a, "--type") || !strcmp(a, "--name") ||
            !strcmp(a, "--vocab") || !strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!v) return fail("missing value for", a);
            if (!strcmp(a, "--type")) type = v;
            else if (!strcmp(a, "--name")) name = v;
            else if (!strcmp(a, "--vocab")) vocab = v;
            else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
                if (cli_parse_num(v, 1, 1024, &threads) || threads != (int)threads)
                    return fail("-t needs a thread count (1-1024)", v);
            } else out = v;
            i++;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("%s\n", USAGE);
            return 0;
        } else if (a[0] == '-' && a[1]) {
            return fail("unknown option", a);
        } else if (!dir) {
            dir = a;
        } else {
            return fail("unexpected argument", a);
        }
    }
    if (!dir || !out) return fail(USAGE, NULL);
    gem_convert_opts o = {0};
    o.dir = dir;
    o.out_path = out;
    o.name = name;
    o.type = -1;
    o.threads = (int)threads;
    /* Qwen3.5 checkpoints take their tokenizer keys from a vocabulary GGUF
     * (convert/hf_qwen35.h); Gemma's come from the checkpoint */
    char vbuf[4096];
    o.vocab_path = vocab ? vocab : cli_data_path("vocab/qwen35.gguf", vbuf, sizeof vbuf);
    if (type) {
        o.type = quant_type_from_name(type);
        if (o.type != QT_F32 && o.type != QT_F16 && o.type != QT_BF16) return fail("--type must be f32, bf16 or f16", type);
    }
    cli_progress pg;
    cli_progress_start(&pg, "convert", &o.progress, &o.progress_ctx);
    gem_err err = {{0}};
    gem_convert_stats st = {0};
    if (gem_convert(&o, &st, &err)) return cli_progress_fail(&pg, err.msg);
    double s = cli_progress_seconds(&pg);
    fprintf(stderr, "gem convert: wrote %s (%s, %s matrices, %u tensors from %u shard%s): %.1f -> %.1f MiB in %.2f s (%.0f MB/s read)\n",
            out, st.profile, quant_type_name(st.type), st.n_tensors, st.n_shards, st.n_shards == 1 ? "" : "s",
            st.in_bytes / 1048576.0, st.out_bytes / 1048576.0, s, s > 0 ? st.in_bytes / s / 1e6 : 0.0);
    return 0;
}
