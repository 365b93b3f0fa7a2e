// One host thread per GPU, each launching kernels whose GPU time the sim
// server models (multi_kernels.py COSTS): the devices work in parallel, so
// the wall time is about one device's, not the sum.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>
#include <cuda_runtime.h>

__global__ void spin(int *counter, int micros) { atomicAdd(counter, 1); }

static double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int main(int argc, char **argv) {
    int launches = argc > 1 ? atoi(argv[1]) : 2;
    int micros = argc > 2 ? atoi(argv[2]) : 500000;
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("FAIL no devices\n");
        return 1;
    }
    std::vector<double> seconds(n);
    std::vector<int> counts(n, -1);
    std::vector<cudaError_t> errors(n, cudaSuccess);
    std::vector<std::thread> threads;
    double start = now();
    for (int d = 0; d < n; d++) {
        threads.emplace_back([&, d] {
            double t0 = now();
            int *counter = nullptr;
            cudaSetDevice(d);
            cudaMalloc(&counter, sizeof(int));
            cudaMemset(counter, 0, sizeof(int));
            for (int i = 0; i < launches; i++) spin<<<1, 1>>>(counter, micros);
            errors[d] = cudaDeviceSynchronize();
            cudaMemcpy(&counts[d], counter, sizeof(int), cudaMemcpyDeviceToHost);
            cudaFree(counter);
            seconds[d] = now() - t0;
        });
    }
    for (auto &t : threads) t.join();
    double wall = now() - start;
    bool ok = true;
    for (int d = 0; d < n; d++) {
        printf("device %d: %d launches in %.3f s (%s)\n", d, counts[d], seconds[d], cudaGetErrorName(errors[d]));
        ok &= counts[d] == launches && errors[d] == cudaSuccess;
    }
    printf("wall %.3f s for %d device(s), %d x %.3f s each\n", wall, n, launches, micros / 1e6);
    printf(ok ? "PASSED parallel\n" : "FAILED parallel\n");
    return ok ? 0 : 1;
}
