"""The sim's cuBLAS (server/backends/sim_cublas.py) against numpy, on a fake
device memory: column-major views with leading dimensions larger than the
rows, every transpose, negative increments, the batched calls and the
LAPACK-like LU, and cuBLAS's validation."""
from __future__ import annotations

import numpy as np
import pytest

from rcuda.library_errors import LibraryError
from rcuda.server.backends.sim_cublas import CALLS, BlasHandle
from rcuda.server.backends.sim_libraries import LibraryMemory

BASE = 0x7000_0000
TYPES = {"S": np.float32, "D": np.float64, "C": np.complex64, "Z": np.complex128}


TOL = {np.float32: 2e-4, np.float64: 1e-11, np.complex64: 2e-4, np.complex128: 1e-11}


class Device:
    """A bump allocator over one byte buffer, addressed from BASE."""

    def __init__(self, size: int = 1 << 22):
        self.buf = np.zeros(size, np.uint8)
        self.top = 256
        self.mem = LibraryMemory(lambda ptr, size, what: self.buf[ptr - BASE:ptr - BASE + size])
        self.handle = BlasHandle()

    def put(self, array) -> int:
        raw = np.ascontiguousarray(array).view(np.uint8).ravel()
        ptr = BASE + self.top
        self.buf[self.top:self.top + raw.size] = raw
        self.top += (raw.size + 255) // 256 * 256
        return ptr

    def put_matrix(self, a: np.ndarray, ld: int) -> int:
        """a stored column-major with leading dimension ld (padding NaN: never read)."""
        rows, cols = a.shape
        store = np.full((cols, ld), np.nan, a.dtype)
        store[:, :rows] = a.T
        return self.put(store)

    def matrix(self, ptr, dtype, rows, cols, ld):
        return np.array(self.mem.matrix(ptr, dtype, rows, cols, ld))

    def array(self, ptr, dtype, n):
        return np.array(self.mem.array(ptr, dtype, n))

    def call(self, name, *args):
        return CALLS[name](self.mem, self.handle, *args)


def rand(dtype, *shape, seed=0):
    rng = np.random.default_rng(seed + sum(shape))
    a = rng.standard_normal(shape)
    if np.issubdtype(dtype, np.complexfloating):
        a = a + 1j * rng.standard_normal(shape)
    return a.astype(dtype)


def op(a, t):
    return a if t == 0 else a.T if t == 1 else a.conj().T


def close(got, want, dtype):
    np.testing.assert_allclose(got, want, rtol=TOL[dtype], atol=TOL[dtype] * 10)


@pytest.mark.parametrize("p", TYPES)
@pytest.mark.parametrize("ta", [0, 1, 2])
@pytest.mark.parametrize("tb", [0, 1, 2])
def test_gemm_types_and_transposes(p, ta, tb):
    dtype, dev = TYPES[p], Device()
    m, n, k = 5, 4, 3
    a = rand(dtype, *((m, k) if ta == 0 else (k, m)), seed=1)
    b = rand(dtype, *((k, n) if tb == 0 else (n, k)), seed=2)
    c = rand(dtype, m, n, seed=3)
    lda, ldb, ldc = a.shape[0] + 2, b.shape[0] + 1, m + 3
    pa, pb, pc = dev.put_matrix(a, lda), dev.put_matrix(b, ldb), dev.put_matrix(c, ldc)
    alpha, beta = (1.5 - 0.5j, 0.25 + 1j) if p in "CZ" else (1.5, 0.25)
    dev.call(f"cublas{p}gemm_v2", ta, tb, m, n, k, alpha, pa, lda, pb, ldb, beta, pc, ldc)
    close(dev.matrix(pc, dtype, m, n, ldc), alpha * op(a, ta) @ op(b, tb) + beta * c, dtype)
    # the padding rows past m are untouched
    assert np.isnan(dev.mem.array(pc + m * np.dtype(dtype).itemsize, dtype, 1)[0])


def test_gemm_beta_zero_does_not_read_c():
    dev = Device()
    a, b = rand(np.float32, 3, 2), rand(np.float32, 2, 4)
    pc = dev.put(np.full((4, 3), np.nan, np.float32))
    dev.call("cublasSgemm_v2", 0, 0, 3, 4, 2, 2.0, dev.put_matrix(a, 3), 3, dev.put_matrix(b, 2), 2, 0.0, pc, 3)
    close(dev.matrix(pc, np.float32, 3, 4, 3), 2 * a @ b, np.float32)


