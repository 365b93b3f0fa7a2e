// Memory: memsets, 2-D and pitched copies, __device__/__constant__ symbols,
// cudaMemcpyDefault, pinned host memory, pointer attributes, and the errors
// of bad requests.  An ordinary CUDA program; each section prints "ok <name>".
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

#include "check.h"

__constant__ float coeffs[4];
__device__ int counter = 7;
__device__ float table[256];
namespace ns { __device__ int nsvar[2] = {11, 22}; }

__global__ void scaleByConst(float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= coeffs[i % 4];
}
__global__ void readCounter(int *out) { out[0] = counter; out[1] = ns::nsvar[1]; }
__global__ void incTable(float *t, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) t[i] += 1.0f;
}
__global__ void pitchedAdd(float *out, size_t pitch, int width, int height) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
    if (x < width && y < height) ((float *)((char *)out + y * pitch))[x] += 1.0f;
}

static void memsets() {
    unsigned char *d, h[1000];
    CHECK(cudaMalloc(&d, sizeof(h)));
    CHECK(cudaMemset(d, 0xAB, sizeof(h)));
    CHECK(cudaMemset(d + 100, 0x01, 50));
    CHECK(cudaMemsetAsync(d + 900, 0x1FF, 100, 0));  // only the low byte counts
    CHECK(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost));
    for (int i = 0; i < 1000; i++) REQUIRE(h[i] == (i >= 100 && i < 150 ? 0x01 : i >= 900 ? 0xFF : 0xAB));
    EXPECT_AND_CLEAR(cudaMemset(d + 990, 0, 20), cudaErrorInvalidValue);  // runs past the allocation
    size_t free0, total;
    CHECK(cudaMemGetInfo(&free0, &total));
    void *big;
    CHECK(cudaMalloc(&big, 64 << 20));
    size_t free1;
    CHECK(cudaMemGetInfo(&free1, &total));
    REQUIRE(free0 - free1 >= (64 << 20) && free1 < total);
    CHECK(cudaFree(big));
    CHECK(cudaFree(d));
    printf("ok memsets\n");
}

static void two_d() {
    const int W = 100, H = 37;  // floats per row, rows
    float *d;
    size_t pitch = 0;
    CHECK(cudaMallocPitch(&d, &pitch, W * sizeof(float), H));
    REQUIRE(pitch >= W * sizeof(float) && pitch % 256 == 0);
    CHECK(cudaMemset2D(d, pitch, 0, W * sizeof(float), H));
    float host[H][W + 3];  // host rows with a pitch of their own
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W + 3; x++) host[y][x] = y * 1000 + x;
    CHECK(cudaMemcpy2D(d, pitch, host, sizeof(host[0]), W * sizeof(float), H, cudaMemcpyHostToDevice));
    pitchedAdd<<<dim3(1, H), 128>>>(d, pitch, W, H);
    float back[H][W];
    CHECK(cudaMemcpy2D(back, sizeof(back[0]), d, pitch, W * sizeof(float), H, cudaMemcpyDeviceToHost));
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) REQUIRE(back[y][x] == y * 1000 + x + 1);
    // device to device, into a packed buffer, asynchronously
    float *packed;
    CHECK(cudaMalloc(&packed, W * H * sizeof(float)));
    CHECK(cudaMemcpy2DAsync(packed, W * sizeof(float), d, pitch, W * sizeof(float), H, cudaMemcpyDeviceToDevice, 0));
    CHECK(cudaMemset2DAsync(d, pitch, 0, W * sizeof(float), H, 0));
    float flat[H * W];
    CHECK(cudaMemcpy(flat, packed, sizeof(flat), cudaMemcpyDeviceToHost));
    for (int i = 0; i < W * H; i++) REQUIRE(flat[i] == (i / W) * 1000 + i % W + 1);
    CHECK(cudaMemcpy2D(back, sizeof(back[0]), d, pitch, W * sizeof(float), H, cudaMemcpyDeviceToHost));
    REQUIRE(back[H - 1][W - 1] == 0);
    EXPECT_AND_CLEAR(cudaMemcpy2D(d, 8, host, sizeof(host[0]), W * sizeof(float), H, cudaMemcpyHostToDevice),
           cudaErrorInvalidPitchValue);
    EXPECT_AND_CLEAR(cudaMemcpy2D(d, pitch, host, sizeof(host[0]), W * sizeof(float), H + 1, cudaMemcpyHostToDevice),
           cudaErrorInvalidValue);  // one row too many for the allocation
    CHECK(cudaFree(d));
    CHECK(cudaFree(packed));
    printf("ok 2d\n");
}

