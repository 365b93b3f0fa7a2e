// The runtime's library management and kernel handles: cudaLibrary*,
// cudaGetKernel, cudaKernelSetAttributeForDevice, launches of a
// cudaKernel_t, the driver's cuKernel* on the same handles, and
// cudaDeviceRegisterAsyncNotification.  Libraries are files nvcc built
// from driver_module_kernels.cu (sim plugins: driver_module_kernels.py);
// fillKernel is the program's own (runtime_kernels.py).
//
//   runtime_libraries KERNELS.fatbin KERNELS.cubin KERNELS.ptx
//
// Prints "ok NAME" per section, then "PASSED runtime_libraries".
#include <cuda.h>
#include <cstring>

#include "check.h"

#define N 256
#define LOG_BYTES 4096

__global__ void fillKernel(int *out, int value, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = value;
}

static int not_a_kernel;
static int notified = 0;

static char *read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); exit(2); }
    fseek(f, 0, SEEK_END);
    *size = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    char *data = (char *)calloc(*size + 1, 1);
    if (fread(data, 1, *size, f) != *size) { perror(path); exit(2); }
    fclose(f);
    return data;
}

// x[i] = i on the current device.
static float *upload_iota()
{
    float host[N], *x = NULL;
    for (int i = 0; i < N; i++) host[i] = (float)i;
    CHECK(cudaMalloc(&x, sizeof host));
    CHECK(cudaMemcpy(x, host, sizeof host, cudaMemcpyHostToDevice));
    return x;
}

// x[i] == i * factor + bias, read back.
static int holds(const float *x, float factor, float bias)
{
    float host[N];
    CHECK(cudaMemcpy(host, x, sizeof host, cudaMemcpyDeviceToHost));
    for (int i = 0; i < N; i++)
        if (host[i] != (float)i * factor + bias) {
            printf("  x[%d] = %g, expected %g\n", i, host[i], (float)i * factor + bias);
            return 0;
        }
    return 1;
}

static cudaError_t launch_scale(cudaKernel_t scale, float *x, float factor)
{
    int n = N;
    void *args[] = {&x, &factor, &n};
    return cudaLaunchKernel((const void *)scale, dim3(N / 64), dim3(64), args, 0, 0);
}

static int reads_int(const void *device, int expected)
{
    int value = -1;
    CHECK(cudaMemcpy(&value, device, sizeof value, cudaMemcpyDeviceToHost));
    return value == expected;
}

