"""cuBLAS (libcublas.so.13) on the client: handles, their settings, the
host-device copies of cublasSet/GetMatrix/Vector, and the generic forwarder
that sends every cuBLAS computation to the handle's GPU.

A handle lives on the device current at cublasCreate; its pointer mode,
stream and math settings are kept here and its computations go to that
GPU's server in its stream.  The forwarder reads each parameter by its role
(native/gen_libraries.py, native/library_annotations.ini): values as they
are, device pointers as addresses; `alpha`/`beta` are read from host memory
now in CUBLAS_POINTER_MODE_HOST and by the server at run time in
CUBLAS_POINTER_MODE_DEVICE; a `result` is written back to host memory (the
call then waits, as cuBLAS's does) or by the server into device memory (the
call does not wait).  Shapes, leading dimensions, increments and
enumerators are checked here first (rcuda/blas_rules.py), so a mistake is
the call's own CUBLAS_STATUS_INVALID_VALUE, as with cuBLAS; what only the
server can see (a bad device pointer) surfaces at the next synchronising
call, as a GPU's faults do.
"""
from __future__ import annotations

import struct

from rcuda import blas_rules
from rcuda._generated.cudart_api import CUDART_VERSION
from rcuda._generated.libraries_api import LIBRARIES
from rcuda.errors import CudaError, cudaError
from rcuda.library_errors import LibraryError

from .. import interposer
from ..runtime import core as runtime_core
from .objects import LibraryObject, objects
from .registry import library, required, status

SUCCESS = 0
INVALID_VALUE = "CUBLAS_STATUS_INVALID_VALUE"
NOT_INITIALIZED = "CUBLAS_STATUS_NOT_INITIALIZED"
POINTER_MODE_HOST, POINTER_MODE_DEVICE = 0, 1
VERSION = LIBRARIES["cublas"]["version"]

#: C types of the scalars the forwarder reads and writes, by dtype.
C_TYPES = {"f4": "float *", "f8": "double *", "c8": "cuComplex *", "c16": "cuDoubleComplex *",
           "f2": "uint16_t *", "i4": "int *", "i8": "int64_t *"}
#: cudaDataType values a scale or result type may name.
DATA_TYPES = {0: "f4", 1: "f8", 2: "f2", 4: "c8", 5: "c16", 10: "i4"}
#: cublasComputeType_t: the scale type its GEMMs take (real; complex when C is).
COMPUTE_SCALES = {64: "f2", 65: "f2", 68: "f4", 69: "f4", 74: "f4", 75: "f4", 77: "f4", 78: "f4",
                  70: "f8", 71: "f8", 79: "f8", 72: "i4", 73: "i4"}
COMPLEX_OF = {"f4": "c8", "f8": "c16"}


class BlasHandle(LibraryObject):
    library = "cublas"

    def __init__(self, *args):
        super().__init__(*args)
        self.pointer_mode = POINTER_MODE_HOST
        self.math_mode = 0
        self.atomics_mode = 0
        self.sm_count_target = 0
        self.settings: dict[str, int] = {}  # the emulation settings, as set


def blas_handle(handle, call: str) -> BlasHandle:
    return objects.get(interposer.address(handle), BlasHandle, call, NOT_INITIALIZED)


# ---------------------------------------------------------------- handles


@library()
def cublasCreate_v2(handle):
    if handle == interposer.ffi.NULL:
        raise LibraryError(INVALID_VALUE, "cublasCreate: handle is NULL")
    try:
        obj = objects.create(BlasHandle, "cublasCreate_v2", [])
    except CudaError as exc:
        raise LibraryError(NOT_INITIALIZED, f"cublasCreate: {exc}") from None
    interposer.ffi.cast("uintptr_t *", handle)[0] = obj.handle
    return SUCCESS


@library()
def cublasDestroy_v2(handle):
    objects.destroy(blas_handle(handle, "cublasDestroy"), "cublasDestroy_v2")
    return SUCCESS


@library()
def cublasGetVersion_v2(handle, version):
    blas_handle(handle, "cublasGetVersion")
    _out(version, "version")[0] = VERSION[0] * 10000 + VERSION[1] * 100 + VERSION[2]
    return SUCCESS


@library()
def cublasGetProperty(type, value):
    if type not in (0, 1, 2):
        raise LibraryError(INVALID_VALUE, f"cublasGetProperty: unknown property {type}")
    _out(value, "value")[0] = VERSION[type]
    return SUCCESS


@library()
def cublasGetCudartVersion():
    return CUDART_VERSION


