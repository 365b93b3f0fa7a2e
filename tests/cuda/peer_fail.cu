// A peer copy whose source server goes away while the copy waits behind a
// long kernel: the destination's synchronisation must fail (not hang), and
// the destination GPU must keep working.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

__global__ void spin(int *counter, int micros) { atomicAdd(counter, 1); }

#define SHOW(call)                                                               \
    do {                                                                         \
        cudaError_t err_ = (call);                                               \
        printf("%s -> %d %s\n", #call, (int)err_, cudaGetErrorName(err_));        \
        fflush(stdout);                                                          \
    } while (0)

static double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int main() {
    const size_t size = 1 << 20;
    unsigned char *a0 = nullptr, *b1 = nullptr;
    int *counter = nullptr;
    SHOW(cudaSetDevice(0));
    SHOW(cudaMalloc(&a0, size));
    SHOW(cudaSetDevice(1));
    SHOW(cudaMalloc(&b1, size));
    SHOW(cudaMalloc(&counter, sizeof(int)));
    spin<<<1, 1>>>(counter, 20000000);  // 20 s of modelled GPU time on GPU1
    SHOW(cudaMemcpyPeerAsync(a0, 0, b1, 1, size, 0));  // waits on GPU0 for GPU1's kernel
    printf("posted\n");
    fflush(stdout);
    SHOW(cudaSetDevice(0));
    double t0 = now();
    SHOW(cudaDeviceSynchronize());
    printf("GPU0 synchronize returned after %.2f s\n", now() - t0);
    // GPU0 keeps working.
    unsigned char h[16], back[16];
    memset(h, 42, sizeof(h));
    unsigned char *c0 = nullptr;
    SHOW(cudaMalloc(&c0, sizeof(h)));
    SHOW(cudaMemcpy(c0, h, sizeof(h), cudaMemcpyHostToDevice));
    SHOW(cudaMemcpy(back, c0, sizeof(h), cudaMemcpyDeviceToHost));
    printf("GPU0 still works: %s\n", memcmp(h, back, sizeof(h)) == 0 ? "yes" : "no");
    SHOW(cudaSetDevice(1));
    SHOW(cudaDeviceSynchronize());
    return 0;
}