static void on_notification(cudaAsyncNotificationInfo_t *, void *, cudaAsyncCallbackHandle_t)
{
    notified = 1;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s KERNELS.fatbin KERNELS.cubin KERNELS.ptx\n", argv[0]);
        return 2;
    }
    int devices = 0;
    CHECK(cudaGetDeviceCount(&devices));
    REQUIRE(devices >= 2);
    size_t fatbin_size = 0;
    char *fatbin = read_file(argv[1], &fatbin_size);

    // A fatbinary in memory: three kernels, the same handle per name each time.
    cudaLibrary_t library = NULL;
    cudaKernel_t scale = NULL, again = NULL, add_bias = NULL, bump = NULL, listed[4] = {};
    unsigned int count = 0;
    CHECK(cudaLibraryLoadData(&library, fatbin, NULL, NULL, 0, NULL, NULL, 0));
    REQUIRE(library != NULL);
    CHECK(cudaLibraryGetKernelCount(&count, library));
    REQUIRE(count == 3);
    CHECK(cudaLibraryGetKernel(&scale, library, "scale"));
    CHECK(cudaLibraryGetKernel(&again, library, "scale"));
    CHECK(cudaLibraryGetKernel(&add_bias, library, "add_bias"));
    CHECK(cudaLibraryGetKernel(&bump, library, "bump_counter"));
    REQUIRE(scale != NULL && scale == again && scale != add_bias && add_bias != bump);
    CHECK(cudaLibraryEnumerateKernels(listed, 2, library));  // at most numKernels
    REQUIRE(listed[0] != NULL && listed[1] != NULL && listed[2] == NULL);
    CHECK(cudaLibraryEnumerateKernels(listed, 3, library));
    int seen = 0;
    for (int i = 0; i < 3; i++)
        seen |= (listed[i] == scale) << 0 | (listed[i] == add_bias) << 1 | (listed[i] == bump) << 2;
    REQUIRE(seen == 7);
    printf("ok load_and_enumerate\n");

    // A cudaKernel_t passed as cudaLaunchKernel's function pointer; the
    // second launch is one C records, the result the same.
    float *x = upload_iota();
    CHECK(launch_scale(scale, x, 3.0f));
    REQUIRE(holds(x, 3.0f, 0.0f));
    CHECK(launch_scale(scale, x, 2.0f));
    CHECK(launch_scale(scale, x, 0.5f));
    REQUIRE(holds(x, 3.0f, 0.0f));
    printf("ok launch_library_kernel\n");

    {   // cudaLaunchKernelExC: add_bias(float *x, double bias, int n), a 20-byte block.
        double bias = 1.5;
        int n = N;
        void *args[] = {&x, &bias, &n};
        cudaLaunchConfig_t config = {};
        config.gridDim = dim3(N / 64);
        config.blockDim = dim3(64);
        CHECK(cudaLaunchKernelExC(&config, (const void *)add_bias, args));
        REQUIRE(holds(x, 3.0f, 1.5f));
        cudaFuncAttributes attributes;
        CHECK(cudaFuncGetAttributes(&attributes, (const void *)add_bias));  // a cudaKernel_t there too
        REQUIRE(attributes.maxThreadsPerBlock > 0);
    }
    printf("ok launch_ex_library_kernel\n");

    {   // A library's __device__ int counter = 7, on the current device; bump_counter adds to it.
        void *counter = NULL;
        size_t size = 0;
        CHECK(cudaLibraryGetGlobal(&counter, &size, library, "counter"));
        REQUIRE(counter != NULL && size == sizeof(int) && reads_int(counter, 7));
        int by = 5;
        void *args[] = {&by};
        CHECK(cudaLaunchKernel((const void *)bump, dim3(1), dim3(1), args, 0, 0));
        REQUIRE(reads_int(counter, 12));
        void *same = NULL;
        CHECK(cudaLibraryGetGlobal(&same, NULL, library, "counter"));
        REQUIRE(same == counter);
        EXPECT_AND_CLEAR(cudaLibraryGetGlobal(NULL, NULL, library, "counter"), cudaErrorInvalidValue);
        EXPECT_AND_CLEAR(cudaLibraryGetGlobal(&same, &size, library, "no_such_variable"), cudaErrorSymbolNotFound);
    }
    printf("ok library_global\n");

    {   // The library on GPU1: loaded there at its first need; the global is GPU1's own.
        CHECK(cudaSetDevice(1));
        float *y = upload_iota();
        CHECK(launch_scale(scale, y, 7.0f));
        REQUIRE(holds(y, 7.0f, 0.0f));
        void *counter = NULL;
        CHECK(cudaLibraryGetGlobal(&counter, NULL, library, "counter"));
        REQUIRE(reads_int(counter, 7));
        CHECK(cudaFree(y));
        CHECK(cudaSetDevice(0));
    }
    printf("ok library_other_device\n");

    {   // Attributes per device: set on GPU1, read back there by both APIs; GPU0's unchanged.
        const int wanted = 64 * 1024;
        cudaFuncAttributes before, on1, on0;
        CHECK(cudaFuncGetAttributes(&before, (const void *)scale));
        REQUIRE(before.maxDynamicSharedSizeBytes != wanted);
        CHECK(cudaKernelSetAttributeForDevice(scale, cudaFuncAttributeMaxDynamicSharedMemorySize, wanted, 1));
        CHECK(cudaSetDevice(1));
        CHECK(cudaFuncGetAttributes(&on1, (const void *)scale));
        CHECK(cudaSetDevice(0));
        CHECK(cudaFuncGetAttributes(&on0, (const void *)scale));
        int driver_value = 0;
        REQUIRE(cuKernelGetAttribute(&driver_value, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                     (CUkernel)scale, 1) == CUDA_SUCCESS);
        REQUIRE(on1.maxDynamicSharedSizeBytes == wanted && driver_value == wanted);
        REQUIRE(on0.maxDynamicSharedSizeBytes == before.maxDynamicSharedSizeBytes);
        EXPECT_AND_CLEAR(cudaKernelSetAttributeForDevice(scale, (cudaFuncAttribute)999, 1, 0), cudaErrorInvalidValue);
        EXPECT_AND_CLEAR(cudaKernelSetAttributeForDevice(scale, cudaFuncAttributeMaxDynamicSharedMemorySize, 1024, 99),
                         cudaErrorInvalidDevice);
    }
    printf("ok kernel_attribute_for_device\n");

    {   // cudaGetKernel: the program's own kernel as a cudaKernel_t, launched both ways.
        cudaKernel_t fill = NULL;
        int *out = NULL, host[N], value = 9, n = N;
        CHECK(cudaGetKernel(&fill, fillKernel));
        REQUIRE(fill != NULL);
        CHECK(cudaMalloc(&out, sizeof host));
        void *args[] = {&out, &value, &n};
        CHECK(cudaLaunchKernel((const void *)fill, dim3(N / 64), dim3(64), args, 0, 0));
        CHECK(cudaMemcpy(host, out, sizeof host, cudaMemcpyDeviceToHost));
        for (int i = 0; i < N; i++) REQUIRE(host[i] == 9);
        value = 4;
        cudaLaunchConfig_t config = {};
        config.gridDim = dim3(N / 64);
        config.blockDim = dim3(64);
        CHECK(cudaLaunchKernelExC(&config, (const void *)fill, args));
        CHECK(cudaMemcpy(host, out, sizeof host, cudaMemcpyDeviceToHost));
        for (int i = 0; i < N; i++) REQUIRE(host[i] == 4);
        // Its attribute, set per device, is the kernel's: cudaFuncGetAttributes on its stub sees it.
        cudaFuncAttributes attributes;
        CHECK(cudaKernelSetAttributeForDevice(fill, cudaFuncAttributeMaxDynamicSharedMemorySize, 40 * 1024, 0));
        CHECK(cudaFuncGetAttributes(&attributes, fillKernel));
        REQUIRE(attributes.maxDynamicSharedSizeBytes == 40 * 1024);
        EXPECT_AND_CLEAR(cudaGetKernel(NULL, fillKernel), cudaErrorInvalidValue);
        EXPECT_AND_CLEAR(cudaGetKernel(&fill, &not_a_kernel), cudaErrorInvalidDeviceFunction);

        // The driver's faces of the same handles.
        CUfunction function = NULL, by_symbol = NULL;
        const char *name = NULL;
        int driver_value = 0;
        REQUIRE(cuKernelGetFunction(&function, (CUkernel)fill) == CUDA_SUCCESS);
        CHECK(cudaGetFuncBySymbol((cudaFunction_t *)&by_symbol, (const void *)fillKernel));
        REQUIRE(function == by_symbol);
        REQUIRE(cuFuncGetName(&name, function) == CUDA_SUCCESS && strcmp(name, "_Z10fillKernelPiii") == 0);
        REQUIRE(cuKernelGetAttribute(&driver_value, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (CUkernel)fill,
                                     0) == CUDA_SUCCESS && driver_value == 40 * 1024);
        value = 6;
        REQUIRE(cuLaunchKernel((CUfunction)fill, N / 64, 1, 1, 64, 1, 1, 0, NULL, args, NULL) == CUDA_SUCCESS);
        CHECK(cudaMemcpy(host, out, sizeof host, cudaMemcpyDeviceToHost));
        for (int i = 0; i < N; i++) REQUIRE(host[i] == 6);
        CUkernel driver_scale = NULL;
        REQUIRE(cuLibraryGetKernel(&driver_scale, (CUlibrary)library, "scale") == CUDA_SUCCESS
                && driver_scale == (CUkernel)scale);
        REQUIRE(cuKernelGetFunction(&function, (CUkernel)scale) == CUDA_SUCCESS
                && cuFuncGetName(&name, function) == CUDA_SUCCESS && strcmp(name, "scale") == 0);
        CHECK(cudaFree(out));
    }
    printf("ok get_kernel\n");

    {   // A cubin from a file, and PTX with the JIT's info log.
        cudaLibrary_t cubin = NULL, ptx = NULL;
        cudaKernel_t from_cubin = NULL, from_ptx = NULL;
        char info_log[LOG_BYTES] = "";
        cudaJitOption options[] = {cudaJitInfoLogBuffer, cudaJitInfoLogBufferSizeBytes};
        void *values[] = {info_log, (void *)(size_t)LOG_BYTES};
        CHECK(cudaLibraryLoadFromFile(&cubin, argv[2], NULL, NULL, 0, NULL, NULL, 0));
        CHECK(cudaLibraryLoadFromFile(&ptx, argv[3], options, values, 2, NULL, NULL, 0));
        REQUIRE(cubin != ptx && cubin != library);
        CHECK(cudaLibraryGetKernel(&from_cubin, cubin, "scale"));
        CHECK(cudaLibraryGetKernel(&from_ptx, ptx, "scale"));
        REQUIRE(from_cubin != scale && from_ptx != from_cubin);
        float *z = upload_iota();
        CHECK(launch_scale(from_cubin, z, 2.0f));
        CHECK(launch_scale(from_ptx, z, 5.0f));
        REQUIRE(holds(z, 10.0f, 0.0f));
        REQUIRE(strlen(info_log) > 0 && (size_t)values[1] == strlen(info_log) + 1);
        printf("ptx info log: %s\n", info_log);
        CHECK(cudaLibraryUnload(cubin));
        CHECK(cudaLibraryUnload(ptx));
        CHECK(cudaFree(z));
    }
    printf("ok load_from_file\n");

    {   // Bad input, with CUDA's codes.
        cudaLibrary_t bad = NULL;
        cudaKernel_t kernel = NULL;
        cudaKernel_t kernels[1];
        static const char not_an_image[] = "this is not PTX";
        EXPECT_AND_CLEAR(cudaLibraryLoadData(NULL, fatbin, NULL, NULL, 0, NULL, NULL, 0), cudaErrorInvalidValue);
        EXPECT_AND_CLEAR(cudaLibraryLoadData(&bad, NULL, NULL, NULL, 0, NULL, NULL, 0), cudaErrorInvalidValue);
        EXPECT_AND_CLEAR(cudaLibraryLoadData(&bad, not_an_image, NULL, NULL, 0, NULL, NULL, 0),
                         cudaErrorInvalidKernelImage);
        EXPECT_AND_CLEAR(cudaLibraryLoadData(&bad, fatbin, NULL, NULL, 2, NULL, NULL, 0), cudaErrorInvalidValue);
        EXPECT_AND_CLEAR(cudaLibraryLoadFromFile(&bad, "/no/such/library.cubin", NULL, NULL, 0, NULL, NULL, 0),
                         cudaErrorFileNotFound);
        EXPECT_AND_CLEAR(cudaLibraryGetKernel(&kernel, library, "no_such_kernel"), cudaErrorSymbolNotFound);
        EXPECT_AND_CLEAR(cudaLibraryGetKernel(NULL, library, "scale"), cudaErrorInvalidValue);
        EXPECT_AND_CLEAR(cudaLibraryGetKernel(&kernel, library, NULL), cudaErrorInvalidValue);
        EXPECT_AND_CLEAR(cudaLibraryGetKernelCount(NULL, library), cudaErrorInvalidValue);
        EXPECT_AND_CLEAR(cudaLibraryEnumerateKernels(NULL, 1, library), cudaErrorInvalidValue);
        EXPECT_AND_CLEAR(cudaLibraryGetKernel(&kernel, (cudaLibrary_t)&not_a_kernel, "scale"),
                         cudaErrorInvalidResourceHandle);
        EXPECT_AND_CLEAR(cudaLibraryEnumerateKernels(kernels, 1, (cudaLibrary_t)x), cudaErrorInvalidResourceHandle);
        EXPECT_AND_CLEAR(cudaLibraryUnload((cudaLibrary_t)scale), cudaErrorInvalidResourceHandle);
    }
    printf("ok bad_input\n");

    {   // A __device__ variable is no __managed__ one (tests/cuda/driver_parity.cu
        // reads those); no device has unified function pointers.
        void *pointer = NULL;
        size_t size = 0;
        EXPECT_AND_CLEAR(cudaLibraryGetManaged(&pointer, &size, library, "counter"), cudaErrorSymbolNotFound);
        EXPECT_AND_CLEAR(cudaLibraryGetUnifiedFunction(&pointer, library, "scale"), cudaErrorSymbolNotFound);
    }
    printf("ok not_managed\n");

    {   // Unloading: every handle of the library is invalid, its kernel no
        // longer launches (C had been recording its launches).
        cudaKernel_t kernel = NULL;
        unsigned int n = 0;
        CHECK(cudaLibraryUnload(library));
        EXPECT_AND_CLEAR(cudaLibraryGetKernel(&kernel, library, "scale"), cudaErrorInvalidResourceHandle);
        EXPECT_AND_CLEAR(cudaLibraryGetKernelCount(&n, library), cudaErrorInvalidResourceHandle);
        EXPECT_AND_CLEAR(cudaLibraryUnload(library), cudaErrorInvalidResourceHandle);
        EXPECT_AND_CLEAR(launch_scale(scale, x, 2.0f), cudaErrorInvalidDeviceFunction);
        REQUIRE(holds(x, 3.0f, 1.5f));  // untouched
        CUfunction function = NULL;
        REQUIRE(cuKernelGetFunction(&function, (CUkernel)scale) == CUDA_ERROR_INVALID_HANDLE);
        CHECK(cudaDeviceSynchronize());
    }
    printf("ok unload\n");

    {   // Notifications: the callback is kept until unregistered, and never called.
        cudaAsyncCallbackHandle_t handle = NULL, other = NULL;
        int data = 0;
        CHECK(cudaDeviceRegisterAsyncNotification(0, on_notification, &data, &handle));
        CHECK(cudaDeviceRegisterAsyncNotification(1, on_notification, &data, &other));
        REQUIRE(handle != NULL && other != NULL && handle != other);
        EXPECT_AND_CLEAR(cudaDeviceRegisterAsyncNotification(99, on_notification, &data, &handle),
                         cudaErrorInvalidDevice);
        EXPECT_AND_CLEAR(cudaDeviceRegisterAsyncNotification(0, NULL, &data, &handle), cudaErrorInvalidValue);
        EXPECT_AND_CLEAR(cudaDeviceRegisterAsyncNotification(0, on_notification, &data, NULL), cudaErrorInvalidValue);
        EXPECT_AND_CLEAR(cudaDeviceUnregisterAsyncNotification(1, handle), cudaErrorInvalidValue);  // GPU0's
        CHECK(cudaDeviceSynchronize());
        CHECK(cudaDeviceUnregisterAsyncNotification(0, handle));
        CHECK(cudaDeviceUnregisterAsyncNotification(1, other));
        EXPECT_AND_CLEAR(cudaDeviceUnregisterAsyncNotification(0, handle), cudaErrorInvalidValue);
        REQUIRE(notified == 0);
    }
    printf("ok async_notification\n");

    CHECK(cudaFree(x));
    REQUIRE(cudaGetLastError() == cudaSuccess);
    printf("PASSED runtime_libraries\n");
    return 0;
}
