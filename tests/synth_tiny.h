/* The tiny models the model, CLI, convert and engine tests write for
 * themselves: what `gem synth --profile gemma4-tiny --type f32 --embd-type
 * f32 --seed SEED` writes (f32 everywhere, so the CPU paths agree to
 * rounding), with the repository's Gemma 4 vocabulary, and the same for
 * qwen35-tiny with the Qwen vocabulary. Tests run from the repository root
 * (tests/run.sh), where the vocabularies' relative paths resolve. */
#ifndef GEM_TESTS_SYNTH_TINY_H
#define GEM_TESTS_SYNTH_TINY_H

#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "model/gemma4.h"
#include "model/gemma4_synth.h"
#include "model/qwen35.h"
#include "model/qwen35_synth.h"
#include "quant/quant.h"
#include "util/err.h"

/* Any profile the same way (f32 everywhere): drafters beside their
 * targets. threads: 0 for every online CPU (the bytes do not depend on it). */
static inline int test_synth_f32(const char *profile, const char *path, uint64_t seed, int threads, gem_err *err) {
    gemma4_synth_opts so = {0};
    so.profile = gemma4_profile_find(profile);
    if (!so.profile) {
        gem_err_set(err, "no profile %s", profile);
        return -1;
    }
    so.type = QT_F32;
    so.embd_type = QT_F32;
    so.seed = seed;
    so.vocab_path = "data/vocab/gemma-4.gguf";
    so.out_path = path;
    so.threads = threads;
    return gemma4_synth(&so, err);
}

static inline int test_synth_tiny(const char *path, uint64_t seed, int threads, gem_err *err) {
    return test_synth_f32("gemma4-tiny", path, seed, threads, err);
}

/* qwen35-tiny the same way: f32 everywhere, the first 512 tokens of the
 * Qwen vocabulary. */
static inline int test_synth_qwen35_tiny(const char *path, uint64_t seed, int threads, gem_err *err) {
    const qwen35_synth_opts so = {.profile = qwen35_profile_find("qwen35-tiny"), .type = QT_F32,
                                  .embd_type = QT_F32, .seed = seed, .vocab_path = "data/vocab/qwen35.gguf",
                                  .out_path = path, .threads = threads};
    return qwen35_synth(&so, err);
}

/* An empty file named from tmpl (its XXXXXX replaced), for a test's model;
 * -1 when none could be made. */
static inline int test_tmp_file(char *tmpl) {
    const int fd = mkstemp(tmpl);
    if (fd < 0) return -1;
    close(fd);
    return 0;
}

#endif
