// One client session of the load benchmark (benchmarks/load.py): an ordinary
// CUDA program doing a mix of copies and launches, checking every result.
//   load_mix ROUNDS N [GO_FILE]
// Connects (its first CUDA call), prints "CONNECTED <microseconds>", waits
// until GO_FILE exists (so that all sessions run at once; at most 300 s),
// then does ROUNDS rounds of:
//   htod      two cudaMemcpy of N floats to the GPU
//   launch    axpb<<<>>> then add<<<>>>, then cudaDeviceSynchronize
//   dtoh      cudaMemcpy of the result back, checked element by element
//   dtod      cudaMemset + cudaMemcpy device to device, checked by a small read
//   small     a 4-byte cudaMemcpy to the host: one round trip
// and prints one RESULT line: the latency of each call in microseconds.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>
#include <vector>
#include "bench_common.h"

__global__ void axpb(float *x, float a, float b, int n) {
    int i = blockDim.x * blockIdx.x + threadIdx.x;
    if (i < n) x[i] = a * x[i] + b;
}

__global__ void add(const float *x, const float *y, float *z, int n) {
    int i = blockDim.x * blockIdx.x + threadIdx.x;
    if (i < n) z[i] = x[i] + y[i];
}

static void print_list(const char *name, const std::vector<long long> &values, bool last) {
    printf("\"%s\": [", name);
    for (size_t i = 0; i < values.size(); i++) printf("%s%.1f", i ? ", " : "", values[i] / 1000.0);
    printf("]%s", last ? "" : ", ");
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 10;
    int n = argc > 2 ? atoi(argv[2]) : 65536;
    const char *go_file = argc > 3 ? argv[3] : nullptr;
    size_t bytes = n * sizeof(float);
    std::vector<float> x(n), y(n), z(n);
    unsigned seed = (unsigned)getpid();

    long long t0 = now_ns();
    CHECK(cudaFree(0));  // the session: hello, worker, device open
    long long connected = now_ns() - t0;
    printf("CONNECTED %.1f\n", connected / 1000.0);
    fflush(stdout);
    if (go_file) {
        for (int waited = 0; access(go_file, F_OK) != 0; waited++) {
            if (waited > 30000) { printf("FAILED: no go signal within 300 s\n"); return 1; }
            usleep(10000);
        }
    }

    float *dx, *dy, *dz;
    CHECK(cudaMalloc(&dx, bytes));
    CHECK(cudaMalloc(&dy, bytes));
    CHECK(cudaMalloc(&dz, bytes));
    std::vector<long long> htod, launch, dtoh, dtod, small;
    int threads = 256, blocks = (n + threads - 1) / threads;
    for (int r = 0; r < rounds; r++) {
        float a = 1.0f + (seed + r) % 7, b = (float)((seed >> 3) + r) * 0.25f;
        for (int i = 0; i < n; i++) { x[i] = (float)((i + r) % 1000); y[i] = (float)(i % 17) - r; }

        long long t = now_ns();
        CHECK(cudaMemcpy(dx, x.data(), bytes, cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(dy, y.data(), bytes, cudaMemcpyHostToDevice));
        htod.push_back(now_ns() - t);

        t = now_ns();
        axpb<<<blocks, threads>>>(dx, a, b, n);
        add<<<blocks, threads>>>(dx, dy, dz, n);
        CHECK(cudaGetLastError());
        CHECK(cudaDeviceSynchronize());
        launch.push_back(now_ns() - t);

        t = now_ns();
        CHECK(cudaMemcpy(z.data(), dz, bytes, cudaMemcpyDeviceToHost));
        dtoh.push_back(now_ns() - t);
        for (int i = 0; i < n; i++) {
            float want = (a * x[i] + b) + y[i];
            if (z[i] != want) { printf("FAILED round %d at %d: %f != %f\n", r, i, z[i], want); return 1; }
        }

        t = now_ns();
        CHECK(cudaMemset(dy, 0, bytes));
        CHECK(cudaMemcpy(dy + n / 2, dz + n / 2, bytes / 2, cudaMemcpyDeviceToDevice));
        float probe[2];
        CHECK(cudaMemcpy(probe, dy + n / 2 - 1, 2 * sizeof(float), cudaMemcpyDeviceToHost));
        dtod.push_back(now_ns() - t);
        if (probe[0] != 0.0f || probe[1] != z[n / 2]) {
            printf("FAILED round %d: memset/dtod probe %f %f, want 0 %f\n", r, probe[0], probe[1], z[n / 2]);
            return 1;
        }

        t = now_ns();
        float one;
        CHECK(cudaMemcpy(&one, dz + r % n, sizeof(float), cudaMemcpyDeviceToHost));
        small.push_back(now_ns() - t);
        if (one != z[r % n]) { printf("FAILED round %d: small read %f != %f\n", r, one, z[r % n]); return 1; }
    }
    CHECK(cudaFree(dx));
    CHECK(cudaFree(dy));
    CHECK(cudaFree(dz));
    printf("PASSED load_mix rounds=%d n=%d\n", rounds, n);
    printf("RESULT {\"connect_us\": %.1f, \"rounds\": %d, \"n\": %d, ", connected / 1000.0, rounds, n);
    print_list("htod", htod, false);
    print_list("launch", launch, false);
    print_list("dtoh", dtoh, false);
    print_list("dtod", dtod, false);
    print_list("small", small, true);
    printf("}\n");
    return 0;
}
