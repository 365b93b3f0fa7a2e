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
    getrsBatched, whose host `info` names the bad parameter, the error
    carries it as `outputs = (info,)`: cuBLAS writes it and fails.

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
NO_64 = ("getrfBatched", "getrsBatched", "getriBatched", "matinvBatched", "MathMode", "AtomicsMode", "Workspace")


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
        else:
            add(f"cublas{p}dot_v2", _dot(dtype))
            add(f"cublas{p}nrm2_v2", _nrm2(dtype, real))
            add(f"cublas{p}asum_v2", _asum(dtype, real))
            add(f"cublas{p}rot_v2", _rot(dtype, real, real))
            add(f"cublas{p}ger_v2", _ger(dtype, conj=False))
    add("cublasGemmEx", _gemm_ex)
    add("cublasGemmBatchedEx", _gemm_batched_ex)
    add("cublasGemmStridedBatchedEx", _gemm_strided_ex)
    add("cublasSetMathMode", _set_math_mode)
    add("cublasGetMathMode", lambda mem, handle: handle.math_mode)
    add("cublasSetAtomicsMode", _set_atomics_mode)
    add("cublasGetAtomicsMode", lambda mem, handle: handle.atomics_mode)
    add("cublasSetWorkspace_v2", _set_workspace)
    return calls


CALLS: dict = _table()
