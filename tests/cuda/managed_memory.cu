// Managed memory through rcuda: cudaMallocManaged and __managed__ variables
// that the host and kernels use through one pointer; the host sees kernel
// writes after every kind of synchronisation, kernels see host writes made
// before their launch; stream attachment, prefetches, advice and range
// attributes; copies and memsets; threads; fork; bad input; the host
// touching managed memory while a kernel writes it.
//
//   managed_memory [SECTION...]      (default: all; "devices" needs 2 devices)
//
// Each section prints "ok SECTION"; any failure prints "FAILED line N".
// "touch_64mib" prints its timings ("time ...").
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>
#include <sys/wait.h>
#include <unistd.h>
#include "check.h"
#include "long_kernel.h"

__managed__ int counter = 5;
__managed__ float table[16];

__global__ void vectorAdd(const float *a, const float *b, float *c, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

__global__ void addOne(int *p, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] += 1;
}

// y[i] += x[i]
__global__ void accumulate(const int *x, int *y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += x[i];
}

// counter += 1; table[i] = i * scale
__global__ void bumpGlobals(float scale)
{
    if (threadIdx.x == 0) counter += 1;
    if (threadIdx.x < 16) table[threadIdx.x] = threadIdx.x * scale;
}

// p[i] = i * 7 + seed (as 32-bit words)
__global__ void fill(unsigned int *p, size_t n, unsigned int seed)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) p[i] = (unsigned int)i * 7u + seed;
}

// *ptrs[i] += 1 for each of n pointers (themselves in managed memory)
__global__ void addOneEach(int **ptrs, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) *ptrs[i] += 1;
}

// Each thread adds 10 to *p, atomically for the whole system (as NVIDIA's
// systemWideAtomics sample does while its host threads add too).
__global__ void systemAdd(int *p)
{
    atomicAdd_system(p, 10);
}

static int blocks(size_t n) { return (int)((n + 255) / 256); }

static double ms_since(std::chrono::steady_clock::time_point start)
{
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

static void attributes()
{
    int value = -1;
    CHECK(cudaDeviceGetAttribute(&value, cudaDevAttrManagedMemory, 0));
    REQUIRE(value == 1);
    CHECK(cudaDeviceGetAttribute(&value, cudaDevAttrConcurrentManagedAccess, 0));
    REQUIRE(value == 0);  // the host must not touch it while kernels run
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    REQUIRE(prop.managedMemory == 1 && prop.concurrentManagedAccess == 0);
    printf("ok attributes\n");
}

static void vector_add()
{
    const int n = 10000;
    float *a, *b, *c;
    CHECK(cudaMallocManaged(&a, n * sizeof(float)));
    CHECK(cudaMallocManaged(&b, n * sizeof(float), cudaMemAttachGlobal));
    CHECK(cudaMallocManaged(&c, n * sizeof(float), cudaMemAttachHost));
    for (int i = 0; i < n; i++) { a[i] = i; b[i] = 2 * i; }
    vectorAdd<<<blocks(n), 256>>>(a, b, c, n);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < n; i++) REQUIRE(c[i] == 3.0f * i);
    cudaPointerAttributes attrs;
    CHECK(cudaPointerGetAttributes(&attrs, c + 17));
    REQUIRE(attrs.type == cudaMemoryTypeManaged && attrs.device == 0);
    REQUIRE(attrs.devicePointer == c + 17 && attrs.hostPointer == c + 17);
    CHECK(cudaFree(a));
    CHECK(cudaFree(b));
    CHECK(cudaFree(c));
    printf("ok vector_add\n");
}

// The host writes between launches (after synchronising, as devices without
// concurrent managed access require); each launch sees the latest writes.
static void host_writes_between_launches()
{
    const int n = 5000;
    int *x, *y;
    CHECK(cudaMallocManaged(&x, n * sizeof(int)));
    CHECK(cudaMallocManaged(&y, n * sizeof(int)));
    memset(y, 0, n * sizeof(int));
    int expected = 0;
    for (int round = 1; round <= 6; round++) {
        for (int i = 0; i < n; i++) x[i] = round * 10 + (i % 7);
        expected += round * 10;
        accumulate<<<blocks(n), 256>>>(x, y, n);
        CHECK(cudaDeviceSynchronize());
        for (int i = 0; i < n; i += 97) REQUIRE(y[i] == expected + round * (i % 7));
    }
    CHECK(cudaFree(x));
    CHECK(cudaFree(y));
    printf("ok host_writes_between_launches\n");
}

