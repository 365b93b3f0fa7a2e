// Driver API modules, libraries, linking and launches, in a program with no
// kernels of its own (nvcc -x c++): images come from files nvcc built from
// driver_module_kernels.cu and driver_link_*.cu.  Device memory is the
// runtime's (cudaMalloc): a CUdeviceptr and a runtime pointer are one thing.
//
//   driver_modules KERNELS.fatbin KERNELS.cubin KERNELS.ptx CALLER.ptx CALLEE.ptx
//
// Prints "ok NAME" per check, then "PASSED driver_modules".
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 256
#define LOG_BYTES 4096

static int failures = 0;

static void check(int ok, const char *name)
{
    printf("%s %s\n", ok ? "ok" : "FAILED", name);
    failures += !ok;
}

static char *read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); exit(2); }
    fseek(f, 0, SEEK_END);
    *size = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    char *data = (char *)calloc(*size + 1, 1);  // NUL-terminated: PTX is text
    if (fread(data, 1, *size, f) != *size) { perror(path); exit(2); }
    fclose(f);
    return data;
}

// x[i] = i on the device; the pointer, as a CUdeviceptr.
static CUdeviceptr upload_iota(float *host)
{
    void *device = NULL;
    for (int i = 0; i < N; i++) host[i] = (float)i;
    if (cudaMalloc(&device, N * sizeof(float)) != cudaSuccess
        || cudaMemcpy(device, host, N * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess) {
        printf("FAILED upload\n");
        exit(1);
    }
    return (CUdeviceptr)device;
}

// Whether x on the device is expected[i] = i * factor + bias.
static int holds(CUdeviceptr x, float factor, float bias)
{
    float host[N];
    if (cudaMemcpy(host, (void *)x, sizeof host, cudaMemcpyDeviceToHost) != cudaSuccess) return 0;
    for (int i = 0; i < N; i++)
        if (host[i] != (float)i * factor + bias) {
            printf("  x[%d] = %g, expected %g\n", i, host[i], (float)i * factor + bias);
            return 0;
        }
    return 1;
}

static CUresult launch_scale(CUfunction f, CUdeviceptr x, float factor, CUstream stream)
{
    int n = N;
    void *params[] = {&x, &factor, &n};
    return cuLaunchKernel(f, N / 64, 1, 1, 64, 1, 1, 0, stream, params, NULL);
}

// add_bias(float *x, double bias, int n) through `extra`: a 20-byte block.
static CUresult launch_add_bias_extra(CUfunction f, CUdeviceptr x, double bias, size_t size)
{
    char block[24] = {0};
    int n = N;
    memcpy(block, &x, 8);
    memcpy(block + 8, &bias, 8);
    memcpy(block + 16, &n, 4);
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, block, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
    return cuLaunchKernel(f, N / 64, 1, 1, 64, 1, 1, 0, NULL, NULL, extra);
}

// cuModuleLoadDataEx with both logs; the error log's text in `error_log`.
static CUresult load_with_logs(CUmodule *module, const void *image, char *info_log, char *error_log)
{
    CUjit_option options[] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, CU_JIT_ERROR_LOG_BUFFER,
                              CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_OPTIMIZATION_LEVEL};
    void *values[] = {info_log, (void *)(size_t)LOG_BYTES, error_log, (void *)(size_t)LOG_BYTES, (void *)(size_t)3};
    info_log[0] = error_log[0] = 0;
    return cuModuleLoadDataEx(module, image, 5, options, values);
}

