/* The host's memory as the kernel reports it (/proc/meminfo).
 *
 * MemAvailable is the kernel's estimate of how much a new allocation can
 * take without swapping: free pages plus the page cache and slabs it can
 * reclaim. Capacity checks of host backends compare with it. */
#ifndef GEM_UTIL_SYSMEM_H
#define GEM_UTIL_SYSMEM_H

#include <stdint.h>

/* *bytes = MemAvailable; -1 when /proc/meminfo cannot be read or lacks it
 * (kernels before 3.14, other systems). */
int sysmem_available(uint64_t *bytes);

#endif
