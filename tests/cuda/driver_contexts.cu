// The CUDA driver API's devices, contexts, streams, events, pointer
// attributes, function attributes and occupancy, in a program that uses the
// runtime too (nvcc -cudart shared, linked to libcuda.so.1): one client
// behind both APIs.  Needs two GPUs: a sim server's (--devices 2, with the
// sim kernels of tests/cuda/driver_context_kernels.py), or GPU servers'.
// Prints "ok NAME" per section; a failure prints "FAILED line N: ..." and
// exits 1.
#include <cuda.h>
#include <cuda_runtime.h>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "driver_check.h"



__global__ void addValue(int *data, int value, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        data[i] += value;
}

static const int N = 256;

static int first_value(const int *device_data)
{
    int value = -1;
    CHECK(cudaMemcpy(&value, device_data, sizeof value, cudaMemcpyDeviceToHost));
    return value;
}

static void before_init()
{
    CUcontext ctx;
    CUdevice dev;
    int count;
    DRV_EXPECT(cuCtxGetCurrent(&ctx), CUDA_ERROR_NOT_INITIALIZED);
    DRV_EXPECT(cuDeviceGetCount(&count), CUDA_ERROR_NOT_INITIALIZED);
    DRV_EXPECT(cuDeviceGet(&dev, 0), CUDA_ERROR_NOT_INITIALIZED);
    DRV_EXPECT(cuCtxCreate_v4(&ctx, NULL, 0, 0), CUDA_ERROR_NOT_INITIALIZED);
    DRV(cuInit(0));
    printf("ok before_init\n");
}

static void no_context()
{
    CUcontext ctx = (CUcontext)1;
    DRV(cuCtxGetCurrent(&ctx));
    REQUIRE(ctx == NULL);
    CUdevice dev;
    CUstream stream;
    CUevent event;
    unsigned int flags;
    DRV_EXPECT(cuCtxGetDevice(&dev), CUDA_ERROR_INVALID_CONTEXT);
    DRV_EXPECT(cuCtxSynchronize(), CUDA_ERROR_INVALID_CONTEXT);
    DRV_EXPECT(cuCtxGetFlags(&flags), CUDA_ERROR_INVALID_CONTEXT);
    DRV_EXPECT(cuCtxPopCurrent(&ctx), CUDA_ERROR_INVALID_CONTEXT);
    DRV_EXPECT(cuStreamCreate(&stream, CU_STREAM_DEFAULT), CUDA_ERROR_INVALID_CONTEXT);
    DRV_EXPECT(cuEventCreate(&event, CU_EVENT_DEFAULT), CUDA_ERROR_INVALID_CONTEXT);
    DRV_EXPECT(cuStreamSynchronize(0), CUDA_ERROR_INVALID_CONTEXT);
    DRV_EXPECT(cuCtxGetCurrent(NULL), CUDA_ERROR_INVALID_VALUE);
    printf("ok no_context\n");
}

