// Thread block cluster launches (compute capability 9.0; build with
// -arch=sm_90): cudaLaunchKernelEx with cudaLaunchAttributeClusterDimension,
// a __cluster_dims__ kernel launched with <<<>>>, a cluster shape set with
// cudaFuncSetAttribute, the shapes CUDA refuses (cudaErrorInvalidClusterSize,
// and nothing runs), the occupancy queries, cudaFuncGetAttributes' cluster
// fields, and the driver's cuLaunchKernelEx with
// CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION.  Every kernel writes, per block,
// its rank in its cluster and its cluster's size, which the program checks.
// Sections are named on the command line (all by default); each prints
// "ok SECTION".
#include <cooperative_groups.h>
#include <cstdio>
#include <cstring>
#include <cuda.h>
#include <cuda_runtime.h>

#include "driver_check.h"

namespace cg = cooperative_groups;

// rank[b], size[b] of block b (x fastest, then y, then z).
__device__ void cluster_ranks(int *rank, int *size) {
    cg::cluster_group cluster = cg::this_cluster();
    unsigned b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    if (threadIdx.x == 0) {
        rank[b] = (int)cluster.block_rank();
        size[b] = (int)cluster.num_blocks();
    }
}

__global__ void clusterRanks(int *rank, int *size) { cluster_ranks(rank, size); }             // any shape
__global__ void __cluster_dims__(2, 1, 1) fixedRanks(int *rank, int *size) { cluster_ranks(rank, size); }
__global__ void __cluster_dims__() mustRanks(int *rank, int *size) { cluster_ranks(rank, size); }  // needs one
__global__ void setRanks(int *rank, int *size) { cluster_ranks(rank, size); }   // a shape set at run time
__global__ void wideRanks(int *rank, int *size) { cluster_ranks(rank, size); }  // non-portable sizes

static const int MAX_BLOCKS = 1024, BLOCK = 128, UNTOUCHED = -7;
static int *rank_d, *size_d, rank_h[MAX_BLOCKS], size_h[MAX_BLOCKS];

static void clear() {
    for (int i = 0; i < MAX_BLOCKS; i++) rank_h[i] = size_h[i] = UNTOUCHED;
    CHECK(cudaMemcpy(rank_d, rank_h, sizeof rank_h, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(size_d, size_h, sizeof size_h, cudaMemcpyHostToDevice));
}

// Every block of `grid` has its rank in a cluster of shape `cluster`.
static void expect_ranks(dim3 grid, dim3 cluster, int line) {
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(rank_h, rank_d, sizeof rank_h, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(size_h, size_d, sizeof size_h, cudaMemcpyDeviceToHost));
    int blocks = grid.x * grid.y * grid.z, size = cluster.x * cluster.y * cluster.z;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                int b = x + grid.x * (y + grid.y * z);
                int expected = x % cluster.x + cluster.x * (y % cluster.y + cluster.y * (z % cluster.z));
                if (rank_h[b] != expected || size_h[b] != size) {
                    printf("FAILED line %d: block (%u,%u,%u) has rank %d of %d, expected %d of %d\n", line, x, y,
                           z, rank_h[b], size_h[b], expected, size);
                    exit(1);
                }
            }
    for (int b = blocks; b < MAX_BLOCKS; b++) REQUIRE(rank_h[b] == UNTOUCHED);
}
#define EXPECT_RANKS(grid, cluster) expect_ranks(grid, cluster, __LINE__)

static void expect_untouched() {
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(rank_h, rank_d, sizeof rank_h, cudaMemcpyDeviceToHost));
    for (int b = 0; b < MAX_BLOCKS; b++) REQUIRE(rank_h[b] == UNTOUCHED);
}

// cudaLaunchKernelEx of `kernel` with a cluster shape (none when x is 0).
static cudaError_t launch_ex(void (*kernel)(int *, int *), dim3 grid, dim3 cluster, size_t shared = 0) {
    cudaLaunchConfig_t config = {};
    config.gridDim = grid;
    config.blockDim = dim3(BLOCK);
    config.dynamicSmemBytes = shared;
    cudaLaunchAttribute attr[2];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = cluster.x;
    attr[0].val.clusterDim.y = cluster.y;
    attr[0].val.clusterDim.z = cluster.z;
    attr[1].id = cudaLaunchAttributeClusterSchedulingPolicyPreference;  // a hint
    attr[1].val.clusterSchedulingPolicyPreference = cudaClusterSchedulingPolicySpread;
    config.attrs = attr;
    config.numAttrs = cluster.x ? 2 : 0;
    return cudaLaunchKernelEx(&config, kernel, rank_d, size_d);
}

