// A shared library with a kernel of its own, for dlopen_modules.cu: its
// constructor registers a CUDA module when it is loaded, its destructor
// unregisters it when it is closed.
#include <cuda_runtime.h>

namespace math {
__global__ void square(float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= x[i];
}
}

extern "C" cudaError_t library_square(float *device_x, int n) {
    math::square<<<(n + 255) / 256, 256>>>(device_x, n);
    return cudaGetLastError();
}