def test_gemm_alpha_zero_scales_c_only():
    dev = Device()
    c = rand(np.float64, 3, 3)
    pa = dev.put(np.full(9, np.nan))
    pc = dev.put_matrix(c, 3)
    dev.call("cublasDgemm_v2_64", 0, 0, 3, 3, 3, 0.0, pa, 3, pa, 3, 2.0, pc, 3)
    close(dev.matrix(pc, np.float64, 3, 3, 3), 2 * c, np.float64)


@pytest.mark.parametrize("args", [
    (3, 0, 2, 2, 2, 1.0, 0, 2, 0, 2, 0.0, 0, 2),     # bad transa
    (0, 0, -1, 2, 2, 1.0, 0, 2, 0, 2, 0.0, 0, 2),    # m < 0
    (0, 0, 4, 2, 2, 1.0, 0, 3, 0, 2, 0.0, 0, 4),     # lda < m
    (0, 1, 4, 2, 3, 1.0, 0, 4, 0, 1, 0.0, 0, 4),     # ldb < n for op(B) = B^T
    (0, 0, 4, 2, 2, 1.0, 0, 4, 0, 2, 0.0, 0, 3),     # ldc < m
])
def test_gemm_invalid_values(args):
    with pytest.raises(LibraryError) as info:
        Device().call("cublasSgemm_v2", *args)
    assert info.value.library_status == "CUBLAS_STATUS_INVALID_VALUE"


def test_gemm_zero_size_is_a_quick_return():
    Device().call("cublasSgemm_v2", 0, 0, 0, 4, 2, 1.0, 0, 1, 0, 2, 0.0, 0, 1)


@pytest.mark.parametrize("atype,ctype", [(0, 0), (2, 2), (2, 0)])
def test_gemm_ex_real(atype, ctype):
    np_a = {0: np.float32, 2: np.float16}[atype]
    np_c = {0: np.float32, 2: np.float16}[ctype]
    dev = Device()
    a, b = rand(np_a, 6, 4, seed=5), rand(np_a, 4, 3, seed=6)
    c = rand(np_c, 6, 3, seed=7)
    pc = dev.put_matrix(c, 8)
    dev.call("cublasGemmEx", 0, 0, 6, 3, 4, 1.0, dev.put_matrix(a, 6), atype, 6, dev.put_matrix(b, 5), atype, 5,
             1.0, pc, ctype, 8, 68, -1)
    want = a.astype(np.float32) @ b.astype(np.float32) + c.astype(np.float32)
    np.testing.assert_allclose(dev.matrix(pc, np_c, 6, 3, 8).astype(np.float32), want, rtol=1e-2, atol=1e-2)


def test_gemm_ex_unsupported_combination():
    dev = Device()
    with pytest.raises(LibraryError) as info:
        dev.call("cublasGemmEx", 0, 0, 2, 2, 2, 1.0, dev.put(np.zeros(4)), 1, 2, dev.put(np.zeros(4)), 1, 2,
                 0.0, dev.put(np.zeros(4, np.float32)), 0, 2, 70, -1)
    assert info.value.library_status == "CUBLAS_STATUS_NOT_SUPPORTED"


def test_gemm_batched_pointer_arrays_and_strided():
    dev, batch, m, n, k = Device(), 3, 4, 2, 3
    a = [rand(np.float64, m, k, seed=10 + i) for i in range(batch)]
    b = [rand(np.float64, k, n, seed=20 + i) for i in range(batch)]
    pa = [dev.put_matrix(x, m) for x in a]
    pb = [dev.put_matrix(x, k) for x in b]
    pc = [dev.put(np.zeros(m * n)) for _ in range(batch)]
    dev.call("cublasDgemmBatched", 0, 0, m, n, k, 1.0, dev.put(np.array(pa, np.uint64)), m,
             dev.put(np.array(pb, np.uint64)), k, 0.0, dev.put(np.array(pc, np.uint64)), m, batch)
    for i in range(batch):
        close(dev.matrix(pc[i], np.float64, m, n, m), a[i] @ b[i], np.float64)
    # strided: the same matrices laid end to end, C with a stride larger than one matrix
    sa, sb, sc = m * k, k * n, m * n + 5
    pa = dev.put(np.concatenate([x.T.ravel() for x in a]))
    pb = dev.put(np.concatenate([x.T.ravel() for x in b]))
    pc = dev.put(np.zeros(sc * batch))
    dev.call("cublasDgemmStridedBatched", 0, 0, m, n, k, 2.0, pa, m, sa, pb, k, sb, 0.0, pc, m, sc, batch)
    for i in range(batch):
        close(dev.matrix(pc + i * sc * 8, np.float64, m, n, m), 2 * a[i] @ b[i], np.float64)


