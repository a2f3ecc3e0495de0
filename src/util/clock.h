/* Wall time for durations (load, prefill, decode, a conversion): one
 * monotonic clock for every command and the server, so their timings
 * compare and never jump with the system clock. */
#ifndef GEM_UTIL_CLOCK_H
#define GEM_UTIL_CLOCK_H

/* Seconds on CLOCK_MONOTONIC from an arbitrary origin: subtract two. */
double gem_now_s(void);

#endif
