// The driver API's memory: cuMemAlloc & co., every copy and memset kind
// checked byte for byte against what the host expects, pitched memory,
// 2-D and 3-D copies, pinned, mapped and managed host memory, pointers
// crossing between the driver and the runtime, and virtual memory
// management across two GPUs of one server.  Built with the runtime (its
// kernels are launched with <<<>>>) and linked to libcuda.so.1; two_gpus
// and vmm need two GPUs (vmm: of one server, peers of each other).  Each
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

static void launch_add(CUdeviceptr p, unsigned value, int n) {
    addWords<<<(n + 255) / 256, 256>>>((unsigned *)p, value, n);
    CHECK(cudaGetLastError());
}

// Byte i of a test pattern.
static unsigned char pattern(size_t i, unsigned seed) { return (unsigned char)(i * 131 + seed * 7 + (i >> 8)); }

static std::vector<unsigned char> patterned(size_t n, unsigned seed) {
    std::vector<unsigned char> v(n);
    for (size_t i = 0; i < n; i++) v[i] = pattern(i, seed);
    return v;
}

static void alloc() {
    size_t free_before, total;
    DRV(cuMemGetInfo(&free_before, &total));
    REQUIRE(total > 0 && free_before <= total);
    CUdeviceptr p;
    const size_t n = 3 << 20;
    DRV(cuMemAlloc(&p, n));
    size_t free_after;
    DRV(cuMemGetInfo(&free_after, &total));
    REQUIRE(free_before - free_after >= n);
    CUdeviceptr base = 0;
    size_t size = 0;
    DRV(cuMemGetAddressRange(&base, &size, p + 1000));
    REQUIRE(base == p && size == n);
    DRV(cuMemGetAddressRange(NULL, &size, p));  // either output may be NULL
    DRV_EXPECT(cuMemGetAddressRange(&base, &size, p + n + 4096), CUDA_ERROR_NOT_FOUND);
    DRV_EXPECT(cuMemAlloc(&p, 0), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuMemAlloc(NULL, 16), CUDA_ERROR_INVALID_VALUE);
    DRV(cuMemFree(base));
    DRV_EXPECT(cuMemFree(base), CUDA_ERROR_INVALID_VALUE);  // freed twice
    DRV_EXPECT(cuMemFree(base + 8), CUDA_ERROR_INVALID_VALUE);
    printf("ok alloc\n");
}

static void copies() {
    const size_t n = 200000;  // not a multiple of anything in particular
    std::vector<unsigned char> src = patterned(n, 1), back(n), pinned_check(n);
    CUdeviceptr a, b;
    DRV(cuMemAlloc(&a, n));
    DRV(cuMemAlloc(&b, n));
    DRV(cuMemcpyHtoD(a, src.data(), n));
    DRV(cuMemcpyDtoD(b, a, n));
    DRV(cuMemcpyDtoH(back.data(), b, n));
    REQUIRE(memcmp(back.data(), src.data(), n) == 0);
    // cuMemcpy: the pointers say where each side is.
    std::vector<unsigned char> other = patterned(n, 2);
    DRV(cuMemcpy(a + 10, (CUdeviceptr)other.data(), n - 10));
    DRV(cuMemcpy((CUdeviceptr)back.data(), a, n));
    REQUIRE(memcmp(back.data(), src.data(), 10) == 0 && memcmp(back.data() + 10, other.data(), n - 10) == 0);
    // Asynchronous copies in a runtime stream (a CUstream is a cudaStream_t), into pinned memory.
    cudaStream_t stream;
    CHECK(cudaStreamCreate(&stream));
    unsigned char *host;
    DRV(cuMemAllocHost((void **)&host, n));
    std::vector<unsigned char> third = patterned(n, 3);
    DRV(cuMemcpyHtoDAsync(b, third.data(), n, (CUstream)stream));
    DRV(cuMemcpyDtoDAsync(a, b, n / 2, (CUstream)stream));
    DRV(cuMemcpyAsync(a + n / 2, (CUdeviceptr)src.data(), n / 2, (CUstream)stream));
    DRV(cuMemcpyDtoHAsync(host, a, n, (CUstream)stream));
    CHECK(cudaStreamSynchronize(stream));
    REQUIRE(memcmp(host, third.data(), n / 2) == 0 && memcmp(host + n / 2, src.data(), n / 2) == 0);
    DRV_EXPECT(cuMemcpyHtoD(a + n - 4, src.data(), 8), CUDA_ERROR_INVALID_VALUE);  // runs past the end
    DRV_EXPECT(cuMemcpyDtoH(back.data(), 0x1234, 8), CUDA_ERROR_INVALID_VALUE);    // no allocation
    DRV(cuMemFreeHost(host));
    CHECK(cudaStreamDestroy(stream));
    DRV(cuMemFree(a));
    DRV(cuMemFree(b));
    printf("ok copies\n");
}

