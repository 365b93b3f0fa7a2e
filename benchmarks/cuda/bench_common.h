// Shared by the benchmark programs: error checks and a monotonic clock.
// Nothing here is rcuda-specific: the programs are ordinary CUDA programs.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <cuda_runtime.h>

#define CHECK(call)                                                                  \
    do {                                                                             \
        cudaError_t err_ = (call);                                                   \
        if (err_ != cudaSuccess) {                                                   \
            fprintf(stderr, "FAILED %s: %s (%s)\n", #call, cudaGetErrorString(err_),  \
                    cudaGetErrorName(err_));                                         \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

static inline long long now_ns() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}
