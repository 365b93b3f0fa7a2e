// Kernels driver_parity.cu loads as a library (nvcc -fatbin): __managed__
// variables (cuLibraryGetManaged), a parameter list with padding
// (cuKernelGetParamInfo) and a kernel whose time the sim models (COSTS), for
// cuCtxRecordEvent and cuCtxWaitEvent.  Sim plugins in driver_module_kernels.py.
// extern "C": found by plain name, as driver programs look them up.

__managed__ int managed_total = 5;
__managed__ float managed_table[16];
__device__ int plain_value = 3;

extern "C" __global__ void add_managed(int by)
{
    if (blockIdx.x == 0 && threadIdx.x == 0) managed_total += by + plain_value - 3;
}

// A char at 0, a double at 8, a short at 16, a pointer at 24: 32 bytes.
extern "C" __global__ void mixed_params(char c, double d, short s, int *out)
{
    if (blockIdx.x == 0 && threadIdx.x == 0) *out = c + (int)d + s;
}

// Busy for `nanoseconds` on a GPU (the global timer counts nanoseconds;
// clock64 counts the multiprocessor's cycles); on the sim, its modelled time.
static __device__ long long global_ns()
{
    long long now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    return now;
}

extern "C" __global__ void spin(long long nanoseconds)
{
    long long start = global_ns();
    while (global_ns() - start < nanoseconds) {
    }
}
