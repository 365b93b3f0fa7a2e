// Every GPU's pointers lie apart, wherever the servers' drivers put their
// address windows: allocations of each GPU (copies between them going by the
// pointers alone), mapped memory whose host pointer is its device pointer,
// and one cuMemAddressReserve range holding memory of every GPU.  Run with
// GPUs of two servers whose drivers ignore the client's address hints.  Each
// section prints "ok NAME"; a failure prints "FAILED ...".
#include <cuda.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "driver_check.h"

__global__ void addWords(unsigned *p, unsigned value, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] += value;
}

static void add_on(int device, unsigned *p, unsigned value, int n) {
    CHECK(cudaSetDevice(device));
    addWords<<<(n + 255) / 256, 256>>>(p, value, n);
    CHECK(cudaGetLastError());
}

static int devices() {
    int n = 0;
    CHECK(cudaGetDeviceCount(&n));
    REQUIRE(n >= 2);
    return n;
}

// A word of GPU d's allocation is GPU d's, and a chain of copies from GPU
// to GPU (cudaMemcpyDefault: the pointers say where) adds every GPU's part.
static void device_windows() {
    const int n = devices(), words = 5000;
    const size_t bytes = words * sizeof(unsigned);
    std::vector<unsigned *> on(n);
    for (int d = 0; d < n; d++) {
        CHECK(cudaSetDevice(d));
        CHECK(cudaMalloc(&on[d], bytes));
    }
    for (int d = 0; d < n; d++) {
        cudaPointerAttributes a;
        CHECK(cudaPointerGetAttributes(&a, on[d] + words - 1));
        REQUIRE(a.type == cudaMemoryTypeDevice && a.device == d);
        for (int e = 0; e < d; e++) REQUIRE(on[d] + words <= on[e] || on[e] + words <= on[d]);
    }
    std::vector<unsigned> src(words), got(words);
    for (int i = 0; i < words; i++) src[i] = i * 2654435761u;
    CHECK(cudaMemcpy(on[0], src.data(), bytes, cudaMemcpyDefault));
    add_on(0, on[0], 1, words);
    for (int d = 1; d < n; d++) {
        CHECK(cudaMemcpy(on[d], on[d - 1], bytes, cudaMemcpyDefault));
        add_on(d, on[d], d + 1, words);
    }
    CHECK(cudaMemcpy(got.data(), on[n - 1], bytes, cudaMemcpyDefault));
    const unsigned added = n * (n + 1) / 2;
    for (int i = 0; i < words; i++) REQUIRE(got[i] == src[i] + added);
    std::vector<unsigned> plain(4);
    cudaPointerAttributes a;
    CHECK(cudaPointerGetAttributes(&a, plain.data()));
    REQUIRE(a.type == cudaMemoryTypeUnregistered);
    for (int d = 0; d < n; d++) CHECK(cudaFree(on[d]));
    printf("ok device_windows\n");
}

// Mapped memory on each GPU: the host pointer is the device pointer, and
// freeing it leaves the device's window whole for the next one.
static void mapped() {
    const int n = devices(), words = 3000;
    for (int round = 0; round < 2; round++) {
        for (int d = 0; d < n; d++) {
            CHECK(cudaSetDevice(d));
            unsigned *host, *device;
            CHECK(cudaHostAlloc(&host, words * sizeof(unsigned), cudaHostAllocMapped));
            CHECK(cudaHostGetDevicePointer(&device, host, 0));
            REQUIRE(device == host);
            cudaPointerAttributes a;
            CHECK(cudaPointerGetAttributes(&a, host));
            REQUIRE(a.type == cudaMemoryTypeHost && a.device == d);
            for (int i = 0; i < words; i++) host[i] = i + round;
            add_on(d, host, 10 + d, words);
            CHECK(cudaDeviceSynchronize());
            for (int i = 0; i < words; i++) REQUIRE(host[i] == i + round + 10 + d);
            CHECK(cudaFreeHost(host));
        }
    }
    printf("ok mapped\n");
}

