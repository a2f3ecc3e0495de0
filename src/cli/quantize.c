/* gem quantize: a Gemma 4 GGUF in f32/f16/bf16 to q8_0, q4_0, a K-quant
 * mix or q6_k, byte-identical to the pinned llama-quantize (see convert/quantize.h). */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "convert/quantize.h"
#include "gguf/gguf.h"
#include "quant/quant.h"

#define USAGE \
    "usage: gem quantize IN.gguf OUT.gguf --type q8_0|q4_0|q4_k_m|q4_k_s|q5_k_m|q5_k_s|q6_k [--embd-type TYPE] " \
    "[-t THREADS]"

static int fail(const char *msg, const char *arg) { return cli_fail("quantize", msg, arg); }

int cli_quantize(int argc, char **argv) {
    const char *in = NULL, *out = NULL, *type = NULL, *embd = NULL;
    double threads = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--type") || !strcmp(a, "--embd-type") || !strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!v) return fail("missing value for", a);
            if (!strcmp(a, "--type")) type = v;
            else if (!strcmp(a, "--embd-type")) embd = v;
            else if (cli_parse_num(v, 1, 1024, &threads) || threads != (int)threads)
                return fail("-t needs a thread count (1-1024)", v);
            i++;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("%s\n", USAGE);
            return 0;
        } else if (a[0] == '-' && a[1]) {
            return fail("unknown option", a);
        } else if (!in) {
            in = a;
        } else if (!out) {
            out = a;
        } else {
            return fail("unexpected argument", a);
        }
    }
    if (!in || !out || !type) return fail(USAGE, NULL);
    gem_quantize_opts o = {0};
    o.in_path = in;
    o.out_path = out;
    o.type = type;
    o.embd_type = -1;
    o.threads = (int)threads;
    if (gem_quantize_ftype(type) < 0) return fail("unknown type (" GEM_QUANTIZE_TYPES ")", type);
    if (embd) {
        o.embd_type = quant_type_from_name(embd);
        if (o.embd_type < 0) return fail("unknown embedding type", embd);
    }
    cli_progress pg;
    cli_progress_start(&pg, "quantize", &o.progress, &o.progress_ctx);
    gem_err err = {{0}};
    gem_quantize_stats st = {0};
    if (gem_quantize(&o, &st, &err)) return cli_progress_fail(&pg, err.msg);
    double s = cli_progress_seconds(&pg);
    fprintf(stderr, "gem quantize: wrote %s (%s, file type %u): %u of %u tensors quantized, %.1f -> %.1f MiB in %.2f s (%.0f MB/s read)\n",
            out, type, st.ftype, st.n_quantized, st.n_tensors, st.in_bytes / 1048576.0, st.out_bytes / 1048576.0, s,
            s > 0 ? st.in_bytes / s / 1e6 : 0.0);
    /* Say plainly when the result is outside what gem itself runs. */
    gguf_file *f = gguf_open(out, &err);
    int n_layer;
    if (f && gem_quantize_contract(f, &n_layer, &err))
        fprintf(stderr, "gem quantize: note: gem's contract does not accept this file (%s); llama.cpp loads it\n",
                err.msg);
    gguf_close(f);
    return 0;
}
