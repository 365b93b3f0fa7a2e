// A runtime program (nvcc -cudart shared) that reaches the driver API the way
// libraries do: cudaGetDriverEntryPointByVersion, then a call through the
// pointer it gives.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <stdio.h>

int main(void)
{
    void *fn = NULL;
    cudaDriverEntryPointQueryResult status;
    cudaError_t err = cudaGetDriverEntryPointByVersion("cuDriverGetVersion", &fn, 12000, cudaEnableDefault,
                                                       &status);
    if (err != cudaSuccess || status != cudaDriverEntryPointSuccess || fn == NULL) {
        printf("FAILED entry point: %s, status %d\n", cudaGetErrorName(err), (int)status);
        return 1;
    }
    int version = 0;
    CUresult result = ((PFN_cuDriverGetVersion_v2020)fn)(&version);
    printf("cuDriverGetVersion through the entry point: %d, %d\n", (int)result, version);
    err = cudaGetDriverEntryPointByVersion("cuNoSuchFunction", &fn, 12000, cudaEnableDefault, &status);
    printf("unknown symbol: %s, status %d, %s\n", cudaGetErrorName(err), (int)status, fn ? "pointer" : "NULL");
    int runtime_version = 0;
    cudaDriverGetVersion(&runtime_version);
    printf("%s\n", result == CUDA_SUCCESS && version == CUDA_VERSION && status == cudaDriverEntryPointSymbolNotFound
                   && fn == NULL ? "PASSED driver_entry_point" : "FAILED");
    return 0;
}