static void devices()
{
    int count = 0, runtime_count = 0;
    DRV(cuDeviceGetCount(&count));
    CHECK(cudaGetDeviceCount(&runtime_count));
    REQUIRE(count == 2 && count == runtime_count);
    int compared = 0, driver_only = 0;
    for (int ordinal = 0; ordinal < count; ordinal++) {
        CUdevice dev;
        DRV(cuDeviceGet(&dev, ordinal));
        REQUIRE(dev == ordinal);
        cudaDeviceProp prop;
        CHECK(cudaGetDeviceProperties(&prop, ordinal));
        char name[256];
        DRV(cuDeviceGetName(name, sizeof name, dev));
        REQUIRE(strcmp(name, prop.name) == 0);
        char short_name[4];
        DRV(cuDeviceGetName(short_name, sizeof short_name, dev));
        REQUIRE(strlen(short_name) == 3 && strncmp(short_name, prop.name, 3) == 0);
        size_t total = 0;
        DRV(cuDeviceTotalMem(&total, dev));
        REQUIRE(total == prop.totalGlobalMem && total > 0);
        int major = -1, minor = -1;
        DRV(cuDeviceComputeCapability(&major, &minor, dev));
        REQUIRE(major == prop.major && minor == prop.minor);
        CUuuid uuid;
        DRV(cuDeviceGetUuid(&uuid, dev));
        REQUIRE(memcmp(uuid.bytes, prop.uuid.bytes, 16) == 0);
        CUdevprop old_prop;
        DRV(cuDeviceGetProperties(&old_prop, dev));
        REQUIRE(old_prop.maxThreadsPerBlock == prop.maxThreadsPerBlock && old_prop.SIMDWidth == prop.warpSize);
        REQUIRE(old_prop.maxGridSize[0] == prop.maxGridSize[0] && old_prop.maxThreadsDim[2] == prop.maxThreadsDim[2]);
        REQUIRE(old_prop.sharedMemPerBlock == (int)prop.sharedMemPerBlock);
        // Every attribute: the runtime's answer where it has one.
        for (int attr = 1; attr < CU_DEVICE_ATTRIBUTE_MAX; attr++) {
            int driver_value = -1, runtime_value = -1;
            CUresult r = cuDeviceGetAttribute(&driver_value, (CUdevice_attribute)attr, dev);
            cudaError_t e = cudaDeviceGetAttribute(&runtime_value, (cudaDeviceAttr)attr, ordinal);
            if (e == cudaSuccess) {
                if (r != CUDA_SUCCESS || driver_value != runtime_value) {
                    printf("FAILED attribute %d: driver %d (%d), runtime %d\n", attr, driver_value, r, runtime_value);
                    exit(1);
                }
                compared++;
            } else {
                cudaGetLastError();
                driver_only += r == CUDA_SUCCESS;
            }
        }
        char bus_id[32], runtime_bus_id[32];
        DRV(cuDeviceGetPCIBusId(bus_id, sizeof bus_id, dev));
        CHECK(cudaDeviceGetPCIBusId(runtime_bus_id, sizeof runtime_bus_id, ordinal));
        REQUIRE(strcmp(bus_id, runtime_bus_id) == 0);
        // The device at that bus id: this one, unless two servers serve one
        // GPU (then both have its bus id, and the first is found).
        CUdevice found = -1;
        char found_bus_id[32];
        DRV(cuDeviceGetByPCIBusId(&found, bus_id));
        DRV(cuDeviceGetPCIBusId(found_bus_id, sizeof found_bus_id, found));
        REQUIRE(found <= dev && strcmp(found_bus_id, bus_id) == 0);
    }
    REQUIRE(compared > 100);
    printf("attributes compared with the runtime's: %d, driver-only answered: %d\n", compared, driver_only);
    int value;
    CUdevice dev;
    char name[8];
    DRV_EXPECT(cuDeviceGet(&dev, count), CUDA_ERROR_INVALID_DEVICE);
    DRV_EXPECT(cuDeviceGet(NULL, 0), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuDeviceGetAttribute(&value, (CUdevice_attribute)9999, 0), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_WARP_SIZE, count), CUDA_ERROR_INVALID_DEVICE);
    DRV_EXPECT(cuDeviceGetName(NULL, 8, 0), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuDeviceGetName(name, 0, 0), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuDeviceGetByPCIBusId(&dev, "ffff:ff:ff.0"), CUDA_ERROR_INVALID_DEVICE);
    printf("ok devices\n");
}

static void primary_contexts(CUcontext *primary)
{
    unsigned int flags = 99;
    int active = 99;
    DRV(cuDevicePrimaryCtxGetState(1, &flags, &active));
    REQUIRE(active == 0 && flags == 0);
    for (int d = 0; d < 2; d++)
        DRV(cuDevicePrimaryCtxRetain(&primary[d], d));
    REQUIRE(primary[0] != NULL && primary[1] != NULL && primary[0] != primary[1]);
    CUcontext again;
    DRV(cuDevicePrimaryCtxRetain(&again, 1));
    REQUIRE(again == primary[1]);
    DRV(cuDevicePrimaryCtxGetState(1, &flags, &active));
    REQUIRE(active == 1);
    // Retained is not current.
    CUcontext current = (CUcontext)1;
    DRV(cuCtxGetCurrent(&current));
    REQUIRE(current == NULL);
    DRV(cuDevicePrimaryCtxRelease(1));
    DRV(cuDevicePrimaryCtxSetFlags(1, CU_CTX_SCHED_YIELD));
    DRV(cuDevicePrimaryCtxGetState(1, &flags, &active));
    REQUIRE(flags == CU_CTX_SCHED_YIELD);
    CHECK(cudaSetDevice(1));
    unsigned int runtime_flags = 0;
    CHECK(cudaGetDeviceFlags(&runtime_flags));
    REQUIRE((runtime_flags & cudaDeviceScheduleMask) == cudaDeviceScheduleYield);
    DRV_EXPECT(cuDevicePrimaryCtxSetFlags(1, 0x3), CUDA_ERROR_INVALID_VALUE);     // two schedules at once
    DRV_EXPECT(cuDevicePrimaryCtxSetFlags(1, 0x100), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuDevicePrimaryCtxRetain(&again, 7), CUDA_ERROR_INVALID_DEVICE);
    DRV_EXPECT(cuDevicePrimaryCtxRetain(NULL, 0), CUDA_ERROR_INVALID_VALUE);
    printf("ok primary_contexts\n");
}

