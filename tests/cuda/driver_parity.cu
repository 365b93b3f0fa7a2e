// The driver API's functions whose runtime twins rcuda has: peer access and
// peer copies, memory pools and stream-ordered allocation, managed memory's
// hints and queries, cuPointerSetAttribute, the profiler calls, and
// cuKernelGetAttribute (the same answers as cuFuncGetAttribute); every one
// of them answers CUDA_ERROR_NOT_INITIALIZED before cuInit.  Linked to
// libcuda.so.1 (and the runtime, for the calls that cross APIs); launches
// no kernel.  Usage: driver_parity KERNELS.fatbin (tests/cuda/driver_module_kernels.cu,
// nvcc -fatbin).  Needs a server with two GPUs (--devices 2).  Prints "ok
// NAME" per section; a failure prints "FAILED line N: ..." and exits 1.
#include <cuda.h>
#include <cudaProfiler.h>
#include <cudaTypedefs.h>
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "driver_check.h"


static const size_t N = 1 << 16;

static std::vector<unsigned char> patterned(size_t n, unsigned seed)
{
    std::vector<unsigned char> v(n);
    for (size_t i = 0; i < n; i++) v[i] = (unsigned char)(i * 131 + seed * 7 + (i >> 8));
    return v;
}

static CUmemLocation on_device(int id)
{
    CUmemLocation location = {};
    location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    location.id = id;
    return location;
}

// Before cuInit (and before any runtime call) every new function refuses.
static void not_initialized()
{
    int value;
    CUmemoryPool pool;
    CUdeviceptr ptr;
    unsigned one = 1;
    CUmemPoolProps props = {};
    DRV_EXPECT(cuDeviceCanAccessPeer(&value, 0, 1), CUDA_ERROR_NOT_INITIALIZED);
    DRV_EXPECT(cuDeviceGetP2PAttribute(&value, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, 0, 1),
               CUDA_ERROR_NOT_INITIALIZED);
    DRV_EXPECT(cuCtxEnablePeerAccess((CUcontext)0x1234, 0), CUDA_ERROR_NOT_INITIALIZED);
    DRV_EXPECT(cuCtxDisablePeerAccess((CUcontext)0x1234), CUDA_ERROR_NOT_INITIALIZED);
    DRV_EXPECT(cuDeviceGetDefaultMemPool(&pool, 0), CUDA_ERROR_NOT_INITIALIZED);
    DRV_EXPECT(cuDeviceGetMemPool(&pool, 0), CUDA_ERROR_NOT_INITIALIZED);
    DRV_EXPECT(cuMemPoolCreate(&pool, &props), CUDA_ERROR_NOT_INITIALIZED);
    DRV_EXPECT(cuMemAllocAsync(&ptr, 256, 0), CUDA_ERROR_NOT_INITIALIZED);
    DRV_EXPECT(cuMemFreeAsync(0x1000, 0), CUDA_ERROR_NOT_INITIALIZED);
    DRV_EXPECT(cuMemAllocManaged(&ptr, 256, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_NOT_INITIALIZED);
    DRV_EXPECT(cuMemAdvise(0x1000, 256, CU_MEM_ADVISE_SET_READ_MOSTLY, on_device(0)), CUDA_ERROR_NOT_INITIALIZED);
    DRV_EXPECT(cuMemPrefetchAsync(0x1000, 256, on_device(0), 0, 0), CUDA_ERROR_NOT_INITIALIZED);
    DRV_EXPECT(cuMemRangeGetAttribute(&value, 4, CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, 0x1000, 256),
               CUDA_ERROR_NOT_INITIALIZED);
    DRV_EXPECT(cuPointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, 0x1000), CUDA_ERROR_NOT_INITIALIZED);
    DRV_EXPECT(cuProfilerStart(), CUDA_ERROR_NOT_INITIALIZED);
    DRV_EXPECT(cuProfilerStop(), CUDA_ERROR_NOT_INITIALIZED);
    DRV_EXPECT(cuKernelGetAttribute(&value, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, (CUkernel)0x1234, 0),
               CUDA_ERROR_NOT_INITIALIZED);
    printf("ok not_initialized\n");
}

