// The runtime and the driver API in one program (NVIDIA's ptxjit /
// simpleDrvRuntime style): cudaMalloc'd memory, a <<<>>> kernel of this
// program, and a PTX kernel loaded with cuModuleLoadData and launched with
// cuLaunchKernel on the same cudaStream_t, interleaved.
//
//   driver_mixed DOUBLE_ALL.ptx
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define N 512
#define ROUNDS 4

__global__ void increment(int *x, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += 1;
}

static int failures = 0;

static void check(int ok, const char *name)
{
    printf("%s %s\n", ok ? "ok" : "FAILED", name);
    failures += !ok;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s DOUBLE_ALL.ptx\n", argv[0]);
        return 2;
    }
    int *x = NULL, host[N], n = N;
    for (int i = 0; i < N; i++) host[i] = i;
    cudaStream_t stream;
    check(cudaMalloc(&x, sizeof host) == cudaSuccess && cudaStreamCreate(&stream) == cudaSuccess
          && cudaMemcpy(x, host, sizeof host, cudaMemcpyHostToDevice) == cudaSuccess, "runtime_setup");

    CUmodule module = NULL;
    CUfunction double_all = NULL;
    check(cuInit(0) == CUDA_SUCCESS && cuModuleLoad(&module, argv[1]) == CUDA_SUCCESS
          && cuModuleGetFunction(&double_all, module, "double_all") == CUDA_SUCCESS, "driver_module");

    // x = (x + 1) * 2, ROUNDS times: right only if the stream keeps the order.
    void *params[] = {&x, &n};
    int launched = 1;
    for (int round = 0; round < ROUNDS; round++) {
        increment<<<N / 128, 128, 0, stream>>>(x, n);
        launched &= cudaGetLastError() == cudaSuccess;
        launched &= cuLaunchKernel(double_all, N / 128, 1, 1, 128, 1, 1, 0, (CUstream)stream, params, NULL)
                    == CUDA_SUCCESS;
    }
    check(launched, "interleaved_launches");
    int right = cudaStreamSynchronize(stream) == cudaSuccess
                && cudaMemcpy(host, x, sizeof host, cudaMemcpyDeviceToHost) == cudaSuccess;
    for (int i = 0; right && i < N; i++) {
        int expected = i;
        for (int round = 0; round < ROUNDS; round++) expected = (expected + 1) * 2;
        right = host[i] == expected;
        if (!right) printf("  x[%d] = %d, expected %d\n", i, host[i], expected);
    }
    check(right, "stream_order");

    printf("%s\n", failures ? "FAILED" : "PASSED driver_mixed");
    return failures ? 1 : 0;
}
