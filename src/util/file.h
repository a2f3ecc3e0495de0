/* Opening files the one way every reader and writer needs.
 *
 * Inputs (models, checkpoints, tokenizer and template files): read-only,
 * close-on-exec, and anything but a regular file refused at once. A FIFO,
 * a directory or a device would otherwise block the open (a FIFO waits for
 * a writer), fail in mmap, or read without end; this check was once needed
 * in two readers and fixed twice. Errors name the path: "PATH: cannot
 * open: REASON", "PATH: not a regular file".
 *
 * Outputs (gem convert, quantize, synth): created in place, and removed
 * again when the write fails, so no half-written model is left behind. */
#ifndef GEM_UTIL_FILE_H
#define GEM_UTIL_FILE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "util/err.h"

/* An input's bytes, read-only, and the name messages give them: a mapped
 * regular file, or a caller's memory. */
typedef struct {
    char *path;          /* owned copy of the path or name */
    const uint8_t *data; /* the bytes; "" (not mapped) for an empty file */
    size_t size;
    int mapped;
} file_view;

/* Maps the file at path. 0, or -1 with err set and *v zeroed. */
int file_view_map(const char *path, file_view *v, gem_err *err);

/* Views size bytes at data (not copied: they must outlive the view) under
 * name ("<memory>" when NULL). 0, or -1 (out of memory) with *v zeroed. */
int file_view_mem(const void *data, size_t size, const char *name, file_view *v, gem_err *err);

/* Hands *src to its new owner's *dst (src is left zeroed). dst NULL means
 * the owner could not be allocated: src is closed, and -1 returned with
 * "PATH: out of memory". */
int file_view_move(file_view *src, file_view *dst, gem_err *err);

/* Unmaps and frees what the view owns (a zeroed view is fine); zeroes *v. */
void file_view_close(file_view *v);

/* Creates (or truncates) the output file at path, for writing: NULL with
 * "PATH: cannot create: REASON". */
FILE *file_create(const char *path, gem_err *err);

/* Closes an output from file_create (fp NULL: nothing was created) given
 * the writer's status so far, 0 or -1, and returns the final status: a
 * failed close fails the write ("PATH: close failed"), and a failed write
 * leaves no half-written file (file_discard). */
int file_close_output(FILE *fp, const char *path, int rc, gem_err *err);

/* Removes path when it is a regular file: never a device such as
 * /dev/null given as an output. */
void file_discard(const char *path);

/* Reads the file at path into a malloc'd buffer with a NUL after its
 * *len bytes (len may be NULL). NULL with err set on failure; with
 * missing_ok, a file that does not exist gives NULL with err untouched. */
char *file_read(const char *path, int missing_ok, size_t *len, gem_err *err);

#endif
