"""cuBLAS on the sim backend: every forwarded cuBLAS call computed with numpy
on the device's memory (LibraryMemory views), as cuBLAS computes it.

Conventions (the dispatcher's side of the contract):
  - CALLS maps an exported C name (cublasSgemm_v2, its cublasSgemm_v2_64
    twin, cublasSgemmBatched...) to fn(mem, handle, *args), args being the C
    parameters after the handle: ints and enums as ints, device pointers as
    int addresses, host-or-device scalars (alpha, beta, rot's c and s)
    already read and passed as Python float/complex.
  - Output scalars (dot's, nrm2's... `result`, getrsBatched's host `info`,
    the Get*Mode calls' mode) are not arguments: the function returns them.
  - A bad argument raises LibraryError with cuBLAS's status name.  For
    getrsBatched, geqrfBatched and gelsBatched, whose host `info` names the
    bad parameter, the error carries it as `outputs = (info,)`: cuBLAS
    writes it and fails (the client writes it too: rcuda/blas_rules.info).
  - Band and packed matrices are stored as the reference BLAS stores them
    (column-major, see "Level 2: band, packed, rank updates"); the Ex forms
    take their vectors' and matrices' types as cudaDataType values and
    answer CUBLAS_STATUS_NOT_SUPPORTED for a type or pairing the sim lacks
    (bfloat16, the integer types).

Precision follows the type: float32 (and complex64) data is computed in
float32, float64 in float64; matrices are column-major (mem.matrix)."""
from __future__ import annotations

import numpy as np
import scipy.linalg

from rcuda.library_errors import LibraryError

OP_N, OP_T, OP_C = 0, 1, 2
FILL_LOWER, FILL_UPPER = 0, 1
DIAG_NON_UNIT, DIAG_UNIT = 0, 1
SIDE_LEFT, SIDE_RIGHT = 0, 1

#: cudaDataType (library_types.h) -> numpy dtype; CUDA_R_16BF and the ints have none here
DATA_TYPES = {2: np.float16, 0: np.float32, 1: np.float64, 4: np.complex64, 5: np.complex128}
CUDA_R_16F, CUDA_R_32F, CUDA_R_64F, CUDA_C_32F, CUDA_C_64F = 2, 0, 1, 4, 5

#: cublasComputeType_t (cublas_api.h) -> the precision gemmEx computes in
COMPUTE_TYPES = {64: "16F", 65: "16F", 68: "32F", 69: "32F", 74: "32F", 75: "32F", 77: "32F", 78: "32F",
                 70: "64F", 71: "64F", 79: "64F", 72: "32I", 73: "32I"}

#: cublasMath_t values (cublas_api.h), the base mode possibly or'ed with
#: CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION (16)
MATH_MODES = {0, 1, 2, 3, 4, 8}

DTYPES = {"S": np.float32, "D": np.float64, "C": np.complex64, "Z": np.complex128}
#: a complex type's real counterpart (Scnrm2, Csscal, herk's alpha...)
REAL = {"S": np.float32, "D": np.float64, "C": np.float32, "Z": np.float64}


class BlasHandle:
    """The server's state of one cublasHandle_t (pointer mode and stream
    are the dispatcher's)."""

    def __init__(self):
        self.math_mode = 0              # CUBLAS_DEFAULT_MATH
        self.atomics_mode = 0           # CUBLAS_ATOMICS_NOT_ALLOWED
        self.workspace = (0, 0)         # (ptr, bytes): kept for the program, unused by numpy


def _invalid(message: str):
    raise LibraryError("CUBLAS_STATUS_INVALID_VALUE", message)


def _require(ok: bool, message: str) -> None:
    if not ok:
        _invalid(message)


def _check_op(trans: int, name: str = "trans") -> None:
    # CUBLAS_OP_CONJG (3) is declared but "not supported in the current release"
    _require(trans in (OP_N, OP_T, OP_C), f"{name} {trans} is not a cublasOperation_t")


def _check_enum(value: int, name: str) -> None:
    _require(value in (0, 1), f"{name} {value} is not valid")


def _op(a: np.ndarray, trans: int) -> np.ndarray:
    return a if trans == OP_N else a.T if trans == OP_T else a.conj().T


def _vec(mem, ptr: int, dtype, n: int, inc: int) -> np.ndarray:
    """BLAS vector of n elements, inc apart (inc < 0 backwards, 0: one element
    n times)."""
    if inc == 0 and n > 0:
        one = mem.array(ptr, dtype, 1)
        return np.lib.stride_tricks.as_strided(one, shape=(n,), strides=(0,), writeable=True)
    return mem.array(ptr, dtype, n, inc)


def _scalar(dtype, value):
    """A host-or-device scalar in the call's precision."""
    return np.dtype(dtype).type(value)


def _out(value):
    """A result scalar as the Python number the dispatcher writes back."""
    return complex(value) if np.iscomplexobj(value) else value.item() if isinstance(value, np.generic) else value


def _tri(a: np.ndarray, uplo: int, diag: int) -> np.ndarray:
    t = np.tril(a) if uplo == FILL_LOWER else np.triu(a)
    if diag == DIAG_UNIT:
        np.fill_diagonal(t, 1)
    return t


def _sym(a: np.ndarray, uplo: int, hermitian: bool = False) -> np.ndarray:
    """The full matrix of a symmetric (Hermitian) one stored in triangle uplo."""
    half = np.tril(a, -1) if uplo == FILL_LOWER else np.triu(a, 1)
    other = half.conj().T if hermitian else half.T
    d = np.diag(a).real.astype(a.dtype) if hermitian else np.diag(a)
    return half + other + np.diag(d)


def _tri_mask(n: int, uplo: int) -> np.ndarray:
    return np.tri(n, dtype=bool) if uplo == FILL_LOWER else np.tri(n, dtype=bool).T


def _combine(c: np.ndarray, product: np.ndarray, beta) -> np.ndarray:
    """product + beta*C, C not read when beta == 0 (NaN in C must not leak)."""
    return product if beta == 0 else product + beta * c


def _solve_tri(t: np.ndarray, b: np.ndarray, lower: bool) -> np.ndarray:
    """t x = b, t triangular; a zero on t's diagonal gives inf/NaN as on the GPU."""
    try:
        return scipy.linalg.solve_triangular(t, b, lower=lower, check_finite=False).astype(b.dtype, copy=False)
    except (np.linalg.LinAlgError, ValueError):
        x = b.astype(b.dtype, copy=True)
        n = t.shape[0]
        with np.errstate(all="ignore"):
            for i in (range(n) if lower else range(n - 1, -1, -1)):
                x[i] /= t[i, i]
                rest = slice(i + 1, n) if lower else slice(0, i)
                x[rest] -= np.multiply.outer(t[rest, i], x[i]) if x.ndim > 1 else t[rest, i] * x[i]
        return x


# --------------------------------------------------------------------------- Level 1

def _axpy(dtype):
    def axpy(mem, handle, n, alpha, x, incx, y, incy):
        if n <= 0:
            return
        xv, yv = _vec(mem, x, dtype, n, incx), _vec(mem, y, dtype, n, incy)
        yv[...] = yv + _scalar(dtype, alpha) * xv
    return axpy


def _dot(dtype, conj: bool = False):
    def dot(mem, handle, n, x, incx, y, incy):
        if n <= 0:
            return _out(np.dtype(dtype).type(0))
        xv, yv = _vec(mem, x, dtype, n, incx), _vec(mem, y, dtype, n, incy)
        return _out(np.vdot(xv, yv) if conj else np.dot(xv, yv))
    return dot


def _nrm2(dtype, real):
    def nrm2(mem, handle, n, x, incx):
        if n <= 0 or incx <= 0:
            return _out(real(0))
        mag = np.abs(_vec(mem, x, dtype, n, incx)).astype(real)
        scale = mag.max()
        if scale == 0 or not np.isfinite(scale):
            return _out(real(scale))
        # scaled as BLAS's nrm2, so that large elements do not overflow the squares
        return _out(real(scale * np.sqrt(np.sum((mag / scale) ** 2))))
    return nrm2


def _abs1(v: np.ndarray) -> np.ndarray:
    """|re| + |im|: BLAS's magnitude for asum and i?amax."""
    return np.abs(v.real) + np.abs(v.imag) if np.iscomplexobj(v) else np.abs(v)