// cudaSetDevice(d) makes the primary context of d current; cuCtxSetCurrent
// of a primary context makes its device the runtime's.
static void primary_is_runtime_device(const CUcontext *primary)
{
    CHECK(cudaSetDevice(1));  // (also done above)
    CUcontext current;
    DRV(cuCtxGetCurrent(&current));
    REQUIRE(current == primary[1]);
    CUdevice dev = -1;
    DRV(cuCtxGetDevice(&dev));
    REQUIRE(dev == 1);
    DRV(cuCtxSetCurrent(primary[0]));
    int runtime_device = -1;
    CHECK(cudaGetDevice(&runtime_device));
    REQUIRE(runtime_device == 0);
    CHECK(cudaSetDevice(1));
    DRV(cuCtxGetCurrent(&current));
    REQUIRE(current == primary[1]);
    DRV(cuCtxSetCurrent(primary[0]));
    unsigned int version = 0;
    DRV(cuCtxGetApiVersion(NULL, &version));
    REQUIRE(version >= 3020);
    unsigned long long id0 = 0, id1 = 0, id0_again = 0;
    DRV(cuCtxGetId(primary[0], &id0));
    DRV(cuCtxGetId(primary[1], &id1));
    DRV(cuCtxGetId(NULL, &id0_again));
    REQUIRE(id0 != id1 && id0 == id0_again);
    int least = 1, greatest = 1, runtime_least = 2, runtime_greatest = 2;
    DRV(cuCtxGetStreamPriorityRange(&least, &greatest));
    CHECK(cudaDeviceGetStreamPriorityRange(&runtime_least, &runtime_greatest));
    REQUIRE(least == runtime_least && greatest == runtime_greatest);
    size_t stack = 0;
    DRV(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 4096));
    DRV(cuCtxGetLimit(&stack, CU_LIMIT_STACK_SIZE));
    size_t runtime_stack = 0;
    CHECK(cudaDeviceGetLimit(&runtime_stack, cudaLimitStackSize));
    REQUIRE(stack == 4096 && runtime_stack == 4096);
    DRV_EXPECT(cuCtxGetLimit(&stack, CU_LIMIT_MAX), CUDA_ERROR_UNSUPPORTED_LIMIT);
    printf("ok primary_is_runtime_device\n");
}

// Push/pop across the two GPUs, memory and events made in each context.
static void push_pop_two_devices(const CUcontext *primary)
{
    DRV(cuCtxSetCurrent(primary[0]));
    int *on0 = NULL, *on1 = NULL;
    CHECK(cudaMalloc(&on0, N * sizeof(int)));
    CUevent event0, event1;
    DRV(cuEventCreate(&event0, CU_EVENT_DEFAULT));
    DRV(cuCtxPushCurrent(primary[1]));
    int runtime_device = -1;
    CHECK(cudaGetDevice(&runtime_device));
    REQUIRE(runtime_device == 1);
    CHECK(cudaMalloc(&on1, N * sizeof(int)));
    DRV(cuEventCreate(&event1, CU_EVENT_DEFAULT));
    CHECK(cudaMemset(on1, 0, N * sizeof(int)));
    addValue<<<1, N>>>(on1, 7, N);
    DRV(cuEventRecord(event1, 0));  // the current context's (GPU1's) NULL stream
    DRV(cuEventSynchronize(event1));
    REQUIRE(first_value(on1) == 7);
    CUcontext popped = NULL;
    DRV(cuCtxPopCurrent(&popped));
    REQUIRE(popped == primary[1]);
    CHECK(cudaGetDevice(&runtime_device));
    REQUIRE(runtime_device == 0);
    CHECK(cudaMemset(on0, 0, N * sizeof(int)));
    addValue<<<1, N>>>(on0, 3, N);
    DRV(cuEventRecord(event0, 0));
    DRV(cuEventSynchronize(event0));
    REQUIRE(first_value(on0) == 3);
    // An event of GPU0 cannot be recorded in GPU1's stream.
    CUstream stream1;
    DRV(cuCtxPushCurrent(primary[1]));
    DRV(cuStreamCreate(&stream1, CU_STREAM_NON_BLOCKING));
    DRV_EXPECT(cuEventRecord(event0, stream1), CUDA_ERROR_INVALID_HANDLE);
    DRV(cuStreamDestroy(stream1));
    DRV(cuCtxPopCurrent(NULL));
    // Each allocation belongs to its device's primary context.
    CUcontext owner = NULL;
    int ordinal = -1;
    DRV(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, (CUdeviceptr)on1));
    DRV(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, (CUdeviceptr)on1));
    REQUIRE(owner == primary[1] && ordinal == 1);
    DRV(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, (CUdeviceptr)on0));
    REQUIRE(owner == primary[0]);
    DRV(cuEventDestroy(event0));
    DRV(cuEventDestroy(event1));
    DRV_EXPECT(cuEventDestroy(event1), CUDA_ERROR_INVALID_HANDLE);
    DRV_EXPECT(cuEventQuery(event0), CUDA_ERROR_INVALID_HANDLE);
    CHECK(cudaFree(on0));
    CHECK(cudaSetDevice(1));
    CHECK(cudaFree(on1));
    DRV(cuCtxSetCurrent(primary[0]));
    DRV_EXPECT(cuCtxPushCurrent(NULL), CUDA_ERROR_INVALID_CONTEXT);
    DRV_EXPECT(cuCtxSetCurrent((CUcontext)0x1234), CUDA_ERROR_INVALID_CONTEXT);
    printf("ok push_pop_two_devices\n");
}

