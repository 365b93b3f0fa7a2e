// Streams, events, host functions, default streams, sticky errors, exit and
// fork: an ordinary CUDA program, one scenario per argument.  Each scenario
// prints "ok <name>" when every check passed, "FAILED ..." otherwise.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>
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
__global__ void sleepKernel(int ms) {
    long long until = clock64() + (long long)ms * 1000000;  // ~1 GHz: about ms milliseconds
    while (clock64() < until) {}
}
__global__ void outOfBounds(int *x) { x[1 << 20] = 1; }
__global__ void printKernel(int v) { printf("device says %d\n", v); }
__global__ void markKernel(int tag) {}

static const int N = 4096;
static double ms_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

static void streams() {
    int least = 1, greatest = 1;
    CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    printf("priority range %d %d\n", least, greatest);
    cudaStream_t s1, s2, s3;
    CHECK(cudaStreamCreate(&s1));
    CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithPriority(&s3, cudaStreamDefault, greatest - 10));  // clamped
    unsigned int flags = 9;
    int priority = 9, device = 9;
    CHECK(cudaStreamGetFlags(s2, &flags));
    CHECK(cudaStreamGetPriority(s3, &priority));
    CHECK(cudaStreamGetDevice(s1, &device));
    REQUIRE(flags == cudaStreamNonBlocking && priority == greatest && device == 0);
    EXPECT(cudaStreamCreateWithFlags(&s3, 0x40), cudaErrorInvalidValue);
    EXPECT(cudaGetLastError(), cudaErrorInvalidValue);  // and cleared
    CHECK(cudaGetLastError());

    int *d, *h;
    CHECK(cudaMalloc(&d, N * sizeof(int)));
    CHECK(cudaMallocHost(&h, N * sizeof(int)));
    cudaEvent_t filled;
    CHECK(cudaEventCreate(&filled));
    fillKernel<<<N / 256, 256, 0, s1>>>(d, 7, N);
    CHECK(cudaEventRecord(filled, s1));
    CHECK(cudaStreamWaitEvent(s2, filled, 0));
    addKernel<<<N / 256, 256, 0, s2>>>(d, 5, N);
    CHECK(cudaMemcpyAsync(h, d, N * sizeof(int), cudaMemcpyDeviceToHost, s2));
    CHECK(cudaStreamSynchronize(s2));
    for (int i = 0; i < N; i++) REQUIRE(h[i] == 12);
    CHECK(cudaStreamQuery(s2));
    CHECK(cudaStreamQuery(0));

    CHECK(cudaStreamDestroy(s1));
    EXPECT(cudaStreamSynchronize(s1), cudaErrorInvalidResourceHandle);
    EXPECT(cudaStreamDestroy(s1), cudaErrorInvalidResourceHandle);
    EXPECT(cudaGetLastError(), cudaErrorInvalidResourceHandle);
    fillKernel<<<1, 1, 0, s1>>>(d, 1, 1);  // a launch into a destroyed stream
    EXPECT(cudaGetLastError(), cudaErrorInvalidResourceHandle);
    EXPECT(cudaStreamDestroy(0), cudaErrorInvalidResourceHandle);
    EXPECT(cudaGetLastError(), cudaErrorInvalidResourceHandle);
    CHECK(cudaGetLastError());
    CHECK(cudaStreamDestroy(s2));
    CHECK(cudaStreamDestroy(s3));
    CHECK(cudaEventDestroy(filled));
    CHECK(cudaFreeHost(h));
    CHECK(cudaFree(d));
    printf("ok streams\n");
}

static void events() {
    cudaEvent_t start, stop, untimed;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreateWithFlags(&stop, cudaEventBlockingSync));
    CHECK(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming));
    float ms = -1;
    EXPECT(cudaEventElapsedTime(&ms, start, stop), cudaErrorInvalidResourceHandle);  // never recorded
    CHECK(cudaEventQuery(start));                                                  // never recorded: done
    sleepKernel<<<1, 1>>>(0);  // first launch registers the kernel: a round trip, not timed below
    CHECK(cudaDeviceSynchronize());

    auto t0 = std::chrono::steady_clock::now();
    CHECK(cudaEventRecord(start, 0));
    sleepKernel<<<1, 1>>>(300);
    CHECK(cudaEventRecord(stop, 0));
    printf("launch returned after %.1f ms\n", ms_since(t0));
    CHECK(cudaEventSynchronize(stop));
    printf("synchronized after %.1f ms\n", ms_since(t0));
    CHECK(cudaEventQuery(stop));
    CHECK(cudaEventElapsedTime(&ms, start, stop));
    printf("elapsed %.1f ms\n", ms);

    CHECK(cudaEventRecord(untimed, 0));
    CHECK(cudaEventSynchronize(untimed));
    EXPECT(cudaEventElapsedTime(&ms, start, untimed), cudaErrorInvalidResourceHandle);
    CHECK(cudaEventDestroy(stop));
    EXPECT(cudaEventQuery(stop), cudaErrorInvalidResourceHandle);
    EXPECT(cudaEventRecord(stop, 0), cudaErrorInvalidResourceHandle);
    EXPECT(cudaEventCreateWithFlags(&stop, 0x80), cudaErrorInvalidValue);
    EXPECT(cudaGetLastError(), cudaErrorInvalidValue);
    CHECK(cudaEventDestroy(start));
    CHECK(cudaEventDestroy(untimed));
    printf("ok events\n");
}

