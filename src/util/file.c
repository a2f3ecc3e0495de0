/* Input files opened read-only, regular files only; outputs removed when
 * their write fails (see file.h). */
#include "util/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define FILE_MISSING (-2)

/* A descriptor for path, checked to be a regular file of *size bytes; -1
 * with err set, or FILE_MISSING (err untouched) for a missing file when
 * missing_ok. */
static int open_regular(const char *path, int missing_ok, size_t *size, gem_err *err) {
    /* O_NONBLOCK: opening a FIFO must not wait for a writer (it is then
     * refused below); no effect on a regular file's reads */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        if (missing_ok && errno == ENOENT) return FILE_MISSING;
        gem_err_set(err, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        gem_err_set(err, "%s: not a regular file", path);
        close(fd);
        return -1;
    }
    if ((uint64_t)st.st_size > SIZE_MAX / 2) {
        gem_err_set(err, "%s: too large (%lld bytes)", path, (long long)st.st_size);
        close(fd);
        return -1;
    }
    *size = (size_t)st.st_size;
    return fd;
}

int file_view_map(const char *path, file_view *v, gem_err *err) {
    memset(v, 0, sizeof *v);
    size_t size;
    int fd = open_regular(path, 0, &size, err);
    if (fd < 0) return -1;
    void *p = size ? mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0) : (void *)"";
    int saved = errno;
    close(fd); /* the mapping keeps the file alive */
    if (p == MAP_FAILED) return gem_err_set(err, "%s: cannot map: %s", path, strerror(saved));
    v->mapped = size > 0;
    v->data = p;
    v->size = size;
    if (!(v->path = strdup(path))) {
        file_view_close(v);
        return gem_err_set(err, "%s: out of memory", path);
    }
    return 0;
}

int file_view_mem(const void *data, size_t size, const char *name, file_view *v, gem_err *err) {
    memset(v, 0, sizeof *v);
    if (!(v->path = strdup(name ? name : "<memory>"))) return gem_err_set(err, "out of memory");
    v->data = data;
    v->size = size;
    return 0;
}

int file_view_move(file_view *src, file_view *dst, gem_err *err) {
    if (!dst) {
        gem_err_set(err, "%s: out of memory", src->path);
        file_view_close(src);
        return -1;
    }
    *dst = *src;
    memset(src, 0, sizeof *src);
    return 0;
}

void file_view_close(file_view *v) {
    if (v->mapped) munmap((void *)v->data, v->size);
    free(v->path);
    memset(v, 0, sizeof *v);
}

FILE *file_create(const char *path, gem_err *err) {
    FILE *fp = fopen(path, "wb");
    if (!fp) gem_err_set(err, "%s: cannot create: %s", path, strerror(errno));
    return fp;
}

void file_discard(const char *path) {
    struct stat st;
    if (!stat(path, &st) && S_ISREG(st.st_mode)) remove(path);
}

int file_close_output(FILE *fp, const char *path, int rc, gem_err *err) {
    if (!fp) return rc;
    if (fclose(fp) && rc == 0) rc = gem_err_set(err, "%s: close failed", path);
    if (rc) file_discard(path);
    return rc;
}

char *file_read(const char *path, int missing_ok, size_t *len, gem_err *err) {
    size_t size;
    int fd = open_regular(path, missing_ok, &size, err);
    if (fd < 0) return NULL;
    /* the size is a first guess only: a file may grow while it is read, and
     * some (under /proc) say 0; the slack lets EOF show without a regrow */
    size_t cap = size + 4096, n = 0;
    char *buf = malloc(cap);
    const char *fail = buf ? NULL : "out of memory";
    while (!fail) {
        if (n + 1 == cap) {
            char *b = cap > SIZE_MAX / 4 ? NULL : realloc(buf, cap * 2);
            if (!b) {
                fail = "out of memory";
                break;
            }
            buf = b;
            cap *= 2;
        }
        ssize_t k = read(fd, buf + n, cap - 1 - n);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) fail = strerror(errno);
        if (k <= 0) break;
        n += (size_t)k;
    }
    if (fail) {
        gem_err_set(err, "%s: cannot read: %s", path, fail);
        free(buf);
        close(fd);
        return NULL;
    }
    close(fd);
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}
