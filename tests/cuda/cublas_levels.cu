// cuBLAS handles and Levels 1-3 through rcuda, each against host loops:
// the handle's settings, Level 1 with increments other than 1 and results
// in device memory (CUBLAS_POINTER_MODE_DEVICE), gemv and ger, gbmv, spmv,
// tpsv and syr (band and packed storage), trsm, trmm,
// syrk, symm, geam and dgmm, Set/GetMatrix and Set/GetVector (and their
// Async forms on a stream), and CUBLAS_STATUS_INVALID_VALUE for bad
// arguments.  Sections: handle level1 device_results level2 level3 setget invalid.
#include "library_check.h"

#include <cublas_v2.h>

typedef std::complex<float> cf;

static void handle(cublasHandle_t) {
    cublasHandle_t h;
    CUBLAS_CHECK(cublasCreate(&h));
    int version = 0;
    CUBLAS_CHECK(cublasGetVersion(h, &version));
    REQUIRE(version >= 130000);
    int major = 0;
    CUBLAS_CHECK(cublasGetProperty(MAJOR_VERSION, &major));
    REQUIRE(major == version / 10000);

    cudaStream_t stream, got_stream = nullptr;
    CHECK(cudaStreamCreate(&stream));
    CUBLAS_CHECK(cublasGetStream(h, &got_stream));
    REQUIRE(got_stream == nullptr);
    CUBLAS_CHECK(cublasSetStream(h, stream));
    CUBLAS_CHECK(cublasGetStream(h, &got_stream));
    REQUIRE(got_stream == stream);

    cublasPointerMode_t mode;
    CUBLAS_CHECK(cublasGetPointerMode(h, &mode));
    REQUIRE(mode == CUBLAS_POINTER_MODE_HOST);
    CUBLAS_CHECK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
    CUBLAS_CHECK(cublasGetPointerMode(h, &mode));
    REQUIRE(mode == CUBLAS_POINTER_MODE_DEVICE);

    cublasMath_t math;
    CUBLAS_CHECK(cublasGetMathMode(h, &math));
    REQUIRE(math == CUBLAS_DEFAULT_MATH);
    CUBLAS_CHECK(cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH));
    CUBLAS_CHECK(cublasGetMathMode(h, &math));
    REQUIRE(math == CUBLAS_TF32_TENSOR_OP_MATH);
    CUBLAS_CHECK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));

    cublasAtomicsMode_t atomics;
    CUBLAS_CHECK(cublasGetAtomicsMode(h, &atomics));
    REQUIRE(atomics == CUBLAS_ATOMICS_NOT_ALLOWED);
    CUBLAS_CHECK(cublasSetAtomicsMode(h, CUBLAS_ATOMICS_ALLOWED));
    CUBLAS_CHECK(cublasGetAtomicsMode(h, &atomics));
    REQUIRE(atomics == CUBLAS_ATOMICS_ALLOWED);

    void *workspace;
    const size_t workspace_size = 4 << 20;
    CHECK(cudaMalloc(&workspace, workspace_size));
    CUBLAS_CHECK(cublasSetWorkspace(h, workspace, workspace_size));

    // the handle still works with all of that set: a dot on its stream, result in device memory
    std::vector<float> x = {1, 2, 3}, y = {4, 5, 6};
    float *dx = to_device(x), *dy = to_device(y), *dr;
    CHECK(cudaMalloc(&dr, sizeof(float)));
    CUBLAS_CHECK(cublasSdot(h, 3, dx, 1, dy, 1, dr));
    CHECK(cudaStreamSynchronize(stream));
    REQUIRE(to_host(dr, 1)[0] == 32.0f);

    CUBLAS_CHECK(cublasDestroy(h));
    CHECK(cudaFree(dx));
    CHECK(cudaFree(dy));
    CHECK(cudaFree(dr));
    CHECK(cudaFree(workspace));
    CHECK(cudaStreamDestroy(stream));
}

// Element i of a BLAS vector of n elements with increment inc (inc < 0: from the far end).
static size_t at(int i, int n, int inc) { return inc > 0 ? (size_t)i * inc : (size_t)(n - 1 - i) * -inc; }

