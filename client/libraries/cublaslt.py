"""cuBLASLt (libcublasLt.so.13) on the client, as far as GEMM programs use
it: handles, matmul descriptors, matrix layouts, preferences, the
heuristic and cublasLtMatmul.

Descriptors, layouts and preferences are plain data kept here, their
attributes as the bytes the program set.  A handle is a cuBLAS handle on
the device current at cublasLtCreate, and cublasLtMatmul is sent as the
cublasGemmStridedBatchedEx it describes (client/libraries/cublas.py's forwarder:
the same checks, asynchronous in the given stream), after a copy of C into
D when they differ.  Epilogues other than the default, row-major and other
orders, and per-column alpha vectors answer CUBLAS_STATUS_NOT_SUPPORTED; the
heuristic offers one algorithm, which needs no workspace.
"""
from __future__ import annotations

import functools
import itertools
import struct

from rcuda._generated.cudart_api import CUDART_VERSION
from rcuda._generated.libraries_api import LIBRARIES, LIBRARY_FUNCTIONS
from rcuda.library_errors import LibraryError

from .. import interposer
from . import cublas
from .cublas import BlasHandle
from .registry import library
from .objects import objects

SUCCESS = 0
INVALID_VALUE, NOT_SUPPORTED = "CUBLAS_STATUS_INVALID_VALUE", "CUBLAS_STATUS_NOT_SUPPORTED"
VERSION = LIBRARIES["cublasLt"]["version"]
#: Descriptors' handles (never reused).
_handles = itertools.count(0x5E00_0000_0000, 0x10)
_descriptors: dict[int, object] = {}
#: Bytes per element of the matrix types a layout may have.
ELEMENT_BYTES = {0: 4, 1: 8, 2: 2, 4: 8, 5: 16}
#: Attribute -> struct format, for the attributes Matmul reads (others are kept, unread).
DESC_FORMATS = {0: "i", 1: "i", 2: "i", 3: "i", 4: "i", 5: "i", 7: "I"}
LAYOUT_FORMATS = {0: "i", 1: "i", 2: "Q", 3: "Q", 4: "q", 5: "i", 6: "q"}
EPILOGUE_DEFAULT, ORDER_COL = 1, 0


class LtHandle(BlasHandle):
    library = "cublasLt"


class Described:
    """A matmul descriptor, matrix layout or preference: its attributes by number."""

    def __init__(self, kind: str, formats: dict, **values):
        self.kind, self.formats = kind, formats
        self.attributes: dict[int, bytes] = {}
        for attribute, value in values.items():
            self.set(int(attribute.removeprefix("a")), value)

    def set(self, attribute: int, value) -> None:
        self.attributes[attribute] = struct.pack("<" + self.formats[attribute], value)

    def get(self, attribute: int, default=0):
        raw = self.attributes.get(attribute)
        return struct.unpack("<" + self.formats[attribute], raw)[0] if raw is not None else default


def _new(obj: Described, out, what: str) -> int:
    if out == interposer.ffi.NULL:
        raise LibraryError(INVALID_VALUE, f"{what} is NULL")
    handle = next(_handles)
    _descriptors[handle] = obj
    interposer.ffi.cast("uintptr_t *", out)[0] = handle
    return SUCCESS


def _described(pointer, kind: str, call: str) -> Described:
    obj = _descriptors.get(interposer.address(pointer))
    if obj is None or obj.kind != kind:
        raise LibraryError(INVALID_VALUE, f"{call}: {interposer.address(pointer):#x} is not a {kind}")
    return obj


def _destroy(pointer, kind: str, call: str) -> int:
    if pointer != interposer.ffi.NULL:
        _described(pointer, kind, call)
        del _descriptors[interposer.address(pointer)]
    return SUCCESS


def _set_attribute(pointer, kind: str, attr: int, buf, size: int, call: str) -> int:
    obj = _described(pointer, kind, call)
    if buf == interposer.ffi.NULL:
        raise LibraryError(INVALID_VALUE, f"{call}: buf is NULL")
    data = bytes(interposer.ffi.buffer(interposer.ffi.cast("char *", buf), size))
    expected = struct.calcsize("<" + obj.formats[attr]) if attr in obj.formats else None
    if expected is not None and size != expected:
        raise LibraryError(INVALID_VALUE, f"{call}: attribute {attr} takes {expected} bytes, not {size}")
    obj.attributes[attr] = data
    return SUCCESS


def _get_attribute(pointer, kind: str, attr: int, buf, size: int, written, call: str) -> int:
    obj = _described(pointer, kind, call)
    data = obj.attributes.get(attr, bytes(struct.calcsize("<" + obj.formats.get(attr, "i"))))
    if size == 0 and written != interposer.ffi.NULL:
        written[0] = len(data)  # a size query
        return SUCCESS
    if buf == interposer.ffi.NULL or size < len(data):
        raise LibraryError(INVALID_VALUE, f"{call}: a buffer of {size} bytes for {len(data)}")
    interposer.ffi.memmove(buf, data, len(data))
    if written != interposer.ffi.NULL:
        written[0] = len(data)
    return SUCCESS


