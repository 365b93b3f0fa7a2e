"""The sim's cuBLAS (server/backends/sim_cublas.py) against numpy, on a fake
device memory: column-major views with leading dimensions larger than the
rows, every transpose, negative increments, band and packed storage (against
dense reconstructions), the rank updates, the batched calls, the LAPACK-like
LU, QR and least squares, the Ex forms, and cuBLAS's validation."""
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


# --------------------------------------------------------------------------- band, packed, rank updates

ALPHA = {"S": 1.5, "D": 1.5, "C": 1.5 - 0.5j, "Z": 1.5 - 0.5j}
BETA = {"S": -0.5, "D": -0.5, "C": 0.25 + 1j, "Z": 0.25 + 1j}


def band_storage(a, kl, ku, lda):
    """Reference BLAS's band storage of a (column j of AB: A[i, j] at AB[ku + i - j, j]), NaN elsewhere."""
    m, n = a.shape
    ab = np.full((lda, n), np.nan, a.dtype)
    for j in range(n):
        for i in range(max(0, j - ku), min(m, j + kl + 1)):
            ab[ku + i - j, j] = a[i, j]
    return ab


def band_of(a, kl, ku):
    """a with only its kl sub- and ku superdiagonals."""
    m, n = a.shape
    i, j = np.indices((m, n))
    return np.where((i - j <= kl) & (j - i <= ku), a, 0)


def packed_storage(a, uplo):
    """Reference BLAS's packed triangle, column by column (upper: rows 0..j; lower: rows j..n-1)."""
    n = a.shape[0]
    return np.array([a[i, j] for j in range(n) for i in (range(j + 1) if uplo == 1 else range(j, n))], a.dtype)


def full_sym(a, uplo, hermitian):
    """The full matrix of a's uplo triangle, symmetric or Hermitian."""
    t = np.tril(a) if uplo == 0 else np.triu(a)
    other = (t.conj().T if hermitian else t.T) - np.diag(np.diag(t))
    full = t + other
    if hermitian:
        np.fill_diagonal(full, np.diag(full).real)
    return full


def triangle(a, uplo, diag):
    t = np.tril(a) if uplo == 0 else np.triu(a)
    if diag == 1:
        np.fill_diagonal(t, 1)
    return t


def strided(dev, x, inc):
    """x stored as a BLAS vector with increment inc (NaN between; inc < 0 from the far end)."""
    n, step = len(x), abs(inc)
    store = np.full((n - 1) * step + 1, np.nan, x.dtype)
    store[::step] = x if inc > 0 else x[::-1]
    return dev.put(store)


def read_vector(dev, ptr, dtype, n, inc):
    return np.array(dev.mem.array(ptr, dtype, n, inc))


@pytest.mark.parametrize("p", TYPES)
@pytest.mark.parametrize("trans", [0, 1, 2])
def test_gbmv(p, trans):
    dtype, dev = TYPES[p], Device()
    m, n, kl, ku = 6, 5, 2, 1
    lda = kl + ku + 2
    a = rand(dtype, m, n)
    lx, ly = (n, m) if trans == 0 else (m, n)
    x, y = rand(dtype, lx, seed=1), rand(dtype, ly, seed=2)
    px, py = strided(dev, x, -2), strided(dev, y, 3)
    dev.call(f"cublas{p}gbmv_v2", trans, m, n, kl, ku, ALPHA[p], dev.put(band_storage(a, kl, ku, lda).T), lda,
             px, -2, BETA[p], py, 3)
    close(read_vector(dev, py, dtype, ly, 3), ALPHA[p] * op(band_of(a, kl, ku), trans) @ x + BETA[p] * y, dtype)


@pytest.mark.parametrize("p", TYPES)
@pytest.mark.parametrize("uplo", [0, 1])
def test_sbmv_hbmv_spmv_hpmv(p, uplo):
    dtype, dev = TYPES[p], Device()
    n, k = 6, 2
    hermitian = p in "CZ"
    s_or_h = "h" if hermitian else "s"
    a = band_of(rand(dtype, n, n), k, k)
    want_a = full_sym(a, uplo, hermitian)
    x, y = rand(dtype, n, seed=1), rand(dtype, n, seed=2)
    want = ALPHA[p] * want_a @ x + BETA[p] * y
    kl, ku = (k, 0) if uplo == 0 else (0, k)
    ab = band_storage(np.tril(a) if uplo == 0 else np.triu(a), kl, ku, k + 2)
    py = dev.put(y)
    dev.call(f"cublas{p}{s_or_h}bmv_v2", uplo, n, k, ALPHA[p], dev.put(ab.T), k + 2, strided(dev, x, 2), 2,
             BETA[p], py, 1)
    close(dev.array(py, dtype, n), want, dtype)
    py = strided(dev, y, -1)
    dev.call(f"cublas{p}{s_or_h}pmv_v2", uplo, n, ALPHA[p], dev.put(packed_storage(a, uplo)), dev.put(x), 1,
             BETA[p], py, -1)
    close(read_vector(dev, py, dtype, n, -1), want, dtype)