@library()
def cublasGetStatusName(status_value):
    return interposer.c_string(_status_name(status_value))


@library()
def cublasGetStatusString(status_value):
    name = _status_name(status_value)
    text = {"CUBLAS_STATUS_SUCCESS": "success"}.get(name, name.removeprefix("CUBLAS_STATUS_").replace("_", " ").lower())
    return interposer.c_string(text if name != "CUBLAS_STATUS_UNKNOWN" else "unknown error")


def _status_name(value: int) -> str:
    return next((n for n, v in LIBRARIES["cublas"]["statuses"].items() if v == value), "CUBLAS_STATUS_UNKNOWN")


@library()
def cublasSetStream_v2(handle, streamId):
    obj = blas_handle(handle, "cublasSetStream")
    obj.use_stream(streamId)
    return SUCCESS


@library()
def cublasGetStream_v2(handle, streamId):
    obj = blas_handle(handle, "cublasGetStream")
    interposer.ffi.cast("uintptr_t *", _out(streamId, "streamId"))[0] = obj.stream_handle
    return SUCCESS


@library()
def cublasSetPointerMode_v2(handle, mode):
    obj = blas_handle(handle, "cublasSetPointerMode")
    if mode not in (POINTER_MODE_HOST, POINTER_MODE_DEVICE):
        raise LibraryError(INVALID_VALUE, f"cublasSetPointerMode: unknown mode {mode}")
    obj.pointer_mode = mode
    return SUCCESS


@library()
def cublasGetPointerMode_v2(handle, mode):
    _out(mode, "mode")[0] = blas_handle(handle, "cublasGetPointerMode").pointer_mode
    return SUCCESS


@library()
def cublasSetMathMode(handle, mode):
    obj = blas_handle(handle, "cublasSetMathMode")
    if mode & ~(0xF | 16) or (mode & 0xF) not in (0, 1, 2, 3, 4, 8):
        raise LibraryError(INVALID_VALUE, f"cublasSetMathMode: unknown mode {mode}")
    obj.math_mode = mode
    obj.call("cublasSetMathMode", [mode])
    return SUCCESS


@library()
def cublasGetMathMode(handle, mode):
    _out(mode, "mode")[0] = blas_handle(handle, "cublasGetMathMode").math_mode
    return SUCCESS


@library()
def cublasSetAtomicsMode(handle, mode):
    obj = blas_handle(handle, "cublasSetAtomicsMode")
    if mode not in (0, 1):
        raise LibraryError(INVALID_VALUE, f"cublasSetAtomicsMode: unknown mode {mode}")
    obj.atomics_mode = mode
    obj.call("cublasSetAtomicsMode", [mode])
    return SUCCESS


@library()
def cublasGetAtomicsMode(handle, mode):
    _out(mode, "mode")[0] = blas_handle(handle, "cublasGetAtomicsMode").atomics_mode
    return SUCCESS


@library()
def cublasSetWorkspace_v2(handle, workspace, workspaceSizeInBytes):
    obj = blas_handle(handle, "cublasSetWorkspace")
    if workspaceSizeInBytes and workspace == interposer.ffi.NULL:
        raise LibraryError(INVALID_VALUE, "cublasSetWorkspace: a size without a workspace")
    obj.call("cublasSetWorkspace_v2", [interposer.address(workspace), int(workspaceSizeInBytes)])
    return SUCCESS


@library()
def cublasSetSmCountTarget(handle, smCountTarget):
    obj = blas_handle(handle, "cublasSetSmCountTarget")
    if smCountTarget < 0:
        raise LibraryError(INVALID_VALUE, f"cublasSetSmCountTarget: {smCountTarget} < 0")
    obj.sm_count_target = smCountTarget
    return SUCCESS


@library()
def cublasGetSmCountTarget(handle, smCountTarget):
    _out(smCountTarget, "smCountTarget")[0] = blas_handle(handle, "cublasGetSmCountTarget").sm_count_target
    return SUCCESS


def _kept_setting(get_name: str, set_name: str, field: str) -> None:
    """A handle setting the sim has no use for and a GPU's cuBLAS tunes
    with: kept on the handle, read back as set."""
    def setter(handle, value):
        blas_handle(handle, set_name).settings[field] = int(value)
        return SUCCESS

    def getter(handle, value):
        _out(value, field)[0] = blas_handle(handle, get_name).settings.get(field, 0)
        return SUCCESS

    library(set_name)(setter)
    library(get_name)(getter)


