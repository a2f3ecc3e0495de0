/* gem synth: write a synthetic model of a profile (see model/gemma4_synth.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "model/gemma4_synth.h"
#include "model/qwen35_synth.h"
#include "quant/quant.h"

static int fail(const char *msg, const char *arg) { return cli_fail("synth", msg, arg); }

static int parse_u64(const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-') return -1;
    *out = v;
    return 0;
}

int cli_synth(int argc, char **argv) {
    const char *profile = NULL, *type = NULL, *embd = "q8_0", *out = NULL, *vocab = NULL;
    uint64_t seed = 1, threads = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = 1;
        if (!strcmp(a, "--profile")) profile = v;
        else if (!strcmp(a, "--type")) type = v;
        else if (!strcmp(a, "--embd-type")) embd = v;
        else if (!strcmp(a, "-o") || !strcmp(a, "--output")) out = v;
        else if (!strcmp(a, "--vocab")) vocab = v;
        else if (!strcmp(a, "--seed")) {
            if (!v || parse_u64(v, &seed)) return fail("--seed needs a non-negative integer", v);
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!v || parse_u64(v, &threads) || threads > 1024) return fail("-t needs a thread count", v);
        } else {
            return fail("unknown option", a);
        }
        if (takes && !v) return fail("missing value for", a);
        i += takes;
    }
    if (!profile || !type || !out)
        return fail("usage: gem synth --profile P --type q4_0|q8_0|f16|bf16|f32 [--embd-type q8_0|q6_k|q4_0] "
                    "[--seed N] [-t N] [--vocab FILE] -o FILE", NULL);
    if (!strncmp(profile, "qwen35", 6)) {
        qwen35_synth_opts q = {0};
        q.profile = qwen35_profile_find(profile);
        if (!q.profile) return fail("unknown profile (qwen35-27b, qwen35-small, qwen35-tiny)", profile);
        const int qt = quant_type_from_name(type), qe = quant_type_from_name(embd);
        if (qt < 0) return fail("unknown type", type);
        if (qe < 0) return fail("unknown embedding type", embd);
        q.type = (uint32_t)qt;
        q.embd_type = (uint32_t)qe;
        int given = 0;
        for (int i = 0; i < argc; i++) given |= !strcmp(argv[i], "--embd-type");
        if (!given && (q.type == QT_F32 || q.type == QT_F16 || q.type == QT_BF16)) q.embd_type = q.type;
        q.seed = seed;
        q.threads = (int)threads;
        q.out_path = out;
        char qbuf[4096];
        q.vocab_path = vocab ? vocab : cli_data_path("vocab/qwen35.gguf", qbuf, sizeof qbuf);
        cli_progress qp;
        cli_progress_start(&qp, "synth", &q.progress, &q.progress_ctx);
        gem_err qerr = {{0}};
        if (qwen35_synth(&q, &qerr)) return cli_progress_fail(&qp, qerr.msg);
        fprintf(stderr, "gem synth: wrote %s (%s, %s matrices, %s embedding, seed %llu) in %.1f s\n", out,
                q.profile->name, quant_type_name(q.type), quant_type_name(q.embd_type), (unsigned long long)seed,
                cli_progress_seconds(&qp));
        return 0;
    }
    gemma4_synth_opts o = {0};
    o.profile = gemma4_profile_find(profile);
    if (!o.profile) return fail("unknown profile (gemma4-31b, gemma4-12b, gemma4-1b, gemma4-tiny, qwen35-27b, qwen35-small, qwen35-tiny)", profile);
    int t = quant_type_from_name(type);
    if (t < 0) return fail("unknown type", type);
    int e = quant_type_from_name(embd);
    if (e < 0) return fail("unknown embedding type", embd);
    o.type = (uint32_t)t;
    o.embd_type = (uint32_t)e;
    /* An unquantized model keeps its embedding in the same type unless told. */
    if ((o.type == QT_F32 || o.type == QT_F16 || o.type == QT_BF16) && !strcmp(embd, "q8_0")) {
        int given = 0;
        for (int i = 0; i < argc; i++) given |= !strcmp(argv[i], "--embd-type");
        if (!given) o.embd_type = o.type;
    }
    o.seed = seed;
    o.threads = (int)threads;
    o.out_path = out;
    char vbuf[4096];
    o.vocab_path = vocab ? vocab : cli_data_path("vocab/gemma-4.gguf", vbuf, sizeof vbuf);
    cli_progress pg;
    cli_progress_start(&pg, "synth", &o.progress, &o.progress_ctx);
    gem_err err = {{0}};
    if (gemma4_synth(&o, &err)) return cli_progress_fail(&pg, err.msg);
    double s = cli_progress_seconds(&pg);
    fprintf(stderr, "gem synth: wrote %s (%s, %s matrices, %s embedding, seed %llu) in %.1f s\n", out,
            o.profile->name, quant_type_name(o.type), quant_type_name(o.embd_type), (unsigned long long)seed, s);
    return 0;
}
