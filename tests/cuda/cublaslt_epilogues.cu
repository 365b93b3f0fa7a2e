// cuBLASLt's epilogues after cublasLtMatmul: RELU, BIAS, RELU_BIAS, GELU,
// GELU_BIAS and the AUX forms (the ReLU bitmask, the GELU input), in float,
// double and half, single and strided-batched, each checked against the
// same GEMM and epilogue computed on the host; and the epilogues rcuda
// refuses.  Sections: relu, bias, relu_bias, gelu, gelu_bias, relu_aux,
// gelu_aux, batched, types, refused.  Prints "ok <section>", PASSED at the end.
#include "library_check.h"

#include <cublasLt.h>
#include <cuda_fp16.h>

static cublasLtHandle_t lt;

// What a D type needs: its cudaDataType, the compute and scale types of its
// GEMM, the tolerance of a result (relative to 1 + |expected|).
template <class T> struct Type;
template <> struct Type<float> {
    typedef float Scale;
    static constexpr cudaDataType_t data = CUDA_R_32F, scale = CUDA_R_32F;
    static constexpr cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
    static constexpr double tol = 2e-6;
    static double value(float v) { return v; }
    static float make(double v) { return float(v); }
};
template <> struct Type<double> {
    typedef double Scale;
    static constexpr cudaDataType_t data = CUDA_R_64F, scale = CUDA_R_64F;
    static constexpr cublasComputeType_t compute = CUBLAS_COMPUTE_64F;
    static constexpr double tol = 1e-13;
    static double value(double v) { return v; }
    static double make(double v) { return v; }
};
template <> struct Type<__half> {
    typedef float Scale;
    static constexpr cudaDataType_t data = CUDA_R_16F, scale = CUDA_R_32F;
    static constexpr cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
    static constexpr double tol = 4e-3;  // D rounded to half by the GEMM, and again by the epilogue
    static double value(__half v) { return __half2float(v); }
    static __half make(double v) { return __float2half(float(v)); }
};

// GELU as cuBLASLt computes it: the tanh approximation.
static double gelu(double x) { return 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }

static bool has(cublasLtEpilogue_t e, int bit) { return (int(e) & bit) != 0; }