static void CUDART_CB check_in_host_function(void *data)
{
    int *p = (int *)data;
    // The kernel before it in the stream added one to each of 0..1023.
    int good = 1;
    for (int i = 0; i < 1024; i++) good &= p[i] == i + 1;
    p[2000] = good ? 77 : -1;  // a host write the next kernel must see
}

// The kernel's writes are there when a stream synchronises, an event is
// waited for, a host function runs, a stream query says done.
static void synchronisations()
{
    const int n = 4096;
    int *p;
    CHECK(cudaMallocManaged(&p, n * sizeof(int)));
    for (int i = 0; i < n; i++) p[i] = i;
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK(cudaStreamAttachMemAsync(s, p, 0, cudaMemAttachSingle));
    addOne<<<blocks(1024), 256, 0, s>>>(p, 1024);
    CHECK(cudaLaunchHostFunc(s, check_in_host_function, p));
    addOne<<<blocks(n), 256, 0, s>>>(p, n);
    CHECK(cudaStreamSynchronize(s));
    REQUIRE(p[2000] == 78 && p[0] == 2 && p[3000] == 3001);

    cudaEvent_t done;
    CHECK(cudaEventCreate(&done));
    addOne<<<blocks(n), 256, 0, s>>>(p, n);
    CHECK(cudaEventRecord(done, s));
    CHECK(cudaEventSynchronize(done));
    REQUIRE(p[0] == 3 && p[3000] == 3002);

    addOne<<<blocks(n), 256, 0, s>>>(p, n);
    cudaError_t state = cudaErrorNotReady;
    for (int i = 0; i < 100000 && state == cudaErrorNotReady; i++) {
        state = cudaStreamQuery(s);
        if (state == cudaErrorNotReady) usleep(100);
    }
    CHECK(state);
    REQUIRE(p[0] == 4 && p[3000] == 3003);

    CHECK(cudaStreamAttachMemAsync(s, p, n * sizeof(int), cudaMemAttachGlobal));
    CHECK(cudaEventDestroy(done));
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(p));
    printf("ok synchronisations\n");
}

// Threads each use their own managed memory on their own stream while the
// others synchronise.
static void threads()
{
    const int workers = 4, n = 3000, rounds = 5;
    std::vector<int> failures(workers, 0);
    std::vector<std::thread> pool;
    for (int t = 0; t < workers; t++) {
        pool.emplace_back([t, &failures] {
            int *p;
            cudaStream_t s;
            if (cudaMallocManaged(&p, n * sizeof(int)) != cudaSuccess || cudaStreamCreate(&s) != cudaSuccess) {
                failures[t] = -1;
                return;
            }
            for (int i = 0; i < n; i++) p[i] = t * 1000;
            for (int r = 1; r <= rounds; r++) {
                p[r] += 100;  // a host write between launches
                addOne<<<blocks(n), 256, 0, s>>>(p, n);
                if (cudaStreamSynchronize(s) != cudaSuccess) failures[t]++;
                if (p[0] != t * 1000 + r || p[r] != t * 1000 + r + 100) failures[t]++;
            }
            cudaStreamDestroy(s);
            cudaFree(p);
        });
    }
    for (auto &thread : pool) thread.join();
    for (int t = 0; t < workers; t++) {
        if (failures[t]) printf("thread %d: %d failures\n", t, failures[t]);
        REQUIRE(failures[t] == 0);
    }
    printf("ok threads\n");
}

static void managed_variables()
{
    REQUIRE(counter == 5);  // the module's initial value
    counter = 7;
    table[3] = -1.0f;
    bumpGlobals<<<1, 32>>>(2.0f);
    CHECK(cudaDeviceSynchronize());
    REQUIRE(counter == 8);
    for (int i = 0; i < 16; i++) REQUIRE(table[i] == i * 2.0f);
    cudaPointerAttributes attrs;
    CHECK(cudaPointerGetAttributes(&attrs, &counter));
    REQUIRE(attrs.type == cudaMemoryTypeManaged);
    counter = 100;
    bumpGlobals<<<1, 32>>>(0.5f);
    CHECK(cudaDeviceSynchronize());
    REQUIRE(counter == 101 && table[15] == 7.5f);
    printf("ok managed_variables\n");
}

