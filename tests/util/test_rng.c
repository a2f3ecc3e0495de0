/* util/rng: splitmix64's published stream (seed 0 from the reference
 * implementation) and fixed values of rng_mix64; sampler, server ids and
 * synth weights depend on them bit for bit. */
#include <inttypes.h>

#include "test.h"
#include "util/rng.h"

static void expect(uint64_t got, uint64_t want) {
    CHECKF(got == want, "got %016" PRIx64 ", want %016" PRIx64, got, want);
}

int main(void) {
    uint64_t s = 0;
    expect(rng_splitmix64(&s), 0xe220a8397b1dcdafull);
    expect(rng_splitmix64(&s), 0x6e789e6aa1b965f4ull);
    expect(rng_splitmix64(&s), 0x06c45d188009454full);
    expect(s, 3 * RNG_GAMMA);
    s = 1234567;
    expect(rng_splitmix64(&s), 0x599ed017fb08fc85ull);
    expect(rng_splitmix64(&s), 0x2c73f08458540fa5ull);
    expect(rng_splitmix64(&s), 0x883ebce5a3f27c77ull);
    expect(rng_mix64(1), 0x910a2dec89025cc1ull);
    expect(rng_mix64(0xdeadbeef), 0x4adfb90f68c9eb9bull);
    expect(rng_mix64(UINT64_MAX), 0xe4d971771b652c20ull);
    return test_report("util/rng");
}
