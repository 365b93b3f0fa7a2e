// A kernel compiled at run time by NVRTC on this (the client's) machine,
// loaded with cuModuleLoadData and launched with cuLaunchKernel, for the
// compute capability the device reports.  Built against the NVRTC of
// PyPI's nvidia-cuda-nvrtc (its headers and libnvrtc.so.13).
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>

#define N 128

static const char source[] =
    "extern \"C\" __global__ void nvrtc_iota(int *x, int base, int n)\n"
    "{\n"
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i < n) x[i] = base + i;\n"
    "}\n";

static int failures = 0;

static void check(int ok, const char *name)
{
    printf("%s %s\n", ok ? "ok" : "FAILED", name);
    failures += !ok;
}

int main(void)
{
    check(cuInit(0) == CUDA_SUCCESS, "init");
    int major = 0, minor = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
    int arch = major * 10 + minor, archs[64], count = 0, supported = 0;
    check(nvrtcGetNumSupportedArchs(&count) == NVRTC_SUCCESS && count > 0 && count <= 64
          && nvrtcGetSupportedArchs(archs) == NVRTC_SUCCESS, "supported_archs");
    for (int i = 0; i < count; i++) supported |= archs[i] == arch;
    printf("device compute capability %d.%d; NVRTC targets %d architectures\n", major, minor, count);
    check(supported, "device_arch_supported");

    nvrtcProgram program;
    char option[64];
    snprintf(option, sizeof option, "--gpu-architecture=compute_%d", arch);
    const char *options[] = {option};
    size_t ptx_size = 0;
    check(nvrtcCreateProgram(&program, source, "nvrtc_iota.cu", 0, NULL, NULL) == NVRTC_SUCCESS
          && nvrtcCompileProgram(program, 1, options) == NVRTC_SUCCESS
          && nvrtcGetPTXSize(program, &ptx_size) == NVRTC_SUCCESS, "nvrtc_compile");
    char *ptx = (char *)malloc(ptx_size);
    nvrtcGetPTX(program, ptx);
    nvrtcDestroyProgram(&program);

    CUmodule module = NULL;
    CUfunction iota = NULL;
    void *x = NULL;
    int base = 40, n = N, host[N];
    void *params[] = {&x, &base, &n};
    int right = cudaMalloc(&x, sizeof host) == cudaSuccess
                && cuModuleLoadData(&module, ptx) == CUDA_SUCCESS
                && cuModuleGetFunction(&iota, module, "nvrtc_iota") == CUDA_SUCCESS
                && cuLaunchKernel(iota, N / 32, 1, 1, 32, 1, 1, 0, NULL, params, NULL) == CUDA_SUCCESS
                && cudaMemcpy(host, x, sizeof host, cudaMemcpyDeviceToHost) == cudaSuccess;
    for (int i = 0; right && i < N; i++) right = host[i] == base + i;
    check(right, "nvrtc_kernel_runs");

    printf("%s\n", failures ? "FAILED" : "PASSED driver_nvrtc");
    return failures ? 1 : 0;
}
