// cuBLAS's batched calls through rcuda, against host loops: gemmBatched with
// its pointer arrays in device memory, gemmStridedBatched, LU factorisation
// and solve (getrfBatched + getrsBatched, with and without pivoting), the
// inverse from the LU (getriBatched) and matinvBatched.
// Sections: gemm_batched gemm_strided getrs singular getri matinv.
#include "library_check.h"

#include <cublas_v2.h>

typedef std::complex<float> cf;

// `batch` device matrices of `size` elements each, filled from host[i], and
// the device array of their addresses.
template <typename T> struct Batch {
    std::vector<T *> ptrs;
    T **array = nullptr;

    Batch(const std::vector<std::vector<T>> &host) {
        for (const auto &m : host) ptrs.push_back(to_device(m));
        array = to_device(ptrs);
    }
    ~Batch() {
        for (T *p : ptrs) CHECK(cudaFree(p));
        CHECK(cudaFree(array));
    }
    std::vector<T> get(size_t i, size_t n) const { return to_host(ptrs[i], n); }
};

static void gemm_batched(cublasHandle_t h) {
    const int m = 6, n = 5, k = 4, lda = k + 2, ldb = k + 1, ldc = m + 1, batch = 7;
    // op(A) = A^T (A is k x m), op(B) = B
    std::vector<std::vector<double>> A, B, C;
    for (int b = 0; b < batch; b++) {
        A.push_back(random_vector<double>(lda * m));
        B.push_back(random_vector<double>(ldb * n));
        C.push_back(random_vector<double>(ldc * n));
    }
    Batch<double> dA(A), dB(B), dC(C);
    double alpha = 1.5, beta = -1.0;
    CUBLAS_CHECK(cublasDgemmBatched(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, dA.array, lda, dB.array, ldb, &beta,
                                    dC.array, ldc, batch));
    for (int b = 0; b < batch; b++) {
        std::vector<double> got = dC.get(b, ldc * n);
        for (int j = 0; j < n; j++)
            for (int i = 0; i < ldc; i++) {
                double sum = 0;
                for (int p = 0; p < k; p++) sum += A[b][p + i * lda] * B[b][p + j * ldb];
                NEAR(got[i + j * ldc], i < m ? alpha * sum + beta * C[b][i + j * ldc] : C[b][i + j * ldc], 1e-12);
            }
    }
    // float, alpha and beta from device memory
    std::vector<std::vector<float>> Af, Bf, Cf;
    for (int b = 0; b < batch; b++) {
        Af.push_back(random_vector<float>(m * k));
        Bf.push_back(random_vector<float>(k * n));
        Cf.push_back(std::vector<float>(m * n, NAN));             // beta == 0: not read
    }
    Batch<float> fA(Af), fB(Bf), fC(Cf);
    float *scalars = to_device(std::vector<float>{2.0f, 0.0f});
    CUBLAS_CHECK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
    CUBLAS_CHECK(cublasSgemmBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, scalars, fA.array, m, fB.array, k,
                                    scalars + 1, fC.array, m, batch));
    CUBLAS_CHECK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
    for (int b = 0; b < batch; b++) {
        std::vector<float> got = fC.get(b, m * n);
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                double sum = 0;
                for (int p = 0; p < k; p++) sum += Af[b][i + p * m] * Bf[b][p + j * k];
                NEAR(got[i + j * m], 2 * sum, 1e-5);
            }
    }
    CHECK(cudaFree(scalars));
}

static void gemm_strided(cublasHandle_t h) {
    const int m = 5, n = 3, k = 4, batch = 6;
    const long long sa = m * k, sb = k * n + 3, sc = m * n + 1;   // B and C with gaps between matrices
    std::vector<float> A = random_vector<float>(sa * batch), B = random_vector<float>(sb * batch),
                       C = random_vector<float>(sc * batch);
    float *dA = to_device(A), *dB = to_device(B), *dC = to_device(C);
    float alpha = -0.5f, beta = 2.0f;
    CUBLAS_CHECK(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, dA, m, sa, dB, k, sb, &beta,
                                           dC, m, sc, batch));
    std::vector<float> got = to_host(dC, C.size());
    for (int b = 0; b < batch; b++) {
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                double sum = 0;
                for (int p = 0; p < k; p++) sum += A[b * sa + i + p * m] * B[b * sb + p + j * k];
                NEAR(got[b * sc + i + j * m], alpha * sum + beta * C[b * sc + i + j * m], 1e-5);
            }
        REQUIRE(got[b * sc + m * n] == C[b * sc + m * n]);      // the gap is untouched
    }
    // complex, C = A^H B
    std::vector<cf> Ac = random_vector<cf>(sa * batch), Bc = random_vector<cf>(sb * batch),
                    Cc = random_vector<cf>(sc * batch);
    cf *cA = to_device(Ac), *cB = to_device(Bc), *cC = to_device(Cc);
    cf calpha(1.0f, 0.5f), cbeta(0.0f, 0.0f);
    // A^H is m x k, so A is k x m with lda = k
    CUBLAS_CHECK(cublasCgemmStridedBatched(h, CUBLAS_OP_C, CUBLAS_OP_N, m, n, k, (cuComplex *)&calpha,
                                           (cuComplex *)cA, k, sa, (cuComplex *)cB, k, sb, (cuComplex *)&cbeta,
                                           (cuComplex *)cC, m, sc, batch));
    std::vector<cf> cgot = to_host(cC, Cc.size());
    for (int b = 0; b < batch; b++)
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                cf sum = 0;
                for (int p = 0; p < k; p++) sum += std::conj(Ac[b * sa + p + i * k]) * Bc[b * sb + p + j * k];
                REQUIRE(std::abs(cgot[b * sc + i + j * m] - calpha * sum) < 1e-4);
            }
    for (void *p : {(void *)dA, (void *)dB, (void *)dC, (void *)cA, (void *)cB, (void *)cC}) CHECK(cudaFree(p));
}

