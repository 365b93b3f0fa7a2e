// Asynchronous launch throughput from one host thread.
//
//   launch LAUNCHES REPEATS [empty|params|checked|memset|upload|step|events]
//
// Each repeat launches a kernel LAUNCHES times, then synchronises.  Prints
// one RESULT line (JSON) with, per repeat, the seconds the launch loop took
// (what the program waits for) and the seconds until the device was done.
// `params` launches a kernel with four parameters (two pointers, a float, an
// int) to show what packing arguments costs; `checked` follows every launch
// of the empty kernel with cudaGetLastError, as careful programs do.
// `memset` and `upload` make the loop's call a 4 KiB cudaMemsetAsync or
// cudaMemcpyAsync from pageable memory instead, and `step` all three in a
// row (a memset, an upload, a launch: a training loop's pattern), LAUNCHES
// calls in all.  `pinned` is `params` while 64 page-locked allocations
// (cudaMallocHost) exist, none passed to the kernel: C then looks at each
// launch's parameters for their addresses (client/memory/pinned.py).
// `events` hands work from one stream to another, a multi-stream program's
// pattern: a launch in stream a, cudaEventRecord in a, cudaStreamWaitEvent
// in b, a launch in b (LAUNCHES calls in all).
#include <cstring>
#include "bench_common.h"

__global__ void empty_kernel() {}

__global__ void params_kernel(float *y, const float *x, float a, int n) {
    (void)y; (void)x; (void)a; (void)n;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s LAUNCHES REPEATS [empty|params|checked]\n", argv[0]);
        return 2;
    }
    long launches = atol(argv[1]);
    int repeats = atoi(argv[2]);
    const char *kind = argc > 3 ? argv[3] : "empty";
    bool pinned = strcmp(kind, "pinned") == 0;
    bool with_params = strcmp(kind, "params") == 0 || pinned, checked = strcmp(kind, "checked") == 0;
    bool memsets = strcmp(kind, "memset") == 0, uploads = strcmp(kind, "upload") == 0, steps = strcmp(kind, "step") == 0;
    bool events = strcmp(kind, "events") == 0;
    cudaStream_t a, b;
    cudaEvent_t handed;
    CHECK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    CHECK(cudaEventCreateWithFlags(&handed, cudaEventDisableTiming));
    float *buffer = nullptr;
    CHECK(cudaMalloc(&buffer, 2 * 256 * sizeof(float)));
    const size_t bytes = 4096;
    char *target = nullptr, *source = (char *)calloc(bytes, 1);
    CHECK(cudaMalloc(&target, bytes));
    void *page_locked[64] = {};
    for (int i = 0; pinned && i < 64; i++) CHECK(cudaMallocHost(&page_locked[i], 4096));
    // Warm-up: the first launch of a kernel registers it (a round trip in rcuda).
    empty_kernel<<<1, 1>>>();
    empty_kernel<<<1, 1, 0, a>>>();
    empty_kernel<<<1, 1, 0, b>>>();
    params_kernel<<<1, 1>>>(buffer, buffer + 256, 2.0f, 256);
    CHECK(cudaDeviceSynchronize());
    printf("RESULT {\"kernel\": \"%s\", \"launches\": %ld, \"loop_s\": [", kind, launches);
    for (int r = 0; r < repeats; r++) {
        long long started = now_ns();
        if (with_params)
            for (long i = 0; i < launches; i++) params_kernel<<<1, 32>>>(buffer, buffer + 256, 2.0f, (int)i);
        else if (checked)
            for (long i = 0; i < launches; i++) {
                empty_kernel<<<1, 32>>>();
                CHECK(cudaGetLastError());
            }
        else if (memsets)
            for (long i = 0; i < launches; i++) CHECK(cudaMemsetAsync(target, (int)i, bytes, 0));
        else if (uploads)
            for (long i = 0; i < launches; i++) CHECK(cudaMemcpyAsync(target, source, bytes, cudaMemcpyHostToDevice, 0));
        else if (steps)
            for (long i = 0; i < launches; i += 3) {
                CHECK(cudaMemsetAsync(target, 0, bytes, 0));
                CHECK(cudaMemcpyAsync(target, source, bytes, cudaMemcpyHostToDevice, 0));
                empty_kernel<<<1, 32>>>();
            }
        else if (events)
            for (long i = 0; i < launches; i += 4) {
                empty_kernel<<<1, 32, 0, a>>>();
                CHECK(cudaEventRecord(handed, a));
                CHECK(cudaStreamWaitEvent(b, handed, 0));
                empty_kernel<<<1, 32, 0, b>>>();
            }
        else
            for (long i = 0; i < launches; i++) empty_kernel<<<1, 32>>>();
        long long looped = now_ns();
        CHECK(cudaGetLastError());
        CHECK(cudaDeviceSynchronize());
        long long done = now_ns();
        printf("%s[%.9f, %.9f]", r ? ", " : "", (looped - started) * 1e-9, (done - started) * 1e-9);
    }
    printf("]}\n");
    for (int i = 0; pinned && i < 64; i++) CHECK(cudaFreeHost(page_locked[i]));
    CHECK(cudaFree(buffer));
    CHECK(cudaFree(target));
    CHECK(cudaEventDestroy(handed));
    CHECK(cudaStreamDestroy(a));
    CHECK(cudaStreamDestroy(b));
    free(source);
    return 0;
}
