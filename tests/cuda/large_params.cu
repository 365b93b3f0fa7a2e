// Kernel parameter blocks up to CUDA's 32,764 bytes, on every launch path:
// <<<>>> (the first launch of a kernel goes through the Python client, later
// ones are recorded in C), cudaLaunchKernel, cudaLaunchKernelEx, and many
// large launches in one batch.  Every kernel checks every byte of its large
// parameter against a pattern made from its seed and writes what it found.
// Sections are named on the command line (all by default); each prints
// "ok SECTION".  "unreadable" is for a copy of this program whose parameter
// records were made unreadable: the launch must fail, not run.
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

#include "check.h"

struct Big { unsigned seed; unsigned char bytes[32000 - 4]; };  // 32,000 bytes
struct Max { unsigned seed; unsigned char bytes[32752 - 4]; };  // with a pointer and an int: 32,764
struct Mid { unsigned seed; unsigned char bytes[16000 - 4]; };  // between small ones, at offset 4

// What a kernel found: bytes that differ from the pattern, the seed, the sum
// of the bytes, and its small parameters.
struct Result { unsigned bad, seed, sum, extra; };

__host__ __device__ inline unsigned char pattern(unsigned seed, unsigned i) {
    return (unsigned char)((i * 2654435761u + seed) >> 13);
}

template <typename T>
__device__ void check_bytes(const T &p, Result *out, unsigned extra) {
    if (blockIdx.x || threadIdx.x) return;
    unsigned bad = 0, sum = 0;
    for (unsigned i = 0; i < sizeof p.bytes; i++) {
        bad += p.bytes[i] != pattern(p.seed, i);
        sum += p.bytes[i];
    }
    *out = Result{bad, p.seed, sum, extra};
}

__global__ void bigKernel(const __grid_constant__ Big b, Result *out) { check_bytes(b, out, 0); }
__global__ void maxKernel(const __grid_constant__ Max m, Result *out, unsigned tail) { check_bytes(m, out, tail); }
__global__ void midKernel(char c, Mid m, short s, Result *out) {
    check_bytes(m, out, (unsigned)(unsigned char)c << 16 | (unsigned short)s);
}

template <typename T>
static void fill(T &p, unsigned seed) {
    p.seed = seed;
    for (unsigned i = 0; i < sizeof p.bytes; i++) p.bytes[i] = pattern(seed, i);
}

template <typename T>
static unsigned pattern_sum(unsigned seed) {
    unsigned sum = 0;
    for (unsigned i = 0; i < sizeof(T::bytes); i++) sum += pattern(seed, i);
    return sum;
}

template <typename T>
static void expect(const Result &r, unsigned seed, unsigned extra, const char *what, int i) {
    if (r.bad || r.seed != seed || r.sum != pattern_sum<T>(seed) || r.extra != extra) {
        printf("FAILED %s %d: %u bad bytes, seed %u (sent %u), sum %u (expected %u), extra %#x (sent %#x)\n", what,
               i, r.bad, r.seed, seed, r.sum, pattern_sum<T>(seed), r.extra, extra);
        exit(1);
    }
}

static const int N = 8;  // launches of each kernel per section: the first through Python, the others in C
static Big big;
static Max max_;
static Mid mid;

static Result *results() {
    Result *out;
    CHECK(cudaMalloc(&out, 3 * N * sizeof(Result)));
    CHECK(cudaMemset(out, 0xff, 3 * N * sizeof(Result)));
    return out;
}

static void collect(Result *out, unsigned first_seed, const char *what) {
    Result h[3 * N];
    CHECK(cudaMemcpy(h, out, sizeof h, cudaMemcpyDeviceToHost));
    for (int i = 0; i < N; i++) {
        expect<Big>(h[i], first_seed + i, 0, what, i);
        expect<Max>(h[N + i], first_seed + 100 + i, 0xC0FFEE00u + i, what, i);
        expect<Mid>(h[2 * N + i], first_seed + 200 + i, 0x7a0000u | (unsigned short)(-3 - i), what, i);
    }
    CHECK(cudaFree(out));
}

static void chevrons(cudaStream_t stream, const char *what, unsigned seed) {
    Result *out = results();
    for (int i = 0; i < N; i++) {
        fill(big, seed + i);
        bigKernel<<<1, 32, 0, stream>>>(big, out + i);
        fill(max_, seed + 100 + i);
        maxKernel<<<2, 32, 0, stream>>>(max_, out + N + i, 0xC0FFEE00u + i);
        fill(mid, seed + 200 + i);
        midKernel<<<1, 1, 0, stream>>>('z', mid, (short)(-3 - i), out + 2 * N + i);
        CHECK(cudaGetLastError());
    }
    CHECK(cudaStreamSynchronize(stream));
    collect(out, seed, what);
}