for _field in ("EmulationStrategy", "EmulationSpecialValuesSupport", "FixedPointEmulationMantissaControl",
               "FixedPointEmulationMaxMantissaBitCount", "FixedPointEmulationMantissaBitOffset"):
    _kept_setting(f"cublasGet{_field}", f"cublasSet{_field}", _field)


@library()
def cublasLoggerConfigure(logIsOn, logToStdOut, logToStdErr, logFileName):
    return SUCCESS  # rcuda's own log (RCUDA_LOG=debug) traces every call


@library()
def cublasSetLoggerCallback(userCallback):
    return SUCCESS


@library()
def cublasGetLoggerCallback(userCallback):
    interposer.ffi.cast("uintptr_t *", _out(userCallback, "userCallback"))[0] = 0
    return SUCCESS


# ---------------------------------------------------------------- host <-> device copies


def _copy_2d(dst, dpitch, src, spitch, width, height, kind, stream=None):
    """The copy of a cublasSet/Get call, as the runtime's cudaMemcpy2D(Async)
    makes it; a copy CUDA refuses is CUBLAS_STATUS_MAPPING_ERROR, as in cuBLAS."""
    if width == 0 or height == 0:
        return SUCCESS
    implemented = runtime_core.IMPLEMENTED
    if stream is None:
        result = implemented["cudaMemcpy2D"](dst, dpitch, src, spitch, width, height, kind)
    else:
        result = implemented["cudaMemcpy2DAsync"](dst, dpitch, src, spitch, width, height, kind, stream)
    if result:
        raise LibraryError("CUBLAS_STATUS_MAPPING_ERROR", f"the copy failed: {cudaError(result).name}")
    return SUCCESS


def _vector(n, elemSize, x, incx, y, incy, kind, stream=None, what=""):
    if n < 0 or elemSize <= 0 or incx <= 0 or incy <= 0:
        raise LibraryError(INVALID_VALUE, f"{what}: n={n}, elemSize={elemSize}, incx={incx}, incy={incy}")
    return _copy_2d(y, incy * elemSize, x, incx * elemSize, elemSize, n, kind, stream)


def _matrix(rows, cols, elemSize, A, lda, B, ldb, kind, stream=None, what=""):
    if rows < 0 or cols < 0 or elemSize <= 0 or lda < max(1, rows) or ldb < max(1, rows):
        raise LibraryError(INVALID_VALUE, f"{what}: rows={rows}, cols={cols}, elemSize={elemSize}, lda={lda}, "
                                          f"ldb={ldb}")
    return _copy_2d(B, ldb * elemSize, A, lda * elemSize, rows * elemSize, cols, kind, stream)


H2D, D2H, D2D = 1, 2, 3  # cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice


def _register_copies() -> None:
    for suffix in ("", "_64"):
        def set_vector(n, elemSize, x, incx, devicePtr, incy, _s=suffix):
            return _vector(n, elemSize, x, incx, devicePtr, incy, H2D, what="cublasSetVector" + _s)

        def get_vector(n, elemSize, x, incx, y, incy, _s=suffix):
            return _vector(n, elemSize, x, incx, y, incy, D2H, what="cublasGetVector" + _s)

        def set_matrix(rows, cols, elemSize, A, lda, B, ldb, _s=suffix):
            return _matrix(rows, cols, elemSize, A, lda, B, ldb, H2D, what="cublasSetMatrix" + _s)

        def get_matrix(rows, cols, elemSize, A, lda, B, ldb, _s=suffix):
            return _matrix(rows, cols, elemSize, A, lda, B, ldb, D2H, what="cublasGetMatrix" + _s)

        def set_vector_async(n, elemSize, hostPtr, incx, devicePtr, incy, stream, _s=suffix):
            return _vector(n, elemSize, hostPtr, incx, devicePtr, incy, H2D, stream, "cublasSetVectorAsync" + _s)

        def get_vector_async(n, elemSize, devicePtr, incx, hostPtr, incy, stream, _s=suffix):
            return _vector(n, elemSize, devicePtr, incx, hostPtr, incy, D2H, stream, "cublasGetVectorAsync" + _s)

        def set_matrix_async(rows, cols, elemSize, A, lda, B, ldb, stream, _s=suffix):
            return _matrix(rows, cols, elemSize, A, lda, B, ldb, H2D, stream, "cublasSetMatrixAsync" + _s)

        def get_matrix_async(rows, cols, elemSize, A, lda, B, ldb, stream, _s=suffix):
            return _matrix(rows, cols, elemSize, A, lda, B, ldb, D2H, stream, "cublasGetMatrixAsync" + _s)

        for name, body in (("cublasSetVector", set_vector), ("cublasGetVector", get_vector),
                           ("cublasSetMatrix", set_matrix), ("cublasGetMatrix", get_matrix),
                           ("cublasSetVectorAsync", set_vector_async), ("cublasGetVectorAsync", get_vector_async),
                           ("cublasSetMatrixAsync", set_matrix_async), ("cublasGetMatrixAsync", get_matrix_async)):
            library(name + suffix)(body)