static void level1(cublasHandle_t h) {
    const int n = 10, incx = 2, incy = -3;
    std::vector<double> x = random_vector<double>(n * incx), y = random_vector<double>(n * 3);
    double *dx = to_device(x), *dy = to_device(y);
    // axpy
    double alpha = 0.75;
    CUBLAS_CHECK(cublasDaxpy(h, n, &alpha, dx, incx, dy, incy));
    std::vector<double> y1 = to_host(dy, y.size());
    for (int i = 0; i < n; i++) NEAR(y1[at(i, n, incy)], y[at(i, n, incy)] + alpha * x[at(i, n, incx)], 1e-12);
    // dot
    double dot = 0, want = 0;
    CUBLAS_CHECK(cublasDdot(h, n, dx, incx, dy, incy, &dot));
    for (int i = 0; i < n; i++) want += x[at(i, n, incx)] * y1[at(i, n, incy)];
    NEAR(dot, want, 1e-12);
    // nrm2, asum, amax, amin
    double nrm = 0, asum = 0, want_nrm = 0, want_asum = 0;
    int imax = 0, imin = 0, want_max = 1, want_min = 1;
    CUBLAS_CHECK(cublasDnrm2(h, n, dx, incx, &nrm));
    CUBLAS_CHECK(cublasDasum(h, n, dx, incx, &asum));
    CUBLAS_CHECK(cublasIdamax(h, n, dx, incx, &imax));
    CUBLAS_CHECK(cublasIdamin(h, n, dx, incx, &imin));
    for (int i = 0; i < n; i++) {
        double v = x[i * incx];
        want_nrm += v * v;
        want_asum += std::fabs(v);
        if (std::fabs(v) > std::fabs(x[(want_max - 1) * incx])) want_max = i + 1;
        if (std::fabs(v) < std::fabs(x[(want_min - 1) * incx])) want_min = i + 1;
    }
    NEAR(nrm, std::sqrt(want_nrm), 1e-12);
    NEAR(asum, want_asum, 1e-12);
    REQUIRE(imax == want_max);
    REQUIRE(imin == want_min);
    // scal
    double scale = -2.5;
    CUBLAS_CHECK(cublasDscal(h, n, &scale, dx, incx));
    std::vector<double> x1 = to_host(dx, x.size());
    for (int i = 0; i < (int)x.size(); i++) NEAR(x1[i], i % incx == 0 ? scale * x[i] : x[i], 1e-12);
    // copy and swap, in float, with a negative increment
    std::vector<float> a = random_vector<float>(n), b(2 * n, 0.0f);
    float *da = to_device(a), *db = to_device(b);
    CUBLAS_CHECK(cublasScopy(h, n, da, 1, db, -2));
    std::vector<float> b1 = to_host(db, b.size());
    for (int i = 0; i < n; i++) REQUIRE(b1[at(i, n, -2)] == a[i]);
    std::vector<float> c = random_vector<float>(n);
    float *dc = to_device(c);
    CUBLAS_CHECK(cublasSswap(h, n, da, 1, dc, 1));
    std::vector<float> a2 = to_host(da, n), c2 = to_host(dc, n);
    for (int i = 0; i < n; i++) REQUIRE(a2[i] == c[i] && c2[i] == a[i]);
    // complex: dotc conjugates x, Scnrm2, Icamax by |re| + |im|
    std::vector<cf> u = random_vector<cf>(n), v = random_vector<cf>(n);
    cf *du = to_device(u), *dv = to_device(v);
    cf dotc, want_dotc = 0;
    CUBLAS_CHECK(cublasCdotc(h, n, (cuComplex *)du, 1, (cuComplex *)dv, 1, (cuComplex *)&dotc));
    for (int i = 0; i < n; i++) want_dotc += std::conj(u[i]) * v[i];
    REQUIRE(std::abs(dotc - want_dotc) < 1e-4);
    float cnrm = 0, want_cnrm = 0;
    CUBLAS_CHECK(cublasScnrm2(h, n, (cuComplex *)du, 1, &cnrm));
    for (int i = 0; i < n; i++) want_cnrm += std::norm(u[i]);
    NEAR(cnrm, std::sqrt(want_cnrm), 1e-5);
    int icmax = 0, want_icmax = 1;
    CUBLAS_CHECK(cublasIcamax(h, n, (cuComplex *)du, 1, &icmax));
    auto abs1 = [](cf z) { return std::fabs(z.real()) + std::fabs(z.imag()); };
    for (int i = 0; i < n; i++)
        if (abs1(u[i]) > abs1(u[want_icmax - 1])) want_icmax = i + 1;
    REQUIRE(icmax == want_icmax);
    // rot: c and s are scalars like alpha, read from host memory here, from device memory below
    std::vector<float> rx = random_vector<float>(n), ry = random_vector<float>(n);
    float *drx = to_device(rx), *dry = to_device(ry);
    float cosine = 0.6f, sine = 0.8f;
    CUBLAS_CHECK(cublasSrot(h, n, drx, 1, dry, 1, &cosine, &sine));
    std::vector<float> rx1 = to_host(drx, n), ry1 = to_host(dry, n);
    for (int i = 0; i < n; i++) {
        NEAR(rx1[i], cosine * rx[i] + sine * ry[i], 1e-5);
        NEAR(ry1[i], cosine * ry[i] - sine * rx[i], 1e-5);
    }
    float *dcs = to_device(std::vector<float>{0.0f, 1.0f});  // a quarter turn
    CUBLAS_CHECK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
    CUBLAS_CHECK(cublasSrot(h, n, drx, 1, dry, 1, dcs, dcs + 1));
    CUBLAS_CHECK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
    std::vector<float> rx2 = to_host(drx, n), ry2 = to_host(dry, n);
    for (int i = 0; i < n; i++) {
        NEAR(rx2[i], ry1[i], 1e-6);
        NEAR(ry2[i], -rx1[i], 1e-6);
    }
    for (void *p : {(void *)dx, (void *)dy, (void *)da, (void *)db, (void *)dc, (void *)du, (void *)dv, (void *)drx,
                    (void *)dry, (void *)dcs})
        CHECK(cudaFree(p));
}