struct CallbackLog {
    int *pinned;
    int order[4];
    std::atomic<int> count{0};
    bool saw_filled = false;
    cudaError_t status = cudaErrorUnknown;
    cudaError_t call_inside = cudaSuccess;
};

static void CUDART_CB checkThenPrepare(void *data) {
    CallbackLog *log = (CallbackLog *)data;
    log->order[log->count++] = 1;
    log->saw_filled = true;
    for (int i = 0; i < N; i++) log->saw_filled &= log->pinned[i] == 3;  // the copy before us landed
    for (int i = 0; i < N; i++) log->pinned[i] = 40;                       // the copy after us sends this
    void *p = nullptr;
    log->call_inside = cudaMalloc(&p, 16);  // CUDA calls are not allowed here
}

static void CUDART_CB afterwards(cudaStream_t, cudaError_t status, void *data) {
    CallbackLog *log = (CallbackLog *)data;
    log->order[log->count++] = 2;
    log->status = status;
}

static void callbacks() {
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    int *d, *h, *result;
    CHECK(cudaMalloc(&d, N * sizeof(int)));
    CHECK(cudaHostAlloc(&h, N * sizeof(int), cudaHostAllocDefault));
    CHECK(cudaMallocHost(&result, N * sizeof(int)));
    CallbackLog log;
    log.pinned = h;
    fillKernel<<<N / 256, 256, 0, s>>>(d, 3, N);
    CHECK(cudaMemcpyAsync(h, d, N * sizeof(int), cudaMemcpyDeviceToHost, s));
    CHECK(cudaLaunchHostFunc(s, checkThenPrepare, &log));
    CHECK(cudaMemcpyAsync(d, h, N * sizeof(int), cudaMemcpyHostToDevice, s));  // reads h after the callback
    addKernel<<<N / 256, 256, 0, s>>>(d, 2, N);
    CHECK(cudaMemcpyAsync(result, d, N * sizeof(int), cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamAddCallback(s, afterwards, &log, 0));
    CHECK(cudaStreamSynchronize(s));
    REQUIRE(log.count == 2 && log.order[0] == 1 && log.order[1] == 2);
    REQUIRE(log.saw_filled);
    REQUIRE(log.status == cudaSuccess);
    REQUIRE(log.call_inside == cudaErrorNotPermitted);
    for (int i = 0; i < N; i++) REQUIRE(result[i] == 42);
    EXPECT(cudaLaunchHostFunc(s, nullptr, nullptr), cudaErrorInvalidValue);
    EXPECT(cudaGetLastError(), cudaErrorInvalidValue);
    CHECK(cudaStreamDestroy(s));
    printf("ok callbacks\n");
}

// Which stream does "stream 0" mean in this thread?  With the legacy default
// stream every thread shares one; with --default-stream per-thread each has
// its own.  Each thread also uses its stream 0 for real work.
static void default_streams() {
    unsigned long long legacy = 0;
    CHECK(cudaStreamGetId(cudaStreamLegacy, &legacy));
    unsigned long long ids[2] = {0, 0};
    bool good[2] = {false, false};
    std::vector<std::thread> threads;
    for (int t = 0; t < 2; t++) {
        threads.emplace_back([t, &ids, &good] {
            cudaStreamGetId(0, &ids[t]);
            int *d, h[64];
            cudaMalloc(&d, sizeof(h));
            fillKernel<<<1, 64>>>(d, 10 + t, 64);
            cudaMemcpyAsync(h, d, sizeof(h), cudaMemcpyDeviceToHost, 0);
            cudaStreamSynchronize(0);
            good[t] = cudaGetLastError() == cudaSuccess;
            for (int i = 0; i < 64; i++) good[t] &= h[i] == 10 + t;
            cudaFree(d);
        });
    }
    for (auto &t : threads) t.join();
    REQUIRE(good[0] && good[1]);
    printf("stream ids: legacy=%llu thread0=%llu thread1=%llu\n", legacy, ids[0], ids[1]);
    printf("%s\n", ids[0] == ids[1] ? "shared default stream" : "per-thread default streams");
    printf("ok default_streams\n");
}

static void sticky() {
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    int *d;
    CHECK(cudaMalloc(&d, 64));
    for (int i = 0; i < 3; i++) fillKernel<<<1, 16, 0, s>>>(d, i, 16);  // known: later launches take the C path
    outOfBounds<<<1, 1, 0, s>>>(d);
    CHECK(cudaGetLastError());                                        // the launch itself is fine
    EXPECT(cudaStreamSynchronize(s), cudaErrorIllegalAddress);        // reported at the next sync
    EXPECT(cudaMalloc(&d, 64), cudaErrorIllegalAddress);              // sticky
    EXPECT(cudaGetLastError(), cudaErrorIllegalAddress);
    EXPECT(cudaGetLastError(), cudaErrorIllegalAddress);
    fillKernel<<<1, 16, 0, s>>>(d, 9, 16);                             // refused too, C path or not
    EXPECT(cudaGetLastError(), cudaErrorIllegalAddress);
    CHECK(cudaDeviceReset());                                          // a fresh context
    CHECK(cudaGetLastError());
    int h[N];
    CHECK(cudaMalloc(&d, N * sizeof(int)));
    fillKernel<<<N / 256, 256>>>(d, 5, N);
    CHECK(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost));
    for (int i = 0; i < N; i++) REQUIRE(h[i] == 5);
    printf("ok sticky\n");
}

