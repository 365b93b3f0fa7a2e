// Synchronous calls the interposer makes in C on the device's lane
// (native/sync_fast_path.c: cudaDeviceSynchronize, cudaStreamSynchronize,
// cudaMemGetInfo), mixed with work that takes the Python client and the
// ZeroMQ socket (asynchronous copies from pinned memory, synchronous copies)
// or is recorded in C with the launches (asynchronous copies from pageable
// memory).  Whoever makes each call, program order must hold and every
// result must be right.
//
//   sync_in_c ROUNDS LOOP
//
// Prints device output ("say N") and PASSED.
#include <vector>
#include "check.h"

constexpr int N = 64;

__global__ void addOne(int *x, int n) {
    int i = threadIdx.x;
    if (i < n) x[i] += 1;
}
// addOne with parameters that make a launch's record 88 bytes.
__global__ void addPadded(int *x, int n, const int *, const int *, double) {
    int i = threadIdx.x;
    if (i < n) x[i] += 1;
}
__global__ void say(int n) { printf("say %d\n", n); }
__global__ void outOfBounds(float *x, int n) { x[threadIdx.x] = n; }

static void expect_all(const int *h, int value, const char *where, int round) {
    for (int i = 0; i < N; i++) {
        if (h[i] != value) {
            printf("FAILED %s, round %d: x[%d] = %d, expected %d\n", where, round, i, h[i], value);
            exit(1);
        }
    }
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 30;
    int loop = argc > 2 ? atoi(argv[2]) : 200;
    int *d = nullptr;
    CHECK(cudaMalloc(&d, N * sizeof(int)));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    std::vector<int> h(N);
    int *pinned = nullptr;
    CHECK(cudaMallocHost(&pinned, N * sizeof(int)));
    size_t free_bytes = 0, total_bytes = 0;

    // An asynchronous copy before launches and a synchronisation must land
    // first: from pinned memory (socket traffic) or pageable memory
    // (recorded in C with the launches).
    for (int r = 0; r < rounds; r++) {
        int *source = r % 2 ? pinned : h.data();
        for (int i = 0; i < N; i++) source[i] = r;
        CHECK(cudaMemcpyAsync(d, source, N * sizeof(int), cudaMemcpyHostToDevice, 0));
        addOne<<<1, N>>>(d, N);
        CHECK(cudaGetLastError());
        switch (r % 3) {
        case 0: CHECK(cudaDeviceSynchronize()); break;
        case 1: CHECK(cudaStreamSynchronize(0)); break;
        default:
            CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
            if (total_bytes == 0 || free_bytes > total_bytes) {
                printf("FAILED cudaMemGetInfo: free %zu of %zu\n", free_bytes, total_bytes);
                return 1;
            }
            CHECK(cudaDeviceSynchronize());
        }
        addOne<<<1, N, 0, s>>>(d, N);
        CHECK(cudaStreamSynchronize(s));
        CHECK(cudaMemcpy(h.data(), d, N * sizeof(int), cudaMemcpyDeviceToHost));
        expect_all(h.data(), r + 2, "after a copy, launches and synchronisations", r);
    }

    // Nothing but launches and synchronous calls C can make.
    for (int i = 0; i < loop; i++) {
        addOne<<<1, N>>>(d, N);
        CHECK(cudaDeviceSynchronize());
        CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
        addOne<<<1, N, 0, s>>>(d, N);
        CHECK(cudaStreamSynchronize(s));
    }
    CHECK(cudaMemcpy(h.data(), d, N * sizeof(int), cudaMemcpyDeviceToHost));
    expect_all(h.data(), rounds + 1 + 2 * loop, "after the loop", loop);

    // Bursts of launches longer than a lane message may carry (1 MiB) when
    // the forwarding thread has not taken them yet: the synchronisation
    // leaves them to the socket, which pipelines them.
    const int bursts = 6, burst = 30000;  // 88 bytes each, recorded
    addPadded<<<1, N>>>(d, N, nullptr, nullptr, 0.0);
    for (int b = 0; b < bursts; b++) {
        for (int i = 0; i < burst; i++) addPadded<<<1, N>>>(d, N, nullptr, nullptr, 0.0);
        CHECK(cudaDeviceSynchronize());
    }
    CHECK(cudaMemcpy(h.data(), d, N * sizeof(int), cudaMemcpyDeviceToHost));
    expect_all(h.data(), rounds + 1 + 2 * loop + 1 + bursts * burst, "after the bursts", bursts);

    // Device output comes back with a synchronisation's reply.
    for (int i = 1; i <= 3; i++) {
        say<<<1, 1>>>(i);
        CHECK(cudaDeviceSynchronize());
        fflush(stdout);
    }
    // Output longer than a small reply (4 KiB): the first C version called
    // such a reply malformed and failed the device.
    for (int i = 1000; i < 1700; i++) say<<<1, 1>>>(i);
    CHECK(cudaDeviceSynchronize());
    fflush(stdout);

    // A kernel's fault reported by a synchronisation, and then by every call (sticky).
    float *f = nullptr;
    CHECK(cudaMalloc(&f, 64 * sizeof(float)));
    outOfBounds<<<1, 32>>>(f, 1);
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    outOfBounds<<<1, 128>>>(f, 1);  // 128 threads, 64 floats
    CHECK(cudaGetLastError());      // the launch itself is fine
    EXPECT(cudaDeviceSynchronize(), cudaErrorIllegalAddress);
    EXPECT(cudaGetLastError(), cudaErrorIllegalAddress);
    EXPECT(cudaMemGetInfo(&free_bytes, &total_bytes), cudaErrorIllegalAddress);
    EXPECT(cudaStreamSynchronize(s), cudaErrorIllegalAddress);
    printf("PASSED\n");
    return 0;
}
