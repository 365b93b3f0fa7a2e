// Kernels with every kind of parameter, for tests/test_fatbin.py: the
// parameter layouts read from the cubin and from the PTX must agree.
#include <cuda_runtime.h>

struct P { double a; int b; float c[3]; };            // 24 bytes, 8-aligned
struct Chars { char x, y, z; };                        // 3 bytes, 1-aligned
struct Big { int v[250]; };                            // 1000 bytes, 4-aligned
struct __align__(16) Aligned { float x; };             // 16 bytes, 16-aligned
struct Mid { char b[16000]; };                         // parameter blocks beyond ~4 KiB: KPARAM_INFO_V2
struct Huge { int v[8188]; };                          // 32752 bytes: with 12 more, CUDA's 32764

__device__ float gvar[16];
__constant__ int cvar[4];
__device__ int initd = 5;
__device__ double dvar;

__global__ void withStruct(P p, float *out, char c, long long q) { out[0] = p.a + c + q + gvar[0] + cvar[1] + initd + dvar; }

__global__ void scalars(double *out, int i, float f, double d, char c, long long q, unsigned short us, bool b) {
    out[0] = i + f + d + c + q + us + b;
}

__global__ void mixed(char c, Chars s, short h, float4 v, Aligned a, Big big, double *out) {
    out[0] = c + s.x + h + v.x + a.x + big.v[7];
}

__global__ void unused(int a, double b, char *c) {}

__global__ void gridConstant(const __grid_constant__ P p, int *out) { out[0] = p.b; }

__global__ void noParams() {}

__global__ void midSized(char c, Mid m, short s, int *out) { out[0] = c + m.b[s]; }

__global__ void largest(const __grid_constant__ Huge h, int *out, int n) { out[0] = h.v[n]; }

// Static shared memory, a stack frame and launch bounds, for the resources test.
__global__ void __launch_bounds__(128) tiled(float *out, int n) {
    __shared__ float tile[128];
    float scratch[256];  // indexed at run time: lives in local memory (the stack frame)
    for (int i = 0; i < 256; i++) scratch[i] = out[i * n + threadIdx.x];
    tile[threadIdx.x] = scratch[(threadIdx.x + n) % 256];
    __syncthreads();
    out[threadIdx.x] = tile[127 - threadIdx.x] + scratch[n % 256];
}

template <typename T>
__global__ void fill(T *out, T value, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = value;
}
template __global__ void fill<int>(int *, int, int);
template __global__ void fill<double>(double *, double, int);

namespace math {
__global__ void scale(float *x, float f, double d, unsigned short us, short s) { x[0] *= f * d + us + s; }
}  // namespace math

int main() {
    noParams<<<1, 1>>>();
    return cudaDeviceSynchronize() == cudaSuccess ? 0 : 1;
}
