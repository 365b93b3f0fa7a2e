// Program order across rcuda's two channels to a GPU (the ZeroMQ socket and
// the lane): launches, asynchronous copies and memsets, and synchronous
// calls, interleaved, each depending on the one before.  Launches may travel
// on the lane and the rest on the socket; every result must still be the
// one program order gives.  Optional argument: the number of rounds.
#include <cstdio>
#include <thread>
#include <vector>

#include "check.h"

template <class T>
__global__ void fill(T *out, T value, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) out[i] = value;
}

static int one_thread(int rounds, int n) {
    int *d = nullptr, *pinned = nullptr;
    CHECK(cudaMalloc(&d, n * sizeof(int)));
    CHECK(cudaMallocHost(&pinned, 3 * n * sizeof(int)));
    int bad = 0;
    for (int r = 0; r < rounds; ++r) {
        fill<int><<<2, 128>>>(d, 3 * r, n);                                                          // launch
        CHECK(cudaMemcpyAsync(pinned, d, n * sizeof(int), cudaMemcpyDeviceToHost, 0));               // socket
        fill<int><<<2, 128>>>(d, 3 * r + 1, n);                                                      // launch
        CHECK(cudaMemcpyAsync(pinned + n, d, n * sizeof(int), cudaMemcpyDeviceToHost, 0));           // socket
        CHECK(cudaMemsetAsync(d, 0, n * sizeof(int), 0));                                            // recorded
        fill<int><<<2, 128>>>(d, 3 * r + 2, n);                                                      // launch
        CHECK(cudaMemcpy(pinned + 2 * n, d, n * sizeof(int), cudaMemcpyDeviceToHost));               // lane
        for (int k = 0; k < 3; ++k)
            for (int i = 0; i < n; ++i)
                if (pinned[k * n + i] != 3 * r + k) ++bad;
    }
    CHECK(cudaFreeHost(pinned));
    CHECK(cudaFree(d));
    return bad;
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 300;
    int bad = one_thread(rounds, 64);
    // Two threads on the same GPU: each one's order must hold while the
    // other's launches share its device's batches.
    int bad_a = 0, bad_b = 0;
    std::thread a([&] { bad_a = one_thread(rounds / 2, 32); });
    std::thread b([&] { bad_b = one_thread(rounds / 2, 48); });
    a.join();
    b.join();
    printf("out of order: %d, %d, %d\n", bad, bad_a, bad_b);
    REQUIRE(bad == 0 && bad_a == 0 && bad_b == 0);
    printf("PASSED\n");
    return 0;
}
