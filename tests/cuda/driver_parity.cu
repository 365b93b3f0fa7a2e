// The driver API's functions whose runtime twins rcuda has: peer access and
// peer copies, memory pools and stream-ordered allocation, managed memory's
// hints and queries, cuPointerSetAttribute, the profiler calls, and
// cuKernelGetAttribute (the same answers as cuFuncGetAttribute); every one
// of them answers CUDA_ERROR_NOT_INITIALIZED before cuInit.  Then stream
// attributes, function and kernel queries (loading state, parameter
// layouts, names, libraries), a library's __managed__ variables, context
// settings (cache and shared memory configuration, execution affinity),
// cuCtxRecordEvent and cuCtxWaitEvent against a busy kernel (its time
// modelled on the sim),
// device queries (atomics, GPUDirect RDMA flushes, notifications, valid
// devices), pools by location and batch prefetches and discards.  Linked
// to libcuda.so.1 (and the runtime, for the calls that cross APIs).
// Usage: driver_parity KERNELS.fatbin PARITY_KERNELS.fatbin
// (tests/cuda/driver_module_kernels.cu and driver_parity_kernels.cu, nvcc
// -fatbin).  Needs a server with two GPUs that are peers (the sim's
// --devices 2).  Where a GPU's answer is its own (native atomics, GPUDirect
// RDMA), the checks follow what the device reports.  Prints "ok NAME"
// per section; a failure prints "FAILED line N: ..." and exits 1.
#include <cuda.h>
#include <cudaProfiler.h>
#include <cudaTypedefs.h>
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
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
    CUfunc_cache cache;
    CUmoduleLoadingMode mode;
    const char *name;
    CUmemLocation location = on_device(0);
    DRV_EXPECT(cuCtxGetCacheConfig(&cache), CUDA_ERROR_NOT_INITIALIZED);
    DRV_EXPECT(cuDeviceGetExecAffinitySupport(&value, CU_EXEC_AFFINITY_TYPE_SM_COUNT, 0), CUDA_ERROR_NOT_INITIALIZED);
    DRV_EXPECT(cuModuleGetLoadingMode(&mode), CUDA_ERROR_NOT_INITIALIZED);
    DRV_EXPECT(cuKernelGetName(&name, (CUkernel)0x1234), CUDA_ERROR_NOT_INITIALIZED);
    DRV_EXPECT(cuMemGetDefaultMemPool(&pool, &location, CU_MEM_ALLOCATION_TYPE_PINNED), CUDA_ERROR_NOT_INITIALIZED);
    DRV_EXPECT(cuCtxRecordEvent((CUcontext)0x1234, (CUevent)0x1234), CUDA_ERROR_NOT_INITIALIZED);
    DRV_EXPECT(cuProfilerInitialize(NULL, NULL, CU_OUT_CSV), CUDA_ERROR_NOT_SUPPORTED);  // always, since CUDA 12
    printf("ok not_initialized\n");
}

