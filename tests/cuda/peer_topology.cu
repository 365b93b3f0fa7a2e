// Peer topology as the program sees it (cudaDeviceGetP2PAttribute,
// cudaDeviceCanAccessPeer) and, where GPU0 and GPU1 can access each other,
// simpleP2P's flow: enable both ways, copy between them, a kernel on each GPU
// reading the other's buffer; and that a kernel cannot reach the other's
// memory before peer access is enabled or after it is disabled.  Where they
// cannot (different servers), copies between them still work.
// Prints "p2p I J: ..." per pair of GPUs and "ok SECTION" per section.
#include <cstdio>
#include <vector>
#include "check.h"

__global__ void scaleByTwo(const float *src, float *dst, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = 2 * src[i];
}

static const int N = 1 << 16;
static const cudaDeviceP2PAttr ATTRIBUTES[] = {
    cudaDevP2PAttrAccessSupported, cudaDevP2PAttrPerformanceRank, cudaDevP2PAttrNativeAtomicSupported,
    cudaDevP2PAttrCudaArrayAccessSupported};

static void topology(int count) {
    for (int i = 0; i < count; i++) {
        for (int j = 0; j < count; j++) {
            if (i == j) continue;
            int values[4], can = -1;
            for (int a = 0; a < 4; a++) CHECK(cudaDeviceGetP2PAttribute(&values[a], ATTRIBUTES[a], i, j));
            CHECK(cudaDeviceCanAccessPeer(&can, i, j));
            printf("p2p %d %d: access %d rank %d atomics %d arrays %d canAccessPeer %d\n", i, j, values[0],
                   values[1], values[2], values[3], can);
            REQUIRE(can == values[0]);
        }
    }
    printf("ok topology\n");
}

static void bad_queries(int count) {
    int value = -1;
    EXPECT_AND_CLEAR(cudaDeviceGetP2PAttribute(&value, cudaDevP2PAttrAccessSupported, 0, 0), cudaErrorInvalidDevice);
    EXPECT_AND_CLEAR(cudaDeviceGetP2PAttribute(&value, cudaDevP2PAttrAccessSupported, 0, count),
                     cudaErrorInvalidDevice);
    EXPECT_AND_CLEAR(cudaDeviceGetP2PAttribute(&value, cudaDevP2PAttrAccessSupported, -1, 1), cudaErrorInvalidDevice);
    EXPECT_AND_CLEAR(cudaDeviceGetP2PAttribute(&value, (cudaDeviceP2PAttr)99, 0, 1), cudaErrorInvalidValue);
    EXPECT_AND_CLEAR(cudaDeviceGetP2PAttribute(nullptr, cudaDevP2PAttrAccessSupported, 0, 1), cudaErrorInvalidValue);
    REQUIRE(value == -1);
    EXPECT_AND_CLEAR(cudaDeviceEnablePeerAccess(0, 0), cudaErrorInvalidDevice);  // on GPU0: itself
    EXPECT_AND_CLEAR(cudaDeviceEnablePeerAccess(count, 0), cudaErrorInvalidDevice);
    EXPECT_AND_CLEAR(cudaDeviceDisablePeerAccess(1), cudaErrorPeerAccessNotEnabled);
    printf("ok bad queries\n");
}

static void fill(float *device_buffer) {
    std::vector<float> h(N);
    for (int i = 0; i < N; i++) h[i] = (float)(i % 4096);
    CHECK(cudaMemcpy(device_buffer, h.data(), N * sizeof(float), cudaMemcpyHostToDevice));
}