# ---------------------------------------------------------------- handles


@library()
def cublasLtCreate(lightHandle):
    if lightHandle == interposer.ffi.NULL:
        raise LibraryError(INVALID_VALUE, "cublasLtCreate: lightHandle is NULL")
    obj = objects.create(LtHandle, "cublasCreate_v2", [])
    interposer.ffi.cast("uintptr_t *", lightHandle)[0] = obj.handle
    return SUCCESS


@library()
def cublasLtDestroy(lightHandle):
    objects.destroy(objects.get(interposer.address(lightHandle), LtHandle, "cublasLtDestroy",
                                "CUBLAS_STATUS_NOT_INITIALIZED"), "cublasDestroy_v2")
    return SUCCESS


@library()
def cublasLtGetVersion():
    return VERSION[0] * 10000 + VERSION[1] * 100 + VERSION[2]


@library()
def cublasLtGetCudartVersion():
    return CUDART_VERSION


@library()
def cublasLtGetProperty(type, value):
    if type not in (0, 1, 2) or value == interposer.ffi.NULL:
        raise LibraryError(INVALID_VALUE, f"cublasLtGetProperty: property {type}")
    value[0] = VERSION[type]
    return SUCCESS


@library()
def cublasLtGetStatusName(status):
    return cublas.cublasGetStatusName(status)


@library()
def cublasLtGetStatusString(status):
    return cublas.cublasGetStatusString(status)


# ---------------------------------------------------------------- descriptors


@library()
def cublasLtMatmulDescCreate(matmulDesc, computeType, scaleType):
    return _new(Described("matmul descriptor", DESC_FORMATS, a0=computeType, a1=scaleType),
                matmulDesc, "matmulDesc")


@library()
def cublasLtMatmulDescDestroy(matmulDesc):
    return _destroy(matmulDesc, "matmul descriptor", "cublasLtMatmulDescDestroy")


@library()
def cublasLtMatmulDescSetAttribute(matmulDesc, attr, buf, sizeInBytes):
    return _set_attribute(matmulDesc, "matmul descriptor", attr, buf, sizeInBytes, "cublasLtMatmulDescSetAttribute")


@library()
def cublasLtMatmulDescGetAttribute(matmulDesc, attr, buf, sizeInBytes, sizeWritten):
    return _get_attribute(matmulDesc, "matmul descriptor", attr, buf, sizeInBytes, sizeWritten,
                          "cublasLtMatmulDescGetAttribute")


@library()
def cublasLtMatrixLayoutCreate(matLayout, type, rows, cols, ld):
    if type not in ELEMENT_BYTES:
        raise LibraryError(NOT_SUPPORTED, f"cublasLtMatrixLayoutCreate: data type {type}")
    return _new(Described("matrix layout", LAYOUT_FORMATS, a0=type, a2=rows, a3=cols, a4=ld, a5=1),
                matLayout, "matLayout")


@library()
def cublasLtMatrixLayoutDestroy(matLayout):
    return _destroy(matLayout, "matrix layout", "cublasLtMatrixLayoutDestroy")


@library()
def cublasLtMatrixLayoutSetAttribute(matLayout, attr, buf, sizeInBytes):
    return _set_attribute(matLayout, "matrix layout", attr, buf, sizeInBytes, "cublasLtMatrixLayoutSetAttribute")


@library()
def cublasLtMatrixLayoutGetAttribute(matLayout, attr, buf, sizeInBytes, sizeWritten):
    return _get_attribute(matLayout, "matrix layout", attr, buf, sizeInBytes, sizeWritten,
                          "cublasLtMatrixLayoutGetAttribute")


@library()
def cublasLtMatmulPreferenceCreate(pref):
    return _new(Described("preference", {0: "I", 1: "Q"}), pref, "pref")


@library()
def cublasLtMatmulPreferenceDestroy(pref):
    return _destroy(pref, "preference", "cublasLtMatmulPreferenceDestroy")


@library()
def cublasLtMatmulPreferenceSetAttribute(pref, attr, buf, sizeInBytes):
    return _set_attribute(pref, "preference", attr, buf, sizeInBytes, "cublasLtMatmulPreferenceSetAttribute")


@library()
def cublasLtMatmulPreferenceGetAttribute(pref, attr, buf, sizeInBytes, sizeWritten):
    return _get_attribute(pref, "preference", attr, buf, sizeInBytes, sizeWritten,
                          "cublasLtMatmulPreferenceGetAttribute")


# ---------------------------------------------------------------- matmul


