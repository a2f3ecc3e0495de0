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

/* A whole regular file, mapped read-only and private. */
typedef struct {
    const uint8_t *data; /* the bytes; "" (not mapped) for an empty file */
    size_t size;
    int mapped;
} file_map;

/* Maps the file at path. 0, or -1 with err set and *m zeroed. */
int file_map_open(const char *path, file_map *m, gem_err *err);

/* Unmaps (a zeroed or empty map is fine) and zeroes *m. */
void file_map_close(file_map *m);

/* Reads the file at path into a malloc'd buffer with a NUL after its
 * *len bytes (len may be NULL). NULL with err set on failure; with
 * missing_ok, a file that does not exist gives NULL with err untouched. */
char *file_read(const char *path, int missing_ok, size_t *len, gem_err *err);

#endif