// n x n matrices (leading dimension lda) that need pivoting: a small diagonal.
static std::vector<std::vector<double>> test_matrices(int n, int lda, int batch, bool pivoting) {
    std::vector<std::vector<double>> mats;
    for (int b = 0; b < batch; b++) {
        std::vector<double> A = random_vector<double>(lda * n);
        for (int i = 0; i < n; i++) A[i + i * lda] = pivoting ? 1e-3 * (i + 1) : A[i + i * lda] + n;
        mats.push_back(A);
    }
    return mats;
}

static void getrs_case(cublasHandle_t h, bool pivoting) {
    const int n = 8, lda = 10, nrhs = 3, ldb = 9, batch = 5;
    std::vector<std::vector<double>> A = test_matrices(n, lda, batch, pivoting), B;
    for (int b = 0; b < batch; b++) B.push_back(random_vector<double>(ldb * nrhs));
    Batch<double> dA(A);
    int *pivots = nullptr, *infos;
    if (pivoting) CHECK(cudaMalloc(&pivots, sizeof(int) * n * batch));
    CHECK(cudaMalloc(&infos, sizeof(int) * batch));
    CHECK(cudaMemset(infos, 0xff, sizeof(int) * batch));
    CUBLAS_CHECK(cublasDgetrfBatched(h, n, dA.array, lda, pivots, infos, batch));
    for (int v : to_host(infos, batch)) REQUIRE(v == 0);
    if (pivoting)
        for (int p : to_host(pivots, n * batch)) REQUIRE(p >= 1 && p <= n);
    for (cublasOperation_t t : {CUBLAS_OP_N, CUBLAS_OP_T}) {
        Batch<double> dB(B);
        int info = -1;
        CUBLAS_CHECK(cublasDgetrsBatched(h, t, n, nrhs, dA.array, lda, pivots, dB.array, ldb, &info, batch));
        REQUIRE(info == 0);
        for (int b = 0; b < batch; b++) {
            std::vector<double> X = dB.get(b, ldb * nrhs);
            for (int j = 0; j < nrhs; j++)
                for (int i = 0; i < n; i++) {
                    double sum = 0;              // (op(A) X)[i, j] with the original A
                    for (int p = 0; p < n; p++)
                        sum += (t == CUBLAS_OP_N ? A[b][i + p * lda] : A[b][p + i * lda]) * X[p + j * ldb];
                    NEAR(sum, B[b][i + j * ldb], 1e-9);
                }
        }
    }
    // getrsBatched names a bad parameter in its host info: ldb < n is the 9th
    Batch<double> dB(B);
    int info = 0;
    REQUIRE(cublasDgetrsBatched(h, CUBLAS_OP_N, n, nrhs, dA.array, lda, pivots, dB.array, n - 1, &info, batch) ==
            CUBLAS_STATUS_INVALID_VALUE);
    REQUIRE(info == -9);
    if (pivots) CHECK(cudaFree(pivots));
    CHECK(cudaFree(infos));
}

static void getrs(cublasHandle_t h) {
    getrs_case(h, true);
    getrs_case(h, false);
    // float: one 4x4 system with a known solution
    const int n = 4;
    std::vector<std::vector<float>> A = {{4, 1, 0, 2, 1, 5, 1, 0, 0, 2, 6, 1, 1, 0, 1, 3}};
    std::vector<float> x = {1, -2, 3, 0.5f}, b(n, 0.0f);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < n; i++) b[i] += A[0][i + j * n] * x[j];
    Batch<float> dA(A), dB(std::vector<std::vector<float>>{b});
    int *pivots, *infos, info = -1;
    CHECK(cudaMalloc(&pivots, sizeof(int) * n));
    CHECK(cudaMalloc(&infos, sizeof(int)));
    CUBLAS_CHECK(cublasSgetrfBatched(h, n, dA.array, n, pivots, infos, 1));
    CUBLAS_CHECK(cublasSgetrsBatched(h, CUBLAS_OP_N, n, 1, dA.array, n, pivots, dB.array, n, &info, 1));
    REQUIRE(info == 0 && to_host(infos, 1)[0] == 0);
    std::vector<float> got = dB.get(0, n);
    for (int i = 0; i < n; i++) NEAR(got[i], x[i], 1e-5);
    CHECK(cudaFree(pivots));
    CHECK(cudaFree(infos));
}