// CUBLAS_POINTER_MODE_DEVICE: alpha read from device memory, scalar results written there.
static void device_results(cublasHandle_t h) {
    const int n = 8, incx = 3;
    std::vector<float> x = random_vector<float>(n * incx), y = random_vector<float>(n);
    float *dx = to_device(x), *dy = to_device(y);
    float *dres;
    int *dindex;
    CHECK(cudaMalloc(&dres, 4 * sizeof(float)));
    CHECK(cudaMalloc(&dindex, sizeof(int)));
    float *dalpha = to_device(std::vector<float>{2.0f});
    CUBLAS_CHECK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
    CUBLAS_CHECK(cublasSaxpy(h, n, dalpha, dx, incx, dy, 1));
    CUBLAS_CHECK(cublasSdot(h, n, dx, incx, dy, 1, dres));
    CUBLAS_CHECK(cublasSnrm2(h, n, dx, incx, dres + 1));
    CUBLAS_CHECK(cublasSasum(h, n, dx, incx, dres + 2));
    CUBLAS_CHECK(cublasIsamax(h, n, dx, incx, dindex));
    CUBLAS_CHECK(cublasSscal(h, n, dalpha, dx, incx));
    CUBLAS_CHECK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
    CHECK(cudaDeviceSynchronize());
    std::vector<float> res = to_host(dres, 3), y1 = to_host(dy, n), x1 = to_host(dx, x.size());
    int index = to_host(dindex, 1)[0];
    double dot = 0, nrm = 0, asum = 0;
    int want_index = 1;
    for (int i = 0; i < n; i++) {
        float xi = x[i * incx];
        NEAR(y1[i], y[i] + 2.0f * xi, 1e-6);
        dot += xi * y1[i];
        nrm += xi * xi;
        asum += std::fabs(xi);
        if (std::fabs(xi) > std::fabs(x[(want_index - 1) * incx])) want_index = i + 1;
        NEAR(x1[i * incx], 2.0f * xi, 1e-6);
    }
    NEAR(res[0], dot, 1e-5);
    NEAR(res[1], std::sqrt(nrm), 1e-5);
    NEAR(res[2], asum, 1e-5);
    REQUIRE(index == want_index);
    // a double dot whose result lands in device memory
    std::vector<double> p = {1, 2, 3, 4}, q = {0.5, 0.25, 2, 1};
    double *dp = to_device(p), *dq = to_device(q), *dd;
    CHECK(cudaMalloc(&dd, sizeof(double)));
    CUBLAS_CHECK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
    CUBLAS_CHECK(cublasDdot(h, 2, dp, 2, dq, -2, dd));        // (1, 3) . (2, 0.5): q read backwards
    CUBLAS_CHECK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
    REQUIRE(to_host(dd, 1)[0] == 1 * 2 + 3 * 0.5);
    for (void *ptr : {(void *)dx, (void *)dy, (void *)dres, (void *)dindex, (void *)dalpha, (void *)dp, (void *)dq,
                      (void *)dd})
        CHECK(cudaFree(ptr));
}

