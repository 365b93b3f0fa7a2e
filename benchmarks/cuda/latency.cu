// Synchronous call latency, from the program's view.
//
//   latency ITERATIONS WARMUP_MS OUTFILE [meminfo|sync|getdevice|dtoh4]
//
// Times ITERATIONS calls of a cheap synchronous CUDA call after WARMUP_MS
// milliseconds of untimed ones (long enough for anything started with the
// connection to settle), and writes each call's time in nanoseconds to OUTFILE as
// native 64-bit integers.  cudaMemGetInfo (the default) always asks the
// device; cudaDeviceSynchronize does too through rcuda today, but a runtime
// may answer it locally when nothing is queued.  cudaGetDevice never leaves
// the process: through rcuda it measures the cost of entering the client.
// dtoh4: a 4-byte cudaMemcpy from the device to the host.
#include <cstring>
#include <vector>
#include "bench_common.h"

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s ITERATIONS WARMUP_MS OUTFILE [meminfo|sync|getdevice|dtoh4]\n", argv[0]);
        return 2;
    }
    long iterations = atol(argv[1]);
    long long warmup_ns = atoll(argv[2]) * 1000000LL;
    const char *call = argc > 4 ? argv[4] : "meminfo";
    bool sync = strcmp(call, "sync") == 0, getdevice = strcmp(call, "getdevice") == 0,
         dtoh4 = strcmp(call, "dtoh4") == 0;
    int device = -1, value = 0, *on_device = nullptr;
    std::vector<long long> samples(iterations);
    size_t free_bytes = 0, total_bytes = 0;
    CHECK(cudaSetDevice(0));
    CHECK(cudaMalloc(&on_device, sizeof(int)));
    CHECK(cudaMemset(on_device, 0, sizeof(int)));
    long warmup = 0;
    for (long long until = now_ns() + warmup_ns; warmup < 10 || now_ns() < until; warmup++)
        CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    for (long i = 0; i < iterations; i++) {
        long long started = now_ns();
        if (sync)
            CHECK(cudaDeviceSynchronize());
        else if (getdevice)
            CHECK(cudaGetDevice(&device));
        else if (dtoh4)
            CHECK(cudaMemcpy(&value, on_device, sizeof value, cudaMemcpyDeviceToHost));
        else
            CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
        samples[i] = now_ns() - started;
    }
    FILE *out = fopen(argv[3], "wb");
    if (!out || fwrite(samples.data(), sizeof(long long), iterations, out) != (size_t)iterations) {
        perror(argv[3]);
        return 1;
    }
    fclose(out);
    printf("RESULT {\"call\": \"%s\", \"iterations\": %ld, \"warmup_calls\": %ld, \"total_bytes\": %zu}\n",
           sync ? "cudaDeviceSynchronize" : getdevice ? "cudaGetDevice" : dtoh4 ? "cudaMemcpy 4 B to the host"
                                                                             : "cudaMemGetInfo",
           iterations, warmup, total_bytes);
    return 0;
}
