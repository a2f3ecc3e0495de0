/* Finishing a converted file (see hf_out.h). */
#include "convert/hf_out.h"

#include "util/file.h"

int hf_out_finish(gguf_writer *w, FILE *fp, const char *path, const char *contract, hf_validate_fn validate,
                  gem_err *err) {
    /* file_close_output removes the file when rc is non-zero */
    if (file_close_output(fp, path, gguf_writer_finish(w, fp, err) ? -1 : 0, err)) return -1;
    gem_err e2 = {{0}};
    gguf_file *g = gguf_open(path, &e2);
    const int bad = !g || validate(g, &e2);
    gguf_close(g);
    if (!bad) return 0;
    gem_err_set(err, "the converted file does not meet the %s contract: %s", contract, e2.msg);
    file_discard(path);
    return -1;
}
