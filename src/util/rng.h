/* splitmix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number
 * generators", 2014): the one deterministic random stream in gem. The
 * sampler draws from it, the server derives response ids and default seeds
 * with it, and gem synth fills synthetic weights from it. Seeded outputs
 * are asserted by tests, so these functions must never change a bit.
 * Inline: synth calls it per weight. Not for anything an attacker must not
 * predict (see util/hash.h for the tables' seeds). */
#ifndef GEM_UTIL_RNG_H
#define GEM_UTIL_RNG_H

#include <stdint.h>

/* The golden-ratio increment between states. */
#define RNG_GAMMA 0x9e3779b97f4a7c15ull

/* splitmix64's output for the state before x + RNG_GAMMA: a bijective
 * 64-bit mix, also usable as a hash of x. */
static inline uint64_t rng_mix64(uint64_t x) {
    x += RNG_GAMMA;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* The next value of the stream in *state (advances it by RNG_GAMMA). */
static inline uint64_t rng_splitmix64(uint64_t *state) {
    uint64_t x = rng_mix64(*state);
    *state += RNG_GAMMA;
    return x;
}

#endif
