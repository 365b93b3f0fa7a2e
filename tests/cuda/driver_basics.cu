// The CUDA driver API's basics, in a program linked to libcuda.so.1 only
// (nvcc -cudart none -x c++: no kernels, so no runtime registration): initialisation, versions, error strings, entry points,
// and a function rcuda does not implement yet.  Prints "ok NAME" per check.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <stdio.h>
#include <string.h>

// Variants cuda.h does not declare to this program: the per-thread-default-
// stream one (only to programs built with --default-stream per-thread), and
extern "C" CUresult CUDAAPI cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount);
// CUDA 11.4's cuCtxCreate (only inside the driver).
extern "C" CUresult CUDAAPI cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
                                          unsigned int flags, CUdevice dev);

static int failures = 0;

static void check(int ok, const char *name)
{
    printf("%s %s\n", ok ? "ok" : "FAILED", name);
    failures += !ok;
}

int main(void)
{
    CUresult bad_flags = cuInit(1);
    check(bad_flags == CUDA_ERROR_INVALID_VALUE, "init_refuses_flags");
    check(cuInit(0) == CUDA_SUCCESS, "init");

    int version = 0;
    check(cuDriverGetVersion(&version) == CUDA_SUCCESS && version == CUDA_VERSION, "driver_version");
    check(cuDriverGetVersion(NULL) == CUDA_ERROR_INVALID_VALUE, "driver_version_null");

    const char *name = NULL, *text = NULL;
    check(cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &name) == CUDA_SUCCESS
          && strcmp(name, "CUDA_ERROR_OUT_OF_MEMORY") == 0, "error_name");
    check(cuGetErrorString(CUDA_ERROR_INVALID_VALUE, &text) == CUDA_SUCCESS
          && strcmp(text, "invalid argument") == 0, "error_string");
    check(cuGetErrorName((CUresult)12345, &name) == CUDA_ERROR_INVALID_VALUE && name == NULL, "error_name_unknown");
    printf("error string of CUDA_ERROR_NOT_INITIALIZED: %s\n",
           cuGetErrorString(CUDA_ERROR_NOT_INITIALIZED, &text) == CUDA_SUCCESS ? text : "?");

    // cuGetProcAddress: the newest variant no newer than the version asked for.
    void *fn = NULL;
    CUdriverProcAddressQueryResult status;
    check(cuGetProcAddress("cuDriverGetVersion", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &status) == CUDA_SUCCESS
          && status == CU_GET_PROC_ADDRESS_SUCCESS && fn != NULL, "proc_found");
    int through_pointer = 0;
    check(fn && ((PFN_cuDriverGetVersion_v2020)fn)(&through_pointer) == CUDA_SUCCESS
          && through_pointer == version, "proc_call");
    check(cuGetProcAddress("cuMemAlloc", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &status) == CUDA_SUCCESS
          && fn == (void *)&cuMemAlloc_v2, "proc_newest_variant");
    check(cuGetProcAddress("cuCtxCreate", &fn, 11040, CU_GET_PROC_ADDRESS_DEFAULT, &status) == CUDA_SUCCESS
          && fn == (void *)&cuCtxCreate_v3, "proc_variant_of_version");
    check(cuGetProcAddress("cuMemAllocAsync", &fn, 11000, CU_GET_PROC_ADDRESS_DEFAULT, &status) == CUDA_SUCCESS
          && status == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT && fn == NULL, "proc_version_not_sufficient");
    check(cuGetProcAddress("cuNoSuchFunction", &fn, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &status) == CUDA_SUCCESS
          && status == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND && fn == NULL, "proc_not_found");
    check(cuGetProcAddress("cuMemcpyHtoD", &fn, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &status)
          == CUDA_SUCCESS && fn == (void *)&cuMemcpyHtoD_v2_ptds, "proc_per_thread");
    check(cuGetProcAddress("cuMemcpyHtoD", &fn, 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &status)
          == CUDA_SUCCESS && fn == (void *)&cuMemcpyHtoD_v2, "proc_legacy_stream");
    check(cuGetProcAddress("cuInit", &fn, 12000, 0x40, &status) == CUDA_ERROR_INVALID_VALUE, "proc_bad_flags");
    check(cuGetProcAddress("cuInit", &fn, 99000, 0, &status) == CUDA_ERROR_INVALID_VALUE, "proc_future_version");

    // A function rcuda does not implement yet: an answer, and the program goes on.
    check(cuGraphicsUnregisterResource(NULL) == CUDA_ERROR_NOT_SUPPORTED, "not_supported_yet");

    printf("%s\n", failures ? "FAILED" : "PASSED driver_basics");
    return failures ? 1 : 0;
}