def _asum(dtype, real):
    def asum(mem, handle, n, x, incx):
        if n <= 0 or incx <= 0:
            return _out(real(0))
        return _out(real(np.sum(_abs1(_vec(mem, x, dtype, n, incx)))))
    return asum


def _iamax(dtype, pick):
    def iamax(mem, handle, n, x, incx):
        if n <= 0 or incx <= 0:
            return 0
        mags = _abs1(_vec(mem, x, dtype, n, incx))
        return int(pick(mags)) + 1            # 1-based, the first of equals
    return iamax


def _scal(dtype, alpha_type):
    def scal(mem, handle, n, alpha, x, incx):
        if n <= 0 or incx <= 0:
            return
        xv = _vec(mem, x, dtype, n, incx)
        xv[...] = xv * _scalar(alpha_type, alpha)
    return scal


def _copy(dtype):
    def copy(mem, handle, n, x, incx, y, incy):
        if n <= 0:
            return
        _vec(mem, y, dtype, n, incy)[...] = _vec(mem, x, dtype, n, incx).copy()
    return copy


def _swap(dtype):
    def swap(mem, handle, n, x, incx, y, incy):
        if n <= 0:
            return
        xv, yv = _vec(mem, x, dtype, n, incx), _vec(mem, y, dtype, n, incy)
        old = xv.copy()
        xv[...] = yv
        yv[...] = old
    return swap


def _rot(dtype, real, s_type):
    def rot(mem, handle, n, x, incx, y, incy, c, s):
        if n <= 0:
            return
        xv, yv = _vec(mem, x, dtype, n, incx), _vec(mem, y, dtype, n, incy)
        c, s = _scalar(real, c), _scalar(s_type, s)
        new_x = c * xv + s * yv
        yv[...] = c * yv - np.conj(s) * xv
        xv[...] = new_x
    return rot


# --------------------------------------------------------------------------- Level 2

def _gemv(dtype):
    def gemv(mem, handle, trans, m, n, alpha, a, lda, x, incx, beta, y, incy):
        _check_op(trans)
        _require(m >= 0 and n >= 0, f"m={m}, n={n}")
        _require(lda >= max(1, m), f"lda={lda} < max(1, m={m})")
        _require(incx != 0 and incy != 0, "incx and incy must not be 0")
        if m == 0 or n == 0 or (alpha == 0 and beta == 1):
            return
        alpha, beta = _scalar(dtype, alpha), _scalar(dtype, beta)
        lenx, leny = (n, m) if trans == OP_N else (m, n)
        yv = _vec(mem, y, dtype, leny, incy)
        product = alpha * (_op(mem.matrix(a, dtype, m, n, lda), trans) @ _vec(mem, x, dtype, lenx, incx)) \
            if alpha != 0 else np.zeros(leny, dtype)
        yv[...] = _combine(yv, product, beta)
    return gemv


def _ger(dtype, conj: bool):
    def ger(mem, handle, m, n, alpha, x, incx, y, incy, a, lda):
        _require(m >= 0 and n >= 0, f"m={m}, n={n}")
        _require(incx != 0 and incy != 0, "incx and incy must not be 0")
        _require(lda >= max(1, m), f"lda={lda} < max(1, m={m})")
        if m == 0 or n == 0 or alpha == 0:
            return
        yv = _vec(mem, y, dtype, n, incy)
        am = mem.matrix(a, dtype, m, n, lda)
        am[...] = am + _scalar(dtype, alpha) * np.outer(_vec(mem, x, dtype, m, incx), yv.conj() if conj else yv)
    return ger


def _symv(dtype, hermitian: bool):
    def symv(mem, handle, uplo, n, alpha, a, lda, x, incx, beta, y, incy):
        _check_enum(uplo, "uplo")
        _require(n >= 0, f"n={n}")
        _require(lda >= max(1, n), f"lda={lda} < max(1, n={n})")
        _require(incx != 0 and incy != 0, "incx and incy must not be 0")
        if n == 0 or (alpha == 0 and beta == 1):
            return
        alpha, beta = _scalar(dtype, alpha), _scalar(dtype, beta)
        yv = _vec(mem, y, dtype, n, incy)
        full = _sym(mem.matrix(a, dtype, n, n, lda), uplo, hermitian)
        product = alpha * (full @ _vec(mem, x, dtype, n, incx)) if alpha != 0 else np.zeros(n, dtype)
        yv[...] = _combine(yv, product, beta)
    return symv


def _trmv(dtype, solve: bool):
    def trmv(mem, handle, uplo, trans, diag, n, a, lda, x, incx):
        _check_enum(uplo, "uplo")
        _check_op(trans)
        _check_enum(diag, "diag")
        _require(n >= 0, f"n={n}")
        _require(lda >= max(1, n), f"lda={lda} < max(1, n={n})")
        _require(incx != 0, "incx must not be 0")
        if n == 0:
            return
        t = _op(_tri(mem.matrix(a, dtype, n, n, lda), uplo, diag), trans)
        xv = _vec(mem, x, dtype, n, incx)
        lower = (uplo == FILL_LOWER) == (trans == OP_N)
        xv[...] = _solve_tri(t, xv.copy(), lower) if solve else t @ xv
    return trmv


# --------------------------------------------------------------------------- Level 2: band, packed, rank updates
# Storage as the reference BLAS's, column-major: a band matrix's column j is
# column j of AB with A[i, j] at AB[ku + i - j, j] (general; sbmv/tbmv upper:
# ku = k, lower: AB[i - j, j]); a packed triangle lists its columns one after
# another (upper: A[i, j] at AP[i + j (j + 1) / 2]; lower: at AP[i + (2n - j - 1) j / 2]).

def _band(mem, a, dtype, rows, n, kl, ku, lda) -> np.ndarray:
    """The dense rows x n matrix of a band matrix (kl sub-, ku superdiagonals) stored in AB."""
    ab = mem.matrix(a, dtype, kl + ku + 1, n, lda)
    full = np.zeros((rows, n), dtype)
    for d in range(-ku, kl + 1):                        # diagonal d: A[j + d, j] = AB[ku + d, j]
        j = np.arange(max(0, -d), min(n, rows - d))
        full[j + d, j] = ab[ku + d, j]
    return full


def _band_tri(mem, a, dtype, n, k, lda, uplo) -> np.ndarray:
    """A symmetric or triangular band matrix's stored triangle, dense."""
    return _band(mem, a, dtype, n, n, 0, k, lda) if uplo == FILL_UPPER else _band(mem, a, dtype, n, n, k, 0, lda)


def _packed_indices(n: int, uplo: int):
    """(rows, cols) of a packed triangle's elements, in storage order."""
    if uplo == FILL_UPPER:
        cols, rows = np.tril_indices(n)                 # column j: rows 0..j
    else:
        cols, rows = np.triu_indices(n)                 # column j: rows j..n-1
    return rows, cols


