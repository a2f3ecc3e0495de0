/* Device queries of the backend seam (part of backend/backend.h, which
 * includes this; a file that only asks about devices includes this alone,
 * so its own variables may still be called `backend`): answered for every
 * backend name without creating the backend, whatever the build.
 *
 * backend_devices: how many devices backend `name` ("cpu", "cuda") can run
 *   on (the CPU: 1), or -1 with the reason in err (not in this build, no
 *   usable device); *built (when not NULL) is 1 when the backend is
 *   compiled in.
 * backend_describe: one line naming device i (the CPU: its model and online
 *   cores; a GPU: name, capability, memory, clocks); 0, or -1 with the
 *   reason in out.
 * backend_peak_gbs: device i's memory bandwidth in GB/s (a GPU's datasheet
 *   figure where gem knows it), for the roofline fraction; 0 when unknown
 *   (the CPU). */
#ifndef GEM_BACKEND_DEVICE_H
#define GEM_BACKEND_DEVICE_H

#include <stddef.h>

#include "util/err.h"

int backend_devices(const char *name, int *built, gem_err *err);
int backend_describe(const char *name, int i, char *out, size_t cap);
double backend_peak_gbs(const char *name, int i);

#endif
