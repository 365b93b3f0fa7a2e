// Copies between GPU0 and GPU1, timed: `peer` with cudaMemcpyPeer (server to
// server under rcuda), `staged` through this process (cudaMemcpy to a host
// buffer, then to the other GPU), or `both`.  The source is filled by a
// kernel, and the destination is checked by sampling, so the only bulk bytes
// are the copies themselves.  One JSON line per measurement.
//   peer_copy MODE SIZE[,SIZE...] [REPEATS] [SETTLE_SECONDS]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>
#include <cuda_runtime.h>

__global__ void pattern(unsigned char *x, size_t n, int seed) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) x[i] = (unsigned char)(i * 7 + seed + (i >> 12));
}

static double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

#define CHECK(call)                                                                             \
    do {                                                                                        \
        cudaError_t err_ = (call);                                                              \
        if (err_ != cudaSuccess) {                                                              \
            printf("FAIL %s -> %s\n", #call, cudaGetErrorName(err_));                             \
            exit(1);                                                                            \
        }                                                                                       \
    } while (0)

// Sample the destination at its start, middle and end.
static bool check(unsigned char *dst, size_t size, int seed) {
    const size_t sample = size < 4096 ? size : 4096;
    unsigned char h[4096];
    size_t offsets[3] = {0, (size - sample) / 2, size - sample};
    CHECK(cudaSetDevice(1));
    for (size_t off : offsets) {
        CHECK(cudaMemcpy(h, dst + off, sample, cudaMemcpyDeviceToHost));
        for (size_t j = 0; j < sample; j++) {
            size_t i = off + j;
            if (h[j] != (unsigned char)(i * 7 + seed + (i >> 12))) {
                printf("FAIL byte %zu is %d\n", i, h[j]);
                return false;
            }
        }
    }
    return true;
}

int main(int argc, char **argv) {
    std::string mode = argc > 1 ? argv[1] : "both";
    std::vector<size_t> sizes;
    for (char *s = strtok(argc > 2 ? argv[2] : (char *)"1048576", ","); s; s = strtok(nullptr, ","))
        sizes.push_back(strtoull(s, nullptr, 10));
    int repeats = argc > 3 ? atoi(argv[3]) : 3;
    double settle = argc > 4 ? atof(argv[4]) : 0;  // let session start-up work on the servers finish
    int n = 0;
    CHECK(cudaGetDeviceCount(&n));
    if (n < 2) {
        printf("FAIL need two devices\n");
        return 1;
    }
    {   // Warm-up, not timed: the first copy between two servers opens their connection.
        const size_t warm = 1 << 20;
        unsigned char *a = nullptr, *b = nullptr;
        std::vector<unsigned char> host(warm);
        CHECK(cudaSetDevice(0));
        CHECK(cudaMalloc(&a, warm));
        CHECK(cudaSetDevice(1));
        CHECK(cudaMalloc(&b, warm));
        for (int i = 0; i < 2; i++) {
            if (mode != "staged") CHECK(cudaMemcpyPeer(b, 1, a, 0, warm));
            if (mode != "peer") {
                CHECK(cudaMemcpy(host.data(), a, warm, cudaMemcpyDeviceToHost));
                CHECK(cudaMemcpy(b, host.data(), warm, cudaMemcpyHostToDevice));
            }
        }
        CHECK(cudaFree(b));
        CHECK(cudaSetDevice(0));
        CHECK(cudaFree(a));
        std::this_thread::sleep_for(std::chrono::duration<double>(settle));
    }
    bool ok = true;
    int seed = 0;
    for (size_t size : sizes) {
        unsigned char *src = nullptr, *dst = nullptr;
        std::vector<unsigned char> host(mode == "peer" ? 0 : size);
        CHECK(cudaSetDevice(0));
        CHECK(cudaMalloc(&src, size));
        CHECK(cudaSetDevice(1));
        CHECK(cudaMalloc(&dst, size));
        const char *modes[] = {"peer", "staged"};
        for (const char *m : modes) {
            if (mode != "both" && mode != m) continue;
            for (int r = 0; r < repeats; r++) {
                seed++;
                CHECK(cudaSetDevice(0));
                pattern<<<(unsigned)((size + 255) / 256), 256>>>(src, size, seed);
                CHECK(cudaDeviceSynchronize());
                double t0 = now();
                if (!strcmp(m, "peer")) {
                    CHECK(cudaMemcpyPeer(dst, 1, src, 0, size));
                } else {
                    CHECK(cudaMemcpy(host.data(), src, size, cudaMemcpyDeviceToHost));
                    CHECK(cudaSetDevice(1));
                    CHECK(cudaMemcpy(dst, host.data(), size, cudaMemcpyHostToDevice));
                }
                double seconds = now() - t0;
                bool good = check(dst, size, seed);
                ok &= good;
                printf("{\"mode\": \"%s\", \"bytes\": %zu, \"seconds\": %.6f, \"ok\": %s}\n", m, size, seconds,
                       good ? "true" : "false");
                fflush(stdout);
            }
        }
        CHECK(cudaSetDevice(0));
        CHECK(cudaFree(src));
        CHECK(cudaSetDevice(1));
        CHECK(cudaFree(dst));
    }
    printf(ok ? "PASSED peer_copy\n" : "FAILED peer_copy\n");
    return ok ? 0 : 1;
}