static void level2_band_packed(cublasHandle_t h);

static void level2(cublasHandle_t h) {
    const int m = 7, n = 5, lda = 9;
    std::vector<double> A = random_vector<double>(lda * n);
    double *dA = to_device(A);
    for (cublasOperation_t t : {CUBLAS_OP_N, CUBLAS_OP_T}) {
        int lx = t == CUBLAS_OP_N ? n : m, ly = t == CUBLAS_OP_N ? m : n;
        std::vector<double> x = random_vector<double>(lx * 2), y = random_vector<double>(ly);
        double *dx = to_device(x), *dy = to_device(y);
        double alpha = 1.25, beta = -0.5;
        CUBLAS_CHECK(cublasDgemv(h, t, m, n, &alpha, dA, lda, dx, 2, &beta, dy, 1));
        std::vector<double> got = to_host(dy, ly);
        for (int i = 0; i < ly; i++) {
            double sum = 0;
            for (int p = 0; p < lx; p++) sum += (t == CUBLAS_OP_N ? A[i + p * lda] : A[p + i * lda]) * x[2 * p];
            NEAR(got[i], alpha * sum + beta * y[i], 1e-12);
        }
        CHECK(cudaFree(dx));
        CHECK(cudaFree(dy));
    }
    // ger: A += alpha x y^T, x with a negative increment
    std::vector<double> x = random_vector<double>(m), y = random_vector<double>(n);
    double *dx = to_device(x), *dy = to_device(y);
    double alpha = -2.0;
    CUBLAS_CHECK(cublasDger(h, m, n, &alpha, dx, -1, dy, 1, dA, lda));
    std::vector<double> got = to_host(dA, A.size());
    for (int j = 0; j < n; j++)
        for (int i = 0; i < lda; i++)
            NEAR(got[i + j * lda], i < m ? A[i + j * lda] + alpha * x[m - 1 - i] * y[j] : A[i + j * lda], 1e-12);
    CHECK(cudaFree(dx));
    CHECK(cudaFree(dy));
    CHECK(cudaFree(dA));
    level2_band_packed(h);
}

