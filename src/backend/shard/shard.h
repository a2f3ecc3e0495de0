/* The tensor-parallel backend (docs/tensor-parallel.md): G child backends
 * of one kind behind the ordinary seam (backend/backend.h), each holding a
 * shard of every split weight, of the activations split with them and of
 * every KV cache; collectives are in-process (the host adds the shards'
 * partial sums in shard order). Made by backend_create when
 * backend_opts.shards > 1. */
#ifndef GEM_BACKEND_SHARD_SHARD_H
#define GEM_BACKEND_SHARD_SHARD_H

#include "backend/backend.h"

/* Shards the most a backend may have (a host's GPUs, 8 on the machines
 * gem targets). */
#define SHARD_MAX 8

/* o->shards (2..SHARD_MAX) children of backend `name`, or NULL with err:
 * "cpu" only; "cuda" is refused naming the GPUs present (its NCCL
 * collectives are not written yet). */
backend *backend_shard_create(const char *name, const backend_opts *o, gem_err *err);

#endif