static void memsets() {
    const size_t words = 5000;
    CUdeviceptr p;
    DRV(cuMemAlloc(&p, words * 4 + 64));
    std::vector<unsigned char> got(words * 4 + 64);
    DRV(cuMemsetD8(p, 0xEE, words * 4 + 64));
    DRV(cuMemsetD32(p, 0xA1B2C3D4u, words));
    DRV(cuMemsetD16(p + 8, 0x5A6B, 3));
    DRV(cuMemsetD8(p + 4, 0x11, 2));
    DRV(cuMemcpyDtoH(got.data(), p, got.size()));
    std::vector<unsigned char> want(got.size(), 0xEE);
    for (size_t i = 0; i < words; i++) { unsigned v = 0xA1B2C3D4u; memcpy(&want[4 * i], &v, 4); }
    for (int i = 0; i < 3; i++) { unsigned short v = 0x5A6B; memcpy(&want[8 + 2 * i], &v, 2); }
    want[4] = want[5] = 0x11;
    REQUIRE(memcmp(got.data(), want.data(), got.size()) == 0);
    // The asynchronous forms, in stream order.
    cudaStream_t stream;
    CHECK(cudaStreamCreate(&stream));
    DRV(cuMemsetD32Async(p, 0x01020304u, words, (CUstream)stream));
    DRV(cuMemsetD16Async(p + 2, 0xBEEF, 1, (CUstream)stream));
    DRV(cuMemsetD8Async(p + words * 4, 0x77, 64, (CUstream)stream));
    CHECK(cudaStreamSynchronize(stream));
    DRV(cuMemcpyDtoH(got.data(), p, got.size()));
    for (size_t i = 0; i < words; i++) { unsigned v = 0x01020304u; memcpy(&want[4 * i], &v, 4); }
    unsigned short beef = 0xBEEF;
    memcpy(&want[2], &beef, 2);
    memset(&want[words * 4], 0x77, 64);
    REQUIRE(memcmp(got.data(), want.data(), got.size()) == 0);
    DRV_EXPECT(cuMemsetD16(p + 1, 1, 4), CUDA_ERROR_INVALID_VALUE);  // not 2-byte aligned
    DRV_EXPECT(cuMemsetD32(p + 2, 1, 4), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuMemsetD32(p, 1, words + 100), CUDA_ERROR_INVALID_VALUE);  // past the end
    CHECK(cudaStreamDestroy(stream));
    DRV(cuMemFree(p));
    printf("ok memsets\n");
}