// One matmul D = epilogue(alpha A B + beta C [+ bias]) of m x n (k inner), `batch` of them strided,
// checked: D against the host's, D's rows past m untouched, the aux output (bitmask or GELU input).
template <class T>
static void run(cublasLtEpilogue_t epilogue, int m, int n, int k, int batch = 1, bool in_place = false,
                bool name_bias_type = false) {
    typedef Type<T> Y;
    const bool bias = has(epilogue, CUBLASLT_EPILOGUE_BIAS), aux = has(epilogue, 128),
               relu = has(epilogue, CUBLASLT_EPILOGUE_RELU), is_gelu = has(epilogue, CUBLASLT_EPILOGUE_GELU);
    int lda = m + 1, ldb = k + 2, ldc = m + 1, ldd = in_place ? ldc : m + 3;
    long long sa = (long long)lda * k, sb = (long long)ldb * n, sc = (long long)ldc * n, sd = (long long)ldd * n;
    std::vector<T> A(sa * batch), B(sb * batch), C(sc * batch), bias_h(bias ? m * batch : 1);
    for (auto *v : {&A, &B, &C, &bias_h})
        for (T &x : *v) x = Y::make(next_value());
    std::vector<T> D0(sd * batch, Y::make(7.0));  // D's padding rows keep 7
    typename Y::Scale alpha = 1.25, beta = in_place ? 0.5 : -0.75;

    // the host's: pre = alpha A B + beta C + bias, out = act(pre)
    std::vector<double> pre(size_t(m) * n * batch), out(pre.size());
    for (int b = 0; b < batch; b++)
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                double sum = 0;
                for (int l = 0; l < k; l++)
                    sum += Y::value(A[b * sa + i + l * lda]) * Y::value(B[b * sb + l + j * ldb]);
                double x = double(alpha) * sum + double(beta) * Y::value(C[b * sc + i + j * ldc]);
                if (bias) x += Y::value(bias_h[b * m + i]);
                size_t at = (size_t(b) * n + j) * m + i;
                pre[at] = x;
                out[at] = relu ? (x > 0 ? x : 0) : is_gelu ? gelu(x) : x;
            }

    T *dA = to_device(A), *dB = to_device(B), *dC = to_device(C), *dBias = to_device(bias_h);
    T *dD = in_place ? dC : to_device(D0);
    // the aux output: a bitmask of aux_ld bits a column (RELU), or a matrix of T (GELU)
    long long aux_ld = relu ? (m + 127) / 128 * 128 : (m + 7) / 8 * 8 + 8;
    long long aux_stride = aux_ld * n;  // elements (bits for RELU), a multiple of 128 and of 8
    size_t aux_bytes = relu ? size_t(aux_stride / 8) * batch : size_t(aux_stride) * batch * sizeof(T);
    void *dAux = nullptr;
    if (aux) {
        CHECK(cudaMalloc(&dAux, aux_bytes));
        CHECK(cudaMemset(dAux, 0xA5, aux_bytes));
    }

    cublasLtMatmulDesc_t desc;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, Y::compute, Y::scale));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
    if (bias) {
        const void *p = dBias;
        long long stride = batch > 1 ? m : 0;
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p, sizeof p));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &stride,
                                                    sizeof stride));
        if (name_bias_type) {
            int32_t type = Y::data;
            CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &type, sizeof type));
        }
    }
    if (aux) {
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &dAux,
                                                    sizeof dAux));
        CUBLAS_CHECK(
            cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, &aux_stride,
                                                    sizeof aux_stride));
    }
    cublasLtMatrixLayout_t la, lb, lc, ld;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, Y::data, m, k, lda));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, Y::data, k, n, ldb));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lc, Y::data, m, n, ldc));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ld, Y::data, m, n, ldd));
    if (batch > 1) {
        cublasLtMatrixLayout_t layouts[4] = {la, lb, lc, ld};
        long long strides[4] = {sa, sb, sc, sd};
        for (int i = 0; i < 4; i++) {
            CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layouts[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
                                                          sizeof batch));
            CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layouts[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                          &strides[i], sizeof strides[i]));
        }
    }
    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    cublasLtMatmulHeuristicResult_t heuristic;
    int found = 0;
    CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, ld, pref, 1, &heuristic, &found));
    REQUIRE(found == 1);
    cudaStream_t stream;
    CHECK(cudaStreamCreate(&stream));
    CUBLAS_CHECK(cublasLtMatmul(lt, desc, &alpha, dA, la, dB, lb, &beta, dC, lc, dD, ld, &heuristic.algo, nullptr, 0,
                                stream));
    CHECK(cudaStreamSynchronize(stream));

    std::vector<T> D = to_host(dD, size_t(sd) * batch);
    for (int b = 0; b < batch; b++)
        for (int j = 0; j < n; j++)
            for (int i = 0; i < ldd; i++) {
                double got = Y::value(D[b * sd + i + size_t(j) * ldd]);
                if (i >= m) {  // past the matrix: as it was (C's own padding when in place)
                    double was = Y::value(in_place ? C[b * sc + i + size_t(j) * ldc] : D0[0]);
                    if (got != was) {
                        printf("FAILED line %d: epilogue %d batch %d D[%d,%d] = %g past m, was %g\n", __LINE__,
                               int(epilogue), b, i, j, got, was);
                        exit(1);
                    }
                    continue;
                }
                double want = out[(size_t(b) * n + j) * m + i];
                if (!(fabs(got - want) <= Y::tol * (1 + fabs(want)))) {
                    printf("FAILED line %d: epilogue %d batch %d D[%d,%d] = %.10g, expected %.10g (input %.10g)\n",
                           __LINE__, int(epilogue), b, i, j, got, want, pre[(size_t(b) * n + j) * m + i]);
                    exit(1);
                }
            }
    if (aux && relu) {  // bit i + j * aux_ld of a batch's mask: its input was > 0
        std::vector<unsigned char> mask = to_host((unsigned char *)dAux, aux_bytes);
        for (int b = 0; b < batch; b++)
            for (int j = 0; j < n; j++)
                for (int i = 0; i < m; i++) {
                    double x = pre[(size_t(b) * n + j) * m + i];
                    if (fabs(x) <= 4 * Y::tol * (1 + fabs(x))) continue;  // too near 0 to tell
                    long long bit = b * aux_stride + i + j * aux_ld;
                    bool set = (mask[bit / 8] >> (bit % 8)) & 1;
                    if (set != (x > 0)) {
                        printf("FAILED line %d: batch %d mask bit [%d,%d] = %d for input %g\n", __LINE__, b, i, j,
                               int(set), x);
                        exit(1);
                    }
                }
    } else if (aux) {  // GELU's input, aux_ld elements a column
        std::vector<T> input = to_host((T *)dAux, size_t(aux_stride) * batch);
        for (int b = 0; b < batch; b++)
            for (int j = 0; j < n; j++)
                for (int i = 0; i < m; i++) {
                    double got = Y::value(input[b * aux_stride + i + j * aux_ld]);
                    double want = pre[(size_t(b) * n + j) * m + i];
                    if (!(fabs(got - want) <= Y::tol * (1 + fabs(want)))) {
                        printf("FAILED line %d: batch %d GELU input [%d,%d] = %.10g, expected %.10g\n", __LINE__, b,
                               i, j, got, want);
                        exit(1);
                    }
                }
    }
    CHECK(cudaStreamDestroy(stream));
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    for (cublasLtMatrixLayout_t l : {la, lb, lc, ld}) CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(l));
    CUBLAS_CHECK(cublasLtMatmulDescDestroy(desc));
    for (T *p : {dA, dB, dC, dBias}) CHECK(cudaFree(p));
    if (!in_place) CHECK(cudaFree(dD));
    if (dAux) CHECK(cudaFree(dAux));
}

