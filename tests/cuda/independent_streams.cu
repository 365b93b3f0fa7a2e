// Streams stay independent end to end: while one host thread waits on a
// stream behind a long kernel, another thread's calls on the same GPU
// (synchronising an idle stream, copying on a third stream, queries,
// events) come back at once, as on a local GPU.
//
//   independent_streams KERNEL_MS
//
// The long kernel runs KERNEL_MS milliseconds (on a GPU it spins on the
// global timer; on a sim server its plugin's COSTS says so).  Passes when
// the second thread finished all its calls before the first thread's wait
// ended, and the results are right.  Prints how long each took.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include "check.h"
#include "long_kernel.h"

__global__ void addOne(const int *in, int *out)
{
    *out = *in + 1;
}

static double ms_since(std::chrono::steady_clock::time_point start)
{
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

int main(int argc, char **argv)
{
    long long kernel_ms = argc > 1 ? atoll(argv[1]) : 2000;
    int *flag, *after, *scratch;
    cudaStream_t busy, idle, copies;
    cudaEvent_t done_event, idle_event;
    CHECK(cudaMalloc(&flag, sizeof(int)));
    CHECK(cudaMalloc(&after, sizeof(int)));
    CHECK(cudaMalloc(&scratch, 1 << 20));
    CHECK(cudaMemset(flag, 0, sizeof(int)));
    CHECK(cudaMemset(after, 0, sizeof(int)));
    CHECK(cudaStreamCreateWithFlags(&busy, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&idle, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&copies, cudaStreamNonBlocking));
    CHECK(cudaEventCreate(&done_event));
    CHECK(cudaEventCreate(&idle_event));
    CHECK(cudaDeviceSynchronize());

    // The busy stream: the long kernel, then an event the idle stream's
    // later work waits for (its result must see the long kernel's).
    longKernel<<<1, 1, 0, busy>>>(flag, kernel_ms * 1000000LL);
    CHECK(cudaGetLastError());
    CHECK(cudaEventRecord(done_event, busy));

    std::atomic<bool> waiter_done{false}, other_done{false}, other_ok{true};
    double waited_ms = 0;
    auto started = std::chrono::steady_clock::now();
    std::thread waiter([&] {
        CHECK(cudaStreamSynchronize(busy));
        waited_ms = ms_since(started);
        waiter_done = true;
    });
    std::thread other([&] {
        // Calls on the same GPU while the waiter waits: none may wait for the long kernel.
        auto t = std::chrono::steady_clock::now();
        CHECK(cudaStreamSynchronize(idle));
        double idle_sync = ms_since(t);
        t = std::chrono::steady_clock::now();
        static char host[1 << 20], back[1 << 20];
        for (int i = 0; i < (1 << 20); i++)
            host[i] = (char)(i * 7);
        CHECK(cudaMemcpyAsync(scratch, host, sizeof host, cudaMemcpyHostToDevice, copies));
        CHECK(cudaMemcpyAsync(back, scratch, sizeof back, cudaMemcpyDeviceToHost, copies));
        CHECK(cudaStreamSynchronize(copies));
        double copy = ms_since(t);
        for (int i = 0; i < (1 << 20); i++)
            if (back[i] != host[i]) {
                printf("FAILED: the copy on the third stream came back wrong at byte %d\n", i);
                other_ok = false;
                break;
            }
        t = std::chrono::steady_clock::now();
        size_t free_bytes, total;
        CHECK(cudaMemGetInfo(&free_bytes, &total));
        if (cudaStreamQuery(busy) != cudaErrorNotReady) {
            printf("FAILED: cudaStreamQuery(busy) is not cudaErrorNotReady during the long kernel\n");
            other_ok = false;
        }
        CHECK(cudaEventRecord(idle_event, idle));
        CHECK(cudaEventSynchronize(idle_event));
        if (cudaEventQuery(done_event) != cudaErrorNotReady) {
            printf("FAILED: cudaEventQuery(done_event) is not cudaErrorNotReady during the long kernel\n");
            other_ok = false;
        }
        double queries = ms_since(t);
        other_done = true;
        printf("other thread: idle sync %.1f ms, 1 MiB copies on a third stream %.1f ms, queries and an "
               "idle event %.1f ms\n", idle_sync, copy, queries);
    });
    other.join();
    bool other_first = !waiter_done;
    waiter.join();
    printf("waiter: %.1f ms behind a %lld ms kernel\n", waited_ms, kernel_ms);

    // Events across streams: the idle stream waits for the long kernel's event.
    CHECK(cudaStreamWaitEvent(idle, done_event, 0));
    addOne<<<1, 1, 0, idle>>>(flag, after);
    int result = 0;
    CHECK(cudaMemcpyAsync(&result, after, sizeof result, cudaMemcpyDeviceToHost, idle));
    CHECK(cudaStreamSynchronize(idle));
    if (result != 43) {
        printf("FAILED: the kernel after cudaStreamWaitEvent read %d, expected 42 + 1\n", result - 1);
        return 1;
    }
    if (!other_first) {
        printf("FAILED: the other thread's calls waited for the long kernel\n");
        return 1;
    }
    if (waited_ms < kernel_ms * 0.9) {
        printf("FAILED: the waiter returned after %.1f ms, before its %lld ms kernel ended\n", waited_ms, kernel_ms);
        return 1;
    }
    if (!other_ok)
        return 1;
    CHECK(cudaStreamDestroy(busy));
    CHECK(cudaStreamDestroy(idle));
    CHECK(cudaStreamDestroy(copies));
    printf("PASSED independent_streams\n");
    return 0;
}