// Many small launches (recorded in C, shipped in batches) interleaved with
// other calls, and from several threads at once: order must hold.
static void launch_batches() {
    int *d, *h;
    CHECK(cudaMalloc(&d, N * sizeof(int)));
    CHECK(cudaMemset(d, 0, N * sizeof(int)));
    CHECK(cudaMallocHost(&h, 10 * N * sizeof(int)));
    for (int r = 0; r < 10; r++) {
        for (int i = 0; i < 200; i++) addKernel<<<N / 256, 256>>>(d, 1, N);
        CHECK(cudaMemcpyAsync(h + r * N, d, N * sizeof(int), cudaMemcpyDeviceToHost, 0));
    }
    CHECK(cudaDeviceSynchronize());
    for (int r = 0; r < 10; r++)
        for (int i = 0; i < N; i += 97) REQUIRE(h[r * N + i] == (r + 1) * 200);
    std::vector<std::thread> threads;
    std::atomic<int> good{0};
    for (int t = 0; t < 4; t++) {
        threads.emplace_back([t, &good] {
            cudaStream_t s;
            int *buf, back[256];
            cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
            cudaMalloc(&buf, sizeof(back));
            cudaMemsetAsync(buf, 0, sizeof(back), s);
            for (int i = 0; i < 500; i++) addKernel<<<1, 256, 0, s>>>(buf, t + 1, 256);
            cudaMemcpyAsync(back, buf, sizeof(back), cudaMemcpyDeviceToHost, s);
            cudaStreamSynchronize(s);
            bool ok = cudaGetLastError() == cudaSuccess;
            for (int i = 0; i < 256; i++) ok &= back[i] == 500 * (t + 1);
            good += ok;
        });
    }
    for (auto &t : threads) t.join();
    REQUIRE(good == 4);
    printf("ok launch_batches\n");
}

static void printing() {
    printf("before\n");
    printKernel<<<1, 1>>>(5);
    CHECK(cudaDeviceSynchronize());
    printf("after\n");
    printKernel<<<1, 1>>>(6);
    CHECK(cudaDeviceSynchronize());
    printf("ok printing\n");
}

// Queued asynchronous work and no final synchronisation: nothing may be lost.
static void exit_without_sync(int launches) {
    int *d;
    CHECK(cudaMalloc(&d, N * sizeof(int)));
    for (int i = 0; i < launches; i++) {
        markKernel<<<1, 1>>>(i);
        CHECK(cudaMemsetAsync(d, i, N * sizeof(int), 0));
    }
    printf("queued %d\n", launches);
}