// One reserved range, a part on each GPU: a CUDA reservation is valid on
// every device, so the range must be one every server reserved.
static void vmm() {
    const int n = devices();
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    size_t g = 0;
    DRV(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CUdeviceptr range;
    DRV(cuMemAddressReserve(&range, n * g, 0, 0, 0));
    std::vector<CUmemGenericAllocationHandle> handles(n);
    const int words = (int)(g / sizeof(unsigned));
    std::vector<unsigned> src(words), got(words);
    for (int d = 0; d < n; d++) {
        prop.location.id = d;
        DRV(cuMemCreate(&handles[d], g, &prop, 0));
        DRV(cuMemMap(range + d * g, g, 0, handles[d], 0));
        CUmemAccessDesc access;
        access.location = prop.location;
        access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        DRV(cuMemSetAccess(range + d * g, g, &access, 1));
    }
    for (int d = 0; d < n; d++) {
        for (int i = 0; i < words; i++) src[i] = i ^ (d << 20);
        DRV(cuMemcpyHtoD(range + d * g, src.data(), g));
        add_on(d, (unsigned *)(range + d * g), 100 * (d + 1), words);
        CHECK(cudaDeviceSynchronize());
    }
    for (int d = 0; d < n; d++) {
        DRV(cuMemcpyDtoH(got.data(), range + d * g, g));
        for (int i = 0; i < words; i++) REQUIRE(got[i] == (unsigned)(i ^ (d << 20)) + 100 * (d + 1));
        cudaPointerAttributes a;
        CHECK(cudaPointerGetAttributes(&a, (void *)(range + d * g + 8)));
        REQUIRE(a.type == cudaMemoryTypeDevice && a.device == d);
    }
    DRV(cuMemUnmap(range, n * g));
    for (int d = 0; d < n; d++) DRV(cuMemRelease(handles[d]));
    DRV(cuMemAddressFree(range, n * g));
    printf("ok vmm\n");
}

// Page-locked memory of every kind, passed to kernels by its host address
// (unified addressing), on each GPU in turn: the kernel's writes come back,
// the host's writes made before a launch reach it, and a launch the C fast
// path would make (a kernel already launched there) attaches it too.
static void pinned() {
    const int n = devices(), words = 2048;
    const size_t bytes = words * sizeof(unsigned);
    unsigned *scratch;
    CHECK(cudaSetDevice(0));
    CHECK(cudaMalloc(&scratch, bytes));
    add_on(0, scratch, 1, words);  // addWords is known on GPU0: its next launch there is C's
    CHECK(cudaDeviceSynchronize());
    unsigned *kinds[4];
    CHECK(cudaMallocHost(&kinds[0], bytes));
    CHECK(cudaHostAlloc(&kinds[1], bytes, cudaHostAllocPortable));
    DRV(cuMemAllocHost((void **)&kinds[2], bytes));
    DRV(cuMemHostAlloc((void **)&kinds[3], bytes, CU_MEMHOSTALLOC_PORTABLE));
    for (int k = 0; k < 4; k++) {
        unsigned *p = kinds[k];
        for (int i = 0; i < words; i++) p[i] = i * 3 + k;
        unsigned expected = 0;
        for (int d = 0; d < n; d++) {  // each GPU in turn: the memory follows the kernel
            add_on(d, p, d + 1, words);
            expected += d + 1;
            CHECK(cudaDeviceSynchronize());
            for (int i = 0; i < words; i += 97) REQUIRE(p[i] == i * 3 + k + expected);
            p[5] = 1000;  // the host's write, seen by the next kernel
            add_on(d, p + 5, 1, 1);
            CHECK(cudaDeviceSynchronize());
            REQUIRE(p[5] == 1001);
            for (int i = 0; i < words; i++) p[i] = i * 3 + k;
            expected = 0;
        }
        std::vector<unsigned> got(words);
        CHECK(cudaMemcpy(scratch, p, bytes, cudaMemcpyDefault));  // copies from it still work
        CHECK(cudaMemcpy(got.data(), scratch, bytes, cudaMemcpyDefault));
        for (int i = 0; i < words; i++) REQUIRE(got[i] == (unsigned)(i * 3 + k));
        cudaPointerAttributes a;
        CHECK(cudaPointerGetAttributes(&a, p + 10));
        REQUIRE(a.type == cudaMemoryTypeHost && a.hostPointer == p + 10);
        void *mapped_at;  // all page-locked memory is mapped, at its host address
        CHECK(cudaHostGetDevicePointer(&mapped_at, p + 10, 0));
        REQUIRE(mapped_at == p + 10);
    }
    CHECK(cudaFreeHost(kinds[0]));
    CHECK(cudaFreeHost(kinds[1]));
    DRV(cuMemFreeHost(kinds[2]));
    DRV(cuMemFreeHost(kinds[3]));
    CHECK(cudaFree(scratch));
    printf("ok pinned\n");
}

int main(int argc, char **argv) {
    DRV(cuInit(0));
    struct { const char *name; void (*run)(); } sections[] = {
        {"device_windows", device_windows}, {"mapped", mapped}, {"vmm", vmm}, {"pinned", pinned},
    };
    for (auto &section : sections) {
        bool chosen = argc == 1;
        for (int i = 1; i < argc; i++) chosen |= strcmp(argv[i], section.name) == 0;
        if (chosen) section.run();
    }
    printf("PASSED address_windows\n");
    return 0;
}