static void symbols() {
    size_t size = 0;
    CHECK(cudaGetSymbolSize(&size, table));
    REQUIRE(size == sizeof(float) * 256);
    int *out, h[2];
    CHECK(cudaMalloc(&out, sizeof(h)));
    readCounter<<<1, 1>>>(out);  // initialised variables keep their initial values
    CHECK(cudaMemcpy(h, out, sizeof(h), cudaMemcpyDeviceToHost));
    REQUIRE(h[0] == 7 && h[1] == 22);
    int ten = 10;
    CHECK(cudaMemcpyToSymbol(counter, &ten, sizeof(int)));
    readCounter<<<1, 1>>>(out);
    CHECK(cudaMemcpy(h, out, sizeof(h), cudaMemcpyDeviceToHost));
    REQUIRE(h[0] == 10);

    float c[4] = {1, 2, 3, 4};
    CHECK(cudaMemcpyToSymbol(coeffs, c, sizeof(c)));
    float x[64], *dx;
    for (int i = 0; i < 64; i++) x[i] = 1.0f;
    CHECK(cudaMalloc(&dx, sizeof(x)));
    CHECK(cudaMemcpy(dx, x, sizeof(x), cudaMemcpyHostToDevice));
    scaleByConst<<<1, 64>>>(dx, 64);
    CHECK(cudaMemcpy(x, dx, sizeof(x), cudaMemcpyDeviceToHost));
    for (int i = 0; i < 64; i++) REQUIRE(x[i] == c[i % 4]);

    float *tableAddress;
    CHECK(cudaGetSymbolAddress((void **)&tableAddress, table));
    float ones[256];
    for (int i = 0; i < 256; i++) ones[i] = i;
    CHECK(cudaMemcpyToSymbolAsync(table, ones, sizeof(ones), 0, cudaMemcpyHostToDevice, 0));
    incTable<<<1, 256>>>(tableAddress, 256);
    float back[8];
    CHECK(cudaMemcpyFromSymbol(back, table, sizeof(back), 100 * sizeof(float)));  // with an offset
    for (int i = 0; i < 8; i++) REQUIRE(back[i] == 100 + i + 1);
    CHECK(cudaMemcpy(back, tableAddress + 200, sizeof(back), cudaMemcpyDefault));  // a plain pointer now
    for (int i = 0; i < 8; i++) REQUIRE(back[i] == 200 + i + 1);

    EXPECT_AND_CLEAR(cudaMemcpyToSymbol(table, ones, sizeof(ones), 4), cudaErrorInvalidValue);  // runs past it
    EXPECT_AND_CLEAR(cudaMemcpyToSymbol(table, ones, 4, 0, cudaMemcpyDeviceToHost), cudaErrorInvalidMemcpyDirection);
    EXPECT_AND_CLEAR(cudaMemcpyToSymbol((const void *)&ten, &ten, 4), cudaErrorInvalidSymbol);  // not a symbol
    EXPECT_AND_CLEAR(cudaFree(tableAddress), cudaErrorInvalidValue);
    printf("ok symbols\n");
}