// A long kernel, then a synchronisation: it must wait as long as the kernel
// runs (a busy server is alive), and fail, not hang, if the server dies.
static void sync_long(int ms) {
    sleepKernel<<<1, 1>>>(0);
    CHECK(cudaDeviceSynchronize());
    auto t0 = std::chrono::steady_clock::now();
    sleepKernel<<<1, 1>>>(ms);
    printf("syncing\n");
    fflush(stdout);
    cudaError_t err = cudaDeviceSynchronize();
    printf("sync -> %s after %.1f s\n", cudaGetErrorName(err), ms_since(t0) / 1000);
}

// Threads started before the first CUDA call race to initialise the runtime.
static void racing_threads() {
    std::vector<std::thread> threads;
    std::atomic<int> good{0};
    for (int t = 0; t < 6; t++) {
        threads.emplace_back([t, &good] {
            int count = 0, *d, h[256];
            bool ok = cudaGetDeviceCount(&count) == cudaSuccess && count == 1;
            ok &= cudaSetDevice(0) == cudaSuccess && cudaMalloc(&d, sizeof(h)) == cudaSuccess;
            fillKernel<<<1, 256>>>(d, 100 + t, 256);
            ok &= cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost) == cudaSuccess;
            for (int i = 0; i < 256; i++) ok &= h[i] == 100 + t;
            good += ok && cudaFree(d) == cudaSuccess;
        });
    }
    for (auto &t : threads) t.join();
    REQUIRE(good == 6);
    printf("ok threads\n");
}

static void forking() {
    int *d, h[N];
    CHECK(cudaMalloc(&d, N * sizeof(int)));
    fillKernel<<<N / 256, 256>>>(d, 21, N);
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {  // the child has no CUDA context of its own yet: it gets a new one
        int count = 0, *c;
        CHECK(cudaGetDeviceCount(&count));
        CHECK(cudaMalloc(&c, N * sizeof(int)));
        fillKernel<<<N / 256, 256>>>(c, 8, N);
        CHECK(cudaMemcpy(h, c, sizeof(h), cudaMemcpyDeviceToHost));
        for (int i = 0; i < N; i++) REQUIRE(h[i] == 8);
        printf("child ok (%d devices)\n", count);
        exit(0);
    }
    int status = -1;
    waitpid(child, &status, 0);
    REQUIRE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost));
    for (int i = 0; i < N; i++) REQUIRE(h[i] == 21);
    printf("ok fork\n");
}

// fork() before the program's first CUDA call: the client has not started
// (its module registrations wait in C), so parent and child each start their
// own, each with the program's kernels.
static void forking_first() {
    int h[N];
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        int *c;
        CHECK(cudaMalloc(&c, N * sizeof(int)));
        fillKernel<<<N / 256, 256>>>(c, 5, N);
        CHECK(cudaMemcpy(h, c, sizeof(h), cudaMemcpyDeviceToHost));
        for (int i = 0; i < N; i++) REQUIRE(h[i] == 5);
        printf("child ok\n");
        exit(0);
    }
    int status = -1, *d;
    waitpid(child, &status, 0);
    REQUIRE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(cudaMalloc(&d, N * sizeof(int)));
    fillKernel<<<N / 256, 256>>>(d, 6, N);
    addKernel<<<N / 256, 256>>>(d, 1, N);
    CHECK(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost));
    for (int i = 0; i < N; i++) REQUIRE(h[i] == 7);
    printf("ok fork_first\n");
}

int main(int argc, char **argv) {
    const char *what = argc > 1 ? argv[1] : "streams";
    if (!strcmp(what, "streams")) streams();
    else if (!strcmp(what, "events")) events();
    else if (!strcmp(what, "callbacks")) callbacks();
    else if (!strcmp(what, "default_streams")) default_streams();
    else if (!strcmp(what, "sticky")) sticky();
    else if (!strcmp(what, "launch_batches")) launch_batches();
    else if (!strcmp(what, "printing")) printing();
    else if (!strcmp(what, "exit")) exit_without_sync(argc > 2 ? atoi(argv[2]) : 100);
    else if (!strcmp(what, "fork")) forking();
    else if (!strcmp(what, "fork_first")) forking_first();
    else if (!strcmp(what, "sync_long")) sync_long(argc > 2 ? atoi(argv[2]) : 1000);
    else if (!strcmp(what, "exit_long")) { sleepKernel<<<1, 1>>>(0); cudaDeviceSynchronize();
        sleepKernel<<<1, 1>>>(argc > 2 ? atoi(argv[2]) : 1000); printf("exiting\n"); fflush(stdout); }
    else if (!strcmp(what, "threads")) racing_threads();
    else { printf("unknown scenario %s\n", what); return 2; }
    return 0;
}
