// Mapped (zero-copy) host memory through rcuda: cudaHostAlloc(Mapped) and
// cudaHostRegister(Mapped) memory that kernels read and write through its
// pointer, the host seeing their writes after a synchronisation and they
// the host's writes made before their launch; flags, attributes, pointer
// attributes; bad input; fork and signal handling around the memory.
//
//   mapped_memory [SECTION...]      (default: all; needs 2 devices for "devices")
//
// Each section prints "ok SECTION"; any failure prints "FAILED line N".
// The 64 MiB rounds print their timings ("time ...").
#include <chrono>
#include <csetjmp>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include "check.h"
#include "long_kernel.h"

__global__ void vectorAdd(const float *a, const float *b, float *c, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

// sum = the sum of data's words as they are; then each word becomes word * 3 + round.
__global__ void checksumAndBump(unsigned int *data, size_t n, unsigned long long *sum, unsigned int round)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) {
        atomicAdd(sum, (unsigned long long)data[i]);
        data[i] = data[i] * 3u + round;
    }
}

__global__ void copyInts(const int *in, int *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i];
}

__global__ void addOne(int *p, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] += 1;
}

static double ms_since(std::chrono::steady_clock::time_point start)
{
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

static int blocks(size_t n) { return (int)((n + 255) / 256); }

static void attributes()
{
    int value = -1;
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    CHECK(cudaDeviceGetAttribute(&value, cudaDevAttrCanMapHostMemory, 0));
    REQUIRE(value == 1 && prop.canMapHostMemory == 1);
    CHECK(cudaDeviceGetAttribute(&value, cudaDevAttrCanUseHostPointerForRegisteredMem, 0));
    REQUIRE(value == 0);
    CHECK(cudaDeviceGetAttribute(&value, cudaDevAttrUnifiedAddressing, 0));
    REQUIRE(value == 1);
    CHECK(cudaSetDeviceFlags(cudaDeviceMapHost));
    unsigned int flags = 0;
    CHECK(cudaGetDeviceFlags(&flags));
    REQUIRE(flags & cudaDeviceMapHost);
    printf("ok attributes\n");
}

// Zero-copy vector add on cudaHostAlloc(Mapped) memory: the host pointers go
// straight to the kernel (unified addressing).
static void alloc_vector_add()
{
    const int n = 100000;
    float *a, *b, *c;
    CHECK(cudaHostAlloc(&a, n * sizeof(float), cudaHostAllocMapped));
    CHECK(cudaHostAlloc(&b, n * sizeof(float), cudaHostAllocMapped | cudaHostAllocPortable));
    CHECK(cudaHostAlloc(&c, n * sizeof(float), cudaHostAllocMapped | cudaHostAllocWriteCombined));
    for (int i = 0; i < n; i++) {
        REQUIRE(a[i] == 0 && c[i] == 0);  // fresh memory reads 0 on both sides
        a[i] = (float)i;
        b[i] = 2.0f * i;
    }
    float *da, *db, *dc;
    CHECK(cudaHostGetDevicePointer((void **)&da, a, 0));
    CHECK(cudaHostGetDevicePointer((void **)&db, b, 0));
    CHECK(cudaHostGetDevicePointer((void **)&dc, c, 0));
    REQUIRE(da == a && db == b && dc == c);
    float *inside;
    CHECK(cudaHostGetDevicePointer((void **)&inside, a + 1000, 0));
    REQUIRE(inside == a + 1000);

    vectorAdd<<<blocks(n), 256>>>(a, b, c, n);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < n; i++) REQUIRE(c[i] == 3.0f * i);

    // The host changes a few inputs; the next kernel sees them.
    a[7] = 1000.0f;
    a[n - 1] = -5.0f;
    vectorAdd<<<blocks(n), 256>>>(da, db, dc, n);
    CHECK(cudaDeviceSynchronize());
    REQUIRE(c[7] == 1000.0f + 14.0f && c[n - 1] == -5.0f + 2.0f * (n - 1) && c[8] == 24.0f);

    unsigned int flags = 0;
    CHECK(cudaHostGetFlags(&flags, a));
    REQUIRE(flags == cudaHostAllocMapped);
    CHECK(cudaHostGetFlags(&flags, b));
    REQUIRE(flags == (cudaHostAllocMapped | cudaHostAllocPortable));
    CHECK(cudaHostGetFlags(&flags, c));
    REQUIRE(flags == (cudaHostAllocMapped | cudaHostAllocWriteCombined));

    cudaPointerAttributes attrs;
    CHECK(cudaPointerGetAttributes(&attrs, a + 5));
    REQUIRE(attrs.type == cudaMemoryTypeHost && attrs.device == 0);
    REQUIRE(attrs.hostPointer == a + 5 && attrs.devicePointer == a + 5);
    CHECK(cudaFreeHost(a));
    CHECK(cudaFreeHost(b));
    CHECK(cudaFreeHost(c));
    printf("ok alloc_vector_add\n");
}

