/* env_int: defaults for unset and empty, strict decimal within range, and
 * errors that name the variable, its value and the accepted range. */
#include <stdlib.h>

#include "test.h"
#include "util/env.h"

static const char *const VAR = "GEM_TEST_ENV_INT";

static void accept(const char *value, long lo, long hi, long dflt, long want) {
    if (value) setenv(VAR, value, 1);
    else unsetenv(VAR);
    gem_err err = {{0}};
    long got = -12345;
    const int rc = env_int(VAR, lo, hi, dflt, &got, &err);
    CHECKF(rc == 0 && got == want, "'%s' in [%ld, %ld]: rc %d, got %ld, want %ld (%s)", value ? value : "(unset)", lo, hi,
           rc, got, want, err.msg);
}

static void reject(const char *value, long lo, long hi, long dflt, const char *want) {
    setenv(VAR, value, 1);
    gem_err err = {{0}};
    long got = -12345;
    const int rc = env_int(VAR, lo, hi, dflt, &got, &err);
    CHECKF(rc == -1, "'%s' in [%ld, %ld] accepted as %ld", value, lo, hi, got);
    CHECKF(got == dflt, "'%s': *out %ld after an error, want the default %ld", value, got, dflt);
    CHECK_ERR(err.msg, want);
}

int main(void) {
    accept(NULL, 0, 3, 2, 2);
    accept("", 0, 3, 2, 2);
    accept("0", 0, 3, 2, 0);
    accept("3", 0, 3, 2, 3);
    accept("007", 0, 10, 1, 7);
    accept("-5", -10, 10, 0, -5);
    accept("99999", 0, 99999, 500, 99999);

    reject("4", 0, 3, 0, "GEM_TEST_ENV_INT=4: expected an integer from 0 to 3 (unset: 0)");
    reject("-1", 0, 3, 0, "expected an integer from 0 to 3");
    reject("2", 0, 1, 1, "GEM_TEST_ENV_INT=2: expected 0 or 1 (unset: 1)");
    reject("yes", 0, 1, 0, "GEM_TEST_ENV_INT=yes: expected 0 or 1");
    reject("1x", 0, 3, 0, "GEM_TEST_ENV_INT=1x:");
    reject(" 1", 0, 3, 0, "GEM_TEST_ENV_INT= 1:");
    reject("+1", 0, 3, 0, "GEM_TEST_ENV_INT=+1:");
    reject("1 ", 0, 3, 0, "GEM_TEST_ENV_INT=1 :");
    reject("-", -3, 3, 0, "GEM_TEST_ENV_INT=-:");
    reject("0x10", 0, 100, 0, "GEM_TEST_ENV_INT=0x10:");
    reject("99999999999999999999999", 0, 100, 0, "expected an integer from 0 to 100");
    reject("1.5", 0, 3, 0, "GEM_TEST_ENV_INT=1.5:");
    /* a long value is cut in the message, not the message's end */
    reject("1111111111111111111111111111111111111111111111111111111111111111111111111111111111111111", 0, 3, 0,
           "expected an integer from 0 to 3");
    unsetenv(VAR);

    /* names under a prefix: the known ones pass, the first other fails */
    static const char *const known[] = {"GEM_TEST_KNOWN_A", "GEM_TEST_KNOWN_AB"};
    gem_err err = {{0}};
    CHECK(env_known("GEM_TEST_KNOWN_", known, 2, &err) == 0);
    setenv("GEM_TEST_KNOWN_AB", "1", 1);
    setenv("GEM_TEST_KNOWN_A", "", 1);
    CHECKF(env_known("GEM_TEST_KNOWN_", known, 2, &err) == 0, "%s", err.msg);
    setenv("GEM_TEST_KNOWN_ABC", "1", 1); /* a known name's extension is not known */
    CHECK(env_known("GEM_TEST_KNOWN_", known, 2, &err) == -1);
    CHECK_ERR(err.msg, "unknown setting GEM_TEST_KNOWN_ABC in the environment");
    unsetenv("GEM_TEST_KNOWN_ABC");
    setenv("GEM_TEST_KNOWN_", "1", 1); /* the bare prefix too */
    err.msg[0] = 0;
    CHECK(env_known("GEM_TEST_KNOWN_", known, 2, &err) == -1);
    CHECK_ERR(err.msg, "unknown setting GEM_TEST_KNOWN_ in");
    unsetenv("GEM_TEST_KNOWN_");
    CHECK(env_known("GEM_TEST_KNOWN_", known, 1, &err) == -1); /* AB not in the first one */
    CHECK_ERR(err.msg, "GEM_TEST_KNOWN_AB");
    unsetenv("GEM_TEST_KNOWN_A");
    unsetenv("GEM_TEST_KNOWN_AB");
    CHECK(env_known("GEM_TEST_KNOWN_", known, 0, &err) == 0);
    return test_report("test_env");
}