static void setup() {
    int clusters = 0;
    CHECK(cudaDeviceGetAttribute(&clusters, cudaDevAttrClusterLaunch, 0));
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    REQUIRE(clusters == 1 && prop.clusterLaunch == 1 && prop.major >= 9);
    CHECK(cudaMalloc(&rank_d, sizeof rank_h));
    CHECK(cudaMalloc(&size_d, sizeof size_h));
}

static void launch() {
    const dim3 shapes[][2] = {{dim3(8), dim3(2)}, {dim3(8, 4, 2), dim3(2, 2, 1)}, {dim3(6, 2, 4), dim3(3, 1, 2)},
                              {dim3(16), dim3(8)}, {dim3(4, 4), dim3(1, 4)}};
    for (auto &shape : shapes) {
        clear();
        CHECK(launch_ex(clusterRanks, shape[0], shape[1]));
        EXPECT_RANKS(shape[0], shape[1]);
    }
    // Without a cluster: every block is a cluster of one.
    clear();
    CHECK(launch_ex(clusterRanks, dim3(5, 3), dim3(0)));
    EXPECT_RANKS(dim3(5, 3), dim3(1));
    clear();
    clusterRanks<<<dim3(7), BLOCK>>>(rank_d, size_d);
    CHECK(cudaGetLastError());
    EXPECT_RANKS(dim3(7), dim3(1));
    // Into a stream, twice (the second launch of a kernel may take another path).
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (int round = 0; round < 2; round++) {
        clear();
        cudaLaunchConfig_t config = {};
        config.gridDim = dim3(12);
        config.blockDim = dim3(BLOCK);
        config.stream = s;
        cudaLaunchAttribute attr;
        attr.id = cudaLaunchAttributeClusterDimension;
        attr.val.clusterDim.x = 4;
        attr.val.clusterDim.y = attr.val.clusterDim.z = 1;
        config.attrs = &attr;
        config.numAttrs = 1;
        CHECK(cudaLaunchKernelEx(&config, clusterRanks, rank_d, size_d));
        CHECK(cudaStreamSynchronize(s));
        EXPECT_RANKS(dim3(12), dim3(4));
    }
    CHECK(cudaStreamDestroy(s));
    printf("ok launch\n");
}

// A kernel compiled with __cluster_dims__: every launch is a cluster launch
// of its shape, <<<>>> ones too.
static void cluster_dims() {
    for (int round = 0; round < 3; round++) {  // the later ones must not lose their shape
        clear();
        fixedRanks<<<dim3(6, 2), BLOCK>>>(rank_d, size_d);
        CHECK(cudaGetLastError());
        EXPECT_RANKS(dim3(6, 2), dim3(2));
    }
    clear();
    CHECK(launch_ex(fixedRanks, dim3(4), dim3(2, 1, 1)));  // its own shape, given again
    EXPECT_RANKS(dim3(4), dim3(2));
    clear();
    fixedRanks<<<dim3(5), BLOCK>>>(rank_d, size_d);  // not a whole number of clusters
    EXPECT(cudaGetLastError(), cudaErrorInvalidClusterSize);
    EXPECT_AND_CLEAR(launch_ex(fixedRanks, dim3(8), dim3(4, 1, 1)), cudaErrorInvalidClusterSize);  // another shape
    // __cluster_dims__() without a shape: the launch must give one.
    mustRanks<<<dim3(4), BLOCK>>>(rank_d, size_d);
    EXPECT(cudaGetLastError(), cudaErrorInvalidClusterSize);
    EXPECT_AND_CLEAR(launch_ex(mustRanks, dim3(4), dim3(0)), cudaErrorInvalidClusterSize);
    expect_untouched();
    CHECK(launch_ex(mustRanks, dim3(8), dim3(4, 1, 1)));
    EXPECT_RANKS(dim3(8), dim3(4));
    printf("ok cluster_dims\n");
}

