// Peer copies around a ring of GPUs: GPU i sends its buffer to GPU i+1 with
// cudaMemcpyPeer, cudaMemcpyPeerAsync (then a kernel on the receiver),
// cudaMemcpy(cudaMemcpyDefault) and cudaMemcpy(cudaMemcpyDeviceToDevice);
// two host threads copy in opposite directions at once; every byte is checked.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>
#include <cuda_runtime.h>

__global__ void addOne(unsigned char *x, size_t n) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) x[i] += 1;
}

static int failures = 0;

#define CHECK(call)                                                                         \
    do {                                                                                    \
        cudaError_t err_ = (call);                                                          \
        if (err_ != cudaSuccess) {                                                          \
            printf("FAIL %s:%d %s -> %s\n", __FILE__, __LINE__, #call, cudaGetErrorName(err_)); \
            failures++;                                                                     \
        }                                                                                   \
    } while (0)

#define SHOW(call)                                                                     \
    do {                                                                               \
        cudaError_t err_ = (call);                                                     \
        printf("%s -> %d %s\n", #call, (int)err_, cudaGetErrorName(err_));               \
    } while (0)

static unsigned char pattern(int device, size_t j) { return (unsigned char)(device * 31 + j * 7 + (j >> 12)); }

// Does GPU `dev`'s buffer hold pattern(`from`) + `plus` everywhere?
static bool holds(unsigned char *d, int dev, size_t size, int from, int plus, const char *what) {
    std::vector<unsigned char> h(size);
    CHECK(cudaSetDevice(dev));
    CHECK(cudaMemcpy(h.data(), d, size, cudaMemcpyDeviceToHost));
    for (size_t j = 0; j < size; j++) {
        if (h[j] != (unsigned char)(pattern(from, j) + plus)) {
            printf("FAIL %s: GPU%d byte %zu is %d, expected %d (from GPU%d)\n", what, dev, j, h[j],
                   (unsigned char)(pattern(from, j) + plus), from);
            failures++;
            return false;
        }
    }
    return true;
}

int main(int argc, char **argv) {
    size_t size = argc > 1 ? strtoull(argv[1], nullptr, 10) : (9u << 20) + 3;  // several protocol chunks
    int n = 0;
    CHECK(cudaGetDeviceCount(&n));
    printf("devices: %d, %zu bytes per copy\n", n, size);
    if (n < 2) {
        printf("FAIL need at least two devices\n");
        return 1;
    }
    std::vector<unsigned char *> buf(n), recv(n);
    std::vector<unsigned char> h(size);
    for (int i = 0; i < n; i++) {
        CHECK(cudaSetDevice(i));
        CHECK(cudaMalloc(&buf[i], size));
        CHECK(cudaMalloc(&recv[i], size));
        for (size_t j = 0; j < size; j++) h[j] = pattern(i, j);
        CHECK(cudaMemcpy(buf[i], h.data(), size, cudaMemcpyHostToDevice));
    }

    // What peer access is possible: copies always work, load/store only within a server.
    for (int i = 0; i < n; i++) {
        printf("canAccessPeer %d:", i);
        for (int j = 0; j < n; j++) {
            int can = -1;
            CHECK(cudaDeviceCanAccessPeer(&can, i, j));
            printf(" %d", can);
        }
        printf("\n");
    }
    CHECK(cudaSetDevice(0));
    SHOW(cudaDeviceEnablePeerAccess(1, 0));
    SHOW(cudaGetLastError());
    SHOW(cudaDeviceDisablePeerAccess(1));
    SHOW(cudaGetLastError());

    // 1. cudaMemcpyPeer around the ring.
    for (int i = 0; i < n; i++) CHECK(cudaMemcpyPeer(recv[(i + 1) % n], (i + 1) % n, buf[i], i, size));
    bool ok = true;
    for (int i = 0; i < n; i++) ok &= holds(recv[(i + 1) % n], (i + 1) % n, size, i, 0, "cudaMemcpyPeer");
    if (ok) printf("ok ring cudaMemcpyPeer\n");

    // 2. cudaMemcpyPeerAsync, then a kernel on the receiver that must see the bytes.
    for (int i = 0; i < n; i++) {
        CHECK(cudaSetDevice(i));
        CHECK(cudaMemset(recv[i], 0, size));
    }
    for (int i = 0; i < n; i++) {
        int to = (i + 1) % n;
        CHECK(cudaMemcpyPeerAsync(recv[to], to, buf[i], i, size, 0));
        CHECK(cudaSetDevice(to));
        addOne<<<(unsigned)((size + 255) / 256), 256>>>(recv[to], size);
        CHECK(cudaGetLastError());
    }
    for (int i = 0; i < n; i++) {
        CHECK(cudaSetDevice(i));
        CHECK(cudaDeviceSynchronize());
    }
    ok = true;
    for (int i = 0; i < n; i++) ok &= holds(recv[(i + 1) % n], (i + 1) % n, size, i, 1, "cudaMemcpyPeerAsync+addOne");
    if (ok) printf("ok ring cudaMemcpyPeerAsync then kernel\n");

    // 3. and 4. cudaMemcpy between devices: the pointers say which.
    const cudaMemcpyKind kinds[] = {cudaMemcpyDefault, cudaMemcpyDeviceToDevice};
    for (cudaMemcpyKind kind : kinds) {
        for (int i = 0; i < n; i++) CHECK(cudaMemcpy(recv[(i + 1) % n], buf[i], size, kind));
        ok = true;
        for (int i = 0; i < n; i++) ok &= holds(recv[(i + 1) % n], (i + 1) % n, size, i, 0, "cudaMemcpy");
        if (ok) printf("ok ring cudaMemcpy kind %d\n", (int)kind);
    }

    // 5. Two host threads copying in opposite directions at once, many times.
    const int rounds = 20;
    size_t small = size < (1u << 20) ? size : (1u << 20);
    auto pump = [&](int from, int to) {
        for (int r = 0; r < rounds; r++) CHECK(cudaMemcpyPeerAsync(recv[to], to, buf[from], from, small, 0));
        CHECK(cudaSetDevice(to));
        CHECK(cudaDeviceSynchronize());
    };
    std::thread a(pump, 0, 1), b(pump, 1, 0);
    a.join();
    b.join();
    if (holds(recv[1], 1, small, 0, 0, "opposite copies") && holds(recv[0], 0, small, 1, 0, "opposite copies"))
        printf("ok opposite concurrent copies\n");

    // 6. Wrong arguments are refused before anything moves.
    SHOW(cudaMemcpyPeer(recv[1], 0, buf[0], 0, 16));   // recv[1] is not GPU0's
    SHOW(cudaMemcpyPeer(recv[1], 1, buf[0], 99, 16));  // no GPU99
    SHOW(cudaMemcpyPeer(recv[1], 1, buf[0], 0, size + 1));  // past the end
    cudaGetLastError();

    for (int i = 0; i < n; i++) {
        CHECK(cudaSetDevice(i));
        CHECK(cudaFree(buf[i]));
        CHECK(cudaFree(recv[i]));
    }
    if (failures) {
        printf("FAILED peer_ring (%d failures)\n", failures);
        return 1;
    }
    printf("PASSED peer_ring gpus=%d bytes=%zu\n", n, size);
    return 0;
}
