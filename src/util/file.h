/* Opening input files (models, checkpoints, tokenizer and template files)
 * the one way every reader needs: read-only, close-on-exec, and refusing
 * anything but a regular file at once. A FIFO, a directory or a device
 * would otherwise block the open (a FIFO waits for a writer), fail in
 * mmap, or read without end; this check was once needed in two readers
 * and fixed twice. Errors name the path: "PATH: cannot open: REASON",
 * "PATH: not a regular file". */
#ifndef GEM_UTIL_FILE_H
#define GEM_UTIL_FILE_H

#include <stddef.h>
#include <stdint.h>

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

/* Reads the file at path into a malloc'd buffer with a NUL after its
 * *len bytes (len may be NULL). NULL with err set on failure; with
 * missing_ok, a file that does not exist gives NULL with err untouched. */
char *file_read(const char *path, int missing_ok, size_t *len, gem_err *err);

#endif