static std::atomic<int> thread_step{0};

static void created_context(const CUcontext *primary)
{
    DRV(cuCtxSetCurrent(primary[0]));
    CUcontext created = NULL;
    DRV(cuCtxCreate_v4(&created, NULL, CU_CTX_SCHED_BLOCKING_SYNC, 1));
    REQUIRE(created != NULL && created != primary[1] && created != primary[0]);
    CUcontext current = NULL;
    DRV(cuCtxGetCurrent(&current));
    REQUIRE(current == created);
    CUdevice dev = -1;
    DRV(cuCtxGetDevice(&dev));
    REQUIRE(dev == 1);
    int runtime_device = -1;
    CHECK(cudaGetDevice(&runtime_device));
    REQUIRE(runtime_device == 1);
    unsigned int flags = 0;
    DRV(cuCtxGetFlags(&flags));
    REQUIRE(flags == CU_CTX_SCHED_BLOCKING_SYNC);
    DRV(cuCtxSetFlags(CU_CTX_SCHED_SPIN));
    DRV(cuCtxGetFlags(&flags));
    REQUIRE(flags == CU_CTX_SCHED_SPIN);
    unsigned long long created_id = 0, primary_id = 0;
    DRV(cuCtxGetId(created, &created_id));
    DRV(cuCtxGetId(primary[1], &primary_id));
    REQUIRE(created_id != primary_id);
    // A stream the driver makes here is the created context's; a runtime
    // stream of the same device is the primary context's.
    CUstream owned;
    cudaStream_t runtime_stream;
    DRV(cuStreamCreate(&owned, CU_STREAM_DEFAULT));
    CHECK(cudaStreamCreate(&runtime_stream));
    CUcontext stream_ctx = NULL;
    DRV(cuStreamGetCtx(owned, &stream_ctx));
    REQUIRE(stream_ctx == created);
    DRV(cuStreamGetCtx((CUstream)runtime_stream, &stream_ctx));
    REQUIRE(stream_ctx == primary[1]);
    DRV(cuStreamGetCtx(CU_STREAM_LEGACY, &stream_ctx));
    REQUIRE(stream_ctx == created);
    CUevent owned_event;
    DRV(cuEventCreate(&owned_event, CU_EVENT_DISABLE_TIMING));
    DRV(cuEventRecord(owned_event, owned));
    DRV(cuCtxSynchronize());
    DRV(cuEventQuery(owned_event));
    // The context stack: push the primary of GPU0 over it, pop back to it.
    DRV(cuCtxPushCurrent(primary[0]));
    DRV(cuCtxGetDevice(&dev));
    REQUIRE(dev == 0);
    DRV(cuCtxPopCurrent(&current));
    REQUIRE(current == primary[0]);
    DRV(cuCtxGetCurrent(&current));
    REQUIRE(current == created);
    // Destroyed: popped, its stream and event gone, the handle invalid.
    DRV(cuCtxDestroy(created));
    DRV(cuCtxGetCurrent(&current));
    REQUIRE(current == primary[0]);
    DRV_EXPECT(cuStreamQuery(owned), CUDA_ERROR_INVALID_HANDLE);
    DRV_EXPECT(cuEventQuery(owned_event), CUDA_ERROR_INVALID_HANDLE);
    DRV(cuStreamQuery((CUstream)runtime_stream));  // the runtime's stream stays
    CHECK(cudaStreamDestroy(runtime_stream));
    unsigned int version;
    DRV_EXPECT(cuCtxPushCurrent(created), CUDA_ERROR_INVALID_CONTEXT);
    DRV_EXPECT(cuCtxGetApiVersion(created, &version), CUDA_ERROR_INVALID_CONTEXT);
    DRV_EXPECT(cuCtxDestroy(created), CUDA_ERROR_INVALID_CONTEXT);
    DRV_EXPECT(cuCtxDestroy(primary[0]), CUDA_ERROR_INVALID_CONTEXT);  // primary contexts are released
    DRV_EXPECT(cuCtxCreate_v4(&created, NULL, 0x3, 0), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuCtxCreate_v4(&created, NULL, 0, 5), CUDA_ERROR_INVALID_DEVICE);
    DRV_EXPECT(cuCtxCreate_v4(NULL, NULL, 0, 0), CUDA_ERROR_INVALID_VALUE);
    CUexecAffinityParam affinity;
    affinity.type = CU_EXEC_AFFINITY_TYPE_SM_COUNT;
    affinity.param.smCount.val = 1;
    CUctxCreateParams params = {&affinity, 1, NULL};
    DRV_EXPECT(cuCtxCreate_v4(&created, &params, 0, 0), CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY);

    // A context destroyed while current in another thread.
    CUcontext shared;
    DRV(cuCtxCreate_v4(&shared, NULL, 0, 0));
    CUresult seen = CUDA_SUCCESS;
    std::thread other([&] {
        cuCtxSetCurrent(shared);
        thread_step = 1;
        for (int i = 0; i < 1000 && thread_step != 2; i++)
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        CUdevice d;
        seen = cuCtxGetDevice(&d);
    });
    for (int i = 0; i < 1000 && thread_step != 1; i++)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    DRV(cuCtxDestroy(shared));
    thread_step = 2;
    other.join();
    REQUIRE(seen == CUDA_ERROR_CONTEXT_IS_DESTROYED);
    DRV(cuCtxGetCurrent(&current));
    REQUIRE(current == primary[0]);
    printf("ok created_context\n");
}

