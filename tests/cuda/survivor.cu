// Keeps every GPU busy (one host thread each) for a number of rounds; a
// device that fails stops its own thread only.  Used to kill one server
// mid-run: the others must finish all their rounds.
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
    int rounds = argc > 1 ? atoi(argv[1]) : 30;
    int micros = argc > 2 ? atoi(argv[2]) : 100000;
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("FAIL no devices\n");
        return 1;
    }
    printf("devices: %d\n", n);
    fflush(stdout);
    std::vector<int> done(n, 0);
    std::vector<cudaError_t> errors(n, cudaSuccess);
    std::vector<double> failed_at(n, 0);
    double start = now();
    std::vector<std::thread> threads;
    for (int d = 0; d < n; d++) {
        threads.emplace_back([&, d] {
            int *counter = nullptr;
            cudaError_t err = cudaSetDevice(d);
            if (err == cudaSuccess) err = cudaMalloc(&counter, sizeof(int));
            if (err == cudaSuccess) err = cudaMemset(counter, 0, sizeof(int));
            for (int r = 0; r < rounds && err == cudaSuccess; r++) {
                spin<<<1, 1>>>(counter, micros);
                int count = -1;
                err = cudaMemcpy(&count, counter, sizeof(int), cudaMemcpyDeviceToHost);
                if (err == cudaSuccess && count != r + 1) {
                    printf("GPU%d: counter %d after %d rounds\n", d, count, r + 1);
                    err = cudaErrorUnknown;
                }
                if (err == cudaSuccess) {
                    done[d] = r + 1;
                    printf("GPU%d round %d\n", d, r + 1);
                    fflush(stdout);
                }
            }
            errors[d] = err;
            failed_at[d] = now() - start;
            if (err != cudaSuccess) {
                printf("GPU%d error %d %s\n", d, (int)err, cudaGetErrorName(err));
                fflush(stdout);
            }
        });
    }
    for (auto &t : threads) t.join();
    for (int d = 0; d < n; d++) {
        if (errors[d] == cudaSuccess)
            printf("GPU%d: ok after %d rounds\n", d, done[d]);
        else
            printf("GPU%d: failed after %d rounds with %d %s at %.2f s\n", d, done[d], (int)errors[d],
                   cudaGetErrorName(errors[d]), failed_at[d]);
    }
    return 0;
}