// The same on the program's own memory, registered: the device pointer is
// another address.  Two registrations share a page (unaligned ranges).
static void register_vector_add()
{
    const int n = 50000;
    char *block = (char *)malloc(3 * n * sizeof(float) + 4096);
    float *a = (float *)(block + 4), *b = a + n, *c = b + n;  // b's first page is a's last
    for (int i = 0; i < n; i++) {
        a[i] = (float)i;
        b[i] = 0.5f * i;
        c[i] = -1.0f;
    }
    CHECK(cudaHostRegister(a, n * sizeof(float), cudaHostRegisterMapped));
    CHECK(cudaHostRegister(b, n * sizeof(float), cudaHostRegisterMapped));
    CHECK(cudaHostRegister(c, n * sizeof(float), cudaHostRegisterMapped | cudaHostRegisterPortable));
    float *da, *db, *dc;
    CHECK(cudaHostGetDevicePointer((void **)&da, a, 0));
    CHECK(cudaHostGetDevicePointer((void **)&db, b, 0));
    CHECK(cudaHostGetDevicePointer((void **)&dc, c, 0));
    REQUIRE(da != a && db != b && dc != c);

    vectorAdd<<<blocks(n), 256>>>(da, db, dc, n);
    CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < n; i++) REQUIRE(c[i] == 1.5f * i);
    REQUIRE(a[n - 1] == (float)(n - 1) && b[0] == 0.0f);  // the shared page kept both sides' bytes

    // Writes to either side of the shared page reach the device.
    a[n - 1] = 7.0f;
    b[0] = 11.0f;
    block[0] = 1;  // the other data on a's first page: no harm
    vectorAdd<<<blocks(n), 256>>>(da, db, dc, n);
    CHECK(cudaDeviceSynchronize());
    REQUIRE(c[n - 1] == 7.0f + 0.5f * (n - 1) && c[0] == 11.0f && c[1] == 1.5f);

    cudaPointerAttributes attrs;
    CHECK(cudaPointerGetAttributes(&attrs, a + 3));
    REQUIRE(attrs.type == cudaMemoryTypeHost && attrs.device == 0 && attrs.hostPointer == a + 3 &&
            attrs.devicePointer == da + 3);
    CHECK(cudaPointerGetAttributes(&attrs, dc + 9));
    REQUIRE(attrs.type == cudaMemoryTypeHost && attrs.hostPointer == c + 9 && attrs.devicePointer == dc + 9);
    unsigned int flags = 0;
    CHECK(cudaHostGetFlags(&flags, a));
    REQUIRE(flags == cudaHostRegisterMapped);

    CHECK(cudaHostUnregister(a));
    CHECK(cudaHostUnregister(b));
    CHECK(cudaHostUnregister(c));
    for (int i = 0; i < n; i++) a[i] = b[i] = c[i] = 0;  // plain memory again
    free(block);
    printf("ok register_vector_add\n");
}

static unsigned int pattern(size_t i, unsigned int round) { return (unsigned int)(i * 2654435761u) ^ round; }

