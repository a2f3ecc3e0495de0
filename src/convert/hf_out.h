/* The last step of every `gem convert` branch (hf.h, hf_qwen35.h): the
 * written file is finished, closed, and read back under its model's
 * contract, so that a file gem would refuse to load is never left behind. */
#ifndef GEM_CONVERT_HF_OUT_H
#define GEM_CONVERT_HF_OUT_H

#include <stdio.h>

#include "gguf/gguf.h"
#include "gguf/gguf_write.h"
#include "util/err.h"

/* The contract's check of a whole file (gemma4_validate, qwen35_validate
 * without the profile). */
typedef int (*hf_validate_fn)(const gguf_file *f, gem_err *err);

/* Finishes w's file in fp, closes fp (always: the caller drops it) and
 * validates path; a file that fails is removed, with "the converted file
 * does not meet the <contract> contract: ..." set. 0 or -1. */
int hf_out_finish(gguf_writer *w, FILE *fp, const char *path, const char *contract, hf_validate_fn validate,
                  gem_err *err);

#endif