static void record_value(void *arg)
{
    // Runs in stream order: the copy into pinned memory before it has landed.
    int *pinned = (int *)arg;
    pinned[1] = pinned[0];
}

static void CUDA_CB callback(CUstream stream, CUresult status, void *arg)
{
    int *pinned = (int *)arg;
    pinned[2] = status == CUDA_SUCCESS ? pinned[0] + 100 : -1;
}

// A CUstream in runtime calls and a cudaStream_t in driver calls, in order.
static void streams_across_apis(const CUcontext *primary)
{
    DRV(cuCtxSetCurrent(primary[0]));
    int *data = NULL, *pinned = NULL;
    CHECK(cudaMalloc(&data, N * sizeof(int)));
    CHECK(cudaMallocHost(&pinned, 4 * sizeof(int)));
    memset(pinned, 0, 4 * sizeof(int));

    CUstream driver_stream;
    DRV(cuStreamCreateWithPriority(&driver_stream, CU_STREAM_NON_BLOCKING, -1));
    int priority = 0, runtime_priority = 1;
    unsigned int flags = 0;
    DRV(cuStreamGetPriority(driver_stream, &priority));
    CHECK(cudaStreamGetPriority((cudaStream_t)driver_stream, &runtime_priority));
    REQUIRE(priority == runtime_priority);
    DRV(cuStreamGetFlags(driver_stream, &flags));
    REQUIRE(flags == CU_STREAM_NON_BLOCKING);
    unsigned long long stream_id = 0, runtime_stream_id = 1;
    DRV(cuStreamGetId(driver_stream, &stream_id));
    CHECK(cudaStreamGetId((cudaStream_t)driver_stream, &runtime_stream_id));
    REQUIRE(stream_id == runtime_stream_id);
    cudaStream_t s = (cudaStream_t)driver_stream;
    CHECK(cudaMemsetAsync(data, 0, N * sizeof(int), s));
    addValue<<<1, N, 0, s>>>(data, 5, N);
    CHECK(cudaMemcpyAsync(pinned, data, sizeof(int), cudaMemcpyDeviceToHost, s));
    DRV(cuLaunchHostFunc(driver_stream, record_value, pinned));
    DRV(cuStreamAddCallback(driver_stream, callback, pinned, 0));
    DRV(cuStreamSynchronize(driver_stream));
    REQUIRE(pinned[0] == 5 && pinned[1] == 5 && pinned[2] == 105);
    DRV(cuStreamQuery(driver_stream));

    // The reverse: the runtime's stream and event in driver calls.
    cudaStream_t runtime_stream;
    cudaEvent_t runtime_event;
    CHECK(cudaStreamCreate(&runtime_stream));
    CHECK(cudaEventCreate(&runtime_event));
    addValue<<<1, N, 0, runtime_stream>>>(data, 10, N);
    DRV(cuEventRecord((CUevent)runtime_event, (CUstream)runtime_stream));
    DRV(cuStreamWaitEvent(driver_stream, (CUevent)runtime_event, CU_EVENT_WAIT_DEFAULT));
    CHECK(cudaMemcpyAsync(pinned + 3, data, sizeof(int), cudaMemcpyDeviceToHost, s));
    DRV(cuStreamSynchronize(driver_stream));
    if (pinned[3] != 15) {  // which fault: 5, the wait was not kept; 0 now and 15 later, the copy landed late
        int seen = pinned[3];
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        printf("pinned[3]: %d after cuStreamSynchronize, %d 200 ms later; data holds %d\n", seen, pinned[3],
               first_value(data));
    }
    REQUIRE(pinned[3] == 15);

    // Event timing, by both APIs, on the same events.
    CUevent start, stop;
    DRV(cuEventCreate(&start, CU_EVENT_DEFAULT));
    DRV(cuEventCreate(&stop, CU_EVENT_BLOCKING_SYNC));
    DRV(cuEventRecord(start, (CUstream)runtime_stream));
    addValue<<<1, N, 0, runtime_stream>>>(data, 1, N);
    DRV(cuEventRecordWithFlags(stop, (CUstream)runtime_stream, CU_EVENT_RECORD_DEFAULT));
    DRV(cuEventSynchronize(stop));
    DRV(cuEventQuery(stop));
    float ms = -1, runtime_ms = -2;
    DRV(cuEventElapsedTime_v2(&ms, start, stop));
    CHECK(cudaEventElapsedTime(&runtime_ms, (cudaEvent_t)start, (cudaEvent_t)stop));
    REQUIRE(ms >= 0 && ms == runtime_ms);
    printf("event interval: %.3f ms\n", ms);
    REQUIRE(first_value(data) == 16);

    DRV_EXPECT(cuStreamWaitEvent(driver_stream, (CUevent)runtime_event, 0x10), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuStreamCreate(NULL, 0), CUDA_ERROR_INVALID_VALUE);
    CUstream bad;
    DRV_EXPECT(cuStreamCreate(&bad, 0x40), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuEventCreate(&start, 0x40), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuStreamAddCallback(driver_stream, NULL, NULL, 0), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuEventElapsedTime_v2(NULL, start, stop), CUDA_ERROR_INVALID_VALUE);
    DRV(cuStreamDestroy(driver_stream));
    DRV_EXPECT(cuStreamDestroy(driver_stream), CUDA_ERROR_INVALID_HANDLE);
    DRV_EXPECT(cuStreamSynchronize(driver_stream), CUDA_ERROR_INVALID_HANDLE);
    DRV_EXPECT(cuStreamGetPriority(driver_stream, &priority), CUDA_ERROR_INVALID_HANDLE);
    CUcontext gone_stream_ctx;
    DRV_EXPECT(cuStreamGetCtx(driver_stream, &gone_stream_ctx), CUDA_ERROR_INVALID_HANDLE);
    DRV(cuEventDestroy(start));
    DRV(cuEventDestroy(stop));
    CHECK(cudaEventDestroy(runtime_event));
    CHECK(cudaStreamDestroy(runtime_stream));
    CHECK(cudaFree(data));
    CHECK(cudaFreeHost(pinned));
    printf("ok streams_across_apis\n");
}

