// Error paths, one scenario per argument.  Prints what CUDA reports, so the
// test can compare with what a GPU does.
#include <cassert>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

#define SHOW(call)                                                               \
    do {                                                                         \
        cudaError_t err_ = (call);                                               \
        printf("%s -> %d %s\n", #call, (int)err_, cudaGetErrorName(err_));        \
    } while (0)

__global__ void noSimKernel(float *x) { x[0] = 1; }
__global__ void outOfBounds(float *x, int n) { x[threadIdx.x] = n; }
__global__ void failingAssert(int v) { assert(v == 0); }
__global__ void raisesError(int v) {}

int main(int argc, char **argv) {
    const char *what = argc > 1 ? argv[1] : "count";
    if (!strcmp(what, "count")) {
        int n = -1;
        SHOW(cudaGetDeviceCount(&n));
        printf("count=%d\n", n);
        SHOW(cudaGetLastError());
        float *p = nullptr;
        SHOW(cudaMalloc(&p, 16));
        if (argc > 2) {  // a program that ignores errors and goes on calling
            cudaError_t last = cudaSuccess;
            for (int i = 0; i < atoi(argv[2]); i++) last = cudaMalloc(&p, 16);
            printf("after %s more calls: %d %s\n", argv[2], (int)last, cudaGetErrorName(last));
        }
        return 0;
    }
    float *d = nullptr;
    SHOW(cudaMalloc(&d, 64 * sizeof(float)));
    if (!strcmp(what, "missing")) {
        noSimKernel<<<1, 1>>>(d);
        SHOW(cudaGetLastError());
        SHOW(cudaGetLastError());  // not sticky: cleared by the first
        SHOW(cudaDeviceSynchronize());
    } else if (!strcmp(what, "oob")) {
        outOfBounds<<<1, 128>>>(d, 64);  // 128 threads, 64 floats
        SHOW(cudaGetLastError());        // launch itself is fine
        SHOW(cudaDeviceSynchronize());   // the fault surfaces here
        SHOW(cudaGetLastError());        // sticky: stays
        SHOW(cudaGetLastError());
        float *q = nullptr;
        SHOW(cudaMalloc(&q, 16));        // the context is lost
    } else if (!strcmp(what, "assert")) {
        failingAssert<<<1, 1>>>(1);
        SHOW(cudaDeviceSynchronize());
        SHOW(cudaGetLastError());
    } else if (!strcmp(what, "raise")) {
        raisesError<<<1, 1>>>(1);
        SHOW(cudaDeviceSynchronize());
    } else if (!strcmp(what, "badptr")) {
        float h[4];
        SHOW(cudaMemcpy(h, (void *)0x1234, sizeof(h), cudaMemcpyDeviceToHost));
        SHOW(cudaGetLastError());
        SHOW(cudaGetLastError());
        SHOW(cudaFree((void *)0x1234));
        SHOW(cudaMemcpy(d, h, sizeof(h), (cudaMemcpyKind)42));
        SHOW(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost));  // still works
    } else if (!strcmp(what, "badconfig")) {
        outOfBounds<<<1, 4096>>>(d, 64);
        SHOW(cudaGetLastError());
        outOfBounds<<<dim3(1, 1, 1), dim3(1, 1, 0)>>>(d, 64);
        SHOW(cudaGetLastError());
        SHOW(cudaDeviceSynchronize());
    } else if (!strcmp(what, "baddevice")) {
        SHOW(cudaSetDevice(99));
        SHOW(cudaGetLastError());
        int dev = -1;
        SHOW(cudaGetDevice(&dev));
        printf("device=%d\n", dev);
    }
    return 0;
}
