// Kernels the driver-API tests load as a fatbinary (nvcc -fatbin), a cubin
// (nvcc -cubin) and PTX (nvcc -ptx); sim plugins in driver_module_kernels.py.
// extern "C": found by plain name, as driver programs look them up.

__device__ int counter = 7;

extern "C" __global__ void scale(float *x, float factor, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= factor;
}

// Parameters of three sizes: an 8-byte pointer, an 8-byte double, a 4-byte
// int (a 20-byte block: what cuLaunchKernel's `extra` must hold).
extern "C" __global__ void add_bias(float *x, double bias, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += (float)bias;
}

extern "C" __global__ void bump_counter(int by)
{
    if (blockIdx.x == 0 && threadIdx.x == 0) counter += by;
}
