"""cuBLASLt's epilogues (client/libraries/cublaslt.py, applied by
server/library_calls.py's matmul_epilogue): tests/cuda/cublaslt_epilogues.cu
unmodified through rcuda on a sim server and, with a GPU at hand, on a cupy
server (CuPy applying the same definition); and the definition itself on
numpy arrays, against formulas written out here."""
from __future__ import annotations

import math

import numpy as np
import pytest

from conftest import requires_nvcc
from nvidia_libraries import assert_library_is_rcudas, library_flags, run_on_gpu
from program_paths import check_passed, check_section, run_on_sim
from rcuda import blas_rules
from rcuda.errors import ProtocolError
from rcuda.library_errors import LibraryError
from rcuda.server.library_calls import matmul_epilogue

SECTIONS = ["relu", "bias", "relu_bias", "gelu", "gelu_bias", "relu_aux", "gelu_aux", "batched", "types", "refused"]
E = blas_rules.EPILOGUES


@pytest.fixture(scope="module")
def result(compile_cuda):
    return run_on_sim(compile_cuda, "cublaslt_epilogues.cu", "sim_kernels.py", devices=1,
                      flags=library_flags("cublasLt"))


@requires_nvcc
@pytest.mark.parametrize("section", SECTIONS)
def test_section(result, section):
    check_section(result, section)


@requires_nvcc
def test_program_passes(result):
    check_passed(result, "cublaslt_epilogues.cu")
    assert_library_is_rcudas(result.stdout, "cublasLt")


@requires_nvcc
def test_on_a_gpu(compile_cuda):
    """The cupy backend: cuBLAS's GEMM, then the epilogue in CuPy on the same stream."""
    check_section(run_on_gpu(compile_cuda, "cublaslt_epilogues.cu", "cublasLt"), *SECTIONS)


# ---------------------------------------------------------------- the definition, on numpy


class Memory:
    """A flat float64-aligned buffer standing for device memory, addressed from BASE."""

    BASE = 0x1000

    def __init__(self, size: int):
        self.raw = np.zeros(size, np.uint8)

    def view(self, ptr, dtype, batch, rows, cols, ld, stride):
        dtype = np.dtype(dtype)
        item = dtype.itemsize
        return np.ndarray((batch, rows, cols), dtype, buffer=self.raw, offset=ptr - self.BASE,
                          strides=(stride * item, item, ld * item))


def arguments(**given) -> list:
    values = dict(epilogue=E["CUBLASLT_EPILOGUE_RELU"], m=0, n=0, batch=1, d=0, d_type=0, ldd=1, stride_d=0, bias=0,
                  bias_type=0, bias_stride=0, aux=0, aux_type=0, aux_ld=0, aux_stride=0)
    values.update(given)
    return [values[name] for name in blas_rules.EPILOGUE_ARGUMENTS]


def tanh_gelu(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


@pytest.mark.parametrize("dtype,code", [(np.float32, 0), (np.float64, 1), (np.float16, 2)])
def test_gelu_aux_bias_batched(dtype, code):
    m, n, batch, ldd, aux_ld = 5, 3, 2, 7, 8
    mem = Memory(4096)
    d_ptr, bias_ptr, aux_ptr = mem.BASE, mem.BASE + 1024, mem.BASE + 2048
    rng = np.random.default_rng(1)
    d = mem.view(d_ptr, dtype, batch, ldd, n, ldd, ldd * n)
    d[...] = rng.uniform(-3, 3, d.shape)
    before = d.copy()
    bias = mem.view(bias_ptr, dtype, batch, m, 1, m, m)
    bias[...] = rng.uniform(-1, 1, bias.shape)
    matmul_epilogue(np, mem.view, arguments(epilogue=E["CUBLASLT_EPILOGUE_GELU_AUX_BIAS"], m=m, n=n, batch=batch,
                                            d=d_ptr, d_type=code, ldd=ldd, stride_d=ldd * n, bias=bias_ptr,
                                            bias_type=code, bias_stride=m, aux=aux_ptr, aux_type=code,
                                            aux_ld=aux_ld, aux_stride=aux_ld * n))
    x = before[:, :m].astype(np.float64) + bias.astype(np.float64)
    tol = {np.float16: 2e-3, np.float32: 1e-6, np.float64: 1e-14}[dtype]
    np.testing.assert_allclose(d[:, :m].astype(np.float64), tanh_gelu(x), rtol=tol, atol=tol)
    assert np.array_equal(d[:, m:], before[:, m:])  # rows past m untouched
    aux = mem.view(aux_ptr, dtype, batch, m, n, aux_ld, aux_ld * n)
    np.testing.assert_allclose(aux.astype(np.float64), x, rtol=tol, atol=tol)


def test_relu_bitmask_layout():
    """Bit i + j * aux_ld of a batch's mask, the lowest bit of a byte first; the rest of the aux untouched."""
    m, n, batch, aux_ld = 11, 3, 2, 128
    mem = Memory(4096)
    d_ptr, aux_ptr = mem.BASE, mem.BASE + 1024
    d = mem.view(d_ptr, np.float32, batch, m, n, m, m * n)
    d[...] = np.random.default_rng(2).uniform(-1, 1, d.shape)
    x = d.copy()
    mem.raw[1024:] = 0xA5
    matmul_epilogue(np, mem.view, arguments(epilogue=E["CUBLASLT_EPILOGUE_RELU_AUX"], m=m, n=n, batch=batch,
                                            d=d_ptr, ldd=m, stride_d=m * n, aux=aux_ptr, aux_ld=aux_ld,
                                            aux_stride=aux_ld * n))
    assert np.array_equal(d, np.maximum(x, 0))
    bits = np.unpackbits(mem.raw[1024:1024 + batch * n * aux_ld // 8], bitorder="little")
    for b in range(batch):
        for j in range(n):
            column = bits[b * n * aux_ld + j * aux_ld:][:aux_ld]
            assert list(column[:m]) == list(x[b, :, j] > 0)
            assert not column[m:16].any()  # the rest of the column's second byte: 0
            assert np.array_equal(column[16:], np.unpackbits(np.full(14, 0xA5, np.uint8), bitorder="little"))
    assert (mem.raw[1024 + batch * n * aux_ld // 8:] == 0xA5).all()


def test_refusals():
    with pytest.raises(LibraryError, match="NOT_SUPPORTED.*DRELU_BGRAD"):
        matmul_epilogue(np, None, arguments(epilogue=8 | 128 | 16, m=1, n=1))
    with pytest.raises(LibraryError, match="NOT_SUPPORTED"):
        matmul_epilogue(np, None, arguments(m=1, n=1, d_type=4))  # complex D
    with pytest.raises(LibraryError, match="INVALID_VALUE.*AUX_LD"):
        matmul_epilogue(np, None, arguments(epilogue=E["CUBLASLT_EPILOGUE_RELU_AUX"], m=4, n=1, ldd=4, aux=8,
                                            aux_ld=64))
    with pytest.raises(LibraryError, match="INVALID_VALUE.*BIAS_POINTER"):
        matmul_epilogue(np, None, arguments(epilogue=E["CUBLASLT_EPILOGUE_BIAS"], m=4, n=1, ldd=4))
    with pytest.raises(ProtocolError):
        matmul_epilogue(np, None, [2, 1, 1])