static void pointer_attributes(const CUcontext *primary)
{
    CHECK(cudaSetDevice(1));
    char *device_memory = NULL, *host_memory = NULL, *managed = NULL;
    CHECK(cudaMalloc(&device_memory, 4096));
    CHECK(cudaMallocHost(&host_memory, 4096));
    CHECK(cudaMallocManaged(&managed, 1 << 20));
    CUdeviceptr p = (CUdeviceptr)(device_memory + 100);
    unsigned int type = 0;
    CUdeviceptr device_pointer = 0, start = 0;
    size_t size = 0;
    void *host_pointer = NULL;
    int ordinal = -1;
    CUcontext ctx = NULL;
    DRV(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p));
    REQUIRE(type == CU_MEMORYTYPE_DEVICE);
    DRV(cuPointerGetAttribute(&device_pointer, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, p));
    REQUIRE(device_pointer == p);
    DRV_EXPECT(cuPointerGetAttribute(&host_pointer, CU_POINTER_ATTRIBUTE_HOST_POINTER, p), CUDA_ERROR_INVALID_VALUE);
    DRV(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p));
    DRV(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p));
    REQUIRE(start == (CUdeviceptr)device_memory && size >= 4096);
    DRV(cuPointerGetAttribute(&ctx, CU_POINTER_ATTRIBUTE_CONTEXT, p));
    REQUIRE(ctx == primary[1]);
    unsigned char is_managed = 2, mapped = 2;
    DRV(cuPointerGetAttribute(&is_managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, p));
    DRV(cuPointerGetAttribute(&mapped, CU_POINTER_ATTRIBUTE_MAPPED, p));
    REQUIRE(is_managed == 0 && mapped == 1);

    DRV(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)host_memory));
    REQUIRE(type == CU_MEMORYTYPE_HOST);
    DRV(cuPointerGetAttribute(&host_pointer, CU_POINTER_ATTRIBUTE_HOST_POINTER, (CUdeviceptr)(host_memory + 8)));
    REQUIRE(host_pointer == host_memory + 8);

    DRV(cuPointerGetAttribute(&is_managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, (CUdeviceptr)managed));
    DRV(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, (CUdeviceptr)managed));
    REQUIRE(is_managed == 1 && ordinal == 1);

    // Several at once, and an unknown pointer (no error, zeros).
    CUpointer_attribute wanted[3] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                     CU_POINTER_ATTRIBUTE_CONTEXT};
    void *answers[3] = {&type, &ordinal, &ctx};
    DRV(cuPointerGetAttributes(3, wanted, answers, p));
    REQUIRE(type == CU_MEMORYTYPE_DEVICE && ordinal == 1 && ctx == primary[1]);
    int on_stack = 0;
    DRV(cuPointerGetAttributes(3, wanted, answers, (CUdeviceptr)&on_stack));
    REQUIRE(type == 0 && ctx == NULL);
    DRV_EXPECT(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)&on_stack),
               CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuPointerGetAttribute(NULL, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuPointerGetAttribute(&type, (CUpointer_attribute)999, p), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuPointerGetAttributes(3, wanted, NULL, p), CUDA_ERROR_INVALID_VALUE);

    // cuDevicePrimaryCtxReset is cudaDeviceReset: the device's memory is gone.
    DRV(cuDevicePrimaryCtxReset(1));
    DRV_EXPECT(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p), CUDA_ERROR_INVALID_VALUE);
    unsigned int flags;
    int active = 2;
    DRV(cuDevicePrimaryCtxGetState(1, &flags, &active));
    REQUIRE(active == 1);  // still retained
    CHECK(cudaFreeHost(host_memory));
    CHECK(cudaSetDevice(0));
    printf("ok pointer_attributes\n");
}