@pytest.mark.parametrize("p", TYPES)
@pytest.mark.parametrize("trans", [0, 1, 2])
def test_gemv(p, trans):
    dtype, dev = TYPES[p], Device()
    m, n, lda = 5, 3, 7
    a = rand(dtype, m, n)
    lx, ly = (n, m) if trans == 0 else (m, n)
    x, y = rand(dtype, lx, seed=1), rand(dtype, ly, seed=2)
    py = dev.put(y)
    px_strided = dev.put(np.stack([x, np.full(lx, np.nan, dtype)], 1).ravel())   # incx = 2, NaN between
    dev.call(f"cublas{p}gemv_v2", trans, m, n, 2.0, dev.put_matrix(a, lda), lda, px_strided, 2, -1.0, py, 1)
    close(dev.array(py, dtype, ly), 2 * op(a, trans) @ x - y, dtype)


def test_gemv_negative_increment():
    dev = Device()
    a, x = rand(np.float32, 3, 3), rand(np.float32, 3)
    py = dev.put(np.zeros(3, np.float32))
    dev.call("cublasSgemv_v2", 0, 3, 3, 1.0, dev.put_matrix(a, 3), 3, dev.put(x), -1, 0.0, py, 1)
    close(dev.array(py, np.float32, 3), a @ x[::-1], np.float32)


def test_gemv_zero_increment_is_invalid():
    with pytest.raises(LibraryError):
        Device().call("cublasSgemv_v2", 0, 2, 2, 1.0, 0, 2, 0, 0, 0.0, 0, 1)


def test_ger_geru_gerc():
    dev = Device()
    x, y, a = rand(np.complex64, 4), rand(np.complex64, 3, seed=1), rand(np.complex64, 4, 3, seed=2)
    for name, want in (("cublasCgeru_v2", a + 2 * np.outer(x, y)), ("cublasCgerc_v2", a + 2 * np.outer(x, y.conj()))):
        pa = dev.put_matrix(a, 5)
        dev.call(name, 4, 3, 2.0, dev.put(x), 1, dev.put(y), 1, pa, 5)
        close(dev.matrix(pa, np.complex64, 4, 3, 5), want, np.complex64)


@pytest.mark.parametrize("p", TYPES)
def test_level1(p):
    dtype, dev = TYPES[p], Device()
    x, y = rand(dtype, 6), rand(dtype, 6, seed=9)
    complex_ = p in "CZ"
    alpha = 0.5 + 2j if complex_ else 0.5
    # axpy with incx = 2 and incy = -1
    px, py = dev.put(np.stack([x, x]).T.ravel()), dev.put(y)
    dev.call(f"cublas{p}axpy_v2", 6, alpha, px, 2, py, -1)
    close(dev.array(py, dtype, 6), y + (alpha * x)[::-1], dtype)
    # dot / dotu / dotc
    px, py = dev.put(x), dev.put(y)
    if complex_:
        close(dev.call(f"cublas{p}dotu_v2", 6, px, 1, py, 1), np.dot(x, y), dtype)
        close(dev.call(f"cublas{p}dotc_v2", 6, px, 1, py, 1), np.vdot(x, y), dtype)
    else:
        close(dev.call(f"cublas{p}dot_v2", 6, px, 1, py, 1), np.dot(x, y), dtype)
    pre = {"S": "S", "D": "D", "C": "Sc", "Z": "Dz"}[p]
    close(dev.call(f"cublas{pre}nrm2_v2", 6, px, 1), np.linalg.norm(x), dtype)
    close(dev.call(f"cublas{pre}asum_v2", 6, px, 1), np.sum(np.abs(x.real) + np.abs(x.imag)), dtype)
    mags = np.abs(x.real) + np.abs(x.imag)
    assert dev.call(f"cublasI{p.lower()}amax_v2", 6, px, 1) == np.argmax(mags) + 1
    assert dev.call(f"cublasI{p.lower()}amin_v2", 6, px, 1) == np.argmin(mags) + 1
    assert dev.call(f"cublasI{p.lower()}amax_v2", 0, px, 1) == 0
    # scal, copy, swap
    dev.call(f"cublas{p}scal_v2", 3, alpha, px, 2)
    want = x.copy()
    want[::2] *= dtype(alpha)
    close(dev.array(px, dtype, 6), want, dtype)
    pz = dev.put(np.zeros(6, dtype))
    dev.call(f"cublas{p}copy_v2", 6, px, 1, pz, -1)
    close(dev.array(pz, dtype, 6), want[::-1], dtype)
    dev.call(f"cublas{p}swap_v2", 6, px, 1, py, 1)
    close(dev.array(px, dtype, 6), y, dtype)
    close(dev.array(py, dtype, 6), want, dtype)