@pytest.mark.parametrize("p", TYPES)
@pytest.mark.parametrize("uplo", [0, 1])
@pytest.mark.parametrize("trans", [0, 1, 2])
@pytest.mark.parametrize("diag", [0, 1])
def test_tbmv_tbsv_tpmv_tpsv(p, uplo, trans, diag):
    dtype, dev = TYPES[p], Device()
    n, k = 6, 2
    a = band_of(rand(dtype, n, n), k, k) + 4 * np.eye(n, dtype=dtype)       # well conditioned
    t = triangle(a, uplo, diag)
    if diag == 1:
        a[np.diag_indices(n)] = np.nan                                      # a unit diagonal is not read
    x = rand(dtype, n, seed=1)
    kl, ku = (k, 0) if uplo == 0 else (0, k)
    pa_band = dev.put(band_storage(np.tril(a) if uplo == 0 else np.triu(a), kl, ku, k + 1).T)
    pa_packed = dev.put(packed_storage(a, uplo))
    for name, args, want in (("tbmv", (k, pa_band, k + 1), op(t, trans) @ x),
                             ("tbsv", (k, pa_band, k + 1), np.linalg.solve(op(t, trans), x)),
                             ("tpmv", (pa_packed,), op(t, trans) @ x),
                             ("tpsv", (pa_packed,), np.linalg.solve(op(t, trans), x))):
        px = strided(dev, x, -2)
        dev.call(f"cublas{p}{name}_v2", uplo, trans, diag, n, *args, px, -2)
        close(read_vector(dev, px, dtype, n, -2), want, dtype)


