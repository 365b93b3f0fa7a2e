// Device and kernel queries, occupancy, flags, limits, cudaDeviceReset,
// cudaLaunchKernelEx: an ordinary CUDA program; each section prints
// "ok <name>", and the values a test compares.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

#include "check.h"

__global__ void fillKernel(int *out, int value, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = value;
}
__global__ void __launch_bounds__(128) bounded(int *out) {  // reverses 0..blockDim.x-1 into out
    __shared__ int tile[128];
    tile[threadIdx.x] = threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = tile[blockDim.x - 1 - threadIdx.x];
}
__global__ void dynamicShared(int *out) {
    extern __shared__ int dyn[];
    dyn[threadIdx.x] = 1;
    if (threadIdx.x == 0) out[0] = 0;
}

static void attributes() {
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    int value = 0;
    CHECK(cudaDeviceGetAttribute(&value, cudaDevAttrMaxThreadsPerBlock, 0));
    REQUIRE(value == prop.maxThreadsPerBlock);
    CHECK(cudaDeviceGetAttribute(&value, cudaDevAttrComputeCapabilityMajor, 0));
    REQUIRE(value == prop.major);
    CHECK(cudaDeviceGetAttribute(&value, cudaDevAttrMaxGridDimY, 0));
    REQUIRE(value == prop.maxGridSize[1]);
    CHECK(cudaDeviceGetAttribute(&value, cudaDevAttrMultiProcessorCount, 0));
    REQUIRE(value == prop.multiProcessorCount);
    int clock = 0;
    CHECK(cudaDeviceGetAttribute(&clock, cudaDevAttrClockRate, 0));  // not in cudaDeviceProp any more
    REQUIRE(clock > 0);
    CHECK(cudaDeviceGetAttribute(&value, cudaDevAttrCanMapHostMemory, 0));
    REQUIRE(value == 1 && prop.canMapHostMemory == 1);  // rcuda's mapped memory (tests/cuda/mapped_memory.cu)
    EXPECT_AND_CLEAR(cudaDeviceGetAttribute(&value, (cudaDeviceAttr)9999, 0), cudaErrorInvalidValue);
    EXPECT_AND_CLEAR(cudaDeviceGetAttribute(&value, cudaDevAttrWarpSize, 7), cudaErrorInvalidDevice);
    char bus[32];
    CHECK(cudaDeviceGetPCIBusId(bus, sizeof(bus), 0));
    int found = -1;
    CHECK(cudaDeviceGetByPCIBusId(&found, bus));
    REQUIRE(found == 0);
    int driver = 0, runtime = 0;
    CHECK(cudaDriverGetVersion(&driver));
    CHECK(cudaRuntimeGetVersion(&runtime));
    printf("versions %d %d, bus %s, clock %d kHz\n", driver, runtime, bus, clock);
    cudaDeviceProp want;
    memset(&want, 0, sizeof(want));
    want.major = prop.major;
    want.minor = prop.minor;
    int chosen = -1;
    CHECK(cudaChooseDevice(&chosen, &want));
    REQUIRE(chosen == 0);
    printf("ok attributes\n");
}

static void kernels() {
    cudaFuncAttributes a;
    CHECK(cudaFuncGetAttributes(&a, bounded));
    printf("bounded: maxThreads %d shared %zu regs %d binary %d\n", a.maxThreadsPerBlock, a.sharedSizeBytes,
           a.numRegs, a.binaryVersion);
    REQUIRE(a.maxThreadsPerBlock == 128 && a.sharedSizeBytes == 128 * sizeof(int) && a.numRegs > 0);
    int *out, h = 0, reversed[128];
    CHECK(cudaMalloc(&out, sizeof(reversed)));
    bounded<<<1, 128>>>(out);
    CHECK(cudaMemcpy(reversed, out, sizeof(reversed), cudaMemcpyDeviceToHost));
    for (int i = 0; i < 128; i++) REQUIRE(reversed[i] == 127 - i);
    bounded<<<1, 256>>>(out);  // more than its __launch_bounds__
    EXPECT_AND_CLEAR(cudaGetLastError(), cudaErrorLaunchOutOfResources);

    const int big = 64 << 10;  // above the default 48 KiB of dynamic shared memory
    dynamicShared<<<1, 32, big>>>(out);
    EXPECT_AND_CLEAR(cudaGetLastError(), cudaErrorInvalidValue);
    CHECK(cudaFuncSetAttribute(dynamicShared, cudaFuncAttributeMaxDynamicSharedMemorySize, big));
    CHECK(cudaFuncGetAttributes(&a, dynamicShared));
    REQUIRE(a.maxDynamicSharedSizeBytes == big);
    dynamicShared<<<1, 32, big>>>(out);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(&h, out, sizeof(int), cudaMemcpyDeviceToHost));
    REQUIRE(h == big);  // the sim kernel reports the dynamic shared memory it got
    CHECK(cudaFuncSetCacheConfig(fillKernel, cudaFuncCachePreferShared));

    size_t offset = 0, size = 0;
    CHECK(cudaFuncGetParamInfo((const void *)fillKernel, 1, &offset, &size));
    REQUIRE(offset == 8 && size == 4);
    EXPECT_AND_CLEAR(cudaFuncGetParamInfo((const void *)fillKernel, 3, &offset, &size), cudaErrorInvalidValue);
    const char *name = nullptr;
    CHECK(cudaFuncGetName(&name, (const void *)fillKernel));
    printf("fillKernel is %s\n", name);
    printf("ok kernels\n");
}