static void peers(CUcontext *primary)
{
    int can = -1;
    DRV(cuDeviceCanAccessPeer(&can, 0, 1));
    REQUIRE(can == 1);  // two GPUs of one server, peers
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

// What `call` returns in a new thread, which has no current context.
static CUresult in_new_thread(const std::function<CUresult()> &call)
{
    CUresult result = CUDA_SUCCESS;
    std::thread([&] { result = call(); }).join();
    return result;
}

static CUstreamAttrValue stream_attr(CUstream stream, CUstreamAttrID id)
{
    CUstreamAttrValue value;
    memset(&value, 0xab, sizeof value);
    DRV(cuStreamGetAttribute(stream, id, &value));
    return value;
}

static void stream_attributes(CUcontext *primary)
{
    DRV(cuCtxSetCurrent(primary[0]));
    CUstream a, b;
    DRV(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
    DRV(cuStreamCreate(&b, CU_STREAM_DEFAULT));
    REQUIRE(stream_attr(a, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY).syncPolicy == CU_SYNC_POLICY_AUTO);
    REQUIRE(stream_attr(a, CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW).accessPolicyWindow.num_bytes == 0);

    // Set by the driver, read by the runtime, and back.
    CUstreamAttrValue value = {};
    value.syncPolicy = CU_SYNC_POLICY_SPIN;
    DRV(cuStreamSetAttribute(a, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, &value));
    cudaStreamAttrValue runtime_value = {};
    CHECK(cudaStreamGetAttribute((cudaStream_t)a, cudaStreamAttributeSynchronizationPolicy, &runtime_value));
    REQUIRE(runtime_value.syncPolicy == cudaSyncPolicySpin);
    runtime_value.memSyncDomain = cudaLaunchMemSyncDomainRemote;
    CHECK(cudaStreamSetAttribute((cudaStream_t)a, cudaStreamAttributeMemSyncDomain, &runtime_value));
    REQUIRE(stream_attr(a, CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN).memSyncDomain == CU_LAUNCH_MEM_SYNC_DOMAIN_REMOTE);

    CUdeviceptr window;
    DRV(cuMemAlloc(&window, N));
    value = {};
    value.accessPolicyWindow.base_ptr = (void *)window;
    value.accessPolicyWindow.num_bytes = N;
    value.accessPolicyWindow.hitRatio = 0.5f;
    value.accessPolicyWindow.hitProp = CU_ACCESS_PROPERTY_PERSISTING;
    value.accessPolicyWindow.missProp = CU_ACCESS_PROPERTY_STREAMING;
    DRV(cuStreamSetAttribute(a, CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, &value));
    CUaccessPolicyWindow got = stream_attr(a, CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW).accessPolicyWindow;
    REQUIRE(got.base_ptr == (void *)window && got.num_bytes == N && got.hitRatio == 0.5f &&
            got.hitProp == CU_ACCESS_PROPERTY_PERSISTING && got.missProp == CU_ACCESS_PROPERTY_STREAMING);

    // A priority is the stream's own, clamped to the device's range.
    int least = 0, greatest = 0, priority = 99;
    DRV(cuCtxGetStreamPriorityRange(&least, &greatest));
    value = {};
    value.priority = greatest - 10;
    DRV(cuStreamSetAttribute(a, CU_LAUNCH_ATTRIBUTE_PRIORITY, &value));
    DRV(cuStreamGetPriority(a, &priority));
    REQUIRE(priority == greatest && stream_attr(a, CU_LAUNCH_ATTRIBUTE_PRIORITY).priority == greatest);

    // Copied whole to another stream of the context.
    DRV(cuStreamCopyAttributes(b, a));
    REQUIRE(stream_attr(b, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY).syncPolicy == CU_SYNC_POLICY_SPIN);
    REQUIRE(stream_attr(b, CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW).accessPolicyWindow.base_ptr == (void *)window);
    REQUIRE(stream_attr(b, CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN).memSyncDomain == CU_LAUNCH_MEM_SYNC_DOMAIN_REMOTE);
    DRV(cuStreamGetPriority(b, &priority));
    REQUIRE(priority == greatest);

    // The per-thread default stream has attributes of its own; the _ptsz
    // export (cuGetProcAddress with per-thread streams) reads them for stream 0.
    value = {};
    value.syncPolicy = CU_SYNC_POLICY_YIELD;
    DRV(cuStreamSetAttribute(CU_STREAM_PER_THREAD, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, &value));
    PFN_cuStreamGetAttribute_v11000 get_ptsz = NULL;
    CUdriverProcAddressQueryResult found;
    DRV(cuGetProcAddress("cuStreamGetAttribute", (void **)&get_ptsz, 12000,
                         CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &found));
    REQUIRE(found == CU_GET_PROC_ADDRESS_SUCCESS && get_ptsz != NULL &&
            (void *)get_ptsz != (void *)cuStreamGetAttribute);
    DRV(get_ptsz(0, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, &value));
    REQUIRE(value.syncPolicy == CU_SYNC_POLICY_YIELD);
    REQUIRE(stream_attr(0, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY).syncPolicy == CU_SYNC_POLICY_AUTO);  // legacy

    // What CUDA refuses.
    value = {};
    DRV_EXPECT(cuStreamGetAttribute(a, CU_LAUNCH_ATTRIBUTE_COOPERATIVE, &value), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuStreamSetAttribute(a, (CUstreamAttrID)77, &value), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuStreamGetAttribute(a, CU_LAUNCH_ATTRIBUTE_PRIORITY, NULL), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuStreamSetAttribute(a, CU_LAUNCH_ATTRIBUTE_PRIORITY, NULL), CUDA_ERROR_INVALID_VALUE);
    value.accessPolicyWindow.base_ptr = (void *)window;
    value.accessPolicyWindow.num_bytes = 4096;
    value.accessPolicyWindow.hitRatio = 2.0f;
    DRV_EXPECT(cuStreamSetAttribute(a, CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, &value), CUDA_ERROR_INVALID_VALUE);
    value = {};
    value.syncPolicy = (CUsynchronizationPolicy)9;
    DRV_EXPECT(cuStreamSetAttribute(a, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, &value), CUDA_ERROR_INVALID_VALUE);
    REQUIRE(stream_attr(a, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY).syncPolicy == CU_SYNC_POLICY_SPIN);  // unchanged
    DRV_EXPECT(cuStreamGetAttribute((CUstream)0x1234, CU_LAUNCH_ATTRIBUTE_PRIORITY, &value), CUDA_ERROR_INVALID_HANDLE);
    DRV_EXPECT(cuStreamCopyAttributes(a, (CUstream)0x1234), CUDA_ERROR_INVALID_HANDLE);
    CUstream other_device, other_context;
    DRV(cuCtxSetCurrent(primary[1]));
    DRV(cuStreamCreate(&other_device, CU_STREAM_NON_BLOCKING));
    DRV(cuCtxSetCurrent(primary[0]));
    DRV_EXPECT(cuStreamCopyAttributes(other_device, a), CUDA_ERROR_INVALID_VALUE);  // two devices
    CUcontext created;
    DRV(cuCtxCreate(&created, NULL, 0, 0));
    DRV(cuStreamCreate(&other_context, CU_STREAM_NON_BLOCKING));
    DRV_EXPECT(cuStreamCopyAttributes(other_context, a), CUDA_ERROR_INVALID_VALUE);  // one device, two contexts
    DRV(cuCtxDestroy(created));
    DRV(cuCtxSetCurrent(primary[0]));
    DRV_EXPECT(in_new_thread([&] { return cuStreamGetAttribute(0, CU_LAUNCH_ATTRIBUTE_PRIORITY, &value); }),
               CUDA_ERROR_INVALID_CONTEXT);
    DRV(cuStreamDestroy(other_device));
    DRV(cuStreamDestroy(a));
    DRV(cuStreamDestroy(b));
    DRV(cuMemFree(window));
    printf("ok stream_attributes\n");
}

__global__ void own_kernel(int *out, double scale) {}

static void functions(CUcontext *primary, const char *fatbin_path)
{
    DRV(cuCtxSetCurrent(primary[0]));
    CUlibrary library;
    DRV(cuLibraryLoadFromFile(&library, fatbin_path, NULL, NULL, 0, NULL, NULL, 0));
    CUkernel kernel;
    DRV(cuLibraryGetKernel(&kernel, library, "mixed_params"));

    // CUkernel: name, library and parameter layout, with no device involved.
    const char *name = NULL;
    DRV(cuKernelGetName(&name, kernel));
    REQUIRE(name != NULL && strcmp(name, "mixed_params") == 0);
    CUlibrary owner = NULL;
    DRV(cuKernelGetLibrary(&owner, kernel));
    REQUIRE(owner == library);
    const size_t offsets[] = {0, 8, 16, 24}, sizes[] = {1, 8, 2, 8};
    for (size_t i = 0; i < 4; i++) {
        size_t offset = 99, size = 99;
        DRV(cuKernelGetParamInfo(kernel, i, &offset, &size));
        REQUIRE(offset == offsets[i] && size == sizes[i]);
    }
    size_t offset = 99, size = 99;
    DRV(cuKernelGetParamInfo(kernel, 2, &offset, NULL));  // the size may be left out
    REQUIRE(offset == 16);
    DRV_EXPECT(cuKernelGetParamInfo(kernel, 4, &offset, &size), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuKernelGetParamInfo(kernel, 0, NULL, &size), CUDA_ERROR_INVALID_VALUE);
    CHECK(cudaFuncGetParamInfo((const void *)kernel, 3, &offset, &size));  // the runtime's twin
    REQUIRE(offset == 24 && size == 8);

    // Its CUfunction: the same layout, its module, loaded on demand.
    CUfunction function;
    DRV(cuKernelGetFunction(&function, kernel));
    DRV(cuFuncGetParamInfo(function, 1, &offset, &size));
    REQUIRE(offset == 8 && size == 8);
    DRV_EXPECT(cuFuncGetParamInfo(function, 9, &offset, &size), CUDA_ERROR_INVALID_VALUE);
    CUmodule module = NULL, library_module = NULL;
    DRV(cuFuncGetModule(&module, function));
    DRV(cuLibraryGetModule(&library_module, library));
    REQUIRE(module != NULL && module == library_module);
    CUfunction again;
    DRV(cuModuleGetFunction(&again, module, "mixed_params"));
    REQUIRE(again == function);
    CUfunctionLoadingState state = CU_FUNCTION_LOADING_STATE_MAX;
    DRV(cuFuncIsLoaded(&state, function));
    REQUIRE(state == CU_FUNCTION_LOADING_STATE_UNLOADED);  // rcuda loads lazily: at the first launch or cuFuncLoad
    CUmoduleLoadingMode mode = (CUmoduleLoadingMode)0;
    DRV(cuModuleGetLoadingMode(&mode));
    REQUIRE(mode == CU_MODULE_LAZY_LOADING);
    DRV(cuFuncLoad(function));
    DRV(cuFuncIsLoaded(&state, function));
    REQUIRE(state == CU_FUNCTION_LOADING_STATE_LOADED);
    DRV(cuFuncLoad(function));  // loaded already: no effect

    // Preferences: checked, accepted.
    DRV(cuKernelSetCacheConfig(kernel, CU_FUNC_CACHE_PREFER_L1, 1));
    DRV_EXPECT(cuKernelSetCacheConfig(kernel, (CUfunc_cache)9, 0), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuKernelSetCacheConfig(kernel, CU_FUNC_CACHE_PREFER_L1, 7), CUDA_ERROR_INVALID_DEVICE);
    DRV_EXPECT(cuKernelSetCacheConfig((CUkernel)0x1234, CU_FUNC_CACHE_PREFER_L1, 0), CUDA_ERROR_INVALID_HANDLE);
    DRV(cuFuncSetSharedMemConfig(function, CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE));
    DRV_EXPECT(cuFuncSetSharedMemConfig(function, (CUsharedconfig)5), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuFuncSetSharedMemConfig((CUfunction)0x1234, CU_SHARED_MEM_CONFIG_DEFAULT_BANK_SIZE),
               CUDA_ERROR_INVALID_HANDLE);

    // A kernel of the program's own: a name and a layout, no library.
    cudaKernel_t own;
    CHECK(cudaGetKernel(&own, own_kernel));
    DRV(cuKernelGetName(&name, (CUkernel)own));
    REQUIRE(strcmp(name, "_Z10own_kernelPid") == 0);
    DRV(cuKernelGetParamInfo((CUkernel)own, 1, &offset, &size));
    REQUIRE(offset == 8 && size == 8);
    DRV_EXPECT(cuKernelGetLibrary(&owner, (CUkernel)own), CUDA_ERROR_NOT_FOUND);

    // Bad handles and NULL outputs.
    DRV_EXPECT(cuKernelGetName(NULL, kernel), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuKernelGetName(&name, NULL), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuKernelGetName(&name, (CUkernel)0x1234), CUDA_ERROR_INVALID_HANDLE);
    DRV_EXPECT(cuKernelGetLibrary(NULL, kernel), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuKernelGetLibrary(&owner, (CUkernel)0x1234), CUDA_ERROR_INVALID_HANDLE);
    DRV_EXPECT(cuFuncGetModule(NULL, function), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuFuncGetModule(&module, (CUfunction)0x1234), CUDA_ERROR_INVALID_HANDLE);
    DRV_EXPECT(cuFuncIsLoaded(NULL, function), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuFuncIsLoaded(&state, (CUfunction)0x1234), CUDA_ERROR_INVALID_HANDLE);
    DRV_EXPECT(cuFuncLoad((CUfunction)0x1234), CUDA_ERROR_INVALID_HANDLE);
    DRV_EXPECT(cuModuleGetLoadingMode(NULL), CUDA_ERROR_INVALID_VALUE);
    DRV(cuLibraryUnload(library));
    DRV_EXPECT(cuKernelGetName(&name, kernel), CUDA_ERROR_INVALID_HANDLE);
    DRV_EXPECT(cuFuncGetModule(&module, function), CUDA_ERROR_INVALID_HANDLE);
    printf("ok functions\n");
}

static void library_managed(CUcontext *primary, const char *fatbin_path)
{
    DRV(cuCtxSetCurrent(primary[0]));
    CUlibrary library;
    DRV(cuLibraryLoadFromFile(&library, fatbin_path, NULL, NULL, 0, NULL, NULL, 0));
    CUdeviceptr total = 0;
    size_t bytes = 0;
    DRV(cuLibraryGetManaged(&total, &bytes, library, "managed_total"));
    REQUIRE(total != 0 && bytes == sizeof(int));
    int *host = (int *)total;
    REQUIRE(*host == 5);  // its initial value, readable on the host
    void *runtime_ptr = NULL;
    size_t runtime_bytes = 0;
    CHECK(cudaLibraryGetManaged(&runtime_ptr, &runtime_bytes, (cudaLibrary_t)library, "managed_total"));
    REQUIRE(runtime_ptr == (void *)total && runtime_bytes == bytes);  // one variable, both APIs
    DRV(cuLibraryGetManaged(NULL, &bytes, library, "managed_table"));
    REQUIRE(bytes == 16 * sizeof(float));

    // The host's write reaches the kernel; the kernel's comes back after a synchronisation.
    *host = 40;
    CUkernel kernel;
    DRV(cuLibraryGetKernel(&kernel, library, "add_managed"));
    CUfunction function;
    DRV(cuKernelGetFunction(&function, kernel));
    int by = 2;
    void *args[] = {&by};
    DRV(cuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, 0, args, NULL));
    DRV(cuCtxSynchronize());
    REQUIRE(*host == 42);
    CUdeviceptr again = 0;
    DRV(cuLibraryGetManaged(&again, NULL, library, "managed_total"));
    REQUIRE(again == total);

    // Only __managed__ variables; a library with no unified function pointers has none.
    DRV_EXPECT(cuLibraryGetManaged(&total, &bytes, library, "plain_value"), CUDA_ERROR_NOT_FOUND);
    DRV_EXPECT(cuLibraryGetManaged(&total, &bytes, library, "no_such_variable"), CUDA_ERROR_NOT_FOUND);
    EXPECT_AND_CLEAR(cudaLibraryGetManaged(&runtime_ptr, &runtime_bytes, (cudaLibrary_t)library, "plain_value"),
                     cudaErrorSymbolNotFound);
    DRV_EXPECT(cuLibraryGetManaged(NULL, NULL, library, "managed_total"), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuLibraryGetManaged(&total, &bytes, library, NULL), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuLibraryGetManaged(&total, &bytes, (CUlibrary)0x1234, "managed_total"), CUDA_ERROR_INVALID_HANDLE);
    EXPECT_AND_CLEAR(cudaLibraryGetManaged(&runtime_ptr, &runtime_bytes, (cudaLibrary_t)0x1234, "managed_total"),
                     cudaErrorInvalidResourceHandle);
    int unified = -1;
    DRV(cuDeviceGetAttribute(&unified, CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS, 0));
    REQUIRE(unified == 0);
    void *fptr = NULL;
    DRV_EXPECT(cuLibraryGetUnifiedFunction(&fptr, library, "add_managed"), CUDA_ERROR_NOT_FOUND);
    EXPECT_AND_CLEAR(cudaLibraryGetUnifiedFunction(&fptr, (cudaLibrary_t)library, "add_managed"),
                     cudaErrorSymbolNotFound);
    DRV_EXPECT(cuLibraryGetUnifiedFunction(NULL, library, "add_managed"), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuLibraryGetUnifiedFunction(&fptr, (CUlibrary)0x1234, "add_managed"), CUDA_ERROR_INVALID_HANDLE);
    DRV(cuLibraryUnload(library));
    DRV_EXPECT(cuLibraryGetManaged(&total, &bytes, library, "managed_total"), CUDA_ERROR_INVALID_HANDLE);
    printf("ok library_managed\n");
}

static void contexts(CUcontext *primary)
{
    DRV(cuCtxSetCurrent(primary[0]));
    // Cache preferences: a primary context's is its device's, a created context's its own.
    CUfunc_cache cache = CU_FUNC_CACHE_PREFER_EQUAL;
    DRV(cuCtxGetCacheConfig(&cache));
    REQUIRE(cache == CU_FUNC_CACHE_PREFER_NONE);
    DRV(cuCtxSetCacheConfig(CU_FUNC_CACHE_PREFER_SHARED));
    DRV(cuCtxGetCacheConfig(&cache));
    REQUIRE(cache == CU_FUNC_CACHE_PREFER_SHARED);
    cudaFuncCache runtime_cache = cudaFuncCachePreferNone;
    CHECK(cudaDeviceGetCacheConfig(&runtime_cache));
    REQUIRE(runtime_cache == cudaFuncCachePreferShared);
    DRV(cuCtxSetCurrent(primary[1]));
    DRV(cuCtxGetCacheConfig(&cache));
    REQUIRE(cache == CU_FUNC_CACHE_PREFER_NONE);  // per device
    CHECK(cudaDeviceSetCacheConfig(cudaFuncCachePreferL1));
    DRV(cuCtxGetCacheConfig(&cache));
    REQUIRE(cache == CU_FUNC_CACHE_PREFER_L1);
    CUcontext created;
    DRV(cuCtxCreate(&created, NULL, 0, 0));
    DRV(cuCtxGetCacheConfig(&cache));
    REQUIRE(cache == CU_FUNC_CACHE_PREFER_NONE);
    DRV(cuCtxSetCacheConfig(CU_FUNC_CACHE_PREFER_EQUAL));
    DRV(cuCtxGetCacheConfig(&cache));
    REQUIRE(cache == CU_FUNC_CACHE_PREFER_EQUAL);
    DRV(cuCtxDestroy(created));
    DRV(cuCtxSetCurrent(primary[0]));
    DRV(cuCtxGetCacheConfig(&cache));
    REQUIRE(cache == CU_FUNC_CACHE_PREFER_SHARED);
    DRV_EXPECT(cuCtxSetCacheConfig((CUfunc_cache)7), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuCtxGetCacheConfig(NULL), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(in_new_thread([&] { return cuCtxGetCacheConfig(&cache); }), CUDA_ERROR_INVALID_CONTEXT);
    DRV(cuCtxSetCacheConfig(CU_FUNC_CACHE_PREFER_NONE));

    // Shared memory banks: four bytes wide and fixed on every device; setting another does nothing.
    CUsharedconfig banks = CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE;
    DRV(cuCtxGetSharedMemConfig(&banks));
    REQUIRE(banks == CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE);
    DRV(cuCtxSetSharedMemConfig(CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE));
    DRV(cuCtxGetSharedMemConfig(&banks));
    REQUIRE(banks == CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE);
    cudaSharedMemConfig runtime_banks = cudaSharedMemBankSizeDefault;
    CHECK(cudaDeviceGetSharedMemConfig(&runtime_banks));
    REQUIRE(runtime_banks == cudaSharedMemBankSizeFourByte);
    CHECK(cudaDeviceSetSharedMemConfig(cudaSharedMemBankSizeEightByte));
    DRV_EXPECT(cuCtxSetSharedMemConfig((CUsharedconfig)3), CUDA_ERROR_INVALID_VALUE);
    EXPECT_AND_CLEAR(cudaDeviceSetSharedMemConfig((cudaSharedMemConfig)9), cudaErrorInvalidValue);
    DRV_EXPECT(cuCtxGetSharedMemConfig(NULL), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(in_new_thread([&] { return cuCtxGetSharedMemConfig(&banks); }), CUDA_ERROR_INVALID_CONTEXT);

    // The persisting L2 lines (none on the sim): the current context's device's.
    DRV(cuCtxResetPersistingL2Cache());
    DRV_EXPECT(in_new_thread([] { return cuCtxResetPersistingL2Cache(); }), CUDA_ERROR_INVALID_CONTEXT);

    // Execution affinity: no device offers it.
    int supported = -1;
    DRV(cuDeviceGetExecAffinitySupport(&supported, CU_EXEC_AFFINITY_TYPE_SM_COUNT, 1));
    REQUIRE(supported == 0);
    DRV_EXPECT(cuDeviceGetExecAffinitySupport(&supported, CU_EXEC_AFFINITY_TYPE_MAX, 0), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuDeviceGetExecAffinitySupport(&supported, CU_EXEC_AFFINITY_TYPE_SM_COUNT, 9),
               CUDA_ERROR_INVALID_DEVICE);
    DRV_EXPECT(cuDeviceGetExecAffinitySupport(NULL, CU_EXEC_AFFINITY_TYPE_SM_COUNT, 0), CUDA_ERROR_INVALID_VALUE);
    CUexecAffinityParam affinity;
    DRV_EXPECT(cuCtxGetExecAffinity(&affinity, CU_EXEC_AFFINITY_TYPE_SM_COUNT), CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY);
    DRV_EXPECT(cuCtxGetExecAffinity(&affinity, CU_EXEC_AFFINITY_TYPE_MAX), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuCtxGetExecAffinity(NULL, CU_EXEC_AFFINITY_TYPE_SM_COUNT), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(in_new_thread([&] { return cuCtxGetExecAffinity(&affinity, CU_EXEC_AFFINITY_TYPE_SM_COUNT); }),
               CUDA_ERROR_INVALID_CONTEXT);
    DRV_EXPECT(cuProfilerInitialize("config.txt", "out.csv", CU_OUT_CSV), CUDA_ERROR_NOT_SUPPORTED);
    printf("ok contexts\n");
}

// A kernel that keeps its stream busy for `seconds` (modelled on the sim).
static void spin(CUfunction function, CUstream stream, double seconds)
{
    long long nanoseconds = (long long)(seconds * 1e9);
    void *args[] = {&nanoseconds};
    DRV(cuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, stream, args, NULL));
}

static void context_events(CUcontext *primary, const char *fatbin_path)
{
    const double busy = 0.4;
    DRV(cuCtxSetCurrent(primary[0]));
    CUlibrary library;
    DRV(cuLibraryLoadFromFile(&library, fatbin_path, NULL, NULL, 0, NULL, NULL, 0));
    CUkernel kernel;
    DRV(cuLibraryGetKernel(&kernel, library, "spin"));
    CUfunction spin0, spin1;
    DRV(cuKernelGetFunction(&spin0, kernel));
    CUstream busy_stream, other;
    DRV(cuStreamCreate(&busy_stream, CU_STREAM_NON_BLOCKING));
    DRV(cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
    CUevent start, on_legacy, all, in_other, in_new, on_legacy_after;
    for (CUevent *event : {&start, &on_legacy, &all, &in_other, &in_new, &on_legacy_after})
        DRV(cuEventCreate(event, CU_EVENT_DEFAULT));

    // The context's event waits for the work of a non-blocking stream, which
    // an event of the legacy stream does not.
    DRV(cuEventRecord(start, busy_stream));
    spin(spin0, busy_stream, busy);
    DRV(cuEventRecord(on_legacy, 0));
    DRV(cuCtxRecordEvent(primary[0], all));
    DRV(cuEventQuery(on_legacy));
    DRV_EXPECT(cuEventQuery(all), CUDA_ERROR_NOT_READY);
    DRV(cuEventSynchronize(all));
    DRV(cuStreamQuery(busy_stream));
    float ms = 0;
    DRV(cuEventElapsedTime(&ms, start, all));
    REQUIRE(ms >= busy * 1000 * 0.9);
    DRV(cuCtxRecordEvent(NULL, all));  // NULL: the current context; nothing is running now
    DRV(cuEventQuery(all));

    // The context waits: every stream's later work, the legacy stream's and
    // a stream made after the call included.
    spin(spin0, busy_stream, busy);
    DRV(cuEventRecord(start, busy_stream));
    DRV(cuCtxWaitEvent(primary[0], start));
    DRV(cuEventRecord(in_other, other));
    DRV(cuEventRecord(on_legacy_after, 0));
    CUstream made_after;
    DRV(cuStreamCreate(&made_after, CU_STREAM_NON_BLOCKING));
    DRV(cuEventRecord(in_new, made_after));
    DRV_EXPECT(cuEventQuery(in_other), CUDA_ERROR_NOT_READY);
    DRV_EXPECT(cuEventQuery(on_legacy_after), CUDA_ERROR_NOT_READY);
    DRV_EXPECT(cuEventQuery(in_new), CUDA_ERROR_NOT_READY);
    DRV(cuEventSynchronize(in_new));
    DRV(cuEventQuery(start));
    DRV(cuEventSynchronize(in_other));
    DRV(cuEventSynchronize(on_legacy_after));

    // An event of another device: waited for before the call returns.
    DRV(cuCtxSetCurrent(primary[1]));
    DRV(cuKernelGetFunction(&spin1, kernel));
    CUstream stream1;
    CUevent event1;
    DRV(cuStreamCreate(&stream1, CU_STREAM_NON_BLOCKING));
    DRV(cuEventCreate(&event1, CU_EVENT_DEFAULT));
    spin(spin1, stream1, busy);
    DRV(cuEventRecord(event1, stream1));
    DRV(cuCtxSetCurrent(primary[0]));
    DRV_EXPECT(cuEventQuery(event1), CUDA_ERROR_NOT_READY);
    DRV(cuCtxWaitEvent(primary[0], event1));
    DRV(cuEventQuery(event1));

    // The event must be the context's; bad handles; a capturing stream.
    DRV_EXPECT(cuCtxRecordEvent(primary[0], event1), CUDA_ERROR_INVALID_HANDLE);
    DRV_EXPECT(cuCtxRecordEvent(primary[1], all), CUDA_ERROR_INVALID_HANDLE);
    CUcontext created;
    DRV(cuCtxCreate(&created, NULL, 0, 0));
    DRV_EXPECT(cuCtxRecordEvent(created, all), CUDA_ERROR_INVALID_HANDLE);  // the primary context's event
    CUevent created_event;
    DRV(cuEventCreate(&created_event, CU_EVENT_DEFAULT));
    DRV(cuCtxRecordEvent(created, created_event));
    DRV(cuCtxWaitEvent(created, all));  // an event of any context
    DRV(cuCtxDestroy(created));
    DRV(cuCtxSetCurrent(primary[0]));
    DRV_EXPECT(cuCtxRecordEvent((CUcontext)0x1234, all), CUDA_ERROR_INVALID_CONTEXT);
    DRV_EXPECT(cuCtxWaitEvent((CUcontext)0x1234, all), CUDA_ERROR_INVALID_CONTEXT);
    DRV_EXPECT(cuCtxRecordEvent(primary[0], (CUevent)0x1234), CUDA_ERROR_INVALID_HANDLE);
    DRV_EXPECT(cuCtxWaitEvent(primary[0], (CUevent)0x1234), CUDA_ERROR_INVALID_HANDLE);
    DRV_EXPECT(in_new_thread([&] { return cuCtxRecordEvent(NULL, all); }), CUDA_ERROR_INVALID_CONTEXT);
    DRV(cuStreamBeginCapture(other, CU_STREAM_CAPTURE_MODE_RELAXED));
    DRV_EXPECT(cuCtxRecordEvent(primary[0], all), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    CUgraph graph;
    DRV_EXPECT(cuStreamEndCapture(other, &graph), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    DRV(cuStreamBeginCapture(other, CU_STREAM_CAPTURE_MODE_RELAXED));
    DRV_EXPECT(cuCtxWaitEvent(primary[0], all), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    DRV_EXPECT(cuStreamEndCapture(other, &graph), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

    DRV(cuCtxSynchronize());
    for (CUevent event : {start, on_legacy, all, in_other, in_new, on_legacy_after})
        DRV(cuEventDestroy(event));
    DRV(cuStreamDestroy(busy_stream));
    DRV(cuStreamDestroy(other));
    DRV(cuStreamDestroy(made_after));
    DRV(cuCtxSetCurrent(primary[1]));
    DRV(cuEventDestroy(event1));
    DRV(cuStreamDestroy(stream1));
    DRV(cuCtxSetCurrent(primary[0]));
    DRV(cuLibraryUnload(library));
    printf("ok context_events\n");
}

static void CUDA_CB on_notification(CUasyncNotificationInfo *, void *, CUasyncCallbackHandle) {}

static void devices(CUcontext *primary)
{
    DRV(cuCtxSetCurrent(primary[0]));
    // Atomics: with the host and between the GPUs, integer ones offered
    // where the device says its link has native atomics, none where it has
    // not (the sim: neither; rcuda's GPUs are not on the program's bus).
    int host_native = -1, host_native1 = -1, p2p_native = -1;
    DRV(cuDeviceGetAttribute(&host_native, CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED, 0));
    DRV(cuDeviceGetAttribute(&host_native1, CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED, 1));
    DRV(cuDeviceGetP2PAttribute(&p2p_native, CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED, 0, 1));
    CUatomicOperation operations[] = {CU_ATOMIC_OPERATION_INTEGER_ADD, CU_ATOMIC_OPERATION_CAS,
                                      CU_ATOMIC_OPERATION_FLOAT_ADD};
    unsigned capabilities[3] = {99, 99, 99};
    DRV(cuDeviceGetHostAtomicCapabilities(capabilities, operations, 3, 0));
    REQUIRE(host_native ? capabilities[0] && capabilities[1]
                        : !capabilities[0] && !capabilities[1] && !capabilities[2]);
    unsigned runtime_capabilities[3] = {99, 99, 99};
    cudaAtomicOperation runtime_operations[] = {cudaAtomicOperationIntegerAdd, cudaAtomicOperationCAS,
                                                cudaAtomicOperationFloatAdd};
    CHECK(cudaDeviceGetHostAtomicCapabilities(runtime_capabilities, runtime_operations, 3, 1));
    REQUIRE(host_native1 ? runtime_capabilities[0] != 0 : !runtime_capabilities[0] && !runtime_capabilities[2]);
    capabilities[0] = capabilities[1] = capabilities[2] = 99;
    DRV(cuDeviceGetP2PAtomicCapabilities(capabilities, operations, 3, 0, 1));
    REQUIRE(p2p_native ? capabilities[0] && capabilities[1]
                       : !capabilities[0] && !capabilities[1] && !capabilities[2]);
    CHECK(cudaDeviceGetP2PAtomicCapabilities(runtime_capabilities, runtime_operations, 3, 1, 0));
    DRV_EXPECT(cuDeviceGetP2PAtomicCapabilities(capabilities, operations, 3, 1, 1), CUDA_ERROR_INVALID_DEVICE);
    DRV_EXPECT(cuDeviceGetP2PAtomicCapabilities(capabilities, operations, 3, 0, 9), CUDA_ERROR_INVALID_DEVICE);
    DRV_EXPECT(cuDeviceGetHostAtomicCapabilities(capabilities, operations, 3, 9), CUDA_ERROR_INVALID_DEVICE);
    DRV_EXPECT(cuDeviceGetHostAtomicCapabilities(NULL, operations, 3, 0), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuDeviceGetHostAtomicCapabilities(capabilities, NULL, 3, 0), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuDeviceGetHostAtomicCapabilities(capabilities, operations, 0, 0), CUDA_ERROR_INVALID_VALUE);
    // A LUID is Windows's: a Linux GPU's driver says not supported, after checking its arguments.
    char luid[8];
    unsigned node_mask = 0;
    DRV_EXPECT(cuDeviceGetLuid(luid, &node_mask, 0), CUDA_ERROR_NOT_SUPPORTED);
    DRV_EXPECT(cuDeviceGetLuid(NULL, &node_mask, 0), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuDeviceGetLuid(luid, NULL, 0), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuDeviceGetLuid(luid, &node_mask, 9), CUDA_ERROR_INVALID_DEVICE);
    CUatomicOperation bad[] = {CU_ATOMIC_OPERATION_AND, CU_ATOMIC_OPERATION_MAX};
    capabilities[0] = 99;
    DRV_EXPECT(cuDeviceGetP2PAtomicCapabilities(capabilities, bad, 2, 0, 1), CUDA_ERROR_INVALID_VALUE);
    REQUIRE(capabilities[0] == 99);  // nothing written when an operation is bad
    EXPECT_AND_CLEAR(cudaDeviceGetP2PAtomicCapabilities(runtime_capabilities, runtime_operations, 3, 0, 0),
                     cudaErrorInvalidDevice);

    // GPUDirect RDMA flushes: what the device's flush options say (the
    // sim's GPUs have no GPUDirect RDMA: not supported).
    int options = -1;
    DRV(cuDeviceGetAttribute(&options, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS, 0));
    const bool flushes = options & CU_FLUSH_GPU_DIRECT_RDMA_WRITES_OPTION_HOST;
    DRV_EXPECT(cuFlushGPUDirectRDMAWrites(CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX,
                                          CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER),
               flushes ? CUDA_SUCCESS : CUDA_ERROR_NOT_SUPPORTED);
    EXPECT_AND_CLEAR(cudaDeviceFlushGPUDirectRDMAWrites(cudaFlushGPUDirectRDMAWritesTargetCurrentDevice,
                                                        cudaFlushGPUDirectRDMAWritesToAllDevices),
                     flushes ? cudaSuccess : cudaErrorNotSupported);
    DRV_EXPECT(cuFlushGPUDirectRDMAWrites(CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX,
                                          (CUflushGPUDirectRDMAWritesScope)5), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuFlushGPUDirectRDMAWrites((CUflushGPUDirectRDMAWritesTarget)3,
                                          CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(in_new_thread([] {
                   return cuFlushGPUDirectRDMAWrites(CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX,
                                                     CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER);
               }), CUDA_ERROR_INVALID_CONTEXT);

    // Notifications: one registry for both APIs.
    CUasyncCallbackHandle handle = NULL;
    DRV(cuDeviceRegisterAsyncNotification(0, on_notification, NULL, &handle));
    REQUIRE(handle != NULL);
    DRV_EXPECT(cuDeviceUnregisterAsyncNotification(1, handle), CUDA_ERROR_INVALID_VALUE);  // not device 1's
    CHECK(cudaDeviceUnregisterAsyncNotification(0, (cudaAsyncCallbackHandle_t)handle));
    DRV_EXPECT(cuDeviceUnregisterAsyncNotification(0, handle), CUDA_ERROR_INVALID_VALUE);  // gone
    DRV_EXPECT(cuDeviceRegisterAsyncNotification(9, on_notification, NULL, &handle), CUDA_ERROR_INVALID_DEVICE);
    DRV_EXPECT(cuDeviceRegisterAsyncNotification(0, NULL, NULL, &handle), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuDeviceRegisterAsyncNotification(0, on_notification, NULL, NULL), CUDA_ERROR_INVALID_VALUE);

    // Valid devices: a thread with no device yet starts on the first listed.
    int order[] = {1, 0}, chosen = -1;
    cudaError_t set = cudaErrorUnknown;
    std::thread([&] {
        set = cudaSetValidDevices(order, 2);
        cudaGetDevice(&chosen);
    }).join();
    CHECK(set);
    REQUIRE(chosen == 1);
    CHECK(cudaSetValidDevices(order, 1));
    CHECK(cudaGetDevice(&chosen));
    REQUIRE(chosen == 0);  // this thread has a current context already
    CHECK(cudaSetValidDevices(NULL, 0));
    int missing[] = {7};
    EXPECT_AND_CLEAR(cudaSetValidDevices(missing, 1), cudaErrorInvalidDevice);
    EXPECT_AND_CLEAR(cudaSetValidDevices(order, 3), cudaErrorInvalidValue);  // more than there are
    EXPECT_AND_CLEAR(cudaSetValidDevices(NULL, 1), cudaErrorInvalidValue);
    printf("ok devices\n");
}

static void pools_by_location(CUcontext *primary)
{
    DRV(cuCtxSetCurrent(primary[0]));
    CUmemLocation loc0 = on_device(0), loc1 = on_device(1);
    CUmemoryPool by_location = NULL, by_device = NULL;
    DRV(cuMemGetDefaultMemPool(&by_location, &loc1, CU_MEM_ALLOCATION_TYPE_PINNED));
    DRV(cuDeviceGetDefaultMemPool(&by_device, 1));
    REQUIRE(by_location != NULL && by_location == by_device);
    DRV(cuMemGetMemPool(&by_location, &loc0, CU_MEM_ALLOCATION_TYPE_PINNED));
    DRV(cuDeviceGetMemPool(&by_device, 0));
    REQUIRE(by_location == by_device);

    CUmemPoolProps props = {};
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location = loc0;
    CUmemoryPool pool, default0;
    DRV(cuMemPoolCreate(&pool, &props));
    DRV(cuDeviceGetDefaultMemPool(&default0, 0));
    DRV(cuMemSetMemPool(&loc0, CU_MEM_ALLOCATION_TYPE_PINNED, pool));
    DRV(cuDeviceGetMemPool(&by_device, 0));
    REQUIRE(by_device == pool);
    cudaMemLocation runtime_loc = {};
    runtime_loc.type = cudaMemLocationTypeDevice;
    runtime_loc.id = 0;
    cudaMemPool_t runtime_pool = NULL;
    CHECK(cudaMemGetMemPool(&runtime_pool, &runtime_loc, cudaMemAllocationTypePinned));
    REQUIRE(runtime_pool == pool);
    CUdeviceptr p = 0;
    DRV(cuMemAllocAsync(&p, N, 0));  // from the location's current pool
    cuuint64_t used = 0;
    DRV(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
    REQUIRE(used >= N);
    DRV(cuMemFreeAsync(p, 0));
    DRV(cuCtxSynchronize());

    DRV_EXPECT(cuMemSetMemPool(&loc1, CU_MEM_ALLOCATION_TYPE_PINNED, pool), CUDA_ERROR_INVALID_VALUE);  // device 0's
    DRV_EXPECT(cuMemGetMemPool(&by_location, &loc0, CU_MEM_ALLOCATION_TYPE_MANAGED), CUDA_ERROR_NOT_SUPPORTED);
    DRV_EXPECT(cuMemGetDefaultMemPool(&by_location, &loc0, (CUmemAllocationType)7), CUDA_ERROR_INVALID_VALUE);
    CUmemLocation host = {};
    host.type = CU_MEM_LOCATION_TYPE_HOST;
    DRV_EXPECT(cuMemGetDefaultMemPool(&by_location, &host, CU_MEM_ALLOCATION_TYPE_PINNED), CUDA_ERROR_NOT_SUPPORTED);
    DRV_EXPECT(cuMemGetDefaultMemPool(NULL, &loc0, CU_MEM_ALLOCATION_TYPE_PINNED), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuMemGetMemPool(&by_location, NULL, CU_MEM_ALLOCATION_TYPE_PINNED), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuMemSetMemPool(&loc0, CU_MEM_ALLOCATION_TYPE_PINNED, (CUmemoryPool)0x1234), CUDA_ERROR_INVALID_VALUE);
    DRV(cuMemSetMemPool(&loc0, CU_MEM_ALLOCATION_TYPE_PINNED, default0));
    DRV(cuMemGetMemPool(&by_location, &loc0, CU_MEM_ALLOCATION_TYPE_PINNED));
    REQUIRE(by_location == default0);
    DRV(cuMemPoolDestroy(pool));
    printf("ok pools_by_location\n");
}

static void managed_batches(CUcontext *primary)
{
    DRV(cuCtxSetCurrent(primary[0]));
    CUdeviceptr m = 0, plain = 0;
    DRV(cuMemAllocManaged(&m, N, CU_MEM_ATTACH_GLOBAL));
    DRV(cuMemAlloc(&plain, N));
    CUstream stream;
    DRV(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    CUdeviceptr halves[] = {m, m + N / 2};
    size_t sizes[] = {N / 2, N / 2};
    CUmemLocation host = {};
    host.type = CU_MEM_LOCATION_TYPE_HOST;
    CUmemLocation to[] = {on_device(1), host};
    size_t first[] = {0, 1};
    DRV(cuMemPrefetchBatchAsync(halves, sizes, 2, to, first, 2, 0, stream));
    REQUIRE(range_int(CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, m, N / 2) == 1);
    REQUIRE(range_int(CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, m + N / 2, N / 2) == CU_DEVICE_CPU);
    size_t only_first[] = {0};
    DRV(cuMemDiscardAndPrefetchBatchAsync(halves, sizes, 2, to, only_first, 1, 0, stream));  // both to device 1
    REQUIRE(range_int(CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, m, N) == 1);
    DRV(cuMemDiscardBatchAsync(halves, sizes, 2, 0, stream));
    DRV(cuStreamSynchronize(stream));

    DRV_EXPECT(cuMemPrefetchBatchAsync(halves, sizes, 2, to, first, 2, 1, stream), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuMemPrefetchBatchAsync(halves, sizes, 0, to, first, 2, 0, stream), CUDA_ERROR_INVALID_VALUE);
    size_t not_from_zero[] = {1, 0};
    DRV_EXPECT(cuMemPrefetchBatchAsync(halves, sizes, 2, to, not_from_zero, 2, 0, stream), CUDA_ERROR_INVALID_VALUE);
    CUmemLocation nowhere[] = {on_device(9)};
    DRV_EXPECT(cuMemPrefetchBatchAsync(halves, sizes, 2, nowhere, only_first, 1, 0, stream),
               CUDA_ERROR_INVALID_DEVICE);
    CUdeviceptr not_managed[] = {plain, m};
    DRV_EXPECT(cuMemDiscardBatchAsync(not_managed, sizes, 2, 0, stream), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuMemDiscardBatchAsync(NULL, sizes, 2, 0, stream), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuMemDiscardAndPrefetchBatchAsync(halves, sizes, 2, to, first, 2, 0, (CUstream)0x1234),
               CUDA_ERROR_INVALID_HANDLE);
    DRV_EXPECT(in_new_thread([&] { return cuMemDiscardBatchAsync(halves, sizes, 2, 0, 0); }),
               CUDA_ERROR_INVALID_CONTEXT);
    DRV(cuStreamDestroy(stream));
    DRV(cuMemFree(plain));
    DRV(cuMemFree(m));
    printf("ok managed_batches\n");
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s KERNELS.fatbin PARITY_KERNELS.fatbin\n", argv[0]);
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
    stream_attributes(primary);
    functions(primary, argv[2]);
    library_managed(primary, argv[2]);
    contexts(primary);
    context_events(primary, argv[2]);
    devices(primary);
    pools_by_location(primary);
    managed_batches(primary);
    DRV(cuDevicePrimaryCtxRelease(0));
    DRV(cuDevicePrimaryCtxRelease(1));
    printf("PASSED driver_parity\n");
    return 0;
}