// 64 MiB written by host and kernel in turns: the kernel checks the host's
// writes (its checksum of what it read), the host the kernel's (each word).
static void rounds_64mib()
{
    const size_t n = (64u << 20) / sizeof(unsigned int);
    unsigned int *data;
    unsigned long long *sum;
    CHECK(cudaHostAlloc(&data, n * sizeof(unsigned int), cudaHostAllocMapped));
    CHECK(cudaHostAlloc(&sum, sizeof(*sum), cudaHostAllocMapped));
    for (unsigned int round = 1; round <= 4; round++) {
        auto t0 = std::chrono::steady_clock::now();
        unsigned long long expected = 0;
        bool partial = round % 2 == 0;  // every 4096th word only: scattered dirty pages
        for (size_t i = 0; i < n; i++) {
            if (!partial || i % 4096 == 0) data[i] = pattern(i, round);
            expected += data[i];
        }
        *sum = 0;
        double write_ms = ms_since(t0);
        auto t1 = std::chrono::steady_clock::now();
        checksumAndBump<<<blocks(n), 256>>>(data, n, sum, round);
        CHECK(cudaGetLastError());
        CHECK(cudaDeviceSynchronize());
        double sync_ms = ms_since(t1);
        REQUIRE(*sum == expected);
        auto t2 = std::chrono::steady_clock::now();
        for (size_t i = 0; i < n; i += partial ? 4096 : 1) {  // the words the host wrote (the rest: next checksum)
            unsigned int wanted = pattern(i, round) * 3u + round;
            if (data[i] != wanted) {
                printf("FAILED line %d: round %u word %zu is %u, expected %u\n", __LINE__, round, i, data[i], wanted);
                exit(1);
            }
        }
        printf("time round %u (%s): host writes %.1f ms, launch + cudaDeviceSynchronize %.1f ms, host check %.1f ms\n",
               round, partial ? "every 4096th word" : "all words", write_ms, sync_ms, ms_since(t2));
    }
    CHECK(cudaFreeHost(data));
    CHECK(cudaFreeHost(sum));
    printf("ok rounds_64mib\n");
}

// A kernel in a non-blocking stream sees the host's writes although the
// legacy stream is busy with a long kernel.
static void nonblocking_stream()
{
    const int n = 1000;
    int *in, *out, *flag;
    cudaStream_t s;
    CHECK(cudaHostAlloc(&in, n * sizeof(int), cudaHostAllocMapped));
    CHECK(cudaHostAlloc(&out, n * sizeof(int), cudaHostAllocMapped));
    CHECK(cudaMalloc(&flag, sizeof(int)));
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK(cudaDeviceSynchronize());
    auto start = std::chrono::steady_clock::now();
    longKernel<<<1, 1>>>(flag, 1500 * 1000000LL);
    for (int i = 0; i < n; i++) in[i] = 3 * i + 1;
    copyInts<<<blocks(n), 256, 0, s>>>(in, out, n);
    CHECK(cudaStreamSynchronize(s));
    double waited = ms_since(start);
    for (int i = 0; i < n; i++) REQUIRE(out[i] == 3 * i + 1);
    REQUIRE(waited < 1200);  // did not wait for the legacy stream's kernel
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(flag));
    CHECK(cudaFreeHost(in));
    CHECK(cudaFreeHost(out));
    printf("ok nonblocking_stream (%.0f ms)\n", waited);
}

static int host_function_saw = -1;

static void CUDART_CB check_and_write(void *data)
{
    int *p = (int *)data;
    int good = 1;
    for (int i = 0; i < 100; i++) good &= p[i] == i + 1;  // the kernel before it ran
    host_function_saw = good;
    for (int i = 0; i < 100; i++) p[i] = 100 + i;  // the kernel after it sees this
}

