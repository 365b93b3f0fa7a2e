// cuBLAS GEMM through rcuda: every type (S, D, C, Z) and every transpose
// pair (N, T, C) against a host reference, leading dimensions larger than
// the rows, cublasGemmEx with float and half inputs, and alpha/beta from host
// and from device memory.  Sections: types device_scalars gemm_ex beta_zero.
#include "library_check.h"

#include <cublas_v2.h>
#include <cuda_fp16.h>

typedef std::complex<float> cf;
typedef std::complex<double> cd;

static float cj(float x) { return x; }
static double cj(double x) { return x; }
static cf cj(cf x) { return std::conj(x); }
static cd cj(cd x) { return std::conj(x); }

// cuBLAS's gemm of each type, with std::complex standing for cuComplex (same layout).
static cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           const float *alpha, const float *A, int lda, const float *B, int ldb, const float *beta,
                           float *C, int ldc) {
    return cublasSgemm(h, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}
static cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           const double *alpha, const double *A, int lda, const double *B, int ldb,
                           const double *beta, double *C, int ldc) {
    return cublasDgemm(h, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}
static cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           const cf *alpha, const cf *A, int lda, const cf *B, int ldb, const cf *beta, cf *C,
                           int ldc) {
    return cublasCgemm(h, ta, tb, m, n, k, (const cuComplex *)alpha, (const cuComplex *)A, lda,
                       (const cuComplex *)B, ldb, (const cuComplex *)beta, (cuComplex *)C, ldc);
}
static cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           const cd *alpha, const cd *A, int lda, const cd *B, int ldb, const cd *beta, cd *C,
                           int ldc) {
    return cublasZgemm(h, ta, tb, m, n, k, (const cuDoubleComplex *)alpha, (const cuDoubleComplex *)A, lda,
                       (const cuDoubleComplex *)B, ldb, (const cuDoubleComplex *)beta, (cuDoubleComplex *)C, ldc);
}

template <typename T> static double tolerance();
template <> double tolerance<float>() { return 1e-4; }
template <> double tolerance<cf>() { return 1e-4; }
template <> double tolerance<double>() { return 1e-11; }
template <> double tolerance<cd>() { return 1e-11; }

// Element (i, j) of op(A), A column-major with leading dimension ld.
template <typename T> static T op_at(const std::vector<T> &A, int ld, cublasOperation_t t, int i, int j) {
    if (t == CUBLAS_OP_N) return A[i + (size_t)j * ld];
    T v = A[j + (size_t)i * ld];
    return t == CUBLAS_OP_C ? cj(v) : v;
}

// One C = alpha op(A) op(B) + beta C, compared with host loops; the rows of
// C past m (ldc > m) must be left as they were.
template <typename T>
static void check_gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, T alpha,
                       T beta, bool device_scalars) {
    int ar = ta == CUBLAS_OP_N ? m : k, ac = ta == CUBLAS_OP_N ? k : m;
    int br = tb == CUBLAS_OP_N ? k : n, bc = tb == CUBLAS_OP_N ? n : k;
    int lda = ar + 3, ldb = br + 1, ldc = m + 2;
    std::vector<T> A = random_vector<T>((size_t)lda * ac), B = random_vector<T>((size_t)ldb * bc),
                   C = random_vector<T>((size_t)ldc * n);
    T *dA = to_device(A), *dB = to_device(B), *dC = to_device(C);
    T *dScalars = nullptr;
    if (device_scalars) {
        dScalars = to_device(std::vector<T>{alpha, beta});
        CUBLAS_CHECK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
        CUBLAS_CHECK(gemm(h, ta, tb, m, n, k, dScalars, dA, lda, dB, ldb, dScalars + 1, dC, ldc));
        CUBLAS_CHECK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
    } else {
        CUBLAS_CHECK(gemm(h, ta, tb, m, n, k, &alpha, dA, lda, dB, ldb, &beta, dC, ldc));
    }
    std::vector<T> got = to_host(dC, C.size());
    double tol = tolerance<T>();
    for (int j = 0; j < n; j++) {
        for (int i = 0; i < ldc; i++) {
            size_t at = i + (size_t)j * ldc;
            if (i >= m) {
                REQUIRE(got[at] == C[at]);
                continue;
            }
            T sum = T(0);
            for (int p = 0; p < k; p++) sum += op_at(A, lda, ta, i, p) * op_at(B, ldb, tb, p, j);
            T want = alpha * sum + beta * C[at];
            if (!(std::abs(got[at] - want) <= tol * (1 + std::abs(want)) * k)) {
                printf("FAILED line %d: gemm ta=%d tb=%d C[%d,%d] off by %g\n", __LINE__, (int)ta, (int)tb, i, j,
                       (double)std::abs(got[at] - want));
                exit(1);
            }
        }
    }
    CHECK(cudaFree(dA));
    CHECK(cudaFree(dB));
    CHECK(cudaFree(dC));
    if (dScalars) CHECK(cudaFree(dScalars));
}

static const cublasOperation_t OPS[] = {CUBLAS_OP_N, CUBLAS_OP_T, CUBLAS_OP_C};

template <typename T> static void every_transpose(cublasHandle_t h, T alpha, T beta, bool device_scalars) {
    for (cublasOperation_t ta : OPS)
        for (cublasOperation_t tb : OPS) check_gemm<T>(h, ta, tb, 13, 7, 9, alpha, beta, device_scalars);
}