def _gemm(desc: Described, a: Described, b: Described, c: Described, d: Described, call: str) -> dict:
    """The cublasGemmStridedBatchedEx arguments D = alpha op(A) op(B) + beta C describes."""
    if desc.get(7, EPILOGUE_DEFAULT) != EPILOGUE_DEFAULT or desc.get(5) != 0:
        raise LibraryError(NOT_SUPPORTED, f"{call}: rcuda's cuBLASLt runs the default epilogue, untransposed C")
    if desc.get(2) not in (0, 1):
        raise LibraryError(NOT_SUPPORTED, f"{call}: pointer mode {desc.get(2)} (host or device scalars only)")
    layouts = {"A": a, "B": b, "C": c, "D": d}
    if any(layout.get(1, ORDER_COL) != ORDER_COL for layout in layouts.values()):
        raise LibraryError(NOT_SUPPORTED, f"{call}: rcuda's cuBLASLt takes column-major layouts only")
    transa, transb = desc.get(3), desc.get(4)
    m, n = d.get(2), d.get(3)
    k = a.get(3) if transa == 0 else a.get(2)
    rows_a, cols_a = (m, k) if transa == 0 else (k, m)
    rows_b, cols_b = (k, n) if transb == 0 else (n, k)
    batch = d.get(5, 1)
    problems = [name for name, layout, shape in (("A", a, (rows_a, cols_a)), ("B", b, (rows_b, cols_b)),
                                                  ("C", c, (m, n))) if (layout.get(2), layout.get(3)) != shape]
    problems += [name for name, layout in layouts.items() if layout.get(5, 1) not in (1, batch)]
    if c.get(0) != d.get(0) or problems:
        raise LibraryError(INVALID_VALUE, f"{call}: the layouts of {', '.join(problems) or 'C and D'} do not fit "
                                          f"D ({m} x {n}, batch {batch})")
    return {"transa": transa, "transb": transb, "m": m, "n": n, "k": k, "batch": batch,
            "compute": desc.get(0), "pointer_mode": desc.get(2)}


@functools.cache
def _strided_gemm():
    """cublas.py's forwarder of cublasGemmStridedBatchedEx, made once."""
    return cublas.generic("cublasGemmStridedBatchedEx", LIBRARY_FUNCTIONS["cublasGemmStridedBatchedEx"])


@library()
def cublasLtMatmul(lightHandle, computeDesc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo,
                   workspace, workspaceSizeInBytes, stream):
    call = "cublasLtMatmul"
    handle = objects.get(interposer.address(lightHandle), LtHandle, call, "CUBLAS_STATUS_NOT_INITIALIZED")
    desc = _described(computeDesc, "matmul descriptor", call)
    a, b, c, d = (_described(x, "matrix layout", call) for x in (Adesc, Bdesc, Cdesc, Ddesc))
    g = _gemm(desc, a, b, c, d, call)
    handle.use_stream(stream)
    handle.pointer_mode = g["pointer_mode"]
    dst, src = interposer.address(D), interposer.address(C)
    if dst != src and g["m"] and g["n"]:
        # D = alpha op(A) op(B) + beta C, computed in place in D: C first
        size = ELEMENT_BYTES[d.get(0)]
        for i in range(g["batch"] if c.get(5, 1) > 1 else 1):
            cublas._copy_2d(dst + i * d.get(6) * size, d.get(4) * size, src + i * c.get(6) * size,
                                c.get(4) * size, g["m"] * size, g["n"], cublas.D2D, stream)
    strides = [layout.get(6) if layout.get(5, 1) > 1 else 0 for layout in (a, b, d)]
    _strided_gemm()(handle.handle, g["transa"], g["transb"], g["m"], g["n"], g["k"], alpha,
            interposer.address(A), a.get(0), a.get(4), strides[0], interposer.address(B), b.get(0), b.get(4), strides[1],
            beta, dst, d.get(0), d.get(4), strides[2], g["batch"], g["compute"], -1)
    return SUCCESS


@library()
def cublasLtMatmulAlgoGetHeuristic(lightHandle, operationDesc, Adesc, Bdesc, Cdesc, Ddesc, preference,
                                   requestedAlgoCount, heuristicResultsArray, returnAlgoCount):
    """One algorithm (rcuda's): the GEMM it forwards, needing no workspace."""
    call = "cublasLtMatmulAlgoGetHeuristic"
    objects.get(interposer.address(lightHandle), LtHandle, call, "CUBLAS_STATUS_NOT_INITIALIZED")
    desc = _described(operationDesc, "matmul descriptor", call)
    layouts = [_described(x, "matrix layout", call) for x in (Adesc, Bdesc, Cdesc, Ddesc)]
    if requestedAlgoCount < 1 or heuristicResultsArray == interposer.ffi.NULL or returnAlgoCount == interposer.ffi.NULL:
        raise LibraryError(INVALID_VALUE, f"{call}: {requestedAlgoCount} algorithms asked for")
    try:
        _gemm(desc, *layouts, call)
    except LibraryError:
        returnAlgoCount[0] = 0
        raise
    result = heuristicResultsArray[0]
    interposer.ffi.memmove(interposer.ffi.addressof(result), bytes(interposer.ffi.sizeof("cublasLtMatmulHeuristicResult_t")),
                    interposer.ffi.sizeof("cublasLtMatmulHeuristicResult_t"))
    result.workspaceSize, result.state, result.wavesCount = 0, SUCCESS, 1.0
    returnAlgoCount[0] = 1
    return SUCCESS