@pytest.mark.parametrize("p", TYPES)
@pytest.mark.parametrize("uplo", [0, 1])
def test_syr_syr2(p, uplo):
    dtype, dev = TYPES[p], Device()
    n, lda = 5, 7
    a, x, y = rand(dtype, n, n), rand(dtype, n, seed=1), rand(dtype, n, seed=2)
    mask = np.tri(n, dtype=bool) if uplo == 0 else np.tri(n, dtype=bool).T
    for name, args, delta in (("syr", (), ALPHA[p] * np.outer(x, x)),
                              ("syr2", (strided(dev, y, -1), -1), ALPHA[p] * (np.outer(x, y) + np.outer(y, x)))):
        pa = dev.put_matrix(a, lda)
        dev.call(f"cublas{p}{name}_v2", uplo, n, ALPHA[p], strided(dev, x, 2), 2, *args, pa, lda)
        close(dev.matrix(pa, dtype, n, n, lda), np.where(mask, a + delta, a), dtype)   # the other triangle kept
    if p in "SD":     # spr, spr2: the same on the packed triangle
        for name, args, delta in (("spr", (), ALPHA[p] * np.outer(x, x)),
                                  ("spr2", (dev.put(y), 1), ALPHA[p] * (np.outer(x, y) + np.outer(y, x)))):
            pap = dev.put(packed_storage(a, uplo))
            dev.call(f"cublas{p}{name}_v2", uplo, n, ALPHA[p], dev.put(x), 1, *args, pap)
            close(dev.array(pap, dtype, n * (n + 1) // 2), packed_storage(a + delta, uplo), dtype)


@pytest.mark.parametrize("p", "CZ")
@pytest.mark.parametrize("uplo", [0, 1])
def test_her_her2_hpr_hpr2(p, uplo):
    dtype, dev = TYPES[p], Device()
    n, lda = 5, 6
    a, x, y = rand(dtype, n, n), rand(dtype, n, seed=1), rand(dtype, n, seed=2)
    alpha, calpha = 0.75, ALPHA[p]
    mask = np.tri(n, dtype=bool) if uplo == 0 else np.tri(n, dtype=bool).T

    def hermitian_result(delta):
        new = a + delta
        np.fill_diagonal(new, np.diag(new).real)        # the diagonal's imaginary parts are set to 0
        return new

    her = alpha * np.outer(x, x.conj())
    her2 = calpha * np.outer(x, y.conj()) + np.conj(calpha) * np.outer(y, x.conj())
    for name, scale, args, delta in (("her", alpha, (), her), ("her2", calpha, (dev.put(y), 1), her2)):
        pa = dev.put_matrix(a, lda)
        dev.call(f"cublas{p}{name}_v2", uplo, n, scale, strided(dev, x, -3), -3, *args, pa, lda)
        close(dev.matrix(pa, dtype, n, n, lda), np.where(mask, hermitian_result(delta), a), dtype)
        pap = dev.put(packed_storage(a, uplo))
        dev.call(f"cublas{p}hp{name[2:]}_v2", uplo, n, scale, strided(dev, x, -3), -3, *args, pap)
        close(dev.array(pap, dtype, n * (n + 1) // 2), packed_storage(hermitian_result(delta), uplo), dtype)


def test_her_alpha_zero_is_a_quick_return():
    dev = Device()
    a = rand(np.complex64, 3, 3)
    pa = dev.put_matrix(a, 3)
    dev.call("cublasCher_v2", 0, 3, 0.0, dev.put(np.full(3, np.nan, np.complex64)), 1, pa, 3)
    close(dev.matrix(pa, np.complex64, 3, 3, 3), a, np.complex64)


@pytest.mark.parametrize("name,args", [
    ("cublasSgbmv_v2", (0, 4, 4, 1, 1, 1.0, 0, 2, 0, 1, 0.0, 0, 1)),      # lda < kl + ku + 1
    ("cublasSgbmv_v2", (0, 4, 4, -1, 1, 1.0, 0, 3, 0, 1, 0.0, 0, 1)),     # kl < 0
    ("cublasSsbmv_v2", (0, 4, 2, 1.0, 0, 2, 0, 1, 0.0, 0, 1)),            # lda < k + 1
    ("cublasDspmv_v2", (2, 4, 1.0, 0, 0, 1, 0.0, 0, 1)),                  # bad uplo
    ("cublasCtbsv_v2", (0, 0, 0, 4, 1, 0, 2, 0, 0)),                      # incx = 0
    ("cublasZtpmv_v2", (0, 3, 0, 4, 0, 0, 1)),                            # bad trans
    ("cublasSsyr_v2", (0, 4, 1.0, 0, 1, 0, 3)),                           # lda < n
    ("cublasChpr2_v2", (0, -1, 1.0, 0, 1, 0, 1, 0)),                      # n < 0
    ("cublasStpttr", (0, 4, 0, 0, 3)),                                    # lda < n
])
def test_level2_invalid_values(name, args):
    with pytest.raises(LibraryError) as info:
        Device().call(name, *args)
    assert info.value.library_status == "CUBLAS_STATUS_INVALID_VALUE"


@pytest.mark.parametrize("p", TYPES)
def test_gemv_batched_and_strided(p):
    dtype, dev, batch, m, n, lda = TYPES[p], Device(), 3, 4, 3, 6
    a = [rand(dtype, m, n, seed=10 + i) for i in range(batch)]
    x = [rand(dtype, m, seed=20 + i) for i in range(batch)]
    y = [rand(dtype, n, seed=30 + i) for i in range(batch)]
    want = [ALPHA[p] * a[i].conj().T @ x[i] + BETA[p] * y[i] for i in range(batch)]
    py = [strided(dev, v, 2) for v in y]
    dev.call(f"cublas{p}gemvBatched", 2, m, n, ALPHA[p], dev.put(np.array([dev.put_matrix(v, lda) for v in a],
             np.uint64)), lda, dev.put(np.array([dev.put(v) for v in x], np.uint64)), 1, BETA[p],
             dev.put(np.array(py, np.uint64)), 2, batch)
    for i in range(batch):
        close(read_vector(dev, py[i], dtype, n, 2), want[i], dtype)
    # strided: A's and x's end to end, y's with a gap
    sa, sx, sy = lda * n, m, n + 2
    pa = dev.put(np.concatenate([np.vstack([v, np.full((lda - m, n), np.nan, dtype)]).T.ravel() for v in a]))
    px = dev.put(np.concatenate(x))
    py = dev.put(np.concatenate([np.concatenate([v, np.zeros(2, dtype)]) for v in y]))
    dev.call(f"cublas{p}gemvStridedBatched_64", 2, m, n, ALPHA[p], pa, lda, sa, px, 1, sx, BETA[p], py, 1, sy,
             batch)
    for i in range(batch):
        close(dev.array(py + i * sy * np.dtype(dtype).itemsize, dtype, n), want[i], dtype)


# --------------------------------------------------------------------------- trsmBatched, syrkx/herkx, tpttr/trttp

@pytest.mark.parametrize("side", [0, 1])
@pytest.mark.parametrize("trans", [0, 2])
def test_trsm_batched(side, trans):
    dtype, dev, batch, m, n = np.complex128, Device(), 2, 4, 3
    ka = m if side == 0 else n
    a = [rand(dtype, ka, ka, seed=i) + 4 * np.eye(ka) for i in range(batch)]
    b = [rand(dtype, m, n, seed=10 + i) for i in range(batch)]
    pb = [dev.put_matrix(v, m + 1) for v in b]
    alpha = 2 - 1j
    dev.call("cublasZtrsmBatched", side, 1, trans, 0, m, n, alpha,
             dev.put(np.array([dev.put_matrix(v, ka) for v in a], np.uint64)), ka, dev.put(np.array(pb, np.uint64)),
             m + 1, batch)
    for i in range(batch):
        t = op(np.triu(a[i]), trans)
        want = np.linalg.solve(t, alpha * b[i]) if side == 0 else alpha * b[i] @ np.linalg.inv(t)
        close(dev.matrix(pb[i], dtype, m, n, m + 1), want, dtype)


@pytest.mark.parametrize("p", TYPES)
@pytest.mark.parametrize("uplo", [0, 1])
@pytest.mark.parametrize("trans", [0, 1])
def test_syrkx_herkx(p, uplo, trans):
    dtype, dev, n, k = TYPES[p], Device(), 4, 3
    hermitian = p in "CZ" and trans == 1       # herkx takes N and C; syrkx N and T
    t = 2 if hermitian else trans
    shape = (n, k) if trans == 0 else (k, n)
    a, b, c = rand(dtype, *shape, seed=1), rand(dtype, *shape, seed=2), rand(dtype, n, n, seed=3)
    beta = 0.5 if hermitian else BETA[p]
    pc = dev.put_matrix(c, n + 1)
    name = f"cublas{p}herkx" if hermitian else f"cublas{p}syrkx"
    dev.call(name, uplo, t, n, k, ALPHA[p], dev.put_matrix(a, shape[0]), shape[0], dev.put_matrix(b, shape[0]),
             shape[0], beta, pc, n + 1)
    other = (lambda v: v.conj().T) if hermitian else (lambda v: v.T)
    opa, opb = (a, b) if trans == 0 else (other(a), other(b))
    want = ALPHA[p] * opa @ other(opb) + beta * c
    if hermitian:
        np.fill_diagonal(want, np.diag(want).real)
    mask = np.tri(n, dtype=bool) if uplo == 0 else np.tri(n, dtype=bool).T
    close(dev.matrix(pc, dtype, n, n, n + 1), np.where(mask, want, c), dtype)


@pytest.mark.parametrize("p", TYPES)
@pytest.mark.parametrize("uplo", [0, 1])
def test_tpttr_trttp(p, uplo):
    dtype, dev, n, lda = TYPES[p], Device(), 5, 7
    a, other = rand(dtype, n, n), rand(dtype, n, n, seed=1)
    pa = dev.put_matrix(other, lda)
    dev.call(f"cublas{p}tpttr", uplo, n, dev.put(packed_storage(a, uplo)), pa, lda)
    mask = np.tri(n, dtype=bool) if uplo == 0 else np.tri(n, dtype=bool).T
    close(dev.matrix(pa, dtype, n, n, lda), np.where(mask, a, other), dtype)
    pap = dev.put(np.zeros(n * (n + 1) // 2, dtype))
    dev.call(f"cublas{p}trttp", uplo, n, dev.put_matrix(a, lda), lda, pap)
    close(dev.array(pap, dtype, n * (n + 1) // 2), packed_storage(a, uplo), dtype)


# --------------------------------------------------------------------------- geqrfBatched, gelsBatched

def householder_q(qr, tau):
    """Q = H(1) ... H(k) from geqrf's vectors below the diagonal and its tau."""
    m = qr.shape[0]
    q = np.eye(m, dtype=qr.dtype)
    for i in range(len(tau)):
        v = np.zeros(m, qr.dtype)
        v[i], v[i + 1:] = 1, qr[i + 1:, i]
        q = q @ (np.eye(m, dtype=qr.dtype) - tau[i] * np.outer(v, v.conj()))
    return q


@pytest.mark.parametrize("p", TYPES)
def test_geqrf_batched(p):
    dtype, dev, batch, m, n, lda = TYPES[p], Device(), 2, 5, 3, 6
    a = [rand(dtype, m, n, seed=i) for i in range(batch)]
    pa = [dev.put_matrix(v, lda) for v in a]
    ptau = [dev.put(np.zeros(n, dtype)) for _ in range(batch)]
    info = dev.call(f"cublas{p}geqrfBatched", m, n, dev.put(np.array(pa, np.uint64)), lda,
                    dev.put(np.array(ptau, np.uint64)), batch)
    assert info == 0
    for i in range(batch):
        qr, tau = dev.matrix(pa[i], dtype, m, n, lda), dev.array(ptau[i], dtype, n)
        close(householder_q(qr, tau) @ np.triu(qr), a[i], dtype)        # A = Q R


def test_geqrf_batched_names_its_bad_parameter():
    with pytest.raises(LibraryError) as info:
        Device().call("cublasSgeqrfBatched", 4, 2, 0, 3, 0, 1)          # lda < m: parameter 5
    assert info.value.library_status == "CUBLAS_STATUS_INVALID_VALUE" and info.value.outputs == (-5,)


@pytest.mark.parametrize("p", TYPES)
def test_gels_batched(p):
    dtype, dev, batch, m, n, nrhs, ldc = TYPES[p], Device(), 2, 6, 3, 2, 7
    a = [rand(dtype, m, n, seed=i) for i in range(batch)]
    c = [rand(dtype, m, nrhs, seed=10 + i) for i in range(batch)]
    pc = [dev.put_matrix(v, ldc) for v in c]
    pinfo = dev.put(np.full(batch, -7, np.int32))
    info = dev.call(f"cublas{p}gelsBatched", 0, m, n, nrhs, dev.put(np.array([dev.put_matrix(v, m) for v in a],
                    np.uint64)), m, dev.put(np.array(pc, np.uint64)), ldc, pinfo, batch)
    assert info == 0 and list(dev.array(pinfo, np.int32, batch)) == [0] * batch
    for i in range(batch):
        want = np.linalg.lstsq(a[i].astype(np.complex128), c[i].astype(np.complex128), rcond=None)[0]
        close(dev.matrix(pc[i], dtype, n, nrhs, ldc), want, dtype)


def test_gels_batched_refusals():
    dev = Device()
    for args, status, position in (((1, 4, 2, 1, 0, 4, 0, 4, 0, 1), "CUBLAS_STATUS_NOT_SUPPORTED", 2),   # trans
                                   ((0, 2, 4, 1, 0, 2, 0, 2, 0, 1), "CUBLAS_STATUS_NOT_SUPPORTED", 3),   # m < n
                                   ((0, 4, 2, 1, 0, 4, 0, 3, 0, 1), "CUBLAS_STATUS_INVALID_VALUE", 9)):  # ldc < m
        with pytest.raises(LibraryError) as info:
            dev.call("cublasDgelsBatched", *args)
        assert info.value.library_status == status and info.value.outputs == (-position,)


def test_blas_rules_info_matches_the_sim():
    from rcuda import blas_rules
    assert blas_rules.info("cublasSgeqrfBatched", dict(m=4, n=2, lda=3, batchSize=1)) == -5
    assert blas_rules.info("cublasDgelsBatched", dict(trans=0, m=4, n=2, nrhs=1, lda=4, ldc=3, batchSize=1)) == -9
    assert blas_rules.info("cublasDgelsBatched", dict(trans=0, m=2, n=4, nrhs=1, lda=4, ldc=4, batchSize=1)) == -3
    assert blas_rules.info("cublasCgetrsBatched", dict(trans=0, n=2, nrhs=1, lda=1, ldb=2, batchSize=1)) == -6
    with pytest.raises(LibraryError):     # complex symmetric calls are checked too (Csyrk: family syrk)
        blas_rules.checker("cublasCsyrk_v2")(dict(uplo=0, trans=0, n=4, k=2, lda=3, ldc=4))
    with pytest.raises(LibraryError):
        blas_rules.checker("cublasZgbmv_v2_64")(dict(trans=0, m=4, n=4, kl=1, ku=1, lda=2, incx=1, incy=1))


# --------------------------------------------------------------------------- the Ex forms

R16F, R32F, R64F, C32F, C64F = 2, 0, 1, 4, 5
EX_TYPES = {R16F: np.float16, R32F: np.float32, R64F: np.float64, C32F: np.complex64, C64F: np.complex128}


@pytest.mark.parametrize("xtype,exec_type", [(R16F, R32F), (R32F, R32F), (R64F, R64F), (C32F, C32F), (C64F, C64F)])
def test_level1_ex(xtype, exec_type):
    dtype, dev, n = EX_TYPES[xtype], Device(), 7
    tol = 2e-2 if dtype == np.float16 else TOL[np.float32] if np.finfo(dtype).bits == 32 else TOL[np.float64]
    x, y = rand(dtype, n, seed=1), rand(dtype, n, seed=2)
    wide = np.complex128
    xw, yw = x.astype(wide), y.astype(wide)
    alpha = 0.5 - 0.25j if np.issubdtype(dtype, np.complexfloating) else 0.5
    real_type = R64F if np.finfo(dtype).bits == 64 else R32F

    def near(got, want):
        np.testing.assert_allclose(np.asarray(got, wide), want, rtol=tol, atol=tol)

    py = dev.put(y)
    dev.call("cublasAxpyEx", n, alpha, exec_type, dev.put(x), xtype, 1, py, xtype, 1, exec_type)
    near(dev.array(py, dtype, n), yw + alpha * xw)
    near(dev.call("cublasDotEx", n, dev.put(x), xtype, 1, dev.put(y), xtype, -1, xtype, exec_type), xw @ yw[::-1])
    near(dev.call("cublasDotcEx_64", n, dev.put(x), xtype, 1, dev.put(y), xtype, 1, xtype, exec_type),
         np.vdot(xw, yw))
    near(dev.call("cublasNrm2Ex", n, dev.put(x), xtype, 1, real_type, real_type), np.linalg.norm(xw))
    near(dev.call("cublasAsumEx", n, dev.put(x), xtype, 1, real_type, real_type),
         np.sum(np.abs(xw.real) + np.abs(xw.imag)))
    px = dev.put(x)
    dev.call("cublasScalEx", n, alpha, exec_type, px, xtype, 1, exec_type)
    near(dev.array(px, dtype, n), alpha * xw)
    mags = np.abs(xw.real) + np.abs(xw.imag)
    assert dev.call("cublasIamaxEx", n, dev.put(x), xtype, 1) == int(np.argmax(mags)) + 1
    assert dev.call("cublasIaminEx_64", n, dev.put(x), xtype, 1) == int(np.argmin(mags)) + 1
    px, py = dev.put(x), strided(dev, y, 2)
    dev.call("cublasSwapEx", n, px, xtype, 1, py, xtype, 2)
    near(dev.array(px, dtype, n), yw)
    near(read_vector(dev, py, dtype, n, 2), xw)
    py = dev.put(np.zeros(n, dtype))
    dev.call("cublasCopyEx", n, dev.put(x), xtype, -1, py, xtype, 1)
    near(dev.array(py, dtype, n), xw[::-1])


def test_level1_ex_unsupported_types():
    dev = Device()
    for name, args in (("cublasAxpyEx", (2, 1.0, R32F, 0, R32F, 1, 0, R64F, 1, R32F)),      # x and y differ
                       ("cublasDotEx", (2, 0, R64F, 1, 0, R64F, 1, R64F, R32F)),            # execution narrower
                       ("cublasCopyEx", (2, 0, 14, 1, 0, 14, 1))):                          # bfloat16: not here
        with pytest.raises(LibraryError) as info:
            dev.call(name, *args)
        assert info.value.library_status == "CUBLAS_STATUS_NOT_SUPPORTED"


@pytest.mark.parametrize("name,atype,ctype", [("cublasSgemmEx", R32F, R32F), ("cublasSgemmEx", R16F, R32F),
                                              ("cublasSgemmEx", R16F, R16F), ("cublasCgemmEx", C32F, C32F),
                                              ("cublasCgemm3mEx_64", C32F, C32F)])
def test_gemm_typed(name, atype, ctype):
    at, ct, dev = EX_TYPES[atype], EX_TYPES[ctype], Device()
    m, n, k = 5, 4, 3
    a, b, c = rand(at, k, m, seed=1), rand(at, k, n, seed=2), rand(ct, m, n, seed=3)
    alpha, beta = (1.5 - 0.5j, 0.5j) if name[6] == "C" else (1.5, 0.5)
    pc = dev.put_matrix(c, m + 1)
    dev.call(name, 1, 0, m, n, k, alpha, dev.put_matrix(a, k), atype, k, dev.put_matrix(b, k), atype, k, beta, pc,
             ctype, m + 1)
    want = alpha * a.T.astype(np.complex128) @ b.astype(np.complex128) + beta * c.astype(np.complex128)
    tol = 2e-2 if np.float16 in (at, ct) else 2e-4
    np.testing.assert_allclose(dev.matrix(pc, ct, m, n, m + 1).astype(np.complex128), want, rtol=tol, atol=tol)


def test_gemm_typed_unsupported():
    with pytest.raises(LibraryError) as info:
        Device().call("cublasSgemmEx", 0, 0, 2, 2, 2, 1.0, 0, R64F, 2, 0, R64F, 2, 0.0, 0, R64F, 2)
    assert info.value.library_status == "CUBLAS_STATUS_NOT_SUPPORTED"


@pytest.mark.parametrize("p", "CZ")
def test_gemm3m_batched_and_strided(p):
    dtype, dev, m, n, k = TYPES[p], Device(), 3, 4, 2
    a, b, c = rand(dtype, m, k, seed=1), rand(dtype, k, n, seed=2), rand(dtype, m, n, seed=3)
    pc = dev.put_matrix(c, m)
    dev.call(f"cublas{p}gemm3m", 0, 0, m, n, k, ALPHA[p], dev.put_matrix(a, m), m, dev.put_matrix(b, k), k,
             BETA[p], pc, m)
    close(dev.matrix(pc, dtype, m, n, m), ALPHA[p] * a @ b + BETA[p] * c, dtype)
    if p == "C":
        pc = dev.put_matrix(c, m)
        dev.call("cublasCgemm3mBatched", 0, 0, m, n, k, ALPHA[p], dev.put(np.array([dev.put_matrix(a, m)], np.uint64)),
                 m, dev.put(np.array([dev.put_matrix(b, k)], np.uint64)), k, BETA[p],
                 dev.put(np.array([pc], np.uint64)), m, 1)
        close(dev.matrix(pc, dtype, m, n, m), ALPHA[p] * a @ b + BETA[p] * c, dtype)
        pc = dev.put_matrix(c, m)
        dev.call("cublasCgemm3mStridedBatched", 0, 0, m, n, k, ALPHA[p], dev.put_matrix(a, m), m, 0,
                 dev.put_matrix(b, k), k, 0, BETA[p], pc, m, 0, 1)
        close(dev.matrix(pc, dtype, m, n, m), ALPHA[p] * a @ b + BETA[p] * c, dtype)


@pytest.mark.parametrize("name", ["cublasCherkEx", "cublasCherk3mEx", "cublasCsyrkEx", "cublasCsyrk3mEx_64"])
def test_rank_k_typed(name):
    dev, n, k = Device(), 4, 3
    hermitian = "herk" in name
    a, c = rand(np.complex64, n, k, seed=1), rand(np.complex64, n, n, seed=2)
    alpha, beta = (0.5, 2.0) if hermitian else (0.5 + 1j, 1 - 1j)
    pc = dev.put_matrix(c, n)
    dev.call(name, 1, 0, n, k, alpha, dev.put_matrix(a, n), C32F, n, beta, pc, C32F, n)
    want = alpha * a @ (a.conj().T if hermitian else a.T) + beta * c
    if hermitian:
        np.fill_diagonal(want, np.diag(want).real)
    close(dev.matrix(pc, np.complex64, n, n, n), np.where(np.tri(n, dtype=bool).T, want, c), np.complex64)
    with pytest.raises(LibraryError):
        dev.call(name, 1, 0, n, k, alpha, dev.put_matrix(a, n), C64F, n, beta, pc, C64F, n)