static void advice_and_prefetch()
{
    const size_t bytes = 64 * 4096;
    char *p;
    CHECK(cudaMallocManaged(&p, bytes));
    cudaMemLocation gpu0 = {cudaMemLocationTypeDevice, 0}, host = {cudaMemLocationTypeHost, 0};
    int value = -7;
    CHECK(cudaMemRangeGetAttribute(&value, 4, cudaMemRangeAttributeReadMostly, p, bytes));
    REQUIRE(value == 0);
    CHECK(cudaMemAdvise(p, bytes, cudaMemAdviseSetReadMostly, gpu0));
    CHECK(cudaMemRangeGetAttribute(&value, 4, cudaMemRangeAttributeReadMostly, p, bytes));
    REQUIRE(value == 1);
    CHECK(cudaMemAdvise(p, 4096, cudaMemAdviseUnsetReadMostly, gpu0));
    CHECK(cudaMemRangeGetAttribute(&value, 4, cudaMemRangeAttributeReadMostly, p, bytes));
    REQUIRE(value == 0);  // not every page any more
    CHECK(cudaMemRangeGetAttribute(&value, 4, cudaMemRangeAttributeReadMostly, p + 4096, bytes - 4096));
    REQUIRE(value == 1);

    CHECK(cudaMemRangeGetAttribute(&value, 4, cudaMemRangeAttributePreferredLocation, p, bytes));
    REQUIRE(value == cudaInvalidDeviceId);
    CHECK(cudaMemAdvise(p, bytes, cudaMemAdviseSetPreferredLocation, gpu0));
    CHECK(cudaMemRangeGetAttribute(&value, 4, cudaMemRangeAttributePreferredLocation, p, bytes));
    REQUIRE(value == 0);
    CHECK(cudaMemAdvise(p + 8 * 4096, 4096, cudaMemAdviseSetPreferredLocation, host));
    CHECK(cudaMemRangeGetAttribute(&value, 4, cudaMemRangeAttributePreferredLocation, p, bytes));
    REQUIRE(value == cudaInvalidDeviceId);  // pages disagree
    CHECK(cudaMemRangeGetAttribute(&value, 4, cudaMemRangeAttributePreferredLocation, p + 8 * 4096 + 100, 8));
    REQUIRE(value == cudaCpuDeviceId);
    cudaMemLocationType type = cudaMemLocationTypeInvalid;
    CHECK(cudaMemRangeGetAttribute(&type, sizeof type, cudaMemRangeAttributePreferredLocationType, p, 4096));
    REQUIRE(type == cudaMemLocationTypeDevice);
    CHECK(cudaMemAdvise(p, bytes, cudaMemAdviseUnsetPreferredLocation, gpu0));
    CHECK(cudaMemRangeGetAttribute(&type, sizeof type, cudaMemRangeAttributePreferredLocationType, p, bytes));
    REQUIRE(type == cudaMemLocationTypeInvalid);

    CHECK(cudaMemAdvise(p, bytes, cudaMemAdviseSetAccessedBy, gpu0));
    CHECK(cudaMemAdvise(p, bytes / 2, cudaMemAdviseSetAccessedBy, host));
    int accessors[3] = {9, 9, 9};
    CHECK(cudaMemRangeGetAttribute(accessors, sizeof accessors, cudaMemRangeAttributeAccessedBy, p, bytes));
    REQUIRE(accessors[0] == 0 && accessors[1] == cudaInvalidDeviceId && accessors[2] == cudaInvalidDeviceId);
    CHECK(cudaMemRangeGetAttribute(accessors, sizeof accessors, cudaMemRangeAttributeAccessedBy, p, bytes / 2));
    REQUIRE(accessors[0] == 0 && accessors[1] == cudaCpuDeviceId && accessors[2] == cudaInvalidDeviceId);
    CHECK(cudaMemAdvise(p, bytes, cudaMemAdviseUnsetAccessedBy, gpu0));
    CHECK(cudaMemRangeGetAttribute(accessors, 4, cudaMemRangeAttributeAccessedBy, p, bytes));
    REQUIRE(accessors[0] == cudaInvalidDeviceId);

    // Prefetches: recorded as the last location, and the data stays right.
    for (size_t i = 0; i < bytes; i++) p[i] = (char)(i % 101);
    CHECK(cudaMemRangeGetAttribute(&value, 4, cudaMemRangeAttributeLastPrefetchLocation, p, bytes));
    REQUIRE(value == cudaInvalidDeviceId);
    CHECK(cudaMemPrefetchAsync(p, bytes, gpu0, 0, 0));
    addOne<<<blocks(bytes / 4), 256>>>((int *)p, (int)(bytes / 4));
    CHECK(cudaMemPrefetchAsync(p, bytes, host, 0, 0));
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemRangeGetAttribute(&value, 4, cudaMemRangeAttributeLastPrefetchLocation, p, bytes));
    REQUIRE(value == cudaCpuDeviceId);
    for (size_t i = 0; i < bytes; i += 4) REQUIRE(p[i] == (char)(i % 101 + 1));

    // A batch: the first two ranges to the GPU, the third to the host.
    void *ranges[3] = {p, p + 4096, p + 2 * 4096};
    size_t sizes[3] = {4096, 4096, 4096};
    cudaMemLocation where[2] = {gpu0, host};
    size_t first[2] = {0, 2};
    CHECK(cudaMemPrefetchBatchAsync(ranges, sizes, 3, where, first, 2, 0, 0));
    CHECK(cudaMemRangeGetAttribute(&value, 4, cudaMemRangeAttributeLastPrefetchLocation, p, 2 * 4096));
    REQUIRE(value == 0);
    cudaMemLocationType last_type;
    int last_id = -5;
    void *data[2] = {&last_type, &last_id};
    size_t data_sizes[2] = {sizeof last_type, 4};
    cudaMemRangeAttribute wanted[2] = {cudaMemRangeAttributeLastPrefetchLocationType,
                                       cudaMemRangeAttributeLastPrefetchLocationId};
    CHECK(cudaMemRangeGetAttributes(data, data_sizes, wanted, 2, p + 2 * 4096, 4096));
    REQUIRE(last_type == cudaMemLocationTypeHost);
    CHECK(cudaMemRangeGetAttributes(data, data_sizes, wanted, 2, p, 4096));
    REQUIRE(last_type == cudaMemLocationTypeDevice && last_id == 0);
    CHECK(cudaMemDiscardBatchAsync(ranges, sizes, 3, 0, 0));
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaFree(p));
    printf("ok advice_and_prefetch\n");
}