static void default_kind_and_pointers() {
    int *d, h[16], *pinned;
    CHECK(cudaMalloc(&d, sizeof(h)));
    CHECK(cudaMallocHost(&pinned, sizeof(h)));
    for (int i = 0; i < 16; i++) h[i] = i * i;
    CHECK(cudaMemcpy(d, h, sizeof(h), cudaMemcpyDefault));
    CHECK(cudaMemcpy(pinned, d, sizeof(h), cudaMemcpyDefault));
    for (int i = 0; i < 16; i++) REQUIRE(pinned[i] == i * i);
    CHECK(cudaMemcpy(h, pinned, sizeof(h), cudaMemcpyDefault));  // host to host

    cudaPointerAttributes a;
    CHECK(cudaPointerGetAttributes(&a, d + 3));
    REQUIRE(a.type == cudaMemoryTypeDevice && a.device == 0 && a.devicePointer == d + 3);
    CHECK(cudaPointerGetAttributes(&a, pinned));
    REQUIRE(a.type == cudaMemoryTypeHost && a.hostPointer == pinned);
    CHECK(cudaPointerGetAttributes(&a, h));
    REQUIRE(a.type == cudaMemoryTypeUnregistered);
    CHECK(cudaFreeHost(pinned));
    CHECK(cudaFree(d));
    printf("ok default\n");
}

static void host_memory() {
    char *a, *b;
    CHECK(cudaHostAlloc(&a, 1 << 20, cudaHostAllocPortable));
    unsigned int flags = 99;
    CHECK(cudaHostGetFlags(&flags, a));
    REQUIRE(flags == cudaHostAllocPortable);
    memset(a, 3, 1 << 20);  // ordinary memory of this process
    void *dptr = nullptr;  // (mapped memory: tests/cuda/mapped_memory.cu)
    CHECK(cudaHostGetDevicePointer(&dptr, a, 0));  // unified addressing: all page-locked memory is mapped
    REQUIRE(dptr == a);
    b = (char *)malloc(1 << 16);
    CHECK(cudaHostRegister(b, 1 << 16, cudaHostRegisterDefault));
    EXPECT_AND_CLEAR(cudaHostRegister(b, 1 << 16, cudaHostRegisterDefault), cudaErrorHostMemoryAlreadyRegistered);
    EXPECT_AND_CLEAR(cudaHostRegister(b, 64, cudaHostRegisterMapped), cudaErrorHostMemoryAlreadyRegistered);
    char *d;
    CHECK(cudaMalloc(&d, 1 << 16));
    CHECK(cudaMemcpyAsync(d, a, 1 << 16, cudaMemcpyHostToDevice, 0));
    CHECK(cudaMemcpyAsync(b, d, 1 << 16, cudaMemcpyDeviceToHost, 0));
    CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < (1 << 16); i++) REQUIRE(b[i] == 3);
    CHECK(cudaHostUnregister(b));
    EXPECT_AND_CLEAR(cudaHostUnregister(b), cudaErrorHostMemoryNotRegistered);
    EXPECT_AND_CLEAR(cudaFreeHost(b), cudaErrorInvalidValue);  // not from cudaHostAlloc
    CHECK(cudaFreeHost(a));
    free(b);
    CHECK(cudaFree(d));
    printf("ok host\n");
}

static void bad_requests() {
    char *d, h[64];
    CHECK(cudaMalloc(&d, 64));
    EXPECT_AND_CLEAR(cudaMemcpy(d, h, 65, cudaMemcpyHostToDevice), cudaErrorInvalidValue);       // oversized
    EXPECT_AND_CLEAR(cudaMemcpy(h, d + 1, 64, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);   // misaligned past the end
    EXPECT_AND_CLEAR(cudaMemcpy(d, h, 8, (cudaMemcpyKind)7), cudaErrorInvalidMemcpyDirection);   // wrong kind
    EXPECT_AND_CLEAR(cudaMemcpyAsync(d, h, 8, cudaMemcpyHostToDevice, (cudaStream_t)0x1234), cudaErrorInvalidResourceHandle);
    EXPECT_AND_CLEAR(cudaFree(d + 8), cudaErrorInvalidValue);                                    // interior pointer
    CHECK(cudaMemcpy(d, h, 64, cudaMemcpyHostToDevice));                               // still fine
    CHECK(cudaFree(d));
    EXPECT_AND_CLEAR(cudaFree(d), cudaErrorInvalidValue);                                        // double free
    printf("ok bad_requests\n");
}

int main() {
    memsets();
    two_d();
    symbols();
    default_kind_and_pointers();
    host_memory();
    bad_requests();
    printf("PASSED runtime_memory\n");
    return 0;
}