_register_copies()


# ---------------------------------------------------------------- computations


def generic(name: str, row: dict):
    """The forwarder of cuBLAS computation `name` (None when its parameters'
    roles are unknown: it then answers CUBLAS_STATUS_NOT_SUPPORTED)."""
    roles = row.get("roles")
    if not roles:
        return None
    names = [pname for pname, _ in row["params"]][1:]
    roles = roles[1:]
    host_info = "info" in names and roles[names.index("info")].startswith("host_out")  # getrs, geqrf, gels
    check = blas_rules.checker(name)

    def forward(handle, *args):
        obj = blas_handle(handle, name)
        named = dict(zip(names, args))
        info = blas_rules.info(name, named) if host_info else 0
        if info:  # cuBLAS says which argument in *info too
            _out(named["info"], "info")[0] = info
        check(named)
        wire, outputs = [], []
        for role, value, pname in zip(roles, args, names):
            if role == "value":
                wire.append(value if isinstance(value, (int, float)) else int(value))
            elif role == "dev":
                wire.append(interposer.address(value))
            else:
                kind, dtype = role.split(":")
                typed = dtype == "typed"
                if typed:
                    dtype = _typed(name, named, kind)
                if kind == "scalar" and obj.pointer_mode == POINTER_MODE_DEVICE:
                    wire.append({"scalar": interposer.address(value), "dtype": dtype})
                elif kind == "scalar":
                    scalar = _read_scalar(value, dtype, pname, name)
                    # a `void *` scalar says its type: the server cannot tell it from the signature
                    wire.append({"v": scalar.get("c") if isinstance(scalar, dict) else scalar, "dtype": dtype}
                                if typed else scalar)
                elif kind == "result" and obj.pointer_mode == POINTER_MODE_DEVICE:
                    wire.append({"out": interposer.address(value), "dtype": dtype})
                else:  # a result in host pointer mode, or a host output
                    _out(value, pname)
                    wire.append({"out": None, "dtype": dtype})
                    outputs.append((value, dtype))
        reply = obj.call(name, wire, wait=bool(outputs))
        if outputs:
            for (pointer, dtype), value in zip(outputs, reply[0]):
                _write_scalar(pointer, dtype, value)
        return SUCCESS

    forward.__name__ = name
    return forward


def _typed(name: str, named: dict, kind: str) -> str:
    """The dtype of a `void *` scalar: the parameter that names its type."""
    field = "resultType" if kind != "scalar" and "resultType" in named else "alphaType"
    if field in named:
        dtype = DATA_TYPES.get(named[field])
    else:
        dtype = COMPUTE_SCALES.get(named.get("computeType"))
        if dtype and named.get("Ctype") in (4, 5):  # complex C: complex scalars
            dtype = COMPLEX_OF.get(dtype)
    if dtype is None:
        raise LibraryError("CUBLAS_STATUS_NOT_SUPPORTED", f"{name}: no scalar type for {named}")
    return dtype


def _read_scalar(pointer, dtype: str, pname: str, call: str):
    if pointer == interposer.ffi.NULL:
        raise LibraryError(INVALID_VALUE, f"{call}: {pname} is NULL")
    value = interposer.ffi.cast(C_TYPES[dtype], pointer)[0]
    if dtype in ("c8", "c16"):
        return {"c": [value.x, value.y]}
    if dtype == "f2":
        return struct.unpack("<e", struct.pack("<H", value))[0]
    return value


def _write_scalar(pointer, dtype: str, value) -> None:
    target = interposer.ffi.cast(C_TYPES[dtype], pointer)
    if dtype in ("c8", "c16"):
        target[0].x, target[0].y = value
    elif dtype == "f2":
        target[0] = struct.unpack("<H", struct.pack("<e", value))[0]
    else:
        target[0] = value


def _out(pointer, what: str):
    return required(pointer, what, INVALID_VALUE)


__all__ = ["BlasHandle", "generic", "status"]