static void types(cublasHandle_t h) {
    every_transpose<float>(h, 1.5f, -0.5f, false);
    every_transpose<double>(h, 0.75, 2.0, false);
    every_transpose<cf>(h, cf(1.0f, -0.5f), cf(0.25f, 1.0f), false);
    every_transpose<cd>(h, cd(-1.0, 0.5), cd(0.5, -0.25), false);
    // a larger one, crossing any tile size an implementation might use
    check_gemm<float>(h, CUBLAS_OP_T, CUBLAS_OP_N, 70, 65, 129, 1.0f, 0.0f, false);
}

static void device_scalars(cublasHandle_t h) {
    every_transpose<float>(h, 2.0f, 0.5f, true);
    every_transpose<cd>(h, cd(0.5, 1.5), cd(-1.0, 0.25), true);
    check_gemm<double>(h, CUBLAS_OP_N, CUBLAS_OP_T, 8, 9, 10, -1.0, 1.0, true);
}

// gemmEx: float in/out, half in/float out, half in/out, all with a float compute type.
static void gemm_ex_case(cublasHandle_t h, cudaDataType ab_type, cudaDataType c_type, bool device_scalars) {
    const int m = 12, n = 10, k = 16, lda = m + 4, ldb = k + 2, ldc = m + 1;
    std::vector<float> A((size_t)lda * k), B((size_t)ldb * n), C((size_t)ldc * n);
    // values a half holds exactly: eighths in [-1, 1]
    for (auto &v : A) v = std::round(next_value() * 8) / 8;
    for (auto &v : B) v = std::round(next_value() * 8) / 8;
    for (auto &v : C) v = std::round(next_value() * 8) / 8;
    float alpha = 1.5f, beta = 0.5f;
    void *dA, *dB, *dC;
    auto upload = [](const std::vector<float> &h, cudaDataType t, void **d) {
        if (t == CUDA_R_32F) {
            *d = to_device(h);
        } else {
            std::vector<__half> half(h.size());
            for (size_t i = 0; i < h.size(); i++) half[i] = __float2half(h[i]);
            *d = to_device(half);
        }
    };
    upload(A, ab_type, &dA);
    upload(B, ab_type, &dB);
    upload(C, c_type, &dC);
    if (device_scalars) {
        float *d = to_device(std::vector<float>{alpha, beta});
        CUBLAS_CHECK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
        CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, d, dA, ab_type, lda, dB, ab_type, ldb, d + 1,
                                  dC, c_type, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        CUBLAS_CHECK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
        CHECK(cudaFree(d));
    } else {
        CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, dA, ab_type, lda, dB, ab_type, ldb,
                                  &beta, dC, c_type, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
    std::vector<float> got(C.size());
    if (c_type == CUDA_R_32F) {
        got = to_host((float *)dC, C.size());
    } else {
        std::vector<__half> half = to_host((__half *)dC, C.size());
        for (size_t i = 0; i < half.size(); i++) got[i] = __half2float(half[i]);
    }
    double tol = c_type == CUDA_R_16F ? 1e-2 : 1e-5;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double sum = 0;
            for (int p = 0; p < k; p++) sum += (double)A[i + p * lda] * B[p + j * ldb];
            double want = alpha * sum + beta * C[i + j * ldc];
            REQUIRE(std::fabs(got[i + j * ldc] - want) <= tol * (1 + std::fabs(want)));
        }
    CHECK(cudaFree(dA));
    CHECK(cudaFree(dB));
    CHECK(cudaFree(dC));
}

static void gemm_ex(cublasHandle_t h) {
    gemm_ex_case(h, CUDA_R_32F, CUDA_R_32F, false);
    gemm_ex_case(h, CUDA_R_16F, CUDA_R_32F, false);
    gemm_ex_case(h, CUDA_R_16F, CUDA_R_16F, false);
    gemm_ex_case(h, CUDA_R_32F, CUDA_R_32F, true);
    gemm_ex_case(h, CUDA_R_16F, CUDA_R_16F, true);
}

// beta == 0: C is not read, so NaN in it does not reach the result; alpha == 0 scales C.
static void beta_zero(cublasHandle_t h) {
    const int m = 4, n = 3, k = 2;
    std::vector<double> A(m * k, 1.0), B(k * n, 2.0), C(m * n, NAN);
    double *dA = to_device(A), *dB = to_device(B), *dC = to_device(C);
    double alpha = 1.0, beta = 0.0;
    CUBLAS_CHECK(cublasDgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, dA, m, dB, k, &beta, dC, m));
    for (double v : to_host(dC, C.size())) REQUIRE(v == 4.0);
    alpha = 0.0;
    beta = 0.5;
    CUBLAS_CHECK(cublasDgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, dA, m, dB, k, &beta, dC, m));
    for (double v : to_host(dC, C.size())) REQUIRE(v == 2.0);
    CHECK(cudaFree(dA));
    CHECK(cudaFree(dB));
    CHECK(cudaFree(dC));
}

int main(int argc, char **argv) {
    where_from("cublas", (void *)&cublasCreate_v2);
    const Section<cublasHandle_t> sections[] = {{"types", types}, {"device_scalars", device_scalars},
                                                {"gemm_ex", gemm_ex}, {"beta_zero", beta_zero}};
    cublasHandle_t h;
    CUBLAS_CHECK(cublasCreate(&h));
    run_sections(argc, argv, sections, h);
    CUBLAS_CHECK(cublasDestroy(h));
    printf("PASSED cublas_gemm\n");
    return 0;
}