// Band and packed storage (reference BLAS's, column-major) and the rank-1 update:
// gbmv (A[i, j] at AB[ku + i - j + j * ldab]), spmv and tpsv on upper packed
// triangles (A[i, j], i <= j, at AP[i + j (j + 1) / 2]), syr on the lower triangle.
static void level2_band_packed(cublasHandle_t h) {
    const int m = 6, n = 5, kl = 2, ku = 1, ldab = kl + ku + 2;
    std::vector<double> AB = random_vector<double>(ldab * n), x = random_vector<double>(m), y = random_vector<double>(m);
    auto band = [&](int i, int j) { return i - j > kl || j - i > ku ? 0.0 : AB[ku + i - j + j * ldab]; };
    double *dAB = to_device(AB), *dx = to_device(x), *dy = to_device(y);
    double alpha = 0.5, beta = 2.0;
    // gbmv: y = alpha A^T x + beta y, x read backwards (incx = -1)
    CUBLAS_CHECK(cublasDgbmv(h, CUBLAS_OP_T, m, n, kl, ku, &alpha, dAB, ldab, dx, -1, &beta, dy, 1));
    std::vector<double> got = to_host(dy, n);
    for (int j = 0; j < n; j++) {
        double sum = 0;
        for (int i = 0; i < m; i++) sum += band(i, j) * x[m - 1 - i];
        NEAR(got[j], alpha * sum + beta * y[j], 1e-12);
    }
    // spmv: y = alpha A x + beta y, A symmetric from its packed upper triangle
    std::vector<double> AP = random_vector<double>(n * (n + 1) / 2);
    auto packed = [&](int i, int j) { return i <= j ? AP[i + j * (j + 1) / 2] : AP[j + i * (i + 1) / 2]; };
    double *dAP = to_device(AP);
    CHECK(cudaMemcpy(dy, y.data(), n * sizeof(double), cudaMemcpyHostToDevice));
    CUBLAS_CHECK(cublasDspmv(h, CUBLAS_FILL_MODE_UPPER, n, &alpha, dAP, dx, 1, &beta, dy, 1));
    got = to_host(dy, n);
    for (int i = 0; i < n; i++) {
        double sum = 0;
        for (int j = 0; j < n; j++) sum += packed(i, j) * x[j];
        NEAR(got[i], alpha * sum + beta * y[i], 1e-12);
    }
    // tpsv: solve A^T z = x, A upper triangular (packed) with a strong diagonal
    for (int j = 0; j < n; j++) AP[j + j * (j + 1) / 2] += 4.0;
    CHECK(cudaMemcpy(dAP, AP.data(), AP.size() * sizeof(double), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dx, x.data(), m * sizeof(double), cudaMemcpyHostToDevice));
    CUBLAS_CHECK(cublasDtpsv(h, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_T, CUBLAS_DIAG_NON_UNIT, n, dAP, dx, 1));
    std::vector<double> z = to_host(dx, n);
    for (int i = 0; i < n; i++) {  // row i of A^T is column i of A: sum over k <= i of A[k, i] z[k]
        double sum = 0;
        for (int k = 0; k <= i; k++) sum += AP[k + i * (i + 1) / 2] * z[k];
        NEAR(sum, x[i], 1e-10);
    }
    // syr: A += alpha x x^T on the lower triangle only, x with increment 2
    const int lda = n + 1;
    std::vector<double> A = random_vector<double>(lda * n), xs = random_vector<double>(2 * n);
    double *dA = to_device(A), *dxs = to_device(xs);
    CUBLAS_CHECK(cublasDsyr(h, CUBLAS_FILL_MODE_LOWER, n, &alpha, dxs, 2, dA, lda));
    got = to_host(dA, A.size());
    for (int j = 0; j < n; j++)
        for (int i = 0; i < lda; i++)
            NEAR(got[i + j * lda], i >= j && i < n ? A[i + j * lda] + alpha * xs[2 * i] * xs[2 * j] : A[i + j * lda],
                 1e-12);
    for (double *p : {dAB, dx, dy, dAP, dA, dxs}) CHECK(cudaFree(p));
}

// op(T) of a triangular matrix stored in A (uplo), as a full host matrix.
static std::vector<double> triangular(const std::vector<double> &A, int n, int lda, cublasFillMode_t uplo,
                                      cublasOperation_t t, cublasDiagType_t diag) {
    std::vector<double> T(n * n, 0.0);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < n; i++) {
            bool in = uplo == CUBLAS_FILL_MODE_LOWER ? i >= j : i <= j;
            double v = !in ? 0.0 : (i == j && diag == CUBLAS_DIAG_UNIT) ? 1.0 : A[i + j * lda];
            if (t == CUBLAS_OP_N) T[i + j * n] = v;
            else T[j + i * n] = v;
        }
    return T;
}

// Column-major product of host matrices: (r x q) times (q x c).
static std::vector<double> matmul(const std::vector<double> &X, int ldx, const std::vector<double> &Y, int ldy, int r,
                                  int q, int c) {
    std::vector<double> Z(r * c, 0.0);
    for (int j = 0; j < c; j++)
        for (int i = 0; i < r; i++)
            for (int p = 0; p < q; p++) Z[i + j * r] += X[i + p * ldx] * Y[p + j * ldy];
    return Z;
}

