// Memory pools and stream-ordered allocation: an ordinary CUDA program, one
// scenario per argument.  Each prints "ok <name>" when every check passed,
// "FAILED ..." otherwise.  Kernels: tests/cuda/runtime_kernels.py on the sim.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

#include "check.h"

__global__ void fillKernel(int *out, int value, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = value;
}
__global__ void addKernel(int *out, int value, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] += value;
}

static const int N = 4096;
static int host[N];

static uint64_t attr(cudaMemPool_t pool, cudaMemPoolAttr which) {
    uint64_t value = 0;
    CHECK(cudaMemPoolGetAttribute(pool, which, &value));
    return value;
}
static uint64_t reserved(cudaMemPool_t pool) { return attr(pool, cudaMemPoolAttrReservedMemCurrent); }
static uint64_t used(cudaMemPool_t pool) { return attr(pool, cudaMemPoolAttrUsedMemCurrent); }

static void set_threshold(cudaMemPool_t pool, uint64_t bytes) {
    CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &bytes));
}

static bool all_equal(const int *values, int n, int expected) {
    for (int i = 0; i < n; i++)
        if (values[i] != expected) return false;
    return true;
}

static cudaMemPool_t default_pool(int device = 0) {
    cudaMemPool_t pool;
    CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
    return pool;
}

