// NVIDIA's conjugateGradientMultiBlockCG, as a CUDA user writes it: a
// symmetric tridiagonal system in managed memory (CSR), solved by one
// cooperative kernel whose blocks meet at grid-wide barriers; the host
// fills the matrix and checks the residual through the same pointers.
//
//   conjugate_gradient [N]      (default 1048576 rows)
//
// Prints "ok conjugate_gradient" with the residual; a failure prints "FAILED line N".
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cooperative_groups.h>
#include "check.h"

namespace cg = cooperative_groups;

#define THREADS_PER_BLOCK 512
#define TOLERANCE 1e-12f
#define MAX_ITERATIONS 10000

// A random symmetric, diagonally dominant tridiagonal matrix, as the sample makes it.
static void genTridiag(int *I, int *J, float *val, int N, int nz)
{
    I[0] = 0, J[0] = 0, J[1] = 1;
    val[0] = (float)rand() / RAND_MAX + 10.0f;
    val[1] = (float)rand() / RAND_MAX;
    for (int i = 1; i < N; i++) {
        int start = i > 1 ? (i - 1) * 3 + 2 : 2;
        I[i] = start;
        J[start] = i - 1, J[start + 1] = i;
        if (i < N - 1) J[start + 2] = i + 1;
        val[start] = val[start - 1];
        val[start + 1] = (float)rand() / RAND_MAX + 10.0f;
        if (i < N - 1) val[start + 2] = (float)rand() / RAND_MAX;
    }
    I[N] = nz;
}

__device__ void spmv(const int *I, const int *J, const float *val, int N, float alpha, const float *in, float *out,
                     const cg::grid_group &grid)
{
    for (int i = grid.thread_rank(); i < N; i += grid.size()) {
        float sum = 0.0f;
        for (int k = I[i]; k < I[i + 1]; k++) sum += val[k] * in[J[k]];
        out[i] = alpha * sum;
    }
}

__device__ void dot(const float *a, const float *b, double *result, int N, const cg::grid_group &grid)
{
    for (int i = grid.thread_rank(); i < N; i += grid.size()) atomicAdd(result, (double)(a[i] * b[i]));
}

__global__ void gpuConjugateGradient(int *I, int *J, float *val, float *x, float *Ax, float *p, float *r,
                                     double *dot_result, int nnz, int N, float tol)
{
    cg::grid_group grid = cg::this_grid();
    float alpha = 1.0f, r0 = 0.0f, r1, b, a, na;
    spmv(I, J, val, N, alpha, x, Ax, grid);
    for (int i = grid.thread_rank(); i < N; i += grid.size()) r[i] -= Ax[i];
    if (grid.thread_rank() == 0) *dot_result = 0.0;
    grid.sync();
    dot(r, r, dot_result, N, grid);
    grid.sync();
    r1 = (float)*dot_result;
    for (int k = 1; r1 > tol * tol && k <= MAX_ITERATIONS; k++) {
        if (k > 1) {
            b = r1 / r0;
            for (int i = grid.thread_rank(); i < N; i += grid.size()) p[i] = r[i] + b * p[i];
        } else {
            for (int i = grid.thread_rank(); i < N; i += grid.size()) p[i] = r[i];
        }
        grid.sync();
        spmv(I, J, val, N, alpha, p, Ax, grid);
        if (grid.thread_rank() == 0) *dot_result = 0.0;
        grid.sync();
        dot(p, Ax, dot_result, N, grid);
        grid.sync();
        a = r1 / (float)*dot_result;
        for (int i = grid.thread_rank(); i < N; i += grid.size()) x[i] += a * p[i];
        na = -a;
        for (int i = grid.thread_rank(); i < N; i += grid.size()) r[i] += na * Ax[i];
        r0 = r1;
        grid.sync();
        if (grid.thread_rank() == 0) *dot_result = 0.0;
        grid.sync();
        dot(r, r, dot_result, N, grid);
        grid.sync();
        r1 = (float)*dot_result;
    }
}

int main(int argc, char **argv)
{
    int N = argc > 1 ? atoi(argv[1]) : 1048576, nz = (N - 2) * 3 + 4;
    int device = 0, managed = 0, cooperative = 0;
    CHECK(cudaDeviceGetAttribute(&managed, cudaDevAttrManagedMemory, device));
    CHECK(cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, device));
    REQUIRE(managed == 1 && cooperative == 1);  // the sample waives itself otherwise
    int *I, *J;
    float *val, *x, *rhs, *r, *p, *Ax;
    double *dot_result;
    CHECK(cudaMallocManaged(&I, sizeof(int) * (N + 1)));
    CHECK(cudaMallocManaged(&J, sizeof(int) * nz));
    CHECK(cudaMallocManaged(&val, sizeof(float) * nz));
    CHECK(cudaMallocManaged(&x, sizeof(float) * N));
    CHECK(cudaMallocManaged(&rhs, sizeof(float) * N));
    CHECK(cudaMallocManaged(&r, sizeof(float) * N));
    CHECK(cudaMallocManaged(&p, sizeof(float) * N));
    CHECK(cudaMallocManaged(&Ax, sizeof(float) * N));
    CHECK(cudaMallocManaged(&dot_result, sizeof(double)));
    srand(1);
    genTridiag(I, J, val, N, nz);
    for (int i = 0; i < N; i++) { rhs[i] = 1.0f; x[i] = 0.0f; r[i] = rhs[i]; }
    *dot_result = 0.0;

    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, device));
    int blocks_per_sm = 0;
    size_t shared = sizeof(double) * ((THREADS_PER_BLOCK / 32) + 1);
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, gpuConjugateGradient, THREADS_PER_BLOCK,
                                                        shared));
    REQUIRE(blocks_per_sm > 0);
    dim3 grid(prop.multiProcessorCount * blocks_per_sm, 1, 1), block(THREADS_PER_BLOCK, 1, 1);
    float tol = TOLERANCE;
    void *args[] = {&I, &J, &val, &x, &Ax, &p, &r, &dot_result, &nz, &N, &tol};
    CHECK(cudaLaunchCooperativeKernel((void *)gpuConjugateGradient, grid, block, args, shared, 0));
    CHECK(cudaDeviceSynchronize());

    double err = 0.0;
    for (int i = 0; i < N; i++) {
        double rsum = 0.0;
        for (int k = I[i]; k < I[i + 1]; k++) rsum += val[k] * x[J[k]];
        err = fmax(err, fabs(rsum - rhs[i]));
    }
    printf("residual %g after the kernel (dot %g)\n", err, *dot_result);
    REQUIRE(err < 1e-3);
    // One block more than can be resident at once: CUDA refuses the launch.
    dim3 too_many(grid.x + 1, 1, 1);
    EXPECT_AND_CLEAR(cudaLaunchCooperativeKernel((void *)gpuConjugateGradient, too_many, block, args, shared, 0),
                     cudaErrorCooperativeLaunchTooLarge);
    for (void *m : {(void *)I, (void *)J, (void *)val, (void *)x, (void *)rhs, (void *)r, (void *)p, (void *)Ax,
                    (void *)dot_result})
        CHECK(cudaFree(m));
    printf("ok conjugate_gradient\n");
    return 0;
}
