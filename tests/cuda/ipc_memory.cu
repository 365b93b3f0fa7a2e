// CUDA IPC memory handles between two processes on one GPU: the parent
// forks a child before either touches CUDA (as NVIDIA's simpleIPC does), the
// parent allocates, fills and exports device memory, the child opens the
// handle (runtime, then driver API), checks the bytes, writes its own, and
// closes it; the parent sees the child's bytes.  Then the errors: a handle
// opened in its own process, a forged handle, a closed pointer.
// Each part prints "ok NAME"; a failure prints "FAILED ...".
#include <cuda.h>
#include <cuda_runtime.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cstdio>
#include <cstring>
#include <vector>

#include "driver_check.h"

static const size_t N = 1 << 20;

static void child(int from_parent, int to_parent) {
    cudaIpcMemHandle_t handle;
    REQUIRE(read(from_parent, &handle, sizeof handle) == (ssize_t)sizeof handle);
    unsigned char *shared = nullptr;
    CHECK(cudaIpcOpenMemHandle((void **)&shared, handle, cudaIpcMemLazyEnablePeerAccess));
    unsigned char *again = nullptr;  // opened twice: the same pointer, counted
    CHECK(cudaIpcOpenMemHandle((void **)&again, handle, cudaIpcMemLazyEnablePeerAccess));
    REQUIRE(again == shared);
    std::vector<unsigned char> seen(N);
    CHECK(cudaMemcpy(seen.data(), shared, N, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < N; i++) REQUIRE(seen[i] == (unsigned char)(i * 7));
    CHECK(cudaMemset(shared + N / 2, 0xAB, N / 2));  // the parent will see these
    CHECK(cudaDeviceSynchronize());
    EXPECT_AND_CLEAR(cudaFree(shared), cudaErrorInvalidValue);  // not this process's to free
    CHECK(cudaIpcCloseMemHandle(again));
    CHECK(cudaIpcCloseMemHandle(shared));
    EXPECT_AND_CLEAR(cudaIpcCloseMemHandle(shared), cudaErrorInvalidValue);  // closed already
    // The driver's face of the same handle.
    DRV(cuInit(0));
    CUipcMemHandle driver_handle;
    memcpy(&driver_handle, &handle, sizeof driver_handle);
    CUdeviceptr mapped;
    DRV(cuIpcOpenMemHandle(&mapped, driver_handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    unsigned char first;
    DRV(cuMemcpyDtoH(&first, mapped, 1));
    REQUIRE(first == 0);
    DRV(cuIpcCloseMemHandle(mapped));
    cudaIpcMemHandle_t forged;
    memset(&forged, 0x5A, sizeof forged);
    void *nothing;
    EXPECT_AND_CLEAR(cudaIpcOpenMemHandle(&nothing, forged, cudaIpcMemLazyEnablePeerAccess),
                     cudaErrorInvalidResourceHandle);
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
    unsigned char *memory;
    CHECK(cudaMalloc(&memory, N));
    std::vector<unsigned char> bytes(N);
    for (size_t i = 0; i < N; i++) bytes[i] = (unsigned char)(i * 7);
    CHECK(cudaMemcpy(memory, bytes.data(), N, cudaMemcpyHostToDevice));
    cudaIpcMemHandle_t handle;
    CHECK(cudaIpcGetMemHandle(&handle, memory));
    EXPECT_AND_CLEAR(cudaIpcGetMemHandle(&handle, memory + 1), cudaErrorInvalidValue);  // not an allocation's start
    CHECK(cudaIpcGetMemHandle(&handle, memory));
    REQUIRE(write(down[1], &handle, sizeof handle) == (ssize_t)sizeof handle);
    char done = 0;
    REQUIRE(read(up[0], &done, 1) == 1 && done == 1);
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(cudaMemcpy(bytes.data(), memory, N, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < N; i++) REQUIRE(bytes[i] == (i < N / 2 ? (unsigned char)(i * 7) : 0xAB));
    printf("ok shared\n");

    void *own;  // a process cannot open its own handle
    EXPECT_AND_CLEAR(cudaIpcOpenMemHandle(&own, handle, cudaIpcMemLazyEnablePeerAccess), cudaErrorDeviceUninitialized);
    CHECK(cudaFree(memory));  // (events: tests/cuda/ipc_events.cu)
    printf("ok errors\n");
    printf("PASSED ipc_memory\n");
    return 0;
}