def _unpack(mem, ap, dtype, n, uplo) -> np.ndarray:
    rows, cols = _packed_indices(n, uplo)
    full = np.zeros((n, n), dtype)
    full[rows, cols] = mem.array(ap, dtype, n * (n + 1) // 2)
    return full


def _check_vectors(incx: int, incy: int) -> None:
    _require(incx != 0 and incy != 0, "incx and incy must not be 0")


def _mv_update(mem, y, dtype, length, incy, alpha, beta, product) -> None:
    """y = alpha * product() + beta * y (product not formed when alpha is 0, y not read when beta is)."""
    alpha, beta = _scalar(dtype, alpha), _scalar(dtype, beta)
    yv = _vec(mem, y, dtype, length, incy)
    yv[...] = _combine(yv, alpha * product() if alpha != 0 else np.zeros(length, dtype), beta)


def _gbmv(dtype):
    def gbmv(mem, handle, trans, m, n, kl, ku, alpha, a, lda, x, incx, beta, y, incy):
        _check_op(trans)
        _require(m >= 0 and n >= 0 and kl >= 0 and ku >= 0, f"m={m}, n={n}, kl={kl}, ku={ku}")
        _require(lda >= kl + ku + 1, f"lda={lda} < kl + ku + 1")
        _check_vectors(incx, incy)
        if m == 0 or n == 0 or (alpha == 0 and beta == 1):
            return
        lenx, leny = (n, m) if trans == OP_N else (m, n)
        _mv_update(mem, y, dtype, leny, incy, alpha, beta,
                   lambda: _op(_band(mem, a, dtype, m, n, kl, ku, lda), trans) @ _vec(mem, x, dtype, lenx, incx))
    return gbmv


def _sbmv(dtype, hermitian: bool):
    def sbmv(mem, handle, uplo, n, k, alpha, a, lda, x, incx, beta, y, incy):
        _check_enum(uplo, "uplo")
        _require(n >= 0 and k >= 0, f"n={n}, k={k}")
        _require(lda >= k + 1, f"lda={lda} < k + 1")
        _check_vectors(incx, incy)
        if n == 0 or (alpha == 0 and beta == 1):
            return
        _mv_update(mem, y, dtype, n, incy, alpha, beta,
                   lambda: _sym(_band_tri(mem, a, dtype, n, k, lda, uplo), uplo, hermitian)
                   @ _vec(mem, x, dtype, n, incx))
    return sbmv


def _spmv(dtype, hermitian: bool):
    def spmv(mem, handle, uplo, n, alpha, ap, x, incx, beta, y, incy):
        _check_enum(uplo, "uplo")
        _require(n >= 0, f"n={n}")
        _check_vectors(incx, incy)
        if n == 0 or (alpha == 0 and beta == 1):
            return
        _mv_update(mem, y, dtype, n, incy, alpha, beta,
                   lambda: _sym(_unpack(mem, ap, dtype, n, uplo), uplo, hermitian) @ _vec(mem, x, dtype, n, incx))
    return spmv


def _tri_mv(mem, t, dtype, uplo, trans, diag, n, x, incx, solve: bool) -> None:
    """x = op(T) x, or op(T)^-1 x, T the dense triangle."""
    t = _op(_tri(t, uplo, diag), trans)
    xv = _vec(mem, x, dtype, n, incx)
    lower = (uplo == FILL_LOWER) == (trans == OP_N)
    xv[...] = _solve_tri(t, xv.copy(), lower) if solve else t @ xv


def _check_tri2(uplo, trans, diag, n, incx) -> None:
    _check_enum(uplo, "uplo")
    _check_op(trans)
    _check_enum(diag, "diag")
    _require(n >= 0, f"n={n}")
    _require(incx != 0, "incx must not be 0")


def _tbmv(dtype, solve: bool):
    def tbmv(mem, handle, uplo, trans, diag, n, k, a, lda, x, incx):
        _check_tri2(uplo, trans, diag, n, incx)
        _require(k >= 0, f"k={k}")
        _require(lda >= k + 1, f"lda={lda} < k + 1")
        if n:
            _tri_mv(mem, _band_tri(mem, a, dtype, n, k, lda, uplo), dtype, uplo, trans, diag, n, x, incx, solve)
    return tbmv


def _tpmv(dtype, solve: bool):
    def tpmv(mem, handle, uplo, trans, diag, n, ap, x, incx):
        _check_tri2(uplo, trans, diag, n, incx)
        if n:
            _tri_mv(mem, _unpack(mem, ap, dtype, n, uplo), dtype, uplo, trans, diag, n, x, incx, solve)
    return tpmv


def _rank_update(dtype, hermitian: bool, two: bool, packed: bool):
    """syr/her (A += alpha x x^T, x x^H), syr2/her2 (+ alpha x y^T + alpha y x^T;
    her2: alpha x y^H + conj(alpha) y x^H) and their packed forms spr/hpr,
    spr2/hpr2: only the uplo triangle is written; her's diagonal stays real."""
    alpha_type = REAL["C" if dtype == np.complex64 else "Z"] if hermitian and not two else dtype

    def update(mem, handle, uplo, n, alpha, x, incx, *rest):
        y, incy = rest[:2] if two else (None, None)
        a, lda = (rest[-1], None) if packed else rest[-2:]
        _check_enum(uplo, "uplo")
        _require(n >= 0, f"n={n}")
        _require(incx != 0 and incy != 0, "incx and incy must not be 0")
        _require(packed or lda >= max(1, n), f"lda={lda} < max(1, n={n})")
        if n == 0 or alpha == 0:
            return
        alpha = _scalar(alpha_type, alpha)
        t = np.conj if hermitian else (lambda v: v)
        xv = _vec(mem, x, dtype, n, incx)
        if two:
            yv = _vec(mem, y, dtype, n, incy)
            second = np.conj(alpha) if hermitian else alpha
            delta = alpha * np.outer(xv, t(yv)) + second * np.outer(yv, t(xv))
        else:
            delta = alpha * np.outer(xv, t(xv))
        rows, cols = _packed_indices(n, uplo)
        stored = mem.array(a, dtype, n * (n + 1) // 2) if packed else mem.matrix(a, dtype, n, n, lda)
        where = (Ellipsis,) if packed else (rows, cols)
        new = stored[where] + delta[rows, cols]
        if hermitian:
            diagonal = rows == cols
            new[diagonal] = new[diagonal].real
        stored[where] = new
    return update


def _gemv_batched(dtype):
    gemv = _gemv(dtype)

    def gemv_batched(mem, handle, trans, m, n, alpha, a, lda, x, incx, beta, y, incy, batch):
        _require(batch >= 0, f"batchCount={batch}")
        gemv(mem, handle, trans, m, n, 0, 0, lda, 0, incx, 1, 0, incy)    # the checks only (alpha 0, beta 1)
        if batch == 0 or m == 0 or n == 0:
            return
        for pa, px, py in zip(mem.pointers(a, batch), mem.pointers(x, batch), mem.pointers(y, batch)):
            gemv(mem, handle, trans, m, n, alpha, pa, lda, px, incx, beta, py, incy)
    return gemv_batched


def _gemv_strided(dtype):
    gemv = _gemv(dtype)

    def gemv_strided(mem, handle, trans, m, n, alpha, a, lda, stride_a, x, incx, stride_x, beta, y, incy, stride_y,
                     batch):
        _require(batch >= 0, f"batchCount={batch}")
        gemv(mem, handle, trans, m, n, 0, 0, lda, 0, incx, 1, 0, incy)    # the checks only (alpha 0, beta 1)
        size = _item_bytes(dtype)
        for i in range(batch if m and n else 0):
            gemv(mem, handle, trans, m, n, alpha, a + i * stride_a * size, lda, x + i * stride_x * size, incx,
                 beta, y + i * stride_y * size, incy)
    return gemv_strided


# --------------------------------------------------------------------------- Level 3

def _check_gemm(transa, transb, m, n, k, lda, ldb, ldc):
    _check_op(transa, "transa")
    _check_op(transb, "transb")
    _require(m >= 0 and n >= 0 and k >= 0, f"m={m}, n={n}, k={k}")
    _require(lda >= max(1, m if transa == OP_N else k), f"lda={lda} too small")
    _require(ldb >= max(1, k if transb == OP_N else n), f"ldb={ldb} too small")
    _require(ldc >= max(1, m), f"ldc={ldc} < max(1, m={m})")


def _gemm_one(mem, transa, transb, m, n, k, alpha, a, atype, lda, b, btype, ldb, beta, c, ctype, ldc, compute):
    """C = alpha op(A) op(B) + beta C, computed in `compute` (a numpy dtype)."""
    if m == 0 or n == 0 or ((alpha == 0 or k == 0) and beta == 1):
        return
    alpha, beta = _scalar(compute, alpha), _scalar(compute, beta)
    cm = mem.matrix(c, ctype, m, n, ldc)
    if alpha == 0 or k == 0:
        product = np.zeros((m, n), compute)
    else:
        am = mem.matrix(a, atype, *((m, k) if transa == OP_N else (k, m)), lda).astype(compute, copy=False)
        bm = mem.matrix(b, btype, *((k, n) if transb == OP_N else (n, k)), ldb).astype(compute, copy=False)
        if alpha == 1 and beta == 0 and cm.dtype == compute:
            np.matmul(_op(am, transa), _op(bm, transb), out=cm)  # straight into C: no temporaries
            return
        product = alpha * (_op(am, transa) @ _op(bm, transb))
    cm[...] = _combine(cm.astype(compute, copy=False) if beta != 0 else cm, product, beta)


def _gemm(dtype):
    def gemm(mem, handle, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
        _check_gemm(transa, transb, m, n, k, lda, ldb, ldc)
        _gemm_one(mem, transa, transb, m, n, k, alpha, a, dtype, lda, b, dtype, ldb, beta, c, dtype, ldc, dtype)
    return gemm


def _item_bytes(dtype) -> int:
    return np.dtype(dtype).itemsize


def _gemm_batched(dtype):
    def gemm_batched(mem, handle, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, batch):
        _check_gemm(transa, transb, m, n, k, lda, ldb, ldc)
        _require(batch >= 0, f"batchCount={batch}")
        if batch == 0 or m == 0 or n == 0:
            return
        for pa, pb, pc in zip(mem.pointers(a, batch), mem.pointers(b, batch), mem.pointers(c, batch)):
            _gemm_one(mem, transa, transb, m, n, k, alpha, pa, dtype, lda, pb, dtype, ldb, beta, pc, dtype, ldc, dtype)
    return gemm_batched


def _gemm_strided(dtype):
    def gemm_strided(mem, handle, transa, transb, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c, ldc,
                     stride_c, batch):
        _check_gemm(transa, transb, m, n, k, lda, ldb, ldc)
        _require(batch >= 0, f"batchCount={batch}")
        size = _item_bytes(dtype)
        for i in range(batch if m and n else 0):
            _gemm_one(mem, transa, transb, m, n, k, alpha, a + i * stride_a * size, dtype, lda,
                      b + i * stride_b * size, dtype, ldb, beta, c + i * stride_c * size, dtype, ldc, dtype)
    return gemm_strided


def _ex_types(atype: int, btype: int, ctype: int, compute_type: int):
    """(A, B, C, compute) numpy dtypes of a gemmEx call, or NOT_SUPPORTED as cuBLAS."""
    compute = COMPUTE_TYPES.get(compute_type)
    if compute is None:
        _invalid(f"computeType {compute_type} is not a cublasComputeType_t")
    ab = (atype, btype)
    supported = {
        "16F": {(CUDA_R_16F, CUDA_R_16F, CUDA_R_16F): np.float32},
        "32F": {(CUDA_R_16F, CUDA_R_16F, CUDA_R_16F): np.float32, (CUDA_R_16F, CUDA_R_16F, CUDA_R_32F): np.float32,
                (CUDA_R_32F, CUDA_R_32F, CUDA_R_32F): np.float32, (CUDA_C_32F, CUDA_C_32F, CUDA_C_32F): np.complex64},
        "64F": {(CUDA_R_64F, CUDA_R_64F, CUDA_R_64F): np.float64, (CUDA_C_64F, CUDA_C_64F, CUDA_C_64F): np.complex128},
    }.get(compute, {})
    key = (*ab, ctype)
    if key not in supported:
        raise LibraryError("CUBLAS_STATUS_NOT_SUPPORTED",
                           f"gemmEx: Atype {atype}, Btype {btype}, Ctype {ctype} with computeType {compute_type}")
    # half precision is accumulated in float32 (as the tensor cores do) and rounded on the store
    return DATA_TYPES[atype], DATA_TYPES[btype], DATA_TYPES[ctype], supported[key]


def _gemm_ex(mem, handle, transa, transb, m, n, k, alpha, a, atype, lda, b, btype, ldb, beta, c, ctype, ldc,
             compute_type, algo):
    _check_gemm(transa, transb, m, n, k, lda, ldb, ldc)
    at, bt, ct, compute = _ex_types(atype, btype, ctype, compute_type)
    _gemm_one(mem, transa, transb, m, n, k, alpha, a, at, lda, b, bt, ldb, beta, c, ct, ldc, compute)


def _gemm_batched_ex(mem, handle, transa, transb, m, n, k, alpha, a, atype, lda, b, btype, ldb, beta, c, ctype, ldc,
                     batch, compute_type, algo):
    _check_gemm(transa, transb, m, n, k, lda, ldb, ldc)
    _require(batch >= 0, f"batchCount={batch}")
    at, bt, ct, compute = _ex_types(atype, btype, ctype, compute_type)
    if batch == 0 or m == 0 or n == 0:
        return
    for pa, pb, pc in zip(mem.pointers(a, batch), mem.pointers(b, batch), mem.pointers(c, batch)):
        _gemm_one(mem, transa, transb, m, n, k, alpha, pa, at, lda, pb, bt, ldb, beta, pc, ct, ldc, compute)


def _gemm_strided_ex(mem, handle, transa, transb, m, n, k, alpha, a, atype, lda, stride_a, b, btype, ldb, stride_b,
                     beta, c, ctype, ldc, stride_c, batch, compute_type, algo):
    _check_gemm(transa, transb, m, n, k, lda, ldb, ldc)
    _require(batch >= 0, f"batchCount={batch}")
    at, bt, ct, compute = _ex_types(atype, btype, ctype, compute_type)
    for i in range(batch if m and n else 0):
        _gemm_one(mem, transa, transb, m, n, k, alpha, a + i * stride_a * _item_bytes(at), at, lda,
                  b + i * stride_b * _item_bytes(bt), bt, ldb, beta, c + i * stride_c * _item_bytes(ct), ct, ldc,
                  compute)


def _symm(dtype, hermitian: bool):
    def symm(mem, handle, side, uplo, m, n, alpha, a, lda, b, ldb, beta, c, ldc):
        _check_enum(side, "side")
        _check_enum(uplo, "uplo")
        _require(m >= 0 and n >= 0, f"m={m}, n={n}")
        ka = m if side == SIDE_LEFT else n
        _require(lda >= max(1, ka), f"lda={lda} too small")
        _require(ldb >= max(1, m) and ldc >= max(1, m), f"ldb={ldb}, ldc={ldc} < max(1, m={m})")
        if m == 0 or n == 0 or (alpha == 0 and beta == 1):
            return
        alpha, beta = _scalar(dtype, alpha), _scalar(dtype, beta)
        cm = mem.matrix(c, dtype, m, n, ldc)
        if alpha == 0:
            product = np.zeros((m, n), dtype)
        else:
            full = _sym(mem.matrix(a, dtype, ka, ka, lda), uplo, hermitian)
            bm = mem.matrix(b, dtype, m, n, ldb)
            product = alpha * (full @ bm if side == SIDE_LEFT else bm @ full)
        cm[...] = _combine(cm, product, beta)
    return symm


def _check_rank_k(uplo, trans, n, k, lda, ldb, ldc, allowed):
    _check_enum(uplo, "uplo")
    _require(trans in allowed, f"trans {trans} is not valid here")
    _require(n >= 0 and k >= 0, f"n={n}, k={k}")
    rows = n if trans == OP_N else k
    _require(lda >= max(1, rows), f"lda={lda} too small")
    _require(ldb is None or ldb >= max(1, rows), f"ldb={ldb} too small")
    _require(ldc >= max(1, n), f"ldc={ldc} < max(1, n={n})")


def _rank_k_store(mem, c, dtype, n, ldc, uplo, product, beta, hermitian: bool):
    """Write only C's `uplo` triangle (herk: a real diagonal)."""
    cm = mem.matrix(c, dtype, n, n, ldc)
    new = _combine(cm, product, beta)
    if hermitian:
        new = new.copy()
        np.fill_diagonal(new, np.diag(new).real)
    mask = _tri_mask(n, uplo)
    cm[mask] = new[mask]


def _syrk(dtype, hermitian: bool):
    real_type = REAL["C" if dtype == np.complex64 else "Z"] if hermitian else dtype
    complex_ = np.issubdtype(dtype, np.complexfloating)
    allowed = (OP_N, OP_C) if hermitian else (OP_N, OP_T) if complex_ else (OP_N, OP_T, OP_C)

    def syrk(mem, handle, uplo, trans, n, k, alpha, a, lda, beta, c, ldc):
        _check_rank_k(uplo, trans, n, k, lda, None, ldc, allowed)
        if n == 0 or ((alpha == 0 or k == 0) and beta == 1):
            return
        alpha, beta = _scalar(real_type, alpha), _scalar(real_type, beta)
        if alpha == 0 or k == 0:
            product = np.zeros((n, n), dtype)
        else:
            am = mem.matrix(a, dtype, *((n, k) if trans == OP_N else (k, n)), lda)
            opa = am if trans == OP_N else (am.conj().T if hermitian else am.T)
            product = alpha * (opa @ (opa.conj().T if hermitian else opa.T))
        _rank_k_store(mem, c, dtype, n, ldc, uplo, product, beta, hermitian)
    return syrk


def _syr2k(dtype, hermitian: bool):
    real_type = REAL["C" if dtype == np.complex64 else "Z"] if hermitian else dtype
    complex_ = np.issubdtype(dtype, np.complexfloating)
    allowed = (OP_N, OP_C) if hermitian else (OP_N, OP_T) if complex_ else (OP_N, OP_T, OP_C)

    def syr2k(mem, handle, uplo, trans, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
        _check_rank_k(uplo, trans, n, k, lda, ldb, ldc, allowed)
        if n == 0 or ((alpha == 0 or k == 0) and beta == 1):
            return
        alpha, beta = _scalar(dtype, alpha), _scalar(real_type, beta)
        if alpha == 0 or k == 0:
            product = np.zeros((n, n), dtype)
        else:
            shape = (n, k) if trans == OP_N else (k, n)
            am, bm = mem.matrix(a, dtype, *shape, lda), mem.matrix(b, dtype, *shape, ldb)
            t = (lambda x: x.conj().T) if hermitian else (lambda x: x.T)
            opa, opb = (am, bm) if trans == OP_N else (t(am), t(bm))
            second = np.conj(alpha) if hermitian else alpha
            product = alpha * (opa @ t(opb)) + second * (opb @ t(opa))
        _rank_k_store(mem, c, dtype, n, ldc, uplo, product, beta, hermitian)
    return syr2k


def _check_tri3(side, uplo, trans, diag, m, n, lda, ldb):
    _check_enum(side, "side")
    _check_enum(uplo, "uplo")
    _check_op(trans)
    _check_enum(diag, "diag")
    _require(m >= 0 and n >= 0, f"m={m}, n={n}")
    ka = m if side == SIDE_LEFT else n
    _require(lda >= max(1, ka), f"lda={lda} too small")
    _require(ldb >= max(1, m), f"ldb={ldb} < max(1, m={m})")
    return ka


def _trmm(dtype):
    def trmm(mem, handle, side, uplo, trans, diag, m, n, alpha, a, lda, b, ldb, c, ldc):
        ka = _check_tri3(side, uplo, trans, diag, m, n, lda, ldb)
        _require(ldc >= max(1, m), f"ldc={ldc} < max(1, m={m})")
        if m == 0 or n == 0:
            return
        alpha = _scalar(dtype, alpha)
        cm = mem.matrix(c, dtype, m, n, ldc)
        if alpha == 0:
            cm[...] = 0
            return
        t = _op(_tri(mem.matrix(a, dtype, ka, ka, lda), uplo, diag), trans)
        bm = mem.matrix(b, dtype, m, n, ldb)
        cm[...] = alpha * (t @ bm if side == SIDE_LEFT else bm @ t)
    return trmm


def _trsm(dtype):
    def trsm(mem, handle, side, uplo, trans, diag, m, n, alpha, a, lda, b, ldb):
        ka = _check_tri3(side, uplo, trans, diag, m, n, lda, ldb)
        if m == 0 or n == 0:
            return
        alpha = _scalar(dtype, alpha)
        bm = mem.matrix(b, dtype, m, n, ldb)
        if alpha == 0:
            bm[...] = 0
            return
        t = _op(_tri(mem.matrix(a, dtype, ka, ka, lda), uplo, diag), trans)
        lower = (uplo == FILL_LOWER) == (trans == OP_N)
        rhs = alpha * bm
        if side == SIDE_LEFT:                       # op(A) X = alpha B
            bm[...] = _solve_tri(t, rhs, lower)
        else:                                       # X op(A) = alpha B  <=>  op(A)^T X^T = alpha B^T
            bm[...] = _solve_tri(np.ascontiguousarray(t.T), np.ascontiguousarray(rhs.T), not lower).T
    return trsm


def _geam(dtype):
    def geam(mem, handle, transa, transb, m, n, alpha, a, lda, beta, b, ldb, c, ldc):
        _check_op(transa, "transa")
        _check_op(transb, "transb")
        _require(m >= 0 and n >= 0, f"m={m}, n={n}")
        _require(lda >= max(1, m if transa == OP_N else n), f"lda={lda} too small")
        _require(ldb >= max(1, m if transb == OP_N else n), f"ldb={ldb} too small")
        _require(ldc >= max(1, m), f"ldc={ldc} < max(1, m={m})")
        if m == 0 or n == 0:
            return
        alpha, beta = _scalar(dtype, alpha), _scalar(dtype, beta)
        result = np.zeros((m, n), dtype)
        # neither input is read when its scalar is 0 (the documented way to copy or transpose)
        if alpha != 0:
            result = result + alpha * _op(mem.matrix(a, dtype, *((m, n) if transa == OP_N else (n, m)), lda), transa)
        if beta != 0:
            result = result + beta * _op(mem.matrix(b, dtype, *((m, n) if transb == OP_N else (n, m)), ldb), transb)
        mem.matrix(c, dtype, m, n, ldc)[...] = result
    return geam


def _dgmm(dtype):
    def dgmm(mem, handle, mode, m, n, a, lda, x, incx, c, ldc):
        _check_enum(mode, "mode")
        _require(m >= 0 and n >= 0, f"m={m}, n={n}")
        _require(lda >= max(1, m) and ldc >= max(1, m), f"lda={lda}, ldc={ldc} < max(1, m={m})")
        if m == 0 or n == 0:
            return
        am = mem.matrix(a, dtype, m, n, lda)
        if mode == SIDE_LEFT:
            result = _vec(mem, x, dtype, m, incx)[:, None] * am
        else:
            result = am * _vec(mem, x, dtype, n, incx)[None, :]
        mem.matrix(c, dtype, m, n, ldc)[...] = result
    return dgmm


def _trsm_batched(dtype):
    trsm = _trsm(dtype)

    def trsm_batched(mem, handle, side, uplo, trans, diag, m, n, alpha, a, lda, b, ldb, batch):
        _check_tri3(side, uplo, trans, diag, m, n, lda, ldb)
        _require(batch >= 0, f"batchCount={batch}")
        if batch == 0 or m == 0 or n == 0:
            return
        for pa, pb in zip(mem.pointers(a, batch), mem.pointers(b, batch)):
            trsm(mem, handle, side, uplo, trans, diag, m, n, alpha, pa, lda, pb, ldb)
    return trsm_batched


def _syrkx(dtype, hermitian: bool):
    """C = alpha op(A) op(B)^T + beta C (herkx: op(B)^H, beta real), C's uplo triangle only."""
    real_type = REAL["C" if dtype == np.complex64 else "Z"] if hermitian else dtype
    complex_ = np.issubdtype(dtype, np.complexfloating)
    allowed = (OP_N, OP_C) if hermitian else (OP_N, OP_T) if complex_ else (OP_N, OP_T, OP_C)

    def syrkx(mem, handle, uplo, trans, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
        _check_rank_k(uplo, trans, n, k, lda, ldb, ldc, allowed)
        if n == 0 or ((alpha == 0 or k == 0) and beta == 1):
            return
        alpha, beta = _scalar(dtype, alpha), _scalar(real_type, beta)
        if alpha == 0 or k == 0:
            product = np.zeros((n, n), dtype)
        else:
            shape = (n, k) if trans == OP_N else (k, n)
            t = (lambda x: x.conj().T) if hermitian else (lambda x: x.T)
            am, bm = mem.matrix(a, dtype, *shape, lda), mem.matrix(b, dtype, *shape, ldb)
            opa, opb = (am, bm) if trans == OP_N else (t(am), t(bm))
            product = alpha * (opa @ t(opb))
        _rank_k_store(mem, c, dtype, n, ldc, uplo, product, beta, hermitian)
    return syrkx


def _tpttr(dtype):
    """AP (packed) -> the uplo triangle of A; the other triangle untouched."""
    def tpttr(mem, handle, uplo, n, ap, a, lda):
        _check_packing(uplo, n, lda)
        if n:
            mem.matrix(a, dtype, n, n, lda)[_packed_indices(n, uplo)] = mem.array(ap, dtype, n * (n + 1) // 2)
    return tpttr


def _trttp(dtype):
    """The uplo triangle of A -> AP (packed)."""
    def trttp(mem, handle, uplo, n, a, lda, ap):
        _check_packing(uplo, n, lda)
        if n:
            mem.array(ap, dtype, n * (n + 1) // 2)[...] = mem.matrix(a, dtype, n, n, lda)[_packed_indices(n, uplo)]
    return trttp


def _check_packing(uplo, n, lda) -> None:
    _check_enum(uplo, "uplo")
    _require(n >= 0, f"n={n}")
    _require(lda >= max(1, n), f"lda={lda} < max(1, n={n})")


# --------------------------------------------------------------------------- LU (batched, LAPACK getrf/getrs/getri)

def _getf2(a: np.ndarray, pivot: bool):
    """LAPACK's unblocked LU in place on a copy: (lu, ipiv 1-based or None, info)."""
    a = a.copy()
    n = a.shape[0]
    ipiv = np.arange(1, n + 1, dtype=np.int32)
    info = 0
    with np.errstate(all="ignore"):
        for j in range(n):
            if pivot:
                p = j + int(np.argmax(_abs1(a[j:, j])))
                ipiv[j] = p + 1
                if p != j:
                    a[[j, p], :] = a[[p, j], :]
            if a[j, j] != 0:
                a[j + 1:, j] /= a[j, j]
            elif info == 0:
                info = j + 1
            a[j + 1:, j + 1:] -= np.outer(a[j + 1:, j], a[j, j + 1:])
    return a, (ipiv if pivot else None), info


def _permutation(ipiv, n: int) -> np.ndarray:
    """perm with (P A) = A[perm] for LAPACK's sequential row swaps ipiv."""
    perm = np.arange(n)
    if ipiv is not None:
        for j in range(n):
            p = int(ipiv[j]) - 1
            perm[j], perm[p] = perm[p], perm[j]
    return perm


def _getrf_batched(dtype):
    def getrf_batched(mem, handle, n, a, lda, pivots, info, batch):
        _require(n >= 0, f"n={n}")
        _require(lda >= max(1, n), f"lda={lda} < max(1, n={n})")
        _require(batch >= 0, f"batchSize={batch}")
        if batch == 0:
            return
        infos = mem.array(info, np.int32, batch)
        if n == 0:
            infos[...] = 0
            return
        for i, pa in enumerate(mem.pointers(a, batch)):
            am = mem.matrix(pa, dtype, n, n, lda)
            lu, ipiv, infos[i] = _getf2(am, pivot=pivots != 0)
            am[...] = lu
            if pivots:
                mem.array(pivots + i * n * 4, np.int32, n)[...] = ipiv
    return getrf_batched


def _lu_solve(lu: np.ndarray, ipiv, b: np.ndarray, trans: int) -> np.ndarray:
    """op(A) X = B from getrf's (lu, ipiv): P A = L U."""
    n = lu.shape[0]
    perm = _permutation(ipiv, n)
    lower, upper = _tri(lu, FILL_LOWER, DIAG_UNIT), np.triu(lu)
    if trans == OP_N:
        return _solve_tri(upper, _solve_tri(lower, b[perm], True), False)
    t = (lambda x: x.T) if trans == OP_T else (lambda x: x.conj().T)
    w = _solve_tri(np.ascontiguousarray(t(lower)), _solve_tri(np.ascontiguousarray(t(upper)), b, True), False)
    x = np.empty_like(w)
    x[perm] = w
    return x


def _getrs_batched(dtype):
    def getrs_batched(mem, handle, trans, n, nrhs, a, lda, pivots, b, ldb, batch):
        # cuBLAS names the first bad parameter in the host `info` (its position, counting the handle)
        bad = (-2 if trans not in (OP_N, OP_T, OP_C) else -3 if n < 0 else -4 if nrhs < 0
               else -6 if lda < max(1, n) else -9 if ldb < max(1, n) else -11 if batch < 0 else 0)
        if bad:
            error = LibraryError("CUBLAS_STATUS_INVALID_VALUE", f"getrsBatched: parameter {-bad} is invalid")
            error.outputs = (bad,)
            raise error
        if n == 0 or nrhs == 0 or batch == 0:
            return 0
        for i, (pa, pb) in enumerate(zip(mem.pointers(a, batch), mem.pointers(b, batch))):
            ipiv = mem.array(pivots + i * n * 4, np.int32, n) if pivots else None
            bm = mem.matrix(pb, dtype, n, nrhs, ldb)
            bm[...] = _lu_solve(np.array(mem.matrix(pa, dtype, n, n, lda)), ipiv, np.array(bm), trans)
        return 0
    return getrs_batched


def _inverse_from_lu(lu: np.ndarray, ipiv) -> np.ndarray:
    n = lu.shape[0]
    return _lu_solve(lu, ipiv, np.eye(n, dtype=lu.dtype), OP_N)


def _singular(lu: np.ndarray) -> int:
    """LAPACK's info for a factored matrix: the first zero on U's diagonal (1-based), else 0."""
    zeros = np.flatnonzero(np.diag(lu) == 0)
    return int(zeros[0]) + 1 if zeros.size else 0


def _getri_batched(dtype):
    def getri_batched(mem, handle, n, a, lda, pivots, c, ldc, info, batch):
        _require(n >= 0, f"n={n}")
        _require(lda >= max(1, n) and ldc >= max(1, n), f"lda={lda}, ldc={ldc} < max(1, n={n})")
        _require(batch >= 0, f"batchSize={batch}")
        if batch == 0:
            return
        infos = mem.array(info, np.int32, batch)
        if n == 0:
            infos[...] = 0
            return
        for i, (pa, pc) in enumerate(zip(mem.pointers(a, batch), mem.pointers(c, batch))):
            lu = np.array(mem.matrix(pa, dtype, n, n, lda))
            infos[i] = _singular(lu)
            if infos[i] == 0:
                ipiv = mem.array(pivots + i * n * 4, np.int32, n) if pivots else None
                mem.matrix(pc, dtype, n, n, ldc)[...] = _inverse_from_lu(lu, ipiv)
    return getri_batched


def _matinv_batched(dtype):
    def matinv_batched(mem, handle, n, a, lda, ainv, lda_inv, info, batch):
        _require(0 <= n <= 32, f"n={n}: matinvBatched takes 0 <= n <= 32")
        _require(lda >= max(1, n) and lda_inv >= max(1, n), f"lda={lda}, lda_inv={lda_inv} < max(1, n={n})")
        _require(batch >= 0, f"batchSize={batch}")
        if batch == 0:
            return
        infos = mem.array(info, np.int32, batch)
        if n == 0:
            infos[...] = 0
            return
        for i, (pa, pc) in enumerate(zip(mem.pointers(a, batch), mem.pointers(ainv, batch))):
            lu, ipiv, infos[i] = _getf2(mem.matrix(pa, dtype, n, n, lda), pivot=True)
            if infos[i] == 0:
                mem.matrix(pc, dtype, n, n, lda_inv)[...] = _inverse_from_lu(lu, ipiv)
    return matinv_batched


# --------------------------------------------------------------------------- QR (batched, LAPACK geqrf/gels)

def _bad_parameter(status: str, position: int, call: str):
    """cuBLAS's refusal naming its first bad parameter in the host `info` (-position, the handle first)."""
    error = LibraryError(status, f"{call}: parameter {position} is invalid")
    error.outputs = (-position,)
    raise error


def _lapack(name: str, dtype):
    prefix = {np.float32: "s", np.float64: "d", np.complex64: "c", np.complex128: "z"}[dtype]
    return getattr(scipy.linalg.lapack, prefix + name)


def _geqrf_batched(dtype):
    geqrf = _lapack("geqrf", dtype)

    def geqrf_batched(mem, handle, m, n, a, lda, tau, batch):
        for position, ok in ((2, m >= 0), (3, n >= 0), (5, lda >= max(1, m)), (8, batch >= 0)):
            if not ok:
                _bad_parameter("CUBLAS_STATUS_INVALID_VALUE", position, "geqrfBatched")
        if m == 0 or n == 0 or batch == 0:
            return 0
        for pa, ptau in zip(mem.pointers(a, batch), mem.pointers(tau, batch)):
            am = mem.matrix(pa, dtype, m, n, lda)
            qr, taus, _, _ = geqrf(np.array(am))        # R above the diagonal, Householder vectors below
            am[...] = qr
            mem.array(ptau, dtype, min(m, n))[...] = taus
        return 0
    return geqrf_batched


def _gels_batched(dtype):
    gels = _lapack("gels", dtype)

    def gels_batched(mem, handle, trans, m, n, nrhs, a, lda, c, ldc, dev_info, batch):
        for position, ok in ((3, m >= 0), (4, n >= 0), (5, nrhs >= 0), (7, lda >= max(1, m)),
                             (9, ldc >= max(1, m)), (12, batch >= 0)):
            if not ok:
                _bad_parameter("CUBLAS_STATUS_INVALID_VALUE", position, "gelsBatched")
        # only overdetermined systems (m >= n), not transposed
        if trans != OP_N:
            _bad_parameter("CUBLAS_STATUS_NOT_SUPPORTED", 2, "gelsBatched")
        if m < n:
            _bad_parameter("CUBLAS_STATUS_NOT_SUPPORTED", 3, "gelsBatched")
        if batch == 0:
            return 0
        infos = mem.array(dev_info, np.int32, batch) if dev_info else np.zeros(batch, np.int32)
        for i, (pa, pc) in enumerate(zip(mem.pointers(a, batch), mem.pointers(c, batch))):
            cm = mem.matrix(pc, dtype, m, nrhs, ldc)
            infos[i] = 0
            if min(m, n, nrhs) == 0:                    # LAPACK's quick return: B zeroed
                cm[...] = 0
                continue
            am = mem.matrix(pa, dtype, m, n, lda)
            # info > 0: R is singular (its info-th diagonal element is 0), C then holds Q^H C
            am[...], cm[...], infos[i] = gels(np.array(am), np.array(cm))
        return 0
    return gels_batched


# --------------------------------------------------------------------------- the Ex forms: types named by cudaDataType

def _data_type(code: int, what: str):
    dtype = DATA_TYPES.get(code)
    if dtype is None:
        raise LibraryError("CUBLAS_STATUS_NOT_SUPPORTED", f"{what}: cudaDataType {code} is not supported here")
    return dtype


def _execution(xtype: int, exec_type: int, what: str, real_ok: bool = False):
    """(x's dtype, the execution dtype) of an Ex Level 1 call: the execution type
    at least x's precision, complex when x is (nrm2, asum: or its real counterpart)."""
    x, e = _data_type(xtype, what), _data_type(exec_type, what)
    xc, ec = np.issubdtype(x, np.complexfloating), np.issubdtype(e, np.complexfloating)
    ok = e != np.float16 and np.finfo(x).bits <= np.finfo(e).bits and (xc == ec or (real_ok and xc))
    if not ok:
        raise LibraryError("CUBLAS_STATUS_NOT_SUPPORTED", f"{what}: xType {xtype} with executionType {exec_type}")
    return x, e


def _same_type(xtype: int, ytype: int, what: str) -> None:
    if xtype != ytype:
        raise LibraryError("CUBLAS_STATUS_NOT_SUPPORTED", f"{what}: xType {xtype} and yType {ytype} differ")


def _axpy_ex(mem, handle, n, alpha, alpha_type, x, xtype, incx, y, ytype, incy, exec_type):
    _same_type(xtype, ytype, "AxpyEx")
    xt, et = _execution(xtype, exec_type, "AxpyEx")
    _data_type(alpha_type, "AxpyEx")
    if n <= 0:
        return
    xv, yv = _vec(mem, x, xt, n, incx), _vec(mem, y, xt, n, incy)
    yv[...] = yv.astype(et) + _scalar(et, alpha) * xv.astype(et)


def _dot_ex(conj: bool):
    def dot_ex(mem, handle, n, x, xtype, incx, y, ytype, incy, result_type, exec_type):
        _same_type(xtype, ytype, "DotEx")
        xt, et = _execution(xtype, exec_type, "DotEx")
        _data_type(result_type, "DotEx")
        if n <= 0:
            return _out(et(0))
        xv, yv = _vec(mem, x, xt, n, incx).astype(et), _vec(mem, y, xt, n, incy).astype(et)
        return _out(np.vdot(xv, yv) if conj else np.dot(xv, yv))
    return dot_ex


def _reduction_ex(factory, what: str):
    """Nrm2Ex, AsumEx: the typed call's numbers computed in the execution type's real precision."""
    def reduce_ex(mem, handle, n, x, xtype, incx, result_type, exec_type):
        xt, et = _execution(xtype, exec_type, what, real_ok=True)
        _data_type(result_type, what)
        return factory(xt, np.finfo(et).dtype.type)(mem, handle, n, x, incx)
    return reduce_ex


def _scal_ex(mem, handle, n, alpha, alpha_type, x, xtype, incx, exec_type):
    xt, et = _execution(xtype, exec_type, "ScalEx")
    _data_type(alpha_type, "ScalEx")
    if n <= 0 or incx <= 0:
        return
    xv = _vec(mem, x, xt, n, incx)
    xv[...] = xv.astype(et) * _scalar(et, alpha)


def _iamax_ex(pick):
    def iamax_ex(mem, handle, n, x, xtype, incx):
        return _iamax(_data_type(xtype, "IamaxEx"), pick)(mem, handle, n, x, incx)
    return iamax_ex


def _copy_ex(factory, what: str):
    """CopyEx, SwapEx: x and y of one type, moved as they are."""
    def move(mem, handle, n, x, xtype, incx, y, ytype, incy):
        _same_type(xtype, ytype, what)
        factory(_data_type(xtype, what))(mem, handle, n, x, incx, y, incy)
    return move


#: SgemmEx's (A and B type, C type) pairs, computed in float32; CgemmEx's, in complex64
SGEMM_EX_TYPES = {(CUDA_R_32F, CUDA_R_32F), (CUDA_R_16F, CUDA_R_32F), (CUDA_R_16F, CUDA_R_16F)}
CGEMM_EX_TYPES = {(CUDA_C_32F, CUDA_C_32F)}


def _gemm_typed(compute, supported):
    """SgemmEx, CgemmEx, Cgemm3mEx: gemm on A, B and C of the types named, in `compute`."""
    def gemm_typed(mem, handle, transa, transb, m, n, k, alpha, a, atype, lda, b, btype, ldb, beta, c, ctype, ldc):
        _check_gemm(transa, transb, m, n, k, lda, ldb, ldc)
        if atype != btype or (atype, ctype) not in supported:
            raise LibraryError("CUBLAS_STATUS_NOT_SUPPORTED", f"gemmEx: Atype {atype}, Btype {btype}, Ctype {ctype}")
        at, ct = DATA_TYPES[atype], DATA_TYPES[ctype]
        _gemm_one(mem, transa, transb, m, n, k, alpha, a, at, lda, b, at, ldb, beta, c, ct, ldc, compute)
    return gemm_typed


def _rank_k_typed(hermitian: bool):
    """CherkEx, Cherk3mEx, CsyrkEx, Csyrk3mEx: A and C complex64 (the one pair supported here)."""
    rank_k = _syrk(np.complex64, hermitian)

    def rank_k_typed(mem, handle, uplo, trans, n, k, alpha, a, atype, lda, beta, c, ctype, ldc):
        if (atype, ctype) != (CUDA_C_32F, CUDA_C_32F):
            raise LibraryError("CUBLAS_STATUS_NOT_SUPPORTED", f"Atype {atype} with Ctype {ctype}")
        rank_k(mem, handle, uplo, trans, n, k, alpha, a, lda, beta, c, ldc)
    return rank_k_typed


# --------------------------------------------------------------------------- handle settings

def _set_math_mode(mem, handle, mode):
    _require(mode & ~16 in MATH_MODES, f"mode {mode} is not a cublasMath_t")
    handle.math_mode = mode


def _set_atomics_mode(mem, handle, mode):
    _check_enum(mode, "atomics mode")
    handle.atomics_mode = mode


def _set_workspace(mem, handle, ptr, size):
    handle.workspace = (ptr, size)


# --------------------------------------------------------------------------- the table

#: names without a _64 twin in libcublas.so.13 (the LAPACK-like batched calls and handle settings)
NO_64 = ("getrfBatched", "getrsBatched", "getriBatched", "matinvBatched", "geqrfBatched", "gelsBatched", "tpttr",
         "trttp", "MathMode", "AtomicsMode", "Workspace")


def _table() -> dict:
    calls: dict = {}

    def add(name, fn):
        calls[name] = fn
        if not any(part in name for part in NO_64):
            calls[f"{name}_64"] = fn

    for p, dtype in DTYPES.items():
        real = REAL[p]
        complex_ = p in "CZ"
        add(f"cublas{p}axpy_v2", _axpy(dtype))
        add(f"cublas{p}scal_v2", _scal(dtype, dtype))
        add(f"cublas{p}copy_v2", _copy(dtype))
        add(f"cublas{p}swap_v2", _swap(dtype))
        add(f"cublasI{p.lower()}amax_v2", _iamax(dtype, np.argmax))
        add(f"cublasI{p.lower()}amin_v2", _iamax(dtype, np.argmin))
        add(f"cublas{p}gemv_v2", _gemv(dtype))
        add(f"cublas{p}symv_v2", _symv(dtype, False))
        add(f"cublas{p}trmv_v2", _trmv(dtype, solve=False))
        add(f"cublas{p}trsv_v2", _trmv(dtype, solve=True))
        add(f"cublas{p}gemm_v2", _gemm(dtype))
        add(f"cublas{p}gemmBatched", _gemm_batched(dtype))
        add(f"cublas{p}gemmStridedBatched", _gemm_strided(dtype))
        add(f"cublas{p}symm_v2", _symm(dtype, False))
        add(f"cublas{p}syrk_v2", _syrk(dtype, False))
        add(f"cublas{p}syr2k_v2", _syr2k(dtype, False))
        add(f"cublas{p}trmm_v2", _trmm(dtype))
        add(f"cublas{p}trsm_v2", _trsm(dtype))
        add(f"cublas{p}geam", _geam(dtype))
        add(f"cublas{p}dgmm", _dgmm(dtype))
        add(f"cublas{p}getrfBatched", _getrf_batched(dtype))
        add(f"cublas{p}getrsBatched", _getrs_batched(dtype))
        add(f"cublas{p}getriBatched", _getri_batched(dtype))
        add(f"cublas{p}matinvBatched", _matinv_batched(dtype))
        add(f"cublas{p}gbmv_v2", _gbmv(dtype))
        add(f"cublas{p}tbmv_v2", _tbmv(dtype, solve=False))
        add(f"cublas{p}tbsv_v2", _tbmv(dtype, solve=True))
        add(f"cublas{p}tpmv_v2", _tpmv(dtype, solve=False))
        add(f"cublas{p}tpsv_v2", _tpmv(dtype, solve=True))
        add(f"cublas{p}syr_v2", _rank_update(dtype, hermitian=False, two=False, packed=False))
        add(f"cublas{p}syr2_v2", _rank_update(dtype, hermitian=False, two=True, packed=False))
        add(f"cublas{p}gemvBatched", _gemv_batched(dtype))
        add(f"cublas{p}gemvStridedBatched", _gemv_strided(dtype))
        add(f"cublas{p}trsmBatched", _trsm_batched(dtype))
        add(f"cublas{p}syrkx", _syrkx(dtype, False))
        add(f"cublas{p}tpttr", _tpttr(dtype))
        add(f"cublas{p}trttp", _trttp(dtype))
        add(f"cublas{p}geqrfBatched", _geqrf_batched(dtype))
        add(f"cublas{p}gelsBatched", _gels_batched(dtype))
        # symmetric band and packed matrices are real's; Hermitian ones complex's
        s_or_h = "h" if complex_ else "s"
        add(f"cublas{p}{s_or_h}bmv_v2", _sbmv(dtype, hermitian=complex_))
        add(f"cublas{p}{s_or_h}pmv_v2", _spmv(dtype, hermitian=complex_))
        add(f"cublas{p}{s_or_h}pr_v2", _rank_update(dtype, hermitian=complex_, two=False, packed=True))
        add(f"cublas{p}{s_or_h}pr2_v2", _rank_update(dtype, hermitian=complex_, two=True, packed=True))
        if complex_:
            r = "S" if p == "C" else "D"
            add(f"cublas{p}dotu_v2", _dot(dtype))
            add(f"cublas{p}dotc_v2", _dot(dtype, conj=True))
            add(f"cublas{r}{p.lower()}nrm2_v2", _nrm2(dtype, real))
            add(f"cublas{r}{p.lower()}asum_v2", _asum(dtype, real))
            add(f"cublas{p}{r.lower()}scal_v2", _scal(dtype, real))
            add(f"cublas{p}rot_v2", _rot(dtype, real, dtype))
            add(f"cublas{p}{r.lower()}rot_v2", _rot(dtype, real, real))
            add(f"cublas{p}geru_v2", _ger(dtype, conj=False))
            add(f"cublas{p}gerc_v2", _ger(dtype, conj=True))
            add(f"cublas{p}hemv_v2", _symv(dtype, True))
            add(f"cublas{p}hemm_v2", _symm(dtype, True))
            add(f"cublas{p}herk_v2", _syrk(dtype, True))
            add(f"cublas{p}her2k_v2", _syr2k(dtype, True))
            add(f"cublas{p}her_v2", _rank_update(dtype, hermitian=True, two=False, packed=False))
            add(f"cublas{p}her2_v2", _rank_update(dtype, hermitian=True, two=True, packed=False))
            add(f"cublas{p}herkx", _syrkx(dtype, True))
            add(f"cublas{p}gemm3m", _gemm(dtype))
        else:
            add(f"cublas{p}dot_v2", _dot(dtype))
            add(f"cublas{p}nrm2_v2", _nrm2(dtype, real))
            add(f"cublas{p}asum_v2", _asum(dtype, real))
            add(f"cublas{p}rot_v2", _rot(dtype, real, real))
            add(f"cublas{p}ger_v2", _ger(dtype, conj=False))
    add("cublasGemmEx", _gemm_ex)
    add("cublasGemmBatchedEx", _gemm_batched_ex)
    add("cublasGemmStridedBatchedEx", _gemm_strided_ex)
    add("cublasCgemm3mBatched", _gemm_batched(np.complex64))
    add("cublasCgemm3mStridedBatched", _gemm_strided(np.complex64))
    add("cublasSgemmEx", _gemm_typed(np.float32, SGEMM_EX_TYPES))
    add("cublasCgemmEx", _gemm_typed(np.complex64, CGEMM_EX_TYPES))
    add("cublasCgemm3mEx", _gemm_typed(np.complex64, CGEMM_EX_TYPES))
    for name, hermitian in (("Cherk", True), ("Csyrk", False)):
        add(f"cublas{name}Ex", _rank_k_typed(hermitian))
        add(f"cublas{name}3mEx", _rank_k_typed(hermitian))
    add("cublasAxpyEx", _axpy_ex)
    add("cublasDotEx", _dot_ex(conj=False))
    add("cublasDotcEx", _dot_ex(conj=True))
    add("cublasNrm2Ex", _reduction_ex(_nrm2, "Nrm2Ex"))
    add("cublasAsumEx", _reduction_ex(_asum, "AsumEx"))
    add("cublasScalEx", _scal_ex)
    add("cublasIamaxEx", _iamax_ex(np.argmax))
    add("cublasIaminEx", _iamax_ex(np.argmin))
    add("cublasCopyEx", _copy_ex(_copy, "CopyEx"))
    add("cublasSwapEx", _copy_ex(_swap, "SwapEx"))
    add("cublasSetMathMode", _set_math_mode)
    add("cublasGetMathMode", lambda mem, handle: handle.math_mode)
    add("cublasSetAtomicsMode", _set_atomics_mode)
    add("cublasGetAtomicsMode", lambda mem, handle: handle.atomics_mode)
    add("cublasSetWorkspace_v2", _set_workspace)
    return calls


CALLS: dict = _table()