// A shape set with cudaFuncSetAttribute on a kernel launched before without
// one: its later <<<>>> launches are cluster launches.
static void set_shape() {
    clear();
    setRanks<<<dim3(6), BLOCK>>>(rank_d, size_d);
    setRanks<<<dim3(6), BLOCK>>>(rank_d, size_d);
    CHECK(cudaGetLastError());
    EXPECT_RANKS(dim3(6), dim3(1));
    CHECK(cudaFuncSetAttribute(setRanks, cudaFuncAttributeRequiredClusterWidth, 3));
    CHECK(cudaFuncSetAttribute(setRanks, cudaFuncAttributeRequiredClusterHeight, 1));
    CHECK(cudaFuncSetAttribute(setRanks, cudaFuncAttributeRequiredClusterDepth, 1));
    for (int round = 0; round < 2; round++) {
        clear();
        setRanks<<<dim3(6), BLOCK>>>(rank_d, size_d);
        CHECK(cudaGetLastError());
        EXPECT_RANKS(dim3(6), dim3(3));
    }
    setRanks<<<dim3(4), BLOCK>>>(rank_d, size_d);
    EXPECT(cudaGetLastError(), cudaErrorInvalidClusterSize);
    cudaFuncAttributes attrs;
    CHECK(cudaFuncGetAttributes(&attrs, setRanks));
    REQUIRE(attrs.requiredClusterWidth == 3 && attrs.requiredClusterHeight == 1 && attrs.requiredClusterDepth == 1);
    // A compile-time shape cannot be changed: the driver says InvalidValue (its header, NotPermitted).
    EXPECT_AND_CLEAR(cudaFuncSetAttribute(fixedRanks, cudaFuncAttributeRequiredClusterWidth, 4),
                     cudaErrorInvalidValue);
    printf("ok set_shape\n");
}

