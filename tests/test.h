/* Minimal test harness: CHECK counts and reports, never aborts, so one run
 * shows every failure. Each test binary ends by printing
 * "NAME: N passed, M failed" (tests/run.sh sums these) and exits non-zero
 * when anything failed. */
#ifndef GEM_TESTS_TEST_H
#define GEM_TESTS_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* GEM_TEST_ASAN: built with the address sanitizer (make test's second
 * pass; gcc says so with __SANITIZE_ADDRESS__, clang with __has_feature),
 * where slow tests check memory safety on fewer cases */
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GEM_TEST_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(GEM_TEST_ASAN)
#define GEM_TEST_ASAN 1
#endif

/* A test binary of several files defines TEST_COUNTERS_EXTERN before
 * including this and defines the counters once (tests/cuda/ops_harness.c). */
#ifdef TEST_COUNTERS_EXTERN
extern int test_passed, test_failed;
#else
static int test_passed, test_failed;
#endif

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (cond) test_passed++;                                                     \
        else {                                                                       \
            test_failed++;                                                           \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                            \
    } while (0)

#define CHECKF(cond, ...)                                                    \
    do {                                                                     \
        if (cond) test_passed++;                                             \
        else {                                                               \
            test_failed++;                                                   \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                    \
            fprintf(stderr, "\n");                                           \
        }                                                                    \
    } while (0)

/* err must contain the substring want */
#define CHECK_ERR(msg, want) CHECKF(strstr((msg), (want)) != NULL, "message '%s' lacks '%s'", (msg), (want))

/* Reads a whole file (NUL-terminated); NULL when it cannot be read. */
/* This thread's CPU seconds: time bounds on a shared CI runner, whose load
 * stretches wall time, not this. */
static inline double test_cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static inline char *test_slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = (char *)malloc(len > 0 ? (size_t)len + 1 : 1);
    *n = p ? fread(p, 1, (size_t)(len > 0 ? len : 0), f) : 0;
    if (p) p[*n] = 0;
    fclose(f);
    return p;
}

static inline int test_report(const char *name) {
    printf("%s: %d passed, %d failed\n", name, test_passed, test_failed);
    return test_failed ? 1 : 0;
}

#endif
