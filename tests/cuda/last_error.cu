// cudaGetLastError and cudaPeekAtLastError, answered in C while nothing has
// failed (native/last_error.c): every case where C must not answer alone.
// Needs two GPUs; prints "PASSED" at the end.
#include <cstdio>
#include <thread>

#include "check.h"

__global__ void outOfBounds(float *x, int n) { x[threadIdx.x] = n; }
__global__ void noParams() {}

#define LAST(call, code) EXPECT(call, code)

int main(int argc, char **argv) {
    int launches = argc > 1 ? atoi(argv[1]) : 1000;
    int count = 0;
    CHECK(cudaGetDeviceCount(&count));
    REQUIRE(count >= 2);

    // The launch-and-check loop C answers by itself (the test counts the
    // calls that went to Python with RCUDA_STATS).
    CHECK(cudaSetDevice(0));
    for (int i = 0; i < launches; ++i) {
        noParams<<<1, 1>>>();
        CHECK(cudaGetLastError());
    }
    CHECK(cudaDeviceSynchronize());

    // This thread's own error: reported once by Get, as often as asked by Peek.
    LAST(cudaSetDevice(99), cudaErrorInvalidDevice);
    LAST(cudaPeekAtLastError(), cudaErrorInvalidDevice);
    LAST(cudaPeekAtLastError(), cudaErrorInvalidDevice);
    LAST(cudaGetLastError(), cudaErrorInvalidDevice);
    LAST(cudaGetLastError(), cudaSuccess);
    LAST(cudaPeekAtLastError(), cudaSuccess);

    // Another thread's error stays that thread's.
    std::thread([] {
        LAST(cudaSetDevice(42), cudaErrorInvalidDevice);
        LAST(cudaGetLastError(), cudaErrorInvalidDevice);
    }).join();
    LAST(cudaGetLastError(), cudaSuccess);

    // A sticky error on GPU1, made by another thread while this one knows
    // itself clean on GPU0: still clean here, but not once on GPU1.
    LAST(cudaGetLastError(), cudaSuccess);
    std::thread([] {
        CHECK(cudaSetDevice(1));
        float *d = nullptr;
        CHECK(cudaMalloc(&d, 64 * sizeof(float)));
        outOfBounds<<<1, 128>>>(d, 64);  // 128 threads, 64 floats
        LAST(cudaDeviceSynchronize(), cudaErrorIllegalAddress);
    }).join();
    LAST(cudaGetLastError(), cudaSuccess);
    LAST(cudaPeekAtLastError(), cudaSuccess);
    CHECK(cudaSetDevice(1));
    LAST(cudaPeekAtLastError(), cudaErrorIllegalAddress);
    LAST(cudaGetLastError(), cudaErrorIllegalAddress);
    LAST(cudaGetLastError(), cudaErrorIllegalAddress);  // sticky: stays
    CHECK(cudaSetDevice(0));
    LAST(cudaGetLastError(), cudaSuccess);
    noParams<<<1, 1>>>();
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    printf("PASSED\n");
    return 0;
}