def test_amax_ties_take_the_first_and_results_are_python_numbers():
    dev = Device()
    px = dev.put(np.array([1, -3, 3, 2], np.float32))
    assert dev.call("cublasIsamax_v2", 4, px, 1) == 2
    assert type(dev.call("cublasSnrm2_v2", 4, px, 1)) is float
    assert type(dev.call("cublasCdotc_v2", 2, px, 1, px, 1)) is complex


def test_nrm2_does_not_overflow():
    dev = Device()
    assert dev.call("cublasSnrm2_v2", 2, dev.put(np.array([3e30, 4e30], np.float32)), 1) == pytest.approx(5e30, 1e-6)


def test_rot_and_real_scal_of_complex():
    dev = Device()
    x, y = rand(np.float64, 4), rand(np.float64, 4, seed=3)
    px, py = dev.put(x), dev.put(y)
    c, s = 0.6, 0.8
    dev.call("cublasDrot_v2", 4, px, 1, py, 1, c, s)
    close(dev.array(px, np.float64, 4), c * x + s * y, np.float64)
    close(dev.array(py, np.float64, 4), c * y - s * x, np.float64)
    z = rand(np.complex64, 3)
    pz = dev.put(z)
    dev.call("cublasCsscal_v2", 3, 2.0, pz, 1)
    close(dev.array(pz, np.complex64, 3), 2 * z, np.complex64)


@pytest.mark.parametrize("uplo", [0, 1])
@pytest.mark.parametrize("trans", [0, 1, 2])
@pytest.mark.parametrize("diag", [0, 1])
def test_trmv_trsv(uplo, trans, diag):
    dev, n = Device(), 4
    a = rand(np.complex128, n, n) + 4 * np.eye(n)
    t = np.tril(a) if uplo == 0 else np.triu(a)
    if diag:
        np.fill_diagonal(t, 1)
    x = rand(np.complex128, n, seed=4)
    pa, px = dev.put_matrix(a, 6), dev.put(x)
    dev.call("cublasZtrmv_v2", uplo, trans, diag, n, pa, 6, px, 1)
    close(dev.array(px, np.complex128, n), op(t, trans) @ x, np.complex128)
    dev.call("cublasZtrsv_v2", uplo, trans, diag, n, pa, 6, px, 1)
    close(dev.array(px, np.complex128, n), x, np.complex128)


@pytest.mark.parametrize("uplo", [0, 1])
def test_symv_hemv(uplo):
    dev, n = Device(), 4
    a = rand(np.complex64, n, n)
    full = np.tril(a) + np.tril(a, -1).conj().T if uplo == 0 else np.triu(a) + np.triu(a, 1).conj().T
    np.fill_diagonal(full, np.diag(a).real)
    x, y = rand(np.complex64, n, seed=1), rand(np.complex64, n, seed=2)
    py = dev.put(y)
    dev.call("cublasChemv_v2", uplo, n, 1.0, dev.put_matrix(a, n), n, dev.put(x), 1, 1.0, py, 1)
    close(dev.array(py, np.complex64, n), full @ x + y, np.complex64)


@pytest.mark.parametrize("side", [0, 1])
@pytest.mark.parametrize("uplo", [0, 1])
@pytest.mark.parametrize("trans", [0, 1, 2])
def test_trsm_trmm(side, uplo, trans):
    dev, m, n = Device(), 4, 3
    ka = m if side == 0 else n
    a = rand(np.float64, ka, ka) + 5 * np.eye(ka)
    t = op(np.tril(a) if uplo == 0 else np.triu(a), trans)
    b = rand(np.float64, m, n, seed=2)
    pa, pb, pc = dev.put_matrix(a, ka + 1), dev.put_matrix(b, m + 2), dev.put(np.zeros(m * n))
    dev.call("cublasDtrmm_v2", side, uplo, trans, 0, m, n, 2.0, pa, ka + 1, pb, m + 2, pc, m)
    close(dev.matrix(pc, np.float64, m, n, m), 2 * (t @ b if side == 0 else b @ t), np.float64)
    dev.call("cublasDtrsm_v2", side, uplo, trans, 0, m, n, 2.0, pa, ka + 1, pb, m + 2)
    x = dev.matrix(pb, np.float64, m, n, m + 2)
    close(t @ x if side == 0 else x @ t, 2 * b, np.float64)