static size_t shared_for(int block_size) { return block_size * sizeof(int); }

static void functions_and_occupancy()
{
    CHECK(cudaSetDevice(0));
    CUfunction fn = NULL;
    CHECK(cudaGetFuncBySymbol((cudaFunction_t *)&fn, (const void *)addValue));
    const char *name = NULL;
    DRV(cuFuncGetName(&name, fn));
    REQUIRE(strcmp(name, "_Z8addValuePiii") == 0);
    cudaFuncAttributes attrs;
    CHECK(cudaFuncGetAttributes(&attrs, addValue));
    int value = -1;
    DRV(cuFuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, fn));
    REQUIRE(value == attrs.maxThreadsPerBlock);
    DRV(cuFuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_NUM_REGS, fn));
    REQUIRE(value == attrs.numRegs);
    DRV(cuFuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, fn));
    REQUIRE(value == attrs.preferredShmemCarveout);
    DRV(cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 2048));
    CHECK(cudaFuncGetAttributes(&attrs, addValue));
    DRV(cuFuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, fn));
    REQUIRE(attrs.maxDynamicSharedSizeBytes == 2048 && value == 2048);
    DRV(cuFuncSetCacheConfig(fn, CU_FUNC_CACHE_PREFER_SHARED));
    DRV_EXPECT(cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_NUM_REGS, 8), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuFuncSetCacheConfig(fn, (CUfunc_cache)9), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuFuncGetAttribute(&value, (CUfunction_attribute)99, fn), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuFuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_NUM_REGS, (CUfunction)0x1234), CUDA_ERROR_INVALID_HANDLE);
    DRV_EXPECT(cuFuncGetName(&name, NULL), CUDA_ERROR_INVALID_HANDLE);

    // Occupancy: the driver's answers are the runtime's.
    for (int block = 32; block <= 1024; block *= 2) {
        int blocks = -1, runtime_blocks = -2;
        DRV(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, fn, block, 512));
        CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&runtime_blocks, addValue, block, 512));
        REQUIRE(blocks == runtime_blocks && blocks > 0);
        size_t available = 0, runtime_available = 1;
        DRV(cuOccupancyAvailableDynamicSMemPerBlock(&available, fn, 2, block));
        CHECK(cudaOccupancyAvailableDynamicSMemPerBlock(&runtime_available, addValue, 2, block));
        REQUIRE(available == runtime_available);
    }
    int min_grid = 0, block_size = 0, runtime_min_grid = 1, runtime_block_size = 1;
    DRV(cuOccupancyMaxPotentialBlockSize(&min_grid, &block_size, fn, NULL, 0, 0));
    CHECK(cudaOccupancyMaxPotentialBlockSize(&runtime_min_grid, &runtime_block_size, addValue, 0, 0));
    REQUIRE(min_grid == runtime_min_grid && block_size == runtime_block_size && block_size > 0);
    printf("potential block size %d, min grid %d\n", block_size, min_grid);
    DRV(cuOccupancyMaxPotentialBlockSize(&min_grid, &block_size, fn, shared_for, 0, 256));
    CHECK(cudaOccupancyMaxPotentialBlockSizeVariableSMem(&runtime_min_grid, &runtime_block_size, addValue,
                                                         shared_for, 256));
    REQUIRE(min_grid == runtime_min_grid && block_size == runtime_block_size && block_size <= 256);
    int blocks;
    DRV_EXPECT(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&blocks, fn, 128, 0, 0x8), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuOccupancyMaxActiveBlocksPerMultiprocessor(NULL, fn, 128, 0), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, (CUfunction)0x99, 128, 0), CUDA_ERROR_INVALID_HANDLE);
    printf("ok functions_and_occupancy\n");
}

