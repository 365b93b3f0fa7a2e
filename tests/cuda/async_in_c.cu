// Asynchronous memsets and copies recorded in C with the launches
// (native/async_fast_path.c; cudaMemset and cudaMemcpy within a device too,
// asynchronous in CUDA as well), mixed with what the Python client makes:
// copies from or to pinned memory (the socket), larger uploads, calls it
// must refuse or explain.  Whoever makes each call, the bytes, the order and
// the errors must be CUDA's.
//
//   async_in_c LOOP        (on a server with two GPUs)
//
// Prints PASSED.
#include <cstring>
#include <thread>
#include <vector>
#include "check.h"

constexpr int N = 64;
constexpr size_t RECORDED_MAX = 64 << 10;  // native/async_fast_path.c's RECORD_HTOD_MAX

__global__ void addOne(int *x, int n) {
    int i = threadIdx.x;
    if (i < n) x[i] += 1;
}
__global__ void outOfBounds(float *x, int n) { x[threadIdx.x] = n; }

static unsigned char pattern(size_t i, int seed) { return (unsigned char)(i * 31 + seed * 7 + (i >> 12)); }

static void expect_bytes(const unsigned char *h, size_t size, int seed, const char *where) {
    for (size_t i = 0; i < size; i++) {
        if (h[i] != pattern(i, seed)) {
            printf("FAILED %s (%zu bytes, seed %d): byte %zu is %d, expected %d\n", where, size, seed, i, h[i],
                   pattern(i, seed));
            exit(1);
        }
    }
}

static void expect_all(const int *h, int value, const char *where, int round) {
    for (int i = 0; i < N; i++) {
        if (h[i] != value) {
            printf("FAILED %s, round %d: x[%d] = %d, expected %d\n", where, round, i, h[i], value);
            exit(1);
        }
    }
}

// Uploads of `size` bytes at `offset` from pageable memory, which the
// program overwrites as soon as the call returns (CUDA has staged it by
// then), checked with a synchronous copy back.
static void upload_then_reuse(unsigned char *d, size_t size, size_t offset, int seed, cudaMemcpyKind kind,
                              cudaStream_t stream) {
    std::vector<unsigned char> h(size), back(size);
    for (size_t i = 0; i < size; i++) h[i] = pattern(i, seed);
    CHECK(cudaMemcpyAsync(d + offset, h.data(), size, kind, stream));
    memset(h.data(), 0xEE, size);
    CHECK(cudaStreamSynchronize(stream));
    CHECK(cudaMemcpy(back.data(), d + offset, size, cudaMemcpyDeviceToHost));
    expect_bytes(back.data(), size, seed, "an upload from reused pageable memory");
}

