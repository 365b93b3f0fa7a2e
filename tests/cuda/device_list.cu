// Prints what CUDA reports about every device, for the enumeration tests.
#include <cstdio>
#include <cuda_runtime.h>

int main() {
    int count = -1;
    cudaError_t err = cudaGetDeviceCount(&count);
    printf("count %d (%s)\n", count, cudaGetErrorName(err));
    for (int i = 0; i < count; i++) {
        cudaDeviceProp prop;
        err = cudaGetDeviceProperties(&prop, i);
        if (err != cudaSuccess) {
            printf("device %d: cudaGetDeviceProperties -> %s\n", i, cudaGetErrorName(err));
            continue;
        }
        int current = -1;
        cudaSetDevice(i);
        cudaGetDevice(&current);
        void *p = nullptr;
        err = cudaMalloc(&p, 256);
        printf("device %d: %s | mem %zu | cc %d.%d | pci %d | uuid %02x%02x%02x%02x | current %d | ptr %p (%s)\n",
               i, prop.name, prop.totalGlobalMem, prop.major, prop.minor, prop.pciBusID,
               (unsigned char)prop.uuid.bytes[0], (unsigned char)prop.uuid.bytes[1],
               (unsigned char)prop.uuid.bytes[2], (unsigned char)prop.uuid.bytes[3], current, p,
               cudaGetErrorName(err));
        cudaPointerAttributes attr;
        err = cudaPointerGetAttributes(&attr, (char *)p + 100);  // inside the allocation
        printf("attributes %d: type %d device %d devicePointer %s (%s)\n", i, (int)attr.type, attr.device,
               attr.devicePointer == (char *)p + 100 ? "same" : "other", cudaGetErrorName(err));
    }
    int local = 0;
    cudaPointerAttributes host;
    cudaError_t herr = cudaPointerGetAttributes(&host, &local);
    printf("host attributes: type %d device %d hostPointer %s (%s)\n", (int)host.type, host.device,
           host.hostPointer == &local ? "same" : "other", cudaGetErrorName(herr));
    return 0;
}
