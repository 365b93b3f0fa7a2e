// cuFFT's multi-GPU API (cufftXt*) on two GPUs of one server: plans given
// GPUs with cufftXtSetGPUs, descriptors from cufftXtMalloc, cufftXtMemcpy
// both ways, cufftXtExecDescriptor* forward and inverse, checked against a
// direct DFT on the host.  Sections: descriptor, c2c_1d, z2z_2d, batched,
// errors.  Prints "ok <section>" after each, PASSED at the end.
#include "library_check.h"

#include <cufftXt.h>

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
    CUFFT_CHECK(cufftCreate(&plan));
    CUFFT_CHECK(cufftXtSetGPUs(plan, 2, gpus));
    CUFFT_CHECK(cufftMakePlan1d(plan, 1000, CUFFT_C2C, 1, work));
    cudaLibXtDesc *desc;
    CUFFT_CHECK(cufftXtMalloc(plan, &desc, CUFFT_XT_FORMAT_INPLACE));
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
    CUFFT_CHECK(cufftXtFree(desc));
    CUFFT_CHECK(cufftDestroy(plan));
}

static void c2c_1d() {
    const int n = 1024;
    std::vector<std::complex<float>> in(n), out(n), back(n);
    for (int i = 0; i < n; i++) in[i] = {float(sin(0.05 * i) + 0.25), float(cos(0.11 * i))};
    cufftHandle plan;
    size_t work[2];
    CUFFT_CHECK(cufftCreate(&plan));
    CUFFT_CHECK(cufftXtSetGPUs(plan, 2, gpus));
    CUFFT_CHECK(cufftMakePlan1d(plan, n, CUFFT_C2C, 1, work));
    cudaLibXtDesc *desc;
    CUFFT_CHECK(cufftXtMalloc(plan, &desc, CUFFT_XT_FORMAT_INPLACE));
    CUFFT_CHECK(cufftXtMemcpy(plan, desc, in.data(), CUFFT_COPY_HOST_TO_DEVICE));
    CUFFT_CHECK(cufftXtExecDescriptorC2C(plan, desc, desc, CUFFT_FORWARD));
    CUFFT_CHECK(cufftXtMemcpy(plan, out.data(), desc, CUFFT_COPY_DEVICE_TO_HOST));
    std::vector<std::complex<float>> expected = dft2(in, 1, n);
    AT_MOST(max_error(out, expected, 1.0), 1e-2);
    CUFFT_CHECK(cufftXtExecDescriptorC2C(plan, desc, desc, CUFFT_INVERSE));
    CUFFT_CHECK(cufftXtMemcpy(plan, back.data(), desc, CUFFT_COPY_DEVICE_TO_HOST));
    AT_MOST(max_error(in, back, n), 1e-2);  // the round trip
    CUFFT_CHECK(cufftXtFree(desc));
    CUFFT_CHECK(cufftDestroy(plan));
}

static void z2z_2d() {
    const int rows = 8, cols = 6;
    std::vector<std::complex<double>> in(rows * cols), out(rows * cols);
    for (int i = 0; i < rows * cols; i++) in[i] = {cos(0.3 * i), 0.5 - sin(0.17 * i)};
    cufftHandle plan;
    size_t work[2];
    CUFFT_CHECK(cufftCreate(&plan));
    CUFFT_CHECK(cufftXtSetGPUs(plan, 2, gpus));
    CUFFT_CHECK(cufftMakePlan2d(plan, rows, cols, CUFFT_Z2Z, work));
    cudaLibXtDesc *in_desc, *out_desc;
    CUFFT_CHECK(cufftXtMalloc(plan, &in_desc, CUFFT_XT_FORMAT_INPLACE));
    CUFFT_CHECK(cufftXtMalloc(plan, &out_desc, CUFFT_XT_FORMAT_INPLACE));
    CUFFT_CHECK(cufftXtMemcpy(plan, in_desc, in.data(), CUFFT_COPY_HOST_TO_DEVICE));
    CUFFT_CHECK(cufftXtExecDescriptorZ2Z(plan, in_desc, out_desc, CUFFT_FORWARD));
    CUFFT_CHECK(cufftXtMemcpy(plan, out.data(), out_desc, CUFFT_COPY_DEVICE_TO_HOST));
    AT_MOST(max_error(out, dft2(in, rows, cols), 1.0), 1e-9);
    // A descriptor to descriptor copy keeps the data.
    CUFFT_CHECK(cufftXtMemcpy(plan, in_desc, out_desc, CUFFT_COPY_DEVICE_TO_DEVICE));
    std::vector<std::complex<double>> copied(rows * cols);
    CUFFT_CHECK(cufftXtMemcpy(plan, copied.data(), in_desc, CUFFT_COPY_DEVICE_TO_HOST));
    REQUIRE(memcmp(copied.data(), out.data(), copied.size() * sizeof(copied[0])) == 0);
    CUFFT_CHECK(cufftXtFree(in_desc));
    CUFFT_CHECK(cufftXtFree(out_desc));
    CUFFT_CHECK(cufftDestroy(plan));
}