// Thousands of small allocations (more than mapped ranges may be), freed
// and made again in between: each keeps its own bytes.
static void many_small()
{
    const int n = 3000;
    int **ptrs;
    CHECK(cudaMallocManaged(&ptrs, n * sizeof(int *)));
    for (int i = 0; i < n; i++) {
        CHECK(cudaMallocManaged(&ptrs[i], 100 + i % 300));
        *ptrs[i] = i;
        ptrs[i][(100 + i % 300) / 4 - 1] = -i;  // its last word
    }
    addOneEach<<<blocks(n), 256>>>(ptrs, n);
    CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < n; i++) REQUIRE(*ptrs[i] == i + 1 && ptrs[i][(100 + i % 300) / 4 - 1] == -i);
    for (int i = 0; i < n; i += 2) CHECK(cudaFree(ptrs[i]));
    for (int i = 0; i < n; i += 2) {
        CHECK(cudaMallocManaged(&ptrs[i], 64));
        *ptrs[i] = 10 * i;
    }
    addOneEach<<<blocks(n), 256>>>(ptrs, n);
    CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < n; i++) {
        REQUIRE(*ptrs[i] == (i % 2 ? i + 2 : 10 * i + 1));
        if (i % 2) REQUIRE(ptrs[i][(100 + i % 300) / 4 - 1] == -i);
    }
    cudaPointerAttributes attrs;
    CHECK(cudaPointerGetAttributes(&attrs, ptrs[7] + 3));
    REQUIRE(attrs.type == cudaMemoryTypeManaged);
    EXPECT_AND_CLEAR(cudaFree(ptrs[7] + 1), cudaErrorInvalidValue);
    for (int i = 0; i < n; i++) CHECK(cudaFree(ptrs[i]));
    EXPECT_AND_CLEAR(cudaFree(ptrs[5]), cudaErrorInvalidValue);  // freed already
    CHECK(cudaFree(ptrs));
    printf("ok many_small\n");
}