// Allocate, use with kernels, free and allocate again in one stream: the
// block comes back at once; it is ordinary device memory meanwhile.
static void basic() {
    int supported = 0, handles = 7;
    CHECK(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, 0));
    CHECK(cudaDeviceGetAttribute(&handles, cudaDevAttrMemoryPoolSupportedHandleTypes, 0));
    // rcuda shares pools (tests/cuda/pool_ipc.cu) through its server's memory IPC: their handles
    // are POSIX file descriptors where cudaIpcGetMemHandle works (a sim server), none where it
    // does not (a GPU server: no memory IPC there yet), whatever the GPU's driver could do.
    int *probe;
    CHECK(cudaMalloc(&probe, 256));
    cudaIpcMemHandle_t ipc;
    const cudaError_t shares = cudaIpcGetMemHandle(&ipc, probe);
    cudaGetLastError();
    CHECK(cudaFree(probe));
    REQUIRE(shares == cudaSuccess || shares == cudaErrorNotSupported);
    REQUIRE(supported == 1 && handles == (shares == cudaSuccess ? (int)cudaMemHandleTypePosixFileDescriptor : 0));
    if (!handles) {  // and then no pool can be made to share
        cudaMemPoolProps props = {};
        props.allocType = cudaMemAllocationTypePinned;
        props.location.type = cudaMemLocationTypeDevice;
        props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
        cudaMemPool_t shared;
        EXPECT_AND_CLEAR(cudaMemPoolCreate(&shared, &props), cudaErrorNotSupported);
    }
    cudaMemPool_t pool = default_pool(), current;
    CHECK(cudaDeviceGetMemPool(&current, 0));
    REQUIRE(current == pool);

    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    int *a, *b;
    CHECK(cudaMallocAsync(&a, N * sizeof(int), s));
    fillKernel<<<N / 256, 256, 0, s>>>(a, 7, N);
    CHECK(cudaMemcpyAsync(host, a, N * sizeof(int), cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    REQUIRE(all_equal(host, N, 7));
    cudaPointerAttributes attributes;
    CHECK(cudaPointerGetAttributes(&attributes, a));
    REQUIRE(attributes.type == cudaMemoryTypeDevice && attributes.device == 0);
    CHECK(cudaMemset(a, 0, N * sizeof(int)));
    CHECK(cudaMemcpy(host, a, N * sizeof(int), cudaMemcpyDeviceToHost));
    REQUIRE(all_equal(host, N, 0));

    CHECK(cudaFreeAsync(a, s));
    CHECK(cudaMallocAsync(&b, N * sizeof(int), s));  // same stream: reused at once
    REQUIRE(b == a);
    REQUIRE(reserved(pool) == N * sizeof(int) && used(pool) == N * sizeof(int));
    fillKernel<<<N / 256, 256, 0, s>>>(b, 1, N);
    addKernel<<<N / 256, 256, 0, s>>>(b, 2, N);
    CHECK(cudaMemcpyAsync(host, b, N * sizeof(int), cudaMemcpyDeviceToHost, s));
    CHECK(cudaFreeAsync(b, s));
    CHECK(cudaStreamSynchronize(s));
    REQUIRE(all_equal(host, N, 3));
    REQUIRE(used(pool) == 0 && reserved(pool) == 0);  // threshold 0: released at the synchronisation
    printf("ok basic\n");
}

// Reserved and used bytes, their high watermarks, what may be set.
static void counters() {
    cudaMemPool_t pool = default_pool();
    REQUIRE(reserved(pool) == 0 && used(pool) == 0);
    set_threshold(pool, UINT64_MAX);
    int *a, *b;
    CHECK(cudaMallocAsync(&a, 1000, 0));
    CHECK(cudaMallocAsync(&b, 3000, 0));
    REQUIRE(reserved(pool) == 4000 && used(pool) == 4000);
    CHECK(cudaFreeAsync(a, 0));
    REQUIRE(reserved(pool) == 4000 && used(pool) == 3000);
    REQUIRE(attr(pool, cudaMemPoolAttrUsedMemHigh) == 4000 && attr(pool, cudaMemPoolAttrReservedMemHigh) == 4000);
    uint64_t zero = 0, five = 5;
    CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero));  // reset: to the current value
    REQUIRE(attr(pool, cudaMemPoolAttrUsedMemHigh) == 3000);
    EXPECT_AND_CLEAR(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &five), cudaErrorInvalidValue);
    EXPECT_AND_CLEAR(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &zero), cudaErrorInvalidValue);
    EXPECT_AND_CLEAR(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &zero),
                     cudaErrorInvalidValue);
    EXPECT_AND_CLEAR(cudaMemPoolGetAttribute(pool, (cudaMemPoolAttr)99, &five), cudaErrorInvalidValue);
    EXPECT_AND_CLEAR(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, nullptr), cudaErrorInvalidValue);
    int follow = 9, opportunistic = 9, internal = 9, off = 0;
    CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolReuseFollowEventDependencies, &follow));
    CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolReuseAllowOpportunistic, &opportunistic));
    CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolReuseAllowInternalDependencies, &internal));
    REQUIRE(follow == 1 && opportunistic == 1 && internal == 1);
    CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowInternalDependencies, &off));
    CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolReuseAllowInternalDependencies, &internal));
    REQUIRE(internal == 0);
    CHECK(cudaDeviceSynchronize());
    REQUIRE(reserved(pool) == 4000);  // below the threshold: kept
    printf("ok counters\n");
}

// Memory above the release threshold goes back to the server at a
// synchronisation; below it, the pool keeps it for any stream.
static void threshold() {
    cudaMemPool_t pool = default_pool();
    size_t free_before, free_now, total;
    cudaStream_t s1, s2;
    CHECK(cudaStreamCreate(&s1));
    CHECK(cudaStreamCreate(&s2));
    int *a, *b;
    CHECK(cudaMemGetInfo(&free_before, &total));
    CHECK(cudaMallocAsync(&a, 1 << 20, s1));
    CHECK(cudaFreeAsync(a, s1));
    CHECK(cudaMemGetInfo(&free_now, &total));
    REQUIRE(free_now <= free_before - (1 << 20) && reserved(pool) == 1 << 20);  // held by the pool (a GPU rounds up)
    CHECK(cudaStreamSynchronize(s1));
    CHECK(cudaMemGetInfo(&free_now, &total));
    REQUIRE(free_now == free_before && reserved(pool) == 0);  // threshold 0: released

    set_threshold(pool, 4 << 20);
    CHECK(cudaMallocAsync(&a, 1 << 20, s1));
    CHECK(cudaFreeAsync(a, s1));
    CHECK(cudaStreamSynchronize(s1));
    REQUIRE(reserved(pool) == 1 << 20);               // kept below the threshold
    CHECK(cudaMallocAsync(&b, 1 << 20, s2));          // its free is known complete: any stream
    REQUIRE(b == a);
    CHECK(cudaFreeAsync(b, s2));

    set_threshold(pool, 0);                            // lowered: the next synchronisation releases
    cudaEvent_t done;
    CHECK(cudaEventCreate(&done));
    CHECK(cudaEventRecord(done, s2));
    CHECK(cudaEventSynchronize(done));
    REQUIRE(reserved(pool) == 0);

    CHECK(cudaMallocAsync(&a, 1 << 20, s1));
    CHECK(cudaFreeAsync(a, s1));
    CHECK(cudaDeviceSynchronize());
    REQUIRE(reserved(pool) == 0);
    printf("ok threshold\n");
}

