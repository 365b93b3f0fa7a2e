// Tensor maps (the driver API's cuTensorMapEncode* and cuTensorMapReplaceAddress):
// a 2-D tiled map of a float matrix, passed by value to a kernel that loads
// one 16 x 16 tile through it (TMA on a GPU of compute capability 9.0; a
// plugin decoding the sim's map on a sim server); the address replaced;
// im2col maps; and the parameters cuda.h refuses.  Each section prints "ok
// NAME"; a failure prints "FAILED ...".
#include <cuda.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <cstring>
#include <vector>

#include "driver_check.h"

const int ROWS = 64, COLS = 96, TILE = 16;

// out[16 x 16] = the tile of the map's matrix at column x, row y.
__global__ void loadTile(const __grid_constant__ CUtensorMap map, int x, int y, float *out) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    __shared__ alignas(128) float tile[TILE * TILE];
    __shared__ alignas(8) unsigned long long barrier;
    unsigned bar = (unsigned)__cvta_generic_to_shared(&barrier), smem = (unsigned)__cvta_generic_to_shared(tile);
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar));
        asm volatile("fence.proxy.async.shared::cta;");
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(TILE * TILE * 4));
        asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                     " [%0], [%1, {%2, %3}], [%4];" ::"r"(smem), "l"(&map), "r"(x), "r"(y), "r"(bar)
                     : "memory");
        asm volatile("{ .reg .pred done; WAIT: mbarrier.try_wait.parity.shared::cta.b64 done, [%0], 0;"
                     " @!done bra WAIT; }" ::"r"(bar) : "memory");
    }
    __syncthreads();
    for (int i = threadIdx.x; i < TILE * TILE; i += blockDim.x) out[i] = tile[i];
#endif
}