// Copies and memsets into and out of managed memory, with every kind.
static void copies()
{
    const int n = 2048;
    int *m, *d, h[n];
    CHECK(cudaMallocManaged(&m, n * sizeof(int)));
    CHECK(cudaMalloc(&d, n * sizeof(int)));
    for (int i = 0; i < n; i++) m[i] = i * 3;
    CHECK(cudaMemcpy(d, m, n * sizeof(int), cudaMemcpyDefault));
    addOne<<<blocks(n), 256>>>(d, n);
    CHECK(cudaMemcpy(m, d, n * sizeof(int), cudaMemcpyDeviceToDevice));
    REQUIRE(m[0] == 1 && m[n - 1] == (n - 1) * 3 + 1);
    CHECK(cudaMemcpy(h, m, n * sizeof(int), cudaMemcpyDeviceToHost));
    REQUIRE(h[10] == 31);
    CHECK(cudaMemset(m, 0, n * sizeof(int)));
    REQUIRE(m[0] == 0 && m[n - 1] == 0);
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    CHECK(cudaMemsetAsync(m + 100, 0xff, 16, s));
    CHECK(cudaMemcpyAsync(m + 200, h, 8 * sizeof(int), cudaMemcpyHostToDevice, s));
    CHECK(cudaStreamSynchronize(s));
    REQUIRE(m[100] == -1 && m[103] == -1 && m[104] == 0 && m[200] == 1 && m[207] == 22);
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(d));
    CHECK(cudaFree(m));
    printf("ok copies\n");
}

// Managed memory of GPU1 while GPU0 is current: its own device's kernels use it.
static void devices()
{
    int count = 0;
    CHECK(cudaGetDeviceCount(&count));
    REQUIRE(count >= 2);
    CHECK(cudaSetDevice(1));
    int *p;
    CHECK(cudaMallocManaged(&p, 256 * sizeof(int)));
    for (int i = 0; i < 256; i++) p[i] = -i;
    addOne<<<1, 256>>>(p, 256);
    CHECK(cudaDeviceSynchronize());
    REQUIRE(p[0] == 1 && p[255] == -254);
    cudaPointerAttributes attrs;
    CHECK(cudaPointerGetAttributes(&attrs, p));
    REQUIRE(attrs.type == cudaMemoryTypeManaged && attrs.device == 1);
    CHECK(cudaSetDevice(0));
    CHECK(cudaFree(p));
    printf("ok devices\n");
}

// A forked child has the parent's managed memory as plain memory.
static void forked()
{
    int *p;
    CHECK(cudaMallocManaged(&p, 1 << 16));
    for (int i = 0; i < 1024; i++) p[i] = i;
    addOne<<<blocks(1024), 256>>>(p, 1024);
    CHECK(cudaDeviceSynchronize());
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        if (p[5] != 6) _exit(3);
        p[5] = -1;  // its own copy, writable
        _exit(p[5] == -1 ? 0 : 4);
    }
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    REQUIRE(p[5] == 6);
    p[6] = 60;
    addOne<<<blocks(1024), 256>>>(p, 1024);
    CHECK(cudaDeviceSynchronize());
    REQUIRE(p[5] == 7 && p[6] == 61);
    CHECK(cudaFree(p));
    printf("ok forked\n");
}