static void level3(cublasHandle_t h) {
    const int m = 6, n = 4, ldb = 8;
    std::vector<double> B = random_vector<double>(ldb * n);
    for (cublasSideMode_t side : {CUBLAS_SIDE_LEFT, CUBLAS_SIDE_RIGHT})
        for (cublasFillMode_t uplo : {CUBLAS_FILL_MODE_LOWER, CUBLAS_FILL_MODE_UPPER})
            for (cublasOperation_t t : {CUBLAS_OP_N, CUBLAS_OP_T})
                for (cublasDiagType_t diag : {CUBLAS_DIAG_NON_UNIT, CUBLAS_DIAG_UNIT}) {
                    int ka = side == CUBLAS_SIDE_LEFT ? m : n, lda = ka + 1;
                    std::vector<double> A = random_vector<double>(lda * ka);
                    for (int i = 0; i < ka; i++) A[i + i * lda] += 4.0;     // well conditioned
                    std::vector<double> T = triangular(A, ka, lda, uplo, t, diag);
                    double *dA = to_device(A), *dB = to_device(B), *dC;
                    CHECK(cudaMalloc(&dC, sizeof(double) * m * n));
                    double alpha = 1.5;
                    // trmm (out of place): C = alpha op(A) B or alpha B op(A)
                    CUBLAS_CHECK(cublasDtrmm(h, side, uplo, t, diag, m, n, &alpha, dA, lda, dB, ldb, dC, m));
                    std::vector<double> want = side == CUBLAS_SIDE_LEFT ? matmul(T, ka, B, ldb, m, m, n)
                                                                        : matmul(B, ldb, T, ka, m, n, n);
                    std::vector<double> got = to_host(dC, m * n);
                    for (int i = 0; i < m * n; i++) NEAR(got[i], alpha * want[i], 1e-12);
                    // trsm: op(A) X = alpha B or X op(A) = alpha B, X over B
                    CUBLAS_CHECK(cublasDtrsm(h, side, uplo, t, diag, m, n, &alpha, dA, lda, dB, ldb));
                    std::vector<double> X = to_host(dB, B.size());
                    std::vector<double> back = side == CUBLAS_SIDE_LEFT ? matmul(T, ka, X, ldb, m, m, n)
                                                                        : matmul(X, ldb, T, ka, m, n, n);
                    for (int j = 0; j < n; j++)
                        for (int i = 0; i < m; i++) NEAR(back[i + j * m], alpha * B[i + j * ldb], 1e-10);
                    CHECK(cudaFree(dA));
                    CHECK(cudaFree(dB));
                    CHECK(cudaFree(dC));
                }
    // syrk: only the uplo triangle of C changes
    {
        const int k = 3, lda = n + 2;
        std::vector<float> A = random_vector<float>(lda * k), C = random_vector<float>(n * n);
        float *dA = to_device(A), *dC = to_device(C);
        float alpha = 1.0f, beta = 2.0f;
        CUBLAS_CHECK(cublasSsyrk(h, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, n, k, &alpha, dA, lda, &beta, dC, n));
        std::vector<float> got = to_host(dC, C.size());
        for (int j = 0; j < n; j++)
            for (int i = 0; i < n; i++) {
                double sum = 0;
                for (int p = 0; p < k; p++) sum += A[i + p * lda] * A[j + p * lda];
                NEAR(got[i + j * n], i >= j ? alpha * sum + beta * C[i + j * n] : C[i + j * n], 1e-5);
            }
        CHECK(cudaFree(dA));
        CHECK(cudaFree(dC));
    }
    // symm: C = alpha A B + beta C, A symmetric from its upper triangle
    {
        std::vector<double> A = random_vector<double>(m * m), C = random_vector<double>(m * n);
        std::vector<double> full(m * m);
        for (int j = 0; j < m; j++)
            for (int i = 0; i < m; i++) full[i + j * m] = i <= j ? A[i + j * m] : A[j + i * m];
        double *dA = to_device(A), *dB = to_device(B), *dC = to_device(C);
        double alpha = 0.5, beta = 1.0;
        CUBLAS_CHECK(cublasDsymm(h, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_UPPER, m, n, &alpha, dA, m, dB, ldb, &beta, dC,
                                 m));
        std::vector<double> want = matmul(full, m, B, ldb, m, m, n), got = to_host(dC, C.size());
        for (int i = 0; i < m * n; i++) NEAR(got[i], alpha * want[i] + beta * C[i], 1e-12);
        CHECK(cudaFree(dA));
        CHECK(cudaFree(dB));
        CHECK(cudaFree(dC));
    }
    // geam: C = alpha A^T + beta B; and a transpose alone (beta 0, B not read)
    {
        std::vector<float> A = random_vector<float>(n * m), Bf = random_vector<float>(m * n);
        float *dA = to_device(A), *dB = to_device(Bf), *dC;
        CHECK(cudaMalloc(&dC, sizeof(float) * m * n));
        float alpha = 2.0f, beta = -1.0f;
        CUBLAS_CHECK(cublasSgeam(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, &alpha, dA, n, &beta, dB, m, dC, m));
        std::vector<float> got = to_host(dC, m * n);
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) NEAR(got[i + j * m], alpha * A[j + i * n] + beta * Bf[i + j * m], 1e-6);
        alpha = 1.0f;
        beta = 0.0f;
        CUBLAS_CHECK(cublasSgeam(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, &alpha, dA, n, &beta, dB, m, dC, m));
        got = to_host(dC, m * n);
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) REQUIRE(got[i + j * m] == A[j + i * n]);
        // dgmm: C = A diag(x) (right) and diag(x) A (left)
        std::vector<float> x = random_vector<float>(m);
        float *dx = to_device(x);
        CUBLAS_CHECK(cublasSdgmm(h, CUBLAS_SIDE_RIGHT, m, n, dB, m, dx, 1, dC, m));
        got = to_host(dC, m * n);
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) NEAR(got[i + j * m], Bf[i + j * m] * x[j], 1e-6);
        CUBLAS_CHECK(cublasSdgmm(h, CUBLAS_SIDE_LEFT, m, n, dB, m, dx, 1, dC, m));
        got = to_host(dC, m * n);
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) NEAR(got[i + j * m], x[i] * Bf[i + j * m], 1e-6);
        CHECK(cudaFree(dA));
        CHECK(cudaFree(dB));
        CHECK(cudaFree(dC));
        CHECK(cudaFree(dx));
    }
}