@pytest.mark.parametrize("uplo", [0, 1])
@pytest.mark.parametrize("trans", [0, 1])
def test_syrk_writes_only_its_triangle(uplo, trans):
    dev, n, k = Device(), 4, 3
    a = rand(np.float32, *((n, k) if trans == 0 else (k, n)))
    c = rand(np.float32, n, n, seed=5)
    pc = dev.put_matrix(c, n)
    dev.call("cublasSsyrk_v2", uplo, trans, n, k, 1.0, dev.put_matrix(a, a.shape[0]), a.shape[0], 0.5, pc, n)
    full = op(a, trans) @ op(a, trans).T + 0.5 * c
    mask = np.tri(n, dtype=bool) if uplo == 0 else np.tri(n, dtype=bool).T
    close(dev.matrix(pc, np.float32, n, n, n), np.where(mask, full, c), np.float32)


def test_herk_real_diagonal():
    dev, n, k = Device(), 3, 2
    a = rand(np.complex128, n, k)
    pc = dev.put(np.zeros(n * n, np.complex128))
    dev.call("cublasZherk_v2", 0, 0, n, k, 1.0, dev.put_matrix(a, n), n, 0.0, pc, n)
    got = dev.matrix(pc, np.complex128, n, n, n)
    close(np.tril(got), np.tril(a @ a.conj().T), np.complex128)
    assert np.all(np.diag(got).imag == 0)


@pytest.mark.parametrize("side", [0, 1])
def test_symm(side):
    dev, m, n = Device(), 3, 4
    ka = m if side == 0 else n
    a, b, c = rand(np.float64, ka, ka), rand(np.float64, m, n, seed=1), rand(np.float64, m, n, seed=2)
    full = np.triu(a) + np.triu(a, 1).T
    pc = dev.put_matrix(c, m)
    dev.call("cublasDsymm_v2", side, 1, m, n, 1.0, dev.put_matrix(a, ka), ka, dev.put_matrix(b, m), m, 1.0, pc, m)
    close(dev.matrix(pc, np.float64, m, n, m), (full @ b if side == 0 else b @ full) + c, np.float64)


def test_geam_transpose_and_dgmm():
    dev, m, n = Device(), 3, 5
    a, b = rand(np.float32, n, m), rand(np.float32, m, n, seed=1)
    pc = dev.put(np.zeros(m * n, np.float32))
    dev.call("cublasSgeam", 1, 0, m, n, 1.0, dev.put_matrix(a, n), n, -2.0, dev.put_matrix(b, m), m, pc, m)
    close(dev.matrix(pc, np.float32, m, n, m), a.T - 2 * b, np.float32)
    # beta == 0: B is not read (here a NULL pointer)
    dev.call("cublasSgeam", 1, 0, m, n, 1.0, dev.put_matrix(a, n), n, 0.0, 0, m, pc, m)
    close(dev.matrix(pc, np.float32, m, n, m), a.T, np.float32)
    x = rand(np.float32, n, seed=3)
    pd = dev.put(np.zeros(m * n, np.float32))
    dev.call("cublasSdgmm", 1, m, n, dev.put_matrix(b, m), m, dev.put(x), 1, pd, m)
    close(dev.matrix(pd, np.float32, m, n, m), b * x, np.float32)
    x = rand(np.float32, m, seed=4)
    dev.call("cublasSdgmm", 0, m, n, dev.put_matrix(b, m), m, dev.put(x), -1, pd, m)
    close(dev.matrix(pd, np.float32, m, n, m), x[::-1, None] * b, np.float32)


def pointer_array(dev, mats, ld):
    ptrs = [dev.put_matrix(x, ld) for x in mats]
    return ptrs, dev.put(np.array(ptrs, np.uint64))


