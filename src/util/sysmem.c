/* Host memory (see sysmem.h). */
#include "util/sysmem.h"

#include <inttypes.h>
#include <stdio.h>

int sysmem_available(uint64_t *bytes) {
    FILE *f = fopen("/proc/meminfo", "re");
    if (!f) return -1;
    char line[256];
    int rc = -1;
    while (fgets(line, sizeof line, f)) {
        uint64_t kib;
        /* "MemAvailable:   23456789 kB" */
        if (sscanf(line, "MemAvailable: %" SCNu64 " kB", &kib) == 1) {
            *bytes = kib * 1024;
            rc = 0;
            break;
        }
    }
    fclose(f);
    return rc;
}