static void setget(cublasHandle_t) {
    const int rows = 5, cols = 3, lda = 7, ldb = 6;
    std::vector<double> A = random_vector<double>(lda * cols), back(lda * cols, -1.0);
    double *dB;
    CHECK(cudaMalloc(&dB, sizeof(double) * ldb * cols));
    CUBLAS_CHECK(cublasSetMatrix(rows, cols, sizeof(double), A.data(), lda, dB, ldb));
    CUBLAS_CHECK(cublasGetMatrix(rows, cols, sizeof(double), dB, ldb, back.data(), lda));
    for (int j = 0; j < cols; j++)
        for (int i = 0; i < lda; i++) REQUIRE(back[i + j * lda] == (i < rows ? A[i + j * lda] : -1.0));
    // vectors with increments on both sides
    std::vector<float> x = random_vector<float>(12), y(8, 0.0f);
    float *dv;
    CHECK(cudaMalloc(&dv, sizeof(float) * 8));
    CHECK(cudaMemset(dv, 0, sizeof(float) * 8));
    CUBLAS_CHECK(cublasSetVector(4, sizeof(float), x.data(), 3, dv, 2));
    CUBLAS_CHECK(cublasGetVector(4, sizeof(float), dv, 2, y.data(), 2));
    for (int i = 0; i < 4; i++) REQUIRE(y[2 * i] == x[3 * i] && y[2 * i + 1] == 0.0f);
    // the Async forms, on a stream
    cudaStream_t stream;
    CHECK(cudaStreamCreate(&stream));
    float *pinned;
    CHECK(cudaMallocHost(&pinned, sizeof(float) * 16));
    for (int i = 0; i < 16; i++) pinned[i] = i * 0.5f;
    float *dm;
    CHECK(cudaMalloc(&dm, sizeof(float) * 16));
    CUBLAS_CHECK(cublasSetMatrixAsync(3, 4, sizeof(float), pinned, 4, dm, 4, stream));
    CUBLAS_CHECK(cublasSetVectorAsync(4, sizeof(float), pinned, 1, dv, 1, stream));
    float out[16], vout[4];
    for (float &v : out) v = -1.0f;
    CUBLAS_CHECK(cublasGetMatrixAsync(3, 4, sizeof(float), dm, 4, out, 4, stream));
    CUBLAS_CHECK(cublasGetVectorAsync(4, sizeof(float), dv, 1, vout, 1, stream));
    CHECK(cudaStreamSynchronize(stream));
    for (int j = 0; j < 4; j++)
        for (int i = 0; i < 4; i++) REQUIRE(out[i + 4 * j] == (i < 3 ? pinned[i + 4 * j] : -1.0f));
    for (int i = 0; i < 4; i++) REQUIRE(vout[i] == pinned[i]);
    CHECK(cudaFreeHost(pinned));
    CHECK(cudaStreamDestroy(stream));
    CHECK(cudaFree(dm));
    CHECK(cudaFree(dv));
    CHECK(cudaFree(dB));
}

