/* Seeded hashing (see hash.h). */
#include "util/hash.h"

#include <stdint.h>
#include <sys/random.h>
#include <sys/types.h>
#include <time.h>

uint64_t hash_seed(const void *salt) {
    uint64_t s = 0;
    if (getrandom(&s, sizeof s, GRND_NONBLOCK) != (ssize_t)sizeof s) {
        /* no entropy yet (early boot): time and address, still not known to the file's author */
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        s = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ull ^ (uint64_t)ts.tv_sec ^ (uint64_t)(uintptr_t)salt;
    }
    return s;
}

uint64_t hash_mix64(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ull;
    return k ^ (k >> 33);
}

uint64_t hash_bytes_seeded(const void *p, size_t n, uint64_t seed) {
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull ^ seed;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return hash_mix64(h);
}
