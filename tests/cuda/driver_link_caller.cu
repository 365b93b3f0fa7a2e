// Linked with driver_link_callee.cu by cuLinkComplete (both nvcc -ptx -rdc=true):
// `twice` is an extern __device__ function defined only there.
extern __device__ float twice(float value);

extern "C" __global__ void apply_twice(float *x, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = twice(x[i]);
}