int main(int argc, char **argv)
{
    if (argc != 7) {
        fprintf(stderr, "usage: %s KERNELS.fatbin KERNELS.cubin KERNELS.ptx CALLER.ptx CALLEE.ptx SM90.cubin\n",
                argv[0]);
        return 2;
    }
    size_t fatbin_size, cubin_size, ptx_size, callee_size;
    char *fatbin = read_file(argv[1], &fatbin_size);
    char *cubin = read_file(argv[2], &cubin_size);
    char *ptx = read_file(argv[3], &ptx_size);
    char *callee = read_file(argv[5], &callee_size);
    float host[N];
    char info_log[LOG_BYTES], error_log[LOG_BYTES];

    CUmodule module = NULL;
    check(cuModuleLoadData(&module, ptx) == CUDA_ERROR_NOT_INITIALIZED, "before_init");
    check(cuInit(0) == CUDA_SUCCESS, "init");

    // A fatbinary file, kernelParams.
    CUmodule from_fatbin = NULL;
    CUfunction scale = NULL;
    CUdeviceptr x = upload_iota(host);
    check(cuModuleLoad(&from_fatbin, argv[1]) == CUDA_SUCCESS
          && cuModuleGetFunction(&scale, from_fatbin, "scale") == CUDA_SUCCESS
          && launch_scale(scale, x, 3.0f, NULL) == CUDA_SUCCESS && holds(x, 3.0f, 0.0f), "fatbin_kernel_params");
    CUfunction again = NULL;
    check(cuModuleGetFunction(&again, from_fatbin, "scale") == CUDA_SUCCESS && again == scale, "same_function");

    // A cubin in memory, `extra`; a wrong block size.
    CUmodule from_cubin = NULL;
    CUfunction add_bias = NULL;
    x = upload_iota(host);
    check(cuModuleLoadData(&from_cubin, cubin) == CUDA_SUCCESS
          && cuModuleGetFunction(&add_bias, from_cubin, "add_bias") == CUDA_SUCCESS
          && launch_add_bias_extra(add_bias, x, 0.5, 20) == CUDA_SUCCESS && holds(x, 1.0f, 0.5f), "cubin_extra");
    check(launch_add_bias_extra(add_bias, x, 0.5, 24) == CUDA_ERROR_INVALID_VALUE
          && launch_add_bias_extra(add_bias, x, 0.5, 16) == CUDA_ERROR_INVALID_VALUE && holds(x, 1.0f, 0.5f),
          "extra_wrong_size");
    {
        int n = N;
        double bias = 1.0;
        size_t size = 20;
        char block[24];
        void *params[] = {&x, &bias, &n};
        void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, block, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
        check(cuLaunchKernel(add_bias, 4, 1, 1, 64, 1, 1, 0, NULL, params, extra) == CUDA_ERROR_INVALID_VALUE
              && cuLaunchKernel(add_bias, 4, 1, 1, 64, 1, 1, 0, NULL, NULL, NULL) == CUDA_ERROR_INVALID_VALUE,
              "parameter_styles_refused");
    }

    // PTX with JIT log options; the module's functions and variables.
    CUmodule from_ptx = NULL;
    CUfunction ptx_scale = NULL;
    x = upload_iota(host);
    check(load_with_logs(&from_ptx, ptx, info_log, error_log) == CUDA_SUCCESS && error_log[0] == 0
          && cuModuleGetFunction(&ptx_scale, from_ptx, "scale") == CUDA_SUCCESS
          && launch_scale(ptx_scale, x, -2.0f, NULL) == CUDA_SUCCESS && holds(x, -2.0f, 0.0f), "ptx_with_logs");
    printf("info log: %s\n", info_log);
    unsigned int count = 0;
    CUfunction all[8] = {0};
    check(cuModuleGetFunctionCount(&count, from_ptx) == CUDA_SUCCESS && count == 3
          && cuModuleEnumerateFunctions(all, 8, from_ptx) == CUDA_SUCCESS
          && (all[0] == ptx_scale || all[1] == ptx_scale || all[2] == ptx_scale) && all[3] == NULL,
          "function_count");
    CUfunction missing = NULL;
    check(cuModuleGetFunction(&missing, from_ptx, "no_such_kernel") == CUDA_ERROR_NOT_FOUND, "function_not_found");
    check(cuModuleGetFunction(NULL, from_ptx, "scale") == CUDA_ERROR_INVALID_VALUE
          && cuModuleGetFunction(&missing, (CUmodule)0x1234, "scale") == CUDA_ERROR_INVALID_HANDLE
          && cuModuleLoadData(NULL, ptx) == CUDA_ERROR_INVALID_VALUE
          && cuModuleLoadData(&module, NULL) == CUDA_ERROR_INVALID_VALUE, "bad_arguments");

    CUdeviceptr counter = 0;
    size_t counter_size = 0;
    CUfunction bump = NULL;
    int value = 0, by = 5;
    void *bump_params[] = {&by};
    check(cuModuleGetGlobal(&counter, &counter_size, from_cubin, "counter") == CUDA_SUCCESS && counter_size == 4
          && cudaMemcpy(&value, (void *)counter, 4, cudaMemcpyDeviceToHost) == cudaSuccess && value == 7
          && cuModuleGetFunction(&bump, from_cubin, "bump_counter") == CUDA_SUCCESS
          && cuLaunchKernel(bump, 1, 1, 1, 1, 1, 1, 0, NULL, bump_params, NULL) == CUDA_SUCCESS
          && cudaMemcpy(&value, (void *)counter, 4, cudaMemcpyDeviceToHost) == cudaSuccess && value == 12,
          "module_global");
    check(cuModuleGetGlobal(&counter, NULL, from_cubin, "no_such_variable") == CUDA_ERROR_NOT_FOUND, "global_not_found");

    // A fatbinary in memory.
    CUmodule fat_in_memory = NULL;
    CUfunction fat_scale = NULL;
    x = upload_iota(host);
    check(cuModuleLoadFatBinary(&fat_in_memory, fatbin) == CUDA_SUCCESS
          && cuModuleGetFunction(&fat_scale, fat_in_memory, "scale") == CUDA_SUCCESS
          && launch_scale(fat_scale, x, 0.5f, NULL) == CUDA_SUCCESS && holds(x, 0.5f, 0.0f), "fatbinary_in_memory");
    check(cuModuleLoadFatBinary(&module, ptx) == CUDA_ERROR_INVALID_IMAGE, "fatbinary_refuses_ptx");
    {
        // A cubin for compute capability 9.0 only: a GPU older than that cannot load it.
        size_t sm90_size;
        char *sm90 = read_file(argv[6], &sm90_size);
        int major = 0, minor = 0;
        CUdevice gpu0;
        cuDeviceGet(&gpu0, 0);
        cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, gpu0);
        cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, gpu0);
        if (major * 10 + minor < 90)
            check(cuModuleLoadData(&module, sm90) == CUDA_ERROR_NO_BINARY_FOR_GPU, "cubin_for_a_newer_gpu");
        else
            printf("ok cubin_for_a_newer_gpu (not checked: the GPU is %d.%d)\n", major, minor);
        free(sm90);
    }
    {
        unsigned int huge[4] = {0xBA55ED50u, 0x00100001u, 0xffffffffu, 0x7fffffffu};  // claims 2^63 bytes
        check(cuModuleLoadData(&module, huge) == CUDA_ERROR_INVALID_IMAGE, "corrupt_fatbinary");
    }

    // Launches with attributes, cooperative ones, on a stream, in order.
    CUstream stream = NULL;
    cudaStreamCreate((cudaStream_t *)&stream);
    x = upload_iota(host);
    {
        int n = N;
        float factor = 2.0f;
        void *params[] = {&x, &factor, &n};
        CUlaunchAttribute attrs[2];
        memset(attrs, 0, sizeof attrs);
        attrs[0].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
        attrs[0].value.cooperative = 1;
        attrs[1].id = CU_LAUNCH_ATTRIBUTE_PRIORITY;  // a hint
        attrs[1].value.priority = 0;
        CUlaunchConfig config;
        memset(&config, 0, sizeof config);
        config.gridDimX = N / 64, config.gridDimY = config.gridDimZ = 1;
        config.blockDimX = 64, config.blockDimY = config.blockDimZ = 1;
        config.hStream = stream, config.attrs = attrs, config.numAttrs = 2;
        check(cuLaunchKernelEx(&config, ptx_scale, params, NULL) == CUDA_SUCCESS
              && cuLaunchCooperativeKernel(ptx_scale, N / 64, 1, 1, 64, 1, 1, 0, stream, params) == CUDA_SUCCESS
              && cudaStreamSynchronize((cudaStream_t)stream) == cudaSuccess && holds(x, 4.0f, 0.0f),
              "launch_ex_cooperative");
        check(cuLaunchCooperativeKernel(ptx_scale, 1 << 20, 1, 1, 1024, 1, 1, 0, stream, params)
              == CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, "cooperative_too_large");
        // A cluster shape: not supported by a GPU without clusters (before
        // compute capability 9.0); on one with clusters this shape (1 x 0 x 0,
        // the cooperative value's bytes) is a misconfigured cluster.
        int clusters = 0;
        cuDeviceGetAttribute(&clusters, CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH, 0);
        attrs[0].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
        check(cuLaunchKernelEx(&config, ptx_scale, params, NULL)
                  == (clusters ? CUDA_ERROR_INVALID_CLUSTER_SIZE : CUDA_ERROR_NOT_SUPPORTED), "launch_ex_cluster");
    }
    x = upload_iota(host);
    for (int round = 0; round < 3; round++) {  // ((i * 2 + 0.5) * 2 + 0.5) * 2 + 0.5: only in this order
        int n = N;
        float factor = 2.0f;
        double bias = 0.5;
        void *scale_params[] = {&x, &factor, &n};
        void *bias_params[] = {&x, &bias, &n};
        cuLaunchKernel(ptx_scale, N / 64, 1, 1, 64, 1, 1, 0, stream, scale_params, NULL);
        cuLaunchKernel(add_bias, N / 64, 1, 1, 64, 1, 1, 0, stream, bias_params, NULL);
    }
    check(cudaStreamSynchronize((cudaStream_t)stream) == cudaSuccess && holds(x, 8.0f, 3.5f), "stream_order");

    // Another context's function: GPU1's (the runtime's device 1).
    int devices = 0;
    cudaGetDeviceCount(&devices);
    if (devices > 1) {
        cudaSetDevice(1);
        check(launch_scale(scale, x, 1.0f, NULL) == CUDA_ERROR_INVALID_HANDLE, "other_context_function");
        cudaSetDevice(0);
    }

    // Unloaded: every handle of the module is invalid.
    check(cuModuleUnload(from_fatbin) == CUDA_SUCCESS && launch_scale(scale, x, 1.0f, NULL) == CUDA_ERROR_INVALID_HANDLE
          && cuModuleGetFunction(&again, from_fatbin, "scale") == CUDA_ERROR_INVALID_HANDLE
          && cuModuleUnload(from_fatbin) == CUDA_ERROR_INVALID_HANDLE, "unloaded");

    // A library: context-independent kernels.
    CUlibrary library = NULL;
    CUkernel library_scale = NULL;
    CUmodule library_module = NULL;
    x = upload_iota(host);
    check(cuLibraryLoadData(&library, ptx, NULL, NULL, 0, NULL, NULL, 0) == CUDA_SUCCESS
          && cuLibraryGetKernel(&library_scale, library, "scale") == CUDA_SUCCESS
          && launch_scale((CUfunction)library_scale, x, 5.0f, NULL) == CUDA_SUCCESS && holds(x, 5.0f, 0.0f)
          && cuLibraryGetModule(&library_module, library) == CUDA_SUCCESS && library_module != NULL,
          "library_kernel");
    if (devices > 1) {
        CUfunction on_gpu1 = NULL;
        cudaSetDevice(1);
        CUdeviceptr y = upload_iota(host);
        check(cuKernelGetFunction(&on_gpu1, library_scale) == CUDA_SUCCESS && on_gpu1 != NULL
              && launch_scale(on_gpu1, y, 7.0f, NULL) == CUDA_SUCCESS && holds(y, 7.0f, 0.0f), "library_other_gpu");
        cudaSetDevice(0);
    }
    {
        // Counting and listing a library's kernels: the handles cuLibraryGetKernel gives.
        unsigned int count = 0;
        CUkernel listed[8] = {NULL};
        int found_scale = 0;
        check(cuLibraryGetKernelCount(&count, library) == CUDA_SUCCESS && count >= 3 && count <= 8
              && cuLibraryEnumerateKernels(listed, count, library) == CUDA_SUCCESS, "library_enumerate");
        for (unsigned int i = 0; i < count; i++) found_scale |= listed[i] == library_scale;
        check(found_scale, "library_enumerate_handles");
        // An attribute set on a library's kernel for one device reads back through its function there.
        CUfunction scale_fn = NULL;
        int value = -1;
        check(cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 1024, library_scale, 0) == CUDA_SUCCESS
              && cuKernelGetFunction(&scale_fn, library_scale) == CUDA_SUCCESS
              && cuFuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, scale_fn) == CUDA_SUCCESS
              && value == 1024
              && cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_NUM_REGS, 1, library_scale, 0) == CUDA_ERROR_INVALID_VALUE,
              "kernel_set_attribute");
    }
    CUkernel gone = NULL;
    check(cuLibraryGetKernel(&gone, library, "no_such_kernel") == CUDA_ERROR_NOT_FOUND
          && cuLibraryUnload(library) == CUDA_SUCCESS
          && cuLibraryGetKernel(&gone, library, "scale") == CUDA_ERROR_INVALID_HANDLE
          && launch_scale((CUfunction)library_scale, x, 1.0f, NULL) == CUDA_ERROR_INVALID_HANDLE, "library_unload");

    // Linking two -rdc PTX files: apply_twice calls the other's twice().
    {
        CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_WALL_TIME};
        void *values[] = {error_log, (void *)(size_t)LOG_BYTES, NULL};
        CUlinkState link = NULL;
        void *image = NULL;
        size_t image_size = 0;
        CUmodule linked = NULL;
        CUfunction apply_twice = NULL;
        int n = N;
        x = upload_iota(host);
        void *params[] = {&x, &n};
        error_log[0] = 0;
        check(cuLinkCreate(3, options, values, &link) == CUDA_SUCCESS
              && cuLinkAddFile(link, CU_JIT_INPUT_PTX, argv[4], 0, NULL, NULL) == CUDA_SUCCESS
              && cuLinkAddData(link, CU_JIT_INPUT_PTX, callee, callee_size + 1, "callee.ptx", 0, NULL, NULL)
                 == CUDA_SUCCESS
              && cuLinkComplete(link, &image, &image_size) == CUDA_SUCCESS && image != NULL && image_size > 0
              && cuModuleLoadData(&linked, image) == CUDA_SUCCESS
              && cuModuleGetFunction(&apply_twice, linked, "apply_twice") == CUDA_SUCCESS
              && cuLaunchKernel(apply_twice, N / 64, 1, 1, 64, 1, 1, 0, NULL, params, NULL) == CUDA_SUCCESS
              && holds(x, 2.0f, 0.0f) && error_log[0] == 0, "link_rdc_ptx");
        check(cuLinkDestroy(link) == CUDA_SUCCESS && cuLinkDestroy(link) == CUDA_ERROR_INVALID_HANDLE, "link_destroy");

        // The caller alone: twice() is undefined.  (The driver wrote the
        // log's length over its size.)
        values[1] = (void *)(size_t)LOG_BYTES;
        CUresult result = cuLinkCreate(2, options, values, &link);
        if (result == CUDA_SUCCESS) result = cuLinkAddFile(link, CU_JIT_INPUT_PTX, argv[4], 0, NULL, NULL);
        if (result == CUDA_SUCCESS) result = cuLinkComplete(link, &image, &image_size);
        check(result != CUDA_SUCCESS && strstr(error_log, "_Z5twicef") != NULL, "link_undefined_function");
        printf("undefined function log: %s\n", error_log);
        cuLinkDestroy(link);
    }

    // Bytes that are no image at all: CUDA_ERROR_INVALID_IMAGE, as a GPU's driver says.
    static const char not_an_image[] = "this is not PTX";
    check(cuModuleLoadData(&module, not_an_image) == CUDA_ERROR_INVALID_IMAGE, "not_an_image_load");
    // PTX that calls printf (vprintf, which the driver provides) loads.
    static const char prints[] = ".version 8.0\n.target sm_75\n.address_size 64\n"
                                 ".extern .func (.param .b32 func_retval0) vprintf(.param .b64 a, .param .b64 b);\n"
                                 ".visible .entry hello()\n{\n\tret;\n}\n";
    CUmodule printing = NULL;
    check(cuModuleLoadData(&printing, prints) == CUDA_SUCCESS && cuModuleUnload(printing) == CUDA_SUCCESS,
          "ptx_calling_vprintf");
    // A missing file: CUDA_ERROR_FILE_NOT_FOUND (and no complaint in the log: the status says it).
    {
        CUlinkState link = NULL;
        check(cuLinkCreate(0, NULL, NULL, &link) == CUDA_SUCCESS
              && cuLinkAddFile(link, CU_JIT_INPUT_PTX, "/no/such/file.ptx", 0, NULL, NULL) == CUDA_ERROR_FILE_NOT_FOUND
              && cuLinkDestroy(link) == CUDA_SUCCESS, "link_missing_file");
    }

    // Bad PTX: CUDA_ERROR_INVALID_PTX with a log, at load or at link.
    static const char no_target[] = ".version 8.0\n.address_size 64\n.visible .entry empty()\n{\n\tret;\n}\n";
    static const char unbalanced[] = ".version 8.0\n.target sm_75\n.address_size 64\n"
                                     ".visible .entry broken(.param .u64 p\n{\n\tret;\n}\n";
    check(load_with_logs(&module, no_target, info_log, error_log) == CUDA_ERROR_INVALID_PTX && error_log[0] != 0,
          "bad_ptx_load");
    printf("bad PTX log: %s\n", error_log);
    check(load_with_logs(&module, unbalanced, info_log, error_log) == CUDA_ERROR_INVALID_PTX && error_log[0] != 0,
          "unbalanced_ptx_load");
    printf("unbalanced PTX log: %s\n", error_log);
    {
        CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
        void *values[] = {error_log, (void *)(size_t)LOG_BYTES};
        CUlinkState link = NULL;
        void *image = NULL;
        size_t image_size = 0;
        error_log[0] = 0;
        CUresult result = cuLinkCreate(2, options, values, &link);
        if (result == CUDA_SUCCESS)
            result = cuLinkAddData(link, CU_JIT_INPUT_PTX, (void *)unbalanced, sizeof unbalanced, "bad.ptx", 0, NULL,
                                   NULL);
        if (result == CUDA_SUCCESS) result = cuLinkComplete(link, &image, &image_size);
        check(result == CUDA_ERROR_INVALID_PTX && error_log[0] != 0, "bad_ptx_link");
        cuLinkDestroy(link);
    }

    printf("%s\n", failures ? "FAILED" : "PASSED driver_modules");
    return failures ? 1 : 0;
}