// A thread's first runtime call that needs a context makes the current
// device's primary context the thread's current one, as CUDA's runtime does:
// driver calls after it need no cuCtxSetCurrent.
static void runtime_binds_primary(CUcontext *primary)
{
    CUcontext seen = NULL;
    CUresult stream_made = CUDA_ERROR_UNKNOWN;
    cudaError_t allocated = cudaErrorUnknown;
    std::thread worker([&] {
        CUcontext before = (CUcontext)1;
        cuCtxGetCurrent(&before);
        if (before != NULL) return;  // a new thread starts with none
        void *p = NULL;
        allocated = cudaMalloc(&p, 256);
        cuCtxGetCurrent(&seen);
        CUstream stream;
        stream_made = cuStreamCreate(&stream, CU_STREAM_DEFAULT);
        if (stream_made == CUDA_SUCCESS) cuStreamDestroy(stream);
        cudaFree(p);
    });
    worker.join();
    CHECK(allocated);
    REQUIRE(seen == primary[0]);
    DRV(stream_made);
    printf("ok runtime_binds_primary\n");
}

// The deprecated usage counts: cuCtxAttach passes back the current
// context; cuCtxDetach of a created context's last use destroys it.
static void attach_detach(const CUcontext *primary)
{
    DRV(cuCtxSetCurrent(primary[0]));
    CUcontext attached = NULL, current = NULL;
    DRV_EXPECT(cuCtxAttach(&attached, 1), CUDA_ERROR_INVALID_VALUE);
    DRV(cuCtxAttach(&attached, 0));
    REQUIRE(attached == primary[0]);
    DRV(cuCtxDetach(attached));
    DRV_EXPECT(cuCtxDetach(primary[0]), CUDA_ERROR_INVALID_CONTEXT);  // a primary context not attached
    CUcontext created = NULL;
    DRV(cuCtxCreate_v4(&created, NULL, 0, 0));  // current now
    DRV(cuCtxAttach(&attached, 0));
    REQUIRE(attached == created);
    DRV(cuCtxDetach(created));  // the attachment's use
    DRV(cuCtxGetCurrent(&current));
    REQUIRE(current == created);
    DRV(cuCtxDetach(created));  // the creation's: destroyed, and off the stack
    DRV(cuCtxGetCurrent(&current));
    REQUIRE(current == primary[0]);
    DRV_EXPECT(cuCtxDetach(created), CUDA_ERROR_INVALID_CONTEXT);
    printf("ok attach_detach\n");
}

int main()
{
    before_init();
    no_context();
    devices();
    CUcontext primary[2];
    primary_contexts(primary);
    primary_is_runtime_device(primary);
    push_pop_two_devices(primary);
    created_context(primary);
    streams_across_apis(primary);
    pointer_attributes(primary);
    functions_and_occupancy();
    runtime_binds_primary(primary);
    attach_detach(primary);
    DRV(cuDevicePrimaryCtxRelease(0));
    DRV(cuDevicePrimaryCtxRelease(1));
    DRV_EXPECT(cuDevicePrimaryCtxRelease(1), CUDA_ERROR_INVALID_CONTEXT);
    printf("PASSED driver_contexts\n");
    return 0;
}
