/* The CUDA backend (NVIDIA Hopper, sm_90a): the seam of backend/backend.h on
 * one GPU. Weights are copied once from the mapping into device memory
 * (quantized formats repacked so a thread reads whole 16-byte blocks), every
 * op is enqueued on one stream, and a decode step can be recorded once and
 * replayed as a CUDA graph (positions and token ids are read from device
 * memory written by set_step). */
#ifndef GEM_BACKEND_CUDA_CUDA_BACKEND_H
#define GEM_BACKEND_CUDA_CUDA_BACKEND_H

#ifdef __cplusplus
extern "C" {
#endif

#include "backend/backend.h"

/* NULL with a reason when no usable device exists. */
backend *backend_cuda_create(const backend_opts *o, gem_err *err);

#ifdef __cplusplus
}
#endif

#endif
