// Cooperative launches: a kernel whose blocks wait for each other
// (cooperative_groups::this_grid().sync()) launched with
// cudaLaunchCooperativeKernel and with cudaLaunchKernelEx's
// cudaLaunchAttributeCooperative; a grid that cannot be resident at once is
// refused with cudaErrorCooperativeLaunchTooLarge and nothing runs.
// Sections are named on the command line (all by default); each prints
// "ok SECTION".
#include <cooperative_groups.h>
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

#include "check.h"

namespace cg = cooperative_groups;

// Two phases: each block sums its grid-stride share of `in` into
// partial[block]; once every block has (grid.sync), each element becomes
// the sum of all the others.
__global__ void sumOthers(const int *in, int *partial, int *out, int n) {
    __shared__ int block_sum;
    cg::grid_group grid = cg::this_grid();
    if (threadIdx.x == 0) block_sum = 0;
    __syncthreads();
    int local = 0;
    for (int i = grid.thread_rank(); i < n; i += grid.size()) local += in[i];
    atomicAdd(&block_sum, local);
    __syncthreads();
    if (threadIdx.x == 0) partial[blockIdx.x] = block_sum;
    grid.sync();
    int total = 0;
    for (unsigned b = 0; b < gridDim.x; b++) total += partial[b];
    for (int i = grid.thread_rank(); i < n; i += grid.size()) out[i] = total - in[i];
}

__global__ void fill(int *out, int value, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = value;
}

static const int N = 1 << 16, BLOCK = 256, UNTOUCHED = -7;
static int *in, *partial, *out, host_in[N], host_out[N];
static int max_blocks;  // blocks of sumOthers (BLOCK threads, no dynamic shared memory) resident at once

static void setup() {
    int cooperative = 0, sms = 0, per_sm = 0;
    CHECK(cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, 0));
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    REQUIRE(cooperative == 1 && prop.cooperativeLaunch == 1);
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, sumOthers, BLOCK, 0));
    REQUIRE(sms > 0 && per_sm > 0);
    max_blocks = per_sm * sms;
    for (int i = 0; i < N; i++) host_in[i] = (i * 37) % 1001 - 500;
    CHECK(cudaMalloc(&in, N * sizeof(int)));
    CHECK(cudaMalloc(&out, N * sizeof(int)));
    CHECK(cudaMalloc(&partial, (max_blocks + 1) * sizeof(int)));
    CHECK(cudaMemcpy(in, host_in, sizeof host_in, cudaMemcpyHostToDevice));
}

static void clear() {
    for (int i = 0; i < N; i++) host_out[i] = UNTOUCHED;
    CHECK(cudaMemcpy(out, host_out, sizeof host_out, cudaMemcpyHostToDevice));
}

// Every element is the sum of the others, and the partial sums add up.
static void expect_sums(int blocks) {
    int partials[blocks];
    CHECK(cudaMemcpy(host_out, out, sizeof host_out, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(partials, partial, blocks * sizeof(int), cudaMemcpyDeviceToHost));
    long long total = 0, from_partials = 0;
    for (int i = 0; i < N; i++) total += host_in[i];
    for (int b = 0; b < blocks; b++) from_partials += partials[b];
    REQUIRE(from_partials == total);
    for (int i = 0; i < N; i++) {
        if (host_out[i] != total - host_in[i]) {
            printf("FAILED out[%d] = %d, expected %lld\n", i, host_out[i], total - host_in[i]);
            exit(1);
        }
    }
}

static void expect_untouched() {
    CHECK(cudaMemcpy(host_out, out, sizeof host_out, cudaMemcpyDeviceToHost));
    for (int i = 0; i < N; i++) REQUIRE(host_out[i] == UNTOUCHED);
}

static cudaError_t cooperative(int blocks, size_t shared, cudaStream_t stream) {
    int n = N;
    void *args[] = {&in, &partial, &out, &n};
    return cudaLaunchCooperativeKernel((const void *)sumOthers, dim3(blocks), dim3(BLOCK), args, shared, stream);
}

static void launch() {
    clear();
    CHECK(cooperative(max_blocks, 0, 0));  // the whole device, as grid-wide programs size it
    expect_sums(max_blocks);
    clear();
    CHECK(cooperative(3, 0, 0));
    expect_sums(3);
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    clear();
    CHECK(cooperative(max_blocks / 2, 0, s));
    CHECK(cudaStreamSynchronize(s));
    expect_sums(max_blocks / 2);
    CHECK(cudaStreamDestroy(s));
    printf("ok launch\n");
}

static void too_large() {
    clear();
    EXPECT_AND_CLEAR(cooperative(max_blocks + 1, 0, 0), cudaErrorCooperativeLaunchTooLarge);
    // Dynamic shared memory (which this kernel does not touch) leaves room
    // for fewer blocks per multiprocessor.
    int per_sm = 0, sms = 0;
    size_t shared = 40 << 10;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, sumOthers, BLOCK, shared));
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    REQUIRE(per_sm * sms < max_blocks);
    EXPECT_AND_CLEAR(cooperative(per_sm * sms + 1, shared, 0), cudaErrorCooperativeLaunchTooLarge);
    CHECK(cudaDeviceSynchronize());
    expect_untouched();  // nothing ran
    CHECK(cooperative(per_sm * sms, shared, 0));  // not sticky: the device goes on
    expect_sums(per_sm * sms);
    printf("ok too_large\n");
}

static void launch_ex() {
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(max_blocks);
    config.blockDim = dim3(BLOCK);
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeCooperative;
    attr[0].val.cooperative = 1;
    config.attrs = attr;
    config.numAttrs = 1;
    clear();
    CHECK(cudaLaunchKernelEx(&config, sumOthers, (const int *)in, partial, out, N));
    expect_sums(max_blocks);
    config.gridDim = dim3(max_blocks + 1);
    clear();
    EXPECT_AND_CLEAR(cudaLaunchKernelEx(&config, sumOthers, (const int *)in, partial, out, N),
                     cudaErrorCooperativeLaunchTooLarge);
    CHECK(cudaDeviceSynchronize());
    expect_untouched();
    // Cooperative 0: an ordinary launch, whatever its grid.
    attr[0].val.cooperative = 0;
    config.gridDim = dim3(N / BLOCK);
    CHECK(cudaLaunchKernelEx(&config, fill, out, 5, N));
    CHECK(cudaMemcpy(host_out, out, sizeof host_out, cudaMemcpyDeviceToHost));
    for (int i = 0; i < N; i++) REQUIRE(host_out[i] == 5);
    printf("ok launch_ex\n");
}

int main(int argc, char **argv) {
    const char *all[] = {"launch", "too_large", "launch_ex"};
    const char **sections = argc > 1 ? (const char **)argv + 1 : all;
    int count = argc > 1 ? argc - 1 : (int)(sizeof all / sizeof *all);
    setup();
    for (int i = 0; i < count; i++) {
        if (!strcmp(sections[i], "launch")) launch();
        else if (!strcmp(sections[i], "too_large")) too_large();
        else if (!strcmp(sections[i], "launch_ex")) launch_ex();
        else { printf("unknown section %s\n", sections[i]); return 2; }
    }
    printf("PASSED cooperative\n");
    return 0;
}