@pytest.mark.parametrize("p", TYPES)
@pytest.mark.parametrize("pivoting", [True, False])
def test_getrf_getrs_getri(p, pivoting):
    dtype, dev, n, batch, lda = TYPES[p], Device(), 5, 3, 6
    mats = [rand(dtype, n, n, seed=30 + i) + n * np.eye(n, dtype=dtype) for i in range(batch)]
    ptrs, parray = pointer_array(dev, mats, lda)
    pivots = dev.put(np.zeros(n * batch, np.int32)) if pivoting else 0
    info = dev.put(np.full(batch, -7, np.int32))
    dev.call(f"cublas{p}getrfBatched", n, parray, lda, pivots, info, batch)
    assert list(dev.array(info, np.int32, batch)) == [0] * batch
    if pivoting:
        ipiv = dev.array(pivots, np.int32, n * batch)
        assert ipiv.min() >= 1 and ipiv.max() <= n
    rhs = [rand(dtype, n, 2, seed=40 + i) for i in range(batch)]
    for trans in (0, 1, 2):
        bptrs, barray = pointer_array(dev, rhs, n + 1)
        assert dev.call(f"cublas{p}getrsBatched", trans, n, 2, parray, lda, pivots, barray, n + 1, batch) == 0
        for i in range(batch):
            close(op(mats[i], trans) @ dev.matrix(bptrs[i], dtype, n, 2, n + 1), rhs[i], dtype)
    cptrs, carray = pointer_array(dev, [np.zeros((n, n), dtype)] * batch, n)
    dev.call(f"cublas{p}getriBatched", n, parray, lda, pivots, carray, n, info, batch)
    assert list(dev.array(info, np.int32, batch)) == [0] * batch
    for i in range(batch):
        close(dev.matrix(cptrs[i], dtype, n, n, n) @ mats[i], np.eye(n), dtype)


def test_getrf_singular_info():
    dev, n = Device(), 3
    singular = np.array([[1, 2, 3], [2, 4, 6], [1, 1, 1]], np.float64)
    _, parray = pointer_array(dev, [singular, np.eye(n)], n)
    info = dev.put(np.zeros(2, np.int32))
    dev.call("cublasDgetrfBatched", n, parray, n, dev.put(np.zeros(2 * n, np.int32)), info, 2)
    got = dev.array(info, np.int32, 2)
    assert got[0] > 0 and got[1] == 0


def test_getrs_names_its_bad_parameter():
    dev, n = Device(), 3
    _, parray = pointer_array(dev, [np.eye(n)], n)
    with pytest.raises(LibraryError) as error:
        dev.call("cublasDgetrsBatched", 0, n, 1, parray, n, 0, parray, 2, 1)
    assert error.value.library_status == "CUBLAS_STATUS_INVALID_VALUE" and error.value.outputs == (-9,)


def test_matinv_batched():
    dev, n = Device(), 4
    mats = [rand(np.complex64, n, n, seed=i) + 3 * np.eye(n, dtype=np.complex64) for i in range(2)]
    _, parray = pointer_array(dev, mats, n)
    optrs, oarray = pointer_array(dev, [np.zeros((n, n), np.complex64)] * 2, n + 1)
    info = dev.put(np.full(2, 9, np.int32))
    dev.call("cublasCmatinvBatched", n, parray, n, oarray, n + 1, info, 2)
    assert list(dev.array(info, np.int32, 2)) == [0, 0]
    for i in range(2):
        close(dev.matrix(optrs[i], np.complex64, n, n, n + 1), np.linalg.inv(mats[i]), np.complex64)


def test_matinv_batched_takes_at_most_32():
    with pytest.raises(LibraryError):
        Device().call("cublasCmatinvBatched", 33, 0, 33, 0, 33, 0, 1)


def test_handle_modes():
    dev = Device()
    dev.call("cublasSetMathMode", 3 | 16)
    assert dev.call("cublasGetMathMode") == 19
    dev.call("cublasSetAtomicsMode", 1)
    assert dev.call("cublasGetAtomicsMode") == 1
    dev.call("cublasSetWorkspace_v2", BASE, 1024)
    assert dev.handle.workspace == (BASE, 1024)


def test_bad_modes():
    with pytest.raises(LibraryError):
        Device().call("cublasSetAtomicsMode", 5)


def test_every_name_is_exported_by_cublas():
    """CALLS's names are libcublas.so.13's (the _v2 and _64 spellings)."""
    import subprocess

    from nvidia_libraries import nvidia_root

    root = nvidia_root()
    libs = list((root / "lib").glob("libcublas.so.*")) if root else []
    if not libs:
        pytest.skip("nvidia-cublas not installed")
    syms = subprocess.run(["readelf", "-W", "--dyn-syms", str(libs[0])], capture_output=True, text=True).stdout
    exported = {line.split()[7].split("@")[0] for line in syms.splitlines() if len(line.split()) >= 8}
    assert sorted(set(CALLS) - exported) == []
