// Kernels taking every kind of parameter, in namespaces and templates, on
// 1-D, 2-D and 3-D grids.  The program checks its own results.
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

#define CHECK(call)                                                              \
    do {                                                                         \
        cudaError_t err_ = (call);                                               \
        if (err_ != cudaSuccess) {                                               \
            printf("FAILED %s: %s\n", #call, cudaGetErrorString(err_));          \
            return 1;                                                            \
        }                                                                        \
    } while (0)
#define EXPECT(cond, what)                                                       \
    do { if (!(cond)) { printf("FAILED %s\n", what); return 1; } } while (0)

struct Params { double scale; int offset; float bias[3]; };  // 24 bytes, 8-aligned

__global__ void scalars(double *out, int i, float f, double d, char c, long long q, unsigned short us) {
    out[0] = i; out[1] = f; out[2] = d; out[3] = c; out[4] = (double)q; out[5] = us;
}

__global__ void withStruct(Params p, float *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = i * p.scale + p.offset + p.bias[i % 3];
}

template <typename T>
__global__ void fill(T *out, T value, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = value;
}

namespace math {
__global__ void square(float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * x[i];
}
}  // namespace math

__global__ void grid2d(int *out, int w, int h) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < w && y < h) out[y * w + x] = x + 1000 * y;
}

__global__ void grid3d(int *out, int w, int h, int d) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    int z = blockIdx.z * blockDim.z + threadIdx.z;
    if (x < w && y < h && z < d) out[(z * h + y) * w + x] = x + 100 * y + 10000 * z;
}

__global__ void noParams() {}

int main() {
    // Scalars of every size.
    double *dd, hd[6];
    CHECK(cudaMalloc(&dd, sizeof(hd)));
    scalars<<<1, 1>>>(dd, -42, 1.5f, 3.25e100, 'x', -1234567890123LL, 65535);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(hd, dd, sizeof(hd), cudaMemcpyDeviceToHost));
    EXPECT(hd[0] == -42 && hd[1] == 1.5 && hd[2] == 3.25e100 && hd[3] == 'x' &&
           hd[4] == -1234567890123.0 && hd[5] == 65535, "scalars");
    printf("ok scalars\n");

    // A struct by value.
    const int n = 1000;
    float *df, hf[n];
    CHECK(cudaMalloc(&df, n * sizeof(float)));
    Params p = {0.5, 7, {0.25f, 0.5f, 0.75f}};
    withStruct<<<(n + 127) / 128, 128>>>(p, df, n);
    CHECK(cudaMemcpy(hf, df, sizeof(hf), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) EXPECT(hf[i] == (float)(i * p.scale + p.offset + p.bias[i % 3]), "withStruct");
    printf("ok withStruct\n");

    // Templates, two instantiations.
    int *di, hi[n];
    CHECK(cudaMalloc(&di, n * sizeof(int)));
    fill<int><<<4, 256>>>(di, 77, n);
    CHECK(cudaMemcpy(hi, di, sizeof(hi), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) EXPECT(hi[i] == 77, "fill<int>");
    double *dv, hv[10];
    CHECK(cudaMalloc(&dv, sizeof(hv)));
    fill<double><<<1, 32>>>(dv, 2.5, 10);
    CHECK(cudaMemcpy(hv, dv, sizeof(hv), cudaMemcpyDeviceToHost));
    for (int i = 0; i < 10; i++) EXPECT(hv[i] == 2.5, "fill<double>");
    printf("ok templates\n");

    // A kernel in a namespace, working in place.
    for (int i = 0; i < n; i++) hf[i] = i;
    CHECK(cudaMemcpy(df, hf, sizeof(hf), cudaMemcpyHostToDevice));
    math::square<<<(n + 255) / 256, 256>>>(df, n);
    CHECK(cudaMemcpy(hf, df, sizeof(hf), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) EXPECT(hf[i] == (float)i * i, "math::square");
    printf("ok namespace\n");

    // 2-D and 3-D grids (sizes not multiples of the block).
    int w = 37, h = 19, d = 5;
    int *dg, *hg = new int[w * h * d];
    CHECK(cudaMalloc(&dg, w * h * d * sizeof(int)));
    grid2d<<<dim3((w + 7) / 8, (h + 7) / 8), dim3(8, 8)>>>(dg, w, h);
    CHECK(cudaMemcpy(hg, dg, w * h * sizeof(int), cudaMemcpyDeviceToHost));
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) EXPECT(hg[y * w + x] == x + 1000 * y, "grid2d");
    printf("ok grid2d\n");
    grid3d<<<dim3((w + 7) / 8, (h + 3) / 4, (d + 1) / 2), dim3(8, 4, 2)>>>(dg, w, h, d);
    CHECK(cudaMemcpy(hg, dg, w * h * d * sizeof(int), cudaMemcpyDeviceToHost));
    for (int z = 0; z < d; z++)
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) EXPECT(hg[(z * h + y) * w + x] == x + 100 * y + 10000 * z, "grid3d");
    printf("ok grid3d\n");

    noParams<<<1, 1>>>();
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    printf("ok noParams\n");

    // Device properties.
    int dev = -1;
    CHECK(cudaGetDevice(&dev));
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, dev));
    printf("device %d: %s, cc %d.%d, %zu bytes, %d SMs, warp %d, max threads/block %d, maxThreadsDim %d %d %d\n",
           dev, prop.name, prop.major, prop.minor, prop.totalGlobalMem, prop.multiProcessorCount, prop.warpSize,
           prop.maxThreadsPerBlock, prop.maxThreadsDim[0], prop.maxThreadsDim[1], prop.maxThreadsDim[2]);
    size_t freeMem = 0, totalMem = 0;
    CHECK(cudaMemGetInfo(&freeMem, &totalMem));
    EXPECT(totalMem == prop.totalGlobalMem && freeMem <= totalMem, "cudaMemGetInfo");
    int runtime = 0, driver = 0;
    CHECK(cudaRuntimeGetVersion(&runtime));
    CHECK(cudaDriverGetVersion(&driver));
    printf("runtime %d driver %d\n", runtime, driver);

    CHECK(cudaFree(dd)); CHECK(cudaFree(df)); CHECK(cudaFree(di)); CHECK(cudaFree(dv)); CHECK(cudaFree(dg));
    delete[] hg;
    printf("PASSED kernel_zoo\n");
    return 0;
}
