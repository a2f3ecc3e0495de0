/* The monotonic clock (see clock.h). */
#include "util/clock.h"

#include <time.h>

double gem_now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}
