/* CUDA device discovery (see cuda_probe.h). Errors from the runtime are
 * reported with cudaGetErrorString; nothing here aborts. */
#include "backend/cuda/cuda_probe.h"

#include <cuda_runtime.h>
#include <stdio.h>

extern "C" int cuda_probe_count(char *why, size_t cap) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        snprintf(why, cap, "no usable CUDA device: %s", cudaGetErrorString(e));
        return -1;
    }
    return n;
}

extern "C" int cuda_probe_describe(int i, char *out, size_t cap) {
    cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, i);
    if (e != cudaSuccess) {
        snprintf(out, cap, "device %d: %s", i, cudaGetErrorString(e));
        return -1;
    }
    int sm_clock_khz = 0, mem_clock_khz = 0, bus_bits = 0;
    cudaDeviceGetAttribute(&sm_clock_khz, cudaDevAttrClockRate, i);
    cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, i);
    cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, i);
    snprintf(out, cap, "cuda:%d %s, sm_%d%d, %.1f GiB, %d SMs, SM clock %d MHz, memory clock %d MHz, bus %d bits",
             i, p.name, p.major, p.minor, p.totalGlobalMem / 1073741824.0, p.multiProcessorCount,
             sm_clock_khz / 1000, mem_clock_khz / 1000, bus_bits);
    return 0;
}