static void invalid(cublasHandle_t h) {
    float *d;
    CHECK(cudaMalloc(&d, 64 * sizeof(float)));
    float one = 1.0f, zero = 0.0f, result;
    CUBLAS_EXPECT(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, d, 3, d, 4, &zero, d, 4),
                  CUBLAS_STATUS_INVALID_VALUE);                                      // lda < m
    CUBLAS_EXPECT(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, -1, 4, 4, &one, d, 4, d, 4, &zero, d, 4),
                  CUBLAS_STATUS_INVALID_VALUE);                                      // m < 0
    CUBLAS_EXPECT(cublasSgemm(h, (cublasOperation_t)7, CUBLAS_OP_N, 4, 4, 4, &one, d, 4, d, 4, &zero, d, 4),
                  CUBLAS_STATUS_INVALID_VALUE);                                      // not an operation
    CUBLAS_EXPECT(cublasSgemv(h, CUBLAS_OP_N, 4, 4, &one, d, 4, d, 0, &zero, d, 1),
                  CUBLAS_STATUS_INVALID_VALUE);                                      // incx == 0
    CUBLAS_EXPECT(cublasStrsm(h, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, CUBLAS_DIAG_NON_UNIT, 4, 4,
                              &one, d, 2, d, 4),
                  CUBLAS_STATUS_INVALID_VALUE);                                      // lda < m
    CUBLAS_EXPECT(cublasSsyrk(h, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_N, 4, -2, &one, d, 4, &zero, d, 4),
                  CUBLAS_STATUS_INVALID_VALUE);                                      // k < 0
    CUBLAS_EXPECT(cublasSetMatrix(4, 4, sizeof(float), d, 2, d, 4), CUBLAS_STATUS_INVALID_VALUE);  // lda < rows
    CUBLAS_EXPECT(cublasSetVector(4, sizeof(float), &one, 0, d, 1), CUBLAS_STATUS_INVALID_VALUE);  // incx == 0
    // sizes of zero are a quick return, not an error; the result of an empty dot is 0
    CUBLAS_CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 0, 4, 4, &one, d, 1, d, 4, &zero, d, 1));
    result = 5.0f;
    CUBLAS_CHECK(cublasSdot(h, 0, d, 1, d, 1, &result));
    REQUIRE(result == 0.0f);
    // the handle is still good after all that
    CUBLAS_CHECK(cublasSscal(h, 4, &one, d, 1));
    CHECK(cudaFree(d));
}

int main(int argc, char **argv) {
    where_from("cublas", (void *)&cublasCreate_v2);
    seed_values(777);
    const Section<cublasHandle_t> sections[] = {{"handle", handle}, {"level1", level1},
                                                {"device_results", device_results}, {"level2", level2},
                                                {"level3", level3}, {"setget", setget}, {"invalid", invalid}};
    cublasHandle_t h;
    CUBLAS_CHECK(cublasCreate(&h));
    run_sections(argc, argv, sections, h);
    CUBLAS_CHECK(cublasDestroy(h));
    printf("PASSED cublas_levels\n");
    return 0;
}
