// cuFFT's multi-GPU API (cufftXt*) on two GPUs of one server: plans given
// GPUs with cufftXtSetGPUs, descriptors from cufftXtMalloc, cufftXtMemcpy
// both ways, cufftXtExecDescriptor* forward and inverse, checked against a
// direct DFT on the host.  Sections: descriptor, c2c_1d, z2z_2d, batched,
// errors.  Prints "ok <section>" after each, PASSED at the end.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <complex>
#include <dlfcn.h>
#include <vector>
#include <cufftXt.h>
#include "check.h"

#define FFT_CHECK(call)                                                                     \
    do {                                                                                    \
        cufftResult r_ = (call);                                                            \
        if (r_ != CUFFT_SUCCESS) {                                                          \
            printf("FAILED line %d: %s -> cufftResult %d\n", __LINE__, #call, (int)r_);     \
            exit(1);                                                                        \
        }                                                                                   \
    } while (0)

#define FFT_EXPECT(call, code)                                                              \
    do {                                                                                    \
        cufftResult r_ = (call);                                                            \
        if (r_ != (code)) {                                                                 \
            printf("FAILED line %d: %s -> cufftResult %d, expected %d\n", __LINE__, #call,  \
                   (int)r_, (int)(code));                                                   \
            exit(1);                                                                        \
        }                                                                                   \
    } while (0)

static int gpus[2] = {0, 1};

// The DFT of `in` (rows x cols, row-major, unnormalised, sign -1).
template <typename T>
static std::vector<std::complex<T>> dft2(const std::vector<std::complex<T>> &in, int rows, int cols) {
    std::vector<std::complex<T>> out(in.size());
    for (int u = 0; u < rows; u++)
        for (int v = 0; v < cols; v++) {
            std::complex<double> sum = 0;
            for (int x = 0; x < rows; x++)
                for (int y = 0; y < cols; y++) {
                    double angle = -2 * M_PI * (double(u) * x / rows + double(v) * y / cols);
                    sum += std::complex<double>(in[x * cols + y]) * std::complex<double>(cos(angle), sin(angle));
                }
            out[u * cols + v] = std::complex<T>(sum);
        }
    return out;
}

template <typename T>
static double max_error(const std::vector<std::complex<T>> &a, const std::vector<std::complex<T>> &b, double scale) {
    double worst = 0;
    for (size_t i = 0; i < a.size(); i++) worst = fmax(worst, std::abs(std::complex<double>(a[i]) * scale
                                                                       - std::complex<double>(b[i])));
    return worst;
}

static void descriptor() {
    cufftHandle plan;
    size_t work[2];
    FFT_CHECK(cufftCreate(&plan));
    FFT_CHECK(cufftXtSetGPUs(plan, 2, gpus));
    FFT_CHECK(cufftMakePlan1d(plan, 1000, CUFFT_C2C, 1, work));
    cudaLibXtDesc *desc;
    FFT_CHECK(cufftXtMalloc(plan, &desc, CUFFT_XT_FORMAT_INPLACE));
    REQUIRE(desc->descriptor->nGPUs == 2);
    size_t total = 0;
    for (int i = 0; i < 2; i++) {
        REQUIRE(desc->descriptor->GPUs[i] == gpus[i]);
        cudaPointerAttributes attributes;
        CHECK(cudaPointerGetAttributes(&attributes, desc->descriptor->data[i]));
        REQUIRE(attributes.type == cudaMemoryTypeDevice && attributes.device == gpus[i]);
        total += desc->descriptor->size[i];
    }
    REQUIRE(total == 1000 * sizeof(cufftComplex));
    FFT_CHECK(cufftXtFree(desc));
    FFT_CHECK(cufftDestroy(plan));
    printf("ok descriptor\n");
}

static void c2c_1d() {
    const int n = 1024;
    std::vector<std::complex<float>> in(n), out(n), back(n);
    for (int i = 0; i < n; i++) in[i] = {float(sin(0.05 * i) + 0.25), float(cos(0.11 * i))};
    cufftHandle plan;
    size_t work[2];
    FFT_CHECK(cufftCreate(&plan));
    FFT_CHECK(cufftXtSetGPUs(plan, 2, gpus));
    FFT_CHECK(cufftMakePlan1d(plan, n, CUFFT_C2C, 1, work));
    cudaLibXtDesc *desc;
    FFT_CHECK(cufftXtMalloc(plan, &desc, CUFFT_XT_FORMAT_INPLACE));
    FFT_CHECK(cufftXtMemcpy(plan, desc, in.data(), CUFFT_COPY_HOST_TO_DEVICE));
    FFT_CHECK(cufftXtExecDescriptorC2C(plan, desc, desc, CUFFT_FORWARD));
    FFT_CHECK(cufftXtMemcpy(plan, out.data(), desc, CUFFT_COPY_DEVICE_TO_HOST));
    std::vector<std::complex<float>> expected = dft2(in, 1, n);
    double err = max_error(out, expected, 1.0);
    if (err > 1e-2) { printf("FAILED c2c_1d forward: error %g\n", err); exit(1); }
    FFT_CHECK(cufftXtExecDescriptorC2C(plan, desc, desc, CUFFT_INVERSE));
    FFT_CHECK(cufftXtMemcpy(plan, back.data(), desc, CUFFT_COPY_DEVICE_TO_HOST));
    err = max_error(in, back, n);
    if (err > 1e-2) { printf("FAILED c2c_1d round trip: error %g\n", err); exit(1); }
    FFT_CHECK(cufftXtFree(desc));
    FFT_CHECK(cufftDestroy(plan));
    printf("ok c2c_1d\n");
}

static void z2z_2d() {
    const int rows = 8, cols = 6;
    std::vector<std::complex<double>> in(rows * cols), out(rows * cols);
    for (int i = 0; i < rows * cols; i++) in[i] = {cos(0.3 * i), 0.5 - sin(0.17 * i)};
    cufftHandle plan;
    size_t work[2];
    FFT_CHECK(cufftCreate(&plan));
    FFT_CHECK(cufftXtSetGPUs(plan, 2, gpus));
    FFT_CHECK(cufftMakePlan2d(plan, rows, cols, CUFFT_Z2Z, work));
    cudaLibXtDesc *in_desc, *out_desc;
    FFT_CHECK(cufftXtMalloc(plan, &in_desc, CUFFT_XT_FORMAT_INPLACE));
    FFT_CHECK(cufftXtMalloc(plan, &out_desc, CUFFT_XT_FORMAT_INPLACE));
    FFT_CHECK(cufftXtMemcpy(plan, in_desc, in.data(), CUFFT_COPY_HOST_TO_DEVICE));
    FFT_CHECK(cufftXtExecDescriptorZ2Z(plan, in_desc, out_desc, CUFFT_FORWARD));
    FFT_CHECK(cufftXtMemcpy(plan, out.data(), out_desc, CUFFT_COPY_DEVICE_TO_HOST));
    double err = max_error(out, dft2(in, rows, cols), 1.0);
    if (err > 1e-9) { printf("FAILED z2z_2d: error %g\n", err); exit(1); }
    // A descriptor to descriptor copy keeps the data.
    FFT_CHECK(cufftXtMemcpy(plan, in_desc, out_desc, CUFFT_COPY_DEVICE_TO_DEVICE));
    std::vector<std::complex<double>> copied(rows * cols);
    FFT_CHECK(cufftXtMemcpy(plan, copied.data(), in_desc, CUFFT_COPY_DEVICE_TO_HOST));
    REQUIRE(memcmp(copied.data(), out.data(), copied.size() * sizeof(copied[0])) == 0);
    FFT_CHECK(cufftXtFree(in_desc));
    FFT_CHECK(cufftXtFree(out_desc));
    FFT_CHECK(cufftDestroy(plan));
    printf("ok z2z_2d\n");
}

static void batched() {
    const int n = 16, batch = 5;
    std::vector<std::complex<float>> in(n * batch), out(n * batch);
    for (int i = 0; i < n * batch; i++) in[i] = {float(i % 7), float(i % 3) - 1.0f};
    int sizes[1] = {n};
    cufftHandle plan;
    size_t work[2];
    FFT_CHECK(cufftCreate(&plan));
    FFT_CHECK(cufftXtSetGPUs(plan, 2, gpus));
    FFT_CHECK(cufftMakePlanMany(plan, 1, sizes, NULL, 1, n, NULL, 1, n, CUFFT_C2C, batch, work));
    cudaLibXtDesc *desc;
    FFT_CHECK(cufftXtMalloc(plan, &desc, CUFFT_XT_FORMAT_INPLACE));
    // Whole transforms on each GPU: 3 and 2 of the 5.
    REQUIRE(desc->descriptor->size[0] == 3 * n * sizeof(cufftComplex));
    REQUIRE(desc->descriptor->size[1] == 2 * n * sizeof(cufftComplex));
    FFT_CHECK(cufftXtMemcpy(plan, desc, in.data(), CUFFT_COPY_HOST_TO_DEVICE));
    FFT_CHECK(cufftXtExecDescriptor(plan, desc, desc, CUFFT_FORWARD));
    FFT_CHECK(cufftXtMemcpy(plan, out.data(), desc, CUFFT_COPY_DEVICE_TO_HOST));
    for (int b = 0; b < batch; b++) {
        std::vector<std::complex<float>> one(in.begin() + b * n, in.begin() + (b + 1) * n);
        std::vector<std::complex<float>> got(out.begin() + b * n, out.begin() + (b + 1) * n);
        double err = max_error(got, dft2(one, 1, n), 1.0);
        if (err > 1e-3) { printf("FAILED batched transform %d: error %g\n", b, err); exit(1); }
    }
    FFT_CHECK(cufftXtFree(desc));
    FFT_CHECK(cufftDestroy(plan));
    printf("ok batched\n");
}

static void errors() {
    cufftHandle plan;
    int bad[2] = {0, 7};
    FFT_CHECK(cufftCreate(&plan));
    FFT_EXPECT(cufftXtSetGPUs(plan, 2, bad), CUFFT_INVALID_DEVICE);
    size_t work[2];
    FFT_CHECK(cufftMakePlan1d(plan, 64, CUFFT_C2C, 1, work));
    cudaLibXtDesc *desc;
    FFT_EXPECT(cufftXtMalloc(plan, &desc, CUFFT_XT_FORMAT_INPLACE), CUFFT_INVALID_PLAN);  // no GPUs given
    FFT_EXPECT(cufftXtSetGPUs(plan, 2, gpus), CUFFT_INVALID_PLAN);  // made already
    FFT_CHECK(cufftDestroy(plan));
    printf("ok errors\n");
}

int main(int argc, char **argv) {
    Dl_info info;
    dladdr((void *)&cufftXtSetGPUs, &info);
    printf("cufft from %s\n", info.dli_fname);
    int count = 0;
    CHECK(cudaGetDeviceCount(&count));
    REQUIRE(count >= 2);
    struct { const char *name; void (*run)(); } sections[] = {
        {"descriptor", descriptor}, {"c2c_1d", c2c_1d}, {"z2z_2d", z2z_2d}, {"batched", batched}, {"errors", errors}};
    for (auto &s : sections) {
        bool wanted = argc == 1;
        for (int i = 1; i < argc; i++) wanted |= strcmp(argv[i], s.name) == 0;
        if (wanted) s.run();
    }
    printf("PASSED cufft_multi_gpu\n");
    return 0;
}
