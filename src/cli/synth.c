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
    uint64_t seed = 1, threads = 0, ctx_train = 0;
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
        } else if (!strcmp(a, "--ctx-train")) {
            /* a longer trained context than the profile's, for tests at depth
             * (positions past 32K on the tiny profile) */
            if (!v || parse_u64(v, &ctx_train) || ctx_train < 1 || ctx_train > 1048576)
                return fail("--ctx-train needs a context length of 1 to 1048576 tokens", v);
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!v || parse_u64(v, &threads) || threads > 1024) return fail("-t needs a thread count", v);
        } else {
            return fail("unknown option", a);
        }
        if (takes && !v) return fail("missing value for", a);
        i += takes;
    }
    if (!profile || !type || !out)
        return fail("usage: gem synth --profile P --type q4_0|q8_0|q4_k_m|q4_k|q5_k|q6_k|f16|bf16|f32 [--embd-type q8_0|q6_k|q4_0] "
                    "[--seed N] [--ctx-train N] [-t N] [--vocab FILE] -o FILE", NULL);
    /* the family is in the profile's name; everything else is common */
    const int qwen = !strncmp(profile, "qwen35", 6);
    const qwen35_profile *qp = qwen ? qwen35_profile_find(profile) : NULL;
    const gemma4_profile *gp = qwen ? NULL : gemma4_profile_find(profile);
    if (qwen && !qp) return fail("unknown profile (qwen35-27b, qwen35-small, qwen35-tiny)", profile);
    if (!qwen && !gp) return fail("unknown profile (gemma4-31b, gemma4-12b, gemma4-1b, gemma4-tiny, qwen35-27b, qwen35-small, qwen35-tiny)", profile);
    /* q4_k_m: q4_k matrices in llama-quantize's Q4_K_M mix */
    const int mix = !strcmp(type, "q4_k_m");
    int embd_given = 0;
    for (int i = 0; i < argc; i++) embd_given |= !strcmp(argv[i], "--embd-type");
    /* the reference's token_embd under Q4_K_M: q6_k where it is the head
     * (tied), else the default q4_k */
    if (mix && !embd_given) embd = qwen && !qp->tied ? "q4_k" : "q6_k";
    const int t = quant_type_from_name(mix ? "q4_k" : type), e = quant_type_from_name(embd);
    if (t < 0) return fail("unknown type", type);
    if (e < 0) return fail("unknown embedding type", embd);
    const uint32_t mt = (uint32_t)t;
    uint32_t et = (uint32_t)e;
    /* An unquantized model keeps its embedding in the same type unless told. */
    if (mt == QT_F32 || mt == QT_F16 || mt == QT_BF16) {
        if (!embd_given) et = mt;
    }
    char vbuf[4096];
    const char *vocab_path = vocab ? vocab : cli_data_path(qwen ? "vocab/qwen35.gguf" : "vocab/gemma-4.gguf", vbuf,
                                                           sizeof vbuf);
    cli_progress pg;
    gem_err err = {{0}};
    int rc;
    if (qwen) {
        qwen35_synth_opts q = {.profile = qp, .type = mt, .q4_k_m = mix, .embd_type = et, .seed = seed, .vocab_path = vocab_path,
                               .out_path = out, .threads = (int)threads, .n_ctx_train = (uint32_t)ctx_train};
        cli_progress_start(&pg, "synth", &q.progress, &q.progress_ctx);
        rc = qwen35_synth(&q, &err);
    } else {
        gemma4_synth_opts o = {.profile = gp, .type = mt, .q4_k_m = mix, .embd_type = et, .seed = seed, .vocab_path = vocab_path,
                               .out_path = out, .threads = (int)threads, .n_ctx_train = (uint32_t)ctx_train};
        cli_progress_start(&pg, "synth", &o.progress, &o.progress_ctx);
        rc = gemma4_synth(&o, &err);
    }
    if (rc) return cli_progress_fail(&pg, err.msg);
    fprintf(stderr, "gem synth: wrote %s (%s, %s matrices, %s embedding, seed %llu) in %.1f s\n", out,
            qwen ? qp->name : gp->name, mix ? "q4_k_m" : quant_type_name(mt), quant_type_name(et), (unsigned long long)seed,
            cli_progress_seconds(&pg));
    return 0;
}
