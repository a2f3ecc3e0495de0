/* Synth's row filling (model/synth_rows.h): the bytes do not depend on
 * the thread count or the split, a failing worker fails the chunk, and the
 * thread request is resolved and capped. The written files are checked
 * byte for byte through each synth (test_gemma4, test_qwen35). */
#include <string.h>

#include "model/synth_rows.h"
#include "test.h"

/* each byte from its row and column only */
static int fill(const void *ctx, uint64_t row0, uint64_t n, uint8_t *out) {
    const uint64_t rb = *(const uint64_t *)ctx;
    for (uint64_t r = 0; r < n; r++)
        for (uint64_t c = 0; c < rb; c++) out[r * rb + c] = (uint8_t)((row0 + r) * 31 + c);
    return 0;
}

static int fail_fill(const void *ctx, uint64_t row0, uint64_t n, uint8_t *out) {
    (void)ctx, (void)out;
    return row0 <= 5 && 5 < row0 + n ? -1 : 0; /* the worker holding row 5 fails */
}

static void test_fill(void) {
    uint64_t rb = 7;
    const sr_tensor t = {"t", 37, rb, fill, &rb};
    uint8_t one[37 * 7], many[37 * 7];
    CHECK(!sr_fill(&t, 0, 37, one, 1));
    CHECK(!sr_fill(&t, 0, 37, many, 5));
    CHECK(!memcmp(one, many, sizeof one));
    CHECK(!sr_fill(&t, 3, 2, many, 8) && !memcmp(many, one + 3 * 7, 2 * 7)); /* more threads than rows */
    const sr_tensor bad = {"bad", 37, rb, fail_fill, NULL};
    CHECK(sr_fill(&bad, 0, 37, many, 4) == -1);
    CHECK(sr_threads(3) == 3 && sr_threads(1000) == SR_MAX_THREADS && sr_threads(0) >= 1);
}

int main(void) {
    test_fill();
    return test_report("test_synth_rows");
}
