"""cuBLASLt (libcublasLt.so.13) on the client, as far as GEMM programs use
it: handles, matmul descriptors, matrix layouts, preferences, the
heuristic and cublasLtMatmul.

Descriptors, layouts and preferences are plain data kept here, their
attributes as the bytes the program set.  A handle is a cuBLAS handle on
the device current at cublasLtCreate; a program's cuBLAS handle serves as
one too, as with NVIDIA's cuBLAS (PyTorch's getCurrentCUDABlasLtHandle()
is its cuBLAS handle, cast), and keeps its own stream and pointer mode: a
matmul's are for its own calls only.  cublasLtMatmul is sent as the
cublasGemmStridedBatchedEx it describes (client/libraries/cublas.py's forwarder:
the same checks, asynchronous in the given stream), after a copy of C into
D when they differ.

An epilogue is one more call after the GEMM, in the same stream on the same
handle (rcuda/blas_rules.py's MATMUL_EPILOGUE, defined once for both
backends by server/library_calls.py's matmul_epilogue), which applies it to
D in place: CUBLASLT_EPILOGUE_RELU, _BIAS, _RELU_BIAS, _GELU, _GELU_BIAS
and the AUX forms RELU_AUX, RELU_AUX_BIAS, GELU_AUX, GELU_AUX_BIAS.  The
bias (CUBLASLT_MATMUL_DESC_BIAS_POINTER: m elements, of
CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE or D's type, BIAS_BATCH_STRIDE apart
in a batch) is added to every column before the activation; GELU is the
tanh approximation, as cuBLASLt's; the aux output (EPILOGUE_AUX_POINTER,
_AUX_LD, _AUX_BATCH_STRIDE) is RELU's bitmask (where the input was > 0;
cuBLASLt leaves its layout opaque, meant for its DRELU: rcuda's is bit
i + j * ld of a batch's mask, the lowest bit of each byte first, the unused
bits of a column's last byte written 0) or GELU's input (of
EPILOGUE_AUX_DATA_TYPE or D's type).  D may be float, double or half; the
epilogue computes in float for half and float, double for double, and
half D is rounded twice (by the GEMM, then by the epilogue) where cuBLASLt
rounds once.  Complex and bfloat16 D, the backward epilogues (DRELU,
DGELU, their BGRAD forms, BGRADA, BGRADB), a transposed C, orders other
than column-major and per-row alpha vectors answer
CUBLAS_STATUS_NOT_SUPPORTED; a missing bias or aux pointer, or an aux
leading dimension or batch stride cuBLASLt refuses, answer
CUBLAS_STATUS_INVALID_VALUE before anything is sent.  The heuristic offers
one algorithm, which needs no workspace.
"""
from __future__ import annotations

import contextlib
import functools
import itertools
import struct

from rcuda import blas_rules
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
#: Attribute -> struct format, for the attributes Matmul reads (others are kept, unread): the compute
#: and scale types, pointer mode, transposes, the epilogue, the bias pointer and batch stride, the aux
#: pointer, leading dimension and batch stride, the aux and bias data types.
DESC_FORMATS = {0: "i", 1: "i", 2: "i", 3: "i", 4: "i", 5: "i", 7: "I", 8: "Q", 10: "q", 11: "Q", 12: "q", 13: "q",
                22: "i", 26: "i"}
LAYOUT_FORMATS = {0: "i", 1: "i", 2: "Q", 3: "Q", 4: "q", 5: "i", 6: "q"}
ORDER_COL = 0
EPILOGUE, BIAS_POINTER, BIAS_BATCH_STRIDE, AUX_POINTER, AUX_LD, AUX_BATCH_STRIDE, AUX_DATA_TYPE, BIAS_DATA_TYPE = \
    7, 8, 10, 11, 12, 13, 22, 26


class LtHandle(BlasHandle):
    library = "cublasLt"


def _lt_handle(lightHandle, call: str) -> BlasHandle:
    """The handle a matmul or the heuristic runs on: a cublasLtCreate
    handle, or a cuBLAS handle cast to cublasLtHandle_t."""
    return objects.get(interposer.address(lightHandle), BlasHandle, call, "CUBLAS_STATUS_NOT_INITIALIZED")