static void bad_input()
{
    int *p, *d;
    EXPECT_AND_CLEAR(cudaMallocManaged(&p, 0), cudaErrorInvalidValue);
    EXPECT_AND_CLEAR(cudaMallocManaged(&p, 64, cudaMemAttachSingle), cudaErrorInvalidValue);
    CHECK(cudaMallocManaged(&p, 8192));
    CHECK(cudaMalloc(&d, 64));
    cudaMemLocation gpu0 = {cudaMemLocationTypeDevice, 0}, gpu99 = {cudaMemLocationTypeDevice, 99};
    EXPECT_AND_CLEAR(cudaMemAdvise(d, 64, cudaMemAdviseSetReadMostly, gpu0), cudaErrorInvalidValue);
    EXPECT_AND_CLEAR(cudaMemAdvise(p, 8192, (cudaMemoryAdvise)42, gpu0), cudaErrorInvalidValue);
    EXPECT_AND_CLEAR(cudaMemAdvise(p, 8192, cudaMemAdviseSetPreferredLocation, gpu99), cudaErrorInvalidDevice);
    EXPECT_AND_CLEAR(cudaMemAdvise(p, 8193, cudaMemAdviseSetReadMostly, gpu0), cudaErrorInvalidValue);
    EXPECT_AND_CLEAR(cudaMemPrefetchAsync(p, 8192, gpu99, 0, 0), cudaErrorInvalidDevice);
    EXPECT_AND_CLEAR(cudaMemPrefetchAsync(p, 8192, gpu0, 1, 0), cudaErrorInvalidValue);
    EXPECT_AND_CLEAR(cudaMemPrefetchAsync(d, 64, gpu0, 0, 0), cudaErrorInvalidValue);
    int value;
    EXPECT_AND_CLEAR(cudaMemRangeGetAttribute(&value, 8, cudaMemRangeAttributeReadMostly, p, 8192),
                     cudaErrorInvalidValue);
    EXPECT_AND_CLEAR(cudaMemRangeGetAttribute(&value, 4, cudaMemRangeAttributeReadMostly, d, 64),
                     cudaErrorInvalidValue);
    EXPECT_AND_CLEAR(cudaStreamAttachMemAsync(0, p, 0, cudaMemAttachSingle), cudaErrorInvalidValue);
    EXPECT_AND_CLEAR(cudaStreamAttachMemAsync(0, p, 100, cudaMemAttachGlobal), cudaErrorInvalidValue);
    EXPECT_AND_CLEAR(cudaStreamAttachMemAsync(0, d, 0, cudaMemAttachGlobal), cudaErrorInvalidValue);
    int *not_mapped;
    EXPECT_AND_CLEAR(cudaHostGetDevicePointer((void **)&not_mapped, p, 0), cudaErrorInvalidValue);
    EXPECT_AND_CLEAR(cudaFreeHost(p), cudaErrorInvalidValue);
    EXPECT_AND_CLEAR(cudaFree(p + 1), cudaErrorInvalidValue);
    p[0] = 41;  // still fine after all that
    addOne<<<1, 1>>>(p, 1);
    CHECK(cudaDeviceSynchronize());
    REQUIRE(p[0] == 42);
    CHECK(cudaFree(p));
    EXPECT_AND_CLEAR(cudaFree(p), cudaErrorInvalidValue);  // freed twice
    CHECK(cudaFree(d));
    printf("ok bad_input\n");
}

// The host reading 64 MiB a kernel wrote, against cudaMemcpy of the same.
// A kernel that changes a few chunks of a large allocation: the host sees
// exactly those changes (a download brings only what changed), also where
// it wrote other bytes of the same chunk itself, and over several rounds.
// The host touches managed memory while a kernel that writes it runs: it
// waits for the kernel and sees its writes, and what it writes adds to the
// kernel's instead of overwriting them with a stale copy.
static void host_waits_for_kernels()
{
    const long long kernel_ns = 200 * 1000 * 1000;
    int *p;
    CHECK(cudaMallocManaged(&p, 64 << 10));
    p[0] = 1;
    p[5000] = 7;
    longKernel<<<1, 1>>>(p, kernel_ns);  // *flag = 42 at its end
    REQUIRE(p[0] == 42);                 // a read: after the kernel
    longKernel<<<1, 1>>>(p + 1, kernel_ns);
    p[1] += 100;                         // a write to the word it writes
    p[5000] += 1;                        // and to another page
    CHECK(cudaDeviceSynchronize());
    REQUIRE(p[1] == 142 && p[5000] == 8);

    cudaStream_t s;  // attached to the host: the host's while kernels run
    CHECK(cudaStreamCreate(&s));
    int *mine;
    CHECK(cudaMallocManaged(&mine, 64 << 10, cudaMemAttachHost));
    mine[0] = 5;
    longKernel<<<1, 1, 0, s>>>(p + 2, kernel_ns);
    mine[0] += 1;
    REQUIRE(mine[0] == 6);
    CHECK(cudaStreamSynchronize(s));
    REQUIRE(p[2] == 42);
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(mine));
    CHECK(cudaFree(p));
    printf("ok host_waits_for_kernels\n");
}