static void relu() {
    run<float>(CUBLASLT_EPILOGUE_RELU, 7, 5, 4);
}

static void bias() {
    run<float>(CUBLASLT_EPILOGUE_BIAS, 6, 4, 3);
    run<float>(CUBLASLT_EPILOGUE_BIAS, 6, 4, 3, 1, false, true);  // BIAS_DATA_TYPE named
}

static void relu_bias() {
    run<float>(CUBLASLT_EPILOGUE_RELU_BIAS, 9, 6, 5);
}

static void gelu() {
    run<float>(CUBLASLT_EPILOGUE_GELU, 8, 7, 6);  // float's tolerance tells tanh's GELU from erf's
}

static void gelu_bias() {
    run<float>(CUBLASLT_EPILOGUE_GELU_BIAS, 5, 9, 4);
}

static void relu_aux() {
    run<float>(CUBLASLT_EPILOGUE_RELU_AUX, 13, 5, 4);    // a column's bits end mid-byte
    run<float>(CUBLASLT_EPILOGUE_RELU_AUX_BIAS, 130, 3, 5);  // two 128-bit blocks a column
}

static void gelu_aux() {
    run<float>(CUBLASLT_EPILOGUE_GELU_AUX, 6, 5, 3);
    run<float>(CUBLASLT_EPILOGUE_GELU_AUX_BIAS, 11, 4, 5);
}

static void batched() {
    run<float>(CUBLASLT_EPILOGUE_RELU_BIAS, 5, 4, 3, 3);
    run<float>(CUBLASLT_EPILOGUE_RELU_AUX_BIAS, 9, 3, 4, 3);
    run<float>(CUBLASLT_EPILOGUE_GELU_AUX_BIAS, 6, 5, 2, 4);
    run<double>(CUBLASLT_EPILOGUE_GELU_BIAS, 4, 3, 5, 2);
}

static void types() {
    run<double>(CUBLASLT_EPILOGUE_RELU_BIAS, 7, 6, 5);
    run<double>(CUBLASLT_EPILOGUE_GELU_AUX_BIAS, 6, 4, 3);
    run<double>(CUBLASLT_EPILOGUE_RELU_AUX, 5, 5, 5, 1, true);  // D is C
    run<__half>(CUBLASLT_EPILOGUE_RELU_BIAS, 8, 5, 4);
    run<__half>(CUBLASLT_EPILOGUE_GELU_BIAS, 6, 6, 8, 2);
    run<__half>(CUBLASLT_EPILOGUE_GELU_AUX, 7, 3, 4, 1, true);
    run<__half>(CUBLASLT_EPILOGUE_RELU_AUX_BIAS, 10, 4, 3, 2);
}

