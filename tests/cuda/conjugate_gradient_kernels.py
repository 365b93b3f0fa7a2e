"""Sim implementation of tests/cuda/conjugate_gradient.cu's cooperative
kernel: the whole conjugate-gradient solve at once (a kernel that needs
grid-wide barriers is computed whole by its plugin), with the CSR matrix
and vectors read from and written to the program's managed memory."""
import numpy as np

MAX_ITERATIONS = 10000


def conjugate_gradient(launch):
    """gpuConjugateGradient(int *I, int *J, float *val, float *x, float *Ax,
    float *p, float *r, double *dot_result, int nnz, int N, float tol)."""
    ptr = [launch.param(i, "Q") for i in range(8)]
    nnz, n, tol = launch.param(8, "i"), launch.param(9, "i"), launch.param(10, "f")
    rows, cols = launch.array(ptr[0], np.int32, n + 1), launch.array(ptr[1], np.int32, nnz)
    val = launch.array(ptr[2], np.float32, nnz)
    x, ax, p, r = (launch.array(q, np.float32, n) for q in ptr[3:7])
    dot_result = launch.array(ptr[7], np.float64, 1)
    row_of = np.repeat(np.arange(n), np.diff(rows))

    def spmv(v):
        return np.bincount(row_of, weights=val.astype(np.float64) * v[cols], minlength=n).astype(np.float32)

    ax[:] = spmv(x)
    r -= ax
    r1 = np.float32(np.dot(r.astype(np.float64), r))
    r0 = np.float32(0)
    for k in range(1, MAX_ITERATIONS + 1):
        if r1 <= tol * tol:
            break
        p[:] = r + (r1 / r0) * p if k > 1 else r
        ax[:] = spmv(p)
        a = r1 / np.float32(np.dot(p.astype(np.float64), ax))
        x += a * p
        r -= a * ax
        r0, r1 = r1, np.float32(np.dot(r.astype(np.float64), r))
    dot_result[0] = r1


KERNELS = {"gpuConjugateGradient": conjugate_gradient}
