"""Tensor maps encoded by the GPU server's CUDA driver (cuTensorMapEncode*,
cuTensorMapReplaceAddress), through ctypes: CuPy binds none of them.  Their
128 bytes are that driver's, which the program's kernels hand to the GPU."""
from __future__ import annotations

import ctypes
import functools

from rcuda.errors import CudaError
from rcuda.tensor_maps import IM2COL, IM2COL_WIDE, SIZE, TILED, TensorMap, TensorMapError

from .cuda_status import driver_status

CUDA_ERROR_INVALID_VALUE = 1


@functools.cache
def _driver():
    return ctypes.CDLL("libcuda.so.1")


def _aligned() -> tuple[object, int]:
    """A CUtensorMap's room, 64-byte aligned as the driver requires: (buffer, address)."""
    buffer = ctypes.create_string_buffer(SIZE + 64)
    address = -(-ctypes.addressof(buffer) // 64) * 64
    return buffer, address


def _array(kind, values):
    return (kind * max(len(values), 1))(*values)


def encode(m: TensorMap) -> bytes:
    buffer, at = _aligned()
    u64, u32, i32 = ctypes.c_uint64, ctypes.c_uint32, ctypes.c_int
    common = (ctypes.c_void_p(at), m.data_type, u32(m.rank), ctypes.c_void_p(m.address), _array(u64, m.dims),
              _array(u64, m.strides))
    tail = (m.interleave, m.swizzle, m.l2_promotion, m.oob_fill)
    lib = _driver()
    if m.kind == TILED:
        status = lib.cuTensorMapEncodeTiled(*common, _array(u32, m.box), _array(u32, m.element_strides), *tail)
    elif m.kind == IM2COL:
        status = lib.cuTensorMapEncodeIm2col(*common, _array(i32, m.lower), _array(i32, m.upper), u32(m.channels),
                                             u32(m.pixels), _array(u32, m.element_strides), *tail)
    elif m.kind == IM2COL_WIDE:
        status = lib.cuTensorMapEncodeIm2colWide(*common, i32(m.lower[0]), i32(m.upper[0]), u32(m.channels),
                                                 u32(m.pixels), _array(u32, m.element_strides), m.interleave, m.mode,
                                                 m.swizzle, m.l2_promotion, m.oob_fill)
    else:
        raise TensorMapError(f"no tensor map kind {m.kind}")
    _check(status, "cuTensorMapEncode")
    return ctypes.string_at(at, SIZE)


def replace_address(raw: bytes, address: int) -> bytes:
    buffer, at = _aligned()
    ctypes.memmove(at, raw, SIZE)
    _check(_driver().cuTensorMapReplaceAddress(ctypes.c_void_p(at), ctypes.c_void_p(address)),
           "cuTensorMapReplaceAddress")
    return ctypes.string_at(at, SIZE)


def _check(status: int, call: str) -> None:
    if status == CUDA_ERROR_INVALID_VALUE:
        raise TensorMapError(f"{call}: the driver refused the parameters")
    if status:
        raise CudaError(driver_status(status), f"{call} failed with CUresult {status}")