// Host functions see the stream's kernels' writes; the stream's later
// kernels see theirs.  Events synchronise too, and so does a query that
// finds the work done.
static void host_function_and_events()
{
    int *p;
    cudaStream_t s;
    cudaEvent_t e;
    CHECK(cudaHostAlloc(&p, 100 * sizeof(int), cudaHostAllocMapped));
    CHECK(cudaStreamCreate(&s));
    CHECK(cudaEventCreate(&e));
    for (int i = 0; i < 100; i++) p[i] = i;
    addOne<<<1, 128, 0, s>>>(p, 100);
    CHECK(cudaLaunchHostFunc(s, check_and_write, p));
    addOne<<<1, 128, 0, s>>>(p, 100);
    CHECK(cudaStreamSynchronize(s));
    REQUIRE(host_function_saw == 1);
    for (int i = 0; i < 100; i++) REQUIRE(p[i] == 101 + i);

    addOne<<<1, 128, 0, s>>>(p, 100);
    CHECK(cudaEventRecord(e, s));
    CHECK(cudaEventSynchronize(e));
    for (int i = 0; i < 100; i++) REQUIRE(p[i] == 102 + i);

    addOne<<<1, 128, 0, s>>>(p, 100);  // a query that says it is done is as good as a synchronisation
    cudaError_t status;
    while ((status = cudaStreamQuery(s)) == cudaErrorNotReady) {
    }
    CHECK(status);
    for (int i = 0; i < 100; i++) REQUIRE(p[i] == 103 + i);
    CHECK(cudaEventDestroy(e));
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFreeHost(p));
    printf("ok host_function_and_events\n");
}