// NVIDIA's systemWideAtomics, in short: host threads add to managed memory
// while a kernel does; no side's additions are lost.
static void system_atomics()
{
    const int threads = 4096, host_threads = 4, host_adds = 2048;
    int *p;
    CHECK(cudaMallocManaged(&p, sizeof(int)));
    *p = 0;
    systemAdd<<<threads / 256, 256>>>(p);
    std::vector<std::thread> pool;
    for (int t = 0; t < host_threads; t++)
        pool.emplace_back([p] {
            for (int i = 0; i < host_adds; i++) __sync_fetch_and_add(p, 10);
        });
    for (auto &thread : pool) thread.join();
    CHECK(cudaDeviceSynchronize());
    REQUIRE(*p == 10 * (threads + host_threads * host_adds));
    CHECK(cudaFree(p));
    printf("ok system_atomics\n");
}

// Only what the host touches comes back: kernels rewrite 32 MiB of managed
// memory and a small allocation; the host reads the small one only.
static void touch_only_what_is_read()
{
    const size_t n = 32u << 20 >> 2;
    unsigned int *big;
    int *small;
    CHECK(cudaMallocManaged(&big, n * sizeof(unsigned int)));
    CHECK(cudaMallocManaged(&small, 4096));
    small[0] = 1;
    fill<<<blocks(n), 256>>>(big, n, 3);
    addOne<<<1, 1>>>(small, 1);
    CHECK(cudaDeviceSynchronize());
    REQUIRE(small[0] == 2);
    CHECK(cudaFree(big));
    CHECK(cudaFree(small));
    printf("ok touch_only_what_is_read\n");
}

// What the program prefetches to the host comes back at the synchronisation:
// the second half of 8 MiB, which the host does not read, travels too.
static void prefetch_to_host()
{
    const size_t n = 8u << 20 >> 2;
    unsigned int *p;
    CHECK(cudaMallocManaged(&p, n * sizeof(unsigned int)));
    fill<<<blocks(n), 256>>>(p, n, 11);
    cudaMemLocation host = {cudaMemLocationTypeHost, 0};
    CHECK(cudaMemPrefetchAsync(p + n / 2, n / 2 * sizeof(unsigned int), host, 0, 0));
    CHECK(cudaDeviceSynchronize());
    REQUIRE(p[0] == 11 && p[n / 2] == (unsigned int)(n / 2) * 7u + 11);
    CHECK(cudaFree(p));
    printf("ok prefetch_to_host\n");
}

// A system call reads managed memory right after a synchronisation, as
// CUDA allows: fwrite of a kernel's result (a write(2) from the memory
// itself), read back and compared.
static void system_call_after_sync()
{
    const size_t n = 4u << 20 >> 2;
    unsigned int *p;
    CHECK(cudaMallocManaged(&p, n * sizeof(unsigned int)));
    fill<<<blocks(n), 256>>>(p, n, 5);
    CHECK(cudaDeviceSynchronize());
    FILE *file = tmpfile();
    REQUIRE(file != NULL);
    setvbuf(file, NULL, _IONBF, 0);
    REQUIRE(fwrite(p, sizeof(unsigned int), n, file) == n);
    std::vector<unsigned int> back(n);
    rewind(file);
    REQUIRE(fread(back.data(), sizeof(unsigned int), n, file) == n);
    fclose(file);
    for (size_t i = 0; i < n; i += 997) REQUIRE(back[i] == (unsigned int)i * 7u + 5);
    CHECK(cudaFree(p));
    printf("ok system_call_after_sync\n");
}