static void peers(CUcontext *primary)
{
    int can = -1;
    DRV(cuDeviceCanAccessPeer(&can, 0, 1));
    REQUIRE(can == 1);  // two GPUs of one sim server
    int runtime_can = -1;
    CHECK(cudaDeviceCanAccessPeer(&runtime_can, 1, 0));
    DRV(cuDeviceCanAccessPeer(&can, 1, 0));
    REQUIRE(can == runtime_can);
    DRV(cuDeviceCanAccessPeer(&can, 0, 0));
    REQUIRE(can == 0);  // a device is not its own peer
    DRV_EXPECT(cuDeviceCanAccessPeer(&can, 0, 7), CUDA_ERROR_INVALID_DEVICE);
    DRV_EXPECT(cuDeviceCanAccessPeer(NULL, 0, 1), CUDA_ERROR_INVALID_VALUE);

    int value = -1, runtime_value = -2;
    DRV(cuDeviceGetP2PAttribute(&value, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, 0, 1));
    REQUIRE(value == 1);
    DRV(cuDeviceGetP2PAttribute(&value, CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK, 0, 1));
    CHECK(cudaDeviceGetP2PAttribute(&runtime_value, cudaDevP2PAttrPerformanceRank, 0, 1));
    REQUIRE(value == runtime_value);
    DRV_EXPECT(cuDeviceGetP2PAttribute(&value, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, 1, 1),
               CUDA_ERROR_INVALID_DEVICE);
    DRV_EXPECT(cuDeviceGetP2PAttribute(&value, (CUdevice_P2PAttribute)99, 0, 1), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuDeviceGetP2PAttribute(&value, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, 0, 9),
               CUDA_ERROR_INVALID_DEVICE);

    // Peer access from the current context (device 0) to device 1's.
    DRV(cuCtxSetCurrent(primary[0]));
    DRV_EXPECT(cuCtxEnablePeerAccess(primary[1], 1), CUDA_ERROR_INVALID_VALUE);
    DRV(cuCtxEnablePeerAccess(primary[1], 0));
    DRV_EXPECT(cuCtxEnablePeerAccess(primary[1], 0), CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
    EXPECT_AND_CLEAR(cudaDeviceEnablePeerAccess(1, 0), cudaErrorPeerAccessAlreadyEnabled);  // one state, both APIs
    DRV_EXPECT(cuCtxEnablePeerAccess(primary[0], 0), CUDA_ERROR_INVALID_CONTEXT);  // itself
    DRV_EXPECT(cuCtxEnablePeerAccess((CUcontext)0x1234, 0), CUDA_ERROR_INVALID_CONTEXT);
    DRV(cuCtxDisablePeerAccess(primary[1]));
    DRV_EXPECT(cuCtxDisablePeerAccess(primary[1]), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
    EXPECT_AND_CLEAR(cudaDeviceDisablePeerAccess(1), cudaErrorPeerAccessNotEnabled);
    CHECK(cudaDeviceEnablePeerAccess(1, 0));  // the runtime's enabling is the driver's too
    DRV_EXPECT(cuCtxEnablePeerAccess(primary[1], 0), CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
    DRV(cuCtxDisablePeerAccess(primary[1]));

    // A created context on device 0 cannot take device 0's primary context as a peer.
    CUcontext created;
    DRV(cuCtxCreate(&created, NULL, 0, 0));
    DRV_EXPECT(cuCtxEnablePeerAccess(primary[0], 0), CUDA_ERROR_PEER_ACCESS_UNSUPPORTED);
    DRV(cuCtxDestroy(created));
    DRV(cuCtxSetCurrent(NULL));
    DRV_EXPECT(cuCtxEnablePeerAccess(primary[1], 0), CUDA_ERROR_INVALID_CONTEXT);  // no current context
    DRV_EXPECT(cuCtxDisablePeerAccess(primary[1]), CUDA_ERROR_INVALID_CONTEXT);

    // Peer copies, device 0 to device 1 and back, synchronous and in a stream.
    std::vector<unsigned char> src = patterned(N, 3), back(N, 0);
    CUdeviceptr on0, on1;
    DRV(cuCtxSetCurrent(primary[0]));
    DRV(cuMemAlloc(&on0, N));
    DRV(cuMemcpyHtoD(on0, src.data(), N));
    DRV(cuCtxSetCurrent(primary[1]));
    DRV(cuMemAlloc(&on1, N));
    DRV(cuMemsetD8(on1, 0, N));
    DRV(cuMemcpyPeer(on1, primary[1], on0, primary[0], N));
    DRV(cuMemcpyDtoH(back.data(), on1, N));
    REQUIRE(memcmp(back.data(), src.data(), N) == 0);
    CUstream stream;
    DRV(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    DRV(cuMemsetD8(on0, 0x5a, N / 2));
    DRV(cuMemcpyPeerAsync(on1, primary[1], on0, primary[0], N / 2, stream));
    DRV(cuStreamSynchronize(stream));
    DRV(cuMemcpyDtoH(back.data(), on1, N));
    REQUIRE(back[0] == 0x5a && back[N / 2 - 1] == 0x5a && back[N / 2] == src[N / 2]);
    DRV_EXPECT(cuMemcpyPeer(on1, NULL, on0, primary[0], N), CUDA_ERROR_INVALID_CONTEXT);
    DRV(cuStreamDestroy(stream));
    DRV(cuMemFree(on0));
    DRV(cuMemFree(on1));
    DRV(cuCtxSetCurrent(primary[0]));
    printf("ok peers\n");
}

static unsigned long long pool_value(CUmemoryPool pool, CUmemPool_attribute attr)
{
    cuuint64_t value = ~0ull;
    DRV(cuMemPoolGetAttribute(pool, attr, &value));
    return value;
}

static void pools(CUcontext *primary)
{
    DRV(cuCtxSetCurrent(primary[0]));
    CUmemoryPool default_pool, current, runtime_pool;
    DRV(cuDeviceGetDefaultMemPool(&default_pool, 0));
    DRV(cuDeviceGetMemPool(&current, 0));
    REQUIRE(default_pool != NULL && current == default_pool);
    CHECK(cudaDeviceGetDefaultMemPool(&runtime_pool, 0));
    REQUIRE(runtime_pool == default_pool);  // one pool, both APIs
    CUmemoryPool default1;
    DRV(cuDeviceGetDefaultMemPool(&default1, 1));
    REQUIRE(default1 != default_pool);
    DRV_EXPECT(cuDeviceGetDefaultMemPool(&current, 5), CUDA_ERROR_INVALID_DEVICE);

    CUmemPoolProps props = {};
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
    props.location = on_device(0);
    CUmemoryPool pool;
    DRV(cuMemPoolCreate(&pool, &props));
    REQUIRE(pool != default_pool);
    DRV(cuDeviceSetMemPool(0, pool));
    DRV(cuDeviceGetMemPool(&current, 0));
    REQUIRE(current == pool);
    CHECK(cudaDeviceGetMemPool(&runtime_pool, 0));
    REQUIRE(runtime_pool == pool);
    DRV_EXPECT(cuDeviceSetMemPool(1, pool), CUDA_ERROR_INVALID_VALUE);  // a pool of device 0

    // cuMemAllocAsync takes the device's current pool; the counters move.
    CUstream stream;
    DRV(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    CUdeviceptr p = 0;
    DRV(cuMemAllocAsync(&p, N, stream));
    REQUIRE(p != 0);
    REQUIRE(pool_value(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) >= N);
    REQUIRE(pool_value(default_pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == 0);
    std::vector<unsigned char> src = patterned(N, 5), back(N, 0);
    DRV(cuMemcpyHtoDAsync(p, src.data(), N, stream));
    DRV(cuMemcpyDtoHAsync(back.data(), p, N, stream));
    DRV(cuStreamSynchronize(stream));
    REQUIRE(memcmp(back.data(), src.data(), N) == 0);
    CUdeviceptr base = 0;
    size_t size = 0;
    DRV(cuMemGetAddressRange(&base, &size, p + 10));  // a pool block is device memory for every call
    REQUIRE(base == p && size >= N);

    // Freed in stream order: the same stream gets the block back.
    cuuint64_t threshold = 1ull << 30;
    DRV(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold));
    REQUIRE(pool_value(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) == threshold);
    DRV(cuMemFreeAsync(p, stream));
    REQUIRE(pool_value(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == 0);
    REQUIRE(pool_value(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) >= N);
    CUdeviceptr again = 0;
    DRV(cuMemAllocAsync(&again, N, stream));
    REQUIRE(again == p);
    DRV(cuMemFreeAsync(again, stream));
    DRV(cuStreamSynchronize(stream));
    DRV(cuMemPoolTrimTo(pool, 0));
    REQUIRE(pool_value(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 0);
    cuuint64_t zero = 0, five = 5;
    DRV(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &zero));  // a watermark resets to current
    REQUIRE(pool_value(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH) == 0);
    DRV_EXPECT(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &five), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &five), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuMemPoolGetAttribute(pool, (CUmemPool_attribute)99, &five), CUDA_ERROR_INVALID_VALUE);
    int follow = -1, off = 0;
    DRV(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES, &off));
    DRV(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES, &follow));
    REQUIRE(follow == 0);

    // From a named pool, whatever the device's current one is.
    CUdeviceptr q = 0;
    DRV(cuMemAllocFromPoolAsync(&q, N, default_pool, stream));
    REQUIRE(q != 0 && pool_value(default_pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) >= N);
    REQUIRE(pool_value(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == 0);
    DRV(cuMemsetD32Async(q, 0xdeadbeef, N / 4, stream));
    unsigned word = 0;
    DRV(cuMemcpyDtoHAsync(&word, q + N - 4, 4, stream));
    DRV(cuStreamSynchronize(stream));
    REQUIRE(word == 0xdeadbeef);
    DRV(cuMemFreeAsync(q, stream));
    DRV(cuStreamSynchronize(stream));
    REQUIRE(pool_value(default_pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == 0);
    DRV_EXPECT(cuMemAllocAsync(NULL, N, stream), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuMemAllocFromPoolAsync(&q, N, (CUmemoryPool)0x1234, stream), CUDA_ERROR_INVALID_VALUE);

    // Access: the owner always reads and writes; device 1 only once given access.
    CUmemLocation loc0 = on_device(0), loc1 = on_device(1);
    CUmemAccess_flags flags = CU_MEM_ACCESS_FLAGS_PROT_MAX;
    DRV(cuMemPoolGetAccess(&flags, pool, &loc0));
    REQUIRE(flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    DRV(cuMemPoolGetAccess(&flags, pool, &loc1));
    REQUIRE(flags == CU_MEM_ACCESS_FLAGS_PROT_NONE);
    CUmemAccessDesc desc = {};
    desc.location = loc1;
    desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    DRV(cuMemPoolSetAccess(pool, &desc, 1));
    DRV(cuMemPoolGetAccess(&flags, pool, &loc1));
    REQUIRE(flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    desc.location = loc0;
    desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READ;
    DRV_EXPECT(cuMemPoolSetAccess(pool, &desc, 1), CUDA_ERROR_INVALID_DEVICE);  // the owner's is read-write

    // Pools of managed memory or shareable handles are refused; a destroyed pool is gone.
    props.allocType = CU_MEM_ALLOCATION_TYPE_MANAGED;
    CUmemoryPool refused;
    DRV_EXPECT(cuMemPoolCreate(&refused, &props), CUDA_ERROR_NOT_SUPPORTED);
    DRV(cuDeviceSetMemPool(0, default_pool));
    DRV(cuMemPoolDestroy(pool));
    DRV_EXPECT(cuMemPoolDestroy(pool), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuMemPoolDestroy(default_pool), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuMemPoolTrimTo(pool, 0), CUDA_ERROR_INVALID_VALUE);
    DRV(cuStreamDestroy(stream));
    printf("ok pools\n");
}

static int range_int(CUmem_range_attribute attribute, CUdeviceptr p, size_t n)
{
    int value = -99;
    DRV(cuMemRangeGetAttribute(&value, sizeof value, attribute, p, n));
    return value;
}

static void managed(CUcontext *primary)
{
    DRV(cuCtxSetCurrent(primary[0]));
    CUdeviceptr m = 0;
    DRV(cuMemAllocManaged(&m, N, CU_MEM_ATTACH_GLOBAL));
    unsigned char *host = (unsigned char *)m;
    std::vector<unsigned char> src = patterned(N, 9), back(N, 0);
    memcpy(host, src.data(), N);  // the host writes managed memory directly
    DRV(cuMemcpyDtoH(back.data(), m, N));
    REQUIRE(memcmp(back.data(), src.data(), N) == 0);
    DRV(cuMemsetD8(m + 100, 0x77, 10));
    DRV(cuCtxSynchronize());
    REQUIRE(host[100] == 0x77 && host[109] == 0x77 && host[110] == src[110]);

    // Advice, recorded and read back per range.
    REQUIRE(range_int(CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, m, N) == 0);
    DRV(cuMemAdvise(m, N, CU_MEM_ADVISE_SET_READ_MOSTLY, on_device(0)));
    REQUIRE(range_int(CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, m, N) == 1);
    DRV(cuMemAdvise(m, N, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, on_device(1)));
    REQUIRE(range_int(CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, m, N) == 1);
    DRV_EXPECT(cuMemAdvise(m, N, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, on_device(8)), CUDA_ERROR_INVALID_DEVICE);
    DRV_EXPECT(cuMemAdvise(m, N, (CUmem_advise)42, on_device(0)), CUDA_ERROR_INVALID_VALUE);

    // The legacy exports (CUDA 8's ABI: a CUdevice, CU_DEVICE_CPU for the host), as old programs find them.
    PFN_cuMemAdvise_v8000 advise_v1 = NULL;
    PFN_cuMemPrefetchAsync_v8000 prefetch_v1 = NULL;
    CUdriverProcAddressQueryResult found;
    DRV(cuGetProcAddress("cuMemAdvise", (void **)&advise_v1, 8000, CU_GET_PROC_ADDRESS_DEFAULT, &found));
    REQUIRE(found == CU_GET_PROC_ADDRESS_SUCCESS && advise_v1 != NULL);
    DRV(cuGetProcAddress("cuMemPrefetchAsync", (void **)&prefetch_v1, 8000, CU_GET_PROC_ADDRESS_DEFAULT, &found));
    REQUIRE(found == CU_GET_PROC_ADDRESS_SUCCESS && prefetch_v1 != NULL);
    DRV(advise_v1(m, N, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, CU_DEVICE_CPU));
    REQUIRE(range_int(CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, m, N) == CU_DEVICE_CPU);
    DRV(advise_v1(m, N, CU_MEM_ADVISE_UNSET_READ_MOSTLY, 0));
    REQUIRE(range_int(CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, m, N) == 0);

    // Prefetches are recorded: the last location of the whole range.
    CUstream stream;
    DRV(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    DRV(cuMemPrefetchAsync(m, N, on_device(0), 0, stream));
    REQUIRE(range_int(CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, m, N) == 0);
    DRV(prefetch_v1(m, N / 2, CU_DEVICE_CPU, stream));
    REQUIRE(range_int(CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, m, N / 2) == CU_DEVICE_CPU);
    REQUIRE(range_int(CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, m, N) == -2);  // not the same for every page
    DRV(prefetch_v1(m, N, 1, stream));
    REQUIRE(range_int(CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, m, N) == 1);
    DRV_EXPECT(cuMemPrefetchAsync(m, N, on_device(0), 1, stream), CUDA_ERROR_INVALID_VALUE);  // flags must be 0
    DRV(cuStreamSynchronize(stream));

    // Several attributes at once.
    int read_mostly = -1, last = -1;
    void *data[] = {&read_mostly, &last};
    size_t sizes[] = {sizeof read_mostly, sizeof last};
    CUmem_range_attribute attributes[] = {CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY,
                                          CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION};
    DRV(cuMemRangeGetAttributes(data, sizes, attributes, 2, m, N));
    REQUIRE(read_mostly == 0 && last == 1);
    DRV_EXPECT(cuMemRangeGetAttributes(data, sizes, attributes, 0, m, N), CUDA_ERROR_INVALID_VALUE);

    // Attaching to a stream: checked against the allocation.
    DRV(cuStreamAttachMemAsync(stream, m, 0, CU_MEM_ATTACH_SINGLE));
    DRV(cuStreamAttachMemAsync(stream, m, N, CU_MEM_ATTACH_HOST));
    DRV_EXPECT(cuStreamAttachMemAsync(stream, m, N / 2, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuStreamAttachMemAsync(stream, m, 0, 0x40), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuStreamAttachMemAsync(NULL, m, 0, CU_MEM_ATTACH_SINGLE), CUDA_ERROR_INVALID_VALUE);
    DRV(cuStreamSynchronize(stream));

    // Only managed memory has these.
    CUdeviceptr plain;
    DRV(cuMemAlloc(&plain, N));
    int value;
    DRV_EXPECT(cuMemRangeGetAttribute(&value, sizeof value, CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, plain, N),
               CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuMemAdvise(plain, N, CU_MEM_ADVISE_SET_READ_MOSTLY, on_device(0)), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuStreamAttachMemAsync(stream, plain, 0, CU_MEM_ATTACH_SINGLE), CUDA_ERROR_INVALID_VALUE);
    DRV(cuMemFree(plain));
    DRV(cuStreamDestroy(stream));
    DRV(cuMemFree(m));
    printf("ok managed\n");
}

static void pointer_attribute(CUcontext *primary)
{
    DRV(cuCtxSetCurrent(primary[0]));
    CUdeviceptr d;
    DRV(cuMemAlloc(&d, N));
    unsigned one = 1, zero = 0;
    DRV(cuPointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, d));
    bool sync = false;
    DRV(cuPointerGetAttribute(&sync, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, d));
    REQUIRE(sync);
    DRV(cuPointerSetAttribute(&zero, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, d + 64));  // inside the allocation
    // A synchronous copy is complete when it returns.
    std::vector<unsigned char> src = patterned(N, 11), back(N, 0);
    DRV(cuMemcpyHtoD(d, src.data(), N));
    DRV(cuMemcpyDtoH(back.data(), d, N));
    REQUIRE(memcmp(back.data(), src.data(), N) == 0);
    // Only SYNC_MEMOPS is settable, and only on memory CUDA knows.
    unsigned type = CU_MEMORYTYPE_HOST;
    DRV_EXPECT(cuPointerSetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuPointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, (CUdeviceptr)&type),
               CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuPointerSetAttribute(NULL, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, d), CUDA_ERROR_INVALID_VALUE);
    DRV(cuMemGetAddressRange(NULL, NULL, d));
    DRV(cuMemFree(d));
    DRV_EXPECT(cuPointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, d), CUDA_ERROR_INVALID_VALUE);  // freed
    printf("ok pointer_attribute\n");
}

static void profiler(CUcontext *primary)
{
    DRV(cuCtxSetCurrent(primary[0]));
    DRV(cuProfilerStart());
    DRV(cuProfilerStart());  // already started: no effect
    DRV(cuProfilerStop());
    CHECK(cudaProfilerStart());
    CHECK(cudaProfilerStop());
    CUresult without_context = CUDA_SUCCESS;
    std::thread([&] { without_context = cuProfilerStart(); }).join();  // a new thread has no current context
    DRV_EXPECT(without_context, CUDA_ERROR_INVALID_CONTEXT);
    printf("ok profiler\n");
}

static void kernel_attributes(CUcontext *primary, const char *fatbin_path)
{
    DRV(cuCtxSetCurrent(primary[0]));
    CUlibrary library;
    DRV(cuLibraryLoadFromFile(&library, fatbin_path, NULL, NULL, 0, NULL, NULL, 0));
    CUkernel kernel;
    DRV(cuLibraryGetKernel(&kernel, library, "scale"));
    CUfunction function;
    DRV(cuKernelGetFunction(&function, kernel));
    const CUfunction_attribute attributes[] = {
        CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
        CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, CU_FUNC_ATTRIBUTE_NUM_REGS,
        CU_FUNC_ATTRIBUTE_PTX_VERSION, CU_FUNC_ATTRIBUTE_BINARY_VERSION,
        CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES};
    for (CUfunction_attribute attribute : attributes) {
        int from_kernel = -1, from_function = -2;
        DRV(cuKernelGetAttribute(&from_kernel, attribute, kernel, 0));
        DRV(cuFuncGetAttribute(&from_function, attribute, function));
        if (from_kernel != from_function)
            printf("attribute %d: cuKernelGetAttribute %d, cuFuncGetAttribute %d\n", (int)attribute, from_kernel,
                   from_function);
        REQUIRE(from_kernel == from_function);
    }
    int max_threads = 0, regs = 0, binary = 0;
    DRV(cuKernelGetAttribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, kernel, 0));
    DRV(cuKernelGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, kernel, 0));
    DRV(cuKernelGetAttribute(&binary, CU_FUNC_ATTRIBUTE_BINARY_VERSION, kernel, 0));
    REQUIRE(max_threads > 0 && max_threads <= 1024 && regs > 0 && binary > 0);
    // On device 1: its own function, loaded there, the same kernel.
    int on_device1 = 0;
    DRV(cuKernelGetAttribute(&on_device1, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, kernel, 1));
    REQUIRE(on_device1 == max_threads);
    DRV(cuCtxSetCurrent(primary[1]));
    CUfunction function1;
    DRV(cuKernelGetFunction(&function1, kernel));
    int regs1 = 0;
    DRV(cuFuncGetAttribute(&regs1, CU_FUNC_ATTRIBUTE_NUM_REGS, function1));
    REQUIRE(function1 != function && regs1 == regs);
    DRV(cuCtxSetCurrent(primary[0]));
    int value;
    DRV_EXPECT(cuKernelGetAttribute(&value, CU_FUNC_ATTRIBUTE_NUM_REGS, kernel, 7), CUDA_ERROR_INVALID_DEVICE);
    DRV_EXPECT(cuKernelGetAttribute(&value, (CUfunction_attribute)99, kernel, 0), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuKernelGetAttribute(&value, CU_FUNC_ATTRIBUTE_NUM_REGS, (CUkernel)0x1234, 0),
               CUDA_ERROR_INVALID_HANDLE);
    DRV_EXPECT(cuKernelGetAttribute(NULL, CU_FUNC_ATTRIBUTE_NUM_REGS, kernel, 0), CUDA_ERROR_INVALID_VALUE);
    DRV(cuLibraryUnload(library));
    DRV_EXPECT(cuKernelGetAttribute(&value, CU_FUNC_ATTRIBUTE_NUM_REGS, kernel, 0), CUDA_ERROR_INVALID_HANDLE);
    printf("ok kernel_attributes\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s KERNELS.fatbin\n", argv[0]);
        return 2;
    }
    not_initialized();
    DRV(cuInit(0));
    CUcontext primary[2];
    DRV(cuDevicePrimaryCtxRetain(&primary[0], 0));
    DRV(cuDevicePrimaryCtxRetain(&primary[1], 1));
    peers(primary);
    pools(primary);
    managed(primary);
    pointer_attribute(primary);
    profiler(primary);
    kernel_attributes(primary, argv[1]);
    DRV(cuDevicePrimaryCtxRelease(0));
    DRV(cuDevicePrimaryCtxRelease(1));
    printf("PASSED driver_parity\n");
    return 0;
}