@contextlib.contextmanager
def _settings(handle: BlasHandle, stream, pointer_mode: int):
    """`handle` in a matmul's own stream and pointer mode for the calls
    inside, its own (a cuBLAS handle's cublasSetStream, cublasSetPointerMode)
    back after them."""
    saved = handle.stream, handle.stream_handle, handle.pointer_mode
    handle.use_stream(stream)
    handle.pointer_mode = pointer_mode
    try:
        yield
    finally:
        handle.stream, handle.stream_handle, handle.pointer_mode = saved


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
    # the epilogue and the bias and aux types read back as cuBLASLt's defaults
    return _new(Described("matmul descriptor", DESC_FORMATS, a0=computeType, a1=scaleType,
                          a7=blas_rules.EPILOGUE_DEFAULT, a22=-1, a26=-1), matmulDesc, "matmulDesc")


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
    if desc.get(5) != 0:
        raise LibraryError(NOT_SUPPORTED, f"{call}: rcuda's cuBLASLt takes an untransposed C")
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
    epilogue = desc.get(EPILOGUE, blas_rules.EPILOGUE_DEFAULT)
    if epilogue != blas_rules.EPILOGUE_DEFAULT:  # its pointers and leading dimensions are checked at the call
        blas_rules.check_epilogue_support(epilogue, d.get(0), _data_type(desc, BIAS_DATA_TYPE, d),
                                          _data_type(desc, AUX_DATA_TYPE, d))
    return {"transa": transa, "transb": transb, "m": m, "n": n, "k": k, "batch": batch,
            "compute": desc.get(0), "pointer_mode": desc.get(2), "epilogue": epilogue}


def _data_type(desc: Described, attribute: int, d: Described) -> int:
    """The bias's or aux matrix's cudaDataType: as set, else D's (-1, the default)."""
    data_type = desc.get(attribute, -1)
    return d.get(0) if data_type == -1 else data_type


def _epilogue_arguments(desc: Described, d: Described, g: dict, dst: int) -> list:
    """blas_rules.MATMUL_EPILOGUE's arguments (EPILOGUE_ARGUMENTS) for the GEMM `g` into D at `dst`."""
    batched = g["batch"] > 1
    values = {"epilogue": g["epilogue"], "m": g["m"], "n": g["n"], "batch": g["batch"], "d": dst,
              "d_type": d.get(0), "ldd": d.get(4), "stride_d": d.get(6) if d.get(5, 1) > 1 else 0,
              "bias": desc.get(BIAS_POINTER), "bias_type": _data_type(desc, BIAS_DATA_TYPE, d),
              "bias_stride": desc.get(BIAS_BATCH_STRIDE) if batched else 0,
              "aux": desc.get(AUX_POINTER), "aux_type": _data_type(desc, AUX_DATA_TYPE, d),
              "aux_ld": desc.get(AUX_LD), "aux_stride": desc.get(AUX_BATCH_STRIDE) if batched else 0}
    blas_rules.check_epilogue(values)  # the call's own status, before anything is sent
    return [values[name] for name in blas_rules.EPILOGUE_ARGUMENTS]


@functools.cache
def _strided_gemm():
    """cublas.py's forwarder of cublasGemmStridedBatchedEx, made once."""
    return cublas.generic("cublasGemmStridedBatchedEx", LIBRARY_FUNCTIONS["cublasGemmStridedBatchedEx"])


@library()
def cublasLtMatmul(lightHandle, computeDesc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo,
                   workspace, workspaceSizeInBytes, stream):
    call = "cublasLtMatmul"
    handle = _lt_handle(lightHandle, call)
    desc = _described(computeDesc, "matmul descriptor", call)
    a, b, c, d = (_described(x, "matrix layout", call) for x in (Adesc, Bdesc, Cdesc, Ddesc))
    g = _gemm(desc, a, b, c, d, call)
    dst, src = interposer.address(D), interposer.address(C)
    epilogue = _epilogue_arguments(desc, d, g, dst) if g["epilogue"] != blas_rules.EPILOGUE_DEFAULT else None
    with _settings(handle, stream, g["pointer_mode"]):
        if dst != src and g["m"] and g["n"]:
            # D = alpha op(A) op(B) + beta C, computed in place in D: C first
            size = ELEMENT_BYTES[d.get(0)]
            for i in range(g["batch"] if c.get(5, 1) > 1 else 1):
                cublas._copy_2d(dst + i * d.get(6) * size, d.get(4) * size, src + i * c.get(6) * size,
                                c.get(4) * size, g["m"] * size, g["n"], cublas.D2D, stream)
        strides = [layout.get(6) if layout.get(5, 1) > 1 else 0 for layout in (a, b, d)]
        _strided_gemm()(handle.handle, g["transa"], g["transb"], g["m"], g["n"], g["k"], alpha,
                        interposer.address(A), a.get(0), a.get(4), strides[0],
                        interposer.address(B), b.get(0), b.get(4), strides[1],
                        beta, dst, d.get(0), d.get(4), strides[2], g["batch"], g["compute"], -1)
        if epilogue is not None and g["m"] and g["n"] and g["batch"]:
            handle.call(blas_rules.MATMUL_EPILOGUE, epilogue)  # after the GEMM, in its stream
    return SUCCESS


@library()
def cublasLtMatmulAlgoGetHeuristic(lightHandle, operationDesc, Adesc, Bdesc, Cdesc, Ddesc, preference,
                                   requestedAlgoCount, heuristicResultsArray, returnAlgoCount):
    """One algorithm (rcuda's): the GEMM it forwards, needing no workspace."""
    call = "cublasLtMatmulAlgoGetHeuristic"
    _lt_handle(lightHandle, call)
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
