// cudaMemcpy made in C on the device's lane (native/sync_fast_path.c, with
// the allocation table of native/allocation_table.c), mixed with what the
// Python client makes: asynchronous copies on the ZeroMQ socket, launches,
// copies it must refuse or explain.  Whoever makes each call, the bytes,
// the order and the errors must be CUDA's.
//
//   memcpy_in_c LOOP
//
// Prints device output ("say N") and PASSED.
#include <cstring>
#include <thread>
#include <vector>
#include "check.h"

constexpr int N = 64;

__global__ void addOne(int *x, int n) {
    int i = threadIdx.x;
    if (i < n) x[i] += 1;
}
__global__ void say(int n) { printf("say %d\n", n); }
__global__ void outOfBounds(float *x, int n) { x[threadIdx.x] = n; }

static unsigned char pattern(size_t i, int seed) { return (unsigned char)(i * 31 + seed * 7 + (i >> 12)); }

// Host to device and back at `size` bytes, `offset` bytes into an allocation.
static void round_trip(unsigned char *d, size_t size, size_t offset, int seed, cudaMemcpyKind up, cudaMemcpyKind down) {
    std::vector<unsigned char> h(size), back(size, 0);
    for (size_t i = 0; i < size; i++) h[i] = pattern(i, seed);
    CHECK(cudaMemcpy(d + offset, h.data(), size, up));
    CHECK(cudaMemcpy(back.data(), d + offset, size, down));
    for (size_t i = 0; i < size; i++) {
        if (back[i] != h[i]) {
            printf("FAILED round trip of %zu bytes at +%zu (seed %d): byte %zu is %d, expected %d\n", size, offset,
                   seed, i, back[i], h[i]);
            exit(1);
        }
    }
}

static void expect_all(const int *h, int value, const char *where) {
    for (int i = 0; i < N; i++) {
        if (h[i] != value) {
            printf("FAILED %s: x[%d] = %d, expected %d\n", where, i, h[i], value);
            exit(1);
        }
    }
}

int main(int argc, char **argv) {
    int loop = argc > 1 ? atoi(argv[1]) : 200;
    const size_t big = 3 * 1024 * 1024 + 5;  // more than a socket's buffers take at once
    unsigned char *d = nullptr;
    CHECK(cudaMalloc(&d, big + 64));

    // Sizes from one byte to megabytes, both directions, explicit and inferred kinds.
    const size_t sizes[] = {1, 7, 4096, 65536 + 3, 1 << 20, big};
    int seed = 0;
    for (size_t size : sizes) {
        round_trip(d, size, 0, ++seed, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost);
        round_trip(d, size, 64, ++seed, cudaMemcpyDefault, cudaMemcpyDefault);  // ends where the allocation does
        round_trip(d, size, 63, ++seed, cudaMemcpyHostToDevice, cudaMemcpyDefault);
    }

    // Order with the socket and with recorded launches: an asynchronous copy
    // from pinned memory (the socket) or pageable memory (recorded in C), or
    // a copy made in C, then kernels (recorded in C), then a copy back in C
    // must see both.
    int *x = nullptr, *pinned = nullptr;
    CHECK(cudaMalloc(&x, N * sizeof(int)));
    CHECK(cudaMallocHost(&pinned, N * sizeof(int)));
    std::vector<int> h(N);
    for (int r = 0; r < loop; r++) {
        for (int i = 0; i < N; i++) h[i] = pinned[i] = r;
        if (r % 3 == 1)
            CHECK(cudaMemcpyAsync(x, pinned, N * sizeof(int), cudaMemcpyHostToDevice, 0));
        else if (r % 3 == 2)
            CHECK(cudaMemcpyAsync(x, h.data(), N * sizeof(int), cudaMemcpyHostToDevice, 0));
        else
            CHECK(cudaMemcpy(x, h.data(), N * sizeof(int), cudaMemcpyHostToDevice));
        addOne<<<1, N>>>(x, N);
        addOne<<<1, N>>>(x, N);
        std::fill(h.begin(), h.end(), -1);
        CHECK(cudaMemcpy(h.data(), x, N * sizeof(int), cudaMemcpyDeviceToHost));
        expect_all(h.data(), r + 2, "a copy after an upload and two kernels");
    }

    // Two threads copying at once: one takes the lane, the other Python's way.
    auto worker = [&](int id) {
        unsigned char *mine = nullptr;
        CHECK(cudaMalloc(&mine, 8192));
        for (int i = 0; i < loop / 2; i++) round_trip(mine, 4096 + id, id, 1000 * id + i, cudaMemcpyHostToDevice,
                                                      cudaMemcpyDeviceToHost);
        CHECK(cudaFree(mine));
    };
    std::thread a(worker, 1), b(worker, 2);
    a.join();
    b.join();

    // What C must leave to Python, which explains it: past an allocation's
    // end, freed memory, host to host, a NULL pointer; and a copy within the
    // device, which C records (native/async_fast_path.c) rather than waits for.
    unsigned char *gone = nullptr;
    CHECK(cudaMalloc(&gone, 4096));
    CHECK(cudaFree(gone));
    std::vector<unsigned char> host(8192, 1), other(8192, 2);
    EXPECT_AND_CLEAR(cudaMemcpy(host.data(), d + big, 65, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
    EXPECT_AND_CLEAR(cudaMemcpy(gone, host.data(), 16, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
    EXPECT_AND_CLEAR(cudaMemcpy(host.data(), gone, 16, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
    EXPECT_AND_CLEAR(cudaMemcpy(host.data(), nullptr, 16, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
    CHECK(cudaMemcpy(other.data(), host.data(), 8192, cudaMemcpyDefault));
    REQUIRE(memcmp(other.data(), host.data(), 8192) == 0);
    CHECK(cudaMemcpy(d + 4096, d, 4096, cudaMemcpyDefault));
    round_trip(d, 16, 0, 99, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost);  // none of that was sticky

    // Device output longer than a small reply comes back with the copy's reply.
    for (int i = 0; i < 700; i++) say<<<1, 1>>>(i);
    CHECK(cudaMemcpy(h.data(), x, N * sizeof(int), cudaMemcpyDeviceToHost));
    fflush(stdout);
    expect_all(h.data(), loop + 1, "a copy that brought device output");

    // A kernel's fault reported by the copy after it, and by every call after that.
    float *f = nullptr;
    CHECK(cudaMalloc(&f, 64 * sizeof(float)));
    outOfBounds<<<1, 128>>>(f, 1);  // 128 threads, 64 floats
    EXPECT(cudaMemcpy(h.data(), x, N * sizeof(int), cudaMemcpyDeviceToHost), cudaErrorIllegalAddress);
    EXPECT(cudaMemcpy(x, h.data(), N * sizeof(int), cudaMemcpyHostToDevice), cudaErrorIllegalAddress);
    EXPECT(cudaDeviceSynchronize(), cudaErrorIllegalAddress);
    printf("PASSED\n");
    return 0;
}
