// Holds device memory for a while, checking it stays intact: a client to
// watch with rcuda smi, to kill, or to run beside a misbehaving one.
//   hold_memory MIB SECONDS
#include <cstdio>
#include <cstdlib>
#include <unistd.h>
#include <cuda_runtime.h>

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? atoi(argv[1]) : 64;
    int seconds = argc > 2 ? atoi(argv[2]) : 10;
    unsigned char *d;
    cudaError_t err = cudaMalloc(&d, mib << 20);
    if (err != cudaSuccess) { printf("FAILED cudaMalloc: %s\n", cudaGetErrorName(err)); return 1; }
    cudaMemset(d, 0x5A, mib << 20);
    printf("holding %zu MiB pid %d\n", mib, (int)getpid());
    fflush(stdout);
    for (int i = 0; i < seconds * 10; i++) {
        usleep(100000);
        unsigned char probe[16];
        err = cudaMemcpy(probe, d + (i * 4099) % ((mib << 20) - 16), sizeof(probe), cudaMemcpyDeviceToHost);
        if (err != cudaSuccess) { printf("FAILED cudaMemcpy: %s\n", cudaGetErrorName(err)); return 1; }
        for (int j = 0; j < 16; j++)
            if (probe[j] != 0x5A) { printf("FAILED memory changed\n"); return 1; }
    }
    cudaFree(d);
    printf("released\n");
    return 0;
}