static void launch_kernel() {
    Result *out = results();
    for (int i = 0; i < N; i++) {
        Result *o0 = out + i, *o1 = out + N + i, *o2 = out + 2 * N + i;
        unsigned tail = 0xC0FFEE00u + i;
        char c = 'z';
        short s = (short)(-3 - i);
        fill(big, 1000 + i);
        void *big_args[] = {&big, &o0};
        CHECK(cudaLaunchKernel((const void *)bigKernel, dim3(1), dim3(32), big_args, 0, 0));
        fill(max_, 1100 + i);
        void *max_args[] = {&max_, &o1, &tail};
        CHECK(cudaLaunchKernel((const void *)maxKernel, dim3(1), dim3(32), max_args, 0, 0));
        fill(mid, 1200 + i);
        void *mid_args[] = {&c, &mid, &s, &o2};
        CHECK(cudaLaunchKernel((const void *)midKernel, dim3(1), dim3(1), mid_args, 0, 0));
    }
    collect(out, 1000, "cudaLaunchKernel");
    printf("ok launch_kernel\n");
}

static void launch_ex() {
    Result *out = results();
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(1);
    config.blockDim = dim3(32);
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributePriority;  // a hint: launched as without it
    attr[0].val.priority = 0;
    config.attrs = attr;
    config.numAttrs = 1;
    for (int i = 0; i < N; i++) {
        fill(big, 2000 + i);
        CHECK(cudaLaunchKernelEx(&config, bigKernel, big, out + i));
        fill(max_, 2100 + i);
        CHECK(cudaLaunchKernelEx(&config, maxKernel, max_, out + N + i, 0xC0FFEE00u + i));
        fill(mid, 2200 + i);
        CHECK(cudaLaunchKernelEx(&config, midKernel, 'z', mid, (short)(-3 - i), out + 2 * N + i));
    }
    collect(out, 2000, "cudaLaunchKernelEx");
    printf("ok launch_ex\n");
}

// Many 32 KB launches recorded before anything is sent: one batch of megabytes.
static void many() {
    const int M = 96;
    Result *out, h[M];
    CHECK(cudaMalloc(&out, sizeof h));
    for (int i = 0; i < M; i++) {
        fill(big, 3000 + i);
        bigKernel<<<1, 1>>>(big, out + i);
    }
    CHECK(cudaMemcpy(h, out, sizeof h, cudaMemcpyDeviceToHost));
    for (int i = 0; i < M; i++) expect<Big>(h[i], 3000 + i, 0, "many", i);
    CHECK(cudaFree(out));
    printf("ok many\n");
}

// The layout of bigKernel's parameters cannot be read: its launch fails at
// once and nothing runs.
static void unreadable() {
    Result *out, h;
    CHECK(cudaMalloc(&out, sizeof h));
    CHECK(cudaMemset(out, 0xab, sizeof h));
    fill(big, 7);
    bigKernel<<<1, 1>>>(big, out);
    cudaError_t err = cudaGetLastError();
    printf("launch -> %s\n", cudaGetErrorName(err));
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(&h, out, sizeof h, cudaMemcpyDeviceToHost));
    REQUIRE(h.bad == 0xabababab && h.seed == 0xabababab);  // the kernel never ran
    printf("ok unreadable\n");
}

int main(int argc, char **argv) {
    const char *all[] = {"chevrons", "stream", "launch_kernel", "launch_ex", "many"};
    const char **sections = argc > 1 ? (const char **)argv + 1 : all;
    int count = argc > 1 ? argc - 1 : (int)(sizeof all / sizeof *all);
    for (int i = 0; i < count; i++) {
        const char *what = sections[i];
        if (!strcmp(what, "chevrons")) { chevrons(0, "<<<>>>", 1); printf("ok chevrons\n"); }
        else if (!strcmp(what, "stream")) {
            cudaStream_t s;
            CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
            chevrons(s, "<<<>>> into a stream", 500);
            CHECK(cudaStreamDestroy(s));
            printf("ok stream\n");
        }
        else if (!strcmp(what, "launch_kernel")) launch_kernel();
        else if (!strcmp(what, "launch_ex")) launch_ex();
        else if (!strcmp(what, "many")) many();
        else if (!strcmp(what, "unreadable")) unreadable();
        else { printf("unknown section %s\n", what); return 2; }
    }
    printf("PASSED large_params\n");
    return 0;
}