// An epilogue the call refuses with `want`, leaving D as it was; the heuristic agrees for NOT_SUPPORTED.
static void refuse(cublasLtEpilogue_t epilogue, cublasStatus_t want, cudaDataType_t type, bool set_pointers,
                   long long aux_ld, int line) {
    const int m = 4, n = 3, k = 2;
    size_t elem = type == CUDA_C_32F ? 8 : 4;
    float *d;
    CHECK(cudaMalloc(&d, 4096));
    CHECK(cudaMemset(d, 0, 4096));
    std::vector<unsigned char> before = to_host((unsigned char *)d, 4096);
    cublasLtMatmulDesc_t desc;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, type));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
    if (set_pointers) {
        void *p = d + 512;
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p, sizeof p));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &p, sizeof p));
        CUBLAS_CHECK(
            cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld));
    }
    cublasLtMatrixLayout_t la, lb, lc;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, type, m, k, m));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, type, k, n, k));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lc, type, m, n, m));
    float one[2] = {1, 0}, zero[2] = {0, 0};
    char *base = (char *)d;
    cublasStatus_t s = cublasLtMatmul(lt, desc, one, base, la, base + 64 * elem, lb, zero, base + 128 * elem, lc,
                                      base + 128 * elem, lc, nullptr, nullptr, 0, 0);
    if (s != want) {
        printf("FAILED line %d: epilogue %d -> cublas status %d, expected %d\n", line, int(epilogue), int(s),
               int(want));
        exit(1);
    }
    if (want == CUBLAS_STATUS_NOT_SUPPORTED) {
        cublasLtMatmulPreference_t pref;
        CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
        cublasLtMatmulHeuristicResult_t heuristic;
        int found = 1;
        cublasStatus_t h = cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, 1, &heuristic, &found);
        if (h == CUBLAS_STATUS_SUCCESS || found != 0) {
            printf("FAILED line %d: the heuristic offers epilogue %d (status %d, %d found)\n", line, int(epilogue),
                   int(h), found);
            exit(1);
        }
        CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    }
    CHECK(cudaDeviceSynchronize());
    std::vector<unsigned char> after = to_host((unsigned char *)d, 4096);
    if (memcmp(before.data(), after.data(), before.size()) != 0) {
        printf("FAILED line %d: a refused epilogue %d changed device memory\n", line, int(epilogue));
        exit(1);
    }
    for (cublasLtMatrixLayout_t l : {la, lb, lc}) CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(l));
    CUBLAS_CHECK(cublasLtMatmulDescDestroy(desc));
    CHECK(cudaFree(d));
}

static void refused() {
    // the backward epilogues rcuda does not apply
    refuse(CUBLASLT_EPILOGUE_DRELU_BGRAD, CUBLAS_STATUS_NOT_SUPPORTED, CUDA_R_32F, true, 128, __LINE__);
    refuse(CUBLASLT_EPILOGUE_DGELU, CUBLAS_STATUS_NOT_SUPPORTED, CUDA_R_32F, true, 8, __LINE__);
    refuse(CUBLASLT_EPILOGUE_BGRADA, CUBLAS_STATUS_NOT_SUPPORTED, CUDA_R_32F, true, 8, __LINE__);
    // an epilogue on complex D
    refuse(CUBLASLT_EPILOGUE_RELU, CUBLAS_STATUS_NOT_SUPPORTED, CUDA_C_32F, false, 0, __LINE__);
    // no bias, no aux, an aux leading dimension cuBLASLt refuses
    refuse(CUBLASLT_EPILOGUE_BIAS, CUBLAS_STATUS_INVALID_VALUE, CUDA_R_32F, false, 0, __LINE__);
    refuse(CUBLASLT_EPILOGUE_GELU_AUX, CUBLAS_STATUS_INVALID_VALUE, CUDA_R_32F, false, 0, __LINE__);
    refuse(CUBLASLT_EPILOGUE_RELU_AUX, CUBLAS_STATUS_INVALID_VALUE, CUDA_R_32F, true, 64, __LINE__);
    refuse(CUBLASLT_EPILOGUE_GELU_AUX_BIAS, CUBLAS_STATUS_INVALID_VALUE, CUDA_R_32F, true, 12, __LINE__);
    // the defaults read back as cuBLASLt's
    cublasLtMatmulDesc_t desc;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    uint32_t epilogue = 0;
    int32_t bias_type = 0;
    size_t written = 0;
    CUBLAS_CHECK(cublasLtMatmulDescGetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue,
                                                &written));
    REQUIRE(epilogue == CUBLASLT_EPILOGUE_DEFAULT && written == sizeof epilogue);
    CUBLAS_CHECK(cublasLtMatmulDescGetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                sizeof bias_type, &written));
    REQUIRE(bias_type == -1);
    CUBLAS_CHECK(cublasLtMatmulDescDestroy(desc));
}

int main(int argc, char **argv) {
    where_from("cublasLt", (void *)&cublasLtMatmul);
    CUBLAS_CHECK(cublasLtCreate(&lt));
    const Section<> sections[] = {{"relu", relu},         {"bias", bias},         {"relu_bias", relu_bias},
                                  {"gelu", gelu},         {"gelu_bias", gelu_bias}, {"relu_aux", relu_aux},
                                  {"gelu_aux", gelu_aux}, {"batched", batched},   {"types", types},
                                  {"refused", refused}};
    run_sections(argc, argv, sections);
    CUBLAS_CHECK(cublasLtDestroy(lt));
    printf("PASSED cublaslt_epilogues\n");
    return 0;
}
