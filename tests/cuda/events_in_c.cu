// cudaEventRecord and cudaStreamWaitEvent recorded in C with the launches
// (native/async_fast_path.c), and what stays Python's: an event on another
// device, a destroyed event, a wait with flags.  Whoever makes each call,
// the order and the errors must be CUDA's.
//
//   events_in_c LOOP [pool]   (on a server with two GPUs; kernels: stream_kernels.py)
//
// With `pool`, a memory pool frees memory in stream order first: from then
// on each record must note its place among the frees, which Python keeps.
//
// Prints PASSED.
#include <cstring>
#include <thread>
#include "check.h"

// Its time is modelled on the sim (stream_kernels.py COSTS): the stream it
// runs in is busy for `nanoseconds`.
__global__ void longKernel(int *flag, long long nanoseconds) {
    long long start = clock64();
    while (clock64() - start < nanoseconds) {}
    *flag = 42;
}
__global__ void addOne(const int *in, int *out) { *out = *in + 1; }

static void expect(bool ok, const char *what, int round) {
    if (!ok) {
        printf("FAILED %s (round %d)\n", what, round);
        exit(1);
    }
}

int main(int argc, char **argv) {
    int loop = argc > 1 ? atoi(argv[1]) : 100;
    int count = 0;
    CHECK(cudaGetDeviceCount(&count));
    expect(count >= 2, "two GPUs", 0);
    CHECK(cudaSetDevice(0));
    if (argc > 2 && strcmp(argv[2], "pool") == 0) {
        void *p;
        CHECK(cudaMallocAsync(&p, 1024, 0));
        CHECK(cudaFreeAsync(p, 0));
    }
    cudaStream_t a, b;
    CHECK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    int *d;
    CHECK(cudaMalloc(&d, 4 * sizeof(int)));
    CHECK(cudaMemset(d, 0, 4 * sizeof(int)));
    cudaEvent_t e, start, stop;
    CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));

    // A stream waiting for an event waits for the work before the record:
    // b is busy while a's long kernel runs, and the kernel after the wait
    // reads what it wrote.
    addOne<<<1, 1, 0, a>>>(d, d + 1);  // the kernels' first launches go through Python
    addOne<<<1, 1, 0, b>>>(d, d + 1);
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaEventRecord(start, a));
    longKernel<<<1, 1, 0, a>>>(d, 3000000000LL);
    CHECK(cudaEventRecord(e, a));
    CHECK(cudaStreamWaitEvent(b, e, 0));
    addOne<<<1, 1, 0, b>>>(d, d + 1);
    CHECK(cudaEventRecord(stop, b));
    expect(cudaEventQuery(e) == cudaErrorNotReady, "the event is not reached while the kernel runs", 0);
    expect(cudaStreamQuery(b) == cudaErrorNotReady, "the waiting stream is busy while the kernel runs", 0);
    CHECK(cudaStreamSynchronize(b));
    expect(cudaEventQuery(e) == cudaSuccess, "the event is reached once the waiting stream is done", 0);
    int h[4];
    CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    expect(h[0] == 42 && h[1] == 43, "the kernel after the wait reads the long kernel's result", 0);
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, start, stop));
    expect(ms >= 2500.0f, "the timed events span the long kernel", 0);

    // Many rounds: a -> record -> b waits -> b, in C.
    for (int i = 0; i < loop; i++) {
        addOne<<<1, 1, 0, a>>>(d + 1, d + 2);
        CHECK(cudaEventRecord(e, a));
        CHECK(cudaStreamWaitEvent(b, e, 0));
        addOne<<<1, 1, 0, b>>>(d + 2, d + 3);
        CHECK(cudaEventRecordWithFlags(e, b, 0));
        CHECK(cudaStreamWaitEvent(a, e, 0));
        addOne<<<1, 1, 0, a>>>(d + 3, d + 1);
    }
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    expect(h[1] == 43 + 3 * loop, "every round ran, in order", loop);

    // Two threads recording and waiting at once, each on its own streams.
    std::thread threads[2];
    int results[2] = {0, 0};
    for (int t = 0; t < 2; t++) {
        threads[t] = std::thread([t, loop, &results] {
            CHECK(cudaSetDevice(0));
            cudaStream_t x, y;
            cudaEvent_t mine;
            int *v;
            CHECK(cudaStreamCreateWithFlags(&x, cudaStreamNonBlocking));
            CHECK(cudaStreamCreateWithFlags(&y, cudaStreamNonBlocking));
            CHECK(cudaEventCreateWithFlags(&mine, cudaEventDisableTiming));
            CHECK(cudaMalloc(&v, 2 * sizeof(int)));
            CHECK(cudaMemset(v, 0, 2 * sizeof(int)));
            for (int i = 0; i < loop; i++) {
                addOne<<<1, 1, 0, x>>>(v + 1, v);
                CHECK(cudaEventRecord(mine, x));
                CHECK(cudaStreamWaitEvent(y, mine, 0));
                addOne<<<1, 1, 0, y>>>(v, v + 1);
                CHECK(cudaEventRecord(mine, y));
                CHECK(cudaStreamWaitEvent(x, mine, 0));
            }
            CHECK(cudaStreamSynchronize(x));
            CHECK(cudaMemcpy(&results[t], v + 1, sizeof(int), cudaMemcpyDeviceToHost));
            CHECK(cudaEventDestroy(mine));
            CHECK(cudaFree(v));
        });
    }
    for (auto &thread : threads) thread.join();
    expect(results[0] == 2 * loop && results[1] == 2 * loop, "two threads' rounds", loop);

    // What Python keeps: another device's event (a record into this
    // device's stream is refused, a wait on it is kept across GPUs), a
    // destroyed event, a wait with flags.
    CHECK(cudaSetDevice(1));
    cudaEvent_t other;
    CHECK(cudaEventCreate(&other));
    int *d1;
    CHECK(cudaMalloc(&d1, sizeof(int)));
    CHECK(cudaMemset(d1, 0, sizeof(int)));
    longKernel<<<1, 1>>>(d1, 1000000000LL);
    CHECK(cudaEventRecord(other, 0));
    CHECK(cudaSetDevice(0));
    expect(cudaEventRecord(other, a) == cudaErrorInvalidResourceHandle, "another device's event in this stream", 0);
    CHECK(cudaStreamWaitEvent(a, other, 0));
    CHECK(cudaMemcpyAsync(d + 3, d1, sizeof(int), cudaMemcpyDeviceToDevice, a));  // peer copy after the wait
    CHECK(cudaStreamSynchronize(a));
    CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    expect(h[3] == 42, "the wait on another device's event came before the copy", 0);
    CHECK(cudaStreamWaitEvent(a, e, cudaEventWaitExternal));
    cudaEvent_t gone;
    CHECK(cudaEventCreate(&gone));
    CHECK(cudaEventDestroy(gone));
    expect(cudaEventRecord(gone, a) == cudaErrorInvalidResourceHandle, "a destroyed event's record", 0);
    expect(cudaStreamWaitEvent(b, gone, 0) == cudaErrorInvalidResourceHandle, "a wait on a destroyed event", 0);
    CHECK(cudaDeviceSynchronize());

    CHECK(cudaEventDestroy(e));
    CHECK(cudaEventDestroy(start));
    CHECK(cudaEventDestroy(stop));
    CHECK(cudaFree(d));
    printf("PASSED\n");
    return 0;
}
