// Allocation rates: cudaMalloc/cudaFree pairs against stream-ordered
// cudaMallocAsync/cudaFreeAsync pairs, in interleaved rounds.
//
//   pools PAIRS REPEATS BYTES
//
// Each round times PAIRS of each kind, of BYTES each:
//   malloc       cudaMalloc then cudaFree
//   async        cudaMallocAsync then cudaFreeAsync on one stream (the pool
//                hands the block back at once), one cudaStreamSynchronize at the end
//   async_sync   the same with a cudaStreamSynchronize after every pair and
//                the pool's release threshold at its maximum (a training
//                loop's step), so the pool keeps its memory
// Prints one RESULT line (JSON) with the seconds of each round.
#include <cstdint>
#include "bench_common.h"

static double seconds_since(long long started) { return (now_ns() - started) / 1e9; }

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s PAIRS REPEATS BYTES\n", argv[0]);
        return 2;
    }
    long pairs = atol(argv[1]);
    int repeats = atoi(argv[2]);
    size_t bytes = (size_t)atol(argv[3]);
    cudaStream_t stream;
    CHECK(cudaStreamCreate(&stream));
    cudaMemPool_t pool;
    CHECK(cudaDeviceGetDefaultMemPool(&pool, 0));
    void *p = nullptr;
    CHECK(cudaMallocAsync(&p, bytes, stream));  // warm-up: the runtime and the pool's first block
    CHECK(cudaFreeAsync(p, stream));
    CHECK(cudaStreamSynchronize(stream));
    double malloc_s[64], async_s[64], async_sync_s[64];
    for (int r = 0; r < repeats && r < 64; r++) {
        long long started = now_ns();
        for (long i = 0; i < pairs; i++) {
            CHECK(cudaMalloc(&p, bytes));
            CHECK(cudaFree(p));
        }
        malloc_s[r] = seconds_since(started);

        uint64_t threshold = 0;
        CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
        started = now_ns();
        for (long i = 0; i < pairs; i++) {
            CHECK(cudaMallocAsync(&p, bytes, stream));
            CHECK(cudaFreeAsync(p, stream));
        }
        CHECK(cudaStreamSynchronize(stream));
        async_s[r] = seconds_since(started);

        threshold = UINT64_MAX;
        CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
        started = now_ns();
        for (long i = 0; i < pairs; i++) {
            CHECK(cudaMallocAsync(&p, bytes, stream));
            CHECK(cudaFreeAsync(p, stream));
            CHECK(cudaStreamSynchronize(stream));
        }
        async_sync_s[r] = seconds_since(started);
        CHECK(cudaMemPoolTrimTo(pool, 0));
    }
    printf("RESULT {\"pairs\": %ld, \"bytes\": %zu", pairs, bytes);
    const char *names[] = {"malloc", "async", "async_sync"};
    double *rounds[] = {malloc_s, async_s, async_sync_s};
    for (int k = 0; k < 3; k++) {
        printf(", \"%s_s\": [", names[k]);
        for (int r = 0; r < repeats && r < 64; r++) printf("%s%.9f", r ? ", " : "", rounds[k][r]);
        printf("]");
    }
    printf("}\n");
    return 0;
}
