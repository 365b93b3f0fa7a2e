// CUDA IPC event handles between two processes on one GPU: the parent records
// an interprocess event behind a long kernel and passes its handle to a forked
// child; the child sees it not yet happened, records it itself, and the parent
// sees the child's record.  Then the driver API's face, and the errors.  Each
// part prints "ok NAME"; a failure prints "FAILED ...".
#include <cuda.h>
#include <cuda_runtime.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cstdio>
#include <cstring>

#include "driver_check.h"

// Runs `nanoseconds` (on a sim server its time is modelled: mapped_kernels.py).
__global__ void longKernel(int *flag, long long nanoseconds) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < (unsigned long long)nanoseconds);
    *flag = 42;
}

static const long long LONG_NS = 20LL * 1000 * 1000 * 1000;  // far longer than the child needs to look

static void child(int from_parent, int to_parent) {
    cudaIpcEventHandle_t handle;
    REQUIRE(read(from_parent, &handle, sizeof handle) == (ssize_t)sizeof handle);
    cudaEvent_t shared;
    CHECK(cudaIpcOpenEventHandle(&shared, handle));
    EXPECT_AND_CLEAR(cudaEventQuery(shared), cudaErrorNotReady);  // the parent's kernel still runs
    cudaStream_t stream;
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CHECK(cudaEventRecord(shared, stream));  // the child's record, on its idle stream: done at once
    CHECK(cudaEventSynchronize(shared));
    CHECK(cudaEventQuery(shared));
    CHECK(cudaStreamWaitEvent(stream, shared, 0));
    CHECK(cudaStreamSynchronize(stream));
    float ms;
    EXPECT_AND_CLEAR(cudaEventElapsedTime(&ms, shared, shared), cudaErrorInvalidResourceHandle);  // no timing
    // The driver's face of the same handle.
    DRV(cuInit(0));
    CUipcEventHandle driver_handle;
    memcpy(&driver_handle, &handle, sizeof driver_handle);
    CUevent again;
    DRV(cuIpcOpenEventHandle(&again, driver_handle));
    DRV(cuEventQuery(again));
    DRV(cuEventDestroy(again));
    cudaIpcEventHandle_t forged;
    memset(&forged, 0x5A, sizeof forged);
    cudaEvent_t nothing;
    EXPECT_AND_CLEAR(cudaIpcOpenEventHandle(&nothing, forged), cudaErrorInvalidResourceHandle);
    CHECK(cudaEventDestroy(shared));
    CHECK(cudaStreamDestroy(stream));
    char done = 1;
    REQUIRE(write(to_parent, &done, 1) == 1);
    printf("ok child\n");
}

int main() {
    int down[2], up[2];
    REQUIRE(pipe(down) == 0 && pipe(up) == 0);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        close(down[1]);
        close(up[0]);
        child(down[0], up[1]);
        fflush(stdout);
        _exit(0);
    }
    close(down[0]);
    close(up[1]);
    int supported = 0;
    CHECK(cudaDeviceGetAttribute(&supported, cudaDevAttrIpcEventSupport, 0));
    REQUIRE(supported == 1);
    int *flag;
    CHECK(cudaMalloc(&flag, sizeof(int)));
    cudaStream_t stream;
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaEvent_t event;
    EXPECT_AND_CLEAR(cudaEventCreateWithFlags(&event, cudaEventInterprocess), cudaErrorInvalidValue);  // needs no timing
    CHECK(cudaEventCreateWithFlags(&event, cudaEventInterprocess | cudaEventDisableTiming));
    longKernel<<<1, 1, 0, stream>>>(flag, LONG_NS);
    CHECK(cudaEventRecord(event, stream));
    cudaIpcEventHandle_t handle;
    CHECK(cudaIpcGetEventHandle(&handle, event));
    cudaEvent_t own;  // a process cannot open its own handle
    EXPECT_AND_CLEAR(cudaIpcOpenEventHandle(&own, handle), cudaErrorDeviceUninitialized);
    REQUIRE(write(down[1], &handle, sizeof handle) == (ssize_t)sizeof handle);
    char done = 0;
    REQUIRE(read(up[0], &done, 1) == 1 && done == 1);
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(cudaEventQuery(event));  // the child's record, not the parent's (its kernel still runs)
    printf("ok shared\n");

    cudaEvent_t plain;
    CHECK(cudaEventCreateWithFlags(&plain, cudaEventDisableTiming));
    EXPECT_AND_CLEAR(cudaIpcGetEventHandle(&handle, plain), cudaErrorInvalidResourceHandle);  // not interprocess
    DRV(cuInit(0));
    CUipcEventHandle driver_handle;
    DRV_EXPECT(cuIpcGetEventHandle(&driver_handle, (CUevent)plain), CUDA_ERROR_INVALID_HANDLE);
    DRV(cuIpcGetEventHandle(&driver_handle, (CUevent)event));
    CHECK(cudaEventDestroy(plain));
    CHECK(cudaEventDestroy(event));
    printf("ok errors\n");
    printf("PASSED ipc_events\n");
    return 0;
}
