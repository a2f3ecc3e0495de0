/* Seeded hashing for the open-addressing tables whose keys come from input
 * files (GGUF metadata and tensor names, tokenizer vocabularies and merges):
 * with a fixed hash, a file's author can pick keys that all probe the same
 * slots and make loading quadratic (a few hundred thousand such GGUF names
 * took minutes).
 * A table draws its seed when it is built; the seed never changes what a
 * lookup finds, only where entries sit. */
#ifndef GEM_UTIL_HASH_H
#define GEM_UTIL_HASH_H

#include <stddef.h>
#include <stdint.h>

/* A fresh seed from the kernel's random source (salt: any address of the
 * table, mixed in only when no entropy is available yet). */
uint64_t hash_seed(const void *salt);

/* The 64-bit finaliser of MurmurHash3: every input bit reaches every output
 * bit, so a table's low-bit slot index depends on the whole key. */
uint64_t hash_mix64(uint64_t k);

/* FNV-1a over n bytes from a seeded start, then hash_mix64. */
uint64_t hash_bytes_seeded(const void *p, size_t n, uint64_t seed);

#endif
