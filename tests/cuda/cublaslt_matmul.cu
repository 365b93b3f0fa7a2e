// cuBLASLt's GEMM path: handle, matmul descriptor, layouts, the heuristic and
// cublasLtMatmul with transposes, D apart from C, a strided batch and device
// scalars, checked against a host GEMM.  Sections: basic, transposes,
// batched, device_scalars, errors.  Prints "ok <section>", PASSED at the end.
#include "library_check.h"

#include <cublasLt.h>

static cublasLtHandle_t lt;

// D = alpha op(A) op(B) + beta C, column-major, on the host.
static void host_gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float *A, int lda, const float *B,
                      int ldb, float beta, const float *C, int ldc, float *D, int ldd) {
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double sum = 0;
            for (int l = 0; l < k; l++)
                sum += double(ta ? A[l + i * lda] : A[i + l * lda]) * (tb ? B[j + l * ldb] : B[l + j * ldb]);
            D[i + j * ldd] = float(alpha * sum + beta * C[i + j * ldc]);
        }
}

static std::vector<float> pattern(size_t n, float scale) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; i++) v[i] = scale * float((i * 37) % 11) - 2.0f;
    return v;
}

// One matmul of (m, n, k) with the given transposes and batch, checked.
static void matmul(bool ta, bool tb, int m, int n, int k, int batch, bool device_scalars) {
    int rows_a = ta ? k : m, cols_a = ta ? m : k, rows_b = tb ? n : k, cols_b = tb ? k : n;
    int lda = rows_a + 1, ldb = rows_b + 2, ldc = m + 1, ldd = m + 3;
    long long sa = (long long)lda * cols_a, sb = (long long)ldb * cols_b, sc = (long long)ldc * n,
              sd = (long long)ldd * n;
    std::vector<float> A = pattern(sa * batch, 0.5f), B = pattern(sb * batch, 0.25f), C = pattern(sc * batch, 1.0f);
    std::vector<float> D(sd * batch, 0.0f), expected(sd * batch, 0.0f);
    float alpha = 1.5f, beta = -0.5f;
    for (int i = 0; i < batch; i++)
        host_gemm(ta, tb, m, n, k, alpha, &A[i * sa], lda, &B[i * sb], ldb, beta, &C[i * sc], ldc,
                  &expected[i * sd], ldd);
    float *dA = to_device(A), *dB = to_device(B), *dC = to_device(C), *dD = to_device(D);

    cublasLtMatmulDesc_t desc;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    float *scalars = nullptr;
    if (device_scalars) {
        cublasLtPointerMode_t mode = CUBLASLT_POINTER_MODE_DEVICE;
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, &mode, sizeof mode));
        scalars = to_device(std::vector<float>{alpha, beta});
    }
    cublasLtMatrixLayout_t la, lb, lc, ld;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, rows_a, cols_a, lda));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, rows_b, cols_b, ldb));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, m, n, ldc));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, m, n, ldd));
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
    size_t workspace = 1 << 20;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                      sizeof workspace));
    cublasLtMatmulHeuristicResult_t heuristic;
    int found = 0;
    CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, ld, pref, 1, &heuristic, &found));
    REQUIRE(found == 1 && heuristic.state == CUBLAS_STATUS_SUCCESS && heuristic.workspaceSize <= workspace);
    cudaStream_t stream;
    CHECK(cudaStreamCreate(&stream));
    const void *pa = device_scalars ? (const void *)scalars : (const void *)&alpha;
    const void *pb = device_scalars ? (const void *)(scalars + 1) : (const void *)&beta;
    CUBLAS_CHECK(
        cublasLtMatmul(lt, desc, pa, dA, la, dB, lb, pb, dC, lc, dD, ld, &heuristic.algo, nullptr, 0, stream));
    CHECK(cudaStreamSynchronize(stream));
    D = to_host(dD, D.size());
    for (int b = 0; b < batch; b++)
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                size_t at = b * sd + i + (size_t)j * ldd;
                if (fabsf(D[at] - expected[at]) > 1e-3f * (1 + fabsf(expected[at]))) {
                    printf("FAILED line %d: matmul ta=%d tb=%d batch %d D[%d,%d] = %g, expected %g\n", __LINE__,
                           ta, tb, b, i, j, D[at], expected[at]);
                    exit(1);
                }
            }
    // C is untouched (D is apart from it).
    std::vector<float> C_after = to_host(dC, C.size());
    REQUIRE(memcmp(C_after.data(), C.data(), C.size() * sizeof(float)) == 0);
    CHECK(cudaStreamDestroy(stream));
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    for (cublasLtMatrixLayout_t l : {la, lb, lc, ld}) CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(l));
    CUBLAS_CHECK(cublasLtMatmulDescDestroy(desc));
    for (float *p : {dA, dB, dC, dD}) CHECK(cudaFree(p));
    if (scalars) CHECK(cudaFree(scalars));
}

static void basic() {
    REQUIRE(cublasLtGetVersion() >= 130000);
    int major = 0;
    CUBLAS_CHECK(cublasLtGetProperty(MAJOR_VERSION, &major));
    REQUIRE(major >= 13);
    matmul(false, false, 7, 5, 3, 1, false);
}

static void transposes() {
    matmul(true, false, 6, 4, 5, 1, false);
    matmul(false, true, 6, 4, 5, 1, false);
    matmul(true, true, 3, 8, 2, 1, false);
}

static void batched() {
    matmul(false, true, 4, 3, 6, 3, false);
}

static void device_scalars() {
    matmul(false, false, 5, 5, 5, 1, true);
}

static void errors() {
    cublasLtMatmulDesc_t desc;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasLtMatrixLayout_t la, lb, lc;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, 4, 3, 4));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, 5, 2, 5));  // k = 3 wanted, not 5
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, 4, 2, 4));
    float *d;
    CHECK(cudaMalloc(&d, 256));
    float one = 1, zero = 0;
    cublasStatus_t s = cublasLtMatmul(lt, desc, &one, d, la, d, lb, &zero, d, lc, d, lc, nullptr, nullptr, 0, 0);
    REQUIRE(s == CUBLAS_STATUS_INVALID_VALUE);
    // An attribute read back as it was set, and its size asked for.
    cublasOperation_t op = CUBLAS_OP_T, back;
    size_t written = 0;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op, sizeof op));
    CUBLAS_CHECK(cublasLtMatmulDescGetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &back, sizeof back, &written));
    REQUIRE(back == CUBLAS_OP_T && written == sizeof back);
    for (cublasLtMatrixLayout_t l : {la, lb, lc}) CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(l));
    CUBLAS_CHECK(cublasLtMatmulDescDestroy(desc));
    CHECK(cudaFree(d));
}

int main(int argc, char **argv) {
    where_from("cublasLt", (void *)&cublasLtMatmul);
    CUBLAS_CHECK(cublasLtCreate(&lt));
    const Section<> sections[] = {{"basic", basic}, {"transposes", transposes}, {"batched", batched},
                                  {"device_scalars", device_scalars}, {"errors", errors}};
    run_sections(argc, argv, sections);
    CUBLAS_CHECK(cublasLtDestroy(lt));
    printf("PASSED cublaslt_matmul\n");
    return 0;
}
