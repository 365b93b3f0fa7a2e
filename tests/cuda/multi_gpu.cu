// simpleMultiGPU-style: one host thread per GPU; each GPU reduces its slice
// of the data, the host combines the partial sums and checks the total.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>
#include <cuda_runtime.h>

constexpr int BLOCKS = 32, THREADS = 256;

__global__ void reduceKernel(float *out, const float *in, int n) {
    __shared__ float partial[THREADS];
    float sum = 0;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) sum += in[i];
    partial[threadIdx.x] = sum;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}

struct Slice {
    int device = 0, offset = 0, n = 0;
    double sum = 0;
    cudaError_t error = cudaSuccess;
    const char *failed_call = "";
};

#define TRY(call)                                                   \
    do {                                                            \
        cudaError_t err_ = (call);                                  \
        if (err_ != cudaSuccess) {                                  \
            slice.error = err_;                                     \
            slice.failed_call = #call;                              \
            return;                                                 \
        }                                                           \
    } while (0)

static void reduce_on_gpu(Slice &slice, const float *data) {
    TRY(cudaSetDevice(slice.device));
    float *d_in = nullptr, *d_out = nullptr;
    TRY(cudaMalloc(&d_in, slice.n * sizeof(float)));
    TRY(cudaMalloc(&d_out, BLOCKS * sizeof(float)));
    TRY(cudaMemcpy(d_in, data + slice.offset, slice.n * sizeof(float), cudaMemcpyHostToDevice));
    reduceKernel<<<BLOCKS, THREADS>>>(d_out, d_in, slice.n);
    TRY(cudaGetLastError());
    float partial[BLOCKS];
    TRY(cudaMemcpy(partial, d_out, sizeof(partial), cudaMemcpyDeviceToHost));
    for (float p : partial) slice.sum += p;
    TRY(cudaFree(d_in));
    TRY(cudaFree(d_out));
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1 << 22;
    int gpus = 0;
    cudaError_t err = cudaGetDeviceCount(&gpus);
    if (err != cudaSuccess || gpus == 0) {
        printf("no devices: %s\n", cudaGetErrorName(err));
        return 1;
    }
    printf("devices: %d\n", gpus);
    std::vector<float> data(n);
    double expected = 0;
    for (int i = 0; i < n; i++) {
        data[i] = (float)((i * 7919) % 1000) / 100.0f;
        expected += data[i];
    }
    std::vector<Slice> slices(gpus);
    std::vector<std::thread> threads;
    for (int g = 0, offset = 0; g < gpus; g++) {
        slices[g].device = g;
        slices[g].offset = offset;
        slices[g].n = n / gpus + (g < n % gpus ? 1 : 0);
        offset += slices[g].n;
        threads.emplace_back(reduce_on_gpu, std::ref(slices[g]), data.data());
    }
    for (auto &t : threads) t.join();
    double total = 0;
    bool ok = true;
    for (auto &s : slices) {
        cudaDeviceProp prop;
        cudaGetDeviceProperties(&prop, s.device);
        if (s.error != cudaSuccess) {
            printf("GPU%d (%s): %s failed: %s\n", s.device, prop.name, s.failed_call, cudaGetErrorName(s.error));
            ok = false;
            continue;
        }
        printf("GPU%d (%s): %d elements, sum %.3f\n", s.device, prop.name, s.n, s.sum);
        total += s.sum;
    }
    double rel = fabs(total - expected) / expected;
    printf("total %.3f expected %.3f (relative error %.2e)\n", total, expected, rel);
    if (!ok || rel > 1e-5) {
        printf("FAILED simpleMultiGPU\n");
        return 1;
    }
    printf("PASSED simpleMultiGPU gpus=%d n=%d\n", gpus, n);
    return 0;
}