// Another stream gets a freed block only once it is ordered after the
// free: through an event, unless the pool says not to follow events.
static void cross_stream() {
    cudaMemPool_t pool = default_pool();
    set_threshold(pool, UINT64_MAX);
    cudaStream_t s1, s2;
    CHECK(cudaStreamCreate(&s1));
    CHECK(cudaStreamCreate(&s2));
    cudaEvent_t freed;
    CHECK(cudaEventCreate(&freed));
    int *a, *b, *c;
    CHECK(cudaMallocAsync(&a, N * sizeof(int), s1));
    fillKernel<<<N / 256, 256, 0, s1>>>(a, 5, N);
    CHECK(cudaFreeAsync(a, s1));
    CHECK(cudaMallocAsync(&b, N * sizeof(int), s2));  // no order between them: another block
    REQUIRE(b != a);
    CHECK(cudaEventRecord(freed, s1));
    CHECK(cudaStreamWaitEvent(s2, freed, 0));
    CHECK(cudaMallocAsync(&c, N * sizeof(int), s2));  // s2 now follows the free
    REQUIRE(c == a);
    addKernel<<<N / 256, 256, 0, s2>>>(c, 1, N);
    CHECK(cudaMemcpyAsync(host, c, N * sizeof(int), cudaMemcpyDeviceToHost, s2));
    CHECK(cudaStreamSynchronize(s2));
    REQUIRE(all_equal(host, N, 6));
    CHECK(cudaFreeAsync(b, s2));
    CHECK(cudaFreeAsync(c, s2));

    int off = 0;
    CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolReuseFollowEventDependencies, &off));
    CHECK(cudaMallocAsync(&a, 3 * N, s1));
    CHECK(cudaFreeAsync(a, s1));
    CHECK(cudaEventRecord(freed, s1));
    CHECK(cudaStreamWaitEvent(s2, freed, 0));
    CHECK(cudaMallocAsync(&b, 3 * N, s2));
    REQUIRE(b != a);
    CHECK(cudaFreeAsync(b, s2));
    CHECK(cudaDeviceSynchronize());
    printf("ok cross_stream\n");
}

// cudaMemPoolTrimTo gives back unused memory whose free is known complete,
// largest first, never memory in use.
static void trim() {
    cudaMemPool_t pool = default_pool();
    set_threshold(pool, UINT64_MAX);
    int *a, *b, *c, *d;
    CHECK(cudaMallocAsync(&a, 1000, 0));
    CHECK(cudaMallocAsync(&b, 2000, 0));
    CHECK(cudaMallocAsync(&c, 4000, 0));
    CHECK(cudaMallocAsync(&d, 500, 0));
    CHECK(cudaFreeAsync(a, 0));
    CHECK(cudaFreeAsync(b, 0));
    CHECK(cudaFreeAsync(c, 0));
    CHECK(cudaMemPoolTrimTo(pool, 0));
    REQUIRE(reserved(pool) == 7500);  // their frees are not known complete yet
    CHECK(cudaStreamSynchronize(0));
    CHECK(cudaMemPoolTrimTo(pool, 3500));
    REQUIRE(reserved(pool) == 3500);   // the 4000 bytes went
    CHECK(cudaMemPoolTrimTo(pool, 0));
    REQUIRE(reserved(pool) == 500 && used(pool) == 500);  // in use: kept
    CHECK(cudaFreeAsync(d, 0));
    printf("ok trim\n");
}