static void occupancy() {
    int blocks = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, fillKernel, 256, 0));
    int minGrid = 0, blockSize = 0;
    CHECK(cudaOccupancyMaxPotentialBlockSize(&minGrid, &blockSize, fillKernel));
    int bounded_blocks = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&bounded_blocks, bounded, 256, 0));
    printf("occupancy: %d blocks of 256 per SM; best block %d, min grid %d; bounded at 256: %d\n", blocks,
           blockSize, minGrid, bounded_blocks);
    REQUIRE(blocks > 0 && blockSize > 0 && blockSize <= 1024 && minGrid > 0 && bounded_blocks == 0);
    printf("ok occupancy\n");
}

static void flags_and_limits() {
    CHECK(cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync));
    unsigned int flags = 0;
    CHECK(cudaGetDeviceFlags(&flags));
    REQUIRE(flags == cudaDeviceScheduleBlockingSync);
    EXPECT_AND_CLEAR(cudaSetDeviceFlags(0x1000), cudaErrorInvalidValue);
    size_t heap = 0;
    CHECK(cudaDeviceGetLimit(&heap, cudaLimitMallocHeapSize));
    CHECK(cudaDeviceSetLimit(cudaLimitMallocHeapSize, heap * 2));
    size_t now = 0;
    CHECK(cudaDeviceGetLimit(&now, cudaLimitMallocHeapSize));
    REQUIRE(now == heap * 2);
    printf("ok flags\n");
}

static void reset() {
    size_t before, total, during, after;
    CHECK(cudaMemGetInfo(&before, &total));
    void *big;
    CHECK(cudaMalloc(&big, 100 << 20));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    CHECK(cudaMemGetInfo(&during, &total));
    REQUIRE(before - during >= (100 << 20));
    CHECK(cudaDeviceReset());
    CHECK(cudaMemGetInfo(&after, &total));
    REQUIRE(after >= before);  // everything freed, earlier sections' buffers too
    EXPECT_AND_CLEAR(cudaFree(big), cudaErrorInvalidValue);               // gone with the reset
    EXPECT_AND_CLEAR(cudaStreamSynchronize(s), cudaErrorInvalidResourceHandle);
    int *out, h[4];
    CHECK(cudaMalloc(&out, sizeof(h)));  // kernels work again: modules are sent anew
    fillKernel<<<1, 4>>>(out, 9, 4);
    CHECK(cudaMemcpy(h, out, sizeof(h), cudaMemcpyDeviceToHost));
    REQUIRE(h[0] == 9 && h[3] == 9);
    printf("ok reset\n");
}

static void launch_ex() {
    int *out, h[64];
    CHECK(cudaMalloc(&out, sizeof(h)));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(2);
    config.blockDim = dim3(32);
    config.stream = s;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributePriority;
    attr[0].val.priority = 0;
    config.attrs = attr;
    config.numAttrs = 1;
    CHECK(cudaLaunchKernelEx(&config, fillKernel, out, 4, 64));
    CHECK(cudaMemcpyAsync(h, out, sizeof(h), cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    for (int i = 0; i < 64; i++) REQUIRE(h[i] == 4);
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = 2;
    attr[0].val.clusterDim.y = attr[0].val.clusterDim.z = 1;
    EXPECT_AND_CLEAR(cudaLaunchKernelEx(&config, fillKernel, out, 4, 64), cudaErrorNotSupported);
    void *args[] = {&out, &h[0], &h[1]};  // cudaLaunchKernel with a void** of arguments
    h[0] = 6;
    h[1] = 64;
    CHECK(cudaLaunchKernel((const void *)fillKernel, dim3(2), dim3(32), args, 0, s));
    CHECK(cudaMemcpyAsync(h, out, sizeof(h), cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    for (int i = 0; i < 64; i++) REQUIRE(h[i] == 6);
    printf("ok launch_ex\n");
}

int main() {
    attributes();
    kernels();
    occupancy();
    flags_and_limits();
    reset();
    launch_ex();
    printf("PASSED runtime_queries\n");
    return 0;
}