// A singular matrix: getrf's info names the first zero pivot (1-based), the
// other matrices' info is 0.  A zero column makes the zero pivot exact.
static void singular(cublasHandle_t h) {
    const int n = 3;
    std::vector<std::vector<double>> A = {{1, 2, 3, 0, 0, 0, 1, 1, 1}, {2, 0, 0, 0, 3, 0, 0, 0, 4}};
    Batch<double> dA(A);
    int *pivots, *infos;
    CHECK(cudaMalloc(&pivots, sizeof(int) * n * 2));
    CHECK(cudaMalloc(&infos, sizeof(int) * 2));
    CUBLAS_CHECK(cublasDgetrfBatched(h, n, dA.array, n, pivots, infos, 2));
    std::vector<int> info = to_host(infos, 2);
    REQUIRE(info[0] == 2);
    REQUIRE(info[1] == 0);
    CHECK(cudaFree(pivots));
    CHECK(cudaFree(infos));
}

static void check_inverse(const std::vector<double> &A, int lda, const std::vector<double> &inv, int ldc, int n,
                          int line) {
    for (int j = 0; j < n; j++)
        for (int i = 0; i < n; i++) {
            double sum = 0;
            for (int p = 0; p < n; p++) sum += A[i + p * lda] * inv[p + j * ldc];
            if (!(std::fabs(sum - (i == j ? 1.0 : 0.0)) < 1e-9)) {
                printf("FAILED line %d: (A inv(A))[%d,%d] = %g\n", line, i, j, sum);
                exit(1);
            }
        }
}

static void getri(cublasHandle_t h) {
    const int n = 7, lda = 8, ldc = 9, batch = 4;
    for (bool pivoting : {true, false}) {
        std::vector<std::vector<double>> A = test_matrices(n, lda, batch, pivoting);
        std::vector<std::vector<double>> C(batch, std::vector<double>(ldc * n, 0.0));
        Batch<double> dA(A), dC(C);
        int *pivots = nullptr, *infos;
        if (pivoting) CHECK(cudaMalloc(&pivots, sizeof(int) * n * batch));
        CHECK(cudaMalloc(&infos, sizeof(int) * batch));
        CUBLAS_CHECK(cublasDgetrfBatched(h, n, dA.array, lda, pivots, infos, batch));
        CUBLAS_CHECK(cublasDgetriBatched(h, n, (const double *const *)dA.array, lda, pivots, dC.array, ldc, infos,
                                         batch));
        for (int v : to_host(infos, batch)) REQUIRE(v == 0);
        for (int b = 0; b < batch; b++) check_inverse(A[b], lda, dC.get(b, ldc * n), ldc, n, __LINE__);
        if (pivots) CHECK(cudaFree(pivots));
        CHECK(cudaFree(infos));
    }
}

static void matinv(cublasHandle_t h) {
    const int n = 6, lda = 6, ldinv = 7, batch = 3;
    std::vector<std::vector<double>> A = test_matrices(n, lda, batch, true);
    std::vector<std::vector<double>> C(batch, std::vector<double>(ldinv * n, 0.0));
    Batch<double> dA(A), dC(C);
    int *infos;
    CHECK(cudaMalloc(&infos, sizeof(int) * batch));
    CUBLAS_CHECK(cublasDmatinvBatched(h, n, (const double *const *)dA.array, lda, dC.array, ldinv, infos, batch));
    for (int v : to_host(infos, batch)) REQUIRE(v == 0);
    for (int b = 0; b < batch; b++) {
        check_inverse(A[b], lda, dC.get(b, ldinv * n), ldinv, n, __LINE__);
        std::vector<double> same = dA.get(b, lda * n);      // the input is left as it was
        for (int i = 0; i < lda * n; i++) REQUIRE(same[i] == A[b][i]);
    }
    // n > 32 is refused
    REQUIRE(cublasDmatinvBatched(h, 33, (const double *const *)dA.array, 33, dC.array, 33, infos, 1) ==
            CUBLAS_STATUS_INVALID_VALUE);
    CHECK(cudaFree(infos));
}

int main(int argc, char **argv) {
    where_from("cublas", (void *)&cublasCreate_v2);
    seed_values(4242);
    const Section<cublasHandle_t> sections[] = {{"gemm_batched", gemm_batched}, {"gemm_strided", gemm_strided},
                                                {"getrs", getrs}, {"singular", singular}, {"getri", getri},
                                                {"matinv", matinv}};
    cublasHandle_t h;
    CUBLAS_CHECK(cublasCreate(&h));
    run_sections(argc, argv, sections, h);
    CUBLAS_CHECK(cublasDestroy(h));
    printf("PASSED cublas_batched\n");
    return 0;
}
