// driver_mixed.cu's driver-side kernel, built with nvcc -ptx.
extern "C" __global__ void double_all(int *x, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= 2;
}