int main(int argc, char **argv) {
    int loop = argc > 1 ? atoi(argv[1]) : 200;
    const size_t big = 3 * 1024 * 1024;
    unsigned char *d = nullptr, *e = nullptr;
    CHECK(cudaMalloc(&d, big + 64));
    CHECK(cudaMalloc(&e, big + 64));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));

    // Uploads around the size C records (the larger go to Python), explicit
    // and inferred kinds, the legacy stream and a created one.
    const size_t sizes[] = {1, 7, 4096, RECORDED_MAX, RECORDED_MAX + 1, 1 << 20};
    int seed = 0;
    for (size_t size : sizes) {
        upload_then_reuse(d, size, 0, ++seed, cudaMemcpyHostToDevice, 0);
        upload_then_reuse(d, size, 64, ++seed, cudaMemcpyDefault, s);  // ends where the allocation does
        upload_then_reuse(d, size, 63, ++seed, cudaMemcpyHostToDevice, s);
    }

    // Memsets: only the value's low byte counts; bytes around stay.
    CHECK(cudaMemset(d, 0x11, 4096));
    CHECK(cudaMemsetAsync(d + 100, 0x1FF, 1000, s));
    CHECK(cudaMemsetAsync(d + 1100, 0x42, 1, 0));
    std::vector<unsigned char> h(4096);
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemcpy(h.data(), d, 4096, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < 4096; i++) {
        unsigned char want = i >= 100 && i < 1100 ? 0xFF : i == 1100 ? 0x42 : 0x11;
        if (h[i] != want) {
            printf("FAILED memsets: byte %zu is %#x, expected %#x\n", i, h[i], want);
            return 1;
        }
    }

    // Copies within the device, of every size, overlapping nothing.
    for (size_t size : sizes) {
        std::vector<unsigned char> up(size), back(size);
        ++seed;
        for (size_t i = 0; i < size; i++) up[i] = pattern(i, seed);
        CHECK(cudaMemcpy(d, up.data(), size, cudaMemcpyHostToDevice));
        CHECK(cudaMemcpyAsync(e + 5, d, size, cudaMemcpyDeviceToDevice, s));
        CHECK(cudaMemcpyAsync(d + big - size, e + 5, size, cudaMemcpyDefault, s));
        CHECK(cudaStreamSynchronize(s));
        CHECK(cudaMemcpy(back.data(), d + big - size, size, cudaMemcpyDeviceToHost));
        expect_bytes(back.data(), size, seed, "copies within the device");
    }

    // Program order with launches (recorded in C) and with the socket: a
    // memset, a kernel, an upload, a kernel, a download into pinned memory
    // (Python's), each depending on the one before.
    int *x = nullptr, *pinned = nullptr;
    CHECK(cudaMalloc(&x, N * sizeof(int)));
    CHECK(cudaMallocHost(&pinned, 2 * N * sizeof(int)));
    std::vector<int> values(N);
    for (int r = 0; r < loop; r++) {
        cudaStream_t in = r % 2 ? s : 0;
        CHECK(cudaMemsetAsync(x, 0, N * sizeof(int), in));
        addOne<<<1, N, 0, in>>>(x, N);
        CHECK(cudaMemcpyAsync(pinned, x, N * sizeof(int), cudaMemcpyDeviceToHost, in));
        for (int i = 0; i < N; i++) values[i] = r;
        CHECK(cudaMemcpyAsync(x, values.data(), N * sizeof(int), cudaMemcpyHostToDevice, in));
        addOne<<<1, N, 0, in>>>(x, N);
        CHECK(cudaMemcpyAsync(pinned + N, x, N * sizeof(int), cudaMemcpyDeviceToHost, in));
        CHECK(cudaStreamSynchronize(in));
        expect_all(pinned, 1, "a memset then a kernel", r);
        expect_all(pinned + N, r + 1, "an upload then a kernel", r);
        addOne<<<1, N, 0, in>>>(x, N);
        CHECK(cudaMemcpyAsync(values.data(), x, N * sizeof(int), r % 3 ? cudaMemcpyDeviceToHost : cudaMemcpyDefault,
                              in));
        expect_all(values.data(), r + 2, "a download into pageable memory, done when the call returns", r);
    }

    // cudaMemset and cudaMemcpy within the device do not wait in CUDA either:
    // recorded in the legacy stream, in order with kernels and a copy back.
    int *y = nullptr;
    CHECK(cudaMalloc(&y, N * sizeof(int)));
    for (int r = 0; r < loop; r++) {
        CHECK(cudaMemset(x, r % 2 ? 0 : 0xFF, N * sizeof(int)));  // 0 or -1
        addOne<<<1, N>>>(x, N);
        CHECK(cudaMemcpy(y, x, N * sizeof(int), r % 3 ? cudaMemcpyDeviceToDevice : cudaMemcpyDefault));
        addOne<<<1, N>>>(y, N);
        CHECK(cudaMemcpy(values.data(), y, N * sizeof(int), cudaMemcpyDeviceToHost));
        expect_all(values.data(), r % 2 ? 2 : 1, "a memset, kernels and a copy within the device", r);
    }

    // Pinned memory is read when the copy runs: an upload from a pinned
    // buffer that an earlier download in the stream fills sees those bytes.
    for (int r = 0; r < 20; r++) {
        for (int i = 0; i < N; i++) values[i] = 1000 + r;
        CHECK(cudaMemcpy(x, values.data(), N * sizeof(int), cudaMemcpyHostToDevice));
        CHECK(cudaMemcpyAsync(pinned, x, N * sizeof(int), cudaMemcpyDeviceToHost, s));
        CHECK(cudaMemcpyAsync(x + 0, pinned, N * sizeof(int), cudaMemcpyHostToDevice, s));  // not the old bytes
        addOne<<<1, N, 0, s>>>(x, N);
        CHECK(cudaMemcpyAsync(pinned + N, x, N * sizeof(int), cudaMemcpyDeviceToHost, s));
        CHECK(cudaStreamSynchronize(s));
        expect_all(pinned + N, 1001 + r, "an upload from pinned memory an earlier download filled", r);
    }

    // Two threads recording into their own streams at once.
    auto worker = [&](int id) {
        cudaStream_t mine;
        CHECK(cudaStreamCreate(&mine));
        int *y = nullptr;
        CHECK(cudaMalloc(&y, N * sizeof(int)));
        std::vector<int> up(N), back(N);
        for (int r = 0; r < loop; r++) {
            for (int i = 0; i < N; i++) up[i] = 100 * id + r;
            CHECK(cudaMemsetAsync(y, 0xFF, N * sizeof(int), mine));
            CHECK(cudaMemcpyAsync(y, up.data(), N * sizeof(int), cudaMemcpyHostToDevice, mine));
            addOne<<<1, N, 0, mine>>>(y, N);
            CHECK(cudaStreamSynchronize(mine));
            CHECK(cudaMemcpy(back.data(), y, N * sizeof(int), cudaMemcpyDeviceToHost));
            expect_all(back.data(), 100 * id + r + 1, "a thread's own stream", r);
        }
        CHECK(cudaFree(y));
        CHECK(cudaStreamDestroy(mine));
    };
    std::thread a(worker, 1), b(worker, 2);
    a.join();
    b.join();

    // What C must leave to Python, which explains it: past an allocation's
    // end, freed memory, a NULL pointer, a stream that does not exist, host
    // to host, memory of another device than the stream's.
    unsigned char *gone = nullptr;
    CHECK(cudaMalloc(&gone, 4096));
    CHECK(cudaFree(gone));
    std::vector<unsigned char> host(8192, 1), other(8192, 2);
    EXPECT_AND_CLEAR(cudaMemsetAsync(d + big, 0, 65, s), cudaErrorInvalidValue);
    EXPECT_AND_CLEAR(cudaMemsetAsync(gone, 0, 16, 0), cudaErrorInvalidValue);
    EXPECT_AND_CLEAR(cudaMemcpyAsync(gone, host.data(), 16, cudaMemcpyHostToDevice, s), cudaErrorInvalidValue);
    EXPECT_AND_CLEAR(cudaMemcpyAsync(d, nullptr, 16, cudaMemcpyHostToDevice, s), cudaErrorInvalidValue);
    EXPECT_AND_CLEAR(cudaMemcpyAsync(d, e + big, 65, cudaMemcpyDeviceToDevice, s), cudaErrorInvalidValue);
    EXPECT_AND_CLEAR(cudaMemsetAsync(d, 0, 16, (cudaStream_t)0x1234), cudaErrorInvalidResourceHandle);
    CHECK(cudaMemcpyAsync(other.data(), host.data(), 8192, cudaMemcpyDefault, s));
    CHECK(cudaStreamSynchronize(s));
    REQUIRE(memcmp(other.data(), host.data(), 8192) == 0);
    int count = 0;
    CHECK(cudaGetDeviceCount(&count));
    REQUIRE(count >= 2);
    unsigned char *on1 = nullptr;
    CHECK(cudaSetDevice(1));
    CHECK(cudaMalloc(&on1, 4096));
    CHECK(cudaSetDevice(0));
    for (size_t i = 0; i < 4096; i++) host[i] = pattern(i, 77);
    CHECK(cudaMemcpyAsync(on1, host.data(), 4096, cudaMemcpyHostToDevice, s));  // s is GPU0's
    CHECK(cudaMemsetAsync(on1 + 4000, pattern(4000, 77), 1, 0));               // current device GPU0
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(other.data(), on1, 4096, cudaMemcpyDeviceToHost));
    expect_bytes(other.data(), 4096, 77, "GPU1's memory from GPU0's streams");
    upload_then_reuse(d, 16, 0, 99, cudaMemcpyHostToDevice, s);  // none of that was sticky

    // A kernel's fault: reported by the next synchronisation, and by every
    // call after it, recorded ones included.
    float *f = nullptr;
    CHECK(cudaMalloc(&f, 64 * sizeof(float)));
    outOfBounds<<<1, 128>>>(f, 1);  // 128 threads, 64 floats
    cudaError_t queued = cudaMemsetAsync(x, 0, N * sizeof(int), 0);  // may not know yet, as on a GPU
    REQUIRE(queued == cudaSuccess || queued == cudaErrorIllegalAddress);
    EXPECT(cudaDeviceSynchronize(), cudaErrorIllegalAddress);
    EXPECT(cudaMemsetAsync(x, 0, N * sizeof(int), 0), cudaErrorIllegalAddress);
    EXPECT(cudaMemcpyAsync(x, values.data(), N * sizeof(int), cudaMemcpyHostToDevice, 0), cudaErrorIllegalAddress);
    printf("PASSED\n");
    return 0;
}