static void pitched() {
    const size_t width = 100, height = 7;  // bytes per row, rows
    CUdeviceptr p;
    size_t pitch = 0;
    DRV(cuMemAllocPitch(&p, &pitch, width, height, 4));
    REQUIRE(pitch >= width && pitch % 4 == 0);
    DRV_EXPECT(cuMemAllocPitch(&p, &pitch, width, height, 3), CUDA_ERROR_INVALID_VALUE);
    // 2-D memsets of each pattern size leave the padding alone.
    DRV(cuMemsetD8(p, 0x99, pitch * height));
    DRV(cuMemsetD2D8(p, pitch, 0x12, 10, height));
    DRV(cuMemsetD2D16(p + 10, pitch, 0x3456, 5, height));
    DRV(cuMemsetD2D32(p + 20, pitch, 0x789ABCDEu, 20, height - 1));
    cudaStream_t stream;
    CHECK(cudaStreamCreate(&stream));
    DRV(cuMemsetD2D32Async(p + 96, pitch, 0xCAFEF00Du, 1, 2, (CUstream)stream));
    DRV(cuMemsetD2D16Async(p + 92, pitch, 0x0102, 2, 1, (CUstream)stream));
    DRV(cuMemsetD2D8Async(p + 90, pitch, 0x42, 2, 1, (CUstream)stream));
    CHECK(cudaStreamSynchronize(stream));
    std::vector<unsigned char> got(pitch * height), want(pitch * height, 0x99);
    DRV(cuMemcpyDtoH(got.data(), p, got.size()));
    for (size_t y = 0; y < height; y++) {
        unsigned char *row = &want[y * pitch];
        memset(row, 0x12, 10);
        for (int i = 0; i < 5; i++) { unsigned short v = 0x3456; memcpy(row + 10 + 2 * i, &v, 2); }
        if (y < height - 1)
            for (int i = 0; i < 20; i++) { unsigned v = 0x789ABCDEu; memcpy(row + 20 + 4 * i, &v, 4); }
        if (y < 2) { unsigned v = 0xCAFEF00Du; memcpy(row + 96, &v, 4); }
        if (y == 0) { unsigned short v = 0x0102; memcpy(row + 92, &v, 2); memcpy(row + 94, &v, 2); row[90] = row[91] = 0x42; }
    }
    REQUIRE(memcmp(got.data(), want.data(), got.size()) == 0);

    // cuMemcpy2D: a 30 x 4 block from (x 5, row 2) of a host image to (x 8, row 1) on the device.
    const size_t hp = 64;
    std::vector<unsigned char> image = patterned(hp * 8, 4);
    CUDA_MEMCPY2D c;
    memset(&c, 0, sizeof c);
    c.srcMemoryType = CU_MEMORYTYPE_HOST; c.srcHost = image.data(); c.srcPitch = hp; c.srcXInBytes = 5; c.srcY = 2;
    c.dstMemoryType = CU_MEMORYTYPE_DEVICE; c.dstDevice = p; c.dstPitch = pitch; c.dstXInBytes = 8; c.dstY = 1;
    c.WidthInBytes = 30; c.Height = 4;
    DRV(cuMemcpy2D(&c));
    for (size_t y = 0; y < 4; y++) memcpy(&want[(y + 1) * pitch + 8], &image[(y + 2) * hp + 5], 30);
    // ...back to the host whole with cuMemcpy2DUnaligned, device to device with 2DAsync (unified memory type).
    std::vector<unsigned char> packed(width * height);
    CUDA_MEMCPY2D d;
    memset(&d, 0, sizeof d);
    d.srcMemoryType = CU_MEMORYTYPE_DEVICE; d.srcDevice = p; d.srcPitch = pitch;
    d.dstMemoryType = CU_MEMORYTYPE_HOST; d.dstHost = packed.data(); d.dstPitch = width;
    d.WidthInBytes = width; d.Height = height;
    DRV(cuMemcpy2DUnaligned(&d));
    for (size_t y = 0; y < height; y++) REQUIRE(memcmp(&packed[y * width], &want[y * pitch], width) == 0);
    CUdeviceptr q;
    DRV(cuMemAlloc(&q, width * height));
    CUDA_MEMCPY2D e = d;
    e.dstMemoryType = CU_MEMORYTYPE_UNIFIED; e.dstDevice = q; e.dstHost = NULL;
    e.srcMemoryType = CU_MEMORYTYPE_UNIFIED;
    DRV(cuMemcpy2DAsync(&e, (CUstream)stream));
    CHECK(cudaStreamSynchronize(stream));
    std::vector<unsigned char> flat(width * height);
    DRV(cuMemcpyDtoH(flat.data(), q, flat.size()));
    REQUIRE(flat == packed);
    c.srcMemoryType = CU_MEMORYTYPE_ARRAY; c.srcArray = NULL;
    DRV_EXPECT(cuMemcpy2D(&c), CUDA_ERROR_INVALID_VALUE);  // no array
    c.srcMemoryType = (CUmemorytype)9;
    DRV_EXPECT(cuMemcpy2D(&c), CUDA_ERROR_INVALID_VALUE);

    // cuMemcpy3D: 3 slices of 6 x 5 bytes out of a 16 x 8 x 4 host volume, into q as 3 slices of 8 x 6.
    std::vector<unsigned char> volume = patterned(16 * 8 * 4, 5), out(8 * 6 * 3, 0);
    DRV(cuMemsetD8(q, 0, width * height));
    CUDA_MEMCPY3D v;
    memset(&v, 0, sizeof v);
    v.srcMemoryType = CU_MEMORYTYPE_HOST; v.srcHost = volume.data(); v.srcPitch = 16; v.srcHeight = 8;
    v.srcXInBytes = 3; v.srcY = 1; v.srcZ = 1;
    v.dstMemoryType = CU_MEMORYTYPE_DEVICE; v.dstDevice = q; v.dstPitch = 8; v.dstHeight = 6;
    v.WidthInBytes = 6; v.Height = 5; v.Depth = 3;
    DRV(cuMemcpy3D(&v));
    CUDA_MEMCPY3D w;
    memset(&w, 0, sizeof w);
    w.srcMemoryType = CU_MEMORYTYPE_DEVICE; w.srcDevice = q; w.srcPitch = 8; w.srcHeight = 6;
    w.dstMemoryType = CU_MEMORYTYPE_HOST; w.dstHost = out.data(); w.dstPitch = 8; w.dstHeight = 6;
    w.WidthInBytes = 8; w.Height = 6; w.Depth = 3;
    DRV(cuMemcpy3DAsync(&w, (CUstream)stream));
    CHECK(cudaStreamSynchronize(stream));
    for (int z = 0; z < 3; z++)
        for (int y = 0; y < 6; y++)
            for (int x = 0; x < 8; x++) {
                unsigned char expect = (y < 5 && x < 6) ? volume[(z + 1) * 16 * 8 + (y + 1) * 16 + x + 3] : 0;
                REQUIRE(out[z * 48 + y * 8 + x] == expect);
            }
    CHECK(cudaStreamDestroy(stream));
    DRV(cuMemFree(q));
    DRV(cuMemFree(p));
    printf("ok pitched\n");
}