// Created pools: their own counters, cudaMallocFromPoolAsync and the C++
// overload, the device's current pool, maxSize, destroy.
static void created() {
    cudaMemPoolProps props;
    memset(&props, 0, sizeof(props));
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    cudaMemPool_t pool, current;
    CHECK(cudaMemPoolCreate(&pool, &props));
    REQUIRE(pool != default_pool());
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    int *a, *b;
    CHECK(cudaMallocFromPoolAsync((void **)&a, N * sizeof(int), pool, s));
    CHECK(cudaMallocAsync(&b, 100, pool, s));  // the C++ overload
    REQUIRE(reserved(pool) == N * sizeof(int) + 100 && reserved(default_pool()) == 0);
    fillKernel<<<N / 256, 256, 0, s>>>(a, 9, N);
    CHECK(cudaMemcpyAsync(host, a, N * sizeof(int), cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    REQUIRE(all_equal(host, N, 9));

    CHECK(cudaDeviceSetMemPool(0, pool));
    CHECK(cudaDeviceGetMemPool(&current, 0));
    REQUIRE(current == pool);
    int *c;
    CHECK(cudaMallocAsync(&c, 200, s));  // from the current pool
    REQUIRE(reserved(pool) == N * sizeof(int) + 300);
    CHECK(cudaFreeAsync(c, s));
    CHECK(cudaFreeAsync(b, s));
    CHECK(cudaMemPoolDestroy(pool));  // a still allocated: freed when freed
    CHECK(cudaDeviceGetMemPool(&current, 0));
    REQUIRE(current == default_pool());
    CHECK(cudaFreeAsync(a, s));
    CHECK(cudaStreamSynchronize(s));
    EXPECT_AND_CLEAR(cudaMallocFromPoolAsync((void **)&a, 16, pool, s), cudaErrorInvalidValue);

    props.maxSize = 8192;
    CHECK(cudaMemPoolCreate(&pool, &props));
    CHECK(cudaMallocFromPoolAsync((void **)&a, 6000, pool, s));
    EXPECT_AND_CLEAR(cudaMallocFromPoolAsync((void **)&b, 4000, pool, s), cudaErrorMemoryAllocation);
    CHECK(cudaFreeAsync(a, s));
    CHECK(cudaMemPoolDestroy(pool));
    printf("ok created\n");
}

// Plain cudaFree of pool memory: back to the pool, its work done.
static void plain_free() {
    cudaMemPool_t pool = default_pool();
    set_threshold(pool, UINT64_MAX);
    cudaStream_t s1, s2;
    CHECK(cudaStreamCreate(&s1));
    CHECK(cudaStreamCreate(&s2));
    int *a, *b;
    CHECK(cudaMallocAsync(&a, 4096, s1));
    CHECK(cudaStreamSynchronize(s1));
    CHECK(cudaFree(a));
    REQUIRE(used(pool) == 0 && reserved(pool) == 4096);
    CHECK(cudaMallocAsync(&b, 4096, s2));
    REQUIRE(b == a);
    CHECK(cudaFree(b));
    EXPECT_AND_CLEAR(cudaFree(b), cudaErrorInvalidValue);
    printf("ok plain_free\n");
}

// A pool short of device memory: unused pool memory goes back to make room.
static void out_of_memory(long limit_mib) {
    cudaMemPool_t pool = default_pool();
    set_threshold(pool, UINT64_MAX);
    size_t big = (size_t)(limit_mib * 5 / 8) << 20;
    int *a, *b;
    CHECK(cudaMallocAsync(&a, big, 0));
    CHECK(cudaFreeAsync(a, 0));
    CHECK(cudaStreamSynchronize(0));
    REQUIRE(reserved(pool) == big);  // kept: below the threshold
    cudaMemPoolProps props;
    memset(&props, 0, sizeof(props));
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    cudaMemPool_t other;
    CHECK(cudaMemPoolCreate(&other, &props));
    CHECK(cudaMallocFromPoolAsync((void **)&b, big, other, 0));  // only fits once the default pool lets go
    REQUIRE(reserved(pool) == 0 && reserved(other) == big);
    EXPECT_AND_CLEAR(cudaMallocFromPoolAsync((void **)&a, big, other, 0), cudaErrorMemoryAllocation);
    CHECK(cudaFreeAsync(b, 0));
    CHECK(cudaMemPoolDestroy(other));
    printf("ok out_of_memory\n");
}

// cudaDeviceReset frees the device's pools with everything else.
static void reset() {
    cudaMemPoolProps props;
    memset(&props, 0, sizeof(props));
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    cudaMemPool_t pool, before = default_pool();
    CHECK(cudaMemPoolCreate(&pool, &props));
    CHECK(cudaDeviceSetMemPool(0, pool));
    int *a;
    CHECK(cudaMallocFromPoolAsync((void **)&a, 4096, before, 0));
    CHECK(cudaDeviceReset());
    REQUIRE(default_pool() == before && reserved(before) == 0);  // the same default pool, empty
    cudaMemPool_t current;
    CHECK(cudaDeviceGetMemPool(&current, 0));
    REQUIRE(current == before);
    EXPECT_AND_CLEAR(cudaMemPoolTrimTo(pool, 0), cudaErrorInvalidValue);
    EXPECT_AND_CLEAR(cudaFreeAsync(a, 0), cudaErrorInvalidValue);
    CHECK(cudaMallocAsync(&a, 4096, 0));
    CHECK(cudaFreeAsync(a, 0));
    CHECK(cudaDeviceSynchronize());
    printf("ok reset\n");
}

// Bad input: CUDA's error codes.
static void errors() {
    cudaMemPool_t pool = default_pool(), created;
    EXPECT_AND_CLEAR(cudaMemPoolDestroy(pool), cudaErrorInvalidValue);
    int *a, *plain, local;
    CHECK(cudaMallocAsync(&a, 256, 0));
    CHECK(cudaMalloc(&plain, 256));
    EXPECT_AND_CLEAR(cudaFreeAsync(a + 1, 0), cudaErrorInvalidValue);
    EXPECT_AND_CLEAR(cudaFreeAsync(&local, 0), cudaErrorInvalidValue);
    CHECK(cudaFreeAsync(a, 0));
    EXPECT_AND_CLEAR(cudaFreeAsync(a, 0), cudaErrorInvalidValue);  // twice
    CHECK(cudaFreeAsync(plain, 0));                                 // cudaMalloc's: freed in stream order
    EXPECT_AND_CLEAR(cudaFreeAsync(plain, 0), cudaErrorInvalidValue);
    EXPECT_AND_CLEAR(cudaMallocAsync(nullptr, 16, 0), cudaErrorInvalidValue);
    EXPECT_AND_CLEAR(cudaMallocFromPoolAsync((void **)&a, 16, (cudaMemPool_t)&local, 0), cudaErrorInvalidValue);
    EXPECT_AND_CLEAR(cudaDeviceGetDefaultMemPool(&pool, 9), cudaErrorInvalidDevice);

    cudaMemPoolProps props;
    memset(&props, 0, sizeof(props));
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 9;
    EXPECT_AND_CLEAR(cudaMemPoolCreate(&created, &props), cudaErrorInvalidValue);
    props.location.id = 0;
    props.allocType = cudaMemAllocationTypeInvalid;
    EXPECT_AND_CLEAR(cudaMemPoolCreate(&created, &props), cudaErrorInvalidValue);
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeFabric;  // POSIX file descriptors only
    EXPECT_AND_CLEAR(cudaMemPoolCreate(&created, &props), cudaErrorNotSupported);
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeHost;  // host memory pools: not through rcuda
    EXPECT_AND_CLEAR(cudaMemPoolCreate(&created, &props), cudaErrorNotSupported);
    props.location.type = cudaMemLocationTypeDevice;
    EXPECT_AND_CLEAR(cudaMemPoolCreate(&created, nullptr), cudaErrorInvalidValue);
    CHECK(cudaMemPoolCreate(&created, &props));
    CHECK(cudaMemPoolDestroy(created));
    EXPECT_AND_CLEAR(cudaMemPoolDestroy(created), cudaErrorInvalidValue);
    uint64_t value;
    EXPECT_AND_CLEAR(cudaMemPoolGetAttribute(created, cudaMemPoolAttrUsedMemCurrent, &value), cudaErrorInvalidValue);
    EXPECT_AND_CLEAR(cudaDeviceSetMemPool(0, created), cudaErrorInvalidValue);

    cudaMemAccessDesc desc = {};
    desc.location.type = cudaMemLocationTypeDevice;
    desc.location.id = 9;
    desc.flags = cudaMemAccessFlagsProtReadWrite;
    EXPECT_AND_CLEAR(cudaMemPoolSetAccess(pool, &desc, 1), cudaErrorInvalidValue);
    desc.location.id = 0;
    desc.flags = cudaMemAccessFlagsProtNone;  // the owner's own access
    EXPECT_AND_CLEAR(cudaMemPoolSetAccess(pool, &desc, 1), cudaErrorInvalidDevice);
    desc.flags = (cudaMemAccessFlags)2;
    EXPECT_AND_CLEAR(cudaMemPoolSetAccess(pool, &desc, 1), cudaErrorInvalidValue);
    cudaMemAccessFlags flags;
    cudaMemLocation location = {cudaMemLocationTypeInvalid, 0};
    EXPECT_AND_CLEAR(cudaMemPoolGetAccess(&flags, pool, &location), cudaErrorInvalidValue);
    int fd;
    EXPECT_AND_CLEAR(cudaMemPoolExportToShareableHandle(&fd, pool, cudaMemHandleTypePosixFileDescriptor, 0),
                     cudaErrorInvalidValue);  // created without handle types
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaGetLastError());
    printf("ok errors\n");
}

// Access from the other GPU: between two GPUs of one server its kernels
// use the pool's memory, blocks made before and after the call; refused
// across servers.  GPU1's own pool stays its own.
static void access(bool same_server) {
    int count = 0;
    CHECK(cudaGetDeviceCount(&count));
    REQUIRE(count == 2);
    cudaMemPool_t pool = default_pool(0);
    cudaMemAccessFlags flags = cudaMemAccessFlagsProtRead;
    cudaMemLocation gpu0 = {cudaMemLocationTypeDevice, 0}, gpu1 = {cudaMemLocationTypeDevice, 1};
    CHECK(cudaMemPoolGetAccess(&flags, pool, &gpu0));
    REQUIRE(flags == cudaMemAccessFlagsProtReadWrite);
    CHECK(cudaMemPoolGetAccess(&flags, pool, &gpu1));
    REQUIRE(flags == cudaMemAccessFlagsProtNone);
    cudaMemAccessDesc descs[2] = {{gpu0, cudaMemAccessFlagsProtReadWrite}, {gpu1, cudaMemAccessFlagsProtReadWrite}};
    if (same_server) {
        int *before, *after, h[N];
        CHECK(cudaSetDevice(0));
        CHECK(cudaMallocAsync(&before, N * sizeof(int), 0));
        CHECK(cudaMemPoolSetAccess(pool, descs, 2));
        CHECK(cudaMemPoolGetAccess(&flags, pool, &gpu1));
        REQUIRE(flags == cudaMemAccessFlagsProtReadWrite);
        CHECK(cudaMallocAsync(&after, N * sizeof(int), 0));
        CHECK(cudaMemsetAsync(before, 0, N * sizeof(int), 0));
        CHECK(cudaMemsetAsync(after, 0, N * sizeof(int), 0));
        CHECK(cudaDeviceSynchronize());
        CHECK(cudaSetDevice(1));  // GPU1's kernels write GPU0's pool memory
        fillKernel<<<(N + 255) / 256, 256>>>(before, 5, N);
        addKernel<<<(N + 255) / 256, 256>>>(after, 6, N);
        CHECK(cudaDeviceSynchronize());
        CHECK(cudaSetDevice(0));
        CHECK(cudaMemcpy(h, before, sizeof h, cudaMemcpyDeviceToHost));
        REQUIRE(h[0] == 5 && h[N - 1] == 5);
        CHECK(cudaMemcpy(h, after, sizeof h, cudaMemcpyDeviceToHost));
        REQUIRE(h[0] == 6 && h[N - 1] == 6);
        CHECK(cudaFreeAsync(before, 0));
        CHECK(cudaFreeAsync(after, 0));
        CHECK(cudaDeviceSynchronize());
        descs[1].flags = cudaMemAccessFlagsProtNone;
        CHECK(cudaMemPoolSetAccess(pool, descs + 1, 1));
        CHECK(cudaMemPoolGetAccess(&flags, pool, &gpu1));
        REQUIRE(flags == cudaMemAccessFlagsProtNone);
        // Taken away: GPU1's kernel faults (a sticky error there, so last; GPU1 is reset).
        CHECK(cudaMallocAsync(&after, N * sizeof(int), 0));
        CHECK(cudaDeviceSynchronize());
        CHECK(cudaSetDevice(1));
        fillKernel<<<(N + 255) / 256, 256>>>(after, 7, N);
        EXPECT(cudaDeviceSynchronize(), cudaErrorIllegalAddress);
        CHECK(cudaDeviceReset());
        CHECK(cudaSetDevice(0));
        CHECK(cudaFreeAsync(after, 0));
        CHECK(cudaDeviceSynchronize());
    } else {
        EXPECT_AND_CLEAR(cudaMemPoolSetAccess(pool, descs, 2), cudaErrorInvalidDevice);
        CHECK(cudaMemPoolGetAccess(&flags, pool, &gpu1));
        REQUIRE(flags == cudaMemAccessFlagsProtNone);
    }
    CHECK(cudaMemPoolGetAccess(&flags, default_pool(1), &gpu0));
    REQUIRE(flags == cudaMemAccessFlagsProtNone);

    // Each device's pool allocates on its own device, whatever the stream's.
    int *a;
    CHECK(cudaSetDevice(1));
    CHECK(cudaMallocFromPoolAsync((void **)&a, N * sizeof(int), pool, 0));
    cudaPointerAttributes attributes;
    CHECK(cudaPointerGetAttributes(&attributes, a));
    REQUIRE(attributes.device == 0);
    CHECK(cudaFreeAsync(a, 0));
    CHECK(cudaDeviceSynchronize());
    printf("ok access %s\n", same_server ? "same server" : "across servers");
}

int main(int argc, char **argv) {
    const char *what = argc > 1 ? argv[1] : "basic";
    if (!strcmp(what, "basic")) basic();
    else if (!strcmp(what, "counters")) counters();
    else if (!strcmp(what, "threshold")) threshold();
    else if (!strcmp(what, "cross_stream")) cross_stream();
    else if (!strcmp(what, "trim")) trim();
    else if (!strcmp(what, "created")) created();
    else if (!strcmp(what, "plain_free")) plain_free();
    else if (!strcmp(what, "reset")) reset();
    else if (!strcmp(what, "out_of_memory")) out_of_memory(argc > 2 ? atol(argv[2]) : 64);
    else if (!strcmp(what, "errors")) errors();
    else if (!strcmp(what, "access_same_server")) access(true);
    else if (!strcmp(what, "access_across_servers")) access(false);
    else { printf("FAILED: unknown scenario %s\n", what); return 1; }
    return 0;
}
