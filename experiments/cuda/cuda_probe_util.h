/* Host helpers of the CUDA speed probes in experiments/cuda/ (cuda_barrier_probe.cu,
 * cuda_ring_probe.cu): an error check that names the failing call and
 * exits, the median time of repeated runs on a stream, and a cooperative
 * launch. Probes only:
 * gem itself reports errors through its backend (cuda_common.h). */
#ifndef GEM_EXPERIMENTS_CUDA_CUDA_PROBE_UTIL_H
#define GEM_EXPERIMENTS_CUDA_CUDA_PROBE_UTIL_H

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <vector>

#ifndef PROBE_NAME
#error "define PROBE_NAME (the probe's name for its messages) before including cuda_probe_util.h"
#endif

#define PK(call)                                                                      \
    do {                                                                              \
        const cudaError_t e_ = (call);                                                \
        if (e_ != cudaSuccess) {                                                      \
            fprintf(stderr, PROBE_NAME ": %s: %s\n", #call, cudaGetErrorString(e_));  \
            exit(1);                                                                  \
        }                                                                             \
    } while (0)

static inline float median(std::vector<float> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

/* Median ms of run() (enqueues one timed run on st) over reps runs after
 * one that warms up; a launch error stops the probe. */
template <typename F> static float median_ms(int reps, cudaStream_t st, F run) {
    cudaEvent_t e0, e1;
    PK(cudaEventCreate(&e0));
    PK(cudaEventCreate(&e1));
    std::vector<float> ts;
    for (int r = 0; r <= reps; r++) {
        PK(cudaEventRecord(e0, st));
        run();
        PK(cudaGetLastError());
        PK(cudaEventRecord(e1, st));
        PK(cudaEventSynchronize(e1));
        float ms = 0;
        PK(cudaEventElapsedTime(&ms, e0, e1));
        if (r) ts.push_back(ms);
    }
    PK(cudaEventDestroy(e0));
    PK(cudaEventDestroy(e1));
    return median(ts);
}

/* A cooperative launch of `blocks` blocks (every block resident at once,
 * which a grid barrier needs) on st; a launch error stops the probe. */
template <typename K, typename... A>
static void coop_launch(K kern, unsigned blocks, unsigned threads, size_t smem, cudaStream_t st, A... args) {
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[1] = {};
    at[0].id = cudaLaunchAttributeCooperative;
    at[0].val.cooperative = 1;
    cfg.gridDim = dim3(blocks);
    cfg.blockDim = dim3(threads);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    PK(cudaLaunchKernelEx(&cfg, kern, args...));
}

#endif
