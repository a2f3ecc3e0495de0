/* The CPU backend's constructor (backend/backend.h has the interface). */
#ifndef GEM_BACKEND_CPU_CPU_H
#define GEM_BACKEND_CPU_CPU_H

#include "backend/backend.h"

backend *backend_cpu_create(const backend_opts *o, gem_err *err);

#endif