static CUtensorMap tiled(float *matrix) {
    alignas(64) CUtensorMap map;
    cuuint64_t dims[2] = {COLS, ROWS}, strides[1] = {COLS * sizeof(float)};
    cuuint32_t box[2] = {TILE, TILE}, element_strides[2] = {1, 1};
    DRV(cuTensorMapEncodeTiled(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, matrix, dims, strides, box, element_strides,
                               CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                               CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
    return map;
}

static void check_tile(const CUtensorMap &map, const std::vector<float> &host, int x, int y, float *out) {
    loadTile<<<1, 128>>>(map, x, y, out);
    CHECK(cudaGetLastError());
    std::vector<float> got(TILE * TILE);
    CHECK(cudaMemcpy(got.data(), out, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
    for (int r = 0; r < TILE; r++)
        for (int c = 0; c < TILE; c++) REQUIRE(got[r * TILE + c] == host[(y + r) * COLS + x + c]);
}

static void tiles() {
    std::vector<float> a(ROWS * COLS), b(ROWS * COLS);
    for (int i = 0; i < ROWS * COLS; i++) a[i] = (float)i, b[i] = (float)-i;
    float *da, *db, *out;
    CHECK(cudaMalloc(&da, a.size() * sizeof(float)));
    CHECK(cudaMalloc(&db, b.size() * sizeof(float)));
    CHECK(cudaMalloc(&out, TILE * TILE * sizeof(float)));
    CHECK(cudaMemcpy(da, a.data(), a.size() * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(db, b.data(), b.size() * sizeof(float), cudaMemcpyHostToDevice));
    CUtensorMap map = tiled(da);
    check_tile(map, a, 32, 16, out);
    check_tile(map, a, 80, 48, out);
    DRV(cuTensorMapReplaceAddress(&map, db));  // the same shape over another matrix
    check_tile(map, b, 16, 0, out);
    DRV_EXPECT(cuTensorMapReplaceAddress(&map, (char *)db + 8), CUDA_ERROR_INVALID_VALUE);  // not 16-byte aligned
    CHECK(cudaFree(da));
    CHECK(cudaFree(db));
    CHECK(cudaFree(out));
    printf("ok tiles\n");
}

static void im2col() {
    float *d;
    CHECK(cudaMalloc(&d, 1 << 20));
    alignas(64) CUtensorMap map;
    cuuint64_t dims[4] = {64, 8, 8, 2}, strides[3] = {64 * 4, 64 * 4 * 8, 64 * 4 * 64};  // C, W, H, N
    cuuint32_t element_strides[4] = {1, 1, 1, 1};
    int lower[2] = {-1, -1}, upper[2] = {1, 1};
    DRV(cuTensorMapEncodeIm2col(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, d, dims, strides, lower, upper, 32, 64,
                                element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
    int too_far[2] = {-200, 0};  // a rank-4 corner is within [-128, 127]
    DRV_EXPECT(cuTensorMapEncodeIm2col(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, d, dims, strides, too_far, upper, 32,
                                       64, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                       CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
               CUDA_ERROR_INVALID_VALUE);
    DRV(cuTensorMapEncodeIm2colWide(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, d, dims, strides, -1, 1, 16, 64,
                                    element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_IM2COL_WIDE_MODE_W,
                                    CU_TENSOR_MAP_SWIZZLE_64B, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
    CHECK(cudaFree(d));
    printf("ok im2col\n");
}

// What cuda.h's rules refuse, each with everything else valid.
static void bad_parameters() {
    float *d;
    CHECK(cudaMalloc(&d, 1 << 20));
    alignas(64) CUtensorMap map;
    cuuint64_t dims[2] = {COLS, ROWS}, strides[1] = {COLS * sizeof(float)}, bad_strides[1] = {COLS * 4 + 4};
    cuuint32_t box[2] = {TILE, TILE}, big_box[2] = {512, TILE}, narrow_box[2] = {2, TILE}, element_strides[2] = {1, 1};
    auto encode = [&](void *address, cuuint32_t rank, const cuuint64_t *s, const cuuint32_t *b,
                      CUtensorMapSwizzle swizzle) {
        return cuTensorMapEncodeTiled(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, rank, address, dims, s, b,
                                      element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                                      CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    };
    DRV(encode(d, 2, strides, box, CU_TENSOR_MAP_SWIZZLE_64B));
    DRV_EXPECT(encode(d, 0, strides, box, CU_TENSOR_MAP_SWIZZLE_NONE), CUDA_ERROR_INVALID_VALUE);        // rank 0
    DRV_EXPECT(encode((char *)d + 4, 2, strides, box, CU_TENSOR_MAP_SWIZZLE_NONE), CUDA_ERROR_INVALID_VALUE);  // align
    DRV_EXPECT(encode(d, 2, bad_strides, box, CU_TENSOR_MAP_SWIZZLE_NONE), CUDA_ERROR_INVALID_VALUE);    // stride % 16
    DRV_EXPECT(encode(d, 2, strides, big_box, CU_TENSOR_MAP_SWIZZLE_NONE), CUDA_ERROR_INVALID_VALUE);    // box > 256
    DRV_EXPECT(encode(d, 2, strides, narrow_box, CU_TENSOR_MAP_SWIZZLE_NONE), CUDA_ERROR_INVALID_VALUE); // 8 bytes
    DRV_EXPECT(encode(d, 2, strides, box, CU_TENSOR_MAP_SWIZZLE_32B), CUDA_ERROR_INVALID_VALUE);  // 64 B > 32 B swizzle
    CHECK(cudaFree(d));
    printf("ok bad_parameters\n");
}

int main(int argc, char **argv) {
    DRV(cuInit(0));
    struct { const char *name; void (*run)(); } sections[] = {
        {"tiles", tiles}, {"im2col", im2col}, {"bad_parameters", bad_parameters},
    };
    for (auto &section : sections) {
        bool chosen = argc == 1;
        for (int i = 1; i < argc; i++) chosen |= strcmp(argv[i], section.name) == 0;
        if (chosen) section.run();
    }
    printf("PASSED tensor_maps\n");
    return 0;
}
