// A cuBLAS handle used as a cuBLASLt handle, as PyTorch's
// at::cuda::getCurrentCUDABlasLtHandle() does on CUDA
// (reinterpret_cast<cublasLtHandle_t>(getCurrentCUDABlasHandle())), which
// real cuBLAS accepts: the heuristic, then cublasLtMatmul with a bias
// epilogue in a stream of the program's (torch.nn.Linear's forward),
// checked against the host; the cuBLAS handle keeps its own stream and
// pointer mode, and cuBLAS calls on it still work.  Sections: linear,
// handle_kept.  Prints "ok <section>", PASSED at the end.
#include "library_check.h"

#include <cublasLt.h>
#include <cublas_v2.h>

static cublasHandle_t blas;
static cudaStream_t stream;

// y = W x + b for a batch of `n` columns, as nn.Linear's forward computes it
// (column-major: W is out x in, x is in x n, y is out x n, b has out elements).
static void linear() {
    const int out = 5, in = 7, n = 3;
    std::vector<float> W = random_vector<float>(out * in), x = random_vector<float>(in * n),
                       b = random_vector<float>(out), y(out * n, 0.0f);
    float *dW = to_device(W), *dx = to_device(x), *db = to_device(b), *dy = to_device(y);
    cublasLtHandle_t lt = reinterpret_cast<cublasLtHandle_t>(blas);  // PyTorch's handle

    cublasLtMatmulDesc_t desc;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &db, sizeof db));
    cublasLtMatrixLayout_t a, bl, c;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&a, CUDA_R_32F, out, in, out));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&bl, CUDA_R_32F, in, n, in));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&c, CUDA_R_32F, out, n, out));
    cublasLtMatmulPreference_t preference;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
    size_t workspace = 0;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                      &workspace, sizeof workspace));
    cublasLtMatmulHeuristicResult_t heuristic = {};
    int returned = 0;
    CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(lt, desc, a, bl, c, c, preference, 1, &heuristic, &returned));
    REQUIRE(returned == 1);
    float alpha = 1.0f, beta = 0.0f;
    CUBLAS_CHECK(cublasLtMatmul(lt, desc, &alpha, dW, a, dx, bl, &beta, dy, c, dy, c, &heuristic.algo, nullptr, 0,
                                stream));
    CHECK(cudaStreamSynchronize(stream));
    std::vector<float> got = to_host(dy, y.size());
    for (int i = 0; i < out; i++)
        for (int j = 0; j < n; j++) {
            double want = b[i];
            for (int l = 0; l < in; l++) want += double(W[i + l * out]) * x[l + j * in];
            NEAR(got[i + j * out], want, 1e-5);
        }
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(preference));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(a));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(bl));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(c));
    CUBLAS_CHECK(cublasLtMatmulDescDestroy(desc));
    for (float *p : {dW, dx, db, dy}) CHECK(cudaFree(p));
}

// cublasLtMatmul took its own stream and device pointer mode for one call:
// the cuBLAS handle's stream and (host) pointer mode are as the program set
// them, and a cuBLAS call with host scalars still reads them on the host.
static void handle_kept() {
    std::vector<float> v = {1.0f, 2.0f, 3.0f};
    float *dv = to_device(v), *dalpha = to_device(std::vector<float>{4.0f}), *dbeta = to_device(std::vector<float>{0.0f});
    cublasLtHandle_t lt = reinterpret_cast<cublasLtHandle_t>(blas);
    cublasLtMatmulDesc_t desc;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasLtPointerMode_t device_mode = CUBLASLT_POINTER_MODE_DEVICE;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, &device_mode,
                                                sizeof device_mode));
    cublasLtMatrixLayout_t row, col, one;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&row, CUDA_R_32F, 1, 3, 1));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&col, CUDA_R_32F, 3, 1, 3));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&one, CUDA_R_32F, 1, 1, 1));
    float *dot;
    CHECK(cudaMalloc(&dot, sizeof(float)));
    CUBLAS_CHECK(cublasLtMatmul(lt, desc, dalpha, dv, row, dv, col, dbeta, dot, one, dot, one, nullptr, nullptr, 0,
                                0));  // the legacy stream, device scalars: dot = 4 * (v . v)
    REQUIRE(to_host(dot, 1)[0] == 56.0f);
    cudaStream_t now;
    CUBLAS_CHECK(cublasGetStream(blas, &now));
    REQUIRE(now == stream);
    cublasPointerMode_t mode;
    CUBLAS_CHECK(cublasGetPointerMode(blas, &mode));
    REQUIRE(mode == CUBLAS_POINTER_MODE_HOST);
    float alpha = 0.5f;
    CUBLAS_CHECK(cublasSscal(blas, 3, &alpha, dv, 1));  // host alpha, in the handle's stream
    CHECK(cudaStreamSynchronize(stream));
    std::vector<float> got = to_host(dv, 3);
    REQUIRE(got[0] == 0.5f && got[1] == 1.0f && got[2] == 1.5f);
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(row));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(col));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(one));
    CUBLAS_CHECK(cublasLtMatmulDescDestroy(desc));
    for (float *p : {dv, dalpha, dbeta, dot}) CHECK(cudaFree(p));
}

int main(int argc, char **argv) {
    where_from("cublasLt", (void *)&cublasLtMatmul);
    CUBLAS_CHECK(cublasCreate(&blas));
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CUBLAS_CHECK(cublasSetStream(blas, stream));
    const Section<> sections[] = {{"linear", linear}, {"handle_kept", handle_kept}};
    run_sections(argc, argv, sections);
    CUBLAS_CHECK(cublasDestroy(blas));
    CHECK(cudaStreamDestroy(stream));
    printf("PASSED cublaslt_blas_handle\n");
    return 0;
}
