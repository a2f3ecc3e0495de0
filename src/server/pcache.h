/* gem serve's prompt cache (--cache-ram): parked session states
 * (engine.h gem_park) in host memory, bounded in bytes, least recently
 * used evicted first.
 *
 * A slot's state is parked before the slot is given to a conversation
 * that does not continue it; a request whose prompt a parked state keeps
 * more of than its slot does continues from that state. A state the
 * request continues whole moves out (the slot holds it; it is parked
 * again when the slot is given away), so one conversation has one entry;
 * one it shares only a part of (a system prompt) is copied and stays for
 * its own conversation. Putting one in drops the older entries whose
 * tokens begin it (the same conversation, earlier: a turn's state is a
 * prefix of the next turn's).
 *
 * Not locked: the server calls it under its own mutex. An entry being
 * copied (pcache_take, not moved) is pinned until pcache_unpin: neither
 * evicted nor replaced meanwhile. */
#ifndef GEM_SERVER_PCACHE_H
#define GEM_SERVER_PCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"

typedef struct pcache pcache;

/* limit: bytes the entries may hold together (> 0). NULL out of memory. */
pcache *pcache_new(size_t limit);
void pcache_free(pcache *c); /* and its entries */

/* The entry that keeps the most of ids[0..n) (gem_park_keeps), when that
 * is at least gain tokens more than beat (*kept: how many); else NULL.
 * When it keeps all but at most slack, and half or more, of the entry's
 * tokens it is taken
 * out (*moved = 1: the caller's to free); else it stays, pinned, as the
 * most recently used (*moved = 0: pcache_unpin once copied). Counts a hit
 * or a miss. */
gem_park *pcache_take(pcache *c, const int32_t *ids, size_t n, long beat, long gain, long slack, long *kept,
                      int *moved);
void pcache_unpin(pcache *c, const gem_park *p);

/* Puts p in as the most recently used (the cache owns it): the older
 * entries whose tokens begin p's are dropped, then the least recently
 * used until the rest fits the limit; p itself is dropped when it does
 * not fit beside the pinned ones. */
void pcache_put(pcache *c, gem_park *p);

typedef struct {
    size_t limit, bytes;
    long entries;
    unsigned long long hits, misses; /* pcache_take's */
    unsigned long long parked;       /* entries put in */
    unsigned long long evicted;      /* dropped for room (or too large alone) */
    unsigned long long replaced;     /* dropped as a prefix of a newer entry */
} pcache_stats;
void pcache_get_stats(const pcache *c, pcache_stats *st);

#endif
