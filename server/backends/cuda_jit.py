"""Module loading and linking through the real driver, with its JIT logs
(cuModuleLoadDataEx, then every kernel loaded at once with cuFuncLoad;
cuLinkCreate/AddData/Complete/Destroy): the cupy backend's side of
cuModuleLoadDataEx's log options and of cuLinkComplete.

CuPy binds neither the log options nor a way to read them back, so these
go through ctypes to libcuda.so.1, in the calling thread's current context
(the cupy backend makes its GPU current first).  Option numbers and the
input types are cuda.h's (CUjit_option, CUjitInputType of CUDA 13).
"""
from __future__ import annotations

import ctypes

from rcuda import fatbin
from rcuda.errors import CudaError, cudaError

from .cuda_status import driver_status

CU_JIT_INFO_LOG_BUFFER = 3
CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4
CU_JIT_ERROR_LOG_BUFFER = 5
CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6
JIT_INPUT_TYPES = {fatbin.KIND_CUBIN: 0, fatbin.KIND_PTX: 1, "fatbin": 2}  # CU_JIT_INPUT_*
LOG_BYTES = 64 << 10


class _Logs:
    """The four log options of one JIT call, and what the driver wrote."""

    def __init__(self):
        self._info = ctypes.create_string_buffer(LOG_BYTES)
        self._error = ctypes.create_string_buffer(LOG_BYTES)
        self.count = 4
        self.options = (ctypes.c_int * 4)(CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
                                          CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
        self.values = (ctypes.c_void_p * 4)(ctypes.addressof(self._info), LOG_BYTES,
                                            ctypes.addressof(self._error), LOG_BYTES)

    @property
    def info(self) -> str:
        return self._info.value.decode(errors="replace")

    def fail(self, status: int, what: str) -> CudaError:
        """The CudaError for a failed call: the driver's error log, or its status."""
        text = self._error.value.decode(errors="replace").strip()
        return CudaError(driver_status(status), text or f"{what} failed with CUresult {status}")


def _driver():
    lib = ctypes.CDLL("libcuda.so.1")
    pointer, size_t, uint = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint
    signatures = {
        "cuModuleLoadDataEx": [ctypes.POINTER(pointer), pointer, uint, pointer, pointer],
        "cuLinkCreate_v2": [uint, pointer, pointer, ctypes.POINTER(pointer)],
        "cuLinkAddData_v2": [pointer, ctypes.c_int, pointer, size_t, ctypes.c_char_p, uint, pointer, pointer],
        "cuLinkComplete": [pointer, ctypes.POINTER(pointer), ctypes.POINTER(size_t)],
        "cuLinkDestroy": [pointer],
    }
    if hasattr(lib, "cuFuncLoad"):  # CUDA 12.4 on
        signatures.update(cuModuleGetFunctionCount=[ctypes.POINTER(uint), pointer],
                          cuModuleEnumerateFunctions=[ctypes.POINTER(pointer), uint, pointer], cuFuncLoad=[pointer])
    for name, argtypes in signatures.items():
        getattr(lib, name).argtypes = argtypes
        getattr(lib, name).restype = ctypes.c_int
    return lib


def _as_loaded(image: bytes) -> tuple[int, bytes]:
    """(CUjitInputType, the bytes the driver reads): PTX must end in a NUL."""
    kind = fatbin.image_kind(image[:4])
    if kind == "wrapper":
        raise CudaError(cudaError.cudaErrorInvalidKernelImage, "a fatbin wrapper, not an image")
    if kind == fatbin.KIND_PTX:
        image = image.rstrip(b"\0") + b"\0"
    return JIT_INPUT_TYPES[kind], image


def load_module(image: bytes) -> tuple[int, str]:
    """(the CUmodule, the info log) of an image loaded into the current context."""
    _, data = _as_loaded(image)
    logs, module = _Logs(), ctypes.c_void_p()
    buffer = ctypes.create_string_buffer(data, len(data))
    lib = _driver()
    status = lib.cuModuleLoadDataEx(ctypes.byref(module), buffer, logs.count, logs.options, logs.values)
    if status:
        raise logs.fail(status, "cuModuleLoadDataEx")
    _load_functions(lib, module.value)
    return module.value, logs.info


def _load_functions(lib, module: int) -> None:
    """Every kernel of a module loaded now, as the program starts using it,
    rather than at its first launch.  Loaded lazily (CUDA_MODULE_LOADING=LAZY,
    Linux's default since CUDA 12.2), a kernel's loading may synchronise the
    whole context (the CUDA Programming Guide's lazy loading hazards): its
    first launch would wait for every kernel still running, those of other
    streams too.  A failure here is left to the launch to report."""
    if not hasattr(lib, "cuFuncLoad"):
        return  # a driver older than 12.4: loaded as it likes
    count = ctypes.c_uint()
    if lib.cuModuleGetFunctionCount(ctypes.byref(count), module) or not count.value:
        return
    functions = (ctypes.c_void_p * count.value)()
    if lib.cuModuleEnumerateFunctions(functions, count.value, module):
        return
    for function in functions:
        lib.cuFuncLoad(function)


def link(inputs: list[tuple[str, bytes]]) -> tuple[bytes, str]:
    """(the linked cubin, the info log) of (name, image) inputs."""
    lib, logs, state = _driver(), _Logs(), ctypes.c_void_p()
    status = lib.cuLinkCreate_v2(logs.count, logs.options, logs.values, ctypes.byref(state))
    if status:
        raise logs.fail(status, "cuLinkCreate")
    try:
        for name, image in inputs:
            kind, data = _as_loaded(image)
            buffer = ctypes.create_string_buffer(data, len(data))
            status = lib.cuLinkAddData_v2(state, kind, buffer, len(data), name.encode(), 0, None, None)
            if status:
                raise logs.fail(status, f"cuLinkAddData({name})")
        cubin, size = ctypes.c_void_p(), ctypes.c_size_t()
        status = lib.cuLinkComplete(state, ctypes.byref(cubin), ctypes.byref(size))
        if status:
            raise logs.fail(status, "cuLinkComplete")
        return ctypes.string_at(cubin, size.value), logs.info  # copied: the state owns the cubin
    finally:
        lib.cuLinkDestroy(state)
