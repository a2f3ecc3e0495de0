/* CUDA device discovery (see cuda_device.h). Errors from the runtime are
 * reported with cudaGetErrorString; nothing here aborts. */
#include "backend/cuda/cuda_device.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

extern "C" int cuda_device_count(char *why, size_t cap) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        snprintf(why, cap, "no usable CUDA device: %s", cudaGetErrorString(e));
        return -1;
    }
    return n;
}

extern "C" double cuda_device_peak_gbs(int i) {
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) return 0;
    /* the datasheets' round figures, which the clock arithmetic misses by
     * a few percent (an H200's 3201 MHz x 6144 bits gives 4917) */
    if (strstr(p.name, "H200") && !strstr(p.name, "GH200")) return 4800; /* a GH200's HBM differs */
    if (strstr(p.name, "H100") && strstr(p.name, "HBM3")) return 3350;
    int mem_clock_khz = 0, bus_bits = 0;
    if (cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, i) != cudaSuccess ||
        cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, i) != cudaSuccess)
        return 0;
    return mem_clock_khz * 1e3 * 2 * (bus_bits / 8) / 1e9;
}

extern "C" int cuda_device_describe(int i, char *out, size_t cap) {
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