static void bad_shapes() {
    clear();
    EXPECT_AND_CLEAR(launch_ex(clusterRanks, dim3(6), dim3(4)), cudaErrorInvalidClusterSize);        // 6 % 4
    EXPECT_AND_CLEAR(launch_ex(clusterRanks, dim3(4, 3), dim3(2, 2)), cudaErrorInvalidClusterSize);  // 3 % 2
    EXPECT_AND_CLEAR(launch_ex(clusterRanks, dim3(4), dim3(2, 0, 1)), cudaErrorInvalidClusterSize);
    // More than the portable 8 blocks, unless the kernel allows non-portable sizes.
    EXPECT_AND_CLEAR(launch_ex(wideRanks, dim3(32), dim3(16)), cudaErrorInvalidClusterSize);
    EXPECT_AND_CLEAR(launch_ex(wideRanks, dim3(4, 4), dim3(4, 4)), cudaErrorInvalidClusterSize);
    CHECK(cudaDeviceSynchronize());  // not sticky
    expect_untouched();              // and nothing ran
    cudaFuncAttributes attrs;
    CHECK(cudaFuncGetAttributes(&attrs, wideRanks));
    REQUIRE(attrs.nonPortableClusterSizeAllowed == 0);
    CHECK(cudaFuncSetAttribute(wideRanks, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    CHECK(cudaFuncGetAttributes(&attrs, wideRanks));
    REQUIRE(attrs.nonPortableClusterSizeAllowed == 1);
    CHECK(launch_ex(wideRanks, dim3(32), dim3(16)));
    EXPECT_RANKS(dim3(32), dim3(16));
    clear();
    CHECK(launch_ex(wideRanks, dim3(8, 4), dim3(4, 4)));
    EXPECT_RANKS(dim3(8, 4), dim3(4, 4));
    EXPECT_AND_CLEAR(launch_ex(wideRanks, dim3(64), dim3(32)), cudaErrorInvalidClusterSize);  // beyond the device
    // Launch configurations a GPU refuses whatever the cluster still say so.
    EXPECT_AND_CLEAR(launch_ex(clusterRanks, dim3(0), dim3(2)), cudaErrorInvalidConfiguration);
    printf("ok bad_shapes\n");
}

static void occupancy() {
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(64);
    config.blockDim = dim3(BLOCK);
    int size = 0;
    CHECK(cudaOccupancyMaxPotentialClusterSize(&size, clusterRanks, &config));
    REQUIRE(size == 8);  // the portable limit
    CHECK(cudaOccupancyMaxPotentialClusterSize(&size, fixedRanks, &config));
    REQUIRE(size == 2);  // its own
    cudaFuncAttributes attrs;
    CHECK(cudaFuncGetAttributes(&attrs, wideRanks));
    if (attrs.nonPortableClusterSizeAllowed) {  // set by bad_shapes
        CHECK(cudaOccupancyMaxPotentialClusterSize(&size, wideRanks, &config));
        REQUIRE(size == 16);
    }
    // Without a shape of its own, the config must give one.
    int clusters = 0;
    EXPECT_AND_CLEAR(cudaOccupancyMaxActiveClusters(&clusters, clusterRanks, &config), cudaErrorInvalidClusterSize);
    CHECK(cudaOccupancyMaxActiveClusters(&clusters, fixedRanks, &config));
    REQUIRE(clusters > 0);
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = 2;
    attr.val.clusterDim.y = attr.val.clusterDim.z = 1;
    config.attrs = &attr;
    config.numAttrs = 1;
    int of_two = 0, of_eight = 0;
    CHECK(cudaOccupancyMaxActiveClusters(&of_two, clusterRanks, &config));
    REQUIRE(of_two == clusters);  // the same shape as fixedRanks's, the same kernel body
    attr.val.clusterDim.x = 8;
    CHECK(cudaOccupancyMaxActiveClusters(&of_eight, clusterRanks, &config));
    REQUIRE(of_eight > 0 && of_eight <= of_two / 4 + 1);
    attr.val.clusterDim.x = 32;
    EXPECT_AND_CLEAR(cudaOccupancyMaxActiveClusters(&clusters, clusterRanks, &config), cudaErrorInvalidClusterSize);
    attr.val.clusterDim.x = 4;
    EXPECT_AND_CLEAR(cudaOccupancyMaxActiveClusters(&clusters, fixedRanks, &config), cudaErrorInvalidClusterSize);
    printf("ok occupancy\n");
}

static void attributes() {
    cudaFuncAttributes attrs;
    CHECK(cudaFuncGetAttributes(&attrs, fixedRanks));
    REQUIRE(attrs.requiredClusterWidth == 2 && attrs.requiredClusterHeight == 1 && attrs.requiredClusterDepth == 1);
    CHECK(cudaFuncGetAttributes(&attrs, clusterRanks));
    REQUIRE(attrs.requiredClusterWidth == 0 && attrs.requiredClusterHeight == 0 && attrs.requiredClusterDepth == 0);
    REQUIRE(attrs.clusterDimMustBeSet == 0 && attrs.nonPortableClusterSizeAllowed == 0);
    CHECK(cudaFuncGetAttributes(&attrs, mustRanks));
    REQUIRE(attrs.clusterDimMustBeSet == 1 && attrs.requiredClusterWidth == 0);
    CHECK(cudaFuncSetAttribute(clusterRanks, cudaFuncAttributeClusterSchedulingPolicyPreference,
                               cudaClusterSchedulingPolicyLoadBalancing));
    CHECK(cudaFuncGetAttributes(&attrs, clusterRanks));
    REQUIRE(attrs.clusterSchedulingPolicyPreference == cudaClusterSchedulingPolicyLoadBalancing);
    printf("ok attributes\n");
}

// The driver API: cuLaunchKernelEx with CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
// cuFuncGetAttribute's cluster attributes, cuOccupancy*Cluster*.
static void driver() {
    DRV(cuInit(0));
    CUdevice device;
    CUcontext primary;
    DRV(cuDeviceGet(&device, 0));
    DRV(cuDevicePrimaryCtxRetain(&primary, device));
    DRV(cuCtxSetCurrent(primary));
    cudaKernel_t kernels[2];
    CHECK(cudaGetKernel(&kernels[0], clusterRanks));
    CHECK(cudaGetKernel(&kernels[1], fixedRanks));
    CUfunction ranks, fixed;
    DRV(cuKernelGetFunction(&ranks, (CUkernel)kernels[0]));
    DRV(cuKernelGetFunction(&fixed, (CUkernel)kernels[1]));
    void *params[] = {&rank_d, &size_d};
    CUlaunchAttribute attr;
    attr.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attr.value.clusterDim.x = 2;
    attr.value.clusterDim.y = 3;
    attr.value.clusterDim.z = 1;
    CUlaunchConfig config = {};
    config.gridDimX = 4;
    config.gridDimY = 6;
    config.gridDimZ = 2;
    config.blockDimX = BLOCK;
    config.blockDimY = config.blockDimZ = 1;
    config.attrs = &attr;
    config.numAttrs = 1;
    for (int round = 0; round < 2; round++) {
        clear();
        DRV(cuLaunchKernelEx(&config, ranks, params, NULL));
        EXPECT_RANKS(dim3(4, 6, 2), dim3(2, 3, 1));
    }
    config.gridDimY = 4;  // not a whole number of clusters
    DRV_EXPECT(cuLaunchKernelEx(&config, ranks, params, NULL), CUDA_ERROR_INVALID_CLUSTER_SIZE);
    cudaGetLastError();
    // A __cluster_dims__ kernel through cuLaunchKernel: a cluster launch too.
    clear();
    DRV(cuLaunchKernel(fixed, 8, 1, 1, BLOCK, 1, 1, 0, NULL, params, NULL));
    DRV(cuLaunchKernel(fixed, 8, 1, 1, BLOCK, 1, 1, 0, NULL, params, NULL));
    EXPECT_RANKS(dim3(8), dim3(2));
    int value = -1;
    DRV(cuFuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH, fixed));
    REQUIRE(value == 2);
    DRV(cuFuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT, fixed));
    REQUIRE(value == 1);
    DRV(cuFuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET, ranks));
    REQUIRE(value == 0);
    DRV(cuFuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, ranks));
    REQUIRE(value == 0);
    int size = 0, clusters = 0, runtime_clusters = 0;
    config.gridDimY = 6;
    DRV(cuOccupancyMaxPotentialClusterSize(&size, ranks, &config));
    REQUIRE(size == 8);
    DRV(cuOccupancyMaxActiveClusters(&clusters, ranks, &config));
    cudaLaunchConfig_t runtime_config = {};
    runtime_config.gridDim = dim3(4, 6, 2);
    runtime_config.blockDim = dim3(BLOCK);
    cudaLaunchAttribute runtime_attr;
    runtime_attr.id = cudaLaunchAttributeClusterDimension;
    runtime_attr.val.clusterDim.x = 2;
    runtime_attr.val.clusterDim.y = 3;
    runtime_attr.val.clusterDim.z = 1;
    runtime_config.attrs = &runtime_attr;
    runtime_config.numAttrs = 1;
    CHECK(cudaOccupancyMaxActiveClusters(&runtime_clusters, clusterRanks, &runtime_config));
    REQUIRE(clusters > 0 && clusters == runtime_clusters);
    config.numAttrs = 0;
    DRV_EXPECT(cuOccupancyMaxActiveClusters(&clusters, ranks, &config), CUDA_ERROR_INVALID_CLUSTER_SIZE);
    DRV(cuOccupancyMaxActiveClusters(&clusters, fixed, &config));
    REQUIRE(clusters > 0);
    printf("ok driver\n");
}

int main(int argc, char **argv) {
    const char *all[] = {"launch", "cluster_dims", "set_shape", "bad_shapes", "occupancy", "attributes", "driver"};
    const char **sections = argc > 1 ? (const char **)argv + 1 : all;
    int count = argc > 1 ? argc - 1 : (int)(sizeof all / sizeof *all);
    setup();
    for (int i = 0; i < count; i++) {
        if (!strcmp(sections[i], "launch")) launch();
        else if (!strcmp(sections[i], "cluster_dims")) cluster_dims();
        else if (!strcmp(sections[i], "set_shape")) set_shape();
        else if (!strcmp(sections[i], "bad_shapes")) bad_shapes();
        else if (!strcmp(sections[i], "occupancy")) occupancy();
        else if (!strcmp(sections[i], "attributes")) attributes();
        else if (!strcmp(sections[i], "driver")) driver();
        else { printf("unknown section %s\n", sections[i]); return 2; }
    }
    printf("PASSED cluster_launch\n");
    return 0;
}