// cudaMemcpy and cudaMemset on mapped memory: it is host memory.
static void copies()
{
    const int n = 4096;
    int *h, *h2, *d, plain[n];
    CHECK(cudaHostAlloc(&h, n * sizeof(int), cudaHostAllocMapped));
    CHECK(cudaHostAlloc(&h2, n * sizeof(int), cudaHostAllocMapped));
    CHECK(cudaMalloc(&d, n * sizeof(int)));
    for (int i = 0; i < n; i++) h[i] = i * 7;
    CHECK(cudaMemcpy(d, h, n * sizeof(int), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(h2, d, n * sizeof(int), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) REQUIRE(h2[i] == i * 7);
    CHECK(cudaMemcpy(plain, h2, n * sizeof(int), cudaMemcpyDefault));
    for (int i = 0; i < n; i++) REQUIRE(plain[i] == i * 7);
    CHECK(cudaMemset(h2, 0, n * sizeof(int)));  // synchronous on pinned memory
    for (int i = 0; i < n; i++) REQUIRE(h2[i] == 0);
    CHECK(cudaMemcpy(h2 + 10, h + 20, 5 * sizeof(int), cudaMemcpyHostToHost));
    REQUIRE(h2[10] == 140 && h2[14] == 168 && h2[15] == 0);

    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    CHECK(cudaMemcpyAsync(h2, d, n * sizeof(int), cudaMemcpyDeviceToDevice, s));
    CHECK(cudaStreamSynchronize(s));
    for (int i = 0; i < n; i++) REQUIRE(h2[i] == i * 7);

    // A kernel writes mapped memory; a synchronous copy of other memory
    // synchronises the legacy stream, so the host sees the kernel's writes.
    addOne<<<blocks(n), 256>>>(h2, n);
    CHECK(cudaMemcpy(plain, d, sizeof(int), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) REQUIRE(h2[i] == i * 7 + 1);

    // Registered memory as a copy's destination and source.
    int *r = (int *)malloc(n * sizeof(int) + 64) + 3;
    for (int i = 0; i < n; i++) r[i] = -1;
    CHECK(cudaHostRegister(r, n * sizeof(int), cudaHostRegisterMapped));
    CHECK(cudaMemcpy(r, d, n * sizeof(int), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) REQUIRE(r[i] == i * 7);
    r[5] = 555;
    CHECK(cudaMemcpy(d, r, n * sizeof(int), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(plain, d, n * sizeof(int), cudaMemcpyDeviceToHost));
    REQUIRE(plain[5] == 555 && plain[6] == 42);
    CHECK(cudaHostUnregister(r));
    free(r - 3);
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(d));
    CHECK(cudaFreeHost(h));
    CHECK(cudaFreeHost(h2));
    printf("ok copies\n");
}

static void bad_input()
{
    void *p = nullptr;
    char *pinned, *mapped, *d;
    CHECK(cudaHostAlloc(&pinned, 4096, cudaHostAllocDefault));
    CHECK(cudaHostAlloc(&mapped, 4096, cudaHostAllocMapped));
    CHECK(cudaMalloc(&d, 4096));
    CHECK(cudaHostGetDevicePointer(&p, pinned, 0));  // unified addressing: all page-locked memory is mapped
    REQUIRE(p == pinned);
    char local[64];
    EXPECT_AND_CLEAR(cudaHostGetDevicePointer(&p, local, 0), cudaErrorInvalidValue);   // not pinned at all
    EXPECT_AND_CLEAR(cudaHostGetDevicePointer(&p, d, 0), cudaErrorInvalidValue);       // a device pointer
    EXPECT_AND_CLEAR(cudaHostGetDevicePointer(&p, mapped, 1), cudaErrorInvalidValue);  // flags must be 0
    EXPECT_AND_CLEAR(cudaHostGetDevicePointer(nullptr, mapped, 0), cudaErrorInvalidValue);
    EXPECT_AND_CLEAR(cudaFree(mapped), cudaErrorInvalidValue);  // not device memory
    EXPECT_AND_CLEAR(cudaHostRegister(mapped, 4096, cudaHostRegisterMapped), cudaErrorHostMemoryAlreadyRegistered);

    CHECK(cudaFreeHost(mapped));
    EXPECT_AND_CLEAR(cudaHostGetDevicePointer(&p, mapped, 0), cudaErrorInvalidValue);  // freed

    char *block = (char *)malloc(1 << 16);
    CHECK(cudaHostRegister(block + 1000, 20000, cudaHostRegisterMapped));
    EXPECT_AND_CLEAR(cudaHostRegister(block + 1000, 20000, cudaHostRegisterMapped),
                     cudaErrorHostMemoryAlreadyRegistered);                                       // twice
    EXPECT_AND_CLEAR(cudaHostRegister(block + 2000, 100, cudaHostRegisterMapped),
                     cudaErrorHostMemoryAlreadyRegistered);                                       // inside
    EXPECT_AND_CLEAR(cudaHostRegister(block, 30000, cudaHostRegisterDefault),
                     cudaErrorHostMemoryAlreadyRegistered);                                       // around
    EXPECT_AND_CLEAR(cudaHostRegister(block + 20000, 5000, cudaHostRegisterMapped),
                     cudaErrorHostMemoryAlreadyRegistered);                                       // across its end
    CHECK(cudaHostRegister(block + 21000, 100, cudaHostRegisterMapped));  // beside it, same page: fine
    CHECK(cudaHostGetDevicePointer(&p, block + 1000, 0));
    CHECK(cudaHostUnregister(block + 1000));
    EXPECT_AND_CLEAR(cudaHostGetDevicePointer(&p, block + 1000, 0), cudaErrorInvalidValue);  // unregistered
    EXPECT_AND_CLEAR(cudaHostUnregister(block + 1000), cudaErrorHostMemoryNotRegistered);
    EXPECT_AND_CLEAR(cudaHostRegister((void *)0x1000, 4096, cudaHostRegisterMapped), cudaErrorInvalidValue);
    memset(block, 5, 1 << 16);  // plain memory again, but for the other registration's pages
    CHECK(cudaHostUnregister(block + 21000));
    memset(block, 6, 1 << 16);
    free(block);

    // All is still well.
    int *q;
    CHECK(cudaHostAlloc(&q, 64 * sizeof(int), cudaHostAllocMapped));
    for (int i = 0; i < 64; i++) q[i] = i;
    addOne<<<1, 64>>>(q, 64);
    CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < 64; i++) REQUIRE(q[i] == i + 1);
    CHECK(cudaFreeHost(q));
    CHECK(cudaFreeHost(pinned));
    CHECK(cudaFree(d));
    printf("ok bad_input\n");
}

// Two devices: mapped memory belongs to the device current at its allocation.
static void devices()
{
    int count = 0;
    CHECK(cudaGetDeviceCount(&count));
    REQUIRE(count >= 2);
    int *on0, *portable, *on1;
    void *p;
    CHECK(cudaSetDevice(0));
    CHECK(cudaHostAlloc(&on0, 4096, cudaHostAllocMapped));
    CHECK(cudaHostAlloc(&portable, 4096, cudaHostAllocMapped | cudaHostAllocPortable));
    CHECK(cudaSetDevice(1));
    CHECK(cudaHostAlloc(&on1, 256 * sizeof(int), cudaHostAllocMapped));
    EXPECT_AND_CLEAR(cudaHostGetDevicePointer(&p, on0, 0), cudaErrorInvalidValue);       // another device's
    EXPECT_AND_CLEAR(cudaHostGetDevicePointer(&p, portable, 0), cudaErrorNotSupported);  // not on this one
    cudaPointerAttributes attrs;
    CHECK(cudaPointerGetAttributes(&attrs, on1));
    REQUIRE(attrs.type == cudaMemoryTypeHost && attrs.device == 1 && attrs.devicePointer == on1);
    for (int i = 0; i < 256; i++) on1[i] = 2 * i;
    addOne<<<1, 256>>>(on1, 256);
    CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < 256; i++) REQUIRE(on1[i] == 2 * i + 1);
    CHECK(cudaFreeHost(on1));
    CHECK(cudaSetDevice(0));
    CHECK(cudaHostGetDevicePointer(&p, portable, 0));
    CHECK(cudaFreeHost(on0));
    CHECK(cudaFreeHost(portable));
    printf("ok devices\n");
}

// A forked child gets the parent's mapped memory as plain memory; a crash
// there (or anywhere) is still a crash.
static void forked()
{
    int *p;
    CHECK(cudaHostAlloc(&p, 1 << 20, cudaHostAllocMapped));
    for (int i = 0; i < (1 << 18); i++) p[i] = i;
    addOne<<<blocks(1 << 18), 256>>>(p, 1 << 18);
    CHECK(cudaDeviceSynchronize());
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        for (int i = 0; i < (1 << 18); i++) p[i] = -p[i];  // its own copy, writable
        if (p[5] != -6) _exit(3);
        int *q;  // and mapped memory of its own, in its own session
        if (cudaHostAlloc(&q, 4096, cudaHostAllocMapped) != cudaSuccess) _exit(4);
        q[3] = 30;
        addOne<<<1, 32>>>(q, 32);
        if (cudaDeviceSynchronize() != cudaSuccess || q[3] != 31 || q[4] != 1) _exit(5);
        _exit(0);
    }
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        printf("child status %d exited %d code %d signal %d\n", status, WIFEXITED(status), WEXITSTATUS(status),
               WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    REQUIRE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    REQUIRE(p[5] == 6);
    child = fork();
    if (child == 0) {
        struct rlimit none = {0, 0};
        setrlimit(RLIMIT_CORE, &none);
        void *guard = mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        *(volatile int *)guard = 1;  // a real crash
        _exit(4);
    }
    REQUIRE(waitpid(child, &status, 0) == child && WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV);
    p[7] = 100;  // the parent's memory is still mapped memory
    addOne<<<1, 32>>>(p, 32);
    CHECK(cudaDeviceSynchronize());
    REQUIRE(p[7] == 101 && p[8] == 10);
    CHECK(cudaFreeHost(p));
    printf("ok forked\n");
}

// Threads writing their own mapped memory while other threads' synchronisations
// (which download every mapped range of the device) come and go: no write is
// lost, none misses the device.  Even threads use cudaHostAlloc'd memory, odd
// ones registered memory.
static void threads()
{
    const int count = 4, n = 1 << 16, rounds = 25;
    std::vector<std::thread> workers;
    std::vector<int> failures(count, 0);
    for (int t = 0; t < count; t++) {
        workers.emplace_back([t, &failures] {
            int *p, *block = nullptr;
            cudaStream_t s;
            if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) { failures[t] = -1; return; }
            if (t % 2 == 0) {
                if (cudaHostAlloc(&p, n * sizeof(int), cudaHostAllocMapped) != cudaSuccess) { failures[t] = -2; return; }
            } else {
                block = (int *)malloc(n * sizeof(int) + 64);
                p = block + 5;
                if (cudaHostRegister(p, n * sizeof(int), cudaHostRegisterMapped) != cudaSuccess) { failures[t] = -3; return; }
            }
            int *d;
            cudaHostGetDevicePointer((void **)&d, p, 0);
            for (int r = 0; r < rounds; r++) {
                for (int i = 0; i < n; i++) p[i] = r * 1000 + i;
                addOne<<<blocks(n), 256, 0, s>>>(d, n);
                if (cudaStreamSynchronize(s) != cudaSuccess) { failures[t] = -4; return; }
                for (int i = 0; i < n; i++)
                    if (p[i] != r * 1000 + i + 1) { failures[t]++; break; }
            }
            if (block) { cudaHostUnregister(p); free(block); } else { cudaFreeHost(p); }
            cudaStreamDestroy(s);
        });
    }
    for (auto &w : workers) w.join();
    for (int t = 0; t < count; t++) {
        if (failures[t]) printf("thread %d: %d\n", t, failures[t]);
        REQUIRE(failures[t] == 0);
    }
    printf("ok threads\n");
}

static sigjmp_buf program_jump;
static volatile sig_atomic_t program_handler_calls = 0;

static void program_handler(int, siginfo_t *, void *)
{
    program_handler_calls = program_handler_calls + 1;
    siglongjmp(program_jump, 1);
}

// The program's own SIGSEGV handler still gets the faults that are not
// mapped memory's.
static void signals()
{
    // The program installs its handler after rcuda installed its own (at an
    // earlier section's first mapped allocation, if any): rcuda's goes in
    // front again at the next one, and passes the program's faults on.
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = program_handler;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    sigaction(SIGSEGV, &action, nullptr);
    int *p;
    CHECK(cudaHostAlloc(&p, 8192, cudaHostAllocMapped));
    p[0] = 1;  // a fault rcuda takes
    REQUIRE(program_handler_calls == 0);
    void *guard = mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (sigsetjmp(program_jump, 1) == 0) {
        *(volatile int *)guard = 1;
        REQUIRE(false);
    }
    REQUIRE(program_handler_calls == 1);
    p[2000] = 2;
    REQUIRE(program_handler_calls == 1);
    addOne<<<1, 32>>>(p, 1);
    CHECK(cudaDeviceSynchronize());
    REQUIRE(p[0] == 2 && p[2000] == 2);
    CHECK(cudaFreeHost(p));
    munmap(guard, 4096);
    printf("ok signals\n");
}

int main(int argc, char **argv)
{
    struct { const char *name; void (*run)(); } sections[] = {
        {"attributes", attributes}, {"alloc_vector_add", alloc_vector_add},
        {"register_vector_add", register_vector_add}, {"rounds_64mib", rounds_64mib},
        {"nonblocking_stream", nonblocking_stream}, {"host_function_and_events", host_function_and_events},
        {"copies", copies}, {"bad_input", bad_input}, {"devices", devices}, {"threads", threads},
        {"forked", forked}, {"signals", signals},
    };
    for (auto &section : sections) {
        bool wanted = argc == 1;
        for (int i = 1; i < argc; i++) wanted |= std::string(argv[i]) == section.name;
        if (wanted) section.run();
    }
    // Left for the exit to tidy: mapped memory with the host's unsent writes.
    int *left;
    CHECK(cudaHostAlloc(&left, 1 << 16, cudaHostAllocMapped));
    left[0] = 1;
    printf("PASSED mapped_memory\n");
    return 0;
}