// Is buffer `d` (of the current device) (i % 4096) * factor everywhere?
static bool holds(const float *d, float factor) {
    std::vector<float> h(N);
    CHECK(cudaMemcpy(h.data(), d, N * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < N; i++) {
        if (h[i] != (float)(i % 4096) * factor) {
            printf("element %d is %f, expected %f\n", i, h[i], (float)(i % 4096) * factor);
            return false;
        }
    }
    return true;
}

// A kernel on GPU1 reading GPU0's `g0` without peer access: an illegal
// address on GPU1 (sticky), which cudaDeviceReset clears.
static void kernel_on_gpu1_cannot_read(const float *g0, const char *when) {
    float *scratch = nullptr;
    CHECK(cudaSetDevice(1));
    CHECK(cudaMalloc(&scratch, N * sizeof(float)));
    scaleByTwo<<<N / 256, 256>>>(g0, scratch, N);
    CHECK(cudaGetLastError());  // the launch itself is fine: the kernel fails as it runs
    EXPECT(cudaDeviceSynchronize(), cudaErrorIllegalAddress);
    CHECK(cudaDeviceReset());
    printf("ok no access %s\n", when);
}

static void simple_p2p() {
    float *g0 = nullptr, *g1 = nullptr;
    CHECK(cudaSetDevice(0));
    CHECK(cudaMalloc(&g0, N * sizeof(float)));
    fill(g0);
    kernel_on_gpu1_cannot_read(g0, "before enabling");

    CHECK(cudaSetDevice(0));
    CHECK(cudaDeviceEnablePeerAccess(1, 0));
    EXPECT_AND_CLEAR(cudaDeviceEnablePeerAccess(1, 0), cudaErrorPeerAccessAlreadyEnabled);
    CHECK(cudaSetDevice(1));
    CHECK(cudaDeviceEnablePeerAccess(0, 0));
    CHECK(cudaMalloc(&g1, N * sizeof(float)));
    CHECK(cudaMemset(g1, 0, N * sizeof(float)));

    // Copies both ways: cudaMemcpyDefault (the pointers say where), cudaMemcpyPeer.
    CHECK(cudaMemcpy(g1, g0, N * sizeof(float), cudaMemcpyDefault));
    REQUIRE(holds(g1, 1));
    CHECK(cudaSetDevice(0));
    CHECK(cudaMemset(g0, 0, N * sizeof(float)));
    CHECK(cudaMemcpyPeer(g0, 0, g1, 1, N * sizeof(float)));
    REQUIRE(holds(g0, 1));
    printf("ok peer copies\n");

    // A kernel on GPU1 reads GPU0's buffer and writes its own, then one on
    // GPU0 reads GPU1's and writes its own.
    CHECK(cudaSetDevice(1));
    scaleByTwo<<<N / 256, 256>>>(g0, g1, N);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaSetDevice(0));
    scaleByTwo<<<N / 256, 256>>>(g1, g0, N);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    REQUIRE(holds(g0, 4));
    CHECK(cudaSetDevice(1));
    REQUIRE(holds(g1, 2));
    printf("ok kernels on peer memory\n");

    CHECK(cudaSetDevice(0));
    CHECK(cudaDeviceDisablePeerAccess(1));
    CHECK(cudaSetDevice(1));
    CHECK(cudaDeviceDisablePeerAccess(0));
    EXPECT_AND_CLEAR(cudaDeviceDisablePeerAccess(0), cudaErrorPeerAccessNotEnabled);
    kernel_on_gpu1_cannot_read(g0, "after disabling");
    CHECK(cudaSetDevice(0));
    CHECK(cudaFree(g0));
}

static void copies_only() {
    float *g0 = nullptr, *g1 = nullptr;
    CHECK(cudaSetDevice(0));
    EXPECT_AND_CLEAR(cudaDeviceEnablePeerAccess(1, 0), cudaErrorPeerAccessUnsupported);
    CHECK(cudaMalloc(&g0, N * sizeof(float)));
    fill(g0);
    CHECK(cudaSetDevice(1));
    EXPECT_AND_CLEAR(cudaDeviceEnablePeerAccess(0, 0), cudaErrorPeerAccessUnsupported);
    CHECK(cudaMalloc(&g1, N * sizeof(float)));
    CHECK(cudaMemcpy(g1, g0, N * sizeof(float), cudaMemcpyDefault));
    REQUIRE(holds(g1, 1));
    scaleByTwo<<<N / 256, 256>>>(g1, g1, N);
    CHECK(cudaMemcpyPeer(g0, 0, g1, 1, N * sizeof(float)));
    CHECK(cudaSetDevice(0));
    REQUIRE(holds(g0, 2));
    printf("ok copies without peer access\n");
}

int main() {
    int count = 0;
    CHECK(cudaGetDeviceCount(&count));
    REQUIRE(count >= 2);
    topology(count);
    bad_queries(count);
    int can = 0;
    CHECK(cudaDeviceCanAccessPeer(&can, 1, 0));
    if (can) simple_p2p();
    else copies_only();
    printf("PASSED peer_topology\n");
    return 0;
}