static void host_memory() {
    const int n = 1000;
    unsigned *mapped;
    DRV(cuMemHostAlloc((void **)&mapped, n * 4, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
    unsigned flags = 0;
    DRV(cuMemHostGetFlags(&flags, mapped));
    REQUIRE(flags == (CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
    for (int i = 0; i < n; i++) mapped[i] = i;
    CUdeviceptr dev;
    DRV(cuMemHostGetDevicePointer(&dev, mapped, 0));
    launch_add(dev, 5, n);
    CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < n; i++) REQUIRE(mapped[i] == (unsigned)i + 5);
    DRV_EXPECT(cuMemHostGetDevicePointer(&dev, mapped, 1), CUDA_ERROR_INVALID_VALUE);
    DRV(cuMemFreeHost(mapped));
    DRV_EXPECT(cuMemHostAlloc((void **)&mapped, 64, 0x80), CUDA_ERROR_INVALID_VALUE);

    // Registered memory, mapped: its device copy is elsewhere.
    std::vector<unsigned> words(n, 7);
    DRV(cuMemHostRegister(words.data(), n * 4, CU_MEMHOSTREGISTER_DEVICEMAP));
    DRV(cuMemHostGetDevicePointer(&dev, words.data(), 0));
    launch_add(dev, 3, n);
    CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < n; i++) REQUIRE(words[i] == 10);
    DRV(cuMemHostUnregister(words.data()));
    DRV_EXPECT(cuMemFreeHost(words.data()), CUDA_ERROR_INVALID_VALUE);  // not pinned memory

    // Managed memory: one pointer for the host and kernels.
    CUdeviceptr managed;
    DRV(cuMemAllocManaged(&managed, n * 4, CU_MEM_ATTACH_GLOBAL));
    unsigned *m = (unsigned *)managed;
    for (int i = 0; i < n; i++) m[i] = 2 * i;
    launch_add(managed, 1, n);
    CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < n; i++) REQUIRE(m[i] == 2u * i + 1);
    DRV(cuMemFree(managed));
    printf("ok host_memory\n");
}

static void cross_api() {
    const int n = 4096;
    std::vector<unsigned> src(n), got(n);
    for (int i = 0; i < n; i++) src[i] = i * 3;
    CUdeviceptr driver_ptr;
    DRV(cuMemAlloc(&driver_ptr, n * 4));
    CHECK(cudaMemcpy((void *)driver_ptr, src.data(), n * 4, cudaMemcpyHostToDevice));
    launch_add(driver_ptr, 1, n);
    unsigned *runtime_ptr;
    CHECK(cudaMalloc(&runtime_ptr, n * 4));
    DRV(cuMemcpyDtoD((CUdeviceptr)runtime_ptr, driver_ptr, n * 4));
    CHECK(cudaMemset(runtime_ptr, 0, 8));
    DRV(cuMemcpyDtoH(got.data(), (CUdeviceptr)runtime_ptr, n * 4));
    for (int i = 0; i < n; i++) REQUIRE(got[i] == (i < 2 ? 0u : src[i] + 1));
    cudaPointerAttributes attributes;
    CHECK(cudaPointerGetAttributes(&attributes, (void *)driver_ptr));
    REQUIRE(attributes.type == cudaMemoryTypeDevice && attributes.device == 0);
    DRV(cuMemFree((CUdeviceptr)runtime_ptr));  // each API frees the other's memory
    CHECK(cudaFree((void *)driver_ptr));
    DRV_EXPECT(cuMemFree(driver_ptr), CUDA_ERROR_INVALID_VALUE);
    printf("ok cross_api\n");
}

static void two_gpus() {
    const int n = 3000;
    std::vector<unsigned char> src = patterned(n, 6), got(n);
    CUdeviceptr on0, on1;
    CHECK(cudaSetDevice(0));
    DRV(cuMemAlloc(&on0, n));
    CHECK(cudaSetDevice(1));  // the current context is now GPU1's
    DRV(cuMemAlloc(&on1, n));
    CUdeviceptr base;
    size_t size;
    DRV(cuMemGetAddressRange(&base, &size, on1));
    REQUIRE(base == on1 && on1 != on0);
    DRV(cuMemcpyHtoD(on0, src.data(), n));
    DRV(cuMemcpyDtoD(on1, on0, n));  // unified addressing: GPU0 to GPU1
    DRV(cuMemcpyDtoH(got.data(), on1, n));
    REQUIRE(got == src);
    DRV(cuMemFree(on1));
    CHECK(cudaSetDevice(0));
    DRV(cuMemFree(on0));
    printf("ok two_gpus\n");
}

static CUmemAllocationProp device_memory(int device) {
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device;
    return prop;
}

static void vmm() {
    int supported = 0;
    DRV(cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0));
    REQUIRE(supported == 1);
    CUmemAllocationProp prop0 = device_memory(0), prop1 = device_memory(1);
    size_t g = 0, recommended = 0;
    DRV(cuMemGetAllocationGranularity(&g, &prop0, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    DRV(cuMemGetAllocationGranularity(&recommended, &prop1, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    REQUIRE(g > 0 && recommended % g == 0);

    // One range, its halves on GPU0 and GPU1.
    CUdeviceptr range;
    DRV(cuMemAddressReserve(&range, 2 * g, 0, 0, 0));
    REQUIRE(range % g == 0);
    CUmemGenericAllocationHandle h0, h1;
    DRV(cuMemCreate(&h0, g, &prop0, 0));
    DRV(cuMemCreate(&h1, g, &prop1, 0));
    DRV_EXPECT(cuMemCreate(&h1, g / 2, &prop1, 0), CUDA_ERROR_INVALID_VALUE);  // not a multiple of the granularity
    CUmemAllocationProp bad = device_memory(7);
    DRV_EXPECT(cuMemCreate(&h1, g, &bad, 0), CUDA_ERROR_INVALID_DEVICE);
    DRV(cuMemMap(range, g, 0, h0, 0));
    DRV(cuMemMap(range + g, g, 0, h1, 0));
    DRV_EXPECT(cuMemMap(range, g, 0, h1, 0), CUDA_ERROR_INVALID_VALUE);      // mapped already
    DRV_EXPECT(cuMemMap(range + 4096, g, 0, h1, 0), CUDA_ERROR_INVALID_VALUE);  // misaligned
    CUmemAccessDesc access[2];
    access[0].location = prop0.location; access[0].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    access[1].location = prop1.location; access[1].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    DRV(cuMemSetAccess(range, 2 * g, access, 2));
    unsigned long long flags = 0;
    DRV(cuMemGetAccess(&flags, &prop1.location, range + 100));
    REQUIRE(flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    DRV_EXPECT(cuMemSetAccess(range + 4096, g, access, 2), CUDA_ERROR_INVALID_VALUE);  // not whole mappings

    // Copies fill each half; kernels on both GPUs use the range (GPU1's on GPU0's half).
    const int words = (int)(g / 4);
    std::vector<unsigned> src(2 * words), got(2 * words);
    for (int i = 0; i < 2 * words; i++) src[i] = i ^ 0x5555;
    DRV(cuMemcpyHtoD(range, src.data(), g));
    DRV(cuMemcpyHtoD(range + g, src.data() + words, g));
    CHECK(cudaSetDevice(1));
    launch_add(range, 100, 1000);      // GPU0's memory, from GPU1
    launch_add(range + g, 7, words);   // its own
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaSetDevice(0));
    launch_add(range + 4, 1, 10);
    CHECK(cudaDeviceSynchronize());
    DRV(cuMemcpyDtoH(got.data(), range, g));
    DRV(cuMemcpyDtoH(got.data() + words, range + g, g));
    for (int i = 0; i < 2 * words; i++) {
        unsigned want = src[i] + (i < 1000 ? 100 : 0) + (i >= 1 && i < 11 ? 1 : 0) + (i >= words ? 7 : 0);
        REQUIRE(got[i] == want);
    }
    DRV(cuMemsetD32(range + g - 8, 0xFFFFFFFFu, 2));  // the last words of GPU0's half
    DRV(cuMemcpyDtoH(got.data(), range + g - 8, 8));
    REQUIRE(got[0] == 0xFFFFFFFFu && got[1] == 0xFFFFFFFFu);

    // A second mapping of GPU0's physical memory sees the same bytes.
    CUdeviceptr alias;
    DRV(cuMemAddressReserve(&alias, g, 0, 0, 0));
    REQUIRE(alias + g <= range || range + 2 * g <= alias);
    CUmemGenericAllocationHandle two;  // cuda.h: cuMemMap's offset "currently must be zero"
    DRV(cuMemCreate(&two, 2 * g, &prop0, 0));
    DRV_EXPECT(cuMemMap(alias, g, g, two, 0), CUDA_ERROR_NOT_SUPPORTED);  // as CUDA 13.0's driver answers
    DRV(cuMemRelease(two));
    DRV(cuMemMap(alias, g, 0, h0, 0));
    DRV(cuMemcpyDtoH(got.data(), alias, 16));
    REQUIRE(got[0] == src[0] + 100 && got[1] == src[1] + 101);
    DRV(cuMemsetD32(alias, 42, 1));
    DRV(cuMemcpyDtoH(got.data(), range, 4));
    REQUIRE(got[0] == 42);

    // Handles: properties, retained through an address, released while mapped.
    CUmemAllocationProp read_back;
    DRV(cuMemGetAllocationPropertiesFromHandle(&read_back, h1));
    REQUIRE(read_back.location.id == 1 && read_back.type == CU_MEM_ALLOCATION_TYPE_PINNED);
    CUmemGenericAllocationHandle retained;
    DRV(cuMemRetainAllocationHandle(&retained, (void *)(range + g + 12)));
    REQUIRE(retained == h1);
    DRV(cuMemRelease(retained));
    DRV(cuMemRelease(h0));  // mapped still: the memory stays until unmapped
    DRV(cuMemRelease(h1));
    DRV_EXPECT(cuMemRelease(h1), CUDA_ERROR_INVALID_VALUE);  // released already
    DRV_EXPECT(cuMemMap(alias, g, 0, h1, 0), CUDA_ERROR_INVALID_VALUE);
    DRV(cuMemcpyDtoH(got.data(), range + g, 8));
    REQUIRE(got[0] == src[words] + 7);

    // The errors of freeing a mapping and of unmapped addresses.
    size_t free_mapped, total;  // (GPU0's: the current context's device)
    DRV(cuMemGetInfo(&free_mapped, &total));
    DRV_EXPECT(cuMemFree(range), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuMemUnmap(range, g / 2), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuMemAddressFree(range, 2 * g), CUDA_ERROR_INVALID_VALUE);  // still mapped
    DRV(cuMemUnmap(alias, g));
    DRV_EXPECT(cuMemcpyHtoD(alias, src.data(), 16), CUDA_ERROR_INVALID_VALUE);  // reserved, not mapped
    DRV(cuMemUnmap(range, 2 * g));  // both halves at once
    DRV_EXPECT(cuMemcpyDtoH(got.data(), range, 16), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuMemGetAccess(&flags, &prop0.location, range), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuMemAddressFree(range, g), CUDA_ERROR_INVALID_VALUE);  // not the reserved size
    DRV(cuMemAddressFree(range, 2 * g));
    DRV(cuMemAddressFree(alias, g));
    size_t free_after;
    DRV(cuMemGetInfo(&free_after, &total));
    REQUIRE(free_after >= free_mapped + g);  // GPU0's physical memory went with its last mapping
    printf("ok vmm\n");
}

int main(int argc, char **argv) {
    DRV_EXPECT(cuMemAlloc(NULL, 16), CUDA_ERROR_NOT_INITIALIZED);
    DRV(cuInit(0));
    struct { const char *name; void (*run)(); } sections[] = {
        {"alloc", alloc}, {"copies", copies}, {"memsets", memsets}, {"pitched", pitched},
        {"host_memory", host_memory}, {"cross_api", cross_api}, {"two_gpus", two_gpus}, {"vmm", vmm},
    };
    for (auto &section : sections) {
        bool chosen = argc == 1;
        for (int i = 1; i < argc; i++) chosen |= strcmp(argv[i], section.name) == 0;
        if (chosen) section.run();
    }
    printf("PASSED driver_memory\n");
    return 0;
}
