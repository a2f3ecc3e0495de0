/* util/file: regular files map and read whole; memory views own their
 * name; a move hands a view over, or releases it when the owner could not
 * be allocated; a missing file, a directory and a FIFO are refused with
 * the path named, a FIFO at once (the readers once waited on one for a
 * writer forever; an alarm turns a hang into a failure); missing_ok leaves
 * the error untouched; an output stays when written, goes when its write
 * or close failed, and a device is never removed. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test.h"
#include "util/file.h"

static const char *const FIFO = "build/test-file.fifo";
static const char *const TMP = "build/test-file.tmp";

static void write_file(const char *path, const char *s, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    CHECK(fwrite(s, 1, n, f) == n);
    fclose(f);
}

static void test_map(void) {
    gem_err err = {{0}};
    file_view m;
    write_file(TMP, "abc\0def", 7);
    CHECKF(file_view_map(TMP, &m, &err) == 0, "%s", err.msg);
    CHECK(m.size == 7 && m.mapped && !memcmp(m.data, "abc\0def", 7) && !strcmp(m.path, TMP));
    file_view_close(&m);
    CHECK(m.data == NULL && m.size == 0 && !m.mapped && m.path == NULL);
    file_view_close(&m); /* twice is fine */

    write_file(TMP, "", 0);
    CHECKF(file_view_map(TMP, &m, &err) == 0, "%s", err.msg);
    CHECK(m.size == 0 && !m.mapped && m.data && !m.data[0]);
    file_view_close(&m);
    remove(TMP);

    CHECK(file_view_map("tests/data/none.bin", &m, &err) == -1);
    CHECK_ERR(err.msg, "tests/data/none.bin: cannot open: ");
    CHECK(m.data == NULL && m.size == 0);
    CHECK(file_view_map("tests", &m, &err) == -1);
    CHECK_ERR(err.msg, "tests: not a regular file");
}

static void test_mem_and_move(void) {
    gem_err err = {{0}};
    static const char bytes[] = "xyz";
    file_view a, b;
    CHECK(file_view_mem(bytes, 3, "name", &a, &err) == 0);
    CHECK(a.data == (const uint8_t *)bytes && a.size == 3 && !a.mapped && !strcmp(a.path, "name"));
    CHECK(file_view_move(&a, &b, &err) == 0);
    CHECK(a.path == NULL && a.data == NULL && b.data == (const uint8_t *)bytes && !strcmp(b.path, "name"));
    file_view_close(&a);
    file_view_close(&b);
    CHECK(file_view_mem(bytes, 3, NULL, &a, &err) == 0);
    CHECK(!strcmp(a.path, "<memory>"));
    /* an owner that could not be allocated: the view is released */
    CHECK(file_view_move(&a, NULL, &err) == -1);
    CHECK_ERR(err.msg, "<memory>: out of memory");
    CHECK(a.path == NULL && a.data == NULL);
}

static void test_read(void) {
    gem_err err = {{0}};
    size_t n = 99;
    write_file(TMP, "hello\nworld", 11);
    char *s = file_read(TMP, 0, &n, &err);
    CHECKF(s && n == 11 && !strcmp(s, "hello\nworld"), "%s", err.msg);
    free(s);
    /* larger than the first buffer's slack, so it grows */
    static char big[100000];
    for (size_t i = 0; i < sizeof big; i++) big[i] = (char)('a' + i % 26);
    write_file(TMP, big, sizeof big);
    s = file_read(TMP, 1, &n, &err);
    CHECK(s && n == sizeof big && !memcmp(s, big, n) && s[n] == 0);
    free(s);
    write_file(TMP, "", 0);
    s = file_read(TMP, 0, NULL, &err);
    CHECK(s && !s[0]);
    free(s);
    remove(TMP);
    /* a size of 0 that is not the length: reads to the end anyway */
    s = file_read("/proc/self/status", 0, &n, &err);
    CHECKF(s && n > 0 && strstr(s, "Name:"), "%s", err.msg);
    free(s);

    strcpy(err.msg, "untouched");
    CHECK(file_read("tests/data/none.txt", 1, &n, &err) == NULL);
    CHECK(!strcmp(err.msg, "untouched"));
    CHECK(file_read("tests/data/none.txt", 0, &n, &err) == NULL);
    CHECK_ERR(err.msg, "tests/data/none.txt: cannot open: ");
    CHECK(file_read("tests", 1, &n, &err) == NULL);
    CHECK_ERR(err.msg, "tests: not a regular file");
    CHECK(file_read("tests/data/none.txt", 0, NULL, NULL) == NULL); /* err may be NULL */
}

static void test_output(void) {
    gem_err err = {{0}};
    struct stat st;
    FILE *fp = file_create(TMP, &err);
    CHECKF(fp != NULL, "%s", err.msg);
    if (fp) fputs("half", fp);
    CHECK(file_close_output(fp, TMP, 0, &err) == 0);
    CHECK(stat(TMP, &st) == 0 && st.st_size == 4); /* a good write stays */
    fp = file_create(TMP, &err);
    if (fp) fputs("half", fp);
    CHECK(file_close_output(fp, TMP, -1, &err) == -1);
    CHECK(stat(TMP, &st) != 0); /* a failed one is removed */
    CHECK(file_close_output(NULL, TMP, -1, &err) == -1);
    CHECK(file_create("tests", &err) == NULL);
    CHECK_ERR(err.msg, "tests: cannot create: ");
    /* a close that fails (the device is full) fails the write, and a
     * device is never removed */
    fp = file_create("/dev/full", &err);
    if (fp) {
        fputs("x", fp);
        CHECK(file_close_output(fp, "/dev/full", 0, &err) == -1);
        CHECK_ERR(err.msg, "/dev/full: close failed");
        CHECK(stat("/dev/full", &st) == 0);
    }
}

static void test_fifo(void) {
    remove(FIFO);
    CHECK(mkfifo(FIFO, 0600) == 0);
    gem_err err = {{0}};
    file_view m;
    alarm(10);
    int rc = file_view_map(FIFO, &m, &err);
    char *s = file_read(FIFO, 0, NULL, &err);
    alarm(0);
    CHECK(rc == -1 && s == NULL);
    CHECK_ERR(err.msg, "build/test-file.fifo: not a regular file");
    remove(FIFO);
}

int main(void) {
    test_map();
    test_mem_and_move();
    test_read();
    test_output();
    test_fifo();
    return test_report("util/file");
}