static void changed_chunks()
{
    const int n = 24 << 20 >> 2;  // 24 MiB of ints
    int *p;
    CHECK(cudaMallocManaged(&p, (size_t)n * sizeof(int)));
    for (int i = 0; i < n; i++) p[i] = i;
    addOne<<<blocks(300000), 256>>>(p + 1000000, 300000);  // about 1.2 MiB, inside
    CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < n; i++) REQUIRE(p[i] == i + (i >= 1000000 && i < 1300000));
    p[5] = -5;
    p[2000000] = -7;  // the host's write; the kernel below changes the same chunk
    addOne<<<1, 256>>>(p + 2000001, 10);
    addOne<<<1, 256>>>(p + n - 3, 3);  // the last words
    CHECK(cudaDeviceSynchronize());
    REQUIRE(p[5] == -5 && p[2000000] == -7 && p[2000011] == 2000011 && p[1000000] == 1000001);
    for (int i = 2000001; i < 2000011; i++) REQUIRE(p[i] == i + 1);
    for (int i = n - 3; i < n; i++) REQUIRE(p[i] == i + 1);
    for (int round = 0; round < 4; round++) {  // nothing changes, then everything does
        CHECK(cudaDeviceSynchronize());
        REQUIRE(p[n - 1] == n + round && p[0] == round);
        addOne<<<blocks(n), 256>>>(p, n);
        CHECK(cudaDeviceSynchronize());
        REQUIRE(p[n - 1] == n + round + 1 && p[0] == round + 1 && p[5] == -5 + round + 1);
    }
    CHECK(cudaFree(p));
    printf("ok changed_chunks\n");
}

static void touch_64mib()
{
    const size_t bytes = 64u << 20, n = bytes / 4;
    unsigned int *m, *d;
    CHECK(cudaMallocManaged(&m, bytes));
    CHECK(cudaMalloc(&d, bytes));
    std::vector<unsigned int> h(n);
    double best_touch = 1e30, best_copy = 1e30;
    for (int round = 1; round <= 3; round++) {
        fill<<<blocks(n), 256>>>(m, n, round);
        fill<<<blocks(n), 256>>>(d, n, round);
        CHECK(cudaDeviceSynchronize());
        // Both after a synchronisation: cudaDeviceSynchronize brings the kernel's writes.
        auto start = std::chrono::steady_clock::now();
        fill<<<blocks(n), 256>>>(m, n, round + 10);
        CHECK(cudaDeviceSynchronize());
        unsigned long long sum = 0;
        for (size_t i = 0; i < n; i += 1024) sum += m[i];
        double touch = ms_since(start);
        start = std::chrono::steady_clock::now();
        fill<<<blocks(n), 256>>>(d, n, round + 10);
        CHECK(cudaMemcpy(h.data(), d, bytes, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < n; i += 1024) sum -= h[i];
        double copy = ms_since(start);
        REQUIRE(sum == 0 && m[n - 1] == (unsigned int)(n - 1) * 7u + round + 10);
        best_touch = touch < best_touch ? touch : best_touch;
        best_copy = copy < best_copy ? copy : best_copy;
    }
    printf("time touch_64mib managed %.2f ms memcpy %.2f ms\n", best_touch, best_copy);
    CHECK(cudaFree(m));
    CHECK(cudaFree(d));
    printf("ok touch_64mib\n");
}

int main(int argc, char **argv)
{
    struct { const char *name; void (*run)(); } sections[] = {
        {"attributes", attributes}, {"vector_add", vector_add},
        {"host_writes_between_launches", host_writes_between_launches}, {"synchronisations", synchronisations},
        {"threads", threads}, {"managed_variables", managed_variables}, {"advice_and_prefetch", advice_and_prefetch},
        {"many_small", many_small}, {"copies", copies}, {"devices", devices}, {"forked", forked}, {"bad_input", bad_input},
        {"changed_chunks", changed_chunks}, {"touch_64mib", touch_64mib},
        {"host_waits_for_kernels", host_waits_for_kernels}, {"system_atomics", system_atomics},
        {"touch_only_what_is_read", touch_only_what_is_read}, {"prefetch_to_host", prefetch_to_host},
        {"system_call_after_sync", system_call_after_sync},
    };
    for (auto &section : sections) {
        bool wanted = argc == 1;
        for (int i = 1; i < argc; i++) wanted |= std::string(argv[i]) == section.name;
        if (wanted) section.run();
    }
    printf("PASSED managed_memory\n");
    return 0;
}