static void batched() {
    const int n = 16, batch = 5;
    std::vector<std::complex<float>> in(n * batch), out(n * batch);
    for (int i = 0; i < n * batch; i++) in[i] = {float(i % 7), float(i % 3) - 1.0f};
    int sizes[1] = {n};
    cufftHandle plan;
    size_t work[2];
    CUFFT_CHECK(cufftCreate(&plan));
    CUFFT_CHECK(cufftXtSetGPUs(plan, 2, gpus));
    CUFFT_CHECK(cufftMakePlanMany(plan, 1, sizes, NULL, 1, n, NULL, 1, n, CUFFT_C2C, batch, work));
    cudaLibXtDesc *desc;
    CUFFT_CHECK(cufftXtMalloc(plan, &desc, CUFFT_XT_FORMAT_INPLACE));
    // Whole transforms on each GPU: 3 and 2 of the 5.
    REQUIRE(desc->descriptor->size[0] == 3 * n * sizeof(cufftComplex));
    REQUIRE(desc->descriptor->size[1] == 2 * n * sizeof(cufftComplex));
    CUFFT_CHECK(cufftXtMemcpy(plan, desc, in.data(), CUFFT_COPY_HOST_TO_DEVICE));
    CUFFT_CHECK(cufftXtExecDescriptor(plan, desc, desc, CUFFT_FORWARD));
    CUFFT_CHECK(cufftXtMemcpy(plan, out.data(), desc, CUFFT_COPY_DEVICE_TO_HOST));
    for (int b = 0; b < batch; b++) {
        std::vector<std::complex<float>> one(in.begin() + b * n, in.begin() + (b + 1) * n);
        std::vector<std::complex<float>> got(out.begin() + b * n, out.begin() + (b + 1) * n);
        AT_MOST(max_error(got, dft2(one, 1, n), 1.0), 1e-3);
    }
    CUFFT_CHECK(cufftXtFree(desc));
    CUFFT_CHECK(cufftDestroy(plan));
}

static void errors() {
    cufftHandle plan;
    int bad[2] = {0, 7};
    CUFFT_CHECK(cufftCreate(&plan));
    CUFFT_EXPECT(cufftXtSetGPUs(plan, 2, bad), CUFFT_INVALID_DEVICE);
    size_t work[2];
    CUFFT_CHECK(cufftMakePlan1d(plan, 64, CUFFT_C2C, 1, work));
    cudaLibXtDesc *desc;
    CUFFT_EXPECT(cufftXtMalloc(plan, &desc, CUFFT_XT_FORMAT_INPLACE), CUFFT_INVALID_PLAN);  // no GPUs given
    CUFFT_EXPECT(cufftXtSetGPUs(plan, 2, gpus), CUFFT_INVALID_PLAN);  // made already
    CUFFT_CHECK(cufftDestroy(plan));
}

int main(int argc, char **argv) {
    where_from("cufft", (void *)&cufftXtSetGPUs);
    int count = 0;
    CHECK(cudaGetDeviceCount(&count));
    REQUIRE(count >= 2);
    const Section<> sections[] = {
        {"descriptor", descriptor}, {"c2c_1d", c2c_1d}, {"z2z_2d", z2z_2d}, {"batched", batched}, {"errors", errors}};
    run_sections(argc, argv, sections);
    printf("PASSED cufft_multi_gpu\n");
    return 0;
}
