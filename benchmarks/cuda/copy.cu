// cudaMemcpy throughput, host to device and device to host.
//
//   copy OUTFILE WARMUP_MS SIZE:REPEATS [SIZE:REPEATS ...]
//
// First WARMUP_MS milliseconds of untimed small copies both ways: a new
// session makes the server start its next spare worker, whose start-up
// shares a small machine's cores with the first timed sizes.
// Then, for each size: one device allocation and one ordinary (pageable) host
// buffer, a warm-up round trip whose bytes are checked, then REPEATS timed
// copies each way.  OUTFILE gets CSV lines: direction,bytes,seconds.
#include <cstring>
#include "bench_common.h"

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s OUTFILE WARMUP_MS SIZE:REPEATS [SIZE:REPEATS ...]\n", argv[0]);
        return 2;
    }
    FILE *out = fopen(argv[1], "w");
    if (!out) { perror(argv[1]); return 1; }
    long long warmup_until = now_ns() + atoll(argv[2]) * 1000000LL;
    {
        unsigned char small[64] = {1};
        void *scratch = nullptr;
        CHECK(cudaMalloc(&scratch, sizeof small));
        do {
            CHECK(cudaMemcpy(scratch, small, sizeof small, cudaMemcpyHostToDevice));
            CHECK(cudaMemcpy(small, scratch, sizeof small, cudaMemcpyDeviceToHost));
        } while (now_ns() < warmup_until);
        CHECK(cudaFree(scratch));
    }
    for (int a = 3; a < argc; a++) {
        size_t size = 0; int repeats = 0;
        if (sscanf(argv[a], "%zu:%d", &size, &repeats) != 2 || size == 0 || repeats < 1) {
            fprintf(stderr, "bad SIZE:REPEATS %s\n", argv[a]);
            return 2;
        }
        unsigned char *host = (unsigned char *)malloc(size), *back = (unsigned char *)malloc(size);
        if (!host || !back) { fprintf(stderr, "out of host memory at %zu bytes\n", size); return 1; }
        for (size_t i = 0; i < size; i++) host[i] = (unsigned char)(i * 7 + a);
        memset(back, 0, size);
        void *device = nullptr;
        CHECK(cudaMalloc(&device, size));
        CHECK(cudaMemcpy(device, host, size, cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(back, device, size, cudaMemcpyDeviceToHost));
        if (memcmp(host, back, size) != 0) { fprintf(stderr, "FAILED: %zu bytes came back different\n", size); return 1; }
        for (int r = 0; r < repeats; r++) {
            long long started = now_ns();
            CHECK(cudaMemcpy(device, host, size, cudaMemcpyHostToDevice));
            fprintf(out, "htod,%zu,%.9f\n", size, (now_ns() - started) * 1e-9);
        }
        for (int r = 0; r < repeats; r++) {
            long long started = now_ns();
            CHECK(cudaMemcpy(back, device, size, cudaMemcpyDeviceToHost));
            fprintf(out, "dtoh,%zu,%.9f\n", size, (now_ns() - started) * 1e-9);
        }
        CHECK(cudaFree(device));
        free(host);
        free(back);
    }
    fclose(out);
    printf("RESULT {\"sizes\": %d}\n", argc - 3);
    return 0;
}
